// meshtrain's GPT against the PyTorch reference (tools/make_gpt_fixture.py):
// forward logits, per-position and mean losses, and every parameter gradient
// of the `tiny` preset on fixed weights and batches.
// Tolerance: fixture_compare.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "fixture_compare.h"
#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt.h"
#include "test_paths.h"

using namespace meshtrain;
using meshtrain::testing::expect_close;

namespace {

std::string fixture(const std::string& name) {
  return std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/" + name;
}

const SafetensorsFile& reference() {
  static const SafetensorsFile f = SafetensorsFile::open(fixture("gpt_tiny_reference.safetensors"));
  return f;
}

void load_reference_params(GPT& model) {
  for (const auto& [name, t] : model.params().named()) reference().read_into(name, t);
}

// Runs one reference case (tensor name prefix) through forward and backward.
void check_case(const std::string& prefix) {
  const auto& ref = reference();
  GPT model(gpt_preset("tiny"));
  load_reference_params(model);
  Tensor inputs = ref.read(prefix + "inputs"), targets = ref.read(prefix + "targets");
  const int B = static_cast<int>(inputs.dim(0)), T = static_cast<int>(inputs.dim(1));
  const int Vp = model.config().padded_vocab;
  Tensor want_logits = ref.read(prefix + "logits");
  ASSERT_EQ(want_logits.shape(), (Shape{B, T, Vp}));

  model.zero_grad();
  float loss = model.forward(inputs.data<int32_t>(), targets.data<int32_t>(), B, T);
  float want_loss = ref.read(prefix + "loss").data<float>()[0];
  expect_close(prefix + "loss", &loss, &want_loss, 1);
  expect_close(prefix + "logits", model.logits(), want_logits.data<float>(), want_logits.numel());
  expect_close(prefix + "losses", model.losses(), ref.read(prefix + "losses").data<float>(),
               int64_t{B} * T, targets.data<int32_t>());

  model.backward();
  for (const auto& [name, g] : model.grads().named()) {
    Tensor want = ref.read(prefix + "grad." + name);
    ASSERT_EQ(want.shape(), g.shape()) << name;
    expect_close(prefix + "grad." + name, g.data<float>(), want.data<float>(), want.numel());
  }
}

}  // namespace

TEST(gpt_fixture, full_context_matches_pytorch) { check_case(""); }

TEST(gpt_fixture, shorter_context_matches_pytorch) { check_case("t11."); }

TEST(gpt_fixture, ignored_targets_match_pytorch) { check_case("masked."); }

// The Hugging Face layout of the same weights (Conv1D (in, out), 61 wte rows)
// must load into exactly the reference parameters.
TEST(gpt_fixture, hf_fixture_loads_the_reference_weights) {
  const std::string path = fixture("gpt_tiny_hf.safetensors");
  const GPTConfig tiny = gpt_preset("tiny");
  GPTConfig cfg = read_gpt_config(path, /*n_head_hint=*/tiny.n_head);
  EXPECT_EQ(cfg.n_layer, tiny.n_layer);
  EXPECT_EQ(cfg.n_embd, tiny.n_embd);
  EXPECT_EQ(cfg.seq_len, tiny.seq_len);
  EXPECT_EQ(cfg.vocab_size, tiny.vocab_size);
  EXPECT_EQ(cfg.padded_vocab, tiny.padded_vocab);

  GPT model(cfg);
  load_gpt_weights(path, model.params(), cfg);
  for (const auto& [name, t] : model.params().named()) {
    Tensor want = reference().read(name);
    ASSERT_EQ(want.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), want.raw(), want.nbytes()), 0) << name << " differs";
  }
}

// A Hugging Face checkpoint folder: the head count comes from config.json
// beside the weights (C = 16 is no standard GPT-2 width, so nothing else says it).
TEST(gpt_fixture, hf_head_count_comes_from_config_json_beside_the_weights) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mt_hf_gpt2_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture("gpt_tiny_hf.safetensors"), dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string weights = (dir / "model.safetensors").string();
  EXPECT_THROW(read_gpt_config(weights), Error) << "without config.json the heads are unknown";
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt2", "n_head": 2, "n_embd": 16})";
  EXPECT_EQ(read_gpt_config(weights).n_head, 2);
  EXPECT_THROW(read_gpt_config(weights, /*n_head_hint=*/4), Error) << "a contradicting hint";
  std::filesystem::remove_all(dir);
}
