// index.json: the record that makes a checkpoint directory complete. It names
// every tensor (global name, shape, dtype, element range of its flat buffer),
// which shard file holds which range of each flat buffer with the file's size
// and CRC32C, and the training state beside the tensors: step, per-rank data
// position and RNG blob, optimizer step count, learning-rate schedule step,
// loss scaler, mesh, model config and the full resolved configuration.
// It is written last, atomically, by rank 0 (docs/FAULT_TOLERANCE.md).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/shard_layout.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/nn/model.h"

namespace meshtrain::ckpt {

inline constexpr const char* kIndexFileName = "index.json";
inline constexpr const char* kIndexFormat = "meshtrain-checkpoint";
inline constexpr int kIndexVersion = 1;

// Flat buffer names used by the model helpers (ckpt/model_checkpoint.h).
inline constexpr const char* kParams = "params";
inline constexpr const char* kExpAvg = "exp_avg";
inline constexpr const char* kExpAvgSq = "exp_avg_sq";

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  bool operator==(const MeshShape&) const = default;
};

struct BufferEntry {
  std::string name;
  DType dtype = DType::F32;
  int64_t numel = 0;
};

struct TensorEntry {
  std::string name;    // global name ("h.0.attn.c_attn.weight")
  Shape shape;
  DType dtype = DType::F32;
  std::string buffer;  // the flat buffer holding it
  ElemRange range;     // its elements in that buffer
};

struct FileEntry {
  std::string path;    // relative to the step directory
  int rank = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  std::map<std::string, ElemRange> ranges;  // buffer -> elements this file holds
};

// What one rank saved about itself.
struct RankState {
  int rank = 0;
  data::LoaderPosition data_position;
  nlohmann::json rng;  // opaque, from the trainer
};

struct CheckpointIndex {
  int64_t step = 0;
  int world_size = 1;
  MeshShape mesh;
  nlohmann::json model = nlohmann::json::object();  // ModelSpec::to_json()
  nlohmann::json config = nlohmann::json::object();  // resolved training configuration
  std::vector<BufferEntry> buffers;
  std::vector<TensorEntry> tensors;
  std::vector<FileEntry> files;
  std::vector<RankState> ranks;
  int64_t optimizer_steps = 0;          // AdamW::steps_taken()
  nlohmann::json optimizer;             // e.g. {"type": "adamw", "range": [b, e]}; null = none saved
  int64_t lr_step = 0;                  // learning-rate schedule position
  nlohmann::json loss_scaler;           // null when training has none
  std::string created_utc;

  const BufferEntry* find_buffer(const std::string& name) const;

  nlohmann::json to_json() const;
  // Throws naming `where` and the first missing or malformed field.
  static CheckpointIndex from_json(const nlohmann::json& j, const std::string& where);
};

// <step_dir>/index.json, parsed and validated.
CheckpointIndex read_index(const std::string& step_dir);
// Atomic: temporary, fsync, rename, fsync the directory.
void write_index(const std::string& step_dir, const CheckpointIndex& index);


DType parse_dtype_name(const std::string& name, const std::string& where);

}  // namespace meshtrain::ckpt
