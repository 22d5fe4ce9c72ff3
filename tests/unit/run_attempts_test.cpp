// test-links: mt_telemetry
// A restarted run's metrics (telemetry/run_attempts.h): re-run steps found
// from the step numbers, matched in order with the launcher's restart log,
// the final record of each step kept, and the words `meshtrain report` prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/telemetry/report.h"
#include "meshtrain/telemetry/run_attempts.h"

using namespace meshtrain::telemetry;

namespace {

std::vector<MetricsRecord> steps(const std::vector<int64_t>& s) {
  std::vector<MetricsRecord> out;
  for (size_t i = 0; i < s.size(); ++i) {
    MetricsRecord r;
    r.step = s[i];
    r.loss = static_cast<double>(i);  // the record's position: which one was kept
    r.has_time = true;
    r.time.step_s = 0.1;
    out.push_back(r);
  }
  return out;
}

std::string write_log(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(run_attempts, restarts_are_seen_from_the_steps_and_named_from_the_log) {
  // Attempt 1 reached step 6, resumed after 4 (steps 5-6 again); attempt 2
  // reached 9, resumed after 8.
  const auto recs = steps({1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9, 9, 10});
  const std::string log = write_log(
      "mt_restarts_test.jsonl",
      R"J({"event":"restart","restart":1,"cause":"signal","rank":2,"message":"rank 2 was killed by signal 9 (Killed)"})J" "\n"
      R"J({"event":"training_again","restart":1,"seconds_after_failure":0.71})J" "\n"
      R"J({"event":"restart","restart":2,"cause":"heartbeat","rank":0,"message":"rank 0 stopped making progress"})J" "\n"
      R"J({"event":"finished","restarts":2})J" "\n");
  const RunAttempts a = split_attempts(recs, log);
  ASSERT_EQ(a.restarts.size(), 2u);
  EXPECT_EQ(a.new_steps, 10);
  EXPECT_EQ(a.rerun_steps, 3);
  const RestartMark& m1 = a.restarts[0];
  EXPECT_EQ(m1.cause, "signal");
  EXPECT_EQ(m1.rank, 2);
  EXPECT_EQ(m1.reached_step, 6);
  EXPECT_EQ(m1.resumed_step, 4);
  EXPECT_EQ(m1.steps_lost(), 2);
  ASSERT_TRUE(m1.recovery_s.has_value());
  EXPECT_DOUBLE_EQ(*m1.recovery_s, 0.71);
  EXPECT_EQ(describe(m1), "restart 1 after step 6: signal, rank 2 (rank 2 was killed by signal 9 "
                          "(Killed)); resumed from step 4, 2 steps run again; training again 0.71 s "
                          "after the failure");
  EXPECT_EQ(a.restarts[1].cause, "heartbeat");
  EXPECT_EQ(a.restarts[1].steps_lost(), 1);
  EXPECT_FALSE(a.restarts[1].recovery_s.has_value());
  // The last record of each step, in step order.
  ASSERT_EQ(a.final_records.size(), 10u);
  for (size_t i = 0; i < a.final_records.size(); ++i) EXPECT_EQ(a.final_records[i].step, int64_t(i) + 1);
  EXPECT_EQ(*a.final_records[4].loss, 6);   // step 5's second record
  EXPECT_EQ(*a.final_records[8].loss, 11);  // step 9's second record
  std::remove(log.c_str());
}

TEST(run_attempts, without_a_log_a_resume_is_still_found_and_a_clean_run_has_none) {
  const RunAttempts a = split_attempts(steps({1, 2, 3, 2, 3, 4}), "");
  ASSERT_EQ(a.restarts.size(), 1u);
  EXPECT_EQ(a.restarts[0].cause, "");
  EXPECT_EQ(describe(a.restarts[0]), "restart 1 after step 3: a resumed run (no restart log); "
                                     "resumed from step 1, 2 steps run again");
  const RunAttempts clean = split_attempts(steps({1, 2, 3}), "/nonexistent/restarts.jsonl");
  EXPECT_TRUE(clean.restarts.empty());
  EXPECT_EQ(clean.rerun_steps, 0);
}

TEST(run_attempts, the_report_lists_restarts_and_marks_them_on_the_picture) {
  const auto recs = steps({1, 2, 3, 4, 5, 6, 5, 6, 7, 8});
  ReportOptions o;
  o.restart_log = write_log("mt_restarts_report.jsonl",
                            R"J({"event":"restart","cause":"exit","rank":1,"message":"rank 1 exited with status 3"})J" "\n");
  const std::string text = report_text(recs, o);
  EXPECT_NE(text.find("1 restart(s): 8 steps, 2 of them run again (10 records in all)"), std::string::npos) << text;
  EXPECT_NE(text.find("restart 1 after step 6: exit, rank 1"), std::string::npos) << text;
  const std::string svg = report_svg(recs, o);
  EXPECT_NE(svg.find("class=\"restart\""), std::string::npos);
  EXPECT_NE(svg.find("restart 1: exit, rank 1 (2 run again)"), std::string::npos);
  std::remove(o.restart_log.c_str());
}

TEST(run_attempts, a_malformed_log_line_is_named) {
  const std::string log = write_log("mt_restarts_bad.jsonl", "{\"event\":\"restart\"}\nnot json\n");
  try {
    split_attempts(steps({1, 2}), log);
    FAIL() << "no error";
  } catch (const meshtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mt_restarts_bad.jsonl:2: not a JSON restart record"),
              std::string::npos) << e.what();
  }
  std::remove(log.c_str());
}
