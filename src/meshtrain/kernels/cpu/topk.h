// Classification accuracy: how many rows of a batch of logits have their
// label among the k highest scores.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// logits (N, Vp), the first V columns real; targets (N), < 0 ignored. A row
// counts when fewer than k classes score strictly above its label (ties go
// to the label, as tests/unit/tiny_classifier.h counts), and not when the
// label's logit is NaN. Returns the count (top-1: k = 1, top-5: k = 5).
int64_t topk_correct(const float* logits, const int32_t* targets, int64_t N, int64_t V,
                     int64_t Vp, int64_t k);

}  // namespace meshtrain::cpu
