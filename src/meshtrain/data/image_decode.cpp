#include "meshtrain/data/image_decode.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>

// jpeglib.h needs FILE and size_t declared before it.
#include <jpeglib.h>
#include <png.h>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// ---- JPEG -----------------------------------------------------------------

// libjpeg's error manager, extended with a jump target and the message. Any
// error, and any warning (msg_level -1: corrupt or truncated data that libjpeg
// would paper over), jumps back to the setjmp in the decoding function.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) jpeg_fail(cinfo);  // a warning: corrupt data; trace messages are ignored
}

void jpeg_silent(j_common_ptr) {}

struct JpegResult {
  bool keep_gray = false, header_only = false;  // inputs (in memory: safe across longjmp)
  DecodeRegion region;                          // input: width 0 = the whole image
  int width = 0, height = 0, channels = 0;
  int origin_x = 0, origin_y = 0, scaled_width = 0, scaled_height = 0;  // with a region
  bool ok = false;
  char message[JMSG_LENGTH_MAX] = {0};
};

// The rows and columns of result->region (full-size pixels) at 1/scale_denom
// of the size: the scaled IDCT shrinks, jpeg_crop_scanline narrows the columns
// (from an iMCU boundary), jpeg_skip_scanlines passes the rows above without
// the IDCT, and the rows below are never read. Called between the header and
// the decompression; errors longjmp out as in decode_jpeg_c.
void decode_jpeg_region_c(jpeg_decompress_struct* cinfo, std::vector<uint8_t>* pixels,
                          JpegResult* result) {
  const DecodeRegion& r = result->region;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned>(r.scale_denom);
  jpeg_start_decompress(cinfo);
  const double fx = double(cinfo->output_width) / cinfo->image_width;
  const double fy = double(cinfo->output_height) / cinfo->image_height;
  auto span = [](double begin, double end, JDIMENSION limit, JDIMENSION* first, JDIMENSION* count) {
    const auto b = static_cast<JDIMENSION>(std::clamp(std::floor(begin), 0.0, double(limit - 1)));
    const auto e = static_cast<JDIMENSION>(std::clamp(std::ceil(end), double(b + 1), double(limit)));
    *first = b;
    *count = e - b;
  };
  JDIMENSION x0, width, y0, height;
  // One column more each side: a cut column's upsampled chroma lacks its
  // neighbour there, so the part's first and last columns may differ.
  span(r.x * fx - 1, (r.x + r.width) * fx + 1, cinfo->output_width, &x0, &width);
  span(r.y * fy, (r.y + r.height) * fy, cinfo->output_height, &y0, &height);
  result->scaled_width = static_cast<int>(cinfo->output_width);
  result->scaled_height = static_cast<int>(cinfo->output_height);
  if (width < cinfo->output_width) jpeg_crop_scanline(cinfo, &x0, &width);
  if (y0 > 0) jpeg_skip_scanlines(cinfo, y0);
  const size_t row = static_cast<size_t>(cinfo->output_width) * cinfo->output_components;
  pixels->resize(row * height);
  for (JDIMENSION k = 0; k < height; ++k) {
    JSAMPROW rowp = pixels->data() + row * k;
    jpeg_read_scanlines(cinfo, &rowp, 1);
  }
  result->width = static_cast<int>(cinfo->output_width);
  result->height = static_cast<int>(height);
  result->origin_x = static_cast<int>(x0);
  result->origin_y = static_cast<int>(y0);
}

// C-style on purpose: no object with a destructor lives between setjmp and
// the longjmps out of libjpeg; `pixels` belongs to the caller. With
// `header_only`, stops after the header.
void decode_jpeg_c(const uint8_t* data, size_t size, std::vector<uint8_t>* pixels,
                   JpegResult* result) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  std::memset(&cinfo, 0, sizeof cinfo);
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_message;
  err.mgr.output_message = jpeg_silent;
  err.message[0] = 0;
  if (setjmp(err.jump)) {
    std::snprintf(result->message, sizeof result->message, "%s", err.message);
    jpeg_destroy_decompress(&cinfo);
    result->ok = false;
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, const_cast<unsigned char*>(data), static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    std::snprintf(err.message, sizeof err.message,
                  "CMYK/YCCK JPEG is not supported (convert it to RGB)");
    std::longjmp(err.jump, 1);
  }
  const bool gray = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  cinfo.out_color_space = gray && result->keep_gray ? JCS_GRAYSCALE : JCS_RGB;
  // libjpeg's defaults, spelled out: they are what Pillow decodes with.
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  cinfo.do_block_smoothing = TRUE;
  cinfo.scale_num = cinfo.scale_denom = 1;
  result->width = static_cast<int>(cinfo.image_width);
  result->height = static_cast<int>(cinfo.image_height);
  result->channels = cinfo.out_color_space == JCS_GRAYSCALE ? 1 : 3;
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > kMaxImagePixels) {
    std::snprintf(err.message, sizeof err.message, "%ux%u pixels is over the limit of %lld",
                  cinfo.image_width, cinfo.image_height,
                  static_cast<long long>(kMaxImagePixels));
    std::longjmp(err.jump, 1);
  }
  if (result->header_only) {
    jpeg_destroy_decompress(&cinfo);
    result->ok = true;
    return;
  }
  if (result->region.width > 0) {
    decode_jpeg_region_c(&cinfo, pixels, result);
    jpeg_destroy_decompress(&cinfo);  // the rows below the region are never decoded
    result->ok = true;
    return;
  }
  jpeg_start_decompress(&cinfo);
  const size_t row = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  pixels->resize(row * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW rowp = pixels->data() + row * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &rowp, 1);
  }
  jpeg_finish_decompress(&cinfo);  // reads to EOI: a file cut after the scans fails here
  jpeg_destroy_decompress(&cinfo);
  result->ok = true;
}

// ---- PNG ------------------------------------------------------------------

struct PngState {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void png_fail(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(st->message, sizeof st->message, "%s", msg);
  png_longjmp(png, 1);
}

void png_warn(png_structp, png_const_charp) {}  // benign (e.g. sRGB profile notes)

void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > st->size - st->pos) {
    png_fail(png, "truncated: the file ends inside a chunk");
  }
  std::memcpy(out, st->data + st->pos, n);
  st->pos += n;
}

struct PngResult {
  bool keep_gray = false, header_only = false;  // inputs
  int width = 0, height = 0, channels = 0;
  bool ok = false;
  char message[256] = {0};
};

// C-style as decode_jpeg_c: `pixels` and `rows` belong to the caller.
void decode_png_c(const uint8_t* data, size_t size, std::vector<uint8_t>* pixels,
                  std::vector<png_bytep>* rows, PngResult* result) {
  PngState st;
  st.data = data;
  st.size = size;
  st.pos = 0;
  st.message[0] = 0;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, png_fail, png_warn);
  if (!png) {
    std::snprintf(result->message, sizeof result->message, "libpng: out of memory");
    return;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(result->message, sizeof result->message, "libpng: out of memory");
    return;
  }
  if (setjmp(png_jmpbuf(png))) {
    std::snprintf(result->message, sizeof result->message, "%s", st.message);
    png_destroy_read_struct(&png, &info, nullptr);
    result->ok = false;
    return;
  }
  png_set_read_fn(png, &st, png_read_mem);
  png_set_user_limits(png, 1u << 20, 1u << 20);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info);
  const png_uint_32 h = png_get_image_height(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  const bool gray = (color & PNG_COLOR_MASK_COLOR) == 0;  // gray or gray+alpha
  const bool out_gray = gray && result->keep_gray;
  if (static_cast<int64_t>(w) * h > kMaxImagePixels)
    png_fail(png, "image is over the pixel limit");
  result->width = static_cast<int>(w);
  result->height = static_cast<int>(h);
  result->channels = out_gray ? 1 : 3;
  if (result->header_only) {
    png_destroy_read_struct(&png, &info, nullptr);
    result->ok = true;
    return;
  }
  if (depth == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (gray && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  // tRNS and alpha are dropped: the color values stay as they are.
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  png_set_strip_alpha(png);
  if (gray && !out_gray) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t rowbytes = png_get_rowbytes(png, info);
  if (rowbytes != static_cast<size_t>(w) * result->channels)
    png_fail(png, "unexpected row size after conversion");
  pixels->resize(rowbytes * h);
  rows->resize(h);
  for (png_uint_32 y = 0; y < h; ++y) (*rows)[y] = pixels->data() + rowbytes * y;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);  // the rest of the IDAT data and IEND: catches cut files
  png_destroy_read_struct(&png, &info, nullptr);
  result->ok = true;
}

[[noreturn]] void bad_image(const std::string& name, const std::string& what) {
  fail("{}: {}", name, what);
}

}  // namespace

ImageFormat sniff_image_format(std::span<const uint8_t> b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::Jpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), kPngSignature, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

const char* image_format_extension(ImageFormat format) {
  switch (format) {
    case ImageFormat::Jpeg: return "jpg";
    case ImageFormat::Png: return "png";
    default: return "unknown";
  }
}

DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name,
                          ColorMode mode) {
  DecodedImage img;
  img.format = sniff_image_format(bytes);
  const bool keep_gray = mode == ColorMode::KeepGray;
  switch (img.format) {
    case ImageFormat::Jpeg: {
      JpegResult r;
      r.keep_gray = keep_gray;
      decode_jpeg_c(bytes.data(), bytes.size(), &img.pixels, &r);
      if (!r.ok) bad_image(name, std::string("corrupt JPEG: ") + r.message);
      img.width = r.width, img.height = r.height, img.channels = r.channels;
      break;
    }
    case ImageFormat::Png: {
      PngResult r;
      r.keep_gray = keep_gray;
      std::vector<png_bytep> rows;
      decode_png_c(bytes.data(), bytes.size(), &img.pixels, &rows, &r);
      if (!r.ok) bad_image(name, std::string("corrupt PNG: ") + r.message);
      img.width = r.width, img.height = r.height, img.channels = r.channels;
      break;
    }
    default:
      bad_image(name, bytes.empty() ? "empty file, not an image"
                                    : "not a JPEG or PNG image (unknown signature)");
  }
  return img;
}

DecodedRegion decode_image_region(std::span<const uint8_t> bytes, const std::string& name,
                                  ColorMode mode, const DecodeRegion& region) {
  MT_CHECK(region.width > 0 && region.height > 0 &&
               (region.scale_denom == 1 || region.scale_denom == 2 || region.scale_denom == 4 ||
                region.scale_denom == 8),
           "{}: a decode region needs a size and a scale of 1/1, 1/2, 1/4 or 1/8", name);
  DecodedRegion out;
  if (sniff_image_format(bytes) != ImageFormat::Jpeg) {  // the whole image at full size
    out.image = decode_image(bytes, name, mode);
    out.scaled_width = out.image.width, out.scaled_height = out.image.height;
    return out;
  }
  JpegResult r;
  r.keep_gray = mode == ColorMode::KeepGray;
  r.region = region;
  decode_jpeg_c(bytes.data(), bytes.size(), &out.image.pixels, &r);
  if (!r.ok) bad_image(name, std::string("corrupt JPEG: ") + r.message);
  out.image.format = ImageFormat::Jpeg;
  out.image.width = r.width, out.image.height = r.height, out.image.channels = r.channels;
  out.origin_x = r.origin_x, out.origin_y = r.origin_y;
  out.scaled_width = r.scaled_width, out.scaled_height = r.scaled_height;
  out.scale_denom = region.scale_denom;
  return out;
}

ImageSize read_image_size(std::span<const uint8_t> bytes, const std::string& name) {
  ImageSize s;
  switch (sniff_image_format(bytes)) {
    case ImageFormat::Jpeg: {
      JpegResult r;
      r.keep_gray = r.header_only = true;
      decode_jpeg_c(bytes.data(), bytes.size(), nullptr, &r);
      if (!r.ok) bad_image(name, std::string("corrupt JPEG: ") + r.message);
      s = {r.width, r.height, r.channels};
      break;
    }
    case ImageFormat::Png: {
      PngResult r;
      r.keep_gray = r.header_only = true;
      decode_png_c(bytes.data(), bytes.size(), nullptr, nullptr, &r);
      if (!r.ok) bad_image(name, std::string("corrupt PNG: ") + r.message);
      s = {r.width, r.height, r.channels};
      break;
    }
    default:
      bad_image(name, "not a JPEG or PNG image (unknown signature)");
  }
  return s;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("{}: cannot open: {}", path, errno_str());
  const std::streamoff size = in.tellg();
  if (size < 0) fail("{}: cannot read its size", path);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    fail("{}: read failed: {}", path, errno_str());
  return bytes;
}

DecodedImage decode_image_file(const std::string& path, ColorMode mode) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return decode_image(bytes, path, mode);
}

namespace {

struct PngWriteState {
  std::vector<uint8_t>* out;
  char message[256];
};

void png_write_mem(png_structp png, png_bytep data, png_size_t n) {
  auto* st = static_cast<PngWriteState*>(png_get_io_ptr(png));
  st->out->insert(st->out->end(), data, data + n);
}

void png_write_flush(png_structp) {}

bool encode_png_c(const uint8_t* pixels, int width, int height, int channels, int level,
                  std::vector<uint8_t>* out, char* message) {
  PngWriteState st;
  st.out = out;
  st.message[0] = 0;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &st, png_fail, png_warn);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    std::snprintf(message, 256, "%s", st.message);
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, &st, png_write_mem, png_write_flush);
  const int color = channels == 1   ? PNG_COLOR_TYPE_GRAY
                    : channels == 3 ? PNG_COLOR_TYPE_RGB
                                    : PNG_COLOR_TYPE_RGB_ALPHA;
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               color, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (level >= 0) png_set_compression_level(png, level);
  png_write_info(png, info);
  const size_t row = static_cast<size_t>(width) * channels;
  for (int y = 0; y < height; ++y)
    png_write_row(png, const_cast<png_bytep>(pixels + row * static_cast<size_t>(y)));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

std::vector<uint8_t> encode_png(std::span<const uint8_t> pixels, int width, int height,
                                int channels, int compression) {
  MT_CHECK(channels == 1 || channels == 3 || channels == 4,
           "encode_png: channels must be 1, 3 or 4, got {}", channels);
  MT_CHECK(width > 0 && height > 0, "encode_png: empty image {}x{}", width, height);
  MT_CHECK(pixels.size() == static_cast<size_t>(width) * height * channels,
           "encode_png: {} bytes for a {}x{}x{} image", pixels.size(), width, height, channels);
  MT_CHECK(compression >= -1 && compression <= 9, "encode_png: compression {} not in [-1, 9]",
           compression);
  std::vector<uint8_t> out;
  char message[256] = {0};
  if (!encode_png_c(pixels.data(), width, height, channels, compression, &out, message))
    fail("encode_png: libpng failed: {}", message[0] ? message : "out of memory");
  return out;
}

}  // namespace meshtrain::data
