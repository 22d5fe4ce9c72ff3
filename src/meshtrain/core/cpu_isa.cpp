#include "meshtrain/core/cpu_isa.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace detail {
std::atomic<int> active_isa_level{-1};
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Bf16: return "avx512bf16";
  }
  return "?";
}

Isa parse_isa(std::string_view name) {
  for (Isa i : kAllIsas)
    if (name == isa_name(i)) return i;
  throw UsageError(fmt::format("unknown ISA level '{}' (known: scalar, avx2, avx512, avx512bf16)", name));
}

Isa cpu_isa() {
  static const Isa level = [] {
#if defined(__x86_64__) && defined(__GNUC__)
    // The arch-level names check the OS's XSAVE state too (a CPU with
    // AVX-512 under an OS that does not save zmm registers reports v3).
    if (!__builtin_cpu_supports("x86-64-v3")) return Isa::Scalar;
    if (!__builtin_cpu_supports("x86-64-v4")) return Isa::Avx2;
    if (!__builtin_cpu_supports("avx512bf16")) return Isa::Avx512;
    return Isa::Avx512Bf16;
#else
    return Isa::Scalar;
#endif
  }();
  return level;
}

Isa detail::init_active_isa() {
  Isa level = cpu_isa();
  const char* env = std::getenv("MESHTRAIN_ISA");
  if (env && *env && std::strcmp(env, "auto") != 0) {
    Isa want;
    try {
      want = parse_isa(env);
    } catch (const UsageError&) {
      throw UsageError(fmt::format(
          "MESHTRAIN_ISA={}: unknown level (use scalar, avx2, avx512, avx512bf16 or auto)", env));
    }
    if (!cpu_supports(want))
      throw UsageError(fmt::format("MESHTRAIN_ISA={} asks for more than this CPU ({}) supports: {}",
                                   env, cpu_model_name(), isa_name(cpu_isa())));
    level = want;
  }
  active_isa_level.store(static_cast<int>(level), std::memory_order_relaxed);
  return level;
}

bool isa_capped() { return active_isa() != cpu_isa(); }

ScopedIsaCap::ScopedIsaCap(Isa isa) : previous_(static_cast<int>(active_isa())) {
  MT_CHECK(cpu_supports(isa), "ScopedIsaCap: this CPU does not support {}", isa_name(isa));
  detail::active_isa_level.store(static_cast<int>(isa), std::memory_order_relaxed);
}

ScopedIsaCap::~ScopedIsaCap() {
  detail::active_isa_level.store(previous_, std::memory_order_relaxed);
}

std::string cpu_model_name() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  std::string name;
  if (f) {
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "model name", 10) != 0) continue;
      const char* colon = std::strchr(line, ':');
      if (!colon) continue;
      name = colon + 1;
      while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.erase(0, 1);
      while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
      break;
    }
    std::fclose(f);
  }
#if defined(__x86_64__)
  return name.empty() ? "x86-64" : name;
#elif defined(__aarch64__)
  return name.empty() ? "aarch64" : name;
#else
  return name.empty() ? "unknown CPU" : name;
#endif
}

}  // namespace meshtrain
