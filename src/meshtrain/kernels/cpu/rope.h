// Rotary position embeddings in the Hugging Face Llama form ("rotate_half"):
// inside each head of hd channels, channel j < hd/2 pairs with j + hd/2 and
// the pair (a, b) at position t becomes (a cos - b sin, b cos + a sin) with
// angle t * inv_freq[j], inv_freq[j] = theta^(-2j/hd) (optionally rescaled
// as Llama 3.1+ does for long contexts).
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/kernels/rope_view.h"

namespace meshtrain::cpu {

// Llama 3.1+'s frequency rescaling ("rope_type": "llama3"); factor 0 = none.
struct RopeScaling {
  double factor = 0, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_positions = 8192;
};

// cos and sin of every (position, pair) angle, (T, hd/2) each.
struct RopeTable {
  int T = 0, half = 0;
  std::vector<float> cos, sin;
  operator RopeView() const { return {cos.data(), sin.data(), T, half}; }  // host memory
};
RopeTable rope_table(int T, int hd, double theta, const RopeScaling& scaling = {});

// In place on rows of `row_stride` floats: row (b, t) holds `nheads` heads of
// hd channels starting at x + (b*T + t) * row_stride.
void rope_forward(float* x, int64_t B, int64_t T, int64_t nheads, int64_t hd, int64_t row_stride,
                  const RopeView& table);
// The transpose (inverse) rotation: turns gradients w.r.t. rotated values into
// gradients w.r.t. the values before rotation.
void rope_backward(float* dx, int64_t B, int64_t T, int64_t nheads, int64_t hd,
                   int64_t row_stride, const RopeView& table);

}  // namespace meshtrain::cpu
