// the twin of unsupported_input_type.cpp: a supported structure compiles.
#include <vector>
#include <xport/xport.hpp>
void f(const at::Tensor& t) {
  auto p = xport::export_program([](const std::vector<at::Tensor>& xs) { return xs[0]; },
                                 std::tuple{std::vector<at::Tensor>{t}});
}
