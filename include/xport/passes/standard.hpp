// xport/passes/standard.hpp: every built-in pass, and the one list of them.
// Functionalization, decomposition and verify() as pipeline stages are defined here; the other
// passes have a header each. `builtin_passes()` is the list the pass manager registers by name
// (and a test checks that docs/passes.md names each one): a new built-in pass is its header, one
// include and one entry below.
#pragma once

#include <string_view>  // std::string_view
#include <tuple>        // std::tie
#include <utility>      // std::move

#include <xport/config.hpp>
#include <xport/passes/canonicalize.hpp>
#include <xport/passes/cse.hpp>
#include <xport/passes/dce.hpp>
#include <xport/passes/fold.hpp>
#include <xport/passes/fuse_lstm.hpp>
#include <xport/lower/functionalize.hpp>
#include <xport/passes/pass.hpp>
#include <xport/passes/rewrite.hpp>
#include <xport/passes/shapes.hpp>
#include <xport/lower/decompose.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

/// xport::functionalize as a stage: in-place ops out, mutations as outputs.
struct functionalize_t : pass_base<functionalize_t> {
  static constexpr std::string_view name = "functionalize";
  static constexpr passes::traits traits{.makes_functional = true, .makes_shapes = true, .transactional = true};
  pass_result run(exported_program& p) const {
    p = xport::functionalize(p);
    return pass_result::modified();
  }
};
inline constexpr functionalize_t functionalize{};

/// run_decompositions as a stage, with a table (the core ATen one by default), shared with
/// xport::run_decompositions.
struct decompose_t : pass_base<decompose_t> {
  static constexpr std::string_view name = "decompose";
  static constexpr passes::traits traits{.makes_functional = true, .makes_shapes = true, .transactional = true};
  decomposition_table table = decomposition_table::core_aten();
  pass_result run(exported_program& p) const {
    p = run_decompositions(p, table);
    return pass_result::modified();
  }
};
inline const decompose_t decompose{};
inline decompose_t decompose_with(decomposition_table table) {
  decompose_t d;
  d.table = std::move(table);
  return d;
}

/// verify() as a stage.
struct verify_t : pass_base<verify_t> {
  static constexpr std::string_view name = "verify";
  static constexpr passes::traits traits{.needs_shapes = true, .transactional = true};
  pass_result run(exported_program& p) const {
    xport::verify(p);
    return pass_result::unchanged();
  }
};
inline constexpr verify_t verify_stage{};

/// Every built-in pass, in the order `pass_manager::registered()` lists them.
inline auto builtin_passes() {
  return std::tie(dce, cse, fold, fuse_lstm, canonicalize, propagate_shapes, functionalize, decompose, verify_stage);
}

}  // namespace passes
XPORT_END_NAMESPACE
