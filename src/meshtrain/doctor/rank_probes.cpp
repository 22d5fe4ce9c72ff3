#include "meshtrain/doctor/rank_probes.h"

#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "meshtrain/core/cpu_isa.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/matmul.h"

namespace meshtrain::doctor {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best of five timed 512^3 GEMMs (one untimed first: backend choice, pages).
double gemm_gflops(int rank) {
  const int64_t n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  const int repeat = static_cast<int>(slow_rank_factor(rank) + 0.5);
  auto once = [&] { cpu::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); };
  once();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    for (int r = 0; r < repeat; ++r) once();
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * n * n * n / best / 1e9;
}

double mem_available_gb() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (f >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024 / 1e9;
    f.ignore(256, '\n');
  }
  return 0;
}

double disk_free_gb(const std::string& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return 0;
  return static_cast<double>(s.f_bavail) * static_cast<double>(s.f_frsize) / 1e9;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// NTP's estimate, rank by rank with rank 0: offset = midpoint of the round
// trip minus rank 0's stamp; the best of five round trips (least queueing).
double clock_offset_ms(comm::Communicator& c) {
  double offset = 0;
  for (int r = 1; r < c.size(); ++r) {
    if (c.rank() != 0 && c.rank() != r) continue;
    double best_rtt = 1e30;
    for (int i = 0; i < 5; ++i) {
      double stamp = 0;
      if (c.rank() == 0) {
        c.recv(&stamp, 1, DType::F64, r).wait();
        stamp = wall_ms();
        c.send(&stamp, 1, DType::F64, r).wait();
      } else {
        const double t1 = wall_ms();
        c.send(&t1, 1, DType::F64, 0).wait();
        c.recv(&stamp, 1, DType::F64, 0).wait();
        const double t2 = wall_ms();
        if (t2 - t1 < best_rtt) {
          best_rtt = t2 - t1;
          offset = (t1 + t2) / 2 - stamp;
        }
      }
    }
  }
  return offset;
}

std::string host_name() {
  char h[256] = {};
  ::gethostname(h, sizeof(h) - 1);
  return h;
}

}  // namespace

double slow_rank_factor(int rank) {
  const char* e = std::getenv("MESHTRAIN_TEST_SLOW_RANK");
  if (!e || !*e) return 1;
  const std::string s = e;
  const size_t colon = s.find(':');
  if (std::atoi(s.substr(0, colon).c_str()) != rank) return 1;
  const double f = colon == std::string::npos ? 2.0 : std::atof(s.c_str() + colon + 1);
  return std::max(1.0, f);
}

RankFacts probe_rank(comm::Communicator& c, const DoctorOptions& o) {
  RankFacts f;
  f.rank = c.rank();
  f.pid = static_cast<int>(::getpid());
  f.threads = thread_count();
  cpu_set_t set;
  CPU_ZERO(&set);
  f.cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  f.host = host_name();
  f.cpu = cpu_model_name();
  f.isa = isa_name(active_isa());
  // Ranks of one host share its cores: they time their GEMMs in turn (hosts
  // in parallel), so each rate is the rank's own, not a share of a busy CPU.
  const int color = static_cast<int>(std::hash<std::string>{}(f.host) & 0x3fffffff);
  comm::Communicator host = c.split(color, c.rank());
  for (int turn = 0; turn < host.size(); ++turn) {
    host.barrier().wait();
    if (host.rank() == turn) f.gemm_gflops = gemm_gflops(c.rank());
  }
  host.barrier().wait();
  f.mem_available_gb = mem_available_gb();
  f.disk_free_gb = disk_free_gb(o.disk_dir);
  f.clock_offset_ms = clock_offset_ms(c);
  return f;
}

}  // namespace meshtrain::doctor
