#include "meshtrain/telemetry/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.h"

namespace meshtrain {

MetricsLog::MetricsLog(const std::string& path, bool append) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  MT_CHECK(f_ != nullptr, "cannot open metrics file {}: {}", path, std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!f_) return;
  std::string s = record.dump();
  s.push_back('\n');
  std::fwrite(s.data(), 1, s.size(), f_);
  std::fflush(f_);
}

}  // namespace meshtrain
