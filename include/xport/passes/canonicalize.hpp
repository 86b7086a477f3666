// xport/passes/canonicalize.hpp: a canonical form, so that two equal programs print equal.
// Call nodes are put in one deterministic topological order (depth first from the outputs, in
// output and argument order; calls no output needs follow, in their old order) and renamed in
// that order as the builder names them (`add`, `add_1`, ...). Placeholders keep their names
// (they are the signature). A program with mutations keeps its order (moving a read across a
// write would change it) and is only renamed.
#pragma once

#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::pair
#include <vector>         // std::vector

#include <xport/config.hpp>
#include <xport/program/builder.hpp>
#include <xport/ir/graph.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

struct canonicalize_t : pass_base<canonicalize_t> {
  static constexpr std::string_view name = "canonicalize";
  static constexpr passes::traits traits{.transactional = true};  // builds the new program before replacing

  pass_result run(exported_program& p) const {
    const auto& g = p.graph();
    bool mutations = false;
    for (auto n : g.nodes()) mutations = mutations || (n.is_call() && n.op().is_mutable);
    // 1. the order
    std::vector<node> order;
    if (mutations) {
      for (auto n : g.nodes())
        if (n.is_call()) order.push_back(n);
    } else {
      std::unordered_set<const detail::node_impl*> done;
      std::vector<std::pair<node, std::size_t>> stack;  // node, next input to visit
      const auto visit = [&](node root) {
        if (!root.is_call() || done.count(root.impl())) return;
        stack.emplace_back(root, 0);
        done.insert(root.impl());
        while (!stack.empty()) {
          auto& [n, i] = stack.back();
          if (i < n.num_inputs()) {
            const node in = n.input(i++).producer();
            if (in.is_call() && done.insert(in.impl()).second) stack.emplace_back(in, 0);
          } else {
            order.push_back(n);
            stack.pop_back();
          }
        }
      };
      for (auto v : g.outputs()) visit(v.producer());
      for (auto n : g.nodes()) visit(n);  // what no output needs, in its old order
    }
    // 2. rebuild with fresh names
    program_builder b;
    std::unordered_map<const detail::value_impl*, value> map;
    const auto phs = g.placeholders();
    for (std::size_t i = 0; i < phs.size(); ++i) {
      const value v = b.placeholder(p.signature().input_specs.at(i), phs[i].output(0).type());
      v.producer().copy_custom_meta_from(phs[i]);
      map.emplace(phs[i].output(0).impl(), v);
    }
    for (auto n : order) {
      std::vector<argument> args(n.args().begin(), n.args().end());
      for (auto& a : args) a.for_each_value([&](value& v) { v = map.at(v.impl()); });
      std::vector<value_type> types;
      for (auto v : n.outputs()) types.push_back(v.type());
      b.like(n);
      const node m = b.record(n.op(), std::move(args), std::move(types));
      for (std::size_t i = 0; i < n.num_outputs(); ++i) map.emplace(n.output(i).impl(), m.output(i));
    }
    const auto outs = g.output_node().args();
    const auto& specs = p.signature().output_specs;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].is_value()) b.output(map.at(outs[i].as_value().impl()), specs.at(i).kind, specs.at(i).target);
      else b.output_arg(outs[i], specs.at(i).kind, specs.at(i).target);  // a constant output (None)
    }
    b.set_state(p.state_dict(), p.constants());
    b.set_custom_objs(p.custom_objs());
    b.set_examples(p.example_inputs());
    auto q = std::move(b).build(p.dialect(), verify_options{.check_schemas = false});
    q.set_call_spec(p.in_spec(), p.out_spec());
    q.range_constraints_mut() = p.range_constraints();
    const bool changed = to_string(q.graph()) != to_string(g);
    p = std::move(q);
    return pass_result::modified(changed);
  }
};
inline constexpr canonicalize_t canonicalize{};

}  // namespace passes
XPORT_END_NAMESPACE
