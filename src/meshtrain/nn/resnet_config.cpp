#include "meshtrain/nn/resnet_config.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/resnet_plan.h"

namespace meshtrain {

int ResNetConfig::features() const {
  return width * (1 << (static_cast<int>(layers.size()) - 1)) * expansion();
}

int64_t ResNetConfig::num_params() const {
  int64_t n = 0;
  for (const ParamInfo& p : resnet_plan(*this).layout.params)
    if (p.trained) n += p.numel();
  return n;
}

double ResNetConfig::flops_per_image() const {
  const ResNetPlan plan = resnet_plan(*this);
  double macs = static_cast<double>(plan.features) * static_cast<double>(plan.classes);
  for (const ConvBN& c : plan.convs)
    macs += static_cast<double>(c.shape.weight_numel()) * static_cast<double>(c.shape.OH() * c.shape.OW());
  return 6.0 * macs;
}

void ResNetConfig::validate() const {
  MT_CHECK(!layers.empty() && layers.size() <= 6, "resnet: {} stages; expected 1 to 6", layers.size());
  for (int n : layers) MT_CHECK(n >= 1, "resnet: a stage of {} blocks", n);
  MT_CHECK(width >= 1 && in_channels >= 1 && num_classes >= 2, "resnet: width {}, {} input "
           "channels and {} classes must be positive (classes at least 2)", width, in_channels,
           num_classes);
  MT_CHECK(bn_eps > 0 && bn_momentum > 0 && bn_momentum <= 1, "resnet: batch norm eps {} and "
           "momentum {} (expected eps > 0, momentum in (0, 1])", bn_eps, bn_momentum);
  // Whether every stage keeps at least one pixel is resnet_plan's check.
  MT_CHECK(image_size >= 1, "resnet: image size {}", image_size);
}

std::string ResNetConfig::describe() const {
  int depth = 2;  // the stem and the classifier
  for (int n : layers) depth += n * (bottleneck ? 3 : 2);
  return fmt::format("ResNet-{} ({} {}, {}x{}x{}, {} classes{})", depth,
                     bottleneck ? "bottleneck" : "basic", fmt::join(layers, "-"), image_size,
                     image_size, in_channels, num_classes, small_input ? ", small-input stem" : "");
}

ResNetConfig resnet_preset(const std::string& name) {
  ResNetConfig c;
  if (name == "resnet-18") {
    c.layers = {2, 2, 2, 2};
  } else if (name == "resnet-34") {
    c.layers = {3, 4, 6, 3};
  } else if (name == "resnet-50") {
    c.bottleneck = true;
    c.layers = {3, 4, 6, 3};
  } else if (name == "resnet-18-cifar") {
    c.layers = {2, 2, 2, 2};
    c.image_size = 32;
    c.num_classes = 10;
    c.small_input = true;
  } else if (name == "resnet-fashion") {
    c.layers = {1, 1, 1};
    c.width = 16;
    c.in_channels = 1;
    c.image_size = 28;
    c.num_classes = 10;
    c.small_input = true;
  } else if (name == "resnet-tiny") {
    c.layers = {1, 1};
    c.width = 4;
    c.image_size = 8;
    c.num_classes = 5;
    c.small_input = true;
  } else {
    fail("unknown resnet preset '{}' (known: {})", name, fmt::join(resnet_preset_names(), ", "));
  }
  c.validate();
  return c;
}

std::vector<std::string> resnet_preset_names() {
  return {"resnet-18", "resnet-34", "resnet-50", "resnet-18-cifar", "resnet-fashion", "resnet-tiny"};
}

}  // namespace meshtrain
