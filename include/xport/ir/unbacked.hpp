// xport/ir/unbacked.hpp: where a graph's unbacked symbols get their values.
// A data-dependent op (nonzero, a boolean-mask index, item()) gives a size or an int only its
// result knows: torch's unbacked SymInt, `u0`. The first call whose output has it as a dim (or
// is it, for item) gives it; the interpreter binds it there, print and save read it there.
#pragma once

#include <cstddef>        // std::size_t
#include <cstdint>        // std::int64_t
#include <string>         // std::string
#include <unordered_set>  // std::unordered_set

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/sym_expr.hpp>

XPORT_BEGIN_NAMESPACE

/// Calls `f(output, dim, symbol, size)` for each unbacked symbol call `n` is the first to give
/// (`dim` is -1 when the output is the SymInt itself); `seen` holds the symbols given so far.
template <class F>
void for_each_unbacked_given(const node& n, std::unordered_set<std::string>& seen, F&& f) {
  const auto give = [&](const value& v, std::int64_t dim, const sym_int& e) {
    if (!e.is_symbolic()) return;
    const auto lin = sym::as_linear(e);
    if (!lin || lin->a != 1 || lin->b != 0 || !sym::is_unbacked(lin->symbol) || !seen.insert(lin->symbol).second) return;
    f(v, dim, lin->symbol, e);
  };
  for (auto v : n.outputs()) {
    if (v.kind() == value_kind::sym_int) give(v, -1, v.type().scalar);
    else if (v.kind() == value_kind::tensor)
      for (std::size_t d = 0; d < v.meta().sizes.size(); ++d) give(v, static_cast<std::int64_t>(d), v.meta().sizes[d]);
  }
}

/// Whether call `n` gives an unbacked symbol none of its inputs has: its runtime assertion (the
/// symbol's range, torch's `_assert_scalar` nodes on it) is an effect, so dead-code elimination
/// keeps it.
inline bool gives_unbacked(const node& n) {
  std::unordered_set<std::string> known;
  bool any = false;  // an output with an unbacked symbol at all (most nodes have none: no set is made)
  for_each_unbacked_given(n, known, [&](const value&, std::int64_t, const std::string&, const sym_int&) { any = true; });
  if (!any) return false;
  known.clear();
  for (auto v : n.inputs()) {
    const auto note = [&](const sym_int& e) {
      for (auto& s : sym::free_symbols(e)) known.insert(std::move(s));
    };
    if (v.kind() == value_kind::sym_int) note(v.type().scalar);
    else if (v.kind() == value_kind::tensor)
      for (const auto& d : v.meta().sizes) note(d);
  }
  bool gives = false;
  for_each_unbacked_given(n, known, [&](const value&, std::int64_t, const std::string&, const sym_int&) { gives = true; });
  return gives;
}

XPORT_END_NAMESPACE
