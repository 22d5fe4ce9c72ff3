// Image datasets as WebDataset shards: POSIX ustar tar files in which each
// sample is consecutive members sharing a key (the member name up to its
// first dot): KEY.jpg or KEY.png holding the encoded image's bytes unchanged,
// and KEY.cls holding the class index as decimal text. Shards are named
// PREFIX-000000.tar, PREFIX-000001.tar, ...; `tar tf`, Python's tarfile and
// the webdataset library read them. Members are written with mode 0644,
// uid/gid 0, mtime 0 and uname/gname empty, so a shard's bytes depend only on
// its samples.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshtrain/data/mapped_file.h"

namespace meshtrain::data {

constexpr size_t kTarBlock = 512;

// One tar file written member by member, atomically (a temporary file in the
// same folder renamed into place by close()). Names up to 100 bytes (no
// prefix field or pax headers are written).
class TarWriter {
 public:
  explicit TarWriter(const std::string& path);
  ~TarWriter();  // without close(): the temporary file is removed
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  void add(const std::string& name, std::span<const uint8_t> data);
  // The two zero blocks that end an archive, fsync, rename.
  void close();
  int64_t members() const { return members_; }
  const std::string& path() const { return path_; }

 private:
  void write(const void* data, size_t n);
  std::string path_, tmp_;
  int fd_ = -1;
  int64_t members_ = 0;
};

// The 512-byte ustar header of a regular file, checksum filled in.
std::vector<uint8_t> tar_header(const std::string& name, uint64_t size);

struct TarMember {
  std::string name;
  std::span<const uint8_t> data;  // into the mapped shard
};

// Reads a tar file's regular members in order. Checks every header's
// checksum and that each member and the end-of-archive block are present;
// errors name the shard and the member. Directories and pax/GNU extended
// headers are skipped (a GNU long name 'L' applies to the next member).
class TarReader {
 public:
  explicit TarReader(const std::string& path);
  bool next(TarMember* out);  // false after the last member
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  uint64_t pos_ = 0;
  bool done_ = false;
  std::string long_name_;
};

// WebDataset's split of a member name: key (directories kept) and extension
// (after the first dot of the last path component). "a/000123.cls" ->
// ("a/000123", "cls"). Returns false when the name has no dot.
bool split_sample_name(std::string_view name, std::string* key, std::string* ext);

struct ImageSample {
  std::string key;
  std::string ext;                // "jpg" or "png" (also "jpeg")
  std::span<const uint8_t> image;  // encoded bytes (into the mapped shard, or a writer's input)
  int64_t label = -1;
};

// Writes PREFIX-000000.tar, ... under `dir`, each with at most
// `samples_per_shard` samples. The key of a sample is its index in the split,
// six digits or more ("000123").
class ImageShardWriter {
 public:
  ImageShardWriter(std::string dir, std::string prefix, int64_t samples_per_shard);
  // `ext` "jpg" or "png"; the key is chosen here (the running index).
  void add(std::string_view ext, std::span<const uint8_t> image, int64_t label);
  // Closes the last shard; returns every shard's path.
  std::vector<std::string> finish();
  int64_t samples() const { return samples_; }

 private:
  std::string dir_, prefix_;
  int64_t per_shard_;
  int64_t samples_ = 0;
  std::unique_ptr<TarWriter> current_;
  std::vector<std::string> paths_;
};

// Iterates the samples of one shard: consecutive members with the same key
// form a sample, which must hold exactly one image (jpg, jpeg or png) and a
// cls holding a decimal integer >= 0; other members (txt, json, ...) are
// ignored. Errors name the shard and the member or key.
class ImageShardReader {
 public:
  explicit ImageShardReader(const std::string& path);
  bool next(ImageSample* out);
  const std::string& path() const { return tar_.path(); }

 private:
  TarReader tar_;
  bool have_pending_ = false;
  TarMember pending_;
};

// "PREFIX-000007.tar".
std::string image_shard_name(const std::string& prefix, int64_t index);

}  // namespace meshtrain::data
