// Running exported programs: xport's interpreter and its engine (xport/engine.hpp) against eager
// C++ calls of the same ops (autograd on, NoGradGuard, InferenceMode), TorchScript running the
// same graph (GraphExecutor, the raw InterpreterState) and TorchScript's Static Runtime, on
//   (a) chain-N: x, y of shape [1, 8]; op i is x = sin(x) | x + y | x * y for i % 3 == 0 | 1 | 2
//   (b) an MLP of 8 x (linear(64, 64) + relu) at batch 1;
// and, for xport against eager, on real torch::nn models (tests/models.hpp) at batch 1, inference IR:
//   (c) ResNet-18 on 224 x 224, (d) a Transformer encoder layer, (e) an LSTM,
//   (f) an Inception network (tests/models_branches.hpp: GoogLeNet's modules 3a and 3b) on
//       56 x 56, whose four towers per module the engine runs at once with `threads`/2 (the
//       argument: engine_options::threads; run it with OMP_NUM_THREADS=1 to see branch parallelism
//       alone). ResNet-18 and the Inception network report wall time (a parallel run's work is
//       on several threads): give those runs two cores, not `taskset -c 1`.
//   (g) ScanRNN (tests/models.hpp), an Elman RNN as xport::scan over 64 steps, eager against the
//       exported scan node in the interpreter and the engine (the training IR).
// The engine's models also take `training_ir` = 1: the training IR, which keeps fused ops
// (aten::lstm) that the inference IR decomposes.
// Every variant reports `per_op` (seconds per executed op) and `peak_kB`, the activation memory of
// one steady-state run (the CPU allocator's peak above what was held before it, plus the engine's
// arena, which it holds between runs), in a run with XPORT_BENCH_PEAK=1. nativert is no peer: the wheel ships its header, not its
// symbols. Compare variants of one run (the machine is noisy).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <optional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/csrc/jit/runtime/static/impl.h>

#include <xport/engine.hpp>

#include "icount.hpp"

#include "../tests/models.hpp"
#include "../tests/models_branches.hpp"

namespace {

// ---- activation memory: a counting CPU allocator, on only while one run is measured -----------

class counting_allocator final : public c10::Allocator {
 public:
  void install() {
    base_ = c10::GetCPUAllocator();
    c10::SetCPUAllocator(this, /*priority=*/100);
  }
  // Bytes allocated at the peak of `run()` above what was live before it (0 when not installed).
  template <class Run>
  std::size_t peak_of(Run&& run) {
    if (!base_) return 0;
    live_ = 0;
    peak_ = 0;
    on_ = true;
    run();
    on_ = false;
    return static_cast<std::size_t>(peak_.load());
  }
  [[nodiscard]] bool installed() const { return base_ != nullptr; }
  c10::DataPtr allocate(std::size_t n) override {
    auto p = base_->allocate(n);
    if (!on_) return p;
    void* data = p.get();
    const auto device = p.device();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_ += static_cast<std::int64_t>(n);
      peak_ = std::max(peak_.load(), live_.load());
      held_.emplace(data, std::make_pair(std::move(p), n));
    }
    return {data, data, &release, device};  // context == data, as raw_allocate requires
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

 private:
  static void release(void* data);
  c10::Allocator* base_ = nullptr;
  std::atomic<bool> on_{false};
  std::atomic<std::int64_t> live_{0}, peak_{0};
  std::mutex mutex_;
  std::unordered_map<void*, std::pair<c10::DataPtr, std::size_t>> held_;  // what we handed out
};

counting_allocator& allocator() {
  static counting_allocator a;
  return a;
}

void counting_allocator::release(void* data) {
  auto& a = allocator();
  std::pair<c10::DataPtr, std::size_t> entry;
  {
    std::lock_guard<std::mutex> lock(a.mutex_);
    auto it = a.held_.find(data);
    if (it == a.held_.end()) return;
    entry = std::move(it->second);
    a.held_.erase(it);
    a.live_ -= static_cast<std::int64_t>(entry.second);
  }
}  // the base allocator frees it here, with `entry`

void set_peak(benchmark::State& state, std::size_t bytes) {
  if (allocator().installed()) state.counters["peak_kB"] = static_cast<double>(bytes) / 1024.0;
}

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

at::Tensor chain_eager(int n, const at::Tensor& x0, const at::Tensor& y) {
  at::Tensor x = x0;
  for (int i = 0; i < n; ++i) {
    switch (i % 3) {
      case 0: x = at::sin(x); break;
      case 1: x = at::add(x, y); break;
      default: x = at::mul(x, y); break;
    }
  }
  return x;
}

void BM_chain_eager(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto x0 = at::randn({1, 8}), y = at::randn({1, 8});
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(chain_eager(n, x0, y));
  set_per_op(state, n);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(chain_eager(n, x0, y)); }));
}

void BM_chain_eager_nograd(benchmark::State& state) {
  c10::NoGradGuard guard;
  BM_chain_eager(state);
}

void BM_chain_xport(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto p = chain_program(n);
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{at::randn({1, 8}), at::randn({1, 8})};
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(interp.run(in));
  set_per_op(state, n);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(interp.run(in)); }));
}

void BM_chain_engine(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto p = chain_program(n);
  xport::engine e(p);
  const std::vector<at::Tensor> in{at::randn({1, 8}), at::randn({1, 8})};
  benchmark::DoNotOptimize(e.run(in));  // the first run of a signature makes its plan
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(e.run(in));
  set_per_op(state, n);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(e.run(in)); }) + e.plan_info(in).arena_bytes);
}

void BM_chain_static_runtime(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  torch::jit::StaticModule sm(chain_torchscript(n));
  const std::vector<c10::IValue> in{at::randn({1, 8}), at::randn({1, 8})};
  benchmark::DoNotOptimize(sm(in));
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(sm(in));
  set_per_op(state, n);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(sm(in)); }));
}

void BM_chain_torchscript_executor(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  torch::jit::GraphExecutor exec(chain_torchscript(n), "chain");
  const auto x = at::randn({1, 8}), y = at::randn({1, 8});
  for (int warm = 0; warm < 3; ++warm) {  // let the profiling executor settle
    torch::jit::Stack s{x, y};
    exec.run(s);
  }
  for (XPORT_TIMED(state)) {
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
  for (XPORT_TIMED(state)) {
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
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(interp.run(in, o));
  set_per_op(state, n);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(interp.run(in, o)); }));
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

at::Tensor mlp_eager(const mlp_weights& m, const at::Tensor& x) {
  at::Tensor h = x;
  for (int i = 0; i < mlp_layers; ++i) h = at::relu(at::linear(h, m.w[static_cast<std::size_t>(i)], m.b[static_cast<std::size_t>(i)]));
  return h;
}

void BM_mlp_eager(benchmark::State& state) {
  mlp_weights m;
  const auto x = at::randn({1, mlp_width});
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(mlp_eager(m, x));
  set_per_op(state, 2 * mlp_layers);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(mlp_eager(m, x)); }));
}

void BM_mlp_eager_nograd(benchmark::State& state) {
  c10::NoGradGuard guard;
  BM_mlp_eager(state);
}

void BM_mlp_eager_inference(benchmark::State& state) {
  c10::InferenceMode guard;
  BM_mlp_eager(state);
}

// `inference_ir`: the program through run_decompositions (t + addmm), as torch.export serves it.
void BM_mlp_xport(benchmark::State& state) {
  mlp_weights m;
  auto p = mlp_program(m);
  if (state.range(0)) p = xport::run_decompositions(p);
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{at::randn({1, mlp_width})};
  xport::run_options o;
  o.inference_mode = true;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(interp.run(in, o));
  set_per_op(state, 2 * mlp_layers);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(interp.run(in, o)); }));
}

void BM_mlp_engine(benchmark::State& state) {
  mlp_weights m;
  auto p = mlp_program(m);
  if (state.range(0)) p = xport::run_decompositions(p);
  xport::engine e(p);
  const std::vector<at::Tensor> in{at::randn({1, mlp_width})};
  benchmark::DoNotOptimize(e.run(in));
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(e.run(in));
  set_per_op(state, 2 * mlp_layers);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(e.run(in)); }) + e.plan_info(in).arena_bytes);
}

void BM_mlp_static_runtime(benchmark::State& state) {
  mlp_weights m;
  torch::jit::StaticModule sm(mlp_torchscript());
  std::vector<c10::IValue> in{at::randn({1, mlp_width})};
  for (int i = 0; i < mlp_layers; ++i) {
    in.emplace_back(m.w[static_cast<std::size_t>(i)]);
    in.emplace_back(m.b[static_cast<std::size_t>(i)]);
  }
  benchmark::DoNotOptimize(sm(in));
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(sm(in));
  set_per_op(state, 2 * mlp_layers);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(sm(in)); }));
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
  for (XPORT_TIMED(state)) {
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
  for (XPORT_TIMED(state)) {
    auto s = proto;
    torch::jit::InterpreterState(code).run(s);
    benchmark::DoNotOptimize(s);
  }
  set_per_op(state, 2 * mlp_layers);
}

// ---- workloads (c)-(e): real models, eval mode, batch 1 -----------------------------------------

struct resnet18 {
  static auto make() { return xport_models::ResNet18(); }
  static at::Tensor input() { return at::randn({1, 3, 224, 224}); }
};
struct transformer {
  static auto make() { return xport_models::Encoder(); }
  static at::Tensor input() { return at::randn({16, 1, 32}); }
};
struct lstm {
  static auto make() { return xport_models::LSTMNet(); }
  static at::Tensor input() { return at::randn({1, 32, 8}); }
};
struct inception {
  static auto make() { return xport_models::InceptionNet(); }
  static at::Tensor input() { return at::randn({1, 3, 56, 56}); }
};

template <class M>
auto eval_model() {
  torch::manual_seed(0);
  auto net = M::make();
  net->eval();
  return net;
}

// mode 0: autograd on, 1: NoGradGuard, 2: InferenceMode
template <class M>
void BM_model_eager(benchmark::State& state) {
  auto net = eval_model<M>();
  const auto x = M::input();
  std::optional<c10::NoGradGuard> no_grad;
  std::optional<c10::InferenceMode> inference;
  if (state.range(0) == 1) no_grad.emplace();
  if (state.range(0) == 2) inference.emplace();
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(net->forward(x));
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(net->forward(x)); }));
}

template <class M>
xport::exported_program model_program(bool training_ir = false) {
  auto net = eval_model<M>();
  auto p = xport::export_program(net, std::tuple{M::input()});
  if (training_ir) return p;
  return xport::run_decompositions(p);
}

void set_nodes(benchmark::State& state, const xport::exported_program& p) {
  std::size_t calls = 0;
  for (auto n : p.graph().nodes()) calls += n.is_call() ? 1 : 0;
  set_per_op(state, static_cast<int>(calls));
}

template <class M>
void BM_model_xport(benchmark::State& state) {
  const auto p = model_program<M>();
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{M::input()};
  xport::run_options o;
  o.inference_mode = true;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(interp.run(in, o));
  set_nodes(state, p);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(interp.run(in, o)); }));
}

// The LSTM's inference IR with its unrolled layers fused back (passes::fuse_lstm): range(0) == 0
// runs it on the interpreter, 1 on the engine.
void BM_lstm_fused(benchmark::State& state) {
  auto p = model_program<lstm>();
  if (!(p | xport::passes::fuse_lstm).changed) state.SkipWithError("fuse_lstm found no LSTM layer");
  const std::vector<at::Tensor> in{lstm::input()};
  if (state.range(0) == 0) {
    xport::interpreter interp(p);
    xport::run_options o;
    o.inference_mode = true;
    for (XPORT_TIMED(state)) benchmark::DoNotOptimize(interp.run(in, o));
  } else {
    xport::engine e(p);
    benchmark::DoNotOptimize(e.run(in));
    for (XPORT_TIMED(state)) benchmark::DoNotOptimize(e.run(in));
  }
  set_nodes(state, p);
}

template <class M>
void BM_model_engine(benchmark::State& state) {
  // range(1) == 1: the training IR (an eval-mode model's is functional too, and keeps fused ops
  // such as aten::lstm that the inference IR decomposes)
  const auto p = model_program<M>(state.range(1) == 1);
  xport::engine_options o;
  o.threads = static_cast<std::size_t>(std::max<std::int64_t>(state.range(0), 1));
  xport::engine e(p, o);
  const std::vector<at::Tensor> in{M::input()};
  benchmark::DoNotOptimize(e.run(in));
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(e.run(in));
  set_nodes(state, p);
  const auto info = e.plan_info(in);
  state.counters["planned"] = static_cast<double>(info.out_variant_nodes);
  if (o.threads > 1) state.counters["width"] = static_cast<double>(info.parallel_width);
  set_peak(state, allocator().peak_of([&] { benchmark::DoNotOptimize(e.run(in)); }) + info.arena_bytes);
}

// ScanRNN (tests/models.hpp): an Elman RNN as xport::scan over 64 steps of a batch of 8. Eagerly
// xport::scan is a C++ loop over the steps (mode as BM_model_eager); exported, the interpreter and
// the engine run the scan node, whose kernel calls the compiled combine graph once per step.
const at::Tensor& rnn_h0() {
  static const at::Tensor h0 = at::randn({8, 4});
  return h0;
}
const at::Tensor& rnn_xs() {
  static const at::Tensor xs = at::randn({64, 8, 3});
  return xs;
}
xport_models::ScanRNN rnn_model() {
  torch::manual_seed(0);
  xport_models::ScanRNN net;
  net->eval();
  return net;
}

void BM_scan_rnn_eager(benchmark::State& state) {
  auto net = rnn_model();
  std::optional<c10::NoGradGuard> no_grad;
  std::optional<c10::InferenceMode> inference;
  if (state.range(0) == 1) no_grad.emplace();
  if (state.range(0) == 2) inference.emplace();
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(net->forward(rnn_h0(), rnn_xs()));
}

void BM_scan_rnn_xport(benchmark::State& state) {
  const auto p = xport::export_program(rnn_model(), std::tuple{rnn_h0(), rnn_xs()});
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{rnn_h0(), rnn_xs()};
  xport::run_options o;
  o.inference_mode = true;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(interp.run(in, o));
}

void BM_scan_rnn_engine(benchmark::State& state) {
  const auto p = xport::export_program(rnn_model(), std::tuple{rnn_h0(), rnn_xs()});
  xport::engine e(p);
  const std::vector<at::Tensor> in{rnn_h0(), rnn_xs()};
  benchmark::DoNotOptimize(e.run(in));
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(e.run(in));
}

// MoE (tests/models.hpp): a gated mixture of three experts routing 256 tokens with nonzero. The
// expert batches have sizes only the data knows (u0..u2): the interpreter binds them as it runs,
// the engine runs such a program through the interpreter's code (no memory plan).
const at::Tensor& moe_tokens() {
  static const at::Tensor x = at::randn({256, 8});
  return x;
}
xport_models::MoE moe_model() {
  torch::manual_seed(0);
  xport_models::MoE net;
  net->eval();
  return net;
}

void BM_moe_eager(benchmark::State& state) {
  auto net = moe_model();
  std::optional<c10::NoGradGuard> no_grad;
  std::optional<c10::InferenceMode> inference;
  if (state.range(0) == 1) no_grad.emplace();
  if (state.range(0) == 2) inference.emplace();
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(net->forward(moe_tokens()));
}

void BM_moe_xport(benchmark::State& state) {
  const auto p = xport::export_program(moe_model(), std::tuple{moe_tokens()});
  xport::interpreter interp(p);
  const std::vector<at::Tensor> in{moe_tokens()};
  xport::run_options o;
  o.inference_mode = true;
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(interp.run(in, o));
}

void BM_moe_engine(benchmark::State& state) {
  const auto p = xport::export_program(moe_model(), std::tuple{moe_tokens()});
  xport::engine e(p);
  const std::vector<at::Tensor> in{moe_tokens()};
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(e.run(in));
}

// A custom op that writes its argument (auto_functionalized_v2 once functional) on a 4 MB
// intermediate: the interpreter clones the base (the op's value before the call stays), the
// engine writes it in place, as nothing reads it after the call (Note [Bases written in place]).
// Arg in_place: engine_options::in_place (0: the engine clones too).
void scratch_scale_add(at::Tensor& buf, const at::Tensor& x, double s) { buf.mul_(s).add_(x); }
TORCH_LIBRARY(xport_bench, m) { m.def("scale_add_(Tensor(a!) buf, Tensor x, float s) -> ()"); }
TORCH_LIBRARY_IMPL(xport_bench, CompositeExplicitAutograd, m) { m.impl("scale_add_", &scratch_scale_add); }

const at::Tensor& scratch_x() {
  static const at::Tensor x = at::randn({1 << 20});
  return x;
}

void BM_scratch_write_eager(benchmark::State& state) {
  static const auto& op = c10::Dispatcher::singleton().findSchemaOrThrow("xport_bench::scale_add_", "");
  c10::InferenceMode inference;
  for (XPORT_TIMED(state)) {
    auto h = scratch_x() * scratch_x();
    op.typed<void(at::Tensor&, const at::Tensor&, double)>().call(h, scratch_x(), 0.5);
    benchmark::DoNotOptimize(h.sum());
  }
}

void BM_scratch_write_engine(benchmark::State& state) {
  using L = xport::argument::list_type;
  xport::program_builder b;
  auto x = b.input("x", scratch_x());
  auto m = b.call("aten::mul.Tensor", {x, x});
  const auto call = b.call_bound(xport::find_op("higher_order::auto_functionalized_v2"),
                                 {"xport_bench::scale_add_", L{L{"x", x}, L{"s", 0.5}, L{"_buf_base_index", 0}, L{"_all_bases", L{m}}}});
  b.output(b.call("aten::sum", {call.output(1)}));
  const auto p = std::move(b).build();
  xport::engine_options o;
  o.in_place = state.range(0) == 1;
  xport::engine e(p, o);
  const std::vector<at::Tensor> in{scratch_x()};
  benchmark::DoNotOptimize(e.run(in));
  for (XPORT_TIMED(state)) benchmark::DoNotOptimize(e.run(in));
}

}  // namespace

BENCHMARK(BM_chain_eager)->Arg(1000);
BENCHMARK(BM_chain_eager_nograd)->Arg(1000);
BENCHMARK(BM_chain_eager_inference)->Arg(1000);
BENCHMARK(BM_chain_torchscript_executor)->Arg(1000);
BENCHMARK(BM_chain_torchscript_interpreter)->Arg(1000);
BENCHMARK(BM_chain_static_runtime)->Arg(1000);
BENCHMARK(BM_chain_xport)->Arg(1000);
BENCHMARK(BM_chain_xport_inference)->Arg(1000);
BENCHMARK(BM_chain_engine)->Arg(1000);
BENCHMARK(BM_mlp_eager);
BENCHMARK(BM_mlp_eager_nograd);
BENCHMARK(BM_mlp_eager_inference);
BENCHMARK(BM_mlp_torchscript_executor);
BENCHMARK(BM_mlp_torchscript_interpreter);
BENCHMARK(BM_mlp_static_runtime);
BENCHMARK(BM_mlp_xport)->ArgName("inference_ir")->Arg(0)->Arg(1);
BENCHMARK(BM_mlp_engine)->ArgName("inference_ir")->Arg(0)->Arg(1);
BENCHMARK(BM_model_eager<resnet18>)->Name("BM_resnet18_eager")->ArgName("mode")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_model_xport<resnet18>)->Name("BM_resnet18_xport")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_model_engine<resnet18>)->Name("BM_resnet18_engine")->ArgNames({"threads", "training_ir"})->Args({1, 0})->Args({2, 0})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_model_eager<transformer>)->Name("BM_transformer_eager")->ArgName("mode")->Arg(0)->Arg(1)->Arg(2);
BENCHMARK(BM_model_xport<transformer>)->Name("BM_transformer_xport");
BENCHMARK(BM_model_engine<transformer>)->Name("BM_transformer_engine")->ArgNames({"threads", "training_ir"})->Args({1, 0});
BENCHMARK(BM_model_eager<lstm>)->Name("BM_lstm_eager")->ArgName("mode")->Arg(0)->Arg(1)->Arg(2);
BENCHMARK(BM_model_xport<lstm>)->Name("BM_lstm_xport");
BENCHMARK(BM_model_engine<lstm>)->Name("BM_lstm_engine")->ArgNames({"threads", "training_ir"})->Args({1, 0})->Args({1, 1});
BENCHMARK(BM_lstm_fused)->ArgName("engine")->Arg(0)->Arg(1);
BENCHMARK(BM_scan_rnn_eager)->ArgName("mode")->Arg(0)->Arg(1)->Arg(2);
BENCHMARK(BM_scan_rnn_xport);
BENCHMARK(BM_scan_rnn_engine);
BENCHMARK(BM_moe_eager)->ArgName("mode")->Arg(0)->Arg(1)->Arg(2);
BENCHMARK(BM_moe_xport);
BENCHMARK(BM_moe_engine);
BENCHMARK(BM_scratch_write_eager);
BENCHMARK(BM_scratch_write_engine)->ArgName("in_place")->Arg(0)->Arg(1);
BENCHMARK(BM_model_eager<inception>)->Name("BM_inception_eager")->ArgName("mode")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_model_xport<inception>)->Name("BM_inception_xport")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_model_engine<inception>)->Name("BM_inception_engine")->ArgNames({"threads", "training_ir"})->Args({1, 0})->Args({2, 0})->Unit(benchmark::kMillisecond)->UseRealTime();

// XPORT_BENCH_PEAK=1: measure peak_kB too. It is a run of its own: with the counting allocator in
// place the program-running variants get slower on ResNet-18 (seen here, not explained), so the
// times of that run are not comparable.
int main(int argc, char** argv) {
  if (const char* peak = std::getenv("XPORT_BENCH_PEAK"); peak && std::string(peak) == "1") allocator().install();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
