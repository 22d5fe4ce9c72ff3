// A half-open range [begin, end) of elements of a flat buffer.
#pragma once
#include <cstdint>

namespace meshtrain {

struct ElemSpan {
  int64_t begin = 0, end = 0;
  int64_t count() const { return end > begin ? end - begin : 0; }
  bool operator==(const ElemSpan&) const = default;
};

}  // namespace meshtrain
