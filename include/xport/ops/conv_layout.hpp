// xport/ops/conv_layout.hpp: the memory format of a convolution's output, as torch's fake tensors
// give it (torch/_subclasses/fake_impls.py's `conv`). A meta kernel makes every convolution output
// contiguous; the real kernel picks a backend from the input's and weight's layouts and device,
// and that backend may write channels_last (a depthwise conv over a transposed activation in
// SegFormer, any conv over a channels_last input). torch records what the kernel would do, and so
// must xport: a view that follows depends on those strides.
#pragma once

#include <optional>     // std::optional
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <xport/config.hpp>
#include <xport/detail/compat.hpp>
#include <xport/ir/op.hpp>

#if XPORT_HAS_CONV_BACKEND_SELECTION
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/empty_strided.h>
#endif

XPORT_BEGIN_NAMESPACE
namespace detail {

/// The arguments a convolution call's backend is chosen from, by the op's schema.
struct conv_call {
  std::vector<std::int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  std::int64_t groups = 1;
};

/// `call`'s parameters for the convolution ops xport sees (nullopt: not one of them, or a
/// `padding="same"` string, whose backend choice is left to the meta kernel's contiguous).
inline std::optional<conv_call> conv_call_of(std::string_view name, const std::vector<c10::IValue>& a) {
  const auto ints = [](const c10::IValue& v) -> std::optional<std::vector<std::int64_t>> {
    if (v.isInt()) return std::vector<std::int64_t>{v.toInt()};
    if (!v.isIntList()) return std::nullopt;
    return v.toIntVector();
  };
  conv_call c;
  std::optional<std::vector<std::int64_t>> s, p, d, op;
  if (name == "aten::convolution" || name == "aten::_convolution") {
    if (a.size() < 9) return std::nullopt;
    s = ints(a[3]), p = ints(a[4]), d = ints(a[5]), op = ints(a[7]);
    c.transposed = a[6].toBool();
    c.groups = a[8].toInt();
  } else if (name == "aten::conv1d" || name == "aten::conv2d" || name == "aten::conv3d") {
    if (a.size() < 7) return std::nullopt;
    s = ints(a[3]), p = ints(a[4]), d = ints(a[5]), op = std::vector<std::int64_t>{0};
    c.groups = a[6].toInt();
  } else if (name == "aten::conv_transpose1d" || name == "aten::conv_transpose2d" || name == "aten::conv_transpose3d") {
    if (a.size() < 8) return std::nullopt;
    s = ints(a[3]), p = ints(a[4]), op = ints(a[5]), d = ints(a[7]);
    c.transposed = true;
    c.groups = a[6].toInt();
  } else {
    return std::nullopt;
  }
  if (!s || !p || !d || !op) return std::nullopt;
  c.stride = *s, c.padding = *p, c.dilation = *d, c.output_padding = *op;
  return c;
}

/// The memory format LibTorch's kernel on `device` gives the output of convolution `name` over
/// the meta arguments `args` (input, weight, bias, ...), or nullopt where it cannot be asked (an
/// unknown op, a device this process has no backend for, LibTorch 1.13).
inline std::optional<c10::MemoryFormat> conv_output_format(std::string_view name, const std::vector<c10::IValue>& args,
                                                           c10::Device device) {
#if XPORT_HAS_CONV_BACKEND_SELECTION
  if (args.size() < 3 || !args[0].isTensor() || !args[1].isTensor()) return std::nullopt;
  const auto call = conv_call_of(name, args);
  if (!call) return std::nullopt;
  // Tensors of the arguments' geometry on the real device: the backend choice reads only sizes,
  // strides, dtype and device. Their memory is reserved, never touched.
  const auto shadow = [&](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(device));
  };
  try {
    auto input = shadow(args[0].toTensor());
    auto weight = shadow(args[1].toTensor());
    std::optional<at::Tensor> bias;
    if (args[2].isTensor() && args[2].toTensor().defined()) bias = shadow(args[2].toTensor());
    const auto sym = [](const std::vector<std::int64_t>& v) { return c10::fromIntArrayRefSlow(v); };
    const auto backend = at::native::select_conv_backend(input, weight, bias, sym(call->stride), sym(call->padding),
                                                         sym(call->dilation), call->transposed, sym(call->output_padding),
                                                         c10::SymInt(call->groups), c10::nullopt);
    if (weight.dim() == 3) {  // torch's fake conv asks about the 2-d conv a 1-d one runs as
      input = input.contiguous().unsqueeze(2);
      weight = weight.unsqueeze(2);
    }
    return at::native::_determine_backend_memory_format(input, weight, backend);
  } catch (const c10::Error&) {
    return std::nullopt;  // no backend for this device here: the meta kernel's layout stands
  }
#else
  (void)name, (void)args, (void)device;
  return std::nullopt;
#endif
}

/// `out` (a convolution's meta result) laid out in `format`, as torch's fake conv converts it.
inline at::Tensor in_format(const at::Tensor& out, c10::MemoryFormat format) {
  if (out.dim() == 3 && format == c10::MemoryFormat::ChannelsLast)
    return out.unsqueeze(2).contiguous(format).squeeze(2);
  return out.contiguous(format);
}

}  // namespace detail
XPORT_END_NAMESPACE
