// test-links: meshtrain
// ZeRO-3's memory peak at the backward head (nn/gpt.h: the tied embedding's
// gradient is written between GradBegin 0 and GradEnd 0, after Done 0): a
// rank holds the whole tied embedding gathered or its whole transient
// gradient, never both. Model: a 8192-token vocabulary on a 32-wide model,
// so the embedding is ~90% of the parameters and dominates every transient.
// Per rank, from the allocator's own counters (memory.json peaks, real
// processes): the communication buffers (stage 3's gathered parameters and
// stages 2/3's transient gradients) peak
//   - at least at the embedding's gradient (it is really counted),
//   - below the gathered foreign part of wte plus the wte gradient (what
//     holding both takes: the peak before GradBegin/GradEnd existed),
//   - at most at `meshtrain train`'s prediction, which also stays below it.
// With gradient accumulation the prediction holds too: the next
// micro-batch's embedding is not prefetched beside the last layer's backward
// (model: embedding ~ 2.6 layers, 4 ranks, so a rank owning none of it would
// exceed the prediction by ~40% with that prefetch).
#include <nlohmann/json.hpp>

#include "dp_harness.h"
#include "meshtrain/ckpt/shard_layout.h"

using namespace dp_test;

namespace {

constexpr int64_t kVocab = 8192, kEmbd = 32, kSeq = 16;  // 8192 = padded vocabulary
const std::string kModel = " --set model.vocab_size=8192 --set model.n_embd=32 "
                           "--set model.n_head=4 --set model.seq_len=16";

void check_head(const std::string& precision, int n) {
  SCOPED_TRACE(precision + " stage 3 on " + std::to_string(n) + " ranks");
  const RunResult r = train("zhead_" + precision + "_" + std::to_string(n),
                            tiny_settings(2) + kModel + " --nproc " + std::to_string(n) +
                                " --set precision=" + precision +
                                " --set zero.stage=3 --set zero.persist_threshold=0 "
                                "--set train.micro_batch=1 --set train.eval_every=0");
  ASSERT_EQ(r.status, 0) << r.log;
  const auto m = nlohmann::json::parse(slurp((r.dir / "memory.json").string()));
  ASSERT_EQ(m.size(), static_cast<size_t>(n));
  // The embedding unit (wte, wpe) leads the flat buffer: layers 2 x (12C^2 +
  // 13C), the final LayerNorm 2C (gpt_params.cpp).
  const int64_t u0 = kVocab * kEmbd + kSeq * kEmbd;
  const int64_t P = u0 + 2 * (12 * kEmbd * kEmbd + 13 * kEmbd) + 2 * kEmbd;
  const double p = precision == "fp32" ? 4 : 2;  // bytes of a gathered wte element
  for (int rank = 0; rank < n; ++rank) {
    const auto own = meshtrain::ckpt::shard_range(P, n, rank);
    const int64_t wte = kVocab * kEmbd;  // [0, wte) of the flat buffer
    const int64_t own_wte = std::max<int64_t>(0, std::min(own.end, wte) - own.begin);
    const double foreign_wte = p * static_cast<double>(wte - own_wte);
    const double grad = 4.0 * u0;
    const double comm = m[rank]["peak"]["comm"].get<double>();
    const double predicted = m[rank]["predicted"]["comm"].get<double>();
    ASSERT_GT(foreign_wte, 0.25 * grad) << "rank " << rank << ": the test needs a foreign wte part";
    EXPECT_GE(comm, grad) << "rank " << rank << ": the embedding's gradient is not counted";
    EXPECT_LT(comm, foreign_wte + grad)
        << "rank " << rank << ": gathered wte and its gradient held at the same time";
    EXPECT_LE(comm, predicted) << "rank " << rank;
    EXPECT_LT(predicted, foreign_wte + grad) << "rank " << rank;
  }
}

void check_accumulation() {
  const RunResult r = train("zhead_accum", tiny_settings(2) +
                                               " --set model.vocab_size=2048 --set model.n_embd=64 "
                                               "--set model.n_head=4 --set model.seq_len=16 "
                                               "--nproc 4 --set zero.stage=3 "
                                               "--set zero.persist_threshold=0 "
                                               "--set train.micro_batch=1 --set train.grad_accum=2 "
                                               "--set train.eval_every=0");
  ASSERT_EQ(r.status, 0) << r.log;
  const auto m = nlohmann::json::parse(slurp((r.dir / "memory.json").string()));
  ASSERT_EQ(m.size(), 4u);
  for (const auto& rank : m)
    EXPECT_LE(rank["peak"]["comm"].get<double>(), rank["predicted"]["comm"].get<double>())
        << "rank " << rank["rank"];
}

}  // namespace

TEST(zero, stage3_head_holds_wte_or_its_gradient_never_both_fp32) { check_head("fp32", 2); }
TEST(zero, stage3_head_holds_wte_or_its_gradient_never_both_bf16) { check_head("bf16", 3); }
TEST(zero, stage3_comm_buffers_within_prediction_with_grad_accum) { check_accumulation(); }
