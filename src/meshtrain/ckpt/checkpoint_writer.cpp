#include "meshtrain/core/debug_log.h"
#include "meshtrain/ckpt/checkpoint_writer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include <signal.h>
#include <unistd.h>

#include "meshtrain/ckpt/buddy_copies.h"
#include "meshtrain/ckpt/shard_file.h"
#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/launch/heartbeat.h"

namespace meshtrain::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Each rank's entry in the allgather after its shard: written (0/1), file
// bytes, file CRC32C, size of its state blob.
constexpr size_t kGathered = 4;
// Snapshots in host memory at once: one being written, one waiting. A third
// save waits for the oldest, bounding memory at two copies of the shard.
constexpr int kMaxInFlight = 2;
// Below this, one thread copies; above, OpenMP threads split the copy (the
// snapshot is the only part of a save the training loop waits for).
constexpr size_t kParallelCopyBytes = 4u << 20;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// parallel = false on the snapshot thread: there the copy overlaps the
// training step, whose threads already use every core.
void copy_bytes(char* dst, const char* src, size_t n, bool parallel) {
  if (!parallel || n < kParallelCopyBytes) {
    std::memcpy(dst, src, n);
    return;
  }
  const size_t chunk = 1u << 20;
  const int64_t chunks = static_cast<int64_t>((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t off = static_cast<size_t>(c) * chunk;
    std::memcpy(dst + off, src + off, std::min(chunk, n - off));
  }
}

// Test hook MESHTRAIN_TEST_KILL_IN_SAVE="RANK:STEP": on the first attempt of
// a job (launch/heartbeat.h: restart_count() == 0), rank RANK sends itself
// SIGKILL after writing its shard file of step STEP and before the ranks
// agree and the index is written: a real crash in the middle of a save.
void maybe_die_in_save(int rank, int64_t step) {
  const char* k = std::getenv("MESHTRAIN_TEST_KILL_IN_SAVE");
  long long r = -1, s = -1;
  if (!k || std::sscanf(k, "%lld:%lld", &r, &s) != 2 || r != rank || s != step) return;
  if (launch::restart_count() != 0) return;
  std::fprintf(stderr, "MESHTRAIN_TEST_KILL_IN_SAVE: rank %d sends itself SIGKILL after its shard "
               "of step %lld\n", rank, s);
  std::fflush(nullptr);
  ::kill(::getpid(), SIGKILL);
}

// A save killed mid-write leaves "<shard>.tmp.<pid>"; the next save of the
// same shard removes it. Rank 0 also removes the shard files a job of another
// world size left in the same step directory (a restart on fewer ranks that
// saves a step again, its old index already removed): the new index will not
// list them.
void remove_stale_files(const std::string& dir, int rank, int world) {
  std::error_code ec;
  const std::string mine = shard_file_name(rank, world);
  const std::string tmp_prefix = mine + ".tmp.";
  const std::string world_suffix = fmt::format("_of_{}.safetensors", world);
  // Never touch the files of a checkpoint that is still complete.
  const bool torn = !fs::exists(fs::path(dir) / kIndexFileName, ec);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool stale_tmp = name.rfind(tmp_prefix, 0) == 0 && name != tmp_prefix + std::to_string(::getpid());
    const bool other_world = rank == 0 && torn && name.rfind("shard_", 0) == 0 &&
                             name.find(world_suffix) == std::string::npos;
    if (stale_tmp || other_world) fs::remove(e.path(), ec);
  }
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json rank_state_json(const SaveRequest& r, int rank) {
  return {{"rank", rank},
          {"data_position", {{"epoch", r.data_position.epoch}, {"batch", r.data_position.batch}}},
          {"rng", r.rng}};
}

RankState rank_state_from(const json& j) {
  RankState s;
  s.rank = j.at("rank").get<int>();
  s.data_position = {j.at("data_position").at("epoch").get<int64_t>(),
                     j.at("data_position").at("batch").get<int64_t>()};
  s.rng = j.value("rng", json());
  return s;
}

}  // namespace

CheckpointIndex index_skeleton(const SaveRequest& r, int world_size) {
  CheckpointIndex x;
  x.step = r.step;
  x.world_size = world_size;
  x.mesh = r.mesh;
  x.model = r.model;
  x.config = r.config;
  for (const auto& b : r.buffers) x.buffers.push_back({b.name, b.dtype, b.numel});
  x.tensors = r.tensors;
  x.optimizer_steps = r.optimizer_steps;
  x.optimizer = r.optimizer;
  x.lr_step = r.lr_step;
  x.loss_scaler = r.loss_scaler;
  x.created_utc = utc_now();
  return x;
}

// Host memory for one snapshot; grows but never zero-fills (every byte is
// overwritten by the copy, and zeroing would double the caller's stall).
// (2 MiB huge pages were tried: the first save's page faults turned into
// compaction stalls several times longer; plain pages it is.)
struct SnapshotBuffer {
  std::unique_ptr<char[]> bytes;
  size_t capacity = 0;
  char* reserve(size_t n) {
    if (n > capacity) {
      bytes.reset(new char[n]);
      capacity = n;
    }
    return bytes.get();
  }
};

struct CheckpointWriter::Impl {
  WriterOptions opt;
  comm::Communicator comm;  // private: only save collectives run on it
  bool have_comm = false;
  int rank = 0, world = 1;
  NodeMap nodes;  // buddy_copies only

  struct Job {
    SaveRequest meta;  // buffers[].data point into `snapshot` once it is taken
    std::vector<ShardSlice> slices;
    std::shared_ptr<SnapshotBuffer> snapshot;
    // Until the snapshot is taken: where each slice comes from and where it
    // goes in the snapshot buffer.
    std::vector<const char*> sources;
    std::vector<Device> devices;  // where each source lives
    std::vector<size_t> offsets, sizes;
    size_t total = 0;
    double stall_s = 0, copy_s = 0;
  };

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> copy_queue;  // snapshot_in_background: saves whose copy is not taken yet
  bool copying = false;        // the snapshot thread is inside a copy
  int64_t newest_copy_step = 0;  // the step of the latest save queued for a copy
  std::deque<Job> queue;       // snapshots ready to write
  int in_flight = 0;
  std::vector<std::shared_ptr<SnapshotBuffer>> pool;  // free snapshot buffers
  std::exception_ptr error;
  bool stopping = false;
  std::vector<SaveStats> done;
  std::thread worker;
  std::thread snapshotter;  // snapshot_in_background only

  void rethrow_error_locked(std::unique_lock<std::mutex>& lock) {
    if (!error) return;
    std::exception_ptr e = error;
    error = nullptr;
    lock.unlock();
    std::rethrow_exception(e);
  }

  // Checks the ranges and plans the job. copy = false (synchronous saves):
  // the slices point at the caller's buffers, which stay untouched until
  // save() returns; otherwise take_snapshot() must copy them.
  Job plan(const SaveRequest& r, bool copy);
  void take_snapshot(Job& job, bool parallel);
  SaveStats write(const Job& job);
  void write_index_rank0(const Job& job, const std::string& dir,
                         const std::vector<int64_t>& gathered,
                         const std::vector<std::string>& rank_blobs);
  // Buddy copies: the shard to the buddy's node, every rank's state blob to
  // rank 0 (whose node does not hold every shard file); "" or what failed.
  std::string copy_to_buddies(const std::string& dir, const std::vector<int64_t>& gathered,
                              const std::string& blob, std::vector<std::string>& rank_blobs);
  void run_worker();
  void run_snapshotter();
  // A job that will not be written (its copy failed): frees its slot.
  void drop_locked(Job& job);
  void stage(SaveStage s, int64_t step) const {
    if (opt.on_stage_for_testing) opt.on_stage_for_testing(s, step);
  }
};

CheckpointWriter::Impl::Job CheckpointWriter::Impl::plan(const SaveRequest& r, bool copy) {
  Job job;
  job.meta = r;
  for (size_t i = 0; i < r.buffers.size(); ++i) {
    const auto& b = r.buffers[i];
    const ElemRange want = shard_range(b.numel, world, rank);
    MT_CHECK(b.held.begin <= want.begin && want.end <= b.held.end && (want.count() == 0 || b.data),
             "checkpoint step {}: rank {} must hold elements [{}, {}) of buffer '{}' but holds [{}, {})",
             r.step, rank, want.begin, want.end, b.name, b.held.begin, b.held.end);
    const size_t es = dtype_size(b.dtype);
    const char* src = static_cast<const char*>(b.data) + (want.begin - b.held.begin) * es;
    job.sources.push_back(src);
    job.devices.push_back(b.device);
    job.offsets.push_back(job.total);
    job.sizes.push_back(static_cast<size_t>(want.count()) * es);
    job.total += job.sizes.back();
    job.slices.push_back({b.name, b.dtype, src, want});
    job.meta.buffers[i].data = copy ? nullptr : src;
    job.meta.buffers[i].held = want;
  }
  return job;
}

void CheckpointWriter::Impl::take_snapshot(Job& job, bool parallel) {
  stage(SaveStage::CopyBegin, job.meta.step);
  const double t0 = now_s();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!pool.empty()) {
      job.snapshot = pool.back();
      pool.pop_back();
    }
  }
  if (!job.snapshot) job.snapshot = std::make_shared<SnapshotBuffer>();
  char* base = job.snapshot->reserve(job.total);
  for (size_t i = 0; i < job.slices.size(); ++i) {
    char* dst = base + job.offsets[i];
    const Device dev = job.devices[i];
    if (job.sizes[i] && dev.is_cpu()) copy_bytes(dst, job.sources[i], job.sizes[i], parallel);
    else if (job.sizes[i])  // through the device's runtime (synchronous into pageable memory)
      runtime_for(dev).copy(dst, Device::cpu(), job.sources[i], dev, job.sizes[i], default_stream(dev));
    job.slices[i].data = dst;
    job.meta.buffers[i].data = dst;
  }
  job.sources.clear();  // the caller's buffers are free to change from here on
  job.devices.clear();
  job.copy_s = now_s() - t0;
  stage(SaveStage::CopyDone, job.meta.step);
}

void CheckpointWriter::Impl::drop_locked(Job& job) {
  if (job.snapshot) pool.push_back(std::move(job.snapshot));
  --in_flight;
  cv.notify_all();
}

std::string CheckpointWriter::Impl::copy_to_buddies(const std::string& dir,
                                                    const std::vector<int64_t>& gathered,
                                                    const std::string& blob,
                                                    std::vector<std::string>& rank_blobs) {
  if (!have_comm) return "";
  std::vector<int64_t> bytes, blob_sizes;
  for (int r = 0; r < world; ++r) {
    bytes.push_back(gathered[kGathered * r + 1]);
    blob_sizes.push_back(gathered[kGathered * r + 3]);
  }
  try {
    exchange_buddy_shards(comm, nodes, dir, bytes);
    rank_blobs = gather_rank_blobs(comm, blob, blob_sizes);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void CheckpointWriter::Impl::write_index_rank0(const Job& job, const std::string& dir,
                                               const std::vector<int64_t>& gathered,
                                               const std::vector<std::string>& rank_blobs) {
  CheckpointIndex index = index_skeleton(job.meta, world);
  for (int r = 0; r < world; ++r) {
    FileEntry f;
    f.path = shard_file_name(r, world);
    f.rank = r;
    f.bytes = static_cast<uint64_t>(gathered[kGathered * r + 1]);
    f.crc32c = static_cast<uint32_t>(gathered[kGathered * r + 2]);
    for (const auto& b : job.meta.buffers) f.ranges[b.name] = shard_range(b.numel, world, r);
    index.files.push_back(f);
    if (r == rank) {
      index.ranks.push_back(rank_state_from(rank_state_json(job.meta, r)));
    } else if (!rank_blobs.empty()) {
      index.ranks.push_back(rank_state_from(json::parse(rank_blobs[r])));
    } else {
      // The other ranks' own state travels in their shard files' metadata.
      const std::string path = (fs::path(dir) / f.path).string();
      auto meta = SafetensorsFile::open(path).metadata();
      auto it = meta.find("rank_state");
      MT_CHECK(it != meta.end(), "shard file {}: no rank_state metadata", path);
      index.ranks.push_back(rank_state_from(json::parse(it->second)));
    }
  }
  if (opt.skip_index_for_testing) return;
  write_index(dir, index);
  write_latest_pointer(opt.root, job.meta.step);
  // A node root of the memory tier holds only some shards: replicate_index prunes it.
  if (!opt.buddy_copies) apply_retention(opt.root, opt.keep_last, opt.milestone_every);
}

SaveStats CheckpointWriter::Impl::write(const Job& job) {
  stage(SaveStage::WriteBegin, job.meta.step);
  const double t0 = now_s();
  const std::string dir = step_dir(opt.root, job.meta.step);
  std::string err;
  ShardFileResult res;
  const std::string blob = rank_state_json(job.meta, rank).dump();
  try {
    fs::create_directories(dir);
    std::map<std::string, std::string> meta{
        {"format", "meshtrain-checkpoint-shard"},
        {"step", std::to_string(job.meta.step)},
        {"rank", std::to_string(rank)},
        {"world_size", std::to_string(world)},
        {"rank_state", blob}};
    remove_stale_files(dir, rank, world);
    res = write_shard_file((fs::path(dir) / shard_file_name(rank, world)).string(), job.slices, meta);
  } catch (const std::exception& e) {
    err = e.what();
  }
  maybe_die_in_save(rank, job.meta.step);
  MT_LOG(Info, Ckpt, "step {}: shard {} of {} written to {}: {} bytes in {:.3f} s{}", job.meta.step,
         rank, world, dir, res.bytes, now_s() - t0, err.empty() ? "" : " FAILED: " + err);
  // Every rank learns every rank's outcome, size and checksum; this is also
  // the barrier after which rank 0 may write the index.
  std::vector<int64_t> mine{err.empty() ? 1 : 0, static_cast<int64_t>(res.bytes),
                            static_cast<int64_t>(res.crc32c), static_cast<int64_t>(blob.size())};
  std::vector<int64_t> all(kGathered * static_cast<size_t>(world));
  if (have_comm)
    comm.allgather(mine.data(), all.data(), all.size(), DType::I64).wait();
  else
    all = mine;
  std::string failed;
  for (int r = 0; r < world; ++r)
    if (all[kGathered * r] == 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (!failed.empty())
    fail("checkpoint {}: rank(s) {} could not write their shard file{}", dir, failed,
         err.empty() ? "" : " (this rank: " + err + ")");
  std::vector<std::string> rank_blobs;
  if (opt.buddy_copies) {
    const std::string buddy_err = copy_to_buddies(dir, all, blob, rank_blobs);
    int64_t copied = buddy_err.empty() ? 1 : 0;
    if (have_comm) copied = comm.allreduce_scalar(copied, comm::ReduceOp::Min);
    if (!copied)
      fail("checkpoint {}: buddy copies failed{}", dir,
           buddy_err.empty() ? " on another rank" : ": " + buddy_err);
  }

  std::string index_err;
  if (rank == 0) {
    try {
      write_index_rank0(job, dir, all, rank_blobs);
    } catch (const std::exception& e) {
      index_err = e.what();
    }
  }
  int64_t ok = index_err.empty() ? 1 : 0;
  if (have_comm) ok = comm.allreduce_scalar(ok, comm::ReduceOp::Min);
  if (!ok)
    fail("checkpoint {}: {}", dir, rank == 0 ? index_err : "rank 0 could not write the index");
  if (opt.buddy_copies && !opt.skip_index_for_testing) {
    if (have_comm) replicate_index(comm, nodes, opt.root, job.meta.step, opt.keep_last);
    else prune_node_root(opt.root, opt.keep_last);
  }

  SaveStats s;
  s.step = job.meta.step;
  s.stall_s = job.stall_s;
  s.copy_s = job.copy_s;
  s.write_s = now_s() - t0;
  s.bytes = res.bytes;
  s.dir = dir;
  stage(SaveStage::WriteDone, job.meta.step);
  return s;
}

void CheckpointWriter::Impl::run_worker() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      job = std::move(queue.front());
      queue.pop_front();
    }
    std::exception_ptr e;
    SaveStats s;
    try {
      s = write(job);
    } catch (...) {
      e = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu);
    if (e && !error) error = e;
    if (!e) done.push_back(s);
    pool.push_back(std::move(job.snapshot));
    --in_flight;
    cv.notify_all();
  }
}

// Takes the queued snapshots in order, then hands each to the writer thread.
// A copy stays on this thread (never waits behind a write), so the caller's
// wait_for_snapshot() waits for copies only.
void CheckpointWriter::Impl::run_snapshotter() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stopping || !copy_queue.empty(); });
      if (copy_queue.empty()) return;
      job = std::move(copy_queue.front());
      copy_queue.pop_front();
      copying = true;
    }
    if (opt.snapshot_delay_s_for_testing > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(opt.snapshot_delay_s_for_testing));
    std::exception_ptr e;
    try {
      take_snapshot(job, /*parallel=*/false);
    } catch (...) {
      e = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu);
    copying = false;
    if (e) {
      if (!error) error = e;
      drop_locked(job);
    } else {
      queue.push_back(std::move(job));
    }
    cv.notify_all();
  }
}

CheckpointWriter::CheckpointWriter(WriterOptions options, comm::Communicator* comm)
    : impl_(std::make_unique<Impl>()) {
  MT_CHECK(!options.root.empty(), "checkpoint writer: no checkpoint directory given");
  impl_->opt = std::move(options);
  if (comm && comm->valid()) {
    impl_->comm = comm->split(0, comm->rank());
    impl_->have_comm = true;
    impl_->rank = impl_->comm.rank();
    impl_->world = impl_->comm.size();
  }
  if (impl_->opt.buddy_copies)
    impl_->nodes = impl_->have_comm ? gather_node_map(impl_->comm) : NodeMap{{0}};
  if (impl_->rank == 0) fs::create_directories(impl_->opt.root);
  MT_CHECK(impl_->opt.async || !impl_->opt.snapshot_in_background,
           "checkpoint writer: snapshot_in_background needs async saves");
  if (impl_->opt.async) impl_->worker = std::thread([this] { impl_->run_worker(); });
  if (impl_->opt.snapshot_in_background)
    impl_->snapshotter = std::thread([this] { impl_->run_snapshotter(); });
}

CheckpointWriter::~CheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: checkpoint save failed: %s\n", e.what());
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->snapshotter.joinable()) impl_->snapshotter.join();
  if (impl_->worker.joinable()) impl_->worker.join();
}

void CheckpointWriter::save(const SaveRequest& request) {
  Impl& m = *impl_;
  const double t0 = now_s();
  if (!m.opt.async) {
    // Host buffers are written in place (the caller waits anyway); a
    // device's are copied to host memory first.
    const bool on_device = std::any_of(request.buffers.begin(), request.buffers.end(),
                                       [](const SaveBuffer& b) { return !b.device.is_cpu(); });
    Impl::Job job = m.plan(request, /*copy=*/on_device);
    if (on_device) m.take_snapshot(job, /*parallel=*/true);
    job.stall_s = now_s() - t0;
    SaveStats s = m.write(job);
    s.stall_s = now_s() - t0;  // synchronous: the caller waited for everything
    std::lock_guard<std::mutex> lock(m.mu);
    if (job.snapshot) m.pool.push_back(std::move(job.snapshot));
    m.done.push_back(s);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(m.mu);
    m.rethrow_error_locked(lock);
    m.cv.wait(lock, [&] { return m.in_flight < kMaxInFlight || m.error; });
    m.rethrow_error_locked(lock);
    ++m.in_flight;  // reserves a snapshot slot
  }
  Impl::Job job;
  try {
    job = m.plan(request, /*copy=*/true);
    if (!m.opt.snapshot_in_background) m.take_snapshot(job, /*parallel=*/true);
  } catch (...) {
    std::lock_guard<std::mutex> lock(m.mu);
    m.drop_locked(job);
    throw;
  }
  job.stall_s = now_s() - t0;
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.opt.snapshot_in_background) m.newest_copy_step = request.step;
  (m.opt.snapshot_in_background ? m.copy_queue : m.queue).push_back(std::move(job));
  m.cv.notify_all();
}

double CheckpointWriter::wait_for_snapshot() {
  Impl& m = *impl_;
  const double t0 = now_s();
  std::unique_lock<std::mutex> lock(m.mu);
  if (m.copy_queue.empty() && !m.copying) return 0;
  if (m.opt.on_stage_for_testing) {
    const int64_t step = m.newest_copy_step;
    lock.unlock();
    m.stage(SaveStage::SnapshotWait, step);
    lock.lock();
  }
  m.cv.wait(lock, [&] { return m.copy_queue.empty() && !m.copying; });
  return now_s() - t0;
}

void CheckpointWriter::wait() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  m.cv.wait(lock, [&] { return m.in_flight == 0; });
  m.rethrow_error_locked(lock);
}

std::vector<SaveStats> CheckpointWriter::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->done;
}
const WriterOptions& CheckpointWriter::options() const { return impl_->opt; }
int CheckpointWriter::rank() const { return impl_->rank; }
int CheckpointWriter::world_size() const { return impl_->world; }

}  // namespace meshtrain::ckpt
