// One ONNX node's attributes, read by name with the defaults ONNX gives them.
// Internal to the importer (graph/onnx/).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace edgecost::graph::onnx_import {

class Attributes {
 public:
  explicit Attributes(const onnx::NodeProto& node) {
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.type() == onnx::AttributeProto::INT) ints_[a.name()] = {a.i()};
      if (a.type() == onnx::AttributeProto::INTS) ints_[a.name()] = {a.ints().begin(), a.ints().end()};
      if (a.type() == onnx::AttributeProto::FLOAT) floats_[a.name()] = a.f();
      if (a.type() == onnx::AttributeProto::TENSOR) tensors_[a.name()] = &a.t();
      if (a.type() == onnx::AttributeProto::STRING) strings_[a.name()] = a.s();
    }
  }
  std::vector<int64_t> Ints(const std::string& name, std::vector<int64_t> fallback) const {
    auto it = ints_.find(name);
    return it == ints_.end() ? fallback : it->second;
  }
  int64_t Int(const std::string& name, int64_t fallback) const { return Ints(name, {fallback})[0]; }
  bool Has(const std::string& name) const { return ints_.count(name) || floats_.count(name) || tensors_.count(name); }
  float Float(const std::string& name, float fallback) const {
    auto it = floats_.find(name);
    return it == floats_.end() ? fallback : it->second;
  }
  const onnx::TensorProto* Tensor(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second;
  }
  std::string String(const std::string& name, const std::string& fallback) const {
    auto it = strings_.find(name);
    return it == strings_.end() ? fallback : it->second;
  }
  // Transpose's `perm` for a tensor of `rank` axes: the axes reversed when it is not given.
  std::vector<int64_t> Perm(size_t rank) const {
    std::vector<int64_t> perm = Ints("perm", {});
    if (perm.empty()) {
      for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    }
    return perm;
  }

 private:
  std::map<std::string, std::vector<int64_t>> ints_;
  std::map<std::string, float> floats_;
  std::map<std::string, const onnx::TensorProto*> tensors_;
  std::map<std::string, std::string> strings_;
};

}  // namespace edgecost::graph::onnx_import
