#include "meshtrain/plan/cluster.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

namespace {

// Dense bf16 peaks and link rates from the vendors' data sheets: NVLink's
// per-direction share per GPU, the network as one 200 Gb/s (A100 HDR) or
// 400 Gb/s (H100/H200/B200 NDR) adapter per GPU. Prices are typical cloud
// on-demand rates, for the cost column only. HBM bandwidths: A100 40 GB
// 1555 GB/s, 80 GB 2039, H100 SXM 3350, H200 4800, B200 8000.
const ClusterSpec kCatalogue[] = {
    {"a100-40gb", 40, 0.9, 312, 8, 300, 25, 3, 10, 2.0, 1555},
    {"a100-80gb", 80, 0.9, 312, 8, 300, 25, 3, 10, 2.5, 2039},
    {"h100-sxm", 80, 0.9, 989, 8, 450, 50, 3, 10, 4.0, 3350},
    {"h200", 141, 0.9, 989, 8, 450, 50, 3, 10, 5.0, 4800},
    {"b200", 180, 0.9, 2250, 8, 900, 50, 3, 10, 7.0, 8000},
};

}  // namespace

std::vector<std::string> cluster_names() {
  std::vector<std::string> out;
  for (const ClusterSpec& c : kCatalogue) out.push_back(c.name);
  return out;
}

nlohmann::json ClusterSpec::to_json() const {
  return {{"name", name},
          {"memory_gb", memory_gb},
          {"usable_fraction", usable_fraction},
          {"bf16_tflops", bf16_tflops},
          {"gpus_per_node", gpus_per_node},
          {"intra_gbps", intra_gbps},
          {"inter_gbps", inter_gbps},
          {"intra_alpha_us", intra_alpha_us},
          {"inter_alpha_us", inter_alpha_us},
          {"price_per_gpu_hour", price_per_gpu_hour},
          {"memory_gbps", memory_gbps},
          {"fp32_tflops", fp32_tflops},
          {"gemm_peak_fraction", gemm_peak_fraction},
          {"gemm_half_dim", gemm_half_dim},
          {"activation_traffic", activation_traffic},
          {"activation_traffic_fp32", activation_traffic_fp32},
          {"recompute_forward_fraction", recompute_forward_fraction},
          {"link_efficiency", link_efficiency},
          {"threads_per_device", threads_per_device},
          {"concurrent_slowdown", concurrent_slowdown},
          {"calibrated", calibrated}};
}

ClusterSpec ClusterSpec::load(const std::string& name_or_file) {
  for (const ClusterSpec& c : kCatalogue)
    if (c.name == name_or_file) return c;
  if (!std::filesystem::is_regular_file(name_or_file))
    fail("unknown cluster '{}' (known: {}; or a JSON file with the fields of `meshtrain plan "
         "--show-cluster h100-sxm`)", name_or_file, fmt::join(cluster_names(), ", "));
  std::ifstream in(name_or_file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    ClusterSpec c;
    c.name = j.value("name", name_or_file);
    c.memory_gb = j.at("memory_gb").get<double>();
    c.usable_fraction = j.value("usable_fraction", c.usable_fraction);
    c.bf16_tflops = j.at("bf16_tflops").get<double>();
    c.gpus_per_node = j.value("gpus_per_node", c.gpus_per_node);
    c.intra_gbps = j.at("intra_gbps").get<double>();
    c.inter_gbps = j.at("inter_gbps").get<double>();
    c.intra_alpha_us = j.value("intra_alpha_us", c.intra_alpha_us);
    c.inter_alpha_us = j.value("inter_alpha_us", c.inter_alpha_us);
    c.price_per_gpu_hour = j.value("price_per_gpu_hour", 0.0);
    c.memory_gbps = j.at("memory_gbps").get<double>();
    c.fp32_tflops = j.value("fp32_tflops", c.fp32_tflops);
    c.gemm_peak_fraction = j.value("gemm_peak_fraction", c.gemm_peak_fraction);
    c.gemm_half_dim = j.value("gemm_half_dim", c.gemm_half_dim);
    c.activation_traffic = j.value("activation_traffic", c.activation_traffic);
    c.activation_traffic_fp32 = j.value("activation_traffic_fp32", c.activation_traffic_fp32);
    c.recompute_forward_fraction = j.value("recompute_forward_fraction", c.recompute_forward_fraction);
    c.link_efficiency = j.value("link_efficiency", c.link_efficiency);
    c.threads_per_device = j.value("threads_per_device", c.threads_per_device);
    c.concurrent_slowdown = j.value("concurrent_slowdown", c.concurrent_slowdown);
    c.calibrated = j.value("calibrated", std::string());
    MT_CHECK(c.gemm_peak_fraction > 0 && c.gemm_peak_fraction <= 1 && c.gemm_half_dim >= 0 &&
                 c.activation_traffic >= 0 && c.activation_traffic_fp32 >= 0 &&
                 c.recompute_forward_fraction >= 0 && c.link_efficiency > 0 && c.link_efficiency <= 1 &&
                 c.fp32_tflops >= 0 && c.threads_per_device >= 0 && c.concurrent_slowdown >= 1,
             "cluster file {}: gemm_peak_fraction and link_efficiency must be in (0, 1], "
             "gemm_half_dim, activation_traffic(_fp32), recompute_forward_fraction, fp32_tflops and "
             "threads_per_device >= 0, concurrent_slowdown >= 1", name_or_file);
    MT_CHECK(c.memory_gb > 0 && c.bf16_tflops > 0 && c.intra_gbps > 0 && c.inter_gbps > 0 &&
                 c.memory_gbps > 0 &&
                 c.gpus_per_node >= 1 && c.usable_fraction > 0 && c.usable_fraction <= 1,
             "cluster file {}: memory_gb, memory_gbps, bf16_tflops, intra_gbps, inter_gbps must be > 0, "
             "gpus_per_node >= 1, usable_fraction in (0, 1]", name_or_file);
    return c;
  } catch (const nlohmann::json::exception& e) {
    fail("cluster file {}: {}", name_or_file, e.what());
  }
}

}  // namespace meshtrain::plan
