#include "meshtrain/parallel/pipeline_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/zero_layout.h"
#include "meshtrain/plan/stage_cut.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain::parallel {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Activation slots each chunk needs: the most micro-batches its ops hold
// between a forward and the backward that frees it.
std::vector<int> slots_needed(const std::vector<plan::PipeOp>& ops, int64_t chunks) {
  std::vector<int> live(static_cast<size_t>(chunks), 0), peak(live.size(), 1);
  for (const plan::PipeOp& op : ops) {
    int& l = live[static_cast<size_t>(op.chunk)];
    if (op.forward) ++l;
    else if (op.part != plan::BackwardPart::Input) --l;
    peak[static_cast<size_t>(op.chunk)] = std::max(peak[static_cast<size_t>(op.chunk)], l);
  }
  return peak;
}

// "<what> micro-batch" (the trace adds the micro-batch's index).
std::string_view instr_trace_name(const plan::PipeInstr& in) {
  switch (in.kind) {
    case plan::PipeInstrKind::RecvActivation: return "recv activation micro-batch";
    case plan::PipeInstrKind::RecvGradient: return "recv gradient micro-batch";
    case plan::PipeInstrKind::Forward: return "forward micro-batch";
    case plan::PipeInstrKind::Backward:
      return in.op.part == plan::BackwardPart::Input    ? "backward (input) micro-batch"
             : in.op.part == plan::BackwardPart::Weight ? "backward (weight) micro-batch"
                                                        : "backward micro-batch";
    case plan::PipeInstrKind::SendActivation: return "send activation micro-batch";
    case plan::PipeInstrKind::SendGradient: return "send gradient micro-batch";
    case plan::PipeInstrKind::OptimizerStep: return "optimizer step after micro-batch";
  }
  return "pipeline op micro-batch";
}

}  // namespace

std::vector<int> pipeline_activation_slots(plan::PipeSchedule kind, int64_t stages,
                                           int64_t micro_batches, int64_t chunks, int64_t stage) {
  const auto ops = plan::pipeline_schedule(kind, stages, micro_batches, chunks);
  return slots_needed(ops[static_cast<size_t>(stage)], chunks);
}

std::vector<ModelShard> pipeline_shards(int n_layer, int64_t stages, int64_t chunks) {
  const int64_t V = stages * chunks;
  MT_CHECK(V >= 1 && n_layer >= V, "pipeline of {} stage(s) x {} chunk(s) needs at least {} layers; "
           "the model has {}", stages, chunks, V, n_layer);
  std::vector<ModelShard> out;
  int begin = 0;
  const std::vector<int> even = plan::cut_layers_by_cost(n_layer, static_cast<int>(V), {});  // no costs: even
  for (int64_t vs = 0; vs < V; ++vs) {
    const int n = even[static_cast<size_t>(vs)];
    ModelShard s;
    s.layer_begin = begin;
    s.layer_end = begin + n;
    s.first_stage = vs == 0;
    s.last_stage = vs + 1 == V;
    out.push_back(s);
    begin += n;
  }
  return out;
}

PipelineExecutor::PipelineExecutor(comm::Communicator pp,
                                   std::vector<std::shared_ptr<const ModelSpec>> virtual_stages,
                                   std::vector<Model*> chunks, plan::PipeSchedule kind,
                                   int64_t micro_batches)
    : pp_(std::move(pp)), specs_(std::move(virtual_stages)), chunks_(std::move(chunks)),
      m_(micro_batches) {
  MT_CHECK(!chunks_.empty(), "a pipeline stage needs at least one model chunk");
  p_ = pp_.valid() ? pp_.size() : 1;
  rank_ = pp_.valid() ? pp_.rank() : 0;
  v_ = static_cast<int64_t>(chunks_.size());
  MT_CHECK(static_cast<int64_t>(specs_.size()) == p_ * v_, "{} virtual stage specs for {} stages x "
           "{} chunks", specs_.size(), p_, v_);
  const auto ops = plan::pipeline_schedule(kind, p_, m_, v_);
  instrs_ = plan::pipeline_instructions(ops, v_);
  plan::check_instructions(instrs_);
  // The step's last backward (whole, or a weight part): the gradient sync
  // reduces during it (BackwardHooks). With several chunks it must be chunk
  // 0's, the one at the top of a chunked model's buffer (nn/chunked_model.h).
  const auto& mine = instrs_[static_cast<size_t>(rank_)];
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].kind == plan::PipeInstrKind::Backward && mine[i].op.part != plan::BackwardPart::Input)
      final_backward_ = static_cast<int64_t>(i);
  MT_CHECK(final_backward_ >= 0 && mine[static_cast<size_t>(final_backward_)].op.chunk == 0,
           "pipeline schedule {}: stage {} does not end its step with chunk 0's backward",
           plan::pipe_schedule_name(kind), rank_);
  const std::vector<int> slots = slots_needed(ops[static_cast<size_t>(rank_)], v_);
  for (size_t c = 0; c < chunks_.size(); ++c) chunks_[c]->set_activation_slots(slots[c]);
  find_tied_params();
}

void PipelineExecutor::find_tied_params() {
  const int64_t V = p_ * v_;
  for (int c = 0; c < static_cast<int>(v_); ++c) {
    const int64_t vs = virtual_stage(c);
    for (const ParamInfo& mine : chunks_[static_cast<size_t>(c)]->layout().params)
      for (int64_t other = 0; other < V; ++other) {
        if (other == vs) continue;
        for (const ParamInfo& theirs : specs_[static_cast<size_t>(other)]->layout().params)
          if (theirs.name == mine.name)
            tied_.push_back({mine.name, c, mine.begin, mine.numel(), other, vs < other});
      }
  }
}

bool PipelineExecutor::tied(const std::string& name) const {
  return std::any_of(tied_.begin(), tied_.end(), [&](const TiedParam& t) { return t.name == name; });
}

bool PipelineExecutor::tied_elsewhere_first(const std::string& name) const {
  return std::any_of(tied_.begin(), tied_.end(),
                     [&](const TiedParam& t) { return t.name == name && !t.first; });
}

void PipelineExecutor::set_sharded_gradients(ShardedGradients g) {
  MT_CHECK(static_cast<int64_t>(g.rank_specs.size()) == p_, "{} rank specs for {} pipeline stages",
           g.rank_specs.size(), p_);
  sharded_ = std::move(g);
}

namespace {
// x ∩ y, moved by -shift.
ElemSpan overlap(ElemSpan x, ElemSpan y, int64_t shift = 0) {
  const int64_t b = std::max(x.begin, y.begin), e = std::min(x.end, y.end);
  return e > b ? ElemSpan{b - shift, e - shift} : ElemSpan{};
}

const ParamInfo& param_named(const ParamLayout& lay, const std::string& name) {
  for (const ParamInfo& p : lay.params)
    if (p.name == name) return p;
  fail("tied parameter {} is missing from a pipeline rank's layout", name);
}

// The elements of parameter `name` that data-parallel rank `dp` of
// `dp_size` owns in a buffer of layout `lay`, in the parameter's coordinates.
ElemSpan owned_part(const ParamLayout& lay, const std::string& name, int dp, int dp_size) {
  const ParamInfo& p = param_named(lay, name);
  return overlap(ZeroLayout(lay.numel, dp_size, dp).own(), {p.begin, p.end()}, p.begin);
}
}  // namespace

// Sharded: this rank's own range of each tied parameter (in the parameter's
// coordinates) goes to, and comes from, every rank of the other holder's
// stage whose own range holds some of the same elements; both sides compute
// the same pieces from the ZeRO layouts of the two buffers. The sums are
// added in the unsharded order, so each element equals the whole exchange's.
void PipelineExecutor::sum_tied_sharded() {
  const ShardedGradients& s = *sharded_;
  float* g = s.grads();
  comm::Communicator world = s.world;  // a handle on the same group
  struct Piece {
    const TiedParam* t;
    int64_t at;  // its first element in this rank's buffer
    std::vector<float> theirs;
    comm::Work sent, received;
  };
  std::vector<Piece> pieces;
  const ParamLayout& lay = s.rank_specs[static_cast<size_t>(rank_)]->layout();
  // By name, so two ranks that share several tied parameters post their
  // pieces to each other in the same order.
  std::vector<const TiedParam*> by_name;
  for (const TiedParam& t : tied_) by_name.push_back(&t);
  std::sort(by_name.begin(), by_name.end(), [](const TiedParam* a, const TiedParam* b) { return a->name < b->name; });
  for (const TiedParam* tp : by_name) {
    const TiedParam& t = *tp;
    const int64_t other_rank = t.other_vs % p_;
    MT_CHECK(other_rank != rank_, "tied parameter {}: both holders on pipeline rank {}", t.name, rank_);
    const ElemSpan mine = owned_part(lay, t.name, s.dp_rank, s.dp_size);
    const ParamLayout& other = s.rank_specs[static_cast<size_t>(other_rank)]->layout();
    for (int d = 0; d < s.dp_size && mine.count() > 0; ++d) {
      const ElemSpan both = overlap(mine, owned_part(other, t.name, d, s.dp_size));
      if (both.count() == 0) continue;
      Piece& p = pieces.emplace_back(Piece{&t, param_named(lay, t.name).begin + both.begin,
                                           std::vector<float>(static_cast<size_t>(both.count())), {}, {}});
      const int peer = s.world_rank(d, other_rank);
      p.sent = world.send(g + p.at, p.theirs.size(), DType::F32, peer);
      p.received = world.recv(p.theirs.data(), p.theirs.size(), DType::F32, peer);
    }
  }
  for (Piece& p : pieces) {
    p.received.wait();
    p.sent.wait();
    float* x = g + p.at;
    for (size_t i = 0; i < p.theirs.size(); ++i) x[i] = p.t->first ? x[i] + p.theirs[i] : p.theirs[i] + x[i];
  }
}

// Each holder's gradient goes to the other holder; both add them in one
// order (the lower virtual stage's first) so both sums are the same bits.
void PipelineExecutor::sum_tied_gradients() {
  const double t0 = now_s();
  if (sharded_) {
    sum_tied_sharded();
    timing_.tied_s += now_s() - t0;
    return;
  }
  for (const TiedParam& t : tied_) {
    float* g = chunks_[static_cast<size_t>(t.chunk)]->grad_buffer().data<float>() + t.begin;
    const int64_t peer = t.other_vs % p_;
    if (peer == rank_) {  // both holders here (one stage with several chunks)
      if (!t.first) continue;  // the lower holder writes both
      Model& other = *chunks_[static_cast<size_t>(t.other_vs / p_)];
      float* h = nullptr;
      for (const ParamInfo& info : other.layout().params)
        if (info.name == t.name) h = other.grad_buffer().data<float>() + info.begin;
      for (int64_t i = 0; i < t.n; ++i) h[i] = g[i] = g[i] + h[i];
      continue;
    }
    std::vector<float> theirs(static_cast<size_t>(t.n));
    comm::Work sent = pp_.send(g, static_cast<size_t>(t.n), DType::F32, static_cast<int>(peer));
    pp_.recv(theirs.data(), static_cast<size_t>(t.n), DType::F32, static_cast<int>(peer)).wait();
    sent.wait();
    for (int64_t i = 0; i < t.n; ++i) g[i] = t.first ? g[i] + theirs[i] : theirs[i] + g[i];
  }
  timing_.tied_s += now_s() - t0;
}

float PipelineExecutor::forward_only(const MicroBatch& mb) {
  const int64_t V = p_ * v_;
  float loss = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> in;
  for (int c = 0; c < static_cast<int>(v_); ++c) {  // virtual stages in order along the pipeline
    const int64_t vs = virtual_stage(c);
    Model& model = *chunks_[static_cast<size_t>(c)];
    const size_t width = static_cast<size_t>(model.stage_floats(mb.B, mb.T));
    if (vs > 0) {
      in.resize(width);
      pp_.recv(in.data(), width, DType::F32, static_cast<int>((vs - 1) % p_)).wait();
    }
    model.select_slot(0);
    if (hooks_.pass) hooks_.pass(c, false);
    const float l = model.forward_stage({vs == 0 ? mb.inputs : nullptr,
                                         vs + 1 == V ? mb.targets : nullptr, mb.B, mb.T},
                                        vs > 0 ? in.data() : nullptr);
    if (vs + 1 == V) {
      loss = l;
      continue;
    }
    pp_.send(model.stage_output(), width, DType::F32, static_cast<int>((vs + 1) % p_)).wait();
  }
  return loss;
}

std::vector<float> PipelineExecutor::run(const std::vector<MicroBatch>& micro, float loss_scale) {
  return run(micro, std::vector<float>(micro.size(), loss_scale));
}

std::vector<float> PipelineExecutor::run(const std::vector<MicroBatch>& micro,
                                         const std::vector<float>& loss_scales) {
  MT_CHECK(static_cast<int64_t>(micro.size()) == m_ && loss_scales.size() == micro.size(),
           "pipeline step: {} micro-batches ({} loss scales) for a schedule of {}", micro.size(),
           loss_scales.size(), m_);
  const int64_t V = p_ * v_;
  timing_ = {};
  std::vector<float> losses(static_cast<size_t>(m_), std::numeric_limits<float>::quiet_NaN());
  // Free activation slots per chunk, and the slot each (chunk, micro-batch) holds.
  std::vector<std::vector<int>> free(static_cast<size_t>(v_));
  for (int64_t c = 0; c < v_; ++c)
    for (int k = chunks_[static_cast<size_t>(c)]->activation_slots() - 1; k >= 0; --k)
      free[static_cast<size_t>(c)].push_back(k);
  std::map<std::pair<int64_t, int64_t>, int> slot_of;
  // Received data per (chunk, micro-batch). Sends read the slot's own
  // memory (its stage output or input gradient) without a copy; they are
  // in flight per (chunk, slot) until the slot's next pass, which waits for
  // them first. (Each one's receiver takes it before it sends back what
  // that pass needs, so the wait is ordinarily over already.)
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> received;
  std::map<std::pair<int64_t, int>, std::vector<comm::Work>> sending;
  auto settle = [&](std::vector<comm::Work>& works) {
    for (comm::Work& w : works) w.wait();
    works.clear();
  };
  auto select = [&](const plan::PipeOp& op) -> Model& {
    Model& model = *chunks_[static_cast<size_t>(op.chunk)];
    auto key = std::make_pair(op.chunk, op.micro_batch);
    if (op.forward) {
      auto& f = free[static_cast<size_t>(op.chunk)];
      MT_CHECK(!f.empty(), "pipeline stage {} chunk {}: no activation slot free for micro-batch {}",
               rank_, op.chunk, op.micro_batch);
      slot_of[key] = f.back();
      f.pop_back();
    }
    const int slot = slot_of.at(key);
    settle(sending[{op.chunk, slot}]);
    model.select_slot(slot);
    return model;
  };
  const auto& mine = instrs_[static_cast<size_t>(rank_)];
  for (size_t index = 0; index < mine.size(); ++index) {
    const plan::PipeInstr& in = mine[index];
    const plan::PipeOp& op = in.op;
    // Each instruction is a span of the trace ("pipeline" category), so the
    // timeline shows every stage's passes, transfers and the bubble between.
    telemetry::TraceScope span(telemetry::global_tracer(), instr_trace_name(in), op.micro_batch,
                               "pipeline", {{"chunk", op.chunk}, {"peer", in.peer}});
    const int64_t vs = virtual_stage(static_cast<int>(op.chunk));
    const MicroBatch& mb = micro[static_cast<size_t>(op.micro_batch)];
    Model& model = *chunks_[static_cast<size_t>(op.chunk)];
    const size_t width = static_cast<size_t>(model.stage_floats(mb.B, mb.T));
    switch (in.kind) {
      case plan::PipeInstrKind::RecvActivation:
      case plan::PipeInstrKind::RecvGradient: {
        const double t0 = now_s();
        std::vector<float>& buf = received[{op.chunk, op.micro_batch}];
        buf.resize(width);
        pp_.recv(buf.data(), width, DType::F32, static_cast<int>(in.peer)).wait();
        timing_.recv_wait_s += now_s() - t0;
        break;
      }
      case plan::PipeInstrKind::Forward: {
        const double t0 = now_s();
        Model& m = select(op);
        auto it = received.find({op.chunk, op.micro_batch});
        if (hooks_.pass) hooks_.pass(static_cast<int>(op.chunk), false);
        const float loss = m.forward_stage({vs == 0 ? mb.inputs : nullptr,
                                            vs + 1 == V ? mb.targets : nullptr, mb.B, mb.T},
                                           it == received.end() ? nullptr : it->second.data());
        if (it != received.end()) received.erase(it);
        if (vs + 1 == V) losses[static_cast<size_t>(op.micro_batch)] = loss;
        timing_.compute_s += now_s() - t0;
        break;
      }
      case plan::PipeInstrKind::Backward: {
        const double t0 = now_s();
        Model& m = select(op);
        auto it = received.find({op.chunk, op.micro_batch});
        const bool last = static_cast<int64_t>(index) == final_backward_;
        // The gradient sync brackets the parts that finish gradients (an input
        // part leaves the weight gradients to its weight part).
        const bool finishes = op.part != plan::BackwardPart::Input;
        if (finishes && hooks_.begin) hooks_.begin(last, m);
        if (op.part != plan::BackwardPart::Weight && hooks_.pass) hooks_.pass(static_cast<int>(op.chunk), true);
        const float* grad = it == received.end() ? nullptr : it->second.data();
        const float loss_scale = loss_scales[static_cast<size_t>(op.micro_batch)];
        if (op.part == plan::BackwardPart::Whole) m.backward_stage(grad, loss_scale);
        else if (op.part == plan::BackwardPart::Input) m.backward_stage_input(grad, loss_scale);
        else m.backward_stage_weights();
        if (it != received.end()) received.erase(it);
        const double t1 = now_s();
        if (finishes && hooks_.end) timing_.sync_wait_s += hooks_.end(last);
        timing_.compute_s += t1 - t0;
        break;
      }
      case plan::PipeInstrKind::SendActivation:
      case plan::PipeInstrKind::SendGradient: {
        const int slot = slot_of.at({op.chunk, op.micro_batch});
        model.select_slot(slot);
        const float* src = in.kind == plan::PipeInstrKind::SendActivation ? model.stage_output()
                                                                          : model.stage_input_grad();
        sending[{op.chunk, slot}].push_back(pp_.send(src, width, DType::F32, static_cast<int>(in.peer)));
        break;
      }
      case plan::PipeInstrKind::OptimizerStep:
        break;  // the caller's, after the step
    }
    // A micro-batch's slot is free once its backward has run (and its input
    // gradient, if any, has been handed to its send, which the slot's next
    // pass waits for); a split backward's, once its weight part has run.
    const bool whole = op.part == plan::BackwardPart::Whole;
    const bool done = in.kind == plan::PipeInstrKind::Backward
                          ? op.part == plan::BackwardPart::Weight || (whole && vs == 0)
                          : in.kind == plan::PipeInstrKind::SendGradient && whole;
    if (done) {
      const auto key = std::make_pair(op.chunk, op.micro_batch);
      free[static_cast<size_t>(op.chunk)].push_back(slot_of.at(key));
      slot_of.erase(key);
    }
  }
  for (auto& [where, works] : sending) settle(works);
  sum_tied_gradients();
  return losses;
}

}  // namespace meshtrain::parallel
