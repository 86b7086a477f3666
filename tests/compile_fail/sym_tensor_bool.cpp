// must not compile: branching on a tensor in strict export is a graph break.
#include <xport/xport.hpp>
void f(const at::Tensor& t) {
  auto p = xport::export_program<xport::strict>(
      [](const xport::sym_tensor& x) {
        if (x) return x;
        return -x;
      },
      std::tuple{t});
}
