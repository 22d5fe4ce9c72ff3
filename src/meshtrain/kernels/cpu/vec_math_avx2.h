// vec_math.h's exp on eight lanes, for the AVX2 + FMA kernels that write
// their loops with intrinsics (GELU, the fused attention). Include only
// where __AVX2__ and __FMA__ are on; the function lives in the including
// file's ISA namespace, so no other level can link against it.
#pragma once
#include <immintrin.h>

#if !defined(__AVX2__) || !defined(__FMA__)
#error "vec_math_avx2.h needs AVX2 and FMA (an avx2-level file)"
#endif

namespace meshtrain::cpu::MT_ISA_NS {

// exp(x) per lane for x already in [-87, 88]: expf_in_range's range
// reduction and polynomial, so the lanes match it to rounding.
[[gnu::always_inline]] inline __m256 exp8_in_range(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n built in the exponent field (n in [-126, 127] for x in range). A NaN
  // lane converts to some integer, but p is already NaN there.
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace meshtrain::cpu::MT_ISA_NS
