// bench/icount.hpp: instruction counts of the benchmarks' timed loops, for a machine too noisy for
// wall time (and a VM whose `perf` has no hardware counters). Under valgrind's callgrind started
// with --instr-atstart=no, each `for (XPORT_TIMED(state))` loop turns collection on for its own
// iterations only (setup, exports and first runs stay out), and the process reports, at exit, how
// many iterations ran in all; tools/icount.py divides the collected instructions by that.
// Without valgrind's headers, or outside valgrind, the loop is a plain `for (auto _ : state)`.
#pragma once

#include <cstdio>

#include <benchmark/benchmark.h>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define XPORT_BENCH_CALLGRIND 1
#else
#define XPORT_BENCH_CALLGRIND 0
#endif

namespace xport_bench {

// Collects a loop's instructions (from its start to the end of its last iteration).
class timed_scope {
 public:
  explicit timed_scope(benchmark::State& state) : state_(state) {
#if XPORT_BENCH_CALLGRIND
    CALLGRIND_ZERO_STATS;
    CALLGRIND_START_INSTRUMENTATION;
#endif
  }
  ~timed_scope() {  // (a loop that was cut short by SkipWithError dumps its iterations too)
#if XPORT_BENCH_CALLGRIND
    CALLGRIND_STOP_INSTRUMENTATION;
    char name[64];
    std::snprintf(name, sizeof name, "xport-timed-iterations %lld", static_cast<long long>(state_.iterations()));
    CALLGRIND_DUMP_STATS_AT(name);
#endif
  }
  timed_scope(const timed_scope&) = delete;
  timed_scope& operator=(const timed_scope&) = delete;

 private:
  [[maybe_unused]] benchmark::State& state_;  // (read only under callgrind)
};

}  // namespace xport_bench

// `for (XPORT_TIMED(state)) body;`: the benchmark loop, its instructions collected under callgrind.
#define XPORT_TIMED(state) xport_bench::timed_scope xport_timed_scope_(state); auto _ : state
