#include "meshtrain/telemetry/trace_writer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>

#include "meshtrain/core/error.h"

namespace meshtrain::telemetry {

namespace fs = std::filesystem;

Tracer::Tracer(std::string path, int rank, size_t max_events)
    : enabled_(true), rank_(rank), max_events_(max_events), path_(std::move(path)) {
  events_.reserve(4096);
  set_thread_name("main");
}

Tracer::~Tracer() {
  if (enabled_ && !written_) {
    try {
      write();
    } catch (...) {
      // A destructor must not throw; a trace that cannot be written is lost.
    }
  }
}

double Tracer::now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(system_clock::now().time_since_epoch()).count();
}

int Tracer::tid_locked() {
  const auto id = std::this_thread::get_id();
  for (size_t i = 0; i < threads_.size(); ++i)
    if (threads_[i].first == id) return static_cast<int>(i);
  threads_.emplace_back(id, fmt::format("thread {}", threads_.size()));
  return static_cast<int>(threads_.size() - 1);
}

void Tracer::set_thread_name(const std::string& name) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  threads_[tid_locked()].second = name;
}

void Tracer::complete(std::string_view name, std::string_view cat, double begin_us, double dur_us,
                      nlohmann::json args) {
  if (!enabled_) return;
  nlohmann::json e = {{"name", name}, {"cat", cat}, {"ph", "X"}, {"ts", begin_us},
                      {"dur", std::max(0.0, dur_us)}, {"pid", rank_}};
  if (!args.is_null()) e["args"] = std::move(args);
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  e["tid"] = tid_locked();
  events_.push_back(std::move(e));
}

void Tracer::instant(std::string_view name, std::string_view cat, nlohmann::json args) {
  if (!enabled_) return;
  nlohmann::json e = {{"name", name}, {"cat", cat}, {"ph", "i"}, {"s", "t"}, {"ts", now_us()},
                      {"pid", rank_}};
  if (!args.is_null()) e["args"] = std::move(args);
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  e["tid"] = tid_locked();
  events_.push_back(std::move(e));
}

size_t Tracer::event_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

size_t Tracer::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

nlohmann::json Tracer::to_json() const {
  nlohmann::json ev = nlohmann::json::array();
  std::lock_guard<std::mutex> lock(mu_);
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0},
                {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  ev.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0},
                {"args", {{"sort_index", rank_}}}});
  for (size_t i = 0; i < threads_.size(); ++i) {
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", i},
                  {"args", {{"name", threads_[i].second}}}});
    ev.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", rank_}, {"tid", i},
                  {"args", {{"sort_index", i}}}});
  }
  for (const auto& e : events_) ev.push_back(e);
  nlohmann::json out = {{"traceEvents", std::move(ev)}, {"displayTimeUnit", "ms"}};
  if (dropped_ > 0) out["otherData"] = {{"dropped_events", dropped_}};
  return out;
}

namespace {
void write_json_atomic(const std::string& path, const nlohmann::json& j) {
  fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MT_CHECK(f.good(), "cannot write trace file {}", tmp);
    f << j.dump();
    f.flush();
    MT_CHECK(f.good(), "cannot write trace file {}", tmp);
  }
  fs::rename(tmp, path, ec);
  MT_CHECK(!ec, "cannot rename {} to {}: {}", tmp, path, ec.message());
}
}  // namespace

void Tracer::write() {
  if (!enabled_) return;
  write_json_atomic(path_, to_json());
  written_ = true;
}

void TraceScope::begin(std::string_view name, std::string_view cat, nlohmann::json args) {
  name_ = name;
  cat_ = cat;
  args_ = std::move(args);
  t0_ = Tracer::now_us();
}

void TraceScope::end() {
  const double t1 = Tracer::now_us();
  t_->complete(name_, cat_, t0_, t1 - t0_, std::move(args_));
}

std::string TraceScope::indexed_name(std::string_view prefix, int64_t index) {
  return fmt::format("{} {}", prefix, index);
}

namespace {
std::atomic<Tracer*> g_tracer{nullptr};
}  // namespace

void set_global_tracer(Tracer* t) { g_tracer.store(t, std::memory_order_release); }
Tracer* global_tracer() { return g_tracer.load(std::memory_order_acquire); }

std::string rank_trace_path(const std::string& dir, int rank) {
  return (fs::path(dir) / fmt::format("trace_rank{}.json", rank)).string();
}

void merge_trace_files(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<nlohmann::json> all;
  double t_min = std::numeric_limits<double>::infinity();
  for (const std::string& in : inputs) {
    std::ifstream f(in);
    MT_CHECK(f.good(), "cannot open trace file {}", in);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
      fail("{} is not a JSON trace: {}", in, e.what());
    }
    MT_CHECK(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array(),
             "{} is not a Chrome trace (no traceEvents array)", in);
    for (auto& e : j["traceEvents"]) {
      if (e.contains("ts") && e["ts"].is_number()) t_min = std::min(t_min, e["ts"].get<double>());
      all.push_back(std::move(e));
    }
  }
  if (!std::isfinite(t_min)) t_min = 0;
  nlohmann::json ev = nlohmann::json::array();
  for (auto& e : all) {
    if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() - t_min;
    ev.push_back(std::move(e));
  }
  write_json_atomic(output, {{"traceEvents", std::move(ev)},
                             {"displayTimeUnit", "ms"},
                             {"otherData", {{"ranks", inputs.size()}, {"t0_unix_us", t_min}}}});
}

int merge_trace_dir(const std::string& dir) {
  std::vector<std::pair<int, std::string>> found;
  const std::regex re("trace_rank([0-9]+)\\.json");
  std::error_code ec;
  for (const auto& ent : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = ent.path().filename().string();
    if (std::regex_match(name, m, re)) found.emplace_back(std::stoi(m[1]), ent.path().string());
  }
  if (found.empty()) return 0;
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [r, p] : found) paths.push_back(p);
  merge_trace_files(paths, (fs::path(dir) / "trace.json").string());
  return static_cast<int>(paths.size());
}

}  // namespace meshtrain::telemetry
