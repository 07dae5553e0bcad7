#include "kernels/layers.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "graph/forward_graph.h"
#include "graph/layouts.h"
#include "kernels/families.h"
#include "kernels/step_layer.h"

namespace edgecost::kernels {

using detail::Elements;

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

namespace {

// A spec's channels-last attributes (graph/layouts.h) name 4-D tensors of a kind whose kernels take
// them, in one layout for every tensor where the kind shares one.
Status CheckChannelsLast(graph::OpKind kind, const LayerSpec& spec) {
  const auto attribute = [&](const char* name) {
    const auto it = spec.attributes.find(name);
    return it == spec.attributes.end() ? int64_t{0} : it->second;
  };
  const int64_t inputs = attribute(graph::kChannelsLastInputsAttribute);
  const int64_t output = attribute(graph::kChannelsLastOutputAttribute);
  if (inputs == 0 && output == 0) return Status::Ok();
  const auto refuse = [&](const std::string& why) {
    return InvalidArgument("op kind '" + spec.kind + "' with channels-last tensors: " + why);
  };
  if (!graph::TakesChannelsLast(kind, spec.input_shapes, spec.output_shape)) {
    return refuse("its kernels take NCHW alone at these shapes");
  }
  const auto layouts = graph::ActivationLayoutsOf(kind);
  if (inputs < 0 || inputs >= (int64_t{1} << spec.input_shapes.size()) || (output != 0 && output != 1)) {
    return refuse("the attributes name tensors it does not have");
  }
  if (output && spec.output_shape.size() != 4) return refuse("its output is not 4-D");
  for (size_t i = 0; i < spec.input_shapes.size(); ++i) {
    const bool input = (inputs >> i) & 1;
    if (input && spec.input_shapes[i].size() != 4) return refuse("input " + std::to_string(i) + " is not 4-D");
    if (layouts == graph::ActivationLayouts::kShared && input != (output != 0)) {
      return refuse("its inputs and its output must lie alike");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Layer>> MakeLayer(Backend& backend, const LayerSpec& spec, uint32_t seed) {
  try {
    const Result<graph::OpKind> kind = graph::ParseOpKind(spec.kind);
    if (kind.ok()) EC_RETURN_IF_ERROR(CheckChannelsLast(*kind, spec));
    using graph::OpKind;
    switch (kind.ok() ? *kind
                      : OpKind::kInput) {  // no default: a new op kind does not compile until a family builds it
      case OpKind::kConv2d:
      case OpKind::kLinear:
      case OpKind::kLinearRelu:
      case OpKind::kQkvProjection:
      case OpKind::kBatchNorm2d:
      case OpKind::kBatchNormRelu:
      case OpKind::kBatchNormRelu6:
      case OpKind::kBatchNormSilu:
      case OpKind::kBatchNormHardSwish:
      case OpKind::kRelu:
      case OpKind::kMaxPool2d:
      case OpKind::kAvgPool2d:
      case OpKind::kFlatten:
      case OpKind::kReshape:
      case OpKind::kDropout:
      case OpKind::kAdd:
      case OpKind::kAttentionScores:
      case OpKind::kAttentionContext:
      case OpKind::kCrossEntropyLoss:
        return detail::MakeCoreLayer(*kind, backend, spec, seed);
      case OpKind::kRelu6:
      case OpKind::kHardSwish:
      case OpKind::kHardSigmoid:
      case OpKind::kSigmoid:
      case OpKind::kTanh:
      case OpKind::kGelu:
      case OpKind::kSilu:
      case OpKind::kSqrt:
      case OpKind::kPow:
      case OpKind::kAffine:
      case OpKind::kMul:
      case OpKind::kSub:
      case OpKind::kDiv:
      case OpKind::kAddBroadcast:
      case OpKind::kMatMul:
      case OpKind::kSoftmax:
      case OpKind::kLayerNorm:
      case OpKind::kReduceMean:
      case OpKind::kConcat:
      case OpKind::kTranspose:
      case OpKind::kSlice:
      case OpKind::kPad:
      case OpKind::kEmbedding:
        return detail::MakeOnnxLayer(*kind, backend, spec, seed);
      case OpKind::kLstm:
      case OpKind::kGru:
        return detail::MakeRecurrentLayer(*kind, backend, spec, seed);
      case OpKind::kCausalMask:
        return detail::MakeMaskLayer(*kind, backend, spec, seed);
      case OpKind::kResize:
        return detail::MakeResizeLayer(*kind, backend, spec, seed);
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
    return detail::MakeGradSumLayer(backend, shape, parts, seed);
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN refused a gradient sum: ") + e.what());
  }
}

}  // namespace edgecost::kernels
