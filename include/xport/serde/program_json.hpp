// xport/serde/program_json.hpp: a whole program as torch.export's `models/model.json`, both
// ways. Writing: the graph (nodes, size nodes for symbolic arguments as torch writes them,
// nn_module_stack), the signature, the module call graph with the call structure, range
// constraints and the opset versions. Reading: the same, every field checked (serde/json.hpp
// reads and writes the parts: tensor metadata, arguments, specs), into a program that is
// verified before it is returned.
#pragma once

#include <algorithm>      // std::find, std::stable_sort
#include <cctype>         // std::isalpha
#include <cmath>          // std::isnan
#include <cstdint>        // std::int64_t
#include <memory>         // std::shared_ptr
#include <map>            // std::map
#include <optional>       // std::optional
#include <set>            // std::set
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::pair
#include <vector>         // std::vector

#include <ATen/core/dispatch/Dispatcher.h>
#include <caffe2/serialize/versions.h>

#include <xport/ops/higher_order.hpp>
#include <xport/config.hpp>
#include <xport/detail/names.hpp>
#include <xport/detail/python_repr.hpp>
#include <xport/ir/unbacked.hpp>
#include <xport/serde/json.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail::serde {

inline constexpr std::string_view archive_format = "pt2";
inline constexpr std::string_view archive_version = "0";

/// The opset version of aten, as torch writes it: torch._C._get_max_operator_version(), which
/// is the running LibTorch's caffe2::serialize::kProducedFileFormatVersion.
inline int aten_opset_version() { return static_cast<int>(caffe2::serialize::kProducedFileFormatVersion); }

inline std::string stack_trace_of(const source_location& s) {
  std::string t = "File \"" + s.file + "\", line " + std::to_string(s.line) + ", in " + s.function;
  if (!s.code.empty()) t += "\n    " + s.code;
  return t;
}
inline std::shared_ptr<const source_location> source_of(const std::string& trace) {
  // the last frame: `  File "<file>", line <n>, in <function>\n    <code>`
  const auto at = trace.rfind("File \"");
  if (at == std::string::npos) return nullptr;
  const auto q = trace.find("\", line ", at + 6);
  if (q == std::string::npos) return nullptr;
  source_location s;
  s.file = trace.substr(at + 6, q - at - 6);
  std::size_t p = q + 8;
  std::uint64_t line = 0;
  while (p < trace.size() && trace[p] >= '0' && trace[p] <= '9' && line < 1000000000) line = line * 10 + static_cast<std::uint64_t>(trace[p++] - '0');
  s.line = static_cast<std::uint32_t>(line);
  if (trace.compare(p, 5, ", in ") != 0) return nullptr;
  p += 5;
  const auto eol = trace.find('\n', p);
  s.function = trace.substr(p, eol == std::string::npos ? std::string::npos : eol - p);
  if (eol != std::string::npos) {
    auto code = trace.substr(eol + 1);
    const auto first = code.find_first_not_of(' ');
    s.code = first == std::string::npos ? std::string() : code.substr(first);
  }
  return std::make_shared<const source_location>(std::move(s));
}

/// Python's repr of a JSON value read as Python reads it (json.loads, keys in their order): `{'a': True, 'b': [1, 'x']}`.
inline std::string python_repr_of_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return "None";
    case nlohmann::ordered_json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case nlohmann::ordered_json::value_t::number_integer: return std::to_string(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return std::to_string(j.get<std::uint64_t>());
    case nlohmann::ordered_json::value_t::number_float: return python_float_repr(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return python_str_repr(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::string s = "[";
      for (std::size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + python_repr_of_json(j[i]);
      return s + "]";
    }
    case nlohmann::ordered_json::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        s += (first ? "" : ", ") + python_str_repr(k) + ": " + python_repr_of_json(v);
        first = false;
      }
      return s + "}";
    }
    default: return "None";
  }
}

/// How torch.fx prints a node's `custom` metadata after `# Annotation: `: its dict, each value
/// whose str() is longer than 40 characters cut there and ended with `...`; empty when it is
/// not a JSON object (or is an empty one).
inline std::string annotation_of(const std::string& custom_json) {
  const auto j = nlohmann::ordered_json::parse(custom_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.empty()) return "";
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : j.items()) {
    const std::string str = v.is_string() ? v.get<std::string>() : python_repr_of_json(v);
    s += (first ? "" : ", ") + python_str_repr(k) + ": " +
         (str.size() > 40 ? python_str_repr(str.substr(0, 40) + "...") : python_repr_of_json(v));
    first = false;
  }
  return s + "}";
}

// ---- program -> JSON -------------------------------------------------------------------------

/// torch's stand-in for the `nn_module_stack` of a node no module made (a `sym_size` export
/// inserts): torch's unflatten needs every node to have one.
inline constexpr std::string_view empty_stack_hook = "_empty_nn_module_stack_from_metadata_hook";
inline json empty_module_stack() {
  const std::string hook(empty_stack_hook);
  return {{"nn_module_stack", hook + "," + hook + "," + hook}};
}

/// Note [Symbolic arguments in .pt2]: an argument that depends on a dynamic dim (`[s0, -1]`) is
/// written as torch writes it: a `torch.ops.aten.sym_size.int(x, 0)` node reads the dim from an
/// input, `_operator.mul` / `add` / `sub` / `floordiv` nodes compute the linear form, and the
/// argument names the result (`as_sym_int: {as_name: ...}`). Reading turns them back into
/// expressions; the nodes are not kept in the graph.
class sym_writer {
 public:
  sym_writer(const graph& g, const std::vector<range_constraint>& ranges, json& nodes, json& sym_int_values)
      : nodes_(nodes), values_(sym_int_values) {
    for (const auto& rc : ranges)
      for (const auto& r : rc.relations) {
        auto waits = r.symbols();
        std::erase_if(waits, [](const std::string& s) { return !sym::is_unbacked(s); });
        relations_.push_back({r, std::move(waits), false});
      }
    for (auto n : g.nodes())
      for (auto v : n.outputs()) taken_.insert(v.name());
    taken_.insert("pow");  // a Python builtin: torch.fx names a pow node pow_1
    for (auto ph : g.placeholders()) {
      const auto v = ph.out();
      if (v.kind() != value_kind::tensor) continue;
      const auto& sizes = v.meta().sizes;
      for (std::size_t d = 0; d < sizes.size(); ++d)
        if (auto lin = sizes[d].is_symbolic() ? sym::as_linear(sizes[d]) : std::nullopt)
          sites_.push_back({lin->symbol, v.name(), static_cast<std::int64_t>(d), lin->a, lin->b, sizes[d]});
    }
  }

  /// After call `n` (written): the `sym_size.int` read of each unbacked symbol it is the first to
  /// give, then the `_operator.ge` / `le` and `_assert_scalar` nodes of the symbol's range, as
  /// torch writes them (Note [Runtime assertions as ranges]), and those of each assertion between
  /// sizes whose data-dependent symbols are all given now; `sym_bool_values` gets their types.
  void give_unbacked(const node& n, json& sym_bool_values) {
    for_each_unbacked_given(n, unbacked_, [&](const value& v, std::int64_t dim, const std::string& symbol, const sym_int& e) {
      std::string src = v.name();
      if (dim >= 0) {
        src = fresh("sym_size_int");
        nodes_.push_back({{"target", "torch.ops.aten.sym_size.int"},
                          {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_tensor", {{"name", v.name()}}}}}, {"kind", 1}},
                                                  {{"name", "dim"}, {"arg", {{"as_int", dim}}}, {"kind", 1}}})},
                          {"outputs", json::array({{{"as_sym_int", {{"as_name", src}}}}})},
                          {"metadata", nodes_.back()["metadata"]},
                          {"name", src}});
        values_[src] = sym_int_json(e);
      }
      symbols_.emplace(symbol, std::pair{src, e});
      const auto r = sym::range(e);
      const auto meta = nodes_.back()["metadata"];
      // named as print names them (program/print.hpp, plan_unbacked)
      if (r.lo > -int_oo) write_assertion({e, ">=", r.lo}, dim < 0, meta, sym_bool_values);
      if (r.hi < int_oo) write_assertion({e, "<=", r.hi}, dim < 0, meta, sym_bool_values);
    });
    for (auto& r : relations_) {
      if (r.written || !std::all_of(r.waits.begin(), r.waits.end(), [&](const std::string& s) { return unbacked_.count(s) > 0; }))
        continue;
      write_assertion(r.relation, false, nodes_.back()["metadata"], sym_bool_values);
      r.written = true;
    }
  }
  /// The name of a value equal to `e` (written on first use): sums and products of the dims,
  /// floor division, modulo, min and max, as torch writes them.
  std::string operator()(const sym_int& e) {
    if (auto it = named_.find(e.str()); it != named_.end()) return it->second;
    std::string name;
    const auto& n = xport::detail::node_of(e);
    using K = xport::detail::sym_kind;
    switch (n.kind) {
      case K::symbol: name = symbol(n.name).first; break;
      case K::poly: {
        std::optional<std::pair<std::string, sym_int>> acc;  // the sum so far
        for (const auto& t : n.terms) {
          std::optional<std::pair<std::string, sym_int>> prod;
          for (const auto& f : t.factors)
            for (std::int64_t k = 0; k < f.power; ++k) {
              const auto atom = rehint(f.atom);
              prod = !prod ? std::pair{(*this)(atom), atom}
                           : std::pair{op("mul", prod->first, operand(atom), prod->second * atom), prod->second * atom};
            }
          if (t.coeff != 1) prod = std::pair{op("mul", prod->first, json{{"as_int", t.coeff}}, prod->second * t.coeff), prod->second * t.coeff};
          acc = !acc ? prod
                     : std::pair{op("add", acc->first, json{{"as_name", prod->first}}, acc->second + prod->second), acc->second + prod->second};
        }
        if (n.constant > 0) acc = std::pair{op("add", acc->first, json{{"as_int", n.constant}}, acc->second + n.constant), acc->second + n.constant};
        if (n.constant < 0) acc = std::pair{op("sub", acc->first, json{{"as_int", -n.constant}}, acc->second - (-n.constant)), acc->second - (-n.constant)};
        name = acc->first;
        break;
      }
      case K::floordiv: name = op_node("floordiv", operand(rehint(n.args[0])), operand(rehint(n.args[1])), e, "_operator."); break;
      case K::mod: name = op_node("mod", operand(rehint(n.args[0])), operand(rehint(n.args[1])), e, "_operator."); break;
      case K::min:
      case K::max: {  // n-ary, folded pairwise
        std::vector<sym_int> args;
        for (const auto& a : n.args) args.push_back(rehint(a));
        sym_int acc = args[0];
        json acc_j = operand(acc);
        for (std::size_t i = 1; i < args.size(); ++i) {
          acc = n.kind == K::min ? sym::min(acc, args[i]) : sym::max(acc, args[i]);
          acc_j = {{"as_name", op_node(n.kind == K::min ? "min" : "max", acc_j, operand(args[i]), acc, "torch.sym_")}};
        }
        name = acc_j["as_name"].get<std::string>();
        break;
      }
    }
    named_.emplace(e.str(), name);
    return name;
  }

  /// Where the SymFloat and SymBool values' types go.
  void scalar_tables(json& floats, json& bools) {
    floats_ = &floats;
    bools_ = &bools;
  }

  /// The name of a value equal to SymFloat / SymBool `s` (written on first use): one node per
  /// operation, as torch writes them (`_operator.truediv`, `torch.sym_float`, `_operator.gt`).
  std::string operator()(const sym_scalar& s) {
    const auto key = "#" + s.str();
    if (auto it = named_.find(key); it != named_.end()) return it->second;
    using op = sym_scalar::op;
    const auto& x = s.root();
    json inputs = json::array({{{"name", "a"}, {"arg", scalar_operand(x.a)}, {"kind", 1}}});
    if (x.b) inputs.push_back({{"name", "b"}, {"arg", scalar_operand(x.b)}, {"kind", 1}});
    const auto fx = sym_scalar::fx_of(x.kind);
    const std::string what = x.kind == op::compare ? std::string(sym_relation::kind_of(x.cmp).fx) : std::string(fx.name);
    if (what.empty()) throw error("xport.save.symbolic_argument", "a SymFloat argument is a bare number or size: " + s.str());
    const auto name = fresh(x.name.empty() ? what : x.name);
    const bool is_bool = s.is_bool();
    nodes_.push_back({{"target", x.kind == op::compare ? "_operator." + what : std::string(fx.target)},
                      {"inputs", std::move(inputs)},
                      {"outputs", json::array({{{is_bool ? "as_sym_bool" : "as_sym_float", {{"as_name", name}}}}})},
                      {"metadata", empty_module_stack()},
                      {"name", name}});
    auto& table = is_bool ? *bools_ : *floats_;
    table[name] = {{"as_expr", {{"expr_str", srepr(x)}, {"hint", is_bool ? json(nullptr) : json{{"as_float", float_json(s.hint())}}}}}};
    named_.emplace(key, name);
    return name;
  }

 private:
  /// A SymFloat operation's operand as torch writes it: `as_int`, `as_float`, a SymInt's or a SymFloat's name.
  json scalar_operand(const sym_scalar::node_ptr& x) {
    using op = sym_scalar::op;
    if (x->kind == op::integer)
      return x->size.is_constant() ? json{{"as_int", x->size.value()}} : json{{"as_sym_int", {{"as_name", (*this)(x->size)}}}};
    if (x->kind == op::number) return {{"as_float", float_json(x->number)}};
    return {{sym_scalar::bool_node(*x) ? "as_sym_bool" : "as_sym_float", {{"as_name", (*this)(sym_scalar(x))}}}};
  }

  /// sympy's srepr of a SymFloat / SymBool, as torch writes it in sym_float_values: sums and
  /// products with their number first in a product and last in a sum.
  static std::string srepr(const sym_scalar::node& x) {
    using op = sym_scalar::op;
    const auto fn = [&](const char* f) { return std::string(f) + "(" + srepr(*x.a) + ", " + srepr(*x.b) + ")"; };
    const auto number = [](const sym_scalar::node& n) { return n.kind == op::number; };
    const auto negated = [&](const sym_scalar::node& n) {
      return number(n) ? "Float('" + sym_scalar::float_text(-n.number, 17) + "', precision=53)" : "Mul(Integer(-1), " + srepr(n) + ")";
    };
    switch (x.kind) {
      case op::integer: return x.size.is_constant() ? "Integer(" + std::to_string(x.size.value()) + ")" : sym::srepr(x.size);
      case op::number: return "Float('" + sym_scalar::float_text(x.number, 17) + "', precision=53)";
      case op::to_float: return "ToFloat(" + srepr(*x.a) + ")";
      case op::int_truediv: return fn("IntTrueDiv");
      case op::float_truediv: return fn("FloatTrueDiv");
      case op::pow: return fn("FloatPow");
      case op::add: return number(*x.a) ? "Add(" + srepr(*x.b) + ", " + srepr(*x.a) + ")" : fn("Add");
      case op::sub: return "Add(" + srepr(*x.a) + ", " + negated(*x.b) + ")";
      case op::mul: return number(*x.b) ? "Mul(" + srepr(*x.b) + ", " + srepr(*x.a) + ")" : fn("Mul");
      case op::neg: return negated(*x.a);
      case op::compare: {
        const auto k = sym_relation::kind_of(x.cmp).sympy;
        return std::string(k) + "(" + srepr(*x.a) + ", " + srepr(*x.b) + ")";
      }
      case op::logical_and:
      case op::logical_or: {  // sympy orders And's and Or's arguments
        auto a = srepr(*x.a), b = srepr(*x.b);
        if (b < a) std::swap(a, b);
        return std::string(x.kind == op::logical_and ? "And(" : "Or(") + a + ", " + b + ")";
      }
      case op::logical_not: {
        if (x.a->kind != op::compare) return "Not(" + srepr(*x.a) + ")";
        auto flipped = *x.a;
        flipped.cmp = sym_scalar::negated(flipped.cmp);
        return srepr(flipped);
      }
    }
    return "";
  }

  struct site {
    std::string symbol, input;
    std::int64_t dim, a, b;
    sym_int size;
  };

  std::string fresh(const std::string& base) {
    std::string n = base;
    for (int k = 1; taken_.count(n); ++k) n = base + "_" + std::to_string(k);
    taken_.insert(n);
    return n;
  }

  /// The `_operator.le` (and kin) node of relation `r` and the `_assert_scalar` node on it, as
  /// torch writes a runtime assertion; `burn` skips a name first, as torch's trace used one.
  void write_assertion(const sym_relation& r, bool burn, const json& meta, json& sym_bool_values) {
    const auto& kind = r.kind_of();
    const std::string what(kind.fx);
    const auto side = [&](const sym_int& e) {
      return e.is_constant() ? json{{"as_int", e.value()}} : json{{"as_sym_int", {{"as_name", (*this)(e)}}}};
    };
    json a = side(r.lhs), b = side(r.rhs);
    if (burn) (void)fresh(what);
    const auto name = fresh(what);
    nodes_.push_back({{"target", "_operator." + what},
                      {"inputs", json::array({{{"name", "a"}, {"arg", std::move(a)}, {"kind", 1}},
                                              {{"name", "b"}, {"arg", std::move(b)}, {"kind", 1}}})},
                      {"outputs", json::array({{{"as_sym_bool", {{"as_name", name}}}}})},
                      {"metadata", meta},
                      {"name", name}});
    sym_bool_values[name] = {{"as_expr", {{"expr_str", std::string(kind.sympy) + "(" + sym::srepr(r.lhs) + ", " + sym::srepr(r.rhs) + ")"},
                                          {"hint", nullptr}}}};
    const auto msg = "Runtime assertion failed for expression " + r.str() + " on node '" + name + "'";
    nodes_.push_back({{"target", "torch.ops.aten._assert_scalar.default"},
                      {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_sym_bool", {{"as_name", name}}}}}, {"kind", 1}},
                                              {{"name", "assert_msg"}, {"arg", {{"as_string", msg}}}, {"kind", 1}}})},
                      {"outputs", json::array()},
                      {"metadata", meta},
                      {"name", fresh("_assert_scalar_default")}});
  }

  // A value equal to the bare symbol `s`: sym_size of the input dim that gives it.
  std::pair<std::string, sym_int> symbol(const std::string& s) {
    if (auto it = symbols_.find(s); it != symbols_.end()) return it->second;
    const site* best = nullptr;
    for (const auto& st : sites_)
      if (st.symbol == s && (!best || (st.a == 1 && st.b == 0 && (best->a != 1 || best->b != 0)))) best = &st;
    if (!best)
      throw error("xport.save.symbolic_argument", "an operator argument uses the symbol " + s +
                                                      ", which no input dimension gives; the program is malformed");
    std::string name = fresh("sym_size_int");
    nodes_.push_back({{"target", "torch.ops.aten.sym_size.int"},
                      {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_tensor", {{"name", best->input}}}}}, {"kind", 1}},
                                              {{"name", "dim"}, {"arg", {{"as_int", best->dim}}}, {"kind", 1}}})},
                      {"outputs", json::array({{{"as_sym_int", {{"as_name", name}}}}})},
                      {"metadata", empty_module_stack()},
                      {"name", name}});
    values_[name] = sym_int_json(best->size);
    sym_int expr = best->size;  // a derived dim (a*s + b) gives s back as (size - b) // a
    if (best->b != 0) name = op("sub", name, best->b, expr = expr - best->b);
    if (best->a != 1) name = op("floordiv", name, best->a, expr = sym::floordiv(expr, best->a));
    return symbols_.emplace(s, std::pair{name, expr}).first->second;
  }

  /// `e` with the hints of its parts (the atoms of a canonical form keep none of their own).
  static sym_int rehint(const sym_int& e) {
    return sym::substitute(e, [](std::string_view) { return std::optional<sym_int>(); });
  }
  /// `{"as_int": c}` for a constant, else `{"as_name": <its value>}`.
  json operand(const sym_int& e) {
    if (e.is_constant()) return {{"as_int", e.value()}};
    return {{"as_name", (*this)(e)}};
  }
  std::string op(const char* what, const std::string& lhs, std::int64_t rhs, const sym_int& result) {
    return op(what, lhs, json{{"as_int", rhs}}, result);
  }
  std::string op(const char* what, const std::string& lhs, json rhs, const sym_int& result,
                 const std::string& prefix = "_operator.") {
    return op_node(what, json{{"as_name", lhs}}, std::move(rhs), result, prefix);
  }
  /// `<prefix><what>(a, b)`: `_operator.mul(a, b)`, `torch.sym_max(a, b)`; operands are
  /// `{"as_name": ...}` or `{"as_int": ...}`.
  std::string op_node(const char* what, json a, json b, const sym_int& result, const std::string& prefix) {
    std::string name = fresh(std::string("sym_") + what);
    nodes_.push_back({{"target", prefix + what},
                      {"inputs", json::array({{{"name", "a"}, {"arg", {{"as_sym_int", std::move(a)}}}, {"kind", 1}},
                                              {{"name", "b"}, {"arg", {{"as_sym_int", std::move(b)}}}, {"kind", 1}}})},
                      {"outputs", json::array({{{"as_sym_int", {{"as_name", name}}}}})},
                      {"metadata", empty_module_stack()},
                      {"name", name}});
    values_[name] = sym_int_json(result);
    return name;
  }

  json& nodes_;
  json& values_;
  json* floats_ = nullptr;
  json* bools_ = nullptr;
  std::unordered_set<std::string> taken_;
  std::unordered_map<std::string, std::string> named_;                       // expression -> value
  std::unordered_map<std::string, std::pair<std::string, sym_int>> symbols_;  // symbol -> value
  std::unordered_set<std::string> unbacked_;                                   // the unbacked symbols given so far
  std::vector<site> sites_;
  struct pending_relation {
    sym_relation relation;
    std::vector<std::string> waits;  // its data-dependent symbols: written after the call that gives the last
    bool written;
  };
  std::vector<pending_relation> relations_;
};

/// torch's `nn_module_stack` of a node in module `path`: one `key,path,type` entry per
/// module from the root down (`L__self__,,Net;L__self__fc,fc,torch::nn::LinearImpl`), joined
/// by ';'. Types come from the program's module table (in a type with commas, C++ template
/// arguments, '<' '>' become '[' ']' so that the commas stay nested, as torch's reader expects;
/// other types, Python's `f.<locals>.Wrapper` among them, keep theirs; ';' becomes ':').
/// As torch's, the stack holds the modules that were called: an enclosing module is left out
/// when it is a container nothing calls (a ModuleList or ModuleDict, C++'s or one a .pt2's
/// stacks never name). As torch's, a key counts the module's calls: a module's nodes in a row are
/// one call, and the next run of them its next call (`L__self__b.relu@1`: b.relu's second call),
/// by which torch's unflatten tells a module called twice from one call.
class module_stack_writer {
 public:
  explicit module_stack_writer(const std::vector<std::pair<std::string, std::string>>& types)
      : types_(types.begin(), types.end()) {}

  /// The stack of the next node in graph order, in module `path`.
  std::string operator()(const std::string& path) {
    std::vector<std::string> frames;
    for (std::size_t dot = 0; !path.empty() && dot != std::string::npos;) {
      dot = path.find('.', dot + 1);
      auto fqn = path.substr(0, dot);
      if (dot == std::string::npos || called(fqn)) frames.push_back(std::move(fqn));
    }
    std::vector<std::pair<std::string, int>> now;
    for (std::size_t i = 0; i < frames.size(); ++i)
      if (now.size() == i && i < open_.size() && open_[i].first == frames[i]) now.push_back(open_[i]);  // the same call
      else now.emplace_back(frames[i], calls_[frames[i]]++);
    open_ = now;
    std::string out = entry("", 0);
    for (const auto& [fqn, call] : now) out += ";" + entry(fqn, call);
    return out;
  }

 private:
  [[nodiscard]] bool called(const std::string& fqn) const {
    const auto it = types_.find(fqn);
    // (a .pt2's with no type: no node's stack names it)
    return it != types_.end() && !it->second.empty() && !is_module_container(it->second);
  }
  [[nodiscard]] std::string entry(const std::string& fqn, int call) const {
    std::string type;
    if (auto it = types_.find(fqn); it != types_.end()) {
      const bool commas = it->second.find(',') != std::string::npos;
      for (char c : it->second) type += commas && c == '<' ? '[' : commas && c == '>' ? ']' : c == ';' ? ':' : c;
    }
    return "L__self__" + fqn + (call ? "@" + std::to_string(call) : std::string()) + "," + fqn + "," + type;
  }

  std::unordered_map<std::string, std::string> types_;
  std::unordered_map<std::string, int> calls_;
  std::vector<std::pair<std::string, int>> open_;  // the previous node's frames: (module, call)
};
/// The path of the innermost module of an `nn_module_stack` (`fc` above), and every (path, type).
inline std::string module_path_of_stack(const std::string& stack, std::vector<std::pair<std::string, std::string>>* types) {
  std::string path;
  if (stack.starts_with(empty_stack_hook)) return path;  // no module's
  std::size_t start = 0;
  while (start <= stack.size()) {
    const auto end = std::min(stack.find(';', start), stack.size());
    // key,path,type with commas nested in () or [] kept (torch's metadata_split)
    std::vector<std::string> fields(1);
    int nesting = 0;
    for (std::size_t i = start; i < end; ++i) {
      const char c = stack[i];
      if (c == '(' || c == '[') ++nesting;
      if (c == ')' || c == ']') --nesting;
      if (c == ',' && nesting == 0) fields.emplace_back();
      else fields.back() += c;
    }
    if (fields.size() >= 2) {
      path = fields[1];
      if (types && fields.size() == 3) types->emplace_back(fields[1], fields[2]);
    }
    start = end + 1;
  }
  return path;
}

/// Subgraph `s` of `p` as a program of its own, its nodes' modules typed as `p`'s are.
inline exported_program subgraph_program_of(const exported_program& p, const subgraph& s) {
  auto q = subgraph_program(s);
  q.set_module_types(p.module_types());
  return q;
}

/// The inputs of a call of `hop` that names an operator (auto_functionalized, with_effects), as
/// torch writes them: positional ones unnamed (the operator as_operator, its positional
/// arguments spread), then its keyword arguments by name (kind 2).
template <class Namer>
json named_call_json(const higher_order_op& hop, std::span<const argument> args, Namer&& namer) {
  using T = higher_order_op::param::type;
  json in = json::array();
  const auto positional = [&](json arg) { in.push_back({{"name", ""}, {"arg", std::move(arg)}, {"kind", 1}}); };
  for (std::size_t i = 0; i < hop.params.size() && i < args.size(); ++i) {
    switch (hop.params[i].kind) {
      case T::op: positional({{"as_operator", find_op(args[i].as_string()).target}}); break;
      case T::values:
        for (const auto& e : args[i].as_list()) positional(argument_json(e, nullptr, namer));
        break;
      case T::kwargs:
        for (const auto& kv : args[i].as_list())
          in.push_back({{"name", kv.as_list().at(0).as_string()}, {"arg", argument_json(kv.as_list().at(1), nullptr, namer)},
                        {"kind", 2}});
        break;
      default: positional(argument_json(args[i], nullptr, namer));
    }
  }
  return in;
}

inline json graph_json(const exported_program& p);

/// The inputs of call node `n` of `p`, as torch writes them: the arguments its maker passed
/// (Note [Call forms]), by name and kind; a higher-order call's positional and unnamed (the
/// trailing operands spread, subgraphs written whole), or by keyword after the operator it names.
template <class Namer>
json call_inputs_json(const exported_program& p, const node& n, Namer&& namer) {
  const auto& op = n.op();
  const auto& params = op.schema().arguments();
  const auto args = n.args();
  const auto* hop = hop_of(op);
  if (hop && hop->calls_by_name()) return named_call_json(*hop, args, namer);
  json in = json::array();
  const auto form = op.higher_order ? std::nullopt : n.form() ? n.form() : default_call_form(op, args);
  for (std::size_t i = 0; i < params.size() && i < args.size(); ++i) {
    if (form && !(form->given >> i & 1)) continue;  // left at its default, as torch leaves it out
    if (hop && hop->spread_last && i + 1 == params.size() && args[i].is_list()) {  // written spread, as torch writes it
      for (const auto& e : args[i].as_list()) in.push_back({{"name", ""}, {"arg", argument_json(e, nullptr, namer)}, {"kind", 1}});
      continue;
    }
    json arg = args[i].is_graph() ? json{{"as_graph", {{"name", args[i].as_graph()->name},
                                                       {"graph", graph_json(subgraph_program_of(p, *args[i].as_graph()))}}}}
                                  : argument_json(args[i], op.higher_order ? nullptr : params[i].real_type(), namer);
    const bool keyword = form ? (form->keyword >> i & 1) != 0 : params[i].kwarg_only();
    in.push_back({{"name", op.higher_order ? std::string() : params[i].name()}, {"arg", std::move(arg)}, {"kind", keyword ? 2 : 1}});
  }
  return in;
}

inline json graph_json(const exported_program& p) {
  const graph& g = p.graph();
  json inputs = json::array(), nodes = json::array(), outputs = json::array();
  json tensor_values = json::object(), sym_int_values = json::object(), sym_bool_values = json::object(),
       sym_float_values = json::object(), custom_obj_values = json::object();
  sym_writer name_sym(g, p.range_constraints(), nodes, sym_int_values);
  name_sym.scalar_tables(sym_float_values, sym_bool_values);
  const sym_namer namer{[&](const sym_int& e) { return name_sym(e); }, [&](const sym_scalar& e) { return name_sym(e); }};
  // an output no getitem reads (value::unpacked) is named as torch names it: <node>_unused_<i>
  const auto name_of = [](const node& n, value v) {
    return n.has_tuple_output() && !v.unpacked() && v.num_uses() == 0
               ? n.name() + "_unused_" + std::to_string(v.index())
               : v.name();
  };
  const auto record = [&](value v, const std::string& name) {
    if (v.kind() == value_kind::tensor) tensor_values[name] = tensor_meta_json(v.meta());
    else if (v.kind() == value_kind::sym_int) sym_int_values[name] = sym_int_json(v.type().scalar);
    else if (v.kind() == value_kind::object) custom_obj_values[name] = value_ref(v)["as_custom_obj"];
  };
  module_stack_writer stack_of(p.module_types());
  std::size_t ph = 0;
  for (auto n : g.nodes()) {
    if (n.is_placeholder()) {
      const auto& spec = p.signature().input_specs.at(ph++);
      // a specialized constant is written as its value, as torch writes it (its name is the spec's)
      if (spec.arg.type == argument_spec::kind::constant) inputs.push_back(constant_value_json(spec.arg.constant));
      else inputs.push_back(value_ref(n.output(0)));
      record(n.output(0), n.output(0).name());
      continue;
    }
    if (n.kind() == node_kind::output) {
      for (const auto& a : n.args()) outputs.push_back(argument_json(a, nullptr));
      continue;
    }
    const auto& op = n.op();
    json in = call_inputs_json(p, n, namer);
    json out = json::array();
    if (op.returns_list && !op.higher_order) {
      json list = json::array();
      for (auto v : n.outputs()) list.push_back({{"name", name_of(n, v)}});
      out.push_back({{"as_tensors", std::move(list)}});
    } else {
      for (auto v : n.outputs()) {
        json ref = value_ref(v);
        if (v.kind() == value_kind::tensor) ref["as_tensor"]["name"] = name_of(n, v);
        out.push_back(v.kind() == value_kind::none ? json{{"as_none", true}} : std::move(ref));
      }
    }
    for (auto v : n.outputs()) record(v, name_of(n, v));
    json meta = json::object();
    if (const auto& s = n.source(); s && !s->file.empty()) meta["stack_trace"] = stack_trace_of(*s);
    if (const auto& s = n.source(); s && !s->custom_json.empty()) meta["custom"] = s->custom_json;
    meta["nn_module_stack"] = stack_of(n.module_path());
    nodes.push_back({{"target", op.target}, {"inputs", std::move(in)}, {"outputs", std::move(out)},
                     {"metadata", std::move(meta)}, {"name", n.name()}});
    if (op.higher_order) nodes.back()["is_hop_single_tensor_return"] = !op.returns_list;  // (out_dtype)
    name_sym.give_unbacked(n, sym_bool_values);
  }
  return {{"inputs", std::move(inputs)},   {"outputs", std::move(outputs)},
          {"nodes", std::move(nodes)},     {"tensor_values", std::move(tensor_values)},
          {"sym_int_values", std::move(sym_int_values)}, {"sym_bool_values", std::move(sym_bool_values)},
          {"is_single_tensor_return", g.returns_bare()}, {"custom_obj_values", std::move(custom_obj_values)},
          {"sym_float_values", std::move(sym_float_values)}};
}

/// The program's call structure: its in_spec and out_spec or, for a program built by hand, one
/// argument per user input (named by it) and one result per user output.
inline std::pair<treespec, treespec> call_specs(const exported_program& p) {
  if (p.in_spec() && p.out_spec()) return {*p.in_spec(), *p.out_spec()};
  treespec in = treespec::of(treespec::kind::tuple), out = treespec::of(treespec::kind::tuple);
  for (const auto& s : p.signature().input_specs) {
    if (s.kind != input_kind::user_input) continue;
    in.children.push_back(s.arg.type == argument_spec::kind::constant ? treespec::constant(s.arg.constant) : treespec::leaf());
    in.keys.push_back(s.arg.name);
  }
  for (const auto& s : p.signature().output_specs)
    if (s.kind == output_kind::user_output || s.kind == output_kind::loss_output)
      out.children.push_back(s.arg.type == argument_spec::kind::constant ? treespec::constant(s.arg.constant) : treespec::leaf());
  return {std::move(in), std::move(out)};
}

/// A preserved submodule's signature as torch writes it; null when none is kept.
inline json module_call_json(const exported_program& p, const std::string& fqn) {
  const auto it = p.module_call_signatures().find(fqn);
  if (it == p.module_call_signatures().end()) return nullptr;
  const auto& sig = it->second;
  json inputs = json::array(), outputs = json::array();
  for (const auto& a : sig.inputs) inputs.push_back(spec_arg_json(a));
  for (const auto& a : sig.outputs) outputs.push_back(spec_arg_json(a));
  json names = nullptr;
  if (sig.forward_arg_names) names = *sig.forward_arg_names;
  return {{"inputs", std::move(inputs)},
          {"outputs", std::move(outputs)},
          {"in_spec", json::array({1, pytree_json(sig.in_spec)}).dump()},
          {"out_spec", json::array({1, pytree_json(sig.out_spec)}).dump()},
          {"forward_arg_names", std::move(names)}};
}

/// Fails unless every value a preserved call signature names is one the graph writes: a pass
/// that replaced a boundary value without carrying its name over would give torch's unflatten a
/// call it cannot wire.
inline void check_module_call_names(const exported_program& p) {
  std::set<std::string> names;
  for (auto n : p.graph().nodes())
    for (auto v : n.outputs()) names.insert(v.name());
  for (const auto& [fqn, sig] : p.module_call_signatures())
    for (const auto* side : {&sig.inputs, &sig.outputs})
      for (const auto& a : *side) {
        if (a.type == argument_spec::kind::constant || names.count(a.name)) continue;
        throw error("xport.save.module_call",
                    "the preserved call signature of submodule '" + fqn + "' names value '" + a.name + "' as one of its " +
                        (side == &sig.inputs ? "inputs" : "outputs") +
                        ", but the graph has no value of that name (a transformation replaced it without carrying the "
                        "boundary over). Export again with the boundary preserved, or drop it with "
                        "p.set_module_call_signature(\"" + fqn + "\", std::nullopt): torch then unflattens the submodule "
                        "without its call signature");
      }
}

/// torch's module call graph: the root's signature (how ep.module() is called: in_spec of
/// `(args, kwargs)`, out_spec, the forward's argument names), then one entry per submodule.
inline json module_call_graph_json(const exported_program& p) {
  const auto [in, out] = call_specs(p);
  json names = json::array();
  if (in.keys.size() == in.children.size())
    for (const auto& k : in.keys) names.push_back(k);
  json graph = json::array({{{"fqn", ""},
                             {"signature",
                              {{"inputs", json::array()},
                               {"outputs", json::array()},
                               {"in_spec", pytree_in_spec(in)},
                               {"out_spec", json::array({1, pytree_json(out)}).dump()},
                               {"forward_arg_names", std::move(names)}}}}});
  const auto& signatures = p.module_call_signatures();
  if (!signatures.empty()) check_module_call_names(p);
  std::set<std::string> written;
  for (const auto& [fqn, type] : p.module_types())
    if (!fqn.empty() && written.insert(fqn).second) graph.push_back({{"fqn", fqn}, {"signature", module_call_json(p, fqn)}});
  for (const auto& [fqn, sig] : signatures)  // preserved, though the module table does not list it
    if (!fqn.empty() && written.insert(fqn).second) graph.push_back({{"fqn", fqn}, {"signature", module_call_json(p, fqn)}});
  return graph;
}

inline json program_json(const exported_program& p) {
  json input_specs = json::array(), output_specs = json::array();
  for (const auto& s : p.signature().input_specs) input_specs.push_back(input_spec_json(s));
  for (const auto& s : p.signature().output_specs) output_specs.push_back(output_spec_json(s));
  json metadata = json::object();
  json ranges = json::object(), dim_names = json::object();
  for (const auto& r : p.range_constraints()) {
    ranges[r.symbol.str()] = {{"min_val", r.min <= -int_oo ? json(nullptr) : json(r.min)},
                              {"max_val", r.max ? json(*r.max) : json(nullptr)}};
    if (!r.name.empty()) dim_names[r.symbol.str()] = r.name;
  }
  // the user's names of the dims (`s0` is `batch`), for guard messages after loading
  if (!dim_names.empty()) metadata["xport.dim_names"] = dim_names.dump();
  return {{"graph_module",
           {{"graph", graph_json(p)},
            {"signature", {{"input_specs", std::move(input_specs)}, {"output_specs", std::move(output_specs)}}},
            {"module_call_graph", module_call_graph_json(p)},
            {"metadata", std::move(metadata)},
            {"treespec_namedtuple_fields", json::object()}}},
          {"opset_version", {{"aten", aten_opset_version()}}},
          {"range_constraints", std::move(ranges)},
          {"schema_version", {{"major", schema_version_major}, {"minor", schema_version_minor}}},
          {"verifiers", json::array({std::string(to_string(p.dialect()))})},
          {"torch_version", torch_version()},
          {"guards_code", json::array()}};
}

// ---- JSON -> program -------------------------------------------------------------------------

/// Whether a node computes an integer size (read into an expression, not kept as a node):
/// `aten.sym_size.int` and its kin, `_operator.*`, `torch.sym_*`, `math.*`.
inline bool is_sym_node(const std::string& target) {
  return target == "torch.ops.aten.sym_size.int" || target == "torch.ops.aten.sym_stride.int" ||
         target == "torch.ops.aten.sym_numel.default" || target == "torch.ops.aten.sym_storage_offset.default" ||
         target.rfind("_operator.", 0) == 0 || target.rfind("torch.sym_", 0) == 0 || target.rfind("math.", 0) == 0;
}

/// The inputs of one sym_size / _operator node, read against the scope.
struct sym_node_reader {
  const at_path& nj;
  const std::string& target;
  const value_scope& scope;
  at_path ins;

  /// The argument the node passes as input `name`.
  at_path input(const char* name) const {
    for (std::size_t a = 0, n = ins.size_of_array(); a < n; ++a)
      if (ins[a]["name"].str() == name) return ins[a]["arg"];
    ins.fail(target + " has no input '" + name + "'");
  }

  /// A SymInt operand: an integer, a size an earlier node computed, or a SymInt value.
  sym_int operand(const at_path& j) const {
    auto [k, v] = j.one_of();
    if (k == "as_int") return v.integer();
    if (k != "as_sym_int") j.fail("expected a SymInt, got '" + k + "'");
    auto [k2, v2] = v.one_of();
    if (k2 == "as_int") return v2.integer();
    if (k2 != "as_name") v.fail("unknown member '" + k2 + "'");
    const auto name = v2.str();
    if (auto it = scope.syms.find(name); it != scope.syms.end()) return it->second;
    const auto val = scope(v2, name);
    if (val.kind() != value_kind::sym_int) v2.fail("'" + name + "' is not a SymInt");
    return val.type().scalar;
  }

  /// A SymFloat's operand: a number, a size, or a SymFloat an earlier node computed.
  sym_scalar scalar_operand(const at_path& j) const {
    auto [k, v] = j.one_of();
    if (k == "as_float") return sym_scalar::of(v.number());
    if (k == "as_int" || k == "as_sym_int") return sym_scalar::of(operand(j));
    if (k == "as_bool") return sym_scalar::of(v.boolean() ? 1.0 : 0.0);
    if (k != "as_sym_float" && k != "as_sym_bool") j.fail("expected a number, a SymInt, a SymFloat or a SymBool, got '" + k + "'");
    auto [k2, v2] = v.one_of();
    if (k2 == "as_float") return sym_scalar::of(v2.number());
    if (k2 != "as_name") v.fail("unknown member '" + k2 + "'");
    if (auto it = scope.scalars.find(v2.str()); it != scope.scalars.end()) return it->second;
    v2.fail("'" + v2.str() + "' is no SymFloat or SymBool computed from sizes (xport reads torch.sym_float, torch.sym_not "
            "and _operator nodes on sizes)");
  }

  /// Whether operand `j` is a float (a number or a SymFloat) rather than an int.
  static bool is_float_operand(const at_path& j) {
    const auto [k, v] = j.one_of();
    return k == "as_float" || k == "as_sym_float";
  }

  /// The SymFloat the node computes (Note [SymFloat text] in ir/sym_scalar.hpp).
  sym_scalar scalar_result() const {
    using op = sym_scalar::op;
    const auto binary = [&](op k) { return sym_scalar::apply(k, scalar_operand(input("a")), scalar_operand(input("b"))); };
    if (target == "torch.sym_float") return sym_scalar::apply(op::to_float, scalar_operand(input("a")));
    if (target == "_operator.truediv") return binary(op::float_truediv);  // of two ints: IntTrueDiv
    if (target == "_operator.add") return binary(op::add);
    if (target == "_operator.sub") return binary(op::sub);
    if (target == "_operator.mul") return binary(op::mul);
    if (target == "_operator.pow") return binary(op::pow);
    if (target == "_operator.neg") return sym_scalar::apply(op::neg, scalar_operand(input("a")));
    if (target == "_operator.pos") return scalar_operand(input("a"));
    nj["target"].fail("operator '" + target + "' computing a SymFloat is not supported by xport (it reads torch.sym_float "
                      "and _operator truediv/add/sub/mul/pow/neg/pos)");
  }

  /// The tensor input `self`.
  value tensor_in() const {
    const auto self = input("self");
    auto [k, v] = self.one_of();
    if (k != "as_tensor") self.fail("expected a tensor, got '" + k + "'");
    const auto t = scope(v, v["name"].str());
    if (t.kind() != value_kind::tensor) v.fail("'" + t.name() + "' is not a tensor");
    return t;
  }

  /// The input `dim`, wrapped and checked against the rank of `t`.
  std::size_t dim_of(const value& t) const {
    const auto dj = input("dim");
    auto d = operand(dj);
    const auto r = static_cast<std::int64_t>(t.meta().sizes.size());
    std::int64_t dim = d.is_constant() ? d.hint() : r;
    if (dim < 0) dim += r;
    if (dim < 0 || dim >= r)
      dj.fail("dim " + d.str() + " is out of range for '" + t.name() + "' of rank " + std::to_string(r));
    return static_cast<std::size_t>(dim);
  }

  /// The size the node computes.
  sym_int result() const {
    const auto binary = [&](auto&& f) { return f(operand(input("a")), operand(input("b"))); };
    sym_int result;
    if (target == "torch.ops.aten.sym_size.int") {
      const auto t = tensor_in();
      result = t.meta().sizes[dim_of(t)];
    } else if (target == "torch.ops.aten.sym_stride.int") {
      const auto t = tensor_in();
      if (t.meta().strides.size() != t.meta().sizes.size()) nj.fail("'" + t.name() + "' has no strides");
      result = t.meta().strides[dim_of(t)];
    } else if (target == "torch.ops.aten.sym_numel.default") {
      result = 1;
      for (const auto& d : tensor_in().meta().sizes) result = result * d;
    } else if (target == "torch.ops.aten.sym_storage_offset.default") {
      result = tensor_in().meta().storage_offset;
    } else if (target == "_operator.add") result = binary([](const sym_int& a, const sym_int& b) { return a + b; });
    else if (target == "_operator.sub") result = binary([](const sym_int& a, const sym_int& b) { return a - b; });
    else if (target == "_operator.mul") result = binary([](const sym_int& a, const sym_int& b) { return a * b; });
    else if (target == "_operator.floordiv") result = binary([](const sym_int& a, const sym_int& b) { return sym::floordiv(a, b); });
    else if (target == "_operator.mod") result = binary([](const sym_int& a, const sym_int& b) { return sym::mod(a, b); });
    else if (target == "torch.sym_max") result = binary([](const sym_int& a, const sym_int& b) { return sym::max(a, b); });
    else if (target == "torch.sym_min") result = binary([](const sym_int& a, const sym_int& b) { return sym::min(a, b); });
    else if (target == "_operator.neg") result = -operand(input("a"));
    else if (target == "_operator.pos") result = operand(input("a"));
    else if (target == "_operator.pow") {
      const auto a = operand(input("a")), b = operand(input("b"));
      if (!b.is_constant() || b.hint() < 0 || b.hint() > 8) input("b").fail("expected an integer exponent in [0, 8]");
      result = 1;
      for (std::int64_t i = 0; i < b.hint(); ++i) result = result * a;
    } else {
      nj["target"].fail("operator '" + target + "' on sizes is not supported by xport (it reads sym_size, sym_stride, "
                        "sym_numel, sym_storage_offset, _operator add/sub/mul/floordiv/mod/neg/pos/pow and "
                        "torch.sym_max/sym_min)");
    }
    return result;
  }
};

/// The relation `_operator.ge` and its kin compute (`">="`), or null for another target.
inline const char* comparison_of(const std::string& target) {
  for (const auto& k : sym_relation::kinds)
    if (target.starts_with("_operator.") && target.substr(10) == k.fx) return k.op.data();
  return nullptr;
}

/// Whether a node asserts a fact on sizes (`_assert_scalar`, `sym_constrain_range[_for_size]`):
/// xport keeps it as the range of its symbol (Note [Runtime assertions as ranges]).
inline bool is_assert_node(const std::string& target) {
  return target == "torch.ops.aten._assert_scalar.default" || target == "torch.ops.aten.sym_constrain_range_for_size.default" ||
         target == "torch.ops.aten.sym_constrain_range.default";
}

/// Keeps the assertion `r` (between sizes, `u0 <= s77`) with the range of its last
/// data-dependent symbol (the last named, for sizes of the inputs alone).
inline void relate(const at_path& where, sym_relation r) {
  std::string owner;
  for (const auto& s : r.symbols())
    if (owner.empty() || (sym::is_unbacked(s) && !sym::is_unbacked(owner)) ||
        (sym::is_unbacked(s) == sym::is_unbacked(owner) && (s.size() > owner.size() || (s.size() == owner.size() && s > owner))))
      owner = s;
  if (owner.empty()) where.fail("an assertion between sizes names no symbol");
  auto& rels = active_symbols->find_or_add(owner).relations;
  const auto same = [&](const sym_relation& o) { return o.str() == r.str(); };
  if (std::none_of(rels.begin(), rels.end(), same)) rels.push_back(std::move(r));
}

// Note [Runtime assertions as ranges]: torch asserts what it knows of an unbacked symbol with
// `_assert_scalar` nodes on SymBools (`ge: "Sym(u0 >= 0)" = sym_size_int >= 0`), one bound each,
// the same bounds its range_constraints list. xport keeps each bound as the symbol's range: the
// interpreter checks it where the symbol gets its value (a nonzero's row count, an item()), with
// torch's message, and print and save make torch's nodes again from the range. An assertion
// that relates sizes (`u0 <= s77`, `u0 + u1 + 2 <= s77`: torch._check of an item() against a
// dim) is kept as a sym_relation of its last data-dependent symbol's range constraint: checked
// when the last of its symbols gets its value, printed and saved as torch's nodes right after
// the call that gives that symbol.
inline void read_assert_node(const at_path& nj, const std::string& target, value_scope& scope) {
  const sym_node_reader reader{nj, target, scope, nj["inputs"]};
  if (!active_symbols) nj.fail("an assertion outside a program");
  const auto bound = [&](const sym_int& s, const at_path& where, std::int64_t lo, std::int64_t hi) {
    const auto lin = sym::as_linear(s);
    if (!lin || lin->a != 1 || lin->b != 0)
      where.fail("xport keeps runtime assertions that bound one symbol by constants; " + s.str() + " is not a symbol");
    auto& r = active_symbols->find_or_add(lin->symbol).range;
    r.lo = std::max(r.lo, lo);
    r.hi = std::min(r.hi, hi);
    if (r.lo > r.hi) where.fail("the assertions leave " + lin->symbol + " no value (" + r.str() + ")");
  };
  if (target != "torch.ops.aten._assert_scalar.default") {
    const auto opt = [&](const char* name, std::int64_t dflt) {
      const auto a = reader.input(name);
      auto [k, v] = a.one_of();
      return k == "as_none" ? dflt : v.integer();
    };
    const auto size = reader.input("size");
    const bool for_size = target == "torch.ops.aten.sym_constrain_range_for_size.default";
    bound(reader.operand(size), size, opt("min", for_size ? 0 : -int_oo), opt("max", int_oo));
    return;
  }
  const auto self = reader.input("self");
  auto [k, v] = self.one_of();
  if (k != "as_sym_bool") self.fail("_assert_scalar asserts a SymBool, not '" + k + "'");
  auto [k2, v2] = v.one_of();
  if (k2 != "as_name") v.fail("expected a SymBool node's name, got '" + k2 + "'");
  const auto it = scope.conditions.find(v2.str());
  if (it == scope.conditions.end())
    v2.fail("'" + v2.str() + "' is no comparison of sizes (xport reads _operator ge/le/gt/lt/eq nodes as SymBools)");
  const auto& c = it->second;
  const bool sym_left = c.rhs.is_constant();
  if (c.lhs.is_constant() && c.rhs.is_constant()) {
    if (!sym_relation{c.lhs, c.op, c.rhs}.holds(c.lhs.value(), c.rhs.value()))
      v2.fail("the assertion " + c.lhs.str() + " " + c.op + " " + c.rhs.str() + " is false for every input");
    return;
  }
  const auto& s = sym_left ? c.lhs : c.rhs;
  const auto lin = sym::as_linear(s);
  if (!c.lhs.is_constant() && !c.rhs.is_constant()) return relate(v2, {c.lhs, c.op, c.rhs});
  if (!lin || lin->a != 1 || lin->b != 0 || c.op == "!=") return relate(v2, {c.lhs, c.op, c.rhs});  // `u0 + u1 <= 8`
  const auto n = (sym_left ? c.rhs : c.lhs).hint();
  std::string op = c.op;
  if (!sym_left) op = op == ">=" ? "<=" : op == "<=" ? ">=" : op == ">" ? "<" : op == "<" ? ">" : op;  // n OP s: s OP' n
  if (op == ">=") bound(s, v2, n, int_oo);
  else if (op == ">") bound(s, v2, n + 1, int_oo);
  else if (op == "<=") bound(s, v2, -int_oo, n);
  else if (op == "<") bound(s, v2, -int_oo, n - 1);
  else bound(s, v2, n, n);
}

/// A sym_size / _operator node: its result becomes an expression arguments can name.
inline void read_sym_node(const at_path& nj, const std::string& target, value_scope& scope) {
  const sym_node_reader reader{nj, target, scope, nj["inputs"]};
  const auto outs = nj["outputs"];
  if (outs.size_of_array() != 1) outs.fail(target + " returns one SymInt");
  auto [ok, ov] = outs[0].one_of();
  if (ok == "as_sym_bool" && comparison_of(target)) {
    const auto a = reader.input("a"), b = reader.input("b");
    const auto name = ov["as_name"].str();
    scope.scalars[name] = sym_scalar::compare(comparison_of(target), reader.scalar_operand(a), reader.scalar_operand(b)).named(name);
    if (!sym_node_reader::is_float_operand(a) && !sym_node_reader::is_float_operand(b))
      scope.conditions[name] = {reader.operand(a), comparison_of(target), reader.operand(b)};
    return;
  }
  if (ok == "as_sym_float") {
    const auto name = ov["as_name"].str();
    scope.scalars[name] = reader.scalar_result().named(name);
    return;
  }
  if (ok == "as_sym_bool") {
    const auto name = ov["as_name"].str();
    using op = sym_scalar::op;
    const auto operand = [&](const char* in) { return reader.scalar_operand(reader.input(in)); };
    if (target == "_operator.and_" || target == "_operator.or_")
      scope.scalars[name] = sym_scalar::apply(target == "_operator.and_" ? op::logical_and : op::logical_or, operand("a"), operand("b")).named(name);
    else if (target == "torch.sym_not")
      scope.scalars[name] = sym_scalar::apply(op::logical_not, operand("a")).named(name);
    else
      nj["target"].fail("operator '" + target + "' computes a SymBool xport does not represent (it reads comparisons of "
                        "sizes, _operator eq/ne/ge/gt/le/lt, and _operator.and_, _operator.or_, torch.sym_not)");
    return;
  }
  if (ok != "as_sym_int") outs[0].fail(target + " returns a SymInt, not '" + ok + "'");
  const auto out_name = ov["as_name"].str();
  sym_int result;
  try {
    result = reader.result();
  } catch (const graph_error& e) {
    nj.fail(e.what());
  }
  scope.syms[out_name] = result;
}

/// The graph's tables of value types: tensor_values, sym_int_values, and the optional
/// sym_bool_values and sym_float_values.
struct value_types {
  at_path tensor_values, sym_int_values;
  std::optional<at_path> sym_bool_values, sym_float_values;

  /// The type of the value `name`, which `where` names.
  value_type operator()(const at_path& where, const std::string& name) const {
    if (auto t = tensor_values.get(name)) return value_type::of(tensor_meta_of(*t));
    if (auto s = sym_int_values.get(name)) return value_type::of_sym_int(sym_int_of(*s));
    if (sym_bool_values && sym_bool_values->get(name)) return value_type{value_kind::sym_bool, {}, {}};
    if (sym_float_values && sym_float_values->get(name)) return value_type{value_kind::sym_float, {}, {}};
    where.fail("value '" + name + "' has no entry in tensor_values, sym_int_values, sym_bool_values or sym_float_values");
  }
};

/// The value type tables of graph `gj`, each checked to be an object.
inline value_types value_types_of(const at_path& gj) {
  const auto tensor_values = gj["tensor_values"];
  const auto sym_int_values = gj["sym_int_values"];
  (void)tensor_values.object();
  (void)sym_int_values.object();
  const auto sym_bool_values = gj.get("sym_bool_values"), sym_float_values = gj.get("sym_float_values");
  if (sym_bool_values) (void)sym_bool_values->object();
  if (sym_float_values) (void)sym_float_values->object();
  return {tensor_values, sym_int_values, sym_bool_values, sym_float_values};
}

/// Calls `f(where, name)` for each value a node output `out` names.
template <class F>
void each_output_name(const at_path& out, F&& f) {
  auto [k, v] = out.one_of();
  if (k == "as_tensor") f(v, v["name"].str());
  else if (k == "as_tensors")
    for (std::size_t i = 0, n = v.size_of_array(); i < n; ++i) f(v[i], v[i]["name"].str());
  else if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") f(v, v["as_name"].str());
  else if (k != "as_none") out.fail("unsupported node output kind '" + k + "'");
}

/// Adds a placeholder to `g` for each graph input, checked against its input spec.
inline void read_graph_inputs(const at_path& inputs, const graph_signature& sig, const value_types& type_of,
                              graph& g, value_scope& scope) {
  if (inputs.size_of_array() != sig.input_specs.size())
    inputs.fail("the graph has " + std::to_string(inputs.size_of_array()) + " inputs but the signature has " +
                std::to_string(sig.input_specs.size()) + " input specs");
  for (std::size_t i = 0, n = inputs.size_of_array(); i < n; ++i) {
    auto [k, v] = inputs[i].one_of();
    const auto& spec = sig.input_specs[i];
    const bool constant = spec.arg.type == argument_spec::kind::constant;
    try {
      if (k == "as_int" || k == "as_float" || k == "as_bool" || k == "as_string" || k == "as_none") {
        // a specialized constant input: named by its spec, which holds the same value; nothing reads it
        if (!constant) inputs[i].fail("a constant graph input needs a constant_input spec, input spec " + std::to_string(i) + " is '" + spec.arg.name + "'");
        const auto value = constant_value_of(inputs[i]);
        const bool same = value == spec.arg.constant ||
                          (value.is_double() && spec.arg.constant.is_double() && std::isnan(value.as_double()) &&
                           std::isnan(spec.arg.constant.as_double()));
        if (!same) inputs[i].fail("the graph input's value differs from constant input '" + spec.arg.name + "'");
        (void)g.add_placeholder(spec.arg.name, value_type{value_kind::none, {}, {}});
        continue;
      }
      std::string name;
      if (k == "as_tensor") name = v["name"].str();
      else if (k == "as_sym_int") name = v["as_name"].str();
      else if (k == "as_custom_obj") {
        name = v["name"].str();
        if (spec.kind != input_kind::custom_obj)
          inputs[i].fail("graph input '" + name + "' is a custom object, but its input spec is not a custom_obj one");
        if (spec.arg.class_fqn != v["class_fqn"].str())
          inputs[i].fail("graph input '" + name + "' is of class " + v["class_fqn"].str() + " but its input spec says " + spec.arg.class_fqn);
        scope.defined.emplace(name, g.add_placeholder(name, value_type::of_object(spec.arg.class_fqn)));
        continue;
      } else inputs[i].fail("a graph input must be a tensor, a SymInt, a custom object or a constant, got '" + k + "'");
      if (constant) inputs[i].fail("input spec " + std::to_string(i) + " is the constant input '" + spec.arg.name + "' but the graph input is '" + name + "'");
      scope.defined.emplace(name, g.add_placeholder(name, type_of(inputs[i], name)));
    } catch (const graph_error& e) {
      inputs[i].fail(e.what());
    }
  }
}

/// The types and names of a call node's outputs.
struct call_outputs {
  std::vector<value_type> types;
  std::vector<std::string> names;
};

/// Reads the outputs `outs` of a call of `op` (node `node_name`), checked against what `op` returns.
inline call_outputs read_call_outputs(const at_path& outs, const op_info& op, const std::string& node_name,
                                      const value_types& type_of) {
  call_outputs r;
  std::size_t unnamed = 0;
  for (std::size_t o = 0, n = outs.size_of_array(); o < n; ++o) {
    auto [k, v] = outs[o].one_of();
    if (k == "as_none") {
      r.types.push_back(value_type{value_kind::none, {}, {}});
      r.names.push_back((node_name.empty() ? op.packet : node_name) + "_unused_" + std::to_string(unnamed++));
      continue;
    }
    each_output_name(outs[o], [&](const at_path& where, const std::string& name) {
      r.types.push_back(type_of(where, name));
      r.names.push_back(name);
    });
  }
  const bool tuple = op.returns_list || op.num_returns() != 1;
  if (!tuple && r.names.size() != 1) outs.fail(op.qualified + " returns one value, the node lists " + std::to_string(r.names.size()));
  if (op.returns_list && (outs.size_of_array() != 1 || !outs[0].object().contains("as_tensors")))
    outs.fail(op.qualified + " returns a Tensor[]: expected one as_tensors output");
  if (!op.returns_list && tuple && r.names.size() != op.num_returns())
    outs.fail(op.qualified + " returns " + std::to_string(op.num_returns()) + " values, the node lists " +
              std::to_string(r.names.size()));
  return r;
}

/// Why `target` cannot be read, and the fix: LibTorch's own operators need another LibTorch; a
/// user's operator needs the library that registers it loaded into the process first.
inline std::string unregistered_operator(const std::string& target) {
  if (target.rfind("torch._functorch.predispatch.", 0) == 0)
    return "'" + target + "' is a step of torch.vmap (also called by torch's associative_scan, and by flex_attention "
           "to build its masks), which torch writes into a training-IR program as Python functions of "
           "torch._functorch: no C++ operator runs them. Fix: save the program lowered "
           "(ep.run_decompositions(), where torch turns vmap into ATen operators), or batch without vmap";
  const auto parts = detail::split_op_name(target);
  const std::string name = parts.ns + "::" + parts.name + (parts.overload.empty() ? "" : "." + parts.overload);
  if (parts.ns == "quantized_decomposed")
    return "operator '" + target + "' is not registered in this process: torch defines the quantized_decomposed "
           "operators (quantized programs: PT2E, torchao's convert_pt2e) in Python only. Fix: #include "
           "<xport/quantized.hpp> in the program, which defines them in C++";
  if (parts.ns == "aten" || parts.ns == "prims")
    return "operator '" + target + "' is not registered in this LibTorch (" + torch_version() +
           "): the program needs a LibTorch that has " + name;
  std::vector<std::string> known;  // the library is loaded, but has no such operator (a version mismatch)
  for (const auto& n : c10::Dispatcher::singleton().getAllOpNames())
    if (n.name.rfind(parts.ns + "::", 0) == 0 && known.size() < 8)
      known.push_back(n.overload_name.empty() ? n.name : n.name + "." + n.overload_name);
  std::string msg = "custom operator " + name + " ('" + target + "') is not registered in this process: ";
  if (known.empty())
    msg += "no operator of library '" + parts.ns + "' is. Fix: load the library that defines it before load() "
           "(link it, or dlopen its shared library: its TORCH_LIBRARY(" + parts.ns + ", m) block registers " +
           "the schema, its TORCH_LIBRARY_IMPL blocks the kernels)";
  else {
    msg += "library '" + parts.ns + "' is loaded but defines no such operator (it has:";
    for (const auto& k : known) msg += " " + k;
    msg += "). Fix: load the version of the library the program was exported with";
  }
  return msg;
}

/// Reads a subgraph (an as_graph argument): its inputs become placeholders, its values a scope of
/// their own.
inline std::shared_ptr<const subgraph> subgraph_of(const at_path& aj,
                                                   std::vector<std::pair<std::string, std::string>>& module_types);

/// Reads the source, module path and stack of call node `nj` onto `created`.
inline void read_node_metadata(const at_path& nj, node created,
                               std::vector<std::pair<std::string, std::string>>& module_types) {
  const auto meta = nj["metadata"];
  (void)meta.object();
  std::shared_ptr<const source_location> src;
  if (auto st = meta.get("stack_trace")) src = source_of(st->str());
  if (auto custom = meta.get("custom")) {
    auto s = src ? *src : source_location{};
    s.custom_json = custom->str();
    s.annotation = annotation_of(s.custom_json);
    src = std::make_shared<const source_location>(std::move(s));
  }
  if (src) created.set_source(std::move(src));
  if (auto ms = meta.get("nn_module_stack")) created.set_module_path(module_path_of_stack(ms->str(), &module_types));
}

/// The arguments of a call of `hop` that names an operator (auto_functionalized, with_effects):
/// positional ones fill its parameters in order (its `values` parameter takes the rest of them),
/// the operator is an as_operator argument (xport holds its qualified name), keyword ones (kind
/// 2) become [name, value] pairs.
inline std::vector<argument> named_call_args(const higher_order_op& hop, const at_path& ins, value_scope& scope) {
  using T = higher_order_op::param::type;
  std::vector<argument> args(hop.params.size());
  argument::list_type values, kwargs;
  std::size_t next = 0;  // the parameter the next positional argument fills
  for (std::size_t a = 0, n = ins.size_of_array(); a < n; ++a) {
    const auto aj = ins[a]["arg"];
    if (const auto kind = ins[a].get("kind"); kind && kind->integer() == 2) {
      kwargs.push_back(argument::list_type{argument(ins[a]["name"].str()), argument_of(aj, scope)});
      continue;
    }
    while (next < hop.params.size() && hop.params[next].kind == T::kwargs) ++next;
    if (next >= hop.params.size())
      ins.fail(hop.target() + " takes " + hop.layout() + ": argument " + std::to_string(a) + " is one too many");
    if (hop.params[next].kind == T::values) {
      values.push_back(argument_of(aj, scope));
    } else if (hop.params[next].kind == T::op) {
      if (!aj.object().contains("as_operator")) aj.fail(hop.target() + "'s argument " + std::to_string(a) + " is not an operator (as_operator)");
      const auto target = aj["as_operator"].str();
      const auto* op = try_find_op(target);
      if (!op) aj.fail(unregistered_operator(target));
      args[next++] = argument(op->qualified);
    } else {
      args[next++] = argument_of(aj, scope);
    }
  }
  for (std::size_t i = 0; i < hop.params.size(); ++i) {
    if (hop.params[i].kind == T::values) args[i] = std::move(values);
    if (hop.params[i].kind == T::kwargs) args[i] = std::move(kwargs);
  }
  return args;
}

/// Fails unless `args` fit the layout of higher-order operator `hop` (graphs where it takes
/// subgraphs, tensors in its lists, a bool, a string or a dtype where it takes one).
inline void check_higher_order_args(const higher_order_op& hop, const std::vector<argument>& args, const at_path& ins) {
  using T = higher_order_op::param::type;
  for (std::size_t a = 0; a < args.size(); ++a) {
    const auto& p = hop.params[a];
    const auto& x = args[a];
    const bool ok = p.kind == T::any || (p.kind == T::graph && x.is_graph()) || (p.kind == T::tensors && x.is_list()) ||
                    (p.kind == T::boolean && x.is_bool()) || (p.kind == T::string && x.is_string()) ||
                    (p.kind == T::dtype_opt && (x.is_dtype() || x.is_none())) || (p.kind == T::dtype && x.is_dtype()) ||
                    (p.kind == T::bool_opt && (x.is_bool() || x.is_none())) || (p.kind == T::op && x.is_string()) ||
                    ((p.kind == T::values || p.kind == T::kwargs) && x.is_list()) ||
                    (p.kind == T::object && x.is_value() && x.as_value().kind() == value_kind::object);
    if (!ok)
      ins.fail(std::string(hop.python) + "'s arguments are " + hop.layout() + ": argument " + std::to_string(a) + " (" +
               std::string(p.name) + ") is not " +
               (p.kind == T::graph     ? "a subgraph (as_graph)"
                : p.kind == T::tensors ? "a list of tensors"
                : p.kind == T::object  ? "a custom object (as_custom_obj)"
                                       : "of its type"));
    if (p.kind != T::tensors) continue;
    for (std::size_t i = 0; i < x.as_list().size(); ++i)
      if (!x.as_list()[i].is_value() || x.as_list()[i].as_value().kind() != value_kind::tensor)
        ins.fail("operand " + std::to_string(i) + " of " + hop.target() + " is not a tensor: xport's higher-order "
                 "operators pass tensors only (torch carries an int as an unbacked SymInt; carry it as a 0-d tensor, "
                 "torch.tensor(n), instead)");
  }
}

/// Reads a call of a higher-order operator (torch.cond, while_loop, map, scan, wrap_with_...):
/// positional arguments (trailing ones gathered into one list where torch spreads them),
/// subgraphs as as_graph, one as_tensor output per result.
inline void read_higher_order_node(const at_path& nj, const std::string& target, const value_types& type_of,
                                   graph& g, value_scope& scope,
                                   std::vector<std::pair<std::string, std::string>>& module_types) {
  const auto& op = find_op(target);
  const auto& hop = *hop_of(op);
  const auto ins = nj["inputs"];
  std::vector<argument> args;
  if (hop.calls_by_name()) args = named_call_args(hop, ins, scope);
  for (std::size_t a = 0, n = hop.calls_by_name() ? 0 : ins.size_of_array(); a < n; ++a) {
    const auto aj = ins[a]["arg"];
    args.push_back(aj.object().contains("as_graph") ? argument(subgraph_of(aj["as_graph"], module_types))
                                                   : argument_of(aj, scope));
  }
  if (hop.spread_last && args.size() + 1 >= hop.params.size()) {  // the trailing operands, one list
    argument::list_type spread(args.begin() + static_cast<std::ptrdiff_t>(hop.params.size() - 1), args.end());
    args.resize(hop.params.size() - 1);
    args.emplace_back(std::move(spread));
  }
  if (args.size() != hop.params.size())
    ins.fail(op.qualified + " takes " + std::to_string(hop.params.size()) + " arguments " + hop.layout() + ", the node has " +
             std::to_string(args.size()));
  check_higher_order_args(hop, args, ins);
  std::vector<value_type> types;
  std::vector<std::string> names;
  const auto outs = nj["outputs"];
  const auto node_name = nj.get("name") ? nj["name"].str() : std::string(hop.name);
  for (std::size_t o = 0, n = outs.size_of_array(); o < n; ++o) {
    if (outs[o].object().contains("as_none")) {  // an operator's result that is None (auto_functionalized)
      types.push_back(value_type{value_kind::none, {}, {}});
      // named as torch's loader names it (a getitem it prints), though the file names nothing
      names.push_back(scope.nones ? "as_none_" + std::to_string(scope.nones) : std::string("as_none"));
      ++scope.nones;
      continue;
    }
    each_output_name(outs[o], [&](const at_path& where, const std::string& name) {
      types.push_back(type_of(where, name));
      names.push_back(name);
    });
  }
  node created;
  try {
    created = g.create_call_named(op, std::move(args), std::move(types), node_name, names);
  } catch (const graph_error& e) {
    nj.fail(e.what());
  }
  for (auto v : created.outputs()) {
    scope.defined.emplace(v.name(), v);
    if (v.kind() == value_kind::none) v.set_unpacked(true);  // printed, as torch prints a loaded program
  }
  read_node_metadata(nj, created, module_types);
}

/// The call form of a node whose arguments `kwargs` (named, in the file's order) were passed by
/// keyword where `by_keyword` says (Note [Call forms]); nullopt when the file names an argument
/// the schema does not have (bind_arguments says so) or the schema has more than 64.
inline std::optional<node::call_form> call_form_of(const op_info& op, const std::vector<kwarg>& kwargs,
                                                  const std::vector<bool>& by_keyword) {
  const auto& params = op.schema().arguments();
  if (params.size() > 64) return std::nullopt;
  node::call_form f;
  for (std::size_t a = 0; a < kwargs.size(); ++a) {
    std::size_t i = 0;
    while (i < params.size() && params[i].name() != kwargs[a].name) ++i;
    if (i == params.size()) return std::nullopt;
    f.given |= std::uint64_t{1} << i;
    if (by_keyword[a] || params[i].kwarg_only()) f.keyword |= std::uint64_t{1} << i;
  }
  return f;
}

/// Reads call node `nj` (of operator `target`) into `g`, its outputs into the scope; `module_types`
/// gets the modules its stack names.
inline void read_call_node(const at_path& nj, const std::string& target, const value_types& type_of, graph& g,
                           value_scope& scope, std::vector<std::pair<std::string, std::string>>& module_types) {
  if (target.rfind("torch.ops.higher_order.", 0) == 0) {
    if (!find_higher_order(target.substr(23)))
      nj["target"].fail("higher-order operator '" + target + "' (torch." + target.substr(23) +
                        ", with its subgraphs as as_graph arguments) is not supported by xport: of torch's "
                        "higher-order operators it reads " + higher_order_names());
    read_higher_order_node(nj, target, type_of, g, scope, module_types);
    return;
  }
  const auto* op = try_find_op(target);
  if (!op) nj["target"].fail(unregistered_operator(target));
  std::vector<kwarg> kwargs;
  const auto ins = nj["inputs"];
  std::vector<bool> by_keyword;
  for (std::size_t a = 0, n = ins.size_of_array(); a < n; ++a) {
    kwargs.push_back(kwarg{ins[a]["name"].str(), argument_of(ins[a]["arg"], scope)});
    const auto kind = ins[a].get("kind");
    by_keyword.push_back(kind && kind->integer() == 2);
  }
  const auto form = call_form_of(*op, kwargs, by_keyword);
  std::vector<argument> args;
  try {
    args = detail::bind_arguments(*op, {}, std::move(kwargs));
  } catch (const schema_error& e) {
    ins.fail(e.what());
  }
  const auto outs = nj["outputs"];
  const auto node_name = nj.get("name") ? nj["name"].str() : std::string();
  auto [types, names] = read_call_outputs(outs, *op, node_name, type_of);
  node created;
  try {
    created = g.create_call_named(*op, std::move(args), std::move(types),
                                  node_name.empty() ? op->packet : node_name, names);
  } catch (const graph_error& e) {
    nj.fail(e.what());
  }
  for (auto v : created.outputs()) {
    scope.defined.emplace(v.name(), v);
    if (v.name() == created.name() + "_unused_" + std::to_string(v.index())) v.set_unpacked(false);
  }
  created.set_form(form);
  read_node_metadata(nj, created, module_types);
}

/// Reads graph `gj`; its inputs are read by `read_inputs(type_of, g, scope)`.
template <class ReadInputs>
graph graph_body_of(const at_path& gj, std::vector<std::pair<std::string, std::string>>& module_types,
                    ReadInputs&& read_inputs) {
  graph g;
  const auto type_of = value_types_of(gj);
  value_scope scope;
  const auto nodes = gj["nodes"];
  const auto n_nodes = nodes.size_of_array();
  for (std::size_t i = 0; i < n_nodes; ++i) {
    const auto outs = nodes[i]["outputs"];
    for (std::size_t o = 0, n = outs.size_of_array(); o < n; ++o)
      each_output_name(outs[o], [&](const at_path&, const std::string& name) { scope.later.insert(name); });
  }
  read_inputs(type_of, g, scope);
  for (std::size_t i = 0; i < n_nodes; ++i) {
    const auto nj = nodes[i];
    const auto target = nj["target"].str();
    if (is_sym_node(target)) {
      read_sym_node(nj, target, scope);  // Note [Symbolic arguments in .pt2]
      continue;
    }
    if (is_assert_node(target)) {
      read_assert_node(nj, target, scope);  // Note [Runtime assertions as ranges]
      continue;
    }
    read_call_node(nj, target, type_of, g, scope, module_types);
  }
  std::vector<argument> results;
  const auto outputs = gj["outputs"];
  for (std::size_t i = 0, n = outputs.size_of_array(); i < n; ++i) results.push_back(argument_of(outputs[i], scope));
  g.set_output(std::move(results));
  return g;
}

/// Reads the program's graph; `module_types` gets the (path, type) of every module its nodes' stacks name.
inline graph graph_of(const at_path& gj, const graph_signature& sig, std::vector<std::pair<std::string, std::string>>& module_types) {
  return graph_body_of(gj, module_types, [&](const value_types& type_of, graph& g, value_scope& scope) {
    read_graph_inputs(gj["inputs"], sig, type_of, g, scope);
  });
}

inline std::shared_ptr<const subgraph> subgraph_of(const at_path& aj,
                                                   std::vector<std::pair<std::string, std::string>>& module_types) {
  auto name = aj["name"].str();
  const auto gj = aj["graph"];
  auto body = graph_body_of(gj, module_types, [&](const value_types& type_of, graph& g, value_scope& scope) {
    const auto inputs = gj["inputs"];
    for (std::size_t i = 0, n = inputs.size_of_array(); i < n; ++i) {
      auto [k, v] = inputs[i].one_of();
      if (k != "as_tensor" && k != "as_sym_int")
        inputs[i].fail("an input of subgraph '" + name + "' must be a tensor or a SymInt, got '" + k + "'");
      const auto input_name = k == "as_tensor" ? v["name"].str() : v["as_name"].str();
      try {
        scope.defined.emplace(input_name, g.add_placeholder(input_name, type_of(inputs[i], input_name)));
      } catch (const graph_error& e) {
        inputs[i].fail(e.what());
      }
    }
  });
  if (const auto bare = gj.get("is_single_tensor_return"); bare && bare->boolean() &&
      body.outputs().size() == 1)
    body.set_returns_bare(true);  // a while_loop's cond graph: `return lt`
  return std::make_shared<const subgraph>(subgraph{std::move(name), std::move(body)});
}

struct loaded_json {
  graph g;
  graph_signature sig;
  ir_dialect dialect = ir_dialect::training;
  std::optional<treespec> in_spec, out_spec;
  std::vector<range_constraint> ranges;
  std::vector<std::pair<std::string, std::string>> module_types;
  std::map<std::string, module_call_signature> module_signatures;
};

/// A submodule's ModuleCallSignature (torch's preserve_module_call_signature), as written.
inline module_call_signature module_call_signature_of(const at_path& sig) {
  module_call_signature out;
  const auto ins = sig["inputs"], outs = sig["outputs"];
  for (std::size_t k = 0, n = ins.size_of_array(); k < n; ++k) out.inputs.push_back(spec_arg_of(ins[k]));
  for (std::size_t k = 0, n = outs.size_of_array(); k < n; ++k) out.outputs.push_back(spec_arg_of(outs[k]));
  out.in_spec = pytree_of_dumps(sig["in_spec"]);
  out.out_spec = pytree_of_dumps(sig["out_spec"]);
  if (const auto names = sig.get("forward_arg_names")) {
    out.forward_arg_names.emplace();
    for (std::size_t k = 0, n = names->size_of_array(); k < n; ++k) out.forward_arg_names->push_back((*names)[k].str());
  }
  return out;
}

/// The root entry of the module call graph gives the call structure: `(args, kwargs)` becomes
/// xport's in_spec (the arguments, named by forward_arg_names, keyword ones last), with constant
/// leaves where the constant inputs are; the entries' FQNs, with the types the nodes' module
/// stacks give, become the module table.
inline void read_call_graph(const at_path& mcg, loaded_json& out,
                            const std::vector<std::pair<std::string, std::string>>& stack_types, bool call_spec) {
  const auto type_of = [&](const std::string& fqn) {
    for (const auto& [path, type] : stack_types)
      if (path == fqn) return type;
    return std::string();
  };
  for (std::size_t i = 0, n = mcg.size_of_array(); i < n; ++i) {
    const auto fqn = mcg[i]["fqn"].str();
    out.module_types.emplace_back(fqn, type_of(fqn));
    const auto sig = mcg[i].get("signature");
    if (i != 0 && sig) out.module_signatures.insert_or_assign(fqn, module_call_signature_of(*sig));
    if (i != 0 || !fqn.empty() || !call_spec) continue;
    if (!sig) continue;
    std::vector<std::optional<argument>> in_constants, out_constants;
    for (const auto& s : out.sig.input_specs)
      if (s.kind == input_kind::user_input)
        in_constants.push_back(s.arg.type == argument_spec::kind::constant ? std::optional<argument>(s.arg.constant) : std::nullopt);
    for (const auto& s : out.sig.output_specs)
      if (s.kind == output_kind::user_output || s.kind == output_kind::loss_output)
        out_constants.push_back(s.arg.type == argument_spec::kind::constant ? std::optional<argument>(s.arg.constant) : std::nullopt);
    const auto in_j = (*sig)["in_spec"], out_j = (*sig)["out_spec"];
    auto call = pytree_of_dumps(in_j);
    if (call.type != treespec::kind::tuple || call.children.size() != 2 || call.children[0].type != treespec::kind::tuple ||
        call.children[1].type != treespec::kind::dict)
      in_j.fail("expected the in_spec of a call, a tuple of (args tuple, kwargs dict)");
    treespec in = std::move(call.children[0]);
    auto& kwargs = call.children[1];
    in.num_kwargs = kwargs.children.size();
    for (std::size_t k = 0; k < kwargs.children.size(); ++k) in.children.push_back(std::move(kwargs.children[k]));
    std::size_t leaf = 0;
    with_constants(in, in_constants, leaf, in_j);
    if (leaf != in_constants.size())
      in_j.fail("the in_spec has " + std::to_string(leaf) + " leaves but the program has " +
                std::to_string(in_constants.size()) + " user inputs");
    if (const auto names = sig->get("forward_arg_names"); names && names->size_of_array() == in.children.size()) {
      for (std::size_t k = 0, m = names->size_of_array(); k < m; ++k) in.keys.push_back((*names)[k].str());
    } else {  // torch's own names for unnamed arguments
      for (std::size_t k = 0; k + in.num_kwargs < in.children.size(); ++k) in.keys.push_back("arg_" + std::to_string(k));
      for (const auto& key : kwargs.keys) in.keys.push_back(key);
    }
    auto result = pytree_of_dumps(out_j);
    leaf = 0;
    with_constants(result, out_constants, leaf, out_j);
    if (leaf != out_constants.size())
      out_j.fail("the out_spec has " + std::to_string(leaf) + " leaves but the program has " +
                 std::to_string(out_constants.size()) + " user outputs");
    out.in_spec = std::move(in);
    out.out_spec = std::move(result);
  }
}

/// Fails unless the document's schema version has the major version xport reads.
inline void check_schema_version(const at_path& root) {
  const auto ver = root["schema_version"];
  const auto major = ver["major"].integer();
  if (major != schema_version_major)
    ver.fail("schema version " + std::to_string(major) + "." + std::to_string(ver["minor"].integer()) +
             " is not readable by this xport, which reads major version " + std::to_string(schema_version_major) +
             " (written by torch 2.8 and later); re-export the program with a matching torch");
  (void)ver["minor"].integer();
}

/// The dialect the document's verifiers name (the last one), training when there are none.
inline ir_dialect dialect_of(const at_path& root) {
  ir_dialect dialect = ir_dialect::training;
  if (auto v = root.get("verifiers")) {
    for (std::size_t i = 0, n = v->size_of_array(); i < n; ++i) {
      const auto d = (*v)[i].str();
      if (d == "ATEN") dialect = ir_dialect::aten;
      else if (d == "TRAINING") dialect = ir_dialect::training;
      else (*v)[i].fail("unknown dialect '" + d + "'");
    }
  }
  return dialect;
}

/// Adds each symbol of `ranges` (the range_constraints) to `symbols`, with its range.
inline void read_symbol_ranges(const at_path& ranges, symbol_table& symbols) {
  for (const auto& item : ranges.object().items()) {
    const std::string name = item.key();
    const auto r = ranges[name];
    // ranges of derived expressions (`2*s0`) follow from their symbols': only symbols are kept
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos)
      continue;
    auto& e = symbols.find_or_add(name);
    const auto lo = r.get("min_val"), hi = r.get("max_val");
    e.range.lo = lo ? lo->integer() : sym::is_unbacked(name) ? -int_oo : 0;  // torch writes -int_oo as null
    e.range.hi = hi ? hi->integer() : int_oo;
    if (e.range.lo > e.range.hi) r.fail("min_val " + std::to_string(e.range.lo) + " > max_val " + std::to_string(e.range.hi));
  }
}

/// The range constraints of `symbols` (making the symbols the graph did not), in the order the
/// inputs' sizes of `g` first name them.
inline std::vector<range_constraint> ranges_of(symbol_table& symbols, const graph& g) {
  std::vector<range_constraint> ranges;
  for (auto& e : symbols.entries) {
    if (!e.symbol) e.symbol = sym::symbol(e.name, std::min(std::max<std::int64_t>(e.range.lo, 2), e.range.hi), e.range);
    ranges.push_back({*e.symbol, e.range.lo, e.range.hi == int_oo ? std::nullopt : std::optional<std::int64_t>(e.range.hi), "",
                      e.relations});
  }
  // the JSON object's keys come sorted; torch lists the ranges as its symbols were made, in the
  // order of the inputs' sizes: so does xport
  std::vector<std::string> made;
  for (auto ph : g.placeholders())
    if (ph.out().kind() == value_kind::tensor)
      for (const auto& d : ph.out().meta().sizes)
        for (auto& s : sym::free_symbols(d))
          if (std::find(made.begin(), made.end(), s) == made.end()) made.push_back(std::move(s));
  const auto rank = [&](const range_constraint& r) {
    return static_cast<std::size_t>(std::find(made.begin(), made.end(), r.symbol.str()) - made.begin());
  };
  std::stable_sort(ranges.begin(), ranges.end(),
                   [&](const range_constraint& a, const range_constraint& b) { return rank(a) < rank(b); });
  return ranges;
}

/// Reads xport's entries of the graph module's metadata `md`: the legacy in_spec and out_spec,
/// and the user's names of the dims.
inline void read_metadata(const at_path& md, bool legacy, const std::string& record, loaded_json& out) {
  (void)md.object();
  const auto spec = [&](const char* key) -> std::optional<treespec> {
    auto s = md.get(key);
    if (!s) return std::nullopt;
    const auto text = s->str();
    const auto j = parse(text, record + " (" + std::string(key) + ")");
    return treespec_of(at_path{j, std::string("graph_module.metadata.") + key, record});
  };
  if (legacy) {
    out.in_spec = spec("xport.in_spec");
    out.out_spec = spec("xport.out_spec");
  }
  if (auto names = md.get("xport.dim_names")) {
    const auto j = parse(names->str(), record + " (xport.dim_names)");
    const at_path nj{j, "graph_module.metadata.xport.dim_names", record};
    for (auto& r : out.ranges)
      if (auto n = nj.get(r.symbol.str())) r.name = n->str();
  }
}

inline loaded_json program_of(const json& doc, const std::string& record) {
  const at_path root{doc, "", record};
  check_schema_version(root);
  loaded_json out;
  out.dialect = dialect_of(root);
  const auto opsets = root["opset_version"];
  (void)opsets.object();
  // symbols and their ranges first: the graph's sizes refer to them
  symbol_table symbols;
  read_symbol_ranges(root["range_constraints"], symbols);
  struct scope_guard {
    symbol_table* prev;
    ~scope_guard() { active_symbols = prev; }
  } restore{active_symbols};
  active_symbols = &symbols;
  const auto gm = root["graph_module"];
  const auto sig = gm["signature"];
  const auto ins = sig["input_specs"], outs = sig["output_specs"];
  for (std::size_t i = 0, n = ins.size_of_array(); i < n; ++i) out.sig.input_specs.push_back(input_spec_of(ins[i]));
  for (std::size_t i = 0, n = outs.size_of_array(); i < n; ++i) out.sig.output_specs.push_back(output_spec_of(outs[i]));
  std::vector<std::pair<std::string, std::string>> stack_types;
  out.g = graph_of(gm["graph"], out.sig, stack_types);
  out.ranges = ranges_of(symbols, out.g);
  const auto md = gm.get("metadata");
  // archives of xport before schema 8.20 keep the exact structure in the metadata (xport.in_spec;
  // their constants have no placeholders, so the call graph's leaves do not match them)
  const bool legacy = md && md->object().contains("xport.in_spec");
  read_call_graph(gm["module_call_graph"], out, stack_types, !legacy);
  if (md) read_metadata(*md, legacy, record, out);
  return out;
}

}  // namespace detail::serde

XPORT_END_NAMESPACE
