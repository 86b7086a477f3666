// xport/run/guards.hpp: the checks a program makes on its inputs before running.
// Count, definedness, dtype, device, rank and every static size; a mismatch is a guard_error
// `[xport.guard.<what>] input <name>: ...` naming the input, the dimension, what the program
// expects and what it got, and how to fix it.
#pragma once

#include <cstddef>  // std::size_t
#include <string>   // std::string
#include <vector>   // std::vector

#include <ATen/core/Tensor.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/dtype.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/tensor_meta.hpp>

XPORT_BEGIN_NAMESPACE

class input_guards {
 public:
  explicit input_guards(const exported_program& p) {
    const auto phs = p.graph().placeholders();
    const auto& specs = p.signature().input_specs;
    for (std::size_t i = 0; i < phs.size() && i < specs.size(); ++i) {
      if (specs[i].kind != input_kind::user_input) continue;
      const auto v = phs[i].output(0);
      names_.push_back(v.name());
      metas_.push_back(v.kind() == value_kind::tensor ? v.meta() : tensor_meta{});
    }
  }

  [[nodiscard]] const std::vector<std::string>& names() const noexcept { return names_; }
  [[nodiscard]] const std::vector<tensor_meta>& metas() const noexcept { return metas_; }

  /// Throws guard_error for the first input that does not satisfy the program's guards.
  void check(const std::vector<at::Tensor>& inputs) const {
    if (inputs.size() != names_.size()) {
      std::string list;
      for (const auto& n : names_) list += (list.empty() ? "" : ", ") + n;
      throw guard_error("xport.guard.count", "expected " + std::to_string(names_.size()) +
                                                 " input(s) (" + list + "), got " +
                                                 std::to_string(inputs.size()));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) check_one(i, inputs[i]);
  }

 private:
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

  std::vector<std::string> names_;
  std::vector<tensor_meta> metas_;
};

XPORT_END_NAMESPACE
