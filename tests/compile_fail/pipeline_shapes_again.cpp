// the twin of pipeline_needs_shapes.cpp: propagate_shapes in between makes it valid.
#include <xport/xport.hpp>
struct retype_inputs {
  static constexpr std::string_view name = "retype_inputs";
  static constexpr xport::passes::traits traits{.breaks_shapes = true};
  xport::passes::pass_result run(xport::exported_program&) const { return {}; }
};
void f() { auto p = retype_inputs{} | xport::passes::propagate_shapes | xport::passes::fold; }
