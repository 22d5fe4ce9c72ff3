#include "meshtrain/core/caching_allocator.h"

#include <fmt/format.h>

#include <tuple>

#include "meshtrain/core/error.h"

namespace meshtrain {

// A run of bytes inside one segment; the blocks of a segment form a list in
// address order, so a freed block can merge with free neighbours.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  const void* stream = nullptr;
  bool free = true;
  bool small = false;  // carved from a shared small segment
  MemCategory cat = MemCategory::Other;
  size_t requested = 0;
  Block* prev = nullptr;
  Block* next = nullptr;
};

bool CachingAllocator::FreeOrder::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->small, a->size, a->ptr) <
         std::tie(b->stream, b->small, b->size, b->ptr);
}

CachingAllocator::CachingAllocator(RawAllocator raw) : raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() {
  for (Block* seg : segments_) {
    raw_.release(seg->ptr);
    for (Block* b = seg; b;) {
      Block* n = b->next;
      delete b;
      b = n;
    }
  }
}

namespace {
size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
}  // namespace

void* CachingAllocator::allocate(size_t bytes, MemCategory cat, const void* stream) {
  const size_t size = round_up(bytes == 0 ? 1 : bytes, kRound);
  std::lock_guard<std::mutex> lock(mu_);
  Block* b = find_free(size, stream);
  if (!b) b = new_segment(size, stream, bytes, cat);
  free_.erase(b);
  split(b, size);
  b->free = false;
  b->cat = cat;
  b->requested = bytes;
  in_use_[b->ptr] = b;
  count(cat, static_cast<int64_t>(bytes));
  return b->ptr;
}

CachingAllocator::Block* CachingAllocator::find_free(size_t size, const void* stream) {
  Block key;
  key.stream = stream;
  key.small = size <= kSmall;
  key.size = size;
  auto it = free_.lower_bound(&key);
  if (it == free_.end() || (*it)->stream != stream || (*it)->small != key.small) return nullptr;
  return *it;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t size, const void* stream,
                                                      size_t request, MemCategory cat) {
  const bool small = size <= kSmall;
  const size_t seg = small ? kSegment : round_up(size, kSegment);
  void* p = raw_.allocate(seg);
  if (!p) {  // give the cache back and try once more
    empty_cache_locked();
    p = raw_.allocate(seg);
  }
  if (!p)
    fail("out of memory on {}: {} bytes for {} (a {}-byte segment) did not fit; {}",
         raw_.device_name, request, mem_category_name(cat), seg, where_memory_is());
  auto* b = new Block{static_cast<char*>(p), seg, stream, true, small};
  segments_.insert(b);
  free_.insert(b);
  stats_.reserved += static_cast<int64_t>(seg);
  ++stats_.raw_allocations;
  return b;
}

// Keeps the first `size` bytes of free block b (already out of free_) and
// returns the rest to the free set when it can serve another request.
void CachingAllocator::split(Block* b, size_t size) {
  const size_t rest = b->size - size;
  if (rest < kRound || (!b->small && rest <= kSmall)) return;
  auto* r = new Block{b->ptr + size, rest, b->stream, true, b->small};
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = size;
  free_.insert(r);
}

void CachingAllocator::release(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(p);
  MT_CHECK(it != in_use_.end(), "{}: release of {} which this allocator did not hand out",
           raw_.device_name, p);
  Block* b = it->second;
  in_use_.erase(it);
  count(b->cat, -static_cast<int64_t>(b->requested));
  b->free = true;
  for (Block* n = b->next; n && n->free; n = b->next) {  // merge the next free block in
    free_.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  if (b->prev && b->prev->free) {  // and into a free previous one
    Block* pv = b->prev;
    free_.erase(pv);
    pv->size += b->size;
    pv->next = b->next;
    if (b->next) b->next->prev = pv;
    delete b;
    b = pv;
  }
  free_.insert(b);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void CachingAllocator::empty_cache_locked() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    Block* seg = *it;
    if (seg->free && !seg->next) {  // one free block spanning the segment
      free_.erase(seg);
      raw_.release(seg->ptr);
      stats_.reserved -= static_cast<int64_t>(seg->size);
      delete seg;
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
}

void CachingAllocator::count(MemCategory cat, int64_t delta) {
  auto i = static_cast<size_t>(cat);
  stats_.current[i] += delta;
  stats_.peak[i] = std::max(stats_.peak[i], stats_.current[i]);
  stats_.total_current += delta;
  stats_.total_peak = std::max(stats_.total_peak, stats_.total_current);
}

std::string CachingAllocator::where_memory_is() const {
  std::string s = fmt::format("in use {} bytes (", stats_.total_current);
  bool first = true;
  for (size_t i = 0; i < kMemCategoryCount; ++i) {
    if (stats_.current[i] == 0) continue;
    s += fmt::format("{}{} {}", first ? "" : ", ", mem_category_name(static_cast<MemCategory>(i)),
                     stats_.current[i]);
    first = false;
  }
  return s + fmt::format("), {} bytes reserved in {} segments", stats_.reserved, segments_.size());
}

DeviceMemStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.current;
  stats_.total_peak = stats_.total_current;
}

}  // namespace meshtrain
