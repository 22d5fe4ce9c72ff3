// test-links: mt_telemetry mt_core
// Telemetry: TensorBoard event files read back by an independent reader,
// Chrome traces from two threads, the step-time breakdown adding up, cost and
// MFU arithmetic, straggler naming, and `meshtrain report` on synthetic runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/telemetry/progress.h"
#include "meshtrain/telemetry/report.h"
#include "meshtrain/telemetry/run_summary.h"
#include "meshtrain/telemetry/step_timer.h"
#include "meshtrain/telemetry/tensorboard_writer.h"
#include "meshtrain/telemetry/trace_writer.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace meshtrain;
using namespace meshtrain::telemetry;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("mt_telemetry_{}_{}", name, getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- An independent TFRecord + Event reader: bit-at-a-time CRC32C (not the
// writer's table), and a minimal protobuf decoder.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}
uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (p >= end || shift > 63) throw std::runtime_error("bad varint");
      const uint8_t b = *p++;
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  template <typename T>
  T fixed() {
    if (end - p < static_cast<ptrdiff_t>(sizeof(T))) throw std::runtime_error("short fixed");
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string bytes() {
    const uint64_t n = varint();
    if (static_cast<uint64_t>(end - p) < n) throw std::runtime_error("short bytes");
    std::string s(reinterpret_cast<const char*>(p), n);
    p += n;
    return s;
  }
};

struct ParsedEvent {
  double wall_time = -1;
  int64_t step = -1;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

ParsedEvent parse_event(const std::string& data) {
  ParsedEvent e;
  Reader r{reinterpret_cast<const uint8_t*>(data.data()),
           reinterpret_cast<const uint8_t*>(data.data()) + data.size()};
  while (r.p < r.end) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 1) e.wall_time = r.fixed<double>();
    else if (field == 2 && wire == 0) e.step = static_cast<int64_t>(r.varint());
    else if (field == 3 && wire == 2) e.file_version = r.bytes();
    else if (field == 5 && wire == 2) {
      const std::string summary = r.bytes();
      Reader s{reinterpret_cast<const uint8_t*>(summary.data()),
               reinterpret_cast<const uint8_t*>(summary.data()) + summary.size()};
      while (s.p < s.end) {
        const uint64_t k = s.varint();
        if (k != ((1 << 3) | 2)) throw std::runtime_error("unexpected Summary field");
        const std::string value = s.bytes();
        Reader v{reinterpret_cast<const uint8_t*>(value.data()),
                 reinterpret_cast<const uint8_t*>(value.data()) + value.size()};
        std::string tag;
        float x = NAN;
        while (v.p < v.end) {
          const uint64_t vk = v.varint();
          if (vk == ((1 << 3) | 2)) tag = v.bytes();
          else if (vk == ((2 << 3) | 5)) x = v.fixed<float>();
          else throw std::runtime_error("unexpected Summary.Value field");
        }
        e.values.emplace_back(tag, x);
      }
    } else {
      throw std::runtime_error(fmt::format("unexpected Event field {} wire {}", field, wire));
    }
  }
  return e;
}

std::vector<ParsedEvent> read_event_file(const fs::path& path) {
  const std::string bytes = slurp(path);
  std::vector<ParsedEvent> out;
  size_t off = 0;
  while (off < bytes.size()) {
    EXPECT_GE(bytes.size() - off, 12u) << "truncated record header";
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, bytes.data() + off, 8);
    std::memcpy(&len_crc, bytes.data() + off + 8, 4);
    EXPECT_EQ(len_crc, masked(crc32c_bitwise(reinterpret_cast<const uint8_t*>(bytes.data() + off), 8)));
    off += 12;
    EXPECT_GE(bytes.size() - off, len + 4) << "truncated record";
    const std::string data = bytes.substr(off, len);
    std::memcpy(&data_crc, bytes.data() + off + len, 4);
    EXPECT_EQ(data_crc, masked(crc32c_bitwise(reinterpret_cast<const uint8_t*>(data.data()), len)));
    off += len + 4;
    out.push_back(parse_event(data));
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- TensorBoard

TEST(telemetry, crc32c_known_values) {
  // RFC 3720 test vectors, and the standard "123456789" check value.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  // Continuing a CRC equals one pass over the whole.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(telemetry, tensorboard_scalars_read_back_exactly) {
  const fs::path dir = temp_dir("tb");
  std::string path;
  std::vector<std::vector<Scalar>> written;
  {
    TensorBoardWriter w(dir.string());
    path = w.path();
    for (int64_t step = 1; step <= 5; ++step) {
      std::vector<Scalar> v = {{"train/loss", 4.0 / step},
                               {"time/forward_ms", 12.25 + step},
                               {"throughput/tokens_per_s", 123456.0 * step},
                               {"a/very/long/tag/name/" + std::string(150, 'x'), -1.5e-7}};
      w.add_scalars(step, v, 1700000000.0 + step);
      written.push_back(v);
    }
    w.add_scalar(300, "val/loss", 2.5, 1700000300.0);
    // Flushed after each step: a reader sees all events before close.
    EXPECT_EQ(read_event_file(path).size(), 7u);
  }
  EXPECT_EQ(fs::path(path).parent_path(), dir);
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::vector<ParsedEvent> ev = read_event_file(path);
  ASSERT_EQ(ev.size(), 7u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_GT(ev[0].wall_time, 1.6e9);
  EXPECT_TRUE(ev[0].values.empty());
  for (int i = 0; i < 5; ++i) {
    const ParsedEvent& e = ev[i + 1];
    EXPECT_EQ(e.step, i + 1);
    EXPECT_DOUBLE_EQ(e.wall_time, 1700000001.0 + i);
    ASSERT_EQ(e.values.size(), written[i].size());
    for (size_t k = 0; k < e.values.size(); ++k) {
      EXPECT_EQ(e.values[k].first, written[i][k].first);
      EXPECT_EQ(e.values[k].second, static_cast<float>(written[i][k].second));  // exact
    }
  }
  EXPECT_EQ(ev[6].step, 300);
  ASSERT_EQ(ev[6].values.size(), 1u);
  EXPECT_EQ(ev[6].values[0].first, "val/loss");
  EXPECT_EQ(ev[6].values[0].second, 2.5f);
  fs::remove_all(dir);
}

// TensorBoard's own reader (EventAccumulator) loads our files, run by
// MESHTRAIN_PYTHON (scripts/test.sh sets it to its virtual environment, so
// there a missing tensorboard fails) or else python3 (skipped without
// tensorboard, with scripts/test.sh's reason when it could not make the
// environment: MESHTRAIN_PYTHON_UNAVAILABLE).
TEST(telemetry, tensorboard_python_reader_loads_events) {
  const char* env_python = std::getenv("MESHTRAIN_PYTHON");
  const bool named = env_python != nullptr && *env_python != '\0';
  const std::string python = named ? env_python : "python3";
  if (std::system(fmt::format("'{}' -c 'import tensorboard' >/dev/null 2>&1", python).c_str()) != 0) {
    if (named) FAIL() << "MESHTRAIN_PYTHON=" << python << " cannot import tensorboard";
    const char* why = std::getenv("MESHTRAIN_PYTHON_UNAVAILABLE");
    GTEST_SKIP() << "python3 cannot import tensorboard ("
                 << (why != nullptr ? why
                                    : "pip install -r tests/python-requirements.txt, or set MESHTRAIN_PYTHON")
                 << ")";
  }
  const fs::path dir = temp_dir("tb_py");
  {
    TensorBoardWriter w(dir.string());
    StepTelemetry t;
    t.time = {0.001, 0.010, 0.020, 0.004, 0.002, 0.015, 0.040};
    t.tokens = 4096;
    t.samples = 4;
    for (int step = 1; step <= 3; ++step) {
      t.step = step;
      t.loss = 3.0 / step;
      w.add_scalars(step, t.scalars());
    }
  }
  const fs::path out = dir / "out.txt";
  const std::string cmd = fmt::format(
      "'{}' {}/tools/check_tensorboard_events.py {} --expect train/loss time/forward_ms "
      "throughput/tokens_per_s > {} 2>&1", python, MESHTRAIN_SOURCE_DIR, dir.string(), out.string());
  const int rc = std::system(cmd.c_str());
  const std::string text = slurp(out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("train/loss: 3 value(s)"), std::string::npos) << text;
  EXPECT_NE(text.find("step        3  1 "), std::string::npos) << text;  // loss 3/3
  EXPECT_NE(text.find("time/forward_ms: 3 value(s)"), std::string::npos) << text;
  fs::remove_all(dir);
}

TEST(telemetry, tensorboard_closed_writer_is_inert) {
  TensorBoardWriter w;
  EXPECT_FALSE(w.is_open());
  w.add_scalar(1, "x", 1.0);  // no file, no crash
}

TEST(telemetry, tensorboard_unwritable_dir_is_error) {
  EXPECT_THROW(TensorBoardWriter("/proc/no/such/dir"), Error);
}

// ---------------------------------------------------------------- traces

TEST(telemetry, trace_events_from_two_threads_both_appear) {
  const fs::path dir = temp_dir("trace");
  {
    Tracer t(rank_trace_path(dir.string(), 1), 1);
    {
      TraceScope s(t, "forward layer 0", "compute", {{"layer", 0}});
    }
    std::thread comm([&] {
      t.set_thread_name("comm progress");
      TraceScope s(&t, "allreduce bucket 0", "comm", {{"bytes", 4096}, {"algorithm", "ring"}});
      s.arg("ranks", 4);
    });
    comm.join();
    {
      TraceScope s(t, "optimizer", "compute");
    }
    t.instant("eval", "event");
    EXPECT_EQ(t.event_count(), 4u);
    t.write();
  }
  const auto j = nlohmann::json::parse(slurp(dir / "trace_rank1.json"));
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::map<std::string, nlohmann::json> by_name;
  std::map<int, std::string> thread_names;
  for (const auto& e : j["traceEvents"]) {
    EXPECT_EQ(e["pid"], 1);
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X") {
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      by_name[e["name"]] = e;
    }
  }
  ASSERT_EQ(by_name.size(), 3u);
  const auto& fwd = by_name["forward layer 0"];
  const auto& ar = by_name["allreduce bucket 0"];
  EXPECT_EQ(fwd["cat"], "compute");
  EXPECT_EQ(fwd["args"]["layer"], 0);
  EXPECT_EQ(ar["args"]["bytes"], 4096);
  EXPECT_EQ(ar["args"]["algorithm"], "ring");
  EXPECT_EQ(ar["args"]["ranks"], 4);
  EXPECT_NE(fwd["tid"], ar["tid"]);
  EXPECT_EQ(by_name["optimizer"]["tid"], fwd["tid"]);
  EXPECT_EQ(thread_names[fwd["tid"]], "main");
  EXPECT_EQ(thread_names[ar["tid"]], "comm progress");
  EXPECT_LE(fwd["ts"].get<double>(), ar["ts"].get<double>());
  fs::remove_all(dir);
}

TEST(telemetry, trace_many_threads_record_concurrently) {
  const fs::path dir = temp_dir("trace_mt");
  std::optional<Tracer> tr(std::in_place, (dir / "trace_rank0.json").string(), 0);
  Tracer& t = *tr;
  std::vector<std::thread> th;
  for (int k = 0; k < 4; ++k)
    th.emplace_back([&t, k] {
      for (int i = 0; i < 500; ++i) TraceScope s(t, fmt::format("t{} e{}", k, i), "x");
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(t.event_count(), 2000u);
  std::set<int> tids;
  const nlohmann::json j = t.to_json();
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") tids.insert(e["tid"].get<int>());
  EXPECT_EQ(tids.size(), 4u);
  tr.reset();  // writes the file
  EXPECT_TRUE(fs::exists(dir / "trace_rank0.json"));
  fs::remove_all(dir);
}

TEST(telemetry, trace_global_tracer_and_indexed_names) {
  EXPECT_EQ(global_tracer(), nullptr);
  const fs::path dir = temp_dir("trace_global");
  std::optional<Tracer> tr(std::in_place, (dir / "trace_rank0.json").string(), 0);
  Tracer& t = *tr;
  set_global_tracer(&t);
  for (int layer = 0; layer < 3; ++layer) TraceScope s(global_tracer(), "backward layer", layer, "compute");
  set_global_tracer(nullptr);
  { TraceScope s(global_tracer(), "backward layer", 9, "compute"); }  // off: nothing
  const nlohmann::json j = t.to_json();
  std::vector<std::string> names;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") names.push_back(e["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"backward layer 0", "backward layer 1", "backward layer 2"}));
  tr.reset();
  fs::remove_all(dir);
}

TEST(telemetry, trace_disabled_records_nothing) {
  Tracer off;
  EXPECT_FALSE(off.enabled());
  {
    TraceScope s(off, "x", "y");
    TraceScope s2(nullptr, "x", "y");
  }
  off.complete("x", "y", 0, 1);
  EXPECT_EQ(off.event_count(), 0u);
}

TEST(telemetry, trace_merge_has_a_process_per_rank) {
  const fs::path dir = temp_dir("merge");
  for (int r = 0; r < 3; ++r) {
    Tracer t(rank_trace_path(dir.string(), r), r);
    TraceScope s(t, "step", "compute", {{"rank", r}});
  }
  EXPECT_EQ(merge_trace_dir(dir.string()), 3);
  const auto j = nlohmann::json::parse(slurp(dir / "trace.json"));
  std::set<int> pids;
  std::set<std::string> procs;
  double tmin = 1e300;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      pids.insert(e["pid"].get<int>());
      EXPECT_EQ(e["args"]["rank"], e["pid"]);
      tmin = std::min(tmin, e["ts"].get<double>());
    }
    if (e["name"] == "process_name") procs.insert(e["args"]["name"]);
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(procs, (std::set<std::string>{"rank 0", "rank 1", "rank 2"}));
  EXPECT_EQ(tmin, 0.0);
  std::ofstream(dir / "trace_rank7.json") << "{not json";
  EXPECT_THROW(merge_trace_dir(dir.string()), Error);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- breakdown

TEST(telemetry, breakdown_parts_sum_to_step) {
  // Lapped phases sum to the step exactly up to the laps' own gaps; the
  // stated tolerance is 1% of the step + 50 µs. A thread descheduled between
  // the last lap and finish() (other tests running beside this one) shows as
  // a longer gap, so the timing is tried up to 5 times: a timer that loses
  // time fails all of them.
  auto spin = [](double s) {
    const double t0 = StepTimer::now_s();
    while (StepTimer::now_s() - t0 < s) {
    }
  };
  bool added_up = false;
  for (int attempt = 0; attempt < 5 && !added_up; ++attempt) {
    StepTimer t;
    t.start();
    spin(0.001);
    t.lap(Phase::DataWait);
    spin(0.003);
    t.lap(Phase::Forward);
    spin(0.004);
    t.lap(Phase::Backward);
    spin(0.0015);
    t.lap(Phase::CommExposed);
    spin(0.002);
    t.lap(Phase::Optimizer);
    t.add_comm_total(0.005);
    const StepBreakdown b = t.finish();
    EXPECT_GE(b.forward_s, 0.003);
    EXPECT_GE(b.backward_s, 0.004);
    // other_s() is step_s minus the parts: the identity holds to a few
    // roundings of values under 0.1 s (~1e-17); 1e-12 is slack, as for
    // comm_overlap() = 1 - exposed / total below.
    EXPECT_NEAR(b.parts_s() + b.other_s(), b.step_s, 1e-12);
    EXPECT_GE(b.other_s(), 0.0);
    // Exposed is capped at the total: a thread descheduled in the 1.5 ms
    // exposed lap measures more than the 5 ms total, and the overlap is then
    // 0, never negative.
    EXPECT_NEAR(b.comm_overlap(), 1.0 - std::min(b.comm_exposed_s, 0.005) / 0.005, 1e-12);
    EXPECT_GE(b.comm_overlap(), 0.0);
    added_up = b.adds_up(kBreakdownRelTol, kBreakdownAbsTolS) &&
               b.other_s() <= kBreakdownRelTol * b.step_s + kBreakdownAbsTolS;
    if (!added_up) std::printf("attempt %d: other %.1f us of %.1f us\n", attempt + 1,
                               b.other_s() * 1e6, b.step_s * 1e6);
  }
  EXPECT_TRUE(added_up) << "the laps lost more than 1% + 50 us in 5 attempts";

  // A breakdown whose parts overrun the step does not add up.
  StepBreakdown bad;
  bad.forward_s = 0.6;
  bad.backward_s = 0.6;
  bad.step_s = 1.0;
  EXPECT_FALSE(bad.adds_up());
}

TEST(telemetry, aggregate_median_and_mean) {
  std::vector<StepBreakdown> v;
  for (double f : {1.0, 2.0, 10.0, 3.0}) {
    StepBreakdown b;
    b.forward_s = f;
    b.backward_s = 2 * f;
    b.step_s = 3 * f + 0.5;
    v.push_back(b);
  }
  const BreakdownStats s = aggregate(v);
  EXPECT_EQ(s.steps, 4);
  EXPECT_DOUBLE_EQ(s.median.forward_s, 2.5);
  EXPECT_DOUBLE_EQ(s.mean.forward_s, 4.0);
  EXPECT_DOUBLE_EQ(s.mean.other_s(), 0.5);  // means add up exactly
  EXPECT_DOUBLE_EQ(median_of({5, 1, 3}), 3);
}

TEST(telemetry, cost_flops_and_mfu) {
  // GPT-2 124M-like: N = 124M - position embeddings 1024·768.
  const int64_t n = 124'439'808 - 1024 * 768;
  EXPECT_DOUBLE_EQ(model_flops_per_token(n, 12, 768, 1024), 6.0 * n + 6.0 * 12 * 768 * 1024);
  StepTelemetry t;
  t.time.step_s = 0.5;
  t.tokens = 8 * 1024 * 4;  // 4 ranks × 8 × 1024
  t.samples = 32;
  t.devices = 4;
  t.flops_per_token = 1e9;
  t.peak_flops_per_device = 1e14;
  t.price_per_device_hour = 2.0;
  EXPECT_DOUBLE_EQ(t.tokens_per_s(), 65536.0);
  EXPECT_DOUBLE_EQ(t.samples_per_s(), 64.0);
  EXPECT_DOUBLE_EQ(t.model_flops_per_s(), 65536e9);
  EXPECT_DOUBLE_EQ(t.mfu(), 65536e9 / 4e14);
  // $2/device-hour × 4 devices × 0.5 s = $0.001111…; per 32768 tokens.
  const double usd = 2.0 * 4 * 0.5 / 3600.0;
  // Products and quotients of the same doubles in another order: a few ulp
  // of values up to ~35 (~1e-14); 1e-12 is slack.
  EXPECT_NEAR(t.usd_per_million_tokens(), usd / 32768 * 1e6, 1e-12);
  EXPECT_NEAR(t.usd_per_million_samples(), usd / 32 * 1e6, 1e-12);
  // A million tokens at 65536 tokens/s take 15.26 s on 4 devices at $8/h.
  EXPECT_NEAR(t.usd_per_million_tokens(), 8.0 * (1e6 / 65536.0) / 3600.0, 1e-12);
  StepTelemetry none;
  none.time.step_s = 1;
  EXPECT_LT(none.mfu(), 0);
  EXPECT_LT(none.usd_per_million_tokens(), 0);
  EXPECT_FALSE(none.to_json().contains("mfu"));
  EXPECT_FALSE(none.to_json().contains("usd_per_million_tokens"));
}

TEST(telemetry, straggler_names_slowest_rank) {
  const StragglerReport r = straggler_report({0.100, 0.102, 0.131, 0.099});
  EXPECT_EQ(r.ranks, 4);
  EXPECT_EQ(r.slowest_rank, 2);
  EXPECT_EQ(r.fastest_rank, 3);
  EXPECT_DOUBLE_EQ(r.median_s, 0.101);
  // 0.131 - 0.101 in double is 0.030 to an ulp (~1e-17), and the
  // percentage (~30) to a few ulp (~1e-14): 1e-12 and 1e-9 are slack.
  EXPECT_NEAR(r.lag_s, 0.030, 1e-12);
  EXPECT_NEAR(r.lag_pct, 100.0 * 0.030 / 0.101, 1e-9);
  EXPECT_NE(r.describe().find("rank 2 slowest"), std::string::npos);
  EXPECT_EQ(straggler_report({0.1, 0.1}).slowest_rank, 0);  // ties: lowest rank
  EXPECT_EQ(straggler_report({}).slowest_rank, -1);
}

TEST(telemetry, step_record_json_and_scalars_agree) {
  StepTelemetry t;
  t.step = 7;
  t.loss = 2.5;
  t.lr = 3e-4;
  t.val_loss = 2.7;
  t.time = {0.001, 0.010, 0.020, 0.004, 0.002, 0.015, 0.040};
  t.tokens = 4096;
  t.samples = 4;
  t.flops_per_token = 1e8;
  t.peak_flops_per_device = 1e12;
  t.peak_mem_bytes = 256e6;
  t.price_per_device_hour = 1.0;
  t.straggler = straggler_report({0.04, 0.05});
  const nlohmann::json j = t.to_json();
  const double parts = j["data_ms"].get<double>() + j["forward_ms"].get<double>() +
                       j["backward_ms"].get<double>() + j["optimizer_ms"].get<double>() +
                       j["comm_exposed_ms"].get<double>() + j["other_ms"].get<double>();
  // Six millisecond values (~1-40) summed in another order than other_ms
  // was formed: a few ulp (~1e-14); 1e-9 is slack.
  EXPECT_NEAR(parts, j["step_ms"].get<double>(), 1e-9);
  EXPECT_EQ(j["step"], 7);
  EXPECT_DOUBLE_EQ(j["val_loss"].get<double>(), 2.7);
  EXPECT_EQ(j["straggler"]["slowest_rank"], 1);
  const auto scalars = t.scalars();
  std::map<std::string, double> sc(scalars.begin(), scalars.end());
  for (const char* k : {"train/loss", "train/lr", "val/loss", "time/forward_ms", "time/comm_exposed_ms",
                        "throughput/tokens_per_s", "throughput/samples_per_s", "throughput/model_tflops",
                        "throughput/mfu", "memory/peak_mb", "cost/usd_per_million_tokens",
                        "cost/usd_per_million_samples", "straggler/lag_ms"})
    EXPECT_TRUE(sc.count(k)) << k;
  EXPECT_DOUBLE_EQ(sc["throughput/tokens_per_s"], j["tokens_per_s"].get<double>());
  EXPECT_DOUBLE_EQ(sc["throughput/mfu"], j["mfu"].get<double>());
  EXPECT_DOUBLE_EQ(sc["memory/peak_mb"], 256.0);
}

TEST(telemetry, run_summary_table) {
  RunSummary s;
  for (int i = 1; i <= 10; ++i) {
    StepTelemetry t;
    t.step = i;
    t.loss = 5.0 - 0.3 * i;
    if (i % 5 == 0) t.val_loss = 5.1 - 0.3 * i;
    t.time = {0.001, 0.010, 0.020, 0.004, 0.002, 0.015, i == 1 ? 0.5 : 0.040};
    t.tokens = 4096;
    t.samples = 4;
    t.devices = 2;
    t.price_per_device_hour = 3.0;
    t.straggler = straggler_report({0.04, i % 3 == 0 ? 0.03 : 0.05});
    s.add(t);
  }
  const std::string text = s.text();
  for (const char* k : {"forward", "backward", "optimizer", "comm exposed", "other", "comm total",
                        "tokens/s", "per million tokens", "rank 1 was slowest", "best 2.0000"})
    EXPECT_NE(text.find(k), std::string::npos) << k << "\n" << text;
  const BreakdownStats b = s.breakdown();
  EXPECT_EQ(b.steps, 9);  // the warm-up step is left out
  // Means of 9 equal doubles and a difference of them: a few ulp (~1e-17 s,
  // ~1e-15 ms); 1e-12 and 1e-9 are slack.
  EXPECT_NEAR(b.mean.step_s, 0.040, 1e-12);
  EXPECT_NEAR(s.to_json()["mean"]["other_ms"].get<double>(), 3.0, 1e-9);
}

// A model of images counts samples, not tokens, in the summary's throughput.
TEST(telemetry, run_summary_of_images_counts_samples) {
  RunSummary s;
  for (int i = 1; i <= 4; ++i) {
    StepTelemetry t;
    t.step = i;
    t.loss = 2.0;
    t.time = {0.001, 0.010, 0.020, 0.004, 0.002, 0.015, 0.5};
    t.tokens = t.samples = 16;
    t.per_sample = true;
    s.add(t);
  }
  const std::string text = s.text();
  EXPECT_NE(text.find("throughput: 32.0 samples/s"), std::string::npos) << text;
  EXPECT_EQ(text.find("tokens/s"), std::string::npos) << text;
}

TEST(telemetry, progress_line_shows_mfu_comm_and_straggler) {
  StepTelemetry t;
  t.step = 3;
  t.loss = 2.0;
  t.time = {0.001, 0.010, 0.020, 0.004, 0.0025, 0.018, 0.040};
  t.tokens = 4000;
  t.flops_per_token = 1e6;
  t.peak_flops_per_device = 1e12;
  t.straggler = straggler_report({0.040, 0.046, 0.041});
  ProgressState ps;
  ps.total_steps = 10;
  const std::string plain = ProgressDisplay::render(ps, 0);
  EXPECT_EQ(plain.find("MFU"), std::string::npos);  // unset: the line is as before
  t.fill_progress(ps);
  const std::string line = ProgressDisplay::render(ps, 0);
  EXPECT_NE(line.find("step 3/10"), std::string::npos) << line;
  EXPECT_NE(line.find("100000 tok/s"), std::string::npos) << line;
  EXPECT_NE(line.find("MFU 10.0%"), std::string::npos) << line;
  EXPECT_NE(line.find("comm 2.5/18.0 ms exposed"), std::string::npos) << line;
  EXPECT_NE(line.find("slowest r1 +5.0 ms"), std::string::npos) << line;
}

// ---------------------------------------------------------------- report

namespace {
fs::path write_metrics(const std::string& name, const std::string& content) {
  const fs::path dir = temp_dir(name);
  std::ofstream(dir / "metrics.jsonl") << content;
  return dir;
}

std::string synthetic_metrics(int steps, bool comm) {
  std::string s;
  for (int i = 1; i <= steps; ++i) {
    nlohmann::json r = {{"step", i},
                        {"loss", 4.2 * std::exp(-i / 40.0) + 1.2 + 0.05 * std::sin(i * 1.7)},
                        {"lr", 3e-4},
                        {"step_ms", i == 1 ? 400.0 : 52.0 + 3 * std::sin(i)},
                        {"data_ms", 0.8},
                        {"forward_ms", 15.0},
                        {"backward_ms", 27.0},
                        {"optimizer_ms", 4.0},
                        {"tokens_per_s", 4096 / 0.052}};
    if (comm) {
      r["comm_exposed_ms"] = 2.5;
      r["comm_total_ms"] = 18.0;
    }
    if (i % 25 == 0) r["val_loss"] = 4.2 * std::exp(-i / 40.0) + 1.3;
    s += r.dump() + "\n";
  }
  return s;
}
}  // namespace

TEST(telemetry, report_svg_and_table) {
  const fs::path dir = write_metrics("report", synthetic_metrics(200, true));
  const ReportResult r = write_report(dir.string());
  EXPECT_EQ(r.records, 200);
  for (const char* k : {"phase", "median ms", "% of step", "data wait", "forward", "backward",
                        "optimizer", "comm exposed", "comm total", "tokens/s", "train loss",
                        "val loss", "hidden behind compute"})
    EXPECT_NE(r.text.find(k), std::string::npos) << k << "\n" << r.text;
  // 199 steady steps: forward is 15 ms of a ~52 ms step.
  EXPECT_NE(r.text.find("15.000"), std::string::npos) << r.text;
  const std::string svg = slurp(r.svg_path);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("class=\"train-loss\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"val-loss\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"time-breakdown\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"comm-total\""), std::string::npos);
  EXPECT_NE(svg.find(">validation<"), std::string::npos);
  // Balanced tags (XML-ish): every opened element is closed.
  size_t opens = 0, closes = 0, self = 0;
  for (size_t p = svg.find('<'); p != std::string::npos; p = svg.find('<', p + 1)) {
    const size_t e = svg.find('>', p);
    ASSERT_NE(e, std::string::npos);
    if (svg[p + 1] == '/') ++closes;
    else if (svg[e - 1] == '/') ++self;
    else ++opens;
  }
  EXPECT_EQ(opens, closes);
  fs::remove_all(dir);
}

TEST(telemetry, report_draws_the_evaluation_measures) {
  // A classifier's run: val_top1 / val_top5 beside val_loss at each evaluation.
  std::string m;
  const double top1[] = {0.41, 0.78, 0.86, 0.84};
  for (int i = 1; i <= 40; ++i) {
    nlohmann::json r = {{"step", i}, {"loss", 2.0 / i}, {"step_ms", 20.0}, {"forward_ms", 8.0}};
    if (i % 10 == 0) {
      r["val_loss"] = 1.5 / i;
      r["val_top1"] = top1[i / 10 - 1];
      r["val_top5"] = 0.9 + 0.02 * (i / 10);
    }
    m += r.dump() + "\n";
  }
  const fs::path dir = write_metrics("report_measures", m);
  const ReportResult r = write_report(dir.string());
  // Final and best with their steps, in percent.
  EXPECT_NE(r.text.find("final 84.00% (step 40), best 86.00% (step 30)"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("val top5"), std::string::npos) << r.text;
  const std::string svg = slurp(r.svg_path);
  EXPECT_NE(svg.find("Validation measures"), std::string::npos);
  EXPECT_NE(svg.find("class=\"val-top1\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"val-top5\""), std::string::npos);
  EXPECT_NE(svg.find("step 30: top1 86.00%"), std::string::npos);
  // A run without measures has no such panel.
  const fs::path plain = write_metrics("report_plain", synthetic_metrics(30, false));
  const ReportResult q = write_report(plain.string());
  EXPECT_EQ(slurp(q.svg_path).find("Validation measures"), std::string::npos);
  fs::remove_all(dir);
  fs::remove_all(plain);
}

TEST(telemetry, report_tolerates_missing_keys) {
  // Old single-rank records, other record kinds, and a loss-only record.
  const fs::path dir = write_metrics(
      "report_min",
      "{\"step\":1,\"loss\":3.0}\n\n{\"event\":\"checkpoint\"}\n{\"step\":2,\"loss\":2.5,\"step_ms\":10}\n"
      "{\"step\":3,\"loss\":2.0,\"step_ms\":10,\"forward_ms\":4,\"val_loss\":2.2}\n");
  const ReportResult r = write_report(dir.string(), {2.0, 1, "tiny", ""});
  EXPECT_EQ(r.records, 3);
  EXPECT_NE(r.text.find("final 2.0000"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("cost:"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("comm total"), std::string::npos) << r.text;
  EXPECT_EQ(slurp(r.svg_path).rfind("<svg", 0), 0u);
  fs::remove_all(dir);
}

TEST(telemetry, report_bad_input_names_file_and_line) {
  auto msg = [](const std::string& run_dir) -> std::string {
    try {
      write_report(run_dir);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(msg("/no/such/run").find("/no/such/run does not exist"), std::string::npos);
  const fs::path empty_dir = temp_dir("report_nofile");
  EXPECT_NE(msg(empty_dir.string()).find("metrics.jsonl not found"), std::string::npos);
  const fs::path bad = write_metrics("report_bad", "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":\n");
  const std::string m = msg(bad.string());
  EXPECT_NE(m.find("metrics.jsonl:2:"), std::string::npos) << m;
  const fs::path badtype = write_metrics("report_badtype", "{\"step\":1}\n\n{\"step\":2,\"loss\":\"x\"}\n");
  EXPECT_NE(msg(badtype.string()).find("metrics.jsonl:3: \"loss\" is not a number"), std::string::npos)
      << msg(badtype.string());
  const fs::path none = write_metrics("report_empty", "\n");
  EXPECT_NE(msg(none.string()).find("no step records"), std::string::npos);
  const fs::path arr = write_metrics("report_arr", "[1,2]\n");
  EXPECT_NE(msg(arr.string()).find("metrics.jsonl:1: expected a JSON object"), std::string::npos);
  for (const auto& d : {empty_dir, bad, badtype, none, arr}) fs::remove_all(d);
}
