// test-links: mt_kernels
// The tensor-core attention kernels (kernels/cuda/attention_tc_kernels.cuh)
// run on the CPU, so a CI without a GPU checks their logic: the tiles'
// indexing, the causal mask at partial tiles, the online softmax and the
// backward's sums. Each block's 128 threads are real threads; WMMA's
// fragment operations, the warp shuffle and the barriers are emulated with
// their documented semantics (a *_sync op waits for the whole warp; a
// fragment pointer must be 256-bit aligned and its leading dimension a
// multiple of 16 bytes, checked on every access); shared memory starts as
// NaN, so a read of anything unwritten shows. Compared with the CPU's f32
// attention at the tolerances of the GPU test (cuda_kernels_attention_half).
// What this cannot check (the hardware's own rounding, timing, shared-memory
// limits) is cuda_kernels_test's, on a GPU.
#define MESHTRAIN_WMMA_EMULATION 1
#include <gtest/gtest.h>

#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/attention.h"

// ---- the CUDA C++ the kernels use, on the host ----------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) alignas(n)

namespace emu {
struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct Warp {
  std::barrier<> bar{32};
  float slot[32] = {};
};
// One emulated GPU thread's view: its indices, its block's shared memory
// and barrier, its warp.
struct ThreadCtx {
  Dim3 thread, block;
  unsigned char* smem = nullptr;
  std::barrier<>* block_bar = nullptr;
  Warp* warp = nullptr;
};
inline thread_local ThreadCtx ctx;
inline void warp_sync() { ctx.warp->bar.arrive_and_wait(); }
inline unsigned lane() { return ctx.thread.x & 31; }
}  // namespace emu

#define threadIdx (emu::ctx.thread)
#define blockIdx (emu::ctx.block)
#define MT_DYNAMIC_SMEM(name) unsigned char* name = emu::ctx.smem

inline void __syncthreads() { emu::ctx.block_bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_sync(); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  emu::Warp& w = *emu::ctx.warp;
  w.slot[emu::lane()] = v;
  w.bar.arrive_and_wait();
  const float other = w.slot[emu::lane() ^ static_cast<unsigned>(lane_mask)];
  w.bar.arrive_and_wait();  // nobody overwrites a slot before all have read
  return other;
}

struct __nv_bfloat16 {
  uint16_t bits;
  operator float() const { return meshtrain::bf16_to_f32(bits); }
};
struct __half {
  uint16_t bits;
  operator float() const { return meshtrain::f16_to_f32(bits); }
};
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {meshtrain::f32_to_bf16(x)}; }
inline __half __float2half_rn(float x) { return {meshtrain::f32_to_f16(x)}; }

namespace meshtrain::cuda {
inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
}  // namespace meshtrain::cuda

// WMMA 16x16x16: every lane holds the whole tile (the hardware spreads it
// over the lanes; the kernels never touch fragment elements directly).
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  float x[16 * 16];
};
template <class T>
void check_access(const T* p, unsigned ldm) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    throw std::logic_error("WMMA fragment pointer not 256-bit aligned");
  if ((ldm * sizeof(T)) % 16 != 0) throw std::logic_error("WMMA ldm not a multiple of 16 bytes");
}
template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  emu::warp_sync();
  check_access(p, ldm);
  constexpr bool col = std::is_same_v<L, col_major>;
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c) f.x[r * 16 + c] = float(col ? p[r + c * ldm] : p[r * ldm + c]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t l) {
  emu::warp_sync();
  check_access(p, ldm);
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      f.x[r * 16 + c] = l == mem_row_major ? p[r * ldm + c] : p[r + c * ldm];
}
// One lane writes (all hold the same tile); the next *_sync op or barrier
// orders it before the others' reads, as on the hardware.
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t l) {
  emu::warp_sync();
  check_access(p, ldm);
  if (emu::lane() != 0) return;
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      (l == mem_row_major ? p[r * ldm + c] : p[r + c * ldm]) = f.x[r * 16 + c];
}
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  emu::warp_sync();
  float out[256];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[m * 16 + n];
      for (int k = 0; k < 16; ++k) s += a.x[m * 16 + k] * b.x[k * 16 + n];
      out[m * 16 + n] = s;
    }
  std::memcpy(d.x, out, sizeof out);
}
template <class F>
void fill_fragment(F& f, float v) {
  for (float& x : f.x) x = v;
}
}  // namespace nvcuda::wmma

#include "meshtrain/kernels/cuda/attention_tc_kernels.cuh"

namespace meshtrain {
namespace {

namespace tc = cuda::attention_tc;

// Runs `kernel` over the grid (x, y, z), each block's 128 threads as real
// threads on a NaN-filled shared memory of `bytes`.
template <class Kernel, class... Args>
void launch(Kernel kernel, emu::Dim3 grid, size_t bytes, Args... args) {
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::vector<float> smem_words(bytes / 4 + 32, std::numeric_limits<float>::quiet_NaN());
        auto* smem = reinterpret_cast<unsigned char*>(
            (reinterpret_cast<uintptr_t>(smem_words.data()) + 127) & ~uintptr_t{127});
        std::barrier<> block_bar(tc::kTcThreads);
        std::array<emu::Warp, tc::kWarps> warps;
        {
          std::vector<std::jthread> threads;
          for (unsigned t = 0; t < static_cast<unsigned>(tc::kTcThreads); ++t)
            threads.emplace_back([&, t] {
              emu::ctx = {{t, 0, 0}, {x, y, z}, smem, &block_bar, &warps[t / 32]};
              try {
                kernel(args...);
              } catch (const std::exception& e) {  // the others would wait forever: stop here
                std::fprintf(stderr, "thread %u of block (%u, %u, %u): %s\n", t, x, y, z, e.what());
                std::abort();
              }
            });
        }
      }
}

emu::Dim3 grid_of(int64_t B, int64_t T, int64_t NH) {
  return {static_cast<unsigned>((T + tc::kRows - 1) / tc::kRows), static_cast<unsigned>(NH),
          static_cast<unsigned>(B)};
}

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// ||got - want|| over columns [begin, begin + count) of each row, relative
// to ||want|| over the columns [norm_begin, norm_begin + norm_count).
double rel_error(const std::vector<float>& got, const std::vector<float>& want, size_t begin,
                 size_t count, size_t stride, size_t norm_begin, size_t norm_count) {
  double num = 0, den = 0;
  for (size_t r = 0; r < want.size() / stride; ++r) {
    for (size_t i = begin; i < begin + count; ++i) {
      const double d = static_cast<double>(got[r * stride + i]) - want[r * stride + i];
      num += d * d;
    }
    for (size_t i = norm_begin; i < norm_begin + norm_count; ++i)
      den += static_cast<double>(want[r * stride + i]) * want[r * stride + i];
  }
  return std::sqrt(num / den);  // NaN if anything is NaN
}

struct Case {
  int64_t B, T, C, NH;
};

template <class E, int HD>
void check(const Case& cs, double tol) {
  const auto [B, T, C, NH] = cs;
  ASSERT_EQ(C / NH, HD);
  const auto qkv = uniform(B * T * 3 * C, 80), dout = uniform(B * T * C, 81);
  std::vector<float> ws(cpu::attention_workspace_floats(T, HD));
  std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, ws.data(), 1);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                          ws.data(), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN(), scale = 1.f / std::sqrt(float(HD));
  std::vector<float> g_out(out.size(), nan), g_lse(lse.size(), nan), g_dqkv(dqkv.size(), nan);
  launch(&tc::attention_forward_tc_kernel<E, HD>, grid_of(B, T, NH), tc::ForwardSmem<E, HD>::bytes,
         g_out.data(), g_lse.data(), qkv.data(), T, C, NH, scale);
  EXPECT_LE(rel_error(g_out, out, 0, C, C, 0, C), tol) << "out";
  double lse_err = 0;
  for (size_t i = 0; i < lse.size(); ++i) lse_err = std::max(lse_err, double(std::fabs(g_lse[i] - lse[i])));
  EXPECT_LE(lse_err, 4 * tol) << "lse";  // NaN fails
  // The backward from the f32 forward's out and lse, so it is checked alone.
  const size_t bytes = tc::BackwardSmem<E, HD>::bytes;
  launch(&tc::attention_backward_dq_tc_kernel<E, HD>, grid_of(B, T, NH), bytes, g_dqkv.data(),
         dout.data(), qkv.data(), out.data(), lse.data(), T, C, NH, scale);
  launch(&tc::attention_backward_dkv_tc_kernel<E, HD>, grid_of(B, T, NH), bytes, g_dqkv.data(),
         dout.data(), qkv.data(), out.data(), lse.data(), T, C, NH, scale);
  // dq and dk relative to the whole gradient: they vanish where a row sees
  // one key (T = 1), and dS = P (dP - D) then holds only the 16-bit
  // products' rounding.
  EXPECT_LE(rel_error(g_dqkv, dqkv, 0, C, 3 * C, 0, 3 * C), tol) << "dq";
  EXPECT_LE(rel_error(g_dqkv, dqkv, C, C, 3 * C, 0, 3 * C), tol) << "dk";
  EXPECT_LE(rel_error(g_dqkv, dqkv, 2 * C, C, 3 * C, 2 * C, C), tol) << "dv";
}

// Rounding the operands to bf16 (8 bits) gives relative errors of about its
// unit roundoff 2^-9 = 2e-3 (measured here: 1.4e-3 to 2.2e-3); fp16 (11
// bits) 2^-12 = 2.4e-4 (measured 2.6e-4). The bounds leave 3x.
constexpr double kBf16Tol = 6e-3, kFp16Tol = 8e-4;

TEST(attention_tc_emulation, bf16_head64_partial_tiles) {
  check<__nv_bfloat16, 64>({2, 100, 128, 2}, kBf16Tol);
}
TEST(attention_tc_emulation, fp16_head64_whole_tiles) {
  check<__half, 64>({1, 128, 64, 1}, kFp16Tol);
}
TEST(attention_tc_emulation, bf16_head128) { check<__nv_bfloat16, 128>({1, 70, 128, 1}, kBf16Tol); }
TEST(attention_tc_emulation, bf16_one_position) { check<__nv_bfloat16, 64>({1, 1, 64, 1}, kBf16Tol); }

// The emulation itself catches a misaligned fragment and a row of 16-bit
// elements that is not a multiple of 16 bytes.
TEST(attention_tc_emulation, emulated_wmma_enforces_alignment) {
  alignas(32) __nv_bfloat16 buf[16 * 24 + 16] = {};
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> a;
  EXPECT_THROW(nvcuda::wmma::check_access(buf + 8, 24), std::logic_error);
  EXPECT_THROW(nvcuda::wmma::check_access(buf, 12), std::logic_error);
  EXPECT_NO_THROW(nvcuda::wmma::check_access(buf, 24));
  (void)a;
}

}  // namespace
}  // namespace meshtrain
