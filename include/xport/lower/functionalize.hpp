// xport/lower/functionalize.hpp: the functional form of a program (torch's functionalization).
// In-place ops become their out-of-place variants (`add_` -> `add`); a mutation through a view
// is written back to its base with the matching scatter (`select_scatter`, `slice_scatter`, ...)
// and views of a mutated base are regenerated before their next read; BatchNorm's running
// statistics (which LibTorch 1.13's schema does not mark as mutated) are computed explicitly;
// and every mutated placeholder becomes a mutation output, before the user outputs, as
// torch.export orders them: `buffer_mutation` for buffers, `user_input_mutation` for inputs.
#pragma once

#include <cstddef>        // std::size_t
#include <cstdint>        // std::int64_t
#include <optional>       // std::optional
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::move
#include <vector>         // std::vector

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <ATen/core/dispatch/Dispatcher.h>

#include <xport/program/builder.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>
#include <xport/ir/program.hpp>
#include <xport/ops/aliasing.hpp>
#include <xport/ops/auto_functionalize.hpp>
#include <xport/ops/op_sets.hpp>

XPORT_BEGIN_NAMESPACE

/// Functionalization cannot express a program (a mutation through an unsupported view, an
/// in-place op without an out-of-place variant).
class functionalize_error : public error {
 public:
  using error::error;
};

namespace detail {

/// Lowering re-runs a program's calls on fake tensors: a custom object's methods would run on
/// them for real (they are its C++ code). torch's lowering threads such calls through
/// `with_effects` with their fake class; xport refuses the program instead.
inline void refuse_custom_objs(const exported_program& p, std::string_view what) {
  for (const auto& s : p.signature().input_specs)
    if (s.kind == input_kind::custom_obj)
      throw error("xport.lower.custom_obj",
                  std::string(what) + ": the program takes the custom object '" + s.target.value_or(s.arg.name) + "' (" +
                      s.arg.class_fqn + "), and xport lowers no program with custom objects (their methods cannot run "
                      "on fake tensors); lower it in Python (ep.run_decompositions()) and load the archive torch writes, "
                      "whose with_effects calls xport runs");
}

inline bool is_view_op(const op_info& op) {
  if (op.is_mutable || is_maybe_alias_op(op.name)) return false;
  const auto& rets = op.schema().returns();
  if (rets.empty()) return false;
  for (const auto& r : rets) {
    const auto* ai = r.alias_info();
    if (ai && !ai->isWrite()) return true;
    // Tensor(a)[] returns (split, unbind, chunk): the alias is on the list's elements
    if (r.type()->kind() == c10::TypeKind::ListType && !ai) {
      const auto& args = op.schema().arguments();
      if (!args.empty() && args[0].alias_info() && !args[0].alias_info()->isWrite()) return true;
    }
  }
  return false;
}

inline bool is_batch_norm_with_stats(const node& n) {
  const auto& name = n.op().name;
  if (!is_batch_norm_op(name)) return false;
  const auto args = n.args();
  // (input, weight, bias, running_mean, running_var, training, momentum, eps, ...)
  return args.size() >= 8 && args[3].is_value() && args[4].is_value() && args[5].is_bool() && args[5].as_bool();
}

class functionalizer {
 public:
  explicit functionalizer(const exported_program& src) : src_(src) {}

  exported_program run() {
    const auto& g = src_.graph();
    const auto phs = g.placeholders();
    const auto& specs = src_.signature().input_specs;
    for (std::size_t i = 0; i < phs.size(); ++i) {
      const value pv = phs[i].output(0);
      const value nv = b_.placeholder(specs.at(i), pv.type());
      nv.producer().set_source(phs[i].source());
      nv.producer().copy_custom_meta_from(phs[i]);
      base_of(pv);
      cur_[pv.impl()] = nv;
    }
    for (auto n : g.nodes()) {
      if (!n.is_call()) continue;
      b_.like(n);
      if (is_batch_norm_with_stats(n)) batch_norm(n);
      else if (n.op().inplace_view) inplace_view(n);
      else if (auto_functionalizable(n.op())) auto_functionalized(n);
      else if (n.op().is_mutable) mutation(n);
      else if (const auto r = result_aliasing(n)) maybe_alias(n, *r);
      else copy(n, is_view_op(n.op()));
    }
    // mutated placeholders first (in input order), then the user outputs
    for (std::size_t i = 0; i < phs.size(); ++i) {
      const value pv = phs[i].output(0);
      if (version(pv) == 0) continue;
      const auto& spec = specs[i];
      switch (spec.kind) {
        case input_kind::buffer: b_.output(get(pv), output_kind::buffer_mutation, spec.target); break;
        case input_kind::parameter: b_.output(get(pv), output_kind::parameter_mutation, spec.target); break;
        case input_kind::user_input: b_.output(get(pv), output_kind::user_input_mutation, spec.arg.name); break;
        default:
          throw functionalize_error("xport.functionalize.constant_mutation",
                                    "the program mutates constant '" + spec.target.value_or(spec.arg.name) +
                                        "'; register it as a buffer");
      }
    }
    const auto outs = g.output_node().args();
    const auto& out_specs = src_.signature().output_specs;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const auto& spec = out_specs.at(i);
      if (spec.kind == output_kind::buffer_mutation || spec.kind == output_kind::user_input_mutation ||
          spec.kind == output_kind::parameter_mutation)
        continue;  // already functional input: re-derived above
      if (!outs[i].is_value()) {  // a constant output (None): returned as it is
        b_.output_arg(outs[i], spec.kind, spec.target);
        continue;
      }
      b_.output(get(outs[i].as_value()), spec.kind, spec.target);
    }
    b_.set_state(src_.state_dict(), src_.constants());
    b_.set_examples(src_.example_inputs());
    auto p = std::move(b_).build(ir_dialect::aten);
    p.set_call_spec(src_.in_spec(), src_.out_spec());
    p.range_constraints_mut() = src_.range_constraints();
    return p;
  }

 private:
  // One step from a base to a view: the view node (in the source graph) and which of its outputs.
  struct view_step {
    node n;
    std::size_t out = 0;
    const op_info* op = nullptr;  // the view op to replay, when not n's own (in-place views)
  };
  struct alias {
    const value_impl* base;
    std::vector<view_step> chain;
  };
  struct materialized {
    value v;
    std::uint64_t version;
  };

  const alias& base_of(value v) {
    auto it = alias_.find(v.impl());
    if (it == alias_.end()) it = alias_.emplace(v.impl(), alias{v.impl(), {}}).first;
    return it->second;
  }
  std::uint64_t version(value v) { return version_[base_of(v).base]; }

  /// The new-graph value holding `v`'s current contents (regenerating a stale view).
  value get(value v) {
    const alias a = base_of(v);
    if (a.chain.empty()) return cur_.at(a.base);
    const auto ver = version_[a.base];
    if (auto it = views_.find(v.impl()); it != views_.end() && it->second.version == ver) return it->second.v;
    value x = cur_.at(a.base);
    for (const auto& step : a.chain) x = replay(step, x);
    views_[v.impl()] = {x, ver};
    return x;
  }

  // A view step applied to `input` in the new graph (same op, same constant arguments).
  value replay(const view_step& step, value input) {
    auto args = std::vector<argument>(step.n.args().begin(), step.n.args().end());
    args[0] = input;
    auto types = std::vector<value_type>();
    for (auto o : step.n.outputs()) types.push_back(o.type());
    auto r = b_.record(step.op ? *step.op : step.n.op(), std::move(args), std::move(types));
    return r.output(step.out);
  }

  // Arguments with every value replaced by its current contents.
  std::vector<argument> current_args(const node& n) {
    std::vector<argument> args(n.args().begin(), n.args().end());
    for (auto& a : args) a.for_each_value([&](value& v) { v = get(v); });
    return args;
  }

  void copy(const node& n, bool view) {
    std::vector<value_type> types;
    for (auto o : n.outputs()) types.push_back(o.type());
    auto r = b_.record(n.op(), current_args(n), std::move(types));
    for (std::size_t i = 0; i < n.num_outputs(); ++i) {
      const value src = n.output(i), dst = r.output(i);
      if (view && n.num_inputs() > 0 && n.args()[0].is_value()) {
        const alias in = base_of(n.args()[0].as_value());
        alias out = in;
        out.chain.push_back({n, i});
        alias_[src.impl()] = std::move(out);
        views_[src.impl()] = {dst, version_[in.base]};
      } else {
        alias_[src.impl()] = alias{src.impl(), {}};
        cur_[src.impl()] = dst;
      }
    }
  }

  // An op that may return its input (ops/aliasing.hpp), as its rule decides this call: its
  // input itself is no new value (a write through it reaches what the input is), a view is a view.
  void maybe_alias(const node& n, returns r) {
    if (r != returns::input) return copy(n, r == returns::view);
    const value in = n.args()[0].as_value();
    const alias a = base_of(in);
    alias_[n.output(0).impl()] = a;
    if (auto it = views_.find(in.impl()); it != views_.end()) views_[n.output(0).impl()] = it->second;
  }

  // The out-of-place twin of an in-place op: same name without `_`, and the overload whose
  // argument names match (`add_.Tensor` -> `add.Tensor`, `bernoulli_.float` -> `bernoulli.p`,
  // `transpose_` -> `transpose.int`).
  static const op_info* functional_variant(const op_info& op) {
    std::string name = op.name;
    if (name.size() > 1 && name.back() == '_') name.pop_back();
    else return nullptr;
    if (const auto* f = try_find_op(op.overload.empty() ? name : name + "." + op.overload)) return f;
    const auto& want = op.schema().arguments();
    for (const auto& n : c10::Dispatcher::singleton().getAllOpNames()) {
      if (n.name != name) continue;
      const auto* f = try_find_op(n.overload_name.empty() ? name : name + "." + n.overload_name);
      if (!f || f->is_mutable) continue;
      const auto& got = f->schema().arguments();
      bool same = got.size() == want.size();
      for (std::size_t i = 0; same && i < got.size(); ++i) same = got[i].name() == want[i].name();
      if (same) return f;
    }
    return nullptr;
  }

  // An in-place view op (transpose_, squeeze_, ...) changes how its argument views its storage,
  // not the data: its output is a view of the same base, made by the out-of-place view op.
  void inplace_view(const node& n) {
    const auto* f = functional_variant(n.op());
    if (!f || !n.args()[0].is_value())
      throw functionalize_error("xport.functionalize.no_functional_variant",
                                n.op().qualified + " (node '" + n.name() + "') has no out-of-place view variant");
    const value target = n.args()[0].as_value();
    const alias in = base_of(target);
    auto args = current_args(n);
    const value dst = b_.call_bound(*f, std::move(args)).out();
    alias out = in;
    out.chain.push_back({n, 0, f});
    alias_[n.output(0).impl()] = std::move(out);
    views_[n.output(0).impl()] = {dst, version_[in.base]};
  }

  // An in-place op: compute the new contents out of place, then write them to the base.
  void mutation(const node& n) {
    const auto& op = n.op();
    const auto& params = op.schema().arguments();
    std::size_t written = params.size();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i].alias_info() && params[i].alias_info()->isWrite()) written = i;
    if (written == params.size() || !n.args()[written].is_value())
      throw functionalize_error("xport.functionalize.unsupported_mutation",
                                op.qualified + " (node '" + n.name() + "') mutates something functionalization cannot track");
    const auto* f = functional_variant(op);
    if (!f || written != 0)
      throw functionalize_error("xport.functionalize.no_functional_variant",
                                op.qualified + " (node '" + n.name() + "') has no out-of-place variant (" +
                                    op.name.substr(0, op.name.size() - 1) +
                                    "); functionalization needs one, or a decomposition of the op");
    const value target = n.args()[0].as_value();
    auto args = current_args(n);
    value fresh = b_.call_bound(*f, std::move(args));
    // in-place ops keep the target's dtype (add_ of an int tensor and a float stays int)
    const auto& want = target.meta();
    if (fresh.meta().dtype != want.dtype) fresh = b_.call("aten::_to_copy", {fresh}, {{"dtype", want.dtype}});
    if (fresh.meta().size_hints() != want.size_hints())
      throw functionalize_error("xport.functionalize.shape",
                                op.qualified + " (node '" + n.name() + "') changes the shape of its target");
    write(target, fresh);
    // the in-place op's output is the target itself
    alias_[n.output(0).impl()] = base_of(target);
    if (!base_of(target).chain.empty()) views_[n.output(0).impl()] = {fresh, version(target)};
  }

  // A custom op that writes to its arguments: one auto_functionalized_v2 call, as torch lowers
  // it (ops/auto_functionalize.hpp), each written argument its own base; the call's new bases
  // are then written to what the op wrote (through their bases, for views).
  void auto_functionalized(const node& n) {
    const auto& op = n.op();
    const auto& params = op.schema().arguments();
    const auto now = current_args(n);
    std::vector<value> targets;  // the source values written, each once
    const auto base_index = [&](const value& v) -> std::int64_t {
      for (std::size_t i = 0; i < targets.size(); ++i)
        if (targets[i] == v) return static_cast<std::int64_t>(i);
      targets.push_back(v);
      return static_cast<std::int64_t>(targets.size() - 1);
    };
    const auto pair = [](std::string name, argument v) { return argument(argument::list_type{argument(std::move(name)), std::move(v)}); };
    argument::list_type kwargs, written, bases;
    const auto src = n.args();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& name = params[i].name();
      if (!params[i].alias_info() || !params[i].alias_info()->isWrite()) {
        kwargs.push_back(pair(name, now[i]));
      } else if (src[i].is_value()) {
        written.push_back(pair("_" + name + "_base_index", base_index(src[i].as_value())));
      } else if (src[i].is_none()) {
        written.push_back(pair("_" + name + "_base_index", none));
      } else {
        const auto& items = src[i].as_list();
        written.push_back(pair("_" + name + "_length", static_cast<std::int64_t>(items.size())));
        for (std::size_t k = 0; k < items.size(); ++k)
          written.push_back(pair("_" + name + "_" + std::to_string(k) + "_base_index", base_index(items[k].as_value())));
      }
    }
    kwargs.insert(kwargs.end(), written.begin(), written.end());
    for (const auto& t : targets) bases.emplace_back(get(t));
    kwargs.push_back(pair("_all_bases", argument(std::move(bases))));
    const node call = b_.call_bound(find_op("higher_order::auto_functionalized_v2"), {argument(op.qualified), argument(std::move(kwargs))});
    const auto n_results = call.num_outputs() - targets.size();
    for (std::size_t j = 0; j < targets.size(); ++j) write(targets[j], call.output(n_results + j));
    for (std::size_t k = 0; k < n.num_outputs() && k < n_results; ++k) {
      alias_[n.output(k).impl()] = alias{n.output(k).impl(), {}};
      cur_[n.output(k).impl()] = call.output(k);
    }
  }

  // `target` (a base, or a view of one) now holds `contents`.
  void write(value target, value contents) {
    const alias a = base_of(target);
    if (a.chain.empty()) {
      cur_[a.base] = contents;
    } else {
      // the views from the base down to the target, at the current version
      std::vector<value> levels{cur_.at(a.base)};
      for (std::size_t i = 0; i + 1 < a.chain.size(); ++i) levels.push_back(replay(a.chain[i], levels.back()));
      value v = contents;
      for (std::size_t i = a.chain.size(); i-- > 0;) v = scatter(a.chain[i], levels[i], v);
      cur_[a.base] = v;
      views_[target.impl()] = {contents, version_[a.base] + 1};
    }
    ++version_[a.base];
  }

  // The inverse of one view step: `base` with `src` written where the view reads.
  value scatter(const view_step& step, value base, value src) {
    const auto& op = step.op ? *step.op : step.n.op();
    const auto args = step.n.args();
    const auto& name = op.name;
    if (name == "aten::select") return b_.call("aten::select_scatter", {base, src, args[1], args[2]});
    if (name == "aten::slice")
      return b_.call("aten::slice_scatter", {base, src, args[1], args[2], args[3], args[4]});
    if (name == "aten::diagonal") return b_.call("aten::diagonal_scatter", {base, src, args[1], args[2], args[3]});
    if (name == "aten::as_strided")
      return b_.call("aten::as_strided_scatter", {base, src, args[1], args[2], args[3]});
    if (name == "aten::transpose") return b_.call("aten::transpose.int", {src, args[1], args[2]});
    if (name == "aten::t") return b_.call("aten::t", {src});
    if (name == "aten::permute") {
      const auto& dims = args[1].as_list();
      std::vector<std::int64_t> inv(dims.size());
      const auto rank = static_cast<std::int64_t>(dims.size());
      for (std::size_t i = 0; i < dims.size(); ++i) {
        auto d = dims[i].as_int();
        inv[static_cast<std::size_t>(d < 0 ? d + rank : d)] = static_cast<std::int64_t>(i);
      }
      return b_.call("aten::permute", {src, inv});
    }
    if (name == "aten::view" || name == "aten::_reshape_alias" || name == "aten::unsqueeze" ||
        name == "aten::squeeze" || name == "aten::alias" || name == "aten::detach" || name == "aten::_unsafe_view" ||
        in_set(name, reshape_ops) || in_set(name, at_least_ops))
      return b_.call("aten::view", {src, base.meta().size_hints()});
    if (name == "aten::split" || name == "aten::split_with_sizes" || name == "aten::unbind") {
      const auto dim = name == "aten::unbind" ? args[1].as_int() : args[2].as_int();
      const auto rank = base.meta().dim();
      const auto d = dim < 0 ? dim + rank : dim;
      if (name == "aten::unbind") return b_.call("aten::select_scatter", {base, src, d, static_cast<std::int64_t>(step.out)});
      std::int64_t start = 0;
      for (std::size_t k = 0; k < step.out; ++k) start += step.n.output(k).meta().sizes[static_cast<std::size_t>(d)].hint();
      const auto len = step.n.output(step.out).meta().sizes[static_cast<std::size_t>(d)].hint();
      return b_.call("aten::slice_scatter", {base, src, d, start, start + len, 1});
    }
    throw functionalize_error("xport.functionalize.unsupported_view",
                              "a tensor made by " + op.qualified + " (node '" + step.n.name() +
                                  "') is mutated in place; functionalization cannot write it back to its "
                                  "base. Mutate a clone, or the base itself");
  }

  // BatchNorm in train mode with running statistics: the output from native_batch_norm without
  // the statistics, and their updates written out (LibTorch 1.13 does not mark them mutated).
  void batch_norm(const node& n) {
    const auto args = current_args(n);
    const value x = args[0].as_value();
    const double momentum = args[6].as_double();
    auto nbn = b_.call("aten::native_batch_norm", {args[0], args[1], args[2], none, none, true, momentum, args[7]});
    std::vector<std::int64_t> dims;
    for (std::int64_t d = 0; d < x.meta().dim(); ++d)
      if (d != 1) dims.push_back(d);
    const value mean = b_.call("aten::mean.dim", {x, dims});
    const value var = b_.call("aten::var.correction", {x, dims}, {{"correction", 1}});
    const auto update = [&](value running, value batch) {
      value kept = b_.call("aten::mul.Tensor", {running, 1.0 - momentum});
      value add = b_.call("aten::mul.Tensor", {batch, momentum});
      return b_.call("aten::add.Tensor", {kept, add}).out();
    };
    const value rm = n.args()[3].as_value(), rv = n.args()[4].as_value();
    write(rm, update(args[3].as_value(), mean));
    write(rv, update(args[4].as_value(), var));
    if (n.op().name == "aten::batch_norm") {
      alias_[n.output(0).impl()] = alias{n.output(0).impl(), {}};
      cur_[n.output(0).impl()] = nbn[0];
    } else {
      for (std::size_t i = 0; i < 3; ++i) {
        alias_[n.output(i).impl()] = alias{n.output(i).impl(), {}};
        cur_[n.output(i).impl()] = nbn[i];
      }
    }
  }

  const exported_program& src_;
  program_builder b_;
  std::unordered_map<const value_impl*, alias> alias_;              // source value -> base + views
  std::unordered_map<const value_impl*, value> cur_;                // source base -> new contents
  std::unordered_map<const value_impl*, std::uint64_t> version_;    // source base -> mutations
  std::unordered_map<const value_impl*, materialized> views_;       // source view -> new value
};

}  // namespace detail

/// The functional form of `p` (torch's inference IR without decompositions, dialect ATEN):
/// no in-place op, mutations returned as outputs. `p` is left as it is.
inline exported_program functionalize(const exported_program& p) {
  detail::refuse_custom_objs(p, "functionalize");
  return detail::functionalizer(p).run();
}

XPORT_END_NAMESPACE
