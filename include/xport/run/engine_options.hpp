// xport/run/engine_options.hpp: how an engine runs (run/engine.hpp), in a header of its own so
// that <xport/compiled.hpp> gives it to TUs that do not parse the engine.
#pragma once

#include <cstddef>  // std::size_t

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE

struct engine_options {
  /// Check inputs against the program's guards before running (count, dtype, device, shape).
  bool check_inputs = true;
  /// Write the results of ops with an out= kernel into a per-signature arena reused across runs.
  bool plan_memory = true;
  /// Run a functional op in place on its first argument when nothing else uses that result.
  bool in_place = true;
  /// Call each node's kernel with the dispatch key set its plan resolved (no key computation).
  bool resolve_dispatch = true;
  /// Input signatures whose plans are kept (the least recently used goes first).
  std::size_t max_plans = 4;
  /// Threads that run a planned run's independent nodes at once, the caller's included (1: one
  /// node after the other). Each takes LibTorch's intra-op thread count, so set OMP_NUM_THREADS
  /// (or at::set_num_threads) low enough that the two kinds together fit the cores.
  std::size_t threads = 1;
  /// Capture each plan's run into a CUDA graph on its second run (the first planned one is the
  /// warm-up) and replay it on later runs of that input signature: one launch for the whole
  /// program. Inputs are copied into the graph's static inputs, outputs copied out of its static
  /// outputs (a result the caller keeps is never overwritten by the next replay). Needs
  /// <xport/cuda_graphs.hpp> (a CUDA build of LibTorch); where a plan cannot be captured (no
  /// backend, a CPU input or op, parallel branches, a host sync) it runs as it would without,
  /// and plan_info().graph_fallback says why.
  bool cuda_graphs = false;
};

XPORT_END_NAMESPACE
