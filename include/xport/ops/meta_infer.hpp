// xport/ops/meta_infer.hpp: an op's output types, learned without computing anything.
// The op runs on meta tensors (sizes and dtypes, no data) through the dispatcher, its arguments
// boxed as every call's are (ops/call.hpp); when LibTorch has no meta kernel for it, a shape
// rule from meta_rules.hpp answers; otherwise the op cannot be captured and missing_fake_kernel
// names it and the fix.
#pragma once

#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <xport/config.hpp>
#include <xport/ops/call.hpp>
#include <xport/ops/conv_layout.hpp>
#include <xport/ops/data_dependent.hpp>
#include <xport/ops/higher_order.hpp>
#include <xport/ops/meta_rules.hpp>
#include <xport/ops/schema.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// `self: f32[2, 3], other: f32[3]` for the tensor arguments of a call.
inline std::string describe_args(const op_info& op, const std::vector<argument>& args) {
  const auto& params = op.schema().arguments();
  std::string s;
  for (std::size_t i = 0; i < params.size() && i < args.size(); ++i) {
    if (!args[i].is_value() || args[i].as_value().kind() != value_kind::tensor) continue;
    s += (s.empty() ? "" : ", ") + params[i].name() + ": " + args[i].as_value().meta().annotation();
  }
  return s;
}

/// The device outputs live on: an explicit `device=` argument, else the first tensor
/// argument's device, else CPU (what FakeTensor reports as the fake device).
inline c10::Device output_device(const op_info& op, const std::vector<argument>& args) {
  if (op.device_arg >= 0 && static_cast<std::size_t>(op.device_arg) < args.size() &&
      args[static_cast<std::size_t>(op.device_arg)].is_device())
    return args[static_cast<std::size_t>(op.device_arg)].as_device();
  for (const auto& a : args) {
    std::optional<c10::Device> d;
    a.for_each_value([&](const value& v) {
      if (!d && v && v.kind() == value_kind::tensor) d = v.meta().device;
    });
    if (d) return *d;
  }
  return c10::Device(c10::kCPU);
}

inline bool any_requires_grad(const std::vector<argument>& args) {
  bool r = false;
  for (const auto& a : args)
    a.for_each_value([&](const value& v) {
      if (v && v.kind() == value_kind::tensor && v.meta().requires_grad) r = true;
    });
  return r;
}

/// The op has no meta kernel and xport no shape rule: what to write. A user's operator (any
/// namespace but LibTorch's own) gets the C++ registration of a Meta kernel, spelled out for it.
[[noreturn]] inline void throw_missing_meta_kernel(const op_info& op, const char* libtorch_said) {
  const auto ns = op.name.substr(0, op.name.find("::"));
  const bool libtorch_op = ns == "aten" || ns == "prims" || ns == "quantized" || ns == "_quantized";
  std::string fix;
  if (libtorch_op) {
    fix = "Fix: add a shape rule for it (ops/meta_rules.hpp), or call a composite of ops that have one.";
  } else {
    const auto bare = op.name.substr(ns.size() + 2);
    fix = "Fix: register a Meta kernel next to its other kernels, one that makes outputs of the right "
          "sizes and dtypes without reading data:\n  TORCH_LIBRARY_IMPL(" + ns + ", Meta, m) { m.impl(\"" +
          bare + "\", " + bare + "_meta); }\nwhere " + bare + "_meta takes the op's arguments (" +
          schema_string(op.schema()) + ") and returns e.g. at::empty(sizes, x.options()) (torch.export "
          "calls this the fake kernel: torch.library.register_fake in Python).";
  }
  throw missing_fake_kernel("xport.fake.missing_kernel",
                            op.qualified + " has no meta (fake) kernel in LibTorch " + torch_version() +
                                " and xport has no shape rule for it, so its output shapes cannot be "
                                "inferred without running it. " + fix + " LibTorch said: " + first_line(libtorch_said));
}

/// An op's meta kernel (or its CPU kernel on zeros) refused the arguments: the one message.
template <class Describe>
[[noreturn]] void throw_op_rejected(const op_info& op, Describe&& describe, const char* why) {
  throw graph_error("xport.fake.op_rejected",
                    op.qualified + " rejected its arguments (" + describe() + "): " + first_line(why));
}

/// Runs `op` on a stack of meta arguments and returns its results (as the op returns them),
/// falling back to xport's shape rules when LibTorch has no meta kernel for it.
/// `describe` names the arguments in error messages.
template <class Describe>
void run_meta_laid_out(const op_info& op, std::vector<c10::IValue>& stack, c10::Device device, Describe&& describe);

template <class Describe>
std::vector<c10::IValue> run_meta(const op_info& op, std::vector<c10::IValue> inputs, Describe&& describe,
                                  c10::Device device = c10::Device(c10::kCPU)) {
  run_meta_laid_out(op, inputs, device, describe);
  return inputs;
}

/// run_meta on `stack` itself: the arguments go in, the results come out (no allocation when
/// the op is known to have a meta kernel).
/// Meta runs skip autograd (and the view tracking above it) but make ordinary tensors, not
/// inference tensors: functionalization (lower/decompose.hpp) updates them in place.
using meta_run_guard = at::AutoDispatchBelowADInplaceOrView;

/// Note [Shapes from zeros] (meta_rules.hpp), with the op's refusals reported as a meta run's.
template <class Describe>
std::vector<c10::IValue> shapes_from_zeros_checked(const op_info& op, const std::vector<c10::IValue>& inputs,
                                                   Describe&& describe) {
  if (op.name == "aten::one_hot" && inputs.size() > 1 && inputs[1].isInt() && inputs[1].toInt() < 0)
    throw graph_break("xport.export.graph_break",
                      "graph break: at::one_hot without num_classes takes its class count from the "
                      "largest value in the tensor, which export cannot know: it runs on shapes only. "
                      "Way out: pass num_classes (at::one_hot(x, 10))");
  try {
    meta_run_guard guard;
    return shapes_from_zeros(op.handle, inputs);
  } catch (const c10::Error& e) {
    throw_op_rejected(op, describe, e.what_without_backtrace());
  }
}

template <class Describe>
void run_meta_in_place(const op_info& op, std::vector<c10::IValue>& stack, Describe&& describe) {
  if (op.meta_support.load(std::memory_order_relaxed) == 1) {  // known to work: the common case
    try {
      meta_run_guard guard;
      op.handle.callBoxed(stack);
      return;
    } catch (const c10::Error& e) {
      throw_op_rejected(op, describe, e.what_without_backtrace());
    } catch (const error&) {
      throw;
    } catch (const std::runtime_error& e) {  // some 1.13 kernels throw these (view's size check)
      throw_op_rejected(op, describe, e.what());
    }
  }
  const auto rule = find_meta_rule(op.qualified);  // exact overload: max.dim is not max
  const auto apply_rule = [&](const std::vector<c10::IValue>& inputs) {
    meta_run_guard guard;
    try {
      auto outs = rule(inputs);
      stack.assign(outs.begin(), outs.end());
    } catch (const c10::Error& e) {  // the rule checks what the kernel would (sdpa's shapes)
      throw_op_rejected(op, describe, e.what_without_backtrace());
    }
  };
  if (rule && op.meta_support.load(std::memory_order_relaxed) == 2) {
    apply_rule(std::vector<c10::IValue>(stack));
    return;
  }
  if (op.meta_support.load(std::memory_order_relaxed) == 2 && is_shape_only(op.qualified)) {
    stack = shapes_from_zeros_checked(op, std::vector<c10::IValue>(stack), describe);
    return;
  }
  // A failed call leaves the stack in an unspecified state: keep the inputs when a rule may
  // need them.
  const bool shape_only = !rule && is_shape_only(op.qualified);
  std::vector<c10::IValue> inputs;
  if (rule || shape_only) inputs = stack;
  try {
    meta_run_guard guard;
    op.handle.callBoxed(stack);
    op.meta_support.store(1, std::memory_order_relaxed);
    return;
  } catch (const c10::NotImplementedError& e) {
    op.meta_support.store(2, std::memory_order_relaxed);
    if (shape_only) {
      stack = shapes_from_zeros_checked(op, inputs, describe);
      return;
    }
    if (!rule) throw_missing_meta_kernel(op, e.what_without_backtrace());
    apply_rule(inputs);
    return;
  } catch (const c10::Error& e) {
    if (shape_only) {  // a meta kernel that cannot answer (1.13's one_hot): the CPU kernel can
      op.meta_support.store(2, std::memory_order_relaxed);
      stack = shapes_from_zeros_checked(op, inputs, describe);
      return;
    }
    // The op has a meta kernel and it refused the arguments (shapes, dtypes, values).
    throw_op_rejected(op, describe, e.what_without_backtrace());
  } catch (const error&) {
    throw;
  } catch (const std::runtime_error& e) {
    op.meta_support.store(1, std::memory_order_relaxed);
    throw_op_rejected(op, describe, e.what());
  }
}

/// run_meta_in_place, with a convolution's output in the memory format its kernel on `device`
/// gives it (ops/conv_layout.hpp): the strides later views depend on.
template <class Describe>
void run_meta_laid_out(const op_info& op, std::vector<c10::IValue>& stack, c10::Device device, Describe&& describe) {
  if (op.name.compare(0, 10, "aten::conv") != 0 && op.name != "aten::_convolution") {
    run_meta_in_place(op, stack, describe);
    return;
  }
  const std::vector<c10::IValue> inputs = stack;
  run_meta_in_place(op, stack, describe);
  if (stack.size() == 1 && stack[0].isTensor())
    if (const auto format = conv_output_format(op.name, inputs, device))
      stack[0] = in_format(stack[0].toTensor(), *format);
}

/// The value types of an op's results (from run_meta); tensors are reported on `device`.
inline std::vector<value_type> result_types(const op_info& op, const std::vector<c10::IValue>& results,
                                            c10::Device device, bool requires_grad) {
  std::vector<value_type> out;
  const auto add_tensor = [&](const at::Tensor& t) {
    if (!t.defined()) {
      out.push_back(value_type{value_kind::none, {}, {}});
      return;
    }
    auto m = tensor_meta::of(t);
    m.device = device;
    m.requires_grad = requires_grad && (c10::isFloatingType(m.dtype) || c10::isComplexType(m.dtype));
    out.push_back(value_type::of(std::move(m)));
  };
  for_each_output(results, [&](std::size_t, const c10::IValue& r) {
    if (r.isTensor()) add_tensor(r.toTensor());
    else if (r.isInt()) out.push_back(value_type::of_sym_int(r.toInt()));
    else if (r.isDouble()) out.push_back(value_type{value_kind::sym_float, {}, {}});
    else if (r.isBool()) out.push_back(value_type{value_kind::sym_bool, {}, {}});
    else if (r.isNone()) out.push_back(value_type{value_kind::none, {}, {}});
    else
      throw missing_fake_kernel("xport.fake.unsupported_return",
                                op.qualified + " returns a " + r.tagKind() +
                                    ", which xport cannot represent in a graph yet");
  });
  return out;
}

/// What torch.map (and torch.scan, for its ys) makes of one slice `slice` its body returns: the
/// slices stacked along a new leading dim of the length of the xs in `args[xs_arg]` (contiguous,
/// as torch.stack gives them).
inline tensor_meta mapped_output(const tensor_meta& slice, const std::vector<argument>& args, std::size_t xs_arg = 1) {
  if (args.size() <= xs_arg || !args[xs_arg].is_list() || args[xs_arg].as_list().empty() ||
      !args[xs_arg].as_list()[0].is_value() || args[xs_arg].as_list()[0].as_value().kind() != value_kind::tensor ||
      args[xs_arg].as_list()[0].as_value().meta().sizes.empty())
    throw graph_error("xport.graph.map_xs", xs_arg == 1 ? "higher_order::map_impl takes (body_graph, xs, pos_args) with at "
                                                          "least one tensor of one dim or more in xs"
                                                        : "higher_order::scan takes (combine_graph, init, xs, "
                                                          "additional_inputs) with at least one tensor of one dim or more in xs");
  sym_shape sizes{args[xs_arg].as_list()[0].as_value().meta().sizes[0]};
  sizes.append(slice.sizes.begin(), slice.sizes.end());
  auto m = tensor_meta::contiguous(slice.dtype, std::move(sizes), slice.device);
  m.requires_grad = slice.requires_grad;
  return m;
}

/// A control-flow call's outputs: those of its first subgraph (torch.cond's true branch; verify
/// checks that the other agrees) or, for while_loop, of its body (its last); map's stacked
/// (mapped_output); scan's carries as its combine graph returns them, then its ys stacked; with
/// requires_grad where any operand requires it.
inline std::vector<value_type> subgraph_outputs(const op_info& op, const std::vector<argument>& args) {
  const auto* hop = hop_of(op);
  using R = higher_order_op::results;
  const bool loop = hop && hop->typing == R::last_graph;
  const bool map = hop && hop->typing == R::mapped, scan = hop && hop->typing == R::scanned;
  const std::size_t n_carry = scan && args.size() > 1 && args[1].is_list() ? args[1].as_list().size() : 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[loop ? args.size() - 1 - i : i];
    if (!a.is_graph()) continue;
    std::vector<value_type> types;
    const node body_out = a.as_graph()->body.output_node();
    for (const auto& o : body_out.args()) {
      if (!o.is_value())
        throw graph_error("xport.graph.subgraph_output", op.qualified + ": subgraph '" + a.as_graph()->name +
                                                             "' returns a constant; its outputs must be tensors");
      auto t = o.as_value().type();
      if (t.kind == value_kind::tensor && (map || (scan && types.size() >= n_carry)))
        t.tensor = mapped_output(t.tensor, args, static_cast<std::size_t>(hop->rows_param));
      if (t.kind == value_kind::tensor)  // only a float or complex tensor can require grad (a loop's count cannot)
        t.tensor.requires_grad = (c10::isFloatingType(t.tensor.dtype) || c10::isComplexType(t.tensor.dtype)) &&
                                 (t.tensor.requires_grad || any_requires_grad(args));
      types.push_back(std::move(t));
    }
    return types;
  }
  throw graph_error("xport.graph.subgraph_missing", op.qualified + " was called without a subgraph");
}

inline std::vector<value_type> infer_outputs(const op_info& op, const std::vector<argument>& args) {
  const auto* hop = hop_of(op);
  if (op.higher_order && !(hop && hop->typing == higher_order_op::results::by_kernel)) return subgraph_outputs(op, args);
  if (reads_data(op)) throw_reads_data(op);
  torch::jit::Stack stack;
  push_meta_arguments(op, args, [](const value& v) { return v.meta().make_meta(); }, stack);
  const auto device = output_device(op, args);
  const auto results = run_meta(op, std::move(stack), [&] { return describe_args(op, args); }, device);
  return result_types(op, results, device, any_requires_grad(args));
}

/// Installs run_meta_laid_out as the way a higher-order kernel calls the operator it names on
/// meta tensors (ops/higher_order.hpp, call_named_on_meta): out_dtype's convolution has a shape
/// rule, not a Meta kernel.
inline const bool named_meta_call_installed = (call_named_on_meta = [](const op_info& op, torch::jit::Stack& stack) {
  run_meta_laid_out(op, stack, c10::Device(c10::kCPU), [] { return std::string("as a higher-order call passes them"); });
}, true);

}  // namespace detail
XPORT_END_NAMESPACE
