// xport/ops/auto_functionalize.hpp: the kernels of torch's higher-order operators that call
// another operator by name: auto_functionalized and auto_functionalized_v2 (a custom op that
// mutates its arguments, run functionally: what it writes is cloned first and returned), and
// with_effects (an op with a side effect, ordered by a token). Their descriptors are in
// ops/higher_order.hpp; this header holds what they compute, as
// torch/_higher_order_ops/auto_functionalize.py and effects.py define it.
//
// Such a call names its operator (`torch.ops.xt.kv_update_.default`, an `as_operator`
// argument: xport holds its qualified name) and passes the operator's arguments by keyword. xport
// holds those as one list of [name, value] pairs (`(Any op, Any[] kwargs)` to the dispatcher).
#pragma once

#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ops/alias.h>
#include <ATen/ops/as_strided.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/slice.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// `v`, a positional argument as a higher-order call holds it (lists of any), as `param` types
/// it (an int[], float[], bool[] or Tensor[]), for calling the operator it names.
inline c10::IValue conform_argument(const c10::IValue& v, const c10::Argument& param) {
  auto t = param.real_type();
  if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
  if (!v.isList() || t->kind() != c10::TypeKind::ListType) return v;
  const auto elem = t->castRaw<c10::ListType>()->getElementType()->kind();
  const auto items = v.toListRef();
  if (elem == c10::TypeKind::IntType || elem == c10::TypeKind::SymIntType) {
    c10::List<std::int64_t> l;
    for (const auto& e : items) l.push_back(e.toInt());
    return l;
  }
  if (elem == c10::TypeKind::FloatType) {
    c10::List<double> l;
    for (const auto& e : items) l.push_back(e.toDouble());
    return l;
  }
  if (elem == c10::TypeKind::BoolType) {
    c10::List<bool> l;
    for (const auto& e : items) l.push_back(e.toBool());
    return l;
  }
  if (elem == c10::TypeKind::TensorType) {
    c10::List<at::Tensor> l;
    for (const auto& e : items) l.push_back(e.toTensor());
    return l;
  }
  return v;
}

/// A call's keyword arguments: [name, value] pairs, as the dispatcher hands them to a kernel.
class keyword_args {
 public:
  /// No keyword arguments: a call that passes its arguments by position.
  explicit keyword_args(std::string_view hop) : hop_(hop) {}
  keyword_args(const c10::IValue& pairs, std::string_view hop) : hop_(hop) {
    for (const auto& p : pairs.toListRef()) {
      const auto& kv = p.toListRef();
      if (kv.size() != 2 || !kv[0].isString())
        throw run_error("xport.run.hop_kwargs", std::string(hop) + ": a keyword argument is not a (name, value) pair");
      names_.push_back(kv[0].toStringRef());
      values_.push_back(kv[1]);
    }
  }
  [[nodiscard]] bool has(std::string_view name) const { return index(name).has_value(); }
  /// The value of `name`; None when the call does not pass it.
  [[nodiscard]] const c10::IValue& get(std::string_view name) const {
    static const c10::IValue none;
    const auto i = index(name);
    return i ? values_[*i] : none;
  }
  /// The value of `name`, which the call must pass.
  [[nodiscard]] const c10::IValue& at(std::string_view name) const {
    const auto i = index(name);
    if (!i) throw run_error("xport.run.hop_kwargs", std::string(hop_) + ": the call has no argument '" + std::string(name) + "'");
    return values_[*i];
  }
  void set(std::string_view name, c10::IValue v) {
    if (const auto i = index(name)) values_[*i] = std::move(v);
    else {
      names_.emplace_back(name);
      values_.push_back(std::move(v));
    }
  }
  /// Pushes `op`'s arguments onto `stack`, `positional` first, then each parameter by name (its
  /// default where the call does not pass it), each list typed as its parameter is.
  void push_for(const op_info& op, const std::vector<c10::IValue>& positional, torch::jit::Stack& stack) const {
    const auto& params = op.schema().arguments();
    if (positional.size() > params.size())
      throw run_error("xport.run.hop_kwargs", std::string(hop_) + ": " + op.qualified + " takes " +
                                                   std::to_string(params.size()) + " arguments, the call passes " +
                                                   std::to_string(positional.size()));
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (i < positional.size()) {
        stack.push_back(conform_argument(positional[i], params[i]));
      } else if (const auto k = index(params[i].name())) {
        stack.push_back(conform_argument(values_[*k], params[i]));
      } else if (params[i].default_value()) {
        stack.push_back(*params[i].default_value());
      } else {
        throw run_error("xport.run.hop_kwargs", std::string(hop_) + ": " + op.qualified + " needs argument '" +
                                                     params[i].name() + "', which the call does not pass");
      }
    }
  }

 private:
  [[nodiscard]] std::optional<std::size_t> index(std::string_view name) const {
    for (std::size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == name) return i;
    return std::nullopt;
  }
  std::string_view hop_;
  std::vector<std::string> names_;
  std::vector<c10::IValue> values_;
};

/// The operator a call names (its qualified name, as xport holds an `as_operator` argument).
inline const op_info& named_operator(const c10::IValue& v, std::string_view hop) {
  if (!v.isString()) throw run_error("xport.run.hop_operator", std::string(hop) + ": its first argument is not an operator");
  const auto* op = try_find_op(v.toStringRef());
  if (!op)
    throw run_error("xport.run.hop_operator", std::string(hop) + " calls " + v.toStringRef() +
                                                  ", which is not registered in this process (load its library first)");
  return *op;
}

/// The names of `op`'s arguments it writes (`Tensor(a!)`, `Tensor(a!)[]`, `Tensor(a!)?`), in order.
inline std::vector<std::string> mutated_arguments(const op_info& op) {
  std::vector<std::string> out;
  for (const auto& a : op.schema().arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) out.push_back(a.name());
  return out;
}

/// Whether torch functionalizes `op` by auto_functionalized_v2 (torch's can_auto_functionalize):
/// an operator outside ATen that writes to tensor arguments only and returns new tensors (or
/// nothing).
inline bool auto_functionalizable(const op_info& op) {
  if (!op.is_mutable || op.higher_order) return false;
  const auto ns = std::string_view(op.name).substr(0, op.name.find("::"));
  if (ns == "aten" || ns == "prim" || ns == "prims") return false;
  for (const auto& a : op.schema().arguments()) {
    if (!a.alias_info() || !a.alias_info()->isWrite()) continue;
    auto t = a.real_type();
    if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
    if (t->kind() == c10::TypeKind::ListType) t = t->castRaw<c10::ListType>()->getElementType();
    if (t->kind() != c10::TypeKind::TensorType) return false;
  }
  for (const auto& r : op.schema().returns())
    if (r.alias_info() || r.type()->kind() != c10::TypeKind::TensorType) return false;
  return true;
}

/// torch._prims_common.clone_preserve_strides: a copy with `x`'s sizes, strides and offset.
inline at::Tensor clone_preserve_strides(const at::Tensor& x) {
  std::int64_t needed = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 0) {
      needed = 0;
      break;
    }
    needed += (x.size(d) - 1) * x.stride(d);
  }
  needed += x.storage_offset();
  const auto buffer = at::as_strided(x, {needed}, {1}, 0).clone();
  return at::as_strided(buffer, x.sizes(), x.strides(), x.storage_offset());
}

/// A call's results as a higher-order operator returns them (one list): the op's own (None for
/// an op that returns nothing, each of a tuple's), then `extra`.
inline c10::List<at::Tensor> op_results(const op_info& op, torch::jit::Stack& stack, std::vector<at::Tensor> extra) {
  c10::List<at::Tensor> out;
  if (op.schema().returns().empty()) out.push_back(at::Tensor());
  for (auto& r : stack) {
    if (r.isTensor()) out.push_back(r.toTensor());
    else if (r.isNone()) out.push_back(at::Tensor());
    else if (r.isTensorList())
      for (const auto& t : r.toTensorVector()) out.push_back(t);
    else
      throw run_error("xport.run.hop_result", op.qualified + " returns a " + r.tagKind() +
                                                 ": xport's auto_functionalized and with_effects pass tensors only");
  }
  for (auto& t : extra) out.push_back(std::move(t));
  return out;
}

// higher_order::auto_functionalized(Any op, Any[] kwargs) -> Tensor[]: op called with every
// argument it writes cloned first (strides kept); returns op's results, then those clones.
inline void auto_functionalized_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  const auto& op = named_operator(s[s.size() - 2], "auto_functionalized");
  keyword_args kw(s.back(), "auto_functionalized");
  std::vector<at::Tensor> written;
  for (const auto& name : mutated_arguments(op)) {
    const auto& v = kw.get(name);
    if (!v.isTensor())
      throw run_error("xport.run.hop_kwargs", "auto_functionalized: " + op.qualified + "'s argument '" + name +
                                                   "' is not a tensor (xport auto-functionalizes written tensors only)");
    written.push_back(clone_preserve_strides(v.toTensor()));
    kw.set(name, written.back());
  }
  torch::jit::drop(s, 2);
  torch::jit::Stack call;
  kw.push_for(op, {}, call);
  op.handle.callBoxed(call);
  s.emplace_back(op_results(op, call, std::move(written)));
}

/// One written argument's view of its base, as auto_functionalized_v2 records it (`_x_base_index`,
/// then `_x_alias`, `_x_size/_stride/_storage_offset` or `_x_slice_dim/_start/_end`).
inline c10::IValue regenerate_view(const keyword_args& kw, const std::string& prefix, const std::vector<at::Tensor>& bases) {
  const auto& index = kw.get(prefix + "_base_index");
  if (index.isNone()) return {};
  const auto i = index.toInt();
  if (i < 0 || static_cast<std::size_t>(i) >= bases.size())
    throw run_error("xport.run.hop_kwargs", "auto_functionalized_v2: " + prefix + "_base_index " + std::to_string(i) +
                                                 " is not one of its " + std::to_string(bases.size()) + " bases");
  const auto& base = bases[static_cast<std::size_t>(i)];
  if (kw.has(prefix + "_alias")) return at::alias(base);
  if (kw.has(prefix + "_storage_offset"))
    return at::as_strided(base, kw.at(prefix + "_size").toIntVector(), kw.at(prefix + "_stride").toIntVector(),
                          kw.at(prefix + "_storage_offset").toInt());
  if (kw.has(prefix + "_slice_dim")) {
    const auto& end = kw.get(prefix + "_slice_end");
    return at::slice(base, kw.at(prefix + "_slice_dim").toInt(), kw.at(prefix + "_slice_start").toOptional<std::int64_t>(),
                     end.toOptional<std::int64_t>());
  }
  return base;
}

// Note [Bases written in place]: auto_functionalized_v2 clones each base of what its operator
// writes, so that the value the base had stays for whatever reads it after the call. Where
// nothing can (the engine's planned runs: a base, or what it is a view of, that an earlier call
// made, no output, read by nothing after the call and once in it; run/plan.hpp,
// choose_bases_in_place), the kernel is passed a mask and writes such a base itself: the result
// is the same, without the copy, and the new base lives where the old one did (in the arena,
// whose slot stays taken while the new base lives).

/// An auto_functionalized_v2 call on `s`, as its kernel below makes it; `in_place[k]`: base k may
/// be written itself (Note [Bases written in place]; empty: every base is cloned).
inline void run_auto_functionalized_v2(torch::jit::Stack& s, const std::vector<std::uint8_t>& in_place) {
  const auto& op = named_operator(s[s.size() - 2], "auto_functionalized_v2");
  keyword_args kw(s.back(), "auto_functionalized_v2");
  std::vector<at::Tensor> bases;
  if (const auto& all = kw.get("_all_bases"); all.isList() || all.isTensorList())
    for (const auto& b : all.toListRef())
      bases.push_back(!b.isTensor()                                                    ? at::Tensor()
                      : bases.size() < in_place.size() && in_place[bases.size()] != 0 ? b.toTensor()
                                                                                       : clone_preserve_strides(b.toTensor()));
  bool out_op = false;
  for (const auto& name : mutated_arguments(op)) {
    const auto prefix = "_" + name;
    if (kw.has(prefix + "_dtype")) {  // an out= op: a fresh tensor of the recorded layout
      out_op = true;
      kw.set(name, at::empty_strided(kw.at(prefix + "_size").toIntVector(), kw.at(prefix + "_stride").toIntVector(),
                                     at::TensorOptions().dtype(kw.at(prefix + "_dtype").toScalarType())
                                         .device(kw.at(prefix + "_device").toDevice())));
    } else if (kw.has(prefix + "_length")) {  // a Tensor[]: one view per element
      const auto& n = kw.at(prefix + "_length");
      if (n.isNone()) continue;
      c10::List<at::Tensor> views;
      for (std::int64_t k = 0; k < n.toInt(); ++k) views.push_back(regenerate_view(kw, prefix + "_" + std::to_string(k), bases).toTensor());
      kw.set(name, views);
    } else {
      kw.set(name, regenerate_view(kw, prefix, bases));
    }
  }
  torch::jit::drop(s, 2);
  torch::jit::Stack call;
  kw.push_for(op, {}, call);
  op.handle.callBoxed(call);
  s.emplace_back(op_results(op, call, out_op ? std::vector<at::Tensor>{} : std::move(bases)));
}

// higher_order::auto_functionalized_v2(Any op, Any[] kwargs) -> Tensor[]: the bases of what op
// writes (`_all_bases`) cloned, each written argument regenerated as its view of its base, op
// called on them; returns op's results, then the new bases. An out= op (no bases) writes fresh
// tensors of the recorded sizes (`_out_size`, ...) and returns op's results only.
inline void auto_functionalized_v2_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  run_auto_functionalized_v2(*stack, {});
}

// higher_order::with_effects(Tensor token, Any op, Any[] args, Any[] kwargs) -> Tensor[]: op
// called on its arguments (positional, then by keyword), after whatever its token orders
// before it; returns a new token (an empty tensor, as torch makes one), then op's results (None
// for an op that returns nothing).
inline void with_effects_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  const auto& op = named_operator(s[s.size() - 3], "with_effects");
  const keyword_args kw(s.back(), "with_effects");
  auto positional = s[s.size() - 2].toListRef().vec();
  torch::jit::drop(s, 4);
  // a higher-order operator whose last parameter torch writes spread (call_torchbind(obj,
  // 'method', *args)): its trailing arguments are that parameter's list
  if (const auto n = op.schema().arguments().size(); op.higher_order && n > 0 && positional.size() + 1 >= n) {
    c10::impl::GenericList rest(c10::AnyType::get());
    for (std::size_t i = n - 1; i < positional.size(); ++i) rest.push_back(positional[i]);
    positional.resize(n - 1);
    positional.emplace_back(std::move(rest));
  }
  torch::jit::Stack call;
  kw.push_for(op, positional, call);
  op.handle.callBoxed(call);
  c10::List<at::Tensor> out;
  out.push_back(at::empty({0}));  // torch.tensor([])
  for (const auto& t : op_results(op, call, {})) out.push_back(t);
  s.emplace_back(std::move(out));
}

}  // namespace detail
XPORT_END_NAMESPACE
