#include "profiler/layers.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <unordered_map>

#include "graph/forward_graph.h"

namespace edgecost::profiler {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

int64_t Elements(const Dims& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

// Dense row-major layout, the layout frameworks hand to oneDNN.
memory::desc Plain(const Dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return memory::desc(memory::dims(dims.begin(), dims.end()), memory::data_type::f32, strides);
}

// The last two axes of a row-major 3-D tensor, swapped without copying.
memory::desc Transposed(const Dims& dims) {
  const int64_t b = dims[0], rows = dims[1], cols = dims[2];
  return memory::desc({b, cols, rows}, memory::data_type::f32, {rows * cols, 1, cols});
}

// One primitive and its arguments, executed in order with the others of its pass.
struct Step {
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
  void* scratchpad = nullptr;  // the Backend's buffer the step's DNNL_ARG_SCRATCHPAD points at; null: none
};

// Common machinery: owned tensors with stable addresses, the Backend's shared
// scratchpad (each layer knows its largest need), and the four passes as step lists.
class StepLayer : public Layer {
 public:
  StepLayer(Backend& backend, uint32_t seed) : backend_(backend), rng_(seed) {
    attr_.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  }

  void Forward() override { Run(forward_); }
  void BackwardInput() override { Run(backward_input_); }
  void BackwardWeights() override { Run(backward_weights_); }
  void BackwardBias() override { Run(backward_bias_); }
  bool HasParameters() const override { return !params_.empty(); }

  void Bind(Tensor& t, float* data) override {
    if (bindings_.empty()) FindBindings();
    for (const auto& [mem, offset] : bindings_[&t]) mem->set_data_handle(data + offset);
    if (!t.data.empty()) std::vector<float>().swap(t.data);
  }
  void Release(Tensor& t) override {
    if (bindings_.empty()) FindBindings();
    std::vector<float>().swap(t.data);
  }

 protected:
  // Which step arguments lie in which bindable tensor, found once while every tensor
  // still has its own storage (disjoint ranges), so later binds never confuse two tensors.
  void FindBindings() {
    std::vector<Tensor*> tensors = {&output_, &grad_output_};
    for (Tensor& t : inputs_) tensors.push_back(&t);
    for (Tensor& t : grad_inputs_) tensors.push_back(&t);
    for (auto* pass : {&forward_, &backward_input_, &backward_weights_, &backward_bias_}) {
      for (Step& step : *pass) {
        for (auto& [arg, mem] : step.args) {
          const auto* handle = static_cast<const float*>(mem.get_data_handle());
          for (Tensor* t : tensors) {
            if (!t->data.empty() && handle >= t->data.data() && handle < t->data.data() + t->data.size()) {
              bindings_[t].push_back({&mem, handle - t->data.data()});
            }
          }
        }
      }
    }
  }

  void Run(std::vector<Step>& steps) {
    for (Step& step : steps) {
      // The shared scratchpad may have grown (and moved) since the step was built.
      if (step.scratchpad && step.scratchpad != backend_.scratchpad()) {
        step.scratchpad = backend_.scratchpad();
        step.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(step.scratchpad);
      }
      step.primitive.execute(backend_.stream(), step.args);
    }
    backend_.stream().wait();
  }

  // Memory over a tensor (or a slice of it starting at `offset` elements).
  memory Mem(Tensor& t, const memory::desc& md, int64_t offset = 0) {
    return memory(md, backend_.engine(), t.data.data() + offset);
  }
  memory Mem(Tensor& t) { return Mem(t, Plain(t.dims)); }

  Tensor& Own(Dims dims) {
    Tensor& t = owned_.emplace_back(std::move(dims));
    owned_bytes_ += t.bytes();
    return t;
  }

  void Normal(Tensor& t, float stddev, float mean = 0.0f) {
    std::normal_distribution<float> dist(mean, stddev);
    for (float& x : t.data) x = dist(rng_);
  }

  // Activations look like post-activation feature maps; gradients are small.
  void InitInputs(const std::vector<Dims>& shapes) {
    for (const Dims& shape : shapes) {
      inputs_.emplace_back(shape);
      Normal(inputs_.back(), 1.0f);
      grad_inputs_.emplace_back(shape);
    }
  }
  void InitOutput(const Dims& shape) {
    output_ = Tensor(shape);
    grad_output_ = Tensor(shape);
    Normal(grad_output_, 0.01f);
  }
  Tensor& Param(Dims dims, float stddev) {
    Tensor& p = Own(dims);
    Normal(p, stddev);
    params_.push_back(&p);
    grad_params_.push_back(&Own(dims));
    return p;
  }

  // Adds a step to `pass`, growing the Backend's shared scratchpad to what the primitive needs.
  template <typename PrimitiveDesc>
  void Add(std::vector<Step>& pass, const PrimitiveDesc& pd, std::unordered_map<int, memory> args) {
    const memory::desc scratch = pd.scratchpad_desc();
    void* scratchpad = nullptr;
    if (scratch.get_size() > 0) {
      backend_.ReserveScratchpad(scratch.get_size());
      scratchpad = backend_.scratchpad();
      args[DNNL_ARG_SCRATCHPAD] = memory(scratch, backend_.engine(), scratchpad);
      scratchpad_bytes_ = std::max<uint64_t>(scratchpad_bytes_, scratch.get_size());
    }
    pass.push_back({dnnl::primitive(pd.get()), std::move(args), scratchpad});
  }

  // A workspace the forward pass fills and the backward pass reads (max pooling).
  memory Workspace(const memory::desc& md) {
    Tensor& buffer = Own({static_cast<int64_t>((md.get_size() + sizeof(float) - 1) / sizeof(float))});
    workspace_bytes_ += md.get_size();
    return memory(md, backend_.engine(), buffer.data.data());
  }

  // y = src0 (op) src1, elementwise.
  void AddBinary(std::vector<Step>& pass, algorithm op, memory src0, memory src1, memory dst) {
    dnnl::binary::primitive_desc pd(dnnl::binary::desc(op, src0.get_desc(), src1.get_desc(), dst.get_desc()), attr_,
                                    backend_.engine());
    Add(pass, pd, {{DNNL_ARG_SRC_0, src0}, {DNNL_ARG_SRC_1, src1}, {DNNL_ARG_DST, dst}});
  }

  void AddReorder(std::vector<Step>& pass, memory src, memory dst) {
    dnnl::reorder::primitive_desc pd(src, dst, attr_);
    Add(pass, pd, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
  }

  void AddMatmul(std::vector<Step>& pass, memory a, memory b, memory c) {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a.get_desc(), b.get_desc(), c.get_desc()), attr_,
                                    backend_.engine());
    Add(pass, pd, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  }

  // dst = sum of src over the axes where dst has extent 1 (bias gradients).
  void AddReduceSum(std::vector<Step>& pass, memory src, memory dst) {
    if (src.get_desc().dims() == dst.get_desc().dims()) {  // nothing to reduce (batch of one): a copy
      AddReorder(pass, src, dst);
      return;
    }
    dnnl::reduction::primitive_desc pd(
        dnnl::reduction::desc(algorithm::reduction_sum, src.get_desc(), dst.get_desc(), 0.f, 0.f), attr_,
        backend_.engine());
    Add(pass, pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  }

  Backend& backend_;
  std::mt19937 rng_;
  dnnl::primitive_attr attr_;
  std::deque<Tensor> owned_;
  std::vector<Step> forward_, backward_input_, backward_weights_, backward_bias_;
  std::unordered_map<const Tensor*, std::vector<std::pair<memory*, ptrdiff_t>>> bindings_;
};

// Convolution, grouped when the "groups" attribute says so (groups == channels: depthwise), with a
// bias unless "no_bias" (PyTorch's convolutions before a batch norm have none).
class Conv2d : public StepLayer {
 public:
  Conv2d(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const int64_t k = spec.attributes.at("kernel"), s = spec.attributes.at("stride"), p = spec.attributes.at("padding");
    const auto attribute = [&](const char* name, int64_t fallback) {
      auto it = spec.attributes.find(name);
      return it == spec.attributes.end() ? fallback : it->second;
    };
    const int64_t groups = attribute("groups", 1);
    const bool bias = attribute("no_bias", 0) == 0;
    const int64_t in_channels = spec.input_shapes[0][1], out_channels = spec.output_shape[1];
    Tensor& w = Param({out_channels, in_channels / groups, k, k},
                      std::sqrt(2.0f / static_cast<float>(in_channels / groups * k * k)));
    Tensor* bias_t = bias ? &Param({out_channels}, 0.01f) : nullptr;
    // Grouped weights are (groups, out/groups, in/groups, k, k): the same memory as PyTorch's.
    const memory::desc w_md =
        groups == 1 ? Plain(w.dims) : Plain({groups, out_channels / groups, in_channels / groups, k, k});
    const memory::desc b_md = bias ? Plain(bias_t->dims) : memory::desc();
    Tensor& x = inputs_[0];
    // Same padding on both sides when it fits, else as much on the right as the output size needs.
    const int64_t pad_r = (spec.output_shape[2] - 1) * s + k - x.dims[2] - p;
    const memory::dims strides = {s, s}, pad_l = {p, p}, pad_rr = {pad_r, pad_r};
    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, Plain(x.dims), w_md,
                                        b_md, Plain(output_.dims), strides, pad_l, pad_rr),
        attr_, backend_.engine());
    std::unordered_map<int, memory> fwd_args = {
        {DNNL_ARG_SRC, Mem(x)}, {DNNL_ARG_WEIGHTS, Mem(w, w_md)}, {DNNL_ARG_DST, Mem(output_)}};
    if (bias) fwd_args[DNNL_ARG_BIAS] = Mem(*bias_t);
    Add(forward_, fwd, fwd_args);
    dnnl::convolution_backward_data::primitive_desc data(
        dnnl::convolution_backward_data::desc(algorithm::convolution_direct, Plain(x.dims), w_md, Plain(output_.dims),
                                              strides, pad_l, pad_rr),
        attr_, backend_.engine(), fwd);
    Add(backward_input_, data,
        {{DNNL_ARG_DIFF_DST, Mem(grad_output_)},
         {DNNL_ARG_WEIGHTS, Mem(w, w_md)},
         {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])}});
    dnnl::convolution_backward_weights::primitive_desc weights(
        dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, Plain(x.dims), w_md, b_md,
                                                 Plain(output_.dims), strides, pad_l, pad_rr),
        attr_, backend_.engine(), fwd);
    std::unordered_map<int, memory> weight_args = {{DNNL_ARG_SRC, Mem(x)},
                                                   {DNNL_ARG_DIFF_DST, Mem(grad_output_)},
                                                   {DNNL_ARG_DIFF_WEIGHTS, Mem(*grad_params_[0], w_md)}};
    if (bias) weight_args[DNNL_ARG_DIFF_BIAS] = Mem(*grad_params_[1]);
    Add(backward_weights_, weights, weight_args);
    const Dims& y = output_.dims;
    if (bias) AddReduceSum(backward_bias_, Mem(grad_output_), Mem(*grad_params_[1], Plain({1, y[1], 1, 1})));
  }
};

// Fully connected, optionally with a fused ReLU (the transformer's FFN), or without bias (QKV).
class Linear : public StepLayer {
 public:
  Linear(Backend& b, const LayerSpec& spec, uint32_t seed, bool fused_relu, bool bias) : StepLayer(b, seed) {
    // The QKV projection's output is listed as (3 seq, d, heads); the kernel sees (seq, 3 d heads).
    // A linear layer over the last axis of a larger input sees all other axes as rows.
    const Dims& in_shape = spec.input_shapes[0];
    const auto features = spec.attributes.find("in_features");
    const int64_t rows =
        features != spec.attributes.end() && in_shape.size() > 2 ? Elements(in_shape) / features->second : in_shape[0];
    const Dims x_dims = {rows, Elements(in_shape) / rows};
    const int64_t in = x_dims[1];
    const int64_t out = Elements(spec.output_shape) / x_dims[0];
    InitInputs({x_dims});
    InitOutput({x_dims[0], out});
    Tensor& w = Param({out, in}, std::sqrt(2.0f / static_cast<float>(in)));
    Tensor* bias_t = bias ? &Param({out}, 0.01f) : nullptr;
    Tensor& x = inputs_[0];
    const memory::desc bias_md = bias ? Plain({out}) : memory::desc();
    dnnl::inner_product_forward::primitive_desc fwd(
        dnnl::inner_product_forward::desc(prop_kind::forward_training, Plain(x.dims), Plain(w.dims), bias_md,
                                          Plain(output_.dims)),
        attr_, backend_.engine());
    std::unordered_map<int, memory> fwd_args = {
        {DNNL_ARG_SRC, Mem(x)}, {DNNL_ARG_WEIGHTS, Mem(w)}, {DNNL_ARG_DST, Mem(output_)}};
    if (bias) fwd_args[DNNL_ARG_BIAS] = Mem(*bias_t);
    Add(forward_, fwd, fwd_args);
    // Training keeps the ReLU a separate in-place step, as frameworks do.
    dnnl::eltwise_forward::primitive_desc relu_fwd(
        dnnl::eltwise_forward::desc(prop_kind::forward_training, algorithm::eltwise_relu_use_dst_for_bwd,
                                    Plain(output_.dims)),
        attr_, backend_.engine());
    if (fused_relu) Add(forward_, relu_fwd, {{DNNL_ARG_SRC, Mem(output_)}, {DNNL_ARG_DST, Mem(output_)}});

    // With a fused ReLU, each backward pass first masks dY with Y > 0.
    memory dz = Mem(grad_output_);
    if (fused_relu) {
      Tensor& masked = Own(output_.dims);
      dz = Mem(masked);
      dnnl::eltwise_backward::primitive_desc relu(
          dnnl::eltwise_backward::desc(algorithm::eltwise_relu_use_dst_for_bwd, Plain(output_.dims),
                                       Plain(output_.dims)),
          attr_, backend_.engine(), relu_fwd);
      for (auto* pass : {&backward_input_, &backward_weights_, &backward_bias_}) {
        Add(*pass, relu,
            {{DNNL_ARG_DST, Mem(output_)}, {DNNL_ARG_DIFF_DST, Mem(grad_output_)}, {DNNL_ARG_DIFF_SRC, dz}});
      }
    }
    dnnl::inner_product_backward_data::primitive_desc data(
        dnnl::inner_product_backward_data::desc(Plain(x.dims), Plain(w.dims), Plain(output_.dims)), attr_,
        backend_.engine(), fwd);
    Add(backward_input_, data,
        {{DNNL_ARG_DIFF_DST, dz}, {DNNL_ARG_WEIGHTS, Mem(w)}, {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])}});
    dnnl::inner_product_backward_weights::primitive_desc weights(
        dnnl::inner_product_backward_weights::desc(Plain(x.dims), Plain(w.dims), bias_md, Plain(output_.dims)), attr_,
        backend_.engine(), fwd);
    std::unordered_map<int, memory> weight_args = {
        {DNNL_ARG_SRC, Mem(x)}, {DNNL_ARG_DIFF_DST, dz}, {DNNL_ARG_DIFF_WEIGHTS, Mem(*grad_params_[0])}};
    if (bias) weight_args[DNNL_ARG_DIFF_BIAS] = Mem(*grad_params_[1]);
    Add(backward_weights_, weights, weight_args);
    if (bias) AddReduceSum(backward_bias_, dz, Mem(*grad_params_[1], Plain({1, out})));
  }
};

class BatchNorm2d : public StepLayer {
 public:
  BatchNorm2d(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const int64_t channels = spec.input_shapes[0][1];
    Tensor& scale = Param({channels}, 0.1f);
    for (float& g : scale.data) g += 1.0f;
    Param({channels}, 0.1f);  // shift
    Tensor& mean = Own({channels});
    Tensor& variance = Own({channels});
    Tensor& x = inputs_[0];
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    const auto epsilon = spec.attributes.find("epsilon_e9");  // else PyTorch's default
    const float kEpsilon = epsilon == spec.attributes.end() ? 1e-5f : static_cast<float>(epsilon->second) * 1e-9f;
    dnnl::batch_normalization_forward::primitive_desc fwd(
        dnnl::batch_normalization_forward::desc(prop_kind::forward_training, Plain(x.dims), kEpsilon, flags), attr_,
        backend_.engine());
    Add(forward_, fwd,
        {{DNNL_ARG_SRC, Mem(x)},
         {DNNL_ARG_DST, Mem(output_)},
         {DNNL_ARG_SCALE, Mem(scale)},
         {DNNL_ARG_SHIFT, Mem(*params_[1])},
         {DNNL_ARG_MEAN, Mem(mean)},
         {DNNL_ARG_VARIANCE, Mem(variance)}});
    dnnl::batch_normalization_backward::primitive_desc bwd(
        dnnl::batch_normalization_backward::desc(prop_kind::backward, Plain(x.dims), Plain(x.dims), kEpsilon, flags),
        attr_, backend_.engine(), fwd);
    // One primitive gives dX, dgamma and dbeta: the input and weight passes run it. Bias-only
    // training needs dbeta alone, the sum of dY over all but the channel axis, which reads no X.
    AddReduceSum(backward_bias_, Mem(grad_output_), Mem(*grad_params_[1], Plain({1, channels, 1, 1})));
    for (auto* pass : {&backward_input_, &backward_weights_}) {
      Add(*pass, bwd,
          {{DNNL_ARG_SRC, Mem(x)},
           {DNNL_ARG_MEAN, Mem(mean)},
           {DNNL_ARG_VARIANCE, Mem(variance)},
           {DNNL_ARG_DIFF_DST, Mem(grad_output_)},
           {DNNL_ARG_SCALE, Mem(scale)},
           {DNNL_ARG_SHIFT, Mem(*params_[1])},
           {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])},
           {DNNL_ARG_DIFF_SCALE, Mem(*grad_params_[0])},
           {DNNL_ARG_DIFF_SHIFT, Mem(*grad_params_[1])}});
    }
    Forward();  // batch statistics for the backward pass
  }
};

class Relu : public StepLayer {
 public:
  Relu(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const memory::desc md = Plain(output_.dims);
    dnnl::eltwise_forward::primitive_desc fwd(
        dnnl::eltwise_forward::desc(prop_kind::forward_training, algorithm::eltwise_relu_use_dst_for_bwd, md), attr_,
        backend_.engine());
    Add(forward_, fwd, {{DNNL_ARG_SRC, Mem(inputs_[0])}, {DNNL_ARG_DST, Mem(output_)}});
    dnnl::eltwise_backward::primitive_desc bwd(
        dnnl::eltwise_backward::desc(algorithm::eltwise_relu_use_dst_for_bwd, md, md), attr_, backend_.engine(), fwd);
    Add(backward_input_, bwd,
        {{DNNL_ARG_DST, Mem(output_)},
         {DNNL_ARG_DIFF_DST, Mem(grad_output_)},
         {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])}});
    Forward();
  }
};

class Pool2d : public StepLayer {
 public:
  Pool2d(Backend& b, const LayerSpec& spec, uint32_t seed, bool max) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const int64_t k = spec.attributes.at("kernel"), s = spec.attributes.at("stride");
    const auto padding = spec.attributes.find("padding");
    const int64_t p = padding == spec.attributes.end() ? 0 : padding->second;
    const Dims& x = inputs_[0].dims;
    // The output size is floored; the right padding absorbs what the last window leaves out.
    const memory::dims strides = {s, s}, kernel = {k, k}, pad_l = {p, p};
    const memory::dims pad_r = {(output_.dims[2] - 1) * s + k - x[2] - p, (output_.dims[3] - 1) * s + k - x[3] - p};
    const algorithm alg = max ? algorithm::pooling_max : algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_forward::primitive_desc fwd(
        dnnl::pooling_forward::desc(prop_kind::forward_training, alg, Plain(x), Plain(output_.dims), strides, kernel,
                                    pad_l, pad_r),
        attr_, backend_.engine());
    std::unordered_map<int, memory> fwd_args = {{DNNL_ARG_SRC, Mem(inputs_[0])}, {DNNL_ARG_DST, Mem(output_)}};
    std::unordered_map<int, memory> bwd_args = {{DNNL_ARG_DIFF_DST, Mem(grad_output_)},
                                                {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])}};
    if (max) {
      memory workspace = Workspace(fwd.workspace_desc());
      fwd_args[DNNL_ARG_WORKSPACE] = workspace;
      bwd_args[DNNL_ARG_WORKSPACE] = workspace;
    }
    Add(forward_, fwd, fwd_args);
    dnnl::pooling_backward::primitive_desc bwd(
        dnnl::pooling_backward::desc(alg, Plain(x), Plain(output_.dims), strides, kernel, pad_l, pad_r), attr_,
        backend_.engine(), fwd);
    Add(backward_input_, bwd, bwd_args);
    Forward();  // the argmax workspace for the backward pass
  }
};

// Flatten is a view in frameworks; as a kernel it is a copy, and so is its backward.
class Flatten : public StepLayer {
 public:
  Flatten(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const memory::desc flat = Plain({output_.size()});
    AddReorder(forward_, Mem(inputs_[0], flat), Mem(output_, flat));
    AddReorder(backward_input_, Mem(grad_output_, flat), Mem(grad_inputs_[0], flat));
  }
};

// Inverted dropout with p = 0.1: Y = X * mask, mask in {0, 1/(1-p)}.
class Dropout : public StepLayer {
 public:
  Dropout(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    Tensor& mask = Own(output_.dims);
    std::bernoulli_distribution keep(0.9);
    for (float& m : mask.data) m = keep(rng_) ? 1.0f / 0.9f : 0.0f;
    AddBinary(forward_, algorithm::binary_mul, Mem(inputs_[0]), Mem(mask), Mem(output_));
    AddBinary(backward_input_, algorithm::binary_mul, Mem(grad_output_), Mem(mask), Mem(grad_inputs_[0]));
  }
};

// Residual add. POET's ResNet-50 adds a smaller tensor into a larger one (zero padding):
// then the second input is added into the leading part of the first.
class Add2 : public StepLayer {
 public:
  Add2(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const int64_t n0 = inputs_[0].size(), n1 = inputs_[1].size();
    if (n0 == n1) {
      AddBinary(forward_, algorithm::binary_add, Mem(inputs_[0]), Mem(inputs_[1]), Mem(output_));
    } else {
      AddReorder(forward_, Mem(inputs_[0], Plain({n0})), Mem(output_, Plain({n0})));
      const memory::desc head = Plain({std::min(n0, n1)});
      AddBinary(forward_, algorithm::binary_add, Mem(output_, head), Mem(inputs_[1], head), Mem(output_, head));
    }
    // dX of both inputs is dY (the leading part of it for a smaller input).
    AddReorder(backward_input_, Mem(grad_output_, Plain({n0})), Mem(grad_inputs_[0], Plain({n0})));
    const memory::desc head1 = Plain({std::min(n0, n1)});
    AddReorder(backward_input_, Mem(grad_output_, head1), Mem(grad_inputs_[1], head1));
  }
};

// S = Q K^T per head, then the attention mask and dropout (POET fuses all three).
// Q and K are the first two thirds of the QKV projection's output, as (heads, seq, d).
class AttentionScores : public StepLayer {
 public:
  AttentionScores(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    const int64_t seq = spec.attributes.at("seq_len"), d = spec.attributes.at("head_dim"),
                  heads = spec.attributes.at("heads");
    InitInputs(spec.input_shapes);
    InitOutput({heads, seq, seq});
    const Dims qk = {heads, seq, d};
    const int64_t third = Elements(qk);
    Tensor& x = inputs_[0];
    Tensor& dx = grad_inputs_[0];
    Tensor& mask = Own(output_.dims);  // additive attention mask: 0 or -10000 (padding)
    for (int64_t i = 0; i < mask.size(); ++i) mask.data[i] = (i % seq) >= seq - seq / 8 ? -10000.0f : 0.0f;
    Tensor& drop = Own(output_.dims);
    std::bernoulli_distribution keep(0.9);
    for (float& m : drop.data) m = keep(rng_) ? 1.0f / 0.9f : 0.0f;

    AddMatmul(forward_, Mem(x, Plain(qk)), Mem(x, Transposed(qk), third), Mem(output_));
    AddBinary(forward_, algorithm::binary_add, Mem(output_), Mem(mask), Mem(output_));
    AddBinary(forward_, algorithm::binary_mul, Mem(output_), Mem(drop), Mem(output_));
    // dS = dY * dropout mask; dQ = dS K; dK = dS^T Q.
    Tensor& ds = Own(output_.dims);
    AddBinary(backward_input_, algorithm::binary_mul, Mem(grad_output_), Mem(drop), Mem(ds));
    AddMatmul(backward_input_, Mem(ds), Mem(x, Plain(qk), third), Mem(dx, Plain(qk)));
    AddMatmul(backward_input_, Mem(ds, Transposed(output_.dims)), Mem(x, Plain(qk)), Mem(dx, Plain(qk), third));
  }
};

// C = softmax(S) V per head. POET's graph gives this op only the scores; V is held
// by the layer, as POET folds it into the op.
class AttentionContext : public StepLayer {
 public:
  AttentionContext(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    const int64_t seq = spec.attributes.at("seq_len"), d = spec.attributes.at("head_dim"),
                  heads = spec.attributes.at("heads");
    const Dims s_dims = {heads, seq, seq}, v_dims = {heads, seq, d};
    InitInputs({s_dims});
    InitOutput(v_dims);
    Tensor& v = Own(v_dims);
    Normal(v, 1.0f);
    Tensor& p = Own(s_dims);
    dnnl::softmax_forward::primitive_desc softmax(
        dnnl::softmax_forward::desc(prop_kind::forward_training, Plain(s_dims), 2), attr_, backend_.engine());
    Add(forward_, softmax, {{DNNL_ARG_SRC, Mem(inputs_[0])}, {DNNL_ARG_DST, Mem(p)}});
    AddMatmul(forward_, Mem(p), Mem(v), Mem(output_));
    // dP = dC V^T; dS = softmax backward of dP at P.
    Tensor& dp = Own(s_dims);
    AddMatmul(backward_input_, Mem(grad_output_), Mem(v, Transposed(v_dims)), Mem(dp));
    dnnl::softmax_backward::primitive_desc softmax_bwd(dnnl::softmax_backward::desc(Plain(s_dims), Plain(s_dims), 2),
                                                       attr_, backend_.engine(), softmax);
    Add(backward_input_, softmax_bwd,
        {{DNNL_ARG_DST, Mem(p)}, {DNNL_ARG_DIFF_DST, Mem(dp)}, {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])}});
    Forward();
  }
};

// Cross entropy over rows of logits: loss = -sum(onehot * log_softmax(X)); dX = softmax(X) - onehot
// (the backward starts the chain: d loss = 1).
class CrossEntropyLoss : public StepLayer {
 public:
  CrossEntropyLoss(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    const Dims& in = spec.input_shapes[0];
    const Dims logits = {in[0], Elements(in) / in[0]};
    InitInputs({logits});
    InitOutput({1, 1});
    Tensor& onehot = Own(logits);
    Tensor& minus_onehot = Own(logits);
    onehot_ = &onehot;
    minus_onehot_ = &minus_onehot;
    std::uniform_int_distribution<int64_t> label(0, logits[1] - 1);
    for (int64_t r = 0; r < logits[0]; ++r) {
      const int64_t at = r * logits[1] + label(rng_);
      onehot.data[at] = 1.0f;
      minus_onehot.data[at] = -1.0f;
    }
    Tensor& log_probs = Own(logits);
    dnnl::logsoftmax_forward::primitive_desc logsoftmax(
        dnnl::logsoftmax_forward::desc(prop_kind::forward_training, Plain(logits), 1), attr_, backend_.engine());
    Add(forward_, logsoftmax, {{DNNL_ARG_SRC, Mem(inputs_[0])}, {DNNL_ARG_DST, Mem(log_probs)}});
    AddBinary(forward_, algorithm::binary_mul, Mem(log_probs), Mem(minus_onehot), Mem(log_probs));
    AddReduceSum(forward_, Mem(log_probs), Mem(output_));
    Tensor& probs = Own(logits);
    dnnl::softmax_forward::primitive_desc softmax(
        dnnl::softmax_forward::desc(prop_kind::forward_training, Plain(logits), 1), attr_, backend_.engine());
    Add(backward_input_, softmax, {{DNNL_ARG_SRC, Mem(inputs_[0])}, {DNNL_ARG_DST, Mem(probs)}});
    AddBinary(backward_input_, algorithm::binary_sub, Mem(probs), Mem(onehot), Mem(grad_inputs_[0]));
  }

  Status SetLabels(const std::vector<int32_t>& labels) override {
    const int64_t rows = onehot_->dims[0], classes = onehot_->dims[1];
    if (static_cast<int64_t>(labels.size()) != rows) {
      return InvalidArgument("the loss has " + std::to_string(rows) + " rows but got " + std::to_string(labels.size()) +
                             " labels");
    }
    std::fill(onehot_->data.begin(), onehot_->data.end(), 0.0f);
    std::fill(minus_onehot_->data.begin(), minus_onehot_->data.end(), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t label = labels[static_cast<size_t>(r)];
      if (label < 0 || label >= classes) {
        return InvalidArgument("label " + std::to_string(label) + " of row " + std::to_string(r) + " is not in [0, " +
                               std::to_string(classes) + ")");
      }
      onehot_->data[static_cast<size_t>(r * classes + label)] = 1.0f;
      minus_onehot_->data[static_cast<size_t>(r * classes + label)] = -1.0f;
    }
    return Status::Ok();
  }

 private:
  Tensor* onehot_ = nullptr;
  Tensor* minus_onehot_ = nullptr;
};

// ---- Kernels of the op set of imported models -------------------------------------------------

// `dims` with leading ones up to `rank` axes (NumPy broadcasting aligns shapes on the right).
Dims Padded(const Dims& dims, size_t rank) {
  Dims out(rank - dims.size(), 1);
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

// A row-major tensor with its last two axes swapped, without copying.
memory::desc TransposedLast(const Dims& dims) {
  const size_t r = dims.size();
  memory::dims strides(r, 1);
  for (int i = static_cast<int>(r) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  memory::dims d(dims.begin(), dims.end());
  std::swap(d[r - 1], d[r - 2]);
  std::swap(strides[r - 1], strides[r - 2]);
  return memory::desc(d, memory::data_type::f32, strides);
}

std::vector<int64_t> RowMajorStrides(const Dims& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

// A value attribute stored times 10^6 (graph::OpKind::kAffine).
float Micro(const LayerSpec& spec, const std::string& name, float fallback) {
  auto it = spec.attributes.find(name);
  return it == spec.attributes.end() ? fallback : static_cast<float>(it->second) * 1e-6f;
}

// Shared by the new kernels: elementwise steps, reductions to a broadcast shape, expansion.
class OpLayer : public StepLayer {
 public:
  using StepLayer::StepLayer;

 protected:
  void AddEltwise(std::vector<Step>& pass, algorithm alg, float alpha, float beta, memory src, memory dst) {
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(prop_kind::forward_training, alg, src.get_desc(), alpha, beta), attr_,
        backend_.engine());
    Add(pass, pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  }

  // diff_src from diff_dst at `at` (the source, or the destination for *_use_dst_for_bwd).
  void AddEltwiseBackward(std::vector<Step>& pass, algorithm alg, float alpha, float beta, memory at, memory diff_dst,
                          memory diff_src) {
    const memory::desc md = at.get_desc();
    dnnl::eltwise_forward::primitive_desc hint(
        dnnl::eltwise_forward::desc(prop_kind::forward_training, alg, md, alpha, beta), attr_, backend_.engine());
    dnnl::eltwise_backward::primitive_desc pd(dnnl::eltwise_backward::desc(alg, md, md, alpha, beta), attr_,
                                              backend_.engine(), hint);
    const bool use_dst =
        alg == algorithm::eltwise_relu_use_dst_for_bwd || alg == algorithm::eltwise_logistic_use_dst_for_bwd ||
        alg == algorithm::eltwise_tanh_use_dst_for_bwd || alg == algorithm::eltwise_sqrt_use_dst_for_bwd ||
        alg == algorithm::eltwise_clip_v2_use_dst_for_bwd;
    Add(pass, pd,
        {{use_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, at}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_src}});
  }

  // `to` (dims `to_dims`, broadcast against `full`) = sum of `from` (dims `full`) over the broadcast axes.
  void AddReduceTo(std::vector<Step>& pass, memory from, const Dims& full, Tensor& to, const Dims& to_dims) {
    AddReduceSum(pass, from, Mem(to, Plain(Padded(to_dims, full.size()))));
  }

  // A full-size copy of `t` broadcast to `full` (oneDNN broadcasts only the second operand).
  memory Expand(std::vector<Step>& pass, Tensor& t, const Dims& full) {
    if (t.dims == full) return Mem(t);
    Tensor& zeros = Own(full);
    Tensor& out = Own(full);
    AddBinary(pass, algorithm::binary_add, Mem(zeros), Mem(t, Plain(Padded(t.dims, full.size()))), Mem(out));
    return Mem(out);
  }

  // Positive values away from zero, for divisors and square roots.
  static void Positive(Tensor& t) {
    for (float& v : t.data) v = std::fabs(v) + 0.5f;
  }
};

// An elementwise op of one input: one oneDNN eltwise algorithm, its derivative taken at X or
// (for the *_use_dst_for_bwd algorithms) at Y.
struct EltwiseSpec {
  algorithm alg;
  float alpha = 0.0f, beta = 0.0f;
  bool use_dst = false;
  bool positive_input = false;  // square roots: a variance plus epsilon
};

class Unary : public OpLayer {
 public:
  Unary(Backend& b, const LayerSpec& spec, uint32_t seed, const EltwiseSpec& e) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    if (e.positive_input) Positive(inputs_[0]);
    AddEltwise(forward_, e.alg, e.alpha, e.beta, Mem(inputs_[0]), Mem(output_));
    // The affine op's derivative is a constant: its backward is given dY as the point, so that it
    // reads nothing the training graph does not list (X may be freed by then).
    const bool constant_derivative = e.alg == algorithm::eltwise_linear;
    AddEltwiseBackward(backward_input_, e.alg, e.alpha, e.beta,
                       e.use_dst             ? Mem(output_)
                       : constant_derivative ? Mem(grad_output_)
                                             : Mem(inputs_[0]),
                       Mem(grad_output_), Mem(grad_inputs_[0]));
    Forward();
  }
};

// PyTorch's hardsigmoid, clip(x / 6 + 1/2, 0, 1): two eltwise steps. The clip's derivative comes
// from Y; the affine step's is a constant.
class HardSigmoid : public OpLayer {
 public:
  HardSigmoid(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const Dims& x = inputs_[0].dims;
    Tensor& z = Own(x);
    AddEltwise(forward_, algorithm::eltwise_linear, 1.0f / 6, 0.5f, Mem(inputs_[0]), Mem(z));
    AddEltwise(forward_, algorithm::eltwise_clip_v2_use_dst_for_bwd, 0.0f, 1.0f, Mem(z), Mem(output_));
    Tensor& dz = Own(x);
    AddEltwiseBackward(backward_input_, algorithm::eltwise_clip_v2_use_dst_for_bwd, 0.0f, 1.0f, Mem(output_),
                       Mem(grad_output_), Mem(dz));
    AddEltwiseBackward(backward_input_, algorithm::eltwise_linear, 1.0f / 6, 0.5f, Mem(dz), Mem(dz),
                       Mem(grad_inputs_[0]));
    Forward();
  }
};

// Add, Sub, Mul, Div with broadcasting: of two activations A and B, or of an activation A and a
// parameter B (graph::ForwardGraph::BinaryParam) whose gradient is BackwardWeights (and BackwardBias).
class Binary : public OpLayer {
 public:
  Binary(Backend& b, const LayerSpec& spec, uint32_t seed, algorithm alg) : OpLayer(b, seed) {
    const bool with_param = spec.input_shapes.size() == 1;
    const Dims& full = spec.output_shape;
    if (with_param) {
      InitInputs({spec.input_shapes[0]});
    } else {
      InitInputs({spec.input_shapes[0], spec.input_shapes[1]});
    }
    InitOutput(full);
    Tensor* bt = nullptr;
    Tensor* dbt = nullptr;
    if (with_param) {
      const int64_t rank = spec.attributes.at("param_rank");
      bt = &Param(Dims(full.end() - rank, full.end()), 0.5f);
      dbt = grad_params_[0];
    } else {
      bt = &inputs_[1];
      dbt = &grad_inputs_[1];
    }
    Tensor& a = inputs_[0];
    Tensor& da = grad_inputs_[0];
    Tensor& bb = *bt;
    if (alg == algorithm::binary_div) Positive(bb);
    if (alg == algorithm::binary_mul && with_param) {
      for (float& v : bb.data) v += 1.0f;  // a scale near one
    }
    auto bcast = [&](Tensor& t) { return Mem(t, Plain(Padded(t.dims, full.size()))); };
    AddBinary(forward_, alg, Expand(forward_, a, full), bcast(bb), Mem(output_));

    // Gradients: dA and dB, each summed over the axes it was broadcast along.
    std::vector<Step>& db_pass = with_param ? backward_weights_ : backward_input_;
    memory dy = Mem(grad_output_);
    switch (alg) {
      case algorithm::binary_add:
      case algorithm::binary_sub:
        AddReduceTo(backward_input_, dy, full, da, a.dims);
        for (auto* pass : {&db_pass, with_param ? &backward_bias_ : nullptr}) {
          if (!pass) continue;
          AddReduceTo(*pass, dy, full, *dbt, bb.dims);
          if (alg == algorithm::binary_sub)
            AddEltwise(*pass, algorithm::eltwise_linear, -1.0f, 0.0f, Mem(*dbt), Mem(*dbt));
        }
        break;
      case algorithm::binary_mul: {
        Tensor& t = Own(full);
        AddBinary(backward_input_, algorithm::binary_mul, dy, bcast(bb), Mem(t));
        AddReduceTo(backward_input_, Mem(t), full, da, a.dims);
        Tensor& u = Own(full);
        AddBinary(db_pass, algorithm::binary_mul, dy, bcast(a), Mem(u));
        AddReduceTo(db_pass, Mem(u), full, *dbt, bb.dims);
        break;
      }
      case algorithm::binary_div: {
        Tensor& t = Own(full);
        AddBinary(backward_input_, algorithm::binary_div, dy, bcast(bb), Mem(t));
        AddReduceTo(backward_input_, Mem(t), full, da, a.dims);
        // dB = -sum(dY * A / B^2)
        Tensor& u = Own(full);
        AddBinary(db_pass, algorithm::binary_mul, dy, bcast(a), Mem(u));
        AddBinary(db_pass, algorithm::binary_div, Mem(u), bcast(bb), Mem(u));
        AddBinary(db_pass, algorithm::binary_div, Mem(u), bcast(bb), Mem(u));
        AddReduceTo(db_pass, Mem(u), full, *dbt, bb.dims);
        AddEltwise(db_pass, algorithm::eltwise_linear, -1.0f, 0.0f, Mem(*dbt), Mem(*dbt));
        break;
      }
      default:
        throw std::logic_error("not a binary algorithm");
    }
  }
};

// Batched C = A B of two activations, batch axes broadcast. dA = dC B^T, dB = A^T dC, summed over
// the batch axes an operand was broadcast along.
class MatMul : public OpLayer {
 public:
  MatMul(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const Dims& c = spec.output_shape;
    const size_t rank = c.size();
    Tensor& a = inputs_[0];
    Tensor& bm = inputs_[1];
    const Dims ad = Padded(a.dims, rank), bd = Padded(bm.dims, rank);
    AddMatmul(forward_, Mem(a, Plain(ad)), Mem(bm, Plain(bd)), Mem(output_));
    // Full-batch shapes of the gradients before the reduction over broadcast axes.
    Dims da_full = c, db_full = c;
    da_full[rank - 1] = ad[rank - 1];
    db_full[rank - 2] = bd[rank - 2];
    memory da = da_full == ad ? Mem(grad_inputs_[0], Plain(ad)) : Mem(Own(da_full));
    memory db = db_full == bd ? Mem(grad_inputs_[1], Plain(bd)) : Mem(Own(db_full));
    AddMatmul(backward_input_, Mem(grad_output_), Mem(bm, TransposedLast(bd)), da);
    AddMatmul(backward_input_, Mem(a, TransposedLast(ad)), Mem(grad_output_), db);
    if (da_full != ad) AddReduceSum(backward_input_, da, Mem(grad_inputs_[0], Plain(ad)));
    if (db_full != bd) AddReduceSum(backward_input_, db, Mem(grad_inputs_[1], Plain(bd)));
  }
};

class Softmax : public OpLayer {
 public:
  Softmax(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const int axis = static_cast<int>(spec.attributes.at("axis"));
    const memory::desc md = Plain(output_.dims);
    dnnl::softmax_forward::primitive_desc fwd(dnnl::softmax_forward::desc(prop_kind::forward_training, md, axis), attr_,
                                              backend_.engine());
    Add(forward_, fwd, {{DNNL_ARG_SRC, Mem(inputs_[0])}, {DNNL_ARG_DST, Mem(output_)}});
    dnnl::softmax_backward::primitive_desc bwd(dnnl::softmax_backward::desc(md, md, axis), attr_, backend_.engine(),
                                               fwd);
    Add(backward_input_, bwd,
        {{DNNL_ARG_DST, Mem(output_)},
         {DNNL_ARG_DIFF_DST, Mem(grad_output_)},
         {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])}});
    Forward();
  }
};

// Layer normalization over the last axis with scale and shift; like batch normalization, one
// backward primitive gives dX, dscale and dshift.
class LayerNorm : public OpLayer {
 public:
  LayerNorm(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    Tensor& x = inputs_[0];
    const int64_t features = x.dims.back();
    Tensor& scale = Param({features}, 0.1f);
    for (float& g : scale.data) g += 1.0f;
    Tensor& shift = Param({features}, 0.1f);
    const Dims stat_dims(x.dims.begin(), x.dims.end() - 1);
    Tensor& mean = Own(stat_dims);
    Tensor& variance = Own(stat_dims);
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    const auto epsilon = spec.attributes.find("epsilon_e9");  // else PyTorch's default
    const float kEpsilon = epsilon == spec.attributes.end() ? 1e-5f : static_cast<float>(epsilon->second) * 1e-9f;
    const memory::desc md = Plain(x.dims);
    dnnl::layer_normalization_forward::primitive_desc fwd(
        dnnl::layer_normalization_forward::desc(prop_kind::forward_training, md, kEpsilon, flags), attr_,
        backend_.engine());
    Add(forward_, fwd,
        {{DNNL_ARG_SRC, Mem(x)},
         {DNNL_ARG_DST, Mem(output_)},
         {DNNL_ARG_SCALE, Mem(scale)},
         {DNNL_ARG_SHIFT, Mem(shift)},
         {DNNL_ARG_MEAN, Mem(mean)},
         {DNNL_ARG_VARIANCE, Mem(variance)}});
    dnnl::layer_normalization_backward::primitive_desc bwd(
        dnnl::layer_normalization_backward::desc(prop_kind::backward, md, md, kEpsilon, flags), attr_,
        backend_.engine(), fwd);
    // As batch normalization's: dbeta alone (bias-only training) is a sum of dY, without X.
    Dims shift_dims(x.dims.size(), 1);
    shift_dims.back() = features;
    AddReduceSum(backward_bias_, Mem(grad_output_), Mem(*grad_params_[1], Plain(shift_dims)));
    for (auto* pass : {&backward_input_, &backward_weights_}) {
      Add(*pass, bwd,
          {{DNNL_ARG_SRC, Mem(x)},
           {DNNL_ARG_MEAN, Mem(mean)},
           {DNNL_ARG_VARIANCE, Mem(variance)},
           {DNNL_ARG_DIFF_DST, Mem(grad_output_)},
           {DNNL_ARG_SCALE, Mem(scale)},
           {DNNL_ARG_SHIFT, Mem(shift)},
           {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])},
           {DNNL_ARG_DIFF_SCALE, Mem(*grad_params_[0])},
           {DNNL_ARG_DIFF_SHIFT, Mem(*grad_params_[1])}});
    }
    Forward();  // statistics for the backward pass
  }
};

// Mean over the axes in the "axes" bit mask. dX = dY / n broadcast back over the reduced axes.
class ReduceMean : public OpLayer {
 public:
  ReduceMean(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const Dims& x = spec.input_shapes[0];
    const int64_t mask = spec.attributes.at("axes");
    Dims kept = x;  // the output with its reduced axes kept as ones
    int64_t n = 1;
    for (size_t i = 0; i < x.size(); ++i) {
      if (mask >> i & 1) {
        n *= x[i];
        kept[i] = 1;
      }
    }
    dnnl::reduction::primitive_desc pd(
        dnnl::reduction::desc(algorithm::reduction_mean, Plain(x), Plain(kept), 0.f, 0.f), attr_, backend_.engine());
    Add(forward_, pd, {{DNNL_ARG_SRC, Mem(inputs_[0])}, {DNNL_ARG_DST, Mem(output_, Plain(kept))}});
    Tensor& inverse = Own(x);
    std::fill(inverse.data.begin(), inverse.data.end(), 1.0f / static_cast<float>(n));
    AddBinary(backward_input_, algorithm::binary_mul, Mem(inverse), Mem(grad_output_, Plain(kept)),
              Mem(grad_inputs_[0]));
  }
};

class Concat : public OpLayer {
 public:
  Concat(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const int axis = static_cast<int>(spec.attributes.at("axis"));
    std::vector<memory::desc> mds;
    std::unordered_map<int, memory> args = {{DNNL_ARG_DST, Mem(output_)}};
    for (size_t i = 0; i < inputs_.size(); ++i) {
      mds.push_back(Plain(inputs_[i].dims));
      args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = Mem(inputs_[i]);
    }
    dnnl::concat::primitive_desc pd(Plain(output_.dims), axis, mds, backend_.engine(), attr_);
    Add(forward_, pd, args);
    // dX_i is the slab of dY at the input's offset along the axis.
    memory::dims offsets(output_.dims.size(), 0);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const memory::desc part =
          Plain(output_.dims).submemory_desc(memory::dims(inputs_[i].dims.begin(), inputs_[i].dims.end()), offsets);
      AddReorder(backward_input_, Mem(grad_output_, part), Mem(grad_inputs_[i]));
      offsets[axis] += inputs_[i].dims[axis];
    }
  }
};

// Y = X with its axes permuted: a reorder from X's memory seen in Y's axis order.
class Transpose : public OpLayer {
 public:
  Transpose(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const Dims& x = spec.input_shapes[0];
    const std::vector<int64_t> perm = graph::DecodePerm(spec.attributes.at("perm"), x.size());
    const std::vector<int64_t> x_strides = RowMajorStrides(x), y_strides = RowMajorStrides(output_.dims);
    memory::dims x_in_y_order(x.size()), y_in_x_order(x.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      x_in_y_order[i] = x_strides[perm[i]];
      y_in_x_order[perm[i]] = y_strides[i];
    }
    AddReorder(forward_,
               Mem(inputs_[0], memory::desc(memory::dims(output_.dims.begin(), output_.dims.end()),
                                            memory::data_type::f32, x_in_y_order)),
               Mem(output_));
    AddReorder(backward_input_,
               Mem(grad_output_, memory::desc(memory::dims(x.begin(), x.end()), memory::data_type::f32, y_in_x_order)),
               Mem(grad_inputs_[0]));
  }
};

// Elements [start, end) of one axis (squeezed or not): a reorder of a sub-memory; its backward
// writes dY into that part of dX, whose other elements stay zero.
class Slice : public OpLayer {
 public:
  Slice(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const Dims& x = spec.input_shapes[0];
    const size_t axis = static_cast<size_t>(spec.attributes.at("axis"));
    const int64_t start = spec.attributes.at("start"), end = spec.attributes.at("end");
    Dims part = x;
    part[axis] = end - start;
    memory::dims offsets(x.size(), 0);
    offsets[axis] = start;
    const memory::desc sub = Plain(x).submemory_desc(memory::dims(part.begin(), part.end()), offsets);
    AddReorder(forward_, Mem(inputs_[0], sub), Mem(output_, Plain(part)));
    AddReorder(backward_input_, Mem(grad_output_, Plain(part)), Mem(grad_inputs_[0], sub));
  }
};

// Rows of a parameter table picked by integer ids. oneDNN has no gather primitive, so this is a
// copy loop; it reads and writes through the memories (set_data_handle rebinds them).
class Embedding : public OpLayer {
 public:
  Embedding(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    vocabulary_ = spec.attributes.at("vocabulary");
    dim_ = spec.attributes.at("dim");
    Tensor& table = Param({vocabulary_, dim_}, 1.0f);
    std::uniform_int_distribution<int64_t> id(0, vocabulary_ - 1);
    for (float& v : inputs_[0].data) v = static_cast<float>(id(rng_));
    ids_ = Mem(inputs_[0]);
    table_ = Mem(table);
    out_ = Mem(output_);
    dy_ = Mem(grad_output_);
    dtable_ = Mem(*grad_params_[0]);
    count_ = inputs_[0].size();
  }

  void Forward() override {
    const float* ids = static_cast<const float*>(ids_.get_data_handle());
    const float* table = static_cast<const float*>(table_.get_data_handle());
    float* out = static_cast<float*>(out_.get_data_handle());
    for (int64_t i = 0; i < count_; ++i) std::copy_n(table + Row(ids[i]) * dim_, dim_, out + i * dim_);
  }
  void BackwardInput() override {}  // ids have no gradient
  // The copy loops run outside the step lists, where StepLayer finds what to rebind: rebind them here.
  void Bind(Tensor& t, float* data) override {
    if (&t == &inputs_[0]) ids_.set_data_handle(data);
    if (&t == &output_) out_.set_data_handle(data);
    if (&t == &grad_output_) dy_.set_data_handle(data);
    StepLayer::Bind(t, data);
  }
  void BackwardWeights() override {
    const float* ids = static_cast<const float*>(ids_.get_data_handle());
    const float* dy = static_cast<const float*>(dy_.get_data_handle());
    float* dtable = static_cast<float*>(dtable_.get_data_handle());
    std::fill_n(dtable, vocabulary_ * dim_, 0.0f);
    for (int64_t i = 0; i < count_; ++i) {
      float* row = dtable + Row(ids[i]) * dim_;
      for (int64_t k = 0; k < dim_; ++k) row[k] += dy[i * dim_ + k];
    }
  }

 private:
  int64_t Row(float id) const { return std::clamp<int64_t>(std::lround(id), 0, vocabulary_ - 1); }

  int64_t vocabulary_ = 0, dim_ = 0, count_ = 0;
  memory ids_, table_, out_, dy_, dtable_;
};

class GradSum : public StepLayer {
 public:
  GradSum(Backend& b, const Dims& shape, int parts, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(std::vector<Dims>(static_cast<size_t>(parts), shape));
    InitOutput(shape);
    std::vector<memory::desc> mds(static_cast<size_t>(parts), Plain(shape));
    dnnl::sum::primitive_desc pd(Plain(shape), std::vector<float>(static_cast<size_t>(parts), 1.0f), mds,
                                 backend_.engine(), attr_);
    std::unordered_map<int, memory> args = {{DNNL_ARG_DST, Mem(output_)}};
    for (int i = 0; i < parts; ++i) args[DNNL_ARG_MULTIPLE_SRC + i] = Mem(inputs_[static_cast<size_t>(i)]);
    Add(forward_, pd, args);
  }
};

template <typename T, typename... Args>
Result<std::unique_ptr<Layer>> Make(Args&&... args) {
  return std::unique_ptr<Layer>(new T(std::forward<Args>(args)...));
}

}  // namespace

Status Layer::SetLabels(const std::vector<int32_t>&) { return FailedPrecondition("only a loss layer takes labels"); }

Tensor::Tensor(Dims d) : dims(std::move(d)), data(static_cast<size_t>(dims.empty() ? 0 : Elements(dims)), 0.0f) {}

Backend::Backend() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

void Backend::Free::operator()(void* p) const { std::free(p); }

void Backend::ReserveScratchpad(uint64_t bytes) {
  if (bytes <= scratchpad_bytes_) return;
  constexpr uint64_t kAlign = 4096;  // whole pages: oneDNN aligns inside it, and no page is shared with the heap
  const uint64_t size = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, size);
  if (!p) throw std::bad_alloc();  // as the std::vector buffers of the layers would
  // Touched once here, so the whole buffer is resident from the start, as the memory model counts it.
  std::memset(p, 0, size);
  scratchpad_.reset(p);
  scratchpad_bytes_ = bytes;
}

std::string Backend::Isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

Result<std::unique_ptr<Layer>> MakeLayer(Backend& backend, const LayerSpec& spec, uint32_t seed) {
  try {
    const Result<graph::OpKind> kind = graph::ParseOpKind(spec.kind);
    using graph::OpKind;
    switch (kind.ok() ? *kind
                      : OpKind::kInput) {  // no default: a new op kind does not compile until it has a kernel here
      case OpKind::kConv2d:
        return std::unique_ptr<Layer>(new Conv2d(backend, spec, seed));
      case OpKind::kLinear:
        return std::unique_ptr<Layer>(new Linear(backend, spec, seed, false, !spec.attributes.count("no_bias")));
      case OpKind::kLinearRelu:
        return std::unique_ptr<Layer>(new Linear(backend, spec, seed, true, true));
      case OpKind::kQkvProjection:
        return std::unique_ptr<Layer>(new Linear(backend, spec, seed, false, false));
      case OpKind::kBatchNorm2d:
        return std::unique_ptr<Layer>(new BatchNorm2d(backend, spec, seed));
      case OpKind::kRelu:
        return std::unique_ptr<Layer>(new Relu(backend, spec, seed));
      case OpKind::kMaxPool2d:
        return std::unique_ptr<Layer>(new Pool2d(backend, spec, seed, true));
      case OpKind::kAvgPool2d:
        return std::unique_ptr<Layer>(new Pool2d(backend, spec, seed, false));
      case OpKind::kFlatten:
        return std::unique_ptr<Layer>(new Flatten(backend, spec, seed));
      case OpKind::kDropout:
        return std::unique_ptr<Layer>(new Dropout(backend, spec, seed));
      case OpKind::kAdd:
        return std::unique_ptr<Layer>(new Add2(backend, spec, seed));
      case OpKind::kAttentionScores:
        return std::unique_ptr<Layer>(new AttentionScores(backend, spec, seed));
      case OpKind::kAttentionContext:
        return std::unique_ptr<Layer>(new AttentionContext(backend, spec, seed));
      case OpKind::kCrossEntropyLoss:
        return std::unique_ptr<Layer>(new CrossEntropyLoss(backend, spec, seed));
      case OpKind::kRelu6:
        return Make<Unary>(backend, spec, seed, EltwiseSpec{.alg = algorithm::eltwise_clip_v2, .beta = 6.0f});
      case OpKind::kHardSwish:
        return Make<Unary>(backend, spec, seed, EltwiseSpec{.alg = algorithm::eltwise_hardswish});
      case OpKind::kHardSigmoid:
        return Make<HardSigmoid>(backend, spec, seed);
      case OpKind::kSigmoid:
        return Make<Unary>(backend, spec, seed,
                           EltwiseSpec{.alg = algorithm::eltwise_logistic_use_dst_for_bwd, .use_dst = true});
      case OpKind::kTanh:
        return Make<Unary>(backend, spec, seed,
                           EltwiseSpec{.alg = algorithm::eltwise_tanh_use_dst_for_bwd, .use_dst = true});
      case OpKind::kGelu:
        return Make<Unary>(backend, spec, seed, EltwiseSpec{.alg = algorithm::eltwise_gelu_erf});
      case OpKind::kSilu:
        return Make<Unary>(backend, spec, seed, EltwiseSpec{.alg = algorithm::eltwise_swish, .alpha = 1.0f});
      case OpKind::kSqrt:
        return Make<Unary>(
            backend, spec, seed,
            EltwiseSpec{.alg = algorithm::eltwise_sqrt_use_dst_for_bwd, .use_dst = true, .positive_input = true});
      case OpKind::kPow:
        return Make<Unary>(backend, spec, seed,
                           EltwiseSpec{.alg = algorithm::eltwise_pow,
                                       .alpha = 1.0f,
                                       .beta = static_cast<float>(spec.attributes.at("exponent"))});
      case OpKind::kAffine:
        return Make<Unary>(backend, spec, seed,
                           EltwiseSpec{.alg = algorithm::eltwise_linear,
                                       .alpha = Micro(spec, "alpha_e6", 1.0f),
                                       .beta = Micro(spec, "beta_e6", 0.0f)});
      case OpKind::kMul:
        return Make<Binary>(backend, spec, seed, algorithm::binary_mul);
      case OpKind::kSub:
        return Make<Binary>(backend, spec, seed, algorithm::binary_sub);
      case OpKind::kDiv:
        return Make<Binary>(backend, spec, seed, algorithm::binary_div);
      case OpKind::kAddBroadcast:
        return Make<Binary>(backend, spec, seed, algorithm::binary_add);
      case OpKind::kMatMul:
        return Make<MatMul>(backend, spec, seed);
      case OpKind::kSoftmax:
        return Make<Softmax>(backend, spec, seed);
      case OpKind::kLayerNorm:
        return Make<LayerNorm>(backend, spec, seed);
      case OpKind::kReduceMean:
        return Make<ReduceMean>(backend, spec, seed);
      case OpKind::kConcat:
        return Make<Concat>(backend, spec, seed);
      case OpKind::kTranspose:
        return Make<Transpose>(backend, spec, seed);
      case OpKind::kReshape:
        return Make<Flatten>(backend, spec, seed);  // a view in frameworks, a copy as a kernel
      case OpKind::kSlice:
        return Make<Slice>(backend, spec, seed);
      case OpKind::kEmbedding:
        return Make<Embedding>(backend, spec, seed);
      case OpKind::kInput:
        break;
    }
    return Status(ErrorCode::kUnimplemented, "no oneDNN kernel for op kind '" + spec.kind + "'");
  } catch (const dnnl::error& e) {
    return Internal("oneDNN refused op kind '" + spec.kind + "': " + e.what());
  } catch (const std::out_of_range&) {
    return InvalidArgument("op kind '" + spec.kind + "' is missing an attribute it needs");
  } catch (const std::logic_error& e) {
    return InvalidArgument("op kind '" + spec.kind + "': " + e.what());
  }
}

Result<std::unique_ptr<Layer>> MakeGradSum(Backend& backend, const Dims& shape, int parts, uint32_t seed) {
  try {
    return std::unique_ptr<Layer>(new GradSum(backend, shape, parts, seed));
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN refused a gradient sum: ") + e.what());
  }
}

}  // namespace edgecost::profiler
