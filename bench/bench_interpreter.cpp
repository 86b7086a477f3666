// Interpreter overhead per node: xport's interpreter against eager C++ calls of the same ops and
// against TorchScript running the same graph (GraphExecutor, and the raw InterpreterState), on
//   (a) chain-N: x, y of shape [1, 8]; op i is x = sin(x) | x + y | x * y for i % 3 == 0 | 1 | 2
//   (b) an MLP of 8 x (linear(64, 64) + relu) at batch 1.
// Every variant reports `per_op` (seconds per op); compare variants of one run (the machine is noisy).
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <xport/xport.hpp>

namespace {

// ---- workload (a): the elementwise chain -------------------------------------------------------

xport::exported_program chain_program(int n) {
  xport::program_builder b;
  auto x = b.input("x", at::randn({1, 8}));
  auto y = b.input("y", at::randn({1, 8}));
  xport::value v = x;
  for (int i = 0; i < n; ++i) {
    switch (i % 3) {
      case 0: v = b.call("aten::sin", {v}); break;
      case 1: v = b.call("aten::add.Tensor", {v, y}); break;
      default: v = b.call("aten::mul.Tensor", {v, y}); break;
    }
  }
  b.output(v);
  return std::move(b).build();
}

std::shared_ptr<torch::jit::Graph> chain_torchscript(int n) {
  std::string ir = "graph(%x0 : Tensor, %y : Tensor):\n  %one : int = prim::Constant[value=1]()\n";
  for (int i = 0; i < n; ++i) {
    const auto in = "%x" + std::to_string(i), out = "%x" + std::to_string(i + 1);
    switch (i % 3) {
      case 0: ir += "  " + out + " : Tensor = aten::sin(" + in + ")\n"; break;
      case 1: ir += "  " + out + " : Tensor = aten::add(" + in + ", %y, %one)\n"; break;
      default: ir += "  " + out + " : Tensor = aten::mul(" + in + ", %y)\n"; break;
    }
  }
  ir += "  return (%x" + std::to_string(n) + ")\n";
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, g.get());
  return g;
}

// `per_op`: seconds per executed op (printed with an SI prefix: 1.05u = 1.05 us).
void set_per_op(benchmark::State& state, int ops) {
  state.counters["per_op"] = benchmark::Counter(
      static_cast<double>(ops), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_chain_eager(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto x0 = at::randn({1, 8}), y = at::randn({1, 8});
  for (auto _ : state) {
    at::Tensor x = x0;
    for (int i = 0; i < n; ++i) {
      switch (i % 3) {
        case 0: x = at::sin(x); break;
        case 1: x = at::add(x, y); break;
        default: x = at::mul(x, y); break;
      }
    }
    benchmark::DoNotOptimize(x);
  }
  set_per_op(state, n);
}

void BM_chain_xport(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto p = chain_program(n);
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{at::randn({1, 8}), at::randn({1, 8})};
  for (auto _ : state) benchmark::DoNotOptimize(interp.run(in));
  set_per_op(state, n);
}

void BM_chain_torchscript_executor(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  torch::jit::GraphExecutor exec(chain_torchscript(n), "chain");
  const auto x = at::randn({1, 8}), y = at::randn({1, 8});
  for (int warm = 0; warm < 3; ++warm) {  // let the profiling executor settle
    torch::jit::Stack s{x, y};
    exec.run(s);
  }
  for (auto _ : state) {
    torch::jit::Stack s{x, y};
    exec.run(s);
    benchmark::DoNotOptimize(s);
  }
  set_per_op(state, n);
}

void BM_chain_torchscript_interpreter(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  torch::jit::Code code(chain_torchscript(n), "chain");
  const auto x = at::randn({1, 8}), y = at::randn({1, 8});
  for (auto _ : state) {
    torch::jit::Stack s{x, y};
    torch::jit::InterpreterState(code).run(s);
    benchmark::DoNotOptimize(s);
  }
  set_per_op(state, n);
}

// The same three under c10::InferenceMode (no autograd bookkeeping per op).
void BM_chain_eager_inference(benchmark::State& state) {
  c10::InferenceMode guard;
  BM_chain_eager(state);
}
void BM_chain_xport_inference(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto p = chain_program(n);
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{at::randn({1, 8}), at::randn({1, 8})};
  xport::run_options o;
  o.inference_mode = true;
  for (auto _ : state) benchmark::DoNotOptimize(interp.run(in, o));
  set_per_op(state, n);
}

// ---- workload (b): the MLP ---------------------------------------------------------------------

constexpr int mlp_layers = 8, mlp_width = 64;

struct mlp_weights {
  std::vector<at::Tensor> w, b;
  mlp_weights() {
    for (int i = 0; i < mlp_layers; ++i) {
      w.push_back(at::randn({mlp_width, mlp_width}) * 0.1);
      b.push_back(at::randn({mlp_width}) * 0.1);
    }
  }
};

xport::exported_program mlp_program(const mlp_weights& m) {
  xport::program_builder b;
  xport::value h = b.input("x", at::randn({1, mlp_width}));
  for (int i = 0; i < mlp_layers; ++i) {
    const auto pre = "layers." + std::to_string(i);
    auto w = b.parameter(pre + ".weight", m.w[static_cast<std::size_t>(i)]);
    auto bias = b.parameter(pre + ".bias", m.b[static_cast<std::size_t>(i)]);
    h = b.call("aten::relu", {b.call("aten::linear", {h, w, bias})});
  }
  b.output(h);
  return std::move(b).build();
}

std::shared_ptr<torch::jit::Graph> mlp_torchscript() {
  std::string ir = "graph(%h0 : Tensor";
  for (int i = 0; i < mlp_layers; ++i) ir += ", %w" + std::to_string(i) + " : Tensor, %b" + std::to_string(i) + " : Tensor";
  ir += "):\n";
  for (int i = 0; i < mlp_layers; ++i) {
    const auto s = std::to_string(i), t = std::to_string(i + 1);
    ir += "  %l" + s + " : Tensor = aten::linear(%h" + s + ", %w" + s + ", %b" + s + ")\n";
    ir += "  %h" + t + " : Tensor = aten::relu(%l" + s + ")\n";
  }
  ir += "  return (%h" + std::to_string(mlp_layers) + ")\n";
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, g.get());
  return g;
}

void BM_mlp_eager(benchmark::State& state) {
  mlp_weights m;
  const auto x = at::randn({1, mlp_width});
  for (auto _ : state) {
    at::Tensor h = x;
    for (int i = 0; i < mlp_layers; ++i) h = at::relu(at::linear(h, m.w[static_cast<std::size_t>(i)], m.b[static_cast<std::size_t>(i)]));
    benchmark::DoNotOptimize(h);
  }
  set_per_op(state, 2 * mlp_layers);
}

void BM_mlp_xport(benchmark::State& state) {
  mlp_weights m;
  auto p = mlp_program(m);
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{at::randn({1, mlp_width})};
  for (auto _ : state) benchmark::DoNotOptimize(interp.run(in));
  set_per_op(state, 2 * mlp_layers);
}

void BM_mlp_torchscript_executor(benchmark::State& state) {
  mlp_weights m;
  torch::jit::GraphExecutor exec(mlp_torchscript(), "mlp");
  torch::jit::Stack proto{at::randn({1, mlp_width})};
  for (int i = 0; i < mlp_layers; ++i) {
    proto.emplace_back(m.w[static_cast<std::size_t>(i)]);
    proto.emplace_back(m.b[static_cast<std::size_t>(i)]);
  }
  for (int warm = 0; warm < 3; ++warm) {
    auto s = proto;
    exec.run(s);
  }
  for (auto _ : state) {
    auto s = proto;
    exec.run(s);
    benchmark::DoNotOptimize(s);
  }
  set_per_op(state, 2 * mlp_layers);
}

void BM_mlp_torchscript_interpreter(benchmark::State& state) {
  mlp_weights m;
  torch::jit::Code code(mlp_torchscript(), "mlp");
  torch::jit::Stack proto{at::randn({1, mlp_width})};
  for (int i = 0; i < mlp_layers; ++i) {
    proto.emplace_back(m.w[static_cast<std::size_t>(i)]);
    proto.emplace_back(m.b[static_cast<std::size_t>(i)]);
  }
  for (auto _ : state) {
    auto s = proto;
    torch::jit::InterpreterState(code).run(s);
    benchmark::DoNotOptimize(s);
  }
  set_per_op(state, 2 * mlp_layers);
}

}  // namespace

BENCHMARK(BM_chain_eager)->Arg(1000);
BENCHMARK(BM_chain_xport)->Arg(1000);
BENCHMARK(BM_chain_torchscript_executor)->Arg(1000);
BENCHMARK(BM_chain_torchscript_interpreter)->Arg(1000);
BENCHMARK(BM_chain_eager_inference)->Arg(1000);
BENCHMARK(BM_chain_xport_inference)->Arg(1000);
BENCHMARK(BM_mlp_eager);
BENCHMARK(BM_mlp_xport);
BENCHMARK(BM_mlp_torchscript_executor);
BENCHMARK(BM_mlp_torchscript_interpreter);

BENCHMARK_MAIN();
