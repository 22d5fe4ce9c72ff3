#include "meshtrain/comm/cost_model.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "meshtrain/comm/transports/shm/shm_layout.h"

namespace meshtrain::comm {

namespace {
double log2_ceil(int n) { return n <= 1 ? 0 : std::ceil(std::log2(static_cast<double>(n))); }
double segments(size_t bytes, size_t seg) { return std::max(1.0, std::ceil(double(bytes) / seg)); }
}  // namespace

CostShape cost_shape(std::string_view algo, CollOp op, size_t bytes, int n) {
  const double S = static_cast<double>(bytes), fn = n;
  const double share = (fn - 1) / fn;  // fraction of the data a rank exchanges
  if (n <= 1) return {0, 0};
  if (algo == "direct") {
    // Small: one sync, every rank reads all n inputs. Large: one sync per
    // chunk; copy in, reduce own slice from n, gather: about 3S per rank.
    if (op == CollOp::Allreduce && bytes <= shm::kSmallBytes) return {1, fn * S};
    // Allgather: each rank copies its block into scratch once and the n-1
    // others out of the peers' scratch (plus its own block out of place).
    if (op == CollOp::Allgather) return {segments(bytes / n, shm::kDefaultChunkBytes) + 1, (1 + 1 / fn) * S};
    // Reduce-scatter: each rank copies the n-1 blocks the peers reduce into
    // scratch and reduces its own block from n inputs: (2 - 1/n)S, one sync
    // per chunk. (Charged 3S before, auto picked ring, which measured
    // 2.4-6x slower from 4 MiB: docs/PERFORMANCE.md, collectives.)
    if (op == CollOp::ReduceScatter) return {segments(bytes, shm::kDefaultChunkBytes), (2 - 1 / fn) * S};
    return {segments(bytes, shm::kDefaultChunkBytes) + 1, 3 * S};
  }
  if (algo == "ring") {
    double seg = segments(bytes, 256 * 1024 * n);
    if (op == CollOp::Allreduce) return {2 * (fn - 1) * seg, 4 * share * S};
    if (op == CollOp::Broadcast || op == CollOp::Reduce) return {fn - 1 + segments(bytes, 128 * 1024), 2 * S};
    return {(fn - 1), 2 * share * S};
  }
  if (algo == "tree") {
    double seg = segments(bytes, 128 * 1024), lg = log2_ceil(n);
    if (op == CollOp::Allreduce) return {2 * lg + 2 * (seg - 1), 4 * lg * S};
    return {lg + seg - 1, 2 * lg * S};
  }
  if (algo == "halving_doubling") {
    int p2 = 1;
    while (p2 * 2 <= n) p2 *= 2;
    double fold = p2 == n ? 0 : 1;
    return {2 * log2_ceil(p2) + 2 * fold, 4 * share * S + fold * 4 * S};
  }
  if (algo == "hierarchical") return {4 * log2_ceil(n) + segments(bytes, 1 << 20), 5 * S};
  if (algo == "mpi") return {2 * log2_ceil(n), 2 * share * S};
  if (algo == "pairwise") return {fn - 1, 2 * share * S};
  return {fn, 4 * S};
}

CostModel CostModel::defaults() {
  CostModel m;
  // Shared memory: a sync is a cache-line hand-off (~0.3-1 us); the
  // bandwidth term differs by how many copies each byte goes through.
  m.set("shm", "direct", {0.6, 1.0 / 14000});
  m.set("shm", "ring", {1.2, 1.0 / 6000});
  m.set("shm", "tree", {1.2, 1.0 / 6000});
  m.set("shm", "halving_doubling", {1.2, 1.0 / 6000});
  m.set("shm", "hierarchical", {3.0, 1.0 / 5000});
  m.set("shm", "pairwise", {1.2, 1.0 / 6000});
  // MPI point-to-point pays the library's matching on every message.
  for (const char* a : {"ring", "tree", "halving_doubling", "pairwise", "hierarchical"})
    m.set("mpi", a, {3.0, 1.0 / 3000});
  m.set("mpi", "mpi", {1.0, 1.0 / 3000});
  return m;
}

void CostModel::set(std::string_view t, std::string_view a, AlphaBeta ab) {
  table_[{std::string(t), std::string(a)}] = ab;
}

AlphaBeta CostModel::get(std::string_view t, std::string_view a) const {
  auto it = table_.find({std::string(t), std::string(a)});
  return it == table_.end() ? AlphaBeta{} : it->second;
}

double CostModel::predict_us(std::string_view t, std::string_view a, CollOp op, size_t bytes,
                             int ranks) const {
  CostShape s = cost_shape(a, op, bytes, ranks);
  AlphaBeta ab = get(t, a);
  return ab.alpha_us * s.steps + ab.beta_us_per_byte * s.bytes;
}

std::string CostModel::choose(std::string_view t, CollOp op, size_t bytes, int ranks,
                              const std::vector<std::string>& candidates) const {
  std::string best;
  double best_us = std::numeric_limits<double>::infinity();
  for (const auto& c : candidates) {
    double us = predict_us(t, c, op, bytes, ranks);
    if (us < best_us) {
      best_us = us;
      best = c;
    }
  }
  return best;
}

std::string CostModel::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, ab] : table_)
    j[key.first][key.second] = {{"alpha_us", ab.alpha_us}, {"beta_us_per_byte", ab.beta_us_per_byte}};
  return j.dump(2);
}

void CostModel::save(const std::string& path) const {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path);
  MT_CHECK(f.good(), "cannot write cost model to {}", path);
  f << to_json() << "\n";
}

CostModel CostModel::load(const std::string& path) {
  CostModel m = defaults();
  if (path.empty() || !std::filesystem::exists(path)) return m;
  std::ifstream f(path);
  nlohmann::json j;
  try {
    f >> j;
    for (auto& [t, algos] : j.items())
      for (auto& [a, v] : algos.items())
        m.set(t, a, {v.at("alpha_us").get<double>(), v.at("beta_us_per_byte").get<double>()});
  } catch (const std::exception& e) {
    fail("cost model {} is not valid: {}", path, e.what());
  }
  return m;
}

std::string CostModel::default_path() {
  if (const char* s = std::getenv("MESHTRAIN_COMM_COST_FILE"); s && *s) return s;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/meshtrain/comm_cost.json";
}

}  // namespace meshtrain::comm
