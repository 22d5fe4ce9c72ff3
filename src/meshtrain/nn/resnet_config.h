// Shape of a ResNet image classifier (He et al. 2015, torchvision's layout):
// a stem (7x7/2 convolution, batch norm, ReLU, 3x3/2 max pool; or, for
// 28x28 and 32x32 inputs, a 3x3/1 convolution without the pool), stages of
// basic (two 3x3) or bottleneck (1x1, 3x3, 1x1, four times wider out)
// residual blocks, each stage after the first halving the size and doubling
// the width, global average pooling and a linear classifier. Named presets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

struct ResNetConfig {
  bool bottleneck = false;        // false: basic blocks
  std::vector<int> layers;        // blocks per stage
  int width = 64;                 // the first stage's channels (before expansion)
  int in_channels = 3;
  int image_size = 224;           // square inputs, H = W
  int num_classes = 1000;
  bool small_input = false;       // 3x3/1 stem without max pool
  float bn_eps = 1e-5f;
  float bn_momentum = 0.1f;       // running = (1 - m) running + m batch (PyTorch's)

  int expansion() const { return bottleneck ? 4 : 1; }
  int features() const;           // channels into the classifier
  int64_t num_params() const;     // trained parameters (not the running statistics)
  // Model FLOPs per image of a training step: 3 x (2 x the multiply-adds of
  // every convolution and the classifier), the GEMM-equivalent convention.
  double flops_per_image() const;
  void validate() const;
  std::string describe() const;  // "ResNet-18 (basic 2-2-2-2, 224x224x3, 1000 classes)"
};

// resnet-18, resnet-34, resnet-50 (ImageNet shapes), resnet-18-cifar
// (32x32x3, 10 classes), resnet-fashion (28x28x1, 10 classes; small enough
// to train on a CPU in minutes), resnet-tiny (tests).
ResNetConfig resnet_preset(const std::string& name);
std::vector<std::string> resnet_preset_names();

}  // namespace meshtrain
