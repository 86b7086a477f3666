// xport quick start: export the seed program `sin(x) + cos(y)` and a small torch::nn model,
// print both as torch.export prints them, run them through LibTorch's dispatcher, and check the
// results against eager LibTorch.
#include <iostream>

#include <torch/torch.h>
#include <xport/xport.hpp>

// The seed's module, written once for both tensor types: at::Tensor runs eagerly, and
// xport::sym_tensor (the strict front end) records each op with the line that made it.
template <class Tensor>
Tensor seed_forward(const Tensor& x, const Tensor& y) {
  auto a = sin(x);
  auto b = cos(y);
  return a + b;
}

struct TinyNet : torch::nn::Module {
  torch::nn::Linear fc1{8, 16}, fc2{16, 4};
  TinyNet() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
};

int main() {
  bool ok = true;

  // 1. The seed program, exported with the strict policy.
  const auto x = torch::randn({10, 10}), y = torch::randn({10, 10});
  auto seed = xport::export_program<xport::strict>(
      [](const xport::sym_tensor& a, const xport::sym_tensor& b) { return seed_forward(a, b); }, std::tuple{x, y},
      {.input_names = {"x", "y"}});
  std::cout << seed << "\n";
  xport::callable<at::Tensor(at::Tensor, at::Tensor)> f(seed);
  const bool seed_ok = torch::allclose(f(x, y), seed_forward(x, y));
  std::cout << "seed program matches eager LibTorch: " << std::boolalpha << seed_ok << "\n\n";
  ok = ok && seed_ok;

  // 2. A torch::nn model, exported as it is (non-strict): parameters become inputs.
  torch::manual_seed(0);
  auto net = std::make_shared<TinyNet>();
  net->eval();
  auto program = xport::export_program(net, std::tuple{torch::randn({2, 8})});
  std::cout << program << "\n";
  const auto input = torch::randn({2, 8});
  const bool net_ok = torch::allclose(xport::run(program, {input})[0], net->forward(input));
  std::cout << "TinyNet program matches eager LibTorch: " << net_ok << "\n";
  ok = ok && net_ok;
  return ok ? 0 : 1;
}
