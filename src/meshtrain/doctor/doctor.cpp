#include "meshtrain/doctor/doctor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "meshtrain/comm/cost_model.h"
#include "meshtrain/doctor/link_probes.h"
#include "meshtrain/doctor/rank_probes.h"

namespace meshtrain::doctor {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

json facts_json(const RankFacts& f) {
  return {{"rank", f.rank}, {"pid", f.pid}, {"threads", f.threads}, {"cores", f.cores}, {"host", f.host},
          {"cpu", f.cpu}, {"isa", f.isa}, {"gemm_gflops", f.gemm_gflops},
          {"mem_available_gb", f.mem_available_gb}, {"disk_free_gb", f.disk_free_gb},
          {"clock_offset_ms", f.clock_offset_ms}};
}

RankFacts facts_from(const json& j) {
  RankFacts f;
  f.rank = j.at("rank");
  f.pid = j.at("pid");
  f.threads = j.at("threads");
  f.cores = j.at("cores");
  f.host = j.at("host");
  f.cpu = j.at("cpu");
  f.isa = j.at("isa");
  f.gemm_gflops = j.at("gemm_gflops");
  f.mem_available_gb = j.at("mem_available_gb");
  f.disk_free_gb = j.at("disk_free_gb");
  f.clock_offset_ms = j.at("clock_offset_ms");
  return f;
}

json link_json(const LinkResult& l) {
  return {{"a", l.a}, {"b", l.b}, {"ok", l.ok}, {"latency_us", l.latency_us}, {"gbps", l.gbps},
          {"error", l.error}};
}

LinkResult link_from(const json& j) {
  return {j.at("a"), j.at("b"), j.at("ok"), j.at("latency_us"), j.at("gbps"), j.at("error")};
}

// Every rank's text on every rank (lengths first, then the padded texts).
std::vector<std::string> allgather_text(comm::Communicator& c, const std::string& mine) {
  const int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(static_cast<size_t>(c.size()));
  // allgather takes the total count: one value per rank.
  c.allgather(&len, lens.data(), lens.size(), DType::I64).wait();
  const size_t width = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
  std::vector<char> out(width, 0), all(width * static_cast<size_t>(c.size()), 0);
  std::memcpy(out.data(), mine.data(), mine.size());
  if (width > 0) c.allgather(out.data(), all.data(), all.size(), DType::U8).wait();
  std::vector<std::string> texts;
  for (int r = 0; r < c.size(); ++r)
    texts.emplace_back(all.data() + static_cast<size_t>(r) * width, static_cast<size_t>(lens[r]));
  return texts;
}

// The fastest of `iters` allreduces of `bytes` (the slowest rank's: noise
// only adds, a slow rank or link slows every one), next to the cost model's
// prediction for the algorithm the communicator picks.
CollectiveResult time_allreduce(comm::Communicator& c, int64_t bytes, int iters) {
  std::vector<float> buf(static_cast<size_t>(std::max<int64_t>(1, bytes / 4)), 1.0f);
  const size_t count = buf.size();
  for (int i = 0; i < 3; ++i) c.allreduce(buf.data(), buf.data(), count, DType::F32).wait();
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    c.barrier().wait();
    const auto t0 = Clock::now();
    c.allreduce(buf.data(), buf.data(), count, DType::F32).wait();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  CollectiveResult r;
  r.op = "allreduce";
  r.bytes = static_cast<int64_t>(count * 4);
  r.measured_us = c.allreduce_scalar(*std::min_element(us.begin(), us.end()), comm::ReduceOp::Max);
  r.algorithm = c.algorithm_for(comm::CollOp::Allreduce, static_cast<size_t>(r.bytes));
  r.model_us = c.cost_model().predict_us(c.transport(), r.algorithm, comm::CollOp::Allreduce,
                                         static_cast<size_t>(r.bytes), c.size());
  const double n = c.size();
  r.busbw_gbps = r.bytes * 2 * (n - 1) / n / (r.measured_us * 1e-6) / 1e9;
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

DoctorReport run_doctor(comm::Communicator& c, const DoctorOptions& o) {
  const auto t0 = Clock::now();
  DoctorReport rep;
  rep.transport = std::string(c.transport());
  rep.world = c.size();
  const RankFacts mine = probe_rank(c, o);
  const std::vector<LinkResult> links = probe_links(c, o);
  json j = {{"facts", facts_json(mine)}, {"links", json::array()}};
  for (const LinkResult& l : links) j["links"].push_back(link_json(l));
  const std::vector<std::string> all = allgather_text(c, j.dump());
  if (c.size() > 1) {
    rep.collectives.push_back(time_allreduce(c, 8, 50));
    rep.collectives.push_back(time_allreduce(c, 16 << 20, 5));
  }
  if (c.rank() != 0) {
    rep.ranks.push_back(mine);
    return rep;
  }
  for (const std::string& t : all) {
    const json r = json::parse(t);
    rep.ranks.push_back(facts_from(r.at("facts")));
    for (const json& l : r.at("links")) rep.links.push_back(link_from(l));
  }
  std::sort(rep.links.begin(), rep.links.end(),
            [](const LinkResult& x, const LinkResult& y) { return std::tie(x.a, x.b) < std::tie(y.a, y.b); });
  rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  judge(rep, o);
  return rep;
}

void judge(DoctorReport& rep, const DoctorOptions& o) {
  rep.problems.clear();
  rep.notes.clear();
  std::map<std::string, std::pair<int, int>> per_host;  // ranks, threads
  std::map<std::string, int> host_cores;
  for (const RankFacts& f : rep.ranks) {
    per_host[f.host].first += 1;
    per_host[f.host].second += std::max(1, f.threads);
    host_cores[f.host] = std::max(host_cores[f.host], f.cores);
  }
  std::set<std::string> crowded;
  for (const auto& [host, rt] : per_host)
    if (host_cores[host] > 0 && rt.second > host_cores[host]) {
      crowded.insert(host);
      rep.notes.push_back(fmt::format("host {}: {} ranks with {} threads in all on {} cores: "
                                      "oversubscribed, so latencies include waiting for a core "
                                      "(not judged there)", host, rt.first, rt.second, host_cores[host]));
    }
  auto host_of = [&](int rank) {
    for (const RankFacts& f : rep.ranks)
      if (f.rank == rank) return f.host;
    return std::string();
  };
  auto say = [&](std::string s) { rep.problems.push_back(std::move(s)); };
  std::vector<double> gemm;
  for (const RankFacts& f : rep.ranks) gemm.push_back(f.gemm_gflops);
  const double gemm_med = median(gemm);
  for (const RankFacts& f : rep.ranks) {
    if (f.gemm_gflops < o.threshold * gemm_med)
      say(fmt::format("rank {} ({}, pid {}): GEMM {:.1f} GFLOP/s, below {} x the ranks' median "
                      "{:.1f} GFLOP/s: a slower or busier CPU will hold every step back",
                      f.rank, f.host, f.pid, f.gemm_gflops, o.threshold, gemm_med));
    if (f.disk_free_gb < o.min_disk_gb)
      say(fmt::format("rank {} ({}): {:.2f} GB free at {}, under {} GB: checkpoints will fail",
                      f.rank, f.host, f.disk_free_gb, o.disk_dir, o.min_disk_gb));
    if (std::abs(f.clock_offset_ms) > 1000)
      say(fmt::format("rank {} ({}): clock {:+.0f} ms from rank 0's: traces and logs will not "
                      "line up (run NTP)", f.rank, f.host, f.clock_offset_ms));
  }
  std::vector<double> bw, lat;
  for (const LinkResult& l : rep.links)
    if (l.ok) {
      bw.push_back(l.gbps);
      lat.push_back(l.latency_us);
    }
  const double bw_med = median(bw), lat_med = median(lat);
  for (const LinkResult& l : rep.links) {
    if (!l.ok) {
      say(fmt::format("link {}-{}: broken, no answer within {} s ({})", l.a, l.b, o.timeout_s, l.error));
      continue;
    }
    if (l.gbps < o.threshold * bw_med)
      say(fmt::format("link {}-{}: {:.2f} GB/s, below {} x the links' median {:.2f} GB/s", l.a,
                      l.b, l.gbps, o.threshold, bw_med));
    const bool waits_for_cores = crowded.count(host_of(l.a)) || crowded.count(host_of(l.b));
    if (!waits_for_cores && l.latency_us > lat_med / o.threshold && l.latency_us > lat_med + 50)
      say(fmt::format("link {}-{}: {:.1f} us one way, above the links' median {:.1f} us / {}",
                      l.a, l.b, l.latency_us, lat_med, o.threshold));
  }
  // The collectives against the alpha-beta model with the links' numbers.
  for (CollectiveResult& c : rep.collectives) {
    if (bw_med <= 0) continue;
    const comm::CostShape shape = comm::cost_shape(c.algorithm, comm::CollOp::Allreduce,
                                                   static_cast<size_t>(c.bytes), rep.world);
    c.expected_us = shape.steps * lat_med + shape.bytes / (bw_med * 1e3);
    if (c.measured_us > o.collective_slack * c.expected_us && c.measured_us > c.expected_us + 100)
      say(fmt::format("{} of {} B ({}): {:.1f} us, more than {} x the {:.1f} us the links' "
                      "latency and bandwidth predict: a slow rank or link holds it back",
                      c.op, c.bytes, c.algorithm, c.measured_us, o.collective_slack, c.expected_us));
  }
}

json DoctorReport::to_json() const {
  json j = {{"transport", transport}, {"world", world}, {"seconds", seconds},
            {"healthy", healthy()}, {"problems", problems}, {"notes", notes}, {"ranks", json::array()},
            {"links", json::array()}, {"collectives", json::array()}};
  for (const RankFacts& f : ranks) j["ranks"].push_back(facts_json(f));
  for (const LinkResult& l : links) j["links"].push_back(link_json(l));
  for (const CollectiveResult& c : collectives)
    j["collectives"].push_back({{"op", c.op}, {"algorithm", c.algorithm}, {"bytes", c.bytes},
                                {"measured_us", c.measured_us}, {"expected_us", c.expected_us},
                                {"model_us", c.model_us},
                                {"busbw_gbps", c.busbw_gbps}});
  return j;
}

std::string DoctorReport::text() const {
  std::string s = fmt::format("meshtrain doctor: {} ranks over {}, {:.1f} s\n\n", world, transport, seconds);
  s += fmt::format("{:>5} {:>8} {:<16} {:>7} {:>8} {:>11} {:>10} {:>10} {:>9}\n", "rank", "pid", "host",
                   "isa", "threads", "GEMM GF/s", "mem GB", "disk GB", "clock ms");
  for (const RankFacts& f : ranks)
    s += fmt::format("{:>5} {:>8} {:<16} {:>7} {:>8} {:>11.1f} {:>10.1f} {:>10.1f} {:>+9.2f}\n",
                     f.rank, f.pid, f.host.substr(0, 16), f.isa, f.threads, f.gemm_gflops,
                     f.mem_available_gb, f.disk_free_gb, f.clock_offset_ms);
  if (!links.empty()) {
    s += fmt::format("\n{:>9} {:>12} {:>10}\n", "link", "latency us", "GB/s");
    for (const LinkResult& l : links)
      s += l.ok ? fmt::format("{:>9} {:>12.1f} {:>10.2f}\n", fmt::format("{}-{}", l.a, l.b),
                              l.latency_us, l.gbps)
                : fmt::format("{:>9} {:>12} {:>10}\n", fmt::format("{}-{}", l.a, l.b), "BROKEN", "-");
  }
  if (!collectives.empty()) {
    s += fmt::format("\n{:<10} {:>10} {:<18} {:>12} {:>15} {:>10} {:>11}\n", "collective", "bytes",
                     "algorithm", "measured us", "from links us", "model us", "busbw GB/s");
    for (const CollectiveResult& c : collectives)
      s += fmt::format("{:<10} {:>10} {:<18} {:>12.1f} {:>15.1f} {:>10.1f} {:>11.2f}\n", c.op,
                       c.bytes, c.algorithm, c.measured_us, c.expected_us, c.model_us, c.busbw_gbps);
  }
  s += problems.empty() ? "\nhealthy: no rank or link below the thresholds\n"
                        : fmt::format("\n{} problem(s):\n", problems.size());
  for (const std::string& p : problems) s += "  - " + p + "\n";
  for (const std::string& n : notes) s += "note: " + n + "\n";
  return s;
}

}  // namespace meshtrain::doctor
