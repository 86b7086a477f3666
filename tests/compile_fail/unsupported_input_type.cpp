// must not compile: std::set is not a supported input structure; the error names the rule.
#include <set>
#include <xport/xport.hpp>
void f() {
  auto p = xport::export_program([](const std::set<int>&) { return at::Tensor(); }, std::tuple{std::set<int>{}});
}
