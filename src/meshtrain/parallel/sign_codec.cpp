#include "meshtrain/parallel/sign_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "meshtrain/nn/model.h"

namespace meshtrain::parallel {

SignCodec::SignCodec(const CompressionOptions& opts, CodecContext ctx) : LossyCodec(opts, std::move(ctx)) {
  if (ctx_.layout)
    for (const ParamInfo& p : ctx_.layout->params) cuts_.push_back(p.begin);
  std::sort(cuts_.begin(), cuts_.end());
}

std::vector<ElemSpan> SignCodec::segments(ElemSpan span) const {
  std::vector<ElemSpan> out;
  int64_t at = span.begin;
  for (auto it = std::upper_bound(cuts_.begin(), cuts_.end(), span.begin); it != cuts_.end() && *it < span.end; ++it) {
    out.push_back({at, *it});
    at = *it;
  }
  out.push_back({at, span.end});
  return out;
}

std::unique_ptr<BucketReduction> SignCodec::compress(float* grads, ElemSpan span) {
  const std::vector<ElemSpan> segs = segments(span);
  const int64_t n = span.count(), scales = static_cast<int64_t>(segs.size());
  const int64_t words = scales + (n + 31) / 32;  // the scales, then bit i set when element i >= 0
  float* g = grads + span.begin;
  auto mine = std::make_shared<std::vector<uint32_t>>(static_cast<size_t>(words), 0u);
  uint32_t* bits = mine->data() + scales;
  float* e = ef_.residual();
  for (int64_t s = 0; s < scales; ++s) {
    const ElemSpan seg = segs[s];
    double l1 = 0;
    for (int64_t i = seg.begin; i < seg.end; ++i) l1 += std::fabs(grads[i]);
    const float scale = static_cast<float>(l1 / static_cast<double>(seg.count()));
    std::memcpy(mine->data() + s, &scale, sizeof(scale));
    for (int64_t i = seg.begin; i < seg.end; ++i) {
      const bool positive = grads[i] >= 0.f;
      const int64_t at = i - span.begin;
      if (positive) bits[at / 32] |= 1u << (at % 32);
      if (e) e[i] = grads[i] - (positive ? scale : -scale);  // what the sign and scale leave out
    }
  }
  const int ranks = ctx_.comm->size();
  auto all = std::make_shared<std::vector<uint32_t>>(static_cast<size_t>(words * ranks));
  comm::Work work = ctx_.comm->allgather(mine->data(), all->data(), static_cast<size_t>(words * ranks), DType::F32);
  if (ctx_.watch) ctx_.watch(work);
  return reduction_of({work}, [g, span, segs, words, scales, ranks, mine, all] {
    std::fill(g, g + span.count(), 0.f);
    for (int w = 0; w < ranks; ++w) {  // rank order: the same sum everywhere
      const uint32_t* msg = all->data() + static_cast<size_t>(w) * words;
      for (int64_t s = 0; s < scales; ++s) {
        float scale;
        std::memcpy(&scale, msg + s, sizeof(scale));
        for (int64_t i = segs[s].begin - span.begin; i < segs[s].end - span.begin; ++i)
          g[i] += (msg[scales + i / 32] >> (i % 32)) & 1u ? scale : -scale;
      }
    }
    const float inv = 1.f / static_cast<float>(ranks);
    for (int64_t i = 0; i < span.count(); ++i) g[i] *= inv;
  });
}

std::string SignCodec::describe() const {
  return fmt::format("1-bit sign compression, one scale per tensor{}", schedule_note());
}

}  // namespace meshtrain::parallel
