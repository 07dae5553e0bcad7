#include "train/images.h"

#include <png.h>
#include <setjmp.h>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace edgecost::train {
namespace {

Result<Image> DecodePng(std::string_view bytes, int channels, const std::string& what) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
    return InvalidArgument(what + ": not a readable PNG (" + png.message + ")");
  }
  if (static_cast<uint64_t>(png.width) * png.height > kMaxImagePixels) {
    png_image_free(&png);
    return InvalidArgument(what + " is " + std::to_string(png.width) + "x" + std::to_string(png.height) +
                           ", more pixels than edgecost decodes (" + std::to_string(kMaxImagePixels) + ")");
  }
  png.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;  // alpha composited over black
  Image image{png.width, png.height, channels, {}};
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.pixels.data(), 0, nullptr)) {
    const std::string why = png.message;
    png_image_free(&png);
    return InvalidArgument(what + ": damaged PNG (" + why + ")");
  }
  return image;
}

// libjpeg reports errors through a callback that must not return: it jumps back here.
struct JpegError {
  jpeg_error_mgr manager;
  jmp_buf back;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  JpegError* error = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, error->message);
  longjmp(error->back, 1);
}

// No C++ object with a destructor lives across setjmp here: the pixels are a plain buffer the caller owns.
bool DecodeJpegInto(std::string_view bytes, int channels, const std::string& what, Image* image, std::string* error) {
  jpeg_decompress_struct cinfo{};
  JpegError jerr{};
  cinfo.err = jpeg_std_error(&jerr.manager);
  jerr.manager.error_exit = JpegErrorExit;
  jerr.manager.output_message = [](j_common_ptr) {};  // warnings (a premature end) stay quiet
  if (setjmp(jerr.back)) {
    jpeg_destroy_decompress(&cinfo);
    *error = what + ": damaged JPEG (" + jerr.message + ")";
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (static_cast<uint64_t>(cinfo.image_width) * cinfo.image_height > kMaxImagePixels) {
    *error = what + " is " + std::to_string(cinfo.image_width) + "x" + std::to_string(cinfo.image_height) +
             ", more pixels than edgecost decodes (" + std::to_string(kMaxImagePixels) + ")";
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  image->width = cinfo.output_width;
  image->height = cinfo.output_height;
  image->channels = cinfo.output_components;
  image->pixels.resize(static_cast<size_t>(image->width * image->height * image->channels));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = image->pixels.data() + static_cast<size_t>(cinfo.output_scanline) * image->width * image->channels;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace

Result<Image> DecodeImage(std::string_view bytes, int channels, const std::string& what) {
  if (channels != 1 && channels != 3) {
    return InvalidArgument("images feed models of 1 (grayscale) or 3 (RGB) channels, not " + std::to_string(channels));
  }
  if (bytes.size() >= 8 && bytes.substr(0, 8) == "\x89PNG\r\n\x1a\n") return DecodePng(bytes, channels, what);
  if (bytes.size() >= 3 && bytes.substr(0, 3) == "\xff\xd8\xff") {
    Image image;
    std::string error;
    if (!DecodeJpegInto(bytes, channels, what, &image, &error)) return InvalidArgument(error);
    if (image.channels != channels) return InvalidArgument(what + ": the JPEG decoder gave another channel count");
    return image;
  }
  return InvalidArgument(what + " is neither a PNG nor a JPEG file");
}

std::vector<float> ResizeBilinear(const Image& image, int64_t height, int64_t width) {
  const int64_t c_count = image.channels;
  std::vector<float> out(static_cast<size_t>(c_count * height * width));
  // Source coordinate of output index i: (i + 0.5) * in / out - 0.5, clamped at 0 (PyTorch's rule).
  auto taps = [](int64_t out_size, int64_t in_size) {
    std::vector<std::pair<int64_t, float>> t(static_cast<size_t>(out_size));
    const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
    for (int64_t i = 0; i < out_size; ++i) {
      const double source = std::max(0.0, (static_cast<double>(i) + 0.5) * scale - 0.5);
      const int64_t low = std::min<int64_t>(static_cast<int64_t>(source), in_size - 1);
      t[static_cast<size_t>(i)] = {low, static_cast<float>(source - static_cast<double>(low))};
    }
    return t;
  };
  const auto rows = taps(height, image.height), cols = taps(width, image.width);
  auto pixel = [&](int64_t y, int64_t x, int64_t c) {
    return static_cast<float>(image.pixels[static_cast<size_t>((y * image.width + x) * c_count + c)]);
  };
  for (int64_t c = 0; c < c_count; ++c) {
    for (int64_t y = 0; y < height; ++y) {
      const auto [y0, fy] = rows[static_cast<size_t>(y)];
      const int64_t y1 = std::min(y0 + 1, image.height - 1);
      for (int64_t x = 0; x < width; ++x) {
        const auto [x0, fx] = cols[static_cast<size_t>(x)];
        const int64_t x1 = std::min(x0 + 1, image.width - 1);
        const float top = pixel(y0, x0, c) * (1 - fx) + pixel(y0, x1, c) * fx;
        const float bottom = pixel(y1, x0, c) * (1 - fx) + pixel(y1, x1, c) * fx;
        out[static_cast<size_t>((c * height + y) * width + x)] = top * (1 - fy) + bottom * fy;
      }
    }
  }
  return out;
}

}  // namespace edgecost::train
