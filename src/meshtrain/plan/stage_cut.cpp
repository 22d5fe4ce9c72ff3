#include "meshtrain/plan/stage_cut.h"

#include <algorithm>
#include <limits>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

namespace {

std::vector<int> even_cut(int L, int V) {
  std::vector<int> out;
  for (int v = 0; v < V; ++v) out.push_back(L / V + (v < L % V ? 1 : 0));
  return out;
}

}  // namespace

// Dynamic programming over (stages, layers); walking back, the last stages
// take the fewest layers that reach the optimum.
std::vector<int> cut_layers_by_cost(int L, int V, const StageCost& c) {
  MT_CHECK(V >= 1 && L >= V, "a cut of {} layers into {} virtual stages", L, V);
  if (c.layer <= 0) return even_cut(L, V);
  auto cost = [&](int v, int n) {
    return n * c.layer + (v == 0 ? c.first : 0.0) + (v == V - 1 ? c.last : 0.0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[v][i]: the first v virtual stages over the first i layers.
  std::vector<std::vector<double>> best(static_cast<size_t>(V + 1), std::vector<double>(static_cast<size_t>(L + 1), inf));
  best[0][0] = 0;
  for (int v = 1; v <= V; ++v)
    for (int i = v; i <= L; ++i)
      for (int n = 1; n <= i - (v - 1); ++n)
        best[v][i] = std::min(best[v][i], std::max(best[v - 1][i - n], cost(v - 1, n)));
  std::vector<int> out(static_cast<size_t>(V));
  for (int v = V, i = L; v >= 1; --v)
    for (int n = 1; n <= i - (v - 1); ++n)
      if (std::max(best[v - 1][i - n], cost(v - 1, n)) <= best[v][i] * (1 + 1e-12)) {
        out[static_cast<size_t>(v - 1)] = n;
        i -= n;
        break;
      }
  return out;
}

StageCost transformer_stage_cost(const TransformerShape& m, int64_t seq) {
  const double head = 6.0 * static_cast<double>(m.vocab) * static_cast<double>(m.hidden);  // per token
  return {(m.flops_per_token(seq) - head) / static_cast<double>(m.layers), 0.0, head};
}

RankShare rank_share(const std::vector<int>& cut, int stages, int stage) {
  RankShare s;
  const int V = static_cast<int>(cut.size());
  for (int vs = stage; vs < V; vs += stages) {
    s.layers += cut[static_cast<size_t>(vs)];
    s.first = s.first || vs == 0;
    s.last = s.last || vs == V - 1;
  }
  return s;
}

}  // namespace meshtrain::plan
