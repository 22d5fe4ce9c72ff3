#include "meshtrain/data/bpe_model.h"

#include <climits>
#include <queue>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

namespace {
uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left) + 1) << 32) |
         (static_cast<uint64_t>(static_cast<uint32_t>(right) + 1));
}
// Every bit of the key reaches the low bits the table indexes by (a plain
// multiply leaves them blind to the left id, so pairs that share a right id
// would pile into one probe chain).
uint64_t mix(uint64_t k) {
  k *= 0x9E3779B97F4A7C15ull;
  k ^= k >> 32;
  k *= 0xD6E8FEB86659FD93ull;
  return k ^ (k >> 32);
}
// Words up to this many bytes merge by a linear scan (fast for the short
// pieces text is made of); longer ones use a heap (no quadratic worst case).
constexpr size_t kLinearMergeMax = 64;
}  // namespace

BpeModel::BpeModel(std::vector<std::string> vocab, std::vector<Merge> merges, bool ignore_merges,
                   int32_t unk_id)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges), unk_id_(unk_id) {
  byte_id_.fill(-1);
  by_bytes_.reserve(vocab_.size());
  for (size_t id = 0; id < vocab_.size(); ++id) {
    if (vocab_[id].empty()) continue;
    by_bytes_.emplace(vocab_[id], static_cast<int32_t>(id));
    if (vocab_[id].size() == 1) {
      int32_t& b = byte_id_[static_cast<uint8_t>(vocab_[id][0])];
      if (b < 0) b = static_cast<int32_t>(id);
    }
  }
  size_t cap = 16;
  while (cap < merges.size() * 2) cap *= 2;
  pairs_.assign(cap, Slot{});
  pair_mask_ = cap - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& m = merges[rank];
    const std::string joined = bytes_of(m.left) + bytes_of(m.right);
    const int32_t merged = id_of(joined);
    if (merged < 0)
      fail("BPE merge {} joins tokens {} and {} into bytes that are not in the vocabulary", rank,
           m.left, m.right);
    const uint64_t key = pair_key(m.left, m.right);
    uint64_t i = mix(key) & pair_mask_;
    while (pairs_[i].key != 0 && pairs_[i].key != key) i = (i + 1) & pair_mask_;
    if (pairs_[i].key == key) continue;  // a repeated merge keeps its first (lowest) rank
    pairs_[i] = Slot{key, static_cast<int32_t>(rank), merged};
  }
}

int32_t BpeModel::id_of(std::string_view bytes) const {
  const auto it = by_bytes_.find(bytes);
  return it == by_bytes_.end() ? -1 : it->second;
}

const BpeModel::Slot* BpeModel::find_pair(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  uint64_t i = mix(key) & pair_mask_;
  while (pairs_[i].key != 0) {
    if (pairs_[i].key == key) return &pairs_[i];
    i = (i + 1) & pair_mask_;
  }
  return nullptr;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {  // Llama 3: a piece that is a token stays one
    const int32_t whole = id_of(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  std::vector<int32_t> syms;
  syms.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_id_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      syms.push_back(id);
    } else if (unk_id_ >= 0) {  // a byte the vocabulary lacks: unk, or dropped as HF does
      syms.push_back(unk_id_);
    }
  }
  merge(syms);
  out.insert(out.end(), syms.begin(), syms.end());
}

void BpeModel::merge(std::vector<int32_t>& syms) const {
  if (syms.size() <= kLinearMergeMax) {
    merge_short(syms);
  } else {
    merge_long(syms);
  }
}

void BpeModel::merge_short(std::vector<int32_t>& syms) const {
  int32_t ranks[kLinearMergeMax];
  int32_t merged[kLinearMergeMax];
  size_t n = syms.size();
  const auto look = [&](size_t i) {
    const Slot* s = find_pair(syms[i], syms[i + 1]);
    ranks[i] = s ? s->rank : INT_MAX;
    merged[i] = s ? s->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == INT_MAX) break;
    syms[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      syms[i] = syms[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best + 1 < n) look(best);
    if (best > 0) look(best - 1);
  }
  syms.resize(n);
}

void BpeModel::merge_long(std::vector<int32_t>& syms) const {
  const int n = static_cast<int>(syms.size());
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank;
    int left;
    int32_t left_id, right_id;  // the pair as it was when pushed (stale when changed)
    bool operator>(const Cand& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  const auto push = [&](int left) {
    const int right = next[static_cast<size_t>(left)];
    if (left < 0 || right < 0) return;
    const int32_t a = syms[static_cast<size_t>(left)], b = syms[static_cast<size_t>(right)];
    if (const Slot* s = find_pair(a, b)) heap.push(Cand{s->rank, left, a, b});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(static_cast<size_t>(n), true);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const auto l = static_cast<size_t>(c.left);
    if (!alive[l] || syms[l] != c.left_id) continue;
    const int r = next[l];
    if (r < 0 || syms[static_cast<size_t>(r)] != c.right_id) continue;
    syms[l] = find_pair(c.left_id, c.right_id)->merged;
    alive[static_cast<size_t>(r)] = false;
    next[l] = next[static_cast<size_t>(r)];
    if (next[l] >= 0) prev[static_cast<size_t>(next[l])] = c.left;
    push(c.left);
    if (prev[l] >= 0) push(prev[l]);
  }
  size_t w = 0;
  for (int i = 0; i >= 0 && i < n; i = next[static_cast<size_t>(i)]) syms[w++] = syms[static_cast<size_t>(i)];
  syms.resize(w);
}

}  // namespace meshtrain::data
