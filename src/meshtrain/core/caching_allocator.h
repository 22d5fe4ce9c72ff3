// A caching allocator over a device's raw allocator (cudaMalloc): blocks are
// carved out of cached segments and returned to them, so a training step that
// allocates the same sizes every step calls the raw allocator only in its
// first step. Device-neutral (the raw allocator is a pair of functions), so
// its policy is tested on the CPU with a counting host allocator.
//
// Policy: sizes round up to 512 bytes. Requests up to 1 MiB share 2 MiB
// segments; larger ones get a segment of their size rounded up to 2 MiB. A
// free block is reused best-fit by a request on the same stream (a block
// freed on one stream may still be read by work queued there) and split when
// the rest is worth keeping; freed neighbours in a segment merge. When the
// raw allocator fails, every wholly free segment is returned and the request
// retried once; then the error names the request, the device and where its
// memory is. Per-category bytes in use (as requested, like the host counters
// of core/memory.h) and their peaks are kept for the memory report.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "meshtrain/core/memory.h"

namespace meshtrain {

struct RawAllocator {
  std::function<void*(size_t)> allocate;  // nullptr when the device is out of memory
  std::function<void(void*)> release;
  std::string device_name;  // for messages: "cuda:0"
};

struct DeviceMemStats {
  std::array<int64_t, kMemCategoryCount> current{};  // bytes in use, as requested
  std::array<int64_t, kMemCategoryCount> peak{};
  int64_t total_current = 0, total_peak = 0;
  int64_t reserved = 0;       // bytes held from the raw allocator (segments)
  int64_t raw_allocations = 0;  // raw allocator calls so far
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;
  static constexpr size_t kSmall = size_t{1} << 20;        // requests up to this share segments
  static constexpr size_t kSegment = size_t{2} << 20;      // small segments; large round to this

  explicit CachingAllocator(RawAllocator raw);
  ~CachingAllocator();  // returns every segment (blocks still in use are a caller bug)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // `stream` is an opaque key (the backend's stream handle).
  void* allocate(size_t bytes, MemCategory cat, const void* stream = nullptr);
  void release(void* p);
  // Returns wholly free segments to the raw allocator.
  void empty_cache();
  DeviceMemStats stats() const;
  void reset_peaks();

 private:
  struct Block;
  Block* find_free(size_t size, const void* stream);
  Block* new_segment(size_t size, const void* stream, size_t request, MemCategory cat);
  void split(Block* b, size_t size);
  void count(MemCategory cat, int64_t delta);
  std::string where_memory_is() const;
  void empty_cache_locked();

  RawAllocator raw_;
  mutable std::mutex mu_;
  // Free blocks ordered by (stream, size, address): best fit is a lower_bound.
  struct FreeOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  std::set<Block*, FreeOrder> free_;
  std::unordered_map<void*, Block*> in_use_;
  std::set<Block*> segments_;  // the first block of each segment
  DeviceMemStats stats_;
};

}  // namespace meshtrain
