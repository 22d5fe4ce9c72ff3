// ZeRO memory: each rank's measured model-state bytes (the allocator's
// per-category peaks during training, memory.json written by `meshtrain
// train`) equal the ZeRO formula to the byte for every stage and world size
// (they were held to 5%; measured equal at the avx2 and avx512 levels):
//   stage 0 (p+g+o)Ψ, 1 (p+g)Ψ + oΨ/N, 2 pΨ + (g+o)Ψ/N, 3 (p+g+o)Ψ/N
// with p = g = 4, o = 8 (fp32 AdamW) and Ψ/N the rank's own checkpoint shard
// (ckpt::shard_range). The odd-sized model (39,865 parameters) makes the
// shards unequal. Stage 3's gathered units and stages 2/3's transient
// gradients show as communication buffers. The setup peak (before the first
// step) is predicted too: stages 0-2 build the whole fp32 model once, 4Ψ
// beside the gradients; stage 3 started from the seed initializes only its
// own range.
// test-links: meshtrain
#include <nlohmann/json.hpp>

#include <algorithm>

#include "dp_harness.h"
#include "meshtrain/ckpt/shard_layout.h"
#include "meshtrain/io/gpt_model_file.h"

using namespace dp_test;

namespace {

constexpr int64_t kParams = 39865;
const std::string kOddModel =
    " --set model.n_embd=35 --set model.n_head=5 --set model.seq_len=15";

nlohmann::json memory_of(const RunResult& r) {
  return nlohmann::json::parse(slurp((r.dir / "memory.json").string()));
}

void check_world(int n) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage) + " on " + std::to_string(n) + " ranks");
    RunResult r = train("zmem_s" + std::to_string(stage) + "_" + std::to_string(n),
                        tiny_settings(3) + kOddModel + " --nproc " + std::to_string(n) +
                            " --set zero.stage=" + std::to_string(stage) +
                            " --set zero.persist_threshold=0 --set train.micro_batch=1");
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_NE(r.log.find("model states"), std::string::npos) << r.log;
    const nlohmann::json m = memory_of(r);
    ASSERT_EQ(m.size(), static_cast<size_t>(n));
    for (int rank = 0; rank < n; ++rank) {
      const nlohmann::json& peak = m[rank]["peak"];
      const double P = kParams;
      const double own = static_cast<double>(meshtrain::ckpt::shard_range(kParams, n, rank).count());
      const double params = 4 * (stage == 3 ? own : P);
      const double grads = 4 * (stage >= 2 ? own : P);
      const double optim = 8 * (stage >= 1 ? own : P);
      const double formula = params + grads + optim;
      const double measured = peak["parameters"].get<double>() + peak["gradients"].get<double>() +
                              peak["optimizer"].get<double>();
      EXPECT_EQ(measured, formula) << "rank " << rank;
      EXPECT_EQ(peak["optimizer"].get<double>(), optim) << "rank " << rank;
      EXPECT_EQ(peak["parameters"].get<double>(), params) << "rank " << rank;
      EXPECT_EQ(peak["gradients"].get<double>(), grads) << "rank " << rank;
      // Setup: stages 0-2 build the whole model once beside the gradients
      // (or hold the model states, whichever is larger); stage 3, started
      // from the seed, initializes only its own range, so it holds its model
      // states and the first unit it gathers before the first step (the
      // embeddings, ~1/4 of this small model), never the whole model.
      // The setup peak also holds small buffers outside the model states
      // (measured 240 bytes over the prediction, under 0.1%): the setup
      // bounds allow 2%.
      const double setup = m[rank]["setup_peak_total"].get<double>();
      const double setup_predicted = m[rank]["predicted"]["setup_total"].get<double>();
      EXPECT_NEAR(setup, setup_predicted, 0.02 * setup_predicted) << "rank " << rank << " setup";
      if (stage == 3) {
        EXPECT_GE(setup, 0.98 * formula) << "rank " << rank;
        EXPECT_LE(setup, formula + 4 * P / 3) << "rank " << rank << ": more than one unit beside the states";
      } else {
        EXPECT_GE(setup, 0.98 * std::max(formula, 4 * P + grads)) << "rank " << rank;
      }
      const double comm = peak["comm"].get<double>();
      if (stage >= 2) {
        EXPECT_GT(comm, 0) << "transient gradients not counted";
        // At most every unit's gradients at once (a model this small finishes
        // backward before the first reduce returns); stage 3 adds gathered units.
        EXPECT_LE(comm, 4 * P * (stage == 3 ? 2 : 1)) << "holds more than the full model";
      }
    }
  }
}

}  // namespace

TEST(zero, model_state_bytes_match_formula_2_ranks) { check_world(2); }
TEST(zero, model_state_bytes_match_formula_3_ranks) { check_world(3); }
TEST(zero, model_state_bytes_match_formula_4_ranks) { check_world(4); }

// Started from the seed, or from a file read by range (a checkpoint
// directory, a GPT model file in meshtrain's format, a Hugging Face GPT-2
// file), mixed-precision ZeRO (every stage keeps only its own range of the
// f32 weights) and stage 3 write only that range at setup (parallel/zero.h,
// starts_from_own_range): setup never holds the whole model. An llm.c file
// loads whole: every rank reads it whole once. bf16 on 4 ranks; the measured
// setup peaks equal the prediction either way, and every file start trains alike.
TEST(zero, setup_from_the_seed_or_a_ranged_file_never_holds_the_whole_model) {
  const std::string args = tiny_settings(2) + kOddModel +
                           " --set train.micro_batch=1 --set zero.persist_threshold=0";
  RunResult base = train("zsetup_base", args + " --nproc 1 --set checkpoint.every=2");
  ASSERT_EQ(base.status, 0) << base.log;
  const std::string ckpt_dir = (base.dir / "ckpt").string();
  const std::string model_file = (base.dir / "model.safetensors").string();
  const std::string hf_file = (base.dir / "hf.safetensors").string();
  ASSERT_EQ(std::system((binary() + " ckpt export " + ckpt_dir + " --to " + hf_file +
                         " --format hf > /dev/null").c_str()), 0);
  const std::string llmc_file = (base.dir / "model.bin").string();
  {
    const meshtrain::GPTConfig cfg = meshtrain::read_gpt_config(model_file);
    meshtrain::GPT gpt(cfg);
    meshtrain::load_gpt_weights(model_file, gpt.params(), cfg);
    meshtrain::write_llmc_model(llmc_file, gpt.params(), cfg);
  }
  const std::string sources[] = {"", ckpt_dir, model_file, hf_file, llmc_file};
  const char* names[] = {"seed", "checkpoint", "gpt_file", "hf_file", "llmc_file"};
  const double P = kParams;
  for (int stage : {1, 3}) {
    double first_loss = 0;
    for (int k = 0; k < 5; ++k) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " from the " + names[k]);
      const bool whole_load = k == 4, from_file = k > 0;
      RunResult r = train("zsetup_s" + std::to_string(stage) + "_" + names[k],
                          args + " --nproc 4 --set precision=bf16 --set zero.stage=" +
                              std::to_string(stage) +
                              (from_file ? " --set init_from=" + sources[k] : std::string()));
      ASSERT_EQ(r.status, 0) << r.log;
      EXPECT_EQ(r.log.find("each rank its own range") != std::string::npos, from_file && !whole_load) << r.log;
      if (from_file) {
        // The four files hold the same weights (the base run's last step):
        // read by range or whole, the first step agrees.
        const double loss = r.metrics().at(0)["loss"].get<double>();
        if (first_loss == 0) first_loss = loss;
        // The same f32 weights, rounded to the same bf16 copy: measured equal;
        // 1e-6 relative is ~11 ulp of the loss (5.4).
        EXPECT_NEAR(loss, first_loss, 1e-6 * first_loss);
      }
      const nlohmann::json m = memory_of(r);
      ASSERT_EQ(m.size(), 4u);
      for (int rank = 0; rank < 4; ++rank) {
        const double own = static_cast<double>(meshtrain::ckpt::shard_range(kParams, 4, rank).count());
        // The whole f32 model and its 16-bit copy beside the gradients.
        const double whole = 6 * P + 4 * (stage >= 2 ? own : P);
        // Model states: the 16-bit copy (whole at stage 1), the gradients
        // (whole at stage 1), the own f32 masters and AdamW moments.
        const double states = (stage == 1 ? 6 * P : 6 * own) + 12 * own;
        const double setup = m[rank]["setup_peak_total"].get<double>();
        const double predicted = m[rank]["predicted"]["setup_total"].get<double>();
        // A file's reader stages one tensor at a time: the prediction counts
        // a bound, three copies of the largest, wte (256 x 35 f32), and the
        // measured peak lies between the buffers alone and that.
        // The 2% and 3% slacks: small buffers outside the formula, as above;
        // measured within 0.2% of the prediction, at most 98.5% of the
        // 1.03 bound.
        const double staging = from_file ? 3 * 4 * 256 * 35 : 0;
        EXPECT_GE(setup, 0.98 * (predicted - staging)) << "rank " << rank;
        EXPECT_LE(setup, 1.02 * predicted) << "rank " << rank;
        if (whole_load) {
          EXPECT_GE(setup, 0.98 * whole) << "rank " << rank;
        } else {
          // Stage 3 gathers its first unit (under a quarter of the model) before the first step.
          EXPECT_LE(setup, 1.03 * states + (stage == 3 ? 4 * P / 4 : 0) + staging) << "rank " << rank;
          EXPECT_LT(setup, whole) << "rank " << rank << ": a whole model during setup";
        }
      }
    }
  }
}
