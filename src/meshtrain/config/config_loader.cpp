#include "meshtrain/config/config_loader.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "meshtrain/config/config_convert.h"
#include "meshtrain/config/suggest.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

using nlohmann::json;

namespace {

// Where each key's value came from, for messages about bad values.
using Origins = std::map<std::string, std::string>;

std::string join_key(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

void collect_paths(const json& j, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [k, v] : j.items()) {
    const std::string path = join_key(prefix, k);  // not out.back(): out grows below
    out.push_back(path);
    if (v.is_object()) collect_paths(v, path, out);
  }
}

std::string unknown_key_message(const std::string& key, const std::string& where) {
  return fmt::format("unknown config key '{}' in {}{}", key, where,
                     did_you_mean(key, config_key_paths()));
}

// Copies src's values over dst (shaped like the defaults); a key dst lacks is
// an unknown key.
void merge(json& dst, const json& src, const std::string& prefix, const std::string& source,
           Origins& origins) {
  for (const auto& [k, v] : src.items()) {
    const std::string path = join_key(prefix, k);
    if (!dst.contains(k)) throw Error(unknown_key_message(path, source));
    json& slot = dst[k];
    if (slot.is_object()) {
      if (!v.is_object())
        fail("'{}' in {} must be an object with keys such as '{}', got {}", path, source,
             join_key(path, slot.begin().key()), v.dump());
      merge(slot, v, path, source, origins);
    } else {
      slot = v;
      origins[path] = source;
    }
  }
}

// --set values: JSON where it parses, else the text itself. Keys whose value
// is a string take the text as it is, so --set run_name=2024 stays a string.
json parse_override_value(const std::string& raw, const json& current) {
  if (raw == "null") return nullptr;
  const bool quoted = raw.size() >= 2 && raw.front() == '"' && raw.back() == '"';
  if (current.is_string() && !quoted) return raw;
  try {
    return json::parse(raw);
  } catch (const json::exception&) {  // not JSON, or a number JSON cannot hold (1e999)
    return raw;
  }
}

void apply_override(json& cfg, const std::string& text, Origins& origins) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError(fmt::format("--set '{}' is not key=value (e.g. --set train.lr=3e-4)", text));
  const std::string key = text.substr(0, eq), raw = text.substr(eq + 1);
  json* node = &cfg;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? dot : dot - start);
    if (part.empty() || !node->is_object() || !node->contains(part))
      throw UsageError(unknown_key_message(key, "--set " + text));
    node = &(*node)[part];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (node->is_object())
    throw UsageError(fmt::format("--set {}: '{}' is a section, not a value; set one of its keys, "
                                 "e.g. --set {}=...", text, key,
                                 join_key(key, node->begin().key())));
  *node = parse_override_value(raw, *node);
  origins[key] = "--set " + text;
}

// 1-based line and column of a 0-based byte offset.
std::pair<size_t, size_t> line_column(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

TrainConfig finish(const json& merged, const Origins& origins) {
  TrainConfig c = convert_config(merged, [&](const std::string& path) {
    auto it = origins.find(path);
    return it == origins.end() ? std::string() : it->second;
  });
  resolve_derived_paths(c);
  return c;
}

}  // namespace

json default_config_json() {
  const TrainConfig defaults;
  return resolved_json(defaults);
}

std::vector<std::string> config_key_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> out;
    collect_paths(default_config_json(), "", out);
    return out;
  }();
  return paths;
}

json parse_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read config file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  try {
    return json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    // e.byte counts from 1 and points at the character that broke the parse.
    const auto [line, col] = line_column(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string reason = e.what();
    const size_t at = reason.find("parse error");
    const size_t colon = at == std::string::npos ? at : reason.find(": ", at);
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
    fail("{}:{}:{}: malformed JSON: {}", path, line, col, reason);
  } catch (const json::exception& e) {  // e.g. a number beyond double's range ("1e708")
    fail("{}: malformed JSON: {}", path, e.what());
  }
}

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  json merged = default_config_json();
  Origins origins;
  if (!path.empty()) {
    const json file = parse_json_file(path);
    if (!file.is_object())
      fail("{}: a configuration must be a JSON object {{...}}, got {}", path, file.type_name());
    merge(merged, file, "", path, origins);
  }
  for (const std::string& o : overrides) apply_override(merged, o, origins);
  return finish(merged, origins);
}

TrainConfig config_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail("{}: a configuration must be a JSON object, got {}", source, j.type_name());
  json merged = default_config_json();
  Origins origins;
  merge(merged, j, "", source, origins);
  return finish(merged, origins);
}

}  // namespace meshtrain
