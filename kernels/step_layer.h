// Machinery shared by every kernel family: tensors that own their storage, the
// Backend's shared scratchpad, and each pass (forward, dX, dW, db) as a list of
// oneDNN primitives. Internal to kernels/.
#pragma once

#include <algorithm>
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
#include "graph/layouts.h"
#include "kernels/layers.h"

// Our own loops (batch norm's passes, dropout, the depthwise weight gradient) compiled three times on
// x86-64: for the baseline (SSE2), x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512), chosen when the
// program loads by what the CPU has. Other CPUs' baselines (aarch64's NEON) need no second copy. The
// kernels library compiles with -ffp-contract=off, so every copy rounds each operation alike and a
// loop that recomputes a forward value (a fused activation's mask) gets the forward's bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define EDGECOST_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EDGECOST_VECTOR_CLONES
#endif

namespace edgecost::kernels::detail {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

inline int64_t Elements(const Dims& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

// Dense row-major layout, the layout frameworks hand to oneDNN.
inline memory::desc Plain(const Dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return memory::desc(memory::dims(dims.begin(), dims.end()), memory::data_type::f32, strides);
}

// How a tensor's elements lie: plain, or a feature map channels-last (NHWC).
inline memory::desc Desc(const Tensor& t) {
  if (!t.channels_last) return Plain(t.dims);
  return memory::desc(memory::dims(t.dims.begin(), t.dims.end()), memory::data_type::f32, memory::format_tag::nhwc);
}

// The last two axes of a row-major 3-D tensor, swapped without copying.
inline memory::desc Transposed(const Dims& dims) {
  const int64_t b = dims[0], rows = dims[1], cols = dims[2];
  return memory::desc({b, cols, rows}, memory::data_type::f32, {rows * cols, 1, cols});
}

// One primitive and its arguments, executed in order with the others of its pass.
struct Step {
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
  void* scratchpad = nullptr;  // the Backend's buffer the step's DNNL_ARG_SCRATCHPAD points at; null: none
  // A kernel of our own instead of the primitive, where oneDNN has only a slow one: it reads its
  // tensors from `args` (so that Bind rebinds them as any step's).
  std::function<void(const std::unordered_map<int, memory>&)> run;
  // `args` as oneDNN's C API takes them, made once: the C++ execute builds this list on every call.
  // The handles stay valid when a memory is rebound (set_data_handle changes the handle's data).
  std::vector<dnnl_exec_arg_t> exec_args;
};

// Common machinery: owned tensors with stable addresses, the Backend's shared
// scratchpad (each layer knows its largest need), and the four passes as step lists.
class StepLayer : public Layer {
 public:
  StepLayer(Backend& backend, uint32_t seed) : backend_(backend), rng_(seed) {
    attr_.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  }

  void Forward() override { Run(forward_); }
  // The inference pass where a layer has one (batch norm, dropout), else the forward pass.
  void ForwardInference() override { Run(inference_.empty() ? forward_ : inference_); }
  void BackwardInput() override { Run(backward_input_); }
  void BackwardWeights() override { Run(backward_weights_); }
  void BackwardBias() override { Run(backward_bias_); }
  bool HasParameters() const override { return !params_.empty(); }

  void Bind(Tensor& t, float* data) override {
    if (bindings_.empty()) FindBindings();
    Binding& binding = bindings_[&t];
    // A step's arena lays a node out where the last step did: most binds change nothing.
    if (binding.data == data) return;
    binding.data = data;
    for (const auto& [mem, offset] : binding.mems) mem->set_data_handle(data + offset);
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
    for (Tensor* t : grad_params_) tensors.push_back(t);  // in the arena with updates in the backward pass
    for (auto* pass : {&forward_, &backward_input_, &backward_weights_, &backward_bias_, &inference_}) {
      for (Step& step : *pass) {
        for (auto& [arg, mem] : step.args) {
          // The scratchpad and staged copies are the Backend's buffer, never a tensor's (a stale
          // address of a buffer since grown could lie in a tensor allocated later).
          if (arg == DNNL_ARG_SCRATCHPAD || IsStaged(mem)) continue;
          const auto* handle = static_cast<const float*>(mem.get_data_handle());
          for (Tensor* t : tensors) {
            if (!t->data.empty() && handle >= t->data.data() && handle < t->data.data() + t->data.size()) {
              bindings_[t].mems.push_back({&mem, handle - t->data.data()});
            }
          }
        }
      }
    }
  }

  void Run(std::vector<Step>& steps) {
    // Staged copies live in the shared scratchpad too, and move with it.
    if (!staged_.empty() && staged_base_ != backend_.scratchpad()) {
      staged_base_ = backend_.scratchpad();
      for (auto& [mem, offset] : staged_) mem.set_data_handle(static_cast<char*>(staged_base_) + offset);
    }
    for (Step& step : steps) {
      // The shared scratchpad may have grown (and moved) since the step was built.
      if (step.scratchpad && step.scratchpad != backend_.scratchpad()) {
        step.scratchpad = backend_.scratchpad();
        step.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(step.scratchpad);
      }
      if (step.run) {
        backend_.stream().wait();  // what the primitives before it write
        step.run(step.args);
      } else {
        dnnl::error::wrap_c_api(dnnl_primitive_execute(step.primitive.get(), backend_.stream().get(),
                                                       static_cast<int>(step.exec_args.size()), step.exec_args.data()),
                                "could not execute a primitive");
      }
    }
    backend_.stream().wait();
  }

  // Memory over a tensor (or a slice of it starting at `offset` elements).
  memory Mem(Tensor& t, const memory::desc& md, int64_t offset = 0) {
    return memory(md, backend_.engine(), t.data.data() + offset);
  }
  memory Mem(Tensor& t) { return Mem(t, Desc(t)); }

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
  // The inputs and the output of a layer whose kernels take channels-last feature maps
  // (graph/op_kinds.def: LAYOUT), each in the layout the spec's attributes say; a gradient lies as
  // its tensor does.
  void InitTensors(const LayerSpec& spec) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const auto attribute = [&](const char* name) {
      const auto it = spec.attributes.find(name);
      return it == spec.attributes.end() ? int64_t{0} : it->second;
    };
    const int64_t inputs = attribute(graph::kChannelsLastInputsAttribute);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      inputs_[i].channels_last = grad_inputs_[i].channels_last = ((inputs >> i) & 1) != 0;
    }
    output_.channels_last = grad_output_.channels_last = attribute(graph::kChannelsLastOutputAttribute) != 0;
  }
  // sums (C) = the sum of t (N, C, ...) over every axis but the channels' (a bias's gradient).
  void AddChannelSums(std::vector<Step>& pass, Tensor& t, Tensor& sums) {
    const Dims& d = t.dims;
    if (t.channels_last) {  // (N H W, C) rows
      AddReduceSum(pass, Mem(t, Plain({d[0] * d[2] * d[3], d[1]})), Mem(sums, Plain({1, d[1]})));
      return;
    }
    Dims per_channel(d.size(), 1);  // (1, C, 1, ...) at t's rank: 2-D tensors too
    per_channel[1] = d[1];
    AddReduceSum(pass, Mem(t), Mem(sums, Plain(per_channel)));
  }
  // A parameter and its gradient; a sparse tensor update's gradient covers the first `grad_rows`
  // rows (output channels) alone.
  Tensor& Param(Dims dims, float stddev, int64_t grad_rows = 0) {
    Tensor& p = Own(dims);
    Normal(p, stddev);
    params_.push_back(&p);
    if (grad_rows > 0) dims[0] = grad_rows;
    grad_params_.push_back(&Own(dims));
    return p;
  }

  // Adds a step to `pass`, growing the Backend's shared scratchpad to what the primitive needs.
  template <typename PrimitiveDesc>
  void Add(std::vector<Step>& pass, const PrimitiveDesc& pd, std::unordered_map<int, memory> args) {
    const memory::desc scratch = pd.scratchpad_desc();
    void* scratchpad = nullptr;
    if (!staged_.empty() && scratch.get_size() > staging_offset_) {
      throw std::logic_error("a primitive's scratchpad overlaps the layer's staged copies");
    }
    if (scratch.get_size() > 0) {
      backend_.ReserveScratchpad(scratch.get_size());
      scratchpad = backend_.scratchpad();
      args[DNNL_ARG_SCRATCHPAD] = memory(scratch, backend_.engine(), scratchpad);
      scratchpad_bytes_ = std::max<uint64_t>(scratchpad_bytes_, scratch.get_size());
    }
    Step& step = pass.emplace_back(Step{dnnl::primitive(pd.get()), std::move(args), scratchpad});
    for (const auto& [arg, mem] : step.args) step.exec_args.push_back({arg, mem.get()});
  }

  // Staging: copies of tensors in the layout a primitive prefers (oneDNN's blocked layouts, where
  // its JIT kernels run; plain NCHW falls back to GEMM-based convolution), made by reorders at the
  // edges of a pass and read only inside it. They live in the Backend's shared scratchpad after
  // every primitive scratchpad of the layer (StartStaging's `after_bytes`), so they cost no memory
  // of their own beyond the scratchpad the memory model already counts. Each pass starts at the
  // same offset: passes run one at a time.
  void StartStaging(uint64_t after_bytes) {
    staging_offset_ = std::max(staging_offset_, (after_bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign);
    staging_used_ = 0;
  }
  memory Staged(const memory::desc& md) {
    const uint64_t offset = staging_offset_ + staging_used_;
    staging_used_ += (md.get_size() + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
    backend_.ReserveScratchpad(staging_offset_ + staging_used_);
    scratchpad_bytes_ = std::max<uint64_t>(scratchpad_bytes_, staging_offset_ + staging_used_);
    staged_base_ = backend_.scratchpad();
    for (auto& [mem, at] : staged_) mem.set_data_handle(static_cast<char*>(staged_base_) + at);
    memory m(md, backend_.engine(), static_cast<char*>(staged_base_) + offset);
    staged_.push_back({m, offset});
    return m;
  }
  // The staged copy `staged` seen through `md`, another description of its bytes (moved with it).
  memory StagedView(const memory& staged, const memory::desc& md) {
    for (const auto& [mem, offset] : staged_) {
      if (mem.get() != staged.get()) continue;
      const uint64_t at = offset;
      memory view(md, backend_.engine(), mem.get_data_handle());
      staged_.push_back({view, at});
      return view;
    }
    throw std::logic_error("StagedView of a memory that is not staged");
  }
  bool IsStaged(const memory& m) const {
    for (const auto& [mem, offset] : staged_) {
      if (mem.get() == m.get()) return true;
    }
    return false;
  }
  // `t` (plain) as a primitive wants it: itself, or a staged copy a reorder in `pass` fills.
  memory StagedIn(std::vector<Step>& pass, Tensor& t, const memory::desc& plain, const memory::desc& wanted) {
    if (wanted == plain) return Mem(t, plain);
    memory staged = Staged(wanted);
    AddReorder(pass, Mem(t, plain), staged);
    return staged;
  }
  // Where a primitive writes `t`: itself, or a staged copy; then CopyOut adds the reorder back.
  memory StagedOut(Tensor& t, const memory::desc& plain, const memory::desc& wanted) {
    return wanted == plain ? Mem(t, plain) : Staged(wanted);
  }
  void CopyOut(std::vector<Step>& pass, memory staged, Tensor& t, const memory::desc& plain) {
    if (IsStaged(staged)) AddReorder(pass, staged, Mem(t, plain));
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
    AddReduction(pass, algorithm::reduction_sum, src, dst);
  }
  // dst = sum or mean (`alg`) of src over the axes where dst has extent 1, both plain. oneDNN 2.6 has
  // JIT kernels for some reductions (trailing axes); for the others (a middle axis: the batch of a
  // bias gradient on 1x1 maps, a transformer's mean over its tokens) it runs its reference kernel,
  // 1 ms for 64K values, and ReduceRows runs instead.
  void AddReduction(std::vector<Step>& pass, algorithm alg, memory src, memory dst) {
    dnnl::reduction::primitive_desc pd(dnnl::reduction::desc(alg, src.get_desc(), dst.get_desc(), 0.f, 0.f), attr_,
                                       backend_.engine());
    if (std::string(pd.impl_info_str()).find("ref") == std::string::npos) {
      Add(pass, pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
      return;
    }
    const memory::dims in = src.get_desc().dims(), out = dst.get_desc().dims();
    const bool mean = alg == algorithm::reduction_mean;
    pass.push_back({dnnl::primitive(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, nullptr,
                    [in, out, mean](const std::unordered_map<int, memory>& a) {
                      ReduceRows(in, out, static_cast<const float*>(a.at(DNNL_ARG_SRC).get_data_handle()),
                                 static_cast<float*>(a.at(DNNL_ARG_DST).get_data_handle()), mean);
                    }});
  }
  // The reduction of AddReduction, one row of src's last axis at a time, in src's order (the same
  // sums whatever the thread count): a kept last axis adds the row into dst's, a reduced one sums it.
  static void ReduceRows(const memory::dims& in, const memory::dims& out, const float* src, float* dst, bool mean) {
    const size_t rank = in.size();
    std::vector<int64_t> out_stride(rank, 0);  // 0 along reduced axes
    int64_t out_elements = 1, reduced = 1;
    for (size_t i = rank; i-- > 0;) {
      if (out[i] == in[i]) {
        out_stride[i] = out_elements;
        out_elements *= out[i];
      } else {
        reduced *= in[i];
      }
    }
    std::fill(dst, dst + out_elements, 0.0f);
    const int64_t inner = in[rank - 1], rows = Elements(Dims(in.begin(), in.end())) / inner;
    const bool inner_kept = out[rank - 1] == inner;
    std::vector<int64_t> index(rank, 0);
    for (int64_t row = 0; row < rows; ++row) {
      int64_t at = 0;
      for (size_t i = 0; i + 1 < rank; ++i) at += index[i] * out_stride[i];
      const float* values = src + row * inner;
      if (inner_kept) {
        float* sums = dst + at;
#pragma omp simd
        for (int64_t k = 0; k < inner; ++k) sums[k] += values[k];
      } else {
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t k = 0; k < inner; ++k) sum += values[k];
        dst[at] += sum;
      }
      for (size_t i = rank - 1; i-- > 0;) {  // the next row's index
        if (++index[i] < in[i]) break;
        index[i] = 0;
      }
    }
    if (mean) {
      const float scale = 1.0f / static_cast<float>(reduced);
      for (int64_t k = 0; k < out_elements; ++k) dst[k] *= scale;
    }
  }

  Backend& backend_;
  std::mt19937 rng_;
  dnnl::primitive_attr attr_;
  std::deque<Tensor> owned_;
  std::vector<Step> forward_, backward_input_, backward_weights_, backward_bias_;
  std::vector<Step> inference_;  // empty: inference runs forward_
  // Per bindable tensor, the step arguments over it (memory, offset in elements) and where they
  // were last bound (null: the tensor's own storage).
  struct Binding {
    const float* data = nullptr;
    std::vector<std::pair<memory*, ptrdiff_t>> mems;
  };
  std::unordered_map<const Tensor*, Binding> bindings_;

 private:
  static constexpr uint64_t kStagingAlign = 64;  // a cache line, as oneDNN aligns its buffers
  std::vector<std::pair<memory, uint64_t>> staged_;  // staged copies and their byte offsets in the scratchpad
  void* staged_base_ = nullptr;                      // the scratchpad address they point into
  uint64_t staging_offset_ = 0, staging_used_ = 0;
};

// ---- Kernels of the op set of imported models -------------------------------------------------

// `dims` with leading ones up to `rank` axes (NumPy broadcasting aligns shapes on the right).
inline Dims Padded(const Dims& dims, size_t rank) {
  Dims out(rank - dims.size(), 1);
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

// A row-major tensor with its last two axes swapped, without copying.
inline memory::desc TransposedLast(const Dims& dims) {
  const size_t r = dims.size();
  memory::dims strides(r, 1);
  for (int i = static_cast<int>(r) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  memory::dims d(dims.begin(), dims.end());
  std::swap(d[r - 1], d[r - 2]);
  std::swap(strides[r - 1], strides[r - 2]);
  return memory::desc(d, memory::data_type::f32, strides);
}

inline std::vector<int64_t> RowMajorStrides(const Dims& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

// A value attribute stored times 10^6 (graph::OpKind::kAffine).
inline float Micro(const LayerSpec& spec, const std::string& name, float fallback) {
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

  // A full-size copy of `t` broadcast to `full` (oneDNN broadcasts only the second operand), laid
  // out as the output.
  memory Expand(std::vector<Step>& pass, Tensor& t, const Dims& full) {
    if (t.dims == full) return Mem(t);
    Tensor& zeros = Own(full);
    Tensor& out = Own(full);
    zeros.channels_last = out.channels_last = output_.channels_last;
    AddBinary(pass, algorithm::binary_add, Mem(zeros), Mem(t, Plain(Padded(t.dims, full.size()))), Mem(out));
    return Mem(out);
  }

  // Positive values away from zero, for divisors and square roots.
  static void Positive(Tensor& t) {
    for (float& v : t.data) v = std::fabs(v) + 0.5f;
  }
};

// An elementwise op of one input: one oneDNN eltwise algorithm, its derivative taken at X or

}  // namespace edgecost::kernels::detail
