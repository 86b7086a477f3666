// Control flow on static information is specialized at export: branches on ranks, sizes and
// C++ values run once, loops unroll.
#include "case.hpp"

namespace {

const exportdb::registrar static_if(
    "static_if", "a branch on the rank of the input (static information) is resolved at export", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x) {
            if (x.dim() == 3) return x + at::ones({1, 1, 1});
            return x;
          },
          std::tuple{at::randn({3, 2, 2})});
      os << p;
    });

const exportdb::registrar static_for_loop(
    "static_for_loop", "a loop over a C++ range unrolls; the program returns a list", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x) {
            std::vector<at::Tensor> ret;
            for (int i = 0; i < 3; ++i) ret.push_back(x + i);
            return ret;
          },
          std::tuple{at::randn({3, 2})});
      os << p << "out_spec: " << p.out_spec()->str() << "\n";
    });

const exportdb::registrar nested_function(
    "nested_function", "helpers and closures are traced through", "SUPPORTED", [](std::ostream& os) {
      const double scale = 2.0;
      auto helper = [&](const at::Tensor& t) { return t * scale + 1; };
      auto p = xport::export_program([&](const at::Tensor& x, const at::Tensor& y) { return helper(x) - helper(y); },
                                     std::tuple{at::randn({3, 2}), at::randn({2})}, {.input_names = {"x", "y"}});
      os << p;
    });

const exportdb::registrar data_dependent_branch(
    "data_dependent_branch", "a branch on a tensor's value is a graph break, reported with the way out",
    "NOT_SUPPORTED_YET", [](std::ostream& os) {
      exportdb::expect_error(os, [] {
        (void)xport::export_program(
            [](const at::Tensor& x) {
              if (x.sum().item<float>() > 0) return x.cos();
              return x.sin();
            },
            std::tuple{at::randn({3})});
      });
    });

}  // namespace
