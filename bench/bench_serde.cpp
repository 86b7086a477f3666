// Saving and loading big weights: xport::save / xport::load of a program with ~200 MB of
// parameters, against plain fwrite / fread of the same bytes and torch::jit::save / jit::load of
// a module holding the same tensors, all in one run. Counters: `bytes_per_second` (weights
// only) and `peak_extra_MB`, the growth of the process's peak resident set during one call
// (reset through /proc/self/clear_refs before it), to show that saving streams from the tensors
// and loading reads straight into their storage.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <torch/script.h>
#include <torch/torch.h>

#include <xport/xport.hpp>

namespace {

constexpr int kLayers = 4;
constexpr std::int64_t kIn = 4096, kOut = 3200;  // 4 x 52.4 MB of f32 = 210 MB

const std::string& dir() {
  static const std::string d = [] {
    const char* t = std::getenv("XPORT_BENCH_DIR");
    return std::string(t ? t : "/tmp");
  }();
  return d;
}

xport::exported_program& program() {
  static xport::exported_program p = [] {
    torch::manual_seed(0);
    xport::program_builder b;
    auto x = b.input("x", at::randn({1, kIn}));
    for (int i = 0; i < kLayers; ++i) {
      auto w = b.parameter("layers." + std::to_string(i) + ".weight", at::randn({kOut, kIn}));
      b.output(b.call("aten::mm", {x, b.call("aten::t", {w})}));
    }
    return std::move(b).build();
  }();
  return p;
}

std::int64_t weight_bytes() {
  std::int64_t n = 0;
  for (const auto& [k, t] : program().state_dict()) n += static_cast<std::int64_t>(t.nbytes());
  return n;
}

long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::string(key).size()));
  return 0;
}
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

/// Runs f once between a peak reset and a peak read: the MB the peak grew above the RSS before.
template <class F>
double peak_extra_mb(F&& f) {
  reset_peak();
  const long before = status_kb("VmRSS:");
  f();
  return static_cast<double>(status_kb("VmHWM:") - before) / 1024.0;
}

void finish(benchmark::State& s, double peak) {
  s.SetBytesProcessed(s.iterations() * weight_bytes());
  s.counters["peak_extra_MB"] = peak;
}

void BM_save_xport(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.pt2";
  double peak = 0;
  for (auto _ : s) peak = peak_extra_mb([&] { xport::save(program(), path); });
  finish(s, peak);
}

void BM_save_fwrite(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.raw";
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      std::FILE* f = std::fopen(path.c_str(), "wb");
      std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
      for (const auto& [k, t] : program().state_dict()) std::fwrite(t.data_ptr(), 1, t.nbytes(), f);
      std::fclose(f);
    });
  finish(s, peak);
}

torch::jit::Module jit_module() {
  torch::jit::Module m("m");
  for (const auto& [k, t] : program().state_dict()) {
    std::string name = k;
    for (auto& c : name)
      if (c == '.') c = '_';
    m.register_parameter(name, t, false);
  }
  return m;
}

void BM_save_jit(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.pt";
  auto m = jit_module();
  double peak = 0;
  for (auto _ : s) peak = peak_extra_mb([&] { m.save(path); });
  finish(s, peak);
}

void BM_load_xport(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.pt2";
  xport::save(program(), path);
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      auto p = xport::load(path);
      benchmark::DoNotOptimize(p.state_dict().size());
    });
  finish(s, peak);
}

void BM_load_fread(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.raw";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    for (const auto& [k, t] : program().state_dict()) std::fwrite(t.data_ptr(), 1, t.nbytes(), f);
    std::fclose(f);
  }
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      std::FILE* f = std::fopen(path.c_str(), "rb");
      std::vector<at::Tensor> ts;
      for (const auto& [k, t] : program().state_dict()) {
        auto u = at::empty_like(t);
        benchmark::DoNotOptimize(std::fread(u.data_ptr(), 1, u.nbytes(), f));
        ts.push_back(std::move(u));
      }
      std::fclose(f);
    });
  finish(s, peak);
}

void BM_load_jit(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.pt";
  jit_module().save(path);
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      auto m = torch::jit::load(path);
      benchmark::DoNotOptimize(m.parameters().size());
    });
  finish(s, peak);
}

}  // namespace

BENCHMARK(BM_save_fwrite)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_save_xport)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_save_jit)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_load_fread)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_load_xport)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_load_jit)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
