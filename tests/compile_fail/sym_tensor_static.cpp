// the twin of sym_tensor_item.cpp / sym_tensor_bool.cpp: branching on static sizes compiles.
#include <xport/xport.hpp>
void f(const at::Tensor& t) {
  auto p = xport::export_program<xport::strict>(
      [](const xport::sym_tensor& x) {
        if (x.size(0) > 2) return x * 2.0;
        return -x;
      },
      std::tuple{t});
}
