#include "meshtrain/nn/llama_spec.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/nn/llama.h"
#include "meshtrain/nn/llama_activations.h"
#include "meshtrain/nn/initial_weights.h"
#include "meshtrain/nn/kv_decoders.h"

namespace meshtrain {

LlamaSpec::LlamaSpec(const LlamaConfig& cfg, const ModelShard& shard)
    : DecoderSpecBase(cfg, shard) {
  cfg_.validate();
  dims_ = LlamaDims::make(cfg_, shard_);
  const LlamaDims& d = dims_;
  const int64_t C = d.C, tp = d.tp_size;
  const int L = d.L;
  int64_t at = 0;
  // `shape` is the slice held; split_dim the dimension tp splits (-1: whole).
  auto add = [&](std::string name, Shape shape, int unit, int split_dim = -1) {
    ParamInfo p;
    p.name = std::move(name), p.shape = shape, p.begin = at, p.unit = unit;
    p.decay = p.half_weight = shape.size() >= 2;
    // The blocks' linear layers.
    p.adaptable = shape.size() >= 2 && unit >= d.layer_unit(0) && unit < d.layer_unit(L);
    if (tp > 1 && split_dim >= 0) {
      p.split_dim = split_dim;
      p.full_shape = shape;
      p.full_shape[split_dim] *= tp;
    }
    at = p.end();
    layout_.params.push_back(std::move(p));
    return layout_.params.back().begin;
  };
  // A pipeline stage lists its own layers under their model-wide names, the
  // embedding on the first stage, the norm and head on the last.
  if (d.embeds) {
    add("model.embed_tokens.weight", {d.Vl, C}, 0, 0);
    layout_.units.push_back({"embeddings", 0, at});
  }
  for (int l = 0; l < L; ++l) {
    const int64_t begin = at;
    const int u = d.layer_unit(l);
    const std::string p = "model.layers." + std::to_string(d.layer0 + l) + ".";
    LayerOffsets o{};
    o.ln1 = add(p + "input_layernorm.weight", {C}, u);
    o.qkv = add(p + "self_attn.q_proj.weight", {d.A, C}, u, 0);
    add(p + "self_attn.k_proj.weight", {d.KV, C}, u, 0);
    add(p + "self_attn.v_proj.weight", {d.KV, C}, u, 0);
    o.o = add(p + "self_attn.o_proj.weight", {C, d.A}, u, 1);
    o.ln2 = add(p + "post_attention_layernorm.weight", {C}, u);
    o.gate_up = add(p + "mlp.gate_proj.weight", {d.H, C}, u, 0);
    add(p + "mlp.up_proj.weight", {d.H, C}, u, 0);
    o.down = add(p + "mlp.down_proj.weight", {C, d.H}, u, 1);
    layers_.push_back(o);
    layout_.units.push_back({"layer " + std::to_string(d.layer0 + l), begin, at});
  }
  const int fin = d.final_unit();
  if (d.heads) {
    const int64_t head_begin = at;
    norm_ = add("model.norm.weight", {C}, fin);
    head_ = add("lm_head.weight", {d.Vl, C}, fin, 0);
    layout_.units.push_back({"norm and head", head_begin, at});
  }
  layout_.numel = at;
  auto use = [&](bool need, int u, bool bwd) { layout_.order.push_back({need, u, bwd}); };
  const int units = layout_.num_units();
  for (int u = 0; u < units; ++u) use(true, u, false), use(false, u, false);
  // Backward: the head, then the layers; the embedding's backward reads no
  // parameters (llama.cpp), so it has no Need/Done.
  for (int u = units - 1; u >= d.layer_unit(0); --u) use(true, u, true), use(false, u, true);
  layout_.validate();
  if (tp == 1 && !shard_.is_stage())
    MT_CHECK(layout_.numel == cfg_.num_params(), "llama layout has {} elements, the config {}",
             layout_.numel, cfg_.num_params());
}

std::shared_ptr<const LlamaSpec> LlamaSpec::make(const LlamaConfig& cfg, const ModelShard& shard) {
  return std::make_shared<LlamaSpec>(cfg, shard);
}

std::shared_ptr<const ModelSpec> LlamaSpec::sharded(const ModelShard& shard) const {
  return make(cfg_, shard);
}

nlohmann::json LlamaSpec::to_json() const {
  nlohmann::json j = {{"family", kFamily},          {"n_layer", cfg_.n_layer},
                      {"n_head", cfg_.n_head},      {"n_kv_head", cfg_.n_kv_head},
                      {"n_embd", cfg_.n_embd},      {"ffn_hidden", cfg_.ffn_hidden},
                      {"seq_len", cfg_.seq_len},    {"vocab_size", cfg_.vocab_size},
                      {"padded_vocab", cfg_.padded_vocab}, {"rope_theta", cfg_.rope_theta},
                      {"norm_eps", cfg_.norm_eps}};
  if (cfg_.rope_scaling.factor > 0)
    j["rope_scaling"] = {{"factor", cfg_.rope_scaling.factor},
                         {"low_freq_factor", cfg_.rope_scaling.low_freq_factor},
                         {"high_freq_factor", cfg_.rope_scaling.high_freq_factor},
                         {"original_max_positions", cfg_.rope_scaling.original_max_positions}};
  return j;
}

LlamaConfig LlamaSpec::config_from_json(const nlohmann::json& j, const std::string& where) {
  auto get_int = [&](const char* key) {
    MT_CHECK(j.contains(key) && j[key].is_number_integer(),
             "{}: llama model description needs an integer \"{}\"", where, key);
    return j[key].get<int>();
  };
  auto get_num = [&](const char* key) {
    MT_CHECK(j.contains(key) && j[key].is_number(), "{}: llama model description needs a number "
             "\"{}\"", where, key);
    return j[key].get<double>();
  };
  LlamaConfig c;
  c.n_layer = get_int("n_layer");
  c.n_head = get_int("n_head");
  c.n_kv_head = get_int("n_kv_head");
  c.n_embd = get_int("n_embd");
  c.ffn_hidden = get_int("ffn_hidden");
  c.seq_len = get_int("seq_len");
  c.vocab_size = get_int("vocab_size");
  c.padded_vocab = get_int("padded_vocab");
  c.rope_theta = get_num("rope_theta");
  c.norm_eps = static_cast<float>(get_num("norm_eps"));
  if (j.contains("rope_scaling")) {
    const auto& s = j["rope_scaling"];
    MT_CHECK(s.is_object(), "{}: rope_scaling must be an object", where);
    auto num = [&](const char* key, double dflt) {
      if (!s.contains(key)) return dflt;
      MT_CHECK(s[key].is_number(), "{}: rope_scaling.{} must be a number", where, key);
      return s[key].get<double>();
    };
    c.rope_scaling.factor = num("factor", 0.0);
    c.rope_scaling.low_freq_factor = num("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = num("high_freq_factor", 4.0);
    c.rope_scaling.original_max_positions = static_cast<int>(num("original_max_positions", 8192));
  }
  c.validate();
  return c;
}

ModelMemory LlamaSpec::memory(int B, int T, int nthreads, const Recompute& recompute,
                              Precision precision) const {
  ModelMemory m{4 * LlamaActivations::buffer_floats(dims_, B, T, recompute, precision),
                4 * LlamaActivations::workspace_floats(dims_, T, nthreads)};
  // The rotary angles (cos and sin) of every position of the context, every rotated pair.
  m.shared_workspace = 4 * 2 * static_cast<int64_t>(cfg_.seq_len) * (cfg_.head_dim() / 2);
  m.workspace += m.shared_workspace;
  {
    // A split backward's queued weight GEMMs (ModelBase::defer_weight_grad):
    // each copies its output gradient and input, per layer down (H -> C),
    // gate_up (C -> 2H), o (A -> C) and qkv (C -> Q), and the head (C -> Vl).
    const int64_t N = static_cast<int64_t>(B) * T, C = dims_.C, H = dims_.H, A = dims_.A, Q = dims_.Q;
    const int64_t per_layer = (H + C) + (C + 2 * H) + (A + C) + (C + Q);
    m.deferred_weights = (is_mixed(precision) ? 2 : 4) * N *
                         (dims_.L * per_layer + (dims_.heads ? C + dims_.Vl : 0));
  }
  const bool widened = precision == Precision::FP16 ||
                       (precision == Precision::BF16 &&
                        cpu::bf16_gemm_path() == cpu::HalfGemmPath::FallbackSgemm);
  if (widened) {
    // The f32 copies of the largest GEMM operands (kernels/cpu/gemm_bf16.h):
    // A = an input or output gradient (N x the widest dimension), B = a weight
    // (OC x C) or an input (N x C) of a weight-gradient product.
    const int64_t N = static_cast<int64_t>(B) * T, C = dims_.C, H = dims_.H, A = dims_.A;
    const int64_t Q = dims_.Q, Vl = dims_.heads ? dims_.Vl : 0;  // a stage without the head: no Vl GEMM
    m.host_gemm_scratch = 4 * (N * std::max({C, Q, 2 * H, Vl, A}) +
                        std::max({Q * C, 2 * H * C, C * H, C * A, Vl * C, N * C, N * H, N * A}));
  }
  return m;
}

std::unique_ptr<Decoder> LlamaSpec::make_decoder(const Tensor& params) const {
  return make_llama_decoder(std::static_pointer_cast<const LlamaSpec>(shared_from_this()), params);
}

std::unique_ptr<Model> LlamaSpec::build(ModelBuffers buffers) const {
  return std::make_unique<Llama>(std::static_pointer_cast<const LlamaSpec>(shared_from_this()),
                                 std::move(buffers));
}

}  // namespace meshtrain

namespace meshtrain {

// Llama's initialization of the whole model (`full`): N(0, 0.02) matrices,
// embedding and head (the real vocabulary's rows only), unit RMSNorm gains.
// A shard's values are its slices of the whole model's, so any tp trains
// exactly like tp = 1.
bool LlamaSpec::initial_weights(uint64_t seed, ElemSpan range, float* buffer) const {
  const auto full = shard_.is_full() ? nullptr : make(cfg_);
  const LlamaSpec& whole = full ? *full : *this;
  const int64_t vocab_rows = static_cast<int64_t>(cfg_.vocab_size) * cfg_.n_embd;
  std::vector<InitRule> rules;
  for (const ParamInfo& info : whole.layout().params) {
    if (info.shape.size() < 2)
      rules.push_back({InitRule::Kind::Constant, 1.f, -1});
    else if (info.begin == whole.embed_offset() || info.begin == whole.head_offset())
      rules.push_back({InitRule::Kind::Normal, 0.02f, vocab_rows});
    else
      rules.push_back({InitRule::Kind::Normal, 0.02f, -1});
  }
  fill_initial_weights(whole.layout(), layout_, shard_.tp_rank, rules, seed, range, buffer);
  return true;
}

}  // namespace meshtrain
