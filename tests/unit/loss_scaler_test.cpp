// test-links: mt_optim
// fp16 dynamic loss scaling: growth after a window, halving and skipping on
// overflow, hysteresis, the minimum, the consecutive-skip error and state
// round trips.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/optim/loss_scaler.h"

using namespace meshtrain;

TEST(loss_scaler, starts_at_2_pow_16_and_grows_after_the_window) {
  LossScalerConfig c;
  c.growth_interval = 3;
  LossScaler s(c);
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_TRUE(s.update(false));  // third good step: grows
  EXPECT_EQ(s.scale(), 131072.f);
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 262144.f);
  EXPECT_EQ(LossScalerConfig{}.growth_interval, 2000);
}

TEST(loss_scaler, overflow_skips_the_step_halves_and_restarts_the_window) {
  LossScalerConfig c;
  c.growth_interval = 3;
  LossScaler s(c);
  s.update(false);
  s.update(false);
  EXPECT_FALSE(s.update(true));  // skip
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.consecutive_skips(), 1);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 32768.f);  // the window restarted at the overflow
  EXPECT_EQ(s.consecutive_skips(), 0);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.f);
}

TEST(loss_scaler, hysteresis_tolerates_overflows_until_a_growth_rearms_it) {
  LossScalerConfig c;
  c.growth_interval = 2;
  c.hysteresis = 3;
  LossScaler s(c);
  EXPECT_FALSE(s.update(true));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 65536.f);  // two overflows tolerated (but skipped)
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.f);  // the third lowers it
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 16384.f);  // and every one after it, until a growth
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 32768.f);  // grew: allowance re-armed
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_EQ(s.skipped_steps(), 6);
}

TEST(loss_scaler, respects_minimum_and_maximum) {
  LossScalerConfig c;
  c.initial_scale = 4;
  c.min_scale = 2;
  c.max_scale = 8;
  c.growth_interval = 1;
  LossScaler s(c);
  s.update(true);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 2.f);
  for (int i = 0; i < 5; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 8.f);
}

TEST(loss_scaler, too_many_consecutive_skips_is_a_clear_error) {
  LossScalerConfig c;
  c.max_consecutive_skips = 4;
  LossScaler s(c);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(s.update(true));
  s.update(false);  // a good step resets the count
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(s.update(true));
  try {
    s.update(true);
    FAIL() << "expected an error after 4 consecutive skips";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("4 steps in a row"), std::string::npos) << m;
    EXPECT_NE(m.find("bf16"), std::string::npos) << m;
  }
}

TEST(loss_scaler, state_round_trips_through_json) {
  LossScalerConfig c;
  c.growth_interval = 5;
  c.hysteresis = 2;
  LossScaler a(c);
  a.update(false);
  a.update(true);
  a.update(true);
  a.update(false);
  a.update(false);
  const nlohmann::json j = nlohmann::json::parse(a.to_json().dump());
  LossScaler b(c);
  b.load_json(j);
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.skipped_steps(), 2);
  EXPECT_EQ(b.good_steps_since_change(), 2);
  // Both continue identically.
  for (bool o : {false, false, false, true, false, false, false, false, false}) {
    EXPECT_EQ(a.update(o), b.update(o));
    EXPECT_EQ(a.scale(), b.scale());
  }
  EXPECT_THROW(b.load_json(nlohmann::json{{"scale", -1}}), Error);
  EXPECT_THROW(b.load_json(nlohmann::json::array()), Error);
}

TEST(loss_scaler, bad_config_is_an_error) {
  LossScalerConfig c;
  c.min_scale = 0;
  EXPECT_THROW(LossScaler{c}, Error);
  c = {};
  c.backoff_factor = 1.0;
  EXPECT_THROW(LossScaler{c}, Error);
  c = {};
  c.initial_scale = 1e9;
  EXPECT_THROW(LossScaler{c}, Error);
}
