// test-links: mt_data mt_core
// The image batch source (data/image_source.h) and its augmentation
// (data/image_augment.h) on shards written here: the evaluation view of a
// size x size image is its normalized pixels exactly; training views are a
// function of the seed alone (the same bytes again, a different seed moves
// them) and stay within the padded image; one rank with batch 2b sees the
// images and labels two ranks with b see together; a seek returns exactly
// the batch the sequence would have; evaluation repeats its order; a label
// beyond the model's classes and a pattern matching nothing are named.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <filesystem>
#include <numeric>

#include "meshtrain/core/error.h"
#include "meshtrain/data/image_augment.h"
#include "meshtrain/data/image_source.h"
#include "test_paths.h"

using namespace meshtrain;
using namespace meshtrain::data;

namespace {

constexpr int kSize = 8, kImages = 24, kClasses = 3;

// Image i: pixel (x, y) = (7 i + 3 x + 5 y) mod 256, one channel.
std::vector<uint8_t> pixels_of(int i) {
  std::vector<uint8_t> p(kSize * kSize);
  for (int y = 0; y < kSize; ++y)
    for (int x = 0; x < kSize; ++x) p[y * kSize + x] = static_cast<uint8_t>((7 * i + 3 * x + 5 * y) % 256);
  return p;
}

std::string write_shards(const std::string& dir, int label_offset = 0) {
  std::filesystem::create_directories(dir);
  ImageShardWriter w(dir, "train", 10);
  for (int i = 0; i < kImages; ++i) {
    const std::vector<uint8_t> png = encode_png(pixels_of(i), kSize, kSize, 1);
    w.add("png", png, i % kClasses + label_offset);
  }
  w.finish();
  return dir + "/train-*.tar";
}

LoaderOptions options(const std::string& pattern, int64_t batch, int rank, int ranks) {
  LoaderOptions o;
  o.pattern = pattern;
  o.batch = batch;
  o.rank = rank;
  o.world_size = ranks;
  o.sample_shape = {1, kSize, kSize};
  o.classes = kClasses;
  o.prefetch = 1;
  return o;
}

std::string temp_dir(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("mt-image-source-") + name + "-" +
                                                    std::to_string(getpid())))
      .string();
}

}  // namespace

TEST(image_source, evaluation_view_is_the_normalized_image) {
  DecodedImage im{kSize, kSize, 1, ImageFormat::Png, pixels_of(5)};
  AugmentOptions a;
  a.size = kSize;
  a.channels = 1;
  a.train = false;
  a.mean = {0.25f};
  a.std = {0.5f};
  std::vector<float> out(kSize * kSize);
  augment_image(im, a, 1, out.data());
  // The renderer folds (v / 255 - mean) / std into one multiply-add: near a
  // pixel of 64 (value ~0) the subtraction cancels, so equal up to an ulp of
  // the terms (~6e-8), not of the result; 1e-6 is that with a 16x margin.
  for (int j = 0; j < kSize * kSize; ++j) EXPECT_NEAR(out[j], (im.pixels[j] / 255.f - 0.25f) / 0.5f, 1e-6f) << j;
}

TEST(image_source, training_views_follow_the_seed) {
  DecodedImage im{kSize, kSize, 1, ImageFormat::Png, pixels_of(9)};
  AugmentOptions a;
  a.size = kSize;
  a.channels = 1;
  a.crop = AugmentOptions::Crop::PadCrop;
  std::vector<float> x(kSize * kSize), y(kSize * kSize), z(kSize * kSize);
  augment_image(im, a, 42, x.data());
  augment_image(im, a, 42, y.data());
  EXPECT_EQ(x, y);
  bool differs = false;
  for (uint64_t seed = 1; seed < 20 && !differs; ++seed) {
    augment_image(im, a, seed, z.data());
    differs = z != x;
  }
  EXPECT_TRUE(differs);
  // Every value is a pixel of the image or the padding (0 -> -1 normalized).
  for (float v : x) {
    const float p = v * 0.5f + 0.5f;
    EXPECT_GE(p, -1e-6f);
    EXPECT_LE(p, 1.f + 1e-6f);
  }
  // RGB images for a 1-channel model become luma; random-resized crops work too.
  DecodedImage rgb{kSize, kSize, 3, ImageFormat::Png, std::vector<uint8_t>(kSize * kSize * 3, 100)};
  a.crop = AugmentOptions::Crop::RandomResized;
  augment_image(rgb, a, 3, x.data());
  for (float v : x) EXPECT_NEAR(v, (100.f / 255.f - 0.5f) / 0.5f, 1e-5f);
}

namespace {

// The view as first written, one pixel at a time: bilinear at pixel centers
// (align_corners = false) of the planned window, edge pixels clamped, then
// (v / 255 - mean) / std. The fast renderer must give these numbers.
std::vector<float> reference_view(const DecodedImage& im, const AugmentOptions& o, uint64_t seed) {
  const ViewWindow win = plan_view(im.width, im.height, o, seed);
  const int S = o.size;
  std::vector<float> out(static_cast<size_t>(o.channels) * S * S);
  auto px = [&](int x, int y, int c) {
    x = std::clamp(x, 0, im.width - 1), y = std::clamp(y, 0, im.height - 1);
    return float(im.pixels[(size_t(y) * im.width + x) * im.channels + (im.channels == 1 ? 0 : c)]);
  };
  for (int c = 0; c < o.channels; ++c)
    for (int y = 0; y < S; ++y)
      for (int x = 0; x < S; ++x) {
        const int xo = win.flip ? S - 1 - x : x;
        const double fx = win.x0 + (xo + 0.5) * win.w / S - 0.5, fy = win.y0 + (y + 0.5) * win.h / S - 0.5;
        const int x0 = int(std::floor(fx)), y0 = int(std::floor(fy));
        const float tx = float(fx - x0), ty = float(fy - y0);
        const float v = (px(x0, y0, c) * (1 - tx) + px(x0 + 1, y0, c) * tx) * (1 - ty) +
                        (px(x0, y0 + 1, c) * (1 - tx) + px(x0 + 1, y0 + 1, c) * tx) * ty;
        out[(size_t(c) * S + y) * S + x] = (v / 255.f - o.mean[c]) / o.std[c];
      }
  return out;
}

float largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

std::vector<uint8_t> fixture_bytes(const char* name) {
  return read_file_bytes((std::filesystem::path(MESHTRAIN_SOURCE_DIR) / "tests/fixtures/images" / name).string());
}

}  // namespace

// Random-resized crops (flipped or not, at the edges or inside) and the
// evaluation view of RGB and gray images equal the per-pixel reference.
TEST(image_source, fast_views_equal_the_per_pixel_reference) {
  for (const char* name : {"rgb_420_161x121.jpg", "gray_33x19.jpg"}) {
    for (ColorMode mode : {ColorMode::Rgb, ColorMode::KeepGray}) {
      const DecodedImage im = decode_image(fixture_bytes(name), name, mode);
      for (bool train : {true, false}) {
        AugmentOptions a;
        a.size = 20;
        a.channels = mode == ColorMode::Rgb ? 3 : im.channels;
        a.train = train;
        a.mean = std::vector<float>(a.channels, 0.45f);
        a.std = std::vector<float>(a.channels, 0.22f);
        std::vector<float> out(static_cast<size_t>(a.channels) * 20 * 20);
        for (uint64_t seed = 1; seed <= 40; ++seed) {
          augment_image(im, a, seed, out.data());
          // Same taps and weights; the separable pass blends rows before columns and
          // folds the normalization, so a few float roundings of values up to |2.5|
          // (ulp 2.4e-7) differ; a wrong tap or flip moves a value by > 1e-2.
          ASSERT_LT(largest_difference(out, reference_view(im, a, seed)), 2e-5f)
              << name << " channels " << a.channels << (train ? " training" : " evaluation") << " seed " << seed;
        }
      }
    }
  }
}

// From the encoded bytes: a window kept at full scale gives augment_image's
// view of the whole decoded image (only its rows and columns were decoded);
// a window shrunk by the scaled IDCT gives the view of the same window on the
// whole image decoded at that scale.
TEST(image_source, views_from_encoded_jpegs_equal_the_decoded_images_views) {
  for (const char* name : {"rgb_420_161x121.jpg", "rgb_progressive_420_133x101.jpg"}) {
    const std::vector<uint8_t> bytes = fixture_bytes(name);
    const DecodedImage im = decode_image(bytes, name);
    int full = 0, shrunk = 0;
    for (bool train : {true, false})
      for (int size : {16, 24, 40, 64}) {
        AugmentOptions a;
        a.size = size;
        a.train = train;
        a.scale_min = 0.05f;
        std::vector<float> x(3u * size * size), y(x.size());
        for (uint64_t seed = 1; seed <= 60; ++seed) {
          SCOPED_TRACE(fmt::format("{} size {} seed {}{}", name, size, seed, train ? "" : " evaluation"));
          augment_encoded_image(bytes, name, a, seed, x.data());
          augment_image(im, a, seed, y.data());
          const ViewWindow w = plan_view(im.width, im.height, a, seed);
          // The window shifted by the part's integer origin: the same pixels and taps;
          // the fractional weights may round differently in their last float bit.
          if (std::min(w.w, w.h) < 2 * size) {
            ++full;
            ASSERT_LT(largest_difference(x, y), 1e-5f);
          } else {
            ++shrunk;
            int d = 2;
            while (d < 8 && std::min(w.w, w.h) / (2 * d) >= size) d *= 2;
            const DecodedRegion small =
                decode_image_region(bytes, name, ColorMode::Rgb, {0, 0, im.width, im.height, d});
            const double f = double(small.scaled_width) / im.width, g = double(small.scaled_height) / im.height;
            render_view(small.image, {w.x0 * f, w.y0 * g, w.w * f, w.h * g, w.flip}, a, y.data());
            ASSERT_LT(largest_difference(x, y), 1e-5f) << "at 1/" << d;
          }
        }
      }
    EXPECT_GT(full, 50);
    EXPECT_GT(shrunk, 50);
  }
}

TEST(image_source, two_ranks_see_what_one_rank_sees) {
  const std::string dir = temp_dir("ranks");
  const std::string pattern = write_shards(dir);
  ImageSource one(options(pattern, 4, 0, 1));
  ImageSource r0(options(pattern, 2, 0, 2)), r1(options(pattern, 2, 1, 2));
  EXPECT_EQ(one.num_samples(), kImages);
  EXPECT_EQ(one.batches_per_epoch(), kImages / 4);
  for (int k = 0; k < 8; ++k) {  // into the second epoch
    const Batch a = one.next(), b = r0.next(), c = r1.next();
    const int64_t n = kSize * kSize;
    for (int i = 0; i < 4; ++i) {
      const Batch& part = i < 2 ? b : c;
      const int j = i % 2;
      EXPECT_EQ(a.targets.data<int32_t>()[i], part.targets.data<int32_t>()[j]) << k << " " << i;
      for (int64_t e = 0; e < n; ++e)
        ASSERT_EQ(a.inputs.data<float>()[i * n + e], part.inputs.data<float>()[j * n + e]) << k << " " << i;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(image_source, seek_returns_the_same_batch_and_evaluation_repeats) {
  const std::string dir = temp_dir("seek");
  const std::string pattern = write_shards(dir);
  ImageSource a(options(pattern, 4, 0, 1));
  std::vector<Batch> seq;
  for (int k = 0; k < 9; ++k) seq.push_back(a.next());
  EXPECT_EQ(a.position(), (LoaderPosition{1, 3}));
  ImageSource b(options(pattern, 4, 0, 1));
  b.seek({1, 1});
  const Batch again = b.next();
  EXPECT_EQ(again.position, seq[7].position);
  ASSERT_EQ(again.inputs.numel(), seq[7].inputs.numel());
  for (int64_t e = 0; e < again.inputs.numel(); ++e)
    ASSERT_EQ(again.inputs.data<float>()[e], seq[7].inputs.data<float>()[e]);
  LoaderOptions eo = options(pattern, 4, 0, 1);
  eo.mode = LoaderMode::Eval;
  ImageSource ev(eo);
  const Batch first = ev.next();
  ev.rewind();
  const Batch second = ev.next();
  for (int64_t e = 0; e < first.inputs.numel(); ++e)
    ASSERT_EQ(first.inputs.data<float>()[e], second.inputs.data<float>()[e]);
  std::filesystem::remove_all(dir);
}

TEST(image_source, bad_labels_and_missing_shards_are_named) {
  const std::string dir = temp_dir("bad");
  const std::string pattern = write_shards(dir, 1);  // labels 1..3 for 3 classes
  try {
    ImageSource s(options(pattern, 4, 0, 1));
    ADD_FAILURE() << "a label beyond the classes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has class 3, but the model has 3 classes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ImageSource(options(dir + "/none-*.tar", 4, 0, 1)), Error);
  std::filesystem::remove_all(dir);
}
