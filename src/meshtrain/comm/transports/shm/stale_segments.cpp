#include "meshtrain/comm/transports/shm/stale_segments.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <fstream>
#include <set>

namespace meshtrain::comm {
namespace {

constexpr const char* kShmDir = "/dev/shm/";

// Every /dev/shm/mt-* file some readable process maps (shared memory shows
// in /proc/<pid>/maps under its /dev/shm path, also after shm_unlink).
std::set<std::string> mapped_segments() {
  std::set<std::string> names;
  DIR* proc = opendir("/proc");
  if (!proc) return names;
  const size_t dir_len = std::strlen(kShmDir);
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream maps(std::string("/proc/") + e->d_name + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      const size_t at = line.find(kShmDir);
      if (at == std::string::npos || line.compare(at + dir_len, 3, "mt-") != 0) continue;
      std::string name = line.substr(at + dir_len);
      if (const size_t del = name.find(" (deleted)"); del != std::string::npos) name.resize(del);
      names.insert(name);
    }
  }
  closedir(proc);
  return names;
}

}  // namespace

std::vector<std::string> find_stale_segments(std::chrono::seconds min_age) {
  std::vector<std::string> stale;
  DIR* d = opendir(kShmDir);
  if (!d) return stale;
  const std::set<std::string> live = mapped_segments();
  const time_t now = std::time(nullptr);
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "mt-", 3) != 0 || live.count(e->d_name)) continue;
    struct stat st {};
    if (stat((std::string(kShmDir) + e->d_name).c_str(), &st) != 0) continue;
    // Segments are files (a run's in-memory checkpoints are a directory, not theirs).
    if (!S_ISREG(st.st_mode) || st.st_uid != getuid() || now - st.st_mtime < min_age.count()) continue;
    stale.emplace_back(e->d_name);
  }
  closedir(d);
  return stale;
}

std::vector<std::string> remove_stale_segments(std::chrono::seconds min_age) {
  std::vector<std::string> removed;
  for (const std::string& name : find_stale_segments(min_age))
    if (shm_unlink(("/" + name).c_str()) == 0) removed.push_back(name);
  return removed;
}

}  // namespace meshtrain::comm
