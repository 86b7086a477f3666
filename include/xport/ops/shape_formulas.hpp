// xport/ops/shape_formulas.hpp: the output-size formulas of windowed ops (convolution, its
// transpose, pooling), each written once over any integer type: std::int64_t where a shape rule
// computes a concrete size (ops/meta_rules.hpp), sym_int where export fits a symbolic size to
// captures (trace/symbolic.hpp, through `window_candidates` below). The formulas are ATen's (aten/src/ATen/native/ConvUtils.h,
// Pool.h), without ceil_mode, whose correction term is a comparison, not an expression.
#pragma once

#include <algorithm>  // std::min
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <vector>     // std::vector

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/ir/sym_int.hpp>
#include <xport/ops/op_sets.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Python's floor division, for both integer types the formulas are used with.
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) { return py_floordiv(a, b); }
inline sym_int floor_div(const sym_int& a, std::int64_t b) { return sym::floordiv(a, sym_int(b)); }

/// Output length of a convolution or pooling window along one dim:
/// `(in + 2*pad - dilation*(kernel-1) - 1) // stride + 1`.
template <class Int>
Int window_output_size(const Int& in, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                       std::int64_t dilation) {
  return floor_div(in + (2 * pad - dilation * (kernel - 1) - 1), stride) + 1;
}

/// Output length of a transposed convolution along one dim:
/// `(in - 1)*stride - 2*pad + dilation*(kernel-1) + output_padding + 1`.
template <class Int>
Int transposed_window_output_size(const Int& in, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                                  std::int64_t dilation, std::int64_t output_padding) {
  return (in - 1) * stride + (dilation * (kernel - 1) - 2 * pad + output_padding + 1);
}

/// Export's shape-rule candidates (trace/symbolic.hpp) for sizes no linear form or product
/// gives: the window count of convolution and pooling along each symbolic spatial dim.
inline void window_candidates(const node& n, const std::vector<sym_int>& in_sizes, std::vector<sym_int>& out) {
  const auto& name = n.op().name;
  const auto args = n.args();
  auto ints = [&](std::size_t i) {
    std::vector<std::int64_t> v;
    if (i < args.size() && args[i].is_list())
      for (const auto& e : args[i].as_list()) v.push_back(e.is_int() ? e.as_int() : 0);
    return v;
  };
  std::vector<std::int64_t> kernel, stride, pad, dil;
  if (is_convolution_op(name)) {
    if (args.size() < 4 || !args[1].is_value()) return;
    const auto& w = args[1].as_value().meta().sizes;
    for (std::size_t i = 2; i < w.size(); ++i) kernel.push_back(w[i].hint());
    stride = ints(3), pad = ints(4), dil = ints(5);
    if (name == "aten::convolution" || name == "aten::_convolution") {
      const bool transposed = args.size() > 6 && args[6].is_bool() && args[6].as_bool();
      if (transposed) return;
    }
  } else if (is_max_pool_op(name)) {
    kernel = ints(1), stride = ints(2), pad = ints(3), dil = ints(4);
    if (args.size() > 5 && args[5].is_bool() && args[5].as_bool()) return;  // ceil_mode
  } else if (is_avg_pool_op(name)) {
    kernel = ints(1), stride = ints(2), pad = ints(3);
    if (args.size() > 4 && args[4].is_bool() && args[4].as_bool()) return;  // ceil_mode
  } else {
    return;
  }
  const auto nsp = kernel.size();
  if (in_sizes.size() < nsp) return;
  const std::size_t spatial0 = in_sizes.size() - nsp;
  auto at = [](const std::vector<std::int64_t>& v, std::size_t i, std::int64_t dflt) {
    return v.empty() ? dflt : v[std::min(i, v.size() - 1)];
  };
  for (std::size_t i = 0; i < nsp; ++i) {
    const auto& in = in_sizes[spatial0 + i];
    if (in.is_constant()) continue;
    const auto k = kernel[i], s = at(stride, i, k), p = at(pad, i, 0), d = at(dil, i, 1);
    if (s <= 0) continue;
    out.push_back(window_output_size(in, k, s, p, d));
  }
}

}  // namespace detail
XPORT_END_NAMESPACE
