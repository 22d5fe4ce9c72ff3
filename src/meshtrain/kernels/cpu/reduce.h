// Deterministic reductions over flat buffers (order independent of threads).
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// Sum of squares, accumulated in double over fixed-size chunks added in order.
double sum_squares(const float* x, int64_t n);
// True when every element is finite.
bool all_finite(const float* x, int64_t n);

}  // namespace meshtrain::cpu
