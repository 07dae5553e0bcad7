#include "profiler/layers.h"

#include <cmath>
#include <deque>
#include <functional>
#include <numeric>
#include <random>
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
};

// Common machinery: owned tensors with stable addresses, scratchpads held by
// the layer (so their size is known), and the four passes as step lists.
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
    for (Step& step : steps) step.primitive.execute(backend_.stream(), step.args);
    backend_.stream().wait();
  }

  // Memory over a tensor (or a slice of it starting at `offset` elements).
  memory Mem(Tensor& t, const memory::desc& md, int64_t offset = 0) {
    return memory(md, backend_.engine(), t.data.data() + offset);
  }
  memory Mem(Tensor& t) { return Mem(t, Plain(t.dims)); }

  Tensor& Own(Dims dims) { return owned_.emplace_back(std::move(dims)); }

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

  // Adds a step to `pass`, with a scratchpad sized from the primitive descriptor.
  template <typename PrimitiveDesc>
  void Add(std::vector<Step>& pass, const PrimitiveDesc& pd, std::unordered_map<int, memory> args) {
    const memory::desc scratch = pd.scratchpad_desc();
    if (scratch.get_size() > 0) {
      Tensor& buffer = Own({static_cast<int64_t>((scratch.get_size() + sizeof(float) - 1) / sizeof(float))});
      args[DNNL_ARG_SCRATCHPAD] = memory(scratch, backend_.engine(), buffer.data.data());
      scratchpad_bytes_ = std::max<uint64_t>(scratchpad_bytes_, scratch.get_size());
    }
    pass.push_back({dnnl::primitive(pd.get()), std::move(args)});
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

class Conv2d : public StepLayer {
 public:
  Conv2d(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const int64_t k = spec.attributes.at("kernel"), s = spec.attributes.at("stride"), p = spec.attributes.at("padding");
    const int64_t in_channels = spec.input_shapes[0][1], out_channels = spec.output_shape[1];
    Tensor& w = Param({out_channels, in_channels, k, k}, std::sqrt(2.0f / static_cast<float>(in_channels * k * k)));
    Tensor& bias = Param({out_channels}, 0.01f);
    Tensor& x = inputs_[0];
    // Same padding on both sides when it fits, else as much on the right as the output size needs.
    const int64_t pad_r = (spec.output_shape[2] - 1) * s + k - x.dims[2] - p;
    const memory::dims strides = {s, s}, pad_l = {p, p}, pad_rr = {pad_r, pad_r};
    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, Plain(x.dims),
                                        Plain(w.dims), Plain(bias.dims), Plain(output_.dims), strides, pad_l, pad_rr),
        attr_, backend_.engine());
    Add(forward_, fwd,
        {{DNNL_ARG_SRC, Mem(x)}, {DNNL_ARG_WEIGHTS, Mem(w)}, {DNNL_ARG_BIAS, Mem(bias)}, {DNNL_ARG_DST, Mem(output_)}});
    dnnl::convolution_backward_data::primitive_desc data(
        dnnl::convolution_backward_data::desc(algorithm::convolution_direct, Plain(x.dims), Plain(w.dims),
                                              Plain(output_.dims), strides, pad_l, pad_rr),
        attr_, backend_.engine(), fwd);
    Add(backward_input_, data,
        {{DNNL_ARG_DIFF_DST, Mem(grad_output_)},
         {DNNL_ARG_WEIGHTS, Mem(w)},
         {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])}});
    dnnl::convolution_backward_weights::primitive_desc weights(
        dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, Plain(x.dims), Plain(w.dims),
                                                 Plain(bias.dims), Plain(output_.dims), strides, pad_l, pad_rr),
        attr_, backend_.engine(), fwd);
    Add(backward_weights_, weights,
        {{DNNL_ARG_SRC, Mem(x)},
         {DNNL_ARG_DIFF_DST, Mem(grad_output_)},
         {DNNL_ARG_DIFF_WEIGHTS, Mem(*grad_params_[0])},
         {DNNL_ARG_DIFF_BIAS, Mem(*grad_params_[1])}});
    const Dims& y = output_.dims;
    AddReduceSum(backward_bias_, Mem(grad_output_), Mem(*grad_params_[1], Plain({1, y[1], 1, 1})));
  }
};

// Fully connected, optionally with a fused ReLU (the transformer's FFN), or without bias (QKV).
class Linear : public StepLayer {
 public:
  Linear(Backend& b, const LayerSpec& spec, uint32_t seed, bool fused_relu, bool bias) : StepLayer(b, seed) {
    // The QKV projection's output is listed as (3 seq, d, heads); the kernel sees (seq, 3 d heads).
    const Dims x_dims = {spec.input_shapes[0][0], Elements(spec.input_shapes[0]) / spec.input_shapes[0][0]};
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
    constexpr float kEpsilon = 1e-5f;
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
    // One primitive gives dX, dgamma and dbeta: every backward pass runs it.
    for (auto* pass : {&backward_input_, &backward_weights_, &backward_bias_}) {
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

}  // namespace

Status Layer::SetLabels(const std::vector<int32_t>&) { return FailedPrecondition("only a loss layer takes labels"); }

Tensor::Tensor(Dims d) : dims(std::move(d)), data(static_cast<size_t>(dims.empty() ? 0 : Elements(dims)), 0.0f) {}

Backend::Backend() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

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
        return std::unique_ptr<Layer>(new Linear(backend, spec, seed, false, true));
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
      case OpKind::kInput:
        break;
    }
    return Status(ErrorCode::kUnimplemented, "no oneDNN kernel for op kind '" + spec.kind + "'");
  } catch (const dnnl::error& e) {
    return Internal("oneDNN refused op kind '" + spec.kind + "': " + e.what());
  } catch (const std::out_of_range&) {
    return InvalidArgument("op kind '" + spec.kind + "' is missing an attribute it needs");
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
