// xport/trace/symbolic.hpp: symbolic sizes for a dynamic export.
//
// Note [Capturing at several sizes]: LibTorch's C++ ops compute sizes as plain integers (meta
// kernels, and `size()` in user code), so one capture cannot see how a size depends on a
// dynamic dimension. Export therefore captures the program once at the example sizes and again
// with each dynamic dimension moved to another value (and once with all of them moved), on meta
// tensors: a few captures cost well under a millisecond each. Then:
//  - the captures must record the same ops in the same order, with the same arguments except
//    integers; otherwise the traced code decided something on a size (it specialized the dim),
//    and export fails with torch's "Constraints violated" report naming the dim and the op;
//  - every size of every node, and every integer argument that changed (sizes the code computed
//    with `size()`), is fitted as an exact expression of the dims: a linear form in the dims, or
//    c*P + b where P is a product of the node's input sizes or a shape rule's result (convolution
//    and pooling windows: `((s0 - 3)//2) + 1`), checked against every capture.
// Integer arguments that depend on a dim are recorded as symbolic arguments, evaluated from the
// inputs' sizes on every run. Because the other sizes are >= 2, an example size of 0 or 1 is
// never specialized silently: either the program is right for every size, or a capture fails
// and export names the op.
// Note [Floats from sizes]: a float argument that differs between captures is a SymFloat: of
// a program being lowered, the one of its SymFloats (or SymBools, for a bool) whose value is the
// argument's in every capture (scalars_moving makes the captures tell them apart); of C++ code,
// one of a few forms in one dim (`1.0 / x.size(0)` is FloatTrueDiv(1.0, ToFloat(s77)), also
// c*s, s/c, s**0.5, s**-0.5, a*s + b), kept only when it gives the captured number bit for bit
// in every capture. Anything else is refused as a specialization, with the values seen.
#pragma once

#include <algorithm>  // std::max
#include <cmath>      // std::isfinite
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <optional>   // std::optional
#include <functional>  // std::function
#include <set>        // std::set
#include <span>       // std::span
#include <string>     // std::string
#include <string_view>  // std::string_view
#include <vector>     // std::vector

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <xport/config.hpp>
#include <xport/ops/higher_order.hpp>
#include <xport/ops/op_sets.hpp>
#include <xport/ops/schema.hpp>
#include <xport/ops/shape_formulas.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/trace/dynamic.hpp>
#include <xport/trace/unbacked.hpp>
#include <xport/ir/unbacked.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Thrown inside the dynamic export when a capture at other sizes shows that the code fixes a
/// dim; caught to fall back to static for Dim::automatic, reported otherwise.
struct dim_specialized {
  int root;
  std::string why;
};
/// Two dims the code needs equal (they work when moved together).
struct dims_related {
  int root, other;
  std::string why;
};
/// A dim that works only in part of its range: [lo, hi] is the part found to work.
struct dim_narrowed {
  int root;
  std::int64_t lo, hi;
  std::int64_t bad;
  std::string why;
};

/// The dims of a symbolic program and their values in each capture (0 = the example's; capture
/// j in 1..k moved dim j-1 alone; the last moved all of them).
struct sym_runs {
  std::vector<sym_int> symbols;
  std::vector<std::string> dim_names;           ///< for messages: `batch`
  std::vector<std::vector<std::int64_t>> values;  ///< per capture, per symbol
  std::vector<int> moved;                         ///< per capture: the one dim it moved, or -1
  std::vector<std::int64_t> mins, maxs;           ///< per symbol: its range (int_oo: none above)
  std::vector<sym_relation> relations;            ///< the assertions between sizes every capture holds
};

class symbolic_fitter {
 public:
  explicit symbolic_fitter(const sym_runs& runs) : runs_(runs) {
    for (const auto& s : runs.symbols) names_.push_back(s.str());
  }

  /// The value of `e` in capture `run`.
  [[nodiscard]] std::int64_t eval(const sym_int& e, std::size_t run) const {
    if (e.is_constant()) return e.hint();
    const auto& values = runs_.values[run];
    auto v = sym::eval(e, [&](std::string_view name) -> std::optional<std::int64_t> {
      for (std::size_t i = 0; i < names_.size(); ++i)
        if (names_[i] == name) return values[i];
      return std::nullopt;
    });
    return v.value_or(e.hint());
  }

  /// An exact expression taking value obs[r] in every capture r, or nullopt. `basis` holds
  /// candidate expressions (products of input sizes, shape-rule results).
  [[nodiscard]] std::optional<sym_int> fit(const std::vector<std::int64_t>& obs, const std::vector<sym_int>& basis,
                                           const std::vector<sym_int>& rules = {}) const {
    bool all_equal = true;
    for (auto v : obs) all_equal = all_equal && v == obs[0];
    if (all_equal) return sym_int(obs[0]);
    // a shape rule's result (exact by construction) first
    for (const auto& e : rules)
      if (matches(e, obs)) return e;
    // a linear form in the dims: capture j (1..k) moved dim j-1 alone
    const auto& symbols_ = runs_.symbols;
    const auto& runs_v = runs_.values;
    const std::size_t k = symbols_.size();
    if (obs.size() >= k + 2) {
      bool ok = true;
      sym_int e = 0;
      std::int64_t b = obs[0];
      for (std::size_t j = 0; j < k && ok; ++j) {
        const auto dx = runs_v[j + 1][j] - runs_v[0][j];
        const auto dy = obs[j + 1] - obs[0];
        if (dx == 0 || dy % dx != 0) {
          ok = false;
          break;
        }
        const auto c = dy / dx;
        if (c != 0) e = e + symbols_[j] * c;
        b -= c * runs_v[0][j];
      }
      if (ok) {
        e = e + b;
        if (matches(e, obs)) return e;
      }
    }
    for (const auto& p : basis) {
      if (p.is_constant()) continue;
      std::vector<std::int64_t> pv(obs.size());
      for (std::size_t r = 0; r < obs.size(); ++r) pv[r] = eval(p, r);
      for (std::size_t r = 1; r < obs.size(); ++r) {
        if (pv[r] == pv[0]) continue;
        const auto dy = obs[r] - obs[0], dx = pv[r] - pv[0];
        if (dy % dx != 0) break;
        const auto c = dy / dx, b = obs[0] - c * pv[0];
        if (c == 0) break;
        sym_int e = c == 1 ? p : p * c;
        if (b != 0) e = e + b;
        if (matches(e, obs)) return e;
        break;
      }
    }
    return std::nullopt;
  }

 private:
  bool matches(const sym_int& e, const std::vector<std::int64_t>& obs) const {
    for (std::size_t r = 0; r < obs.size(); ++r)
      if (eval(e, r) != obs[r]) return false;
    return true;
  }

  const sym_runs& runs_;
  std::vector<std::string> names_;
};

/// Values other than the example's for a dim to take in the extra captures: >= 2 (so no size
/// is 0 or 1), inside the dim's range, steps of 8 first (keeps the sizes' divisibility by 2, 4, 8).
inline std::vector<std::int64_t> other_sizes(std::int64_t h, std::int64_t min, std::int64_t max) {
  std::vector<std::int64_t> out;
  const auto lo = std::max<std::int64_t>(min, 2);
  for (auto c : {h + 8, h + 16, h - 8, h + 24, h - 16, h + 1, h + 2, h - 1, h - 2, h + 3, lo, lo + 1, max}) {
    if (c < lo || c > max || c == h || std::find(out.begin(), out.end(), c) != out.end()) continue;
    out.push_back(c);
    if (out.size() == 2) break;
  }
  return out;
}

/// The sizes each user input gets for one assignment of the dims.
inline std::vector<std::vector<std::int64_t>> input_sizes_at(const dyn_plan& plan, const std::vector<at::Tensor>& examples,
                                                             const std::vector<std::int64_t>& values) {
  std::vector<std::vector<std::int64_t>> out(examples.size());
  for (std::size_t i = 0; i < examples.size(); ++i) {
    auto sizes = examples[i].sizes().vec();
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      const auto& dd = plan.leaves[i][d];
      if (dd.root >= 0) sizes[d] = dd.a * values[static_cast<std::size_t>(dd.root)] + dd.b;
    }
    out[i] = std::move(sizes);
  }
  return out;
}

inline std::string assignment_text(const std::vector<std::string>& names, const std::vector<std::int64_t>& values,
                                   int only = -1) {
  std::string s;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (only >= 0 && static_cast<int>(i) != only) continue;
    s += (s.empty() ? "" : ", ") + names[i] + " = " + std::to_string(values[i]);
  }
  return s;
}

inline std::string node_text(const node& n) {
  std::string s = "'" + n.name() + "' (" + (n.is_call() ? n.op().qualified : n.target()) + ")";
  if (const auto& src = n.source(); src && !src->file.empty())
    s += " at " + src->file + ":" + std::to_string(src->line);
  return s;
}

/// Compares one argument of two captures; collects the positions of ints, floats and bools that
/// differ (a float or bool may be a SymFloat / SymBool of the program lowered: fit_argument).
inline bool same_shape_args(const argument& a, const argument& b, std::vector<std::pair<const argument*, const argument*>>& ints) {
  if (a.type() != b.type()) return false;
  if (a.is_int() || a.is_double() || a.is_bool()) {
    if (!(a == b)) ints.emplace_back(&a, &b);
    return true;
  }
  if (a.is_value()) return a.as_value().name() == b.as_value().name();
  if (a.is_graph()) return a.as_graph()->name == b.as_graph()->name;  // their nodes are compared on their own
  if (a.is_list()) {
    if (a.as_list().size() != b.as_list().size()) return false;
    for (std::size_t i = 0; i < a.as_list().size(); ++i)
      if (!same_shape_args(a.as_list()[i], b.as_list()[i], ints)) return false;
    return true;
  }
  return a == b;
}

inline sym_shape contiguous_strides(const sym_shape& sizes) {
  sym_shape st(sizes.size());
  sym_int stride = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    st[i] = stride;
    stride = sizes[i].is_constant() ? stride * std::max<std::int64_t>(sizes[i].hint(), 1) : stride * sizes[i];
  }
  return st;
}

inline bool strides_contiguous(const tensor_meta& m) {
  std::int64_t expect = 1;
  for (std::size_t i = m.sizes.size(); i-- > 0;) {
    if (m.sizes[i].hint() != 1 && m.strides[i].hint() != expect) return false;
    expect *= std::max<std::int64_t>(m.sizes[i].hint(), 1);
  }
  return true;
}

inline std::string values_text(const std::vector<std::int64_t>& obs, const sym_runs& runs) {
  std::string s;
  for (std::size_t r = 0; r < obs.size(); ++r)
    s += (s.empty() ? "" : ", ") + std::to_string(obs[r]) + " at " + assignment_text(runs.dim_names, runs.values[r]);
  return s;
}

/// Replaces the int (or number) at `site` (inside `base`, mirrored in `out`) by `e`.
inline bool replace_int(argument& out, const argument* site, const argument& base, const argument& e) {
  if (&base == site) {
    out = e;
    return true;
  }
  if (base.is_list())
    for (std::size_t i = 0; i < base.as_list().size(); ++i)
      if (replace_int(out.as_list()[i], site, base.as_list()[i], e)) return true;
  return false;
}

/// A node of a program or of one of its subgraphs, in the order the symbolic passes visit them:
/// a control-flow call's subgraphs come just before it, each right after its operands.
struct flat_node {
  node n;
  value source;         ///< for a subgraph's placeholder: the operand the call passes it
  bool slice = false;   ///< ... one slice of it (torch.map's and torch.scan's xs: sizes without the leading dim)
};

inline void flatten_nodes(const graph& g, std::vector<flat_node>& out, bool skip_placeholders = false) {
  for (auto n : g.nodes()) {
    if (skip_placeholders && n.is_placeholder()) continue;
    if (n.is_call() && n.op().higher_order) {
      const auto operands = subgraph_operands(n);
      const auto [first_row, last_row] = row_operands(n);
      for (const auto& a : n.args()) {
        if (!a.is_graph()) continue;
        std::size_t i = 0;
        for (auto inner : a.as_graph()->body.nodes()) {
          if (!inner.is_placeholder()) break;
          const auto& op = i < operands.size() ? operands[i] : argument();
          out.push_back({inner, op.is_value() ? op.as_value() : value(), i >= first_row && i < last_row});
          ++i;
        }
        flatten_nodes(a.as_graph()->body, out, /*skip_placeholders=*/true);
      }
    }
    out.push_back({n, value()});
  }
}

inline std::vector<flat_node> flat_nodes(const graph& g) {
  std::vector<flat_node> out;
  flatten_nodes(g, out);
  return out;
}

/// The first difference between the ops two captures record ("" when they record the same).
/// With `layout_only`, ops that only change memory layout (`contiguous`, `clone`) are skipped
/// on both sides: `contiguous()` records nothing on a tensor that already is, which size-1 dims
/// make more tensors be, and the program with the copy is still right there.
inline std::string structure_difference(const exported_program& base, const exported_program& probe,
                                        bool layout_only = false) {
  auto keep = [&](const node& n) {
    if (!layout_only || !n.is_call()) return true;
    const auto& name = n.op().name;
    return !is_layout_only_op(name);
  };
  std::vector<node> a, b;
  for (const auto& f : flat_nodes(base.graph()))
    if (keep(f.n)) a.push_back(f.n);
  for (const auto& f : flat_nodes(probe.graph()))
    if (keep(f.n)) b.push_back(f.n);
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i].kind() == b[i].kind() && (!a[i].is_call() || a[i].op_ptr() == b[i].op_ptr()))
    ++i;
  if (a.size() != b.size())
    return "the traced code records " + std::to_string(b.size()) + " nodes instead of " + std::to_string(a.size()) +
           (i < a.size() ? ", from node " + node_text(a[i]) + " on" : std::string());
  if (i < a.size()) return "node " + node_text(b[i]) + " is recorded instead of " + node_text(a[i]);
  return {};
}

/// A capture that shows the code fixed a dim: `what` happened in capture `r`.
inline dim_specialized specialized_at(const sym_runs& runs, std::size_t r, const std::string& what) {
  const int root = r < runs.moved.size() ? runs.moved[r] : -1;
  return {root, "with " + assignment_text(runs.dim_names, runs.values[r], root) + " instead of the example's " +
                    assignment_text(runs.dim_names, runs.values[0], root) + ", " + what};
}

/// Every capture records the ops of `base`, or the code takes another path at another size.
inline void require_same_ops(const exported_program& base, const std::vector<const exported_program*>& others,
                             const sym_runs& runs) {
  for (std::size_t r = 1; r < runs.values.size(); ++r)
    if (auto why = structure_difference(base, *others[r - 1]); !why.empty())
      throw specialized_at(runs, r, why + ": the traced code takes a different path depending on the size");
}

/// Gives a base capture symbolic sizes and arguments, node by node, from the captures at other
/// sizes. `runs[r]` is the dims' values in capture r (0 = the example).
class symbolic_maker {
 public:
  symbolic_maker(exported_program& base, const std::vector<const exported_program*>& others, const sym_runs& runs,
                 std::vector<sym_scalar> scalars = {})
      : runs_(runs), fit_(runs), nruns_(runs.values.size()), nodes_(nruns_), scalars_(std::move(scalars)) {
    base_ = flat_nodes(base.graph());
    for (const auto& f : base_) nodes_[0].push_back(f.n);
    for (std::size_t r = 1; r < nruns_; ++r)
      for (const auto& f : flat_nodes(others[r - 1]->graph())) nodes_[r].push_back(f.n);
  }

  /// Gives the user inputs (placeholders per `specs`) the sizes `user_input_sizes`, then fits every call node.
  void run(const std::vector<input_spec>& specs, const std::vector<sym_shape>& user_input_sizes) {
    std::size_t leaf = 0;
    std::size_t ph = 0;
    for (std::size_t i = 0; i < nodes_[0].size(); ++i) {
      const node n = nodes_[0][i];
      if (n.is_placeholder() && base_[i].source) {  // a subgraph's: typed as its operand is now
        const auto v = n.out();
        if (v.kind() != value_kind::tensor) continue;
        auto m = v.meta();
        const auto& from = base_[i].source.meta();
        if (base_[i].slice && !from.sizes.empty()) {  // a map's or scan's slice: a contiguous copy of one row
          m.sizes.assign(from.sizes.begin() + 1, from.sizes.end());
          m.strides = contiguous_strides(m.sizes);
          m.storage_offset = 0;
        } else {
          m.sizes = from.sizes;
          m.strides = from.strides;
          m.storage_offset = from.storage_offset;
        }
        v.set_meta(std::move(m));
        continue;
      }
      if (n.is_placeholder()) {
        const auto& spec = specs.at(ph++);
        if (spec.kind != input_kind::user_input) continue;
        const auto v = n.out();
        if (v.kind() != value_kind::tensor) continue;
        auto m = v.meta();
        const auto& sizes = user_input_sizes.at(leaf);
        if (sizes.size() != m.sizes.size())
          throw graph_error("xport.symbolic.inputs", "input " + v.name() + " changed rank while made symbolic");
        m.sizes = sizes;
        m.strides = contiguous_strides(m.sizes);
        v.set_meta(std::move(m));
        ++leaf;
        continue;
      }
      if (n.is_output()) continue;
      fit_node(i);
    }
  }

 private:
  /// Fails with what capture `r` shows: the code fixed a dim.
  [[noreturn]] void differs(std::size_t r, const std::string& what) const { throw specialized_at(runs_, r, what); }

  /// Fits call node `i` of the base: its integer arguments, then the sizes of its outputs.
  void fit_node(std::size_t i) {
    const node n = nodes_[0][i];
    std::vector<std::vector<sym_int>> input_shapes;
    for (auto v : n.inputs())
      if (v.kind() == value_kind::tensor) input_shapes.emplace_back(v.meta().sizes.begin(), v.meta().sizes.end());
    auto basis = size_basis(input_shapes);
    // then every size seen so far: a view back to [batch, frames, features] after a linear's
    // matmul on [batch*frames, features] reads `frames` from an earlier node, not its input
    basis.insert(basis.end(), seen_sizes_.begin(), seen_sizes_.end());
    // arguments: integers that differ become symbolic, anything else that differs specializes
    std::vector<argument> args(n.args().begin(), n.args().end());
    bool changed = false;
    for (std::size_t k = 0; k < args.size(); ++k) changed = fit_argument(i, k, basis, args[k]) || changed;
    if (changed) n.set_args(std::move(args));
    // sizes of every output
    std::size_t out_i = 0;
    for (auto v : n.outputs()) {
      const std::size_t oi = out_i++;
      if (v.kind() == value_kind::sym_int) fit_scalar_output(i, oi, v, basis);
      if (v.kind() != value_kind::tensor) continue;
      fit_output(i, oi, v, input_shapes, basis);
    }
  }

  /// Fits output `oi` of node `i`, an int (item()'s: Note [Unbacked sizes in a capture]).
  void fit_scalar_output(std::size_t i, std::size_t oi, value v, const std::vector<sym_int>& basis) const {
    std::vector<std::int64_t> obs(nruns_, v.type().scalar.hint());
    for (std::size_t r = 1; r < nruns_; ++r) obs[r] = nodes_[r][i].output(oi).type().scalar.hint();
    const auto e = fit_.fit(obs, basis);
    if (!e)
      throw dim_specialized{-1, "the int node " + node_text(nodes_[0][i]) + " gives is " + values_text(obs, runs_) +
                                    ", which xport cannot express in the dynamic dims"};
    v.set_type(value_type::of_sym_int(*e));
  }

  /// The products of trailing input dims from the first symbolic one on: what sizes are fitted in.
  static std::vector<sym_int> size_basis(const std::vector<std::vector<sym_int>>& input_shapes) {
    std::vector<sym_int> basis;
    for (const auto& s : input_shapes)
      for (std::size_t a = 0; a < s.size(); ++a) {
        sym_int p = 1;
        bool symbolic = false;
        for (std::size_t b = a; b < s.size(); ++b) {
          p = p * s[b];
          symbolic = symbolic || s[b].is_symbolic();
          if (symbolic) basis.push_back(p);
        }
      }
    return basis;
  }

  /// Makes each int of argument `k` of node `i` that differs between captures an expression in
  /// `arg` (a copy of it); returns whether any did.
  bool fit_argument(std::size_t i, std::size_t k, const std::vector<sym_int>& basis, argument& arg) const {
    const node n = nodes_[0][i];
    std::vector<std::vector<std::pair<const argument*, const argument*>>> diffs(nruns_);
    for (std::size_t r = 1; r < nruns_; ++r)
      if (!same_shape_args(n.args()[k], nodes_[r][i].args()[k], diffs[r])) {
        const auto& param = n.op().schema().arguments()[k].name();
        differs(r, "argument '" + param + "' of node " + node_text(n) + " is " + describe(nodes_[r][i].args()[k]) +
                       " instead of " + describe(n.args()[k]) +
                       ": the traced code computed it from the size (as a C++ number, which export cannot follow)");
      }
    // each differing int, by its address in the base argument
    std::vector<const argument*> sites;
    for (std::size_t r = 1; r < nruns_; ++r)
      for (const auto& [pa, pb] : diffs[r])
        if (std::find(sites.begin(), sites.end(), pa) == sites.end()) sites.push_back(pa);
    bool changed = false;
    for (const auto* site : sites) {
      if (!site->is_int()) {
        replace_int(arg, site, n.args()[k], fit_scalar(i, k, site, diffs));
        changed = true;
        continue;
      }
      std::vector<std::int64_t> obs(nruns_, site->as_int());
      for (std::size_t r = 1; r < nruns_; ++r)
        for (const auto& [pa, pb] : diffs[r])
          if (pa == site) obs[r] = pb->as_int();
      auto e = fit_.fit(obs, basis);
      if (!e) {
        const auto& param = n.op().schema().arguments()[k].name();
        throw dim_specialized{-1, "argument '" + param + "' of node " + node_text(n) + " is " + values_text(obs, runs_) +
                                      ": the traced code computed it from a dynamic size in a way xport cannot "
                                      "express (only linear forms, products and window sizes are recovered)"};
      }
      replace_int(arg, site, n.args()[k], *e);
      changed = true;
    }
    return changed;
  }

  /// The SymFloat / SymBool of the program lowered whose value in each capture is that of the
  /// number at `site` (argument `k` of node `i`; `diffs[r]` pairs the sites with capture r's).
  argument fit_scalar(std::size_t i, std::size_t k, const argument* site,
                      const std::vector<std::vector<std::pair<const argument*, const argument*>>>& diffs) const {
    const auto number = [](const argument& a) { return a.is_bool() ? (a.as_bool() ? 1.0 : 0.0) : a.as_double(); };
    std::vector<double> obs(nruns_, number(*site));
    for (std::size_t r = 1; r < nruns_; ++r)
      for (const auto& [pa, pb] : diffs[r])
        if (pa == site) obs[r] = number(*pb);
    const auto matches = [&](const sym_scalar& s) {
      for (std::size_t r = 0; r < nruns_; ++r) {
        try {
          if (s.eval([&](const sym_int& e) { return fit_.eval(e, r); }) != obs[r]) return false;
        } catch (const run_error&) {  // a division by a size that is 0 here: C++ gave inf or nan, a run raises
          if (std::isfinite(obs[r])) return false;
        }
      }
      return true;
    };
    for (const auto& s : scalars_)
      if (s.is_bool() == site->is_bool() && matches(s)) return s;
    if (site->is_double())
      for (const auto& s : float_forms(obs))
        if (matches(s)) return s;
    const node n = nodes_[0][i];
    std::string seen;
    for (std::size_t r = 0; r < nruns_; ++r)
      seen += (seen.empty() ? "" : ", ") + (site->is_bool() ? std::string(obs[r] != 0.0 ? "True" : "False") : python_float_repr(obs[r])) +
              " at " + assignment_text(runs_.dim_names, runs_.values[r]);
    throw dim_specialized{-1, "argument '" + n.op().schema().arguments()[k].name() + "' of node " + node_text(n) + " is " + seen +
                                  (scalars_.empty() ? ": the traced code computed it from the size (as a C++ number, which "
                                                      "export cannot follow)"
                                                    : ": a number computed from a dynamic size that is none of the program's "
                                                      "SymFloats or SymBools (the decomposition computed with it)")};
  }

  /// The forms a float computed from one dim in C++ takes (Note [Floats from sizes]), fitted to
  /// `obs` at the example: c*s, s/c, c/s, s**0.5, s**-0.5, a*s + b.
  std::vector<sym_scalar> float_forms(const std::vector<double>& obs) const {
    using op = sym_scalar::op;
    std::vector<sym_scalar> out;
    for (std::size_t j = 0; j < runs_.symbols.size(); ++j) {
      const auto s = sym_scalar::apply(op::to_float, sym_scalar::of(runs_.symbols[j]));
      const auto s0 = static_cast<double>(runs_.values[0][j]);
      const auto num = [](double c) { return sym_scalar::of(c); };
      if (s0 == 0) continue;
      out.push_back(sym_scalar::apply(op::mul, s, num(obs[0] / s0)));
      if (obs[0] != 0) out.push_back(sym_scalar::apply(op::float_truediv, s, num(s0 / obs[0])));
      out.push_back(sym_scalar::apply(op::float_truediv, num(obs[0] * s0), s));
      out.push_back(sym_scalar::apply(op::pow, s, num(0.5)));
      out.push_back(sym_scalar::apply(op::pow, s, num(-0.5)));
      for (std::size_t r = 1; r < nruns_; ++r) {
        const auto s1 = static_cast<double>(runs_.values[r][j]);
        if (s1 == s0) continue;
        const double a = (obs[r] - obs[0]) / (s1 - s0), b = obs[0] - a * s0;
        out.push_back(sym_scalar::apply(op::add, sym_scalar::apply(op::mul, s, num(a)), num(b)));
        break;
      }
    }
    return out;
  }

  /// Fits the sizes of output `oi` (value `v`) of node `i`, and its strides when a size is symbolic.
  void fit_output(std::size_t i, std::size_t oi, value v, const std::vector<std::vector<sym_int>>& input_shapes,
                  const std::vector<sym_int>& basis) {
    const node n = nodes_[0][i];
    auto m = v.meta();
    std::vector<const tensor_meta*> metas(nruns_);
    for (std::size_t r = 1; r < nruns_; ++r) {
      const auto w = nodes_[r][i].output(oi);
      if (w.kind() != value_kind::tensor || w.meta().sizes.size() != m.sizes.size())
        differs(r, "node " + node_text(n) + " returns a tensor of another rank");
      metas[r] = &w.meta();
    }
    std::vector<sym_int> rules;
    if (!input_shapes.empty()) window_candidates(n, input_shapes[0], rules);
    bool symbolic = false;
    for (std::size_t d = 0; d < m.sizes.size(); ++d) {
      std::vector<std::int64_t> obs(nruns_, m.sizes[d].hint());
      for (std::size_t r = 1; r < nruns_; ++r) obs[r] = metas[r]->sizes[d].hint();
      auto e = fit_.fit(obs, basis, rules);
      if (!e)
        throw dim_specialized{-1, "size " + std::to_string(d) + " of node " + node_text(n) + " is " +
                                      values_text(obs, runs_) +
                                      ", which xport cannot express in the dynamic dims (no linear form, product "
                                      "of input sizes or window rule gives it)"};
      symbolic = symbolic || e->is_symbolic();
      m.sizes[d] = *e;
      if (e->is_symbolic() && seen_text_.insert(e->str()).second) seen_sizes_.push_back(*e);
    }
    if (!symbolic) return;
    // strides: contiguous ones follow the sizes; others are fitted like sizes when they move
    const bool contiguous = strides_contiguous(m);
    if (contiguous) m.strides = contiguous_strides(m.sizes);
    else fit_strides(m, metas);
    v.set_meta(std::move(m));
  }

  /// Fits the strides of `m` (symbolic sizes, other strides) in the products of its trailing
  /// sizes; `metas[r]` is the output in capture r.
  void fit_strides(tensor_meta& m, const std::vector<const tensor_meta*>& metas) const {
    std::vector<sym_int> own;
    for (std::size_t a = 0; a < m.sizes.size(); ++a) {
      sym_int p = 1;
      for (std::size_t b = a; b < m.sizes.size(); ++b) {
        p = p * m.sizes[b];
        own.push_back(p);
      }
    }
    for (std::size_t d = 0; d < m.strides.size(); ++d) {
      std::vector<std::int64_t> obs(nruns_, m.strides[d].hint());
      for (std::size_t r = 1; r < nruns_; ++r)
        obs[r] = d < metas[r]->strides.size() ? metas[r]->strides[d].hint() : obs[0];
      if (auto e = fit_.fit(obs, own)) m.strides[d] = *e;
    }
  }

  const sym_runs& runs_;
  symbolic_fitter fit_;
  std::vector<sym_int> seen_sizes_;      // every symbolic output size fitted so far, once each
  std::set<std::string> seen_text_;
  std::size_t nruns_;
  std::vector<std::vector<node>> nodes_;  // per capture, its nodes in order (0 = the base's)
  std::vector<flat_node> base_;           // the base's, with the operand of each subgraph placeholder
  std::vector<sym_scalar> scalars_;       // the SymFloats and SymBools of the program lowered
};

/// Gives the base capture symbolic sizes and arguments from the captures at other sizes.
/// `runs[r]` is the dims' values in capture r (0 = the example).
inline void make_symbolic(exported_program& base, const std::vector<const exported_program*>& others,
                          const sym_runs& runs, const std::vector<sym_shape>& user_input_sizes,
                          std::vector<sym_scalar> scalars = {}) {
  symbolic_maker maker(base, others, runs, std::move(scalars));
  require_same_ops(base, others, runs);
  maker.run(base.signature().input_specs, user_input_sizes);
}

/// Whether every relation that `values` (per symbol of `symbols`, those of `known` only) decides holds.
inline bool relations_hold(std::span<const sym_relation> relations, const std::vector<sym_int>& symbols,
                           const std::vector<std::int64_t>& values, const std::vector<bool>& known) {
  const auto lookup = [&](std::string_view n) -> std::optional<std::int64_t> {
    for (std::size_t i = 0; i < symbols.size(); ++i)
      if (known[i] && symbols[i].str() == n) return values[i];
    return std::nullopt;
  };
  for (const auto& rel : relations) {
    const auto a = sym::eval(rel.lhs, lookup), b = sym::eval(rel.rhs, lookup);
    if (a && b && !rel.holds(*a, *b)) return false;
  }
  return true;
}

/// Moves the captures' values of the symbols so that the program's assertions between sizes
/// (`u0 <= s77`) hold in each: a capture outside them would compute what no run computes. Each
/// capture keeps the dims it does not move; a moved dim takes the first value nearest its choice
/// that satisfies the assertions decided so far (the example's values are kept where they do).
inline void satisfy_relations(sym_runs& r, const std::vector<std::int64_t>& mins, const std::vector<std::int64_t>& maxs,
                              std::span<const sym_relation> relations) {
  const std::size_t k = r.symbols.size();
  for (std::size_t run = 0; run < r.values.size(); ++run) {
    auto& vals = r.values[run];
    std::vector<bool> known(k, false);
    // which dims this capture may move: every one (the last), one (the others), the data-dependent ones (the first)
    const auto movable = [&](std::size_t j) {
      return run == k + 1 || (run > 0 && r.moved[run] == static_cast<int>(j)) || (run == 0 && sym::is_unbacked(r.symbols[j].str()));
    };
    for (std::size_t j = 0; j < k; ++j) known[j] = !movable(j);
    if (!relations_hold(relations, r.symbols, vals, known))
      throw export_error("xport.export.relation", "the example sizes do not satisfy the program's assertions between sizes");
    for (std::size_t j = 0; j < k; ++j) {
      if (!movable(j)) continue;
      known[j] = true;
      if (relations_hold(relations, r.symbols, vals, known)) continue;
      const auto h = r.symbols[j].hint();
      bool found = false;
      // sizes of 2 and up first (no 0/1 specialization); a data-dependent value may take 1 or 0
      // after (a capture that specializes on it differs from the others: a typed error, not a wrong fit)
      const auto floor = std::max<std::int64_t>(mins[j], 2);
      for (const auto lo : {floor, sym::is_unbacked(r.symbols[j].str()) ? std::max<std::int64_t>(mins[j], 0) : floor})
        for (std::int64_t step = 1; step <= 64 && !found; ++step)
          for (const auto c : {h + step, h - step}) {
            if (found || c < lo || c > maxs[j] || (run > 0 && c == r.values[0][j])) continue;
            vals[j] = c;
            found = relations_hold(relations, r.symbols, vals, known);
          }
      if (!found)
        throw export_error("xport.export.relation",
                           "no size of " + r.dim_names[j] + " near " + std::to_string(h) +
                               " satisfies the program's assertions between sizes together with the others' values; "
                               "widen the range of " + r.dim_names[j] + " or make it static");
    }
  }
}

/// Values for the captures of a program with dims `symbols` (ranges [mins, maxs]): the hints,
/// each dim moved alone, then all moved (to a second other value where the range allows).
inline sym_runs make_runs(std::vector<sym_int> symbols, std::vector<std::string> names,
                          const std::vector<std::int64_t>& mins, const std::vector<std::int64_t>& maxs,
                          std::span<const sym_relation> relations = {}) {
  sym_runs r;
  const std::size_t k = symbols.size();
  r.values.assign(k + 2, {});
  for (const auto& s : symbols) r.values[0].push_back(s.hint());
  for (std::size_t j = 0; j < k; ++j) {
    const auto alt = other_sizes(symbols[j].hint(), mins[j], maxs[j]);
    if (alt.empty())
      throw export_error("xport.export.dynamic_shapes",
                         "the range of " + names[j] + " allows one size only; make it static");
    r.values[j + 1] = r.values[0];
    r.values[j + 1][j] = alt[0];
    r.values[k + 1].push_back(alt.size() > 1 ? alt[1] : alt[0]);
  }
  r.moved.assign(k + 2, -1);
  for (std::size_t j = 0; j < k; ++j) r.moved[j + 1] = static_cast<int>(j);
  r.symbols = std::move(symbols);
  r.dim_names = std::move(names);
  if (!relations.empty()) satisfy_relations(r, mins, maxs, relations);
  r.mins = mins;
  r.maxs = maxs;
  r.relations.assign(relations.begin(), relations.end());
  return r;
}

/// The runs of a symbolic program, from its range constraints.
inline sym_runs runs_of(const exported_program& p) {
  std::vector<sym_relation> relations;
  std::vector<sym_int> symbols;
  std::vector<std::string> names;
  std::vector<std::int64_t> mins, maxs;
  for (const auto& rc : p.range_constraints()) {
    if (!rc.symbol.is_symbolic()) continue;
    symbols.push_back(rc.symbol);
    names.push_back(rc.name.empty() ? rc.symbol.str() : rc.name);
    mins.push_back(rc.min);
    maxs.push_back(rc.max.value_or(int_oo));
    relations.insert(relations.end(), rc.relations.begin(), rc.relations.end());
  }
  return make_runs(std::move(symbols), std::move(names), mins, maxs, relations);
}

/// Replaces every symbolic size and argument `e` of `g` (and of its subgraphs, copied: they are
/// shared) by `f(e)`.
template <class F>
void substitute_sizes(graph& g, const F& f) {
  const std::function<argument(const argument&)> arg = [&](const argument& a) -> argument {
    if (a.is_symbolic()) return f(a.as_sym());
    if (a.is_scalar()) {  // a SymFloat / SymBool whose sizes all become numbers is a number
      const auto s = a.as_scalar().map_sizes(f);
      if (!s.is_constant()) return s;
      return s.is_bool() ? argument(s.hint() != 0) : argument(s.hint());
    }
    if (!a.is_list()) return a;
    argument::list_type l;
    l.reserve(a.as_list().size());
    for (const auto& e : a.as_list()) l.push_back(arg(e));
    return l;
  };
  for (auto n : g.nodes()) {
    for (auto v : n.outputs()) {
      if (v.kind() == value_kind::sym_int && v.type().scalar.is_symbolic()) {
        v.set_type(value_type::of_sym_int(f(v.type().scalar)));
        continue;
      }
      if (v.kind() != value_kind::tensor) continue;
      auto m = v.meta();
      bool symbolic = m.storage_offset.is_symbolic();
      for (const auto& d : m.sizes) symbolic = symbolic || d.is_symbolic();
      for (const auto& d : m.strides) symbolic = symbolic || d.is_symbolic();
      if (!symbolic) continue;
      for (auto& d : m.sizes) d = f(d);
      for (auto& d : m.strides) d = f(d);
      m.storage_offset = f(m.storage_offset);
      v.set_meta(std::move(m));
    }
    if (!n.is_call()) continue;
    bool symbolic = false;
    for (const auto& a : n.args()) {
      symbolic = symbolic || a.is_symbolic() || a.is_scalar() || a.is_graph();
      if (a.is_list())
        for (const auto& e : a.as_list()) symbolic = symbolic || e.is_symbolic();
    }
    if (!symbolic) continue;
    std::vector<argument> args;
    for (const auto& a : n.args()) {
      if (!a.is_graph()) {
        args.push_back(arg(a));
        continue;
      }
      auto body = a.as_graph()->body.clone();
      substitute_sizes(body, f);
      args.emplace_back(std::make_shared<const subgraph>(subgraph{a.as_graph()->name, std::move(body)}));
    }
    n.set_args(std::move(args));
  }
}

/// Gives every value of `g` (and of its subgraphs, copied: they are shared) its sizes and
/// arguments at their values in capture `run`.
inline void specialize_graph(graph& g, const symbolic_fitter& fit, std::size_t run) {
  substitute_sizes(g, [&](const sym_int& e) { return sym_int(fit.eval(e, run)); });
}

/// `p` with its dims at their values in capture `run`: a static program.
inline exported_program specialize(const exported_program& p, const sym_runs& runs, std::size_t run) {
  symbolic_fitter fit(runs);
  auto q = p.clone();
  specialize_graph(q.graph_mut(), fit, run);
  q.range_constraints_mut().clear();
  return q;
}

/// A capture for `runs` (a copy of the example's with one dim moved, or two, values >= 2 in
/// their range, the assertions between sizes held) where `wanted(values)` holds, if one is
/// found: a dim set to another dim's value, one off it, twice or half it, or its bounds.
template <class Wanted>
std::optional<std::vector<std::int64_t>> run_where(const sym_runs& runs, const Wanted& wanted) {
  const auto& mins = runs.mins;
  const auto& maxs = runs.maxs;
  const auto& relations = runs.relations;
  const auto& base = runs.values[0];
  std::vector<std::int64_t> tries;
  for (auto v : base) tries.insert(tries.end(), {v, v - 1, v + 1, 2 * v, v / 2});
  const std::vector<bool> known(base.size(), true);
  const auto dims = std::min(base.size(), mins.size());
  const auto values_of = [&](std::size_t d) {  // the values dim d tries
    auto mine = tries;
    mine.insert(mine.end(), {mins[d], maxs[d] == int_oo ? mins[d] + 64 : maxs[d]});
    std::erase_if(mine, [&](std::int64_t v) { return v < std::max<std::int64_t>(mins[d], 2) || v > maxs[d] || v == base[d]; });
    mine.push_back(base[d]);  // (last: kept as it is, for the moves of the other dim alone)
    return mine;
  };
  for (std::size_t d = 0; d < dims; ++d)
    for (std::size_t e = d; e < dims; ++e)
      for (auto v : values_of(d))
        for (auto w : values_of(e)) {
          auto values = base;
          values[d] = v;
          values[e] = w;
          if (values != base && relations_hold(relations, runs.symbols, values, known) && wanted(values)) return values;
        }
  return std::nullopt;
}

/// The value of SymFloat / SymBool `s` with the dims at `values` (per symbol of `runs`).
inline double scalar_at(const sym_runs& runs, const sym_scalar& s, const std::vector<std::int64_t>& values) {
  const sym_runs one{runs.symbols, runs.dim_names, {values}, {-1}, runs.mins, runs.maxs, runs.relations};
  const symbolic_fitter fit(one);
  return s.eval([&](const sym_int& e) { return fit.eval(e, 0); });
}

/// The SymFloat and SymBool arguments of `p` (its subgraphs' too), each once. A transformation
/// sees them as numbers and each is found again by its values in the captures (fit_scalar), so
/// each must change between them, and no two may change alike: a capture is added where one
/// does not (`Eq(s77, s17)`: s77 set to s17's value), or where two agree (`s77 > s17`, `s77 >= 2`).
/// One no capture changes is refused (which number of the result it became cannot be told, and
/// a constant would be wrong at other sizes); two no capture tells apart are taken as equal.
inline std::vector<sym_scalar> scalars_moving(const exported_program& p, sym_runs& runs, std::string_view what) {
  std::vector<sym_scalar> out;
  const std::function<void(const argument&)> visit = [&](const argument& a) {
    if (a.is_scalar() && std::find(out.begin(), out.end(), a.as_scalar()) == out.end()) out.push_back(a.as_scalar());
    if (a.is_list())
      for (const auto& e : a.as_list()) visit(e);
  };
  for (const auto& f : flat_nodes(p.graph()))
    if (f.n.is_call())
      for (const auto& a : f.n.args()) visit(a);
  const auto add = [&](std::optional<std::vector<std::int64_t>> values) {
    if (!values) return false;
    runs.values.push_back(std::move(*values));
    runs.moved.push_back(-1);
    return true;
  };
  const auto trace_of = [&](const sym_scalar& s) {
    std::vector<double> v;
    for (const auto& values : runs.values) v.push_back(scalar_at(runs, s, values));
    return v;
  };
  for (const auto& s : out) {
    const auto now = trace_of(s);
    if (std::any_of(now.begin(), now.end(), [&](double v) { return v != now[0]; })) continue;
    if (add(run_where(runs, [&](const auto& values) { return scalar_at(runs, s, values) != now[0]; }))) continue;
    throw export_error("xport.symbolic.scalar", std::string(what) + ": the " + (s.is_bool() ? "SymBool " : "SymFloat ") + s.str() +
                                                    " has one value at every size xport can capture the program at, so where "
                                                    "it goes in the result cannot be found. Way out: pass it as a tensor, or "
                                                    "make its dims static");
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t j = i + 1; j < out.size(); ++j)
      if (out[i].is_bool() == out[j].is_bool() && trace_of(out[i]) == trace_of(out[j]))
        (void)add(run_where(runs, [&](const auto& values) { return scalar_at(runs, out[i], values) != scalar_at(runs, out[j], values); }));
  return out;
}

/// Applies `f`, a transformation of static programs (re-capture, decomposition,
/// functionalization), to a program with dynamic dims: `f` runs on the program specialized at
/// several sizes and the results are made symbolic again (Note [Capturing at several sizes]).
template <class F>
exported_program transform_symbolic(const exported_program& p, std::string_view what, F&& f) {
  if (p.range_constraints().empty()) return f(p);
  auto runs = runs_of(p);
  const auto scalars = scalars_moving(p, runs, what);
  // the row counts of the data-dependent calls, in the order they are made (Note [Unbacked sizes in a capture])
  std::vector<std::size_t> rows_of;
  std::unordered_set<std::string> seen;
  for (auto n : p.graph().nodes())
    if (n.is_call())
      for_each_unbacked_given(n, seen, [&](const value&, std::int64_t, const std::string& symbol, const sym_int&) {
        for (std::size_t i = 0; i < runs.symbols.size(); ++i)
          if (runs.symbols[i].str() == symbol) rows_of.push_back(i);
      });
  const auto at_run = [&](std::size_t r) {
    std::vector<std::int64_t> rows;
    for (auto i : rows_of) rows.push_back(runs.values[r][i]);
    unbacked_scope scope(std::move(rows));
    return f(specialize(p, runs, r));
  };
  exported_program base = at_run(0);
  std::vector<exported_program> others;
  for (std::size_t r = 1; r < runs.values.size(); ++r) others.push_back(at_run(r));
  std::vector<const exported_program*> ptrs;
  for (const auto& o : others) ptrs.push_back(&o);
  std::vector<sym_shape> inputs;
  const auto phs = p.graph().placeholders();
  for (std::size_t i = 0; i < phs.size(); ++i)
    if (p.signature().input_specs.at(i).kind == input_kind::user_input && phs[i].out().kind() == value_kind::tensor)
      inputs.push_back(phs[i].out().meta().sizes);
  try {
    make_symbolic(base, ptrs, runs, inputs, scalars);
  } catch (const dim_specialized& s) {
    throw export_error("xport.symbolic.specialized",
                       std::string(what) + ": the " + (what == "run_decompositions" ? "decomposed" : "transformed") +
                           " programs differ between sizes: " + s.why +
                           ". A decomposition that loops over a dynamic dim (aten::lstm's over the sequence) unrolls "
                           "differently at each size: keep that op (decomposition_table::core_aten().keep(...)), or "
                           "make the dim static");
  }
  base.range_constraints_mut() = p.range_constraints();
  return base;
}

}  // namespace detail
XPORT_END_NAMESPACE
