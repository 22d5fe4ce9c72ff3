// Typed access to the dotted keys of a complete configuration (every key
// present; config_loader.h merges the defaults first): every failure names
// the key, what was expected, the value found and where the value came from
// ("cfg.json", "--set train.lr=..."). The rules of config_schema.h read
// through it.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/config/suggest.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& root, const std::function<std::string(const std::string&)>& origin)
      : root_(root), origin_(origin) {}

  const nlohmann::json& at(const std::string& path) const {
    const nlohmann::json* j = &root_;
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      j = &j->at(path.substr(start, dot - start));
      if (dot == std::string::npos) return *j;
      start = dot + 1;
    }
  }

  [[noreturn]] void error(const std::string& path, const std::string& what) const {
    const std::string from = origin_ ? origin_(path) : "";
    fail("{} {}{}", path, what, from.empty() ? "" : " (from " + from + ")");
  }

  int64_t integer(const std::string& path, int64_t lo, int64_t hi = INT32_MAX) const {
    const nlohmann::json& j = at(path);
    int64_t v = 0;
    if (j.is_number_unsigned()) {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) error(path, fmt::format("must be <= {}, got {}", hi, u));
      v = static_cast<int64_t>(u);
    } else if (j.is_number_integer()) {
      v = j.get<int64_t>();
    } else if (j.is_number_float() && std::isfinite(j.get<double>()) &&
               j.get<double>() == std::trunc(j.get<double>()) && std::abs(j.get<double>()) < 9e15) {
      v = static_cast<int64_t>(j.get<double>());  // 1e3 is a fine way to write 1000
    } else {
      error(path, "must be an integer, got " + j.dump());
    }
    if (v < lo) error(path, fmt::format("must be >= {}, got {}", lo, v));
    if (v > hi) error(path, fmt::format("must be <= {}, got {}", hi, v));
    return v;
  }

  int small_int(const std::string& path, int lo, int hi = INT32_MAX) const {
    return static_cast<int>(integer(path, lo, hi));
  }

  double number(const std::string& path) const {
    const nlohmann::json& j = at(path);
    if (!j.is_number()) error(path, "must be a number, got " + j.dump());
    return j.get<double>();
  }

  bool boolean(const std::string& path) const {
    const nlohmann::json& j = at(path);
    if (!j.is_boolean()) error(path, "must be true or false, got " + j.dump());
    return j.get<bool>();
  }

  // Strings; null reads as "" (unset).
  std::string string(const std::string& path) const {
    const nlohmann::json& j = at(path);
    if (j.is_null()) return "";
    if (!j.is_string()) error(path, "must be a string, got " + j.dump());
    return j.get<std::string>();
  }

  std::string choice(const std::string& path, const std::vector<std::string>& allowed) const {
    const std::string v = string(path);
    for (const auto& a : allowed)
      if (v == a) return v;
    error(path, fmt::format("must be one of {}; got \"{}\"{}", fmt::join(allowed, ", "), v,
                            did_you_mean(v, allowed)));
  }

  double positive(const std::string& path) const {
    const double v = number(path);
    if (!(v > 0)) error(path, fmt::format("must be > 0, got {}", v));
    return v;
  }

  double in_range(const std::string& path, double lo, double hi, bool hi_open) const {
    const double v = number(path);
    if (!(v >= lo && (hi_open ? v < hi : v <= hi)))
      error(path, fmt::format("must be in [{}, {}{}, got {}", lo, hi, hi_open ? ")" : "]", v));
    return v;
  }

 private:
  const nlohmann::json& root_;
  const std::function<std::string(const std::string&)>& origin_;
};

}  // namespace meshtrain
