// xport/ir/sym_scalar.hpp: SymFloat and SymBool arguments, expressions over sizes.
// torch records `x * (x.shape[0] / 2)` as `_operator.truediv` on a size giving a SymFloat
// (`Sym(IntTrueDiv(s77, 2))`) passed to `mul.Tensor`, and `x * (a.shape[0] > b.shape[0])` as an
// `_operator.gt` SymBool. A sym_scalar is such a value: a tree with one node per operation torch
// recorded (so it evaluates in the order torch's nodes do, bit for bit, and prints and saves as
// those nodes again), its leaves sizes (sym_int) and numbers. Evaluated per call from the sizes,
// as a symbolic size argument is.
#pragma once

#include <algorithm>  // std::min
#include <cmath>      // std::pow, std::isfinite, std::floor
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::snprintf
#include <memory>     // std::shared_ptr
#include <string>     // std::string
#include <string_view>  // std::string_view
#include <utility>    // std::move, std::swap
#include <vector>     // std::vector

#include <xport/config.hpp>
#include <xport/detail/python_repr.hpp>
#include <xport/error.hpp>
#include <xport/ir/sym_int.hpp>

XPORT_BEGIN_NAMESPACE

/// A SymFloat or SymBool: one node per operation, shared; immutable once made.
class sym_scalar {
 public:
  /// What a node computes (torch's `_operator` / `torch.sym_float` targets, sympy's classes).
  enum class op : std::uint8_t {
    integer,        ///< a Python int: a size, or a constant (leaf)
    number,         ///< a Python float constant (leaf)
    to_float,       ///< torch.sym_float(a): ToFloat
    int_truediv,    ///< int / int: IntTrueDiv
    float_truediv,  ///< a / b with a float side: FloatTrueDiv
    add, sub, mul,  ///< Python arithmetic with a float side
    pow,            ///< a ** b with a float side: FloatPow
    neg,            ///< -a
    compare,        ///< a <op> b: a SymBool (Eq, Ne, LessThan, ...)
    logical_and,    ///< a & b of SymBools: And
    logical_or,     ///< a | b of SymBools: Or
    logical_not,    ///< torch.sym_not(a): Not (a negated comparison when a is one)
  };
  struct node {
    op kind = op::number;
    sym_int size;     ///< integer: the size (or constant)
    double number = 0;  ///< number: the constant
    std::string cmp;  ///< compare: `<=`, `==`, ... (sym_relation's ops)
    std::shared_ptr<const node> a, b;
    std::string name;  ///< the node's name in the file it was read from (`truediv_3`): printed and saved again; not compared
  };
  using node_ptr = std::shared_ptr<const node>;

  sym_scalar() = default;
  explicit sym_scalar(node_ptr n) : n_(std::move(n)) {}

  static sym_scalar of(const sym_int& s) {
    node n;
    n.kind = op::integer;
    n.size = s;
    return sym_scalar(std::make_shared<const node>(std::move(n)));
  }
  static sym_scalar of(double x) {
    node n;
    n.number = x;
    return sym_scalar(std::make_shared<const node>(std::move(n)));
  }
  /// `a <kind> b` (a unary kind ignores b), with torch's typing: int / int is IntTrueDiv.
  static sym_scalar apply(op kind, const sym_scalar& a, const sym_scalar& b = {}) {
    if (kind == op::float_truediv && a.is_int() && b.is_int()) kind = op::int_truediv;
    node n;
    n.kind = kind;
    n.a = a.n_;
    n.b = b.n_;
    return sym_scalar(std::make_shared<const node>(std::move(n)));
  }
  static sym_scalar compare(const std::string& cmp, const sym_scalar& a, const sym_scalar& b) {
    node n;
    n.kind = op::compare;
    n.cmp = cmp;
    n.a = a.n_;
    n.b = b.n_;
    return sym_scalar(std::make_shared<const node>(std::move(n)));
  }

  /// The same value, its node named `name` (as torch named it).
  [[nodiscard]] sym_scalar named(std::string name) const {
    node n = *n_;
    n.name = std::move(name);
    return sym_scalar(std::make_shared<const node>(std::move(n)));
  }

  [[nodiscard]] const node& root() const { return *n_; }
  [[nodiscard]] const node_ptr& ptr() const noexcept { return n_; }
  [[nodiscard]] explicit operator bool() const noexcept { return n_ != nullptr; }
  /// A SymBool (a comparison), else a SymFloat (or, as a leaf, an int).
  [[nodiscard]] bool is_bool() const { return bool_node(*n_); }
  /// Whether node `n` computes a SymBool.
  static bool bool_node(const node& n) {
    return n.kind == op::compare || n.kind == op::logical_and || n.kind == op::logical_or || n.kind == op::logical_not;
  }
  /// The comparison that is false where `cmp` is true (`<=` for `>`), as torch.sym_not gives it.
  static std::string negated(const std::string& cmp) {
    return cmp == ">" ? "<=" : cmp == "<=" ? ">" : cmp == "<" ? ">=" : cmp == ">=" ? "<" : cmp == "==" ? "!=" : "==";
  }
  [[nodiscard]] bool is_int() const { return n_->kind == op::integer; }

  /// torch's fx node for an operation: its name (`truediv`, numbered `truediv_1` in a graph), its
  /// target (`_operator.truediv`, `torch.sym_float`) and the Python operator between its operands
  /// (` / `; empty for a call or `-a`). Empty for leaves and comparisons (sym_relation::kinds name those).
  struct fx_form {
    std::string_view name, target, infix;
  };
  static fx_form fx_of(op kind) {
    switch (kind) {
      case op::to_float: return {"sym_float", "torch.sym_float", ""};
      case op::int_truediv:
      case op::float_truediv: return {"truediv", "_operator.truediv", " / "};
      case op::add: return {"add", "_operator.add", " + "};
      case op::sub: return {"sub", "_operator.sub", " - "};
      case op::mul: return {"mul", "_operator.mul", " * "};
      case op::pow: return {"pow", "_operator.pow", " ** "};
      case op::neg: return {"neg", "_operator.neg", ""};
      case op::logical_and: return {"and_", "_operator.and_", " & "};
      case op::logical_or: return {"or_", "_operator.or_", " | "};
      case op::logical_not: return {"sym_not", "torch.sym_not", ""};
      default: return {"", "", ""};
    }
  }

  /// Its value with each size's value given by `size_of(sym_int) -> int64`, computed as Python
  /// computes torch's nodes in order; a bool is 0 or 1. Division by zero, or a negative base to a
  /// fractional power (a complex number in Python), throws run_error.
  template <class F>
  [[nodiscard]] double eval(const F& size_of) const { return eval_node(*n_, size_of); }
  /// Its value at the example sizes.
  [[nodiscard]] double hint() const {
    return eval([](const sym_int& s) { return s.hint(); });
  }

  /// The same operations on sizes `f(size)` (a sym_int each): what specializing or renaming the
  /// dims makes of it.
  template <class F>
  [[nodiscard]] sym_scalar map_sizes(const F& f) const { return sym_scalar(map_node(n_, f)); }
  /// Whether no size in it is symbolic (its value is then its hint).
  [[nodiscard]] bool is_constant() const { return constant_node(*n_); }

  /// The text torch prints in the node's type (`Sym(IntTrueDiv(s77, 2))`), sympy's str.
  [[nodiscard]] std::string str() const { return text_of(*n_).text; }

  /// Structural equality: the same operations on the same sizes and numbers.
  friend bool operator==(const sym_scalar& x, const sym_scalar& y) { return same(x.n_.get(), y.n_.get()); }

  /// sympy's str of a Float inside an expression: 15 significant digits, trailing zeros cut
  /// (one kept after the point): `0.1`, `3.0`, `1.0e-7`; with 17 digits, its srepr's string
  /// (`Float('0.10000000000000001', precision=53)`).
  static std::string float_text(double x, int digits = 15) {
    if (!std::isfinite(x)) return x != x ? "nan" : x < 0 ? "-oo" : "oo";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    std::string s(buf), exp;
    if (const auto e = s.find('e'); e != std::string::npos) {
      exp = s.substr(e + 1);
      s = s.substr(0, e);
      const bool negative = exp[0] == '-';
      exp = exp.substr(exp[0] == '-' || exp[0] == '+' ? 1 : 0);
      while (exp.size() > 1 && exp[0] == '0') exp.erase(0, 1);
      exp = std::string("e") + (negative ? "-" : "") + exp;
    }
    if (s.find('.') == std::string::npos) s += ".0";
    return s + exp;
  }

 private:
  template <class F>
  static node_ptr map_node(const node_ptr& x, const F& f) {
    if (!x) return x;
    node n = *x;
    if (n.kind == op::integer) n.size = f(n.size);
    n.a = map_node(x->a, f);
    n.b = map_node(x->b, f);
    return std::make_shared<const node>(std::move(n));
  }
  static bool constant_node(const node& n) {
    if (n.kind == op::integer) return n.size.is_constant();
    return (!n.a || constant_node(*n.a)) && (!n.b || constant_node(*n.b));
  }

  template <class F>
  static double eval_node(const node& n, const F& size_of) {
    const auto A = [&] { return eval_node(*n.a, size_of); };
    const auto B = [&] { return eval_node(*n.b, size_of); };
    switch (n.kind) {
      case op::integer: return static_cast<double>(size_of(n.size));
      case op::number: return n.number;
      case op::to_float: return A();
      case op::int_truediv:
      case op::float_truediv: {
        const double d = B();
        if (d == 0) throw run_error("xport.run.sym_float", "division by zero in the size expression " + sym_scalar(std::make_shared<const node>(n)).str());
        return A() / d;
      }
      case op::add: return A() + B();
      case op::sub: return A() - B();
      case op::mul: return A() * B();
      case op::pow: {
        const double x = A(), y = B();
        if (x < 0 && y != std::floor(y))
          throw run_error("xport.run.sym_float", "a negative number to a fractional power in the size expression " +
                                                     sym_scalar(std::make_shared<const node>(n)).str() + " (complex in Python)");
        return std::pow(x, y);
      }
      case op::neg: return -A();
      case op::logical_and: return A() != 0 && B() != 0 ? 1 : 0;
      case op::logical_or: return A() != 0 || B() != 0 ? 1 : 0;
      case op::logical_not: return A() == 0 ? 1 : 0;
      case op::compare: {
        if (n.a->kind == op::integer && n.b->kind == op::integer) {  // exact, as Python compares ints
          const auto x = size_of(n.a->size), y = size_of(n.b->size);
          return compare_values(n.cmp, x, y) ? 1 : 0;
        }
        return compare_values(n.cmp, A(), B()) ? 1 : 0;
      }
    }
    return 0;
  }
  template <class T>
  static bool compare_values(const std::string& c, T x, T y) {
    return c == ">=" ? x >= y : c == "<=" ? x <= y : c == ">" ? x > y : c == "<" ? x < y : c == "==" ? x == y : x != y;
  }

  static bool same(const node* x, const node* y) {
    if (x == y) return true;
    if (!x || !y || x->kind != y->kind || x->cmp != y->cmp) return false;
    if (x->kind == op::integer) return x->size == y->size;
    if (x->kind == op::number) return x->number == y->number || (x->number != x->number && y->number != y->number);
    return same(x->a.get(), y->a.get()) && same(x->b.get(), y->b.get());
  }

  // Note [SymFloat text]: torch prints a SymFloat's type with sympy's str of its expression, in
  // which sums and products are canonical: `0.1*ToFloat(s77) - 2.0`, `3.0*(IntTrueDiv(s77, 2))`
  // (a function of lower precedence than a product is parenthesized in it), `-(IntTrueDiv(s77,
  // 4))`. The text is made the same way: sums and products of a node fold into a linear form
  // over the other nodes (their atoms), a number times an atom plus a number.
  struct text_form {
    std::string text;
    int prec = 1000;  // sympy's precedence of the text: 1000 an atom, 60 pow, 50 mul, 40 add, 35 a division
  };
  struct term {
    double coeff;
    bool integral;  // a Python int coefficient (-1 of a negation) prints as one
    text_form atom;
  };
  struct linear {
    std::vector<term> terms;
    double constant = 0;
    bool has_constant = false;
    bool integral_constant = true;  // an int constant (`ToFloat(s77) + 1`) prints as one
  };

  static std::string wrap(const text_form& t, int level) { return t.prec < level ? "(" + t.text + ")" : t.text; }

  static linear linear_of(const node& n) {
    linear l;
    const auto scaled = [](linear x, double k, bool integral) {
      for (auto& t : x.terms) {
        t.coeff *= k;
        t.integral = t.integral && integral;
      }
      x.constant *= k;
      x.integral_constant = x.integral_constant && integral;
      return x;
    };
    const auto sum = [](linear x, const linear& y) {
      for (const auto& t : y.terms) {
        bool merged = false;
        for (auto& u : x.terms)
          if (u.atom.text == t.atom.text) {
            u.coeff += t.coeff;
            u.integral = u.integral && t.integral;
            merged = true;
          }
        if (!merged) x.terms.push_back(t);
      }
      x.constant += y.constant;
      x.integral_constant = (!x.has_constant || x.integral_constant) && (!y.has_constant || y.integral_constant);
      x.has_constant = x.has_constant || y.has_constant;
      return x;
    };
    switch (n.kind) {
      case op::number:
        l.constant = n.number;
        l.has_constant = true;
        l.integral_constant = false;
        return l;
      case op::integer:
        if (!n.size.is_constant()) break;
        l.constant = static_cast<double>(n.size.value());
        l.has_constant = true;
        return l;
      case op::add: return sum(linear_of(*n.a), linear_of(*n.b));
      case op::sub: return sum(linear_of(*n.a), scaled(linear_of(*n.b), -1, true));
      case op::neg: return scaled(linear_of(*n.a), -1, true);
      case op::mul: {
        const auto constant = [](const node& x) { return x.kind == op::number || (x.kind == op::integer && x.size.is_constant()); };
        const auto value = [](const node& x) { return x.kind == op::number ? x.number : static_cast<double>(x.size.value()); };
        if (constant(*n.b)) return scaled(linear_of(*n.a), value(*n.b), n.b->kind == op::integer);
        if (constant(*n.a)) return scaled(linear_of(*n.b), value(*n.a), n.a->kind == op::integer);
        l.terms.push_back({1, true, {wrap(text_of(*n.a), 50) + "*" + wrap(text_of(*n.b), 50), 50}});
        return l;
      }
      default: break;
    }
    l.terms.push_back({1, true, text_of(n)});
    return l;
  }

  static std::string coeff_text(const term& t) {
    if (t.integral && t.coeff == std::floor(t.coeff)) return std::to_string(static_cast<std::int64_t>(t.coeff));
    return float_text(t.coeff);
  }

  static text_form linear_text(const linear& l) {
    std::string s;
    int prec = 1000;
    std::size_t parts = 0;
    for (const auto& t : l.terms) {
      if (t.coeff == 0 && !t.integral) continue;
      const bool negative = t.coeff < 0;
      term mag = t;
      mag.coeff = negative ? -t.coeff : t.coeff;
      std::string body = mag.coeff == 1 && mag.integral ? wrap(t.atom, parts || l.terms.size() > 1 || l.has_constant ? 40 : 0)
                                                         : coeff_text(mag) + "*" + wrap(t.atom, 50);
      if (negative && mag.coeff == 1 && mag.integral) body = wrap(t.atom, 50);
      if (!(mag.coeff == 1 && mag.integral)) prec = std::min(prec, 50);
      else if (!negative) prec = std::min(prec, t.atom.prec);
      s += parts == 0 ? (negative ? "-" : "") + body : (negative ? " - " : " + ") + body;
      if (negative) prec = std::min(prec, 50);
      ++parts;
    }
    if (l.has_constant && (l.constant != 0 || parts == 0)) {
      const bool negative = l.constant < 0 && parts > 0;
      const auto c = negative ? -l.constant : l.constant;
      const auto text = l.integral_constant ? std::to_string(static_cast<std::int64_t>(c)) : float_text(c);
      s += parts == 0 ? text : (negative ? " - " : " + ") + text;
      ++parts;
    }
    if (parts > 1) prec = 40;
    return {s, prec};
  }

  static text_form text_of(const node& n) {
    const auto fn = [](const char* name, const node& x, const node& y, int prec) {
      return text_form{std::string(name) + "(" + text_of(x).text + ", " + text_of(y).text + ")", prec};
    };
    switch (n.kind) {
      case op::integer: {
        const auto t = n.size.str();
        return {t, t.find(" + ") != std::string::npos || t.find(" - ") != std::string::npos ? 40
                   : t.find('*') != std::string::npos || t[0] == '-'                     ? 50
                                                                                          : 1000};
      }
      case op::number: return {float_text(n.number), n.number < 0 ? 50 : 1000};
      case op::to_float: return {"ToFloat(" + text_of(*n.a).text + ")", 1000};
      case op::int_truediv: return fn("IntTrueDiv", *n.a, *n.b, 35);
      case op::float_truediv: return fn("FloatTrueDiv", *n.a, *n.b, 35);
      case op::pow: return fn("FloatPow", *n.a, *n.b, 60);
      case op::add:
      case op::sub:
      case op::mul:
      case op::neg: return linear_text(linear_of(n));
      case op::logical_and:
      case op::logical_or: {  // sympy's And / Or: the operands in order, each parenthesized
        auto x = "(" + text_of(*n.a).text + ")", y = "(" + text_of(*n.b).text + ")";
        if (y < x) std::swap(x, y);
        return {x + (n.kind == op::logical_and ? " & " : " | ") + y, 0};
      }
      case op::logical_not: {
        if (n.a->kind != op::compare) return {"~(" + text_of(*n.a).text + ")", 1000};
        node flipped = *n.a;
        flipped.cmp = negated(flipped.cmp);
        return text_of(flipped);
      }
      case op::compare: {
        const auto x = text_of(*n.a).text, y = text_of(*n.b).text;
        if (n.cmp == "==") return {"Eq(" + x + ", " + y + ")", 1000};
        if (n.cmp == "!=") return {"Ne(" + x + ", " + y + ")", 1000};
        return {x + " " + n.cmp + " " + y, 0};
      }
    }
    return {"?", 1000};
  }

  node_ptr n_;
};

XPORT_END_NAMESPACE
