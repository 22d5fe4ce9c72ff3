// Logs in the NCCL_DEBUG habit: MESHTRAIN_DEBUG=WARN|INFO|TRACE picks how
// much, MESHTRAIN_DEBUG_SUBSYS=INIT,COMM,ALGO,CKPT,DATA,LAUNCH (or ALL, the
// default; ^NAME,... for all but those) which parts, and
// MESHTRAIN_DEBUG_FILE=path (%h host, %p pid, %r rank) where: one file per
// rank instead of stderr. Lines read
//   host:pid [rank 1] meshtrain INFO ALGO allreduce 16777216 B: ring ...
// MESHTRAIN_DEBUG=1 (which also turns on the debug checks, e.g. data
// parallelism's replica checksum) logs warnings. Unset, nothing is logged and a check costs one relaxed load. Errors are
// printed whatever the level; these logs are what users read to see why.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace meshtrain {

enum class LogLevel : int { None = 0, Warn = 1, Info = 2, Trace = 3 };
enum class LogSubsys : uint32_t { Init = 1, Comm = 2, Algo = 4, Ckpt = 8, Data = 16, Launch = 32 };

// Whether a message of this level and part would be written.
bool log_enabled(LogLevel level, LogSubsys subsys);
void log_write(LogLevel level, LogSubsys subsys, std::string_view message);
// The rank in each line and in %r (before it is set: MESHTRAIN_RANK,
// OMPI_COMM_WORLD_RANK or SLURM_PROCID, else "-").
void log_set_rank(int rank);
// That rank, -1 when unknown.
int log_rank();
// The settings from these strings (tests; the environment is read at first use).
void log_configure(const char* level, const char* subsys, const char* file);

}  // namespace meshtrain

// MT_LOG(Info, Algo, "format {}", args...): formats only when enabled.
#define MT_LOG(level, subsys, ...)                                                            \
  do {                                                                                        \
    if (::meshtrain::log_enabled(::meshtrain::LogLevel::level, ::meshtrain::LogSubsys::subsys)) \
      ::meshtrain::log_write(::meshtrain::LogLevel::level, ::meshtrain::LogSubsys::subsys,      \
                             fmt::format(__VA_ARGS__));                                        \
  } while (0)
