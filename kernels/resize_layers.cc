// Upsampling of NCHW's spatial axes on oneDNN's resampling primitives: nearest (for integer
// factors oneDNN's rounding picks the same source as PyTorch's floor) and bilinear (half-pixel
// centres, edges clamped: F.interpolate's align_corners=False). The backward pass spreads dY back
// over the inputs each output read, with the same weights.
#include "kernels/families.h"
#include "kernels/step_layer.h"

namespace edgecost::kernels::detail {
namespace {

class Resize : public StepLayer {
 public:
  Resize(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const Dims& x = spec.input_shapes.at(0);
    const Dims& y = spec.output_shape;
    if (x.size() != 4 || y.size() != 4 || x[0] != y[0] || x[1] != y[1]) {
      throw std::logic_error("a resize keeps NCHW's batch and channels");
    }
    const algorithm alg =
        spec.attributes.at("linear") != 0 ? algorithm::resampling_linear : algorithm::resampling_nearest;
    const memory::desc x_md = Plain(x), y_md = Plain(y);
    dnnl::resampling_forward::primitive_desc fwd(
        dnnl::resampling_forward::desc(prop_kind::forward_training, alg, x_md, y_md), attr_, backend_.engine());
    Add(forward_, fwd, {{DNNL_ARG_SRC, Mem(inputs_[0])}, {DNNL_ARG_DST, Mem(output_)}});
    dnnl::resampling_backward::primitive_desc bwd(dnnl::resampling_backward::desc(alg, x_md, y_md), attr_,
                                                  backend_.engine(), fwd);
    Add(backward_input_, bwd, {{DNNL_ARG_DIFF_DST, Mem(grad_output_)}, {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])}});
    Forward();
  }
};

}  // namespace

std::unique_ptr<Layer> MakeResizeLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed) {
  if (kind != graph::OpKind::kResize) return nullptr;
  return std::make_unique<Resize>(backend, spec, seed);
}

}  // namespace edgecost::kernels::detail
