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
#include <span>
#include <string>
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

// The source window of a view in the full-size image's pixels (PadCrop's
// reaches past the image: the padding) and its mirroring, from the image's
// size and the seed alone.
struct ViewWindow {
  double x0 = 0, y0 = 0, w = 1, h = 1;
  bool flip = false;
};
ViewWindow plan_view(int width, int height, const AugmentOptions& options, uint64_t seed);

// The window `win` (in `image`'s pixels) of `image` as the view: bilinear at
// pixel centers, edge pixels clamped (zeros outside for training's
// pad-crop), normalized; out: channels x size x size floats.
void render_view(const DecodedImage& image, const ViewWindow& win, const AugmentOptions& options, float* out);

// plan_view then render_view on the whole decoded image.
void augment_image(const DecodedImage& image, const AugmentOptions& options, uint64_t seed, float* out);

// The same view from the encoded bytes, decoding no more of a JPEG than it
// reads: the window's rows and columns only, and at 1/2, 1/4 or 1/8 of the
// size (libjpeg-turbo's scaled IDCT) when the window stays at least `size`
// pixels on both sides so shrunk, i.e. when bilinear sampling would skip
// pixels anyway (the scaled IDCT averages them instead: less aliasing, a view
// that differs from augment_image's by that filtering). At full scale the
// view equals augment_image's on the decoded image. PNG decodes whole.
void augment_encoded_image(std::span<const uint8_t> bytes, const std::string& name,
                           const AugmentOptions& options, uint64_t seed, float* out);

}  // namespace meshtrain::data
