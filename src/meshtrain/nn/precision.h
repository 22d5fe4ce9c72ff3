// Compute precision of a GPT (config key `precision`): fp32, or mixed
// precision with bf16 / fp16 GEMM operands. What is stored how:
// docs/ARCHITECTURE.md ("Mixed precision").
#pragma once
#include <string>
#include <string_view>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"

namespace meshtrain {

enum class Precision { FP32, BF16, FP16 };

inline Precision precision_from_name(std::string_view s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "bf16") return Precision::BF16;
  if (s == "fp16") return Precision::FP16;
  fail("precision = \"{}\": expected fp32, bf16 or fp16", s);
}
inline const char* precision_name(Precision p) {
  return p == Precision::FP32 ? "fp32" : p == Precision::BF16 ? "bf16" : "fp16";
}
inline bool is_mixed(Precision p) { return p != Precision::FP32; }
// The 16-bit format of a mixed precision (BF16 for FP32, unused there).
inline HalfFormat half_of(Precision p) { return p == Precision::FP16 ? HalfFormat::F16 : HalfFormat::BF16; }

}  // namespace meshtrain
