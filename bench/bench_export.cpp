// Export time per captured op: xport::export_program (non-strict capture through the dispatcher,
// ops run on meta tensors) against torch::jit::tracer::trace of the same C++ code (which runs the
// real kernels), on ResNet-18 and on elementwise chains of 100 to 30,000 ops
// (x = sin(x) | x + y | x * y for i % 3 == 0 | 1 | 2, on [1, 8] tensors).
// `per_op` is seconds per captured op; compare the two variants of one size within one run.
#include <benchmark/benchmark.h>

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/torch.h>

#include <xport/xport.hpp>

#include "../tests/models.hpp"

namespace {

at::Tensor chain(at::Tensor x, const at::Tensor& y, int n) {
  for (int i = 0; i < n; ++i) {
    switch (i % 3) {
      case 0: x = at::sin(x); break;
      case 1: x = x + y; break;
      default: x = x * y; break;
    }
  }
  return x;
}

void set_per_op(benchmark::State& state, std::size_t ops) {
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["per_op"] = benchmark::Counter(static_cast<double>(ops),
                                                benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

std::size_t call_nodes(const xport::exported_program& p) {
  std::size_t n = 0;
  for (auto node : p.graph().nodes()) n += node.is_call();
  return n;
}

void BM_export_chain_xport(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto x = at::randn({1, 8}), y = at::randn({1, 8});
  std::size_t ops = 0;
  for (auto _ : state) {
    auto p = xport::export_program([n](const at::Tensor& a, const at::Tensor& b) { return chain(a, b, n); },
                                   std::tuple{x, y});
    ops = call_nodes(p);
    benchmark::DoNotOptimize(p);
  }
  set_per_op(state, ops);
}

void BM_export_chain_jit_tracer(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto x = at::randn({1, 8}), y = at::randn({1, 8});
  std::size_t ops = 0;
  for (auto _ : state) {
    auto traced = torch::jit::tracer::trace(
        {x, y}, [n](torch::jit::Stack in) -> torch::jit::Stack { return {chain(in[0].toTensor(), in[1].toTensor(), n)}; },
        [](const at::Tensor&) { return std::string(); });
    ops = 0;
    for (auto* node : traced.first->graph->nodes()) ops += node->kind().is_aten();
    benchmark::DoNotOptimize(traced);
  }
  set_per_op(state, ops);
}

void BM_export_resnet18_xport(benchmark::State& state) {
  torch::manual_seed(0);
  xport_models::ResNet18 net;
  net->eval();
  const auto x = at::randn({1, 3, 64, 64});
  std::size_t ops = 0;
  for (auto _ : state) {
    auto p = xport::export_program(net, std::tuple{x});
    ops = call_nodes(p);
    benchmark::DoNotOptimize(p);
  }
  set_per_op(state, ops);
}

void BM_export_resnet18_jit_tracer(benchmark::State& state) {
  torch::manual_seed(0);
  xport_models::ResNet18 net;
  net->eval();
  const auto x = at::randn({1, 3, 64, 64});
  torch::jit::Stack inputs{x};
  std::vector<std::string> names{"x"};
  for (const auto& p : net->named_parameters()) inputs.emplace_back(p.value());
  for (const auto& b : net->named_buffers()) inputs.emplace_back(b.value());
  std::size_t ops = 0;
  for (auto _ : state) {
    torch::NoGradGuard no_grad;
    auto traced = torch::jit::tracer::trace(
        inputs, [&](torch::jit::Stack in) -> torch::jit::Stack { return {net->forward(in[0].toTensor())}; },
        [](const at::Tensor&) { return std::string(); });
    ops = 0;
    for (auto* node : traced.first->graph->nodes()) ops += node->kind().is_aten();
    benchmark::DoNotOptimize(traced);
  }
  set_per_op(state, ops);
}


// The same export with a dynamic batch (Dim("batch", 1, 256)), and with dynamic batch, height
// and width: export captures once per dim more (plus one) and fits every size symbolically.
void BM_export_resnet18_xport_dynamic(benchmark::State& state) {
  torch::manual_seed(0);
  xport_models::ResNet18 net;
  net->eval();
  const auto x = at::randn({1, 3, 64, 64});
  const auto batch = xport::Dim("batch", 1, 256);
  xport::shape_spec spec = {{0, batch}};
  if (state.range(0) == 3) spec = {{0, batch}, {2, xport::Dim("h", 32, 512)}, {3, xport::Dim("w", 32, 512)}};
  std::size_t ops = 0;
  for (auto _ : state) {
    auto p = xport::export_program(net, std::tuple{x}, {.dynamic_shapes = {{"x", spec}}});
    ops = call_nodes(p);
    benchmark::DoNotOptimize(p);
  }
  set_per_op(state, ops);
}

// The input-guard check per call: a static program, and one whose two inputs share a dynamic
// batch (bind, range check, equality check).
void BM_guard_check(benchmark::State& state) {
  const bool dynamic = state.range(0) != 0;
  const auto x = at::randn({8, 16}), y = at::randn({8, 16});
  xport::export_options opts{.input_names = {"x", "y"}};
  if (dynamic) {
    const auto b = xport::Dim("batch", 1, 1024);
    opts.dynamic_shapes = {{"x", {{0, b}}}, {"y", {{0, b}}}};
  }
  auto p = xport::export_program([](const at::Tensor& a, const at::Tensor& c) { return a + c; }, std::tuple{x, y}, opts);
  const xport::input_guards guards(p);
  const std::vector<at::Tensor> inputs{x, y};
  for (auto _ : state) {
    auto env = guards.check_and_bind(inputs);
    benchmark::DoNotOptimize(env);
  }
}

}  // namespace

BENCHMARK(BM_export_chain_xport)->Arg(1)->Arg(100)->Arg(1000)->Arg(10000)->Arg(30000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_export_chain_jit_tracer)->Arg(1)->Arg(100)->Arg(1000)->Arg(10000)->Arg(30000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_export_resnet18_xport)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_export_resnet18_jit_tracer)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_export_resnet18_xport_dynamic)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_guard_check)->Arg(0)->Arg(1);

BENCHMARK_MAIN();
