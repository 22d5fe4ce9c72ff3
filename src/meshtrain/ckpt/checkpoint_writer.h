// Saving checkpoints from every rank: each rank writes its equal contiguous
// range of every flat buffer (shard_layout.h) to its own shard file, all ranks
// meet at a barrier, then rank 0 writes index.json and moves <root>/latest and
// applies retention. Until the index exists the checkpoint is torn and no
// reader uses it.
//
// Asynchronous mode (the default): save() copies this rank's slices into one
// of two host snapshot buffers (the only time the caller waits, reported as
// stall_s) and a background thread writes them; a third save() waits for the
// oldest write. Errors on the background thread are re-thrown by the next
// save() or wait(). Synchronous mode writes inside save().
//
// With snapshot_in_background, save() only queues the copy: a snapshot thread
// copies the slices while the caller goes on (a training step's forward and
// backward do not change parameters or optimizer state), and the caller must
// call wait_for_snapshot() before it next changes any buffer it saved (the
// optimizer update). The stall is then bookkeeping only.
//
// The collectives of a save run on a private communicator split from the
// caller's at construction, so background writes never interleave with the
// training collectives of the caller's communicator.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_index.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/device.h"

namespace meshtrain::ckpt {

// One flat buffer as this rank holds it.
struct SaveBuffer {
  std::string name;             // kParams, kExpAvg, kExpAvgSq, ...
  DType dtype = DType::F32;
  int64_t numel = 0;            // global size of the flat buffer
  const void* data = nullptr;   // element `held.begin` of the buffer
  ElemRange held;               // the elements this rank holds (must contain its shard range)
  // Where `data` lives: a device's buffer is always copied into the host
  // snapshot first (through its runtime), in synchronous mode too.
  Device device = Device::cpu();
};

// Per-rank state (each rank's own, e.g. an error-feedback residual): rank
// `rank` of `world` saves its `n` f32 elements as block `rank` of a buffer of
// world x n elements (resume.h: FillRequest::per_rank_block reads it back).
SaveBuffer per_rank_save_buffer(const std::string& name, const void* data, int64_t n, int rank, int world);

// Everything one save records. Fields other than buffers, data_position and
// rng must be the same on every rank (rank 0's go into the index).
struct SaveRequest {
  int64_t step = 0;
  std::vector<SaveBuffer> buffers;
  std::vector<TensorEntry> tensors;          // names/shapes inside the buffers
  data::LoaderPosition data_position;        // this rank's
  nlohmann::json rng;                        // this rank's opaque RNG state
  nlohmann::json model = nlohmann::json::object();  // ModelSpec::to_json()
  nlohmann::json config = nlohmann::json::object();  // resolved_json(config)
  MeshShape mesh;
  int64_t optimizer_steps = 0;
  nlohmann::json optimizer;                  // null = no optimizer state saved
  int64_t lr_step = 0;
  nlohmann::json loss_scaler;                // null = none
};

// The stages of one save, in the order they happen on this rank: the
// snapshot copy (inside save(), or on the snapshot thread with
// snapshot_in_background), then the write (shard, barrier, index) on the
// writer thread (inside save() when synchronous, where there is no copy).
// SnapshotWait: the caller's wait_for_snapshot() found a copy pending and is
// about to block for it (step: the newest save queued).
enum class SaveStage { CopyBegin, CopyDone, WriteBegin, WriteDone, SnapshotWait };

struct WriterOptions {
  std::string root;             // checkpoint root directory
  bool async = true;
  int keep_last = 3;            // 0 = keep all
  int64_t milestone_every = 0;  // also keep steps that are multiples of this; 0 = none
  // save() returns before the snapshot copy: see wait_for_snapshot().
  bool snapshot_in_background = false;
  // Buddy copies, the memory tier (buddy_copies.h): `root` is this rank's
  // node's memory, each rank's shard is also stored under its buddy's node
  // root (a rank on another node), and every node root gets the index and
  // keeps the newest `keep_last` steps.
  bool buddy_copies = false;
  // Test hook: stop after the shard files, before the index (a simulated crash).
  bool skip_index_for_testing = false;
  // Test hook: the snapshot thread sleeps this long before each copy (so a
  // test can check that the caller's next update waits for it).
  double snapshot_delay_s_for_testing = 0;
  // Test hook: called with each stage of a save and its step, on the thread
  // the stage runs on, as it happens (CopyDone before wait_for_snapshot() can
  // return, WriteDone before wait() can), with no lock of the writer held. It
  // may block: a test can hold the copy back at CopyBegin until the caller
  // waits for it (SnapshotWait), and so decide the order of events itself.
  // Unset in production (one branch per stage).
  std::function<void(SaveStage, int64_t step)> on_stage_for_testing;
};

// What one save cost this rank.
struct SaveStats {
  int64_t step = 0;
  double stall_s = 0;   // the caller's wait inside save(): snapshot copy (+ waiting for a free buffer)
  double copy_s = 0;    // the snapshot copy (inside stall_s unless snapshot_in_background)
  double write_s = 0;   // shard write + barrier + index, on the writer thread
  uint64_t bytes = 0;   // this rank's shard file size
  std::string dir;
};

class CheckpointWriter {
 public:
  // Collective over `comm` (all ranks construct together); comm == nullptr
  // means a single process (world 1).
  CheckpointWriter(WriterOptions options, comm::Communicator* comm);
  // Waits for outstanding saves; errors are printed, not thrown.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Collective: every rank calls save() for the same steps in the same order.
  // The saved buffers must stay alive and unchanged until save() returns, or
  // with snapshot_in_background until wait_for_snapshot() (or wait()) returns.
  void save(const SaveRequest& request);
  // Blocks until every snapshot copy queued so far has been taken, so the
  // saved buffers may change again; returns the seconds waited. Never throws
  // (a failed copy is re-thrown by the next save() or wait()). Not collective.
  double wait_for_snapshot();
  // Blocks until every save issued so far is complete (index written on
  // every rank's return); re-throws a background error.
  void wait();

  // Finished saves, oldest first.
  std::vector<SaveStats> stats() const;
  const WriterOptions& options() const;
  int rank() const;
  int world_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The index a save produces, before files and ranks are filled in (exposed
// for tools that write a checkpoint from one process).
CheckpointIndex index_skeleton(const SaveRequest& request, int world_size);

}  // namespace meshtrain::ckpt
