// test-links: mt_train
// Evaluation (train/evaluation.h) for a model whose samples are not tokens:
// a dense classifier (tiny_classifier.h) over a batch source of feature
// vectors. Two real ranks with batch b give exactly the loss (up to the f32
// order of the per-rank means) and the top-1/top-3 fractions of one rank
// with batch 2b, and those fractions are the brute-force ones; the model
// runs in evaluation mode during evaluation only; micro_batch_of gives token
// windows and dense samples their fields.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "../comm/harness.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/train/evaluation.h"
#include "tiny_classifier.h"

using namespace meshtrain;
using meshtrain::comm::Communicator;
using meshtrain::comm::testing::run_world;

namespace {

constexpr int kFeatures = 5, kClasses = 7, kTopK = 3, kSamples = 48;

float feature(int64_t sample, int64_t d) {
  return static_cast<float>(std::sin(0.7 * sample + 1.3 * d) + 0.1 * d);
}
int32_t label(int64_t sample) { return static_cast<int32_t>((sample * 5 + 2) % kClasses); }

// Global batch k holds samples [k*G, (k+1)*G); rank r of n its b-sized slice.
class FeatureSource final : public data::BatchSource {
 public:
  FeatureSource(int64_t b, int rank, int ranks) : b_(b), rank_(rank), G_(b * ranks) {}
  data::Batch next() override {
    data::Batch out{Tensor::zeros({b_, kFeatures}), Tensor::zeros({b_}, DType::I32), pos_};
    for (int64_t i = 0; i < b_; ++i) {
      const int64_t s = pos_.batch * G_ + rank_ * b_ + i;
      for (int d = 0; d < kFeatures; ++d) out.inputs.data<float>()[i * kFeatures + d] = feature(s, d);
      out.targets.data<int32_t>()[i] = label(s);
    }
    ++pos_.batch;
    return out;
  }
  data::LoaderPosition position() const override { return pos_; }
  void seek(data::LoaderPosition p) override { pos_ = p; }
  int64_t batches_per_epoch() const override { return kSamples / G_; }
  std::string describe() const override { return "features"; }

 private:
  int64_t b_;
  int rank_;
  int64_t G_;
  data::LoaderPosition pos_;
};

std::unique_ptr<Model> seeded_classifier() {
  auto spec = std::make_shared<tiny_classifier::ClassifierSpec>(kFeatures, kClasses, kTopK);
  auto m = spec->build();
  m->init_weights(11);
  return m;
}

Evaluation run(Model& m, int64_t b, int rank, int ranks, Communicator* comm) {
  FeatureSource src(b, rank, ranks);
  return evaluate([&](const MicroBatch& mb) { return m.forward(mb); }, m, &m, src, 100, comm);
}

std::string encode(const Evaluation& e) {
  std::ostringstream o;
  o.precision(17);
  o << e.loss;
  for (const auto& [name, v] : e.metrics) o << ' ' << name << ' ' << v;
  return o.str();
}

}  // namespace

TEST(evaluation, two_ranks_equal_one_rank_and_the_fractions_are_counted) {
  auto m = seeded_classifier();
  const Evaluation one = run(*m, 12, 0, 1, nullptr);
  ASSERT_EQ(one.metrics.size(), 2u);
  EXPECT_EQ(one.metrics[0].first, "top1");
  EXPECT_EQ(one.metrics[1].first, "top3");
  // Brute force over all samples with the same weights.
  const float* W = m->param_buffer().data<float>();
  int top1 = 0, top3 = 0;
  for (int s = 0; s < kSamples; ++s) {
    std::vector<double> z(kClasses);
    for (int v = 0; v < kClasses; ++v) {
      z[v] = W[kClasses * kFeatures + v];
      for (int d = 0; d < kFeatures; ++d) z[v] += W[v * kFeatures + d] * feature(s, d);
    }
    int above = 0;
    for (int v = 0; v < kClasses; ++v) above += z[v] > z[label(s)];
    top1 += above < 1, top3 += above < 3;
  }
  ASSERT_GT(top3, top1);  // the data tells the two apart
  EXPECT_EQ(one.metrics[0].second, top1 / double(kSamples));
  EXPECT_EQ(one.metrics[1].second, top3 / double(kSamples));

  // Each rank compares with the one-rank result and returns what differs.
  auto w = run_world(2, [&one](Communicator& c) -> std::string {
    auto model = seeded_classifier();
    const Evaluation got = run(*model, 6, c.rank(), 2, &c);
    // The loss: the mean of two per-rank f32 means, not of one: order only.
    if (std::abs(got.loss - one.loss) > 1e-6 * std::abs(one.loss)) return "loss " + encode(got);
    if (got.metrics != one.metrics) return "measures " + encode(got);  // integer counts: exact
    return "";
  });
  EXPECT_TRUE(w.ok()) << w.report() << "one rank: " << encode(one);
}

TEST(evaluation, runs_in_evaluation_mode_and_restores_training_mode) {
  auto m = seeded_classifier();
  auto& c = static_cast<tiny_classifier::Classifier&>(*m);
  m->forward(micro_batch_of(FeatureSource(4, 0, 1).next()));
  run(*m, 4, 0, 1, nullptr);
  ASSERT_EQ(c.modes().size(), 1u + kSamples / 4);
  EXPECT_TRUE(c.modes()[0]);
  for (size_t i = 1; i < c.modes().size(); ++i) EXPECT_FALSE(c.modes()[i]) << i;
  EXPECT_TRUE(m->training());
  // A failing forward still restores the mode.
  FeatureSource src(4, 0, 1);
  EXPECT_THROW(evaluate([](const MicroBatch&) -> float { throw Error("boom"); }, *m, m.get(), src, 2,
                        nullptr),
               Error);
  EXPECT_TRUE(m->training());
}

TEST(evaluation, micro_batch_of_tokens_and_dense_samples) {
  data::Batch tokens{Tensor::zeros({2, 5}, DType::I32), Tensor::zeros({2, 5}, DType::I32), {}};
  MicroBatch t = micro_batch_of(tokens);
  EXPECT_EQ(t.inputs, tokens.inputs.data<int32_t>());
  EXPECT_EQ(t.features, nullptr);
  EXPECT_EQ(t.B, 2);
  EXPECT_EQ(t.T, 5);
  data::Batch dense{Tensor::zeros({3, 1, 4, 4}), Tensor::zeros({3}, DType::I32), {}};
  MicroBatch d = micro_batch_of(dense);
  EXPECT_EQ(d.inputs, nullptr);
  EXPECT_EQ(d.features, dense.inputs.data<float>());
  EXPECT_EQ(d.targets, dense.targets.data<int32_t>());
  EXPECT_EQ(d.B, 3);
  EXPECT_EQ(d.T, 1);
}
