// The checkpoint root: <root>/step_<%08d>/ per checkpoint, <root>/latest
// naming the newest complete one. A step directory is complete when its
// index.json is present and valid and every file it lists is present with
// the recorded size; anything else is torn (a save that died) and skipped.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::ckpt {

inline constexpr const char* kLatestFileName = "latest";

std::string step_dir_name(int64_t step);  // "step_00000100"
std::string step_dir(const std::string& root, int64_t step);
// The step of a "step_%08d" directory name, or nullopt.
std::optional<int64_t> parse_step_dir_name(const std::string& name);

struct CheckpointStatus {
  std::string dir;
  int64_t step = 0;
  bool complete = false;
  std::string problem;  // why it is not complete ("" when complete)
};

// "" when `dir` holds a complete checkpoint (index valid, files present with
// their recorded sizes; checksums are not read), else the problem.
std::string completeness_problem(const std::string& dir);

// Every step_* directory under root, by ascending step.
std::vector<CheckpointStatus> list_checkpoints(const std::string& root);

using WarnFn = std::function<void(const std::string&)>;
// Prints "warning: ..." to stderr.
void warn_stderr(const std::string& message);

// The newest complete checkpoint; torn ones newer than it are reported to
// `warn` and skipped. nullopt when there is none.
std::optional<CheckpointStatus> find_latest_complete(const std::string& root,
                                                     const WarnFn& warn = warn_stderr);

// A step directory given either itself or a root (then its newest complete
// checkpoint). Throws when a root holds no complete checkpoint.
std::string resolve_step_dir(const std::string& path, const WarnFn& warn = warn_stderr);

// <root>/latest, written atomically, names the step directory.
void write_latest_pointer(const std::string& root, int64_t step);
std::optional<int64_t> read_latest_pointer(const std::string& root);

// Keeps the newest `keep_last` complete checkpoints (0 = keep all) and every
// step that is a multiple of `milestone_every` (0 = none); removes the other
// complete ones, never the newest complete one and never incomplete ones (a
// save may still be writing them). Returns the directories removed.
std::vector<std::string> apply_retention(const std::string& root, int keep_last,
                                         int64_t milestone_every);

}  // namespace meshtrain::ckpt
