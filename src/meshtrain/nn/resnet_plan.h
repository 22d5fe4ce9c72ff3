// A ResNet config unrolled into what the model computes per image: each
// convolution with its batch norm (and where its parameters and running
// statistics sit in the flat buffer), grouped into parameter units (the
// stem, one per residual block, the classifier), in torchvision's
// parameter order and names, so weights map one to one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/kernels/image_shapes.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/nn/resnet_config.h"

namespace meshtrain {

// One convolution (no bias) followed by batch norm; N = 1 in `shape` (the
// batch size is the micro-batch's).
struct ConvBN {
  std::string name;       // "layer1.0.conv1" (its batch norm: "layer1.0.bn1")
  Conv2dShape shape;
  int64_t weight = 0;     // flat-buffer offsets: conv weight (OC, C, KH, KW)
  int64_t gamma = 0, beta = 0, running_mean = 0, running_var = 0;  // (OC) each
};

struct ResBlock {
  std::vector<int> convs;  // indices into ResNetPlan::convs: the main path
  int shortcut = -1;       // the 1x1 downsampling ConvBN, or -1: identity
  int unit = 0;
};

struct ResNetPlan {
  std::vector<ConvBN> convs;  // convs[0] is the stem
  std::vector<ResBlock> blocks;
  Pool2dShape stem_pool;      // N = 1; KH = 0: none (small inputs)
  int64_t fc_weight = 0, fc_bias = 0;  // (classes, features), (classes)
  int64_t features = 0, classes = 0;
  int64_t pooled_hw = 0;      // the last stage's H x W (global-average-pooled)
  int head_unit = 0;
  ParamLayout layout;
};

// Throws (validate) for an impossible config.
ResNetPlan resnet_plan(const ResNetConfig& cfg);

}  // namespace meshtrain
