// test-links: mt_launch mt_comm mt_core
// The launcher with real processes: heartbeats written by a rank through the
// shared-memory board, a hung rank caught by its missing heartbeat, a rank
// that never beats left alone (startup is not judged) unless a startup
// timeout is set, and the elastic restart policy: restart counts, the
// restart log, giving up, and dropping a slot that keeps failing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meshtrain/comm/transports/shm/shm_segment.h"
#include "meshtrain/launch/elastic.h"
#include "meshtrain/launch/heartbeat.h"
#include "meshtrain/launch/launcher.h"

using namespace meshtrain;
using namespace meshtrain::launch;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A rank written in Python: one heartbeat through the board (64-byte segment
// header, then one 64-byte slot per rank: beats, monotonic stamp, step), then
// silence for 30 s.
const char* kBeatOnceThenHang =
    "import mmap,os,struct,time\n"
    "fd=os.open('/dev/shm'+os.environ['MESHTRAIN_HEARTBEAT'],os.O_RDWR); m=mmap.mmap(fd,0)\n"
    "o=64+64*int(os.environ['MESHTRAIN_RANK'])\n"
    "m[o+16:o+24]=struct.pack('<q',6); m[o+8:o+16]=struct.pack('<Q',time.monotonic_ns())\n"
    "m[o:o+8]=struct.pack('<Q',1); time.sleep(30)\n";

std::vector<nlohmann::json> read_log(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class launch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("meshtrain_launch_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

}  // namespace

TEST_F(launch, heartbeat_board_sees_a_ranks_steps) {
  const std::string job = comm::random_job_id();
  HeartbeatBoard board(job, 3);
  EXPECT_EQ(board.read(1).beats, 0u);
  const uint64_t before_ns = monotonic_ns();
  pid_t pid = fork();
  if (pid == 0) {  // rank 1 of the job: two steps
    setenv(kEnvHeartbeat, board.name().c_str(), 1);
    setenv("MESHTRAIN_RANK", "1", 1);
    heartbeat_step(4);
    heartbeat_step(5);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  const auto h = board.read(1);
  const double since_fork_s = static_cast<double>(monotonic_ns() - before_ns) * 1e-9;
  EXPECT_EQ(h.beats, 2u);
  EXPECT_EQ(h.step, 5);
  // The age is measured from the child's last beat: its stamp lies between
  // the fork and the read (an order of clock readings, whatever the load).
  EXPECT_GT(h.age_s, 0.0);
  EXPECT_LE(h.age_s, since_fork_s);
  EXPECT_EQ(board.read(0).beats, 0u);
  EXPECT_EQ(board.read(2).beats, 0u);
  EXPECT_TRUE(fs::exists("/dev/shm" + board.name()));
}

TEST_F(launch, hung_rank_is_caught_by_its_heartbeat_and_everything_is_stopped) {
  LaunchOptions o;
  o.nproc = 2;
  o.command = {"sh", "-c",
               std::string("if [ \"$MESHTRAIN_RANK\" = 1 ]; then exec python3 -c \"") + kBeatOnceThenHang +
                   "\"; else sleep 30; fi"};
  o.heartbeat_timeout_s = 0.5;
  o.grace_s = 0.5;
  o.prefix_output = false;
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult r = run_local(o);
  // Hang guard (normally about a second): both ranks would sleep 30 s, so a
  // launcher that did not stop them returns only after that.
  EXPECT_LT(seconds_since(t0), 25.0) << "the hung job was not stopped";
  EXPECT_EQ(r.kind, FailureKind::Hung) << r.message;
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.last_step, 7);
  EXPECT_NE(r.message.find("rank 1 stopped making progress"), std::string::npos) << r.message;
  EXPECT_EQ(r.exit_code, 1);
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    EXPECT_EQ(e.path().filename().string().rfind(comm::shm_job_prefix(r.job_id), 0), std::string::npos)
        << "left behind: " << e.path();
}

TEST_F(launch, startup_is_not_judged_by_the_heartbeat_timeout) {
  LaunchOptions o;
  o.nproc = 2;
  o.command = {"sleep", "1.2"};  // never beats: still starting up
  o.heartbeat_timeout_s = 0.3;
  const LaunchResult r = run_local(o);
  EXPECT_EQ(r.kind, FailureKind::None) << r.message;
  o.startup_timeout_s = 0.3;  // unless a startup limit is set
  const LaunchResult s = run_local(o);
  EXPECT_EQ(s.kind, FailureKind::NoStart) << s.message;
  EXPECT_NE(s.message.find("did not begin training within 0.3 s"), std::string::npos) << s.message;
}

TEST_F(launch, elastic_restarts_log_causes_and_give_up) {
  ElasticOptions e;
  e.launch.nproc = 2;
  e.launch.prefix_output = false;
  // Rank 1 exits 4 on the first two attempts, then the job succeeds.
  e.launch.command = {"sh", "-c", "[ \"$MESHTRAIN_RANK\" = 1 ] && [ \"$MESHTRAIN_RESTART_COUNT\" -lt 2 ] && exit 4; exit 0"};
  e.max_restarts = 2;
  e.restart_log = (dir_ / "restarts.jsonl").string();
  ElasticResult r = run_elastic(e);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(r.restarts, 2);
  auto log = read_log(e.restart_log);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0]["event"], "restart");
  EXPECT_EQ(log[0]["cause"], "exit");
  EXPECT_EQ(log[0]["exit_status"], 4);
  EXPECT_EQ(log[0]["rank"], 1);
  EXPECT_EQ(log[1]["restart"], 2);
  EXPECT_NE(log[0]["job"], log[1]["job"]);  // a new job id per attempt
  EXPECT_EQ(log[2]["event"], "finished");

  // One restart fewer than needed: gives up, saying why.
  fs::remove(e.restart_log);
  e.max_restarts = 1;
  r = run_elastic(e);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.message.find("giving up: 1 restart(s) used (--max-restarts 1)"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("rank 1 exited with status 4"), std::string::npos) << r.message;
  log = read_log(e.restart_log);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1]["event"], "gave_up");
}

TEST_F(launch, a_slot_that_keeps_failing_is_dropped_down_to_min_nproc) {
  ElasticOptions e;
  e.launch.nproc = 4;
  e.launch.prefix_output = false;
  // Slot 3 fails while the world has 4 ranks; then rank 2 of 3 fails once.
  e.launch.command = {"sh", "-c",
                      "[ \"$MESHTRAIN_WORLD_SIZE\" = 4 ] && [ \"$MESHTRAIN_RANK\" = 3 ] && kill -9 $$; "
                      "[ \"$MESHTRAIN_WORLD_SIZE\" = 3 ] && [ \"$MESHTRAIN_RANK\" = 2 ] && "
                      "[ \"$MESHTRAIN_RESTART_COUNT\" = 2 ] && exit 9; exit 0"};
  e.max_restarts = 5;
  e.min_nproc = 2;
  e.restart_log = (dir_ / "restarts.jsonl").string();
  const ElasticResult r = run_elastic(e);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(r.restarts, 3);
  EXPECT_EQ(r.final_nproc, 3);  // one failure of rank 2 is not "keeps failing"
  const auto log = read_log(e.restart_log);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0]["cause"], "signal");
  EXPECT_EQ(log[0]["signal"], 9);
  EXPECT_EQ(log[0]["new_world"], 4);
  EXPECT_EQ(log[1]["slot"], 3);
  EXPECT_EQ(log[1]["new_world"], 3);
  EXPECT_EQ(log[2]["cause"], "exit");
  EXPECT_EQ(log[2]["slot"], 2);
  EXPECT_EQ(log[2]["new_world"], 3);
  EXPECT_EQ(log[3]["event"], "finished");
  EXPECT_EQ(log[3]["world"], 3);
}
