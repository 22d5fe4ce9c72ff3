// Initial weights as a pure function of (seed, element) (nn/initial_weights.h):
// any range of a buffer, and any tensor-parallel shard, gets bitwise the
// values of the whole model's initialization, on any thread count; the
// values follow each family's rules (normal with the stated deviation, unit
// gains, zero biases and padding rows).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gpt_test_models.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/initial_weights.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/nn/shard_slicing.h"

using namespace meshtrain;

namespace {

LlamaConfig odd_llama() {
  LlamaConfig c = llama_preset("llama-tiny");
  c.n_layer = 3, c.n_head = 6, c.n_kv_head = 3, c.n_embd = 36, c.ffn_hidden = 50, c.seq_len = 13;
  return c;
}

std::vector<float> whole_init(const ModelSpec& spec, uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(spec.num_params()), -7.f);
  EXPECT_TRUE(spec.initial_weights(seed, {0, spec.num_params()}, w.data()));
  return w;
}

// Ranges of every kind: empty, one element, odd starts and ends, across
// parameter and unit boundaries, the whole buffer.
void expect_ranges_match_whole(const ModelSpec& spec) {
  const std::vector<float> whole = whole_init(spec, 42);
  const int64_t P = spec.num_params();
  Rng rng(5);
  std::vector<ElemSpan> ranges = {{0, 0}, {0, 1}, {1, 2}, {P - 1, P}, {0, P}, {3, P - 5}};
  for (const ParamInfo& p : spec.layout().params)
    ranges.push_back({std::max<int64_t>(0, p.begin - 1), std::min(P, p.end() + 1)});
  for (int i = 0; i < 40; ++i) {
    int64_t a = static_cast<int64_t>(rng.below(static_cast<uint64_t>(P)));
    int64_t b = static_cast<int64_t>(rng.below(static_cast<uint64_t>(P)));
    ranges.push_back({std::min(a, b), std::max(a, b) + 1});
  }
  for (const ElemSpan& r : ranges) {
    std::vector<float> part(static_cast<size_t>(P), -7.f);
    ASSERT_TRUE(spec.initial_weights(42, r, part.data()));
    for (int64_t i = 0; i < P; ++i) {
      const float want = i >= r.begin && i < r.end ? whole[i] : -7.f;  // nothing outside written
      ASSERT_EQ(std::memcmp(&part[i], &want, 4), 0)
          << spec.describe() << ": element " << i << " of range [" << r.begin << ", " << r.end << ")";
    }
  }
}

void expect_shards_are_slices_of_whole(const ModelSpec& full, int tp) {
  const std::vector<float> whole = whole_init(full, 9);
  for (int r = 0; r < tp; ++r) {
    ModelShard shard;
    shard.tp_rank = r;
    shard.tp_size = tp;
    auto spec = full.sharded(shard);
    std::vector<float> want(static_cast<size_t>(spec->num_params()));
    copy_logical_to_shard(full.layout(), spec->layout(), r, whole.data(), want.data());
    std::vector<float> got(want.size(), -7.f);
    ASSERT_TRUE(spec->initial_weights(9, {0, spec->num_params()}, got.data()));
    EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * want.size()), 0) << "tp rank " << r << " of " << tp;
    // And a range of the shard: its own ZeRO range, say.
    const ElemSpan half{spec->num_params() / 3, spec->num_params() / 2 + 1};
    std::vector<float> part(want.size(), 0.f);
    ASSERT_TRUE(spec->initial_weights(9, half, part.data()));
    EXPECT_EQ(std::memcmp(part.data() + half.begin, want.data() + half.begin, 4 * half.count()), 0);
  }
}

struct Moments {
  double mean = 0, std = 0;
};
Moments moments(const float* x, int64_t n) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i], s2 += static_cast<double>(x[i]) * x[i];
  const double m = s / n;
  return {m, std::sqrt(s2 / n - m * m)};
}

}  // namespace

TEST(initial_weights, any_range_equals_the_whole_models_values) {
  expect_ranges_match_whole(*GPTSpec::make(meshtrain::testing::odd_gpt_shape()));
  expect_ranges_match_whole(*LlamaSpec::make(odd_llama()));
}

TEST(initial_weights, tensor_parallel_shards_are_slices_of_the_whole_model) {
  GPTConfig gpt = meshtrain::testing::odd_gpt_shape();
  gpt.padded_vocab = 48;  // 3 heads and a vocabulary 3 shards split (37 real rows: padding in the last)
  expect_shards_are_slices_of_whole(*GPTSpec::make(gpt), 3);
  LlamaConfig llama = odd_llama();
  llama.ffn_hidden = 51, llama.padded_vocab = 63;  // 3 kv heads: a width and vocabulary 3 shards split
  expect_shards_are_slices_of_whole(*LlamaSpec::make(llama), 3);
  expect_shards_are_slices_of_whole(*LlamaSpec::make(llama_preset("llama-tiny")), 2);
}

TEST(initial_weights, same_values_on_any_thread_count_and_differ_by_seed) {
  auto spec = GPTSpec::make(meshtrain::testing::odd_gpt_shape());
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = whole_init(*spec, 3);
  omp_set_num_threads(4);
  const std::vector<float> four = whole_init(*spec, 3);
  omp_set_num_threads(before);
  EXPECT_EQ(std::memcmp(one.data(), four.data(), 4 * one.size()), 0);
  const std::vector<float> other = whole_init(*spec, 4);
  int64_t same = 0;
  for (size_t i = 0; i < one.size(); ++i) same += one[i] == other[i] && one[i] != 0.f && one[i] != 1.f;
  EXPECT_EQ(same, 0) << "seed 3 and 4 share drawn values";
}

// GPT-2's rules: N(0, 0.02) matrices and embeddings, residual projections
// N(0, 0.02 / sqrt(2L)), unit LayerNorm gains, zero biases, zero padding rows.
TEST(initial_weights, gpt_values_follow_the_gpt2_rules) {
  GPTConfig cfg = meshtrain::testing::odd_gpt_shape();
  cfg.n_embd = 96, cfg.n_head = 4, cfg.vocab_size = 301, cfg.padded_vocab = pad_vocab(301);
  auto spec = GPTSpec::make(cfg);
  const std::vector<float> w = whole_init(*spec, 1);
  const float resid = 0.02f / std::sqrt(2.0f * cfg.n_layer);
  for (const ParamInfo& p : spec->layout().params) {
    const float* x = w.data() + p.begin;
    if (p.name.find("ln_") != std::string::npos && p.name.ends_with("weight")) {
      for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(x[i], 1.f) << p.name;
    } else if (p.shape.size() < 2) {
      for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(x[i], 0.f) << p.name;
    } else {
      const int64_t drawn = p.name == "wte.weight" ? int64_t{cfg.vocab_size} * cfg.n_embd : p.numel();
      for (int64_t i = drawn; i < p.numel(); ++i) ASSERT_EQ(x[i], 0.f) << p.name << " padding row";
      const Moments m = moments(x, drawn);
      const double want = p.name.ends_with("c_proj.weight") ? resid : 0.02;
      // Sampling error: the std of n draws has relative sd 1/sqrt(2n), 1.8%
      // for the smallest tensor (wpe, 16 x 96) and <= 0.74% for the rest, so
      // 6% is >= 3.3 sigma (8 sigma but for wpe), while the rules' scales
      // differ by 2.4x (0.02 vs 0.02 / sqrt(6)); the mean is held to 5 sigma
      // of its sd want / sqrt(n). Measured (seed 1): std at most 1.7% off,
      // mean at most 1.9 sigma.
      EXPECT_NEAR(m.std, want, 0.06 * want) << p.name;
      EXPECT_NEAR(m.mean, 0.0, 5 * want / std::sqrt(static_cast<double>(drawn))) << p.name;
    }
  }
}

TEST(initial_weights, counter_normals_are_standard_normal_and_independent_of_order) {
  const int64_t n = 1 << 20;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = counter_normal(77, i);
  const Moments m = moments(x.data(), n);
  // Sampling error of n = 2^20 draws: sd 1/sqrt(n) = 9.8e-4 for the mean and
  // the lag-1 product, 1/sqrt(2n) = 6.9e-4 for the std, sqrt(p(1-p)/n) =
  // 2.0e-4 for the tail fraction: the bounds are 5.1, 7.2, 9.8 and 5.1
  // sigma. Measured 1.5e-4, 6.9e-4, 2.3e-4 and 5.9e-4 (key 77).
  EXPECT_NEAR(m.mean, 0.0, 0.005);
  EXPECT_NEAR(m.std, 1.0, 0.005);
  int64_t beyond2 = 0;
  double lag1 = 0;
  for (int64_t i = 0; i < n; ++i) {
    beyond2 += std::fabs(x[i]) > 2.0f;
    if (i) lag1 += static_cast<double>(x[i]) * x[i - 1];
  }
  EXPECT_NEAR(static_cast<double>(beyond2) / n, 0.0455, 0.002);  // P(|z| > 2)
  EXPECT_NEAR(lag1 / n, 0.0, 0.005);  // the two values of a pair are uncorrelated too
  EXPECT_EQ(counter_normal(77, 12345), x[12345]);
  EXPECT_NE(counter_normal(78, 12345), x[12345]);
}
