// The zoo's op set: convolution, linear, batch norm, ReLU, pooling, flatten,
// dropout, residual add, attention and the loss, and the gradient sum of the
// training graph.
#include "kernels/families.h"
#include "kernels/step_layer.h"

namespace edgecost::kernels::detail {
namespace {

// Whether a convolution runs faster on the layouts oneDNN chooses, reorders at its edges included,
// than on plain NCHW. On NCHW oneDNN lowers a convolution to GEMM: over im2col copies of the input
// for a window wider than one pixel, and for a grouped one a tiny GEMM per group; its JIT direct
// kernels on blocked layouts beat both, reorders included. A 1x1 ungrouped convolution is one GEMM
// over NCHW as it lies, which the reorders would only slow down.
bool PrefersBlocked(int64_t groups, int64_t window_pixels) { return groups > 1 || window_pixels > 1; }

// Rows of the GEMM's reduction (batch x output pixels) each thread of a minibatch split needs.
constexpr int64_t kMinReductionRowsPerThread = 64;

// Whether a convolution runs as one GEMM over the whole batch: a 1x1 ungrouped one (stride 1, no
// padding) on maps of at most kMaxFoldedPixels. oneDNN runs it on NCHW as one GEMM per image, whose
// few columns (a 2x2 map's 4) leave it at a tenth of the GEMM's peak with the weights read once per
// image; staged channel-major, (C, N H W), the batch's columns are one GEMM's.
constexpr int64_t kMaxFoldedPixels = 64;
bool FoldsBatchIntoOneGemm(int64_t batch, int64_t groups, int64_t kernel_pixels, int64_t stride, int64_t padding,
                           int64_t out_pixels) {
  return batch > 1 && groups == 1 && kernel_pixels == 1 && stride == 1 && padding == 0 &&
         out_pixels <= kMaxFoldedPixels;
}

float* Data(const memory& m) { return static_cast<float*>(m.get_data_handle()); }

struct DepthwiseShape {
  int64_t n, c, h, w, oh, ow, kh, kw, stride, ph, pw;
};

// A depthwise convolution's weight (and bias) gradient, channels innermost: X and dY in NHWC, dW
// as (kh, kw, c). dW[i, j, c] = sum over n, oh, ow of dY[n, oh, ow, c] X[n, oh s - ph + i, ow s - pw + j, c],
// each sum vectorized across channels, which stays efficient on the 2x2 maps of late blocks where a
// loop over a map's width would run two iterations. Blocks of channels go to threads; each sum runs
// in a fixed order whatever the thread count, so gradients are reproducible.
EDGECOST_VECTOR_CLONES void DepthwiseBackwardWeights(const DepthwiseShape& d, const float* x, const float* dy, float* dw, float* db) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (d.c + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t c0 = block * kBlock, c1 = std::min(d.c, c0 + kBlock);
    for (int64_t k = 0; k < d.kh * d.kw; ++k) std::fill(dw + k * d.c + c0, dw + k * d.c + c1, 0.0f);
    if (db) std::fill(db + c0, db + c1, 0.0f);
    for (int64_t n = 0; n < d.n; ++n) {
      for (int64_t oh = 0; oh < d.oh; ++oh) {
        for (int64_t ow = 0; ow < d.ow; ++ow) {
          const float* g = dy + ((n * d.oh + oh) * d.ow + ow) * d.c;
          if (db) {
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) db[c] += g[c];
          }
          for (int64_t i = 0; i < d.kh; ++i) {
            const int64_t ih = oh * d.stride - d.ph + i;
            if (ih < 0 || ih >= d.h) continue;
            for (int64_t j = 0; j < d.kw; ++j) {
              const int64_t iw = ow * d.stride - d.pw + j;
              if (iw < 0 || iw >= d.w) continue;
              const float* xp = x + ((n * d.h + ih) * d.w + iw) * d.c;
              float* acc = dw + (i * d.kw + j) * d.c;
#pragma omp simd
              for (int64_t c = c0; c < c1; ++c) acc[c] += g[c] * xp[c];
            }
          }
        }
      }
    }
  }
}

// Convolution, grouped when the "groups" attribute says so (groups == channels: depthwise), with a
// bias unless "no_bias" (PyTorch's convolutions before a batch norm have none).
class Conv2d : public StepLayer {
 public:
  Conv2d(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitTensors(spec);
    const auto attribute = [&](const char* name, int64_t fallback) {
      auto it = spec.attributes.find(name);
      return it == spec.attributes.end() ? fallback : it->second;
    };
    // A kh x kw window (kernel_w and padding_w only where the width's differ from the height's).
    const int64_t kh = spec.attributes.at("kernel"), s = spec.attributes.at("stride");
    const int64_t ph = spec.attributes.at("padding");
    const int64_t kw = attribute("kernel_w", kh), pw = attribute("padding_w", ph);
    const int64_t groups = attribute("groups", 1);
    const bool bias = attribute("no_bias", 0) == 0;
    const int64_t in_channels = spec.input_shapes[0][1], out_channels = spec.output_shape[1];
    // A sparse tensor update: the weights pass gives the first `updated` output channels' gradients.
    const int64_t updated = attribute("update_channels", out_channels);
    Tensor& w = Param({out_channels, in_channels / groups, kh, kw},
                      std::sqrt(2.0f / static_cast<float>(in_channels / groups * kh * kw)), updated);
    Tensor* bias_t = bias ? &Param({out_channels}, 0.01f, updated) : nullptr;
    // Grouped weights are (groups, out/groups, in/groups, k, k): the same memory as PyTorch's.
    const memory::desc w_md =
        groups == 1 ? Plain(w.dims) : Plain({groups, out_channels / groups, in_channels / groups, kh, kw});
    const memory::desc b_md = bias ? Plain(bias_t->dims) : memory::desc();
    Tensor& x = inputs_[0];
    const bool channels_last = x.channels_last || output_.channels_last;
    const bool pointwise = groups == 1 && kh * kw == 1 && s == 1 && std::max(ph, pw) == 0;
    if (channels_last && pointwise && updated == out_channels) {
      BuildChannelsLastGemm(w, bias_t);
      return;
    }
    if (!channels_last && updated == out_channels &&
        FoldsBatchIntoOneGemm(x.dims[0], groups, kh * kw, s, std::max(ph, pw),
                              spec.output_shape[2] * spec.output_shape[3])) {
      BuildFoldedGemm(w, bias_t);
      return;
    }
    // Same padding on both sides when it fits, else as much on the right as the output size needs.
    const memory::dims strides = {s, s}, pad_l = {ph, pw};
    const memory::dims pad_rr = {(spec.output_shape[2] - 1) * s + kh - x.dims[2] - ph,
                                 (spec.output_shape[3] - 1) * s + kw - x.dims[3] - pw};
    const memory::desc x_md = Desc(x), y_md = Desc(output_);
    // oneDNN's JIT convolutions run on blocked layouts; on plain NCHW it falls back to GEMM over
    // im2col, which for a depthwise convolution is one tiny GEMM per channel (10x slower). Such a
    // layer lets oneDNN choose the layouts and reorders at the edges of each pass (staged copies).
    // A channels-last layer runs its activations NHWC (a plain one reordered), oneDNN's fastest.
    const bool choose_layouts = channels_last || PrefersBlocked(groups, kh * kw);
    const auto choose = [&](const memory::desc& md) {
      return choose_layouts ? memory::desc(md.dims(), memory::data_type::f32, memory::format_tag::any) : md;
    };
    const auto activation = [&](const memory::desc& md) {
      return channels_last ? memory::desc(md.dims(), memory::data_type::f32, memory::format_tag::nhwc) : choose(md);
    };
    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, activation(x_md),
                                        choose(w_md), b_md, activation(y_md), strides, pad_l, pad_rr),
        attr_, backend_.engine());
    dnnl::convolution_backward_data::primitive_desc data(
        dnnl::convolution_backward_data::desc(algorithm::convolution_direct, activation(x_md), choose(w_md),
                                              activation(y_md), strides, pad_l, pad_rr),
        attr_, backend_.engine(), fwd);
    // oneDNN fixes a primitive's thread count when it is created: the weight gradient gets the
    // team its node runs on (NodeWork::team_threads), which may be smaller than the layer's.
    const int threads = omp_get_max_threads();
    const auto weights = [&] {
      const TeamScope team(WeightGradientRepaysTeam(spec, threads) ? threads : 1);
      return dnnl::convolution_backward_weights::primitive_desc(
          dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, activation(x_md), choose(w_md), b_md,
                                                   activation(y_md), strides, pad_l, pad_rr),
          attr_, backend_.engine(), fwd);
    }();
    StartStaging(std::max({fwd.scratchpad_desc().get_size(), data.scratchpad_desc().get_size(),
                           weights.scratchpad_desc().get_size()}));

    std::unordered_map<int, memory> fwd_args = {{DNNL_ARG_SRC, StagedIn(forward_, x, x_md, fwd.src_desc())},
                                                {DNNL_ARG_WEIGHTS, StagedIn(forward_, w, w_md, fwd.weights_desc())},
                                                {DNNL_ARG_DST, StagedOut(output_, y_md, fwd.dst_desc())}};
    if (bias) fwd_args[DNNL_ARG_BIAS] = Mem(*bias_t);
    Add(forward_, fwd, fwd_args);
    CopyOut(forward_, fwd_args[DNNL_ARG_DST], output_, y_md);

    StartStaging(0);
    std::unordered_map<int, memory> data_args = {
        {DNNL_ARG_DIFF_DST, StagedIn(backward_input_, grad_output_, y_md, data.diff_dst_desc())},
        {DNNL_ARG_WEIGHTS, StagedIn(backward_input_, w, w_md, data.weights_desc())},
        {DNNL_ARG_DIFF_SRC, StagedOut(grad_inputs_[0], x_md, data.diff_src_desc())}};
    Add(backward_input_, data, data_args);
    CopyOut(backward_input_, data_args[DNNL_ARG_DIFF_SRC], grad_inputs_[0], x_md);

    if (updated < out_channels) {
      AddPartialWeightsPass(x, x_md, bias, strides, pad_l, pad_rr, updated);
      return;
    }
    StartStaging(0);
    // oneDNN's JIT depthwise weight gradient takes only some windows and sizes (not 5x5, nor maps
    // smaller than the window: EfficientNet's late blocks); elsewhere it falls back to a GEMM per
    // channel (~50x slower than the direct loop below) or, on NHWC, to its grouped convolution (~20x).
    const bool depthwise = groups == in_channels && groups == out_channels;
    if (depthwise && std::string(weights.impl_info_str()).find("jit_dw") == std::string::npos) {
      const DepthwiseShape shape{x.dims[0], in_channels, x.dims[2], x.dims[3], output_.dims[2], output_.dims[3],
                                 kh, kw, s, ph, pw};
      const memory::desc nhwc_x(x_md.dims(), memory::data_type::f32, memory::format_tag::nhwc);
      const memory::desc nhwc_y(y_md.dims(), memory::data_type::f32, memory::format_tag::nhwc);
      const int64_t taps = kh * kw;  // (groups, 1, 1, kh, kw) with the groups innermost
      const memory::desc hwc_w(w_md.dims(), memory::data_type::f32, {1, taps * groups, taps * groups, kw * groups, groups});
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, StagedIn(backward_weights_, x, x_md, nhwc_x)},
                                              {DNNL_ARG_DIFF_DST, StagedIn(backward_weights_, grad_output_, y_md, nhwc_y)},
                                              {DNNL_ARG_DIFF_WEIGHTS, Staged(hwc_w)}};
      if (bias) args[DNNL_ARG_DIFF_BIAS] = Mem(*grad_params_[1]);
      memory staged_dw = args[DNNL_ARG_DIFF_WEIGHTS];
      backward_weights_.push_back({dnnl::primitive(), std::move(args), nullptr,
                                   [shape, bias](const std::unordered_map<int, memory>& a) {
                                     DepthwiseBackwardWeights(
                                         shape, Data(a.at(DNNL_ARG_SRC)), Data(a.at(DNNL_ARG_DIFF_DST)),
                                         Data(a.at(DNNL_ARG_DIFF_WEIGHTS)),
                                         bias ? Data(a.at(DNNL_ARG_DIFF_BIAS)) : nullptr);
                                   }});
      CopyOut(backward_weights_, staged_dw, *grad_params_[0], w_md);
      if (bias) AddChannelSums(backward_bias_, grad_output_, *grad_params_[1]);
      return;
    }
    std::unordered_map<int, memory> weight_args = {
        {DNNL_ARG_SRC, StagedIn(backward_weights_, x, x_md, weights.src_desc())},
        {DNNL_ARG_DIFF_DST, StagedIn(backward_weights_, grad_output_, y_md, weights.diff_dst_desc())},
        {DNNL_ARG_DIFF_WEIGHTS, StagedOut(*grad_params_[0], w_md, weights.diff_weights_desc())}};
    if (bias) weight_args[DNNL_ARG_DIFF_BIAS] = Mem(*grad_params_[1]);
    Add(backward_weights_, weights, weight_args);
    CopyOut(backward_weights_, weight_args[DNNL_ARG_DIFF_WEIGHTS], *grad_params_[0], w_md);
    if (bias) AddChannelSums(backward_bias_, grad_output_, *grad_params_[1]);
  }

 private:
  // The passes of a convolution that FoldsBatchIntoOneGemm, with P pixels per map: X, as (N, C, P),
  // is staged channel-major, (C, N P), and so are dY, Y and dX; then Y = W X, dX = W^T dY and
  // dW = dY X^T are one matmul each, and db sums dY over all but the channels. The bias is added to
  // Y in NCHW by a binary primitive: oneDNN 2.6's matmul takes a bias per row only in its
  // reference kernel, 40x slower.
  void BuildFoldedGemm(Tensor& w, Tensor* bias_t) {
    const Dims& x_dims = inputs_[0].dims;
    const int64_t n = x_dims[0], in = x_dims[1], out = output_.dims[1], pixels = x_dims[2] * x_dims[3];
    const int64_t columns = n * pixels;
    const auto f32 = memory::data_type::f32;
    const auto plain = [&](int64_t c) { return memory::desc({n, c, pixels}, f32, {c * pixels, pixels, 1}); };
    const auto folded = [&](int64_t c) { return memory::desc({n, c, pixels}, f32, {pixels, columns, 1}); };
    const memory::desc w_md = Plain({out, in}), w_t({in, out}, f32, {1, in});
    const memory::desc x_mat = Plain({in, columns}), x_t({columns, in}, f32, {1, columns});
    const memory::desc y_mat = Plain({out, columns});
    const auto matmul = [&](const memory::desc& a, const memory::desc& b, const memory::desc& c) {
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr_, backend_.engine());
    };
    const auto fwd = matmul(w_md, x_mat, y_mat);
    const auto data = matmul(w_t, y_mat, x_mat);
    const auto weights = matmul(y_mat, x_t, w_md);
    StartStaging(std::max({fwd.scratchpad_desc().get_size(), data.scratchpad_desc().get_size(),
                           weights.scratchpad_desc().get_size()}));
    Tensor& x = inputs_[0];
    memory x_folded = StagedIn(forward_, x, plain(in), folded(in));
    memory y_folded = Staged(folded(out));
    Add(forward_, fwd,
        {{DNNL_ARG_SRC, Mem(w, w_md)},
         {DNNL_ARG_WEIGHTS, StagedView(x_folded, x_mat)},
         {DNNL_ARG_DST, StagedView(y_folded, y_mat)}});
    CopyOut(forward_, y_folded, output_, plain(out));
    const memory::desc per_channel = Plain({1, out, 1, 1});
    if (bias_t) AddBinary(forward_, algorithm::binary_add, Mem(output_), Mem(*bias_t, per_channel), Mem(output_));

    StartStaging(0);
    memory dy_folded = StagedIn(backward_input_, grad_output_, plain(out), folded(out));
    memory dx_folded = Staged(folded(in));
    Add(backward_input_, data,
        {{DNNL_ARG_SRC, Mem(w, w_t)},
         {DNNL_ARG_WEIGHTS, StagedView(dy_folded, y_mat)},
         {DNNL_ARG_DST, StagedView(dx_folded, x_mat)}});
    CopyOut(backward_input_, dx_folded, grad_inputs_[0], plain(in));

    StartStaging(0);
    memory x_again = StagedIn(backward_weights_, x, plain(in), folded(in));
    memory dy_again = StagedIn(backward_weights_, grad_output_, plain(out), folded(out));
    Add(backward_weights_, weights,
        {{DNNL_ARG_SRC, StagedView(dy_again, y_mat)},
         {DNNL_ARG_WEIGHTS, StagedView(x_again, x_t)},
         {DNNL_ARG_DST, Mem(*grad_params_[0], w_md)}});
    if (bias_t) {
      AddReduceSum(backward_weights_, Mem(grad_output_), Mem(*grad_params_[1], per_channel));
      AddReduceSum(backward_bias_, Mem(grad_output_), Mem(*grad_params_[1], per_channel));
    }
  }

  // A 1x1 convolution (stride 1, no padding) over channels-last maps is one matmul over the batch's
  // pixels as rows, (N H W, C): Y = X W^T, dX = dY W and dW = dY^T X, on the weights as they lie
  // (oneDNN's 1x1 convolution reorders them into blocks in each pass, and back for dW). A plain
  // input or output is staged NHWC.
  void BuildChannelsLastGemm(Tensor& w, Tensor* bias_t) {
    Tensor& x = inputs_[0];
    const int64_t rows = x.dims[0] * x.dims[2] * x.dims[3], in = x.dims[1], out = output_.dims[1];
    const auto f32 = memory::data_type::f32;
    const auto nhwc = [&](const Dims& d) {
      return memory::desc(memory::dims(d.begin(), d.end()), f32, memory::format_tag::nhwc);
    };
    const memory::desc x_mat = Plain({rows, in}), y_mat = Plain({rows, out}), w_mat = Plain({out, in});
    const memory::desc w_t({in, out}, f32, {1, in}), y_t({out, rows}, f32, {1, out});
    const memory::desc bias_md = bias_t ? Plain({1, out}) : memory::desc();
    const auto matmul = [&](const memory::desc& a, const memory::desc& b, const memory::desc& bias,
                            const memory::desc& c) {
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, bias, c), attr_, backend_.engine());
    };
    const auto fwd = matmul(x_mat, w_t, bias_md, y_mat);
    const auto data = matmul(y_mat, w_mat, memory::desc(), x_mat);
    const auto weights = matmul(y_t, x_mat, memory::desc(), w_mat);
    StartStaging(std::max(
        {fwd.scratchpad_desc().get_size(), data.scratchpad_desc().get_size(), weights.scratchpad_desc().get_size()}));
    // `m` (over `t`, or a staged copy of it) seen as the matrix `md`.
    const auto as = [&](const memory& m, Tensor& t, const memory::desc& md) {
      return IsStaged(m) ? StagedView(m, md) : Mem(t, md);
    };
    memory x_in = StagedIn(forward_, x, Desc(x), nhwc(x.dims));
    memory y_out = StagedOut(output_, Desc(output_), nhwc(output_.dims));
    std::unordered_map<int, memory> fwd_args = {
        {DNNL_ARG_SRC, as(x_in, x, x_mat)}, {DNNL_ARG_WEIGHTS, Mem(w, w_t)}, {DNNL_ARG_DST, as(y_out, output_, y_mat)}};
    if (bias_t) fwd_args[DNNL_ARG_BIAS] = Mem(*bias_t, bias_md);
    Add(forward_, fwd, fwd_args);
    CopyOut(forward_, y_out, output_, Desc(output_));

    StartStaging(0);
    memory dy_in = StagedIn(backward_input_, grad_output_, Desc(grad_output_), nhwc(output_.dims));
    memory dx_out = StagedOut(grad_inputs_[0], Desc(grad_inputs_[0]), nhwc(x.dims));
    Add(backward_input_, data,
        {{DNNL_ARG_SRC, as(dy_in, grad_output_, y_mat)},
         {DNNL_ARG_WEIGHTS, Mem(w, w_mat)},
         {DNNL_ARG_DST, as(dx_out, grad_inputs_[0], x_mat)}});
    CopyOut(backward_input_, dx_out, grad_inputs_[0], Desc(grad_inputs_[0]));

    StartStaging(0);
    memory x_again = StagedIn(backward_weights_, x, Desc(x), nhwc(x.dims));
    memory dy_again = StagedIn(backward_weights_, grad_output_, Desc(grad_output_), nhwc(output_.dims));
    Add(backward_weights_, weights,
        {{DNNL_ARG_SRC, as(dy_again, grad_output_, y_t)},
         {DNNL_ARG_WEIGHTS, as(x_again, x, x_mat)},
         {DNNL_ARG_DST, Mem(*grad_params_[0], w_mat)}});
    if (bias_t) {
      AddChannelSums(backward_weights_, grad_output_, *grad_params_[1]);
      AddChannelSums(backward_bias_, grad_output_, *grad_params_[1]);
    }
  }

  // The weights pass of a sparse tensor update: dW (and the bias's) of the first `updated` output
  // channels from dY's first channels, read in place (N, updated, H, W inside dY). Only
  // --trainable layers: updates a share, so there is no bias-only pass.
  void AddPartialWeightsPass(Tensor& x, const memory::desc& x_md, bool bias, const memory::dims& strides,
                             const memory::dims& pad_l, const memory::dims& pad_r, int64_t updated) {
    const Dims& y = output_.dims;
    const memory::desc dy_md = Desc(grad_output_).submemory_desc({y[0], updated, y[2], y[3]}, {0, 0, 0, 0});
    const memory::desc dw_md = Plain(grad_params_[0]->dims);
    const memory::desc db_md = bias ? Plain(grad_params_[1]->dims) : memory::desc();
    const auto any = [](const memory::desc& md) {
      return memory::desc(md.dims(), memory::data_type::f32, memory::format_tag::any);
    };
    const memory::desc dense_dy = any(Plain({y[0], updated, y[2], y[3]}));
    dnnl::convolution_forward::primitive_desc hint(
        dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, any(x_md),
                                        any(dw_md), db_md, dense_dy, strides, pad_l, pad_r),
        attr_, backend_.engine());
    dnnl::convolution_backward_weights::primitive_desc weights(
        dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, any(x_md), any(dw_md), db_md,
                                                 dense_dy, strides, pad_l, pad_r),
        attr_, backend_.engine(), hint);
    StartStaging(weights.scratchpad_desc().get_size());
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, StagedIn(backward_weights_, x, x_md, weights.src_desc())},
        {DNNL_ARG_DIFF_DST, StagedIn(backward_weights_, grad_output_, dy_md, weights.diff_dst_desc())},
        {DNNL_ARG_DIFF_WEIGHTS, StagedOut(*grad_params_[0], dw_md, weights.diff_weights_desc())}};
    if (bias) args[DNNL_ARG_DIFF_BIAS] = Mem(*grad_params_[1]);
    Add(backward_weights_, weights, args);
    CopyOut(backward_weights_, args[DNNL_ARG_DIFF_WEIGHTS], *grad_params_[0], dw_md);
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
    // A sparse tensor update: the weights pass gives the first `updated` outputs' gradients.
    const auto update_channels = spec.attributes.find("update_channels");
    const int64_t updated = update_channels == spec.attributes.end() ? out : update_channels->second;
    Tensor& w = Param({out, in}, std::sqrt(2.0f / static_cast<float>(in)), updated);
    Tensor* bias_t = bias ? &Param({out}, 0.01f, updated) : nullptr;
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
    if (updated < out) {  // dY's first columns, copied dense (rows x updated) for the GEMM
      const memory::desc dz_md({x.dims[0], updated}, memory::data_type::f32, {out, 1});
      const memory::desc part_md = Plain({x.dims[0], updated}), dw_md = Plain(grad_params_[0]->dims);
      const memory::desc db_md = bias ? Plain({updated}) : memory::desc();
      dnnl::inner_product_forward::primitive_desc hint(
          dnnl::inner_product_forward::desc(prop_kind::forward_training, Plain(x.dims), dw_md, db_md, part_md), attr_,
          backend_.engine());
      dnnl::inner_product_backward_weights::primitive_desc part(
          dnnl::inner_product_backward_weights::desc(Plain(x.dims), dw_md, db_md, part_md), attr_, backend_.engine(),
          hint);
      StartStaging(part.scratchpad_desc().get_size());
      memory dense = Staged(part_md);
      AddReorder(backward_weights_, memory(dz_md, backend_.engine(), dz.get_data_handle()), dense);
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, Mem(x)}, {DNNL_ARG_DIFF_DST, dense}, {DNNL_ARG_DIFF_WEIGHTS, Mem(*grad_params_[0])}};
      if (bias) args[DNNL_ARG_DIFF_BIAS] = Mem(*grad_params_[1]);
      Add(backward_weights_, part, args);
      return;
    }
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

struct BatchNormShape {
  int64_t n, c, hw;  // batch, channels, values per channel and image
  float epsilon;
};

// The activation a batch norm applies to its normalized z when one is fused: kClip (kBatchNormRelu,
// kBatchNormRelu6) gives y = min(max(z, 0), upper), its gradient passing where 0 < z < upper, as
// PyTorch's ReLU and ReLU6 (hardtanh) pass theirs; kSilu (kBatchNormSilu) gives y = z sigmoid(z),
// its gradient dY s (1 + z (1 - s)) with s = sigmoid(z), as PyTorch's SiLU; kHardSwish
// (kBatchNormHardSwish) gives y = z min(max(z + 3, 0), 6) / 6, its gradient dY (z / 3 + 1/2) for
// -3 <= z <= 3, dY above and 0 below, as PyTorch's Hardswish. The backward passes
// recompute z from X by the forward's very arithmetic (Normalized, ForwardScale), so the mask or
// the sigmoid is the forward's bit for bit. `upper` is kClip's alone.
enum class Fused { kNone, kClip, kSilu, kHardSwish };

Fused FusedActivation(graph::OpKind kind) {
  switch (kind) {
    case graph::OpKind::kBatchNormRelu:
    case graph::OpKind::kBatchNormRelu6:
      return Fused::kClip;
    case graph::OpKind::kBatchNormSilu:
      return Fused::kSilu;
    case graph::OpKind::kBatchNormHardSwish:
      return Fused::kHardSwish;
    default:
      return Fused::kNone;
  }
}

inline float Normalized(float x, float mean, float scale, float shift) { return (x - mean) * scale + shift; }

// e^x in arithmetic a loop vectorizes: Cephes' expf, x - n ln 2 in two parts and a degree-6
// polynomial, times 2^n built in the exponent's bits. std::exp is a call, and GCC 12 vectorizes no
// loop with a float-to-int conversion or a clamp of x beside this, so n is rounded by adding
// 1.5 x 2^23 and clamped as an integer, to a normal float's exponents: e^x saturates below e^-87 and
// above e^88 (a sigmoid is then 0 or 1), and is within 2 ulp between, for |x| < 4e6.
inline float VectorExp(float x) {
  constexpr float kRound = 12582912.0f;
  const float shifted = x * 1.44269504f + kRound;
  const float n = shifted - kRound;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t k = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  k = k > -126 ? k : -126;
  k = k < 127 ? k : 127;
  return p * std::bit_cast<float>((k + 127) << 23);
}
inline float Sigmoid(float z) { return 1.0f / (1.0f + VectorExp(-z)); }

// Selects on values, not std::min and std::max's references, so that the loops vectorize.
template <Fused kFused>
float Activated(float z, float upper) {
  if constexpr (kFused == Fused::kClip) {
    const float positive = z > 0.0f ? z : 0.0f;
    return positive < upper ? positive : upper;
  } else if constexpr (kFused == Fused::kSilu) {
    return z / (1.0f + VectorExp(-z));
  } else if constexpr (kFused == Fused::kHardSwish) {
    const float shifted = z + 3.0f;
    const float positive = shifted > 0.0f ? shifted : 0.0f;
    return z * (positive < 6.0f ? positive : 6.0f) / 6.0f;
  }
  return z;
}
inline float ForwardScale(float gamma, float variance, float epsilon) { return gamma / std::sqrt(variance + epsilon); }

// On small maps (the late layers' 2x2 and 4x4) a channel is a few values per image, and loops over
// one channel's planes are all setup: 4 ns a value at 2x2 against 0.4 at 32x32. There the passes
// run over a block of whole channels at once, contiguous in each image: lane l of the block is
// value l % hw of channel l / hw, summed over the images in a lane of its own, then the channel's
// lanes in order. The order is fixed by the shape, so sums are the same whatever the thread count.
constexpr int64_t kLanesMaxValues = 16;  // values per channel and image up to which lanes pay (4x4)
constexpr int64_t kLanesPerBlock = 1024;

struct LaneBlock {
  int64_t first_channel, channels, lanes;
};
inline int64_t ChannelsPerLaneBlock(const BatchNormShape& d) { return std::max<int64_t>(1, kLanesPerBlock / d.hw); }
inline LaneBlock LaneBlockOf(const BatchNormShape& d, int64_t block) {
  const int64_t first = block * ChannelsPerLaneBlock(d);
  const int64_t channels = std::min(ChannelsPerLaneBlock(d), d.c - first);
  return {first, channels, channels * d.hw};
}
inline int64_t LaneBlocks(const BatchNormShape& d) {
  return (d.c + ChannelsPerLaneBlock(d) - 1) / ChannelsPerLaneBlock(d);
}
// Per channel of the block, the sum of its lanes.
inline void SumLanes(const BatchNormShape& d, const LaneBlock& b, const double* lanes, double* per_channel) {
  for (int64_t c = 0; c < b.channels; ++c) {
    double sum = 0;
    for (int64_t k = 0; k < d.hw; ++k) sum += lanes[c * d.hw + k];
    per_channel[c] = sum;
  }
}
// Spreads value(channel) over the channel's lanes, for each channel of the block.
template <typename PerChannel>
void Spread(const BatchNormShape& d, const LaneBlock& b, PerChannel value, float* lanes) {
  for (int64_t c = 0; c < b.channels; ++c) std::fill_n(lanes + c * d.hw, d.hw, value(b.first_channel + c));
}

template <Fused kFused>
EDGECOST_VECTOR_CLONES void BatchNormForwardLanes(const BatchNormShape& d, float upper, const float* x,
                                                  const float* gamma, const float* beta, float* mean, float* variance,
                                                  float* y) {
  const double count = static_cast<double>(d.n * d.hw);
  const int64_t blocks = LaneBlocks(d), stride = d.c * d.hw;
#pragma omp parallel
  {
    std::vector<double> sums(kLanesPerBlock), per_channel(kLanesPerBlock);
    std::vector<float> m(kLanesPerBlock), scale(kLanesPerBlock), shift(kLanesPerBlock);
#pragma omp for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      const LaneBlock b = LaneBlockOf(d, block);
      const int64_t at = b.first_channel * d.hw;
      std::fill_n(sums.data(), b.lanes, 0.0);
      for (int64_t n = 0; n < d.n; ++n) {
        const float* in = x + n * stride + at;
#pragma omp simd
        for (int64_t l = 0; l < b.lanes; ++l) sums[l] += in[l];
      }
      SumLanes(d, b, sums.data(), per_channel.data());
      for (int64_t c = 0; c < b.channels; ++c) mean[b.first_channel + c] = static_cast<float>(per_channel[c] / count);
      Spread(
          d, b, [mean](int64_t channel) { return mean[channel]; }, m.data());
      std::fill_n(sums.data(), b.lanes, 0.0);
      for (int64_t n = 0; n < d.n; ++n) {
        const float* in = x + n * stride + at;
#pragma omp simd
        for (int64_t l = 0; l < b.lanes; ++l) {
          const float centered = in[l] - m[l];
          sums[l] += static_cast<double>(centered) * centered;
        }
      }
      SumLanes(d, b, sums.data(), per_channel.data());
      for (int64_t c = 0; c < b.channels; ++c)
        variance[b.first_channel + c] = static_cast<float>(per_channel[c] / count);
      Spread(
          d, b, [&](int64_t channel) { return ForwardScale(gamma[channel], variance[channel], d.epsilon); },
          scale.data());
      Spread(
          d, b, [beta](int64_t channel) { return beta[channel]; }, shift.data());
      for (int64_t n = 0; n < d.n; ++n) {
        const float* in = x + n * stride + at;
        float* out = y + n * stride + at;
#pragma omp simd
        for (int64_t l = 0; l < b.lanes; ++l)
          out[l] = Activated<kFused>(Normalized(in[l], m[l], scale[l], shift[l]), upper);
      }
    }
  }
}

// Batch norm's training forward on NCHW, one channel at a time so that the channel's values stay
// in cache across the three passes (mean, variance about the mean, normalization). oneDNN 2.6's
// kernel for plain layouts (ncsp_bnorm) is slower: MobileNetV2 at 1 thread spends 3.7 ms a step
// in its batch norms, forward and backward, against 1.4 ms here.
// Sums run in double, in a fixed order per channel whatever the thread count (reproducible).
// The variance is the biased one (divided by N H W), as oneDNN's and as PyTorch normalizes with.
template <Fused kFused>
EDGECOST_VECTOR_CLONES void BatchNormForward(const BatchNormShape& d, float upper, const float* x, const float* gamma,
                                             const float* beta, float* mean, float* variance, float* y) {
  if (d.hw <= kLanesMaxValues) return BatchNormForwardLanes<kFused>(d, upper, x, gamma, beta, mean, variance, y);
  const double count = static_cast<double>(d.n * d.hw);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.c; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const float* plane = x + (n * d.c + c) * d.hw;
#pragma omp simd reduction(+ : sum)
      for (int64_t k = 0; k < d.hw; ++k) sum += plane[k];
    }
    const float m = static_cast<float>(sum / count);
    double squares = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const float* plane = x + (n * d.c + c) * d.hw;
#pragma omp simd reduction(+ : squares)
      for (int64_t k = 0; k < d.hw; ++k) {
        const float centered = plane[k] - m;
        squares += static_cast<double>(centered) * centered;
      }
    }
    const float v = static_cast<float>(squares / count);
    mean[c] = m;
    variance[c] = v;
    const float scale = ForwardScale(gamma[c], v, d.epsilon), shift = beta[c];
    for (int64_t n = 0; n < d.n; ++n) {
      const float* plane = x + (n * d.c + c) * d.hw;
      float* out = y + (n * d.c + c) * d.hw;
#pragma omp simd
      for (int64_t k = 0; k < d.hw; ++k) out[k] = Activated<kFused>(Normalized(plane[k], m, scale, shift), upper);
    }
  }
}

// dY through the fused activation's gradient at z; dY itself without one.
template <Fused kFused>
float Masked(float upper, float dy, float x, float mean, float scale, float shift) {
  if constexpr (kFused == Fused::kNone) return dy;
  const float z = Normalized(x, mean, scale, shift);
  if constexpr (kFused == Fused::kSilu) {
    const float s = Sigmoid(z);
    return dy * (s * (1.0f + z * (1.0f - s)));
  } else if constexpr (kFused == Fused::kHardSwish) {
    // Masks as products, not selects between computed values: the loop then vectorizes.
    const float middle = static_cast<float>((z >= -3.0f) & (z <= 3.0f)), above = static_cast<float>(z > 3.0f);
    return dy * ((z / 3.0f + 0.5f) * middle + above);
  }
  return dy * static_cast<float>((z > 0.0f) & (z < upper));  // a product, not a branch: it vectorizes
}

// Over `count` values with a mean, a forward scale and a shift each: g = dY through the fused
// activation's gradient, summed into sum_dy and, times x - mean, into sum_centered; g is kept in
// `masked` where given (a fused activation's first pass, for the second to read).
template <Fused kFused>
inline void MaskedSums(int64_t count, float upper, const float* x, const float* dy, const float* mean,
                       const float* scale, const float* shift, float* masked, double* sum_dy, double* sum_centered) {
  if (kFused != Fused::kNone && masked) {
#pragma omp simd
    for (int64_t k = 0; k < count; ++k) {
      const float g = Masked<kFused>(upper, dy[k], x[k], mean[k], scale[k], shift[k]);
      masked[k] = g;
      sum_dy[k] += g;
      sum_centered[k] += static_cast<double>(g) * (x[k] - mean[k]);
    }
    return;
  }
#pragma omp simd
  for (int64_t k = 0; k < count; ++k) {
    const float g = Masked<kFused>(upper, dy[k], x[k], mean[k], scale[k], shift[k]);
    sum_dy[k] += g;
    sum_centered[k] += static_cast<double>(g) * (x[k] - mean[k]);
  }
}

// The backward on small maps, in lanes as BatchNormForwardLanes.
template <Fused kFused>
EDGECOST_VECTOR_CLONES void BatchNormBackwardLanes(const BatchNormShape& d, float upper, const float* x,
                                                   const float* dy, const float* gamma, const float* beta,
                                                   const float* mean, const float* variance, float* dx, float* dgamma,
                                                   float* dbeta) {
  const double count = static_cast<double>(d.n * d.hw);
  const int64_t blocks = LaneBlocks(d), stride = d.c * d.hw;
  const auto inv_std = [&](int64_t channel) { return 1.0f / std::sqrt(variance[channel] + d.epsilon); };
#pragma omp parallel
  {
    std::vector<double> sums_dy(kLanesPerBlock), sums_centered(kLanesPerBlock);
    std::vector<double> channel_dy(kLanesPerBlock), channel_centered(kLanesPerBlock);
    std::vector<float> m(kLanesPerBlock), forward_scale(kLanesPerBlock), shift(kLanesPerBlock);
    std::vector<float> scale(kLanesPerBlock), mean_dy(kLanesPerBlock), per_centered(kLanesPerBlock);
#pragma omp for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      const LaneBlock b = LaneBlockOf(d, block);
      const int64_t at = b.first_channel * d.hw;
      Spread(
          d, b, [mean](int64_t channel) { return mean[channel]; }, m.data());
      Spread(
          d, b, [&](int64_t channel) { return ForwardScale(gamma[channel], variance[channel], d.epsilon); },
          forward_scale.data());
      Spread(
          d, b, [beta](int64_t channel) { return beta[channel]; }, shift.data());
      std::fill_n(sums_dy.data(), b.lanes, 0.0);
      std::fill_n(sums_centered.data(), b.lanes, 0.0);
      for (int64_t n = 0; n < d.n; ++n) {
        const int64_t image = n * stride + at;
        MaskedSums<kFused>(b.lanes, upper, x + image, dy + image, m.data(), forward_scale.data(), shift.data(),
                           dx ? dx + image : nullptr, sums_dy.data(), sums_centered.data());
      }
      SumLanes(d, b, sums_dy.data(), channel_dy.data());
      SumLanes(d, b, sums_centered.data(), channel_centered.data());
      for (int64_t c = 0; c < b.channels; ++c) {
        const int64_t channel = b.first_channel + c;
        dbeta[channel] = static_cast<float>(channel_dy[c]);
        if (dx) dgamma[channel] = static_cast<float>(channel_centered[c]) * inv_std(channel);
      }
      if (!dx) continue;  // the bias's gradient alone
      const auto at_block = [&](int64_t channel) { return static_cast<size_t>(channel - b.first_channel); };
      Spread(
          d, b, [&](int64_t channel) { return gamma[channel] * inv_std(channel); }, scale.data());
      Spread(
          d, b, [&](int64_t channel) { return static_cast<float>(channel_dy[at_block(channel)] / count); },
          mean_dy.data());
      Spread(
          d, b,
          [&](int64_t channel) {
            const float i = inv_std(channel);
            return static_cast<float>(channel_centered[at_block(channel)] / count) * i * i;
          },
          per_centered.data());
      for (int64_t n = 0; n < d.n; ++n) {
        const float* in = x + n * stride + at;
        float* out = dx + n * stride + at;
        const float* grad = kFused != Fused::kNone ? out : dy + n * stride + at;
#pragma omp simd
        for (int64_t l = 0; l < b.lanes; ++l) {
          out[l] = scale[l] * (grad[l] - mean_dy[l] - (in[l] - m[l]) * per_centered[l]);
        }
      }
    }
  }
}

// Its backward at the forward's batch statistics: with xhat = (x - mean) / sqrt(var + eps) and M = N H W,
// dbeta = sum dY, dgamma = sum dY xhat, dX = gamma / sqrt(var + eps) (dY - dbeta / M - xhat dgamma / M),
// dY masked by the fused activation's gradient.
template <Fused kFused>
EDGECOST_VECTOR_CLONES void BatchNormBackward(const BatchNormShape& d, float upper, const float* x, const float* dy,
                                              const float* gamma, const float* beta, const float* mean,
                                              const float* variance, float* dx, float* dgamma, float* dbeta) {
  if (d.hw <= kLanesMaxValues) {
    return BatchNormBackwardLanes<kFused>(d, upper, x, dy, gamma, beta, mean, variance, dx, dgamma, dbeta);
  }
  const double count = static_cast<double>(d.n * d.hw);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.c; ++c) {
    const float m = mean[c], inv_std = 1.0f / std::sqrt(variance[c] + d.epsilon);
    const float forward_scale = ForwardScale(gamma[c], variance[c], d.epsilon), shift = beta[c];
    // With an activation, the first pass keeps the masked dY in dX for the second to read (and to
    // overwrite), instead of computing the mask twice.
    double sum_dy = 0, sum_dy_centered = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const float* plane = x + (n * d.c + c) * d.hw;
      const float* grad = dy + (n * d.c + c) * d.hw;
      if (kFused != Fused::kNone && dx) {
        float* masked = dx + (n * d.c + c) * d.hw;
#pragma omp simd reduction(+ : sum_dy, sum_dy_centered)
        for (int64_t k = 0; k < d.hw; ++k) {
          const float g = Masked<kFused>(upper, grad[k], plane[k], m, forward_scale, shift);
          masked[k] = g;
          sum_dy += g;
          sum_dy_centered += static_cast<double>(g) * (plane[k] - m);
        }
        continue;
      }
#pragma omp simd reduction(+ : sum_dy, sum_dy_centered)
      for (int64_t k = 0; k < d.hw; ++k) {
        const float g = Masked<kFused>(upper, grad[k], plane[k], m, forward_scale, shift);
        sum_dy += g;
        sum_dy_centered += static_cast<double>(g) * (plane[k] - m);
      }
    }
    const float db = static_cast<float>(sum_dy), dg = static_cast<float>(sum_dy_centered) * inv_std;
    dbeta[c] = db;
    if (!dx) continue;  // the bias's gradient alone
    dgamma[c] = dg;
    const float scale = gamma[c] * inv_std;
    const float mean_dy = static_cast<float>(sum_dy / count);
    const float per_centered = static_cast<float>(sum_dy_centered / count) * inv_std * inv_std;
    for (int64_t n = 0; n < d.n; ++n) {
      const float* plane = x + (n * d.c + c) * d.hw;
      float* out = dx + (n * d.c + c) * d.hw;
      const float* grad = kFused != Fused::kNone ? out : dy + (n * d.c + c) * d.hw;
#pragma omp simd
      for (int64_t k = 0; k < d.hw; ++k) out[k] = scale * (grad[k] - mean_dy - (plane[k] - m) * per_centered);
    }
  }
}

// Batch norm on channels-last maps: N H W rows of C channels, each loop vectorized across the
// channels. The rows are summed in chunks fixed by the shape alone, then the chunks in order, so
// the sums are the same whatever the thread count.
constexpr int64_t kRowChunkValues = 8192;  // 32 KB of floats: a chunk's second pass reads L1 or L2

struct RowChunks {
  int64_t rows, per_chunk, count;
  explicit RowChunks(const BatchNormShape& d)
      : rows(d.n * d.hw),
        per_chunk(std::max<int64_t>(1, kRowChunkValues / d.c)),
        count((rows + per_chunk - 1) / per_chunk) {}
  int64_t begin(int64_t chunk) const { return chunk * per_chunk; }
  int64_t end(int64_t chunk) const { return std::min(rows, (chunk + 1) * per_chunk); }
};

// y = act(normalized x) row by row, from per-channel mean, scale and shift.
template <Fused kFused>
EDGECOST_VECTOR_CLONES void NormalizeRows(const BatchNormShape& d, const RowChunks& chunks, float upper, const float* x,
                                          const float* m, const float* scale, const float* shift, float* y) {
  const int64_t c = d.c;
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks.count; ++chunk) {
    for (int64_t r = chunks.begin(chunk); r < chunks.end(chunk); ++r) {
      const float* in = x + r * c;
      float* out = y + r * c;
#pragma omp simd
      for (int64_t k = 0; k < c; ++k) out[k] = Activated<kFused>(Normalized(in[k], m[k], scale[k], shift[k]), upper);
    }
  }
}

// Each chunk's sum and its sum of squares about its own mean `chunk_mean` (rounded to float, as the
// NCHW passes centre), then the batch's: sum (x - mean)^2 over a chunk is its squares about
// chunk_mean + 2 (chunk_mean - mean)(sum - n chunk_mean) + n (chunk_mean - mean)^2, exactly.
template <Fused kFused>
EDGECOST_VECTOR_CLONES void BatchNormForwardRows(const BatchNormShape& d, float upper, const float* x,
                                                 const float* gamma, const float* beta, float* mean, float* variance,
                                                 float* y) {
  const RowChunks chunks(d);
  const int64_t c = d.c;
  std::vector<double> sums(static_cast<size_t>(chunks.count * c)), squares(sums.size());
  std::vector<float> chunk_means(sums.size());
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks.count; ++chunk) {
    double* sum = sums.data() + chunk * c;
    double* square = squares.data() + chunk * c;
    float* m = chunk_means.data() + chunk * c;
    for (int64_t r = chunks.begin(chunk); r < chunks.end(chunk); ++r) {
      const float* in = x + r * c;
#pragma omp simd
      for (int64_t k = 0; k < c; ++k) sum[k] += in[k];
    }
    const double values = static_cast<double>(chunks.end(chunk) - chunks.begin(chunk));
    for (int64_t k = 0; k < c; ++k) m[k] = static_cast<float>(sum[k] / values);
    for (int64_t r = chunks.begin(chunk); r < chunks.end(chunk); ++r) {
      const float* in = x + r * c;
#pragma omp simd
      for (int64_t k = 0; k < c; ++k) {
        const float centered = in[k] - m[k];
        square[k] += static_cast<double>(centered) * centered;
      }
    }
  }
  const double count = static_cast<double>(chunks.rows);
  std::vector<float> scale(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) {
    double sum = 0;
    for (int64_t chunk = 0; chunk < chunks.count; ++chunk) sum += sums[chunk * c + k];
    const double batch_mean = sum / count;
    double centered = 0;
    for (int64_t chunk = 0; chunk < chunks.count; ++chunk) {
      const double values = static_cast<double>(chunks.end(chunk) - chunks.begin(chunk));
      const double offset = chunk_means[chunk * c + k] - batch_mean;
      centered += squares[chunk * c + k] + 2 * offset * (sums[chunk * c + k] - values * chunk_means[chunk * c + k]) +
                  values * offset * offset;
    }
    mean[k] = static_cast<float>(batch_mean);
    variance[k] = static_cast<float>(centered / count);
    scale[k] = ForwardScale(gamma[k], variance[k], d.epsilon);
  }
  NormalizeRows<kFused>(d, chunks, upper, x, mean, scale.data(), beta, y);
}

// The backward on channels-last maps, the sums in chunks as BatchNormForwardRows.
template <Fused kFused>
EDGECOST_VECTOR_CLONES void BatchNormBackwardRows(const BatchNormShape& d, float upper, const float* x, const float* dy,
                                                  const float* gamma, const float* beta, const float* mean,
                                                  const float* variance, float* dx, float* dgamma, float* dbeta) {
  const RowChunks chunks(d);
  const int64_t c = d.c;
  std::vector<float> forward_scale(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) forward_scale[k] = ForwardScale(gamma[k], variance[k], d.epsilon);
  std::vector<double> sums_dy(static_cast<size_t>(chunks.count * c)), sums_centered(sums_dy.size());
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks.count; ++chunk) {
    double* sum_dy = sums_dy.data() + chunk * c;
    double* sum_centered = sums_centered.data() + chunk * c;
    const float* fs = forward_scale.data();
    for (int64_t r = chunks.begin(chunk); r < chunks.end(chunk); ++r) {
      MaskedSums<kFused>(c, upper, x + r * c, dy + r * c, mean, fs, beta, dx ? dx + r * c : nullptr, sum_dy,
                         sum_centered);
    }
  }
  const double count = static_cast<double>(chunks.rows);
  std::vector<float> scale(static_cast<size_t>(c)), mean_dy(scale.size()), per_centered(scale.size());
  for (int64_t k = 0; k < c; ++k) {
    double channel_dy = 0, channel_centered = 0;
    for (int64_t chunk = 0; chunk < chunks.count; ++chunk) {
      channel_dy += sums_dy[chunk * c + k];
      channel_centered += sums_centered[chunk * c + k];
    }
    const float inv_std = 1.0f / std::sqrt(variance[k] + d.epsilon);
    dbeta[k] = static_cast<float>(channel_dy);
    if (!dx) continue;  // the bias's gradient alone
    dgamma[k] = static_cast<float>(channel_centered) * inv_std;
    scale[k] = gamma[k] * inv_std;
    mean_dy[k] = static_cast<float>(channel_dy / count);
    per_centered[k] = static_cast<float>(channel_centered / count) * inv_std * inv_std;
  }
  if (!dx) return;
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks.count; ++chunk) {
    for (int64_t r = chunks.begin(chunk); r < chunks.end(chunk); ++r) {
      const float* in = x + r * c;
      float* out = dx + r * c;
      const float* grad = kFused != Fused::kNone ? out : dy + r * c;
#pragma omp simd
      for (int64_t k = 0; k < c; ++k) {
        out[k] = scale[k] * (grad[k] - mean_dy[k] - (in[k] - mean[k]) * per_centered[k]);
      }
    }
  }
}

// Batch norm, `kind` kBatchNorm2d, or with the activation that follows it fused: kBatchNormRelu,
// kBatchNormRelu6, kBatchNormSilu, kBatchNormHardSwish.
class BatchNorm2d : public StepLayer {
 public:
  BatchNorm2d(Backend& b, const LayerSpec& spec, uint32_t seed, graph::OpKind kind) : StepLayer(b, seed) {
    InitTensors(spec);
    const int64_t channels = spec.input_shapes[0][1];
    Tensor& scale = Param({channels}, 0.1f);
    for (float& g : scale.data) g += 1.0f;
    Param({channels}, 0.1f);  // shift
    Tensor& mean = Own({channels});
    Tensor& variance = Own({channels});
    batch_mean_ = &mean;
    batch_variance_ = &variance;
    running_mean_ = &Own({channels});  // PyTorch's initial running statistics: mean 0, variance 1
    running_variance_ = &Own({channels});
    std::fill(running_variance_->data.begin(), running_variance_->data.end(), 1.0f);
    values_per_channel_ = Elements(spec.input_shapes[0]) / channels;
    Tensor& x = inputs_[0];
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    const auto epsilon = spec.attributes.find("epsilon_e9");  // else PyTorch's default
    const float kEpsilon = epsilon == spec.attributes.end() ? 1e-5f : static_cast<float>(epsilon->second) * 1e-9f;
    // Training passes: our own loops, one channel at a time (see BatchNormForward); inference
    // (running statistics, one pass) stays oneDNN's.
    const BatchNormShape shape{x.dims[0], channels, values_per_channel_ / x.dims[0], kEpsilon};
    const float upper = kind == graph::OpKind::kBatchNormRelu6 ? 6.0f : std::numeric_limits<float>::infinity();
    const Fused fused = FusedActivation(kind);
    // The passes' instances, in Fused's order, for NCHW and for channels-last maps.
    const auto forward =
        x.channels_last
            ? std::array{BatchNormForwardRows<Fused::kNone>, BatchNormForwardRows<Fused::kClip>,
                         BatchNormForwardRows<Fused::kSilu>,
                         BatchNormForwardRows<Fused::kHardSwish>}[static_cast<size_t>(fused)]
            : std::array{BatchNormForward<Fused::kNone>, BatchNormForward<Fused::kClip>, BatchNormForward<Fused::kSilu>,
                         BatchNormForward<Fused::kHardSwish>}[static_cast<size_t>(fused)];
    const auto backward = x.channels_last
                              ? std::array{BatchNormBackwardRows<Fused::kNone>, BatchNormBackwardRows<Fused::kClip>,
                                           BatchNormBackwardRows<Fused::kSilu>,
                                           BatchNormBackwardRows<Fused::kHardSwish>}[static_cast<size_t>(fused)]
                              : std::array{BatchNormBackward<Fused::kNone>, BatchNormBackward<Fused::kClip>,
                                           BatchNormBackward<Fused::kSilu>,
                                           BatchNormBackward<Fused::kHardSwish>}[static_cast<size_t>(fused)];
    forward_.push_back({dnnl::primitive(),
                        {{DNNL_ARG_SRC, Mem(x)},
                         {DNNL_ARG_DST, Mem(output_)},
                         {DNNL_ARG_SCALE, Mem(scale)},
                         {DNNL_ARG_SHIFT, Mem(*params_[1])},
                         {DNNL_ARG_MEAN, Mem(mean)},
                         {DNNL_ARG_VARIANCE, Mem(variance)}},
                        nullptr,
                        [shape, upper, forward](const std::unordered_map<int, memory>& a) {
                          forward(shape, upper, Data(a.at(DNNL_ARG_SRC)), Data(a.at(DNNL_ARG_SCALE)),
                                  Data(a.at(DNNL_ARG_SHIFT)), Data(a.at(DNNL_ARG_MEAN)),
                                  Data(a.at(DNNL_ARG_VARIANCE)), Data(a.at(DNNL_ARG_DST)));
                        }});
    // One kernel gives dX, dgamma and dbeta: the input and weight passes run it. Bias-only
    // training needs dbeta alone: the sum of dY over all but the channel axis, which reads no X
    // unless an activation's mask applies (then the kernel runs without dX).
    const auto add_backward = [&](std::vector<Step>& pass, bool dx) {
      pass.push_back({dnnl::primitive(),
                      {{DNNL_ARG_SRC, Mem(x)},
                       {DNNL_ARG_MEAN, Mem(mean)},
                       {DNNL_ARG_VARIANCE, Mem(variance)},
                       {DNNL_ARG_DIFF_DST, Mem(grad_output_)},
                       {DNNL_ARG_SCALE, Mem(scale)},
                       {DNNL_ARG_SHIFT, Mem(*params_[1])},
                       {DNNL_ARG_DIFF_SRC, Mem(grad_inputs_[0])},
                       {DNNL_ARG_DIFF_SCALE, Mem(*grad_params_[0])},
                       {DNNL_ARG_DIFF_SHIFT, Mem(*grad_params_[1])}},
                      nullptr,
                      [shape, upper, backward, dx](const std::unordered_map<int, memory>& a) {
                        backward(shape, upper, Data(a.at(DNNL_ARG_SRC)), Data(a.at(DNNL_ARG_DIFF_DST)),
                                 Data(a.at(DNNL_ARG_SCALE)), Data(a.at(DNNL_ARG_SHIFT)), Data(a.at(DNNL_ARG_MEAN)),
                                 Data(a.at(DNNL_ARG_VARIANCE)), dx ? Data(a.at(DNNL_ARG_DIFF_SRC)) : nullptr,
                                 Data(a.at(DNNL_ARG_DIFF_SCALE)), Data(a.at(DNNL_ARG_DIFF_SHIFT)));
                      }});
    };
    add_backward(backward_input_, true);
    add_backward(backward_weights_, true);
    if (fused != Fused::kNone) {
      add_backward(backward_bias_, false);
    } else {
      AddChannelSums(backward_bias_, grad_output_, *grad_params_[1]);
    }
    dnnl::batch_normalization_forward::primitive_desc inference(
        dnnl::batch_normalization_forward::desc(prop_kind::forward_inference, Desc(x), kEpsilon,
                                                flags | dnnl::normalization_flags::use_global_stats),
        attr_, backend_.engine());
    Add(inference_, inference,
        {{DNNL_ARG_SRC, Mem(x)},
         {DNNL_ARG_DST, Mem(output_)},
         {DNNL_ARG_SCALE, Mem(scale)},
         {DNNL_ARG_SHIFT, Mem(*params_[1])},
         {DNNL_ARG_MEAN, Mem(*running_mean_)},
         {DNNL_ARG_VARIANCE, Mem(*running_variance_)}});
    if (fused != Fused::kNone) {
      const auto [alg, alpha, beta] = fused == Fused::kClip   ? std::tuple(algorithm::eltwise_clip_v2, 0.0f, upper)
                                      : fused == Fused::kSilu ? std::tuple(algorithm::eltwise_swish, 1.0f, 0.0f)
                                                              : std::tuple(algorithm::eltwise_hardswish, 0.0f, 0.0f);
      const dnnl::eltwise_forward::desc act(prop_kind::forward_inference, alg, Desc(output_), alpha, beta);
      Add(inference_, dnnl::eltwise_forward::primitive_desc(act, attr_, backend_.engine()),
          {{DNNL_ARG_SRC, Mem(output_)}, {DNNL_ARG_DST, Mem(output_)}});
    }
    Forward();  // batch statistics for the backward pass
  }

  void UpdateRunningStats() override {
    constexpr float kMomentum = 0.1f;  // PyTorch's default
    // oneDNN's batch variance divides by n; PyTorch's running variance is the unbiased one.
    const float unbiased = values_per_channel_ > 1
                               ? static_cast<float>(values_per_channel_) / static_cast<float>(values_per_channel_ - 1)
                               : 1.0f;
    for (size_t c = 0; c < running_mean_->data.size(); ++c) {
      running_mean_->data[c] = (1 - kMomentum) * running_mean_->data[c] + kMomentum * batch_mean_->data[c];
      running_variance_->data[c] =
          (1 - kMomentum) * running_variance_->data[c] + kMomentum * unbiased * batch_variance_->data[c];
    }
    ++batches_tracked_;
  }
  std::vector<Tensor*> running_stats() override { return {running_mean_, running_variance_}; }
  int64_t* batches_tracked() override { return &batches_tracked_; }

 private:
  Tensor *batch_mean_ = nullptr, *batch_variance_ = nullptr;
  Tensor *running_mean_ = nullptr, *running_variance_ = nullptr;
  int64_t values_per_channel_ = 1;  // N x H x W: what each channel's batch statistics average over
  int64_t batches_tracked_ = 0;
};

class Relu : public StepLayer {
 public:
  Relu(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitTensors(spec);
    const memory::desc md = Desc(output_);
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
    InitTensors(spec);
    const int64_t k = spec.attributes.at("kernel"), s = spec.attributes.at("stride");
    const auto padding = spec.attributes.find("padding");
    const int64_t p = padding == spec.attributes.end() ? 0 : padding->second;
    const Dims& x = inputs_[0].dims;
    // The output size is floored; the right padding absorbs what the last window leaves out.
    const memory::dims strides = {s, s}, kernel = {k, k}, pad_l = {p, p};
    const memory::dims pad_r = {(output_.dims[2] - 1) * s + k - x[2] - p, (output_.dims[3] - 1) * s + k - x[3] - p};
    const bool include_padding = spec.attributes.count("count_include_pad") && spec.attributes.at("count_include_pad");
    const algorithm alg = max               ? algorithm::pooling_max
                          : include_padding ? algorithm::pooling_avg_include_padding
                                            : algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_forward::primitive_desc fwd(
        dnnl::pooling_forward::desc(prop_kind::forward_training, alg, Desc(inputs_[0]), Desc(output_), strides, kernel,
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
        dnnl::pooling_backward::desc(alg, Desc(inputs_[0]), Desc(output_), strides, kernel, pad_l, pad_r), attr_,
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

// A dropout mask's keep decisions as a pure function of (key, element): a counter-based draw, two
// rounds of Wellons' lowbias32 integer hash (each a bijection on 32 bits). Nothing is stored or
// drawn ahead: the forward pass, a recomputation and the backward pass hash the same elements to the
// same decisions, on any number of threads, and the loop vectorizes.
struct DropoutDraw {
  uint32_t key0 = 0, key1 = 0;
  uint32_t drop_below = 0;  // an element whose hash is below this is dropped: ratio x 2^32
  float kept = 1.0f;        // 1 / (1 - ratio), the kept elements' scale

  static uint32_t Hash(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
  }
  // The factor, 0 or `kept`, of the element (or row) whose index has low half `low` and high half
  // `high`, from the draw's fields passed as values (a loop's locals, which its output cannot alias).
  static float FactorOf(uint32_t low, uint32_t high, uint32_t key0, uint32_t key1, uint32_t drop_below, float kept) {
    return Hash(Hash(low ^ key0) + key1 + high) >= drop_below ? kept : 0.0f;
  }
  float Factor(uint64_t i) const {
    return FactorOf(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), key0, key1, drop_below, kept);
  }
};

// out[i] = in[i] x the factor of element i, or of its row (stochastic depth: `per_row` > 0).
EDGECOST_VECTOR_CLONES void ApplyDropout(const DropoutDraw& draw, int64_t size, int64_t per_row, const float* in,
                                         float* out) {
  if (per_row > 0) {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < size / per_row; ++row) {
      const float factor = draw.Factor(static_cast<uint64_t>(row));
#pragma omp simd
      for (int64_t i = row * per_row; i < (row + 1) * per_row; ++i) out[i] = in[i] * factor;
    }
    return;
  }
  constexpr int64_t kChunk = 1 << 14;  // divides 2^32: a chunk's indices share their high half
  const int64_t chunks = (size + kChunk - 1) / kChunk;
  const uint32_t key0 = draw.key0, key1 = draw.key1, drop_below = draw.drop_below;
  const float kept = draw.kept;
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk, count = std::min(kChunk, size - begin);
    const auto low = static_cast<uint32_t>(begin), high = static_cast<uint32_t>(begin >> 32);
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) {
      const float factor = DropoutDraw::FactorOf(low + static_cast<uint32_t>(j), high, key0, key1, drop_below,
                                                 kept);  // Factor(begin + j)
      out[begin + j] = in[begin + j] * factor;
    }
  }
}

// Inverted dropout: Y = X * mask, mask in {0, 1/(1-p)}, p the attribute ratio_ppm in millionths
// (0.1 without it). The mask is a function of (seed, step, element) (DropoutDraw): the layer's seed
// is the run's seed plus its node, so masks differ between nodes, steps and seeds, and every pass
// of one step (a recomputed forward, the backward) multiplies by the same mask, which no pass stores.
class Dropout : public StepLayer {
 public:
  Dropout(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed), seed_(seed) {
    InitTensors(spec);
    const double ratio = DropoutRatio(spec);
    draw_.drop_below = static_cast<uint32_t>(std::min(ratio * 4294967296.0, 4294967295.0));
    draw_.kept = static_cast<float>(1.0 / (1.0 - ratio));
    SetTrainingStep(0);
    // Stochastic depth draws once per sample, for all of its elements.
    const bool rows = spec.attributes.count("rows") && spec.attributes.at("rows") != 0;
    const int64_t size = output_.size();
    const int64_t per_row = !rows ? 0 : output_.dims.empty() || output_.dims[0] == 0 ? size : size / output_.dims[0];
    const auto add_pass = [&](std::vector<Step>& pass, Tensor& in, Tensor& out) {
      pass.push_back({dnnl::primitive(),
                      {{DNNL_ARG_SRC, Mem(in)}, {DNNL_ARG_DST, Mem(out)}},
                      nullptr,
                      [this, size, per_row](const std::unordered_map<int, memory>& a) {
                        ApplyDropout(draw_, size, per_row, Data(a.at(DNNL_ARG_SRC)), Data(a.at(DNNL_ARG_DST)));
                      }});
    };
    add_pass(forward_, inputs_[0], output_);
    add_pass(backward_input_, grad_output_, grad_inputs_[0]);
    const memory::desc flat = Plain({size});
    AddReorder(inference_, Mem(inputs_[0], flat), Mem(output_, flat));  // no dropout in inference
  }

  void SetTrainingStep(uint64_t step) override {
    const uint64_t key = SplitMix64(SplitMix64(seed_) ^ step);
    draw_.key0 = static_cast<uint32_t>(key);
    draw_.key1 = static_cast<uint32_t>(key >> 32);
  }

 private:
  static double DropoutRatio(const LayerSpec& spec) {
    auto it = spec.attributes.find(graph::kDropoutRatioAttribute);
    return it == spec.attributes.end() ? graph::kDefaultDropoutRatio : static_cast<double>(it->second) * 1e-6;
  }
  static uint64_t SplitMix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  uint32_t seed_;
  DropoutDraw draw_;  // this step's keys
};

// Residual add. POET's ResNet-50 adds a smaller tensor into a larger one (zero padding):
// then the second input is added into the leading part of the first.
class Add2 : public StepLayer {
 public:
  Add2(Backend& b, const LayerSpec& spec, uint32_t seed) : StepLayer(b, seed) {
    InitTensors(spec);
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

std::unique_ptr<Layer> MakeCoreLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed) {
  using graph::OpKind;
  switch (kind) {
    case OpKind::kConv2d:
      return std::make_unique<Conv2d>(backend, spec, seed);
    case OpKind::kLinear:
      return std::make_unique<Linear>(backend, spec, seed, false, !spec.attributes.count("no_bias"));
    case OpKind::kLinearRelu:
      return std::make_unique<Linear>(backend, spec, seed, true, true);
    case OpKind::kQkvProjection:
      return std::make_unique<Linear>(backend, spec, seed, false, false);
    case OpKind::kBatchNorm2d:
    case OpKind::kBatchNormRelu:
    case OpKind::kBatchNormRelu6:
    case OpKind::kBatchNormSilu:
    case OpKind::kBatchNormHardSwish:
      return std::make_unique<BatchNorm2d>(backend, spec, seed, kind);
    case OpKind::kRelu:
      return std::make_unique<Relu>(backend, spec, seed);
    case OpKind::kMaxPool2d:
      return std::make_unique<Pool2d>(backend, spec, seed, true);
    case OpKind::kAvgPool2d:
      return std::make_unique<Pool2d>(backend, spec, seed, false);
    case OpKind::kFlatten:
      return std::make_unique<Flatten>(backend, spec, seed);
    case OpKind::kReshape:
      return std::make_unique<Flatten>(backend, spec, seed);  // a view in frameworks, a copy as a kernel
    case OpKind::kDropout:
      return std::make_unique<Dropout>(backend, spec, seed);
    case OpKind::kAdd:
      return std::make_unique<Add2>(backend, spec, seed);
    case OpKind::kAttentionScores:
      return std::make_unique<AttentionScores>(backend, spec, seed);
    case OpKind::kAttentionContext:
      return std::make_unique<AttentionContext>(backend, spec, seed);
    case OpKind::kCrossEntropyLoss:
      return std::make_unique<CrossEntropyLoss>(backend, spec, seed);
    default:
      return nullptr;
  }
}

std::unique_ptr<Layer> MakeGradSumLayer(Backend& backend, const Dims& shape, int parts, uint32_t seed) {
  return std::make_unique<GradSum>(backend, shape, parts, seed);
}

}  // namespace edgecost::kernels::detail

namespace edgecost::kernels {

bool WeightGradientRepaysTeam(const LayerSpec& spec, int threads) {
  if (spec.kind != graph::OpKindName(graph::OpKind::kConv2d) || threads <= 1) return true;
  const auto attribute = [&](const char* name, int64_t fallback) {
    auto it = spec.attributes.find(name);
    return it == spec.attributes.end() ? fallback : it->second;
  };
  const int64_t kh = attribute("kernel", 1), kernel_pixels = kh * attribute("kernel_w", kh);
  const int64_t groups = attribute("groups", 1);
  if (detail::PrefersBlocked(groups, kernel_pixels)) return true;
  if (attribute(graph::kChannelsLastInputsAttribute, 0) != 0 ||
      attribute(graph::kChannelsLastOutputAttribute, 0) != 0) {
    return true;  // one matmul over the batch's pixels (BuildChannelsLastGemm), which splits its output
  }
  const Dims& y = spec.output_shape;
  const int64_t padding = std::max(attribute("padding", 0), attribute("padding_w", 0));
  if (detail::FoldsBatchIntoOneGemm(y[0], groups, kernel_pixels, attribute("stride", 1), padding, y[2] * y[3])) {
    return true;  // a matmul, which splits its output between threads
  }
  return y[0] * y[2] * y[3] >= detail::kMinReductionRowsPerThread * threads;
}

}  // namespace edgecost::kernels
