// must not compile: a stage that needs functional IR after one that breaks it.
#include <xport/xport.hpp>
struct needs_functional_ir {
  static constexpr std::string_view name = "needs_functional_ir";
  static constexpr xport::passes::traits traits{.needs_functional = true};
  xport::passes::pass_result run(xport::exported_program&) const { return {}; }
};
struct add_inplace_ops {
  static constexpr std::string_view name = "add_inplace_ops";
  static constexpr xport::passes::traits traits{.breaks_functional = true};
  xport::passes::pass_result run(xport::exported_program&) const { return {}; }
};
void f() { auto p = add_inplace_ops{} | xport::passes::dce | needs_functional_ir{}; }
