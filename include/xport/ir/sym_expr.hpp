// xport/ir/sym_expr.hpp: the exact symbolic integer engine behind symbolic sizes (torch's sympy
// subset). Expressions are kept in a canonical form, so equal expressions compare and hash equal:
// a polynomial `sum(coeff * monomial) + constant`, where a monomial is a sorted product of atoms
// with positive integer powers, and an atom is a symbol or a FloorDiv / Mod / Min / Max node
// whose arguments are canonical themselves. `str()` prints as torch prints the sympy expression.
#pragma once

#include <algorithm>      // std::sort, std::min, std::max
#include <cstddef>        // std::size_t
#include <cstdint>        // std::int64_t
#include <functional>     // std::function, std::hash
#include <limits>         // std::numeric_limits
#include <map>            // std::map
#include <optional>       // std::optional
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::exchange, std::move, std::pair
#include <vector>         // std::vector

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/sym_int.hpp>

XPORT_BEGIN_NAMESPACE

/// +infinity of value ranges (torch's `int_oo`); -int_oo is -INT64_MAX.
inline constexpr std::int64_t int_oo = std::numeric_limits<std::int64_t>::max();

/// A closed interval of integers; `lo` may be -int_oo and `hi` may be int_oo.
struct value_range {
  std::int64_t lo = 0, hi = int_oo;

  [[nodiscard]] bool contains(std::int64_t v) const noexcept { return lo <= v && v <= hi; }
  /// `VR[0, int_oo]`, `VR[1, 1024]`, `VR[-int_oo, 5]`.
  [[nodiscard]] std::string str() const {
    auto bound = [](std::int64_t v) {
      return v >= int_oo ? std::string("int_oo") : v <= -int_oo ? std::string("-int_oo") : std::to_string(v);
    };
    return "VR[" + bound(lo) + ", " + bound(hi) + "]";
  }
  friend bool operator==(const value_range&, const value_range&) = default;
};

namespace detail {

/// Whether `name` is torch's name of an unbacked symbol: `u` and digits (sym::is_unbacked).
[[nodiscard]] inline bool is_unbacked_name(std::string_view name) noexcept {
  return name.size() >= 2 && name[0] == 'u' &&
         std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// ---- checked integer arithmetic (Python semantics, no UB; INT64_MIN is out of range) ----------

[[noreturn]] inline void sym_overflow(std::string_view op) {
  throw graph_error("xport.sym.overflow", "integer overflow in symbolic " + std::string(op) +
                                              "; values must stay within [-int_oo, int_oo]");
}
[[nodiscard]] inline std::int64_t sym_checked(bool overflowed, std::int64_t r, std::string_view op) {
  if (overflowed || r == std::numeric_limits<std::int64_t>::min()) sym_overflow(op);
  return r;
}
[[nodiscard]] inline std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  bool overflowed = __builtin_add_overflow(a, b, &r);
  return sym_checked(overflowed, r, "addition");
}
[[nodiscard]] inline std::int64_t checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  bool overflowed = __builtin_sub_overflow(a, b, &r);
  return sym_checked(overflowed, r, "subtraction");
}
[[nodiscard]] inline std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  bool overflowed = __builtin_mul_overflow(a, b, &r);
  return sym_checked(overflowed, r, "multiplication");
}
[[nodiscard]] inline std::int64_t checked_pow(std::int64_t x, std::int64_t p) {
  std::int64_t r = 1;
  if (p == 0 || x == 1) return 1;
  if (x == 0) return 0;
  if (x == -1) return p % 2 ? -1 : 1;
  for (; p > 0; --p) r = checked_mul(r, x);  // |x| >= 2 overflows within 63 rounds
  return r;
}
/// Python's `a // b` (floor toward -inf).
[[nodiscard]] inline std::int64_t py_floordiv(std::int64_t a, std::int64_t b) {
  if (b == 0)
    throw graph_error("xport.sym.div_by_zero", "division by zero in floordiv(" + std::to_string(a) + ", 0)");
  if (b == -1) return checked_sub(0, a);
  std::int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
/// Python's `a % b` (the result has the sign of b).
[[nodiscard]] inline std::int64_t py_mod(std::int64_t a, std::int64_t b) {
  if (b == 0) throw graph_error("xport.sym.div_by_zero", "modulo by zero in Mod(" + std::to_string(a) + ", 0)");
  if (b == -1) return 0;
  std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// ---- nodes ---------------------------------------------------------------------------------------

enum class sym_kind : std::uint8_t { symbol, poly, floordiv, mod, min, max };

/// `atom**power`; the atom's sym_int hint is unused.
struct sym_factor {
  sym_int atom;
  std::int64_t power = 1;
};
/// `coeff * factors...`, factors sorted by atom key; `key` is the monomial's key.
struct sym_term {
  std::int64_t coeff = 0;
  std::vector<sym_factor> factors;
  std::string key;
};

/// The one node class: a symbol, a polynomial (not a bare atom), or a function atom.
struct sym_expr final : sym_node {
  sym_kind kind = sym_kind::symbol;
  std::string name;             // symbol
  value_range vr;               // symbol
  std::int64_t hint = 0;        // symbol: its example value
  std::int64_t constant = 0;    // poly
  std::vector<sym_term> terms;  // poly, sorted by key
  std::vector<sym_int> args;    // floordiv (a, b), mod (a, b), min/max (canonical order)
  std::string key;              // canonical text: equality, hash, order
  std::size_t key_hash = 0;

  [[nodiscard]] std::string str() const override;
  [[nodiscard]] bool equals(const sym_node& other) const override {
    const auto* o = dynamic_cast<const sym_expr*>(&other);
    return o != nullptr && (o == this || (o->key_hash == key_hash && o->key == key));
  }
  [[nodiscard]] std::size_t hash() const override { return key_hash; }
};

[[nodiscard]] inline const sym_expr& node_of(const sym_int& s) {
  return static_cast<const sym_expr&>(*s.expr());  // every sym_node is a sym_expr
}
[[nodiscard]] inline std::string key_of(const sym_int& s) {
  return s.is_constant() ? "#" + std::to_string(s.hint()) : node_of(s).key;
}
[[nodiscard]] inline sym_int make_node(sym_expr* n, std::int64_t hint) {
  n->key_hash = std::hash<std::string>{}(n->key);
  return sym_int(n, hint);
}
[[nodiscard]] inline sym_int with_hint(const sym_int& s, std::int64_t hint) {
  return s.is_constant() ? s : sym_int(s.expr(), hint);
}

// ---- polynomials -----------------------------------------------------------------------------------

struct poly {
  std::int64_t c = 0;
  std::map<std::string, sym_term> terms;  // by monomial key; no zero coefficients
};

[[nodiscard]] inline std::string mono_key(const std::vector<sym_factor>& f) {
  std::string k;
  for (const auto& x : f) k += node_of(x.atom).key + "^" + std::to_string(x.power) + ";";
  return k;
}
[[nodiscard]] inline poly to_poly(const sym_int& s) {
  poly p;
  if (s.is_constant()) {
    p.c = s.hint();
    return p;
  }
  const auto& n = node_of(s);
  if (n.kind != sym_kind::poly) {
    sym_term t{1, {{with_hint(s, 0), 1}}, {}};
    t.key = mono_key(t.factors);
    p.terms.emplace(t.key, std::move(t));
    return p;
  }
  p.c = n.constant;
  for (const auto& t : n.terms) p.terms.emplace(t.key, t);
  return p;
}
inline void add_term(poly& p, sym_term t) {
  if (t.factors.empty()) {
    p.c = checked_add(p.c, t.coeff);
    return;
  }
  auto [it, fresh] = p.terms.try_emplace(t.key, t);
  if (!fresh) {
    it->second.coeff = checked_add(it->second.coeff, t.coeff);
    if (it->second.coeff == 0) p.terms.erase(it);
  }
}
/// p += q * scale.
inline void poly_add(poly& p, const poly& q, std::int64_t scale) {
  p.c = checked_add(p.c, checked_mul(q.c, scale));
  for (const auto& [k, t] : q.terms) {
    sym_term s = t;
    s.coeff = checked_mul(t.coeff, scale);
    if (s.coeff != 0) add_term(p, std::move(s));
  }
}
[[nodiscard]] inline sym_term term_mul(const sym_term& a, const sym_term& b) {
  sym_term r{checked_mul(a.coeff, b.coeff), {}, {}};
  std::size_t i = 0, j = 0;
  while (i < a.factors.size() || j < b.factors.size()) {
    int cmp = i == a.factors.size() ? 1
              : j == b.factors.size() ? -1
                                      : node_of(a.factors[i].atom).key.compare(node_of(b.factors[j].atom).key);
    if (cmp < 0) r.factors.push_back(a.factors[i++]);
    else if (cmp > 0) r.factors.push_back(b.factors[j++]);
    else r.factors.push_back({a.factors[i].atom, checked_add(a.factors[i++].power, b.factors[j++].power)});
  }
  r.key = mono_key(r.factors);
  return r;
}
[[nodiscard]] inline poly poly_mul(const poly& a, const poly& b) {
  poly r;
  r.c = checked_mul(a.c, b.c);
  for (const auto& [k, t] : a.terms) {
    sym_term s = t;
    if ((s.coeff = checked_mul(t.coeff, b.c)) != 0) add_term(r, std::move(s));
  }
  for (const auto& [k, t] : b.terms) {
    sym_term s = t;
    if ((s.coeff = checked_mul(t.coeff, a.c)) != 0) add_term(r, std::move(s));
  }
  for (const auto& [ka, ta] : a.terms)
    for (const auto& [kb, tb] : b.terms) add_term(r, term_mul(ta, tb));
  return r;
}
/// The canonical sym_int of a polynomial: a constant, a bare atom, or a poly node.
[[nodiscard]] inline sym_int from_poly(poly p, std::int64_t hint) {
  if (p.terms.empty()) return sym_int(p.c);
  if (p.c == 0 && p.terms.size() == 1) {
    const auto& t = p.terms.begin()->second;
    if (t.coeff == 1 && t.factors.size() == 1 && t.factors[0].power == 1) return with_hint(t.factors[0].atom, hint);
  }
  auto* n = new sym_expr;
  n->kind = sym_kind::poly;
  n->constant = p.c;
  n->key = "{" + std::to_string(p.c);
  for (auto& [k, t] : p.terms) {
    n->key += "|" + std::to_string(t.coeff) + "*" + k;
    n->terms.push_back(std::move(t));
  }
  n->key += "}";
  return make_node(n, hint);
}
[[nodiscard]] inline sym_int make_func(sym_kind kind, std::vector<sym_int> args, std::int64_t hint) {
  static constexpr const char* names[] = {"", "", "FloorDiv", "Mod", "Min", "Max"};
  auto* n = new sym_expr;
  n->kind = kind;
  n->key = std::string(names[static_cast<int>(kind)]) + "(";
  for (std::size_t i = 0; i < args.size(); ++i) n->key += (i ? "," : "") + key_of(args[i]);
  n->key += ")";
  n->args = std::move(args);
  return make_node(n, hint);
}

// ---- value ranges (saturating at +-int_oo) ------------------------------------------------------------

[[nodiscard]] inline std::int64_t sat(bool overflowed, std::int64_t r, bool positive) {
  if (overflowed) return positive ? int_oo : -int_oo;
  return std::max(r, -int_oo);
}
/// a + b; `upper` picks the side when +oo meets -oo.
[[nodiscard]] inline std::int64_t sat_add(std::int64_t a, std::int64_t b, bool upper) {
  bool pinf = a == int_oo || b == int_oo, ninf = a == -int_oo || b == -int_oo;
  if (pinf || ninf) return pinf && ninf ? (upper ? int_oo : -int_oo) : pinf ? int_oo : -int_oo;
  std::int64_t r = 0;
  bool overflowed = __builtin_add_overflow(a, b, &r);
  return sat(overflowed, r, a > 0);
}
[[nodiscard]] inline std::int64_t sat_mul(std::int64_t a, std::int64_t b) {
  if (a == 0 || b == 0) return 0;
  bool positive = (a > 0) == (b > 0);
  if (a == int_oo || a == -int_oo || b == int_oo || b == -int_oo) return positive ? int_oo : -int_oo;
  std::int64_t r = 0;
  bool overflowed = __builtin_mul_overflow(a, b, &r);
  return sat(overflowed, r, positive);
}
[[nodiscard]] inline value_range vr_add(value_range a, value_range b) {
  return {sat_add(a.lo, b.lo, false), sat_add(a.hi, b.hi, true)};
}
[[nodiscard]] inline value_range vr_mul(value_range a, value_range b) {
  std::int64_t c[] = {sat_mul(a.lo, b.lo), sat_mul(a.lo, b.hi), sat_mul(a.hi, b.lo), sat_mul(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}
[[nodiscard]] inline value_range vr_pow(value_range a, std::int64_t p) {
  auto pw = [p](std::int64_t x) {
    if (x == 1 || x == -1) return p % 2 ? x : std::int64_t{1};
    std::int64_t r = 1;
    for (std::int64_t i = 0; i < p && r != int_oo && r != -int_oo && r != 0; ++i) r = sat_mul(r, x);
    return r;
  };
  if (p % 2 == 1 || a.lo >= 0) return {pw(a.lo), pw(a.hi)};
  if (a.hi <= 0) return {pw(a.hi), pw(a.lo)};
  return {0, std::max(pw(a.lo), pw(a.hi))};
}
/// floor(x / y) for y > 0 with infinite bounds, monotone in both arguments.
[[nodiscard]] inline std::int64_t sat_floordiv(std::int64_t x, std::int64_t y) {
  if (x == int_oo || x == -int_oo) return x;
  if (y == int_oo) return x >= 0 ? 0 : -1;
  return py_floordiv(x, y);
}
[[nodiscard]] inline value_range vr_floordiv(value_range a, value_range b) {
  if (b.hi <= -1) {  // a // b == (-a) // (-b)
    a = {-a.hi, -a.lo};
    b = {-b.hi, -b.lo};
  }
  if (b.lo < 1) return {-int_oo, int_oo};
  std::int64_t c[] = {sat_floordiv(a.lo, b.lo), sat_floordiv(a.lo, b.hi), sat_floordiv(a.hi, b.lo),
                      sat_floordiv(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}
[[nodiscard]] inline value_range vr_mod(value_range a, value_range b) {
  if (b.lo >= 1) {
    if (b.lo == b.hi && b.hi != int_oo && a.lo != -int_oo && a.hi != int_oo &&
        py_floordiv(a.lo, b.lo) == py_floordiv(a.hi, b.lo))
      return {py_mod(a.lo, b.lo), py_mod(a.hi, b.lo)};
    std::int64_t hi = b.hi == int_oo ? int_oo : b.hi - 1;
    return {0, a.lo >= 0 ? std::min(hi, a.hi) : hi};
  }
  if (b.hi <= -1) return {b.lo == -int_oo ? -int_oo : b.lo + 1, 0};
  std::int64_t m = std::max(-b.lo, b.hi);
  return {m == int_oo ? -int_oo : -(m - 1), m == int_oo ? int_oo : m - 1};
}

[[nodiscard]] inline value_range range_of(const sym_int& s);
[[nodiscard]] inline value_range range_of_node(const sym_expr& n) {
  switch (n.kind) {
    case sym_kind::symbol: return n.vr;
    case sym_kind::poly: {
      value_range r{n.constant, n.constant};
      for (const auto& t : n.terms) {
        value_range m{t.coeff, t.coeff};
        for (const auto& f : t.factors) m = vr_mul(m, vr_pow(range_of(f.atom), f.power));
        r = vr_add(r, m);
      }
      return r;
    }
    case sym_kind::floordiv: return vr_floordiv(range_of(n.args[0]), range_of(n.args[1]));
    case sym_kind::mod: return vr_mod(range_of(n.args[0]), range_of(n.args[1]));
    case sym_kind::min:
    case sym_kind::max: {
      value_range r = range_of(n.args[0]);
      for (std::size_t i = 1; i < n.args.size(); ++i) {
        value_range a = range_of(n.args[i]);
        r = n.kind == sym_kind::min ? value_range{std::min(r.lo, a.lo), std::min(r.hi, a.hi)}
                                    : value_range{std::max(r.lo, a.lo), std::max(r.hi, a.hi)};
      }
      return r;
    }
  }
  return {-int_oo, int_oo};
}
inline value_range range_of(const sym_int& s) {
  return s.is_constant() ? value_range{s.hint(), s.hint()} : range_of_node(node_of(s));
}

// ---- evaluation ------------------------------------------------------------------------------------

template <class Lookup>
[[nodiscard]] std::optional<std::int64_t> eval_arg(const sym_int& s, Lookup& lookup);
template <class Lookup>
[[nodiscard]] std::optional<std::int64_t> eval_node(const sym_expr& n, Lookup& lookup) {
  switch (n.kind) {
    case sym_kind::symbol: return lookup(n.name);
    case sym_kind::poly: {
      std::int64_t acc = n.constant;
      for (const auto& t : n.terms) {
        std::int64_t v = t.coeff;
        for (const auto& f : t.factors) {
          auto x = eval_arg(f.atom, lookup);
          if (!x) return std::nullopt;
          v = checked_mul(v, checked_pow(*x, f.power));
        }
        acc = checked_add(acc, v);
      }
      return acc;
    }
    default: break;
  }
  auto a = eval_arg(n.args[0], lookup);
  if (!a) return std::nullopt;
  for (std::size_t i = 1; i < n.args.size(); ++i) {
    auto b = eval_arg(n.args[i], lookup);
    if (!b) return std::nullopt;
    switch (n.kind) {
      case sym_kind::floordiv: *a = py_floordiv(*a, *b); break;
      case sym_kind::mod: *a = py_mod(*a, *b); break;
      case sym_kind::min: *a = std::min(*a, *b); break;
      default: *a = std::max(*a, *b); break;
    }
  }
  return a;
}
template <class Lookup>
std::optional<std::int64_t> eval_arg(const sym_int& s, Lookup& lookup) {
  if (s.is_constant()) return s.hint();
  return eval_node(node_of(s), lookup);
}

// ---- sympy's printing order (sort_key, as_ordered_terms) and StrPrinter ---------------------------

/// A Python value for sympy's sort keys: int, str or tuple, compared as Python compares them.
struct py_key {
  int tag = 0;  // 0 int, 1 str, 2 tuple
  std::int64_t i = 0;
  std::string s;
  std::vector<py_key> t;
};
[[nodiscard]] inline py_key pk(std::int64_t i) { return {0, i, {}, {}}; }
[[nodiscard]] inline py_key pk(std::string s) { return {1, 0, std::move(s), {}}; }
[[nodiscard]] inline py_key pk(std::vector<py_key> t) { return {2, 0, {}, std::move(t)}; }
[[nodiscard]] inline int py_cmp(const py_key& a, const py_key& b) {
  if (a.tag != b.tag) return a.tag < b.tag ? -1 : 1;
  if (a.tag == 0) return a.i < b.i ? -1 : a.i > b.i;
  if (a.tag == 1) return a.s.compare(b.s) < 0 ? -1 : a.s != b.s;
  for (std::size_t k = 0; k < a.t.size() && k < b.t.size(); ++k)
    if (int c = py_cmp(a.t[k], b.t[k])) return c;
  return a.t.size() < b.t.size() ? -1 : a.t.size() > b.t.size();
}
[[nodiscard]] inline py_key class_key(int a, int b, const char* name) { return pk({pk(a), pk(b), pk(name)}); }
[[nodiscard]] inline py_key int_key(std::int64_t v) {
  return pk({class_key(1, 0, "Number"), pk({pk(0), pk(std::vector<py_key>{})}), pk(std::vector<py_key>{}), pk(v)});
}

/// One sympy expression seen in the canonical form: Integer, atom, Pow(atom, n), Mul or Add.
struct sview {
  enum kind_t : std::uint8_t { integer, atom, power, mul, add } kind = integer;
  std::int64_t value = 0;                             // integer value, exponent, Mul coefficient
  const sym_expr* node = nullptr;                     // atom, Pow base, Add
  const std::vector<sym_factor>* factors = nullptr;  // Mul
};
[[nodiscard]] inline sview view_of_factor(const sym_factor& f) {
  return {f.power == 1 ? sview::atom : sview::power, f.power, &node_of(f.atom), nullptr};
}
[[nodiscard]] inline sview view_of_term(std::int64_t coeff, const std::vector<sym_factor>& f) {
  if (coeff == 1 && f.size() == 1) return view_of_factor(f[0]);
  return {sview::mul, coeff, nullptr, &f};
}
[[nodiscard]] inline sview view_of(const sym_int& s) {
  if (s.is_constant()) return {sview::integer, s.hint(), nullptr, nullptr};
  const auto& n = node_of(s);
  if (n.kind != sym_kind::poly) return {sview::atom, 0, &n, nullptr};
  if (n.constant == 0 && n.terms.size() == 1) return view_of_term(n.terms[0].coeff, n.terms[0].factors);
  return {sview::add, 0, &n, nullptr};
}

[[nodiscard]] inline py_key sort_key(const sview& v);
[[nodiscard]] inline std::int64_t node_count(const sview& v) {
  switch (v.kind) {
    case sview::integer: return 1;
    case sview::power: return 2 + node_count({sview::atom, 0, v.node, nullptr});
    case sview::mul: {
      std::int64_t n = v.value != 1 ? 2 : 1;
      for (const auto& f : *v.factors) n += node_count(view_of_factor(f));
      return n;
    }
    case sview::add: {
      std::int64_t n = v.node->constant != 0 ? 2 : 1;
      for (const auto& t : v.node->terms) n += node_count(view_of_term(t.coeff, t.factors));
      return n;
    }
    case sview::atom: break;
  }
  std::int64_t n = 1;
  for (const auto& a : v.node->args) n += node_count(view_of(a));
  return n;
}
/// Views sorted by sympy's default_sort_key; with `nodes`, by (node count, sort key) as `ordered`.
[[nodiscard]] inline std::vector<sview> sorted_views(std::vector<sview> vs, bool nodes) {
  std::vector<std::pair<py_key, std::size_t>> keys;
  for (std::size_t i = 0; i < vs.size(); ++i)
    keys.push_back({nodes ? pk({pk(node_count(vs[i])), sort_key(vs[i])}) : sort_key(vs[i]), i});
  std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return py_cmp(a.first, b.first) < 0; });
  std::vector<sview> r;
  for (const auto& k : keys) r.push_back(vs[k.second]);
  return r;
}
/// A function atom's `.args` (Min/Max: sympy's `ordered`).
[[nodiscard]] inline std::vector<sview> func_args(const sym_expr& n) {
  std::vector<sview> r;
  for (const auto& a : n.args) r.push_back(view_of(a));
  return n.kind == sym_kind::min || n.kind == sym_kind::max ? sorted_views(std::move(r), true) : r;
}
[[nodiscard]] inline std::vector<sview> mul_factors(const sview& v) {
  std::vector<sview> r;
  for (const auto& f : *v.factors) r.push_back(view_of_factor(f));
  return sorted_views(std::move(r), false);
}
/// Add terms in sympy's `as_ordered_terms()` order.
[[nodiscard]] inline std::vector<sview> ordered_terms(const sym_expr& n) {
  sview c{sview::integer, n.constant, nullptr, nullptr};
  if (n.constant > 0 && n.terms.size() == 1 && n.terms[0].coeff < 0 && n.terms[0].factors.size() == 1)
    return {c, view_of_term(n.terms[0].coeff, n.terms[0].factors)};
  std::vector<sview> gens;  // distinct atoms, in default_sort_key order
  for (const auto& t : n.terms)
    for (const auto& f : t.factors)
      if (std::none_of(gens.begin(), gens.end(), [&](const sview& g) { return g.node->key == node_of(f.atom).key; }))
        gens.push_back({sview::atom, 0, &node_of(f.atom), nullptr});
  gens = sorted_views(std::move(gens), false);
  std::vector<std::pair<std::vector<std::int64_t>, sview>> ts;
  for (const auto& t : n.terms) {
    std::vector<std::int64_t> mono(gens.size(), 0);
    for (const auto& f : t.factors)
      for (std::size_t g = 0; g < gens.size(); ++g)
        if (gens[g].node->key == node_of(f.atom).key) mono[g] = f.power;
    ts.push_back({std::move(mono), view_of_term(t.coeff, t.factors)});
  }
  std::stable_sort(ts.begin(), ts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<sview> r;
  for (auto& t : ts) r.push_back(t.second);
  if (n.constant != 0) r.push_back(c);
  return r;
}
/// (class_key, (len(args), args)) of an atom as Expr.sort_key builds it.
[[nodiscard]] inline std::pair<py_key, py_key> atom_core(const sym_expr& n) {
  if (n.kind == sym_kind::symbol) return {class_key(2, 0, "Symbol"), pk({pk(1), pk({pk(n.name)})})};
  static constexpr const char* names[] = {"", "", "FloorDiv", "Mod", "Min", "Max"};
  const char* name = names[static_cast<int>(n.kind)];
  bool lattice = n.kind == sym_kind::min || n.kind == sym_kind::max;
  std::vector<py_key> args;
  for (const auto& a : func_args(n)) args.push_back(sort_key(a));
  auto count = static_cast<std::int64_t>(args.size());
  return {lattice ? class_key(5, 0, name) : class_key(4, 10000, name), pk({pk(count), pk(std::move(args))})};
}
inline py_key sort_key(const sview& v) {
  auto compose = [](std::pair<py_key, py_key> core, std::int64_t exp, std::int64_t coeff) {
    return pk({std::move(core.first), std::move(core.second), int_key(exp), pk(coeff)});
  };
  switch (v.kind) {
    case sview::integer: return int_key(v.value);
    case sview::atom: return compose(atom_core(*v.node), 1, 1);
    case sview::power: return compose(atom_core(*v.node), v.value, 1);
    case sview::mul: {
      if (v.factors->size() == 1) {
        const auto& f = (*v.factors)[0];
        return compose(atom_core(node_of(f.atom)), f.power, v.value);
      }
      std::vector<py_key> keys;
      for (const auto& f : mul_factors(v)) keys.push_back(sort_key(f));
      auto count = static_cast<std::int64_t>(keys.size());
      return compose({class_key(3, 0, "Mul"), pk({pk(count), pk(std::move(keys))})}, 1, v.value);
    }
    case sview::add: break;
  }
  std::vector<py_key> keys;
  for (const auto& t : ordered_terms(*v.node)) keys.push_back(sort_key(t));
  auto count = static_cast<std::int64_t>(keys.size());
  return compose({class_key(3, 1, "Add"), pk({pk(count), pk(std::move(keys))})}, 1, 1);
}

/// sympy's sympy_precedence(): Atom 1000, Func 70, Pow 60, Mul/Mod 50, Add (and negative items) 40.
[[nodiscard]] inline int sympy_precedence(const sview& v) {
  switch (v.kind) {
    case sview::integer: return v.value < 0 ? 40 : 1000;
    case sview::power: return 60;
    case sview::mul: return v.value < 0 ? 40 : 50;
    case sview::add: return 40;
    case sview::atom: break;
  }
  return v.node->kind == sym_kind::floordiv ? 70 : v.node->kind == sym_kind::mod ? 50 : 1000;
}
[[nodiscard]] inline std::string print_sympy(const sview& v);
/// StrPrinter.parenthesize(item, level, strict=False).
[[nodiscard]] inline std::string parenthesize(const sview& v, int level) {
  return sympy_precedence(v) <= level ? "(" + print_sympy(v) + ")" : print_sympy(v);
}
inline std::string print_sympy(const sview& v) {
  switch (v.kind) {
    case sview::integer: return std::to_string(v.value);
    case sview::power: return parenthesize({sview::atom, 0, v.node, nullptr}, 60) + "**" + std::to_string(v.value);
    case sview::mul: {
      int prec = sympy_precedence(v);
      std::string s = v.value < 0 ? "-" : "";
      std::int64_t c = v.value < 0 ? -v.value : v.value;
      if (c != 1) s += std::to_string(c) + "*";
      for (const auto& f : mul_factors(v)) s += parenthesize(f, prec) + "*";
      s.pop_back();
      return s;
    }
    case sview::add: {
      std::string s;
      for (const auto& t : ordered_terms(*v.node)) {
        std::string ts = print_sympy(t);
        bool neg = ts[0] == '-';
        s += s.empty() ? (neg ? "-" : "") : (neg ? " - " : " + ");
        s += neg ? ts.substr(1) : ts;
      }
      return s;
    }
    case sview::atom: break;
  }
  const auto& n = *v.node;
  if (n.kind == sym_kind::symbol) return n.name;
  if (n.kind == sym_kind::floordiv)  // torch's FloorDiv._sympystr
    return "(" + parenthesize(view_of(n.args[0]), 999) + "//" + parenthesize(view_of(n.args[1]), 999) + ")";
  std::vector<sview> args = func_args(n);
  if (n.kind != sym_kind::mod) args = sorted_views(std::move(args), false);  // _print_LatticeOp
  std::string s = n.kind == sym_kind::mod ? "Mod(" : n.kind == sym_kind::min ? "Min(" : "Max(";
  for (std::size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + print_sympy(args[i]);
  return s + ")";
}
[[nodiscard]] inline std::string srepr(const sview& v) {
  switch (v.kind) {
    case sview::integer: return "Integer(" + std::to_string(v.value) + ")";
    case sview::power:
      return "Pow(" + srepr({sview::atom, 0, v.node, nullptr}) + ", Integer(" + std::to_string(v.value) + "))";
    case sview::mul: {
      std::string s = "Mul(";
      if (v.value < -1) s += "Integer(-1), Integer(" + std::to_string(-v.value) + "), ";  // args_cnc
      else if (v.value != 1) s += "Integer(" + std::to_string(v.value) + "), ";
      for (const auto& f : mul_factors(v)) s += srepr(f) + ", ";
      return s.substr(0, s.size() - 2) + ")";
    }
    case sview::add: {
      std::string s = "Add(";
      for (const auto& t : ordered_terms(*v.node)) s += srepr(t) + ", ";
      return s.substr(0, s.size() - 2) + ")";
    }
    case sview::atom: break;
  }
  const auto& n = *v.node;
  // torch's unbacked symbols (u0) carry no positivity: a nonzero may find no row
  if (n.kind == sym_kind::symbol)
    return "Symbol('" + n.name + (is_unbacked_name(n.name) ? "', integer=True)" : "', integer=True, positive=True)");
  static constexpr const char* names[] = {"", "", "FloorDiv(", "Mod(", "Min(", "Max("};
  std::string s = names[static_cast<int>(n.kind)];
  auto args = func_args(n);
  for (std::size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + srepr(args[i]);
  return s + ")";
}

inline std::string sym_expr::str() const {
  return print_sympy(kind == sym_kind::poly && constant == 0 && terms.size() == 1
                   ? view_of_term(terms[0].coeff, terms[0].factors)
                   : sview{kind == sym_kind::poly ? sview::add : sview::atom, 0, this, nullptr});
}

[[nodiscard]] inline bool natural_less(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t i2 = i, j2 = j;
      while (i < a.size() && a[i] == '0') ++i;
      while (j < b.size() && b[j] == '0') ++j;
      std::size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      if (ie - i != je - j) return ie - i < je - j;
      if (int c = a.substr(i, ie - i).compare(b.substr(j, je - j))) return c < 0;
      if (i - i2 != j - j2) return i - i2 < j - j2;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}
inline void collect_symbols(const sym_int& s, std::vector<std::string>& out) {
  if (s.is_constant()) return;
  const auto& n = node_of(s);
  if (n.kind == sym_kind::symbol) out.push_back(n.name);
  for (const auto& t : n.terms)
    for (const auto& f : t.factors) collect_symbols(f.atom, out);
  for (const auto& a : n.args) collect_symbols(a, out);
}

}  // namespace detail

namespace sym {

/// A symbol `name` (an identifier) with example value `hint` and value range `range` (the hint
/// must lie in it). Symbols are identified by name.
[[nodiscard]] inline sym_int symbol(std::string name, std::int64_t hint, value_range range = {}) {
  bool ok = !name.empty() && !(name[0] >= '0' && name[0] <= '9');
  for (char c : name) ok = ok && (c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
  if (!ok) throw graph_error("xport.sym.bad_symbol", "symbol name '" + name + "' is not an identifier");
  if (range.lo > range.hi || !range.contains(hint))
    throw graph_error("xport.sym.bad_range",
                      "symbol " + name + " has hint " + std::to_string(hint) + " outside its range " + range.str());
  auto* n = new detail::sym_expr;
  n->kind = detail::sym_kind::symbol;
  n->key = name;
  n->name = std::move(name);
  n->vr = range;
  n->hint = hint;
  return detail::make_node(n, hint);
}

[[nodiscard]] inline sym_int add(const sym_int& a, const sym_int& b) {
  auto hint = detail::checked_add(a.hint(), b.hint());
  if (a.is_constant() && b.is_constant()) return hint;
  auto p = detail::to_poly(a);
  detail::poly_add(p, detail::to_poly(b), 1);
  return detail::from_poly(std::move(p), hint);
}
[[nodiscard]] inline sym_int sub(const sym_int& a, const sym_int& b) {
  auto hint = detail::checked_sub(a.hint(), b.hint());
  if (a.is_constant() && b.is_constant()) return hint;
  auto p = detail::to_poly(a);
  detail::poly_add(p, detail::to_poly(b), -1);
  return detail::from_poly(std::move(p), hint);
}
[[nodiscard]] inline sym_int mul(const sym_int& a, const sym_int& b) {
  auto hint = detail::checked_mul(a.hint(), b.hint());
  if (a.is_constant() && b.is_constant()) return hint;
  return detail::from_poly(detail::poly_mul(detail::to_poly(a), detail::to_poly(b)), hint);
}
[[nodiscard]] inline value_range range(const sym_int& e) { return detail::range_of(e); }

}  // namespace sym

namespace detail {

/// The monomial divisor `k * factors` of `b`, when b is one (a nonzero constant counts).
[[nodiscard]] inline std::optional<sym_term> as_monomial(const sym_int& b) {
  if (b.is_constant()) return sym_term{b.hint(), {}, {}};
  poly p = to_poly(b);
  if (p.c != 0 || p.terms.size() != 1) return std::nullopt;
  return p.terms.begin()->second;
}
/// Whether term t is divisible by monomial m; the quotient goes to q.
[[nodiscard]] inline bool term_divides(const sym_term& t, const sym_term& m, sym_term& q) {
  if (t.coeff % m.coeff != 0) return false;
  q = {t.coeff / m.coeff, {}, {}};
  std::size_t j = 0;
  for (const auto& f : t.factors) {
    std::int64_t p = f.power;
    if (j < m.factors.size() && node_of(m.factors[j].atom).key == node_of(f.atom).key) p -= m.factors[j++].power;
    if (p < 0) return false;
    if (p > 0) q.factors.push_back({f.atom, p});
  }
  if (j != m.factors.size()) return false;
  q.key = mono_key(q.factors);
  return true;
}
[[nodiscard]] inline std::int64_t sym_gcd(std::int64_t a, std::int64_t b) {
  while (b != 0) a = std::exchange(b, a % b);
  return a < 0 ? -a : a;
}
/// p = quotient * m + rest, where quotient collects the terms of p divisible by m (the constant
/// too when m is a constant dividing it).
inline void split_by(const poly& p, const sym_term& m, poly& quotient, poly& rest) {
  for (const auto& [k, t] : p.terms) {
    sym_term q;
    if (term_divides(t, m, q)) add_term(quotient, std::move(q));
    else add_term(rest, t);
  }
  if (m.factors.empty() && p.c % m.coeff == 0) quotient.c = p.c / m.coeff;
  else rest.c = p.c;
}
/// The gcd of rest's coefficients, constant and m's coefficient.
[[nodiscard]] inline std::int64_t poly_content(const poly& rest, std::int64_t mc) {
  std::int64_t g = sym_gcd(mc, rest.c);
  for (const auto& [k, t] : rest.terms) g = sym_gcd(g, t.coeff);
  return g;
}
[[nodiscard]] inline poly poly_scaled(const poly& p, std::int64_t div) {
  poly r;
  r.c = p.c / div;
  for (const auto& [k, t] : p.terms) {
    sym_term s = t;
    s.coeff = t.coeff / div;
    r.terms.emplace(k, std::move(s));
  }
  return r;
}
[[nodiscard]] inline sym_int mono_int(const sym_term& m) {
  poly p;
  if (m.factors.empty()) p.c = m.coeff;
  else p.terms.emplace(m.key, m);
  return from_poly(std::move(p), 0);
}
[[nodiscard]] inline bool is_kind(const sym_int& s, sym_kind k) { return s.is_symbolic() && node_of(s).kind == k; }

/// a // b or a % b (is_mod), simplified; `hint` is the result's hint.
[[nodiscard]] inline sym_int sym_divide(const sym_int& a, const sym_int& b, bool is_mod, std::int64_t hint) {
  if (b.is_constant() && b.hint() == 0)
    throw graph_error("xport.sym.div_by_zero", std::string(is_mod ? "modulo by zero in Mod(" : "division by zero in floordiv(") +
                                                   a.str() + ", 0)");
  if (a.is_constant() && b.is_constant()) return hint;
  if (b == 1 || b == -1) return is_mod ? sym_int(0) : b == 1 ? a : with_hint(sym::sub(0, a), hint);
  poly quotient, rest = to_poly(a);
  std::int64_t g = 1;
  sym_int d = with_hint(b, 0);
  if (auto m = as_monomial(b)) {
    if (m->coeff < 0 && !is_mod) {  // a // b == (-a) // (-b)
      poly neg;
      poly_add(neg, rest, -1);
      rest = std::move(neg);
      m->coeff = -m->coeff;
    }
    poly p = std::move(rest);
    rest = {};
    split_by(p, *m, quotient, rest);  // (m*q + r) // m == q + r // m,  (m*q + r) % m == r % m
    g = poly_content(rest, m->coeff);
    if (g > 1) {  // (g*u) // (g*v) == u // v,  (g*u) % (g*v) == g * (u % v)
      rest = poly_scaled(rest, g);
      m->coeff /= g;
    }
    d = mono_int(*m);
  }
  sym_int r = from_poly(rest, 0);
  auto finish = [&](const sym_int& x) {  // floordiv: quotient + x; mod: g * x
    poly p = is_mod ? poly{} : quotient;
    poly_add(p, to_poly(x), is_mod ? g : 1);
    return from_poly(std::move(p), hint);
  };
  value_range ra = range_of(r), rd = range_of(d);
  if (r == 0) return finish(0);
  if (r.is_constant() && d.is_constant())
    return finish(is_mod ? py_mod(r.hint(), d.hint()) : py_floordiv(r.hint(), d.hint()));
  if (r == d && !rd.contains(0)) return finish(is_mod ? 0 : 1);
  if (rd.lo >= 1 && ra.lo >= 0 && ra.hi < rd.lo) return finish(is_mod ? r : sym_int(0));
  if (d.is_constant() && d.hint() > 0 && ra.lo != -int_oo && ra.hi != int_oo &&
      py_floordiv(ra.lo, d.hint()) == py_floordiv(ra.hi, d.hint())) {  // one block: r // d is constant
    std::int64_t q = py_floordiv(ra.lo, d.hint());
    if (!is_mod) return finish(q);
    poly p = to_poly(r);
    p.c = checked_sub(p.c, checked_mul(q, d.hint()));
    return finish(from_poly(std::move(p), 0));
  }
  if (!is_mod && d.is_constant() && d.hint() > 0 && is_kind(r, sym_kind::floordiv)) {  // (x//c1)//c2
    const auto& inner = node_of(r).args;
    if (inner[1].is_constant() && inner[1].hint() > 0)
      return finish(sym_divide(inner[0], checked_mul(inner[1].hint(), d.hint()), false, 0));
  }
  if (is_mod && d.is_constant() && d.hint() > 0 && is_kind(r, sym_kind::mod)) {  // Mod(Mod(x, c*k), c)
    const auto& inner = node_of(r).args;
    if (inner[1].is_constant() && inner[1].hint() > 0 && inner[1].hint() % d.hint() == 0)
      return finish(sym_divide(inner[0], d, true, 0));
  }
  return finish(make_func(is_mod ? sym_kind::mod : sym_kind::floordiv, {r, d}, 0));
}

/// a <= b provably from the value ranges.
[[nodiscard]] inline bool provably_le(const sym_int& a, const sym_int& b) {
  try {
    poly p = to_poly(b);
    poly_add(p, to_poly(a), -1);
    return range_of(from_poly(std::move(p), 0)).lo >= 0;
  } catch (const graph_error&) {
    return false;
  }
}
[[nodiscard]] inline sym_int min_max(const sym_int& a, const sym_int& b, bool is_max) {
  std::int64_t hint = is_max ? std::max(a.hint(), b.hint()) : std::min(a.hint(), b.hint());
  if (a.is_constant() && b.is_constant()) return hint;
  sym_kind kind = is_max ? sym_kind::max : sym_kind::min;
  std::vector<sym_int> args;
  std::optional<std::int64_t> c;
  for (const sym_int* x : {&a, &b}) {
    std::vector<sym_int> flat = is_kind(*x, kind) ? node_of(*x).args : std::vector<sym_int>{*x};
    for (auto& f : flat) {
      if (f.is_constant()) c = !c ? f.hint() : is_max ? std::max(*c, f.hint()) : std::min(*c, f.hint());
      else args.push_back(with_hint(f, 0));
    }
  }
  if (c) args.push_back(*c);
  std::sort(args.begin(), args.end(), [](const sym_int& x, const sym_int& y) { return key_of(x) < key_of(y); });
  args.erase(std::unique(args.begin(), args.end()), args.end());
  for (std::size_t i = 0; i < args.size() && args.size() > 1;) {  // drop dominated arguments
    bool dominated = false;
    for (std::size_t j = 0; j < args.size() && !dominated; ++j)
      dominated = j != i && (is_max ? provably_le(args[i], args[j]) : provably_le(args[j], args[i]));
    if (dominated) args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
    else ++i;
  }
  if (args.size() == 1) return with_hint(args[0], hint);
  return make_func(kind, std::move(args), hint);
}

}  // namespace detail

namespace sym {

/// a // b with Python semantics (floor toward -inf); b == 0 throws graph_error.
[[nodiscard]] inline sym_int floordiv(const sym_int& a, const sym_int& b) {
  if (b.hint() == 0 && b.is_constant()) return detail::sym_divide(a, b, false, 0);
  return detail::sym_divide(a, b, false, detail::py_floordiv(a.hint(), b.hint()));
}
/// a % b with Python semantics (the result has the sign of b); b == 0 throws graph_error.
[[nodiscard]] inline sym_int mod(const sym_int& a, const sym_int& b) {
  if (b.hint() == 0 && b.is_constant()) return detail::sym_divide(a, b, true, 0);
  return detail::sym_divide(a, b, true, detail::py_mod(a.hint(), b.hint()));
}
[[nodiscard]] inline sym_int min(const sym_int& a, const sym_int& b) { return detail::min_max(a, b, false); }
[[nodiscard]] inline sym_int max(const sym_int& a, const sym_int& b) { return detail::min_max(a, b, true); }

/// The value for symbols bound by `lookup`; nullopt if a symbol is unbound.
[[nodiscard]] inline std::optional<std::int64_t> eval(
    const sym_int& e, const std::function<std::optional<std::int64_t>(std::string_view)>& lookup) {
  auto f = [&lookup](const std::string& name) { return lookup(name); };
  return detail::eval_arg(e, f);
}
/// The value for symbols bound in `env`; an unbound symbol throws graph_error naming it.
[[nodiscard]] inline std::int64_t eval(const sym_int& e, const std::unordered_map<std::string, std::int64_t>& env) {
  auto f = [&env](const std::string& name) -> std::optional<std::int64_t> {
    auto it = env.find(name);
    if (it == env.end())
      throw graph_error("xport.sym.unbound", "symbol " + name + " is unbound when evaluating a symbolic size");
    return it->second;
  };
  return *detail::eval_arg(e, f);
}
/// The symbols of `e`, unique, in natural order (s0 < s1 < s2 < s10).
/// Whether `name` is an unbacked symbol (`u0`, `u12`: a size or int only the data knows, made by
/// a data-dependent op), as torch names them.
[[nodiscard]] inline bool is_unbacked(std::string_view name) noexcept { return detail::is_unbacked_name(name); }

[[nodiscard]] inline std::vector<std::string> free_symbols(const sym_int& e) {
  std::vector<std::string> r;
  detail::collect_symbols(e, r);
  std::sort(r.begin(), r.end(), [](const std::string& a, const std::string& b) { return detail::natural_less(a, b); });
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}
/// `e` with each symbol for which `replace` gives a value replaced by it, re-simplified.
[[nodiscard]] inline sym_int substitute(const sym_int& e,
                                        const std::function<std::optional<sym_int>(std::string_view)>& replace) {
  if (e.is_constant()) return e;
  const auto& n = detail::node_of(e);
  switch (n.kind) {
    case detail::sym_kind::symbol: {
      auto r = replace(n.name);
      return r ? *r : sym_int(&n, n.hint);
    }
    case detail::sym_kind::poly: {
      sym_int acc = n.constant;
      for (const auto& t : n.terms) {
        sym_int v = t.coeff;
        for (const auto& f : t.factors) {
          sym_int x = substitute(f.atom, replace);
          for (std::int64_t p = 0; p < f.power; ++p) v = mul(v, x);
        }
        acc = add(acc, v);
      }
      return acc;
    }
    default: break;
  }
  sym_int a = substitute(n.args[0], replace);
  for (std::size_t i = 1; i < n.args.size(); ++i) {
    sym_int b = substitute(n.args[i], replace);
    switch (n.kind) {
      case detail::sym_kind::floordiv: a = floordiv(a, b); break;
      case detail::sym_kind::mod: a = mod(a, b); break;
      case detail::sym_kind::min: a = min(a, b); break;
      default: a = max(a, b); break;
    }
  }
  return a;
}
/// sympy's srepr text: `Add(Mul(Integer(2), Symbol('s0', integer=True, positive=True)), Integer(1))`.
[[nodiscard]] inline std::string srepr(const sym_int& e) { return detail::srepr(detail::view_of(e)); }

/// `a*symbol + b`.
struct linear_form {
  std::string symbol;
  std::int64_t a = 0, b = 0;
};
/// The linear form of an expression in exactly one symbol; nullopt otherwise (constants too).
[[nodiscard]] inline std::optional<linear_form> as_linear(const sym_int& e) {
  if (e.is_constant()) return std::nullopt;
  auto p = detail::to_poly(e);
  if (p.terms.size() != 1) return std::nullopt;
  const auto& t = p.terms.begin()->second;
  if (t.factors.size() != 1 || t.factors[0].power != 1 || !detail::is_kind(t.factors[0].atom, detail::sym_kind::symbol))
    return std::nullopt;
  return linear_form{detail::node_of(t.factors[0].atom).name, t.coeff, p.c};
}

}  // namespace sym

namespace detail {

/// Recursive descent over the text str() prints (Python precedence) and over sympy's srepr
/// (`Add(Mul(Integer(2), Symbol('s0', integer=True, positive=True)), Integer(1))`, as torch.export
/// writes `expr_str`). The text comes from files: nesting is limited (no unbounded recursion),
/// exponents are small, and every error names the offset.
struct sym_parser {
  std::string_view text;
  const std::function<std::optional<sym_int>(std::string_view)>& symbol_of;
  std::size_t pos = 0;
  int depth = 0;

  static constexpr int max_depth = 128;
  static constexpr std::int64_t max_power = 8;
  static constexpr std::size_t max_terms = 4096;  // a product may not expand past this

  [[noreturn]] void fail(const std::string& what, std::size_t at) const {
    const bool cut = text.size() > 240;
    throw graph_error("xport.sym.parse", what + " at offset " + std::to_string(at) + " in '" +
                                             std::string(text.substr(0, 240)) + (cut ? "...'" : "'"));
  }
  struct nest {  // one level of nesting, refused past max_depth
    sym_parser& p;
    explicit nest(sym_parser& q) : p(q) {
      if (++p.depth > max_depth) p.fail("expression nested deeper than " + std::to_string(max_depth) + " levels", p.pos);
    }
    ~nest() { --p.depth; }
    nest(const nest&) = delete;
    nest& operator=(const nest&) = delete;
  };
  void skip() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n')) ++pos;
  }
  bool eat(std::string_view tok) {
    skip();
    if (text.substr(pos, tok.size()) != tok) return false;
    pos += tok.size();
    return true;
  }
  void expect(std::string_view tok) {
    if (!eat(tok)) fail("expected '" + std::string(tok) + "'", pos);
  }
  static bool ident_char(char ch) {
    return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
  }
  sym_int expr() {
    nest n(*this);
    sym_int r = term();
    for (;;) {
      const std::size_t at = pos;
      if (eat("+")) r = sized(sym::add(r, term()), at);
      else if (eat("-")) r = sized(sym::sub(r, term()), at);
      else return r;
    }
  }
  sym_int term() {
    sym_int r = unary();
    for (;;) {
      skip();
      const std::size_t at = pos;
      if (eat("*")) r = times(r, unary(), at);
      else if (eat("//")) r = sym::floordiv(r, unary());
      else if (eat("%")) r = sym::mod(r, unary());
      else return r;
    }
  }
  sym_int unary() {
    bool negative = false;
    for (;;) {
      if (eat("-")) negative = !negative;
      else if (!eat("+")) break;
    }
    sym_int r = power();
    return negative ? sym::sub(0, r) : r;
  }
  static std::size_t terms_of(const sym_int& e) {
    if (e.is_constant()) return 1;
    const auto& n = node_of(e);
    return n.kind == sym_kind::poly ? n.terms.size() + 1 : 1;
  }
  sym_int sized(sym_int e, std::size_t at) const {
    if (terms_of(e) > max_terms) fail("sum too large (more than " + std::to_string(max_terms) + " terms)", at);
    return e;
  }
  sym_int times(const sym_int& a, const sym_int& b, std::size_t at) {
    if (terms_of(a) * terms_of(b) > max_terms)
      fail("product too large to expand (more than " + std::to_string(max_terms) + " terms)", at);
    return sym::mul(a, b);
  }
  sym_int pow(const sym_int& base, const sym_int& e, std::size_t at) {
    if (!e.is_constant() || e.hint() < 0 || e.hint() > max_power)
      fail("expected an integer exponent in [0, " + std::to_string(max_power) + "]", at);
    sym_int r = 1;
    for (std::int64_t i = 0; i < e.hint(); ++i) r = times(r, base, at);
    return r;
  }
  sym_int power() {
    sym_int base = primary();
    if (!eat("**")) return base;
    nest n(*this);
    std::size_t at = pos;
    return pow(base, unary(), at);
  }
  std::int64_t integer_literal() {
    skip();
    const std::size_t at = pos;
    const bool negative = pos < text.size() && text[pos] == '-';
    if (negative) ++pos;
    if (pos == text.size() || text[pos] < '0' || text[pos] > '9') fail("expected an integer", at);
    std::int64_t v = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text[pos++] - '0', &v))
        fail("integer literal out of range", at);
    return negative ? -v : v;
  }
  // srepr's `Symbol('s0', integer=True, positive=True)`: the name, then assumptions (ignored:
  // every size symbol is an integer)
  sym_int symbol_call(std::size_t at) {
    skip();
    const char q = pos < text.size() ? text[pos] : '\0';
    if (q != '\'' && q != '"') fail("expected a quoted symbol name", pos);
    const std::size_t begin = ++pos;
    while (pos < text.size() && ident_char(text[pos])) ++pos;
    if (pos == text.size() || text[pos] != q) fail("expected a symbol name (an identifier)", begin);
    const std::string_view name = text.substr(begin, pos - begin);
    ++pos;
    while (eat(",")) {
      skip();
      const std::size_t k = pos;
      while (pos < text.size() && ident_char(text[pos])) ++pos;
      if (k == pos) fail("expected an assumption (name=True)", k);
      expect("=");
      if (!eat("True") && !eat("False")) fail("expected True or False", pos);
    }
    expect(")");
    if (name.empty() || (name[0] >= '0' && name[0] <= '9')) fail("symbol name '" + std::string(name) + "' is not an identifier", begin);
    auto s = symbol_of(name);
    if (!s) fail("unknown symbol '" + std::string(name) + "'", at);
    return *s;
  }
  // `Name(` has been read: the function's arguments and its value
  sym_int call(std::string_view name, std::size_t at) {
    if (name == "Integer") {
      const auto v = integer_literal();
      expect(")");
      return v;
    }
    if (name == "Symbol") return symbol_call(at);
    enum class fn { add, mul, pow, floordiv, mod, min, max, ceildiv, modular_indexing, identity };
    static constexpr std::pair<std::string_view, fn> table[] = {
        {"Add", fn::add},           {"Mul", fn::mul},       {"Pow", fn::pow},          {"FloorDiv", fn::floordiv},
        {"CleanDiv", fn::floordiv}, {"Mod", fn::mod},       {"PythonMod", fn::mod},    {"Min", fn::min},
        {"Max", fn::max},           {"CeilDiv", fn::ceildiv}, {"ModularIndexing", fn::modular_indexing},
        {"Identity", fn::identity}};
    const std::pair<std::string_view, fn>* f = nullptr;
    for (const auto& e : table)
      if (e.first == name) f = &e;
    if (!f) fail("unknown function '" + std::string(name) + "'", at);
    std::vector<sym_int> args{expr()};
    while (eat(",")) args.push_back(expr());
    expect(")");
    const std::size_t want = f->second == fn::identity ? 1 : f->second == fn::modular_indexing ? 3
                             : (f->second == fn::add || f->second == fn::mul || f->second == fn::min || f->second == fn::max) ? 0
                                                                                                                            : 2;
    if (want ? args.size() != want : args.empty()) fail("wrong number of arguments to " + std::string(name), at);
    sym_int r = args[0];
    switch (f->second) {
      case fn::identity: return r;
      case fn::pow: return pow(args[0], args[1], at);
      case fn::floordiv: return sym::floordiv(args[0], args[1]);
      case fn::mod: return sym::mod(args[0], args[1]);
      case fn::ceildiv: return sym::sub(0, sym::floordiv(sym::sub(0, args[0]), args[1]));
      case fn::modular_indexing: return sym::mod(sym::floordiv(args[0], args[1]), args[2]);
      default: break;
    }
    for (std::size_t i = 1; i < args.size(); ++i) {
      switch (f->second) {
        case fn::add: r = sized(sym::add(r, args[i]), at); break;
        case fn::mul: r = times(r, args[i], at); break;
        case fn::min: r = sym::min(r, args[i]); break;
        default: r = sym::max(r, args[i]); break;
      }
    }
    return r;
  }
  sym_int primary() {
    skip();
    std::size_t at = pos;
    if (pos == text.size()) fail("unexpected end of text", at);
    char c = text[pos];
    if (c == '(') {
      ++pos;
      sym_int r = expr();
      expect(")");
      return r;
    }
    if (c >= '0' && c <= '9') return integer_literal();
    if (!ident_char(c)) fail(std::string("unexpected character '") + c + "'", at);
    while (pos < text.size() && ident_char(text[pos])) ++pos;
    std::string_view name = text.substr(at, pos - at);
    skip();
    if (pos < text.size() && text[pos] == '(') {
      ++pos;
      return call(name, at);
    }
    auto s = symbol_of(name);
    if (!s) fail("unknown symbol '" + std::string(name) + "'", at);
    return *s;
  }
};

}  // namespace detail

namespace sym {

/// Parses what str() prints back (`2*s0 + 1`, `((s0 - 3)//2)`, `Min(4, s0)`, `Mod(s0, 2)`) and what
/// srepr() prints (torch.export's `expr_str`: `Add(FloorDiv(Symbol('s0', ...), Integer(2)),
/// Integer(1))`, with sympy's and torch's integer functions: Add, Mul, Pow, FloorDiv, CleanDiv,
/// Mod, PythonMod, CeilDiv, ModularIndexing, Min, Max, Identity); symbols resolve through
/// `symbol_of`. Bad text throws graph_error naming the offset; nesting deeper than 128 levels
/// is refused.
[[nodiscard]] inline sym_int parse(std::string_view text,
                                   const std::function<std::optional<sym_int>(std::string_view)>& symbol_of) {
  detail::sym_parser p{text, symbol_of};
  sym_int r = p.expr();
  p.skip();
  if (p.pos != text.size()) p.fail("unexpected text", p.pos);
  return r;
}

}  // namespace sym

// ---- operators (found by ADL) -----------------------------------------------------------------------

[[nodiscard]] inline sym_int operator+(const sym_int& a, const sym_int& b) { return sym::add(a, b); }
[[nodiscard]] inline sym_int operator+(const sym_int& a, std::int64_t b) { return sym::add(a, b); }
[[nodiscard]] inline sym_int operator+(std::int64_t a, const sym_int& b) { return sym::add(a, b); }
[[nodiscard]] inline sym_int operator-(const sym_int& a, const sym_int& b) { return sym::sub(a, b); }
[[nodiscard]] inline sym_int operator-(const sym_int& a, std::int64_t b) { return sym::sub(a, b); }
[[nodiscard]] inline sym_int operator-(std::int64_t a, const sym_int& b) { return sym::sub(a, b); }
[[nodiscard]] inline sym_int operator-(const sym_int& a) { return sym::sub(0, a); }
[[nodiscard]] inline sym_int operator*(const sym_int& a, const sym_int& b) { return sym::mul(a, b); }
[[nodiscard]] inline sym_int operator*(const sym_int& a, std::int64_t b) { return sym::mul(a, b); }
[[nodiscard]] inline sym_int operator*(std::int64_t a, const sym_int& b) { return sym::mul(a, b); }

XPORT_END_NAMESPACE
