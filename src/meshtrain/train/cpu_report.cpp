#include "meshtrain/train/cpu_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshtrain/comm/stream_copy.h"
#include "meshtrain/core/cpu_isa.h"
#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/attention_fused.h"
#include "meshtrain/kernels/cpu/cpu_libraries.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/kernels/cpu/sgemm_backend.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain {

namespace {

std::string dispatch_level() {
  const Isa active = active_isa();
  if (isa_capped())
    return fmt::format("{} (MESHTRAIN_ISA; the CPU has {})", isa_name(active), isa_name(cpu_isa()));
  return isa_name(active);
}

// The compiled variants stop at avx512: avx512bf16 changes only the bf16 GEMM.
const char* loop_kernels_level() {
  return isa_name(std::min(active_isa(), Isa::Avx512));
}

std::string strip_prefix(std::string s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

// Whether this build has the CUDA backend, for which GPUs, and what it sees.
std::string cuda_summary() {
  if (!cuda_backend_built()) {
    return "not built (cmake -DMESHTRAIN_CUDA=ON, or bash scripts/build-cuda.sh)";
  }
  return fmt::format("backend built for sm_{}: {}", cuda_backend_archs(),
                     runtime_for(Device::cuda(0)).describe());
}

}  // namespace

std::vector<std::pair<std::string, std::string>> cpu_report_rows() {
  return {
      {"cpu", cpu_model_name()},
      {"dispatch level", dispatch_level()},
      {"layernorm, GELU, AdamW, softmax-CE, encoder, elementwise", loop_kernels_level()},
      {"attention", cpu::attention_path()},
      {"bf16/f16 conversion", half_conversion_isa()},
      {"bf16 GEMM", strip_prefix(cpu::half_gemm_description(cpu::Half::BF16), "bf16 GEMM: ")},
      {"f32 GEMM", fmt::format("{} | {} | MESHTRAIN_SGEMM={}", cpu::openblas_summary(),
                               cpu::onednn_summary(),
                               cpu::sgemm_policy_name(cpu::sgemm_policy()))},
      {"collective reductions", loop_kernels_level()},
      {"streaming copies", comm::stream_copy_isa()},
      {"cuda", cuda_summary()},
  };
}

std::string cpu_report_line() {
  return fmt::format("cpu: {} | dispatch {} | attention {} | conversion {} | {} | {}",
                     cpu_model_name(), dispatch_level(), cpu::attention_path(),
                     half_conversion_isa(), cpu::openblas_summary(), cpu::onednn_summary());
}

nlohmann::json cpu_report_json() {
  return {{"cpu", cpu_model_name()},
          {"isa", isa_name(active_isa())},
          {"cpu_isa", isa_name(cpu_isa())},
          {"isa_capped", isa_capped()},
          {"attention", cpu::attention_path()},
          {"conversion", half_conversion_isa()},
          {"bf16_gemm", cpu::half_gemm_description(cpu::Half::BF16)},
          {"openblas", cpu::openblas_summary()},
          {"onednn", cpu::onednn_summary()},
          {"streaming_copies", comm::stream_copy_isa()}};
}

}  // namespace meshtrain
