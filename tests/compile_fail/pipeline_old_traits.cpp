// must not compile: traits as separate bools (the pre-0.1 spelling) would be silently ignored.
#include <xport/xport.hpp>
struct retype_inputs {
  static constexpr std::string_view name = "retype_inputs";
  static constexpr bool breaks_shapes = true;
  xport::passes::pass_result run(xport::exported_program&) const { return {}; }
};
void f() { auto p = retype_inputs{} | xport::passes::fold; }
