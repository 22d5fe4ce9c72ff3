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
#if defined(__clang__) && __clang_major__ < 16
    // Older clang (the fuzz build, scripts/fuzz.sh) knows no level names, nor
    // f16c/lzcnt/movbe; every CPU with these has them. The AVX checks include
    // the OS's XSAVE state here too.
    const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512cd");
#else
    const bool v3 = __builtin_cpu_supports("x86-64-v3");
    const bool v4 = __builtin_cpu_supports("x86-64-v4");
#endif
    if (!v3) return Isa::Scalar;
    if (!v4) return Isa::Avx2;
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

namespace {

// The value of the first "key : value" line of cpuinfo, trimmed; "" if none.
std::string cpuinfo_field(std::string_view cpuinfo, std::string_view key) {
  size_t pos = 0;
  while (pos < cpuinfo.size()) {
    size_t eol = cpuinfo.find('\n', pos);
    if (eol == std::string_view::npos) eol = cpuinfo.size();
    const std::string_view line = cpuinfo.substr(pos, eol - pos);
    pos = eol + 1;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || line.substr(0, key.size()) != key) continue;
    std::string_view name = line.substr(0, colon), value = line.substr(colon + 1);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    if (name != key) continue;
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\r')) value.remove_suffix(1);
    return std::string(value);
  }
  return "";
}

// Arm's own cores (implementer 0x41) that servers and HPC nodes use.
const char* arm_core_name(long part) {
  switch (part) {
    case 0xd0c: return "Arm Neoverse N1";
    case 0xd40: return "Arm Neoverse V1";
    case 0xd49: return "Arm Neoverse N2";
    case 0xd4f: return "Arm Neoverse V2";
    case 0xd8e: return "Arm Neoverse N3";
    case 0xd83: return "Arm Neoverse V3AE";
    case 0xd84: return "Arm Neoverse V3";
    default: return nullptr;
  }
}

}  // namespace

std::string cpu_model_name_from_cpuinfo(std::string_view cpuinfo) {
  std::string name = cpuinfo_field(cpuinfo, "model name");
  if (!name.empty()) return name;
  const std::string implementer = cpuinfo_field(cpuinfo, "CPU implementer");
  const std::string part = cpuinfo_field(cpuinfo, "CPU part");
  if (implementer.empty() || part.empty()) return "";
  const long impl = std::strtol(implementer.c_str(), nullptr, 0), p = std::strtol(part.c_str(), nullptr, 0);
  if (impl == 0x41)
    if (const char* known = arm_core_name(p)) return known;
  return "implementer " + implementer + " part " + part;
}

std::string cpu_model_name() {
  std::string text;
  if (std::FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char buf[4096];
    // The first processor's block is enough; stop well before a 256-core listing ends.
    while (text.size() < (size_t{64} << 10)) {
      const size_t k = std::fread(buf, 1, sizeof buf, f);
      if (k == 0) break;
      text.append(buf, k);
    }
    std::fclose(f);
  }
  const std::string name = cpu_model_name_from_cpuinfo(text);
#if defined(__x86_64__)
  return name.empty() ? "x86-64" : name;
#elif defined(__aarch64__)
  return name.empty() ? "aarch64" : name;
#else
  return name.empty() ? "unknown CPU" : name;
#endif
}

}  // namespace meshtrain
