// test-links: mt_train mt_nn
// GPT's ParamLayout (nn/gpt_spec.h: the layout as data, computed from the
// shape without a model, which ZeRO and the memory formulas read) equals the
// real parameter views (GPTParams::view): the same names, offsets, shapes and
// units, and the parameters read in f32 under mixed precision are everything
// but wte and each layer's four matrices.
#include <gtest/gtest.h>

#include "meshtrain/nn/gpt.h"
#include "meshtrain/nn/gpt_spec.h"
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
    const auto spec = GPTSpec::make(cfg);
    const ParamLayout& layout = spec->layout();
    // Names, offsets and shapes as the views lay them out.
    const auto named = p.named();
    ASSERT_EQ(layout.params.size(), named.size());
    for (size_t i = 0; i < named.size(); ++i) {
      EXPECT_EQ(layout.params[i].name, named[i].first);
      EXPECT_EQ(layout.params[i].begin, named[i].second.offset() - p.flat.offset());
      EXPECT_EQ(layout.params[i].shape, named[i].second.shape());
    }
    ASSERT_EQ(layout.num_units(), p.num_units());
    for (int u = 0; u < p.num_units(); ++u) {
      EXPECT_EQ(layout.units[u].begin, p.unit_range(u).first);
      EXPECT_EQ(layout.units[u].end, p.unit_range(u).second);
    }
    for (auto [b, e] : layout.f32_read_ranges()) {
      ASSERT_LT(last_end, b) << "spans must be sorted and disjoint (merged when adjacent)";
      ASSERT_LE(e, cfg.num_params());
      for (int64_t i = b; i < e; ++i) predicted[i] = true;
      last_end = e;
    }
    EXPECT_EQ(predicted, f32) << "C " << C << " L " << L << " T " << T;
  }
}
