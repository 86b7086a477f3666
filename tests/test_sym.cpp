// Tests of xport/ir/sym_expr.hpp: the symbolic integer engine. Expected str()/srepr() texts were
// produced by sympy 1.11 (symbols declared integer=True, positive=True; torch's FloorDiv printing).
#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.hpp"

namespace {

using xport::int_oo;
using xport::sym_int;
using xport::value_range;
namespace sym = xport::sym;

struct symbols {
  sym_int s0 = sym::symbol("s0", 8);
  sym_int s1 = sym::symbol("s1", 3);
  sym_int s2 = sym::symbol("s2", 5);
  sym_int s10 = sym::symbol("s10", 4);
};

/// Resolves s0, s1, s2, s10 for parse().
auto resolver(const symbols& s) {
  return [&s](std::string_view name) -> std::optional<sym_int> {
    if (name == "s0") return s.s0;
    if (name == "s1") return s.s1;
    if (name == "s2") return s.s2;
    if (name == "s10") return s.s10;
    return std::nullopt;
  };
}

/// The graph_error message thrown by f, or "" when none is thrown.
template <class F>
std::string error_of(F&& f) {
  try {
    (void)f();
  } catch (const xport::graph_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("sym: str() prints as torch prints sympy expressions") {
  symbols s;
  auto [s0, s1, s2, s10] = std::array{s.s0, s.s1, s.s2, s.s10};
  using sym::floordiv, sym::mod, sym::min, sym::max;
  const std::vector<std::pair<sym_int, std::string>> table = {
      {s0, "s0"},
      {2 * s0, "2*s0"},
      {s0 + 1, "s0 + 1"},
      {s0 - 1, "s0 - 1"},
      {2 * s0 + 1, "2*s0 + 1"},
      {s0 * s1, "s0*s1"},
      {s0 * s0, "s0**2"},
      {s0 + s1, "s0 + s1"},
      {-s0, "-s0"},
      {5 - s0, "5 - s0"},
      {5 - 2 * s0, "5 - 2*s0"},
      {5 - s0 * s1, "-s0*s1 + 5"},
      {-s0 - 1, "-s0 - 1"},
      {s1 - s0, "-s0 + s1"},
      {s2 + s10, "s10 + s2"},
      {s10 * s2, "s10*s2"},
      {s0 * s0 * s1 + s0 * s1 * s1 + s0 + 1, "s0**2*s1 + s0*s1**2 + s0 + 1"},
      {floordiv(s0, 2), "(s0//2)"},
      {floordiv(s0 - 3, 2) + 1, "((s0 - 3)//2) + 1"},
      {2 * floordiv(s0 - 3, 2), "2*((s0 - 3)//2)"},
      {floordiv(2 * s0, 3), "((2*s0)//3)"},
      {mod(s0, 2), "Mod(s0, 2)"},
      {min(s0, 4), "Min(4, s0)"},
      {max(s0, s1), "Max(s0, s1)"},
      {2 * mod(s0, 2), "2*(Mod(s0, 2))"},
      {-mod(s0, 2), "-Mod(s0, 2)"},
      {mod(s0, 2) * mod(s0, 2), "(Mod(s0, 2))**2"},
      {floordiv(s0, 2) * floordiv(s0, 2), "(s0//2)**2"},
      {floordiv(mod(s0, 3), s1), "((Mod(s0, 3))//s1)"},
      {floordiv(floordiv(s0, s1), 2), "(((s0//s1))//2)"},
      {floordiv(s0 * s0, 3), "((s0**2)//3)"},
      {floordiv(s0, -2), "((-s0)//2)"},
      {1 - floordiv(s0, 2), "1 - (s0//2)"},
      {min(min(s0 + 1, 2 * s1), s2), "Min(2*s1, s2, s0 + 1)"},
      {s0 * floordiv(s0, 2) * mod(s1, 3) * min(s0, s2), "s0*(s0//2)*(Mod(s1, 3))*Min(s0, s2)"},
      {mod(s0 + 1, s1), "Mod(s0 + 1, s1)"},
      {floordiv(s0 + 4, 2), "(s0//2) + 2"},
      {floordiv(2 * s0 + 2, 4), "((s0 + 1)//2)"},
      {max(floordiv(s0, 2), s1 * s0), "Max(s0*s1, (s0//2))"},
      {sym_int(7), "7"},
  };
  for (const auto& [e, text] : table) CHECK(e.str() == text);
}

TEST_CASE("sym: srepr() matches sympy's srepr") {
  symbols s;
  auto [s0, s1, s2, s10] = std::array{s.s0, s.s1, s.s2, s.s10};
  const std::string S0 = "Symbol('s0', integer=True, positive=True)";
  const std::string S1 = "Symbol('s1', integer=True, positive=True)";
  const std::string S2 = "Symbol('s2', integer=True, positive=True)";
  CHECK(sym::srepr(s0) == S0);
  CHECK(sym::srepr(sym_int(3)) == "Integer(3)");
  CHECK(sym::srepr(2 * s0 + 1) == "Add(Mul(Integer(2), " + S0 + "), Integer(1))");
  CHECK(sym::srepr(5 - s0) == "Add(Integer(5), Mul(Integer(-1), " + S0 + "))");
  CHECK(sym::srepr(-2 * s1 - 4) == "Add(Mul(Integer(-1), Integer(2), " + S1 + "), Integer(-4))");
  CHECK(sym::srepr(3 * s0 * s0) == "Mul(Integer(3), Pow(" + S0 + ", Integer(2)))");
  CHECK(sym::srepr(sym::min(4, s0)) == "Min(Integer(4), " + S0 + ")");
  CHECK(sym::srepr(sym::mod(s0, 2)) == "Mod(" + S0 + ", Integer(2))");
  CHECK(sym::srepr(sym::floordiv(s0 - 3, 2) + 1) ==
        "Add(FloorDiv(Add(" + S0 + ", Integer(-3)), Integer(2)), Integer(1))");
  // Min/Max args in sympy's `ordered` order (node count first), unlike str()
  CHECK(sym::srepr(sym::min(sym::min(s0 + 1, 2 * s1), s2)) ==
        "Min(" + S2 + ", Mul(Integer(2), " + S1 + "), Add(" + S0 + ", Integer(1)))");
  CHECK(sym::srepr(s10 * s2) ==
        "Mul(Symbol('s10', integer=True, positive=True), Symbol('s2', integer=True, positive=True))");
}

TEST_CASE("sym: canonical form makes equal expressions equal") {
  symbols s;
  auto [s0, s1, s2, s10] = std::array{s.s0, s.s1, s.s2, s.s10};
  CHECK(s0 + s1 == s1 + s0);
  CHECK(s0 * s1 == s1 * s0);
  CHECK((s0 + s1) + s2 == s0 + (s1 + s2));
  CHECK((s0 * s1) * s2 == s0 * (s1 * s2));
  CHECK(2 * (s0 + 1) == 2 * s0 + 2);
  CHECK((s0 + 1) * (s0 + 1) == s0 * s0 + 2 * s0 + 1);
  CHECK((s0 + 1) * (s0 + 1) != s0 * s0 + 1);
  CHECK(((s0 + 1) - (1 + s0)).is_constant());
  CHECK((s0 + 1) - (1 + s0) == 0);
  CHECK(s0 - s0 == 0);
  CHECK(s0 * 0 == 0);
  CHECK((s0 * s1 - s1 * s0).is_constant());
  CHECK(sym::min(s0, s1) == sym::min(s1, s0));
  CHECK(sym::max(s0, sym::max(s1, s2)) == sym::max(sym::max(s2, s0), s1));
  CHECK(sym::min(s0, s1) != sym::max(s0, s1));
  CHECK(s0 != s1);
  CHECK(s0 == sym::symbol("s0", 3));  // symbols are identified by name
  CHECK((s0 + s1).expr()->hash() == (s1 + s0).expr()->hash());
  CHECK(sym::floordiv(s0 + s10, s1).expr()->hash() == sym::floordiv(s10 + s0, s1).expr()->hash());
  // hints follow the operands' hints
  CHECK(sym::add(s0, 1).hint() == s0.hint() + 1);
  CHECK((s0 * s1 - s2).hint() == 8 * 3 - 5);
  CHECK(sym::floordiv(s0, s1).hint() == 2);
  CHECK(sym::mod(s0, s1).hint() == 2);
  CHECK(sym::min(s0, s1).hint() == 3);
  CHECK(sym::max(s0, s1).hint() == 8);
  CHECK((sym_int(3) + sym_int(4)).is_constant());
}

TEST_CASE("sym: floordiv, mod, min and max simplify") {
  symbols s;
  auto [s0, s1, s2, s10] = std::array{s.s0, s.s1, s.s2, s.s10};
  using sym::floordiv, sym::mod, sym::min, sym::max;
  CHECK(floordiv(s0, 1) == s0);
  CHECK(floordiv(s0, -1) == -s0);
  CHECK(floordiv(sym_int(7), 2) == 3);
  CHECK(floordiv(4 * s0 + 8, 4) == s0 + 2);            // exact division
  CHECK(floordiv(4 * s0 + 3, 4) == s0);                // (a*x + b)//c with c | a
  CHECK(floordiv(4 * s0 - 3, 4) == s0 - 1);
  CHECK(floordiv(4 * s0 + s1, 4) == s0 + floordiv(s1, 4));
  CHECK(floordiv(floordiv(s0, 2), 3) == floordiv(s0, 6));  // nested
  CHECK(floordiv(2 * s0 + 2, 4) == floordiv(s0 + 1, 2));   // common factor
  CHECK(floordiv(s0 * s1, s1) == s0);                       // monomial divisor
  CHECK(floordiv(s0 * s1 + s2, s1) == s0 + floordiv(s2, s1));
  CHECK(floordiv(s0 + 1, s0 + 1) == 1);
  CHECK(floordiv(-s0, 2) == floordiv(s0, -2));
  CHECK(mod(sym_int(7), 3) == 1);
  CHECK(mod(s0, 1) == 0);
  CHECK(mod(4 * s0 + 3, 4) == 3);
  CHECK(mod(4 * s0 + s1, 4) == mod(s1, 4));
  CHECK(mod(6 * s0 + 2 * s1, 4) == 2 * mod(3 * s0 + s1, 2));
  CHECK(mod(s0 * s1 + 1, s1) == mod(sym_int(1), s1));
  CHECK(mod(mod(s0, 8), 4) == mod(s0, 4));
  CHECK(min(sym_int(3), sym_int(5)) == 3);
  CHECK(max(sym_int(3), sym_int(5)) == 5);
  CHECK(min(s0, s0) == s0);
  CHECK(min(s0, s0 + 1) == s0);
  CHECK(max(s0, s0 + 1) == s0 + 1);
  CHECK(min(s0, -1) == -1);  // s0 >= 0 by its default range
  CHECK(max(s0, 0) == s0);
  CHECK(min(min(s0, 3), 5) == min(s0, 3));
  auto a = sym::symbol("a", 5, {1, 10});
  auto b = sym::symbol("b", 50, {20, 100});
  CHECK(min(a, b) == a);
  CHECK(max(a, b) == b);
  CHECK(floordiv(a, 16) == 0);       // the range decides
  CHECK(mod(a, 16) == a);
  CHECK(floordiv(a + 20, 40) == 0);
  CHECK(mod(b, 200) == b);
  CHECK(floordiv(a, b) == 0);
  CHECK(mod(a, b) == a);
  CHECK(mod(a + 10, 10) == mod(a, 10));
}

TEST_CASE("sym: floordiv and mod follow Python semantics") {
  auto fd = [](std::int64_t a, std::int64_t b) { return sym::floordiv(a, b).value(); };
  auto md = [](std::int64_t a, std::int64_t b) { return sym::mod(a, b).value(); };
  CHECK(fd(7, 2) == 3);
  CHECK(fd(-7, 2) == -4);
  CHECK(fd(7, -2) == -4);
  CHECK(fd(-7, -2) == 3);
  CHECK(fd(-8, 2) == -4);
  CHECK(md(7, 2) == 1);
  CHECK(md(-7, 2) == 1);
  CHECK(md(7, -2) == -1);
  CHECK(md(-7, -2) == -1);
  CHECK(md(-8, 2) == 0);
  CHECK(md(5, -1) == 0);
  auto t = sym::symbol("t", -7, {-100, 100});
  CHECK(sym::floordiv(t, 2).hint() == -4);
  CHECK(sym::mod(t, 2).hint() == 1);
  CHECK(sym::eval(sym::floordiv(t, -2), {{"t", 7}}) == -4);
  CHECK(sym::eval(sym::mod(t, -2), {{"t", 7}}) == -1);
  CHECK(sym::eval(sym::floordiv(t - 3, 4), {{"t", -2}}) == -2);
}

TEST_CASE("sym: value ranges") {
  CHECK(value_range{}.str() == "VR[0, int_oo]");
  CHECK(value_range{1, 1024}.str() == "VR[1, 1024]");
  CHECK(value_range{-int_oo, 5}.str() == "VR[-int_oo, 5]");
  CHECK(value_range{1, 1024}.contains(1024));
  CHECK_FALSE(value_range{1, 1024}.contains(0));
  auto s0 = sym::symbol("s0", 8);
  auto a = sym::symbol("a", 5, {1, 1024});
  auto b = sym::symbol("b", 3, {2, 10});
  auto t = sym::symbol("t", 1, {-3, 2});
  auto z = sym::symbol("z", 0, {0, 0});
  CHECK(sym::range(s0) == value_range{0, int_oo});
  CHECK(sym::range(sym_int(7)) == value_range{7, 7});
  CHECK(sym::range(2 * a + 1) == value_range{3, 2049});
  CHECK(sym::range(-s0).str() == "VR[-int_oo, 0]");
  CHECK(sym::range(s0 - a).str() == "VR[-1024, int_oo]");
  CHECK(sym::range(a * b) == value_range{2, 10240});
  CHECK(sym::range(t * b) == value_range{-30, 20});
  CHECK(sym::range(t * t) == value_range{0, 9});   // even power
  CHECK(sym::range(t * t * t) == value_range{-27, 8});
  CHECK(sym::range(z * s0) == value_range{0, 0});  // 0 * int_oo == 0
  CHECK(sym::range(s0 * s0 + s0) == value_range{0, int_oo});
  auto big = sym::symbol("big", 1, {0, int_oo / 2});
  CHECK(sym::range(4 * big).str() == "VR[0, int_oo]");  // saturates
  CHECK(sym::range(-4 * big).str() == "VR[-int_oo, 0]");
  CHECK(sym::range(sym::floordiv(a, 4)) == value_range{0, 256});
  CHECK(sym::range(sym::floordiv(a, -4)) == value_range{-256, -1});
  CHECK(sym::range(sym::floordiv(a, b)) == value_range{0, 512});
  CHECK(sym::range(sym::mod(s0, 8)) == value_range{0, 7});
  CHECK(sym::range(sym::mod(a, b)) == value_range{0, 9});
  CHECK(sym::range(sym::mod(t, -4)) == value_range{-3, 0});
  CHECK(sym::range(sym::min(a, b)) == value_range{1, 10});
  CHECK(sym::range(sym::max(a, b)) == value_range{2, 1024});
  CHECK(sym::range(sym::floordiv(s0, 2)) == value_range{0, int_oo});
  CHECK_THROWS_AS((void)sym::symbol("q", 0, {1, 4}), xport::graph_error);  // hint outside its range
}

TEST_CASE("sym: eval, substitute, free_symbols, as_linear") {
  symbols s;
  auto [s0, s1, s2, s10] = std::array{s.s0, s.s1, s.s2, s.s10};
  auto e = sym::floordiv(s0 * s1 + 3, 2) - sym::mod(s2, 4) + sym::max(s0, s1) * sym::min(s10, 2);
  std::unordered_map<std::string, std::int64_t> env{{"s0", 5}, {"s1", 3}, {"s2", 7}, {"s10", 9}};
  CHECK(sym::eval(e, env) == (5 * 3 + 3) / 2 - 7 % 4 + 5 * 2);
  CHECK(sym::eval(sym_int(4), env) == 4);
  auto lookup = [&](std::string_view n) -> std::optional<std::int64_t> {
    if (n == "s10") return std::nullopt;
    return env.at(std::string(n));
  };
  CHECK(sym::eval(e, lookup) == std::nullopt);
  CHECK(sym::eval(s0 * s1, lookup) == 15);
  CHECK(error_of([&] { return sym::eval(e, std::unordered_map<std::string, std::int64_t>{{"s0", 1}}); })
            .find("s1") != std::string::npos);

  CHECK(sym::free_symbols(e) == std::vector<std::string>{"s0", "s1", "s2", "s10"});
  CHECK(sym::free_symbols(sym_int(3)).empty());
  CHECK(sym::free_symbols(s0 * s0 + s0) == std::vector<std::string>{"s0"});

  auto sub = sym::substitute(2 * s0 + s1, [&](std::string_view n) -> std::optional<sym_int> {
    if (n == "s0") return s1 + 1;
    return std::nullopt;
  });
  CHECK(sub == 3 * s1 + 2);
  CHECK(sub.hint() == 3 * 3 + 2);
  auto folded = sym::substitute(sym::floordiv(s0, 2) + sym::min(s0, s1), [](std::string_view) -> std::optional<sym_int> {
    return sym_int(9);
  });
  CHECK(folded.is_constant());
  CHECK(folded == 4 + 9);

  auto lin = sym::as_linear(3 * s0 - 2);
  REQUIRE(lin.has_value());
  CHECK(lin->symbol == "s0");
  CHECK(lin->a == 3);
  CHECK(lin->b == -2);
  CHECK(sym::as_linear(s1)->a == 1);
  CHECK(sym::as_linear(s1)->b == 0);
  CHECK_FALSE(sym::as_linear(sym_int(3)).has_value());
  CHECK_FALSE(sym::as_linear(s0 + s1).has_value());
  CHECK_FALSE(sym::as_linear(s0 * s0).has_value());
  CHECK_FALSE(sym::as_linear(sym::floordiv(s0, 2)).has_value());
}

TEST_CASE("sym: parse reads str() back") {
  symbols s;
  auto [s0, s1, s2, s10] = std::array{s.s0, s.s1, s.s2, s.s10};
  auto of = resolver(s);
  using sym::floordiv, sym::mod, sym::min, sym::max;
  for (const sym_int& e : {s0, 2 * s0 + 1, 5 - s0, -s0 * s1 + 5, s0 * s0 * s1 + s0 * s1 * s1 + s0 + 1,
                           floordiv(s0 - 3, 2) + 1, 2 * mod(s0, 2), mod(s0, 2) * mod(s0, 2),
                           floordiv(floordiv(s0, s1), 2), min(min(s0 + 1, 2 * s1), s2), max(-s0 + s10, s1),
                           floordiv(s0, -2), sym_int(-3)}) {
    CAPTURE(e.str());
    CHECK(sym::parse(e.str(), of) == e);
  }
  CHECK(sym::parse("  2 *s0+ 1 ", of) == 2 * s0 + 1);
  CHECK(sym::parse("s0 % 4", of) == mod(s0, 4));
  CHECK(sym::parse("FloorDiv(s0, 4)", of) == floordiv(s0, 4));
  CHECK(sym::parse("Mod(s0 + 1, s1)", of) == mod(s0 + 1, s1));
  CHECK(sym::parse("Min(s0, s1, 4)", of) == min(min(s0, s1), 4));
  CHECK(sym::parse("-s0**2", of) == -(s0 * s0));
  CHECK(sym::parse("(s0 + 1)**2", of) == (s0 + 1) * (s0 + 1));
  CHECK(sym::parse("s0 - s1 - s2", of) == s0 - s1 - s2);
  CHECK(sym::parse("s0//2*2", of) == floordiv(s0, 2) * 2);
}

TEST_CASE("sym: parse reads sympy srepr, torch.export's expr_str, and bounds hostile text") {
  const auto s77 = sym::symbol("s77", 8, {2, 64}), s3 = sym::symbol("s3", 5, {1, int_oo});
  const auto of = [&](std::string_view n) -> std::optional<sym_int> {
    if (n == "s77") return s77;
    if (n == "s3") return s3;
    return std::nullopt;
  };
  const std::string S = "Symbol('s77', positive=True, integer=True)";  // torch 2.13 writes positive= first
  CHECK(sym::parse(S, of) == s77);
  CHECK(sym::parse("Symbol(\"s77\", integer=True, positive=True)", of) == s77);
  CHECK(sym::parse("Mul(Integer(2), " + S + ")", of) == 2 * s77);
  CHECK(sym::parse("Add(FloorDiv(" + S + ", Integer(2)), Integer(1))", of) == sym::floordiv(s77, 2) + 1);
  CHECK(sym::parse("Max(Integer(3), " + S + ")", of) == sym::max(s77, 3));
  CHECK(sym::parse("Min(" + S + ", Symbol('s3', integer=True, positive=True), Integer(9))", of) == sym::min(sym::min(s77, s3), 9));
  CHECK(sym::parse("Mod(" + S + ", Integer(4))", of) == sym::mod(s77, 4));
  CHECK(sym::parse("PythonMod(" + S + ", Integer(4))", of) == sym::mod(s77, 4));
  CHECK(sym::parse("CleanDiv(Mul(Integer(4), " + S + "), Integer(2))", of) == 2 * s77);
  CHECK(sym::parse("CeilDiv(" + S + ", Integer(3))", of) == -sym::floordiv(-s77, 3));
  CHECK(sym::parse("ModularIndexing(" + S + ", Integer(2), Integer(3))", of) == sym::mod(sym::floordiv(s77, 2), 3));
  CHECK(sym::parse("Pow(" + S + ", Integer(2))", of) == s77 * s77);
  CHECK(sym::parse("Add(Mul(Integer(-1), Integer(2), " + S + "), Integer(-4))", of) == -2 * s77 - 4);
  CHECK(sym::parse("Identity(" + S + ")", of) == s77);
  // what xport writes, sympy's srepr, reads back as the same expression
  for (const sym_int& e : {s77, 2 * s77 + 1, 5 - s77, -2 * s3 - 4, 3 * s77 * s77, s77 * s3 + s3, sym::min(4, s77),
                           sym::mod(s77, 2), sym::floordiv(s77 - 3, 2) + 1, sym::max(sym::floordiv(s77, s3), 2)}) {
    CAPTURE(sym::srepr(e));
    CHECK(sym::parse(sym::srepr(e), of) == e);
  }
  // hostile text: bounded nesting, exponents and expansion; offsets in the errors
  const auto error_of = [&](const std::string& text) {
    try {
      (void)sym::parse(text, of);
    } catch (const xport::graph_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += "Add(";
  CHECK(error_of(deep).find("[xport.sym.parse] expression nested deeper than 128 levels at offset") == 0);
  CHECK(error_of(std::string(10000, '(') + "s77").find("nested deeper than 128 levels") != std::string::npos);
  CHECK(error_of(std::string(100000, '-') + "s77").empty());  // signs are read in a loop, not recursively
  CHECK(error_of("Pow(" + S + ", Integer(1000000000))").find("expected an integer exponent in [0, 8]") != std::string::npos);
  const std::string S3 = "Symbol('s3', integer=True, positive=True)";
  std::string sum = "Add(";  // 70 distinct atoms
  for (int i = 2; i < 72; ++i) sum += "FloorDiv(" + S3 + ", Integer(" + std::to_string(i) + ")), ";
  sum += "Integer(1))";
  CHECK(error_of(sum).empty());
  CHECK(error_of("Mul(" + sum + ", " + sum + ")").find("product too large to expand (more than 4096 terms)") != std::string::npos);
  std::string huge = "Add(";
  for (int i = 2; i < 5000; ++i) huge += "FloorDiv(" + S3 + ", Integer(" + std::to_string(i) + ")), ";
  CHECK(error_of(huge + "Integer(1))").find("sum too large (more than 4096 terms)") != std::string::npos);
  CHECK(error_of("Symbol('s9', integer=True)") == "[xport.sym.parse] unknown symbol 's9' at offset 0 in 'Symbol('s9', integer=True)'");
  CHECK(error_of("Symbol('s77', integer=Maybe)").find("expected True or False at offset 22") != std::string::npos);
  CHECK(error_of("Integer(x)").find("expected an integer at offset 8") != std::string::npos);
  CHECK(error_of("Sin(" + S + ")").find("unknown function 'Sin' at offset 0") != std::string::npos);
  CHECK(error_of(std::string(1000, 'x') + "$").find("...'") != std::string::npos);  // long text is cut in the message
}

TEST_CASE("sym: errors name what went wrong") {
  symbols s;
  auto of = resolver(s);
  CHECK(error_of([&] { return sym::floordiv(s.s0, 0); }) ==
        "[xport.sym.div_by_zero] division by zero in floordiv(s0, 0)");
  CHECK(error_of([&] { return sym::mod(s.s0 + 1, 0); }) ==
        "[xport.sym.div_by_zero] modulo by zero in Mod(s0 + 1, 0)");
  CHECK(error_of([] { return sym::floordiv(5, 0); }) == "[xport.sym.div_by_zero] division by zero in floordiv(5, 0)");
  CHECK(error_of([&] { return sym::eval(sym::floordiv(s.s2, s.s0 - 8), {{"s0", 8}, {"s2", 1}}); })
            .find("division by zero") != std::string::npos);
  const std::string overflow = "[xport.sym.overflow] integer overflow in symbolic multiplication";
  CHECK(error_of([] { return sym::mul(int_oo, 2); }).rfind(overflow, 0) == 0);
  CHECK(error_of([] { return sym::add(int_oo, 1); }).find("xport.sym.overflow") != std::string::npos);
  auto x = sym::symbol("x", 1);
  CHECK(error_of([&] { return (x * int_oo) * 3; }).rfind(overflow, 0) == 0);
  CHECK(error_of([&] { return sym::eval(x * x, {{"x", int_oo / 2}}); }).rfind(overflow, 0) == 0);
  CHECK(error_of([&] { return sym::parse("s0 + y", of); }) ==
        "[xport.sym.parse] unknown symbol 'y' at offset 5 in 's0 + y'");
  CHECK(error_of([&] { return sym::parse("s0 + ", of); }) ==
        "[xport.sym.parse] unexpected end of text at offset 5 in 's0 + '");
  CHECK(error_of([&] { return sym::parse("s0 $ 1", of); }) ==
        "[xport.sym.parse] unexpected text at offset 3 in 's0 $ 1'");
  CHECK(error_of([&] { return sym::parse("(s0 + 1", of); }) ==
        "[xport.sym.parse] expected ')' at offset 7 in '(s0 + 1'");
  CHECK(error_of([&] { return sym::parse("Foo(s0)", of); }) ==
        "[xport.sym.parse] unknown function 'Foo' at offset 0 in 'Foo(s0)'");
  CHECK(error_of([&] { return sym::parse("s0**s1", of); }).find("at offset 4") != std::string::npos);
  CHECK(error_of([&] { return sym::parse("99999999999999999999", of); }).find("at offset 0") != std::string::npos);
  CHECK(error_of([] { return sym::symbol("2x", 1); }).find("xport.sym.bad_symbol") != std::string::npos);
}

namespace {

/// An unsimplified expression tree, evaluated plainly: the reference of the property test.
struct ref_tree {
  struct node {
    char op;  // 'c' constant, 's' symbol, + - * / % m (min) M (max)
    std::int64_t value = 0;
    int lhs = -1, rhs = -1;
  };
  std::vector<node> nodes;

  static std::int64_t py_div(std::int64_t a, std::int64_t b) {
    std::int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
  }
  std::optional<std::int64_t> eval(int i, const std::array<std::int64_t, 3>& env) const {
    const node& n = nodes[static_cast<std::size_t>(i)];
    if (n.op == 'c') return n.value;
    if (n.op == 's') return env[static_cast<std::size_t>(n.value)];
    auto a = eval(n.lhs, env), b = eval(n.rhs, env);
    if (!a || !b) return std::nullopt;
    std::int64_t r = 0;
    switch (n.op) {
      case '+': if (__builtin_add_overflow(*a, *b, &r)) return std::nullopt; return r;
      case '-': if (__builtin_sub_overflow(*a, *b, &r)) return std::nullopt; return r;
      case '*': if (__builtin_mul_overflow(*a, *b, &r)) return std::nullopt; return r;
      case '/': return py_div(*a, *b);
      case '%': return *a - *b * py_div(*a, *b);
      case 'm': return std::min(*a, *b);
      default: return std::max(*a, *b);
    }
  }
};

}  // namespace

TEST_CASE("sym: property test against plain evaluation") {
  const std::array<value_range, 3> ranges{value_range{1, 20}, value_range{2, 9}, value_range{0, 30}};
  const std::array<sym_int, 3> syms{sym::symbol("s0", 4, ranges[0]), sym::symbol("s1", 3, ranges[1]),
                                    sym::symbol("s2", 7, ranges[2])};
  auto of = [&](std::string_view n) -> std::optional<sym_int> {
    for (const auto& x : syms)
      if (x.str() == n) return x;
    return std::nullopt;
  };
  std::mt19937_64 rng(20240611);
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  ref_tree tree;
  // builds a random expression both as a reference node and through the engine
  auto build = [&](auto& self, int depth) -> std::pair<int, sym_int> {
    auto push = [&](ref_tree::node n) {
      tree.nodes.push_back(n);
      return static_cast<int>(tree.nodes.size() - 1);
    };
    int kind = depth == 0 ? static_cast<int>(pick(0, 1)) : static_cast<int>(pick(0, 9));
    if (kind == 0) {
      std::int64_t c = pick(-6, 6);
      return {push({'c', c}), sym_int(c)};
    }
    if (kind == 1) {
      std::int64_t k = pick(0, 2);
      return {push({'s', k}), syms[static_cast<std::size_t>(k)]};
    }
    auto [li, le] = self(self, depth - 1);
    if (kind == 5 || kind == 6) {  // divide by a nonzero constant or a positive symbol
      std::int64_t c = pick(-5, 5);
      bool by_symbol = pick(0, 2) == 0;
      if (c == 0) c = 3;
      std::int64_t k = pick(0, 1);
      int ri = by_symbol ? push({'s', k}) : push({'c', c});
      sym_int re = by_symbol ? syms[static_cast<std::size_t>(k)] : sym_int(c);
      int i = push({kind == 5 ? '/' : '%', 0, li, ri});
      return {i, kind == 5 ? sym::floordiv(le, re) : sym::mod(le, re)};
    }
    auto [ri, re] = self(self, depth - 1);
    static constexpr char ops[] = {'+', '-', '*', '+', '-', 'm', 'M', '*'};
    char op = ops[kind - 2];
    int i = push({op, 0, li, ri});
    switch (op) {
      case '+': return {i, le + re};
      case '-': return {i, le - re};
      case '*': return {i, le * re};
      case 'm': return {i, sym::min(le, re)};
      default: return {i, sym::max(le, re)};
    }
  };
  int checked = 0, symbolic = 0;
  for (int round = 0; round < 3000; ++round) {
    tree.nodes.clear();
    auto [root, e] = build(build, static_cast<int>(pick(1, 4)));
    std::array<std::int64_t, 3> hints{syms[0].hint(), syms[1].hint(), syms[2].hint()};
    REQUIRE(tree.eval(root, hints).has_value());
    CHECK(e.hint() == *tree.eval(root, hints));
    value_range vr = sym::range(e);
    sym_int back = sym::parse(e.str(), of);
    if (back != e) {
      CAPTURE(e.str());
      CAPTURE(back.str());
      CHECK(back == e);
    }
    symbolic += e.is_symbolic();
    for (int k = 0; k < 6; ++k) {
      std::array<std::int64_t, 3> env{pick(ranges[0].lo, ranges[0].hi), pick(ranges[1].lo, ranges[1].hi),
                                      pick(ranges[2].lo, ranges[2].hi)};
      auto expected = tree.eval(root, env);
      if (!expected) continue;
      std::unordered_map<std::string, std::int64_t> m{{"s0", env[0]}, {"s1", env[1]}, {"s2", env[2]}};
      std::int64_t got = sym::eval(e, m);
      if (got != *expected || !vr.contains(got) || sym::eval(back, m) != got) {
        CAPTURE(e.str());
        CAPTURE(vr.str());
        CAPTURE(env[0]);
        CAPTURE(env[1]);
        CAPTURE(env[2]);
        CHECK(got == *expected);
        CHECK(vr.contains(got));
        CHECK(sym::eval(back, m) == got);
      }
      ++checked;
    }
  }
  CHECK(checked > 10000);
  CHECK(symbolic > 1500);
}
