// xport/ir/sym_int.hpp: the integer type of sizes, strides and size arguments.
// A sym_int is either a constant or a symbolic expression (a dynamic dimension such as `s0`,
// or `2*s0 + 1`). The expression engine plugs in through detail::sym_node; constants need none.
#pragma once

#include <cstdint>   // std::int64_t
#include <memory>    // std::shared_ptr
#include <optional>  // std::optional
#include <ostream>   // std::ostream
#include <string>    // std::string
#include <utility>   // std::move

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/fwd.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

/// An immutable symbolic integer expression. `str()` is the printing hook: it returns the text
/// torch prints for the expression (`s0`, `2*s0`, `s0 + 1`).
struct sym_node {
  virtual ~sym_node() = default;
  [[nodiscard]] virtual std::string str() const = 0;
  /// Structural equality of canonical forms.
  [[nodiscard]] virtual bool equals(const sym_node& other) const = 0;
  [[nodiscard]] virtual std::size_t hash() const = 0;
};

}  // namespace detail

/// A size: a constant, or a symbolic expression carrying the example value it had at capture
/// (its hint).
template <class Int>
class basic_sym_int {
 public:
  using int_type = Int;

  constexpr basic_sym_int() noexcept = default;
  constexpr basic_sym_int(Int v) noexcept : value_(v) {}  // NOLINT: a constant is a sym_int
  basic_sym_int(std::shared_ptr<const detail::sym_node> expr, Int hint) noexcept
      : value_(hint), expr_(std::move(expr)) {}

  [[nodiscard]] bool is_constant() const noexcept { return expr_ == nullptr; }
  [[nodiscard]] bool is_symbolic() const noexcept { return expr_ != nullptr; }

  /// The constant value; throws graph_error for a symbolic size.
  [[nodiscard]] Int value() const {
    if (expr_)
      throw graph_error("xport.sym.not_constant",
                        "size " + str() + " is symbolic; use hint() for its example value");
    return value_;
  }
  [[nodiscard]] std::optional<Int> maybe_value() const noexcept {
    return expr_ ? std::nullopt : std::optional<Int>(value_);
  }
  /// The constant, or the example value of a symbolic size.
  [[nodiscard]] Int hint() const noexcept { return value_; }
  [[nodiscard]] const std::shared_ptr<const detail::sym_node>& expr() const noexcept {
    return expr_;
  }

  /// The text torch prints: `10`, `s0`, `2*s0`.
  [[nodiscard]] std::string str() const { return expr_ ? expr_->str() : std::to_string(value_); }

  friend bool operator==(const basic_sym_int& a, const basic_sym_int& b) noexcept {
    if (a.expr_ == nullptr || b.expr_ == nullptr)
      return a.expr_ == b.expr_ && a.value_ == b.value_;
    return a.expr_ == b.expr_ || a.expr_->equals(*b.expr_);
  }
  friend bool operator==(const basic_sym_int& a, Int b) noexcept {
    return a.expr_ == nullptr && a.value_ == b;
  }
  friend std::ostream& operator<<(std::ostream& os, const basic_sym_int& s) { return os << s.str(); }

 private:
  Int value_ = 0;
  std::shared_ptr<const detail::sym_node> expr_;
};

XPORT_END_NAMESPACE
