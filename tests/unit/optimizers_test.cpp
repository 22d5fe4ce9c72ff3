// test-links: mt_train
// The optimizers behind optim/optimizer.h against references
// (tools/make_optimizer_fixture.py): SGD and Nesterov SGD against PyTorch's
// torch.optim.SGD run in f32, LARS (NVIDIA's LARC over SGD) and LAMB (You et
// al. 2020) against float64 implementations, three steps with changing
// learning rates and a gradient scale, on four tensors: two matrices (decayed
// and adapted), a bias (excluded from both) and a tensor that starts at zero
// (trust ratio 1). Tolerance 1e-6 of each tensor's scale: an f32 update lands
// within a few ulps of the float64 one (measured: at most 2.2e-7, at every ISA level); a wrong term
// (a missing decay, a ratio on the bias, momentum placed differently) is
// 1e-3 or more. Also: the state names checkpoints use, model state left
// alone, per-layer norms split into slots, and the clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "meshtrain/ckpt/model_checkpoint.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/optim/lamb.h"
#include "meshtrain/optim/lars.h"
#include "meshtrain/optim/optimizer.h"
#include "test_paths.h"

using namespace meshtrain;

namespace {

const std::vector<std::string> kNames{"w1", "b1", "w2", "z"};
const std::vector<float> kLrs{0.1f, 0.05f, 0.02f};
const std::vector<float> kScales{1.0f, 0.5f, 1.0f};

const SafetensorsFile& reference() {
  static const SafetensorsFile f = SafetensorsFile::open(
      std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/optimizer_reference.safetensors");
  return f;
}

std::vector<float> values(const std::string& name) {
  const Tensor t = reference().read(name);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// w1 (8, 6) | b1 (6) | w2 (5, 7) | z (4): the fixture's tensors in one buffer.
ParamLayout fixture_layout() {
  ParamLayout l;
  int64_t at = 0;
  for (const std::string& n : kNames) {
    const Tensor t = reference().read("init." + n);
    ParamInfo p{n, t.shape(), at, 0, n != "b1", false};
    l.params.push_back(p);
    at += t.numel();
  }
  l.numel = at;
  l.units.push_back({"all", 0, at});
  return l;
}

std::vector<float> flat(const ParamLayout& l, const std::string& prefix) {
  std::vector<float> out;
  for (const ParamInfo& p : l.params) {
    const std::vector<float> v = values(prefix + p.name);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

void expect_close(const std::string& what, const float* got, const std::vector<float>& want) {
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / std::max(scale, 1e-30));
  EXPECT_LE(worst, 1e-6) << what << ": worst |diff| / scale " << worst;
}

// Three fixture steps of `cfg` over the whole buffer, then each tensor and
// each state tensor against case `c`.
void check_case(const std::string& c, OptimizerConfig cfg) {
  SCOPED_TRACE(c);
  const ParamLayout l = fixture_layout();
  std::vector<float> params = flat(l, "init.");
  auto opt = make_optimizer(cfg, 0, l.numel, l, Device::cpu());
  for (size_t s = 0; s < kLrs.size(); ++s) {
    const std::vector<float> g = flat(l, "grad." + std::to_string(s) + ".");
    opt->step(params.data(), g.data(), kLrs[s], kScales[s]);
  }
  EXPECT_EQ(opt->steps_taken(), 3);
  for (const ParamInfo& p : l.params) {
    expect_close(p.name, params.data() + p.begin, values(c + ".param." + p.name));
    for (const OptimizerState& st : opt->state())
      expect_close(st.name + "." + p.name, st.tensor->data<float>() + p.begin,
                   values(c + "." + st.name + "." + p.name));
  }
}

OptimizerConfig config(const std::string& type) {
  OptimizerConfig c;
  c.type = type;
  c.weight_decay = 0.01f;
  c.momentum = 0.9f;
  c.trust_coefficient = 0.02f;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = type == "lamb" ? 1e-6f : 1e-8f;
  c.trust_clip = 10.0f;
  return c;
}

}  // namespace

TEST(optimizers, sgd_matches_pytorch) { check_case("sgd", config("sgd")); }

TEST(optimizers, nesterov_sgd_matches_pytorch) {
  OptimizerConfig c = config("sgd");
  c.nesterov = true;
  check_case("sgd_nesterov", c);
}

TEST(optimizers, lars_matches_reference) { check_case("lars", config("lars")); }

TEST(optimizers, lamb_matches_reference) { check_case("lamb", config("lamb")); }

TEST(optimizers, state_names_and_counts) {
  const ParamLayout l = fixture_layout();
  auto names = [&](const std::string& type) {
    std::vector<std::string> out;
    for (const OptimizerState& s : make_optimizer(config(type), 0, l.numel, l, Device::cpu())->state())
      out.push_back(s.name);
    return out;
  };
  EXPECT_EQ(names("adamw"), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(names("lamb"), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(names("sgd"), (std::vector<std::string>{"momentum"}));
  EXPECT_EQ(names("lars"), (std::vector<std::string>{"momentum"}));
  for (const std::string& t : optimizer_types())
    EXPECT_EQ(config(t).states_per_param(), static_cast<int>(names(t).size())) << t;
}

// Batch norm's running statistics share the buffer: no optimizer moves them.
TEST(optimizers, model_state_is_left_alone) {
  ParamLayout l = fixture_layout();
  l.params[3].trained = false;
  l.params[3].decay = false;
  for (const std::string& t : optimizer_types()) {
    std::vector<float> params(static_cast<size_t>(l.numel), 0.5f), grads(params.size(), 0.25f);
    auto opt = make_optimizer(config(t), 0, l.numel, l, Device::cpu());
    for (int s = 0; s < 2; ++s) opt->step(params.data(), grads.data(), 0.1f);
    for (int64_t i = l.params[3].begin; i < l.numel; ++i) EXPECT_EQ(params[i], 0.5f) << t << " " << i;
    EXPECT_NE(params[0], 0.5f) << t;
  }
}

// The per-layer norms of a buffer cut into data-parallel slots that split
// layers (as ZeRO ranges do) equal the uncut ones: a slot's pieces are summed
// and the slots added.
TEST(optimizers, layer_norms_add_pieces_across_slots) {
  const ParamLayout l = fixture_layout();
  std::vector<float> a = flat(l, "init."), b = a;
  const std::vector<float> g = flat(l, "grad.0.");
  for (const std::string& t : {std::string("lars"), std::string("lamb")}) {
    auto whole = make_optimizer(config(t), 0, l.numel, l, Device::cpu());
    auto cut = make_optimizer(config(t), 0, l.numel, l, Device::cpu());
    NormGroup slots;
    slots.slots = {{0, 20}, {20, 51}, {51, l.numel}};  // cuts w1 and w2
    cut->set_norm_group(slots);
    whole->step(a.data(), g.data(), 0.1f);
    cut->step(b.data(), g.data(), 0.1f);
    // Each piece's squares are summed in f32 chunks (sum_squares), so the
    // norms differ in their last bits: 1e-6 of each value.
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-6f * std::fabs(a[i]) + 1e-9f) << t << " " << i;
  }
}

// LAMB's trust ratio is clipped at trust_clip; LARS's ratio follows eta.
TEST(optimizers, trust_ratios) {
  const ParamLayout l = fixture_layout();
  // Adam's update has elements near +-1 (||u|| ~ sqrt(n)): weights 100x
  // larger give ||w|| / ||u|| ~ 50.
  std::vector<float> params = flat(l, "init.");
  for (float& p : params) p *= 100.0f;
  std::vector<float> tiny(params.size(), 1e-4f);
  OptimizerConfig c = config("lamb");
  c.trust_clip = 2.0f;
  Lamb lamb(0, l.numel, tensor_segments(l), c);
  lamb.step(params.data(), tiny.data(), 0.01f);
  EXPECT_EQ(lamb.trust_ratios()[0], 2.0);   // w1: clipped
  EXPECT_EQ(lamb.trust_ratios()[1], 1.0);   // b1: excluded
  EXPECT_EQ(lamb.trust_ratios()[3], 1.0);   // z: ||w|| = 0
  Lars lars(0, l.numel, tensor_segments(l), config("lars"));
  std::vector<float> p2 = flat(l, "init."), g = flat(l, "grad.0.");
  lars.step(p2.data(), g.data(), 0.1f);
  EXPECT_GT(lars.trust_ratios()[0], 0.0);
  EXPECT_NE(lars.trust_ratios()[0], 1.0);
  EXPECT_EQ(lars.trust_ratios()[1], 1.0);
}

TEST(optimizers, exclude_norms_and_biases_false_decays_them_too) {
  const ParamLayout l = fixture_layout();
  std::vector<float> a = flat(l, "init."), b = a;
  std::vector<float> zero(a.size(), 0.0f);
  OptimizerConfig c = config("sgd");
  c.momentum = 0;
  make_optimizer(c, 0, l.numel, l, Device::cpu())->step(a.data(), zero.data(), 0.1f);
  c.exclude_norms_and_biases = false;
  make_optimizer(c, 0, l.numel, l, Device::cpu())->step(b.data(), zero.data(), 0.1f);
  const int64_t bias = l.params[1].begin;
  EXPECT_EQ(a[bias], flat(l, "init.")[bias]);  // excluded: no decay
  EXPECT_NE(b[bias], a[bias]);                 // decayed
}

TEST(optimizers, unknown_type_is_refused) {
  const ParamLayout l = fixture_layout();
  try {
    make_optimizer(config("adagrad"), 0, l.numel, l, Device::cpu());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adamw, sgd, lars or lamb"), std::string::npos) << e.what();
  }
}

// A checkpoint written by another optimizer: refused with both names and the way out.
TEST(optimizers, resuming_with_another_optimizer_is_refused) {
  const ParamLayout l = fixture_layout();
  auto sgd = make_optimizer(config("sgd"), 0, l.numel, l, Device::cpu());
  ckpt::ResumeResult r;
  r.dir = "/ckpt/step_00000040";
  r.index.optimizer = {{"type", "adamw"}, {"range", {0, l.numel}}};
  r.index.optimizer_steps = 40;
  try {
    ckpt::apply_optimizer_state(r, sgd.get());
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("adamw optimizer"), std::string::npos) << m;
    EXPECT_NE(m.find("\"sgd\""), std::string::npos) << m;
    EXPECT_NE(m.find("init_from"), std::string::npos) << m;
  }
  r.index.optimizer["type"] = "sgd";
  ckpt::apply_optimizer_state(r, sgd.get());
  EXPECT_EQ(sgd->steps_taken(), 40);
}
