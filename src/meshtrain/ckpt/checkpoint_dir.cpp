#include "meshtrain/ckpt/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "meshtrain/ckpt/checkpoint_index.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/atomic_file.h"

namespace meshtrain::ckpt {

namespace fs = std::filesystem;

std::string step_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }

std::string step_dir(const std::string& root, int64_t step) {
  return (fs::path(root) / step_dir_name(step)).string();
}

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  if (name.size() < 6 || name.rfind("step_", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(digits);
}

std::string completeness_problem(const std::string& dir) {
  try {
    const CheckpointIndex index = read_index(dir);
    for (const auto& f : index.files) {
      const fs::path p = fs::path(dir) / f.path;
      std::error_code ec;
      const auto size = fs::file_size(p, ec);
      if (ec) return fmt::format("shard file {} is missing", p.string());
      if (size != f.bytes)
        return fmt::format("shard file {} is {} bytes but the index records {} ({})", p.string(),
                           size, f.bytes, size < f.bytes ? "truncated" : "overlong");
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::vector<CheckpointStatus> list_checkpoints(const std::string& root) {
  std::vector<CheckpointStatus> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    auto step = parse_step_dir_name(entry.path().filename().string());
    if (!step) continue;
    CheckpointStatus s;
    s.dir = entry.path().string();
    s.step = *step;
    s.problem = completeness_problem(s.dir);
    s.complete = s.problem.empty();
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

void warn_stderr(const std::string& message) { std::fprintf(stderr, "warning: %s\n", message.c_str()); }

std::optional<CheckpointStatus> find_latest_complete(const std::string& root, const WarnFn& warn) {
  auto all = list_checkpoints(root);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->complete) return *it;
    if (warn) warn(fmt::format("skipping incomplete checkpoint {}: {}", it->dir, it->problem));
  }
  return std::nullopt;
}

std::string resolve_step_dir(const std::string& path, const WarnFn& warn) {
  const fs::path p(path);
  if (fs::exists(p / kIndexFileName) || parse_step_dir_name(p.filename().string())) return path;
  auto latest = find_latest_complete(path, warn);
  MT_CHECK(latest, "{} holds no complete checkpoint (no step_* directory with an {})", path,
           kIndexFileName);
  return latest->dir;
}

void write_latest_pointer(const std::string& root, int64_t step) {
  const std::string text = step_dir_name(step) + "\n";
  write_file_atomic((fs::path(root) / kLatestFileName).string(), text.data(), text.size());
}

std::optional<int64_t> read_latest_pointer(const std::string& root) {
  std::ifstream in(fs::path(root) / kLatestFileName);
  std::string name;
  if (!(in >> name)) return std::nullopt;
  return parse_step_dir_name(name);
}

std::vector<std::string> apply_retention(const std::string& root, int keep_last,
                                         int64_t milestone_every) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  std::vector<CheckpointStatus> complete;
  for (auto& s : list_checkpoints(root))
    if (s.complete) complete.push_back(std::move(s));
  const size_t keep_from = complete.size() > static_cast<size_t>(keep_last)
                               ? complete.size() - static_cast<size_t>(keep_last) : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    const auto& s = complete[i];
    if (milestone_every > 0 && s.step % milestone_every == 0) continue;
    // The index goes first, so an interrupted removal leaves a torn
    // directory (skipped by readers), never one that looks complete.
    std::error_code ec;
    fs::remove(fs::path(s.dir) / kIndexFileName, ec);
    fs::remove_all(s.dir, ec);
    removed.push_back(s.dir);
  }
  return removed;
}

}  // namespace meshtrain::ckpt
