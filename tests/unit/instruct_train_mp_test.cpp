// Instruction tuning through the engine: `meshtrain data instruct` writes
// masked shards (one example per window; responses of very different
// lengths, so each window has its own number of trained targets), and
// `meshtrain train` on them normalizes the loss by the trained targets of the
// whole step: 2 ranks with gradient accumulation, ZeRO-3, and tensor
// parallelism each reproduce the single-rank run (every step's loss, the
// validation loss within 1e-5, the final parameters within 5e-5 as
// dp_harness.h compares them; why 1e-5: dp_harness.h, measured here at
// most one ulp of the loss and 1.8e-6 on a tensor). A mean of per-micro-
// batch means would not: the windows' target counts differ.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "dp_harness.h"

using namespace dp_test;

namespace {

constexpr int kSteps = 8;

// Examples with 1- to 40-character responses, prepared for seq_len 64 once
// per test binary.
const fs::path& instruct_data() {
  static const fs::path dir = [] {
    const fs::path d = workdir() / "instruct";
    fs::create_directories(d);
    {
      std::ofstream f(d / "data.jsonl");
      for (int i = 0; i < 200; ++i) {
        std::string response;
        for (int k = 0; k < 1 + (i * 7) % 40; ++k) response.push_back(static_cast<char>('a' + (i + k) % 26));
        f << R"({"prompt": "say )" << i << R"(:", "response": ")" << response << "\"}\n";
      }
    }
    const std::string cmd = binary() + " data instruct --input " + (d / "data.jsonl").string() +
                            " --out " + (d / "shards").string() +
                            " --seq-len 64 --eos . --val-fraction 0.1 > " +
                            (d / "prepare.log").string() + " 2>&1";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("data instruct failed: " + slurp((d / "prepare.log").string()));
    return d / "shards";
  }();
  return dir;
}

std::string settings(const std::string& extra) {
  const std::string d = instruct_data().string();
  return " --set model.preset=tiny --set model.n_head=4 --set model.seq_len=64 "
         "--set model.vocab_size=256 --set data.train='" + d + "/train_*.bin' --set data.val='" +
         d + "/val_*.bin' --set train.steps=" + std::to_string(kSteps) +
         " --set train.warmup=2 --set train.lr=3e-3 --set train.threads=1 "
         "--set train.eval_every=4 --set train.eval_batches=2 --set train.clip=1" + extra;
}

// One rank with the same windows per step (and per evaluation: eval_batches
// counts micro-batches).
const RunResult& reference(int micro_batch, int accum) {
  static std::map<std::pair<int, int>, RunResult> cache;
  auto it = cache.find({micro_batch, accum});
  if (it == cache.end())
    it = cache.emplace(std::pair{micro_batch, accum},
                       train("inst_ref_" + std::to_string(micro_batch) + "_" + std::to_string(accum),
                             settings(" --nproc 1 --set train.micro_batch=" +
                                      std::to_string(micro_batch) + " --set train.grad_accum=" +
                                      std::to_string(accum)))).first;
  return it->second;
}

}  // namespace

TEST(instruct_train, dp2_accumulating_matches_one_rank) {
  expect_same_training(train("inst_dp2acc", settings(" --nproc 2 --set train.micro_batch=1 "
                                                     "--set train.grad_accum=2")),
                       reference(2, 2), 1e-5);
}

TEST(instruct_train, zero3_matches_one_rank) {
  expect_same_training(train("inst_z3", settings(" --nproc 2 --set train.micro_batch=2 "
                                                 "--set zero.stage=3 --set zero.persist_threshold=0")),
                       reference(4, 1), 1e-5);
}

TEST(instruct_train, tensor_parallel_matches_one_rank) {
  expect_same_training(train("inst_tp2", settings(" --nproc 2 --set parallel.tp=2 "
                                                  "--set train.micro_batch=4")),
                       reference(4, 1), 1e-5);
}

// Two pipeline stages (1F1B; zb-h1 with its split backward) over two
// replicas: each micro-batch's backward is weighted by its share of the
// step's response tokens, as one rank weighs it.
TEST(instruct_train, pipeline_dp2_pp2_matches_one_rank) {
  for (const char* schedule : {"1f1b", "zb-h1"})
    expect_same_training(train(std::string("inst_pp2_") + schedule,
                               settings(std::string(" --nproc 4 --set parallel.pp=2 --set "
                                                    "train.micro_batch=1 --set train.grad_accum=2 "
                                                    "--set parallel.schedule=") + schedule)),
                         reference(2, 2), 1e-5);
}

TEST(instruct_train, a_seq_len_other_than_the_shards_is_a_clear_error) {
  RunResult r = train("inst_badT", settings(" --nproc 1 --set train.micro_batch=4 --set model.seq_len=32"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.log.find("laid out for seq_len 64, but training uses seq_len 32"), std::string::npos)
      << r.log;
}
