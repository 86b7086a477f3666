// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
#pragma once

#include <xport/xport.hpp>
// xport/unflatten.hpp: torch's `torch.export.unflatten` in C++, an opt-in entry beside the
// umbrella header (it parses torch::nn): `xport::unflatten(p)` gives the program as the tree of
// modules it was exported from, whose preserved submodule calls run on their own and can be
// swapped for another program or function of the same signature (run/unflatten.hpp).
//
//   auto p = xport::export_program(net, std::tuple{x}, {.preserve_module_call_signature = {"layers.0"}});
//   auto u = xport::unflatten(p);
//   u->submodule("layers.0")->program();              // the call's own program (local state names)
//   u->set_submodule("layers.0", other_layer_program);
//   auto y = u->forward({x});

#include <xport/train.hpp>
// #include <xport/run/unflatten.hpp>
// xport/run/unflatten.hpp: an exported program as the tree of modules it was exported from,
// torch's `torch.export.unflatten` (opt-in through xport/unflatten.hpp: it parses torch::nn).
// Each submodule is a node of the tree holding its own parameters and buffers under their local
// names (the program's tensors, shared); a submodule whose call boundary was preserved
// (export_options::preserve_module_call_signature) also holds the program of its call, runs on
// its own, and can be swapped for another program or any function of the same signature, which
// the parent's forward then calls at that boundary (Note [Unflattened calls]).

#include <algorithm>      // std::find, std::sort
#include <cstddef>        // std::size_t
#include <functional>     // std::function
#include <map>            // std::map
#include <memory>         // std::shared_ptr, std::make_shared
#include <optional>       // std::optional
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/signature.hpp>
// #include <xport/run/interpreter.hpp>
// #include <xport/program/builder.hpp>
// #include <xport/run/module.hpp>

XPORT_BEGIN_NAMESPACE

// Note [Unflattened calls]
// A preserved call of submodule `m` is the part of the graph between the values its signature
// names: the nodes its outputs are computed from, back to its inputs and the state they read,
// and the nodes of m's own module path that write state (a buffer update has no other user).
// That part, cut out with the graph's own names, is m's program (`carve`). It must be closed: a
// node inside that reads a user input not among m's inputs, or a value made inside that a node
// outside reads without it being among m's outputs, is refused (`xport.unflatten.boundary`),
// since swapping m would then change what the rest computes.
// A module runs its whole program while every preserved call directly inside it is the one
// unflatten made. Once one is swapped it runs in steps (`call_plan`), in graph order: each run of
// nodes between calls is a program of its own, and each call goes to whatever module sits at
// its path now, tensors passed by name. Buffer updates the runs return are written into the
// buffers at the end, as the interpreter writes them; a call's are written by its own program.

namespace detail {

/// A part of a program to cut out as a program of its own: its call nodes (graph order), the
/// values it takes as user inputs and gives as user outputs, and the state writes it returns.
struct program_cut {
  std::vector<node> nodes;
  std::vector<value> inputs, outputs;
  std::vector<std::pair<value, output_spec>> writes;
};

/// `fqn` as seen from the module at `prefix` (`layers.0.fc1.weight` from `layers.0` is
/// `fc1.weight`); a name outside it stays whole.
inline std::string name_under(const std::string& fqn, const std::string& prefix) {
  if (prefix.empty()) return fqn;
  if (fqn == prefix) return "";
  if (fqn.size() > prefix.size() && fqn.compare(0, prefix.size(), prefix) == 0 && fqn[prefix.size()] == '.')
    return fqn.substr(prefix.size() + 1);
  return fqn;
}
inline bool is_under(const std::string& path, const std::string& prefix) {
  return prefix.empty() || path == prefix ||
         (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 && path[prefix.size()] == '.');
}

/// The input spec of each placeholder of `p`, by value.
inline std::unordered_map<value_impl*, const input_spec*> specs_by_placeholder(const exported_program& p) {
  std::unordered_map<value_impl*, const input_spec*> out;
  const auto phs = p.graph().placeholders();
  for (std::size_t i = 0; i < phs.size() && i < p.signature().input_specs.size(); ++i)
    out.emplace(phs[i].out().impl(), &p.signature().input_specs[i]);
  return out;
}

/// Copies call `n` into `g` under its names, its operands mapped through `map`.
inline void copy_call(graph& g, node n, std::unordered_map<value_impl*, value>& map, const std::string& prefix) {
  std::vector<argument> args(n.args().begin(), n.args().end());
  for (auto& a : args) a.for_each_value([&](value& v) { v = map.at(v.impl()); });
  std::vector<value_type> types;
  std::vector<std::string> names;
  for (auto o : n.outputs()) {
    types.push_back(o.type());
    names.push_back(o.name());
  }
  const node c = g.create_call_named(n.op(), std::move(args), std::move(types), n.name(), names);
  c.set_form(n.form());
  c.set_tuple_operands(n.has_tuple_operands());
  c.set_source(n.source());
  c.set_module_path(name_under(n.module_path(), prefix));
  c.copy_custom_meta_from(n);
  for (std::size_t i = 0; i < n.num_outputs(); ++i) map.emplace(n.output(i).impl(), c.output(i));
}

/// The part `cut` of `p` as a program of its own (Note [Unflattened calls]): the state its nodes
/// read (named from the module at `prefix`), then its inputs, as placeholders; its outputs as
/// user outputs, then its state writes. The tensors are `p`'s own.
inline exported_program carve(const exported_program& p, const program_cut& cut, const std::string& prefix) {
  const auto spec_of = specs_by_placeholder(p);
  std::unordered_set<value_impl*> given;
  for (auto v : cut.inputs) given.insert(v.impl());
  std::vector<value> state;  // the state placeholders the nodes read, in signature order
  std::unordered_set<value_impl*> seen;
  for (auto n : cut.nodes)
    for (auto v : n.inputs())
      if (v.producer().is_placeholder() && !given.count(v.impl()) && seen.insert(v.impl()).second) state.push_back(v);
  std::sort(state.begin(), state.end(), [](value a, value b) { return a.producer().is_before(b.producer()); });

  std::unordered_set<std::string> taken;  // the names the cut's values keep
  for (auto v : cut.inputs) taken.insert(v.name());
  for (auto n : cut.nodes) {
    taken.insert(n.name());
    for (auto o : n.outputs()) taken.insert(o.name());
  }
  graph g;
  graph_signature sig;
  tensor_dict state_dict, constants;
  std::unordered_map<value_impl*, value> map;
  for (auto v : state) {
    const auto& spec = *spec_of.at(v.impl());
    if (!spec.target || spec.kind == input_kind::token || spec.kind == input_kind::custom_obj)
      throw error("xport.unflatten.swap", "unflatten: '" + v.name() + "' (" + std::string(to_string(spec.kind)) +
                                              ") is read between preserved calls; a module whose calls are swapped "
                                              "runs in steps that read tensor state only");
    auto s = spec;
    s.target = name_under(*spec.target, prefix);
    auto& dict = spec.kind == input_kind::parameter || spec.persistent.value_or(true) ? state_dict : constants;
    if (dict.find(*s.target) != nullptr)
      throw error("xport.unflatten.state", "unflatten: module '" + prefix + "' reads state '" + *spec.target +
                                                "' from outside it, and holds state of that local name '" + *s.target +
                                                "' too. Rename one of them in the module and export again");
    dict.set(*s.target, p.lifted_tensor(spec));
    // named as export names the module's own state (`p_fc1_weight`), unless a name of the cut has it
    auto name = *s.target == *spec.target ? v.name() : lifted_name(spec.kind, *s.target);
    if (taken.count(name)) name = v.name();
    s.arg.name = name;
    map.emplace(v.impl(), g.add_placeholder(name, v.type()));
    sig.input_specs.push_back(std::move(s));
  }
  for (auto v : cut.inputs) {
    map.emplace(v.impl(), g.add_placeholder(v.name(), v.type()));
    sig.input_specs.push_back(input_spec{input_kind::user_input, argument_spec::tensor(v.name()), {}, {}});
  }
  for (auto n : cut.nodes) copy_call(g, n, map, prefix);
  std::vector<argument> results;
  for (auto v : cut.outputs) {
    results.emplace_back(map.at(v.impl()));
    sig.output_specs.push_back(output_spec{output_kind::user_output, argument_spec::tensor(v.name()), {}});
  }
  for (const auto& [v, spec] : cut.writes) {
    results.emplace_back(map.at(v.impl()));
    auto s = spec;
    if (s.target) s.target = name_under(*s.target, prefix);
    sig.output_specs.push_back(std::move(s));
  }
  g.set_output(std::move(results));
  return exported_program(std::move(g), std::move(sig), std::move(state_dict), std::move(constants),
                          p.range_constraints(), p.dialect());
}

inline std::string boundary_error(const std::string& fqn, const std::string& what, const std::string& fix) {
  return "unflatten: the preserved call of submodule '" + fqn + "' " + what + ". " + fix;
}

/// The tensor values a call signature names, in order; refuses what a call cannot pass.
inline std::vector<value> signature_values(const std::vector<argument_spec>& args,
                                           const std::unordered_map<std::string, value>& by_name,
                                           const std::string& fqn, const char* side) {
  std::vector<value> out;
  for (const auto& a : args) {
    if (a.type == argument_spec::kind::constant && std::string(side) == "input") continue;  // baked into the graph
    if (a.type != argument_spec::kind::tensor)
      throw error("xport.unflatten.boundary",
                  boundary_error(fqn, std::string("has ") + side + " '" + a.name + "' that is not a tensor",
                                 "unflatten passes tensors across a boundary; make the submodule take and return "
                                 "tensors, or do not preserve its call"));
    const auto it = by_name.find(a.name);
    if (it == by_name.end())
      throw error("xport.unflatten.boundary",
                  boundary_error(fqn, std::string("names ") + side + " '" + a.name + "', which the graph does not have",
                                 "The program was changed without carrying the boundary over; drop it with "
                                 "p.set_module_call_signature(\"" + fqn + "\", std::nullopt)"));
    out.push_back(it->second);
  }
  return out;
}

/// The part of `p` that is submodule `fqn`'s preserved call (Note [Unflattened calls]).
inline program_cut call_cut(const exported_program& p, const std::string& fqn, const module_call_signature& sig) {
  std::unordered_map<std::string, value> by_name;
  for (auto n : p.graph().nodes())
    for (auto o : n.outputs()) by_name.emplace(o.name(), o);
  program_cut cut;
  cut.inputs = signature_values(sig.inputs, by_name, fqn, "input");
  cut.outputs = signature_values(sig.outputs, by_name, fqn, "output");
  const auto spec_of = specs_by_placeholder(p);
  std::unordered_set<value_impl*> inputs, outputs;
  for (auto v : cut.inputs) inputs.insert(v.impl());
  for (auto v : cut.outputs) outputs.insert(v.impl());
  const node out = p.graph().output_node();

  std::unordered_set<node_impl*> inside;
  std::vector<value> todo(cut.outputs.begin(), cut.outputs.end());
  const auto take = [&](node n) {
    if (!inside.insert(n.impl()).second) return;
    for (auto v : n.inputs()) todo.push_back(v);
  };
  for (auto n : p.graph().nodes()) {  // its state writes: calls of its path that only the output (or nothing) reads
    if (!n.is_call() || !is_under(n.module_path(), fqn)) continue;
    bool writes = true;
    for (auto o : n.outputs())
      for (const auto& u : o.uses()) writes = writes && u.user() == out;
    if (writes) take(n);
  }
  while (!todo.empty()) {
    const value v = todo.back();
    todo.pop_back();
    if (inputs.count(v.impl())) continue;
    const node n = v.producer();
    if (n.is_call()) {
      take(n);
      continue;
    }
    const auto* spec = spec_of.at(v.impl());
    if (spec->kind == input_kind::user_input)
      throw error("xport.unflatten.boundary",
                  boundary_error(fqn, "reads the program's input '" + v.name() + "', which is not among its inputs",
                                 "Pass it to the submodule as an argument, or do not preserve its call"));
    if (spec->kind == input_kind::token || spec->kind == input_kind::custom_obj)
      throw error("xport.unflatten.boundary",
                  boundary_error(fqn, "reads '" + v.name() + "' (" + std::string(to_string(spec->kind)) + ")",
                                 "unflatten cuts calls that read tensors only; do not preserve this call"));
  }
  for (auto n : p.graph().nodes())
    if (inside.count(n.impl())) cut.nodes.push_back(n);

  // closed: what the rest reads of it is among its outputs; the output node may also take its state writes
  const auto& specs = p.signature().output_specs;
  const auto results = out.args();
  for (std::size_t i = 0; i < results.size() && i < specs.size(); ++i) {
    if (!results[i].is_value() || !inside.count(results[i].as_value().producer().impl())) continue;
    const auto kind = specs[i].kind;
    if (kind == output_kind::buffer_mutation || kind == output_kind::parameter_mutation)
      cut.writes.emplace_back(results[i].as_value(), specs[i]);
    else if (kind != output_kind::user_output || !outputs.count(results[i].as_value().impl()))
      throw error("xport.unflatten.boundary",
                  boundary_error(fqn, "makes '" + results[i].as_value().name() + "', which the program returns (" +
                                          std::string(to_string(kind)) + ") but the call does not",
                                 "Return it from the submodule, or do not preserve its call"));
  }
  for (auto n : cut.nodes)
    for (auto o : n.outputs())
      for (const auto& u : o.uses())
        if (u.user() != out && !inside.count(u.user().impl()) && !outputs.count(o.impl()))
          throw error("xport.unflatten.boundary",
                      boundary_error(fqn, "makes '" + o.name() + "', which '" + u.user().name() +
                                              "' outside it reads, but does not return it",
                                     "Return it from the submodule, or do not preserve its call"));
  return cut;
}

/// The preserved calls directly inside the module at `prefix` (none of the others encloses them).
inline std::vector<std::string> direct_calls(const std::map<std::string, module_call_signature>& sigs,
                                             const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& [fqn, sig] : sigs) {
    if (fqn == prefix || !is_under(fqn, prefix)) continue;
    bool nested = false;
    for (const auto& [other, s] : sigs)
      nested = nested || (other != fqn && other != prefix && is_under(other, prefix) && is_under(fqn, other));
    if (!nested) out.push_back(fqn);
  }
  return out;
}

}  // namespace detail

class unflattened_module;

namespace detail {
struct unflatten_builder;

/// A module's program run in steps around the preserved calls directly inside it (Note
/// [Unflattened calls]): runs of other nodes as programs, and calls by path.
struct call_plan {
  struct step {
    std::string call;                  // the path of a preserved call, or "" for a run of nodes
    std::optional<exported_program> run;  // the run's program
    std::vector<std::string> inputs, outputs;  // value names
  };
  std::vector<step> steps;
  std::vector<std::string> user_inputs;  // the program's tensor user inputs, by placeholder name
  std::vector<std::string> results;      // what the program returns (user outputs)
  std::vector<std::pair<std::string, at::Tensor>> writes;  // value -> the tensor it is written into
};

/// Makes the call_plan of `p` around `calls` (the cut of each preserved call directly inside).
class call_planner {
 public:
  call_planner(const exported_program& p, const std::vector<std::pair<std::string, program_cut>>& calls)
      : p_(p), calls_(calls), spec_of_(specs_by_placeholder(p)), out_(p.graph().output_node()) {
    for (std::size_t i = 0; i < calls.size(); ++i)
      for (auto n : calls[i].second.nodes) call_of_.emplace(n.impl(), i);
  }

  call_plan plan() {
    take_inputs();
    order();
    for (std::size_t i = 0; i < plan_.steps.size(); ++i)
      if (!runs_[i].empty()) wire_run(i);
    take_results();
    return std::move(plan_);
  }

 private:
  static error refuse(const std::string& what) {
    return error("xport.unflatten.swap", "unflatten: " + what +
                                             "; a module whose preserved calls are swapped runs in steps that pass "
                                             "tensors between them");
  }

  void take_inputs() {
    for (auto ph : p_.graph().placeholders()) {
      if (spec_of_.at(ph.out().impl())->kind != input_kind::user_input) continue;
      if (ph.out().kind() != value_kind::tensor) throw refuse("input '" + ph.name() + "' of the program is not a tensor");
      plan_.user_inputs.push_back(ph.name());
    }
  }

  // The steps in graph order: a call where its first node is, runs of the other nodes between.
  void order() {
    std::vector<bool> emitted(calls_.size(), false);
    std::vector<std::size_t> call_step(calls_.size(), 0);
    for (auto n : p_.graph().nodes()) {
      if (!n.is_call()) continue;
      const auto c = call_of_.find(n.impl());
      if (c == call_of_.end()) {
        if (plan_.steps.empty() || runs_.back().empty()) add_step({});
        runs_.back().push_back(n);
        step_of_.emplace(n.impl(), plan_.steps.size() - 1);
        continue;
      }
      if (emitted[c->second]) {
        step_of_.emplace(n.impl(), call_step[c->second]);
        continue;
      }
      emitted[c->second] = true;
      call_step[c->second] = plan_.steps.size();
      step_of_.emplace(n.impl(), plan_.steps.size());
      const auto& [fqn, cut] = calls_[c->second];
      call_plan::step s{fqn, std::nullopt, {}, {}};
      for (auto v : cut.inputs) {
        if (!v.producer().is_placeholder() && !step_of_.count(v.producer().impl()))
          throw error("xport.unflatten.order", "unflatten: input '" + v.name() + "' of the preserved call of '" + fqn +
                                                   "' is made after the call begins in the graph, so the call cannot "
                                                   "run as one step; do not swap this call");
        s.inputs.push_back(v.name());
      }
      for (auto v : cut.outputs) s.outputs.push_back(v.name());
      add_step(std::move(s));
    }
  }
  void add_step(call_plan::step s) {
    plan_.steps.push_back(std::move(s));
    runs_.emplace_back();
  }
  // The step a call node runs in (a call's nodes all run in the call's step).
  [[nodiscard]] std::size_t step_of(node n) const { return step_of_.at(n.impl()); }

  // Run i takes what it reads from other steps (and the user inputs), gives what others read.
  void wire_run(std::size_t i) {
    program_cut cut;
    cut.nodes = runs_[i];
    std::unordered_set<value_impl*> seen;
    for (auto n : cut.nodes)
      for (auto v : n.inputs()) {
        const node from = v.producer();
        const bool outside = from.is_placeholder() ? spec_of_.at(v.impl())->kind == input_kind::user_input
                                                   : step_of(from) != i;
        if (!outside || !seen.insert(v.impl()).second) continue;
        if (v.kind() != value_kind::tensor)
          throw refuse("'" + v.name() + "' (" + n.name() + " reads it) is a symbolic value made in another step");
        cut.inputs.push_back(v);
      }
    for (auto n : cut.nodes)
      for (auto o : n.outputs()) {
        bool later = false;
        for (const auto& u : o.uses()) later = later || u.user() == out_ || step_of(u.user()) != i;
        if (!later) continue;
        if (o.kind() != value_kind::tensor) throw refuse("'" + o.name() + "' is a symbolic value another step reads");
        cut.outputs.push_back(o);
      }
    auto& s = plan_.steps[i];
    for (auto v : cut.inputs) s.inputs.push_back(v.name());
    for (auto v : cut.outputs) s.outputs.push_back(v.name());
    s.run.emplace(carve(p_, cut, ""));
  }

  // The user outputs by name; the state writes the runs return, with the tensors they go into.
  void take_results() {
    const auto& specs = p_.signature().output_specs;
    const auto results = out_.args();
    for (std::size_t i = 0; i < results.size() && i < specs.size(); ++i) {
      const auto& spec = specs[i];
      const bool write = spec.kind == output_kind::buffer_mutation || spec.kind == output_kind::parameter_mutation;
      if (!write && spec.kind != output_kind::user_output)
        throw refuse("the program returns '" + spec.arg.name + "' as " + std::string(to_string(spec.kind)));
      if (!results[i].is_value()) throw refuse("output " + std::to_string(i) + " of the program is a constant");
      const value v = results[i].as_value();
      if (!write) {
        plan_.results.push_back(v.name());
      } else if (!v.producer().is_placeholder() && plan_.steps[step_of(v.producer())].call.empty()) {
        const auto* t = p_.state_dict().find(*spec.target);
        plan_.writes.emplace_back(v.name(), t ? *t : p_.constants().at(*spec.target));
      }
    }
  }

  const exported_program& p_;
  const std::vector<std::pair<std::string, program_cut>>& calls_;
  std::unordered_map<value_impl*, const input_spec*> spec_of_;
  node out_;
  std::unordered_map<node_impl*, std::size_t> call_of_, step_of_;
  std::vector<std::vector<node>> runs_;  // per step: the run's nodes (empty for a call)
  call_plan plan_;
};

inline call_plan plan_calls(const exported_program& p, const std::vector<std::pair<std::string, program_cut>>& calls) {
  return call_planner(p, calls).plan();
}

}  // namespace detail

/// torch's `UnflattenedModule` / `InterpreterModule`: one module of the tree unflatten() makes.
/// Its parameters and buffers are its own (local names; the program's tensors). A module whose
/// call was preserved (and the root) has a program: forward runs it; the others are containers.
class unflattened_module : public torch::nn::Module {
 public:
  using function = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

  explicit unflattened_module(std::string path, std::string type = {})
      : torch::nn::Module("xport::unflattened_module"), path_(std::move(path)), type_(std::move(type)) {}

  /// The module's path in the tree it was made in ("" for the root, `layers.0`).
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// The exported module's type (`Layer`, `torch::nn::LinearImpl`), where the program names it.
  [[nodiscard]] const std::string& type_name() const noexcept { return type_; }
  /// Whether forward can run: the root, a preserved call, or a function set in its place.
  [[nodiscard]] bool is_callable() const noexcept { return program_.has_value() || fn_ != nullptr; }
  /// The call signature kept for this module (torch's module_call_graph entry); none for the root.
  [[nodiscard]] const std::optional<module_call_signature>& signature() const noexcept { return signature_; }

  /// The module's program: the whole program for the root, a preserved call's own program
  /// (state under local names) for a submodule. Throws for a container.
  [[nodiscard]] const exported_program& program() const {
    if (fn_)
      throw error("xport.unflatten.call", "unflattened module '" + path_ +
                                              "' is the function set_submodule put there: it has no program");
    if (!program_) refuse_call("has no program");
    return *program_;
  }

  /// Runs the module on its tensor inputs; returns its tensor outputs (flat, signature order).
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& inputs) {
    if (fn_) return fn_(inputs);
    if (!program_) refuse_call("cannot be called");
    if (!swapped()) return run(*program_, inputs, opts_);
    return run_steps(inputs);
  }
  template <class... Tensors>
  std::vector<at::Tensor> operator()(const Tensors&... xs) {
    return forward(std::vector<at::Tensor>{xs...});
  }

  /// Options for every run (guards on by default).
  unflattened_module& with(run_options o) {
    opts_ = o;
    return *this;
  }

  /// The module at `fqn` below this one (`layers.0.fc1`); throws listing the paths there are.
  [[nodiscard]] std::shared_ptr<unflattened_module> submodule(const std::string& fqn) const {
    const auto found = find(fqn);
    if (!found) {
      std::vector<std::string> paths;
      for (const auto& item : named_modules("", false)) paths.push_back(item.key());
      throw error("xport.unflatten.submodule", "unflattened module" + where() + " has no submodule '" + fqn +
                                                   "'; its submodules are " + detail::quoted_list(paths));
    }
    return found;
  }

  /// Swaps the preserved call at `fqn` for `replacement`, a program of the same signature (its
  /// tensor user inputs and outputs those of the call, in order, of the same dtypes and ranks):
  /// forward then calls it at that boundary. The module at `fqn` becomes its unflattened tree.
  void set_submodule(const std::string& fqn, const exported_program& replacement) {
    auto [owner, call] = call_at(fqn);
    check_types("input", fqn, call.inputs, replacement_types(replacement, true));
    check_types("output", fqn, call.outputs, replacement_types(replacement, false));
    auto m = make(replacement, fqn_of(fqn));
    m->signature_ = call.original->signature_;
    put(owner, fqn, std::move(m));
  }
  /// Swaps the preserved call at `fqn` for a function of its tensors (an eager module's forward):
  /// it takes the call's tensor inputs and returns its tensor outputs, in signature order.
  void set_submodule(const std::string& fqn, function fn) {
    auto [owner, call] = call_at(fqn);
    auto m = std::make_shared<unflattened_module>(fqn_of(fqn), call.original->type_);
    m->signature_ = call.original->signature_;
    m->fn_ = std::move(fn);
    put(owner, fqn, std::move(m));
  }

  void to(torch::Device device, bool non_blocking = false) override {
    torch::nn::Module::to(device, non_blocking);  // the registered tensors: set_data, the programs' own
    for_each_program([&](exported_program& p) { detail::move_rest_of_program(p, device, non_blocking); });
  }
  void to(torch::Dtype dtype, bool /*non_blocking*/ = false) override {
    for_each_program([&](exported_program& p) { detail::check_state_dtype(p, dtype, "unflattened_module", ""); });
  }
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override {
    to(dtype, non_blocking);
    to(device, non_blocking);
  }

  /// Builds the tree of `p` (see xport::unflatten).
  static std::shared_ptr<unflattened_module> make(const exported_program& p, const std::string& path = "");

 private:
  struct preserved_call {
    std::string fqn;  // relative to this module
    std::shared_ptr<unflattened_module> original;
    std::vector<value_type> inputs, outputs;  // what the boundary passes
  };

  [[noreturn]] void refuse_call(const std::string& what) const {
    throw error("xport.unflatten.call",
                "unflattened module '" + path_ + "' " + what +
                    ": only the root and submodules whose call was preserved run on their own. Export with "
                    "preserve_module_call_signature = {\"" + path_ + "\"} (and call it through xport::call) to call it");
  }
  [[nodiscard]] std::string where() const { return path_.empty() ? "" : " '" + path_ + "'"; }
  [[nodiscard]] std::string fqn_of(const std::string& rel) const { return path_.empty() ? rel : path_ + "." + rel; }

  [[nodiscard]] std::shared_ptr<unflattened_module> find(const std::string& fqn) const {
    const torch::nn::Module* m = this;
    std::shared_ptr<torch::nn::Module> found;
    std::size_t start = 0;
    while (start <= fqn.size()) {
      const auto dot = fqn.find('.', start);
      const auto part = fqn.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const auto children = m->named_children();
      const auto* child = children.find(part);
      if (!child) return nullptr;
      found = *child;
      m = found.get();
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return std::dynamic_pointer_cast<unflattened_module>(found);
  }

  // The module whose plan runs the preserved call at `fqn` (relative): the innermost module with
  // a program on the way there; and that call.
  std::pair<unflattened_module&, const preserved_call&> call_at(const std::string& fqn) {
    auto scope = scope_.lock();
    unflattened_module* owner = program_ || !scope ? this : scope.get();
    for (auto dot = fqn.find('.'); dot != std::string::npos; dot = fqn.find('.', dot + 1))
      if (auto m = find(fqn.substr(0, dot)); m && m->program_) owner = m.get();
    const auto rel = detail::name_under(fqn_of(fqn), owner->path_);
    const auto call = std::find_if(owner->calls_.begin(), owner->calls_.end(),
                                   [&](const preserved_call& c) { return c.fqn == rel; });
    if (call == owner->calls_.end()) {
      std::vector<std::string> kept;
      for (const auto& c : owner->calls_) kept.push_back(owner->fqn_of(c.fqn));
      throw error("xport.unflatten.swap",
                  "set_submodule('" + fqn + "'): the call of '" + fqn_of(fqn) +
                      "' was not preserved, so the program has no boundary to call another module at" +
                      (kept.empty() ? std::string(" (no call in") + where() + " was)"
                                    : "; the preserved calls there are " + detail::quoted_list(kept)) +
                      ". Export with preserve_module_call_signature = {\"" + fqn_of(fqn) + "\"} to swap it");
    }
    if (owner->plan_error_) throw *owner->plan_error_;
    return {*owner, *call};
  }

  // The types of a replacement's tensor user inputs (or outputs).
  static std::vector<value_type> replacement_types(const exported_program& q, bool inputs) {
    std::vector<value_type> out;
    if (inputs) {
      const auto phs = q.graph().placeholders();
      for (std::size_t i = 0; i < phs.size(); ++i)
        if (q.signature().input_specs[i].kind == input_kind::user_input && phs[i].out().kind() == value_kind::tensor)
          out.push_back(phs[i].out().type());
      return out;
    }
    const auto results = q.graph().output_node().args();
    for (std::size_t i = 0; i < results.size(); ++i)
      if (q.signature().output_specs[i].kind == output_kind::user_output && results[i].is_value())
        out.push_back(results[i].as_value().type());
    return out;
  }
  static void check_types(const char* side, const std::string& fqn, const std::vector<value_type>& want,
                          const std::vector<value_type>& got) {
    const auto refuse = [&](const std::string& what) {
      throw error("xport.unflatten.swap", "set_submodule('" + fqn + "'): " + what +
                                              "; a replacement takes and returns the tensors of the preserved call, in "
                                              "its signature's order");
    };
    if (want.size() != got.size())
      refuse("the replacement has " + std::to_string(got.size()) + " tensor " + side + "s, the call " +
             std::to_string(want.size()));
    for (std::size_t i = 0; i < want.size(); ++i)
      if (want[i].tensor.dtype != got[i].tensor.dtype || want[i].tensor.dim() != got[i].tensor.dim())
        refuse(std::string(side) + " " + std::to_string(i) + " of the replacement is " + got[i].tensor.annotation() +
               ", the call's is " + want[i].tensor.annotation());
  }

  // Puts `m` at `fqn` (relative to this module) in place of what is there, and in owner's call.
  void put(unflattened_module& owner, const std::string& fqn, std::shared_ptr<unflattened_module> m) {
    const auto dot = fqn.rfind('.');
    torch::nn::Module* parent = this;
    std::shared_ptr<unflattened_module> holder;
    if (dot != std::string::npos) {
      holder = find(fqn.substr(0, dot));
      parent = holder.get();
    }
    const auto leaf = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
    parent->replace_module(leaf, m);
    owner.current_.insert_or_assign(detail::name_under(fqn_of(fqn), owner.path_), std::move(m));
  }

  [[nodiscard]] bool swapped() const {
    for (const auto& c : calls_)
      if (current_.at(c.fqn) != c.original) return true;
    return false;
  }

  std::vector<at::Tensor> run_steps(const std::vector<at::Tensor>& inputs) {
    const auto& plan = *plan_;
    (void)interpreter_for(*program_)->guards().check_and_bind(inputs);  // the program's own checks
    std::unordered_map<std::string, at::Tensor> env;
    for (std::size_t i = 0; i < plan.user_inputs.size(); ++i) env.emplace(plan.user_inputs[i], inputs[i]);
    for (const auto& step : plan.steps) {
      std::vector<at::Tensor> in;
      in.reserve(step.inputs.size());
      for (const auto& name : step.inputs) in.push_back(env.at(name));
      auto out = step.run ? run(*step.run, in, {.check_inputs = false, .inference_mode = opts_.inference_mode})
                          : current_.at(step.call)->forward(in);
      if (out.size() != step.outputs.size())
        throw error("xport.unflatten.swap", "the module at '" + fqn_of(step.call) + "' returned " +
                                                std::to_string(out.size()) + " tensors; its preserved call returns " +
                                                std::to_string(step.outputs.size()));
      for (std::size_t i = 0; i < out.size(); ++i) env.insert_or_assign(step.outputs[i], std::move(out[i]));
    }
    {
      c10::NoGradGuard no_grad;
      for (const auto& [name, buffer] : plan.writes) buffer.copy_(env.at(name));
    }
    std::vector<at::Tensor> results;
    for (const auto& name : plan.results) results.push_back(env.at(name));
    return results;
  }

  template <class F>
  void for_each_program(F&& f) {
    for (auto& item : named_modules("", true))
      if (auto* u = dynamic_cast<unflattened_module*>(item.value().get())) {
        if (u->program_) f(*u->program_);
        if (u->plan_)
          for (auto& s : u->plan_->steps)
            if (s.run) f(*s.run);
      }
  }

  std::string path_, type_;
  std::optional<exported_program> program_;
  std::weak_ptr<unflattened_module> scope_;  // the module whose program holds this one's nodes
  std::optional<module_call_signature> signature_;
  function fn_;
  run_options opts_;
  std::vector<preserved_call> calls_;  // the preserved calls directly inside
  std::map<std::string, std::shared_ptr<unflattened_module>> current_;  // what each call runs now
  std::optional<detail::call_plan> plan_;
  std::optional<error> plan_error_;  // why the calls cannot be swapped, when they cannot

  friend struct detail::unflatten_builder;
};

namespace detail {

/// Builds the tree of unflatten(p) (Note [Unflattened calls]).
struct unflatten_builder {
  /// Every module path the program names (its module table, its state's owners, its nodes'
  /// module stacks, its preserved calls), each after its parents, in the order first named.
  static std::vector<std::string> paths(const exported_program& p) {
    std::vector<std::string> out;
    std::unordered_set<std::string> seen{""};
    const auto add = [&](const std::string& path) {
      for (auto dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1))
        if (seen.insert(path.substr(0, dot)).second) out.push_back(path.substr(0, dot));
      if (seen.insert(path).second) out.push_back(path);
    };
    for (const auto& [fqn, type] : p.module_types()) add(fqn);
    for (const auto& spec : p.signature().input_specs)
      if (spec.target && (spec.kind == input_kind::parameter || spec.kind == input_kind::buffer)) {
        const auto dot = spec.target->rfind('.');
        if (dot != std::string::npos) add(spec.target->substr(0, dot));
      }
    for (auto n : p.graph().nodes())
      if (n.is_call()) add(n.module_path());
    for (const auto& [fqn, sig] : p.module_call_signatures()) add(fqn);
    return out;
  }

  static std::string join(const std::string& path, const std::string& rel) {
    return path.empty() ? rel : rel.empty() ? path : path + "." + rel;
  }

  static std::shared_ptr<unflattened_module> build(const exported_program& p, const std::string& path) {
    std::map<std::string, std::string> types(p.module_types().begin(), p.module_types().end());
    const auto type_of = [&](const std::string& fqn) {
      const auto it = types.find(fqn);
      return it == types.end() ? std::string() : it->second;
    };
    auto root = std::make_shared<unflattened_module>(path, type_of(""));
    for (const auto& rel : paths(p)) {
      const auto dot = rel.rfind('.');
      auto parent = dot == std::string::npos ? root : root->find(rel.substr(0, dot));
      parent->register_module(dot == std::string::npos ? rel : rel.substr(dot + 1),
                              std::make_shared<unflattened_module>(join(path, rel), type_of(rel)));
    }
    auto program = p.clone();
    module_state(*root).adopt(program, "");
    root->program_.emplace(std::move(program));
    for (const auto& [fqn, sig] : p.module_call_signatures()) {
      const auto& whole = *root->program_;
      auto own = carve(whole, call_cut(whole, fqn, sig), fqn);
      for (const auto& [inner, s] : whole.module_call_signatures())
        if (inner != fqn && is_under(inner, fqn)) own.set_module_call_signature(name_under(inner, fqn), s);
      std::vector<std::pair<std::string, std::string>> own_types;
      for (const auto& [m, t] : whole.module_types())
        if (is_under(m, fqn)) own_types.emplace_back(name_under(m, fqn), t);
      own.set_module_types(std::move(own_types));
      own.set_call_spec(sig.in_spec, sig.out_spec);
      auto node = root->find(fqn);
      node->program_.emplace(std::move(own));
      node->signature_ = sig;
    }
    for (auto& item : root->named_modules("", true)) {
      auto* m = dynamic_cast<unflattened_module*>(item.value().get());
      if (m && m->program_) plan(*root, *m, p.module_call_signatures(), item.key());
    }
    for (auto& item : root->named_modules("", false)) {  // each module's scope: the innermost call around it
      std::shared_ptr<unflattened_module> scope = root;
      const auto& rel = item.key();
      for (auto dot = rel.find('.'); dot != std::string::npos; dot = rel.find('.', dot + 1))
        if (auto m = root->find(rel.substr(0, dot)); m && m->program_) scope = m;
      std::dynamic_pointer_cast<unflattened_module>(item.value())->scope_ = scope;
    }
    return root;
  }

  // The preserved calls directly inside `m` (at `rel` from the root) and the plan that runs them.
  static void plan(const unflattened_module& root, unflattened_module& m,
                   const std::map<std::string, module_call_signature>& sigs, const std::string& rel) {
    std::vector<std::pair<std::string, program_cut>> cuts;
    for (const auto& fqn : direct_calls(sigs, rel)) {
      const auto inner = name_under(fqn, rel);
      auto cut = call_cut(*m.program_, inner, sigs.at(fqn));
      unflattened_module::preserved_call call{inner, root.find(fqn), {}, {}};
      for (auto v : cut.inputs) call.inputs.push_back(v.type());
      for (auto v : cut.outputs) call.outputs.push_back(v.type());
      m.current_.emplace(inner, call.original);
      m.calls_.push_back(std::move(call));
      cuts.emplace_back(inner, std::move(cut));
    }
    if (cuts.empty()) return;
    try {
      m.plan_.emplace(plan_calls(*m.program_, cuts));
    } catch (const error& e) {
      m.plan_error_.emplace(e);
    }
  }
};

}  // namespace detail

inline std::shared_ptr<unflattened_module> unflattened_module::make(const exported_program& p, const std::string& path) {
  return detail::unflatten_builder::build(p, path);
}

/// torch's `torch.export.unflatten(ep)`: the program as the tree of modules it was exported
/// from (unflattened_module), each holding its parameters and buffers under local names (the
/// program's tensors: what an optimizer changes, the program reads). The preserved calls
/// (export_options::preserve_module_call_signature) run on their own and can be swapped:
///
///   auto u = xport::unflatten(p);
///   u->forward({x});                                   // p's user outputs
///   u->submodule("layers.0")->forward({x, gate});      // one preserved call
///   u->set_submodule("layers.0", other);               // a program of the same signature, or a function
///
/// Throws `xport.unflatten.boundary` when a preserved call is not closed (it reads an input it
/// was not given, or the rest reads what it made without returning it); `p` is not changed.
inline std::shared_ptr<unflattened_module> unflatten(const exported_program& p) { return unflattened_module::make(p); }

XPORT_END_NAMESPACE
