#include "meshtrain/telemetry/run_attempts.h"

#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"

namespace meshtrain::telemetry {
namespace {

struct LogEvents {
  std::vector<RestartMark> restarts;       // cause, rank, message
  std::vector<double> training_again_s;    // in restart order
};

LogEvents read_restart_log(const std::string& path) {
  LogEvents ev;
  if (path.empty()) return ev;
  std::ifstream in(path);
  if (!in) return ev;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: not a JSON restart record ({})", path, n, e.what());
    }
    const std::string event = j.value("event", "");
    if (event == "restart") {
      RestartMark m;
      m.cause = j.value("cause", "");
      m.rank = j.contains("rank") && j["rank"].is_number_integer() ? j["rank"].get<int>() : -1;
      m.message = j.value("message", "");
      if (j.contains("last_step") && j["last_step"].is_number_integer())
        m.heartbeat_step = j["last_step"].get<int64_t>();
      ev.restarts.push_back(m);
    } else if (event == "training_again" && j.contains("seconds_after_failure") &&
               j["seconds_after_failure"].is_number()) {
      ev.training_again_s.push_back(j["seconds_after_failure"].get<double>());
    }
  }
  return ev;
}

}  // namespace

RunAttempts split_attempts(const std::vector<MetricsRecord>& recs, const std::string& restart_log) {
  RunAttempts out;
  std::vector<RestartMark> seen;  // from the steps: where each attempt stopped and resumed
  std::set<int64_t> steps;
  std::map<int64_t, size_t> last_of;
  int64_t prev = -1;
  for (size_t i = 0; i < recs.size(); ++i) {
    const int64_t s = recs[i].step;
    if (prev >= 0 && s <= prev) {
      RestartMark m;
      m.reached_step = prev;
      m.resumed_step = s - 1;
      seen.push_back(m);
    }
    if (!steps.insert(s).second) ++out.rerun_steps;
    last_of[s] = i;
    prev = s;
  }
  out.new_steps = static_cast<int64_t>(steps.size());
  for (const auto& [step, i] : last_of) out.final_records.push_back(recs[i]);
  // The log's restarts in order, each with the next re-run where its failed
  // rank's heartbeat says it failed (or any, without a heartbeat); the
  // re-runs no log restart claims are resumes by hand.
  LogEvents ev = read_restart_log(restart_log);
  size_t next = 0;
  for (size_t k = 0; k < ev.restarts.size(); ++k) {
    RestartMark m = ev.restarts[k];
    if (next < seen.size()) {
      const RestartMark& r = seen[next];
      const bool here = m.heartbeat_step < 0 ||
                        (m.heartbeat_step >= r.resumed_step && m.heartbeat_step <= r.reached_step + 1);
      if (here) {
        m.reached_step = r.reached_step;
        m.resumed_step = r.resumed_step;
        ++next;
      }
    }
    if (k < ev.training_again_s.size()) m.recovery_s = ev.training_again_s[k];
    out.restarts.push_back(m);
  }
  for (; next < seen.size(); ++next) out.restarts.push_back(seen[next]);
  for (size_t k = 0; k < out.restarts.size(); ++k) out.restarts[k].number = static_cast<int>(k) + 1;
  return out;
}

std::string describe(const RestartMark& m) {
  std::string s = fmt::format("restart {}", m.number);
  if (m.reached_step >= 0) s += fmt::format(" after step {}", m.reached_step);
  s += ": ";
  if (!m.cause.empty()) {
    s += m.cause;
    if (m.rank >= 0) s += fmt::format(", rank {}", m.rank);
    if (!m.message.empty()) s += fmt::format(" ({})", m.message);
  } else {
    s += "a resumed run (no restart log)";
  }
  if (m.resumed_step >= 0)
    s += fmt::format("; resumed from step {}, {} step{} run again", m.resumed_step, m.steps_lost(),
                     m.steps_lost() == 1 ? "" : "s");
  else if (!m.cause.empty())
    s += m.heartbeat_step >= 0 ? fmt::format("; its last heartbeat step {}, no step run again", m.heartbeat_step)
                               : "; no step run again";
  if (m.recovery_s) s += fmt::format("; training again {:.2f} s after the failure", *m.recovery_s);
  return s;
}

}  // namespace meshtrain::telemetry
