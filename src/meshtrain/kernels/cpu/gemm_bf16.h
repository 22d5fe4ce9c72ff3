// GEMM on 16-bit operands with f32 accumulation and an f32 result: the
// mixed-precision model's matrix products.
//
// bf16: oneDNN's matmul (brgemm kernels on VDPBF16PS) when the CPU has
// AVX512_BF16 and the build found oneDNN; otherwise the operands are widened
// to f32 and OpenBLAS sgemm runs ("fallback"). f16: always widened to f32
// (this CPU family has no f16 dot-product instruction; AVX512_FP16 is
// Sapphire Rapids and later), so fp16 buys memory, not speed.
#pragma once
#include <cstdint>
#include <string>

#include "meshtrain/core/half.h"

namespace meshtrain::cpu {

using Half = HalfFormat;  // core/half.h
const char* half_name(Half h);  // "bf16" / "f16"

enum class HalfGemmPath : uint8_t {
  OneDnnBf16,     // oneDNN matmul, AVX512_BF16 dot products
  FallbackSgemm,  // widen to f32, OpenBLAS sgemm
};

// True when the dispatch level (core/cpu_isa.h: the CPU's, or MESHTRAIN_ISA's
// cap) includes AVX512_BF16 (VDPBF16PS, VCVTNE2PS2BF16).
bool cpu_has_avx512_bf16();
// True when this build links oneDNN.
bool have_onednn();

// The path bf16 GEMMs take in this process: OneDnnBf16 when oneDNN is built
// in, the CPU has AVX512_BF16 and MESHTRAIN_BF16_GEMM is not "fallback".
HalfGemmPath bf16_gemm_path();
// Tests and benchmarks compare both paths in one process.
void set_bf16_gemm_path(HalfGemmPath p);

// What ran, for benchmark output and logs, e.g.
//   "bf16 GEMM: oneDNN 2.6.3 brg:avx512_core_bf16 (avx512_bf16)"
//   "fallback: fp32 sgemm (CPU lacks AVX512_BF16)"
//   "f16 GEMM: fallback: fp32 sgemm after conversion (no f16 dot-product instruction)"
std::string half_gemm_description(Half fmt);

// Row-major C (M, N) = alpha * op(A) * op(B) + beta * C, op(A) (M, K),
// op(B) (K, N); A and B hold `fmt` values, C is f32. Leading dimensions as
// in BLAS. Thread-safe; uses the current OpenMP thread count.
void gemm_half(Half fmt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
               float* C, int64_t ldc);

}  // namespace meshtrain::cpu
