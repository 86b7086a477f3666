// xport against torch.export in Python, the C++ half: export of ResNet-18 (batch 1, 224x224)
// and of a Transformer encoder layer (d_model 512, 8 heads, feed-forward 2048, sequence 128,
// batch 1); load of a .pt2 plus the first run; and the run time of the inference IR beside
// eager LibTorch (NoGradGuard). bench/compare_torch_export.py runs this binary and the Python
// peers (torch.export.export of the twins, torch.export.load + ep.module()) in one go and
// prints the ratios; XPORT_BENCH_PT2_DIR names the archives for the load benchmarks.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include <torch/torch.h>

#include <xport/xport.hpp>

#include "../tests/models.hpp"

namespace {

namespace nn = torch::nn;

// The encoder layer at a realistic size (tests/models.hpp has a small one).
struct BigEncoderImpl : nn::Module {
  nn::TransformerEncoderLayer layer{
      nn::TransformerEncoderLayerOptions(512, 8).dim_feedforward(2048).dropout(0.1).activation(torch::kGELU)};
  BigEncoderImpl() { register_module("layer", layer); }
  torch::Tensor forward(torch::Tensor x) { return layer(x); }
};
TORCH_MODULE(BigEncoder);

template <class M>
M make_eval() {
  torch::manual_seed(0);
  M m;
  m->eval();
  return m;
}
at::Tensor resnet_input() { return at::randn({1, 3, 224, 224}); }
at::Tensor encoder_input() { return at::randn({128, 1, 512}); }

template <class M>
void export_model(benchmark::State& state, at::Tensor (*input)()) {
  auto m = make_eval<M>();
  const auto x = input();
  for (auto _ : state) benchmark::DoNotOptimize(xport::export_program(m, std::tuple{x}));
}
void BM_export_resnet18_xport(benchmark::State& s) { export_model<xport_models::ResNet18>(s, resnet_input); }
void BM_export_encoder_xport(benchmark::State& s) { export_model<BigEncoder>(s, encoder_input); }

template <class M>
void run_xport(benchmark::State& state, at::Tensor (*input)()) {
  auto m = make_eval<M>();
  const auto x = input();
  const auto p = xport::run_decompositions(xport::export_program(m, std::tuple{x}));
  c10::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(xport::run(p, {x}));
}
template <class M>
void run_eager(benchmark::State& state, at::Tensor (*input)()) {
  auto m = make_eval<M>();
  const auto x = input();
  c10::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(m->forward(x));
}
void BM_run_resnet18_xport(benchmark::State& s) { run_xport<xport_models::ResNet18>(s, resnet_input); }
void BM_run_resnet18_eager(benchmark::State& s) { run_eager<xport_models::ResNet18>(s, resnet_input); }
void BM_run_encoder_xport(benchmark::State& s) { run_xport<BigEncoder>(s, encoder_input); }
void BM_run_encoder_eager(benchmark::State& s) { run_eager<BigEncoder>(s, encoder_input); }

// xport::load + the first run of an archive torch.export.save wrote (XPORT_BENCH_PT2_DIR)
void load_first_run(benchmark::State& state, const char* name, at::Tensor (*input)()) {
  const char* dir = std::getenv("XPORT_BENCH_PT2_DIR");
  const auto path = std::filesystem::path(dir ? dir : "") / name;
  if (!dir || !std::filesystem::exists(path)) {
    state.SkipWithError("XPORT_BENCH_PT2_DIR has no archive for this benchmark (bench/compare_torch_export.py writes them)");
    return;
  }
  const auto x = input();
  c10::NoGradGuard no_grad;
  for (auto _ : state) {
    auto p = xport::load(path.string());
    benchmark::DoNotOptimize(xport::run(p, {x}));
  }
}
void BM_load_first_run_resnet18_xport(benchmark::State& s) { load_first_run(s, "resnet18.pt2", resnet_input); }
void BM_load_first_run_encoder_xport(benchmark::State& s) { load_first_run(s, "encoder.pt2", encoder_input); }

}  // namespace

BENCHMARK(BM_export_resnet18_xport)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_export_encoder_xport)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_load_first_run_resnet18_xport)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_load_first_run_encoder_xport)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_run_resnet18_eager)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_run_resnet18_xport)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_run_encoder_eager)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_run_encoder_xport)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
