// Training data for the executor: a synthetic batch from a fixed seed, or
// CIFAR-10's binary batch format (data_batch_N.bin: records of one label byte
// and 3072 pixel bytes, 3 planes of 32x32, red, green, blue), normalised to
// (x / 255 - 0.5) / 0.25. Step s takes the records s * B .. s * B + B - 1,
// wrapping around the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "train/executor.h"

namespace edgecost::train {

class DataSource {
 public:
  // Synthetic: normal inputs (uniform token ids in [0, id_limit) when id_limit > 0, for a model
  // whose input feeds an embedding) and uniform labels, the same batch for every step.
  static DataSource Synthetic(int64_t input_elements, int64_t rows, int64_t classes, uint32_t seed,
                              int64_t id_limit = 0);
  // CIFAR-10 binary records; the model must take rows x 3 x 32 x 32 inputs and at least 10 classes.
  static Result<DataSource> Cifar10(const std::string& path, int64_t input_elements, int64_t rows, int64_t classes);

  Batch BatchFor(int step) const;
  std::string Describe() const { return description_; }
  int64_t records() const { return records_; }

 private:
  std::string description_;
  Batch fixed_;                // synthetic
  std::vector<uint8_t> file_;  // CIFAR-10 records
  int64_t records_ = 0, rows_ = 0;
};

}  // namespace edgecost::train
