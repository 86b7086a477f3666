// xport/trace/export.hpp: export_program, torch.export.export for C++ callables and modules.
//
//   auto p = xport::export_program(model, std::tuple{x});              // a torch::nn module
//   auto q = xport::export_program([](const at::Tensor& a, const at::Tensor& b) {
//     return at::sin(a) + at::cos(b);
//   }, std::tuple{x, y}, {.input_names = {"x", "y"}});
//   xport::callable<at::Tensor(at::Tensor, at::Tensor)> f(q);         // same C++ types back
//
// The result is torch.export's training IR: ATen ops as the code called them (before autograd and
// before composite ops decompose), in-place ops kept, parameters and buffers lifted to inputs
// named `p_<fqn>` / `b_<fqn>`, tensors captured from outside lifted as constants.
#pragma once

#include <cstdlib>      // std::abort
#include <functional>   // std::invoke
#include <memory>       // std::shared_ptr
#include <optional>     // std::optional
#include <string>       // std::string
#include <tuple>        // std::tuple, std::apply
#include <type_traits>  // std::decay_t
#include <utility>      // std::forward
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/program.hpp>
#include <xport/run/interpreter.hpp>
#include <xport/trace/capture.hpp>
#include <xport/trace/strict.hpp>
#include <xport/trace/tree.hpp>

XPORT_BEGIN_NAMESPACE

/// Tracing policy: ordinary at::Tensor code and torch::nn modules run on fake (meta) tensors
/// while the dispatcher records each op (torch.export's non-strict mode).
struct non_strict {};

struct export_options {
  /// Names of the positional arguments (`x`, `y`); nested tensors get `x_0`, `x_key` suffixes.
  /// By default one argument is `x` and several are `args_0`, `args_1`, ...
  std::vector<std::string> input_names;
  /// Keep the example inputs in the program (exported_program::example_inputs()).
  bool keep_example_inputs = true;
};

namespace detail {

// A torch::nn module: a ModuleHolder (`Linear`), a std::shared_ptr to a module, or a module.
template <class M>
decltype(auto) module_impl(M& m) {
  if constexpr (requires { m.ptr(); }) return *m.ptr();
  else if constexpr (requires { *m; m.get(); }) return *m;
  else return (m);
}

template <class M>
concept module_like = requires(M& m) {
  module_impl(m).named_parameters(true);
  module_impl(m).named_buffers(true);
};

inline std::string default_input_name(std::size_t i, std::size_t n) {
  return n == 1 ? std::string("x") : "args_" + std::to_string(i);
}

/// The input treespec (a tuple of the arguments), the example tensors and their names.
template <class... Args>
treespec describe_inputs(const std::tuple<Args...>& args, const export_options& opts,
                         std::vector<at::Tensor>& examples, std::vector<std::string>& names) {
  constexpr std::size_t n = sizeof...(Args);
  if (!opts.input_names.empty() && opts.input_names.size() != n)
    throw export_error("xport.export.input_names",
                       "export_options::input_names has " + std::to_string(opts.input_names.size()) +
                           " name(s) but the program takes " + std::to_string(n) + " argument(s)");
  treespec in_spec{treespec::kind::tuple, {}, {}, {}};
  std::size_t k = 0;
  std::apply(
      [&](const auto&... a) {
        ((in_spec.children.push_back(flatten(a, examples)),
          leaf_names(in_spec.children.back(), opts.input_names.empty() ? default_input_name(k, n) : opts.input_names[k],
                     names),
          ++k),
         ...);
      },
      args);
  for (const auto& t : examples)
    if (!t.defined()) throw export_error("xport.export.undefined_input", "an example input is an undefined tensor");
  return in_spec;
}

/// Finishes a capture: outputs (graph values of the result's leaves), build, call spec.
inline exported_program finish(capture& cap, std::vector<value> outs, treespec in_spec, treespec out_spec,
                               const export_options& opts) {
  for (auto v : outs) cap.builder().output(v);
  // Every call was bound by the dispatcher (non-strict) or by bind_arguments (strict): the
  // structural and signature checks run, the per-argument schema checks need not.
  exported_program p = std::move(cap.builder()).build(ir_dialect::training, verify_options{.check_schemas = false});
  p.set_call_spec(std::move(in_spec), std::move(out_spec));
  if (!opts.keep_example_inputs) p.set_example_inputs(std::nullopt);
  return p;
}

template <class Call, class... Args>
exported_program trace_strict(Call&& call, const std::tuple<Args...>& args, const export_options& opts,
                              capture& cap) {
  std::vector<at::Tensor> examples;
  std::vector<std::string> names;
  auto in_spec = describe_inputs(args, opts, examples, names);
  if (!examples.empty()) cap.set_fake_device(examples.front().device());
  cap.keep_value_meta();
  std::size_t leaf = 0;
  auto make = [&](const at::Tensor&) {
    const auto i = leaf++;
    return sym_tensor(cap.add_input_value(names[i], examples[i]), &cap);
  };
  auto sym_args = std::apply([&](const auto&... a) { return std::tuple{to_sym(a, make)...}; }, args);
  auto result = std::apply(call, sym_args);
  std::vector<value> outs;
  auto collect = [&](const auto& t) {
    if constexpr (std::is_same_v<std::decay_t<decltype(t)>, at::Tensor>)
      outs.push_back(cap.value_of(t));
    else
      outs.push_back(t.graph_value());
  };
  auto out_spec = flatten_into(result, collect);
  return finish(cap, std::move(outs), std::move(in_spec), std::move(out_spec), opts);
}

template <class Call, class... Args>
exported_program trace_non_strict(Call&& call, const std::tuple<Args...>& args, const export_options& opts,
                                  capture& cap) {
  std::vector<at::Tensor> examples;
  std::vector<std::string> names;
  auto in_spec = describe_inputs(args, opts, examples, names);
  if (!examples.empty()) cap.set_fake_device(examples.front().device());
  // the traced code gets meta tensors in the same structure
  std::size_t leaf = 0;
  auto to_meta = [&](const at::Tensor&) {
    const auto i = leaf++;
    return cap.add_input(names[i], examples[i]);
  };
  auto meta_args = std::apply([&](const auto&... a) { return std::tuple{map_tensors(a, to_meta)...}; }, args);

  auto result = [&] {
    capture_scope scope(cap);
    return std::apply(call, meta_args);
  }();

  std::vector<at::Tensor> leaves;
  auto out_spec = flatten(result, leaves);
  std::vector<value> outs;
  for (const auto& t : leaves) outs.push_back(cap.value_of(t));
  return finish(cap, std::move(outs), std::move(in_spec), std::move(out_spec), opts);
}

}  // namespace detail

/// Exports a C++ callable over at::Tensor, or a torch::nn module (whose forward is called with
/// `args`), into an exported_program (training IR). No real computation runs: the code sees
/// meta tensors, and the module's parameters and buffers are left exactly as they were.
template <class Policy = non_strict, class F, class... Args>
exported_program export_program(F&& f, const std::tuple<Args...>& args, const export_options& opts = {}) {
  static_assert(std::is_same_v<Policy, non_strict> || std::is_same_v<Policy, strict>,
                "xport::export_program: unknown tracing policy (use xport::non_strict or xport::strict)");
  constexpr bool inputs_ok = (detail::is_tree_type<Args>() && ...);
  static_assert(inputs_ok,
                "xport: this type cannot be an input or output of an exported program. Supported: "
                "at::Tensor; int64_t, int, double, float, bool and std::string (specialized as "
                "constants); std::optional, std::vector, std::array, std::tuple, std::pair, "
                "std::map<std::string, T> and c10::Dict<std::string, T> of supported types. The "
                "offending type is in `Args = {...}` of this instantiation, as the compiler prints it.");
  detail::capture cap;
  if constexpr (!inputs_ok) {
    std::abort();  // unreachable: the static_assert above is the one error
  } else if constexpr (std::is_same_v<Policy, strict>) {
    static_assert(!detail::module_like<std::remove_reference_t<F>>,
                  "xport::export_program<xport::strict>: torch::nn modules run on at::Tensor; export "
                  "them with the non_strict policy, or write the forward against xport::sym_tensor");
    return detail::trace_strict(std::forward<F>(f), args, opts, cap);
  } else if constexpr (detail::module_like<std::remove_reference_t<F>>) {
    auto& m = detail::module_impl(f);
    for (const auto& item : m.named_parameters(true)) cap.add_state(input_kind::parameter, item.key(), item.value());
    for (const auto& item : m.named_buffers(true)) cap.add_state(input_kind::buffer, item.key(), item.value());
    return detail::trace_non_strict([&](auto&&... a) { return m.forward(std::forward<decltype(a)>(a)...); },
                                    args, opts, cap);
  } else {
    return detail::trace_non_strict(std::forward<F>(f), args, opts, cap);
  }
}

/// An exported program called with the C++ types it was exported with:
///   xport::callable<at::Tensor(at::Tensor, std::vector<at::Tensor>)> f(program);
/// Inputs are flattened and checked against the program's input structure (constants included),
/// outputs rebuilt into R.
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
    treespec got{treespec::kind::tuple, {}, {}, {}};
    (got.children.push_back(flatten(args, leaves)), ...);
    const auto& want = *program_->in_spec();
    if (!(got == want))
      throw guard_error("xport.guard.structure",
                        "the inputs have structure " + got.str() + " but the program was exported with " +
                            want.str() + " (containers, None and specialized constants must match)");
    auto outs = run(*program_, leaves, opts_);
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
