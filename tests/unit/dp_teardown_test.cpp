// test-links: mt_parallel
// Teardown order of the trainer (train/trainer.cpp): DataParallel / Zero are
// created first and the model on their buffers after, so the model is
// destroyed first. Their destructors must then leave the model's memory
// alone (it is gone). The model's bytes are poisoned after its destructor and
// must be untouched after the parallel object's destructor; the old
// ~DataParallel reset the model's grad-ready hook there (a use after free:
// here a call through a poisoned std::function, i.e. a crash, or a changed
// byte). Each case runs in a child process so a crash reads as a failure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/nn/gpt.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/parallel/zero.h"

using namespace meshtrain;

namespace {

constexpr unsigned char kPoison = 0xA5;

GPTConfig small_model() {
  GPTConfig cfg = gpt_preset("tiny");
  cfg.vocab_size = 256;
  cfg.padded_vocab = pad_vocab(256);
  return cfg;
}

// Destroys `model` but keeps its storage, poisoned, as freed memory would be
// reused; returns the storage (to check and free later).
unsigned char* destroy_and_poison(GPT* model) {
  model->~GPT();
  auto* bytes = reinterpret_cast<unsigned char*>(model);
  std::memset(bytes, kPoison, sizeof(GPT));
  return bytes;
}

bool untouched(const unsigned char* bytes) {
  for (size_t i = 0; i < sizeof(GPT); ++i)
    if (bytes[i] != kPoison) return false;
  return true;
}

// The trainer's order with data parallelism (stage 0); exits 0 when the
// destructor left the dead model alone.
[[noreturn]] void data_parallel_then_model() {
  const GPTConfig cfg = small_model();
  auto dp = std::make_unique<parallel::DataParallel>(
      comm::Communicator::create_local(0, 1, "dp-teardown-test"), cfg.num_params());
  GPT* model = new GPT(cfg, dp->gradient_buffer());
  model->init_weights(1);
  dp->attach(*model);
  unsigned char* bytes = destroy_and_poison(model);
  dp.reset();
  const bool ok = untouched(bytes);
  ::operator delete(bytes);
  std::exit(ok ? 0 : 1);
}

// The trainer's order with ZeRO (stage 1 owns a DataParallel).
[[noreturn]] void zero_then_model(int stage) {
  const GPTConfig cfg = small_model();
  parallel::ZeroOptions zo;
  zo.stage = stage;
  auto zero = std::make_unique<parallel::Zero>(
      comm::Communicator::create_local(0, 1, "zero-teardown-test"), GPTSpec::make(cfg), zo);
  GPT* model = static_cast<GPT*>(zero->make_model().release());
  model->init_weights(1);
  zero->attach(*model);
  zero->broadcast_parameters();
  zero->shard();
  zero->start();
  unsigned char* bytes = destroy_and_poison(model);
  zero.reset();
  const bool ok = untouched(bytes);
  ::operator delete(bytes);
  std::exit(ok ? 0 : 1);
}

}  // namespace

class dp_teardown : public ::testing::Test {
 protected:
  void SetUp() override { ::testing::GTEST_FLAG(death_test_style) = "threadsafe"; }
};

TEST_F(dp_teardown, data_parallel_destroyed_after_its_model_leaves_the_model_alone) {
  EXPECT_EXIT(data_parallel_then_model(), ::testing::ExitedWithCode(0), "");
}

TEST_F(dp_teardown, zero_stage1_destroyed_after_its_model_leaves_the_model_alone) {
  EXPECT_EXIT(zero_then_model(1), ::testing::ExitedWithCode(0), "");
}

TEST_F(dp_teardown, zero_stage3_destroyed_after_its_model_leaves_the_model_alone) {
  EXPECT_EXIT(zero_then_model(3), ::testing::ExitedWithCode(0), "");
}

// The other order (a model that outlives its DataParallel): detach() first,
// and the model trains on without calling into the destroyed object.
TEST_F(dp_teardown, detached_model_outlives_its_data_parallel) {
  const GPTConfig cfg = small_model();
  auto dp = std::make_unique<parallel::DataParallel>(
      comm::Communicator::create_local(0, 1, "dp-teardown-detach"), cfg.num_params());
  GPT model(cfg);
  model.init_weights(2);
  dp->attach(model);
  dp->detach();
  dp.reset();
  std::vector<int32_t> in(cfg.seq_len, 1), tg(cfg.seq_len, 2);
  model.zero_grad();
  const float loss = model.forward(in.data(), tg.data(), 1, cfg.seq_len);
  model.backward();  // would run the grad-ready hook of the destroyed object
  EXPECT_TRUE(std::isfinite(loss));
}
