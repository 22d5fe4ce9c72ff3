// Crash-safe file replacement: readers see either the old file or the complete
// new one, never a partial write (write a temporary in the same directory,
// fsync it, rename over the target, fsync the directory).
#pragma once
#include <cstddef>
#include <string>

namespace meshtrain {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  // fsync, rename onto the target path, fsync the directory.
  void commit();
  const std::string& path() const { return path_; }
  // The temporary file's descriptor until commit() (e.g. to start writeback early).
  int fd() const { return fd_; }

 private:
  std::string path_, tmp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Whole-file convenience wrapper.
void write_file_atomic(const std::string& path, const void* data, size_t bytes);

}  // namespace meshtrain
