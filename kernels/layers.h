// Real kernels for every op kind, forward and backward, on oneDNN.
//
// A Layer owns the tensors one op touches: its inputs X, output Y, parameters,
// the forward intermediates its backward needs (batch statistics, pooling
// workspace, softmax probabilities), the incoming gradient dY and
// the gradients it produces. The profiler times one method per training-graph
// node: Forward, BackwardInput (dX), BackwardWeights (dW and db) or
// BackwardBias (db only). Tests compare the backward methods with numerical
// gradients of Forward, so that backward nodes compute the real thing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "base/status.h"

namespace edgecost::kernels {

// The kernels' revision, part of a device's fingerprint: costs measured on other kernels are
// stale (after issue 32's faster depthwise and batch-norm passes, the old costs predicted
// resnet18_cifar's step 43% too slow). Raise it when a kernel's time or memory changes.
inline constexpr uint32_t kKernelsRevision = 6;

using Dims = std::vector<int64_t>;

struct Tensor {
  Dims dims;
  std::vector<float> data;
  // A 4-D tensor's dims are NCHW's; its elements lie channels-last (NHWC) when set (graph/layouts.h).
  bool channels_last = false;

  explicit Tensor(Dims d = {});
  int64_t size() const { return static_cast<int64_t>(data.size()); }
  uint64_t bytes() const { return data.size() * sizeof(float); }
};

// What a layer is: the forward op's kind and attributes, and its shapes.
struct LayerSpec {
  std::string kind;  // graph::OpKindName, e.g. "conv2d"
  std::map<std::string, int64_t> attributes;
  std::vector<Dims> input_shapes;
  Dims output_shape;
};

class Layer {
 public:
  virtual ~Layer() = default;

  virtual void Forward() = 0;
  // dX for every input from dY. Ops without an input gradient do nothing.
  virtual void BackwardInput() = 0;
  virtual void BackwardWeights() {}
  virtual void BackwardBias() {}
  virtual bool HasParameters() const { return false; }
  // The forward pass in inference mode (PyTorch's eval()): batch norm normalizes with its running
  // statistics, dropout passes X through. Other layers run Forward.
  virtual void ForwardInference() = 0;
  // Batch norm: folds the statistics of the last Forward's batch into the running ones, as PyTorch's
  // training mode does (momentum 0.1, unbiased variance). The executor calls it once per step,
  // after a node's first forward execution, so that a recomputation does not count a batch twice.
  virtual void UpdateRunningStats() {}
  // Batch norm's running mean and running variance (one value per channel); empty for other layers.
  virtual std::vector<Tensor*> running_stats() { return {}; }
  // Batch norm's count of the batches its running statistics have seen (num_batches_tracked); null otherwise.
  virtual int64_t* batches_tracked() { return nullptr; }

  std::vector<Tensor>& inputs() { return inputs_; }
  Tensor& output() { return output_; }
  Tensor& grad_output() { return grad_output_; }
  std::vector<Tensor>& grad_inputs() { return grad_inputs_; }
  // Parameters and their gradients, in the same order (weights, then bias).
  std::vector<Tensor*>& params() { return params_; }
  std::vector<Tensor*>& grad_params() { return grad_params_; }

  // The largest scratchpad one of the layer's primitives needs. The buffer is the Backend's,
  // shared by every layer built on it (Backend::scratchpad_bytes), so it is not in owned_bytes.
  uint64_t scratchpad_bytes() const { return scratchpad_bytes_; }
  uint64_t workspace_bytes() const { return workspace_bytes_; }
  // Bytes of the buffers the layer allocated for itself: parameters and their gradients,
  // workspaces and intermediates (statistics, masks, temporaries of a backward pass).
  uint64_t owned_bytes() const { return owned_bytes_; }

  // Runs the kernels on `data` instead of `t`'s own storage, which is released. `t` is one
  // of inputs(), output(), grad_output() or grad_inputs(); `data` holds at least as many
  // elements as t.dims and stays valid until the next Bind of `t`. The training executor
  // binds layers to activations that live in its arena and are shared between layers.
  virtual void Bind(Tensor& t, float* data) = 0;
  // Gives up `t`'s own storage for good: `t` is then always bound before the layer runs
  // (the executor's activations live in its arena, and a layer's own copies would
  // double the process's memory until the first step).
  virtual void Release(Tensor& t) = 0;
  // The training step the next passes belong to: a layer with randomness (dropout) draws it anew
  // for each step, and keeps it for every pass of the same step (recomputations included).
  virtual void SetTrainingStep(uint64_t step) { (void)step; }
  // Class labels of a loss layer, one per row of its logits; other layers refuse.
  virtual Status SetLabels(const std::vector<int32_t>& labels);

 protected:
  std::vector<Tensor> inputs_;
  Tensor output_;
  Tensor grad_output_;
  std::vector<Tensor> grad_inputs_;
  std::vector<Tensor*> params_;
  std::vector<Tensor*> grad_params_;
  uint64_t scratchpad_bytes_ = 0;
  uint64_t workspace_bytes_ = 0;
  uint64_t owned_bytes_ = 0;
};

// The OpenMP team for a scope, restored after it. oneDNN sizes its parallel regions (and some
// kernels their blocking, when a primitive is created) by it, so a layer is built and run on the
// same team: the profiler's NodeWork::team_threads, which the executor follows.
class TeamScope {
 public:
  explicit TeamScope(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads < 1 ? 1 : threads); }
  ~TeamScope() { omp_set_num_threads(saved_); }
  TeamScope(const TeamScope&) = delete;
  TeamScope& operator=(const TeamScope&) = delete;

 private:
  int saved_;
};

// The oneDNN engine and stream every layer runs on (CPU), and the one scratchpad
// all their primitives share. A Backend's primitives run one at a time on the
// thread that owns it (each uses its OpenMP team inside), so a single buffer sized
// to the largest need serves them all; two threads that run kernels at once each
// need their own Backend.
class Backend {
 public:
  Backend();
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }
  // Grows the shared scratchpad to at least `bytes`. Its address changes when it grows:
  // a step binds scratchpad() again when it runs, never the address it was built with.
  void ReserveScratchpad(uint64_t bytes);
  void* scratchpad() { return scratchpad_.get(); }
  uint64_t scratchpad_bytes() const { return scratchpad_bytes_; }
  // The instruction set oneDNN dispatches to on this CPU, e.g. "avx2".
  static std::string Isa();

 private:
  struct Free {
    void operator()(void* p) const;
  };
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unique_ptr<void, Free> scratchpad_;
  uint64_t scratchpad_bytes_ = 0;
};

// Builds a layer with tensors filled with realistic values (seeded). An op kind
// without a kernel is an Unimplemented error naming it.
Result<std::unique_ptr<Layer>> MakeLayer(Backend& backend, const LayerSpec& spec, uint32_t seed = 1);

// Whether the weight gradient of the layer `spec` describes gains from `threads` threads. A 1x1
// ungrouped convolution's is one GEMM over NCHW (see PrefersBlocked) that oneDNN splits by the
// minibatch, summing a weight-sized buffer per thread: on maps of a few pixels the sum costs more
// than the split saves. Other layers' weight gradients, and a 1x1 convolution's over a batch of
// small maps or over channels-last maps (one matmul each), split their output.
bool WeightGradientRepaysTeam(const LayerSpec& spec, int threads);

// The sum of k gradients of the same shape (grad_sum nodes): inputs() are the parts.
Result<std::unique_ptr<Layer>> MakeGradSum(Backend& backend, const Dims& shape, int parts, uint32_t seed = 1);

}  // namespace edgecost::kernels
