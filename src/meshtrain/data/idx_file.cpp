#include "meshtrain/data/idx_file.h"

#include <zlib.h>

#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/data/image_decode.h"

namespace meshtrain::data {

namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& name) {
  std::vector<uint8_t> out;
  out.reserve(in.size() * 4);
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 15 + 16) != Z_OK) fail("{}: zlib inflateInit2 failed", name);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  uint8_t buf[1 << 16];
  int rc = Z_OK;
  for (;;) {
    zs.next_out = buf;
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.insert(out.end(), buf, buf + (sizeof buf - zs.avail_out));
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (cat a.gz b.gz); anything else is an error.
      if (zs.avail_in == 0) break;
      if (zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      inflateEnd(&zs);
      fail("{}: {} bytes of garbage after the gzip stream", name, zs.avail_in);
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      fail("{}: truncated gzip file (the compressed stream ends early after {} bytes of data)",
           name, out.size());
    }
    if (rc != Z_OK) {
      const std::string msg = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      fail("{}: corrupt gzip data: {}", name, msg);
    }
  }
  inflateEnd(&zs);
  return out;
}

// Checks the header, returns the sizes.
std::vector<uint32_t> idx_header(const std::vector<uint8_t>& b, const std::string& name,
                                 int want_dims, const char* what) {
  if (b.size() < 4) fail("{}: {} bytes is too short for an IDX header", name, b.size());
  if (b[0] != 0 || b[1] != 0)
    fail("{}: not an IDX file (magic {:02x} {:02x} {:02x} {:02x}; expected 00 00 08 {:02x})",
         name, b[0], b[1], b[2], b[3], want_dims);
  if (b[2] != 0x08)
    fail("{}: IDX data type 0x{:02x} is not unsigned bytes (0x08)", name, b[2]);
  if (b[3] != want_dims)
    fail("{}: an IDX file of {} dimension(s), but {} files have {} (magic 0x{:08x}, expected "
         "0x{:08x})", name, b[3], what, want_dims, be32(b.data()), 0x800u + want_dims);
  const size_t header = 4 + 4 * static_cast<size_t>(want_dims);
  if (b.size() < header) fail("{}: truncated IDX header ({} bytes)", name, b.size());
  std::vector<uint32_t> dims;
  for (int i = 0; i < want_dims; ++i) dims.push_back(be32(b.data() + 4 + 4 * i));
  uint64_t expect = 1;
  for (uint32_t d : dims) {
    expect *= d;
    if (expect > (uint64_t{1} << 40)) fail("{}: IDX sizes are implausibly large", name);
  }
  const uint64_t have = b.size() - header;
  if (have < expect)
    fail("{}: truncated: the header says {} bytes of data, the file holds {}", name, expect, have);
  if (have > expect)
    fail("{}: {} bytes after the {} bytes of data the header describes", name, have - expect,
         expect);
  return dims;
}

}  // namespace

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return gunzip(bytes, path);
  return bytes;
}

IdxImages parse_idx_images(const std::vector<uint8_t>& b, const std::string& name) {
  const std::vector<uint32_t> d = idx_header(b, name, 3, "image");
  if (d[1] == 0 || d[2] == 0) fail("{}: images of {}x{} pixels", name, d[1], d[2]);
  if (d[1] > 65535 || d[2] > 65535) fail("{}: images of {}x{} pixels are too large", name, d[1], d[2]);
  IdxImages img;
  img.count = d[0];
  img.rows = static_cast<int>(d[1]);
  img.cols = static_cast<int>(d[2]);
  img.pixels.assign(b.begin() + 16, b.end());
  return img;
}

std::vector<uint8_t> parse_idx_labels(const std::vector<uint8_t>& b, const std::string& name) {
  idx_header(b, name, 1, "label");
  return std::vector<uint8_t>(b.begin() + 8, b.end());
}

IdxImages read_idx_images(const std::string& path) {
  return parse_idx_images(read_maybe_gzip(path), path);
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  return parse_idx_labels(read_maybe_gzip(path), path);
}

IdxDataset read_idx_dataset(const std::string& images_path, const std::string& labels_path) {
  IdxDataset ds;
  ds.images = read_idx_images(images_path);
  ds.labels = read_idx_labels(labels_path);
  if (static_cast<int64_t>(ds.labels.size()) != ds.images.count)
    fail("{} holds {} images but {} holds {} labels: they must be the same split", images_path,
         ds.images.count, labels_path, ds.labels.size());
  return ds;
}

}  // namespace meshtrain::data
