// Recurrent layers: LSTM and GRU over a time-major sequence, one direction, zero initial state,
// forward and backward through time on oneDNN's RNN primitives.
//
// The parameters are torch.nn.LSTM's and torch.nn.GRU's own, in their layout and gate order
// (weight_ih (G*H, I), weight_hh (G*H, H), bias_ih (G*H), bias_hh (G*H); gates i f g o for the
// LSTM, r z n for the GRU), so that an ONNX import's parameters and PyTorch's state dict load as
// they are. Each pass packs them into oneDNN's layout (ldigo, gates i f c o and u r o), and the
// backward pass unpacks the gradients: oneDNN's LSTM adds the two biases into one, and its
// linear-before-reset GRU (PyTorch's GRU: the reset gate multiplies the recurrent product,
// bias included) keeps the candidate's two biases apart as a fourth bias gate.
//
// The forward pass leaves the gates in a workspace the backward pass reads (as max pooling leaves
// its argmax): the layer owns it, and a recomputed forward pass writes the same values again.
#include "kernels/families.h"
#include "kernels/step_layer.h"

namespace edgecost::kernels::detail {
namespace {

class Recurrent : public StepLayer {
 public:
  Recurrent(Backend& b, const LayerSpec& spec, uint32_t seed, bool lstm) : StepLayer(b, seed), lstm_(lstm) {
    if (spec.input_shapes.size() != 1 || spec.input_shapes[0].size() != 3) {
      throw std::logic_error("a recurrent layer reads one (time, batch, features) sequence");
    }
    time_ = spec.input_shapes[0][0];
    batch_ = spec.input_shapes[0][1];
    features_ = spec.input_shapes[0][2];
    hidden_ = spec.attributes.at("hidden");
    if (spec.output_shape != Dims{time_, 1, batch_, hidden_}) {
      throw std::logic_error("a recurrent layer's output is (time, 1, batch, hidden)");
    }
    gates_ = lstm_ ? 4 : 3;
    bias_gates_ = 4;  // the LSTM's four gates; the GRU's three and its candidate's recurrent bias
    InitInputs(spec.input_shapes);
    InitOutput(spec.output_shape);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hidden_));  // PyTorch's initial range
    Param({gates_ * hidden_, features_}, scale);
    Param({gates_ * hidden_, hidden_}, scale);
    Param({gates_ * hidden_}, scale);
    Param({gates_ * hidden_}, scale);

    using tag = memory::format_tag;
    const memory::desc x_md = Plain({time_, batch_, features_});
    const memory::desc y_md = Plain({time_, batch_, hidden_});
    const memory::desc none;
    // The LSTM's zero initial state, given explicitly: without one, oneDNN 2.6's LSTM backward gave
    // weight_hh gradients that central differences contradict (tests/kernels/layers_test.cc).
    const memory::desc state_md = Plain({1, 1, batch_, hidden_});
    zero_state_ = &Own({batch_ * hidden_});
    diff_state_ = &Own({4 * batch_ * hidden_});
    const memory::desc layer_any({1, 1, features_, gates_, hidden_}, memory::data_type::f32, tag::any);
    const memory::desc iter_any({1, 1, hidden_, gates_, hidden_}, memory::data_type::f32, tag::any);
    const memory::desc layer_plain({1, 1, features_, gates_, hidden_}, memory::data_type::f32, tag::ldigo);
    const memory::desc iter_plain({1, 1, hidden_, gates_, hidden_}, memory::data_type::f32, tag::ldigo);
    const memory::desc bias_md({1, 1, bias_gates_, hidden_}, memory::data_type::f32, tag::ldgo);
    const auto dir = dnnl::rnn_direction::unidirectional_left2right;
    Tensor& w_layer = Own({features_ * gates_ * hidden_});
    Tensor& w_iter = Own({hidden_ * gates_ * hidden_});
    Tensor& bias = Own({bias_gates_ * hidden_});
    Tensor& dw_layer = Own({features_ * gates_ * hidden_});
    Tensor& dw_iter = Own({hidden_ * gates_ * hidden_});
    Tensor& dbias = Own({bias_gates_ * hidden_});
    w_layer_ = w_layer.data.data();
    w_iter_ = w_iter.data.data();
    bias_ = bias.data.data();
    dw_layer_ = dw_layer.data.data();
    dw_iter_ = dw_iter.data.data();
    dbias_ = dbias.data.data();

    // Forward (training: it fills the workspace) and backward, each with its weights in the layout it chose.
    memory::desc fwd_layer, fwd_iter, bwd_layer, bwd_iter, bwd_dlayer, bwd_diter, workspace;
    std::function<void(memory, memory, memory)> add_forward, add_backward;
    if (lstm_) {
      dnnl::lstm_forward::primitive_desc fwd(
          dnnl::lstm_forward::desc(prop_kind::forward_training, dir, x_md, state_md, state_md, layer_any, iter_any,
                                   bias_md, y_md, none, none),
          attr_, backend_.engine());
      dnnl::lstm_backward::primitive_desc bwd(
          dnnl::lstm_backward::desc(prop_kind::backward, dir, x_md, state_md, state_md, layer_any, iter_any, bias_md,
                                    y_md, none, none, x_md, state_md, state_md, layer_any, iter_any, bias_md, y_md,
                                    none, none),
          attr_, backend_.engine(), fwd);
      fwd_layer = fwd.weights_layer_desc();
      fwd_iter = fwd.weights_iter_desc();
      bwd_layer = bwd.weights_layer_desc();
      bwd_iter = bwd.weights_iter_desc();
      bwd_dlayer = bwd.diff_weights_layer_desc();
      bwd_diter = bwd.diff_weights_iter_desc();
      workspace = fwd.workspace_desc();
      add_forward = [this, fwd, state_md](memory wl, memory wi, memory ws) {
        Add(forward_, fwd, {{DNNL_ARG_SRC_LAYER, Mem(inputs_[0], Plain({time_, batch_, features_}))},
                            {DNNL_ARG_SRC_ITER, Mem(*zero_state_, state_md)},
                            {DNNL_ARG_SRC_ITER_C, Mem(*zero_state_, state_md)},
                            {DNNL_ARG_WEIGHTS_LAYER, wl}, {DNNL_ARG_WEIGHTS_ITER, wi}, {DNNL_ARG_BIAS, bias_mem_},
                            {DNNL_ARG_DST_LAYER, Mem(output_, Plain({time_, batch_, hidden_}))},
                            {DNNL_ARG_WORKSPACE, ws}});
      };
      add_backward = [this, bwd, state_md](memory wl, memory wi, memory ws) {
        auto args = BackwardArgs(wl, wi, ws);
        args[DNNL_ARG_SRC_ITER] = Mem(*zero_state_, state_md);
        args[DNNL_ARG_SRC_ITER_C] = Mem(*zero_state_, state_md);
        args[DNNL_ARG_DIFF_SRC_ITER] = Mem(*diff_state_, state_md);
        args[DNNL_ARG_DIFF_SRC_ITER_C] = Mem(*diff_state_, state_md, batch_ * hidden_);
        for (auto* pass : {&backward_input_, &backward_weights_}) Add(*pass, bwd, args);
      };
    } else {
      dnnl::lbr_gru_forward::primitive_desc fwd(
          dnnl::lbr_gru_forward::desc(prop_kind::forward_training, dir, x_md, none, layer_any, iter_any, bias_md, y_md,
                                      none),
          attr_, backend_.engine());
      dnnl::lbr_gru_backward::primitive_desc bwd(
          dnnl::lbr_gru_backward::desc(prop_kind::backward, dir, x_md, none, layer_any, iter_any, bias_md, y_md, none,
                                       x_md, none, layer_any, iter_any, bias_md, y_md, none),
          attr_, backend_.engine(), fwd);
      fwd_layer = fwd.weights_layer_desc();
      fwd_iter = fwd.weights_iter_desc();
      bwd_layer = bwd.weights_layer_desc();
      bwd_iter = bwd.weights_iter_desc();
      bwd_dlayer = bwd.diff_weights_layer_desc();
      bwd_diter = bwd.diff_weights_iter_desc();
      workspace = fwd.workspace_desc();
      add_forward = [this, fwd](memory wl, memory wi, memory ws) {
        Add(forward_, fwd, {{DNNL_ARG_SRC_LAYER, Mem(inputs_[0], Plain({time_, batch_, features_}))},
                            {DNNL_ARG_WEIGHTS_LAYER, wl}, {DNNL_ARG_WEIGHTS_ITER, wi}, {DNNL_ARG_BIAS, bias_mem_},
                            {DNNL_ARG_DST_LAYER, Mem(output_, Plain({time_, batch_, hidden_}))},
                            {DNNL_ARG_WORKSPACE, ws}});
      };
      add_backward = [this, bwd](memory wl, memory wi, memory ws) {
        for (auto* pass : {&backward_input_, &backward_weights_}) {
          Add(*pass, bwd, BackwardArgs(wl, wi, ws));
        }
      };
    }
    const dnnl::engine& engine = backend_.engine();
    const memory wl_plain(layer_plain, engine, w_layer_), wi_plain(iter_plain, engine, w_iter_);
    bias_mem_ = memory(bias_md, engine, bias_);
    dbias_mem_ = memory(bias_md, engine, dbias_);
    const memory ws = Workspace(workspace);
    // Weights in the primitive's own layout (a reorder of the packed plain ones when it differs).
    auto chosen = [&](std::vector<Step>& pass, const memory& plain, const memory::desc& md) {
      if (md == plain.get_desc()) return plain;
      Tensor& buffer = Own({static_cast<int64_t>((md.get_size() + sizeof(float) - 1) / sizeof(float))});
      memory m(md, engine, buffer.data.data());
      AddReorder(pass, plain, m);
      return m;
    };
    const memory fl = chosen(forward_, wl_plain, fwd_layer), fi = chosen(forward_, wi_plain, fwd_iter);
    add_forward(fl, fi, ws);
    std::vector<Step> prepare;  // reorders shared by both backward passes
    const memory bl = chosen(prepare, wl_plain, bwd_layer), bi = chosen(prepare, wi_plain, bwd_iter);
    auto diff = [&](const memory::desc& md) {
      Tensor& buffer = Own({static_cast<int64_t>((md.get_size() + sizeof(float) - 1) / sizeof(float))});
      diff_buffers_.push_back(&buffer);
      return memory(md, engine, buffer.data.data());
    };
    dl_mem_ = diff(bwd_dlayer);
    di_mem_ = diff(bwd_diter);
    for (auto* pass : {&backward_input_, &backward_weights_}) pass->insert(pass->end(), prepare.begin(), prepare.end());
    add_backward(bl, bi, ws);
    // The gradients back in the plain layout, to be unpacked.
    for (auto* pass : {&backward_input_, &backward_weights_}) {
      AddReorder(*pass, dl_mem_, memory(layer_plain, engine, dw_layer_));
      AddReorder(*pass, di_mem_, memory(iter_plain, engine, dw_iter_));
    }
    Forward();
  }

  void Forward() override {
    Pack();
    Run(forward_);
  }
  void ForwardInference() override { Forward(); }
  void BackwardInput() override { Backward(backward_input_); }
  void BackwardWeights() override { Backward(backward_weights_); }

 private:
  std::unordered_map<int, memory> BackwardArgs(memory wl, memory wi, memory ws) {
    return {{DNNL_ARG_SRC_LAYER, Mem(inputs_[0], Plain({time_, batch_, features_}))},
            {DNNL_ARG_WEIGHTS_LAYER, wl},
            {DNNL_ARG_WEIGHTS_ITER, wi},
            {DNNL_ARG_BIAS, bias_mem_},
            {DNNL_ARG_DST_LAYER, Mem(output_, Plain({time_, batch_, hidden_}))},
            {DNNL_ARG_WORKSPACE, ws},
            {DNNL_ARG_DIFF_SRC_LAYER, Mem(grad_inputs_[0], Plain({time_, batch_, features_}))},
            {DNNL_ARG_DIFF_WEIGHTS_LAYER, dl_mem_},
            {DNNL_ARG_DIFF_WEIGHTS_ITER, di_mem_},
            {DNNL_ARG_DIFF_BIAS, dbias_mem_},
            {DNNL_ARG_DIFF_DST_LAYER, Mem(grad_output_, Plain({time_, batch_, hidden_}))}};
  }

  // oneDNN's gate g is PyTorch's gate Gate(g): the LSTM's orders agree; the GRU's u r o are PyTorch's z r n.
  int64_t Gate(int64_t g) const { return lstm_ ? g : (g == 0 ? 1 : g == 1 ? 0 : 2); }

  void Pack() {
    const float* w_ih = params_[0]->data.data();
    const float* w_hh = params_[1]->data.data();
    const float* b_ih = params_[2]->data.data();
    const float* b_hh = params_[3]->data.data();
    const int64_t gh = gates_ * hidden_;
    for (int64_t g = 0; g < gates_; ++g) {
      const int64_t from = Gate(g) * hidden_;
      for (int64_t h = 0; h < hidden_; ++h) {
        for (int64_t i = 0; i < features_; ++i) w_layer_[i * gh + g * hidden_ + h] = w_ih[(from + h) * features_ + i];
        for (int64_t i = 0; i < hidden_; ++i) w_iter_[i * gh + g * hidden_ + h] = w_hh[(from + h) * hidden_ + i];
        // The GRU's candidate keeps its recurrent bias apart (gate 3), inside the reset gate's product.
        const bool apart = !lstm_ && g == 2;
        bias_[g * hidden_ + h] = b_ih[from + h] + (apart ? 0.0f : b_hh[from + h]);
        if (apart) bias_[3 * hidden_ + h] = b_hh[from + h];
      }
    }
  }

  void Backward(std::vector<Step>& pass) {
    Pack();
    // oneDNN's RNN backward adds to the weight gradients it is given: start from zero.
    for (Tensor* t : diff_buffers_) std::fill(t->data.begin(), t->data.end(), 0.0f);
    std::fill_n(dbias_, bias_gates_ * hidden_, 0.0f);
    Run(pass);
    float* dw_ih = grad_params_[0]->data.data();
    float* dw_hh = grad_params_[1]->data.data();
    float* db_ih = grad_params_[2]->data.data();
    float* db_hh = grad_params_[3]->data.data();
    const int64_t gh = gates_ * hidden_;
    for (int64_t g = 0; g < gates_; ++g) {
      const int64_t to = Gate(g) * hidden_;
      for (int64_t h = 0; h < hidden_; ++h) {
        for (int64_t i = 0; i < features_; ++i) dw_ih[(to + h) * features_ + i] = dw_layer_[i * gh + g * hidden_ + h];
        for (int64_t i = 0; i < hidden_; ++i) dw_hh[(to + h) * hidden_ + i] = dw_iter_[i * gh + g * hidden_ + h];
        const bool apart = !lstm_ && g == 2;
        db_ih[to + h] = dbias_[g * hidden_ + h];
        db_hh[to + h] = apart ? dbias_[3 * hidden_ + h] : dbias_[g * hidden_ + h];
      }
    }
  }

  bool lstm_;
  int64_t time_ = 0, batch_ = 0, features_ = 0, hidden_ = 0, gates_ = 0, bias_gates_ = 0;
  float *w_layer_ = nullptr, *w_iter_ = nullptr, *bias_ = nullptr;
  float *dw_layer_ = nullptr, *dw_iter_ = nullptr, *dbias_ = nullptr;
  memory bias_mem_, dbias_mem_, dl_mem_, di_mem_;
  std::vector<Tensor*> diff_buffers_;
  Tensor* zero_state_ = nullptr;
  Tensor* diff_state_ = nullptr;  // the initial state's gradients, which nothing reads
};

}  // namespace

std::unique_ptr<Layer> MakeRecurrentLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed) {
  switch (kind) {
    case graph::OpKind::kLstm:
      return std::make_unique<Recurrent>(backend, spec, seed, /*lstm=*/true);
    case graph::OpKind::kGru:
      return std::make_unique<Recurrent>(backend, spec, seed, /*lstm=*/false);
    default:
      return nullptr;
  }
}

}  // namespace edgecost::kernels::detail
