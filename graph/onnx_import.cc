#include "graph/onnx_import.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include "base/isolated.h"
#include "proto/edgecost.pb.h"

namespace edgecost::graph {
namespace {

// One ONNX node's attributes, with defaults.
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

 private:
  std::map<std::string, std::vector<int64_t>> ints_;
  std::map<std::string, float> floats_;
  std::map<std::string, const onnx::TensorProto*> tensors_;
  std::map<std::string, std::string> strings_;
};

bool AllEqual(const std::vector<int64_t>& v) {
  for (int64_t x : v) {
    if (x != v[0]) return false;
  }
  return true;
}

bool Near(double a, double b) { return std::fabs(a - b) <= 1e-4 * std::max(1.0, std::fabs(b)); }

// What an ONNX tensor name stands for at import: an activation (a node of the forward graph), a
// constant folded at import (shape arithmetic), a parameter (an initializer: only its shape
// matters) or nothing usable (the output of an op that could not be imported).
struct Value {
  enum class Kind { kActivation, kConstant, kParameter, kMissing };
  Kind kind = Kind::kMissing;
  int node = -1;
  Shape shape;               // constants and parameters
  std::vector<double> data;  // constants, and parameters small enough to be read as constants
  bool integer = false;      // an integer or boolean constant (for Div and Cast)
  bool has_data = false;
  // Parameters that feed an LSTM or GRU: which initializer rows (along axis 0, after `lead_ones`
  // leading axes of one) they are, as PyTorch's export slices and concatenates torch.nn's weights
  // into ONNX's gate order. Empty elsewhere.
  struct RowBlock {
    std::string initializer;
    int64_t start = 0, end = 0;
  };
  std::vector<RowBlock> rows;
  int lead_ones = 0;
  // A parameter Expand-ed to `shape` (ViT's class token to the batch): the parameter's own shape.
  std::optional<Shape> expanded_param;
  // Rows of a 2-D parameter table gathered by Swin's relative position index for this window (0: not
  // such a gather); relative_heads_first: reshaped to (N, N, heads) and transposed to (heads, N, N).
  int64_t relative_window = 0;
  bool relative_heads_first = false;
  // Stochastic depth's per-sample noise as PyTorch exports torch.bernoulli (RandomUniformLike of shape
  // (batch, 1, ...), Less than the survival rate, Cast, Div by it): kUniform, kKeep (the 0/1 draw, survival
  // in `survival`), kScaled (divided by the survival rate). Multiplied into an activation: a row dropout.
  enum class Random { kNone, kUniform, kKeep, kScaled };
  Random random = Random::kNone;
  double survival = 0;

  static Value Activation(int node) { return {.kind = Kind::kActivation, .node = node}; }
  static Value Constant(Shape shape, std::vector<double> data, bool integer) {
    return {.kind = Kind::kConstant,
            .shape = std::move(shape),
            .data = std::move(data),
            .integer = integer,
            .has_data = true};
  }
  static Value Parameter(Shape shape) { return {.kind = Kind::kParameter, .shape = std::move(shape)}; }
  bool scalar() const { return has_data && data.size() == 1; }
};

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

// The values of a tensor of one of the types exporters use for constants.
Result<std::vector<double>> TensorValues(const onnx::TensorProto& t) {
  const Shape dims(t.dims().begin(), t.dims().end());
  if (!ValidShape(dims)) return InvalidArgument("a constant of shape " + ShapeToString(dims));
  const int64_t n = NumElements(dims);
  std::vector<double> out;
  const std::string& raw = t.raw_data();
  auto from_raw = [&]<typename T>(T) -> Status {
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
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (!raw.empty()) {
        EC_RETURN_IF_ERROR(from_raw(float{}));
      } else {
        out.assign(t.float_data().begin(), t.float_data().end());
      }
      break;
    case onnx::TensorProto::DOUBLE:
      if (!raw.empty()) {
        EC_RETURN_IF_ERROR(from_raw(double{}));
      } else {
        out.assign(t.double_data().begin(), t.double_data().end());
      }
      break;
    case onnx::TensorProto::INT64:
      if (!raw.empty()) {
        EC_RETURN_IF_ERROR(from_raw(int64_t{}));
      } else {
        out.assign(t.int64_data().begin(), t.int64_data().end());
      }
      break;
    case onnx::TensorProto::INT32:
      if (!raw.empty()) {
        EC_RETURN_IF_ERROR(from_raw(int32_t{}));
      } else {
        out.assign(t.int32_data().begin(), t.int32_data().end());
      }
      break;
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::INT8:
      if (!raw.empty()) {
        EC_RETURN_IF_ERROR(from_raw(uint8_t{}));
      } else {
        out.assign(t.int32_data().begin(), t.int32_data().end());
      }
      break;
    default:
      return InvalidArgument("constant of ONNX data type " + std::to_string(t.data_type()) + " is not supported");
  }
  if (static_cast<int64_t>(out.size()) != n) return InvalidArgument("constant with missing values");
  return out;
}

// Row-major strides of a shape.
std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

// The flat index into `shape` of the broadcast position `index` of a tensor of shape `out`.
int64_t BroadcastIndex(const Shape& shape, const Shape& out, int64_t index) {
  const std::vector<int64_t> out_strides = Strides(out);
  const std::vector<int64_t> strides = Strides(shape);
  const size_t lead = out.size() - shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < out.size(); ++d) {
    const int64_t coordinate = index / out_strides[d] % out[d];
    if (d >= lead && shape[d - lead] != 1) flat += coordinate * strides[d - lead];
  }
  return flat;
}

int64_t NormalizeAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// A value from the file as an integer (an extent, an axis, an index): clamped,
// since casting a double outside int64's range (or NaN) is undefined.
int64_t ToInt(double d) { return std::isnan(d) ? 0 : static_cast<int64_t>(std::clamp(d, -9e18, 9e18)); }

// Evaluates the shape arithmetic exporters emit (Shape, Gather, Unsqueeze, Concat, Constant,
// ConstantOfShape, Range, Cast, Equal, Where, arithmetic...) on constants. ONNX's C++ library
// infers shapes but has no evaluator, so the few ops that compute them are evaluated here.
class ConstantFolder {
 public:
  using Inputs = std::vector<const Value*>;

  // The node's outputs, or an error naming why it cannot be folded.
  static Result<std::vector<Value>> Fold(const onnx::NodeProto& node, const Inputs& in, int opset) {
    const std::string& op = node.op_type();
    const Attributes attrs(node);
    auto need = [&](size_t count) -> Status {
      if (in.size() < count) return InvalidArgument("missing inputs");
      for (size_t i = 0; i < count; ++i) {
        if (!in[i] || !in[i]->has_data) return InvalidArgument("input " + std::to_string(i) + " is not a constant");
      }
      return Status::Ok();
    };
    if (op == "Constant") {
      if (const onnx::TensorProto* t = attrs.Tensor("value")) {
        EC_ASSIGN_OR_RETURN(std::vector<double> data, TensorValues(*t));
        return std::vector<Value>{
            Value::Constant(Shape(t->dims().begin(), t->dims().end()), std::move(data), IsIntegerType(t->data_type()))};
      }
      for (const onnx::AttributeProto& a : node.attribute()) {
        if (a.name() == "value_int") return std::vector<Value>{Value::Constant({}, {static_cast<double>(a.i())}, true)};
        if (a.name() == "value_float") return std::vector<Value>{Value::Constant({}, {a.f()}, false)};
        if (a.name() == "value_ints") {
          return std::vector<Value>{Value::Constant({a.ints_size()}, {a.ints().begin(), a.ints().end()}, true)};
        }
        if (a.name() == "value_floats") {
          return std::vector<Value>{Value::Constant({a.floats_size()}, {a.floats().begin(), a.floats().end()}, false)};
        }
      }
      return InvalidArgument("a Constant without a value this importer reads");
    }
    if (op == "Identity") {
      EC_RETURN_IF_ERROR(need(1));
      return std::vector<Value>{*in[0]};
    }
    if (op == "Shape") {
      if (in.empty() || !in[0]) return InvalidArgument("missing input");
      const Shape& s = in[0]->shape;
      const int64_t rank = static_cast<int64_t>(s.size());
      int64_t start = std::clamp(NormalizeAxis(attrs.Int("start", 0), s.size()), int64_t{0}, rank);
      int64_t end = std::clamp(NormalizeAxis(attrs.Int("end", rank), s.size()), int64_t{0}, rank);
      std::vector<double> data;
      for (int64_t i = start; i < end; ++i) data.push_back(static_cast<double>(s[i]));
      const Shape dims = {static_cast<int64_t>(data.size())};
      return std::vector<Value>{Value::Constant(dims, std::move(data), true)};
    }
    if (op == "Size") {
      if (in.empty() || !in[0]) return InvalidArgument("missing input");
      return std::vector<Value>{Value::Constant({}, {static_cast<double>(NumElements(in[0]->shape))}, true)};
    }
    if (op == "ConstantOfShape") {
      EC_RETURN_IF_ERROR(need(1));
      Shape shape;
      for (double d : in[0]->data) shape.push_back(ToInt(d));
      double fill = 0;
      bool integer = false;
      if (const onnx::TensorProto* t = attrs.Tensor("value")) {
        EC_ASSIGN_OR_RETURN(std::vector<double> v, TensorValues(*t));
        if (v.size() != 1) return InvalidArgument("a fill value that is not one value");
        fill = v[0];
        integer = IsIntegerType(t->data_type());
      }
      if (NumElements(shape) > kMaxElements) return InvalidArgument("too large a constant");
      return std::vector<Value>{Value::Constant(shape, std::vector<double>(NumElements(shape), fill), integer)};
    }
    if (op == "Range") {
      EC_RETURN_IF_ERROR(need(3));
      const double start = in[0]->data.at(0), limit = in[1]->data.at(0), delta = in[2]->data.at(0);
      if (delta == 0) return InvalidArgument("Range with a zero step");
      const int64_t n = std::max<int64_t>(0, ToInt(std::ceil((limit - start) / delta)));
      if (n > kMaxElements) return InvalidArgument("too large a range");
      std::vector<double> data;
      for (int64_t i = 0; i < n; ++i) data.push_back(start + static_cast<double>(i) * delta);
      return std::vector<Value>{Value::Constant({n}, std::move(data), in[0]->integer)};
    }
    if (op == "Cast") {
      EC_RETURN_IF_ERROR(need(1));
      const int to = static_cast<int>(attrs.Int("to", onnx::TensorProto::FLOAT));
      Value v = *in[0];
      v.integer = IsIntegerType(to);
      for (double& d : v.data) {
        if (to == onnx::TensorProto::BOOL) {
          d = d != 0 ? 1 : 0;
        } else if (v.integer) {
          d = std::trunc(d);
        } else if (to == onnx::TensorProto::FLOAT) {
          d = static_cast<float>(d);
        }
      }
      return std::vector<Value>{std::move(v)};
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      EC_RETURN_IF_ERROR(need(1));
      std::vector<int64_t> axes = attrs.Ints("axes", {});
      if (opset >= 13 && in.size() > 1 && in[1]) {
        if (!in[1]->has_data) return InvalidArgument("axes are not a constant");
        axes.clear();
        for (double d : in[1]->data) axes.push_back(ToInt(d));
      }
      Value v = *in[0];
      EC_ASSIGN_OR_RETURN(v.shape, SqueezeShape(op == "Unsqueeze", in[0]->shape, axes));
      return std::vector<Value>{std::move(v)};
    }
    if (op == "Reshape") {
      EC_RETURN_IF_ERROR(need(2));
      Value v = *in[0];
      EC_ASSIGN_OR_RETURN(v.shape, ReshapeTarget(in[0]->shape, in[1]->data, attrs.Int("allowzero", 0) != 0));
      return std::vector<Value>{std::move(v)};
    }
    if (op == "Concat") {
      for (size_t i = 0; i < in.size(); ++i) EC_RETURN_IF_ERROR(need(i + 1));
      if (in.empty()) return InvalidArgument("no inputs");
      const size_t rank = in[0]->shape.size();
      const int64_t axis = NormalizeAxis(attrs.Int("axis", 0), rank);
      if (axis < 0 || axis >= static_cast<int64_t>(std::max<size_t>(rank, 1))) return InvalidArgument("bad axis");
      if (rank == 0) return InvalidArgument("concat of scalars");
      Shape out = in[0]->shape;
      out[axis] = 0;
      for (const Value* v : in) {
        if (v->shape.size() != rank) return InvalidArgument("ranks differ");
        out[axis] += v->shape[axis];
      }
      // outer x (axis extent x inner) blocks, one input after another
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= out[d];
      for (size_t d = axis + 1; d < rank; ++d) inner *= out[d];
      std::vector<double> data;
      for (int64_t o = 0; o < outer; ++o) {
        for (const Value* v : in) {
          const int64_t block = v->shape[axis] * inner;
          data.insert(data.end(), v->data.begin() + o * block, v->data.begin() + (o + 1) * block);
        }
      }
      return std::vector<Value>{Value::Constant(out, std::move(data), in[0]->integer)};
    }
    if (op == "Gather") {
      EC_RETURN_IF_ERROR(need(2));
      const Value& data = *in[0];
      const Value& indices = *in[1];
      if (data.shape.empty()) return InvalidArgument("gather from a scalar");
      const int64_t axis = NormalizeAxis(attrs.Int("axis", 0), data.shape.size());
      Shape out(data.shape.begin(), data.shape.begin() + axis);
      out.insert(out.end(), indices.shape.begin(), indices.shape.end());
      out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= data.shape[d];
      for (size_t d = axis + 1; d < data.shape.size(); ++d) inner *= data.shape[d];
      const int64_t extent = data.shape[axis];
      std::vector<double> values;
      for (int64_t o = 0; o < outer; ++o) {
        for (double index : indices.data) {
          int64_t i = ToInt(index);
          if (i < 0) i += extent;
          if (i < 0 || i >= extent) return InvalidArgument("gather index out of range");
          const auto from = data.data.begin() + (o * extent + i) * inner;
          values.insert(values.end(), from, from + inner);
        }
      }
      return std::vector<Value>{Value::Constant(out, std::move(values), data.integer)};
    }
    if (op == "Slice") {  // any rank, any steps (Swin computes its Pad's pads by slicing backwards)
      EC_RETURN_IF_ERROR(need(3));
      const Value& v = *in[0];
      const size_t rank = v.shape.size();
      if (rank == 0) return InvalidArgument("slice of a scalar");
      const std::vector<double>& starts = in[1]->data;
      const std::vector<double>& ends = in[2]->data;
      const bool has_axes = in.size() > 3 && in[3], has_steps = in.size() > 4 && in[4];
      if ((has_axes && !in[3]->has_data) || (has_steps && !in[4]->has_data)) {
        return InvalidArgument("axes or steps are not constants");
      }
      if (ends.size() != starts.size() || (has_axes && in[3]->data.size() != starts.size()) ||
          (has_steps && in[4]->data.size() != starts.size())) {
        return InvalidArgument("starts, ends, axes and steps differ in length");
      }
      // Per axis: the first index and the step, and the count taken (ONNX's clamping rules).
      std::vector<int64_t> first(rank, 0), step(rank, 1);
      Shape out = v.shape;
      for (size_t k = 0; k < starts.size(); ++k) {
        const int64_t axis = NormalizeAxis(has_axes ? ToInt(in[3]->data[k]) : static_cast<int64_t>(k), rank);
        if (axis < 0 || axis >= static_cast<int64_t>(rank)) return InvalidArgument("bad axis");
        const int64_t n = v.shape[axis], st = has_steps ? ToInt(in[4]->data[k]) : 1;
        if (st == 0) return InvalidArgument("a zero step");
        int64_t b = ToInt(starts[k]), e = ToInt(ends[k]);
        if (b < 0) b += n;
        if (e < 0) e += n;
        if (st > 0) {
          b = std::clamp<int64_t>(b, 0, n);
          e = std::clamp<int64_t>(e, 0, n);
          out[axis] = e > b ? (e - b + st - 1) / st : 0;
        } else {
          b = n == 0 ? -1 : std::clamp<int64_t>(b, 0, n - 1);  // an empty axis: nothing taken
          e = std::clamp<int64_t>(e, -1, n - 1);
          out[axis] = b > e ? (b - e - st - 1) / -st : 0;
        }
        first[axis] = b;
        step[axis] = st;
      }
      const std::vector<int64_t> in_strides = Strides(v.shape);
      const std::vector<int64_t> out_strides = Strides(out);
      std::vector<double> values(static_cast<size_t>(NumElements(out)));
      for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
        int64_t from = 0;
        for (size_t d = 0; d < rank; ++d) from += (first[d] + (i / out_strides[d] % out[d]) * step[d]) * in_strides[d];
        values[static_cast<size_t>(i)] = v.data[static_cast<size_t>(from)];
      }
      return std::vector<Value>{Value::Constant(out, std::move(values), v.integer)};
    }
    if (op == "Transpose") {
      EC_RETURN_IF_ERROR(need(1));
      const Value& v = *in[0];
      std::vector<int64_t> perm = attrs.Ints("perm", {});
      if (perm.empty()) {
        for (size_t i = v.shape.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
      }
      if (perm.size() != v.shape.size()) return InvalidArgument("permutation does not fit");
      Shape out;
      for (int64_t p : perm) out.push_back(v.shape.at(p));
      const std::vector<int64_t> in_strides = Strides(v.shape);
      const std::vector<int64_t> out_strides = Strides(out);
      std::vector<double> data(v.data.size());
      for (int64_t i = 0; i < static_cast<int64_t>(data.size()); ++i) {
        int64_t from = 0;
        for (size_t d = 0; d < out.size(); ++d) from += (i / out_strides[d] % out[d]) * in_strides[perm[d]];
        data[i] = v.data[from];
      }
      return std::vector<Value>{Value::Constant(out, std::move(data), v.integer)};
    }
    if (op == "ScatterND") {  // data with slices replaced at indices (Swin's shifted-window mask)
      EC_RETURN_IF_ERROR(need(3));
      if (attrs.String("reduction", "none") != "none") return InvalidArgument("only ScatterND without reduction");
      const Value& data = *in[0];
      const Value& indices = *in[1];
      const Value& updates = *in[2];
      if (indices.shape.empty()) return InvalidArgument("indices without an index axis");
      const size_t k = static_cast<size_t>(indices.shape.back());
      if (k == 0 || k > data.shape.size()) return InvalidArgument("index tuples longer than the data's rank");
      const std::vector<int64_t> strides = Strides(data.shape);
      const int64_t slice = k == data.shape.size() ? 1 : strides[k - 1];
      const int64_t tuples = static_cast<int64_t>(indices.data.size() / k);
      if (static_cast<int64_t>(updates.data.size()) != tuples * slice) return InvalidArgument("updates do not fit");
      Value out = data;
      for (int64_t t = 0; t < tuples; ++t) {
        int64_t flat = 0;
        for (size_t d = 0; d < k; ++d) {
          int64_t i = ToInt(indices.data[t * k + d]);
          if (i < 0) i += data.shape[d];
          if (i < 0 || i >= data.shape[d]) return InvalidArgument("scatter index out of range");
          flat += i * strides[d];
        }
        std::copy_n(updates.data.begin() + t * slice, slice, out.data.begin() + flat);
      }
      return std::vector<Value>{std::move(out)};
    }
    if (op == "Expand") {
      EC_RETURN_IF_ERROR(need(2));
      Shape target;
      for (double d : in[1]->data) target.push_back(ToInt(d));
      return Elementwise(
          in, [](const std::vector<double>& x) { return x[0]; }, in[0]->integer, &target, 1);
    }
    // Elementwise ops with broadcasting.
    using F = std::function<double(const std::vector<double>&)>;
    const bool integer = !in.empty() && in[0] && in[0]->integer;
    const std::map<std::string, std::pair<int, F>> elementwise = {
        {"Add", {2, [](auto& x) { return x[0] + x[1]; }}},
        {"Sub", {2, [](auto& x) { return x[0] - x[1]; }}},
        {"Mul", {2, [](auto& x) { return x[0] * x[1]; }}},
        {"Div", {2, [integer](auto& x) { return integer ? std::trunc(x[0] / x[1]) : x[0] / x[1]; }}},
        {"Pow", {2, [](auto& x) { return std::pow(x[0], x[1]); }}},
        // fmod=0 (integers): the remainder takes the divisor's sign, as Python's % (Swin's window shifts).
        {"Mod", {2, [fmod = attrs.Int("fmod", 0) != 0](auto& x) {
           if (x[1] == 0) return std::numeric_limits<double>::quiet_NaN();
           const double r = std::fmod(x[0], x[1]);
           return fmod || r == 0 || (r < 0) == (x[1] < 0) ? r : r + x[1];
         }}},
        {"Equal", {2, [](auto& x) { return x[0] == x[1] ? 1.0 : 0.0; }}},
        {"Less", {2, [](auto& x) { return x[0] < x[1] ? 1.0 : 0.0; }}},
        {"Greater", {2, [](auto& x) { return x[0] > x[1] ? 1.0 : 0.0; }}},
        {"And", {2, [](auto& x) { return x[0] != 0 && x[1] != 0 ? 1.0 : 0.0; }}},
        {"Or", {2, [](auto& x) { return x[0] != 0 || x[1] != 0 ? 1.0 : 0.0; }}},
        {"Min", {2, [](auto& x) { return std::min(x[0], x[1]); }}},
        {"Max", {2, [](auto& x) { return std::max(x[0], x[1]); }}},
        {"Where", {3, [](auto& x) { return x[0] != 0 ? x[1] : x[2]; }}},
        {"Not", {1, [](auto& x) { return x[0] == 0 ? 1.0 : 0.0; }}},
        {"Neg", {1, [](auto& x) { return -x[0]; }}},
        {"Abs", {1, [](auto& x) { return std::fabs(x[0]); }}},
        {"Sqrt", {1, [](auto& x) { return std::sqrt(x[0]); }}},
        {"Floor", {1, [](auto& x) { return std::floor(x[0]); }}},
        {"Ceil", {1, [](auto& x) { return std::ceil(x[0]); }}},
        {"Reciprocal", {1, [](auto& x) { return 1.0 / x[0]; }}},
    };
    auto it = elementwise.find(op);
    if (it == elementwise.end()) return InvalidArgument("no constant evaluation of " + op);
    EC_RETURN_IF_ERROR(need(static_cast<size_t>(it->second.first)));
    const bool boolean = op == "Equal" || op == "Less" || op == "Greater" || op == "And" || op == "Or" || op == "Not";
    const bool out_integer = boolean || (op == "Where" ? in[1]->integer : integer);
    return Elementwise(in, it->second.second, out_integer, nullptr, it->second.first);
  }

  static Result<Shape> SqueezeShape(bool unsqueeze, const Shape& in, std::vector<int64_t> axes) {
    Shape out = in;
    if (unsqueeze) {
      const size_t rank = in.size() + axes.size();
      for (int64_t& a : axes) a = NormalizeAxis(a, rank);
      std::sort(axes.begin(), axes.end());
      for (int64_t a : axes) {
        if (a < 0 || a > static_cast<int64_t>(out.size())) return InvalidArgument("bad unsqueeze axis");
        out.insert(out.begin() + a, 1);
      }
      return out;
    }
    if (axes.empty()) {
      out.erase(std::remove(out.begin(), out.end(), 1), out.end());
      return out;
    }
    for (int64_t& a : axes) a = NormalizeAxis(a, in.size());
    std::sort(axes.rbegin(), axes.rend());
    for (int64_t a : axes) {
      if (a < 0 || a >= static_cast<int64_t>(out.size()) || out[a] != 1) return InvalidArgument("bad squeeze axis");
      out.erase(out.begin() + a);
    }
    return out;
  }

  // ONNX Reshape's target: 0 copies the input's extent, -1 takes what is left.
  static Result<Shape> ReshapeTarget(const Shape& in, const std::vector<double>& target, bool allowzero) {
    Shape out;
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < target.size(); ++i) {
      int64_t d = ToInt(target[i]);
      if (d == 0 && !allowzero) {
        if (i >= in.size()) return InvalidArgument("reshape copies an axis the input lacks");
        d = in[i];
      }
      if (d == -1) {
        if (infer >= 0) return InvalidArgument("two -1 in a reshape target");
        infer = static_cast<int>(i);
        out.push_back(1);
        continue;
      }
      if (d < 0) return InvalidArgument("negative reshape extent");
      if (__builtin_mul_overflow(known, d, &known)) return InvalidArgument("too large a reshape target");
      out.push_back(d);
    }
    const int64_t total = NumElements(in);
    if (infer >= 0) {
      if (known == 0 || total % known != 0) return InvalidArgument("reshape target does not divide the input");
      out[infer] = total / known;
    }
    if (NumElements(out) != total) {
      return InvalidArgument("reshape of " + ShapeToString(in) + " to " + ShapeToString(out) + " changes its size");
    }
    return out;
  }

  // ONNX Slice's clamping of [start, end) on an axis of extent n, for a unit step.
  static std::pair<int64_t, int64_t> SliceRange(int64_t start, int64_t end, int64_t n) {
    if (start < 0) start += n;
    if (end < 0) end += n;
    return {std::clamp<int64_t>(start, 0, n), std::clamp<int64_t>(end, 0, n)};
  }

  static constexpr int64_t kMaxElements = 1 << 20;

  static bool CanFold(const std::string& op) {
    static const std::set<std::string> ops = {"Constant", "Identity", "Shape",     "Size",      "ConstantOfShape",
                                              "Range",    "Cast",     "Unsqueeze", "Squeeze",   "Reshape",
                                              "Concat",   "Gather",   "Slice",     "Transpose", "Expand",
                                              "Add",      "Sub",      "Mul",       "Div",       "Pow",
                                              "Equal",    "Less",     "Greater",   "And",       "Or",
                                              "Min",      "Max",      "Where",     "Not",       "Neg",
                                              "Abs",      "Sqrt",     "Floor",     "Ceil",      "Reciprocal",
                                              "Mod",      "ScatterND"};
    return ops.count(op) > 0;
  }

 private:
  static Result<std::vector<Value>> Elementwise(const Inputs& in,
                                                const std::function<double(const std::vector<double>&)>& f,
                                                bool integer, const Shape* target, int arity) {
    Shape out = target ? *target : Shape{};
    for (int i = 0; i < arity; ++i) {
      try {
        out = BroadcastShapes(out, in[i]->shape);
      } catch (const std::logic_error& e) {
        return InvalidArgument(e.what());
      }
    }
    if (NumElements(out) > kMaxElements) return InvalidArgument("too large a constant");
    std::vector<double> data(static_cast<size_t>(NumElements(out)));
    std::vector<double> args(static_cast<size_t>(arity));
    for (int64_t i = 0; i < static_cast<int64_t>(data.size()); ++i) {
      for (int k = 0; k < arity; ++k) args[k] = in[k]->data[BroadcastIndex(in[k]->shape, out, i)];
      data[i] = f(args);
    }
    return std::vector<Value>{Value::Constant(out, std::move(data), integer)};
  }
};

// The ops the importer turns into graph nodes (besides what ConstantFolder evaluates).
const std::set<std::string>& NodeOps() {
  static const std::set<std::string> ops = {"Identity",    "Dropout",
                                            "Conv",        "BatchNormalization",
                                            "Relu",        "Clip",
                                            "HardSigmoid", "HardSwish",
                                            "Sigmoid",     "Tanh",
                                            "Erf",         "Sqrt",
                                            "Pow",         "Add",
                                            "Sub",         "Mul",
                                            "Div",         "MatMul",
                                            "Gemm",        "MaxPool",
                                            "AveragePool", "GlobalAveragePool",
                                            "Flatten",     "Reshape",
                                            "Squeeze",     "Unsqueeze",
                                            "Transpose",   "ReduceMean",
                                            "Concat",      "Split",
                                            "Slice",       "Gather",
                                            "Softmax",     "LayerNormalization",
                                            "Cast",        "Pad",
                                            "LSTM",        "GRU",
                                            "Where",       "Resize",
                                            "RandomUniformLike", "Einsum"};
  return ops;
}

std::string SupportedList() {
  std::string list;
  for (const std::string& op : NodeOps()) list += (list.empty() ? "" : ", ") + op;
  return list +
         "; shape arithmetic on constants (Constant, Shape, Gather, Unsqueeze, Concat, "
         "ConstantOfShape, Range, Cast, Equal, Where, ...) is folded at import";
}

std::string NodeWhere(const onnx::NodeProto& node, int index) {
  return "node " + std::to_string(index) + " ('" + node.name() + "')";
}

// The opsets of the default domain the importer reads. torch.onnx.export (Debian's 1.13) writes 7
// to 17; the importer handles 9 on (BatchNormalization lost `spatial` at 9), and 13 and 17 are
// tested. Opset 18 moves ReduceMean's axes and Split's count into inputs, which the importer reads
// as attributes. Old opsets are also where ONNX's inference crashed on a hostile file (Gemm-6).
constexpr int64_t kMinOpset = 9, kMaxOpset = 17;

// The first line of defence, before ONNX's shape inference sees the model: only ops the importer
// takes (NodeOps(), and the shape arithmetic it folds), of the default domain, without subgraphs,
// at an opset it reads. What passes still runs isolated (ImportOnnxBytes).
Status CheckOpsAndOpset(const onnx::ModelProto& model, const std::string& origin) {
  std::optional<int64_t> opset;
  for (const onnx::OperatorSetIdProto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  const std::string range = std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset);
  if (!opset) {
    return InvalidArgument(origin + " declares no opset of the default ONNX domain; the importer reads opsets " +
                           range + " (torch.onnx.export(..., opset_version=13))");
  }
  if (*opset < kMinOpset || *opset > kMaxOpset) {
    return InvalidArgument(origin + " uses opset " + std::to_string(*opset) + "; the importer reads opsets " + range +
                           ": export it with torch.onnx.export(..., opset_version=13)");
  }
  std::map<std::string, std::string> unsupported;  // op kind -> its first node
  const onnx::GraphProto& g = model.graph();
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    std::string why;
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      why = "ops of domain '" + node.domain() + "' are not supported";
    } else if (!NodeOps().count(node.op_type()) && !ConstantFolder::CanFold(node.op_type())) {
      why = "";
    } else {
      for (const onnx::AttributeProto& a : node.attribute()) {
        if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS || a.has_g() ||
            a.graphs_size() > 0) {
          return InvalidArgument(origin + ": " + NodeWhere(node, i) + ", " + node.op_type() + ": attribute '" +
                                 a.name() + "' is a subgraph, which no op the importer reads has");
        }
      }
      continue;
    }
    const std::string key = node.domain().empty() ? node.op_type() : node.domain() + "." + node.op_type();
    if (!unsupported.count(key)) unsupported[key] = NodeWhere(node, i) + (why.empty() ? "" : ": " + why);
  }
  if (unsupported.empty()) return Status::Ok();
  std::string list;
  for (const auto& [op, where] : unsupported) list += "\n  " + op + ": " + where;
  return InvalidArgument(origin + ": " + std::to_string(unsupported.size()) +
                         " unsupported op kind(s), each with its first node:" + list +
                         "\nsupported: " + SupportedList());
}

// The nn.Module a PyTorch export's node came from. The exporter names nodes by scope, one path
// component per module, each the child's name under its own parent's component:
// "/features/features.1/conv/conv.0/conv.0.0/Conv" is module features.1.conv.0.0, and
// "/features/features.1/Add" an op of features.1's own forward. Other names give "".
std::string ModuleOf(const onnx::NodeProto& node) {
  const std::string& name = node.name();
  if (name.size() < 2 || name[0] != '/') return "";
  std::vector<std::string> scopes;
  for (size_t start = 1, slash; (slash = name.find('/', start)) != std::string::npos; start = slash + 1) {
    scopes.push_back(name.substr(start, slash - start));
  }
  std::string module, previous;
  for (const std::string& scope : scopes) {
    const bool child = !previous.empty() && scope.size() > previous.size() &&
                       scope.compare(0, previous.size(), previous) == 0 && scope[previous.size()] == '.';
    const std::string part = child ? scope.substr(previous.size() + 1) : scope;
    if (part.empty()) return "";
    module += (module.empty() ? "" : ".") + part;
    previous = scope;
  }
  return module.size() <= kMaxModuleNameBytes ? module : "";
}

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string origin, std::string name)
      : model_(model), origin_(std::move(origin)), graph_(std::move(name), 1) {}

  Result<ForwardGraph> Run() {
    const onnx::GraphProto& g = model_.graph();
    for (const onnx::OperatorSetIdProto& o : model_.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = static_cast<int>(o.version());
    }
    for (const onnx::TensorProto& t : g.initializer()) {
      Value v = Value::Parameter(Shape(t.dims().begin(), t.dims().end()));
      if (!ValidShape(v.shape)) return Error("initializer '" + t.name() + "' has shape " + ShapeToString(v.shape));
      // Small ones may be constants (eps, shape targets); integers are never weights (Swin's index tables).
      if (NumElements(v.shape) <= 64 ||
          (IsIntegerType(t.data_type()) && NumElements(v.shape) <= ConstantFolder::kMaxElements)) {
        auto data = TensorValues(t);
        if (data.ok()) {
          v.data = std::move(*data);
          v.has_data = true;
          v.integer = IsIntegerType(t.data_type());
          if (v.integer) v.kind = Value::Kind::kConstant;  // integers are never weights
        }
      }
      if (!v.shape.empty()) v.rows = {{t.name(), 0, v.shape[0]}};
      values_[t.name()] = std::move(v);
    }
    for (const auto* list : {&g.value_info(), &g.output()}) {
      for (const onnx::ValueInfoProto& v : *list) {
        if (v.type().tensor_type().has_shape()) inferred_[v.name()] = ShapeOf(v);  // else the rank is unknown
      }
    }
    int inputs = 0;
    for (const onnx::ValueInfoProto& v : g.input()) {
      if (values_.count(v.name())) continue;  // old exporters list weights as inputs
      const Shape shape = ShapeOf(v);
      for (int64_t d : shape) {
        if (d <= 0)
          return Error("input '" + v.name() + "' has a symbolic or unknown dimension; export with fixed shapes");
      }
      if (!ValidShape(shape)) return Error("input '" + v.name() + "' has shape " + ShapeToString(shape));
      values_[v.name()] = Value::Activation(graph_.Input(shape));
      if (shape.size() >= 2) graph_.set_batch_size(static_cast<int>(shape[0]));
      ++inputs;
    }
    if (inputs != 1) return Error("expected one data input, found " + std::to_string(inputs));
    for (int i = 0; i < g.node_size(); ++i) {
      for (const std::string& input : g.node(i).input()) consumers_[input].push_back(i);
    }
    MarkRecurrentWeights();
    // Constants first: the fusions look ahead at nodes whose constant inputs come later in the file.
    for (int i = 0; i < g.node_size(); ++i) {
      if (g.node(i).op_type() != "Constant") continue;
      consumed_.insert(i);
      EC_RETURN_IF_ERROR(ImportNode(g.node(i), i));
    }
    for (int i = 0; i < g.node_size(); ++i) {
      if (consumed_.count(i)) continue;
      EC_RETURN_IF_ERROR(ImportNode(g.node(i), i));
    }
    if (!unsupported_.empty()) {
      std::string list;
      for (const auto& [op, where] : unsupported_) list += "\n  " + op + ": " + where;
      return Error(std::to_string(unsupported_.size()) + " unsupported op kind(s), each with its first node:" + list +
                   "\nsupported: " + SupportedList());
    }
    EC_RETURN_IF_ERROR(CheckTrainingExport());
    if (g.output_size() != 1) return Error("expected one output, found " + std::to_string(g.output_size()));
    auto out = values_.find(g.output(0).name());
    if (out == values_.end() || out->second.kind != Value::Kind::kActivation) {
      return Error("expected one output computed by the graph");
    }
    const int logits = out->second.node;
    if (graph_.shape(logits).size() != 2) {
      return Error("the output has shape " + ShapeToString(graph_.shape(logits)) +
                   "; a cross-entropy loss needs logits of shape (batch, classes)");
    }
    // A time-major sequence's first axis is time: a recurrent model's batch is its logits' rows.
    const bool recurrent = std::any_of(graph_.layers().begin(), graph_.layers().end(), [](const graph::Layer& l) {
      return l.kind == OpKind::kLstm || l.kind == OpKind::kGru;
    });
    if (recurrent) graph_.set_batch_size(static_cast<int>(graph_.shape(logits)[0]));
    EC_RETURN_IF_ERROR(TieSharedWeights());
    graph_.CrossEntropyLoss(logits, graph_.shape(logits).back());
    return std::move(graph_);
  }

 private:
  static Shape ShapeOf(const onnx::ValueInfoProto& v) {
    Shape shape;
    for (const auto& d : v.type().tensor_type().shape().dim()) shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    return shape;
  }

  Status Error(const std::string& what) const { return InvalidArgument(origin_ + ": " + what); }

  std::string Where(const onnx::NodeProto& node, int index) const { return NodeWhere(node, index); }

  Status NodeError(const onnx::NodeProto& node, int index, const std::string& what) const {
    return Error(Where(node, index) + ", " + node.op_type() + ": " + what);
  }

  // Records an op the importer cannot take (the first node of each kind), so that one error lists them all.
  Status Unsupported(const onnx::NodeProto& node, int index, const std::string& why) {
    std::string key = node.op_type();
    if (!unsupported_.count(key)) unsupported_[key] = Where(node, index) + (why.empty() ? "" : ": " + why);
    return Status::Ok();  // import goes on, to find every unsupported kind
  }

  const Value* Input(const onnx::NodeProto& node, int i) const {
    if (i >= node.input_size() || node.input(i).empty()) return nullptr;
    auto it = values_.find(node.input(i));
    return it == values_.end() ? nullptr : &it->second;
  }

  Shape ShapeOfValue(const Value& v) const {
    return v.kind == Value::Kind::kActivation ? graph_.shape(v.node) : v.shape;
  }

  void SetOutput(const onnx::NodeProto& node, int i, Value v) {
    if (i < node.output_size() && !node.output(i).empty()) values_[node.output(i)] = std::move(v);
  }

  // The one node consuming `tensor`, if it has exactly one consumer (and is not a graph output).
  const onnx::NodeProto* SoleConsumer(const std::string& tensor, int* index) const {
    auto it = consumers_.find(tensor);
    if (it == consumers_.end() || it->second.size() != 1) return nullptr;
    for (const onnx::ValueInfoProto& out : model_.graph().output()) {
      if (out.name() == tensor) return nullptr;
    }
    *index = it->second[0];
    return &model_.graph().node(*index);
  }

  // The scalar a constant input holds, if it is one.
  std::optional<double> ScalarInput(const onnx::NodeProto& node, int i) const {
    const Value* v = Input(node, i);
    if (!v || !v->scalar()) return std::nullopt;
    return v->data[0];
  }

  Status ImportNode(const onnx::NodeProto& node, int index) {
    std::vector<const Value*> in;
    bool missing = false, any_activation = false, any_parameter = false;
    for (int i = 0; i < node.input_size(); ++i) {
      const Value* v = Input(node, i);
      if (!node.input(i).empty() && !v) missing = true;
      if (v && v->kind == Value::Kind::kActivation) any_activation = true;
      if (v && v->kind == Value::Kind::kParameter) any_parameter = true;
      in.push_back(v);
    }
    const std::string& op = node.op_type();
    if (missing) {  // downstream of an unsupported op: only its kind is of interest
      if (!NodeOps().count(op) && !ConstantFolder::CanFold(op)) (void)Unsupported(node, index, "");
      return Status::Ok();
    }
    if (op == "RandomUniformLike" || std::any_of(in.begin(), in.end(), [](const Value* v) {
          return v && v->random != Value::Random::kNone;
        })) {
      return ImportRandomOp(node, index, in);
    }
    if ((op == "Shape" || op == "Size") && !in.empty() && in[0]) {  // of anything with a known shape
      Value shape_only = Value::Parameter(ShapeOfValue(*in[0]));
      auto folded = ConstantFolder::Fold(node, {&shape_only}, opset_);
      if (!folded.ok()) return NodeError(node, index, folded.status().message());
      SetOutput(node, 0, std::move((*folded)[0]));
      return Status::Ok();
    }
    if (!any_activation && !any_parameter) {
      auto folded = ConstantFolder::Fold(node, in, opset_);
      if (!folded.ok()) {
        return Unsupported(node, index, "cannot be evaluated at import (" + folded.status().message() + ")");
      }
      // Each fold is bounded; so is their sum, which a small file of many folds would make large.
      for (const Value& v : *folded) folded_elements_ += NumElements(v.shape);
      if (folded_elements_ > kMaxFoldedElements) {
        return NodeError(node, index,
                         "constant folding computes more than " + std::to_string(kMaxFoldedElements) +
                             " values in all (a model's shape arithmetic takes far fewer): refused");
      }
      for (size_t i = 0; i < folded->size(); ++i) SetOutput(node, static_cast<int>(i), std::move((*folded)[i]));
      return Status::Ok();
    }
    if (!any_activation) return ImportParameterOp(node, index, in);
    const size_t before = graph_.layers().size();
    Status status = Status::Ok();
    try {
      status = ImportActivationOp(node, index, in);
    } catch (const std::logic_error& e) {
      status = NodeError(node, index, e.what());
    }
    if (!status.ok()) return status;
    for (int layer = static_cast<int>(before); layer < graph_.size(); ++layer) graph_.SetModule(layer, ModuleOf(node));
    // Our shapes must agree with ONNX's own shape inference.
    for (int o = 0; o < node.output_size(); ++o) {
      auto v = values_.find(node.output(o));
      auto inferred = inferred_.find(node.output(o));
      if (v == values_.end() || v->second.kind != Value::Kind::kActivation || inferred == inferred_.end()) continue;
      if (graph_.layers().size() == before) continue;  // an alias
      const Shape& ours = graph_.shape(v->second.node);
      if (inferred->second != ours &&
          std::all_of(inferred->second.begin(), inferred->second.end(), [](int64_t d) { return d >= 0; })) {
        return NodeError(
            node, index,
            "computed shape " + ShapeToString(ours) + " but ONNX infers " + ShapeToString(inferred->second));
      }
    }
    return Status::Ok();
  }

  // Stochastic depth (torchvision's StochasticDepth, mode "row"), exported from torch.bernoulli as
  // x * (Cast(RandomUniformLike(batch, 1, ...) < s) / s): a row dropout of ratio 1 - s, whose mask the
  // executor draws per step like any dropout's. Any other use of random numbers is not supported.
  Status ImportRandomOp(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const std::string& op = node.op_type();
    const Attributes attrs(node);
    const Value* r = nullptr;
    for (const Value* v : in) {
      if (v && v->random != Value::Random::kNone) r = v;
    }
    auto other_scalar = [&]() -> std::optional<double> {  // the other input, a constant of one repeated value
      for (const Value* v : in) {
        if (v == r || !v || !v->has_data || v->data.empty()) continue;
        if (std::all_of(v->data.begin(), v->data.end(), [&](double d) { return d == v->data[0]; })) return v->data[0];
      }
      return std::nullopt;
    };
    const char* kWhy = "random numbers are supported as stochastic depth's row mask only";
    if (op == "RandomUniformLike") {
      const Value* like = in.empty() ? nullptr : in[0];
      if (!like || attrs.Float("low", 0) != 0 || attrs.Float("high", 1) != 1) return Unsupported(node, index, kWhy);
      const Shape shape = ShapeOfValue(*like);
      if (shape.size() < 2 || std::any_of(shape.begin() + 1, shape.end(), [](int64_t d) { return d != 1; })) {
        return Unsupported(node, index, kWhy);
      }
      Value v = Value::Parameter(shape);
      v.kind = Value::Kind::kConstant;  // no data: nothing folds it
      v.random = Value::Random::kUniform;
      SetOutput(node, 0, std::move(v));
      return Status::Ok();
    }
    Value v = *r;
    if (op == "Less" && r == in[0] && r->random == Value::Random::kUniform) {
      const std::optional<double> s = other_scalar();
      if (!s || !(*s > 0 && *s <= 1)) return Unsupported(node, index, kWhy);
      v.random = Value::Random::kKeep;
      v.survival = *s;
    } else if ((op == "Cast" || op == "Identity") && r->random == Value::Random::kKeep) {
    } else if (op == "Div" && r == in[0] && r->random == Value::Random::kKeep && other_scalar() &&
               Near(*other_scalar(), r->survival)) {
      v.random = Value::Random::kScaled;
    } else if (op == "Mul" && r->random == Value::Random::kScaled && in.size() == 2) {
      const Value* x = in[0] == r ? in[1] : in[0];
      if (!x || x->kind != Value::Kind::kActivation || graph_.shape(x->node).size() != r->shape.size() ||
          graph_.shape(x->node)[0] != r->shape[0]) {
        return Unsupported(node, index, kWhy);
      }
      const size_t before = graph_.layers().size();
      SetOutput(node, 0,
                Value::Activation(r->survival == 1 ? x->node : graph_.RowDropout(x->node, 1 - r->survival)));
      for (int layer = static_cast<int>(before); layer < graph_.size(); ++layer) graph_.SetModule(layer, ModuleOf(node));
      return Status::Ok();
    } else {
      return Unsupported(node, index, kWhy);
    }
    SetOutput(node, 0, std::move(v));
    return Status::Ok();
  }

  // Ops on weights alone: a weight seen through Identity, transposed for MatMul, or rows of it picked by
  // constant ids (position embeddings).
  Status ImportParameterOp(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const std::string& op = node.op_type();
    const Attributes attrs(node);
    const Value& p = *in[0];
    if (recurrent_weight_nodes_.count(index)) return ImportRecurrentWeightOp(node, index, in);
    if (p.kind == Value::Kind::kParameter && p.relative_window > 0) return ImportRelativeBiasOp(node, index, in);
    if (op == "Identity" || op == "Cast") {
      SetOutput(node, 0, p);
    } else if (op == "Transpose" && p.kind == Value::Kind::kParameter) {
      std::vector<int64_t> perm = attrs.Ints("perm", {});
      if (perm.empty()) {
        for (size_t i = p.shape.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
      }
      Shape out;
      for (int64_t a : perm) out.push_back(p.shape.at(a));
      SetOutput(node, 0, Value::Parameter(out));
    } else if (op == "Expand" && p.kind == Value::Kind::kParameter && in.size() > 1 && in[1] && in[1]->has_data) {
      // Kept symbolic: a consumer that has an activation to take the batch from lowers it (Concat).
      Shape target;
      for (double d : in[1]->data) target.push_back(ToInt(d));
      Value v = Value::Parameter(p.shape);
      try {
        v.shape = BroadcastShapes(p.shape, target);
      } catch (const std::logic_error& e) {
        return NodeError(node, index, e.what());
      }
      v.expanded_param = p.expanded_param.value_or(p.shape);
      SetOutput(node, 0, std::move(v));
    } else if (op == "Gather" && p.kind == Value::Kind::kParameter && in.size() > 1 && in[1] && in[1]->has_data &&
               attrs.Int("axis", 0) == 0 && p.shape.size() == 2 && RelativeWindow(p.shape, *in[1]) > 0) {
      Value v = Value::Parameter({in[1]->shape.empty() ? 1 : NumElements(in[1]->shape), p.shape[1]});
      v.relative_window = RelativeWindow(p.shape, *in[1]);
      v.expanded_param = p.shape;  // the table: what is trained
      SetOutput(node, 0, std::move(v));
    } else if (op == "Gather" && p.kind == Value::Kind::kParameter && in.size() > 1 && in[1] && in[1]->has_data &&
               attrs.Int("axis", 0) == 0 && p.shape.size() == 2) {
      Shape out = in[1]->shape;
      out.push_back(p.shape[1]);
      SetOutput(node, 0, Value::Parameter(out));
    } else {
      auto folded = ConstantFolder::Fold(node, in, opset_);  // small weights with data (eps), and Shape
      if (!folded.ok()) return Unsupported(node, index, "an op on weights alone is not supported");
      for (size_t i = 0; i < folded->size(); ++i) SetOutput(node, static_cast<int>(i), std::move((*folded)[i]));
    }
    return Status::Ok();
  }

  int Act(const Value* v) const { return v->node; }

  // The window whose relative position index (graph::RelativePositionIndex) `indices` is, over a table of
  // (2 window - 1)^2 rows; 0 if it is not one.
  static int64_t RelativeWindow(const Shape& table, const Value& indices) {
    const auto n = static_cast<int64_t>(indices.data.size());
    const auto window = static_cast<int64_t>(std::llround(std::sqrt(std::sqrt(static_cast<double>(n)))));
    if (window < 1 || window > 64 || window * window * window * window != n ||
        table[0] != (2 * window - 1) * (2 * window - 1)) {
      return 0;
    }
    const std::vector<int64_t> expected = RelativePositionIndex(window);
    for (int64_t i = 0; i < n; ++i) {
      if (indices.data[static_cast<size_t>(i)] != static_cast<double>(expected[static_cast<size_t>(i)])) return 0;
    }
    return window;
  }

  // Swin's bias table gathered by the relative position index, on its way to the attention logits:
  // table[index] (N^2 x heads) -> Reshape (N, N, heads) -> Transpose (heads, N, N) -> Unsqueeze (1, heads, N, N).
  // Added to the logits it is graph::RelativePositionBias; other ops on it are not supported.
  Status ImportRelativeBiasOp(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const std::string& op = node.op_type();
    const Value& p = *in[0];
    const int64_t n = p.relative_window * p.relative_window, heads = p.expanded_param->at(1);
    Shape target;
    if (op == "Reshape" && in.size() > 1 && in[1] && in[1]->has_data) {
      auto reshaped = ConstantFolder::ReshapeTarget(p.shape, in[1]->data, false);
      if (reshaped.ok()) target = *reshaped;
    } else if (op == "Unsqueeze" || op == "Squeeze") {
      std::vector<int64_t> axes = Attributes(node).Ints("axes", {});
      if (in.size() > 1 && in[1] && in[1]->has_data) {
        axes.clear();
        for (double d : in[1]->data) axes.push_back(ToInt(d));
      }
      auto squeezed = ConstantFolder::SqueezeShape(op == "Unsqueeze", p.shape, axes);
      if (squeezed.ok()) target = *squeezed;
    }
    Value v = p;
    Shape core = target;  // without leading ones
    while (!core.empty() && core.front() == 1) core.erase(core.begin());
    if (op == "Identity" || op == "Cast") {
      SetOutput(node, 0, v);
      return Status::Ok();
    }
    if (!p.relative_heads_first && !target.empty() && core == Shape{n, n, heads}) {
      v.shape = target;
    } else if (p.relative_heads_first && !target.empty() && core == Shape{heads, n, n}) {
      v.shape = target;
    } else if (op == "Transpose" && !p.relative_heads_first && p.shape == Shape{n, n, heads} &&
               Attributes(node).Ints("perm", {}) == std::vector<int64_t>{2, 0, 1}) {
      v.shape = {heads, n, n};
      v.relative_heads_first = true;
    } else {
      return Unsupported(node, index, "a relative position bias table gathered, then only laid out as (heads, N, N)");
    }
    SetOutput(node, 0, std::move(v));
    return Status::Ok();
  }

  // Einsum of two activations that is a batched matrix product (MaxViT's attention): the same leading
  // letters on both inputs and the output, then "i k, k j -> i j" (MatMul) or "i k, j k -> i j" (MatMul by
  // the second transposed). Other equations are not supported.
  Status ImportEinsum(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    std::string equation;
    for (char c : Attributes(node).String("equation", "")) {
      if (c != ' ') equation += c;
    }
    const size_t comma = equation.find(','), arrow = equation.find("->");
    const char* kWhy = "only batched matrix products (\"...ik,...kj->...ij\" or \"...ik,...jk->...ij\") are supported";
    if (in.size() != 2 || !in[0] || !in[1] || in[0]->kind != Value::Kind::kActivation ||
        in[1]->kind != Value::Kind::kActivation || comma == std::string::npos || arrow == std::string::npos ||
        arrow < comma) {
      return Unsupported(node, index, kWhy);
    }
    const std::string a = equation.substr(0, comma), b = equation.substr(comma + 1, arrow - comma - 1),
                      out = equation.substr(arrow + 2);
    const size_t rank = a.size();
    if (rank < 2 || b.size() != rank || out.size() != rank || a.find('.') != std::string::npos ||
        graph_.shape(in[0]->node).size() != rank || graph_.shape(in[1]->node).size() != rank) {
      return Unsupported(node, index, kWhy);
    }
    const std::string prefix = a.substr(0, rank - 2);
    const char i = a[rank - 2], k = a[rank - 1];
    const std::set<char> letters(a.begin(), a.end());
    if (letters.size() != rank || b.compare(0, rank - 2, prefix) != 0 || out.compare(0, rank - 2, prefix) != 0 ||
        out[rank - 2] != i || i == k) {
      return Unsupported(node, index, kWhy);
    }
    const char j = out[rank - 1];
    int second = in[1]->node;
    if (b[rank - 2] == j && b[rank - 1] == k && j != k && !letters.count(j)) {
      std::vector<int64_t> perm;
      for (size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int64_t>(d));
      std::swap(perm[rank - 2], perm[rank - 1]);
      second = graph_.Transpose(second, perm);
    } else if (!(b[rank - 2] == k && b[rank - 1] == j && j != k && !letters.count(j))) {
      return Unsupported(node, index, kWhy);
    }
    SetOutput(node, 0, Value::Activation(graph_.MatMul(in[0]->node, second)));
    return Status::Ok();
  }

  // Pad: the identity when it pads nothing (PyTorch's export of an unpadded average pooling); zeros
  // around the spatial axes before an unpadded AveragePool are that pooling's padding counted in the
  // mean (PyTorch's avg_pool2d with padding, count_include_pad). Other padding is not supported.
  Status ImportPad(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const Attributes attrs(node);
    const Value* x = in.empty() || !in[0] || in[0]->kind != Value::Kind::kActivation ? nullptr : in[0];
    if (!x) return Unsupported(node, index, "only padding an activation is supported");
    const Value* pads = in.size() > 1 ? in[1] : nullptr;
    const std::optional<double> value = node.input_size() > 2 && !node.input(2).empty() ? ScalarInput(node, 2) : 0.0;
    const bool axes_given = node.input_size() > 3 && !node.input(3).empty();
    if (opset_ < 11 || attrs.String("mode", "constant") != "constant" || !pads || !pads->has_data || value != 0.0 ||
        axes_given) {
      return Unsupported(node, index, "only constant zero padding with constant pads (opset 11+) is supported");
    }
    const size_t rank = graph_.shape(Act(x)).size();
    if (pads->data.size() != 2 * rank) return NodeError(node, index, "pads must have two entries per axis");
    if (std::all_of(pads->data.begin(), pads->data.end(), [](double p) { return p == 0; })) {
      SetOutput(node, 0, *x);
      return Status::Ok();
    }
    // The spatial padding of NCHW, the same on every side; none on the batch and channel axes.
    const double spatial = pads->data[2];
    const bool square = rank == 4 && pads->data[0] == 0 && pads->data[1] == 0 && pads->data[4] == 0 &&
                        pads->data[5] == 0 && pads->data[3] == spatial && pads->data[6] == spatial &&
                        pads->data[7] == spatial && spatial > 0;
    int pool_index = -1;
    const onnx::NodeProto* pool = SoleConsumer(node.output(0), &pool_index);
    if (square && pool && pool->op_type() == "AveragePool") {
      const Attributes pool_attrs(*pool);
      const auto kernel = pool_attrs.Ints("kernel_shape", {1, 1});
      const auto strides = pool_attrs.Ints("strides", {1, 1});
      const auto pool_pads = pool_attrs.Ints("pads", {0, 0, 0, 0});
      const bool unpadded = std::all_of(pool_pads.begin(), pool_pads.end(), [](int64_t p) { return p == 0; });
      if (AllEqual(kernel) && AllEqual(strides) && unpadded && pool_attrs.Int("ceil_mode", 0) == 0) {
        consumed_.insert(pool_index);
        SetOutput(*pool, 0,
                  Value::Activation(graph_.AvgPool2d(Act(x), kernel[0], strides[0], static_cast<int64_t>(spatial),
                                                     /*count_include_pad=*/true)));
        return Status::Ok();
      }
    }
    // Any other zero padding: one pad op per padded axis (Swin's windows below 224x224).
    if (std::any_of(pads->data.begin(), pads->data.end(), [](double p) { return p < 0; })) {
      return Unsupported(node, index, "negative pads (cropping) are not supported");
    }
    int padded = Act(x);
    for (size_t axis = 0; axis < rank; ++axis) {
      const int64_t before = ToInt(pads->data[axis]), after = ToInt(pads->data[axis + rank]);
      if (before + after > 0) padded = graph_.Pad(padded, static_cast<int64_t>(axis), before, after);
    }
    SetOutput(node, 0, Value::Activation(padded));
    return Status::Ok();
  }

  Status ImportActivationOp(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const std::string& op = node.op_type();
    const Attributes attrs(node);
    auto activation = [&](int i) -> const Value* {
      return i < static_cast<int>(in.size()) && in[i] && in[i]->kind == Value::Kind::kActivation ? in[i] : nullptr;
    };
    const Value* x0 = activation(0);
    auto set = [&](int node_index) { SetOutput(node, 0, Value::Activation(node_index)); };
    auto unary = [&](OpKind kind, std::map<std::string, int64_t> a = {}) {
      if (!x0) {
        (void)Unsupported(node, index, "the first input must be an activation");
      } else {
        set(graph_.Unary(kind, Act(x0), std::move(a)));
      }
    };

    if (op == "Identity" || op == "Cast") {
      if (!x0) return NodeError(node, index, "expects an activation");
      SetOutput(node, 0, *x0);
    } else if (op == "Dropout") {
      if (!x0) return NodeError(node, index, "expects an activation");
      const std::optional<double> training = ScalarInput(node, 2);
      // The ratio is an input from opset 12 (an attribute before), 0.5 when not given.
      std::optional<double> ratio = 0.5;
      if (opset_ >= 12 && node.input_size() > 1 && !node.input(1).empty()) {
        ratio = ScalarInput(node, 1);
      } else if (opset_ < 12) {
        ratio = attrs.Float("ratio", 0.5f);
      }
      // Dropout is the identity unless training mode is on (opset 12+), or before opset 12, and
      // always with a ratio of 0 (nn.Dropout(0.0)).
      if ((opset_ >= 12 && (!training || *training == 0)) || (ratio && *ratio == 0)) {
        SetOutput(node, 0, *x0);
      } else if (!ratio) {
        return Unsupported(node, index, "the ratio must be a constant");
      } else if (!(*ratio > 0 && *ratio < 1)) {
        return NodeError(node, index, "the ratio must be in [0, 1), not " + std::to_string(*ratio));
      } else {
        set(graph_.Dropout(Act(x0), *ratio));
      }
    } else if (op == "Conv") {
      if (!x0 || !in[1] || in[1]->kind != Value::Kind::kParameter) {
        return Unsupported(node, index, "needs an activation and a weight");
      }
      const Shape& w = in[1]->shape;
      if (w.size() != 4) return Unsupported(node, index, "only 2-D convolutions are supported");
      const auto kernel = attrs.Ints("kernel_shape", {w[2], w[3]});
      const auto strides = attrs.Ints("strides", {1, 1});
      const auto pads = attrs.Ints("pads", {0, 0, 0, 0});
      const int64_t groups = attrs.Int("group", 1);
      if (!AllEqual(attrs.Ints("dilations", {1, 1})) || attrs.Ints("dilations", {1, 1})[0] != 1) {
        return Unsupported(node, index, "dilated convolution is not supported");
      }
      // Pads are (top, left, bottom, right): symmetric per axis; kernels may be rectangular (1x7).
      if (kernel.size() != 2 || !AllEqual(strides) || pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
        return Unsupported(node, index,
                           "only equal strides and the same padding on both sides of an axis are supported");
      }
      weight_names_.push_back(node.input(1));
      const bool has_bias = in.size() > 2 && in[2];
      const int conv = graph_.Conv2d(Act(x0), w[1] * groups, w[0], graph::Hw{kernel[0], kernel[1]}, strides[0],
                                     graph::Hw{pads[0], pads[1]}, groups, has_bias);
      graph_.SetParamNames(conv, {node.input(1), has_bias ? node.input(2) : ""});
      set(conv);
    } else if (op == "BatchNormalization") {
      if (!x0) return NodeError(node, index, "expects an activation");
      ++batch_norms_;
      // Training exports compute batch statistics: training_mode=1 (opset 14+) or extra outputs (before).
      const bool training = opset_ >= 14 ? attrs.Int("training_mode", 0) != 0 : node.output_size() > 1;
      if (!training && eval_batch_norm_.empty()) eval_batch_norm_ = Where(node, index);
      const int norm = graph_.BatchNorm2d(Act(x0), attrs.Float("epsilon", graph::kDefaultNormEpsilon));
      std::vector<std::string> names;  // scale, B, input_mean, input_var
      for (int k = 1; k < 5; ++k) names.push_back(k < node.input_size() ? node.input(k) : "");
      graph_.SetParamNames(norm, std::move(names));
      set(norm);
    } else if (op == "Relu") {
      if (!x0) return NodeError(node, index, "expects an activation");
      set(graph_.Relu(Act(x0)));
    } else if (op == "Clip") {
      double lo = attrs.Float("min", -std::numeric_limits<float>::max());
      double hi = attrs.Float("max", std::numeric_limits<float>::max());
      if (in.size() > 1 && in[1]) {
        if (!in[1]->scalar()) return Unsupported(node, index, "bounds must be constants");
        lo = in[1]->data[0];
      }
      if (in.size() > 2 && in[2]) {
        if (!in[2]->scalar()) return Unsupported(node, index, "bounds must be constants");
        hi = in[2]->data[0];
      }
      if (!x0) return NodeError(node, index, "expects an activation");
      if (lo == 0 && hi == 6) {
        set(graph_.Unary(OpKind::kRelu6, Act(x0)));
      } else if (lo == 0 && hi >= std::numeric_limits<float>::max()) {
        set(graph_.Relu(Act(x0)));
      } else {
        return Unsupported(node, index, "only Clip(0, 6) (ReLU6) and Clip(0) (ReLU) are supported");
      }
    } else if (op == "HardSigmoid") {
      if (!Near(attrs.Float("alpha", 0.2f), 1.0 / 6) || !Near(attrs.Float("beta", 0.5f), 0.5)) {
        return Unsupported(node, index, "only PyTorch's hardsigmoid (alpha 1/6, beta 1/2) is supported");
      }
      // x * HardSigmoid(x) is how opset 13 spells HardSwish.
      int mul_index = -1;
      const onnx::NodeProto* mul = SoleConsumer(node.output(0), &mul_index);
      if (x0 && mul && mul->op_type() == "Mul" && mul->input_size() == 2 &&
          (mul->input(0) == node.input(0) || mul->input(1) == node.input(0))) {
        consumed_.insert(mul_index);
        SetOutput(*mul, 0, Value::Activation(graph_.Unary(OpKind::kHardSwish, Act(x0))));
        return Status::Ok();
      }
      unary(OpKind::kHardSigmoid);
    } else if (op == "HardSwish") {
      unary(OpKind::kHardSwish);
    } else if (op == "Sigmoid") {
      // x * Sigmoid(x) is SiLU (swish).
      int mul_index = -1;
      const onnx::NodeProto* mul = SoleConsumer(node.output(0), &mul_index);
      if (x0 && mul && mul->op_type() == "Mul" && mul->input_size() == 2 &&
          (mul->input(0) == node.input(0) || mul->input(1) == node.input(0))) {
        consumed_.insert(mul_index);
        SetOutput(*mul, 0, Value::Activation(graph_.Unary(OpKind::kSilu, Act(x0))));
        return Status::Ok();
      }
      unary(OpKind::kSigmoid);
    } else if (op == "Tanh") {
      unary(OpKind::kTanh);
    } else if (op == "Sqrt") {
      unary(OpKind::kSqrt);
    } else if (op == "Erf") {
      return Unsupported(node, index, "Erf is supported as part of GELU, x * 0.5 * (1 + erf(x / sqrt(2)))");
    } else if (op == "Pow") {
      const std::optional<double> exponent = ScalarInput(node, 1);
      if (!x0 || !exponent) return Unsupported(node, index, "only an activation to a constant power is supported");
      if (*exponent == 0.5) {
        unary(OpKind::kSqrt);
      } else if (*exponent == std::round(*exponent) && std::fabs(*exponent) <= 16) {
        unary(OpKind::kPow, {{"exponent", static_cast<int64_t>(*exponent)}});
      } else {
        return Unsupported(node, index, "only integer exponents and 0.5 are supported");
      }
    } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
      return ImportArithmetic(node, index, in);
    } else if (op == "MatMul" || op == "Gemm") {
      return ImportMatMul(node, index, in);
    } else if (op == "MaxPool" || op == "AveragePool") {
      if (!x0) return NodeError(node, index, "expects an activation");
      const auto kernel = attrs.Ints("kernel_shape", {1, 1});
      const auto strides = attrs.Ints("strides", {1, 1});
      const auto pads = attrs.Ints("pads", {0, 0, 0, 0});
      const bool ceil_mode = attrs.Int("ceil_mode", 0) != 0;
      const auto positive = [](const std::vector<int64_t>& v) {
        return std::all_of(v.begin(), v.end(), [](int64_t x) { return x > 0; });
      };
      if (kernel.empty() || !positive(kernel) || strides.empty() || !positive(strides)) {
        return NodeError(node, index, "a pooling window and its strides are at least 1");  // [0, 0] pooled to NaN
      }
      if (!AllEqual(kernel) || !AllEqual(strides) || !AllEqual(pads) || (ceil_mode && op == "AveragePool")) {
        return Unsupported(node, index,
                           "only square windows, equal strides, symmetric padding (and floor mode for average "
                           "pooling) are supported");
      }
      set(op == "MaxPool"
              ? graph_.MaxPool2d(Act(x0), kernel[0], strides[0], pads[0], ceil_mode)
              : graph_.AvgPool2d(Act(x0), kernel[0], strides[0], pads[0], attrs.Int("count_include_pad", 0) != 0));
    } else if (op == "Pad") {
      return ImportPad(node, index, in);
    } else if (op == "Einsum") {
      return ImportEinsum(node, index, in);
    } else if (op == "GlobalAveragePool") {
      if (!x0) return NodeError(node, index, "expects an activation");
      const Shape& s = graph_.shape(Act(x0));
      if (s.size() != 4 || s[2] != s[3]) return Unsupported(node, index, "needs a square NCHW input");
      set(graph_.AvgPool2d(Act(x0), s[2], 1));
    } else if (op == "Flatten") {
      if (!x0) return NodeError(node, index, "expects an activation");
      const Shape& s = graph_.shape(Act(x0));
      const int64_t axis = NormalizeAxis(attrs.Int("axis", 1), s.size());
      if (axis == 1) {
        set(graph_.Flatten(Act(x0)));
      } else {
        int64_t outer = 1;
        for (int64_t d = 0; d < axis; ++d) outer *= s[d];
        set(graph_.Reshape(Act(x0), {outer, NumElements(s) / outer}));
      }
    } else if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze") {
      if (!x0) return NodeError(node, index, "expects an activation");
      const Shape& s = graph_.shape(Act(x0));
      Result<Shape> target = InvalidArgument("");
      if (op == "Reshape") {
        if (!in[1] || !in[1]->has_data) return Unsupported(node, index, "the target shape must be a constant");
        target = ConstantFolder::ReshapeTarget(s, in[1]->data, attrs.Int("allowzero", 0) != 0);
      } else {
        std::vector<int64_t> axes = attrs.Ints("axes", {});
        if (in.size() > 1 && in[1]) {
          if (!in[1]->has_data) return Unsupported(node, index, "the axes must be a constant");
          axes.clear();
          for (double d : in[1]->data) axes.push_back(ToInt(d));
        }
        target = ConstantFolder::SqueezeShape(op == "Unsqueeze", s, axes);
      }
      if (!target.ok()) return NodeError(node, index, target.status().message());
      set(*target == s ? Act(x0) : graph_.Reshape(Act(x0), *target));
    } else if (op == "Transpose") {
      if (!x0) return NodeError(node, index, "expects an activation");
      std::vector<int64_t> perm = attrs.Ints("perm", {});
      const size_t rank = graph_.shape(Act(x0)).size();
      if (perm.empty()) {
        for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
      }
      set(graph_.Transpose(Act(x0), perm));
    } else if (op == "ReduceMean") {
      if (!x0) return NodeError(node, index, "expects an activation");
      if (TryLayerNorm(node, index, Act(x0))) return Status::Ok();
      set(graph_.ReduceMean(Act(x0), attrs.Ints("axes", {}), attrs.Int("keepdims", 1) != 0));
    } else if (op == "Concat") {
      std::vector<int> inputs;
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] && in[i]->expanded_param) {
          const std::optional<int> lowered = ExpandedParamAsActivation(node, in, i);
          if (!lowered) {
            return Unsupported(node, index, "an expanded weight needs an activation input of its shape off the axis");
          }
          inputs.push_back(*lowered);
          continue;
        }
        if (!activation(static_cast<int>(i))) return Unsupported(node, index, "every input must be an activation");
        inputs.push_back(Act(in[i]));
      }
      set(graph_.Concat(inputs, attrs.Int("axis", 0)));
    } else if (op == "Split") {
      if (!x0) return NodeError(node, index, "expects an activation");
      const Shape& s = graph_.shape(Act(x0));
      const int64_t axis = NormalizeAxis(attrs.Int("axis", 0), s.size());
      std::vector<int64_t> sizes = attrs.Ints("split", {});
      if (in.size() > 1 && in[1]) {
        if (!in[1]->has_data) return Unsupported(node, index, "split sizes must be constants");
        sizes.clear();
        for (double d : in[1]->data) sizes.push_back(ToInt(d));
      }
      if (sizes.empty()) sizes.assign(node.output_size(), s.at(axis) / node.output_size());
      int64_t start = 0;
      for (int o = 0; o < node.output_size() && o < static_cast<int>(sizes.size()); ++o) {
        SetOutput(node, o, Value::Activation(graph_.Slice(Act(x0), axis, start, start + sizes[o])));
        start += sizes[o];
      }
    } else if (op == "Slice") {
      if (!x0) return NodeError(node, index, "expects an activation");
      for (int i = 1; i < static_cast<int>(in.size()); ++i) {
        if (in[i] && !in[i]->has_data)
          return Unsupported(node, index, "starts, ends, axes and steps must be constants");
      }
      if (!in[1] || !in[2]) return Unsupported(node, index, "needs starts and ends (opset 10+)");
      int x = Act(x0);
      for (size_t k = 0; k < in[1]->data.size(); ++k) {
        const Shape& s = graph_.shape(x);
        const int64_t axis =
            NormalizeAxis(in.size() > 3 && in[3] ? ToInt(in[3]->data.at(k)) : static_cast<int64_t>(k), s.size());
        const int64_t step = in.size() > 4 && in[4] ? ToInt(in[4]->data.at(k)) : 1;
        if (step < 1) return Unsupported(node, index, "only positive steps are supported");
        const double start_d = in[1]->data[k], end_d = in[2]->data.at(k);
        const auto [start, end] = ConstantFolder::SliceRange(ToInt(start_d), ToInt(end_d), s.at(axis));
        if (step > 1 && end > start) {
          x = graph_.StridedSlice(x, axis, start, end, step);
        } else if (start != 0 || end != s[axis]) {
          x = graph_.Slice(x, axis, start, end);
        }
      }
      set(x);
    } else if (op == "Gather") {
      const int64_t axis = attrs.Int("axis", 0);
      if (in[0]->kind == Value::Kind::kParameter && activation(1) && axis == 0 && in[0]->shape.size() == 2) {
        const int embedding = graph_.Embedding(Act(in[1]), in[0]->shape[0], in[0]->shape[1]);
        graph_.SetParamNames(embedding, {node.input(0)});
        set(embedding);
      } else if (x0 && in[1] && in[1]->has_data && in[1]->data.size() == 1) {
        const Shape& s = graph_.shape(Act(x0));
        const int64_t a = NormalizeAxis(axis, s.size());
        int64_t i = ToInt(in[1]->data[0]);
        if (i < 0) i += s.at(a);
        set(graph_.Slice(Act(x0), a, i, i + 1, /*squeeze=*/in[1]->shape.empty()));
      } else {
        return Unsupported(node, index,
                           "supported: rows of a weight by activation ids (embeddings), one constant index of an "
                           "activation");
      }
    } else if (op == "Softmax") {
      if (!x0) return NodeError(node, index, "expects an activation");
      const size_t rank = graph_.shape(Act(x0)).size();
      const int64_t axis = NormalizeAxis(attrs.Int("axis", opset_ >= 13 ? -1 : 1), rank);
      // Before opset 13 Softmax flattens from `axis` on: the same as the last axis only when axis is the last.
      if (opset_ < 13 && axis != static_cast<int64_t>(rank) - 1) {
        return Unsupported(node, index, "before opset 13 only a softmax over the last axis is supported");
      }
      set(graph_.Softmax(Act(x0), axis));
    } else if (op == "LayerNormalization") {
      if (!x0) return NodeError(node, index, "expects an activation");
      const size_t rank = graph_.shape(Act(x0)).size();
      if (NormalizeAxis(attrs.Int("axis", -1), rank) != static_cast<int64_t>(rank) - 1) {
        return Unsupported(node, index, "only a normalization over the last axis is supported");
      }
      set(graph_.LayerNorm(Act(x0), attrs.Float("epsilon", graph::kDefaultNormEpsilon)));
    } else if (op == "LSTM" || op == "GRU") {
      return ImportRecurrent(node, index, in);
    } else if (op == "Where") {
      return ImportWhere(node, index, in);
    } else if (op == "Resize") {
      return ImportResize(node, index, in);
    } else {
      return Unsupported(node, index, "");
    }
    return Status::Ok();
  }

  // A parameter Expand-ed to the batch as a Concat input (ViT's class token, torch.cat([token.expand(n, -1, -1),
  // x], 1)): zeros taken from the leading rows of an activation input of the Concat, then the parameter added
  // with broadcasting. Slice, Affine(0) and AddBroadcast are kinds with kernels, gradients and costs already;
  // the parameter's gradient is dY summed over the batch, as Expand's backward is.
  std::optional<int> ExpandedParamAsActivation(const onnx::NodeProto& node, const std::vector<const Value*>& in,
                                               size_t param_input) {
    const Value& p = *in[param_input];
    const int64_t axis = NormalizeAxis(Attributes(node).Int("axis", 0), p.shape.size());
    for (const Value* v : in) {
      if (!v || v->kind != Value::Kind::kActivation) continue;
      const Shape& s = graph_.shape(v->node);
      if (s.size() != p.shape.size() || axis < 0 || axis >= static_cast<int64_t>(s.size()) ||
          s[axis] < p.shape[axis]) {
        continue;
      }
      bool fits = true;
      for (size_t d = 0; d < s.size(); ++d) fits &= static_cast<int64_t>(d) == axis || s[d] == p.shape[d];
      if (!fits) continue;
      const int rows = s[axis] == p.shape[axis] ? v->node : graph_.Slice(v->node, axis, 0, p.shape[axis]);
      const int zeros = graph_.Unary(OpKind::kAffine, rows, {{"alpha_e6", 0}, {"beta_e6", 0}});
      return graph_.BinaryParam(OpKind::kAddBroadcast, zeros, *p.expanded_param);
    }
    return std::nullopt;
  }

  // Add, Sub, Mul, Div: of two activations, an activation and a scalar constant (an affine map),
  // or an activation and a weight. x * 0.5 * (1 + erf(x / sqrt 2)) is GELU.
  Status ImportArithmetic(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const std::string& op = node.op_type();
    if (in.size() != 2 || !in[0] || !in[1]) return NodeError(node, index, "expects two inputs");
    if (op == "Div" && TryGelu(node, index)) return Status::Ok();
    const bool a_act = in[0]->kind == Value::Kind::kActivation, b_act = in[1]->kind == Value::Kind::kActivation;
    auto set = [&](int n) { SetOutput(node, 0, Value::Activation(n)); };
    const OpKind kind = op == "Add"   ? OpKind::kAddBroadcast
                        : op == "Sub" ? OpKind::kSub
                        : op == "Mul" ? OpKind::kMul
                                      : OpKind::kDiv;
    if (a_act && b_act) {
      const Shape& sa = graph_.shape(in[0]->node);
      if (op == "Add" && sa == graph_.shape(in[1]->node)) {
        set(graph_.Add(in[0]->node, in[1]->node));
      } else {
        set(graph_.Binary(kind, in[0]->node, in[1]->node));
      }
      return Status::Ok();
    }
    const Value& x = a_act ? *in[0] : *in[1];
    const Value& c = a_act ? *in[1] : *in[0];
    if (c.scalar()) {
      const double k = c.data[0];
      double alpha = 1, beta = 0;
      if (op == "Add") {
        beta = k;
      } else if (op == "Sub") {
        alpha = a_act ? 1 : -1;
        beta = a_act ? -k : k;
      } else if (op == "Mul") {
        alpha = k;
      } else if (a_act && k != 0) {
        alpha = 1 / k;
      } else {
        return Unsupported(node, index, "dividing a constant by an activation is not supported");
      }
      set(graph_.Unary(OpKind::kAffine, x.node,
                       {{"alpha_e6", std::llround(alpha * 1e6)}, {"beta_e6", std::llround(beta * 1e6)}}));
      return Status::Ok();
    }
    if (c.kind == Value::Kind::kParameter && c.relative_window > 0) {
      if (op != "Add" || !c.relative_heads_first) {
        return Unsupported(node, index, "a relative position bias is only added, laid out as (heads, N, N)");
      }
      set(graph_.RelativePositionBias(x.node, c.relative_window));
      return Status::Ok();
    }
    if (op == "Add" && c.kind == Value::Kind::kConstant && c.has_data) {
      if (const std::optional<std::array<int64_t, 3>> mask = ShiftedWindowMaskOf(c)) {
        set(graph_.ShiftedWindowMask(x.node, (*mask)[0], (*mask)[1], (*mask)[2]));
        return Status::Ok();
      }
      return Unsupported(node, index, "adding a constant tensor is supported for Swin's shifted-window mask only");
    }
    if (c.kind == Value::Kind::kParameter && (a_act || op == "Add" || op == "Mul")) {
      set(graph_.BinaryParam(kind, x.node, c.expanded_param.value_or(c.shape)));
      return Status::Ok();
    }
    return Unsupported(node, index, "only an activation with another, a scalar constant or a weight is supported");
  }

  // The side, window and shift of a constant that is Swin's shifted-window mask (graph::ShiftedWindowMask)
  // shaped (1, windows, 1, N, N) as it is added to the logits: found by comparing, not assumed.
  static std::optional<std::array<int64_t, 3>> ShiftedWindowMaskOf(const Value& c) {
    Shape s = c.shape;
    if (s.size() != 5 || s[0] != 1 || s[2] != 1 || s[3] != s[4]) return std::nullopt;
    const int64_t n = s[3], windows = s[1];
    const auto window = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
    const auto per_side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(windows))));
    if (window * window != n || per_side * per_side != windows) return std::nullopt;
    for (int64_t shift = 1; shift < window; ++shift) {
      const std::vector<float> mask = ShiftedWindowMask(per_side * window, window, shift);
      if (mask.size() == c.data.size() && std::equal(mask.begin(), mask.end(), c.data.begin(),
                                                     [](float m, double d) { return static_cast<double>(m) == d; })) {
        return std::array<int64_t, 3>{per_side * window, window, shift};
      }
    }
    return std::nullopt;
  }

  // MatMul or Gemm by a weight: a linear layer (with the bias of a following Add); of two activations: matmul.
  Status ImportMatMul(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const Attributes attrs(node);
    if (in.size() < 2 || !in[0] || !in[1] || in[0]->kind != Value::Kind::kActivation) {
      return Unsupported(node, index, "the first input must be an activation");
    }
    const int x = in[0]->node;
    if (node.op_type() == "Gemm") {
      if (attrs.Int("transA", 0) != 0 || attrs.Float("alpha", 1) != 1 || attrs.Float("beta", 1) != 1 ||
          in[1]->kind != Value::Kind::kParameter) {
        return Unsupported(node, index, "only Gemm by a weight, without transA, alpha or beta, is supported");
      }
      if (in[1]->shape.size() != 2) return NodeError(node, index, "a Gemm weight must have two dimensions");
      const Shape& w = in[1]->shape;
      const bool trans_b = attrs.Int("transB", 0) != 0;
      const int64_t in_features = trans_b ? w[1] : w[0], out_features = trans_b ? w[0] : w[1];
      if (graph_.shape(x).size() != 2 || graph_.shape(x)[1] != in_features) {
        return NodeError(node, index, "input features do not match the weight");
      }
      const bool bias = in.size() > 2 && in[2];
      // LinearNd, not Linear: POET's count (2 x params + out_features, for its zoo only) leaves out
      // every row but one, 33,152 FLOPs for a 64x128 input to 128 -> 128 instead of 2.1 M.
      const int linear = graph_.LinearNd(x, in_features, out_features, bias);
      graph_.SetParamNames(linear, {node.input(1), bias ? node.input(2) : ""}, !trans_b);
      SetOutput(node, 0, Value::Activation(linear));
      return Status::Ok();
    }
    if (in[1]->kind == Value::Kind::kActivation) {
      SetOutput(node, 0, Value::Activation(graph_.MatMul(x, in[1]->node)));
      return Status::Ok();
    }
    if (in[1]->kind != Value::Kind::kParameter || in[1]->shape.size() != 2) {
      return Unsupported(node, index, "only a product with a 2-D weight or another activation is supported");
    }
    const int64_t in_features = in[1]->shape[0], out_features = in[1]->shape[1];
    // torch.nn.Linear on more than two axes exports MatMul, then Add of the bias.
    int add_index = -1;
    const onnx::NodeProto* add = SoleConsumer(node.output(0), &add_index);
    if (add && add->op_type() == "Add" && add->input_size() == 2) {
      const std::string& other = add->input(0) == node.output(0) ? add->input(1) : add->input(0);
      auto bias = values_.find(other);
      if (bias != values_.end() && bias->second.kind == Value::Kind::kParameter &&
          bias->second.shape == Shape{out_features}) {
        consumed_.insert(add_index);
        const int linear = graph_.LinearNd(x, in_features, out_features, true);
        graph_.SetParamNames(linear, {node.input(1), other}, true);
        SetOutput(*add, 0, Value::Activation(linear));
        return Status::Ok();
      }
    }
    const int linear = graph_.LinearNd(x, in_features, out_features, false);
    graph_.SetParamNames(linear, {node.input(1), ""}, true);
    SetOutput(node, 0, Value::Activation(linear));
    return Status::Ok();
  }

  // The node producing `tensor` among the not yet imported nodes after `after`, if `tensor` has one consumer.
  const onnx::NodeProto* Next(const std::string& tensor, const std::string& op, int* index) const {
    const onnx::NodeProto* n = SoleConsumer(tensor, index);
    return n && n->op_type() == op && !consumed_.count(*index) ? n : nullptr;
  }

  // The input of `node` other than `tensor`, as a scalar constant.
  std::optional<double> OtherScalar(const onnx::NodeProto& node, const std::string& tensor) const {
    if (node.input_size() != 2) return std::nullopt;
    const int other = node.input(0) == tensor ? 1 : node.input(1) == tensor ? 0 : -1;
    if (other < 0) return std::nullopt;
    return ScalarInput(node, other);
  }

  // PyTorch before opset 20 exports GELU as Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5).
  bool TryGelu(const onnx::NodeProto& div, int div_index) {
    const Value* x = Input(div, 0);
    const std::optional<double> root2 = ScalarInput(div, 1);
    if (!x || x->kind != Value::Kind::kActivation || !root2 || !Near(*root2, std::sqrt(2.0))) return false;
    int erf_i = -1, add_i = -1, mul_i = -1, half_i = -1;
    const onnx::NodeProto* erf = Next(div.output(0), "Erf", &erf_i);
    const onnx::NodeProto* add = erf ? Next(erf->output(0), "Add", &add_i) : nullptr;
    if (!add || !Near(OtherScalar(*add, erf->output(0)).value_or(0), 1)) return false;
    const onnx::NodeProto* mul = Next(add->output(0), "Mul", &mul_i);
    if (!mul || (mul->input(0) != div.input(0) && mul->input(1) != div.input(0))) return false;
    const onnx::NodeProto* half = Next(mul->output(0), "Mul", &half_i);
    if (!half || !Near(OtherScalar(*half, mul->output(0)).value_or(0), 0.5)) return false;
    consumed_.insert({erf_i, add_i, mul_i, half_i});
    SetOutput(*half, 0, Value::Activation(graph_.Unary(OpKind::kGelu, x->node)));
    (void)div_index;
    return true;
  }

  // LayerNorm before opset 17: ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div,
  // then Mul(gamma) and Add(beta). The mean feeds Sub only; the difference feeds Pow and Div.
  bool TryLayerNorm(const onnx::NodeProto& mean, int mean_index, int x) {
    const Attributes attrs(mean);
    const size_t rank = graph_.shape(x).size();
    const std::vector<int64_t> axes = attrs.Ints("axes", {});
    if (axes.size() != 1 || NormalizeAxis(axes[0], rank) != static_cast<int64_t>(rank) - 1) return false;
    int sub_i = -1, pow_i = -1, mean2_i = -1, add_i = -1, sqrt_i = -1, div_i = -1, mul_i = -1, beta_i = -1;
    const onnx::NodeProto* sub = Next(mean.output(0), "Sub", &sub_i);
    if (!sub || sub->input(0) != mean.input(0) || sub->input(1) != mean.output(0)) return false;
    auto uses = consumers_.find(sub->output(0));
    if (uses == consumers_.end() || uses->second.size() != 2) return false;
    const onnx::NodeProto* pow = nullptr;
    const onnx::NodeProto* div = nullptr;
    for (int u : uses->second) {
      const onnx::NodeProto& n = model_.graph().node(u);
      if (n.op_type() == "Pow" && n.input(0) == sub->output(0)) {
        pow = &n;
        pow_i = u;
      }
      if (n.op_type() == "Div" && n.input(0) == sub->output(0)) {
        div = &n;
        div_i = u;
      }
    }
    if (!pow || !div || !Near(ScalarInput(*pow, 1).value_or(0), 2)) return false;
    const onnx::NodeProto* mean2 = Next(pow->output(0), "ReduceMean", &mean2_i);
    if (!mean2 || Attributes(*mean2).Ints("axes", {}) != axes) return false;
    const onnx::NodeProto* add = Next(mean2->output(0), "Add", &add_i);
    if (!add || !OtherScalar(*add, mean2->output(0))) return false;
    const onnx::NodeProto* sqrt = Next(add->output(0), "Sqrt", &sqrt_i);
    if (!sqrt || Next(sqrt->output(0), "Div", &div_i) != div || div->input(1) != sqrt->output(0)) return false;
    consumed_.insert({sub_i, pow_i, mean2_i, add_i, sqrt_i, div_i});
    std::string out = div->output(0);
    // The affine part: gamma, then beta. Without it the scale and shift stay at 1 and 0 (counted all the same).
    const int64_t features = graph_.shape(x).back();
    auto weight = [&](const onnx::NodeProto& n, const std::string& tensor) {
      const std::string& other = n.input(0) == tensor ? n.input(1) : n.input(0);
      auto it = values_.find(other);
      return it != values_.end() && it->second.kind == Value::Kind::kParameter && it->second.shape == Shape{features};
    };
    if (const onnx::NodeProto* mul = Next(out, "Mul", &mul_i); mul && weight(*mul, out)) {
      consumed_.insert(mul_i);
      out = mul->output(0);
      if (const onnx::NodeProto* beta = Next(out, "Add", &beta_i); beta && weight(*beta, out)) {
        consumed_.insert(beta_i);
        out = beta->output(0);
      }
    }
    const double epsilon = OtherScalar(*add, mean2->output(0)).value_or(graph::kDefaultNormEpsilon);
    values_[out] = Value::Activation(graph_.LayerNorm(x, epsilon));
    (void)mean_index;
    return true;
  }

  // The nodes between torch.nn's recurrent weights and an LSTM or GRU (Identity, Slice, Concat,
  // Unsqueeze on axis 0: the exporter's reordering of the gates), found before import so that only
  // these, and no other op on weights, follow initializer rows.
  void MarkRecurrentWeights() {
    const onnx::GraphProto& g = model_.graph();
    std::map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i) {
      for (const std::string& out : g.node(i).output()) producer[out] = i;
    }
    static const std::set<std::string> plumbing = {"Identity", "Slice", "Concat", "Unsqueeze"};
    std::vector<std::string> pending;
    for (const onnx::NodeProto& node : g.node()) {
      if (node.op_type() != "LSTM" && node.op_type() != "GRU") continue;
      for (int i = 1; i <= 3 && i < node.input_size(); ++i) pending.push_back(node.input(i));
    }
    while (!pending.empty()) {
      const std::string tensor = pending.back();
      pending.pop_back();
      auto it = producer.find(tensor);
      if (it == producer.end() || !plumbing.count(g.node(it->second).op_type())) continue;
      if (!recurrent_weight_nodes_.insert(it->second).second) continue;
      const onnx::NodeProto& node = g.node(it->second);
      // Slice's and Unsqueeze's other inputs are constants; Concat's are all parts.
      const int parts = node.op_type() == "Concat" ? node.input_size() : 1;
      for (int i = 0; i < parts; ++i) pending.push_back(node.input(i));
    }
  }

  // Rows of an initializer (axis 0) through Identity, Slice, Concat and Unsqueeze(0).
  Status ImportRecurrentWeightOp(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const std::string& op = node.op_type();
    const Attributes attrs(node);
    auto rows_of = [&](int i) -> const Value* {
      const Value* v = i < static_cast<int>(in.size()) ? in[i] : nullptr;
      return v && v->kind == Value::Kind::kParameter && !v->rows.empty() ? v : nullptr;
    };
    const Value* p = rows_of(0);
    const std::string unsupported = "only slices, concatenations and unsqueezes of weights along their first axis";
    if (!p) return Unsupported(node, index, unsupported);
    Value out = *p;
    if (op == "Identity") {
    } else if (op == "Unsqueeze") {
      std::vector<int64_t> axes = attrs.Ints("axes", {});
      if (in.size() > 1 && in[1] && in[1]->has_data) {
        axes.clear();
        for (double d : in[1]->data) axes.push_back(ToInt(d));
      }
      if (axes != std::vector<int64_t>{0}) return Unsupported(node, index, unsupported);
      out.shape.insert(out.shape.begin(), 1);
      ++out.lead_ones;
    } else if (op == "Slice") {
      const bool constant = in.size() >= 3 && in[1] && in[2] && in[1]->has_data && in[2]->has_data &&
                            in[1]->data.size() == 1 && in[2]->data.size() == 1;
      const bool axis0 = in.size() < 4 || !in[3] || (in[3]->has_data && in[3]->data.size() == 1 && in[3]->data[0] == 0);
      const bool unit = in.size() < 5 || !in[4] || (in[4]->has_data && in[4]->data.size() == 1 && in[4]->data[0] == 1);
      if (!constant || !axis0 || !unit || p->lead_ones != 0) return Unsupported(node, index, unsupported);
      const auto [start, end] =
          ConstantFolder::SliceRange(ToInt(in[1]->data[0]), ToInt(in[2]->data[0]), p->shape.at(0));
      out.rows.clear();
      int64_t at = 0;  // row of p where the current block starts
      for (const Value::RowBlock& b : p->rows) {
        const int64_t lo = std::max(start, at), hi = std::min(end, at + (b.end - b.start));
        if (lo < hi) out.rows.push_back({b.initializer, b.start + (lo - at), b.start + (hi - at)});
        at += b.end - b.start;
      }
      out.shape[0] = std::max<int64_t>(end - start, 0);
      if (out.rows.empty()) return Unsupported(node, index, "an empty slice of a weight");
    } else if (op == "Concat") {
      if (attrs.Int("axis", 0) != 0 || p->lead_ones != 0) return Unsupported(node, index, unsupported);
      for (int i = 1; i < node.input_size(); ++i) {
        const Value* q = rows_of(i);
        if (!q || q->lead_ones != 0 || q->shape.size() != p->shape.size() ||
            !std::equal(q->shape.begin() + 1, q->shape.end(), p->shape.begin() + 1)) {
          return Unsupported(node, index, unsupported);
        }
        out.rows.insert(out.rows.end(), q->rows.begin(), q->rows.end());
        out.shape[0] += q->shape[0];
      }
    } else {
      return Unsupported(node, index, unsupported);
    }
    out.has_data = false;  // a trained weight, never a constant
    out.data.clear();
    SetOutput(node, 0, std::move(out));
    return Status::Ok();
  }

  // Resize of NCHW's spatial axes by integer factors, as F.interpolate and nn.Upsample export it:
  // nearest (asymmetric coordinates, floor) or bilinear (half-pixel centres: align_corners=False).
  Status ImportResize(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const Attributes attrs(node);
    const Value* x = !in.empty() && in[0] && in[0]->kind == Value::Kind::kActivation ? in[0] : nullptr;
    if (!x || graph_.shape(Act(x)).size() != 4) return Unsupported(node, index, "only a resize of an NCHW activation");
    const Shape xs = graph_.shape(Act(x));
    // Opset 10: (X, scales); 11+: (X, roi, scales, sizes), one of scales and sizes given.
    const int scales_at = opset_ >= 11 ? 2 : 1, sizes_at = 3;
    Shape out;
    const Value* scales = scales_at < static_cast<int>(in.size()) ? in[scales_at] : nullptr;
    const Value* sizes = sizes_at < static_cast<int>(in.size()) ? in[sizes_at] : nullptr;
    if (sizes && sizes->has_data && sizes->data.size() == 4) {
      for (double d : sizes->data) out.push_back(ToInt(d));
    } else if (scales && scales->has_data && scales->data.size() == 4) {
      for (size_t a = 0; a < 4; ++a) {
        const double extent = static_cast<double>(xs[a]) * scales->data[a];
        if (extent != std::floor(extent)) return Unsupported(node, index, "only integer upsampling factors");
        out.push_back(static_cast<int64_t>(extent));
      }
    } else {
      return Unsupported(node, index, "scales or sizes must be constants of the four NCHW axes");
    }
    if (out[0] != xs[0] || out[1] != xs[1] || out[2] % xs[2] != 0 || out[3] % xs[3] != 0 || out[2] < xs[2] ||
        out[3] < xs[3]) {
      return Unsupported(node, index, "only upsampling of the spatial axes by integer factors is supported");
    }
    const std::string mode = attrs.String("mode", "nearest");
    const std::string coordinates = attrs.String("coordinate_transformation_mode", "half_pixel");
    const bool nearest =
        mode == "nearest" && coordinates == "asymmetric" && attrs.String("nearest_mode", "round_prefer_floor") == "floor";
    const bool linear = mode == "linear" && (coordinates == "half_pixel" || coordinates == "pytorch_half_pixel");
    if (!nearest && !linear) {
      return Unsupported(node, index,
                         "supported: nearest with asymmetric coordinates and floor (F.interpolate's 'nearest'), "
                         "linear with half-pixel coordinates ('bilinear', align_corners=False)");
    }
    SetOutput(node, 0, Value::Activation(graph_.Resize(Act(x), {out[2], out[3]}, linear)));
    return Status::Ok();
  }

  // Where(mask, fill, x) or Where(keep, x, fill) with a constant causal mask over the last two axes
  // (masked_fill of attention scores by the future positions): a causal_mask layer.
  Status ImportWhere(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const std::string only = "only a constant causal mask over an activation's last two axes (masked_fill of the "
                             "future positions by a constant) is supported";
    if (in.size() != 3 || !in[0] || !in[1] || !in[2] || !in[0]->has_data) return Unsupported(node, index, only);
    const bool fill_first = in[2]->kind == Value::Kind::kActivation;
    const Value* x = fill_first ? in[2] : in[1];
    const Value* fill = fill_first ? in[1] : in[2];
    if (x->kind != Value::Kind::kActivation || !fill->scalar()) return Unsupported(node, index, only);
    const Shape xs = graph_.shape(Act(x));
    const Shape& ms = in[0]->shape;
    if (xs.size() < 2 || ms.size() < 2 || ms.size() > xs.size()) return Unsupported(node, index, only);
    const int64_t rows = xs[xs.size() - 2], cols = xs.back();
    if (ms[ms.size() - 2] != rows || ms.back() != cols ||
        !std::all_of(ms.begin(), ms.end() - 2, [](int64_t d) { return d == 1; })) {
      return Unsupported(node, index, only);
    }
    // Where(mask, fill, x) fills where the condition holds (column > row); Where(keep, x, fill) keeps there.
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const bool condition = in[0]->data[static_cast<size_t>(r * cols + c)] != 0;
        if (condition != (fill_first ? c > r : c <= r)) return Unsupported(node, index, only);
      }
    }
    SetOutput(node, 0, Value::Activation(graph_.CausalMask(Act(x), static_cast<float>(fill->data[0]))));
    return Status::Ok();
  }

  // Tied weights (a language model's LM head that reuses its token embedding): an initializer that
  // two layers read, as it is or through Transpose, in the same layout. The later layer's weight is
  // marked tied_node (the earlier layer) and tied_param (that layer's parameter index); the
  // executor keeps the two copies equal and gives both the sum of their gradients.
  Status TieSharedWeights() {
    std::map<std::string, std::pair<std::string, bool>> through;  // Transpose/Identity output -> (input, flips)
    for (const onnx::NodeProto& n : model_.graph().node()) {
      if ((n.op_type() == "Transpose" || n.op_type() == "Identity") && n.input_size() == 1 && n.output_size() == 1) {
        through[n.output(0)] = {n.input(0), n.op_type() == "Transpose"};
      }
    }
    struct Use {
      int layer, param;
      bool transposed;
    };
    std::map<std::string, Use> first;
    for (int l = 0; l < graph_.size(); ++l) {
      const Layer& layer = graph_.layers()[static_cast<size_t>(l)];
      for (int k = 0; k < static_cast<int>(layer.param_names.size()); ++k) {
        std::string name = layer.param_names[static_cast<size_t>(k)];
        if (name.empty()) continue;
        bool transposed = k == 0 && layer.param_transposed;
        for (int hops = 0; hops < 4 && through.count(name); ++hops) {
          transposed = transposed != through[name].second;
          name = through[name].first;
        }
        auto v = values_.find(name);
        if (v == values_.end() || v->second.kind != Value::Kind::kParameter || v->second.shape.size() != 2) continue;
        auto [it, added] = first.insert({name, {l, k, transposed}});
        if (added || it->second.layer == l) continue;
        if (k != 0 || it->second.transposed != transposed || layer.attributes.count("tied_node")) {
          return Error("weight '" + name + "' is shared by two layers in a way the importer does not support (only a "
                       "layer's weight tied to an earlier layer's parameter in the same layout, as an LM head tied "
                       "to the token embedding)");
        }
        Layer tied = layer;
        tied.attributes["tied_node"] = it->second.layer;
        tied.attributes["tied_param"] = it->second.param;
        graph_.SetAttributes(l, tied.attributes);
        graph_.SetParamNames(l, {name, k + 1 < static_cast<int>(layer.param_names.size()) ? layer.param_names[1] : ""},
                             transposed);
      }
    }
    return Status::Ok();
  }

  // ONNX LSTM and GRU as torch.nn.LSTM and torch.nn.GRU export them (one direction, one layer per
  // node, zero initial state, linear before reset): one layer whose parameters are torch.nn's own
  // weight_ih, weight_hh, bias_ih and bias_hh, found behind the exporter's gate reordering.
  Status ImportRecurrent(const onnx::NodeProto& node, int index, const std::vector<const Value*>& in) {
    const std::string& op = node.op_type();
    const bool lstm = op == "LSTM";
    const Attributes attrs(node);
    const Value* x = !in.empty() && in[0] && in[0]->kind == Value::Kind::kActivation ? in[0] : nullptr;
    if (!x || graph_.shape(Act(x)).size() != 3) {
      return Unsupported(node, index, "the input must be an activation of shape (time, batch, features)");
    }
    const int64_t hidden = attrs.Int("hidden_size", 0);
    if (hidden <= 0) return NodeError(node, index, "needs hidden_size");
    if (attrs.String("direction", "forward") != "forward") {
      return Unsupported(node, index, "only one direction (forward) is supported, not bidirectional or reverse");
    }
    if (attrs.Int("layout", 0) != 0 || attrs.Has("clip") || attrs.Int("input_forget", 0) != 0) {
      return Unsupported(node, index, "layout, clip and input_forget are not supported");
    }
    if (!lstm && attrs.Int("linear_before_reset", 0) != 1) {
      return Unsupported(node, index, "only linear_before_reset=1 (torch.nn.GRU's equations) is supported");
    }
    const std::vector<std::string> defaults =
        lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"} : std::vector<std::string>{"Sigmoid", "Tanh"};
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.name() == "activations" && std::vector<std::string>(a.strings().begin(), a.strings().end()) != defaults) {
        return Unsupported(node, index, "only the default activations are supported");
      }
      if (a.name() == "activation_alpha" || a.name() == "activation_beta") {
        return Unsupported(node, index, "activation_alpha and activation_beta are not supported");
      }
    }
    auto given = [&](int i) { return i < node.input_size() && !node.input(i).empty(); };
    if (given(4)) return Unsupported(node, index, "sequence_lens is not supported (every sequence is whole)");
    if (lstm && given(7)) return Unsupported(node, index, "peepholes are not supported");
    for (int i : lstm ? std::vector<int>{5, 6} : std::vector<int>{5}) {
      if (!given(i)) continue;
      const Value* state = in[i];
      const bool zero = state->has_data && std::all_of(state->data.begin(), state->data.end(), [](double d) {
        return d == 0;
      });
      if (!zero) return Unsupported(node, index, "only a zero initial state is supported");
    }
    if (lstm && node.output_size() > 2 && !node.output(2).empty() && consumers_.count(node.output(2))) {
      return Unsupported(node, index, "the last cell state (Y_c) is not supported; use the outputs Y");
    }
    // ONNX's gate k is torch.nn's gate kTorchGate[k]: ONNX orders i o f c and z r h, PyTorch i f g o and r z n.
    const std::vector<int64_t> torch_gate = lstm ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{1, 0, 2};
    const int64_t gates = static_cast<int64_t>(torch_gate.size()), gh = gates * hidden;
    const std::string fix =
        "its weights must be torch.nn's parameters as PyTorch's training-mode export reorders them "
        "(torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False))";
    // The initializer behind `rows` [first, first + count) of weight input i, each torch.nn's row
    // `row_of(r)`; empty when they are anything else.
    auto source = [&](int i, int64_t first, int64_t count, int64_t cols) -> std::string {
      const Value* w = given(i) ? in[i] : nullptr;
      if (!w || w->kind != Value::Kind::kParameter || w->lead_ones != 1 || w->rows.empty()) return "";
      std::string name;
      int64_t r = 0;
      for (const Value::RowBlock& b : w->rows) {
        for (int64_t row = b.start; row < b.end; ++row, ++r) {
          if (r < first || r >= first + count) continue;
          const int64_t k = (r - first) / hidden, unit = (r - first) % hidden;
          if (!name.empty() && b.initializer != name) return "";
          name = b.initializer;
          if (row != torch_gate[k] * hidden + unit) return "";
        }
      }
      auto v = values_.find(name);
      if (r != w->shape.at(1) || v == values_.end()) return "";
      const Shape expected = cols > 0 ? Shape{gh, cols} : Shape{gh};
      return v->second.shape == expected ? name : "";
    };
    const int64_t features = graph_.shape(Act(x))[2];
    const std::string w_ih = source(1, 0, gh, features), w_hh = source(2, 0, gh, hidden);
    if (!given(3)) return Unsupported(node, index, "a recurrent layer without biases is not supported");
    const std::string b_ih = source(3, 0, gh, 0), b_hh = source(3, gh, gh, 0);
    if (w_ih.empty() || w_hh.empty() || b_ih.empty() || b_hh.empty()) return Unsupported(node, index, fix);
    const int layer = graph_.Recurrent(lstm ? OpKind::kLstm : OpKind::kGru, Act(x), hidden);
    graph_.SetParamNames(layer, {w_ih, w_hh, b_ih, b_hh});
    SetOutput(node, 0, Value::Activation(layer));
    // Y_h, the last step's hidden state, when something reads it: a slice of Y.
    if (node.output_size() > 1 && !node.output(1).empty() && consumers_.count(node.output(1))) {
      const Shape y = graph_.shape(layer);  // a copy: Slice appends to the layers
      const int last = graph_.Slice(layer, 0, y[0] - 1, y[0]);
      SetOutput(node, 1, Value::Activation(graph_.Reshape(last, {1, y[2], y[3]})));
    }
    return Status::Ok();
  }

  // An eval-mode export has its batch norms folded into the convolutions (their weights renamed
  // onnx::Conv_N by the exporter) or running statistics in place of batch statistics: its
  // training graph would be wrong without a word.
  Status CheckTrainingExport() const {
    const std::string fix =
        "export in training mode: torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, "
        "do_constant_folding=False)";
    if (!eval_batch_norm_.empty()) {
      return Error("batch normalization at " + eval_batch_norm_ +
                   " uses running statistics: the model was exported in eval mode; " + fix);
    }
    if (batch_norms_ == 0) {
      for (const std::string& w : weight_names_) {
        if (w.starts_with("onnx::Conv_")) {
          return Error("convolution weight '" + w +
                       "' was computed by the exporter and there is no BatchNormalization: the batch norms were "
                       "folded into the convolutions by an eval-mode export; " +
                       fix);
        }
      }
    }
    return Status::Ok();
  }

  const onnx::ModelProto& model_;
  std::string origin_;
  ForwardGraph graph_;
  int opset_ = 13;
  // Values computed by constant folding so far, and their bound over a whole import.
  int64_t folded_elements_ = 0;
  static constexpr int64_t kMaxFoldedElements = int64_t{16} << 20;
  std::map<std::string, Value> values_;
  std::map<std::string, Shape> inferred_;
  std::map<std::string, std::vector<int>> consumers_;
  std::set<int> consumed_;  // nodes fused into an earlier one
  std::set<int> recurrent_weight_nodes_;  // MarkRecurrentWeights
  std::map<std::string, std::string> unsupported_;
  std::vector<std::string> weight_names_;
  int batch_norms_ = 0;
  std::string eval_batch_norm_;
};

}  // namespace

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

// The import itself, in this process: what the isolated child runs.
Result<ForwardGraph> ImportInProcess(const std::string& bytes, const std::string& origin, const std::string& name,
                                     int batch_size) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    return InvalidArgument(origin + " is not an ONNX model (protobuf parse failed)");
  }
  if (model.graph().node_size() == 0) return InvalidArgument(origin + " is not an ONNX model: its graph has no nodes");
  EC_RETURN_IF_ERROR(CheckOpsAndOpset(model, origin));
  const int64_t exported_batch = batch_size > 0 ? Rebatch(model, batch_size) : 0;
  if (exported_batch < 0) {
    return InvalidArgument(origin + " was exported at batch size " + std::to_string(-exported_batch) +
                           " with logits whose rows are not the input's first axis (a time-major sequence, or "
                           "a token per row) and does not import at batch size " + std::to_string(batch_size) + "; export it at batch size " +
                           std::to_string(batch_size));
  }
  const auto fixed_batch = [&](const std::string& why) {
    return InvalidArgument(origin + " was exported at batch size " + std::to_string(exported_batch) +
                           " and does not import at batch size " + std::to_string(batch_size) + " (" + why +
                           "): its shapes fix the batch; export it at batch size " + std::to_string(batch_size) +
                           ", or with the batch taken from the input (x.view(x.size(0), -1), torch.flatten)");
  };
  try {
    // Data propagation gives the shapes that shape arithmetic computes (Reshape targets).
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(false, 0, true));
  } catch (const std::exception& e) {
    return InvalidArgument(origin + ": ONNX shape inference failed: " + e.what());
  }
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
    (void)NodeOps();
    (void)ConstantFolder::CanFold("");
    return true;
  }();
  (void)ready;
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
        EC_ASSIGN_OR_RETURN(ForwardGraph graph, ImportInProcess(bytes, origin, name, batch_size));
        return ToProto(graph).SerializeAsString();
      },
      limits);
  if (!result.ok()) {
    const Status& s = result.status();
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
  v1::ForwardGraphLayers layers;
  Result<ForwardGraph> graph = layers.ParseFromString(*result) ? FromProto(layers) : InvalidArgument("no graph");
  if (!graph.ok()) {
    return InvalidArgument(origin + ": the ONNX importer returned a malformed graph for this file (" +
                           graph.status().message() + ")");
  }
  return graph;
}

}  // namespace edgecost::graph
