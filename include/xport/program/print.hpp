// xport/program/print.hpp: programs as torch.export prints them, and graphs as Graphviz DOT.
// print_style::torch_export is `print(ep)` of current torch (torch.fx's verbose codegen:
// annotated forward, `;  x = None` last-use lists, `# File: ... in forward, code: ...`
// summaries, the compact `# inputs` / `# outputs` signature); print_style::seed is the layout of
// the seed document (`# code: ...` comments, the pretty-printed ExportGraphSignature repr).
// Both are byte-exact contracts tested against golden files.
#pragma once

#include <algorithm>      // std::find, std::all_of, std::none_of
#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint64_t
#include <functional>     // std::function
#include <optional>       // std::optional
#include <span>           // std::span
#include <ostream>        // std::ostream
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

#include <xport/ops/higher_order.hpp>
#include <xport/config.hpp>
#include <xport/detail/python_repr.hpp>
#include <xport/ops/schema.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/signature.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/ir/unbacked.hpp>

XPORT_BEGIN_NAMESPACE

enum class print_style : std::uint8_t {
  torch_export,  ///< `print(ep)` of torch 2.13 (compared by the oracle_print_diff test)
  seed,          ///< the layout of the seed document (torch 2.2-2.4 era signature repr)
};

struct print_options {
  print_style style = print_style::torch_export;
  bool include_stride = false;  ///< FX_GRAPH_SHOW_STRIDE=1
  bool include_device = false;  ///< FX_GRAPH_SHOW_DEVICE=1
};

namespace detail {

/// Names that stand for symbolic sizes in the printed code (`2*s77` -> `mul`; see
/// size_nodes below); empty: sizes print as expressions.
using sym_names = std::unordered_map<std::string, std::string>;

/// The key of SymFloat / SymBool `s` among the names of size nodes (apart from the sizes').
inline std::string scalar_key(const sym_scalar& s) { return "#" + s.str(); }

/// Python repr of an argument, as torch.fx's `_get_repr` writes it.
inline std::string arg_repr(const argument& a, const sym_names& syms = {}) {
  switch (a.type()) {
    case argument::kind::none: return "None";
    case argument::kind::boolean: return a.as_bool() ? "True" : "False";
    case argument::kind::integer: return std::to_string(a.as_int());
    case argument::kind::floating: return python_float_repr(a.as_double());
    case argument::kind::complex: return python_complex_repr(a.as_complex());
    case argument::kind::string: return python_str_repr(a.as_string());
    case argument::kind::dtype: return python_repr(a.as_dtype());
    case argument::kind::device: return python_repr(a.as_device());
    case argument::kind::layout: return python_repr(a.as_layout());
    case argument::kind::memory_format: return python_repr(a.as_memory_format());
    case argument::kind::value: return a.as_value().name();
    case argument::kind::graph: return a.as_graph()->name;
    case argument::kind::symbolic: {
      const auto text = a.as_sym().str();
      const auto it = syms.find(text);
      return it == syms.end() ? text : it->second;
    }
    case argument::kind::scalar: {
      const auto it = syms.find(scalar_key(a.as_scalar()));
      return it == syms.end() ? a.as_scalar().str() : it->second;
    }
    case argument::kind::list: {
      std::string s = "[";
      bool first = true;
      for (const auto& e : a.as_list()) {
        if (!first) s += ", ";
        first = false;
        s += arg_repr(e, syms);
      }
      return s + "]";
    }
  }
  return "?";
}

/// `x, 1, alpha = 2`: the arguments its maker passed, as `form` says (Note [Call forms]), else as
/// the dispatcher hands the call to Python (detail::default_call_form).
inline std::string call_args_repr(const op_info& op, std::span<const argument> args, const sym_names& syms = {},
                                  std::optional<node::call_form> form = std::nullopt) {
  const auto& params = op.schema().arguments();
  if (!form) form = default_call_form(op, args);
  if (!form) {  // a schema too long for a form: every argument, in order
    std::string s;
    for (const auto& a : args) s += (s.empty() ? "" : ", ") + arg_repr(a, syms);
    return s;
  }
  std::string s, kw;
  for (std::size_t i = 0; i < params.size() && i < args.size(); ++i) {
    const auto bit = std::uint64_t{1} << i;
    if (!(form->given & bit)) continue;
    auto& to = (form->keyword & bit) ? kw : s;
    if (!to.empty()) to += ", ";
    to += (form->keyword & bit) ? params[i].name() + " = " + arg_repr(args[i], syms) : arg_repr(args[i], syms);
  }
  return s.empty() ? kw : kw.empty() ? s : s + ", " + kw;
}

/// The arguments of a call that names an operator (auto_functionalized, with_effects), as torch
/// prints it: `torch.ops.xt.update_.default, x, s = 0.5, _all_bases = [b]` (the operator, its
/// positional arguments, then its keyword arguments).
inline std::string named_call_repr(const higher_order_op& hop, std::span<const argument> args, const sym_names& syms = {}) {
  using T = higher_order_op::param::type;
  std::string s;
  const auto add = [&](const std::string& piece) { s += (s.empty() ? "" : ", ") + piece; };
  for (std::size_t i = 0; i < hop.params.size() && i < args.size(); ++i) {
    switch (hop.params[i].kind) {
      case T::op: add(find_op(args[i].as_string()).target); break;
      case T::values:
        for (const auto& e : args[i].as_list()) add(arg_repr(e, syms));
        break;
      case T::kwargs:
        for (const auto& kv : args[i].as_list()) add(kv.as_list().at(0).as_string() + " = " + arg_repr(kv.as_list().at(1), syms));
        break;
      default: add(arg_repr(args[i], syms));
    }
  }
  return s;
}

/// The arguments of a control-flow call whose operands are a tuple (`(x, w)`, `(x,)`), as torch
/// prints a program it traced (a loaded one holds a list: call_args_repr prints that). Lists
/// before argument `tuple_from` stay lists (torch.scan's init and xs).
inline std::string tuple_operands_repr(std::span<const argument> args, const sym_names& syms = {},
                                       std::size_t tuple_from = 0) {
  std::string s;
  for (std::size_t k = 0; k < args.size(); ++k) {
    const auto& a = args[k];
    if (!s.empty()) s += ", ";
    if (!a.is_list() || k < tuple_from) {
      s += arg_repr(a, syms);
      continue;
    }
    s += '(';
    for (std::size_t i = 0; i < a.as_list().size(); ++i) s += (i ? ", " : "") + arg_repr(a.as_list()[i], syms);
    s += a.as_list().size() == 1 ? ",)" : ")";
  }
  return s;
}

/// The arguments of a higher-order call whose operands torch passes spread (`False, submod_1,
/// x, w`): the last list's elements as arguments of their own.
inline std::string spread_operands_repr(std::span<const argument> args, const sym_names& syms = {}) {
  std::string s;
  for (std::size_t k = 0; k < args.size(); ++k) {
    if (k + 1 == args.size() && args[k].is_list()) {
      for (const auto& e : args[k].as_list()) s += (s.empty() ? "" : ", ") + arg_repr(e, syms);
      continue;
    }
    s += (s.empty() ? "" : ", ") + arg_repr(args[k], syms);
  }
  return s;
}

inline std::string value_annotation(const value& v, const print_options& o) {
  const auto& t = v.type();
  switch (t.kind) {
    case value_kind::tensor: {
      std::string s = t.tensor.annotation();
      if (o.include_stride) {
        s += '[';
        for (std::size_t i = 0; i < t.tensor.strides.size(); ++i)
          s += (i ? ", " : "") + t.tensor.strides[i].str();
        s += ']';
      }
      if (o.include_device) s += t.tensor.device.str();
      return s;
    }
    case value_kind::sym_int: return "Sym(" + t.scalar.str() + ")";
    default: return {};
  }
}

// One line of torch.fx code: a graph node, or one `getitem` of a multi-output node.
struct fx_line {
  enum class kind : std::uint8_t { placeholder, call, getitem, output } type;
  std::string name;
  std::string annotation;
  std::string rhs;
  std::vector<std::string> inputs;  // names read, in first-appearance order
  std::size_t num_users = 0;
  const source_location* source = nullptr;
};

// Note [Sizes as torch prints them]: a size argument that depends on a dynamic dim is an
// expression in xport's IR (`zeros([2*s77])`); torch's graph computes it with nodes, and so does
// the print: a `sym_size.int` read of the input dim after the placeholders for each symbol, then
// `_operator` nodes (`mul: "Sym(2*s77)" = sym_size_int_1 * 2`) before the first call that uses
// each linear form. The reads are numbered from the number of symbols on (torch's tracing reads
// each once and its final pass makes them again), other nodes take the next free FX name. A
// form that is not linear in one symbol, or a symbol no input dim gives alone, prints inline.
struct size_nodes {
  struct line {
    std::string name, annotation, rhs;
    std::vector<std::string> inputs;
  };
  std::vector<line> reads;                                   // after the placeholders
  std::unordered_map<const node_impl*, std::vector<line>> before;  // before a call
  std::unordered_map<const node_impl*, std::vector<line>> after;   // after a call: its unbacked symbols' reads and asserts
  sym_names names;                                           // expression text -> name
};

/// Calls f on each size leaf of SymFloat / SymBool node `n`, operands first.
inline void walk_scalar_sizes(const sym_scalar::node& n, const std::function<void(const sym_int&)>& f) {
  if (n.kind == sym_scalar::op::integer) {
    if (n.size.is_symbolic()) f(n.size);
    return;
  }
  if (n.a) walk_scalar_sizes(*n.a, f);
  if (n.b) walk_scalar_sizes(*n.b, f);
}

inline void walk_sizes(const argument& a, const std::function<void(const sym_int&)>& f) {
  if (a.is_symbolic()) f(a.as_sym());
  else if (a.is_scalar()) walk_scalar_sizes(a.as_scalar().root(), f);
  else if (a.is_list())
    for (const auto& e : a.as_list()) walk_sizes(e, f);
}

/// Plans a graph's size nodes (Note [Sizes as torch prints them]): the `sym_size.int` reads of
/// input dims, then the nodes of each linear form and of each product of input dims.
class size_planner {
 public:
  explicit size_planner(const graph& g, std::span<const sym_relation> relations = {}) : g_(g), relations_(relations) {}

  /// The size nodes of the graph.
  size_nodes plan() {
    collect_uses();
    take_graph_names();
    plan_unbacked();
    if (uses_.empty() && relations_.empty()) return std::move(out_);
    collect_dim_symbols();
    auto symbols = used_symbols();
    for (const auto& r : relations_)
      for (auto& s : r.symbols())
        if (!sym::is_unbacked(s) && std::find(symbols.begin(), symbols.end(), s) == symbols.end()) symbols.push_back(std::move(s));
    plan_reads(symbols);
    for (const auto& [n, e] : uses_) {
      if (out_.names.count(e.str())) continue;
      if (const auto lin = sym::as_linear(e)) plan_linear(n, e, *lin);
      else plan_product(n, e);
    }
    for (auto n : g_.nodes())
      if (n.is_call())
        for (const auto& a : n.args())
          if (a.is_scalar()) (void)plan_scalar(n, a.as_scalar().ptr());
    plan_relations();
    return std::move(out_);
  }

 private:
  /// Records each size expression the calls pass, with its first user, in node order.
  void collect_uses() {
    std::unordered_set<std::string> seen;
    for (auto n : g_.nodes())
      if (n.is_call())
        for (const auto& a : n.args())
          walk_sizes(a, [&](const sym_int& e) {
            if (seen.insert(e.str()).second) uses_.push_back({n, e});
          });
  }

  /// Plans the nodes of SymFloat / SymBool node `x` (its operands' first) before its first user
  /// `n`, as torch prints them (`truediv: "Sym(IntTrueDiv(s77, 2))" = sym_size_int_1 / 2`);
  /// returns what an operation reading it writes (its name, a number, or a size).
  std::string plan_scalar(node n, const sym_scalar::node_ptr& x) {
    using op = sym_scalar::op;
    if (x->kind == op::integer) {
      if (x->size.is_constant()) return std::to_string(x->size.value());
      const auto it = out_.names.find(x->size.str());
      return it == out_.names.end() ? x->size.str() : it->second;
    }
    if (x->kind == op::number) return python_float_repr(x->number);
    const sym_scalar s(x);
    const auto key = scalar_key(s);
    if (auto it = out_.names.find(key); it != out_.names.end()) return it->second;
    const auto a = plan_scalar(n, x->a);
    const auto b = x->b ? plan_scalar(n, x->b) : std::string();
    std::vector<std::string> inputs;
    for (const auto* operand : {&a, &b})
      if (!operand->empty() && taken_.count(*operand) && std::find(inputs.begin(), inputs.end(), *operand) == inputs.end())
        inputs.push_back(*operand);
    const auto fx = sym_scalar::fx_of(x->kind);
    std::string base(fx.name), rhs;
    if (x->kind == op::compare) base = std::string(sym_relation::kind_of(x->cmp).fx), rhs = a + " " + x->cmp + " " + b;
    else if (!fx.infix.empty()) rhs = a + std::string(fx.infix) + b;
    else rhs = x->kind == op::neg ? "-" + a : std::string(fx.target) + "(" + a + ")";
    const bool own = !x->name.empty() && reserved_.erase(x->name) > 0;  // its name in the file, kept for it
    const auto name = own ? x->name : fresh(x->name.empty() ? base : x->name);
    out_.before[n.impl()].push_back({name, "Sym(" + s.str() + ")", rhs, std::move(inputs)});
    out_.names.emplace(key, name);
    return name;
  }

  /// Marks every node and value name of the graph as taken (and `pow`, a Python builtin torch.fx
  /// names around: `pow_1`), then the names SymFloat / SymBool nodes had in their file, kept for
  /// them (plan_scalar).
  void take_graph_names() {
    taken_.insert("pow");
    const std::function<void(const sym_scalar::node&)> reserve = [&](const sym_scalar::node& x) {
      if (!x.name.empty() && taken_.insert(x.name).second) reserved_.insert(x.name);
      if (x.a) reserve(*x.a);
      if (x.b) reserve(*x.b);
    };
    for (auto n : g_.nodes()) {
      taken_.insert(n.name());
      for (auto v : n.outputs()) taken_.insert(v.name());
    }
    for (auto n : g_.nodes())
      if (n.is_call())
        for (const auto& a : n.args())
          if (a.is_scalar()) reserve(a.as_scalar().root());
  }

  /// `base`, or `base_<i>` for the first free i, marked taken.
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; taken_.count(name); ++i) name = base + "_" + std::to_string(i);
    taken_.insert(name);
    return name;
  }

  /// Plans, after the call that first gives each unbacked symbol (a nonzero's `u0` rows, an
  /// item()), its `sym_size.int` read and the `_assert_scalar` nodes of its range, as torch
  /// prints them (Note [Runtime assertions as ranges] in serde/program_json.hpp).
  void plan_unbacked() {
    std::unordered_set<std::string> seen;
    for (auto n : g_.nodes()) {
      if (!n.is_call()) continue;
      for_each_unbacked_given(n, seen, [&](const value& v, std::int64_t dim, const std::string& symbol, const sym_int& e) {
        auto& lines = out_.after[n.impl()];
        std::string src = v.name();
        if (dim >= 0) {
          src = fresh("sym_size_int");
          lines.push_back({src, "Sym(" + symbol + ")",
                           "torch.ops.aten.sym_size.int(" + v.name() + ", " + std::to_string(dim) + ")", {v.name()}});
        }
        out_.names.emplace(symbol, src);
        symbol_of_.emplace(symbol, e);
        const auto r = sym::range(e);
        // an item()'s bounds come from torch._check calls, whose own comparison nodes torch's
        // trace made and removed first: its assertion nodes take the next names (`ge_1`)
        if (r.lo > -int_oo) assertion_lines(lines, {e, ">=", r.lo}, dim < 0);
        if (r.hi < int_oo) assertion_lines(lines, {e, "<=", r.hi}, dim < 0);
      });
    }
  }

  /// Plans the nodes of each assertion between sizes (`le_2: "Sym(u0 <= s77)" = item <=
  /// sym_size_int_1`, then its `_assert_scalar`) after the call that gives the last of its
  /// data-dependent symbols, or after the first call when it relates input dims alone.
  void plan_relations() {
    std::vector<bool> done(relations_.size(), false);
    std::unordered_set<std::string> seen;
    for (auto n : g_.nodes()) {
      if (!n.is_call()) continue;
      for_each_unbacked_given(n, seen, [](const value&, std::int64_t, const std::string&, const sym_int&) {});
      for (std::size_t i = 0; i < relations_.size(); ++i) {
        if (done[i]) continue;
        const auto syms = relations_[i].symbols();
        if (!std::all_of(syms.begin(), syms.end(), [&](const std::string& s) { return !sym::is_unbacked(s) || seen.count(s) > 0; }))
          continue;
        assertion_lines(out_.after[n.impl()], relations_[i], false);
        done[i] = true;
      }
    }
  }

  /// The comparison node of `r` and the `_assert_scalar` node on it, as torch prints a runtime
  /// assertion; `burn` skips a name first (torch's trace used it).
  void assertion_lines(std::vector<size_nodes::line>& lines, const sym_relation& r, bool burn) {
    const std::string base(r.kind_of().fx);
    std::vector<std::string> inputs;
    const auto side = [&](const sym_int& e) {
      if (e.is_constant()) return std::to_string(e.value());
      const auto it = out_.names.find(e.str());
      if (it == out_.names.end()) return e.str();  // no node computes it: printed as the expression
      if (std::find(inputs.begin(), inputs.end(), it->second) == inputs.end()) inputs.push_back(it->second);
      return it->second;
    };
    const auto lhs = side(r.lhs), rhs = side(r.rhs);
    if (burn) (void)fresh(base);
    const auto name = fresh(base);
    lines.push_back({name, "Sym(" + r.str() + ")", lhs + " " + r.op + " " + rhs, std::move(inputs)});
    lines.push_back({fresh("_assert_scalar_default"), "",
                     "torch.ops.aten._assert_scalar.default(" + name + ", \"Runtime assertion failed for expression " +
                         r.str() + " on node '" + name + "'\")",
                     {name}});
  }

  /// Records the symbols input dims give alone, in placeholder order.
  void collect_dim_symbols() {
    for (auto ph : g_.placeholders())
      if (ph.output(0).kind() == value_kind::tensor)
        for (const auto& d : ph.output(0).meta().sizes)
          if (d.is_symbolic() && sym::as_linear(d) && sym::as_linear(d)->a == 1 && sym::as_linear(d)->b == 0 &&
              std::none_of(dim_symbols_.begin(), dim_symbols_.end(), [&](const auto& p) { return p.first == d.str(); }))
            dim_symbols_.push_back({d.str(), d});
  }

  /// A product of input dims (`s27*s77`, a flattened batch; `s77**2`, attention scores): its
  /// factors in placeholder order, a symbol repeated for its power (up to the fourth).
  std::optional<std::vector<std::string>> product_of(const sym_int& e) const {
    const auto fs = sym::free_symbols(e);
    std::vector<std::pair<std::string, sym_int>> syms;
    for (const auto& [text, sym] : dim_symbols_)
      if (std::find(fs.begin(), fs.end(), text) != fs.end()) syms.push_back({text, sym});
    if (fs.empty() || syms.size() != fs.size() || syms.size() > 3) return std::nullopt;
    const auto target = e.str();
    std::vector<int> power(syms.size(), 1);
    for (;;) {  // every power from 1 to 4 for each symbol, the lowest first
      std::vector<std::string> factors;
      std::optional<sym_int> prod;
      for (std::size_t i = 0; i < syms.size(); ++i)
        for (int k = 0; k < power[i]; ++k) {
          factors.push_back(syms[i].first);
          prod = prod ? *prod * syms[i].second : syms[i].second;
        }
      if (factors.size() >= 2 && prod->str() == target) return factors;
      std::size_t i = 0;
      while (i < power.size() && power[i] == 4) power[i++] = 1;
      if (i == power.size()) return std::nullopt;
      ++power[i];
    }
  }

  /// The symbols the linear forms and products use, in first-use order.
  std::vector<std::string> used_symbols() const {
    std::vector<std::string> symbols;
    const auto use_symbol = [&](const std::string& sym) {
      if (std::find(symbols.begin(), symbols.end(), sym) == symbols.end()) symbols.push_back(sym);
    };
    for (const auto& [n, e] : uses_) {
      if (auto lin = sym::as_linear(e)) use_symbol(lin->symbol);
      else if (auto factors = product_of(e))
        for (const auto& f : *factors) use_symbol(f);
    }
    return symbols;
  }

  /// Plans a `sym_size.int` read, after the placeholders, of the first input dim that gives each of `symbols`.
  void plan_reads(const std::vector<std::string>& symbols) {
    std::size_t next = symbols.size();
    for (auto ph : g_.placeholders()) {
      const auto v = ph.output(0);
      if (v.kind() != value_kind::tensor) continue;
      const auto& sizes = v.meta().sizes;
      for (std::size_t d = 0; d < sizes.size(); ++d) {
        const auto text = sizes[d].str();
        if (!sizes[d].is_symbolic() || out_.names.count(text) ||
            std::find(symbols.begin(), symbols.end(), text) == symbols.end())
          continue;
        const auto name = fresh("sym_size_int_" + std::to_string(next++));
        out_.reads.push_back({name, "Sym(" + text + ")", "torch.ops.aten.sym_size.int(" + v.name() + ", " + std::to_string(d) + ")", {v.name()}});
        out_.names.emplace(text, name);
        symbol_of_.emplace(text, sizes[d]);
      }
    }
  }

  /// Plans the `mul` nodes of product `e` before its first user `n`, when each factor has a read.
  void plan_product(node n, const sym_int& e) {
    const auto factors = product_of(e);
    if (!factors || !std::all_of(factors->begin(), factors->end(), [&](const auto& f) { return out_.names.count(f); }))
      return;
    std::string cur = out_.names.at((*factors)[0]);
    sym_int expr = symbol_of_.at((*factors)[0]);
    auto& lines = out_.before[n.impl()];
    for (std::size_t i = 1; i < factors->size(); ++i) {
      const auto name = fresh("mul");
      expr = expr * symbol_of_.at((*factors)[i]);
      lines.push_back({name, "Sym(" + expr.str() + ")", cur + " * " + out_.names.at((*factors)[i]),
                       {cur, out_.names.at((*factors)[i])}});
      cur = name;
    }
    out_.names.emplace(e.str(), cur);
  }

  /// Plans the `mul` / `add` / `sub` nodes of linear form `e` before its first user `n`, when its symbol has a read.
  void plan_linear(node n, const sym_int& e, const sym::linear_form& lin) {
    if (!out_.names.count(lin.symbol)) return;
    std::string cur = out_.names.at(lin.symbol);
    sym_int expr = symbol_of_.at(lin.symbol);
    auto& lines = out_.before[n.impl()];
    const auto step = [&](const char* base, const char* op, std::int64_t k, const sym_int& result) {
      const auto name = fresh(base);
      lines.push_back({name, "Sym(" + result.str() + ")", cur + " " + op + " " + std::to_string(k), {cur}});
      cur = name;
      expr = result;
    };
    if (lin.a != 1) step("mul", "*", lin.a, expr * lin.a);
    if (lin.b > 0) step("add", "+", lin.b, expr + lin.b);
    if (lin.b < 0) step("sub", "-", -lin.b, expr - (-lin.b));
    out_.names.emplace(e.str(), cur);
  }

  const graph& g_;
  std::span<const sym_relation> relations_;
  size_nodes out_;
  std::vector<std::pair<node, sym_int>> uses_;  // (first user, expression), in node order
  std::unordered_set<std::string> taken_;
  std::unordered_set<std::string> reserved_;  // SymFloat / SymBool nodes' own names, not yet printed
  std::vector<std::pair<std::string, sym_int>> dim_symbols_;
  std::unordered_map<std::string, sym_int> symbol_of_;
};

inline size_nodes plan_size_nodes(const graph& g, std::span<const sym_relation> relations = {}) {
  return size_planner(g, relations).plan();
}

/// What graph `g` returns, as torch prints it: a tuple (`(add,)`), bare (`lt`: a while_loop's
/// cond graph) or a list (`[add, clone]`: a scan's combine graph).
inline std::string returned_repr(const graph& g, std::span<const argument> args) {
  if (g.returns_bare() && args.size() == 1) return arg_repr(args[0]);
  std::string r;
  for (std::size_t i = 0; i < args.size(); ++i) r += (i ? ", " : "") + arg_repr(args[i]);
  if (g.returns_list()) return "[" + r + "]";
  return "(" + r + (args.size() == 1 ? ",)" : ")");
}

inline std::vector<fx_line> fx_lines(const graph& g, const print_options& o, std::span<const sym_relation> relations = {}) {
  std::vector<fx_line> lines;
  std::unordered_map<std::string, std::size_t> users;  // name -> number of fx users
  const auto sizes = plan_size_nodes(g, relations);
  // the names a node reads, in the order its arguments name them (torch.fx's order)
  const auto inputs_of = [&](const node& n) {
    std::vector<std::string> names;
    std::unordered_set<std::string> seen;
    const std::function<void(const argument&)> visit = [&](const argument& a) {
      if (a.is_value()) {
        if (seen.insert(a.as_value().name()).second) names.push_back(a.as_value().name());
      } else if (a.is_symbolic() || a.is_scalar()) {
        const auto key = a.is_symbolic() ? a.as_sym().str() : scalar_key(a.as_scalar());
        if (auto it = sizes.names.find(key); it != sizes.names.end() && seen.insert(it->second).second)
          names.push_back(it->second);
      } else if (a.is_list()) {
        for (const auto& e : a.as_list()) visit(e);
      } else if (a.is_graph()) {
        if (seen.insert(a.as_graph()->name).second) names.push_back(a.as_graph()->name);
      }
    };
    for (const auto& a : n.args()) visit(a);
    return names;
  };
  bool reads_done = sizes.reads.empty();
  for (auto n : g.nodes()) {
    if (!reads_done && !n.is_placeholder()) {
      for (const auto& r : sizes.reads)
        lines.push_back({fx_line::kind::call, r.name, r.annotation, r.rhs, r.inputs, 0, nullptr});
      reads_done = true;
    }
    if (auto it = sizes.before.find(n.impl()); it != sizes.before.end())
      for (const auto& r : it->second)
        lines.push_back({fx_line::kind::call, r.name, r.annotation, r.rhs, r.inputs, 0, n.source().get()});
    switch (n.kind()) {
      case node_kind::placeholder:
        lines.push_back({fx_line::kind::placeholder, n.name(), value_annotation(n.output(0), o), {}, {}, 0, nullptr});
        break;
      case node_kind::call_function: {
        const auto* src = n.source().get();
        fx_line l{fx_line::kind::call, n.name(), {}, {}, inputs_of(n), 0, src};
        if (n.op().higher_order) {
          // `true_graph_0 = self.true_graph_0` before the call
          for_each_subgraph(n, [&](const subgraph& s) {
            lines.push_back({fx_line::kind::call, s.name, {}, "self." + s.name, {}, 0, src});
          });
        }
        const auto* hop = hop_of(n.op());
        l.rhs = n.op().target + "(" +
                (hop && hop->calls_by_name() ? named_call_repr(*hop, n.args(), sizes.names)
                 : hop && hop->spread_last   ? spread_operands_repr(n.args(), sizes.names)
                 : n.has_tuple_operands()
                     ? tuple_operands_repr(n.args(), sizes.names, hop && hop->which == higher_order_op::id::scan ? 3 : 0)
                     : call_args_repr(n.op(), n.args(), sizes.names, n.form())) +
                ")";
        if (!n.has_tuple_output()) l.annotation = value_annotation(n.output(0), o);
        lines.push_back(std::move(l));
        if (n.has_tuple_output())
          for (std::size_t i = 0; i < n.num_outputs(); ++i) {
            auto v = n.output(i);
            if (v.num_uses() == 0 && !v.unpacked()) continue;
            lines.push_back({fx_line::kind::getitem, v.name(), value_annotation(v, o),
                             n.name() + "[" + std::to_string(i) + "]", {n.name()}, 0, src});
          }
        if (auto it = sizes.after.find(n.impl()); it != sizes.after.end())
          for (const auto& r : it->second) lines.push_back({fx_line::kind::call, r.name, r.annotation, r.rhs, r.inputs, 0, src});
        break;
      }
      case node_kind::output:
        lines.push_back({fx_line::kind::output, "output", {}, "return " + returned_repr(g, n.args()), inputs_of(n), 0, nullptr});
        break;
    }
  }
  for (const auto& l : lines)
    for (const auto& in : l.inputs) ++users[in];
  for (auto& l : lines) l.num_users = users[l.name];
  return lines;
}

inline std::string summary_of(const source_location* s) {
  if (s && !s->annotation.empty()) {  // torch.fx: `# Annotation: {...} File: ...`
    source_location bare = *s;
    bare.annotation.clear();
    return "Annotation: " + s->annotation + " " + summary_of(&bare);
  }
  if (!s || (s->file.empty() && s->code.empty())) return "No stacktrace found for following nodes";
  if (s->file.empty()) return "File: <unknown>:" + std::to_string(s->line) + " in " +
                              (s->function.empty() ? "forward" : s->function) + ", code: " + s->code;
  return "File: " + s->file + ":" + std::to_string(s->line) + " in " +
         (s->function.empty() ? "forward" : s->function) + ", code: " + s->code;
}

inline std::string indent_lines(std::string_view text, std::string_view pad, bool first_too = false) {
  // torch.fx's `_addindent`: every non-empty line but the first gets `pad`.
  std::string out;
  std::size_t start = 0;
  bool first = !first_too;
  while (true) {
    const auto nl = text.find('\n', start);
    const auto line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (!first && !line.empty()) out += pad;
    out += line;
    first = false;
    if (nl == std::string_view::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return out;
}

inline std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

/// `class GraphModule(torch.nn.Module):\n    def forward(...):\n        ...` (torch.fx
/// `print_readable`, verbose).
inline std::string graph_module_code(const graph& g, const print_options& o, std::string_view class_name = "GraphModule",
                                     std::span<const sym_relation> relations = {}) {
  const auto lines = fx_lines(g, o, relations);
  const bool seed = o.style == print_style::seed;
  // last uses, scanning backwards (torch.fx `register_last_uses`)
  std::unordered_map<std::string, std::size_t> last_use;
  std::vector<std::vector<std::string>> to_delete(lines.size());
  for (std::size_t i = lines.size(); i-- > 0;)
    for (const auto& in : lines[i].inputs)
      if (last_use.emplace(in, i).second) to_delete[i].push_back(in);

  std::vector<std::string> free_vars{"self"};
  std::string body;
  std::string prev_summary;
  bool have_prev = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    const std::string ann = l.annotation.empty() ? "" : ": \"" + l.annotation + "\"";
    if (l.type == fx_line::kind::placeholder) {
      free_vars.push_back(l.name + ann);
      continue;
    }
    if (l.type != fx_line::kind::output) {
      if (seed) {
        const std::string code = l.source ? l.source->code : std::string();
        if (!code.empty() && (!have_prev || code != prev_summary)) {
          body += "\n# code: " + code + "\n";
          prev_summary = code;
          have_prev = true;
        }
      } else {
        const std::string summary = "\n# " + summary_of(l.source) + "\n";
        if (!have_prev || summary != prev_summary) {
          body += summary;
          prev_summary = summary;
          have_prev = true;
        }
      }
    }
    if (l.type == fx_line::kind::output) {
      body += l.rhs + "\n";
      continue;
    }
    body += l.name + ann + " = " + l.rhs;
    auto dels = to_delete[i];
    if (l.num_users == 0) dels.push_back(l.name);
    if (!seed && !dels.empty()) {
      body += ";  ";
      for (const auto& d : dels) body += d + " = ";
      body += "None";
    }
    body += "\n";
  }
  // lstrip("\n"), then indent every non-empty line by 4
  std::size_t k = 0;
  while (k < body.size() && body[k] == '\n') ++k;
  std::string code = indent_lines(std::string_view(body).substr(k), "    ", /*first_too=*/true);
  std::string params;
  for (std::size_t i = 0; i < free_vars.size(); ++i) params += (i ? ", " : "") + free_vars[i];
  std::string module = "class " + std::string(class_name) + "(torch.nn.Module):\ndef forward(" + params + "):\n" + code;
  auto text = indent_lines(module, "    ");
  // the subgraphs, as nested classes after forward (torch.fx prints submodules so)
  for (auto n : g.nodes())
    if (n.is_call() && n.op().higher_order)
      for_each_subgraph(n, [&](const subgraph& s) {
        text += "\n" + indent_lines(graph_module_code(s.body, o, s.name), "    ", /*first_too=*/true);
      });
  return text;
}

inline std::string spec_arg_repr(const argument_spec& a) {
  switch (a.type) {
    case argument_spec::kind::tensor: return "TensorArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_int: return "SymIntArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_float: return "SymFloatArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_bool: return "SymBoolArgument(name='" + a.name + "')";
    case argument_spec::kind::constant:
      return "ConstantArgument(name='" + a.name + "', value=" + arg_repr(a.constant) + ")";
    case argument_spec::kind::custom_obj:
      return "CustomObjArgument(name='" + a.name + "', class_fqn='" + a.class_fqn + "', fake_val=None)";
    case argument_spec::kind::token: return "TokenArgument(name='" + a.name + "')";
  }
  return "?";
}

inline std::string opt_str_repr(const std::optional<std::string>& s) {
  return s ? python_str_repr(*s) : "None";
}

/// The seed document's pretty-printed `ExportGraphSignature(...)`, indented by `pad`.
inline std::string seed_signature(const graph_signature& sig, const std::string& pad) {
  std::string s = pad + "ExportGraphSignature(\n" + pad + "    input_specs=[";
  const auto spec_block = [&](const std::vector<std::string>& fields, bool last) {
    std::string b = "\n" + pad + "        " + fields[0] + "(\n";
    for (std::size_t i = 1; i < fields.size(); ++i)
      b += pad + "            " + fields[i] + (i + 1 < fields.size() ? ",\n" : "\n");
    b += pad + "        )" + (last ? "" : ",");
    return b;
  };
  for (std::size_t i = 0; i < sig.input_specs.size(); ++i) {
    const auto& in = sig.input_specs[i];
    s += spec_block({"InputSpec",
                     "kind=<InputKind." + std::string(to_string(in.kind)) + ": " +
                         std::to_string(static_cast<int>(in.kind)) + ">",
                     "arg=" + spec_arg_repr(in.arg), "target=" + opt_str_repr(in.target),
                     std::string("persistent=") + (in.persistent ? (*in.persistent ? "True" : "False") : "None")},
                    i + 1 == sig.input_specs.size());
  }
  s += (sig.input_specs.empty() ? "" : "\n" + pad + "    ") + "],\n" + pad + "    output_specs=[";
  for (std::size_t i = 0; i < sig.output_specs.size(); ++i) {
    const auto& out = sig.output_specs[i];
    s += spec_block({"OutputSpec",
                     "kind=<OutputKind." + std::string(to_string(out.kind)) + ": " +
                         std::to_string(static_cast<int>(out.kind)) + ">",
                     "arg=" + spec_arg_repr(out.arg), "target=" + opt_str_repr(out.target)},
                    i + 1 == sig.output_specs.size());
  }
  s += (sig.output_specs.empty() ? "" : "\n" + pad + "    ") + "]\n" + pad + ")";
  return s;
}

/// Drops trailing spaces on every line (the seed document's layout has none).
inline std::string rstrip_lines(const std::string& s) {
  std::string out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto nl = s.find('\n', start);
    if (nl == std::string::npos) nl = s.size();
    auto end = nl;
    while (end > start && s[end - 1] == ' ') --end;
    out.append(s, start, end - start);
    if (nl < s.size()) out += '\n';
    start = nl + 1;
  }
  return out;
}

/// `{u0: VR[1, 64], s77: VR[0, 64]}`: torch lists the data-dependent symbols first (its inline
/// constraints), then the inputs' dims.
inline std::string range_constraints_repr(const std::vector<range_constraint>& rc) {
  std::string s;
  for (const bool unbacked : {true, false})
    for (const auto& r : rc)
      if (sym::is_unbacked(r.symbol.str()) == unbacked) s += (s.empty() ? "" : ", ") + r.str();
  return "{" + s + "}";
}

}  // namespace detail

/// The graph as torch.fx's `print_readable` writes a GraphModule.
inline std::string to_string(const graph& g, const print_options& o = {}) {
  auto s = detail::graph_module_code(g, o);
  return o.style == print_style::seed ? detail::rstrip_lines(s) : s;
}

/// The program as `print(ep)` writes it (or in the seed document's layout).
inline std::string to_string(const exported_program& p, const print_options& o = {}) {
  std::vector<sym_relation> relations;  // printed as torch prints them: nodes of the graph
  for (const auto& rc : p.range_constraints()) relations.insert(relations.end(), rc.relations.begin(), rc.relations.end());
  const auto gm = detail::graph_module_code(p.graph(), o, "GraphModule", relations);
  if (o.style == print_style::seed) {
    return detail::rstrip_lines(
        "ExportedProgram:\n    " + detail::replace_all(gm, "\n", "\n    ") + "\n    Graph signature:\n" +
        detail::seed_signature(p.signature(), "        ") + "\n    Range constraints: " +
        detail::range_constraints_repr(p.range_constraints()) + "\n");
  }
  return "ExportedProgram:\n    " + detail::replace_all(gm, "\n", "\n    ") + "\nGraph signature: " +
         detail::replace_all(p.signature().str(), "\n", "\n    ") + "\nRange constraints: " +
         detail::range_constraints_repr(p.range_constraints()) + "\n";
}

inline std::ostream& operator<<(std::ostream& os, const exported_program& p) { return os << to_string(p); }
inline std::ostream& operator<<(std::ostream& os, const graph& g) { return os << to_string(g); }

/// The graph in Graphviz DOT: one box per node labelled with its name, op and annotated type,
/// edges from producer to user (labelled with the output index of multi-output nodes).
inline std::string to_dot(const graph& g, std::string_view name = "GraphModule") {
  const auto q = [](const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o + "\"";
  };
  print_options o;
  std::string s = "digraph " + q(std::string(name)) + " {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (auto n : g.nodes()) {
    std::string label = n.name() + "\\n";
    std::string shape;
    if (n.is_placeholder()) {
      label += "placeholder\\n" + detail::value_annotation(n.output(0), o);
      shape = ", shape=ellipse";
    } else if (n.is_output()) {
      label = "output";
      shape = ", shape=ellipse";
    } else {
      label += n.op().target.substr(10);  // drop "torch.ops."
      for (auto v : n.outputs()) {
        const auto a = detail::value_annotation(v, o);
        if (!a.empty()) label += "\\n" + (n.has_tuple_output() ? v.name() + ": " : std::string()) + a;
      }
    }
    s += "  " + q(n.name()) + " [label=\"" + detail::replace_all(label, "\"", "\\\"") + "\"" + shape + "];\n";
  }
  for (auto n : g.nodes())
    for (std::size_t i = 0; i < n.num_inputs(); ++i) {
      auto v = n.input(i);
      auto p = v.producer();
      s += "  " + q(p.name()) + " -> " + q(n.name());
      if (p.has_tuple_output()) s += " [label=\"[" + std::to_string(v.index()) + "]\"]";
      s += ";\n";
    }
  return s + "}\n";
}

XPORT_END_NAMESPACE
