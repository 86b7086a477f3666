// A custom operator, end to end: a C++ library registers `mylib::swish_gate` with TORCH_LIBRARY
// (its schema), a CPU kernel and a Meta kernel (the sizes of its output, for export); a torch::nn
// model calls it; xport exports the model with the operator kept as
// torch.ops.mylib.swish_gate.default, prints it, saves it as a .pt2 archive and loads it again
// (torch.export.load in Python reads it once Python registers the same schema), and runs it.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <torch/library.h>
#include <torch/torch.h>
#include <xport/xport.hpp>

// ---- the operator library --------------------------------------------------------------------

at::Tensor swish_gate(const at::Tensor& x, const at::Tensor& gate, double beta) { return x * at::sigmoid(gate * beta); }

// What export runs instead of the kernel: outputs of the right sizes and dtype, no data read.
at::Tensor swish_gate_meta(const at::Tensor& x, const at::Tensor& gate, double) {
  TORCH_CHECK(x.sizes() == gate.sizes(), "mylib::swish_gate: x ", x.sizes(), " and gate ", gate.sizes(), " differ");
  return at::empty_like(x);
}

TORCH_LIBRARY(mylib, m) { m.def("swish_gate(Tensor x, Tensor gate, float beta=1.0) -> Tensor"); }
TORCH_LIBRARY_IMPL(mylib, CPU, m) { m.impl("swish_gate", swish_gate); }
TORCH_LIBRARY_IMPL(mylib, Meta, m) { m.impl("swish_gate", swish_gate_meta); }

// ---- a model that calls it, through the dispatcher ---------------------------------------------

at::Tensor call_swish_gate(const at::Tensor& x, const at::Tensor& gate, double beta) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mylib::swish_gate", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, gate, beta);
}

struct GatedMLP : torch::nn::Module {
  torch::nn::Linear value{16, 32}, gate{16, 32}, out{32, 4};
  GatedMLP() {
    register_module("value", value);
    register_module("gate", gate);
    register_module("out", out);
  }
  torch::Tensor forward(torch::Tensor x) { return out(call_swish_gate(value(x), gate(x), 1.5)); }
};

int main() {
  torch::manual_seed(0);
  auto net = std::make_shared<GatedMLP>();
  net->eval();
  auto program = xport::export_program(net, std::tuple{torch::randn({3, 16})});
  std::cout << program << "\n";

  const auto path = (std::filesystem::temp_directory_path() / "xport_custom_op_example.pt2").string();
  xport::save(program, path);
  auto loaded = xport::load(path);
  std::remove(path.c_str());

  const auto x = torch::randn({3, 16});
  torch::NoGradGuard no_grad;
  const bool same = torch::equal(xport::run(loaded, {x})[0], net->forward(x));
  std::cout << "saved, loaded and run: equal to eager LibTorch: " << std::boolalpha << same << "\n";
  return same ? 0 : 1;
}
