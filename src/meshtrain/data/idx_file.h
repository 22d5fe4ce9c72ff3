// IDX files (LeCun's MNIST format, also Fashion-MNIST's), gzip-compressed or
// plain (detected from the gzip magic bytes 1f 8b, not the name).
//
// Layout: big-endian magic 0x00 0x00 TYPE NDIMS, NDIMS big-endian uint32
// sizes, then the data. Only unsigned bytes (TYPE 0x08) are read: images are
// NDIMS 3 (count, rows, cols), labels NDIMS 1 (count). The data must be
// exactly the product of the sizes: a truncated file or trailing bytes are
// errors naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::data {

struct IdxImages {
  int64_t count = 0;
  int rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
  const uint8_t* image(int64_t i) const { return pixels.data() + i * rows * cols; }
};

// The file's bytes, gunzipped when it starts with the gzip magic
// (multi-member gzip streams are read to the end). Throws meshtrain::Error
// naming the file for a missing, unreadable or corrupt/truncated gzip file.
std::vector<uint8_t> read_maybe_gzip(const std::string& path);

// Parse IDX bytes (`name` is for messages).
IdxImages parse_idx_images(const std::vector<uint8_t>& bytes, const std::string& name);
std::vector<uint8_t> parse_idx_labels(const std::vector<uint8_t>& bytes, const std::string& name);

IdxImages read_idx_images(const std::string& path);
std::vector<uint8_t> read_idx_labels(const std::string& path);

struct IdxDataset {
  IdxImages images;
  std::vector<uint8_t> labels;
};
// Images and labels of one split; throws when their counts differ.
IdxDataset read_idx_dataset(const std::string& images_path, const std::string& labels_path);

}  // namespace meshtrain::data
