// Passes per node: xport's dce, cse and fold against TorchScript's EliminateDeadCode,
// EliminateCommonSubexpression and ConstantPropagation on the same graph, and graph
// construction per node and bytes per node for both.
//
// Workload (research/perf_anchors.md): N/8 blocks of
//   s = sin(v); a = mul(s, y); b = mul(s, y) [duplicate]; t = mul(a, b); cos(t) [dead];
//   kc = mul(kc, K) [foldable, K a constant]; v2 = mul(t, kc); v = tanh(v2)
// on [1, 8] tensors; plus ResNet-18's inference IR. Each iteration runs the pass on a fresh copy
// (the copy is not timed). `per_node` is seconds per node of the input graph.
#include <malloc.h>

#include <benchmark/benchmark.h>

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/torch.h>

#include <xport/xport.hpp>

#include "../tests/models.hpp"

namespace {

// ---- the synthetic graph, in xport ----------------------------------------------------------------

struct xport_ops {
  const xport::op_info& sin = xport::find_op("aten::sin");
  const xport::op_info& cos = xport::find_op("aten::cos");
  const xport::op_info& tanh = xport::find_op("aten::tanh");
  const xport::op_info& mul = xport::find_op("aten::mul.Tensor");
};

// The graph alone (what construction costs).
void build_graph(xport::graph& g, int nodes, xport::value x, xport::value y, xport::value k) {
  static const xport_ops ops;
  const auto t = xport::value_type::of(xport::tensor_meta::contiguous(at::kFloat, {1, 8}));
  xport::value v = x, kc = k;
  const auto call = [&](const xport::op_info& op, std::vector<xport::argument> args) {
    return g.create_call(op, std::move(args), {t}).out();
  };
  for (int i = 0; i < nodes / 8; ++i) {
    auto s = call(ops.sin, {v});
    auto a = call(ops.mul, {s, y});
    auto b = call(ops.mul, {s, y});
    auto tt = call(ops.mul, {a, b});
    call(ops.cos, {tt});
    kc = call(ops.mul, {kc, k});
    auto v2 = call(ops.mul, {tt, kc});
    v = call(ops.tanh, {v2});
  }
  g.set_output({v});
}

xport::exported_program synthetic_program(int nodes) {
  xport::program_builder b;
  const auto meta = xport::tensor_meta::contiguous(at::kFloat, {1, 8});
  auto k = b.constant("K", at::full({1, 8}, 1.001));
  auto x = b.input("x", meta);
  auto y = b.input("y", meta);
  auto& g = b.graph_ref();
  // the calls, then the user output through the builder
  static const xport_ops ops;
  const auto t = xport::value_type::of(meta);
  xport::value v = x, kc = k;
  const auto call = [&](const xport::op_info& op, std::vector<xport::argument> args) {
    return b.record(op, std::move(args), {t}).out();
  };
  for (int i = 0; i < nodes / 8; ++i) {
    auto s = call(ops.sin, {v});
    auto a = call(ops.mul, {s, y});
    auto bb = call(ops.mul, {s, y});
    auto tt = call(ops.mul, {a, bb});
    call(ops.cos, {tt});
    kc = call(ops.mul, {kc, k});
    auto v2 = call(ops.mul, {tt, kc});
    v = call(ops.tanh, {v2});
  }
  (void)g;
  b.output(v);
  return std::move(b).build(xport::ir_dialect::aten, xport::verify_options{.check_schemas = false});
}

// ---- the same graph, in TorchScript -------------------------------------------------------------

std::shared_ptr<torch::jit::Graph> synthetic_torchscript(int nodes) {
  namespace jit = torch::jit;
  auto g = std::make_shared<jit::Graph>();
  auto* x = g->addInput("x");
  auto* y = g->addInput("y");
  x->setType(c10::TensorType::get());
  y->setType(c10::TensorType::get());
  auto* k = g->insertConstant(at::full({1, 8}, 1.001));
  const auto call = [&](c10::Symbol op, std::vector<jit::Value*> args) {
    auto* n = g->create(op, args);
    n->output()->setType(c10::TensorType::get());
    return g->insertNode(n)->output();
  };
  const auto sin = c10::Symbol::fromQualString("aten::sin"), cos = c10::Symbol::fromQualString("aten::cos"),
             tanh = c10::Symbol::fromQualString("aten::tanh"), mul = c10::Symbol::fromQualString("aten::mul");
  jit::Value *v = x, *kc = k;
  for (int i = 0; i < nodes / 8; ++i) {
    auto* s = call(sin, {v});
    auto* a = call(mul, {s, y});
    auto* b = call(mul, {s, y});
    auto* t = call(mul, {a, b});
    call(cos, {t});
    kc = call(mul, {kc, k});
    auto* v2 = call(mul, {t, kc});
    v = call(tanh, {v2});
  }
  g->registerOutput(v);
  return g;
}

void set_per_node(benchmark::State& state, std::size_t nodes) {
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["per_node"] = benchmark::Counter(static_cast<double>(nodes),
                                                  benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// ---- construction -------------------------------------------------------------------------------

void BM_build_xport(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto t = xport::value_type::of(xport::tensor_meta::contiguous(at::kFloat, {1, 8}));
  std::size_t bytes = 0;
  for (auto _ : state) {
    const auto before = mallinfo2().uordblks;
    xport::graph g;
    auto x = g.add_placeholder("x", t), y = g.add_placeholder("y", t), k = g.add_placeholder("k", t);
    build_graph(g, n, x, y, k);
    bytes = mallinfo2().uordblks - before;
    benchmark::DoNotOptimize(g);
  }
  state.counters["bytes_per_node"] = static_cast<double>(bytes) / n;
  set_per_node(state, static_cast<std::size_t>(n));
}

void BM_build_torchscript(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::size_t bytes = 0;
  for (auto _ : state) {
    const auto before = mallinfo2().uordblks;
    auto g = synthetic_torchscript(n);
    bytes = mallinfo2().uordblks - before;
    benchmark::DoNotOptimize(g);
  }
  state.counters["bytes_per_node"] = static_cast<double>(bytes) / n;
  set_per_node(state, static_cast<std::size_t>(n));
}

// ---- passes -------------------------------------------------------------------------------------

template <class Pass>
void run_xport_pass(benchmark::State& state, const xport::exported_program& src, const Pass& pass) {
  for (auto _ : state) {
    state.PauseTiming();
    auto p = src.clone();
    state.ResumeTiming();
    auto r = pass.run(p);
    benchmark::DoNotOptimize(r);
    state.PauseTiming();
    { auto dispose = std::move(p); }
    state.ResumeTiming();
  }
  set_per_node(state, src.graph().size());
}

template <class Pass>
void run_ts_pass(benchmark::State& state, const std::shared_ptr<torch::jit::Graph>& src, Pass&& pass) {
  std::size_t nodes = 0;
  for (auto* n : src->nodes()) nodes += n != nullptr;
  for (auto _ : state) {
    state.PauseTiming();
    auto g = src->copy();
    state.ResumeTiming();
    pass(g);
    state.PauseTiming();
    g.reset();
    state.ResumeTiming();
  }
  set_per_node(state, nodes + src->inputs().size() + 1);
}

void BM_dce_xport(benchmark::State& s) { run_xport_pass(s, synthetic_program(static_cast<int>(s.range(0))), xport::passes::dce); }
void BM_cse_xport(benchmark::State& s) { run_xport_pass(s, synthetic_program(static_cast<int>(s.range(0))), xport::passes::cse); }
void BM_fold_xport(benchmark::State& s) { run_xport_pass(s, synthetic_program(static_cast<int>(s.range(0))), xport::passes::fold); }
void BM_dce_torchscript(benchmark::State& s) {
  run_ts_pass(s, synthetic_torchscript(static_cast<int>(s.range(0))), [](auto& g) { torch::jit::EliminateDeadCode(g); });
}
void BM_cse_torchscript(benchmark::State& s) {
  run_ts_pass(s, synthetic_torchscript(static_cast<int>(s.range(0))),
              [](auto& g) { torch::jit::EliminateCommonSubexpression(g); });
}
void BM_fold_torchscript(benchmark::State& s) {
  run_ts_pass(s, synthetic_torchscript(static_cast<int>(s.range(0))), [](auto& g) { torch::jit::ConstantPropagation(g); });
}

// ---- ResNet-18 ----------------------------------------------------------------------------------

const xport::exported_program& resnet_program() {
  static const xport::exported_program p = [] {
    torch::manual_seed(0);
    xport_models::ResNet18 net;
    net->eval();
    return xport::run_decompositions(xport::export_program(net, std::tuple{at::randn({1, 3, 64, 64})}));
  }();
  return p;
}

std::shared_ptr<torch::jit::Graph> resnet_torchscript() {
  torch::manual_seed(0);
  xport_models::ResNet18 net;
  net->eval();
  torch::NoGradGuard no_grad;
  torch::jit::Stack inputs{at::randn({1, 3, 64, 64})};
  for (const auto& p : net->named_parameters()) inputs.emplace_back(p.value());
  for (const auto& b : net->named_buffers()) inputs.emplace_back(b.value());
  auto traced = torch::jit::tracer::trace(
      inputs, [&](torch::jit::Stack in) -> torch::jit::Stack { return {net->forward(in[0].toTensor())}; },
      [](const at::Tensor&) { return std::string(); });
  return traced.first->graph;
}

void BM_resnet18_dce_xport(benchmark::State& s) { run_xport_pass(s, resnet_program(), xport::passes::dce); }
void BM_resnet18_cse_xport(benchmark::State& s) { run_xport_pass(s, resnet_program(), xport::passes::cse); }
void BM_resnet18_fold_xport(benchmark::State& s) { run_xport_pass(s, resnet_program(), xport::passes::fold); }
void BM_resnet18_dce_torchscript(benchmark::State& s) {
  run_ts_pass(s, resnet_torchscript(), [](auto& g) { torch::jit::EliminateDeadCode(g); });
}
void BM_resnet18_cse_torchscript(benchmark::State& s) {
  run_ts_pass(s, resnet_torchscript(), [](auto& g) { torch::jit::EliminateCommonSubexpression(g); });
}
void BM_resnet18_fold_torchscript(benchmark::State& s) {
  run_ts_pass(s, resnet_torchscript(), [](auto& g) { torch::jit::ConstantPropagation(g); });
}

}  // namespace

#define XPORT_SIZES ->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond)
BENCHMARK(BM_build_xport) XPORT_SIZES;
BENCHMARK(BM_build_torchscript) XPORT_SIZES;
BENCHMARK(BM_dce_xport) XPORT_SIZES;
BENCHMARK(BM_dce_torchscript) XPORT_SIZES;
BENCHMARK(BM_cse_xport) XPORT_SIZES;
BENCHMARK(BM_cse_torchscript) XPORT_SIZES;
BENCHMARK(BM_fold_xport) XPORT_SIZES;
BENCHMARK(BM_fold_torchscript) XPORT_SIZES;
BENCHMARK(BM_resnet18_dce_xport)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_resnet18_dce_torchscript)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_resnet18_cse_xport)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_resnet18_cse_torchscript)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_resnet18_fold_xport)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_resnet18_fold_torchscript)->Unit(benchmark::kMicrosecond);
#undef XPORT_SIZES

BENCHMARK_MAIN();
