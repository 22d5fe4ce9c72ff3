// One POSIX shared-memory segment: created with a per-job random name and
// mode 0600, opened by peers, unlinked as soon as everyone has mapped it so
// that nothing is left in /dev/shm even if the job is killed later.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>

namespace meshtrain::comm {

class ShmSegment {
 public:
  ShmSegment() = default;
  // Creates and maps `bytes` zeroed bytes (fails if the name exists).
  static ShmSegment create(const std::string& name, size_t bytes);
  // Opens and maps an existing segment; polls until it exists and its
  // creator has sized it, or throws CommError at `deadline`.
  static ShmSegment open(const std::string& name, std::chrono::steady_clock::time_point deadline);
  ~ShmSegment();
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mapping stays valid). Idempotent.
  void unlink();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
  bool owner_ = false;
};

// "/mt-<job>-<suffix>": every segment of a job starts with this prefix so the
// launcher can remove whatever a crashed job left behind.
std::string shm_name(const std::string& job_id, const std::string& suffix);
std::string shm_job_prefix(const std::string& job_id);
// Removes /dev/shm entries of the job; returns how many it removed.
int shm_remove_job_segments(const std::string& job_id);
// A fresh random job id (hex), for launchers and tests.
std::string random_job_id();

}  // namespace meshtrain::comm
