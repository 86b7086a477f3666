// xport/lower/decompose.hpp: run_decompositions(), the functional core-ATen inference IR.
// A decomposition table says, op by op, what happens to ops outside the core ATen set: kept,
// decomposed by a C++ function written with at:: calls (the user's, or xport's counterpart of
// torch's Python decomposition), or by the op's CompositeImplicitAutograd kernel. Decomposing
// re-captures the program: every node is called again through the dispatcher.
//
// On LibTorch >= 2.1 this is torch.export's own recipe: the calls go through LibTorch's
// functionalization (FunctionalTensorWrapper, views re-applied), decompositions are chosen above
// it (xport's capture key) and the functional calls it makes are recorded below it (the Fake
// key), so the program holds the same ops, in the same order and with the same names as
// torch's. On 1.13 the decomposed program is functionalized by xport's own pass
// (lower/functionalize.hpp).
#pragma once

#include <functional>     // std::function
#include <map>            // std::map
#include <optional>       // std::optional
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <vector>         // std::vector

#include <xport/ops/higher_order.hpp>
#include <xport/detail/compat.hpp>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#if XPORT_HAS_TORCH_FUNCTIONALIZATION
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#endif
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/native_dropout.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/WrapDimMinimal.h>

#include <xport/config.hpp>
#include <xport/detail/compat.hpp>
#include <xport/ops/autocast.hpp>
#include <xport/ops/call.hpp>
#include <xport/ops/core_ops.hpp>
#include <xport/ops/op_sets.hpp>
#include <xport/ops/decompositions.hpp>
#include <xport/ir/program.hpp>
#include <xport/program/dead_code.hpp>
#include <xport/lower/functionalize.hpp>
#include <xport/trace/capture.hpp>
#include <xport/trace/symbolic.hpp>

XPORT_BEGIN_NAMESPACE

/// A decomposition: the op's arguments (as the dispatcher passes them) in, its results out,
/// computed with at:: calls, which are recorded in place of the op.
using decomposition = detail::decomposition_fn;

namespace detail {

/// Whether `op` is in the core ATen set: the running LibTorch's `core` tag (>= 2.1), or the set
/// xport carries for 1.13.
inline bool is_core_op(const op_info& op) {
#if XPORT_HAS_TORCH_FUNCTIONALIZATION
  return op.handle.hasTag(at::Tag::core);
#else
  return is_core_aten_op(op.qualified);
#endif
}

}  // namespace detail

/// What run_decompositions does with each op (torch.export's decomposition table).
class decomposition_table {
 public:
  /// Lower to the core ATen op set (torch.export.default_decompositions()).
  static decomposition_table core_aten() { return decomposition_table(true); }
  /// Decompose nothing: run_decompositions only functionalizes (torch's `decomp_table={}`).
  static decomposition_table none() { return decomposition_table(false); }

  /// Keep `op` (`"aten::linear"`) as it is (torch: `del table[op]`).
  decomposition_table& keep(std::string_view op) {
    keep_.insert(qualified(op));
    return *this;
  }
  /// Decompose `op` with `fn` (torch: `table[op] = fn`).
  decomposition_table& set(std::string_view op, decomposition fn) {
    const auto q = qualified(op);
    keep_.erase(q);
    custom_[q] = std::move(fn);
    return *this;
  }

  /// The decomposition to apply to `op`, or nullptr to record it as it is (LibTorch 1.13).
  [[nodiscard]] const decomposition* find(const op_info& op) const;

  /// What lowering does with `op` (LibTorch >= 2.1), as torch.export's run_decompositions does:
  /// above autograd and functionalization (`lowering`), and below, as the functional calls are
  /// recorded (`lowering_below`: a decomposition, or nullptr to record the op).
  struct action {
    enum kind_t : std::uint8_t {
      functionalize,  ///< on through autograd and functionalization as it is
      preserve,       ///< kept whole: a composite op the table keeps (recorded past functionalization)
      decompose,      ///< by `fn`, or by its CompositeImplicitAutograd kernel when `fn` is null
    } kind;
    const decomposition* fn = nullptr;
  };
  [[nodiscard]] action lowering(const op_info& op) const;
  [[nodiscard]] action lowering_below(const op_info& op) const;

  /// Whether lowering decomposes `op` (else it stays in the lowered program: a core op, one the
  /// table keeps, or one with no known decomposition, which torch keeps too).
  [[nodiscard]] bool decomposes(const op_info& op) const;

 private:
  explicit decomposition_table(bool core) : core_(core) {}
  static std::string qualified(std::string_view op) { return find_op(op).qualified; }

  bool core_;
  std::unordered_set<std::string> keep_;
  std::unordered_map<std::string, decomposition> custom_;
};

namespace detail {

/// xport's own decompositions of non-core ops that have no CompositeImplicitAutograd kernel
/// (the C++ counterparts of entries of torch._decomp's core table).
inline const std::unordered_map<std::string, decomposition>& builtin_decompositions() {
  static const std::unordered_map<std::string, decomposition> table = [] {
    std::unordered_map<std::string, decomposition> t;
    using S = std::vector<c10::IValue>;
    t["aten::t"] = [](const S& a) -> S {
      const auto& x = a[0].toTensor();
      return {x.dim() < 2 ? x.alias() : x.permute({1, 0})};
    };
    t["aten::transpose.int"] = [](const S& a) -> S {
      const auto& x = a[0].toTensor();
      if (x.dim() == 0) return {x.alias()};
      std::vector<std::int64_t> perm(static_cast<std::size_t>(x.dim()));
      for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int64_t>(i);
      const auto d0 = c10::maybe_wrap_dim(a[1].toInt(), x.dim()), d1 = c10::maybe_wrap_dim(a[2].toInt(), x.dim());
      std::swap(perm[static_cast<std::size_t>(d0)], perm[static_cast<std::size_t>(d1)]);
      return {x.permute(perm)};
    };
    // CPU's dropout kernel draws one bernoulli_ mask like native_dropout's: same randomness
    t["aten::dropout"] = [](const S& a) -> S {
      const auto& x = a[0].toTensor();
      if (!a[2].toBool()) return {x};
      return {std::get<0>(at::native_dropout(x, a[1].toDouble(), true))};
    };
    t["aten::silu"] = torch_decomp::silu;  // computed in float for float16 and bfloat16, as torch's
    // the dtype is always given: `full` infers i64 from an integer fill value, zeros is f32
    const auto full_of = [](const S& a, int fill) -> S {
      const auto dtype = a[1].isNone() ? c10::get_default_dtype_as_scalartype() : a[1].toScalarType();
      auto opts = at::TensorOptions().dtype(dtype).layout(c10::kStrided).device(a[3].toOptional<c10::Device>());
      return {at::full(a[0].toIntVector(), fill, opts)};
    };
    t["aten::zeros"] = [full_of](const S& a) { return full_of(a, 0); };
    t["aten::ones"] = [full_of](const S& a) { return full_of(a, 1); };
    // torch's core set has neither: both are views of the same elements in order
    t["aten::_reshape_alias"] = [](const S& a) -> S { return {a[0].toTensor().view(a[1].toIntVector())}; };
    t["aten::_unsafe_view"] = [](const S& a) -> S { return {a[0].toTensor().view(a[1].toIntVector())}; };
    t["aten::zeros_like"] = [](const S& a) -> S { return {at::full_like(a[0].toTensor(), 0)}; };
    t["aten::ones_like"] = [](const S& a) -> S { return {at::full_like(a[0].toTensor(), 1)}; };
    t["aten::rsub.Scalar"] = [](const S& a) -> S {  // other - alpha * self
      return {a[0].toTensor().mul(-a[2].toScalar().toDouble()).add(a[1].toScalar())};
    };
    return t;
  }();
  return table;
}

/// Whether the op has a CompositeImplicitAutograd kernel (torch decomposes those by default).
inline bool has_composite_kernel(const op_info& op) {
  return op.handle.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
}

}  // namespace detail

inline const decomposition* decomposition_table::find(const op_info& op) const {
  if (auto it = custom_.find(op.qualified); it != custom_.end()) return &it->second;
  if (!core_ || keep_.count(op.qualified) || detail::is_core_aten_op(op.qualified)) return nullptr;
  const auto& builtin = detail::builtin_decompositions();
  if (auto it = builtin.find(op.qualified); it != builtin.end()) return &it->second;
  static const decomposition cia;  // empty: use the op's CompositeImplicitAutograd kernel
  if (detail::has_composite_kernel(op)) return &cia;
  return nullptr;  // no decomposition known: kept, as torch keeps it
}

#if XPORT_HAS_TORCH_FUNCTIONALIZATION
namespace detail {
inline bool maybe_aliasing_or_mutating(const op_info& op) {
#if XPORT_TORCH_VERSION_AT_LEAST(2, 5)
  if (op.handle.hasTag(at::Tag::maybe_aliasing_or_mutating)) return true;
#endif
  return in_set(op.qualified, maybe_aliasing_or_mutating_ops);
}
}  // namespace detail

inline decomposition_table::action decomposition_table::lowering(const op_info& op) const {
  const bool cia = detail::has_composite_kernel(op);
  if (auto it = custom_.find(op.qualified); it != custom_.end() && cia) return {action::decompose, &it->second};
  // torch decomposes a composite op that aliases or mutates whatever the table says (its
  // functionalization needs the pieces), and those whose schema hides that they may (the
  // `maybe_aliasing_or_mutating` tag: batch_norm updates its running statistics, dropout may
  // return its input)
  bool functional_schema = !op.is_mutable && !detail::maybe_aliasing_or_mutating(op);
  for (const auto& a : op.schema().arguments()) functional_schema = functional_schema && !a.alias_info();
  const auto& ports = detail::torch_composite_decompositions();
  const auto port = ports.find(op.qualified);
  if (!core_ || keep_.count(op.qualified)) {
    if (cia && functional_schema) return {action::preserve};
    // what must decompose does, by torch's decomposition where it has one (native_batch_norm)
    if (port != ports.end() && detail::maybe_aliasing_or_mutating(op)) return {action::decompose, &port->second};
    return {cia ? action::decompose : action::functionalize};
  }
  if (port != ports.end()) return {action::decompose, &port->second};
  if (cia && functional_schema && detail::in_set(op.qualified, detail::preserved_composite_ops)) return {action::preserve};
  if (cia && !detail::is_core_op(op)) return {action::decompose};
  return {action::functionalize};
}

inline decomposition_table::action decomposition_table::lowering_below(const op_info& op) const {
  if (auto it = custom_.find(op.qualified); it != custom_.end()) return {action::decompose, &it->second};
  if (!core_ || keep_.count(op.qualified)) return {action::functionalize};
  // torch's table decomposes a few core ops too (squeeze.dim into squeeze.dims)
  const auto& ports = detail::torch_decompositions();
  if (auto it = ports.find(op.qualified); it != ports.end()) return {action::decompose, &it->second};
  if (detail::has_composite_kernel(op) && !detail::is_core_op(op)) return {action::decompose};
  return {action::functionalize};  // recorded: core, or no decomposition known (kept, as torch keeps it)
}

inline bool decomposition_table::decomposes(const op_info& op) const {
  return lowering(op).kind == action::decompose || lowering_below(op).kind == action::decompose;
}
#else
inline bool decomposition_table::decomposes(const op_info& op) const { return find(op) != nullptr; }
#endif

namespace detail {

/// How the running lowering treats a control-flow call (set while run_decompositions lowers):
/// each subgraph is lowered as a program of its own, and the call recorded again on the lowered
/// subgraphs (its kernel is not run: the branch taken depends on data).
struct subgraph_lowering {
  std::unordered_map<const subgraph*, std::shared_ptr<const subgraph>> lowered;  ///< lowered first, on their own
  std::function<c10::IValue(const at::Tensor&)> hold;    ///< a tracked meta tensor -> what the calls see
  std::function<at::Tensor(const c10::IValue&)> unhold;  ///< what the calls see -> the tracked tensor
};
inline thread_local const subgraph_lowering* active_subgraph_lowering = nullptr;

inline void recall_higher_order(capture& cap, const node& n, std::unordered_map<const value_impl*, c10::IValue>& held) {
  if (!active_subgraph_lowering)
    throw export_error("xport.decompose.higher_order",
                       "run_decompositions: " + n.op().qualified + " (node '" + n.name() + "') is lowered only with "
                       "LibTorch's functionalization (LibTorch 2.x); this LibTorch (" + torch_version() + ") has none");
  const auto& lowering = *active_subgraph_lowering;
  const std::function<argument(const argument&)> now = [&](const argument& a) -> argument {
    if (a.is_graph()) {
      const auto it = lowering.lowered.find(a.as_graph().get());
      if (it == lowering.lowered.end())
        throw export_error("xport.decompose.higher_order", "run_decompositions: subgraph '" + a.as_graph()->name +
                                                               "' of node '" + n.name() + "' was not lowered");
      return it->second;
    }
    if (a.is_list()) {
      argument::list_type l;
      for (const auto& e : a.as_list()) l.push_back(now(e));
      return l;
    }
    if (!a.is_value()) return a;
    const auto& iv = held.at(a.as_value().impl());
    if (iv.isBool()) return iv.toBool();
    return cap.value_of(lowering.unhold(iv));
  };
  std::vector<argument> args;
  for (const auto& a : n.args()) args.push_back(now(a));
  const auto* hop = hop_of(n.op());
  std::vector<value_type> types;
  if (hop && hop->typing == higher_order_op::results::by_kernel)  // (auto_functionalized, with_effects): as they were
    for (auto v : n.outputs()) types.push_back(v.type());
  else
    types = subgraph_outputs(n.op(), args);
  node recorded;
  const auto metas = cap.record_values(n.op(), std::move(args), std::move(types), &recorded);
  recorded.set_tuple_operands(n.has_tuple_operands());
  for (std::size_t k = 0; k < metas.size(); ++k) held[n.output(k).impl()] = metas[k].defined() ? lowering.hold(metas[k]) : c10::IValue();
}

inline void recall(capture& cap, const node& n, std::unordered_map<const value_impl*, c10::IValue>& held);

/// A call that runs its body under a mode (no_grad, autocast), lowered as torch lowers it: the
/// body's calls, inlined, under that mode (autocast's casts become `_to_copy` calls of their own).
inline void recall_inlined(capture& cap, const node& n, const higher_order_op& hop,
                           std::unordered_map<const value_impl*, c10::IValue>& held) {
  const auto args = n.args();
  const auto& body = args[hop.graph_params().at(0)].as_graph()->body;
  const auto& operands = args.back().as_list();
  std::unordered_map<const value_impl*, c10::IValue> inner;
  const auto phs = body.placeholders();
  for (std::size_t i = 0; i < phs.size() && i < operands.size(); ++i)
    inner[phs[i].output(0).impl()] = held.at(operands[i].as_value().impl());
  const auto run_body = [&] {
    for (auto m : body.nodes())
      if (m.is_call()) recall(cap, m, inner);
  };
  if (hop.which == higher_order_op::id::set_grad_enabled) {
    const c10::AutoGradMode mode(args[0].as_bool());
    run_body();
  } else {
    const auto dtype = args[1].is_dtype() ? args[1].as_dtype() : c10::ScalarType::Undefined;
    const int cache = args[3].is_bool() ? static_cast<int>(args[3].as_bool()) : -1;
    const autocast_scope mode(autocast_device(args[0].as_string()), dtype, args[2].as_bool(), cache);
    const autocast_emulation casts(true);  // the capture records autocast's casts (Note [Autocast by probe])
    run_body();
  }
  const auto outs = body.output_node().args();
  for (std::size_t k = 0; k < outs.size() && k < n.num_outputs(); ++k)
    held[n.output(k).impl()] = inner.at(outs[k].as_value().impl());
}

/// Calls node `n` again, under the active capture, on what its operands hold now (`held`:
/// source value -> IValue), and records what each of its outputs holds after the call.
inline void recall(capture& cap, const node& n, std::unordered_map<const value_impl*, c10::IValue>& held) {
  cap.builder().like(n);
  if (const auto* hop = hop_of(n.op()); hop && hop->inlined_by_lowering) return recall_inlined(cap, n, *hop, held);
  if (n.op().higher_order) return recall_higher_order(cap, n, held);
  torch::jit::Stack stack;
  call_node(n, [&](const value& v) -> const c10::IValue& { return held.at(v.impl()); }, stack);
  take_outputs(stack, [&](std::size_t k, c10::IValue&& r) { held[n.output(k).impl()] = std::move(r); });
}

/// A decomposition that LibTorch refused on the program's shapes (a composite kernel that reads
/// what meta tensors do not have): typed, with the way to keep the op.
[[noreturn]] inline void throw_decomposition_failed(const op_info& op, const c10::Error& e) {
  throw export_error("xport.decompose.failed",
                     "run_decompositions: decomposing " + op.qualified + " failed on the program's shapes: " +
                         first_line(e.what_without_backtrace()) + ". Keep the op whole instead: pass "
                         "decomposition_table::core_aten().keep(\"" + op.name + "\")");
}

/// Re-captures `p` with `table`'s decompositions applied (no functionalization).
inline exported_program decompose(const exported_program& p, const decomposition_table& table) {
  refuse_custom_objs(p, "decompose");
  capture cap;
  cap.set_decompose_hook([&table, &cap](const op_info& op, torch::jit::Stack& stack) {
    const auto* d = table.find(op);
    if (!d) return false;
    capture_reenabled recording;  // the decomposition's own ATen calls are recorded
    cap.devices_as_code_sees(op, stack);
    try {
      if (*d) {
        const auto n = op.schema().arguments().size();
        std::vector<c10::IValue> args(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(n)),
                                      std::make_move_iterator(stack.end()));
        torch::jit::drop(stack, n);
        for (auto& r : (*d)(args)) stack.push_back(std::move(r));
      } else {
        op.handle.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, stack);
      }
    } catch (const c10::Error& e) {
      throw_decomposition_failed(op, e);
    }
    return true;
  });
  const auto& g = p.graph();
  const auto phs = g.placeholders();
  std::unordered_map<const value_impl*, c10::IValue> held;  // source value -> what the calls see
  for (std::size_t i = 0; i < phs.size(); ++i) {
    const value v = phs[i].output(0);
    held[v.impl()] = cap.add_placeholder(p.signature().input_specs.at(i), v.type());
  }
  if (!phs.empty() && phs[0].output(0).kind() == value_kind::tensor) cap.set_fake_device(phs[0].output(0).meta().device);
  {
    capture_scope scope(cap);
    for (auto n : g.nodes())
      if (n.is_call()) recall(cap, n, held);
  }
  const auto outs = g.output_node().args();
  const auto& specs = p.signature().output_specs;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].is_value()) {  // a constant output (None): returned as it is
      cap.builder().output_arg(outs[i], specs.at(i).kind, specs.at(i).target);
      continue;
    }
    cap.builder().output(cap.value_of(held.at(outs[i].as_value().impl()).toTensor()), specs.at(i).kind,
                         specs.at(i).target);
  }
  cap.builder().set_state(p.state_dict(), p.constants());
  cap.builder().set_examples(p.example_inputs());
  auto q = std::move(cap.builder()).build(p.dialect(), verify_options{.check_schemas = false});
  q.set_call_spec(p.in_spec(), p.out_spec());
  q.range_constraints_mut() = p.range_constraints();
  return q;
}

inline bool needs_more_work(const exported_program& p, const decomposition_table& table) {
  for (auto n : p.graph().nodes())
    if (n.is_call() && (n.op().is_mutable || table.find(n.op()))) return true;
  return false;
}

#if XPORT_HAS_TORCH_FUNCTIONALIZATION

/// The key below LibTorch's functionalization where lowering records the functional calls.
inline constexpr c10::DispatchKey lowering_record_key = c10::DispatchKey::Fake;

/// The table of the lowering running on this thread (what the recording fallback decomposes).
inline thread_local const decomposition_table* active_lowering = nullptr;

/// Runs `a`'s decomposition of `op` on `stack` (its device arguments as `cap`'s code sees them):
/// its calls come back to the key that called this.
inline void run_decomposition(const capture& cap, const op_info& op, const decomposition_table::action& a,
                              torch::jit::Stack& stack) {
  cap.devices_as_code_sees(op, stack);
  if (a.fn && *a.fn) {
    const auto n = op.schema().arguments().size();
    std::vector<c10::IValue> args(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(n)),
                                  std::make_move_iterator(stack.end()));
    torch::jit::drop(stack, n);
    for (auto& r : (*a.fn)(args)) stack.push_back(std::move(r));
  } else {
    op.handle.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, stack);
  }
}

inline void lowering_record_fallback(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard no_record(c10::DispatchKeySet({lowering_record_key, capture_key}));
  // Functionalization first runs an in-place op on fresh meta copies of its arguments (to catch
  // shape errors), with the Python key excluded: that check is not part of the program, and
  // torch's own tracing does not see it either.
  if (!active_capture || !active_lowering || c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Python)) {
    handle.callBoxed(stack);
    return;
  }
  const op_info& op = active_capture->op_for(handle);
  const auto a = active_lowering->lowering_below(op);
  if (a.kind == decomposition_table::action::decompose) {
    // below autograd, as torch's decompositions run as it records; the pieces come back here
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    c10::impl::ExcludeDispatchKeyGuard no_top(capture_key);
    c10::impl::tls_set_dispatch_key_excluded(lowering_record_key, false);
    try {
      run_decomposition(*active_capture, op, a, *stack);
    } catch (...) {
      c10::impl::tls_set_dispatch_key_excluded(lowering_record_key, true);
      throw;
    }
    c10::impl::tls_set_dispatch_key_excluded(lowering_record_key, true);
    return;
  }
  active_capture->record_op(op, *stack);
}

inline void ensure_lowering_record_fallback() {
  static const bool registered = [] {
    try {
      static const c10::RegistrationHandleRAII handle = c10::Dispatcher::singleton().registerFallback(
          lowering_record_key, c10::KernelFunction::makeFromBoxedFunction<&lowering_record_fallback>(),
          "xport lowering fallback");
      (void)handle;
    } catch (const c10::Error& e) {
      throw export_error("xport.decompose.fallback",
                         "cannot register xport's lowering fallback for dispatch key Fake: another library "
                         "already uses it. LibTorch said: " + first_line(e.what_without_backtrace()));
    }
    return true;
  }();
  (void)registered;
}

/// A tensor argument's value below functionalization (pending view updates applied).
inline c10::IValue unwrap_functional(const c10::IValue& v) {
  namespace fz = at::functionalization::impl;
  const auto one = [](const at::Tensor& t) {
    if (!t.defined() || !fz::isFunctionalTensor(t)) return t;
    fz::sync(t);
    return fz::from_functional_tensor(t);
  };
  if (v.isTensor()) return one(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const auto& t : v.toTensorVector()) out.push_back(one(t));
    return out;
  }
  if (v.isList() && v.toListRef().size() && (v.toListRef()[0].isTensor() || v.toListRef()[0].isNone())) {
    c10::List<c10::optional<at::Tensor>> out;
    for (const auto& e : v.toListRef()) out.push_back(e.isNone() ? c10::optional<at::Tensor>() : one(e.toTensor()));
    return out;
  }
  return v;
}

/// A composite op the table keeps: recorded whole, past functionalization (it mutates nothing),
/// its results handed back as functional tensors.
inline void record_preserved(capture& cap, const op_info& op, torch::jit::Stack& stack) {
  const auto n = op.schema().arguments().size();
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end(); ++it) *it = unwrap_functional(*it);
  {
    c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKeySet({lowering_record_key, c10::DispatchKey::Functionalize}));
    cap.record_op(op, stack);
  }
  const auto m = op.schema().returns().size();
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(m); it != stack.end(); ++it) {
    if (it->isTensor()) *it = at::functionalization::impl::to_functional_tensor(it->toTensor());
    else if (it->isTensorList()) *it = c10::List<at::Tensor>(at::functionalization::impl::to_functional_tensor(it->toTensorVector()));
  }
}

/// A custom op that writes to its arguments, lowered as torch lowers it: one
/// auto_functionalized_v2 call (what it writes cloned, the op run on the clones), whose new bases
/// then become what the written arguments hold. Each written argument is its own base (torch
/// records a view's base and how to view it: xport writes the view back through its base, the
/// same values); the op's own results are handed back.
inline void record_auto_functionalized(capture& cap, const op_info& op, torch::jit::Stack& stack) {
  namespace fz = at::functionalization::impl;
  const auto& params = op.schema().arguments();
  const auto n = params.size();
  std::vector<c10::IValue> args(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(n)),
                                std::make_move_iterator(stack.end()));
  torch::jit::drop(stack, n);
  std::vector<at::Tensor> bases;  // the functional tensors written, each once
  const auto base_index = [&](const at::Tensor& t) -> std::int64_t {
    for (std::size_t i = 0; i < bases.size(); ++i)
      if (bases[i].unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return static_cast<std::int64_t>(i);
    bases.push_back(t);
    return static_cast<std::int64_t>(bases.size() - 1);
  };
  c10::impl::GenericList kwargs(c10::AnyType::get()), written(c10::AnyType::get());
  const auto pair = [](const std::string& name, c10::IValue v) {
    c10::impl::GenericList kv(c10::AnyType::get());
    kv.push_back(name);
    kv.push_back(std::move(v));
    return kv;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const auto& name = params[i].name();
    if (!params[i].alias_info() || !params[i].alias_info()->isWrite()) {
      kwargs.push_back(pair(name, unwrap_functional(args[i])));
    } else if (args[i].isTensor()) {
      written.push_back(pair("_" + name + "_base_index", base_index(args[i].toTensor())));
    } else if (args[i].isNone()) {
      written.push_back(pair("_" + name + "_base_index", c10::IValue()));
    } else {  // a Tensor[]: its length, then each element's base
      const auto ts = args[i].toTensorVector();
      written.push_back(pair("_" + name + "_length", static_cast<std::int64_t>(ts.size())));
      for (std::size_t k = 0; k < ts.size(); ++k)
        written.push_back(pair("_" + name + "_" + std::to_string(k) + "_base_index", base_index(ts[k])));
    }
  }
  for (const auto& w : written) kwargs.push_back(w);
  c10::List<at::Tensor> unwrapped;
  for (const auto& b : bases) unwrapped.push_back(unwrap_functional(b).toTensor());
  kwargs.push_back(pair("_all_bases", unwrapped));
  const op_info& hop = find_op("higher_order::auto_functionalized_v2");
  torch::jit::Stack call{c10::IValue(op.qualified), c10::IValue(kwargs)};
  {
    c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKeySet({lowering_record_key, c10::DispatchKey::Functionalize}));
    cap.record_op(hop, call);
  }
  const auto results = call.back().toTensorVector();
  const auto n_results = results.size() - bases.size();
  for (std::size_t j = 0; j < bases.size(); ++j) {  // what the bases hold now
    fz::replace_(bases[j], results[n_results + j]);
    fz::commit_update(bases[j]);
    fz::sync(bases[j]);
  }
  for (std::size_t k = 0; k < op.schema().returns().size(); ++k) stack.emplace_back(fz::to_functional_tensor(results[k]));
}

/// What requires grad where torch's tracing runs autograd (above functionalization): parameters
/// that do, and what differentiable ops make from them outside decompositions that run below
/// autograd. xport lowers without autograd (it records nothing); this answers what torch's
/// decompositions ask (matmul folds a batch when its right operand requires grad).
class grad_tracker {
 public:
  void mark(const at::Tensor& t) {
    if (!t.defined() || !(c10::isFloatingType(t.scalar_type()) || c10::isComplexType(t.scalar_type()))) return;
    if (set_.insert(t.unsafeGetTensorImpl()).second) keep_.push_back(t);  // kept: no address reuse
  }
  [[nodiscard]] bool requires_grad(const at::Tensor& t) const { return t.defined() && set_.count(t.unsafeGetTensorImpl()); }
  /// Whether any tensor among the `n` arguments on top of `stack` requires grad.
  [[nodiscard]] bool any(const torch::jit::Stack& stack, std::size_t n) const {
    bool r = false;
    for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end() && !r; ++it) {
      if (it->isTensor()) r = requires_grad(it->toTensor());
      else if (it->isTensorList())
        for (const auto& t : it->toTensorVector()) r = r || requires_grad(t);
    }
    return r;
  }
  /// Marks the `n` results on top of `stack`.
  void mark_results(const torch::jit::Stack& stack, std::size_t n) {
    for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end(); ++it) {
      if (it->isTensor()) mark(it->toTensor());
      else if (it->isTensorList())
        for (const auto& t : it->toTensorVector()) mark(t);
    }
  }

 private:
  std::unordered_set<const c10::TensorImpl*> set_;
  std::vector<at::Tensor> keep_;
};

/// Restores a thread-local setting of functionalization when it goes.
struct reapply_views_scope {
  bool prev = at::functionalization::impl::getFunctionalizationReapplyViewsTLS();
  reapply_views_scope() { at::functionalization::impl::setFunctionalizationReapplyViewsTLS(true); }
  ~reapply_views_scope() { at::functionalization::impl::setFunctionalizationReapplyViewsTLS(prev); }
  reapply_views_scope(const reapply_views_scope&) = delete;
  reapply_views_scope& operator=(const reapply_views_scope&) = delete;
};

/// What the lowering's capture does with each op it sees above functionalization: `table`'s
/// action, with what requires grad tracked in `grads` (`below_autograd`: inside a decomposition
/// torch runs as an autograd kernel, where nothing is marked).
inline capture::decompose_hook lowering_hook(capture& cap, const decomposition_table& table, grad_tracker& grads,
                                             bool& below_autograd) {
  return [&cap, &table, &grads, &below_autograd](const op_info& op, torch::jit::Stack& stack) {
    if (auto_functionalizable(op)) {  // a custom op that mutates: auto_functionalized_v2, as torch lowers it
      record_auto_functionalized(cap, op, stack);
      return true;
    }
    const auto a = table.lowering(op);
    const bool grad = !below_autograd && grads.any(stack, op.schema().arguments().size());
    if (a.kind == decomposition_table::action::functionalize) {
      op.handle.callBoxed(stack);  // on through functionalization, recorded below it
    } else if (a.kind == decomposition_table::action::preserve) {
      record_preserved(cap, op, stack);
    } else {
      capture_reenabled recording;  // the decomposition's own calls come back here
      const bool was_below = below_autograd;
      below_autograd = below_autograd || (a.fn && detail::runs_below_autograd(op));
      try {
        run_decomposition(cap, op, a, stack);
      } catch (...) {
        below_autograd = was_below;
        throw;
      }
      below_autograd = was_below;
    }
    if (grad) grads.mark_results(stack, op.schema().returns().size());
    return true;
  };
}

/// The placeholders of `p` in `cap`, each held as a functional tensor (parameters that require
/// grad marked in `grads`); returns each placeholder's meta tensor (undefined where it has none).
inline std::vector<at::Tensor> functional_placeholders(capture& cap, const exported_program& p, grad_tracker& grads,
                                                       std::unordered_map<const value_impl*, c10::IValue>& held) {
  namespace fz = at::functionalization::impl;
  const auto phs = p.graph().placeholders();
  std::vector<at::Tensor> inputs(phs.size());
  for (std::size_t i = 0; i < phs.size(); ++i) {
    const value v = phs[i].output(0);
    auto meta = cap.add_placeholder(p.signature().input_specs.at(i), v.type());
    if (meta.defined()) {
      inputs[i] = meta;
      auto ft = fz::to_functional_tensor(meta);
      if (v.kind() == value_kind::tensor && v.meta().requires_grad) grads.mark(ft);
      held[v.impl()] = std::move(ft);
    } else {
      held[v.impl()] = meta;
    }
  }
  if (!phs.empty() && phs[0].output(0).kind() == value_kind::tensor) cap.set_fake_device(phs[0].output(0).meta().device);
  return inputs;
}

/// What replaying `p`'s calls under `cap` left: the new value of each placeholder it mutated
/// (in placeholder order, empty where none), and the outputs.
struct functional_replay {
  std::vector<std::optional<value>> mutated;
  std::vector<argument> results;
};

/// Calls every node of `p` again on functional tensors (`held`, from functional_placeholders),
/// then reads what each input holds now and the outputs: pending views are replayed (recorded
/// below, not decomposed again, as in torch).
inline functional_replay replay_functional(capture& cap, const exported_program& p, const std::vector<at::Tensor>& inputs,
                                           std::unordered_map<const value_impl*, c10::IValue>& held,
                                           const std::function<void()>& after_calls = {}) {
  const auto& g = p.graph();
  const auto phs = g.placeholders();
  functional_replay out{std::vector<std::optional<value>>(phs.size()), {}};
  c10::InferenceMode no_inference(false);
  capture_scope scope(cap);
  c10::impl::IncludeDispatchKeyGuard functionalize(c10::DispatchKey::Functionalize), record(lowering_record_key);
  reapply_views_scope views;
  for (auto n : g.nodes())
    if (n.is_call()) recall(cap, n, held);
  if (after_calls) after_calls();  // the joint graph's backward (lower/joint.hpp), recorded the same way
  c10::impl::ExcludeDispatchKeyGuard below(capture_key);
  const auto now = [&](const value& v) { return cap.value_of(unwrap_functional(held.at(v.impl())).toTensor()); };
  for (std::size_t i = 0; i < phs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    const value nv = now(phs[i].output(0));
    if (nv != cap.value_of(inputs[i])) out.mutated[i] = nv;
  }
  const node graph_out = g.output_node();
  for (const auto& a : graph_out.args()) {
    if (!a.is_value()) {  // a constant output (None): returned as it is
      out.results.push_back(a);
      continue;
    }
    if (a.as_value().kind() != value_kind::tensor)
      throw error("xport.decompose.output", "run_decompositions: an output that is not a tensor value is not supported");
    out.results.push_back(now(a.as_value()));
  }
  return out;
}

/// The lowered program's outputs: mutated inputs first (in input order), as torch orders them,
/// then the other outputs of `p`.
inline void lowered_outputs(capture& cap, const exported_program& p, const functional_replay& replay,
                            std::optional<std::size_t> loss_index = std::nullopt) {
  const auto& specs = p.signature().input_specs;
  const auto& out_specs = p.signature().output_specs;
  const auto& results = replay.results;
  const auto mutation_target = [](const output_spec& o) {
    return o.kind == output_kind::buffer_mutation || o.kind == output_kind::parameter_mutation ||
           o.kind == output_kind::user_input_mutation;
  };
  for (std::size_t i = 0; i < replay.mutated.size(); ++i) {
    const auto& spec = specs[i];
    std::optional<value> v = replay.mutated[i];
    for (std::size_t o = 0; !v && o < out_specs.size(); ++o)  // an already functional program's
      if (mutation_target(out_specs[o]) && results[o].is_value() &&
          out_specs[o].target == (spec.kind == input_kind::user_input ? std::optional(spec.arg.name) : spec.target))
        v = results[o].as_value();
    if (!v) continue;
    switch (spec.kind) {
      case input_kind::buffer: cap.builder().output(*v, output_kind::buffer_mutation, spec.target); break;
      case input_kind::parameter: cap.builder().output(*v, output_kind::parameter_mutation, spec.target); break;
      case input_kind::user_input: cap.builder().output(*v, output_kind::user_input_mutation, spec.arg.name); break;
      default:
        throw functionalize_error("xport.functionalize.constant_mutation",
                                  "the program mutates constant '" + spec.target.value_or(spec.arg.name) +
                                      "'; register it as a buffer");
    }
  }
  for (std::size_t o = 0; o < out_specs.size(); ++o)
    if (!mutation_target(out_specs[o]))
      cap.builder().output_arg(results[o], o == loss_index ? output_kind::loss_output : out_specs[o].kind,
                               out_specs[o].target);
}

/// torch.export's lowering of `p` (one size): every node called again on functional meta
/// tensors; `table` decides above functionalization, the functional calls are recorded below.
/// What lower_functional adds for a joint graph (lower/joint.hpp): the backward, run by autograd
/// on the replayed forward, and its gradients as outputs.
struct joint_hooks {
  std::size_t loss_index = 0;
  // requires grad on what is differentiated: (placeholder index, its functional tensor)
  std::function<void(std::size_t, at::Tensor&)> mark;
  // runs the backward after the forward's calls (held: source value -> what the calls saw)
  std::function<void(capture&, std::unordered_map<const value_impl*, c10::IValue>&)> backward;
  // adds the gradient outputs, after the others
  std::function<void(capture&)> outputs;
};

/// `p`'s preserved call signatures (Note [Preserved module calls]) with their boundary values
/// named as the lowered program names them: each tensor value becomes the value its lowering
/// gave (the last call of a decomposition, torch's provenance `from_node` gives the same).
inline std::map<std::string, module_call_signature> carried_module_calls(
    capture& cap, const exported_program& p, const std::unordered_map<const value_impl*, c10::IValue>& held) {
  auto out = p.module_call_signatures();
  if (out.empty()) return out;
  std::unordered_map<std::string, const value_impl*> by_name;
  for (auto n : p.graph().nodes())
    for (auto v : n.outputs()) by_name.emplace(v.name(), v.impl());
  for (auto& [fqn, sig] : out)
    for (auto* side : {&sig.inputs, &sig.outputs})
      for (auto& a : *side) {
        const auto v = by_name.find(a.name);
        const auto h = v == by_name.end() ? held.end() : held.find(v->second);
        if (a.type != argument_spec::kind::tensor || h == held.end()) continue;
        const auto now = unwrap_functional(h->second);
        if (now.isTensor()) a.name = cap.value_of(now.toTensor()).name();
      }
  return out;
}

inline exported_program lower_functional(const exported_program& p, const decomposition_table& table,
                                         const joint_hooks* joint = nullptr) {
  ensure_lowering_record_fallback();
  capture cap;
  cap.set_python_frontend(false);
  grad_tracker grads;
  bool below_autograd = false;  // inside a decomposition torch runs as an autograd kernel
  cap.set_decompose_hook(lowering_hook(cap, table, grads, below_autograd));
  const std::function<bool(const at::Tensor&)> grad_query = [&](const at::Tensor& t) { return grads.requires_grad(t); };
  struct grad_scope {
    const std::function<bool(const at::Tensor&)>* prev;
    ~grad_scope() { torch_decomp::requires_grad_query = prev; }
  } restore_grads{torch_decomp::requires_grad_query};
  torch_decomp::requires_grad_query = &grad_query;
  struct lowering_scope {
    const decomposition_table* prev;
    ~lowering_scope() { active_lowering = prev; }
  } restore{active_lowering};
  active_lowering = &table;
  std::unordered_map<const value_impl*, c10::IValue> held;  // source value -> what the calls see
  const auto inputs = functional_placeholders(cap, p, grads, held);  // placeholder -> its meta tensor
  std::map<std::string, module_call_signature> calls;
  if (!joint) {
    lowered_outputs(cap, p, replay_functional(cap, p, inputs, held));
    calls = carried_module_calls(cap, p, held);
  } else {
    const auto phs = p.graph().placeholders();
    for (std::size_t i = 0; i < phs.size(); ++i)
      if (auto& h = held.at(phs[i].output(0).impl()); h.isTensor()) {
        auto t = h.toTensor();
        joint->mark(i, t);
        h = t;
      }
    lowered_outputs(cap, p, replay_functional(cap, p, inputs, held, [&] { joint->backward(cap, held); }),
                    joint->loss_index);
    joint->outputs(cap);
  }
  cap.builder().set_state(p.state_dict(), p.constants());
  cap.builder().set_examples(p.example_inputs());
  auto q = std::move(cap.builder()).build(ir_dialect::aten, verify_options{.check_schemas = false});
  q.set_call_spec(p.in_spec(), p.out_spec());
  q.range_constraints_mut() = p.range_constraints();
  if (!joint) q.set_module_types(p.module_types());
  for (auto& [fqn, sig] : calls) q.set_module_call_signature(fqn, std::move(sig));
  eliminate_dead_code(q.graph_mut());
  return q;
}

#endif  // XPORT_HAS_TORCH_FUNCTIONALIZATION

}  // namespace detail

/// torch.export's run_decompositions(): the functional inference IR (dialect ATEN), lowered to
/// core ATen by `table` (the default), or only functionalized (decomposition_table::none()).
/// `p` is left as it is.
inline exported_program run_decompositions(const exported_program& p,
                                           const decomposition_table& table = decomposition_table::core_aten()) {
  detail::refuse_custom_objs(p, "run_decompositions");
  // dynamic dims: decomposed at several sizes and made symbolic again (trace/symbolic.hpp)
  auto q = detail::transform_symbolic(p, "run_decompositions", [&](const exported_program& s) {
#if XPORT_HAS_TORCH_FUNCTIONALIZATION
    // control flow: each subgraph is lowered first, on its own (at these sizes)
    detail::subgraph_lowering lowering{
        {},
        [](const at::Tensor& meta) -> c10::IValue { return at::functionalization::impl::to_functional_tensor(meta); },
        [](const c10::IValue& v) { return detail::unwrap_functional(v).toTensor(); }};
    // (a body lowering inlines, a no_grad or autocast region's, is looked into instead)
    const std::function<void(const graph&)> lower_subgraphs = [&](const graph& outer) {
      for (auto n : outer.nodes())
        if (n.is_call() && n.op().higher_order)
          for_each_subgraph(n, [&](const subgraph& g) {
            if (const auto* hop = hop_of(n.op()); hop && hop->inlined_by_lowering) return lower_subgraphs(g.body);
            auto lowered = run_decompositions(subgraph_program(g), table);
            auto body = lowered.graph().clone();
            if (g.body.returns_bare()) body.set_returns_bare(true);
            if (g.body.returns_list()) body.set_returns_list(true);
            lowering.lowered.emplace(&g, std::make_shared<const subgraph>(subgraph{g.name, std::move(body)}));
          });
    };
    lower_subgraphs(s.graph());
    struct lowering_scope {
      const detail::subgraph_lowering* prev = detail::active_subgraph_lowering;
      ~lowering_scope() { detail::active_subgraph_lowering = prev; }
    } restore;
    detail::active_subgraph_lowering = &lowering;
    try {
      return detail::lower_functional(s, table);
    } catch (const c10::Error& e) {
      throw export_error("xport.decompose.failed", "run_decompositions: LibTorch refused a call while lowering "
                                                   "the program: " + detail::first_line(e.what_without_backtrace()));
    }
#else
    auto r = functionalize(detail::decompose(s, table));
    for (int round = 0; round < 3 && detail::needs_more_work(r, table); ++round)
      r = functionalize(detail::decompose(r, table));
    eliminate_dead_code(r.graph_mut());  // e.g. the reserve buffer batch_norm's decomposition makes
    return r;
#endif
  });
  verify(q);
  // the inputs are the same, in the same order: they keep their custom metadata
  const auto from = p.graph().placeholders();
  const auto to = q.graph().placeholders();
  for (std::size_t i = 0; i < from.size() && i < to.size(); ++i) to[i].copy_custom_meta_from(from[i]);
  return q;
}

XPORT_END_NAMESPACE
