// xport/passes/fuse_lstm.hpp: an LSTM that the core ATen decomposition unrolled, run again as
// one `aten::lstm.input` call.
// run_decompositions() (and torch's) turns `aten::lstm.input` into its cells: per layer, one
// projection of the whole input (`addmm` of the input by w_ih), then per time step a projection
// of h (`addmm` by w_hh), a `split_with_sizes` into four gates, three `sigmoid`, two `tanh`, three
// `mul` and an `add`, and a `cat` of the steps' h: about 15 calls per step, ~450 for a two-layer
// LSTM over 16 steps. That is the IR torch prints and saves, and it runs 5x slower than eager's
// fused kernel. `fuse_lstm` finds each layer's chain of cells (one direction, with biases, as the
// decomposition makes it) and replaces it by one `lstm.input` of one layer, whose three results
// stand for the steps' `cat`, the last h and the last c; the glue between layers (the batch-first
// permutes, the stacks of final states) stays as it was. Chains it does not recognize (the
// reversed direction of a bidirectional LSTM, no biases, a step whose h or c is read elsewhere)
// stay decomposed, as does an LSTM that LibTorch 1.13 lowered (its own C++ composite: `unsafe_split`
// cells over `unbind` steps, a `stack` of them). The result is the same computation in another kernel: equal within floating
// point rounding, not bit for bit (tests compare with the unfused program at 1e-5).
//
//   auto fast = xport::run_decompositions(ep);
//   auto r = fast | xport::passes::fuse_lstm;   // r.modified() when a chain was fused
#pragma once

#include <algorithm>    // std::sort, std::find, std::unique
#include <exception>    // std::exception
#include <initializer_list>  // std::initializer_list
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <optional>     // std::optional
#include <utility>      // std::pair, std::move
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>
#include <xport/ir/program.hpp>
#include <xport/ops/meta_infer.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail::lstm_fusion {

inline bool is_op(node n, std::string_view qualified) {
  return n && n.is_call() && n.op().qualified == qualified;
}
inline bool is_view(node n) { return is_op(n, "aten::view") || is_op(n, "aten::_unsafe_view"); }

// The node that makes `v` when it is a call of `qualified`, else a null node.
inline node made_by(value v, std::string_view qualified) {
  if (!v) return {};
  const node p = v.producer();
  return is_op(p, qualified) ? p : node{};
}
inline node view_of(value v) {
  if (!v) return {};
  const node p = v.producer();
  return is_view(p) ? p : node{};
}
// The one node that reads `v`, when exactly one does (once).
inline node only_user(value v) { return v.num_uses() == 1 ? v.uses()[0].user() : node{}; }

inline bool arg_is_int(const argument& a, std::int64_t x) { return a.is_int() && a.as_int() == x; }
inline bool is_one(const argument& a) { return arg_is_int(a, 1) || (a.is_double() && a.as_double() == 1.0); }
inline bool is_int_list(const argument& a, std::initializer_list<std::int64_t> xs) {
  if (!a.is_list() || a.as_list().size() != xs.size()) return false;
  std::size_t i = 0;
  for (auto x : xs)
    if (!arg_is_int(a.as_list()[i++], x)) return false;
  return true;
}
inline std::size_t rank(value v) { return v && v.kind() == value_kind::tensor ? v.meta().sizes.size() : 0; }

// `addmm(b, view(x, [rows, cols]), permute(w, [1, 0]))`, beta = alpha = 1: a linear of x.
struct linear_match {
  value x, w, b;  // x before its view
  node mm, x_view, w_permute;
};
inline std::optional<linear_match> match_linear(node mm) {
  if (!is_op(mm, "aten::addmm") || mm.args().size() < 5 || !is_one(mm.args()[3]) || !is_one(mm.args()[4]))
    return std::nullopt;
  const auto& a = mm.args();
  if (!a[0].is_value() || !a[1].is_value() || !a[2].is_value()) return std::nullopt;
  linear_match m;
  m.mm = mm;
  m.b = a[0].as_value();
  m.x_view = view_of(a[1].as_value());
  m.w_permute = made_by(a[2].as_value(), "aten::permute");
  if (!m.x_view || !m.w_permute || !is_int_list(m.w_permute.args()[1], {1, 0})) return std::nullopt;
  m.x = m.x_view.args()[0].as_value();
  m.w = m.w_permute.args()[0].as_value();
  if (rank(m.w) != 2 || rank(m.b) != 1) return std::nullopt;
  return m;
}

// One step of the decomposed cell (ops/decompositions.hpp's lstm_layer, torch's lstm_cell):
//   gates = view(linear(h_prev, w_hh, b_hh), [1, B, 4H]) + squeeze(slice(proj, 0, t, t + 1), [0])
//   i, f, g, o = split_with_sizes(gates, [H] * 4, 2)
//   c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)
struct cell {
  value h_prev, c_prev, h, c, w_hh, b_hh, proj;
  std::int64_t step = 0;
  node split;
  node tanh_c;                    // tanh(c): the one reader of c within its own cell
  node forget;                    // sigmoid(f) * c_prev: the one reader of c_prev
  node next_view;                 // filled when chained: the next cell's view of h
  std::vector<node> nodes;        // every call of the cell, h's view and hh's permute included
};

inline std::optional<cell> match_gates(node split, cell& out) {
  if (!is_op(split, "aten::split_with_sizes") || !arg_is_int(split.args()[2], 2)) return std::nullopt;
  const node add = made_by(split.args()[0].as_value(), "aten::add.Tensor");
  if (!add || !is_one(add.args()[2]) || only_user(add.out()) != split) return std::nullopt;
  const node hh_view = view_of(add.args()[0].as_value());
  const node gi_squeeze = made_by(add.args()[1].as_value(), "aten::squeeze.dims");
  if (!hh_view || !gi_squeeze || !is_int_list(gi_squeeze.args()[1], {0})) return std::nullopt;
  const auto hh = match_linear(hh_view.args()[0].as_value().producer());
  const node slice = made_by(gi_squeeze.args()[0].as_value(), "aten::slice.Tensor");
  if (!hh || !slice || !arg_is_int(slice.args()[1], 0) || !slice.args()[2].is_int() || !slice.args()[3].is_int() ||
      !arg_is_int(slice.args()[4], 1) || slice.args()[3].as_int() != slice.args()[2].as_int() + 1)
    return std::nullopt;
  if (rank(hh->x) != 3 || only_user(hh->mm.out()) != hh_view || only_user(hh_view.out()) != add ||
      only_user(gi_squeeze.out()) != add || only_user(slice.out()) != gi_squeeze || only_user(hh->x_view.out()) != hh->mm)
    return std::nullopt;
  out.h_prev = hh->x;
  out.w_hh = hh->w;
  out.b_hh = hh->b;
  out.proj = slice.args()[0].as_value();
  out.step = slice.args()[2].as_int();
  out.split = split;
  out.nodes = {hh->x_view, hh->mm, hh_view, slice, gi_squeeze, add, split};
  return out;
}

inline std::optional<cell> match_cell(node split) {
  cell out;
  if (!match_gates(split, out) || split.num_outputs() != 4) return std::nullopt;
  node act[4];
  for (std::size_t k = 0; k < 4; ++k) {
    act[k] = only_user(split.output(k));
    if (!is_op(act[k], k == 2 ? "aten::tanh" : "aten::sigmoid")) return std::nullopt;
  }
  const node forget = only_user(act[1].out()), fresh = only_user(act[0].out()), o = only_user(act[3].out());
  if (!is_op(forget, "aten::mul.Tensor") || forget.args()[0].as_value() != act[1].out()) return std::nullopt;
  if (!is_op(fresh, "aten::mul.Tensor") || fresh.args()[0].as_value() != act[0].out() ||
      fresh.args()[1].as_value() != act[2].out() || only_user(act[2].out()) != fresh)
    return std::nullopt;
  const node c = only_user(forget.out());
  if (!is_op(c, "aten::add.Tensor") || !is_one(c.args()[2]) || c.args()[0].as_value() != forget.out() ||
      c.args()[1].as_value() != fresh.out() || only_user(fresh.out()) != c)
    return std::nullopt;
  node tanh_c;
  const value c_out = c.out();
  for (const auto& u : c_out.uses())
    if (is_op(u.user(), "aten::tanh") && only_user(u.user().out()) == o) tanh_c = u.user();
  if (!tanh_c || !is_op(o, "aten::mul.Tensor") || o.args()[0].as_value() != act[3].out() ||
      o.args()[1].as_value() != tanh_c.out())
    return std::nullopt;
  out.c_prev = forget.args()[1].as_value();
  out.c = c.out();
  out.h = o.out();
  out.tanh_c = tanh_c;
  out.forget = forget;
  for (auto n : {act[0], act[1], act[2], act[3], forget, fresh, c, tanh_c, o}) out.nodes.push_back(n);
  return out;
}

// The projection of a layer's whole input [T, B, I] by w_ih, as linear's decomposition makes it:
//   view(addmm(b, view(x, [T * B, I]), permute(w, [1, 0])), [T, B, 4H])        (x contiguous)
//   add(view(bmm(view(expand(x)), view(expand(permute(w, [1, 0])))), [T, B, 4H]), b)  (x strided:
//                                                                    a batch-first input's permute)
struct projection {
  value x, w, b;
  std::vector<node> nodes;
};
inline std::optional<projection> match_projection(value proj) {
  if (const node v = view_of(proj)) {
    auto in = match_linear(v.args()[0].as_value().producer());
    if (!in || rank(in->x) != 3 || only_user(in->mm.out()) != v || only_user(in->x_view.out()) != in->mm)
      return std::nullopt;
    return projection{in->x, in->w, in->b, {v, in->mm, in->x_view, in->w_permute}};
  }
  const node add = made_by(proj, "aten::add.Tensor");
  if (!add || !is_one(add.args()[2]) || !add.args()[1].is_value()) return std::nullopt;
  const node v = view_of(add.args()[0].as_value());
  const node bmm = v ? made_by(v.args()[0].as_value(), "aten::bmm") : node{};
  if (!bmm || only_user(v.out()) != add || only_user(bmm.out()) != v) return std::nullopt;
  const node xv = view_of(bmm.args()[0].as_value()), wv = view_of(bmm.args()[1].as_value());
  const node xe = xv ? made_by(xv.args()[0].as_value(), "aten::expand") : node{};
  const node we = wv ? made_by(wv.args()[0].as_value(), "aten::expand") : node{};
  const node wp = we ? made_by(we.args()[0].as_value(), "aten::permute") : node{};
  if (!xe || !wp || !is_int_list(wp.args()[1], {1, 0})) return std::nullopt;
  for (auto [n, user] : {std::pair{xv, bmm}, {wv, bmm}, {xe, xv}, {we, wv}})
    if (only_user(n.out()) != user) return std::nullopt;
  projection out{xe.args()[0].as_value(), wp.args()[0].as_value(), add.args()[1].as_value(),
                 {add, v, bmm, xv, wv, xe, we, wp}};
  if (rank(out.x) != 3 || rank(out.w) != 2 || rank(out.b) != 1 || out.x.meta().sizes != xe.out().meta().sizes)
    return std::nullopt;
  return out;
}

// A layer: cells 0..T-1 chained through h and c, their gates read from one projection of x, and
// their h's concatenated in order.
struct layer {
  std::vector<cell> cells;
  projection input;
  node cat;
};

// The cell that reads `h` and `c` as its previous state, among `cells` (by split node).
inline const cell* next_cell(const std::vector<cell>& cells, const cell& prev, node& view_out) {
  for (const auto& u : prev.h.uses()) {
    const node v = u.user();
    if (!is_view(v)) continue;
    for (const auto& k : cells)
      if (k.h_prev == prev.h && k.c_prev == prev.c && k.nodes[0] == v) {
        view_out = v;
        return &k;
      }
  }
  return nullptr;
}

// Whether the uses of a step's h and c are only what the fused call replaces: the cat and the
// next step's view of h; this step's tanh(c) and the next step's forget gate. (The last step's
// h and c are the call's results: anything may read them.)
inline bool state_stays_inside(const cell& k, const cell* next, node cat) {
  if (!next) return true;
  for (const auto& u : k.h.uses())
    if (u.user() != cat && u.user() != k.next_view) return false;
  for (const auto& u : k.c.uses())
    if (u.user() != k.tanh_c && u.user() != next->forget) return false;
  return true;
}

inline std::optional<layer> chain_from(const std::vector<cell>& cells, const cell& first) {
  if (first.step != 0) return std::nullopt;
  layer l;
  l.cells.push_back(first);
  for (;;) {
    node view;
    const cell* k = next_cell(cells, l.cells.back(), view);
    if (!k) break;
    if (k->step != l.cells.back().step + 1 || k->proj != first.proj || k->w_hh != first.w_hh || k->b_hh != first.b_hh)
      return std::nullopt;
    l.cells.back().next_view = view;
    l.cells.push_back(*k);
  }
  const auto steps = static_cast<std::int64_t>(l.cells.size());
  // the steps' h, concatenated along time in order: the layer's output
  for (const auto& u : l.cells.back().h.uses())
    if (is_op(u.user(), "aten::cat") && arg_is_int(u.user().args()[1], 0)) l.cat = u.user();
  if (!l.cat || !l.cat.args()[0].is_list() || l.cat.args()[0].as_list().size() != l.cells.size()) return std::nullopt;
  for (std::size_t t = 0; t < l.cells.size(); ++t) {
    const auto& a = l.cat.args()[0].as_list()[t];
    if (!a.is_value() || a.as_value() != l.cells[t].h) return std::nullopt;
  }
  if (rank(first.proj) != 3 || !first.proj.meta().sizes[0].is_constant() ||
      first.proj.meta().sizes[0].value() != steps || first.proj.num_uses() != l.cells.size())
    return std::nullopt;
  auto in = match_projection(first.proj);
  if (!in) return std::nullopt;
  l.input = std::move(*in);
  for (std::size_t t = 0; t < l.cells.size(); ++t)
    if (!state_stays_inside(l.cells[t], t + 1 < l.cells.size() ? &l.cells[t + 1] : nullptr, l.cat)) return std::nullopt;
  return l;
}

// Replaces the layer by one lstm.input call; false (nothing changed) when its meta run refuses.
inline bool fuse(graph& g, const layer& l) {
  const auto& first = l.cells.front();
  const auto& last = l.cells.back();
  const op_info& lstm = find_op("aten::lstm.input");
  std::vector<argument> args{l.input.x,
                             argument::list_type{first.h_prev, first.c_prev},
                             argument::list_type{l.input.w, first.w_hh, l.input.b, first.b_hh},
                             true, std::int64_t{1}, 0.0, false, false, false};
  std::vector<value_type> types;
  try {
    types = infer_outputs(lstm, args);
  } catch (const std::exception&) {  // the meta run refused (shapes the kernel does not take)
    return false;
  }
  // right after the last of its inputs is made: every value it replaces comes later
  node after;
  for (const auto& a : args)
    a.for_each_value([&](const value& v) {
      const node p = v.producer();
      if (!p.is_placeholder() && (!after || after.is_before(p))) after = p;
    });
  node before = after ? after.next() : node{};
  if (!before)
    for (auto n : g.nodes())
      if (!n.is_placeholder()) {
        before = n;
        break;
      }
  const node made = g.create_call(lstm, std::move(args), std::move(types), before, "lstm");
  made.set_source(l.cat.source());
  made.set_module_path(l.cat.module_path());
  made.copy_custom_meta_from(l.cat);
  l.cat.out().replace_all_uses_with(made.output(0));
  last.h.replace_all_uses_with(made.output(1));
  last.c.replace_all_uses_with(made.output(2));
  // erase what the call replaced, users before producers (shared permutes once nothing reads them)
  std::vector<node> doomed = l.input.nodes;
  doomed.push_back(l.cat);
  for (const auto& k : l.cells) {
    doomed.insert(doomed.end(), k.nodes.begin(), k.nodes.end());
    doomed.push_back(made_by(k.nodes[1].args()[2].as_value(), "aten::permute"));
  }
  std::sort(doomed.begin(), doomed.end(), [](node a, node b) { return b.is_before(a); });
  doomed.erase(std::unique(doomed.begin(), doomed.end()), doomed.end());
  for (auto n : doomed) {
    bool used = false;
    for (auto v : n.outputs()) used = used || v.num_uses() != 0;
    if (!used) g.erase(n);
  }
  return true;
}

/// Fuses every recognized layer; returns how many. One layer at a time, matched again after
/// each: a fused layer's output is the next layer's input.
inline std::size_t fuse_lstm_layers(graph& g) {
  std::size_t fused = 0;
  std::vector<node> refused;  // the first split of layers whose meta run refused
  for (bool again = true; again;) {
    again = false;
    std::vector<cell> cells;
    for (auto n : g.nodes())
      if (is_op(n, "aten::split_with_sizes"))
        if (auto k = match_cell(n)) cells.push_back(std::move(*k));
    for (const auto& k : cells) {
      if (std::find(refused.begin(), refused.end(), k.split) != refused.end()) continue;
      auto l = chain_from(cells, k);
      if (!l) continue;
      if (!fuse(g, *l)) {
        refused.push_back(k.split);
        continue;
      }
      ++fused;
      again = true;
      break;
    }
  }
  return fused;
}

}  // namespace detail::lstm_fusion

namespace passes {

/// Runs each LSTM layer the core ATen decomposition unrolled as one `aten::lstm.input` again
/// (see the header comment). For the inference IR; the training IR keeps `lstm` whole already.
struct fuse_lstm_t : pass_base<fuse_lstm_t> {
  static constexpr std::string_view name = "fuse_lstm";
  // all matching happens before the first change, and a layer whose meta run fails is skipped
  static constexpr passes::traits traits{.needs_functional = true, .needs_shapes = true, .transactional = true};
  pass_result run(exported_program& p) const {
    return pass_result::modified(detail::lstm_fusion::fuse_lstm_layers(p.graph_mut()) != 0);
  }
};
inline constexpr fuse_lstm_t fuse_lstm{};

}  // namespace passes
XPORT_END_NAMESPACE
