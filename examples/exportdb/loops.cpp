// torch.map, torch.while_loop and torch.scan as xport::map, xport::while_loop and xport::scan:
// ExportDB's dynamic_shape_map, a while_loop whose trip count the data decides, and a running sum
// as a scan (torch.scan's own example).
#include "case.hpp"

namespace {

const exportdb::registrar dynamic_shape_map(
    "dynamic_shape_map", "xport::map maps a function over the first dim of a tensor (torch.map)", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& xs, const at::Tensor& y) {
            return xport::map([](const at::Tensor& x, const at::Tensor& b) { return x + b; }, xs, std::tuple{y});
          },
          std::tuple{at::randn({3, 2}), at::randn({2})}, {.input_names = {"xs", "y"}});
      os << p;
    });

const exportdb::registrar while_loop(
    "while_loop", "xport::while_loop loops as long as the data says (torch.while_loop); the count is a 0-d tensor",
    "SUPPORTED", [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& it, const at::Tensor& x) {
            return xport::while_loop([](const at::Tensor& i, const at::Tensor&) { return i < 3; },
                                     [](const at::Tensor& i, const at::Tensor& h) { return std::tuple{i + 1, h.cos()}; },
                                     std::tuple{it, x});
          },
          std::tuple{at::zeros({}, at::kLong), at::randn({3})}, {.input_names = {"it", "x"}});
      os << p;
      const auto outs = xport::run(p, {at::zeros({}, at::kLong), at::ones({3})});
      os << "\nrun from it = 0: it = " << outs[0].item<std::int64_t>() << ", x[0] = cos(cos(cos(1))) = "
         << outs[1][0].item<float>() << "\n";
    });

const exportdb::registrar scan(
    "scan", "xport::scan carries a value along the first dim and stacks what each step gives (torch.scan)", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& init, const at::Tensor& xs) {
            return xport::scan(
                [](const at::Tensor& c, const at::Tensor& x) {
                  auto s = c + x;
                  return std::tuple{s, s.clone()};
                },
                init, xs);
          },
          std::tuple{at::zeros({1}), at::randn({5, 1})}, {.input_names = {"init", "xs"}});
      os << p;
      const auto outs = xport::run(p, {at::zeros({1}), at::arange(5, at::kFloat).unsqueeze(1)});
      os << "\nrun on xs = [0, 1, 2, 3, 4]: last carry " << outs[0].item<float>() << ", running sums [";
      for (std::int64_t t = 0; t < outs[1].size(0); ++t) os << (t ? ", " : "") << outs[1][t].item<float>();
      os << "]\n";
    });

}  // namespace
