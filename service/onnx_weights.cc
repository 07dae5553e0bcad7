#include "service/onnx_weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <onnx/onnx_pb.h>

#include "base/files.h"
#include "kernels/layers.h"
#include "train/numpy_files.h"

namespace edgecost::service {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data and .npy are little-endian");

using Dims = std::vector<int64_t>;

std::string DimsText(const Dims& dims) {
  std::string text = "(";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + ")";
}

// Leading 1s dropped: a Gemm's bias may be (1, N), a layer's is (N).
Dims Squeezed(const Dims& dims) {
  size_t first = 0;
  while (first + 1 < dims.size() && dims[first] == 1) ++first;
  return Dims(dims.begin() + static_cast<std::ptrdiff_t>(first), dims.end());
}

const char* TypeName(int type) {
  switch (type) {
    case onnx::TensorProto::FLOAT: return "float32";
    case onnx::TensorProto::DOUBLE: return "float64";
    case onnx::TensorProto::FLOAT16: return "float16";
    case onnx::TensorProto::BFLOAT16: return "bfloat16";
    case onnx::TensorProto::INT8: return "int8";
    case onnx::TensorProto::UINT8: return "uint8";
    case onnx::TensorProto::INT32: return "int32";
    case onnx::TensorProto::INT64: return "int64";
    default: return "not float32";
  }
}

struct Initializers {
  std::map<std::string, onnx::TensorProto*> by_name;
};

Initializers IndexInitializers(const graph::OnnxModel& m) {
  Initializers out;
  for (onnx::TensorProto& t : *m.model->mutable_graph()->mutable_initializer()) out.by_name[t.name()] = &t;
  return out;
}

// The initializer's float32 values and dims; InvalidArgument otherwise.
Result<std::vector<float>> Values(const graph::OnnxModel& m, const onnx::TensorProto& t) {
  const std::string what = m.origin + ": initializer '" + t.name() + "'";
  if (t.data_location() == onnx::TensorProto::EXTERNAL || t.external_data_size() > 0) {
    return InvalidArgument(what + " keeps its data in an external file, which edgecost does not read; export the "
                                  "model with its weights inside it");
  }
  if (t.data_type() != onnx::TensorProto::FLOAT) {
    return InvalidArgument(what + " is " + TypeName(t.data_type()) +
                           ": edgecost loads float32 weights only; export the model in float32 (model.float())");
  }
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && count > (int64_t{1} << 40) / d)) return InvalidArgument(what + " has a malformed shape");
    count *= d;
  }
  std::vector<float> values(static_cast<size_t>(count));
  if (t.has_raw_data()) {
    if (t.raw_data().size() != values.size() * sizeof(float)) {
      return InvalidArgument(what + " holds " + std::to_string(t.raw_data().size()) + " bytes for " +
                             std::to_string(count) + " float32 values");
    }
    std::memcpy(values.data(), t.raw_data().data(), t.raw_data().size());
  } else {
    if (t.float_data_size() != count) {
      return InvalidArgument(what + " holds " + std::to_string(t.float_data_size()) + " values for shape " +
                             DimsText({t.dims().begin(), t.dims().end()}));
    }
    std::copy(t.float_data().begin(), t.float_data().end(), values.begin());
  }
  return values;
}

// What to do for one parameter of one layer.
struct Binding {
  int node = 0;
  int index = 0;  // the layer's parameter; >= its parameter count: a batch norm's running statistic
  std::string name;
  bool transposed = false;  // the file's (in, out) for the layer's (out, in)
  kernels::Tensor* tensor = nullptr;   // the parameter's or running statistic's values; null: none (kept as the file's)
  int64_t* batches_tracked = nullptr;  // with a batch norm's running variance: its num_batches_tracked
};

// Every parameter of every layer with its initializer, checked: present, float32, same shape.
Result<std::vector<Binding>> Bind(const graph::OnnxModel& m, const Initializers& init, train::Executor& executor) {
  std::vector<Binding> out;
  const v1::TrainingGraph& graph = executor.graph();
  for (int i = 0; i < m.forward.size(); ++i) {
    const graph::Layer& layer = m.forward.layers()[static_cast<size_t>(i)];
    const bool has_params = executor.LayerParameter(i, 0) != nullptr;
    if (!has_params) continue;
    const std::string node = "node " + std::to_string(i) + " ('" + graph.nodes(i).name() + "', " +
                             graph.nodes(i).op_kind() + ")";
    if (layer.param_names.empty()) {
      return InvalidArgument(m.origin + ": " + node +
                             " has parameters whose initializers edgecost does not map yet (it loads those of "
                             "convolutions, batch norms and linear layers); train it from --init random");
    }
    int param_count = 0;
    while (executor.LayerParameter(i, param_count)) ++param_count;
    for (int k = 0; k < static_cast<int>(layer.param_names.size()); ++k) {
      const std::string& name = layer.param_names[static_cast<size_t>(k)];
      kernels::Tensor* tensor = executor.LayerParameter(i, k);
      kernels::Tensor* running_stat = tensor ? nullptr : executor.RunningStat(i, k - param_count);
      if (name.empty()) {
        if (tensor || running_stat) {
          return InvalidArgument(m.origin + ": " + node + " has a parameter " + std::to_string(k) +
                                 " that no initializer of the file gives");
        }
        continue;
      }
      const auto it = init.by_name.find(name);
      if (it == init.by_name.end()) {
        return InvalidArgument(m.origin + ": " + node + " reads '" + name + "', which is not an initializer of the file");
      }
      const onnx::TensorProto& t = *it->second;
      const Dims file(t.dims().begin(), t.dims().end());
      Dims expected;
      bool transposed = false;
      if (tensor) {
        expected = tensor->dims;
        transposed = k == 0 && layer.param_transposed && expected.size() == 2;
        if (transposed) expected = {expected[1], expected[0]};
      } else {
        // A batch norm's running mean or variance: one value per channel, like its scale.
        kernels::Tensor* scale = executor.LayerParameter(i, 0);
        expected = scale ? scale->dims : Dims{};
      }
      if (Squeezed(file) != Squeezed(expected)) {
        return InvalidArgument(m.origin + ": initializer '" + name + "' has shape " + DimsText(file) + ", but " + node +
                               " needs " + DimsText(expected) + (transposed ? " (the file's (in, out) layout)" : ""));
      }
      if (t.data_type() != onnx::TensorProto::FLOAT) EC_RETURN_IF_ERROR(Values(m, t).status());
      if (running_stat) {
        out.push_back({i, k, name, false, running_stat, k - param_count == 1 ? executor.BatchesTracked(i) : nullptr});
      } else {
        out.push_back({i, k, name, transposed, tensor});
      }
    }
  }
  return out;
}

void CopyIn(const std::vector<float>& file, bool transposed, kernels::Tensor& t) {
  if (!transposed) {
    std::copy(file.begin(), file.end(), t.data.begin());
    return;
  }
  const int64_t rows = t.dims[0], cols = t.dims[1];  // the layer's (out, in); the file's (in, out)
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t c = 0; c < cols; ++c) t.data[static_cast<size_t>(o * cols + c)] = file[static_cast<size_t>(c * rows + o)];
  }
}

std::vector<float> CopyOut(const kernels::Tensor& t, bool transposed) {
  if (!transposed) return t.data;
  std::vector<float> file(t.data.size());
  const int64_t rows = t.dims[0], cols = t.dims[1];
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t c = 0; c < cols; ++c) file[static_cast<size_t>(c * rows + o)] = t.data[static_cast<size_t>(o * cols + c)];
  }
  return file;
}

// PyTorch's state-dict key of a batch norm's num_batches_tracked, beside its running variance's.
std::string BatchesTrackedKey(const std::string& running_var_name) {
  const std::string suffix = "running_var";
  const std::string prefix = running_var_name.ends_with(suffix)
                                 ? running_var_name.substr(0, running_var_name.size() - suffix.size())
                                 : running_var_name + ".";
  return prefix + "num_batches_tracked";
}

void PutLe16(std::string& s, uint32_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>((v >> 8) & 0xff));
}

}  // namespace

Status LoadOnnxWeights(const graph::OnnxModel& model, train::Executor& executor, std::vector<std::string>& notes,
                       LoadedInitializers after) {
  const Initializers init = IndexInitializers(model);
  EC_ASSIGN_OR_RETURN(std::vector<Binding> bindings, Bind(model, init, executor));
  size_t loaded = 0, stats = 0;
  for (const Binding& b : bindings) {
    EC_ASSIGN_OR_RETURN(std::vector<float> values, Values(model, *init.by_name.at(b.name)));
    if (!b.tensor) continue;
    CopyIn(values, b.transposed, *b.tensor);
    // ONNX keeps no num_batches_tracked: the count starts again (it matters only to momentum=None).
    if (b.batches_tracked) *b.batches_tracked = 0;
    ++(executor.LayerParameter(b.node, b.index) == b.tensor ? loaded : stats);
  }
  // The layers hold these values now, and WriteTrainedOnnx writes them from the layers: a run that
  // loads the model once keeps no second copy through training.
  if (after == LoadedInitializers::kFree) {
    for (const Binding& b : bindings) {
      if (!b.tensor) continue;
      onnx::TensorProto& t = *init.by_name.at(b.name);
      t.clear_raw_data();
      t.clear_float_data();
    }
  }
  notes.push_back("weights: " + std::to_string(loaded) + " parameter tensors and " + std::to_string(stats) +
                  " batch-norm running statistics from " + model.origin +
                  "'s initializers (--init random draws them from the seed instead)");
  return Status::Ok();
}

Status WriteTrainedOnnx(const graph::OnnxModel& model, train::Executor& executor, const std::string& onnx_path,
                        const std::string& npz_path, std::vector<std::string>& notes) {
  const Initializers init = IndexInitializers(model);
  EC_ASSIGN_OR_RETURN(std::vector<Binding> bindings, Bind(model, init, executor));
  std::vector<NpyArray> arrays;
  std::set<std::string> written;
  for (const Binding& b : bindings) {
    onnx::TensorProto& t = *init.by_name.at(b.name);
    const Dims dims(t.dims().begin(), t.dims().end());
    if (!written.insert(b.name).second) {
      notes.push_back("initializer '" + b.name + "' feeds several layers, which trained their own copies: the first's "
                      "is written");
      continue;
    }
    std::vector<float> values;
    if (b.tensor) {
      values = CopyOut(*b.tensor, b.transposed);
      if (const auto bad = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
          bad != values.end()) {
        return FailedPrecondition("the trained weights of '" + b.name + "' hold " +
                                  (std::isnan(*bad) ? "NaN" : "an infinity") + " (element " +
                                  std::to_string(bad - values.begin()) +
                                  "): not written; the data or the learning rate made training diverge");
      }
      t.clear_float_data();
      t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    } else {
      EC_ASSIGN_OR_RETURN(values, Values(model, t));
    }
    arrays.push_back({b.name, dims, std::move(values)});
    if (b.batches_tracked) {
      arrays.push_back({.name = BatchesTrackedKey(b.name), .shape = {}, .int64_values = {*b.batches_tracked}});
    }
  }
  std::string bytes;
  if (!model.model->SerializeToString(&bytes)) return Internal("cannot serialize the trained model");
  if (!npz_path.empty()) {
    EC_ASSIGN_OR_RETURN(const std::string npz, NpzBytes(arrays));
    EC_RETURN_IF_ERROR(WriteFileAtomically(npz_path, npz));
  }
  return WriteFileAtomically(onnx_path, bytes);
}

Result<std::string> NpzBytes(const std::vector<NpyArray>& arrays) {
  std::vector<std::pair<std::string, std::string>> members;
  for (const NpyArray& a : arrays) {
    int64_t count = 1;
    for (int64_t d : a.shape) count *= d;
    const bool int64 = !a.int64_values.empty();
    const size_t stored = int64 ? a.int64_values.size() : a.values.size();
    if (count != static_cast<int64_t>(stored)) {
      return Internal("array '" + a.name + "' has " + std::to_string(a.values.size()) + " values for its shape");
    }
    // .npy version 1.0: magic, version, header length, a Python dict padded to 64 bytes, the data.
    std::string shape = "(";  // "()", "(3,)", "(3, 4)"
    for (size_t i = 0; i < a.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape[i]);
    shape += a.shape.size() == 1 ? ",)" : ")";
    std::string header =
        std::string("{'descr': '") + (int64 ? "<i8" : "<f4") + "', 'fortran_order': False, 'shape': " + shape + ", }";
    while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
    header.push_back('\n');
    std::string npy = "\x93NUMPY";
    npy.push_back(1);
    npy.push_back(0);
    PutLe16(npy, static_cast<uint32_t>(header.size()));
    npy += header;
    if (int64) {
      npy.append(reinterpret_cast<const char*>(a.int64_values.data()), a.int64_values.size() * sizeof(int64_t));
    } else {
      npy.append(reinterpret_cast<const char*>(a.values.data()), a.values.size() * sizeof(float));
    }
    members.emplace_back(a.name + ".npy", std::move(npy));
  }
  return train::WriteZip(members);
}

}  // namespace edgecost::service
