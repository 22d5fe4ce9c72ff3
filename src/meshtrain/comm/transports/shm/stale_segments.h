// Shared-memory segments of jobs that are gone: a launcher killed with
// SIGKILL cannot unlink its job's /dev/shm/mt-<job>-* segments. A segment is
// stale when no live process maps it (every rank and the launcher map their
// job's segments for as long as the job runs) and it is older than a grace
// period (a starting job creates a segment a moment before it maps it). Only
// this user's segments are considered; a live job's are never touched.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace meshtrain::comm {

// The names (without "/dev/shm/") of this user's stale mt-* segments.
std::vector<std::string> find_stale_segments(std::chrono::seconds min_age = std::chrono::seconds(10));
// Unlinks them; returns the names removed.
std::vector<std::string> remove_stale_segments(std::chrono::seconds min_age = std::chrono::seconds(10));

}  // namespace meshtrain::comm
