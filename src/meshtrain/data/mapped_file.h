// A read-only memory mapping of a whole file (RAII). Token shards are read
// through it so that a multi-GiB shard costs no heap and pages in on demand.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace meshtrain::data {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`; throws meshtrain::Error naming the path when it cannot.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace meshtrain::data
