#include "meshtrain/train/memory_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/optim/offloaded_optimizer.h"
#include "meshtrain/parallel/zero.h"

namespace meshtrain {

namespace {

// A rank's own range of P parameters under ZeRO (parallel/zero_layout.h).
ElemSpan own_range(int64_t P, int world, int rank) {
  const int64_t chunk = (P + world - 1) / world;
  return {std::min(P, chunk * rank), std::min(P, chunk * (rank + 1))};
}

std::string mb(double bytes) { return fmt::format("{:.1f}", bytes / 1e6); }

// Stages 2-3's transient full gradients (parallel/zero_gradients.h) at the
// moments that can peak: the backward head (the embeddings' gradient and the
// final LayerNorm's being written), the first layer (those two waiting for
// their reduce, the layer written), later layers (the layer written, two
// ranges waiting) and the final range (the embeddings again). A bf16 wire
// (`w` bytes) holds the waiting ranges at w bytes per element; a range being
// rounded is in both formats one chunk (kWireChunk elements) at a time.
struct TransientGrads {
  int64_t head = 0, first = 0, steady = 0, tail = 0;
  // Stage 3 (isolate_embedding): the first layer after the embeddings' reduce completed.
  int64_t isolated_first = 0;
  int64_t peak() const { return std::max({head, first, steady, tail}); }
};

constexpr int64_t kWireChunk = int64_t{1} << 19;  // parallel/zero_gradients.cpp's chunk

TransientGrads transient_grads(int64_t g, int64_t w, int64_t u0, int64_t lnf, int64_t layer,
                               int64_t L) {
  TransientGrads t;
  if (w == 0) {
    t.head = g * (u0 + lnf);
    t.first = g * (u0 + lnf + layer);
    // The layer written and two ranges pending: with 2 layers or fewer one
    // of those is the final LayerNorm's.
    t.steady = g * (L >= 3 ? 3 * layer : L * layer + lnf);
    t.isolated_first = g * (lnf + layer);
    return t;
  }
  // The range launched: f32, plus its first chunk in bf16 as well.
  auto launched = [&](int64_t n) { return g * n + w * std::min(n, kWireChunk); };
  t.head = launched(u0) + g * lnf;
  t.first = w * (u0 + lnf) + launched(layer);
  t.isolated_first = w * lnf + launched(layer);
  if (L >= 2) t.steady = w * (lnf + std::min<int64_t>(2, L - 1) * layer) + launched(layer);
  t.tail = w * (u0 + lnf + std::min<int64_t>(2, L) * layer);
  return t;
}

}  // namespace

namespace {

// Per unit, the elements outside the `own` range: all of them, and those
// the model reads in f32 (ParamLayout::f32_read_ranges).
struct ForeignCount {
  int64_t all = 0, f32 = 0;
};
std::vector<ForeignCount> foreign_unit_counts(const ParamLayout& layout, ElemSpan own) {
  const std::vector<ElemSpan> spans = layout.f32_read_ranges();
  auto outside_own = [&](int64_t lo, int64_t hi) {
    return (hi - lo) - std::max<int64_t>(0, std::min(hi, own.end) - std::max(lo, own.begin));
  };
  std::vector<ForeignCount> out;
  int64_t b = 0;
  for (const int64_t n : layout.unit_sizes()) {
    const int64_t e = b + n;
    ForeignCount c{outside_own(b, e), 0};
    for (const ElemSpan& f : spans)
      if (std::max(f.begin, b) < std::min(f.end, e))
        c.f32 += outside_own(std::max(f.begin, b), std::min(f.end, e));
    out.push_back(c);
    b = e;
  }
  return out;
}

// Mixed precision under ZeRO: the bytes a unit's foreign part takes when
// resident (the 16-bit copy, plus f32 for the parameters read in f32).
int64_t mixed_foreign_bytes(const ForeignCount& c) { return 2 * c.all + 4 * c.f32; }

// Rank 0 under ZeRO at a save or sample (ZeroParameters::gather_to_root):
// the f32 parameters of other ranks it does not hold otherwise: under mixed
// precision every foreign master weight (outside the f32-read ranges), and
// in stage 3 the foreign part of every unit that is not persistent (for
// mixed precision only its f32-read parameters, the rest being masters).
int64_t zero_root_gather_bytes(const MemoryPlan& plan, int stage, int world) {
  if (stage < 1 || plan.rank != 0 || world < 2) return 0;
  const bool mixed = plan.bytes.p_full > 0;
  if (!mixed && stage < 3) return 0;
  const ParamLayout& layout = plan.model->layout();
  const std::vector<int64_t> units = layout.unit_sizes();
  const std::vector<ForeignCount> foreign =
      foreign_unit_counts(layout, own_range(layout.numel, world, 0));
  int64_t bytes = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const bool sharded_unit = stage == 3 && units[u] >= plan.persist_threshold;
    const ForeignCount& c = foreign[u];
    if (mixed) bytes += 4 * (c.all - c.f32) + (sharded_unit ? 4 * c.f32 : 0);
    else if (sharded_unit) bytes += 4 * c.all;
  }
  return bytes;
}

}  // namespace

RankMemory predict_rank_memory(const MemoryPlan& plan) {
  MT_CHECK(plan.model, "a memory plan needs a model");
  const ParamLayout& layout = plan.model->layout();
  const int64_t P = layout.numel;
  const int N = std::max(1, plan.world);
  const int stage = N > 1 ? plan.zero_stage : 0;
  const ElemSpan own_span = own_range(P, N, plan.rank);
  const int64_t own = stage > 0 ? own_span.count() : P;
  const StateBytes& b = plan.bytes;
  const std::vector<int64_t> units = layout.unit_sizes();
  // The stage 2/3 formulas follow a decoder's unit shape (nn/model.h): the
  // first unit the embeddings, the last the final norm, layers between.
  const int64_t n_layer = std::max<int64_t>(0, static_cast<int64_t>(units.size()) - 2);
  RankMemory m;
  m.params = b.p * P;
  m.grads = b.g * (stage >= 2 ? own : P);
  m.optimizer = b.o * own;
  m.activations = plan.base.activations;
  m.workspace = plan.base.workspace;
  // bf16 gradient wire: stages 0-1 reduce in a shared bf16 copy of the
  // whole gradient buffer (parallel/data_parallel.h).
  if (N > 1 && stage <= 1) m.comm = plan.grad_wire * P;
  const TransientGrads tg =
      transient_grads(b.g, plan.grad_wire, units.front(), units.back(),
                      n_layer > 0 ? units[1] : 0, n_layer);
  if (stage >= 2) {
    // Transient full gradients (parallel/zero_gradients.h): at the backward
    // head the embeddings' (reduced right after it) and the final LayerNorm's;
    // then the layer being written and up to two ranges waiting for their
    // reduce (the first of which may still be the embeddings).
    m.comm = tg.peak();
  }
  if (stage == 3) {
    // The own range, and the parts of the persistent units outside it.
    int64_t persistent_foreign = 0, largest = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      if (units[u] >= plan.persist_threshold) {
        largest = std::max(largest, units[u]);
        continue;
      }
      const ParamUnit& pu = layout.units[u];
      const int64_t inside = std::max<int64_t>(0, std::min(pu.end, own_span.end) - std::max(pu.begin, own_span.begin));
      persistent_foreign += units[u] - inside;
    }
    m.params = b.p * (own + persistent_foreign);
    // Gathered units in use (parallel/zero_parameters.h) on top of the
    // transient gradients, at the moments that can peak. The tied embedding
    // is held gathered or as its gradient, never both (nn/gpt.h: its
    // gradient is written after its backward Done), nothing is prefetched
    // while it is gathered, and its reduce completes before backward starts
    // a layer (zero_gradients.h, isolate_embedding). So: the embedding
    // gathered with the final LayerNorm (forward lookup and output
    // projection; backward head, the LayerNorm's gradient staged); the
    // embedding's gradient (tg.head); the first layer (current + prefetched,
    // the LayerNorm's reduce pending); the other layers (the layer written
    // and two pending); the final range.
    if (largest > 0) {
      const int64_t L = n_layer, layer = L > 0 ? units[1] : 0;
      const int64_t u0 = units.front(), lnf = units.back();
      const int64_t held2 = b.p * std::min<int64_t>(2, L) * layer;
      m.comm = std::max({b.p * (u0 + lnf) + b.g * lnf, tg.head + b.p * lnf,
                         held2 + tg.isolated_first, held2 + tg.steady, held2 + tg.tail});
    }
  }
  m.params += b.p_full * P;
  if (b.p_full > 0 && stage >= 1) {
    // Mixed precision under ZeRO (parallel/zero_parameters.h): the f32
    // parameters are master weights kept for the own range only, counted with
    // the optimizer state (o + 4 = 12); the 16-bit copy (p_full) is the
    // parameter copy the model computes with, whole in stages 1-2 and
    // gathered per unit in stage 3, plus in f32 the foreign parts of the few
    // parameters read in f32 (position embeddings, biases, LayerNorm).
    std::vector<int64_t> foreign;
    for (const ForeignCount& c : foreign_unit_counts(layout, own_span))
      foreign.push_back(mixed_foreign_bytes(c));
    m.optimizer = (b.o + b.p) * own;
    m.params = b.p_full * own;
    int64_t held_units = 0, largest_layer = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      if (stage < 3 || units[u] < plan.persist_threshold) held_units += foreign[u];
      else if (u > 0 && u + 1 < units.size()) largest_layer = std::max(largest_layer, foreign[u]);
    }
    m.params += held_units;
    if (stage == 3 && units.front() >= plan.persist_threshold) {
      // The gathered units at the peaks named above, at their 16-bit size.
      const int64_t u0 = foreign.front(), lnf_p = foreign.back(), lnf = units.back();
      const int64_t held2 = std::min<int64_t>(2, n_layer) * largest_layer;
      m.comm = std::max({u0 + lnf_p + b.g * lnf, tg.head + lnf_p, held2 + tg.isolated_first,
                         held2 + tg.steady, held2 + tg.tail});
    }
  }
  if (plan.split_backward && stage >= 2) {
    // zb-h1: the whole stage's gradient staged at once (and its wire copy),
    // beside two gathered units under stage 3: a bound.
    int64_t largest_unit = 0;
    for (int64_t u : units) largest_unit = std::max(largest_unit, u);
    const int64_t gathered = stage == 3 ? (b.p_full > 0 ? b.p_full : b.p) * 2 * largest_unit : 0;
    m.comm = std::max(m.comm, (b.g + plan.grad_wire) * P + gathered);
  }
  m.params += plan.base.frozen_params;  // LoRA's frozen base, whole on every rank
  if (plan.optimizer.offload.enabled()) {
    // The state moves to the file; the staging buffers stay (masters and
    // local SGD's anchor, counted with the optimizer above, stay too).
    const ElemSpan r = stage > 0 ? own_span : ElemSpan{0, P};
    const OffloadPlan op = plan_offload(plan.optimizer, r.begin, r.end, layout);
    m.optimizer += op.staging_bytes - 4 * static_cast<int64_t>(op.states) * r.count();
    m.offloaded = op.file_bytes;
  }
  m.product_copy = plan.product_copy;
  m.zero_gather = zero_root_gather_bytes(plan, stage, N);
  // Setup: every rank builds its (tp shard of the) model in f32 once, whole
  // (a file that loads whole), with mixed precision's 16-bit copy and the
  // gradients beside it; ZeRO drops the foreign parts before the optimizer
  // state is allocated. Stage 3 and mixed-precision ZeRO starting from the
  // seed or a file read by range write only the own range (initial weights
  // are a function of the element; io/buffer_window.h), so nothing whole is
  // built. A file's reader stages one tensor at a time (setup_staging, a
  // bound). Not modelled: a LoRA base held in bf16 is read in f32 first, and
  // a tp rank reading a file that loads whole (llm.c) reads the whole model.
  // After that, stage 3's start() gathers the first forward's first unit
  // beside the model states.
  int64_t first_unit = 0;
  if (stage == 3 && units.front() >= plan.persist_threshold) {
    const ForeignCount u0 = foreign_unit_counts(layout, own_span).front();
    first_unit = b.p_full > 0 ? mixed_foreign_bytes(u0) : b.p * u0.all;
  }
  const int64_t written = plan.setup_own_range
                              ? m.model_states()  // the own range, beside the other states
                              : (4 + b.p_full) * P + m.grads + plan.base.frozen_params;
  m.setup = std::max(m.model_states() + first_unit, written + plan.setup_staging);
  return m;
}

bool setup_writes_ranges(const std::string& init_from, const ModelSpec& model) {
  if (model.frozen_base()) return false;
  if (init_from.empty()) return model.initial_weights(0, {}, nullptr);
  return ckpt::can_load_range(init_from, model);
}

int64_t file_staging_bytes(const std::string& init_from, const ModelSpec& logical) {
  if (init_from.empty()) return 0;
  const ModelSpec& read = logical.frozen_base() ? *logical.frozen_base() : logical;
  int64_t largest = 0;
  for (const ParamInfo& p : read.layout().params) largest = std::max(largest, shape_numel(p.logical_shape()));
  return 3 * 4 * largest;
}

bool setup_from_own_range(int zero_stage, Precision precision, const std::string& init_from,
                          const ModelSpec& model) {
  if (zero_stage <= 0) return false;
  parallel::ZeroOptions zo;
  zo.stage = zero_stage;
  zo.precision = precision;
  zo.own_range_init = setup_writes_ranges(init_from, model);
  return parallel::starts_from_own_range(zo);
}

std::string end_copies_what(const MemoryPlan& plan, const RankMemory& m) {
  std::string what = m.product_copy > 0 ? plan.product_copy_what : "";
  if (m.zero_gather > 0)
    what += (what.empty() ? "" : ", and ") +
            std::string("ZeRO's gather of the other ranks' f32 parameters onto rank 0");
  return what;
}

void check_memory_limit(const MemoryPlan& plan, double limit_bytes) {
  if (limit_bytes <= 0) return;
  const RankMemory m = predict_rank_memory(plan);
  if (m.total() <= limit_bytes && m.finish_total() <= limit_bytes && m.setup <= limit_bytes) return;
  if (m.total() <= limit_bytes && m.finish_total() <= limit_bytes && plan.setup_own_range)
    fail("training fits memory.limit_mb = {} ({} MB per rank), but setup needs {} MB: the model "
         "states ({} MB) beside what the init_from reader stages (at most three copies of the largest "
         "tensor, {} MB); raise memory.limit_mb to at least {}",
         limit_bytes / 1e6, mb(m.total()), mb(m.setup), mb(m.model_states()), mb(plan.setup_staging),
         mb(m.setup));
  if (m.total() <= limit_bytes && m.finish_total() <= limit_bytes)
    fail("training fits memory.limit_mb = {} ({} MB per rank), but setup needs {} MB: every rank "
         "builds its whole model in f32 once{} ({} MB) beside its gradients ({} MB) before ZeRO "
         "keeps only its own share, and more ranks do not lower that; raise memory.limit_mb to "
         "at least {}{}",
         limit_bytes / 1e6, mb(m.total()), mb(m.setup),
         plan.bytes.p_full > 0 ? " with its 16-bit copy" : "",
         mb((4 + plan.bytes.p_full) * plan.model->layout().numel), mb(m.grads), mb(m.setup),
         plan.world > 1 ? " (at ZeRO stage 3, or any stage in bf16/fp16, a start from the seed, a "
                          "checkpoint directory, a meshtrain model file or a Hugging Face GPT-2 "
                          "file or Llama folder writes only each rank's own range)"
                        : "");
  if (m.total() <= limit_bytes)
    fail("training fits memory.limit_mb = {} ({} MB per rank), but saving and sampling the "
         "trained model need {} MB more for {}: {} MB at the end of the run (model states {} + "
         "communication buffers {} + workspace {} MB and the copy; the activations are freed "
         "first); raise memory.limit_mb to at least {}",
         limit_bytes / 1e6, mb(m.total()), mb(m.product_copy + m.zero_gather), end_copies_what(plan, m),
         mb(m.finish_total()), mb(m.model_states()), mb(m.comm), mb(m.workspace),
         mb(m.finish_total()));
  std::string stages;
  std::string fits;
  for (int s = 0; s <= 3 && plan.world > 1; ++s) {
    MemoryPlan q = plan;
    q.zero_stage = s;
    const RankMemory qm = predict_rank_memory(q);
    const int64_t t = qm.total();
    stages += fmt::format("{}stage {} {} MB", s ? ", " : "", s, mb(t));
    if (fits.empty() && t <= limit_bytes && qm.finish_total() <= limit_bytes && qm.setup <= limit_bytes)
      fits = fmt::format("zero.stage = {}", s);
  }
  fail("this configuration needs {} MB per rank (predicted: parameters {} + gradients {} + "
       "optimizer {} + activations {} + communication buffers {} + workspace {} MB), more than "
       "memory.limit_mb = {}{}; {}",
       mb(m.total()), mb(m.params), mb(m.grads), mb(m.optimizer), mb(m.activations), mb(m.comm),
       mb(m.workspace), limit_bytes / 1e6,
       stages.empty() ? "" : fmt::format(" (per ZeRO stage on {} ranks: {})", plan.world, stages),
       fits.empty() ? "lower train.micro_batch, use recompute or more ranks"
                    : fmt::format("{} would fit", fits));
}

std::string memory_report_text(const std::vector<RankMemory>& predicted,
                               const std::vector<std::vector<double>>& peaks) {
  const size_t n = peaks.size();
  // One predicted column when every rank's prediction is the same (dp, tp,
  // ZeRO's equal shares), else one beside each rank (pipeline stages).
  // (Setup's peak, which ZeRO's uneven ranges shift by a few bytes, is
  // rank 0's in the single column.)
  auto same = [](const RankMemory& a, const RankMemory& b) {
    return a.params == b.params && a.grads == b.grads && a.optimizer == b.optimizer &&
           a.activations == b.activations && a.comm == b.comm && a.workspace == b.workspace;
  };
  bool alike = true;
  for (const RankMemory& p : predicted) alike = alike && same(p, predicted.front());
  auto pred_of = [&](size_t r) -> const RankMemory& {
    return predicted[std::min(r, predicted.size() - 1)];
  };
  std::string out = fmt::format("{:<22}", "memory peak (MB)");
  for (size_t r = 0; r < n; ++r) {
    out += fmt::format(" {:>10}", fmt::format("rank {}", r));
    if (!alike) out += fmt::format(" {:>10}", "predicted");
  }
  if (alike) out += fmt::format(" {:>10}", "predicted");
  out += "\n";
  // A row: each rank's measured value (and its prediction when they differ).
  auto row = [&](const char* name, auto measured, auto pred) {
    out += fmt::format("{:<22}", name);
    for (size_t r = 0; r < n; ++r) {
      out += fmt::format(" {:>10}", mb(measured(r)));
      if (!alike) out += fmt::format(" {:>10}", mb(static_cast<double>(pred(pred_of(r)))));
    }
    if (alike) out += fmt::format(" {:>10}", mb(static_cast<double>(pred(predicted.front()))));
    out += "\n";
  };
  auto cat = [](MemCategory c) { return static_cast<size_t>(c); };
  struct Row {
    const char* name;
    MemCategory cat;
    int64_t RankMemory::*pred;
  };
  const Row rows[] = {
      {"parameters", MemCategory::Parameters, &RankMemory::params},
      {"gradients", MemCategory::Gradients, &RankMemory::grads},
      {"optimizer state", MemCategory::OptimizerState, &RankMemory::optimizer},
      {"activations", MemCategory::Activations, &RankMemory::activations},
      {"comm buffers", MemCategory::CommBuffers, &RankMemory::comm},
      {"workspace", MemCategory::Workspace, &RankMemory::workspace},
  };
  for (const Row& rw : rows)
    row(rw.name, [&](size_t r) { return peaks[r][cat(rw.cat)]; },
        [&](const RankMemory& p) { return p.*rw.pred; });
  row("model states",
      [&](size_t r) {
        return peaks[r][cat(MemCategory::Parameters)] + peaks[r][cat(MemCategory::Gradients)] +
               peaks[r][cat(MemCategory::OptimizerState)];
      },
      [](const RankMemory& p) { return p.model_states(); });
  // Extra values after the categories: the training's total peak, the setup's.
  if (!peaks.empty() && peaks.front().size() >= kMemCategoryCount + 2) {
    row("total (training)", [&](size_t r) { return peaks[r][kMemCategoryCount]; },
        [](const RankMemory& p) { return p.total(); });
    row("total (setup)", [&](size_t r) { return peaks[r][kMemCategoryCount + 1]; },
        [](const RankMemory& p) { return p.setup; });
  }
  return out;
}

}  // namespace meshtrain
