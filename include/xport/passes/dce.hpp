// xport/passes/dce.hpp: dead-code elimination.
// Removes every call node whose outputs nothing uses, unless the call has an effect beyond its
// outputs: it writes to an argument (in-place and out= ops), or draws random numbers (removing
// it would shift every later random draw). Signature outputs are uses, so they are kept.
// One backward walk: a node's death frees its inputs' producers before they are visited.
#pragma once

#include <cstddef>  // std::size_t

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>

XPORT_BEGIN_NAMESPACE

/// Whether a call must stay even when its outputs are unused.
inline bool has_side_effects(const node& n) {
  if (!n.is_call()) return true;
  const auto& op = n.op();
  return op.is_mutable || op.nondeterministic;
}

/// Removes dead call nodes; returns how many were removed.
inline std::size_t eliminate_dead_code(graph& g) {
  std::size_t removed = 0;
  for (node n = g.last(); n;) {
    const node prev = n.prev();
    if (n.is_call() && !has_side_effects(n)) {
      bool used = false;
      for (std::size_t i = 0; i < n.num_outputs() && !used; ++i) used = n.output(i).num_uses() != 0;
      if (!used) {
        g.erase(n);
        ++removed;
      }
    }
    n = prev;
  }
  return removed;
}

XPORT_END_NAMESPACE
