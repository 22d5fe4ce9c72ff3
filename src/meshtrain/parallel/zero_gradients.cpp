#include "meshtrain/parallel/zero_gradients.h"

#include <algorithm>
#include <chrono>

#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

ZeroGradients::ZeroGradients(comm::Communicator comm, ZeroLayout layout,
                             std::vector<ElemSpan> units, ReservedBuffer& grads,
                             int bracketed_unit, bool isolate_bracketed)
    : comm_(std::move(comm)), layout_(layout), units_(std::move(units)), grads_(grads),
      bracketed_(bracketed_unit), isolate_bracketed_(isolate_bracketed && bracketed_unit >= 0) {
  MT_CHECK(bracketed_ < static_cast<int>(units_.size()), "bracketed unit {} of {}", bracketed_,
           units_.size());
  clock_ = std::make_unique<CompletionClock>();
  shard_ = Tensor::zeros({std::max<int64_t>(1, layout_.own().count())}, DType::F32,
                         MemCategory::Gradients);
  staged_.assign(units_.size(), false);
  frontier_ = layout_.numel();
}

ZeroGradients::~ZeroGradients() {
  for (auto& p : pending_)
    for (auto& w : p.works) {
      try {
        w.wait();
      } catch (...) {
      }
    }
}

void ZeroGradients::set_backward_span(ElemSpan span) {
  MT_CHECK(span.begin >= 0 && span.begin <= span.end && span.end <= layout_.numel(), "backward span "
           "[{}, {}) outside the {}-element gradient buffer", span.begin, span.end, layout_.numel());
  span_ = span;
}

void ZeroGradients::begin_backward() {
  MT_CHECK(pending_.empty(), "begin_backward() with gradient reductions still pending");
  frontier_ = span_ ? span_->end : layout_.numel();
}

void ZeroGradients::on_grad_begin(int unit) {
  if (unit < 0 || unit >= static_cast<int>(units_.size())) return;
  if (isolate_bracketed_ && unit != bracketed_) {
    // The reduces complete in launch order: finish up to the bracketed unit's.
    const ElemSpan b = units_[bracketed_];
    auto holds_bracketed = [&](const Pending& p) { return intersect(p.span, b).count() > 0; };
    while (std::any_of(pending_.begin(), pending_.end(), holds_bracketed)) {
      finish(pending_.front());
      pending_.pop_front();
    }
  }
  if (staged_[unit]) return;
  staged_[unit] = true;
  staging_.add(units_[unit].count() * 4);
}

void ZeroGradients::on_grad_end(int unit) {
  if (unit != bracketed_ || unit < 0) return;
  launch(units_[unit]);
  poll();
}

void ZeroGradients::on_ready(int64_t begin, int64_t end) {
  MT_CHECK(end == frontier_ && begin <= end && begin >= (span_ ? span_->begin : 0),
           "grad-ready range [{}, {}) does not continue the finished range from {}", begin, end,
           frontier_);
  frontier_ = begin;
  if (begin < end) launch({begin, end});
  poll();
  while (pending_.size() > kMaxPending) {  // bound the gradients held for reduction
    finish(pending_.front());
    pending_.pop_front();
  }
}

void ZeroGradients::set_wire_dtype(DType wire) {
  MT_CHECK(wire == DType::F32 || wire == DType::BF16,
           "ZeRO gradient reduction dtype must be f32 or bf16, got {}", dtype_name(wire));
  MT_CHECK(pending_.empty(), "set_wire_dtype() with gradient reductions pending");
  // 16-bit elements at the f32 buffer's indices; pages committed only while
  // a range is pending (reserved: never the whole model at once).
  if (wire == DType::BF16 && !wire_) wire_ = std::make_unique<ReservedBuffer>((layout_.numel() + 1) / 2);
  if (wire == DType::F32) wire_.reset();
}

void ZeroGradients::launch(ElemSpan span) {
  Pending p{span, {}};
  if (wire_) {
    narrow_to_wire(span);
    uint16_t* w = reinterpret_cast<uint16_t*>(wire_->data());
    for (const OwnedPiece& piece : layout_.pieces(span))
      p.works.push_back(comm_.reduce(w + piece.span.begin, w + piece.span.begin,
                                     static_cast<size_t>(piece.span.count()), DType::BF16,
                                     comm::ReduceOp::Avg, piece.owner));
  } else {
    float* g = grads_.data();
    for (const OwnedPiece& piece : layout_.pieces(span))
      p.works.push_back(comm_.reduce(g + piece.span.begin, g + piece.span.begin,
                                     static_cast<size_t>(piece.span.count()), DType::F32,
                                     comm::ReduceOp::Avg, piece.owner));
  }
  ++reductions_;
  for (const comm::Work& w : p.works) {
    launched_at_.push_back(steady_now_s());
    clock_->watch(w);
  }
  pending_.push_back(std::move(p));
}

void ZeroGradients::poll() {
  while (!pending_.empty()) {
    for (const auto& w : pending_.front().works)
      if (!w.test()) return;
    finish(pending_.front());
    pending_.pop_front();
  }
}

void ZeroGradients::finish(Pending& p) {
  comm::wait_all(p.works);  // rethrows a failed reduce
  const ElemSpan own = layout_.own(), mine = intersect(p.span, own);
  float* s = shard();
  if (wire_) {  // the f32 pages went at launch: widen the averaged bf16 piece
    const uint16_t* w = reinterpret_cast<const uint16_t*>(wire_->data());
    for (int64_t i = mine.begin; i < mine.end; ++i) s[i - own.begin] += bf16_to_f32(w[i]);
    wire_->discard_bytes(static_cast<size_t>(p.span.begin) * 2, static_cast<size_t>(p.span.end) * 2);
    wire_bytes_.add(-p.span.count() * 2);
    return;
  }
  const float* g = grads_.data();
  for (int64_t i = mine.begin; i < mine.end; ++i) s[i - own.begin] += g[i];
  grads_.discard(p.span.begin, p.span.end);
  release_staged(p.span);
}

int64_t ZeroGradients::release_staged(ElemSpan span) {
  int64_t bytes = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!staged_[u] || units_[u].begin < span.begin || units_[u].end > span.end) continue;
    staged_[u] = false;
    bytes += units_[u].count() * 4;
  }
  staging_.add(-bytes);
  return bytes;
}

void ZeroGradients::narrow_to_wire(ElemSpan span) {
  // An earlier reduce of the same elements (the embeddings are reduced twice
  // per backward) finishes before its wire elements are overwritten.
  auto overlaps = [&](const Pending& q) { return q.span.begin < span.end && span.begin < q.span.end; };
  while (std::any_of(pending_.begin(), pending_.end(), overlaps)) {
    finish(pending_.front());
    pending_.pop_front();
  }
  // Chunk by chunk, so that the f32 and the bf16 copy of a large range (the
  // tied embedding) are never both resident: the f32 pages of each chunk go
  // as soon as it is rounded. Chunk ends sit on absolute multiples of
  // kChunk (2 MiB of f32), so every discard covers whole pages.
  constexpr int64_t kChunk = int64_t{1} << 19;
  narrowing_.set(release_staged(span));  // the same bytes, now shrinking as they go
  const float* g = grads_.data();
  uint16_t* w = reinterpret_cast<uint16_t*>(wire_->data());
  for (int64_t b = span.begin; b < span.end;) {
    const int64_t e = std::min(span.end, (b / kChunk + 1) * kChunk);
    kernels_for(Device::cpu()).to_half(Stream::cpu(), HalfFormat::BF16, g + b, w + b, e - b);  // host buffers
    wire_bytes_.add((e - b) * 2);
    grads_.discard(b, e);
    narrowing_.add(-std::min(narrowing_.bytes(), (e - b) * 4));
    b = e;
  }
  narrowing_.set(0);
}

double ZeroGradients::end_backward() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t bottom = span_ ? span_->begin : 0;
  if (frontier_ > bottom) launch({bottom, frontier_});  // what was not reported
  frontier_ = 0;
  span_.reset();
  while (!pending_.empty()) {
    finish(pending_.front());
    pending_.pop_front();
  }
  // Units whose Need came but whose range was never reported (none today).
  for (size_t u = 0; u < units_.size(); ++u)
    if (staged_[u]) staged_[u] = false, staging_.add(-units_[u].count() * 4);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ZeroGradients::zero() {
  shard_.zero_();
  clock_->reset();
  launched_at_.clear();
  reductions_ = 0;
}

double ZeroGradients::busy_seconds() {
  // The engine runs reduces in issue order: reduce i ran from max(its
  // launch, reduce i-1's completion) to its own completion.
  const std::vector<double> done = clock_->stamps();
  double total = 0, prev = 0;
  for (size_t i = 0; i < done.size() && i < launched_at_.size(); ++i) {
    total += std::max(0.0, done[i] - std::max(launched_at_[i], prev));
    prev = done[i];
  }
  return total;
}

}  // namespace meshtrain::parallel
