// Encoded images in memory -> 8-bit pixels, for `meshtrain data prepare-images`
// (which decodes every image once to validate it) and the image readers.
//
// JPEG through libjpeg-turbo's libjpeg API (ISLOW integer DCT, fancy
// upsampling: libjpeg's defaults, which Pillow also uses, so the pixels equal
// Pillow's `Image.open(f).convert("RGB")`), PNG through libpng (palette
// expanded, alpha dropped without compositing, 16-bit samples cut to their
// high byte, 1/2/4-bit gray expanded: Pillow's convert("RGB") too).
// Pixels are HWC, row-major, `channels` bytes per pixel.
//
// Bad bytes never crash or exit: libjpeg's and libpng's error handlers are
// replaced by ones that return here (setjmp/longjmp inside the C calls only),
// and every failure is a meshtrain::Error naming the image and the reason.
// libjpeg's warnings (a truncated file, "premature end of data", corrupt
// entropy data) are errors too: libjpeg would otherwise return an image
// padded with gray, as Pillow refuses to without LOAD_TRUNCATED_IMAGES.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace meshtrain::data {

enum class ImageFormat { Unknown, Jpeg, Png };

// From the first bytes (JPEG's FF D8 FF, PNG's 8-byte signature), not a name.
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);
// "jpg", "png" (the WebDataset extension) or "unknown".
const char* image_format_extension(ImageFormat format);

enum class ColorMode {
  Rgb,       // always 3 channels (grayscale replicated, as convert("RGB"))
  KeepGray,  // grayscale images (gray JPEG, gray or gray+alpha PNG) as 1 channel, else 3
};

struct DecodedImage {
  int width = 0;
  int height = 0;
  int channels = 0;             // 1 or 3
  ImageFormat format = ImageFormat::Unknown;
  std::vector<uint8_t> pixels;  // height * width * channels, HWC
};

// Largest width * height accepted (a corrupt header cannot ask for gigabytes).
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

// Throws meshtrain::Error "<name>: <what is wrong>" for bytes that are not a
// JPEG or PNG, or a corrupt, truncated or unsupported (CMYK JPEG) one.
DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name,
                          ColorMode mode = ColorMode::Rgb);
// Reads the file and decodes it; errors name the path.
DecodedImage decode_image_file(const std::string& path, ColorMode mode = ColorMode::Rgb);

// Part of an image, for the training pipeline (data/image_augment.h): the
// pixels covering `x, y, width, height` (of the full-size image), decoded at
// 1/scale_denom of the size (1, 2, 4 or 8) by libjpeg-turbo's scaled IDCT,
// with the columns cut by jpeg_crop_scanline (from an iMCU boundary, so the
// part may begin left of the region) and the rows outside skipped, those
// below never read. At scale 1 the pixels inside the region equal the same
// pixels of decode_image's (a column of the part outside the region may not:
// chroma upsampling at a cut edge). PNG decodes whole at full size. A file cut below the region
// is not noticed here (prepare-images decoded every image whole once).
struct DecodeRegion {
  int x = 0, y = 0, width = 0, height = 0;
  int scale_denom = 1;
};
struct DecodedRegion {
  DecodedImage image;                        // the part: image.width x image.height
  int origin_x = 0, origin_y = 0;            // where it begins in the scaled image
  int scaled_width = 0, scaled_height = 0;   // the whole image's size at that scale
  int scale_denom = 1;
};
DecodedRegion decode_image_region(std::span<const uint8_t> bytes, const std::string& name,
                                  ColorMode mode, const DecodeRegion& region);

// Width and height from the header only (no pixel decoding); throws as decode_image.
struct ImageSize {
  int width = 0, height = 0, channels = 0;  // channels as decode_image(KeepGray) would give
};
ImageSize read_image_size(std::span<const uint8_t> bytes, const std::string& name);

// An 8-bit PNG (channels 1 gray, 3 RGB, 4 RGBA) of HWC pixels; zlib level
// `compression` (0-9, -1 = zlib's default).
std::vector<uint8_t> encode_png(std::span<const uint8_t> pixels, int width, int height,
                                int channels, int compression = -1);

// The whole file; throws meshtrain::Error naming it when it cannot be read.
std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace meshtrain::data
