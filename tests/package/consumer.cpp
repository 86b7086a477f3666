// A consumer of xport: builds, runs and prints the seed program.
#include <iostream>
#include <string>

#include <ATen/ATen.h>
#include <xport/xport.hpp>

#ifdef XPORT_CONSUMER_COMPILED
bool compiled_matches(const std::string& bytes);  // compiled_consumer.cpp
#endif

int main() {
  xport::program_builder b;
  auto x = b.input("x", at::randn({10, 10}));
  auto y = b.input("y", at::randn({10, 10}));
  b.output(b.call("aten::add.Tensor", {b.call("aten::sin", {x}), b.call("aten::cos", {y})}));
  auto p = std::move(b).build();
  const auto a = at::randn({10, 10}), c = at::randn({10, 10});
  bool ok = at::allclose(xport::run(p, {a, c})[0], at::sin(a) + at::cos(c));
#ifdef XPORT_CONSUMER_COMPILED  // and through the compiled mode, from another TU
  ok = ok && compiled_matches(xport::save_to_string(p));
#endif
  std::cout << xport::to_string(p) << (ok ? "ok\n" : "MISMATCH\n");
  return ok ? 0 : 1;
}
