// xport/passes/fold.hpp: constant folding.
// A call whose inputs are all constants (lifted constant tensors, or results of other such
// calls) computes the same thing on every run: it is computed once, now, and the results that
// the rest of the program reads are lifted as new CONSTANT_TENSOR inputs (`c__folded_0`, ...).
// Calls that draw random numbers, write, or take a symbolic size (what they compute differs
// from size to size) are never folded, nor is anything a call writes to (Note [Mutations as
// effects], ops/effects.hpp: a lifted constant written in place would change from run to run);
// results larger than the size limit are left to run (so weights are not duplicated). With `fold_state`, parameters and buffers count as constants too
// (for inference deployment, e.g. after folding batch norm into a conv), except those the
// program mutates (a counter buffer changes from run to run).
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
#include <xport/ops/call.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/ops/effects.hpp>
#include <xport/passes/dce.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

struct fold_t : pass_base<fold_t> {
  static constexpr std::string_view name = "fold";
  // computes everything before changing anything: transactional
  static constexpr passes::traits traits{.needs_shapes = true, .transactional = true};

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
    known_values known;
    const auto folded = compute_constants(p, known);
    const auto frontier = frontier_of(folded, known);
    if (frontier.empty()) return pass_result::unchanged();
    lift(p, frontier, known);
    return pass_result::modified();
  }

 private:
  // The constant values and what they hold: value::scratch() is 1 + an index into `held`, or 0.
  struct known_values {
    std::vector<c10::IValue> held;
    const c10::IValue& of(value v) const { return held[v.scratch() - 1]; }
    void remember(value v, c10::IValue t) {
      held.push_back(std::move(t));
      v.scratch() = static_cast<std::uint32_t>(held.size());
    }
  };

  // Parameters and buffers the program writes (BUFFER_MUTATION, PARAMETER_MUTATION): they change
  // from run to run, so they are never constants, even with fold_state.
  static std::vector<std::string_view> mutated_state(const exported_program& p) {
    std::vector<std::string_view> mutated;
    for (const auto& o : p.signature().output_specs)
      if ((o.kind == output_kind::buffer_mutation || o.kind == output_kind::parameter_mutation) && o.target)
        mutated.push_back(*o.target);
    return mutated;
  }

  // Whether placeholder input `s` is a constant.
  bool is_constant_input(const input_spec& s, const std::vector<std::string_view>& mutated) const {
    if (s.kind == input_kind::constant_tensor) return true;
    return fold_state && (s.kind == input_kind::parameter || s.kind == input_kind::buffer) &&
           !(s.target && std::find(mutated.begin(), mutated.end(), *s.target) != mutated.end());
  }

  // Calls `n` on the constants it reads; true (its outputs known) when every result is a tensor.
  // A call whose arguments hold a symbolic size computes something else at every size: it stays.
  static bool fold_call(const node& n, known_values& known) {
    if (detail::has_symbolic_argument(n.args())) return false;
    torch::jit::Stack stack;
    detail::call_node(n, [&](const value& v) -> const c10::IValue& { return known.of(v); }, stack);
    bool all_tensors = true;
    const auto outputs = detail::for_each_output(
        stack, [&](std::size_t, const c10::IValue& r) { all_tensors = all_tensors && r.isTensor(); });
    if (!all_tensors || outputs != n.num_outputs()) return false;
    detail::take_outputs(stack, [&](std::size_t k, c10::IValue&& r) { known.remember(n.output(k), std::move(r)); });
    return true;
  }

  // 1. Which values are constant, and what they hold (one forward walk: producers come before
  //    users, so a call's inputs are known or not when it is reached); returns the folded calls.
  //    An exception here fails the pass before any change.
  std::vector<node> compute_constants(const exported_program& p, known_values& known) const {
    const auto& specs = p.signature().input_specs;
    const auto mutated = mutated_state(p);
    const alias_classes aliases(p.graph());  // Note [Mutations as effects]: what is written is never a constant
    const auto written = [&](const node& n) {
      for (auto v : n.outputs())
        if (aliases.written(v)) return true;
      return !alias_classes::writes(n).empty();
    };
    std::vector<node> folded;
    c10::NoGradGuard no_grad;
    std::size_t ph_index = 0;
    for (auto n : p.graph().nodes()) {
      for (auto v : n.outputs()) v.scratch() = 0;
      if (n.is_placeholder()) {
        const auto& s = specs[ph_index++];
        if (is_constant_input(s, mutated) && !written(n)) known.remember(n.output(0), p.lifted_tensor(s).detach());
        continue;
      }
      if (!n.is_call() || n.op().higher_order || has_side_effects(n) || n.num_outputs() == 0 || written(n)) continue;
      bool all_known = true;
      for (std::size_t i = 0; i < n.num_inputs() && all_known; ++i) all_known = n.input(i).scratch() != 0;
      if (all_known && fold_call(n, known)) folded.push_back(n);
    }
    return folded;
  }

  // 2. The frontier: folded results read by calls that stay, or returned (a user is folded when
  //    it is a call whose outputs are known), and small enough to lift.
  std::vector<value> frontier_of(const std::vector<node>& folded, const known_values& known) const {
    const auto is_folded = [](const use& u) {
      const node un = u.user();
      return un.is_call() && un.num_outputs() != 0 && un.output(0).scratch() != 0;
    };
    std::vector<value> frontier;
    for (auto n : folded)
      for (auto v : n.outputs()) {
        bool needed = false;
        for (const auto& u : v.uses()) needed = needed || !is_folded(u);
        if (needed && known.of(v).toTensor().nbytes() <= max_bytes) frontier.push_back(v);
      }
    return frontier;
  }

  // 3. Lifts the frontier as CONSTANT_TENSOR inputs (`c__folded_0`, ...), before the user
  //    inputs, and removes what no longer runs.
  static void lift(exported_program& p, const std::vector<value>& frontier, const known_values& known) {
    const auto phs = p.graph().placeholders();
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
      auto t = known.of(v).toTensor();
      auto ph = gm.add_placeholder_fresh("c" + target, value_type::of(tensor_meta::of(t)), before);
      lifted.push_back(input_spec{input_kind::constant_tensor, argument_spec::tensor(ph.name()), target, {}});
      p.constants_mut().set(target, std::move(t));
      v.replace_all_uses_with(ph);
    }
    sig.input_specs.insert(sig.input_specs.begin() + static_cast<std::ptrdiff_t>(insert_at), lifted.begin(), lifted.end());
    eliminate_dead_code(gm);
  }
};
inline constexpr fold_t fold{};

}  // namespace passes
XPORT_END_NAMESPACE
