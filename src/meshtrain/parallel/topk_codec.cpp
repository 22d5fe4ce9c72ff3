#include "meshtrain/parallel/topk_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

namespace {

// (index within the bucket, value) as two 32-bit words, sent as f32 elements
// (an allgather copies bits; nothing is added).
struct Pick {
  uint32_t index;
  float value;
};
static_assert(sizeof(Pick) == 2 * sizeof(float));

}  // namespace

TopKCodec::TopKCodec(const CompressionOptions& opts, CodecContext ctx) : LossyCodec(opts, std::move(ctx)) {
  MT_CHECK(opts_.ratio > 0 && opts_.ratio <= 1, "comm.compression.ratio must be in (0, 1], got {}", opts_.ratio);
}

int64_t TopKCodec::picks(int64_t n) const {
  return std::clamp<int64_t>(std::llround(opts_.ratio * static_cast<double>(n)), 1, std::max<int64_t>(1, n));
}

std::unique_ptr<BucketReduction> TopKCodec::compress(float* grads, ElemSpan span) {
  const int64_t n = span.count(), k = picks(n);
  MT_CHECK(n <= int64_t{UINT32_MAX}, "top-k bucket of {} elements: indices are 32-bit", n);
  float* g = grads + span.begin;
  // The k largest magnitudes; ties broken by index so the pick is a function of the values.
  std::vector<uint32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0u);
  // NaN ranks as the largest magnitude (a strict weak order even then: the
  // step is skipped and the residual dropped, TrainStep/update_skipped).
  auto magnitude = [g](uint32_t i) {
    const float x = std::fabs(g[i]);
    return std::isnan(x) ? std::numeric_limits<float>::infinity() : x;
  };
  auto larger = [&magnitude](uint32_t a, uint32_t b) {
    const float x = magnitude(a), y = magnitude(b);
    return x > y || (x == y && a < b);
  };
  if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
  auto mine = std::make_shared<std::vector<Pick>>(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) (*mine)[i] = {order[i], g[order[i]]};
  if (float* e = ef_.residual()) {  // keep what is not sent
    std::memcpy(e + span.begin, g, static_cast<size_t>(n) * sizeof(float));
    for (const Pick& p : *mine) e[span.begin + p.index] = 0.f;
  }
  const int ranks = ctx_.comm->size();
  auto all = std::make_shared<std::vector<Pick>>(static_cast<size_t>(k) * ranks);
  comm::Work work = ctx_.comm->allgather(mine->data(), all->data(), static_cast<size_t>(2 * k * ranks), DType::F32);
  if (ctx_.watch) ctx_.watch(work);
  return reduction_of({work}, [g, n, ranks, mine, all] {
    std::fill(g, g + n, 0.f);
    for (const Pick& p : *all) g[p.index] += p.value;  // rank order: the same sum everywhere
    const float inv = 1.f / static_cast<float>(ranks);
    for (int64_t i = 0; i < n; ++i) g[i] *= inv;
  });
}

std::string TopKCodec::describe() const {
  return fmt::format("top-k sparsification, {:.3g}% of each bucket as (index, value) pairs{}",
                     100 * opts_.ratio, schedule_note());
}

}  // namespace meshtrain::parallel
