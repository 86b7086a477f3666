// xport/passes/pass.hpp: the pass contract, and pipelines composed at compile time.
//
//   auto p = xport::passes::dce | xport::passes::cse | xport::passes::fold;  // a pipeline type
//   xport::passes::pass_result r = program | p;                           // or p(program)
//
// A pass is any type with `static constexpr std::string_view name` and
// `pass_result run(exported_program&) const` (the `pass` concept); no base class is needed for
// `|` to compose it. It never throws (the pipeline turns an exception into a failure) and a
// failed pass leaves the program as it was. What it needs and what it does to the IR, it says
// in one place, `static constexpr xport::passes::traits traits{...}`:
//   needs_functional / makes_functional / breaks_functional
//   needs_shapes (valid tensor meta on every value) / makes_shapes / breaks_shapes
//   transactional (it fails before changing anything, so the pipeline need not snapshot)
// A pipeline checks those at compile time, stage by stage: a stage that needs functional IR (or
// valid shapes) must not follow a stage that breaks it without one that makes it again in
// between. Each violation is one compile error naming the rule; the stage is named by the
// instantiation the compiler reports (`stage_rule<N, Stage>`).
//
//   valid:   dce | cse | fold
//            my_rewrite_that_breaks_shapes | propagate_shapes | fold
//   invalid: dce | 42                                  (not a pass)
//            my_rewrite_that_breaks_shapes | fold      (fold needs shapes)
//            my_pass_that_breaks_functional | my_pass_that_needs_functional_ir
//            export_program(f, args) | dce             (a temporary: nothing would see the result)
#pragma once

#include <concepts>     // std::derived_from, std::same_as
#include <cstddef>      // std::size_t
#include <exception>    // std::exception
#include <memory>       // std::make_shared
#include <optional>     // std::optional
#include <stdexcept>    // std::runtime_error
#include <ostream>      // std::ostream
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <tuple>        // std::tuple
#include <type_traits>  // std::remove_cvref_t
#include <utility>      // std::move
#include <vector>       // std::vector

#include <xport/config.hpp>
#include <xport/program/print.hpp>
#include <xport/ir/program.hpp>
#include <xport/program/verify.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

/// What a pass did: changed the program or not, or failed (then the program is as it was).
struct pass_result {
  bool changed = false;
  std::string error;  ///< empty on success

  [[nodiscard]] bool ok() const noexcept { return error.empty(); }
  explicit operator bool() const noexcept { return ok(); }
  static pass_result unchanged() { return {}; }
  static pass_result modified(bool changed = true) { return {changed, {}}; }
  static pass_result failure(std::string why) { return {false, std::move(why)}; }
};

/// A pass over an exported program (see the header comment for the contract).
template <class P>
concept pass = requires(const P& p, exported_program& prog) {
  { P::name } -> std::convertible_to<std::string_view>;
  { p.run(prog) } -> std::same_as<pass_result>;
};

/// What a pass needs and does to the IR, declared by the pass as
/// `static constexpr xport::passes::traits traits{.needs_shapes = true};` (all false if absent).
struct traits {
  bool needs_functional = false;   ///< needs functional IR (no in-place or out= calls)
  bool makes_functional = false;   ///< leaves functional IR
  bool breaks_functional = false;  ///< may leave in-place or out= calls
  bool needs_shapes = false;       ///< needs valid tensor meta on every value
  bool makes_shapes = false;       ///< leaves valid tensor meta
  bool breaks_shapes = false;      ///< may leave stale tensor meta
  bool transactional = false;      ///< fails before changing anything (no snapshot needed)
};

/// The traits `P` declares.
template <class P>
constexpr traits traits_of() {
  static_assert(!requires { P::needs_functional; } && !requires { P::makes_functional; } &&
                    !requires { P::breaks_functional; } && !requires { P::needs_shapes; } &&
                    !requires { P::makes_shapes; } && !requires { P::breaks_shapes; } &&
                    !requires { P::transactional; },
                "xport pass: declare what the pass needs and does in one member, "
                "`static constexpr xport::passes::traits traits{.needs_shapes = true, ...};`, "
                "not as separate bools");
  if constexpr (requires { P::traits; }) {
    static_assert(std::is_same_v<std::remove_cv_t<decltype(P::traits)>, traits>,
                  "xport pass: `traits` must be `static constexpr xport::passes::traits traits{...}`");
    return P::traits;
  } else {
    return {};
  }
}

namespace impl {

enum class rule : int { ok, not_a_pass, needs_functional, needs_shapes };

// The first rule the stages break, and at which stage (0-based).
template <class... Ps>
struct pipeline_check {
  static constexpr auto compute() {
    struct result {
      rule r = rule::ok;
      std::size_t stage = 0;
    } res;
    bool functional_broken = false, shapes_broken = false;
    std::size_t i = 0;
    const auto visit = [&]<class P>() {
      if (res.r != rule::ok) return;
      if constexpr (!pass<P>) {
        res = {rule::not_a_pass, i};
      } else {
        constexpr traits t = traits_of<P>();
        if (t.needs_functional && functional_broken) res = {rule::needs_functional, i};
        else if (t.needs_shapes && shapes_broken) res = {rule::needs_shapes, i};
        if (t.makes_functional) functional_broken = false;
        if (t.breaks_functional) functional_broken = true;
        if (t.makes_shapes) shapes_broken = false;
        if (t.breaks_shapes) shapes_broken = true;
      }
      ++i;
    };
    (visit.template operator()<Ps>(), ...);
    return res;
  }
  static constexpr auto value = compute();
};

template <class Tuple, std::size_t I>
using nth = std::tuple_element_t<I, Tuple>;

// The one error of a broken pipeline. The compiler names the stage in this instantiation:
// stage_rule<Index, Stage, Rule>.
template <std::size_t Index, class Stage, rule R>
struct stage_rule {
  static_assert(R != rule::not_a_pass,
                "xport pipeline: this stage is not a pass. A pass needs `static constexpr "
                "std::string_view name` and `xport::passes::pass_result run(xport::exported_program&) "
                "const` (see xport/passes/pass.hpp)");
  static_assert(R != rule::needs_functional,
                "xport pipeline: this stage needs functional IR, but an earlier stage breaks it "
                "(breaks_functional) and no stage in between makes it functional again: put "
                "xport::passes::functionalize before it");
  static_assert(R != rule::needs_shapes,
                "xport pipeline: this stage needs valid shapes, but an earlier stage breaks them "
                "(breaks_shapes) and no stage in between recomputes them: put "
                "xport::passes::propagate_shapes before it");
  static constexpr bool ok = true;
};

template <class... Ps>
consteval bool check_pipeline() {
  constexpr auto res = pipeline_check<Ps...>::value;
  if constexpr (res.r == rule::ok) {
    return true;
  } else {
    return stage_rule<res.stage, nth<std::tuple<Ps...>, res.stage>, res.r>::ok;
  }
}

}  // namespace impl

template <class... Ps>
class pipeline;

/// A stage of a pipeline: a pass, or a pipeline.
template <class T>
concept stage = pass<T> || requires { T::stages; };

/// The tag of the built-in passes and of pipelines. Its two operators are hidden friends: only
/// ADL finds them, so they never join unrelated overload sets. (A pass outside the tree
/// composes too, without this base: see the operators at the end of this header.)
struct pipe_base {
  /// stage | stage: a pipeline (nested pipelines flatten). Checked at compile time.
  template <class A, class B>
    requires((std::derived_from<std::remove_cvref_t<A>, pipe_base> ||
              std::derived_from<std::remove_cvref_t<B>, pipe_base>) &&
             !std::derived_from<std::remove_cvref_t<A>, exported_program>)
  friend constexpr auto operator|(A&& a, B&& b) {
    return compose(std::forward<A>(a), std::forward<B>(b));
  }

  /// program | stage: runs it.
  template <class P>
    requires std::derived_from<std::remove_cvref_t<P>, pipe_base>
  friend pass_result operator|(exported_program& program, const P& stage) {
    return stage(program);
  }

  /// a | b as a pipeline of a's stages, then b's.
  template <class A, class B>
  static constexpr auto compose(A&& a, B&& b) {
    return std::apply([](auto&&... s) { return pipeline<std::remove_cvref_t<decltype(s)>...>(s...); },
                      std::tuple_cat(as_tuple(std::forward<A>(a)), as_tuple(std::forward<B>(b))));
  }

 private:
  template <class T>
  static constexpr auto as_tuple(T&& t) {
    if constexpr (requires { t.stages; }) return t.stages;
    else return std::tuple<std::remove_cvref_t<T>>(std::forward<T>(t));
  }
};

/// Options of one pipeline run.
struct pipeline_options {
  bool verify_each = false;         ///< run verify() after every pass (a broken invariant fails it)
  std::ostream* print = nullptr;    ///< print the program before the first pass and after each
};

/// Stages run in order; the first failure stops the pipeline and is returned.
template <class... Ps>
class pipeline : public pipe_base {
 public:
  static_assert(impl::check_pipeline<Ps...>());
  static constexpr std::string_view name = "pipeline";

  constexpr explicit pipeline(Ps... ps) : stages(std::move(ps)...) {}

  pass_result run(exported_program& program, const pipeline_options& opts = {}) const {
    pass_result total;
    bool stop = false;
    std::apply(
        [&](const auto&... s) {
          ((stop ? void() : run_stage(s, program, opts, total, stop)), ...);
        },
        stages);
    return total;
  }
  pass_result operator()(exported_program& program, const pipeline_options& opts = {}) const {
    return run(program, opts);
  }

  std::tuple<Ps...> stages;

 private:
  template <class S>
  static void run_stage(const S& s, exported_program& program, const pipeline_options& opts, pass_result& total,
                        bool& stop);
};

/// After a pass replaced values: the signature names what the graph now returns (specs and
/// output-node operands correspond by position).
inline void sync_signature_names(exported_program& p) {
  const auto outs = p.graph().output_node().args();
  auto& specs = p.signature_mut().output_specs;
  for (std::size_t i = 0; i < outs.size() && i < specs.size(); ++i)
    if (outs[i].is_value() && specs[i].arg.type != argument_spec::kind::constant) specs[i].arg.name = outs[i].as_value().name();
}

/// Whether `g` calls a control-flow operator (its subgraphs are passed over too).
inline bool has_subgraphs(const graph& g) {
  for (auto n : g.nodes())
    if (n.is_call() && n.op().higher_order) return true;
  return false;
}

/// Runs `p` inside every subgraph `g` calls (the branches of a cond), as a program of its own,
/// nested ones first. A subgraph where the pass would change the inputs or outputs (fold lifting
/// a constant: a branch has only the operands it is passed) is left as it was; the others are
/// replaced by new subgraphs (the old may be shared by copies of the program).
template <class P>
bool run_in_subgraphs(const P& p, graph& g, ir_dialect dialect) {
  bool changed = false;
  for (auto n : g.nodes()) {
    if (!n.is_call() || !n.op().higher_order) continue;
    std::vector<argument> args(n.args().begin(), n.args().end());
    bool any = false;
    for (auto& a : args) {
      if (!a.is_graph()) continue;
      auto q = subgraph_program(*a.as_graph(), dialect);
      const auto ins = q.signature().input_specs.size(), outs = q.signature().output_specs.size();
      const bool inner = run_in_subgraphs(p, q.graph_mut(), dialect);
      const auto r = p.run(q);
      if (!r.ok()) throw std::runtime_error("in subgraph '" + a.as_graph()->name + "' of '" + n.name() + "': " + r.error);
      if (!(inner || r.changed)) continue;
      const auto& sig = q.signature();
      if (sig.input_specs.size() != ins || sig.output_specs.size() != outs || q.graph().placeholders().size() != ins) continue;
      a = std::make_shared<const subgraph>(subgraph{a.as_graph()->name, q.graph().clone()});
      any = true;
    }
    if (any) {
      n.set_args(std::move(args));
      changed = true;
    }
  }
  return changed;
}

/// Runs one pass: an exception becomes a failure, and a failure (of the pass, or of verify()
/// after it when asked) leaves the program as it was; prints before/after when asked. Passes
/// whose traits say `transactional` (they fail before changing anything) are not snapshotted.
template <class P>
pass_result run_pass(const P& p, exported_program& program, const pipeline_options& opts = {}) {
  if constexpr (requires { p.stages; }) {  // a nested pipeline runs its own stages
    return p.run(program, opts);
  } else {
    std::optional<exported_program> snapshot;
    // with subgraphs even a transactional pass changes the program before a branch can fail
    const bool subgraphs = has_subgraphs(program.graph());
    if (opts.verify_each || !traits_of<P>().transactional || subgraphs) snapshot.emplace(program.clone());
    if (opts.print) *opts.print << "--- before " << P::name << " ---\n" << to_string(program);
    pass_result r;
    try {
      r = p.run(program);
      if (r.ok() && subgraphs && run_in_subgraphs(p, program.graph_mut(), program.dialect())) r.changed = true;
      if (r.ok() && r.changed) sync_signature_names(program);
    } catch (const std::exception& e) {
      r = pass_result::failure(e.what());
    }
    if (r.ok() && opts.verify_each) {
      try {
        verify(program);
      } catch (const verify_error& e) {
        r = pass_result::failure(std::string("the program does not verify after the pass: ") + e.what());
      }
    }
    if (!r.ok() && snapshot) program = std::move(*snapshot);
    if (opts.print)
      *opts.print << "--- after " << P::name << (r.ok() ? (r.changed ? "" : " (unchanged)") : " (failed)") << " ---\n"
                  << to_string(program);
    return r;
  }
}

template <class... Ps>
template <class S>
void pipeline<Ps...>::run_stage(const S& s, exported_program& program, const pipeline_options& opts,
                                pass_result& total, bool& stop) {
  auto r = run_pass(s, program, opts);
  total.changed = total.changed || r.changed;
  if (!r.ok()) {
    total.error = std::string(S::name) + ": " + r.error;
    stop = true;
  }
}

/// Base of the built-in passes: makes `pass(program)` and `program | pass` work.
template <class Derived>
struct pass_base : pipe_base {
  pass_result operator()(exported_program& program) const {
    return run_pass(static_cast<const Derived&>(*this), program);
  }
};

}  // namespace passes

/// program | pass, for a pass of any type (ADL finds this through exported_program).
template <class P>
  requires(passes::pass<P> && !std::derived_from<P, passes::pipe_base>)
passes::pass_result operator|(exported_program& program, const P& stage) {
  return passes::run_pass(stage, program);
}

/// A temporary program piped into a pass: the one designed error (the result would be lost).
template <class P>
  requires(passes::stage<P> || std::derived_from<P, passes::pipe_base>)
passes::pass_result operator|(exported_program&& program, const P& stage) {
  static_assert(sizeof(P) == 0,
                "xport pipeline: `program | pass` changes the program in place, and this program is a "
                "temporary that nothing would see again: name it first (auto p = xport::export_program(...); "
                "p | pass;), or call the pass on a copy you keep");
  (void)program;
  (void)stage;
  return {};
}

XPORT_END_NAMESPACE

/// pass | pass for two passes written outside xport (neither derives from pipe_base, so no
/// hidden friend applies and ADL cannot see into xport): constrained to types that model the
/// pass concept, so it joins no other overload set.
template <class A, class B>
  requires(xport::passes::pass<std::remove_cvref_t<A>> && xport::passes::pass<std::remove_cvref_t<B>> &&
           !std::derived_from<std::remove_cvref_t<A>, xport::passes::pipe_base> &&
           !std::derived_from<std::remove_cvref_t<B>, xport::passes::pipe_base>)
constexpr auto operator|(A&& a, B&& b) {
  return xport::passes::pipe_base::compose(std::forward<A>(a), std::forward<B>(b));
}
