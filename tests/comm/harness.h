// Runs a function on n real processes (fork), each with its own rank of a
// shm world, and collects what each returned. Nothing is shared but the
// communicator, exactly as in a launched job.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/transports/shm/shm_segment.h"

namespace meshtrain::comm::testing {

struct RankResult {
  int status = -1;       // exit code, or 128 + signal
  std::string output;    // what the rank function returned (or its error)
};

struct WorldResult {
  std::vector<RankResult> ranks;
  std::string job_id;
  double seconds = 0;
  bool ok() const {
    for (const auto& r : ranks)
      if (r.status != 0) return false;
    return true;
  }
  std::string report() const {
    std::string s;
    for (size_t i = 0; i < ranks.size(); ++i)
      s += "rank " + std::to_string(i) + " status " + std::to_string(ranks[i].status) + ": " +
           ranks[i].output + "\n";
    return s;
  }
};

// fn returns "" for success or a failure description; an exception counts as
// failure with its message. Exit status 0 only when fn returned "".
inline WorldResult run_world(int n, const std::function<std::string(Communicator&)>& fn,
                             CommOptions opts = CommOptions::from_env(), double limit_s = 120) {
  WorldResult w;
  const std::string id = random_job_id();
  w.job_id = "t" + id;  // not "t" + std::string&&: GCC 12 warns falsely (-Wrestrict)
  std::vector<pid_t> pids;
  auto out_path = [&](int r) { return "/tmp/mt-test-" + w.job_id + "-r" + std::to_string(r); };
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string out;
      int code = 0;
      try {
        Communicator c = Communicator::create_local(r, n, w.job_id, opts);
        out = fn(c);
        code = out.empty() ? 0 : 1;
      } catch (const std::exception& e) {
        out = std::string("exception: ") + e.what();
        code = 3;
      }
      std::ofstream(out_path(r)) << out;
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  w.ranks.resize(n);
  std::vector<bool> done(n, false);
  int remaining = n;
  while (remaining > 0) {
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        done[r] = true;
        --remaining;
        w.ranks[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
    }
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el > limit_s) {
      for (int r = 0; r < n; ++r)
        if (!done[r]) kill(pids[r], SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < n; ++r) {
    std::ifstream f(out_path(r));
    std::stringstream ss;
    ss << f.rdbuf();
    w.ranks[r].output = ss.str();
    std::remove(out_path(r).c_str());
  }
  return w;
}

// Names of /dev/shm entries left by a job.
inline std::vector<std::string> leftover_segments(const std::string& job_id) {
  std::vector<std::string> out;
  std::string prefix = "mt-" + job_id + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

}  // namespace meshtrain::comm::testing
