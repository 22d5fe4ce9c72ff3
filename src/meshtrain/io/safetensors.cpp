#include "meshtrain/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/io/atomic_file.h"

namespace meshtrain {

namespace {

// The safetensors reference implementation refuses headers above this size.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeEntry {
  const char* name;
  size_t size;
  bool supported;
  DType dtype;
};

// All dtypes of the safetensors spec; the ones meshtrain has no DType for can
// be listed and validated but not read.
constexpr DTypeEntry kDTypes[] = {
    {"F64", 8, true, DType::F64},     {"F32", 4, true, DType::F32},
    {"F16", 2, true, DType::F16},     {"BF16", 2, true, DType::BF16},
    {"I64", 8, true, DType::I64},     {"I32", 4, true, DType::I32},
    {"U16", 2, true, DType::U16},     {"U8", 1, true, DType::U8},
    {"I16", 2, false, DType::U8},     {"I8", 1, false, DType::U8},
    {"U64", 8, false, DType::U8},     {"U32", 4, false, DType::U8},
    {"BOOL", 1, false, DType::U8},    {"F8_E4M3", 1, false, DType::U8},
    {"F8_E5M2", 1, false, DType::U8}, {"F8_E8M0", 1, false, DType::U8},
};

const DTypeEntry* find_dtype(const std::string& name) {
  for (const auto& e : kDTypes)
    if (name == e.name) return &e;
  return nullptr;
}

void pread_all(int fd, void* dst, size_t bytes, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    MT_CHECK(n >= 0, "safetensors file {}: read failed: {}", path, errno_str());
    MT_CHECK(n > 0, "safetensors file {}: unexpected end of file at byte {}", path, offset);
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

}  // namespace

struct SafetensorsFile::Impl {
  std::string path;
  int fd = -1;
  uint64_t data_start = 0;  // 8 + header length
  uint64_t data_bytes = 0;
  std::vector<std::string> names;
  std::map<std::string, SafetensorsInfo> infos;
  std::map<std::string, std::string> metadata;
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  [[noreturn]] void bad(const std::string& what) const {
    throw Error(fmt::format("safetensors file {}: {}", path, what));
  }
  void parse_header(const std::string& text);
  SafetensorsInfo parse_entry(const std::string& name, const nlohmann::json& v) const;
};

SafetensorsInfo SafetensorsFile::Impl::parse_entry(const std::string& name,
                                                   const nlohmann::json& v) const {
  if (!v.is_object()) bad(fmt::format("header entry '{}' is not an object", name));
  SafetensorsInfo info;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) bad(fmt::format("tensor '{}' has no dtype string", name));
  info.dtype_name = dt->get<std::string>();
  const DTypeEntry* e = find_dtype(info.dtype_name);
  if (!e) bad(fmt::format("tensor '{}' has unknown dtype '{}'", name, info.dtype_name));
  info.supported = e->supported;
  info.dtype = e->dtype;
  info.elem_size = e->size;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) bad(fmt::format("tensor '{}' has no shape array", name));
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned())
      bad(fmt::format("tensor '{}' has a shape entry that is not a non-negative integer: {}",
                      name, d.dump()));
    uint64_t dim = d.get<uint64_t>();
    if (dim > (uint64_t{1} << 62) || __builtin_mul_overflow(numel, dim, &numel))
      bad(fmt::format("tensor '{}' has an impossibly large shape {}", name, sh->dump()));
    info.shape.push_back(static_cast<int64_t>(dim));
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    bad(fmt::format("tensor '{}' needs data_offsets [begin, end] of non-negative integers", name));
  info.begin = (*off)[0].get<uint64_t>();
  info.end = (*off)[1].get<uint64_t>();
  if (info.end < info.begin)
    bad(fmt::format("tensor '{}' has data_offsets [{}, {}] with end before begin", name,
                    info.begin, info.end));
  uint64_t want = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(info.elem_size), &want) ||
      want != info.end - info.begin)
    bad(fmt::format("tensor '{}' spans {} bytes but shape {} of {} needs {}", name,
                    info.end - info.begin, shape_str(info.shape), info.dtype_name,
                    numel * info.elem_size));
  return info;
}

void SafetensorsFile::Impl::parse_header(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad(fmt::format("header is not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) bad("header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad(fmt::format("__metadata__ value '{}' is not a string", m.key()));
        metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    infos[it.key()] = parse_entry(it.key(), *it);
  }
  // Order by position; tensors may neither overlap nor run past the data.
  for (const auto& [name, info] : infos) names.push_back(name);
  std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return infos[a].begin < infos[b].begin;
  });
  const std::string* prev = nullptr;
  for (const auto& name : names) {
    const auto& info = infos[name];
    if (prev && info.begin < infos[*prev].end && info.end > info.begin)
      bad(fmt::format("tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))", *prev, name,
                      infos[*prev].begin, infos[*prev].end, info.begin, info.end));
    if (info.end > data_bytes)
      bad(fmt::format("truncated: tensor '{}' needs data bytes [{}, {}) but the file holds only {} "
                      "data bytes",
                      name, info.begin, info.end, data_bytes));
    if (info.end > info.begin) prev = &name;
  }
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_CHECK(impl->fd >= 0, "cannot open safetensors file {}: {}", path, errno_str());
  struct stat st {};
  MT_CHECK(::fstat(impl->fd, &st) == 0, "cannot stat {}: {}", path, errno_str());
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) impl->bad(fmt::format("file is only {} bytes, shorter than the 8-byte header length", size));
  unsigned char len_bytes[8];
  pread_all(impl->fd, len_bytes, 8, 0, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little-endian
  if (n > kMaxHeaderBytes)
    impl->bad(fmt::format("header length {} is larger than the {}-byte limit", n, kMaxHeaderBytes));
  if (n > size - 8)
    impl->bad(fmt::format("header length {} is larger than the file ({} bytes after the length)", n,
                          size - 8));
  std::string text(n, '\0');
  pread_all(impl->fd, text.data(), n, 8, path);
  impl->data_start = 8 + n;
  impl->data_bytes = size - impl->data_start;
  impl->parse_header(text);
  SafetensorsFile f;
  f.impl_ = std::move(impl);
  return f;
}

const std::string& SafetensorsFile::path() const { return impl_->path; }
const std::vector<std::string>& SafetensorsFile::names() const { return impl_->names; }
bool SafetensorsFile::contains(const std::string& name) const {
  return impl_->infos.count(name) != 0;
}
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}

const SafetensorsInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = impl_->infos.find(name);
  if (it == impl_->infos.end()) impl_->bad(fmt::format("no tensor named '{}'", name));
  return it->second;
}

void SafetensorsFile::read_range(const std::string& name, int64_t elem_begin, int64_t elem_count,
                                 void* dst) const {
  const auto& in = info(name);
  MT_CHECK(elem_begin >= 0 && elem_count >= 0 && elem_begin + elem_count <= in.numel(),
           "safetensors file {}: elements [{}, {}) out of range for tensor '{}' of {} elements",
           impl_->path, elem_begin, elem_begin + elem_count, name, in.numel());
  pread_all(impl_->fd, dst, static_cast<size_t>(elem_count) * in.elem_size,
            impl_->data_start + in.begin + static_cast<uint64_t>(elem_begin) * in.elem_size,
            impl_->path);
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const auto& in = info(name);
  if (!in.supported)
    impl_->bad(fmt::format("tensor '{}' has dtype {}, which meshtrain cannot hold", name,
                           in.dtype_name));
  Tensor t = Tensor::zeros(in.shape, in.dtype);
  read_range(name, 0, in.numel(), t.raw());
  return t;
}

void SafetensorsFile::read_into(const std::string& name, Tensor dst) const {
  const auto& in = info(name);
  if (dst.shape() != in.shape)
    impl_->bad(fmt::format("tensor '{}' has shape {} but the destination needs {}", name,
                           shape_str(in.shape), shape_str(dst.shape())));
  MT_CHECK(dst.device().is_cpu(), "read_into needs a CPU destination");
  if (in.supported && in.dtype == dst.dtype()) {
    read_range(name, 0, in.numel(), dst.raw());
    return;
  }
  dst.copy_from(read(name));  // converts among the float types, or names the mismatch
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    MT_CHECK(!name.empty() && name != "__metadata__", "cannot write a tensor named '{}' to {}",
             name, path);
    MT_CHECK(!header.contains(name), "tensor '{}' appears twice in {}", name, path);
    MT_CHECK(t.defined() && t.device().is_cpu(), "tensor '{}' for {} is not a CPU tensor", name,
             path);
    header[name] = {{"dtype", std::string(dtype_name(t.dtype()))},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  AtomicFileWriter w(path);
  w.write(len, 8);
  w.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) w.write(t.raw(), t.nbytes());
  w.commit();
}

}  // namespace meshtrain
