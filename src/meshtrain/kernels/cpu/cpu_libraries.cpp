#include "meshtrain/kernels/cpu/cpu_libraries.h"

#include <cblas.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#if defined(MESHTRAIN_HAVE_DNNL)
#include <oneapi/dnnl/dnnl.h>
#endif

namespace meshtrain::cpu {

const char* openblas_coretype_for(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Scalar: return "Nehalem";
    case Isa::Avx2: return "Haswell";
    case Isa::Avx512: return "SkylakeX";
    case Isa::Avx512Bf16: return "Cooperlake";
  }
#endif
  return nullptr;
}

const char* onednn_max_isa_for(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Scalar: return "SSE41";
    case Isa::Avx2: return "AVX2";
    case Isa::Avx512: return "AVX512_CORE";
    case Isa::Avx512Bf16: return "AVX512_CORE_BF16";
  }
#endif
  return nullptr;
}

bool openblas_fell_back_to_generic(Isa cpu_level) {
#if defined(__x86_64__)
  return cpu_level >= Isa::Avx2 && std::string_view(openblas_get_corename()) == "Prescott";
#else
  (void)cpu_level;
  return false;
#endif
}

std::string openblas_summary() {
  // openblas_get_config() starts "OpenBLAS 0.3.21 ..."; keep the version.
  const std::string config = openblas_get_config();
  std::string version = "OpenBLAS";
  if (config.rfind("OpenBLAS ", 0) == 0) version = config.substr(0, config.find(' ', 9));
  return fmt::format("{} ({} kernels)", version, openblas_get_corename());
}

std::string onednn_summary() {
#if defined(MESHTRAIN_HAVE_DNNL)
  const dnnl_version_t* v = dnnl_version();
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  return fmt::format("oneDNN {}.{}.{} (ISA cap: {})", v->major, v->minor, v->patch,
                     cap && *cap ? cap : "none, its own dispatch");
#else
  return "none (built without oneDNN)";
#endif
}

}  // namespace meshtrain::cpu
