#include "train/data.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>

namespace edgecost::train {
namespace {

constexpr int64_t kCifarPixels = 3 * 32 * 32;
constexpr int64_t kCifarRecord = 1 + kCifarPixels;

}  // namespace

DataSource DataSource::Synthetic(int64_t input_elements, int64_t rows, int64_t classes, uint32_t seed,
                                 int64_t id_limit) {
  DataSource source;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> id(0, std::max<int64_t>(1, id_limit) - 1);
  source.fixed_.inputs.resize(static_cast<size_t>(input_elements));
  for (float& v : source.fixed_.inputs) v = id_limit > 0 ? static_cast<float>(id(rng)) : normal(rng);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(std::max<int64_t>(1, classes)) - 1);
  for (int64_t r = 0; r < rows; ++r) source.fixed_.labels.push_back(label(rng));
  source.rows_ = rows;
  source.description_ = "synthetic (seed " + std::to_string(seed) + ")";
  return source;
}

Result<DataSource> DataSource::Cifar10(const std::string& path, int64_t input_elements, int64_t rows, int64_t classes) {
  if (input_elements != rows * kCifarPixels) {
    return InvalidArgument("CIFAR-10 images are 3x32x32 but the model takes " + std::to_string(input_elements / rows) +
                           " values per row; use a model with 32x32 RGB input (e.g. resnet18_cifar)");
  }
  if (classes < 10) return InvalidArgument("CIFAR-10 has 10 classes; the model's loss has " + std::to_string(classes));
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  DataSource source;
  source.file_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const int64_t size = static_cast<int64_t>(source.file_.size());
  if (size == 0 || size % kCifarRecord != 0) {
    return InvalidArgument(path +
                           " is not in CIFAR-10's binary format (records of 1 label byte and 3072 pixel bytes; " +
                           std::to_string(size) + " B is not a multiple of 3073)");
  }
  source.records_ = size / kCifarRecord;
  for (int64_t r = 0; r < source.records_; ++r) {
    if (source.file_[static_cast<size_t>(r * kCifarRecord)] > 9) {
      return InvalidArgument(path + ": record " + std::to_string(r) + " has label " +
                             std::to_string(source.file_[static_cast<size_t>(r * kCifarRecord)]) +
                             "; CIFAR-10 labels are 0..9");
    }
  }
  source.rows_ = rows;
  source.description_ = path + " (" + std::to_string(source.records_) + " CIFAR-10 records)";
  return source;
}

Batch DataSource::BatchFor(int step) const {
  if (records_ == 0) return fixed_;
  Batch batch;
  batch.inputs.reserve(static_cast<size_t>(rows_ * kCifarPixels));
  for (int64_t r = 0; r < rows_; ++r) {
    const int64_t record = (static_cast<int64_t>(step) * rows_ + r) % records_;
    const uint8_t* at = file_.data() + record * kCifarRecord;
    batch.labels.push_back(at[0]);
    for (int64_t i = 1; i <= kCifarPixels; ++i) batch.inputs.push_back((at[i] / 255.0f - 0.5f) / 0.25f);
  }
  return batch;
}

}  // namespace edgecost::train
