// must not compile: reading a value in strict export is a graph break.
#include <xport/xport.hpp>
void f(const at::Tensor& t) {
  auto p = xport::export_program<xport::strict>([](const xport::sym_tensor& x) { return x * x.item<double>(); },
                                                std::tuple{t});
}
