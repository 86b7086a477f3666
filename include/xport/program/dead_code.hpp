// xport/program/dead_code.hpp: removing the calls whose results nothing uses (torch.fx's
// Graph.eliminate_dead_code). A call stays when it has an effect beyond its outputs: it writes to
// an argument (in-place and out= ops), draws random numbers (removing it would shift every
// later random draw), calls a custom object (op_info::ordered), reads tensor data (ops/data_dependent.hpp), gives a symbol only the data
// knows (its range is asserted on every run), or checks something (`_assert_tensor_metadata`). Signature outputs are uses, so they are kept. One
// backward walk: a node's death frees its inputs' producers before they are visited.
// passes/dce.hpp makes it a pass.
#pragma once

#include <cstddef>  // std::size_t

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/unbacked.hpp>
#include <xport/ops/data_dependent.hpp>
#include <xport/ops/op_sets.hpp>

XPORT_BEGIN_NAMESPACE

/// Whether a call must stay even when its outputs are unused.
inline bool has_side_effects(const node& n) {
  if (!n.is_call()) return true;
  const auto& op = n.op();
  return op.is_mutable || op.nondeterministic || op.ordered || detail::reads_data(op) || gives_unbacked(n) ||
         detail::is_checking_op(op.name);
}

/// Removes dead call nodes, and the getitems of unused outputs (value::unpacked); returns how
/// many nodes and getitems were removed.
inline std::size_t eliminate_dead_code(graph& g) {
  std::size_t removed = 0;
  for (node n = g.last(); n;) {
    const node prev = n.prev();
    if (n.is_call()) {
      bool used = false;
      for (std::size_t i = 0; i < n.num_outputs(); ++i) {
        const auto v = n.output(i);
        used = used || v.num_uses() != 0;
        if (n.has_tuple_output() && v.num_uses() == 0 && v.unpacked()) {
          v.set_unpacked(false);
          ++removed;
        }
      }
      if (!used && !has_side_effects(n)) {
        g.erase(n);
        ++removed;
      }
    }
    n = prev;
  }
  return removed;
}

XPORT_END_NAMESPACE
