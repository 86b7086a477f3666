// xport/ops/call.hpp: one way to call a graph node's operator through the dispatcher.
// Every place that runs an op on a node's arguments (shape inference, capture, decomposition,
// constant folding, the interpreter) boxes the schema-bound arguments the same way here: a graph
// value becomes what a site-supplied lookup says it holds, a symbolic size its example value, a
// number (or a SymInt/SymFloat/SymBool value) where a `Tensor` or `Tensor?` is expected a
// wrapped-number tensor, every other constant the IValue its schema type wants. A meta run then
// moves the call onto the meta device (every device argument, a factory's missing one) and
// drops `pin_memory` (nothing is allocated); the op is called through its handle; its results
// come back one graph output at a time, a `Tensor[]` return giving one output per element. What
// a site does with the results (track them, lift them, type them) stays at the site.
#pragma once

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint8_t
#include <span>     // std::span
#include <utility>  // std::move
#include <vector>   // std::vector

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>
#include <xport/ops/schema.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Whether schema parameter `param` takes a tensor (`Tensor` or `Tensor?`): a number given for
/// it is passed as a wrapped-number tensor.
inline bool expects_tensor(const c10::Argument& param) {
  const auto& t = param.real_type();
  if (t->kind() == c10::TypeKind::TensorType) return true;
  return t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType;
}

/// The schema type `a` is converted against for `param`: `Tensor?` given anything but None is
/// `Tensor` (so that a number there becomes a wrapped number, as for `Tensor`), else the
/// parameter's own type.
inline const c10::TypePtr& call_type(const c10::Argument& param, const argument& a) {
  const auto& t = param.real_type();
  if (!a.is_none() && t->kind() == c10::TypeKind::OptionalType) {
    const auto& elem = t->castRaw<c10::OptionalType>()->getElementType();
    if (elem->kind() == c10::TypeKind::TensorType) return elem;
  }
  return t;
}

/// The IValue the dispatcher gets for argument `a` of parameter `param`: graph values are looked
/// up with `lookup(value) -> c10::IValue` (what they hold at this site), symbolic sizes are their
/// example value (sites that evaluate them, like the interpreter, use form_of instead).
template <class Lookup>
c10::IValue argument_ivalue(const c10::Argument& param, const argument& a, Lookup&& lookup) {
  return to_ivalue(a, call_type(param, a), lookup);
}

/// The IValue of an argument that holds no graph value and no symbol (a schema constant),
/// converted against schema type `type`.
inline c10::IValue constant_ivalue(const argument& a, const c10::TypePtr& type) {
  return to_ivalue(a, type, [](const value&) { return c10::IValue(); });
}

/// The constant IValue of argument `a` of parameter `param` (see constant_ivalue).
inline c10::IValue constant_ivalue(const c10::Argument& param, const argument& a) {
  return constant_ivalue(a, call_type(param, a));
}

/// How a schema-bound argument reaches the dispatcher, decided once (sites that precompute a
/// call, like the interpreter, switch on it; argument_ivalue follows the same rules).
enum class arg_form : std::uint8_t {
  constant,              ///< no graph value, no symbol: one IValue (constant_ivalue), every call
  value,                 ///< a graph value, passed as what it holds
  value_number,          ///< a SymInt/SymFloat/SymBool value where a tensor is expected: wrapped
  symbolic,              ///< a symbolic size, passed as an int
  symbolic_number,       ///< a symbolic size where a tensor is expected: wrapped
  scalar,                ///< a SymFloat or SymBool from sizes, passed as a float or bool
  scalar_number,         ///< a SymFloat or SymBool where a tensor is expected: wrapped
  tensor_list,           ///< a Tensor[] holding graph values
  optional_tensor_list,  ///< a Tensor?[] holding graph values (and Nones)
  int_list,              ///< a SymInt[] (or any other list) holding graph values or symbols
  any_list,              ///< an Any[] holding graph values, maybe in nested lists (a higher-order
                         ///< call's arguments by name: ops/auto_functionalize.hpp)
};

/// The form argument `a` takes as parameter `param`.
inline arg_form form_of(const c10::Argument& param, const argument& a) {
  const bool tensor = expects_tensor(param);
  if (a.is_value())
    return tensor && a.as_value() && a.as_value().kind() != value_kind::tensor ? arg_form::value_number
                                                                                : arg_form::value;
  if (a.is_symbolic()) return tensor ? arg_form::symbolic_number : arg_form::symbolic;
  if (a.is_scalar()) return tensor ? arg_form::scalar_number : arg_form::scalar;
  if (!a.is_list()) return arg_form::constant;
  bool dynamic = false;
  a.for_each_value([&](const value&) { dynamic = true; });
  for (const auto& e : a.as_list()) dynamic = dynamic || e.is_symbolic();
  if (!dynamic) return arg_form::constant;
  const auto lt = unwrap_optional(param.real_type());
  if (lt->kind() != c10::TypeKind::ListType) return arg_form::int_list;
  const auto kind = lt->castRaw<c10::ListType>()->getElementType()->kind();
  return kind == c10::TypeKind::TensorType     ? arg_form::tensor_list
         : kind == c10::TypeKind::OptionalType ? arg_form::optional_tensor_list
         : kind == c10::TypeKind::AnyType      ? arg_form::any_list
                                               : arg_form::int_list;
}

/// Whether any argument holds a symbolic size or a SymFloat / SymBool (directly or in a list): the call's result then
/// depends on the sizes of the run.
inline bool has_symbolic_argument(std::span<const argument> args) {
  for (const auto& a : args) {
    if (a.is_symbolic() || a.is_scalar()) return true;
    if (a.is_list())
      for (const auto& e : a.as_list())
        if (e.is_symbolic()) return true;
  }
  return false;
}

/// Pushes the dispatcher arguments of a call of `op` onto `stack`: `args` are schema-bound (as a
/// node or bind_arguments holds them), converted by argument_ivalue with `lookup`.
template <class Lookup>
void push_arguments(const op_info& op, std::span<const argument> args, Lookup&& lookup, torch::jit::Stack& stack) {
  const auto& params = op.schema().arguments();
  stack.reserve(stack.size() + params.size());
  for (std::size_t i = 0; i < params.size(); ++i) stack.push_back(argument_ivalue(params[i], args[i], lookup));
}

/// What a non-tensor graph value holds in a meta run: a SymInt its example value; a SymFloat,
/// SymBool or None value has none known, so it is None (an op that needs it refuses, rather
/// than run on a made-up number).
inline c10::IValue example_scalar(const value& v) {
  if (v.kind() == value_kind::sym_int) return v.type().scalar.hint();
  return {};
}

/// Makes the arguments of `op` on top of `stack` (its schema's count of them) a meta run's:
/// every device argument is the meta device, and so is a factory's missing one (it would make a
/// real tensor on the default device), and `pin_memory` is false (a meta tensor is never pinned,
/// and asking for pinned memory fails where no accelerator is). The recorded arguments keep
/// what was given.
inline void to_meta_run(const op_info& op, torch::jit::Stack& stack) {
  const auto n = op.schema().arguments().size();
  auto* args = stack.data() + (stack.size() - n);
  for (std::size_t i = 0; i < n; ++i)
    if (args[i].isDevice()) args[i] = c10::Device(c10::kMeta);
  if (op.is_factory && op.device_arg >= 0 && args[static_cast<std::size_t>(op.device_arg)].isNone())
    args[static_cast<std::size_t>(op.device_arg)] = c10::Device(c10::kMeta);
  if (op.pin_memory_arg >= 0 && args[static_cast<std::size_t>(op.pin_memory_arg)].isBool())
    args[static_cast<std::size_t>(op.pin_memory_arg)] = false;
}

/// Pushes the arguments of a meta run of `op` onto `stack`: tensor values are the meta tensors
/// `meta_of(value) -> at::Tensor` gives, other values their example_scalar; then to_meta_run.
template <class MetaOf>
void push_meta_arguments(const op_info& op, std::span<const argument> args, MetaOf&& meta_of,
                         torch::jit::Stack& stack) {
  push_arguments(
      op, args,
      [&](const value& v) -> c10::IValue {
        return v.kind() == value_kind::tensor ? c10::IValue(meta_of(v)) : example_scalar(v);
      },
      stack);
  to_meta_run(op, stack);
}

/// Calls the operator behind `handle` through the dispatcher: its arguments are taken from the
/// top of `stack`, its results are left there.
inline void call_op(const c10::OperatorHandle& handle, torch::jit::Stack& stack) { handle.callBoxed(stack); }

/// call_op, with a LibTorch error handed to `on_error(const c10::Error&)`, which throws the
/// site's own error (the original is rethrown if it returns).
template <class OnError>
void call_op(const c10::OperatorHandle& handle, torch::jit::Stack& stack, OnError&& on_error) {
  try {
    handle.callBoxed(stack);
  } catch (const c10::Error& e) {
    on_error(e);
    throw;
  }
}

/// Calls node `n`'s operator on its arguments (push_arguments with `lookup`, then call_op): its
/// results are left on `stack`.
template <class Lookup>
void call_node(const node& n, Lookup&& lookup, torch::jit::Stack& stack) {
  push_arguments(n.op(), n.args(), lookup, stack);
  call_op(n.op().handle, stack);
}

/// Calls `f(k, result)` for each graph output `k` of a call's `results` (as the op left them):
/// a Tensor[] return gives one output per element (passed as a tensor IValue), every other
/// return one. Returns the number of outputs.
template <class F>
std::size_t for_each_output(const torch::jit::Stack& results, F&& f) {
  std::size_t k = 0;
  for (const auto& r : results) {
    if (r.isTensorList()) {
      for (const auto& t : r.toTensorVector()) {
        const c10::IValue v(t);
        f(k++, v);
      }
    } else {
      f(k++, r);
    }
  }
  return k;
}

/// for_each_output that moves each result out of `results` into `f(k, c10::IValue&&)` (no
/// reference counts touched where a result is handed on); `results` is left moved from.
template <class F>
std::size_t take_outputs(torch::jit::Stack& results, F&& f) {
  std::size_t k = 0;
  for (auto& r : results) {
    if (r.isTensorList()) {
      for (auto& t : r.toTensorVector()) f(k++, c10::IValue(std::move(t)));
    } else {
      f(k++, std::move(r));
    }
  }
  return k;
}

}  // namespace detail
XPORT_END_NAMESPACE
