// test-links: mt_doctor
// The doctor's pure parts (doctor/doctor.h): the pair rounds cover every pair
// of ranks once with no rank twice in a round (so each link is measured
// alone), and the verdicts name a slow rank, a slow and a broken link, a low
// disk, a skewed clock and a slow collective, and nothing on a healthy
// report. The measurements themselves run for real in tests/cli/doctor.sh.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>
#include <string>

#include "meshtrain/doctor/doctor.h"
#include "meshtrain/doctor/link_probes.h"

using namespace meshtrain::doctor;

TEST(doctor, pair_rounds_cover_every_pair_once_and_each_rank_once_per_round) {
  for (int n = 1; n <= 9; ++n) {
    std::set<std::pair<int, int>> seen;
    for (const auto& round : pair_rounds(n)) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b);
        EXPECT_TRUE(busy.insert(a).second && busy.insert(b).second) << "n " << n << ": a rank twice in a round";
        EXPECT_TRUE(seen.insert({a, b}).second) << "n " << n << ": pair " << a << "-" << b << " twice";
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), n * (n - 1) / 2) << "n " << n;
    EXPECT_LE(static_cast<int>(pair_rounds(n).size()), n) << "n " << n;
  }
}

namespace {

DoctorReport healthy_report(int n) {
  DoctorReport r;
  r.world = n;
  r.transport = "shm";
  for (int i = 0; i < n; ++i) {
    RankFacts f;
    f.rank = i;
    f.host = "h";
    f.gemm_gflops = 100 + i;
    f.disk_free_gb = 50;
    f.mem_available_gb = 10;
    r.ranks.push_back(f);
  }
  for (const auto& round : pair_rounds(n))
    for (const auto& [a, b] : round) r.links.push_back({a, b, true, 10, 5.0, ""});
  CollectiveResult c;
  c.op = "allreduce";
  c.algorithm = "ring";
  c.bytes = 16 << 20;
  c.measured_us = 20000;
  r.collectives.push_back(c);
  return r;
}

bool names(const DoctorReport& r, const std::string& what) {
  for (const std::string& p : r.problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(doctor, a_healthy_report_has_no_problems) {
  DoctorReport r = healthy_report(4);
  judge(r, DoctorOptions{});
  EXPECT_TRUE(r.healthy()) << r.text();
  // The collective's expectation comes from the links' alpha and beta.
  EXPECT_GT(r.collectives[0].expected_us, 0);
}

TEST(doctor, each_fault_is_named_with_its_numbers) {
  DoctorOptions o;
  DoctorReport r = healthy_report(4);
  r.ranks[2].gemm_gflops = 20;
  r.ranks[1].disk_free_gb = 0.2;
  r.ranks[3].clock_offset_ms = 2500;
  r.links[1].gbps = 1.0;                 // one slow link
  r.links[4].ok = false;                 // one broken
  r.links[4].error = "timed out";
  r.collectives[0].measured_us = 1e7;    // far slower than the links predict
  judge(r, o);
  EXPECT_TRUE(names(r, "rank 2 (h, pid 0): GEMM 20.0 GFLOP/s")) << r.text();
  EXPECT_TRUE(names(r, "rank 1 (h): 0.20 GB free")) << r.text();
  EXPECT_TRUE(names(r, "rank 3 (h): clock +2500 ms")) << r.text();
  const LinkResult& slow = r.links[1];
  EXPECT_TRUE(names(r, fmt::format("link {}-{}: 1.00 GB/s", slow.a, slow.b))) << r.text();
  const LinkResult& cut = r.links[4];
  EXPECT_TRUE(names(r, fmt::format("link {}-{}: broken", cut.a, cut.b))) << r.text();
  EXPECT_TRUE(names(r, "allreduce of 16777216 B (ring)")) << r.text();
  EXPECT_EQ(r.problems.size(), 6u) << r.text();
  EXPECT_FALSE(r.to_json()["healthy"].get<bool>());
}
