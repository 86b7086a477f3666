// Values only the data knows: ExportDB's constrain_as_size_example and constrain_as_value_example
// (item() bounded by torch._check, here xport::check_range), and a nonzero whose row count is
// a symbol (u0) of the program.
#include "case.hpp"

namespace {

const exportdb::registrar constrain_as_size_example(
    "constrain_as_size_example",
    "item() of an integer tensor is a value only the data knows (u0); xport::check_range (torch._check) bounds it, "
    "so it can be a size",
    "SUPPORTED", [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x) {
            const auto a = x.item<std::int64_t>();
            xport::check_range(a, 0, 5);
            return at::zeros({a, 5});
          },
          std::tuple{at::scalar_tensor(4, at::kLong)});
      os << p;
      os << "\nrun with x = 2: " << xport::run(p, {at::scalar_tensor(2, at::kLong)})[0].sizes() << "\n";
      exportdb::expect_error(os, [&] { xport::run(p, {at::scalar_tensor(6, at::kLong)}); });
    });

const exportdb::registrar constrain_as_value_example(
    "constrain_as_value_example",
    "a branch on a value only the data knows exports when the facts xport::check_range states decide it",
    "SUPPORTED", [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x, const at::Tensor& y) {
            const auto a = x.item<std::int64_t>();
            xport::check_range(a, 0, 5);
            return a < 6 ? y.sin() : y.cos();
          },
          std::tuple{at::scalar_tensor(4, at::kLong), at::randn({5, 5})}, {.input_names = {"x", "y"}});
      os << p;
    });

const exportdb::registrar nonzero_rows(
    "nonzero_rows", "nonzero gives as many rows as the data holds: a symbol u0 with the range [0, numel]", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program([](const at::Tensor& x) { return at::nonzero(x > 0).sum(0); }, std::tuple{at::randn({4, 3})});
      os << p;
      const auto x = at::tensor({1.f, -1.f, 2.f, -3.f, 4.f, 5.f, -1.f, -1.f, -1.f, -1.f, -1.f, 6.f}).reshape({4, 3});
      const auto sums = xport::run(p, {x})[0];
      os << "\nrun on [[1, -1, 2], [-3, 4, 5], [-1, -1, -1], [-1, -1, 6]] (u0 = 5 rows): row and column sums ["
         << sums[0].item<std::int64_t>() << ", " << sums[1].item<std::int64_t>() << "]\n";
    });

}  // namespace
