// `meshtrain ckpt inspect|export|import`: look inside sharded checkpoints,
// turn one into a single model file, or make a step-0 checkpoint from one.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/crc32c.h"
#include "meshtrain/data/tokenizer_files.h"
#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {

namespace {

namespace fs = std::filesystem;
using namespace meshtrain::ckpt;
using json = nlohmann::json;

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string range_str(ElemRange r) { return fmt::format("[{}, {})", r.begin, r.end); }

struct Inspection {
  std::string dir;
  int64_t step = 0;
  std::string status;  // complete | incomplete | corrupt
  std::string problem;
  std::optional<CheckpointIndex> index;
  uint64_t bytes = 0;
};

// Completeness, then (when verify) every file's checksum.
Inspection inspect_one(const std::string& dir, int64_t step, bool verify) {
  Inspection in;
  in.dir = dir;
  in.step = step;
  in.problem = completeness_problem(dir);
  if (!in.problem.empty()) {
    in.status = "incomplete";
    return in;
  }
  try {
    CheckpointReader reader = CheckpointReader::open(dir, {verify});
    in.index = reader.index();
    for (const auto& f : in.index->files) in.bytes += f.bytes;
    if (verify) reader.verify_all();
    in.status = "complete";
  } catch (const Error& e) {
    in.status = "corrupt";
    in.problem = e.what();
  }
  return in;
}

json inspection_json(const Inspection& in) {
  json j = {{"dir", in.dir}, {"step", in.step}, {"status", in.status}, {"problem", in.problem},
            {"bytes", in.bytes}};
  if (in.index) {
    j["world_size"] = in.index->world_size;
    j["mesh"] = {{"dp", in.index->mesh.dp}, {"tp", in.index->mesh.tp}, {"pp", in.index->mesh.pp}};
    j["model"] = in.index->model;
    j["num_tensors"] = in.index->tensors.size();
  }
  return j;
}

void print_details(const Inspection& in, bool verify) {
  const CheckpointIndex& x = *in.index;
  fmt::print("checkpoint {}\n", in.dir);
  fmt::print("  status     {}{}\n", in.status, verify ? " (every file's CRC32C verified)" : " (checksums not verified)");
  fmt::print("  step       {} (optimizer steps {}, lr schedule step {})\n", x.step, x.optimizer_steps, x.lr_step);
  fmt::print("  created    {}\n", x.created_utc);
  fmt::print("  world      {} rank(s), mesh dp={} tp={} pp={}\n", x.world_size, x.mesh.dp, x.mesh.tp, x.mesh.pp);
  fmt::print("  model      {}\n", model_spec_from_json(x.model, in.dir)->describe());
  fmt::print("  size       {} in {} file(s)\n", human_bytes(in.bytes), x.files.size());
  fmt::print("  optimizer  {}\n", x.optimizer.is_object() && x.optimizer.contains("type")
                                      ? x.optimizer.dump() : std::string("none saved"));
  fmt::print("  loss scaler {}\n", x.loss_scaler.is_null() ? "none" : x.loss_scaler.dump());
  fmt::print("buffers\n");
  for (const auto& b : x.buffers)
    fmt::print("  {:<12} {:>12} x {:<4} {}\n", b.name, b.numel, dtype_name(b.dtype),
               human_bytes(static_cast<uint64_t>(b.numel) * dtype_size(b.dtype)));
  fmt::print("files\n");
  for (const auto& f : x.files) {
    std::string ranges;
    for (const auto& [name, r] : f.ranges) ranges += fmt::format(" {}{}", name, range_str(r));
    fmt::print("  {:<28} rank {:<3} {:>10} crc32c {}{}\n", f.path, f.rank, human_bytes(f.bytes),
               crc_hex(f.crc32c), ranges);
  }
  fmt::print("ranks\n");
  for (const auto& r : x.ranks)
    fmt::print("  rank {:<3} data position epoch {} batch {}{}\n", r.rank, r.data_position.epoch,
               r.data_position.batch, r.rng.is_null() ? "" : ", rng state saved");
  fmt::print("tensors ({})\n", x.tensors.size());
  for (const auto& t : x.tensors)
    fmt::print("  {:<28} {:<14} {:<4} {} {}\n", t.name, shape_str(t.shape), dtype_name(t.dtype),
               t.buffer, range_str(t.range));
}

// Exit status 1 when any checkpoint inspected is incomplete or corrupt.
void run_inspect(const std::string& path, bool verify, bool as_json) {
  MT_CHECK(fs::is_directory(path), "{} is not a directory", path);
  const fs::path p(path);
  const bool is_step = fs::exists(p / kIndexFileName) || parse_step_dir_name(p.filename().string());
  std::vector<Inspection> all;
  if (is_step) {
    auto step = parse_step_dir_name(p.filename().string());
    all.push_back(inspect_one(path, step.value_or(-1), verify));
  } else {
    for (const auto& s : list_checkpoints(path)) all.push_back(inspect_one(s.dir, s.step, verify));
    MT_CHECK(!all.empty(), "{} holds no checkpoints (no step_* directories)", path);
  }
  bool bad = false;
  for (const auto& in : all) bad = bad || in.status != "complete";
  if (as_json) {
    for (const auto& in : all) fmt::print("{}\n", inspection_json(in).dump());
  } else if (is_step && all[0].index) {
    print_details(all[0], verify);
    if (!all[0].problem.empty()) fmt::print("problem: {}\n", all[0].problem);
  } else {
    if (!is_step) {
      auto latest = read_latest_pointer(path);
      fmt::print("checkpoint root {} (latest -> {})\n", path,
                 latest ? step_dir_name(*latest) : std::string("none"));
    }
    fmt::print("{:>10}  {:<10}  {:>5}  {:>10}  {}\n", "step", "status", "world", "size", "model / problem");
    for (const auto& in : all) {
      const std::string what = in.index && in.problem.empty() ? model_spec_from_json(in.index->model, in.dir)->describe() : in.problem;
      fmt::print("{:>10}  {:<10}  {:>5}  {:>10}  {}\n", in.step, in.status,
                 in.index ? std::to_string(in.index->world_size) : "-",
                 in.index ? human_bytes(in.bytes) : "-", what);
    }
  }
  if (bad) throw Error(fmt::format("{} has incomplete or corrupt checkpoints (see above)", path));
}

}  // namespace

void register_ckpt(CLI::App& app) {
  CLI::App* ckpt_cmd = app.add_subcommand("ckpt", "Inspect, export and import sharded checkpoints");
  ckpt_cmd->require_subcommand(1);

  struct InspectOpts {
    std::string dir;
    bool no_verify = false, json = false;
  };
  auto io = std::make_shared<InspectOpts>();
  CLI::App* inspect = ckpt_cmd->add_subcommand(
      "inspect", "Steps, world size, shapes, sizes, mesh and integrity of a checkpoint root or step directory");
  inspect->add_option("dir", io->dir, "Checkpoint root or step_* directory")->required();
  inspect->add_flag("--no-verify", io->no_verify, "Skip reading every file for its checksum");
  inspect->add_flag("--json", io->json, "One JSON object per checkpoint");
  inspect->callback([io] { run_inspect(io->dir, !io->no_verify, io->json); });

  struct ExportOpts {
    std::string dir, to, format = "hf", tokenizer, base;
    bool no_verify = false;
  };
  auto eo = std::make_shared<ExportOpts>();
  CLI::App* exp = ckpt_cmd->add_subcommand("export", "Write a checkpoint's parameters as one model file");
  exp->add_option("dir", eo->dir, "Checkpoint root (its newest complete checkpoint) or step_* directory")
      ->required();
  exp->add_option("--to", eo->to, "Output .safetensors file")->required();
  exp->add_option("--format", eo->format, "hf (Hugging Face GPT-2 names, for transformers) or meshtrain")
      ->capture_default_str();
  exp->add_flag("--no-verify", eo->no_verify, "Skip checksum verification");
  exp->add_option("--tokenizer", eo->tokenizer,
                  "tokenizer.json (or its folder) to copy beside the model, with "
                  "tokenizer_config.json and special_tokens_map.json when present");
  exp->add_option("--base", eo->base,
                  "LoRA checkpoints: the frozen base model (default: the init_from the run "
                  "recorded); the export is the base with the adapters merged in");
  exp->callback([eo] {
    const ExportFormat format = parse_export_format(eo->format);
    const std::string dir = resolve_step_dir(eo->dir);
    // Checked before the model is written, so a wrong path loses nothing.
    if (!eo->tokenizer.empty()) data::checked_tokenizer_json(eo->tokenizer);
    export_checkpoint(dir, eo->to, format, !eo->no_verify, eo->base);
    fmt::print("exported {} to {} ({} format)\n", dir, eo->to,
               format == ExportFormat::HuggingFace ? "hf" : "meshtrain");
    if (!eo->tokenizer.empty()) {
      const std::filesystem::path out(eo->to);
      // A model folder (Llama) or a file's folder (GPT-2 safetensors).
      const std::string folder = std::filesystem::is_directory(out) ? out.string()
                                 : out.has_parent_path()           ? out.parent_path().string()
                                                                   : ".";
      for (const std::string& f : data::copy_tokenizer_files(eo->tokenizer, folder))
        fmt::print("tokenizer file {}\n", f);
    }
  });

  struct ImportOpts {
    std::string model, out;
    int n_head = 0;
  };
  auto im = std::make_shared<ImportOpts>();
  CLI::App* imp = ckpt_cmd->add_subcommand(
      "import", "Make a step-0 checkpoint from a model file (meshtrain, Hugging Face or llm.c)");
  imp->add_option("model", im->model, "Model file")->required();
  imp->add_option("--out", im->out, "Checkpoint root to create")->required();
  imp->add_option("--n-head", im->n_head, "Attention heads, when the file does not say");
  imp->callback([im] {
    const std::string dir = import_model_file(im->model, im->out, im->n_head);
    fmt::print("imported {} as {}\n", im->model, dir);
  });
}

}  // namespace meshtrain::cli
