// xport/trace/decompose.hpp: run_decompositions(), the functional core-ATen inference IR.
// A decomposition table says, op by op, what happens to ops outside the core ATen set: kept,
// decomposed by a C++ function written with at:: calls (the user's, or xport's own), or by the
// op's CompositeImplicitAutograd kernel. Decomposing re-captures the program: every node is
// called again through the dispatcher with the capture on, and an op to decompose runs its
// decomposition, whose ATen calls are recorded in its place (recursively). The result is then
// functionalized (passes/functionalize.hpp): no mutation left, buffer updates as outputs.
#pragma once

#include <functional>     // std::function
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/native_dropout.h>
#include <c10/core/WrapDimMinimal.h>

#include <xport/config.hpp>
#include <xport/detail/core_ops.hpp>
#include <xport/ir/program.hpp>
#include <xport/passes/dce.hpp>
#include <xport/passes/functionalize.hpp>
#include <xport/trace/capture.hpp>
#include <xport/trace/symbolic.hpp>

XPORT_BEGIN_NAMESPACE

/// A decomposition: the op's arguments (as the dispatcher passes them) in, its results out,
/// computed with at:: calls, which are recorded in place of the op.
using decomposition = std::function<std::vector<c10::IValue>(const std::vector<c10::IValue>& args)>;

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

  /// The decomposition to apply to `op`, or nullptr to record it as it is.
  [[nodiscard]] const decomposition* find(const op_info& op) const;

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
    t["aten::silu"] = [](const S& a) -> S {
      const auto& x = a[0].toTensor();
      return {x.mul(x.sigmoid())};
    };
    t["aten::zeros"] = [](const S& a) -> S {
      auto opts = at::TensorOptions().dtype(a[1].toOptional<c10::ScalarType>()).device(a[3].toOptional<c10::Device>());
      return {at::full(a[0].toIntVector(), 0, opts)};
    };
    t["aten::ones"] = [](const S& a) -> S {
      auto opts = at::TensorOptions().dtype(a[1].toOptional<c10::ScalarType>()).device(a[3].toOptional<c10::Device>());
      return {at::full(a[0].toIntVector(), 1, opts)};
    };
    t["aten::zeros_like"] = [](const S& a) -> S { return {at::full_like(a[0].toTensor(), 0)}; };
    t["aten::ones_like"] = [](const S& a) -> S { return {at::full_like(a[0].toTensor(), 1)}; };
    t["aten::rsub.Scalar"] = [](const S& a) -> S {  // other - alpha * self
      return {a[0].toTensor().mul(-a[2].toScalar().toDouble()).add(a[1].toScalar())};
    };
    return t;
  }();
  return table;
}

}  // namespace detail

inline const decomposition* decomposition_table::find(const op_info& op) const {
  if (auto it = custom_.find(op.qualified); it != custom_.end()) return &it->second;
  if (!core_ || keep_.count(op.qualified) || detail::is_core_aten_op(op.qualified)) return nullptr;
  const auto& builtin = detail::builtin_decompositions();
  if (auto it = builtin.find(op.qualified); it != builtin.end()) return &it->second;
  static const decomposition cia;  // empty: use the op's CompositeImplicitAutograd kernel
  if (op.handle.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) return &cia;
  return nullptr;  // no decomposition known: kept, as torch keeps it
}

namespace detail {

/// Re-captures `p` with `table`'s decompositions applied (no functionalization).
inline exported_program decompose(const exported_program& p, const decomposition_table& table) {
  capture cap;
  cap.set_decompose_hook([&table](const op_info& op, torch::jit::Stack& stack) {
    const auto* d = table.find(op);
    if (!d) return false;
    capture_reenabled recording;  // the decomposition's own ATen calls are recorded
    if (*d) {
      const auto n = op.schema().arguments().size();
      std::vector<c10::IValue> args(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(n)),
                                    std::make_move_iterator(stack.end()));
      torch::jit::drop(stack, n);
      for (auto& r : (*d)(args)) stack.push_back(std::move(r));
    } else {
      op.handle.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, stack);
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
    for (auto n : g.nodes()) {
      if (!n.is_call()) continue;
      const auto& op = n.op();
      const auto& params = op.schema().arguments();
      torch::jit::Stack stack;
      stack.reserve(params.size());
      const auto args = n.args();
      for (std::size_t i = 0; i < params.size(); ++i)
        stack.push_back(to_ivalue(args[i], params[i].real_type(), [&](const value& v) { return held.at(v.impl()); }));
      cap.builder().at(n.source()).in_module(n.module_path());
      op.handle.callBoxed(stack);
      std::size_t k = 0;
      for (auto& r : stack) {
        if (r.isTensorList()) {
          for (const auto& t : r.toTensorVector()) held[n.output(k++).impl()] = t;
        } else {
          held[n.output(k++).impl()] = r;
        }
      }
    }
  }
  const auto outs = g.output_node().args();
  const auto& specs = p.signature().output_specs;
  for (std::size_t i = 0; i < outs.size(); ++i)
    cap.builder().output(cap.value_of(held.at(outs[i].as_value().impl()).toTensor()), specs.at(i).kind,
                         specs.at(i).target);
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

}  // namespace detail

/// torch.export's run_decompositions(): the functional inference IR (dialect ATEN), lowered to
/// core ATen by `table` (the default), or only functionalized (decomposition_table::none()).
/// `p` is left as it is.
inline exported_program run_decompositions(const exported_program& p,
                                           const decomposition_table& table = decomposition_table::core_aten()) {
  // dynamic dims: decomposed at several sizes and made symbolic again (trace/symbolic.hpp)
  auto q = detail::transform_symbolic(p, "run_decompositions", [&](const exported_program& s) {
    auto r = functionalize(detail::decompose(s, table));
    for (int round = 0; round < 3 && detail::needs_more_work(r, table); ++round)
      r = functionalize(detail::decompose(r, table));
    eliminate_dead_code(r.graph_mut());  // e.g. the reserve buffer batch_norm's decomposition makes
    return r;
  });
  verify(q);
  return q;
}

XPORT_END_NAMESPACE
