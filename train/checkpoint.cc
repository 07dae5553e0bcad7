#include "train/checkpoint.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "base/files.h"
#include "base/hash.h"
#include "kernels/layers.h"

namespace edgecost::train {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints store float32 little-endian");

constexpr uint32_t kFormat = 1;

// Every tensor of the state, by name, in a fixed order, and the batch counts.
struct StateView {
  std::vector<std::pair<std::string, std::vector<float>*>> tensors;
  std::vector<std::pair<std::string, int64_t*>> counts;
};

StateView ViewOf(Executor& executor) {
  StateView view;
  for (int node = 0; node < executor.graph().nodes_size(); ++node) {
    const std::string at = std::to_string(node) + ".";
    for (int index = 0; kernels::Tensor* t = executor.LayerParameter(node, index); ++index) {
      view.tensors.push_back({"param " + at + std::to_string(index), &t->data});
    }
    for (int index = 0; kernels::Tensor* t = executor.RunningStat(node, index); ++index) {
      view.tensors.push_back({"running " + at + std::to_string(index), &t->data});
    }
    if (int64_t* tracked = executor.BatchesTracked(node)) {
      view.counts.push_back({"tracked " + std::to_string(node), tracked});
    }
  }
  std::vector<std::vector<float>*> optimizer = executor.optimizer().state_tensors();
  for (size_t k = 0; k < optimizer.size(); ++k)
    view.tensors.push_back({"optimizer " + std::to_string(k), optimizer[k]});
  return view;
}

}  // namespace

void CaptureState(Executor& executor, v1::TrainCheckpoint& checkpoint) {
  checkpoint.set_format(kFormat);
  checkpoint.set_steps_done(static_cast<uint64_t>(executor.updates()));
  checkpoint.clear_tensors();
  const StateView view = ViewOf(executor);
  for (const auto& [name, values] : view.tensors) {
    v1::CheckpointTensor& t = *checkpoint.add_tensors();
    t.set_name(name);
    t.set_float32_le(reinterpret_cast<const char*>(values->data()), values->size() * sizeof(float));
  }
  for (const auto& [name, count] : view.counts) {
    v1::CheckpointTensor& t = *checkpoint.add_tensors();
    t.set_name(name);
    t.set_count(*count);
  }
}

Status RestoreState(const v1::TrainCheckpoint& checkpoint, Executor& executor) {
  std::map<std::string, const v1::CheckpointTensor*> saved;
  for (const v1::CheckpointTensor& t : checkpoint.tensors()) {
    if (!saved.emplace(t.name(), &t).second) return InvalidArgument("the checkpoint holds '" + t.name() + "' twice");
  }
  const StateView view = ViewOf(executor);
  if (saved.size() != view.tensors.size() + view.counts.size()) {
    return InvalidArgument("the checkpoint holds " + std::to_string(saved.size()) + " tensors and this run has " +
                           std::to_string(view.tensors.size() + view.counts.size()) +
                           ": it was written by another model or optimizer");
  }
  // Checked whole before anything is copied: a bad checkpoint leaves the executor as it was.
  for (const auto& [name, values] : view.tensors) {
    auto it = saved.find(name);
    if (it == saved.end()) return InvalidArgument("the checkpoint has no tensor '" + name + "'");
    if (it->second->float32_le().size() != values->size() * sizeof(float)) {
      return InvalidArgument("the checkpoint's tensor '" + name + "' holds " +
                             std::to_string(it->second->float32_le().size() / sizeof(float)) +
                             " values; this run's has " + std::to_string(values->size()));
    }
  }
  for (const auto& [name, count] : view.counts) {
    if (!saved.count(name)) return InvalidArgument("the checkpoint has no count '" + name + "'");
  }
  for (const auto& [name, values] : view.tensors) {
    std::memcpy(values->data(), saved[name]->float32_le().data(), values->size() * sizeof(float));
  }
  for (const auto& [name, count] : view.counts) *count = saved[name]->count();
  executor.RestoreUpdates(static_cast<int64_t>(checkpoint.steps_done()));
  return Status::Ok();
}

namespace {

// The checksum of a checkpoint: its bytes without the checksum field.
std::string ChecksumOf(v1::TrainCheckpoint checkpoint) {
  checkpoint.clear_checksum();
  return Fnv1aHex(checkpoint.SerializeAsString());
}

}  // namespace

Status WriteCheckpoint(const std::string& path, const v1::TrainCheckpoint& checkpoint) {
  v1::TrainCheckpoint sealed = checkpoint;
  sealed.set_checksum(ChecksumOf(checkpoint));
  std::string bytes;
  if (!sealed.SerializeToString(&bytes)) return Internal("the checkpoint does not serialize (over 2 GB?)");
  return WriteFileAtomically(path, bytes);
}

Result<v1::TrainCheckpoint> ParseCheckpoint(const std::string& bytes, const std::string& what) {
  v1::TrainCheckpoint checkpoint;
  if (!checkpoint.ParseFromString(bytes) || checkpoint.format() != kFormat) {
    return InvalidArgument(what + " is damaged, or not an edgecost training checkpoint (format " +
                           std::to_string(kFormat) + ")");
  }
  if (checkpoint.checksum().empty() || checkpoint.checksum() != ChecksumOf(checkpoint)) {
    return DataLoss(what + " is damaged (cut short or altered: its checksum does not match): not resumed from; "
                           "remove it to start over, or restore a copy");
  }
  return checkpoint;
}

Result<v1::TrainCheckpoint> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("no checkpoint at " + path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return ParseCheckpoint(bytes.str(), path);
}

}  // namespace edgecost::train
