#include "meshtrain/data/image_augment.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::data {

namespace {

// The source window [x0, x0 + w) x [y0, y0 + h) in image pixels (may extend
// past the image: PadCrop's zero padding) that becomes the output.
struct Window {
  double x0 = 0, y0 = 0, w = 1, h = 1;
  bool flip = false;
};

Window random_resized(const DecodedImage& im, const AugmentOptions& o, Rng& rng) {
  const double area = static_cast<double>(im.width) * im.height;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (o.scale_min + (1.0 - o.scale_min) * rng.uniform_double());
    const double log_ratio = std::log(3.0 / 4.0) + (std::log(4.0 / 3.0) - std::log(3.0 / 4.0)) * rng.uniform_double();
    const double ratio = std::exp(log_ratio);
    const double w = std::round(std::sqrt(target * ratio)), h = std::round(std::sqrt(target / ratio));
    if (w >= 1 && h >= 1 && w <= im.width && h <= im.height) {
      Window win;
      win.x0 = std::floor(rng.uniform_double() * (im.width - w + 1));
      win.y0 = std::floor(rng.uniform_double() * (im.height - h + 1));
      win.w = w, win.h = h;
      return win;
    }
  }
  const double s = std::min(im.width, im.height);  // the center square
  return {(im.width - s) / 2, (im.height - s) / 2, s, s};
}

Window evaluation_view(const DecodedImage& im, int size) {
  if (im.width == size && im.height == size) return {0, 0, double(size), double(size)};
  // Shorter side to size * 8 / 7, then the center size x size of that.
  const double scale = size * 8.0 / 7.0 / std::min(im.width, im.height);
  const double w = size / scale;
  return {(im.width - w) / 2, (im.height - w) / 2, w, w};
}

// Pixel (x, y) of channel c as the output's channel count wants it: 0
// outside the image (padding), or the nearest edge pixel when `clamp`
// (bilinear samples at the border of a crop).
float pixel(const DecodedImage& im, int x, int y, int c, int channels, bool clamp) {
  if (clamp) {
    x = std::clamp(x, 0, im.width - 1);
    y = std::clamp(y, 0, im.height - 1);
  } else if (x < 0 || y < 0 || x >= im.width || y >= im.height) {
    return 0.f;
  }
  const uint8_t* p = &im.pixels[(static_cast<size_t>(y) * im.width + x) * im.channels];
  if (channels == im.channels) return p[c];
  if (channels == 3) return p[0];  // gray replicated
  return 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];  // luma
}

}  // namespace

void augment_image(const DecodedImage& im, const AugmentOptions& o, uint64_t seed, float* out) {
  MT_CHECK(o.channels == 1 || o.channels == 3, "images have 1 or 3 channels, not {}", o.channels);
  MT_CHECK(im.width >= 1 && im.height >= 1, "an empty image");
  Rng rng(seed);
  Window win;
  if (!o.train) {
    win = evaluation_view(im, o.size);
  } else if (o.crop == AugmentOptions::Crop::PadCrop) {
    // The image scaled to size x size first when it is not (rare for these recipes).
    const double sx = double(im.width) / o.size, sy = double(im.height) / o.size;
    win.x0 = (static_cast<double>(rng.below(2 * o.pad + 1)) - o.pad) * sx;
    win.y0 = (static_cast<double>(rng.below(2 * o.pad + 1)) - o.pad) * sy;
    win.w = im.width, win.h = im.height;
  } else {
    win = random_resized(im, o, rng);
  }
  if (o.train && o.flip) win.flip = rng.below(2) == 1;
  const int S = o.size;
  const bool clamp = !(o.train && o.crop == AugmentOptions::Crop::PadCrop);
  const double sx = win.w / S, sy = win.h / S;
  for (int c = 0; c < o.channels; ++c) {
    const float mean = o.mean.empty() ? 0.5f : o.mean[static_cast<size_t>(c)];
    const float inv_std = 1.f / (o.std.empty() ? 0.5f : o.std[static_cast<size_t>(c)]);
    for (int y = 0; y < S; ++y) {
      // Bilinear at pixel centers (align_corners = false).
      const double fy = win.y0 + (y + 0.5) * sy - 0.5;
      const int y0 = static_cast<int>(std::floor(fy));
      const float ty = static_cast<float>(fy - y0);
      for (int x = 0; x < S; ++x) {
        const int xo = win.flip ? S - 1 - x : x;
        const double fx = win.x0 + (xo + 0.5) * sx - 0.5;
        const int x0 = static_cast<int>(std::floor(fx));
        const float tx = static_cast<float>(fx - x0);
        float v;
        if (tx == 0.f && ty == 0.f) {
          v = pixel(im, x0, y0, c, o.channels, clamp);
        } else {
          const float a = pixel(im, x0, y0, c, o.channels, clamp), b = pixel(im, x0 + 1, y0, c, o.channels, clamp);
          const float d = pixel(im, x0, y0 + 1, c, o.channels, clamp), e = pixel(im, x0 + 1, y0 + 1, c, o.channels, clamp);
          v = (a * (1 - tx) + b * tx) * (1 - ty) + (d * (1 - tx) + e * tx) * ty;
        }
        out[(static_cast<size_t>(c) * S + y) * S + x] = (v / 255.f - mean) * inv_std;
      }
    }
  }
}

}  // namespace meshtrain::data
