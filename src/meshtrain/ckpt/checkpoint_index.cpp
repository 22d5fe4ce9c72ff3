#include "meshtrain/ckpt/checkpoint_index.h"

#include "meshtrain/nn/model_registry.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>

#include "meshtrain/ckpt/crc32c.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/json_integer.h"
#include "meshtrain/io/atomic_file.h"

namespace meshtrain::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Field access that names the file and the field on every problem.
const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  MT_CHECK(it != j.end(), "checkpoint index {}: missing field '{}'", where, key);
  return *it;
}

template <typename T>
T get(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // An integer field must be an integer that fits (core/json_integer.h).
    constexpr int64_t lo = static_cast<int64_t>(std::numeric_limits<T>::min());
    constexpr int64_t hi = static_cast<uint64_t>(std::numeric_limits<T>::max()) > static_cast<uint64_t>(INT64_MAX)
                               ? INT64_MAX
                               : static_cast<int64_t>(std::numeric_limits<T>::max());
    MT_CHECK(json_integer_in(v, lo, hi), "checkpoint index {}: field '{}' is {}, not an integer in [{}, {}]",
             where, key, v.dump(), lo, hi);
  }
  try {
    return v.get<T>();
  } catch (const json::exception&) {
    fail("checkpoint index {}: field '{}' has the wrong type ({})", where, key, v.dump());
  }
}

json range_json(ElemRange r) { return json::array({r.begin, r.end}); }

ElemRange range_from(const json& j, const std::string& where, const std::string& what) {
  MT_CHECK(j.is_array() && j.size() == 2 && j[0].is_number_integer() && j[1].is_number_integer(),
           "checkpoint index {}: {} is not an element range [begin, end]", where, what);
  ElemRange r{j[0].get<int64_t>(), j[1].get<int64_t>()};
  MT_CHECK(r.begin >= 0 && r.end >= r.begin, "checkpoint index {}: {} has a bad range [{}, {})",
           where, what, r.begin, r.end);
  return r;
}

}  // namespace

DType parse_dtype_name(const std::string& name, const std::string& where) {
  try {
    return dtype_from_name(name);
  } catch (const Error&) {
    fail("checkpoint index {}: unknown dtype '{}'", where, name);
  }
}

const BufferEntry* CheckpointIndex::find_buffer(const std::string& name) const {
  for (const auto& b : buffers)
    if (b.name == name) return &b;
  return nullptr;
}

json CheckpointIndex::to_json() const {
  json j;
  j["format"] = kIndexFormat;
  j["version"] = kIndexVersion;
  j["step"] = step;
  j["created_utc"] = created_utc;
  j["world_size"] = world_size;
  j["mesh"] = {{"dp", mesh.dp}, {"tp", mesh.tp}, {"pp", mesh.pp}};
  j["model"] = model;
  j["optimizer_steps"] = optimizer_steps;
  j["optimizer"] = optimizer;
  j["lr_schedule"] = {{"step", lr_step}};
  j["loss_scaler"] = loss_scaler;
  json bufs = json::array();
  for (const auto& b : buffers)
    bufs.push_back({{"name", b.name}, {"dtype", std::string(dtype_name(b.dtype))}, {"numel", b.numel}});
  j["buffers"] = bufs;
  json files_j = json::array();
  for (const auto& f : files) {
    json ranges = json::object();
    for (const auto& [name, r] : f.ranges) ranges[name] = range_json(r);
    files_j.push_back({{"path", f.path}, {"rank", f.rank}, {"bytes", f.bytes},
                       {"crc32c", crc_hex(f.crc32c)}, {"ranges", ranges}});
  }
  j["files"] = files_j;
  json ranks_j = json::array();
  for (const auto& r : ranks)
    ranks_j.push_back({{"rank", r.rank},
                       {"data_position", {{"epoch", r.data_position.epoch}, {"batch", r.data_position.batch}}},
                       {"rng", r.rng}});
  j["ranks"] = ranks_j;
  json tensors_j = json::array();
  for (const auto& t : tensors)
    tensors_j.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", std::string(dtype_name(t.dtype))},
                         {"buffer", t.buffer}, {"range", range_json(t.range)}});
  j["tensors"] = tensors_j;
  j["config"] = config;
  return j;
}

CheckpointIndex CheckpointIndex::from_json(const json& j, const std::string& where) {
  MT_CHECK(j.is_object(), "checkpoint index {}: not a JSON object", where);
  MT_CHECK(get<std::string>(j, "format", where) == kIndexFormat,
           "checkpoint index {}: format is not '{}'", where, kIndexFormat);
  const int version = get<int>(j, "version", where);
  MT_CHECK(version == kIndexVersion, "checkpoint index {}: version {} is not supported (this build reads {})",
           where, version, kIndexVersion);
  CheckpointIndex x;
  x.step = get<int64_t>(j, "step", where);
  x.created_utc = j.value("created_utc", "");
  x.world_size = get<int>(j, "world_size", where);
  MT_CHECK(x.world_size >= 1, "checkpoint index {}: world_size {} < 1", where, x.world_size);
  const json& mesh = field(j, "mesh", where);
  x.mesh = {get<int>(mesh, "dp", where), get<int>(mesh, "tp", where), get<int>(mesh, "pp", where)};
  x.model = field(j, "model", where);
  model_spec_from_json(x.model, "checkpoint index " + where);  // validates the description
  x.optimizer_steps = get<int64_t>(j, "optimizer_steps", where);
  x.optimizer = j.value("optimizer", json());
  x.lr_step = get<int64_t>(field(j, "lr_schedule", where), "step", where);
  x.loss_scaler = j.value("loss_scaler", json());
  x.config = j.value("config", json::object());
  for (const auto& b : field(j, "buffers", where)) {
    BufferEntry e;
    e.name = get<std::string>(b, "name", where);
    e.dtype = parse_dtype_name(get<std::string>(b, "dtype", where), where);
    e.numel = get<int64_t>(b, "numel", where);
    x.buffers.push_back(e);
  }
  for (const auto& f : field(j, "files", where)) {
    FileEntry e;
    e.path = get<std::string>(f, "path", where);
    MT_CHECK(!e.path.empty() && e.path.find('/') == std::string::npos && e.path[0] != '.',
             "checkpoint index {}: file path '{}' must be a plain file name", where, e.path);
    e.rank = get<int>(f, "rank", where);
    e.bytes = get<uint64_t>(f, "bytes", where);
    e.crc32c = parse_crc_hex(get<std::string>(f, "crc32c", where));
    for (const auto& [name, r] : field(f, "ranges", where).items()) {
      MT_CHECK(x.find_buffer(name), "checkpoint index {}: file {} holds unknown buffer '{}'", where,
               e.path, name);
      e.ranges[name] = range_from(r, where, e.path + " range of " + name);
    }
    x.files.push_back(e);
  }
  for (const auto& r : field(j, "ranks", where)) {
    RankState s;
    s.rank = get<int>(r, "rank", where);
    const json& p = field(r, "data_position", where);
    s.data_position = {get<int64_t>(p, "epoch", where), get<int64_t>(p, "batch", where)};
    s.rng = r.value("rng", json());
    x.ranks.push_back(s);
  }
  for (const auto& t : field(j, "tensors", where)) {
    TensorEntry e;
    e.name = get<std::string>(t, "name", where);
    e.shape = get<Shape>(t, "shape", where);
    e.dtype = parse_dtype_name(get<std::string>(t, "dtype", where), where);
    e.buffer = get<std::string>(t, "buffer", where);
    e.range = range_from(field(t, "range", where), where, "tensor " + e.name);
    x.tensors.push_back(e);
  }
  // Every buffer must be covered exactly once by the files' ranges, or a
  // reader would meet a hole.
  for (const auto& b : x.buffers) {
    std::vector<ElemRange> parts;
    for (const auto& f : x.files)
      if (auto it = f.ranges.find(b.name); it != f.ranges.end() && it->second.count() > 0)
        parts.push_back(it->second);
    std::sort(parts.begin(), parts.end(), [](ElemRange a, ElemRange c) { return a.begin < c.begin; });
    int64_t at = 0;
    for (const auto& p : parts) {
      MT_CHECK(p.begin == at, "checkpoint index {}: buffer '{}' has {} at element {}", where, b.name,
               p.begin > at ? "a hole" : "overlapping files", at);
      at = p.end;
    }
    MT_CHECK(at == b.numel, "checkpoint index {}: the files hold {} of buffer '{}''s {} elements",
             where, at, b.name, b.numel);
  }
  return x;
}

CheckpointIndex read_index(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / kIndexFileName).string();
  std::ifstream in(path);
  MT_CHECK(in.good(), "checkpoint {}: no {} (an incomplete checkpoint: the save did not finish)",
           step_dir, kIndexFileName);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("checkpoint index {}: not valid JSON ({})", path, e.what());
  }
  return CheckpointIndex::from_json(j, path);
}

void write_index(const std::string& step_dir, const CheckpointIndex& index) {
  const std::string text = index.to_json().dump(1) + "\n";
  write_file_atomic((fs::path(step_dir) / kIndexFileName).string(), text.data(), text.size());
}

}  // namespace meshtrain::ckpt
