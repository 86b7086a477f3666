// xport/trace/control_flow.hpp: xport::cond, xport::while_loop, xport::map and xport::scan:
// torch.cond, torch.while_loop, torch.map and torch.scan for C++ code; xport::no_grad and
// xport::enable_grad, torch's grad-mode blocks, captured as torch.export captures them. The same call runs eagerly
// (the branch the predicate picks), under non-strict export (at::Tensor code) and under strict
// export (xport::sym_tensor code); exported, both branches are captured as subgraphs
// (`true_graph_0`, `false_graph_0`) of one `torch.ops.higher_order.cond` node.
//
//   auto y = xport::cond(x.sum() > 0,
//                        [&](const at::Tensor& x) { return lin(x).relu(); },  // may read module state
//                        [](const at::Tensor& x) { return x.cos(); },
//                        std::tuple{x});
//
// torch's rules: the predicate is a bool tensor of one element (a C++ bool is a constant: the
// branch it picks is traced alone, as torch specializes a Python bool); both branches take the
// operands and return the same structure of tensors with the same dtypes and shapes; a branch
// mutates nothing and returns no input as it is. Tensors a branch reads without being passed
// them (module parameters and buffers, tensors computed before the call) become operands, as
// torch lifts a branch's free variables, after the operands given (module state by FQN, then
// the rest in the order first read); operands neither branch reads are dropped, as torch does.
// xport::while_loop follows the same rules for its cond_fn and body_fn: what they lift becomes
// the node's additional_inputs; xport::map's body gets one row of xs, and what it lifts joins
// its pos_args; xport::scan's combine function gets the carry and one row of xs, and what it
// lifts becomes its additional_inputs.
#pragma once

#include <algorithm>    // std::find
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <functional>   // std::function
#include <initializer_list>  // std::initializer_list
#include <memory>       // std::shared_ptr
#include <optional>     // std::optional
#include <source_location>  // std::source_location
#include <string>       // std::string
#include <tuple>        // std::tuple, std::apply
#include <type_traits>  // std::is_same_v
#include <unordered_map>  // std::unordered_map
#include <utility>      // std::move, std::pair, std::forward
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/ops/stack.h>
#include <c10/core/GradMode.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>
#include <xport/ops/autocast.hpp>
#include <xport/ops/higher_order.hpp>
#include <xport/ops/meta_infer.hpp>
#include <xport/program/verify.hpp>
#include <xport/trace/capture.hpp>
#include <xport/trace/strict.hpp>
#include <xport/trace/tree.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Traces one branch in a subgraph capture: gets the capture, its inputs for the operands and
/// their meta tensors; returns the values it returns.
using branch_tracer = std::function<std::vector<value>(capture&, const std::vector<value>&, const std::vector<at::Tensor>&)>;

struct traced_branch {
  graph body;
  std::vector<value> lifted;  ///< enclosing capture's values it reads: module state by FQN, then first read
  std::vector<value> inputs;  ///< its placeholder for each of `lifted`, in the same order
};

/// The operands in [rows.first, rows.second) are torch.map's or torch.scan's xs: the branch gets
/// one row of each. `by_fqn`: the lifted values ordered as dynamo lifts a branch's free variables
/// (module state by FQN first); else in the order first read, as torch's split of a graph
/// around a grad-mode region orders its submodule's inputs.
inline traced_branch trace_branch(capture& outer, const std::vector<value>& operands, const branch_tracer& trace,
                                  std::pair<std::size_t, std::size_t> rows = {0, 0}, bool by_fqn = true) {
  capture c(outer);
  std::vector<value> ins;
  std::vector<at::Tensor> metas;
  for (const auto& o : operands) {
    const bool row = ins.size() >= rows.first && ins.size() < rows.second;
    auto [v, m] = row ? c.add_row_operand(o) : c.add_operand(o);
    ins.push_back(v);
    metas.push_back(std::move(m));
  }
  for (auto v : trace(c, ins, metas)) c.builder().output(v);
  traced_branch b;
  // torch orders a branch's free variables by their Python names (a module's state by its
  // path): module state first, by FQN, then the other tensors in the order first read
  std::vector<std::pair<std::string, value>> lifted;
  for (const auto& o : c.lifted()) lifted.emplace_back(outer.state_name(o), o);
  if (by_fqn) std::stable_sort(lifted.begin(), lifted.end(), [](const auto& x, const auto& y) {
    if (x.first.empty() != y.first.empty()) return !x.first.empty();
    return x.first < y.first;
  });
  // the inputs keep their graph identity through build (placeholders are moved, not copied)
  for (const auto& [fqn, o] : lifted) {
    b.lifted.push_back(o);
    b.inputs.push_back(c.input_for(o));
  }
  auto p = std::move(c.builder()).build(ir_dialect::training, verify_options{.check_schemas = false});
  std::unordered_map<value_impl*, value> map;
  b.body = p.graph().clone(&map);
  for (auto& v : b.inputs) v = map.at(v.impl());
  return b;
}

/// Gives branch `b` one input per value of `all` after the first `n_operands` (in that order):
/// those it lifted keep theirs, the others (lifted by the other branch) get an unused one.
inline void align_inputs(traced_branch& b, std::size_t n_operands, const std::vector<value>& all) {
  auto& g = b.body;
  const auto phs = g.placeholders();
  std::vector<node> order(phs.begin(), phs.begin() + static_cast<std::ptrdiff_t>(n_operands));
  for (std::size_t i = n_operands; i < all.size(); ++i) {
    value in;
    for (std::size_t j = 0; j < b.lifted.size(); ++j)
      if (b.lifted[j] == all[i]) in = b.inputs[j];
    if (!in) in = g.add_placeholder_fresh(all[i].name(), all[i].type());
    order.push_back(in.producer());
  }
  const node first = g.placeholders().back().next();
  for (auto& ph : order) g.move_before(ph, first);
}

/// Drops the operands from the `first` on that neither subgraph reads (torch passes only what
/// a subgraph uses; while_loop keeps every carried input).
inline void drop_unused_operands(graph& t, graph& f, std::vector<value>& operands, std::size_t first = 0) {
  const auto pt = t.placeholders(), pf = f.placeholders();
  std::vector<value> kept;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    if (i < first || pt[i].output(0).num_uses() || pf[i].output(0).num_uses()) {
      kept.push_back(operands[i]);
      continue;
    }
    t.erase(pt[i]);
    f.erase(pf[i]);
  }
  operands = std::move(kept);
}

/// Appends to `operands` the values the subgraphs lift (the first's, then each next one's new
/// ones) and gives each one input for every one of them, in that order.
inline void lift_free_values(std::initializer_list<traced_branch*> branches, std::vector<value>& operands) {
  const std::size_t n = operands.size();
  for (const auto* s : branches)
    for (const auto& v : s->lifted)
      if (std::find(operands.begin() + static_cast<std::ptrdiff_t>(n), operands.end(), v) == operands.end())
        operands.push_back(v);
  for (auto* s : branches) align_inputs(*s, n, operands);
}

/// Names a subgraph's inputs arg<i>_1, as torch's while_loop and scan do.
inline void name_inputs_as_torch(graph& g) {
  const auto phs = g.placeholders();
  for (std::size_t i = 0; i < phs.size(); ++i) g.rename(phs[i].output(0), "arg" + std::to_string(i) + "_1");
}

struct traced_cond {
  node n;
  std::vector<at::Tensor> metas;  ///< the meta tensor tracking each output
};

/// Records control-flow operator `op_name` on `args` in `outer`, at `src` (strict), its outputs
/// typed by its subgraphs, and checks it by torch's rules for that operator.
inline traced_cond record_control_flow(capture& outer, const char* op_name, std::vector<argument> args,
                                       std::shared_ptr<const source_location> src, bool tuple_operands) {
  const auto& op = find_op(op_name);
  auto types = subgraph_outputs(op, args);
  if (src) outer.builder().at(std::move(src));
  traced_cond r;
  r.metas = outer.record_values(op, std::move(args), std::move(types), &r.n);
  r.n.set_tuple_operands(tuple_operands);  // as torch.export records the call it traced
  verify_higher_order(r.n, verify_options{.check_schemas = false});
  return r;
}

/// Records `higher_order::cond(pred, true_graph_<i>, false_graph_<i>, operands + lifted)` in
/// `outer` after tracing both branches, at `src` (strict) and checks it as torch.cond does.
inline traced_cond trace_cond(capture& outer, argument pred, std::vector<value> operands, const branch_tracer& on_true,
                              const branch_tracer& on_false, std::shared_ptr<const source_location> src = nullptr) {
  auto t = trace_branch(outer, operands, on_true);
  auto f = trace_branch(outer, operands, on_false);
  lift_free_values({&t, &f}, operands);
  drop_unused_operands(t.body, f.body, operands);
  const auto index = std::to_string(outer.next_subgraph_index("cond"));
  argument::list_type list(operands.begin(), operands.end());
  std::vector<argument> args{std::move(pred),
                             std::make_shared<const subgraph>(subgraph{"true_graph_" + index, std::move(t.body)}),
                             std::make_shared<const subgraph>(subgraph{"false_graph_" + index, std::move(f.body)}),
                             std::move(list)};
  return record_control_flow(outer, "higher_order::cond", std::move(args), std::move(src), true);
}

/// Records `higher_order::while_loop(while_loop_cond_graph_<i>, while_loop_body_graph_<i>,
/// carried, additional)` in `outer` after tracing cond_fn and body_fn on the carried values (the
/// values they lift become the additional inputs), at `src` (strict), and checks it as
/// torch.while_loop does.
inline traced_cond trace_while_loop(capture& outer, std::vector<value> carried, const branch_tracer& cond_fn,
                                    const branch_tracer& body_fn, std::shared_ptr<const source_location> src = nullptr) {
  auto c = trace_branch(outer, carried, cond_fn);
  auto b = trace_branch(outer, carried, body_fn);
  const std::size_t n = carried.size();
  lift_free_values({&c, &b}, carried);
  drop_unused_operands(c.body, b.body, carried, n);
  name_inputs_as_torch(c.body);
  name_inputs_as_torch(b.body);
  c.body.set_returns_bare(true);  // torch's cond_fn returns its bool tensor bare
  const auto index = std::to_string(outer.next_subgraph_index("while_loop"));
  argument::list_type additional(carried.begin() + static_cast<std::ptrdiff_t>(n), carried.end());
  carried.resize(n);
  std::vector<argument> args{
      std::make_shared<const subgraph>(subgraph{"while_loop_cond_graph_" + index, std::move(c.body)}),
      std::make_shared<const subgraph>(subgraph{"while_loop_body_graph_" + index, std::move(b.body)}),
      argument::list_type(carried.begin(), carried.end()), std::move(additional)};
  return record_control_flow(outer, "higher_order::while_loop", std::move(args), std::move(src), true);
}

/// Records `higher_order::map_impl(body_graph_<i>, xs, pos_args)` in `outer` after tracing the
/// body on one row of each of the `xs` and on `pos_args` (what it lifts is appended to them),
/// at `src` (strict), and checks it as torch.map does.
inline traced_cond trace_map(capture& outer, std::vector<value> xs, std::vector<value> pos_args, const branch_tracer& body_fn,
                             std::shared_ptr<const source_location> src = nullptr) {
  std::vector<value> operands = xs;
  operands.insert(operands.end(), pos_args.begin(), pos_args.end());
  auto b = trace_branch(outer, operands, body_fn, {0, xs.size()});
  lift_free_values({&b}, operands);
  const auto index = std::to_string(outer.next_subgraph_index("map"));
  std::vector<argument> args{std::make_shared<const subgraph>(subgraph{"body_graph_" + index, std::move(b.body)}),
                             argument::list_type(xs.begin(), xs.end()),
                             argument::list_type(operands.begin() + static_cast<std::ptrdiff_t>(xs.size()), operands.end())};
  // torch prints map's lists as lists
  return record_control_flow(outer, "higher_order::map_impl", std::move(args), std::move(src), false);
}

/// Records `higher_order::scan(scan_combine_graph_<i>, init, xs, additional)` in `outer` after
/// tracing the combine function on the carries `init` and one row of each of the `xs` (the values
/// it lifts become the additional inputs), at `src` (strict), and checks it as torch.scan does.
inline traced_cond trace_scan(capture& outer, std::vector<value> init, std::vector<value> xs, const branch_tracer& combine_fn,
                              std::shared_ptr<const source_location> src = nullptr) {
  std::vector<value> operands = init;
  operands.insert(operands.end(), xs.begin(), xs.end());
  auto b = trace_branch(outer, operands, combine_fn, {init.size(), init.size() + xs.size()});
  lift_free_values({&b}, operands);
  name_inputs_as_torch(b.body);
  b.body.set_returns_list(true);  // torch's combine graph returns a list
  const auto index = std::to_string(outer.next_subgraph_index("scan"));
  std::vector<argument> args{std::make_shared<const subgraph>(subgraph{"scan_combine_graph_" + index, std::move(b.body)}),
                             argument::list_type(init.begin(), init.end()), argument::list_type(xs.begin(), xs.end()),
                             argument::list_type(operands.begin() + static_cast<std::ptrdiff_t>(init.size() + xs.size()),
                                                 operands.end())};
  // torch prints init and xs as lists, the additional inputs as a tuple
  return record_control_flow(outer, "higher_order::scan", std::move(args), std::move(src), true);
}

/// Records `higher_order::wrap_with_set_grad_enabled(enabled, submod_<k>, *operands)` in `outer`
/// after tracing `body` on the operands under that grad mode (what it lifts is appended to them),
/// as torch.export records a `with torch.no_grad():` block of the training IR. torch names the
/// region's submodule by the split around it (submod_0 before, submod_1 the region, ...): the
/// i-th region of a graph is submod_<2i+1>.
inline traced_cond trace_set_grad_enabled(capture& outer, bool enabled, std::vector<value> operands, const branch_tracer& body) {
  auto b = trace_branch(outer, operands, body, {0, 0}, /*by_fqn=*/false);
  lift_free_values({&b}, operands);
  const auto index = std::to_string(2 * outer.next_subgraph_index("submod") + 1);
  std::vector<argument> args{enabled, std::make_shared<const subgraph>(subgraph{"submod_" + index, std::move(b.body)}),
                             argument::list_type(operands.begin(), operands.end())};
  return record_control_flow(outer, "higher_order::wrap_with_set_grad_enabled", std::move(args), nullptr, true);
}

/// Records `higher_order::wrap_with_autocast(device_type, dtype, enabled, False, submod_<k>,
/// *operands)` in `outer` after tracing `body` on the operands under that autocast state, as
/// torch.export records a `with torch.autocast(...):` block of the training IR: the body's calls
/// as written, typed as autocast computes them (Note [Autocast by probe]); torch writes the cache
/// off, as tracing runs it. Regions are numbered as set_grad_enabled's are (one split).
inline traced_cond trace_autocast(capture& outer, c10::DeviceType device, c10::ScalarType dtype, bool enabled,
                                  std::vector<value> operands, const branch_tracer& body) {
  auto b = trace_branch(outer, operands, body, {0, 0}, /*by_fqn=*/false);
  lift_free_values({&b}, operands);
  const auto index = std::to_string(2 * outer.next_subgraph_index("submod") + 1);
  std::vector<argument> args{std::string(c10::DeviceTypeName(device, /*lower_case=*/true)),
                             dtype,
                             enabled,
                             false,
                             std::make_shared<const subgraph>(subgraph{"submod_" + index, std::move(b.body)}),
                             argument::list_type(operands.begin(), operands.end())};
  return record_control_flow(outer, "higher_order::wrap_with_autocast", std::move(args), nullptr, true);
}

/// Traces `fn(operands...)` as the body of a block under a mode (grad mode, autocast):
/// `under_mode(call)` runs `call` in the mode, `record(operand values, body tracer)` records the
/// block's node in `outer`. Returns `fn`'s result (type R) with the node's outputs in its place.
template <class R, class Fn, class Operands, class UnderMode, class Record>
R trace_mode_block(capture& outer, Fn& fn, const Operands& operands, UnderMode&& under_mode, Record&& record) {
  std::vector<value> operand_values;
  auto of = [&](const at::Tensor& t) { operand_values.push_back(outer.value_of(t)); };
  (void)flatten_into(operands, of);
  std::optional<R> result;
  const branch_tracer body = [&](capture& c, const std::vector<value>&, const std::vector<at::Tensor>& metas) {
    std::size_t k = 0;
    auto to_meta = [&](const at::Tensor&) { return metas.at(k++); };
    const auto args = map_tensors(operands, to_meta);
    {
      capture_scope scope(c);
      under_mode([&] { result.emplace(std::apply(fn, args)); });
    }
    std::vector<value> outs;
    auto out = [&](const at::Tensor& t) { outs.push_back(c.value_of(t)); };
    (void)flatten_into(*result, out);
    return outs;
  };
  const auto r = record(std::move(operand_values), body);
  std::size_t k = 0;
  auto from_node = [&](const at::Tensor&) { return r.metas.at(k++); };
  return map_tensors(*result, from_node);
}

/// Makes the strict front end record into a branch's capture for the guard's lifetime.
class strict_branch_scope {
 public:
  explicit strict_branch_scope(capture& c) : prev_(strict_branch) { strict_branch = &c; }
  ~strict_branch_scope() { strict_branch = prev_; }
  strict_branch_scope(const strict_branch_scope&) = delete;
  strict_branch_scope& operator=(const strict_branch_scope&) = delete;

 private:
  capture* prev_;
};

/// trace_mode_block for strict code (xport::sym_tensor operands, at least one): the block is
/// traced on sym_tensors, its nodes with their C++ lines; `record(outer, operand values, body
/// tracer)` records the block's node.
template <class R, class Fn, class Operands, class UnderMode, class Record>
R trace_strict_mode_block(Fn& fn, const Operands& operands, UnderMode&& under_mode, Record&& record) {
  capture* owner = nullptr;
  auto first = [&](const sym_tensor& t) {
    if (!owner) owner = &t.owner();
  };
  (void)flatten_into(operands, first);
  auto& outer = recording_capture(*owner);
  std::vector<value> operand_values;
  auto of = [&](const sym_tensor& t) { operand_values.push_back(outer.local_value(t.graph_value())); };
  (void)flatten_into(operands, of);
  std::optional<R> result;
  const branch_tracer body = [&](capture& c, const std::vector<value>& ins, const std::vector<at::Tensor>&) {
    strict_branch_scope scope(c);
    std::size_t k = 0;
    auto to_sym = [&](const sym_tensor&) { return sym_tensor(ins.at(k++), &c); };
    const auto args = map_tensors(operands, to_sym);
    under_mode([&] { result.emplace(std::apply(fn, args)); });
    std::vector<value> outs;
    auto out = [&](const sym_tensor& t) { outs.push_back(c.local_value(t.graph_value())); };
    (void)flatten_into(*result, out);
    return outs;
  };
  const auto r = record(outer, std::move(operand_values), body);
  std::size_t k = 0;
  auto from_node = [&](const sym_tensor&) { return sym_tensor(r.n.output(k++), &outer); };
  return map_tensors(*result, from_node);
}

template <class T>
inline constexpr bool is_std_tuple = false;
template <class... Ts>
inline constexpr bool is_std_tuple<std::tuple<Ts...>> = true;

template <class TrueFn, class FalseFn, class Operands>
void check_branches() {
  static_assert(is_std_tuple<Operands>,
                "xport::cond: pass the operands as a std::tuple (std::tuple{x, y}); each branch is called "
                "with them as its arguments, as torch.cond calls true_fn(*operands)");
  using R = decltype(std::apply(std::declval<TrueFn&>(), std::declval<const Operands&>()));
  static_assert(std::is_same_v<R, decltype(std::apply(std::declval<FalseFn&>(), std::declval<const Operands&>()))>,
                "xport::cond: both branches must return the same type (torch.cond: the branches return the "
                "same structure of tensors)");
}

/// Whether `Carried` is a std::tuple of `Tensor`s (and not empty).
template <class Carried, class Tensor>
struct carries : std::false_type {};
template <class Tensor, class T, class... Ts>
struct carries<std::tuple<T, Ts...>, Tensor>
    : std::bool_constant<std::is_same_v<T, Tensor> && (std::is_same_v<Ts, Tensor> && ...)> {};

template <class CondFn, class BodyFn, class Carried, class Tensor>
void check_loop_fns() {
  static_assert(is_std_tuple<Carried>,
                "xport::while_loop: pass the carried values as a std::tuple (std::tuple{i, x}); cond_fn and body_fn "
                "are called with them as their arguments, as torch.while_loop calls body_fn(*carried_inputs)");
  static_assert(carries<Carried, Tensor>::value,
                "xport::while_loop: the carried values are tensors (carry a count as a 0-d tensor: "
                "at::zeros({}, at::kLong)); torch would carry an int as an unbacked SymInt");
  static_assert(std::is_same_v<decltype(std::apply(std::declval<CondFn&>(), std::declval<const Carried&>())), Tensor>,
                "xport::while_loop: cond_fn returns a bool tensor of one element (i < n), as torch.while_loop's does");
  static_assert(std::is_same_v<decltype(std::apply(std::declval<BodyFn&>(), std::declval<const Carried&>())), Carried>,
                "xport::while_loop: body_fn returns what is carried, the same std::tuple type (torch.while_loop: "
                "body_fn returns the same structure as carried_inputs)");
}

/// torch.while_loop's rule for what cond_fn returns, checked eagerly.
inline bool loop_predicate(const at::Tensor& p) {
  if (!p.defined() || p.dim() != 0 || p.scalar_type() != at::kBool)
    throw error("xport.while_loop.pred", "cond_fn must return a boolean scalar tensor or a boolean but got " +
                                             (p.defined() ? "a tensor of sizes " + c10::str(p.sizes()) + " and dtype " +
                                                                std::string(c10::toString(p.scalar_type()))
                                                          : std::string("an undefined tensor")) +
                                             ": return a comparison of a 0-d tensor (i.lt(n)), or reduce one (x.sum() < 10)");
  return p.item<bool>();
}

/// What xport::map's function returns: a tensor, or a std::tuple of them.
template <class R, class Tensor>
inline constexpr bool map_result = std::is_same_v<R, Tensor> || carries<R, Tensor>::value;

template <class Fn, class Tensor, class Xs, class Args>
void check_map_fn() {
  static_assert(is_std_tuple<Args>, "xport::map: pass the other arguments as a std::tuple (std::tuple{y}); fn is "
                                    "called with a row of xs and them, as torch.map calls f(x, *args)");
  using R = decltype(std::apply(std::declval<Fn&>(), std::tuple_cat(std::declval<std::tuple<Xs>>(), std::declval<const Args&>())));
  static_assert(map_result<R, Tensor>, "xport::map: fn returns a tensor or a std::tuple of tensors (torch.map stacks "
                                       "each along a new leading dim)");
}

/// Whether R is what torch.scan's combine_fn returns for carry type `Init`: a pair (as a
/// std::tuple or std::pair) of the next carry, of Init's type, and the y of this step.
template <class R, class Init>
struct scan_step : std::false_type {};
template <class Init, class Y>
struct scan_step<std::tuple<Init, Y>, Init> : std::true_type {};
template <class Init, class Y>
struct scan_step<std::pair<Init, Y>, Init> : std::true_type {};

/// Whether the tree type T holds xport::sym_tensor leaves (strict code).
template <class T>
struct has_sym_leaves : std::is_same<T, sym_tensor> {};
template <class... Ts>
struct has_sym_leaves<std::tuple<Ts...>> : std::disjunction<has_sym_leaves<Ts>...> {};
template <class A, class B>
struct has_sym_leaves<std::pair<A, B>> : std::disjunction<has_sym_leaves<A>, has_sym_leaves<B>> {};
template <class T, class A>
struct has_sym_leaves<std::vector<T, A>> : has_sym_leaves<T> {};
template <class T>
inline constexpr bool is_sym_tree = has_sym_leaves<T>::value;

template <class Fn, class Init, class Xs>
void check_scan_fn() {
  using R = decltype(std::declval<Fn&>()(std::declval<const Init&>(), std::declval<const Xs&>()));
  static_assert(scan_step<R, Init>::value,
                "xport::scan: combine_fn(carry, x) returns std::tuple{next_carry, y}, next_carry of init's type "
                "(torch.scan: combine_fn returns a tuple (next_carry, y))");
}

/// torch.scan's dim: in [-ndim, ndim) of the first xs leaf, as a non-negative index.
inline std::int64_t scan_dim(std::int64_t dim, std::int64_t ndim) {
  if (ndim == 0 || dim < -ndim || dim >= ndim)
    throw error("xport.scan.dim", "All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0 "
                                  "(dim " + std::to_string(dim) + " of a tensor of " + std::to_string(ndim) + " dims)");
  return dim < 0 ? dim + ndim : dim;
}

/// torch.scan's rule, checked eagerly: combine_fn returns a carry with init's metadata.
inline void check_carry(const std::vector<at::Tensor>& init, const std::vector<at::Tensor>& carry) {
  if (init.size() != carry.size())
    throw error("xport.scan.carry", "Expected init and carry to have same number of outputs but got " +
                                        std::to_string(init.size()) + " and " + std::to_string(carry.size()));
  for (std::size_t i = 0; i < init.size(); ++i)
    if (init[i].scalar_type() != carry[i].scalar_type() || init[i].sizes() != carry[i].sizes() ||
        init[i].device() != carry[i].device())
      throw error("xport.scan.carry", "Expected init and carry to have same metadata but found: pair[" + std::to_string(i) +
                                          "] differ, where init is " + std::string(c10::toString(init[i].scalar_type())) +
                                          c10::str(init[i].sizes()) + " and carry is " +
                                          std::string(c10::toString(carry[i].scalar_type())) + c10::str(carry[i].sizes()) +
                                          ": combine_fn must return the next carry with init's dtype, shape and device");
}

template <class T>
std::vector<at::Tensor> leaves_of(const T& x) {
  std::vector<at::Tensor> out;
  auto push = [&](const at::Tensor& t) { out.push_back(t); };
  (void)flatten_into(x, push);
  return out;
}

[[noreturn]] inline void throw_pred_shape(const std::string& got) {
  throw error("xport.cond.pred", "Expected pred to be bool or single-element tensor, but got " + got +
                                     ": xport::cond takes a bool tensor of one element (x.sum() > 0) or a C++ bool");
}

}  // namespace detail

/// torch.cond for at::Tensor code: `true_fn(operands...)` if `pred` holds true, else
/// `false_fn(operands...)`. Eagerly it runs the branch `pred` picks; under export (non-strict) it
/// records both as subgraphs of one torch.ops.higher_order.cond node.
template <class TrueFn, class FalseFn, class Operands>
auto cond(const at::Tensor& pred, TrueFn&& true_fn, FalseFn&& false_fn, const Operands& operands) {
  detail::check_branches<TrueFn, FalseFn, Operands>();
  using R = decltype(std::apply(true_fn, operands));
  if (!pred.defined() || pred.numel() != 1)
    detail::throw_pred_shape(pred.defined() ? "a tensor of sizes " + c10::str(pred.sizes()) : "an undefined tensor");
  auto* outer = detail::active_capture;
  if (!outer) return pred.item<bool>() ? std::apply(true_fn, operands) : std::apply(false_fn, operands);
  std::vector<value> operand_values;
  auto of = [&](const at::Tensor& t) { operand_values.push_back(outer->value_of(t)); };
  (void)detail::flatten_into(operands, of);
  std::optional<R> result;
  const auto tracer = [&](auto& fn, bool keep) -> detail::branch_tracer {
    return [&fn, &operands, &result, keep](detail::capture& c, const std::vector<value>&,
                                           const std::vector<at::Tensor>& metas) {
      std::size_t k = 0;
      auto to_meta = [&](const at::Tensor&) { return metas.at(k++); };
      const auto args = detail::map_tensors(operands, to_meta);
      std::optional<R> r;
      {
        detail::capture_scope scope(c);
        r.emplace(std::apply(fn, args));
      }
      std::vector<value> outs;
      auto out = [&](const at::Tensor& t) { outs.push_back(c.value_of(t)); };
      (void)detail::flatten_into(*r, out);
      if (keep) result = std::move(r);
      return outs;
    };
  };
  const auto c = detail::trace_cond(*outer, outer->value_of(pred), std::move(operand_values), tracer(true_fn, true),
                                    tracer(false_fn, false));
  std::size_t k = 0;
  auto from_node = [&](const at::Tensor&) { return c.metas.at(k++); };
  return detail::map_tensors(*result, from_node);
}

/// torch.cond for strict code (xport::sym_tensor): both branches are traced, and the node
/// records the C++ line of the call.
template <class TrueFn, class FalseFn, class Operands>
auto cond(const sym_tensor& pred, TrueFn&& true_fn, FalseFn&& false_fn, const Operands& operands,
          const std::source_location& loc = std::source_location::current()) {
  detail::check_branches<TrueFn, FalseFn, Operands>();
  using R = decltype(std::apply(true_fn, operands));
  auto& outer = detail::recording_capture(pred.owner());
  std::vector<value> operand_values;
  auto of = [&](const sym_tensor& t) { operand_values.push_back(outer.local_value(t.graph_value())); };
  (void)detail::flatten_into(operands, of);
  std::optional<R> result;
  const auto tracer = [&](auto& fn, bool keep) -> detail::branch_tracer {
    return [&fn, &operands, &result, keep](detail::capture& c, const std::vector<value>& ins,
                                           const std::vector<at::Tensor>&) {
      detail::strict_branch_scope scope(c);
      std::size_t k = 0;
      auto to_sym = [&](const sym_tensor&) { return sym_tensor(ins.at(k++), &c); };
      const auto args = detail::map_tensors(operands, to_sym);
      std::optional<R> r(std::apply(fn, args));
      std::vector<value> outs;
      auto out = [&](const sym_tensor& t) { outs.push_back(c.local_value(t.graph_value())); };
      (void)detail::flatten_into(*r, out);
      if (keep) result = std::move(r);
      return outs;
    };
  };
  const auto c = detail::trace_cond(outer, outer.local_value(pred.graph_value()), std::move(operand_values),
                                    tracer(true_fn, true), tracer(false_fn, false), detail::make_source(loc));
  std::size_t k = 0;
  auto from_node = [&](const sym_tensor&) { return sym_tensor(c.n.output(k++), &outer); };
  return detail::map_tensors(*result, from_node);
}

/// torch.cond with a C++ bool: a constant, so only the branch it picks runs (and is traced),
/// as torch specializes a Python bool predicate.
template <class Pred, class TrueFn, class FalseFn, class Operands>
  requires std::is_same_v<Pred, bool>
auto cond(Pred pred, TrueFn&& true_fn, FalseFn&& false_fn, const Operands& operands) {
  detail::check_branches<TrueFn, FalseFn, Operands>();
  return pred ? std::apply(true_fn, operands) : std::apply(false_fn, operands);
}

/// `with torch.set_grad_enabled(enabled):` for a block of at::Tensor code: `fn(operands...)` with
/// autograd on or off. Eagerly it runs under c10::AutoGradMode; under export (non-strict), where
/// it changes the grad mode, `fn` is captured as the body of one
/// torch.ops.higher_order.wrap_with_set_grad_enabled node, as torch.export captures the block
/// (where the mode stays as it is, its calls are recorded inline, as torch records them).
/// Tensors `fn` reads without being passed them (module parameters, computed tensors) become
/// operands, as for xport::cond. Returns what `fn` returns (tensors, or a std::tuple of them).
///
///   auto y = xport::no_grad([&](const at::Tensor& x) { return rotary(x); }, std::tuple{x});
template <class Fn, class Operands>
auto set_grad_enabled(bool enabled, Fn&& fn, const Operands& operands) {
  static_assert(detail::is_std_tuple<Operands>, "xport::no_grad: pass the operands as a std::tuple (std::tuple{x, y}); "
                                                "fn is called with them as its arguments");
  using R = decltype(std::apply(fn, operands));
  auto* outer = detail::active_capture;
  if (!outer || c10::GradMode::is_enabled() == enabled) {
    const c10::AutoGradMode mode(enabled);
    return std::apply(fn, operands);
  }
  return detail::trace_mode_block<R>(
      *outer, fn, operands, [&](auto&& call) { const c10::AutoGradMode mode(enabled); call(); },
      [&](std::vector<value> values, const detail::branch_tracer& body) {
        return detail::trace_set_grad_enabled(*outer, enabled, std::move(values), body);
      });
}

/// `with torch.autocast(device_type, dtype):` for a block of at::Tensor code: `fn(operands...)`
/// with autocast on for `device` (at::kCPU or at::kCUDA) in `dtype` (`enabled` false: off).
/// Eagerly it runs under LibTorch's autocast; under export (non-strict) `fn` is captured as the
/// body of one torch.ops.higher_order.wrap_with_autocast node, its calls as written and typed as
/// autocast computes them, as torch.export captures the block: the program runs it under
/// autocast, and run_decompositions() records autocast's casts as torch's lowering does.
/// Tensors `fn` reads without being passed them become operands, as for xport::cond. Returns
/// what `fn` returns (tensors, or a std::tuple of them).
///
///   auto y = xport::autocast(at::kCPU, at::kBFloat16, [&](const at::Tensor& x) { return mlp(x); },
///                            std::tuple{x});
template <class Fn, class Operands>
auto autocast(c10::DeviceType device, c10::ScalarType dtype, Fn&& fn, const Operands& operands, bool enabled = true) {
  static_assert(detail::is_std_tuple<Operands>, "xport::autocast: pass the operands as a std::tuple (std::tuple{x, "
                                                "y}); fn is called with them as its arguments");
  using R = decltype(std::apply(fn, operands));
  auto* outer = detail::active_capture;
  if (!outer) {
    const detail::autocast_scope mode(device, dtype, enabled, -1);
    return std::apply(fn, operands);
  }
  return detail::trace_mode_block<R>(
      *outer, fn, operands,
      [&](auto&& call) {
        const detail::autocast_scope mode(device, dtype, enabled, -1);
        const detail::autocast_emulation typed(true);
        call();
      },
      [&](std::vector<value> values, const detail::branch_tracer& body) {
        return detail::trace_autocast(*outer, device, dtype, enabled, std::move(values), body);
      });
}

/// xport::autocast for strict code (xport::sym_tensor operands): the block traced on sym_tensors
/// into the same wrap_with_autocast node, its nodes typed as autocast computes them.
template <class Fn, class Operands>
  requires detail::is_sym_tree<Operands>
auto autocast(c10::DeviceType device, c10::ScalarType dtype, Fn&& fn, const Operands& operands, bool enabled = true) {
  static_assert(detail::is_std_tuple<Operands>, "xport::autocast: pass the operands as a std::tuple (std::tuple{x, "
                                                "y}); fn is called with them as its arguments");
  using R = decltype(std::apply(fn, operands));
  return detail::trace_strict_mode_block<R>(
      fn, operands,
      [&](auto&& call) {
        const detail::autocast_scope mode(device, dtype, enabled, -1);
        const detail::autocast_emulation typed(true);
        call();
      },
      [&](detail::capture& outer, std::vector<value> values, const detail::branch_tracer& body) {
        return detail::trace_autocast(outer, device, dtype, enabled, std::move(values), body);
      });
}

/// `with torch.set_grad_enabled(enabled):` for strict code (xport::sym_tensor operands): the block
/// is traced on sym_tensors into the same wrap_with_set_grad_enabled node, its nodes with their C++
/// lines (where the mode stays as it is, its calls are recorded inline, as torch records them).
template <class Fn, class Operands>
  requires detail::is_sym_tree<Operands>
auto set_grad_enabled(bool enabled, Fn&& fn, const Operands& operands) {
  static_assert(detail::is_std_tuple<Operands>, "xport::no_grad: pass the operands as a std::tuple (std::tuple{x, y}); "
                                                "fn is called with them as its arguments");
  using R = decltype(std::apply(fn, operands));
  if (c10::GradMode::is_enabled() == enabled) {
    const c10::AutoGradMode mode(enabled);
    return std::apply(fn, operands);
  }
  return detail::trace_strict_mode_block<R>(
      fn, operands, [&](auto&& call) { const c10::AutoGradMode mode(enabled); call(); },
      [&](detail::capture& outer, std::vector<value> values, const detail::branch_tracer& body) {
        return detail::trace_set_grad_enabled(outer, enabled, std::move(values), body);
      });
}

/// `with torch.no_grad():` for a block of at::Tensor code (see set_grad_enabled).
template <class Fn, class Operands>
auto no_grad(Fn&& fn, const Operands& operands) {
  return set_grad_enabled(false, std::forward<Fn>(fn), operands);
}

/// `with torch.enable_grad():` for a block of at::Tensor code (see set_grad_enabled).
template <class Fn, class Operands>
auto enable_grad(Fn&& fn, const Operands& operands) {
  return set_grad_enabled(true, std::forward<Fn>(fn), operands);
}

/// torch.while_loop for at::Tensor code: while `cond_fn(carried...)` holds, `carried =
/// body_fn(carried...)`; returns the last carried values. Eagerly it loops; under export
/// (non-strict) it records cond_fn and body_fn, traced once on the carried values, as the
/// subgraphs of one torch.ops.higher_order.while_loop node. body_fn returns the carried tuple's
/// type with the same dtypes and shapes (torch's rule); tensors either reads without being passed
/// them become its additional inputs.
///
///   auto [i, h] = xport::while_loop([](const at::Tensor& i, const at::Tensor& h) { return i < 4; },
///                                   [&](const at::Tensor& i, const at::Tensor& h) {
///                                     return std::tuple{i + 1, cell(h).tanh()};
///                                   },
///                                   std::tuple{at::zeros({}, at::kLong), h0});
template <class CondFn, class BodyFn, class Carried>
  requires(!detail::carries<Carried, sym_tensor>::value)
Carried while_loop(CondFn&& cond_fn, BodyFn&& body_fn, const Carried& carried) {
  detail::check_loop_fns<CondFn, BodyFn, Carried, at::Tensor>();
  auto* outer = detail::active_capture;
  if (!outer) {
    bool again = detail::loop_predicate(std::apply(cond_fn, carried));
    auto copy = [](const at::Tensor& t) { return t.clone(); };
    if (!again) return detail::map_tensors(carried, copy);
    Carried now = carried;
    while (again) {
      now = std::apply(body_fn, now);
      again = detail::loop_predicate(std::apply(cond_fn, now));
    }
    return now;
  }
  std::vector<value> carried_values;
  auto of = [&](const at::Tensor& t) { carried_values.push_back(outer->value_of(t)); };
  (void)detail::flatten_into(carried, of);
  const auto tracer = [&carried](auto& fn) -> detail::branch_tracer {
    return [&fn, &carried](detail::capture& c, const std::vector<value>&, const std::vector<at::Tensor>& metas) {
      std::size_t k = 0;
      auto to_meta = [&](const at::Tensor&) { return metas.at(k++); };
      const auto args = detail::map_tensors(carried, to_meta);
      std::optional<decltype(std::apply(fn, args))> r;
      {
        detail::capture_scope scope(c);
        r.emplace(std::apply(fn, args));
      }
      std::vector<value> outs;
      auto out = [&](const at::Tensor& t) { outs.push_back(c.value_of(t)); };
      (void)detail::flatten_into(*r, out);
      return outs;
    };
  };
  const auto w = detail::trace_while_loop(*outer, std::move(carried_values), tracer(cond_fn), tracer(body_fn));
  std::size_t k = 0;
  auto from_node = [&](const at::Tensor&) { return w.metas.at(k++); };
  return detail::map_tensors(carried, from_node);
}

/// torch.while_loop for strict code (xport::sym_tensor): cond_fn and body_fn are traced once,
/// and the node records the C++ line of the call.
template <class CondFn, class BodyFn, class Carried>
  requires detail::carries<Carried, sym_tensor>::value
Carried while_loop(CondFn&& cond_fn, BodyFn&& body_fn, const Carried& carried,
                   const std::source_location& loc = std::source_location::current()) {
  detail::check_loop_fns<CondFn, BodyFn, Carried, sym_tensor>();
  const sym_tensor& first = std::get<0>(carried);
  auto& outer = detail::recording_capture(first.owner());
  std::vector<value> carried_values;
  auto of = [&](const sym_tensor& t) { carried_values.push_back(outer.local_value(t.graph_value())); };
  (void)detail::flatten_into(carried, of);
  const auto tracer = [&carried](auto& fn) -> detail::branch_tracer {
    return [&fn, &carried](detail::capture& c, const std::vector<value>& ins, const std::vector<at::Tensor>&) {
      detail::strict_branch_scope scope(c);
      std::size_t k = 0;
      auto to_sym = [&](const sym_tensor&) { return sym_tensor(ins.at(k++), &c); };
      const auto args = detail::map_tensors(carried, to_sym);
      const auto r = std::apply(fn, args);
      std::vector<value> outs;
      auto out = [&](const sym_tensor& t) { outs.push_back(c.local_value(t.graph_value())); };
      (void)detail::flatten_into(r, out);
      return outs;
    };
  };
  const auto w = detail::trace_while_loop(outer, std::move(carried_values), tracer(cond_fn), tracer(body_fn),
                                          detail::make_source(loc));
  std::size_t k = 0;
  auto from_node = [&](const sym_tensor&) { return sym_tensor(w.n.output(k++), &outer); };
  return detail::map_tensors(carried, from_node);
}

/// torch.map for at::Tensor code: `fn(xs[i], args...)` for every row i of `xs`, the results
/// (a tensor or a std::tuple of them) stacked along a new leading dim. `xs` is a tensor or any
/// tree of them (std::tuple, std::vector, ...) sharing their leading dim; `fn` gets a row of each,
/// in the same tree. Eagerly it loops; under export (non-strict) it records `fn`, traced once on
/// a row, as the body of one torch.ops.higher_order.map_impl node; tensors `fn` reads without
/// being passed them are appended to its pos_args.
///
///   auto ys = xport::map([&](const at::Tensor& row, const at::Tensor& w) { return lin(row) * w; },
///                        xs, std::tuple{w});
template <class Fn, class Xs, class Args = std::tuple<>>
  requires(!detail::is_sym_tree<Xs>)
auto map(Fn&& fn, const Xs& xs, const Args& args = {}) {
  detail::check_map_fn<Fn, at::Tensor, Xs, Args>();
  using R = decltype(std::apply(fn, std::tuple_cat(std::tuple<Xs>(xs), args)));
  const auto n = detail::mapped_length(detail::leaves_of(xs));  // torch.map's rules and texts
  auto* outer = detail::active_capture;
  if (!outer) {
    std::optional<R> first;
    std::vector<std::vector<at::Tensor>> rows;
    for (std::int64_t i = 0; i < n; ++i) {
      auto row = [&](const at::Tensor& x) { return x.select(0, i); };
      R r = std::apply(fn, std::tuple_cat(std::tuple<Xs>(detail::map_tensors(xs, row)), args));
      std::size_t k = 0;
      auto collect = [&](const at::Tensor& t) {
        if (rows.size() <= k) rows.emplace_back();
        rows[k++].push_back(t);
      };
      (void)detail::flatten_into(r, collect);
      if (!first) first.emplace(std::move(r));
    }
    std::size_t k = 0;
    auto stacked = [&](const at::Tensor&) { return at::stack(rows.at(k++), 0); };
    return detail::map_tensors(*first, stacked);
  }
  std::vector<value> xs_values, pos;
  for (const auto& t : detail::leaves_of(xs)) xs_values.push_back(outer->value_of(t));
  auto of = [&](const at::Tensor& t) { pos.push_back(outer->value_of(t)); };
  (void)detail::flatten_into(args, of);
  std::optional<R> result;
  const detail::branch_tracer tracer = [&](detail::capture& c, const std::vector<value>&, const std::vector<at::Tensor>& metas) {
    std::size_t k = 0;
    auto to_meta = [&](const at::Tensor&) { return metas.at(k++); };
    const Xs row = detail::map_tensors(xs, to_meta);
    const auto rest = detail::map_tensors(args, to_meta);
    {
      detail::capture_scope scope(c);
      result.emplace(std::apply(fn, std::tuple_cat(std::tuple<Xs>(row), rest)));
    }
    std::vector<value> outs;
    auto out = [&](const at::Tensor& t) { outs.push_back(c.value_of(t)); };
    (void)detail::flatten_into(*result, out);
    return outs;
  };
  const auto m = detail::trace_map(*outer, std::move(xs_values), std::move(pos), tracer);
  std::size_t k = 0;
  auto from_node = [&](const at::Tensor&) { return m.metas.at(k++); };
  return detail::map_tensors(*result, from_node);
}

/// torch.map for strict code (xport::sym_tensor, or a tree of them): the body is traced once,
/// on a row, and the node records the C++ line of the call.
template <class Fn, class Xs, class Args = std::tuple<>>
  requires(detail::is_sym_tree<Xs>)
auto map(Fn&& fn, const Xs& xs, const Args& args = {}, const std::source_location& loc = std::source_location::current()) {
  detail::check_map_fn<Fn, sym_tensor, Xs, Args>();
  using R = decltype(std::apply(fn, std::tuple_cat(std::tuple<Xs>(xs), args)));
  std::vector<sym_tensor> x_leaves;
  auto push_x = [&](const sym_tensor& t) { x_leaves.push_back(t); };
  (void)detail::flatten_into(xs, push_x);
  if (x_leaves.empty()) throw error("xport.map.xs", "torch.map: Mapped xs can only consist of tensors, and at least one");
  auto& outer = detail::recording_capture(x_leaves[0].owner());
  std::vector<value> xs_values, pos;
  for (const auto& t : x_leaves) xs_values.push_back(outer.local_value(t.graph_value()));
  auto of = [&](const sym_tensor& t) { pos.push_back(outer.local_value(t.graph_value())); };
  (void)detail::flatten_into(args, of);
  std::optional<R> result;
  const detail::branch_tracer tracer = [&](detail::capture& c, const std::vector<value>& ins, const std::vector<at::Tensor>&) {
    detail::strict_branch_scope scope(c);
    std::size_t k = 0;
    auto to_sym = [&](const sym_tensor&) { return sym_tensor(ins.at(k++), &c); };
    const Xs row = detail::map_tensors(xs, to_sym);
    const auto rest = detail::map_tensors(args, to_sym);
    result.emplace(std::apply(fn, std::tuple_cat(std::tuple<Xs>(row), rest)));
    std::vector<value> outs;
    auto out = [&](const sym_tensor& t) { outs.push_back(c.local_value(t.graph_value())); };
    (void)detail::flatten_into(*result, out);
    return outs;
  };
  const auto m = detail::trace_map(outer, std::move(xs_values), std::move(pos), tracer, detail::make_source(loc));
  std::size_t k = 0;
  auto from_node = [&](const sym_tensor&) { return sym_tensor(m.n.output(k++), &outer); };
  return detail::map_tensors(*result, from_node);
}

/// What xport::scan does besides the scan over dim 0: which dim it scans over (moved to the
/// front for the scan and back for the ys) and whether it runs from the end (torch.scan's dim
/// and reverse).
struct scan_options {
  std::int64_t dim = 0;
  bool reverse = false;
};

/// torch.scan for at::Tensor code: `carry = init`, then for each slice x_i of `xs` along
/// `opts.dim`, `std::tie(carry, y_i) = combine_fn(carry, x_i)`; returns the last carry and the
/// y_i stacked along `opts.dim`. `init` and `xs` are a tensor or any tree of them (std::tuple,
/// std::vector, ...); combine_fn returns `std::tuple{next_carry, y}` (y a tensor or a tree).
/// Eagerly it loops; under export (non-strict) it records combine_fn, traced once on the carry
/// and a slice, as the combine graph of one torch.ops.higher_order.scan node; tensors it reads
/// without being passed them become its additional inputs.
///
///   auto [h, hs] = xport::scan([&](const at::Tensor& h, const at::Tensor& x) {
///                                auto next = (cell(x) + h).tanh();
///                                return std::tuple{next, next.clone()};
///                              },
///                              h0, xs);
template <class Fn, class Init, class Xs>
  requires(!detail::is_sym_tree<Init>)
auto scan(Fn&& combine_fn, const Init& init, const Xs& xs, scan_options opts = {}) {
  detail::check_scan_fn<Fn, Init, Xs>();
  using R = decltype(combine_fn(init, xs));
  const auto x_leaves = detail::leaves_of(xs);
  const auto init_leaves = detail::leaves_of(init);
  if (init_leaves.empty()) throw error("xport.scan.init", "scan() operator requires init leaves.");
  if (x_leaves.empty()) throw error("xport.scan.xs", "xport::scan: xs holds no tensor; it scans over one at least");
  const auto dim = detail::scan_dim(opts.dim, x_leaves[0].dim());
  for (const auto& x : x_leaves)
    if (x.dim() <= dim || x.size(dim) == 0)
      throw error("xport.scan.xs", "All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0 "
                                   "(an xs of sizes " + c10::str(x.sizes()) + ", dim " + std::to_string(dim) + ")");
  auto to_front = [&](const at::Tensor& x) {  // torch.scan's movedim and flip, recorded when traced
    auto m = dim != 0 ? x.movedim(dim, 0) : x;
    return opts.reverse ? m.flip({0}) : m;
  };
  auto to_dim = [&](const at::Tensor& y) {
    auto m = opts.reverse ? y.flip({0}) : y;
    return dim != 0 && dim < m.dim() ? m.movedim(0, dim) : m;
  };
  const Xs front = detail::map_tensors(xs, to_front);
  auto* outer = detail::active_capture;
  if (!outer) {
    const auto n = x_leaves[0].size(dim);
    std::optional<R> last;
    std::vector<std::vector<at::Tensor>> ys;
    Init carry = init;
    for (std::int64_t i = 0; i < n; ++i) {
      auto row = [&](const at::Tensor& x) { return x.select(0, i); };
      R r = combine_fn(carry, detail::map_tensors(front, row));
      detail::check_carry(init_leaves, detail::leaves_of(std::get<0>(r)));
      const auto y = detail::leaves_of(std::get<1>(r));
      ys.resize(y.size());
      for (std::size_t k = 0; k < y.size(); ++k) ys[k].push_back(y[k]);
      carry = std::get<0>(r);
      last.emplace(std::move(r));
    }
    std::size_t k = 0;
    auto stacked = [&](const at::Tensor&) { return to_dim(at::stack(ys.at(k++), 0)); };
    return R{std::move(carry), detail::map_tensors(std::get<1>(*last), stacked)};
  }
  std::vector<value> init_values, xs_values;
  for (const auto& t : init_leaves) init_values.push_back(outer->value_of(t));
  for (const auto& t : detail::leaves_of(front)) xs_values.push_back(outer->value_of(t));
  std::optional<R> result;
  const detail::branch_tracer tracer = [&](detail::capture& c, const std::vector<value>&, const std::vector<at::Tensor>& metas) {
    std::size_t k = 0;
    auto to_meta = [&](const at::Tensor&) { return metas.at(k++); };
    const Init carry = detail::map_tensors(init, to_meta);
    const Xs row = detail::map_tensors(front, to_meta);
    {
      detail::capture_scope scope(c);
      result.emplace(combine_fn(carry, row));
    }
    std::vector<value> outs;
    auto out = [&](const at::Tensor& t) { outs.push_back(c.value_of(t)); };
    (void)detail::flatten_into(*result, out);
    return outs;
  };
  const auto sc = detail::trace_scan(*outer, std::move(init_values), std::move(xs_values), tracer);
  std::size_t k = 0;
  auto from_node = [&](const at::Tensor&) { return sc.metas.at(k++); };
  auto r = detail::map_tensors(*result, from_node);
  return R{std::move(std::get<0>(r)), detail::map_tensors(std::get<1>(r), to_dim)};
}

/// torch.scan for strict code (xport::sym_tensor): combine_fn is traced once, on the carry and
/// a slice, and the node records the C++ line of the call.
template <class Fn, class Init, class Xs>
  requires(detail::is_sym_tree<Init>)
auto scan(Fn&& combine_fn, const Init& init, const Xs& xs, scan_options opts = {},
          const std::source_location& loc = std::source_location::current()) {
  detail::check_scan_fn<Fn, Init, Xs>();
  using R = decltype(combine_fn(init, xs));
  std::vector<sym_tensor> init_leaves, x_leaves;
  auto push_init = [&](const sym_tensor& t) { init_leaves.push_back(t); };
  auto push_x = [&](const sym_tensor& t) { x_leaves.push_back(t); };
  (void)detail::flatten_into(init, push_init);
  (void)detail::flatten_into(xs, push_x);
  if (init_leaves.empty()) throw error("xport.scan.init", "scan() operator requires init leaves.");
  if (x_leaves.empty()) throw error("xport.scan.xs", "xport::scan: xs holds no tensor; it scans over one at least");
  auto& outer = detail::recording_capture(init_leaves[0].owner());
  const auto dim = detail::scan_dim(opts.dim, x_leaves[0].dim());
  for (const auto& x : x_leaves)
    if (x.dim() <= dim)
      throw error("xport.scan.xs", "All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0 "
                                   "(an xs of " + std::to_string(x.dim()) + " dims, dim " + std::to_string(dim) + ")");
  auto to_front = [&](const sym_tensor& x) {
    auto m = dim != 0 ? x.wrap(x.record("aten::movedim.int", {x, dim, std::int64_t{0}}, {}, loc)) : x;
    return opts.reverse ? m.wrap(m.record("aten::flip", {m, std::vector<std::int64_t>{0}}, {}, loc)) : m;
  };
  auto to_dim = [&](const sym_tensor& y) {
    auto m = opts.reverse ? y.wrap(y.record("aten::flip", {y, std::vector<std::int64_t>{0}}, {}, loc)) : y;
    return dim != 0 && dim < m.dim() ? m.wrap(m.record("aten::movedim.int", {m, std::int64_t{0}, dim}, {}, loc)) : m;
  };
  const Xs front = detail::map_tensors(xs, to_front);
  std::vector<value> init_values, xs_values;
  for (const auto& t : init_leaves) init_values.push_back(outer.local_value(t.graph_value()));
  auto of = [&](const sym_tensor& t) { xs_values.push_back(outer.local_value(t.graph_value())); };
  (void)detail::flatten_into(front, of);
  std::optional<R> result;
  const detail::branch_tracer tracer = [&](detail::capture& c, const std::vector<value>& ins, const std::vector<at::Tensor>&) {
    detail::strict_branch_scope scope(c);
    std::size_t k = 0;
    auto to_sym = [&](const sym_tensor&) { return sym_tensor(ins.at(k++), &c); };
    const Init carry = detail::map_tensors(init, to_sym);
    const Xs row = detail::map_tensors(front, to_sym);
    result.emplace(combine_fn(carry, row));
    std::vector<value> outs;
    auto out = [&](const sym_tensor& t) { outs.push_back(c.local_value(t.graph_value())); };
    (void)detail::flatten_into(*result, out);
    return outs;
  };
  const auto sc = detail::trace_scan(outer, std::move(init_values), std::move(xs_values), tracer, detail::make_source(loc));
  std::size_t k = 0;
  auto from_node = [&](const sym_tensor&) { return sym_tensor(sc.n.output(k++), &outer); };
  auto r = detail::map_tensors(*result, from_node);
  return R{std::move(std::get<0>(r)), detail::map_tensors(std::get<1>(r), to_dim)};
}

XPORT_END_NAMESPACE
