// GEMMs through meshtrain's CUDA kernel table at GPT-2 124M's shapes (B*T =
// 8192 rows), timed against plain cuBLAS (cublasGemmEx, the same operands and
// f32 accumulation) in the same run, interleaved, median of 7 rounds of 20
// calls: the ratio is what our launch path (layouts, bias epilogue,
// workspace, heuristics) costs or gains over cuBLAS's own choice. Target:
// at least 0.95 (issue: CUDA backend). Prints one line per shape and a
// median ratio; exits 2 with the reason where no GPU is visible.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "meshtrain/kernels/cuda/cuda_kernel_table.h"
#include "meshtrain/kernels/kernel_table.h"

using namespace meshtrain;

namespace {
#define CK(x)                                                                   \
  do {                                                                          \
    if ((x) != 0) {                                                             \
      std::fprintf(stderr, "%s failed at %s:%d\n", #x, __FILE__, __LINE__);     \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

struct Shape {
  const char* name;
  int64_t N, C, OC;
};

template <typename F>
double time_ms(F f, cudaStream_t s, int calls) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, s));
  for (int i = 0; i < calls; ++i) f();
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("skipped: no CUDA GPU visible\n");
    return 2;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const KernelTable& k = cuda_kernel_table();
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const Stream stream{Device::cuda(0), s};
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, s));
  const Shape shapes[] = {{"qkv", 8192, 768, 2304},
                          {"attn proj", 8192, 768, 768},
                          {"mlp fc", 8192, 768, 3072},
                          {"mlp proj", 8192, 3072, 768},
                          {"lm head", 8192, 768, 50304}};
  std::printf("GEMM on %s: meshtrain kernel table vs cublasGemmEx, bf16 operands, f32 "
              "accumulate and output, TFLOP/s (median of 7 x 20 calls)\n", prop.name);
  std::printf("  %-10s %6s %6s %6s  %10s %10s %7s   %10s %10s %7s\n", "shape", "N", "C", "OC",
              "fwd ours", "cuBLAS", "ratio", "bwd ours", "cuBLAS", "ratio");
  std::vector<double> ratios;
  for (const Shape& sh : shapes) {
    const int64_t N = sh.N, C = sh.C, OC = sh.OC;
    __nv_bfloat16 *inp, *w, *dout_h;
    float *out, *bias, *dinp, *dw, *db;
    CK(cudaMalloc(&inp, N * C * 2));
    CK(cudaMalloc(&w, OC * C * 2));
    CK(cudaMalloc(&dout_h, N * OC * 2));
    CK(cudaMalloc(&out, N * OC * 4));
    CK(cudaMalloc(&bias, OC * 4));
    CK(cudaMalloc(&dinp, N * C * 4));
    CK(cudaMalloc(&dw, OC * C * 4));
    CK(cudaMalloc(&db, OC * 4));
    CK(cudaMemset(inp, 0x3c, N * C * 2));  // small bf16 values, no inf/nan
    CK(cudaMemset(w, 0x3c, OC * C * 2));
    CK(cudaMemset(dout_h, 0x3c, N * OC * 2));
    CK(cudaMemset(bias, 0, OC * 4));
    CK(cudaMemset(out, 0, N * OC * 4));
    const auto* in16 = reinterpret_cast<const uint16_t*>(inp);
    const auto* w16 = reinterpret_cast<const uint16_t*>(w);
    auto ours_fwd = [&] {
      k.matmul_forward_half(stream, HalfFormat::BF16, out, in16, w16, bias, N, C, OC, false);
    };
    const float one = 1.f, zero = 0.f;
    // out^T (OC x N, column-major) = W^T' ... : the same product cuBLAS-style.
    auto peer_fwd = [&] {
      CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w, CUDA_R_16BF, C, inp,
                      CUDA_R_16BF, C, &zero, out, CUDA_R_32F, OC, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
    };
    // Backward's two products: dinp = dout W, dW += dout^T inp.
    auto ours_bwd = [&] {
      k.matmul_backward_weight_half(stream, HalfFormat::BF16, dw, reinterpret_cast<uint16_t*>(dout_h),
                                    in16, N, C, OC);
    };
    auto peer_bwd = [&] {
      CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, CUDA_R_16BF, C, dout_h,
                      CUDA_R_16BF, OC, &one, dw, CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
    };
    for (int i = 0; i < 5; ++i) ours_fwd(), peer_fwd(), ours_bwd(), peer_bwd();
    std::vector<double> of, pf, ob, pb;
    for (int r = 0; r < 7; ++r) {  // interleaved rounds
      of.push_back(time_ms(ours_fwd, s, 20));
      pf.push_back(time_ms(peer_fwd, s, 20));
      ob.push_back(time_ms(ours_bwd, s, 20));
      pb.push_back(time_ms(peer_bwd, s, 20));
    }
    const double flop = 2.0 * N * C * OC;
    auto tf = [&](double ms) { return flop / (ms * 1e-3) / 1e12; };
    const double rf = median(pf) / median(of), rb = median(pb) / median(ob);
    ratios.push_back(rf);
    ratios.push_back(rb);
    std::printf("  %-10s %6ld %6ld %6ld  %10.1f %10.1f %7.3f   %10.1f %10.1f %7.3f\n", sh.name,
                static_cast<long>(N), static_cast<long>(C), static_cast<long>(OC), tf(median(of)),
                tf(median(pf)), rf, tf(median(ob)), tf(median(pb)), rb);
    for (void* p : {static_cast<void*>(inp), static_cast<void*>(w), static_cast<void*>(dout_h),
                    static_cast<void*>(out), static_cast<void*>(bias), static_cast<void*>(dinp),
                    static_cast<void*>(dw), static_cast<void*>(db)})
      cudaFree(p);
  }
  std::printf("median ratio ours/cuBLAS (time of cuBLAS over ours): %.3f (target >= 0.95)\n",
              median(ratios));
  cublasDestroy(h);
  cudaStreamDestroy(s);
  return 0;
}
