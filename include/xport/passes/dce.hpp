// xport/passes/dce.hpp: dead-code elimination.
// Removes every call node whose outputs nothing uses, unless the call has an effect beyond its
// outputs: it writes to an argument (in-place and out= ops), or draws random numbers (removing
// it would shift every later random draw). Signature outputs are uses, so they are kept.
// One backward walk: a node's death frees its inputs' producers before they are visited.
#pragma once

#include <cstddef>      // std::size_t
#include <string_view>  // std::string_view

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE

/// Whether a call must stay even when its outputs are unused.
inline bool has_side_effects(const node& n) {
  if (!n.is_call()) return true;
  const auto& op = n.op();
  return op.is_mutable || op.nondeterministic;
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

namespace passes {

/// Dead-code elimination as a pass (keeps side-effecting calls and every signature output).
struct dce_t : pass_base<dce_t> {
  static constexpr std::string_view name = "dce";
  static constexpr bool transactional = true;  // erasing dead nodes cannot fail
  pass_result run(exported_program& p) const {
    return pass_result::modified(eliminate_dead_code(p.graph_mut()) != 0);
  }
};
inline constexpr dce_t dce{};

}  // namespace passes

XPORT_END_NAMESPACE
