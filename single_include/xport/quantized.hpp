// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
#pragma once

#include <xport/xport.hpp>
// xport/quantized.hpp: quantized programs, an opt-in entry beside the umbrella header. Including
// it defines torch's `quantized_decomposed` operators in the process (ops/quantized_decomposed.hpp:
// Note [quantized_decomposed in C++]), so the int8 programs PT2E quantization writes (torchao's
// `convert_pt2e`, then torch.export) load, run, lower and save like any other.
//
// A process that also runs torch's Python and imports torch.ao.quantization after this must not:
// the library is defined once per process (here, or by torch's Python module first, in which
// case this defines nothing).

// #include <xport/xport.hpp>
// #include <xport/ops/quantized_decomposed.hpp>
// xport/ops/quantized_decomposed.hpp: torch's `quantized_decomposed` operators in C++, the ops
// the programs PT2E quantization writes call (torchao's `prepare_pt2e` / `convert_pt2e`, and
// torch.ao's before it): quantize and dequantize per tensor, per channel, per token and per
// channel group, the qparams choosers, `fake_quant_per_channel` and `convert_element_type.no_fuse`.
//
// Note [quantized_decomposed in C++]: torch defines the library in Python only
// (torch/ao/quantization/fx/_decomposed.py), so no C++ process has these operators and a
// quantized program cannot load there. `register_quantized_decomposed()` defines them with the
// same schemas, and kernels that make the same ATen calls in the same order as torch's Python
// ones (`1.0 / scales` is `reciprocal`, as Python's `__rtruediv__`; scalars are wrapped as a
// Python number is), so a quantized program gives torch's result bit for bit; the Meta kernels
// give the shapes and dtypes torch's fake kernels give. The definitions are registered once per
// process, and not at all where the library is already defined (a process that imported torch's
// Python module first). `<xport/quantized.hpp>` registers them when a program includes it.

#include <cmath>     // INFINITY
#include <cstdint>   // std::int64_t, INT32_MIN
#include <mutex>     // std::call_once
#include <optional>  // std::optional
#include <string>    // std::string
#include <tuple>     // std::tuple
#include <utility>   // std::pair
#include <vector>    // std::vector

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/max.h>
#include <ATen/ops/min.h>
#include <ATen/ops/round.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail::qd {

/// torch's `_DTYPE_TO_QVALUE_BOUNDS`: the integer dtypes' limits and the float8 ones' (as ints).
inline std::optional<std::pair<std::int64_t, std::int64_t>> qvalue_bounds(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte: return std::pair<std::int64_t, std::int64_t>{0, 255};
    case at::kChar: return std::pair<std::int64_t, std::int64_t>{-128, 127};
    case at::kShort: return std::pair<std::int64_t, std::int64_t>{-32768, 32767};
    case at::kInt: return std::pair<std::int64_t, std::int64_t>{INT32_MIN, INT32_MAX};
    default: break;
  }
  const std::string name = c10::toString(dtype);  // by name: LibTorch 1.13 has neither
  if (name == "UInt16") return std::pair<std::int64_t, std::int64_t>{0, 65535};
  if (name == "Float8_e5m2") return std::pair<std::int64_t, std::int64_t>{-57344, 57344};
  if (name == "Float8_e4m3fn") return std::pair<std::int64_t, std::int64_t>{-448, 448};
  return std::nullopt;
}

inline void check_bounds(std::int64_t quant_min, std::int64_t quant_max, at::ScalarType dtype) {
  const auto b = qvalue_bounds(dtype);
  TORCH_CHECK(b.has_value(), "quantized_decomposed: unsupported dtype: ", dtype);
  TORCH_CHECK(quant_min >= b->first, "quant_min out of bounds for dtype, quant_min_lower_bound: ", b->first,
              " quant_min: ", quant_min);
  TORCH_CHECK(quant_max <= b->second, "quant_max out of bounds for dtype, quant_max_upper_bound: ", b->second,
              " quant_max: ", quant_max);
}

/// float16 / bfloat16 made float32; anything else but float32 refused.
inline at::Tensor float_input(const at::Tensor& input) {
  const auto in = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16 ? input.to(at::kFloat) : input;
  TORCH_CHECK(in.scalar_type() == at::kFloat, "Expecting input to have dtype torch.float32, but got dtype: ",
              input.scalar_type());
  return in;
}

inline void check_one_element(const at::Tensor& scale, const at::Tensor& zero_point) {
  TORCH_CHECK(zero_point.numel() == 1, "Expecting zero_point tensor to be one element, but received : ",
              zero_point.numel());
  TORCH_CHECK(scale.numel() == 1, "Expecting scale tensor to be one element, but received : ", scale.numel());
}

/// Python's `1.0 / t` (`Tensor.__rtruediv__`: `t.reciprocal() * 1.0`).
inline at::Tensor one_over(const at::Tensor& t) { return t.reciprocal() * 1.0; }

// ---- per tensor ----------------------------------------------------------------------------

inline at::Tensor quantize_per_tensor(const at::Tensor& input, double scale, std::int64_t zero_point,
                                      std::int64_t quant_min, std::int64_t quant_max, at::ScalarType dtype) {
  const auto in = float_input(input);
  check_bounds(quant_min, quant_max, dtype);
  const double inv_scale = 1.0 / scale;
  return at::clamp(at::round(in * inv_scale) + zero_point, quant_min, quant_max).to(dtype);
}
inline at::Tensor quantize_per_tensor_tensor(const at::Tensor& input, const at::Tensor& scale,
                                             const at::Tensor& zero_point, std::int64_t quant_min,
                                             std::int64_t quant_max, at::ScalarType dtype) {
  check_one_element(scale, zero_point);
  return quantize_per_tensor(input, scale.item().toDouble(), zero_point.item().toLong(), quant_min, quant_max, dtype);
}
inline at::Tensor quantize_per_tensor_tensor2(const at::Tensor& input, const at::Tensor& scale,
                                              const at::Tensor& zero_point, const at::Tensor& quant_min,
                                              const at::Tensor& quant_max, at::ScalarType dtype) {
  check_one_element(scale, zero_point);
  return quantize_per_tensor(input, scale.item().toDouble(), zero_point.item().toLong(), quant_min.item().toLong(),
                             quant_max.item().toLong(), dtype);
}

inline at::Tensor dequantize_per_tensor(const at::Tensor& input, double scale, std::int64_t zero_point,
                                        std::int64_t, std::int64_t, at::ScalarType dtype,
                                        c10::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(input.scalar_type() == dtype, "Expecting input to have dtype: ", dtype, ", but got ", input.scalar_type());
  TORCH_CHECK(qvalue_bounds(dtype).has_value(), "Unsupported dtype in dequantize_per_tensor: ", dtype);
  return (input.to(out_dtype.value_or(at::kFloat)) - zero_point) * scale;
}
inline at::Tensor dequantize_per_tensor_tensor(const at::Tensor& input, const at::Tensor& scale,
                                               const at::Tensor& zero_point, std::int64_t quant_min,
                                               std::int64_t quant_max, at::ScalarType dtype,
                                               c10::optional<at::ScalarType> out_dtype) {
  check_one_element(scale, zero_point);
  return dequantize_per_tensor(input, scale.item().toDouble(), zero_point.item().toLong(), quant_min, quant_max, dtype,
                               out_dtype);
}
inline at::Tensor dequantize_per_tensor_tensor2(const at::Tensor& input, const at::Tensor& scale,
                                                const at::Tensor& zero_point, const at::Tensor& quant_min,
                                                const at::Tensor& quant_max, at::ScalarType dtype,
                                                c10::optional<at::ScalarType> out_dtype) {
  check_one_element(scale, zero_point);
  return dequantize_per_tensor(input, scale.item().toDouble(), zero_point.item().toLong(), quant_min.item().toLong(),
                               quant_max.item().toLong(), dtype, out_dtype);
}

// ---- qparams ---------------------------------------------------------------------------------

/// torch.ao.quantization.utils.determine_qparams, for one min / max pair (per tensor).
inline std::tuple<at::Tensor, at::Tensor> determine_qparams(const at::Tensor& min_val, const at::Tensor& max_val,
                                                            std::int64_t quant_min, std::int64_t quant_max,
                                                            at::ScalarType dtype, double eps, bool symmetric) {
  if (min_val.item().toDouble() == INFINITY && max_val.item().toDouble() == -INFINITY)  // no observation
    return {at::full({1}, 1.0, min_val.options().dtype(at::kFloat)), at::full({1}, 0, min_val.options().dtype(at::kLong))};
  TORCH_CHECK(!(min_val > max_val).item().toBool(), "min ", min_val.item().toDouble(), " should be less than max ",
              max_val.item().toDouble());
  const auto min_val_neg = at::min(min_val, at::zeros_like(min_val));
  auto max_val_pos = at::max(max_val, at::zeros_like(max_val));
  const auto eps_t = at::full({1}, static_cast<float>(eps), min_val.options().dtype(at::kFloat));  // torch.Tensor([eps])
  at::Tensor scale, zero_point;
  if (symmetric) {
    max_val_pos = at::max(-min_val_neg, max_val_pos);
    scale = at::max(max_val_pos / (static_cast<double>(quant_max - quant_min) / 2), eps_t);
    const std::int64_t zp = dtype == at::kByte ? 128 : 0;
    zero_point = at::full({1}, zp, min_val.options().dtype(at::kLong));
  } else {
    scale = at::max((max_val_pos - min_val_neg) / static_cast<double>(quant_max - quant_min), eps_t);
    zero_point = at::rsub(at::round(min_val_neg / scale).to(at::kInt), quant_min);
    zero_point = at::clamp(zero_point, quant_min, quant_max);
  }
  return {scale.to(at::kDouble), zero_point.to(at::kLong)};
}

inline void check_qparams_input(const at::Tensor& input, std::int64_t quant_min, std::int64_t quant_max,
                                at::ScalarType dtype) {
  const auto t = input.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
              "Expecting input to have dtype torch.float32/16/b16, but got dtype: ", t);
  TORCH_CHECK(qvalue_bounds(dtype).has_value(), "Expecting target dtype to be an integer or float8 dtype, but got: ", dtype);
  TORCH_CHECK(quant_min <= 0 && 0 <= quant_max, "Used-specified quantization range must include 0.");
  TORCH_CHECK(quant_min < quant_max, "qmin must be strictly less than qmax for user-specified quantization range.");
}

inline std::tuple<at::Tensor, at::Tensor> choose_qparams(const at::Tensor& input, std::int64_t quant_min,
                                                         std::int64_t quant_max, double eps, at::ScalarType dtype) {
  check_qparams_input(input, quant_min, quant_max, dtype);
  const auto [min_val, max_val] = at::aminmax(input);
  return determine_qparams(min_val, max_val, quant_min, quant_max, dtype, eps, false);
}
inline std::tuple<at::Tensor, at::Tensor> choose_qparams_symmetric(const at::Tensor& input, std::int64_t quant_min,
                                                                   std::int64_t quant_max, double eps,
                                                                   at::ScalarType dtype) {
  check_qparams_input(input, quant_min, quant_max, dtype);
  const auto [min_val, max_val] = at::aminmax(input);
  return determine_qparams(min_val, max_val, quant_min, quant_max, dtype, eps, true);
}

// ---- per channel ---------------------------------------------------------------------------

/// The permutation that swaps `axis` with dim 0 (its own inverse).
inline std::vector<std::int64_t> swap_with_zero(std::int64_t rank, std::int64_t axis) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(rank));
  for (std::int64_t i = 0; i < rank; ++i) p[static_cast<std::size_t>(i)] = i;
  p[static_cast<std::size_t>(axis)] = 0;
  p[0] = axis;
  return p;
}
/// `t` viewed as [C, 1, ..., 1] (rank `rank`), C its first size.
inline at::Tensor per_channel_view(const at::Tensor& t, std::int64_t rank) {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(rank), 1);
  shape[0] = t.size(0);
  return t.view(shape);
}

inline at::Tensor quantize_per_channel(const at::Tensor& input, const at::Tensor& scales, const at::Tensor& zero_points,
                                       std::int64_t axis, std::int64_t quant_min, std::int64_t quant_max,
                                       at::ScalarType dtype) {
  auto in = float_input(input);
  TORCH_CHECK(axis < in.dim(), "Expecting axis to be < ", in.dim());
  check_bounds(quant_min, quant_max, dtype);
  const auto perm = swap_with_zero(in.dim(), axis);
  in = in.permute(perm);
  const auto res = at::clamp(at::round(in * one_over(per_channel_view(scales, in.dim()))) +
                                 per_channel_view(zero_points, in.dim()),
                             quant_min, quant_max);
  return res.permute(perm).to(dtype);
}

inline at::Tensor dequantize_per_channel(const at::Tensor& input, const at::Tensor& scales,
                                         const c10::optional<at::Tensor>& zero_points, std::int64_t axis,
                                         std::int64_t quant_min, std::int64_t quant_max, at::ScalarType dtype,
                                         c10::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(input.scalar_type() == dtype, "Expecting input to have dtype: ", dtype, ", but got dtype: ",
              input.scalar_type());
  TORCH_CHECK(axis < input.dim(), "Expecting axis to be < ", input.dim());
  check_bounds(quant_min, quant_max, dtype);
  const auto perm = swap_with_zero(input.dim(), axis);
  const auto in = input.permute(perm);
  const auto s = per_channel_view(scales, in.dim());
  const auto res = zero_points.has_value() && zero_points->defined()
                       ? (in - per_channel_view(*zero_points, in.dim())) * s
                       : in * s;
  return res.to(out_dtype.value_or(at::kFloat)).permute(perm);
}

inline at::Tensor fake_quant_per_channel(const at::Tensor& input, const at::Tensor& scales_in,
                                         const at::Tensor& zero_points_in, std::int64_t axis, std::int64_t quant_min,
                                         std::int64_t quant_max) {
  const auto scales = scales_in.scalar_type() == at::kFloat ? scales_in : scales_in.to(at::kFloat);
  const auto zero_points = zero_points_in.scalar_type() == at::kInt ? zero_points_in : zero_points_in.to(at::kInt);
  TORCH_CHECK(input.scalar_type() == at::kFloat, "Expecting input to have dtype torch.float32, but got dtype: ",
              input.scalar_type());
  TORCH_CHECK(axis < input.dim(), "Expecting axis to be < ", input.dim());
  std::vector<std::int64_t> shape(static_cast<std::size_t>(input.dim()), 1);
  shape[static_cast<std::size_t>(axis)] = scales.numel();
  const auto s = scales.detach().reshape(shape), zp = zero_points.detach().reshape(shape);
  const auto temp = at::round(input.detach() * one_over(s)) + zp;
  const auto out = (at::clamp(temp, quant_min, quant_max) - zp) * s;
  const auto mask = at::logical_and(temp >= quant_min, temp <= quant_max);
  // torch's autograd.Function: the gradient is the incoming one where the value was in range
  return out + (input - input.detach()) * mask;
}

// ---- per token and per channel group -----------------------------------------------------------

inline std::tuple<at::Tensor, at::Tensor> choose_qparams_per_token(const at::Tensor& input, at::ScalarType dtype) {
  auto scales = input.abs().amax({-1}, true);
  if (scales.scalar_type() == at::kHalf) scales = scales.to(at::kFloat);
  TORCH_CHECK(dtype == at::kChar, "unsupported dtype in choose_qparams_per_token: ", dtype);
  scales = scales.clamp_min(1e-5).div(127);
  return {scales, at::zeros_like(scales)};
}

inline std::tuple<at::Tensor, at::Tensor> choose_qparams_per_token_asymmetric(const at::Tensor& input, at::ScalarType) {
  const std::int64_t qmin = -128, qmax = 127;
  const auto min_val = at::amin(input, {-1}, true), max_val = at::amax(input, {-1}, true);
  const auto min_val_neg = at::min(min_val, at::zeros_like(min_val));
  const auto max_val_pos = at::max(max_val, at::zeros_like(max_val));
  const double eps = 1.1920928955078125e-07;  // torch.finfo(torch.float32).eps
  const auto scale = ((max_val_pos - min_val_neg) / static_cast<double>(qmax - qmin)).clamp_min(eps);
  const auto descaled_min = min_val_neg / scale, descaled_max = max_val_pos / scale;
  const auto from_min = descaled_min + qmin, from_max = descaled_max + qmax;  // Python's qmin + t: t.add(qmin)
  auto zero_point = at::where(from_min + from_max > 0, at::rsub(descaled_min, qmin), at::rsub(descaled_max, qmax));
  zero_point = at::clamp(zero_point, qmin, qmax).round();
  return {scale.to(at::kDouble), zero_point.to(at::kLong)};
}

inline void check_per_token(const at::Tensor& input, const at::Tensor& scales, const at::Tensor& zero_points) {
  std::int64_t tokens = 1;
  for (std::int64_t d = 0; d + 1 < input.dim(); ++d) tokens *= input.size(d);
  TORCH_CHECK(tokens == scales.numel(), "num_tokens: ", tokens, " scales: ", scales.sizes());
  TORCH_CHECK(tokens == zero_points.numel(), "num_tokens: ", tokens, " zero_points: ", zero_points.sizes());
}

inline at::Tensor quantize_per_token(const at::Tensor& input, const at::Tensor& scales, const at::Tensor& zero_points,
                                     std::int64_t quant_min, std::int64_t quant_max, at::ScalarType dtype) {
  check_bounds(quant_min, quant_max, dtype);
  check_per_token(input, scales, zero_points);
  return input.mul(one_over(scales)).add(zero_points).round().clamp(quant_min, quant_max).to(dtype);
}

inline at::Tensor dequantize_per_token(const at::Tensor& input, const at::Tensor& scales, const at::Tensor& zero_points,
                                       std::int64_t, std::int64_t, at::ScalarType, at::ScalarType output_dtype) {
  return ((input - zero_points) * scales).to(output_dtype);
}

/// The group size torch uses: a single-column scale takes the whole row (GPTQ).
inline std::int64_t group_size_for(const at::Tensor& input, const at::Tensor& scales, std::int64_t group_size) {
  TORCH_CHECK(group_size > 1, "group_size must be > 1");
  if (group_size > input.size(-1) && scales.size(-1) == 1) group_size = input.size(-1);
  TORCH_CHECK(input.size(-1) % group_size == 0, "input.shape[-1] must be divisible by group_size");
  TORCH_CHECK(input.dim() == 2, "input must be 2-dimensional");
  return group_size;
}

inline at::Tensor quantize_per_channel_group(const at::Tensor& input, const at::Tensor& scales,
                                             const at::Tensor& zero_points, std::int64_t quant_min,
                                             std::int64_t quant_max, at::ScalarType dtype, std::int64_t group_size) {
  group_size = group_size_for(input, scales, group_size);
  const auto to_quant = input.reshape({-1, group_size});
  TORCH_CHECK(at::isnan(to_quant).sum().item().toLong() == 0, "to_quant must not contain NaNs");
  return to_quant.mul(one_over(scales.reshape({-1, 1})))
      .add(zero_points.reshape({-1, 1}))
      .round()
      .clamp_(quant_min, quant_max)
      .to(dtype)
      .reshape_as(input);
}

inline at::Tensor dequantize_per_channel_group(const at::Tensor& input, const at::Tensor& scales,
                                               const c10::optional<at::Tensor>& zero_points, std::int64_t,
                                               std::int64_t, at::ScalarType, std::int64_t group_size,
                                               at::ScalarType output_dtype) {
  group_size = group_size_for(input, scales, group_size);
  const auto s = scales.reshape({-1, 1});
  const auto zp = zero_points.has_value() && zero_points->defined()
                      ? zero_points->reshape({-1, 1})
                      : at::zeros({}, s.options().dtype(at::kInt));
  return input.reshape({-1, group_size}).sub(zp).mul(s).reshape_as(input).to(output_dtype);
}

inline at::Tensor convert_element_type_no_fuse(const at::Tensor& input, at::ScalarType dtype) {
  return at::_to_copy(input, dtype);
}

// ---- meta kernels (torch's fake kernels) -------------------------------------------------------

inline at::Tensor like(const at::Tensor& input, at::ScalarType dtype) {
  return at::empty_like(input, input.options().dtype(dtype));
}
inline at::Tensor quantize_meta(const at::Tensor& input, at::ScalarType dtype) { return like(float_input(input), dtype); }
inline std::tuple<at::Tensor, at::Tensor> one_qparam_meta(const at::Tensor& input) {
  return {at::empty({1}, input.options().dtype(at::kDouble)), at::empty({1}, input.options().dtype(at::kLong))};
}
inline std::tuple<at::Tensor, at::Tensor> per_token_qparams_meta(const at::Tensor& input, at::ScalarType) {
  auto size = input.sizes().vec();
  size.back() = 1;
  return {at::empty(size, input.options().dtype(at::kDouble)), at::empty(size, input.options().dtype(at::kLong))};
}

/// The operators' schemas, torch 2.13's.
inline void define_schemas(torch::Library& lib) {
  const char* const dq = ", *, ScalarType? out_dtype=None) -> Tensor";
  lib.def("quantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype) -> Tensor");
  lib.def("quantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype) -> Tensor");
  lib.def("quantize_per_tensor.tensor2(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min, Tensor quant_max, ScalarType dtype) -> Tensor");
  lib.def((std::string("dequantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype") + dq).c_str());
  lib.def((std::string("dequantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype") + dq).c_str());
  lib.def((std::string("dequantize_per_tensor.tensor2(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min, Tensor quant_max, ScalarType dtype") + dq).c_str());
  lib.def("choose_qparams.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype) -> (Tensor, Tensor)");
  lib.def("choose_qparams_symmetric.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype) -> (Tensor, Tensor)");
  lib.def("quantize_per_channel(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max, ScalarType dtype) -> Tensor");
  lib.def((std::string("dequantize_per_channel(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, int quant_max, ScalarType dtype") + dq).c_str());
  lib.def("fake_quant_per_channel(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max) -> Tensor");
  lib.def("choose_qparams_per_token(Tensor input, ScalarType dtype) -> (Tensor, Tensor)");
  lib.def("_choose_qparams_per_token_asymmetric_impl(Tensor input, ScalarType dtype) -> (Tensor, Tensor)");
  lib.def("choose_qparams_per_token_asymmetric(Tensor input, ScalarType dtype) -> (Tensor, Tensor)");
  lib.def("quantize_per_token(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, ScalarType dtype) -> Tensor");
  lib.def("dequantize_per_token(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, ScalarType dtype, ScalarType output_dtype) -> Tensor");
  lib.def("quantize_per_channel_group(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, ScalarType dtype, int group_size) -> Tensor");
  lib.def("dequantize_per_channel_group(Tensor input, Tensor scales, Tensor? zero_points, int quant_min, int quant_max, ScalarType dtype, int group_size, ScalarType output_dtype) -> Tensor");
  lib.def("convert_element_type.no_fuse(Tensor input, ScalarType dtype) -> Tensor");
}

/// The kernels of the real devices (CompositeExplicitAutograd) and of the two operators torch
/// gives composite (CompositeImplicitAutograd: autograd sees their ATen calls).
inline void define_kernels(torch::Library& cpu, torch::Library& implicit) {
  cpu.impl("quantize_per_tensor", &quantize_per_tensor);
  cpu.impl("quantize_per_tensor.tensor", &quantize_per_tensor_tensor);
  cpu.impl("quantize_per_tensor.tensor2", &quantize_per_tensor_tensor2);
  cpu.impl("dequantize_per_tensor", &dequantize_per_tensor);
  cpu.impl("dequantize_per_tensor.tensor", &dequantize_per_tensor_tensor);
  cpu.impl("dequantize_per_tensor.tensor2", &dequantize_per_tensor_tensor2);
  cpu.impl("choose_qparams.tensor", &choose_qparams);
  cpu.impl("choose_qparams_symmetric.tensor", &choose_qparams_symmetric);
  cpu.impl("quantize_per_channel", &quantize_per_channel);
  cpu.impl("dequantize_per_channel", &dequantize_per_channel);
  cpu.impl("choose_qparams_per_token", &choose_qparams_per_token);
  cpu.impl("choose_qparams_per_token_asymmetric", &choose_qparams_per_token_asymmetric);
  cpu.impl("quantize_per_token", &quantize_per_token);
  cpu.impl("dequantize_per_token", &dequantize_per_token);
  cpu.impl("quantize_per_channel_group", &quantize_per_channel_group);
  cpu.impl("dequantize_per_channel_group", &dequantize_per_channel_group);
  cpu.impl("convert_element_type.no_fuse", &convert_element_type_no_fuse);
  implicit.impl("_choose_qparams_per_token_asymmetric_impl", &choose_qparams_per_token_asymmetric);
  implicit.impl("fake_quant_per_channel", &fake_quant_per_channel);
}

/// The Meta kernels (torch's fake kernels).
inline void define_meta_kernels(torch::Library& meta) {
  meta.impl("quantize_per_tensor", [](const at::Tensor& input, double, std::int64_t, std::int64_t quant_min,
                                       std::int64_t quant_max, at::ScalarType dtype) {
    return quantize_meta(input, dtype);
  });
  meta.impl("quantize_per_tensor.tensor", [](const at::Tensor& input, const at::Tensor&, const at::Tensor&,
                                              std::int64_t, std::int64_t, at::ScalarType dtype) {
    return quantize_meta(input, dtype);
  });
  meta.impl("quantize_per_tensor.tensor2", [](const at::Tensor& input, const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, at::ScalarType dtype) {
    return quantize_meta(input, dtype);
  });
  meta.impl("dequantize_per_tensor", [](const at::Tensor& input, double, std::int64_t, std::int64_t, std::int64_t,
                                         at::ScalarType, c10::optional<at::ScalarType> out_dtype) {
    return like(input, out_dtype.value_or(at::kFloat));
  });
  meta.impl("dequantize_per_tensor.tensor", [](const at::Tensor& input, const at::Tensor&, const at::Tensor&,
                                                std::int64_t, std::int64_t, at::ScalarType,
                                                c10::optional<at::ScalarType> out_dtype) {
    return like(input, out_dtype.value_or(at::kFloat));
  });
  meta.impl("dequantize_per_tensor.tensor2", [](const at::Tensor& input, const at::Tensor&, const at::Tensor&,
                                                 const at::Tensor&, const at::Tensor&, at::ScalarType,
                                                 c10::optional<at::ScalarType> out_dtype) {
    return like(input, out_dtype.value_or(at::kFloat));
  });
  meta.impl("choose_qparams.tensor", [](const at::Tensor& input, std::int64_t, std::int64_t, double, at::ScalarType) {
    return one_qparam_meta(input);
  });
  meta.impl("choose_qparams_symmetric.tensor",
             [](const at::Tensor& input, std::int64_t, std::int64_t, double, at::ScalarType) {
               return one_qparam_meta(input);
             });
  meta.impl("quantize_per_channel", [](const at::Tensor& input, const at::Tensor&, const at::Tensor&, std::int64_t,
                                        std::int64_t, std::int64_t, at::ScalarType dtype) {
    return quantize_meta(input, dtype);
  });
  meta.impl("dequantize_per_channel",
             [](const at::Tensor& input, const at::Tensor&, const c10::optional<at::Tensor>&, std::int64_t,
                std::int64_t, std::int64_t, at::ScalarType, c10::optional<at::ScalarType> out_dtype) {
               return like(input, out_dtype.value_or(at::kFloat));
             });
  meta.impl("choose_qparams_per_token", &per_token_qparams_meta);
  meta.impl("choose_qparams_per_token_asymmetric", &per_token_qparams_meta);
  meta.impl("quantize_per_token", [](const at::Tensor& input, const at::Tensor&, const at::Tensor&, std::int64_t,
                                      std::int64_t, at::ScalarType dtype) { return like(input, dtype); });
  meta.impl("dequantize_per_token", [](const at::Tensor& input, const at::Tensor&, const at::Tensor&, std::int64_t,
                                        std::int64_t, at::ScalarType, at::ScalarType output_dtype) {
    return like(input, output_dtype);
  });
  meta.impl("quantize_per_channel_group", [](const at::Tensor& input, const at::Tensor&, const at::Tensor&,
                                              std::int64_t, std::int64_t, at::ScalarType dtype, std::int64_t) {
    return like(input, dtype);
  });
  meta.impl("convert_element_type.no_fuse",
             [](const at::Tensor& input, at::ScalarType dtype) { return like(input, dtype); });
}

}  // namespace detail::qd

/// Defines torch's `quantized_decomposed` operators in this process (Note [quantized_decomposed
/// in C++]); once per process, nothing when the library is already there. Thread-safe.
inline void register_quantized_decomposed() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (c10::Dispatcher::singleton().findSchema({"quantized_decomposed::quantize_per_tensor", ""}).has_value()) return;
    // the libraries live as long as the process
    using L = torch::Library;
    detail::qd::define_schemas(*new L(L::DEF, "quantized_decomposed", c10::nullopt, __FILE__, __LINE__));
    detail::qd::define_kernels(
        *new L(L::IMPL, "quantized_decomposed", c10::DispatchKey::CompositeExplicitAutograd, __FILE__, __LINE__),
        *new L(L::IMPL, "quantized_decomposed", c10::DispatchKey::CompositeImplicitAutograd, __FILE__, __LINE__));
    detail::qd::define_meta_kernels(*new L(L::IMPL, "quantized_decomposed", c10::DispatchKey::Meta, __FILE__, __LINE__));
  });
}

XPORT_END_NAMESPACE

XPORT_BEGIN_NAMESPACE
namespace detail {
/// Defines the operators before main() (an inline variable: once per program, whichever
/// translation units include this header).
inline const bool quantized_decomposed_defined = (register_quantized_decomposed(), true);
}  // namespace detail
XPORT_END_NAMESPACE
