// The constant folder's evaluations: one function per shape op, and one table of elementwise
// functions evaluated with broadcasting. The two tables' keys are what it folds (CanFold).
#include "graph/onnx/constant_folding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string_view>

#include "graph/onnx/attributes.h"

namespace edgecost::graph::onnx_import {
namespace {

using Folded = Result<std::vector<Value>>;
using FoldFn = Folded (*)(const onnx::NodeProto& node, const Attributes& attrs, const Inputs& in, int opset);

Folded One(Value v) { return std::vector<Value>{std::move(v)}; }

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

// The first `count` inputs are given, and constants.
Status NeedConstants(const Inputs& in, size_t count) {
  if (in.size() < count) return InvalidArgument("missing inputs");
  for (size_t i = 0; i < count; ++i) {
    if (!in[i] || !in[i]->has_data) return InvalidArgument("input " + std::to_string(i) + " is not a constant");
  }
  return Status::Ok();
}

// How an elementwise function reads its operands: Div truncates integers, Mod follows its `fmod`.
struct ElementwiseMode {
  bool integer = false;
  bool fmod = false;
};
using ElementwiseFn = double (*)(const std::vector<double>& x, ElementwiseMode mode);

// `f` of the first `arity` inputs broadcast together (and to `target`, when given).
Folded Elementwise(const Inputs& in, ElementwiseFn f, ElementwiseMode mode, bool integer, const Shape* target,
                   int arity) {
  Shape out = target ? *target : Shape{};
  for (int i = 0; i < arity; ++i) {
    try {
      out = BroadcastShapes(out, in[i]->shape);
    } catch (const std::logic_error& e) {
      return InvalidArgument(e.what());
    }
  }
  if (NumElements(out) > ConstantFolder::kMaxElements) return InvalidArgument("too large a constant");
  std::vector<double> data(static_cast<size_t>(NumElements(out)));
  std::vector<double> args(static_cast<size_t>(arity));
  for (int64_t i = 0; i < static_cast<int64_t>(data.size()); ++i) {
    for (int k = 0; k < arity; ++k) args[k] = in[k]->data[BroadcastIndex(in[k]->shape, out, i)];
    data[i] = f(args, mode);
  }
  return One(Value::Constant(out, std::move(data), integer));
}

// An elementwise op: its input count, the input whose type (integer or not) the result has (-1: a
// boolean, an integer whatever the inputs), and its function.
struct ElementwiseOp {
  int arity;
  int type_of;
  ElementwiseFn f;
};

const std::map<std::string_view, ElementwiseOp>& ElementwiseOps() {
  using X = const std::vector<double>&;
  using M = ElementwiseMode;
  static const std::map<std::string_view, ElementwiseOp> ops = {
      {"Add", {2, 0, [](X x, M) { return x[0] + x[1]; }}},
      {"Sub", {2, 0, [](X x, M) { return x[0] - x[1]; }}},
      {"Mul", {2, 0, [](X x, M) { return x[0] * x[1]; }}},
      {"Div", {2, 0, [](X x, M m) { return m.integer ? std::trunc(x[0] / x[1]) : x[0] / x[1]; }}},
      {"Pow", {2, 0, [](X x, M) { return std::pow(x[0], x[1]); }}},
      // fmod=0 (integers): the remainder takes the divisor's sign, as Python's % (Swin's window shifts).
      {"Mod",
       {2, 0,
        [](X x, M m) {
          if (x[1] == 0) return std::numeric_limits<double>::quiet_NaN();
          const double r = std::fmod(x[0], x[1]);
          return m.fmod || r == 0 || (r < 0) == (x[1] < 0) ? r : r + x[1];
        }}},
      {"Equal", {2, -1, [](X x, M) { return x[0] == x[1] ? 1.0 : 0.0; }}},
      {"Less", {2, -1, [](X x, M) { return x[0] < x[1] ? 1.0 : 0.0; }}},
      {"Greater", {2, -1, [](X x, M) { return x[0] > x[1] ? 1.0 : 0.0; }}},
      {"And", {2, -1, [](X x, M) { return x[0] != 0 && x[1] != 0 ? 1.0 : 0.0; }}},
      {"Or", {2, -1, [](X x, M) { return x[0] != 0 || x[1] != 0 ? 1.0 : 0.0; }}},
      {"Min", {2, 0, [](X x, M) { return std::min(x[0], x[1]); }}},
      {"Max", {2, 0, [](X x, M) { return std::max(x[0], x[1]); }}},
      {"Where", {3, 1, [](X x, M) { return x[0] != 0 ? x[1] : x[2]; }}},
      {"Not", {1, -1, [](X x, M) { return x[0] == 0 ? 1.0 : 0.0; }}},
      {"Neg", {1, 0, [](X x, M) { return -x[0]; }}},
      {"Abs", {1, 0, [](X x, M) { return std::fabs(x[0]); }}},
      {"Sqrt", {1, 0, [](X x, M) { return std::sqrt(x[0]); }}},
      {"Floor", {1, 0, [](X x, M) { return std::floor(x[0]); }}},
      {"Ceil", {1, 0, [](X x, M) { return std::ceil(x[0]); }}},
      {"Reciprocal", {1, 0, [](X x, M) { return 1.0 / x[0]; }}},
  };
  return ops;
}

Folded FoldConstant(const onnx::NodeProto& node, const Attributes& attrs, const Inputs&, int) {
  if (const onnx::TensorProto* t = attrs.Tensor("value")) {
    EC_ASSIGN_OR_RETURN(std::vector<double> data, TensorValues(*t));
    return One(
        Value::Constant(Shape(t->dims().begin(), t->dims().end()), std::move(data), IsIntegerType(t->data_type())));
  }
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (a.name() == "value_int") return One(Value::Constant({}, {static_cast<double>(a.i())}, true));
    if (a.name() == "value_float") return One(Value::Constant({}, {a.f()}, false));
    if (a.name() == "value_ints") {
      return One(Value::Constant({a.ints_size()}, {a.ints().begin(), a.ints().end()}, true));
    }
    if (a.name() == "value_floats") {
      return One(Value::Constant({a.floats_size()}, {a.floats().begin(), a.floats().end()}, false));
    }
  }
  return InvalidArgument("a Constant without a value this importer reads");
}

Folded FoldIdentity(const onnx::NodeProto&, const Attributes&, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 1));
  return One(*in[0]);
}

Folded FoldShape(const onnx::NodeProto&, const Attributes& attrs, const Inputs& in, int) {
  if (in.empty() || !in[0]) return InvalidArgument("missing input");
  const Shape& s = in[0]->shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t start = std::clamp(NormalizeAxis(attrs.Int("start", 0), s.size()), int64_t{0}, rank);
  int64_t end = std::clamp(NormalizeAxis(attrs.Int("end", rank), s.size()), int64_t{0}, rank);
  std::vector<double> data;
  for (int64_t i = start; i < end; ++i) data.push_back(static_cast<double>(s[i]));
  const Shape dims = {static_cast<int64_t>(data.size())};
  return One(Value::Constant(dims, std::move(data), true));
}

Folded FoldSize(const onnx::NodeProto&, const Attributes&, const Inputs& in, int) {
  if (in.empty() || !in[0]) return InvalidArgument("missing input");
  return One(Value::Constant({}, {static_cast<double>(NumElements(in[0]->shape))}, true));
}

Folded FoldConstantOfShape(const onnx::NodeProto&, const Attributes& attrs, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 1));
  const Shape shape = ToInts(in[0]->data);
  double fill = 0;
  bool integer = false;
  if (const onnx::TensorProto* t = attrs.Tensor("value")) {
    EC_ASSIGN_OR_RETURN(std::vector<double> v, TensorValues(*t));
    if (v.size() != 1) return InvalidArgument("a fill value that is not one value");
    fill = v[0];
    integer = IsIntegerType(t->data_type());
  }
  if (NumElements(shape) > ConstantFolder::kMaxElements) return InvalidArgument("too large a constant");
  return One(Value::Constant(shape, std::vector<double>(NumElements(shape), fill), integer));
}

Folded FoldRange(const onnx::NodeProto&, const Attributes&, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 3));
  const double start = in[0]->data.at(0), limit = in[1]->data.at(0), delta = in[2]->data.at(0);
  if (delta == 0) return InvalidArgument("Range with a zero step");
  const int64_t n = std::max<int64_t>(0, ToInt(std::ceil((limit - start) / delta)));
  if (n > ConstantFolder::kMaxElements) return InvalidArgument("too large a range");
  std::vector<double> data;
  for (int64_t i = 0; i < n; ++i) data.push_back(start + static_cast<double>(i) * delta);
  return One(Value::Constant({n}, std::move(data), in[0]->integer));
}

Folded FoldCast(const onnx::NodeProto&, const Attributes& attrs, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 1));
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
  return One(std::move(v));
}

// Squeeze and Unsqueeze; their axes are an input from opset 13.
Folded FoldSqueeze(const onnx::NodeProto& node, const Attributes& attrs, const Inputs& in, int opset) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 1));
  std::vector<int64_t> axes = attrs.Ints("axes", {});
  if (opset >= 13 && in.size() > 1 && in[1]) {
    if (!in[1]->has_data) return InvalidArgument("axes are not a constant");
    axes = ToInts(in[1]->data);
  }
  Value v = *in[0];
  EC_ASSIGN_OR_RETURN(v.shape, ConstantFolder::SqueezeShape(node.op_type() == "Unsqueeze", in[0]->shape, axes));
  return One(std::move(v));
}

Folded FoldReshape(const onnx::NodeProto&, const Attributes& attrs, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 2));
  Value v = *in[0];
  EC_ASSIGN_OR_RETURN(v.shape,
                      ConstantFolder::ReshapeTarget(in[0]->shape, in[1]->data, attrs.Int("allowzero", 0) != 0));
  return One(std::move(v));
}

Folded FoldConcat(const onnx::NodeProto&, const Attributes& attrs, const Inputs& in, int) {
  for (size_t i = 0; i < in.size(); ++i) EC_RETURN_IF_ERROR(NeedConstants(in, i + 1));
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
  return One(Value::Constant(out, std::move(data), in[0]->integer));
}

Folded FoldGather(const onnx::NodeProto&, const Attributes& attrs, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 2));
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
  return One(Value::Constant(out, std::move(values), data.integer));
}

// What a Slice takes of each axis: the first index, the step, and the count (ONNX's clamping rules).
struct SliceWindow {
  std::vector<int64_t> first, step;
  Shape out;
};

Result<SliceWindow> SliceAxes(const Shape& shape, const Inputs& in) {
  const size_t rank = shape.size();
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
  SliceWindow w = {.first = std::vector<int64_t>(rank, 0), .step = std::vector<int64_t>(rank, 1), .out = shape};
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t axis = NormalizeAxis(has_axes ? ToInt(in[3]->data[k]) : static_cast<int64_t>(k), rank);
    if (axis < 0 || axis >= static_cast<int64_t>(rank)) return InvalidArgument("bad axis");
    const int64_t n = shape[axis], st = has_steps ? ToInt(in[4]->data[k]) : 1;
    if (st == 0) return InvalidArgument("a zero step");
    int64_t b = ToInt(starts[k]), e = ToInt(ends[k]);
    if (b < 0) b += n;
    if (e < 0) e += n;
    if (st > 0) {
      b = std::clamp<int64_t>(b, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      w.out[axis] = e > b ? (e - b + st - 1) / st : 0;
    } else {
      b = n == 0 ? -1 : std::clamp<int64_t>(b, 0, n - 1);  // an empty axis: nothing taken
      e = std::clamp<int64_t>(e, -1, n - 1);
      w.out[axis] = b > e ? (b - e - st - 1) / -st : 0;
    }
    w.first[axis] = b;
    w.step[axis] = st;
  }
  return w;
}

// Any rank, any steps (Swin computes its Pad's pads by slicing backwards).
Folded FoldSlice(const onnx::NodeProto&, const Attributes&, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 3));
  const Value& v = *in[0];
  const size_t rank = v.shape.size();
  if (rank == 0) return InvalidArgument("slice of a scalar");
  EC_ASSIGN_OR_RETURN(const SliceWindow w, SliceAxes(v.shape, in));
  const std::vector<int64_t> in_strides = Strides(v.shape);
  const std::vector<int64_t> out_strides = Strides(w.out);
  std::vector<double> values(static_cast<size_t>(NumElements(w.out)));
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
    int64_t from = 0;
    for (size_t d = 0; d < rank; ++d) {
      from += (w.first[d] + (i / out_strides[d] % w.out[d]) * w.step[d]) * in_strides[d];
    }
    values[static_cast<size_t>(i)] = v.data[static_cast<size_t>(from)];
  }
  return One(Value::Constant(w.out, std::move(values), v.integer));
}

Folded FoldTranspose(const onnx::NodeProto&, const Attributes& attrs, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 1));
  const Value& v = *in[0];
  const std::vector<int64_t> perm = attrs.Perm(v.shape.size());
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
  return One(Value::Constant(out, std::move(data), v.integer));
}

// Data with slices replaced at indices (Swin's shifted-window mask).
Folded FoldScatterND(const onnx::NodeProto&, const Attributes& attrs, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 3));
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
  return One(std::move(out));
}

Folded FoldExpand(const onnx::NodeProto&, const Attributes&, const Inputs& in, int) {
  EC_RETURN_IF_ERROR(NeedConstants(in, 2));
  const Shape target = ToInts(in[1]->data);
  return Elementwise(
      in, [](const std::vector<double>& x, ElementwiseMode) { return x[0]; }, {}, in[0]->integer, &target, 1);
}

// The folds other than the elementwise functions.
const std::map<std::string_view, FoldFn>& FoldOps() {
  static const std::map<std::string_view, FoldFn> ops = {
      {"Constant", FoldConstant},
      {"Identity", FoldIdentity},
      {"Shape", FoldShape},
      {"Size", FoldSize},
      {"ConstantOfShape", FoldConstantOfShape},
      {"Range", FoldRange},
      {"Cast", FoldCast},
      {"Unsqueeze", FoldSqueeze},
      {"Squeeze", FoldSqueeze},
      {"Reshape", FoldReshape},
      {"Concat", FoldConcat},
      {"Gather", FoldGather},
      {"Slice", FoldSlice},
      {"Transpose", FoldTranspose},
      {"ScatterND", FoldScatterND},
      {"Expand", FoldExpand},
  };
  return ops;
}

}  // namespace

Result<std::vector<Value>> ConstantFolder::Fold(const onnx::NodeProto& node, const Inputs& in, int opset) {
  const std::string& op = node.op_type();
  const Attributes attrs(node);
  if (auto fold = FoldOps().find(op); fold != FoldOps().end()) return fold->second(node, attrs, in, opset);
  auto it = ElementwiseOps().find(op);
  if (it == ElementwiseOps().end()) return InvalidArgument("no constant evaluation of " + op);
  const ElementwiseOp& e = it->second;
  EC_RETURN_IF_ERROR(NeedConstants(in, static_cast<size_t>(e.arity)));
  const ElementwiseMode mode = {.integer = in[0]->integer, .fmod = attrs.Int("fmod", 0) != 0};
  const bool integer = e.type_of < 0 || in[static_cast<size_t>(e.type_of)]->integer;
  return Elementwise(in, e.f, mode, integer, nullptr, e.arity);
}

bool ConstantFolder::CanFold(const std::string& op) { return FoldOps().count(op) || ElementwiseOps().count(op); }

Result<Shape> ConstantFolder::SqueezeShape(bool unsqueeze, const Shape& in, std::vector<int64_t> axes) {
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

Result<Shape> ConstantFolder::ReshapeTarget(const Shape& in, const std::vector<double>& target, bool allowzero) {
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

std::pair<int64_t, int64_t> ConstantFolder::SliceRange(int64_t start, int64_t end, int64_t n) {
  if (start < 0) start += n;
  if (end < 0) end += n;
  return {std::clamp<int64_t>(start, 0, n), std::clamp<int64_t>(end, 0, n)};
}

}  // namespace edgecost::graph::onnx_import
