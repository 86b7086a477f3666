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

#include <algorithm>    // std::min, std::max, std::sort
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
#include <xport/detail/names.hpp>
#include <xport/detail/sha256.hpp>
#include <xport/error.hpp>
#include <xport/ir/program.hpp>
#include <xport/trace/capture.hpp>
#include <xport/trace/dynamic.hpp>
#include <xport/trace/strict.hpp>
#include <xport/trace/symbolic.hpp>
#include <xport/trace/tree.hpp>
#include <xport/trace/unbacked.hpp>
#include <xport/ir/unbacked.hpp>

namespace torch::nn {
class Module;  // xport::call finds a submodule by its address (torch/nn/module.h defines it)
}  // namespace torch::nn

XPORT_BEGIN_NAMESPACE

/// Tracing policy: ordinary at::Tensor code and torch::nn modules run on fake (meta) tensors
/// while the dispatcher records each op (torch.export's non-strict mode).
struct non_strict {};

struct export_options {
  /// Names of the positional arguments (`x`, `y`); nested tensors get `x_0`, `x_key` suffixes.
  /// By default one argument is `x` and several are `args_0`, `args_1`, ...
  std::vector<std::string> input_names = {};
  /// Keep the example inputs in the program (exported_program::example_inputs()).
  bool keep_example_inputs = true;
  /// Which input dimensions are dynamic (trace/dynamic.hpp): `{{"x", {{0, batch}}}}`.
  xport::dynamic_shapes dynamic_shapes = {};
  /// Submodules (FQNs, `{"layers.0", "encoder"}`) whose call boundary the program keeps, as
  /// torch.export's preserve_module_call_signature: their call signatures go into the archive's
  /// module_call_graph, where torch's unflatten (and xport's) rebuild them as modules of their
  /// own. C++ cannot see a call of `forward()`: the forward calls each of them through
  /// `xport::call(submodule, args...)` (Note [Preserved module calls]).
  std::vector<std::string> preserve_module_call_signature = {};
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

/// The input treespec (a tuple of the arguments, named), the example tensors and their names.
template <class... Args>
treespec describe_inputs(const std::tuple<Args...>& args, const export_options& opts,
                         std::vector<at::Tensor>& examples, std::vector<std::string>& names) {
  constexpr std::size_t n = sizeof...(Args);
  if (!opts.input_names.empty() && opts.input_names.size() != n)
    throw export_error("xport.export.input_names",
                       "export_options::input_names has " + std::to_string(opts.input_names.size()) +
                           " name(s) but the program takes " + std::to_string(n) + " argument(s)");
  treespec in_spec = treespec::of(treespec::kind::tuple);
  std::size_t k = 0;
  std::apply(
      [&](const auto&... a) {
        ((in_spec.children.push_back(flatten(a, examples)),
          in_spec.keys.push_back(opts.input_names.empty() ? default_input_name(k, n) : opts.input_names[k]),
          leaf_names(in_spec.children.back(), in_spec.keys.back(), names), ++k),
         ...);
      },
      args);
  for (const auto& t : examples)
    if (!t.defined()) throw export_error("xport.export.undefined_input", "an example input is an undefined tensor");
  return in_spec;
}

/// A specialized constant input: a placeholder, as torch.export makes one for every input, that
/// the graph does not read (the calls were specialized to its value, which the spec keeps).
inline void add_constant_input(capture& cap, const std::string& name, const argument& v) {
  for (int k = 0;; ++k) {  // a taken name gets a suffix, as tensor inputs' do
    const std::string n = k ? name + "_" + std::to_string(k) : name;
    try {
      (void)cap.builder().placeholder(input_spec{input_kind::user_input, argument_spec::constant_value(n, v), {}, {}},
                                      value_type{value_kind::none, {}, {}});
      return;
    } catch (const graph_error&) {
      if (k >= 64) throw;
    }
  }
}

/// One placeholder per leaf of the inputs, in torch.export's order: `tensor(i, name)` makes the
/// i-th tensor input, constant leaves become constant inputs.
template <class Tensor>
void add_inputs(capture& cap, const treespec& in_spec, Tensor&& tensor) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < in_spec.children.size(); ++i) leaf_names(in_spec.children[i], in_spec.keys[i], names, true);
  std::size_t leaf = 0, t = 0;
  const auto visit = [&](const auto& self, const treespec& s) -> void {
    if (s.type == treespec::kind::leaf) tensor(t++, names[leaf++]);
    else if (s.type == treespec::kind::constant) add_constant_input(cap, names[leaf++], s.value);
    else
      for (const auto& c : s.children) self(self, c);
  };
  visit(visit, in_spec);
}

/// Finishes a capture: outputs (graph values of the result's leaves), build, call spec.
inline exported_program finish(capture& cap, std::vector<value> outs, treespec in_spec, treespec out_spec,
                               const export_options& opts) {
  // torch.export returns a None (an undefined at::Tensor, an empty std::optional) as an output
  // of its own: a leaf of the output spec, `None` in the graph's return, `: USER_OUTPUT`
  std::size_t next = 0;
  const auto visit = [&](const auto& self, treespec& s) -> void {
    if (s.type == treespec::kind::leaf) {
      cap.builder().output(outs.at(next++));
    } else if (s.type == treespec::kind::none) {
      // the spec keeps the value, as a loaded program's does (see serde's with_constants)
      cap.builder().output_arg(argument(none), output_kind::user_output);
      s = treespec::constant(none);
    } else {
      for (auto& c : s.children) self(self, c);
    }
  };
  visit(visit, out_spec);
  join_module_runs(cap);
  // Every call was bound by the dispatcher (non-strict) or by bind_arguments (strict): the
  // structural and signature checks run, the per-argument schema checks need not.
  exported_program p = std::move(cap.builder()).build(ir_dialect::training, verify_options{.check_schemas = false});
  p.set_call_spec(std::move(in_spec), std::move(out_spec));
  if (!opts.keep_example_inputs) p.set_example_inputs(std::nullopt);
  for (const auto& [fqn, sig] : cap.modules().calls()) p.set_module_call_signature(fqn, sig);
  return p;
}

/// One side of a preserved call (Note [Preserved module calls]): `x`'s structure, its constant
/// leaves made leaves as torch's pytree has them, and one argument per leaf (the graph value of a
/// tensor, a constant's value).
template <class T>
treespec boundary_of(capture& cap, const T& x, std::vector<argument_spec>& args) {
  std::vector<at::Tensor> leaves;
  auto spec = flatten(x, leaves);
  std::size_t k = 0;
  const auto walk = [&](const auto& self, treespec& t) -> void {
    if (t.type == treespec::kind::leaf) {
      args.push_back(argument_spec::tensor(cap.value_of(leaves[k++]).name()));
    } else if (t.type == treespec::kind::constant) {
      args.push_back(argument_spec::constant_value("", t.value));
      t = treespec::leaf();
    } else {
      for (auto& c : t.children) self(self, c);
    }
  };
  walk(walk, spec);
  return spec;
}

/// Each FQN of preserve_module_call_signature is a submodule the forward called through xport::call.
inline void check_preserved(const module_call_tracker& modules, const std::vector<std::string>& known,
                            const std::vector<std::string>& preserve) {
  for (const auto& fqn : preserve) {
    if (std::find(known.begin(), known.end(), fqn) == known.end())
      throw export_error("xport.export.preserve", "preserve_module_call_signature: the module has no submodule '" + fqn +
                                                      "'; its submodules are " + quoted_list(known));
    if (!modules.calls().count(fqn))
      throw export_error("xport.export.preserve",
                         "preserve_module_call_signature: submodule '" + fqn + "' was not called through xport::call, "
                         "so export did not see its boundary (C++ has no hook on forward()). Call it as "
                         "xport::call(" + fqn + ", args...) in the forward, where it is called now");
  }
}

template <class Call, class... Args>
exported_program trace_strict(Call&& call, const std::tuple<Args...>& args, const export_options& opts,
                              capture& cap) {
  std::vector<at::Tensor> examples;
  std::vector<std::string> names;
  auto in_spec = describe_inputs(args, opts, examples, names);
  if (!examples.empty()) cap.set_fake_device(examples.front().device());
  cap.keep_value_meta();
  std::vector<value> inputs;
  add_inputs(cap, in_spec, [&](std::size_t i, const std::string& name) { inputs.push_back(cap.add_input_value(name, examples[i])); });
  std::size_t leaf = 0;
  auto make = [&](const at::Tensor&) { return sym_tensor(inputs[leaf++], &cap); };
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
  std::vector<at::Tensor> metas;
  add_inputs(cap, in_spec, [&](std::size_t i, const std::string& name) { metas.push_back(cap.add_input(name, examples[i])); });
  std::size_t leaf = 0;
  auto to_meta = [&](const at::Tensor&) { return metas[leaf++]; };
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

[[noreturn]] inline void throw_specialized(const dyn_plan& plan, const dim_specialized& s) {
  if (s.root < 0) {
    std::vector<std::string> names;
    for (const auto& r : plan.roots) names.push_back(r.dim_name);
    throw_constraints_violated(std::move(names), "The dynamic dims cannot all be kept: " + s.why + ".");
  }
  const auto& r = plan.roots[static_cast<std::size_t>(s.root)];
  throw_constraints_violated({r.dim_name},
                             "You marked " + r.dim_name + " as dynamic but your code specialized it to be a constant (" +
                                 std::to_string(r.hint) + "): " + s.why + ".",
                             {r.named ? r.dim_name + " = " + std::to_string(r.hint)
                                      : "use Dim::static_ (or Dim::automatic) for " + r.where + " instead of Dim::dynamic"});
}

inline void drop_root(dyn_plan& plan, int root) {
  plan.roots.erase(plan.roots.begin() + root);
  for (auto& leaf : plan.leaves)
    for (auto& d : leaf) {
      if (d.root == root) d = dyn_dim{};
      else if (d.root > root) --d.root;
    }
}

/// `from` becomes `into` (a hinted dim the code needs equal to another).
inline void merge_roots(dyn_plan& plan, int from, int into) {
  for (auto& leaf : plan.leaves)
    for (auto& d : leaf)
      if (d.root == from) d.root = into;
  auto& a = plan.roots[static_cast<std::size_t>(into)];
  const auto& b = plan.roots[static_cast<std::size_t>(from)];
  a.min = std::max(a.min, b.min);
  a.max = std::min(a.max, b.max);
  plan.roots.erase(plan.roots.begin() + from);
  for (auto& leaf : plan.leaves)
    for (auto& d : leaf)
      if (d.root > from) --d.root;
}

/// Captures at the ends of every dim's range the other captures did not reach (its min and
/// min + 1, its max when finite): where they record the same ops, they join the captures the
/// sizes are fitted to (so a form that only fits the middle of the range is caught); where they
/// fail or record other ops, the part of the range that works is found by bisection and
/// reported as dim_narrowed.
template <class AttemptAt>
void probe_ranges(AttemptAt& attempt_at, const exported_program& base, const dyn_plan& plan, sym_runs& runs,
                  std::vector<exported_program>& others) {
  const std::size_t k = plan.roots.size();
  for (std::size_t j = 0; j < k; ++j) {
    const auto& r = plan.roots[j];
    std::int64_t tried_lo = int_oo, tried_hi = 0;
    for (const auto& v : runs.values) {
      tried_lo = std::min(tried_lo, v[j]);
      tried_hi = std::max(tried_hi, v[j]);
    }
    auto at = [&](std::int64_t v) {
      auto values = runs.values[0];
      values[j] = v;
      return values;
    };
    auto why_not = [&](std::int64_t v, std::optional<exported_program>* keep) -> std::string {
      try {
        auto probe = attempt_at(at(v));
        auto why = structure_difference(base, probe);
        if (why.empty() && keep) keep->emplace(std::move(probe));
        if (!why.empty() && structure_difference(base, probe, /*layout_only=*/true).empty()) return {};
        return why;
      } catch (const std::exception& e) {
        return "export fails: " + first_line(e.what());
      }
    };
    auto probe = [&](std::int64_t v, std::int64_t good) {
      std::optional<exported_program> kept;
      auto why = why_not(v, &kept);
      if (why.empty()) {
        if (kept) {  // the same ops: the sizes there must fit too
          runs.values.push_back(at(v));
          runs.moved.push_back(static_cast<int>(j));
          others.push_back(std::move(*kept));
        }
        return;
      }
      std::int64_t bad = v;  // bisect for the last size that works, between bad and good
      while (good - bad > 1 || bad - good > 1) {
        const auto mid = bad + (good - bad) / 2;
        (why_not(mid, nullptr).empty() ? good : bad) = mid;
      }
      throw dim_narrowed{static_cast<int>(j), bad < good ? good : r.min, bad < good ? r.max : good, v, why};
    };
    for (const auto v : {r.min, r.min + 1})
      if (v < tried_lo && v <= r.max) probe(v, tried_lo);
    if (r.max != int_oo && r.max > tried_hi) probe(r.max, tried_hi);
  }
}

/// Thrown inside a dynamic export when a capture with another row count of a data-dependent call
/// fails or records other ops: the code decides something on the count (Note [Unbacked sizes in
/// a capture]).
struct unbacked_decided {
  std::string why;
};

/// What a capture that gave data-dependent values threw, when it is not xport's own error: the
/// traced code checked such a value (LibTorch 1.13's embedding_bag checks offsets[0].item() == 0),
/// which it sees as the value the capture made up (Note [Unbacked sizes in a capture]).
[[noreturn]] inline void throw_data_check_failed(const std::exception& e) {
  throw graph_break("xport.export.graph_break",
                    "graph break: the traced code failed on a value only the data knows (an item(), a nonzero's "
                    "row count: export gives it a made-up value): " + first_line(e.what()) +
                    ". Code that checks tensor contents cannot be exported; export the computation without the "
                    "check, or make the value an input of the program");
}

/// `f()`, a capture under unbacked scope `rows`: an exception not xport's, from a capture that
/// gave data-dependent values, becomes throw_data_check_failed's graph break.
template <class F>
auto capture_checked(const unbacked_scope& rows, F&& f) {
  try {
    return f();
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    if (rows.given() == 0) throw;
    throw_data_check_failed(e);
  }
}

/// Captures with each row count of a data-dependent call at 0, 1, 2 and a large count: the
/// traced code must record the same ops (else it decides on the count: unbacked_decided); the
/// captures at 2 and at the large count join the fit (a size that follows the count only part
/// of the way, a slice's clamp, fails to fit instead of being wrong for other counts).
template <class AttemptAt>
void probe_unbacked(AttemptAt& attempt_at, const exported_program& base, std::size_t k, sym_runs& runs,
                    std::vector<exported_program>& others, const std::vector<value_range>& facts) {
  for (std::size_t j = k; j < runs.symbols.size(); ++j)
    for (const std::int64_t v : {0, 1, 2, 61, -3}) {
      const auto& fact = facts[j - k];
      if (!fact.contains(v) || v == runs.values[0][j]) continue;
      auto values = runs.values[0];
      values[j] = v;
      std::string why;
      try {
        auto probe = attempt_at(values);
        why = structure_difference(base, probe);
        if (why.empty() && (v >= 2 || v < 0)) {
          runs.values.push_back(values);
          runs.moved.push_back(static_cast<int>(j));
          others.push_back(std::move(probe));
        }
        if (!why.empty() && structure_difference(base, probe, /*layout_only=*/true).empty()) why.clear();
      } catch (const std::exception& e) {
        // a shape rule that cannot take 0 or 1 rows on meta tensors (index_add's) decides nothing
        if (v >= 2 || v < 0) why = "export fails: " + first_line(e.what());
      }
      if (!why.empty())
        throw unbacked_decided{"with " + runs.dim_names[j] + " = " + std::to_string(v) + " instead of " +
                               std::to_string(runs.values[0][j]) + ", " + why};
    }
}

/// The name torch's ShapeEnv gives the symbol of a dynamic dim first seen at `source`
/// (`L['x'].size()[0]` -> `s77`): `s` + sha256(source) mod 100, the next free number on a clash.
inline std::string torch_symbol_name(const std::string& source, const std::vector<std::string>& taken) {
  auto id = sha256_mod(source, 100);
  while (std::find(taken.begin(), taken.end(), "s" + std::to_string(id)) != taken.end()) ++id;
  return "s" + std::to_string(id);
}

/// The data-dependent calls of `base`: the op that gives each unbacked symbol, in order.
inline std::vector<std::string> unbacked_ops(const exported_program& base) {
  std::vector<std::string> ops;
  std::unordered_set<std::string> seen;
  for (auto n : base.graph().nodes())
    if (n.is_call()) for_each_unbacked_given(n, seen, [&](const value&, std::int64_t, const std::string&, const sym_int&) {
        ops.push_back(n.op().qualified + " ('" + n.name() + "')");
      });
  return ops;
}

/// Gives each unbacked symbol of `base` its range, as torch's runtime assertions bound it: what
/// xport::check_range said of it (`facts`, by call), and for a row count [0, the element count of
/// what its call reads]; adds it to the range constraints.
inline void range_unbacked(exported_program& base, const std::vector<value_range>& facts) {
  std::unordered_set<std::string> seen;
  std::vector<std::pair<std::string, sym_int>> ranged;  // in the order the calls give them
  for (auto n : base.graph().nodes()) {
    if (!n.is_call()) continue;
    for_each_unbacked_given(n, seen, [&](const value&, std::int64_t, const std::string& symbol, const sym_int& e) {
      const auto j = static_cast<std::size_t>(std::stoll(symbol.substr(1)));
      auto r = j < facts.size() ? facts[j] : value_range{-int_oo, int_oo};
      if (n.op().name != "aten::item") {
        const auto& read = n.op().name == "aten::index" ? n.args()[1].as_list()[0].as_value() : n.input(0);
        sym_int numel = 1;
        for (const auto& d : read.meta().sizes) numel = numel * d;
        r.lo = std::max<std::int64_t>(r.lo, 0);
        r.hi = std::min(r.hi, sym::range(numel).hi);
      }
      ranged.emplace_back(symbol, sym::symbol(symbol, std::clamp(e.hint(), r.lo, r.hi), r));
    });
  }
  substitute_sizes(base.graph_mut(), [&](const sym_int& e) {
    return sym::substitute(e, [&](std::string_view name) -> std::optional<sym_int> {
      for (const auto& [s, u] : ranged)
        if (s == name) return u;
      return std::nullopt;
    });
  });
  for (const auto& [name, u] : ranged) {
    const auto r = sym::range(u);
    base.range_constraints_mut().push_back({u, r.lo, r.hi == int_oo ? std::nullopt : std::optional<std::int64_t>(r.hi), "", {}});
  }
  auto& rc = base.range_constraints_mut();
  std::stable_sort(rc.begin(), rc.end(), [](const range_constraint& a, const range_constraint& b) {
    return sym::is_unbacked(a.symbol.str()) && !sym::is_unbacked(b.symbol.str());  // u's first, as torch lists them
  });
}

/// The captures of runs 1.. of `runs` (k dims, then n_unbacked row counts, each moved alone; then
/// all moved): a capture that fails reports the dim (or the row count) it moved.
template <class AttemptAt>
std::vector<exported_program> capture_moved(AttemptAt& attempt_at, const sym_runs& runs, std::size_t k, std::size_t n_unbacked) {
  std::vector<exported_program> others;
  others.reserve(runs.values.size());
  for (std::size_t r = 1; r < runs.values.size(); ++r) {
    const int root = r <= k ? static_cast<int>(r - 1) : -1;
    std::string failure;
    try {
      others.push_back(attempt_at(runs.values[r]));
    } catch (const std::exception& e) {
      failure = first_line(e.what());
    }
    if (failure.empty()) continue;
    if (r > k && r <= k + n_unbacked)
      throw unbacked_decided{"with " + assignment_text(runs.dim_names, runs.values[r], static_cast<int>(r - 1)) + " instead of " +
                             std::to_string(runs.values[0][r - 1]) + " export fails: " + failure};
    // moved alone it fails: does it work moved together with another dim of the same size?
    for (std::size_t i = 0; root >= 0 && i < k; ++i) {
      if (static_cast<int>(i) == root || runs.values[0][i] != runs.values[0][static_cast<std::size_t>(root)]) continue;
      auto both = runs.values[0];
      both[i] = both[static_cast<std::size_t>(root)] = runs.values[r][static_cast<std::size_t>(root)];
      bool works = false;
      try {
        (void)attempt_at(both);
        works = true;
      } catch (const std::exception&) {
      }
      if (works) throw dims_related{root, static_cast<int>(i), failure};
    }
    throw dim_specialized{root, "with " + assignment_text(runs.dim_names, runs.values[r], root) + " instead of the example's " +
                                    assignment_text(runs.dim_names, runs.values[0], root) + " export fails: " + failure};
  }
  return others;
}

/// The sizes of the inputs `examples` in the dims `symbols` of `plan`.
inline std::vector<sym_shape> symbolic_input_sizes(const dyn_plan& plan, const std::vector<at::Tensor>& examples,
                                                   const std::vector<sym_int>& symbols) {
  std::vector<sym_shape> inputs;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    sym_shape sizes;
    for (std::size_t d = 0; d < static_cast<std::size_t>(examples[i].dim()); ++d) {
      const auto& dd = plan.leaves[i][d];
      sizes.push_back(dd.root < 0 ? sym_int(examples[i].size(static_cast<std::int64_t>(d)))
                                  : symbols[static_cast<std::size_t>(dd.root)] * dd.a + dd.b);
    }
    inputs.push_back(std::move(sizes));
  }
  return inputs;
}

template <class Attempt>
exported_program dynamic_attempt(Attempt& attempt, const dyn_plan& plan, const std::vector<at::Tensor>& examples) {
  const std::size_t k = plan.roots.size();
  std::vector<sym_int> symbols;
  std::vector<std::string> names;
  std::vector<std::int64_t> mins, maxs;
  std::vector<std::string> symbol_names;
  for (const auto& r : plan.roots) symbol_names.push_back(torch_symbol_name(r.source, symbol_names));
  for (std::size_t i = 0; i < k; ++i) {
    const auto& r = plan.roots[i];
    symbols.push_back(sym::symbol(symbol_names[i], r.hint, value_range{r.min, r.max}));
    names.push_back(r.dim_name);
    mins.push_back(r.min);
    maxs.push_back(r.max);
  }
  // a capture at the values of the dims (and of the row counts that follow them)
  auto attempt_at = [&](const std::vector<std::int64_t>& values) {
    unbacked_scope rows(std::vector<std::int64_t>(values.begin() + static_cast<std::ptrdiff_t>(std::min(k, values.size())), values.end()));
    return capture_checked(rows, [&] { return attempt(input_sizes_at(plan, examples, values)); });
  };
  std::size_t n_unbacked = 0;
  std::vector<value_range> facts;  // what xport::check_range said of each data-dependent value
  exported_program base = [&] {
    unbacked_scope rows({});
    auto b = capture_checked(rows, [&] { return attempt({}); });
    n_unbacked = rows.given();
    facts = rows.facts();
    return b;
  }();
  if (k == 0 && n_unbacked == 0) return base;
  std::vector<std::int64_t> at_facts;  // the dims' hints, then each value within its facts
  for (const auto& sym : symbols) at_facts.push_back(sym.hint());
  for (std::size_t j = 0; j < n_unbacked; ++j)
    at_facts.push_back(std::clamp(unbacked_plan::default_value(j), facts[j].lo, facts[j].hi));
  for (std::size_t j = 0; j < n_unbacked; ++j)
    if (at_facts[k + j] != unbacked_plan::default_value(j)) {  // the base broke a fact: captured again within them
      base = attempt_at(at_facts);
      break;
    }
  const auto ops = unbacked_ops(base);
  for (std::size_t j = 0; j < n_unbacked; ++j) {
    symbols.push_back(sym::symbol("u" + std::to_string(j), at_facts[k + j], facts[j]));
    names.push_back(j < ops.size() ? "the value of " + ops[j] : "u" + std::to_string(j));
    mins.push_back(facts[j].lo);
    maxs.push_back(facts[j].hi);
  }
  auto runs = make_runs(symbols, names, mins, maxs);
  auto others = capture_moved(attempt_at, runs, k, n_unbacked);
  {
    std::vector<const exported_program*> ptrs;
    for (const auto& o : others) ptrs.push_back(&o);
    require_same_ops(base, ptrs, runs);  // before probing the range ends: another path is no narrowing
  }
  probe_ranges(attempt_at, base, plan, runs, others);
  probe_unbacked(attempt_at, base, k, runs, others, facts);
  std::vector<const exported_program*> ptrs;
  for (const auto& o : others) ptrs.push_back(&o);
  try {
    make_symbolic(base, ptrs, runs, symbolic_input_sizes(plan, examples, symbols));
  } catch (const dim_specialized& s) {
    if (k == 0) throw unbacked_decided{s.why};  // only row counts vary: they are what the code decided on
    throw;
  }
  auto& rc = base.range_constraints_mut();
  rc.clear();
  for (std::size_t i = 0; i < k; ++i) {
    const auto& r = plan.roots[i];
    rc.push_back({symbols[i], r.min, r.max == int_oo ? std::nullopt : std::optional<std::int64_t>(r.max), r.dim_name, {}});
  }
  if (n_unbacked) range_unbacked(base, facts);
  return base;
}

/// A dynamic export (Note [Capturing at several sizes] in trace/symbolic.hpp).
template <class Attempt, class... Args>
exported_program export_dynamic(Attempt& attempt, const std::tuple<Args...>& args, const export_options& opts) {
  std::vector<at::Tensor> examples;
  std::vector<std::string> names;
  auto in_spec = describe_inputs(args, opts, examples, names);
  std::vector<std::string> arg_names;
  for (std::size_t i = 0; i < sizeof...(Args); ++i)
    arg_names.push_back(opts.input_names.empty() ? default_input_name(i, sizeof...(Args)) : opts.input_names[i]);
  dyn_plan plan;  // no dynamic_shapes: static dims (a capture with data-dependent calls comes here)
  if (!opts.dynamic_shapes.empty()) plan = dyn_resolver(examples, names).resolve(opts.dynamic_shapes, in_spec, arg_names);
  for (std::size_t i = plan.leaves.size(); i < examples.size(); ++i)
    plan.leaves.emplace_back(static_cast<std::size_t>(examples[i].dim()));
  for (;;) {
    try {
      return dynamic_attempt(attempt, plan, examples);
    } catch (const unbacked_decided& u) {
      throw graph_break("xport.export.graph_break",
                        "graph break: the traced code decides something on the number of rows a data-dependent call "
                        "gives (nonzero, masked_select, a boolean-mask index), or on an item() (values only the data "
                        "knows, torch's unbacked SymInts): " + u.why + ". Way out: write the code so that it does the "
                        "same for every value (0 rows included: empty tensors flow through ATen ops), state the range "
                        "it relies on with xport::check_range(v, min, max) (torch._check), or keep the shape with a "
                        "mask (at::where(mask, x, 0))");
    } catch (const dim_specialized& s) {
      if (s.root >= static_cast<int>(plan.roots.size()))
        throw graph_break("xport.export.graph_break",
                          "graph break: the traced code decides something on the number of rows a data-dependent "
                          "call gives (torch's unbacked SymInt): " + s.why);
      if (s.root >= 0 && plan.roots[static_cast<std::size_t>(s.root)].automatic) {
        drop_root(plan, s.root);  // Dim::automatic: static after all
        continue;
      }
      throw_specialized(plan, s);
    } catch (const dims_related& s) {
      // a: the earlier dim, b: the later one, which the fix defines as a
      const auto& a = plan.roots[static_cast<std::size_t>(std::min(s.root, s.other))];
      const auto& b = plan.roots[static_cast<std::size_t>(std::max(s.root, s.other))];
      if (!a.named || !b.named) {  // a hint takes the relation: one dim
        const int ia = std::min(s.root, s.other), ib = std::max(s.root, s.other);
        merge_roots(plan, a.named ? ib : ia, a.named ? ia : ib);
        continue;
      }
      throw_constraints_violated({a.dim_name, b.dim_name},
                                 "The values of " + b.dim_name + " = " + b.where + " and " + a.dim_name + " = " + a.where +
                                     " must always be equal (moved alone, " + s.why + ").",
                                 {b.dim_name + " = " + a.dim_name});
    } catch (const dim_narrowed& s) {
      auto& r = plan.roots[static_cast<std::size_t>(s.root)];
      if (!r.named) {  // bounds of a hint are hints: take the range that works
        r.min = s.lo;
        r.max = s.hi;
        continue;
      }
      const Dim fixed(r.dim_name, s.lo, s.hi == int_oo ? std::nullopt : std::optional<std::int64_t>(s.hi));
      const auto range = std::to_string(r.min) + " <= " + r.dim_name + (r.max == int_oo ? "" : " <= " + std::to_string(r.max));
      const auto guard = s.bad < s.lo ? std::to_string(s.lo) + " <= " + r.where : r.where + " <= " + std::to_string(s.hi);
      throw_constraints_violated({r.dim_name},
                                 "Not all values of " + r.dim_name + " = " + r.where + " in the specified range " + range +
                                     " satisfy the generated guard " + guard + ": with " + r.dim_name + " = " +
                                     std::to_string(s.bad) + ", " + s.why + ".",
                                 {r.dim_name + " = " + fixed.str()});
    }
  }
}

}  // namespace detail

/// Calls submodule `m`'s forward with `args`, as `m(args...)` does, and lets export see the call,
/// which C++ gives no hook for (Python's export sees every `module(...)`): the nodes the call
/// records belong to `m` (their nn_module_stack, by which torch's unflatten nests modules), and
/// where export_options::preserve_module_call_signature names it, its call boundary is kept (Note
/// [Preserved module calls]). Outside export, or for a module export does not know, it is the call.
template <class M, class... A>
decltype(auto) call(M&& m, A&&... args) {
  auto& impl = detail::module_impl(m);
  using R = decltype(impl.forward(std::forward<A>(args)...));
  detail::capture* cap = detail::active_capture;
  const std::string* known = cap ? cap->modules().fqn_of(static_cast<const torch::nn::Module*>(&impl)) : nullptr;
  if (!known) return impl.forward(std::forward<A>(args)...);
  const std::string fqn = *known;
  auto& modules = cap->modules();
  constexpr bool tree = (detail::is_tree_type<std::remove_cvref_t<A>>() && ...) && detail::is_tree_type<std::remove_cvref_t<R>>();
  const bool preserve = modules.preserves(fqn);
  if (preserve && (!tree || cap != &cap->root()))
    throw export_error("xport.export.preserve",
                       "preserve_module_call_signature: submodule '" + fqn + "' is called " +
                           (tree ? "inside a subgraph (a cond, while_loop, map or scan body), whose values are not the "
                                   "program's: preserve a module called at the top level"
                                 : "with arguments or a result that are not pytrees of tensors and constants: preserve a "
                                   "module whose forward takes and returns those"));
  struct scope_t {
    detail::module_call_tracker& t;
    ~scope_t() { t.leave(); }
  };
  module_call_signature sig;
  if constexpr (tree) {
    if (preserve) {
      treespec args_spec = treespec::of(treespec::kind::tuple);
      (args_spec.children.push_back(detail::boundary_of(*cap, args, sig.inputs)), ...);
      sig.in_spec = treespec::of(treespec::kind::tuple, {std::move(args_spec), treespec::of(treespec::kind::dict)});
    }
  }
  modules.enter(fqn);
  const scope_t scope{modules};
  if constexpr (std::is_void_v<R>) {
    impl.forward(std::forward<A>(args)...);
  } else {
    R out = impl.forward(std::forward<A>(args)...);
    if constexpr (tree) {
      if (preserve) {
        sig.out_spec = detail::boundary_of(*cap, out, sig.outputs);
        modules.add(fqn, std::move(sig));
      }
    }
    return out;
  }
}

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
  auto attempt = [&](std::vector<std::vector<std::int64_t>> sizes) -> exported_program {
    detail::capture cap;
    cap.set_user_code(true);
    cap.set_input_sizes(std::move(sizes));
    cap.set_sizes_may_vary(!opts.dynamic_shapes.empty());
    if constexpr (!inputs_ok) {
      std::abort();  // unreachable: the static_assert above is the one error
    } else if constexpr (std::is_same_v<Policy, strict>) {
      static_assert(!detail::module_like<std::remove_reference_t<F>>,
                    "xport::export_program<xport::strict>: torch::nn modules run on at::Tensor; export "
                    "them with the non_strict policy, or write the forward against xport::sym_tensor");
      return detail::trace_strict(f, args, opts, cap);
    } else if constexpr (detail::module_like<std::remove_reference_t<F>>) {
      auto& m = detail::module_impl(f);
      for (const auto& item : m.named_parameters(true)) cap.add_state(input_kind::parameter, item.key(), item.value());
      for (const auto& item : m.named_buffers(true)) cap.add_state(input_kind::buffer, item.key(), item.value());
      std::unordered_map<const void*, std::string> fqns;
      std::vector<std::string> known;
      std::set<std::string> containers;
      for (const auto& item : m.named_modules("", /*include_self=*/false)) {
        if constexpr (requires { item.value().get(); })  // (a TorchScript module's view lists no torch::nn modules)
          fqns.emplace(static_cast<const torch::nn::Module*>(item.value().get()), item.key());
        if (detail::is_module_container(item.value()->name())) containers.insert(item.key());
        known.push_back(item.key());
      }
      cap.modules().set_modules(std::move(fqns),
                                {opts.preserve_module_call_signature.begin(), opts.preserve_module_call_signature.end()},
                                std::move(containers));
      auto p = detail::trace_non_strict([&](auto&&... a) { return m.forward(std::forward<decltype(a)>(a)...); },
                                        args, opts, cap);
      detail::check_preserved(cap.modules(), known, opts.preserve_module_call_signature);
      std::vector<std::pair<std::string, std::string>> types{{"", m.name()}};
      for (const auto& item : m.named_modules("", /*include_self=*/false)) types.emplace_back(item.key(), item.value()->name());
      p.set_module_types(std::move(types));
      return p;
    } else {
      return detail::trace_non_strict(f, args, opts, cap);
    }
  };
  if (opts.dynamic_shapes.empty()) {
    detail::unbacked_scope rows({});  // Note [Unbacked sizes in a capture]: captured again when the code calls any
    auto p = detail::capture_checked(rows, [&] { return attempt({}); });
    if (rows.given() == 0) return p;
  }
  if constexpr (inputs_ok) return detail::export_dynamic(attempt, args, opts);
  else std::abort();
}

XPORT_END_NAMESPACE
