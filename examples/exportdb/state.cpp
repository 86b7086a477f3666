// Module state: parameters and buffers lifted to inputs, mutations kept in the training IR and
// returned as outputs in the inference IR, constants captured from outside.
#include <torch/torch.h>

#include "case.hpp"

namespace {

struct Counter : torch::nn::Module {
  Counter() { count = register_buffer("count", torch::zeros({2})); }
  torch::Tensor forward(torch::Tensor x) {
    count.add_(1);
    return x + count;
  }
  torch::Tensor count;
};

struct Specialized : torch::nn::Module {
  std::string mode = "square";
  std::int64_t offset = 4;
  torch::Tensor forward(torch::Tensor x) {
    if (mode == "square") return x * x + offset;
    return x + offset;
  }
};

const exportdb::registrar user_input_mutation(
    "user_input_mutation", "an input updated in place: kept in the training IR, an output in the inference IR",
    "SUPPORTED", [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x) {
            x.mul_(2);
            return x.cos();
          },
          std::tuple{at::randn({3, 2})});
      os << p << "\n--- run_decompositions() ---\n" << xport::run_decompositions(p);
    });

const exportdb::registrar buffer_mutation(
    "buffer_mutation", "a buffer updated in forward: add_ in the training IR, BUFFER_MUTATION after functionalization",
    "SUPPORTED", [](std::ostream& os) {
      auto m = std::make_shared<Counter>();
      auto p = xport::export_program(m, std::tuple{at::randn({3, 2})});
      os << p << "\n--- run_decompositions() ---\n";
      auto q = xport::run_decompositions(p);
      os << q;
      (void)xport::run(q, {at::zeros({3, 2})});
      (void)xport::run(q, {at::zeros({3, 2})});
      os << "count after two runs: " << q.state_dict().at("count")[0].item<float>() << "\n";
    });

const exportdb::registrar specialized_attribute(
    "specialized_attribute", "C++ attributes of the module (strings, ints) are burned in", "SUPPORTED",
    [](std::ostream& os) {
      auto m = std::make_shared<Specialized>();
      os << xport::export_program(m, std::tuple{at::randn({3, 2})});
    });

const exportdb::registrar constant_tensor(
    "constant_tensor", "a tensor captured from outside is lifted to a CONSTANT_TENSOR input", "SUPPORTED",
    [](std::ostream& os) {
      const auto table = at::arange(6, at::kFloat).view({3, 2});
      os << xport::export_program([&](const at::Tensor& x) { return x + table; }, std::tuple{at::randn({3, 2})});
    });

const exportdb::registrar constant_mutation(
    "constant_mutation", "updating a captured tensor in place must be a buffer instead (torch: model_attr_mutation)",
    "NOT_SUPPORTED_YET", [](std::ostream& os) {
      auto hidden = at::zeros({3});
      exportdb::expect_error(os, [&] {
        (void)xport::export_program([&](const at::Tensor& x) { return hidden.add_(x); }, std::tuple{at::randn({3})});
      });
    });

const exportdb::registrar decompositions(
    "decompositions", "the three IRs of torch's docs example: training, inference, core ATen", "SUPPORTED",
    [](std::ostream& os) {
      torch::manual_seed(0);
      auto m = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 3, 1)), torch::nn::BatchNorm2d(3));
      m->train();
      auto p = xport::export_program(m, std::tuple{at::randn({1, 1, 3, 3})});
      os << "--- training IR ---\n" << p;
      os << "\n--- inference IR: run_decompositions(decomposition_table::none()) ---\n"
         << xport::run_decompositions(p, xport::decomposition_table::none());
      os << "\n--- core ATen IR: run_decompositions() ---\n" << xport::run_decompositions(p);
    });

}  // namespace
