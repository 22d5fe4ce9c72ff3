// Element types a tensor can hold.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain {

enum class DType : uint8_t { F32, BF16, F16, I32, U16, F64, I64, U8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::U16: return 2;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

// Names as safetensors writes them ("F32", "BF16", ...).
std::string_view dtype_name(DType t);
// Parses safetensors names and the lower-case config names (f32, bf16, ...).
DType dtype_from_name(std::string_view name);

}  // namespace meshtrain
