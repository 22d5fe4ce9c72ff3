#include "meshtrain/parallel/powersgd_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/model.h"

namespace meshtrain::parallel {

namespace {

const KernelTable& cpu() { return kernels_for(Device::cpu()); }

double column_dot(const float* p, int64_t n, int64_t r, int64_t a, int64_t b) {
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += double(p[i * r + a]) * p[i * r + b];
  return dot;
}

// Gram-Schmidt on column j of a row-major n x r matrix (r is small), the
// columns before it orthonormal already. Returns false for column j when what is left of it after removing the
// earlier ones is below `dependent` of its length (0: only an exact zero),
// leaving it zero.
// The projections are removed twice ("twice is enough", Giraud et al.
// 2005): what one pass leaves of a nearly dependent column is mostly
// rounding error along the earlier columns, which would otherwise be
// normalized into a direction far from orthogonal to them (measured: a
// 0.14 error where the exact value was 1e-8, on gradients spread over 8
// decades).
bool orthonormalize_column(float* p, int64_t n, int64_t r, int64_t j, double dependent) {
  const double before = column_dot(p, n, r, j, j);
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t k = 0; k < j; ++k) {
      const float d = static_cast<float>(column_dot(p, n, r, j, k));
      for (int64_t i = 0; i < n; ++i) p[i * r + j] -= d * p[i * r + k];
    }
  const double sq = column_dot(p, n, r, j, j);
  const bool independent = sq > 0 && sq > dependent * dependent * before;
  const float inv = independent ? static_cast<float>(1.0 / std::sqrt(sq)) : 0.f;
  for (int64_t i = 0; i < n; ++i) p[i * r + j] *= inv;
  return independent;
}

void orthonormalize_columns(float* p, int64_t n, int64_t r) {
  for (int64_t j = 0; j < r; ++j) orthonormalize_column(p, n, r, j, 0);
}

// Q's columns made orthonormal before P = M Q: P then has M's conditioning,
// not the square of it that a warm start accumulates. A column that has
// become dependent (a gradient of lower rank than r last step: Q = M^T P^
// inherits its rank) is replaced by a random one, so Q keeps rank r and the
// power iteration can reach every direction; at full rank the result stays
// the exact average. `rng` is the same on every rank, and so is Q.
void orthonormalize_start(float* q, int64_t m, int64_t r, Rng& rng) {
  for (int64_t j = 0; j < r; ++j) {
    for (int tries = 0; !orthonormalize_column(q, m, r, j, 1e-3); ++tries) {
      MT_CHECK(tries < 8, "PowerSGD could not complete an orthonormal basis of {} columns in {} dimensions", r, m);
      for (int64_t i = 0; i < m; ++i) q[i * r + j] = rng.normal();
    }
  }
}

}  // namespace

// One bucket: round 1 averages [P of each matrix | the exact elements],
// round 2 the Q of each matrix; decoding writes P^ Q^T.
class PowerSgdCodec::Reduction final : public BucketReduction {
 public:
  Reduction(PowerSgdCodec& codec, float* grads, ElemSpan span) : c_(codec), g_(grads) {
    split(span);
    int64_t p_len = exact_elements_, q_len = 0;
    for (const Matrix* m : mats_) p_len += m->rows * m->rank, q_len += m->cols * m->rank;
    p_ = Tensor::zeros({std::max<int64_t>(1, p_len)}, DType::F32, MemCategory::CommBuffers);
    q_ = Tensor::zeros({std::max<int64_t>(1, q_len)}, DType::F32, MemCategory::CommBuffers);
    float* p = p_.data<float>();
    for (const Matrix* m : mats_) orthonormalize_start(c_.q_.data<float>() + m->q_at, m->cols, m->rank, c_.refill_);
    for (const Matrix* m : mats_) {  // P = M Q
      cpu().sgemm(Stream::cpu(), false, false, m->rows, m->rank, m->cols, 1.f, g_ + m->begin, m->cols,
                  c_.q_.data<float>() + m->q_at, m->rank, 0.f, p, m->rank);
      p += m->rows * m->rank;
    }
    for (const ElemSpan& e : exact_) {
      std::memcpy(p, g_ + e.begin, static_cast<size_t>(e.count()) * sizeof(float));
      p += e.count();
    }
    launch(p_, p_len);
  }

  void launch_next_round() override {
    if (round_ == 1) next_round();
  }

  void finish() override {
    while (round_ < 3) {
      work_.wait();
      next_round();
    }
  }

 private:
  // The matrices inside span (whole: buckets end on tensor boundaries) and the rest.
  void split(ElemSpan span) {
    int64_t at = span.begin;
    for (const Matrix& m : c_.matrices_) {
      if (m.end() <= span.begin || m.begin >= span.end) continue;
      MT_CHECK(m.begin >= span.begin && m.end() <= span.end,
               "PowerSGD bucket [{}, {}) cuts the matrix at [{}, {})", span.begin, span.end, m.begin, m.end());
      if (m.begin > at) exact_.push_back({at, m.begin});
      mats_.push_back(&m);
      at = m.end();
    }
    if (at < span.end) exact_.push_back({at, span.end});
    for (const ElemSpan& e : exact_) exact_elements_ += e.count();
  }

  void launch(const Tensor& buf, int64_t n) {
    work_ = c_.ctx_.comm->allreduce(buf.data<float>(), static_cast<size_t>(n), DType::F32, comm::ReduceOp::Avg);
    if (c_.ctx_.watch) c_.ctx_.watch(work_);
  }

  void next_round() {
    work_.wait();  // done: rethrows a failure
    if (round_ == 1)
      second_round();
    else
      decode();
    ++round_;
  }

  // P is averaged: the exact elements are final; orthonormalize P, Q_local = M^T P^.
  void second_round() {
    float* p = p_.data<float>();
    float* q = q_.data<float>();
    float* residual = c_.ef_.residual();
    float* exact = p;
    for (const Matrix* m : mats_) exact += m->rows * m->rank;
    for (const ElemSpan& e : exact_) {
      std::memcpy(g_ + e.begin, exact, static_cast<size_t>(e.count()) * sizeof(float));
      if (residual) std::fill(residual + e.begin, residual + e.end, 0.f);  // sent exactly
      exact += e.count();
    }
    int64_t q_len = 0;
    for (const Matrix* m : mats_) {
      orthonormalize_columns(p, m->rows, m->rank);
      const float* M = g_ + m->begin;
      cpu().sgemm(Stream::cpu(), true, false, m->cols, m->rank, m->rows, 1.f, M, m->cols, p, m->rank,
                  0.f, q, m->rank);
      if (residual) {  // what this rank's part of the approximation leaves out
        float* e = residual + m->begin;
        std::memcpy(e, M, static_cast<size_t>(m->rows * m->cols) * sizeof(float));
        cpu().sgemm(Stream::cpu(), false, true, m->rows, m->cols, m->rank, -1.f, p, m->rank, q,
                    m->rank, 1.f, e, m->cols);
      }
      p += m->rows * m->rank;
      q += m->cols * m->rank;
      q_len += m->cols * m->rank;
    }
    if (mats_.empty()) {
      round_ = 2;  // nothing to factor: no second round
      return;
    }
    launch(q_, q_len);
  }

  // M ~ P^ Q^T, and the averaged Q starts the next step's power iteration.
  void decode() {
    const float* p = p_.data<float>();
    const float* q = q_.data<float>();
    for (const Matrix* m : mats_) {
      cpu().sgemm(Stream::cpu(), false, true, m->rows, m->cols, m->rank, 1.f, p, m->rank, q, m->rank,
                  0.f, g_ + m->begin, m->cols);
      std::memcpy(c_.q_.data<float>() + m->q_at, q, static_cast<size_t>(m->cols * m->rank) * sizeof(float));
      p += m->rows * m->rank;
      q += m->cols * m->rank;
    }
  }

  PowerSgdCodec& c_;
  float* g_;
  std::vector<const Matrix*> mats_;
  std::vector<ElemSpan> exact_;
  int64_t exact_elements_ = 0;
  Tensor p_, q_;
  comm::Work work_;
  int round_ = 1;  // 1: P in flight, 2: Q in flight, 3: done
};

PowerSgdCodec::PowerSgdCodec(const CompressionOptions& opts, CodecContext ctx)
    : LossyCodec(opts, std::move(ctx)), refill_(opts.seed + 1) {
  MT_CHECK(opts_.rank >= 1, "comm.compression.rank must be >= 1, got {}", opts_.rank);
  int64_t q_len = 0;
  if (ctx_.layout) {
    for (const ParamInfo& p : ctx_.layout->params) {
      if (!p.trained || p.shape.size() < 2) continue;
      const int64_t rows = p.shape[0], cols = rows > 0 ? p.numel() / rows : 0;
      if (rows < 2 || cols < 2) continue;
      const int64_t r = std::min<int64_t>({opts_.rank, rows, cols});
      matrices_.push_back({p.begin, rows, cols, r, q_len});
      q_len += cols * r;
    }
  }
  q_ = Tensor::zeros({std::max<int64_t>(1, q_len)}, DType::F32, MemCategory::CommBuffers);
  Rng rng(opts_.seed);  // the same start on every rank
  float* q = q_.data<float>();
  for (int64_t i = 0; i < q_len; ++i) q[i] = rng.normal();
}

std::unique_ptr<BucketReduction> PowerSgdCodec::compress(float* grads, ElemSpan span) {
  return std::make_unique<Reduction>(*this, grads, span);
}

int64_t PowerSgdCodec::sent_elements(ElemSpan span) const {
  int64_t in_matrices = 0, factors = 0;
  for (const Matrix& m : matrices_) {
    if (m.begin < span.begin || m.end() > span.end) continue;
    in_matrices += m.rows * m.cols;
    factors += m.rank * (m.rows + m.cols);
  }
  return span.count() - in_matrices + factors;
}

std::string PowerSgdCodec::describe() const {
  const int64_t n = ctx_.num_params, sent = sent_elements({0, n});
  return fmt::format("PowerSGD rank {} over {} matrices ({:.1f}x fewer gradient elements sent){}",
                     opts_.rank, matrices_.size(), sent > 0 ? double(n) / sent : 0.0, schedule_note());
}

}  // namespace meshtrain::parallel
