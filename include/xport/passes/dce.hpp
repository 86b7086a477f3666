// xport/passes/dce.hpp: dead-code elimination as a pass (program/dead_code.hpp does the work).
#pragma once

#include <string_view>  // std::string_view

#include <xport/config.hpp>
#include <xport/program/dead_code.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE

namespace passes {

/// Dead-code elimination as a pass (keeps side-effecting calls and every signature output).
struct dce_t : pass_base<dce_t> {
  static constexpr std::string_view name = "dce";
  static constexpr passes::traits traits{.transactional = true};  // erasing dead nodes cannot fail
  pass_result run(exported_program& p) const {
    return pass_result::modified(eliminate_dead_code(p.graph_mut()) != 0);
  }
};
inline constexpr dce_t dce{};

}  // namespace passes

XPORT_END_NAMESPACE
