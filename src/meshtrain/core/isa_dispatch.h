// Run-time dispatch for kernels compiled once per ISA level.
//
// A source whose first line is `// isa-levels: scalar avx2 avx512` is compiled
// once per listed level (src/meshtrain/CMakeLists.txt): with -march=x86-64-v2,
// -v3 and -v4 and MT_ISA_NS defined as isa_scalar, isa_avx2, isa_avx512. Its
// kernels live in namespace MT_ISA_NS; the baseline compilation (MT_ISA_BASELINE)
// also emits the public functions, which pick a variant per call with
// MT_ISA_PICK from active_isa(). Off x86-64 only the scalar level is built.
// The first line is read when CMake configures: re-run it after adding one.
//
// Keep everything else in such a file static or in an anonymous namespace:
// an inline function with external linkage compiled at avx512 could be the
// copy the linker keeps for the whole program (tests/cli/isa_leaks.sh checks
// the binary for that).
#pragma once
#include "meshtrain/core/cpu_isa.h"

#if defined(__x86_64__)
#define MESHTRAIN_ISA_VARIANTS 1
#define MT_ISA_DECLARE(...)          \
  namespace isa_scalar { __VA_ARGS__; } \
  namespace isa_avx2 { __VA_ARGS__; }   \
  namespace isa_avx512 { __VA_ARGS__; }
#define MT_ISA_PICK(fn) ::meshtrain::isa_pick(isa_scalar::fn, isa_avx2::fn, isa_avx512::fn)
#else
#define MESHTRAIN_ISA_VARIANTS 0
#define MT_ISA_DECLARE(...) namespace isa_scalar { __VA_ARGS__; }
#define MT_ISA_PICK(fn) isa_scalar::fn
#endif

namespace meshtrain {

template <class F>
inline F isa_pick(F scalar, F avx2, F avx512) {
  const Isa level = active_isa();
  return level >= Isa::Avx512 ? avx512 : level >= Isa::Avx2 ? avx2 : scalar;
}

}  // namespace meshtrain
