#include "meshtrain/nn/resnet_spec.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/initial_weights.h"
#include "meshtrain/nn/resnet.h"
#include "meshtrain/nn/resnet_activations.h"

namespace meshtrain {

ResNetSpec::ResNetSpec(const ResNetConfig& cfg)
    : cfg_(cfg), plan_(resnet_plan(cfg)), flops_per_image_(cfg.flops_per_image()) {}

std::shared_ptr<const ResNetSpec> ResNetSpec::make(const ResNetConfig& cfg) {
  return std::make_shared<ResNetSpec>(cfg);
}

nlohmann::json ResNetSpec::to_json() const {
  return {{"family", kFamily},           {"block", cfg_.bottleneck ? "bottleneck" : "basic"},
          {"layers", cfg_.layers},       {"width", cfg_.width},
          {"in_channels", cfg_.in_channels}, {"image_size", cfg_.image_size},
          {"num_classes", cfg_.num_classes}, {"small_input", cfg_.small_input},
          {"bn_eps", cfg_.bn_eps},       {"bn_momentum", cfg_.bn_momentum}};
}

ResNetConfig ResNetSpec::config_from_json(const nlohmann::json& j, const std::string& where) {
  ResNetConfig c;
  try {
    const std::string block = j.value("block", std::string("basic"));
    MT_CHECK(block == "basic" || block == "bottleneck", "block \"{}\": expected basic or bottleneck",
             block);
    c.bottleneck = block == "bottleneck";
    c.layers = j.at("layers").get<std::vector<int>>();
    c.width = j.value("width", c.width);
    c.in_channels = j.value("in_channels", c.in_channels);
    c.image_size = j.value("image_size", c.image_size);
    c.num_classes = j.value("num_classes", c.num_classes);
    c.small_input = j.value("small_input", c.small_input);
    c.bn_eps = j.value("bn_eps", c.bn_eps);
    c.bn_momentum = j.value("bn_momentum", c.bn_momentum);
    c.validate();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the resnet description is malformed: {}", where, e.what());
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  return c;
}

std::string ResNetSpec::describe() const {
  int64_t trained = 0;
  for (const ParamInfo& p : plan_.layout.params) trained += p.trained ? p.numel() : 0;
  return fmt::format("{}: {:.2f}M parameters", cfg_.describe(), trained / 1e6);
}

ModelMemory ResNetSpec::memory(int B, int, int, const Recompute& recompute, Precision precision) const {
  const ResNetActivations a = ResNetActivations::make(plan_, B, recompute);
  ModelMemory m;
  m.activations = 4 * a.floats;
  m.workspace = 4 * a.workspace_floats(is_mixed(precision));
  return m;
}

std::unique_ptr<Model> ResNetSpec::build(ModelBuffers buffers) const {
  return std::make_unique<ResNet>(shared_from_this(), std::move(buffers));
}

bool ResNetSpec::initial_weights(uint64_t seed, ElemSpan range, float* buffer) const {
  using K = InitRule::Kind;
  std::vector<InitRule> rules;
  for (const ParamInfo& p : plan_.layout.params) {
    const std::string& n = p.name;
    auto ends = [&](const char* s) { return n.size() >= std::strlen(s) && n.compare(n.size() - std::strlen(s), std::string::npos, s) == 0; };
    if (p.shape.size() == 4) {  // a convolution: He, fan-out
      rules.push_back({K::Normal, static_cast<float>(std::sqrt(2.0 / static_cast<double>(p.shape[0] * p.shape[2] * p.shape[3])))});
    } else if (n == "fc.weight") {  // the variance of torchvision's uniform(+-1/sqrt(fan_in))
      rules.push_back({K::Normal, static_cast<float>(1.0 / std::sqrt(3.0 * static_cast<double>(p.shape[1])))});
    } else if (ends(".running_var") || (ends(".weight") && p.shape.size() == 1)) {
      rules.push_back({K::Constant, 1.f});  // batch norm's scale and running variance
    } else {
      rules.push_back({K::Zero, 0.f});  // shifts, running means, the classifier's bias
    }
  }
  fill_initial_weights(plan_.layout, plan_.layout, 0, rules, seed, range, buffer);
  return true;
}

}  // namespace meshtrain
