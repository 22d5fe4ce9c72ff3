#include "meshtrain/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "meshtrain/comm/transports/shm/shm_segment.h"
#include "meshtrain/comm/world.h"
#include "meshtrain/core/error.h"

namespace meshtrain::launch {

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Rank {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool running = true;
  int status = 0;
};

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t w = ::write(fd, s.data() + off, s.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

// Emits complete lines of `buf` with the rank prefix; keeps the partial tail.
void flush_lines(std::string& buf, int fd, const std::string& prefix, bool final) {
  size_t start = 0;
  std::string out;
  for (;;) {
    size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    out += prefix;
    out.append(buf, start, nl - start + 1);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (final && !buf.empty()) {
    out += prefix + buf + "\n";
    buf.clear();
  }
  if (!out.empty()) write_all(fd, out);
}

std::string describe_status(int rank, int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return fmt::format("rank {} was killed by signal {} ({})", rank, sig, strsignal(sig));
  }
  return fmt::format("rank {} exited with status {}", rank, WEXITSTATUS(status));
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

}  // namespace

LaunchResult run_local(const LaunchOptions& opts) {
  if (opts.nproc < 1) throw UsageError(fmt::format("-n must be at least 1, not {}", opts.nproc));
  if (opts.command.empty()) throw UsageError("no command to launch (usage: meshtrain launch -n N -- COMMAND...)");
  const std::string job = opts.job_id.empty() ? comm::random_job_id() : opts.job_id;
  const int n = opts.nproc;

  struct sigaction sa{}, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  g_signal = 0;

  std::vector<Rank> ranks(n);
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) fail("cannot create pipes: {}", std::strerror(errno));
    pid_t pid = fork();
    if (pid < 0) fail("cannot fork rank {}: {}", r, std::strerror(errno));
    if (pid == 0) {
      setpgid(0, 0);  // our own group: terminal signals reach ranks only via the launcher
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]); close(out[1]); close(err[0]); close(err[1]);
      setenv(comm::kEnvRank, std::to_string(r).c_str(), 1);
      setenv(comm::kEnvWorldSize, std::to_string(n).c_str(), 1);
      setenv(comm::kEnvLocalRank, std::to_string(r).c_str(), 1);
      setenv(comm::kEnvLocalWorldSize, std::to_string(n).c_str(), 1);
      setenv(comm::kEnvJobId, job.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : opts.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      std::fprintf(stderr, "cannot run '%s': %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    ranks[r].pid = pid;
    ranks[r].out_fd = out[0];
    ranks[r].err_fd = err[0];
  }

  LaunchResult result;
  int running = n;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  // Each rank leads its own process group: signal the group, so helpers a
  // rank started (a shell's children) stop with it.
  auto signal_all = [&](int sig) {
    for (auto& rk : ranks)
      if (rk.running || sig == SIGKILL) kill(-rk.pid, sig);
  };
  auto all_exited_at = std::chrono::steady_clock::time_point::max();

  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // (rank, is_err)
    for (int r = 0; r < n; ++r) {
      if (ranks[r].out_fd >= 0) { fds.push_back({ranks[r].out_fd, POLLIN, 0}); who.push_back({r, false}); }
      if (ranks[r].err_fd >= 0) { fds.push_back({ranks[r].err_fd, POLLIN, 0}); who.push_back({r, true}); }
    }
    if (running == 0 && all_exited_at == std::chrono::steady_clock::time_point::max())
      all_exited_at = std::chrono::steady_clock::now();
    // Every rank has exited: drain what is buffered, but do not wait on
    // pipes that a rank's leftover children keep open.
    if (running == 0 && (fds.empty() || std::chrono::steady_clock::now() - all_exited_at >
                                            std::chrono::milliseconds(500))) {
      for (int r = 0; r < n; ++r) {
        std::string prefix = opts.prefix_output ? fmt::format("[rank {}] ", r) : "";
        flush_lines(ranks[r].out_buf, 1, prefix, true);
        flush_lines(ranks[r].err_buf, 2, prefix, true);
        if (ranks[r].out_fd >= 0) close(ranks[r].out_fd);
        if (ranks[r].err_fd >= 0) close(ranks[r].err_fd);
      }
      break;
    }
    int ready = fds.empty() ? 0 : poll(fds.data(), fds.size(), 20);
    if (fds.empty()) usleep(20000);
    if (ready > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto [r, is_err] = who[i];
        Rank& rk = ranks[r];
        char buf[65536];
        ssize_t got = read(fds[i].fd, buf, sizeof(buf));
        std::string& acc = is_err ? rk.err_buf : rk.out_buf;
        std::string prefix = opts.prefix_output ? fmt::format("[rank {}] ", r) : "";
        if (got > 0) {
          acc.append(buf, static_cast<size_t>(got));
          if (opts.prefix_output) flush_lines(acc, is_err ? 2 : 1, prefix, false);
          else { write_all(is_err ? 2 : 1, acc); acc.clear(); }
        } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
          flush_lines(acc, is_err ? 2 : 1, prefix, true);
          close(fds[i].fd);
          (is_err ? rk.err_fd : rk.out_fd) = -1;
        }
      }
    }
    // Reap exited ranks; the first failure stops the rest.
    for (int r = 0; r < n; ++r) {
      Rank& rk = ranks[r];
      if (!rk.running) continue;
      int st = 0;
      if (waitpid(rk.pid, &st, WNOHANG) == rk.pid) {
        rk.running = false;
        rk.status = st;
        --running;
        if (failed(st) && result.failed_rank < 0) {
          result.failed_rank = r;
          result.message = describe_status(r, st);
          if (!stopping && running > 0) {
            stopping = true;
            signal_all(SIGTERM);
            stop_deadline = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(static_cast<int>(opts.grace_s * 1000));
          }
        }
      }
    }
    if (g_signal) {
      int sig = g_signal;
      g_signal = 0;
      signal_all(sig);
      if (!stopping) {
        stopping = true;
        stop_deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(opts.grace_s * 1000));
      }
    }
    if (stopping && running > 0 && std::chrono::steady_clock::now() > stop_deadline) {
      signal_all(SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
  }

  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  comm::shm_remove_job_segments(job);
  result.exit_code = result.failed_rank < 0 ? 0 : 1;
  return result;
}

}  // namespace meshtrain::launch
