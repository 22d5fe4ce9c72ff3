#include "meshtrain/data/image_shards.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

namespace {

// Octal, zero-padded to width-1 digits, NUL-terminated (ustar's numeric fields).
void put_octal(uint8_t* field, size_t width, uint64_t value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llo", static_cast<int>(width - 1),
                static_cast<unsigned long long>(value));
  MT_CHECK(std::strlen(buf) == width - 1, "tar: value {} does not fit a {}-byte field", value,
           width);
  std::memcpy(field, buf, width);  // includes the NUL
}

uint64_t parse_octal(const uint8_t* field, size_t width, bool* ok) {
  uint64_t v = 0;
  size_t i = 0;
  while (i < width && (field[i] == ' ' || field[i] == 0)) ++i;  // leading pad
  if (i < width && (field[i] & 0x80)) {  // GNU base-256 (sizes over 8 GiB)
    v = field[i] & 0x7f;
    for (++i; i < width; ++i) v = (v << 8) | field[i];
    *ok = true;
    return v;
  }
  bool digits = false;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) {
    v = v * 8 + (field[i] - '0');
    digits = true;
  }
  for (; i < width; ++i)
    if (field[i] != ' ' && field[i] != 0) {
      *ok = false;
      return 0;
    }
  *ok = digits;
  return v;
}

std::string field_string(const uint8_t* field, size_t width) {
  size_t n = 0;
  while (n < width && field[n]) ++n;
  return std::string(reinterpret_cast<const char*>(field), n);
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

}  // namespace

std::vector<uint8_t> tar_header(const std::string& name, uint64_t size) {
  MT_CHECK(!name.empty() && name.size() <= 100, "tar: member name '{}' must be 1-100 bytes",
           name);
  std::vector<uint8_t> h(kTarBlock, 0);
  std::memcpy(h.data(), name.data(), name.size());     // name[100]
  put_octal(h.data() + 100, 8, 0644);                  // mode
  put_octal(h.data() + 108, 8, 0);                     // uid
  put_octal(h.data() + 116, 8, 0);                     // gid
  put_octal(h.data() + 124, 12, size);                 // size
  put_octal(h.data() + 136, 12, 0);                    // mtime
  std::memset(h.data() + 148, ' ', 8);                 // chksum: spaces while summing
  h[156] = '0';                                        // typeflag: regular file
  std::memcpy(h.data() + 257, "ustar", 6);             // magic "ustar\0"
  std::memcpy(h.data() + 263, "00", 2);                // version
  put_octal(h.data() + 329, 8, 0);                     // devmajor
  put_octal(h.data() + 337, 8, 0);                     // devminor
  uint64_t sum = 0;
  for (uint8_t b : h) sum += b;
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06llo", static_cast<unsigned long long>(sum));
  std::memcpy(h.data() + 148, buf, 6);
  h[154] = 0;
  h[155] = ' ';
  return h;
}

// ---- TarWriter --------------------------------------------------------------

TarWriter::TarWriter(const std::string& path) : path_(path) {
  tmp_ = path + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create '{}': {}", tmp_, errno_str());
}

TarWriter::~TarWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void TarWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write '{}': {}", tmp_, errno_str());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void TarWriter::add(const std::string& name, std::span<const uint8_t> data) {
  MT_CHECK(fd_ >= 0, "tar '{}': add after close", path_);
  const std::vector<uint8_t> h = tar_header(name, data.size());
  write(h.data(), h.size());
  if (!data.empty()) write(data.data(), data.size());
  static const uint8_t zeros[kTarBlock] = {0};
  const size_t pad = (kTarBlock - data.size() % kTarBlock) % kTarBlock;
  if (pad) write(zeros, pad);
  ++members_;
}

void TarWriter::close() {
  MT_CHECK(fd_ >= 0, "tar '{}': closed twice", path_);
  static const uint8_t zeros[2 * kTarBlock] = {0};
  write(zeros, sizeof zeros);
  ::fsync(fd_);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    ::unlink(tmp_.c_str());
    fail("cannot write '{}': {}", tmp_, errno_str());
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string e = errno_str();
    ::unlink(tmp_.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp_, path_, e);
  }
}

// ---- TarReader --------------------------------------------------------------

TarReader::TarReader(const std::string& path) : file_(path) {}

bool TarReader::next(TarMember* out) {
  if (done_) return false;
  const uint8_t* base = file_.data();
  const uint64_t size = file_.size();
  for (;;) {
    if (pos_ + kTarBlock > size) {
      if (pos_ == size && size > 0 && pos_ >= kTarBlock)
        fail("{}: truncated tar: it ends after {} bytes without the end-of-archive blocks "
             "(a member may be missing)", path(), size);
      fail("{}: truncated tar: {} bytes where a member header was expected at offset {}",
           path(), size - pos_, pos_);
    }
    const uint8_t* h = base + pos_;
    if (all_zero(h, kTarBlock)) {
      done_ = true;  // end of archive (the second zero block is optional for readers)
      return false;
    }
    const std::string raw_name = field_string(h, 100);
    const std::string name_for_msg = raw_name.empty() ? "(unnamed)" : raw_name;
    bool ok = false;
    const uint64_t stored_sum = parse_octal(h + 148, 8, &ok);
    if (!ok)
      fail("{}: corrupt tar header at offset {} (member '{}'): unreadable checksum field",
           path(), pos_, name_for_msg);
    uint64_t usum = 0;
    int64_t ssum = 0;
    for (size_t i = 0; i < kTarBlock; ++i) {
      const uint8_t b = (i >= 148 && i < 156) ? uint8_t{' '} : h[i];
      usum += b;
      ssum += static_cast<int8_t>(b);
    }
    if (stored_sum != usum && static_cast<int64_t>(stored_sum) != ssum)
      fail("{}: corrupt tar header at offset {} (member '{}'): checksum {} but the header sums "
           "to {}", path(), pos_, name_for_msg, stored_sum, usum);
    const uint64_t msize = parse_octal(h + 124, 12, &ok);
    if (!ok)
      fail("{}: corrupt tar header at offset {} (member '{}'): unreadable size field", path(),
           pos_, name_for_msg);
    const uint64_t data_pos = pos_ + kTarBlock;
    if (msize > size - data_pos)
      fail("{}: truncated tar: member '{}' needs {} bytes at offset {}, the file has {} left",
           path(), name_for_msg, msize, data_pos, size - data_pos);
    const uint64_t next = data_pos + (msize + kTarBlock - 1) / kTarBlock * kTarBlock;
    const char type = static_cast<char>(h[156]);
    const std::span<const uint8_t> data(base + data_pos, static_cast<size_t>(msize));
    pos_ = std::min(next, size);
    if (type == 'L') {  // GNU long name for the next member
      long_name_.assign(reinterpret_cast<const char*>(data.data()), data.size());
      while (!long_name_.empty() && long_name_.back() == 0) long_name_.pop_back();
      continue;
    }
    if (type != '0' && type != 0 && type != '7') {
      // directories, links, pax headers ('x', 'g'): not samples
      if (type != 'x') long_name_.clear();
      continue;
    }
    std::string name = raw_name;
    const bool ustar = std::memcmp(h + 257, "ustar", 5) == 0;
    if (!long_name_.empty()) {
      name = std::move(long_name_);
      long_name_.clear();
    } else if (ustar && h[345] != 0) {
      name = field_string(h + 345, 155) + "/" + raw_name;
    }
    out->name = std::move(name);
    out->data = data;
    return true;
  }
}

// ---- samples ----------------------------------------------------------------

bool split_sample_name(std::string_view name, std::string* key, std::string* ext) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string_view::npos || dot == base) return false;
  *key = std::string(name.substr(0, dot));
  *ext = std::string(name.substr(dot + 1));
  return true;
}

std::string image_shard_name(const std::string& prefix, int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%06lld.tar", static_cast<long long>(index));
  return prefix + buf;
}

ImageShardWriter::ImageShardWriter(std::string dir, std::string prefix, int64_t samples_per_shard)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), per_shard_(samples_per_shard) {
  MT_CHECK(per_shard_ >= 1, "samples per shard must be >= 1, got {}", per_shard_);
}

void ImageShardWriter::add(std::string_view ext, std::span<const uint8_t> image, int64_t label) {
  MT_CHECK(label >= 0, "image shard: negative label {}", label);
  if (!current_) {
    const std::string path =
        (std::filesystem::path(dir_) / image_shard_name(prefix_, static_cast<int64_t>(paths_.size())))
            .string();
    current_ = std::make_unique<TarWriter>(path);
  }
  char key[32];
  std::snprintf(key, sizeof key, "%06lld", static_cast<long long>(samples_));
  const std::string k(key);
  current_->add(k + "." + std::string(ext), image);
  const std::string cls = std::to_string(label);
  current_->add(k + ".cls",
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(cls.data()), cls.size()));
  ++samples_;
  if (samples_ % per_shard_ == 0) {
    current_->close();
    paths_.push_back(current_->path());
    current_.reset();
  }
}

std::vector<std::string> ImageShardWriter::finish() {
  if (current_) {
    current_->close();
    paths_.push_back(current_->path());
    current_.reset();
  }
  return paths_;
}

ImageShardReader::ImageShardReader(const std::string& path) : tar_(path) {}

bool ImageShardReader::next(ImageSample* out) {
  TarMember m;
  if (have_pending_) {
    m = pending_;
    have_pending_ = false;
  } else if (!tar_.next(&m)) {
    return false;
  }
  std::string key, ext;
  if (!split_sample_name(m.name, &key, &ext))
    fail("{}: member '{}' has no extension: not a WebDataset sample member", path(), m.name);
  ImageSample s;
  s.key = key;
  bool have_cls = false;
  for (;;) {
    if (ext == "jpg" || ext == "jpeg" || ext == "png") {
      if (!s.image.empty() || !s.ext.empty())
        fail("{}: sample '{}' holds two images ({} and {})", path(), key, s.ext, ext);
      s.ext = ext;
      s.image = m.data;
    } else if (ext == "cls") {
      if (have_cls) fail("{}: sample '{}' holds two .cls members", path(), key);
      const std::string_view text(reinterpret_cast<const char*>(m.data.data()), m.data.size());
      std::string_view t = text;
      while (!t.empty() && (t.back() == '\n' || t.back() == ' ' || t.back() == '\r'))
        t.remove_suffix(1);
      int64_t v = -1;
      const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v < 0)
        fail("{}: member '{}': class '{}' is not a decimal integer >= 0", path(), m.name, text);
      s.label = v;
      have_cls = true;
    }
    TarMember n;
    if (!tar_.next(&n)) break;
    std::string nkey, next;
    if (!split_sample_name(n.name, &nkey, &next))
      fail("{}: member '{}' has no extension: not a WebDataset sample member", path(), n.name);
    if (nkey != key) {
      pending_ = n;
      have_pending_ = true;
      break;
    }
    m = n;
    ext = next;
  }
  if (s.ext.empty())
    fail("{}: sample '{}' has no image member (.jpg, .jpeg or .png)", path(), key);
  if (!have_cls) fail("{}: sample '{}' has no .cls member", path(), key);
  *out = std::move(s);
  return true;
}

}  // namespace meshtrain::data
