#include "meshtrain/ckpt/checkpoint_reader.h"

#include <filesystem>
#include <mutex>
#include <vector>

#include "meshtrain/ckpt/crc32c.h"
#include "meshtrain/ckpt/shard_file.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/model_registry.h"

namespace meshtrain::ckpt {

namespace fs = std::filesystem;

struct CheckpointReader::Impl {
  std::string dir;
  CheckpointIndex index;
  ReadOptions options;
  std::mutex mu;
  std::vector<bool> verified;
  std::vector<std::unique_ptr<SafetensorsFile>> files;  // opened on first use

  std::string path_of(size_t i) const { return (fs::path(dir) / index.files[i].path).string(); }

  void verify(size_t i) {
    const auto& f = index.files[i];
    uint64_t bytes = 0;
    const uint32_t crc = crc32c_file(path_of(i), &bytes);
    MT_CHECK(bytes == f.bytes, "checkpoint shard {}: {} bytes but the index records {} (truncated)",
             path_of(i), bytes, f.bytes);
    MT_CHECK(crc == f.crc32c,
             "checkpoint shard {}: checksum mismatch (CRC32C {} but the index records {}): the file "
             "is corrupt",
             path_of(i), crc_hex(crc), crc_hex(f.crc32c));
  }

  const SafetensorsFile& file(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (options.verify && !verified[i]) {
      verify(i);
      verified[i] = true;
    }
    if (!files[i]) files[i] = std::make_unique<SafetensorsFile>(SafetensorsFile::open(path_of(i)));
    return *files[i];
  }
};

CheckpointReader CheckpointReader::open(const std::string& step_dir, ReadOptions options) {
  auto impl = std::make_shared<Impl>();
  impl->dir = step_dir;
  impl->options = options;
  impl->index = read_index(step_dir);
  for (size_t i = 0; i < impl->index.files.size(); ++i) {
    const std::string p = impl->path_of(i);
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    MT_CHECK(!ec, "checkpoint {}: shard file {} is missing", step_dir, p);
    MT_CHECK(size == impl->index.files[i].bytes,
             "checkpoint shard {}: {} bytes but the index records {} ({})", p, size,
             impl->index.files[i].bytes, size < impl->index.files[i].bytes ? "truncated" : "overlong");
  }
  impl->verified.assign(impl->index.files.size(), false);
  impl->files.resize(impl->index.files.size());
  CheckpointReader r;
  r.impl_ = std::move(impl);
  return r;
}

const std::string& CheckpointReader::dir() const { return impl_->dir; }
const CheckpointIndex& CheckpointReader::index() const { return impl_->index; }
bool CheckpointReader::has_buffer(const std::string& name) const {
  return impl_->index.find_buffer(name) != nullptr;
}

void CheckpointReader::read(const std::string& name, ElemRange range, void* dst) const {
  const BufferEntry* b = impl_->index.find_buffer(name);
  MT_CHECK(b, "checkpoint {}: no buffer '{}'", impl_->dir, name);
  MT_CHECK(range.begin >= 0 && range.end <= b->numel && range.begin <= range.end,
           "checkpoint {}: elements [{}, {}) are outside buffer '{}' of {} elements", impl_->dir,
           range.begin, range.end, name, b->numel);
  const size_t es = dtype_size(b->dtype);
  int64_t covered = 0;
  for (size_t i = 0; i < impl_->index.files.size(); ++i) {
    auto it = impl_->index.files[i].ranges.find(name);
    if (it == impl_->index.files[i].ranges.end()) continue;
    const ElemRange part = intersect(it->second, range);
    if (part.count() == 0) continue;
    const SafetensorsFile& f = impl_->file(i);
    const auto& info = f.info(name);
    const int64_t offset = shard_offset(f.metadata(), name);
    MT_CHECK(offset == it->second.begin && info.numel() == it->second.count() &&
                 info.dtype_name == dtype_name(b->dtype),
             "checkpoint shard {}: tensor '{}' ({} {} at offset {}) does not match the index "
             "({} elements of {} at offset {})",
             f.path(), name, info.numel(), info.dtype_name, offset, it->second.count(),
             dtype_name(b->dtype), it->second.begin);
    f.read_range(name, part.begin - it->second.begin, part.count(),
                 static_cast<char*>(dst) + (part.begin - range.begin) * es);
    covered += part.count();
  }
  MT_CHECK(covered == range.count(), "checkpoint {}: the shard files hold only {} of elements [{}, {}) of '{}'",
           impl_->dir, covered, range.begin, range.end, name);
}

void CheckpointReader::verify_all() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < impl_->index.files.size(); ++i) {
    impl_->verify(i);
    impl_->verified[i] = true;
  }
}

void CheckpointReader::check_model(const ModelSpec& model) const {
  // How LoRA's frozen base is held (lora.base_dtype) changes no trained
  // state: a run may resume with the other setting.
  nlohmann::json saved = impl_->index.model, now = model.to_json();
  saved.erase("base_dtype");
  now.erase("base_dtype");
  const std::string diff = model_description_difference(saved, now);
  MT_CHECK(diff.empty(), "checkpoint {}/{} is from another model: {}", impl_->dir, kIndexFileName, diff);
  // Checkpoints hold the logical model: a shard (tp slices, pipeline stage)
  // compares the whole model's size.
  const int64_t logical =
      model.shard().is_full() ? model.num_params() : model.sharded(ModelShard{})->num_params();
  if (const BufferEntry* p = impl_->index.find_buffer(kParams))
    MT_CHECK(p->numel == logical,
             "checkpoint {}/{} is from another model: {} parameters (checkpoint) vs {} (model)",
             impl_->dir, kIndexFileName, p->numel, logical);
}

RankState CheckpointReader::rank_state(int rank) const {
  for (const auto& s : impl_->index.ranks)
    if (s.rank == rank) return s;
  MT_CHECK(!impl_->index.ranks.empty(), "checkpoint {}: no rank states", impl_->dir);
  RankState s = impl_->index.ranks.front();
  s.rank = rank;
  s.rng = nullptr;
  return s;
}

}  // namespace meshtrain::ckpt
