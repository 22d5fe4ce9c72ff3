// Small fused element-wise helpers.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

void add(float* out, const float* a, const float* b, int64_t n);   // out = a + b
void add_inplace(float* out, const float* a, int64_t n);            // out += a
void scale_inplace(float* x, float s, int64_t n);                   // x *= s
void copy(float* out, const float* a, int64_t n);

}  // namespace meshtrain::cpu
