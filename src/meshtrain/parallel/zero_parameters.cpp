#include "meshtrain/parallel/zero_parameters.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

ZeroParameters::ZeroParameters(comm::Communicator comm, ZeroLayout layout,
                               std::vector<ElemSpan> units, std::vector<ParamUse> order,
                               int exclusive_unit, float* params, ReservedBuffer* reserved,
                               bool shard_units, int64_t persist_threshold, const HalfCopy* half,
                               bool own_range_start)
    : comm_(std::move(comm)), layout_(layout), units_(std::move(units)), params_(params),
      reserved_(reserved), shard_units_(shard_units) {
  order_ = std::move(order);
  exclusive_ = exclusive_unit;
  if (half) half_ = *half;
  MT_CHECK(!shard_units_ || reserved_, "stage 3 needs the reserved parameter buffer");
  MT_CHECK(!mixed() || (reserved_ && half_.reserved),
           "mixed precision ZeRO needs reserved f32 and 16-bit buffers");
  const int n = static_cast<int>(units_.size());
  MT_CHECK(n >= 1, "ZeRO needs the model's parameter units");
  MT_CHECK(exclusive_ < n, "exclusive unit {} of {}", exclusive_, n);
  for (const Event& e : order_)
    MT_CHECK(e.unit >= 0 && e.unit < n, "parameter order names unit {} of {}", e.unit, n);
  for (int u = 0; u < n; ++u) {
    MT_CHECK(units_[u].begin == (u ? units_[u - 1].end : 0), "parameter units must tile the buffer");
    persistent_.push_back(!sharded() || units_[u].count() < persist_threshold);
  }
  MT_CHECK(units_.back().end == layout_.numel(), "parameter units cover {} of {} elements",
           units_.back().end, layout_.numel());
  for (size_t i = 1; i < half_.f32_spans.size(); ++i)
    MT_CHECK(half_.f32_spans[i - 1].end <= half_.f32_spans[i].begin, "f32 spans must be sorted");
  foreign_f32_.assign(n, 0);
  const ElemSpan own = layout_.own();
  for (int u = 0; u < n; ++u)
    split_by_f32_spans(units_[u], [&](int64_t b, int64_t e, bool f32) {
      if (!f32) return;
      const int64_t inside = std::max<int64_t>(0, std::min(e, own.end) - std::max(b, own.begin));
      foreign_f32_[u] += (e - b) - inside;
    });
  works_.resize(n);
  // Until start(), with a whole start (initialization, loading), the whole
  // buffer is resident: own range and persistent units as parameters, the
  // rest as gathered. With an own-range start only the own range is; the
  // persistent units count as held already (start() gathers them to stay).
  const bool whole = !own_range_start;
  valid_.assign(n, whole);
  resident_.resize(n);
  for (int u = 0; u < n; ++u) resident_[u] = whole || persistent_[u];
  if (mixed()) {
    int64_t held = 2 * own.count(), gathered = 0, masters = 0;
    for (int u = 0; u < n; ++u) {
      if (persistent_[u]) held += foreign_bytes(u);
      else if (whole) gathered += foreign_bytes(u);
      if (whole) masters += 4 * (layout_.foreign_count(units_[u]) - foreign_f32_[u]);
    }
    held_params_.set(held);
    gathered_.set(gathered);
    master_.set(4 * own.count());
    full_masters_bytes_.set(masters);
  } else if (sharded()) {
    int64_t held = own.count(), gathered = 0;
    for (int u = 0; u < n; ++u) {
      if (persistent_[u]) held += layout_.foreign_count(units_[u]);
      else if (whole) gathered += layout_.foreign_count(units_[u]);
    }
    held_params_.set(held * 4);
    gathered_.set(gathered * 4);
  }
  full_masters_ = mixed() && whole;
}

template <class Fn>
void ZeroParameters::split_by_f32_spans(ElemSpan s, Fn&& fn) const {
  int64_t at = s.begin;
  auto it = std::lower_bound(half_.f32_spans.begin(), half_.f32_spans.end(), s.begin,
                             [](const ElemSpan& f, int64_t x) { return f.end <= x; });
  for (; it != half_.f32_spans.end() && it->begin < s.end; ++it) {
    const int64_t b = std::max(it->begin, s.begin), e = std::min(it->end, s.end);
    if (at < b) fn(at, b, false);
    if (b < e) fn(b, e, true);
    at = std::max(at, e);
  }
  if (at < s.end) fn(at, s.end, false);
}

int64_t ZeroParameters::foreign_bytes(int u) const {
  const int64_t foreign = layout_.foreign_count(units_[u]);
  return mixed() ? 2 * foreign + 4 * foreign_f32_[u] : 4 * foreign;
}

void ZeroParameters::release_foreign_masters() {
  if (!mixed() || !full_masters_) return;
  for (const ElemSpan& u : units_)
    for (const OwnedPiece& p : layout_.pieces(u)) {
      if (p.owner == comm_.rank()) continue;
      split_by_f32_spans(p.span, [&](int64_t b, int64_t e, bool f32) {
        if (!f32) reserved_->discard(b, e);
      });
    }
  full_masters_ = false;
  full_masters_bytes_.set(0);
}

void ZeroParameters::round_own_range() {
  if (!mixed()) return;
  const ElemSpan own = layout_.own();
  // The reserved buffers are host memory (reserved_buffer.h).
  kernels_for(Device::cpu()).to_half(Stream::cpu(), half_.dtype == DType::F16 ? HalfFormat::F16 : HalfFormat::BF16,
                                     params_ + own.begin, half_.data + own.begin, own.count());
}

ZeroParameters::~ZeroParameters() {
  for (auto& ws : works_)
    for (auto& w : ws) {
      try {
        w.wait();
      } catch (...) {
      }
    }
}

void ZeroParameters::advance(const Event& e) {
  if (cursor_ < order_.size() && order_[cursor_] == e) {
    ++cursor_;
    return;
  }
  // Out of the expected order (an evaluation forward without backward, a new
  // step): continue from the first place this event occurs.
  auto it = std::find(order_.begin(), order_.end(), e);
  cursor_ = it == order_.end() ? order_.size() : static_cast<size_t>(it - order_.begin()) + 1;
}

int ZeroParameters::next_need(int k) const {
  for (size_t i = cursor_, seen = 0; i < order_.size(); ++i)
    if (order_[i].need && ++seen == static_cast<size_t>(k)) return order_[i].unit;
  return -1;
}

bool ZeroParameters::needed_soon(int unit, int within) const {
  for (int k = 1; k <= within; ++k)
    if (next_need(k) == unit) return true;
  return false;
}

void ZeroParameters::launch(int u) {
  MT_CHECK(works_[u].empty(), "parameter unit {} gathered twice", u);
  if (!resident_[u]) {
    resident_[u] = true;
    if (!persistent_[u]) gathered_.add(foreign_bytes(u));
  }
  for (const OwnedPiece& p : layout_.pieces(units_[u])) {
    if (!mixed()) {
      works_[u].push_back(comm_.broadcast(params_ + p.span.begin,
                                          static_cast<size_t>(p.span.count()), DType::F32, p.owner));
      continue;
    }
    // The 16-bit copy of the whole piece, and in f32 the parts the model reads in f32.
    works_[u].push_back(comm_.broadcast(half_.data + p.span.begin,
                                        static_cast<size_t>(p.span.count()), half_.dtype, p.owner));
    split_by_f32_spans(p.span, [&](int64_t b, int64_t e, bool f32) {
      if (f32)
        works_[u].push_back(
            comm_.broadcast(params_ + b, static_cast<size_t>(e - b), DType::F32, p.owner));
    });
  }
  ++gathers_;
}

void ZeroParameters::wait(int u) {
  comm::wait_all(works_[u]);
  works_[u].clear();
  valid_[u] = true;
}

void ZeroParameters::release(int u) {
  MT_CHECK(works_[u].empty() && sharded() && !persistent_[u], "cannot release parameter unit {}", u);
  if (!resident_[u]) return;
  const ElemSpan s = units_[u], own = layout_.own();
  const ElemSpan before{s.begin, std::max(s.begin, std::min(s.end, own.begin))};
  const ElemSpan after{std::min(s.end, std::max(s.begin, own.end)), s.end};
  for (const ElemSpan& f : {before, after}) {
    if (!mixed()) {
      reserved_->discard(f.begin, f.end);
      continue;
    }
    half_.reserved->discard_bytes(static_cast<size_t>(f.begin) * 2, static_cast<size_t>(f.end) * 2);
    split_by_f32_spans(f, [&](int64_t b, int64_t e, bool f32) {
      if (f32 || full_masters_) reserved_->discard(b, e);
    });
  }
  resident_[u] = false;
  valid_[u] = false;
  gathered_.add(-foreign_bytes(u));
}

void ZeroParameters::on_event(ParamEvent event, int u, bool backward) {
  // GradBegin/GradEnd bracket gradient writes that read no parameters: not
  // part of order_, so they move neither the cursor nor any decision.
  if (!enabled_ || (event != ParamEvent::Need && event != ParamEvent::Done)) return;
  MT_CHECK(u >= 0 && u < static_cast<int>(units_.size()), "parameter hook for unknown unit {}", u);
  const bool need = event == ParamEvent::Need;
  advance({need, u, backward});
  if (need) {
    if (!valid_[u]) {
      if (works_[u].empty()) launch(u);
      wait(u);
    }
    if (!sharded()) return;
    // While the exclusive unit is gathered (GPT's tied embedding: the
    // forward lookup, the output projection, the backward head until its
    // Done) nothing is prefetched on top of it: it is the largest unit, and
    // with its gradient written only after it is freed (gpt.h: GradBegin 0)
    // these are the step's memory peaks. Layer 1's forward gather and layer
    // L's backward gather then wait, once per micro-batch each.
    if (exclusive_ >= 0 && resident_[exclusive_] && !persistent_[exclusive_]) return;
    // Prefetch: the next unit in use order, while this one computes; not
    // across into the next micro-batch, whose first unit is the embedding:
    // gathered beside the last layer's backward (its parameters, gradients
    // and pending reduces) it would exceed the peaks above.
    const int v = next_need(1);
    if (v >= 0 && v != u && !valid_[v] && works_[v].empty()) launch(v);
    return;
  }
  if (!sharded() || persistent_[u] || needed_soon(u, 2)) return;
  if (!works_[u].empty()) wait(u);
  release(u);
}

void ZeroParameters::set_pass(std::vector<ParamUse> order) {
  for (const Event& e : order)
    MT_CHECK(e.unit >= 0 && e.unit < static_cast<int>(units_.size()), "parameter pass names unit {} "
             "of {}", e.unit, units_.size());
  order_ = std::move(order);
  cursor_ = 0;
  passes_ = true;
}

void ZeroParameters::shard() {
  before_update();
  release_foreign_masters();
  if (!sharded()) return;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u)
    if (!persistent_[u]) release(u);
}

void ZeroParameters::start() {
  cursor_ = order_.size();
  after_update();
}

void ZeroParameters::before_update() {
  for (int u = 0; u < static_cast<int>(units_.size()); ++u)
    if (!works_[u].empty()) wait(u);
}

void ZeroParameters::after_update() {
  const int n = static_cast<int>(units_.size());
  for (int u = 0; u < n; ++u) {
    MT_CHECK(works_[u].empty(), "parameter unit {} still gathering during the update", u);
    valid_[u] = false;
  }
  round_own_range();
  if (!sharded()) {
    for (int u = 0; u < n; ++u) launch(u);  // forward order: embeddings first
  } else if (!passes_) {
    launch(order_.empty() ? 0 : order_.front().unit);  // the next forward's first unit
  }
}

void ZeroParameters::gather_all() {
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    if (valid_[u]) continue;
    if (works_[u].empty()) launch(u);
  }
  for (int u = 0; u < static_cast<int>(units_.size()); ++u)
    if (!works_[u].empty()) wait(u);
  if (!mixed() || full_masters_) return;
  // Mixed precision: the whole f32 buffer (the masters of every rank), for
  // whoever reads params() in full; counted as gathered until released.
  std::vector<comm::Work> works;
  int64_t masters = 0;
  for (const ElemSpan& u : units_)
    for (const OwnedPiece& p : layout_.pieces(u)) {
      if (p.owner != comm_.rank())
        split_by_f32_spans(p.span, [&](int64_t b, int64_t e, bool f32) {
          if (!f32) masters += e - b;
        });
      works.push_back(comm_.broadcast(params_ + p.span.begin, static_cast<size_t>(p.span.count()),
                                      DType::F32, p.owner));
    }
  full_masters_bytes_.set(4 * masters);
  comm::wait_all(works);
  full_masters_ = true;
}

void ZeroParameters::gather_to_root() {
  before_update();  // gathers in flight land first: they write what is current
  constexpr int kRoot = 0;
  const bool root = comm_.rank() == kRoot;
  // Ranges of foreign pieces not current on rank 0 (the same on every rank:
  // valid_ and full_masters_ follow the same events everywhere): fp32, the
  // pieces of units not gathered; mixed precision, also every master range
  // outside f32_spans unless the full masters are resident.
  std::vector<std::pair<ElemSpan, int>> stale;  // range, owner
  auto add = [&](int64_t b, int64_t e, int owner) {  // adjacent ranges of one owner: one message
    if (!stale.empty() && stale.back().second == owner && stale.back().first.end == b)
      stale.back().first.end = e;
    else
      stale.push_back({{b, e}, owner});
  };
  // Rank 0 also notes which of them it does not hold resident otherwise (the
  // pages it takes for the copy and returns in release_transient()).
  int64_t brought = 0;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u)
    for (const OwnedPiece& p : layout_.pieces(units_[u])) {
      if (p.owner == kRoot) continue;
      split_by_f32_spans(p.span, [&](int64_t b, int64_t e, bool f32) {
        const bool in_unit = !mixed() || f32;  // gathered with its unit, else a master
        if (in_unit ? valid_[u] : full_masters_) return;
        add(b, e, p.owner);
        if (root && (!in_unit || !resident_[u])) {
          root_copy_.push_back({b, e});
          brought += e - b;
        }
      });
    }
  std::vector<comm::Work> works;
  for (const auto& [s, owner] : stale) {
    const size_t n = static_cast<size_t>(s.count());
    if (root)
      works.push_back(comm_.recv(params_ + s.begin, n, DType::F32, owner));
    else if (owner == comm_.rank())
      works.push_back(comm_.send(params_ + s.begin, n, DType::F32, kRoot));
  }
  root_copy_bytes_.set(4 * brought);
  comm::wait_all(works);
}

void ZeroParameters::release_root_copy() {
  // Pieces of units not resident here and foreign masters: pages this rank
  // does not keep. (Resident units keep their pages; they stay stale, so
  // their next Need gathers them as before.)
  for (const ElemSpan& s : root_copy_) reserved_->discard(s.begin, s.end);
  root_copy_.clear();
  root_copy_bytes_.set(0);
}

void ZeroParameters::release_transient() {
  release_root_copy();
  release_foreign_masters();
  if (!sharded()) return;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    if (persistent_[u]) continue;
    if (!works_[u].empty()) wait(u);
    release(u);
  }
}

int64_t ZeroParameters::persistent_elements() const {
  int64_t n = 0;
  for (size_t u = 0; u < units_.size(); ++u)
    if (persistent_[u]) n += units_[u].count();
  return n;
}

}  // namespace meshtrain::parallel
