// Image files as a model's input: PNG (libpng's simplified API) and JPEG
// (libjpeg-turbo) decoded to 8-bit grayscale or RGB, as the model's channel
// count asks, then resized to its input height and width with bilinear
// interpolation (half-pixel centres, no antialiasing: PyTorch's
// F.interpolate(mode="bilinear", align_corners=False)). The files are untrusted:
// a damaged or truncated file, an unsupported colour space or an image of more
// than kMaxImagePixels is an InvalidArgument naming it, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace edgecost::train {

inline constexpr uint64_t kMaxImagePixels = uint64_t{1} << 26;  // 64 Mpixel, 192 MiB of RGB

// Decoded pixels, interleaved (HWC), 8 bits per channel.
struct Image {
  int64_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

// `channels`: 1 (grayscale) or 3 (RGB); the file's own colour type is converted. `what` names it in errors.
Result<Image> DecodeImage(std::string_view bytes, int channels, const std::string& what);

// Planar (CHW) values in [0, 255] at height x width.
std::vector<float> ResizeBilinear(const Image& image, int64_t height, int64_t width);

}  // namespace edgecost::train
