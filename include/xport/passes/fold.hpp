// xport/passes/fold.hpp: constant folding.
// A call whose inputs are all constants (lifted constant tensors, or results of other such
// calls) computes the same thing on every run: it is computed once, now, and the results that
// the rest of the program reads are lifted as new CONSTANT_TENSOR inputs (`c__folded_0`, ...).
// Calls that draw random numbers or mutate are never folded; results larger than the size limit
// are left to run (so weights are not duplicated). With `fold_state`, parameters and buffers
// count as constants too (for inference deployment, e.g. after folding batch norm into a conv),
// except those the program mutates (a counter buffer changes from run to run).
#pragma once

#include <algorithm>      // std::find
#include <cstddef>        // std::size_t
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <cstdint>        // std::uint32_t
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <xport/config.hpp>
#include <xport/detail/schema.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/passes/dce.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

struct fold_t : pass_base<fold_t> {
  static constexpr std::string_view name = "fold";
  static constexpr bool needs_functional = true;
  static constexpr bool needs_shapes = true;
  static constexpr bool transactional = true;  // computes everything before changing anything

  /// Results larger than this stay computed at run time.
  std::size_t max_bytes = std::size_t{1} << 20;
  /// Treat parameters and buffers as constants (inference deployment).
  bool fold_state = false;

  /// A copy with another size limit / state policy: `fold.limit(64 << 20).with_state()`.
  [[nodiscard]] constexpr fold_t limit(std::size_t bytes) const {
    fold_t f = *this;
    f.max_bytes = bytes;
    return f;
  }
  [[nodiscard]] constexpr fold_t with_state(bool on = true) const {
    fold_t f = *this;
    f.fold_state = on;
    return f;
  }

  pass_result run(exported_program& p) const {
    const auto& g = p.graph();
    const auto& specs = p.signature().input_specs;
    for (auto n : g.nodes())
      if (n.is_call() && n.op().is_mutable)
        return pass_result::failure("fold needs functional IR, but node '" + n.name() + "' (" + n.op().qualified +
                                    ") mutates its argument; run run_decompositions() or functionalize first");
    // 1. which values are constant, and their tensors: value::scratch() is 1 + an index into
    //    `known`, or 0 (one forward walk; producers come before users, so inputs are set)
    std::vector<c10::IValue> known;
    const auto tensor_of = [&](value v) -> const c10::IValue& { return known[v.scratch() - 1]; };
    const auto remember = [&](value v, c10::IValue t) {
      known.push_back(std::move(t));
      v.scratch() = static_cast<std::uint32_t>(known.size());
    };
    // a parameter or buffer the program writes (BUFFER_MUTATION, PARAMETER_MUTATION) changes
    // from run to run: never a constant, even with fold_state
    std::vector<std::string_view> mutated;
    for (const auto& o : p.signature().output_specs)
      if ((o.kind == output_kind::buffer_mutation || o.kind == output_kind::parameter_mutation) && o.target)
        mutated.push_back(*o.target);
    const auto is_mutated = [&](const input_spec& s) {
      return s.target && std::find(mutated.begin(), mutated.end(), *s.target) != mutated.end();
    };
    std::vector<node> folded;
    {
      c10::NoGradGuard no_grad;
      std::size_t ph_index = 0;
      for (auto n : g.nodes()) {
        for (auto v : n.outputs()) v.scratch() = 0;
        if (n.is_placeholder()) {
          const auto& s = specs[ph_index++];
          const bool constant = s.kind == input_kind::constant_tensor ||
                                (fold_state && (s.kind == input_kind::parameter || s.kind == input_kind::buffer) && !is_mutated(s));
          if (constant) remember(n.output(0), p.lifted_tensor(s).detach());
          continue;
        }
        if (!n.is_call() || has_side_effects(n) || n.num_outputs() == 0) continue;
        bool all_known = true;
        for (std::size_t i = 0; i < n.num_inputs() && all_known; ++i) all_known = n.input(i).scratch() != 0;
        if (!all_known) continue;
        const auto& op = n.op();
        const auto& params = op.schema().arguments();
        torch::jit::Stack stack;
        const auto args = n.args();
        for (std::size_t i = 0; i < params.size(); ++i)
          stack.push_back(detail::to_ivalue(args[i], params[i].real_type(), tensor_of));
        op.handle.callBoxed(stack);  // an exception here fails the pass before any change
        std::vector<at::Tensor> outs;
        for (auto& r : stack) {
          if (r.isTensorList())
            for (auto& t : r.toTensorVector()) outs.push_back(t);
          else if (r.isTensor())
            outs.push_back(r.toTensor());
        }
        if (outs.size() != n.num_outputs()) continue;
        for (std::size_t i = 0; i < outs.size(); ++i) remember(n.output(i), outs[i]);
        folded.push_back(n);
      }
    }
    // 2. the frontier: folded results read by calls that stay, or returned (a user is folded
    //    when it is a call whose outputs are known)
    const auto is_folded = [](const use& u) {
      const node un = u.user();
      return un.is_call() && un.num_outputs() != 0 && un.output(0).scratch() != 0;
    };
    std::vector<value> frontier;
    for (auto n : folded)
      for (auto v : n.outputs()) {
        bool needed = false;
        for (const auto& u : v.uses()) needed = needed || !is_folded(u);
        if (needed && tensor_of(v).toTensor().nbytes() <= max_bytes) frontier.push_back(v);
      }
    if (frontier.empty()) return pass_result::unchanged();
    // 3. lift them as constants, before the user inputs
    const auto phs = g.placeholders();
    auto& gm = p.graph_mut();
    auto& sig = p.signature_mut();
    std::size_t insert_at = 0;
    while (insert_at < sig.input_specs.size() && sig.input_specs[insert_at].kind != input_kind::user_input) ++insert_at;
    // new placeholders go before the first user input, or after the last placeholder
    const node before = insert_at < phs.size() ? phs[insert_at] : (phs.empty() ? gm.first() : phs.back().next());
    std::size_t k = 0;
    while (p.constants().contains("_folded_" + std::to_string(k))) ++k;
    std::vector<input_spec> lifted;
    lifted.reserve(frontier.size());
    for (auto v : frontier) {
      const std::string target = "_folded_" + std::to_string(k++);
      auto t = tensor_of(v).toTensor();
      auto ph = gm.add_placeholder_fresh("c" + target, value_type::of(tensor_meta::of(t)), before);
      lifted.push_back(input_spec{input_kind::constant_tensor, argument_spec::tensor(ph.name()), target, {}});
      p.constants_mut().set(target, std::move(t));
      v.replace_all_uses_with(ph);
    }
    sig.input_specs.insert(sig.input_specs.begin() + static_cast<std::ptrdiff_t>(insert_at), lifted.begin(), lifted.end());
    eliminate_dead_code(gm);
    return pass_result::modified();
  }
};
inline constexpr fold_t fold{};

}  // namespace passes
XPORT_END_NAMESPACE
