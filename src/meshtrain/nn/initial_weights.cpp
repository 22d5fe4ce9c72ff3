#include "meshtrain/nn/initial_weights.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/shard_slicing.h"

namespace meshtrain {

namespace {

uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// Normal numbers 2 * pair and 2 * pair + 1 of a stream.
void normal_pair(uint64_t stream, int64_t pair, float& even, float& odd) {
  const uint64_t k = 2 * static_cast<uint64_t>(pair);
  const uint64_t h1 = mix64(stream + kGolden * (k + 1)), h2 = mix64(stream + kGolden * (k + 2));
  const double u1 = (static_cast<double>(h1 >> 11) + 1.0) * 0x1p-53;  // (0, 1]: log is finite
  const double u2 = static_cast<double>(h2 >> 11) * 0x1p-53;
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
  even = static_cast<float>(r * std::cos(a));
  odd = static_cast<float>(r * std::sin(a));
}

// out[i] = scale * normal number first + i of the stream, i < n.
void fill_normal(float* out, uint64_t stream, int64_t first, int64_t n, float scale) {
  float e, o;
  int64_t i = 0;
  if (n > 0 && (first & 1)) {
    normal_pair(stream, first >> 1, e, o);
    out[i++] = scale * o;
  }
  for (; i + 1 < n; i += 2) {
    normal_pair(stream, (first + i) >> 1, e, o);
    out[i] = scale * e;
    out[i + 1] = scale * o;
  }
  if (i < n) {
    normal_pair(stream, (first + i) >> 1, e, o);
    out[i] = scale * e;
  }
}

// out[0, n) = elements [first, first + n) of one logical parameter.
void fill_rule(const InitRule& rule, uint64_t stream, int64_t first, int64_t n, float* out) {
  switch (rule.kind) {
    case InitRule::Kind::Zero: std::fill(out, out + n, 0.f); return;
    case InitRule::Kind::Constant: std::fill(out, out + n, rule.value); return;
    case InitRule::Kind::Normal: {
      const int64_t drawn = rule.drawn < 0 ? first + n : rule.drawn;
      const int64_t m = std::clamp<int64_t>(drawn - first, 0, n);
      fill_normal(out, stream, first, m, rule.value);
      std::fill(out + m, out + n, 0.f);
      return;
    }
  }
}

}  // namespace

float counter_normal(uint64_t stream, int64_t index) {
  float e, o;
  normal_pair(stream, index >> 1, e, o);
  return (index & 1) ? o : e;
}

uint64_t init_stream(uint64_t seed, int param) {
  return mix64(mix64(seed) ^ (kGolden * (static_cast<uint64_t>(param) + 1)));
}

void fill_initial_weights(const ParamLayout& full, const ParamLayout& shard, int tp_rank,
                          const std::vector<InitRule>& rules, uint64_t seed, ElemSpan range,
                          float* buffer) {
  MT_CHECK(rules.size() == full.params.size(), "{} initialization rules for {} parameters",
           rules.size(), full.params.size());
  MT_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= shard.numel,
           "initial weights for elements [{}, {}) of a {}-element buffer", range.begin, range.end,
           shard.numel);
  if (range.count() == 0) return;
  // Which logical parameter each run belongs to: runs come in parameter order.
  std::vector<int64_t> param_begin;
  for (const ParamInfo& p : full.params) param_begin.push_back(p.begin);
  // The runs inside the range, cut into pieces of at most kPiece elements
  // that threads share: every value is a function of its element alone, so
  // the result is the same on any thread count.
  struct Piece {
    int64_t at, count, first;  // buffer offset, elements, first element within the parameter
    int param;
  };
  constexpr int64_t kPiece = 1 << 16;
  std::vector<Piece> pieces;
  for (const ShardRun& r : shard_runs(full, shard, tp_rank)) {
    const int64_t b = std::max(range.begin, r.shard), e = std::min(range.end, r.shard + r.count);
    if (b >= e) continue;
    const int param = static_cast<int>(
        std::upper_bound(param_begin.begin(), param_begin.end(), r.logical) - param_begin.begin() - 1);
    const int64_t first = r.logical + (b - r.shard) - param_begin[param];
    for (int64_t at = b; at < e; at += kPiece)
      pieces.push_back({at, std::min(kPiece, e - at), first + (at - b), param});
  }
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    fill_rule(rules[p.param], init_stream(seed, p.param), p.first, p.count, buffer + p.at);
  }
}

}  // namespace meshtrain
