// `meshtrain bench ckpt`: the checkpoint figures of docs/PERFORMANCE.md, each
// next to its baseline measured in the same run (medians of interleaved
// repetitions):
//   save throughput  a synchronous checkpoint save of S bytes (params + AdamW
//                    moments, one rank) vs the disk's sequential write
//                    bandwidth: S bytes in 8 MiB writes + fsync, in the same
//                    directory (target >= 70%);
//   stall            what the training loop waits for in an asynchronous save
//                    vs a synchronous save (target <= 10%): save() itself (the
//                    snapshot is copied on a background thread) plus the wait
//                    of the next optimizer update for that copy after a
//                    simulated step of --step-ms; also the older mode that
//                    copies inside save();
//   recovery         a 2-rank training job whose rank 1 is SIGKILLed: seconds
//                    from the launcher seeing the death to every rank training
//                    again (restart log), vs the checkpoint's load time
//                    (target <= 5 s + load);
//   buddy recovery   the same kill in a 2-rank job on 2 emulated nodes with a
//                    checkpoint of ~250 MB (char-6L at 12 layers): resumed
//                    from the buddies' in-memory copies (checkpoint.memory_every)
//                    vs from the disk checkpoint with its files dropped from
//                    the page cache before the restart, as after a lost node
//                    (target: memory >= 3x faster, failure to training again).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/model_checkpoint.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/ckpt/resume.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "bench_clock.h"

namespace meshtrain::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct BenchCkptArgs {
  double mb = 256;          // checkpoint size
  int reps = 3;
  std::string dir = ".";    // where to write (the filesystem checkpoints go to)
  bool recovery = true;
  bool buddy = true;
  int buddy_layers = 12;    // char-6L with this many layers: the buddy recovery's model
  std::string preset = "char-6L";
  double step_ms = 200;     // the simulated step between a save and the next update
  bool json = false;
};

// The baseline: `bytes` written sequentially in 8 MiB writes, then fsync,
// like `dd bs=8M conv=fsync`. Seconds.
double disk_write_s(const std::string& path, const std::vector<char>& block, size_t bytes) {
  const double t0 = now_s();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_CHECK(fd >= 0, "cannot create {}", path);
  size_t left = bytes;
  while (left > 0) {
    const size_t n = std::min(left, block.size());
    const ssize_t w = ::write(fd, block.data(), n);
    MT_CHECK(w > 0, "cannot write {}", path);
    left -= static_cast<size_t>(w);
  }
  MT_CHECK(::fsync(fd) == 0 && ::close(fd) == 0, "cannot fsync {}", path);
  const double t = now_s() - t0;
  fs::remove(path);
  return t;
}

// Seconds from the launcher seeing the death to every rank training again.
double training_again_s(const std::string& restart_log) {
  double s = -1;
  std::ifstream log(restart_log);
  for (std::string line; std::getline(log, line);) {
    const json j = json::parse(line);
    if (j.value("event", "") == "training_again") s = j.at("seconds_after_failure").get<double>();
  }
  MT_CHECK(s >= 0, "bench ckpt: no training_again record in {}", restart_log);
  return s;
}

// This program's path (the recovery runs start it again).
std::string self_path() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  MT_CHECK(len > 0, "cannot find this program's path");
  return std::string(self, static_cast<size_t>(len));
}

// Token shards for the recovery runs in <root>/data (made once).
std::string synth_data(const std::string& bin, const std::string& root) {
  const std::string data = root + "/data";
  if (!fs::exists(data))
    MT_CHECK(std::system((bin + " data synth --out " + data + " --tokens 200000 >" + root + "/log 2>&1").c_str()) == 0,
             "bench ckpt: data synth failed (see {}/log)", root);
  return data;
}

// Kills rank 1 of a short 2-rank training run after its step-8 checkpoint
// and reads the recovery time from the restart log; then times loading that
// checkpoint in this process. Returns {recovery_s, load_s}.
std::pair<double, double> measure_recovery(const BenchCkptArgs& a, const std::string& root) {
  const std::string bin = self_path(), data = synth_data(bin, root), run = root + "/run";
  const std::string quiet = " >" + root + "/log 2>&1";
  const std::string cmd = fmt::format(
      "MESHTRAIN_TEST_KILL_AT_STEP=1:10 {} train --nproc 2 --max-restarts 1 --set model.preset={} "
      "--set model.vocab_size=256 --set data.train='{}/train_*.bin' --set train.steps=12 "
      "--set train.micro_batch=2 --set train.eval_every=0 --set checkpoint.every=4 "
      "--set checkpoint.async=false --set telemetry.dir={} {}", bin, a.preset, data, run, quiet);
  MT_CHECK(std::system(cmd.c_str()) == 0, "bench ckpt: the recovery run failed (see {}/log)", root);
  const double recovery = training_again_s(run + "/restarts.jsonl");
  // Load time of the checkpoint the restart resumed from (step 8), as one rank.
  const std::string step8 = ckpt::step_dir(run + "/ckpt", 8);
  const ckpt::CheckpointIndex index = ckpt::read_index(step8);
  const std::unique_ptr<Model> model = model_spec_from_json(index.model, step8)->build();
  const int64_t P = model->layout().numel;
  AdamW adam(0, P, {{0, P, true}}, AdamWConfig{});  // the trainer's default optimizer
  const double t0 = now_s();
  ckpt::load_checkpoint(step8, ckpt::model_fill_requests(*model, &adam));
  return {recovery, now_s() - t0};
}

// Rank 1 of a 2-rank job on 2 emulated nodes killed after step 6, the job
// restarted (resuming step 4), interleaved: from the in-memory buddy copies,
// and from disk with every checkpoint file dropped from the page cache
// before the restart reads it. Returns the median {memory_s, disk_s} and the
// checkpoint's size in bytes.
std::tuple<double, double, uint64_t> measure_buddy_recovery(const BenchCkptArgs& a,
                                                            const std::string& root,
                                                            const std::string& bin) {
  const std::string data = root + "/data";
  std::vector<double> memory_s, disk_s;
  uint64_t bytes = 0;
  for (int r = 0; r < a.reps; ++r)
    for (const bool memory : {true, false}) {
      const std::string run = fmt::format("{}/buddy_{}_{}", root, memory ? "memory" : "disk", r);
      const std::string cmd = fmt::format(
          "MESHTRAIN_COMM_NODE_SIZE=1 MESHTRAIN_TEST_KILL_AT_STEP=1:6 {0} launch -n 2 --max-restarts 1 "
          "--restart-log {1}/restarts.jsonl -- bash -c 'if [ \"$MESHTRAIN_RESTART_COUNT\" != 0 ]; then "
          "for f in \"$1\"/step_*/*; do dd if=\"$f\" iflag=nocache count=0 status=none; done; fi; "
          "exec \"${{@:2}}\"' _ {1}/ckpt {0} train --set model.preset=char-6L --set model.n_layer={2} "
          "--set model.vocab_size=256 --set data.train='{3}/train_*.bin' --set train.steps=8 "
          "--set train.micro_batch=1 --set train.eval_every=0 --set checkpoint.every=4 "
          "--set checkpoint.async=false --set checkpoint.dir={1}/ckpt --set telemetry.dir={1} {4} "
          ">{1}.log 2>&1", bin, run, a.buddy_layers, data,
          memory ? "--set checkpoint.memory_every=4 --set checkpoint.memory_dir=/dev/shm" : "");
      MT_CHECK(std::system(cmd.c_str()) == 0, "bench ckpt: the buddy recovery run failed (see {}.log)", run);
      (memory ? memory_s : disk_s).push_back(training_again_s(run + "/restarts.jsonl"));
      bytes = 0;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(ckpt::step_dir(run + "/ckpt", 4), ec))
        bytes += e.file_size();
      fs::remove_all(run, ec);
    }
  return {median_of(memory_s), median_of(disk_s), bytes};
}

void run_bench_ckpt(const BenchCkptArgs& a) {
  MT_CHECK(a.mb > 0 && a.reps >= 1, "--mb and --reps must be positive");
  fs::create_directories(a.dir);
  std::string tmpl = (fs::path(a.dir) / "meshtrain_bench_ckpt_XXXXXX").string();
  MT_CHECK(mkdtemp(tmpl.data()), "cannot create a directory in {}", a.dir);
  const std::string root = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::error_code ec; fs::remove_all(dir, ec); }
  } cleanup{root};

  // Three f32 buffers (parameters and both moments) of mb/3 each, random so
  // nothing compresses or dedups.
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(a.mb * (1 << 20) / 12));
  std::vector<float> p(n), m(n), v(n);
  Rng rng(7);
  for (auto* b : {&p, &m, &v})
    for (auto& x : *b) x = rng.normal();
  const size_t bytes = static_cast<size_t>(n) * 12;
  ckpt::SaveRequest req;
  req.model = model_preset("tiny")->to_json();
  req.buffers = {{ckpt::kParams, DType::F32, n, p.data(), {0, n}},
                 {ckpt::kExpAvg, DType::F32, n, m.data(), {0, n}},
                 {ckpt::kExpAvgSq, DType::F32, n, v.data(), {0, n}}};
  std::vector<char> block(8u << 20);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(rng.next_u64());

  // Steady state, as in training: one writer of each kind for the whole
  // run, a first (unmeasured) save to allocate its snapshot buffers.
  std::vector<double> disk_s, sync_s, async_stall_s, async_total_s, first_stall_s;
  std::vector<double> inline_stall_s, update_wait_s, copy_s;
  // "async": the training loop's mode (snapshot on the background thread);
  // "inline": async write, snapshot copied inside save() (the older mode).
  auto writer = [&](const std::string& kind) {
    ckpt::WriterOptions o;
    o.root = root + "/" + kind;
    o.async = kind != "sync";
    o.snapshot_in_background = kind == "async";
    o.keep_last = 1;
    return std::make_unique<ckpt::CheckpointWriter>(o, nullptr);
  };
  auto sync_writer = writer("sync"), async_writer = writer("async"), inline_writer = writer("inline");
  int64_t step = 0;
  for (auto* w : {sync_writer.get(), async_writer.get(), inline_writer.get()}) {
    req.step = ++step;
    const double t0 = now_s();
    w->save(req);
    w->wait_for_snapshot();
    first_stall_s.push_back(now_s() - t0);
    w->wait();
  }
  // The next step's data, forward and backward, which leave the saved buffers alone.
  auto simulated_step = [&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(a.step_ms / 1e3));
  };
  for (int r = 0; r < a.reps; ++r) {
    disk_s.push_back(disk_write_s(root + "/dd.bin", block, bytes));
    req.step = ++step;
    double t0 = now_s();
    sync_writer->save(req);
    sync_s.push_back(now_s() - t0);
    req.step = ++step;
    t0 = now_s();
    async_writer->save(req);
    async_stall_s.push_back(now_s() - t0);
    simulated_step();
    update_wait_s.push_back(async_writer->wait_for_snapshot());
    async_writer->wait();
    async_total_s.push_back(now_s() - t0);
    copy_s.push_back(async_writer->stats().back().copy_s);
    req.step = ++step;
    t0 = now_s();
    inline_writer->save(req);
    inline_stall_s.push_back(now_s() - t0);
    inline_writer->wait();
  }
  const double mib = bytes / 1048576.0;
  const double disk_bw = mib / median_of(disk_s), save_bw = mib / median_of(sync_s);
  // What the loop loses to an async save: save() plus the update's wait.
  std::vector<double> loop_s(async_stall_s.size());
  for (size_t i = 0; i < loop_s.size(); ++i) loop_s[i] = async_stall_s[i] + update_wait_s[i];
  const double stall = median_of(loop_s), sync_t = median_of(sync_s);
  std::vector<json> rows;
  rows.push_back({{"figure", "save_throughput"}, {"mib", mib}, {"save_mib_s", save_bw},
                  {"disk_mib_s", disk_bw}, {"ratio", save_bw / disk_bw}, {"target", ">= 0.70"}});
  rows.push_back({{"figure", "async_stall"}, {"async_stall_ms", stall * 1e3},
                  {"save_call_ms", median_of(async_stall_s) * 1e3},
                  {"update_wait_ms", median_of(update_wait_s) * 1e3}, {"step_ms", a.step_ms},
                  {"background_copy_ms", median_of(copy_s) * 1e3},
                  {"sync_save_ms", sync_t * 1e3}, {"async_total_ms", median_of(async_total_s) * 1e3},
                  {"inline_snapshot_stall_ms", median_of(inline_stall_s) * 1e3},
                  {"first_async_stall_ms", first_stall_s[1] * 1e3},
                  {"ratio", stall / sync_t}, {"target", "<= 0.10"}});
  if (!a.json) {
    fmt::print("checkpoint of {:.0f} MiB in {} (median of {} interleaved repetitions)\n", mib, a.dir, a.reps);
    fmt::print("  save throughput  {:8.0f} MiB/s   disk write+fsync {:8.0f} MiB/s   ratio {:5.1f}%  (target >= 70%)\n",
               save_bw, disk_bw, 100 * save_bw / disk_bw);
    fmt::print("  training stall   {:8.2f} ms async   sync save       {:8.1f} ms      ratio {:5.1f}%  (target <= 10%)\n"
               "                   = save() {:.2f} ms + the next update's wait {:.2f} ms after a {:.0f} ms step "
               "(snapshot copy {:.1f} ms on the background thread; whole async save {:.1f} ms)\n"
               "                   snapshot copied inside save() instead: {:.1f} ms ({:.1f}% of sync); "
               "first async save (allocates the snapshot): {:.1f} ms\n",
               stall * 1e3, sync_t * 1e3, 100 * stall / sync_t, median_of(async_stall_s) * 1e3,
               median_of(update_wait_s) * 1e3, a.step_ms, median_of(copy_s) * 1e3,
               median_of(async_total_s) * 1e3, median_of(inline_stall_s) * 1e3,
               100 * median_of(inline_stall_s) / sync_t, first_stall_s[1] * 1e3);
  }
  if (a.recovery) {
    const auto [recovery, load] = measure_recovery(a, root);
    rows.push_back({{"figure", "recovery"}, {"preset", a.preset}, {"training_again_s", recovery},
                    {"checkpoint_load_s", load}, {"target_s", 5 + load}});
    if (!a.json)
      fmt::print("  recovery         {:8.2f} s from a killed rank to 2 ranks training again ({}); "
                 "checkpoint load {:.2f} s; target <= 5 s + load = {:.2f} s\n",
                 recovery, a.preset, load, 5 + load);
  }
  if (a.buddy) {
    const std::string bin = self_path();
    synth_data(bin, root);
    const auto [memory, disk, ckpt_bytes] = measure_buddy_recovery(a, root, bin);
    rows.push_back({{"figure", "buddy_recovery"}, {"checkpoint_mb", ckpt_bytes / 1e6},
                    {"memory_s", memory}, {"disk_cold_s", disk}, {"speedup", disk / memory},
                    {"target", ">= 3"}});
    if (!a.json)
      fmt::print("  buddy recovery   {:8.2f} s from memory (buddy copies)   {:8.2f} s from disk, page "
                 "cache dropped   {:.1f}x  (target >= 3x; {:.0f} MB checkpoint, failure to training again)\n",
                 memory, disk, disk / memory, ckpt_bytes / 1e6);
  }
  if (a.json)
    for (const auto& r : rows) fmt::print("{}\n", r.dump());
}

}  // namespace

void register_bench_ckpt(CLI::App& bench) {
  auto a = std::make_shared<BenchCkptArgs>();
  auto* c = bench.add_subcommand(
      "ckpt", "Checkpoint save throughput vs the disk, async stall vs a sync save, recovery time after a killed rank");
  c->add_option("--mb", a->mb, "Checkpoint size in MiB (params + two AdamW moments)")->capture_default_str();
  c->add_option("--reps", a->reps, "Interleaved repetitions (medians are printed)")->capture_default_str();
  c->add_option("--dir", a->dir, "Directory on the filesystem to measure (a temporary folder is made inside)")
      ->capture_default_str();
  c->add_option("--step-ms", a->step_ms, "Simulated training step between an async save and the next update")
      ->capture_default_str();
  c->add_option("--preset", a->preset, "Model of the recovery run")->capture_default_str();
  c->add_flag("!--no-recovery", a->recovery, "Skip the killed-rank recovery measurement");
  c->add_flag("!--no-buddy", a->buddy, "Skip the buddy-memory vs cold-disk recovery measurement");
  c->add_option("--buddy-layers", a->buddy_layers, "Layers of the char-6L model of the buddy recovery "
                "(12: a ~250 MB checkpoint)")->capture_default_str();
  c->add_flag("--json", a->json, "One JSON object per figure");
  c->callback([a] { run_bench_ckpt(*a); });
}

}  // namespace meshtrain::cli
