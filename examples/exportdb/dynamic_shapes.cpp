// Dynamic shapes: ExportDB's dynamic_shape_* cases in C++. Sizes follow the dims through views,
// slicing and constructors; a branch on a size is reported as a constraint violation.
#include "case.hpp"

namespace {

const exportdb::registrar dynamic_shape_view(
    "dynamic_shape_view", "a view whose sizes the code computes from size() follows the dynamic dim",
    "SUPPORTED", [](std::ostream& os) {
      const auto batch = xport::Dim("batch", 1, 1024);
      auto p = xport::export_program(
          [](const at::Tensor& x) {
            const auto n = x.size(0);
            return x.view({n, 2, -1}).permute({0, 2, 1});
          },
          std::tuple{at::randn({10, 2, 3})}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
      os << p;
    });

const exportdb::registrar dynamic_shape_slicing(
    "dynamic_shape_slicing", "slicing with steps keeps the sizes symbolic", "SUPPORTED", [](std::ostream& os) {
      auto p = xport::export_program([](const at::Tensor& x) { return x.slice(0, 0, x.size(0) - 2).slice(1, 1, 9223372036854775807LL, 2); },
                                     std::tuple{at::randn({3, 2})},
                                     {.dynamic_shapes = {{"x", {{0, xport::Dim("n", 3)}}}}});
      os << p;
    });

const exportdb::registrar dynamic_shape_constructor(
    "dynamic_shape_constructor", "a factory sized by an input's dim", "SUPPORTED", [](std::ostream& os) {
      auto p = xport::export_program([](const at::Tensor& x) { return at::zeros({x.size(0) * 2}); },
                                     std::tuple{at::randn({3, 2})},
                                     {.dynamic_shapes = {{"x", {{0, xport::Dim("n")}}}}});
      os << p;
    });

const exportdb::registrar dynamic_shape_if_guard(
    "dynamic_shape_if_guard", "a branch on a dynamic size specializes it: reported with a fix", "NOT_SUPPORTED_YET",
    [](std::ostream& os) {
      exportdb::expect_error(os, [] {
        (void)xport::export_program(
            [](const at::Tensor& x) {
              if (x.size(0) == 4) return x.cos();
              return x.sin();
            },
            std::tuple{at::randn({4, 2, 2})}, {.dynamic_shapes = {{"x", {{0, xport::Dim("batch")}}}}});
      });
    });

}  // namespace
