#include "meshtrain/core/debug_log.h"
#include "meshtrain/train/training_checkpoints.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "meshtrain/ckpt/memory_tier.h"
#include "meshtrain/ckpt/model_checkpoint.h"
#include "meshtrain/ckpt/resume.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sequences per step when the checkpoint was written: recorded in every
// rank's state blob by TrainingCheckpointer::save.
int64_t saved_global_batch(const ckpt::ResumeResult& r) {
  if (r.state.rng.is_object() && r.state.rng.contains("global_batch"))
    return r.state.rng["global_batch"].get<int64_t>();
  return 0;  // unknown: taken as unchanged
}

// The in-memory copies (ckpt/memory_tier.h) when they are at least as new as
// the disk's newest checkpoint and load on every rank; nullopt otherwise,
// with `note` saying why when there was something to say.
std::optional<ckpt::ResumeResult> resume_from_memory(const CheckpointOptions& opt,
                                                     const std::vector<ckpt::FillRequest>& fills,
                                                     const ckpt::ResumeOptions& ro,
                                                     std::string& note, std::string& warning) {
  const std::string store = ckpt::memory_store(opt.memory_dir, opt.dir);
  // By name only: the restart opens no file of the disk checkpoint to decide.
  int64_t disk = opt.dir.empty() ? -1 : ckpt::newest_indexed_step(opt.dir);
  if (ro.comm) disk = ro.comm->allreduce_scalar(disk, comm::ReduceOp::Max);
  const std::optional<ckpt::MemoryCheckpoint> mem =
      ckpt::gather_memory_checkpoint(ro.comm, store, std::max<int64_t>(disk, 0));
  if (!mem) {
    if (fs::exists(store))
      warning = fmt::format("no in-memory checkpoint{} survives in every shard (a rank and its "
                            "buddy lost?): reading the disk", disk >= 0 ? fmt::format(
                            " as new as the disk's step {}", disk) : std::string());
    return std::nullopt;
  }
  std::optional<ckpt::ResumeResult> r;
  std::string err;
  try {
    r = ckpt::load_checkpoint(mem->dir, fills, ro);
  } catch (const Error& e) {
    err = e.what();
  }
  int64_t ok = r ? 1 : 0;
  if (ro.comm) ok = ro.comm->allreduce_scalar(ok, comm::ReduceOp::Min);
  if (!ok) {
    warning = fmt::format("the in-memory checkpoint of step {} did not load ({}): reading the disk",
                          mem->step, err.empty() ? "on another rank" : err);
    return std::nullopt;
  }
  note = fmt::format("in-memory copies of step {}; this node received {} file(s), {} bytes, from "
                     "other nodes' memory", mem->step, mem->files_received, mem->bytes_received);
  return r;
}

}  // namespace

namespace {

bool is_optimizer_state(Optimizer& optimizer, const std::string& buffer) {
  for (const OptimizerState& s : optimizer.state())
    if (s.name == buffer) return true;
  return false;
}

// The fills of a gradient-sync strategy's state (tensors zero when absent),
// and the optimizer's state read per rank when the strategy keeps it so.
void add_sync_fills(std::vector<ckpt::FillRequest>& fills, parallel::GradientSync& sync,
                    Optimizer& optimizer) {
  if (sync.optimizer_state_per_rank())
    for (ckpt::FillRequest& f : fills)
      if (is_optimizer_state(optimizer, f.buffer)) f.per_rank_block = f.range.count();
  for (const parallel::SyncStateTensor& t : sync.checkpoint_state().tensors) {
    const int64_t n = t.tensor->numel();
    ckpt::FillRequest f{t.name, {0, n}, t.tensor->raw(), /*zero_if_absent=*/true};
    if (t.per_rank) f.per_rank_block = n;
    fills.push_back(f);
  }
}

std::optional<ResumePoint> resume_from_checkpoint(const CheckpointOptions& opt, const Model& model,
                                                  Optimizer& optimizer, comm::Communicator* comm,
                                                  int64_t global_batch,
                                                  std::optional<ckpt::ElemRange> own_params,
                                                  const ModelParallelCheckpoint* tp,
                                                  parallel::GradientSync* sync) {
  std::vector<ckpt::FillRequest> fills = ckpt::model_fill_requests(model, &optimizer);
  if (tp) {
    // The shard's runs, each from its range of the logical buffers.
    fills.clear();
    const ckpt::ElemRange p = own_params.value_or(ckpt::ElemRange{0, model.param_buffer().numel()});
    auto add = [&](std::vector<ckpt::FillRequest> more) {
      fills.insert(fills.end(), more.begin(), more.end());
    };
    add(tp->fills(ckpt::kParams, p, model.param_buffer().data<float>() + p.begin, false));
    const ckpt::ElemRange o{optimizer.begin(), optimizer.end()};
    for (const OptimizerState& s : optimizer.state())
      add(tp->fills(s.name, o, s.tensor->data<float>(), true));
  } else if (own_params) {
    for (ckpt::FillRequest& f : fills) {
      if (f.buffer != ckpt::kParams) continue;
      f.range = *own_params;
      f.dst = model.param_buffer().data<float>() + own_params->begin;
    }
  }
  if (sync && !tp) add_sync_fills(fills, *sync, optimizer);
  ckpt::ResumeOptions ro;
  ro.model = &model.spec();
  ro.comm = comm && comm->valid() ? comm : nullptr;
  ro.warn = nullptr;  // the caller reports ResumePoint::skipped, once
  std::optional<ckpt::ResumeResult> r;
  std::string memory_note, memory_warning;
  if (opt.resume == "auto" && opt.memory_every > 0)
    r = resume_from_memory(opt, fills, ro, memory_note, memory_warning);
  if (r) {
  } else if (opt.resume == "auto") {
    std::vector<std::string> unusable;
    ro.unusable = &unusable;
    if (!opt.dir.empty() && fs::exists(opt.dir)) r = ckpt::resume_latest(opt.dir, fills, ro);
    // Complete checkpoints none of which loads: starting over would train
    // from scratch beside them (and prune them), so say why instead.
    MT_CHECK(r || unusable.empty(), "checkpoint.dir = \"{}\" holds {} complete checkpoint(s) and "
             "this run can resume none of them:\n  {}\nfix the cause, or set checkpoint.resume = "
             "never (or another checkpoint.dir) to start at step 0", opt.dir, unusable.size(),
             fmt::join(unusable, "\n  "));
    if (!r) {
      // Starting fresh: still say why the memory tier had nothing.
      if (!memory_warning.empty() && (!ro.comm || ro.comm->rank() == 0))
        fmt::print(stderr, "warning: {}\n", memory_warning);
      return std::nullopt;
    }
  } else if (fs::exists(fs::path(opt.resume) / ckpt::kIndexFileName)) {
    r = ckpt::load_checkpoint(opt.resume, fills, ro);
  } else {
    MT_CHECK(fs::is_directory(opt.resume), "checkpoint.resume = \"{}\": no such checkpoint "
             "directory (give \"auto\", \"never\", a step_* folder or a checkpoint root)",
             opt.resume);
    r = ckpt::resume_latest(opt.resume, fills, ro);
    MT_CHECK(r.has_value(), "checkpoint.resume = \"{}\": no complete, intact checkpoint there",
             opt.resume);
  }
  ckpt::apply_optimizer_state(*r, &optimizer);
  if (sync && !tp && r->state.rng.is_object() && r->state.rng.contains("sync"))
    sync->restore_counters(r->state.rng["sync"]);
  ResumePoint p;
  p.dir = r->dir;
  p.step = r->index.step;
  p.position = r->state.data_position;
  p.skipped = r->skipped;
  if (!memory_warning.empty()) p.skipped.insert(p.skipped.begin(), memory_warning);
  p.skipped.insert(p.skipped.end(), r->warnings.begin(), r->warnings.end());
  p.memory_note = memory_note;
  p.loss_scaler = r->index.loss_scaler;
  const nlohmann::json& cfg = r->index.config;
  if (cfg.is_object() && cfg.contains("train") && cfg["train"].is_object() &&
      cfg["train"].contains("budgeted_steps") && cfg["train"]["budgeted_steps"].is_number_integer())
    p.budgeted_steps = cfg["train"]["budgeted_steps"].get<int64_t>();
  const int64_t old_batch = saved_global_batch(*r);
  if (old_batch > 0 && old_batch != global_batch) {
    // The loader's window order depends on (seed, global batch): another
    // global batch is another order. Continue about as far into the epoch.
    p.position.batch = p.position.batch * old_batch / global_batch;
    p.data_note = fmt::format("the global batch changed from {} to {} sequences, so the data "
                              "order differs from the saved run's; continuing at epoch {} batch "
                              "{} (keep micro_batch x ranks x grad_accum equal to continue "
                              "exactly)", old_batch, global_batch, p.position.epoch,
                              p.position.batch);
  }
  return p;
}

}  // namespace

std::optional<ResumePoint> resume_training(const CheckpointOptions& opt, const Model& model,
                                           Optimizer& optimizer, comm::Communicator* comm,
                                           int64_t global_batch,
                                           std::optional<ckpt::ElemRange> own_params,
                                           const ModelParallelCheckpoint* tp,
                                           parallel::GradientSync* sync) {
  if (opt.resume == "never") return std::nullopt;
  if (opt.resume == "auto" && opt.memory_every <= 0 && (opt.dir.empty() || !fs::exists(opt.dir)))
    return std::nullopt;
  std::optional<ResumePoint> p =
      resume_from_checkpoint(opt, model, optimizer, comm, global_batch, own_params, tp, sync);
  optimizer.release_state();  // filled or not, the fill targets are done with
  MT_LOG(Info, Ckpt, "checkpoint.resume = \"{}\": {}", opt.resume,
         p ? fmt::format("resumed from {} at step {}", p->dir, p->step) : std::string("nothing to resume"));
  return p;
}

TrainingCheckpointer::TrainingCheckpointer(const CheckpointOptions& opt, comm::Communicator* comm,
                                           nlohmann::json config, ckpt::MeshShape mesh,
                                           int64_t global_batch, const ModelParallelCheckpoint* tp,
                                           int64_t start_step)
    : every_(opt.every), config_(std::move(config)), mesh_(mesh), global_batch_(global_batch),
      tp_(tp), memory_every_(opt.memory_every), comm_(comm && comm->valid() ? comm : nullptr) {
  if (every_ > 0) writer_ = make_writer(opt, opt.dir, false);
  if (memory_every_ > 0) {
    MT_CHECK(!opt.dir.empty(), "checkpoint.memory_every = {} needs a checkpoint.dir (the copies "
             "are named after it, and the disk is the fallback)", memory_every_);
    memory_store_ = ckpt::memory_store(opt.memory_dir, opt.dir);
    const std::string node_root = ckpt::memory_node_root(memory_store_, comm_ ? comm_->node_id() : 0);
    // Every rank checks (before any collective of the writer), so a bad
    // directory fails every rank alike with the setting named.
    std::error_code ec;
    fs::create_directories(node_root, ec);
    if (ec || access(node_root.c_str(), W_OK) != 0)
      fail("checkpoint.memory_dir = \"{}\": cannot keep in-memory checkpoints in {} ({}); give a "
           "writable directory in node-local memory, such as /dev/shm", opt.memory_dir, node_root,
           ec ? ec.message() : std::string("not writable"));
    ckpt::clear_memory_store(comm_, memory_store_, start_step);
    CheckpointOptions mem = opt;
    mem.keep_last = 2;  // the newest complete copy while the next one is written
    mem.milestone_every = 0;
    memory_writer_ = make_writer(mem, node_root, true);
  }
}

std::unique_ptr<ckpt::CheckpointWriter> TrainingCheckpointer::make_writer(const CheckpointOptions& opt,
                                                                          const std::string& root,
                                                                          bool buddy_copies) {
  MT_CHECK(!opt.dir.empty(), "checkpoint.every = {} needs a checkpoint.dir", every_);
  ckpt::WriterOptions wo;
  wo.root = root;
  wo.async = opt.async;
  wo.snapshot_in_background = opt.async;
  wo.snapshot_delay_s_for_testing = opt.snapshot_delay_s_for_testing;
  wo.on_stage_for_testing = opt.on_save_stage_for_testing;
  // Test hook for whole training runs: MESHTRAIN_TEST_SNAPSHOT_DELAY_MS.
  if (const char* d = std::getenv("MESHTRAIN_TEST_SNAPSHOT_DELAY_MS"); d && *d)
    wo.snapshot_delay_s_for_testing = std::atof(d) / 1e3;
  wo.keep_last = opt.keep_last;
  wo.milestone_every = opt.milestone_every;
  wo.buddy_copies = buddy_copies;
  return std::make_unique<ckpt::CheckpointWriter>(wo, comm_);
}

double TrainingCheckpointer::save(int64_t step, const Model& model, Optimizer& optimizer,
                                  data::LoaderPosition next,
                                  std::optional<ckpt::ElemRange> own_params,
                                  const nlohmann::json& loss_scaler,
                                  parallel::GradientSync* sync) {
  MT_CHECK(writer_ || memory_writer_, "save() without checkpoint.every or checkpoint.memory_every");
  const double t0 = now_s();
  ckpt::SaveRequest req;
  if (tp_) {
    req = logical_request(step, model, optimizer, own_params);
  } else {
    req = ckpt::model_save_request(step, model, &optimizer);
  }
  if (own_params && !tp_) {
    for (ckpt::SaveBuffer& b : req.buffers) {
      if (b.name != ckpt::kParams) continue;
      b.held = *own_params;
      b.data = model.param_buffer().data<float>() + own_params->begin;
    }
  }
  req.data_position = next;
  req.loss_scaler = loss_scaler;
  // No trainer RNG carries across steps (samples are seeded by step); the blob
  // records what a resume needs to judge the data position.
  req.rng = {{"global_batch", global_batch_}};
  if (sync && !tp_) add_sync_state(req, *sync, optimizer);
  req.config = config_;
  req.mesh = mesh_;
  req.lr_step = step;
  // A fresh run (checkpoint.resume = never) may rewrite a step an earlier run
  // saved: its old index goes first, so the directory reads as torn, never as
  // complete with a mix of old and new shards. Rank 0 writes the index last.
  // (The memory tier's later steps were cleared at the start.)
  if (writer_ && disk_due(step)) {
    if (writer_->rank() == 0)
      fs::remove(fs::path(ckpt::step_dir(writer_->options().root, step)) / ckpt::kIndexFileName);
    writer_->save(req);
  }
  if (memory_due(step)) memory_writer_->save(req);
  return now_s() - t0;
}

ckpt::SaveRequest TrainingCheckpointer::logical_request(int64_t step, const Model& model, Optimizer& optimizer,
                                                        std::optional<ckpt::ElemRange> own_params) {
  // The previous save's snapshots read blocks_: they must be taken first.
  wait_for_snapshot();
  const ckpt::ElemRange p = own_params.value_or(ckpt::ElemRange{0, model.param_buffer().numel()});
  const ckpt::ElemRange o{optimizer.begin(), optimizer.end()};
  const std::vector<OptimizerState> states = optimizer.state();
  blocks_.resize(1 + states.size());
  blocks_[0] = tp_->to_logical_block(model.param_buffer().data<float>() + p.begin, p);
  for (size_t i = 0; i < states.size(); ++i)
    blocks_[i + 1] = tp_->to_logical_block(states[i].tensor->data<float>(), o);
  const int64_t n = tp_->logical_numel();
  const ckpt::ElemRange block = tp_->block();
  ckpt::SaveRequest r;
  r.step = step;
  r.model = model.spec().to_json();  // a shard describes the whole model
  r.tensors = ckpt::model_tensor_entries(tp_->logical_layout());
  r.buffers.push_back({ckpt::kParams, DType::F32, n, blocks_[0].data(), block});
  for (size_t i = 0; i < states.size(); ++i)
    r.buffers.push_back({states[i].name, DType::F32, n, blocks_[i + 1].data(), block});
  r.optimizer_steps = optimizer.steps_taken();
  r.optimizer = ckpt::optimizer_record(optimizer, 0, n);
  return r;
}

void TrainingCheckpointer::add_sync_state(ckpt::SaveRequest& req, parallel::GradientSync& sync,
                                          Optimizer& optimizer) {
  const int rank = comm_ ? comm_->rank() : 0, world = comm_ ? comm_->size() : 1;
  if (sync.optimizer_state_per_rank())
    for (ckpt::SaveBuffer& b : req.buffers)
      if (is_optimizer_state(optimizer, b.name))
        b = ckpt::per_rank_save_buffer(b.name, b.data, b.held.count(), rank, world);
  // The previous save's snapshots read sync_blocks_: they must be taken first.
  wait_for_snapshot();
  const parallel::SyncState state = sync.checkpoint_state();
  sync_blocks_.resize(state.tensors.size());
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    const parallel::SyncStateTensor& t = state.tensors[i];
    const float* src = t.tensor->data<float>();
    const int64_t n = t.tensor->numel();
    sync_blocks_[i].assign(src, src + n);
    req.buffers.push_back(t.per_rank ? ckpt::per_rank_save_buffer(t.name, sync_blocks_[i].data(), n, rank, world)
                                     : ckpt::SaveBuffer{t.name, DType::F32, n, sync_blocks_[i].data(), {0, n}});
  }
  req.rng["sync"] = state.counters;
}

double TrainingCheckpointer::wait_for_snapshot() {
  double waited = writer_ ? writer_->wait_for_snapshot() : 0.0;
  if (memory_writer_) waited += memory_writer_->wait_for_snapshot();
  return waited;
}

void TrainingCheckpointer::wait() {
  if (writer_) writer_->wait();
  if (memory_writer_) memory_writer_->wait();
}

void TrainingCheckpointer::finish() {
  wait();
  if (!memory_writer_) return;
  // The node's copies as they stand at the end (the memory report's row).
  const fs::path root = ckpt::memory_node_root(memory_store_, comm_ ? comm_->node_id() : 0);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) memory_copies_bytes_ += static_cast<int64_t>(it->file_size(ec));
  ckpt::clear_memory_store(comm_, memory_store_);
}

}  // namespace meshtrain
