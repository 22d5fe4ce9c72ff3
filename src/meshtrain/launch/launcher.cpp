#include "meshtrain/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <memory>
#include <optional>
#include <string>

#include "meshtrain/comm/transports/shm/shm_segment.h"
#include "meshtrain/core/debug_log.h"
#include "meshtrain/comm/transports/shm/stale_segments.h"
#include "meshtrain/comm/world.h"
#include "meshtrain/core/error.h"
#include "meshtrain/launch/heartbeat.h"

namespace meshtrain::launch {

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }
volatile sig_atomic_t g_dump = 0;  // SIGUSR1: have the ranks print their flight records
void on_dump(int) { g_dump = 1; }

// Whether `pid` runs this same program (its SIGUSR1 prints flight records;
// another program's would end it).
bool runs_this_program(pid_t pid) {
  char self[4096], other[4096];
  const ssize_t a = readlink("/proc/self/exe", self, sizeof(self) - 1);
  const ssize_t b = readlink(fmt::format("/proc/{}/exe", pid).c_str(), other, sizeof(other) - 1);
  return a > 0 && a == b && std::memcmp(self, other, static_cast<size_t>(a)) == 0;
}

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

// Starts rank r: its own process group (terminal signals reach ranks only
// through the launcher) and death with the launcher (no orphans if the
// launcher itself is killed).
pid_t spawn_rank(const LaunchOptions& opts, int r, const std::string& job,
                 const std::string& heartbeat, int out[2], int err[2]) {
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the launcher died before prctl
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  dup2(out[1], 1);
  dup2(err[1], 2);
  close(out[0]); close(out[1]); close(err[0]); close(err[1]);
  const int n = opts.nproc;
  setenv(comm::kEnvRank, std::to_string(r).c_str(), 1);
  setenv(comm::kEnvWorldSize, std::to_string(n).c_str(), 1);
  setenv(comm::kEnvLocalRank, std::to_string(r).c_str(), 1);
  setenv(comm::kEnvLocalWorldSize, std::to_string(n).c_str(), 1);
  setenv(comm::kEnvJobId, job.c_str(), 1);
  if (!heartbeat.empty()) setenv(kEnvHeartbeat, heartbeat.c_str(), 1);
  else unsetenv(kEnvHeartbeat);
  for (const auto& [k, v] : opts.env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : opts.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "cannot run '%s': %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

const char* failure_kind_name(FailureKind k) {
  switch (k) {
    case FailureKind::None: return "none";
    case FailureKind::Exit: return "exit";
    case FailureKind::Signal: return "signal";
    case FailureKind::Hung: return "heartbeat";
    case FailureKind::NoStart: return "startup";
    case FailureKind::Interrupted: return "interrupted";
  }
  return "?";
}

LaunchResult run_local(const LaunchOptions& opts) {
  if (opts.nproc < 1) throw UsageError(fmt::format("-n must be at least 1, not {}", opts.nproc));
  if (opts.command.empty()) throw UsageError("no command to launch (usage: meshtrain launch -n N -- COMMAND...)");
  const std::string job = opts.job_id.empty() ? comm::random_job_id() : opts.job_id;
  const int n = opts.nproc;
  // What jobs killed with SIGKILL left in /dev/shm (never a live job's).
  if (const auto stale = comm::remove_stale_segments(); !stale.empty())
    std::fprintf(stderr, "meshtrain launch: removed %zu shared-memory segment(s) no live process "
                 "maps, left by jobs that were killed (%s%s)\n", stale.size(), stale.front().c_str(),
                 stale.size() > 1 ? ", ..." : "");

  // The heartbeat board exists before any rank starts and until all are gone.
  std::unique_ptr<HeartbeatBoard> board;
  try {
    board = std::make_unique<HeartbeatBoard>(job, n);
  } catch (const Error& e) {
    if (opts.heartbeat_timeout_s > 0 || opts.startup_timeout_s > 0) throw;
    std::fprintf(stderr, "warning: no heartbeats for job %s: %s\n", job.c_str(), e.what());
  }

  struct sigaction sa{}, old_int{}, old_term{}, old_hup{}, dump{}, old_usr1{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  dump.sa_handler = on_dump;
  sigemptyset(&dump.sa_mask);
  sigaction(SIGUSR1, &dump, &old_usr1);
  g_signal = 0;
  g_dump = 0;

  std::vector<Rank> ranks(n);
  std::fflush(nullptr);
  const Clock::time_point started = Clock::now();
  for (int r = 0; r < n; ++r) {
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) fail("cannot create pipes: {}", std::strerror(errno));
    pid_t pid = spawn_rank(opts, r, job, board ? board->name() : std::string(), out, err);
    if (pid < 0) fail("cannot fork rank {}: {}", r, std::strerror(errno));
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFD, FD_CLOEXEC);
    fcntl(err[0], F_SETFD, FD_CLOEXEC);
    ranks[r].pid = pid;
    MT_LOG(Info, Launch, "job {}: rank {} of {} started as pid {}", job, r, n, pid);
    ranks[r].out_fd = out[0];
    ranks[r].err_fd = err[0];
  }

  LaunchResult result;
  result.job_id = job;
  int running = n;
  bool stopping = false;
  bool all_training = false;
  auto stop_deadline = Clock::time_point::max();
  // Each rank leads its own process group: signal the group, so helpers a
  // rank started (a shell's children) stop with it.
  auto signal_all = [&](int sig) {
    for (auto& rk : ranks)
      if (rk.running || sig == SIGKILL) kill(-rk.pid, sig);
  };
  // SIGUSR1 to the ranks that run this program: each prints its flight records.
  auto dump_all = [&] {
    int n_sent = 0;
    for (auto& rk : ranks)
      if (rk.running && runs_this_program(rk.pid) && kill(rk.pid, SIGUSR1) == 0) ++n_sent;
    MT_LOG(Info, Launch, "job {}: asked {} rank(s) for their flight records (SIGUSR1)", job, n_sent);
  };
  auto stop_all = [&] {
    if (stopping) return;
    stopping = true;
    signal_all(SIGTERM);
    signal_all(SIGCONT);  // a stopped rank acts on SIGTERM only once continued
    stop_deadline = after(opts.grace_s);
  };
  auto record = [&](FailureKind kind, int rank, std::string message) {
    if (result.kind != FailureKind::None) return;
    result.kind = kind;
    result.failed_rank = rank;
    result.message = std::move(message);
    result.failed_at = Clock::now();
    if (board && rank >= 0) {
      const auto h = board->read(rank);
      if (h.beats > 0) result.last_step = h.step + 1;
    }
  };
  auto record_status = [&](int r) {
    const int st = ranks[r].status;
    if (result.kind != FailureKind::None) return;
    record(WIFSIGNALED(st) ? FailureKind::Signal : FailureKind::Exit, r, describe_status(r, st));
    if (WIFSIGNALED(st)) result.signal = WTERMSIG(st);
    else result.exit_status = WEXITSTATUS(st);
  };
  auto all_exited_at = Clock::time_point::max();

  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // (rank, is_err)
    for (int r = 0; r < n; ++r) {
      if (ranks[r].out_fd >= 0) { fds.push_back({ranks[r].out_fd, POLLIN, 0}); who.push_back({r, false}); }
      if (ranks[r].err_fd >= 0) { fds.push_back({ranks[r].err_fd, POLLIN, 0}); who.push_back({r, true}); }
    }
    if (running == 0 && all_exited_at == Clock::time_point::max()) all_exited_at = Clock::now();
    // Every rank has exited: drain what is buffered, but do not wait on
    // pipes that a rank's leftover children keep open.
    if (running == 0 && (fds.empty() || Clock::now() - all_exited_at > std::chrono::milliseconds(500))) {
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
    // Reap exited ranks. Of the failures seen in one pass, a rank killed by a
    // signal is the cause and its peers' errors ("peer died") the effect.
    int pick = -1;
    for (int r = 0; r < n; ++r) {
      Rank& rk = ranks[r];
      if (!rk.running) continue;
      int st = 0;
      if (waitpid(rk.pid, &st, WNOHANG) != rk.pid) continue;
      rk.running = false;
      rk.status = st;
      --running;
      if (failed(st) && (pick < 0 || (WIFSIGNALED(st) && !WIFSIGNALED(ranks[pick].status)))) pick = r;
    }
    if (pick >= 0 && !stopping) {
      record_status(pick);
      if (running > 0) stop_all();
    }
    // Heartbeats: a rank that began training and went quiet, or one that
    // never began within the startup limit.
    if (board && !stopping) {
      const double since_start = std::chrono::duration<double>(Clock::now() - started).count();
      int hung = -1, unstarted = -1;
      uint64_t hung_beats = 0;
      double hung_age = 0;
      bool every_rank_training = true;
      for (int r = 0; r < n; ++r) {
        const auto h = board->read(r);
        if (h.beats == 0) every_rank_training = false;
        if (!ranks[r].running) continue;
        if (h.beats > 0 && opts.heartbeat_timeout_s > 0 && h.age_s > opts.heartbeat_timeout_s) {
          // Peers of a hung rank stall too, a step later: blame the one
          // furthest behind.
          if (hung < 0 || h.beats < hung_beats || (h.beats == hung_beats && h.age_s > hung_age)) {
            hung = r;
            hung_beats = h.beats;
            hung_age = h.age_s;
          }
        }
        if (h.beats == 0 && opts.startup_timeout_s > 0 && since_start > opts.startup_timeout_s &&
            unstarted < 0)
          unstarted = r;
      }
      if (every_rank_training && !all_training) {
        all_training = true;
        if (opts.on_all_training) opts.on_all_training(Clock::now());
      }
      if (hung >= 0) {
        // Where every rank was: their flight records, before they are stopped.
        dump_all();
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        const auto h = board->read(hung);
        record(FailureKind::Hung, hung,
               fmt::format("rank {} stopped making progress: no heartbeat for {:.1f} s (timeout "
                           "{:g} s) since it began step {}", hung, h.age_s, opts.heartbeat_timeout_s,
                           h.step + 1));
        stop_all();
      } else if (unstarted >= 0) {
        record(FailureKind::NoStart, unstarted,
               fmt::format("rank {} did not begin training within {:g} s (startup timeout)",
                           unstarted, opts.startup_timeout_s));
        stop_all();
      }
    }
    if (g_dump) {
      g_dump = 0;
      dump_all();
    }
    if (g_signal) {
      int sig = g_signal;
      g_signal = 0;
      if (result.kind == FailureKind::None) {
        record(FailureKind::Interrupted, -1,
               fmt::format("interrupted by signal {} ({})", sig, strsignal(sig)));
        result.signal = sig;
      }
      signal_all(sig);
      if (!stopping) {
        stopping = true;
        stop_deadline = after(opts.grace_s);
      }
    }
    if (stopping && running > 0 && Clock::now() > stop_deadline) {
      signal_all(SIGKILL);
      stop_deadline = Clock::time_point::max();
    }
  }

  // Nothing of the job outlives it: processes left in a rank's group, and
  // shared memory its ranks did not unlink.
  for (auto& rk : ranks) kill(-rk.pid, SIGKILL);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  board.reset();
  comm::shm_remove_job_segments(job);
  // A rank that failed while the job was already stopping for a user signal.
  if (result.kind == FailureKind::None) {
    for (int r = 0; r < n; ++r)
      if (failed(ranks[r].status)) {
        record_status(r);
        break;
      }
  }
  result.exit_code = result.kind == FailureKind::None ? 0 : 1;
  MT_LOG(Info, Launch, "job {}: {} rank(s) ended: {}", job, n,
         result.kind == FailureKind::None ? std::string("every rank exited 0") : result.message);
  return result;
}

}  // namespace meshtrain::launch
