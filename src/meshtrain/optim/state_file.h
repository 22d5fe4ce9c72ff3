// The second tier of offloaded optimizer state: one file on disk, written
// and read with O_DIRECT where the file system allows it, so the bytes move
// between the disk and the optimizer's staging buffers without passing
// through (and filling) the page cache. Where O_DIRECT is refused (tmpfs,
// some network file systems) the file is read and written through the cache,
// and the written range is dropped from it.
//
// The file is unlinked as soon as it exists (O_TMPFILE where available): it
// lives as long as the process, so a killed run leaves nothing behind. Its
// space is reserved up front, so a full disk is an error at start-up, not in
// the middle of a step.
#pragma once
#include <cstdint>
#include <string>

namespace meshtrain {

class StateFile {
 public:
  // Offsets, lengths and buffers of every read and write are multiples of this.
  static constexpr int64_t kAlign = 4096;

  // A zero-filled file of `bytes` in directory `dir` ("" = $TMPDIR or /tmp).
  StateFile(const std::string& dir, int64_t bytes);
  ~StateFile();
  StateFile(const StateFile&) = delete;
  StateFile& operator=(const StateFile&) = delete;

  // Whole transfers or an Error naming the file, the offset and the reason.
  void read(int64_t offset, void* dst, int64_t bytes) const;
  void write(int64_t offset, const void* src, int64_t bytes) const;

  int64_t bytes() const { return bytes_; }
  bool direct() const { return direct_; }  // O_DIRECT (else through the page cache)
  const std::string& where() const { return dir_; }

 private:
  // pread/pwrite until `bytes` moved (EINTR retried), or an Error.
  void transfer(bool writing, int64_t offset, char* buf, int64_t bytes) const;

  int fd_ = -1;
  int64_t bytes_ = 0;
  bool direct_ = false;
  std::string dir_;
};

// n rounded up to a multiple of StateFile::kAlign.
inline int64_t round_up_to_block(int64_t n) {
  return (n + StateFile::kAlign - 1) / StateFile::kAlign * StateFile::kAlign;
}

}  // namespace meshtrain
