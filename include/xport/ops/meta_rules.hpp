// xport/ops/meta_rules.hpp: output shapes for ops whose meta kernel LibTorch lacks.
// Each rule reads the op's arguments (tensors already on the meta device) and returns meta
// tensors of the outputs' sizes and dtypes; nothing runs on data. The set covers the gaps that
// real models hit (conv, batch/layer/group norm, relu, hardtanh, index_select/embedding, where,
// var/std, adaptive pooling, attention); later LibTorch versions have meta kernels for most of them and
// never reach this table.
#pragma once

#include <algorithm>    // std::max
#include <cstdint>      // std::int64_t
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/result_type.h>
#include <c10/util/Exception.h>

#include <xport/config.hpp>
#include <xport/ops/shape_formulas.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

using meta_stack = std::vector<c10::IValue>;
using meta_rule = std::vector<at::Tensor> (*)(const meta_stack&);

inline at::Tensor meta_empty(std::vector<std::int64_t> sizes, c10::ScalarType dtype) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(c10::kMeta));
}

inline std::vector<std::int64_t> sizes_of(const at::Tensor& t) {
  return {t.sizes().begin(), t.sizes().end()};
}

inline std::vector<std::int64_t> int_list(const c10::IValue& v) {
  if (v.isInt()) return {v.toInt()};
  const auto l = v.toIntList();
  return {l.begin(), l.end()};
}

inline std::int64_t wrap_dim(std::int64_t d, std::int64_t rank) {
  const auto r = std::max<std::int64_t>(rank, 1);
  return d < 0 ? d + r : d;
}

inline std::vector<std::int64_t> broadcast_sizes(const std::vector<std::vector<std::int64_t>>& shapes) {
  std::size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<std::int64_t> out(rank, 1);
  for (const auto& s : shapes)
    for (std::size_t i = 0; i < s.size(); ++i) {
      auto& o = out[rank - s.size() + i];
      if (s[i] != 1) o = s[i];
    }
  return out;
}

// ---- elementwise: same shape and dtype as the first argument --------------------------------
inline std::vector<at::Tensor> rule_like_self(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  return {meta_empty(sizes_of(x), x.scalar_type())};
}

inline std::vector<at::Tensor> rule_like_self_bool(const meta_stack& s) {
  return {meta_empty(sizes_of(s[0].toTensor()), c10::kBool)};
}

inline std::vector<at::Tensor> rule_like_self_real(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto t = x.scalar_type();
  const auto out = t == c10::kComplexFloat    ? c10::kFloat
                   : t == c10::kComplexDouble ? c10::kDouble
                   : c10::isFloatingType(t)   ? t
                                              : c10::kFloat;
  return {meta_empty(sizes_of(x), out)};
}

// full reductions to a 0-dim tensor (max(), min(), median(), trace())
inline std::vector<at::Tensor> rule_reduce_all(const meta_stack& s) {
  return {meta_empty({}, s[0].toTensor().scalar_type())};
}
// prod() / nansum(): integral inputs accumulate in int64
inline std::vector<at::Tensor> rule_reduce_all_promote(const meta_stack& s) {
  const auto t = s[0].toTensor().scalar_type();
  return {meta_empty({}, c10::isIntegralType(t, /*includeBool=*/true) ? c10::kLong : t)};
}
inline std::vector<at::Tensor> rule_count_all(const meta_stack&) {
  return {meta_empty({}, c10::kLong)};
}

// native_dropout(input, p, train?) -> (output, mask); LibTorch 1.13's CPU kernel returns a mask
// of the input's dtype in training, a bool mask otherwise.
inline std::vector<at::Tensor> rule_native_dropout(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const bool train = s[2].isNone() || s[2].toBool();
  return {meta_empty(sizes_of(x), x.scalar_type()), meta_empty(sizes_of(x), train ? x.scalar_type() : c10::kBool)};
}

// ---- convolution ----------------------------------------------------------------------------
inline std::vector<std::int64_t> conv_out_sizes(const at::Tensor& input, const at::Tensor& weight,
                                                std::vector<std::int64_t> stride,
                                                std::vector<std::int64_t> padding,
                                                std::vector<std::int64_t> dilation, bool transposed,
                                                std::vector<std::int64_t> output_padding,
                                                std::int64_t groups) {
  const auto in = sizes_of(input);
  const auto w = sizes_of(weight);
  const std::size_t spatial = w.size() - 2;
  const bool batched = in.size() == w.size();
  const auto pick = [](const std::vector<std::int64_t>& v, std::size_t i, std::int64_t dflt) {
    return v.empty() ? dflt : v[v.size() == 1 ? 0 : i];
  };
  std::vector<std::int64_t> out;
  if (batched) out.push_back(in[0]);
  out.push_back(transposed ? w[1] * groups : w[0]);
  const std::size_t off = batched ? 2 : 1;
  for (std::size_t i = 0; i < spatial; ++i) {
    const auto k = w[2 + i];
    const auto st = pick(stride, i, 1), pd = pick(padding, i, 0), dl = pick(dilation, i, 1);
    const auto x = in[off + i];
    out.push_back(transposed ? transposed_window_output_size(x, k, st, pd, dl, pick(output_padding, i, 0))
                             : window_output_size(x, k, st, pd, dl));
  }
  return out;
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
// _convolution(... same ..., benchmark, deterministic, cudnn_enabled, allow_tf32)
inline std::vector<at::Tensor> rule_convolution(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto& w = s[1].toTensor();
  return {meta_empty(conv_out_sizes(x, w, int_list(s[3]), int_list(s[4]), int_list(s[5]),
                                    s[6].toBool(), int_list(s[7]), s[8].toInt()),
                     x.scalar_type())};
}

// conv{1,2,3}d(input, weight, bias?, stride, padding, dilation, groups); padding may be a string
inline std::vector<at::Tensor> rule_conv_nd(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto& w = s[1].toTensor();
  std::vector<std::int64_t> padding;
  auto stride = int_list(s[3]);
  auto dilation = int_list(s[5]);
  if (s[4].isString()) {
    const std::size_t spatial = static_cast<std::size_t>(w.dim() - 2);
    if (s[4].toStringRef() == "same") {
      // "same" keeps the spatial size (stride 1): report the input's spatial sizes directly.
      auto out = sizes_of(x);
      out[out.size() - spatial - 1] = w.size(0);
      return {meta_empty(out, x.scalar_type())};
    }
    padding.assign(spatial, 0);
  } else {
    padding = int_list(s[4]);
  }
  return {meta_empty(conv_out_sizes(x, w, stride, padding, dilation, false, {}, s[6].toInt()),
                     x.scalar_type())};
}

// conv_transpose{1,2,3}d.input(input, weight, bias?, stride, padding, output_padding, groups, dilation)
inline std::vector<at::Tensor> rule_conv_transpose_nd(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto& w = s[1].toTensor();
  return {meta_empty(conv_out_sizes(x, w, int_list(s[3]), int_list(s[4]), int_list(s[7]), true,
                                    int_list(s[5]), s[6].toInt()),
                     x.scalar_type())};
}

// ---- normalisation --------------------------------------------------------------------------
// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
//   -> (out, save_mean, save_invstd); the saved statistics are [C] when training, [0] otherwise.
inline std::vector<at::Tensor> rule_native_batch_norm(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const bool training = s[5].toBool();
  const std::int64_t c = x.dim() > 1 ? x.size(1) : 1;
  const auto stat_dtype = x.scalar_type() == c10::kHalf || x.scalar_type() == c10::kBFloat16
                              ? c10::kFloat
                              : x.scalar_type();
  const std::int64_t n = training ? c : 0;
  return {meta_empty(sizes_of(x), x.scalar_type()), meta_empty({n}, stat_dtype),
          meta_empty({n}, stat_dtype)};
}

// The _native_batch_norm_legit family (LibTorch >= 2.0; torch has only Python meta kernels for
// them): (out, save_mean, save_rstd), the statistics [C] when training, [0] otherwise, and for
// the functional variant the updated running_mean and running_var ([C]) after them.
// `training_at`: the position of the `training` argument (-1: never training).
inline std::vector<at::Tensor> batch_norm_legit(const meta_stack& s, int training_at, bool functional) {
  const auto& x = s[0].toTensor();
  const bool training = training_at >= 0 && s[static_cast<std::size_t>(training_at)].toBool();
  const std::int64_t c = x.dim() > 1 ? x.size(1) : 1;
  const auto stat_dtype = x.scalar_type() == c10::kHalf || x.scalar_type() == c10::kBFloat16
                              ? c10::kFloat
                              : x.scalar_type();
  std::vector<at::Tensor> out{meta_empty(sizes_of(x), x.scalar_type()), meta_empty({training ? c : 0}, stat_dtype),
                              meta_empty({training ? c : 0}, stat_dtype)};
  if (functional) {
    out.push_back(meta_empty({c}, s[3].toTensor().scalar_type()));
    out.push_back(meta_empty({c}, s[4].toTensor().scalar_type()));
  }
  return out;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
inline std::vector<at::Tensor> rule_native_layer_norm(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto normalized = int_list(s[1]);
  auto stat = sizes_of(x);
  const auto axis = stat.size() - normalized.size();
  for (std::size_t i = axis; i < stat.size(); ++i) stat[i] = 1;
  const auto stat_dtype = x.scalar_type() == c10::kHalf || x.scalar_type() == c10::kBFloat16
                              ? c10::kFloat
                              : x.scalar_type();
  return {meta_empty(sizes_of(x), x.scalar_type()), meta_empty(stat, stat_dtype),
          meta_empty(stat, stat_dtype)};
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd)
inline std::vector<at::Tensor> rule_native_group_norm(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto n = s[3].toInt(), g = s[6].toInt();
  return {meta_empty(sizes_of(x), x.scalar_type()), meta_empty({n, g}, x.scalar_type()),
          meta_empty({n, g}, x.scalar_type())};
}

// ---- indexing -------------------------------------------------------------------------------
// index_select(self, dim, index)
inline std::vector<at::Tensor> rule_index_select(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto& idx = s[2].toTensor();
  auto out = sizes_of(x);
  if (!out.empty()) out[static_cast<std::size_t>(wrap_dim(s[1].toInt(), x.dim()))] = idx.numel();
  return {meta_empty(out, x.scalar_type())};
}

// embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)
inline std::vector<at::Tensor> rule_embedding(const meta_stack& s) {
  const auto& w = s[0].toTensor();
  auto out = sizes_of(s[1].toTensor());
  out.push_back(w.size(1));
  return {meta_empty(out, w.scalar_type())};
}

// where.self(condition, self, other)
inline std::vector<at::Tensor> rule_where(const meta_stack& s) {
  const auto& c = s[0].toTensor();
  const auto& a = s[1].toTensor();
  const auto& b = s[2].toTensor();
  return {meta_empty(broadcast_sizes({sizes_of(c), sizes_of(a), sizes_of(b)}), at::result_type(a, b))};
}

// ---- reductions -----------------------------------------------------------------------------
inline std::vector<std::int64_t> reduced_sizes(const at::Tensor& x, const c10::IValue& dims,
                                               bool keepdim) {
  auto out = sizes_of(x);
  std::vector<bool> reduce(out.size(), dims.isNone());
  if (!dims.isNone())
    for (auto d : int_list(dims)) reduce[static_cast<std::size_t>(wrap_dim(d, x.dim()))] = true;
  if (dims.isIntList() && dims.toIntList().empty()) reduce.assign(out.size(), true);
  std::vector<std::int64_t> r;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!reduce[i]) r.push_back(out[i]);
    else if (keepdim) r.push_back(1);
  }
  return r;
}

inline c10::ScalarType real_dtype(c10::ScalarType t) {
  if (t == c10::kComplexFloat) return c10::kFloat;
  if (t == c10::kComplexDouble) return c10::kDouble;
  if (t == c10::kComplexHalf) return c10::kHalf;
  return t;
}

// var.correction / std.correction(self, dim?, *, correction?, keepdim)
inline std::vector<at::Tensor> rule_var(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  return {meta_empty(reduced_sizes(x, s[1], s[3].toBool()), real_dtype(x.scalar_type()))};
}
// var.dim / std.dim(self, dim?, unbiased, keepdim)
inline std::vector<at::Tensor> rule_var_dim(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  return {meta_empty(reduced_sizes(x, s[1], s[3].toBool()), real_dtype(x.scalar_type()))};
}
// var_mean.correction / std_mean.correction(self, dim?, *, correction?, keepdim)
inline std::vector<at::Tensor> rule_var_mean(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto sz = reduced_sizes(x, s[1], s[3].toBool());
  return {meta_empty(sz, real_dtype(x.scalar_type())), meta_empty(sz, x.scalar_type())};
}

// ---- pooling --------------------------------------------------------------------------------
// _adaptive_avg_pool2d(self, output_size) / adaptive_avg_pool2d, and the 1d/3d variants
inline std::vector<at::Tensor> rule_adaptive_pool(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto os = int_list(s[1]);
  auto out = sizes_of(x);
  for (std::size_t i = 0; i < os.size(); ++i) out[out.size() - os.size() + i] = os[i];
  return {meta_empty(out, x.scalar_type())};
}

// max_pool{2,3}d_with_indices(self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False)
// -> (output, indices): the window count along each spatial dim (ceil mode as ATen's
// pooling_output_shape: a last window that starts in the padding is dropped), indices int64.
inline std::vector<at::Tensor> rule_max_pool_with_indices(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto kernel = int_list(s[1]);
  const auto stride = s.size() > 2 && !int_list(s[2]).empty() ? int_list(s[2]) : kernel;
  const auto pad = s.size() > 3 ? int_list(s[3]) : std::vector<std::int64_t>{0};
  const auto dil = s.size() > 4 ? int_list(s[4]) : std::vector<std::int64_t>{1};
  const bool ceil = s.size() > 5 && s[5].toBool();
  const auto at = [](const std::vector<std::int64_t>& v, std::size_t i) { return v[std::min(i, v.size() - 1)]; };
  auto out = sizes_of(x);
  const auto n = kernel.size();
  for (std::size_t i = 0; i < n && i < out.size(); ++i) {
    const auto in = out[out.size() - n + i];
    const auto k = at(kernel, i), st = at(stride, i), p = at(pad, i), d = at(dil, i);
    const auto span = in + 2 * p - d * (k - 1) - 1 + (ceil ? st - 1 : 0);
    auto len = floor_div(span, st) + 1;
    if (ceil && (len - 1) * st >= in + p) --len;
    out[out.size() - n + i] = len;
  }
  return {meta_empty(out, x.scalar_type()), meta_empty(out, c10::kLong)};
}

// a binary op that broadcasts and promotes (floor_divide): its arguments' broadcast shape, in
// their result type. (Not from zeros: an integer division by zero throws.)
inline std::vector<at::Tensor> rule_broadcast_binary(const meta_stack& s) {
  const auto& a = s[0].toTensor();
  if (s[1].isTensor()) {
    const auto& b = s[1].toTensor();
    return {meta_empty(broadcast_sizes({sizes_of(a), sizes_of(b)}), at::result_type(a, b))};
  }
  return {meta_empty(sizes_of(a), at::result_type(a, s[1].toScalar()))};
}

// logical_and / or / xor: their arguments' broadcast shape, bool (torch's meta is Python's)
inline std::vector<at::Tensor> rule_broadcast_bool(const meta_stack& s) {
  return {meta_empty(broadcast_sizes({sizes_of(s[0].toTensor()), sizes_of(s[1].toTensor())}), c10::kBool)};
}

// _safe_softmax(self, dim, dtype=None): self's shape, in `dtype` where given (torch's meta comes
// from its Python decomposition; LibTorch has none)
inline std::vector<at::Tensor> rule_safe_softmax(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  return {meta_empty(sizes_of(x), s.size() > 2 && !s[2].isNone() ? s[2].toScalarType() : x.scalar_type())};
}

// scaled_dot_product_attention(query, key, value, attn_mask?, dropout_p, is_causal, *, scale?,
// enable_gqa): query's sizes with value's last, in query's dtype. LibTorch's meta run goes down
// its math path, which calls where (no C++ meta kernel); torch's meta is Python's. The shapes are
// checked as the kernel checks them (a model's mistake fails here, not when it runs).
inline std::vector<at::Tensor> rule_scaled_dot_product_attention(const meta_stack& s) {
  const auto& q = s[0].toTensor();
  const auto& k = s[1].toTensor();
  const auto& v = s[2].toTensor();
  TORCH_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
              "query, key and value must have at least 2 dimensions, got ", q.dim(), ", ", k.dim(), " and ", v.dim());
  TORCH_CHECK(q.size(-1) == k.size(-1), "query's last dimension (", q.size(-1), ") must equal key's (", k.size(-1), ")");
  TORCH_CHECK(k.size(-2) == v.size(-2), "key and value must have the same sequence length, got ", k.size(-2),
              " and ", v.size(-2));
  if (s.size() > 3 && s[3].isTensor()) {
    const auto m = sizes_of(s[3].toTensor());
    const std::vector<std::int64_t> scores{q.size(-2), k.size(-2)};
    TORCH_CHECK(m.size() >= 1 && (m.back() == 1 || m.back() == scores[1]) &&
                    (m.size() < 2 || m[m.size() - 2] == 1 || m[m.size() - 2] == scores[0]),
                "attn_mask of sizes ", s[3].toTensor().sizes(), " does not broadcast to the attention scores' [",
                q.size(-2), ", ", k.size(-2), "]");
  }
  auto out = sizes_of(q);
  out.back() = v.size(-1);
  return {meta_empty(out, q.scalar_type())};
}

// _weight_norm_interface(v, g, dim=0) -> (w, norm): w like v, the norm like g (float for a
// bfloat16 g, as torch's decomposition keeps it)
inline std::vector<at::Tensor> rule_weight_norm_interface(const meta_stack& s) {
  const auto& v = s[0].toTensor();
  const auto& g = s[1].toTensor();
  return {meta_empty(sizes_of(v), v.scalar_type()),
          meta_empty(sizes_of(g), g.scalar_type() == c10::kBFloat16 ? c10::kFloat : g.scalar_type())};
}

// ---- backward formulas (what a joint graph records, lower/joint.hpp) ---------------------------
// A gradient has the size and dtype of what it is the gradient of. Ops with an `output_mask`
// give an undefined tensor where the mask is false, as their kernels do.

// the gradient like argument `at` (undefined when `at` is None)
inline at::Tensor like_arg(const meta_stack& s, std::size_t at) {
  return s[at].isTensor() ? meta_empty(sizes_of(s[at].toTensor()), s[at].toTensor().scalar_type()) : at::Tensor();
}

// `grads`, with those output_mask (argument `mask_at`) leaves out undefined
inline std::vector<at::Tensor> masked(const meta_stack& s, std::size_t mask_at, std::vector<at::Tensor> grads) {
  const auto mask = s[mask_at].toBoolList();
  for (std::size_t i = 0; i < grads.size() && i < mask.size(); ++i)
    if (!mask.get(i)) grads[i] = at::Tensor();
  return grads;
}

// like self (argument 1): mse_loss_backward(grad_output, self, target, reduction),
// max_pool2d_with_indices_backward(grad_output, self, ...), _adaptive_avg_pool2d_backward(grad_output, self)
inline std::vector<at::Tensor> rule_like_arg1(const meta_stack& s) { return {like_arg(s, 1)}; }

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
// save_invstd?, train, eps, output_mask) -> (grad_input, grad_weight [C], grad_bias [C])
inline std::vector<at::Tensor> rule_native_batch_norm_backward(const meta_stack& s) {
  const auto& x = s[1].toTensor();
  const std::int64_t c = x.dim() > 1 ? x.size(1) : 1;
  const auto wt = s[2].isTensor() ? s[2].toTensor().scalar_type() : x.scalar_type();
  return masked(s, 9, {like_arg(s, 1), meta_empty({c}, wt), meta_empty({c}, wt)});
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask) -> (grad_input, grad_weight, grad_bias)
inline std::vector<at::Tensor> rule_native_layer_norm_backward(const meta_stack& s) {
  return masked(s, 7, {like_arg(s, 1), like_arg(s, 5), like_arg(s, 6)});
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
inline std::vector<at::Tensor> rule_native_group_norm_backward(const meta_stack& s) {
  const auto c = s[6].toInt();
  const auto dt = s[1].toTensor().scalar_type();
  return masked(s, 9, {like_arg(s, 1), meta_empty({c}, dt), meta_empty({c}, dt)});
}

// convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
inline std::vector<at::Tensor> rule_convolution_backward(const meta_stack& s) {
  const auto dt = s[0].toTensor().scalar_type();
  auto bias = s[3].isNone() ? at::Tensor() : meta_empty(int_list(s[3]), dt);
  return masked(s, 10, {like_arg(s, 1), like_arg(s, 2), bias});
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
inline std::vector<at::Tensor> rule_embedding_dense_backward(const meta_stack& s) {
  const auto& g = s[0].toTensor();
  return {meta_empty({s[2].toInt(), g.size(-1)}, g.scalar_type())};
}

struct meta_rule_entry {
  std::string_view op;
  meta_rule rule;
};

inline constexpr meta_rule_entry meta_rule_table[] = {
    {"aten::abs", rule_like_self},
    {"aten::_safe_softmax", rule_safe_softmax},
    {"aten::scaled_dot_product_attention", rule_scaled_dot_product_attention},
    {"aten::floor_divide", rule_broadcast_binary},
    {"aten::max_pool2d_with_indices", rule_max_pool_with_indices},
    {"aten::max_pool3d_with_indices", rule_max_pool_with_indices},
    {"aten::floor_divide.Scalar", rule_broadcast_binary},
    {"aten::_weight_norm_interface", rule_weight_norm_interface},
    {"aten::absolute", rule_like_self},
    {"aten::log_sigmoid", rule_like_self},
    {"aten::nan_to_num", rule_like_self},
    {"aten::logit", rule_like_self},
    {"aten::special_logit", rule_like_self},
    {"aten::rrelu", rule_like_self},
    {"aten::fliplr", rule_like_self},
    {"aten::flipud", rule_like_self},
    {"aten::isnan", rule_like_self_bool},
    {"aten::isinf", rule_like_self_bool},
    {"aten::isfinite", rule_like_self_bool},
    {"aten::logical_not", rule_like_self_bool},
    {"aten::logical_and", rule_broadcast_bool},
    {"aten::logical_or", rule_broadcast_bool},
    {"aten::logical_xor", rule_broadcast_bool},
    {"aten::angle", rule_like_self_real},
    {"aten::max", rule_reduce_all},
    {"aten::min", rule_reduce_all},
    {"aten::median", rule_reduce_all},
    {"aten::nanmedian", rule_reduce_all},
    {"aten::trace", rule_reduce_all},
    {"aten::prod", rule_reduce_all_promote},
    {"aten::nansum", rule_reduce_all_promote},
    {"aten::count_nonzero", rule_count_all},
    {"aten::relu", rule_like_self},
    {"aten::relu_", rule_like_self},
    {"aten::relu6", rule_like_self},
    {"aten::hardtanh", rule_like_self},
    {"aten::hardtanh_", rule_like_self},
    {"aten::hardswish", rule_like_self},
    {"aten::hardsigmoid", rule_like_self},
    {"aten::prelu", rule_like_self},
    {"aten::_prelu_kernel", rule_like_self},
    {"aten::selu", rule_like_self},
    {"aten::celu", rule_like_self},
    {"aten::mish", rule_like_self},
    {"aten::dropout", rule_like_self},
    {"aten::native_dropout", rule_native_dropout},
    {"aten::alpha_dropout", rule_like_self},
    {"aten::feature_dropout", rule_like_self},
    {"aten::convolution", rule_convolution},
    {"aten::_convolution", rule_convolution},
    {"aten::conv1d", rule_conv_nd},
    {"aten::conv2d", rule_conv_nd},
    {"aten::conv3d", rule_conv_nd},
    {"aten::conv1d.padding", rule_conv_nd},
    {"aten::conv2d.padding", rule_conv_nd},
    {"aten::conv3d.padding", rule_conv_nd},
    {"aten::conv_transpose1d", rule_conv_transpose_nd},
    {"aten::conv_transpose2d.input", rule_conv_transpose_nd},
    {"aten::conv_transpose3d.input", rule_conv_transpose_nd},
    {"aten::native_batch_norm", rule_native_batch_norm},
    {"aten::_native_batch_norm_legit_no_training", [](const meta_stack& s) { return batch_norm_legit(s, -1, false); }},
    {"aten::_native_batch_norm_legit", [](const meta_stack& s) { return batch_norm_legit(s, 5, false); }},
    {"aten::_native_batch_norm_legit.no_stats", [](const meta_stack& s) { return batch_norm_legit(s, 3, false); }},
    {"aten::_native_batch_norm_legit_functional", [](const meta_stack& s) { return batch_norm_legit(s, 5, true); }},
    {"aten::batch_norm", rule_like_self},
    {"aten::instance_norm", rule_like_self},
    {"aten::native_layer_norm", rule_native_layer_norm},
    {"aten::layer_norm", rule_like_self},
    {"aten::native_group_norm", rule_native_group_norm},
    {"aten::group_norm", rule_like_self},
    {"aten::index_select", rule_index_select},
    {"aten::embedding", rule_embedding},
    {"aten::where.self", rule_where},
    {"aten::var.correction", rule_var},
    {"aten::std.correction", rule_var},
    {"aten::var.dim", rule_var_dim},
    {"aten::std.dim", rule_var_dim},
    {"aten::var_mean.correction", rule_var_mean},
    {"aten::std_mean.correction", rule_var_mean},
    {"aten::_adaptive_avg_pool2d", rule_adaptive_pool},
    {"aten::adaptive_avg_pool2d", rule_adaptive_pool},
    {"aten::_adaptive_avg_pool3d", rule_adaptive_pool},
    {"aten::adaptive_avg_pool3d", rule_adaptive_pool},
    {"aten::adaptive_avg_pool1d", rule_adaptive_pool},
    {"aten::mse_loss_backward", rule_like_arg1},
    {"aten::native_dropout_backward", rule_like_self},
    {"aten::max_pool2d_with_indices_backward", rule_like_arg1},
    {"aten::_adaptive_avg_pool2d_backward", rule_like_arg1},
    {"aten::native_batch_norm_backward", rule_native_batch_norm_backward},
    {"aten::native_layer_norm_backward", rule_native_layer_norm_backward},
    {"aten::native_group_norm_backward", rule_native_group_norm_backward},
    {"aten::convolution_backward", rule_convolution_backward},
    {"aten::embedding_dense_backward", rule_embedding_dense_backward},
};

// ---- ops whose output sizes follow from argument sizes alone -----------------------------------
// Note [Shapes from zeros]: these ops have no meta kernel (in 1.13, and many in 2.x too), and
// their outputs' sizes and dtypes depend on their arguments' sizes, dtypes and non-tensor
// arguments only, never on tensor contents. Their CPU kernel runs once on zero-filled tensors
// of the arguments' sizes (zeros are valid data for each: indices, offsets, sorted sequences,
// grid coordinates), and the results' geometry is kept. Only ops known to be shape-only are
// listed: an op whose output size depends on data (nonzero, unique, repeat_interleave with
// tensor repeats, one_hot without num_classes) must never be here.
inline constexpr std::string_view shape_only_ops[] = {
    "aten::flip", "aten::roll", "aten::cdist", "aten::_cdist_forward", "aten::logsumexp",
    "aten::median.dim", "aten::nanmedian.dim", "aten::kthvalue", "aten::mode", "aten::im2col",
    "aten::col2im", "aten::grid_sampler", "aten::grid_sampler_2d", "aten::grid_sampler_3d",
    "aten::_pad_enum", "aten::reflection_pad1d", "aten::reflection_pad2d", "aten::reflection_pad3d",
    "aten::replication_pad1d", "aten::replication_pad2d", "aten::replication_pad3d", "aten::huber_loss",
    "aten::diag", "aten::diag_embed",
    "aten::repeat_interleave.self_int", "aten::searchsorted.Tensor", "aten::searchsorted.Scalar",
    "aten::bucketize.Tensor", "aten::bucketize.Scalar", "aten::channel_shuffle", "aten::native_channel_shuffle",
    "aten::pixel_shuffle", "aten::pixel_unshuffle", "aten::embedding_bag", "aten::embedding_bag.padding_idx",
    "aten::_embedding_bag", "aten::_embedding_bag_forward_only", "aten::one_hot", "aten::log_sigmoid_forward",
    "aten::cummax", "aten::cummin", "aten::logcumsumexp", "aten::renorm", "aten::histc",
};

inline bool is_shape_only(std::string_view qualified) {
  for (auto op : shape_only_ops)
    if (op == qualified) return true;
  return false;
}

/// Note [Shapes from zeros]: the op's results for zero-filled CPU tensors in place of its meta
/// arguments, as meta tensors of the same geometry.
inline std::vector<c10::IValue> shapes_from_zeros(const c10::OperatorHandle& op, const meta_stack& inputs) {
  const auto zeros_like_meta = [](const at::Tensor& t) {
    return t.defined() ? at::zeros(sizes_of(t), at::TensorOptions().dtype(t.scalar_type())) : t;
  };
  std::vector<c10::IValue> stack;
  stack.reserve(inputs.size());
  for (const auto& v : inputs) {
    if (v.isTensor()) {
      stack.emplace_back(zeros_like_meta(v.toTensor()));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> l;
      for (const auto& t : v.toTensorVector()) l.push_back(zeros_like_meta(t));
      stack.emplace_back(std::move(l));
    } else if (v.isDevice() && v.toDevice().is_meta()) {
      stack.emplace_back(c10::Device(c10::kCPU));
    } else {
      stack.push_back(v);
    }
  }
  op.callBoxed(stack);
  for (auto& r : stack) {
    const auto to_meta = [](const at::Tensor& t) {
      return t.defined() ? at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)) : t;
    };
    if (r.isTensor()) {
      r = to_meta(r.toTensor());
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> l;
      for (const auto& t : r.toTensorVector()) l.push_back(to_meta(t));
      r = std::move(l);
    }
  }
  return stack;
}

/// The shape rule for `qualified` ("aten::conv2d", "aten::where.self"), or nullptr.
inline meta_rule find_meta_rule(std::string_view qualified) {
  for (const auto& e : meta_rule_table)
    if (e.op == qualified) return e.rule;
  return nullptr;
}

}  // namespace detail
XPORT_END_NAMESPACE
