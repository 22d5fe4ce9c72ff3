#include "meshtrain/ckpt/resume.h"

#include <cstring>

#include <fmt/format.h>

#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"

namespace meshtrain::ckpt {

SaveBuffer per_rank_save_buffer(const std::string& name, const void* data, int64_t n, int rank, int world) {
  return {name, DType::F32, n * world, data, {n * rank, n * (rank + 1)}};
}

namespace {

// The range a per-rank fill reads: this rank's block, or rank (r mod W')'s
// of a checkpoint saved by W' ranks (noted in `warnings`).
ElemRange per_rank_range(const FillRequest& f, const BufferEntry& b, int rank, int world,
                         const std::string& dir, std::vector<std::string>& warnings) {
  const int64_t n = f.per_rank_block;
  MT_CHECK(b.numel % n == 0, "checkpoint {}: per-rank buffer '{}' has {} elements, not a multiple of "
           "this rank's {}", dir, f.buffer, b.numel, n);
  const int64_t saved_world = b.numel / n;
  if (saved_world != world)
    warnings.push_back(fmt::format("'{}' holds the state of {} rank(s) and this run has {}: rank r "
                                   "continues from rank r mod {}'s", f.buffer, saved_world, world,
                                   saved_world));
  const int64_t from = rank % saved_world;
  return {from * n, (from + 1) * n};
}

}  // namespace

ResumeResult load_checkpoint(const std::string& step_dir, const std::vector<FillRequest>& fills,
                             const ResumeOptions& options) {
  CheckpointReader reader = CheckpointReader::open(step_dir, {options.verify});
  if (options.model) reader.check_model(*options.model);
  ResumeResult r;
  r.dir = step_dir;
  r.index = reader.index();
  // A device's buffers are read into host memory and copied over only when
  // every read has succeeded, so a checkpoint that fails to load leaves them
  // as they were (host buffers are read in place, as before).
  std::vector<std::vector<char>> staged(fills.size());
  const int rank = options.comm && options.comm->valid() ? options.comm->rank() : options.rank;
  const int world = options.comm && options.comm->valid() ? options.comm->size() : 1;
  for (size_t i = 0; i < fills.size(); ++i) {
    FillRequest f = fills[i];
    const BufferEntry* b = reader.index().find_buffer(f.buffer);
    if (b && f.per_rank_block > 0) f.range = per_rank_range(f, *b, rank, world, step_dir, r.warnings);
    else if (f.per_rank_block > 0) f.range = {0, f.per_rank_block};  // absent: zero-filled below
    if (!b && f.zero_if_absent) {
      // dtype unknown without the buffer: the caller's buffers are f32.
      const size_t bytes = static_cast<size_t>(f.range.count()) * sizeof(float);
      if (f.device.is_cpu()) std::memset(f.dst, 0, bytes);
      else staged[i].assign(bytes, 0);
      r.absent_buffers.push_back(f.buffer);
      continue;
    }
    if (f.device.is_cpu()) {
      reader.read(f.buffer, f.range, f.dst);
      continue;
    }
    staged[i].resize(static_cast<size_t>(f.range.count()) * (b ? dtype_size(b->dtype) : sizeof(float)));
    reader.read(f.buffer, f.range, staged[i].data());
  }
  for (size_t i = 0; i < fills.size(); ++i)
    if (!fills[i].device.is_cpu() && !staged[i].empty())
      runtime_for(fills[i].device).copy(fills[i].dst, fills[i].device, staged[i].data(), Device::cpu(),
                                        staged[i].size(), default_stream(fills[i].device));
  r.state = reader.rank_state(rank);
  return r;
}

std::optional<ResumeResult> resume_latest(const std::string& root,
                                          const std::vector<FillRequest>& fills,
                                          const ResumeOptions& options) {
  const bool collective = options.comm && options.comm->valid();
  // Every rank must see the same root (one machine, or a shared filesystem);
  // the step check below turns a differing listing into a skip, not a mix.
  std::vector<CheckpointStatus> all = list_checkpoints(root);
  std::vector<std::string> skipped;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    int64_t step = it->step;
    if (collective) step = options.comm->allreduce_scalar(it->step, comm::ReduceOp::Max);
    std::string why;
    std::optional<ResumeResult> result;
    if (!it->complete) {
      why = it->problem;
    } else if (step == it->step) {
      try {
        result = load_checkpoint(it->dir, fills, options);
      } catch (const Error& e) {
        why = e.what();
      }
    } else {
      why = "not present on every rank";
    }
    int64_t ok = result ? 1 : 0;
    if (collective) ok = options.comm->allreduce_scalar(ok, comm::ReduceOp::Min);
    if (ok) {
      result->skipped = skipped;
      return result;
    }
    if (why.empty()) why = "another rank could not load it";
    const std::string msg = fmt::format("not resuming from {}: {}", it->dir, why);
    if (it->complete && options.unusable) options.unusable->push_back(msg);
    if (options.warn) options.warn(msg);
    skipped.push_back(msg);
  }
  return std::nullopt;
}

}  // namespace meshtrain::ckpt
