// ImportOnnxBytes: the import run in a forked, seccomp-filtered child (base/isolated.h), whose
// forward graph comes back as edgecost.v1.ForwardGraphLayers and is checked again here.
#include <algorithm>

#include <onnx/defs/schema.h>

#include "base/isolated.h"
#include "graph/onnx/constant_folding.h"
#include "graph/onnx/import.h"
#include "graph/onnx/importer.h"
#include "proto/edgecost.pb.h"

namespace edgecost::graph {
namespace {

v1::ForwardGraphLayers ToProto(const ForwardGraph& graph) {
  v1::ForwardGraphLayers out;
  out.set_model(graph.model());
  out.set_batch_size(graph.batch_size());
  for (const Layer& layer : graph.layers()) {
    v1::ForwardLayer& l = *out.add_layers();
    l.set_op_kind(std::string(OpKindName(layer.kind)));
    l.mutable_inputs()->Add(layer.inputs.begin(), layer.inputs.end());
    l.mutable_output_shape()->Add(layer.output_shape.begin(), layer.output_shape.end());
    l.set_param_count(layer.param_count);
    l.set_bias_count(layer.bias_count);
    l.set_flops(layer.flops);
    l.mutable_attributes()->insert(layer.attributes.begin(), layer.attributes.end());
    for (const std::string& name : layer.param_names) l.add_param_names(name);
    l.set_param_transposed(layer.param_transposed);
    l.set_module(layer.module);
  }
  return out;
}

// The child's graph, checked again: a child taken over by a hostile file could send anything.
Result<ForwardGraph> FromProto(const v1::ForwardGraphLayers& in) {
  std::vector<Layer> layers;
  for (const v1::ForwardLayer& l : in.layers()) {
    EC_ASSIGN_OR_RETURN(OpKind kind, ParseOpKind(l.op_kind()));
    layers.push_back({.kind = kind,
                      .inputs = {l.inputs().begin(), l.inputs().end()},
                      .output_shape = {l.output_shape().begin(), l.output_shape().end()},
                      .param_count = l.param_count(),
                      .bias_count = l.bias_count(),
                      .flops = l.flops(),
                      .attributes = {l.attributes().begin(), l.attributes().end()},
                      .param_names = {l.param_names().begin(), l.param_names().end()},
                      .param_transposed = l.param_transposed(),
                      .module = l.module()});
  }
  return ForwardGraph::FromLayers(in.model(), in.batch_size(), std::move(layers));
}

// Lazy statics the child would otherwise initialize after the fork, where a lock another thread
// held at the fork (a static's guard, the schema registry's) would never be released.
void PrepareForFork() {
  static const bool ready = [] {
    (void)onnx::OpSchemaRegistry::Schema("Relu", 13, "");  // registers every schema
    (void)onnx::OpSchemaRegistry::DomainToVersionRange::Instance();
    (void)onnx_import::Importer::OpTable();
    (void)onnx_import::ConstantFolder::CanFold("");
    return true;
  }();
  (void)ready;
}

// The child's failure as the caller's error.
Status IsolatedImportError(const Status& s, const std::string& origin) {
  switch (s.code()) {
    case ErrorCode::kInternal:
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kDeadlineExceeded:  // the file's doing: the caller's input is wrong
      return InvalidArgument(origin + ": the ONNX importer " + s.message() + " on this file");
    case ErrorCode::kUnavailable:
      return s.WithContext("importing " + origin);
    default:
      return s;  // the importer's own error, as it gave it
  }
}

}  // namespace

Result<ForwardGraph> ImportOnnxBytes(const std::string& bytes, const std::string& origin, const std::string& name,
                                     int batch_size) {
  PrepareForFork();
  IsolationLimits limits;
  // A model of up to 512 MB (service::kMaxModelBytes) is parsed in well under 2 GiB.
  limits.memory_bytes = std::max<int64_t>(limits.memory_bytes, 4 * static_cast<int64_t>(bytes.size()));
  limits.cpu_s = 60;
  limits.wall_s = 120;
  Result<std::string> result = RunIsolated(
      [&]() -> Result<std::string> {
        EC_ASSIGN_OR_RETURN(ForwardGraph graph, onnx_import::ImportInProcess(bytes, origin, name, batch_size));
        return ToProto(graph).SerializeAsString();
      },
      limits);
  if (!result.ok()) return IsolatedImportError(result.status(), origin);
  v1::ForwardGraphLayers layers;
  Result<ForwardGraph> graph = layers.ParseFromString(*result) ? FromProto(layers) : InvalidArgument("no graph");
  if (!graph.ok()) {
    return InvalidArgument(origin + ": the ONNX importer returned a malformed graph for this file (" +
                           graph.status().message() + ")");
  }
  return graph;
}

}  // namespace edgecost::graph
