// The GEMM libraries' own CPU dispatch, reported and capped alongside ours.
// OpenBLAS (DYNAMIC_ARCH) and oneDNN pick their kernels from the CPU when
// they load; MESHTRAIN_ISA caps them through their environment variables
// (OPENBLAS_CORETYPE, ONEDNN_MAX_CPU_ISA), which apps/meshtrain/main.cpp sets
// before they load (it re-executes itself once to do so).
#pragma once
#include <string>

#include "meshtrain/core/cpu_isa.h"

namespace meshtrain::cpu {

// OPENBLAS_CORETYPE for a level: Nehalem (SSE4.2), Haswell (AVX2), SkylakeX
// (AVX-512), Cooperlake (AVX512_BF16); nullptr off x86-64.
const char* openblas_coretype_for(Isa isa);
// ONEDNN_MAX_CPU_ISA for a capped level: SSE41, AVX2, AVX512_CORE, AVX512_CORE_BF16.
const char* onednn_max_isa_for(Isa isa);

// True when OpenBLAS runs its catch-all Prescott (SSE3) kernels on a CPU
// with AVX2 or more: its dynamic build does not know the CPU (0.3.21 on
// Emerald Rapids, family 6 model 207), and its sgemm runs ~6x below the
// kernels the CPU can run. main.cpp then sets OPENBLAS_CORETYPE for the
// dispatch level, as for a cap.
bool openblas_fell_back_to_generic(Isa cpu_level);

// "OpenBLAS 0.3.21 (SkylakeX kernels)".
std::string openblas_summary();
// "oneDNN 2.6.3 (ISA cap: none)" or "none (not built in)".
std::string onednn_summary();

}  // namespace meshtrain::cpu
