#include "meshtrain/telemetry/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.h"

namespace meshtrain::telemetry {

namespace {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Protobuf wire format: varint, tag = (field << 3) | wire type.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire) { put_varint(out, (uint64_t(field) << 3) | wire); }
template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian host (x86-64, aarch64)
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view s) {
  put_tag(out, field, 2);
  put_varint(out, s.size());
  out.append(s);
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, 1);  // wall_time: double
  put_fixed<double>(e, wall_time);
  put_tag(e, 2, 0);  // step: int64
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::vector<Scalar>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);  // Summary.Value.tag
    put_tag(v, 2, 5);      // Summary.Value.simple_value: float
    put_fixed<float>(v, static_cast<float>(value));
    put_bytes(summary, 1, v);  // Summary.value (repeated)
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

std::string encode_file_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string frame_tfrecord(std::string_view data) {
  std::string r;
  r.reserve(data.size() + 16);
  const uint64_t len = data.size();
  put_fixed<uint64_t>(r, len);
  put_fixed<uint32_t>(r, masked_crc32c(r.data(), 8));
  r.append(data);
  put_fixed<uint32_t>(r, masked_crc32c(data.data(), data.size()));
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double now = unix_now();
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}.{}", static_cast<int64_t>(now), host, getpid()))
              .string();
  f_ = std::fopen(path_.c_str(), "wb");
  MT_CHECK(f_ != nullptr, "cannot create TensorBoard event file {}: {}", path_, std::strerror(errno));
  write_record(encode_file_version_event(now));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() { close(); }

void TensorBoardWriter::write_record(const std::string& data) {
  const std::string r = frame_tfrecord(data);
  MT_CHECK(std::fwrite(r.data(), 1, r.size(), f_) == r.size(), "cannot write {}: {}", path_,
           std::strerror(errno));
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<Scalar>& values, double wall_time) {
  if (!f_ || values.empty()) return;
  write_record(encode_scalar_event(wall_time < 0 ? unix_now() : wall_time, step, values));
  flush();
}

void TensorBoardWriter::add_scalar(int64_t step, const std::string& tag, double value, double wall_time) {
  add_scalars(step, {{tag, value}}, wall_time);
}

void TensorBoardWriter::flush() {
  if (f_) std::fflush(f_);
}

void TensorBoardWriter::close() {
  if (f_) std::fclose(f_);
  f_ = nullptr;
}

}  // namespace meshtrain::telemetry
