#include "meshtrain/nn/kv_decoders.h"

#include <omp.h>

#include <cstring>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/gpt_params.h"

namespace meshtrain {

namespace {

// What both families share: positions, the cache, per-thread scores, checks.
class CachedDecoder : public Decoder {
 public:
  CachedDecoder(int T, int V, int L, int64_t kv_width, const Tensor& params)
      : T_(T), V_(V), kv_width_(kv_width), params_(params), k_(&kernels_for(params.device())),
        stream_(default_stream(params.device())) {
    keys_.assign(static_cast<size_t>(L) * T * kv_width, 0.0f);
    values_.assign(keys_.size(), 0.0f);
    scores_.assign(static_cast<size_t>(omp_get_max_threads()) * T, 0.0f);
  }
  int position() const override { return pos_; }
  int capacity() const override { return T_; }
  void reset() override { pos_ = 0; }

 protected:
  void check(std::span<const int32_t> tokens) const {
    MT_CHECK(!tokens.empty(), "the decoder needs at least one token to feed");
    MT_CHECK(pos_ + static_cast<int64_t>(tokens.size()) <= T_,
             "the KV cache holds {} positions (the model's context): {} cached + {} new do not "
             "fit", T_, pos_, tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
      MT_CHECK(tokens[i] >= 0 && tokens[i] < V_,
               "token id {} at position {} is outside the vocabulary [0, {})", tokens[i],
               pos_ + static_cast<int64_t>(i), V_);
  }
  float* layer_keys(int l) { return keys_.data() + static_cast<size_t>(l) * T_ * kv_width_; }
  float* layer_values(int l) { return values_.data() + static_cast<size_t>(l) * T_ * kv_width_; }
  // Stores rows' k and v (at `k_at`/`v_at` within rows of `row_width`) for
  // positions [pos_, pos_ + n) of layer l.
  void store_kv(int l, const float* rows, int64_t n, int64_t row_width, int64_t k_at,
                int64_t v_at) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(layer_keys(l) + (pos_ + i) * kv_width_, rows + i * row_width + k_at,
                  sizeof(float) * kv_width_);
      std::memcpy(layer_values(l) + (pos_ + i) * kv_width_, rows + i * row_width + v_at,
                  sizeof(float) * kv_width_);
    }
  }
  // att (n, NH*hd) from queries at `q_at` in rows of `row_width`; query head h
  // reads cached head h / (NH / NKV).
  void attend(int l, float* att, const float* rows, int64_t n, int64_t row_width, int64_t NH,
              int64_t NKV, int64_t hd) {
    const int64_t rep = NH / NKV;
    const float* keys = layer_keys(l);
    const float* values = layer_values(l);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < NH; ++h) {
        float* scores = scores_.data() + static_cast<size_t>(omp_get_thread_num()) * T_;
        const int64_t kvh = h / rep;
        cached_attention(att + i * NH * hd + h * hd, rows + i * row_width + h * hd,
                         keys + kvh * hd, values + kvh * hd, kv_width_, pos_ + i + 1, hd, scores);
      }
    }
  }
  const float* w(int64_t offset) const { return params_.data<float>() + offset; }

  int T_, V_;
  int64_t kv_width_;
  int pos_ = 0;
  Tensor params_;
  const KernelTable* k_;
  Stream stream_;
  std::vector<float> keys_, values_, scores_;
};

class GPTDecoder final : public CachedDecoder {
 public:
  GPTDecoder(const GPTConfig& cfg, const Tensor& params)
      : CachedDecoder(cfg.seq_len, cfg.vocab_size, cfg.n_layer, cfg.n_embd, params),
        cfg_(cfg), p_(GPTParams::view(cfg, params)) {
    logits_.resize(static_cast<size_t>(cfg.padded_vocab));
  }

  const float* feed(std::span<const int32_t> tokens) override {
    check(tokens);
    const int64_t n = static_cast<int64_t>(tokens.size()), C = cfg_.n_embd;
    const int64_t NH = cfg_.n_head, hd = C / NH;
    x_.resize(n * C);
    ln_.resize(n * C);
    qkv_.resize(n * 3 * C);
    att_.resize(n * C);
    fc_.resize(n * 4 * C);
    act_.resize(n * 4 * C);
    stats_.resize(2 * n);
    for (int64_t i = 0; i < n; ++i) {
      const float* e = p_.wte.data<float>() + static_cast<int64_t>(tokens[i]) * C;
      const float* pe = p_.wpe.data<float>() + (pos_ + i) * C;
      for (int64_t c = 0; c < C; ++c) x_[i * C + c] = e[c] + pe[c];
    }
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const GPTLayerParams& q = p_.layers[l];
      k_->layernorm_forward(stream_, ln_.data(), stats_.data(), stats_.data() + n, x_.data(),
                            q.ln1w.data<float>(), q.ln1b.data<float>(), n, C);
      k_->matmul_forward(stream_, qkv_.data(), ln_.data(), q.qkvw.data<float>(), q.qkvb.data<float>(), n,
                         C, 3 * C, false);
      store_kv(l, qkv_.data(), n, 3 * C, C, 2 * C);
      attend(l, att_.data(), qkv_.data(), n, 3 * C, NH, NH, hd);
      k_->matmul_forward(stream_, x_.data(), att_.data(), q.attprojw.data<float>(),
                         q.attprojb.data<float>(), n, C, C, true);
      k_->layernorm_forward(stream_, ln_.data(), stats_.data(), stats_.data() + n, x_.data(),
                            q.ln2w.data<float>(), q.ln2b.data<float>(), n, C);
      k_->matmul_forward(stream_, fc_.data(), ln_.data(), q.fcw.data<float>(), q.fcb.data<float>(), n, C,
                         4 * C, false);
      k_->gelu_forward(stream_, act_.data(), fc_.data(), n * 4 * C);
      k_->matmul_forward(stream_, x_.data(), act_.data(), q.fcprojw.data<float>(),
                         q.fcprojb.data<float>(), n, 4 * C, C, true);
    }
    pos_ += static_cast<int>(n);
    const float* last = x_.data() + (n - 1) * C;
    k_->layernorm_forward(stream_, ln_.data(), stats_.data(), stats_.data() + 1, last,
                          p_.lnfw.data<float>(), p_.lnfb.data<float>(), 1, C);
    k_->matmul_forward(stream_, logits_.data(), ln_.data(), p_.wte.data<float>(), nullptr, 1, C,
                       cfg_.padded_vocab, false);
    return logits_.data();
  }

 private:
  GPTConfig cfg_;
  GPTParams p_;
  std::vector<float> x_, ln_, qkv_, att_, fc_, act_, stats_, logits_;
};

class LlamaDecoder final : public CachedDecoder {
 public:
  LlamaDecoder(std::shared_ptr<const LlamaSpec> spec, const Tensor& params)
      : CachedDecoder(spec->config().seq_len, spec->config().vocab_size, spec->config().n_layer,
                      spec->config().kv_dim(), params),
        spec_(std::move(spec)), cfg_(spec_->config()) {
    rope_ = cpu::rope_table(cfg_.seq_len, cfg_.head_dim(), cfg_.rope_theta, cfg_.rope_scaling);
    logits_.resize(static_cast<size_t>(cfg_.vocab_size));
  }

  const float* feed(std::span<const int32_t> tokens) override {
    check(tokens);
    const int64_t n = static_cast<int64_t>(tokens.size()), C = cfg_.n_embd;
    const int64_t NH = cfg_.n_head, NKV = cfg_.n_kv_head, hd = cfg_.head_dim();
    const int64_t KV = cfg_.kv_dim(), Q = cfg_.qkv_width(), H = cfg_.ffn_hidden;
    x_.resize(n * C);
    ln_.resize(n * C);
    qkv_.resize(n * Q);
    att_.resize(n * C);
    gu_.resize(n * 2 * H);
    act_.resize(n * H);
    rstd_.resize(n);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(x_.data() + i * C, w(spec_->embed_offset()) + static_cast<int64_t>(tokens[i]) * C,
                  sizeof(float) * C);
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const LlamaSpec::LayerOffsets& o = spec_->layer(l);
      k_->rmsnorm_forward(stream_, ln_.data(), rstd_.data(), x_.data(), w(o.ln1), n, C, cfg_.norm_eps);
      k_->matmul_forward(stream_, qkv_.data(), ln_.data(), w(o.qkv), nullptr, n, C, Q, false);
      for (int64_t i = 0; i < n; ++i) {
        rotate(qkv_.data() + i * Q, NH, hd, pos_ + i);
        rotate(qkv_.data() + i * Q + C, NKV, hd, pos_ + i);
      }
      store_kv(l, qkv_.data(), n, Q, C, C + KV);
      attend(l, att_.data(), qkv_.data(), n, Q, NH, NKV, hd);
      k_->matmul_forward(stream_, x_.data(), att_.data(), w(o.o), nullptr, n, C, C, true);
      k_->rmsnorm_forward(stream_, ln_.data(), rstd_.data(), x_.data(), w(o.ln2), n, C, cfg_.norm_eps);
      k_->matmul_forward(stream_, gu_.data(), ln_.data(), w(o.gate_up), nullptr, n, C, 2 * H, false);
      k_->swiglu_forward(stream_, act_.data(), gu_.data(), n, H);
      k_->matmul_forward(stream_, x_.data(), act_.data(), w(o.down), nullptr, n, H, C, true);
    }
    pos_ += static_cast<int>(n);
    k_->rmsnorm_forward(stream_, ln_.data(), rstd_.data(), x_.data() + (n - 1) * C, w(spec_->norm_offset()),
                        1, C, cfg_.norm_eps);
    k_->matmul_forward(stream_, logits_.data(), ln_.data(), w(spec_->head_offset()), nullptr, 1, C,
                       cfg_.vocab_size, false);
    return logits_.data();
  }

 private:
  // Hugging Face's rotate_half at position t, for `heads` heads of hd.
  void rotate(float* x, int64_t heads, int64_t hd, int64_t t) const {
    const int64_t half = hd / 2;
    const float* c = rope_.cos.data() + t * rope_.half;
    const float* s = rope_.sin.data() + t * rope_.half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + h * hd;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * c[j] - b * s[j];
        v[j + half] = b * c[j] + a * s[j];
      }
    }
  }

  std::shared_ptr<const LlamaSpec> spec_;
  LlamaConfig cfg_;
  cpu::RopeTable rope_;
  std::vector<float> x_, ln_, qkv_, att_, gu_, act_, rstd_, logits_;
};

}  // namespace

std::unique_ptr<Decoder> make_gpt_decoder(const GPTConfig& cfg, const Tensor& params) {
  return std::make_unique<GPTDecoder>(cfg, params);
}

std::unique_ptr<Decoder> make_llama_decoder(std::shared_ptr<const LlamaSpec> spec,
                                            const Tensor& params) {
  MT_CHECK(spec->shard().tp_size == 1,
           "generation with a KV cache runs on the whole model, not a tensor-parallel shard "
           "(tp = {})", spec->shard().tp_size);
  return std::make_unique<LlamaDecoder>(std::move(spec), params);
}

}  // namespace meshtrain
