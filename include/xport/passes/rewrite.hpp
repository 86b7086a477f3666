// xport/passes/rewrite.hpp: the subgraph pattern rewriter.
// The pattern and its replacement are programs exported from C++ functions taking the same
// arguments (so they read like the code they stand for):
//
//   auto pattern = xport::export_program([](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
//     return at::addmm(b, x, w.t());
//   }, std::tuple{x, w, b});
//   auto replacement = xport::export_program([](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
//     return at::linear(x, w, b);
//   }, std::tuple{x, w, b});
//   auto result = program | xport::passes::rewrite(std::move(pattern), std::move(replacement));
//
// Matching is structural, anchored at the pattern's output: the same ops, constants equal to
// the pattern's (constant constraints), each pattern input bound to one value, with the
// pattern input's dtype and rank (shape constraints; `exact_shapes` compares sizes too), and no
// matched intermediate used outside the match. Each match is replaced by the replacement's
// calls (their types inferred for the matched values), use lists kept right.
#pragma once

#include <algorithm>      // std::sort
#include <memory>         // std::shared_ptr
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

#include <xport/config.hpp>
#include <xport/ops/meta_infer.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

struct rewrite_options {
  /// Require each bound value to have exactly the sizes of the pattern's example input (by
  /// default: the same dtype and rank).
  bool exact_shapes = false;
};

struct rewrite_t : pass_base<rewrite_t> {
  static constexpr std::string_view name = "rewrite";

  std::shared_ptr<const exported_program> pattern;
  std::shared_ptr<const exported_program> replacement;
  rewrite_options options;

  pass_result run(exported_program& p) const {
    const auto pattern_out = single_output(*pattern, "pattern");
    const auto replacement_out = single_output(*replacement, "replacement");
    if (!pattern_out.producer().is_call())
      return pass_result::failure("the pattern's output must be computed by a call, not be an input");
    const auto pphs = pattern->graph().placeholders();
    const auto rphs = replacement->graph().placeholders();
    if (pphs.size() != rphs.size())
      return pass_result::failure("the pattern takes " + std::to_string(pphs.size()) + " inputs, the replacement " +
                                  std::to_string(rphs.size()) + "; they must take the same arguments");
    auto& g = p.graph_mut();
    const node anchor = pattern_out.producer();
    std::size_t count = 0;
    for (node n = g.first(); n;) {
      node next = n.next();
      if (n.is_call() && n.op_ptr() == anchor.op_ptr()) {
        match m;
        if (match_node(anchor, n, m) && self_contained(m, n, pattern_out.index())) {
          replace(g, m, n, n.output(pattern_out.index()), pphs, rphs, replacement_out);
          ++count;
        }
      }
      n = next;
    }
    return pass_result::modified(count != 0);
  }

 private:
  struct match {
    std::unordered_map<const detail::node_impl*, node> nodes;           // pattern node -> target node
    std::unordered_map<const detail::value_impl*, value> inputs;        // pattern placeholder -> value
  };

  static value single_output(const exported_program& prog, const char* what) {
    const auto outs = prog.graph().outputs();
    if (outs.size() != 1)
      throw error("xport.rewrite.outputs", std::string("the ") + what + " must return exactly one tensor");
    return outs[0];
  }

  bool match_node(node pn, node tn, match& m) const {
    if (auto it = m.nodes.find(pn.impl()); it != m.nodes.end()) return it->second == tn;
    if (pn.op_ptr() != tn.op_ptr() || pn.num_outputs() != tn.num_outputs()) return false;
    m.nodes.emplace(pn.impl(), tn);
    const auto pa = pn.args(), ta = tn.args();
    if (pa.size() != ta.size()) return false;
    for (std::size_t i = 0; i < pa.size(); ++i)
      if (!match_arg(pa[i], ta[i], m)) return false;
    return true;
  }

  bool match_arg(const argument& pa, const argument& ta, match& m) const {
    if (pa.is_value()) {
      if (!ta.is_value()) return false;
      const value pv = pa.as_value(), tv = ta.as_value();
      if (pv.producer().is_placeholder()) {
        if (auto it = m.inputs.find(pv.impl()); it != m.inputs.end()) return it->second == tv;
        if (!shape_ok(pv, tv)) return false;
        m.inputs.emplace(pv.impl(), tv);
        return true;
      }
      return tv.producer().is_call() && pv.index() == tv.index() && match_node(pv.producer(), tv.producer(), m);
    }
    if (pa.is_list()) {
      if (!ta.is_list() || pa.as_list().size() != ta.as_list().size()) return false;
      for (std::size_t i = 0; i < pa.as_list().size(); ++i)
        if (!match_arg(pa.as_list()[i], ta.as_list()[i], m)) return false;
      return true;
    }
    return pa == ta;  // constants must be equal
  }

  bool shape_ok(value pattern_input, value target) const {
    if (pattern_input.kind() != target.kind()) return false;
    if (pattern_input.kind() != value_kind::tensor) return true;
    const auto &a = pattern_input.meta(), &b = target.meta();
    if (a.dtype != b.dtype || a.dim() != b.dim()) return false;
    return !options.exact_shapes || a.sizes == b.sizes;
  }

  // Only the anchor's matched output may be read outside the match (the rest is removed).
  static bool self_contained(const match& m, node anchor, std::size_t anchor_output) {
    std::unordered_set<const detail::node_impl*> inside;
    for (const auto& [pn, tn] : m.nodes) inside.insert(tn.impl());
    for (const auto& [pn, tn] : m.nodes)
      for (std::size_t i = 0; i < tn.num_outputs(); ++i) {
        if (tn == anchor && i == anchor_output) continue;
        const value out = tn.output(i);
        for (const auto& u : out.uses())
          if (!inside.count(u.user_impl)) return false;
      }
    return true;
  }

  void replace(graph& g, const match& m, node anchor, value anchor_out, const std::vector<node>& pphs,
               const std::vector<node>& rphs, value replacement_out) const {
    std::unordered_map<const detail::value_impl*, value> map;  // replacement value -> target value
    for (std::size_t i = 0; i < rphs.size(); ++i) {
      const auto it = m.inputs.find(pphs[i].output(0).impl());
      if (it == m.inputs.end())
        throw error("xport.rewrite.unused_input", "pattern input '" + pphs[i].name() +
                                                      "' is not read by the pattern, so the replacement cannot use it");
      map.emplace(rphs[i].output(0).impl(), it->second);
    }
    for (auto rn : replacement->graph().nodes()) {
      if (!rn.is_call()) continue;
      std::vector<argument> args(rn.args().begin(), rn.args().end());
      for (auto& a : args) a.for_each_value([&](value& v) { v = map.at(v.impl()); });
      auto types = detail::infer_outputs(rn.op(), args);
      const node made = g.create_call(rn.op(), std::move(args), std::move(types), anchor);
      made.set_source(anchor.source());
      made.set_module_path(anchor.module_path());
      made.copy_custom_meta_from(anchor);
      for (std::size_t i = 0; i < rn.num_outputs(); ++i) map.emplace(rn.output(i).impl(), made.output(i));
    }
    anchor_out.replace_all_uses_with(map.at(replacement_out.impl()));
    // erase the matched calls, users before producers
    std::vector<node> doomed;
    for (const auto& [pn, tn] : m.nodes) doomed.push_back(tn);
    std::sort(doomed.begin(), doomed.end(), [](node a, node b) { return b.is_before(a); });
    for (auto n : doomed) g.erase(n);
  }
};

/// A rewrite pass replacing every match of `pattern` by `replacement` (see the header comment).
inline rewrite_t rewrite(exported_program pattern, exported_program replacement, rewrite_options options = {}) {
  rewrite_t r;
  r.pattern = std::make_shared<const exported_program>(std::move(pattern));
  r.replacement = std::make_shared<const exported_program>(std::move(replacement));
  r.options = options;
  return r;
}

}  // namespace passes
XPORT_END_NAMESPACE
