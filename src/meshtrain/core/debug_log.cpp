#include "meshtrain/core/debug_log.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace meshtrain {
namespace {

struct Settings {
  int level = 0;
  uint32_t subsys = ~0u;
  std::string file_pattern;
};

struct Sink {
  std::mutex mu;
  std::FILE* file = nullptr;  // null: stderr
  std::string opened_for;     // the pattern expanded for the rank it was opened with
  int rank = -1;
};

std::atomic<int> g_level{-1};  // -1: not read from the environment yet
std::atomic<uint32_t> g_subsys{~0u};
Settings g_settings;
Sink g_sink;

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Trace: return "TRACE";
    default: return "";
  }
}

const char* subsys_name(LogSubsys s) {
  switch (s) {
    case LogSubsys::Init: return "INIT";
    case LogSubsys::Comm: return "COMM";
    case LogSubsys::Algo: return "ALGO";
    case LogSubsys::Ckpt: return "CKPT";
    case LogSubsys::Data: return "DATA";
    case LogSubsys::Launch: return "LAUNCH";
  }
  return "?";
}

int parse_level(const char* v) {
  if (!v || !*v) return 0;
  const std::string s = upper(v);
  if (s == "0" || s == "NONE" || s == "OFF") return 0;
  if (s == "WARN") return 1;
  // "1" keeps its older meaning, the debug checks (replica checksums), with
  // warnings only: not a flood of INFO lines into every such run.
  if (s == "1") return 1;
  if (s == "INFO") return 2;
  if (s == "TRACE") return 3;
  std::fprintf(stderr, "warning: MESHTRAIN_DEBUG=%s is not a level: WARN, INFO or TRACE (logging "
               "INFO)\n", v);
  return 2;
}

uint32_t parse_subsys(const char* v) {
  if (!v || !*v) return ~0u;
  std::string s = upper(v);
  const bool except = s[0] == '^';
  if (except) s.erase(0, 1);
  uint32_t mask = 0;
  size_t at = 0;
  while (at <= s.size()) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    const std::string name = s.substr(at, end - at);
    bool known = name == "ALL";
    if (known) mask = ~0u;
    for (uint32_t b = 1; b <= 32; b <<= 1)
      if (name == subsys_name(static_cast<LogSubsys>(b))) {
        mask |= b;
        known = true;
      }
    if (!known && !name.empty())
      std::fprintf(stderr, "warning: MESHTRAIN_DEBUG_SUBSYS: '%s' is not one of INIT, COMM, ALGO, "
                   "CKPT, DATA, LAUNCH, ALL\n", name.c_str());
    at = end + 1;
  }
  return except ? ~mask : mask;
}

void apply(const char* level, const char* subsys, const char* file) {
  std::lock_guard lock(g_sink.mu);
  g_settings.level = parse_level(level);
  g_settings.subsys = parse_subsys(subsys);
  g_settings.file_pattern = file ? file : "";
  if (g_sink.file) std::fclose(g_sink.file);
  g_sink.file = nullptr;
  g_sink.opened_for.clear();
  g_subsys.store(g_settings.subsys, std::memory_order_relaxed);
  g_level.store(g_settings.level, std::memory_order_release);
}

int env_rank() {
  for (const char* k : {"MESHTRAIN_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(k); v && *v) return std::atoi(v);
  return -1;
}

std::string host() {
  char h[256] = {};
  ::gethostname(h, sizeof(h) - 1);
  return h;
}

// The pattern with %h, %p and %r filled in.
std::string expand(const std::string& pattern, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'h') out += host();
    else if (c == 'p') out += std::to_string(::getpid());
    else if (c == 'r') out += rank >= 0 ? std::to_string(rank) : "-";
    else out += std::string("%") + c;
  }
  return out;
}

// The file for the current rank (reopened when the rank becomes known).
std::FILE* sink_file() {
  if (g_settings.file_pattern.empty()) return stderr;
  const std::string path = expand(g_settings.file_pattern, g_sink.rank);
  if (!g_sink.file || g_sink.opened_for != path) {
    if (g_sink.file) std::fclose(g_sink.file);
    g_sink.file = std::fopen(path.c_str(), "a");
    g_sink.opened_for = path;
    if (!g_sink.file) {
      std::fprintf(stderr, "warning: MESHTRAIN_DEBUG_FILE: cannot open %s; logging to stderr\n",
                   path.c_str());
      g_settings.file_pattern.clear();
      return stderr;
    }
  }
  return g_sink.file;
}

}  // namespace

void log_configure(const char* level, const char* subsys, const char* file) {
  apply(level, subsys, file);
}

bool log_enabled(LogLevel level, LogSubsys subsys) {
  int l = g_level.load(std::memory_order_acquire);
  if (l < 0) {
    static std::once_flag once;
    std::call_once(once, [] {
      if (g_level.load() < 0)
        apply(std::getenv("MESHTRAIN_DEBUG"), std::getenv("MESHTRAIN_DEBUG_SUBSYS"),
              std::getenv("MESHTRAIN_DEBUG_FILE"));
    });
    l = g_level.load(std::memory_order_acquire);
  }
  return static_cast<int>(level) <= l &&
         (g_subsys.load(std::memory_order_relaxed) & static_cast<uint32_t>(subsys)) != 0;
}

void log_set_rank(int rank) {
  std::lock_guard lock(g_sink.mu);
  g_sink.rank = rank;
}

int log_rank() {
  std::lock_guard lock(g_sink.mu);
  if (g_sink.rank < 0) g_sink.rank = env_rank();
  return g_sink.rank;
}

void log_write(LogLevel level, LogSubsys subsys, std::string_view message) {
  std::lock_guard lock(g_sink.mu);
  if (g_sink.rank < 0) g_sink.rank = env_rank();
  std::FILE* f = sink_file();
  const std::string rank = g_sink.rank >= 0 ? std::to_string(g_sink.rank) : "-";
  std::fprintf(f, "%s:%d [rank %s] meshtrain %s %s %.*s\n", host().c_str(), static_cast<int>(::getpid()),
               rank.c_str(), level_name(level), subsys_name(subsys), static_cast<int>(message.size()),
               message.data());
  std::fflush(f);
}

}  // namespace meshtrain
