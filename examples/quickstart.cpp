// xport quick start: the seed program `sin(x) + cos(y)` on two f32[10, 10] inputs, built op by
// op, verified, printed as torch.export prints it, run through LibTorch's dispatcher, and
// checked against eager LibTorch.
#include <iostream>

#include <ATen/ATen.h>
#include <xport/xport.hpp>

int main() {
  const auto x = at::randn({10, 10});
  const auto y = at::randn({10, 10});

  // The program torch.export produces for `sin(x) + cos(y)`, written with the builder: each
  // call is checked against the operator's schema, and its output type inferred on meta tensors.
  xport::program_builder b;
  auto xi = b.input("x", x);
  auto yi = b.input("y", y);
  auto a = b.call("aten::sin", {xi});
  auto c = b.call("aten::cos", {yi});
  b.output(b.call("aten::add.Tensor", {a, c}));
  xport::exported_program program = std::move(b).build();  // verified

  std::cout << program << "\n";

  const auto out = xport::run(program, {x, y});
  const auto expected = at::sin(x) + at::cos(y);
  const bool same = at::allclose(out[0], expected);
  std::cout << "result matches eager LibTorch: " << (same ? "true" : "false") << "\n";
  return same ? 0 : 1;
}
