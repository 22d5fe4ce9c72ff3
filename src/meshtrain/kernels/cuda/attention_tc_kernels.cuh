// The device code of the tensor-core attention (attention_tc.cu has the
// launchers and the design): included by that file and, with
// MESHTRAIN_WMMA_EMULATION defined, by tests/unit/attention_tc_emulation_test.cpp,
// which runs these kernels on the CPU against an emulation of WMMA, the
// warp primitives and the barriers, so CI checks their indexing without a GPU.
#pragma once
#ifndef MESHTRAIN_WMMA_EMULATION
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "meshtrain/kernels/cuda/cuda_common.cuh"
#define MT_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#define MT_UNROLL _Pragma("unroll")
#else
#define MT_UNROLL
#endif

#include <cmath>
#include <cstdint>

namespace meshtrain::cuda::attention_tc {

namespace wmma = nvcuda::wmma;

constexpr int kRows = 64;    // query and key rows per tile
constexpr int kWarps = 4;    // each owns 16 rows of the block's tile
constexpr int kTcThreads = kWarps * 32;
constexpr int kF = 16;       // the WMMA fragment's side
constexpr int kPadE = 8;     // 16-bit rows padded by 16 bytes (WMMA: ldm % 8 == 0)
constexpr int kPadF = 4;     // f32 rows by 16 bytes (ldm % 4 == 0)
constexpr int kLdS = kRows + kPadF;  // a warp's f32 score strip: 16 x 64
constexpr int kLdP = kRows + kPadE;  // its 16-bit strip (P or dS)

template <typename E>
__device__ __forceinline__ E round_to(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 round_to<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half round_to<__half>(float x) {
  return __float2half_rn(x);
}

template <typename E>
using FragA = wmma::fragment<wmma::matrix_a, kF, kF, kF, E, wmma::row_major>;
// B given as rows of its transpose (the K or V tile's rows): read column-major.
template <typename E>
using FragBt = wmma::fragment<wmma::matrix_b, kF, kF, kF, E, wmma::col_major>;
template <typename E>
using FragB = wmma::fragment<wmma::matrix_b, kF, kF, kF, E, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, kF, kF, kF, float>;

// Rows [r0, r0 + 64) of one head's slice (row stride `stride` floats, the
// head's column offset applied to `src`), rounded, into `dst` (stride
// HD + kPadE); rows at or past T are zero.
template <typename E, int HD>
__device__ __forceinline__ void load_rows(E* dst, const float* src, int64_t r0, int64_t T,
                                          int64_t stride) {
  constexpr int ld = HD + kPadE;
  for (int idx = threadIdx.x; idx < kRows * HD; idx += kTcThreads) {
    const int r = idx / HD, d = idx % HD;
    dst[r * ld + d] = round_to<E>(r0 + r < T ? src[(r0 + r) * stride + d] : 0.f);
  }
}

// strip (16 x 64 f32, stride kLdS) = A_w (16 x HD) . B^T, B the tile's 64 rows.
template <typename E, int HD>
__device__ __forceinline__ void product_abt(float* strip, const E* a_rows, const E* b_rows) {
  constexpr int ld = HD + kPadE;
MT_UNROLL
  for (int n = 0; n < kRows / kF; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
MT_UNROLL
    for (int k = 0; k < HD / kF; ++k) {
      FragA<E> a;
      FragBt<E> b;
      wmma::load_matrix_sync(a, a_rows + k * kF, ld);
      wmma::load_matrix_sync(b, b_rows + n * kF * ld + k * kF, ld);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(strip + n * kF, acc, kLdS, wmma::mem_row_major);
  }
}

// acc[n] += P_w (16 x 64, stride kLdP) . B (64 x HD), n over HD's 16-column blocks.
template <typename E, int HD>
__device__ __forceinline__ void accumulate_pb(FragC* acc, const E* p_strip, const E* b_rows) {
  constexpr int ld = HD + kPadE;
MT_UNROLL
  for (int k = 0; k < kRows / kF; ++k) {
    FragA<E> a;
    wmma::load_matrix_sync(a, p_strip + k * kF, kLdP);
MT_UNROLL
    for (int n = 0; n < HD / kF; ++n) {
      FragB<E> b;
      wmma::load_matrix_sync(b, b_rows + k * kF * ld + n * kF, ld);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

// Writes a warp's 16 x HD accumulators, times `mul`, to rows row0.. of `dst`
// (row stride `stride`), through `stage` (16 x (HD + kPadF) f32); rows at or
// past T are skipped.
template <int HD>
__device__ __forceinline__ void store_rows(float* dst, const FragC* acc, float* stage,
                                           int64_t row0, int64_t T, int64_t stride, float mul) {
  constexpr int ld = HD + kPadF;
  const int lane = threadIdx.x & 31;
MT_UNROLL
  for (int n = 0; n < HD / kF; ++n)
    wmma::store_matrix_sync(stage + n * kF, acc[n], ld, wmma::mem_row_major);
  __syncwarp();
  for (int r = 0; r < kF; ++r) {
    if (row0 + r >= T) break;
    for (int d = lane; d < HD; d += 32) dst[(row0 + r) * stride + d] = mul * stage[r * ld + d];
  }
  __syncwarp();
}

// lse and D = dO . O (f32) of the tile's rows q0.. into shared arrays; each
// warp its 16 rows.
template <int HD>
__device__ __forceinline__ void row_stats(float* lse_s, float* D_s, const float* lse_bh,
                                          const float* obase, const float* dobase, int64_t q0,
                                          int64_t T, int64_t C) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int rr = 0; rr < kF; ++rr) {
    const int r = warp * kF + rr;
    const int64_t i = q0 + r;
    float part = 0.f;
    if (i < T)
      for (int d = lane; d < HD; d += 32) part += obase[i * C + d] * dobase[i * C + d];
    part = warp_sum(part);
    if (lane == 0) {
      D_s[r] = part;
      lse_s[r] = i < T ? lse_bh[i] : 0.f;
    }
  }
}

// The forward kernel's shared memory: Q, K and V tiles (16-bit), then per
// warp a f32 score strip, a 16-bit P strip and its f32 output rows.
template <typename E, int HD>
struct ForwardSmem {
  static constexpr int ldh = HD + kPadE, ldo = HD + kPadF;
  static constexpr size_t tiles = sizeof(E) * 3 * kRows * ldh;
  static constexpr size_t s_strips = sizeof(float) * kWarps * kF * kLdS;
  static constexpr size_t p_strips = sizeof(E) * kWarps * kF * kLdP;
  static constexpr size_t bytes = tiles + s_strips + p_strips + sizeof(float) * kWarps * kF * ldo;
};

template <typename E, int HD>
__global__ void __launch_bounds__(kTcThreads)
attention_forward_tc_kernel(float* out, float* lse, const float* qkv, int64_t T, int64_t C,
                            int64_t NH, float scale) {
  using L = ForwardSmem<E, HD>;
  MT_DYNAMIC_SMEM(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  E* Qs = reinterpret_cast<E*>(smem);
  E* Ks = Qs + kRows * L::ldh;
  E* Vs = Ks + kRows * L::ldh;
  float* Sw = reinterpret_cast<float*>(smem + L::tiles) + warp * kF * kLdS;
  E* Pw = reinterpret_cast<E*>(smem + L::tiles + L::s_strips) + warp * kF * kLdP;
  float* Ow = reinterpret_cast<float*>(smem + L::tiles + L::s_strips + L::p_strips) +
              warp * kF * L::ldo;
  const int64_t qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t C3 = 3 * C, q0 = qt * kRows;
  const float* base = qkv + b * T * C3 + h * HD;

  load_rows<E, HD>(Qs, base, q0, T, C3);
  for (int idx = lane; idx < kF * L::ldo; idx += 32) Ow[idx] = 0.f;
  // This lane's row of the warp's strip, its half of the scores and of the output.
  const int r = lane >> 1, c0 = (lane & 1) * (kRows / 2), d0 = (lane & 1) * (HD / 2);
  const int64_t i = q0 + warp * kF + r;
  float m = -INFINITY, l = 0.f;

  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = kt * kRows;
    __syncthreads();  // the previous tile's K and V are no longer read
    load_rows<E, HD>(Ks, base + C, k0, T, C3);
    load_rows<E, HD>(Vs, base + 2 * C, k0, T, C3);
    __syncthreads();
    product_abt<E, HD>(Sw, Qs + warp * kF * L::ldh, Ks);
    __syncwarp();
    float* srow = Sw + r * kLdS + c0;
    float mx = -INFINITY;
    for (int c = 0; c < kRows / 2; ++c) {
      const int64_t j = k0 + c0 + c;
      const float s = j <= i && j < T ? srow[c] * scale : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    // Every row sees key 0 in the first tile, so m_new is finite; exp(-inf) = 0.
    const float alpha = expf(m - m_new);
    float sum = 0.f;
    E* prow = Pw + r * kLdP + c0;
    for (int c = 0; c < kRows / 2; ++c) {
      const float p = expf(srow[c] - m_new);
      sum += p;
      prow[c] = round_to<E>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    for (int d = d0; d < d0 + HD / 2; ++d) Ow[r * L::ldo + d] *= alpha;
    __syncwarp();
    FragC acc[HD / kF];
MT_UNROLL
    for (int n = 0; n < HD / kF; ++n)
      wmma::load_matrix_sync(acc[n], Ow + n * kF, L::ldo, wmma::mem_row_major);
    accumulate_pb<E, HD>(acc, Pw, Vs);
MT_UNROLL
    for (int n = 0; n < HD / kF; ++n)
      wmma::store_matrix_sync(Ow + n * kF, acc[n], L::ldo, wmma::mem_row_major);
    __syncwarp();
  }

  if (i < T) {
    float* o = out + (b * T + i) * C + h * HD;
    const float inv = 1.f / l;
    for (int d = d0; d < d0 + HD / 2; ++d) o[d] = Ow[r * L::ldo + d] * inv;
    if ((lane & 1) == 0) lse[(b * NH + h) * T + i] = m + logf(l);
  }
}

// Shared memory of both backward kernels: four 64-row 16-bit tiles, per warp
// two f32 strips (scores and dP; later the output stage) and two 16-bit
// strips, and 64 lse and D values.
template <typename E, int HD>
struct BackwardSmem {
  static constexpr int ldh = HD + kPadE;
  static constexpr size_t tiles = sizeof(E) * 4 * kRows * ldh;
  static constexpr size_t f32_strips = sizeof(float) * kWarps * 2 * kF * kLdS;
  static constexpr size_t e_strips = sizeof(E) * kWarps * 2 * kF * kLdP;
  static constexpr size_t bytes = tiles + f32_strips + e_strips + sizeof(float) * 2 * kRows;
  static_assert(2 * kLdS >= HD + kPadF, "the output stage fits a warp's two f32 strips");
};

// Pointers into the backward kernels' shared memory.
template <typename E, int HD>
struct BackwardViews {
  E *t0, *t1, *t2, *t3;  // the four tiles
  float *s, *dp;         // this warp's f32 strips (contiguous: together the output stage)
  E *e0, *e1;            // this warp's 16-bit strips
  float *lse_s, *D_s;
  __device__ explicit BackwardViews(unsigned char* smem) {
    using L = BackwardSmem<E, HD>;
    const int warp = threadIdx.x >> 5;
    t0 = reinterpret_cast<E*>(smem);
    t1 = t0 + kRows * L::ldh;
    t2 = t1 + kRows * L::ldh;
    t3 = t2 + kRows * L::ldh;
    s = reinterpret_cast<float*>(smem + L::tiles) + warp * 2 * kF * kLdS;
    dp = s + kF * kLdS;
    e0 = reinterpret_cast<E*>(smem + L::tiles + L::f32_strips) + warp * 2 * kF * kLdP;
    e1 = e0 + kF * kLdP;
    lse_s = reinterpret_cast<float*>(smem + L::tiles + L::f32_strips + L::e_strips);
    D_s = lse_s + kRows;
  }
};

template <typename E, int HD>
__global__ void __launch_bounds__(kTcThreads)
attention_backward_dq_tc_kernel(float* dqkv, const float* dout, const float* qkv, const float* out,
                                const float* lse, int64_t T, int64_t C, int64_t NH, float scale) {
  using L = BackwardSmem<E, HD>;
  MT_DYNAMIC_SMEM(smem);
  const BackwardViews<E, HD> v(smem);
  E *Qs = v.t0, *dOs = v.t1, *Ks = v.t2, *Vs = v.t3;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t C3 = 3 * C, q0 = qt * kRows;
  const float* base = qkv + b * T * C3 + h * HD;
  const float* dobase = dout + b * T * C + h * HD;

  load_rows<E, HD>(Qs, base, q0, T, C3);
  load_rows<E, HD>(dOs, dobase, q0, T, C);
  row_stats<HD>(v.lse_s, v.D_s, lse + (b * NH + h) * T, out + b * T * C + h * HD, dobase, q0, T, C);
  FragC acc[HD / kF];
MT_UNROLL
  for (int n = 0; n < HD / kF; ++n) wmma::fill_fragment(acc[n], 0.f);
  const int r = lane >> 1, c0 = (lane & 1) * (kRows / 2);
  const int rb = warp * kF + r;  // the lane's row within the block's tile
  const int64_t i = q0 + rb;

  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = kt * kRows;
    __syncthreads();
    load_rows<E, HD>(Ks, base + C, k0, T, C3);
    load_rows<E, HD>(Vs, base + 2 * C, k0, T, C3);
    __syncthreads();
    product_abt<E, HD>(v.s, Qs + warp * kF * L::ldh, Ks);
    product_abt<E, HD>(v.dp, dOs + warp * kF * L::ldh, Vs);
    __syncwarp();
    for (int c = 0; c < kRows / 2; ++c) {
      const int64_t j = k0 + c0 + c;
      float ds = 0.f;
      if (i < T && j <= i) {
        const float p = expf(v.s[r * kLdS + c0 + c] * scale - v.lse_s[rb]);
        ds = p * (v.dp[r * kLdS + c0 + c] - v.D_s[rb]);
      }
      v.e0[r * kLdP + c0 + c] = round_to<E>(ds);
    }
    __syncwarp();
    accumulate_pb<E, HD>(acc, v.e0, Ks);
  }
  store_rows<HD>(dqkv + b * T * C3 + h * HD, acc, v.s, q0 + warp * kF, T, C3, scale);
}

template <typename E, int HD>
__global__ void __launch_bounds__(kTcThreads)
attention_backward_dkv_tc_kernel(float* dqkv, const float* dout, const float* qkv,
                                 const float* out, const float* lse, int64_t T, int64_t C,
                                 int64_t NH, float scale) {
  using L = BackwardSmem<E, HD>;
  MT_DYNAMIC_SMEM(smem);
  const BackwardViews<E, HD> v(smem);
  E *Ks = v.t0, *Vs = v.t1, *Qs = v.t2, *dOs = v.t3;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t C3 = 3 * C, k0 = kt * kRows, ntiles = (T + kRows - 1) / kRows;
  const float* base = qkv + b * T * C3 + h * HD;
  const float* obase = out + b * T * C + h * HD;
  const float* dobase = dout + b * T * C + h * HD;
  const float* lse_bh = lse + (b * NH + h) * T;

  load_rows<E, HD>(Ks, base + C, k0, T, C3);
  load_rows<E, HD>(Vs, base + 2 * C, k0, T, C3);
  FragC dk[HD / kF], dv[HD / kF];
MT_UNROLL
  for (int n = 0; n < HD / kF; ++n) {
    wmma::fill_fragment(dk[n], 0.f);
    wmma::fill_fragment(dv[n], 0.f);
  }
  const int r = lane >> 1, c0 = (lane & 1) * (kRows / 2);
  const int64_t j = k0 + warp * kF + r;  // the lane's key row

  for (int64_t qt = kt; qt < ntiles; ++qt) {
    const int64_t q0 = qt * kRows;
    __syncthreads();  // the previous query tile and its statistics are no longer read
    load_rows<E, HD>(Qs, base, q0, T, C3);
    load_rows<E, HD>(dOs, dobase, q0, T, C);
    row_stats<HD>(v.lse_s, v.D_s, lse_bh, obase, dobase, q0, T, C);
    __syncthreads();
    product_abt<E, HD>(v.s, Ks + warp * kF * L::ldh, Qs);    // S^T: keys x queries
    product_abt<E, HD>(v.dp, Vs + warp * kF * L::ldh, dOs);  // dP^T
    __syncwarp();
    for (int c = 0; c < kRows / 2; ++c) {
      const int qi = c0 + c;
      const int64_t i = q0 + qi;
      float p = 0.f, ds = 0.f;
      if (j < T && i < T && j <= i) {
        p = expf(v.s[r * kLdS + qi] * scale - v.lse_s[qi]);
        ds = p * (v.dp[r * kLdS + qi] - v.D_s[qi]);
      }
      v.e0[r * kLdP + qi] = round_to<E>(p);
      v.e1[r * kLdP + qi] = round_to<E>(ds);
    }
    __syncwarp();
    accumulate_pb<E, HD>(dv, v.e0, dOs);
    accumulate_pb<E, HD>(dk, v.e1, Qs);
  }
  const int64_t row0 = k0 + warp * kF;
  store_rows<HD>(dqkv + b * T * C3 + C + h * HD, dk, v.s, row0, T, C3, scale);
  store_rows<HD>(dqkv + b * T * C3 + 2 * C + h * HD, dv, v.s, row0, T, C3, 1.f);
}

}  // namespace meshtrain::cuda::attention_tc
