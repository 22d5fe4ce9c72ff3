#include "meshtrain/nn/llama_config.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

namespace {
// Parameter counts in int64, or in double (validate: sizes from a
// config.json may overflow 64 bits before they are checked).
template <class N>
N layer_param_count(const LlamaConfig& c) {
  const N C = c.n_embd, H = c.ffn_hidden, qkv = C + N(2) * c.kv_dim();
  return 2 * C + qkv * C + C * C + 3 * H * C;  // 2 norms, q|k|v, o, gate|up, down
}
template <class N>
N param_count(const LlamaConfig& c) {
  const N C = c.n_embd, Vp = c.padded_vocab, L = c.n_layer;
  return Vp * C + L * layer_param_count<N>(c) + C + Vp * C;
}
}  // namespace

int64_t LlamaConfig::layer_params() const { return layer_param_count<int64_t>(*this); }

int64_t LlamaConfig::num_params() const { return param_count<int64_t>(*this); }

double LlamaConfig::flops_per_token(int T) const {
  const double N = static_cast<double>(num_params()) - static_cast<double>(padded_vocab) * n_embd;
  return 6.0 * N + 6.0 * n_layer * n_embd * static_cast<double>(T);
}

void LlamaConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("llama model: " + what);
  };
  need(n_layer >= 1, fmt::format("n_layer must be >= 1 (got {})", n_layer));
  need(n_head >= 1 && n_embd >= 1 && n_embd % n_head == 0,
       fmt::format("n_embd ({}) must be a positive multiple of n_head ({})", n_embd, n_head));
  need(head_dim() % 2 == 0, fmt::format("the head size n_embd / n_head = {} must be even for "
                                        "rotary embeddings", head_dim()));
  need(n_kv_head >= 1 && n_head % n_kv_head == 0,
       fmt::format("n_head ({}) must be a multiple of n_kv_head ({})", n_head, n_kv_head));
  need(ffn_hidden >= 1, fmt::format("ffn_hidden must be >= 1 (got {})", ffn_hidden));
  need(seq_len >= 1, fmt::format("seq_len must be >= 1 (got {})", seq_len));
  need(vocab_size >= 1 && padded_vocab >= vocab_size,
       fmt::format("vocab_size {} / padded_vocab {} inconsistent", vocab_size, padded_vocab));
  need(rope_theta > 0, fmt::format("rope_theta must be positive (got {})", rope_theta));
  need(norm_eps > 0, fmt::format("norm_eps must be positive (got {})", norm_eps));
  if (rope_scaling.factor != 0)
    need(rope_scaling.factor > 0 && rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
             rope_scaling.low_freq_factor > 0 && rope_scaling.original_max_positions > 0,
         fmt::format("rope scaling needs factor > 0, high_freq_factor > low_freq_factor > 0 and "
                     "original_max_positions > 0 (got {}, {}, {}, {})", rope_scaling.factor,
                     rope_scaling.high_freq_factor, rope_scaling.low_freq_factor,
                     rope_scaling.original_max_positions));
  // In floating point first: a config.json may give sizes whose product
  // overflows the 64-bit count (gpt_config.h, kMaxModelParams).
  const double params = param_count<double>(*this);
  need(params <= kMaxModelParams,
       fmt::format("L={} C={} ffn_hidden={} padded vocabulary {} would have {:.3g} parameters, more "
                   "than the {:.0e} meshtrain addresses", n_layer, n_embd, ffn_hidden, padded_vocab,
                   params, kMaxModelParams));
}

LlamaDims LlamaDims::make(const LlamaConfig& cfg, const ModelShard& shard) {
  const int tp = shard.tp_size, r = shard.tp_rank;
  const int layer_end = shard.check_stage(cfg.n_layer);
  shard.check_tp_divides(cfg.n_head, "n_head");
  shard.check_tp_divides(cfg.n_kv_head, "n_kv_head");
  shard.check_tp_divides(cfg.ffn_hidden, "ffn_hidden");
  shard.check_tp_divides(cfg.padded_vocab, "padded vocabulary (padded_vocab)");
  LlamaDims d;
  d.C = cfg.n_embd;
  d.hd = cfg.head_dim();
  d.NH = cfg.n_head / tp;
  d.NKV = cfg.n_kv_head / tp;
  d.A = d.NH * d.hd;
  d.KV = d.NKV * d.hd;
  d.Q = d.A + 2 * d.KV;
  d.H = cfg.ffn_hidden / tp;
  d.Vl = cfg.padded_vocab / tp;
  d.v_begin = d.Vl * r;
  d.V = cfg.vocab_size;
  d.Vp = cfg.padded_vocab;
  d.layer0 = shard.layer_begin;
  d.L = layer_end - shard.layer_begin;
  d.embeds = shard.first_stage;
  d.heads = shard.last_stage;
  d.tp_rank = r;
  d.tp_size = tp;
  d.sp = shard.sequence_parallel && tp > 1;
  return d;
}

std::string LlamaConfig::describe() const {
  const double p = static_cast<double>(num_params());
  return fmt::format("Llama L{} H{} KV{} C{} FFN{} T{} V{}: {:.2f}M parameters", n_layer, n_head,
                     n_kv_head, n_embd, ffn_hidden, seq_len, vocab_size, p / 1e6);
}

namespace {
LlamaConfig make(int L, int H, int KV, int C, int F, int T, int V, double theta = 10000.0) {
  LlamaConfig c;
  c.n_layer = L, c.n_head = H, c.n_kv_head = KV, c.n_embd = C, c.ffn_hidden = F;
  c.seq_len = T, c.vocab_size = V, c.padded_vocab = pad_vocab(V), c.rope_theta = theta;
  return c;
}
}  // namespace

std::vector<std::string> llama_preset_names() {
  return {"llama-tiny", "llama-char", "llama-wide", "llama-100m", "llama-3.2-1b", "llama-3-8b"};
}

LlamaConfig llama_preset(const std::string& name) {
  // For tests: small enough for finite differences, with GQA (4 heads, 2 KV).
  if (name == "llama-tiny") return make(2, 4, 2, 16, 40, 16, 61);
  // A character-level shape for CPU runs (bytes).
  if (name == "llama-char") return make(6, 6, 2, 384, 1024, 256, 256);
  // ~100M-class for benchmarks: 12 layers of 768, GQA 12/4, SwiGLU 2048, GPT-2's vocabulary.
  if (name == "llama-100m") return make(12, 12, 4, 768, 2048, 1024, 50257);
  // Few wide layers, where splitting each layer over tensor-parallel ranks
  // pays on a CPU: 2 layers of 1024, 16 heads / 8 KV, SwiGLU 2816, 8192 tokens.
  if (name == "llama-wide") return make(2, 16, 8, 1024, 2816, 256, 8192);
  if (name == "llama-3.2-1b") {
    LlamaConfig c = make(16, 32, 8, 2048, 8192, 131072, 128256, 500000.0);
    c.rope_scaling = {32.0, 1.0, 4.0, 8192};
    return c;
  }
  if (name == "llama-3-8b") return make(32, 32, 8, 4096, 14336, 8192, 128256, 500000.0);
  throw Error(fmt::format("unknown llama preset '{}' (known: {})", name,
                          fmt::join(llama_preset_names(), ", ")));
}

}  // namespace meshtrain
