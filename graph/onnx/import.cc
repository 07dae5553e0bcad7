// ImportOnnx (a file's bytes to ImportOnnxBytes, isolation.cc), and the import the isolated child
// runs: parse, check the ops and opset, set the batch, infer shapes with ONNX, walk the nodes.
#include "graph/onnx/import.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "graph/onnx/importer.h"

namespace edgecost::graph {

Result<ForwardGraph> ImportOnnx(const std::string& path, int batch_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read ONNX model '" + path + "'");
  // One read into a string of the file's size: a stringstream grows by copies and str() copies again,
  // which for a 323 MB model (RegNetY-16GF) was most of the import's time.
  std::error_code size_error;
  const uintmax_t size = std::filesystem::file_size(path, size_error);
  std::string bytes;
  if (!size_error) {
    bytes.resize(static_cast<size_t>(size));
    in.read(bytes.data(), static_cast<std::streamsize>(size));
    bytes.resize(static_cast<size_t>(in.gcount()));
  }
  if (size_error || in.bad()) {  // not a regular file (a pipe): read what it gives
    in.clear();
    in.seekg(0);
    std::stringstream stream;
    stream << in.rdbuf();
    bytes = stream.str();
  }
  return ImportOnnxBytes(bytes, path, std::filesystem::path(path).stem().string(), batch_size);
}

namespace onnx_import {
namespace {

// Sets the data input's batch and forgets the exporter's shapes, which were
// inferred at its batch: shape inference computes them again. Returns the
// export's batch, 0 when nothing was changed, or minus the logits' rows when
// the input's first axis is not the batch (and the logits' rows are not `batch_size`).
int64_t Rebatch(onnx::ModelProto& model, int batch_size) {
  onnx::GraphProto& g = *model.mutable_graph();
  std::set<std::string> weights;
  for (const onnx::TensorProto& t : g.initializer()) weights.insert(t.name());
  for (onnx::ValueInfoProto& input : *g.mutable_input()) {
    if (weights.count(input.name())) continue;
    auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() < 1 || !shape->dim(0).has_dim_value()) return 0;
    const int64_t exported = shape->dim(0).dim_value();
    if (exported == batch_size) return 0;
    // Logits whose rows are not the input's first axis (a time-major sequence, time first): that
    // axis is not the batch, so it is not changed; the model runs at its exported batch, or not at all.
    if (g.output_size() == 1 && g.output(0).type().tensor_type().shape().dim_size() >= 1 &&
        g.output(0).type().tensor_type().shape().dim(0).has_dim_value()) {
      const int64_t rows = g.output(0).type().tensor_type().shape().dim(0).dim_value();
      if (rows != exported) return rows == batch_size ? 0 : -rows;
    }
    shape->mutable_dim(0)->set_dim_value(batch_size);
    g.clear_value_info();
    for (onnx::ValueInfoProto& output : *g.mutable_output())
      output.mutable_type()->mutable_tensor_type()->clear_shape();
    return exported;
  }
  return 0;
}

Status ParseModel(const std::string& bytes, const std::string& origin, onnx::ModelProto& model) {
  if (!model.ParseFromString(bytes)) {
    return InvalidArgument(origin + " is not an ONNX model (protobuf parse failed)");
  }
  if (model.graph().node_size() == 0) return InvalidArgument(origin + " is not an ONNX model: its graph has no nodes");
  return CheckOpsAndOpset(model, origin);
}

Status InferShapes(onnx::ModelProto& model, const std::string& origin) {
  try {
    // Data propagation gives the shapes that shape arithmetic computes (Reshape targets).
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(false, 0, true));
  } catch (const std::exception& e) {
    return InvalidArgument(origin + ": ONNX shape inference failed: " + e.what());
  }
  return Status::Ok();
}

}  // namespace

Result<ForwardGraph> ImportInProcess(const std::string& bytes, const std::string& origin, const std::string& name,
                                     int batch_size) {
  onnx::ModelProto model;
  EC_RETURN_IF_ERROR(ParseModel(bytes, origin, model));
  const int64_t exported_batch = batch_size > 0 ? Rebatch(model, batch_size) : 0;
  if (exported_batch < 0) {
    return InvalidArgument(origin + " was exported at batch size " + std::to_string(-exported_batch) +
                           " with logits whose rows are not the input's first axis (a time-major sequence, or "
                           "a token per row) and does not import at batch size " +
                           std::to_string(batch_size) + "; export it at batch size " + std::to_string(batch_size));
  }
  const auto fixed_batch = [&](const std::string& why) {
    return InvalidArgument(origin + " was exported at batch size " + std::to_string(exported_batch) +
                           " and does not import at batch size " + std::to_string(batch_size) + " (" + why +
                           "): its shapes fix the batch; export it at batch size " + std::to_string(batch_size) +
                           ", or with the batch taken from the input (x.view(x.size(0), -1), torch.flatten)");
  };
  EC_RETURN_IF_ERROR(InferShapes(model, origin));
  Result<ForwardGraph> imported = InvalidArgument("not imported");
  try {
    imported = Importer(model, origin, name).Run();
  } catch (const std::logic_error& e) {
    imported = InvalidArgument(origin + ": " + e.what());
  }
  if (exported_batch == 0) return imported;
  if (!imported.ok()) return fixed_batch(imported.status().message());
  // A Reshape to constant dimensions keeps the export's batch in the logits: the rows would not be the batch.
  const Layer& loss = imported->layers().back();  // Run() ends the graph with the loss on the logits
  const Shape& logits = imported->shape(loss.inputs.empty() ? 0 : loss.inputs[0]);
  if (logits.empty() || logits[0] != batch_size) {
    return fixed_batch("its logits have shape " + ShapeToString(logits));
  }
  return imported;
}

}  // namespace onnx_import
}  // namespace edgecost::graph
