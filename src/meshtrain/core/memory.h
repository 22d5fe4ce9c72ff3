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

// Bytes this program holds outside aligned_alloc_tagged (mmap'ed regions
// whose pages come and go, shared-memory buffers): `delta` > 0 when they are
// committed, < 0 when returned. They count in the same per-category
// counters and peaks.
void mem_track_external(MemCategory cat, int64_t delta);

// Keeps `bytes()` counted in one category and adjusts the counters when it
// changes: the accounting of one externally managed region.
class ExternalBytes {
 public:
  explicit ExternalBytes(MemCategory cat = MemCategory::Other) : cat_(cat) {}
  ~ExternalBytes() { set(0); }
  ExternalBytes(const ExternalBytes&) = delete;
  ExternalBytes& operator=(const ExternalBytes&) = delete;
  void set(int64_t bytes) {
    if (bytes != bytes_) mem_track_external(cat_, bytes - bytes_);
    bytes_ = bytes;
  }
  void add(int64_t delta) { set(bytes_ + delta); }
  int64_t bytes() const { return bytes_; }

 private:
  MemCategory cat_;
  int64_t bytes_ = 0;
};

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
