// xport/run/callable.hpp: an exported program called with the C++ types it was exported with.
// Inputs are flattened (trace/tree.hpp) and checked against the program's input structure,
// run by the interpreter, and the outputs rebuilt into the declared result type.
#pragma once

#include <cstddef>  // std::size_t
#include <utility>  // std::move
#include <vector>   // std::vector

#include <ATen/core/Tensor.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/treespec.hpp>
#include <xport/run/interpreter.hpp>
#include <xport/trace/tree.hpp>

XPORT_BEGIN_NAMESPACE

/// An exported program called with the C++ types it was exported with:
///   xport::callable<at::Tensor(at::Tensor, std::vector<at::Tensor>)> f(program);
/// Inputs are flattened and checked against the program's input structure (constants included;
/// keyword arguments of a program torch wrote come last, by position), outputs rebuilt into R:
/// the same C++ types, a registered dataclass (by field name), or xport::tree_value (any
/// structure, a ModelOutput's fields by name).
template <class Sig>
class callable;

template <class R, class... Args>
class callable<R(Args...)> {
 public:
  explicit callable(const exported_program& p) : program_(&p) {
    if (!p.in_spec() || !p.out_spec())
      throw error("xport.callable.no_spec",
                  "this program has no input/output structure (it was not made by export_program); "
                  "run it with xport::run on flat tensors instead");
  }

  R operator()(const Args&... args) const {
    std::vector<at::Tensor> leaves;
    treespec got = treespec::of(treespec::kind::tuple);
    (got.children.push_back(flatten(args, leaves)), ...);
    const auto& want = *program_->in_spec();
    // C++ passes keyword arguments (of a program torch wrote) by position; named as the program names them
    got.num_kwargs = want.num_kwargs;
    got.keys = want.keys;
    if (!got.same_structure(want))
      throw guard_error("xport.guard.structure",
                        "the inputs have structure " + got.str() + " but the program was exported with " +
                            want.str() + " (containers, None and specialized constants must match)");
    auto outs = run(*program_, leaves, opts_);
    // constant outputs (None, a loaded program's numbers) are in the out_spec itself
    const auto& specs = program_->signature().output_specs;
    std::size_t u = 0, kept = 0;
    for (const auto& s : specs) {
      if (s.kind != output_kind::user_output && s.kind != output_kind::loss_output) continue;
      if (s.arg.type != argument_spec::kind::constant && u < outs.size()) outs[kept++] = std::move(outs[u]);
      ++u;
    }
    if (u == outs.size()) outs.resize(kept);
    return unflatten<R>(*program_->out_spec(), outs);
  }

  /// Options for every call (guards, inference mode).
  callable& with(run_options o) {
    opts_ = o;
    return *this;
  }

 private:
  const exported_program* program_;
  run_options opts_;
};

XPORT_END_NAMESPACE
