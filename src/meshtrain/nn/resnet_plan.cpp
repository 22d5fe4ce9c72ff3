#include "meshtrain/nn/resnet_plan.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

// Appends parameters to the layout in torchvision's order.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(ParamLayout& l) : l_(l) {}
  int64_t add(const std::string& name, Shape shape, int unit, bool decay, bool half, bool trained = true) {
    ParamInfo p{name, std::move(shape), at_, unit, decay, half};
    p.trained = trained;
    at_ = p.end();
    l_.params.push_back(p);
    return p.begin;
  }
  void close_unit(const std::string& name) {
    l_.units.push_back({name, unit_begin_, at_});
    unit_begin_ = at_;
  }
  int64_t at() const { return at_; }

 private:
  ParamLayout& l_;
  int64_t at_ = 0, unit_begin_ = 0;
};

// A convolution and its batch norm on a C x H x W input.
ConvBN conv_bn(LayoutBuilder& b, const std::string& conv, const std::string& bn, int unit,
               int64_t C, int64_t HW, int64_t OC, int64_t K, int64_t stride) {
  ConvBN c;
  c.name = conv;
  c.shape = Conv2dShape{1, C, HW, HW, OC, K, K, stride, stride, K / 2, K / 2};
  c.weight = b.add(conv + ".weight", {OC, C, K, K}, unit, true, true);
  c.gamma = b.add(bn + ".weight", {OC}, unit, false, false);
  c.beta = b.add(bn + ".bias", {OC}, unit, false, false);
  c.running_mean = b.add(bn + ".running_mean", {OC}, unit, false, false, false);
  c.running_var = b.add(bn + ".running_var", {OC}, unit, false, false, false);
  return c;
}

}  // namespace

ResNetPlan resnet_plan(const ResNetConfig& cfg) {
  cfg.validate();
  ResNetPlan p;
  LayoutBuilder b(p.layout);
  // Stem.
  const int64_t stem_k = cfg.small_input ? 3 : 7, stem_s = cfg.small_input ? 1 : 2;
  p.convs.push_back(conv_bn(b, "conv1", "bn1", 0, cfg.in_channels, cfg.image_size, cfg.width,
                            stem_k, stem_s));
  int64_t hw = p.convs[0].shape.OH(), ch = cfg.width;
  if (!cfg.small_input) {
    p.stem_pool = Pool2dShape{1, ch, hw, hw, 3, 3, 2, 2, 1, 1};
    hw = p.stem_pool.OH();
  } else {
    p.stem_pool.KH = 0;
  }
  b.close_unit("stem");
  // Residual stages.
  int unit = 1;
  for (size_t s = 0; s < cfg.layers.size(); ++s) {
    const int64_t planes = static_cast<int64_t>(cfg.width) << s, out = planes * cfg.expansion();
    for (int k = 0; k < cfg.layers[s]; ++k, ++unit) {
      const int64_t stride = (s > 0 && k == 0) ? 2 : 1;
      const std::string pre = fmt::format("layer{}.{}.", s + 1, k);
      ResBlock blk;
      blk.unit = unit;
      auto add = [&](int i, int64_t C, int64_t HW, int64_t OC, int64_t K, int64_t st) {
        blk.convs.push_back(static_cast<int>(p.convs.size()));
        p.convs.push_back(conv_bn(b, fmt::format("{}conv{}", pre, i), fmt::format("{}bn{}", pre, i),
                                  unit, C, HW, OC, K, st));
      };
      if (cfg.bottleneck) {  // torchvision's v1.5: the stride on the 3x3
        add(1, ch, hw, planes, 1, 1);
        add(2, planes, hw, planes, 3, stride);
        add(3, planes, p.convs.back().shape.OH(), out, 1, 1);
      } else {
        add(1, ch, hw, planes, 3, stride);
        add(2, planes, p.convs.back().shape.OH(), planes, 3, 1);
      }
      if (stride != 1 || ch != out) {
        blk.shortcut = static_cast<int>(p.convs.size());
        p.convs.push_back(conv_bn(b, pre + "downsample.0", pre + "downsample.1", unit, ch, hw, out, 1,
                                  stride));
      }
      hw = p.convs[blk.convs.back()].shape.OH();
      MT_CHECK(hw >= 1, "resnet: {}x{} images are too small for {} stages", cfg.image_size,
               cfg.image_size, cfg.layers.size());
      ch = out;
      p.blocks.push_back(blk);
      b.close_unit(fmt::format("layer{}.{}", s + 1, k));
    }
  }
  // Classifier.
  p.features = ch;
  p.classes = cfg.num_classes;
  p.pooled_hw = hw * hw;
  p.head_unit = unit;
  // The classifier stays f32 under mixed precision (a fraction of a percent
  // of the FLOPs): only the convolutions' weights have a 16-bit copy.
  p.fc_weight = b.add("fc.weight", {p.classes, ch}, unit, true, false);
  p.fc_bias = b.add("fc.bias", {p.classes}, unit, false, false);
  b.close_unit("classifier");
  p.layout.numel = b.at();
  const int units = p.head_unit + 1;
  for (int u = 0; u < units; ++u) p.layout.order.push_back({true, u, false}), p.layout.order.push_back({false, u, false});
  for (int u = units - 1; u >= 0; --u) p.layout.order.push_back({true, u, true}), p.layout.order.push_back({false, u, true});
  p.layout.validate();
  return p;
}

}  // namespace meshtrain
