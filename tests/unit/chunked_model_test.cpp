// A rank of an interleaved pipeline holds several chunks as one model
// (nn/chunked_model.h): one flat buffer with chunk 0 at the top, each
// chunk's parameters under its own names and units, initial weights equal
// to the chunks' own (by any range), hooks in the flat buffer's offsets,
// activation memory counted per chunk with that chunk's slots, and chunk
// models that run on views of the buffers (a chunk's forward and backward
// write the flat gradient buffer). A whole forward is refused with the reason.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/chunked_model.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/parallel/pipeline_executor.h"

using namespace meshtrain;

namespace {

// Llama-tiny with 4 layers, as 2 stages x 2 chunks: stage 0 holds virtual
// stages 0 and 2 (layers [0, 1) and [2, 3)).
struct StageZero {
  std::shared_ptr<const ModelSpec> whole;
  std::vector<std::shared_ptr<const ModelSpec>> chunks;
  std::shared_ptr<const ChunkedSpec> spec;
};
StageZero stage_zero(std::vector<int> slots = {2, 1}) {
  LlamaConfig c = llama_preset("llama-tiny");
  c.n_layer = 4;
  StageZero s;
  s.whole = LlamaSpec::make(c);
  const auto shards = parallel::pipeline_shards(4, 2, 2);
  s.chunks = {s.whole->sharded(shards[0]), s.whole->sharded(shards[2])};
  s.spec = std::make_shared<ChunkedSpec>(s.chunks, slots);
  return s;
}

}  // namespace

TEST(chunked_model, layout_puts_chunk_zero_on_top_and_keeps_names_and_units) {
  const StageZero s = stage_zero();
  const ParamLayout& l = s.spec->layout();
  const int64_t n0 = s.chunks[0]->num_params(), n1 = s.chunks[1]->num_params();
  EXPECT_EQ(l.numel, n0 + n1);
  EXPECT_EQ(s.spec->offset(1), 0);
  EXPECT_EQ(s.spec->offset(0), n1);
  EXPECT_EQ(s.spec->unit_offset(0), s.chunks[1]->layout().num_units());
  EXPECT_NO_THROW(l.validate());
  // Every chunk parameter is there, shifted by its chunk's offset.
  for (int c = 0; c < 2; ++c)
    for (const ParamInfo& p : s.chunks[static_cast<size_t>(c)]->layout().params) {
      auto it = std::find_if(l.params.begin(), l.params.end(),
                             [&](const ParamInfo& q) { return q.name == p.name; });
      ASSERT_NE(it, l.params.end()) << p.name;
      EXPECT_EQ(it->begin, p.begin + s.spec->offset(c)) << p.name;
      EXPECT_EQ(it->shape, p.shape) << p.name;
    }
  EXPECT_EQ(l.order.size(), s.chunks[0]->layout().order.size() + s.chunks[1]->layout().order.size());
  EXPECT_EQ(s.spec->to_json(), s.chunks[0]->to_json());
  // Another shard of the model is the whole model's (a checkpoint's size).
  EXPECT_EQ(s.spec->sharded(ModelShard{})->num_params(), s.whole->num_params());
  EXPECT_DOUBLE_EQ(s.spec->flops_per_token(32), s.whole->flops_per_token(32));  // MFU's convention
}

TEST(chunked_model, initial_weights_by_any_range_are_the_chunks_own) {
  const StageZero s = stage_zero();
  const int64_t n = s.spec->num_params();
  std::vector<float> want(static_cast<size_t>(n));
  for (int c = 0; c < 2; ++c)
    ASSERT_TRUE(s.chunks[static_cast<size_t>(c)]->initial_weights(
        7, {0, s.chunks[static_cast<size_t>(c)]->num_params()}, want.data() + s.spec->offset(c)));
  // A range across the chunk boundary writes exactly that range.
  const ElemSpan r{s.spec->offset(0) - 100, s.spec->offset(0) + 100};
  std::vector<float> got(static_cast<size_t>(n), -1.f);
  ASSERT_TRUE(s.spec->initial_weights(7, r, got.data()));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(got[static_cast<size_t>(i)], i >= r.begin && i < r.end ? want[static_cast<size_t>(i)] : -1.f) << i;
  // The built model's own initialization is the same bits.
  auto m = s.spec->build();
  m->init_weights(7);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), m->param_buffer().data<float>()));
}

TEST(chunked_model, memory_counts_each_chunk_with_its_own_slots) {
  const StageZero s = stage_zero({3, 1});
  const Recompute none{};
  const ModelMemory a = s.chunks[0]->memory(2, 16, 1, none, Precision::FP32);
  const ModelMemory b = s.chunks[1]->memory(2, 16, 1, none, Precision::FP32);
  const ModelMemory m = s.spec->memory(2, 16, 1, none, Precision::FP32);
  EXPECT_EQ(m.activations, 3 * a.activations + b.activations);
  EXPECT_EQ(m.workspace, 3 * (a.workspace - a.shared_workspace) + a.shared_workspace +
                             (b.workspace - b.shared_workspace) + b.shared_workspace);
  EXPECT_EQ(m.shared_workspace, m.workspace);  // already per slot: one slot's formula
}

TEST(chunked_model, chunks_run_on_views_and_report_in_flat_offsets) {
  const StageZero s = stage_zero();
  auto m = s.spec->build();
  m->init_weights(3);
  std::vector<std::pair<int64_t, int64_t>> ready;
  m->set_grad_ready_hook([&](int64_t b, int64_t e) { ready.push_back({b, e}); });
  const std::vector<Model*> chunks = m->pipeline_chunks();
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]->param_buffer().data<float>(), m->param_buffer().data<float>() + s.spec->offset(0));
  // Chunk 0 is the first virtual stage: tokens in, its output's gradient back.
  const int B = 2, T = 8;
  std::vector<int32_t> ids(B * T);
  std::mt19937 rng(1);
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(s.whole->vocab_size()));
  chunks[0]->forward_stage({ids.data(), nullptr, B, T}, nullptr);
  std::vector<float> dy(static_cast<size_t>(B * T * chunks[0]->stage_width()), 0.01f);
  chunks[0]->backward_stage(dy.data(), 1.f);
  // Its gradients land in the top part of the flat buffer, reported from the top down.
  ASSERT_FALSE(ready.empty());
  EXPECT_EQ(ready.front().second, s.spec->num_params());
  for (size_t i = 1; i < ready.size(); ++i) EXPECT_EQ(ready[i].second, ready[i - 1].first);
  EXPECT_GE(ready.back().first, s.spec->offset(0));
  const float* g = m->grad_buffer().data<float>();
  double top = 0, bottom = 0;
  for (int64_t i = 0; i < s.spec->offset(0); ++i) bottom += std::abs(g[i]);
  for (int64_t i = s.spec->offset(0); i < s.spec->num_params(); ++i) top += std::abs(g[i]);
  EXPECT_GT(top, 0);
  EXPECT_EQ(bottom, 0);
  EXPECT_THROW(m->forward({ids.data(), ids.data(), B, T}), Error);
}
