// xport::unflatten's cost: a stack of four pre-norm MLP layers (width 64, [8, 32, 64] inputs),
// each called through xport::call and its boundary preserved, run in the same run as
//   eager       the torch::nn module itself
//   program     run(p): the exported program through the interpreter
//   unflat      unflatten(p)->forward: no call swapped, so the whole program at once
//   steps       layers.0 swapped for its own program: the stack runs in steps (runs of nodes
//               and calls), what a swap costs
//   steps_fn    layers.0 swapped for the eager layer (a function of its tensors)
// Read ratios to `program`: this machine is noisy (tools/icount.py gives instruction counts).
#include <memory>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

#include <torch/torch.h>

#include <xport/unflatten.hpp>

#include "icount.hpp"

namespace {

struct LayerImpl : torch::nn::Module {
  LayerImpl() {
    register_module("norm", norm);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& gate) {
    auto h = fc2(torch::gelu(fc1(norm(x))));
    return {x + h * gate, h};
  }
  torch::nn::LayerNorm norm{torch::nn::LayerNormOptions({64})};
  torch::nn::Linear fc1{64, 128}, fc2{128, 64};
};
TORCH_MODULE(Layer);

struct StackImpl : torch::nn::Module {
  StackImpl() {
    for (int i = 0; i < 4; ++i) layers->push_back(Layer());
    register_module("layers", layers);
  }
  at::Tensor forward(at::Tensor x) {
    auto gate = torch::sigmoid(x.mean(-1, true));
    for (std::size_t i = 0; i < layers->size(); ++i) {
      auto [y, h] = xport::call(layers->ptr<LayerImpl>(i), x, gate);
      x = y;
      gate = gate * h.mean(-1, true).tanh();
    }
    return x;
  }
  torch::nn::ModuleList layers;
};
TORCH_MODULE(Stack);

struct setup {
  Stack net = (torch::manual_seed(0), Stack());
  at::Tensor x = torch::randn({8, 32, 64});
  xport::exported_program p = (net->eval(), xport::export_program(
                                                 net, std::tuple{x},
                                                 {.preserve_module_call_signature = {"layers.0", "layers.1", "layers.2",
                                                                                     "layers.3"}}));
};

void BM_unflatten_eager(benchmark::State& state) {
  setup s;
  torch::NoGradGuard no_grad;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(s.net->forward(s.x));
}

void BM_unflatten_program(benchmark::State& state) {
  setup s;
  torch::NoGradGuard no_grad;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(xport::run(s.p, {s.x}));
}

void BM_unflatten_unflat(benchmark::State& state) {
  setup s;
  const auto u = xport::unflatten(s.p);
  torch::NoGradGuard no_grad;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(u->forward({s.x}));
}

void BM_unflatten_steps(benchmark::State& state) {
  setup s;
  const auto u = xport::unflatten(s.p);
  u->set_submodule("layers.0", u->submodule("layers.0")->program().clone());
  torch::NoGradGuard no_grad;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(u->forward({s.x}));
}

void BM_unflatten_steps_fn(benchmark::State& state) {
  setup s;
  const auto u = xport::unflatten(s.p);
  auto layer = s.net->layers->ptr<LayerImpl>(0);
  u->set_submodule("layers.0", [layer](const std::vector<at::Tensor>& in) {
    auto [y, h] = layer->forward(in[0], in[1]);
    return std::vector<at::Tensor>{y, h};
  });
  torch::NoGradGuard no_grad;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(u->forward({s.x}));
}

}  // namespace

BENCHMARK(BM_unflatten_eager);
BENCHMARK(BM_unflatten_program);
BENCHMARK(BM_unflatten_unflat);
BENCHMARK(BM_unflatten_steps);
BENCHMARK(BM_unflatten_steps_fn);

BENCHMARK_MAIN();
