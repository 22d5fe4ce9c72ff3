#include "meshtrain/launch/elastic.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "meshtrain/comm/transports/shm/shm_segment.h"
#include "meshtrain/core/error.h"
#include "meshtrain/launch/heartbeat.h"

namespace meshtrain::launch {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// One JSON line per event; a log that cannot be written is a warning, never
// a reason to stop a job that is recovering.
void append_log(const std::string& path, json rec) {
  if (path.empty()) return;
  rec["time"] = utc_now();
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream out(path, std::ios::app);
  if (!out) {
    std::fprintf(stderr, "warning: cannot append to the restart log %s\n", path.c_str());
    return;
  }
  out << rec.dump() << "\n";
}

void say(const std::string& line) {
  std::fprintf(stderr, "meshtrain launch: %s\n", line.c_str());
  std::fflush(stderr);
}

json failure_json(const LaunchResult& r) {
  json j = {{"cause", failure_kind_name(r.kind)}, {"rank", r.failed_rank}, {"message", r.message},
            {"job", r.job_id}};
  j["exit_status"] = r.kind == FailureKind::Exit ? json(r.exit_status) : json(nullptr);
  j["signal"] = r.kind == FailureKind::Signal ? json(r.signal) : json(nullptr);
  j["last_step"] = r.last_step >= 0 ? json(r.last_step) : json(nullptr);
  return j;
}

}  // namespace

ElasticResult run_elastic(const ElasticOptions& opts) {
  MT_CHECK(opts.max_restarts >= 0, "--max-restarts must be >= 0, not {}", opts.max_restarts);
  const int start_n = opts.launch.nproc;
  if (opts.min_nproc < 0 || opts.min_nproc > start_n)
    throw UsageError(fmt::format("--min-nproc {} must be between 1 and -n {}", opts.min_nproc, start_n));
  MT_CHECK(opts.shrink_after >= 1, "shrink_after must be >= 1");

  // slots[r]: the original slot index rank r runs in (ranks are renumbered
  // 0..n-1 after a slot is dropped).
  std::vector<int> slots(static_cast<size_t>(start_n));
  for (int i = 0; i < start_n; ++i) slots[i] = i;
  int streak_slot = -1, streak = 0;
  ElasticResult out;
  std::optional<Clock::time_point> failed_at;  // of the previous attempt

  for (int attempt = 0;; ++attempt) {
    LaunchOptions lo = opts.launch;
    lo.nproc = static_cast<int>(slots.size());
    lo.job_id = comm::random_job_id();
    lo.env.emplace_back(kEnvRestartCount, std::to_string(attempt));
    if (attempt > 0) {
      lo.on_all_training = [&, attempt, n = lo.nproc, job = lo.job_id](Clock::time_point t) {
        const double s = std::chrono::duration<double>(t - *failed_at).count();
        out.recovery_s.push_back(s);
        say(fmt::format("restart {}: all {} rank(s) training again {:.2f} s after the failure",
                        attempt, n, s));
        append_log(opts.restart_log, {{"event", "training_again"}, {"restart", attempt},
                                      {"world", n}, {"job", job}, {"seconds_after_failure", s}});
      };
    }
    const LaunchResult r = run_local(lo);
    out.final_nproc = lo.nproc;
    out.restarts = attempt;
    if (r.kind == FailureKind::None) {
      out.exit_code = 0;
      out.message.clear();
      if (attempt > 0) {
        say(fmt::format("job finished after {} restart(s) on {} rank(s)", attempt, lo.nproc));
        append_log(opts.restart_log, {{"event", "finished"}, {"restarts", attempt},
                                      {"world", lo.nproc}, {"job", r.job_id}});
      }
      return out;
    }
    out.failures.push_back(r);
    out.exit_code = 1;
    if (r.kind == FailureKind::Interrupted) {
      out.message = r.message;
      append_log(opts.restart_log, {{"event", "interrupted"}, {"message", r.message}, {"job", r.job_id}});
      return out;
    }
    if (attempt >= opts.max_restarts) {
      out.message = opts.max_restarts == 0
                        ? r.message
                        : fmt::format("giving up: {} restart(s) used (--max-restarts {}); the last "
                                      "failure: {}", attempt, opts.max_restarts, r.message);
      json rec = failure_json(r);
      rec["event"] = "gave_up";
      rec["restarts"] = attempt;
      rec["max_restarts"] = opts.max_restarts;
      if (opts.max_restarts > 0) append_log(opts.restart_log, rec);
      return out;
    }
    failed_at = r.failed_at;
    // Which slot failed, and does it keep failing?
    const int slot = r.failed_rank >= 0 && r.failed_rank < static_cast<int>(slots.size())
                         ? slots[static_cast<size_t>(r.failed_rank)] : -1;
    streak = slot >= 0 && slot == streak_slot ? streak + 1 : 1;
    streak_slot = slot;
    const int old_n = static_cast<int>(slots.size());
    std::string shrink_note;
    if (opts.min_nproc > 0 && slot >= 0 && streak >= opts.shrink_after && old_n > opts.min_nproc) {
      slots.erase(slots.begin() + r.failed_rank);
      shrink_note = fmt::format(" slot {} failed {} times in a row: continuing without it;", slot, streak);
      streak = 0;
      streak_slot = -1;
    }
    const int new_n = static_cast<int>(slots.size());
    say(fmt::format("restart {}/{}: {}{} (job {});{} restarting {} rank(s)", attempt + 1,
                    opts.max_restarts, r.message,
                    r.last_step >= 0 ? fmt::format(" (its last heartbeat: step {})", r.last_step) : "", r.job_id,
                    shrink_note, new_n));
    json rec = failure_json(r);
    rec["event"] = "restart";
    rec["restart"] = attempt + 1;
    rec["max_restarts"] = opts.max_restarts;
    rec["slot"] = slot;
    rec["slot_failures_in_a_row"] = new_n < old_n ? opts.shrink_after : streak;
    rec["old_world"] = old_n;
    rec["new_world"] = new_n;
    append_log(opts.restart_log, rec);
  }
}

}  // namespace meshtrain::launch
