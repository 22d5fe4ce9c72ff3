// test-links: mt_data
// Image data: JPEG/PNG decoding against Pillow's pixels
// (tools/make_image_fixtures.py), corrupt and truncated images as errors,
// IDX files (made here, and the real Fashion-MNIST when installed), the
// WebDataset tar writer/reader and prepare_images on a folder tree.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/idx_file.h"
#include "meshtrain/data/image_decode.h"
#include "meshtrain/data/image_prepare.h"
#include "meshtrain/data/image_shards.h"
#include "test_paths.h"

using namespace meshtrain;
using namespace meshtrain::data;
using meshtrain::testing::error_of;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(MESHTRAIN_SOURCE_DIR) / "tests" / "fixtures" / "images";
const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mt_image_test_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<uint8_t> file_bytes(const fs::path& p) { return read_file_bytes(p.string()); }

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(out.good()) << p;
}

nlohmann::json manifest() {
  std::ifstream in(kFixtures / "manifest.json");
  return nlohmann::json::parse(in);
}

// "Error naming the file" or a decoded image; anything else fails the test.
// Returns true when it threw.
bool decode_or_error(const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    const DecodedImage img = decode_image(bytes, name);
    EXPECT_EQ(img.pixels.size(), static_cast<size_t>(img.width) * img.height * img.channels);
    return false;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    return true;
  }
}

}  // namespace

TEST(image_data, decode_equals_pillow_pixels) {
  const nlohmann::json m = manifest();
  ASSERT_GE(m.size(), 10u);
  for (const auto& [name, info] : m.items()) {
    SCOPED_TRACE(name);
    const fs::path path = kFixtures / name;
    const int w = info["width"], h = info["height"];
    const DecodedImage rgb = decode_image_file(path.string());
    ASSERT_EQ(rgb.width, w);
    ASSERT_EQ(rgb.height, h);
    ASSERT_EQ(rgb.channels, 3);
    EXPECT_EQ(rgb.format, info["format"] == "JPEG" ? ImageFormat::Jpeg : ImageFormat::Png);
    const std::vector<uint8_t> want = file_bytes(path.string() + ".rgb");
    ASSERT_EQ(rgb.pixels.size(), want.size());
    int max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i)
      max_diff = std::max(max_diff, std::abs(int{rgb.pixels[i]} - int{want[i]}));
    EXPECT_EQ(max_diff, 0) << "largest difference from Pillow's pixels";

    const DecodedImage kept = decode_image_file(path.string(), ColorMode::KeepGray);
    const ImageSize size = read_image_size(file_bytes(path), name);
    EXPECT_EQ(size.width, w);
    EXPECT_EQ(size.height, h);
    if (info["gray"]) {
      ASSERT_EQ(kept.channels, 1);
      EXPECT_EQ(size.channels, 1);
      EXPECT_EQ(kept.pixels, file_bytes(path.string() + ".gray"));
    } else {
      EXPECT_EQ(kept.channels, 3);
      EXPECT_EQ(size.channels, 3);
      EXPECT_EQ(kept.pixels, rgb.pixels);
    }
  }
}

// A region at full scale is exactly those pixels of the whole image, wherever
// it lies (iMCU-aligned or not, at the edges, the whole image); the part
// covers the region and begins at an iMCU boundary left of it.
TEST(image_data, a_jpeg_region_is_the_same_pixels_of_the_whole_image) {
  const nlohmann::json m = manifest();
  int jpegs = 0;
  for (const auto& [name, info] : m.items()) {
    if (info["format"] != "JPEG") continue;
    ++jpegs;
    const std::vector<uint8_t> bytes = file_bytes(kFixtures / name);
    const int W = info["width"], H = info["height"];
    for (ColorMode mode : {ColorMode::Rgb, ColorMode::KeepGray}) {
      const DecodedImage whole = decode_image(bytes, name, mode);
      const int C = whole.channels;
      const DecodeRegion regions[] = {{0, 0, W, H, 1},          {3, 5, 11, 7, 1},
                                      {W / 2, H / 3, W, H, 1},  {W - 1, H - 1, 1, 1, 1},
                                      {17, 1, W / 3 + 1, 2, 1}, {-4, -4, 9, 9, 1}};
      for (const DecodeRegion& r : regions) {
        SCOPED_TRACE(fmt::format("{} region {},{} {}x{} channels {}", name, r.x, r.y, r.width, r.height, C));
        const DecodedRegion part = decode_image_region(bytes, name, mode, r);
        ASSERT_EQ(part.scaled_width, W);
        ASSERT_EQ(part.scaled_height, H);
        ASSERT_EQ(part.image.channels, C);
        EXPECT_LE(part.origin_x, std::max(r.x, 0));
        EXPECT_LE(part.origin_y, std::max(r.y, 0));
        EXPECT_GE(part.origin_x + part.image.width, std::min(r.x + r.width, W));
        EXPECT_GE(part.origin_y + part.image.height, std::min(r.y + r.height, H));
        int wrong = 0;  // inside the region (the part's columns beyond it may differ)
        for (int y = std::max(r.y, 0); y < std::min(r.y + r.height, H); ++y)
          for (int x = std::max(r.x, 0); x < std::min(r.x + r.width, W); ++x)
            for (int c = 0; c < C; ++c)
              wrong += part.image.pixels[(size_t(y - part.origin_y) * part.image.width + x - part.origin_x) * C + c] !=
                       whole.pixels[(size_t(y) * W + x) * C + c];
        EXPECT_EQ(wrong, 0);
      }
    }
  }
  EXPECT_GE(jpegs, 6);
  // PNG has no partial decoding: the whole image at full scale.
  const std::vector<uint8_t> png = file_bytes(kFixtures / "rgb_37x23.png");
  const DecodedRegion p = decode_image_region(png, "rgb_37x23.png", ColorMode::Rgb, {5, 5, 4, 4, 2});
  EXPECT_EQ(p.image.width, 37);
  EXPECT_EQ(p.scale_denom, 1);
  EXPECT_EQ(p.image.pixels, decode_image(png, "png").pixels);
}

// At 1/2, 1/4, 1/8 the scaled IDCT gives the image at ceil(size / d) whose
// pixels are near the d x d block means of the full decode (it filters as it
// shrinks), and a region at that scale is the same pixels of the whole image
// at that scale.
TEST(image_data, a_jpeg_region_at_a_smaller_scale_is_the_shrunk_image) {
  for (const std::string name : {"rgb_420_161x121.jpg", "rgb_progressive_420_133x101.jpg"}) {
    const std::vector<uint8_t> bytes = file_bytes(kFixtures / name);
    const DecodedImage full = decode_image(bytes, name);
    const int W = full.width, H = full.height;
    for (int d : {2, 4, 8}) {
      SCOPED_TRACE(fmt::format("{} at 1/{}", name, d));
      const DecodedRegion whole = decode_image_region(bytes, name, ColorMode::Rgb, {0, 0, W, H, d});
      const int w = (W + d - 1) / d, h = (H + d - 1) / d;
      ASSERT_EQ(whole.image.width, w);
      ASSERT_EQ(whole.image.height, h);
      EXPECT_EQ(whole.scaled_width, w);
      double diff = 0;
      int n = 0;
      for (int y = 0; y < H / d; ++y)
        for (int x = 0; x < W / d; ++x)
          for (int c = 0; c < 3; ++c) {
            double mean = 0;
            for (int j = 0; j < d; ++j)
              for (int i = 0; i < d; ++i) mean += full.pixels[(size_t(y * d + j) * W + x * d + i) * 3 + c];
            diff += std::abs(mean / (d * d) - whole.image.pixels[(size_t(y) * w + x) * 3 + c]);
            ++n;
          }
      EXPECT_LT(diff / n, 4.0) << "mean distance from the block means, in 8-bit levels (0.95-2.2 measured)";
      const DecodedRegion part = decode_image_region(bytes, name, ColorMode::Rgb, {W / 3, H / 4, W / 3, H / 2, d});
      EXPECT_EQ(part.scaled_width, w);
      ASSERT_LE(part.origin_x, W / 3 / d);
      ASSERT_GE(part.origin_x + part.image.width, (W / 3 + W / 3) / d);
      int wrong = 0;  // the region's pixels at that scale, its edge columns aside
      for (int y = 0; y < part.image.height; ++y)
        for (int x = W / 3 / d + 1; x < (W / 3 + W / 3) / d - 1; ++x)
          for (int c = 0; c < 3; ++c)
            wrong += part.image.pixels[(size_t(y) * part.image.width + x - part.origin_x) * 3 + c] !=
                     whole.image.pixels[(size_t(y + part.origin_y) * w + x) * 3 + c];
      EXPECT_EQ(wrong, 0);
    }
  }
}

TEST(image_data, truncated_images_are_errors_naming_the_file) {
  for (const char* name : {"rgb_baseline_37x23.jpg", "rgb_progressive_41x29.jpg",
                           "gray_33x19.jpg", "rgb_37x23.png", "palette_19x21.png",
                           "gray_31x13.png"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> full = file_bytes(kFixtures / name);
    // Every cut: from the empty file to the last byte missing (a JPEG's EOI
    // marker, a PNG's IEND CRC).
    for (size_t len = 0; len < full.size(); ++len) {
      const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(len));
      const std::string label = std::string("cut/") + name;
      const std::string e = error_of([&] { decode_image(cut, label); });
      ASSERT_NE(e.find(label), std::string::npos) << "cut at " << len << ": " << e;
    }
    EXPECT_NE(error_of([&] {
                std::vector<uint8_t> half(full.begin(), full.begin() + full.size() / 2);
                decode_image(half, name);
              }).find(std::string(name).ends_with(".jpg") ? "corrupt JPEG" : "corrupt PNG"),
              std::string::npos);
  }
}

TEST(image_data, bit_flips_give_an_error_or_an_image_never_a_crash) {
  for (const char* name : {"rgb_baseline_37x23.jpg", "rgb_progressive_41x29.jpg",
                           "gray_33x19.jpg", "rgb_37x23.png", "rgba_23x17.png",
                           "palette_19x21.png"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> full = file_bytes(kFixtures / name);
    int errors = 0;
    for (size_t i = 0; i < full.size(); ++i) {
      std::vector<uint8_t> bad = full;
      bad[i] ^= static_cast<uint8_t>(1u << (i % 8));
      errors += decode_or_error(bad, name);
    }
    EXPECT_GT(errors, 0);
    if (std::string(name).ends_with(".png")) {
      // Every byte of a PNG after the signature is under a CRC or is one:
      // libpng rejects flips in critical chunks (IHDR, PLTE, IDAT, IEND).
      EXPECT_GT(errors, static_cast<int>(full.size() * 9 / 10)) << "of " << full.size();
    }
  }
  // A flip in the IDAT data is a CRC error naming the file.
  std::vector<uint8_t> png = file_bytes(kFixtures / "rgb_37x23.png");
  png[png.size() / 2] ^= 0x10;
  const std::string e = error_of([&] { decode_image(png, "x/flipped.png"); });
  EXPECT_NE(e.find("x/flipped.png: corrupt PNG"), std::string::npos) << e;
  // JPEG: a scan cut short by an early EOI marker is refused (libjpeg would
  // pad it with gray and only warn).
  std::vector<uint8_t> jpg = file_bytes(kFixtures / "rgb_baseline_37x23.jpg");
  jpg.resize(jpg.size() * 3 / 4);
  jpg.push_back(0xFF);
  jpg.push_back(0xD9);
  EXPECT_NE(error_of([&] { decode_image(jpg, "early_eoi.jpg"); }).find("early_eoi.jpg: corrupt JPEG"),
            std::string::npos);
  // Not an image at all.
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_NE(error_of([&] { decode_image(text, "notes.png"); }).find("notes.png: not a JPEG or PNG"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode_image_file("/nonexistent/a.jpg"); }).find("/nonexistent/a.jpg"),
            std::string::npos);
}

TEST(image_data, png_encoder_round_trips) {
  std::vector<uint8_t> px(29 * 7 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37 + 11);
  const std::vector<uint8_t> png3 = encode_png(px, 29, 7, 3);
  const DecodedImage d3 = decode_image(png3, "rgb");
  EXPECT_EQ(d3.width, 29);
  EXPECT_EQ(d3.height, 7);
  EXPECT_EQ(d3.pixels, px);
  const std::vector<uint8_t> gray(px.begin(), px.begin() + 29 * 7);
  const DecodedImage d1 = decode_image(encode_png(gray, 7, 29, 1, 9), "gray", ColorMode::KeepGray);
  EXPECT_EQ(d1.channels, 1);
  EXPECT_EQ(d1.width, 7);
  EXPECT_EQ(d1.pixels, gray);
  EXPECT_NE(error_of([&] { encode_png(gray, 7, 28, 1); }).find("bytes for a 7x28x1"),
            std::string::npos);
}

namespace {

std::vector<uint8_t> be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16),
          static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
}

std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> b = {0, 0, 8, 3};
  for (uint32_t v : {n, rows, cols}) {
    const auto e = be32(v);
    b.insert(b.end(), e.begin(), e.end());
  }
  for (uint32_t i = 0; i < n * rows * cols; ++i) b.push_back(static_cast<uint8_t>(i * 7 + 3));
  return b;
}

std::vector<uint8_t> idx_labels(uint32_t n) {
  std::vector<uint8_t> b = {0, 0, 8, 1};
  const auto e = be32(n);
  b.insert(b.end(), e.begin(), e.end());
  for (uint32_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i % 10));
  return b;
}

void write_gzip(const fs::path& p, const std::vector<uint8_t>& b) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  gzclose(f);
}

}  // namespace

TEST(image_data, idx_reader_plain_and_gzip) {
  TempDir t;
  const std::vector<uint8_t> imgs = idx_images(5, 3, 4);
  write_bytes(t.path() / "images.idx", imgs);
  write_gzip(t.path() / "images.idx.gz", imgs);
  write_gzip(t.path() / "labels.gz", idx_labels(5));
  for (const char* f : {"images.idx", "images.idx.gz"}) {
    const IdxImages im = read_idx_images((t.path() / f).string());
    EXPECT_EQ(im.count, 5);
    EXPECT_EQ(im.rows, 3);
    EXPECT_EQ(im.cols, 4);
    ASSERT_EQ(im.pixels.size(), 60u);
    EXPECT_EQ(im.image(2)[5], static_cast<uint8_t>((2 * 12 + 5) * 7 + 3));
  }
  const IdxDataset ds =
      read_idx_dataset((t.path() / "images.idx.gz").string(), (t.path() / "labels.gz").string());
  EXPECT_EQ(ds.labels, (std::vector<uint8_t>{0, 1, 2, 3, 4}));

  // Errors name the file and what is wrong.
  auto expect_error = [&](const std::string& file, const std::vector<uint8_t>& bytes,
                          const std::string& what, bool labels = false) {
    write_bytes(t.path() / file, bytes);
    const std::string path = (t.path() / file).string();
    const std::string e = error_of([&] {
      if (labels)
        read_idx_labels(path);
      else
        read_idx_images(path);
    });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  std::vector<uint8_t> bad = imgs;
  bad[3] = 1;  // a labels magic on an images file
  expect_error("wrong_dims", bad, "0x00000803");
  bad = imgs;
  bad[0] = 0x12;
  expect_error("not_idx", bad, "not an IDX file");
  bad = imgs;
  bad[2] = 0x0D;  // float data
  expect_error("float", bad, "not unsigned bytes");
  bad.assign(imgs.begin(), imgs.end() - 1);
  expect_error("short", bad, "truncated");
  bad = imgs;
  bad.push_back(0);
  expect_error("long", bad, "1 bytes after");
  expect_error("tiny", {0, 0}, "too short");
  expect_error("labels_as_images", idx_labels(4), "0x00000803");
  expect_error("images_as_labels", imgs, "0x00000801", true);
  // A gzip file cut short, and corrupt gzip data.
  const std::vector<uint8_t> gz = file_bytes(t.path() / "images.idx.gz");
  expect_error("cut.gz", std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2),
               "truncated gzip");
  bad = gz;
  for (size_t i = 12; i < bad.size() - 8; ++i) bad[i] ^= 0x5A;
  expect_error("garbled.gz", bad, "gzip");
  // Counts that disagree.
  write_bytes(t.path() / "labels4", idx_labels(4));
  const std::string e = error_of([&] {
    read_idx_dataset((t.path() / "images.idx").string(), (t.path() / "labels4").string());
  });
  EXPECT_NE(e.find("holds 5 images but"), std::string::npos) << e;
  EXPECT_NE(e.find("holds 4 labels"), std::string::npos) << e;
}

TEST(image_data, fashion_mnist_idx_files) {
  if (!fs::exists(kFashion / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << kFashion << " is missing (Debian package dataset-fashion-mnist; "
                                "scripts/install-deps.sh installs it)";
  const IdxDataset train = read_idx_dataset((kFashion / "train-images-idx3-ubyte.gz").string(),
                                            (kFashion / "train-labels-idx1-ubyte.gz").string());
  EXPECT_EQ(train.images.count, 60000);
  EXPECT_EQ(train.images.rows, 28);
  EXPECT_EQ(train.images.cols, 28);
  std::vector<int64_t> per_class(10, 0);
  for (uint8_t l : train.labels) {
    ASSERT_LT(l, 10);
    ++per_class[l];
  }
  EXPECT_EQ(per_class, std::vector<int64_t>(10, 6000));  // balanced
  // Known values (numpy over the same files): labels 9 0 0 3 0 2 7 2 5 5, and
  // the pixel sums of the first and the last image.
  EXPECT_EQ(std::vector<uint8_t>(train.labels.begin(), train.labels.begin() + 10),
            (std::vector<uint8_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  auto sum = [&](int64_t i) {
    int64_t s = 0;
    for (int k = 0; k < 28 * 28; ++k) s += train.images.image(i)[k];
    return s;
  };
  EXPECT_EQ(sum(0), 76247);
  EXPECT_EQ(sum(59999), 16684);
  const IdxDataset test = read_idx_dataset((kFashion / "t10k-images-idx3-ubyte.gz").string(),
                                           (kFashion / "t10k-labels-idx1-ubyte.gz").string());
  EXPECT_EQ(test.images.count, 10000);
  EXPECT_EQ(std::vector<uint8_t>(test.labels.begin(), test.labels.begin() + 5),
            (std::vector<uint8_t>{9, 2, 1, 1, 6}));
  // Mixing splits: the counts disagree.
  EXPECT_NE(error_of([&] {
              read_idx_dataset((kFashion / "train-images-idx3-ubyte.gz").string(),
                               (kFashion / "t10k-labels-idx1-ubyte.gz").string());
            }).find("holds 60000 images but"),
            std::string::npos);
}

TEST(image_data, tar_header_is_ustar_with_checksum) {
  const std::vector<uint8_t> h = tar_header("000001.png", 1234);
  ASSERT_EQ(h.size(), 512u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(h.data())), "000001.png");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(h.data() + 124), 11), "00000002322");  // 1234
  EXPECT_EQ(std::memcmp(h.data() + 257, "ustar\0" "00", 8), 0);
  uint32_t sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  EXPECT_EQ(std::strtoul(reinterpret_cast<const char*>(h.data() + 148), nullptr, 8), sum);
  EXPECT_NE(error_of([] { tar_header(std::string(101, 'a'), 1); }).find("1-100 bytes"),
            std::string::npos);
}

TEST(image_data, shard_writer_reader_round_trip) {
  TempDir t;
  ImageShardWriter w(t.path().string(), "train", 3);
  std::vector<std::vector<uint8_t>> images;
  for (int i = 0; i < 7; ++i) {
    std::vector<uint8_t> img(static_cast<size_t>(100 + 300 * i));  // sizes around block edges
    for (size_t k = 0; k < img.size(); ++k) img[k] = static_cast<uint8_t>(k * (i + 1));
    if (i == 2) img.resize(512);
    w.add(i % 2 ? "png" : "jpg", img, 10 + i);
    images.push_back(img);
  }
  EXPECT_EQ(w.samples(), 7);
  const std::vector<std::string> shards = w.finish();
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(fs::path(shards[0]).filename(), "train-000000.tar");
  EXPECT_EQ(fs::path(shards[2]).filename(), "train-000002.tar");
  int i = 0;
  for (const std::string& s : shards) {
    EXPECT_EQ(fs::file_size(s) % 512, 0u);
    ImageShardReader r(s);
    ImageSample sample;
    while (r.next(&sample)) {
      char key[16];
      std::snprintf(key, sizeof key, "%06d", i);
      EXPECT_EQ(sample.key, key);
      EXPECT_EQ(sample.ext, i % 2 ? "png" : "jpg");
      EXPECT_EQ(sample.label, 10 + i);
      EXPECT_EQ(std::vector<uint8_t>(sample.image.begin(), sample.image.end()), images[i]);
      ++i;
    }
  }
  EXPECT_EQ(i, 7);
  // The raw member order: KEY.jpg, KEY.cls, ...
  TarReader tr(shards[0]);
  TarMember m;
  std::vector<std::string> names;
  while (tr.next(&m)) names.push_back(m.name);
  EXPECT_EQ(names, (std::vector<std::string>{"000000.jpg", "000000.cls", "000001.png",
                                             "000001.cls", "000002.jpg", "000002.cls"}));
  std::string key, ext;
  ASSERT_TRUE(split_sample_name("a/b.c/000123.seg.png", &key, &ext));
  EXPECT_EQ(key, "a/b.c/000123");
  EXPECT_EQ(ext, "seg.png");
  EXPECT_FALSE(split_sample_name("README", &key, &ext));
}

TEST(image_data, corrupt_and_truncated_tars_name_shard_and_member) {
  TempDir t;
  ImageShardWriter w(t.path().string(), "val", 10);
  const std::vector<uint8_t> img(700, 7);
  w.add("png", img, 1);
  w.add("png", img, 2);
  const std::string shard = w.finish().at(0);
  const std::vector<uint8_t> full = file_bytes(shard);
  auto read_all = [](const std::string& path) {
    ImageShardReader r(path);
    ImageSample s;
    while (r.next(&s)) {
    }
  };
  // Layout (700-byte images: 2 blocks): 000000.png header at 0, data 512;
  // 000000.cls 1536, 2048; 000001.png 2560, 3072; 000001.cls 4096, 4608;
  // the end-of-archive blocks 5120 and 5632 (one zero block is enough for
  // readers, Python's tarfile too). Every cut up to and including the end of
  // the last member is an error naming the shard.
  ASSERT_EQ(full.size(), 6144u);
  for (size_t len = 0; len <= 5120; len += 256) {
    const fs::path cut = t.path() / ("cut" + std::to_string(len) + ".tar");
    write_bytes(cut, std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(len)));
    const std::string e = error_of([&] { read_all(cut.string()); });
    EXPECT_NE(e.find(cut.string()), std::string::npos) << len << ": " << e;
  }
  {
    const fs::path cut = t.path() / "cut_member.tar";
    write_bytes(cut, std::vector<uint8_t>(full.begin(), full.begin() + 512 * 6 + 100));
    const std::string e = error_of([&] { read_all(cut.string()); });
    EXPECT_NE(e.find("member '000001.png'"), std::string::npos) << e;
  }
  // A flipped byte in a header: checksum error naming the member.
  std::vector<uint8_t> bad = full;
  bad[512 * 5 + 20] ^= 1;  // the third header (000001.png): its name field's padding
  write_bytes(t.path() / "flip.tar", bad);
  std::string e = error_of([&] { read_all((t.path() / "flip.tar").string()); });
  EXPECT_NE(e.find("flip.tar: corrupt tar header"), std::string::npos) << e;
  EXPECT_NE(e.find("checksum"), std::string::npos) << e;
  // A sample without its class.
  {
    TarWriter tw((t.path() / "nocls.tar").string());
    tw.add("000000.png", img);
    tw.add("000001.png", img);
    tw.add("000001.cls", std::vector<uint8_t>{'3'});
    tw.close();
  }
  e = error_of([&] { read_all((t.path() / "nocls.tar").string()); });
  EXPECT_NE(e.find("nocls.tar: sample '000000' has no .cls member"), std::string::npos) << e;
  {
    TarWriter tw((t.path() / "badcls.tar").string());
    tw.add("000000.png", img);
    tw.add("000000.cls", std::vector<uint8_t>{'x'});
    tw.close();
  }
  e = error_of([&] { read_all((t.path() / "badcls.tar").string()); });
  EXPECT_NE(e.find("member '000000.cls'"), std::string::npos) << e;
}

TEST(image_data, prepare_folder_validates_and_is_deterministic) {
  TempDir t;
  const fs::path in = t.path() / "in";
  const nlohmann::json m = manifest();
  // cat: the JPEGs, dog: the PNGs; and a file that is not an image.
  for (const auto& [name, info] : m.items()) {
    const fs::path dir = in / (info["format"] == "JPEG" ? "cat" : "dog");
    fs::create_directories(dir);
    fs::copy_file(kFixtures / name, dir / name);
  }
  write_bytes(in / "dog" / "notes.txt", {'h', 'i'});
  ImagePrepareOptions o;
  o.folder = in.string();
  o.out_dir = (t.path() / "a").string();
  o.val_fraction = 0.2;
  o.shard_samples = 3;
  o.seed = 5;
  o.threads = 2;
  const ImagePrepareResult r = prepare_images(o);
  EXPECT_EQ(r.classes, (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(r.splits.size(), 2u);
  EXPECT_EQ(r.splits[0].samples + r.splits[1].samples, 12);
  EXPECT_EQ(r.splits[1].samples, 2);  // round(0.2 * 12)
  EXPECT_EQ(r.ignored_files, 1);
  EXPECT_EQ(r.channels, 3);
  EXPECT_EQ(r.width, 0);  // mixed sizes
  // Every stored sample is a source file's bytes, under its class.
  std::map<std::string, int64_t> sources;  // file bytes -> class
  for (const auto& [name, info] : m.items()) {
    const std::vector<uint8_t> b = file_bytes(kFixtures / name);
    sources[std::string(b.begin(), b.end())] = info["format"] == "JPEG" ? 0 : 1;
  }
  int64_t seen = 0;
  for (const ImageSplitResult& s : r.splits)
    for (const std::string& shard : s.shards) {
      ImageShardReader rd(shard);
      ImageSample sample;
      while (rd.next(&sample)) {
        const std::string b(sample.image.begin(), sample.image.end());
        ASSERT_TRUE(sources.count(b)) << sample.key;
        EXPECT_EQ(sources[b], sample.label);
        EXPECT_EQ(sample.ext, sample.label == 0 ? "jpg" : "png");
        ++seen;
      }
    }
  EXPECT_EQ(seen, 12);
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(r.meta_path));
  EXPECT_EQ(meta["classes"], nlohmann::json({"cat", "dog"}));
  EXPECT_EQ(meta["splits"]["train"]["samples"], 10);
  EXPECT_EQ(meta["splits"]["train"]["shards"],
            nlohmann::json({"train-000000.tar", "train-000001.tar", "train-000002.tar", "train-000003.tar"}));

  // Same inputs and seed: the same bytes, whatever the thread count.
  o.out_dir = (t.path() / "b").string();
  o.threads = 1;
  const ImagePrepareResult r2 = prepare_images(o);
  for (size_t s = 0; s < r.splits.size(); ++s)
    for (size_t k = 0; k < r.splits[s].shards.size(); ++k)
      EXPECT_EQ(file_bytes(r.splits[s].shards[k]), file_bytes(r2.splits[s].shards[k]));

  // A corrupt image: named under the default, skipped and listed with skip.
  std::vector<uint8_t> cut = file_bytes(kFixtures / "rgb_37x23.png");
  cut.resize(cut.size() / 2);
  write_bytes(in / "dog" / "broken.png", cut);
  o.out_dir = (t.path() / "c").string();
  const std::string e = error_of([&] { prepare_images(o); });
  EXPECT_NE(e.find("broken.png: corrupt PNG"), std::string::npos) << e;
  o.skip_corrupt = true;
  const ImagePrepareResult r3 = prepare_images(o);
  ASSERT_EQ(r3.skipped.size(), 1u);
  EXPECT_NE(r3.skipped[0].find("broken.png"), std::string::npos);
  EXPECT_EQ(r3.splits[0].samples + r3.splits[1].samples, 12);
}
