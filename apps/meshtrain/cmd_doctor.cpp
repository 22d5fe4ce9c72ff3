// `meshtrain doctor [-n N] [--json]`: the pre-flight check before a long job
// (doctor/doctor.h). Outside a job -n N launches N local ranks of itself;
// under mpirun, srun or meshtrain launch it runs on the job's ranks. Rank 0
// prints the report; the exit status is 3 when it names a problem. --clean
// first removes shared memory that jobs killed with SIGKILL left behind.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/transports/shm/stale_segments.h"
#include "meshtrain/doctor/doctor.h"
#include "meshtrain/launch/launcher.h"

namespace meshtrain::cli {
namespace {

constexpr int kProblemsExit = 3;

struct Options {
  int nproc = 0;
  bool json = false, clean = false;
  doctor::DoctorOptions d;
  double link_mb = 4;
};

std::string self_path() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return len > 0 ? std::string(self, static_cast<size_t>(len)) : "/proc/self/exe";
}

int run_in_world(const Options& o) {
  // A link that does not answer in --timeout-s fails its pair's communicator
  // (link_probes.h); the job's own collectives wait longer than that, for
  // the ranks still in such a pair.
  comm::CommOptions co = comm::CommOptions::from_env();
  co.timeout_s = 3 * o.d.timeout_s + 10;
  comm::Communicator c = comm::Communicator::from_env(co);
  doctor::DoctorOptions d = o.d;
  d.link_bytes = static_cast<int64_t>(o.link_mb * (1 << 20));
  const doctor::DoctorReport rep = doctor::run_doctor(c, d);
  if (c.rank() != 0) return 0;
  if (o.json) std::cout << rep.to_json().dump(2) << "\n";
  else std::cout << rep.text();
  std::cout.flush();
  return rep.healthy() ? 0 : kProblemsExit;
}

}  // namespace

void register_doctor(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Pre-flight check of every rank and link before a long job");
  auto o = std::make_shared<Options>();
  cmd->add_option("-n,--nproc", o->nproc, "Launch this many local ranks (outside a launched job)");
  cmd->add_flag("--json", o->json, "The report as one JSON object");
  cmd->add_option("--threshold", o->d.threshold, "A rank or link below this fraction of the median is slow")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--slack", o->d.collective_slack, "A collective slower than this many times what "
                 "the links' latency and bandwidth predict is slow")
      ->capture_default_str()->check(CLI::Range(1.0, 1e6));
  cmd->add_option("--timeout-s", o->d.timeout_s, "A link with no answer in this long is broken")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--link-mb", o->link_mb, "MiB sent each way per link for its bandwidth")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--disk-dir", o->d.disk_dir, "Where free disk is measured (the checkpoint directory)")
      ->capture_default_str();
  cmd->add_option("--min-disk-gb", o->d.min_disk_gb, "Less free disk than this is a problem")
      ->capture_default_str();
  cmd->add_flag("--clean", o->clean, "First remove /dev/shm/mt-* segments no live process maps "
                "(left by jobs killed with SIGKILL); a live job's are never touched");
  cmd->callback([o] {
    if (o->clean) {
      const std::vector<std::string> removed = comm::remove_stale_segments();
      std::fprintf(stderr, "doctor --clean: removed %zu stale shared-memory segment(s)%s\n",
                   removed.size(), removed.empty() ? "" : ":");
      for (const std::string& name : removed) std::fprintf(stderr, "  /dev/shm/%s\n", name.c_str());
    }
    if (o->nproc > 0 && !std::getenv("MESHTRAIN_RANK") && !std::getenv("OMPI_COMM_WORLD_RANK")) {
      launch::LaunchOptions lo;
      lo.nproc = o->nproc;
      lo.prefix_output = false;
      lo.command = {self_path(), "doctor", "--threshold", fmt::format("{}", o->d.threshold),
                    "--slack", fmt::format("{}", o->d.collective_slack),
                    "--timeout-s", fmt::format("{}", o->d.timeout_s), "--link-mb",
                    fmt::format("{}", o->link_mb), "--disk-dir", o->d.disk_dir, "--min-disk-gb",
                    fmt::format("{}", o->d.min_disk_gb)};
      if (o->json) lo.command.push_back("--json");
      const launch::LaunchResult r = launch::run_local(lo);
      if (r.failed_rank == 0 && r.exit_status == kProblemsExit) std::exit(kProblemsExit);
      if (r.exit_code != 0) throw Error(r.message);
      return;
    }
    const int rc = run_in_world(*o);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace meshtrain::cli
