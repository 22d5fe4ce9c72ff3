// What each kernel family runs on this CPU: the dispatch level (core/cpu_isa.h)
// per family and the GEMM libraries' own choices. `meshtrain --version` prints
// the table; `train` and `bench` print the one-line form when they start.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshtrain {

// (family, what runs), e.g. ("attention", "fused avx512").
std::vector<std::pair<std::string, std::string>> cpu_report_rows();
// "cpu: NAME | dispatch avx2 (MESHTRAIN_ISA; CPU has avx512bf16) | attention fused avx2 | ..."
std::string cpu_report_line();
nlohmann::json cpu_report_json();

}  // namespace meshtrain
