// xport/ops/decompositions.hpp: C++ counterparts of the decompositions torch.export's
// run_decompositions() takes from Python (torch._decomp, torch._refs) where they call other ATen
// ops than the op's C++ CompositeImplicitAutograd kernel, or where the op has no such kernel.
// Each records exactly the calls the Python one makes, so the lowered program prints as
// torch's, and computes in the dtypes it does (opmath upcasts: `pw_cast_for_opmath`). Ops not
// listed here lower by their C++ kernel, as torch's do. The elementwise ones, with their type
// promotion, are in ops/decompositions_refs.hpp. The tables are LibTorch >= 2.1's (the 1.13 path
// keeps its own in lower/decompose.hpp).
#pragma once

#include <functional>  // std::function
#include <vector>      // std::vector

#include <ATen/core/ivalue.h>

#include <xport/config.hpp>
#include <xport/detail/compat.hpp>
#include <xport/ops/decompositions_refs.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {
/// A decomposition: the op's arguments (as the dispatcher passes them) in, its results out,
/// computed with at:: calls, which are recorded in place of the op.
using decomposition_fn = std::function<std::vector<c10::IValue>(const std::vector<c10::IValue>& args)>;

}  // namespace detail
XPORT_END_NAMESPACE

#if XPORT_HAS_TORCH_FUNCTIONALIZATION
#include <algorithm>      // std::reverse
#include <cstdint>        // std::int64_t
#include <limits>         // std::numeric_limits
#include <utility>        // std::pair
#include <functional>     // std::function
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/_embedding_bag.h>
#include <ATen/ops/_embedding_bag_forward_only.h>
#include <ATen/ops/_native_batch_norm_legit.h>
#include <ATen/ops/_native_batch_norm_legit_no_training.h>
#include <ATen/ops/alias.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/_unsafe_view.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/clone.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mv.h>
#include <ATen/ops/unsqueeze.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/native_dropout.h>
#include <ATen/ops/permute.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/split_with_sizes.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor_split.h>
#include <ATen/ops/squeeze.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/transpose.h>
#include <ATen/ops/view.h>
#include <ATen/ops/where.h>
#include <ATen/ops/any.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/WrapDimMinimal.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {
namespace torch_decomp {

using S = std::vector<c10::IValue>;

/// What requires grad in torch's tracing (set by the lowering; lower/decompose.hpp).
inline thread_local const std::function<bool(const at::Tensor&)>* requires_grad_query = nullptr;
inline bool requires_grad(const at::Tensor& t) {
  return requires_grad_query ? (*requires_grad_query)(t) : t.requires_grad();
}

inline c10::ScalarType dtype_or_default(const c10::IValue& v) {
  return v.isNone() ? c10::typeMetaToScalarType(c10::get_default_dtype()) : v.toScalarType();
}
inline c10::optional<bool> pin_or_false(const c10::IValue& v) { return v.isNone() ? false : v.toBool(); }

// torch._refs.transpose: alias for rank <= 1 or equal dims, else permute
inline S transpose(const S& a) {
  const auto& x = a[0].toTensor();
  const auto rank = x.dim();
  const auto d0 = c10::maybe_wrap_dim(a[1].toInt(), std::max<std::int64_t>(rank, 1));
  const auto d1 = c10::maybe_wrap_dim(a[2].toInt(), std::max<std::int64_t>(rank, 1));
  if (rank <= 1 || d0 == d1) return {at::alias(x)};
  std::vector<std::int64_t> perm(static_cast<std::size_t>(rank));
  for (std::int64_t i = 0; i < rank; ++i) perm[static_cast<std::size_t>(i)] = i;
  std::swap(perm[static_cast<std::size_t>(d0)], perm[static_cast<std::size_t>(d1)]);
  return {at::permute(x, perm)};
}

// torch._refs.t: transpose(a, 0, 0 if a.ndim < 2 else 1)
inline S t(const S& a) {
  const auto& x = a[0].toTensor();
  return {at::transpose(x, 0, x.dim() < 2 ? 0 : 1)};
}

// _reshape_alias / _unsafe_view: view
inline S view(const S& a) { return {a[0].toTensor().view_symint(a[1].toSymIntVector())}; }

// torch._decomp.split: equal chunks by split_with_sizes
inline S split(const S& a) {
  const auto& x = a[0].toTensor();
  const auto size = a[1].toInt();
  const auto dim = c10::maybe_wrap_dim(a[2].toInt(), x.dim());
  const auto n = x.size(dim);
  if (n == 0) return {c10::List<at::Tensor>({at::alias(x)})};
  const auto chunks = (n + size - 1) / size;
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(chunks), size);
  sizes.back() = size - (size * chunks - n);
  return {c10::List<at::Tensor>(at::split_with_sizes(x, sizes, a[2].toInt()))};
}

// torch._refs.zeros / ones: full with the default dtype and strided layout
inline S full_of(const S& a, int value) {
  const auto dtype = dtype_or_default(a[1]);
  const auto layout = a[2].isNone() ? c10::kStrided : a[2].toLayout();
  const c10::Scalar fill = dtype == c10::kBool ? c10::Scalar(value != 0) : c10::Scalar(static_cast<std::int64_t>(value));
  return {at::_ops::full::call(a[0].toSymIntVector(), fill, dtype, layout, a[3].toOptional<c10::Device>(),
                               pin_or_false(a[4]))};
}

// torch._refs.zeros_like / ones_like: full_like
inline S full_like_of(const S& a, int value) {
  const auto& x = a[0].toTensor();
  const auto dtype = a[1].toOptional<c10::ScalarType>();
  const bool is_bool = dtype.value_or(x.scalar_type()) == c10::kBool;
  const c10::Scalar fill = is_bool ? c10::Scalar(value != 0) : c10::Scalar(static_cast<std::int64_t>(value));
  const auto mf = a[5].isNone() ? c10::MemoryFormat::Preserve : a[5].toMemoryFormat();
  return {at::_ops::full_like::call(x, fill, dtype, a[2].toOptional<c10::Layout>(), a[3].toOptional<c10::Device>(),
                                    pin_or_false(a[4]), mf)};
}

// torch._refs.new_zeros / new_ones: full with the tensor's dtype, layout and device
inline S new_full_of(const S& a, int value) {
  const auto& x = a[0].toTensor();
  const auto dtype = a[2].isNone() ? x.scalar_type() : a[2].toScalarType();
  const auto layout = a[3].isNone() ? x.layout() : a[3].toLayout();
  const auto device = a[4].isNone() ? x.device() : a[4].toDevice();
  const c10::Scalar fill = dtype == c10::kBool ? c10::Scalar(value != 0) : c10::Scalar(static_cast<std::int64_t>(value));
  return {at::_ops::full::call(a[1].toSymIntVector(), fill, dtype, layout, device, pin_or_false(a[5]))};
}

// torch._refs.rsub: sub(other, self, alpha), the number first
inline S rsub(const S& a) {
  // a wrapped number: recorded as the number, as torch records it
  return {at::_ops::sub_Tensor::call(at::native::wrapped_scalar_tensor(a[1].toScalar()), a[0].toTensor(), a[2].toScalar())};
}

// torch._decomp.squeeze_default: squeeze.dims
inline S squeeze_dim(const S& a) {
  return {at::squeeze(a[0].toTensor(), std::vector<std::int64_t>{a[1].toInt()})};
}
inline S squeeze_all(const S& a) {
  const auto& x = a[0].toTensor();
  std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
  for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<std::int64_t>(i);
  return {at::squeeze(x, dims)};
}

// torch._decomp.dropout: native_dropout when it drops, else a clone
inline S dropout(const S& a) {
  const auto& x = a[0].toTensor();
  const double p = a[1].toDouble();
  const bool train = a[2].toBool();
  if (train && p != 0) return {std::get<0>(at::native_dropout(x, p, train))};
  return {at::clone(x)};
}

// torch._decomp.native_batch_norm_decomposition: the _native_batch_norm_legit family
inline S native_batch_norm(const S& a) {
  const auto& x = a[0].toTensor();
  const auto w = a[1].toOptional<at::Tensor>(), b = a[2].toOptional<at::Tensor>();
  const auto rm = a[3].toOptional<at::Tensor>(), rv = a[4].toOptional<at::Tensor>();
  const bool training = a[5].toBool();
  const double momentum = a[6].toDouble(), eps = a[7].toDouble();
  const bool has_mean = rm && rm->defined(), has_var = rv && rv->defined();
  if (!has_mean && !has_var) {
    auto [o, m, v] = at::_native_batch_norm_legit(x, w, b, training, momentum, eps);
    return {o, m, v};
  }
  if (!has_mean || !has_var)
    throw error("xport.decompose.batch_norm", "native_batch_norm: running_mean and running_var must both be given or both be None");
  if (training) {
    at::Tensor mean = *rm, var = *rv;
    auto [o, m, v] = at::_native_batch_norm_legit(x, w, b, mean, var, training, momentum, eps);
    return {o, m, v};
  }
  auto [o, m, v] = at::_native_batch_norm_legit_no_training(x, w, b, *rm, *rv, momentum, eps);
  return {o, m, v};
}

// torch._refs.stack: cat of unsqueezed tensors (or cat + view for an inner dim)
inline S stack(const S& a) {
  const auto ts = a[0].toTensorVector();
  if (ts.empty()) throw error("xport.decompose.stack", "stack expects a non-empty TensorList");
  const auto rank = ts[0].dim();
  const auto dim = c10::maybe_wrap_dim(a[1].toInt(), rank + 1);
  if (dim < rank) {
    auto sizes = ts[0].sizes().vec();
    sizes.insert(sizes.begin() + dim, static_cast<std::int64_t>(ts.size()));
    return {at::cat(ts, dim).view(sizes)};
  }
  std::vector<at::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.unsqueeze(dim));
  return {at::cat(parts, a[1].toInt())};
}

// torch._refs.arange (end only): arange.start_step(0, end, 1)
inline S arange_end(const S& a) {
  const auto layout = a[2].isNone() ? c10::kStrided : a[2].toLayout();
  return {at::_ops::arange_start_step::call(0, a[0].toScalar(), 1, a[1].toOptional<c10::ScalarType>(), layout,
                                            a[3].toOptional<c10::Device>(), pin_or_false(a[4]))};
}

// torch._refs.unbind: squeezed pieces of tensor_split (whose C++ kernel slices)
inline std::vector<at::Tensor> unbind_pieces(const at::Tensor& x, std::int64_t dim) {
  const auto d = c10::maybe_wrap_dim(dim, x.dim());
  const auto n = x.size(d);
  if (n == 0) return {};
  auto pieces = at::tensor_split(x, n, d);
  std::vector<at::Tensor> out;
  for (const auto& p : pieces) out.push_back(at::squeeze(p, d));
  return out;
}
inline S unbind_int(const S& a) { return {c10::List<at::Tensor>(unbind_pieces(a[0].toTensor(), a[1].toInt()))}; }

// torch._decomp's RNN decompositions (lstm_impl, gru_impl and their helpers), for the layouts
// the C++ modules use: one direction or two, biases or none, no projections, no packed input.
namespace rnn {

using params_t = std::vector<at::Tensor>;  // one layer and direction: w_ih, w_hh[, b_ih, b_hh]

inline std::vector<params_t> gather(const std::vector<at::Tensor>& flat, bool has_biases) {
  const std::size_t group = has_biases ? 4 : 2;
  if (flat.size() % group != 0)
    throw error("xport.decompose.rnn", "an RNN's flat weights (" + std::to_string(flat.size()) +
                                           ") do not divide into groups of " + std::to_string(group));
  std::vector<params_t> out;
  for (std::size_t i = 0; i < flat.size(); i += group) out.emplace_back(flat.begin() + i, flat.begin() + i + group);
  return out;
}
inline c10::optional<at::Tensor> bias(const params_t& p, std::size_t i) {
  return p.size() > 2 ? c10::optional<at::Tensor>(p[i]) : c10::nullopt;
}

// one_layer_lstm + lstm_cell
inline std::pair<at::Tensor, std::pair<at::Tensor, at::Tensor>> lstm_layer(
    const at::Tensor& inp, const std::pair<at::Tensor, at::Tensor>& hidden, const params_t& p, bool reverse) {
  at::Tensor hx = hidden.first.unsqueeze(0), cx = hidden.second.unsqueeze(0);
  at::Tensor pre = at::linear(inp, p[0], bias(p, 2));
  if (reverse) pre = pre.flip({0});
  std::vector<at::Tensor> steps;
  for (const auto& x : unbind_pieces(pre, 0)) {
    const at::Tensor gates = at::linear(hx, p[1], bias(p, 3)).add(x);
    const auto g = gates.chunk(4, 2);
    const at::Tensor in_gate = g[0].sigmoid(), forget_gate = g[1].sigmoid(), cell_gate = g[2].tanh(),
                     out_gate = g[3].sigmoid();
    const at::Tensor kept = forget_gate.mul(cx);
    cx = kept.add(in_gate.mul(cell_gate));
    hx = out_gate.mul(cx.tanh());
    steps.push_back(hx);
  }
  if (reverse) std::reverse(steps.begin(), steps.end());
  at::Tensor out = at::cat(steps, 0);
  return {out, {hx.squeeze(0), cx.squeeze(0)}};
}

// one_layer_rnn + gru_cell
inline std::pair<at::Tensor, at::Tensor> gru_layer(const at::Tensor& inp, const at::Tensor& hidden, const params_t& p,
                                                   bool reverse) {
  at::Tensor pre = at::linear(inp, p[0], bias(p, 2));
  if (reverse) pre = pre.flip({0});
  at::Tensor h = hidden.unsqueeze(0);
  std::vector<at::Tensor> steps;
  for (const auto& x : unbind_pieces(pre, 0)) {
    const auto ig = x.chunk(3, 1);
    const auto hg = at::linear(h, p[1], bias(p, 3)).chunk(3, 2);
    const at::Tensor reset = hg[0].add(ig[0]).sigmoid();
    const at::Tensor update = hg[1].add(ig[1]).sigmoid();
    const at::Tensor scaled = hg[2].mul(reset);
    const at::Tensor fresh = ig[2].add(scaled).tanh();
    h = h.sub(fresh).mul(update).add(fresh);
    steps.push_back(h);
  }
  if (reverse) std::reverse(steps.begin(), steps.end());
  at::Tensor out = at::cat(steps, 0);
  return {out, h.squeeze(0)};
}

// _rnn_helper: layers (and directions) in turn; torch's never applies inter-layer dropout
template <class Hidden, class Layer>
std::pair<at::Tensor, std::vector<Hidden>> run_layers(at::Tensor input, const std::vector<Hidden>& hidden,
                                                      const std::vector<params_t>& params, std::int64_t num_layers,
                                                      bool bidirectional, bool batch_first, Layer&& layer) {
  if (batch_first) input = input.transpose(0, 1);
  std::vector<Hidden> finals;
  const std::size_t dirs = bidirectional ? 2 : 1;
  if (params.size() != static_cast<std::size_t>(num_layers) * dirs || hidden.size() != params.size())
    throw error("xport.decompose.rnn", "an RNN's weights and hidden states do not match its layers");
  for (std::size_t i = 0; i < static_cast<std::size_t>(num_layers); ++i) {
    auto [fwd_out, fwd_hidden] = layer(input, hidden[dirs * i], params[dirs * i], false);
    finals.push_back(fwd_hidden);
    if (bidirectional) {
      auto [bwd_out, bwd_hidden] = layer(input, hidden[dirs * i + 1], params[dirs * i + 1], true);
      finals.push_back(bwd_hidden);
      input = at::cat({fwd_out, bwd_out}, fwd_out.dim() - 1);
    } else {
      input = fwd_out;
    }
  }
  if (batch_first) input = input.transpose(0, 1);
  return {input, finals};
}

// lstm.input(input, hx[2], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
inline S lstm(const S& a) {
  const auto hx = a[1].toTensorVector();
  if (hx.size() != 2) throw error("xport.decompose.rnn", "lstm expects two hidden states");
  if (hx[0].size(2) != hx[1].size(2))
    throw error("xport.decompose.rnn", "lstm with projections (proj_size) has no decomposition in xport; keep "
                                       "aten::lstm.input (decomposition_table::core_aten().keep(\"aten::lstm.input\"))");
  const auto params = gather(a[2].toTensorVector(), a[3].toBool());
  std::vector<std::pair<at::Tensor, at::Tensor>> hidden;
  const auto h = unbind_pieces(hx[0], 0);
  const auto c = unbind_pieces(hx[1], 0);
  for (std::size_t i = 0; i < h.size() && i < c.size(); ++i) hidden.emplace_back(h[i], c[i]);
  auto [out, finals] = run_layers(a[0].toTensor(), hidden, params, a[4].toInt(), a[7].toBool(), a[8].toBool(),
                                  [](const at::Tensor& x, const std::pair<at::Tensor, at::Tensor>& hid,
                                     const params_t& p, bool rev) { return lstm_layer(x, hid, p, rev); });
  std::vector<at::Tensor> hs, cs;
  for (const auto& f : finals) {
    hs.push_back(f.first);
    cs.push_back(f.second);
  }
  const at::Tensor hn = at::stack(hs, 0);
  const at::Tensor cn = at::stack(cs, 0);
  return {out, hn, cn};
}

// gru.input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
inline S gru(const S& a) {
  const auto params = gather(a[2].toTensorVector(), a[3].toBool());
  const auto hidden = unbind_pieces(a[1].toTensor(), 0);
  auto [out, finals] = run_layers(a[0].toTensor(), hidden, params, a[4].toInt(), a[7].toBool(), a[8].toBool(),
                                  [](const at::Tensor& x, const at::Tensor& hid, const params_t& p, bool rev) {
                                    return gru_layer(x, hid, p, rev);
                                  });
  return {out, at::stack(finals, 0)};
}

}  // namespace rnn

// torch._decomp.should_fold: matmul folds the batch of the larger operand into mm's rows
inline bool should_fold(const at::Tensor& tensor1, const at::Tensor& tensor2) {
  const bool first_larger = tensor1.dim() >= tensor2.dim();
  const at::Tensor& t1 = first_larger ? tensor1 : tensor2;
  const at::Tensor& t2 = first_larger ? tensor2 : tensor1;
  if (!(t1.dim() >= 3 && t2.dim() <= 2)) return false;
  if (requires_grad(t2)) return true;
  if (tensor1.dim() == 2) return false;
  if (t1.numel() == 0) return true;
  // contiguous, dims of size 1 aside
  const auto sizes = t1.sizes();
  const auto strides = t1.strides();
  std::int64_t expected = 1;
  for (std::int64_t i = t1.dim() - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// torch._decomp.matmul (its Python override of the composite kernel)
inline at::Tensor matmul_impl(const at::Tensor& tensor1, const at::Tensor& tensor2) {
  const auto d1 = tensor1.dim(), d2 = tensor2.dim();
  if (d1 == 0 || d2 == 0) throw error("xport.decompose.matmul", "matmul does not support 0-dimensional tensors");
  if (d1 == 1 && d2 == 1) return at::dot(tensor1, tensor2);
  if (d1 == 2 && d2 == 1) return at::mv(tensor1, tensor2);
  if (d1 == 1 && d2 == 2) return at::squeeze(at::mm(at::unsqueeze(tensor1, 0), tensor2), 0);
  if (d1 == 2 && d2 == 2) return at::mm(tensor1, tensor2);
  if (should_fold(tensor1, tensor2)) {
    const bool transpose = d2 > d1;
    const at::Tensor t1 = transpose ? tensor2.mT() : tensor1;
    const at::Tensor t2 = !transpose ? tensor2 : (d1 == 2 ? tensor1.t() : tensor1);
    const auto sizes1 = t1.sizes().vec();
    std::vector<std::int64_t> output_shape(sizes1.begin(), sizes1.end() - 1);
    std::int64_t folded = 1;
    for (const auto s : output_shape) folded *= s;
    const bool t2_matrix = t2.dim() == 2;
    if (t2_matrix) output_shape.push_back(t2.size(1));
    const at::Tensor t1_folded = t1.reshape({folded, sizes1.back()});
    if (t2_matrix) {
      const at::Tensor output = at::_unsafe_view(t1_folded.mm(t2), output_shape);
      return transpose ? output.mT().contiguous() : output;
    }
    return at::_unsafe_view(t1_folded.mv(t2), output_shape);
  }
  // batched: b1 x n x m1 by b2 x m2 x p, the batch dims broadcast
  const std::int64_t n = d1 > 1 ? tensor1.size(-2) : 1, m1 = tensor1.size(-1);
  const auto batch1 = tensor1.sizes().slice(0, static_cast<std::size_t>(std::max<std::int64_t>(d1 - 2, 0))).vec();
  const std::int64_t m2 = d2 > 1 ? tensor2.size(-2) : tensor2.size(-1), p = d2 > 1 ? tensor2.size(-1) : 1;
  std::vector<std::int64_t> batch2;
  for (std::int64_t i = 0; i < d2 - 2; ++i) batch2.push_back(tensor2.size(i));
  if (d1 == 3 && d2 == 3 && batch1[0] != batch2[0]) {
    if (batch1[0] == 1 && requires_grad(tensor1)) return matmul_impl(tensor1.squeeze(0), tensor2);
    if (batch2[0] == 1 && requires_grad(tensor2)) return matmul_impl(tensor1, tensor2.squeeze(0));
  }
  auto batch = at::infer_size(batch1, batch2);
  std::int64_t batch_product = 1;
  for (const auto s : batch) batch_product *= s;
  auto size1 = batch;
  size1.push_back(n);
  size1.push_back(m1);
  const at::Tensor t1 = tensor1.expand(size1).reshape({batch_product, n, m1});
  const bool vector_rhs = d2 == 1;
  auto size2 = batch;
  size2.push_back(m2);
  if (!vector_rhs) size2.push_back(p);
  const at::Tensor t2 = vector_rhs ? tensor2.expand(size2).reshape({batch_product, m2}).unsqueeze(2)
                                   : tensor2.expand(size2).reshape({batch_product, m2, p});
  auto output_shape = batch;
  if (d1 > 1) output_shape.push_back(n);
  if (d2 > 1) output_shape.push_back(p);
  if (vector_rhs) return t1.bmm(t2).squeeze(-1).view(output_shape);
  return t1.bmm(t2).view(output_shape);
}
inline S matmul_op(const S& a) { return {matmul_impl(a[0].toTensor(), a[1].toTensor())}; }

// embedding_bag's C++ composite, deciding as it does under torch's fake tensors (where the
// weight keeps requires_grad): `_embedding_bag` when the weight requires grad, else the
// forward-only kernel (meta tensors never require grad, so the kernel itself would always pick
// the forward-only one, which autograd cannot run on a parameter).
inline S embedding_bag(const S& a) {
  const auto& w = a[0].toTensor();
  const auto psw = a[6].toOptional<at::Tensor>();
  const std::int64_t pad = a.size() > 8 && !a[8].isNone() ? a[8].toInt() : -1;
  const auto r = requires_grad(w)
                     ? at::_embedding_bag(w, a[1].toTensor(), a[2].toTensor(), a[3].toBool(), a[4].toInt(),
                                          a[5].toBool(), psw, a[7].toBool(), pad)
                     : at::_embedding_bag_forward_only(w, a[1].toTensor(), a[2].toTensor(), a[3].toBool(),
                                                       a[4].toInt(), a[5].toBool(), psw, a[7].toBool(), pad);
  return {std::get<0>(r), std::get<1>(r), std::get<2>(r), std::get<3>(r)};
}

// torch._decomp.nop_decomposition (detach, lift, lift_fresh): alias
inline S alias(const S& a) { return {at::alias(a[0].toTensor())}; }

// torch._decomp.safe_softmax (what scaled_dot_product_attention's math path calls): softmax,
// with rows that are all -inf set to 0; torch.all as torch._refs writes it (not any not)
inline S safe_softmax(const S& a) {
  const auto& x = a[0].toTensor();
  const auto dim = a[1].toInt();
  const auto out = at::softmax(x, dim, a.size() > 2 ? a[2].toOptional<c10::ScalarType>() : c10::nullopt);
  const auto masked = x.eq(-std::numeric_limits<double>::infinity());
  const auto rows = at::logical_not(at::any(at::logical_not(masked), dim, /*keepdim=*/true));
  return {at::where(rows, at::zeros_like(out), out)};
}

// torch._decomp._weight_norm_interface (nn.utils.weight_norm, wav2vec2's positional conv)
inline S weight_norm_interface(const S& a) {
  const auto& v = a[0].toTensor();
  const auto& g = a[1].toTensor();
  const auto dim = a.size() > 2 ? a[2].toInt() : 0;
  std::vector<std::int64_t> keep;
  for (std::int64_t i = 0; i < v.dim(); ++i)
    if (i != dim) keep.push_back(i);
  const auto norm_dtype = g.scalar_type() == c10::kBFloat16 ? c10::optional<c10::ScalarType>(c10::kFloat) : c10::nullopt;
  const auto norm = at::linalg_vector_norm(v, 2, keep, /*keepdim=*/true, norm_dtype);
  return {v.mul(g.div(norm.to(g.scalar_type()))), norm};
}

}  // namespace torch_decomp

/// Decompositions torch applies above functionalization and autograd: Python overrides of an
/// op's composite (or autograd) kernel.
inline const std::unordered_map<std::string, decomposition_fn>& torch_composite_decompositions() {
  namespace d = torch_decomp;
  static const std::unordered_map<std::string, decomposition_fn> table = {
      {"aten::matmul", d::matmul_op},
      {"aten::dropout", d::dropout},
      {"aten::native_batch_norm", d::native_batch_norm},
      {"aten::lstm.input", d::rnn::lstm},
      {"aten::gru.input", d::rnn::gru},
      {"aten::embedding_bag", d::embedding_bag},
      {"aten::embedding_bag.padding_idx", d::embedding_bag},
  };
  return table;
}

/// Whether torch runs its decomposition of `op` as the op's autograd kernel (autograd off for
/// the pieces), rather than as its composite kernel (autograd on).
inline bool runs_below_autograd(const op_info& op) {
  return op.name == "aten::dropout" || op.name == "aten::native_batch_norm" || op.name == "aten::lstm" ||
         op.name == "aten::gru";
}

/// Decompositions torch applies below functionalization, as it records (its decomposition
/// table's entries for ops without a composite kernel; a few core ops among them).
inline const std::unordered_map<std::string, decomposition_fn>& torch_decompositions() {
  namespace d = torch_decomp;
  static const std::unordered_map<std::string, decomposition_fn> table = {
      {"aten::t", d::t},
      {"aten::transpose.int", d::transpose},
      {"aten::_unsafe_view", d::view},
      {"aten::_reshape_alias", d::view},
      {"aten::split.Tensor", d::split},
      {"aten::zeros", [](const d::S& a) { return d::full_of(a, 0); }},
      {"aten::ones", [](const d::S& a) { return d::full_of(a, 1); }},
      {"aten::zeros_like", [](const d::S& a) { return d::full_like_of(a, 0); }},
      {"aten::ones_like", [](const d::S& a) { return d::full_like_of(a, 1); }},
      {"aten::new_zeros", [](const d::S& a) { return d::new_full_of(a, 0); }},
      {"aten::new_ones", [](const d::S& a) { return d::new_full_of(a, 1); }},
      {"aten::rsub.Scalar", d::rsub},
      {"aten::silu", d::silu},
      {"aten::squeeze.dim", d::squeeze_dim},
      {"aten::squeeze", d::squeeze_all},
      {"aten::stack", d::stack},
      {"aten::arange", d::arange_end},
      {"aten::detach", d::alias},
      {"aten::lift_fresh", d::alias},
      {"aten::unbind.int", d::unbind_int},
      {"aten::_safe_softmax", d::safe_softmax},
      {"aten::_weight_norm_interface", d::weight_norm_interface},
      // elementwise, with their type promotion (ops/decompositions_refs.hpp)
      {"aten::hardswish", d::hardswish},
      {"aten::hardsigmoid", d::hardsigmoid},
      {"aten::softplus", d::softplus},
      {"aten::mish", d::mish},
      {"aten::addcmul", d::addcmul},
      {"aten::addcdiv", d::addcdiv},
      {"aten::masked_fill.Scalar", d::masked_fill},
      {"aten::masked_fill.Tensor", d::masked_fill},
      {"aten::logsumexp", d::logsumexp},
      {"aten::isposinf", d::isposinf},
      {"aten::isneginf", d::isneginf},
      {"aten::nan_to_num", d::nan_to_num},
      {"aten::clamp_min", d::clamp_min},
      {"aten::clamp_min.Tensor", d::clamp_min},
      {"aten::clamp_max", d::clamp_max},
      {"aten::clamp_max.Tensor", d::clamp_max},
      {"aten::tril", d::tril},
      {"aten::triu", d::triu},
      {"aten::new_full", d::new_full},
      {"aten::lerp.Scalar", d::lerp},
      {"aten::lerp.Tensor", d::lerp},
  };
  return table;
}

}  // namespace detail
XPORT_END_NAMESPACE
#endif  // XPORT_HAS_TORCH_FUNCTIONALIZATION
