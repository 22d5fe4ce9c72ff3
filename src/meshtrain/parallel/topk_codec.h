// Top-k sparsification (Aji & Heafield 2017; Lin et al. 2018): each rank
// sends the k = ratio x n largest-magnitude elements of a bucket as
// (index, value) pairs, 8 bytes each, gathered from every rank (the picks of
// different ranks do not line up, so they cannot be summed on the wire).
// Every rank adds the gathered pairs in rank order and divides by the rank
// count: the same average everywhere. With error feedback a rank keeps the
// elements it did not send.
#pragma once
#include "meshtrain/parallel/lossy_codec.h"

namespace meshtrain::parallel {

class TopKCodec final : public LossyCodec {
 public:
  TopKCodec(const CompressionOptions& opts, CodecContext ctx);
  std::string name() const override { return "topk"; }
  std::string describe() const override;
  // Elements a bucket of n sends: max(1, round(ratio x n)), at most n.
  int64_t picks(int64_t n) const;

 protected:
  std::unique_ptr<BucketReduction> compress(float* grads, ElemSpan span) override;
};

}  // namespace meshtrain::parallel
