// Inputs and outputs with structure: lists, dictionaries, optional inputs, C++ scalars.
#include "case.hpp"

namespace {

const exportdb::registrar dictionary(
    "dictionary", "a dictionary built in the program is returned as a std::map", "SUPPORTED", [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x, const at::Tensor& y) {
            std::map<std::string, at::Tensor> out;
            out["sum"] = x + y;
            out["product"] = x * y;
            return out;
          },
          std::tuple{at::randn({3, 2}), at::randn({3, 2})}, {.input_names = {"x", "y"}});
      os << p << "out_spec: " << p.out_spec()->str() << "\n";
      xport::callable<std::map<std::string, at::Tensor>(at::Tensor, at::Tensor)> f(p);
      const auto x = at::ones({3, 2}), y = at::full({3, 2}, 2.0);
      const auto r = f(x, y);
      os << "f(1, 2)['product'][0][0] = " << r.at("product")[0][0].item<float>() << "\n";
    });

const exportdb::registrar list_input(
    "list_input", "a std::vector of tensors is flattened into one input per element", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const std::vector<at::Tensor>& xs) { return at::stack(xs).sum(0); },
          std::tuple{std::vector<at::Tensor>{at::randn({2}), at::randn({2}), at::randn({2})}},
          {.input_names = {"xs"}});
      os << p << "in_spec: " << p.in_spec()->str() << "\n";
    });

const exportdb::registrar optional_input(
    "optional_input", "an optional input not passed is specialized to None, as torch does", "SUPPORTED",
    [](std::ostream& os) {
      auto fn = [](const at::Tensor& x, const std::optional<at::Tensor>& y) { return y ? x + *y : x * 2; };
      auto p = xport::export_program(fn, std::tuple{at::randn({2, 3}), std::optional<at::Tensor>()},
                                     {.input_names = {"x", "y"}});
      os << p << "in_spec: " << p.in_spec()->str() << "\n";
      xport::callable<at::Tensor(at::Tensor, std::optional<at::Tensor>)> f(p);
      exportdb::expect_error(os, [&] { (void)f(at::randn({2, 3}), at::randn({2, 3})); });
    });

const exportdb::registrar scalar_input(
    "scalar_input", "C++ scalar arguments are specialized as constants and checked on every call", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program([](const at::Tensor& x, std::int64_t k, double a) { return x.pow(k) * a; },
                                     std::tuple{at::randn({4}), std::int64_t{3}, 0.5},
                                     {.input_names = {"x", "k", "a"}});
      os << p << "in_spec: " << p.in_spec()->str() << "\n";
    });

const exportdb::registrar scalar_output(
    "scalar_output", "a size computed in the program is returned as a constant", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x) { return std::make_tuple(x.relu(), x.size(1) + 1); }, std::tuple{at::randn({3, 2})});
      os << p << "out_spec: " << p.out_spec()->str() << "\n";
    });

}  // namespace
