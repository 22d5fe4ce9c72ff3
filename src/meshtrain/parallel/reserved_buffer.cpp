#include "meshtrain/parallel/reserved_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/core/storage.h"

namespace meshtrain::parallel {

ReservedBuffer::ReservedBuffer(int64_t numel) : numel_(numel) {
  MT_CHECK(numel > 0, "reserved buffer needs a positive size, got {}", numel);
  bytes_ = static_cast<size_t>(numel) * sizeof(float);
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED)
    fail("cannot reserve {} bytes of address space: {}", bytes_, std::strerror(errno));
  data_ = static_cast<float*>(p);
  // Large units are gathered and dropped every step: huge pages make that
  // 512x fewer page faults (best effort: ignored where THP is off).
  madvise(p, bytes_, MADV_HUGEPAGE);
}

ReservedBuffer::~ReservedBuffer() {
  if (data_) munmap(data_, bytes_);
}

Tensor ReservedBuffer::tensor() const {
  MT_CHECK(data_, "tensor() of an empty reserved buffer");
  return Tensor(Storage::borrow(data_, bytes_), 0, {numel_}, DType::F32);
}

Tensor ReservedBuffer::half_tensor(int64_t numel, DType dtype) const {
  MT_CHECK(data_ && numel >= 0 && static_cast<size_t>(numel) * 2 <= bytes_,
           "16-bit view of {} elements does not fit a reserved buffer of {} bytes", numel, bytes_);
  return Tensor(Storage::borrow(data_, bytes_), 0, {numel}, dtype);
}

void ReservedBuffer::discard(int64_t begin, int64_t end) {
  MT_CHECK(begin >= 0 && begin <= end && end <= numel_, "discard [{}, {}) outside [0, {})", begin,
           end, numel_);
  discard_bytes(static_cast<size_t>(begin) * sizeof(float), static_cast<size_t>(end) * sizeof(float));
}

void ReservedBuffer::discard_bytes(size_t begin, size_t end) {
  MT_CHECK(begin <= end && end <= bytes_, "discard bytes [{}, {}) outside [0, {})", begin, end,
           bytes_);
  if (begin == end) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  char* base = reinterpret_cast<char*>(data_);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base + begin);
  const uintptr_t hi = reinterpret_cast<uintptr_t>(base + end);
  const uintptr_t plo = (lo + page - 1) / page * page, phi = hi / page * page;
  if (plo >= phi) {  // no whole page inside: clear in place
    std::memset(reinterpret_cast<void*>(lo), 0, hi - lo);
    return;
  }
  std::memset(reinterpret_cast<void*>(lo), 0, plo - lo);
  std::memset(reinterpret_cast<void*>(phi), 0, hi - phi);
  if (madvise(reinterpret_cast<void*>(plo), phi - plo, MADV_DONTNEED) != 0)
    fail("madvise(MADV_DONTNEED) of {} bytes failed: {}", phi - plo, std::strerror(errno));
}

}  // namespace meshtrain::parallel
