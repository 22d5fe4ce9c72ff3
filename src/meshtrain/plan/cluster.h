// The hardware the planner plans for, as data: per GPU its memory, dense
// bf16 peak, and the two link levels an alpha-beta model needs (inside a
// node: NVLink; across nodes: the GPU's share of the network), from the
// vendors' public specifications. A cluster file (JSON with the same
// fields) describes anything else.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshtrain::plan {

struct ClusterSpec {
  std::string name;
  double memory_gb = 0;         // per GPU, 10^9 bytes
  double usable_fraction = 0.9;  // of memory_gb a plan may fill (allocator, library workspace)
  double bf16_tflops = 0;       // dense peak per GPU
  int gpus_per_node = 8;
  double intra_gbps = 0;        // GB/s per GPU per direction inside a node
  double inter_gbps = 0;        // GB/s per GPU per direction across nodes
  double intra_alpha_us = 3;    // latency per collective step inside a node
  double inter_alpha_us = 10;   // and across nodes
  double price_per_gpu_hour = 0;  // USD; 0 = not priced
  double memory_gbps = 0;       // device memory bandwidth, GB/s (memory-bound work, the update)
  // The step-time model's constants (planner.h), per cluster: the defaults
  // for catalogue GPUs; `meshtrain plan --calibrate` measures them for this
  // machine, whose "GPU" is one rank with its threads.
  double fp32_tflops = 0;        // f32 GEMM peak (0: half the bf16 peak)
  double gemm_peak_fraction = 0.8;
  double gemm_half_dim = 192;
  double activation_traffic = 3;       // 16-bit runs (and every GPU plan)
  double activation_traffic_fp32 = 0;  // f32 runs; 0: activation_traffic
  double recompute_forward_fraction = 1;  // full recompute's cost in forwards (calibrated CPUs re-run less)
  double link_efficiency = 0.7;
  int threads_per_device = 0;    // calibrated CPUs: the threads each rank had (rates scale with them)
  // Calibrated CPUs: how much slower one rank's step runs while the other
  // ranks of the calibration run theirs (shared caches, memory bandwidth and
  // power); own-run predictions with several ranks divide the rates by it.
  double concurrent_slowdown = 1;
  std::string calibrated{};      // what measured it, when; empty for the catalogue

  nlohmann::json to_json() const;
  // A catalogue name (a100-40gb, a100-80gb, h100-sxm, h200, b200) or a JSON
  // file with these fields; throws naming the known names otherwise.
  static ClusterSpec load(const std::string& name_or_file);
};

std::vector<std::string> cluster_names();

}  // namespace meshtrain::plan
