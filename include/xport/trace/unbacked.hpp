// xport/trace/unbacked.hpp: the sizes a capture gives data-dependent ops.
//
// Note [Unbacked sizes in a capture]: a capture runs on meta tensors, so `nonzero`, a boolean-mask
// index or `masked_select` cannot know how many rows they give, nor `item()` on an integer tensor
// its value. Under an unbacked_scope the capture gives the j-th such call of the traced code the
// value `values[j]` (a default past the end) and counts the calls; xport::check_range(v, lo, hi)
// on a value it gave records the fact lo <= v <= hi (torch._check), which bounds the values of
// later captures and becomes the symbol's range, checked on every run. Export captures again with each count moved, as it does for a
// dynamic dim (Note [Capturing at several sizes] in trace/symbolic.hpp): sizes that follow the
// count are fitted to its symbol `u<j>` (torch's unbacked SymInt), code that branches on it records
// other ops and fails by name. Outside a scope such a call is the graph break it always was.
#pragma once

#include <algorithm>  // std::max, std::min
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <optional>   // std::optional
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/sym_expr.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// The row counts of one capture's data-dependent calls.
struct unbacked_plan {
  std::vector<std::int64_t> values;
  std::size_t given = 0;                 ///< calls so far
  std::vector<std::int64_t> handed;      ///< the value each call got
  std::vector<value_range> facts;        ///< per call: what xport::check_range said of it

  /// The j-th count made without a value for it: >= 2 (no size of 0 or 1 is specialized), and
  /// distinct between the calls.
  static std::int64_t default_value(std::size_t j) { return 5 + 3 * static_cast<std::int64_t>(j); }

  std::int64_t take(value_range fact = {-int_oo, int_oo}) {
    const auto j = given++;
    handed.push_back(j < values.size() ? values[j] : default_value(j));
    facts.push_back(fact);
    return handed.back();
  }
};

/// The plan of the capture running on this thread, if export gave one.
inline thread_local unbacked_plan* active_unbacked = nullptr;

/// Gives the captures made while it lives the row counts `values`.
class unbacked_scope {
 public:
  explicit unbacked_scope(std::vector<std::int64_t> values) : prev_(active_unbacked) {
    plan_.values = std::move(values);
    active_unbacked = &plan_;
  }
  ~unbacked_scope() { active_unbacked = prev_; }
  unbacked_scope(const unbacked_scope&) = delete;
  unbacked_scope& operator=(const unbacked_scope&) = delete;

  /// How many data-dependent calls the captures made.
  [[nodiscard]] std::size_t given() const noexcept { return plan_.given; }
  /// What xport::check_range said of each call's value.
  [[nodiscard]] const std::vector<value_range>& facts() const noexcept { return plan_.facts; }

 private:
  unbacked_plan plan_;
  unbacked_plan* prev_;
};

}  // namespace detail

/// torch._check for a value only the data knows: states that `min <= v <= max` (either bound
/// may be absent), for a `v` a data-dependent call gave (`t.item<int64_t>()`,
/// `at::nonzero(m).size(0)`). Under export it becomes the range of v's symbol (`u0: VR[1, 8]`),
/// which export captures within and the program checks on every run; code that relies on a bound
/// (`x.slice(0, 0, k)` for k <= x.size(0)) exports only with it. Outside export it checks v now.
inline void check_range(std::int64_t v, std::optional<std::int64_t> min, std::optional<std::int64_t> max = std::nullopt) {
  const value_range r{min.value_or(-int_oo), max.value_or(int_oo)};
  auto* plan = detail::active_unbacked;
  if (!plan) {
    if (!r.contains(v))
      throw run_error("xport.check.failed", "xport::check_range: " + std::to_string(v) + " is not in " + r.str());
    return;
  }
  std::optional<std::size_t> which;
  for (std::size_t j = 0; j < plan->handed.size(); ++j) {
    if (plan->handed[j] != v) continue;
    if (which)
      throw export_error("xport.export.check_range",
                         "xport::check_range: " + std::to_string(v) + " is the value of two data-dependent calls in this "
                         "capture (calls " + std::to_string(*which) + " and " + std::to_string(j) + "); check each value "
                         "right after the call that gives it");
    which = j;
  }
  if (!which)
    throw export_error("xport.export.check_range",
                       "xport::check_range: " + std::to_string(v) + " is no value a data-dependent call gave (item() of "
                       "an integer tensor, a nonzero's size(0)); sizes that follow from the inputs need no fact");
  auto& f = plan->facts[*which];
  f.lo = std::max(f.lo, r.lo);
  f.hi = std::min(f.hi, r.hi);
  if (f.lo > f.hi)
    throw export_error("xport.export.check_range", "xport::check_range: the facts leave the value of data-dependent call " +
                                                       std::to_string(*which) + " no value (" + f.str() + ")");
}

XPORT_END_NAMESPACE
