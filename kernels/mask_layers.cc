// The causal (autoregressive) mask of decoder self-attention: y = fill where column > row over the
// last two axes, else x. Two broadcast binary steps, x * keep + fill (keep is 1 or 0, fill is the
// fill value or 0), give x itself where the mask keeps it and the fill value where it does not;
// the backward pass is dY * keep.
#include "kernels/families.h"
#include "kernels/step_layer.h"

namespace edgecost::kernels::detail {
namespace {

class CausalMask : public OpLayer {
 public:
  CausalMask(Backend& b, const LayerSpec& spec, uint32_t seed) : OpLayer(b, seed) {
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const Dims& x = spec.input_shapes.at(0);
    if (x.size() < 2 || x != spec.output_shape) throw std::logic_error("a causal mask keeps its input's shape");
    const auto bits = static_cast<uint32_t>(spec.attributes.at("fill_bits"));
    float fill = 0;
    std::memcpy(&fill, &bits, sizeof fill);
    const int64_t rows = x[x.size() - 2], cols = x[x.size() - 1];
    const Dims plane = Padded({rows, cols}, x.size());
    Tensor& keep = Own({rows, cols});
    Tensor& fills = Own({rows, cols});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        keep.data[r * cols + c] = c > r ? 0.0f : 1.0f;
        fills.data[r * cols + c] = c > r ? fill : 0.0f;
      }
    }
    AddBinary(forward_, algorithm::binary_mul, Mem(inputs_[0]), Mem(keep, Plain(plane)), Mem(output_));
    AddBinary(forward_, algorithm::binary_add, Mem(output_), Mem(fills, Plain(plane)), Mem(output_));
    AddBinary(backward_input_, algorithm::binary_mul, Mem(grad_output_), Mem(keep, Plain(plane)),
              Mem(grad_inputs_[0]));
    Forward();
  }
};

}  // namespace

std::unique_ptr<Layer> MakeMaskLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed) {
  if (kind != graph::OpKind::kCausalMask) return nullptr;
  return std::make_unique<CausalMask>(backend, spec, seed);
}

}  // namespace edgecost::kernels::detail
