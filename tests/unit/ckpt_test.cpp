// Sharded checkpoints in one process: round trips, shard layout, torn and
// corrupt checkpoints, retention, asynchronous snapshots, export/import.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/crc32c.h"
#include "meshtrain/ckpt/model_checkpoint.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/ckpt/resume.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/model_registry.h"

using namespace meshtrain;
using namespace meshtrain::ckpt;
namespace fs = std::filesystem;

namespace {

// A GPT with random parameters and random AdamW state.
struct RandomModel {
  GPTConfig cfg;
  Tensor flat;
  GPTParams params;
  std::unique_ptr<AdamW> opt;
  explicit RandomModel(const GPTConfig& c, uint64_t seed = 1) : cfg(c) {
    flat = Tensor::zeros({cfg.num_params()}, DType::F32);
    params = GPTParams::view(cfg, flat);
    opt = std::make_unique<AdamW>(0, cfg.num_params(),
                                  std::vector<ParamSegment>{{0, cfg.num_params(), true}}, AdamWConfig{});
    Rng rng(seed);
    for (Tensor* t : {&flat, &opt->exp_avg(), &opt->exp_avg_sq()})
      for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = rng.normal();
    opt->set_steps_taken(static_cast<int64_t>(seed) * 10);
  }
  SaveRequest request(int64_t step) {
    SaveRequest r = model_save_request(step, *GPTSpec::make(cfg), flat, opt.get());
    r.data_position = {2, step};
    r.rng = {{"state", {1, 2, 3, step}}};
    r.lr_step = step;
    r.config = {{"train", {{"lr", 0.001}}}};
    return r;
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class ckpt : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = (fs::temp_directory_path() /
             ("meshtrain_ckpt_" + std::to_string(::getpid()) + "_" + info->name())).string();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Saves `steps` synchronously from one process with the model seeded by the step.
  void save_steps(std::initializer_list<int64_t> steps, int keep_last = 0, int64_t milestones = 0) {
    WriterOptions o;
    o.root = root_;
    o.async = false;
    o.keep_last = keep_last;
    o.milestone_every = milestones;
    CheckpointWriter w(o, nullptr);
    for (int64_t s : steps) {
      RandomModel m(cfg_, static_cast<uint64_t>(s));
      w.save(m.request(s));
    }
  }
  std::string shard(int64_t step) { return step_dir(root_, step) + "/" + shard_file_name(0, 1); }

  // Resumes into a fresh model; returns the step used (-1 when none).
  int64_t resume_step(std::vector<std::string>* warnings = nullptr) {
    RandomModel m(cfg_, 999);
    ResumeOptions o;
    o.model = spec_.get();
    o.warn = [&](const std::string& s) { if (warnings) warnings->push_back(s); };
    auto r = resume_latest(root_, model_fill_requests(m.flat, m.opt.get()), o);
    if (!r) return -1;
    RandomModel want(cfg_, static_cast<uint64_t>(r->index.step));
    EXPECT_TRUE(same_bytes(m.flat, want.flat));
    EXPECT_TRUE(same_bytes(m.opt->exp_avg_sq(), want.opt->exp_avg_sq()));
    return r->index.step;
  }

  // The Error message of loading step `step` with verification.
  std::string load_error(int64_t step, const GPTConfig& model) {
    RandomModel m(model, 5);
    ResumeOptions o;
    const auto spec = GPTSpec::make(model);
    o.model = spec.get();
    try {
      load_checkpoint(step_dir(root_, step), model_fill_requests(m.flat, m.opt.get()), o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::string root_;
  GPTConfig cfg_ = gpt_preset("tiny");
  std::shared_ptr<const GPTSpec> spec_ = GPTSpec::make(cfg_);
};

}  // namespace

TEST_F(ckpt, crc32c_known_values_and_flip_detection) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard CRC32C check value
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<unsigned char> buf(100003);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131 + 7);
  const uint32_t whole = crc32c(buf.data(), buf.size());
  EXPECT_EQ(crc32c(buf.data() + 1000, buf.size() - 1000, crc32c(buf.data(), 1000)), whole);
  for (size_t pos : {size_t{0}, size_t{5}, size_t{50000}, buf.size() - 1}) {
    buf[pos] ^= 0x01;
    EXPECT_NE(crc32c(buf.data(), buf.size()), whole) << pos;
    buf[pos] ^= 0x01;
  }
}

TEST_F(ckpt, shard_ranges_cover_the_buffer_exactly) {
  for (int64_t n : {0, 1, 2, 7, 100, 101, 1000003}) {
    for (int w = 1; w <= 5; ++w) {
      int64_t at = 0;
      const int64_t chunk = (n + w - 1) / w;
      for (int r = 0; r < w; ++r) {
        ElemRange rr = shard_range(n, w, r);
        EXPECT_EQ(rr.begin, std::min(n, r * chunk)) << n << " " << w << " " << r;
        EXPECT_EQ(rr.begin, at);
        EXPECT_LE(rr.count(), chunk);
        at = rr.end;
      }
      EXPECT_EQ(at, n) << n << " " << w;
    }
  }
}

TEST_F(ckpt, save_load_round_trip_is_bit_exact) {
  RandomModel m(cfg_, 42);
  WriterOptions o;
  o.root = root_;
  o.async = false;
  {
    CheckpointWriter w(o, nullptr);
    SaveRequest r = m.request(7);
    r.loss_scaler = {{"scale", 65536.0}};
    r.mesh = {1, 1, 1};
    w.save(r);
  }
  EXPECT_EQ(read_latest_pointer(root_), 7);
  CheckpointReader reader = CheckpointReader::open(step_dir(root_, 7));
  const CheckpointIndex& x = reader.index();
  EXPECT_EQ(x.step, 7);
  EXPECT_EQ(x.world_size, 1);
  EXPECT_EQ(x.optimizer_steps, 420);
  EXPECT_EQ(x.lr_step, 7);
  EXPECT_EQ(x.loss_scaler["scale"].get<double>(), 65536.0);
  EXPECT_EQ(x.config["train"]["lr"].get<double>(), 0.001);
  EXPECT_EQ(model_description_difference(x.model, spec_->to_json()), "");
  EXPECT_EQ(x.model.value("family", ""), "gpt");
  ASSERT_EQ(x.tensors.size(), m.params.named().size());
  EXPECT_EQ(x.tensors[0].name, "wte.weight");
  EXPECT_EQ(x.tensors.back().range.end, cfg_.num_params());
  ASSERT_EQ(x.ranks.size(), 1u);
  EXPECT_EQ(x.ranks[0].data_position, (data::LoaderPosition{2, 7}));
  EXPECT_EQ(x.ranks[0].rng["state"][3].get<int>(), 7);

  RandomModel back(cfg_, 1);
  ResumeOptions ro;
  ro.model = spec_.get();
  auto res = load_checkpoint(step_dir(root_, 7), model_fill_requests(back.flat, back.opt.get()), ro);
  apply_optimizer_state(res, back.opt.get());
  EXPECT_TRUE(same_bytes(back.flat, m.flat));
  EXPECT_TRUE(same_bytes(back.opt->exp_avg(), m.opt->exp_avg()));
  EXPECT_TRUE(same_bytes(back.opt->exp_avg_sq(), m.opt->exp_avg_sq()));
  EXPECT_EQ(back.opt->steps_taken(), 420);
  EXPECT_EQ(res.state.data_position, (data::LoaderPosition{2, 7}));
  // A sub-range, as a ZeRO shard would ask for it.
  std::vector<float> part(1000);
  reader.read(kExpAvg, {123, 1123}, part.data());
  EXPECT_EQ(std::memcmp(part.data(), m.opt->exp_avg().data<float>() + 123, 4000), 0);
}

TEST_F(ckpt, index_is_written_last_and_torn_checkpoints_are_skipped) {
  save_steps({1});
  {
    WriterOptions o;
    o.root = root_;
    o.async = false;
    o.skip_index_for_testing = true;  // a crash between the shard files and the index
    CheckpointWriter w(o, nullptr);
    RandomModel m(cfg_, 2);
    w.save(m.request(2));
  }
  EXPECT_TRUE(fs::exists(shard(2)));
  EXPECT_FALSE(fs::exists(step_dir(root_, 2) + "/index.json"));
  EXPECT_EQ(read_latest_pointer(root_), 1);  // latest moves only with a complete index
  std::vector<std::string> warnings;
  auto latest = find_latest_complete(root_, [&](const std::string& s) { warnings.push_back(s); });
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("step_00000002"), std::string::npos) << warnings[0];
  auto all = list_checkpoints(root_);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_FALSE(all[1].complete);
  EXPECT_NE(all[1].problem.find("incomplete"), std::string::npos) << all[1].problem;
  EXPECT_EQ(resume_step(), 1);
}

TEST_F(ckpt, truncated_shard_is_named_and_resume_falls_back) {
  save_steps({1, 2});
  fs::resize_file(shard(2), fs::file_size(shard(2)) - 100);
  const std::string e = load_error(2, cfg_);
  EXPECT_NE(e.find(shard(2)), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  std::vector<std::string> warnings;
  EXPECT_EQ(resume_step(&warnings), 1);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("truncated"), std::string::npos) << warnings[0];
}

TEST_F(ckpt, flipped_byte_is_a_checksum_mismatch_and_resume_falls_back) {
  save_steps({1, 2});
  {
    std::fstream f(shard(2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5000, std::ios::end);
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(-5000, std::ios::end);
    f.write(&c, 1);
  }
  EXPECT_EQ(completeness_problem(step_dir(root_, 2)), "");  // sizes still match: only the CRC sees it
  const std::string e = load_error(2, cfg_);
  EXPECT_NE(e.find(shard(2)), std::string::npos) << e;
  EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
  std::vector<std::string> warnings;
  EXPECT_EQ(resume_step(&warnings), 1);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("checksum mismatch"), std::string::npos) << warnings[0];
  // Without verification the same read succeeds (the flag is honoured).
  RandomModel m(cfg_, 3);
  ResumeOptions o;
  o.verify = false;
  EXPECT_NO_THROW(load_checkpoint(step_dir(root_, 2), model_fill_requests(m.flat, m.opt.get()), o));
}

TEST_F(ckpt, missing_shard_is_named_and_resume_falls_back) {
  save_steps({1, 2});
  fs::remove(shard(2));
  const std::string e = load_error(2, cfg_);
  EXPECT_NE(e.find(shard(2)), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  EXPECT_EQ(resume_step(), 1);
}

TEST_F(ckpt, index_from_another_model_is_refused) {
  save_steps({1});
  GPTConfig other = cfg_;
  other.n_layer = 3;
  const std::string e = load_error(1, other);
  EXPECT_NE(e.find(step_dir(root_, 1) + "/index.json"), std::string::npos) << e;
  EXPECT_NE(e.find("another model"), std::string::npos) << e;
  EXPECT_NE(e.find("n_layer 2"), std::string::npos) << e;
  // Resume falls back past it to the previous checkpoint of the right model.
  {
    WriterOptions o;
    o.root = root_;
    o.async = false;
    o.keep_last = 0;
    CheckpointWriter w(o, nullptr);
    RandomModel m(other, 2);
    w.save(m.request(2));
  }
  std::vector<std::string> warnings;
  EXPECT_EQ(resume_step(&warnings), 1);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("another model"), std::string::npos) << warnings[0];
}

TEST_F(ckpt, no_checkpoint_resumes_nothing) { EXPECT_EQ(resume_step(), -1); }

TEST_F(ckpt, retention_keeps_last_k_and_milestones) {
  save_steps({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, /*keep_last=*/2, /*milestones=*/4);
  std::vector<int64_t> left;
  for (const auto& s : list_checkpoints(root_)) left.push_back(s.step);
  EXPECT_EQ(left, (std::vector<int64_t>{4, 8, 9, 10}));
  EXPECT_EQ(read_latest_pointer(root_), 10);
}

TEST_F(ckpt, retention_never_deletes_incomplete_or_newest) {
  save_steps({1, 2});
  fs::remove(step_dir(root_, 1) + "/index.json");  // step 1 torn
  auto removed = apply_retention(root_, 1, 0);
  EXPECT_TRUE(removed.empty());
  EXPECT_TRUE(fs::exists(step_dir(root_, 1)));
  EXPECT_TRUE(fs::exists(step_dir(root_, 2) + "/index.json"));
}

TEST_F(ckpt, async_save_writes_the_snapshot_not_later_values) {
  RandomModel m(cfg_, 11);
  Tensor before = Tensor::zeros({cfg_.num_params()}, DType::F32);
  before.copy_from(m.flat);
  WriterOptions o;
  o.root = root_;
  o.keep_last = 0;
  CheckpointWriter w(o, nullptr);
  w.save(m.request(1));
  // Training continues: the buffers change while the write may be running.
  for (int64_t i = 0; i < m.flat.numel(); ++i) m.flat.data<float>()[i] += 1.0f;
  w.save(m.request(2));
  for (int64_t i = 0; i < m.flat.numel(); ++i) m.flat.data<float>()[i] = -7.0f;
  w.save(m.request(3));  // a third save: waits for the oldest snapshot's write
  w.wait();
  auto stats = w.stats();
  ASSERT_EQ(stats.size(), 3u);
  for (const auto& s : stats) {
    EXPECT_GE(s.stall_s, 0.0);
    EXPECT_GT(s.write_s, 0.0);
    EXPECT_GT(s.bytes, 0u);
  }
  Tensor got = Tensor::zeros({cfg_.num_params()}, DType::F32);
  CheckpointReader::open(step_dir(root_, 1)).read(kParams, {0, cfg_.num_params()}, got.raw());
  EXPECT_TRUE(same_bytes(got, before));
  CheckpointReader::open(step_dir(root_, 3)).read(kParams, {0, cfg_.num_params()}, got.raw());
  EXPECT_EQ(got.data<float>()[0], -7.0f);
}

TEST_F(ckpt, async_background_error_surfaces_on_wait) {
  RandomModel m(cfg_, 1);
  WriterOptions o;
  o.root = root_;
  CheckpointWriter w(o, nullptr);
  // A file where the step directory must go: the background write fails.
  std::ofstream(step_dir(root_, 5)) << "x";
  w.save(m.request(5));
  try {
    w.wait();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step_00000005"), std::string::npos) << e.what();
  }
  fs::remove(step_dir(root_, 5));
  w.save(m.request(6));  // the writer keeps working after a failed save
  EXPECT_NO_THROW(w.wait());
}

TEST_F(ckpt, export_import_round_trip_is_bit_identical) {
  RandomModel m(cfg_, 3);
  // Padded vocabulary rows are not part of a model file: zero them as a loaded model has them.
  const int64_t V = cfg_.vocab_size, Vp = cfg_.padded_vocab, C = cfg_.n_embd;
  std::fill(m.params.wte.data<float>() + V * C, m.params.wte.data<float>() + Vp * C, 0.0f);
  {
    WriterOptions o;
    o.root = root_ + "/a";
    o.async = false;
    CheckpointWriter w(o, nullptr);
    w.save(m.request(4));
  }
  for (auto fmt : {ExportFormat::HuggingFace, ExportFormat::Meshtrain}) {
    const std::string file = root_ + (fmt == ExportFormat::HuggingFace ? "/hf.safetensors" : "/mt.safetensors");
    export_checkpoint(resolve_step_dir(root_ + "/a"), file, fmt);
    const std::string b = root_ + (fmt == ExportFormat::HuggingFace ? "/b_hf" : "/b_mt");
    const std::string dir = import_model_file(file, b, cfg_.n_head);
    EXPECT_EQ(dir, step_dir(b, 0));
    RandomModel back(cfg_, 77);
    auto r = load_checkpoint(dir, model_fill_requests(back.flat, back.opt.get()), {});
    apply_optimizer_state(r, back.opt.get());
    EXPECT_TRUE(same_bytes(back.flat, m.flat));
    EXPECT_EQ(back.opt->steps_taken(), 0);  // imported: fresh optimizer state
    EXPECT_EQ(back.opt->exp_avg().data<float>()[0], 0.0f);
    EXPECT_EQ(r.absent_buffers.size(), 2u);
  }
}

// init_from a checkpoint directory: a root means its newest complete
// checkpoint; the parameters arrive bit-exact (or rounded once into a 16-bit
// buffer); another model is refused naming the index.
TEST_F(ckpt, init_from_a_checkpoint_dir_loads_its_parameters) {
  save_steps({1, 2});
  fs::remove(step_dir(root_, 2) + "/index.json");  // step 2 torn: the root means step 1
  EXPECT_TRUE(is_checkpoint_path(root_));
  EXPECT_FALSE(is_checkpoint_path(shard(1)));
  const GPTConfig got = read_init_config(root_);
  EXPECT_EQ(model_description_difference(GPTSpec::make(got)->to_json(), spec_->to_json()), "");
  RandomModel m(cfg_, 77), want(cfg_, 1);
  EXPECT_EQ(load_init_weights(root_, m.params, cfg_), step_dir(root_, 1));
  EXPECT_TRUE(same_bytes(m.flat, want.flat));
  EXPECT_EQ(m.opt->steps_taken(), 770);  // the optimizer is not touched
  // A bf16 parameter buffer gets the rounded values.
  Tensor half = Tensor::zeros({cfg_.num_params()}, DType::BF16);
  load_init_weights(step_dir(root_, 1), GPTParams::view(cfg_, half), cfg_);
  EXPECT_EQ(half.data<uint16_t>()[123], f32_to_bf16(want.flat.data<float>()[123]));
  // Another model.
  GPTConfig other = cfg_;
  other.n_layer = 3;
  RandomModel o(other, 5);
  try {
    load_init_weights(root_, o.params, other);
    ADD_FAILURE() << "loading another model's checkpoint succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index.json is from another model"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_init_config(root_ + "/nothing_here"), Error);
}
