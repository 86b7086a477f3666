// A consumer of the compiled mode: this TU includes <xport/compiled.hpp> alone (no xport
// header-only code is parsed here) and links xport::xport_compiled.
#include <string>
#include <vector>

#include <ATen/ops/add.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sin.h>
#include <xport/compiled.hpp>

/// Loads the seed program from `bytes` (a .pt2) and runs it through the interpreter and the
/// engine: both equal eager LibTorch.
bool compiled_matches(const std::string& bytes) {
  const auto p = xport::compiled::program::load_from_memory(bytes.data(), bytes.size());
  const xport::compiled::engine e(p);
  const auto a = at::randn({10, 10}), c = at::randn({10, 10});
  const auto want = at::add(at::sin(a), at::cos(c));
  return p.input_names() == std::vector<std::string>{"x", "y"} && at::allclose(p.run({a, c})[0], want) &&
         at::allclose(e.run({a, c})[0], want) && !p.str().empty();
}
