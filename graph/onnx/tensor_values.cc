// The values of constant tensors (initializers, Constant nodes, fill values) as doubles.
#include <cstring>

#include "graph/onnx/value.h"

namespace edgecost::graph::onnx_import {
namespace {

// Values stored as little-endian T in `raw`, or, when `raw` is empty, in the tensor's typed field.
template <typename T, typename Field>
Status ReadValues(const std::string& raw, const Field& field, int64_t n, std::vector<double>& out) {
  if (raw.empty()) {
    out.assign(field.begin(), field.end());
    return Status::Ok();
  }
  if (raw.size() / sizeof(T) != static_cast<size_t>(n) || raw.size() % sizeof(T) != 0) {
    return InvalidArgument("raw data of the wrong size");
  }
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
    out.push_back(static_cast<double>(v));
  }
  return Status::Ok();
}

}  // namespace

bool IsIntegerType(int type) {
  switch (type) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return false;
    default:
      return true;
  }
}

Result<std::vector<double>> TensorValues(const onnx::TensorProto& t) {
  const Shape dims(t.dims().begin(), t.dims().end());
  if (!ValidShape(dims)) return InvalidArgument("a constant of shape " + ShapeToString(dims));
  const int64_t n = NumElements(dims);
  std::vector<double> out;
  const std::string& raw = t.raw_data();
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      EC_RETURN_IF_ERROR(ReadValues<float>(raw, t.float_data(), n, out));
      break;
    case onnx::TensorProto::DOUBLE:
      EC_RETURN_IF_ERROR(ReadValues<double>(raw, t.double_data(), n, out));
      break;
    case onnx::TensorProto::INT64:
      EC_RETURN_IF_ERROR(ReadValues<int64_t>(raw, t.int64_data(), n, out));
      break;
    case onnx::TensorProto::INT32:
      EC_RETURN_IF_ERROR(ReadValues<int32_t>(raw, t.int32_data(), n, out));
      break;
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::INT8:
      EC_RETURN_IF_ERROR(ReadValues<uint8_t>(raw, t.int32_data(), n, out));
      break;
    default:
      return InvalidArgument("constant of ONNX data type " + std::to_string(t.data_type()) + " is not supported");
  }
  if (static_cast<int64_t>(out.size()) != n) return InvalidArgument("constant with missing values");
  return out;
}

}  // namespace edgecost::graph::onnx_import
