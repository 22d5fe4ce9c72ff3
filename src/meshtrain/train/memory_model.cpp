#include "meshtrain/train/memory_model.h"

namespace meshtrain {

MemoryPrediction predict_training_memory(const GPTConfig& cfg, int B, int T, int threads) {
  const int64_t P = cfg.num_params();
  const int64_t C = cfg.n_embd, L = cfg.n_layer, NH = cfg.n_head, Vp = cfg.padded_vocab;
  const int64_t BT = static_cast<int64_t>(B) * T, hd = C / NH;
  MemoryPrediction m;
  m.params = 4 * P;
  m.grads = 4 * P;
  m.optimizer = 8 * P;
  // Per layer saved for backward: ln1, qkv(3), atty, residual2, ln2, fch(4),
  // gelu(4), residual3 = 16 BTC; LayerNorm stats 4 BT; attention lse NH*B*T.
  const int64_t per_layer = 16 * BT * C + 4 * BT + NH * BT;
  // Embedding output, final LayerNorm (+stats), logits, losses, and backward
  // scratch: residual gradient (BTC), one BTC and one 4BTC temporary.
  const int64_t rest = BT * C + BT * C + 2 * BT + BT * Vp + BT + 6 * BT * C;
  m.activations = 4 * (L * per_layer + rest);
  // Attention: per thread, eight T x hd head tiles and two 64 x T score blocks.
  m.workspace = 4 * static_cast<int64_t>(threads) * (8 * T * hd + 2 * 64 * T);
  return m;
}

}  // namespace meshtrain
