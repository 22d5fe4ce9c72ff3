#include "meshtrain/train/slow_rank.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "meshtrain/core/error.h"

namespace meshtrain {

SlowRank SlowRank::from_env(int rank) {
  SlowRank s;
  const char* v = std::getenv("MESHTRAIN_TEST_SLOW_RANK");
  if (!v || !*v) return s;
  const std::string text(v);
  const size_t colon = text.find(':');
  char* end = nullptr;
  const long r = std::strtol(text.c_str(), &end, 10);
  const double f = colon == std::string::npos ? 0 : std::strtod(text.c_str() + colon + 1, nullptr);
  MT_CHECK(colon != std::string::npos && end == text.c_str() + colon && r >= 0 && f >= 1,
           "MESHTRAIN_TEST_SLOW_RANK=\"{}\": expected RANK:FACTOR with FACTOR >= 1, e.g. \"1:2\"", text);
  if (r == rank) s.factor_ = f;
  return s;
}

void SlowRank::delay(double step_s) const {
  if (factor_ <= 1 || step_s <= 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double>((factor_ - 1) * step_s));
}

}  // namespace meshtrain
