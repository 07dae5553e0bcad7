// The op set of imported ONNX models beyond the zoo's: elementwise functions,
// broadcasting binary ops, matrix products, softmax, layer norm, reductions,
// concatenation, transposes, slices, padding and embeddings.
#include <cstring>

#include "kernels/families.h"
#include "kernels/step_layer.h"

namespace edgecost::kernels::detail {
namespace {

struct EltwiseSpec {
  algorithm alg;
  float alpha = 0.0f, beta = 0.0f;
  bool use_dst = false;
  bool positive_input = false;  // square roots: a variance plus epsilon
};

class Unary : public OpLayer {
 public:
  Unary(Backend& b, const LayerSpec& spec, uint32_t seed, const EltwiseSpec& e) : OpLayer(b, seed) {
    InitTensors(spec);
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
    InitTensors(spec);  // channels-last: a product of maps of `full`, or of one by (N, C, 1, 1)
    Tensor* bt = nullptr;
    Tensor* dbt = nullptr;
    if (with_param) {
      const int64_t rank = spec.attributes.at("param_rank");
      const auto broadcast = spec.attributes.find("param_broadcast_axes");
      Dims param_dims(full.end() - rank, full.end());
      for (int64_t i = 0; i < rank && broadcast != spec.attributes.end(); ++i) {
        if (broadcast->second >> i & 1) param_dims[i] = 1;
      }
      bt = &Param(param_dims, 0.5f);
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
    auto bcast = [&](Tensor& t) { return t.dims == full ? Mem(t) : Mem(t, Plain(Padded(t.dims, full.size()))); };
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
      case algorithm::binary_mul:
        // dA = dY B, dB = dY A.
        AddProduct(backward_input_, algorithm::binary_mul, dy, bcast(bb), full, da, a.dims);
        AddProduct(db_pass, algorithm::binary_mul, dy, bcast(a), full, *dbt, bb.dims);
        break;
      case algorithm::binary_div: {
        // dA = dY / B, dB = -sum(dY A / B^2).
        AddProduct(backward_input_, algorithm::binary_div, dy, bcast(bb), full, da, a.dims);
        Tensor& u = Temporary(full);
        AddBinary(db_pass, algorithm::binary_mul, dy, bcast(a), Mem(u));
        AddBinary(db_pass, algorithm::binary_div, Mem(u), bcast(bb), Mem(u));
        AddProduct(db_pass, algorithm::binary_div, Mem(u), bcast(bb), full, *dbt, bb.dims);
        AddEltwise(db_pass, algorithm::eltwise_linear, -1.0f, 0.0f, Mem(*dbt), Mem(*dbt));
        break;
      }
      default:
        throw std::logic_error("not a binary algorithm");
    }
  }

 private:
  // grad = src0 (op) src1 summed over the axes `grad_dims` broadcasts along `full`: written straight
  // into grad where nothing is broadcast, else through the layer's one full-size temporary.
  void AddProduct(std::vector<Step>& pass, algorithm op, memory src0, memory src1, const Dims& full, Tensor& grad,
                  const Dims& grad_dims) {
    if (Elements(grad_dims) == Elements(full)) {
      AddBinary(pass, op, src0, src1, grad.channels_last ? Mem(grad) : Mem(grad, Plain(full)));
      return;
    }
    Tensor& t = Temporary(full);
    AddBinary(pass, op, src0, src1, Mem(t));
    if (t.channels_last) {  // to (N, C, 1, 1): the sum over each image's rows of (H W, C)
      AddReduceSum(pass, Mem(t, Plain({full[0], full[2] * full[3], full[1]})), Mem(grad, Plain({full[0], 1, full[1]})));
      return;
    }
    AddReduceTo(pass, Mem(t), full, grad, grad_dims);
  }
  // A full-size buffer the backward passes share, laid out as the output: each pass fills and reads
  // it before the next runs.
  Tensor& Temporary(const Dims& full) {
    if (!temporary_) {
      temporary_ = &Own(full);
      temporary_->channels_last = output_.channels_last;
    }
    return *temporary_;
  }

  Tensor* temporary_ = nullptr;
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
    if (kept == x) {  // every reduced axis has extent 1 (a mean of one cell): a copy, which oneDNN's reduction refuses
      AddReorder(forward_, Mem(inputs_[0]), Mem(output_, Plain(kept)));
    } else {
      AddReduction(forward_, algorithm::reduction_mean, Mem(inputs_[0]), Mem(output_, Plain(kept)));
    }
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
    const auto step = spec.attributes.find("step");
    if (step != spec.attributes.end() && step->second > 1) {  // every step-th: strides of X times the step
      part[axis] = (end - start + step->second - 1) / step->second;
      memory::dims strides(x.size(), 1);
      for (int i = static_cast<int>(x.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * x[i + 1];
      const int64_t offset = start * strides[axis];
      strides[axis] *= step->second;
      const memory::desc strided(memory::dims(part.begin(), part.end()), memory::data_type::f32, strides);
      AddReorder(forward_, Mem(inputs_[0], strided, offset), Mem(output_, Plain(part)));
      AddReorder(backward_input_, Mem(grad_output_, Plain(part)), Mem(grad_inputs_[0], strided, offset));
      return;
    }
    memory::dims offsets(x.size(), 0);
    offsets[axis] = start;
    const memory::desc sub = Plain(x).submemory_desc(memory::dims(part.begin(), part.end()), offsets);
    AddReorder(forward_, Mem(inputs_[0], sub), Mem(output_, Plain(part)));
    AddReorder(backward_input_, Mem(grad_output_, Plain(part)), Mem(grad_inputs_[0], sub));
  }
};

// Zeros around X along one axis: Y is zeroed, then X reordered into its middle (a sub-memory); the
// backward pass reorders dY's middle into dX.
class Pad : public OpLayer {
 public:
  Pad(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const Dims& x = spec.input_shapes[0];
    memory::dims offsets(x.size(), 0);
    offsets[static_cast<size_t>(spec.attributes.at("axis"))] = spec.attributes.at("before");
    const memory::desc middle = Plain(output_.dims).submemory_desc(memory::dims(x.begin(), x.end()), offsets);
    forward_.push_back({dnnl::primitive(),
                        {{DNNL_ARG_DST, Mem(output_)}},
                        nullptr,
                        [bytes = output_.bytes()](const std::unordered_map<int, memory>& a) {
                          std::memset(a.at(DNNL_ARG_DST).get_data_handle(), 0, bytes);
                        }});
    AddReorder(forward_, Mem(inputs_[0]), Mem(output_, middle));
    AddReorder(backward_input_, Mem(grad_output_, middle), Mem(grad_inputs_[0]));
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
    if (&t == grad_params_[0]) dtable_.set_data_handle(data);
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

// Swin's biases of the window attention logits X (..., heads, N, N), N = window^2 tokens: the relative
// position bias table[index] (heads, N, N) from a trainable (2 window - 1)^2 x heads table, or the constant
// shifted-window mask (windows, 1, N, N) (graph::ForwardGraph::RelativePositionBias, ShiftedWindowMask).
// The add and its reductions are oneDNN steps; the table's gather and scatter are loops around them.
class WindowBias : public OpLayer {
 public:
  WindowBias(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs({spec.input_shapes[0]});
    const Dims& full = spec.output_shape;
    InitOutput(full);
    const size_t rank = full.size();
    const int64_t n = full[rank - 1];
    const auto window = spec.attributes.find("relative_position_window");
    Dims bias_dims;
    // Attributes as graph::ForwardGraph sets them; a graph file could say anything.
    if (rank < 3 || full[rank - 2] != n) {
      throw std::logic_error("window attention bias over " + graph::ShapeToString(full));
    }
    if (window != spec.attributes.end()) {
      if (window->second < 1 || window->second > 64 || window->second * window->second != n) {
        throw std::logic_error("relative position bias of window " + std::to_string(window->second) + " over " +
                               graph::ShapeToString(full));
      }
      heads_ = full[rank - 3];
      bias_dims = {heads_, n, n};
      index_ = graph::RelativePositionIndex(window->second);
      const int64_t span = 2 * window->second - 1;
      table_ = &Param({span * span, heads_}, 0.02f);
      dtable_ = grad_params_[0];
      dtable_data_ = dtable_->data.data();
    } else {
      const int64_t side = spec.attributes.at("shifted_window_side"), size = spec.attributes.at("shifted_window_size");
      const int64_t shift = spec.attributes.at("shifted_window_shift");
      if (rank < 4 || size < 1 || size > 64 || size * size != n || side < size || side > 64 * size ||
          side % size != 0 || (side / size) * (side / size) != full[rank - 4] || shift < 1 || shift >= size) {
        throw std::logic_error("shifted window mask over " + graph::ShapeToString(full));
      }
      bias_dims = {full[rank - 4], 1, n, n};
      const std::vector<float> mask = graph::ShiftedWindowMask(side, size, shift);
      bias_ = &Own(bias_dims);
      if (mask.size() != bias_->data.size()) throw std::logic_error("shifted window mask does not fit its logits");
      bias_->data = mask;
    }
    if (!bias_) bias_ = &Own(bias_dims);
    auto bcast = [&](Tensor& t) { return Mem(t, Plain(Padded(t.dims, full.size()))); };
    AddBinary(forward_, algorithm::binary_add, Mem(inputs_[0]), bcast(*bias_), Mem(output_));
    AddReduceTo(backward_input_, Mem(grad_output_), full, grad_inputs_[0], inputs_[0].dims);
    if (table_) {
      dbias_ = &Own(bias_dims);
      AddReduceTo(backward_weights_, Mem(grad_output_), full, *dbias_, bias_dims);
    }
  }

  void Forward() override {
    if (table_) {  // bias[h, i, j] = table[index[i, j], h]
      const int64_t pairs = static_cast<int64_t>(index_.size());
      for (int64_t h = 0; h < heads_; ++h) {
        for (int64_t p = 0; p < pairs; ++p) bias_->data[h * pairs + p] = table_->data[index_[p] * heads_ + h];
      }
    }
    Run(forward_);
  }
  void BackwardWeights() override {
    if (!table_) return;
    Run(backward_weights_);  // dbias: dY summed over the windows and the batch
    std::fill_n(dtable_data_, Elements(dtable_->dims), 0.0f);
    const int64_t pairs = static_cast<int64_t>(index_.size());
    for (int64_t h = 0; h < heads_; ++h) {
      for (int64_t p = 0; p < pairs; ++p) dtable_data_[index_[p] * heads_ + h] += dbias_->data[h * pairs + p];
    }
  }
  // The table's gradient is written by the loop, outside the step lists: rebound here.
  void Bind(Tensor& t, float* data) override {
    if (&t == dtable_) dtable_data_ = data;
    StepLayer::Bind(t, data);
  }
  // The table is all bias: its gradient is the same in bias-only training.
  void BackwardBias() override { BackwardWeights(); }

 private:
  int64_t heads_ = 0;
  std::vector<int64_t> index_;
  Tensor* table_ = nullptr;
  Tensor* dtable_ = nullptr;
  float* dtable_data_ = nullptr;  // dtable_'s storage, or where it is bound
  Tensor* bias_ = nullptr;
  Tensor* dbias_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> MakeOnnxLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed) {
  using graph::OpKind;
  switch (kind) {
    case OpKind::kRelu6:
      return std::make_unique<Unary>(backend, spec, seed, EltwiseSpec{.alg = algorithm::eltwise_clip_v2, .beta = 6.0f});
    case OpKind::kHardSwish:
      return std::make_unique<Unary>(backend, spec, seed, EltwiseSpec{.alg = algorithm::eltwise_hardswish});
    case OpKind::kHardSigmoid:
      return std::make_unique<HardSigmoid>(backend, spec, seed);
    case OpKind::kSigmoid:
      return std::make_unique<Unary>(backend, spec, seed,
                                     EltwiseSpec{.alg = algorithm::eltwise_logistic_use_dst_for_bwd, .use_dst = true});
    case OpKind::kTanh:
      return std::make_unique<Unary>(backend, spec, seed,
                                     EltwiseSpec{.alg = algorithm::eltwise_tanh_use_dst_for_bwd, .use_dst = true});
    case OpKind::kGelu:
      return std::make_unique<Unary>(backend, spec, seed, EltwiseSpec{.alg = algorithm::eltwise_gelu_erf});
    case OpKind::kSilu:
      return std::make_unique<Unary>(backend, spec, seed, EltwiseSpec{.alg = algorithm::eltwise_swish, .alpha = 1.0f});
    case OpKind::kSqrt:
      return std::make_unique<Unary>(
          backend, spec, seed,
          EltwiseSpec{.alg = algorithm::eltwise_sqrt_use_dst_for_bwd, .use_dst = true, .positive_input = true});
    case OpKind::kPow:
      return std::make_unique<Unary>(backend, spec, seed,
                                     EltwiseSpec{.alg = algorithm::eltwise_pow,
                                                 .alpha = 1.0f,
                                                 .beta = static_cast<float>(spec.attributes.at("exponent"))});
    case OpKind::kAffine:
      return std::make_unique<Unary>(backend, spec, seed,
                                     EltwiseSpec{.alg = algorithm::eltwise_linear,
                                                 .alpha = Micro(spec, "alpha_e6", 1.0f),
                                                 .beta = Micro(spec, "beta_e6", 0.0f)});
    case OpKind::kMul:
      return std::make_unique<Binary>(backend, spec, seed, algorithm::binary_mul);
    case OpKind::kSub:
      return std::make_unique<Binary>(backend, spec, seed, algorithm::binary_sub);
    case OpKind::kDiv:
      return std::make_unique<Binary>(backend, spec, seed, algorithm::binary_div);
    case OpKind::kAddBroadcast:
      if (spec.attributes.count("relative_position_window") || spec.attributes.count("shifted_window_side")) {
        return std::make_unique<WindowBias>(backend, spec, seed);
      }
      return std::make_unique<Binary>(backend, spec, seed, algorithm::binary_add);
    case OpKind::kMatMul:
      return std::make_unique<MatMul>(backend, spec, seed);
    case OpKind::kSoftmax:
      return std::make_unique<Softmax>(backend, spec, seed);
    case OpKind::kLayerNorm:
      return std::make_unique<LayerNorm>(backend, spec, seed);
    case OpKind::kReduceMean:
      return std::make_unique<ReduceMean>(backend, spec, seed);
    case OpKind::kConcat:
      return std::make_unique<Concat>(backend, spec, seed);
    case OpKind::kTranspose:
      return std::make_unique<Transpose>(backend, spec, seed);
    case OpKind::kSlice:
      return std::make_unique<Slice>(backend, spec, seed);
    case OpKind::kPad:
      return std::make_unique<Pad>(backend, spec, seed);
    case OpKind::kEmbedding:
      return std::make_unique<Embedding>(backend, spec, seed);
    default:
      return nullptr;
  }
}

}  // namespace edgecost::kernels::detail
