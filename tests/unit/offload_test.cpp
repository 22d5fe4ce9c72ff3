// test-links: mt_train
// Optimizer state offloaded to disk (optim/offloaded_optimizer.h) against the
// same optimizer in memory: every optimizer, units small enough that layers
// are cut into pieces (AdamW, SGD) or held whole (LARS, LAMB), every prefetch
// depth. The parameters and the state must be bit-identical after each
// step: the offload moves the state, it must not change one bit of the
// arithmetic. Also: state() read and refilled as a checkpoint does, the
// resident bytes (the staging buffers only), the plan's units, the errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "meshtrain/core/memory.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/optim/offloaded_optimizer.h"
#include "meshtrain/optim/optimizer.h"

using namespace meshtrain;

namespace {

// Tensors of mixed sizes: matrices (decayed), biases and norms (not), one
// model-state buffer (not trained), and one matrix larger than a unit.
ParamLayout test_layout() {
  ParamLayout l;
  const std::vector<std::pair<Shape, bool>> shapes{
      {{96, 40}, true}, {{40}, false}, {{300, 64}, true}, {{64}, false},
      {{7, 33}, true},  {{128}, false}, {{50, 50}, true}, {{33}, false}};
  int64_t at = 0;
  int i = 0;
  for (const auto& [shape, decay] : shapes) {
    ParamInfo p;
    p.name = fmt::format("p{}", i++);  // "p" + to_string: a GCC 12 -Wstringop-overflow false alarm
    p.shape = shape;
    p.begin = at;
    p.decay = decay;
    l.params.push_back(p);
    at += shape_numel(shape);
  }
  l.numel = at;
  l.units.push_back({"all", 0, at});
  return l;
}

std::vector<float> random_values(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

OptimizerConfig config(const std::string& type, int prefetch) {
  OptimizerConfig c;
  c.type = type;
  c.nesterov = type == "sgd";
  c.offload.optimizer_state = "disk";
  c.offload.unit_mb = 0.04;  // 10k-element units (5k for two-state optimizers): many of them
  c.offload.prefetch = prefetch;
  return c;
}

void expect_same(const std::string& what, const float* a, const float* b, int64_t n) {
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, 4) != 0 && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << n << " elements differ, first at "
                       << first << " (" << a[first < 0 ? 0 : first] << " vs "
                       << b[first < 0 ? 0 : first] << ")";
}

void expect_same_state(Optimizer& mem, Optimizer& off, int64_t n, const std::string& what) {
  const std::vector<OptimizerState> a = mem.state(), b = off.state();
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].name, b[k].name);
    expect_same(what + " state " + a[k].name, a[k].tensor->data<float>(), b[k].tensor->data<float>(), n);
  }
}

// Steps the optimizer in memory and offloaded over [begin, end) from the same
// start and compares parameters (and the state every other step).
void run_side_by_side(const std::string& type, int prefetch, int64_t begin, int64_t end) {
  const ParamLayout layout = test_layout();
  const int64_t n = layout.numel;
  OptimizerConfig off_cfg = config(type, prefetch), mem_cfg = off_cfg;
  mem_cfg.offload.optimizer_state = "none";
  auto mem = make_optimizer(mem_cfg, begin, end, layout, Device::cpu());
  auto off = make_optimizer(off_cfg, begin, end, layout, Device::cpu());
  ASSERT_NE(dynamic_cast<OffloadedOptimizer*>(off.get()), nullptr);
  EXPECT_EQ(off->type(), type);
  EXPECT_EQ(off->hyperparameters(), mem->hyperparameters());
  std::vector<float> pa = random_values(n, 1, 0.5f), pb = pa;
  const std::string what = type + " prefetch " + std::to_string(prefetch);
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> g = random_values(n, 100 + step, 0.1f);
    const float lr = 0.05f / (1 + step), scale = step == 2 ? 0.5f : 1.0f;
    mem->step(pa.data(), g.data(), lr, scale);
    off->step(pb.data(), g.data(), lr, scale);
    expect_same(what + " parameters after step " + std::to_string(step + 1), pa.data(), pb.data(), n);
    if (step % 2 == 1) expect_same_state(*mem, *off, end - begin, what);
  }
  EXPECT_EQ(off->steps_taken(), 5);
}

}  // namespace

TEST(Offload, every_optimizer_is_bit_identical_to_its_in_memory_run) {
  const int64_t n = test_layout().numel;
  for (const std::string type : {"adamw", "sgd", "lars", "lamb"})
    for (int prefetch : {0, 1, 3}) run_side_by_side(type, prefetch, 0, n);
}

TEST(Offload, a_range_that_cuts_tensors_is_bit_identical_too) {
  // A ZeRO rank's range starts and ends inside tensors.
  for (const std::string type : {"adamw", "sgd"}) run_side_by_side(type, 2, 3001, 24001);
}

TEST(Offload, units_hold_whole_layers_or_block_multiples) {
  const ParamLayout layout = test_layout();
  for (const std::string type : {"adamw", "lamb"}) {
    const OffloadPlan p = plan_offload(config(type, 2), 0, layout.numel, layout);
    ASSERT_GT(p.units.size(), 2u) << type;
    EXPECT_EQ(p.units.front().begin, 0);
    EXPECT_EQ(p.units.back().end, layout.numel);
    int64_t file = 0, largest = 0;
    for (size_t i = 0; i < p.units.size(); ++i) {
      const OffloadUnit& u = p.units[i];
      if (i > 0) {
        EXPECT_EQ(u.begin, p.units[i - 1].end) << type << " unit " << i;
      }
      EXPECT_EQ(u.offset, file);
      EXPECT_EQ(u.padded % StateFile::kAlign, 0);
      EXPECT_GE(u.padded, 4 * (u.end - u.begin));
      file += p.states * u.padded;
      largest = std::max(largest, u.padded);
      // LAMB's trust ratio needs a layer whole: units start at tensors; AdamW
      // may cut a large tensor, at whole blocks of its elements.
      const ParamInfo* in = nullptr;
      for (const ParamInfo& t : layout.params)
        if (t.begin <= u.begin && u.begin < t.begin + shape_numel(t.shape)) in = &t;
      ASSERT_NE(in, nullptr);
      if (type == "lamb") EXPECT_EQ(in->begin, u.begin) << "unit " << i;
      else EXPECT_EQ((u.begin - in->begin) % (StateFile::kAlign / 4), 0) << "unit " << i;
    }
    EXPECT_EQ(p.file_bytes, file);
    EXPECT_EQ(p.slots, 3);
    EXPECT_EQ(p.staging_bytes, 3 * p.states * largest);
  }
}

TEST(Offload, no_more_staging_buffers_than_units) {
  const ParamLayout layout = test_layout();
  OptimizerConfig c = config("adamw", 4);
  c.offload.unit_mb = 100;  // one unit holds everything
  const OffloadPlan p = plan_offload(c, 0, layout.numel, layout);
  ASSERT_EQ(p.units.size(), 1u);
  EXPECT_EQ(p.slots, 1);
  EXPECT_EQ(p.staging_bytes, p.file_bytes);
  run_side_by_side("adamw", 4, 0, layout.numel);  // prefetch 4 over many units: the same numbers
}

TEST(Offload, only_the_staging_buffers_are_resident) {
  const ParamLayout layout = test_layout();
  const int64_t n = layout.numel;
  const int64_t before = mem_stats().current[static_cast<size_t>(MemCategory::OptimizerState)];
  auto off = make_optimizer(config("adamw", 1), 0, n, layout, Device::cpu());
  auto* o = dynamic_cast<OffloadedOptimizer*>(off.get());
  ASSERT_NE(o, nullptr);
  const int64_t resident =
      mem_stats().current[static_cast<size_t>(MemCategory::OptimizerState)] - before;
  EXPECT_EQ(resident, o->plan().staging_bytes);
  EXPECT_LT(resident, 8 * n / 3) << "staging should be a small part of the 2 x 4 bytes per element";
  EXPECT_GE(o->file().bytes(), 8 * n);
  std::vector<float> p = random_values(n, 1, 1.0f), g = random_values(n, 2, 1.0f);
  off->step(p.data(), g.data(), 0.01f);
  EXPECT_EQ(o->transfers().bytes_read(), o->file().bytes());
  EXPECT_EQ(o->transfers().bytes_written(), o->file().bytes());
}

TEST(Offload, checkpoint_reads_and_refills_the_state_through_state) {
  // A checkpoint saves state() and a resume fills it and sets the step
  // count; the next update must start from the filled values.
  const ParamLayout layout = test_layout();
  const int64_t n = layout.numel;
  OptimizerConfig off_cfg = config("lamb", 2), mem_cfg = off_cfg;
  mem_cfg.offload.optimizer_state = "none";
  auto mem = make_optimizer(mem_cfg, 0, n, layout, Device::cpu());
  auto off = make_optimizer(off_cfg, 0, n, layout, Device::cpu());
  for (auto* o : {mem.get(), off.get()}) {
    const std::vector<OptimizerState> st = o->state();
    for (size_t k = 0; k < st.size(); ++k) {
      const std::vector<float> v = random_values(n, 7 + k, 0.01f);
      for (int64_t i = 0; i < n; ++i) st[k].tensor->data<float>()[i] = std::fabs(v[i]);
    }
    o->set_steps_taken(11);
  }
  std::vector<float> pa = random_values(n, 3, 0.5f), pb = pa;
  const std::vector<float> g = random_values(n, 4, 0.1f);
  mem->step(pa.data(), g.data(), 0.01f);
  off->step(pb.data(), g.data(), 0.01f);
  expect_same("parameters after a refill", pa.data(), pb.data(), n);
  expect_same_state(*mem, *off, n, "after a refill");
  EXPECT_EQ(off->steps_taken(), 12);
}

TEST(Offload, a_missing_directory_is_a_clear_error) {
  const ParamLayout layout = test_layout();
  OptimizerConfig c = config("adamw", 2);
  c.offload.path = "/nonexistent/offload/dir";
  try {
    make_optimizer(c, 0, layout.numel, layout, Device::cpu());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload.path = \"/nonexistent/offload/dir\""),
              std::string::npos) << e.what();
  }
}
