// xport/ops/decompositions_refs.hpp: C++ counterparts of the elementwise decompositions torch.export
// takes from torch._refs and torch._decomp for ops that have no CompositeImplicitAutograd kernel
// (activations, masked fills, clamps, interpolation weights), with their type promotion: each
// converts its arguments to the computation dtype torch's wrapper computes in
// (`elementwise_type_promotion_wrapper`, `pw_cast_for_opmath`: float32 for float16 and bfloat16)
// and its result back, with the `_to_copy` calls torch records. Each records the calls the Python
// one makes, in its order, so that the lowered program prints as torch's and computes the same
// bits (tests/python/pt2_fixtures.py's low_precision_* fixtures, in three dtypes). The table that
// maps ops to them is in ops/decompositions.hpp. The promotion helpers and silu serve every
// LibTorch; the rest LibTorch >= 2.1.
#pragma once

#include <cstdint>           // std::int64_t
#include <initializer_list>  // std::initializer_list
#include <limits>            // std::numeric_limits
#include <utility>           // std::pair
#include <vector>            // std::vector

#include <ATen/Dispatch.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/isneginf.h>
#include <ATen/ops/isposinf.h>
#include <ATen/ops/log1p.h>
#include <ATen/ops/masked_fill.h>
#include <ATen/ops/softplus.h>
#include <ATen/ops/squeeze.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DefaultDtype.h>

#include <xport/config.hpp>
#include <xport/detail/compat.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {
namespace torch_decomp {

// torch._prims_common's computation dtype of `dtype` (get_computation_dtype): the precision a
// decomposition computes in (float for float16 and bfloat16, complex64 for complex32)
inline c10::ScalarType computation_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16: return c10::ScalarType::Float;
    case c10::ScalarType::ComplexHalf: return c10::ScalarType::ComplexFloat;
    default: return dtype;
  }
}

// `x` in `dtype` as torch's decompositions convert (prims.convert_element_type, recorded as
// `_to_copy(x, dtype=...)`), `x` itself when it already is
inline at::Tensor converted(const at::Tensor& x, c10::ScalarType dtype) {
  if (x.scalar_type() == dtype) return x;
  return at::_ops::_to_copy::call(x, dtype, c10::nullopt, c10::nullopt, c10::nullopt, false, c10::nullopt);
}

// torch._decomp's @pw_cast_for_opmath on a one-tensor pointwise decomposition: `f` computed in
// the computation dtype of `x`'s, its result converted back to `x`'s dtype
template <class F>
at::Tensor in_opmath(const at::Tensor& x, F&& f) {
  const auto dtype = x.scalar_type();
  return converted(f(converted(x, computation_dtype(dtype))), dtype);
}

// torch._decomp.silu (@pw_cast_for_opmath): x * sigmoid(x)
inline std::vector<c10::IValue> silu(const std::vector<c10::IValue>& a) {
  return {in_opmath(a[0].toTensor(), [](const at::Tensor& x) { return x.mul(at::sigmoid(x)); })};
}

}  // namespace torch_decomp
}  // namespace detail
XPORT_END_NAMESPACE

#if XPORT_HAS_TORCH_FUNCTIONALIZATION
XPORT_BEGIN_NAMESPACE
namespace detail {
namespace torch_decomp {

using S = std::vector<c10::IValue>;

/// torch._prims_common.ELEMENTWISE_TYPE_PROMOTION_KIND (the kinds these decompositions use).
enum class promotion : std::uint8_t { default_kind, int_to_float, always_bool };

/// torch._prims_common.elementwise_dtypes: the dtype a decomposition computes in and the dtype of
/// its result, from its promoting tensors and numbers.
inline std::pair<c10::ScalarType, c10::ScalarType> elementwise_dtypes(std::initializer_list<at::Tensor> tensors,
                                                                      std::initializer_list<c10::Scalar> numbers,
                                                                      promotion kind) {
  at::native::ResultTypeState state;
  for (const auto& t : tensors) state = at::native::update_result_type_state(t, state);
  for (const auto& n : numbers) state = at::native::update_result_type_state(n, state);
  auto result = at::native::result_type(state);
  if (kind == promotion::int_to_float && c10::isIntegralType(result, /*includeBool=*/true))
    result = c10::typeMetaToScalarType(c10::get_default_dtype());
  const auto compute = computation_dtype(result);
  return {compute, kind == promotion::always_bool ? c10::ScalarType::Bool : result};
}

/// A number operand of an arithmetic op as Python passes it (a wrapped number), so that `x + 3`
/// records `add.Tensor(x, 3)` as torch's decompositions do (comparisons take the number itself:
/// `gt.Scalar`).
inline at::Tensor number(const c10::Scalar& v) { return at::native::wrapped_scalar_tensor(v); }

/// Whether Scalar argument `v` is absent or the schema's default `d`: torch records a call
/// without the arguments left at their defaults, and its Python decomposition then takes its own
/// (softplus's `beta=None`).
inline bool at_default(const c10::IValue& v, double d) { return v.isNone() || v.toScalar().toDouble() == d; }

/// A number as `a`'s Python type (`_maybe_convert_to_dtype(value, a.dtype)`): a masked fill of a
/// float tensor with 0 fills 0.0.
inline c10::Scalar as_type_of(const c10::Scalar& v, const at::Tensor& a) {
  if (a.scalar_type() == c10::ScalarType::Bool) return v.toBool();
  if (c10::isIntegralType(a.scalar_type(), false)) return v.toLong();
  if (c10::isComplexType(a.scalar_type())) return v.toComplexDouble();
  return v.toDouble();
}

// torch._decomp.hardswish (@pw_cast_for_opmath): x * clamp(clamp(x + 3, min=0), max=6) / 6
inline S hardswish(const S& a) {
  return {in_opmath(a[0].toTensor(), [](const at::Tensor& x) {
    return x.mul(at::clamp(at::clamp(x.add(number(3)), 0), c10::nullopt, 6)).div(number(6));
  })};
}

// torch._decomp.hardsigmoid (@pw_cast_for_opmath): clamp(clamp(x + 3, min=0), max=6) / 6
inline S hardsigmoid(const S& a) {
  return {in_opmath(a[0].toTensor(), [](const at::Tensor& x) {
    return at::clamp(at::clamp(x.add(number(3)), 0), c10::nullopt, 6).div(number(6));
  })};
}

// torch._refs.nn.functional.softplus (DEFAULT promotion): log1p(exp(x * beta)) / beta where
// x * beta <= threshold, else x (no scaling at the default beta, as torch records it)
inline S softplus(const S& a) {
  const bool scaled = !at_default(a[1], 1);
  const auto threshold = a[2].isNone() ? c10::Scalar(20) : a[2].toScalar();
  return {in_opmath(a[0].toTensor(), [&](const at::Tensor& x) {
    const at::Tensor in = scaled ? x.mul(number(a[1].toScalar())) : x;
    at::Tensor rhs = at::log1p(at::exp(in));
    if (scaled) rhs = rhs.div(number(a[1].toScalar()));
    return at::where(in.gt(threshold), x, rhs);
  })};
}

// torch._refs.nn.functional.mish (DEFAULT promotion): x * tanh(softplus(x))
inline S mish(const S& a) {
  return {in_opmath(a[0].toTensor(), [](const at::Tensor& x) { return x.mul(at::tanh(at::softplus(x))); })};
}

// torch._refs.addcmul / addcdiv: self + value * t1 (* or /) t2, the three tensors converted to
// the computation dtype one by one
inline at::Tensor addc(const S& a, promotion kind, bool divide) {
  const auto &self = a[0].toTensor(), &t1 = a[1].toTensor(), &t2 = a[2].toTensor();
  const auto [compute, result] = elementwise_dtypes({self, t1, t2}, {}, kind);
  const auto s = converted(self, compute), x = converted(t1, compute), y = converted(t2, compute);
  const at::Tensor scaled = x.mul(number(a[3].isNone() ? c10::Scalar(1) : a[3].toScalar()));
  return converted(s.add(divide ? scaled.div(y) : scaled.mul(y)), result);
}
inline S addcmul(const S& a) { return {addc(a, promotion::default_kind, false)}; }
inline S addcdiv(const S& a) { return {addc(a, promotion::int_to_float, true)}; }

// torch._refs.masked_fill: where(mask, value as a's type, a), contiguous
inline S masked_fill(const S& a) {
  const auto& x = a[0].toTensor();
  const auto& mask = a[1].toTensor();
  if (a[2].isTensor()) return {at::where(mask, converted(a[2].toTensor(), x.scalar_type()), x).contiguous()};
  return {at::where(mask, as_type_of(a[2].toScalar(), x), x).contiguous()};
}

// torch._refs.logsumexp (INT_TO_FLOAT promotion): the maxima (0 where infinite) taken out of the
// exponentials and added back
inline S logsumexp(const S& a) {
  const auto& self = a[0].toTensor();
  const auto dims = a[1].toIntVector();
  const bool keepdim = a[2].toBool();
  const auto [compute, result] = elementwise_dtypes({self}, {}, promotion::int_to_float);
  const auto x = converted(self, compute);
  if (x.numel() == 0) return {converted(at::sum(at::exp(x), dims, keepdim).log(), result)};
  at::Tensor maxes = at::amax(x, dims, true);
  maxes = maxes.masked_fill(maxes.abs().eq(std::numeric_limits<double>::infinity()), 0);
  const at::Tensor squeezed = keepdim ? maxes : at::squeeze(maxes, dims);
  const at::Tensor sum = at::sum(at::exp(x.sub(maxes)), dims, keepdim);
  return {converted(sum.log().add(squeezed), result)};
}

// torch._refs.isposinf / isneginf (ALWAYS_BOOL promotion): a == +-inf for floating types
inline at::Tensor is_inf_of_sign(const at::Tensor& self, double inf) {
  if (!c10::isFloatingType(self.scalar_type())) return at::zeros_like(self, c10::ScalarType::Bool);
  return converted(self, computation_dtype(self.scalar_type())).eq(inf);
}
inline S isposinf(const S& a) { return {is_inf_of_sign(a[0].toTensor(), std::numeric_limits<double>::infinity())}; }
inline S isneginf(const S& a) { return {is_inf_of_sign(a[0].toTensor(), -std::numeric_limits<double>::infinity())}; }

// torch._refs.nan_to_num: NaN, -inf and inf replaced in turn (the dtype's extremes by default)
inline S nan_to_num(const S& a) {
  const auto& x = a[0].toTensor();
  if (!c10::isFloatingType(x.scalar_type()) && !c10::isComplexType(x.scalar_type())) return {x.clone()};
  double lowest = 0, highest = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(c10::ScalarType::Half, c10::ScalarType::BFloat16, x.scalar_type(), "nan_to_num", [&] {
    lowest = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
    highest = static_cast<double>(std::numeric_limits<scalar_t>::max());
  });
  const double nan = a[1].isNone() ? 0.0 : a[1].toDouble();
  const double posinf = a[2].isNone() ? highest : a[2].toDouble();
  const double neginf = a[3].isNone() ? lowest : a[3].toDouble();
  at::Tensor r = at::where(at::isnan(x), nan, x);
  r = at::where(at::isneginf(x), neginf, r);
  return {at::where(at::isposinf(x), posinf, r)};
}

// torch._refs.clamp_min / clamp_max: clamp with one bound
inline S clamp_min(const S& a) {
  if (a[1].isTensor()) return {at::clamp(a[0].toTensor(), a[1].toTensor(), c10::optional<at::Tensor>())};
  return {at::clamp(a[0].toTensor(), a[1].toScalar(), c10::nullopt)};
}
inline S clamp_max(const S& a) {
  if (a[1].isTensor()) return {at::clamp(a[0].toTensor(), c10::optional<at::Tensor>(), a[1].toTensor())};
  return {at::clamp(a[0].toTensor(), c10::nullopt, a[1].toScalar())};
}

// torch._refs.tril / triu: where the column minus the row is <= (>=) the diagonal, else 0
inline at::Tensor triangle(const S& a, bool lower) {
  const auto& x = a[0].toTensor();
  const auto h = x.size(-2), w = x.size(-1);
  const auto opts = at::TensorOptions().device(x.device());
  const at::Tensor offset = at::arange(w, opts).unsqueeze(-2).sub(at::arange(h, opts).unsqueeze(-1));
  const auto diagonal = a[1].toInt();
  const at::Tensor mask = lower ? offset.le(diagonal) : offset.ge(diagonal);
  const at::Tensor kept = x.scalar_type() == c10::ScalarType::Bool ? mask.logical_and(x) : at::where(mask, x, 0);
  return kept.contiguous();
}
inline S tril(const S& a) { return {triangle(a, true)}; }
inline S triu(const S& a) { return {triangle(a, false)}; }

// torch._refs.new_full: full with the tensor's dtype, layout and device where not given
inline S new_full(const S& a) {
  const auto& x = a[0].toTensor();
  const auto dtype = a[3].isNone() ? x.scalar_type() : a[3].toScalarType();
  const auto layout = a[4].isNone() ? x.layout() : a[4].toLayout();
  const auto device = a[5].isNone() ? x.device() : a[5].toDevice();
  return {at::_ops::full::call(a[1].toSymIntVector(), a[2].toScalar(), dtype, layout, device,
                               a[6].isNone() ? false : a[6].toBool())};
}

// torch._refs.lerp (DEFAULT promotion): coefficient and base chosen for precision by |weight|
// (start + weight * (end - start) for |weight| < 0.5, end + (weight - 1) * (end - start) above)
inline S lerp(const S& a) {
  const auto &start = a[0].toTensor(), &end = a[1].toTensor();
  const bool by_number = !a[2].isTensor();
  const auto [compute, result] = by_number ? elementwise_dtypes({start, end}, {a[2].toScalar()}, promotion::default_kind)
                                        : elementwise_dtypes({start, end, a[2].toTensor()}, {}, promotion::default_kind);
  const auto s = converted(start, compute), e = converted(end, compute);
  const at::Tensor weight = by_number ? s.new_full({}, a[2].toScalar()) : converted(a[2].toTensor(), compute);
  const at::Tensor mask = weight.abs().ge(0.5);
  const at::Tensor coeff = at::where(mask, weight.sub(number(1)), weight);
  const at::Tensor base = at::where(mask, e, s);
  return {converted(coeff.mul(e.sub(s)).add(base), result)};
}

}  // namespace torch_decomp
}  // namespace detail
XPORT_END_NAMESPACE
#endif  // XPORT_HAS_TORCH_FUNCTIONALIZATION
