// An ONNX model's own weights into the executor, and the trained weights back out.
//
// The importer records, for every layer whose parameters it maps (convolutions, batch norms,
// linear layers from Gemm or MatMul), the initializer behind each parameter
// (graph::Layer::param_names). Loading reads those initializers from the file (float32 only,
// raw_data or float_data), checks each shape against the layer's (a conv's OIHW, a linear layer's
// (out, in): a MatMul's or a Gemm's without transB is (in, out) in the file and is transposed) and
// copies them in. Writing puts the trained values back into the same ModelProto (the graph
// untouched) and writes a NumPy .npz of them keyed by the initializer names, which are the
// module's state_dict keys for a PyTorch export that kept them. A batch norm's running mean and
// variance load into the executor's (which every training step updates, as PyTorch's training mode
// does) and are written back; the .npz adds its num_batches_tracked (ONNX has none: it counts the
// steps edgecost ran), so that load_state_dict(strict=True) takes it.
//
// The file is parsed here, in the calling process, by protobuf alone: the ONNX library's shape
// inference, which untrusted files crash, runs only in the importer's isolated child.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "graph/resolve.h"
#include "train/executor.h"

namespace edgecost::service {

// Copies the model's initializers into the executor's layers (node i is forward layer i).
// InvalidArgument naming the initializer when one is missing, not float32, or of another shape,
// and naming the node when the importer mapped none of a layer's parameters. kFree frees the
// initializers loaded in `model` (the layers hold their values, and WriteTrainedOnnx writes them
// back), for a run that loads the model once; kKeep keeps them for another executor.
enum class LoadedInitializers { kKeep, kFree };
Status LoadOnnxWeights(const graph::OnnxModel& model, train::Executor& executor, std::vector<std::string>& notes,
                       LoadedInitializers after = LoadedInitializers::kKeep);

// Sets the model's initializers to the executor's parameters and writes it to `onnx_path` and, unless
// empty, the .npz state dict to `npz_path`; each through a temporary file renamed into place.
Status WriteTrainedOnnx(const graph::OnnxModel& model, train::Executor& executor, const std::string& onnx_path,
                        const std::string& npz_path, std::vector<std::string>& notes);

// A NumPy .npz (an uncompressed zip of .npy files) of float32 (or int64) arrays, in the given order.
struct NpyArray {
  std::string name;  // the key np.load gives it (the entry is name + ".npy")
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<int64_t> int64_values;  // instead of values: an int64 array (num_batches_tracked)
};
Result<std::string> NpzBytes(const std::vector<NpyArray>& arrays);

}  // namespace edgecost::service
