// Batch normalization of NCHW f32 over (N, H, W) per channel (HW = H*W),
// with the split a synchronized batch norm needs: the statistics are sums
// that ranks add (allreduce) before the per-element passes. The fused
// training passes are exactly those pieces on one rank (count = N*HW), so
// they give the same bits:
//   forward  = batchnorm_partial_sums -> batchnorm_stats -> batchnorm_normalize
//   backward = batchnorm_backward_partial_sums -> batchnorm_backward_params
//              and batchnorm_backward_input.
// Sums are double (per channel, fixed order for a given shape): the variance
// is E[x^2] - E[x]^2, which keeps ~1e-16 relative in double where f32 would
// cancel when |mean| >> std. Plain OpenMP loops over channels (memory-bound:
// a pass reads the tensor once); no oneDNN, whose batch norm exposes no sums.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// (a) sum[c] = sum of x, sumsq[c] = sum of x^2 over this rank's (N, HW); overwritten.
void batchnorm_partial_sums(double* sum, double* sumsq, const float* inp, int64_t N, int64_t C,
                            int64_t HW);
// mean = sum / count, rstd = 1 / sqrt(var + eps) with the biased var
// = sumsq / count - mean^2 (clamped at 0), from the global sums and count.
void batchnorm_stats(float* mean, float* rstd, const double* sum, const double* sumsq,
                     int64_t count, int64_t C, float eps);
// (b) out = (x - mean[c]) * rstd[c] * weight[c] + bias[c]; out may be inp.
void batchnorm_normalize(float* out, const float* inp, const float* mean, const float* rstd,
                         const float* weight, const float* bias, int64_t N, int64_t C, int64_t HW);
// Fused single-rank training forward: writes out and the batch mean, rstd (C).
void batchnorm_forward_training(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int64_t N, int64_t C,
                                int64_t HW, float eps);
// Inference: normalizes with the running statistics (rstd = 1/sqrt(var + eps)).
void batchnorm_forward_inference(float* out, const float* inp, const float* running_mean,
                                 const float* running_var, const float* weight, const float* bias,
                                 int64_t N, int64_t C, int64_t HW, float eps);
// The caller's running-statistics update (PyTorch's, momentum m, 0.1 there):
//   running_mean = (1 - m) running_mean + m mean
//   running_var  = (1 - m) running_var  + m var * count / (count - 1)
// (the unbiased batch variance), from the global sums; count must be > 1.
void batchnorm_update_running(float* running_mean, float* running_var, const double* sum,
                              const double* sumsq, int64_t count, int64_t C, float momentum);

// (c) sum_dout[c] = sum of dout, sum_dout_xhat[c] = sum of dout * xhat with
// xhat = (x - mean) * rstd, over this rank's (N, HW); overwritten.
void batchnorm_backward_partial_sums(double* sum_dout, double* sum_dout_xhat, const float* dout,
                                     const float* inp, const float* mean, const float* rstd,
                                     int64_t N, int64_t C, int64_t HW);
// dbias[c] += sum_dout[c], dweight[c] += sum_dout_xhat[c]. With data-parallel
// gradient averaging after the step pass this rank's own sums (as PyTorch's
// SyncBatchNorm does); passing the global ones would count them per rank.
void batchnorm_backward_params(float* dweight, float* dbias, const double* sum_dout,
                               const double* sum_dout_xhat, int64_t C);
// (d) dinp = weight rstd (dout - sum_dout/count - xhat sum_dout_xhat/count),
// from the global sums and count; overwritten (dinp may be dout).
void batchnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* mean,
                              const float* rstd, const float* weight, const double* sum_dout,
                              const double* sum_dout_xhat, int64_t count, int64_t N, int64_t C,
                              int64_t HW);
// Fused single-rank training backward: dinp overwritten, dweight/dbias accumulate.
void batchnorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* mean, const float* rstd,
                        const float* weight, int64_t N, int64_t C, int64_t HW);

}  // namespace meshtrain::cpu
