// The ONNX files that took the agent down (issue 26): text-format models in
// tests/graph/data/hostile_*.txtpb, encoded here with ONNX's protobuf classes.
// Tests that include this need the `onnx_dep` dependency.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/text_format.h>
#include <onnx/onnx_pb.h>

namespace edgecost::testing {

// Each crashes ONNX's shape inference. The first two took the agent down (GatherND with batch_dims=-5
// at opset 13, Gemm at opset 6 on a scalar) and are refused before inference; the third (MaxPool with
// strides 0) passes those checks and crashes in the import's child.
inline const std::vector<std::string> kHostileOnnxModels = {"hostile_gathernd", "hostile_gemm_opset6",
                                                            "hostile_maxpool_stride0"};

inline onnx::ModelProto HostileOnnxModel(const std::string& name) {
  std::ifstream in("tests/graph/data/" + name + ".txtpb");
  std::stringstream text;
  text << in.rdbuf();
  onnx::ModelProto model;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &model)) model.Clear();
  return model;
}

// The model's bytes, as a .onnx file holds them; empty if its text does not read.
inline std::string HostileOnnx(const std::string& name) {
  const onnx::ModelProto model = HostileOnnxModel(name);
  return model.graph().node_size() ? model.SerializeAsString() : std::string();
}

}  // namespace edgecost::testing
