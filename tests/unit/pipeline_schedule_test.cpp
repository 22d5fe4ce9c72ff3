// Pipeline schedules as data over a grid of (stages p, micro-batches m,
// chunks v), for every schedule: each micro-batch's forward precedes its
// backward on every stage, exactly once; the instruction lists the executor
// runs (explicit sends and receives on FIFO lanes) cannot deadlock or
// mismatch; 1F1B holds at most p - s micro-batches on stage s, ZB-H1 at
// most p (1F1B's first stage) on every stage;
// the replayed bubbles equal the textbook formulas, and the zero-bubble
// schedule idles less than 1F1B.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/pipeline_instructions.h"
#include "meshtrain/plan/pipeline_schedule.h"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

struct Case {
  PipeSchedule kind;
  int64_t p, m, v;
};

std::vector<Case> grid() {
  std::vector<Case> out;
  for (int64_t p : {1, 2, 3, 4, 8})
    for (int64_t m : {1, 2, 3, 5, 8, 16}) {
      out.push_back({PipeSchedule::GPipe, p, m, 1});
      out.push_back({PipeSchedule::GPipe, p, m, 2});
      out.push_back({PipeSchedule::OneFOneB, p, m, 1});
      out.push_back({PipeSchedule::ZeroBubbleH1, p, m, 1});
      if (m % p == 0)
        for (int64_t v : {2, 3}) out.push_back({PipeSchedule::Interleaved, p, m, v});
    }
  return out;
}

std::string name(const Case& c) {
  return std::string(pipe_schedule_name(c.kind)) + " p" + std::to_string(c.p) + " m" +
         std::to_string(c.m) + " v" + std::to_string(c.v);
}

}  // namespace

TEST(pipeline_schedule, every_micro_batch_runs_forward_then_its_backward_once_on_every_stage) {
  for (const Case& c : grid()) {
    const auto ops = pipeline_schedule(c.kind, c.p, c.m, c.v);
    ASSERT_EQ(static_cast<int64_t>(ops.size()), c.p) << name(c);
    for (int64_t s = 0; s < c.p; ++s) {
      // (micro-batch, chunk) -> forwards, whole backwards, input parts, weight parts
      std::map<std::pair<int64_t, int64_t>, std::tuple<int, int, int, int>> seen;
      for (const PipeOp& op : ops[static_cast<size_t>(s)]) {
        auto& [f, whole, in, w] = seen[{op.micro_batch, op.chunk}];
        if (op.forward) {
          EXPECT_EQ(whole + in + w, 0) << name(c) << " stage " << s << ": " << pipe_op_label(op) << " after its backward";
          ++f;
          continue;
        }
        EXPECT_EQ(f, 1) << name(c) << " stage " << s << ": " << pipe_op_label(op) << " before its forward";
        if (op.part == BackwardPart::Whole) ++whole;
        if (op.part == BackwardPart::Input) ++in;
        if (op.part == BackwardPart::Weight) {
          EXPECT_EQ(in, 1) << name(c) << " stage " << s << ": " << pipe_op_label(op) << " before its input part";
          ++w;
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), c.m * c.v) << name(c);
      const bool split = c.kind == PipeSchedule::ZeroBubbleH1;
      for (const auto& [key, counts] : seen)
        EXPECT_EQ(counts, split ? std::make_tuple(1, 0, 1, 1) : std::make_tuple(1, 1, 0, 0))
            << name(c) << " stage " << s << " micro-batch " << key.first << " chunk " << key.second;
    }
  }
}

TEST(pipeline_schedule, instruction_lists_neither_deadlock_nor_mismatch_and_replay) {
  for (const Case& c : grid()) {
    const auto ops = pipeline_schedule(c.kind, c.p, c.m, c.v);
    const auto instrs = pipeline_instructions(ops, c.v);
    EXPECT_NO_THROW(check_instructions(instrs)) << name(c);
    EXPECT_NO_THROW(replay_schedule(ops, c.v, 1, 2)) << name(c);
    for (int64_t s = 0; s < c.p; ++s) {
      const auto& list = instrs[static_cast<size_t>(s)];
      ASSERT_FALSE(list.empty());
      EXPECT_EQ(list.back().kind, PipeInstrKind::OptimizerStep) << name(c);
      // The first virtual stage receives no activation, the last no gradient.
      for (const PipeInstr& in : list) {
        const int64_t vs = virtual_stage(s, in.op.chunk, c.p);
        if (in.kind == PipeInstrKind::RecvActivation) {
          EXPECT_GT(vs, 0) << name(c);
        }
        if (in.kind == PipeInstrKind::RecvGradient) {
          EXPECT_LT(vs, c.p * c.v - 1) << name(c);
        }
      }
    }
  }
}

TEST(pipeline_schedule, a_mismatched_or_deadlocked_order_is_named) {
  // Stage 1 takes micro-batch 1 before 0, which its lane delivers first.
  const std::vector<std::vector<PipeOp>> swapped = {
      {{true, 0, 0}, {true, 1, 0}, {false, 0, 0}, {false, 1, 0}},
      {{true, 1, 0}, {true, 0, 0}, {false, 1, 0}, {false, 0, 0}}};
  try {
    check_instructions(pipeline_instructions(swapped, 1));
    FAIL() << "a swapped receive order passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("delivers the activation of micro-batch 0"), std::string::npos) << e.what();
  }
  // Stage 0 waits for micro-batch 0's gradient before sending micro-batch 1's
  // activation, which stage 1 needs first.
  const std::vector<std::vector<PipeOp>> stuck = {
      {{true, 0, 0}, {false, 0, 0}, {true, 1, 0}, {false, 1, 0}},
      {{true, 0, 0}, {true, 1, 0}, {false, 0, 0}, {false, 1, 0}}};
  try {
    check_instructions(pipeline_instructions(stuck, 1));
    FAIL() << "a deadlocking order passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
}

TEST(pipeline_schedule, one_f_one_b_holds_p_minus_s_micro_batches_and_zero_bubble_at_most_p) {
  for (const Case& c : grid()) {
    const auto ops = pipeline_schedule(c.kind, c.p, c.m, c.v);
    for (int64_t s = 0; s < c.p; ++s) {
      const double held = peak_in_flight(ops[static_cast<size_t>(s)], c.v);
      if (c.kind == PipeSchedule::OneFOneB) {
        EXPECT_LE(held, static_cast<double>(std::min(c.p - s, c.m))) << name(c) << " stage " << s;
      }
      // ZB-H1: 1F1B's first-stage depth on every stage (held until the weight part).
      if (c.kind == PipeSchedule::ZeroBubbleH1) {
        EXPECT_LE(held, static_cast<double>(std::min(c.p, c.m))) << name(c) << " stage " << s;
      }
      if (c.kind == PipeSchedule::GPipe) {
        EXPECT_EQ(held, static_cast<double>(c.m)) << name(c);
      }
    }
  }
}

TEST(pipeline_schedule, replayed_bubbles_equal_the_formulas_and_zero_bubble_idles_least) {
  const double f = 1, b = 2;  // a backward twice a forward; ZB-H1 splits it 1 + 1
  for (const Case& c : grid()) {
    const auto ops = pipeline_schedule(c.kind, c.p, c.m, c.v);
    const double scale = c.kind == PipeSchedule::Interleaved ? 1.0 / c.v : 1.0;  // chunks: smaller ops
    const ScheduleReplay r = replay_schedule(ops, c.v, f * scale, b * scale);
    const double formula = formula_bubble(c.kind, c.p, c.m, c.v);
    if (c.kind == PipeSchedule::ZeroBubbleH1) {
      const ScheduleReplay one = replay_schedule(pipeline_schedule(PipeSchedule::OneFOneB, c.p, c.m, 1), 1, f, b);
      if (c.p > 1 && c.m > 1) {
        EXPECT_LT(r.bubble_ratio, one.bubble_ratio) << name(c);
      }
      EXPECT_LE(r.bubble_ratio, one.bubble_ratio + 1e-12) << name(c);
    } else if (c.kind != PipeSchedule::GPipe || c.v == 1) {
      EXPECT_NEAR(r.bubble_ratio, formula, 1e-9) << name(c);
    }
    // The timeline holds every op once, in each stage's order, without overlap.
    for (int64_t s = 0; s < c.p; ++s) {
      const auto& t = r.timeline[static_cast<size_t>(s)];
      ASSERT_EQ(t.size(), ops[static_cast<size_t>(s)].size()) << name(c);
      for (size_t i = 0; i < t.size(); ++i) {
        EXPECT_EQ(t[i].op, ops[static_cast<size_t>(s)][i]);
        if (i > 0) {
          EXPECT_GE(t[i].start, t[i - 1].end);
        }
      }
    }
  }
}

TEST(pipeline_schedule, names_parse_and_bad_shapes_are_refused) {
  for (PipeSchedule k : {PipeSchedule::GPipe, PipeSchedule::OneFOneB, PipeSchedule::Interleaved,
                         PipeSchedule::ZeroBubbleH1})
    EXPECT_EQ(parse_pipe_schedule(k == PipeSchedule::Interleaved ? "interleaved" : pipe_schedule_name(k)), k);
  EXPECT_THROW(parse_pipe_schedule("pipedream"), Error);
  EXPECT_THROW(pipeline_schedule(PipeSchedule::ZeroBubbleH1, 4, 8, 2), Error);
  EXPECT_THROW(pipeline_schedule(PipeSchedule::OneFOneB, 0, 8, 1), Error);
}
