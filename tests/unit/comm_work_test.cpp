// test-links: mt_comm
// Work handles without a transport: completion seen without a lock, a sleeping
// waiter woken by a finish on another thread, errors and timeouts; the flight
// recorder's entries.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "meshtrain/comm/flight_recorder.h"
#include "meshtrain/comm/types.h"
#include "meshtrain/comm/work.h"

using namespace meshtrain::comm;

namespace {
std::shared_ptr<WorkState> pending(uint64_t seq) {
  auto s = std::make_shared<WorkState>();
  s->info.kind = "allreduce";
  s->info.seq = seq;
  s->info.bytes = 8;
  return s;
}
}  // namespace

TEST(comm_work, finished_work_reports_done_and_waits_without_blocking) {
  auto s = pending(3);
  Work w(s);
  EXPECT_FALSE(w.test());
  EXPECT_FALSE(w.failed());
  s->finish();
  EXPECT_TRUE(w.test());
  EXPECT_FALSE(w.failed());
  w.wait(std::chrono::milliseconds(0));  // done: no timeout even at zero
  EXPECT_EQ(w.sequence_number(), 3u);
}

TEST(comm_work, completed_work_keeps_its_number_without_a_state) {
  // What a small collective that ran inline and succeeded returns.
  const Work w = Work::completed(41, "allreduce");
  EXPECT_TRUE(w.test());
  EXPECT_FALSE(w.failed());
  w.wait(std::chrono::milliseconds(0));
  EXPECT_EQ(w.sequence_number(), 41u);
  EXPECT_EQ(w.description(), "allreduce #41 (done)");
  EXPECT_EQ(Work().description(), "no-op");
}

TEST(comm_work, waiter_asleep_is_woken_by_a_finish_on_another_thread) {
  // Many short races between wait() going to sleep and finish() on another
  // thread: a lost wake-up would hit the 10 s timeout and throw.
  for (int i = 0; i < 2000; ++i) {
    auto s = pending(i);
    Work w(s);
    std::thread finisher([s, i] {
      if (i % 2) std::this_thread::yield();
      s->finish();
    });
    EXPECT_NO_THROW(w.wait(std::chrono::seconds(10))) << "iteration " << i;
    finisher.join();
    EXPECT_TRUE(w.test());
    EXPECT_EQ(s->waiters.load(), 0);
  }
}

TEST(comm_work, error_is_rethrown_and_timeout_names_the_operation) {
  auto failed = pending(7);
  failed->finish(std::make_exception_ptr(std::runtime_error("peer 1 exited")));
  Work f(failed);
  EXPECT_TRUE(f.failed());
  EXPECT_THROW(f.wait(), std::runtime_error);

  Work never(pending(9));
  try {
    never.wait(std::chrono::milliseconds(20));
    FAIL() << "wait on an unfinished operation returned";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce #9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
}

TEST(comm_work, flight_recorder_finishes_only_its_own_entry) {
  // Collectives and sends/receives count separately, so a send can carry a
  // collective's sequence number; when it overwrites that collective's slot
  // (16 operations later), the collective's late finished() must not mark it.
  FlightRecorder r;
  OpInfo coll;
  coll.kind = "allreduce";
  coll.seq = 1;
  const uint64_t first = r.started(coll);
  for (uint64_t i = 0; i < FlightRecorder::kEntries; ++i) {
    OpInfo send;
    send.kind = "send";
    send.op = static_cast<uint8_t>(CollOp::Send);
    send.root = 1;
    send.seq = i + 1 == FlightRecorder::kEntries ? 1 : 100 + i;
    r.started(send);
  }
  r.finished(first, true);
  const std::string dump = r.dump();
  const size_t at = dump.find("send #1 ");
  ASSERT_NE(at, std::string::npos) << dump;
  const std::string line = dump.substr(at, dump.find('\n', at) - at);
  EXPECT_NE(line.find("running for"), std::string::npos) << line;
  EXPECT_EQ(dump.find("allreduce #1"), std::string::npos) << "overwritten entry still listed\n" << dump;
}

TEST(comm_work, flight_recorder_dump_names_each_op_and_its_state) {
  FlightRecorder r;
  EXPECT_NE(r.dump().find("no operations yet"), std::string::npos);
  OpInfo a;
  a.kind = "allreduce";
  a.seq = 1;
  a.bytes = 4096;
  a.op = static_cast<uint8_t>(CollOp::Allreduce);
  a.reduces = true;
  a.algo = "direct";
  OpInfo s;
  s.kind = "split";
  s.seq = 2;
  s.detail = "color 0, key 1";
  OpInfo b = a;
  b.seq = 3;
  r.finished(r.started(a), true);
  r.finished(r.started(s), false);
  r.started(b);
  const std::string d = r.dump();
  EXPECT_NE(d.find("allreduce #1 (4096 bytes, F32, sum, direct): done in"), std::string::npos) << d;
  EXPECT_NE(d.find("split #2 (color 0, key 1): FAILED in"), std::string::npos) << d;
  EXPECT_NE(d.find("allreduce #3 (4096 bytes, F32, sum, direct): running for"), std::string::npos) << d;
}
