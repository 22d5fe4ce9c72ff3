// test-links: mt_train mt_nn
// The memory formulas' layout of the parameters GPT reads in f32 under mixed
// precision (train/memory_report.h gpt_f32_read_spans, computed from the
// model shape without a model) equals the real parameter layout
// (GPTParams::view): everything but wte and each layer's four matrices.
#include <gtest/gtest.h>

#include "meshtrain/nn/gpt.h"
#include "meshtrain/train/memory_report.h"

using namespace meshtrain;

TEST(zero, mixed_f32_read_spans_match_the_parameter_layout) {
  for (auto [C, L, T] : {std::tuple{16, 2, 8}, {35, 3, 15}, {64, 1, 32}}) {
    GPTConfig cfg;
    cfg.n_embd = C;
    cfg.n_head = C == 35 ? 5 : 4;
    cfg.n_layer = L;
    cfg.seq_len = T;
    cfg.vocab_size = 100;
    cfg.padded_vocab = 128;
    GPT model(cfg);
    const GPTParams& p = model.params();
    std::vector<bool> f32(cfg.num_params(), true);
    auto gemm = [&](const Tensor& t) {
      const int64_t b = t.offset() - p.flat.offset();
      for (int64_t i = b; i < b + t.numel(); ++i) f32[i] = false;
    };
    gemm(p.wte);
    for (const GPTLayerParams& l : p.layers)
      for (const Tensor* t : {&l.qkvw, &l.attprojw, &l.fcw, &l.fcprojw}) gemm(*t);
    std::vector<bool> predicted(cfg.num_params(), false);
    int64_t last_end = -1;
    for (auto [b, e] : gpt_f32_read_spans(cfg)) {
      ASSERT_LT(last_end, b) << "spans must be sorted and disjoint (merged when adjacent)";
      ASSERT_LE(e, cfg.num_params());
      for (int64_t i = b; i < e; ++i) predicted[i] = true;
      last_end = e;
    }
    EXPECT_EQ(predicted, f32) << "C " << C << " L " << L << " T " << T;
  }
}
