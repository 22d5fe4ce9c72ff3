#include "meshtrain/comm/transports/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

namespace {
// The creator writes this at offset 0 after sizing the segment; openers wait for it.
struct SegmentHeader {
  uint64_t magic;
  uint64_t bytes;
};
constexpr uint64_t kMagic = 0x6d65736874726e31ull;  // "meshtrn1"
constexpr size_t kHeaderBytes = 64;
}  // namespace

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    this->~ShmSegment();
    data_ = o.data_; bytes_ = o.bytes_; name_ = std::move(o.name_); owner_ = o.owner_;
    o.data_ = nullptr; o.bytes_ = 0; o.owner_ = false;
  }
  return *this;
}

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("cannot create shared memory {}: {}", name, std::strerror(errno));
  size_t total = bytes + kHeaderBytes;
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    fail("cannot size shared memory {} to {} bytes: {}", name, total, std::strerror(e));
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    fail("cannot map shared memory {}: {}", name, std::strerror(errno));
  }
  auto* h = static_cast<SegmentHeader*>(p);
  h->bytes = bytes;
  __atomic_store_n(&h->magic, kMagic, __ATOMIC_RELEASE);
  ShmSegment s;
  s.data_ = static_cast<char*>(p) + kHeaderBytes;
  s.bytes_ = bytes;
  s.name_ = name;
  s.owner_ = true;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, std::chrono::steady_clock::time_point deadline) {
  for (int attempt = 0;; ++attempt) {
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st{};
      if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= kHeaderBytes) {
        void* p = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) fail("cannot map shared memory {}: {}", name, std::strerror(errno));
        auto* h = static_cast<SegmentHeader*>(p);
        if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == kMagic &&
            h->bytes + kHeaderBytes <= static_cast<size_t>(st.st_size)) {
          ShmSegment s;
          s.data_ = static_cast<char*>(p) + kHeaderBytes;
          s.bytes_ = h->bytes;
          s.name_ = name;
          return s;
        }
        munmap(p, st.st_size);
      } else {
        close(fd);
      }
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw CommError(fmt::format("timed out waiting for shared memory {} to be created by its "
                                  "owner (is every rank of the job running?)", name));
    std::this_thread::sleep_for(std::chrono::microseconds(attempt < 100 ? 100 : 2000));
  }
}

ShmSegment::~ShmSegment() {
  if (data_) munmap(static_cast<char*>(data_) - kHeaderBytes, bytes_ + kHeaderBytes);
  if (owner_) unlink();
  data_ = nullptr;
}

void ShmSegment::unlink() {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

std::string shm_job_prefix(const std::string& job_id) { return "mt-" + job_id + "-"; }

// Names are appended to a "/" string, not built as "/" + std::string&&, which
// GCC 12 falsely warns about (-Wrestrict).
std::string shm_name(const std::string& job_id, const std::string& suffix) {
  std::string name = "/";
  return name.append(shm_job_prefix(job_id)).append(suffix);
}

int shm_remove_job_segments(const std::string& job_id) {
  std::string prefix = shm_job_prefix(job_id);
  int removed = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
        std::string name = "/";
        if (shm_unlink(name.append(e->d_name).c_str()) == 0) ++removed;
      }
    }
    closedir(d);
  }
  return removed;
}

std::string random_job_id() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  return fmt::format("{:012x}", v & 0xffffffffffffull);
}

}  // namespace meshtrain::comm
