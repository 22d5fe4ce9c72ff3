#include "meshtrain/nn/gpt_spec.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/nn/gpt.h"

namespace meshtrain {

namespace {

// gpt_params.h's layout as data; units: 0 = embeddings, 1..L = layers,
// L+1 = final LayerNorm.
ParamLayout gpt_layout(const GPTConfig& cfg) {
  const int64_t C = cfg.n_embd;
  const int L = cfg.n_layer;
  ParamLayout lay;
  int64_t at = 0;
  auto add = [&](std::string name, Shape shape, int unit, bool half_weight) {
    ParamInfo p{std::move(name), shape, at, unit, shape.size() >= 2, half_weight};
    at = p.end();
    lay.params.push_back(std::move(p));
  };
  auto unit = [&](std::string name, int64_t begin) { lay.units.push_back({std::move(name), begin, at}); };
  add("wte.weight", {cfg.padded_vocab, C}, 0, true);
  add("wpe.weight", {cfg.seq_len, C}, 0, false);
  unit("embeddings", 0);
  for (int l = 0; l < L; ++l) {
    const int64_t begin = at;
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, 1 + l, false);
    add(h + "ln_1.bias", {C}, 1 + l, false);
    add(h + "attn.c_attn.weight", {3 * C, C}, 1 + l, true);
    add(h + "attn.c_attn.bias", {3 * C}, 1 + l, false);
    add(h + "attn.c_proj.weight", {C, C}, 1 + l, true);
    add(h + "attn.c_proj.bias", {C}, 1 + l, false);
    add(h + "ln_2.weight", {C}, 1 + l, false);
    add(h + "ln_2.bias", {C}, 1 + l, false);
    add(h + "mlp.c_fc.weight", {4 * C, C}, 1 + l, true);
    add(h + "mlp.c_fc.bias", {4 * C}, 1 + l, false);
    add(h + "mlp.c_proj.weight", {C, 4 * C}, 1 + l, true);
    add(h + "mlp.c_proj.bias", {C}, 1 + l, false);
    unit("layer " + std::to_string(l), begin);
  }
  const int64_t lnf = at;
  add("ln_f.weight", {C}, L + 1, false);
  add("ln_f.bias", {C}, L + 1, false);
  unit("final norm", lnf);
  lay.numel = at;
  // nn/gpt.h documents this order; the tied embedding's gradient comes
  // between GradBegin 0 and GradEnd 0 at the backward head.
  auto use = [&](bool need, int u, bool bwd) { lay.order.push_back({need, u, bwd}); };
  for (int u = 0; u <= L; ++u) use(true, u, false), use(false, u, false);
  use(true, L + 1, false), use(true, 0, false), use(false, 0, false), use(false, L + 1, false);
  use(true, 0, true), use(true, L + 1, true), use(false, 0, true), use(false, L + 1, true);
  for (int u = L; u >= 1; --u) use(true, u, true), use(false, u, true);
  lay.bracketed_grad_unit = 0;
  lay.validate();
  return lay;
}

int get_int(const nlohmann::json& j, const char* key, const std::string& where) {
  MT_CHECK(j.is_object() && j.contains(key) && j[key].is_number_integer(),
           "{}: model description needs an integer \"{}\"", where, key);
  return j[key].get<int>();
}

}  // namespace

GPTSpec::GPTSpec(const GPTConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  layout_ = gpt_layout(cfg_);
  MT_CHECK(layout_.numel == cfg_.num_params(), "GPT layout has {} elements, the config {}",
           layout_.numel, cfg_.num_params());
}

std::shared_ptr<const GPTSpec> GPTSpec::make(const GPTConfig& cfg) {
  return std::make_shared<GPTSpec>(cfg);
}

nlohmann::json GPTSpec::to_json() const {
  return {{"family", kFamily},          {"n_layer", cfg_.n_layer},       {"n_head", cfg_.n_head},
          {"n_embd", cfg_.n_embd},      {"seq_len", cfg_.seq_len},       {"vocab_size", cfg_.vocab_size},
          {"padded_vocab", cfg_.padded_vocab}};
}

GPTConfig GPTSpec::config_from_json(const nlohmann::json& j, const std::string& where) {
  GPTConfig c;
  c.n_layer = get_int(j, "n_layer", where);
  c.n_head = get_int(j, "n_head", where);
  c.n_embd = get_int(j, "n_embd", where);
  c.seq_len = get_int(j, "seq_len", where);
  c.vocab_size = get_int(j, "vocab_size", where);
  c.padded_vocab = get_int(j, "padded_vocab", where);
  return c;
}

ModelMemory GPTSpec::memory(int B, int T, int threads, const Recompute& recompute,
                            Precision precision) const {
  const int64_t C = cfg_.n_embd;
  ModelMemory m;
  // Exact: the model's own activation layout for the policy and precision.
  m.activations = GPT::activation_bytes(cfg_, B, T, recompute, precision);
  // Attention: per thread, two 64 x Tp score blocks and the head's K and V
  // packed as hd x Tp panels, Tp = T rounded up to 32 (q, k, v and the head
  // gradients are read and written in place).
  const int64_t Tp = (static_cast<int64_t>(T) + 31) / 32 * 32;
  m.workspace = 4 * static_cast<int64_t>(threads) * (2 * 64 * Tp + 2 * cfg_.head_dim() * Tp);
  const bool widened = precision == Precision::FP16 ||
                       (precision == Precision::BF16 &&
                        cpu::bf16_gemm_path() == cpu::HalfGemmPath::FallbackSgemm);
  if (widened) {
    // The two f32 copies of the largest GEMM operands (kernels/cpu/gemm_bf16.h):
    // A = an output gradient (N x max(4C, Vp)); B = a weight or the fc output.
    const int64_t N = static_cast<int64_t>(B) * T, Vp = cfg_.padded_vocab;
    m.workspace += 4 * (N * std::max(4 * C, Vp) + std::max({N * 4 * C, Vp * C, 4 * C * C}));
  }
  return m;
}

std::unique_ptr<Model> GPTSpec::build(ModelBuffers buffers) const {
  return std::make_unique<GPT>(std::static_pointer_cast<const GPTSpec>(shared_from_this()),
                               std::move(buffers));
}

}  // namespace meshtrain
