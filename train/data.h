// Training data for the executor, as a PyTorch DataLoader with shuffle=True and
// drop_last=True would give it: a data set of records (inputs and a class
// label), a held-out part kept aside before anything is shuffled, and the rest
// in a seeded order that changes every epoch.
//
// Where records come from (DataSource::Open picks the format from the path):
// - a folder with one subfolder of images per class (torchvision's ImageFolder:
//   class index = position of the subfolder's name in byte order; files ending in
//   .png, .jpg or .jpeg at any depth under it, in path order), decoded when a
//   batch needs them and resized to the model's input (train/images.h);
// - NumPy arrays: `x.npy` with a `y.npy` (or `labels.npy`) beside it, or an
//   .npz archive with keys x and y (DataOptions::input_key, label_key); inputs of
//   N x (the model's input per row), labels of N integers (train/numpy_files.h);
// - CIFAR-10's binary batches (.bin: records of a label byte and 3x32x32 pixel bytes).
// Normalization: value = (x - mean[c]) / std[c] per channel, where x is a byte's
// value / 255 (images, uint8 arrays, CIFAR-10) or a float array's own value; with
// no mean and std given, x alone (CIFAR-10 keeps its (x - 0.5) / 0.25).
//
// A synthetic source (no path) is one fixed batch, the same every step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "train/executor.h"

namespace edgecost::train {

struct DataOptions {
  std::string path;
  std::vector<float> mean, std;                  // per channel, or one value for all; empty: none
  std::string input_key = "x", label_key = "y";  // an .npz archive's arrays
  double val_split = 0;                          // the fraction of the records held out (spread evenly over them)
  std::string val_path;                          // or a held-out data set of its own (same format rules)
  uint32_t seed = 1;                             // of each epoch's order
};

// What the model takes: its input node's dims (batch rows first) and its loss's classes.
struct ModelInput {
  std::vector<int64_t> dims;
  int64_t classes = 0;
};

// A data set's records; Read writes record i's inputs (the model's input for one row) and gives its label.
class Records {
 public:
  virtual ~Records() = default;
  virtual int64_t size() const = 0;
  virtual Result<int32_t> Read(int64_t index, float* inputs) const = 0;
  virtual std::string Describe() const = 0;
};

// The files a data set names: one path, or INPUTS.npy,LABELS.npy (a pair of .npy files, one comma).
// Any other comma is refused, so that every reader of the name (the agent's check of its data
// folders, OpenRecords) reads the same files.
Result<std::vector<std::string>> DataPaths(const std::string& spec);

// Opens the records at `path` for a model (its format from the path), with their shape and labels checked.
Result<std::unique_ptr<Records>> OpenRecords(const std::string& path, const DataOptions& options,
                                             const ModelInput& model);

class DataSource {
 public:
  // Synthetic: normal inputs (uniform token ids in [0, id_limit) when id_limit > 0, for a model
  // whose input feeds an embedding) and uniform labels, the same batch for every step.
  static DataSource Synthetic(int64_t input_elements, int64_t rows, int64_t classes, uint32_t seed,
                              int64_t id_limit = 0);
  // A user's data set for `model`, split and ordered as `options` say.
  static Result<DataSource> Open(const DataOptions& options, const ModelInput& model);

  // The batch of step `step` (0-based): epoch step / batches_per_epoch(), in that epoch's order.
  Result<Batch> BatchFor(int64_t step);
  // Full batches an epoch has (the last partial one is dropped); 1 for a synthetic source.
  int64_t batches_per_epoch() const;
  int64_t dropped_per_epoch() const;  // records of the partial batch left out of every epoch
  int64_t train_records() const { return static_cast<int64_t>(train_.size()); }
  // The records of epoch `epoch` in order (the training records' indexes), for tests.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

  // Held-out records in batches of the model's rows; the last is padded with repeats of its last
  // record and counts `*rows` rows.
  int64_t held_out_records() const;
  int64_t held_out_batches() const;
  Result<Batch> HeldOutBatch(int64_t index, int64_t* rows) const;
  // Indexes into the records of the held-out part (with val_split; empty with val_path), for tests.
  const std::vector<int64_t>& held_out_indexes() const { return held_out_; }

  std::string Describe() const { return description_; }
  // A hash of every record as the model gets it (inputs after --mean/--std, and labels) and of the
  // split: a resumed run must read the same data. Reads the whole data set.
  Result<std::string> ContentHash() const;

 private:
  Result<Batch> Gather(const Records& records, const std::vector<int64_t>& indexes) const;

  std::string description_;
  Batch fixed_;                            // synthetic
  std::shared_ptr<Records> records_;       // null: synthetic
  std::shared_ptr<Records> val_records_;   // --val-data; null: held out of records_
  std::vector<int64_t> train_, held_out_;  // indexes into records_
  int64_t rows_ = 0, sample_elements_ = 0;
  uint32_t seed_ = 1;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;  // order_epoch_'s permutation of train_
};

}  // namespace edgecost::train
