// Text generation per token: one decode call of a transformers static-cache archive (input_ids
// [1, 1], cache_position [1]: what examples/generate.cpp calls per token) with the interpreter
// and the engine, on the archives bench/compare_generate.py exports (a tiny llama at cache
// lengths 64 and 4096, in the training IR and the ATen IR) into XPORT_BENCH_LLM_DIR. That script
// times Python's ep.module() and the unexported model on the same archives and prints the
// ratios; run alone, this binary skips what the directory lacks. tools/icount.py --bench
// build/bench/bench_generate counts its instructions (set XPORT_BENCH_LLM_DIR).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <ATen/ATen.h>

#include <xport/engine.hpp>
#include <xport/xport.hpp>

#include "icount.hpp"

namespace {

std::string archive(const std::string& name) {
  const char* dir = std::getenv("XPORT_BENCH_LLM_DIR");
  const auto path = std::filesystem::path(dir ? dir : "") / (name + ".pt2");
  return dir && std::filesystem::exists(path) ? path.string() : std::string();
}

/// One token a call, cache positions 5, 6, ... wrapping before the cache's end (the time of a
/// call does not depend on what the cache holds).
void decode(benchmark::State& state, const std::string& name, bool engine) {
  const auto path = archive(name);
  if (path.empty()) {
    state.SkipWithError("no archive: run bench/compare_generate.py (or set XPORT_BENCH_LLM_DIR)");
    return;
  }
  auto p = xport::load(path);
  std::optional<xport::engine> e;
  if (engine) e.emplace(p);
  const std::int64_t cache = name.find("4096") != std::string::npos ? 4096 : 64;
  std::int64_t pos = 5;
  for (XPORT_TIMED(state)) {
    const auto ids = at::tensor({std::int64_t{3}}, at::kLong).view({1, 1});
    const auto at_pos = at::tensor({pos}, at::kLong);
    auto out = e ? e->run({ids, at_pos}) : xport::run(p, {ids, at_pos});
    benchmark::DoNotOptimize(out);
    pos = pos + 1 < cache ? pos + 1 : 5;
  }
  state.SetLabel(name);
}

}  // namespace

#define XPORT_BENCH_DECODE(NAME)                                                                   \
  BENCHMARK_CAPTURE(decode, NAME##_interpreter, #NAME, false)->Unit(benchmark::kMicrosecond);  \
  BENCHMARK_CAPTURE(decode, NAME##_engine, #NAME, true)->Unit(benchmark::kMicrosecond);
XPORT_BENCH_DECODE(llama_64)
XPORT_BENCH_DECODE(llama_4096)
XPORT_BENCH_DECODE(llama_64_aten)
XPORT_BENCH_DECODE(llama_4096_aten)

BENCHMARK_MAIN();
