// TensorBoard scalar event files, written without a protobuf dependency.
//
// A file `events.out.tfevents.<unix-time>.<host>.<pid>` in a directory holds
// TFRecords: uint64 length (LE), masked CRC32C of the length bytes, the data,
// masked CRC32C of the data. Each record's data is a hand-encoded
// `tensorboard.Event` protobuf: wall_time (double, field 1), step (int64,
// field 2), file_version (string, field 3, first record "brain.Event:2"),
// summary (field 5) holding Summary.Value {tag (1), simple_value float (2)}.
// TensorBoard's EventAccumulator and tf.data read these files
// (tools/check_tensorboard_events.py prints them back).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshtrain/core/crc32c.h"

namespace meshtrain::telemetry {

using meshtrain::crc32c;  // CRC-32C (core/crc32c.h), as TFRecord framing needs
// The TFRecord masking: rotate right by 15 and add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

// One scalar of an event: TensorBoard tag ("train/loss") and value.
using Scalar = std::pair<std::string, double>;

// Protobuf bytes of one Event (exposed for tests and tools).
std::string encode_scalar_event(double wall_time, int64_t step, const std::vector<Scalar>& values);
std::string encode_file_version_event(double wall_time);
// `data` framed as one TFRecord.
std::string frame_tfrecord(std::string_view data);

class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;  // closed: add_* do nothing
  // Creates `dir` if needed and a new event file in it, starting with the
  // file_version record. Throws meshtrain::Error when the file cannot be made.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event holding all `values` for `step`; flushed so a crashed run keeps it.
  // wall_time < 0: now.
  void add_scalars(int64_t step, const std::vector<Scalar>& values, double wall_time = -1);
  void add_scalar(int64_t step, const std::string& tag, double value, double wall_time = -1);
  void flush();
  void close();
  bool is_open() const { return f_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace meshtrain::telemetry
