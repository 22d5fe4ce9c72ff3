// PowerSGD (Vogels et al. 2019): each gradient matrix M (n x m; a tensor of
// rank > 2 as its first dimension by the rest) is sent as two rank-r factors
// from one step of power iteration, warm-started from the last step's Q:
//   P = M Q            allreduce(P) (average)     P^ = orthonormal columns of P
//   Q = M^T P^         allreduce(Q) (average)     M ~ P^ Q^T
// r (n + m) numbers cross the wire instead of n m. Vectors (biases, norms)
// and matrices with a side of 1 are sent exact, packed beside P. With error
// feedback a rank keeps M - P^ Q_local^T (its own part of the approximation,
// Vogels' Algorithm 1). At r = min(n, m) the result equals the exact average
// (P^ spans M's columns). The averaged Q is kept as the next step's start
// (the same on every rank, as the power iteration needs), orthonormalized
// before use, its dependent columns replaced by random ones.
#pragma once
#include <vector>

#include "meshtrain/core/rng.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/parallel/lossy_codec.h"

namespace meshtrain::parallel {

class PowerSgdCodec final : public LossyCodec {
 public:
  // A matrix of the flat buffer and its rank; q_at: its Q in q_.
  struct Matrix {
    int64_t begin = 0, rows = 0, cols = 0, rank = 0, q_at = 0;
    int64_t end() const { return begin + rows * cols; }
  };
  PowerSgdCodec(const CompressionOptions& opts, CodecContext ctx);
  std::string name() const override { return "powersgd"; }
  std::string describe() const override;
  bool whole_tensors() const override { return true; }
  const std::vector<Matrix>& matrices() const { return matrices_; }
  // Elements sent for span: sum of r (n + m) over its matrices plus the rest.
  int64_t sent_elements(ElemSpan span) const;
  // Also the warm-start Q (the same on every rank). The generator that
  // refills Q's dependent columns restarts from its seed on resume.
  SyncState checkpoint_state() override {
    SyncState s = LossyCodec::checkpoint_state();
    s.tensors.push_back({"sync.powersgd_q", &q_, false});
    return s;
  }

 protected:
  std::unique_ptr<BucketReduction> compress(float* grads, ElemSpan span) override;
  int64_t own_state_bytes() const override { return static_cast<int64_t>(q_.nbytes()); }

 private:
  class Reduction;
  std::vector<Matrix> matrices_;  // buffer order
  Tensor q_;                      // every matrix's Q (cols x rank), row-major
  Rng refill_;                    // Q's dependent columns (the same on every rank)
};

}  // namespace meshtrain::parallel
