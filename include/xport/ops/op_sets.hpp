// xport/ops/op_sets.hpp: the named sets of ATen operators xport treats alike, in one place.
// Each set is a predicate over an operator's name (`aten::reshape`, overload not included) and
// says what the members share and which part of xport relies on it. Sets that LibTorch tags
// itself (`core`, `maybe_aliasing_or_mutating`) are read from the tags where the running
// LibTorch has them (ops/core_ops.hpp, lower/decompose.hpp). The ops that read tensor data have
// their own header, with their shape rules: ops/data_dependent.hpp; those that may return their
// input itself, with the rules that decide it: ops/aliasing.hpp.
#pragma once

#include <algorithm>    // std::find
#include <cstddef>      // std::size_t
#include <iterator>     // std::begin, std::end
#include <string_view>  // std::string_view

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

template <std::size_t N>
constexpr bool in_set(std::string_view name, const std::string_view (&set)[N]) {
  return std::find(std::begin(set), std::end(set), name) != std::end(set);
}

/// Ops that only change memory layout: a capture at another size may record them or not
/// (`contiguous()` records nothing on a tensor that already is), so export's structure
/// comparison may skip them (trace/symbolic.hpp).
inline constexpr std::string_view layout_only_ops[] = {"aten::contiguous", "aten::clone"};
constexpr bool is_layout_only_op(std::string_view name) { return in_set(name, layout_only_ops); }

/// Batch norm with running statistics as arguments (updated in place in training).
inline constexpr std::string_view batch_norm_ops[] = {"aten::batch_norm", "aten::native_batch_norm"};
constexpr bool is_batch_norm_op(std::string_view name) { return in_set(name, batch_norm_ops); }

/// Windowed ops whose output length is ops/shape_formulas.hpp's window formula.
/// convolution(input, weight, bias, stride, padding, dilation, transposed, ...), conv{1,2,3}d
/// (input, weight, bias, stride, padding, dilation, groups).
inline constexpr std::string_view convolution_ops[] = {"aten::convolution", "aten::_convolution", "aten::conv1d",
                                                       "aten::conv2d", "aten::conv3d"};
constexpr bool is_convolution_op(std::string_view name) { return in_set(name, convolution_ops); }
/// max_pool(input, kernel, stride, padding, dilation, ceil_mode).
inline constexpr std::string_view max_pool_ops[] = {"aten::max_pool1d", "aten::max_pool2d",
                                                    "aten::max_pool2d_with_indices", "aten::max_pool3d",
                                                    "aten::max_pool3d_with_indices"};
constexpr bool is_max_pool_op(std::string_view name) { return in_set(name, max_pool_ops); }
/// avg_pool(input, kernel, stride, padding, ceil_mode, ...).
inline constexpr std::string_view avg_pool_ops[] = {"aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d"};
constexpr bool is_avg_pool_op(std::string_view name) { return in_set(name, avg_pool_ops); }

/// Ops whose result is a view of the input with the given sizes, which the interpreter runs as
/// `reshape` (the same view when one exists, a copy otherwise: an input in another layout than
/// its example's). `aten::view` counts only in its default overload (`view.dtype` is no reshape).
inline constexpr std::string_view reshaping_view_ops[] = {"aten::view", "aten::_unsafe_view", "aten::_reshape_alias"};
constexpr bool is_reshaping_view(std::string_view name, std::string_view overload) {
  return in_set(name, reshaping_view_ops) && (name != "aten::view" || overload.empty());
}

/// LibTorch 2.13's ops tagged `maybe_aliasing_or_mutating`, for versions without the tag: their
/// composite is re-run for functionalization (lower/decompose.hpp). Qualified names.
inline constexpr std::string_view maybe_aliasing_or_mutating_ops[] = {
    "aten::_batch_norm_impl_index", "aten::alpha_dropout", "aten::atleast_1d", "aten::atleast_2d",
    "aten::atleast_3d", "aten::batch_norm", "aten::cartesian_prod", "aten::conj_physical", "aten::dropout",
    "aten::feature_alpha_dropout", "aten::feature_dropout", "aten::unsafe_chunk", "aten::native_batch_norm"};

/// Ops called for what they check or record, not for a result (torch.fx's
/// `_side_effectful_functions`): dead-code elimination keeps them (program/dead_code.hpp).
inline constexpr std::string_view checking_ops[] = {
    "aten::_assert_tensor_metadata", "aten::_assert_async", "profiler::_record_function_enter",
    "profiler::_record_function_enter_new", "profiler::_record_function_exit"};
constexpr bool is_checking_op(std::string_view name) { return in_set(name, checking_ops); }

/// Ops with a CompositeImplicitAutograd kernel that torch.export's default decomposition table
/// keeps whole (torch.export.decomp_utils.PRESERVED_ATEN_CIA_OPS, less `_fused_rms_norm`, which
/// its table decomposes by a Python decomposition instead): lower/decompose.hpp records them as
/// they are. Qualified names.
inline constexpr std::string_view preserved_composite_ops[] = {
    "aten::upsample_bilinear2d.vec", "aten::upsample_nearest2d.vec", "aten::silu_backward", "aten::mish_backward"};

}  // namespace detail
XPORT_END_NAMESPACE
