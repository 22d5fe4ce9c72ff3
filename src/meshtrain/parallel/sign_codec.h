// 1-bit compression with error compensation: the compression stage of 1-bit
// Adam / 1-bit LAMB (Tang et al. 2021), and EF-signSGD (Karimireddy et al.
// 2019). Each rank sends a bucket as one sign bit per element and one scale
// per tensor in it (per bucket without a layout), the tensor's mean
// magnitude (the scale that minimizes |M - s sign(M)|^2; one scale for
// tensors whose gradients differ by orders of magnitude would inflate the
// small ones); the messages are gathered from every rank and each rank
// decodes the average of s_w sign(M_w) in rank order. With error feedback a rank keeps
// M - s sign(M). Run it after a warmup of uncompressed steps, as 1-bit Adam
// does (comm.compression.warmup_steps).
#pragma once
#include <vector>

#include "meshtrain/parallel/lossy_codec.h"

namespace meshtrain::parallel {

class SignCodec final : public LossyCodec {
 public:
  SignCodec(const CompressionOptions& opts, CodecContext ctx);
  std::string name() const override { return "sign"; }
  std::string describe() const override;
  // The pieces of `span` that get a scale each: the tensors in it.
  std::vector<ElemSpan> segments(ElemSpan span) const;

 protected:
  std::unique_ptr<BucketReduction> compress(float* grads, ElemSpan span) override;

 private:
  std::vector<int64_t> cuts_;  // where tensors begin (sorted)
};

}  // namespace meshtrain::parallel
