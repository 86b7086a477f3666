// xport/passes/shapes.hpp: shape (meta) propagation.
// Recomputes every call's output types from its inputs' (on meta tensors, the same inference
// as the builder), in order: after a rewrite that left stale shapes, or after editing a
// placeholder's type. Types are replaced in graph order (each call sees its inputs' new types);
// the pass is not transactional, so a pipeline runs it on a snapshot and a failure (a call
// whose output count changed) leaves the program as it was.
#pragma once

#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

#include <xport/config.hpp>
#include <xport/ops/meta_infer.hpp>
#include <xport/ir/graph.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

struct propagate_shapes_t : pass_base<propagate_shapes_t> {
  static constexpr std::string_view name = "propagate_shapes";
  static constexpr passes::traits traits{.makes_shapes = true};

  pass_result run(exported_program& p) const {
    auto& g = p.graph_mut();
    bool changed = false;
    for (auto n : g.nodes()) {
      if (!n.is_call()) continue;
      const std::vector<argument> args(n.args().begin(), n.args().end());
      auto types = detail::infer_outputs(n.op(), args);
      if (types.size() != n.num_outputs())
        return pass_result::failure("node '" + n.name() + "' (" + n.op().qualified + ") now has " +
                                    std::to_string(types.size()) + " outputs, the graph says " +
                                    std::to_string(n.num_outputs()));
      for (std::size_t i = 0; i < types.size(); ++i) {
        // keep the requires_grad the capture recorded: inference here does not see autograd
        if (types[i].kind == value_kind::tensor && n.output(i).kind() == value_kind::tensor)
          types[i].tensor.requires_grad = n.output(i).meta().requires_grad;
        if (!(types[i] == n.output(i).type())) {
          n.output(i).set_type(std::move(types[i]));
          changed = true;
        }
      }
    }
    return pass_result::modified(changed);
  }
};
inline constexpr propagate_shapes_t propagate_shapes{};

}  // namespace passes
XPORT_END_NAMESPACE
