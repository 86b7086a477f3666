// xport/run/overloads.hpp: the kernel choices the engine (run/engine.hpp) makes per node: the
// out= and in-place overloads of a functional op, whether two overloads are one kernel for a
// backend, and the dispatch key set a call resolves to (called directly on later runs).
#pragma once

#include <cstddef>        // std::size_t
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <xport/config.hpp>
#include <xport/ops/schema.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

// Every out= overload of the operators named like `op`, by operator name (built once).
inline const std::vector<c10::OperatorName>& overloads_of(const std::string& name) {
  static const auto table = [] {
    std::unordered_map<std::string, std::vector<c10::OperatorName>> t;
    for (const auto& n : c10::Dispatcher::singleton().getAllOpNames()) t[n.name].push_back(n);
    return t;
  }();
  static const std::vector<c10::OperatorName> empty;
  const auto it = table.find(name);
  return it == table.end() ? empty : it->second;
}

// Whether `op` is functional: no argument or return aliased, one Tensor returned.
inline bool is_functional(const op_info& op) {
  const auto& f = op.schema();
  if (op.is_mutable || op.is_view || op.returns_list || f.returns().size() != 1 ||
      f.returns()[0].type()->kind() != c10::TypeKind::TensorType || f.returns()[0].alias_info())
    return false;
  for (const auto& a : f.arguments())
    if (a.alias_info()) return false;
  return true;
}

inline bool same_arguments(const std::vector<c10::Argument>& a, const std::vector<c10::Argument>& b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (a[i].name() != b[i].name() || !(*a[i].type() == *b[i].type())) return false;
  return true;
}

// The out= overload of functional op `op`: the same arguments (names and types), then one
// keyword-only `Tensor(a!) out`, returning it. Null when there is none.
inline const c10::OperatorHandle* out_overload(const op_info& op) {
  if (!is_functional(op)) return nullptr;
  const auto& f = op.schema().arguments();
  for (const auto& name : overloads_of(op.name)) {
    const auto* info = try_find_op(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
    if (!info || info == &op) continue;
    const auto& s = info->schema();
    const auto& args = s.arguments();
    if (args.size() != f.size() + 1 || s.returns().size() != 1 || !same_arguments(args, f, f.size())) continue;
    const auto& out = args.back();
    if (out.kwarg_only() && out.alias_info() && out.alias_info()->isWrite() &&
        out.type()->kind() == c10::TypeKind::TensorType && s.returns()[0].alias_info())
      return &info->handle;
  }
  return nullptr;
}

// The in-place overload of functional op `op` (relu -> relu_, add.Tensor -> add_.Tensor): the
// same arguments, the first written (`Tensor(a!) self`) and returned. Null when there is none.
inline const c10::OperatorHandle* in_place_overload(const op_info& op) {
  if (!is_functional(op) || op.schema().arguments().empty()) return nullptr;
  const auto* info = try_find_op(op.name + "_" + (op.overload.empty() ? "" : "." + op.overload));
  if (!info) return nullptr;
  const auto& s = info->schema();
  const auto& f = op.schema().arguments();
  const auto& args = s.arguments();
  if (args.size() != f.size() || s.returns().size() != 1 || !s.returns()[0].alias_info()) return nullptr;
  const auto* self = args[0].alias_info();
  if (!self || !self->isWrite() || args[0].type()->kind() != c10::TypeKind::TensorType) return nullptr;
  for (std::size_t i = 1; i < args.size(); ++i)
    if (args[i].alias_info()) return nullptr;
  return same_arguments(args, f, f.size()) ? &info->handle : nullptr;
}


// The key set the dispatcher computes for a functional op's arguments on `stack`: the tensors'
// keys with the thread's included keys added and excluded ones removed, less BackendSelect and
// ADInplaceOrView, which only factories and in-place or view ops have kernels for (the
// dispatcher skips them for the others). Resolved only where that leaves a dense CPU or CUDA
// kernel; anything else (a factory, a view, sparse, ...) is dispatched on every call.
inline bool resolve_keys(const op_info& op, const torch::jit::Stack& stack, c10::DispatchKeySet& ks) {
  if (op.is_factory || op.is_view || op.is_mutable || op.inplace_view || op.device_arg >= 0) return false;
  c10::DispatchKeySet seen;
  bool any = false;
  const auto add = [&](const c10::IValue& v) {
    if (v.isTensor() && v.toTensor().defined()) {
      seen = seen | v.toTensor().key_set();
      any = true;
    }
  };
  for (const auto& v : stack) {
    if (v.isTensorList()) {
      for (const auto& t : v.toTensorVector()) add(c10::IValue(t));
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) add(e);
    } else {
      add(v);
    }
  }
  if (!any) return false;
  const auto tls = c10::impl::tls_local_dispatch_key_set();
  ks = ((seen | tls.included_) - tls.excluded_).remove(c10::DispatchKey::BackendSelect).remove(c10::DispatchKey::ADInplaceOrView);
  const auto top = ks.highestPriorityTypeId();
  return top == c10::DispatchKey::CPU || top == c10::DispatchKey::CUDA;
}

// Whether `op` and its overload `other` (out= or in-place) both have a kernel of their own for
// dispatch key `key`: then they are one kernel (a structured kernel's functional, out= and
// in-place forms), and the overload computes the same bits. A composite functional op is not:
// adaptive_avg_pool2d is a mean for a 1x1 output, its out= form a pooling kernel.
inline bool own_kernels(const op_info& op, const c10::OperatorHandle& other, c10::DispatchKey key) {
  return op.handle.hasKernelForDispatchKey(key) && other.hasKernelForDispatchKey(key);
}

}  // namespace detail
XPORT_END_NAMESPACE
