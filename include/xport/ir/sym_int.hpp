// xport/ir/sym_int.hpp: the integer type of sizes, strides and size arguments.
// A sym_int is either a constant or a symbolic expression (a dynamic dimension such as `s0`,
// or `2*s0 + 1`). The expression engine plugs in through detail::sym_node; constants need none.
#pragma once

#include <atomic>    // std::atomic
#include <cstddef>   // std::size_t
#include <cstdint>   // std::int64_t
#include <optional>  // std::optional
#include <ostream>   // std::ostream
#include <string>    // std::string
#include <utility>   // std::exchange

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/fwd.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

/// An immutable symbolic integer expression, shared by reference count. `str()` is the printing
/// hook: it returns the text torch prints for the expression (`s0`, `2*s0`, `s0 + 1`).
struct sym_node {
  virtual ~sym_node() = default;
  [[nodiscard]] virtual std::string str() const = 0;
  /// Structural equality of canonical forms.
  [[nodiscard]] virtual bool equals(const sym_node& other) const = 0;
  [[nodiscard]] virtual std::size_t hash() const = 0;

  mutable std::atomic<std::int64_t> refcount{0};
};

}  // namespace detail

/// A size: a constant, or a symbolic expression carrying the example value it had at capture
/// (its hint). Two words: sizes and strides of every tensor in a graph are sym_ints.
template <class Int>
class basic_sym_int {
 public:
  using int_type = Int;

  constexpr basic_sym_int() noexcept = default;
  constexpr basic_sym_int(Int v) noexcept : value_(v) {}  // NOLINT: a constant is a sym_int
  /// A symbolic size; takes a reference on `expr` (a fresh node may be passed straight from new).
  basic_sym_int(const detail::sym_node* expr, Int hint) noexcept : value_(hint), expr_(expr) { retain(); }
  basic_sym_int(const basic_sym_int& o) noexcept : value_(o.value_), expr_(o.expr_) { retain(); }
  basic_sym_int(basic_sym_int&& o) noexcept : value_(o.value_), expr_(std::exchange(o.expr_, nullptr)) {}
  basic_sym_int& operator=(const basic_sym_int& o) noexcept {
    if (this != &o) {
      o.retain();
      release();
      value_ = o.value_;
      expr_ = o.expr_;
    }
    return *this;
  }
  basic_sym_int& operator=(basic_sym_int&& o) noexcept {
    if (this != &o) {
      release();
      value_ = o.value_;
      expr_ = std::exchange(o.expr_, nullptr);
    }
    return *this;
  }
  ~basic_sym_int() { release(); }

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
  [[nodiscard]] const detail::sym_node* expr() const noexcept { return expr_; }

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
  void retain() const noexcept {
    if (expr_) expr_->refcount.fetch_add(1, std::memory_order_relaxed);
  }
  void release() noexcept {
    if (expr_ && expr_->refcount.fetch_sub(1, std::memory_order_acq_rel) == 1) delete expr_;
    expr_ = nullptr;
  }

  Int value_ = 0;
  const detail::sym_node* expr_ = nullptr;
};

XPORT_END_NAMESPACE
