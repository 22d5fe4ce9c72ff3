// Resuming: pick the newest checkpoint that is complete and intact, fill the
// caller's buffers from it, and fall back to the previous complete one when
// it is not (printing why). With a communicator the choice is collective:
// a checkpoint is used only if it loaded on every rank, so ranks never resume
// from different steps.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/comm/communicator.h"

namespace meshtrain::ckpt {

// "Fill elements `range` of flat buffer `buffer` into dst": dst points to the
// destination of element range.begin. A ZeRO shard asks for its own range.
struct FillRequest {
  std::string buffer;
  ElemRange range;
  void* dst = nullptr;
  // When the checkpoint has no such buffer (e.g. an imported step-0 model
  // without optimizer state): zero-fill instead of failing.
  bool zero_if_absent = false;
  // Where dst lives: a device's buffer is read into host memory and copied
  // over (through its runtime) once the read has succeeded.
  Device device = Device::cpu();
  // Per-rank state (checkpoint_writer.h, per_rank_save_buffer): this rank's block of that
  // many elements, `range` ignored. A checkpoint saved by W' ranks gives rank
  // r the block of rank r mod W' (a shared buffer of that size: its only
  // block), and says so in ResumeResult::warnings. 0: an ordinary range.
  int64_t per_rank_block = 0;
};


struct ResumeOptions {
  bool verify = true;                 // checksum every shard file read
  const ModelSpec* model = nullptr;   // when set, a checkpoint of another model is an error
  comm::Communicator* comm = nullptr; // when set, ranks agree on the checkpoint
  int rank = 0;                       // whose RankState to return (comm->rank() when comm is set)
  WarnFn warn = warn_stderr;
  // resume_latest: when set, receives why each complete checkpoint it tried
  // did not load (a torn one, left by a crash mid-write, is not counted).
  std::vector<std::string>* unusable = nullptr;
};

struct ResumeResult {
  std::string dir;
  CheckpointIndex index;   // step, optimizer_steps, lr_step, loss_scaler, config, ...
  RankState state;         // this rank's data position and RNG blob
  std::vector<std::string> absent_buffers;  // zero-filled (FillRequest::zero_if_absent)
  std::vector<std::string> skipped;         // newer checkpoints passed over, with reasons
  std::vector<std::string> warnings;        // what did not carry over exactly (per-rank state)
};

// Fills every request from one checkpoint directory (throws on any problem).
ResumeResult load_checkpoint(const std::string& step_dir, const std::vector<FillRequest>& fills,
                             const ResumeOptions& options = {});

// Tries complete checkpoints under root from the newest down; nullopt when
// none loads (or root has none). Buffers may have been partly overwritten by
// a failed attempt; the successful one overwrites every requested element.
std::optional<ResumeResult> resume_latest(const std::string& root,
                                          const std::vector<FillRequest>& fills,
                                          const ResumeOptions& options = {});

}  // namespace meshtrain::ckpt
