// xport/passes/cse.hpp: common-subexpression elimination.
// Two calls of the same operator on the same arguments (the same values, equal constants)
// compute the same thing: the later one is replaced by the earlier. Never merged: calls that
// draw random numbers (rand, dropout, ...) and calls that write an argument. On a program with
// in-place calls (torch's training IR), writes are effects (Note [Mutations as effects],
// ops/effects.hpp): two calls merge only when every argument has seen the same writes at both,
// and never when their results are written later.
// Expected linear time: one open-addressed hash table keyed by (op, arguments, their versions).
#pragma once

#include <cstddef>        // std::size_t
#include <cstring>        // std::memcpy
#include <functional>     // std::hash
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_multimap
#include <vector>         // std::vector

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ops/effects.hpp>
#include <xport/passes/dce.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

inline std::size_t hash_combine(std::size_t h, std::size_t v) {
  return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

inline std::size_t hash_argument(const argument& a) {
  std::size_t h = static_cast<std::size_t>(a.type());
  switch (a.type()) {
    case argument::kind::none: return h;
    case argument::kind::boolean: return hash_combine(h, a.as_bool());
    case argument::kind::integer: return hash_combine(h, std::hash<std::int64_t>{}(a.as_int()));
    case argument::kind::floating: {
      std::uint64_t bits;
      const double d = a.as_double();
      std::memcpy(&bits, &d, sizeof bits);
      return hash_combine(h, std::hash<std::uint64_t>{}(bits));
    }
    case argument::kind::complex: {
      const auto c = a.as_complex();
      const double parts[2] = {c.real(), c.imag()};
      std::uint64_t re, im;
      std::memcpy(&re, &parts[0], sizeof re);
      std::memcpy(&im, &parts[1], sizeof im);
      return hash_combine(hash_combine(h, std::hash<std::uint64_t>{}(re)), std::hash<std::uint64_t>{}(im));
    }
    case argument::kind::string: return hash_combine(h, std::hash<std::string>{}(a.as_string()));
    case argument::kind::dtype: return hash_combine(h, static_cast<std::size_t>(a.as_dtype()));
    case argument::kind::device: return hash_combine(h, std::hash<c10::Device>{}(a.as_device()));
    case argument::kind::layout: return hash_combine(h, static_cast<std::size_t>(a.as_layout()));
    case argument::kind::memory_format: return hash_combine(h, static_cast<std::size_t>(a.as_memory_format()));
    case argument::kind::value: return hash_combine(h, std::hash<value>{}(a.as_value()));
    case argument::kind::symbolic: return hash_combine(h, a.as_sym().expr()->hash());
    case argument::kind::scalar: return hash_combine(h, std::hash<std::string>{}(a.as_scalar().str()));
    case argument::kind::graph: return hash_combine(h, std::hash<const void*>{}(a.as_graph().get()));
    case argument::kind::list:
      for (const auto& e : a.as_list()) h = hash_combine(h, hash_argument(e));
      return h;
  }
  return h;
}

}  // namespace detail

/// Merges duplicate pure calls; returns how many were removed.
/// The table is open-addressed and holds each call's hash beside it, so a probe that misses
/// touches one cache line and no node: what keeps the pass linear on graphs larger than cache.
inline std::size_t eliminate_common_subexpressions(graph& g) {
  struct slot {
    std::size_t hash = 0;
    detail::node_impl* n = nullptr;
    std::size_t versions = 0;  ///< where the call's argument versions start in `seen`
  };
  std::size_t capacity = 16;
  while (capacity < 2 * g.size()) capacity *= 2;
  std::vector<slot> table(capacity);
  const std::size_t mask = capacity - 1;
  std::size_t removed = 0;
  // Note [Mutations as effects]: the writes each alias class has seen so far
  const alias_classes aliases(g);
  const bool writes = aliases.any_written();
  std::vector<std::size_t> version(writes ? aliases.size() : 0, 0), seen;
  std::vector<std::size_t> now;  // the current call's argument versions
  std::vector<value> written;  // what the current call writes
  const auto mergeable = [&](const node& n) {
    if (!n.is_call() || has_side_effects(n) || !written.empty()) return false;
    for (auto v : n.outputs())
      if (writes && aliases.written(v)) return false;
    return true;
  };
  for (node n = g.first(); n;) {
    const node next = n.next();
    written = n.is_call() ? alias_classes::writes(n) : std::vector<value>{};
    if (mergeable(n)) {
      std::size_t h = std::hash<const void*>{}(n.op_ptr());
      for (const auto& a : n.args()) h = detail::hash_combine(h, detail::hash_argument(a));
      now.clear();
      if (writes)
        for (std::size_t k = 0; k < n.num_inputs(); ++k) now.push_back(version[aliases.class_of(n.input(k))]);
      for (auto v : now) h = detail::hash_combine(h, v);
      h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ULL;  // spread into the low bits
      std::size_t i = (h >> 17) & mask;
      bool merged = false;
      for (; table[i].n; i = (i + 1) & mask) {
        if (table[i].hash != h) continue;
        const node m(table[i].n);
        if (m.op_ptr() != n.op_ptr() || m.num_outputs() != n.num_outputs()) continue;
        const auto ma = m.args(), na = n.args();
        bool same = ma.size() == na.size();
        for (std::size_t k = 0; same && k < ma.size(); ++k) same = ma[k] == na[k];
        for (std::size_t k = 0; same && k < now.size(); ++k) same = seen[table[i].versions + k] == now[k];
        if (!same) continue;
        for (std::size_t k = 0; k < n.num_outputs(); ++k) n.output(k).replace_all_uses_with(m.output(k));
        g.erase(n);
        ++removed;
        merged = true;
        break;
      }
      if (!merged) {
        table[i] = slot{h, n.impl(), seen.size()};
        seen.insert(seen.end(), now.begin(), now.end());
      }
    } else {
      for (const auto& v : written) ++version[aliases.class_of(v)];
    }
    n = next;
  }
  return removed;
}

namespace passes {

struct cse_t : pass_base<cse_t> {
  static constexpr std::string_view name = "cse";
  static constexpr passes::traits traits{.transactional = true};  // merges or leaves each call: nothing half-done
  pass_result run(exported_program& p) const {
    return pass_result::modified(eliminate_common_subexpressions(p.graph_mut()) != 0);
  }
};
inline constexpr cse_t cse{};

}  // namespace passes
XPORT_END_NAMESPACE
