// The instruction-set level the hot kernels run at, chosen once at start-up
// from what the CPU reports. One portable binary carries each dispatched
// kernel compiled for several levels (docs/ARCHITECTURE.md, "CPU support");
// MESHTRAIN_ISA caps the choice below what the CPU has, so every path can be
// run and tested on one machine.
#pragma once
#include <atomic>
#include <string>
#include <string_view>

namespace meshtrain {

// Ordered: each level includes the ones below it.
//   Scalar     the build's baseline (x86-64-v2: SSE4.2, or aarch64 NEON): compiler-
//              vectorized loops, no hand-written intrinsics
//   Avx2       x86-64-v3: AVX2, FMA, F16C
//   Avx512     x86-64-v4: AVX-512 F/BW/DQ/VL/CD
//   Avx512Bf16 Avx512 + AVX512_BF16: the bf16 GEMM runs on oneDNN's VDPBF16PS kernels
enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3 };
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16};

const char* isa_name(Isa isa);
// "scalar" | "avx2" | "avx512" | "avx512bf16"; anything else is a UsageError naming them.
Isa parse_isa(std::string_view name);

// The highest level this CPU (and its OS) supports.
Isa cpu_isa();
inline bool cpu_supports(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(cpu_isa()); }

namespace detail {
extern std::atomic<int> active_isa_level;
Isa init_active_isa();
}  // namespace detail

// The level dispatched kernels run at: cpu_isa(), capped by MESHTRAIN_ISA
// (scalar|avx2|avx512|avx512bf16|auto). A name that is unknown, or above
// what the CPU has, is a UsageError on the first call (main makes it early).
inline Isa active_isa() {
  const int v = detail::active_isa_level.load(std::memory_order_relaxed);
  return v >= 0 ? static_cast<Isa>(v) : detail::init_active_isa();
}
// True when MESHTRAIN_ISA (or a ScopedIsaCap) holds the level below the CPU's.
bool isa_capped();

// Runs the enclosed code at a lower level (tests); throws if the CPU lacks it.
class ScopedIsaCap {
 public:
  explicit ScopedIsaCap(Isa isa);
  ~ScopedIsaCap();
  ScopedIsaCap(const ScopedIsaCap&) = delete;
  ScopedIsaCap& operator=(const ScopedIsaCap&) = delete;

 private:
  int previous_;
};

// The CPU's model name ("AMD EPYC 9B14", ...), or the architecture when unknown.
std::string cpu_model_name();
// The model name in /proc/cpuinfo text: its "model name" line (x86), else
// aarch64's "CPU implementer" / "CPU part" lines named where known ("Arm
// Neoverse V2", as on NVIDIA Grace) or shown raw; "" when neither is there.
std::string cpu_model_name_from_cpuinfo(std::string_view cpuinfo);

}  // namespace meshtrain
