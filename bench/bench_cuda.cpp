// bench/bench_cuda.cpp: the engine on CUDA, at the batch size of an inference server (1) and of a
// batch job (32), against eager LibTorch C++ under NoGradGuard in the same run:
//   variant 0: eager C++ (NoGradGuard)      variant 1: the interpreter (InferenceMode)
//   variant 2: the engine                   variant 3: the engine with CUDA graphs
// on a GPT-2 block (768 wide, 12 heads, 64 tokens), ResNet-18 (224 x 224), a Transformer encoder
// layer (512 wide, 8 heads, 128 tokens) and a dense mixture of experts (every expert runs on every
// token, weighted by the gate: no data-dependent size). Every iteration ends with a device
// synchronize, so the figures are end-to-end latencies. Without a GPU each case skips itself.
// tools/gpu-check.sh runs it on a lent GPU:
//   build-gpu/bench/bench_cuda --benchmark_min_time=0.2
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <xport/engine.hpp>
#if defined(XPORT_BENCH_CUDA_GRAPHS)
#include <xport/cuda_graphs.hpp>
#endif

#include "../tests/models.hpp"

namespace {

namespace nn = torch::nn;

// GPT-2's block (pre-LayerNorm causal self-attention and a GELU MLP), at GPT-2 small's width.
struct GPT2BlockImpl : nn::Module {
  static constexpr std::int64_t width = 768, heads = 12;
  nn::LayerNorm ln1{nn::LayerNormOptions({width})}, ln2{nn::LayerNormOptions({width})};
  nn::Linear qkv{width, 3 * width}, proj{width, width}, fc{width, 4 * width}, out{4 * width, width};
  GPT2BlockImpl() {
    register_module("ln1", ln1);
    register_module("qkv", qkv);
    register_module("proj", proj);
    register_module("ln2", ln2);
    register_module("fc", fc);
    register_module("out", out);
  }
  torch::Tensor forward(torch::Tensor x) {
    const auto b = x.size(0), t = x.size(1);
    auto parts = qkv(ln1(x)).view({b, t, 3, heads, width / heads}).permute({2, 0, 3, 1, 4});
    auto att = torch::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(width / heads));
    auto mask = torch::ones({t, t}, x.options().dtype(torch::kBool)).tril();
    att = torch::softmax(att.masked_fill(mask.logical_not(), -1e9), -1);
    auto y = torch::matmul(att, parts[2]).transpose(1, 2).reshape({b, t, width});
    x = x + proj(y);
    return x + out(torch::gelu(fc(ln2(x)), "tanh"));
  }
};
TORCH_MODULE(GPT2Block);

struct EncoderLayerImpl : nn::Module {
  nn::TransformerEncoderLayer layer{nn::TransformerEncoderLayerOptions(512, 8).dim_feedforward(2048).dropout(0.1)};
  EncoderLayerImpl() { register_module("layer", layer); }
  torch::Tensor forward(torch::Tensor x) { return layer(x); }
};
TORCH_MODULE(EncoderLayer);

// A dense mixture of experts: 8 GELU experts (256 -> 1024 -> 256), all run, mixed by the gate.
struct DenseMoEImpl : nn::Module {
  nn::Linear gate{256, 8};
  nn::ModuleList experts;
  DenseMoEImpl() {
    register_module("gate", gate);
    for (int i = 0; i < 8; ++i) experts->push_back(nn::Sequential(nn::Linear(256, 1024), nn::GELU(), nn::Linear(1024, 256)));
    register_module("experts", experts);
  }
  torch::Tensor forward(torch::Tensor x) {
    const auto w = torch::softmax(gate(x), -1);
    auto y = torch::zeros_like(x);
    for (std::size_t i = 0; i < experts->size(); ++i)
      y = y + experts->ptr<nn::SequentialImpl>(i)->forward(x) * w.select(-1, static_cast<std::int64_t>(i)).unsqueeze(-1);
    return y;
  }
};
TORCH_MODULE(DenseMoE);

struct gpt2_block {
  static auto make() { return GPT2Block(); }
  static at::Tensor input(std::int64_t batch) { return at::randn({batch, 64, GPT2BlockImpl::width}); }
};
struct resnet18 {
  static auto make() { return xport_models::ResNet18(); }
  static at::Tensor input(std::int64_t batch) { return at::randn({batch, 3, 224, 224}); }
};
struct encoder_layer {
  static auto make() { return EncoderLayer(); }
  static at::Tensor input(std::int64_t batch) { return at::randn({128, batch, 512}); }
};
struct dense_moe {
  static auto make() { return DenseMoE(); }
  static at::Tensor input(std::int64_t batch) { return at::randn({batch, 32, 256}); }
};

template <class W>
void BM_cuda(benchmark::State& state) {
  if (!torch::cuda::is_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const auto variant = state.range(0);
  const auto batch = state.range(1);
  const c10::Device gpu(c10::kCUDA);
  torch::manual_seed(0);
  auto net = W::make();
  net->eval();
  const auto x = W::input(batch);
  const auto xg = x.to(gpu);
  const auto sync = [] { torch::cuda::synchronize(); };
  if (variant == 0) {
    net->to(gpu);
    c10::NoGradGuard no_grad;
    for (int k = 0; k < 3; ++k) benchmark::DoNotOptimize(net->forward(xg));
    sync();
    for (auto _ : state) {
      benchmark::DoNotOptimize(net->forward(xg));
      sync();
    }
    return;
  }
  auto p = xport::run_decompositions(xport::export_program(net, std::tuple{x}));
  p.to(gpu);
  const std::vector<at::Tensor> in{xg};
  if (variant == 1) {
    const xport::interpreter interp(p);
    xport::run_options o;
    o.inference_mode = true;
    for (int k = 0; k < 3; ++k) benchmark::DoNotOptimize(interp.run(in, o));
    sync();
    for (auto _ : state) {
      benchmark::DoNotOptimize(interp.run(in, o));
      sync();
    }
    return;
  }
  xport::engine_options opts;
  opts.cuda_graphs = variant == 3;
  const xport::engine e(p, opts);
  for (int k = 0; k < 3; ++k) benchmark::DoNotOptimize(e.run(in));  // record, (capture,) replay
  sync();
  if (variant == 3 && !e.plan_info(in).graph) {
    state.SkipWithError(("no CUDA graph: " + e.plan_info(in).graph_fallback).c_str());
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(e.run(in));
    sync();
  }
}

void variants(benchmark::internal::Benchmark* b) {
  b->ArgNames({"variant", "batch"});
  for (const std::int64_t batch : {1, 32})
    for (std::int64_t v = 0; v < 4; ++v) b->Args({v, batch});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK(BM_cuda<gpt2_block>)->Name("BM_cuda_gpt2_block")->Apply(variants);
BENCHMARK(BM_cuda<resnet18>)->Name("BM_cuda_resnet18")->Apply(variants);
BENCHMARK(BM_cuda<encoder_layer>)->Name("BM_cuda_encoder_layer")->Apply(variants);
BENCHMARK(BM_cuda<dense_moe>)->Name("BM_cuda_dense_moe")->Apply(variants);

BENCHMARK_MAIN();
