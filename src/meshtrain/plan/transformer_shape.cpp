#include "meshtrain/plan/transformer_shape.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/llama_config.h"

namespace meshtrain::plan {

int64_t TransformerShape::params() const {
  const int64_t h = hidden, hd = hidden / heads, kv = kv_heads * hd;
  if (llama) {
    const int64_t layer = 2 * h + h * (h + 2 * kv) + h * h + 3 * h * ffn;  // norms, qkv, o, gate|up, down
    return layers * layer + 2 * vocab * h + h;
  }
  const int64_t layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * ffn + ffn) + (ffn * h + h);
  return layers * layer + vocab * h + seq * h + 2 * h;
}

int64_t TransformerShape::embedding_params() const { return (llama ? 2 : 1) * vocab * hidden; }

double TransformerShape::flops_per_token(int64_t seq_len) const {
  // The GEMM-read parameters: all but the positions and norms/biases, the
  // embedding counted once as the head (GPT ties them; Llama's embedding
  // lookup is no GEMM, its head is).
  const double h = static_cast<double>(hidden);
  const double gemm = static_cast<double>(params()) - (llama ? vocab * h : seq * h);
  return 6.0 * gemm + 6.0 * layers * h * seq_len;
}

double TransformerShape::recompute_flops_per_token(int64_t seq_len, RecomputePolicy policy) const {
  const double h = static_cast<double>(hidden);
  if (policy == RecomputePolicy::Full) return flops_per_token(seq_len) / 3.0;  // one more forward
  if (policy == RecomputePolicy::Selective) return 2.0 * layers * h * seq_len;  // attention core's forward
  return 0;
}

std::string TransformerShape::describe() const {
  return fmt::format("{} ({}: L{} h{} a{}{} ffn {} V{} s{}): {:.2f}B parameters", name,
                     llama ? "llama" : "gpt", layers, hidden, heads,
                     llama ? fmt::format(" kv{}", kv_heads) : "", ffn, vocab, seq, params() / 1e9);
}

void TransformerShape::validate() const {
  MT_CHECK(layers > 0 && hidden > 0 && heads > 0 && kv_heads > 0 && ffn > 0 && vocab > 0 && seq > 0,
           "model {}: every dimension must be positive", name);
  MT_CHECK(hidden % heads == 0, "model {}: {} heads do not divide hidden {}", name, heads, hidden);
  MT_CHECK(heads % kv_heads == 0, "model {}: {} kv heads do not divide {} heads", name, kv_heads, heads);
}

std::optional<TransformerShape> shape_from_description(const nlohmann::json& j) {
  const std::string family = j.value("family", "");
  if (family != "gpt" && family != "llama") return std::nullopt;
  TransformerShape s;
  s.name = family;
  s.llama = family == "llama";
  s.layers = j.at("n_layer").get<int64_t>();
  s.hidden = j.at("n_embd").get<int64_t>();
  s.heads = j.at("n_head").get<int64_t>();
  s.kv_heads = s.llama ? j.at("n_kv_head").get<int64_t>() : s.heads;
  s.ffn = s.llama ? j.at("ffn_hidden").get<int64_t>() : 4 * s.hidden;
  s.vocab = j.value("padded_vocab", j.at("vocab_size").get<int64_t>());
  s.seq = j.at("seq_len").get<int64_t>();
  return s;
}

double narayanan_params(int64_t layers, int64_t hidden, int64_t vocab, int64_t seq) {
  const double l = static_cast<double>(layers), h = static_cast<double>(hidden);
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + static_cast<double>(vocab + seq) / (12.0 * l * h));
}

namespace {

TransformerShape gpt(std::string name, int64_t L, int64_t h, int64_t a, int64_t V = 51200, int64_t s = 2048) {
  return {std::move(name), false, L, h, a, a, 4 * h, V, s};
}

struct Published {
  const char* name;
  int64_t layers, hidden, heads;
};
// GPT-3 (Brown et al. 2020, Table 2.1: V 50257, context 2048; the 13B
// with hidden 5120, not the table's 5140, so 40 heads divide it) and the rows of
// Narayanan et al. 2021, Table 1 (V 51200, s 2048), the 22B and 175B of
// Korthikanti et al. 2022, Table 3 (also V 51200), plus a 100B of the family.
const Published kGpt3[] = {{"gpt3-small", 12, 768, 12},  {"gpt3-medium", 24, 1024, 16},
                           {"gpt3-large", 24, 1536, 16}, {"gpt3-xl", 24, 2048, 24},
                           {"gpt3-2.7b", 32, 2560, 32},  {"gpt3-6.7b", 32, 4096, 32},
                           {"gpt3-13b", 40, 5120, 40},   {"gpt3-175b", 96, 12288, 96}};
const Published kNarayanan[] = {{"gpt-1.7b", 24, 2304, 24},   {"gpt-3.6b", 30, 3072, 32},
                                {"gpt-7.5b", 36, 4096, 32},   {"gpt-18b", 40, 6144, 48},
                                {"gpt-39b", 48, 8192, 64},    {"gpt-76b", 60, 10240, 80},
                                {"gpt-100b", 80, 10240, 80},  {"gpt-146b", 80, 12288, 96},
                                {"gpt-310b", 96, 16384, 128}, {"gpt-530b", 105, 20480, 128},
                                {"gpt-1t", 128, 25600, 160},  {"gpt-22b", 48, 6144, 64},
                                {"gpt-175b", 96, 12288, 96}};

}  // namespace

std::vector<std::string> shape_preset_names() {
  std::vector<std::string> out;
  for (const std::string& n : gpt_preset_names()) out.push_back(n);
  for (const std::string& n : llama_preset_names()) out.push_back(n);
  for (const Published& p : kGpt3) out.push_back(p.name);
  for (const Published& p : kNarayanan) out.push_back(p.name);
  return out;
}

std::optional<TransformerShape> shape_preset(const std::string& name) {
  for (const Published& p : kGpt3)
    if (name == p.name) return gpt(p.name, p.layers, p.hidden, p.heads, 50257);
  for (const Published& p : kNarayanan)
    if (name == p.name) return gpt(p.name, p.layers, p.hidden, p.heads);
  for (const std::string& n : gpt_preset_names())
    if (n == name) {
      const GPTConfig c = gpt_preset(name);
      return TransformerShape{name, false, c.n_layer, c.n_embd, c.n_head, c.n_head, 4 * int64_t{c.n_embd},
                              c.vocab_size, c.seq_len};
    }
  for (const std::string& n : llama_preset_names())
    if (n == name) {
      const LlamaConfig c = llama_preset(name);
      return TransformerShape{name, true, c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.ffn_hidden,
                              c.vocab_size, c.seq_len};
    }
  return std::nullopt;
}

}  // namespace meshtrain::plan
