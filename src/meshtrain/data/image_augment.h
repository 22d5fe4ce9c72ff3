// Decoded images (HWC bytes) into a model's input (CHW f32, size x size,
// normalized), with the training augmentations ImageNet-style recipes use:
//   RandomResizedCrop  a random area fraction in [scale_min, 1] and aspect
//                      ratio in [3/4, 4/3] of the image (10 tries, else the
//                      center crop), bilinear to size x size; then a flip
//   PadCrop            zero padding of `pad` pixels, a random size x size
//                      window (CIFAR/Fashion-MNIST recipes); then a flip
// and for evaluation the deterministic view: the image itself when it is
// size x size, else its shorter side scaled to size * 8 / 7 and the center
// size x size (ImageNet's 256/224). The random choices come from `seed` alone
// (the run's seed, the epoch and the sample's index mixed by the caller), so
// a sample's view is the same on any rank count and after any resume.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/data/image_decode.h"

namespace meshtrain::data {

struct AugmentOptions {
  enum class Crop { RandomResized, PadCrop };
  int size = 224;       // output H = W
  int channels = 3;     // 1: RGB images become luma; 3: gray images are replicated
  bool train = true;    // false: the evaluation view, no randomness
  Crop crop = Crop::RandomResized;
  float scale_min = 0.08f;
  int pad = 4;
  bool flip = true;
  std::vector<float> mean, std;  // per channel, of pixel / 255; empty: 0.5 and 0.5
  // PadCrop for small images (at most 64 pixels), RandomResized otherwise.
  static Crop crop_for(int size) { return size <= 64 ? Crop::PadCrop : Crop::RandomResized; }
};

// out: channels x size x size floats.
void augment_image(const DecodedImage& image, const AugmentOptions& options, uint64_t seed, float* out);

}  // namespace meshtrain::data
