// test-links: meshtrain
// ZeRO under bf16 mixed precision (parallel/zero_parameters.h): the f32
// master weights are sharded with the optimizer state, the 16-bit compute
// copy is what every rank holds (stages 1-2) or gathers per unit (stage 3).
//   - memory: each rank's measured model-state bytes (the allocator's peaks,
//     memory.json) are within 5% of the ZeRO paper's formulas with f32
//     gradients (g = 4): stage 1 (2+4)Ψ + 12Ψ/N, stage 2 2Ψ + 16Ψ/N,
//     stage 3 18Ψ/N; and equal, per category, to what `meshtrain train`
//     predicts (which adds the few parameters read in f32);
//   - equivalence: every stage trains what bf16 stage 0 (data parallelism,
//     the model rounding its own f32 copy) trains on the same ranks;
//   - checkpoints: a bf16 stage-1 checkpoint resumes in bf16 stage 3, an
//     fp32 stage-0 one in bf16 stage 3.
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint_state.h"
#include "dp_harness.h"
#include "meshtrain/ckpt/shard_layout.h"

using namespace dp_test;

namespace {

constexpr int kSteps = 20;
// Which runs are bit-identical (see also precision_training_mp_test.cpp):
//   - stage 1 and stage 0, with or without clipping: the same bucketed f32
//     allreduce, an elementwise AdamW, each owner rounding the same f32
//     master to the same 16-bit value, and a clipping norm summed per ZeRO
//     range in rank order by every strategy (train/train_step.cpp);
//   - stage 3 and stage 2: the same reduces to the same owners; stage 3's
//     gathered 16-bit units hold the values stage 2's whole copy holds.
// Stages 2-3 differ from stage 0 by the order of f32 additions, which bf16
// rounding of the weights then amplifies chaotically (a master one f32 ulp
// off can round to the other bf16 neighbour): GPT's tied embedding is
// reduced twice (the head's part, then the lookup's), and with accumulation
// each micro-batch is reduced on its own. That difference is pinned after
// one step, element by element, by check_first_step below, where it can be
// bounded; longer runs are compared against the bit-identical partner.
constexpr double kExact = 0.0;

// Where the bf16 GEMM is not oneDNN's (a CPU without AVX512_BF16, or
// MESHTRAIN_ISA below it) and for fp16 everywhere, the 16-bit GEMMs widen to
// f32 and run on sgemm, whose auto backend is chosen per run by timing: two
// runs compared here could pick differently for a shape and differ by ~1e-4
// (seen on an AVX2-only CPU). Every run this file starts pins it.
const bool kSgemmPinned = [] { return setenv("MESHTRAIN_SGEMM", "openblas", 1) == 0; }();
const std::string kNoClip = " --set train.clip=0";

constexpr int64_t kParams = 39865;
const std::string kOddModel =
    " --set model.n_embd=35 --set model.n_head=5 --set model.seq_len=15";
const std::string kBf16 = " --set precision=bf16";

void check_memory(int n) {
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("bf16 stage " + std::to_string(stage) + " on " + std::to_string(n) + " ranks");
    RunResult r = train("zmixmem_s" + std::to_string(stage) + "_" + std::to_string(n),
                        tiny_settings(3) + kOddModel + kBf16 + " --nproc " + std::to_string(n) +
                            " --set zero.stage=" + std::to_string(stage) +
                            " --set zero.persist_threshold=0 --set train.micro_batch=1");
    ASSERT_EQ(r.status, 0) << r.log;
    const auto m = nlohmann::json::parse(slurp((r.dir / "memory.json").string()));
    ASSERT_EQ(m.size(), static_cast<size_t>(n));
    for (int rank = 0; rank < n; ++rank) {
      const nlohmann::json& peak = m[rank]["peak"];
      const double P = kParams;
      const double own = static_cast<double>(meshtrain::ckpt::shard_range(kParams, n, rank).count());
      const double params = 2 * (stage == 3 ? own : P);
      const double grads = 4 * (stage >= 2 ? own : P);
      const double optim = 12 * own;  // Adam m, v and the f32 master shard
      const double formula = params + grads + optim;
      const double measured = peak["parameters"].get<double>() + peak["gradients"].get<double>() +
                              peak["optimizer"].get<double>();
      EXPECT_NEAR(measured, formula, 0.05 * formula) << "rank " << rank;
      EXPECT_NEAR(peak["optimizer"].get<double>(), optim, 0.05 * optim) << "rank " << rank;
      EXPECT_NEAR(peak["gradients"].get<double>(), grads, 0.05 * grads) << "rank " << rank;
      // The parameters: the 16-bit copy (whole, or the own shard at stage 3)
      // plus the foreign parts of the f32-read parameters (position
      // embeddings, biases, LayerNorm): above the bare 2 bytes, within 20%.
      EXPECT_GE(peak["parameters"].get<double>(), params) << "rank " << rank;
      EXPECT_LE(peak["parameters"].get<double>(), 1.2 * params) << "rank " << rank;
      for (const char* cat : {"parameters", "gradients", "optimizer"})
        EXPECT_EQ(peak[cat].get<double>(), m[rank]["predicted"][cat].get<double>())
            << "rank " << rank << " " << cat;
    }
  }
}

RunResult bf16_run(const std::string& name, int stage, int n, int mb, int accum,
                   const std::string& extra = "") {
  return train(name, tiny_settings(kSteps) + kBf16 + " --nproc " + std::to_string(n) +
                         " --set zero.stage=" + std::to_string(stage) +
                         " --set zero.persist_threshold=0 --set train.micro_batch=" +
                         std::to_string(mb) + " --set train.grad_accum=" + std::to_string(accum) +
                         extra);
}

// Largest relative difference of the losses (matched by step; `a` may have
// resumed later than `b` started) and of the final parameter tensors.
double max_relative_difference(const RunResult& a, const RunResult& b) {
  const auto x = a.metrics(), y = b.metrics();
  EXPECT_FALSE(x.empty());
  double worst = 0;
  std::map<int, nlohmann::json> by_step;
  for (const auto& row : y) by_step[row["step"].get<int>()] = row;
  for (const auto& row : x) {
    const int step = row["step"];
    EXPECT_TRUE(by_step.count(step)) << "step " << step << " missing in " << b.dir;
    if (!by_step.count(step)) continue;
    const nlohmann::json& other = by_step[step];
    const double la = row["loss"], lb = other["loss"];
    worst = std::max(worst, std::abs(la - lb) / std::abs(lb));
    if (row.contains("val_loss")) {
      const double va = row["val_loss"], vb = other["val_loss"];
      worst = std::max(worst, std::abs(va - vb) / std::abs(vb));
    }
  }
  auto fa = meshtrain::SafetensorsFile::open((a.dir / "model.safetensors").string());
  auto fb = meshtrain::SafetensorsFile::open((b.dir / "model.safetensors").string());
  EXPECT_EQ(fa.names(), fb.names());
  for (const auto& name : fb.names()) {
    const meshtrain::Tensor t = fa.read(name), u = fb.read(name);
    const auto [d, norm] = distance(t, u, 0, u.numel());
    // The key bias: no gradient in exact arithmetic, only rounding noise
    // (dp_harness.h); compared absolutely.
    worst = std::max(worst, name.ends_with("attn.c_attn.bias") ? d : d / norm);
  }
  return worst;
}

// After one step without clipping, stage 2 against stage 0, element by
// element: every tensor's first moment (AdamW's m = (1 - beta1) g) within
// the f32 roundings of reassociating its gradient's sum. Each side adds
// n ranks x accum micro-batches (x 2 for the tied embedding) in some order,
// at most that many roundings of a partial sum each, plus the average's
// scale: bounded by 2 (terms + 1) 2^-24 of the tensor's largest moment.
// Without accumulation only the tied embedding may differ.
void check_first_step(int n, int mb, int accum) {
  const std::string one = " --set train.steps=1 --set checkpoint.every=1 --set checkpoint.async=false"
                          " --set checkpoint.resume=never";
  const std::string tag = "zmix_first_" + std::to_string(n) + "_" + std::to_string(accum);
  const RunResult s0 = bf16_run(tag + "_s0", 0, n, mb, accum, kNoClip + one);
  const RunResult s2 = bf16_run(tag + "_s2", 2, n, mb, accum, kNoClip + one);
  ASSERT_EQ(s0.status, 0) << s0.log;
  ASSERT_EQ(s2.status, 0) << s2.log;
  const auto a = ckpt_state::read_flat_state(s2.dir / "ckpt" / "step_00000001");
  const auto b = ckpt_state::read_flat_state(s0.dir / "ckpt" / "step_00000001");
  for (const auto& [name, range] : b.tensors) {
    const bool tied = name == "wte.weight";
    const int terms = n * accum * (tied ? 2 : 1);
    const double d = ckpt_state::relative_to_largest(a.buffers.at("exp_avg"), b.buffers.at("exp_avg"), range);
    std::printf("first step, %d ranks x %d: %s moment differs by %.3g x 2^-24 of its largest\n", n,
                accum, name.c_str(), d / 0x1p-24);
    EXPECT_LE(d, (accum == 1 && !tied ? 0 : 2 * (terms + 1)) * 0x1p-24) << name;
  }
}

void check_equivalence(int n, int mb, int accum) {
  for (const std::string& clip : {kNoClip, std::string()}) {
    const std::string tag = std::to_string(n) + (clip.empty() ? "_clip" : "");
    RunResult runs[4];
    for (int stage = 0; stage <= 3; ++stage) {
      runs[stage] = bf16_run("zmix_s" + std::to_string(stage) + "_" + tag, stage, n, mb, accum, clip);
      ASSERT_EQ(runs[stage].status, 0) << runs[stage].log;
    }
    const std::string what = std::to_string(n) + " ranks, " + (clip.empty() ? "clip 1.0" : "no clip");
    EXPECT_EQ(max_relative_difference(runs[1], runs[0]), kExact) << "stage 1 vs 0, " << what;
    EXPECT_EQ(max_relative_difference(runs[3], runs[2]), kExact) << "stage 3 vs 2, " << what;
    // That stages 2 and 0 differ at all (the tied embedding's two reduces)
    // shows the comparison above is not between two copies of one path.
    EXPECT_GT(max_relative_difference(runs[2], runs[0]), 0.0) << what;
  }
  check_first_step(n, mb, accum);
}

std::string ckpt_of(const std::string& run) { return (workdir() / run / "ckpt").string(); }
const std::string kSave = " --set checkpoint.every=10 --set checkpoint.async=false"
                          " --set checkpoint.resume=never --set checkpoint.dir=";

}  // namespace

TEST(zero, bf16_model_state_bytes_match_formula_2_ranks) { check_memory(2); }
TEST(zero, bf16_model_state_bytes_match_formula_4_ranks) { check_memory(4); }

TEST(zero, bf16_stages_match_bf16_stage0_2_ranks) { check_equivalence(2, 2, 1); }
TEST(zero, bf16_stages_match_bf16_stage0_3_ranks_grad_accum) { check_equivalence(3, 1, 2); }

// Stage 1 saves its master shards; stage 3 on another world size (same
// global batch) continues from them. Its first resumed step computes the
// uninterrupted stage-1 run's loss from the same 16-bit weights, on 4 ranks
// of 1 sequence instead of 2 of 2: the same sums in another f32 order, a few
// hundred roundings of 2^-24 deep, so within 1e-5 (measured 1e-7). From
// then on it trains exactly what stage 2 resumed from the same files trains.
TEST(zero, bf16_checkpoint_stage1_resumes_in_bf16_stage3) {
  const RunResult a = bf16_run("zmixck_s1", 1, 2, 2, 1, kSave + ckpt_of("zmixck_s1"));
  ASSERT_EQ(a.status, 0) << a.log;
  const RunResult b = bf16_run("zmixck_s1_to_s3", 3, 4, 1, 1,
                               " --set checkpoint.resume=" + ckpt_of("zmixck_s1") + "/step_00000010");
  ASSERT_EQ(b.status, 0) << b.log;
  EXPECT_NE(b.log.find("at step 10"), std::string::npos) << b.log;
  ASSERT_EQ(b.metrics().size(), static_cast<size_t>(kSteps - 10));
  const double first = b.metrics().front()["loss"], want = a.metrics()[10]["loss"];
  std::printf("bf16 stage 1 (2 ranks) -> bf16 stage 3 (4 ranks): first resumed loss %.9g vs "
              "%.9g uninterrupted\n", first, want);
  EXPECT_NEAR(first, want, 1e-5 * want);
  const RunResult c = bf16_run("zmixck_s1_to_s2", 2, 4, 1, 1,
                               " --set checkpoint.resume=" + ckpt_of("zmixck_s1") + "/step_00000010");
  ASSERT_EQ(c.status, 0) << c.log;
  EXPECT_EQ(max_relative_difference(b, c), kExact);
}

// An fp32 stage-0 checkpoint (two ranks, data parallel) resumes in bf16
// stage 3 as in bf16 stage 0: the checkpoint holds the f32 masters, which
// both round to the same 16-bit copy, so the first resumed loss is the same
// number; after that stage 3 trains exactly what stage 2 does.
TEST(zero, fp32_checkpoint_resumes_in_bf16_stage3) {
  const RunResult a = train("zmixck_f32", tiny_settings(kSteps) + " --nproc 2 --set "
                            "train.micro_batch=2" + kSave + ckpt_of("zmixck_f32"));
  ASSERT_EQ(a.status, 0) << a.log;
  const std::string resume = " --set checkpoint.resume=" + ckpt_of("zmixck_f32") + "/step_00000010";
  const RunResult s0 = bf16_run("zmixck_f32_to_bf16_s0", 0, 2, 2, 1, resume);
  const RunResult s2 = bf16_run("zmixck_f32_to_bf16_s2", 2, 2, 2, 1, resume);
  const RunResult s3 = bf16_run("zmixck_f32_to_bf16_s3", 3, 2, 2, 1, resume);
  ASSERT_EQ(s0.status, 0) << s0.log;
  ASSERT_EQ(s2.status, 0) << s2.log;
  ASSERT_EQ(s3.status, 0) << s3.log;
  EXPECT_NE(s3.log.find("at step 10"), std::string::npos) << s3.log;
  EXPECT_EQ(s3.metrics().front()["loss"].get<double>(), s0.metrics().front()["loss"].get<double>());
  EXPECT_EQ(max_relative_difference(s3, s2), kExact);
}

// Whole-model uses mid-run (rank 0 samples and writes the model file after
// every rank gathered the f32 masters and the 16-bit copy) leave bf16
// training unchanged, every collective matches across ranks (debug
// fingerprints), and the samples are the text the bit-identical partner
// samples (stage 1: stage 0; stage 3: stage 2; the same 16-bit weights).
TEST(zero, bf16_sampling_and_saving_mid_run) {
  const std::string mid = kNoClip + " --set train.sample_every=5 --set train.save_every=7";
  const RunResult ref0 = bf16_run("zmix_sample_ref0", 0, 2, 2, 1, mid);
  const RunResult ref2 = bf16_run("zmix_sample_ref2", 2, 2, 2, 1, mid);
  ASSERT_EQ(ref0.status, 0) << ref0.log;
  ASSERT_EQ(ref2.status, 0) << ref2.log;
  auto samples = [](const std::string& log) {
    std::string out;
    for (size_t at = log.find("sample:"); at != std::string::npos; at = log.find("sample:", at + 1))
      out += log.substr(at, log.find('\n', at) - at) + "\n";
    return out;
  };
  ASSERT_FALSE(samples(ref0.log).empty()) << ref0.log;
  for (int stage : {1, 3}) {
    const RunResult& ref = stage == 1 ? ref0 : ref2;
    SCOPED_TRACE("bf16 stage " + std::to_string(stage));
    const RunResult r = train("zmix_sample_s" + std::to_string(stage),
                              tiny_settings(kSteps) + kBf16 + mid + " --nproc 2 --set zero.stage=" +
                                  std::to_string(stage) + " --set zero.persist_threshold=0 "
                                  "--set train.micro_batch=2",
                              "env MESHTRAIN_COMM_DEBUG=1");
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_EQ(samples(r.log), samples(ref.log));
    EXPECT_EQ(max_relative_difference(r, ref), kExact);
  }
}

// fp16 with dynamic loss scaling: an overflow injected on rank 1 at step 6
// makes stages 2 and 3 skip the same step and halve the scale as stage 0
// does, and stage 3 trains exactly what stage 2 does: the skipped step
// re-rounds the unchanged masters into the 16-bit copy.
TEST(zero, fp16_stage3_skips_overflow_like_stage0) {
  const std::string s = tiny_settings(12) + " --set precision=fp16 --set train.eval_every=0 "
                        "--nproc 2 --set train.micro_batch=2 --set zero.persist_threshold=0" +
                        kNoClip;
  const std::string env = "env MESHTRAIN_TEST_INJECT_INF=5:1 MESHTRAIN_COMM_DEBUG=1";
  const RunResult s0 = train("zmix_fp16_s0", s + " --set zero.stage=0", env);
  const RunResult s2 = train("zmix_fp16_s2", s + " --set zero.stage=2", env);
  const RunResult s3 = train("zmix_fp16_s3", s + " --set zero.stage=3", env);
  ASSERT_EQ(s0.status, 0) << s0.log;
  ASSERT_EQ(s2.status, 0) << s2.log;
  ASSERT_EQ(s3.status, 0) << s3.log;
  const std::string skipped = "step 6: fp16 gradients overflowed at loss scale 65536; update "
                              "skipped, loss scale now 32768";
  EXPECT_NE(s0.log.find(skipped), std::string::npos) << s0.log;
  EXPECT_NE(s2.log.find(skipped), std::string::npos) << s2.log;
  EXPECT_NE(s3.log.find(skipped), std::string::npos) << s3.log;
  EXPECT_EQ(max_relative_difference(s3, s2), kExact);
}

// Stage 3 with the layers (3,280 elements) and final LayerNorm resident below
// the threshold and the embeddings gathered: the resident units keep their
// 16-bit copy and f32-read parameters whole; training exactly as bf16
// stage 2 (the same reduces), and the parameter bytes as predicted.
TEST(zero, bf16_stage3_persistent_units) {
  const RunResult ref = bf16_run("zmix_persist_ref", 2, 3, 1, 1, kNoClip);
  const RunResult r = train("zmix_persist", tiny_settings(kSteps) + kBf16 + kNoClip +
                                                " --nproc 3 --set zero.stage=3 --set "
                                                "zero.persist_threshold=4000 --set train.micro_batch=1");
  ASSERT_EQ(ref.status, 0) << ref.log;
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("6592 elements in units under zero.persist_threshold = 4000"),
            std::string::npos) << r.log;
  EXPECT_EQ(max_relative_difference(r, ref), kExact);
  const auto m = nlohmann::json::parse(slurp((r.dir / "memory.json").string()));
  for (const auto& rank : m)
    for (const char* cat : {"parameters", "gradients", "optimizer"})
      EXPECT_EQ(rank["peak"][cat].get<double>(), rank["predicted"][cat].get<double>())
          << "rank " << rank["rank"] << " " << cat;
}
