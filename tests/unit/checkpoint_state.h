// A training checkpoint's flat f32 state, read back whole for element-wise
// comparisons: the parameters and AdamW's moments, each concatenated from
// its shard files in the order index.json gives, and the index's tensor
// table (name -> range in the flat buffer).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meshtrain/io/safetensors.h"

namespace ckpt_state {

struct TensorRange {
  int64_t begin = 0, end = 0;
};

struct FlatState {
  std::map<std::string, std::vector<float>> buffers;  // params, exp_avg, exp_avg_sq
  std::vector<std::pair<std::string, TensorRange>> tensors;  // in buffer order
};

inline FlatState read_flat_state(const std::filesystem::path& step_dir) {
  std::ifstream in(step_dir / "index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  FlatState s;
  for (const auto& b : index["buffers"])
    s.buffers[b["name"].get<std::string>()].resize(b["numel"].get<size_t>());
  for (const auto& f : index["files"]) {
    const auto file = meshtrain::SafetensorsFile::open((step_dir / f["path"].get<std::string>()).string());
    for (const auto& [name, range] : f["ranges"].items()) {
      const meshtrain::Tensor t = file.read(name);
      const int64_t b = range[0].get<int64_t>(), e = range[1].get<int64_t>();
      std::memcpy(s.buffers.at(name).data() + b, t.data<float>(), sizeof(float) * (e - b));
    }
  }
  for (const auto& t : index["tensors"])
    if (t["buffer"] == "params")
      s.tensors.push_back({t["name"].get<std::string>(), {t["range"][0].get<int64_t>(),
                                                           t["range"][1].get<int64_t>()}});
  return s;
}

// Largest |x - y| over a tensor's range, relative to the largest |y| there.
inline double relative_to_largest(const std::vector<float>& x, const std::vector<float>& y,
                                  TensorRange r) {
  double d = 0, top = 0;
  for (int64_t i = r.begin; i < r.end; ++i) {
    d = std::max(d, std::abs(static_cast<double>(x[i]) - y[i]));
    top = std::max(top, std::abs(static_cast<double>(y[i])));
  }
  return top > 0 ? d / top : d;
}

}  // namespace ckpt_state
