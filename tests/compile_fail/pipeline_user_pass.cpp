// the twin of pipeline_not_a_pass.cpp: any type with a name and run() is a pass, and composes
// with built-in passes, with another such type, and with a program, without a base class.
#include <xport/xport.hpp>
namespace mine {
struct count_nodes {
  static constexpr std::string_view name = "count_nodes";
  xport::passes::pass_result run(xport::exported_program&) const { return {}; }
};
struct tag_nodes {
  static constexpr std::string_view name = "tag_nodes";
  static constexpr xport::passes::traits traits{.needs_functional = true};
  xport::passes::pass_result run(xport::exported_program&) const { return {}; }
};
}  // namespace mine
void f(xport::exported_program& prog) {
  auto p = xport::passes::dce | mine::count_nodes{} | xport::passes::cse;
  (void)(prog | p);
  constexpr auto q = mine::count_nodes{} | mine::tag_nodes{};  // two passes from outside xport
  static_assert(std::tuple_size_v<decltype(q.stages)> == 2);
  (void)(prog | mine::tag_nodes{});
  (void)(prog | (q | xport::passes::fold));
}
