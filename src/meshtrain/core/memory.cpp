#include "meshtrain/core/memory.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {
std::mutex g_mu;
MemStats g_stats;
}  // namespace

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::OptimizerState: return "optimizer";
    case MemCategory::Activations: return "activations";
    case MemCategory::CommBuffers: return "comm";
    case MemCategory::Workspace: return "workspace";
    case MemCategory::Data: return "data";
    case MemCategory::Other: return "other";
    case MemCategory::kCount: break;
  }
  return "?";
}

void* aligned_alloc_tagged(size_t bytes, MemCategory cat) {
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) fail("out of memory allocating {} bytes for {}", bytes, mem_category_name(cat));
  std::memset(p, 0, rounded);  // touch now, so RSS reflects what we hold
  std::lock_guard<std::mutex> lock(g_mu);
  auto i = static_cast<size_t>(cat);
  g_stats.current[i] += static_cast<int64_t>(bytes);
  if (g_stats.current[i] > g_stats.peak[i]) g_stats.peak[i] = g_stats.current[i];
  g_stats.total_current += static_cast<int64_t>(bytes);
  if (g_stats.total_current > g_stats.total_peak) g_stats.total_peak = g_stats.total_current;
  return p;
}

void mem_track_external(MemCategory cat, int64_t delta) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto i = static_cast<size_t>(cat);
  g_stats.current[i] += delta;
  if (g_stats.current[i] > g_stats.peak[i]) g_stats.peak[i] = g_stats.current[i];
  g_stats.total_current += delta;
  if (g_stats.total_current > g_stats.total_peak) g_stats.total_peak = g_stats.total_current;
}

void aligned_free_tagged(void* p, size_t bytes, MemCategory cat) {
  if (!p) return;
  std::free(p);
  std::lock_guard<std::mutex> lock(g_mu);
  g_stats.current[static_cast<size_t>(cat)] -= static_cast<int64_t>(bytes);
  g_stats.total_current -= static_cast<int64_t>(bytes);
}

MemStats mem_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_stats;
}

void mem_reset_peaks() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_stats.peak = g_stats.current;
  g_stats.total_peak = g_stats.total_current;
}

static int64_t read_status_kb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0) {
      kb = std::atoll(line + n);
      break;
    }
  }
  std::fclose(f);
  return kb;
}

int64_t process_peak_rss_bytes() { return read_status_kb("VmHWM:") * 1024; }
int64_t process_rss_bytes() { return read_status_kb("VmRSS:") * 1024; }

}  // namespace meshtrain
