// Metrics as JSON lines: one object per record, appended and flushed, so a
// crashed run keeps everything it logged.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace meshtrain {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Creates the parent directory if needed; truncates unless append.
  explicit MetricsLog(const std::string& path, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& record);
  bool is_open() const { return f_ != nullptr; }

 private:
  FILE* f_ = nullptr;
};

}  // namespace meshtrain
