// test-links: meshtrain mt_comm_testing
// The gradient codecs (parallel/gradient_codec.h) between real processes:
// each rank encodes its own random gradients and every rank must end with
// the same decoded average.
// - Exact codecs and exact settings equal the exact average: f32, PowerSGD at
//   full rank (P^ spans the averaged matrix's columns), top-k sending every
//   element, any lossy codec during its warmup.
// - Error feedback keeps exactly what was not sent: averaged over ranks,
//   (gradient + last residual) - (new residual) is the decoded result, for
//   every codec, on the first step and on the next (whose gradient carries
//   the first step's residual).
// - Top-k keeps the k largest magnitudes; sign sends s sign(M) with s the
//   mean magnitude.
// - Buckets that cut a matrix are refused by PowerSGD, and the bucket plan
//   for it ends buckets on tensor boundaries.
// - The transport throttle holds an operation to its rate.
// - The residual follows fp16's loss scale and is dropped after a skipped step.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness.h"
#include "meshtrain/comm/wire_bytes.h"
#include "meshtrain/parallel/bucket_plan.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/parallel/gradient_codec.h"
#include "meshtrain/parallel/lossy_codec.h"
#include "meshtrain/parallel/powersgd_codec.h"

using namespace meshtrain;
using namespace meshtrain::parallel;
using meshtrain::comm::Communicator;
using meshtrain::comm::testing::run_world;

namespace {

// Tensors as a model lays them out: matrices, a vector, a 3-d kernel (6 x 3 x 3
// is factored as 6 x 9), a 1 x n row (sent exact).
ParamLayout test_layout() {
  ParamLayout lay;
  const std::vector<Shape> shapes = {{12, 5}, {7}, {6, 3, 3}, {1, 8}, {9, 20}};
  int64_t at = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ParamInfo p;
    p.name = fmt::format("t{}", i);
    p.shape = shapes[i];
    p.begin = at;
    at += p.numel();
    lay.params.push_back(p);
  }
  lay.numel = at;
  lay.units.push_back({"all", 0, at});
  return lay;
}

// Magnitudes spread over 8 decades, as a model's gradients are (an
// embedding's rows of rare and common tokens): the factored matrices are
// ill-conditioned.
std::vector<float> gradients(int rank, int step, int64_t n) {
  Rng rng(1000 + 17 * rank + step);
  std::vector<float> g(static_cast<size_t>(n));
  for (size_t i = 0; i < g.size(); ++i) g[i] = rng.normal() * std::pow(10.f, -static_cast<float>((i / 5) % 9));
  return g;
}

// Reduces `g` in the given buckets (top of the buffer first, as backward does).
void reduce(GradientCodec& codec, std::vector<float>& g, const std::vector<ElemSpan>& buckets) {
  codec.begin_step();
  std::vector<std::unique_ptr<BucketReduction>> rs;
  for (const ElemSpan& b : buckets) {
    for (auto& r : rs) r->launch_next_round();
    rs.push_back(codec.start(g.data(), b));
  }
  for (auto& r : rs) r->launch_next_round();
  for (auto& r : rs) r->finish();
}

// The exact average of every rank's vector.
std::vector<float> average(Communicator& c, std::vector<float> v) {
  c.allreduce(v.data(), v.size(), DType::F32, comm::ReduceOp::Avg).wait();
  return v;
}

// "" or where `got` is farther than tol (relative to the largest |want|) from `want`.
std::string compare(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  double scale = 1e-30, worst = 0;
  size_t at = 0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i)
    if (const double d = std::fabs(double(got[i]) - want[i]); d > worst) worst = d, at = i;
  if (worst <= tol * scale) return "";
  return fmt::format("{}: element {} is {} instead of {} (|diff| {:.3g} > {:.3g})", what, at, got[at], want[at],
                     worst, tol * scale);
}

std::unique_ptr<GradientCodec> make(Communicator& c, const ParamLayout& lay, CompressionOptions o) {
  return make_gradient_codec(o, DType::F32, {&c, &lay, lay.numel, {}});
}

std::vector<ElemSpan> whole(const ParamLayout& lay) { return {{0, lay.numel}}; }
// Two buckets on a tensor boundary (t3, t4 | t0..t2).
std::vector<ElemSpan> two_buckets(const ParamLayout& lay) {
  return {{lay.params[3].begin, lay.numel}, {0, lay.params[3].begin}};
}

// The result equals the exact average within tol, step after step (PowerSGD
// starts each from the last one's Q).
std::string exact_case(Communicator& c, CompressionOptions o, bool two, double tol, int steps = 1) {
  const ParamLayout lay = test_layout();
  auto codec = make(c, lay, o);
  for (int step = 0; step < steps; ++step) {
    std::vector<float> g = gradients(c.rank(), step, lay.numel);
    const std::vector<float> want = average(c, g);
    reduce(*codec, g, two ? two_buckets(lay) : whole(lay));
    if (std::string e = compare(g, want, tol, fmt::format("{} step {}", codec->name(), step).c_str()); !e.empty())
      return e;
  }
  return "";
}

// Two steps: mean over ranks of (gradient + residual before) - residual after == result.
std::string feedback_case(Communicator& c, CompressionOptions o) {
  const ParamLayout lay = test_layout();
  auto codec = make(c, lay, o);
  auto* lossy = dynamic_cast<LossyCodec*>(codec.get());
  if (!lossy || !lossy->residual()) return "no residual kept";
  const size_t n = static_cast<size_t>(lay.numel);
  std::vector<float> before(n, 0.f);
  for (int step = 0; step < 2; ++step) {
    std::vector<float> g = gradients(c.rank(), step, lay.numel);
    std::vector<float> sent(n);
    for (size_t i = 0; i < n; ++i) sent[i] = g[i] + before[i];
    reduce(*codec, g, two_buckets(lay));
    for (size_t i = 0; i < n; ++i) sent[i] -= lossy->residual()[i];
    const std::vector<float> want = average(c, sent);
    // 2e-6 of the largest element: (M + e_old) - e_new is rounded once per
    // element, and PowerSGD's local product P^ Q_w^T is rounded by two GEMMs.
    if (std::string e = compare(g, want, 2e-6, fmt::format("{} step {}", o.type, step).c_str()); !e.empty())
      return e;
    // The same decoded result on every rank, bit for bit.
    std::vector<float> hi = g, lo = g;
    c.allreduce(hi.data(), n, DType::F32, comm::ReduceOp::Max).wait();
    c.allreduce(lo.data(), n, DType::F32, comm::ReduceOp::Min).wait();
    if (hi != lo) return "the ranks decoded different gradients";
    before.assign(lossy->residual(), lossy->residual() + n);
  }
  return "";
}

CompressionOptions of(const std::string& type) {
  CompressionOptions o;
  o.type = type;
  return o;
}

void on_ranks(int n, const std::function<std::string(Communicator&)>& fn) {
  auto w = run_world(n, fn);
  EXPECT_TRUE(w.ok()) << w.report();
}

}  // namespace

TEST(codec, f32_is_the_exact_average) {
  on_ranks(3, [](Communicator& c) { return exact_case(c, of("none"), true, 1e-6); });
}

TEST(codec, powersgd_at_full_rank_equals_the_exact_average) {
  for (int n : {2, 3}) {
    on_ranks(n, [](Communicator& c) {
      CompressionOptions o = of("powersgd");
      o.rank = 32;  // >= every matrix's smaller side
      if (std::string e = exact_case(c, o, false, 2e-5, 4); !e.empty()) return e;
      return exact_case(c, o, true, 2e-5, 4);
    });
  }
}

TEST(codec, powersgd_factors_every_matrix_and_sends_the_rest_exact) {
  on_ranks(1, [](Communicator& c) {
    const ParamLayout lay = test_layout();
    CompressionOptions o = of("powersgd");
    o.rank = 2;
    PowerSgdCodec codec(o, {&c, &lay, lay.numel, {}});
    // 12x5, 6x(3x3), 9x20 are factored; the vector and the 1 x 8 row are not.
    if (codec.matrices().size() != 3) return fmt::format("{} matrices factored, want 3", codec.matrices().size());
    const int64_t want = 7 + 8 + 2 * (12 + 5) + 2 * (6 + 9) + 2 * (9 + 20);
    if (codec.sent_elements({0, lay.numel}) != want)
      return fmt::format("{} elements sent, want {}", codec.sent_elements({0, lay.numel}), want);
    return std::string();
  });
}

TEST(codec, error_feedback_keeps_exactly_what_was_not_sent) {
  for (const char* type : {"powersgd", "topk", "sign"}) {
    SCOPED_TRACE(type);
    on_ranks(3, [type](Communicator& c) {
      CompressionOptions o = of(type);
      o.rank = 1;
      o.ratio = 0.1;
      return feedback_case(c, o);
    });
  }
}

TEST(codec, topk_sending_everything_and_any_codec_in_warmup_are_exact) {
  on_ranks(2, [](Communicator& c) {
    CompressionOptions o = of("topk");
    o.ratio = 1.0;
    if (std::string e = exact_case(c, o, true, 1e-6); !e.empty()) return e;
    for (const char* type : {"powersgd", "topk", "sign"}) {
      CompressionOptions w = of(type);
      w.warmup_steps = 1;
      w.rank = 1;
      if (std::string e = exact_case(c, w, true, 1e-6); !e.empty()) return std::string(type) + ": " + e;
    }
    return std::string();
  });
}

TEST(codec, topk_sends_the_largest_magnitudes_and_sign_the_mean_magnitude) {
  on_ranks(1, [](Communicator& c) {
    const ParamLayout lay = test_layout();
    const size_t n = static_cast<size_t>(lay.numel);
    CompressionOptions o = of("topk");
    o.ratio = 0.25;
    auto codec = make(c, lay, o);
    std::vector<float> g = gradients(0, 0, lay.numel);
    const std::vector<float> m = g;
    reduce(*codec, g, whole(lay));
    const float* e = dynamic_cast<LossyCodec&>(*codec).residual();
    size_t sent = 0;
    float smallest_sent = 1e30f, largest_kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (g[i] != 0.f) {
        ++sent;
        smallest_sent = std::min(smallest_sent, std::fabs(m[i]));
        if (e[i] != 0.f || g[i] != m[i]) return fmt::format("element {} sent but not exact", i);
      } else {
        largest_kept = std::max(largest_kept, std::fabs(e[i]));
      }
    }
    if (sent != static_cast<size_t>(std::llround(0.25 * n))) return fmt::format("{} of {} sent", sent, n);
    if (largest_kept > smallest_sent) return fmt::format("kept {} > sent {}", largest_kept, smallest_sent);
    // sign: every element decodes to +-mean|M| of its tensor on one rank.
    auto sign = make(c, lay, of("sign"));
    g = m;
    reduce(*sign, g, whole(lay));
    for (const ParamInfo& p : lay.params) {
      double l1 = 0;
      for (int64_t i = p.begin; i < p.end(); ++i) l1 += std::fabs(m[i]);
      const float s = static_cast<float>(l1 / p.numel());
      for (int64_t i = p.begin; i < p.end(); ++i)
        if (g[i] != (m[i] >= 0 ? s : -s))
          return fmt::format("sign element {} of {}: {} for {} (scale {})", i, p.name, g[i], m[i], s);
    }
    return std::string();
  });
}

TEST(codec, powersgd_refuses_a_bucket_that_cuts_a_matrix) {
  on_ranks(1, [](Communicator& c) {
    const ParamLayout lay = test_layout();
    CompressionOptions o = of("powersgd");
    auto codec = make(c, lay, o);
    std::vector<float> g(static_cast<size_t>(lay.numel), 1.f);
    codec->begin_step();
    try {
      codec->start(g.data(), {30, lay.numel})->finish();
    } catch (const Error& e) {
      return std::string(e.what()).find("cuts the matrix") != std::string::npos ? std::string() : e.what();
    }
    return std::string("a bucket cutting a matrix was accepted");
  });
}

TEST(codec, buckets_for_matrices_end_on_tensor_boundaries) {
  // Tensors begin at 0, 100, 250, 1000 of 1200; caps of 300 elements.
  const std::vector<Bucket> b = plan_buckets_on({0, 100, 250, 1000}, 1200, 300, 300);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].begin, 1000);  // the last tensor
  EXPECT_EQ(b[0].end, 1200);
  EXPECT_EQ(b[1].begin, 250);   // one tensor larger than the cap, whole
  EXPECT_EQ(b[2].begin, 0);     // the first two together
  EXPECT_EQ(b[2].end, 250);
}

// The test throttle (CommOptions::throttle_gbps) makes an operation last at
// least its bytes over the rate: 1 MB allreduced by 2 ranks sends 1 MB per
// rank (comm/wire_bytes.h), 0.1 s at 0.01 GB/s. (A lower bound: sleeping
// can only make it longer.)
TEST(codec, throttle_holds_an_operation_to_its_rate) {
  comm::CommOptions o = comm::CommOptions::from_env();
  o.throttle_gbps = 0.01;
  auto w = run_world(2, [](Communicator& c) {
    std::vector<float> v(250000, 1.f);
    const auto t0 = std::chrono::steady_clock::now();
    c.allreduce(v.data(), v.size(), DType::F32, comm::ReduceOp::Sum).wait();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (comm::bytes_sent_per_rank(comm::CollOp::Allreduce, 1000000, 2) != 1e6) return std::string("formula");
    return s >= 0.1 ? std::string() : fmt::format("1 MB allreduce took {:.3f} s at 0.01 GB/s", s);
  }, o);
  EXPECT_TRUE(w.ok()) << w.report();
}

// fp16 loss scaling: the residual is kept at the gradients' scale, so when
// the scale changes it is rescaled with it (x4 here, exact); after a step
// skipped for inf/NaN gradients it is dropped, and the next step decodes
// finite gradients again.
TEST(codec, residual_follows_the_loss_scale_and_is_dropped_after_a_skipped_step) {
  on_ranks(2, [](Communicator& c) {
    const ParamLayout lay = test_layout();
    const size_t n = static_cast<size_t>(lay.numel);
    for (const char* type : {"powersgd", "topk", "sign"}) {
      CompressionOptions o = of(type);
      o.rank = 1;
      o.ratio = 0.1;
      auto codec = make(c, lay, o);
      auto& lossy = dynamic_cast<LossyCodec&>(*codec);
      std::vector<float> g = gradients(c.rank(), 0, lay.numel);
      reduce(*codec, g, two_buckets(lay));
      const std::vector<float> kept(lossy.residual(), lossy.residual() + n);
      codec->set_gradient_scale(4.f);
      for (size_t i = 0; i < n; ++i)
        if (lossy.residual()[i] != 4.f * kept[i]) return fmt::format("{}: residual {} not rescaled", type, i);
      g = gradients(c.rank(), 1, lay.numel);
      g[3] = std::numeric_limits<float>::infinity();
      g[40] = std::numeric_limits<float>::quiet_NaN();
      reduce(*codec, g, two_buckets(lay));
      codec->discard_feedback();
      for (size_t i = 0; i < n; ++i)
        if (lossy.residual()[i] != 0.f) return fmt::format("{}: residual {} kept after a skipped step", type, i);
      g = gradients(c.rank(), 2, lay.numel);
      reduce(*codec, g, two_buckets(lay));
      for (size_t i = 0; i < n; ++i)
        if (!std::isfinite(g[i])) return fmt::format("{}: element {} not finite after the skipped step", type, i);
    }
    return std::string();
  });
}
