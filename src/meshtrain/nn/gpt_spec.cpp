#include "meshtrain/nn/gpt_spec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/nn/gpt.h"
#include "meshtrain/nn/gpt_activations.h"
#include "meshtrain/nn/initial_weights.h"
#include "meshtrain/nn/kv_decoders.h"

namespace meshtrain {

namespace {

// gpt_params.h's layout as data; units: 0 = embeddings, 1..L = layers,
// L+1 = final LayerNorm. A tensor-parallel shard (GPTDims) lists the same
// parameters with its slices: c_attn (its heads' q, k and v rows: 3 parts)
// and c_fc by rows, with their biases (column-parallel), both c_proj
// matrices by columns (row-parallel; their biases whole), wte by rows (a
// vocabulary-parallel embedding and tied head); the rest whole. A pipeline
// stage lists its own layers under their model-wide names, wte and wpe on
// the first stage, ln_f and the head's wte on the last (GPTDims::layer_unit).
ParamLayout gpt_layout(const GPTDims& d) {
  const int64_t C = d.C, A = d.A, F = d.F, tp = d.tp_size;
  const int L = d.L;
  ParamLayout lay;
  int64_t at = 0;
  auto add = [&](std::string name, Shape shape, int unit, bool half_weight, int split_dim = -1,
                 int parts = 1) {
    ParamInfo p;
    p.name = std::move(name), p.shape = shape, p.begin = at, p.unit = unit;
    p.decay = shape.size() >= 2, p.half_weight = half_weight;
    // The blocks' linear layers.
    p.adaptable = shape.size() >= 2 && unit >= d.layer_unit(0) && unit < d.layer_unit(L);
    if (tp > 1 && split_dim >= 0) {
      p.split_dim = split_dim;
      p.split_parts = parts;
      p.full_shape = shape;
      p.full_shape[split_dim] *= tp;
    }
    at = p.end();
    lay.params.push_back(std::move(p));
  };
  auto unit = [&](std::string name, int64_t begin) { lay.units.push_back({std::move(name), begin, at}); };
  if (d.has_wte()) add("wte.weight", {d.Vl, C}, 0, true, 0);
  if (d.embeds) add("wpe.weight", {d.T, C}, 0, false);
  if (d.has_wte()) unit(d.embeds ? "embeddings" : "head", 0);
  for (int l = 0; l < L; ++l) {
    const int64_t begin = at;
    const int u = d.layer_unit(l);
    const std::string h = "h." + std::to_string(d.layer0 + l) + ".";
    add(h + "ln_1.weight", {C}, u, false);
    add(h + "ln_1.bias", {C}, u, false);
    add(h + "attn.c_attn.weight", {3 * A, C}, u, true, 0, 3);
    add(h + "attn.c_attn.bias", {3 * A}, u, false, 0, 3);
    add(h + "attn.c_proj.weight", {C, A}, u, true, 1);
    add(h + "attn.c_proj.bias", {C}, u, false);
    add(h + "ln_2.weight", {C}, u, false);
    add(h + "ln_2.bias", {C}, u, false);
    add(h + "mlp.c_fc.weight", {F, C}, u, true, 0);
    add(h + "mlp.c_fc.bias", {F}, u, false, 0);
    add(h + "mlp.c_proj.weight", {C, F}, u, true, 1);
    add(h + "mlp.c_proj.bias", {C}, u, false);
    unit("layer " + std::to_string(d.layer0 + l), begin);
  }
  const int fin = d.final_unit();
  if (d.heads) {
    const int64_t lnf = at;
    add("ln_f.weight", {C}, fin, false);
    add("ln_f.bias", {C}, fin, false);
    unit("final norm", lnf);
  }
  lay.numel = at;
  // nn/gpt.h documents this order; the tied embedding's gradient comes
  // between GradBegin 0 and GradEnd 0 at the backward head.
  auto use = [&](bool need, int u, bool bwd) { lay.order.push_back({need, u, bwd}); };
  if (d.embeds) use(true, 0, false), use(false, 0, false);
  for (int l = 0; l < L; ++l) use(true, d.layer_unit(l), false), use(false, d.layer_unit(l), false);
  if (d.heads) {
    use(true, fin, false), use(true, 0, false), use(false, 0, false), use(false, fin, false);
    use(true, 0, true), use(true, fin, true), use(false, 0, true), use(false, fin, true);
  }
  for (int l = L - 1; l >= 0; --l) use(true, d.layer_unit(l), true), use(false, d.layer_unit(l), true);
  lay.bracketed_grad_unit = d.heads ? 0 : -1;
  lay.validate();
  return lay;
}

int get_int(const nlohmann::json& j, const char* key, const std::string& where) {
  MT_CHECK(j.is_object() && j.contains(key) && j[key].is_number_integer(),
           "{}: model description needs an integer \"{}\"", where, key);
  return j[key].get<int>();
}

}  // namespace

GPTSpec::GPTSpec(const GPTConfig& cfg, const ModelShard& shard) : DecoderSpecBase(cfg, shard) {
  cfg_.validate();
  dims_ = GPTDims::make(cfg_, shard_);
  layout_ = gpt_layout(dims_);
  MT_CHECK(layout_.numel == dims_.num_params(), "GPT layout has {} elements, the dims {}",
           layout_.numel, dims_.num_params());
  if (dims_.tp_size == 1 && !shard_.is_stage())
    MT_CHECK(layout_.numel == cfg_.num_params(), "GPT layout has {} elements, the config {}",
             layout_.numel, cfg_.num_params());
}

std::shared_ptr<const GPTSpec> GPTSpec::make(const GPTConfig& cfg, const ModelShard& shard) {
  return std::make_shared<GPTSpec>(cfg, shard);
}

std::shared_ptr<const ModelSpec> GPTSpec::sharded(const ModelShard& shard) const {
  return make(cfg_, shard);
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
  const GPTDims& d = dims_;
  ModelMemory m;
  // Exact: the model's own activation layout for the policy and precision.
  m.activations = 4 * GPTActivations::buffer_floats(d, B, T, recompute, precision);
  m.workspace = 4 * GPTActivations::workspace_floats(d, T, threads);
  {
    // A split backward's queued weight GEMMs (ModelBase::defer_weight_grad):
    // each copies its output gradient and input, per layer fcproj (F -> C),
    // fc (C -> F), attproj (A -> C) and qkv (C -> 3A), and the head (C -> Vl).
    const int64_t N = static_cast<int64_t>(B) * T, C = d.C, A = d.A, F = d.F;
    const int64_t per_layer = (F + C) + (C + F) + (A + C) + (C + 3 * A);
    m.deferred_weights = (is_mixed(precision) ? 2 : 4) * N * (d.L * per_layer + (d.heads ? C + d.Vl : 0));
  }
  const bool widened = precision == Precision::FP16 ||
                       (precision == Precision::BF16 &&
                        cpu::bf16_gemm_path() == cpu::HalfGemmPath::FallbackSgemm);
  if (widened) {
    // The two f32 copies of the largest GEMM operands (kernels/cpu/gemm_bf16.h):
    // A = an input or output gradient (N x the widest dimension); B = a
    // weight (out x in) or the input of a weight-gradient product (N x in).
    // A pipeline stage without the head has no vocabulary-wide GEMM.
    const int64_t N = static_cast<int64_t>(B) * T, C = d.C, A = d.A, F = d.F, Vl = d.heads ? d.Vl : 0;
    m.host_gemm_scratch = 4 * (N * std::max({C, 3 * A, F, Vl}) +
                        std::max({3 * A * C, C * A, F * C, Vl * C, N * C, N * A, N * F}));
  }
  return m;
}

std::unique_ptr<Decoder> GPTSpec::make_decoder(const Tensor& params) const {
  MT_CHECK(dims_.tp_size == 1,
           "generation with a KV cache runs on the whole model, not a tensor-parallel shard "
           "(tp = {})", dims_.tp_size);
  return make_gpt_decoder(cfg_, params);
}

std::unique_ptr<Model> GPTSpec::build(ModelBuffers buffers) const {
  return std::make_unique<GPT>(std::static_pointer_cast<const GPTSpec>(shared_from_this()),
                               std::move(buffers));
}

}  // namespace meshtrain

namespace meshtrain {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// GPT-2's initialization of the whole model's parameters (`full`): N(0, 0.02)
// matrices and embeddings (the real vocabulary's rows only), residual
// projections scaled by 1/sqrt(2L), unit LayerNorm gains, zero biases.
std::vector<InitRule> gpt_init_rules(const GPTConfig& cfg, const ParamLayout& full) {
  const float std = 0.02f;
  const float resid_std = std / std::sqrt(2.0f * cfg.n_layer);
  std::vector<InitRule> rules;
  for (const ParamInfo& info : full.params) {
    InitRule r{InitRule::Kind::Normal, std, -1};
    if (info.name == "wte.weight") {
      r.drawn = static_cast<int64_t>(cfg.vocab_size) * cfg.n_embd;
    } else if (ends_with(info.name, "ln_1.weight") || ends_with(info.name, "ln_2.weight") ||
               ends_with(info.name, "ln_f.weight")) {
      r = {InitRule::Kind::Constant, 1.f, -1};
    } else if (ends_with(info.name, "c_proj.weight")) {
      r.value = resid_std;
    } else if (info.shape.size() < 2) {
      r = {InitRule::Kind::Zero, 0.f, -1};  // biases
    }
    rules.push_back(r);
  }
  return rules;
}

}  // namespace

// A shard's values are its slices of the whole model's, so any tp trains
// exactly like tp = 1.
bool GPTSpec::initial_weights(uint64_t seed, ElemSpan range, float* buffer) const {
  const auto full = shard_.is_full() ? nullptr : make(cfg_);
  const ParamLayout& whole = full ? full->layout() : layout_;
  fill_initial_weights(whole, layout_, shard_.tp_rank, gpt_init_rules(cfg_, whole), seed, range, buffer);
  return true;
}

}  // namespace meshtrain
