// The Llama family against transformers' LlamaForCausalLM
// (tools/make_llama_fixture.py: float64 reference, grouped-query attention,
// untied head): logits, per-position and mean losses and every parameter
// gradient of `llama-tiny`, within 1e-5 of each tensor's largest value
// (fixture_compare.h). Then the model's own
// properties: every recompute policy gives bit-identical losses and
// gradients, the predicted activation bytes are what the allocator counts,
// the parameter hooks follow the layout's documented order, and grouped-query
// attention equals full multi-head attention with the k/v heads repeated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fixture_compare.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/io/hf_llama.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/llama.h"
#include "meshtrain/nn/model_registry.h"
#include "test_paths.h"

using namespace meshtrain;
using meshtrain::testing::expect_close;

namespace {

const SafetensorsFile& reference() {
  static const SafetensorsFile f = SafetensorsFile::open(
      std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/llama_tiny_reference.safetensors");
  return f;
}

std::unique_ptr<Model> reference_model() {
  auto model = model_preset("llama-tiny")->build();
  for (const ParamInfo& p : model->layout().params) reference().read_into(p.name, model->param(p));
  return model;
}

void check_case(const std::string& prefix) {
  const auto& ref = reference();
  auto model = reference_model();
  Tensor inputs = ref.read(prefix + "inputs"), targets = ref.read(prefix + "targets");
  const int B = static_cast<int>(inputs.dim(0)), T = static_cast<int>(inputs.dim(1));
  Tensor want_logits = ref.read(prefix + "logits");
  ASSERT_EQ(want_logits.shape(), (Shape{B, T, model->logits_stride()}));
  model->zero_grad();
  const float loss = model->forward({inputs.data<int32_t>(), targets.data<int32_t>(), B, T});
  const float want_loss = ref.read(prefix + "loss").data<float>()[0];
  expect_close(prefix + "loss", &loss, &want_loss, 1);
  expect_close(prefix + "logits", model->logits(), want_logits.data<float>(), want_logits.numel());
  model->backward(1.0f);
  for (const ParamInfo& p : model->layout().params) {
    Tensor want = ref.read(prefix + "grad." + p.name);
    ASSERT_EQ(want.shape(), p.shape) << p.name;
    expect_close(prefix + "grad." + p.name, model->grad(p).data<float>(), want.data<float>(),
                 want.numel());
  }
}

std::vector<int32_t> tokens(int64_t n, int V, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = static_cast<int32_t>(r.below(V));
  return v;
}

struct StepResult {
  float loss;
  std::vector<float> grads;
};

StepResult step(const LlamaConfig& cfg, const Recompute& rc, int B, int T) {
  Llama m(cfg);
  m.init_weights(3);
  m.set_recompute(rc);
  const auto in = tokens(B * T, cfg.vocab_size, 4), tg = tokens(B * T, cfg.vocab_size, 5);
  StepResult r;
  r.loss = m.forward({in.data(), tg.data(), B, T});
  m.backward(1.0f);
  const float* g = m.grad_buffer().data<float>();
  r.grads.assign(g, g + m.grad_buffer().numel());
  return r;
}

LlamaConfig odd_shape() {
  LlamaConfig c = llama_preset("llama-tiny");
  c.n_layer = 3, c.n_head = 6, c.n_kv_head = 3, c.n_embd = 36, c.ffn_hidden = 50, c.seq_len = 13;
  return c;
}

}  // namespace

TEST(llama_fixture, full_context_matches_transformers) { check_case(""); }
TEST(llama_fixture, shorter_context_matches_transformers) { check_case("t11."); }
TEST(llama_fixture, ignored_targets_match_transformers) { check_case("masked."); }

TEST(llama, every_recompute_policy_is_bit_identical) {
  for (const LlamaConfig& cfg : {llama_preset("llama-tiny"), odd_shape()}) {
    const StepResult none = step(cfg, Recompute::none(), 2, cfg.seq_len);
    for (const Recompute& rc : {Recompute::full(), Recompute::every_k(2), Recompute::selective()}) {
      const StepResult r = step(cfg, rc, 2, cfg.seq_len);
      EXPECT_EQ(std::memcmp(&r.loss, &none.loss, sizeof(float)), 0) << rc.name();
      ASSERT_EQ(r.grads.size(), none.grads.size());
      EXPECT_EQ(std::memcmp(r.grads.data(), none.grads.data(), r.grads.size() * 4), 0) << rc.name();
    }
  }
}

TEST(llama, predicted_activation_bytes_equal_the_allocator_and_shrink_with_recompute) {
  const LlamaConfig cfg = odd_shape();
  const auto spec = LlamaSpec::make(cfg);
  int64_t none_bytes = 0;
  for (const Recompute& rc : {Recompute::none(), Recompute::full(), Recompute::every_k(2),
                              Recompute::selective()}) {
    const int64_t before = mem_stats().current[static_cast<size_t>(MemCategory::Activations)];
    Llama m(spec, {});
    m.set_recompute(rc);
    const auto in = tokens(3 * 11, cfg.vocab_size, 1);
    m.forward({in.data(), in.data(), 3, 11});
    const int64_t measured =
        mem_stats().current[static_cast<size_t>(MemCategory::Activations)] - before;
    EXPECT_EQ(measured, spec->memory(3, 11, 1, rc, Precision::FP32).activations) << rc.name();
    if (rc == Recompute::none()) none_bytes = measured;
    else EXPECT_LT(measured, none_bytes) << rc.name();
  }
}

TEST(llama, parameter_hooks_follow_the_layout_order_and_ranges_arrive_top_down) {
  Llama m(llama_preset("llama-tiny"));
  m.init_weights(1);
  std::vector<ParamUse> seen;
  m.set_param_hook([&](ParamEvent e, int unit, bool bwd) {
    ASSERT_TRUE(e == ParamEvent::Need || e == ParamEvent::Done);
    seen.push_back({e == ParamEvent::Need, unit, bwd});
  });
  int64_t frontier = m.layout().numel;
  m.set_grad_ready_hook([&](int64_t b, int64_t e) {
    EXPECT_EQ(e, frontier);
    frontier = b;
  });
  const auto in = tokens(2 * 8, 61, 2);
  m.forward({in.data(), in.data(), 2, 8});
  m.backward(1.0f);
  EXPECT_EQ(seen, m.layout().order);
  EXPECT_EQ(frontier, 0);
}

TEST(llama, grouped_query_attention_equals_repeated_kv_heads) {
  const LlamaConfig gqa = llama_preset("llama-tiny");
  LlamaConfig mha = gqa;
  mha.n_kv_head = mha.n_head;
  Llama a(gqa), b(mha);
  a.init_weights(9);
  // Copy every tensor, repeating each k/v head's rows for the query heads it serves.
  const int64_t hd = gqa.head_dim(), C = gqa.n_embd, rep = gqa.n_head / gqa.n_kv_head;
  const auto& la = a.layout().params;
  const auto& lb = b.layout().params;
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    Tensor src = a.param(la[i]), dst = b.param(lb[i]);
    const bool kv = la[i].name.find("k_proj") != std::string::npos ||
                    la[i].name.find("v_proj") != std::string::npos;
    if (!kv) {
      ASSERT_EQ(src.numel(), dst.numel()) << la[i].name;
      std::memcpy(dst.raw(), src.raw(), src.nbytes());
      continue;
    }
    for (int64_t h = 0; h < mha.n_head; ++h)
      std::memcpy(dst.data<float>() + h * hd * C, src.data<float>() + (h / rep) * hd * C,
                  sizeof(float) * hd * C);
  }
  const auto in = tokens(2 * 16, gqa.vocab_size, 3), tg = tokens(2 * 16, gqa.vocab_size, 4);
  const float la_loss = a.forward({in.data(), tg.data(), 2, 16});
  const float lb_loss = b.forward({in.data(), tg.data(), 2, 16});
  // The same arithmetic per head; only the wider K/V GEMMs may block their
  // sums differently: a few ulp of the loss (~4.1, ulp 4.8e-7) and of the
  // logits (|z| < 1, C 2^-24 of unit terms ~ 2e-6). Measured: bitwise equal.
  EXPECT_NEAR(la_loss, lb_loss, 1e-6);
  const int64_t n = int64_t{2} * 16 * gqa.padded_vocab;
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(a.logits()[i], b.logits()[i], 1e-5) << i;
}

TEST(llama, bad_shapes_and_tokens_are_clear_errors) {
  LlamaConfig c = llama_preset("llama-tiny");
  c.n_kv_head = 3;  // 4 heads do not split into 3 groups
  EXPECT_THROW(LlamaSpec::make(c), Error);
  Llama m(llama_preset("llama-tiny"));
  std::vector<int32_t> bad = {1, 2, 99};
  try {
    m.forward({bad.data(), bad.data(), 1, 3});
    ADD_FAILURE() << "out-of-vocabulary token accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 99"), std::string::npos) << e.what();
  }
}

// A Hugging Face model directory (transformers' own config.json and the
// weights as it names and shapes them) loads into exactly the reference
// parameters; the export writes a directory that reads back to the same
// config and bytes.
TEST(llama_hf, model_directory_loads_the_reference_weights_and_exports_back) {
  const std::string dir = std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/llama_tiny_hf";
  ASSERT_TRUE(is_hf_llama(dir));
  const LlamaConfig cfg = read_hf_llama_config(dir);
  EXPECT_EQ(model_description_difference(LlamaSpec::make(cfg)->to_json(),
                                         model_preset("llama-tiny")->to_json()), "");
  auto want = reference_model();
  Tensor got = Tensor::zeros({want->layout().numel}, DType::F32);
  load_hf_llama_weights(dir, got, cfg);
  EXPECT_EQ(std::memcmp(got.raw(), want->param_buffer().raw(), got.nbytes()), 0);

  const std::string out = ::testing::TempDir() + "/llama_hf_export";
  export_hf_llama(out, got, cfg);
  EXPECT_EQ(model_description_difference(LlamaSpec::make(read_hf_llama_config(out))->to_json(),
                                         LlamaSpec::make(cfg)->to_json()), "");
  Tensor back = Tensor::zeros({got.numel()}, DType::F32);
  load_hf_llama_weights(out, back, cfg);
  EXPECT_EQ(std::memcmp(back.raw(), got.raw(), got.nbytes()), 0);
}

TEST(llama_hf, missing_or_misshapen_tensors_are_errors_naming_them) {
  const std::string src = std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/llama_tiny_hf";
  LlamaConfig cfg = read_hf_llama_config(src);
  cfg.ffn_hidden = 48;  // another shape than the files hold
  Tensor wrong = Tensor::zeros({LlamaSpec::make(cfg)->num_params()}, DType::F32);
  try {
    load_hf_llama_weights(src, wrong, cfg);
    ADD_FAILURE() << "a misshapen tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mlp.gate_proj.weight"), std::string::npos) << e.what();
  }
  cfg.ffn_hidden = 40;
  cfg.n_layer = 3;  // a layer the files lack
  Tensor more = Tensor::zeros({LlamaSpec::make(cfg)->num_params()}, DType::F32);
  try {
    load_hf_llama_weights(src, more, cfg);
    ADD_FAILURE() << "a missing tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2."), std::string::npos) << e.what();
  }
}

// Mixed precision: bf16 and fp16 (16-bit GEMM operands, f32 accumulation and
// masters) track the f32 model on the same weights and batch: loss within 1%,
// every gradient tensor's direction within cos > 0.99 of f32's. The
// activation buffer the allocator counts is what the spec predicts.
// Why those values: bf16 rounds each GEMM operand by up to u = 2^-8, so a
// logit (|z| <~ 1 at init) is up to 2u off and the loss moves by at most
// ~2 max|dz| = 1.6e-2, 0.4% of ~4.1; 1% is 2.5x that. cos > 0.99 allows a
// relative L2 error of sqrt(2 x 0.01) = 14% per tensor, a direction check
// (bf16's per-element error through ~10 GEMMs is ~2u sqrt(10) = 2.5%).
// Measured: loss 3e-5 apart (0.07% of the bound), smallest cos 0.999977,
// at the scalar, avx2 and avx512bf16 levels.
TEST(llama_precision, bf16_and_fp16_track_fp32_and_memory_is_predicted) {
  const LlamaConfig cfg = odd_shape();
  const auto spec = LlamaSpec::make(cfg);
  const auto in = tokens(2 * 13, cfg.vocab_size, 4), tg = tokens(2 * 13, cfg.vocab_size, 5);
  Llama ref(spec, {});
  ref.init_weights(3);
  const float ref_loss = ref.forward({in.data(), tg.data(), 2, 13});
  ref.backward(1.0f);
  for (Precision p : {Precision::BF16, Precision::FP16}) {
    SCOPED_TRACE(precision_name(p));
    const int64_t before = mem_stats().current[static_cast<size_t>(MemCategory::Activations)];
    Llama m(spec, {});
    m.init_weights(3);
    m.set_precision(p);
    const float loss = m.forward({in.data(), tg.data(), 2, 13});
    EXPECT_EQ(mem_stats().current[static_cast<size_t>(MemCategory::Activations)] - before,
              spec->memory(2, 13, 1, {}, p).activations);
    EXPECT_NEAR(loss, ref_loss, 0.01 * ref_loss);
    m.backward(1.0f);
    for (const ParamInfo& info : m.layout().params) {
      const Tensor a = m.grad(info), b = ref.grad(info);
      double dot = 0, na = 0, nb = 0;
      for (int64_t i = 0; i < a.numel(); ++i) {
        const double x = a.data<float>()[i], y = b.data<float>()[i];
        dot += x * y, na += x * x, nb += y * y;
      }
      EXPECT_GT(dot / std::sqrt(na * nb + 1e-30), 0.99) << info.name;
    }
  }
}

// Model::hold_parameters: a step's micro-batches reuse the 16-bit copy the
// first one rounded; let go, the next forward rounds the new masters.
TEST(llama_precision, a_held_copy_is_rounded_once_and_follows_again_when_let_go) {
  const LlamaConfig cfg = odd_shape();
  const auto spec = LlamaSpec::make(cfg);
  const auto in = tokens(2 * 13, cfg.vocab_size, 4), tg = tokens(2 * 13, cfg.vocab_size, 5);
  Llama a(spec, {}), b(spec, {});
  a.init_weights(3);
  b.init_weights(4);
  a.set_precision(Precision::BF16);
  b.set_precision(Precision::BF16);
  const float lb = b.forward({in.data(), tg.data(), 2, 13});
  a.hold_parameters(true);
  ASSERT_NE(a.forward({in.data(), tg.data(), 2, 13}), lb);
  std::copy_n(b.param_buffer().data<float>(), spec->num_params(), a.param_buffer().data<float>());
  EXPECT_NE(a.forward({in.data(), tg.data(), 2, 13}), lb);  // still a's rounded matrices
  a.hold_parameters(false);
  EXPECT_EQ(a.forward({in.data(), tg.data(), 2, 13}), lb);
}

// A malformed config.json is an Error naming the file, never a crash or a
// foreign exception; garbage is not mistaken for a Llama directory.
TEST(llama_hf, malformed_config_json_is_a_clear_error) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "llama_bad_config";
  fs::create_directories(dir);
  auto write = [&](const std::string& text) { std::ofstream(dir / "config.json") << text; };
  write("[1, 2, 3]");
  EXPECT_FALSE(is_hf_llama(dir.string()));
  write(R"({"model_type": null})");
  EXPECT_FALSE(is_hf_llama(dir.string()));
  for (const char* text :
       {R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 0,
            "hidden_size": 16, "intermediate_size": 8, "max_position_embeddings": 8,
            "vocab_size": 10, "head_dim": 4})",
        R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
            "hidden_size": 16, "intermediate_size": 8, "max_position_embeddings": 8,
            "vocab_size": 10, "rope_theta": "big"})",
        R"({"model_type": "llama", "num_hidden_layers": "two"})",
        // 2^32 + 16 used to read as 16 (int narrowing); 1e30 as an int was undefined.
        R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
            "hidden_size": 4294967312, "intermediate_size": 8, "max_position_embeddings": 8,
            "vocab_size": 10})",
        R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
            "hidden_size": 16, "intermediate_size": 8, "max_position_embeddings": 8,
            "vocab_size": 10, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
            "original_max_position_embeddings": 1e30}})",
        R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
            "hidden_size": 16, "intermediate_size": 8, "max_position_embeddings": 8,
            "vocab_size": 2147483647})"}) {
    write(text);
    EXPECT_TRUE(is_hf_llama(dir.string()));
    try {
      read_hf_llama_config(dir.string());
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  }
}

// A setting only the checkpoint records (rope scaling) makes it another model.
TEST(llama, description_difference_sees_fields_only_the_checkpoint_has) {
  LlamaConfig scaled = llama_preset("llama-tiny");
  scaled.rope_scaling = {8.0, 1.0, 4.0, 16};
  const std::string d = model_description_difference(LlamaSpec::make(scaled)->to_json(),
                                                     model_preset("llama-tiny")->to_json());
  EXPECT_NE(d.find("rope_scaling"), std::string::npos) << d;
}

// The model file a run writes (io/model_file.h) reads back to the same model
// and weights; a model of another shape is refused naming the tensor.
TEST(llama, model_file_round_trips_and_refuses_another_shape) {
  const std::string path = ::testing::TempDir() + "/llama_model_file.safetensors";
  auto model = reference_model();
  save_model_safetensors(path, *model);
  ASSERT_TRUE(is_model_file(path));
  const auto spec = read_model_file_spec(path);
  EXPECT_EQ(model_description_difference(spec->to_json(), model->spec().to_json()), "");
  Tensor back = Tensor::zeros({spec->num_params()}, DType::F32);
  load_model_file(path, *spec, back);
  EXPECT_EQ(std::memcmp(back.raw(), model->param_buffer().raw(), back.nbytes()), 0);
  LlamaConfig other = llama_preset("llama-tiny");
  other.ffn_hidden = 24;
  const auto other_spec = LlamaSpec::make(other);
  Tensor wrong = Tensor::zeros({other_spec->num_params()}, DType::F32);
  try {
    load_model_file(path, *other_spec, wrong);
    ADD_FAILURE() << "another shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate_proj"), std::string::npos) << e.what();
  }
}
