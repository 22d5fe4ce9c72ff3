#include "meshtrain/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.h"

namespace meshtrain {

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  // The pid keeps concurrent writers (different ranks) from sharing a temporary.
  tmp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_CHECK(fd_ >= 0, "cannot create {}: {}", tmp_path_, errno_str());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  MT_CHECK(fd_ >= 0, "write to {} after commit", path_);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    MT_CHECK(n > 0, "cannot write {}: {}", tmp_path_, errno_str());
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  MT_CHECK(fd_ >= 0, "{} committed twice", path_);
  MT_CHECK(::fsync(fd_) == 0, "cannot fsync {}: {}", tmp_path_, errno_str());
  MT_CHECK(::close(fd_) == 0, "cannot close {}: {}", tmp_path_, errno_str());
  fd_ = -1;
  MT_CHECK(::rename(tmp_path_.c_str(), path_.c_str()) == 0, "cannot rename {} to {}: {}",
           tmp_path_, path_, errno_str());
  committed_ = true;
  // The rename is durable only once the directory entry is on disk.
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  const std::filesystem::path dir = parent.empty() ? std::filesystem::path(".") : parent;
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, const void* data, size_t bytes) {
  AtomicFileWriter w(path);
  w.write(data, bytes);
  w.commit();
}

}  // namespace meshtrain
