#include "meshtrain/train/memory_model.h"

#include <algorithm>

#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/nn/gpt.h"

namespace meshtrain {

MemoryPrediction predict_training_memory(const GPTConfig& cfg, int B, int T, int threads,
                                         const Recompute& recompute, Precision precision) {
  const int64_t P = cfg.num_params();
  const int64_t C = cfg.n_embd;
  MemoryPrediction m;
  m.params = (is_mixed(precision) ? 6 : 4) * P;
  m.grads = 4 * P;
  m.optimizer = 8 * P;
  // Per layer saved for backward without recompute: ln1, qkv(3), atty,
  // residual2, ln2, fch(4), gelu(4), residual3 = 16 BTC; LayerNorm stats 4 BT;
  // attention lse NH*B*T. Plus the embedding output, final LayerNorm, logits,
  // losses and backward scratch. The recompute policy drops per-layer parts
  // and adds one scratch block (docs/ARCHITECTURE.md, nn); the model's own
  // layout count gives the exact bytes.
  m.activations = GPT::activation_bytes(cfg, B, T, recompute, precision);
  // Attention: per thread, two 64 x Tp score blocks and the head's K and V
  // packed as hd x Tp panels, Tp = T rounded up to 32 (q, k, v and the head
  // gradients are read and written in place).
  const int64_t Tp = (static_cast<int64_t>(T) + 31) / 32 * 32;
  m.workspace = 4 * static_cast<int64_t>(threads) * (2 * 64 * Tp + 2 * cfg.head_dim() * Tp);
  const bool widened = precision == Precision::FP16 ||
                       (precision == Precision::BF16 &&
                        cpu::bf16_gemm_path() == cpu::HalfGemmPath::FallbackSgemm);
  if (widened) {
    // The two f32 copies of the largest operands: A = an output gradient
    // (N x max(4C, Vp)); B = a weight or the fc output (N x 4C, Vp x C, 4C x C).
    const int64_t N = static_cast<int64_t>(B) * T, Vp = cfg.padded_vocab;
    m.workspace += 4 * (N * std::max(4 * C, Vp) + std::max({N * 4 * C, Vp * C, 4 * C * C}));
  }
  return m;
}

}  // namespace meshtrain
