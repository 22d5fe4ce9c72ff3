#include "meshtrain/comm/options.h"

#include <cstdlib>
#include <string_view>

namespace meshtrain::comm {

namespace {
const char* env(const char* name) {
  const char* s = std::getenv(name);
  return s && *s ? s : nullptr;
}
std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

CommOptions CommOptions::from_env() {
  CommOptions o;
  if (auto s = env("MESHTRAIN_COMM_TRANSPORT")) o.transport = s;
  if (auto s = env("MESHTRAIN_COMM_TIMEOUT")) {
    o.timeout_s = std::atof(s);
    if (o.timeout_s <= 0) throw UsageError(fmt::format("MESHTRAIN_COMM_TIMEOUT='{}' must be > 0 seconds", s));
  }
  if (auto s = env("MESHTRAIN_COMM_DEBUG")) o.debug = std::string_view(s) != "0";
  if (auto s = env("MESHTRAIN_COMM_NODE_SIZE")) o.node_size = std::atoi(s);
  if (auto s = env("MESHTRAIN_COMM_INLINE_BYTES")) o.inline_bytes = std::strtoull(s, nullptr, 10);
  if (auto s = env("MESHTRAIN_COMM_COST_FILE")) o.cost_file = s;
  if (auto s = env("MESHTRAIN_COMM_THROTTLE_GBPS")) {
    o.throttle_gbps = std::atof(s);
    if (!(o.throttle_gbps >= 0))
      throw UsageError(fmt::format("MESHTRAIN_COMM_THROTTLE_GBPS='{}' must be a rate >= 0 in GB/s", s));
  }
  if (auto s = env("MESHTRAIN_COMM_ALGO")) {
    std::string_view list(s);
    while (!list.empty()) {
      auto comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      auto eq = item.find_first_of("=:");
      if (eq == std::string_view::npos)
        throw UsageError(fmt::format("MESHTRAIN_COMM_ALGO entry '{}' is not op=algorithm", item));
      o.algorithm[static_cast<size_t>(coll_op_from_name(item.substr(0, eq)))] =
          std::string(item.substr(eq + 1));
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    }
  }
  for (size_t i = 0; i < kCollOpCount; ++i) {
    std::string name = "MESHTRAIN_COMM_ALGO_" + upper(coll_op_name(static_cast<CollOp>(i)));
    if (auto s = env(name.c_str())) o.algorithm[i] = s;
  }
  return o;
}

}  // namespace meshtrain::comm
