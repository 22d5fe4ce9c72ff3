// test-links: meshtrain mt_comm_testing
// Tensor parallelism of the GPT family, at the model, between real
// processes: each rank of a tp group builds its shard (gpt_spec.cpp: c_attn
// split by heads in its q, k and v parts, c_fc by rows, both c_proj by
// columns, the tied embedding by vocabulary rows), and the shard's loss and
// gradients equal the whole model's slices (computed by every rank alone)
// within float rounding of the split sums: loss 1e-5 relative, every
// gradient element within 1e-5 of the largest in its tensor. Covers the
// tied embedding's two gradient contributions, the replicated LayerNorms,
// position table and row-parallel biases, a vocabulary (61) that is not a
// multiple of tp x 64, ignored targets, several SGD steps, every recompute
// mode, bf16 and fp16, and sequence parallelism; the Megatron traffic per
// layer; the errors for shapes tp cannot split.
#include <gtest/gtest.h>

#include <numeric>

#include "meshtrain/nn/gpt.h"
#include "meshtrain/nn/gpt_activations.h"
#include "tp_shard_harness.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace meshtrain::comm::testing;
using namespace tp_test;

namespace {

// The tiny preset (2 layers, C = 16, V = 61 padded to 64) with 4 heads, so
// tp 2 and 4 both split it.
GPTConfig tiny(int n_head = 4) {
  GPTConfig c = gpt_preset("tiny");
  c.n_head = n_head;
  return c;
}

void expect_matches(int tp, const GPTConfig& cfg, Recompute rc = {},
                    Precision prec = Precision::FP32, double tol = 1e-5, int steps = 4,
                    bool sp = false) {
  auto w = run_world(tp, [&](Communicator& c) {
    return shard_matches_whole(c, GPTSpec::make(cfg), rc, prec, steps, tol, sp, /*last_row=*/true);
  }, opts());
  EXPECT_TRUE(w.ok()) << "tp " << tp << (sp ? " sequence parallel" : "") << " recompute "
                      << rc.name() << " " << precision_name(prec) << "\n" << w.report();
}

}  // namespace

TEST(gpt_tp, shard_matches_whole_model_tp2) { expect_matches(2, tiny()); }
TEST(gpt_tp, shard_matches_whole_model_tp4) { expect_matches(4, tiny()); }

TEST(gpt_tp, shard_matches_whole_model_tp2_every_recompute_mode) {
  for (const Recompute& rc : {Recompute::full(), Recompute::selective(), Recompute::every_k(2)})
    expect_matches(2, tiny(), rc);
}

TEST(gpt_tp, shard_matches_whole_model_in_16_bits) {
  // 16-bit roundings can flip where the split sums differ: tp_shard_harness.h.
  expect_matches(2, tiny(), {}, Precision::BF16, 2e-3, 2);
  expect_matches(2, tiny(), Recompute::full(), Precision::FP16, 2e-3, 2);
}

TEST(gpt_tp, sequence_parallel_shard_matches_whole_model) {
  expect_matches(2, tiny(), {}, Precision::FP32, 1e-5, 4, true);
  expect_matches(4, tiny(), {}, Precision::FP32, 1e-5, 3, true);
  for (const Recompute& rc : {Recompute::full(), Recompute::selective(), Recompute::every_k(2)})
    expect_matches(2, tiny(), rc, Precision::FP32, 1e-5, 2, true);
  // The 16-bit LayerNorm outputs are allgathered as 16-bit values.
  expect_matches(2, tiny(), {}, Precision::BF16, 2e-3, 2, true);
}

TEST(gpt_tp, sequence_parallel_keeps_a_tp_share_of_the_residual_stream) {
  const GPTConfig cfg = tiny();
  ModelShard plain{0, 2}, sp{0, 2};
  sp.sequence_parallel = true;
  const GPTDims dp = GPTDims::make(cfg, plain), ds = GPTDims::make(cfg, sp);
  const int B = 4, T = 16;
  const int64_t N = B * T, C = cfg.n_embd, L = cfg.n_layer;
  // Buffers are rounded to 16 floats; every size below is a multiple of 16.
  const int64_t a = GPTActivations::buffer_floats(dp, B, T, {}, Precision::FP32);
  const int64_t b = GPTActivations::buffer_floats(ds, B, T, {}, Precision::FP32);
  // Per layer ln1, residual2, ln2 (+ 2 x 2 statistics rows) and the block
  // output; encoded, lnf (+ 2 rows) and dresidual: half the rows each,
  // against gathered, gathered2, dbtc_local and the LayerNorm gradients.
  const int64_t halved = (L * (4 * C + 4) + 3 * C + 2) * (N / 2);
  EXPECT_EQ(a - b, halved - (2 * N * C + N / 2 * C + 2 * C));
}

TEST(gpt_tp, shard_layout_splits_qkv_by_heads) {
  const GPTConfig cfg = tiny();
  auto full = GPTSpec::make(cfg);
  auto spec = GPTSpec::make(cfg, ModelShard{1, 2});
  auto find = [](const ParamLayout& l, const std::string& name) {
    for (const ParamInfo& p : l.params)
      if (p.name == name) return p;
    throw std::runtime_error("no " + name);
  };
  const ParamLayout& l = spec->layout();
  EXPECT_EQ(find(l, "wte.weight").shape, (Shape{32, 16}));
  EXPECT_EQ(find(l, "wte.weight").logical_shape(), (Shape{64, 16}));
  EXPECT_EQ(find(l, "wpe.weight").split_dim, -1);
  EXPECT_EQ(find(l, "h.0.attn.c_attn.weight").shape, (Shape{24, 16}));
  EXPECT_EQ(find(l, "h.0.attn.c_attn.weight").split_parts, 3);
  EXPECT_EQ(find(l, "h.0.attn.c_proj.weight").shape, (Shape{16, 8}));
  EXPECT_EQ(find(l, "h.0.attn.c_proj.weight").split_dim, 1);
  EXPECT_EQ(find(l, "h.0.attn.c_proj.bias").split_dim, -1);
  EXPECT_EQ(find(l, "h.1.mlp.c_fc.bias").shape, (Shape{32}));
  EXPECT_EQ(find(l, "h.1.mlp.c_proj.weight").shape, (Shape{16, 32}));
  EXPECT_EQ(spec->to_json(), full->to_json());  // the logical description
  // Shard 1 holds rows [8, 16) of each of q, k and v (its two heads), and
  // c_attn.bias likewise.
  std::vector<float> whole(static_cast<size_t>(full->layout().numel));
  std::iota(whole.begin(), whole.end(), 0.f);
  std::vector<float> mine(static_cast<size_t>(l.numel));
  copy_logical_to_shard(full->layout(), l, 1, whole.data(), mine.data());
  const ParamInfo fw = find(full->layout(), "h.0.attn.c_attn.weight");
  const ParamInfo sw = find(l, "h.0.attn.c_attn.weight");
  for (int part = 0; part < 3; ++part)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 16; ++c)
        ASSERT_EQ(mine[sw.begin + (part * 8 + r) * 16 + c],
                  whole[fw.begin + (part * 16 + 8 + r) * 16 + c]) << part << " " << r << " " << c;
  const ParamInfo fb = find(full->layout(), "h.0.attn.c_attn.bias");
  const ParamInfo sb = find(l, "h.0.attn.c_attn.bias");
  for (int part = 0; part < 3; ++part)
    for (int r = 0; r < 8; ++r)
      ASSERT_EQ(mine[sb.begin + part * 8 + r], whole[fb.begin + part * 16 + 8 + r]);
}

TEST(gpt_tp, shapes_tp_cannot_split_are_clear_errors) {
  auto message = [](const GPTConfig& cfg, int tp) {
    try {
      GPTSpec::make(cfg, ModelShard{0, tp});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GPTConfig three = tiny(2);
  three.n_embd = 18;
  three.n_head = 3;
  EXPECT_NE(message(three, 2).find("parallel.tp = 2 must divide the model's n_head (3)"),
            std::string::npos) << message(three, 2);
  EXPECT_NE(message(three, 3).find("padded_vocab) (64)"), std::string::npos) << message(three, 3);
}

TEST(gpt_tp, a_shard_does_not_generate_alone) {
  auto m = GPTSpec::make(tiny(), ModelShard{0, 2})->build();
  try {
    m->make_decoder();
    FAIL() << "a tp shard made a decoder";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("not a tensor-parallel shard"), std::string::npos) << e.what();
  }
}

// The Megatron traffic count (tp_shard_harness.h), LayerNorms 2C floats.
TEST(gpt_tp, communication_volume_matches_the_megatron_formulas) {
  for (bool sp : {false, true}) {
    auto w = run_world(2, [sp](Communicator& c) {
      const GPTConfig cfg = tiny();
      return traffic_matches_megatron(c, GPTSpec::make(cfg), cfg.n_embd, cfg.n_layer, sp,
                                      2 * cfg.n_embd);
    }, opts());
    EXPECT_TRUE(w.ok()) << (sp ? "sequence parallel\n" : "") << w.report();
  }
}
