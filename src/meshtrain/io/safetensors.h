// Reading and writing safetensors files: 8-byte little-endian header length N,
// N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {str: str}}), then raw little-endian data; offsets count from
// the first byte after the header. Every malformed input raises a
// meshtrain::Error that names the file and the problem.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/core/tensor.h"

namespace meshtrain {

struct SafetensorsInfo {
  std::string dtype_name;  // as written in the file ("F32", "BOOL", ...)
  bool supported = false;  // dtype maps to a meshtrain DType (only then can it be read)
  DType dtype = DType::U8; // valid when supported
  size_t elem_size = 0;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
  int64_t numel() const { return shape_numel(shape); }
};

class SafetensorsFile {
 public:
  // Opens and validates the header; data is read on demand (pread), so
  // opening a multi-gigabyte file costs only its header.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const;
  // Tensor names in the order of their data in the file.
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  // Throws naming the file when `name` is absent.
  const SafetensorsInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const;

  // A new tensor with its own storage, in the file's dtype.
  Tensor read(const std::string& name) const;
  // Copies into dst (CPU), converting among F32/BF16/F16; dst's shape must equal
  // the stored shape.
  void read_into(const std::string& name, Tensor dst) const;
  // Raw bytes of elements [elem_begin, elem_begin + elem_count) of the
  // flattened tensor, in the file's dtype, into dst.
  void read_range(const std::string& name, int64_t elem_begin, int64_t elem_count,
                  void* dst) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// Writes tensors (CPU, contiguous) and optional string metadata atomically.
// Data follow in the given order; the header is space-padded to 8 bytes so the
// data section is aligned.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace meshtrain
