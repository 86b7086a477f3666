// xport/run/interpreter.hpp: running an exported program through the LibTorch dispatcher.
// The program is compiled once (run/compiled.hpp: a flat instruction list, one register per
// value, each value moved into its last use). Running checks the inputs against the program's
// guards, then makes one boxed call per instruction; the dispatcher picks the kernel (CPU or
// CUDA) from the tensors, and autograd records when parameters require grad.
// An interpreter is immutable after construction: any number of threads may run it at once.
#pragma once

#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint32_t
#include <memory>         // std::shared_ptr
#include <mutex>          // std::lock_guard
#include <optional>       // std::optional
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <xport/config.hpp>
#include <xport/ops/call.hpp>
#include <xport/ops/op_sets.hpp>
#include <xport/ops/schema.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/unbacked.hpp>
#include <xport/run/compiled.hpp>
#include <xport/run/guards.hpp>

XPORT_BEGIN_NAMESPACE

struct run_options {
  /// Check inputs against the program's guards before running (count, dtype, device, shape).
  bool check_inputs = true;
  /// Run under c10::InferenceMode: no autograd recording, ~0.2 us less per op. Results are
  /// inference tensors.
  bool inference_mode = false;
};

class interpreter {
 public:
  explicit interpreter(const exported_program& p) : guards_(p), code_(p) {}

  /// Runs on the user inputs (the tensor ones, in signature order: a specialized constant input
  /// is no argument here, its value is the program's); returns the user outputs. Buffer and
  /// input mutations the program returns are written back (into the program's state, and into
  /// the given input tensors) as eager would have done in place.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, const run_options& opts = {}) const {
    sym_env env = opts.check_inputs ? guards_.check_and_bind(inputs) : guards_.bind(inputs);
    std::optional<c10::InferenceMode> inference;
    if (opts.inference_mode) inference.emplace();
    std::vector<at::Tensor> relaid;
    return code_.deliver(code_.execute(code_.in_exported_layout(inputs, relaid), std::move(env)), inputs);
  }

  /// Runs and returns every graph output (mutations included) as IValues, without guards or
  /// write-back: the graph as a pure function of (lifted state, user inputs).
  std::vector<c10::IValue> run_all(const std::vector<at::Tensor>& inputs) const {
    std::vector<at::Tensor> relaid;
    return code_.execute(code_.in_exported_layout(inputs, relaid), guards_.bind(inputs));
  }

  [[nodiscard]] std::size_t num_instructions() const noexcept { return code_.code.size(); }
  /// Whether a call gives a symbol at run time (Note [Unbacked symbols]).
  [[nodiscard]] bool binds_unbacked() const noexcept { return code_.binds_unbacked(); }
  [[nodiscard]] const input_guards& guards() const noexcept { return guards_; }
  /// The compiled code this interpreter runs (what the engine plans over).
  [[nodiscard]] const compiled_program& compiled() const noexcept { return code_; }

 private:
  input_guards guards_;
  compiled_program code_;
};

namespace detail {

// Note [Subgraphs as capsules]: a control-flow node's subgraph argument reaches its kernel
// (ops/higher_order.hpp, cond_kernel) as a constant: a capsule holding the subgraph compiled once into an
// interpreter of its own, run without guards (the operands are what the calling program made).
// The interpreter and the engine push it like any other constant, so a cond runs, records
// autograd and plans memory around it as any call does.
class compiled_subgraph final : public subgraph_fn {
 public:
  explicit compiled_subgraph(const subgraph& s) : program_(subgraph_program(s)), code_(program_) {}

  [[nodiscard]] std::vector<at::Tensor> call(std::vector<at::Tensor> operands) const override {
    const auto outs = code_.run_all(operands);
    std::vector<at::Tensor> r;
    r.reserve(outs.size());
    for (const auto& o : outs) r.push_back(o.isTensor() ? o.toTensor() : at::Tensor());
    return r;
  }

 private:
  exported_program program_;
  interpreter code_;
};

inline c10::IValue compile_subgraph(const subgraph& s) {
  return c10::IValue::make_capsule(c10::make_intrusive<compiled_subgraph>(s));
}
inline const bool subgraph_compiler_installed = (subgraph_compiler = &compile_subgraph, true);

struct interpreter_cache : run_cache {
  explicit interpreter_cache(const exported_program& p) : interp(p) {}
  interpreter interp;
};
}  // namespace detail

/// The program's interpreter, compiled on first use and cached until the program is mutated.
inline std::shared_ptr<const interpreter> interpreter_for(const exported_program& p) {
  if (auto c = p.run_cache_get()) return {c, &static_cast<detail::interpreter_cache*>(c.get())->interp};
  std::lock_guard<std::mutex> lock(p.run_cache_mutex());
  if (auto c = p.run_cache_get()) return {c, &static_cast<detail::interpreter_cache*>(c.get())->interp};
  auto c = std::make_shared<detail::interpreter_cache>(p);
  p.run_cache_set(c);
  return {c, &c->interp};
}

/// Runs `p` on its user inputs and returns its user outputs (see interpreter::run).
inline std::vector<at::Tensor> run(const exported_program& p, const std::vector<at::Tensor>& inputs,
                                   const run_options& opts = {}) {
  return interpreter_for(p)->run(inputs, opts);
}

XPORT_END_NAMESPACE
