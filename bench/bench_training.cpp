// One training step (forward, loss, backward, optimizer step), xport against eager LibTorch C++
// in the same run, on the real models of tests/models.hpp in train mode:
//   eager      the torch::nn module itself
//   module     p.module(): the exported program as a torch::nn::Module (the interpreter, autograd)
//   joint      export_forward_backward(p): the joint graph run by the engine (no autograd at
//              run time), its gradients handed to the same optimizer
// MLP (batch 32), ResNet-18 (batch 8, 32x32, BatchNorm in train mode), Transformer encoder
// layer (seq 16, batch 8). SGD with momentum everywhere. Read ratios (module / eager), not times:
// this machine is noisy.
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include <torch/torch.h>

#include <xport/engine.hpp>
#include <xport/train.hpp>

#include "../tests/models.hpp"

namespace {

namespace m = xport_models;

template <class Model>
struct WithLossImpl : torch::nn::Module {
  Model model;
  WithLossImpl() { register_module("model", model); }
  torch::Tensor forward(torch::Tensor x, torch::Tensor target) { return torch::mse_loss(model->forward(x), target); }
};

struct mlp {
  using model = m::MLP;
  static at::Tensor input() { return torch::randn({32, 16}); }
};
struct resnet18 {
  using model = m::ResNet18;
  static at::Tensor input() { return torch::randn({8, 3, 32, 32}); }
};
struct encoder {
  using model = m::Encoder;
  static at::Tensor input() { return torch::randn({16, 8, 32}); }
};

template <class M>
struct setup {
  std::shared_ptr<WithLossImpl<typename M::model>> net = (torch::manual_seed(0), std::make_shared<WithLossImpl<typename M::model>>());
  at::Tensor x = M::input();
  at::Tensor target;
  setup() {
    net->train();
    torch::NoGradGuard no_grad;
    target = torch::randn_like(net->model->forward(x));
  }
};

template <class M>
void BM_step_eager(benchmark::State& state) {
  setup<M> s;
  torch::optim::SGD opt(s.net->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  for (auto _ : state) {
    opt.zero_grad();
    s.net->forward(s.x, s.target).backward();
    opt.step();
  }
}

template <class M>
void BM_step_module(benchmark::State& state) {
  setup<M> s;
  const auto p = xport::export_program(torch::nn::ModuleHolder<WithLossImpl<typename M::model>>(s.net), std::tuple{s.x, s.target});
  auto mod = p.module();
  torch::optim::SGD opt(mod->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  for (auto _ : state) {
    opt.zero_grad();
    mod->forward({s.x, s.target})[0].backward();
    opt.step();
  }
}

template <class M>
void BM_step_joint_engine(benchmark::State& state) {
  setup<M> s;
  const auto p = xport::export_program(torch::nn::ModuleHolder<WithLossImpl<typename M::model>>(s.net), std::tuple{s.x, s.target});
  const auto j = xport::export_forward_backward(p, 0);
  const xport::engine step(j);
  std::vector<at::Tensor> params;
  for (const auto& spec : j.signature().output_specs)
    if (spec.kind == xport::output_kind::gradient_to_parameter) params.push_back(j.state_dict().at(*spec.target));
  torch::optim::SGD opt(params, torch::optim::SGDOptions(1e-3).momentum(0.9));
  for (auto _ : state) {
    std::vector<at::Tensor> outs;
    {
      torch::NoGradGuard no_grad;
      outs = step.run({s.x, s.target});
    }
    for (std::size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = outs[k + 1];
    opt.step();
  }
}

}  // namespace

BENCHMARK(BM_step_eager<mlp>)->Name("BM_mlp_step_eager");
BENCHMARK(BM_step_module<mlp>)->Name("BM_mlp_step_module");
BENCHMARK(BM_step_joint_engine<mlp>)->Name("BM_mlp_step_joint_engine");
BENCHMARK(BM_step_eager<resnet18>)->Name("BM_resnet18_step_eager")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_step_module<resnet18>)->Name("BM_resnet18_step_module")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_step_joint_engine<resnet18>)->Name("BM_resnet18_step_joint_engine")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_step_eager<encoder>)->Name("BM_encoder_step_eager");
BENCHMARK(BM_step_module<encoder>)->Name("BM_encoder_step_module");
BENCHMARK(BM_step_joint_engine<encoder>)->Name("BM_encoder_step_joint_engine");

BENCHMARK_MAIN();
