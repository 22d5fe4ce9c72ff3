// `meshtrain trace-dump [PID...] [--all]`: asks running meshtrain processes
// for their flight records (SIGUSR1; comm/flight_dump.h). A rank prints the
// last operations of each of its communicators and every rank's progress to
// its stderr (and its MESHTRAIN_DEBUG_FILE log); a launcher forwards the
// request to its ranks. --all: every rank of this user on this host. Only
// processes running a program named meshtrain are signalled (SIGUSR1 would
// end another program).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {
namespace {

std::string exe_of(pid_t pid) {
  char buf[4096];
  const ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool is_meshtrain(pid_t pid) {
  const std::string exe = exe_of(pid);
  const size_t slash = exe.rfind('/');
  return (slash == std::string::npos ? exe : exe.substr(slash + 1)) == "meshtrain";
}

// A rank: its environment names its rank (our launcher, mpirun, srun).
bool is_rank(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  const std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* k : {"MESHTRAIN_RANK=", "OMPI_COMM_WORLD_RANK=", "PMI_RANK=", "SLURM_PROCID="})
    if (env.find(std::string("\0", 1) + k) != std::string::npos || env.rfind(k, 0) == 0) return true;
  return false;
}

std::vector<pid_t> all_ranks() {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid != getpid() && is_meshtrain(pid) && is_rank(pid)) out.push_back(pid);
  }
  closedir(d);
  return out;
}

}  // namespace

void register_trace_dump(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace-dump", "Ask running ranks (or a launcher) to print their "
                                 "flight records: what each communicator did last, and where every rank is");
  auto pids = std::make_shared<std::vector<int>>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("pids", *pids, "Processes to ask (a launcher forwards to its ranks)");
  cmd->add_flag("--all", *all, "Every meshtrain rank of this user on this host");
  cmd->callback([pids, all] {
    std::vector<pid_t> targets(pids->begin(), pids->end());
    if (*all) targets = all_ranks();
    if (targets.empty())
      throw UsageError(*all ? "trace-dump --all: no meshtrain rank is running here"
                            : "trace-dump: give the PIDs of ranks or of their launcher, or --all");
    for (pid_t pid : targets) {
      if (!is_meshtrain(pid))
        throw UsageError(fmt::format("trace-dump: process {} does not run meshtrain ({}): not "
                                     "signalled", pid, exe_of(pid).empty() ? "no such process" : exe_of(pid)));
      if (kill(pid, SIGUSR1) != 0) throw Error(fmt::format("trace-dump: cannot signal {}: {}", pid, errno_str()));
      std::fprintf(stderr, "trace-dump: asked pid %d; its flight records go to its stderr (and "
                   "MESHTRAIN_DEBUG_FILE)\n", static_cast<int>(pid));
    }
  });
}

}  // namespace meshtrain::cli
