#include "meshtrain/nn/gpt_config.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

int pad_vocab(int v) {
  int m = v > 1024 ? 128 : 64;
  return (v + m - 1) / m * m;
}

namespace {
// The parameter count in int64 (num_params) or in double (validate: sizes
// from a file may overflow 64 bits before they are checked).
template <class N>
N param_count(const GPTConfig& c) {
  const N C = c.n_embd, L = c.n_layer, Vp = c.padded_vocab, T = c.seq_len;
  const N per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
  return Vp * C + T * C + L * per_layer + 2 * C;
}
}  // namespace

int64_t GPTConfig::num_params() const { return param_count<int64_t>(*this); }

int64_t GPTConfig::num_params_non_embedding_pos() const {
  return num_params() - static_cast<int64_t>(seq_len) * n_embd;
}

double GPTConfig::flops_per_token(int T) const {
  return 6.0 * static_cast<double>(num_params_non_embedding_pos()) +
         6.0 * n_layer * static_cast<double>(n_embd) * T;
}

void GPTConfig::validate() const {
  MT_CHECK(n_layer >= 1, "model.n_layer must be >= 1 (got {})", n_layer);
  MT_CHECK(n_head >= 1, "model.n_head must be >= 1 (got {})", n_head);
  MT_CHECK(n_embd >= 1 && n_embd % n_head == 0,
           "model.n_embd ({}) must be a positive multiple of model.n_head ({})", n_embd, n_head);
  MT_CHECK(seq_len >= 1, "model.seq_len must be >= 1 (got {})", seq_len);
  MT_CHECK(vocab_size >= 2 && vocab_size <= 65536,
           "model.vocab_size must be in [2, 65536] (tokens are uint16), got {}", vocab_size);
  MT_CHECK(padded_vocab >= vocab_size, "padded vocabulary {} is smaller than vocabulary {}",
           padded_vocab, vocab_size);
  // The count in floating point first: a file's header may give sizes whose
  // product overflows the 64-bit count (and every offset computed from it).
  const double params = param_count<double>(*this);
  MT_CHECK(params <= kMaxModelParams,
           "model L={} C={} T={} padded vocabulary {} would have {:.3g} parameters, more than the "
           "{:.0e} meshtrain addresses", n_layer, n_embd, seq_len, padded_vocab, params, kMaxModelParams);
}

GPTDims GPTDims::make(const GPTConfig& cfg, const ModelShard& shard) {
  cfg.validate();
  const int tp = shard.tp_size, r = shard.tp_rank;
  const int layer_end = shard.check_stage(cfg.n_layer);
  shard.check_tp_divides(cfg.n_head, "n_head");
  shard.check_tp_divides(cfg.padded_vocab, "padded vocabulary (padded_vocab)");
  GPTDims d;
  d.C = cfg.n_embd;
  d.hd = cfg.head_dim();
  d.NH = cfg.n_head / tp;
  d.A = d.NH * d.hd;
  d.F = 4 * d.C / tp;  // C = n_head * hd, so tp divides it
  d.Vl = cfg.padded_vocab / tp;
  d.v_begin = d.Vl * r;
  d.V = cfg.vocab_size;
  d.Vp = cfg.padded_vocab;
  d.T = cfg.seq_len;
  d.n_layer = cfg.n_layer;
  d.layer0 = shard.layer_begin;
  d.L = layer_end - shard.layer_begin;
  d.embeds = shard.first_stage;
  d.heads = shard.last_stage;
  d.tp_rank = r;
  d.tp_size = tp;
  d.sp = shard.sequence_parallel && tp > 1;
  return d;
}

int64_t GPTDims::num_params() const {
  // Per layer: ln_1, ln_2 (2C each), c_attn (3A x C + 3A), attn c_proj
  // (C x A + C), c_fc (F x C + F), mlp c_proj (C x F + C).
  const int64_t per_layer = 4 * C + 3 * A * C + 3 * A + C * A + C + F * C + F + C * F + C;
  return (has_wte() ? Vl * C : 0) + (embeds ? T * C : 0) + L * per_layer + (heads ? 2 * C : 0);
}

std::string GPTConfig::describe() const {
  return fmt::format("GPT L={} H={} C={} T={} V={} (padded {}), {:.2f}M parameters", n_layer,
                     n_head, n_embd, seq_len, vocab_size, padded_vocab, num_params() / 1e6);
}

static GPTConfig make(int L, int H, int C, int T, int V) {
  GPTConfig c;
  c.n_layer = L;
  c.n_head = H;
  c.n_embd = C;
  c.seq_len = T;
  c.vocab_size = V;
  c.padded_vocab = pad_vocab(V);
  return c;
}

std::vector<std::string> gpt_preset_names() {
  return {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "char-6L", "char-4L", "char-2L", "gpt-wide", "tiny"};
}

GPTConfig gpt_preset(const std::string& name) {
  if (name == "gpt2") return make(12, 12, 768, 1024, 50257);
  if (name == "gpt2-medium") return make(24, 16, 1024, 1024, 50257);
  if (name == "gpt2-large") return make(36, 20, 1280, 1024, 50257);
  if (name == "gpt2-xl") return make(48, 25, 1600, 1024, 50257);
  // nanoGPT's character-level Shakespeare shape, with a byte vocabulary.
  if (name == "char-6L") return make(6, 6, 384, 256, 256);
  // The demo's shape: learns characters fastest per second on 2 CPU cores
  // (docs/PERFORMANCE.md, "The demo").
  if (name == "char-4L") return make(4, 4, 192, 128, 256);
  if (name == "char-2L") return make(2, 4, 128, 128, 256);
  // Few wide layers, where splitting each layer over tensor-parallel ranks
  // pays on a CPU: 2 layers of 1024, 16 heads, 8192 tokens.
  if (name == "gpt-wide") return make(2, 16, 1024, 256, 8192);
  // For tests: small enough for finite differences.
  if (name == "tiny") return make(2, 2, 16, 16, 61);
  std::string names;
  for (auto& n : gpt_preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw Error(fmt::format("unknown model preset '{}' (known: {})", name, names));
}

}  // namespace meshtrain
