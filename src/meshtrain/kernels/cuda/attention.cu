// Causal attention, flash-style in f32 with tiles of 32 query and 32 key
// rows in shared memory (head sizes up to 256).
//
// Forward: one block per (query tile, head, batch). Each warp owns 4 query
// rows; for every key tile at or before the diagonal its lanes take one key
// each (score = q.k * scale, masked j > i), and the row keeps an online
// softmax (running max m, sum l, output accumulator rescaled by exp(m_old -
// m_new)). out = acc / l, lse = m + log l.
//
// Backward (no atomics: every output element is written by one thread, each
// sum in a fixed order): with P_ij = exp(s_ij - lse_i), D_i = dO_i . O_i,
// dS_ij = P_ij (dO_i . v_j - D_i):
//   dq kernel, one block per query tile: dq_i = scale sum_j dS_ij k_j;
//   dkv kernel, one block per key tile, looping over the query tiles at or
//   after it: dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij dO_i.
// Shared rows are padded to an odd stride so lanes reading different rows
// hit different banks.
#include <cmath>

#include "meshtrain/kernels/cuda/attention.h"
#include "meshtrain/kernels/cuda/attention_launch.cuh"
#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda {

namespace {

constexpr int kTile = 32;                        // query and key rows per tile
constexpr int kAttnWarps = 8;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kRowsPerWarp = kTile / kAttnWarps;  // 4

__host__ __device__ inline int64_t padded_ld(int64_t hd) { return hd % 2 == 0 ? hd + 1 : hd; }

// Rows [r0, r0 + kTile) of one head's slice (row stride `stride`, column
// offset already applied to `src`) into shared `dst` (stride ld); rows at or
// past T read as zero.
__device__ __forceinline__ void load_tile(float* dst, const float* src, int64_t r0, int64_t T,
                                          int64_t stride, int64_t hd, int64_t ld) {
  for (int64_t idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
    const int64_t r = idx / hd, d = idx % hd;
    dst[r * ld + d] = r0 + r < T ? src[(r0 + r) * stride + d] : 0.f;
  }
}

__device__ __forceinline__ float dot_shared(const float* a, const float* b, int64_t hd) {
  float s = 0.f;
  for (int64_t d = 0; d < hd; ++d) s += a[d] * b[d];
  return s;
}

__global__ void __launch_bounds__(kAttnThreads)
attention_forward_kernel(float* out, float* lse, const float* qkv, int64_t T, int64_t C,
                         int64_t NH, int64_t hd, float scale) {
  extern __shared__ float smem[];
  const int64_t ld = padded_ld(hd);
  float* Qs = smem;
  float* Ks = Qs + kTile * ld;
  float* Vs = Ks + kTile * ld;
  float* Os = Vs + kTile * ld;
  float* Ps = Os + kTile * ld;  // kTile x kTile
  const int64_t qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t C3 = 3 * C;
  const float* base = qkv + b * T * C3 + h * hd;
  const int64_t q0 = qt * kTile;

  load_tile(Qs, base, q0, T, C3, hd, ld);
  for (int64_t idx = threadIdx.x; idx < kTile * ld; idx += blockDim.x) Os[idx] = 0.f;
  float m[kRowsPerWarp], l[kRowsPerWarp];
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    m[k] = -INFINITY;
    l[k] = 0.f;
  }

  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // the previous tile's K/V are no longer read
    load_tile(Ks, base + C, k0, T, C3, hd, ld);
    load_tile(Vs, base + 2 * C, k0, T, C3, hd, ld);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int r = warp + k * kAttnWarps;
      const int64_t i = q0 + r;
      if (i >= T) continue;  // warp-uniform
      const int64_t j = k0 + lane;
      const bool visible = j <= i;  // j = k0 <= i always: lane 0 sees a key
      const float sc = visible ? dot_shared(Qs + r * ld, Ks + lane * ld, hd) * scale : -INFINITY;
      const float m_new = fmaxf(m[k], warp_max(sc));
      const float p = visible ? expf(sc - m_new) : 0.f;
      const float alpha = expf(m[k] - m_new);  // 0 on the first tile (m = -inf)
      l[k] = l[k] * alpha + warp_sum(p);
      m[k] = m_new;
      Ps[r * kTile + lane] = p;
      __syncwarp();
      for (int64_t d = lane; d < hd; d += 32) {
        float acc = Os[r * ld + d] * alpha;
        for (int jj = 0; jj < kTile; ++jj) acc += Ps[r * kTile + jj] * Vs[jj * ld + d];
        Os[r * ld + d] = acc;
      }
      __syncwarp();
    }
  }

#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp + k * kAttnWarps;
    const int64_t i = q0 + r;
    if (i >= T) continue;
    float* o = out + (b * T + i) * C + h * hd;
    for (int64_t d = lane; d < hd; d += 32) o[d] = Os[r * ld + d] / l[k];
    if (lane == 0) lse[(b * NH + h) * T + i] = m[k] + logf(l[k]);
  }
}

__global__ void __launch_bounds__(kAttnThreads)
attention_backward_dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int64_t T, int64_t C, int64_t NH, int64_t hd,
                             float scale) {
  extern __shared__ float smem[];
  const int64_t ld = padded_ld(hd);
  float* Qs = smem;
  float* dOs = Qs + kTile * ld;
  float* Ks = dOs + kTile * ld;
  float* Vs = Ks + kTile * ld;
  float* dQs = Vs + kTile * ld;
  float* Ss = dQs + kTile * ld;  // kTile x kTile: dS of each row's current keys
  const int64_t qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t C3 = 3 * C;
  const float* base = qkv + b * T * C3 + h * hd;
  const float* obase = out + b * T * C + h * hd;
  const float* dobase = dout + b * T * C + h * hd;
  const float* lse_bh = lse + (b * NH + h) * T;
  const int64_t q0 = qt * kTile;

  load_tile(Qs, base, q0, T, C3, hd, ld);
  load_tile(dOs, dobase, q0, T, C, hd, ld);
  for (int64_t idx = threadIdx.x; idx < kTile * ld; idx += blockDim.x) dQs[idx] = 0.f;
  __syncthreads();
  float Dr[kRowsPerWarp], L[kRowsPerWarp];
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp + k * kAttnWarps;
    const int64_t i = q0 + r;
    float part = 0.f;
    if (i < T)
      for (int64_t d = lane; d < hd; d += 32) part += obase[i * C + d] * dOs[r * ld + d];
    Dr[k] = warp_sum(part);
    L[k] = i < T ? lse_bh[i] : 0.f;
  }

  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();
    load_tile(Ks, base + C, k0, T, C3, hd, ld);
    load_tile(Vs, base + 2 * C, k0, T, C3, hd, ld);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int r = warp + k * kAttnWarps;
      const int64_t i = q0 + r;
      if (i >= T) continue;
      const int64_t j = k0 + lane;
      float ds = 0.f;
      if (j <= i) {
        const float p = expf(dot_shared(Qs + r * ld, Ks + lane * ld, hd) * scale - L[k]);
        const float dp = dot_shared(dOs + r * ld, Vs + lane * ld, hd);
        ds = p * (dp - Dr[k]);
      }
      Ss[r * kTile + lane] = ds;
      __syncwarp();
      for (int64_t d = lane; d < hd; d += 32) {
        float acc = dQs[r * ld + d];
        for (int jj = 0; jj < kTile; ++jj) acc += Ss[r * kTile + jj] * Ks[jj * ld + d];
        dQs[r * ld + d] = acc;
      }
      __syncwarp();
    }
  }

#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp + k * kAttnWarps;
    const int64_t i = q0 + r;
    if (i >= T) continue;
    float* dq = dqkv + (b * T + i) * C3 + h * hd;
    for (int64_t d = lane; d < hd; d += 32) dq[d] = scale * dQs[r * ld + d];
  }
}

__global__ void __launch_bounds__(kAttnThreads)
attention_backward_dkv_kernel(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int64_t T, int64_t C, int64_t NH, int64_t hd,
                              float scale) {
  extern __shared__ float smem[];
  const int64_t ld = padded_ld(hd);
  float* Ks = smem;
  float* Vs = Ks + kTile * ld;
  float* Qs = Vs + kTile * ld;
  float* dOs = Qs + kTile * ld;
  float* dKs = dOs + kTile * ld;
  float* dVs = dKs + kTile * ld;
  float* Ps = dVs + kTile * ld;   // kTile x kTile: P of each key row's current queries
  float* Ss = Ps + kTile * kTile;  // kTile x kTile: dS likewise
  float* lse_s = Ss + kTile * kTile;
  float* D_s = lse_s + kTile;
  const int64_t kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t C3 = 3 * C;
  const float* base = qkv + b * T * C3 + h * hd;
  const float* obase = out + b * T * C + h * hd;
  const float* dobase = dout + b * T * C + h * hd;
  const float* lse_bh = lse + (b * NH + h) * T;
  const int64_t k0 = kt * kTile;
  const int64_t ntiles = (T + kTile - 1) / kTile;

  load_tile(Ks, base + C, k0, T, C3, hd, ld);
  load_tile(Vs, base + 2 * C, k0, T, C3, hd, ld);
  for (int64_t idx = threadIdx.x; idx < kTile * ld; idx += blockDim.x) {
    dKs[idx] = 0.f;
    dVs[idx] = 0.f;
  }

  for (int64_t qt = kt; qt < ntiles; ++qt) {
    const int64_t q0 = qt * kTile;
    __syncthreads();  // the previous query tile is no longer read
    load_tile(Qs, base, q0, T, C3, hd, ld);
    load_tile(dOs, dobase, q0, T, C, hd, ld);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {  // D and lse of the query rows
      const int r = warp + k * kAttnWarps;
      const int64_t i = q0 + r;
      float part = 0.f;
      if (i < T)
        for (int64_t d = lane; d < hd; d += 32) part += obase[i * C + d] * dOs[r * ld + d];
      part = warp_sum(part);
      if (lane == 0) {
        D_s[r] = part;
        lse_s[r] = i < T ? lse_bh[i] : 0.f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int c = warp + k * kAttnWarps;
      const int64_t j = k0 + c;
      if (j >= T) continue;  // warp-uniform
      const int64_t i = q0 + lane;
      float p = 0.f, ds = 0.f;
      if (i < T && j <= i) {
        p = expf(dot_shared(Qs + lane * ld, Ks + c * ld, hd) * scale - lse_s[lane]);
        const float dp = dot_shared(dOs + lane * ld, Vs + c * ld, hd);
        ds = p * (dp - D_s[lane]);
      }
      Ps[c * kTile + lane] = p;
      Ss[c * kTile + lane] = ds;
      __syncwarp();
      for (int64_t d = lane; d < hd; d += 32) {
        float av = dVs[c * ld + d], ak = dKs[c * ld + d];
        for (int ii = 0; ii < kTile; ++ii) {
          av += Ps[c * kTile + ii] * dOs[ii * ld + d];
          ak += Ss[c * kTile + ii] * Qs[ii * ld + d];
        }
        dVs[c * ld + d] = av;
        dKs[c * ld + d] = ak;
      }
      __syncwarp();
    }
  }

#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int c = warp + k * kAttnWarps;
    const int64_t j = k0 + c;
    if (j >= T) continue;
    float* dk = dqkv + (b * T + j) * C3 + C + h * hd;
    float* dv = dk + C;
    for (int64_t d = lane; d < hd; d += 32) {
      dk[d] = scale * dKs[c * ld + d];
      dv[d] = dVs[c * ld + d];
    }
  }
}

}  // namespace

void attention_forward(Stream s, float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH, float* /*workspace*/, int /*nthreads*/) {
  if (B <= 0 || T <= 0) return;
  attention_check_shapes(B, T, C, NH, kTile, "attention_forward");
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t bytes = sizeof(float) * (4 * kTile * padded_ld(hd) + kTile * kTile);
  attention_prepare_smem(reinterpret_cast<const void*>(&attention_forward_kernel), bytes,
                         "attention_forward");
  const dim3 grid(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(NH),
                  static_cast<unsigned>(B));
  attention_forward_kernel<<<grid, kAttnThreads, bytes, stream_of(s)>>>(out, lse, qkv, T, C, NH, hd,
                                                                        scale);
  MT_CUDA_CHECK_LAUNCH("attention_forward");
}

void attention_backward(Stream s, float* dqkv, const float* dout, const float* qkv,
                        const float* out, const float* lse, int64_t B, int64_t T, int64_t C,
                        int64_t NH, float* /*workspace*/, int /*nthreads*/) {
  if (B <= 0 || T <= 0) return;
  attention_check_shapes(B, T, C, NH, kTile, "attention_backward");
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t ld = padded_ld(hd);
  const dim3 grid(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(NH),
                  static_cast<unsigned>(B));
  const cudaStream_t stream = stream_of(s);
  const size_t dq_bytes = sizeof(float) * (5 * kTile * ld + kTile * kTile);
  attention_prepare_smem(reinterpret_cast<const void*>(&attention_backward_dq_kernel), dq_bytes,
                         "attention_backward");
  attention_backward_dq_kernel<<<grid, kAttnThreads, dq_bytes, stream>>>(dqkv, dout, qkv, out, lse,
                                                                         T, C, NH, hd, scale);
  MT_CUDA_CHECK_LAUNCH("attention_backward (dq)");
  const size_t dkv_bytes = sizeof(float) * (6 * kTile * ld + 2 * kTile * kTile + 2 * kTile);
  attention_prepare_smem(reinterpret_cast<const void*>(&attention_backward_dkv_kernel), dkv_bytes,
                         "attention_backward");
  attention_backward_dkv_kernel<<<grid, kAttnThreads, dkv_bytes, stream>>>(dqkv, dout, qkv, out,
                                                                           lse, T, C, NH, hd, scale);
  MT_CUDA_CHECK_LAUNCH("attention_backward (dk, dv)");
}

}  // namespace meshtrain::cuda
