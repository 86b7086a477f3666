// xport/ops/core_ops.hpp: the core ATen operator set that run_decompositions() lowers to.
// LibTorch 1.13 has no `core` tag, so xport carries the set: every function of PyTorch's
// native_functions.yaml tagged `core`, read from pytorch/pytorch@2e35e4846418c7623dd0863221af6c50e0d3ff1c torchgen/packaged/ATen/native/native_functions.yaml
// (193 operators), plus `native_batch_norm`, which stands in for the `_native_batch_norm_legit*`
// family that LibTorch 1.13 does not have.
#pragma once

#include <algorithm>    // std::binary_search
#include <array>        // std::array
#include <string_view>  // std::string_view

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::array<std::string_view, 194> core_aten_ops{
    "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward",
    "aten::_adaptive_avg_pool3d", "aten::_cdist_forward", "aten::_embedding_bag", "aten::_fft_c2r",
    "aten::_fft_r2c", "aten::_local_scalar_dense", "aten::_log_softmax",
    "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit.no_stats",
    "aten::_native_batch_norm_legit_no_training", "aten::_pdist_forward", "aten::_softmax",
    "aten::_to_copy", "aten::abs", "aten::acos", "aten::acosh", "aten::adaptive_avg_pool1d",
    "aten::add.Scalar", "aten::add.Tensor", "aten::addmm", "aten::alias", "aten::amax",
    "aten::amin", "aten::any", "aten::any.dim", "aten::any.dims", "aten::arange.start_step",
    "aten::argmax", "aten::argmin", "aten::as_strided", "aten::asin", "aten::asinh", "aten::atan",
    "aten::atan2", "aten::atan2.out", "aten::atanh", "aten::avg_pool1d", "aten::avg_pool2d",
    "aten::avg_pool2d_backward", "aten::avg_pool3d", "aten::bitwise_and.Scalar",
    "aten::bitwise_and.Tensor", "aten::bitwise_not", "aten::bitwise_or.Scalar",
    "aten::bitwise_or.Tensor", "aten::bitwise_xor.Scalar", "aten::bitwise_xor.Tensor", "aten::bmm",
    "aten::cat", "aten::ceil", "aten::clamp", "aten::clamp.Tensor", "aten::clone", "aten::col2im",
    "aten::constant_pad_nd", "aten::convolution", "aten::convolution_backward", "aten::copy",
    "aten::cos", "aten::cosh", "aten::cumsum", "aten::diagonal", "aten::div.Scalar",
    "aten::div.Scalar_mode", "aten::div.Tensor", "aten::div.Tensor_mode", "aten::elu",
    "aten::embedding", "aten::embedding_dense_backward", "aten::empty.memory_format",
    "aten::empty_strided", "aten::eq.Scalar", "aten::eq.Tensor", "aten::erf", "aten::exp",
    "aten::expand", "aten::expm1", "aten::fill.Scalar", "aten::flip", "aten::floor",
    "aten::fmod.Scalar", "aten::fmod.Tensor", "aten::full", "aten::full_like", "aten::gather",
    "aten::ge.Scalar", "aten::ge.Tensor", "aten::gelu", "aten::grid_sampler_2d", "aten::gt.Scalar",
    "aten::gt.Tensor", "aten::hardtanh", "aten::index.Tensor", "aten::index_put",
    "aten::index_select", "aten::isinf", "aten::isnan", "aten::le.Scalar", "aten::le.Tensor",
    "aten::leaky_relu", "aten::log", "aten::log10", "aten::log1p", "aten::log2",
    "aten::logical_and", "aten::logical_not", "aten::logical_or", "aten::logical_xor",
    "aten::lt.Scalar", "aten::lt.Tensor", "aten::masked_scatter", "aten::max.dim",
    "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward",
    "aten::max_pool3d_with_indices", "aten::maximum", "aten::mean", "aten::mean.dim",
    "aten::min.dim", "aten::minimum", "aten::mm", "aten::mul.Scalar", "aten::mul.Tensor",
    "aten::native_batch_norm", "aten::native_dropout", "aten::native_group_norm",
    "aten::native_group_norm_backward", "aten::native_layer_norm",
    "aten::native_layer_norm_backward", "aten::ne.Scalar", "aten::ne.Tensor", "aten::neg",
    "aten::nonzero", "aten::permute", "aten::pow.Scalar", "aten::pow.Tensor_Scalar",
    "aten::pow.Tensor_Tensor", "aten::prod", "aten::prod.dim_int", "aten::rand", "aten::randn",
    "aten::randperm", "aten::reciprocal", "aten::reflection_pad1d", "aten::reflection_pad2d",
    "aten::reflection_pad3d", "aten::relu", "aten::remainder.Scalar", "aten::remainder.Tensor",
    "aten::repeat", "aten::replication_pad2d", "aten::replication_pad3d", "aten::resize_",
    "aten::round", "aten::rsqrt", "aten::scalar_tensor", "aten::scatter.src", "aten::scatter.value",
    "aten::scatter_add", "aten::scatter_reduce.two", "aten::select.int", "aten::select_scatter",
    "aten::sigmoid", "aten::sign", "aten::sin", "aten::sinh", "aten::slice.Tensor",
    "aten::slice_scatter", "aten::sort", "aten::split_with_sizes", "aten::sqrt",
    "aten::squeeze.dim", "aten::squeeze.dims", "aten::sub.Scalar", "aten::sub.Tensor",
    "aten::sum.dim_IntList", "aten::sym_is_contiguous", "aten::sym_numel", "aten::sym_size.int",
    "aten::sym_storage_offset", "aten::sym_stride.int", "aten::tan", "aten::tanh", "aten::topk",
    "aten::trunc", "aten::unsqueeze", "aten::upsample_bilinear2d.vec",
    "aten::upsample_nearest2d.vec", "aten::var.correction", "aten::var.dim", "aten::view",
    "aten::where.self"
};

/// Whether `qualified` (`aten::add.Tensor`, `aten::relu`) is in the core ATen set.
inline bool is_core_aten_op(std::string_view qualified) {
  return std::binary_search(core_aten_ops.begin(), core_aten_ops.end(), qualified);
}

}  // namespace detail
XPORT_END_NAMESPACE
