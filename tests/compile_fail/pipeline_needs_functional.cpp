// must not compile: cse needs functional IR and the stage before it breaks it.
#include <xport/xport.hpp>
struct add_inplace_ops {
  static constexpr std::string_view name = "add_inplace_ops";
  static constexpr xport::passes::traits traits{.breaks_functional = true};
  xport::passes::pass_result run(xport::exported_program&) const { return {}; }
};
void f() { auto p = add_inplace_ops{} | xport::passes::dce | xport::passes::cse; }
