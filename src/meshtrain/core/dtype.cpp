#include "meshtrain/core/dtype.h"

#include <algorithm>
#include <cctype>

#include "meshtrain/core/error.h"

namespace meshtrain {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::U16: return "U16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  std::string up(name);
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::U16, DType::F64,
                  DType::I64, DType::U8}) {
    if (dtype_name(t) == up) return t;
  }
  fail("unknown dtype '{}' (expected one of f32, bf16, f16, i32, u16, f64, i64, u8)", name);
}

}  // namespace meshtrain
