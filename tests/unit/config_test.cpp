// Config layer: defaults, file and --set overrides, unknown keys with
// suggestions, type and range errors, malformed JSON, resolved round trip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshtrain/config/config_loader.h"
#include "meshtrain/config/config_schema.h"
#include "meshtrain/config/suggest.h"
#include "meshtrain/config/train_config.h"
#include "meshtrain/core/error.h"
#include "test_paths.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    std::string tmpl = (fs::temp_directory_path() / "mt_config_test_XXXXXX.json").string();
    const int fd = ::mkstemps(tmpl.data(), 5);
    if (fd < 0) throw std::runtime_error("mkstemps failed");
    ::close(fd);
    path_ = tmpl;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The message of the meshtrain::Error that f throws ("" and a failure if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a meshtrain::Error";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (needle) << " not in: " << (haystack)

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(config, defaults_load) {
  const TrainConfig c = load_config("");
  const TrainConfig d;
  EXPECT_EQ(c.model.preset, "char-6L");
  EXPECT_EQ(c.train.micro_batch, 8);
  EXPECT_EQ(c.train.grad_accum, 1);
  EXPECT_EQ(c.train.steps, 1000);
  EXPECT_DOUBLE_EQ(c.train.lr, 6e-4);
  EXPECT_DOUBLE_EQ(c.train.min_lr_ratio, 0.1);
  EXPECT_EQ(c.train.warmup, 100);
  EXPECT_EQ(c.train.schedule, "cosine");
  EXPECT_DOUBLE_EQ(c.train.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.train.eps, 1e-8);
  EXPECT_EQ(c.train.eval_batches, 20);
  EXPECT_EQ(c.train.seed, 1u);
  EXPECT_EQ(c.parallel.dp, 0);  // auto
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.precision, "fp32");
  EXPECT_EQ(c.recompute, "none");
  EXPECT_FALSE(c.deterministic);
  EXPECT_EQ(c.comm.transport, "auto");
  EXPECT_DOUBLE_EQ(c.comm.timeout_s, 300);
  EXPECT_EQ(c.telemetry.dir, "runs/default");
  EXPECT_EQ(c.checkpoint.dir, "runs/default/ckpt");
  EXPECT_EQ(c.out, "runs/default/model.safetensors");
  EXPECT_EQ(c.train.lr, d.train.lr);
  EXPECT_EQ(resolved_json(c)["parallel"]["dp"], "auto");
}

TEST(config, file_and_overrides_apply_in_order) {
  TempFile f(R"({
    // comments are allowed
    "model": {"preset": "tiny", "seq_len": 64},
    "data": {"train": "data/a_train_*.bin"},
    "train": {"lr": 1e-3, "steps": 1e3, "micro_batch": 4},
    "run_name": "fromfile"
  })");
  const TrainConfig c = load_config(
      f.path(), {"train.lr=3e-4", "zero.stage=2", "model.preset=char-2L", "parallel.dp=4",
                 "deterministic=true", "recompute=every:2", "data.val=\"data/a_val_*.bin\"",
                 "init_from=null", "run_name=2024", "telemetry.trace=true", "comm.timeout_s=60"});
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);  // --set beats the file
  EXPECT_EQ(c.train.steps, 1000);      // 1e3 from the file is an integer
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.model.preset, "char-2L");
  EXPECT_EQ(c.model.seq_len, 64);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_TRUE(c.deterministic);
  EXPECT_EQ(c.recompute, "every:2");
  EXPECT_EQ(parse_recompute(c.recompute).every, 2);
  EXPECT_EQ(c.data.train, "data/a_train_*.bin");
  EXPECT_EQ(c.data.val, "data/a_val_*.bin");
  EXPECT_EQ(c.init_from, "");
  EXPECT_EQ(c.run_name, "2024");  // stays a string
  EXPECT_TRUE(c.telemetry.trace);
  EXPECT_DOUBLE_EQ(c.comm.timeout_s, 60);
  EXPECT_EQ(c.telemetry.dir, "runs/2024");
  EXPECT_EQ(c.out, "runs/2024/model.safetensors");
}

TEST(config, unknown_key_in_file_is_an_error_with_suggestion) {
  TempFile f(R"({"train": {"lrr": 0.001}})");
  const std::string msg = error_of([&] { load_config(f.path()); });
  EXPECT_CONTAINS(msg, "unknown config key 'train.lrr' in " + f.path() +
                           " (did you mean 'train.lr'?)");
  TempFile g(R"({"trian": {"lr": 0.001}})");
  EXPECT_CONTAINS(error_of([&] { load_config(g.path()); }), "(did you mean 'train'?)");
  TempFile h(R"({"checkpoint": {"evry": 5}})");
  EXPECT_CONTAINS(error_of([&] { load_config(h.path()); }), "did you mean 'checkpoint.every'?");
  TempFile i(R"({"zzzzzzzz": 1})");
  const std::string none = error_of([&] { load_config(i.path()); });
  EXPECT_CONTAINS(none, "unknown config key 'zzzzzzzz'");
  EXPECT_EQ(none.find("did you mean"), std::string::npos);
}

TEST(config, unknown_key_in_set_is_an_error_with_suggestion) {
  try {
    load_config("", {"train.lrr=3e-4"});
    ADD_FAILURE() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_CONTAINS(e.what(), "unknown config key 'train.lrr' in --set train.lrr=3e-4 "
                              "(did you mean 'train.lr'?)");
  }
  EXPECT_CONTAINS(error_of([] { load_config("", {"lr=3e-4"}); }), "did you mean 'train.lr'?");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.warmpu=10"}); }),
                  "did you mean 'train.warmup'?");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.lr.x=1"}); }), "unknown config key");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train=5"}); }), "is a section");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.lr"}); }), "not key=value");
}

TEST(config, wrong_type_is_an_error) {
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.steps=abc"}); }),
                  "train.steps must be an integer, got \"abc\" (from --set train.steps=abc)");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.steps=1.5"}); }),
                  "train.steps must be an integer, got 1.5");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.lr=fast"}); }),
                  "train.lr must be a number, got \"fast\"");
  EXPECT_CONTAINS(error_of([] { load_config("", {"deterministic=yes"}); }),
                  "deterministic must be true or false, got \"yes\"");
  TempFile f(R"({"train": {"micro_batch": "8"}})");
  EXPECT_CONTAINS(error_of([&] { load_config(f.path()); }),
                  "train.micro_batch must be an integer, got \"8\" (from " + f.path() + ")");
  TempFile p(R"({"model": {"preset": 3}})");
  EXPECT_CONTAINS(error_of([&] { load_config(p.path()); }), "model.preset must be a string, got 3");
  TempFile g(R"({"train": 5})");
  EXPECT_CONTAINS(error_of([&] { load_config(g.path()); }), "'train' in " + g.path() +
                                                                 " must be an object");
  TempFile h(R"([1, 2])");
  EXPECT_CONTAINS(error_of([&] { load_config(h.path()); }), "must be a JSON object");
  EXPECT_CONTAINS(error_of([] { load_config("", {"parallel.dp=many"}); }),
                  "parallel.dp must be \"auto\" or an integer >= 1");
}

TEST(config, range_checks) {
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.micro_batch=0"}); }),
                  "train.micro_batch must be >= 1, got 0");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.lr=0"}); }), "train.lr must be > 0");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.schedule=cosin"}); }),
                  "train.schedule must be one of cosine, linear, constant; got \"cosin\" "
                  "(did you mean 'cosine'?)");
  EXPECT_CONTAINS(error_of([] { load_config("", {"precision=fp64"}); }),
                  "precision must be one of fp32, bf16, fp16");
  EXPECT_CONTAINS(error_of([] { load_config("", {"zero.stage=4"}); }), "zero.stage must be <= 3");
  EXPECT_CONTAINS(error_of([] { load_config("", {"recompute=every:0"}); }), "recompute must be");
  EXPECT_CONTAINS(error_of([] { load_config("", {"recompute=ful"}); }), "did you mean 'full'?");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.beta1=1"}); }), "train.beta1 must be in [0, 1)");
  EXPECT_CONTAINS(error_of([] { load_config("", {"parallel.tp=0"}); }), "parallel.tp must be >= 1");
  EXPECT_CONTAINS(error_of([] { load_config("", {"comm.transport=carrier-pigeon"}); }),
                  "comm.transport must be one of");
  EXPECT_CONTAINS(error_of([] { load_config("", {"run_name=a/b"}); }), "run_name must be");
  EXPECT_CONTAINS(error_of([] { load_config("", {"model.n_head=5", "model.n_embd=384"}); }),
                  "divisible");
  // No preset and no dimensions: the model is unknown.
  EXPECT_CONTAINS(error_of([] { load_config("", {"model.preset=", "model.n_layer=2"}); }),
                  "missing model.n_head, model.n_embd, model.seq_len, model.vocab_size");
  const TrainConfig ok = load_config("", {"model.preset=", "model.n_layer=2", "model.n_head=2",
                                          "model.n_embd=32", "model.seq_len=16",
                                          "model.vocab_size=256"});
  EXPECT_EQ(ok.model.n_embd, 32);
}

TEST(config, malformed_json_reports_line_and_column) {
  TempFile f("{\n  \"train\": {\n    \"lr\": 1e-3,,\n  }\n}\n");
  const std::string msg = error_of([&] { load_config(f.path()); });
  EXPECT_CONTAINS(msg, f.path() + ":3:16: malformed JSON");
  TempFile g("{\"train\": {\"lr\": 1e-3}");  // unclosed
  EXPECT_CONTAINS(error_of([&] { load_config(g.path()); }), g.path() + ":1:");
  EXPECT_CONTAINS(error_of([] { load_config("/no/such/config.json"); }),
                  "cannot read config file '/no/such/config.json'");
}

TEST(config, resolved_json_round_trips) {
  const TrainConfig c = load_config("", {"train.lr=2e-4", "parallel.dp=2", "zero.stage=1",
                                         "run_name=rt", "recompute=selective",
                                         "train.seed=123456789012"});
  const nlohmann::json j = resolved_json(c);
  EXPECT_EQ(j["train"]["seed"], 123456789012ull);
  TempFile f(j.dump(2));
  EXPECT_EQ(resolved_json(load_config(f.path())), j);
  EXPECT_EQ(resolved_json(config_from_json(j, "checkpoint")), j);
  // The pretty form is the same JSON, in the documented order.
  EXPECT_EQ(nlohmann::json::parse(to_string(c)), j);
  EXPECT_LT(to_string(c).find("\"model\""), to_string(c).find("\"train\""));
  // Every key of the defaults is present.
  EXPECT_EQ(default_config_json().size(), j.size());
}

TEST(config, example_configs_load) {
  const std::string dir = std::string(MESHTRAIN_SOURCE_DIR) + "/configs/";
  const TrainConfig a = load_config(dir + "char6l_fortunes.json");
  EXPECT_EQ(a.model.preset, "char-6L");
  EXPECT_EQ(a.data.train, "data/fortunes/train_*.bin");
  EXPECT_EQ(a.telemetry.dir, "runs/char6l_fortunes");
  EXPECT_DOUBLE_EQ(a.train.lr, 2e-3);
  const TrainConfig b = load_config(dir + "tiny_synth.json");
  EXPECT_EQ(b.model.preset, "tiny");
  EXPECT_EQ(b.model.vocab_size, 256);
  EXPECT_EQ(b.data.train, "data/synth/train_*.bin");
}

// The schema is the one description: every key it lists is a key of the
// defaults and of the written form (and nothing else is), and each key's rule
// refuses a value of no type it accepts, naming the key.
TEST(config, every_schema_key_is_written_and_checked) {
  std::vector<std::string> schema;
  for (const ConfigKey& k : config_schema()) schema.push_back(k.path);
  // The known keys' leaves (config_key_paths also lists the sections).
  std::vector<std::string> keys, sorted_schema = schema;
  const nlohmann::json defaults = default_config_json();
  for (const std::string& path : config_key_paths()) {
    std::string pointer = "/" + path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    if (!defaults.at(nlohmann::json::json_pointer(pointer)).is_object()) keys.push_back(path);
  }
  std::sort(keys.begin(), keys.end());
  std::sort(sorted_schema.begin(), sorted_schema.end());
  EXPECT_EQ(sorted_schema, keys);
  // The pretty form lists them in the schema's order.
  const std::string pretty = to_string(load_config("", {}));
  size_t at = 0;
  for (const std::string& path : schema) {
    const std::string leaf = "\"" + path.substr(path.rfind('.') + 1) + "\":";
    const size_t found = pretty.find(leaf, at);
    ASSERT_NE(found, std::string::npos) << path << " out of order";
    at = found;
  }
  for (const std::string& path : schema) {
    nlohmann::json j = default_config_json();
    nlohmann::json* leaf = &j;
    size_t start = 0;
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', start)) {
      leaf = &(*leaf)[path.substr(start, dot - start)];
      start = dot + 1;
    }
    (*leaf)[path.substr(start)] = nlohmann::json::array({1});
    EXPECT_CONTAINS(error_of([&] { config_from_json(j, "test"); }), path + " must");
  }
}

TEST(config, docs_describe_every_key) {
  const std::string doc = read_text(std::string(MESHTRAIN_SOURCE_DIR) + "/docs/CONFIG.md");
  ASSERT_FALSE(doc.empty());
  for (const std::string& key : config_key_paths())
    EXPECT_CONTAINS(doc, "`" + key + "`");
}

TEST(config, parse_recompute_policies) {
  using Kind = RecomputePolicy::Kind;
  EXPECT_EQ(parse_recompute("none").kind, Kind::None);
  EXPECT_EQ(parse_recompute("full").kind, Kind::Full);
  EXPECT_EQ(parse_recompute("selective").kind, Kind::Selective);
  EXPECT_EQ(parse_recompute("every:3").kind, Kind::EveryK);
  EXPECT_EQ(parse_recompute("every:3").every, 3);
  EXPECT_THROW(parse_recompute("every:"), Error);
  EXPECT_THROW(parse_recompute("every:2x"), Error);
  EXPECT_THROW(parse_recompute("some"), Error);
}

TEST(config, suggestions_by_edit_distance) {
  EXPECT_EQ(edit_distance("lr", "lr"), 0);
  EXPECT_EQ(edit_distance("lrr", "lr"), 1);
  EXPECT_EQ(edit_distance("warmpu", "warmup"), 1);  // one transposition
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  const std::vector<std::string> keys = {"train", "train.lr", "train.steps", "zero.stage"};
  EXPECT_EQ(closest_match("train.stesp", keys), "train.steps");
  EXPECT_EQ(closest_match("stage", keys), "zero.stage");
  EXPECT_EQ(closest_match("completely_different", keys), std::nullopt);
}

TEST(config, lr_scaling_and_bucket_keys) {
  const TrainConfig d = load_config("");
  EXPECT_EQ(d.train.lr_scaling, "none");
  EXPECT_EQ(d.train.lr_base_batch, 0);
  EXPECT_DOUBLE_EQ(d.parallel.bucket_mb, 25);
  EXPECT_DOUBLE_EQ(d.parallel.first_bucket_mb, 1);
  EXPECT_DOUBLE_EQ(scaled_lr(d.train, 64), d.train.lr);  // none: the batch does not matter

  const TrainConfig lin = load_config("", {"train.lr=1e-3", "train.lr_scaling=linear",
                                           "train.lr_base_batch=8", "parallel.bucket_mb=0.5"});
  EXPECT_DOUBLE_EQ(scaled_lr(lin.train, 32), 4e-3);
  EXPECT_DOUBLE_EQ(lin.parallel.bucket_mb, 0.5);
  const TrainConfig sq = load_config("", {"train.lr=1e-3", "train.lr_scaling=sqrt",
                                          "train.lr_base_batch=8"});
  EXPECT_DOUBLE_EQ(scaled_lr(sq.train, 32), 2e-3);
  EXPECT_EQ(resolved_json(sq)["train"]["lr_scaling"], "sqrt");

  EXPECT_CONTAINS(error_of([] { load_config("", {"train.lr_scaling=linear"}); }),
                  "train.lr_base_batch must be >= 1 when train.lr_scaling is \"linear\"");
  EXPECT_CONTAINS(error_of([] { load_config("", {"train.lr_scaling=lineal"}); }),
                  "did you mean 'linear'?");
  EXPECT_CONTAINS(error_of([] { load_config("", {"parallel.bucket_mb=0"}); }),
                  "parallel.bucket_mb must be in");
  EXPECT_CONTAINS(error_of([] { load_config("", {"parallel.first_bucket_mb=-1"}); }),
                  "parallel.first_bucket_mb must be in");
}

TEST(config, checkpoint_resume_and_milestones) {
  const TrainConfig d = load_config("", {});
  EXPECT_EQ(d.checkpoint.resume, "auto");
  EXPECT_EQ(d.checkpoint.milestone_every, 0);
  const TrainConfig c = load_config("", {"checkpoint.every=4", "checkpoint.milestone_every=100",
                                         "checkpoint.resume=runs/x/ckpt/step_00000008"});
  EXPECT_EQ(c.checkpoint.every, 4);
  EXPECT_EQ(c.checkpoint.milestone_every, 100);
  EXPECT_EQ(c.checkpoint.resume, "runs/x/ckpt/step_00000008");
  EXPECT_EQ(resolved_json(c)["checkpoint"]["resume"], "runs/x/ckpt/step_00000008");
  EXPECT_CONTAINS(error_of([] { load_config("", {"checkpoint.milestone_every=-1"}); }),
                  "checkpoint.milestone_every must be >= 0");
  EXPECT_CONTAINS(error_of([] { load_config("", {"checkpoint.resume=null"}); }),
                  "checkpoint.resume");
  TempFile f(R"({"checkpoint": {"resum": "never"}})");
  EXPECT_CONTAINS(error_of([&] { load_config(f.path()); }), "did you mean 'checkpoint.resume'?");
}
