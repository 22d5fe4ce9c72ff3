#include "meshtrain/optim/state_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "meshtrain/core/error.h"

namespace meshtrain {
namespace {

std::string default_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// An unnamed file in `dir`: O_TMPFILE, or a named one unlinked at once.
int open_unnamed(const std::string& dir, int flags) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC | flags, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT)) return fd;
  std::string name = dir + "/meshtrain-offload-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC | flags);
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

}  // namespace

StateFile::StateFile(const std::string& dir, int64_t bytes)
    : bytes_(bytes), dir_(dir.empty() ? default_dir() : dir) {
  MT_CHECK(bytes >= 0 && bytes % kAlign == 0, "state file of {} bytes (not whole blocks)", bytes);
  fd_ = open_unnamed(dir_, O_DIRECT);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = open_unnamed(dir_, 0);  // no O_DIRECT here
  MT_CHECK(fd_ >= 0, "offload.path = \"{}\": cannot create the optimizer-state file there: {}",
           dir_, errno_str());
  if (bytes_ == 0) return;
  const int rc = ::posix_fallocate(fd_, 0, bytes_);
  if (rc != 0) {
    ::close(fd_);
    fail("offload.path = \"{}\": cannot reserve {:.1f} MB for the offloaded optimizer state: {}",
         dir_, bytes_ / 1e6, std::strerror(rc));
  }
}

StateFile::~StateFile() {
  if (fd_ >= 0) ::close(fd_);
}

void StateFile::transfer(bool writing, int64_t offset, char* buf, int64_t bytes) const {
  const char* verb = writing ? "write" : "read";
  MT_CHECK(offset >= 0 && offset + bytes <= bytes_, "state file {} [{}, {}) beyond its {} bytes", verb,
           offset, offset + bytes, bytes_);
  for (int64_t done = 0; done < bytes;) {
    const size_t left = static_cast<size_t>(bytes - done);
    const ssize_t n = writing ? ::pwrite(fd_, buf + done, left, offset + done)
                              : ::pread(fd_, buf + done, left, offset + done);
    if (n < 0 && errno == EINTR) continue;
    MT_CHECK(n > 0, "offloaded optimizer state in {}: {} {} bytes at offset {} failed: {}", dir_,
             writing ? "writing" : "reading", bytes - done, offset + done,
             n < 0 ? errno_str() : writing ? "nothing written" : "unexpected end of file");
    done += n;
  }
}

void StateFile::read(int64_t offset, void* dst, int64_t bytes) const {
  transfer(false, offset, static_cast<char*>(dst), bytes);
}

void StateFile::write(int64_t offset, const void* src, int64_t bytes) const {
  transfer(true, offset, static_cast<char*>(const_cast<void*>(src)), bytes);
  if (!direct_) {
    // Through the cache: push the range out and drop it, so the state does
    // not come back into memory as cached pages.
    ::sync_file_range(fd_, offset, bytes,
                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    ::posix_fadvise(fd_, offset, bytes, POSIX_FADV_DONTNEED);
  }
}

}  // namespace meshtrain
