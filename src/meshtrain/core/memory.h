// Tagged, aligned host allocations with per-category byte counters, so the
// program can report where its memory goes and compare with predictions.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace meshtrain {

enum class MemCategory : uint8_t {
  Parameters, Gradients, OptimizerState, Activations, CommBuffers, Workspace, Data, Other, kCount
};
constexpr size_t kMemCategoryCount = static_cast<size_t>(MemCategory::kCount);
std::string_view mem_category_name(MemCategory c);

// Alignment of every allocation: a cache line and a full AVX-512 vector.
constexpr size_t kAlignment = 64;

void* aligned_alloc_tagged(size_t bytes, MemCategory cat);  // zero-filled
void aligned_free_tagged(void* p, size_t bytes, MemCategory cat);

struct MemStats {
  std::array<int64_t, kMemCategoryCount> current{};
  std::array<int64_t, kMemCategoryCount> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
};
MemStats mem_stats();
void mem_reset_peaks();
// Peak resident set size of this process from the kernel (VmHWM), bytes.
int64_t process_peak_rss_bytes();
int64_t process_rss_bytes();

}  // namespace meshtrain
