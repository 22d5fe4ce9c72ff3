// The kernel seam: the ops a model, the optimizer, the gradient strategies
// and the precision conversions call, as one table per device. Callers take
// the table of the device their buffers live on (`kernels_for(device)`) and
// call `k.matmul_forward(stream, ...)`; pointers are in that device's memory
// and the op is queued on `stream` (on the CPU it has finished when the call
// returns). Nothing here names a device API: a backend fills a table with
// these signatures (kernels/cpu/ through a stream-ignoring adapter,
// kernels/cuda/ with its own kernels), and no layer above kernels/ changes.
// Signatures follow llm.c's launchers: outputs first, shapes last; parameter
// gradients accumulate (+=), activation gradients are overwritten unless the
// op says otherwise. The semantics of each op are those of the CPU function
// of the same name (kernels/cpu/*.h), which the tests hold every backend to.
#pragma once
#include <cstdint>
#include <string>

#include "meshtrain/core/device.h"
#include "meshtrain/core/half.h"
#include "meshtrain/core/stream.h"
#include "meshtrain/kernels/adamw_hyper.h"
#include "meshtrain/kernels/image_shapes.h"
#include "meshtrain/kernels/optimizer_hyper.h"
#include "meshtrain/kernels/rope_view.h"

namespace meshtrain {

struct KernelTable {
  Device device;
  // Linear layers: f32, and 16-bit operands with f32 accumulation.
  void (*matmul_forward)(Stream, float* out, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C, int64_t OC, bool accumulate);
  void (*matmul_backward)(Stream, float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                          bool accumulate_dinp);
  void (*matmul_forward_half)(Stream, HalfFormat fmt, float* out, const uint16_t* inp,
                              const uint16_t* weight, const float* bias, int64_t N, int64_t C,
                              int64_t OC, bool accumulate);
  void (*matmul_backward_half)(Stream, HalfFormat fmt, float* dinp, float* dweight, float* dbias,
                               const float* dout, uint16_t* dout_half, const uint16_t* inp,
                               const uint16_t* weight, int64_t N, int64_t C, int64_t OC,
                               bool accumulate_dinp);
  void (*matmul_backward_weight_half)(Stream, HalfFormat fmt, float* dweight,
                                      const uint16_t* dout_half, const uint16_t* inp, int64_t N,
                                      int64_t C, int64_t OC);
  // A general strided GEMM on row-major matrices, C = alpha op(A) op(B) + beta C
  // (small products: LoRA's adapters).
  void (*sgemm)(Stream, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* Cm,
                int64_t ldc);
  // Normalization and activations.
  void (*layernorm_forward)(Stream, float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int64_t N, int64_t C);
  void (*layernorm_backward)(Stream, float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, const float* mean,
                             const float* rstd, int64_t N, int64_t C);
  void (*rmsnorm_forward)(Stream, float* out, float* rstd, const float* inp, const float* weight,
                          int64_t N, int64_t C, float eps);
  void (*rmsnorm_backward)(Stream, float* dinp, float* dweight, const float* dout,
                           const float* inp, const float* weight, const float* rstd, int64_t N,
                           int64_t C);
  void (*gelu_forward)(Stream, float* out, const float* inp, int64_t n);
  void (*gelu_backward)(Stream, float* dinp, const float* inp, const float* dout, int64_t n);
  void (*swiglu_forward)(Stream, float* out, const float* gate_up, int64_t N, int64_t H);
  void (*swiglu_backward)(Stream, float* dgate_up, const float* dout, const float* gate_up,
                          int64_t N, int64_t H);
  // Attention (causal, packed qkv), rotary positions, embeddings, the loss.
  // `workspace` holds the backend's scratch (attention_workspace_floats per
  // thread on the CPU); `nthreads` is the CPU's, other backends ignore it.
  void (*attention_forward)(Stream, float* out, float* lse, const float* qkv, int64_t B,
                            int64_t T, int64_t C, int64_t NH, float* workspace, int nthreads);
  void (*attention_backward)(Stream, float* dqkv, const float* dout, const float* qkv,
                             const float* out, const float* lse, int64_t B, int64_t T, int64_t C,
                             int64_t NH, float* workspace, int nthreads);
  // Mixed precision's attention: the two products (Q K^T, P V and their
  // gradients) may take operands rounded to `fmt`, accumulating in f32;
  // softmax, statistics and outputs are f32. The CPU computes them in f32
  // (its attention_forward), a GPU on its tensor cores.
  void (*attention_forward_half)(Stream, HalfFormat fmt, float* out, float* lse, const float* qkv,
                                 int64_t B, int64_t T, int64_t C, int64_t NH, float* workspace,
                                 int nthreads);
  void (*attention_backward_half)(Stream, HalfFormat fmt, float* dqkv, const float* dout,
                                  const float* qkv, const float* out, const float* lse, int64_t B,
                                  int64_t T, int64_t C, int64_t NH, float* workspace, int nthreads);
  void (*rope_forward)(Stream, float* x, int64_t B, int64_t T, int64_t nheads, int64_t hd,
                       int64_t row_stride, const RopeView& table);
  void (*rope_backward)(Stream, float* dx, int64_t B, int64_t T, int64_t nheads, int64_t hd,
                        int64_t row_stride, const RopeView& table);
  void (*encoder_forward)(Stream, float* out, const int32_t* inp, const float* wte,
                          const float* wpe, int64_t B, int64_t T, int64_t C);
  void (*encoder_backward)(Stream, float* dwte, float* dwpe, const float* dout,
                           const int32_t* inp, int64_t B, int64_t T, int64_t C);
  // Rows [v_begin, v_begin + v_rows) of an embedding table (f32, or its
  // 16-bit copy when `table_half` is set); an id outside them gives a zero
  // row (another vocabulary shard's).
  void (*embedding_lookup)(Stream, float* out, const int32_t* ids, const float* table,
                           const uint16_t* table_half, HalfFormat fmt, int64_t v_begin,
                           int64_t v_rows, int64_t N, int64_t C);
  // dtable[id - v_begin] += dout[i] for the ids in range, in row order i.
  void (*embedding_accumulate)(Stream, float* dtable, const float* dout, const int32_t* ids,
                               int64_t v_begin, int64_t v_rows, int64_t N, int64_t C);
  // out[i] += rows[(first + i) % period] over N rows of C (biases: period 1;
  // positions: period T).
  void (*add_periodic_rows)(Stream, float* out, const float* rows, int64_t N, int64_t C,
                            int64_t period, int64_t first);
  // drows[t] += sum of d[i] over i % period == t, i ascending.
  void (*sum_periodic_rows)(Stream, float* drows, const float* d, int64_t N, int64_t C,
                            int64_t period);
  // Returns the number of counted rows (targets >= 0); waits for the device.
  int64_t (*softmax_cross_entropy_forward)(Stream, float* losses, const float* logits,
                                           const int32_t* targets, int64_t N, int64_t V,
                                           int64_t Vp);
  void (*softmax_cross_entropy_backward)(Stream, float* logits, const int32_t* targets,
                                         float dloss, int64_t N, int64_t V, int64_t Vp);
  // Elementwise, reductions, precision conversions, the optimizer step.
  void (*copy)(Stream, float* out, const float* a, int64_t n);
  void (*add_inplace)(Stream, float* out, const float* a, int64_t n);
  // Sum of squares in double, in an order fixed by n alone; waits for the device.
  double (*sum_squares)(Stream, const float* x, int64_t n);
  void (*to_half)(Stream, HalfFormat fmt, const float* in, uint16_t* out, int64_t n);
  void (*from_half)(Stream, HalfFormat fmt, const uint16_t* in, float* out, int64_t n);
  void (*adamw_step)(Stream, float* param, const float* grad, float* m, float* v, int64_t n,
                     const AdamWHyper& h);
  // SGD/LARS and LAMB (kernels/optimizer_hyper.h); lamb_moments returns the
  // update's sum of squares in an order fixed by n alone and waits for the device.
  void (*sgd_step)(Stream, float* param, const float* grad, float* buf, int64_t n,
                   const SgdHyper& h);
  double (*lamb_moments)(Stream, const float* grad, float* m, float* v, const float* param,
                         int64_t n, const LambHyper& h);
  void (*lamb_apply)(Stream, float* param, const float* m, const float* v, int64_t n,
                     const LambHyper& h, float step_size);
  // Grouped-query attention's shared key/value heads (kernels/cpu/kv_heads.h).
  void (*expand_kv_heads)(Stream, float* full, const float* qkv, int64_t N, int64_t NH,
                          int64_t NKV, int64_t hd);
  void (*fold_kv_heads)(Stream, float* dqkv, const float* dfull, int64_t N, int64_t NH,
                        int64_t NKV, int64_t hd);
  // Cross-entropy over a vocabulary shard, between the tp group's collectives
  // (kernels/cpu/vocab_shard_loss.h); vocab_shard_losses waits for the device.
  void (*vocab_shard_row_max)(Stream, float* maxes, const float* logits, int64_t N, int64_t real,
                              int64_t stride);
  void (*vocab_shard_sum_exp)(Stream, float* scratch, const float* logits, const float* maxes,
                              const int32_t* targets, int64_t N, int64_t real, int64_t stride,
                              int64_t v_begin);
  int64_t (*vocab_shard_losses)(Stream, float* losses, float* lse, const float* scratch,
                                const int32_t* targets, int64_t N);
  void (*vocab_shard_backward)(Stream, float* logits, const float* lse, const int32_t* targets,
                               float dloss, int64_t N, int64_t real, int64_t stride,
                               int64_t v_begin);
  // The distributed matrix multiply's local work (linalg/; semantics of
  // kernels/cpu/gemm_general.h): f64 GEMM, 16-bit operands into an f32 C,
  // equal-shaped products at fixed strides, and a pitched copy of `rows` rows
  // of `row_bytes` (packing a panel for a transfer).
  void (*dgemm)(Stream, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                double* Cm, int64_t ldc);
  void (*gemm_half)(Stream, HalfFormat fmt, bool trans_a, bool trans_b, int64_t M, int64_t N,
                    int64_t K, float alpha, const uint16_t* A, int64_t lda, const uint16_t* B,
                    int64_t ldb, float beta, float* Cm, int64_t ldc);
  void (*sgemm_strided_batched)(Stream, bool trans_a, bool trans_b, int64_t M, int64_t N,
                                int64_t K, float alpha, const float* A, int64_t lda,
                                int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                                float beta, float* Cm, int64_t ldc, int64_t stride_c,
                                int64_t batch);
  void (*copy_2d)(Stream, void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
                  int64_t row_bytes, int64_t rows);
  // Image models (issue 40): NCHW f32, shapes in kernels/image_shapes.h;
  // semantics of kernels/cpu/conv2d.h, batchnorm.h, relu.h, pooling.h, topk.h.
  // The CUDA backend throws for these until it has them (cuDNN).
  void (*conv2d_forward)(Stream, float* out, const float* inp, const float* weight,
                         const float* bias, const Conv2dShape& s);
  void (*conv2d_backward_data)(Stream, float* dinp, const float* dout, const float* weight,
                               const Conv2dShape& s);
  void (*conv2d_backward_weights)(Stream, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const Conv2dShape& s);
  void (*conv2d_forward_half)(Stream, HalfFormat fmt, float* out, const uint16_t* inp,
                              const uint16_t* weight, const float* bias, const Conv2dShape& s);
  void (*conv2d_backward_data_half)(Stream, HalfFormat fmt, float* dinp, const uint16_t* dout,
                                    const uint16_t* weight, const Conv2dShape& s);
  void (*conv2d_backward_weights_half)(Stream, HalfFormat fmt, float* dweight, float* dbias,
                                       const uint16_t* dout, const uint16_t* inp,
                                       const Conv2dShape& s);
  // Batch norm over (N, H, W) per channel; HW = H*W. The fused training
  // passes, inference, and the pieces a synchronized batch norm puts its
  // allreduces between (double per-channel sums).
  void (*batchnorm_forward_training)(Stream, float* out, float* mean, float* rstd,
                                     const float* inp, const float* weight, const float* bias,
                                     int64_t N, int64_t C, int64_t HW, float eps);
  void (*batchnorm_forward_inference)(Stream, float* out, const float* inp,
                                      const float* running_mean, const float* running_var,
                                      const float* weight, const float* bias, int64_t N,
                                      int64_t C, int64_t HW, float eps);
  void (*batchnorm_backward)(Stream, float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* mean, const float* rstd,
                             const float* weight, int64_t N, int64_t C, int64_t HW);
  void (*batchnorm_partial_sums)(Stream, double* sum, double* sumsq, const float* inp, int64_t N,
                                 int64_t C, int64_t HW);
  void (*batchnorm_stats)(Stream, float* mean, float* rstd, const double* sum,
                          const double* sumsq, int64_t count, int64_t C, float eps);
  void (*batchnorm_normalize)(Stream, float* out, const float* inp, const float* mean,
                              const float* rstd, const float* weight, const float* bias,
                              int64_t N, int64_t C, int64_t HW);
  void (*batchnorm_update_running)(Stream, float* running_mean, float* running_var,
                                   const double* sum, const double* sumsq, int64_t count,
                                   int64_t C, float momentum);
  void (*batchnorm_backward_partial_sums)(Stream, double* sum_dout, double* sum_dout_xhat,
                                          const float* dout, const float* inp, const float* mean,
                                          const float* rstd, int64_t N, int64_t C, int64_t HW);
  void (*batchnorm_backward_params)(Stream, float* dweight, float* dbias, const double* sum_dout,
                                    const double* sum_dout_xhat, int64_t C);
  void (*batchnorm_backward_input)(Stream, float* dinp, const float* dout, const float* inp,
                                   const float* mean, const float* rstd, const float* weight,
                                   const double* sum_dout, const double* sum_dout_xhat,
                                   int64_t count, int64_t N, int64_t C, int64_t HW);
  void (*relu_forward)(Stream, float* out, const float* inp, int64_t n);
  void (*relu_backward)(Stream, float* dinp, const float* dout, const float* out, int64_t n);
  void (*max_pool2d_forward)(Stream, float* out, int32_t* argmax, const float* inp,
                             const Pool2dShape& s);
  void (*max_pool2d_backward)(Stream, float* dinp, const float* dout, const int32_t* argmax,
                              const Pool2dShape& s);
  void (*avg_pool2d_forward)(Stream, float* out, const float* inp, const Pool2dShape& s);
  void (*avg_pool2d_backward)(Stream, float* dinp, const float* dout, const Pool2dShape& s);
  void (*global_avg_pool_forward)(Stream, float* out, const float* inp, int64_t N, int64_t C,
                                  int64_t HW);
  void (*global_avg_pool_backward)(Stream, float* dinp, const float* dout, int64_t N, int64_t C,
                                   int64_t HW);
  // Rows whose label is among the k highest logits; waits for the device.
  int64_t (*topk_correct)(Stream, const float* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp, int64_t k);
};

// The table for `device`; an Error for a device this build has no kernels for.
const KernelTable& kernels_for(Device device);
// Whether this build has the CUDA backend (-DMESHTRAIN_CUDA=ON), and the GPU
// architectures it was compiled for ("90"; empty without it).
bool cuda_backend_built();
std::string cuda_backend_archs();

}  // namespace meshtrain
