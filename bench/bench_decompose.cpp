// run_decompositions() per node, and the run time of the training IR against the inference IR
// against eager LibTorch, for ResNet-18 and a Transformer encoder layer (eval mode, batch 1).
// `per_node` is seconds per node of the source program; compare variants of one run.
#include <benchmark/benchmark.h>

#include <torch/torch.h>

#include <xport/xport.hpp>

#include "../tests/models.hpp"

namespace {

struct resnet {
  static auto make() { return xport_models::ResNet18(); }
  static at::Tensor input() { return at::randn({1, 3, 64, 64}); }
};
struct encoder {
  static auto make() { return xport_models::Encoder(); }
  static at::Tensor input() { return at::randn({16, 1, 32}); }
};

template <class M>
void BM_run_decompositions(benchmark::State& state) {
  torch::manual_seed(0);
  auto net = M::make();
  net->eval();
  auto p = xport::export_program(net, std::tuple{M::input()});
  for (auto _ : state) benchmark::DoNotOptimize(xport::run_decompositions(p));
  state.counters["nodes"] = static_cast<double>(p.graph().size());
  state.counters["per_node"] = benchmark::Counter(static_cast<double>(p.graph().size()),
                                                  benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

template <class M>
void BM_eager(benchmark::State& state) {
  torch::manual_seed(0);
  auto net = M::make();
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = M::input();
  for (auto _ : state) benchmark::DoNotOptimize(net->forward(x));
}

template <class M, bool Inference>
void BM_run(benchmark::State& state) {
  torch::manual_seed(0);
  auto net = M::make();
  net->eval();
  auto p = xport::export_program(net, std::tuple{M::input()});
  if (Inference) p = xport::run_decompositions(p);
  torch::NoGradGuard no_grad;
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{M::input()};
  for (auto _ : state) benchmark::DoNotOptimize(interp.run(in));
  state.counters["nodes"] = static_cast<double>(p.graph().size());
}

}  // namespace

BENCHMARK(BM_run_decompositions<resnet>)->Name("BM_run_decompositions/resnet18")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_run_decompositions<encoder>)->Name("BM_run_decompositions/transformer_layer")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_eager<resnet>)->Name("BM_run/resnet18/eager")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_run<resnet, false>)->Name("BM_run/resnet18/training_ir")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_run<resnet, true>)->Name("BM_run/resnet18/inference_ir")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_eager<encoder>)->Name("BM_run/transformer_layer/eager")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_run<encoder, false>)->Name("BM_run/transformer_layer/training_ir")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_run<encoder, true>)->Name("BM_run/transformer_layer/inference_ir")->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
