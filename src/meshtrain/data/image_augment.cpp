#include "meshtrain/data/image_augment.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::data {

namespace {

ViewWindow random_resized(int width, int height, const AugmentOptions& o, Rng& rng) {
  const double area = static_cast<double>(width) * height;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (o.scale_min + (1.0 - o.scale_min) * rng.uniform_double());
    const double log_ratio = std::log(3.0 / 4.0) + (std::log(4.0 / 3.0) - std::log(3.0 / 4.0)) * rng.uniform_double();
    const double ratio = std::exp(log_ratio);
    const double w = std::round(std::sqrt(target * ratio)), h = std::round(std::sqrt(target / ratio));
    if (w >= 1 && h >= 1 && w <= width && h <= height) {
      ViewWindow win;
      win.x0 = std::floor(rng.uniform_double() * (width - w + 1));
      win.y0 = std::floor(rng.uniform_double() * (height - h + 1));
      win.w = w, win.h = h;
      return win;
    }
  }
  const double s = std::min(width, height);  // the center square
  return {(width - s) / 2, (height - s) / 2, s, s};
}

ViewWindow evaluation_view(int width, int height, int size) {
  if (width == size && height == size) return {0, 0, double(size), double(size)};
  // Shorter side to size * 8 / 7, then the center size x size of that.
  const double scale = size * 8.0 / 7.0 / std::min(width, height);
  const double w = size / scale;
  return {(width - w) / 2, (height - w) / 2, w, w};
}

// Training's pad-crop samples zeros outside the image; every other view
// clamps to the nearest edge pixel (bilinear samples at a crop's border).
bool clamps(const AugmentOptions& o) { return !(o.train && o.crop == AugmentOptions::Crop::PadCrop); }

// Pixel (x, y) of channel c as the output's channel count wants it: 0
// outside the image (padding), or the nearest edge pixel when `clamp`.
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

// Bilinear at pixel centers (align_corners = false) of the window `win`, in
// `im`'s pixels, then normalized. Any view and channel mapping.
void render_generic(const DecodedImage& im, const ViewWindow& win, const AugmentOptions& o, float* out) {
  const int S = o.size;
  const bool clamp = clamps(o);
  const double sx = win.w / S, sy = win.h / S;
  for (int c = 0; c < o.channels; ++c) {
    const float mean = o.mean.empty() ? 0.5f : o.mean[static_cast<size_t>(c)];
    const float inv_std = 1.f / (o.std.empty() ? 0.5f : o.std[static_cast<size_t>(c)]);
    for (int y = 0; y < S; ++y) {
      const double fy = win.y0 + (y + 0.5) * sy - 0.5;
      const int y0 = static_cast<int>(std::floor(fy));
      const float ty = static_cast<float>(fy - y0);
      for (int x = 0; x < S; ++x) {
        const int xo = win.flip ? S - 1 - x : x;
        const double fx = win.x0 + (xo + 0.5) * sx - 0.5;
        const int x0 = static_cast<int>(std::floor(fx));
        const float tx = static_cast<float>(fx - x0);
        const float a = pixel(im, x0, y0, c, o.channels, clamp), b = pixel(im, x0 + 1, y0, c, o.channels, clamp);
        const float d = pixel(im, x0, y0 + 1, c, o.channels, clamp), e = pixel(im, x0 + 1, y0 + 1, c, o.channels, clamp);
        const float v = (a * (1 - tx) + b * tx) * (1 - ty) + (d * (1 - tx) + e * tx) * ty;
        out[(static_cast<size_t>(c) * S + y) * S + x] = (v / 255.f - mean) * inv_std;
      }
    }
  }
}

// The same view for clamped windows whose channels need no mixing (equal
// counts, or gray replicated), separably: each output row first blends its
// two source rows over the window's columns (a contiguous, vectorizable pass),
// then takes the two column taps of every output pixel from that blend with
// weights computed once per image. Equal to render_generic up to the order
// of the float operations.
void render_clamped(const DecodedImage& im, const ViewWindow& win, const AugmentOptions& o, float* out) {
  const int S = o.size, C = im.channels;
  const double sx = win.w / S, sy = win.h / S;
  std::vector<int> left(static_cast<size_t>(S)), right(static_cast<size_t>(S));
  std::vector<float> tx(static_cast<size_t>(S));
  int lo = im.width, hi = 0;  // the columns any tap reads
  for (int x = 0; x < S; ++x) {
    const int xo = win.flip ? S - 1 - x : x;
    const double fx = win.x0 + (xo + 0.5) * sx - 0.5;
    const int x0 = static_cast<int>(std::floor(fx));
    tx[x] = static_cast<float>(fx - x0);
    left[x] = std::clamp(x0, 0, im.width - 1);
    right[x] = std::clamp(x0 + 1, 0, im.width - 1);
    lo = std::min(lo, left[x]);
    hi = std::max(hi, right[x]);
  }
  for (int x = 0; x < S; ++x) left[x] = (left[x] - lo) * C, right[x] = (right[x] - lo) * C;
  std::vector<float> scale(static_cast<size_t>(o.channels)), bias(scale.size());
  for (int c = 0; c < o.channels; ++c) {  // (v / 255 - mean) / std as one multiply-add
    const float inv_std = 1.f / (o.std.empty() ? 0.5f : o.std[static_cast<size_t>(c)]);
    scale[c] = inv_std / 255.f;
    bias[c] = -(o.mean.empty() ? 0.5f : o.mean[static_cast<size_t>(c)]) * inv_std;
  }
  const size_t row_bytes = static_cast<size_t>(im.width) * C, span = static_cast<size_t>(hi - lo + 1) * C;
  std::vector<float> blend(span);
  for (int y = 0; y < S; ++y) {
    const double fy = win.y0 + (y + 0.5) * sy - 0.5;
    const int y0 = static_cast<int>(std::floor(fy));
    const float ty = static_cast<float>(fy - y0), uy = 1.f - ty;
    const uint8_t* top = im.pixels.data() + row_bytes * std::clamp(y0, 0, im.height - 1) + size_t(lo) * C;
    const uint8_t* bottom = im.pixels.data() + row_bytes * std::clamp(y0 + 1, 0, im.height - 1) + size_t(lo) * C;
    for (size_t k = 0; k < span; ++k) blend[k] = top[k] * uy + bottom[k] * ty;
    for (int c = 0; c < o.channels; ++c) {
      const float* src = blend.data() + (C == 1 ? 0 : c);
      float* dst = out + (static_cast<size_t>(c) * S + y) * S;
      for (int x = 0; x < S; ++x)
        dst[x] = (src[left[x]] * (1 - tx[x]) + src[right[x]] * tx[x]) * scale[c] + bias[c];
    }
  }
}

// The largest JPEG scale (1/1, 1/2, 1/4, 1/8) that keeps the window at least
// `size` pixels on both sides.
int scale_denominator(const ViewWindow& win, int size) {
  int d = 1;
  while (d < 8 && std::min(win.w, win.h) / (2 * d) >= size) d *= 2;
  return d;
}

}  // namespace

void render_view(const DecodedImage& im, const ViewWindow& win, const AugmentOptions& o, float* out) {
  MT_CHECK(o.channels == 1 || o.channels == 3, "images have 1 or 3 channels, not {}", o.channels);
  MT_CHECK(im.width >= 1 && im.height >= 1, "an empty image");
  if (clamps(o) && (im.channels == o.channels || im.channels == 1))
    render_clamped(im, win, o, out);
  else
    render_generic(im, win, o, out);
}

ViewWindow plan_view(int width, int height, const AugmentOptions& o, uint64_t seed) {
  MT_CHECK(width >= 1 && height >= 1, "an empty image");
  Rng rng(seed);
  ViewWindow win;
  if (!o.train) {
    win = evaluation_view(width, height, o.size);
  } else if (o.crop == AugmentOptions::Crop::PadCrop) {
    // The image scaled to size x size first when it is not (rare for these recipes).
    const double sx = double(width) / o.size, sy = double(height) / o.size;
    win.x0 = (static_cast<double>(rng.below(2 * o.pad + 1)) - o.pad) * sx;
    win.y0 = (static_cast<double>(rng.below(2 * o.pad + 1)) - o.pad) * sy;
    win.w = width, win.h = height;
  } else {
    win = random_resized(width, height, o, rng);
  }
  if (o.train && o.flip) win.flip = rng.below(2) == 1;
  return win;
}

void augment_image(const DecodedImage& im, const AugmentOptions& o, uint64_t seed, float* out) {
  render_view(im, plan_view(im.width, im.height, o, seed), o, out);
}

void augment_encoded_image(std::span<const uint8_t> bytes, const std::string& name,
                           const AugmentOptions& o, uint64_t seed, float* out) {
  const ColorMode mode = o.channels == 1 ? ColorMode::KeepGray : ColorMode::Rgb;
  if (sniff_image_format(bytes) != ImageFormat::Jpeg || !clamps(o)) {
    augment_image(decode_image(bytes, name, mode), o, seed, out);
    return;
  }
  const ImageSize size = read_image_size(bytes, name);
  const ViewWindow win = plan_view(size.width, size.height, o, seed);
  DecodeRegion region;
  region.scale_denom = scale_denominator(win, o.size);
  const int margin = 2 * region.scale_denom;  // two pixels of the scaled image: the bilinear taps
  region.x = static_cast<int>(std::floor(win.x0)) - margin;
  region.y = static_cast<int>(std::floor(win.y0)) - margin;
  region.width = static_cast<int>(std::ceil(win.w)) + 2 * margin;
  region.height = static_cast<int>(std::ceil(win.h)) + 2 * margin;
  const DecodedRegion part = decode_image_region(bytes, name, mode, region);
  // The window in the part's pixels: scaled as libjpeg scaled the image, less the part's origin.
  const double fx = double(part.scaled_width) / size.width, fy = double(part.scaled_height) / size.height;
  ViewWindow local = win;
  local.x0 = win.x0 * fx - part.origin_x;
  local.y0 = win.y0 * fy - part.origin_y;
  local.w = win.w * fx;
  local.h = win.h * fy;
  render_view(part.image, local, o, out);
}

}  // namespace meshtrain::data
