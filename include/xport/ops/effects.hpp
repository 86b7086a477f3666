// xport/ops/effects.hpp: what a call writes, and which values share memory, in a graph that may
// mutate (torch's training IR: relu_, add_, a BatchNorm's running statistics). The passes that
// merge, fold or move calls ask it (passes/cse.hpp, passes/fold.hpp). Read from the operators'
// schemas (`Tensor(a!) self`, `-> Tensor(a)`), plus the ops whose schema does not say that they
// write (batch_norm in training writes its running statistics).
#pragma once

#include <cstddef>        // std::size_t
#include <numeric>        // std::iota
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ops/op_sets.hpp>

XPORT_BEGIN_NAMESPACE

/// Note [Mutations as effects]: in a program with in-place calls a value does not hold one thing:
/// `y = x.view(-1); y.add_(1)` changes x too. Values that may share memory are put in one alias
/// class (a view's output with its input, an in-place call's output with what it writes); a
/// call that writes any of its arguments changes the whole class. A pass then treats each write
/// as an effect:
///   - two pure calls are the same computation only if every argument's class has seen the same
///     writes at both (cse compares class versions), and neither's results are ever written (a
///     merged result would carry one's writes into the other's readers);
///   - a call is a constant only if no class it reads or gives is ever written (fold);
///   - the writing call itself stays where it is, is never merged, folded or removed (dce, via
///     has_side_effects).
class alias_classes {
 public:
  explicit alias_classes(const graph& g) {
    for (auto n : g.nodes())
      for (auto v : n.outputs()) index_of(v);
    for (auto n : g.nodes()) {
      if (!n.is_call()) continue;
      join_aliases(n);
      for (const auto& v : writes(n)) written_[find(index_of(v))] = true;
    }
    // a class's root may have changed since it was marked: settle the marks on the roots
    for (std::size_t i = 0; i < parent_.size(); ++i)
      if (written_[i]) written_[find(i)] = true;
  }

  /// The class of `v` (values that may share memory have the same class).
  [[nodiscard]] std::size_t class_of(value v) const { return find(index_.at(v.impl())); }
  [[nodiscard]] std::size_t size() const noexcept { return parent_.size(); }
  /// Whether some call writes to `v`'s memory (or to a value that shares it).
  [[nodiscard]] bool written(value v) const { return written_[class_of(v)]; }
  /// Whether the graph writes to anything at all.
  [[nodiscard]] bool any_written() const {
    for (std::size_t i = 0; i < parent_.size(); ++i)
      if (written_[i]) return true;
    return false;
  }

  /// The values call `n` writes: the arguments its schema marks `(a!)`, and a training-mode
  /// batch_norm's running statistics.
  [[nodiscard]] static std::vector<value> writes(const node& n) {
    std::vector<value> out;
    if (!n.is_call() || n.op().higher_order) return out;
    const auto args = n.args();
    if (detail::is_batch_norm_op(n.op().name) && args.size() > 5 && args[5].is_bool() && args[5].as_bool())
      for (std::size_t i : {3, 4}) args[i].for_each_value([&](const value& v) { out.push_back(v); });
    if (!n.op().is_mutable) return out;
    const auto& params = n.op().schema().arguments();
    for (std::size_t i = 0; i < args.size() && i < params.size(); ++i)
      if (const auto* a = params[i].alias_info(); a && a->isWrite())
        args[i].for_each_value([&](const value& v) { out.push_back(v); });
    return out;
  }

 private:
  std::size_t index_of(value v) {
    const auto [it, fresh] = index_.try_emplace(v.impl(), parent_.size());
    if (fresh) {
      parent_.push_back(parent_.size());
      written_.push_back(false);
    }
    return it->second;
  }
  std::size_t find(std::size_t i) const {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void unite(std::size_t a, std::size_t b) {
    a = find(a);
    b = find(b);
    if (a != b) parent_[b] = a;
  }
  // outputs that alias an argument (the same alias set in the schema: a view, an in-place op's
  // result) join its class; a higher-order call's outputs are fresh (its subgraphs copy)
  void join_aliases(const node& n) {
    if (n.op().higher_order) return;
    const auto& schema = n.op().schema();
    const auto& params = schema.arguments();
    const auto& rets = schema.returns();
    const auto args = n.args();
    for (std::size_t r = 0; r < rets.size() && r < n.num_outputs(); ++r) {
      const auto* ra = rets[r].alias_info();
      if (!ra) continue;
      for (std::size_t i = 0; i < args.size() && i < params.size(); ++i) {
        const auto* pa = params[i].alias_info();
        if (!pa) continue;
        bool shared = false;
        for (const auto& s : ra->beforeSets())
          for (const auto& t : pa->beforeSets()) shared = shared || s == t;
        if (shared) args[i].for_each_value([&](const value& v) { unite(index_of(v), index_of(n.output(r))); });
      }
    }
  }

  std::unordered_map<const void*, std::size_t> index_;
  mutable std::vector<std::size_t> parent_;
  std::vector<bool> written_;
};

XPORT_END_NAMESPACE
