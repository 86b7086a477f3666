// the twin of pipeline_not_a_pass.cpp: any type with a name and run() is a pass.
#include <xport/xport.hpp>
struct count_nodes {
  static constexpr std::string_view name = "count_nodes";
  xport::passes::pass_result run(xport::exported_program&) const { return {}; }
};
void f(xport::exported_program& prog) {
  auto p = xport::passes::dce | count_nodes{} | xport::passes::cse;
  (void)(prog | p);
}
