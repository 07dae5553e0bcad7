// ONNX import: a model exported by torch.onnx.export becomes a forward graph
// (with a cross-entropy loss on its output), using ONNX's own shape inference
// to check every shape. Unsupported ops are named with their node.
//
// A model is untrusted input, and ONNX's shape inference crashes on some files:
// both calls refuse ops the importer does not take and opsets outside 9..17
// before inference, and run parsing, inference and import in a child process
// (base/isolated.h: memory, CPU and wall-clock limits, a seccomp filter). A
// crash, a hang or a memory blow-up there is InvalidArgument naming the file
// ("model.onnx: the ONNX importer crashed (SIGSEGV) on this file").
#pragma once

#include <string>

#include "base/status.h"
#include "graph/forward_graph.h"

namespace edgecost::graph {

// `batch_size` > 0 sets the data input's first dimension (the batch) before
// shape inference; an export whose shapes fix the batch (a Reshape to a
// constant shape) is refused then, naming the fix.
Result<ForwardGraph> ImportOnnx(const std::string& path, int batch_size = 0);
// The same from the model's bytes (a model stored in the cost database): the
// graph is named `name`, and errors name `origin`.
Result<ForwardGraph> ImportOnnxBytes(const std::string& bytes, const std::string& origin, const std::string& name,
                                     int batch_size = 0);

}  // namespace edgecost::graph
