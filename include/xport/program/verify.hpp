// xport/program/verify.hpp: every invariant of a graph and of an exported program, checked.
// verify(graph) checks structure (Note [Topological invariant], Note [Use lists]), names and
// each call against its operator's schema; verify(program) adds torch.export's verifier rules
// for the graph signature, the state dict and the dialect. Each failure is a verify_error with a
// stable id (`xport.verify.<rule>`), the offending node, and how to fix it.
#pragma once

#include <algorithm>      // std::sort, std::adjacent_find
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <vector>         // std::vector

#include <xport/ops/higher_order.hpp>
#include <xport/config.hpp>
#include <xport/ir/dtype.hpp>
#include <xport/ops/schema.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

[[noreturn]] inline void verify_fail(const std::string& rule, const std::string& msg,
                                     const std::string& node_name = {}) {
  throw verify_error("xport.verify." + rule, msg, node_name);
}

/// Whether a bound argument has schema type `t` (what coerce() produces; nothing is coerced).
inline bool fits(const argument& a, const c10::TypePtr& t) {
  using K = c10::TypeKind;
  switch (t->kind()) {
    case K::AnyType: return true;  // (a higher-order call's arguments by name: any argument, nested lists among them)
    case K::OptionalType: return a.is_none() || fits(a, t->castRaw<c10::OptionalType>()->getElementType());
    case K::ListType: {
      if (!a.is_list()) return false;
      const auto& elem = t->castRaw<c10::ListType>()->getElementType();
      for (const auto& e : a.as_list())
        if (!fits(e, elem)) return false;
      return true;
    }
    case K::FloatType: return a.is_double() || (a.is_scalar() && !a.as_scalar().is_bool()) || is_value_of(a, value_kind::sym_float);
    default: {
      if (a.is_list()) return false;
      argument copy = a;  // scalars: the coercion rules, on a cheap copy
      return coerce(copy, t, c10::nullopt) && copy == a;
    }
  }
}

}  // namespace detail

struct verify_options {
  /// Check every call against its operator's schema (argument count and types).
  bool check_schemas = true;
  /// Require functional ops only (torch's ATEN dialect).
  bool functional = false;
};

namespace detail {

/// Checks `n`'s place in the node list: its links, its owner, its order key, and that no node follows the output.
inline void verify_position(const graph& g, node n, const node_impl* prev, bool seen_output) {
  const auto* impl = n.impl();
  if (impl->prev != prev)
    verify_fail("links", "node '" + n.name() + "' has a broken prev link", n.name());
  if (&n.owning_graph() != &g)
    verify_fail("owner", "node '" + n.name() + "' belongs to another graph", n.name());
  if (prev && prev->order >= impl->order)
    verify_fail("order_keys", "node '" + n.name() + "' has an order key out of sequence", n.name());
  if (seen_output)
    verify_fail("output_not_last",
                "node '" + n.name() + "' comes after the output node; the output node must be last",
                n.name());
}

/// Checks the rules of `n`'s kind (placeholders first and bare, calls with an operator) and tracks where the walk is.
inline void verify_kind(node n, bool& after_placeholders, bool& seen_output) {
  const auto* impl = n.impl();
  switch (n.kind()) {
    case node_kind::placeholder:
      if (after_placeholders)
        verify_fail("placeholder_order",
                    "placeholder '" + n.name() + "' comes after a call node; placeholders must "
                    "come first (move it with graph::move_before)",
                    n.name());
      if (!impl->args.empty() || impl->outputs.size() != 1)
        verify_fail("placeholder_shape", "placeholder '" + n.name() +
                                             "' must have no arguments and exactly one output",
                    n.name());
      break;
    case node_kind::call_function:
      after_placeholders = true;
      if (!impl->op)
        verify_fail("missing_op", "call node '" + n.name() + "' has no operator", n.name());
      break;
    case node_kind::output:
      after_placeholders = true;
      seen_output = true;
      break;
  }
}

/// Claims the names `n` defines in `names`, and checks each output points back at `n` with consistent meta.
inline void verify_names(node n, std::unordered_set<std::string_view>& names) {
  const auto* impl = n.impl();
  const auto claim = [&](std::string_view name) {
    if (!names.insert(name).second)
      verify_fail("duplicate_name", "the name '" + std::string(name) + "' is used twice", n.name());
  };
  if (n.kind() == node_kind::call_function && impl->tuple_output) claim(impl->name);
  for (const auto* v : impl->outputs) {
    claim(v->name);
    if (v->producer != impl)
      verify_fail("producer", "value '" + v->name + "' does not point back at its node", n.name());
    if (v->type.kind == value_kind::tensor &&
        !v->type.tensor.strides.empty() && v->type.tensor.strides.size() != v->type.tensor.sizes.size())
      verify_fail("meta", "value '" + v->name + "' has " + std::to_string(v->type.tensor.sizes.size()) +
                              " sizes but " + std::to_string(v->type.tensor.strides.size()) + " strides",
                  n.name());
  }
}

/// Checks `n`'s operands are non-null and defined earlier in `g`; returns how many operand slots it has.
inline std::size_t verify_operands(const graph& g, node n) {
  const auto* impl = n.impl();
  for (std::size_t i = 0; i < impl->slots.size(); ++i) {
    const value v = *impl->slots[i];
    if (!v) verify_fail("null_operand", "operand " + std::to_string(i) + " of '" + n.name() + "' is null", n.name());
    const auto* producer = v.impl()->producer;
    // defined before use: in this graph, and earlier in the list (order keys are checked
    // increasing above)
    if (producer->owner != &g || producer->order >= impl->order)
      verify_fail("use_before_def",
                  "'" + n.name() + "' uses '" + v.name() + "' (operand " + std::to_string(i) +
                      ") before it is defined, or '" + v.name() +
                      "' is not in this graph; nodes must stay in topological order "
                      "(Note [Topological invariant])",
                  n.name());
  }
  return impl->slots.size();
}

/// Checks call node `n` against its operator's schema: argument count and types, output count, functionality.
inline void verify_call(node n, const verify_options& opts) {
  const auto* impl = n.impl();
  const auto& op = *impl->op;
  const auto& params = op.schema().arguments();
  if (impl->args.size() != params.size())
    verify_fail("arg_count", "'" + n.name() + "' calls " + op.qualified + " with " +
                                 std::to_string(impl->args.size()) + " arguments; its schema has " +
                                 std::to_string(params.size()) + "\n  schema: " +
                                 schema_string(op.schema()),
                n.name());
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!fits(impl->args[i], params[i].real_type()))
      verify_fail("arg_type", "'" + n.name() + "' passes " + describe(impl->args[i]) +
                                  " as argument '" + params[i].name() + "' of " + op.qualified +
                                  ", which must be " + params[i].real_type()->str(),
                  n.name());
  const auto& rets = op.schema().returns();
  if (!op.returns_list && impl->outputs.size() != rets.size())
    verify_fail("output_count", "'" + n.name() + "' has " + std::to_string(impl->outputs.size()) +
                                    " outputs; " + op.qualified + " returns " +
                                    std::to_string(rets.size()),
                n.name());
  if (opts.functional && op.is_mutable)
    verify_fail("not_functional", "operator '" + op.qualified + "' (node '" + n.name() +
                                      "') is not functional; the ATEN dialect allows no "
                                      "in-place or out= ops (run_decompositions() removes them)",
                n.name());
}

}  // namespace detail
inline void verify(const graph& g, const verify_options& opts);
namespace detail {

/// Checks subgraph `s` of control-flow call `n` (torch.`hop`) as torch checks every higher-order
/// operator's: it takes the operands (dtype, sizes, device: requires_grad and strides may
/// differ, torch records a parameter's placeholder in a branch without its grad flag), writes to
/// no input and returns no input itself.
/// Of the row_operands (torch.map's and torch.scan's xs) the subgraph takes one slice each (its
/// sizes without the leading dim).
inline void verify_subgraph_of(const node& n, const std::string& hop, const subgraph& s,
                               const argument::list_type& operands, const verify_options& opts) {
  const auto [first_row, last_row] = row_operands(n);
  const auto fits_input = [](const argument& a, const value& ph, bool slice) {
    if (!a.is_value() || a.as_value().kind() != ph.kind()) return false;
    if (ph.kind() != value_kind::tensor) return true;
    const value av = a.as_value();
    const auto &m = av.meta(), &q = ph.meta();
    if (slice && m.sizes.empty()) return false;
    const auto sizes = slice ? sym_shape(m.sizes.begin() + 1, m.sizes.end()) : m.sizes;
    return m.dtype == q.dtype && sizes == q.sizes && m.device == q.device;
  };
  const auto phs = s.body.placeholders();
  if (phs.size() != operands.size())
    verify_fail(hop + "_operands", "'" + n.name() + "': subgraph '" + s.name + "' takes " + std::to_string(phs.size()) +
                                       " inputs, torch." + hop + " passes it " + std::to_string(operands.size()) + " operands",
                n.name());
  for (std::size_t i = 0; i < phs.size(); ++i)
    if (!fits_input(operands[i], phs[i].output(0), i >= first_row && i < last_row))
      verify_fail(hop + "_operands", "'" + n.name() + "': operand " + std::to_string(i) + " of torch." + hop +
                                         " does not match input '" + phs[i].name() + "' of subgraph '" + s.name + "' (" +
                                         phs[i].output(0).meta().annotation() + ")",
                  n.name());
  // what an op writes to, traced back through views: torch refuses a write to an input (a
  // tensor the subgraph makes itself may be written to, as LibTorch's linear does to its bias add)
  const auto writes_input = [](const node& inner) {
    const auto& params = inner.op().schema().arguments();
    const auto args = inner.args();
    for (std::size_t j = 0; j < params.size() && j < args.size(); ++j) {
      if (!params[j].alias_info() || !params[j].alias_info()->isWrite() || !args[j].is_value()) continue;
      auto v = args[j].as_value();
      while (v.producer().is_call() && v.producer().op().is_view && !v.producer().args().empty() &&
             v.producer().args()[0].is_value())
        v = v.producer().args()[0].as_value();
      if (v.producer().is_placeholder()) return true;
    }
    return false;
  };
  for (auto inner : s.body.nodes())
    if (inner.is_call() && inner.op().is_mutable && writes_input(inner))
      verify_fail(hop + "_mutation", "Higher order ops do not support input mutation: node '" + inner.name() + "' of subgraph '" +
                                         s.name + "' calls " + inner.op().qualified + "; compute a new tensor and return it instead",
                  n.name());
  const node body_out = s.body.output_node();
  for (const auto& o : body_out.args())
    if (o.is_value() && o.as_value().producer().is_placeholder())
      verify_fail(hop + "_aliasing", "Higher order ops do not support aliasing: subgraph '" + s.name + "' of '" + n.name() +
                                         "' returns its input '" + o.as_value().name() +
                                         "'. Replace `return input` with `return input.clone()`",
                  n.name());
  verify(s.body, opts);
}

/// Checks a torch.cond call: its two branches take the operands and agree on what they return
/// (torch.cond's rules, with its texts), mutate nothing and return no operand itself.
inline void verify_cond(node n, const verify_options& opts) {
  const auto args = n.args();
  if (args.size() != 4 || !args[1].is_graph() || !args[2].is_graph() || !args[3].is_list())
    verify_fail("cond_args", "'" + n.name() + "' calls torch.cond without (pred, true_graph, false_graph, operands)", n.name());
  const auto one_element = [](const tensor_meta& m) {
    for (const auto& d : m.sizes)
      if (d.is_symbolic() || d.hint() != 1) return false;
    return true;
  };
  if (args[0].is_value() && args[0].as_value().kind() == value_kind::tensor && !one_element(args[0].as_value().meta()))
    verify_fail("cond_pred", "Expected pred to be bool or single-element tensor, but got " +
                                 args[0].as_value().meta().annotation() + " ('" + args[0].as_value().name() +
                                 "', the predicate of '" + n.name() + "')",
                n.name());
  const subgraph* branches[2] = {args[1].as_graph().get(), args[2].as_graph().get()};
  for (const auto* s : branches) verify_subgraph_of(n, "cond", *s, args[3].as_list(), opts);
  const auto outs0 = branches[0]->body.output_node().args(), outs1 = branches[1]->body.output_node().args();
  if (outs0.size() != outs1.size() || outs0.size() != n.num_outputs())
    verify_fail("cond_outputs", "Unmatched output spec from torch.cond branches: '" + branches[0]->name + "' returns " +
                                    std::to_string(outs0.size()) + " values, '" + branches[1]->name + "' " +
                                    std::to_string(outs1.size()) + " ('" + n.name() + "' has " +
                                    std::to_string(n.num_outputs()) + " outputs)",
                n.name());
  for (std::size_t i = 0; i < outs0.size(); ++i) {
    if (!outs0[i].is_value() || !outs1[i].is_value())
      verify_fail("cond_outputs", "'" + n.name() + "': torch.cond's branches must return tensors (output " + std::to_string(i) + ")", n.name());
    const value v0 = outs0[i].as_value(), v1 = outs1[i].as_value();
    const auto& a = v0.meta();
    const auto& b = v1.meta();
    if (a.dtype != b.dtype)
      verify_fail("cond_outputs", "When merging two branches' output in torch.cond,  expected same dtype but got " +
                                      python_repr(a.dtype) + " and " + python_repr(b.dtype) + " (output " + std::to_string(i) +
                                      " of '" + n.name() + "')",
                  n.name());
    if (a.sizes != b.sizes)
      verify_fail("cond_outputs", "torch.cond's branches return output " + std::to_string(i) + " in different shapes (" +
                                      a.annotation() + " and " + b.annotation() + ") at '" + n.name() +
                                      "': torch makes its size data-dependent (unbacked), which xport does not support; "
                                      "return the same shape from both branches",
                  n.name());
    if (n.output(i).meta().dtype != a.dtype || n.output(i).meta().sizes != a.sizes)
      verify_fail("cond_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + n.output(i).meta().annotation() +
                                      ") is not what its branches return (" + a.annotation() + ")",
                  n.name());
  }
}

/// Checks a torch.while_loop call (torch's rules, with its texts): cond_fn returns a bool scalar
/// tensor, body_fn returns what is carried (same count, dtypes, shapes and devices), both take
/// the carried and the additional inputs, mutate nothing and return no input itself.
inline void verify_while_loop(node n, const verify_options& opts) {
  const auto args = n.args();
  if (args.size() != 4 || !args[0].is_graph() || !args[1].is_graph() || !args[2].is_list() || !args[3].is_list())
    verify_fail("while_loop_args", "'" + n.name() + "' calls torch.while_loop without (cond_graph, body_graph, "
                                   "carried_inputs, additional_inputs)", n.name());
  const auto operands = subgraph_operands(n);
  const auto& cond_g = *args[0].as_graph();
  const auto& body_g = *args[1].as_graph();
  verify_subgraph_of(n, "while_loop", cond_g, operands, opts);
  verify_subgraph_of(n, "while_loop", body_g, operands, opts);
  const auto pred = cond_g.body.output_node().args();
  const auto is_bool_scalar = [](const argument& a) {
    return a.is_value() && a.as_value().kind() == value_kind::tensor && a.as_value().meta().dtype == at::kBool &&
           a.as_value().meta().sizes.empty();
  };
  if (pred.size() != 1 || !is_bool_scalar(pred[0]))
    verify_fail("while_loop_pred", "cond_fn must return a boolean scalar tensor or a boolean but got " +
                                       (pred.size() == 1 && pred[0].is_value() ? pred[0].as_value().meta().annotation()
                                                                               : std::to_string(pred.size()) + " values") +
                                       " (subgraph '" + cond_g.name + "' of '" + n.name() + "')",
                n.name());
  const auto& carried = args[2].as_list();
  const auto outs = body_g.body.output_node().args();
  if (outs.size() != carried.size() || carried.size() != n.num_outputs())
    verify_fail("while_loop_outputs", "Expected body_fn_output and carried_inputs to have same number of outputs but got " +
                                          std::to_string(outs.size()) + " and " + std::to_string(carried.size()) +
                                          " (subgraph '" + body_g.name + "' of '" + n.name() + "', which has " +
                                          std::to_string(n.num_outputs()) + " outputs)",
                n.name());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const value cv = carried[i].as_value();
    const auto& c = cv.meta();
    if (!outs[i].is_value() || outs[i].as_value().kind() != value_kind::tensor)
      verify_fail("while_loop_outputs", "'" + n.name() + "': body_fn must return tensors (output " + std::to_string(i) + ")", n.name());
    const value bv = outs[i].as_value();
    const auto& b = bv.meta();
    if (b.dtype != c.dtype || b.sizes != c.sizes || b.device != c.device)
      verify_fail("while_loop_outputs", "Expected body_fn_output and carried_inputs to have same metadata but found: pair[" +
                                            std::to_string(i) + "] differ, where body_fn returns " + b.annotation() +
                                            " and carried_inputs[" + std::to_string(i) + "] is " + c.annotation() +
                                            " (subgraph '" + body_g.name + "' of '" + n.name() + "')",
                  n.name());
    if (n.output(i).meta().dtype != c.dtype || n.output(i).meta().sizes != c.sizes)
      verify_fail("while_loop_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + n.output(i).meta().annotation() +
                                            ") is not what it carries (" + c.annotation() + ")",
                  n.name());
  }
}

/// Checks a torch.map call (`map_impl(body_graph, xs, pos_args)`): the xs share a leading dim,
/// the body takes a slice of each and the pos_args, and the outputs are its results stacked.
inline void verify_map(node n, const verify_options& opts) {
  const auto args = n.args();
  if (args.size() != 3 || !args[0].is_graph() || !args[1].is_list() || !args[2].is_list() || args[1].as_list().empty())
    verify_fail("map_args", "'" + n.name() + "' calls torch.map without (body_graph, xs, pos_args), xs not empty", n.name());
  const auto& xs = args[1].as_list();
  for (const auto& x : xs)
    if (!x.is_value() || x.as_value().kind() != value_kind::tensor || x.as_value().meta().sizes.empty() ||
        x.as_value().meta().sizes[0] != xs[0].as_value().meta().sizes[0])
      verify_fail("map_xs", "'" + n.name() + "': Leading dimensions of mapped xs must be consistent (" +
                                (x.is_value() ? "'" + x.as_value().name() + "'" : std::string("an xs")) +
                                " does not have the first's)",
                  n.name());
  const auto& body = *args[0].as_graph();
  verify_subgraph_of(n, "map", body, subgraph_operands(n), opts);
  const auto outs = body.body.output_node().args();
  if (outs.size() != n.num_outputs())
    verify_fail("map_outputs", "'" + n.name() + "' has " + std::to_string(n.num_outputs()) + " outputs, its body '" +
                                   body.name + "' returns " + std::to_string(outs.size()),
                n.name());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].is_value() || outs[i].as_value().kind() != value_kind::tensor)
      verify_fail("map_outputs", "'" + n.name() + "': torch.map's body must return tensors (output " + std::to_string(i) + ")", n.name());
    const value sv = outs[i].as_value(), mv = n.output(i);
    const auto& slice = sv.meta();
    const auto& m = mv.meta();
    if (m.dtype != slice.dtype || m.sizes.empty() || m.sizes[0] != xs[0].as_value().meta().sizes[0] ||
        sym_shape(m.sizes.begin() + 1, m.sizes.end()) != slice.sizes)
      verify_fail("map_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + m.annotation() +
                                     ") is not its body's " + slice.annotation() + " stacked over the mapped dim",
                  n.name());
  }
}

/// Checks a torch.scan call (`scan(combine_graph, init, xs, additional_inputs)`): the xs share
/// a leading dim, the combine graph takes the carries, a slice of each xs and the additional
/// inputs, and returns the next carries (init's metadata, torch's text) then the ys; the outputs
/// are the last carries and the ys stacked.
inline void verify_scan(node n, const verify_options& opts) {
  const auto args = n.args();
  if (args.size() != 4 || !args[0].is_graph() || !args[1].is_list() || !args[2].is_list() || !args[3].is_list() ||
      args[1].as_list().empty() || args[2].as_list().empty())
    verify_fail("scan_args", "'" + n.name() + "' calls torch.scan without (combine_graph, init, xs, additional_inputs), "
                             "init and xs not empty",
                n.name());
  const auto& init = args[1].as_list();
  const auto& xs = args[2].as_list();
  for (const auto& x : xs)
    if (!x.is_value() || x.as_value().kind() != value_kind::tensor || x.as_value().meta().sizes.empty() ||
        x.as_value().meta().sizes[0] != xs[0].as_value().meta().sizes[0])
      verify_fail("scan_xs", "'" + n.name() + "': All xs leaves must at least have 'dim' number of dimensions and the "
                             "same scan dimension (" +
                                 (x.is_value() ? "'" + x.as_value().name() + "'" : std::string("an xs")) +
                                 " does not have the first's)",
                  n.name());
  const auto& body = *args[0].as_graph();
  verify_subgraph_of(n, "scan", body, subgraph_operands(n), opts);
  const auto outs = body.body.output_node().args();
  if (outs.size() < init.size() || outs.size() != n.num_outputs())
    verify_fail("scan_outputs", "Expect combine_fn to return a tuple (next_carry, y): '" + n.name() + "' carries " +
                                    std::to_string(init.size()) + " and has " + std::to_string(n.num_outputs()) +
                                    " outputs, its combine graph '" + body.name + "' returns " + std::to_string(outs.size()),
                n.name());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].is_value() || outs[i].as_value().kind() != value_kind::tensor)
      verify_fail("scan_outputs", "'" + n.name() + "': torch.scan's combine_fn must return tensors (output " +
                                      std::to_string(i) + ")",
                  n.name());
    const value bv = outs[i].as_value(), mv = n.output(i);
    const auto& b = bv.meta();
    const auto& m = mv.meta();
    if (i < init.size()) {
      const value cv = init[i].as_value();
      const auto& c = cv.meta();
      if (b.dtype != c.dtype || b.sizes != c.sizes || b.device != c.device)
        verify_fail("scan_carry", "Expected init and carry to have same metadata but found: pair[" + std::to_string(i) +
                                      "] differ, where init is " + c.annotation() + " and carry is " + b.annotation() +
                                      " (subgraph '" + body.name + "' of '" + n.name() + "')",
                    n.name());
      if (m.dtype != c.dtype || m.sizes != c.sizes)
        verify_fail("scan_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + m.annotation() +
                                        ") is not what it carries (" + c.annotation() + ")",
                    n.name());
    } else if (m.dtype != b.dtype || m.sizes.empty() || m.sizes[0] != xs[0].as_value().meta().sizes[0] ||
               sym_shape(m.sizes.begin() + 1, m.sizes.end()) != b.sizes) {
      verify_fail("scan_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + m.annotation() +
                                      ") is not its combine graph's " + b.annotation() + " stacked over the scanned dim",
                  n.name());
    }
  }
}

/// Checks a call that runs its one subgraph under a mode (no_grad, autocast): its arguments are
/// the operator's layout, the body takes the operands, and the outputs are what it returns.
inline void verify_wrapped(node n, const higher_order_op& hop, const verify_options& opts) {
  const auto args = n.args();
  const auto graphs = hop.graph_params();
  if (args.size() != hop.params.size() || graphs.size() != 1 || !args[graphs[0]].is_graph() || !args.back().is_list())
    verify_fail(std::string(hop.name) + "_args", "'" + n.name() + "' calls " + hop.target() + " without " + hop.layout(), n.name());
  const auto& body = *args[graphs[0]].as_graph();
  verify_subgraph_of(n, std::string(hop.name), body, args.back().as_list(), opts);
  const auto outs = body.body.output_node().args();
  if (outs.size() != n.num_outputs())
    verify_fail(std::string(hop.name) + "_outputs", "'" + n.name() + "' has " + std::to_string(n.num_outputs()) +
                                                        " outputs, its body '" + body.name + "' returns " + std::to_string(outs.size()),
                n.name());
  for (std::size_t i = 0; i < outs.size(); ++i)
    if (!outs[i].is_value() || outs[i].as_value().kind() != value_kind::tensor ||
        outs[i].as_value().meta().dtype != n.output(i).meta().dtype || outs[i].as_value().meta().sizes != n.output(i).meta().sizes)
      verify_fail(std::string(hop.name) + "_outputs", "'" + n.name() + "' output " + std::to_string(i) +
                                                          " is not what its body '" + body.name + "' returns",
                  n.name());
}

/// Checks a call that names an operator (auto_functionalized, with_effects, out_dtype): the operator is
/// registered (a mutating one for auto_functionalized), its keyword arguments are (name, value)
/// pairs, with_effects threads a token tensor in and out.
inline void verify_named_call(node n, const higher_order_op& hop) {
  using T = higher_order_op::param::type;
  const auto args = n.args();
  const auto fail = [&](const std::string& what) { verify_fail(std::string(hop.name) + "_args", "'" + n.name() + "': " + what, n.name()); };
  if (args.size() != hop.params.size()) fail("calls " + hop.target() + " without " + hop.layout());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto kind = hop.params[i].kind;
    if (kind == T::op) {
      const auto* op = args[i].is_string() ? try_find_op(args[i].as_string()) : nullptr;
      if (!op) fail("argument " + std::to_string(i) + " does not name a registered operator");
      if (hop.which == higher_order_op::id::out_dtype) {
        if (auto why = out_dtype_refusal(*op); !why.empty()) fail(why);
      } else if (hop.which != higher_order_op::id::with_effects && !op->is_mutable)
        fail(op->qualified + " mutates nothing: " + hop.target() + " calls an operator that writes to its arguments");
    }
    if ((kind == T::values || kind == T::kwargs) && !args[i].is_list()) fail("argument " + std::to_string(i) + " is not a list");
    if (kind == T::kwargs)
      for (const auto& kv : args[i].as_list())
        if (!kv.is_list() || kv.as_list().size() != 2 || !kv.as_list()[0].is_string())
          fail("a keyword argument is not a (name, value) pair");
  }
  if (hop.which == higher_order_op::id::with_effects &&
      (!args[0].is_value() || args[0].as_value().kind() != value_kind::tensor || n.num_outputs() == 0 ||
       n.output(0).kind() != value_kind::tensor))
    fail("with_effects takes a token tensor first and returns a new one first");
}

/// Checks a call of a custom object's method: (object, method name, [arguments]) -> one tensor.
inline void verify_call_torchbind(node n) {
  const auto args = n.args();
  if (args.size() != 3 || !args[0].is_value() || args[0].as_value().kind() != value_kind::object || !args[1].is_string() ||
      !args[2].is_list() || n.num_outputs() != 1 || n.output(0).kind() != value_kind::tensor)
    verify_fail("call_torchbind_args", "'" + n.name() + "': call_torchbind takes (obj, method, *args) of a custom object and "
                                       "gives one tensor", n.name());
}

/// Checks a higher-order call by the rules of its operator (ops/higher_order.hpp).
inline void verify_higher_order(node n, const verify_options& opts) {
  const auto* hop = hop_of(n.op());
  if (!hop) verify_fail("higher_order", "'" + n.name() + "' calls " + n.op().qualified + ", which xport does not know", n.name());
  switch (hop->which) {
    case higher_order_op::id::cond: return verify_cond(n, opts);
    case higher_order_op::id::while_loop: return verify_while_loop(n, opts);
    case higher_order_op::id::map: return verify_map(n, opts);
    case higher_order_op::id::scan: return verify_scan(n, opts);
    case higher_order_op::id::set_grad_enabled:
    case higher_order_op::id::autocast: return verify_wrapped(n, *hop, opts);
    case higher_order_op::id::auto_functionalized:
    case higher_order_op::id::auto_functionalized_v2:
    case higher_order_op::id::with_effects:
    case higher_order_op::id::out_dtype: return verify_named_call(n, *hop);
    case higher_order_op::id::call_torchbind: return verify_call_torchbind(n);
  }
}

/// Checks every recorded use points at an operand slot holding the value, once; returns how many uses there are.
inline std::size_t verify_recorded_uses(const graph& g) {
  std::size_t total_uses = 0;
  std::vector<std::pair<const node_impl*, std::uint32_t>> seen_uses;
  for (auto n : g.nodes())
    for (auto v : n.outputs()) {
      const auto uses = v.uses();
      total_uses += uses.size();
      for (std::size_t k = 0; k < uses.size(); ++k) {
        const auto& u = uses[k];
        if (u.user_impl->owner != &g || u.index >= u.user_impl->slots.size() || *u.user_impl->slots[u.index] != v)
          verify_fail("use_list", "'" + v.name() + "' records a use that no operand matches (Note [Use lists])",
                      n.name());
        if (u.user_impl->use_pos[u.index] != k)
          verify_fail("use_list", "operand " + std::to_string(u.index) + " of '" + node(u.user_impl).name() +
                                      "' has a stale position in the use list of '" + v.name() + "' (Note [Use lists])",
                      node(u.user_impl).name());
      }
      if (uses.size() > 1) {
        seen_uses.clear();
        for (const auto& u : uses) seen_uses.emplace_back(u.user_impl, u.index);
        std::sort(seen_uses.begin(), seen_uses.end());
        if (std::adjacent_find(seen_uses.begin(), seen_uses.end()) != seen_uses.end())
          verify_fail("use_list", "'" + v.name() + "' records a use that no operand matches (Note [Use lists])",
                      n.name());
      }
    }
  return total_uses;
}

/// Fails naming the first operand slot missing from its value's use list, if there is one.
inline void verify_unrecorded_uses(const graph& g) {
  for (auto n : g.nodes())
    for (std::size_t i = 0; i < n.num_inputs(); ++i) {
      const auto v = n.input(i);
      bool found = false;
      for (const auto& u : v.uses()) found = found || (u.user_impl == n.impl() && u.index == i);
      if (!found)
        verify_fail("use_list", "'" + v.name() + "' is operand " + std::to_string(i) + " of '" + n.name() +
                                    "' but its use list does not record it (Note [Use lists])",
                    n.name());
    }
}

}  // namespace detail

/// Checks the graph's invariants; throws verify_error on the first broken one.
inline void verify(const graph& g, const verify_options& opts = {}) {
  using detail::verify_fail;
  std::unordered_set<std::string_view> names;
  names.reserve(g.size() * 2);
  std::size_t total_slots = 0;
  const detail::node_impl* prev = nullptr;
  bool after_placeholders = false;
  bool seen_output = false;
  std::size_t count = 0;
  for (auto n : g.nodes()) {
    ++count;
    detail::verify_position(g, n, prev, seen_output);
    detail::verify_kind(n, after_placeholders, seen_output);
    detail::verify_names(n, names);
    // operands: defined before use, and Note [Use lists] one way
    total_slots += detail::verify_operands(g, n);
    if (n.kind() == node_kind::call_function && opts.check_schemas) detail::verify_call(n, opts);
    if (n.kind() == node_kind::call_function && n.op().higher_order) detail::verify_higher_order(n, opts);
    prev = n.impl();
  }
  if (count != g.size())
    verify_fail("size", "the graph counts " + std::to_string(g.size()) + " nodes but holds " +
                            std::to_string(count));
  if (prev != g.last().impl()) verify_fail("links", "the graph's last node is not the end of its list");
  if (!seen_output) verify_fail("no_output", "the graph has no output node; call graph::set_output");
  // Note [Use lists], both ways, in linear time: every recorded use points at an operand slot that
  // holds the value, and no value records a use twice; with as many uses as slots, every slot is
  // then recorded exactly once.
  if (detail::verify_recorded_uses(g) != total_slots) detail::verify_unrecorded_uses(g);
}

namespace detail {

/// The FQNs a program's inputs name, by kind: what its mutation outputs may target.
struct signature_targets {
  std::unordered_set<std::string> user_inputs, buffers, parameters;
};

/// Checks a lifted state input (parameter, buffer, constant) `ph`: its target is in the state dict or the
/// constants as its kind requires, with the placeholder's meta; records its target in `targets`.
inline void verify_state_input(const exported_program& p, const input_spec& spec, node ph,
                               signature_targets& targets) {
  const auto& name = ph.name();
  const auto kind_str = std::string(to_string(spec.kind));
  if (!spec.target)
    verify_fail("signature.missing_target", kind_str + " input '" + name + "' has no target FQN", name);
  const auto& fqn = *spec.target;
  const tensor_meta* ph_meta =
      ph.output(0).kind() == value_kind::tensor ? &ph.output(0).meta() : nullptr;
  const auto check_meta = [&](const at::Tensor& t) {
    if (!ph_meta) return;
    if (t.scalar_type() != ph_meta->dtype || t.sizes().vec() != ph_meta->size_hints())
      verify_fail("signature.state_meta",
                  kind_str + " '" + fqn + "' is " + tensor_meta::of(t).annotation() +
                      " but placeholder '" + name + "' says " + ph_meta->annotation(),
                  name);
  };
  switch (spec.kind) {
    case input_kind::parameter: {
      targets.parameters.insert(fqn);
      const auto* t = p.state_dict().find(fqn);
      if (!t)
        verify_fail("signature.missing_parameter",
                    "parameter '" + fqn + "' (input '" + name + "') is not in the state dict", name);
      check_meta(*t);
      break;
    }
    case input_kind::buffer: {
      targets.buffers.insert(fqn);
      if (!spec.persistent)
        verify_fail("signature.persistent", "Failed to specify persistent flag on BUFFER. (buffer '" +
                                                fqn + "', input '" + name + "')",
                    name);
      if (*spec.persistent) {
        const auto* t = p.state_dict().find(fqn);
        if (!t)
          verify_fail("signature.missing_buffer",
                      "persistent buffer '" + fqn + "' (input '" + name + "') is not in the state dict",
                      name);
        check_meta(*t);
      } else {
        if (p.state_dict().contains(fqn))
          verify_fail("signature.non_persistent_in_state",
                      "Non-persistent buffer " + fqn + " is in the state dict, it should not be.", name);
        const auto* t = p.constants().find(fqn);
        if (!t)
          verify_fail("signature.missing_constant",
                      "non-persistent buffer '" + fqn + "' (input '" + name + "') is not in the constants",
                      name);
        check_meta(*t);
      }
      break;
    }
    case input_kind::constant_tensor: {
      const auto* t = p.constants().find(fqn);
      if (!t)
        verify_fail("signature.missing_constant",
                    kind_str + " '" + fqn + "' (input '" + name + "') is not in the constants", name);
      check_meta(*t);
      break;
    }
    case input_kind::custom_obj: {
      const auto it = p.custom_objs().find(fqn);
      if (it == p.custom_objs().end())
        verify_fail("signature.missing_constant", "custom object '" + fqn + "' (input '" + name + "') is not in the program's custom objects", name);
      const value v = ph.output(0);
      if (!it->second.isObject() || it->second.type()->str() != spec.arg.class_fqn || v.kind() != value_kind::object ||
          v.type().class_fqn != spec.arg.class_fqn)
        verify_fail("signature.custom_obj", "custom object input '" + name + "' takes a " + spec.arg.class_fqn + ", but the program holds a " +
                                                it->second.type()->str() + " for '" + fqn + "' and the placeholder is " +
                                                (v.kind() == value_kind::object ? "of class " + v.type().class_fqn : "no custom object"), name);
      break;
    }
    default: break;
  }
}

/// Checks the input specs against the placeholders (names, order, tokens, state); returns the targets they name.
inline signature_targets verify_input_specs(const exported_program& p) {
  const auto& sig = p.signature();
  const auto phs = p.graph().placeholders();
  if (phs.size() != sig.input_specs.size())
    verify_fail("signature.input_count", "the graph has " + std::to_string(phs.size()) +
                                             " placeholders but the signature has " +
                                             std::to_string(sig.input_specs.size()) + " input specs");
  bool user_seen = false;
  signature_targets targets;
  for (std::size_t i = 0; i < phs.size(); ++i) {
    const auto& spec = sig.input_specs[i];
    const auto& name = phs[i].name();
    if (spec.arg.name != name)
      verify_fail("signature.input_name", "input spec " + std::to_string(i) + " names '" +
                                              spec.arg.name + "' but placeholder " +
                                              std::to_string(i) + " is '" + name + "'",
                  name);
    if (spec.kind == input_kind::user_input) {
      user_seen = true;
      targets.user_inputs.insert(name);
      if (spec.arg.type == argument_spec::kind::constant &&
          (phs[i].output(0).kind() != value_kind::none || phs[i].output(0).num_uses() != 0))
        verify_fail("signature.constant_input",
                    "constant input '" + name + "' must be a placeholder of kind none that nothing uses (the "
                    "program is specialized to its value)",
                    name);
      continue;
    }
    if (user_seen)
      verify_fail("signature.input_order",
                  "input '" + name + "' (" + std::string(to_string(spec.kind)) + ") comes after a user input; lifted "
                  "parameters, buffers and constants must come first",
                  name);
    if (spec.kind == input_kind::token) {
      if (spec.arg.type != argument_spec::kind::token)
        verify_fail("signature.token", "token input '" + name + "' must be a TokenArgument", name);
      continue;
    }
    verify_state_input(p, spec, phs[i], targets);
  }
  return targets;
}

/// Checks the output specs against the graph's outputs: names, kind order, and mutation targets in `targets`.
inline void verify_output_specs(const exported_program& p, const signature_targets& targets) {
  const auto& sig = p.signature();
  const auto out_node = p.graph().output_node();
  const auto out_args = out_node.args();
  if (out_args.size() != sig.output_specs.size())
    verify_fail("signature.output_count", "the graph returns " + std::to_string(out_args.size()) +
                                              " values but the signature has " +
                                              std::to_string(sig.output_specs.size()) + " output specs");
  int stage = 0;  // 0: tokens, 1: mutations, 2: user outputs and the rest
  for (std::size_t i = 0; i < out_args.size(); ++i) {
    const auto& spec = sig.output_specs[i];
    const auto& a = out_args[i];
    const std::string got = a.is_value() ? a.as_value().name() : std::string("a constant");
    if (spec.arg.type == argument_spec::kind::constant) {
      if (a.is_value() || !(a == spec.arg.constant))
        verify_fail("signature.output_name", "output " + std::to_string(i) +
                                                 " should be the constant of its spec, got " + got);
    } else if (!a.is_value() || a.as_value().name() != spec.arg.name) {
      verify_fail("signature.output_name", "output spec " + std::to_string(i) + " names '" +
                                               spec.arg.name + "' but the graph returns " + got);
    }
    const int s = spec.kind == output_kind::token ? 0
                  : (spec.kind == output_kind::buffer_mutation ||
                     spec.kind == output_kind::parameter_mutation ||
                     spec.kind == output_kind::user_input_mutation)
                      ? 1
                      : 2;
    if (s < stage)
      verify_fail("signature.output_order",
                  "output '" + spec.arg.name + "' (" + std::string(to_string(spec.kind)) +
                      ") comes after a later kind of output; order is tokens, mutations, then user outputs");
    stage = s;
    const std::string tgt = spec.target.value_or("");
    if (spec.kind == output_kind::buffer_mutation && !targets.buffers.count(tgt))
      verify_fail("signature.mutation_target",
                  "Mutation node " + spec.arg.name + " is neither a buffer nor a user input. "
                  "Buffers to mutate: '" + tgt + "' is not a buffer of this program");
    if (spec.kind == output_kind::parameter_mutation && !targets.parameters.count(tgt))
      verify_fail("signature.mutation_target", "output '" + spec.arg.name + "' mutates '" + tgt +
                                                   "', which is not a parameter of this program");
    if (spec.kind == output_kind::user_input_mutation && !targets.user_inputs.count(tgt))
      verify_fail("signature.mutation_target",
                  "Mutation node " + spec.arg.name + " is neither a buffer nor a user input. "
                  "'" + tgt + "' is not a user input of this program");
  }
}

}  // namespace detail

/// Checks the program: the graph, then torch.export's signature rules.
inline void verify(const exported_program& p, verify_options opts = {}) {
  opts.functional = opts.functional || p.dialect() == ir_dialect::aten;
  verify(p.graph(), opts);
  const auto targets = detail::verify_input_specs(p);
  detail::verify_output_specs(p, targets);
}

XPORT_END_NAMESPACE
