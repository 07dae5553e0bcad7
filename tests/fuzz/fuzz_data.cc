// Fuzz target for the data files `edgecost train --data` reads (train/numpy_files.h, train/images.h)
// and the checkpoints `train --resume` reads (train/checkpoint.h).
//
// Input: byte 0 picks the kind (modulo 4: 0 a .npy file, 1 a zip archive whose members are parsed
// as .npy files, as an .npz is, 2 an image decoded to grayscale or RGB by byte 1's low bit, then
// resized to 5x7, 3 a checkpoint, read as a file would be and, as if its checksum held, restored
// into a small model's executor); the rest is the file. Oracle: no crash, no sanitizer report;
// what parses holds as many bytes as its shape and dtype say, a decoded image as many pixels as its
// size, and a checkpoint that restores captures back to itself.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "graph/derive.h"
#include "graph/zoo.h"
#include "train/checkpoint.h"
#include "train/images.h"
#include "train/numpy_files.h"

namespace edgecost {
namespace {

void FuzzNpy(std::string_view bytes) {
  Result<train::NumpyArray> array = train::ParseNpy(bytes, "fuzz.npy");
  if (!array.ok()) return;
  if (static_cast<int64_t>(array->data.size()) != array->count() * array->item_bytes) std::abort();
  if (array->count() > 0) (void)array->At(array->count() - 1);
}

void FuzzCheckpoint(const std::string& bytes) {
  (void)train::ParseCheckpoint(bytes, "fuzz.ckpt");
  // A checkpoint whose checksum was forged (or recomputed by hand) must still be checked whole.
  v1::TrainCheckpoint checkpoint;
  if (!checkpoint.ParseFromString(bytes)) return;
  static train::Executor* const executor = [] {
    auto graph = graph::ZooTrainingGraph("linear", 2, graph::kDefaultDerivation);
    if (!graph.ok()) std::abort();
    auto created = train::Executor::Create(*graph, {.seed = 1});
    if (!created.ok()) std::abort();
    return created->release();
  }();
  if (!train::RestoreState(checkpoint, *executor).ok()) return;
  v1::TrainCheckpoint captured;
  train::CaptureState(*executor, captured);
  if (captured.tensors_size() != checkpoint.tensors_size()) std::abort();
}

}  // namespace
}  // namespace edgecost

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgecost;
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);  // a damaged checkpoint's strings are not worth a line each
    return true;
  }();
  (void)quiet;
  if (size < 2) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      FuzzNpy(bytes);
      break;
    case 1: {
      // Members the fuzzer inflates stay small: a few MB is enough to reach every path.
      auto members = train::ReadZip(bytes, "fuzz.npz", uint64_t{1} << 22);
      if (members.ok()) {
        for (const auto& [name, content] : *members) FuzzNpy(content);
      }
      break;
    }
    case 3:
      FuzzCheckpoint(std::string(bytes));
      break;
    default: {
      const int channels = (data[1] & 1) ? 3 : 1;
      auto image = train::DecodeImage(bytes.substr(1), channels, "fuzz image");
      if (!image.ok()) break;
      if (image->pixels.size() != static_cast<size_t>(image->width * image->height * channels)) std::abort();
      if (train::ResizeBilinear(*image, 5, 7).size() != static_cast<size_t>(5 * 7 * channels)) std::abort();
    }
  }
  return 0;
}
