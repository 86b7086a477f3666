// xport/run/guards.hpp: the checks a program makes on its inputs before running.
// Count, definedness, dtype, device, rank and every static size; a mismatch is a guard_error
// `[xport.guard.<what>] input <name>: ...` naming the input, the dimension, what the program
// expects and what it got, and how to fix it.
#pragma once

#include <algorithm>  // std::find
#include <cstddef>  // std::size_t
#include <optional>  // std::optional
#include <string_view>  // std::string_view
#include <string>   // std::string
#include <vector>   // std::vector

#include <ATen/core/Tensor.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/dtype.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/ir/tensor_meta.hpp>

XPORT_BEGIN_NAMESPACE

/// The values of a program's symbols (`s0` = 8) for one call, read from the inputs' sizes.
class sym_env {
 public:
  [[nodiscard]] std::optional<std::int64_t> operator()(std::string_view name) const {
    for (std::size_t i = 0; i < names_->size(); ++i)
      if ((*names_)[i] == name && bound_[i]) return values_[i];
    return std::nullopt;
  }
  [[nodiscard]] std::int64_t eval(const sym_int& e) const {
    if (e.is_constant()) return e.hint();
    auto v = sym::eval(e, [this](std::string_view n) { return (*this)(n); });
    if (!v) throw run_error("xport.run.unbound_symbol", "size " + e.str() + " uses a symbol no input binds");
    return *v;
  }
  /// A SymFloat's value in this call (a SymBool's: 0 or 1).
  [[nodiscard]] double eval(const sym_scalar& e) const {
    return e.eval([this](const sym_int& s) { return eval(s); });
  }

  /// Binds the unbacked symbol `name` (`u0`) to the value node `where` gave it at run time (a
  /// nonzero's row count, an item()), checked against its range: torch's `_assert_scalar` nodes.
  void bind_unbacked(std::string_view name, std::int64_t v, const std::string& where) {
    for (std::size_t i = 0; i < names_->size(); ++i) {
      if ((*names_)[i] != name) continue;
      const auto& r = (*ranges_)[i];
      const auto fail = [&](const std::string& expr) {
        throw run_error("xport.run.assertion", "Runtime assertion failed for expression " + expr + " on node '" + where +
                                                   "' (" + std::string(name) + " = " + std::to_string(v) +
                                                   " in this call): the program was exported for values in " + r.str() +
                                                   " (torch._check / xport::check_range facts and the data-dependent op's bounds)");
      };
      if (r.lo > -int_oo && v < r.lo) fail(std::string(name) + " >= " + std::to_string(r.lo));
      if (r.hi < int_oo && v > r.hi) fail(std::string(name) + " <= " + std::to_string(r.hi));
      values_[i] = v;
      bound_[i] = true;
      check_relations(name, where);
      return;
    }
    throw run_error("xport.run.unbound_symbol", "node '" + where + "' gives " + std::string(name) +
                                                    ", a symbol the program's range constraints do not name");
  }

  /// A runtime assertion between sizes (`u0 <= s77`) and the symbols it names.
  struct relation_check {
    sym_relation relation;
    std::vector<std::string> symbols;
  };

  /// Checks each assertion between sizes that names `symbol` (or every one, for an empty name)
  /// whose symbols all have values now: torch's `_assert_scalar` nodes on `u0 <= s77`. `where`
  /// is the node that gave `symbol` (empty: the inputs' dims).
  void check_relations(std::string_view symbol, const std::string& where) const {
    if (!relations_) return;
    for (const auto& rc : *relations_) {
      if (!symbol.empty() && std::find(rc.symbols.begin(), rc.symbols.end(), symbol) == rc.symbols.end()) continue;
      const auto lookup = [this](std::string_view n) { return (*this)(n); };
      const auto a = sym::eval(rc.relation.lhs, lookup), b = sym::eval(rc.relation.rhs, lookup);
      if (!a || !b || rc.relation.holds(*a, *b)) continue;
      std::string values;
      for (const auto& n : rc.symbols) values += (values.empty() ? "" : ", ") + n + " = " + std::to_string(*(*this)(n));
      throw run_error("xport.run.assertion", "Runtime assertion failed for expression " + rc.relation.str() +
                                                 (where.empty() ? std::string(" on the inputs' sizes") : " on node '" + where + "'") +
                                                 " (" + values + " in this call): the program was exported for sizes "
                                                 "that satisfy it (a torch._check between sizes)");
    }
  }

 private:
  friend class input_guards;
  const std::vector<std::string>* names_ = nullptr;
  const std::vector<value_range>* ranges_ = nullptr;
  const std::vector<relation_check>* relations_ = nullptr;
  std::vector<std::int64_t> values_;
  std::vector<bool> bound_;
};

class input_guards {
 public:
  explicit input_guards(const exported_program& p) {
    const auto phs = p.graph().placeholders();
    const auto& specs = p.signature().input_specs;
    for (std::size_t i = 0; i < phs.size() && i < specs.size(); ++i) {
      // a specialized constant input is no run-time input (callable<Sig> checks its value)
      if (specs[i].kind != input_kind::user_input || specs[i].arg.type == argument_spec::kind::constant) continue;
      const auto v = phs[i].output(0);
      names_.push_back(v.name());
      metas_.push_back(v.kind() == value_kind::tensor ? v.meta() : tensor_meta{});
    }
    note_state_device(p);
    // Symbols: each bound by the first input dim that is exactly it (or solved from a linear
    // one), checked against its range; every other symbolic dim is checked against the bindings.
    for (const auto& rc : p.range_constraints()) {
      for (const auto& r : rc.relations) relations_.push_back({r, r.symbols()});
      for (const auto& s : sym::free_symbols(rc.symbol)) {
        if (std::find(symbols_.begin(), symbols_.end(), s) != symbols_.end()) continue;
        symbols_.push_back(s);
        ranges_.push_back({rc.min, rc.max.value_or(int_oo)});
        dim_names_.push_back(rc.name.empty() ? s : rc.name);
      }
    }
    auto slot_of = [&](const std::string& s) {
      auto it = std::find(symbols_.begin(), symbols_.end(), s);
      if (it == symbols_.end()) {
        symbols_.push_back(s);
        ranges_.push_back({0, int_oo});
        dim_names_.push_back(s);
        return symbols_.size() - 1;
      }
      return static_cast<std::size_t>(it - symbols_.begin());
    };
    for (std::size_t i = 0; i < metas_.size(); ++i)
      for (std::size_t d = 0; d < metas_[i].sizes.size(); ++d) {
        const auto& e = metas_[i].sizes[d];
        if (e.is_constant()) continue;
        for (const auto& s : sym::free_symbols(e)) slot_of(s);
      }
    site_.assign(symbols_.size(), sym_site{});
    for (std::size_t pass = 0; pass < 2; ++pass)
      for (std::size_t i = 0; i < metas_.size(); ++i)
        for (std::size_t d = 0; d < metas_[i].sizes.size(); ++d) {
          const auto& e = metas_[i].sizes[d];
          if (e.is_constant()) continue;
          const auto lin = sym::as_linear(e);
          if (!lin) continue;
          const auto slot = slot_of(lin->symbol);
          if (site_[slot].input != npos) continue;
          if (pass == 0 && (lin->a != 1 || lin->b != 0)) continue;
          site_[slot] = {i, d, lin->a, lin->b};
        }
    for (std::size_t i = 0; i < metas_.size(); ++i)
      for (std::size_t d = 0; d < metas_[i].sizes.size(); ++d) {
        const auto& e = metas_[i].sizes[d];
        if (e.is_constant()) continue;
        bool is_site = false;
        for (const auto& st : site_) is_site = is_site || (st.input == i && st.dim == d);
        if (!is_site) checks_.push_back({i, d});
      }
  }

  /// Whether the program has dynamic dims (symbolic input sizes).
  [[nodiscard]] bool symbolic() const noexcept { return !symbols_.empty(); }

  /// The symbols' values for these inputs, without checks (for run_options::check_inputs = false).
  [[nodiscard]] sym_env bind(const std::vector<at::Tensor>& inputs) const {
    sym_env env = empty_env();
    for (std::size_t k = 0; k < site_.size(); ++k) {
      const auto& st = site_[k];
      if (st.input == npos || st.input >= inputs.size() || !inputs[st.input].defined()) continue;
      env.values_[k] = (inputs[st.input].size(static_cast<std::int64_t>(st.dim)) - st.b) / st.a;
      env.bound_[k] = true;
    }
    return env;
  }

  [[nodiscard]] const std::vector<std::string>& names() const noexcept { return names_; }
  [[nodiscard]] const std::vector<tensor_meta>& metas() const noexcept { return metas_; }

  /// Throws guard_error for the first input that does not satisfy the program's guards.
  void check(const std::vector<at::Tensor>& inputs) const {
    check_static(inputs);
    if (symbolic()) (void)check_symbols(inputs);
  }

  /// check() and the symbols' values.
  [[nodiscard]] sym_env check_and_bind(const std::vector<at::Tensor>& inputs) const {
    check_static(inputs);
    return symbolic() ? check_symbols(inputs) : empty_env();
  }

 private:
  void check_static(const std::vector<at::Tensor>& inputs) const {
    if (inputs.size() != names_.size()) {
      std::string list;
      for (const auto& n : names_) list += (list.empty() ? "" : ", ") + n;
      throw guard_error("xport.guard.count", "expected " + std::to_string(names_.size()) +
                                                 " input(s) (" + list + "), got " +
                                                 std::to_string(inputs.size()));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) check_one(i, inputs[i]);
  }

  void check_one(std::size_t i, const at::Tensor& t) const {
    const auto& name = names_[i];
    const auto& m = metas_[i];
    if (!t.defined())
      throw guard_error("xport.guard.undefined", "input " + name + ": expected a tensor " +
                                                     m.annotation() + ", got an undefined tensor");
    if (t.scalar_type() != m.dtype)
      throw guard_error("xport.guard.dtype", "input " + name + ": expected dtype " + dtype_abbr(m.dtype) +
                                                 " (" + python_repr(m.dtype) + "), got " +
                                                 dtype_abbr(t.scalar_type()) + " (" +
                                                 python_repr(t.scalar_type()) + "); convert it with .to(" +
                                                 python_repr(m.dtype) + ")");
    if (t.device().type() != m.device.type())
      throw guard_error("xport.guard.device",
                        "input " + name + ": expected a tensor on " + m.device.str() + ", got one on " +
                            t.device().str() + "; move the input, or move the program with "
                            "exported_program::to(device)");
    if (state_device_ && t.device() != *state_device_ && t.dim() > 0)
      throw guard_error("xport.guard.device",
                        "input " + name + ": expected a tensor on " + state_device_->str() + ", where the program's state is ('" +
                            state_name_ + "'), got one on " + t.device().str() + "; move the input with .to(" +
                            state_device_->str() + "), or move the program with exported_program::to(" +
                            t.device().str() + ")");
    if (t.dim() != m.dim())
      throw guard_error("xport.guard.rank", "input " + name + ": expected " + std::to_string(m.dim()) +
                                                " dimension(s) " + m.annotation() + ", got " +
                                                std::to_string(t.dim()) + " " +
                                                tensor_meta::of(t).annotation());
    for (std::size_t d = 0; d < m.sizes.size(); ++d) {
      const auto& s = m.sizes[d];
      if (s.is_symbolic()) continue;
      if (t.size(static_cast<std::int64_t>(d)) != s.value())
        throw guard_error("xport.guard.shape",
                          "input " + name + ": dim " + std::to_string(d) + " must be " +
                              std::to_string(s.value()) + ", got " +
                              std::to_string(t.size(static_cast<std::int64_t>(d))) +
                              " (the program was exported with a static size here; export with a "
                              "dynamic Dim for this dimension to accept other sizes)");
    }
  }

  /// The one device the program's state lives on, if it has state and it is on one device:
  /// inputs must be there too, checked before any op runs (an op would fail halfway through,
  /// or a CPU scalar mixed in would quietly run). 0-dim inputs may be CPU scalars, as in eager.
  void note_state_device(const exported_program& p) {
    for (const auto& spec : p.signature().input_specs) {
      if (spec.kind == input_kind::user_input || spec.kind == input_kind::token || !spec.target) continue;
      const at::Tensor* t = (spec.kind == input_kind::parameter || (spec.kind == input_kind::buffer && spec.persistent.value_or(true)))
                                ? p.state_dict().find(*spec.target)
                                : p.constants().find(*spec.target);
      if (!t || !t->defined() || t->dim() == 0) continue;
      if (!state_device_) {
        state_device_ = t->device();
        state_name_ = *spec.target;
      } else if (*state_device_ != t->device()) {
        state_device_.reset();  // spread over devices on purpose: each op's own check decides
        return;
      }
    }
  }

  [[nodiscard]] sym_env empty_env() const {
    sym_env env;
    env.names_ = &symbols_;
    env.ranges_ = &ranges_;
    env.relations_ = &relations_;
    env.values_.assign(symbols_.size(), 0);
    env.bound_.assign(symbols_.size(), false);
    return env;
  }

  [[nodiscard]] std::string dim_text(std::size_t i, std::size_t d) const {
    return names_[i] + ".shape[" + std::to_string(d) + "]";
  }

  sym_env check_symbols(const std::vector<at::Tensor>& inputs) const {
    sym_env env = empty_env();
    for (std::size_t k = 0; k < site_.size(); ++k) {
      const auto& st = site_[k];
      if (st.input == npos) continue;
      const auto got = inputs[st.input].size(static_cast<std::int64_t>(st.dim));
      if (st.a != 1 || st.b != 0) {
        if ((got - st.b) % st.a != 0 || got < st.b)
          throw guard_error("xport.guard.form",
                            "Expected input " + dim_text(st.input, st.dim) + " = " + std::to_string(got) +
                                " to be of the form " + metas_[st.input].sizes[st.dim].str() + ", where " +
                                symbols_[k] + " (" + dim_names_[k] + ") is an integer");
      }
      const auto v = (got - st.b) / st.a;
      const auto& r = ranges_[k];
      if (!r.contains(v))
        throw guard_error("xport.guard.range",
                          "input " + names_[st.input] + ": dim " + std::to_string(st.dim) + " (" + dim_names_[k] +
                              ") must be in [" + std::to_string(r.lo) + ", " +
                              (r.hi == int_oo ? std::string("int_oo") : std::to_string(r.hi)) + "], got " +
                              std::to_string(v) + "; the program was exported for this range (widen the Dim's "
                              "min/max and export again for other sizes)");
      env.values_[k] = v;
      env.bound_[k] = true;
    }
    for (const auto& [i, d] : checks_) {
      const auto& e = metas_[i].sizes[d];
      const auto got = inputs[i].size(static_cast<std::int64_t>(d));
      const auto want = env.eval(e);
      if (got == want) continue;
      const auto lin = sym::as_linear(e);
      std::string msg;
      if (lin && lin->a == 1 && lin->b == 0) {
        std::size_t k = 0;
        while (symbols_[k] != lin->symbol) ++k;
        msg = dim_text(site_[k].input, site_[k].dim) + " (" + dim_names_[k] + "=" + std::to_string(want) +
              ") must equal " + dim_text(i, d) + ", got " + std::to_string(got);
      } else {
        msg = dim_text(i, d) + " must be " + e.str() + " = " + std::to_string(want) + " (";
        std::string b;
        for (const auto& s : sym::free_symbols(e)) {
          std::size_t k = 0;
          while (symbols_[k] != s) ++k;
          b += (b.empty() ? "" : ", ") + s + " = " + dim_names_[k] + " = " + std::to_string(*env(s));
        }
        msg += b + "), got " + std::to_string(got);
      }
      throw guard_error("xport.guard.equal", msg);
    }
    env.check_relations({}, {});  // those between input dims alone
    return env;  // a symbol no input gives stays unbound: an argument that uses it fails by name
  }

  struct sym_site {
    std::size_t input = npos, dim = 0;
    std::int64_t a = 1, b = 0;
  };
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  std::vector<std::string> names_;
  std::vector<tensor_meta> metas_;
  std::optional<c10::Device> state_device_;
  std::string state_name_;  // a state tensor on state_device_, named in the error
  std::vector<std::string> symbols_;     // s0, s1, ...
  std::vector<value_range> ranges_;      // per symbol
  std::vector<std::string> dim_names_;   // per symbol: the user's name for it
  std::vector<sym_site> site_;           // per symbol: where it is read
  std::vector<std::pair<std::size_t, std::size_t>> checks_;  // other symbolic dims
  std::vector<sym_env::relation_check> relations_;            // assertions between sizes
};

XPORT_END_NAMESPACE
