#include "meshtrain/parallel/zero_gradients.h"

#include <algorithm>
#include <chrono>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

ZeroGradients::ZeroGradients(comm::Communicator comm, ZeroLayout layout,
                             std::vector<ElemSpan> units, ReservedBuffer& grads,
                             bool isolate_embedding)
    : comm_(std::move(comm)), layout_(layout), units_(std::move(units)), grads_(grads),
      isolate_embedding_(isolate_embedding) {
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

void ZeroGradients::begin_backward() {
  MT_CHECK(pending_.empty(), "begin_backward() with gradient reductions still pending");
  frontier_ = layout_.numel();
}

void ZeroGradients::on_grad_begin(int unit) {
  if (unit < 0 || unit >= static_cast<int>(units_.size())) return;
  if (isolate_embedding_ && unit != 0) {
    // The reduces complete in launch order: finish up to the embeddings'.
    auto holds_embedding = [&](const Pending& p) { return p.span.begin < units_[0].end; };
    while (std::any_of(pending_.begin(), pending_.end(), holds_embedding)) {
      finish(pending_.front());
      pending_.pop_front();
    }
  }
  if (staged_[unit]) return;
  staged_[unit] = true;
  staging_.add(units_[unit].count() * 4);
}

void ZeroGradients::on_grad_end(int unit) {
  if (unit != 0 || units_.empty()) return;
  launch(units_[0]);
  poll();
}

void ZeroGradients::on_ready(int64_t begin, int64_t end) {
  MT_CHECK(end == frontier_ && begin <= end && begin >= 0,
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

void ZeroGradients::launch(ElemSpan span) {
  Pending p{span, {}};
  float* g = grads_.data();
  for (const OwnedPiece& piece : layout_.pieces(span))
    p.works.push_back(comm_.reduce(g + piece.span.begin, g + piece.span.begin,
                                   static_cast<size_t>(piece.span.count()), DType::F32,
                                   comm::ReduceOp::Avg, piece.owner));
  ++reductions_;
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
  const float* g = grads_.data();
  float* s = shard();
  for (int64_t i = mine.begin; i < mine.end; ++i) s[i - own.begin] += g[i];
  grads_.discard(p.span.begin, p.span.end);
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!staged_[u] || units_[u].begin < p.span.begin || units_[u].end > p.span.end) continue;
    staged_[u] = false;
    staging_.add(-units_[u].count() * 4);
  }
}

double ZeroGradients::end_backward() {
  const auto t0 = std::chrono::steady_clock::now();
  if (frontier_ > 0) launch({0, frontier_});  // a model that reported nothing
  frontier_ = 0;
  while (!pending_.empty()) {
    finish(pending_.front());
    pending_.pop_front();
  }
  // Units whose Need came but whose range was never reported (none today).
  for (size_t u = 0; u < units_.size(); ++u)
    if (staged_[u]) staged_[u] = false, staging_.add(-units_[u].count() * 4);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ZeroGradients::zero() { shard_.zero_(); }

}  // namespace meshtrain::parallel
