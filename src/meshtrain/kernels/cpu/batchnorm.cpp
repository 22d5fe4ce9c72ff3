#include "meshtrain/kernels/cpu/batchnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::cpu {

void batchnorm_partial_sums(double* sum, double* sumsq, const float* inp, int64_t N, int64_t C,
                            int64_t HW) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
#pragma omp simd reduction(+ : s, q)
      for (int64_t i = 0; i < HW; ++i) {
        const double v = x[i];
        s += v;
        q += v * v;
      }
    }
    sum[c] = s;
    sumsq[c] = q;
  }
}

void batchnorm_stats(float* mean, float* rstd, const double* sum, const double* sumsq,
                     int64_t count, int64_t C, float eps) {
  MT_CHECK(count > 0, "batchnorm_stats: count {} (no elements per channel)", count);
  for (int64_t c = 0; c < C; ++c) {
    const double m = sum[c] / count;
    const double var = std::max(0.0, sumsq[c] / count - m * m);
    mean[c] = static_cast<float>(m);
    rstd[c] = static_cast<float>(1.0 / std::sqrt(var + eps));
  }
}

void batchnorm_normalize(float* out, const float* inp, const float* mean, const float* rstd,
                         const float* weight, const float* bias, int64_t N, int64_t C,
                         int64_t HW) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const float* x = inp + (n * C + c) * HW;
      float* y = out + (n * C + c) * HW;
      const float m = mean[c], r = rstd[c], w = weight[c], b = bias[c];
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) y[i] = (x[i] - m) * r * w + b;
    }
}

void batchnorm_forward_training(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int64_t N, int64_t C,
                                int64_t HW, float eps) {
  std::vector<double> sums(2 * C);
  batchnorm_partial_sums(sums.data(), sums.data() + C, inp, N, C, HW);
  batchnorm_stats(mean, rstd, sums.data(), sums.data() + C, N * HW, C, eps);
  batchnorm_normalize(out, inp, mean, rstd, weight, bias, N, C, HW);
}

void batchnorm_forward_inference(float* out, const float* inp, const float* running_mean,
                                 const float* running_var, const float* weight, const float* bias,
                                 int64_t N, int64_t C, int64_t HW, float eps) {
  std::vector<float> rstd(C);
  for (int64_t c = 0; c < C; ++c)
    rstd[c] = static_cast<float>(1.0 / std::sqrt(double(running_var[c]) + eps));
  batchnorm_normalize(out, inp, running_mean, rstd.data(), weight, bias, N, C, HW);
}

void batchnorm_update_running(float* running_mean, float* running_var, const double* sum,
                              const double* sumsq, int64_t count, int64_t C, float momentum) {
  MT_CHECK(count > 1, "batch norm: {} value(s) per channel; training needs more than 1", count);
  for (int64_t c = 0; c < C; ++c) {
    const double m = sum[c] / count;
    const double var = std::max(0.0, sumsq[c] / count - m * m) * count / (count - 1);
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * m);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * var);
  }
}

void batchnorm_backward_partial_sums(double* sum_dout, double* sum_dout_xhat, const float* dout,
                                     const float* inp, const float* mean, const float* rstd,
                                     int64_t N, int64_t C, int64_t HW) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const float m = mean[c], r = rstd[c];
    double s = 0, sx = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
      const float* dy = dout + (n * C + c) * HW;
#pragma omp simd reduction(+ : s, sx)
      for (int64_t i = 0; i < HW; ++i) {
        s += dy[i];
        sx += double(dy[i]) * ((x[i] - m) * r);  // xhat as the forward computed it
      }
    }
    sum_dout[c] = s;
    sum_dout_xhat[c] = sx;
  }
}

void batchnorm_backward_params(float* dweight, float* dbias, const double* sum_dout,
                               const double* sum_dout_xhat, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    dweight[c] += static_cast<float>(sum_dout_xhat[c]);
    dbias[c] += static_cast<float>(sum_dout[c]);
  }
}

void batchnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* mean,
                              const float* rstd, const float* weight, const double* sum_dout,
                              const double* sum_dout_xhat, int64_t count, int64_t N, int64_t C,
                              int64_t HW) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const float* x = inp + (n * C + c) * HW;
      const float* dy = dout + (n * C + c) * HW;
      float* dx = dinp + (n * C + c) * HW;
      const float m = mean[c], r = rstd[c], k = weight[c] * r;
      const float mean_dy = static_cast<float>(sum_dout[c] / count);
      const float mean_dy_xhat = static_cast<float>(sum_dout_xhat[c] / count);
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i)
        dx[i] = k * (dy[i] - mean_dy - ((x[i] - m) * r) * mean_dy_xhat);
    }
}

void batchnorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* mean, const float* rstd,
                        const float* weight, int64_t N, int64_t C, int64_t HW) {
  std::vector<double> sums(2 * C);
  batchnorm_backward_partial_sums(sums.data(), sums.data() + C, dout, inp, mean, rstd, N, C, HW);
  batchnorm_backward_params(dweight, dbias, sums.data(), sums.data() + C, C);
  batchnorm_backward_input(dinp, dout, inp, mean, rstd, weight, sums.data(), sums.data() + C,
                           N * HW, N, C, HW);
}

}  // namespace meshtrain::cpu
