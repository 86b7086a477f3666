// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
#pragma once

// xport/xport.hpp: the whole library. torch.export for C++: export C++ code and torch::nn
// modules, build, check, print and run exported programs of ATen ops, with no Python.
// Includes only narrow LibTorch headers (ATen/core/Tensor.h, the dispatcher, per-op headers),
// never <torch/torch.h> or <ATen/ATen.h>.

// #include <xport/config.hpp>
// xport/config.hpp: the namespace macros. Every declaration of xport sits between
// XPORT_BEGIN_NAMESPACE and XPORT_END_NAMESPACE, in the inline namespace version.hpp names.

// #include <xport/version.hpp>
// xport/version.hpp: the library's version, as macros. The inline namespace every declaration
// lives in, XPORT_ABI_NAMESPACE, carries the same numbers (a test checks they agree), so two
// different copies of xport in one program cannot silently mix.

#define XPORT_VERSION_MAJOR 0
#define XPORT_VERSION_MINOR 1
#define XPORT_VERSION_PATCH 0
#define XPORT_VERSION_STRING "0.1.0"
#define XPORT_ABI_NAMESPACE v0_1_0  // v<major>_<minor>_<patch>

// The API sits in xport::v<major>_<minor>_<patch>, an inline namespace: users write xport::graph,
// the linker sees the version.
#define XPORT_BEGIN_NAMESPACE \
  namespace xport {           \
  inline namespace XPORT_ABI_NAMESPACE {
#define XPORT_END_NAMESPACE \
  }                         \
  }
// #include <xport/version.hpp>
// #include <xport/error.hpp>
// xport/error.hpp: the exception types xport throws.
// Every error carries a stable id (`xport.guard.shape`, `xport.verify.use_before_def`, ...) that
// prefixes its message as `[id] ...`; tests and users may match on the id, the text explains
// what was wrong, where, and how to fix it.

#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <utility>    // std::move

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE

/// Base of every exception thrown by xport.
class error : public std::runtime_error {
 public:
  error(std::string id, const std::string& message)
      : std::runtime_error("[" + id + "] " + message), id_(std::move(id)) {}

  /// The stable identifier, e.g. "xport.guard.shape".
  [[nodiscard]] const std::string& id() const noexcept { return id_; }

 private:
  std::string id_;
};

/// A graph or program was built or edited wrongly (builder calls, graph mutations).
class graph_error : public error {
 public:
  using error::error;
};

/// An operator call did not match the operator's schema (unknown op, argument count or type).
class schema_error : public graph_error {
 public:
  using graph_error::graph_error;
};

/// Shapes and dtypes of an op's outputs could not be inferred without running real compute.
class missing_fake_kernel : public graph_error {
 public:
  using graph_error::graph_error;
};

/// `verify()` found a broken invariant of the graph or of the graph signature.
class verify_error : public error {
 public:
  verify_error(std::string id, const std::string& message, std::string node = {})
      : error(std::move(id), message), node_(std::move(node)) {}

  /// Name of the offending node or value, empty when the failure is not about one node.
  [[nodiscard]] const std::string& node() const noexcept { return node_; }

 private:
  std::string node_;
};

/// Export could not capture the program (an unsupported construct in the traced code).
class export_error : public error {
 public:
  using error::error;
};

/// The traced code read tensor data (`item()`, `nonzero`, `unique`, a tensor used as a bool)
/// where no value can stand for it: torch.export's graph break. A program_builder call of such
/// an op is the same error. The message names the op and the way out (ops/data_dependent.hpp).
class graph_break : public export_error {
 public:
  using export_error::export_error;
};

/// A dynamic dimension the user asked for cannot be kept: the traced code fixes it to a
/// constant, narrows its range, or ties it to another dimension (torch's "Constraints
/// violated"). The message names the dims, the op, and a suggested fix.
class constraint_violation : public export_error {
 public:
  using export_error::export_error;
};

/// Inputs given to a program do not satisfy its input guards (count, dtype, device, shape).
class guard_error : public error {
 public:
  using error::error;
};

/// A file that could not be loaded: names the record (and offset, where one applies) and the
/// problem. Nothing was changed anywhere when this is thrown.
class load_error : public error {
 public:
  using error::error;
};

/// Running a program failed inside an operator; the message names the node and the op.
class run_error : public error {
 public:
  using error::error;
};

namespace detail {

/// The first line of a message (LibTorch's errors append a backtrace and notes below it).
inline std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace detail

XPORT_END_NAMESPACE
// #include <xport/fwd.hpp>
// xport/fwd.hpp: forward declarations of xport's public types and their default aliases.
// Includes no LibTorch header: a TU that only passes xport types around can include this alone.

#include <cstdint>  // std::int64_t

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE

template <class Int = std::int64_t>
class basic_sym_int;
using sym_int = basic_sym_int<>;

struct tensor_meta;
class argument;
class value;
class node;
/// The default graph policy: no typed node metadata (node.custom_meta<T>() still holds any
/// type), storage from new/delete. See basic_graph<Policy> in ir/graph.hpp.
struct default_policy {
  struct node_meta {};
};
template <class Policy = default_policy>
class basic_graph;
using graph = basic_graph<>;
struct op_info;

struct input_spec;
struct output_spec;
class graph_signature;
template <class Policy = default_policy>
class basic_exported_program;
using exported_program = basic_exported_program<>;
class program_builder;

struct run_options;
class interpreter;
class program_module;

XPORT_END_NAMESPACE

// the IR: types, graphs, signatures, programs
// #include <xport/ir/dtype.hpp>
// xport/ir/dtype.hpp: how torch spells dtypes, devices, layouts and memory formats.
// `dtype_abbr` gives the annotation form that torch.fx prints (`f32`, `bf16`, `b8`, ...);
// `python_repr` the Python form that appears in printed arguments (`torch.float32`).

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <string_view>  // std::string_view

#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

struct dtype_names {
  std::string_view c10;     // c10::toString spelling, stable across LibTorch versions
  std::string_view abbr;    // torch/utils/_dtype_abbrs.py
  std::string_view python;  // str(torch.<dtype>)
};

// Keyed by the c10 spelling rather than the enum value: the enum grows between LibTorch
// versions (float8, uint16, bits...), the names do not change.
inline constexpr std::array<dtype_names, 38> dtype_table{{
    {"Byte", "u8", "torch.uint8"},
    {"Char", "i8", "torch.int8"},
    {"Short", "i16", "torch.int16"},
    {"Int", "i32", "torch.int32"},
    {"Long", "i64", "torch.int64"},
    {"Half", "f16", "torch.float16"},
    {"Float", "f32", "torch.float32"},
    {"Double", "f64", "torch.float64"},
    {"ComplexHalf", "c32", "torch.complex32"},
    {"ComplexFloat", "c64", "torch.complex64"},
    {"ComplexDouble", "c128", "torch.complex128"},
    {"Bool", "b8", "torch.bool"},
    {"QInt8", "qi8", "torch.qint8"},
    {"QUInt8", "qu8", "torch.quint8"},
    {"QInt32", "qi32", "torch.qint32"},
    {"BFloat16", "bf16", "torch.bfloat16"},
    {"QUInt4x2", "qu4x2", "torch.quint4x2"},
    {"QUInt2x4", "qu2x4", "torch.quint2x4"},
    {"Bits1x8", "b1x8", "torch.bits1x8"},
    {"Bits2x4", "b2x4", "torch.bits2x4"},
    {"Bits4x2", "b4x2", "torch.bits4x2"},
    {"Bits8", "bits8", "torch.bits8"},
    {"Bits16", "b16", "torch.bits16"},
    {"Float8_e5m2", "f8e5m2", "torch.float8_e5m2"},
    {"Float8_e4m3fn", "f8e4m3fn", "torch.float8_e4m3fn"},
    {"Float8_e5m2fnuz", "f8e5m2fnuz", "torch.float8_e5m2fnuz"},
    {"Float8_e4m3fnuz", "f8e4m3fnuz", "torch.float8_e4m3fnuz"},
    {"UInt16", "u16", "torch.uint16"},
    {"UInt32", "u32", "torch.uint32"},
    {"UInt64", "u64", "torch.uint64"},
    {"Float8_e8m0fnu", "f8e8m0fnu", "torch.float8_e8m0fnu"},
    {"Float4_e2m1fn_x2", "f4e2m1fnx2", "torch.float4_e2m1fn_x2"},
    {"Int1", "i1", "torch.int1"},
    {"Int2", "i2", "torch.int2"},
    {"Int4", "i4", "torch.int4"},
    {"UInt1", "u1", "torch.uint1"},
    {"UInt2", "u2", "torch.uint2"},
    {"UInt4", "u4", "torch.uint4"},
}};

inline const dtype_names* find_dtype_names(c10::ScalarType t) {
  const std::string_view name = c10::toString(t);
  for (const auto& entry : dtype_table)
    if (entry.c10 == name) return &entry;
  return nullptr;
}

}  // namespace detail

/// The abbreviation torch.fx prints in annotations: `f32`, `i64`, `b8`, `bf16`, `c64`, ...
inline std::string dtype_abbr(c10::ScalarType t) {
  const auto* n = detail::find_dtype_names(t);
  return n ? std::string(n->abbr) : std::string(c10::toString(t));
}

/// The dtype as Python prints it: `torch.float32`.
inline std::string python_repr(c10::ScalarType t) {
  const auto* n = detail::find_dtype_names(t);
  return n ? std::string(n->python) : "torch." + std::string(c10::toString(t));
}

/// The device as Python prints it: `device(type='cpu')`, `device(type='cuda', index=0)`.
inline std::string python_repr(c10::Device d) {
  std::string type = c10::DeviceTypeName(d.type(), /*lower_case=*/true);
  std::string out = "device(type='" + type + "'";
  if (d.has_index()) out += ", index=" + std::to_string(static_cast<int>(d.index()));
  return out + ")";
}

/// The layout as Python prints it: `torch.strided`, `torch.sparse_coo`, ...
inline std::string python_repr(c10::Layout l) {
  switch (l) {
    case c10::kStrided: return "torch.strided";
    case c10::kSparse: return "torch.sparse_coo";
    case c10::kMkldnn: return "torch._mkldnn";
    case c10::kSparseCsr: return "torch.sparse_csr";
    case c10::kSparseCsc: return "torch.sparse_csc";
    case c10::kSparseBsr: return "torch.sparse_bsr";
    case c10::kSparseBsc: return "torch.sparse_bsc";
    default: return "torch.layout(" + std::to_string(static_cast<int>(l)) + ")";
  }
}

/// The memory format as Python prints it: `torch.contiguous_format`, `torch.channels_last`, ...
inline std::string python_repr(c10::MemoryFormat m) {
  switch (m) {
    case c10::MemoryFormat::Contiguous: return "torch.contiguous_format";
    case c10::MemoryFormat::Preserve: return "torch.preserve_format";
    case c10::MemoryFormat::ChannelsLast: return "torch.channels_last";
    case c10::MemoryFormat::ChannelsLast3d: return "torch.channels_last_3d";
    default: return "torch.memory_format(" + std::to_string(static_cast<int>(m)) + ")";
  }
}

XPORT_END_NAMESPACE
// #include <xport/ir/sym_int.hpp>
// xport/ir/sym_int.hpp: the integer type of sizes, strides and size arguments.
// A sym_int is either a constant or a symbolic expression (a dynamic dimension such as `s0`,
// or `2*s0 + 1`). The expression engine plugs in through detail::sym_node; constants need none.

#include <atomic>    // std::atomic
#include <cstddef>   // std::size_t
#include <cstdint>   // std::int64_t
#include <optional>  // std::optional
#include <ostream>   // std::ostream
#include <string>    // std::string
#include <utility>   // std::exchange

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/fwd.hpp>

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
// #include <xport/ir/sym_expr.hpp>
// xport/ir/sym_expr.hpp: the exact symbolic integer engine behind symbolic sizes (torch's sympy
// subset). Expressions are kept in a canonical form, so equal expressions compare and hash equal:
// a polynomial `sum(coeff * monomial) + constant`, where a monomial is a sorted product of atoms
// with positive integer powers, and an atom is a symbol or a FloorDiv / Mod / Min / Max node
// whose arguments are canonical themselves. `str()` prints as torch prints the sympy expression.

#include <algorithm>      // std::sort, std::min, std::max
#include <cstddef>        // std::size_t
#include <cstdint>        // std::int64_t
#include <functional>     // std::function, std::hash
#include <limits>         // std::numeric_limits
#include <map>            // std::map
#include <optional>       // std::optional
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::exchange, std::move, std::pair
#include <vector>         // std::vector

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/sym_int.hpp>

XPORT_BEGIN_NAMESPACE

/// +infinity of value ranges (torch's `int_oo`); -int_oo is -INT64_MAX.
inline constexpr std::int64_t int_oo = std::numeric_limits<std::int64_t>::max();

/// A closed interval of integers; `lo` may be -int_oo and `hi` may be int_oo.
struct value_range {
  std::int64_t lo = 0, hi = int_oo;

  [[nodiscard]] bool contains(std::int64_t v) const noexcept { return lo <= v && v <= hi; }
  /// `VR[0, int_oo]`, `VR[1, 1024]`, `VR[-int_oo, 5]`.
  [[nodiscard]] std::string str() const {
    auto bound = [](std::int64_t v) {
      return v >= int_oo ? std::string("int_oo") : v <= -int_oo ? std::string("-int_oo") : std::to_string(v);
    };
    return "VR[" + bound(lo) + ", " + bound(hi) + "]";
  }
  friend bool operator==(const value_range&, const value_range&) = default;
};

namespace detail {

/// Whether `name` is torch's name of an unbacked symbol: `u` and digits (sym::is_unbacked).
[[nodiscard]] inline bool is_unbacked_name(std::string_view name) noexcept {
  return name.size() >= 2 && name[0] == 'u' &&
         std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// ---- checked integer arithmetic (Python semantics, no UB; INT64_MIN is out of range) ----------

[[noreturn]] inline void sym_overflow(std::string_view op) {
  throw graph_error("xport.sym.overflow", "integer overflow in symbolic " + std::string(op) +
                                              "; values must stay within [-int_oo, int_oo]");
}
[[nodiscard]] inline std::int64_t sym_checked(bool overflowed, std::int64_t r, std::string_view op) {
  if (overflowed || r == std::numeric_limits<std::int64_t>::min()) sym_overflow(op);
  return r;
}
[[nodiscard]] inline std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  bool overflowed = __builtin_add_overflow(a, b, &r);
  return sym_checked(overflowed, r, "addition");
}
[[nodiscard]] inline std::int64_t checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  bool overflowed = __builtin_sub_overflow(a, b, &r);
  return sym_checked(overflowed, r, "subtraction");
}
[[nodiscard]] inline std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  bool overflowed = __builtin_mul_overflow(a, b, &r);
  return sym_checked(overflowed, r, "multiplication");
}
[[nodiscard]] inline std::int64_t checked_pow(std::int64_t x, std::int64_t p) {
  std::int64_t r = 1;
  if (p == 0 || x == 1) return 1;
  if (x == 0) return 0;
  if (x == -1) return p % 2 ? -1 : 1;
  for (; p > 0; --p) r = checked_mul(r, x);  // |x| >= 2 overflows within 63 rounds
  return r;
}
/// Python's `a // b` (floor toward -inf).
[[nodiscard]] inline std::int64_t py_floordiv(std::int64_t a, std::int64_t b) {
  if (b == 0)
    throw graph_error("xport.sym.div_by_zero", "division by zero in floordiv(" + std::to_string(a) + ", 0)");
  if (b == -1) return checked_sub(0, a);
  std::int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
/// Python's `a % b` (the result has the sign of b).
[[nodiscard]] inline std::int64_t py_mod(std::int64_t a, std::int64_t b) {
  if (b == 0) throw graph_error("xport.sym.div_by_zero", "modulo by zero in Mod(" + std::to_string(a) + ", 0)");
  if (b == -1) return 0;
  std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// ---- nodes ---------------------------------------------------------------------------------------

enum class sym_kind : std::uint8_t { symbol, poly, floordiv, mod, min, max };

/// `atom**power`; the atom's sym_int hint is unused.
struct sym_factor {
  sym_int atom;
  std::int64_t power = 1;
};
/// `coeff * factors...`, factors sorted by atom key; `key` is the monomial's key.
struct sym_term {
  std::int64_t coeff = 0;
  std::vector<sym_factor> factors;
  std::string key;
};

/// The one node class: a symbol, a polynomial (not a bare atom), or a function atom.
struct sym_expr final : sym_node {
  sym_kind kind = sym_kind::symbol;
  std::string name;             // symbol
  value_range vr;               // symbol
  std::int64_t hint = 0;        // symbol: its example value
  std::int64_t constant = 0;    // poly
  std::vector<sym_term> terms;  // poly, sorted by key
  std::vector<sym_int> args;    // floordiv (a, b), mod (a, b), min/max (canonical order)
  std::string key;              // canonical text: equality, hash, order
  std::size_t key_hash = 0;

  [[nodiscard]] std::string str() const override;
  [[nodiscard]] bool equals(const sym_node& other) const override {
    const auto* o = dynamic_cast<const sym_expr*>(&other);
    return o != nullptr && (o == this || (o->key_hash == key_hash && o->key == key));
  }
  [[nodiscard]] std::size_t hash() const override { return key_hash; }
};

[[nodiscard]] inline const sym_expr& node_of(const sym_int& s) {
  return static_cast<const sym_expr&>(*s.expr());  // every sym_node is a sym_expr
}
[[nodiscard]] inline std::string key_of(const sym_int& s) {
  return s.is_constant() ? "#" + std::to_string(s.hint()) : node_of(s).key;
}
[[nodiscard]] inline sym_int make_node(sym_expr* n, std::int64_t hint) {
  n->key_hash = std::hash<std::string>{}(n->key);
  return sym_int(n, hint);
}
[[nodiscard]] inline sym_int with_hint(const sym_int& s, std::int64_t hint) {
  return s.is_constant() ? s : sym_int(s.expr(), hint);
}

// ---- polynomials -----------------------------------------------------------------------------------

struct poly {
  std::int64_t c = 0;
  std::map<std::string, sym_term> terms;  // by monomial key; no zero coefficients
};

[[nodiscard]] inline std::string mono_key(const std::vector<sym_factor>& f) {
  std::string k;
  for (const auto& x : f) k += node_of(x.atom).key + "^" + std::to_string(x.power) + ";";
  return k;
}
[[nodiscard]] inline poly to_poly(const sym_int& s) {
  poly p;
  if (s.is_constant()) {
    p.c = s.hint();
    return p;
  }
  const auto& n = node_of(s);
  if (n.kind != sym_kind::poly) {
    sym_term t{1, {{with_hint(s, 0), 1}}, {}};
    t.key = mono_key(t.factors);
    p.terms.emplace(t.key, std::move(t));
    return p;
  }
  p.c = n.constant;
  for (const auto& t : n.terms) p.terms.emplace(t.key, t);
  return p;
}
inline void add_term(poly& p, sym_term t) {
  if (t.factors.empty()) {
    p.c = checked_add(p.c, t.coeff);
    return;
  }
  auto [it, fresh] = p.terms.try_emplace(t.key, t);
  if (!fresh) {
    it->second.coeff = checked_add(it->second.coeff, t.coeff);
    if (it->second.coeff == 0) p.terms.erase(it);
  }
}
/// p += q * scale.
inline void poly_add(poly& p, const poly& q, std::int64_t scale) {
  p.c = checked_add(p.c, checked_mul(q.c, scale));
  for (const auto& [k, t] : q.terms) {
    sym_term s = t;
    s.coeff = checked_mul(t.coeff, scale);
    if (s.coeff != 0) add_term(p, std::move(s));
  }
}
[[nodiscard]] inline sym_term term_mul(const sym_term& a, const sym_term& b) {
  sym_term r{checked_mul(a.coeff, b.coeff), {}, {}};
  std::size_t i = 0, j = 0;
  while (i < a.factors.size() || j < b.factors.size()) {
    int cmp = i == a.factors.size() ? 1
              : j == b.factors.size() ? -1
                                      : node_of(a.factors[i].atom).key.compare(node_of(b.factors[j].atom).key);
    if (cmp < 0) r.factors.push_back(a.factors[i++]);
    else if (cmp > 0) r.factors.push_back(b.factors[j++]);
    else r.factors.push_back({a.factors[i].atom, checked_add(a.factors[i++].power, b.factors[j++].power)});
  }
  r.key = mono_key(r.factors);
  return r;
}
[[nodiscard]] inline poly poly_mul(const poly& a, const poly& b) {
  poly r;
  r.c = checked_mul(a.c, b.c);
  for (const auto& [k, t] : a.terms) {
    sym_term s = t;
    if ((s.coeff = checked_mul(t.coeff, b.c)) != 0) add_term(r, std::move(s));
  }
  for (const auto& [k, t] : b.terms) {
    sym_term s = t;
    if ((s.coeff = checked_mul(t.coeff, a.c)) != 0) add_term(r, std::move(s));
  }
  for (const auto& [ka, ta] : a.terms)
    for (const auto& [kb, tb] : b.terms) add_term(r, term_mul(ta, tb));
  return r;
}
/// The canonical sym_int of a polynomial: a constant, a bare atom, or a poly node.
[[nodiscard]] inline sym_int from_poly(poly p, std::int64_t hint) {
  if (p.terms.empty()) return sym_int(p.c);
  if (p.c == 0 && p.terms.size() == 1) {
    const auto& t = p.terms.begin()->second;
    if (t.coeff == 1 && t.factors.size() == 1 && t.factors[0].power == 1) return with_hint(t.factors[0].atom, hint);
  }
  auto* n = new sym_expr;
  n->kind = sym_kind::poly;
  n->constant = p.c;
  n->key = "{" + std::to_string(p.c);
  for (auto& [k, t] : p.terms) {
    n->key += "|" + std::to_string(t.coeff) + "*" + k;
    n->terms.push_back(std::move(t));
  }
  n->key += "}";
  return make_node(n, hint);
}
[[nodiscard]] inline sym_int make_func(sym_kind kind, std::vector<sym_int> args, std::int64_t hint) {
  static constexpr const char* names[] = {"", "", "FloorDiv", "Mod", "Min", "Max"};
  auto* n = new sym_expr;
  n->kind = kind;
  n->key = std::string(names[static_cast<int>(kind)]) + "(";
  for (std::size_t i = 0; i < args.size(); ++i) n->key += (i ? "," : "") + key_of(args[i]);
  n->key += ")";
  n->args = std::move(args);
  return make_node(n, hint);
}

// ---- value ranges (saturating at +-int_oo) ------------------------------------------------------------

[[nodiscard]] inline std::int64_t sat(bool overflowed, std::int64_t r, bool positive) {
  if (overflowed) return positive ? int_oo : -int_oo;
  return std::max(r, -int_oo);
}
/// a + b; `upper` picks the side when +oo meets -oo.
[[nodiscard]] inline std::int64_t sat_add(std::int64_t a, std::int64_t b, bool upper) {
  bool pinf = a == int_oo || b == int_oo, ninf = a == -int_oo || b == -int_oo;
  if (pinf || ninf) return pinf && ninf ? (upper ? int_oo : -int_oo) : pinf ? int_oo : -int_oo;
  std::int64_t r = 0;
  bool overflowed = __builtin_add_overflow(a, b, &r);
  return sat(overflowed, r, a > 0);
}
[[nodiscard]] inline std::int64_t sat_mul(std::int64_t a, std::int64_t b) {
  if (a == 0 || b == 0) return 0;
  bool positive = (a > 0) == (b > 0);
  if (a == int_oo || a == -int_oo || b == int_oo || b == -int_oo) return positive ? int_oo : -int_oo;
  std::int64_t r = 0;
  bool overflowed = __builtin_mul_overflow(a, b, &r);
  return sat(overflowed, r, positive);
}
[[nodiscard]] inline value_range vr_add(value_range a, value_range b) {
  return {sat_add(a.lo, b.lo, false), sat_add(a.hi, b.hi, true)};
}
[[nodiscard]] inline value_range vr_mul(value_range a, value_range b) {
  std::int64_t c[] = {sat_mul(a.lo, b.lo), sat_mul(a.lo, b.hi), sat_mul(a.hi, b.lo), sat_mul(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}
[[nodiscard]] inline value_range vr_pow(value_range a, std::int64_t p) {
  auto pw = [p](std::int64_t x) {
    if (x == 1 || x == -1) return p % 2 ? x : std::int64_t{1};
    std::int64_t r = 1;
    for (std::int64_t i = 0; i < p && r != int_oo && r != -int_oo && r != 0; ++i) r = sat_mul(r, x);
    return r;
  };
  if (p % 2 == 1 || a.lo >= 0) return {pw(a.lo), pw(a.hi)};
  if (a.hi <= 0) return {pw(a.hi), pw(a.lo)};
  return {0, std::max(pw(a.lo), pw(a.hi))};
}
/// floor(x / y) for y > 0 with infinite bounds, monotone in both arguments.
[[nodiscard]] inline std::int64_t sat_floordiv(std::int64_t x, std::int64_t y) {
  if (x == int_oo || x == -int_oo) return x;
  if (y == int_oo) return x >= 0 ? 0 : -1;
  return py_floordiv(x, y);
}
[[nodiscard]] inline value_range vr_floordiv(value_range a, value_range b) {
  if (b.hi <= -1) {  // a // b == (-a) // (-b)
    a = {-a.hi, -a.lo};
    b = {-b.hi, -b.lo};
  }
  if (b.lo < 1) return {-int_oo, int_oo};
  std::int64_t c[] = {sat_floordiv(a.lo, b.lo), sat_floordiv(a.lo, b.hi), sat_floordiv(a.hi, b.lo),
                      sat_floordiv(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}
[[nodiscard]] inline value_range vr_mod(value_range a, value_range b) {
  if (b.lo >= 1) {
    if (b.lo == b.hi && b.hi != int_oo && a.lo != -int_oo && a.hi != int_oo &&
        py_floordiv(a.lo, b.lo) == py_floordiv(a.hi, b.lo))
      return {py_mod(a.lo, b.lo), py_mod(a.hi, b.lo)};
    std::int64_t hi = b.hi == int_oo ? int_oo : b.hi - 1;
    return {0, a.lo >= 0 ? std::min(hi, a.hi) : hi};
  }
  if (b.hi <= -1) return {b.lo == -int_oo ? -int_oo : b.lo + 1, 0};
  std::int64_t m = std::max(-b.lo, b.hi);
  return {m == int_oo ? -int_oo : -(m - 1), m == int_oo ? int_oo : m - 1};
}

[[nodiscard]] inline value_range range_of(const sym_int& s);
[[nodiscard]] inline value_range range_of_node(const sym_expr& n) {
  switch (n.kind) {
    case sym_kind::symbol: return n.vr;
    case sym_kind::poly: {
      value_range r{n.constant, n.constant};
      for (const auto& t : n.terms) {
        value_range m{t.coeff, t.coeff};
        for (const auto& f : t.factors) m = vr_mul(m, vr_pow(range_of(f.atom), f.power));
        r = vr_add(r, m);
      }
      return r;
    }
    case sym_kind::floordiv: return vr_floordiv(range_of(n.args[0]), range_of(n.args[1]));
    case sym_kind::mod: return vr_mod(range_of(n.args[0]), range_of(n.args[1]));
    case sym_kind::min:
    case sym_kind::max: {
      value_range r = range_of(n.args[0]);
      for (std::size_t i = 1; i < n.args.size(); ++i) {
        value_range a = range_of(n.args[i]);
        r = n.kind == sym_kind::min ? value_range{std::min(r.lo, a.lo), std::min(r.hi, a.hi)}
                                    : value_range{std::max(r.lo, a.lo), std::max(r.hi, a.hi)};
      }
      return r;
    }
  }
  return {-int_oo, int_oo};
}
inline value_range range_of(const sym_int& s) {
  return s.is_constant() ? value_range{s.hint(), s.hint()} : range_of_node(node_of(s));
}

// ---- evaluation ------------------------------------------------------------------------------------

template <class Lookup>
[[nodiscard]] std::optional<std::int64_t> eval_arg(const sym_int& s, Lookup& lookup);
template <class Lookup>
[[nodiscard]] std::optional<std::int64_t> eval_node(const sym_expr& n, Lookup& lookup) {
  switch (n.kind) {
    case sym_kind::symbol: return lookup(n.name);
    case sym_kind::poly: {
      std::int64_t acc = n.constant;
      for (const auto& t : n.terms) {
        std::int64_t v = t.coeff;
        for (const auto& f : t.factors) {
          auto x = eval_arg(f.atom, lookup);
          if (!x) return std::nullopt;
          v = checked_mul(v, checked_pow(*x, f.power));
        }
        acc = checked_add(acc, v);
      }
      return acc;
    }
    default: break;
  }
  auto a = eval_arg(n.args[0], lookup);
  if (!a) return std::nullopt;
  for (std::size_t i = 1; i < n.args.size(); ++i) {
    auto b = eval_arg(n.args[i], lookup);
    if (!b) return std::nullopt;
    switch (n.kind) {
      case sym_kind::floordiv: *a = py_floordiv(*a, *b); break;
      case sym_kind::mod: *a = py_mod(*a, *b); break;
      case sym_kind::min: *a = std::min(*a, *b); break;
      default: *a = std::max(*a, *b); break;
    }
  }
  return a;
}
template <class Lookup>
std::optional<std::int64_t> eval_arg(const sym_int& s, Lookup& lookup) {
  if (s.is_constant()) return s.hint();
  return eval_node(node_of(s), lookup);
}

// ---- sympy's printing order (sort_key, as_ordered_terms) and StrPrinter ---------------------------

/// A Python value for sympy's sort keys: int, str or tuple, compared as Python compares them.
struct py_key {
  int tag = 0;  // 0 int, 1 str, 2 tuple
  std::int64_t i = 0;
  std::string s;
  std::vector<py_key> t;
};
[[nodiscard]] inline py_key pk(std::int64_t i) { return {0, i, {}, {}}; }
[[nodiscard]] inline py_key pk(std::string s) { return {1, 0, std::move(s), {}}; }
[[nodiscard]] inline py_key pk(std::vector<py_key> t) { return {2, 0, {}, std::move(t)}; }
[[nodiscard]] inline int py_cmp(const py_key& a, const py_key& b) {
  if (a.tag != b.tag) return a.tag < b.tag ? -1 : 1;
  if (a.tag == 0) return a.i < b.i ? -1 : a.i > b.i;
  if (a.tag == 1) return a.s.compare(b.s) < 0 ? -1 : a.s != b.s;
  for (std::size_t k = 0; k < a.t.size() && k < b.t.size(); ++k)
    if (int c = py_cmp(a.t[k], b.t[k])) return c;
  return a.t.size() < b.t.size() ? -1 : a.t.size() > b.t.size();
}
[[nodiscard]] inline py_key class_key(int a, int b, const char* name) { return pk({pk(a), pk(b), pk(name)}); }
[[nodiscard]] inline py_key int_key(std::int64_t v) {
  return pk({class_key(1, 0, "Number"), pk({pk(0), pk(std::vector<py_key>{})}), pk(std::vector<py_key>{}), pk(v)});
}

/// One sympy expression seen in the canonical form: Integer, atom, Pow(atom, n), Mul or Add.
struct sview {
  enum kind_t : std::uint8_t { integer, atom, power, mul, add } kind = integer;
  std::int64_t value = 0;                             // integer value, exponent, Mul coefficient
  const sym_expr* node = nullptr;                     // atom, Pow base, Add
  const std::vector<sym_factor>* factors = nullptr;  // Mul
};
[[nodiscard]] inline sview view_of_factor(const sym_factor& f) {
  return {f.power == 1 ? sview::atom : sview::power, f.power, &node_of(f.atom), nullptr};
}
[[nodiscard]] inline sview view_of_term(std::int64_t coeff, const std::vector<sym_factor>& f) {
  if (coeff == 1 && f.size() == 1) return view_of_factor(f[0]);
  return {sview::mul, coeff, nullptr, &f};
}
[[nodiscard]] inline sview view_of(const sym_int& s) {
  if (s.is_constant()) return {sview::integer, s.hint(), nullptr, nullptr};
  const auto& n = node_of(s);
  if (n.kind != sym_kind::poly) return {sview::atom, 0, &n, nullptr};
  if (n.constant == 0 && n.terms.size() == 1) return view_of_term(n.terms[0].coeff, n.terms[0].factors);
  return {sview::add, 0, &n, nullptr};
}

[[nodiscard]] inline py_key sort_key(const sview& v);
[[nodiscard]] inline std::int64_t node_count(const sview& v) {
  switch (v.kind) {
    case sview::integer: return 1;
    case sview::power: return 2 + node_count({sview::atom, 0, v.node, nullptr});
    case sview::mul: {
      std::int64_t n = v.value != 1 ? 2 : 1;
      for (const auto& f : *v.factors) n += node_count(view_of_factor(f));
      return n;
    }
    case sview::add: {
      std::int64_t n = v.node->constant != 0 ? 2 : 1;
      for (const auto& t : v.node->terms) n += node_count(view_of_term(t.coeff, t.factors));
      return n;
    }
    case sview::atom: break;
  }
  std::int64_t n = 1;
  for (const auto& a : v.node->args) n += node_count(view_of(a));
  return n;
}
/// Views sorted by sympy's default_sort_key; with `nodes`, by (node count, sort key) as `ordered`.
[[nodiscard]] inline std::vector<sview> sorted_views(std::vector<sview> vs, bool nodes) {
  std::vector<std::pair<py_key, std::size_t>> keys;
  for (std::size_t i = 0; i < vs.size(); ++i)
    keys.push_back({nodes ? pk({pk(node_count(vs[i])), sort_key(vs[i])}) : sort_key(vs[i]), i});
  std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return py_cmp(a.first, b.first) < 0; });
  std::vector<sview> r;
  for (const auto& k : keys) r.push_back(vs[k.second]);
  return r;
}
/// A function atom's `.args` (Min/Max: sympy's `ordered`).
[[nodiscard]] inline std::vector<sview> func_args(const sym_expr& n) {
  std::vector<sview> r;
  for (const auto& a : n.args) r.push_back(view_of(a));
  return n.kind == sym_kind::min || n.kind == sym_kind::max ? sorted_views(std::move(r), true) : r;
}
[[nodiscard]] inline std::vector<sview> mul_factors(const sview& v) {
  std::vector<sview> r;
  for (const auto& f : *v.factors) r.push_back(view_of_factor(f));
  return sorted_views(std::move(r), false);
}
/// Add terms in sympy's `as_ordered_terms()` order.
[[nodiscard]] inline std::vector<sview> ordered_terms(const sym_expr& n) {
  sview c{sview::integer, n.constant, nullptr, nullptr};
  if (n.constant > 0 && n.terms.size() == 1 && n.terms[0].coeff < 0 && n.terms[0].factors.size() == 1)
    return {c, view_of_term(n.terms[0].coeff, n.terms[0].factors)};
  std::vector<sview> gens;  // distinct atoms, in default_sort_key order
  for (const auto& t : n.terms)
    for (const auto& f : t.factors)
      if (std::none_of(gens.begin(), gens.end(), [&](const sview& g) { return g.node->key == node_of(f.atom).key; }))
        gens.push_back({sview::atom, 0, &node_of(f.atom), nullptr});
  gens = sorted_views(std::move(gens), false);
  std::vector<std::pair<std::vector<std::int64_t>, sview>> ts;
  for (const auto& t : n.terms) {
    std::vector<std::int64_t> mono(gens.size(), 0);
    for (const auto& f : t.factors)
      for (std::size_t g = 0; g < gens.size(); ++g)
        if (gens[g].node->key == node_of(f.atom).key) mono[g] = f.power;
    ts.push_back({std::move(mono), view_of_term(t.coeff, t.factors)});
  }
  std::stable_sort(ts.begin(), ts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<sview> r;
  for (auto& t : ts) r.push_back(t.second);
  if (n.constant != 0) r.push_back(c);
  return r;
}
/// (class_key, (len(args), args)) of an atom as Expr.sort_key builds it.
[[nodiscard]] inline std::pair<py_key, py_key> atom_core(const sym_expr& n) {
  if (n.kind == sym_kind::symbol) return {class_key(2, 0, "Symbol"), pk({pk(1), pk({pk(n.name)})})};
  static constexpr const char* names[] = {"", "", "FloorDiv", "Mod", "Min", "Max"};
  const char* name = names[static_cast<int>(n.kind)];
  bool lattice = n.kind == sym_kind::min || n.kind == sym_kind::max;
  std::vector<py_key> args;
  for (const auto& a : func_args(n)) args.push_back(sort_key(a));
  auto count = static_cast<std::int64_t>(args.size());
  return {lattice ? class_key(5, 0, name) : class_key(4, 10000, name), pk({pk(count), pk(std::move(args))})};
}
inline py_key sort_key(const sview& v) {
  auto compose = [](std::pair<py_key, py_key> core, std::int64_t exp, std::int64_t coeff) {
    return pk({std::move(core.first), std::move(core.second), int_key(exp), pk(coeff)});
  };
  switch (v.kind) {
    case sview::integer: return int_key(v.value);
    case sview::atom: return compose(atom_core(*v.node), 1, 1);
    case sview::power: return compose(atom_core(*v.node), v.value, 1);
    case sview::mul: {
      if (v.factors->size() == 1) {
        const auto& f = (*v.factors)[0];
        return compose(atom_core(node_of(f.atom)), f.power, v.value);
      }
      std::vector<py_key> keys;
      for (const auto& f : mul_factors(v)) keys.push_back(sort_key(f));
      auto count = static_cast<std::int64_t>(keys.size());
      return compose({class_key(3, 0, "Mul"), pk({pk(count), pk(std::move(keys))})}, 1, v.value);
    }
    case sview::add: break;
  }
  std::vector<py_key> keys;
  for (const auto& t : ordered_terms(*v.node)) keys.push_back(sort_key(t));
  auto count = static_cast<std::int64_t>(keys.size());
  return compose({class_key(3, 1, "Add"), pk({pk(count), pk(std::move(keys))})}, 1, 1);
}

/// sympy's sympy_precedence(): Atom 1000, Func 70, Pow 60, Mul/Mod 50, Add (and negative items) 40.
[[nodiscard]] inline int sympy_precedence(const sview& v) {
  switch (v.kind) {
    case sview::integer: return v.value < 0 ? 40 : 1000;
    case sview::power: return 60;
    case sview::mul: return v.value < 0 ? 40 : 50;
    case sview::add: return 40;
    case sview::atom: break;
  }
  return v.node->kind == sym_kind::floordiv ? 70 : v.node->kind == sym_kind::mod ? 50 : 1000;
}
[[nodiscard]] inline std::string print_sympy(const sview& v);
/// StrPrinter.parenthesize(item, level, strict=False).
[[nodiscard]] inline std::string parenthesize(const sview& v, int level) {
  return sympy_precedence(v) <= level ? "(" + print_sympy(v) + ")" : print_sympy(v);
}
inline std::string print_sympy(const sview& v) {
  switch (v.kind) {
    case sview::integer: return std::to_string(v.value);
    case sview::power: return parenthesize({sview::atom, 0, v.node, nullptr}, 60) + "**" + std::to_string(v.value);
    case sview::mul: {
      int prec = sympy_precedence(v);
      std::string s = v.value < 0 ? "-" : "";
      std::int64_t c = v.value < 0 ? -v.value : v.value;
      if (c != 1) s += std::to_string(c) + "*";
      for (const auto& f : mul_factors(v)) s += parenthesize(f, prec) + "*";
      s.pop_back();
      return s;
    }
    case sview::add: {
      std::string s;
      for (const auto& t : ordered_terms(*v.node)) {
        std::string ts = print_sympy(t);
        bool neg = ts[0] == '-';
        s += s.empty() ? (neg ? "-" : "") : (neg ? " - " : " + ");
        s += neg ? ts.substr(1) : ts;
      }
      return s;
    }
    case sview::atom: break;
  }
  const auto& n = *v.node;
  if (n.kind == sym_kind::symbol) return n.name;
  if (n.kind == sym_kind::floordiv)  // torch's FloorDiv._sympystr
    return "(" + parenthesize(view_of(n.args[0]), 999) + "//" + parenthesize(view_of(n.args[1]), 999) + ")";
  std::vector<sview> args = func_args(n);
  if (n.kind != sym_kind::mod) args = sorted_views(std::move(args), false);  // _print_LatticeOp
  std::string s = n.kind == sym_kind::mod ? "Mod(" : n.kind == sym_kind::min ? "Min(" : "Max(";
  for (std::size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + print_sympy(args[i]);
  return s + ")";
}
[[nodiscard]] inline std::string srepr(const sview& v) {
  switch (v.kind) {
    case sview::integer: return "Integer(" + std::to_string(v.value) + ")";
    case sview::power:
      return "Pow(" + srepr({sview::atom, 0, v.node, nullptr}) + ", Integer(" + std::to_string(v.value) + "))";
    case sview::mul: {
      std::string s = "Mul(";
      if (v.value < -1) s += "Integer(-1), Integer(" + std::to_string(-v.value) + "), ";  // args_cnc
      else if (v.value != 1) s += "Integer(" + std::to_string(v.value) + "), ";
      for (const auto& f : mul_factors(v)) s += srepr(f) + ", ";
      return s.substr(0, s.size() - 2) + ")";
    }
    case sview::add: {
      std::string s = "Add(";
      for (const auto& t : ordered_terms(*v.node)) s += srepr(t) + ", ";
      return s.substr(0, s.size() - 2) + ")";
    }
    case sview::atom: break;
  }
  const auto& n = *v.node;
  // torch's unbacked symbols (u0) carry no positivity: a nonzero may find no row
  if (n.kind == sym_kind::symbol)
    return "Symbol('" + n.name + (is_unbacked_name(n.name) ? "', integer=True)" : "', integer=True, positive=True)");
  static constexpr const char* names[] = {"", "", "FloorDiv(", "Mod(", "Min(", "Max("};
  std::string s = names[static_cast<int>(n.kind)];
  auto args = func_args(n);
  for (std::size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + srepr(args[i]);
  return s + ")";
}

inline std::string sym_expr::str() const {
  return print_sympy(kind == sym_kind::poly && constant == 0 && terms.size() == 1
                   ? view_of_term(terms[0].coeff, terms[0].factors)
                   : sview{kind == sym_kind::poly ? sview::add : sview::atom, 0, this, nullptr});
}

[[nodiscard]] inline bool natural_less(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t i2 = i, j2 = j;
      while (i < a.size() && a[i] == '0') ++i;
      while (j < b.size() && b[j] == '0') ++j;
      std::size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      if (ie - i != je - j) return ie - i < je - j;
      if (int c = a.substr(i, ie - i).compare(b.substr(j, je - j))) return c < 0;
      if (i - i2 != j - j2) return i - i2 < j - j2;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}
inline void collect_symbols(const sym_int& s, std::vector<std::string>& out) {
  if (s.is_constant()) return;
  const auto& n = node_of(s);
  if (n.kind == sym_kind::symbol) out.push_back(n.name);
  for (const auto& t : n.terms)
    for (const auto& f : t.factors) collect_symbols(f.atom, out);
  for (const auto& a : n.args) collect_symbols(a, out);
}

}  // namespace detail

namespace sym {

/// A symbol `name` (an identifier) with example value `hint` and value range `range` (the hint
/// must lie in it). Symbols are identified by name.
[[nodiscard]] inline sym_int symbol(std::string name, std::int64_t hint, value_range range = {}) {
  bool ok = !name.empty() && !(name[0] >= '0' && name[0] <= '9');
  for (char c : name) ok = ok && (c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
  if (!ok) throw graph_error("xport.sym.bad_symbol", "symbol name '" + name + "' is not an identifier");
  if (range.lo > range.hi || !range.contains(hint))
    throw graph_error("xport.sym.bad_range",
                      "symbol " + name + " has hint " + std::to_string(hint) + " outside its range " + range.str());
  auto* n = new detail::sym_expr;
  n->kind = detail::sym_kind::symbol;
  n->key = name;
  n->name = std::move(name);
  n->vr = range;
  n->hint = hint;
  return detail::make_node(n, hint);
}

[[nodiscard]] inline sym_int add(const sym_int& a, const sym_int& b) {
  auto hint = detail::checked_add(a.hint(), b.hint());
  if (a.is_constant() && b.is_constant()) return hint;
  auto p = detail::to_poly(a);
  detail::poly_add(p, detail::to_poly(b), 1);
  return detail::from_poly(std::move(p), hint);
}
[[nodiscard]] inline sym_int sub(const sym_int& a, const sym_int& b) {
  auto hint = detail::checked_sub(a.hint(), b.hint());
  if (a.is_constant() && b.is_constant()) return hint;
  auto p = detail::to_poly(a);
  detail::poly_add(p, detail::to_poly(b), -1);
  return detail::from_poly(std::move(p), hint);
}
[[nodiscard]] inline sym_int mul(const sym_int& a, const sym_int& b) {
  auto hint = detail::checked_mul(a.hint(), b.hint());
  if (a.is_constant() && b.is_constant()) return hint;
  return detail::from_poly(detail::poly_mul(detail::to_poly(a), detail::to_poly(b)), hint);
}
[[nodiscard]] inline value_range range(const sym_int& e) { return detail::range_of(e); }

}  // namespace sym

namespace detail {

/// The monomial divisor `k * factors` of `b`, when b is one (a nonzero constant counts).
[[nodiscard]] inline std::optional<sym_term> as_monomial(const sym_int& b) {
  if (b.is_constant()) return sym_term{b.hint(), {}, {}};
  poly p = to_poly(b);
  if (p.c != 0 || p.terms.size() != 1) return std::nullopt;
  return p.terms.begin()->second;
}
/// Whether term t is divisible by monomial m; the quotient goes to q.
[[nodiscard]] inline bool term_divides(const sym_term& t, const sym_term& m, sym_term& q) {
  if (t.coeff % m.coeff != 0) return false;
  q = {t.coeff / m.coeff, {}, {}};
  std::size_t j = 0;
  for (const auto& f : t.factors) {
    std::int64_t p = f.power;
    if (j < m.factors.size() && node_of(m.factors[j].atom).key == node_of(f.atom).key) p -= m.factors[j++].power;
    if (p < 0) return false;
    if (p > 0) q.factors.push_back({f.atom, p});
  }
  if (j != m.factors.size()) return false;
  q.key = mono_key(q.factors);
  return true;
}
[[nodiscard]] inline std::int64_t sym_gcd(std::int64_t a, std::int64_t b) {
  while (b != 0) a = std::exchange(b, a % b);
  return a < 0 ? -a : a;
}
/// p = quotient * m + rest, where quotient collects the terms of p divisible by m (the constant
/// too when m is a constant dividing it).
inline void split_by(const poly& p, const sym_term& m, poly& quotient, poly& rest) {
  for (const auto& [k, t] : p.terms) {
    sym_term q;
    if (term_divides(t, m, q)) add_term(quotient, std::move(q));
    else add_term(rest, t);
  }
  if (m.factors.empty() && p.c % m.coeff == 0) quotient.c = p.c / m.coeff;
  else rest.c = p.c;
}
/// The gcd of rest's coefficients, constant and m's coefficient.
[[nodiscard]] inline std::int64_t poly_content(const poly& rest, std::int64_t mc) {
  std::int64_t g = sym_gcd(mc, rest.c);
  for (const auto& [k, t] : rest.terms) g = sym_gcd(g, t.coeff);
  return g;
}
[[nodiscard]] inline poly poly_scaled(const poly& p, std::int64_t div) {
  poly r;
  r.c = p.c / div;
  for (const auto& [k, t] : p.terms) {
    sym_term s = t;
    s.coeff = t.coeff / div;
    r.terms.emplace(k, std::move(s));
  }
  return r;
}
[[nodiscard]] inline sym_int mono_int(const sym_term& m) {
  poly p;
  if (m.factors.empty()) p.c = m.coeff;
  else p.terms.emplace(m.key, m);
  return from_poly(std::move(p), 0);
}
[[nodiscard]] inline bool is_kind(const sym_int& s, sym_kind k) { return s.is_symbolic() && node_of(s).kind == k; }

/// a // b or a % b (is_mod), simplified; `hint` is the result's hint.
[[nodiscard]] inline sym_int sym_divide(const sym_int& a, const sym_int& b, bool is_mod, std::int64_t hint) {
  if (b.is_constant() && b.hint() == 0)
    throw graph_error("xport.sym.div_by_zero", std::string(is_mod ? "modulo by zero in Mod(" : "division by zero in floordiv(") +
                                                   a.str() + ", 0)");
  if (a.is_constant() && b.is_constant()) return hint;
  if (b == 1 || b == -1) return is_mod ? sym_int(0) : b == 1 ? a : with_hint(sym::sub(0, a), hint);
  poly quotient, rest = to_poly(a);
  std::int64_t g = 1;
  sym_int d = with_hint(b, 0);
  if (auto m = as_monomial(b)) {
    if (m->coeff < 0 && !is_mod) {  // a // b == (-a) // (-b)
      poly neg;
      poly_add(neg, rest, -1);
      rest = std::move(neg);
      m->coeff = -m->coeff;
    }
    poly p = std::move(rest);
    rest = {};
    split_by(p, *m, quotient, rest);  // (m*q + r) // m == q + r // m,  (m*q + r) % m == r % m
    g = poly_content(rest, m->coeff);
    if (g > 1) {  // (g*u) // (g*v) == u // v,  (g*u) % (g*v) == g * (u % v)
      rest = poly_scaled(rest, g);
      m->coeff /= g;
    }
    d = mono_int(*m);
  }
  sym_int r = from_poly(rest, 0);
  auto finish = [&](const sym_int& x) {  // floordiv: quotient + x; mod: g * x
    poly p = is_mod ? poly{} : quotient;
    poly_add(p, to_poly(x), is_mod ? g : 1);
    return from_poly(std::move(p), hint);
  };
  value_range ra = range_of(r), rd = range_of(d);
  if (r == 0) return finish(0);
  if (r.is_constant() && d.is_constant())
    return finish(is_mod ? py_mod(r.hint(), d.hint()) : py_floordiv(r.hint(), d.hint()));
  if (r == d && !rd.contains(0)) return finish(is_mod ? 0 : 1);
  if (rd.lo >= 1 && ra.lo >= 0 && ra.hi < rd.lo) return finish(is_mod ? r : sym_int(0));
  if (d.is_constant() && d.hint() > 0 && ra.lo != -int_oo && ra.hi != int_oo &&
      py_floordiv(ra.lo, d.hint()) == py_floordiv(ra.hi, d.hint())) {  // one block: r // d is constant
    std::int64_t q = py_floordiv(ra.lo, d.hint());
    if (!is_mod) return finish(q);
    poly p = to_poly(r);
    p.c = checked_sub(p.c, checked_mul(q, d.hint()));
    return finish(from_poly(std::move(p), 0));
  }
  if (!is_mod && d.is_constant() && d.hint() > 0 && is_kind(r, sym_kind::floordiv)) {  // (x//c1)//c2
    const auto& inner = node_of(r).args;
    if (inner[1].is_constant() && inner[1].hint() > 0)
      return finish(sym_divide(inner[0], checked_mul(inner[1].hint(), d.hint()), false, 0));
  }
  if (is_mod && d.is_constant() && d.hint() > 0 && is_kind(r, sym_kind::mod)) {  // Mod(Mod(x, c*k), c)
    const auto& inner = node_of(r).args;
    if (inner[1].is_constant() && inner[1].hint() > 0 && inner[1].hint() % d.hint() == 0)
      return finish(sym_divide(inner[0], d, true, 0));
  }
  return finish(make_func(is_mod ? sym_kind::mod : sym_kind::floordiv, {r, d}, 0));
}

/// a <= b provably from the value ranges.
[[nodiscard]] inline bool provably_le(const sym_int& a, const sym_int& b) {
  try {
    poly p = to_poly(b);
    poly_add(p, to_poly(a), -1);
    return range_of(from_poly(std::move(p), 0)).lo >= 0;
  } catch (const graph_error&) {
    return false;
  }
}
[[nodiscard]] inline sym_int min_max(const sym_int& a, const sym_int& b, bool is_max) {
  std::int64_t hint = is_max ? std::max(a.hint(), b.hint()) : std::min(a.hint(), b.hint());
  if (a.is_constant() && b.is_constant()) return hint;
  sym_kind kind = is_max ? sym_kind::max : sym_kind::min;
  std::vector<sym_int> args;
  std::optional<std::int64_t> c;
  for (const sym_int* x : {&a, &b}) {
    std::vector<sym_int> flat = is_kind(*x, kind) ? node_of(*x).args : std::vector<sym_int>{*x};
    for (auto& f : flat) {
      if (f.is_constant()) c = !c ? f.hint() : is_max ? std::max(*c, f.hint()) : std::min(*c, f.hint());
      else args.push_back(with_hint(f, 0));
    }
  }
  if (c) args.push_back(*c);
  std::sort(args.begin(), args.end(), [](const sym_int& x, const sym_int& y) { return key_of(x) < key_of(y); });
  args.erase(std::unique(args.begin(), args.end()), args.end());
  for (std::size_t i = 0; i < args.size() && args.size() > 1;) {  // drop dominated arguments
    bool dominated = false;
    for (std::size_t j = 0; j < args.size() && !dominated; ++j)
      dominated = j != i && (is_max ? provably_le(args[i], args[j]) : provably_le(args[j], args[i]));
    if (dominated) args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
    else ++i;
  }
  if (args.size() == 1) return with_hint(args[0], hint);
  return make_func(kind, std::move(args), hint);
}

}  // namespace detail

namespace sym {

/// a // b with Python semantics (floor toward -inf); b == 0 throws graph_error.
[[nodiscard]] inline sym_int floordiv(const sym_int& a, const sym_int& b) {
  if (b.hint() == 0 && b.is_constant()) return detail::sym_divide(a, b, false, 0);
  return detail::sym_divide(a, b, false, detail::py_floordiv(a.hint(), b.hint()));
}
/// a % b with Python semantics (the result has the sign of b); b == 0 throws graph_error.
[[nodiscard]] inline sym_int mod(const sym_int& a, const sym_int& b) {
  if (b.hint() == 0 && b.is_constant()) return detail::sym_divide(a, b, true, 0);
  return detail::sym_divide(a, b, true, detail::py_mod(a.hint(), b.hint()));
}
[[nodiscard]] inline sym_int min(const sym_int& a, const sym_int& b) { return detail::min_max(a, b, false); }
[[nodiscard]] inline sym_int max(const sym_int& a, const sym_int& b) { return detail::min_max(a, b, true); }

/// The value for symbols bound by `lookup`; nullopt if a symbol is unbound.
[[nodiscard]] inline std::optional<std::int64_t> eval(
    const sym_int& e, const std::function<std::optional<std::int64_t>(std::string_view)>& lookup) {
  auto f = [&lookup](const std::string& name) { return lookup(name); };
  return detail::eval_arg(e, f);
}
/// The value for symbols bound in `env`; an unbound symbol throws graph_error naming it.
[[nodiscard]] inline std::int64_t eval(const sym_int& e, const std::unordered_map<std::string, std::int64_t>& env) {
  auto f = [&env](const std::string& name) -> std::optional<std::int64_t> {
    auto it = env.find(name);
    if (it == env.end())
      throw graph_error("xport.sym.unbound", "symbol " + name + " is unbound when evaluating a symbolic size");
    return it->second;
  };
  return *detail::eval_arg(e, f);
}
/// The symbols of `e`, unique, in natural order (s0 < s1 < s2 < s10).
/// Whether `name` is an unbacked symbol (`u0`, `u12`: a size or int only the data knows, made by
/// a data-dependent op), as torch names them.
[[nodiscard]] inline bool is_unbacked(std::string_view name) noexcept { return detail::is_unbacked_name(name); }

[[nodiscard]] inline std::vector<std::string> free_symbols(const sym_int& e) {
  std::vector<std::string> r;
  detail::collect_symbols(e, r);
  std::sort(r.begin(), r.end(), [](const std::string& a, const std::string& b) { return detail::natural_less(a, b); });
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}
/// `e` with each symbol for which `replace` gives a value replaced by it, re-simplified.
[[nodiscard]] inline sym_int substitute(const sym_int& e,
                                        const std::function<std::optional<sym_int>(std::string_view)>& replace) {
  if (e.is_constant()) return e;
  const auto& n = detail::node_of(e);
  switch (n.kind) {
    case detail::sym_kind::symbol: {
      auto r = replace(n.name);
      return r ? *r : sym_int(&n, n.hint);
    }
    case detail::sym_kind::poly: {
      sym_int acc = n.constant;
      for (const auto& t : n.terms) {
        sym_int v = t.coeff;
        for (const auto& f : t.factors) {
          sym_int x = substitute(f.atom, replace);
          for (std::int64_t p = 0; p < f.power; ++p) v = mul(v, x);
        }
        acc = add(acc, v);
      }
      return acc;
    }
    default: break;
  }
  sym_int a = substitute(n.args[0], replace);
  for (std::size_t i = 1; i < n.args.size(); ++i) {
    sym_int b = substitute(n.args[i], replace);
    switch (n.kind) {
      case detail::sym_kind::floordiv: a = floordiv(a, b); break;
      case detail::sym_kind::mod: a = mod(a, b); break;
      case detail::sym_kind::min: a = min(a, b); break;
      default: a = max(a, b); break;
    }
  }
  return a;
}
/// sympy's srepr text: `Add(Mul(Integer(2), Symbol('s0', integer=True, positive=True)), Integer(1))`.
[[nodiscard]] inline std::string srepr(const sym_int& e) { return detail::srepr(detail::view_of(e)); }

/// `a*symbol + b`.
struct linear_form {
  std::string symbol;
  std::int64_t a = 0, b = 0;
};
/// The linear form of an expression in exactly one symbol; nullopt otherwise (constants too).
[[nodiscard]] inline std::optional<linear_form> as_linear(const sym_int& e) {
  if (e.is_constant()) return std::nullopt;
  auto p = detail::to_poly(e);
  if (p.terms.size() != 1) return std::nullopt;
  const auto& t = p.terms.begin()->second;
  if (t.factors.size() != 1 || t.factors[0].power != 1 || !detail::is_kind(t.factors[0].atom, detail::sym_kind::symbol))
    return std::nullopt;
  return linear_form{detail::node_of(t.factors[0].atom).name, t.coeff, p.c};
}

}  // namespace sym

namespace detail {

/// Recursive descent over the text str() prints (Python precedence) and over sympy's srepr
/// (`Add(Mul(Integer(2), Symbol('s0', integer=True, positive=True)), Integer(1))`, as torch.export
/// writes `expr_str`). The text comes from files: nesting is limited (no unbounded recursion),
/// exponents are small, and every error names the offset.
struct sym_parser {
  std::string_view text;
  const std::function<std::optional<sym_int>(std::string_view)>& symbol_of;
  std::size_t pos = 0;
  int depth = 0;

  static constexpr int max_depth = 128;
  static constexpr std::int64_t max_power = 8;
  static constexpr std::size_t max_terms = 4096;  // a product may not expand past this

  [[noreturn]] void fail(const std::string& what, std::size_t at) const {
    const bool cut = text.size() > 240;
    throw graph_error("xport.sym.parse", what + " at offset " + std::to_string(at) + " in '" +
                                             std::string(text.substr(0, 240)) + (cut ? "...'" : "'"));
  }
  struct nest {  // one level of nesting, refused past max_depth
    sym_parser& p;
    explicit nest(sym_parser& q) : p(q) {
      if (++p.depth > max_depth) p.fail("expression nested deeper than " + std::to_string(max_depth) + " levels", p.pos);
    }
    ~nest() { --p.depth; }
    nest(const nest&) = delete;
    nest& operator=(const nest&) = delete;
  };
  void skip() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n')) ++pos;
  }
  bool eat(std::string_view tok) {
    skip();
    if (text.substr(pos, tok.size()) != tok) return false;
    pos += tok.size();
    return true;
  }
  void expect(std::string_view tok) {
    if (!eat(tok)) fail("expected '" + std::string(tok) + "'", pos);
  }
  static bool ident_char(char ch) {
    return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
  }
  sym_int expr() {
    nest n(*this);
    sym_int r = term();
    for (;;) {
      const std::size_t at = pos;
      if (eat("+")) r = sized(sym::add(r, term()), at);
      else if (eat("-")) r = sized(sym::sub(r, term()), at);
      else return r;
    }
  }
  sym_int term() {
    sym_int r = unary();
    for (;;) {
      skip();
      const std::size_t at = pos;
      if (eat("*")) r = times(r, unary(), at);
      else if (eat("//")) r = sym::floordiv(r, unary());
      else if (eat("%")) r = sym::mod(r, unary());
      else return r;
    }
  }
  sym_int unary() {
    bool negative = false;
    for (;;) {
      if (eat("-")) negative = !negative;
      else if (!eat("+")) break;
    }
    sym_int r = power();
    return negative ? sym::sub(0, r) : r;
  }
  static std::size_t terms_of(const sym_int& e) {
    if (e.is_constant()) return 1;
    const auto& n = node_of(e);
    return n.kind == sym_kind::poly ? n.terms.size() + 1 : 1;
  }
  sym_int sized(sym_int e, std::size_t at) const {
    if (terms_of(e) > max_terms) fail("sum too large (more than " + std::to_string(max_terms) + " terms)", at);
    return e;
  }
  sym_int times(const sym_int& a, const sym_int& b, std::size_t at) {
    if (terms_of(a) * terms_of(b) > max_terms)
      fail("product too large to expand (more than " + std::to_string(max_terms) + " terms)", at);
    return sym::mul(a, b);
  }
  sym_int pow(const sym_int& base, const sym_int& e, std::size_t at) {
    if (!e.is_constant() || e.hint() < 0 || e.hint() > max_power)
      fail("expected an integer exponent in [0, " + std::to_string(max_power) + "]", at);
    sym_int r = 1;
    for (std::int64_t i = 0; i < e.hint(); ++i) r = times(r, base, at);
    return r;
  }
  sym_int power() {
    sym_int base = primary();
    if (!eat("**")) return base;
    nest n(*this);
    std::size_t at = pos;
    return pow(base, unary(), at);
  }
  std::int64_t integer_literal() {
    skip();
    const std::size_t at = pos;
    const bool negative = pos < text.size() && text[pos] == '-';
    if (negative) ++pos;
    if (pos == text.size() || text[pos] < '0' || text[pos] > '9') fail("expected an integer", at);
    std::int64_t v = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text[pos++] - '0', &v))
        fail("integer literal out of range", at);
    return negative ? -v : v;
  }
  // srepr's `Symbol('s0', integer=True, positive=True)`: the name, then assumptions (ignored:
  // every size symbol is an integer)
  sym_int symbol_call(std::size_t at) {
    skip();
    const char q = pos < text.size() ? text[pos] : '\0';
    if (q != '\'' && q != '"') fail("expected a quoted symbol name", pos);
    const std::size_t begin = ++pos;
    while (pos < text.size() && ident_char(text[pos])) ++pos;
    if (pos == text.size() || text[pos] != q) fail("expected a symbol name (an identifier)", begin);
    const std::string_view name = text.substr(begin, pos - begin);
    ++pos;
    while (eat(",")) {
      skip();
      const std::size_t k = pos;
      while (pos < text.size() && ident_char(text[pos])) ++pos;
      if (k == pos) fail("expected an assumption (name=True)", k);
      expect("=");
      if (!eat("True") && !eat("False")) fail("expected True or False", pos);
    }
    expect(")");
    if (name.empty() || (name[0] >= '0' && name[0] <= '9')) fail("symbol name '" + std::string(name) + "' is not an identifier", begin);
    auto s = symbol_of(name);
    if (!s) fail("unknown symbol '" + std::string(name) + "'", at);
    return *s;
  }
  // `Name(` has been read: the function's arguments and its value
  sym_int call(std::string_view name, std::size_t at) {
    if (name == "Integer") {
      const auto v = integer_literal();
      expect(")");
      return v;
    }
    if (name == "Symbol") return symbol_call(at);
    enum class fn { add, mul, pow, floordiv, mod, min, max, ceildiv, modular_indexing, identity };
    static constexpr std::pair<std::string_view, fn> table[] = {
        {"Add", fn::add},           {"Mul", fn::mul},       {"Pow", fn::pow},          {"FloorDiv", fn::floordiv},
        {"CleanDiv", fn::floordiv}, {"Mod", fn::mod},       {"PythonMod", fn::mod},    {"Min", fn::min},
        {"Max", fn::max},           {"CeilDiv", fn::ceildiv}, {"ModularIndexing", fn::modular_indexing},
        {"Identity", fn::identity}};
    const std::pair<std::string_view, fn>* f = nullptr;
    for (const auto& e : table)
      if (e.first == name) f = &e;
    if (!f) fail("unknown function '" + std::string(name) + "'", at);
    std::vector<sym_int> args{expr()};
    while (eat(",")) args.push_back(expr());
    expect(")");
    const std::size_t want = f->second == fn::identity ? 1 : f->second == fn::modular_indexing ? 3
                             : (f->second == fn::add || f->second == fn::mul || f->second == fn::min || f->second == fn::max) ? 0
                                                                                                                            : 2;
    if (want ? args.size() != want : args.empty()) fail("wrong number of arguments to " + std::string(name), at);
    sym_int r = args[0];
    switch (f->second) {
      case fn::identity: return r;
      case fn::pow: return pow(args[0], args[1], at);
      case fn::floordiv: return sym::floordiv(args[0], args[1]);
      case fn::mod: return sym::mod(args[0], args[1]);
      case fn::ceildiv: return sym::sub(0, sym::floordiv(sym::sub(0, args[0]), args[1]));
      case fn::modular_indexing: return sym::mod(sym::floordiv(args[0], args[1]), args[2]);
      default: break;
    }
    for (std::size_t i = 1; i < args.size(); ++i) {
      switch (f->second) {
        case fn::add: r = sized(sym::add(r, args[i]), at); break;
        case fn::mul: r = times(r, args[i], at); break;
        case fn::min: r = sym::min(r, args[i]); break;
        default: r = sym::max(r, args[i]); break;
      }
    }
    return r;
  }
  sym_int primary() {
    skip();
    std::size_t at = pos;
    if (pos == text.size()) fail("unexpected end of text", at);
    char c = text[pos];
    if (c == '(') {
      ++pos;
      sym_int r = expr();
      expect(")");
      return r;
    }
    if (c >= '0' && c <= '9') return integer_literal();
    if (!ident_char(c)) fail(std::string("unexpected character '") + c + "'", at);
    while (pos < text.size() && ident_char(text[pos])) ++pos;
    std::string_view name = text.substr(at, pos - at);
    skip();
    if (pos < text.size() && text[pos] == '(') {
      ++pos;
      return call(name, at);
    }
    auto s = symbol_of(name);
    if (!s) fail("unknown symbol '" + std::string(name) + "'", at);
    return *s;
  }
};

}  // namespace detail

namespace sym {

/// Parses what str() prints back (`2*s0 + 1`, `((s0 - 3)//2)`, `Min(4, s0)`, `Mod(s0, 2)`) and what
/// srepr() prints (torch.export's `expr_str`: `Add(FloorDiv(Symbol('s0', ...), Integer(2)),
/// Integer(1))`, with sympy's and torch's integer functions: Add, Mul, Pow, FloorDiv, CleanDiv,
/// Mod, PythonMod, CeilDiv, ModularIndexing, Min, Max, Identity); symbols resolve through
/// `symbol_of`. Bad text throws graph_error naming the offset; nesting deeper than 128 levels
/// is refused.
[[nodiscard]] inline sym_int parse(std::string_view text,
                                   const std::function<std::optional<sym_int>(std::string_view)>& symbol_of) {
  detail::sym_parser p{text, symbol_of};
  sym_int r = p.expr();
  p.skip();
  if (p.pos != text.size()) p.fail("unexpected text", p.pos);
  return r;
}

}  // namespace sym

// ---- operators (found by ADL) -----------------------------------------------------------------------

[[nodiscard]] inline sym_int operator+(const sym_int& a, const sym_int& b) { return sym::add(a, b); }
[[nodiscard]] inline sym_int operator+(const sym_int& a, std::int64_t b) { return sym::add(a, b); }
[[nodiscard]] inline sym_int operator+(std::int64_t a, const sym_int& b) { return sym::add(a, b); }
[[nodiscard]] inline sym_int operator-(const sym_int& a, const sym_int& b) { return sym::sub(a, b); }
[[nodiscard]] inline sym_int operator-(const sym_int& a, std::int64_t b) { return sym::sub(a, b); }
[[nodiscard]] inline sym_int operator-(std::int64_t a, const sym_int& b) { return sym::sub(a, b); }
[[nodiscard]] inline sym_int operator-(const sym_int& a) { return sym::sub(0, a); }
[[nodiscard]] inline sym_int operator*(const sym_int& a, const sym_int& b) { return sym::mul(a, b); }
[[nodiscard]] inline sym_int operator*(const sym_int& a, std::int64_t b) { return sym::mul(a, b); }
[[nodiscard]] inline sym_int operator*(std::int64_t a, const sym_int& b) { return sym::mul(a, b); }

XPORT_END_NAMESPACE
// #include <xport/ir/tensor_meta.hpp>
// xport/ir/tensor_meta.hpp: what the graph knows about a tensor without its data.
// dtype, symbolic sizes and strides, storage offset, device, layout, requires_grad: the
// FakeTensor of torch.export, held as plain data. Printing: `annotation()` -> `f32[10, 10]`.

#include <algorithm>  // std::max
#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include <ATen/core/TensorBase.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

// #include <xport/config.hpp>
// #include <xport/ir/dtype.hpp>
// #include <xport/ir/sym_int.hpp>

XPORT_BEGIN_NAMESPACE

/// Sizes or strides: inline storage for up to 5 dimensions (no allocation for most tensors).
using sym_shape = c10::SmallVector<sym_int, 5>;

struct tensor_meta {
  c10::ScalarType dtype = c10::ScalarType::Float;
  sym_shape sizes;
  sym_shape strides;
  sym_int storage_offset = 0;
  c10::Device device = c10::Device(c10::kCPU);
  c10::Layout layout = c10::kStrided;
  bool requires_grad = false;

  /// Meta of a contiguous tensor of the given sizes.
  static tensor_meta contiguous(c10::ScalarType dtype, sym_shape sizes,
                                c10::Device device = c10::Device(c10::kCPU)) {
    tensor_meta m;
    m.dtype = dtype;
    m.device = device;
    m.strides.resize(sizes.size());
    std::int64_t stride = 1;
    for (std::size_t i = sizes.size(); i-- > 0;) {
      m.strides[i] = stride;
      stride *= std::max<std::int64_t>(sizes[i].hint(), 1);
    }
    m.sizes = std::move(sizes);
    return m;
  }

  /// Meta of a real (or meta) tensor.
  static tensor_meta of(const at::TensorBase& t) {
    tensor_meta m;
    m.dtype = t.scalar_type();
    m.sizes.assign(t.sizes().begin(), t.sizes().end());
    if (t.layout() == c10::kStrided) {
      m.strides.assign(t.strides().begin(), t.strides().end());
      m.storage_offset = t.storage_offset();
    }
    m.device = t.device();
    m.layout = t.layout();
    m.requires_grad = t.requires_grad();
    return m;
  }

  [[nodiscard]] std::int64_t dim() const noexcept { return static_cast<std::int64_t>(sizes.size()); }

  /// Sizes as example values (hints for symbolic sizes).
  [[nodiscard]] std::vector<std::int64_t> size_hints() const {
    std::vector<std::int64_t> out;
    out.reserve(sizes.size());
    for (const auto& s : sizes) out.push_back(s.hint());
    return out;
  }
  [[nodiscard]] std::vector<std::int64_t> stride_hints() const {
    std::vector<std::int64_t> out;
    out.reserve(strides.size());
    for (const auto& s : strides) out.push_back(s.hint());
    return out;
  }

  /// A tensor on the meta device with these properties (sizes at their hints).
  [[nodiscard]] at::Tensor make_meta() const {
    const auto st = strides.size() == sizes.size() ? stride_hints()
                                                    : contiguous(dtype, sizes).stride_hints();
    auto t = at::empty_strided(size_hints(), st, at::TensorOptions().dtype(dtype).device(c10::kMeta));
    return t;
  }

  /// `f32[10, 10]`, as torch.fx annotates a tensor.
  [[nodiscard]] std::string annotation() const {
    std::string s = dtype_abbr(dtype);
    s += '[';
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (i) s += ", ";
      s += sizes[i].str();
    }
    s += ']';
    return s;
  }

  friend bool operator==(const tensor_meta&, const tensor_meta&) = default;
};

XPORT_END_NAMESPACE
// #include <xport/ir/op.hpp>
// xport/ir/op.hpp: operators as the graph refers to them.
// An op_info is resolved once per operator overload (name -> c10::OperatorHandle + schema) and
// interned for the life of the process; nodes hold a pointer to it. Lookup accepts
// `aten::add.Tensor`, `aten::add` (the default overload), `aten.add.Tensor`,
// `torch.ops.aten.add.Tensor` and `aten::add.default`. The operators torch calls higher-order
// (`torch.ops.higher_order.cond`, ...) are registered with the dispatcher on their first lookup
// (by the hook ops/higher_order.hpp installs), so that every part of xport treats them as operators.

#include <atomic>         // std::atomic
#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint8_t
#include <memory>         // std::unique_ptr
#include <mutex>          // std::mutex, std::lock_guard
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

// #include <xport/config.hpp>
// #include <xport/detail/compat.hpp>
// xport/detail/compat.hpp: the version tests every LibTorch difference is written against.
// LibTorch 2.13 (the pip wheel) is the primary build, Debian's 1.13 (Debian 12) the second;
// Debian 13's 2.6 builds too. Code that differs by version tests these macros (never
// TORCH_VERSION_* directly), so `grep XPORT_HAS_` and `grep XPORT_TORCH_VERSION` find every
// difference. They are internal: the umbrella header undefines them at its end.

#include <string>  // std::string

#include <torch/version.h>

// #include <xport/config.hpp>

#define XPORT_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||                \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/// LibTorch's functionalization with view replay (FunctionalTensorWrapper, reapply_views), the
/// `core` operator tag and the `_native_batch_norm_legit` family, which torch.export's own
/// run_decompositions() is built on: xport lowers with them (lower/decompose.hpp). 1.13 has
/// neither the tag nor functional BatchNorm statistics: xport's own functionalizer serves it.
#define XPORT_HAS_TORCH_FUNCTIONALIZATION XPORT_TORCH_VERSION_AT_LEAST(2, 1)

/// LibTorch's choice of a convolution's backend (`at::native::select_conv_backend` over SymInts)
/// and of the memory format it writes (`_determine_backend_memory_format`), which torch's fake
/// convolution asks (ops/conv_layout.hpp).
#define XPORT_HAS_CONV_BACKEND_SELECTION XPORT_TORCH_VERSION_AT_LEAST(2, 1)

XPORT_BEGIN_NAMESPACE
namespace detail {

/// "1.13.1": the LibTorch xport was compiled against, named in errors about missing ops.
inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/error.hpp>

XPORT_BEGIN_NAMESPACE

/// One resolved operator overload.
struct op_info {
  c10::OperatorHandle handle;
  std::string name;       ///< "aten::add"
  std::string overload;   ///< "Tensor"; empty for the default overload
  std::string qualified;  ///< "aten::add.Tensor" ("aten::sin" for a default overload)
  std::string target;     ///< "torch.ops.aten.add.Tensor" / "torch.ops.aten.sin.default"
  std::string packet;     ///< "add": the overload packet, used to name nodes
  bool is_mutable = false;    ///< some argument is written to (in-place and out= ops)
  bool returns_list = false;  ///< the single return is a Tensor[]
  bool is_view = false;       ///< some return aliases an argument without writing to it
  /// Draws random numbers (torch's `nondeterministic_seeded` tag): never merged or removed.
  bool nondeterministic = false;
  /// Changes only its argument's metadata (torch's `inplace_view` tag: transpose_, squeeze_, ...).
  bool inplace_view = false;
  /// Position of the `device` argument, or -1.
  int device_arg = -1;
  /// Position of the `pin_memory` argument, or -1.
  int pin_memory_arg = -1;
  /// No argument is a tensor (or a list of them): a factory like `ones`, `arange`.
  bool is_factory = false;
  /// A control-flow operator (`torch.ops.higher_order.cond`): some arguments are subgraphs.
  bool higher_order = false;
  /// Whether running the op on meta tensors works (0: not tried, 1: works, 2: no meta kernel, use
  /// a shape rule). Learned once: a failed meta run costs a C++ exception with a backtrace.
  mutable std::atomic<std::uint8_t> meta_support{0};

  [[nodiscard]] const c10::FunctionSchema& schema() const { return handle.schema(); }
  [[nodiscard]] std::size_t num_returns() const { return schema().returns().size(); }
};

namespace detail {

struct op_name_parts {
  std::string ns, name, overload;
};

// "torch.ops.aten.add.Tensor" | "aten.add.Tensor" | "aten::add.Tensor" | "aten::add"
inline op_name_parts split_op_name(std::string_view s) {
  op_name_parts p;
  if (s.substr(0, 10) == "torch.ops.") s.remove_prefix(10);
  if (auto c = s.find("::"); c != std::string_view::npos) {
    p.ns = std::string(s.substr(0, c));
    s.remove_prefix(c + 2);
    if (auto d = s.find('.'); d != std::string_view::npos) {
      p.name = std::string(s.substr(0, d));
      p.overload = std::string(s.substr(d + 1));
    } else {
      p.name = std::string(s);
    }
  } else {
    auto d1 = s.find('.');
    p.ns = std::string(s.substr(0, d1));
    if (d1 != std::string_view::npos) {
      s.remove_prefix(d1 + 1);
      auto d2 = s.find('.');
      p.name = std::string(s.substr(0, d2));
      if (d2 != std::string_view::npos) p.overload = std::string(s.substr(d2 + 1));
    }
  }
  if (p.overload == "default") p.overload.clear();
  return p;
}

class op_registry {
 public:
  static op_registry& instance() {
    static op_registry r;
    return r;
  }

  const op_info* find(std::string_view text);

 private:
  static void fill(op_info& op, const op_name_parts& p);

  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<op_info>> by_key_;
  std::unordered_map<std::string, const op_info*> by_text_;
};

/// A compiled subgraph, as a control-flow operator's kernel receives it: a pure function of its
/// operands (run/interpreter.hpp makes them). Passed through the dispatcher inside a capsule.
struct subgraph_fn : torch::CustomClassHolder {
  [[nodiscard]] virtual std::vector<at::Tensor> call(std::vector<at::Tensor> operands) const = 0;
};

inline const subgraph_fn& subgraph_fn_of(const c10::IValue& v, const char* op, const char* role) {
  const auto* fn = v.isCapsule() ? dynamic_cast<const subgraph_fn*>(v.toCapsule().get()) : nullptr;
  if (!fn)
    throw run_error("xport.run.subgraph", std::string("higher_order::") + op + " was called with a " + role +
                                              " that is not a compiled subgraph: run the program with xport's "
                                              "interpreter or engine, which pass its branches");
  return *fn;
}

using higher_order_registrar_fn = void (*)();
/// Registers the higher-order operators (torch.ops.higher_order.*) with the dispatcher, set by
/// ops/higher_order.hpp, whose descriptors they come from; called on the first lookup of one.
inline higher_order_registrar_fn& higher_order_registrar() {
  static higher_order_registrar_fn fn = nullptr;
  return fn;
}
inline void set_higher_order_registrar(higher_order_registrar_fn fn) { higher_order_registrar() = fn; }

inline const op_info* op_registry::find(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = by_text_.find(std::string(text)); it != by_text_.end()) return it->second;
  auto parts = split_op_name(text);
  if (parts.ns.empty() || parts.name.empty()) return nullptr;
  if (parts.ns == "higher_order" && higher_order_registrar()) higher_order_registrar()();
  std::string key = parts.ns + "::" + parts.name + "." + parts.overload;
  const op_info* info = nullptr;
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    info = it->second.get();
  } else {
    auto handle = c10::Dispatcher::singleton().findSchema(
        {parts.ns + "::" + parts.name, parts.overload});
    if (!handle) return nullptr;
    std::unique_ptr<op_info> op(new op_info{*handle, {}, {}, {}, {}, {}, false, false, false, false, false, -1, -1, false, false, {0}});
    fill(*op, parts);
    info = op.get();
    by_key_.emplace(std::move(key), std::move(op));
  }
  by_text_.emplace(std::string(text), info);
  return info;
}

inline void op_registry::fill(op_info& op, const op_name_parts& p) {
  const auto& schema = op.handle.schema();
  op.name = p.ns + "::" + p.name;
  op.overload = p.overload;
  op.qualified = p.overload.empty() ? op.name : op.name + "." + p.overload;
  op.target = "torch.ops." + p.ns + "." + p.name + "." + (p.overload.empty() ? "default" : p.overload);
  op.packet = p.name;
  op.is_mutable = schema.is_mutable();
  const auto& rets = schema.returns();
  op.returns_list = rets.size() == 1 && rets[0].type()->kind() == c10::TypeKind::ListType;
  for (const auto& r : rets)
    if (r.alias_info() && !r.alias_info()->isWrite()) op.is_view = true;
  // the tag, and the dropout family (composite ops the tag misses in LibTorch 1.13)
  op.nondeterministic = op.handle.hasTag(at::Tag::nondeterministic_seeded) || p.name.find("dropout") != std::string::npos ||
                        p.name == "rrelu" || p.name == "rrelu_with_noise";
  op.inplace_view = op.handle.hasTag(at::Tag::inplace_view);
  const auto& params = schema.arguments();
  op.is_factory = true;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].name() == "device") op.device_arg = static_cast<int>(i);
    if (params[i].name() == "pin_memory") op.pin_memory_arg = static_cast<int>(i);
    auto t = params[i].real_type();
    if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
    if (t->kind() == c10::TypeKind::ListType) t = t->castRaw<c10::ListType>()->getElementType();
    if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
    if (t->kind() == c10::TypeKind::TensorType) op.is_factory = false;
  }
  if (p.ns == "higher_order") {  // torch names them without an overload
    op.higher_order = true;
    op.target = "torch.ops.higher_order." + p.name;
  }
}

}  // namespace detail

/// The operator named `name`, or nullptr when this LibTorch has no such operator overload.
inline const op_info* try_find_op(std::string_view name) {
  return detail::op_registry::instance().find(name);
}

/// The operator named `name`; throws schema_error naming the op (and its known overloads).
inline const op_info& find_op(std::string_view name) {
  if (const auto* op = try_find_op(name)) return *op;
  const auto parts = detail::split_op_name(name);
  std::string msg = "no operator '" + std::string(name) + "' is registered in this LibTorch (" +
                    detail::torch_version() + ")";
  std::vector<std::string> overloads;
  const std::string full = parts.ns + "::" + parts.name;
  for (const auto& n : c10::Dispatcher::singleton().getAllOpNames())
    if (n.name == full) overloads.push_back(n.overload_name.empty() ? full : full + "." + n.overload_name);
  if (!overloads.empty()) {
    msg += "; known overloads of " + full + ":";
    for (const auto& o : overloads) msg += " " + o;
  } else {
    msg += "; write it as 'namespace::name.overload', e.g. 'aten::add.Tensor'";
  }
  throw schema_error("xport.op.unknown", msg);
}

/// The overload Python's torch calls for the same computation. Python binds no `.Scalar`
/// overloads of add, sub, mul and div: `x * 2` is `mul.Tensor(x, 2)` there, and the C++
/// `.Scalar` kernels only wrap the scalar and call the `.Tensor` overload. Captures record the
/// `.Tensor` overload, so programs exported from C++ read as torch.export's do.
inline const op_info& python_overload(const op_info& op) {
  if (op.overload.rfind("Scalar", 0) != 0) return op;
  static const auto table = [] {
    std::vector<std::pair<const op_info*, const op_info*>> t;
    for (const char* name : {"add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_"}) {
      const std::string n = std::string("aten::") + name;
      t.emplace_back(&find_op(n + ".Scalar"), &find_op(n + ".Tensor"));
      if (n.rfind("aten::div", 0) == 0) t.emplace_back(&find_op(n + ".Scalar_mode"), &find_op(n + ".Tensor_mode"));
    }
    return t;
  }();
  for (const auto& [from, to] : table)
    if (from == &op) return *to;
  return op;
}

XPORT_END_NAMESPACE
// #include <xport/ir/graph.hpp>
// xport/ir/graph.hpp: the graph IR: graph, node, value, argument, use lists.
// The graph owns every node and value; `node` and `value` are one-pointer handles with value
// semantics (copyable, comparable, hashable). Node kinds follow torch.fx: placeholder,
// call_function, output. A call node holds its operator (op_info), its arguments in schema
// order (defaults filled), one value per output, and metadata (source location, module path,
// and one object of the user's own type: node.custom_meta<T>(), torch.fx's `node.meta`).
// `graph` is `basic_graph<>`; `basic_graph<Policy>` (after the core class) names the node
// metadata type and the memory resource of a user's graphs. Not here: building programs from op names (builder.hpp), checking (verify.hpp), printing.

#include <cstddef>      // std::size_t
#include <concepts>     // std::copy_constructible, std::default_initializable
#include <cstdint>      // std::int64_t, std::uint32_t, std::uint64_t
#include <functional>   // std::hash
#include <initializer_list>  // std::initializer_list
#include <iterator>     // std::forward_iterator_tag
#include <memory>       // std::unique_ptr, std::shared_ptr
#include <memory_resource>  // std::pmr::memory_resource
#include <optional>     // std::optional, std::nullopt_t
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <type_traits>  // std::is_same_v
#include <typeinfo>     // std::type_info
#include <unordered_map>  // std::unordered_map
#include <utility>      // std::move, std::exchange, std::pair
#include <variant>      // std::variant
#include <vector>       // std::vector

#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>
#include <c10/util/Type.h>  // c10::demangle

// #include <xport/config.hpp>
// #include <xport/detail/names.hpp>
// xport/detail/names.hpp: unique value names, chosen the way torch.fx chooses them.
// `add`, `add_1`, `add_2`; Python keywords and builtins are never used bare (`sum` -> `sum_1`),
// so printed programs read exactly as torch.export prints the same program.

#include <algorithm>      // std::binary_search
#include <array>          // std::array
#include <cstdint>        // std::int64_t
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

// Python 3 keywords and lower-case builtins, plus the globals torch.fx registers (inf, nan,
// NoneType, torch, device, fx_pytree, pytree) and `self`. Sorted for binary search.
inline constexpr std::array<std::string_view, 126> reserved_python_names{
    "False", "None", "NoneType", "True", "__build_class__", "__debug__", "__doc__", "__import__",
    "__loader__", "__name__", "__package__", "__spec__", "abs", "aiter", "all", "and", "anext",
    "any", "as", "ascii", "assert", "async", "await", "bin", "bool", "break", "breakpoint",
    "bytearray", "bytes", "callable", "chr", "class", "classmethod", "compile", "complex",
    "continue", "copyright", "credits", "def", "del", "delattr", "device", "dict", "dir", "divmod",
    "elif", "else", "enumerate", "eval", "except", "exec", "exit", "filter", "finally", "float",
    "for", "format", "from", "frozenset", "fx_pytree", "getattr", "global", "globals", "hasattr",
    "hash", "help", "hex", "id", "if", "import", "in", "inf", "input", "int", "is", "isinstance",
    "issubclass", "iter", "lambda", "len", "license", "list", "locals", "map", "max", "memoryview",
    "min", "nan", "next", "nonlocal", "not", "object", "oct", "open", "or", "ord", "pass", "pow",
    "print", "property", "pytree", "quit", "raise", "range", "repr", "return", "reversed", "round",
    "self", "set", "setattr", "slice", "sorted", "staticmethod", "str", "sum", "super", "torch",
    "try", "tuple", "type", "vars", "while", "with", "yield", "zip"
};

inline bool is_reserved_python_name(std::string_view s) {
  if (!s.empty() && s.front() >= 'A' && s.front() <= 'Z') {
    // Exception and warning classes: every builtin starting with a capital letter other than
    // the three constants is an exception type.
    return s == "False" || s == "None" || s == "True" || s == "NoneType" ||
           s.ends_with("Error") || s.ends_with("Exception") || s.ends_with("Warning") ||
           s == "BaseException" || s == "BaseExceptionGroup" || s == "ExceptionGroup" ||
           s == "Ellipsis" || s == "NotImplemented" || s == "GeneratorExit" ||
           s == "KeyboardInterrupt" || s == "StopIteration" || s == "StopAsyncIteration" ||
           s == "SystemExit";
  }
  return std::binary_search(reserved_python_names.begin(), reserved_python_names.end(), s);
}

/// Python's keywords, and `self` (forward's first parameter): never a value's name.
inline bool is_python_keyword(std::string_view s) {
  static constexpr std::array<std::string_view, 36> keywords{
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def",
      "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is",
      "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "self", "try", "while", "with", "yield"};
  return std::binary_search(keywords.begin(), keywords.end(), s);
}

/// `_snake_case` + illegal-character cleanup of torch.fx: `pascalCase` -> `pascal_case`,
/// characters outside [0-9a-zA-Z_] -> `_`, a leading digit gets a `_` prefix.
inline std::string sanitize_name(std::string_view candidate) {
  std::string out;
  out.reserve(candidate.size() + 1);
  char prev = 0;
  bool in_bad_run = false;
  for (char c : candidate) {
    const bool lower = c >= 'a' && c <= 'z';
    const bool upper = c >= 'A' && c <= 'Z';
    const bool digit = c >= '0' && c <= '9';
    if (upper && prev >= 'a' && prev <= 'z') out += '_';
    if (lower || upper || digit || c == '_') {
      out += upper ? static_cast<char>(c - 'A' + 'a') : c;
      in_bad_run = false;
    } else if (!in_bad_run) {
      out += '_';
      in_bad_run = true;
    }
    prev = c;
  }
  if (out.empty()) out = "_unnamed";
  if (out.front() >= '0' && out.front() <= '9') out.insert(out.begin(), '_');
  return out;
}

/// Lower-case identifiers need no sanitizing (the common case: op packet names).
inline bool is_clean(std::string_view s) {
  if (s.empty() || (s.front() >= '0' && s.front() <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

inline bool ends_with_number(std::string_view s) {
  const auto us = s.rfind('_');
  if (us == std::string_view::npos || us + 1 == s.size()) return false;
  for (std::size_t i = us + 1; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

/// The names in use in one graph, and the next suffix per base name (torch.fx `_Namespace`).
/// One hash table serves both: an entry per string says whether it is a used name and, as a
/// base, the last suffix given out.
class name_table {
 public:
  /// A fresh name derived from `candidate`; records it as used.
  std::string create(std::string_view candidate) {
    const bool clean = is_clean(candidate);
    if (clean && !ends_with_number(candidate) && !is_reserved_python_name(candidate)) {
      // common case: `add`, `add`, `add`... -> add, add_1, add_2
      auto& base = table_[std::string(candidate)];
      if (!base.used) {
        base.used = true;
        base.count = 0;
        return std::string(candidate);
      }
      std::int64_t num = base.count < 0 ? 0 : base.count;  // claimed exactly, never a base yet
      std::string name;
      do {
        name = std::string(candidate) + "_" + std::to_string(++num);
      } while (!mark_used(name));
      table_[std::string(candidate)].count = num;
      return name;
    }
    std::string name = clean ? std::string(candidate) : sanitize_name(candidate);
    // split "base_<digits>"
    std::string base = name;
    std::int64_t num = -1;
    if (auto us = name.rfind('_'); us != std::string::npos && us + 1 < name.size() && us > 0) {
      bool digits = true;
      for (std::size_t i = us + 1; i < name.size(); ++i) digits = digits && name[i] >= '0' && name[i] <= '9';
      if (digits && name.size() - us - 1 < 18) {
        base = name.substr(0, us);
        num = std::stoll(name.substr(us + 1));
      }
    }
    if (num < 0 || is_used(name)) {
      const auto it = table_.find(name);
      num = it == table_.end() || it->second.count < 0 ? 0 : it->second.count;
      if (is_reserved_python_name(name)) {
        ++num;
        name = base + "_" + std::to_string(num);
      }
    }
    while (!mark_used(name)) {
      ++num;
      name = base + "_" + std::to_string(num);
    }
    table_[base].count = num;
    return name;
  }

  /// Claims `name` exactly; false when it is taken or a Python keyword (or `self`). A builtin's
  /// name is claimed: torch names a user input after its argument, `input` included, and keeps
  /// it so in its files; only names xport makes up (create) avoid builtins.
  bool claim(const std::string& name) {
    if (is_python_keyword(name)) return false;
    return mark_used(name);
  }

  void release(const std::string& name) {
    if (auto it = table_.find(name); it != table_.end()) it->second.used = false;
  }
  [[nodiscard]] bool contains(const std::string& name) const { return is_used(name); }

 private:
  struct entry {
    bool used = false;
    std::int64_t count = -1;  // as a base: the last suffix given out
  };
  bool is_used(const std::string& name) const {
    const auto it = table_.find(name);
    return it != table_.end() && it->second.used;
  }
  bool mark_used(const std::string& name) {
    auto& e = table_[name];
    if (e.used) return false;
    e.used = true;
    return true;
  }

  std::unordered_map<std::string, entry> table_;
};

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/detail/pool.hpp>
// xport/detail/pool.hpp: a typed object pool, the storage of a graph's nodes and values.
// Objects are carved from chunks, so a graph's nodes sit close together in creation order
// (passes walk them with few cache misses), creation costs no malloc most of the time, and
// erased objects are reused through a free list. Objects never move. Chunks come from a
// std::pmr::memory_resource (a graph policy's, else new/delete); each chunk remembers the
// resource it came from, so a graph that steals another's nodes frees every chunk correctly.

#include <cstddef>          // std::byte, std::size_t
#include <memory_resource>  // std::pmr::memory_resource, std::pmr::new_delete_resource
#include <new>              // placement new
#include <utility>          // std::forward, std::exchange
#include <vector>           // std::vector

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

template <class T, std::size_t ChunkObjects = 256>
class object_pool {
 public:
  object_pool() = default;
  explicit object_pool(std::pmr::memory_resource* r) noexcept : resource_(r) {}
  object_pool(const object_pool&) = delete;
  object_pool& operator=(const object_pool&) = delete;
  object_pool(object_pool&& o) noexcept
      : chunks_(std::move(o.chunks_)), free_(std::exchange(o.free_, nullptr)),
        next_(std::exchange(o.next_, ChunkObjects)), live_(std::exchange(o.live_, 0)), resource_(o.resource_) {}
  /// Takes `o`'s objects; the resource new chunks come from stays this pool's own.
  object_pool& operator=(object_pool&& o) noexcept {
    if (this == &o) return *this;
    release();
    chunks_ = std::move(o.chunks_);
    free_ = std::exchange(o.free_, nullptr);
    next_ = std::exchange(o.next_, ChunkObjects);
    live_ = std::exchange(o.live_, 0);
    return *this;
  }
  ~object_pool() { release(); }

  [[nodiscard]] std::pmr::memory_resource* resource() const noexcept { return resource_; }
  /// Where chunks made from now on come from (those already made stay where they are).
  void set_resource(std::pmr::memory_resource* r) noexcept { resource_ = r; }

  template <class... Args>
  T* create(Args&&... args) {
    slot* s = free_;
    if (s) {
      free_ = s->next;
    } else {
      if (next_ == ChunkObjects) {
        chunks_.reserve(chunks_.size() + 1);  // before allocating: nothing leaks if this throws
        void* mem = resource_->allocate(sizeof(slot) * ChunkObjects, alignof(slot));
        chunks_.push_back(chunk{static_cast<slot*>(mem), resource_});
        next_ = 0;
      }
      s = &chunks_.back().slots[next_++];
    }
    ++live_;
    return ::new (static_cast<void*>(s->storage)) T(std::forward<Args>(args)...);
  }

  void destroy(T* p) noexcept {
    p->~T();
    auto* s = reinterpret_cast<slot*>(p);
    s->next = free_;
    free_ = s;
    --live_;
  }

  /// Drops all memory; the owner has destroyed every live object.
  void release() noexcept {
    for (const auto& c : chunks_) c.from->deallocate(c.slots, sizeof(slot) * ChunkObjects, alignof(slot));
    chunks_.clear();
    free_ = nullptr;
    next_ = ChunkObjects;
    live_ = 0;
  }

  [[nodiscard]] std::size_t live() const noexcept { return live_; }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return chunks_.size() * ChunkObjects * sizeof(slot); }

 private:
  union slot {
    slot* next;
    alignas(T) std::byte storage[sizeof(T)];
  };
  struct chunk {
    slot* slots;
    std::pmr::memory_resource* from;
  };
  std::vector<chunk> chunks_;
  slot* free_ = nullptr;
  std::size_t next_ = ChunkObjects;
  std::size_t live_ = 0;
  std::pmr::memory_resource* resource_ = std::pmr::new_delete_resource();
};

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/detail/python_repr.hpp>
// xport/detail/python_repr.hpp: Python's repr() of floats and strings, and identifier checks.
// torch.export prints arguments with Python's repr, so a C++ double must print as Python prints
// the same float (`1e-05`, `0.1`, `1.0`, `inf`) for the text format to match byte for byte.

#include <charconv>     // std::to_chars
#include <cmath>        // std::isnan, std::isinf
#include <cstdio>       // std::snprintf
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <system_error> // std::errc

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Python's `repr(float)`: the shortest string that round-trips; fixed notation when the
/// decimal exponent is in [-4, 16), scientific (`1e-05`, `1.5e+16`) otherwise; `.0` added to
/// integral values in fixed notation.
inline std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<std::size_t>(res.ptr - buf));
  // sci looks like [-]d[.ddd]e(+|-)XX
  std::string sign;
  if (!sci.empty() && sci.front() == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const auto epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits += c;
  const int exp10 = std::stoi(std::string(sci.substr(epos + 1)));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;  // value = 0.d1d2... * 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<std::size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<std::size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<std::size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  const int e = decpt - 1;
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  return out + ebuf;
}

/// Python's `repr(str)` for UTF-8 text: single quotes unless the text holds a single quote and
/// no double quote; backslash escapes for quotes, backslashes and control characters.
inline std::string python_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

/// True when `s` is a valid Python identifier made of ASCII letters, digits and '_'.
inline bool is_identifier(std::string_view s) {
  if (s.empty()) return false;
  const auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s.front())) return false;
  for (char c : s)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/error.hpp>
// #include <xport/fwd.hpp>
// #include <xport/ir/op.hpp>
// #include <xport/ir/sym_int.hpp>
// #include <xport/ir/tensor_meta.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {
struct node_impl;
struct value_impl;
}  // namespace detail

enum class node_kind : std::uint8_t { placeholder, call_function, output };

/// What a value holds at run time.
enum class value_kind : std::uint8_t {
  tensor,    ///< a Tensor; its tensor_meta is known
  sym_int,   ///< an int computed in the graph (e.g. aten::sym_size.int); its sym_int is known
  sym_float,
  sym_bool,
  none,      ///< an op output that is always None
};

inline std::string_view to_string(node_kind k) {
  switch (k) {
    case node_kind::placeholder: return "placeholder";
    case node_kind::call_function: return "call_function";
    case node_kind::output: return "output";
  }
  return "?";
}

/// The type of a value: a tensor with its meta, or a symbolic scalar.
struct value_type {
  value_kind kind = value_kind::tensor;
  tensor_meta tensor;  ///< meaningful when kind == tensor
  sym_int scalar;      ///< meaningful when kind == sym_int

  static value_type of(tensor_meta m) { return {value_kind::tensor, std::move(m), {}}; }
  static value_type of_sym_int(sym_int s) { return {value_kind::sym_int, {}, std::move(s)}; }
  friend bool operator==(const value_type&, const value_type&) = default;
};

/// Where a node came from in the user's code: printed as
/// `# File: {file}:{line} in {function}, code: {code}`.
struct source_location {
  source_location() = default;
  /// (a constructor, not an aggregate: the metadata fields below may grow without a
  /// -Wmissing-field-initializers warning in code that writes `{file, line, function, code}`)
  source_location(std::string file_, std::uint32_t line_, std::string function_, std::string code_,
                  std::string custom_json_ = {}, std::string annotation_ = {})
      : file(std::move(file_)),
        line(line_),
        function(std::move(function_)),
        code(std::move(code_)),
        custom_json(std::move(custom_json_)),
        annotation(std::move(annotation_)) {}
  std::string file;
  std::uint32_t line = 0;
  std::string function;
  std::string code;
  /// torch's `custom` node metadata (user annotations, `torch.fx.traceback.annotate`, and what
  /// torch.compiler.disable marks), kept as the JSON text torch writes, and as torch prints it
  /// after `# Annotation: ` (its Python dict, each value cut at 40 characters).
  std::string custom_json;
  std::string annotation;
  friend bool operator==(const source_location&, const source_location&) = default;
};

class node;
struct use;
struct subgraph;

/// A value: a placeholder, or one output of a call node. One pointer; compare and hash freely.
class value {
 public:
  value() noexcept = default;
  explicit value(detail::value_impl* p) noexcept : p_(p) {}

  explicit operator bool() const noexcept { return p_ != nullptr; }
  [[nodiscard]] detail::value_impl* impl() const noexcept { return p_; }

  [[nodiscard]] const std::string& name() const;
  [[nodiscard]] node producer() const;
  /// The output position of this value in its producer (0 for placeholders).
  [[nodiscard]] std::size_t index() const;
  [[nodiscard]] value_kind kind() const;
  [[nodiscard]] const value_type& type() const;
  /// The tensor meta; throws graph_error when the value is not a tensor.
  [[nodiscard]] const tensor_meta& meta() const;
  void set_type(value_type t) const;
  void set_meta(tensor_meta m) const { set_type(value_type::of(std::move(m))); }

  [[nodiscard]] std::span<const use> uses() const;
  [[nodiscard]] std::size_t num_uses() const;
  /// Points every use of this value at `other` instead (Note [Use lists]).
  void replace_all_uses_with(value other) const;

  /// A word a pass may use as it likes (e.g. an index into its own table) instead of a hash
  /// map keyed by value. Not copied by clone; a pass sets it before it reads it.
  [[nodiscard]] std::uint32_t& scratch() const noexcept;

  /// Whether a getitem reads this output of a multi-output call (see value_impl::unpacked).
  [[nodiscard]] bool unpacked() const noexcept;
  void set_unpacked(bool u) const noexcept;

  friend bool operator==(value a, value b) noexcept { return a.p_ == b.p_; }

 private:
  detail::value_impl* p_ = nullptr;
};

struct none_t {
  friend bool operator==(none_t, none_t) noexcept { return true; }
};
/// The None argument.
inline constexpr none_t none{};

/// A call argument: a constant (None, bool, int, float, str, dtype, device, layout, memory
/// format), a graph value, a list of arguments, or a subgraph (a branch or body of a
/// control-flow operator). Lists keep no element type of their own: the operator's schema says
/// whether `[1, 2]` is an `int[]` or a `float[]`.
class argument {
 public:
  using list_type = std::vector<argument>;
  enum class kind : std::uint8_t {
    none, boolean, integer, floating, string, dtype, device, layout, memory_format, value, list, symbolic, graph
  };

  argument() noexcept = default;
  argument(none_t) noexcept {}                   // NOLINT
  argument(std::nullopt_t) noexcept {}           // NOLINT
  argument(bool b) noexcept : v_(b) {}           // NOLINT
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool> && !std::is_same_v<I, char>)
  argument(I i) noexcept : v_(static_cast<std::int64_t>(i)) {}  // NOLINT
  argument(double d) noexcept : v_(d) {}         // NOLINT
  argument(float d) noexcept : v_(static_cast<double>(d)) {}  // NOLINT
  argument(std::string s) : v_(std::move(s)) {}  // NOLINT
  argument(const char* s) : v_(std::string(s)) {}  // NOLINT
  argument(std::string_view s) : v_(std::string(s)) {}  // NOLINT
  argument(c10::ScalarType t) noexcept : v_(t) {}  // NOLINT
  argument(c10::Device d) noexcept : v_(d) {}    // NOLINT
  argument(c10::DeviceType d) : v_(c10::Device(d)) {}  // NOLINT
  argument(c10::Layout l) noexcept : v_(l) {}    // NOLINT
  argument(c10::MemoryFormat m) noexcept : v_(m) {}  // NOLINT
  argument(value v) noexcept : v_(v) {}          // NOLINT
  argument(const node& n);                       // NOLINT: a node with exactly one output
  argument(list_type l) : v_(std::move(l)) {}    // NOLINT
  /// A size that depends on a dynamic dimension (`s0`, `8*s0`): evaluated on every run from the
  /// inputs' sizes. A constant sym_int is stored as a plain int.
  argument(const sym_int& s) {  // NOLINT
    if (s.is_constant()) v_ = s.hint();
    else v_ = s;
  }
  argument(std::initializer_list<argument> l) : v_(list_type(l)) {}  // NOLINT
  /// A subgraph (`true_graph_0` of a cond): shared, never changed once made (see subgraph).
  argument(std::shared_ptr<const subgraph> g) noexcept : v_(std::move(g)) {}  // NOLINT
  template <class T>
    requires(!std::is_same_v<T, argument> && std::is_constructible_v<argument, const T&>)
  argument(const std::vector<T>& xs) : v_(list_type(xs.begin(), xs.end())) {}  // NOLINT
  template <class T>
  argument(const std::optional<T>& o) : argument(o ? argument(*o) : argument()) {}  // NOLINT

  [[nodiscard]] kind type() const noexcept { return static_cast<kind>(v_.index()); }
  [[nodiscard]] bool is_none() const noexcept { return type() == kind::none; }
  [[nodiscard]] bool is_bool() const noexcept { return type() == kind::boolean; }
  [[nodiscard]] bool is_int() const noexcept { return type() == kind::integer; }
  [[nodiscard]] bool is_double() const noexcept { return type() == kind::floating; }
  [[nodiscard]] bool is_string() const noexcept { return type() == kind::string; }
  [[nodiscard]] bool is_dtype() const noexcept { return type() == kind::dtype; }
  [[nodiscard]] bool is_device() const noexcept { return type() == kind::device; }
  [[nodiscard]] bool is_layout() const noexcept { return type() == kind::layout; }
  [[nodiscard]] bool is_memory_format() const noexcept { return type() == kind::memory_format; }
  [[nodiscard]] bool is_value() const noexcept { return type() == kind::value; }
  [[nodiscard]] bool is_list() const noexcept { return type() == kind::list; }
  [[nodiscard]] bool is_symbolic() const noexcept { return type() == kind::symbolic; }
  [[nodiscard]] bool is_graph() const noexcept { return type() == kind::graph; }

  [[nodiscard]] bool as_bool() const { return get<bool>(); }
  [[nodiscard]] std::int64_t as_int() const { return get<std::int64_t>(); }
  [[nodiscard]] double as_double() const { return get<double>(); }
  [[nodiscard]] const std::string& as_string() const { return get<std::string>(); }
  [[nodiscard]] c10::ScalarType as_dtype() const { return get<c10::ScalarType>(); }
  [[nodiscard]] c10::Device as_device() const { return get<c10::Device>(); }
  [[nodiscard]] c10::Layout as_layout() const { return get<c10::Layout>(); }
  [[nodiscard]] c10::MemoryFormat as_memory_format() const { return get<c10::MemoryFormat>(); }
  [[nodiscard]] value as_value() const { return get<value>(); }
  [[nodiscard]] const sym_int& as_sym() const { return get<sym_int>(); }
  [[nodiscard]] const list_type& as_list() const { return get<list_type>(); }
  [[nodiscard]] const std::shared_ptr<const subgraph>& as_graph() const { return get<std::shared_ptr<const subgraph>>(); }
  [[nodiscard]] list_type& as_list() { return std::get<list_type>(v_); }
  [[nodiscard]] value* value_slot() noexcept { return std::get_if<value>(&v_); }

  /// Calls f(value&) for every value in this argument, depth first, in order.
  template <class F>
  void for_each_value(F&& f) {
    if (auto* v = std::get_if<value>(&v_)) f(*v);
    else if (auto* l = std::get_if<list_type>(&v_))
      for (auto& a : *l) a.for_each_value(f);
  }
  template <class F>
  void for_each_value(F&& f) const {
    if (auto* v = std::get_if<value>(&v_)) f(*v);
    else if (auto* l = std::get_if<list_type>(&v_))
      for (const auto& a : *l) a.for_each_value(f);
  }

  [[nodiscard]] std::string_view type_name() const noexcept {
    constexpr std::string_view names[] = {"None", "bool", "int", "float", "str", "dtype",
                                          "device", "layout", "memory_format", "value", "list", "SymInt",
                                          "GraphModule"};
    return names[v_.index()];
  }

  friend bool operator==(const argument& a, const argument& b) { return a.v_ == b.v_; }

 private:
  template <class T>
  const T& get() const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    throw graph_error("xport.argument.type", std::string("argument holds ") +
                                                 std::string(type_name()) + ", not the type asked for");
  }

  std::variant<none_t, bool, std::int64_t, double, std::string, c10::ScalarType, c10::Device,
               c10::Layout, c10::MemoryFormat, value, list_type, sym_int, std::shared_ptr<const subgraph>>
      v_;
};

/// A keyword argument for builder calls: `{"keepdim", true}`.
struct kwarg {
  std::string name;
  argument value;
};

/// One use of a value: operand `index` of node `user`. Note [Use lists]: a use names the operand
/// position, not only the user, because `add(x, x)` uses `x` twice.
struct use {
  detail::node_impl* user_impl = nullptr;
  std::uint32_t index = 0;
  [[nodiscard]] node user() const;
  friend bool operator==(const use&, const use&) = default;
};

/// A node of the graph. One pointer; compare and hash freely.
class node {
 public:
  node() noexcept = default;
  explicit node(detail::node_impl* p) noexcept : p_(p) {}
  explicit operator bool() const noexcept { return p_ != nullptr; }
  [[nodiscard]] detail::node_impl* impl() const noexcept { return p_; }

  [[nodiscard]] node_kind kind() const;
  [[nodiscard]] bool is_placeholder() const { return kind() == node_kind::placeholder; }
  [[nodiscard]] bool is_call() const { return kind() == node_kind::call_function; }
  [[nodiscard]] bool is_output() const { return kind() == node_kind::output; }

  /// The node's name: its output's name, or for multi-output nodes the name of the tuple.
  [[nodiscard]] const std::string& name() const;
  /// The operator of a call node; throws graph_error for other kinds.
  [[nodiscard]] const op_info& op() const;
  [[nodiscard]] const op_info* op_ptr() const;
  /// `torch.ops.aten.add.Tensor`, `placeholder`, `output`.
  [[nodiscard]] std::string target() const;

  /// Arguments in schema order, defaults filled in (for output: the returned values).
  [[nodiscard]] std::span<const argument> args() const;
  /// Replaces all arguments (use lists updated).
  void set_args(std::vector<argument> args) const;

  /// Value operands, flattened in argument order (lists included).
  [[nodiscard]] std::size_t num_inputs() const;
  [[nodiscard]] value input(std::size_t i) const;
  [[nodiscard]] std::vector<value> inputs() const;
  void replace_input(std::size_t i, value v) const;
  /// Replaces every operand equal to `from` by `to`.
  void replace_input_with(value from, value to) const;

  [[nodiscard]] std::size_t num_outputs() const;
  [[nodiscard]] value output(std::size_t i) const;
  [[nodiscard]] std::vector<value> outputs() const;
  /// The single output; throws graph_error when the node has none or several.
  [[nodiscard]] value out() const;
  operator value() const { return out(); }  // NOLINT: FX nodes are values
  value operator[](std::size_t i) const { return output(i); }
  /// Whether the outputs form a tuple (or Tensor[]) rather than a single value.
  [[nodiscard]] bool has_tuple_output() const;
  /// Whether its list argument (a torch.cond's operands) is a Python tuple, as torch.export
  /// records it in a program it traced; a program it loaded holds a list (printed so).
  [[nodiscard]] bool has_tuple_operands() const;
  void set_tuple_operands(bool on) const;

  [[nodiscard]] node next() const;
  [[nodiscard]] node prev() const;
  /// Position in the node list: a before b iff a.order() < b.order().
  [[nodiscard]] std::uint64_t order() const;
  [[nodiscard]] bool is_before(node other) const { return order() < other.order(); }
  [[nodiscard]] graph& owning_graph() const;

  [[nodiscard]] const std::shared_ptr<const source_location>& source() const;
  void set_source(std::shared_ptr<const source_location> s) const;
  /// Fully qualified name of the module whose forward made this node ("" for the root).
  [[nodiscard]] const std::string& module_path() const;
  void set_module_path(std::string path) const;

  /// The user's metadata on this node (torch.fx's `node.meta`): one object of any copyable type,
  /// made by T's default constructor on first use. Passes that keep a node keep it, graph copies
  /// copy it, and the nodes lowering makes from a node (functionalize, run_decompositions,
  /// canonicalize, rewrite) start with a copy of it. Throws graph_error when the node holds an
  /// object of another type.
  template <class T>
  T& custom_meta() const;
  /// The metadata if the node holds some (nullptr otherwise); throws graph_error as above.
  template <class T>
  [[nodiscard]] T* find_custom_meta() const;
  /// Replaces the node's metadata, whatever its type was.
  template <class T>
  void set_custom_meta(T meta) const;
  [[nodiscard]] bool has_custom_meta() const;
  void clear_custom_meta() const;
  /// Makes this node's metadata a copy of `other`'s (none if it has none).
  void copy_custom_meta_from(node other) const;

  friend bool operator==(node a, node b) noexcept { return a.p_ == b.p_; }

 private:
  detail::node_impl* p_ = nullptr;
};

inline argument::argument(const node& n) : v_(n.out()) {}

namespace detail {

// A node's user metadata, type-erased so that the graph stays one type for every policy.
struct custom_meta_box {
  custom_meta_box() = default;
  custom_meta_box(const custom_meta_box&) = delete;
  custom_meta_box& operator=(const custom_meta_box&) = delete;
  virtual ~custom_meta_box() = default;
  [[nodiscard]] virtual const std::type_info& type() const noexcept = 0;
  [[nodiscard]] virtual std::unique_ptr<custom_meta_box> clone() const = 0;
};
template <class T>
struct custom_meta_of final : custom_meta_box {
  explicit custom_meta_of(T v) : value(std::move(v)) {}
  [[nodiscard]] const std::type_info& type() const noexcept override { return typeid(T); }
  [[nodiscard]] std::unique_ptr<custom_meta_box> clone() const override {
    return std::make_unique<custom_meta_of>(value);
  }
  T value;
};

// Field order follows use: what a walk over the graph reads (links, op, outputs, uses) sits in
// the first cache line of each object, the rest after it.
struct value_impl {
  std::vector<use> uses;
  node_impl* producer = nullptr;
  std::uint32_t index = 0;
  /// Free for the pass that is running (fits in the padding after `index`); not copied by
  /// clone. A pass that uses it sets it on every value it reads before relying on it.
  mutable std::uint32_t scratch = 0;
  /// An output of a multi-output call that a `getitem` reads in torch.fx terms: set when the
  /// node is made (the traced code received every output), cleared for unused outputs by
  /// dead-code elimination, as FX's drops the unused getitem nodes.
  bool unpacked = true;
  std::string name;
  value_type type;
};

struct node_impl {
  node_impl* prev = nullptr;
  node_impl* next = nullptr;
  std::uint64_t order = 0;
  const op_info* op = nullptr;
  node_kind kind = node_kind::call_function;
  bool tuple_output = false;
  bool tuple_operands = false;
  bool bare_return = false;  // the output node of a graph returning its one value bare
  bool list_return = false;  // the output node of a graph returning a list (torch.scan's combine graph)
  c10::SmallVector<value_impl*, 1> outputs;
  c10::SmallVector<value*, 4> slots;  // each operand's `value` inside args (Note [Use lists])
  c10::SmallVector<std::uint32_t, 4> use_pos;  // where each operand's use sits in its value's list
  graph* owner = nullptr;
  c10::SmallVector<argument, 4> args;
  std::string name;  // tuple name; single-output nodes use outputs[0]->name
  std::shared_ptr<const source_location> source;
  std::string module_path;
  std::unique_ptr<custom_meta_box> custom;  // node.custom_meta<T>()
};

// O(1): the operand knows its use's position; the last use takes its place.
inline void remove_use(value_impl* v, node_impl* user, std::uint32_t index) {
  auto& u = v->uses;
  const std::uint32_t pos = user->use_pos[index];
  const use last = u.back();
  u[pos] = last;
  last.user_impl->use_pos[last.index] = pos;
  u.pop_back();
}
inline void add_use(value_impl* v, node_impl* user, std::uint32_t index) {
  user->use_pos[index] = static_cast<std::uint32_t>(v->uses.size());
  v->uses.push_back(use{user, index});
}

}  // namespace detail

/// Forward range over a graph's nodes, in order.
class node_range {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = node;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = node;
    iterator() = default;
    explicit iterator(detail::node_impl* p) : p_(p) {}
    node operator*() const { return node(p_); }
    iterator& operator++() {
      p_ = p_->next;
      return *this;
    }
    iterator operator++(int) {
      auto t = *this;
      p_ = p_->next;
      return t;
    }
    friend bool operator==(iterator a, iterator b) { return a.p_ == b.p_; }

   private:
    detail::node_impl* p_ = nullptr;
  };
  node_range(detail::node_impl* first) : first_(first) {}
  [[nodiscard]] iterator begin() const { return iterator(first_); }
  [[nodiscard]] iterator end() const { return iterator(nullptr); }

 private:
  detail::node_impl* first_;
};

/// The graph: an ordered list of nodes that owns every node and value.
///
/// Note [Topological invariant]: nodes are kept in an order where every value is defined before
/// any node that uses it; placeholders come first, the output node (when present) last.
/// Every mutation keeps this true; verify() checks it.
///
/// Note [Use lists]: every operand slot of every node appears exactly once in the use list of
/// the value it refers to, as (user, operand index); operand indices count the values met when
/// walking the arguments depth first. Each operand also records where its use sits in that list,
/// so removing a use is O(1) (use lists are unordered). verify() checks it all.
template <>
class basic_graph<default_policy> {
 public:
  using policy_type = default_policy;

  basic_graph() = default;
  /// A graph whose nodes and values are carved from `resource` (which must outlive it).
  explicit basic_graph(std::pmr::memory_resource* resource) noexcept
      : node_pool_(resource), value_pool_(resource) {}
  basic_graph(const basic_graph&) = delete;
  basic_graph& operator=(const basic_graph&) = delete;
  /// Takes `o`'s nodes and memory resource; `o` is left empty.
  basic_graph(basic_graph&& o) noexcept : node_pool_(o.node_pool_.resource()), value_pool_(o.value_pool_.resource()) {
    steal(o);
  }
  /// Takes `o`'s nodes; the policy and the resource of new nodes stay this graph's.
  basic_graph& operator=(basic_graph&& o) noexcept {
    if (this != &o) {
      clear();
      steal(o);
    }
    return *this;
  }
  ~basic_graph() { clear(); }

  /// Where this graph's node and value storage comes from.
  [[nodiscard]] std::pmr::memory_resource* memory_resource() const noexcept { return node_pool_.resource(); }
  /// The policy this graph object was made with (`default_policy` for a plain graph).
  [[nodiscard]] const std::type_info& policy() const noexcept { return *policy_; }

  [[nodiscard]] node_range nodes() const { return node_range(first_); }
  [[nodiscard]] node first() const { return node(first_); }
  [[nodiscard]] node last() const { return node(last_); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  [[nodiscard]] std::vector<node> placeholders() const {
    std::vector<node> out;
    for (auto* n = first_; n && n->kind == node_kind::placeholder; n = n->next) out.emplace_back(n);
    return out;
  }
  /// The output node, or a null node when the graph has none yet.
  [[nodiscard]] node output_node() const {
    return last_ && last_->kind == node_kind::output ? node(last_) : node();
  }
  /// Whether the graph returns its one value bare (`return lt`), not as a 1-tuple, as torch's
  /// while_loop cond graph does (`is_single_tensor_return` in a .pt2). Kept by clone().
  [[nodiscard]] bool returns_bare() const noexcept { return last_ && last_->kind == node_kind::output && last_->bare_return; }
  void set_returns_bare(bool on) {
    if (!last_ || last_->kind != node_kind::output)
      throw graph_error("xport.graph.no_output", "set_returns_bare: the graph has no output node yet");
    last_->bare_return = on;
  }
  /// Whether the graph returns a list (`return [add, clone]`), as the combine graph of a
  /// torch.scan torch traced does (a loaded one returns a tuple). Kept by clone().
  [[nodiscard]] bool returns_list() const noexcept { return last_ && last_->kind == node_kind::output && last_->list_return; }
  void set_returns_list(bool on) {
    if (!last_ || last_->kind != node_kind::output)
      throw graph_error("xport.graph.no_output", "set_returns_list: the graph has no output node yet");
    last_->list_return = on;
  }
  /// Values the graph returns (operands of the output node).
  [[nodiscard]] std::vector<value> outputs() const {
    auto o = output_node();
    return o ? o.inputs() : std::vector<value>{};
  }

  /// Appends a placeholder after the existing placeholders. `name` is used as given; it must be
  /// a fresh Python identifier.
  value add_placeholder(const std::string& name, value_type type) {
    if (!detail::is_identifier(name))
      throw graph_error("xport.graph.bad_name",
                        "placeholder name '" + name + "' is not a valid Python identifier");
    if (!names_.claim(name))
      throw graph_error("xport.graph.duplicate_name",
                        "placeholder name '" + name + "' is already used in this graph or is a "
                        "Python keyword; pick another name");
    return link_placeholder(name, std::move(type));
  }
  /// Appends a placeholder named after `candidate`, made unique (`x`, `x_1`, ...); with
  /// `before`, inserts it there instead (a placeholder: the caller keeps placeholders first).
  value add_placeholder_fresh(std::string_view candidate, value_type type, node before = {}) {
    return link_placeholder(names_.create(candidate), std::move(type), before.impl());
  }

 private:
  value link_placeholder(const std::string& name, value_type type, detail::node_impl* before = nullptr) {
    auto* n = node_pool_.create();
    n->kind = node_kind::placeholder;
    auto* v = value_pool_.create();
    v->producer = n;
    v->type = std::move(type);
    v->name = name;
    value result(v);
    n->outputs.push_back(v);
    if (before) {
      link_before(n, before);
      return result;
    }
    detail::node_impl* after = nullptr;
    for (auto* p = first_; p && p->kind == node_kind::placeholder; p = p->next) after = p;
    link_after(n, after);
    return result;
  }

 public:

  /// Creates a call node for `op` with `args` (already in schema order) and one value per entry
  /// of `outputs`, inserted before `before` (default: before the output node, else at the end).
  /// `name_hint` defaults to the op's packet name (`add`, `max_pool2d_with_indices`).
  node create_call(const op_info& op, std::vector<argument> args, std::vector<value_type> outputs,
                   node before = {}, std::string_view name_hint = {}) {
    auto* n = node_pool_.create();
    n->kind = node_kind::call_function;
    n->op = &op;
    n->tuple_output = op.returns_list || op.num_returns() != 1;
    std::string base = names_.create(name_hint.empty() ? std::string_view(op.packet) : name_hint);
    if (n->tuple_output) {
      n->name = std::move(base);
      for (std::size_t i = 0; i < outputs.size(); ++i)
        add_output(n, std::move(outputs[i]), names_.create("getitem"));
    } else {
      if (outputs.size() != 1) {
        names_.release(base);
        destroy_node(n);
        throw graph_error("xport.graph.output_count",
                          op.qualified + " returns one value but " + std::to_string(outputs.size()) +
                              " output types were given");
      }
      add_output(n, std::move(outputs[0]), std::move(base));
    }
    n->args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
    link_before(n, before ? before.impl() : default_insert_point());
    attach_args(n);
    return node(n);
  }

  /// Creates a call node whose node and output names are given exactly (a loader rebuilding a
  /// saved graph). `output_names` has one name per output; for a single-output call the node is
  /// named after its output. Throws graph_error naming the name when one is taken or invalid.
  node create_call_named(const op_info& op, std::vector<argument> args, std::vector<value_type> outputs,
                         const std::string& node_name, const std::vector<std::string>& output_names) {
    const bool tuple = op.returns_list || op.num_returns() != 1;
    if (output_names.size() != outputs.size() || (!tuple && outputs.size() != 1))
      throw graph_error("xport.graph.output_count", op.qualified + " returns " +
                                                        std::to_string(op.num_returns()) + " value(s) but " +
                                                        std::to_string(outputs.size()) + " outputs were given");
    std::vector<std::string> claimed;
    const auto claim = [&](const std::string& name) {
      if (!detail::is_identifier(name) || !names_.claim(name)) {
        for (const auto& c : claimed) names_.release(c);
        throw graph_error("xport.graph.duplicate_name",
                          "name '" + name + "' is already used in this graph or is not a valid Python identifier");
      }
      claimed.push_back(name);
    };
    if (tuple) claim(node_name);
    for (const auto& n : output_names) claim(n);
    auto* n = node_pool_.create();
    n->kind = node_kind::call_function;
    n->op = &op;
    n->tuple_output = tuple;
    if (tuple) n->name = node_name;
    for (std::size_t i = 0; i < outputs.size(); ++i) add_output(n, std::move(outputs[i]), output_names[i]);
    n->args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
    link_before(n, default_insert_point());
    attach_args(n);
    return node(n);
  }

  /// Sets the values (or constants) the graph returns, creating the output node if needed.
  node set_output(std::vector<argument> results) {
    auto* n = last_ && last_->kind == node_kind::output ? last_ : nullptr;
    if (!n) {
      n = node_pool_.create();
      n->kind = node_kind::output;
      n->name = "output";
      link_after(n, last_);
    } else {
      detach_args(n);
    }
    n->args.assign(std::make_move_iterator(results.begin()), std::make_move_iterator(results.end()));
    attach_args(n);
    return node(n);
  }

  /// Removes a node whose outputs have no uses. Its names stay taken (as in torch.fx), so a
  /// later node never silently takes the name an earlier printout gave another one.
  void erase(node nd) {
    auto* n = nd.impl();
    for (auto& v : n->outputs)
      if (!v->uses.empty())
        throw graph_error("xport.graph.erase_used",
                          "cannot erase node '" + nd.name() + "': its output '" + v->name +
                              "' still has " + std::to_string(v->uses.size()) +
                              " use(s); replace them first (value::replace_all_uses_with)");
    detach_args(n);
    unlink(n);
    destroy_node(n);
  }

  /// Memory held by the graph's nodes and values (their pools), in bytes.
  [[nodiscard]] std::size_t bytes_reserved() const noexcept {
    return node_pool_.bytes_reserved() + value_pool_.bytes_reserved();
  }

  /// Moves `n` to just before `pos` (the caller keeps Note [Topological invariant]).
  void move_before(node n, node pos) {
    unlink(n.impl());
    link_before(n.impl(), pos.impl());
  }

  /// A fresh name derived from `candidate`, recorded as used.
  std::string unique_name(std::string_view candidate) { return names_.create(candidate); }
  /// Renames a value; `name` must be fresh.
  void rename(value v, const std::string& name) {
    if (v.impl()->name == name) return;
    if (!names_.claim(name))
      throw graph_error("xport.graph.duplicate_name", "name '" + name + "' is already used");
    names_.release(v.impl()->name);
    v.impl()->name = name;
  }

  /// Where create_call inserts by default: before the output node, else at the end.
  void set_insert_point(node before) { insert_point_ = before.impl(); }
  void reset_insert_point() { insert_point_ = nullptr; }

  /// A deep copy; `map` (if given) receives old value -> new value.
  graph clone(std::unordered_map<detail::value_impl*, value>* map = nullptr) const {
    graph g(memory_resource());
    std::unordered_map<detail::value_impl*, value> local;
    auto& m = map ? *map : local;
    const auto remap = [&](const c10::SmallVector<argument, 4>& from) {
      std::vector<argument> args(from.begin(), from.end());
      for (auto& a : args) a.for_each_value([&](value& v) { v = m.at(v.impl()); });
      return args;
    };
    for (auto* n = first_; n; n = n->next) {
      switch (n->kind) {
        case node_kind::placeholder: {
          auto v = g.add_placeholder(n->outputs[0]->name, n->outputs[0]->type);
          m.emplace(n->outputs[0], v);
          v.producer().impl()->source = n->source;
          v.producer().impl()->module_path = n->module_path;
          if (n->custom) v.producer().impl()->custom = n->custom->clone();
          break;
        }
        case node_kind::call_function: {
          auto* c = g.node_pool_.create();
          c->kind = n->kind;
          c->op = n->op;
          c->tuple_output = n->tuple_output;
          c->tuple_operands = n->tuple_operands;
          c->name = n->name;
          if (!c->name.empty()) g.names_.claim(c->name);
          for (auto* o : n->outputs) {
            g.names_.claim(o->name);
            g.add_output(c, o->type, o->name);
            c->outputs.back()->unpacked = o->unpacked;
            m.emplace(o, value(c->outputs.back()));
          }
          auto args = remap(n->args);
          c->args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
          c->source = n->source;
          c->module_path = n->module_path;
          if (n->custom) c->custom = n->custom->clone();
          g.link_after(c, g.last_);
          g.attach_args(c);
          break;
        }
        case node_kind::output:
          g.set_output(remap(n->args));
          g.last_->bare_return = n->bare_return;
          g.last_->list_return = n->list_return;
          break;
      }
    }
    return g;
  }

 protected:
  /// For basic_graph<Policy>: the policy its objects report.
  void set_policy(const std::type_info& p, std::pmr::memory_resource* resource) noexcept {
    policy_ = &p;
    node_pool_.set_resource(resource);
    value_pool_.set_resource(resource);
  }

 private:
  friend class node;
  friend class value;

  detail::node_impl* default_insert_point() const {
    if (insert_point_) return insert_point_;
    return last_ && last_->kind == node_kind::output ? last_ : nullptr;
  }

  void add_output(detail::node_impl* n, value_type t, std::string name) {
    auto* v = value_pool_.create();
    v->producer = n;
    v->index = static_cast<std::uint32_t>(n->outputs.size());
    v->type = std::move(t);
    v->name = std::move(name);
    v->unpacked = true;
    n->outputs.push_back(v);
  }

  void destroy_node(detail::node_impl* n) noexcept {
    for (auto* v : n->outputs) value_pool_.destroy(v);
    node_pool_.destroy(n);
  }

  void attach_args(detail::node_impl* n) {
    n->slots.clear();
    n->use_pos.clear();
    for (auto& a : n->args)
      a.for_each_value([&](value& v) {
        if (!v)
          throw graph_error("xport.graph.null_value",
                            "node '" + node(n).name() + "' was given a null value as an argument");
        const auto index = static_cast<std::uint32_t>(n->slots.size());
        n->slots.push_back(&v);
        n->use_pos.push_back(0);
        detail::add_use(v.impl(), n, index);
      });
  }

  static void detach_args(detail::node_impl* n) {
    for (std::size_t i = 0; i < n->slots.size(); ++i)
      detail::remove_use(n->slots[i]->impl(), n, static_cast<std::uint32_t>(i));
    n->slots.clear();
    n->use_pos.clear();
  }

  void link_after(detail::node_impl* n, detail::node_impl* after) {
    n->owner = this;
    n->prev = after;
    n->next = after ? after->next : first_;
    (n->prev ? n->prev->next : first_) = n;
    (n->next ? n->next->prev : last_) = n;
    ++size_;
    assign_order(n);
  }
  void link_before(detail::node_impl* n, detail::node_impl* before) {
    link_after(n, before ? before->prev : last_);
  }
  void unlink(detail::node_impl* n) {
    (n->prev ? n->prev->next : first_) = n->next;
    (n->next ? n->next->prev : last_) = n->prev;
    n->prev = n->next = nullptr;
    --size_;
  }

  // Order keys with gaps, so is_before is O(1). When no key is left between two neighbours, a
  // window around the new node, doubled until it spans enough key space, is spread evenly
  // (list order maintenance): repeated inserts at one spot cost O(log n) each, not O(n).
  static constexpr std::uint64_t order_gap = std::uint64_t{1} << 20;
  void assign_order(detail::node_impl* n) {
    const std::uint64_t lo = n->prev ? n->prev->order : 0;
    if (!n->next) {
      n->order = lo + order_gap;
      return;
    }
    const std::uint64_t hi = n->next->order;
    if (hi - lo > 1) {
      n->order = lo + (hi - lo) / 2;
      return;
    }
    detail::node_impl* left = n;
    detail::node_impl* right = n;
    std::uint64_t count = 1;
    while (true) {
      for (std::uint64_t k = 0, grow = count; k < grow; ++k) {
        if (left->prev) left = left->prev, ++count;
        if (right->next) right = right->next, ++count;
      }
      const std::uint64_t lo_key = left->prev ? left->prev->order : 0;
      if (!right->next) {  // the window reaches the end: keys above it are free
        std::uint64_t key = lo_key;
        for (auto* p = left; p; p = p->next) p->order = (key += order_gap);
        return;
      }
      const std::uint64_t hi_key = right->next->order;
      if ((hi_key - lo_key) / (count + 1) >= 64) {  // room enough: spread the window evenly
        const std::uint64_t step = (hi_key - lo_key) / (count + 1);
        std::uint64_t key = lo_key;
        for (auto* p = left;; p = p->next) {
          p->order = (key += step);
          if (p == right) return;
        }
      }
    }
  }

  void clear() noexcept {
    for (auto* n = first_; n;) {
      auto* next = n->next;
      destroy_node(n);
      n = next;
    }
    node_pool_.release();
    value_pool_.release();
    first_ = last_ = insert_point_ = nullptr;
    size_ = 0;
    names_ = {};
  }
  void steal(basic_graph& o) noexcept {
    first_ = std::exchange(o.first_, nullptr);
    last_ = std::exchange(o.last_, nullptr);
    insert_point_ = std::exchange(o.insert_point_, nullptr);
    size_ = std::exchange(o.size_, 0);
    names_ = std::move(o.names_);
    node_pool_ = std::move(o.node_pool_);
    value_pool_ = std::move(o.value_pool_);
    for (auto* n = first_; n; n = n->next) n->owner = this;
  }

  detail::node_impl* first_ = nullptr;
  detail::node_impl* last_ = nullptr;
  detail::node_impl* insert_point_ = nullptr;
  std::size_t size_ = 0;
  detail::name_table names_;
  detail::object_pool<detail::node_impl> node_pool_;
  detail::object_pool<detail::value_impl> value_pool_;
  const std::type_info* policy_ = &typeid(default_policy);  // of this object, never moved
};

// ---- value ----------------------------------------------------------------------------------

inline const std::string& value::name() const { return p_->name; }
inline node value::producer() const { return node(p_->producer); }
inline std::size_t value::index() const { return p_->index; }
inline value_kind value::kind() const { return p_->type.kind; }
inline const value_type& value::type() const { return p_->type; }
inline const tensor_meta& value::meta() const {
  if (p_->type.kind != value_kind::tensor)
    throw graph_error("xport.value.not_tensor", "value '" + p_->name + "' is not a tensor");
  return p_->type.tensor;
}
inline void value::set_type(value_type t) const { p_->type = std::move(t); }
inline std::span<const use> value::uses() const { return p_->uses; }
inline std::uint32_t& value::scratch() const noexcept { return p_->scratch; }
inline bool value::unpacked() const noexcept { return p_->unpacked; }
inline void value::set_unpacked(bool u) const noexcept { p_->unpacked = u; }
inline std::size_t value::num_uses() const { return p_->uses.size(); }
inline void value::replace_all_uses_with(value other) const {
  if (other == *this) return;
  auto uses = std::move(p_->uses);
  p_->uses.clear();
  for (const auto& u : uses) {
    *u.user_impl->slots[u.index] = other;
    detail::add_use(other.p_, u.user_impl, u.index);
  }
}

// ---- node -----------------------------------------------------------------------------------

inline node use::user() const { return node(user_impl); }

inline node_kind node::kind() const { return p_->kind; }
inline const std::string& node::name() const {
  if (p_->kind != node_kind::output && !p_->tuple_output) return p_->outputs[0]->name;
  return p_->name;
}
inline const op_info& node::op() const {
  if (!p_->op)
    throw graph_error("xport.node.no_op", "node '" + name() + "' is a " +
                                              std::string(to_string(p_->kind)) + ", not a call");
  return *p_->op;
}
inline const op_info* node::op_ptr() const { return p_->op; }
inline std::string node::target() const {
  return p_->op ? p_->op->target : std::string(to_string(p_->kind));
}
inline std::span<const argument> node::args() const { return {p_->args.data(), p_->args.size()}; }
inline void node::set_args(std::vector<argument> args) const {
  graph::detach_args(p_);
  p_->args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  p_->owner->attach_args(p_);
}
inline std::size_t node::num_inputs() const { return p_->slots.size(); }
inline value node::input(std::size_t i) const { return *p_->slots.at(i); }
inline std::vector<value> node::inputs() const {
  std::vector<value> out;
  out.reserve(p_->slots.size());
  for (auto* s : p_->slots) out.push_back(*s);
  return out;
}
inline void node::replace_input(std::size_t i, value v) const {
  auto* slot = p_->slots.at(i);
  if (*slot == v) return;
  detail::remove_use(slot->impl(), p_, static_cast<std::uint32_t>(i));
  *slot = v;
  detail::add_use(v.impl(), p_, static_cast<std::uint32_t>(i));
}
inline void node::replace_input_with(value from, value to) const {
  for (std::size_t i = 0; i < p_->slots.size(); ++i)
    if (*p_->slots[i] == from) replace_input(i, to);
}
inline std::size_t node::num_outputs() const { return p_->outputs.size(); }
inline value node::output(std::size_t i) const {
  if (i >= p_->outputs.size())
    throw graph_error("xport.node.output_index", "node '" + name() + "' has " +
                                                     std::to_string(p_->outputs.size()) +
                                                     " output(s); index " + std::to_string(i) +
                                                     " is out of range");
  return value(p_->outputs[i]);
}
inline std::vector<value> node::outputs() const {
  std::vector<value> out;
  out.reserve(p_->outputs.size());
  for (auto* v : p_->outputs) out.emplace_back(v);
  return out;
}
inline value node::out() const {
  if (p_->outputs.size() != 1 || p_->tuple_output)
    throw graph_error("xport.node.not_single_output",
                      "node '" + name() + "' has " + std::to_string(p_->outputs.size()) +
                          " outputs; pick one with node[i]");
  return value(p_->outputs[0]);
}
inline bool node::has_tuple_output() const { return p_->tuple_output; }
inline bool node::has_tuple_operands() const { return p_->tuple_operands; }
inline void node::set_tuple_operands(bool on) const { p_->tuple_operands = on; }
inline node node::next() const { return node(p_->next); }
inline node node::prev() const { return node(p_->prev); }
inline std::uint64_t node::order() const { return p_->order; }
inline graph& node::owning_graph() const { return *p_->owner; }
inline const std::shared_ptr<const source_location>& node::source() const { return p_->source; }
inline void node::set_source(std::shared_ptr<const source_location> s) const {
  p_->source = std::move(s);
}
inline const std::string& node::module_path() const { return p_->module_path; }
inline void node::set_module_path(std::string path) const { p_->module_path = std::move(path); }

namespace detail {
[[noreturn]] inline void custom_meta_mismatch(const node& n, const std::type_info& held, const std::type_info& asked) {
  throw graph_error("xport.graph.custom_meta_type",
                    "node '" + n.name() + "' holds custom metadata of type " + c10::demangle(held.name()) +
                        ", not " + c10::demangle(asked.name()) +
                        ": a node holds one metadata object, so passes that share nodes share its type (a struct "
                        "with a field for each), or one replaces it with set_custom_meta()");
}
}  // namespace detail

template <class T>
T* node::find_custom_meta() const {
  const auto& box = p_->custom;
  if (!box) return nullptr;
  if (box->type() != typeid(T)) detail::custom_meta_mismatch(*this, box->type(), typeid(T));
  return &static_cast<detail::custom_meta_of<T>*>(box.get())->value;
}
template <class T>
T& node::custom_meta() const {
  if (T* m = find_custom_meta<T>()) return *m;
  auto box = std::make_unique<detail::custom_meta_of<T>>(T{});
  T& out = box->value;
  p_->custom = std::move(box);
  return out;
}
template <class T>
void node::set_custom_meta(T meta) const {
  p_->custom = std::make_unique<detail::custom_meta_of<T>>(std::move(meta));
}
inline bool node::has_custom_meta() const { return p_->custom != nullptr; }
inline void node::clear_custom_meta() const { p_->custom.reset(); }
inline void node::copy_custom_meta_from(node other) const {
  if (other.p_ == p_) return;
  p_->custom = other.p_->custom ? other.p_->custom->clone() : nullptr;
}

/// What a graph policy names: `node_meta`, the type of every node's custom metadata (copyable,
/// default-constructible), and optionally `static std::pmr::memory_resource* memory_resource()`,
/// where the graph's nodes and values are carved from (new/delete otherwise).
template <class P>
concept graph_policy = requires { typename P::node_meta; } && std::copy_constructible<typename P::node_meta> &&
                       std::default_initializable<typename P::node_meta>;

/// A graph whose nodes carry `Policy::node_meta` (the basic_json / json pattern: `graph` is
/// `basic_graph<>`). It is a graph, so every pass, the verifier, the printer and the interpreter
/// take it as one; what it adds is typed access to the metadata and its policy's memory resource.
template <class Policy>
class basic_graph : public basic_graph<default_policy> {
  static_assert(graph_policy<Policy>,
                "a graph policy names `using node_meta = T;` (T copyable and default-constructible) and "
                "may name `static std::pmr::memory_resource* memory_resource()`");

 public:
  using policy_type = Policy;
  using node_meta = typename Policy::node_meta;

  basic_graph() : graph(policy_resource()) { set_policy(typeid(Policy), policy_resource()); }
  /// Adopts a plain graph's nodes (their metadata stays; new nodes come from the policy's resource).
  explicit basic_graph(graph&& g) noexcept : graph(std::move(g)) { set_policy(typeid(Policy), policy_resource()); }
  basic_graph(basic_graph&& o) noexcept : graph(std::move(o)) { set_policy(typeid(Policy), policy_resource()); }
  basic_graph& operator=(basic_graph&& o) noexcept {
    graph::operator=(std::move(o));
    return *this;
  }

  /// The node's metadata, default-made on first use; `n` must belong to this graph.
  [[nodiscard]] node_meta& meta(node n) const {
    if (!n || &n.owning_graph() != this)
      throw graph_error("xport.graph.foreign_node", "meta(): the node is not in this graph");
    return n.custom_meta<node_meta>();
  }
  /// A deep copy, metadata included.
  [[nodiscard]] basic_graph clone(std::unordered_map<detail::value_impl*, value>* map = nullptr) const {
    return basic_graph(graph::clone(map));
  }

  static std::pmr::memory_resource* policy_resource() noexcept {
    if constexpr (requires { Policy::memory_resource(); }) return Policy::memory_resource();
    else return std::pmr::new_delete_resource();
  }
};

/// `g` as the basic_graph<Policy> it was made as; a typed error if it was made with another
/// policy (a pass written for one policy run on another's program).
template <class Policy>
basic_graph<Policy>& graph_cast(graph& g) {
  if constexpr (std::is_same_v<Policy, default_policy>) {
    return g;
  } else {
    if (g.policy() != typeid(Policy))
      throw graph_error("xport.graph.policy",
                        "this graph was made with policy " + c10::demangle(g.policy().name()) + ", not " +
                            c10::demangle(typeid(Policy).name()) +
                            ": wrap the program first (`basic_exported_program<Policy> p = std::move(program);`)");
    return static_cast<basic_graph<Policy>&>(g);
  }
}
template <class Policy>
const basic_graph<Policy>& graph_cast(const graph& g) {
  return graph_cast<Policy>(const_cast<graph&>(g));
}

/// A subgraph: the branch of a `cond` (`true_graph_0`), the body of a loop. Its placeholders are
/// the operands the operator passes it, its outputs what it returns; its values are its own (no
/// operand of an inner node is a value of the graph that calls it). Once attached to a node it
/// is never changed: copies of the calling graph share it, and a pass that rewrites a branch
/// builds a new subgraph and swaps the argument, so a failed pass leaves the caller's intact.
struct subgraph {
  std::string name;  ///< the attribute torch names it by: `true_graph_0`, `body_graph_0`
  graph body;
};

/// Calls `f(const subgraph&)` for every subgraph node `n` passes (directly, not nested ones).
template <class F>
void for_each_subgraph(const node& n, F&& f) {
  for (const auto& a : n.args())
    if (a.is_graph()) f(*a.as_graph());
}

/// What a control-flow call passes its subgraphs' placeholders, in their order: its list
/// arguments one after the other (torch.cond's operands; while_loop's carried_inputs, then its
/// additional_inputs).
inline argument::list_type subgraph_operands(const node& n) {
  argument::list_type all;
  for (const auto& a : n.args())
    if (a.is_list()) all.insert(all.end(), a.as_list().begin(), a.as_list().end());
  return all;
}

XPORT_END_NAMESPACE

template <>
struct std::hash<xport::value> {
  std::size_t operator()(xport::value v) const noexcept {
    return std::hash<const void*>{}(v.impl());
  }
};
template <>
struct std::hash<xport::node> {
  std::size_t operator()(xport::node n) const noexcept {
    return std::hash<const void*>{}(n.impl());
  }
};
// #include <xport/program/dead_code.hpp>
// xport/program/dead_code.hpp: removing the calls whose results nothing uses (torch.fx's
// Graph.eliminate_dead_code). A call stays when it has an effect beyond its outputs: it writes to
// an argument (in-place and out= ops), draws random numbers (removing it would shift every
// later random draw), reads tensor data (ops/data_dependent.hpp), or gives a symbol only the data
// knows (its range is asserted on every run). Signature outputs are uses, so they are kept. One
// backward walk: a node's death frees its inputs' producers before they are visited.
// passes/dce.hpp makes it a pass.

#include <cstddef>  // std::size_t

// #include <xport/config.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/unbacked.hpp>
// xport/ir/unbacked.hpp: where a graph's unbacked symbols get their values.
// A data-dependent op (nonzero, a boolean-mask index, item()) gives a size or an int only its
// result knows: torch's unbacked SymInt, `u0`. The first call whose output has it as a dim (or
// is it, for item) gives it; the interpreter binds it there, print and save read it there.

#include <cstddef>        // std::size_t
#include <cstdint>        // std::int64_t
#include <string>         // std::string
#include <unordered_set>  // std::unordered_set

// #include <xport/config.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/sym_expr.hpp>

XPORT_BEGIN_NAMESPACE

/// Calls `f(output, dim, symbol, size)` for each unbacked symbol call `n` is the first to give
/// (`dim` is -1 when the output is the SymInt itself); `seen` holds the symbols given so far.
template <class F>
void for_each_unbacked_given(const node& n, std::unordered_set<std::string>& seen, F&& f) {
  const auto give = [&](const value& v, std::int64_t dim, const sym_int& e) {
    if (!e.is_symbolic()) return;
    const auto lin = sym::as_linear(e);
    if (!lin || lin->a != 1 || lin->b != 0 || !sym::is_unbacked(lin->symbol) || !seen.insert(lin->symbol).second) return;
    f(v, dim, lin->symbol, e);
  };
  for (auto v : n.outputs()) {
    if (v.kind() == value_kind::sym_int) give(v, -1, v.type().scalar);
    else if (v.kind() == value_kind::tensor)
      for (std::size_t d = 0; d < v.meta().sizes.size(); ++d) give(v, static_cast<std::int64_t>(d), v.meta().sizes[d]);
  }
}

/// Whether call `n` gives an unbacked symbol none of its inputs has: its runtime assertion (the
/// symbol's range, torch's `_assert_scalar` nodes on it) is an effect, so dead-code elimination
/// keeps it.
inline bool gives_unbacked(const node& n) {
  std::unordered_set<std::string> known;
  bool any = false;  // an output with an unbacked symbol at all (most nodes have none: no set is made)
  for_each_unbacked_given(n, known, [&](const value&, std::int64_t, const std::string&, const sym_int&) { any = true; });
  if (!any) return false;
  known.clear();
  for (auto v : n.inputs()) {
    const auto note = [&](const sym_int& e) {
      for (auto& s : sym::free_symbols(e)) known.insert(std::move(s));
    };
    if (v.kind() == value_kind::sym_int) note(v.type().scalar);
    else if (v.kind() == value_kind::tensor)
      for (const auto& d : v.meta().sizes) note(d);
  }
  bool gives = false;
  for_each_unbacked_given(n, known, [&](const value&, std::int64_t, const std::string&, const sym_int&) { gives = true; });
  return gives;
}

XPORT_END_NAMESPACE
// #include <xport/ops/data_dependent.hpp>
// xport/ops/data_dependent.hpp: the ops that read tensor data, in one place.
// Export runs on shapes only (meta tensors), so an op whose result depends on the values a
// tensor holds has no meta kernel. xport knows three kinds (torch.export's own split):
//  - ops that give a row count only the data knows (nonzero, masked_select, unique, an index by
//    a boolean mask): recorded with an unbacked size when the capture plans one (Note [Unbacked
//    sizes in a capture], trace/unbacked.hpp), the shape rule below making the meta result;
//  - item() of an integer tensor of one element: an unbacked SymInt, the same way;
//  - every other read (item() of a float, a tensor used as a bool, equal, allclose, the unique
//    variants torch.export does not record): a graph break.
// Every read of data export cannot stand a value for is one error: graph_break, id
// xport.export.graph_break (the tracer's other breaks, on a made-up row count, share it).
// The tracer (trace/capture.hpp) asks these predicates and records; the IR's dead-code removal
// (program/dead_code.hpp), the builder's inference (ops/meta_infer.hpp) and the engine's plan
// (run/engine.hpp, run/schedule.hpp) ask reads_data.

#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// What an op that reads tensor data gives back.
enum class data_read : std::uint8_t {
  rows,    ///< a tensor with as many rows as the data holds (recorded with an unbacked size)
  number,  ///< a Python number (item(): an unbacked SymInt when the tensor is an integer)
  answer,  ///< a bool or a result torch.export does not record: always a graph break
};

/// One op that reads tensor data, and how the traced C++ code spells the call (for messages).
struct data_reading_op {
  std::string_view name;
  std::string_view call;
  data_read gives;
};

/// Every op xport knows to read tensor data (names without overload).
inline constexpr data_reading_op data_reading_ops[] = {
    {"aten::nonzero", "at::nonzero", data_read::rows},
    {"aten::masked_select", "at::masked_select", data_read::rows},
    {"aten::_unique2", "at::_unique2", data_read::rows},
    {"aten::_local_scalar_dense", "Tensor::item()", data_read::number},
    {"aten::item", "Tensor::item()", data_read::number},
    {"aten::is_nonzero", "using a tensor as a bool (Tensor::is_nonzero())", data_read::answer},
    {"aten::equal", "at::equal", data_read::answer},
    {"aten::allclose", "at::allclose", data_read::answer},
    {"aten::unique", "at::unique", data_read::answer},
    {"aten::_unique", "at::_unique", data_read::answer},
    {"aten::unique_dim", "at::unique_dim", data_read::answer},
    {"aten::unique_consecutive", "at::unique_consecutive", data_read::answer},
    {"aten::nonzero_numpy", "at::nonzero_numpy", data_read::answer},
    {"aten::argwhere", "at::argwhere", data_read::answer},
};

inline const data_reading_op* find_data_reading_op(std::string_view name) {
  if (name.size() < 6 || name.substr(0, 6) != "aten::") return nullptr;
  for (const auto& op : data_reading_ops)
    if (op.name == name) return &op;
  return nullptr;
}

/// Whether the op's result depends on tensor data: no meta kernel can exist for it, dead-code
/// removal keeps it, and the engine plans no memory around it.
inline bool reads_data(std::string_view name) { return find_data_reading_op(name) != nullptr; }
inline bool reads_data(const op_info& op) { return reads_data(op.name); }

/// What the traced C++ call was, for graph-break messages.
inline std::string user_facing_call(std::string_view name) {
  const auto* op = find_data_reading_op(name);
  return std::string(op ? op->call : name);
}

/// Whether an index list holds a boolean (or uint8) mask anywhere.
inline bool has_mask_index(const c10::IValue& indices) {
  if (!indices.isList()) return false;
  for (const auto& e : indices.toListRef()) {
    if (!e.isTensor() || !e.toTensor().defined()) continue;
    const auto st = e.toTensor().scalar_type();
    if (st == c10::kBool || st == c10::kByte) return true;
  }
  return false;
}

/// Whether `op` on `stack` (its arguments last) gives as many rows as its data holds, a count
/// export makes a symbol of: nonzero, masked_select, `_unique2` (what at::_unique2 and
/// torch.unique call), an index by one boolean (or uint8) mask in the first position.
inline bool gives_unbacked_rows(const op_info& op, const std::vector<c10::IValue>& stack) {
  if (op.overload.empty()) {
    const auto* known = find_data_reading_op(op.name);
    if (known && known->gives == data_read::rows) return true;
  }
  if (op.name != "aten::index" || op.overload != "Tensor") return false;
  const auto& indices = stack.back();
  if (!indices.isList() || indices.toListRef().empty()) return false;
  const auto& list = indices.toListRef();
  for (std::size_t i = 1; i < list.size(); ++i)
    if (list[i].isTensor() && list[i].toTensor().defined()) return false;
  if (!list[0].isTensor() || !list[0].toTensor().defined()) return false;
  const auto st = list[0].toTensor().scalar_type();
  return st == c10::kBool || st == c10::kByte;
}

/// Whether `op` on `stack` is item() of an integer tensor of one element: an int only the data knows.
inline bool reads_unbacked_int(const op_info& op, const std::vector<c10::IValue>& stack) {
  if (op.name != "aten::item" && op.name != "aten::_local_scalar_dense") return false;
  const auto& self = stack.back();
  return self.isTensor() && self.toTensor().defined() && self.toTensor().numel() == 1 &&
         c10::isIntegralType(self.toTensor().scalar_type(), /*includeBool=*/false);
}

/// The shape rule of a call gives_unbacked_rows accepts: its meta results, given its meta
/// arguments and the row count `rows`. `[rows, self.dim()]` int64 (nonzero), `[rows]`
/// (masked_select), `[rows, self's dims after the mask's]` (a mask index); `_unique2`'s values
/// `[rows]`, inverse (self's shape, or `[0]` when not asked for) and counts (`[rows]`, or `[0]`).
inline std::vector<at::Tensor> unbacked_rows_results(const op_info& op, const std::vector<c10::IValue>& args,
                                                     std::int64_t rows) {
  const auto self = args[0].toTensor();
  const auto index = self.options().dtype(at::kLong);
  if (op.name == "aten::_unique2") {
    const bool inverse = args[2].toBool(), counts = args[3].toBool();
    return {at::empty({rows}, self.options()), inverse ? at::empty(self.sizes(), index) : at::empty({0}, index),
            counts ? at::empty({rows}, index) : at::empty({0}, index)};
  }
  if (op.name == "aten::nonzero") return {at::empty({rows, self.dim()}, index)};
  if (op.name == "aten::masked_select") return {at::empty({rows}, self.options())};
  const auto mask_dims = args[1].toListRef()[0].toTensor().dim();
  if (mask_dims > self.dim())
    throw graph_error("xport.fake.op_rejected", op.qualified + ": a mask of " + std::to_string(mask_dims) +
                                                    " dims indexes a tensor of " + std::to_string(self.dim()));
  std::vector<std::int64_t> sizes{rows};
  for (auto d = mask_dims; d < self.dim(); ++d) sizes.push_back(self.size(d));
  return {at::empty(sizes, self.options())};
}

/// The one error for a call that reads tensor data where no value can stand for it: torch's
/// graph break, with the way out.
[[noreturn]] inline void throw_reads_data(const op_info& op) {
  throw graph_break(
      "xport.export.graph_break",
      "graph break: " + op.qualified + " (" + user_facing_call(op.name) +
          ") reads the contents of a tensor, which export cannot know: it runs on shapes only, "
          "and the program must be the same for every input. Way out: make the value an input "
          "of the program (a C++ int64_t/double/bool argument is specialized as a constant), or "
          "write the computation without reading data (e.g. at::where / at::clamp instead of "
          "branching on a value, masks with at::where instead of at::nonzero)");
}

/// Boolean-mask indexing (`x.index({mask})`, `x[mask]`) where no row count can stand for the
/// result: its size is the mask's count of true elements.
[[noreturn]] inline void throw_mask_index_break(const op_info& op) {
  throw graph_break(
      "xport.export.graph_break",
      "graph break: " + op.qualified + " with a boolean (or uint8) mask as an index selects as many "
          "elements as the mask holds true values, a data-dependent output size that export cannot "
          "know: it runs on shapes only. Way out: keep the shape and zero the rest "
          "(at::where(mask, x, 0), x * mask), or index with positions computed outside the "
          "program and passed as an input");
}

}  // namespace detail
XPORT_END_NAMESPACE

XPORT_BEGIN_NAMESPACE

/// Whether a call must stay even when its outputs are unused.
inline bool has_side_effects(const node& n) {
  if (!n.is_call()) return true;
  const auto& op = n.op();
  return op.is_mutable || op.nondeterministic || detail::reads_data(op) || gives_unbacked(n);
}

/// Removes dead call nodes, and the getitems of unused outputs (value::unpacked); returns how
/// many nodes and getitems were removed.
inline std::size_t eliminate_dead_code(graph& g) {
  std::size_t removed = 0;
  for (node n = g.last(); n;) {
    const node prev = n.prev();
    if (n.is_call()) {
      bool used = false;
      for (std::size_t i = 0; i < n.num_outputs(); ++i) {
        const auto v = n.output(i);
        used = used || v.num_uses() != 0;
        if (n.has_tuple_output() && v.num_uses() == 0 && v.unpacked()) {
          v.set_unpacked(false);
          ++removed;
        }
      }
      if (!used && !has_side_effects(n)) {
        g.erase(n);
        ++removed;
      }
    }
    n = prev;
  }
  return removed;
}

XPORT_END_NAMESPACE
// #include <xport/ir/signature.hpp>
// xport/ir/signature.hpp: the graph signature of an exported program.
// One list of input specs and one of output specs, in torch.export's vocabulary and order
// (lifted state before user inputs; mutations before user outputs). Every other view
// (parameters, buffers_to_mutate, user_inputs, ...) is computed from the two lists.

#include <cstdint>      // std::uint8_t
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

// #include <xport/config.hpp>
// #include <xport/ir/graph.hpp>

XPORT_BEGIN_NAMESPACE

/// torch.export.graph_signature.InputKind, with its numbering.
enum class input_kind : std::uint8_t {
  user_input = 1,
  parameter = 2,
  buffer = 3,
  constant_tensor = 4,
  custom_obj = 5,
  token = 6,
};

/// torch.export.graph_signature.OutputKind, with the numbering of current torch.
enum class output_kind : std::uint8_t {
  user_output = 1,
  loss_output = 2,
  buffer_mutation = 3,
  parameter_mutation = 4,
  gradient_to_parameter = 5,
  gradient_to_user_input = 6,
  user_input_mutation = 7,
  token = 8,
};

/// `USER_INPUT`, `PARAMETER`, ...
inline std::string_view to_string(input_kind k) {
  switch (k) {
    case input_kind::user_input: return "USER_INPUT";
    case input_kind::parameter: return "PARAMETER";
    case input_kind::buffer: return "BUFFER";
    case input_kind::constant_tensor: return "CONSTANT_TENSOR";
    case input_kind::custom_obj: return "CUSTOM_OBJ";
    case input_kind::token: return "TOKEN";
  }
  return "?";
}

/// `USER_OUTPUT`, `BUFFER_MUTATION`, ...
inline std::string_view to_string(output_kind k) {
  switch (k) {
    case output_kind::user_output: return "USER_OUTPUT";
    case output_kind::loss_output: return "LOSS_OUTPUT";
    case output_kind::buffer_mutation: return "BUFFER_MUTATION";
    case output_kind::parameter_mutation: return "PARAMETER_MUTATION";
    case output_kind::gradient_to_parameter: return "GRADIENT_TO_PARAMETER";
    case output_kind::gradient_to_user_input: return "GRADIENT_TO_USER_INPUT";
    case output_kind::user_input_mutation: return "USER_INPUT_MUTATION";
    case output_kind::token: return "TOKEN";
  }
  return "?";
}

/// The placeholder-name prefix torch.export gives each kind of lifted input.
inline std::string_view placeholder_prefix(input_kind k) {
  switch (k) {
    case input_kind::parameter: return "p_";
    case input_kind::buffer: return "b_";
    case input_kind::constant_tensor: return "c_";
    case input_kind::custom_obj: return "obj_";
    case input_kind::token: return "token";
    case input_kind::user_input: return "";
  }
  return "";
}

/// What a spec refers to: TensorArgument(name), SymIntArgument(name), ConstantArgument(name,
/// value), CustomObjArgument(name, class_fqn), TokenArgument(name). A user input that is a
/// ConstantArgument is a specialized constant (torch's `constant_input`): its placeholder has
/// value_kind::none, nothing reads it, and it is no run-time input (xport::run takes the tensor
/// inputs; callable<Sig> checks the constant).
struct argument_spec {
  enum class kind : std::uint8_t { tensor, sym_int, sym_float, sym_bool, constant, custom_obj, token };
  kind type = kind::tensor;
  std::string name;
  argument constant;      ///< the value of a ConstantArgument
  std::string class_fqn;  ///< the class of a CustomObjArgument

  static argument_spec tensor(std::string n) { return {kind::tensor, std::move(n), {}, {}}; }
  static argument_spec sym_int(std::string n) { return {kind::sym_int, std::move(n), {}, {}}; }
  static argument_spec token(std::string n) { return {kind::token, std::move(n), {}, {}}; }
  static argument_spec constant_value(std::string n, argument v) {
    return {kind::constant, std::move(n), std::move(v), {}};
  }
  friend bool operator==(const argument_spec&, const argument_spec&) = default;
};

struct input_spec {
  input_kind kind = input_kind::user_input;
  argument_spec arg;
  std::optional<std::string> target;  ///< FQN of a parameter/buffer/constant
  std::optional<bool> persistent;     ///< set for buffers only

  /// `p_fc_weight: PARAMETER target='fc.weight'`, as torch prints an InputSpec.
  [[nodiscard]] std::string str() const {
    std::string s = arg.name + ": " + std::string(to_string(kind));
    if (target) s += " target='" + *target + "'";
    if (persistent) s += *persistent ? " persistent=True" : " persistent=False";
    return s;
  }
  friend bool operator==(const input_spec&, const input_spec&) = default;
};

struct output_spec {
  output_kind kind = output_kind::user_output;
  argument_spec arg;
  std::optional<std::string> target;  ///< mutated buffer/parameter FQN, or mutated input's name

  /// `add_2: BUFFER_MUTATION target='my_buffer2'`, as torch prints an OutputSpec.
  [[nodiscard]] std::string str() const {
    std::string s = arg.name + ": " + std::string(to_string(kind));
    if (target) s += " target='" + *target + "'";
    return s;
  }
  friend bool operator==(const output_spec&, const output_spec&) = default;
};

/// torch.export.ExportGraphSignature: the only stored data are the two spec lists.
class graph_signature {
 public:
  using name_map = std::vector<std::pair<std::string, std::string>>;

  std::vector<input_spec> input_specs;
  std::vector<output_spec> output_specs;

  /// FQNs of the parameters, in input order.
  [[nodiscard]] std::vector<std::string> parameters() const { return targets(input_kind::parameter); }
  /// FQNs of the buffers (persistent or not), in input order.
  [[nodiscard]] std::vector<std::string> buffers() const { return targets(input_kind::buffer); }
  [[nodiscard]] std::vector<std::string> non_persistent_buffers() const {
    std::vector<std::string> out;
    for (const auto& s : input_specs)
      if (s.kind == input_kind::buffer && s.persistent == false && s.target) out.push_back(*s.target);
    return out;
  }
  [[nodiscard]] std::vector<std::string> lifted_tensor_constants() const {
    return targets(input_kind::constant_tensor);
  }
  [[nodiscard]] std::vector<std::string> lifted_custom_objs() const {
    return targets(input_kind::custom_obj);
  }
  /// Names of the user inputs (placeholder names; constant inputs by their name).
  [[nodiscard]] std::vector<std::string> user_inputs() const {
    std::vector<std::string> out;
    for (const auto& s : input_specs)
      if (s.kind == input_kind::user_input) out.push_back(s.arg.name);
    return out;
  }
  /// Names of the user outputs (and the loss output), in output order.
  [[nodiscard]] std::vector<std::string> user_outputs() const {
    std::vector<std::string> out;
    for (const auto& s : output_specs)
      if (s.kind == output_kind::user_output || s.kind == output_kind::loss_output)
        out.push_back(s.arg.name);
    return out;
  }
  [[nodiscard]] name_map inputs_to_parameters() const { return input_map(input_kind::parameter); }
  [[nodiscard]] name_map inputs_to_buffers() const { return input_map(input_kind::buffer); }
  [[nodiscard]] name_map inputs_to_lifted_tensor_constants() const {
    return input_map(input_kind::constant_tensor);
  }
  [[nodiscard]] name_map inputs_to_lifted_custom_objs() const {
    return input_map(input_kind::custom_obj);
  }
  /// Output name -> FQN of the buffer it updates.
  [[nodiscard]] name_map buffers_to_mutate() const { return output_map(output_kind::buffer_mutation); }
  [[nodiscard]] name_map parameters_to_mutate() const {
    return output_map(output_kind::parameter_mutation);
  }
  /// Output name -> name of the user input it updates.
  [[nodiscard]] name_map user_inputs_to_mutate() const {
    return output_map(output_kind::user_input_mutation);
  }
  [[nodiscard]] std::vector<std::string> input_tokens() const {
    std::vector<std::string> out;
    for (const auto& s : input_specs)
      if (s.kind == input_kind::token) out.push_back(s.arg.name);
    return out;
  }
  [[nodiscard]] std::vector<std::string> output_tokens() const {
    std::vector<std::string> out;
    for (const auto& s : output_specs)
      if (s.kind == output_kind::token) out.push_back(s.arg.name);
    return out;
  }

  /// The spec of the input named `name`, or nullptr.
  [[nodiscard]] const input_spec* find_input(std::string_view name) const {
    for (const auto& s : input_specs)
      if (s.arg.name == name) return &s;
    return nullptr;
  }

  /// torch's `str(ExportGraphSignature)`: "\n# inputs\n...\n\n# outputs\n...\n".
  [[nodiscard]] std::string str() const {
    std::string s = "\n# inputs\n";
    for (const auto& i : input_specs) s += i.str() + "\n";
    s += "\n# outputs\n";
    for (const auto& o : output_specs) s += o.str() + "\n";
    return s;
  }

  friend bool operator==(const graph_signature&, const graph_signature&) = default;

 private:
  [[nodiscard]] std::vector<std::string> targets(input_kind k) const {
    std::vector<std::string> out;
    for (const auto& s : input_specs)
      if (s.kind == k && s.target) out.push_back(*s.target);
    return out;
  }
  [[nodiscard]] name_map input_map(input_kind k) const {
    name_map out;
    for (const auto& s : input_specs)
      if (s.kind == k && s.target) out.emplace_back(s.arg.name, *s.target);
    return out;
  }
  [[nodiscard]] name_map output_map(output_kind k) const {
    name_map out;
    for (const auto& s : output_specs)
      if (s.kind == k && s.target) out.emplace_back(s.arg.name, *s.target);
    return out;
  }
};

XPORT_END_NAMESPACE
// #include <xport/ir/treespec.hpp>
// xport/ir/treespec.hpp: the structure of a program's inputs and outputs (torch's TreeSpec).
// Tensor leaves, constant leaves (specialized C++ scalars and strings), None, tuple / list /
// dict containers, and pytree nodes of types C++ does not have (a dataclass, a Hugging Face
// ModelOutput, a namedtuple, a user's registered type), kept by type name and context so that
// a program torch wrote saves back unchanged. A program's in_spec is the tuple of the forward's
// arguments, which may name them (torch's forward_arg_names) and mark the last ones as keyword
// arguments (programs written by torch with kwargs). Building specs from C++ values lives in
// trace/tree.hpp.

#include <cstdint>  // std::uint8_t
#include <optional>  // std::optional
#include <string>   // std::string
#include <string_view>  // std::string_view
#include <vector>   // std::vector

// #include <xport/config.hpp>
// #include <xport/detail/python_repr.hpp>
// #include <xport/ir/graph.hpp>

XPORT_BEGIN_NAMESPACE

/// The structure of a (nested) C++ value: tensor leaves, constant leaves, and containers.
///
/// Note [Pytree node types]: torch names every container by its serialized type name and keeps
/// a context beside its children (a dict's keys, a dataclass's field names, a namedtuple's type).
/// xport reads the builtin ones as tuple / list / dict / None; a dict or list of another type
/// (`collections.OrderedDict`, `collections.defaultdict`, fx's immutable ones) stays a dict or a
/// list that remembers its type and context. Any other type is a `node`: its children in order,
/// with field names where its context gives one per child (a dataclass's `[[fields], [None
/// fields]]`, a ModelOutput's `[keys]`); a namedtuple's context names its type, not its fields,
/// so its children are positional. Saving writes the type name and context back as read.
struct treespec {
  enum class kind : std::uint8_t { leaf, constant, none, tuple, list, dict, node };
  kind type = kind::leaf;
  argument value;                 ///< a constant leaf's value
  /// Dict keys, in iteration order; a node's field names (empty when its context names none).
  /// At the top of an in_spec (a tuple of the arguments): the arguments' names, one per child,
  /// or none when they are not known.
  std::vector<std::string> keys;
  std::vector<treespec> children;
  /// At the top of an in_spec: how many of the last children are keyword arguments.
  std::size_t num_kwargs = 0;
  /// torch's serialized type name (`transformers.modeling_outputs.CausalLMOutputWithPast`,
  /// `collections.OrderedDict`); empty for the builtin tuple, list, dict and None.
  std::string type_name;
  /// The context as torch serialized it, kept to be written back unchanged: the string its
  /// `to_dumpable_context` gave (JSON text for most types, `[["a", "b"], ["c"]]` for a dataclass;
  /// a namedtuple's type name), or, where that was another JSON value (a defaultdict's object),
  /// its JSON text with `context_is_json` set. Empty when xport writes its own (builtins).
  std::string context;
  bool context_is_json = false;

  static treespec leaf() { return {}; }
  static treespec constant(argument v) { return {kind::constant, std::move(v), {}, {}, 0, {}, {}, false}; }
  static treespec of(kind k, std::vector<treespec> children = {}, std::vector<std::string> keys = {}) {
    return {k, {}, std::move(keys), std::move(children), 0, {}, {}, false};
  }
  /// A pytree node of type `type_name` (see Note [Pytree node types]).
  static treespec node(std::string type_name, std::string context, std::vector<treespec> children,
                       std::vector<std::string> fields = {}) {
    return {kind::node, {}, std::move(fields), std::move(children), 0, std::move(type_name), std::move(context), false};
  }

  /// The child under key or field `name`, or null (dicts and nodes with field names).
  [[nodiscard]] const treespec* child(std::string_view name) const {
    for (std::size_t i = 0; i < keys.size() && i < children.size(); ++i)
      if (keys[i] == name) return &children[i];
    return nullptr;
  }
  /// The type's last dotted part (`CausalLMOutputWithPast`), or the builtin's name.
  [[nodiscard]] std::string short_type_name() const {
    if (!type_name.empty()) return type_name.substr(type_name.rfind('.') + 1);
    switch (type) {
      case kind::tuple: return "tuple";
      case kind::list: return "list";
      case kind::dict: return "dict";
      case kind::none: return "None";
      default: return "";
    }
  }

  /// Number of leaves, constant leaves included: a program has one placeholder per leaf.
  [[nodiscard]] std::size_t num_all_leaves() const {
    if (type == kind::leaf || type == kind::constant) return 1;
    std::size_t n = 0;
    for (const auto& c : children) n += c.num_all_leaves();
    return n;
  }

  /// The same structure, argument names aside (what a call must match).
  [[nodiscard]] bool same_structure(const treespec& o) const {
    if (type != o.type || num_kwargs != o.num_kwargs || children.size() != o.children.size()) return false;
    if (type == kind::dict || type == kind::node ? keys != o.keys : !(value == o.value)) return false;
    if (type == kind::node && (type_name != o.type_name || context != o.context || context_is_json != o.context_is_json))
      return false;
    for (std::size_t i = 0; i < children.size(); ++i)
      if (!children[i].same_structure(o.children[i])) return false;
    return true;
  }

  /// Number of tensor leaves.
  [[nodiscard]] std::size_t num_leaves() const {
    if (type == kind::leaf) return 1;
    std::size_t n = 0;
    for (const auto& c : children) n += c.num_leaves();
    return n;
  }

  /// torch-like text: `(*, [*, *], {'a': *}, 3, None)`.
  [[nodiscard]] std::string str() const {
    switch (type) {
      case kind::leaf: return "*";
      case kind::constant: return value.is_string() ? detail::python_str_repr(value.as_string()) : constant_text();
      case kind::none: return "None";
      case kind::tuple:
      case kind::list: {
        std::string s = type == kind::tuple ? "(" : "[";
        for (std::size_t i = 0; i < children.size(); ++i) {
          const bool kwarg = i + num_kwargs >= children.size() && i < keys.size();
          s += (i ? ", " : "") + (kwarg ? keys[i] + "=" : std::string()) + children[i].str();
        }
        if (type == kind::tuple && children.size() == 1) s += ",";
        return s + (type == kind::tuple ? ")" : "]");
      }
      case kind::dict: {
        std::string s = type_name.empty() ? "{" : short_type_name() + "({";
        for (std::size_t i = 0; i < children.size(); ++i)
          s += (i ? ", " : "") + ("'" + keys[i] + "': ") + children[i].str();
        return s + (type_name.empty() ? "}" : "})");
      }
      case kind::node: {  // `CausalLMOutputWithPast(logits=*)`, a namedtuple `Point(*, *)`
        std::string s = short_type_name() + "(";
        for (std::size_t i = 0; i < children.size(); ++i)
          s += (i ? ", " : "") + (i < keys.size() ? keys[i] + "=" : std::string()) + children[i].str();
        return s + ")";
      }
    }
    return "?";
  }

  friend bool operator==(const treespec&, const treespec&) = default;

 private:
  [[nodiscard]] std::string constant_text() const {
    if (value.is_none()) return "None";
    if (value.is_bool()) return value.as_bool() ? "True" : "False";
    if (value.is_int()) return std::to_string(value.as_int());
    if (value.is_double()) return detail::python_float_repr(value.as_double());
    return "?";
  }
};

XPORT_END_NAMESPACE
// #include <xport/ir/program.hpp>
// xport/ir/program.hpp: exported_program, what torch.export.export returns.
// A graph, its signature, the state dict (parameters and persistent buffers), the constants
// (lifted tensors and non-persistent buffers), range constraints of symbolic sizes, the call
// structure and module types when exported from C++ values, and optionally the example inputs. Running lives in run/interpreter.hpp; checking in verify.hpp;
// printing in print.hpp.

#include <cstdint>    // std::int64_t
#include <memory>     // std::shared_ptr
#include <mutex>      // std::mutex
#include <optional>   // std::optional
#include <unordered_map>  // std::unordered_map
#include <string>     // std::string
#include <utility>    // std::pair, std::move
#include <vector>     // std::vector

#include <ATen/core/Tensor.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/signature.hpp>
// #include <xport/ir/sym_expr.hpp>
// #include <xport/ir/treespec.hpp>

XPORT_BEGIN_NAMESPACE

/// An insertion-ordered map from names to tensors (Python's dict of state), with O(1) lookup.
class tensor_dict {
 public:
  using item = std::pair<std::string, at::Tensor>;

  tensor_dict() = default;
  tensor_dict(std::initializer_list<item> items) {
    for (const auto& [k, v] : items) set(k, v);
  }

  [[nodiscard]] const at::Tensor* find(std::string_view name) const {
    const auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  [[nodiscard]] bool contains(std::string_view name) const { return find(name) != nullptr; }
  [[nodiscard]] const at::Tensor& at(std::string_view name) const {
    if (const auto* t = find(name)) return *t;
    throw error("xport.program.missing_state", "no tensor named '" + std::string(name) + "'");
  }
  /// Inserts or replaces.
  void set(const std::string& name, at::Tensor t) {
    const auto [it, fresh] = index_.try_emplace(name, items_.size());
    if (fresh) items_.emplace_back(name, std::move(t));
    else items_[it->second].second = std::move(t);
  }
  bool erase(std::string_view name) {
    const auto it = index_.find(std::string(name));
    if (it == index_.end()) return false;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (std::size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    return true;
  }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }
  [[nodiscard]] auto begin() const noexcept { return items_.begin(); }
  [[nodiscard]] auto end() const noexcept { return items_.end(); }
  /// Iteration may replace tensors, not names.
  [[nodiscard]] auto begin() noexcept { return items_.begin(); }
  [[nodiscard]] auto end() noexcept { return items_.end(); }

 private:
  std::vector<item> items_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// The range of one symbol: `VR[min, max]`; an absent max is infinity (`int_oo`).
struct range_constraint {
  sym_int symbol;
  std::int64_t min = 0;
  std::optional<std::int64_t> max;
  /// The user's name for the dimension (`batch`), or where a hinted dim came from (`x.shape[1]`);
  /// used in guard messages, not printed.
  std::string name;

  [[nodiscard]] std::string str() const {
    return symbol.str() + ": " + value_range{min, max.value_or(int_oo)}.str();
  }
};

/// Which verifier a program satisfies: torch's "TRAINING" (in-place ops allowed) or "ATEN"
/// (functional).
enum class ir_dialect : std::uint8_t { training, aten };

inline std::string_view to_string(ir_dialect d) { return d == ir_dialect::training ? "TRAINING" : "ATEN"; }

namespace detail {
/// Whatever the interpreter caches per program; opaque here (see run/interpreter.hpp).
struct run_cache {
  virtual ~run_cache() = default;
};

/// The slot run/interpreter.hpp keeps its compiled interpreter in. It belongs to one program
/// object: a moved-to or assigned program starts empty (what was compiled refers to the program
/// it was built from), and every mutable access to the program empties it. Thread-safe.
class run_cache_slot {
 public:
  run_cache_slot() = default;
  run_cache_slot(run_cache_slot&&) noexcept {}
  run_cache_slot& operator=(run_cache_slot&&) noexcept {
    reset();
    return *this;
  }

  [[nodiscard]] std::shared_ptr<run_cache> get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_;
  }
  void set(std::shared_ptr<run_cache> c) const {
    std::lock_guard<std::mutex> lock(mu_);
    cache_ = std::move(c);
  }
  void reset() const {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.reset();
  }
  /// Held while the interpreter is compiled, so that two first runs compile once.
  [[nodiscard]] std::mutex& build_mutex() const { return build_mu_; }

 private:
  mutable std::shared_ptr<run_cache> cache_;
  mutable std::mutex mu_;
  mutable std::mutex build_mu_;
};
// A program's graph, held by pointer so that a basic_exported_program<Policy> holds a
// basic_graph<Policy>. Assigning one holder to another moves the graph's nodes into the graph
// object already held, so a program's graph keeps the policy it was made with whatever is
// assigned to the program (a pass writing `program = lowered(program)` through an
// exported_program& keeps a policy program's typed graph).
class graph_holder {
 public:
  explicit graph_holder(std::unique_ptr<graph> g) noexcept : g_(std::move(g)) {}
  graph_holder(graph_holder&&) noexcept = default;
  graph_holder& operator=(graph_holder&& o) noexcept {
    if (this == &o) return *this;
    if (g_ && o.g_) *g_ = std::move(*o.g_);
    else g_ = std::move(o.g_);
    return *this;
  }
  graph_holder(const graph_holder&) = delete;
  graph_holder& operator=(const graph_holder&) = delete;
  ~graph_holder() = default;
  [[nodiscard]] graph* get() const noexcept { return g_.get(); }
  void reset(std::unique_ptr<graph> g) noexcept { g_ = std::move(g); }

 private:
  std::unique_ptr<graph> g_;
};


/// Moves tensors to one device storage by storage (see exported_program::to).
class storage_mover {
 public:
  explicit storage_mover(c10::Device device) : device_(device) {}

  at::Tensor operator()(const at::Tensor& t) {
    if (!t.defined() || t.device() == device_) return t;
    if (const auto it = tensors_.find(t.unsafeGetTensorImpl()); it != tensors_.end()) return it->second;
    const bool grad = t.requires_grad();
    at::Tensor out;
    if (t.layout() != c10::kStrided || !t.has_storage()) {
      out = t.detach().to(device_);
    } else {
      const c10::Storage& from = t.storage();
      auto it = storages_.find(from.unsafeGetStorageImpl());
      if (it == storages_.end()) {
        const auto n = static_cast<std::int64_t>(from.nbytes());
        at::Tensor bytes = t.new_empty({0}, t.options().dtype(c10::kByte).requires_grad(false));
        bytes.set_(from, 0, {n}, {1});
        it = storages_.emplace(from.unsafeGetStorageImpl(), bytes.to(device_).storage()).first;
      }
      out = t.new_empty({0}, t.options().device(device_).requires_grad(false));
      out.set_(it->second, t.storage_offset(), t.sizes(), t.strides());
    }
    if (grad) out.requires_grad_(true);
    tensors_.emplace(t.unsafeGetTensorImpl(), out);
    return out;
  }

 private:
  c10::Device device_;
  std::unordered_map<const c10::StorageImpl*, c10::Storage> storages_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> tensors_;
};

/// `device=` arguments and tensor meta of `g` and of its subgraphs, set to `device`.
inline void retarget_device(graph& g, c10::Device device) {
  const auto retarget = [&](auto&& self, argument& a) -> bool {
    if (a.is_device()) {
      a = device;
      return true;
    }
    if (a.is_graph()) {
      auto sub = std::make_shared<subgraph>(subgraph{a.as_graph()->name, a.as_graph()->body.clone()});
      retarget_device(sub->body, device);
      a = std::shared_ptr<const subgraph>(std::move(sub));
      return true;
    }
    bool changed = false;
    if (a.is_list())
      for (auto& e : a.as_list()) changed = self(self, e) || changed;
    return changed;
  };
  for (auto n : g.nodes()) {
    for (auto v : n.outputs())
      if (v.kind() == value_kind::tensor) {
        auto m = v.meta();
        m.device = device;
        v.set_meta(std::move(m));
      }
    if (!n.is_call()) continue;
    std::vector<argument> args(n.args().begin(), n.args().end());
    bool changed = false;
    for (auto& a : args) changed = retarget(retarget, a) || changed;
    if (changed) n.set_args(std::move(args));
  }
}

}  // namespace detail

template <>
class basic_exported_program<default_policy> {
 public:
  using graph_type = xport::graph;
  using signature_type = xport::graph_signature;

  basic_exported_program(graph_type g, signature_type sig, tensor_dict state_dict = {},
                         tensor_dict constants = {}, std::vector<range_constraint> range_constraints = {},
                         ir_dialect dialect = ir_dialect::training)
      : graph_(std::make_unique<graph_type>(std::move(g))),
        signature_(std::move(sig)),
        state_dict_(std::move(state_dict)),
        constants_(std::move(constants)),
        range_constraints_(std::move(range_constraints)),
        dialect_(dialect) {}

  /// A moved-from program holds no graph: reading it is a typed error, assigning to it is fine.
  /// Assigning keeps the graph object (and so the policy) this program was made with.
  basic_exported_program(basic_exported_program&&) noexcept = default;
  basic_exported_program& operator=(basic_exported_program&&) noexcept = default;
  basic_exported_program(const basic_exported_program&) = delete;
  basic_exported_program& operator=(const basic_exported_program&) = delete;
  ~basic_exported_program() = default;

  /// A deep copy of the graph (custom node metadata included) and signature; tensors are
  /// shared, not copied.
  [[nodiscard]] exported_program clone() const {
    exported_program p(checked_graph().clone(), signature_, state_dict_, constants_, range_constraints_, dialect_);
    p.example_inputs_ = example_inputs_;
    p.in_spec_ = in_spec_;
    p.out_spec_ = out_spec_;
    p.module_types_ = module_types_;
    return p;
  }

  [[nodiscard]] const graph_type& graph() const { return checked_graph(); }
  /// Mutable access; drops whatever the interpreter cached for this program.
  [[nodiscard]] graph_type& graph_mut() {
    invalidate();
    return checked_graph();
  }
  [[nodiscard]] const signature_type& signature() const noexcept { return signature_; }
  [[nodiscard]] signature_type& signature_mut() {
    invalidate();
    return signature_;
  }
  /// Parameters and persistent buffers, by FQN.
  [[nodiscard]] const tensor_dict& state_dict() const noexcept { return state_dict_; }
  [[nodiscard]] tensor_dict& state_dict_mut() {
    invalidate();
    return state_dict_;
  }
  /// Lifted constant tensors and non-persistent buffers, by FQN.
  [[nodiscard]] const tensor_dict& constants() const noexcept { return constants_; }
  [[nodiscard]] tensor_dict& constants_mut() {
    invalidate();
    return constants_;
  }
  [[nodiscard]] const std::vector<range_constraint>& range_constraints() const noexcept {
    return range_constraints_;
  }
  [[nodiscard]] std::vector<range_constraint>& range_constraints_mut() {
    invalidate();
    return range_constraints_;
  }
  [[nodiscard]] ir_dialect dialect() const noexcept { return dialect_; }
  void set_dialect(ir_dialect d) noexcept { dialect_ = d; }

  /// The structure of the inputs (a tuple of the positional arguments) and of the outputs, when
  /// the program was exported from C++ values; absent for hand-built programs (flat tensors).
  [[nodiscard]] const std::optional<treespec>& in_spec() const noexcept { return in_spec_; }
  [[nodiscard]] const std::optional<treespec>& out_spec() const noexcept { return out_spec_; }
  void set_call_spec(std::optional<treespec> in, std::optional<treespec> out) {
    in_spec_ = std::move(in);
    out_spec_ = std::move(out);
  }

  /// (FQN, type) of the exported module and its submodules, root ("") first, as
  /// `named_modules()` lists them (`{"", "MLPImpl"}, {"fc1", "torch::nn::LinearImpl"}`): torch's
  /// module call graph, and the types of a node's `nn_module_stack` in a .pt2. Empty when the
  /// program was not exported from a module; loaded from a .pt2, the types are those its nodes'
  /// module stacks name (empty for the others).
  [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& module_types() const noexcept {
    return module_types_;
  }
  void set_module_types(std::vector<std::pair<std::string, std::string>> types) { module_types_ = std::move(types); }

  /// The example user inputs the program was captured with, if kept.
  [[nodiscard]] const std::optional<std::vector<at::Tensor>>& example_inputs() const noexcept {
    return example_inputs_;
  }
  void set_example_inputs(std::optional<std::vector<at::Tensor>> inputs) {
    example_inputs_ = std::move(inputs);
  }

  /// (FQN, tensor) of every parameter, in signature order.
  [[nodiscard]] std::vector<std::pair<std::string, at::Tensor>> named_parameters() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& fqn : signature_.parameters()) out.emplace_back(fqn, state_dict_.at(fqn));
    return out;
  }
  /// (FQN, tensor) of every buffer: persistent ones from the state dict, others from constants.
  [[nodiscard]] std::vector<std::pair<std::string, at::Tensor>> named_buffers() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& s : signature_.input_specs)
      if (s.kind == input_kind::buffer && s.target)
        out.emplace_back(*s.target, s.persistent.value_or(true) ? state_dict_.at(*s.target)
                                                                : constants_.at(*s.target));
    return out;
  }
  [[nodiscard]] std::vector<at::Tensor> parameters() const { return values_of(named_parameters()); }
  [[nodiscard]] std::vector<at::Tensor> buffers() const { return values_of(named_buffers()); }

  /// Moves the state and constants to `device` and retargets the graph, its subgraphs included
  /// (tensor meta and `device=` arguments), so the program runs on inputs on that device.
  /// Storages move whole, once each: views of one storage (tied weights) stay views of one
  /// storage, and one tensor under two names stays one tensor. Parameters stay leaves with
  /// their requires_grad flag. torch's `move_to_device_pass`.
  void to(c10::Device device) {
    detail::storage_mover mover(device);
    for (auto& [name, t] : state_dict_) t = mover(t);
    for (auto& [name, t] : constants_) t = mover(t);
    detail::retarget_device(checked_graph(), device);
    if (example_inputs_)
      for (auto& t : *example_inputs_) t = mover(t);
    invalidate();
  }

  /// torch's `ep.module()`: the program as a torch::nn::Module that torch::optim trains, its
  /// parameters and buffers this program's state (run/module.hpp; include <xport/train.hpp>).
  template <class Module = program_module>
  [[nodiscard]] std::shared_ptr<Module> module() const {
    return std::make_shared<Module>(*this);
  }

  /// The tensor a lifted input (parameter, buffer or constant) reads, by its input spec.
  [[nodiscard]] const at::Tensor& lifted_tensor(const input_spec& s) const {
    const bool in_state = s.kind == input_kind::parameter ||
                          (s.kind == input_kind::buffer && s.persistent.value_or(true));
    const auto& dict = in_state ? state_dict_ : constants_;
    if (!s.target)
      throw error("xport.program.missing_state", "input '" + s.arg.name + "' has no target");
    return dict.at(*s.target);
  }

  /// For run/interpreter.hpp: the cache slot; emptied on every mutable access.
  [[nodiscard]] std::shared_ptr<detail::run_cache> run_cache_get() const { return cache_.get(); }
  void run_cache_set(std::shared_ptr<detail::run_cache> c) const { cache_.set(std::move(c)); }
  [[nodiscard]] std::mutex& run_cache_mutex() const { return cache_.build_mutex(); }

 private:
  static std::vector<at::Tensor> values_of(const std::vector<std::pair<std::string, at::Tensor>>& xs) {
    std::vector<at::Tensor> out;
    out.reserve(xs.size());
    for (const auto& [k, v] : xs) out.push_back(v);
    return out;
  }
  void invalidate() { cache_.reset(); }

 protected:
  /// For basic_exported_program<Policy>: replaces the graph object by one made from it.
  template <class G>
  void adopt_graph_as() {
    graph_.reset(std::make_unique<G>(std::move(checked_graph())));
  }
  [[nodiscard]] graph_type& checked_graph() const {
    if (!graph_.get())
      throw error("xport.program.moved_from",
                  "this exported_program was moved from and holds no graph: use the program it was moved to");
    return *graph_.get();
  }

 private:
  detail::graph_holder graph_;
  signature_type signature_;
  tensor_dict state_dict_;
  tensor_dict constants_;
  std::vector<range_constraint> range_constraints_;
  std::optional<std::vector<at::Tensor>> example_inputs_;
  std::optional<treespec> in_spec_;
  std::optional<treespec> out_spec_;
  std::vector<std::pair<std::string, std::string>> module_types_;
  ir_dialect dialect_ = ir_dialect::training;
  detail::run_cache_slot cache_;
};

/// A program whose graph is a basic_graph<Policy> (its nodes carry `Policy::node_meta`). It is
/// an exported_program: run, print, verify, save and every pass take it as one. Made from any
/// program (`basic_exported_program<P> p = export_program(...);`): the nodes move, no copy.
template <class Policy>
class basic_exported_program : public exported_program {
 public:
  using policy_type = Policy;
  using graph_type = basic_graph<Policy>;

  basic_exported_program(exported_program&& p) : exported_program(std::move(p)) {  // NOLINT: by design
    adopt_graph_as<graph_type>();
  }
  basic_exported_program(basic_exported_program&&) noexcept = default;
  basic_exported_program& operator=(basic_exported_program&&) noexcept = default;
  ~basic_exported_program() = default;

  /// The typed graph (a typed error if a moved-from program was assigned a plain program's).
  [[nodiscard]] const graph_type& graph() const { return graph_cast<Policy>(checked_graph()); }
  [[nodiscard]] graph_type& graph_mut() { return graph_cast<Policy>(exported_program::graph_mut()); }
  /// A deep copy, metadata included.
  [[nodiscard]] basic_exported_program clone() const { return basic_exported_program(exported_program::clone()); }
};

/// A subgraph as a program of its own: every placeholder a user input, every output a user
/// output, no state (what the interpreter compiles, and what lowering and passes transform).
inline exported_program subgraph_program(const subgraph& s, ir_dialect dialect = ir_dialect::training) {
  graph_signature sig;
  for (auto ph : s.body.placeholders())
    sig.input_specs.push_back(input_spec{input_kind::user_input, argument_spec::tensor(ph.name()), {}, {}});
  const node out = s.body.output_node();
  for (const auto& a : out.args())
    sig.output_specs.push_back(output_spec{output_kind::user_output,
                                           a.is_value() ? argument_spec::tensor(a.as_value().name())
                                                        : argument_spec::constant_value("", a),
                                           {}});
  return exported_program(s.body.clone(), std::move(sig), {}, {}, {}, dialect);
}

XPORT_END_NAMESPACE

// what xport knows about ATen operators
// #include <xport/ops/op_sets.hpp>
// xport/ops/op_sets.hpp: the named sets of ATen operators xport treats alike, in one place.
// Each set is a predicate over an operator's name (`aten::reshape`, overload not included) and
// says what the members share and which part of xport relies on it. Sets that LibTorch tags
// itself (`core`, `maybe_aliasing_or_mutating`) are read from the tags where the running
// LibTorch has them (ops/core_ops.hpp, lower/decompose.hpp). The ops that read tensor data have
// their own header, with their shape rules: ops/data_dependent.hpp.

#include <algorithm>    // std::find
#include <cstddef>      // std::size_t
#include <iterator>     // std::begin, std::end
#include <string_view>  // std::string_view

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

template <std::size_t N>
constexpr bool in_set(std::string_view name, const std::string_view (&set)[N]) {
  return std::find(std::begin(set), std::end(set), name) != std::end(set);
}

/// Ops that return an alias of their input only sometimes (a copy otherwise); functionalization
/// treats them as copies (lower/functionalize.hpp).
inline constexpr std::string_view maybe_alias_ops[] = {
    "aten::reshape",      "aten::contiguous",      "aten::to",        "aten::flatten",    "aten::type_as",
    "aten::unflatten",    "aten::dropout",         "aten::feature_dropout", "aten::alpha_dropout",
    "aten::_to_copy",     "aten::clone",           "aten::lift_fresh", "aten::view_as"};
constexpr bool is_maybe_alias_op(std::string_view name) { return in_set(name, maybe_alias_ops); }

/// Ops that only change memory layout: a capture at another size may record them or not
/// (`contiguous()` records nothing on a tensor that already is), so export's structure
/// comparison may skip them (trace/symbolic.hpp).
inline constexpr std::string_view layout_only_ops[] = {"aten::contiguous", "aten::clone"};
constexpr bool is_layout_only_op(std::string_view name) { return in_set(name, layout_only_ops); }

/// Batch norm with running statistics as arguments (updated in place in training).
inline constexpr std::string_view batch_norm_ops[] = {"aten::batch_norm", "aten::native_batch_norm"};
constexpr bool is_batch_norm_op(std::string_view name) { return in_set(name, batch_norm_ops); }

/// Windowed ops whose output length is ops/shape_formulas.hpp's window formula.
/// convolution(input, weight, bias, stride, padding, dilation, transposed, ...), conv{1,2,3}d
/// (input, weight, bias, stride, padding, dilation, groups).
inline constexpr std::string_view convolution_ops[] = {"aten::convolution", "aten::_convolution", "aten::conv1d",
                                                       "aten::conv2d", "aten::conv3d"};
constexpr bool is_convolution_op(std::string_view name) { return in_set(name, convolution_ops); }
/// max_pool(input, kernel, stride, padding, dilation, ceil_mode).
inline constexpr std::string_view max_pool_ops[] = {"aten::max_pool1d", "aten::max_pool2d",
                                                    "aten::max_pool2d_with_indices", "aten::max_pool3d",
                                                    "aten::max_pool3d_with_indices"};
constexpr bool is_max_pool_op(std::string_view name) { return in_set(name, max_pool_ops); }
/// avg_pool(input, kernel, stride, padding, ceil_mode, ...).
inline constexpr std::string_view avg_pool_ops[] = {"aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d"};
constexpr bool is_avg_pool_op(std::string_view name) { return in_set(name, avg_pool_ops); }

/// Ops whose result is a view of the input with the given sizes, which the interpreter runs as
/// `reshape` (the same view when one exists, a copy otherwise: an input in another layout than
/// its example's). `aten::view` counts only in its default overload (`view.dtype` is no reshape).
inline constexpr std::string_view reshaping_view_ops[] = {"aten::view", "aten::_unsafe_view", "aten::_reshape_alias"};
constexpr bool is_reshaping_view(std::string_view name, std::string_view overload) {
  return in_set(name, reshaping_view_ops) && (name != "aten::view" || overload.empty());
}

/// LibTorch 2.13's ops tagged `maybe_aliasing_or_mutating`, for versions without the tag: their
/// composite is re-run for functionalization (lower/decompose.hpp). Qualified names.
inline constexpr std::string_view maybe_aliasing_or_mutating_ops[] = {
    "aten::_batch_norm_impl_index", "aten::alpha_dropout", "aten::atleast_1d", "aten::atleast_2d",
    "aten::atleast_3d", "aten::batch_norm", "aten::cartesian_prod", "aten::conj_physical", "aten::dropout",
    "aten::feature_alpha_dropout", "aten::feature_dropout", "aten::unsafe_chunk", "aten::native_batch_norm"};

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/ops/shape_formulas.hpp>
// xport/ops/shape_formulas.hpp: the output-size formulas of windowed ops (convolution, its
// transpose, pooling), each written once over any integer type: std::int64_t where a shape rule
// computes a concrete size (ops/meta_rules.hpp), sym_int where export fits a symbolic size to
// captures (trace/symbolic.hpp, through `window_candidates` below). The formulas are ATen's (aten/src/ATen/native/ConvUtils.h,
// Pool.h), without ceil_mode, whose correction term is a comparison, not an expression.

#include <algorithm>  // std::min
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <vector>     // std::vector

// #include <xport/config.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/sym_expr.hpp>
// #include <xport/ir/sym_int.hpp>
// #include <xport/ops/op_sets.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Python's floor division, for both integer types the formulas are used with.
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) { return py_floordiv(a, b); }
inline sym_int floor_div(const sym_int& a, std::int64_t b) { return sym::floordiv(a, sym_int(b)); }

/// Output length of a convolution or pooling window along one dim:
/// `(in + 2*pad - dilation*(kernel-1) - 1) // stride + 1`.
template <class Int>
Int window_output_size(const Int& in, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                       std::int64_t dilation) {
  return floor_div(in + (2 * pad - dilation * (kernel - 1) - 1), stride) + 1;
}

/// Output length of a transposed convolution along one dim:
/// `(in - 1)*stride - 2*pad + dilation*(kernel-1) + output_padding + 1`.
template <class Int>
Int transposed_window_output_size(const Int& in, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                                  std::int64_t dilation, std::int64_t output_padding) {
  return (in - 1) * stride + (dilation * (kernel - 1) - 2 * pad + output_padding + 1);
}

/// Export's shape-rule candidates (trace/symbolic.hpp) for sizes no linear form or product
/// gives: the window count of convolution and pooling along each symbolic spatial dim.
inline void window_candidates(const node& n, const std::vector<sym_int>& in_sizes, std::vector<sym_int>& out) {
  const auto& name = n.op().name;
  const auto args = n.args();
  auto ints = [&](std::size_t i) {
    std::vector<std::int64_t> v;
    if (i < args.size() && args[i].is_list())
      for (const auto& e : args[i].as_list()) v.push_back(e.is_int() ? e.as_int() : 0);
    return v;
  };
  std::vector<std::int64_t> kernel, stride, pad, dil;
  if (is_convolution_op(name)) {
    if (args.size() < 4 || !args[1].is_value()) return;
    const auto& w = args[1].as_value().meta().sizes;
    for (std::size_t i = 2; i < w.size(); ++i) kernel.push_back(w[i].hint());
    stride = ints(3), pad = ints(4), dil = ints(5);
    if (name == "aten::convolution" || name == "aten::_convolution") {
      const bool transposed = args.size() > 6 && args[6].is_bool() && args[6].as_bool();
      if (transposed) return;
    }
  } else if (is_max_pool_op(name)) {
    kernel = ints(1), stride = ints(2), pad = ints(3), dil = ints(4);
    if (args.size() > 5 && args[5].is_bool() && args[5].as_bool()) return;  // ceil_mode
  } else if (is_avg_pool_op(name)) {
    kernel = ints(1), stride = ints(2), pad = ints(3);
    if (args.size() > 4 && args[4].is_bool() && args[4].as_bool()) return;  // ceil_mode
  } else {
    return;
  }
  const auto nsp = kernel.size();
  if (in_sizes.size() < nsp) return;
  const std::size_t spatial0 = in_sizes.size() - nsp;
  auto at = [](const std::vector<std::int64_t>& v, std::size_t i, std::int64_t dflt) {
    return v.empty() ? dflt : v[std::min(i, v.size() - 1)];
  };
  for (std::size_t i = 0; i < nsp; ++i) {
    const auto& in = in_sizes[spatial0 + i];
    if (in.is_constant()) continue;
    const auto k = kernel[i], s = at(stride, i, k), p = at(pad, i, 0), d = at(dil, i, 1);
    if (s <= 0) continue;
    out.push_back(window_output_size(in, k, s, p, d));
  }
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/ops/schema.hpp>
// xport/ops/schema.hpp: arguments against an operator's schema.
// `bind_arguments` turns positional + keyword arguments into the full schema-ordered list
// (defaults filled, ints widened to floats where the schema wants a float, `int[2]` from a
// single int), or throws schema_error naming the op, the argument and the expected type.
// `to_ivalue` turns a bound constant argument into the IValue the dispatcher expects.

#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <sstream>      // std::ostringstream
#include <string>       // std::string
#include <vector>       // std::vector

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/ScalarOps.h>

// #include <xport/config.hpp>
// #include <xport/detail/python_repr.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

inline std::string schema_string(const c10::FunctionSchema& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

/// Human text for an argument given by the user: `int 3`, `Tensor x`, `list [1, 2]`.
inline std::string describe(const argument& a) {
  switch (a.type()) {
    case argument::kind::none: return "None";
    case argument::kind::boolean: return std::string("bool ") + (a.as_bool() ? "True" : "False");
    case argument::kind::integer: return "int " + std::to_string(a.as_int());
    case argument::kind::floating: return "float " + python_float_repr(a.as_double());
    case argument::kind::string: return "str " + python_str_repr(a.as_string());
    case argument::kind::dtype: return "dtype";
    case argument::kind::device: return "device";
    case argument::kind::layout: return "layout";
    case argument::kind::memory_format: return "memory_format";
    case argument::kind::value: {
      auto v = a.as_value();
      if (!v) return "a null value";
      switch (v.kind()) {
        case value_kind::tensor: return "Tensor '" + v.name() + "'";
        case value_kind::sym_int: return "SymInt '" + v.name() + "'";
        case value_kind::sym_float: return "SymFloat '" + v.name() + "'";
        case value_kind::sym_bool: return "SymBool '" + v.name() + "'";
        case value_kind::none: return "None value '" + v.name() + "'";
      }
      return "value";
    }
    case argument::kind::list: return "a list of " + std::to_string(a.as_list().size());
    case argument::kind::symbolic: return "SymInt " + a.as_sym().str();
    case argument::kind::graph: return "subgraph '" + a.as_graph()->name + "'";
  }
  return "?";
}

inline bool is_value_of(const argument& a, value_kind k) {
  return a.is_value() && a.as_value() && a.as_value().kind() == k;
}

/// Checks `a` against schema type `t` and coerces it in place (int -> float, scalar -> fixed
/// size list). Returns false when it does not fit.
inline bool coerce(argument& a, const c10::TypePtr& t, const c10::optional<int32_t>& fixed_n) {
  using K = c10::TypeKind;
  switch (t->kind()) {
    case K::OptionalType:
      return a.is_none() || coerce(a, t->castRaw<c10::OptionalType>()->getElementType(), fixed_n);
    case K::TensorType:
      // A Python number where a Tensor is expected becomes a wrapped-number tensor, as in
      // torch (`aten.add.Tensor(x, 1)` is how torch.export records `x + 1`); a symbolic size
      // too (`aten.mul.Tensor(x, sym_size_int_1)` is `x * x.size(0)`).
      return is_value_of(a, value_kind::tensor) || a.is_int() || a.is_double() || a.is_bool() || a.is_symbolic() ||
             is_value_of(a, value_kind::sym_int) || is_value_of(a, value_kind::sym_float);
    case K::IntType:
    case K::SymIntType: return a.is_int() || a.is_symbolic() || is_value_of(a, value_kind::sym_int);
    case K::FloatType:
      if (a.is_int()) a = static_cast<double>(a.as_int());
      return a.is_double() || is_value_of(a, value_kind::sym_float);
    case K::BoolType: return a.is_bool() || is_value_of(a, value_kind::sym_bool);
    case K::NumberType:
      return a.is_int() || a.is_double() || a.is_bool() || a.is_symbolic() || is_value_of(a, value_kind::sym_int) ||
             is_value_of(a, value_kind::sym_float);
    case K::StringType: return a.is_string();
    case K::ScalarTypeType: return a.is_dtype();
    case K::LayoutType: return a.is_layout();
    case K::MemoryFormatType: return a.is_memory_format();
    case K::DeviceObjType: return a.is_device();
    case K::GeneratorType: return a.is_none();
    case K::AnyType: return true;  // a control-flow operator's branch, or its predicate
    case K::ListType: {
      const auto& elem = t->castRaw<c10::ListType>()->getElementType();
      if (!a.is_list()) {
        // `int[2] stride` accepts a single int, as in Python.
        if (fixed_n && (a.is_int() || a.is_bool() || a.is_double())) {
          argument one = a;
          if (!coerce(one, elem, c10::nullopt)) return false;
          a = argument::list_type(static_cast<std::size_t>(*fixed_n), one);
          return true;
        }
        return false;
      }
      for (auto& e : a.as_list())
        if (!coerce(e, elem, c10::nullopt)) return false;
      return true;
    }
    default: return false;
  }
}

/// The schema type with Optional[...] removed.
inline c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType)
    return t->castRaw<c10::OptionalType>()->getElementType();
  return t;
}

/// A constant IValue (a schema default) as an argument of schema type `t`.
inline argument from_ivalue(const c10::IValue& v, const c10::TypePtr& t) {
  using K = c10::TypeKind;
  const auto kind = unwrap_optional(t)->kind();
  if (v.isNone()) return none;
  if (v.isBool()) return v.toBool();
  if (v.isInt()) {
    const auto i = v.toInt();
    if (kind == K::ScalarTypeType) return static_cast<c10::ScalarType>(i);
    if (kind == K::LayoutType) return static_cast<c10::Layout>(i);
    if (kind == K::MemoryFormatType) return static_cast<c10::MemoryFormat>(i);
    return i;
  }
  if (v.isDouble()) return v.toDouble();
  if (v.isString()) return v.toStringRef();
  if (v.isDevice()) return v.toDevice();
  if (v.isList()) {
    const auto elem = kind == K::ListType ? unwrap_optional(t)->castRaw<c10::ListType>()->getElementType()
                                          : c10::TypePtr(c10::AnyType::get());
    argument::list_type out;
    for (const auto& e : v.toListRef()) out.push_back(from_ivalue(e, elem));
    return out;
  }
  throw schema_error("xport.schema.default", "unsupported default value " + v.tagKind());
}

/// A Python number passed where a Tensor is expected: a 0-dim CPU tensor flagged as a wrapped
/// number, so type promotion treats it as the scalar it is.
/// Made without the dispatcher, so that no capture records it.
inline at::Tensor wrapped_number(const argument& a) {
  at::Tensor t = a.is_int()      ? at::detail::scalar_tensor_static(a.as_int(), c10::kLong, c10::kCPU)
                 : a.is_double() ? at::detail::scalar_tensor_static(a.as_double(), c10::kDouble, c10::kCPU)
                                 : at::detail::scalar_tensor_static(a.as_bool(), c10::kBool, c10::kCPU);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

/// A number computed at run time (a symbolic size, a sym_int value) passed where a Tensor is
/// expected: the wrapped-number tensor Python's binding makes of it; anything else unchanged.
inline c10::IValue wrapped_number(c10::IValue v) {
  if (v.isInt()) return wrapped_number(argument(v.toInt()));
  if (v.isDouble()) return wrapped_number(argument(v.toDouble()));
  if (v.isBool()) return wrapped_number(argument(v.toBool()));
  return v;
}

/// `int[2] stride` given as `[1]` (what at::conv2d(x, w, b, 1) passes) is `[1, 1]`: one
/// spelling per value, so equal calls compare, hash and print equal.
inline void expand_fixed_list(argument& a, const c10::Argument& param) {
  const auto n = param.N();
  if (!n || *n <= 1 || !a.is_list() || a.as_list().size() != 1) return;
  argument one = a.as_list()[0];
  a = argument::list_type(static_cast<std::size_t>(*n), one);
}

/// A schema default as an argument (fixed-size lists expanded).
inline argument default_argument(const c10::Argument& param) {
  argument a = from_ivalue(*param.default_value(), param.real_type());
  expand_fixed_list(a, param);
  return a;
}

/// Compiles a subgraph into the capsule a control-flow kernel receives (set by
/// run/interpreter.hpp, which every build of xport includes).
inline c10::IValue (*subgraph_compiler)(const subgraph&) = nullptr;

/// The IValue a subgraph argument is passed as: its compiled form (see subgraph_fn).
inline c10::IValue subgraph_ivalue(const subgraph& g) {
  if (!subgraph_compiler)
    throw graph_error("xport.argument.subgraph", "subgraph '" + g.name + "' cannot be called: include "
                                                 "<xport/run/interpreter.hpp>, which compiles subgraphs");
  return subgraph_compiler(g);
}

/// A bound constant argument as the IValue the dispatcher expects for schema type `t`.
/// Values (graph operands) are looked up with `lookup(value) -> c10::IValue`.
template <class Lookup>
c10::IValue to_ivalue(const argument& a, const c10::TypePtr& t, Lookup&& lookup) {
  using K = c10::TypeKind;
  if (t->kind() == K::TensorType && (a.is_int() || a.is_double() || a.is_bool())) return wrapped_number(a);
  if (t->kind() == K::TensorType && a.is_symbolic()) return wrapped_number(c10::IValue(a.as_sym().hint()));
  if (t->kind() == K::TensorType && a.is_value() && a.as_value() && a.as_value().kind() != value_kind::tensor)
    return wrapped_number(lookup(a.as_value()));
  switch (a.type()) {
    case argument::kind::none: return {};
    case argument::kind::boolean: return a.as_bool();
    case argument::kind::integer: return a.as_int();
    case argument::kind::floating: return a.as_double();
    case argument::kind::string: return a.as_string();
    case argument::kind::dtype: return a.as_dtype();
    case argument::kind::device: return a.as_device();
    case argument::kind::layout: return a.as_layout();
    case argument::kind::memory_format: return a.as_memory_format();
    case argument::kind::value: return lookup(a.as_value());
    case argument::kind::symbolic: return a.as_sym().hint();  // the example value (meta runs)
    case argument::kind::graph: return subgraph_ivalue(*a.as_graph());
    case argument::kind::list: break;
  }
  const auto lt = unwrap_optional(t);
  const auto elem = lt->kind() == K::ListType ? lt->castRaw<c10::ListType>()->getElementType()
                                              : c10::TypePtr(c10::AnyType::get());
  const auto& items = a.as_list();
  switch (elem->kind()) {
    case K::IntType:
    case K::SymIntType: {
      bool all_const = true;
      for (const auto& e : items) all_const = all_const && e.is_int();
      if (all_const) {
        c10::List<std::int64_t> l;
        l.reserve(items.size());
        for (const auto& e : items) l.push_back(e.as_int());
        return l;
      }
      c10::List<std::int64_t> l;
      for (const auto& e : items)
        l.push_back(e.is_int() ? e.as_int() : e.is_symbolic() ? e.as_sym().hint() : lookup(e.as_value()).toInt());
      return l;
    }
    case K::FloatType: {
      c10::List<double> l;
      for (const auto& e : items) l.push_back(e.is_double() ? e.as_double() : static_cast<double>(e.as_int()));
      return l;
    }
    case K::BoolType: {
      c10::List<bool> l;
      for (const auto& e : items) l.push_back(e.as_bool());
      return l;
    }
    case K::TensorType: {
      c10::List<at::Tensor> l;
      l.reserve(items.size());
      for (const auto& e : items) l.push_back(lookup(e.as_value()).toTensor());
      return l;
    }
    case K::OptionalType: {
      c10::List<c10::optional<at::Tensor>> l;
      l.reserve(items.size());
      for (const auto& e : items) {
        if (e.is_none()) l.push_back(c10::nullopt);
        else l.push_back(lookup(e.as_value()).toTensor());
      }
      return l;
    }
    default: {
      c10::impl::GenericList l(c10::AnyType::get());
      for (const auto& e : items) l.push_back(to_ivalue(e, elem, lookup));
      return l;
    }
  }
}

/// The schema-ordered argument list for `op`, defaults filled in.
inline std::vector<argument> bind_arguments(const op_info& op, std::vector<argument> args,
                                            std::vector<kwarg> kwargs) {
  const auto& schema = op.schema();
  const auto& params = schema.arguments();
  const auto fail = [&](const std::string& id, const std::string& what) -> void {
    throw schema_error(id, op.qualified + ": " + what + "\n  schema: " + schema_string(schema));
  };
  std::size_t n_positional = 0;
  for (const auto& p : params)
    if (!p.kwarg_only()) ++n_positional;
  if (args.size() > n_positional)
    fail("xport.schema.too_many_args",
         "takes at most " + std::to_string(n_positional) + " positional argument(s), got " +
             std::to_string(args.size()));

  std::vector<argument> bound(params.size());
  std::vector<bool> given(params.size(), false);
  for (std::size_t i = 0; i < args.size(); ++i) {
    bound[i] = std::move(args[i]);
    given[i] = true;
  }
  for (auto& kw : kwargs) {
    std::size_t i = 0;
    while (i < params.size() && params[i].name() != kw.name) ++i;
    if (i == params.size()) {
      std::string names;
      for (const auto& p : params) names += (names.empty() ? "" : ", ") + p.name();
      fail("xport.schema.unknown_kwarg",
           "has no argument named '" + kw.name + "' (arguments: " + names + ")");
    }
    if (given[i]) fail("xport.schema.duplicate_arg", "argument '" + kw.name + "' given twice");
    bound[i] = std::move(kw.value);
    given[i] = true;
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (!given[i]) {
      // An optional argument without a default (`*, int? correction` in LibTorch 1.13) is None,
      // as later schemas spell it.
      if (!p.default_value() && p.real_type()->kind() == c10::TypeKind::OptionalType) continue;
      if (!p.default_value())
        fail("xport.schema.missing_arg", "missing required argument '" + p.name() + "' (" +
                                             p.real_type()->str() + ")");
      bound[i] = default_argument(p);
      continue;
    }
    expand_fixed_list(bound[i], p);
    if (!coerce(bound[i], p.real_type(), p.N()))
      fail("xport.schema.arg_type", "argument '" + p.name() + "' (position " + std::to_string(i) +
                                        ") must be " + p.real_type()->str() + ", got " +
                                        describe(bound[i]));
  }
  return bound;
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/ops/meta_rules.hpp>
// xport/ops/meta_rules.hpp: output shapes for ops whose meta kernel LibTorch lacks.
// Each rule reads the op's arguments (tensors already on the meta device) and returns meta
// tensors of the outputs' sizes and dtypes; nothing runs on data. The set covers the gaps that
// real models hit (conv, batch/layer/group norm, relu, hardtanh, index_select/embedding, where,
// var/std, adaptive pooling); later LibTorch versions have meta kernels for most of them and
// never reach this table.

#include <algorithm>    // std::max
#include <cstdint>      // std::int64_t
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/result_type.h>

// #include <xport/config.hpp>
// #include <xport/ops/shape_formulas.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

using meta_stack = std::vector<c10::IValue>;
using meta_rule = std::vector<at::Tensor> (*)(const meta_stack&);

inline at::Tensor meta_empty(std::vector<std::int64_t> sizes, c10::ScalarType dtype) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(c10::kMeta));
}

inline std::vector<std::int64_t> sizes_of(const at::Tensor& t) {
  return {t.sizes().begin(), t.sizes().end()};
}

inline std::vector<std::int64_t> int_list(const c10::IValue& v) {
  if (v.isInt()) return {v.toInt()};
  const auto l = v.toIntList();
  return {l.begin(), l.end()};
}

inline std::int64_t wrap_dim(std::int64_t d, std::int64_t rank) {
  const auto r = std::max<std::int64_t>(rank, 1);
  return d < 0 ? d + r : d;
}

inline std::vector<std::int64_t> broadcast_sizes(const std::vector<std::vector<std::int64_t>>& shapes) {
  std::size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<std::int64_t> out(rank, 1);
  for (const auto& s : shapes)
    for (std::size_t i = 0; i < s.size(); ++i) {
      auto& o = out[rank - s.size() + i];
      if (s[i] != 1) o = s[i];
    }
  return out;
}

// ---- elementwise: same shape and dtype as the first argument --------------------------------
inline std::vector<at::Tensor> rule_like_self(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  return {meta_empty(sizes_of(x), x.scalar_type())};
}

inline std::vector<at::Tensor> rule_like_self_bool(const meta_stack& s) {
  return {meta_empty(sizes_of(s[0].toTensor()), c10::kBool)};
}

inline std::vector<at::Tensor> rule_like_self_real(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto t = x.scalar_type();
  const auto out = t == c10::kComplexFloat    ? c10::kFloat
                   : t == c10::kComplexDouble ? c10::kDouble
                   : c10::isFloatingType(t)   ? t
                                              : c10::kFloat;
  return {meta_empty(sizes_of(x), out)};
}

// full reductions to a 0-dim tensor (max(), min(), median(), trace())
inline std::vector<at::Tensor> rule_reduce_all(const meta_stack& s) {
  return {meta_empty({}, s[0].toTensor().scalar_type())};
}
// prod() / nansum(): integral inputs accumulate in int64
inline std::vector<at::Tensor> rule_reduce_all_promote(const meta_stack& s) {
  const auto t = s[0].toTensor().scalar_type();
  return {meta_empty({}, c10::isIntegralType(t, /*includeBool=*/true) ? c10::kLong : t)};
}
inline std::vector<at::Tensor> rule_count_all(const meta_stack&) {
  return {meta_empty({}, c10::kLong)};
}

// native_dropout(input, p, train?) -> (output, mask); LibTorch 1.13's CPU kernel returns a mask
// of the input's dtype in training, a bool mask otherwise.
inline std::vector<at::Tensor> rule_native_dropout(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const bool train = s[2].isNone() || s[2].toBool();
  return {meta_empty(sizes_of(x), x.scalar_type()), meta_empty(sizes_of(x), train ? x.scalar_type() : c10::kBool)};
}

// ---- convolution ----------------------------------------------------------------------------
inline std::vector<std::int64_t> conv_out_sizes(const at::Tensor& input, const at::Tensor& weight,
                                                std::vector<std::int64_t> stride,
                                                std::vector<std::int64_t> padding,
                                                std::vector<std::int64_t> dilation, bool transposed,
                                                std::vector<std::int64_t> output_padding,
                                                std::int64_t groups) {
  const auto in = sizes_of(input);
  const auto w = sizes_of(weight);
  const std::size_t spatial = w.size() - 2;
  const bool batched = in.size() == w.size();
  const auto pick = [](const std::vector<std::int64_t>& v, std::size_t i, std::int64_t dflt) {
    return v.empty() ? dflt : v[v.size() == 1 ? 0 : i];
  };
  std::vector<std::int64_t> out;
  if (batched) out.push_back(in[0]);
  out.push_back(transposed ? w[1] * groups : w[0]);
  const std::size_t off = batched ? 2 : 1;
  for (std::size_t i = 0; i < spatial; ++i) {
    const auto k = w[2 + i];
    const auto st = pick(stride, i, 1), pd = pick(padding, i, 0), dl = pick(dilation, i, 1);
    const auto x = in[off + i];
    out.push_back(transposed ? transposed_window_output_size(x, k, st, pd, dl, pick(output_padding, i, 0))
                             : window_output_size(x, k, st, pd, dl));
  }
  return out;
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
// _convolution(... same ..., benchmark, deterministic, cudnn_enabled, allow_tf32)
inline std::vector<at::Tensor> rule_convolution(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto& w = s[1].toTensor();
  return {meta_empty(conv_out_sizes(x, w, int_list(s[3]), int_list(s[4]), int_list(s[5]),
                                    s[6].toBool(), int_list(s[7]), s[8].toInt()),
                     x.scalar_type())};
}

// conv{1,2,3}d(input, weight, bias?, stride, padding, dilation, groups); padding may be a string
inline std::vector<at::Tensor> rule_conv_nd(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto& w = s[1].toTensor();
  std::vector<std::int64_t> padding;
  auto stride = int_list(s[3]);
  auto dilation = int_list(s[5]);
  if (s[4].isString()) {
    const std::size_t spatial = static_cast<std::size_t>(w.dim() - 2);
    if (s[4].toStringRef() == "same") {
      // "same" keeps the spatial size (stride 1): report the input's spatial sizes directly.
      auto out = sizes_of(x);
      out[out.size() - spatial - 1] = w.size(0);
      return {meta_empty(out, x.scalar_type())};
    }
    padding.assign(spatial, 0);
  } else {
    padding = int_list(s[4]);
  }
  return {meta_empty(conv_out_sizes(x, w, stride, padding, dilation, false, {}, s[6].toInt()),
                     x.scalar_type())};
}

// conv_transpose{1,2,3}d.input(input, weight, bias?, stride, padding, output_padding, groups, dilation)
inline std::vector<at::Tensor> rule_conv_transpose_nd(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto& w = s[1].toTensor();
  return {meta_empty(conv_out_sizes(x, w, int_list(s[3]), int_list(s[4]), int_list(s[7]), true,
                                    int_list(s[5]), s[6].toInt()),
                     x.scalar_type())};
}

// ---- normalisation --------------------------------------------------------------------------
// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
//   -> (out, save_mean, save_invstd); the saved statistics are [C] when training, [0] otherwise.
inline std::vector<at::Tensor> rule_native_batch_norm(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const bool training = s[5].toBool();
  const std::int64_t c = x.dim() > 1 ? x.size(1) : 1;
  const auto stat_dtype = x.scalar_type() == c10::kHalf || x.scalar_type() == c10::kBFloat16
                              ? c10::kFloat
                              : x.scalar_type();
  const std::int64_t n = training ? c : 0;
  return {meta_empty(sizes_of(x), x.scalar_type()), meta_empty({n}, stat_dtype),
          meta_empty({n}, stat_dtype)};
}

// The _native_batch_norm_legit family (LibTorch >= 2.0; torch has only Python meta kernels for
// them): (out, save_mean, save_rstd), the statistics [C] when training, [0] otherwise, and for
// the functional variant the updated running_mean and running_var ([C]) after them.
// `training_at`: the position of the `training` argument (-1: never training).
inline std::vector<at::Tensor> batch_norm_legit(const meta_stack& s, int training_at, bool functional) {
  const auto& x = s[0].toTensor();
  const bool training = training_at >= 0 && s[static_cast<std::size_t>(training_at)].toBool();
  const std::int64_t c = x.dim() > 1 ? x.size(1) : 1;
  const auto stat_dtype = x.scalar_type() == c10::kHalf || x.scalar_type() == c10::kBFloat16
                              ? c10::kFloat
                              : x.scalar_type();
  std::vector<at::Tensor> out{meta_empty(sizes_of(x), x.scalar_type()), meta_empty({training ? c : 0}, stat_dtype),
                              meta_empty({training ? c : 0}, stat_dtype)};
  if (functional) {
    out.push_back(meta_empty({c}, s[3].toTensor().scalar_type()));
    out.push_back(meta_empty({c}, s[4].toTensor().scalar_type()));
  }
  return out;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
inline std::vector<at::Tensor> rule_native_layer_norm(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto normalized = int_list(s[1]);
  auto stat = sizes_of(x);
  const auto axis = stat.size() - normalized.size();
  for (std::size_t i = axis; i < stat.size(); ++i) stat[i] = 1;
  const auto stat_dtype = x.scalar_type() == c10::kHalf || x.scalar_type() == c10::kBFloat16
                              ? c10::kFloat
                              : x.scalar_type();
  return {meta_empty(sizes_of(x), x.scalar_type()), meta_empty(stat, stat_dtype),
          meta_empty(stat, stat_dtype)};
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd)
inline std::vector<at::Tensor> rule_native_group_norm(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto n = s[3].toInt(), g = s[6].toInt();
  return {meta_empty(sizes_of(x), x.scalar_type()), meta_empty({n, g}, x.scalar_type()),
          meta_empty({n, g}, x.scalar_type())};
}

// ---- indexing -------------------------------------------------------------------------------
// index_select(self, dim, index)
inline std::vector<at::Tensor> rule_index_select(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto& idx = s[2].toTensor();
  auto out = sizes_of(x);
  if (!out.empty()) out[static_cast<std::size_t>(wrap_dim(s[1].toInt(), x.dim()))] = idx.numel();
  return {meta_empty(out, x.scalar_type())};
}

// embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)
inline std::vector<at::Tensor> rule_embedding(const meta_stack& s) {
  const auto& w = s[0].toTensor();
  auto out = sizes_of(s[1].toTensor());
  out.push_back(w.size(1));
  return {meta_empty(out, w.scalar_type())};
}

// where.self(condition, self, other)
inline std::vector<at::Tensor> rule_where(const meta_stack& s) {
  const auto& c = s[0].toTensor();
  const auto& a = s[1].toTensor();
  const auto& b = s[2].toTensor();
  return {meta_empty(broadcast_sizes({sizes_of(c), sizes_of(a), sizes_of(b)}), at::result_type(a, b))};
}

// ---- reductions -----------------------------------------------------------------------------
inline std::vector<std::int64_t> reduced_sizes(const at::Tensor& x, const c10::IValue& dims,
                                               bool keepdim) {
  auto out = sizes_of(x);
  std::vector<bool> reduce(out.size(), dims.isNone());
  if (!dims.isNone())
    for (auto d : int_list(dims)) reduce[static_cast<std::size_t>(wrap_dim(d, x.dim()))] = true;
  if (dims.isIntList() && dims.toIntList().empty()) reduce.assign(out.size(), true);
  std::vector<std::int64_t> r;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!reduce[i]) r.push_back(out[i]);
    else if (keepdim) r.push_back(1);
  }
  return r;
}

inline c10::ScalarType real_dtype(c10::ScalarType t) {
  if (t == c10::kComplexFloat) return c10::kFloat;
  if (t == c10::kComplexDouble) return c10::kDouble;
  if (t == c10::kComplexHalf) return c10::kHalf;
  return t;
}

// var.correction / std.correction(self, dim?, *, correction?, keepdim)
inline std::vector<at::Tensor> rule_var(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  return {meta_empty(reduced_sizes(x, s[1], s[3].toBool()), real_dtype(x.scalar_type()))};
}
// var.dim / std.dim(self, dim?, unbiased, keepdim)
inline std::vector<at::Tensor> rule_var_dim(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  return {meta_empty(reduced_sizes(x, s[1], s[3].toBool()), real_dtype(x.scalar_type()))};
}
// var_mean.correction / std_mean.correction(self, dim?, *, correction?, keepdim)
inline std::vector<at::Tensor> rule_var_mean(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto sz = reduced_sizes(x, s[1], s[3].toBool());
  return {meta_empty(sz, real_dtype(x.scalar_type())), meta_empty(sz, x.scalar_type())};
}

// ---- pooling --------------------------------------------------------------------------------
// _adaptive_avg_pool2d(self, output_size) / adaptive_avg_pool2d, and the 1d/3d variants
inline std::vector<at::Tensor> rule_adaptive_pool(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto os = int_list(s[1]);
  auto out = sizes_of(x);
  for (std::size_t i = 0; i < os.size(); ++i) out[out.size() - os.size() + i] = os[i];
  return {meta_empty(out, x.scalar_type())};
}

// max_pool{2,3}d_with_indices(self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False)
// -> (output, indices): the window count along each spatial dim (ceil mode as ATen's
// pooling_output_shape: a last window that starts in the padding is dropped), indices int64.
inline std::vector<at::Tensor> rule_max_pool_with_indices(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  const auto kernel = int_list(s[1]);
  const auto stride = s.size() > 2 && !int_list(s[2]).empty() ? int_list(s[2]) : kernel;
  const auto pad = s.size() > 3 ? int_list(s[3]) : std::vector<std::int64_t>{0};
  const auto dil = s.size() > 4 ? int_list(s[4]) : std::vector<std::int64_t>{1};
  const bool ceil = s.size() > 5 && s[5].toBool();
  const auto at = [](const std::vector<std::int64_t>& v, std::size_t i) { return v[std::min(i, v.size() - 1)]; };
  auto out = sizes_of(x);
  const auto n = kernel.size();
  for (std::size_t i = 0; i < n && i < out.size(); ++i) {
    const auto in = out[out.size() - n + i];
    const auto k = at(kernel, i), st = at(stride, i), p = at(pad, i), d = at(dil, i);
    const auto span = in + 2 * p - d * (k - 1) - 1 + (ceil ? st - 1 : 0);
    auto len = floor_div(span, st) + 1;
    if (ceil && (len - 1) * st >= in + p) --len;
    out[out.size() - n + i] = len;
  }
  return {meta_empty(out, x.scalar_type()), meta_empty(out, c10::kLong)};
}

// a binary op that broadcasts and promotes (floor_divide): its arguments' broadcast shape, in
// their result type. (Not from zeros: an integer division by zero throws.)
inline std::vector<at::Tensor> rule_broadcast_binary(const meta_stack& s) {
  const auto& a = s[0].toTensor();
  if (s[1].isTensor()) {
    const auto& b = s[1].toTensor();
    return {meta_empty(broadcast_sizes({sizes_of(a), sizes_of(b)}), at::result_type(a, b))};
  }
  return {meta_empty(sizes_of(a), at::result_type(a, s[1].toScalar()))};
}

// _safe_softmax(self, dim, dtype=None): self's shape, in `dtype` where given (torch's meta comes
// from its Python decomposition; LibTorch has none)
inline std::vector<at::Tensor> rule_safe_softmax(const meta_stack& s) {
  const auto& x = s[0].toTensor();
  return {meta_empty(sizes_of(x), s.size() > 2 && !s[2].isNone() ? s[2].toScalarType() : x.scalar_type())};
}

// _weight_norm_interface(v, g, dim=0) -> (w, norm): w like v, the norm like g (float for a
// bfloat16 g, as torch's decomposition keeps it)
inline std::vector<at::Tensor> rule_weight_norm_interface(const meta_stack& s) {
  const auto& v = s[0].toTensor();
  const auto& g = s[1].toTensor();
  return {meta_empty(sizes_of(v), v.scalar_type()),
          meta_empty(sizes_of(g), g.scalar_type() == c10::kBFloat16 ? c10::kFloat : g.scalar_type())};
}

// ---- backward formulas (what a joint graph records, lower/joint.hpp) ---------------------------
// A gradient has the size and dtype of what it is the gradient of. Ops with an `output_mask`
// give an undefined tensor where the mask is false, as their kernels do.

// the gradient like argument `at` (undefined when `at` is None)
inline at::Tensor like_arg(const meta_stack& s, std::size_t at) {
  return s[at].isTensor() ? meta_empty(sizes_of(s[at].toTensor()), s[at].toTensor().scalar_type()) : at::Tensor();
}

// `grads`, with those output_mask (argument `mask_at`) leaves out undefined
inline std::vector<at::Tensor> masked(const meta_stack& s, std::size_t mask_at, std::vector<at::Tensor> grads) {
  const auto mask = s[mask_at].toBoolList();
  for (std::size_t i = 0; i < grads.size() && i < mask.size(); ++i)
    if (!mask.get(i)) grads[i] = at::Tensor();
  return grads;
}

// like self (argument 1): mse_loss_backward(grad_output, self, target, reduction),
// max_pool2d_with_indices_backward(grad_output, self, ...), _adaptive_avg_pool2d_backward(grad_output, self)
inline std::vector<at::Tensor> rule_like_arg1(const meta_stack& s) { return {like_arg(s, 1)}; }

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
// save_invstd?, train, eps, output_mask) -> (grad_input, grad_weight [C], grad_bias [C])
inline std::vector<at::Tensor> rule_native_batch_norm_backward(const meta_stack& s) {
  const auto& x = s[1].toTensor();
  const std::int64_t c = x.dim() > 1 ? x.size(1) : 1;
  const auto wt = s[2].isTensor() ? s[2].toTensor().scalar_type() : x.scalar_type();
  return masked(s, 9, {like_arg(s, 1), meta_empty({c}, wt), meta_empty({c}, wt)});
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask) -> (grad_input, grad_weight, grad_bias)
inline std::vector<at::Tensor> rule_native_layer_norm_backward(const meta_stack& s) {
  return masked(s, 7, {like_arg(s, 1), like_arg(s, 5), like_arg(s, 6)});
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
inline std::vector<at::Tensor> rule_native_group_norm_backward(const meta_stack& s) {
  const auto c = s[6].toInt();
  const auto dt = s[1].toTensor().scalar_type();
  return masked(s, 9, {like_arg(s, 1), meta_empty({c}, dt), meta_empty({c}, dt)});
}

// convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
inline std::vector<at::Tensor> rule_convolution_backward(const meta_stack& s) {
  const auto dt = s[0].toTensor().scalar_type();
  auto bias = s[3].isNone() ? at::Tensor() : meta_empty(int_list(s[3]), dt);
  return masked(s, 10, {like_arg(s, 1), like_arg(s, 2), bias});
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
inline std::vector<at::Tensor> rule_embedding_dense_backward(const meta_stack& s) {
  const auto& g = s[0].toTensor();
  return {meta_empty({s[2].toInt(), g.size(-1)}, g.scalar_type())};
}

struct meta_rule_entry {
  std::string_view op;
  meta_rule rule;
};

inline constexpr meta_rule_entry meta_rule_table[] = {
    {"aten::abs", rule_like_self},
    {"aten::_safe_softmax", rule_safe_softmax},
    {"aten::floor_divide", rule_broadcast_binary},
    {"aten::max_pool2d_with_indices", rule_max_pool_with_indices},
    {"aten::max_pool3d_with_indices", rule_max_pool_with_indices},
    {"aten::floor_divide.Scalar", rule_broadcast_binary},
    {"aten::_weight_norm_interface", rule_weight_norm_interface},
    {"aten::absolute", rule_like_self},
    {"aten::log_sigmoid", rule_like_self},
    {"aten::nan_to_num", rule_like_self},
    {"aten::logit", rule_like_self},
    {"aten::special_logit", rule_like_self},
    {"aten::rrelu", rule_like_self},
    {"aten::fliplr", rule_like_self},
    {"aten::flipud", rule_like_self},
    {"aten::isnan", rule_like_self_bool},
    {"aten::isinf", rule_like_self_bool},
    {"aten::isfinite", rule_like_self_bool},
    {"aten::logical_not", rule_like_self_bool},
    {"aten::angle", rule_like_self_real},
    {"aten::max", rule_reduce_all},
    {"aten::min", rule_reduce_all},
    {"aten::median", rule_reduce_all},
    {"aten::nanmedian", rule_reduce_all},
    {"aten::trace", rule_reduce_all},
    {"aten::prod", rule_reduce_all_promote},
    {"aten::nansum", rule_reduce_all_promote},
    {"aten::count_nonzero", rule_count_all},
    {"aten::relu", rule_like_self},
    {"aten::relu_", rule_like_self},
    {"aten::relu6", rule_like_self},
    {"aten::hardtanh", rule_like_self},
    {"aten::hardtanh_", rule_like_self},
    {"aten::hardswish", rule_like_self},
    {"aten::hardsigmoid", rule_like_self},
    {"aten::prelu", rule_like_self},
    {"aten::_prelu_kernel", rule_like_self},
    {"aten::selu", rule_like_self},
    {"aten::celu", rule_like_self},
    {"aten::mish", rule_like_self},
    {"aten::dropout", rule_like_self},
    {"aten::native_dropout", rule_native_dropout},
    {"aten::alpha_dropout", rule_like_self},
    {"aten::feature_dropout", rule_like_self},
    {"aten::convolution", rule_convolution},
    {"aten::_convolution", rule_convolution},
    {"aten::conv1d", rule_conv_nd},
    {"aten::conv2d", rule_conv_nd},
    {"aten::conv3d", rule_conv_nd},
    {"aten::conv1d.padding", rule_conv_nd},
    {"aten::conv2d.padding", rule_conv_nd},
    {"aten::conv3d.padding", rule_conv_nd},
    {"aten::conv_transpose1d", rule_conv_transpose_nd},
    {"aten::conv_transpose2d.input", rule_conv_transpose_nd},
    {"aten::conv_transpose3d.input", rule_conv_transpose_nd},
    {"aten::native_batch_norm", rule_native_batch_norm},
    {"aten::_native_batch_norm_legit_no_training", [](const meta_stack& s) { return batch_norm_legit(s, -1, false); }},
    {"aten::_native_batch_norm_legit", [](const meta_stack& s) { return batch_norm_legit(s, 5, false); }},
    {"aten::_native_batch_norm_legit.no_stats", [](const meta_stack& s) { return batch_norm_legit(s, 3, false); }},
    {"aten::_native_batch_norm_legit_functional", [](const meta_stack& s) { return batch_norm_legit(s, 5, true); }},
    {"aten::batch_norm", rule_like_self},
    {"aten::instance_norm", rule_like_self},
    {"aten::native_layer_norm", rule_native_layer_norm},
    {"aten::layer_norm", rule_like_self},
    {"aten::native_group_norm", rule_native_group_norm},
    {"aten::group_norm", rule_like_self},
    {"aten::index_select", rule_index_select},
    {"aten::embedding", rule_embedding},
    {"aten::where.self", rule_where},
    {"aten::var.correction", rule_var},
    {"aten::std.correction", rule_var},
    {"aten::var.dim", rule_var_dim},
    {"aten::std.dim", rule_var_dim},
    {"aten::var_mean.correction", rule_var_mean},
    {"aten::std_mean.correction", rule_var_mean},
    {"aten::_adaptive_avg_pool2d", rule_adaptive_pool},
    {"aten::adaptive_avg_pool2d", rule_adaptive_pool},
    {"aten::_adaptive_avg_pool3d", rule_adaptive_pool},
    {"aten::adaptive_avg_pool3d", rule_adaptive_pool},
    {"aten::adaptive_avg_pool1d", rule_adaptive_pool},
    {"aten::mse_loss_backward", rule_like_arg1},
    {"aten::native_dropout_backward", rule_like_self},
    {"aten::max_pool2d_with_indices_backward", rule_like_arg1},
    {"aten::_adaptive_avg_pool2d_backward", rule_like_arg1},
    {"aten::native_batch_norm_backward", rule_native_batch_norm_backward},
    {"aten::native_layer_norm_backward", rule_native_layer_norm_backward},
    {"aten::native_group_norm_backward", rule_native_group_norm_backward},
    {"aten::convolution_backward", rule_convolution_backward},
    {"aten::embedding_dense_backward", rule_embedding_dense_backward},
};

// ---- ops whose output sizes follow from argument sizes alone -----------------------------------
// Note [Shapes from zeros]: these ops have no meta kernel (in 1.13, and many in 2.x too), and
// their outputs' sizes and dtypes depend on their arguments' sizes, dtypes and non-tensor
// arguments only, never on tensor contents. Their CPU kernel runs once on zero-filled tensors
// of the arguments' sizes (zeros are valid data for each: indices, offsets, sorted sequences,
// grid coordinates), and the results' geometry is kept. Only ops known to be shape-only are
// listed: an op whose output size depends on data (nonzero, unique, repeat_interleave with
// tensor repeats, one_hot without num_classes) must never be here.
inline constexpr std::string_view shape_only_ops[] = {
    "aten::flip", "aten::roll", "aten::cdist", "aten::_cdist_forward", "aten::logsumexp",
    "aten::median.dim", "aten::nanmedian.dim", "aten::kthvalue", "aten::mode", "aten::im2col",
    "aten::col2im", "aten::grid_sampler", "aten::grid_sampler_2d", "aten::grid_sampler_3d",
    "aten::_pad_enum", "aten::reflection_pad1d", "aten::reflection_pad2d", "aten::reflection_pad3d",
    "aten::replication_pad1d", "aten::replication_pad2d", "aten::replication_pad3d", "aten::huber_loss",
    "aten::diag", "aten::diag_embed",
    "aten::repeat_interleave.self_int", "aten::searchsorted.Tensor", "aten::searchsorted.Scalar",
    "aten::bucketize.Tensor", "aten::bucketize.Scalar", "aten::channel_shuffle", "aten::native_channel_shuffle",
    "aten::pixel_shuffle", "aten::pixel_unshuffle", "aten::embedding_bag", "aten::embedding_bag.padding_idx",
    "aten::_embedding_bag", "aten::_embedding_bag_forward_only", "aten::one_hot", "aten::log_sigmoid_forward",
    "aten::cummax", "aten::cummin", "aten::logcumsumexp", "aten::renorm", "aten::histc",
};

inline bool is_shape_only(std::string_view qualified) {
  for (auto op : shape_only_ops)
    if (op == qualified) return true;
  return false;
}

/// Note [Shapes from zeros]: the op's results for zero-filled CPU tensors in place of its meta
/// arguments, as meta tensors of the same geometry.
inline std::vector<c10::IValue> shapes_from_zeros(const c10::OperatorHandle& op, const meta_stack& inputs) {
  const auto zeros_like_meta = [](const at::Tensor& t) {
    return t.defined() ? at::zeros(sizes_of(t), at::TensorOptions().dtype(t.scalar_type())) : t;
  };
  std::vector<c10::IValue> stack;
  stack.reserve(inputs.size());
  for (const auto& v : inputs) {
    if (v.isTensor()) {
      stack.emplace_back(zeros_like_meta(v.toTensor()));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> l;
      for (const auto& t : v.toTensorVector()) l.push_back(zeros_like_meta(t));
      stack.emplace_back(std::move(l));
    } else if (v.isDevice() && v.toDevice().is_meta()) {
      stack.emplace_back(c10::Device(c10::kCPU));
    } else {
      stack.push_back(v);
    }
  }
  op.callBoxed(stack);
  for (auto& r : stack) {
    const auto to_meta = [](const at::Tensor& t) {
      return t.defined() ? at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)) : t;
    };
    if (r.isTensor()) {
      r = to_meta(r.toTensor());
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> l;
      for (const auto& t : r.toTensorVector()) l.push_back(to_meta(t));
      r = std::move(l);
    }
  }
  return stack;
}

/// The shape rule for `qualified` ("aten::conv2d", "aten::where.self"), or nullptr.
inline meta_rule find_meta_rule(std::string_view qualified) {
  for (const auto& e : meta_rule_table)
    if (e.op == qualified) return e.rule;
  return nullptr;
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/ops/meta_infer.hpp>
// xport/ops/meta_infer.hpp: an op's output types, learned without computing anything.
// The op runs on meta tensors (sizes and dtypes, no data) through the dispatcher, its arguments
// boxed as every call's are (ops/call.hpp); when LibTorch has no meta kernel for it, a shape
// rule from meta_rules.hpp answers; otherwise the op cannot be captured and missing_fake_kernel
// names it and the fix.

#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

// #include <xport/config.hpp>
// #include <xport/ops/call.hpp>
// xport/ops/call.hpp: one way to call a graph node's operator through the dispatcher.
// Every place that runs an op on a node's arguments (shape inference, capture, decomposition,
// constant folding, the interpreter) boxes the schema-bound arguments the same way here: a graph
// value becomes what a site-supplied lookup says it holds, a symbolic size its example value, a
// number (or a SymInt/SymFloat/SymBool value) where a `Tensor` or `Tensor?` is expected a
// wrapped-number tensor, every other constant the IValue its schema type wants. A meta run then
// moves the call onto the meta device (every device argument, a factory's missing one) and
// drops `pin_memory` (nothing is allocated); the op is called through its handle; its results
// come back one graph output at a time, a `Tensor[]` return giving one output per element. What
// a site does with the results (track them, lift them, type them) stays at the site.

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint8_t
#include <span>     // std::span
#include <utility>  // std::move
#include <vector>   // std::vector

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/op.hpp>
// #include <xport/ops/schema.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Whether schema parameter `param` takes a tensor (`Tensor` or `Tensor?`): a number given for
/// it is passed as a wrapped-number tensor.
inline bool expects_tensor(const c10::Argument& param) {
  const auto& t = param.real_type();
  if (t->kind() == c10::TypeKind::TensorType) return true;
  return t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType;
}

/// The schema type `a` is converted against for `param`: `Tensor?` given anything but None is
/// `Tensor` (so that a number there becomes a wrapped number, as for `Tensor`), else the
/// parameter's own type.
inline const c10::TypePtr& call_type(const c10::Argument& param, const argument& a) {
  const auto& t = param.real_type();
  if (!a.is_none() && t->kind() == c10::TypeKind::OptionalType) {
    const auto& elem = t->castRaw<c10::OptionalType>()->getElementType();
    if (elem->kind() == c10::TypeKind::TensorType) return elem;
  }
  return t;
}

/// The IValue the dispatcher gets for argument `a` of parameter `param`: graph values are looked
/// up with `lookup(value) -> c10::IValue` (what they hold at this site), symbolic sizes are their
/// example value (sites that evaluate them, like the interpreter, use form_of instead).
template <class Lookup>
c10::IValue argument_ivalue(const c10::Argument& param, const argument& a, Lookup&& lookup) {
  return to_ivalue(a, call_type(param, a), lookup);
}

/// The IValue of an argument that holds no graph value and no symbol (a schema constant),
/// converted against schema type `type`.
inline c10::IValue constant_ivalue(const argument& a, const c10::TypePtr& type) {
  return to_ivalue(a, type, [](const value&) { return c10::IValue(); });
}

/// The constant IValue of argument `a` of parameter `param` (see constant_ivalue).
inline c10::IValue constant_ivalue(const c10::Argument& param, const argument& a) {
  return constant_ivalue(a, call_type(param, a));
}

/// How a schema-bound argument reaches the dispatcher, decided once (sites that precompute a
/// call, like the interpreter, switch on it; argument_ivalue follows the same rules).
enum class arg_form : std::uint8_t {
  constant,              ///< no graph value, no symbol: one IValue (constant_ivalue), every call
  value,                 ///< a graph value, passed as what it holds
  value_number,          ///< a SymInt/SymFloat/SymBool value where a tensor is expected: wrapped
  symbolic,              ///< a symbolic size, passed as an int
  symbolic_number,       ///< a symbolic size where a tensor is expected: wrapped
  tensor_list,           ///< a Tensor[] holding graph values
  optional_tensor_list,  ///< a Tensor?[] holding graph values (and Nones)
  int_list,              ///< a SymInt[] (or any other list) holding graph values or symbols
};

/// The form argument `a` takes as parameter `param`.
inline arg_form form_of(const c10::Argument& param, const argument& a) {
  const bool tensor = expects_tensor(param);
  if (a.is_value())
    return tensor && a.as_value() && a.as_value().kind() != value_kind::tensor ? arg_form::value_number
                                                                                : arg_form::value;
  if (a.is_symbolic()) return tensor ? arg_form::symbolic_number : arg_form::symbolic;
  if (!a.is_list()) return arg_form::constant;
  bool dynamic = false;
  a.for_each_value([&](const value&) { dynamic = true; });
  for (const auto& e : a.as_list()) dynamic = dynamic || e.is_symbolic();
  if (!dynamic) return arg_form::constant;
  const auto lt = unwrap_optional(param.real_type());
  if (lt->kind() != c10::TypeKind::ListType) return arg_form::int_list;
  const auto kind = lt->castRaw<c10::ListType>()->getElementType()->kind();
  return kind == c10::TypeKind::TensorType     ? arg_form::tensor_list
         : kind == c10::TypeKind::OptionalType ? arg_form::optional_tensor_list
                                               : arg_form::int_list;
}

/// Whether any argument holds a symbolic size (directly or in a list): the call's result then
/// depends on the sizes of the run.
inline bool has_symbolic_argument(std::span<const argument> args) {
  for (const auto& a : args) {
    if (a.is_symbolic()) return true;
    if (a.is_list())
      for (const auto& e : a.as_list())
        if (e.is_symbolic()) return true;
  }
  return false;
}

/// Pushes the dispatcher arguments of a call of `op` onto `stack`: `args` are schema-bound (as a
/// node or bind_arguments holds them), converted by argument_ivalue with `lookup`.
template <class Lookup>
void push_arguments(const op_info& op, std::span<const argument> args, Lookup&& lookup, torch::jit::Stack& stack) {
  const auto& params = op.schema().arguments();
  stack.reserve(stack.size() + params.size());
  for (std::size_t i = 0; i < params.size(); ++i) stack.push_back(argument_ivalue(params[i], args[i], lookup));
}

/// What a non-tensor graph value holds in a meta run: a SymInt its example value; a SymFloat,
/// SymBool or None value has none known, so it is None (an op that needs it refuses, rather
/// than run on a made-up number).
inline c10::IValue example_scalar(const value& v) {
  if (v.kind() == value_kind::sym_int) return v.type().scalar.hint();
  return {};
}

/// Makes the arguments of `op` on top of `stack` (its schema's count of them) a meta run's:
/// every device argument is the meta device, and so is a factory's missing one (it would make a
/// real tensor on the default device), and `pin_memory` is false (a meta tensor is never pinned,
/// and asking for pinned memory fails where no accelerator is). The recorded arguments keep
/// what was given.
inline void to_meta_run(const op_info& op, torch::jit::Stack& stack) {
  const auto n = op.schema().arguments().size();
  auto* args = stack.data() + (stack.size() - n);
  for (std::size_t i = 0; i < n; ++i)
    if (args[i].isDevice()) args[i] = c10::Device(c10::kMeta);
  if (op.is_factory && op.device_arg >= 0 && args[static_cast<std::size_t>(op.device_arg)].isNone())
    args[static_cast<std::size_t>(op.device_arg)] = c10::Device(c10::kMeta);
  if (op.pin_memory_arg >= 0 && args[static_cast<std::size_t>(op.pin_memory_arg)].isBool())
    args[static_cast<std::size_t>(op.pin_memory_arg)] = false;
}

/// Pushes the arguments of a meta run of `op` onto `stack`: tensor values are the meta tensors
/// `meta_of(value) -> at::Tensor` gives, other values their example_scalar; then to_meta_run.
template <class MetaOf>
void push_meta_arguments(const op_info& op, std::span<const argument> args, MetaOf&& meta_of,
                         torch::jit::Stack& stack) {
  push_arguments(
      op, args,
      [&](const value& v) -> c10::IValue {
        return v.kind() == value_kind::tensor ? c10::IValue(meta_of(v)) : example_scalar(v);
      },
      stack);
  to_meta_run(op, stack);
}

/// Calls the operator behind `handle` through the dispatcher: its arguments are taken from the
/// top of `stack`, its results are left there.
inline void call_op(const c10::OperatorHandle& handle, torch::jit::Stack& stack) { handle.callBoxed(stack); }

/// call_op, with a LibTorch error handed to `on_error(const c10::Error&)`, which throws the
/// site's own error (the original is rethrown if it returns).
template <class OnError>
void call_op(const c10::OperatorHandle& handle, torch::jit::Stack& stack, OnError&& on_error) {
  try {
    handle.callBoxed(stack);
  } catch (const c10::Error& e) {
    on_error(e);
    throw;
  }
}

/// Calls node `n`'s operator on its arguments (push_arguments with `lookup`, then call_op): its
/// results are left on `stack`.
template <class Lookup>
void call_node(const node& n, Lookup&& lookup, torch::jit::Stack& stack) {
  push_arguments(n.op(), n.args(), lookup, stack);
  call_op(n.op().handle, stack);
}

/// Calls `f(k, result)` for each graph output `k` of a call's `results` (as the op left them):
/// a Tensor[] return gives one output per element (passed as a tensor IValue), every other
/// return one. Returns the number of outputs.
template <class F>
std::size_t for_each_output(const torch::jit::Stack& results, F&& f) {
  std::size_t k = 0;
  for (const auto& r : results) {
    if (r.isTensorList()) {
      for (const auto& t : r.toTensorVector()) {
        const c10::IValue v(t);
        f(k++, v);
      }
    } else {
      f(k++, r);
    }
  }
  return k;
}

/// for_each_output that moves each result out of `results` into `f(k, c10::IValue&&)` (no
/// reference counts touched where a result is handed on); `results` is left moved from.
template <class F>
std::size_t take_outputs(torch::jit::Stack& results, F&& f) {
  std::size_t k = 0;
  for (auto& r : results) {
    if (r.isTensorList()) {
      for (auto& t : r.toTensorVector()) f(k++, c10::IValue(std::move(t)));
    } else {
      f(k++, std::move(r));
    }
  }
  return k;
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/ops/conv_layout.hpp>
// xport/ops/conv_layout.hpp: the memory format of a convolution's output, as torch's fake tensors
// give it (torch/_subclasses/fake_impls.py's `conv`). A meta kernel makes every convolution output
// contiguous; the real kernel picks a backend from the input's and weight's layouts and device,
// and that backend may write channels_last (a depthwise conv over a transposed activation in
// SegFormer, any conv over a channels_last input). torch records what the kernel would do, and so
// must xport: a view that follows depends on those strides.

#include <optional>     // std::optional
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

// #include <xport/config.hpp>
// #include <xport/detail/compat.hpp>
// #include <xport/ir/op.hpp>

#if XPORT_HAS_CONV_BACKEND_SELECTION
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/empty_strided.h>
#endif

XPORT_BEGIN_NAMESPACE
namespace detail {

/// The arguments a convolution call's backend is chosen from, by the op's schema.
struct conv_call {
  std::vector<std::int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  std::int64_t groups = 1;
};

/// `call`'s parameters for the convolution ops xport sees (nullopt: not one of them, or a
/// `padding="same"` string, whose backend choice is left to the meta kernel's contiguous).
inline std::optional<conv_call> conv_call_of(std::string_view name, const std::vector<c10::IValue>& a) {
  const auto ints = [](const c10::IValue& v) -> std::optional<std::vector<std::int64_t>> {
    if (v.isInt()) return std::vector<std::int64_t>{v.toInt()};
    if (!v.isIntList()) return std::nullopt;
    return v.toIntVector();
  };
  conv_call c;
  std::optional<std::vector<std::int64_t>> s, p, d, op;
  if (name == "aten::convolution" || name == "aten::_convolution") {
    if (a.size() < 9) return std::nullopt;
    s = ints(a[3]), p = ints(a[4]), d = ints(a[5]), op = ints(a[7]);
    c.transposed = a[6].toBool();
    c.groups = a[8].toInt();
  } else if (name == "aten::conv1d" || name == "aten::conv2d" || name == "aten::conv3d") {
    if (a.size() < 7) return std::nullopt;
    s = ints(a[3]), p = ints(a[4]), d = ints(a[5]), op = std::vector<std::int64_t>{0};
    c.groups = a[6].toInt();
  } else if (name == "aten::conv_transpose1d" || name == "aten::conv_transpose2d" || name == "aten::conv_transpose3d") {
    if (a.size() < 8) return std::nullopt;
    s = ints(a[3]), p = ints(a[4]), op = ints(a[5]), d = ints(a[7]);
    c.transposed = true;
    c.groups = a[6].toInt();
  } else {
    return std::nullopt;
  }
  if (!s || !p || !d || !op) return std::nullopt;
  c.stride = *s, c.padding = *p, c.dilation = *d, c.output_padding = *op;
  return c;
}

/// The memory format LibTorch's kernel on `device` gives the output of convolution `name` over
/// the meta arguments `args` (input, weight, bias, ...), or nullopt where it cannot be asked (an
/// unknown op, a device this process has no backend for, LibTorch 1.13).
inline std::optional<c10::MemoryFormat> conv_output_format(std::string_view name, const std::vector<c10::IValue>& args,
                                                           c10::Device device) {
#if XPORT_HAS_CONV_BACKEND_SELECTION
  if (args.size() < 3 || !args[0].isTensor() || !args[1].isTensor()) return std::nullopt;
  const auto call = conv_call_of(name, args);
  if (!call) return std::nullopt;
  // Tensors of the arguments' geometry on the real device: the backend choice reads only sizes,
  // strides, dtype and device. Their memory is reserved, never touched.
  const auto shadow = [&](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(device));
  };
  try {
    auto input = shadow(args[0].toTensor());
    auto weight = shadow(args[1].toTensor());
    std::optional<at::Tensor> bias;
    if (args[2].isTensor() && args[2].toTensor().defined()) bias = shadow(args[2].toTensor());
    const auto sym = [](const std::vector<std::int64_t>& v) { return c10::fromIntArrayRefSlow(v); };
    const auto backend = at::native::select_conv_backend(input, weight, bias, sym(call->stride), sym(call->padding),
                                                         sym(call->dilation), call->transposed, sym(call->output_padding),
                                                         c10::SymInt(call->groups), c10::nullopt);
    if (weight.dim() == 3) {  // torch's fake conv asks about the 2-d conv a 1-d one runs as
      input = input.contiguous().unsqueeze(2);
      weight = weight.unsqueeze(2);
    }
    return at::native::_determine_backend_memory_format(input, weight, backend);
  } catch (const c10::Error&) {
    return std::nullopt;  // no backend for this device here: the meta kernel's layout stands
  }
#else
  (void)name, (void)args, (void)device;
  return std::nullopt;
#endif
}

/// `out` (a convolution's meta result) laid out in `format`, as torch's fake conv converts it.
inline at::Tensor in_format(const at::Tensor& out, c10::MemoryFormat format) {
  if (out.dim() == 3 && format == c10::MemoryFormat::ChannelsLast)
    return out.unsqueeze(2).contiguous(format).squeeze(2);
  return out.contiguous(format);
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/ops/data_dependent.hpp>
// #include <xport/ops/higher_order.hpp>
// xport/ops/higher_order.hpp: torch's higher-order operators, one descriptor each.
// A higher-order operator (torch.ops.higher_order.cond, .while_loop, .map_impl, .scan,
// .wrap_with_set_grad_enabled, .wrap_with_autocast) takes subgraphs as arguments. Each has one
// entry here: its schema as the dispatcher sees it, how torch lays its arguments out in a
// program (a trailing list written spread, as `wrap_with_set_grad_enabled(False, submod_1, x,
// w)`), which operands its subgraphs take (and which one row at a time), how its outputs are
// typed, and its kernel. Verify, print, serde, the tracers, the lowering and the runners look the
// entry up (`hop_of(op)`), never the operator's name. Registered with the dispatcher on first
// lookup (ir/op.hpp calls the hook this header installs).

#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <memory>       // std::make_unique
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/stack.h>
#include <c10/core/GradMode.h>

// #include <xport/config.hpp>
// #include <xport/detail/compat.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/op.hpp>

// LibTorch's autocast state (ATen/autocast_mode.h), declared here: that header includes all of
// ATen, against the narrow-headers rule. Per device type since 2.4; CPU and CUDA apart before.
namespace at::autocast {
#if XPORT_TORCH_VERSION_AT_LEAST(2, 4)
TORCH_API bool is_autocast_enabled(at::DeviceType device_type);
TORCH_API void set_autocast_enabled(at::DeviceType device_type, bool enabled);
TORCH_API at::ScalarType get_autocast_dtype(at::DeviceType device_type);
TORCH_API void set_autocast_dtype(at::DeviceType device_type, at::ScalarType dtype);
#else
TORCH_API bool is_enabled();
TORCH_API void set_enabled(bool enabled);
TORCH_API bool is_cpu_enabled();
TORCH_API void set_cpu_enabled(bool enabled);
TORCH_API at::ScalarType get_autocast_gpu_dtype();
TORCH_API at::ScalarType get_autocast_cpu_dtype();
TORCH_API void set_autocast_gpu_dtype(at::ScalarType dtype);
TORCH_API void set_autocast_cpu_dtype(at::ScalarType dtype);
#endif
TORCH_API void clear_cache();
TORCH_API int increment_nesting();
TORCH_API int decrement_nesting();
TORCH_API bool is_autocast_cache_enabled();
TORCH_API void set_autocast_cache_enabled(bool enabled);
}  // namespace at::autocast

XPORT_BEGIN_NAMESPACE

/// One higher-order operator: everything xport knows about it (see the header comment).
struct higher_order_op {
  enum class id : std::uint8_t { cond, while_loop, map, scan, set_grad_enabled, autocast };
  /// A parameter of the operator: its name and type in the dispatcher's schema.
  struct param {
    std::string_view name;
    enum class type : std::uint8_t { any, boolean, string, dtype_opt, bool_opt, graph, tensors } kind;
  };
  /// How its results are typed: as its first subgraph returns them (cond's true branch), its
  /// last (while_loop's body), map's (each stacked), scan's (carries, then ys stacked).
  enum class results : std::uint8_t { first_graph, last_graph, mapped, scanned };

  id which;
  std::string_view name;    ///< `cond`: torch.ops.higher_order.cond
  std::string_view python;  ///< what a user wrote, for messages: `torch.cond`
  std::vector<param> params;
  /// torch writes the last parameter (a Tensor[]) spread into the call's trailing arguments
  /// (`wrap_with_set_grad_enabled(False, submod_1, x, w)`); the others' lists stay lists.
  bool spread_last = false;
  results typing = results::first_graph;
  /// The parameter whose tensors a subgraph takes one row of (map's xs, scan's xs), or -1.
  int rows_param = -1;
  /// Run as its subgraph's calls inlined, under the mode it sets (torch's run_decompositions
  /// inlines these: the inference IR has no grad or autocast regions).
  bool inlined_by_lowering = false;
  c10::KernelFunction::BoxedKernelFunction* kernel = nullptr;

  [[nodiscard]] std::string qualified() const { return "higher_order::" + std::string(name); }
  [[nodiscard]] std::string target() const { return "torch.ops.higher_order." + std::string(name); }
  /// The index of each subgraph parameter, in order.
  [[nodiscard]] std::vector<std::size_t> graph_params() const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i].kind == param::type::graph) out.push_back(i);
    return out;
  }
  /// A text of the parameters for messages: `(pred, true_graph, false_graph, operands)`.
  [[nodiscard]] std::string layout() const {
    std::string s;
    for (std::size_t i = 0; i < params.size(); ++i)
      s += (i ? ", " : "") + std::string(spread_last && i + 1 == params.size() ? "*" : "") + std::string(params[i].name);
    return "(" + s + ")";
  }
};

namespace detail {

/// torch.cond's predicate: a bool, or a tensor with one element (any dtype: nonzero is true).
inline bool cond_predicate(const c10::IValue& pred) {
  if (pred.isBool()) return pred.toBool();
  if (pred.isInt()) return pred.toInt() != 0;
  if (!pred.isTensor() || pred.toTensor().numel() != 1) {
    std::string got = pred.isTensor() ? "a tensor of " + std::to_string(pred.toTensor().numel()) + " elements"
                                      : pred.tagKind();
    throw run_error("xport.run.cond_pred", "torch.cond: Expected pred to be bool or single-element tensor, but got " + got);
  }
  return pred.toTensor().item().toBool();
}

// higher_order::cond(Any pred, Any true_fn, Any false_fn, Tensor[] operands) -> Tensor[]: runs
// the branch pred selects on the operands. Registered as CompositeImplicitAutograd (as every
// higher-order operator here), so the branch's calls dispatch (and autograd records them) as if
// the user had made them.
inline void cond_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  auto operands = s.back().toTensorVector();
  const bool taken = cond_predicate(s[s.size() - 4]);
  const auto& fn = subgraph_fn_of(s[s.size() - (taken ? 3 : 2)], "cond", taken ? "true_fn" : "false_fn");
  torch::jit::drop(s, 4);
  s.emplace_back(c10::List<at::Tensor>(fn.call(std::move(operands))));
}

/// What torch.while_loop's cond_fn returned, as a bool (torch's rule: a bool scalar tensor).
inline bool while_loop_predicate(const std::vector<at::Tensor>& out) {
  if (out.size() != 1 || !out[0].defined() || out[0].dim() != 0 || out[0].scalar_type() != at::kBool) {
    std::string got = out.size() != 1  ? std::to_string(out.size()) + " values"
                      : out[0].defined() ? "a tensor of sizes " + c10::str(out[0].sizes()) + " and dtype " +
                                               std::string(c10::toString(out[0].scalar_type()))
                                         : "an undefined tensor";
    throw run_error("xport.run.while_loop_pred", "cond_fn must return a boolean scalar tensor or a boolean but got " + got);
  }
  return out[0].item<bool>();
}

// higher_order::while_loop(Any cond_fn, Any body_fn, Tensor[] carried_inputs, Tensor[]
// additional_inputs) -> Tensor[]: while cond_fn(carried, additional) holds, carried =
// body_fn(carried, additional); returns carried (copies when the body never ran, as torch does:
// an output never aliases an input).
inline void while_loop_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  const auto additional = s.back().toTensorVector();
  auto carried = s[s.size() - 2].toTensorVector();
  const auto& cond_fn = subgraph_fn_of(s[s.size() - 4], "while_loop", "cond_fn");
  const auto& body_fn = subgraph_fn_of(s[s.size() - 3], "while_loop", "body_fn");
  const auto operands = [&] {
    auto all = carried;
    all.insert(all.end(), additional.begin(), additional.end());
    return all;
  };
  bool again = while_loop_predicate(cond_fn.call(operands()));
  if (!again)
    for (auto& t : carried) t = t.clone();
  while (again) {
    auto out = body_fn.call(operands());
    if (out.size() != carried.size())
      throw run_error("xport.run.while_loop_body", "body_fn should return the same number of elements as carried_inputs, got " +
                                                       std::to_string(out.size()) + " vs " + std::to_string(carried.size()));
    carried = std::move(out);
    again = while_loop_predicate(cond_fn.call(operands()));
  }
  torch::jit::drop(s, 4);
  s.emplace_back(c10::List<at::Tensor>(std::move(carried)));
}

/// torch.map's rules for what it maps over: tensors with the same leading dim, not 0.
inline std::int64_t mapped_length(const std::vector<at::Tensor>& xs) {
  if (xs.empty()) throw run_error("xport.run.map_xs", "torch.map: Mapped xs can only consist of tensors, and at least one");
  std::string shapes;
  bool consistent = true;
  for (const auto& x : xs) {
    if (x.dim() == 0) throw run_error("xport.run.map_xs", "torch.map: a mapped tensor has no leading dim to map over (0-d)");
    consistent = consistent && x.size(0) == xs[0].size(0);
    shapes += (shapes.empty() ? "" : ", ") + c10::str(x.sizes());
  }
  if (xs[0].size(0) == 0) throw run_error("xport.run.map_xs", "Leading dimensions of mapped xs cannot be 0.");
  if (!consistent)
    throw run_error("xport.run.map_xs", "Leading dimensions of mapped xs must be consistent. Got shapes [" + shapes + "].");
  return xs[0].size(0);
}

// higher_order::map_impl(Any f, Tensor[] xs, Tensor[] pos_args) -> Tensor[]: f on each slice
// i of the xs (with pos_args), its results stacked along a new leading dim, as torch's map.
inline void map_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  const auto pos = s.back().toTensorVector();
  const auto xs = s[s.size() - 2].toTensorVector();
  const auto& fn = subgraph_fn_of(s[s.size() - 3], "map_impl", "body_fn");
  const auto n = mapped_length(xs);
  std::vector<std::vector<at::Tensor>> per_output;
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<at::Tensor> operands;
    operands.reserve(xs.size() + pos.size());
    for (const auto& x : xs) operands.push_back(x.select(0, i));
    operands.insert(operands.end(), pos.begin(), pos.end());
    auto out = fn.call(std::move(operands));
    per_output.resize(out.size());
    for (std::size_t k = 0; k < out.size(); ++k) per_output[k].push_back(std::move(out[k]));
  }
  std::vector<at::Tensor> stacked;
  for (const auto& slices : per_output) stacked.push_back(at::stack(slices, 0));
  torch::jit::drop(s, 3);
  s.emplace_back(c10::List<at::Tensor>(std::move(stacked)));
}

/// torch.scan's rule for what it scans over: tensors of one dim or more with the same leading
/// dim, not 0 (torch's text).
inline std::int64_t scanned_length(const std::vector<at::Tensor>& xs) {
  if (xs.empty()) throw run_error("xport.run.scan_xs", "torch.scan: xs is empty; it scans over one tensor at least");
  for (const auto& x : xs)
    if (x.dim() == 0 || x.size(0) == 0)
      throw run_error("xport.run.scan_xs",
                      "All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0");
  for (const auto& x : xs)
    if (x.size(0) != xs[0].size(0))
      throw run_error("xport.run.scan_xs", "torch.scan: the xs must have the same scan dimension; got sizes " +
                                               c10::str(xs[0].sizes()) + " and " + c10::str(x.sizes()));
  return xs[0].size(0);
}

// higher_order::scan(Any combine_fn, Tensor[] init, Tensor[] xs, Tensor[] additional_inputs)
// -> Tensor[]: carry = init; for each row i of the xs, (carry, y_i) = combine_fn(carry, xs[i],
// additional); returns the last carry, then each y stacked along a new leading dim.
inline void scan_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  const auto additional = s.back().toTensorVector();
  const auto xs = s[s.size() - 2].toTensorVector();
  auto carry = s[s.size() - 3].toTensorVector();
  const auto& fn = subgraph_fn_of(s[s.size() - 4], "scan", "combine_fn");
  const auto n = scanned_length(xs);
  const auto n_carry = carry.size();
  std::vector<std::vector<at::Tensor>> ys;
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<at::Tensor> operands = carry;
    for (const auto& x : xs) operands.push_back(x.select(0, i));
    operands.insert(operands.end(), additional.begin(), additional.end());
    auto out = fn.call(std::move(operands));
    if (out.size() < n_carry)
      throw run_error("xport.run.scan_body", "torch.scan: combine_fn returned " + std::to_string(out.size()) +
                                                 " tensors, fewer than the " + std::to_string(n_carry) + " it carries");
    ys.resize(out.size() - n_carry);
    for (std::size_t k = 0; k < n_carry; ++k) carry[k] = std::move(out[k]);
    for (std::size_t k = n_carry; k < out.size(); ++k) ys[k - n_carry].push_back(std::move(out[k]));
  }
  for (const auto& rows : ys) carry.push_back(at::stack(rows, 0));
  torch::jit::drop(s, 4);
  s.emplace_back(c10::List<at::Tensor>(std::move(carry)));
}

// higher_order::wrap_with_set_grad_enabled(bool enable, Any body, *Tensor[] args) -> Tensor[]:
// the body with autograd on or off (a `with torch.no_grad():` block of the training IR).
inline void set_grad_enabled_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  auto args = s.back().toTensorVector();
  const auto& fn = subgraph_fn_of(s[s.size() - 2], "wrap_with_set_grad_enabled", "body");
  const c10::AutoGradMode mode(s[s.size() - 3].toBool());
  auto out = fn.call(std::move(args));
  torch::jit::drop(s, 3);
  s.emplace_back(c10::List<at::Tensor>(std::move(out)));
}

/// The device type of an autocast region (`cpu`, `cuda`).
inline c10::DeviceType autocast_device(const std::string& device_type) {
  try {
    return c10::Device(device_type).type();
  } catch (const c10::Error&) {
    throw run_error("xport.run.autocast", "wrap_with_autocast: unknown device type '" + device_type + "'");
  }
}

// autocast's state for one device type, over LibTorch's two APIs
#if XPORT_TORCH_VERSION_AT_LEAST(2, 4)
inline bool autocast_enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
inline void set_autocast_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
inline c10::ScalarType autocast_dtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
inline void set_autocast_dtype(c10::DeviceType d, c10::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
inline void require_autocast_device(c10::DeviceType d) {
  if (d != c10::DeviceType::CPU && d != c10::DeviceType::CUDA)
    throw run_error("xport.run.autocast", "wrap_with_autocast: LibTorch " + torch_version() +
                                              " autocasts on CPU and CUDA only, not " + c10::DeviceTypeName(d, true));
}
inline bool autocast_enabled(c10::DeviceType d) {
  require_autocast_device(d);
  return d == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
inline void set_autocast_enabled(c10::DeviceType d, bool on) {
  if (d == c10::DeviceType::CPU) at::autocast::set_cpu_enabled(on);
  else at::autocast::set_enabled(on);
}
inline c10::ScalarType autocast_dtype(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
}
inline void set_autocast_dtype(c10::DeviceType d, c10::ScalarType t) {
  if (d == c10::DeviceType::CPU) at::autocast::set_autocast_cpu_dtype(t);
  else at::autocast::set_autocast_gpu_dtype(t);
}
#endif

/// Autocast set for one device type for the life of the object, restored after (torch's
/// `torch.autocast(device_type, dtype, enabled, cache_enabled)`). `dtype` Undefined and `cache`
/// -1 keep the current ones (plain values, not optionals: GCC 12 sees the optionals' bytes as
/// maybe uninitialized).
class autocast_scope {
 public:
  autocast_scope(c10::DeviceType device, c10::ScalarType dtype, bool enabled, int cache)
      : device_(device),
        was_enabled_(autocast_enabled(device)),
        was_dtype_(autocast_dtype(device)),
        was_cache_(at::autocast::is_autocast_cache_enabled()) {
    set_autocast_enabled(device, enabled);
    if (dtype != c10::ScalarType::Undefined) set_autocast_dtype(device, dtype);
    if (cache >= 0) at::autocast::set_autocast_cache_enabled(cache != 0);
    at::autocast::increment_nesting();
  }
  autocast_scope(const autocast_scope&) = delete;
  autocast_scope& operator=(const autocast_scope&) = delete;
  ~autocast_scope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast_enabled(device_, was_enabled_);
    set_autocast_dtype(device_, was_dtype_);
    at::autocast::set_autocast_cache_enabled(was_cache_);
  }

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  c10::ScalarType was_dtype_;
  bool was_cache_;
};

// higher_order::wrap_with_autocast(str device_type, ScalarType? dtype, bool enabled, bool?
// cache_enabled, Any body, *Tensor[] args) -> Tensor[]: the body under torch.autocast.
inline void autocast_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  auto args = s.back().toTensorVector();
  const auto& fn = subgraph_fn_of(s[s.size() - 2], "wrap_with_autocast", "body");
  const auto device = autocast_device(s[s.size() - 6].toStringRef());
  const auto dtype = s[s.size() - 5].isNone() ? c10::ScalarType::Undefined : s[s.size() - 5].toScalarType();
  const int cache = s[s.size() - 3].isNone() ? -1 : static_cast<int>(s[s.size() - 3].toBool());
  std::vector<at::Tensor> out;
  {
    const autocast_scope scope(device, dtype, s[s.size() - 4].toBool(), cache);
    out = fn.call(std::move(args));
  }
  torch::jit::drop(s, 6);
  s.emplace_back(c10::List<at::Tensor>(std::move(out)));
}

}  // namespace detail

/// Every higher-order operator xport reads, runs and writes, in one list.
inline const std::vector<higher_order_op>& higher_order_ops() {
  using P = higher_order_op::param;
  using T = P::type;
  using R = higher_order_op::results;
  using I = higher_order_op::id;
  static const std::vector<higher_order_op> ops{
      {I::cond, "cond", "torch.cond",
       {{"pred", T::any}, {"true_fn", T::graph}, {"false_fn", T::graph}, {"operands", T::tensors}},
       false, R::first_graph, -1, false, &detail::cond_kernel},
      {I::while_loop, "while_loop", "torch.while_loop",
       {{"cond_fn", T::graph}, {"body_fn", T::graph}, {"carried_inputs", T::tensors}, {"additional_inputs", T::tensors}},
       false, R::last_graph, -1, false, &detail::while_loop_kernel},
      {I::map, "map_impl", "torch.map", {{"f", T::graph}, {"xs", T::tensors}, {"pos_args", T::tensors}},
       false, R::mapped, 1, false, &detail::map_kernel},
      {I::scan, "scan", "torch.scan",
       {{"combine_fn", T::graph}, {"init", T::tensors}, {"xs", T::tensors}, {"additional_inputs", T::tensors}},
       false, R::scanned, 2, false, &detail::scan_kernel},
      {I::set_grad_enabled, "wrap_with_set_grad_enabled", "torch.no_grad / torch.enable_grad",
       {{"enable", T::boolean}, {"body", T::graph}, {"args", T::tensors}},
       true, R::first_graph, -1, true, &detail::set_grad_enabled_kernel},
      {I::autocast, "wrap_with_autocast", "torch.autocast",
       {{"device_type", T::string}, {"dtype", T::dtype_opt}, {"enabled", T::boolean}, {"cache_enabled", T::bool_opt},
        {"body", T::graph}, {"args", T::tensors}},
       true, R::first_graph, -1, true, &detail::autocast_kernel},
  };
  return ops;
}

/// The descriptor of `torch.ops.higher_order.<name>` (`cond`), or nullptr.
inline const higher_order_op* find_higher_order(std::string_view name) {
  for (const auto& h : higher_order_ops())
    if (h.name == name) return &h;
  return nullptr;
}

/// The descriptor of a higher-order operator `op` (op.higher_order), or nullptr for any other op.
inline const higher_order_op* hop_of(const op_info& op) {
  if (!op.higher_order) return nullptr;
  return find_higher_order(std::string_view(op.name).substr(std::string_view("higher_order::").size()));
}

/// The operands of a higher-order call its subgraph takes one row of (sizes without the leading
/// dim), as [first, last) of subgraph_operands(n): torch.map's xs, torch.scan's xs; none for the
/// others.
inline std::pair<std::size_t, std::size_t> row_operands(const node& n) {
  const auto* h = n.is_call() ? hop_of(n.op()) : nullptr;
  if (!h || h->rows_param < 0) return {0, 0};
  const auto args = n.args();
  std::size_t first = 0;
  for (int i = 0; i < h->rows_param && static_cast<std::size_t>(i) < args.size(); ++i)
    if (args[static_cast<std::size_t>(i)].is_list()) first += args[static_cast<std::size_t>(i)].as_list().size();
  const auto rows = static_cast<std::size_t>(h->rows_param);
  if (rows >= args.size() || !args[rows].is_list()) return {0, 0};
  return {first, first + args[rows].as_list().size()};
}

/// The names of the higher-order operators xport reads, for messages: `torch.cond, ...`.
inline std::string higher_order_names() {
  std::string s;
  for (const auto& h : higher_order_ops()) s += (s.empty() ? "" : ", ") + std::string(h.python);
  return s;
}

namespace detail {

/// The dispatcher schema of `h`.
inline c10::FunctionSchema schema_of(const higher_order_op& h) {
  std::vector<c10::Argument> args;
  for (const auto& p : h.params) {
    if (p.kind == higher_order_op::param::type::dtype_opt) {  // `ScalarType? dtype`: an int to the dispatcher
      args.emplace_back(std::string(p.name), c10::OptionalType::create(c10::IntType::get()),
                        c10::OptionalType::create(c10::ScalarTypeType::get()));
      continue;
    }
    c10::TypePtr t;
    switch (p.kind) {
      case higher_order_op::param::type::any:
      case higher_order_op::param::type::graph: t = c10::AnyType::get(); break;
      case higher_order_op::param::type::boolean: t = c10::BoolType::get(); break;
      case higher_order_op::param::type::string: t = c10::StringType::get(); break;
      case higher_order_op::param::type::dtype_opt: break;  // above
      case higher_order_op::param::type::bool_opt: t = c10::OptionalType::create(c10::BoolType::get()); break;
      case higher_order_op::param::type::tensors: t = c10::ListType::create(c10::TensorType::get()); break;
    }
    args.emplace_back(std::string(p.name), std::move(t));
  }
  return c10::FunctionSchema(h.qualified(), "", std::move(args),
                             {c10::Argument("", c10::ListType::create(c10::TensorType::get()))});
}

/// A boxed kernel from a function pointer known at run time (the descriptor's).
struct boxed_kernel final : c10::OperatorKernel {
  explicit boxed_kernel(c10::KernelFunction::BoxedKernelFunction* fn) : fn_(fn) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) { fn_(op, stack); }

 private:
  c10::KernelFunction::BoxedKernelFunction* fn_;
};

/// Registers every higher-order operator with the dispatcher, once per process (at run time: a
/// static registration in a header would run once per translation unit and throw).
inline void register_higher_order_ops() {
  static const bool registered = [] {
    auto& d = c10::Dispatcher::singleton();
    for (const auto& h : higher_order_ops()) {
      // the handles live as long as the process: never deregistered
      new c10::RegistrationHandleRAII(d.registerDef(schema_of(h), "xport: " + h.target()));
      new c10::RegistrationHandleRAII(d.registerImpl(c10::OperatorName(h.qualified(), ""),
                                                     c10::DispatchKey::CompositeImplicitAutograd,
                                                     c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<boxed_kernel>(h.kernel)),
                                                     c10::nullopt, nullptr, "xport: " + std::string(h.name) + " kernel"));
    }
    return true;
  }();
  (void)registered;
}

/// Installs register_higher_order_ops as the registry's hook for the `higher_order` namespace.
inline const bool higher_order_hook_installed = (set_higher_order_registrar(&register_higher_order_ops), true);

}  // namespace detail

XPORT_END_NAMESPACE
// #include <xport/ops/meta_rules.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// `self: f32[2, 3], other: f32[3]` for the tensor arguments of a call.
inline std::string describe_args(const op_info& op, const std::vector<argument>& args) {
  const auto& params = op.schema().arguments();
  std::string s;
  for (std::size_t i = 0; i < params.size() && i < args.size(); ++i) {
    if (!args[i].is_value() || args[i].as_value().kind() != value_kind::tensor) continue;
    s += (s.empty() ? "" : ", ") + params[i].name() + ": " + args[i].as_value().meta().annotation();
  }
  return s;
}

/// The device outputs live on: an explicit `device=` argument, else the first tensor
/// argument's device, else CPU (what FakeTensor reports as the fake device).
inline c10::Device output_device(const op_info& op, const std::vector<argument>& args) {
  if (op.device_arg >= 0 && static_cast<std::size_t>(op.device_arg) < args.size() &&
      args[static_cast<std::size_t>(op.device_arg)].is_device())
    return args[static_cast<std::size_t>(op.device_arg)].as_device();
  for (const auto& a : args) {
    std::optional<c10::Device> d;
    a.for_each_value([&](const value& v) {
      if (!d && v && v.kind() == value_kind::tensor) d = v.meta().device;
    });
    if (d) return *d;
  }
  return c10::Device(c10::kCPU);
}

inline bool any_requires_grad(const std::vector<argument>& args) {
  bool r = false;
  for (const auto& a : args)
    a.for_each_value([&](const value& v) {
      if (v && v.kind() == value_kind::tensor && v.meta().requires_grad) r = true;
    });
  return r;
}

/// The op has no meta kernel and xport no shape rule: what to write. A user's operator (any
/// namespace but LibTorch's own) gets the C++ registration of a Meta kernel, spelled out for it.
[[noreturn]] inline void throw_missing_meta_kernel(const op_info& op, const char* libtorch_said) {
  const auto ns = op.name.substr(0, op.name.find("::"));
  const bool libtorch_op = ns == "aten" || ns == "prims" || ns == "quantized" || ns == "_quantized";
  std::string fix;
  if (libtorch_op) {
    fix = "Fix: add a shape rule for it (ops/meta_rules.hpp), or call a composite of ops that have one.";
  } else {
    const auto bare = op.name.substr(ns.size() + 2);
    fix = "Fix: register a Meta kernel next to its other kernels, one that makes outputs of the right "
          "sizes and dtypes without reading data:\n  TORCH_LIBRARY_IMPL(" + ns + ", Meta, m) { m.impl(\"" +
          bare + "\", " + bare + "_meta); }\nwhere " + bare + "_meta takes the op's arguments (" +
          schema_string(op.schema()) + ") and returns e.g. at::empty(sizes, x.options()) (torch.export "
          "calls this the fake kernel: torch.library.register_fake in Python).";
  }
  throw missing_fake_kernel("xport.fake.missing_kernel",
                            op.qualified + " has no meta (fake) kernel in LibTorch " + torch_version() +
                                " and xport has no shape rule for it, so its output shapes cannot be "
                                "inferred without running it. " + fix + " LibTorch said: " + first_line(libtorch_said));
}

/// An op's meta kernel (or its CPU kernel on zeros) refused the arguments: the one message.
template <class Describe>
[[noreturn]] void throw_op_rejected(const op_info& op, Describe&& describe, const char* why) {
  throw graph_error("xport.fake.op_rejected",
                    op.qualified + " rejected its arguments (" + describe() + "): " + first_line(why));
}

/// Runs `op` on a stack of meta arguments and returns its results (as the op returns them),
/// falling back to xport's shape rules when LibTorch has no meta kernel for it.
/// `describe` names the arguments in error messages.
template <class Describe>
void run_meta_laid_out(const op_info& op, std::vector<c10::IValue>& stack, c10::Device device, Describe&& describe);

template <class Describe>
std::vector<c10::IValue> run_meta(const op_info& op, std::vector<c10::IValue> inputs, Describe&& describe,
                                  c10::Device device = c10::Device(c10::kCPU)) {
  run_meta_laid_out(op, inputs, device, describe);
  return inputs;
}

/// run_meta on `stack` itself: the arguments go in, the results come out (no allocation when
/// the op is known to have a meta kernel).
/// Meta runs skip autograd (and the view tracking above it) but make ordinary tensors, not
/// inference tensors: functionalization (lower/decompose.hpp) updates them in place.
using meta_run_guard = at::AutoDispatchBelowADInplaceOrView;

/// Note [Shapes from zeros] (meta_rules.hpp), with the op's refusals reported as a meta run's.
template <class Describe>
std::vector<c10::IValue> shapes_from_zeros_checked(const op_info& op, const std::vector<c10::IValue>& inputs,
                                                   Describe&& describe) {
  if (op.name == "aten::one_hot" && inputs.size() > 1 && inputs[1].isInt() && inputs[1].toInt() < 0)
    throw graph_break("xport.export.graph_break",
                      "graph break: at::one_hot without num_classes takes its class count from the "
                      "largest value in the tensor, which export cannot know: it runs on shapes only. "
                      "Way out: pass num_classes (at::one_hot(x, 10))");
  try {
    meta_run_guard guard;
    return shapes_from_zeros(op.handle, inputs);
  } catch (const c10::Error& e) {
    throw_op_rejected(op, describe, e.what_without_backtrace());
  }
}

template <class Describe>
void run_meta_in_place(const op_info& op, std::vector<c10::IValue>& stack, Describe&& describe) {
  if (op.meta_support.load(std::memory_order_relaxed) == 1) {  // known to work: the common case
    try {
      meta_run_guard guard;
      op.handle.callBoxed(stack);
      return;
    } catch (const c10::Error& e) {
      throw_op_rejected(op, describe, e.what_without_backtrace());
    } catch (const error&) {
      throw;
    } catch (const std::runtime_error& e) {  // some 1.13 kernels throw these (view's size check)
      throw_op_rejected(op, describe, e.what());
    }
  }
  const auto rule = find_meta_rule(op.qualified);  // exact overload: max.dim is not max
  const auto apply_rule = [&](const std::vector<c10::IValue>& inputs) {
    meta_run_guard guard;
    auto outs = rule(inputs);
    stack.assign(outs.begin(), outs.end());
  };
  if (rule && op.meta_support.load(std::memory_order_relaxed) == 2) {
    apply_rule(std::vector<c10::IValue>(stack));
    return;
  }
  if (op.meta_support.load(std::memory_order_relaxed) == 2 && is_shape_only(op.qualified)) {
    stack = shapes_from_zeros_checked(op, std::vector<c10::IValue>(stack), describe);
    return;
  }
  // A failed call leaves the stack in an unspecified state: keep the inputs when a rule may
  // need them.
  const bool shape_only = !rule && is_shape_only(op.qualified);
  std::vector<c10::IValue> inputs;
  if (rule || shape_only) inputs = stack;
  try {
    meta_run_guard guard;
    op.handle.callBoxed(stack);
    op.meta_support.store(1, std::memory_order_relaxed);
    return;
  } catch (const c10::NotImplementedError& e) {
    op.meta_support.store(2, std::memory_order_relaxed);
    if (shape_only) {
      stack = shapes_from_zeros_checked(op, inputs, describe);
      return;
    }
    if (!rule) throw_missing_meta_kernel(op, e.what_without_backtrace());
    apply_rule(inputs);
    return;
  } catch (const c10::Error& e) {
    if (shape_only) {  // a meta kernel that cannot answer (1.13's one_hot): the CPU kernel can
      op.meta_support.store(2, std::memory_order_relaxed);
      stack = shapes_from_zeros_checked(op, inputs, describe);
      return;
    }
    // The op has a meta kernel and it refused the arguments (shapes, dtypes, values).
    throw_op_rejected(op, describe, e.what_without_backtrace());
  } catch (const error&) {
    throw;
  } catch (const std::runtime_error& e) {
    op.meta_support.store(1, std::memory_order_relaxed);
    throw_op_rejected(op, describe, e.what());
  }
}

/// run_meta_in_place, with a convolution's output in the memory format its kernel on `device`
/// gives it (ops/conv_layout.hpp): the strides later views depend on.
template <class Describe>
void run_meta_laid_out(const op_info& op, std::vector<c10::IValue>& stack, c10::Device device, Describe&& describe) {
  if (op.name.compare(0, 10, "aten::conv") != 0 && op.name != "aten::_convolution") {
    run_meta_in_place(op, stack, describe);
    return;
  }
  const std::vector<c10::IValue> inputs = stack;
  run_meta_in_place(op, stack, describe);
  if (stack.size() == 1 && stack[0].isTensor())
    if (const auto format = conv_output_format(op.name, inputs, device))
      stack[0] = in_format(stack[0].toTensor(), *format);
}

/// The value types of an op's results (from run_meta); tensors are reported on `device`.
inline std::vector<value_type> result_types(const op_info& op, const std::vector<c10::IValue>& results,
                                            c10::Device device, bool requires_grad) {
  std::vector<value_type> out;
  const auto add_tensor = [&](const at::Tensor& t) {
    if (!t.defined()) {
      out.push_back(value_type{value_kind::none, {}, {}});
      return;
    }
    auto m = tensor_meta::of(t);
    m.device = device;
    m.requires_grad = requires_grad && (c10::isFloatingType(m.dtype) || c10::isComplexType(m.dtype));
    out.push_back(value_type::of(std::move(m)));
  };
  for_each_output(results, [&](std::size_t, const c10::IValue& r) {
    if (r.isTensor()) add_tensor(r.toTensor());
    else if (r.isInt()) out.push_back(value_type::of_sym_int(r.toInt()));
    else if (r.isDouble()) out.push_back(value_type{value_kind::sym_float, {}, {}});
    else if (r.isBool()) out.push_back(value_type{value_kind::sym_bool, {}, {}});
    else if (r.isNone()) out.push_back(value_type{value_kind::none, {}, {}});
    else
      throw missing_fake_kernel("xport.fake.unsupported_return",
                                op.qualified + " returns a " + r.tagKind() +
                                    ", which xport cannot represent in a graph yet");
  });
  return out;
}

/// What torch.map (and torch.scan, for its ys) makes of one slice `slice` its body returns: the
/// slices stacked along a new leading dim of the length of the xs in `args[xs_arg]` (contiguous,
/// as torch.stack gives them).
inline tensor_meta mapped_output(const tensor_meta& slice, const std::vector<argument>& args, std::size_t xs_arg = 1) {
  if (args.size() <= xs_arg || !args[xs_arg].is_list() || args[xs_arg].as_list().empty() ||
      !args[xs_arg].as_list()[0].is_value() || args[xs_arg].as_list()[0].as_value().kind() != value_kind::tensor ||
      args[xs_arg].as_list()[0].as_value().meta().sizes.empty())
    throw graph_error("xport.graph.map_xs", xs_arg == 1 ? "higher_order::map_impl takes (body_graph, xs, pos_args) with at "
                                                          "least one tensor of one dim or more in xs"
                                                        : "higher_order::scan takes (combine_graph, init, xs, "
                                                          "additional_inputs) with at least one tensor of one dim or more in xs");
  sym_shape sizes{args[xs_arg].as_list()[0].as_value().meta().sizes[0]};
  sizes.append(slice.sizes.begin(), slice.sizes.end());
  auto m = tensor_meta::contiguous(slice.dtype, std::move(sizes), slice.device);
  m.requires_grad = slice.requires_grad;
  return m;
}

/// A control-flow call's outputs: those of its first subgraph (torch.cond's true branch; verify
/// checks that the other agrees) or, for while_loop, of its body (its last); map's stacked
/// (mapped_output); scan's carries as its combine graph returns them, then its ys stacked; with
/// requires_grad where any operand requires it.
inline std::vector<value_type> subgraph_outputs(const op_info& op, const std::vector<argument>& args) {
  const auto* hop = hop_of(op);
  using R = higher_order_op::results;
  const bool loop = hop && hop->typing == R::last_graph;
  const bool map = hop && hop->typing == R::mapped, scan = hop && hop->typing == R::scanned;
  const std::size_t n_carry = scan && args.size() > 1 && args[1].is_list() ? args[1].as_list().size() : 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[loop ? args.size() - 1 - i : i];
    if (!a.is_graph()) continue;
    std::vector<value_type> types;
    const node body_out = a.as_graph()->body.output_node();
    for (const auto& o : body_out.args()) {
      if (!o.is_value())
        throw graph_error("xport.graph.subgraph_output", op.qualified + ": subgraph '" + a.as_graph()->name +
                                                             "' returns a constant; its outputs must be tensors");
      auto t = o.as_value().type();
      if (t.kind == value_kind::tensor && (map || (scan && types.size() >= n_carry)))
        t.tensor = mapped_output(t.tensor, args, static_cast<std::size_t>(hop->rows_param));
      if (t.kind == value_kind::tensor)  // only a float or complex tensor can require grad (a loop's count cannot)
        t.tensor.requires_grad = (c10::isFloatingType(t.tensor.dtype) || c10::isComplexType(t.tensor.dtype)) &&
                                 (t.tensor.requires_grad || any_requires_grad(args));
      types.push_back(std::move(t));
    }
    return types;
  }
  throw graph_error("xport.graph.subgraph_missing", op.qualified + " was called without a subgraph");
}

inline std::vector<value_type> infer_outputs(const op_info& op, const std::vector<argument>& args) {
  if (op.higher_order) return subgraph_outputs(op, args);
  if (reads_data(op)) throw_reads_data(op);
  torch::jit::Stack stack;
  push_meta_arguments(op, args, [](const value& v) { return v.meta().make_meta(); }, stack);
  const auto device = output_device(op, args);
  const auto results = run_meta(op, std::move(stack), [&] { return describe_args(op, args); }, device);
  return result_types(op, results, device, any_requires_grad(args));
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/ops/core_ops.hpp>
// xport/ops/core_ops.hpp: the core ATen operator set that run_decompositions() lowers to.
// LibTorch 1.13 has no `core` tag, so xport carries the set: every function of PyTorch's
// native_functions.yaml tagged `core`, read from pytorch/pytorch@2e35e4846418c7623dd0863221af6c50e0d3ff1c torchgen/packaged/ATen/native/native_functions.yaml
// (193 operators), plus `native_batch_norm`, which stands in for the `_native_batch_norm_legit*`
// family that LibTorch 1.13 does not have.

#include <algorithm>    // std::binary_search
#include <array>        // std::array
#include <string_view>  // std::string_view

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::array<std::string_view, 194> core_aten_ops{
    "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward",
    "aten::_adaptive_avg_pool3d", "aten::_cdist_forward", "aten::_embedding_bag", "aten::_fft_c2r",
    "aten::_fft_r2c", "aten::_local_scalar_dense", "aten::_log_softmax",
    "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit.no_stats",
    "aten::_native_batch_norm_legit_no_training", "aten::_pdist_forward", "aten::_softmax",
    "aten::_to_copy", "aten::abs", "aten::acos", "aten::acosh", "aten::adaptive_avg_pool1d",
    "aten::add.Scalar", "aten::add.Tensor", "aten::addmm", "aten::alias", "aten::amax",
    "aten::amin", "aten::any", "aten::any.dim", "aten::any.dims", "aten::arange.start_step",
    "aten::argmax", "aten::argmin", "aten::as_strided", "aten::asin", "aten::asinh", "aten::atan",
    "aten::atan2", "aten::atan2.out", "aten::atanh", "aten::avg_pool1d", "aten::avg_pool2d",
    "aten::avg_pool2d_backward", "aten::avg_pool3d", "aten::bitwise_and.Scalar",
    "aten::bitwise_and.Tensor", "aten::bitwise_not", "aten::bitwise_or.Scalar",
    "aten::bitwise_or.Tensor", "aten::bitwise_xor.Scalar", "aten::bitwise_xor.Tensor", "aten::bmm",
    "aten::cat", "aten::ceil", "aten::clamp", "aten::clamp.Tensor", "aten::clone", "aten::col2im",
    "aten::constant_pad_nd", "aten::convolution", "aten::convolution_backward", "aten::copy",
    "aten::cos", "aten::cosh", "aten::cumsum", "aten::diagonal", "aten::div.Scalar",
    "aten::div.Scalar_mode", "aten::div.Tensor", "aten::div.Tensor_mode", "aten::elu",
    "aten::embedding", "aten::embedding_dense_backward", "aten::empty.memory_format",
    "aten::empty_strided", "aten::eq.Scalar", "aten::eq.Tensor", "aten::erf", "aten::exp",
    "aten::expand", "aten::expm1", "aten::fill.Scalar", "aten::flip", "aten::floor",
    "aten::fmod.Scalar", "aten::fmod.Tensor", "aten::full", "aten::full_like", "aten::gather",
    "aten::ge.Scalar", "aten::ge.Tensor", "aten::gelu", "aten::grid_sampler_2d", "aten::gt.Scalar",
    "aten::gt.Tensor", "aten::hardtanh", "aten::index.Tensor", "aten::index_put",
    "aten::index_select", "aten::isinf", "aten::isnan", "aten::le.Scalar", "aten::le.Tensor",
    "aten::leaky_relu", "aten::log", "aten::log10", "aten::log1p", "aten::log2",
    "aten::logical_and", "aten::logical_not", "aten::logical_or", "aten::logical_xor",
    "aten::lt.Scalar", "aten::lt.Tensor", "aten::masked_scatter", "aten::max.dim",
    "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward",
    "aten::max_pool3d_with_indices", "aten::maximum", "aten::mean", "aten::mean.dim",
    "aten::min.dim", "aten::minimum", "aten::mm", "aten::mul.Scalar", "aten::mul.Tensor",
    "aten::native_batch_norm", "aten::native_dropout", "aten::native_group_norm",
    "aten::native_group_norm_backward", "aten::native_layer_norm",
    "aten::native_layer_norm_backward", "aten::ne.Scalar", "aten::ne.Tensor", "aten::neg",
    "aten::nonzero", "aten::permute", "aten::pow.Scalar", "aten::pow.Tensor_Scalar",
    "aten::pow.Tensor_Tensor", "aten::prod", "aten::prod.dim_int", "aten::rand", "aten::randn",
    "aten::randperm", "aten::reciprocal", "aten::reflection_pad1d", "aten::reflection_pad2d",
    "aten::reflection_pad3d", "aten::relu", "aten::remainder.Scalar", "aten::remainder.Tensor",
    "aten::repeat", "aten::replication_pad2d", "aten::replication_pad3d", "aten::resize_",
    "aten::round", "aten::rsqrt", "aten::scalar_tensor", "aten::scatter.src", "aten::scatter.value",
    "aten::scatter_add", "aten::scatter_reduce.two", "aten::select.int", "aten::select_scatter",
    "aten::sigmoid", "aten::sign", "aten::sin", "aten::sinh", "aten::slice.Tensor",
    "aten::slice_scatter", "aten::sort", "aten::split_with_sizes", "aten::sqrt",
    "aten::squeeze.dim", "aten::squeeze.dims", "aten::sub.Scalar", "aten::sub.Tensor",
    "aten::sum.dim_IntList", "aten::sym_is_contiguous", "aten::sym_numel", "aten::sym_size.int",
    "aten::sym_storage_offset", "aten::sym_stride.int", "aten::tan", "aten::tanh", "aten::topk",
    "aten::trunc", "aten::unsqueeze", "aten::upsample_bilinear2d.vec",
    "aten::upsample_nearest2d.vec", "aten::var.correction", "aten::var.dim", "aten::view",
    "aten::where.self"
};

/// Whether `qualified` (`aten::add.Tensor`, `aten::relu`) is in the core ATen set.
inline bool is_core_aten_op(std::string_view qualified) {
  return std::binary_search(core_aten_ops.begin(), core_aten_ops.end(), qualified);
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/ops/decompositions.hpp>
// xport/ops/decompositions.hpp: C++ counterparts of the decompositions torch.export's
// run_decompositions() takes from Python (torch._decomp, torch._refs) where they call other ATen
// ops than the op's C++ CompositeImplicitAutograd kernel, or where the op has no such kernel.
// Each records exactly the calls the Python one makes, so the lowered program prints as
// torch's. Ops not listed here lower by their C++ kernel, as torch's do. LibTorch >= 2.1 only
// (the 1.13 path keeps its own table in lower/decompose.hpp).

#include <functional>  // std::function
#include <vector>      // std::vector

#include <ATen/core/ivalue.h>

// #include <xport/config.hpp>
// #include <xport/detail/compat.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {
/// A decomposition: the op's arguments (as the dispatcher passes them) in, its results out,
/// computed with at:: calls, which are recorded in place of the op.
using decomposition_fn = std::function<std::vector<c10::IValue>(const std::vector<c10::IValue>& args)>;
}  // namespace detail
XPORT_END_NAMESPACE

#if XPORT_HAS_TORCH_FUNCTIONALIZATION
#include <algorithm>      // std::reverse
#include <cstdint>        // std::int64_t
#include <limits>         // std::numeric_limits
#include <utility>        // std::pair
#include <functional>     // std::function
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/_embedding_bag.h>
#include <ATen/ops/_embedding_bag_forward_only.h>
#include <ATen/ops/_native_batch_norm_legit.h>
#include <ATen/ops/_native_batch_norm_legit_no_training.h>
#include <ATen/ops/alias.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/_unsafe_view.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/clone.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mv.h>
#include <ATen/ops/unsqueeze.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/native_dropout.h>
#include <ATen/ops/permute.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/split_with_sizes.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor_split.h>
#include <ATen/ops/squeeze.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/transpose.h>
#include <ATen/ops/view.h>
#include <ATen/ops/where.h>
#include <ATen/ops/any.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/WrapDimMinimal.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {
namespace torch_decomp {

using S = std::vector<c10::IValue>;

/// What requires grad in torch's tracing (set by the lowering; lower/decompose.hpp).
inline thread_local const std::function<bool(const at::Tensor&)>* requires_grad_query = nullptr;
inline bool requires_grad(const at::Tensor& t) {
  return requires_grad_query ? (*requires_grad_query)(t) : t.requires_grad();
}

inline c10::ScalarType dtype_or_default(const c10::IValue& v) {
  return v.isNone() ? c10::typeMetaToScalarType(c10::get_default_dtype()) : v.toScalarType();
}
inline c10::optional<bool> pin_or_false(const c10::IValue& v) { return v.isNone() ? false : v.toBool(); }

// torch._refs.transpose: alias for rank <= 1 or equal dims, else permute
inline S transpose(const S& a) {
  const auto& x = a[0].toTensor();
  const auto rank = x.dim();
  const auto d0 = c10::maybe_wrap_dim(a[1].toInt(), std::max<std::int64_t>(rank, 1));
  const auto d1 = c10::maybe_wrap_dim(a[2].toInt(), std::max<std::int64_t>(rank, 1));
  if (rank <= 1 || d0 == d1) return {at::alias(x)};
  std::vector<std::int64_t> perm(static_cast<std::size_t>(rank));
  for (std::int64_t i = 0; i < rank; ++i) perm[static_cast<std::size_t>(i)] = i;
  std::swap(perm[static_cast<std::size_t>(d0)], perm[static_cast<std::size_t>(d1)]);
  return {at::permute(x, perm)};
}

// torch._refs.t: transpose(a, 0, 0 if a.ndim < 2 else 1)
inline S t(const S& a) {
  const auto& x = a[0].toTensor();
  return {at::transpose(x, 0, x.dim() < 2 ? 0 : 1)};
}

// _reshape_alias / _unsafe_view: view
inline S view(const S& a) { return {a[0].toTensor().view_symint(a[1].toSymIntVector())}; }

// torch._decomp.split: equal chunks by split_with_sizes
inline S split(const S& a) {
  const auto& x = a[0].toTensor();
  const auto size = a[1].toInt();
  const auto dim = c10::maybe_wrap_dim(a[2].toInt(), x.dim());
  const auto n = x.size(dim);
  if (n == 0) return {c10::List<at::Tensor>({at::alias(x)})};
  const auto chunks = (n + size - 1) / size;
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(chunks), size);
  sizes.back() = size - (size * chunks - n);
  return {c10::List<at::Tensor>(at::split_with_sizes(x, sizes, a[2].toInt()))};
}

// torch._refs.zeros / ones: full with the default dtype and strided layout
inline S full_of(const S& a, int value) {
  const auto dtype = dtype_or_default(a[1]);
  const auto layout = a[2].isNone() ? c10::kStrided : a[2].toLayout();
  const c10::Scalar fill = dtype == c10::kBool ? c10::Scalar(value != 0) : c10::Scalar(static_cast<std::int64_t>(value));
  return {at::_ops::full::call(a[0].toSymIntVector(), fill, dtype, layout, a[3].toOptional<c10::Device>(),
                               pin_or_false(a[4]))};
}

// torch._refs.zeros_like / ones_like: full_like
inline S full_like_of(const S& a, int value) {
  const auto& x = a[0].toTensor();
  const auto dtype = a[1].toOptional<c10::ScalarType>();
  const bool is_bool = dtype.value_or(x.scalar_type()) == c10::kBool;
  const c10::Scalar fill = is_bool ? c10::Scalar(value != 0) : c10::Scalar(static_cast<std::int64_t>(value));
  const auto mf = a[5].isNone() ? c10::MemoryFormat::Preserve : a[5].toMemoryFormat();
  return {at::_ops::full_like::call(x, fill, dtype, a[2].toOptional<c10::Layout>(), a[3].toOptional<c10::Device>(),
                                    pin_or_false(a[4]), mf)};
}

// torch._refs.new_zeros / new_ones: full with the tensor's dtype, layout and device
inline S new_full_of(const S& a, int value) {
  const auto& x = a[0].toTensor();
  const auto dtype = a[2].isNone() ? x.scalar_type() : a[2].toScalarType();
  const auto layout = a[3].isNone() ? x.layout() : a[3].toLayout();
  const auto device = a[4].isNone() ? x.device() : a[4].toDevice();
  const c10::Scalar fill = dtype == c10::kBool ? c10::Scalar(value != 0) : c10::Scalar(static_cast<std::int64_t>(value));
  return {at::_ops::full::call(a[1].toSymIntVector(), fill, dtype, layout, device, pin_or_false(a[5]))};
}

// torch._refs.rsub: sub(other, self, alpha), the number first
inline S rsub(const S& a) {
  // a wrapped number: recorded as the number, as torch records it
  return {at::_ops::sub_Tensor::call(at::native::wrapped_scalar_tensor(a[1].toScalar()), a[0].toTensor(), a[2].toScalar())};
}

// torch._decomp.silu: x * sigmoid(x)
inline S silu(const S& a) {
  const auto& x = a[0].toTensor();
  return {x.mul(at::sigmoid(x))};
}

// torch._decomp.squeeze_default: squeeze.dims
inline S squeeze_dim(const S& a) {
  return {at::squeeze(a[0].toTensor(), std::vector<std::int64_t>{a[1].toInt()})};
}
inline S squeeze_all(const S& a) {
  const auto& x = a[0].toTensor();
  std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
  for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<std::int64_t>(i);
  return {at::squeeze(x, dims)};
}

// torch._decomp.dropout: native_dropout when it drops, else a clone
inline S dropout(const S& a) {
  const auto& x = a[0].toTensor();
  const double p = a[1].toDouble();
  const bool train = a[2].toBool();
  if (train && p != 0) return {std::get<0>(at::native_dropout(x, p, train))};
  return {at::clone(x)};
}

// torch._decomp.native_batch_norm_decomposition: the _native_batch_norm_legit family
inline S native_batch_norm(const S& a) {
  const auto& x = a[0].toTensor();
  const auto w = a[1].toOptional<at::Tensor>(), b = a[2].toOptional<at::Tensor>();
  const auto rm = a[3].toOptional<at::Tensor>(), rv = a[4].toOptional<at::Tensor>();
  const bool training = a[5].toBool();
  const double momentum = a[6].toDouble(), eps = a[7].toDouble();
  const bool has_mean = rm && rm->defined(), has_var = rv && rv->defined();
  if (!has_mean && !has_var) {
    auto [o, m, v] = at::_native_batch_norm_legit(x, w, b, training, momentum, eps);
    return {o, m, v};
  }
  if (!has_mean || !has_var)
    throw error("xport.decompose.batch_norm", "native_batch_norm: running_mean and running_var must both be given or both be None");
  if (training) {
    at::Tensor mean = *rm, var = *rv;
    auto [o, m, v] = at::_native_batch_norm_legit(x, w, b, mean, var, training, momentum, eps);
    return {o, m, v};
  }
  auto [o, m, v] = at::_native_batch_norm_legit_no_training(x, w, b, *rm, *rv, momentum, eps);
  return {o, m, v};
}

// torch._refs.stack: cat of unsqueezed tensors (or cat + view for an inner dim)
inline S stack(const S& a) {
  const auto ts = a[0].toTensorVector();
  if (ts.empty()) throw error("xport.decompose.stack", "stack expects a non-empty TensorList");
  const auto rank = ts[0].dim();
  const auto dim = c10::maybe_wrap_dim(a[1].toInt(), rank + 1);
  if (dim < rank) {
    auto sizes = ts[0].sizes().vec();
    sizes.insert(sizes.begin() + dim, static_cast<std::int64_t>(ts.size()));
    return {at::cat(ts, dim).view(sizes)};
  }
  std::vector<at::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.unsqueeze(dim));
  return {at::cat(parts, a[1].toInt())};
}

// torch._refs.arange (end only): arange.start_step(0, end, 1)
inline S arange_end(const S& a) {
  const auto layout = a[2].isNone() ? c10::kStrided : a[2].toLayout();
  return {at::_ops::arange_start_step::call(0, a[0].toScalar(), 1, a[1].toOptional<c10::ScalarType>(), layout,
                                            a[3].toOptional<c10::Device>(), pin_or_false(a[4]))};
}

// torch._refs.unbind: squeezed pieces of tensor_split (whose C++ kernel slices)
inline std::vector<at::Tensor> unbind_pieces(const at::Tensor& x, std::int64_t dim) {
  const auto d = c10::maybe_wrap_dim(dim, x.dim());
  const auto n = x.size(d);
  if (n == 0) return {};
  auto pieces = at::tensor_split(x, n, d);
  std::vector<at::Tensor> out;
  for (const auto& p : pieces) out.push_back(at::squeeze(p, d));
  return out;
}
inline S unbind_int(const S& a) { return {c10::List<at::Tensor>(unbind_pieces(a[0].toTensor(), a[1].toInt()))}; }

// torch._decomp's RNN decompositions (lstm_impl, gru_impl and their helpers), for the layouts
// the C++ modules use: one direction or two, biases or none, no projections, no packed input.
namespace rnn {

using params_t = std::vector<at::Tensor>;  // one layer and direction: w_ih, w_hh[, b_ih, b_hh]

inline std::vector<params_t> gather(const std::vector<at::Tensor>& flat, bool has_biases) {
  const std::size_t group = has_biases ? 4 : 2;
  if (flat.size() % group != 0)
    throw error("xport.decompose.rnn", "an RNN's flat weights (" + std::to_string(flat.size()) +
                                           ") do not divide into groups of " + std::to_string(group));
  std::vector<params_t> out;
  for (std::size_t i = 0; i < flat.size(); i += group) out.emplace_back(flat.begin() + i, flat.begin() + i + group);
  return out;
}
inline c10::optional<at::Tensor> bias(const params_t& p, std::size_t i) {
  return p.size() > 2 ? c10::optional<at::Tensor>(p[i]) : c10::nullopt;
}

// one_layer_lstm + lstm_cell
inline std::pair<at::Tensor, std::pair<at::Tensor, at::Tensor>> lstm_layer(
    const at::Tensor& inp, const std::pair<at::Tensor, at::Tensor>& hidden, const params_t& p, bool reverse) {
  at::Tensor hx = hidden.first.unsqueeze(0), cx = hidden.second.unsqueeze(0);
  at::Tensor pre = at::linear(inp, p[0], bias(p, 2));
  if (reverse) pre = pre.flip({0});
  std::vector<at::Tensor> steps;
  for (const auto& x : unbind_pieces(pre, 0)) {
    const at::Tensor gates = at::linear(hx, p[1], bias(p, 3)).add(x);
    const auto g = gates.chunk(4, 2);
    const at::Tensor in_gate = g[0].sigmoid(), forget_gate = g[1].sigmoid(), cell_gate = g[2].tanh(),
                     out_gate = g[3].sigmoid();
    const at::Tensor kept = forget_gate.mul(cx);
    cx = kept.add(in_gate.mul(cell_gate));
    hx = out_gate.mul(cx.tanh());
    steps.push_back(hx);
  }
  if (reverse) std::reverse(steps.begin(), steps.end());
  at::Tensor out = at::cat(steps, 0);
  return {out, {hx.squeeze(0), cx.squeeze(0)}};
}

// one_layer_rnn + gru_cell
inline std::pair<at::Tensor, at::Tensor> gru_layer(const at::Tensor& inp, const at::Tensor& hidden, const params_t& p,
                                                   bool reverse) {
  at::Tensor pre = at::linear(inp, p[0], bias(p, 2));
  if (reverse) pre = pre.flip({0});
  at::Tensor h = hidden.unsqueeze(0);
  std::vector<at::Tensor> steps;
  for (const auto& x : unbind_pieces(pre, 0)) {
    const auto ig = x.chunk(3, 1);
    const auto hg = at::linear(h, p[1], bias(p, 3)).chunk(3, 2);
    const at::Tensor reset = hg[0].add(ig[0]).sigmoid();
    const at::Tensor update = hg[1].add(ig[1]).sigmoid();
    const at::Tensor scaled = hg[2].mul(reset);
    const at::Tensor fresh = ig[2].add(scaled).tanh();
    h = h.sub(fresh).mul(update).add(fresh);
    steps.push_back(h);
  }
  if (reverse) std::reverse(steps.begin(), steps.end());
  at::Tensor out = at::cat(steps, 0);
  return {out, h.squeeze(0)};
}

// _rnn_helper: layers (and directions) in turn; torch's never applies inter-layer dropout
template <class Hidden, class Layer>
std::pair<at::Tensor, std::vector<Hidden>> run_layers(at::Tensor input, const std::vector<Hidden>& hidden,
                                                      const std::vector<params_t>& params, std::int64_t num_layers,
                                                      bool bidirectional, bool batch_first, Layer&& layer) {
  if (batch_first) input = input.transpose(0, 1);
  std::vector<Hidden> finals;
  const std::size_t dirs = bidirectional ? 2 : 1;
  if (params.size() != static_cast<std::size_t>(num_layers) * dirs || hidden.size() != params.size())
    throw error("xport.decompose.rnn", "an RNN's weights and hidden states do not match its layers");
  for (std::size_t i = 0; i < static_cast<std::size_t>(num_layers); ++i) {
    auto [fwd_out, fwd_hidden] = layer(input, hidden[dirs * i], params[dirs * i], false);
    finals.push_back(fwd_hidden);
    if (bidirectional) {
      auto [bwd_out, bwd_hidden] = layer(input, hidden[dirs * i + 1], params[dirs * i + 1], true);
      finals.push_back(bwd_hidden);
      input = at::cat({fwd_out, bwd_out}, fwd_out.dim() - 1);
    } else {
      input = fwd_out;
    }
  }
  if (batch_first) input = input.transpose(0, 1);
  return {input, finals};
}

// lstm.input(input, hx[2], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
inline S lstm(const S& a) {
  const auto hx = a[1].toTensorVector();
  if (hx.size() != 2) throw error("xport.decompose.rnn", "lstm expects two hidden states");
  if (hx[0].size(2) != hx[1].size(2))
    throw error("xport.decompose.rnn", "lstm with projections (proj_size) has no decomposition in xport; keep "
                                       "aten::lstm.input (decomposition_table::core_aten().keep(\"aten::lstm.input\"))");
  const auto params = gather(a[2].toTensorVector(), a[3].toBool());
  std::vector<std::pair<at::Tensor, at::Tensor>> hidden;
  const auto h = unbind_pieces(hx[0], 0);
  const auto c = unbind_pieces(hx[1], 0);
  for (std::size_t i = 0; i < h.size() && i < c.size(); ++i) hidden.emplace_back(h[i], c[i]);
  auto [out, finals] = run_layers(a[0].toTensor(), hidden, params, a[4].toInt(), a[7].toBool(), a[8].toBool(),
                                  [](const at::Tensor& x, const std::pair<at::Tensor, at::Tensor>& hid,
                                     const params_t& p, bool rev) { return lstm_layer(x, hid, p, rev); });
  std::vector<at::Tensor> hs, cs;
  for (const auto& f : finals) {
    hs.push_back(f.first);
    cs.push_back(f.second);
  }
  const at::Tensor hn = at::stack(hs, 0);
  const at::Tensor cn = at::stack(cs, 0);
  return {out, hn, cn};
}

// gru.input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
inline S gru(const S& a) {
  const auto params = gather(a[2].toTensorVector(), a[3].toBool());
  const auto hidden = unbind_pieces(a[1].toTensor(), 0);
  auto [out, finals] = run_layers(a[0].toTensor(), hidden, params, a[4].toInt(), a[7].toBool(), a[8].toBool(),
                                  [](const at::Tensor& x, const at::Tensor& hid, const params_t& p, bool rev) {
                                    return gru_layer(x, hid, p, rev);
                                  });
  return {out, at::stack(finals, 0)};
}

}  // namespace rnn

// torch._decomp.should_fold: matmul folds the batch of the larger operand into mm's rows
inline bool should_fold(const at::Tensor& tensor1, const at::Tensor& tensor2) {
  const bool first_larger = tensor1.dim() >= tensor2.dim();
  const at::Tensor& t1 = first_larger ? tensor1 : tensor2;
  const at::Tensor& t2 = first_larger ? tensor2 : tensor1;
  if (!(t1.dim() >= 3 && t2.dim() <= 2)) return false;
  if (requires_grad(t2)) return true;
  if (tensor1.dim() == 2) return false;
  if (t1.numel() == 0) return true;
  // contiguous, dims of size 1 aside
  const auto sizes = t1.sizes();
  const auto strides = t1.strides();
  std::int64_t expected = 1;
  for (std::int64_t i = t1.dim() - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// torch._decomp.matmul (its Python override of the composite kernel)
inline at::Tensor matmul_impl(const at::Tensor& tensor1, const at::Tensor& tensor2) {
  const auto d1 = tensor1.dim(), d2 = tensor2.dim();
  if (d1 == 0 || d2 == 0) throw error("xport.decompose.matmul", "matmul does not support 0-dimensional tensors");
  if (d1 == 1 && d2 == 1) return at::dot(tensor1, tensor2);
  if (d1 == 2 && d2 == 1) return at::mv(tensor1, tensor2);
  if (d1 == 1 && d2 == 2) return at::squeeze(at::mm(at::unsqueeze(tensor1, 0), tensor2), 0);
  if (d1 == 2 && d2 == 2) return at::mm(tensor1, tensor2);
  if (should_fold(tensor1, tensor2)) {
    const bool transpose = d2 > d1;
    const at::Tensor t1 = transpose ? tensor2.mT() : tensor1;
    const at::Tensor t2 = !transpose ? tensor2 : (d1 == 2 ? tensor1.t() : tensor1);
    const auto sizes1 = t1.sizes().vec();
    std::vector<std::int64_t> output_shape(sizes1.begin(), sizes1.end() - 1);
    std::int64_t folded = 1;
    for (const auto s : output_shape) folded *= s;
    const bool t2_matrix = t2.dim() == 2;
    if (t2_matrix) output_shape.push_back(t2.size(1));
    const at::Tensor t1_folded = t1.reshape({folded, sizes1.back()});
    if (t2_matrix) {
      const at::Tensor output = at::_unsafe_view(t1_folded.mm(t2), output_shape);
      return transpose ? output.mT().contiguous() : output;
    }
    return at::_unsafe_view(t1_folded.mv(t2), output_shape);
  }
  // batched: b1 x n x m1 by b2 x m2 x p, the batch dims broadcast
  const std::int64_t n = d1 > 1 ? tensor1.size(-2) : 1, m1 = tensor1.size(-1);
  const auto batch1 = tensor1.sizes().slice(0, static_cast<std::size_t>(std::max<std::int64_t>(d1 - 2, 0))).vec();
  const std::int64_t m2 = d2 > 1 ? tensor2.size(-2) : tensor2.size(-1), p = d2 > 1 ? tensor2.size(-1) : 1;
  std::vector<std::int64_t> batch2;
  for (std::int64_t i = 0; i < d2 - 2; ++i) batch2.push_back(tensor2.size(i));
  if (d1 == 3 && d2 == 3 && batch1[0] != batch2[0]) {
    if (batch1[0] == 1 && requires_grad(tensor1)) return matmul_impl(tensor1.squeeze(0), tensor2);
    if (batch2[0] == 1 && requires_grad(tensor2)) return matmul_impl(tensor1, tensor2.squeeze(0));
  }
  auto batch = at::infer_size(batch1, batch2);
  std::int64_t batch_product = 1;
  for (const auto s : batch) batch_product *= s;
  auto size1 = batch;
  size1.push_back(n);
  size1.push_back(m1);
  const at::Tensor t1 = tensor1.expand(size1).reshape({batch_product, n, m1});
  const bool vector_rhs = d2 == 1;
  auto size2 = batch;
  size2.push_back(m2);
  if (!vector_rhs) size2.push_back(p);
  const at::Tensor t2 = vector_rhs ? tensor2.expand(size2).reshape({batch_product, m2}).unsqueeze(2)
                                   : tensor2.expand(size2).reshape({batch_product, m2, p});
  auto output_shape = batch;
  if (d1 > 1) output_shape.push_back(n);
  if (d2 > 1) output_shape.push_back(p);
  if (vector_rhs) return t1.bmm(t2).squeeze(-1).view(output_shape);
  return t1.bmm(t2).view(output_shape);
}
inline S matmul_op(const S& a) { return {matmul_impl(a[0].toTensor(), a[1].toTensor())}; }

// embedding_bag's C++ composite, deciding as it does under torch's fake tensors (where the
// weight keeps requires_grad): `_embedding_bag` when the weight requires grad, else the
// forward-only kernel (meta tensors never require grad, so the kernel itself would always pick
// the forward-only one, which autograd cannot run on a parameter).
inline S embedding_bag(const S& a) {
  const auto& w = a[0].toTensor();
  const auto psw = a[6].toOptional<at::Tensor>();
  const std::int64_t pad = a.size() > 8 && !a[8].isNone() ? a[8].toInt() : -1;
  const auto r = requires_grad(w)
                     ? at::_embedding_bag(w, a[1].toTensor(), a[2].toTensor(), a[3].toBool(), a[4].toInt(),
                                          a[5].toBool(), psw, a[7].toBool(), pad)
                     : at::_embedding_bag_forward_only(w, a[1].toTensor(), a[2].toTensor(), a[3].toBool(),
                                                       a[4].toInt(), a[5].toBool(), psw, a[7].toBool(), pad);
  return {std::get<0>(r), std::get<1>(r), std::get<2>(r), std::get<3>(r)};
}

// torch._decomp.nop_decomposition (detach, lift, lift_fresh): alias
inline S alias(const S& a) { return {at::alias(a[0].toTensor())}; }

// torch._decomp.safe_softmax (what scaled_dot_product_attention's math path calls): softmax,
// with rows that are all -inf set to 0; torch.all as torch._refs writes it (not any not)
inline S safe_softmax(const S& a) {
  const auto& x = a[0].toTensor();
  const auto dim = a[1].toInt();
  const auto out = at::softmax(x, dim, a.size() > 2 ? a[2].toOptional<c10::ScalarType>() : c10::nullopt);
  const auto masked = x.eq(-std::numeric_limits<double>::infinity());
  const auto rows = at::logical_not(at::any(at::logical_not(masked), dim, /*keepdim=*/true));
  return {at::where(rows, at::zeros_like(out), out)};
}

// torch._decomp._weight_norm_interface (nn.utils.weight_norm, wav2vec2's positional conv)
inline S weight_norm_interface(const S& a) {
  const auto& v = a[0].toTensor();
  const auto& g = a[1].toTensor();
  const auto dim = a.size() > 2 ? a[2].toInt() : 0;
  std::vector<std::int64_t> keep;
  for (std::int64_t i = 0; i < v.dim(); ++i)
    if (i != dim) keep.push_back(i);
  const auto norm_dtype = g.scalar_type() == c10::kBFloat16 ? c10::optional<c10::ScalarType>(c10::kFloat) : c10::nullopt;
  const auto norm = at::linalg_vector_norm(v, 2, keep, /*keepdim=*/true, norm_dtype);
  return {v.mul(g.div(norm.to(g.scalar_type()))), norm};
}

}  // namespace torch_decomp

/// Decompositions torch applies above functionalization and autograd: Python overrides of an
/// op's composite (or autograd) kernel.
inline const std::unordered_map<std::string, decomposition_fn>& torch_composite_decompositions() {
  namespace d = torch_decomp;
  static const std::unordered_map<std::string, decomposition_fn> table = {
      {"aten::matmul", d::matmul_op},
      {"aten::dropout", d::dropout},
      {"aten::native_batch_norm", d::native_batch_norm},
      {"aten::lstm.input", d::rnn::lstm},
      {"aten::gru.input", d::rnn::gru},
      {"aten::embedding_bag", d::embedding_bag},
      {"aten::embedding_bag.padding_idx", d::embedding_bag},
  };
  return table;
}

/// Whether torch runs its decomposition of `op` as the op's autograd kernel (autograd off for
/// the pieces), rather than as its composite kernel (autograd on).
inline bool runs_below_autograd(const op_info& op) {
  return op.name == "aten::dropout" || op.name == "aten::native_batch_norm" || op.name == "aten::lstm" ||
         op.name == "aten::gru";
}

/// Decompositions torch applies below functionalization, as it records (its decomposition
/// table's entries for ops without a composite kernel; a few core ops among them).
inline const std::unordered_map<std::string, decomposition_fn>& torch_decompositions() {
  namespace d = torch_decomp;
  static const std::unordered_map<std::string, decomposition_fn> table = {
      {"aten::t", d::t},
      {"aten::transpose.int", d::transpose},
      {"aten::_unsafe_view", d::view},
      {"aten::_reshape_alias", d::view},
      {"aten::split.Tensor", d::split},
      {"aten::zeros", [](const d::S& a) { return d::full_of(a, 0); }},
      {"aten::ones", [](const d::S& a) { return d::full_of(a, 1); }},
      {"aten::zeros_like", [](const d::S& a) { return d::full_like_of(a, 0); }},
      {"aten::ones_like", [](const d::S& a) { return d::full_like_of(a, 1); }},
      {"aten::new_zeros", [](const d::S& a) { return d::new_full_of(a, 0); }},
      {"aten::new_ones", [](const d::S& a) { return d::new_full_of(a, 1); }},
      {"aten::rsub.Scalar", d::rsub},
      {"aten::silu", d::silu},
      {"aten::squeeze.dim", d::squeeze_dim},
      {"aten::squeeze", d::squeeze_all},
      {"aten::stack", d::stack},
      {"aten::arange", d::arange_end},
      {"aten::detach", d::alias},
      {"aten::lift_fresh", d::alias},
      {"aten::unbind.int", d::unbind_int},
      {"aten::_safe_softmax", d::safe_softmax},
      {"aten::_weight_norm_interface", d::weight_norm_interface},
  };
  return table;
}

}  // namespace detail
XPORT_END_NAMESPACE
#endif  // XPORT_HAS_TORCH_FUNCTIONALIZATION
// #include <xport/ops/call.hpp>

// building, checking and printing programs
// #include <xport/program/verify.hpp>
// xport/program/verify.hpp: every invariant of a graph and of an exported program, checked.
// verify(graph) checks structure (Note [Topological invariant], Note [Use lists]), names and
// each call against its operator's schema; verify(program) adds torch.export's verifier rules
// for the graph signature, the state dict and the dialect. Each failure is a verify_error with a
// stable id (`xport.verify.<rule>`), the offending node, and how to fix it.

#include <algorithm>      // std::sort, std::adjacent_find
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <vector>         // std::vector

// #include <xport/ops/higher_order.hpp>
// #include <xport/config.hpp>
// #include <xport/ir/dtype.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

[[noreturn]] inline void verify_fail(const std::string& rule, const std::string& msg,
                                     const std::string& node_name = {}) {
  throw verify_error("xport.verify." + rule, msg, node_name);
}

/// Whether a bound argument has schema type `t` (what coerce() produces; nothing is coerced).
inline bool fits(const argument& a, const c10::TypePtr& t) {
  using K = c10::TypeKind;
  switch (t->kind()) {
    case K::OptionalType: return a.is_none() || fits(a, t->castRaw<c10::OptionalType>()->getElementType());
    case K::ListType: {
      if (!a.is_list()) return false;
      const auto& elem = t->castRaw<c10::ListType>()->getElementType();
      for (const auto& e : a.as_list())
        if (!fits(e, elem)) return false;
      return true;
    }
    case K::FloatType: return a.is_double() || is_value_of(a, value_kind::sym_float);
    default: {
      if (a.is_list()) return false;
      argument copy = a;  // scalars: the coercion rules, on a cheap copy
      return coerce(copy, t, c10::nullopt) && copy == a;
    }
  }
}

}  // namespace detail

struct verify_options {
  /// Check every call against its operator's schema (argument count and types).
  bool check_schemas = true;
  /// Require functional ops only (torch's ATEN dialect).
  bool functional = false;
};

namespace detail {

/// Checks `n`'s place in the node list: its links, its owner, its order key, and that no node follows the output.
inline void verify_position(const graph& g, node n, const node_impl* prev, bool seen_output) {
  const auto* impl = n.impl();
  if (impl->prev != prev)
    verify_fail("links", "node '" + n.name() + "' has a broken prev link", n.name());
  if (&n.owning_graph() != &g)
    verify_fail("owner", "node '" + n.name() + "' belongs to another graph", n.name());
  if (prev && prev->order >= impl->order)
    verify_fail("order_keys", "node '" + n.name() + "' has an order key out of sequence", n.name());
  if (seen_output)
    verify_fail("output_not_last",
                "node '" + n.name() + "' comes after the output node; the output node must be last",
                n.name());
}

/// Checks the rules of `n`'s kind (placeholders first and bare, calls with an operator) and tracks where the walk is.
inline void verify_kind(node n, bool& after_placeholders, bool& seen_output) {
  const auto* impl = n.impl();
  switch (n.kind()) {
    case node_kind::placeholder:
      if (after_placeholders)
        verify_fail("placeholder_order",
                    "placeholder '" + n.name() + "' comes after a call node; placeholders must "
                    "come first (move it with graph::move_before)",
                    n.name());
      if (!impl->args.empty() || impl->outputs.size() != 1)
        verify_fail("placeholder_shape", "placeholder '" + n.name() +
                                             "' must have no arguments and exactly one output",
                    n.name());
      break;
    case node_kind::call_function:
      after_placeholders = true;
      if (!impl->op)
        verify_fail("missing_op", "call node '" + n.name() + "' has no operator", n.name());
      break;
    case node_kind::output:
      after_placeholders = true;
      seen_output = true;
      break;
  }
}

/// Claims the names `n` defines in `names`, and checks each output points back at `n` with consistent meta.
inline void verify_names(node n, std::unordered_set<std::string_view>& names) {
  const auto* impl = n.impl();
  const auto claim = [&](std::string_view name) {
    if (!names.insert(name).second)
      verify_fail("duplicate_name", "the name '" + std::string(name) + "' is used twice", n.name());
  };
  if (n.kind() == node_kind::call_function && impl->tuple_output) claim(impl->name);
  for (const auto* v : impl->outputs) {
    claim(v->name);
    if (v->producer != impl)
      verify_fail("producer", "value '" + v->name + "' does not point back at its node", n.name());
    if (v->type.kind == value_kind::tensor &&
        !v->type.tensor.strides.empty() && v->type.tensor.strides.size() != v->type.tensor.sizes.size())
      verify_fail("meta", "value '" + v->name + "' has " + std::to_string(v->type.tensor.sizes.size()) +
                              " sizes but " + std::to_string(v->type.tensor.strides.size()) + " strides",
                  n.name());
  }
}

/// Checks `n`'s operands are non-null and defined earlier in `g`; returns how many operand slots it has.
inline std::size_t verify_operands(const graph& g, node n) {
  const auto* impl = n.impl();
  for (std::size_t i = 0; i < impl->slots.size(); ++i) {
    const value v = *impl->slots[i];
    if (!v) verify_fail("null_operand", "operand " + std::to_string(i) + " of '" + n.name() + "' is null", n.name());
    const auto* producer = v.impl()->producer;
    // defined before use: in this graph, and earlier in the list (order keys are checked
    // increasing above)
    if (producer->owner != &g || producer->order >= impl->order)
      verify_fail("use_before_def",
                  "'" + n.name() + "' uses '" + v.name() + "' (operand " + std::to_string(i) +
                      ") before it is defined, or '" + v.name() +
                      "' is not in this graph; nodes must stay in topological order "
                      "(Note [Topological invariant])",
                  n.name());
  }
  return impl->slots.size();
}

/// Checks call node `n` against its operator's schema: argument count and types, output count, functionality.
inline void verify_call(node n, const verify_options& opts) {
  const auto* impl = n.impl();
  const auto& op = *impl->op;
  const auto& params = op.schema().arguments();
  if (impl->args.size() != params.size())
    verify_fail("arg_count", "'" + n.name() + "' calls " + op.qualified + " with " +
                                 std::to_string(impl->args.size()) + " arguments; its schema has " +
                                 std::to_string(params.size()) + "\n  schema: " +
                                 schema_string(op.schema()),
                n.name());
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!fits(impl->args[i], params[i].real_type()))
      verify_fail("arg_type", "'" + n.name() + "' passes " + describe(impl->args[i]) +
                                  " as argument '" + params[i].name() + "' of " + op.qualified +
                                  ", which must be " + params[i].real_type()->str(),
                  n.name());
  const auto& rets = op.schema().returns();
  if (!op.returns_list && impl->outputs.size() != rets.size())
    verify_fail("output_count", "'" + n.name() + "' has " + std::to_string(impl->outputs.size()) +
                                    " outputs; " + op.qualified + " returns " +
                                    std::to_string(rets.size()),
                n.name());
  if (opts.functional && op.is_mutable)
    verify_fail("not_functional", "operator '" + op.qualified + "' (node '" + n.name() +
                                      "') is not functional; the ATEN dialect allows no "
                                      "in-place or out= ops (run_decompositions() removes them)",
                n.name());
}

}  // namespace detail
inline void verify(const graph& g, const verify_options& opts);
namespace detail {

/// Checks subgraph `s` of control-flow call `n` (torch.`hop`) as torch checks every higher-order
/// operator's: it takes the operands (dtype, sizes, device: requires_grad and strides may
/// differ, torch records a parameter's placeholder in a branch without its grad flag), writes to
/// no input and returns no input itself.
/// Of the row_operands (torch.map's and torch.scan's xs) the subgraph takes one slice each (its
/// sizes without the leading dim).
inline void verify_subgraph_of(const node& n, const std::string& hop, const subgraph& s,
                               const argument::list_type& operands, const verify_options& opts) {
  const auto [first_row, last_row] = row_operands(n);
  const auto fits_input = [](const argument& a, const value& ph, bool slice) {
    if (!a.is_value() || a.as_value().kind() != ph.kind()) return false;
    if (ph.kind() != value_kind::tensor) return true;
    const value av = a.as_value();
    const auto &m = av.meta(), &q = ph.meta();
    if (slice && m.sizes.empty()) return false;
    const auto sizes = slice ? sym_shape(m.sizes.begin() + 1, m.sizes.end()) : m.sizes;
    return m.dtype == q.dtype && sizes == q.sizes && m.device == q.device;
  };
  const auto phs = s.body.placeholders();
  if (phs.size() != operands.size())
    verify_fail(hop + "_operands", "'" + n.name() + "': subgraph '" + s.name + "' takes " + std::to_string(phs.size()) +
                                       " inputs, torch." + hop + " passes it " + std::to_string(operands.size()) + " operands",
                n.name());
  for (std::size_t i = 0; i < phs.size(); ++i)
    if (!fits_input(operands[i], phs[i].output(0), i >= first_row && i < last_row))
      verify_fail(hop + "_operands", "'" + n.name() + "': operand " + std::to_string(i) + " of torch." + hop +
                                         " does not match input '" + phs[i].name() + "' of subgraph '" + s.name + "' (" +
                                         phs[i].output(0).meta().annotation() + ")",
                  n.name());
  // what an op writes to, traced back through views: torch refuses a write to an input (a
  // tensor the subgraph makes itself may be written to, as LibTorch's linear does to its bias add)
  const auto writes_input = [](const node& inner) {
    const auto& params = inner.op().schema().arguments();
    const auto args = inner.args();
    for (std::size_t j = 0; j < params.size() && j < args.size(); ++j) {
      if (!params[j].alias_info() || !params[j].alias_info()->isWrite() || !args[j].is_value()) continue;
      auto v = args[j].as_value();
      while (v.producer().is_call() && v.producer().op().is_view && !v.producer().args().empty() &&
             v.producer().args()[0].is_value())
        v = v.producer().args()[0].as_value();
      if (v.producer().is_placeholder()) return true;
    }
    return false;
  };
  for (auto inner : s.body.nodes())
    if (inner.is_call() && inner.op().is_mutable && writes_input(inner))
      verify_fail(hop + "_mutation", "Higher order ops do not support input mutation: node '" + inner.name() + "' of subgraph '" +
                                         s.name + "' calls " + inner.op().qualified + "; compute a new tensor and return it instead",
                  n.name());
  const node body_out = s.body.output_node();
  for (const auto& o : body_out.args())
    if (o.is_value() && o.as_value().producer().is_placeholder())
      verify_fail(hop + "_aliasing", "Higher order ops do not support aliasing: subgraph '" + s.name + "' of '" + n.name() +
                                         "' returns its input '" + o.as_value().name() +
                                         "'. Replace `return input` with `return input.clone()`",
                  n.name());
  verify(s.body, opts);
}

/// Checks a torch.cond call: its two branches take the operands and agree on what they return
/// (torch.cond's rules, with its texts), mutate nothing and return no operand itself.
inline void verify_cond(node n, const verify_options& opts) {
  const auto args = n.args();
  if (args.size() != 4 || !args[1].is_graph() || !args[2].is_graph() || !args[3].is_list())
    verify_fail("cond_args", "'" + n.name() + "' calls torch.cond without (pred, true_graph, false_graph, operands)", n.name());
  const auto one_element = [](const tensor_meta& m) {
    for (const auto& d : m.sizes)
      if (d.is_symbolic() || d.hint() != 1) return false;
    return true;
  };
  if (args[0].is_value() && args[0].as_value().kind() == value_kind::tensor && !one_element(args[0].as_value().meta()))
    verify_fail("cond_pred", "Expected pred to be bool or single-element tensor, but got " +
                                 args[0].as_value().meta().annotation() + " ('" + args[0].as_value().name() +
                                 "', the predicate of '" + n.name() + "')",
                n.name());
  const subgraph* branches[2] = {args[1].as_graph().get(), args[2].as_graph().get()};
  for (const auto* s : branches) verify_subgraph_of(n, "cond", *s, args[3].as_list(), opts);
  const auto outs0 = branches[0]->body.output_node().args(), outs1 = branches[1]->body.output_node().args();
  if (outs0.size() != outs1.size() || outs0.size() != n.num_outputs())
    verify_fail("cond_outputs", "Unmatched output spec from torch.cond branches: '" + branches[0]->name + "' returns " +
                                    std::to_string(outs0.size()) + " values, '" + branches[1]->name + "' " +
                                    std::to_string(outs1.size()) + " ('" + n.name() + "' has " +
                                    std::to_string(n.num_outputs()) + " outputs)",
                n.name());
  for (std::size_t i = 0; i < outs0.size(); ++i) {
    if (!outs0[i].is_value() || !outs1[i].is_value())
      verify_fail("cond_outputs", "'" + n.name() + "': torch.cond's branches must return tensors (output " + std::to_string(i) + ")", n.name());
    const value v0 = outs0[i].as_value(), v1 = outs1[i].as_value();
    const auto& a = v0.meta();
    const auto& b = v1.meta();
    if (a.dtype != b.dtype)
      verify_fail("cond_outputs", "When merging two branches' output in torch.cond,  expected same dtype but got " +
                                      python_repr(a.dtype) + " and " + python_repr(b.dtype) + " (output " + std::to_string(i) +
                                      " of '" + n.name() + "')",
                  n.name());
    if (a.sizes != b.sizes)
      verify_fail("cond_outputs", "torch.cond's branches return output " + std::to_string(i) + " in different shapes (" +
                                      a.annotation() + " and " + b.annotation() + ") at '" + n.name() +
                                      "': torch makes its size data-dependent (unbacked), which xport does not support; "
                                      "return the same shape from both branches",
                  n.name());
    if (n.output(i).meta().dtype != a.dtype || n.output(i).meta().sizes != a.sizes)
      verify_fail("cond_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + n.output(i).meta().annotation() +
                                      ") is not what its branches return (" + a.annotation() + ")",
                  n.name());
  }
}

/// Checks a torch.while_loop call (torch's rules, with its texts): cond_fn returns a bool scalar
/// tensor, body_fn returns what is carried (same count, dtypes, shapes and devices), both take
/// the carried and the additional inputs, mutate nothing and return no input itself.
inline void verify_while_loop(node n, const verify_options& opts) {
  const auto args = n.args();
  if (args.size() != 4 || !args[0].is_graph() || !args[1].is_graph() || !args[2].is_list() || !args[3].is_list())
    verify_fail("while_loop_args", "'" + n.name() + "' calls torch.while_loop without (cond_graph, body_graph, "
                                   "carried_inputs, additional_inputs)", n.name());
  const auto operands = subgraph_operands(n);
  const auto& cond_g = *args[0].as_graph();
  const auto& body_g = *args[1].as_graph();
  verify_subgraph_of(n, "while_loop", cond_g, operands, opts);
  verify_subgraph_of(n, "while_loop", body_g, operands, opts);
  const auto pred = cond_g.body.output_node().args();
  const auto is_bool_scalar = [](const argument& a) {
    return a.is_value() && a.as_value().kind() == value_kind::tensor && a.as_value().meta().dtype == at::kBool &&
           a.as_value().meta().sizes.empty();
  };
  if (pred.size() != 1 || !is_bool_scalar(pred[0]))
    verify_fail("while_loop_pred", "cond_fn must return a boolean scalar tensor or a boolean but got " +
                                       (pred.size() == 1 && pred[0].is_value() ? pred[0].as_value().meta().annotation()
                                                                               : std::to_string(pred.size()) + " values") +
                                       " (subgraph '" + cond_g.name + "' of '" + n.name() + "')",
                n.name());
  const auto& carried = args[2].as_list();
  const auto outs = body_g.body.output_node().args();
  if (outs.size() != carried.size() || carried.size() != n.num_outputs())
    verify_fail("while_loop_outputs", "Expected body_fn_output and carried_inputs to have same number of outputs but got " +
                                          std::to_string(outs.size()) + " and " + std::to_string(carried.size()) +
                                          " (subgraph '" + body_g.name + "' of '" + n.name() + "', which has " +
                                          std::to_string(n.num_outputs()) + " outputs)",
                n.name());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const value cv = carried[i].as_value();
    const auto& c = cv.meta();
    if (!outs[i].is_value() || outs[i].as_value().kind() != value_kind::tensor)
      verify_fail("while_loop_outputs", "'" + n.name() + "': body_fn must return tensors (output " + std::to_string(i) + ")", n.name());
    const value bv = outs[i].as_value();
    const auto& b = bv.meta();
    if (b.dtype != c.dtype || b.sizes != c.sizes || b.device != c.device)
      verify_fail("while_loop_outputs", "Expected body_fn_output and carried_inputs to have same metadata but found: pair[" +
                                            std::to_string(i) + "] differ, where body_fn returns " + b.annotation() +
                                            " and carried_inputs[" + std::to_string(i) + "] is " + c.annotation() +
                                            " (subgraph '" + body_g.name + "' of '" + n.name() + "')",
                  n.name());
    if (n.output(i).meta().dtype != c.dtype || n.output(i).meta().sizes != c.sizes)
      verify_fail("while_loop_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + n.output(i).meta().annotation() +
                                            ") is not what it carries (" + c.annotation() + ")",
                  n.name());
  }
}

/// Checks a torch.map call (`map_impl(body_graph, xs, pos_args)`): the xs share a leading dim,
/// the body takes a slice of each and the pos_args, and the outputs are its results stacked.
inline void verify_map(node n, const verify_options& opts) {
  const auto args = n.args();
  if (args.size() != 3 || !args[0].is_graph() || !args[1].is_list() || !args[2].is_list() || args[1].as_list().empty())
    verify_fail("map_args", "'" + n.name() + "' calls torch.map without (body_graph, xs, pos_args), xs not empty", n.name());
  const auto& xs = args[1].as_list();
  for (const auto& x : xs)
    if (!x.is_value() || x.as_value().kind() != value_kind::tensor || x.as_value().meta().sizes.empty() ||
        x.as_value().meta().sizes[0] != xs[0].as_value().meta().sizes[0])
      verify_fail("map_xs", "'" + n.name() + "': Leading dimensions of mapped xs must be consistent (" +
                                (x.is_value() ? "'" + x.as_value().name() + "'" : std::string("an xs")) +
                                " does not have the first's)",
                  n.name());
  const auto& body = *args[0].as_graph();
  verify_subgraph_of(n, "map", body, subgraph_operands(n), opts);
  const auto outs = body.body.output_node().args();
  if (outs.size() != n.num_outputs())
    verify_fail("map_outputs", "'" + n.name() + "' has " + std::to_string(n.num_outputs()) + " outputs, its body '" +
                                   body.name + "' returns " + std::to_string(outs.size()),
                n.name());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].is_value() || outs[i].as_value().kind() != value_kind::tensor)
      verify_fail("map_outputs", "'" + n.name() + "': torch.map's body must return tensors (output " + std::to_string(i) + ")", n.name());
    const value sv = outs[i].as_value(), mv = n.output(i);
    const auto& slice = sv.meta();
    const auto& m = mv.meta();
    if (m.dtype != slice.dtype || m.sizes.empty() || m.sizes[0] != xs[0].as_value().meta().sizes[0] ||
        sym_shape(m.sizes.begin() + 1, m.sizes.end()) != slice.sizes)
      verify_fail("map_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + m.annotation() +
                                     ") is not its body's " + slice.annotation() + " stacked over the mapped dim",
                  n.name());
  }
}

/// Checks a torch.scan call (`scan(combine_graph, init, xs, additional_inputs)`): the xs share
/// a leading dim, the combine graph takes the carries, a slice of each xs and the additional
/// inputs, and returns the next carries (init's metadata, torch's text) then the ys; the outputs
/// are the last carries and the ys stacked.
inline void verify_scan(node n, const verify_options& opts) {
  const auto args = n.args();
  if (args.size() != 4 || !args[0].is_graph() || !args[1].is_list() || !args[2].is_list() || !args[3].is_list() ||
      args[1].as_list().empty() || args[2].as_list().empty())
    verify_fail("scan_args", "'" + n.name() + "' calls torch.scan without (combine_graph, init, xs, additional_inputs), "
                             "init and xs not empty",
                n.name());
  const auto& init = args[1].as_list();
  const auto& xs = args[2].as_list();
  for (const auto& x : xs)
    if (!x.is_value() || x.as_value().kind() != value_kind::tensor || x.as_value().meta().sizes.empty() ||
        x.as_value().meta().sizes[0] != xs[0].as_value().meta().sizes[0])
      verify_fail("scan_xs", "'" + n.name() + "': All xs leaves must at least have 'dim' number of dimensions and the "
                             "same scan dimension (" +
                                 (x.is_value() ? "'" + x.as_value().name() + "'" : std::string("an xs")) +
                                 " does not have the first's)",
                  n.name());
  const auto& body = *args[0].as_graph();
  verify_subgraph_of(n, "scan", body, subgraph_operands(n), opts);
  const auto outs = body.body.output_node().args();
  if (outs.size() < init.size() || outs.size() != n.num_outputs())
    verify_fail("scan_outputs", "Expect combine_fn to return a tuple (next_carry, y): '" + n.name() + "' carries " +
                                    std::to_string(init.size()) + " and has " + std::to_string(n.num_outputs()) +
                                    " outputs, its combine graph '" + body.name + "' returns " + std::to_string(outs.size()),
                n.name());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].is_value() || outs[i].as_value().kind() != value_kind::tensor)
      verify_fail("scan_outputs", "'" + n.name() + "': torch.scan's combine_fn must return tensors (output " +
                                      std::to_string(i) + ")",
                  n.name());
    const value bv = outs[i].as_value(), mv = n.output(i);
    const auto& b = bv.meta();
    const auto& m = mv.meta();
    if (i < init.size()) {
      const value cv = init[i].as_value();
      const auto& c = cv.meta();
      if (b.dtype != c.dtype || b.sizes != c.sizes || b.device != c.device)
        verify_fail("scan_carry", "Expected init and carry to have same metadata but found: pair[" + std::to_string(i) +
                                      "] differ, where init is " + c.annotation() + " and carry is " + b.annotation() +
                                      " (subgraph '" + body.name + "' of '" + n.name() + "')",
                    n.name());
      if (m.dtype != c.dtype || m.sizes != c.sizes)
        verify_fail("scan_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + m.annotation() +
                                        ") is not what it carries (" + c.annotation() + ")",
                    n.name());
    } else if (m.dtype != b.dtype || m.sizes.empty() || m.sizes[0] != xs[0].as_value().meta().sizes[0] ||
               sym_shape(m.sizes.begin() + 1, m.sizes.end()) != b.sizes) {
      verify_fail("scan_outputs", "'" + n.name() + "' output " + std::to_string(i) + " (" + m.annotation() +
                                      ") is not its combine graph's " + b.annotation() + " stacked over the scanned dim",
                  n.name());
    }
  }
}

/// Checks a call that runs its one subgraph under a mode (no_grad, autocast): its arguments are
/// the operator's layout, the body takes the operands, and the outputs are what it returns.
inline void verify_wrapped(node n, const higher_order_op& hop, const verify_options& opts) {
  const auto args = n.args();
  const auto graphs = hop.graph_params();
  if (args.size() != hop.params.size() || graphs.size() != 1 || !args[graphs[0]].is_graph() || !args.back().is_list())
    verify_fail(std::string(hop.name) + "_args", "'" + n.name() + "' calls " + hop.target() + " without " + hop.layout(), n.name());
  const auto& body = *args[graphs[0]].as_graph();
  verify_subgraph_of(n, std::string(hop.name), body, args.back().as_list(), opts);
  const auto outs = body.body.output_node().args();
  if (outs.size() != n.num_outputs())
    verify_fail(std::string(hop.name) + "_outputs", "'" + n.name() + "' has " + std::to_string(n.num_outputs()) +
                                                        " outputs, its body '" + body.name + "' returns " + std::to_string(outs.size()),
                n.name());
  for (std::size_t i = 0; i < outs.size(); ++i)
    if (!outs[i].is_value() || outs[i].as_value().kind() != value_kind::tensor ||
        outs[i].as_value().meta().dtype != n.output(i).meta().dtype || outs[i].as_value().meta().sizes != n.output(i).meta().sizes)
      verify_fail(std::string(hop.name) + "_outputs", "'" + n.name() + "' output " + std::to_string(i) +
                                                          " is not what its body '" + body.name + "' returns",
                  n.name());
}

/// Checks a higher-order call by the rules of its operator (ops/higher_order.hpp).
inline void verify_higher_order(node n, const verify_options& opts) {
  const auto* hop = hop_of(n.op());
  if (!hop) verify_fail("higher_order", "'" + n.name() + "' calls " + n.op().qualified + ", which xport does not know", n.name());
  switch (hop->which) {
    case higher_order_op::id::cond: return verify_cond(n, opts);
    case higher_order_op::id::while_loop: return verify_while_loop(n, opts);
    case higher_order_op::id::map: return verify_map(n, opts);
    case higher_order_op::id::scan: return verify_scan(n, opts);
    case higher_order_op::id::set_grad_enabled:
    case higher_order_op::id::autocast: return verify_wrapped(n, *hop, opts);
  }
}

/// Checks every recorded use points at an operand slot holding the value, once; returns how many uses there are.
inline std::size_t verify_recorded_uses(const graph& g) {
  std::size_t total_uses = 0;
  std::vector<std::pair<const node_impl*, std::uint32_t>> seen_uses;
  for (auto n : g.nodes())
    for (auto v : n.outputs()) {
      const auto uses = v.uses();
      total_uses += uses.size();
      for (std::size_t k = 0; k < uses.size(); ++k) {
        const auto& u = uses[k];
        if (u.user_impl->owner != &g || u.index >= u.user_impl->slots.size() || *u.user_impl->slots[u.index] != v)
          verify_fail("use_list", "'" + v.name() + "' records a use that no operand matches (Note [Use lists])",
                      n.name());
        if (u.user_impl->use_pos[u.index] != k)
          verify_fail("use_list", "operand " + std::to_string(u.index) + " of '" + node(u.user_impl).name() +
                                      "' has a stale position in the use list of '" + v.name() + "' (Note [Use lists])",
                      node(u.user_impl).name());
      }
      if (uses.size() > 1) {
        seen_uses.clear();
        for (const auto& u : uses) seen_uses.emplace_back(u.user_impl, u.index);
        std::sort(seen_uses.begin(), seen_uses.end());
        if (std::adjacent_find(seen_uses.begin(), seen_uses.end()) != seen_uses.end())
          verify_fail("use_list", "'" + v.name() + "' records a use that no operand matches (Note [Use lists])",
                      n.name());
      }
    }
  return total_uses;
}

/// Fails naming the first operand slot missing from its value's use list, if there is one.
inline void verify_unrecorded_uses(const graph& g) {
  for (auto n : g.nodes())
    for (std::size_t i = 0; i < n.num_inputs(); ++i) {
      const auto v = n.input(i);
      bool found = false;
      for (const auto& u : v.uses()) found = found || (u.user_impl == n.impl() && u.index == i);
      if (!found)
        verify_fail("use_list", "'" + v.name() + "' is operand " + std::to_string(i) + " of '" + n.name() +
                                    "' but its use list does not record it (Note [Use lists])",
                    n.name());
    }
}

}  // namespace detail

/// Checks the graph's invariants; throws verify_error on the first broken one.
inline void verify(const graph& g, const verify_options& opts = {}) {
  using detail::verify_fail;
  std::unordered_set<std::string_view> names;
  names.reserve(g.size() * 2);
  std::size_t total_slots = 0;
  const detail::node_impl* prev = nullptr;
  bool after_placeholders = false;
  bool seen_output = false;
  std::size_t count = 0;
  for (auto n : g.nodes()) {
    ++count;
    detail::verify_position(g, n, prev, seen_output);
    detail::verify_kind(n, after_placeholders, seen_output);
    detail::verify_names(n, names);
    // operands: defined before use, and Note [Use lists] one way
    total_slots += detail::verify_operands(g, n);
    if (n.kind() == node_kind::call_function && opts.check_schemas) detail::verify_call(n, opts);
    if (n.kind() == node_kind::call_function && n.op().higher_order) detail::verify_higher_order(n, opts);
    prev = n.impl();
  }
  if (count != g.size())
    verify_fail("size", "the graph counts " + std::to_string(g.size()) + " nodes but holds " +
                            std::to_string(count));
  if (prev != g.last().impl()) verify_fail("links", "the graph's last node is not the end of its list");
  if (!seen_output) verify_fail("no_output", "the graph has no output node; call graph::set_output");
  // Note [Use lists], both ways, in linear time: every recorded use points at an operand slot that
  // holds the value, and no value records a use twice; with as many uses as slots, every slot is
  // then recorded exactly once.
  if (detail::verify_recorded_uses(g) != total_slots) detail::verify_unrecorded_uses(g);
}

namespace detail {

/// The FQNs a program's inputs name, by kind: what its mutation outputs may target.
struct signature_targets {
  std::unordered_set<std::string> user_inputs, buffers, parameters;
};

/// Checks a lifted state input (parameter, buffer, constant) `ph`: its target is in the state dict or the
/// constants as its kind requires, with the placeholder's meta; records its target in `targets`.
inline void verify_state_input(const exported_program& p, const input_spec& spec, node ph,
                               signature_targets& targets) {
  const auto& name = ph.name();
  const auto kind_str = std::string(to_string(spec.kind));
  if (!spec.target)
    verify_fail("signature.missing_target", kind_str + " input '" + name + "' has no target FQN", name);
  const auto& fqn = *spec.target;
  const tensor_meta* ph_meta =
      ph.output(0).kind() == value_kind::tensor ? &ph.output(0).meta() : nullptr;
  const auto check_meta = [&](const at::Tensor& t) {
    if (!ph_meta) return;
    if (t.scalar_type() != ph_meta->dtype || t.sizes().vec() != ph_meta->size_hints())
      verify_fail("signature.state_meta",
                  kind_str + " '" + fqn + "' is " + tensor_meta::of(t).annotation() +
                      " but placeholder '" + name + "' says " + ph_meta->annotation(),
                  name);
  };
  switch (spec.kind) {
    case input_kind::parameter: {
      targets.parameters.insert(fqn);
      const auto* t = p.state_dict().find(fqn);
      if (!t)
        verify_fail("signature.missing_parameter",
                    "parameter '" + fqn + "' (input '" + name + "') is not in the state dict", name);
      check_meta(*t);
      break;
    }
    case input_kind::buffer: {
      targets.buffers.insert(fqn);
      if (!spec.persistent)
        verify_fail("signature.persistent", "Failed to specify persistent flag on BUFFER. (buffer '" +
                                                fqn + "', input '" + name + "')",
                    name);
      if (*spec.persistent) {
        const auto* t = p.state_dict().find(fqn);
        if (!t)
          verify_fail("signature.missing_buffer",
                      "persistent buffer '" + fqn + "' (input '" + name + "') is not in the state dict",
                      name);
        check_meta(*t);
      } else {
        if (p.state_dict().contains(fqn))
          verify_fail("signature.non_persistent_in_state",
                      "Non-persistent buffer " + fqn + " is in the state dict, it should not be.", name);
        const auto* t = p.constants().find(fqn);
        if (!t)
          verify_fail("signature.missing_constant",
                      "non-persistent buffer '" + fqn + "' (input '" + name + "') is not in the constants",
                      name);
        check_meta(*t);
      }
      break;
    }
    case input_kind::constant_tensor:
    case input_kind::custom_obj: {
      const auto* t = p.constants().find(fqn);
      if (!t)
        verify_fail("signature.missing_constant",
                    kind_str + " '" + fqn + "' (input '" + name + "') is not in the constants", name);
      if (spec.kind == input_kind::constant_tensor) check_meta(*t);
      break;
    }
    default: break;
  }
}

/// Checks the input specs against the placeholders (names, order, tokens, state); returns the targets they name.
inline signature_targets verify_input_specs(const exported_program& p) {
  const auto& sig = p.signature();
  const auto phs = p.graph().placeholders();
  if (phs.size() != sig.input_specs.size())
    verify_fail("signature.input_count", "the graph has " + std::to_string(phs.size()) +
                                             " placeholders but the signature has " +
                                             std::to_string(sig.input_specs.size()) + " input specs");
  bool user_seen = false;
  signature_targets targets;
  for (std::size_t i = 0; i < phs.size(); ++i) {
    const auto& spec = sig.input_specs[i];
    const auto& name = phs[i].name();
    if (spec.arg.name != name)
      verify_fail("signature.input_name", "input spec " + std::to_string(i) + " names '" +
                                              spec.arg.name + "' but placeholder " +
                                              std::to_string(i) + " is '" + name + "'",
                  name);
    if (spec.kind == input_kind::user_input) {
      user_seen = true;
      targets.user_inputs.insert(name);
      if (spec.arg.type == argument_spec::kind::constant &&
          (phs[i].output(0).kind() != value_kind::none || phs[i].output(0).num_uses() != 0))
        verify_fail("signature.constant_input",
                    "constant input '" + name + "' must be a placeholder of kind none that nothing uses (the "
                    "program is specialized to its value)",
                    name);
      continue;
    }
    if (user_seen)
      verify_fail("signature.input_order",
                  "input '" + name + "' (" + std::string(to_string(spec.kind)) + ") comes after a user input; lifted "
                  "parameters, buffers and constants must come first",
                  name);
    if (spec.kind == input_kind::token) {
      if (spec.arg.type != argument_spec::kind::token)
        verify_fail("signature.token", "token input '" + name + "' must be a TokenArgument", name);
      continue;
    }
    verify_state_input(p, spec, phs[i], targets);
  }
  return targets;
}

/// Checks the output specs against the graph's outputs: names, kind order, and mutation targets in `targets`.
inline void verify_output_specs(const exported_program& p, const signature_targets& targets) {
  const auto& sig = p.signature();
  const auto out_node = p.graph().output_node();
  const auto out_args = out_node.args();
  if (out_args.size() != sig.output_specs.size())
    verify_fail("signature.output_count", "the graph returns " + std::to_string(out_args.size()) +
                                              " values but the signature has " +
                                              std::to_string(sig.output_specs.size()) + " output specs");
  int stage = 0;  // 0: tokens, 1: mutations, 2: user outputs and the rest
  for (std::size_t i = 0; i < out_args.size(); ++i) {
    const auto& spec = sig.output_specs[i];
    const auto& a = out_args[i];
    const std::string got = a.is_value() ? a.as_value().name() : std::string("a constant");
    if (spec.arg.type == argument_spec::kind::constant) {
      if (a.is_value() || !(a == spec.arg.constant))
        verify_fail("signature.output_name", "output " + std::to_string(i) +
                                                 " should be the constant of its spec, got " + got);
    } else if (!a.is_value() || a.as_value().name() != spec.arg.name) {
      verify_fail("signature.output_name", "output spec " + std::to_string(i) + " names '" +
                                               spec.arg.name + "' but the graph returns " + got);
    }
    const int s = spec.kind == output_kind::token ? 0
                  : (spec.kind == output_kind::buffer_mutation ||
                     spec.kind == output_kind::parameter_mutation ||
                     spec.kind == output_kind::user_input_mutation)
                      ? 1
                      : 2;
    if (s < stage)
      verify_fail("signature.output_order",
                  "output '" + spec.arg.name + "' (" + std::string(to_string(spec.kind)) +
                      ") comes after a later kind of output; order is tokens, mutations, then user outputs");
    stage = s;
    const std::string tgt = spec.target.value_or("");
    if (spec.kind == output_kind::buffer_mutation && !targets.buffers.count(tgt))
      verify_fail("signature.mutation_target",
                  "Mutation node " + spec.arg.name + " is neither a buffer nor a user input. "
                  "Buffers to mutate: '" + tgt + "' is not a buffer of this program");
    if (spec.kind == output_kind::parameter_mutation && !targets.parameters.count(tgt))
      verify_fail("signature.mutation_target", "output '" + spec.arg.name + "' mutates '" + tgt +
                                                   "', which is not a parameter of this program");
    if (spec.kind == output_kind::user_input_mutation && !targets.user_inputs.count(tgt))
      verify_fail("signature.mutation_target",
                  "Mutation node " + spec.arg.name + " is neither a buffer nor a user input. "
                  "'" + tgt + "' is not a user input of this program");
  }
}

}  // namespace detail

/// Checks the program: the graph, then torch.export's signature rules.
inline void verify(const exported_program& p, verify_options opts = {}) {
  opts.functional = opts.functional || p.dialect() == ir_dialect::aten;
  verify(p.graph(), opts);
  const auto targets = detail::verify_input_specs(p);
  detail::verify_output_specs(p, targets);
}

XPORT_END_NAMESPACE
// #include <xport/program/builder.hpp>
// xport/program/builder.hpp: building exported programs by hand, op by op.
// program_builder adds user inputs, parameters, buffers and constants as placeholders (named as
// torch.export names them: `x`, `p_fc_weight`, `b_bn_running_mean`, `c_scale`), calls any
// registered operator by name with arguments checked against its schema, infers every output's
// dtype and shape on meta tensors, and finishes with a verified exported_program.
//
//   xport::program_builder b;
//   auto x = b.input("x", at::randn({10, 10}));
//   auto y = b.input("y", at::randn({10, 10}));
//   auto s = b.call("aten::sin", {x});
//   auto c = b.call("aten::cos", {y});
//   b.output(b.call("aten::add.Tensor", {s, c}));
//   xport::exported_program p = std::move(b).build();

#include <algorithm>    // std::stable_sort
#include <memory>       // std::shared_ptr, std::make_shared
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>

// #include <xport/config.hpp>
// #include <xport/ops/meta_infer.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/signature.hpp>
// #include <xport/program/verify.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {
/// `p_` + FQN lower-cased with every non-alphanumeric character as `_` (torch.export's
/// placeholder_naming_pass): `bar.l0.weight` -> `p_bar_l0_weight`.
inline std::string lifted_name(input_kind k, std::string_view fqn) {
  std::string s(placeholder_prefix(k));
  for (char c : fqn) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    s += alnum ? static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c) : '_';
  }
  return s;
}
inline int input_rank(input_kind k) {
  switch (k) {
    case input_kind::token: return 0;
    case input_kind::parameter: return 1;
    case input_kind::buffer: return 2;
    case input_kind::constant_tensor: return 3;
    case input_kind::custom_obj: return 4;
    case input_kind::user_input: return 5;
  }
  return 6;
}
}  // namespace detail

class program_builder {
 public:
  program_builder() = default;

  /// A user input, typed like `example` (kept as the program's example input). With
  /// `exact_name` false, a taken or reserved name gets a suffix (`input` -> `input_1`).
  value input(const std::string& name, const at::Tensor& example, bool exact_name = true) {
    auto v = add_input(input_spec{input_kind::user_input, argument_spec::tensor(name), {}, {}},
                       tensor_meta::of(example), exact_name);
    examples_.push_back(example);
    return v;
  }
  /// A user input of the given type.
  value input(const std::string& name, tensor_meta meta, bool exact_name = true) {
    has_all_examples_ = false;
    return add_input(input_spec{input_kind::user_input, argument_spec::tensor(name), {}, {}},
                     std::move(meta), exact_name);
  }
  /// A parameter with its fully qualified name; the tensor goes to the state dict.
  value parameter(const std::string& fqn, const at::Tensor& t) {
    state_dict_.set(fqn, t);
    return add_lifted(input_kind::parameter, fqn, t, std::nullopt);
  }
  /// A buffer; persistent buffers go to the state dict, others to the constants.
  value buffer(const std::string& fqn, const at::Tensor& t, bool persistent = true) {
    (persistent ? state_dict_ : constants_).set(fqn, t);
    return add_lifted(input_kind::buffer, fqn, t, persistent);
  }
  /// A constant tensor (CONSTANT_TENSOR), lifted to an input and kept in the constants.
  value constant(const std::string& fqn, const at::Tensor& t) {
    constants_.set(fqn, t);
    return add_lifted(input_kind::constant_tensor, fqn, t, std::nullopt);
  }

  /// A placeholder exactly as `spec` describes it (its name, kind, target, persistence), typed
  /// `type`; for passes that rebuild a program. State tensors come from set_state().
  value placeholder(const input_spec& spec, value_type type) {
    value v = graph_.add_placeholder(spec.arg.name, std::move(type));
    input_specs_.push_back(spec);
    return v;
  }
  /// The state dict and constants of the program being built (replacing what is there).
  void set_state(tensor_dict state_dict, tensor_dict constants) {
    state_dict_ = std::move(state_dict);
    constants_ = std::move(constants);
  }
  /// Example inputs to keep in the program (or none).
  void set_examples(std::optional<std::vector<at::Tensor>> examples) {
    has_all_examples_ = examples.has_value();
    examples_ = examples ? std::move(*examples) : std::vector<at::Tensor>{};
  }

  /// Calls operator `op` (`"aten::add.Tensor"`, `"aten::sin"`): arguments are bound to its
  /// schema (positional then keyword, defaults filled) and checked; output types are inferred on
  /// meta tensors. Throws schema_error or missing_fake_kernel, leaving the graph unchanged.
  node call(std::string_view op, std::vector<argument> args = {}, std::vector<kwarg> kwargs = {}) {
    return call(find_op(op), std::move(args), std::move(kwargs));
  }
  node call(const op_info& op, std::vector<argument> args = {}, std::vector<kwarg> kwargs = {}) {
    for (auto& a : args) check_owned(a, &op);
    for (auto& k : kwargs) check_owned(k.value, &op);
    auto bound = detail::bind_arguments(op, std::move(args), std::move(kwargs));
    auto types = detail::infer_outputs(op, bound);
    auto n = graph_.create_call(op, std::move(bound), std::move(types));
    stamp(n);
    return n;
  }

  /// Calls `op` with arguments already in schema order (all of them, defaults included), as a
  /// pass rewriting nodes has them; output types are inferred on meta tensors.
  node call_bound(const op_info& op, std::vector<argument> bound) {
    if (bound.size() != op.schema().arguments().size())
      throw schema_error("xport.schema.arg_count", op.qualified + " takes " +
                                                       std::to_string(op.schema().arguments().size()) +
                                                       " arguments, " + std::to_string(bound.size()) + " were bound");
    auto types = detail::infer_outputs(op, bound);
    return record(op, std::move(bound), std::move(types));
  }

  /// Adds a call node whose arguments are already bound to the schema and whose output types
  /// are known (what a tracer records). Only the graph's own checks apply.
  node record(const op_info& op, std::vector<argument> bound, std::vector<value_type> types) {
    auto n = graph_.create_call(op, std::move(bound), std::move(types));
    stamp(n);
    return n;
  }

  /// Source location recorded on the nodes created from now on.
  program_builder& at(source_location loc) {
    source_ = std::make_shared<const source_location>(std::move(loc));
    return *this;
  }
  /// Only the code text (`a = torch.sin(x)`) for the nodes created from now on.
  program_builder& code(std::string text) { return at(source_location{{}, 0, {}, std::move(text)}); }
  /// Module path (FQN of the calling module) recorded on the nodes created from now on.
  program_builder& in_module(std::string path) {
    module_ = std::move(path);
    return *this;
  }

  /// The nodes created from now on take `origin`'s source location, module path and custom
  /// metadata (a copy each), as torch keeps a node's meta on the nodes lowering makes from it.
  program_builder& like(node origin) {
    source_ = origin.source();
    module_ = origin.module_path();
    custom_ = origin.impl()->custom ? std::shared_ptr<const detail::custom_meta_box>(origin.impl()->custom->clone())
                                    : nullptr;
    return *this;
  }

  /// Source location for the nodes created from now on (shared, no copy).
  program_builder& at(std::shared_ptr<const source_location> loc) {
    source_ = std::move(loc);
    return *this;
  }

  /// Adds a user output.
  program_builder& output(value v) { return output(v, output_kind::user_output); }
  program_builder& output(const node& n) { return output(n.out()); }
  /// Adds an output of the given kind; `target` names the mutated buffer/parameter/input.
  program_builder& output(value v, output_kind kind, std::optional<std::string> target = std::nullopt) {
    check_owned(v, nullptr);
    outputs_.emplace_back(v);
    output_specs_.push_back(output_spec{kind, argument_spec::tensor(v.name()), std::move(target)});
    return *this;
  }
  /// Adds an output that is a graph value or a constant (`None` where the traced code returned
  /// an undefined tensor; a constant output of a loaded program): a constant is returned by the
  /// output node itself, its spec a ConstantArgument with no name, as torch.export records it.
  program_builder& output_arg(const argument& a, output_kind kind, std::optional<std::string> target = std::nullopt) {
    if (a.is_value()) return output(a.as_value(), kind, std::move(target));
    outputs_.push_back(a);
    output_specs_.push_back(output_spec{kind, argument_spec::constant_value("", a), std::move(target)});
    return *this;
  }

  [[nodiscard]] graph& graph_ref() noexcept { return graph_; }

  /// Finishes: lifted inputs are ordered before user inputs and mutation outputs before user
  /// outputs (torch.export's order), then the program is verified. The builder is left empty.
  [[nodiscard]] exported_program build(ir_dialect dialect = ir_dialect::training) && {
    return std::move(*this).build(dialect, verify_options{});
  }
  /// As build(); `checks` says which of verify()'s checks run (a tracer that bound every call
  /// from the dispatcher's own stack can skip the schema checks).
  [[nodiscard]] exported_program build(ir_dialect dialect, const verify_options& checks) && {
    // placeholders: stable by kind rank
    auto phs = graph_.placeholders();
    std::vector<std::size_t> order(phs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return detail::input_rank(input_specs_[a].kind) < detail::input_rank(input_specs_[b].kind);
    });
    graph_signature sig;
    const node first_non_ph = phs.empty() ? graph_.first() : phs.back().next();
    for (auto i : order) {
      sig.input_specs.push_back(input_specs_[i]);
      graph_.move_before(phs[i], first_non_ph);  // a null position appends
    }
    // outputs: tokens, mutations, then the rest, each group in the order given
    std::vector<std::size_t> out_order(outputs_.size());
    for (std::size_t i = 0; i < out_order.size(); ++i) out_order[i] = i;
    const auto out_rank = [&](std::size_t i) {
      switch (output_specs_[i].kind) {
        case output_kind::token: return 0;
        case output_kind::buffer_mutation:
        case output_kind::parameter_mutation:
        case output_kind::user_input_mutation: return 1;
        default: return 2;
      }
    };
    std::stable_sort(out_order.begin(), out_order.end(),
                     [&](std::size_t a, std::size_t b) { return out_rank(a) < out_rank(b); });
    std::vector<argument> results;
    for (auto i : out_order) {
      results.emplace_back(outputs_[i]);
      sig.output_specs.push_back(output_specs_[i]);
    }
    graph_.set_output(std::move(results));
    exported_program p(std::move(graph_), std::move(sig), std::move(state_dict_),
                       std::move(constants_), {}, dialect);
    if (has_all_examples_ && !examples_.empty()) p.set_example_inputs(std::move(examples_));
    verify(p, checks);
    *this = program_builder();
    return p;
  }

 private:
  void check_owned(const argument& a, const op_info* op) {
    a.for_each_value([&](const value& v) {
      if (v && v.producer().impl()->owner != &graph_)
        throw graph_error("xport.builder.foreign_value",
                          "value '" + v.name() + "' belongs to another graph" +
                              (op ? " (argument of " + op->qualified + ")" : std::string()) +
                              "; use values made by this builder");
    });
  }

  value add_input(input_spec spec, tensor_meta meta, bool exact_name) {
    value v = exact_name ? graph_.add_placeholder(spec.arg.name, value_type::of(std::move(meta)))
                         : graph_.add_placeholder_fresh(spec.arg.name, value_type::of(std::move(meta)));
    spec.arg.name = v.name();
    input_specs_.push_back(std::move(spec));
    return v;
  }

  value add_lifted(input_kind k, const std::string& fqn, const at::Tensor& t,
                   std::optional<bool> persistent) {
    input_spec spec{k, argument_spec::tensor(detail::lifted_name(k, fqn)), fqn, persistent};
    return add_input(std::move(spec), tensor_meta::of(t), false);
  }

  xport::graph graph_;
  std::vector<input_spec> input_specs_;  // in placeholder creation order
  std::vector<argument> outputs_;
  std::vector<output_spec> output_specs_;
  tensor_dict state_dict_;
  tensor_dict constants_;
  std::vector<at::Tensor> examples_;
  bool has_all_examples_ = true;
  void stamp(node n) const {
    n.set_source(source_);
    n.set_module_path(module_);
    if (custom_) n.impl()->custom = custom_->clone();
  }

  std::shared_ptr<const source_location> source_;
  std::string module_;
  std::shared_ptr<const detail::custom_meta_box> custom_;  // set by like()
};

XPORT_END_NAMESPACE
// #include <xport/program/print.hpp>
// xport/program/print.hpp: programs as torch.export prints them, and graphs as Graphviz DOT.
// print_style::torch_export is `print(ep)` of current torch (torch.fx's verbose codegen:
// annotated forward, `;  x = None` last-use lists, `# File: ... in forward, code: ...`
// summaries, the compact `# inputs` / `# outputs` signature); print_style::seed is the layout of
// the seed document (`# code: ...` comments, the pretty-printed ExportGraphSignature repr).
// Both are byte-exact contracts tested against golden files.

#include <algorithm>      // std::find, std::all_of, std::none_of
#include <cstddef>        // std::size_t
#include <functional>     // std::function
#include <optional>       // std::optional
#include <ostream>        // std::ostream
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

// #include <xport/ops/higher_order.hpp>
// #include <xport/config.hpp>
// #include <xport/detail/python_repr.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/signature.hpp>
// #include <xport/ir/sym_expr.hpp>
// #include <xport/ir/unbacked.hpp>

XPORT_BEGIN_NAMESPACE

enum class print_style : std::uint8_t {
  torch_export,  ///< `print(ep)` of torch 2.13 (compared by the oracle_print_diff test)
  seed,          ///< the layout of the seed document (torch 2.2-2.4 era signature repr)
};

struct print_options {
  print_style style = print_style::torch_export;
  bool include_stride = false;  ///< FX_GRAPH_SHOW_STRIDE=1
  bool include_device = false;  ///< FX_GRAPH_SHOW_DEVICE=1
};

namespace detail {

/// Names that stand for symbolic sizes in the printed code (`2*s77` -> `mul`; see
/// size_nodes below); empty: sizes print as expressions.
using sym_names = std::unordered_map<std::string, std::string>;

/// Python repr of an argument, as torch.fx's `_get_repr` writes it.
inline std::string arg_repr(const argument& a, const sym_names& syms = {}) {
  switch (a.type()) {
    case argument::kind::none: return "None";
    case argument::kind::boolean: return a.as_bool() ? "True" : "False";
    case argument::kind::integer: return std::to_string(a.as_int());
    case argument::kind::floating: return python_float_repr(a.as_double());
    case argument::kind::string: return python_str_repr(a.as_string());
    case argument::kind::dtype: return python_repr(a.as_dtype());
    case argument::kind::device: return python_repr(a.as_device());
    case argument::kind::layout: return python_repr(a.as_layout());
    case argument::kind::memory_format: return python_repr(a.as_memory_format());
    case argument::kind::value: return a.as_value().name();
    case argument::kind::graph: return a.as_graph()->name;
    case argument::kind::symbolic: {
      const auto text = a.as_sym().str();
      const auto it = syms.find(text);
      return it == syms.end() ? text : it->second;
    }
    case argument::kind::list: {
      std::string s = "[";
      bool first = true;
      for (const auto& e : a.as_list()) {
        if (!first) s += ", ";
        first = false;
        s += arg_repr(e, syms);
      }
      return s + "]";
    }
  }
  return "?";
}

/// `x, 1, alpha = 2`: positional arguments up to the last one that differs from its default,
/// keyword-only arguments that differ from their defaults (as the dispatcher hands them to
/// Python).
inline std::string call_args_repr(const op_info& op, std::span<const argument> args, const sym_names& syms = {}) {
  const auto& params = op.schema().arguments();
  const auto is_default = [&](std::size_t i) {
    return params[i].default_value() && default_argument(params[i]) == args[i];
  };
  std::size_t last_pos = 0;  // one past the last positional argument to print
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!params[i].kwarg_only() && !is_default(i)) last_pos = i + 1;
  std::string s;
  for (std::size_t i = 0; i < last_pos; ++i) {
    if (!s.empty()) s += ", ";
    s += arg_repr(args[i], syms);
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].kwarg_only() || is_default(i)) continue;
    if (!s.empty()) s += ", ";
    s += params[i].name() + " = " + arg_repr(args[i], syms);
  }
  return s;
}

/// The arguments of a control-flow call whose operands are a tuple (`(x, w)`, `(x,)`), as torch
/// prints a program it traced (a loaded one holds a list: call_args_repr prints that). Lists
/// before argument `tuple_from` stay lists (torch.scan's init and xs).
inline std::string tuple_operands_repr(std::span<const argument> args, const sym_names& syms = {},
                                       std::size_t tuple_from = 0) {
  std::string s;
  for (std::size_t k = 0; k < args.size(); ++k) {
    const auto& a = args[k];
    if (!s.empty()) s += ", ";
    if (!a.is_list() || k < tuple_from) {
      s += arg_repr(a, syms);
      continue;
    }
    s += '(';
    for (std::size_t i = 0; i < a.as_list().size(); ++i) s += (i ? ", " : "") + arg_repr(a.as_list()[i], syms);
    s += a.as_list().size() == 1 ? ",)" : ")";
  }
  return s;
}

/// The arguments of a higher-order call whose operands torch passes spread (`False, submod_1,
/// x, w`): the last list's elements as arguments of their own.
inline std::string spread_operands_repr(std::span<const argument> args, const sym_names& syms = {}) {
  std::string s;
  for (std::size_t k = 0; k < args.size(); ++k) {
    if (k + 1 == args.size() && args[k].is_list()) {
      for (const auto& e : args[k].as_list()) s += (s.empty() ? "" : ", ") + arg_repr(e, syms);
      continue;
    }
    s += (s.empty() ? "" : ", ") + arg_repr(args[k], syms);
  }
  return s;
}

inline std::string value_annotation(const value& v, const print_options& o) {
  const auto& t = v.type();
  switch (t.kind) {
    case value_kind::tensor: {
      std::string s = t.tensor.annotation();
      if (o.include_stride) {
        s += '[';
        for (std::size_t i = 0; i < t.tensor.strides.size(); ++i)
          s += (i ? ", " : "") + t.tensor.strides[i].str();
        s += ']';
      }
      if (o.include_device) s += t.tensor.device.str();
      return s;
    }
    case value_kind::sym_int: return "Sym(" + t.scalar.str() + ")";
    default: return {};
  }
}

// One line of torch.fx code: a graph node, or one `getitem` of a multi-output node.
struct fx_line {
  enum class kind : std::uint8_t { placeholder, call, getitem, output } type;
  std::string name;
  std::string annotation;
  std::string rhs;
  std::vector<std::string> inputs;  // names read, in first-appearance order
  std::size_t num_users = 0;
  const source_location* source = nullptr;
};

// Note [Sizes as torch prints them]: a size argument that depends on a dynamic dim is an
// expression in xport's IR (`zeros([2*s77])`); torch's graph computes it with nodes, and so does
// the print: a `sym_size.int` read of the input dim after the placeholders for each symbol, then
// `_operator` nodes (`mul: "Sym(2*s77)" = sym_size_int_1 * 2`) before the first call that uses
// each linear form. The reads are numbered from the number of symbols on (torch's tracing reads
// each once and its final pass makes them again), other nodes take the next free FX name. A
// form that is not linear in one symbol, or a symbol no input dim gives alone, prints inline.
struct size_nodes {
  struct line {
    std::string name, annotation, rhs;
    std::vector<std::string> inputs;
  };
  std::vector<line> reads;                                   // after the placeholders
  std::unordered_map<const node_impl*, std::vector<line>> before;  // before a call
  std::unordered_map<const node_impl*, std::vector<line>> after;   // after a call: its unbacked symbols' reads and asserts
  sym_names names;                                           // expression text -> name
};

inline void walk_sizes(const argument& a, const std::function<void(const sym_int&)>& f) {
  if (a.is_symbolic()) f(a.as_sym());
  else if (a.is_list())
    for (const auto& e : a.as_list()) walk_sizes(e, f);
}

/// Plans a graph's size nodes (Note [Sizes as torch prints them]): the `sym_size.int` reads of
/// input dims, then the nodes of each linear form and of each product of input dims.
class size_planner {
 public:
  explicit size_planner(const graph& g) : g_(g) {}

  /// The size nodes of the graph.
  size_nodes plan() {
    collect_uses();
    take_graph_names();
    plan_unbacked();
    if (uses_.empty()) return std::move(out_);
    collect_dim_symbols();
    plan_reads(used_symbols());
    for (const auto& [n, e] : uses_) {
      if (out_.names.count(e.str())) continue;
      if (const auto lin = sym::as_linear(e)) plan_linear(n, e, *lin);
      else plan_product(n, e);
    }
    return std::move(out_);
  }

 private:
  /// Records each size expression the calls pass, with its first user, in node order.
  void collect_uses() {
    std::unordered_set<std::string> seen;
    for (auto n : g_.nodes())
      if (n.is_call())
        for (const auto& a : n.args())
          walk_sizes(a, [&](const sym_int& e) {
            if (seen.insert(e.str()).second) uses_.push_back({n, e});
          });
  }

  /// Marks every node and value name of the graph as taken.
  void take_graph_names() {
    for (auto n : g_.nodes()) {
      taken_.insert(n.name());
      for (auto v : n.outputs()) taken_.insert(v.name());
    }
  }

  /// `base`, or `base_<i>` for the first free i, marked taken.
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; taken_.count(name); ++i) name = base + "_" + std::to_string(i);
    taken_.insert(name);
    return name;
  }

  /// Plans, after the call that first gives each unbacked symbol (a nonzero's `u0` rows, an
  /// item()), its `sym_size.int` read and the `_assert_scalar` nodes of its range, as torch
  /// prints them (Note [Runtime assertions as ranges] in serde/program_json.hpp).
  void plan_unbacked() {
    std::unordered_set<std::string> seen;
    for (auto n : g_.nodes()) {
      if (!n.is_call()) continue;
      for_each_unbacked_given(n, seen, [&](const value& v, std::int64_t dim, const std::string& symbol, const sym_int& e) {
        auto& lines = out_.after[n.impl()];
        std::string src = v.name();
        if (dim >= 0) {
          src = fresh("sym_size_int");
          lines.push_back({src, "Sym(" + symbol + ")",
                           "torch.ops.aten.sym_size.int(" + v.name() + ", " + std::to_string(dim) + ")", {v.name()}});
        }
        out_.names.emplace(symbol, src);
        symbol_of_.emplace(symbol, e);
        const auto r = sym::range(e);
        const auto assert_bound = [&](const char* base, const char* op, std::int64_t k) {
          // an item()'s bounds come from torch._check calls, whose own comparison nodes torch's
          // trace made and removed first: its assertion nodes take the next names (`ge_1`)
          if (dim < 0) (void)fresh(base);
          const auto name = fresh(base);
          const auto expr = symbol + " " + op + " " + std::to_string(k);
          lines.push_back({name, "Sym(" + expr + ")", src + " " + op + " " + std::to_string(k), {src}});
          lines.push_back({fresh("_assert_scalar_default"), "",
                           "torch.ops.aten._assert_scalar.default(" + name + ", \"Runtime assertion failed for expression " +
                               expr + " on node '" + name + "'\")",
                           {name}});
        };
        if (r.lo > -int_oo) assert_bound("ge", ">=", r.lo);
        if (r.hi < int_oo) assert_bound("le", "<=", r.hi);
      });
    }
  }

  /// Records the symbols input dims give alone, in placeholder order.
  void collect_dim_symbols() {
    for (auto ph : g_.placeholders())
      if (ph.output(0).kind() == value_kind::tensor)
        for (const auto& d : ph.output(0).meta().sizes)
          if (d.is_symbolic() && sym::as_linear(d) && sym::as_linear(d)->a == 1 && sym::as_linear(d)->b == 0 &&
              std::none_of(dim_symbols_.begin(), dim_symbols_.end(), [&](const auto& p) { return p.first == d.str(); }))
            dim_symbols_.push_back({d.str(), d});
  }

  /// A product of input dims (`s27*s77`, a flattened batch; `s77**2`, attention scores): its
  /// factors in placeholder order, a symbol repeated for its power (up to the fourth).
  std::optional<std::vector<std::string>> product_of(const sym_int& e) const {
    const auto fs = sym::free_symbols(e);
    std::vector<std::pair<std::string, sym_int>> syms;
    for (const auto& [text, sym] : dim_symbols_)
      if (std::find(fs.begin(), fs.end(), text) != fs.end()) syms.push_back({text, sym});
    if (fs.empty() || syms.size() != fs.size() || syms.size() > 3) return std::nullopt;
    const auto target = e.str();
    std::vector<int> power(syms.size(), 1);
    for (;;) {  // every power from 1 to 4 for each symbol, the lowest first
      std::vector<std::string> factors;
      std::optional<sym_int> prod;
      for (std::size_t i = 0; i < syms.size(); ++i)
        for (int k = 0; k < power[i]; ++k) {
          factors.push_back(syms[i].first);
          prod = prod ? *prod * syms[i].second : syms[i].second;
        }
      if (factors.size() >= 2 && prod->str() == target) return factors;
      std::size_t i = 0;
      while (i < power.size() && power[i] == 4) power[i++] = 1;
      if (i == power.size()) return std::nullopt;
      ++power[i];
    }
  }

  /// The symbols the linear forms and products use, in first-use order.
  std::vector<std::string> used_symbols() const {
    std::vector<std::string> symbols;
    const auto use_symbol = [&](const std::string& sym) {
      if (std::find(symbols.begin(), symbols.end(), sym) == symbols.end()) symbols.push_back(sym);
    };
    for (const auto& [n, e] : uses_) {
      if (auto lin = sym::as_linear(e)) use_symbol(lin->symbol);
      else if (auto factors = product_of(e))
        for (const auto& f : *factors) use_symbol(f);
    }
    return symbols;
  }

  /// Plans a `sym_size.int` read, after the placeholders, of the first input dim that gives each of `symbols`.
  void plan_reads(const std::vector<std::string>& symbols) {
    std::size_t next = symbols.size();
    for (auto ph : g_.placeholders()) {
      const auto v = ph.output(0);
      if (v.kind() != value_kind::tensor) continue;
      const auto& sizes = v.meta().sizes;
      for (std::size_t d = 0; d < sizes.size(); ++d) {
        const auto text = sizes[d].str();
        if (!sizes[d].is_symbolic() || out_.names.count(text) ||
            std::find(symbols.begin(), symbols.end(), text) == symbols.end())
          continue;
        const auto name = fresh("sym_size_int_" + std::to_string(next++));
        out_.reads.push_back({name, "Sym(" + text + ")", "torch.ops.aten.sym_size.int(" + v.name() + ", " + std::to_string(d) + ")", {v.name()}});
        out_.names.emplace(text, name);
        symbol_of_.emplace(text, sizes[d]);
      }
    }
  }

  /// Plans the `mul` nodes of product `e` before its first user `n`, when each factor has a read.
  void plan_product(node n, const sym_int& e) {
    const auto factors = product_of(e);
    if (!factors || !std::all_of(factors->begin(), factors->end(), [&](const auto& f) { return out_.names.count(f); }))
      return;
    std::string cur = out_.names.at((*factors)[0]);
    sym_int expr = symbol_of_.at((*factors)[0]);
    auto& lines = out_.before[n.impl()];
    for (std::size_t i = 1; i < factors->size(); ++i) {
      const auto name = fresh("mul");
      expr = expr * symbol_of_.at((*factors)[i]);
      lines.push_back({name, "Sym(" + expr.str() + ")", cur + " * " + out_.names.at((*factors)[i]),
                       {cur, out_.names.at((*factors)[i])}});
      cur = name;
    }
    out_.names.emplace(e.str(), cur);
  }

  /// Plans the `mul` / `add` / `sub` nodes of linear form `e` before its first user `n`, when its symbol has a read.
  void plan_linear(node n, const sym_int& e, const sym::linear_form& lin) {
    if (!out_.names.count(lin.symbol)) return;
    std::string cur = out_.names.at(lin.symbol);
    sym_int expr = symbol_of_.at(lin.symbol);
    auto& lines = out_.before[n.impl()];
    const auto step = [&](const char* base, const char* op, std::int64_t k, const sym_int& result) {
      const auto name = fresh(base);
      lines.push_back({name, "Sym(" + result.str() + ")", cur + " " + op + " " + std::to_string(k), {cur}});
      cur = name;
      expr = result;
    };
    if (lin.a != 1) step("mul", "*", lin.a, expr * lin.a);
    if (lin.b > 0) step("add", "+", lin.b, expr + lin.b);
    if (lin.b < 0) step("sub", "-", -lin.b, expr - (-lin.b));
    out_.names.emplace(e.str(), cur);
  }

  const graph& g_;
  size_nodes out_;
  std::vector<std::pair<node, sym_int>> uses_;  // (first user, expression), in node order
  std::unordered_set<std::string> taken_;
  std::vector<std::pair<std::string, sym_int>> dim_symbols_;
  std::unordered_map<std::string, sym_int> symbol_of_;
};

inline size_nodes plan_size_nodes(const graph& g) { return size_planner(g).plan(); }

/// What graph `g` returns, as torch prints it: a tuple (`(add,)`), bare (`lt`: a while_loop's
/// cond graph) or a list (`[add, clone]`: a scan's combine graph).
inline std::string returned_repr(const graph& g, std::span<const argument> args) {
  if (g.returns_bare() && args.size() == 1) return arg_repr(args[0]);
  std::string r;
  for (std::size_t i = 0; i < args.size(); ++i) r += (i ? ", " : "") + arg_repr(args[i]);
  if (g.returns_list()) return "[" + r + "]";
  return "(" + r + (args.size() == 1 ? ",)" : ")");
}

inline std::vector<fx_line> fx_lines(const graph& g, const print_options& o) {
  std::vector<fx_line> lines;
  std::unordered_map<std::string, std::size_t> users;  // name -> number of fx users
  const auto sizes = plan_size_nodes(g);
  // the names a node reads, in the order its arguments name them (torch.fx's order)
  const auto inputs_of = [&](const node& n) {
    std::vector<std::string> names;
    std::unordered_set<std::string> seen;
    const std::function<void(const argument&)> visit = [&](const argument& a) {
      if (a.is_value()) {
        if (seen.insert(a.as_value().name()).second) names.push_back(a.as_value().name());
      } else if (a.is_symbolic()) {
        if (auto it = sizes.names.find(a.as_sym().str()); it != sizes.names.end() && seen.insert(it->second).second)
          names.push_back(it->second);
      } else if (a.is_list()) {
        for (const auto& e : a.as_list()) visit(e);
      } else if (a.is_graph()) {
        if (seen.insert(a.as_graph()->name).second) names.push_back(a.as_graph()->name);
      }
    };
    for (const auto& a : n.args()) visit(a);
    return names;
  };
  bool reads_done = sizes.reads.empty();
  for (auto n : g.nodes()) {
    if (!reads_done && !n.is_placeholder()) {
      for (const auto& r : sizes.reads)
        lines.push_back({fx_line::kind::call, r.name, r.annotation, r.rhs, r.inputs, 0, nullptr});
      reads_done = true;
    }
    if (auto it = sizes.before.find(n.impl()); it != sizes.before.end())
      for (const auto& r : it->second)
        lines.push_back({fx_line::kind::call, r.name, r.annotation, r.rhs, r.inputs, 0, n.source().get()});
    switch (n.kind()) {
      case node_kind::placeholder:
        lines.push_back({fx_line::kind::placeholder, n.name(), value_annotation(n.output(0), o), {}, {}, 0, nullptr});
        break;
      case node_kind::call_function: {
        const auto* src = n.source().get();
        fx_line l{fx_line::kind::call, n.name(), {}, {}, inputs_of(n), 0, src};
        if (n.op().higher_order) {
          // `true_graph_0 = self.true_graph_0` before the call
          for_each_subgraph(n, [&](const subgraph& s) {
            lines.push_back({fx_line::kind::call, s.name, {}, "self." + s.name, {}, 0, src});
          });
        }
        const auto* hop = hop_of(n.op());
        l.rhs = n.op().target + "(" +
                (hop && hop->spread_last ? spread_operands_repr(n.args(), sizes.names)
                 : n.has_tuple_operands()
                     ? tuple_operands_repr(n.args(), sizes.names, hop && hop->which == higher_order_op::id::scan ? 3 : 0)
                     : call_args_repr(n.op(), n.args(), sizes.names)) +
                ")";
        if (!n.has_tuple_output()) l.annotation = value_annotation(n.output(0), o);
        lines.push_back(std::move(l));
        if (n.has_tuple_output())
          for (std::size_t i = 0; i < n.num_outputs(); ++i) {
            auto v = n.output(i);
            if (v.num_uses() == 0 && !v.unpacked()) continue;
            lines.push_back({fx_line::kind::getitem, v.name(), value_annotation(v, o),
                             n.name() + "[" + std::to_string(i) + "]", {n.name()}, 0, src});
          }
        if (auto it = sizes.after.find(n.impl()); it != sizes.after.end())
          for (const auto& r : it->second) lines.push_back({fx_line::kind::call, r.name, r.annotation, r.rhs, r.inputs, 0, src});
        break;
      }
      case node_kind::output:
        lines.push_back({fx_line::kind::output, "output", {}, "return " + returned_repr(g, n.args()), inputs_of(n), 0, nullptr});
        break;
    }
  }
  for (const auto& l : lines)
    for (const auto& in : l.inputs) ++users[in];
  for (auto& l : lines) l.num_users = users[l.name];
  return lines;
}

inline std::string summary_of(const source_location* s) {
  if (s && !s->annotation.empty()) {  // torch.fx: `# Annotation: {...} File: ...`
    source_location bare = *s;
    bare.annotation.clear();
    return "Annotation: " + s->annotation + " " + summary_of(&bare);
  }
  if (!s || (s->file.empty() && s->code.empty())) return "No stacktrace found for following nodes";
  if (s->file.empty()) return "File: <unknown>:" + std::to_string(s->line) + " in " +
                              (s->function.empty() ? "forward" : s->function) + ", code: " + s->code;
  return "File: " + s->file + ":" + std::to_string(s->line) + " in " +
         (s->function.empty() ? "forward" : s->function) + ", code: " + s->code;
}

inline std::string indent_lines(std::string_view text, std::string_view pad, bool first_too = false) {
  // torch.fx's `_addindent`: every non-empty line but the first gets `pad`.
  std::string out;
  std::size_t start = 0;
  bool first = !first_too;
  while (true) {
    const auto nl = text.find('\n', start);
    const auto line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (!first && !line.empty()) out += pad;
    out += line;
    first = false;
    if (nl == std::string_view::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return out;
}

inline std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

/// `class GraphModule(torch.nn.Module):\n    def forward(...):\n        ...` (torch.fx
/// `print_readable`, verbose).
inline std::string graph_module_code(const graph& g, const print_options& o,
                                     std::string_view class_name = "GraphModule") {
  const auto lines = fx_lines(g, o);
  const bool seed = o.style == print_style::seed;
  // last uses, scanning backwards (torch.fx `register_last_uses`)
  std::unordered_map<std::string, std::size_t> last_use;
  std::vector<std::vector<std::string>> to_delete(lines.size());
  for (std::size_t i = lines.size(); i-- > 0;)
    for (const auto& in : lines[i].inputs)
      if (last_use.emplace(in, i).second) to_delete[i].push_back(in);

  std::vector<std::string> free_vars{"self"};
  std::string body;
  std::string prev_summary;
  bool have_prev = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    const std::string ann = l.annotation.empty() ? "" : ": \"" + l.annotation + "\"";
    if (l.type == fx_line::kind::placeholder) {
      free_vars.push_back(l.name + ann);
      continue;
    }
    if (l.type != fx_line::kind::output) {
      if (seed) {
        const std::string code = l.source ? l.source->code : std::string();
        if (!code.empty() && (!have_prev || code != prev_summary)) {
          body += "\n# code: " + code + "\n";
          prev_summary = code;
          have_prev = true;
        }
      } else {
        const std::string summary = "\n# " + summary_of(l.source) + "\n";
        if (!have_prev || summary != prev_summary) {
          body += summary;
          prev_summary = summary;
          have_prev = true;
        }
      }
    }
    if (l.type == fx_line::kind::output) {
      body += l.rhs + "\n";
      continue;
    }
    body += l.name + ann + " = " + l.rhs;
    auto dels = to_delete[i];
    if (l.num_users == 0) dels.push_back(l.name);
    if (!seed && !dels.empty()) {
      body += ";  ";
      for (const auto& d : dels) body += d + " = ";
      body += "None";
    }
    body += "\n";
  }
  // lstrip("\n"), then indent every non-empty line by 4
  std::size_t k = 0;
  while (k < body.size() && body[k] == '\n') ++k;
  std::string code = indent_lines(std::string_view(body).substr(k), "    ", /*first_too=*/true);
  std::string params;
  for (std::size_t i = 0; i < free_vars.size(); ++i) params += (i ? ", " : "") + free_vars[i];
  std::string module = "class " + std::string(class_name) + "(torch.nn.Module):\ndef forward(" + params + "):\n" + code;
  auto text = indent_lines(module, "    ");
  // the subgraphs, as nested classes after forward (torch.fx prints submodules so)
  for (auto n : g.nodes())
    if (n.is_call() && n.op().higher_order)
      for_each_subgraph(n, [&](const subgraph& s) {
        text += "\n" + indent_lines(graph_module_code(s.body, o, s.name), "    ", /*first_too=*/true);
      });
  return text;
}

inline std::string spec_arg_repr(const argument_spec& a) {
  switch (a.type) {
    case argument_spec::kind::tensor: return "TensorArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_int: return "SymIntArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_float: return "SymFloatArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_bool: return "SymBoolArgument(name='" + a.name + "')";
    case argument_spec::kind::constant:
      return "ConstantArgument(name='" + a.name + "', value=" + arg_repr(a.constant) + ")";
    case argument_spec::kind::custom_obj:
      return "CustomObjArgument(name='" + a.name + "', class_fqn='" + a.class_fqn + "', fake_val=None)";
    case argument_spec::kind::token: return "TokenArgument(name='" + a.name + "')";
  }
  return "?";
}

inline std::string opt_str_repr(const std::optional<std::string>& s) {
  return s ? python_str_repr(*s) : "None";
}

/// The seed document's pretty-printed `ExportGraphSignature(...)`, indented by `pad`.
inline std::string seed_signature(const graph_signature& sig, const std::string& pad) {
  std::string s = pad + "ExportGraphSignature(\n" + pad + "    input_specs=[";
  const auto spec_block = [&](const std::vector<std::string>& fields, bool last) {
    std::string b = "\n" + pad + "        " + fields[0] + "(\n";
    for (std::size_t i = 1; i < fields.size(); ++i)
      b += pad + "            " + fields[i] + (i + 1 < fields.size() ? ",\n" : "\n");
    b += pad + "        )" + (last ? "" : ",");
    return b;
  };
  for (std::size_t i = 0; i < sig.input_specs.size(); ++i) {
    const auto& in = sig.input_specs[i];
    s += spec_block({"InputSpec",
                     "kind=<InputKind." + std::string(to_string(in.kind)) + ": " +
                         std::to_string(static_cast<int>(in.kind)) + ">",
                     "arg=" + spec_arg_repr(in.arg), "target=" + opt_str_repr(in.target),
                     std::string("persistent=") + (in.persistent ? (*in.persistent ? "True" : "False") : "None")},
                    i + 1 == sig.input_specs.size());
  }
  s += (sig.input_specs.empty() ? "" : "\n" + pad + "    ") + "],\n" + pad + "    output_specs=[";
  for (std::size_t i = 0; i < sig.output_specs.size(); ++i) {
    const auto& out = sig.output_specs[i];
    s += spec_block({"OutputSpec",
                     "kind=<OutputKind." + std::string(to_string(out.kind)) + ": " +
                         std::to_string(static_cast<int>(out.kind)) + ">",
                     "arg=" + spec_arg_repr(out.arg), "target=" + opt_str_repr(out.target)},
                    i + 1 == sig.output_specs.size());
  }
  s += (sig.output_specs.empty() ? "" : "\n" + pad + "    ") + "]\n" + pad + ")";
  return s;
}

/// Drops trailing spaces on every line (the seed document's layout has none).
inline std::string rstrip_lines(const std::string& s) {
  std::string out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto nl = s.find('\n', start);
    if (nl == std::string::npos) nl = s.size();
    auto end = nl;
    while (end > start && s[end - 1] == ' ') --end;
    out.append(s, start, end - start);
    if (nl < s.size()) out += '\n';
    start = nl + 1;
  }
  return out;
}

inline std::string range_constraints_repr(const std::vector<range_constraint>& rc) {
  std::string s = "{";
  for (std::size_t i = 0; i < rc.size(); ++i) s += (i ? ", " : "") + rc[i].str();
  return s + "}";
}

}  // namespace detail

/// The graph as torch.fx's `print_readable` writes a GraphModule.
inline std::string to_string(const graph& g, const print_options& o = {}) {
  auto s = detail::graph_module_code(g, o);
  return o.style == print_style::seed ? detail::rstrip_lines(s) : s;
}

/// The program as `print(ep)` writes it (or in the seed document's layout).
inline std::string to_string(const exported_program& p, const print_options& o = {}) {
  const auto gm = detail::graph_module_code(p.graph(), o);
  if (o.style == print_style::seed) {
    return detail::rstrip_lines(
        "ExportedProgram:\n    " + detail::replace_all(gm, "\n", "\n    ") + "\n    Graph signature:\n" +
        detail::seed_signature(p.signature(), "        ") + "\n    Range constraints: " +
        detail::range_constraints_repr(p.range_constraints()) + "\n");
  }
  return "ExportedProgram:\n    " + detail::replace_all(gm, "\n", "\n    ") + "\nGraph signature: " +
         detail::replace_all(p.signature().str(), "\n", "\n    ") + "\nRange constraints: " +
         detail::range_constraints_repr(p.range_constraints()) + "\n";
}

inline std::ostream& operator<<(std::ostream& os, const exported_program& p) { return os << to_string(p); }
inline std::ostream& operator<<(std::ostream& os, const graph& g) { return os << to_string(g); }

/// The graph in Graphviz DOT: one box per node labelled with its name, op and annotated type,
/// edges from producer to user (labelled with the output index of multi-output nodes).
inline std::string to_dot(const graph& g, std::string_view name = "GraphModule") {
  const auto q = [](const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o + "\"";
  };
  print_options o;
  std::string s = "digraph " + q(std::string(name)) + " {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (auto n : g.nodes()) {
    std::string label = n.name() + "\\n";
    std::string shape;
    if (n.is_placeholder()) {
      label += "placeholder\\n" + detail::value_annotation(n.output(0), o);
      shape = ", shape=ellipse";
    } else if (n.is_output()) {
      label = "output";
      shape = ", shape=ellipse";
    } else {
      label += n.op().target.substr(10);  // drop "torch.ops."
      for (auto v : n.outputs()) {
        const auto a = detail::value_annotation(v, o);
        if (!a.empty()) label += "\\n" + (n.has_tuple_output() ? v.name() + ": " : std::string()) + a;
      }
    }
    s += "  " + q(n.name()) + " [label=\"" + detail::replace_all(label, "\"", "\\\"") + "\"" + shape + "];\n";
  }
  for (auto n : g.nodes())
    for (std::size_t i = 0; i < n.num_inputs(); ++i) {
      auto v = n.input(i);
      auto p = v.producer();
      s += "  " + q(p.name()) + " -> " + q(n.name());
      if (p.has_tuple_output()) s += " [label=\"[" + std::to_string(v.index()) + "]\"]";
      s += ";\n";
    }
  return s + "}\n";
}

XPORT_END_NAMESPACE

// capture: export_program
// #include <xport/trace/tree.hpp>
// xport/trace/tree.hpp: the structure of C++ inputs and outputs (torch's pytree TreeSpec).
// A program's inputs may be tensors, std::vector / std::array / std::tuple / std::pair of them,
// std::map / c10::Dict from string keys, std::optional, aggregates registered with
// XPORT_DATACLASS (torch.export.register_dataclass), and nested combinations; C++ scalars
// (int64_t, int, double, float, bool) and strings are constants that export specializes, as
// torch does (the program still has a placeholder for each, as torch's has). `flatten` lists the
// tensor leaves and records a treespec; `unflatten` rebuilds a C++ value of the same type from a
// spec and leaves, or an xport::tree_value, which holds any structure (a loaded program's
// ModelOutput) and gives its fields by name. Any other type is a compile-time error naming it.

#include <algorithm>    // std::find
#include <array>        // std::array
#include <concepts>     // std::convertible_to
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <map>          // std::map
#include <optional>     // std::optional
#include <memory>       // std::shared_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <tuple>        // std::tuple
#include <type_traits>  // std::is_same_v
#include <utility>      // std::pair
#include <vector>       // std::vector

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/treespec.hpp>

XPORT_BEGIN_NAMESPACE

/// Specialized by XPORT_DATACLASS (below) for a C++ aggregate that is a pytree node, as
/// `torch.export.register_dataclass(T, serialized_type_name=...)` makes a Python dataclass one.
template <class T>
struct dataclass_traits;

/// Whether XPORT_DATACLASS registered T.
template <class T>
concept registered_dataclass = requires(const T& x) {
  { dataclass_traits<T>::type_name } -> std::convertible_to<std::string_view>;
  dataclass_traits<T>::fields(x);
};

/// A value of any program structure: a treespec with its tensors. What a program's result is in
/// C++ when it has a type C++ does not (a Hugging Face ModelOutput, a dataclass, a namedtuple):
///   xport::callable<xport::tree_value(at::Tensor, bool)> f(program);
///   at::Tensor logits = f(ids, false)["logits"].tensor();
/// A node gives its children by index, and by field name where the type has field names; a dict
/// by key. Copies share the tensors.
class tree_value {
 public:
  tree_value() : tree_value(treespec::of(treespec::kind::none), {}) {}
  /// `leaves` are the spec's tensor leaves, in order.
  tree_value(treespec spec, std::vector<at::Tensor> leaves)
      : root_(std::make_shared<const treespec>(std::move(spec))),
        leaves_(std::make_shared<const std::vector<at::Tensor>>(std::move(leaves))),
        at_(root_.get()) {
    if (root_->num_leaves() != leaves_->size())
      throw error("xport.tree.leaves", "the structure " + root_->str() + " has " + std::to_string(root_->num_leaves()) +
                                           " tensor leaves, but " + std::to_string(leaves_->size()) + " tensors were given");
  }

  [[nodiscard]] const treespec& spec() const noexcept { return *at_; }
  [[nodiscard]] treespec::kind kind() const noexcept { return at_->type; }
  /// torch's type name (`transformers.modeling_outputs.CausalLMOutputWithPast`), or the builtin's
  /// (`tuple`, `list`, `dict`, `None`); empty for a leaf.
  [[nodiscard]] std::string type_name() const { return at_->type_name.empty() ? at_->short_type_name() : at_->type_name; }
  /// The children's count (0 for a leaf).
  [[nodiscard]] std::size_t size() const noexcept { return at_->children.size(); }
  /// A dict's keys or a node's field names, in order (empty where it has none).
  [[nodiscard]] const std::vector<std::string>& keys() const noexcept { return at_->keys; }
  [[nodiscard]] bool contains(std::string_view key) const { return has_keys() && at_->child(key) != nullptr; }

  [[nodiscard]] tree_value operator[](std::size_t i) const {
    if (i >= size())
      throw error("xport.tree.index", "index " + std::to_string(i) + " is out of range for " + at_->str() + " (" +
                                          std::to_string(size()) + " children)");
    return child(i);
  }
  [[nodiscard]] tree_value operator[](std::string_view key) const {
    if (has_keys())
      for (std::size_t i = 0; i < at_->keys.size(); ++i)
        if (at_->keys[i] == key) return child(i);
    std::string have;
    if (has_keys())
      for (const auto& k : at_->keys) have += (have.empty() ? "'" : ", '") + k + "'";
    throw error("xport.tree.field", "no field '" + std::string(key) + "' in " + at_->str() +
                                        (have.empty() ? std::string(" (it has no field names: index it by position)")
                                                      : " (it has " + have + ")"));
  }

  [[nodiscard]] bool is_tensor() const noexcept { return at_->type == treespec::kind::leaf; }
  [[nodiscard]] bool is_none() const noexcept {
    return at_->type == treespec::kind::none || (at_->type == treespec::kind::constant && at_->value.is_none());
  }
  /// A tensor leaf's tensor.
  [[nodiscard]] const at::Tensor& tensor() const {
    if (!is_tensor()) throw error("xport.tree.not_a_tensor", at_->str() + " is not a tensor");
    return (*leaves_)[first_];
  }
  /// A constant leaf's value (a number, a string, None).
  [[nodiscard]] const argument& constant() const {
    if (at_->type != treespec::kind::constant) throw error("xport.tree.not_a_constant", at_->str() + " is not a constant");
    return at_->value;
  }
  /// The tensors under this value, in order.
  [[nodiscard]] std::vector<at::Tensor> leaves() const {
    const auto b = leaves_->begin() + static_cast<std::ptrdiff_t>(first_);
    return {b, b + static_cast<std::ptrdiff_t>(at_->num_leaves())};
  }
  [[nodiscard]] std::string str() const { return at_->str(); }

 private:
  [[nodiscard]] bool has_keys() const noexcept {
    return (at_->type == treespec::kind::dict || at_->type == treespec::kind::node) && at_->keys.size() == at_->children.size();
  }
  [[nodiscard]] tree_value child(std::size_t i) const {
    tree_value v = *this;
    for (std::size_t j = 0; j < i; ++j) v.first_ += at_->children[j].num_leaves();
    v.at_ = &at_->children[i];
    return v;
  }

  std::shared_ptr<const treespec> root_;
  std::shared_ptr<const std::vector<at::Tensor>> leaves_;
  const treespec* at_ = nullptr;
  std::size_t first_ = 0;
};

namespace detail {

template <class T>
inline constexpr bool dependent_false = false;

/// The field names XPORT_DATACLASS was given, from its stringized list (`logits, loss`).
inline std::vector<std::string> split_field_names(std::string_view list) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : list) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != ' ' && c != '\t' && c != '\n') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

/// torch's dataclass context, as json.dumps writes it: `[["a", "b"], ["c"]]` (fields that hold a
/// value, then fields that hold None).
inline std::string dataclass_context(const std::vector<std::string>& present, const std::vector<std::string>& absent) {
  const auto list = [](const std::vector<std::string>& xs) {
    std::string s = "[";
    for (std::size_t i = 0; i < xs.size(); ++i) s += (i ? ", \"" : "\"") + xs[i] + "\"";
    return s + "]";
  };
  return "[" + list(present) + ", " + list(absent) + "]";
}

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};
template <class T>
struct is_tuple_like : std::false_type {};
template <class... Ts>
struct is_tuple_like<std::tuple<Ts...>> : std::true_type {};
template <class A, class B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
#if !XPORT_TORCH_VERSION_AT_LEAST(2, 1)
template <class T>
struct is_optional<c10::optional<T>> : std::true_type {};  // a distinct type before 2.1
#endif
template <class T>
struct is_string_map : std::false_type {};
template <class V, class C, class A>
struct is_string_map<std::map<std::string, V, C, A>> : std::true_type {};
template <class T>
struct is_c10_dict : std::false_type {};
template <class V>
struct is_c10_dict<c10::Dict<std::string, V>> : std::true_type {};

template <class T>
inline constexpr bool is_scalar_leaf = std::is_same_v<T, bool> || std::is_integral_v<T> ||
                                       std::is_floating_point_v<T>;

/// at::Tensor, or a tensor type of a front end (xport::sym_tensor) that declares itself a leaf.
template <class T>
concept tensor_leaf = std::is_same_v<T, at::Tensor> || requires { typename T::xport_tensor_leaf; };

/// Whether T can be an input or output of an exported program (see flatten_into).
template <class T>
constexpr bool is_tree_type() {
  if constexpr (tensor_leaf<T> || is_scalar_leaf<T> || std::is_same_v<T, std::string>) return true;
  else if constexpr (is_optional<T>::value || is_vector<T>::value || is_std_array<T>::value)
    return is_tree_type<typename T::value_type>();
  else if constexpr (is_tuple_like<T>::value)
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (is_tree_type<std::tuple_element_t<I, T>>() && ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  else if constexpr (is_string_map<T>::value || is_c10_dict<T>::value)
    return is_tree_type<typename T::mapped_type>();
  else if constexpr (registered_dataclass<T>)
    return []<class... F>(std::type_identity<std::tuple<F...>>) {
      return (is_tree_type<std::remove_cvref_t<F>>() && ...);
    }(std::type_identity<decltype(dataclass_traits<T>::fields(std::declval<const T&>()))>{});
  else return false;
}

/// Whether a dataclass field holds None (an undefined tensor, an empty optional): torch leaves
/// such fields out of the children and names them in the context's second list.
template <class T>
bool is_none_field(const T& x) {
  if constexpr (std::is_same_v<T, at::Tensor>) return !x.defined();
  else if constexpr (is_optional<T>::value) return !x.has_value();
  else return false;
}

/// Visits a value's tensor leaves (in order) and returns its treespec.
template <class T, class F>
treespec flatten_into(const T& x, F& on_tensor) {
  if constexpr (tensor_leaf<T>) {
    // An undefined at::Tensor is C++'s None (MultiheadAttention's weights without need_weights):
    // torch.export returns None there, and so does the program.
    if constexpr (std::is_same_v<T, at::Tensor>)
      if (!x.defined()) return treespec::of(treespec::kind::none);
    on_tensor(x);
    return treespec::leaf();
  } else if constexpr (std::is_same_v<T, bool>) {
    return treespec::constant(x);
  } else if constexpr (std::is_integral_v<T>) {
    return treespec::constant(static_cast<std::int64_t>(x));
  } else if constexpr (std::is_floating_point_v<T>) {
    return treespec::constant(static_cast<double>(x));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return treespec::constant(x);
  } else if constexpr (is_optional<T>::value) {
    if (!x) return treespec::of(treespec::kind::none);
    return flatten_into(*x, on_tensor);
  } else if constexpr (is_vector<T>::value || is_std_array<T>::value) {
    treespec s = treespec::of(treespec::kind::list);
    for (const auto& e : x) s.children.push_back(flatten_into(e, on_tensor));
    return s;
  } else if constexpr (is_tuple_like<T>::value) {
    treespec s = treespec::of(treespec::kind::tuple);
    std::apply([&](const auto&... es) { (s.children.push_back(flatten_into(es, on_tensor)), ...); }, x);
    return s;
  } else if constexpr (is_string_map<T>::value) {
    treespec s = treespec::of(treespec::kind::dict);
    for (const auto& [k, v] : x) {
      s.keys.push_back(k);
      s.children.push_back(flatten_into(v, on_tensor));
    }
    return s;
  } else if constexpr (is_c10_dict<T>::value) {
    treespec s = treespec::of(treespec::kind::dict);
    for (const auto& e : x) {
      s.keys.push_back(e.key());
      s.children.push_back(flatten_into(e.value(), on_tensor));
    }
    return s;
  } else if constexpr (registered_dataclass<T>) {
    // torch's register_dataclass flattening: the fields holding a value are the children
    static const auto names = split_field_names(dataclass_traits<T>::field_list);
    std::vector<std::string> present, absent;
    std::vector<treespec> children;
    std::size_t i = 0;
    const auto one = [&](const auto& f) {
      if (is_none_field(f)) absent.push_back(names[i]);
      else present.push_back(names[i]), children.push_back(flatten_into(f, on_tensor));
      ++i;
    };
    std::apply([&](const auto&... f) { (one(f), ...); }, dataclass_traits<T>::fields(x));
    auto context = dataclass_context(present, absent);
    return treespec::node(std::string(dataclass_traits<T>::type_name), std::move(context), std::move(children), std::move(present));
  } else {
    static_assert(dependent_false<T>,
                  "xport: this type cannot be an input or output of an exported program. Supported: "
                  "at::Tensor; int64_t, int, double, float, bool and std::string (specialized as "
                  "constants); std::optional, std::vector, std::array, std::tuple, std::pair, "
                  "std::map<std::string, T> and c10::Dict<std::string, T> of supported types, and "
                  "aggregates registered with XPORT_DATACLASS. The offending type is T in the "
                  "instantiation below.");
    return {};
  }
}

/// A copy of `x` with every tensor leaf replaced by f(leaf).
template <class T, class F>
T map_tensors(const T& x, F& f) {
  if constexpr (tensor_leaf<T>) {
    return f(x);
  } else if constexpr (is_scalar_leaf<T> || std::is_same_v<T, std::string>) {
    return x;
  } else if constexpr (is_optional<T>::value) {
    if (!x) return x;
    return T(map_tensors(*x, f));
  } else if constexpr (is_vector<T>::value) {
    T out;
    out.reserve(x.size());
    for (const auto& e : x) out.push_back(map_tensors(e, f));
    return out;
  } else if constexpr (is_std_array<T>::value) {
    T out;
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = map_tensors(x[i], f);
    return out;
  } else if constexpr (is_tuple_like<T>::value) {
    // braces: the leaves are mapped in order (f may count them)
    return std::apply([&](const auto&... es) { return T{map_tensors(es, f)...}; }, x);
  } else if constexpr (is_string_map<T>::value) {
    T out;
    for (const auto& [k, v] : x) out.emplace(k, map_tensors(v, f));
    return out;
  } else if constexpr (is_c10_dict<T>::value) {
    T out;
    for (const auto& e : x) out.insert(e.key(), map_tensors(e.value(), f));
    return out;
  } else if constexpr (registered_dataclass<T>) {
    T out = x;
    const auto one = [&](auto& field) {
      if (!is_none_field(field)) field = map_tensors(field, f);
    };
    std::apply([&](auto&... fields) { (one(fields), ...); }, dataclass_traits<T>::fields(out));
    return out;
  } else {
    static_assert(dependent_false<T>, "xport: unsupported input type (see flatten_into)");
    return x;
  }
}

[[noreturn]] inline void structure_mismatch(const treespec& s, const std::string& what) {
  throw error("xport.tree.mismatch", "the program's structure " + s.str() + " cannot be " + what);
}

template <class T, class It>
T unflatten_from(const treespec& s, It& it);

/// A registered dataclass from a node or a dict, field by field by name (in any order: each
/// child's leaves are found by position in the spec). A field the spec lacks must be able to
/// hold None; a field of the spec that T lacks is an error naming it.
template <class T, class It>
T unflatten_dataclass(const treespec& s, It& it) {
  using K = treespec::kind;
  static const auto names = split_field_names(dataclass_traits<T>::field_list);
  const std::string type(dataclass_traits<T>::type_name);
  if ((s.type != K::node && s.type != K::dict) || s.keys.size() != s.children.size())
    structure_mismatch(s, "returned as " + type + " (it has no field names)");
  for (const auto& k : s.keys)
    if (std::find(names.begin(), names.end(), k) == names.end())
      structure_mismatch(s, "returned as " + type + ", which has no field '" + k + "'");
  std::vector<It> starts;
  It next = it;
  for (const auto& c : s.children) {
    starts.push_back(next);
    next += static_cast<std::ptrdiff_t>(c.num_leaves());
  }
  T out{};
  std::size_t i = 0;
  const auto one = [&](auto& field) {
    using F = std::remove_cvref_t<decltype(field)>;
    const auto& name = names[i++];
    const auto k = static_cast<std::size_t>(std::find(s.keys.begin(), s.keys.end(), name) - s.keys.begin());
    if (k == s.keys.size()) {
      if (!std::is_same_v<F, at::Tensor> && !is_optional<F>::value)
        structure_mismatch(s, "returned as " + type + ": it has no field '" + name + "' (only an at::Tensor or a std::optional field may be absent, as None)");
      return;
    }
    It at = starts[k];
    field = unflatten_from<F>(s.children[k], at);
  };
  std::apply([&](auto&... fields) { (one(fields), ...); }, dataclass_traits<T>::fields(out));
  it = next;
  return out;
}

/// Builds a T from `spec` and the tensor leaves starting at `it`.
template <class T, class It>
T unflatten_from(const treespec& s, It& it) {
  using K = treespec::kind;
  if constexpr (std::is_same_v<T, at::Tensor>) {
    if (s.type == K::none || (s.type == K::constant && s.value.is_none())) return at::Tensor();
    if (s.type != K::leaf) structure_mismatch(s, "returned as one at::Tensor");
    return *it++;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (s.type != K::constant || !s.value.is_bool()) structure_mismatch(s, "returned as a bool");
    return s.value.as_bool();
  } else if constexpr (std::is_integral_v<T>) {
    if (s.type != K::constant || !s.value.is_int()) structure_mismatch(s, "returned as an integer");
    return static_cast<T>(s.value.as_int());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (s.type != K::constant || !(s.value.is_double() || s.value.is_int()))
      structure_mismatch(s, "returned as a floating-point number");
    return static_cast<T>(s.value.is_double() ? s.value.as_double() : static_cast<double>(s.value.as_int()));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (s.type != K::constant || !s.value.is_string()) structure_mismatch(s, "returned as a string");
    return s.value.as_string();
  } else if constexpr (is_optional<T>::value) {
    if (s.type == K::none || (s.type == K::constant && s.value.is_none())) return T();
    return T(unflatten_from<typename T::value_type>(s, it));
  } else if constexpr (is_vector<T>::value) {
    if (s.type != K::list && s.type != K::tuple && s.type != K::node) structure_mismatch(s, "returned as a std::vector");
    T out;
    for (const auto& c : s.children) out.push_back(unflatten_from<typename T::value_type>(c, it));
    return out;
  } else if constexpr (is_std_array<T>::value) {
    T out;
    if ((s.type != K::list && s.type != K::tuple && s.type != K::node) || s.children.size() != out.size())
      structure_mismatch(s, "returned as a std::array of " + std::to_string(out.size()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = unflatten_from<typename T::value_type>(s.children[i], it);
    return out;
  } else if constexpr (is_tuple_like<T>::value) {
    constexpr std::size_t n = std::tuple_size_v<T>;
    if ((s.type != K::tuple && s.type != K::list && s.type != K::node) || s.children.size() != n)
      structure_mismatch(s, "returned as a tuple of " + std::to_string(n));
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return T{unflatten_from<std::tuple_element_t<I, T>>(s.children[I], it)...};
    }(std::make_index_sequence<n>{});
  } else if constexpr (is_string_map<T>::value || is_c10_dict<T>::value) {
    if (s.type != K::dict && !(s.type == K::node && s.keys.size() == s.children.size() && !s.keys.empty()))
      structure_mismatch(s, "returned as a map");
    T out;
    for (std::size_t i = 0; i < s.children.size(); ++i) {
      auto v = unflatten_from<typename T::mapped_type>(s.children[i], it);
      if constexpr (is_c10_dict<T>::value) out.insert(s.keys[i], std::move(v));
      else out.emplace(s.keys[i], std::move(v));
    }
    return out;
  } else if constexpr (std::is_same_v<T, tree_value>) {
    const auto n = static_cast<std::ptrdiff_t>(s.num_leaves());
    std::vector<at::Tensor> leaves(it, it + n);
    it += n;
    return tree_value(s, std::move(leaves));
  } else if constexpr (registered_dataclass<T>) {
    return unflatten_dataclass<T>(s, it);
  } else {
    static_assert(dependent_false<T>, "xport: unsupported output type (see flatten_into)");
  }
}

/// `x_b_0`: a readable name for each tensor leaf under `prefix` (torch.export's pytree naming:
/// keys lower-cased, non-alphanumerics as `_`); for constant leaves too with `constants`.
inline void leaf_names(const treespec& s, const std::string& prefix, std::vector<std::string>& out,
                       bool constants = false) {
  switch (s.type) {
    case treespec::kind::leaf: out.push_back(prefix); return;
    case treespec::kind::constant:
      if (constants) out.push_back(prefix);
      return;
    case treespec::kind::tuple:
    case treespec::kind::list:
      for (std::size_t i = 0; i < s.children.size(); ++i)
        leaf_names(s.children[i], prefix + "_" + std::to_string(i), out, constants);
      return;
    case treespec::kind::node:
      if (s.keys.size() != s.children.size()) {
        for (std::size_t i = 0; i < s.children.size(); ++i)
          leaf_names(s.children[i], prefix + "_" + std::to_string(i), out, constants);
        return;
      }
      [[fallthrough]];
    case treespec::kind::dict:
      for (std::size_t i = 0; i < s.children.size(); ++i) {
        std::string k;
        for (char c : s.keys[i]) {
          const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
          k += alnum ? static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c) : '_';
        }
        leaf_names(s.children[i], prefix + "_" + k, out, constants);
      }
      return;
    default: return;
  }
}

}  // namespace detail

/// The treespec of `x` and its tensor leaves, in order.
template <class T>
treespec flatten(const T& x, std::vector<at::Tensor>& leaves) {
  auto push = [&](const at::Tensor& t) { leaves.push_back(t); };
  return detail::flatten_into(x, push);
}

/// A T rebuilt from `spec` and `leaves` (throws when the structure does not fit T).
template <class T>
T unflatten(const treespec& spec, const std::vector<at::Tensor>& leaves) {
  auto it = leaves.begin();
  return detail::unflatten_from<T>(spec, it);
}

XPORT_END_NAMESPACE

/// Registers a C++ aggregate as a pytree node type, as torch.export.register_dataclass registers
/// a Python dataclass: an input or output of that type is flattened to the fields that hold a
/// value (an undefined tensor or an empty optional is None), written under `serialized_name`,
/// the name a Python user registers the twin dataclass under. List every non-static data member
/// in declaration order (a wrong count is a compile error). At global scope (the macro
/// specializes xport::dataclass_traits, which only the global namespace or xport's may do):
///   struct lm_output { at::Tensor logits; std::optional<at::Tensor> loss; };
///   XPORT_DATACLASS(lm_output, "mymodels.LMOutput", logits, loss);
#define XPORT_DATACLASS(Type, serialized_name, ...)                                          \
  template <>                                                                                \
  struct xport::dataclass_traits<Type> {                                                     \
    static constexpr std::string_view type_name = serialized_name;                           \
    static constexpr std::string_view field_list = #__VA_ARGS__;                             \
    static auto fields(Type& xport_object_) {                                                \
      auto& [__VA_ARGS__] = xport_object_;                                                   \
      return std::tie(__VA_ARGS__);                                                          \
    }                                                                                        \
    static auto fields(const Type& xport_object_) {                                          \
      const auto& [__VA_ARGS__] = xport_object_;                                             \
      return std::tie(__VA_ARGS__);                                                          \
    }                                                                                        \
  }
// #include <xport/trace/capture.hpp>
// xport/trace/capture.hpp: recording ATen ops through the LibTorch dispatcher (non-strict).
// While a capture is active on a thread, a dispatch key (TESTING_ONLY_GenericMode) is switched
// on in that thread's local dispatch state; a boxed fallback registered for it sees every op the
// traced code calls, before autograd and before composite ops decompose, factories included.
// The fallback records a node, runs the op on meta tensors (no data: nothing is computed) and
// hands the meta results back to the traced code. Tensors are tracked by TensorImpl identity;
// parameters and buffers are known by identity and named by their FQN before the run, so the
// module is never modified (in-place ops on its state run on meta shadows).

#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint64_t
#include <functional>     // std::function
#include <iterator>       // std::make_move_iterator
#include <memory>         // std::make_shared
#include <optional>       // std::optional
#include <stdexcept>      // std::runtime_error
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/StringUtil.h>

// #include <xport/config.hpp>
// #include <xport/ops/call.hpp>
// #include <xport/ops/data_dependent.hpp>
// #include <xport/ops/meta_infer.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/error.hpp>
// #include <xport/program/builder.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/op.hpp>
// #include <xport/ir/sym_expr.hpp>
// #include <xport/trace/unbacked.hpp>
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

#include <algorithm>  // std::max, std::min
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <optional>   // std::optional
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/sym_expr.hpp>

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

XPORT_BEGIN_NAMESPACE
namespace detail {

class capture;

/// The capture recording on this thread, if any.
inline thread_local capture* active_capture = nullptr;

/// The dispatch key whose fallback records ops.
inline constexpr c10::DispatchKey capture_key = c10::DispatchKey::TESTING_ONLY_GenericMode;

void capture_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// Registers the recording fallback once per process (at run time: a static registration in a
/// header would run once per translation unit and throw).
inline void ensure_capture_fallback() {
  static const bool registered = [] {
    try {
      // the dispatcher's own registration (what torch::Library::fallback calls), kept for the
      // process: <torch/library.h> is half a second of every TU's parse time
      static const c10::RegistrationHandleRAII handle = c10::Dispatcher::singleton().registerFallback(
          capture_key, c10::KernelFunction::makeFromBoxedFunction<&capture_fallback>(), "xport capture fallback");
      (void)handle;
    } catch (const c10::Error& e) {
      throw export_error("xport.export.fallback",
                         "cannot register xport's capture fallback for dispatch key "
                         "TESTING_ONLY_GenericMode: another library already uses it, or two "
                         "versions of xport are linked into this program. LibTorch said: " +
                             first_line(e.what_without_backtrace()));
    }
    return true;
  }();
  (void)registered;
}

/// Switches recording back on inside the fallback (where it is off), for ops a decomposition
/// calls: they are recorded in place of the decomposed op.
class capture_reenabled {
 public:
  capture_reenabled() : was_excluded_(c10::impl::tls_is_dispatch_key_excluded(capture_key)) {
    c10::impl::tls_set_dispatch_key_excluded(capture_key, false);
  }
  ~capture_reenabled() { c10::impl::tls_set_dispatch_key_excluded(capture_key, was_excluded_); }
  capture_reenabled(const capture_reenabled&) = delete;
  capture_reenabled& operator=(const capture_reenabled&) = delete;

 private:
  bool was_excluded_;
};

/// One capture: the program being built and the tensors the traced code holds.
class capture {
 public:
  explicit capture(c10::Device fake_device = c10::Device(c10::kCPU)) : fake_device_(fake_device) {}
  /// The capture of a subgraph (a branch of xport::cond) called from `outer`: a tensor or value
  /// of an enclosing capture that the subgraph reads becomes an input of its own, lifted as
  /// torch lifts a branch's free variables to operands (see lifted()).
  explicit capture(capture& outer)
      : fake_device_(outer.fake_device_),
        keep_value_meta_(outer.keep_value_meta_),
        python_frontend_(outer.python_frontend_),
        sizes_may_vary_(outer.sizes_may_vary_),
        outer_(&outer) {}
  capture(const capture&) = delete;
  capture& operator=(const capture&) = delete;

  [[nodiscard]] program_builder& builder() noexcept { return builder_; }
  [[nodiscard]] c10::Device fake_device() const noexcept { return fake_device_; }
  void set_fake_device(c10::Device d) noexcept { fake_device_ = d; }

  /// A user input named `name`, typed like `example`; returns the meta tensor the traced code
  /// receives in its place.
  at::Tensor add_input(const std::string& name, const at::Tensor& example) {
    auto [v, meta] = input_of(name, example);
    bind(meta, v, meta);
    return meta;
  }
  /// A user input for the strict front end: the graph value itself.
  value add_input_value(const std::string& name, const at::Tensor& example) {
    auto [v, meta] = input_of(name, example);
    bind(meta, v, meta);
    return v;
  }

  /// Sizes the user inputs get in place of their examples' (one entry per input, in order; an
  /// empty entry keeps the example's): how a dynamic export captures again at other sizes.
  void set_input_sizes(std::vector<std::vector<std::int64_t>> sizes) { input_sizes_ = std::move(sizes); }
  /// Whether the program being captured has dynamic dims: sizes seen now may be others at run
  /// time, so no answer may rest on two sizes differing (see sizes_always_differ).
  void set_sizes_may_vary(bool on) noexcept { sizes_may_vary_ = on; }

  /// A placeholder exactly as `spec` says (re-capturing a program); returns the meta tensor the
  /// calls see in its place.
  at::Tensor add_placeholder(const input_spec& spec, const value_type& type) {
    auto v = builder_.placeholder(spec, type);
    auto meta = [&] {
      c10::impl::ExcludeDispatchKeyGuard no_capture(capture_key);
      return type.tensor.make_meta();
    }();
    bind(meta, v, meta);
    return meta;
  }

  /// An input of this subgraph for `outer`, an operand the enclosing capture passes it; returns
  /// it and the meta tensor the subgraph's code receives for it.
  std::pair<value, at::Tensor> add_operand(const value& outer) {
    auto v = builder_.input(outer.name(), outer.meta(), /*exact_name=*/false);
    auto meta = plain_meta(outer.meta());
    bind(meta, v, meta);
    return {v, meta};
  }
  /// An input of this subgraph for one row of `outer` (torch.map's xs: a contiguous slice, its
  /// sizes without the leading dim); returns it and the meta tensor the code receives for it.
  std::pair<value, at::Tensor> add_row_operand(const value& outer) {
    const auto& m = outer.meta();
    auto row = tensor_meta::contiguous(m.dtype, sym_shape(m.sizes.begin() + 1, m.sizes.end()), m.device);
    row.requires_grad = m.requires_grad;
    auto v = builder_.input(outer.name(), row, /*exact_name=*/false);
    auto meta = plain_meta(row);
    bind(meta, v, meta);
    return {v, meta};
  }
  /// Values of the enclosing capture that this subgraph reads without being passed them, in the
  /// order it first read them; each has an input here, after the operands'.
  [[nodiscard]] const std::vector<value>& lifted() const noexcept { return lifted_; }
  /// The input standing for `outer` (a lifted value); null when it was not lifted.
  [[nodiscard]] value input_for(const value& outer) const {
    const auto it = from_outer_.find(outer.impl());
    return it == from_outer_.end() ? value() : it->second.first;
  }
  /// The value `v` is in this capture: `v` itself, or the input standing for a value of an
  /// enclosing capture (lifted on first use). The strict front end's values carry no capture.
  value local_value(const value& v) {
    if (!outer_ || meta_.count(v.impl())) return v;
    if (auto it = from_outer_.find(v.impl()); it != from_outer_.end()) return it->second.first;
    auto in = lifted_input(outer_->local_value(v));
    from_outer_.emplace(v.impl(), in);
    return in.first;
  }
  /// The FQN of the parameter or buffer `v` stands for (here or, lifted, in an enclosing
  /// capture); empty for any other value.
  [[nodiscard]] std::string state_name(const value& v) const {
    const auto it = state_fqn_.find(v.impl());
    return it == state_fqn_.end() ? std::string() : it->second;
  }
  /// The index the next subgraph pair of `kind` called from this capture gets (`true_graph_<i>`,
  /// `while_loop_body_graph_<i>`: torch counts each kind apart).
  [[nodiscard]] int next_subgraph_index(const std::string& kind) { return subgraphs_[kind]++; }
  /// Called for every recorded op first: returns true when it has handled the op (decomposed
  /// it: the results are on the stack, its ATen calls recorded instead).
  using decompose_hook = std::function<bool(const op_info&, torch::jit::Stack&)>;
  void set_decompose_hook(decompose_hook h) { decompose_ = std::move(h); }

  /// A parameter or buffer of the module, known by identity; its real tensor stays untouched.
  void add_state(input_kind kind, const std::string& fqn, const at::Tensor& t) {
    if (by_impl_.count(t.unsafeGetTensorImpl())) return;  // shared (tied) state: first name wins
    value v = kind == input_kind::parameter ? builder_.parameter(fqn, t) : builder_.buffer(fqn, t, true);
    state_fqn_.emplace(v.impl(), fqn);
    bind(t, v, meta_like(t));
  }

  /// Whether the calls recorded are the user's, as Python's frontend would make them (default
  /// arguments its parser fills, the overloads it binds); false when a program is re-captured.
  void set_python_frontend(bool on) noexcept { python_frontend_ = on; }

  /// The operator behind a dispatcher handle.
  const op_info& op_for(const c10::OperatorHandle& h) {
    const auto* key = &h.schema();
    if (auto it = ops_.find(key); it != ops_.end()) return *it->second;
    const auto& name = h.operator_name();
    const auto& info = find_op(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
    ops_.emplace(key, &info);
    return info;
  }

  /// The graph value a tensor held by the traced code stands for.
  value value_of(const at::Tensor& t) { return tracked_of(t).v; }

  /// For the strict front end: keep value -> meta tensor (sym_tensor arguments are values).
  void keep_value_meta() { keep_value_meta_ = true; }

  /// Records `op` called on graph values (the strict front end): arguments are bound to the
  /// schema and checked like program_builder::call; the op runs on the values' meta tensors.
  node call(const op_info& op, std::vector<argument> args, std::vector<kwarg> kwargs,
            std::shared_ptr<const source_location> src) {
    if (reads_data(op)) throw_reads_data(op);
    auto bound = bind_arguments(op, std::move(args), std::move(kwargs));
    if (outer_)
      for (auto& a : bound) a = localized(a);
    check_mutations(op, bound);
    torch::jit::Stack meta_args;
    push_meta_arguments(op, bound, [&](const value& v) -> const at::Tensor& { return meta_.at(v.impl()); }, meta_args);
    const auto device = output_device(op, bound);
    auto results = run_meta(op, std::move(meta_args), [&] { return describe_args(op, bound); }, device);
    fill_python_defaults(op, bound);
    auto types = result_types(op, results, device, any_requires_grad(bound));
    builder_.at(std::move(src));
    auto node = builder_.record(python_overload(op), std::move(bound), std::move(types));
    if (auto path = module_path_of(node); !path.empty()) node.set_module_path(std::move(path));
    take_outputs(results, [&](std::size_t k, c10::IValue&& r) {
      if (r.isTensor()) track(node.output(k), r.toTensor());
    });
    return node;
  }

  /// Records a call whose arguments are already graph values and whose output types are known
  /// (a lowering re-recording a control-flow call with its branches lowered); returns the meta
  /// tensor each output is tracked by.
  std::vector<at::Tensor> record_values(const op_info& op, std::vector<argument> bound, std::vector<value_type> types,
                                        xport::node* recorded = nullptr) {
    auto node = builder_.record(op, std::move(bound), std::move(types));
    if (recorded) *recorded = node;
    std::vector<at::Tensor> metas;
    for (auto v : node.outputs()) {
      if (v.kind() != value_kind::tensor) {
        metas.emplace_back();
        continue;
      }
      metas.push_back(track(v, plain_meta(v.meta())));
    }
    return metas;
  }

  /// Records one op call from the dispatcher fallback (see capture_fallback).
  void record(const c10::OperatorHandle& handle, torch::jit::Stack& stack) {
    const op_info& op = op_for(handle);
    if (decompose_ && decompose_(op, stack)) return;
    record_op(op, stack);
  }

  /// Records `op` with the arguments on `stack` and leaves its (meta) results there.
  void record_op(const op_info& op, torch::jit::Stack& stack) {
    if (op.name == "aten::equal" && decided_equal(stack)) return;
    if (active_unbacked && gives_unbacked_rows(op, stack)) return record_unbacked_rows(op, stack);
    if (active_unbacked && reads_unbacked_int(op, stack)) return record_unbacked_int(op, stack);
    if (reads_data(op)) throw_reads_data(op);
    if (op.name == "aten::index" && has_mask_index(stack.back())) throw_mask_index_break(op);
    auto args = take_arguments(op, stack);
    if (python_frontend_) fill_python_defaults(op, args);
    check_mutations(op, args);
    const auto detached = detach_state_written_without_grad(op, args);

    auto& results = meta_stack_;
    const auto device = output_device(op, args);
    run_meta_laid_out(op, results, device, [&] { return describe_args(op, args); });
    auto types = result_types(op, results, device, any_requires_grad(args));
    auto node = builder_.record(python_frontend_ ? python_overload(op) : op, std::move(args), std::move(types));
    if (auto path = module_path_of(node); !path.empty()) node.set_module_path(std::move(path));
    hand_back_results(op, node, detached, stack);
    results.clear();
    originals_.clear();
  }

 private:
  // aten::equal decided without data: equal(x, x) is true whatever x holds (C++
  // MultiheadAttention asks this to detect self-attention); tensors whose sizes differ for every
  // input the program accepts are never equal (cross-attention: query and key of other
  // lengths). Leaves the answer on `stack` and returns true when decided; any other comparison
  // of contents is a graph break (false: the caller's).
  bool decided_equal(torch::jit::Stack& stack) {
    const auto& a = stack[stack.size() - 2];
    const auto& b = stack[stack.size() - 1];
    const bool same = same_value(a, b);
    if (same || sizes_always_differ(a, b)) {
      torch::jit::drop(stack, 2);
      stack.emplace_back(same);
      return true;
    }
    if (sizes_may_vary_ && a.isTensor() && b.isTensor() && a.toTensor().sizes() != b.toTensor().sizes())
      throw graph_break("xport.export.graph_break",
                        "graph break: aten::equal (at::equal) on tensors whose sizes differ at the example "
                        "inputs but may be equal for other inputs of a dynamic program (" +
                            c10::str(a.toTensor().sizes()) + " and " + c10::str(b.toTensor().sizes()) +
                            "): then only their contents can answer. Way out: export the dims "
                            "that make them differ as static, or compare sizes instead "
                            "(a.sizes() == b.sizes())");
    return false;
  }

  // Takes `op`'s arguments off the dispatcher's `stack` into originals_ (as the traced code
  // passed them) and meta_stack_ (what the meta run gets: see to_meta_run); returns them as the
  // node records them. The two buffers are reused: no allocation per op.
  std::vector<argument> take_arguments(const op_info& op, torch::jit::Stack& stack) {
    const auto& params = op.schema().arguments();
    const std::size_t n = params.size();
    originals_.assign(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(n)),
                      std::make_move_iterator(stack.end()));
    torch::jit::drop(stack, n);
    std::vector<argument> args(n);
    meta_stack_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      convert(originals_[i], params[i].real_type(), args[i], meta_stack_[i]);
      expand_fixed_list(args[i], params[i]);
    }
    to_meta_run(op, meta_stack_);
    return args;
  }

  // Hands the meta results of `recorded` (in meta_stack_) back on `stack`: a return that writes to
  // an argument (in-place, out=) is that argument object itself, now standing for the node's
  // output; `detached` (see detach_state_written_without_grad) marks arguments written through
  // a detached alias.
  void hand_back_results(const op_info& op, const node& recorded, std::uint64_t detached, torch::jit::Stack& stack) {
    const auto& schema = op.schema();
    const auto& rets = schema.returns();
    auto& results = meta_stack_;
    std::size_t out_index = 0;
    for (std::size_t r = 0; r < results.size(); ++r) {
      auto& res = results[r];
      if (res.isTensorList()) {
        auto ts = res.toTensorVector();
        for (auto& t : ts) track(recorded.output(out_index++), t);
        stack.emplace_back(c10::List<at::Tensor>(ts));
        continue;
      }
      if (!res.isTensor()) {
        ++out_index;
        stack.push_back(std::move(res));
        continue;
      }
      const auto v = recorded.output(out_index++);
      if (r < rets.size() && rets[r].alias_info() && rets[r].alias_info()->isWrite()) {
        const auto a = aliased_argument(schema, r);
        if (a && originals_[*a].isTensor()) {
          // written through a detached alias (no-grad update of module state): the state's
          // value is unchanged in the graph; its storage holds the update when it runs
          if (!(detached >> *a & 1U)) bind(originals_[*a].toTensor(), v, res.toTensor());
          stack.push_back(originals_[*a]);
          continue;
        }
      }
      track(v, res.toTensor());
      stack.push_back(std::move(res));
    }
  }

  // Whether the two tensors' sizes differ for every input the program accepts: other ranks, or
  // a dim whose difference is a nonzero constant (two static sizes, `s0` against `s0 + 1`). A
  // dynamic export captures at concrete sizes: there only ranks decide.
  bool sizes_always_differ(const c10::IValue& a, const c10::IValue& b) {
    if (!a.isTensor() || !b.isTensor() || !a.toTensor().defined() || !b.toTensor().defined()) return false;
    if (sizes_may_vary_) return a.toTensor().dim() != b.toTensor().dim();
    // sizes as the program knows them: symbolic for tracked tensors, exact for one captured
    // from outside (not lifted here: a false answer leaves it unused)
    const auto known_sizes = [&](const at::Tensor& t) {
      if (auto it = by_impl_.find(t.unsafeGetTensorImpl()); it != by_impl_.end()) return it->second.v.type().tensor.sizes;
      return sym_shape(t.sizes().begin(), t.sizes().end());
    };
    const auto sa = known_sizes(a.toTensor());
    const auto sb = known_sizes(b.toTensor());
    if (sa.size() != sb.size()) return true;
    for (std::size_t i = 0; i < sa.size(); ++i) {
      const auto d = sa[i] - sb[i];
      if (d.is_constant() && d.value() != 0) return true;
    }
    return false;
  }

  // Records item() of an integer tensor (reads_unbacked_int): its value is the one the
  // capture's plan gives it (Note [Unbacked sizes in a capture]), a SymInt in the graph.
  void record_unbacked_int(const op_info& op, torch::jit::Stack& stack) {
    auto args = take_arguments(op, stack);
    const auto v = active_unbacked->take();
    std::vector<value_type> types{value_type::of_sym_int(v)};
    const auto& item = op.name == "aten::item" ? op : find_op("aten::item");
    auto node = builder_.record(item, std::move(args), std::move(types));
    if (auto path = module_path_of(node); !path.empty()) node.set_module_path(std::move(path));
    stack.emplace_back(v);
    meta_stack_.clear();
    originals_.clear();
  }

  // Records a call gives_unbacked_rows accepts, its meta results made by the op's shape rule
  // (ops/data_dependent.hpp) with the row count the capture's plan gives it.
  void record_unbacked_rows(const op_info& op, torch::jit::Stack& stack) {
    auto args = take_arguments(op, stack);
    if (python_frontend_) fill_python_defaults(op, args);
    auto results = unbacked_rows_results(op, meta_stack_, active_unbacked->take({0, int_oo}));
    meta_stack_.assign(std::make_move_iterator(results.begin()), std::make_move_iterator(results.end()));
    record_unbacked_results(op, std::move(args), stack);
  }

  // Records `op` on `args` with the meta results in meta_stack_, and hands them back on `stack`.
  void record_unbacked_results(const op_info& op, std::vector<argument> args, torch::jit::Stack& stack) {
    auto types = result_types(op, meta_stack_, output_device(op, args), any_requires_grad(args));
    auto node = builder_.record(python_frontend_ ? python_overload(op) : op, std::move(args), std::move(types));
    if (auto path = module_path_of(node); !path.empty()) node.set_module_path(std::move(path));
    hand_back_results(op, node, 0, stack);
    meta_stack_.clear();
    originals_.clear();
  }

  // Note [No-grad updates of module state]: code that updates a parameter in place under
  // NoGradGuard (nn::Embedding's max_norm renorms its weight) cannot do so on the leaf itself at
  // run time. torch.export records the update on `detach(p)`, an alias that shares p's storage
  // and does not require grad; xport records the same, so the program runs as eager does and
  // functionalization writes the update back as a PARAMETER_MUTATION. Returns a bit per
  // argument that now stands for such an alias.
  std::uint64_t detach_state_written_without_grad(const op_info& op, std::vector<argument>& args) {
    if (!op.is_mutable || c10::GradMode::is_enabled()) return 0;
    std::uint64_t detached = 0;
    const auto& params = op.schema().arguments();
    for (std::size_t i = 0; i < params.size() && i < 64; ++i) {
      const auto* ai = params[i].alias_info();
      if (!ai || !ai->isWrite() || !args[i].is_value()) continue;
      const auto v = args[i].as_value();
      if (v.kind() != value_kind::tensor || !v.type().tensor.requires_grad) continue;
      auto type = v.type();
      type.tensor.requires_grad = false;
      auto d = builder_.record(find_op("aten::detach"), {argument(v)}, {std::move(type)});
      if (auto path = module_path_of(d); !path.empty()) d.set_module_path(std::move(path));
      args[i] = d.output(0);
      detached |= std::uint64_t{1} << i;
    }
    return detached;
  }

  bool same_value(const c10::IValue& a, const c10::IValue& b) const {
    if (!a.isTensor() || !b.isTensor()) return false;
    const auto ia = by_impl_.find(a.toTensor().unsafeGetTensorImpl());
    const auto ib = by_impl_.find(b.toTensor().unsafeGetTensorImpl());
    return ia != by_impl_.end() && ib != by_impl_.end() && ia->second.v == ib->second.v;
  }

  std::pair<value, at::Tensor> input_of(const std::string& name, const at::Tensor& example) {
    const auto i = next_input_++;
    if (i >= input_sizes_.size() || input_sizes_[i].empty()) {
      auto v = builder_.input(name, example, /*exact_name=*/false);
      return {v, meta_like(example)};
    }
    auto m = tensor_meta::of(example);
    const bool grad = m.requires_grad;
    m = tensor_meta::contiguous(m.dtype, sym_shape(input_sizes_[i].begin(), input_sizes_[i].end()), m.device);
    m.requires_grad = grad;
    auto v = builder_.input(name, m, /*exact_name=*/false);
    c10::impl::ExcludeDispatchKeyGuard no_capture(capture_key);
    return {v, m.make_meta()};
  }

  // A plain meta tensor, whatever a lowering has switched on.
  static at::Tensor plain_meta(const tensor_meta& m) {
    c10::impl::ExcludeDispatchKeyGuard plain(
        c10::DispatchKeySet({capture_key, c10::DispatchKey::Functionalize, c10::DispatchKey::Fake}));
    return m.make_meta();
  }

  // The input of this subgraph standing for `outer` (a value of the enclosing capture), made on
  // first use.
  std::pair<value, at::Tensor> lifted_input(const value& outer) {
    if (auto it = from_outer_.find(outer.impl()); it != from_outer_.end()) return it->second;
    auto in = add_operand(outer);
    if (auto fqn = outer_->state_name(outer); !fqn.empty()) state_fqn_.emplace(in.first.impl(), std::move(fqn));
    lifted_.push_back(outer);
    from_outer_.emplace(outer.impl(), in);
    return in;
  }
  argument localized(const argument& a) {
    if (a.is_value()) return local_value(a.as_value());
    if (!a.is_list()) return a;
    argument::list_type l;
    for (const auto& e : a.as_list()) l.push_back(localized(e));
    return l;
  }

  static at::Tensor meta_like(const at::Tensor& t) {
    c10::impl::ExcludeDispatchKeyGuard no_capture(capture_key);
    return tensor_meta::of(t).make_meta();
  }

  // Note [Identity tracking]: a tensor the traced code holds is found by its TensorImpl*; the
  // entry keeps that tensor alive (its address cannot be reused by another tensor during the
  // capture), the value it stands for now, and the meta tensor ops on it run on.
  struct tracked {
    value v;
    at::Tensor meta;
    at::Tensor held;
  };
  void bind(const at::Tensor& held, value v, at::Tensor meta) {
    if (keep_value_meta_) meta_[v.impl()] = meta;
    by_impl_.insert_or_assign(held.unsafeGetTensorImpl(), tracked{v, std::move(meta), held});
  }
  at::Tensor track(value v, const at::Tensor& meta) {
    bind(meta, v, meta);
    return meta;
  }
  // A tensor of an enclosing capture that this subgraph's code reads: an input of its own.
  const tracked& lifted_from_outer(const at::Tensor& t) {
    auto [in, meta] = lifted_input(outer_->tracked_of(t).v);
    bind(t, in, meta);
    return by_impl_.at(t.unsafeGetTensorImpl());
  }
  const tracked& tracked_of(const at::Tensor& t) {
    if (auto it = by_impl_.find(t.unsafeGetTensorImpl()); it != by_impl_.end()) return it->second;
    if (t.is_meta()) {
      if (auto* tr = by_storage(t)) {
        bind(t, tr->v, tr->meta);
        return by_impl_.at(t.unsafeGetTensorImpl());
      }
    }
    if (outer_) return lifted_from_outer(t);
    if (t.is_meta()) {
      throw export_error("xport.export.unknown_tensor",
                         "the traced code returned or used a meta tensor that export did not "
                         "create (made outside the traced function?); pass it as an input instead");
    }
    lift_constant(t);
    return by_impl_.at(t.unsafeGetTensorImpl());
  }

  // Note [Shallow copies]: torch:: factories (torch::zeros, ...) wrap the ATen result with
  // autograd::make_variable, which makes a shallow copy: a new TensorImpl over the same storage.
  // Such a tensor stands for the value of the tracked meta tensor with the same storage and
  // exactly its geometry. Rare (a few per model), so a scan beats an index kept for every op.
  const tracked* by_storage(const at::Tensor& t) const {
    if (!t.has_storage()) return nullptr;
    const auto* storage = t.storage().unsafeGetStorageImpl();
    for (const auto& [impl, tr] : by_impl_) {
      const auto& m = tr.meta;
      if (!m.defined() || !m.has_storage() || m.storage().unsafeGetStorageImpl() != storage) continue;
      if (m.sizes() == t.sizes() && m.strides() == t.strides() && m.storage_offset() == t.storage_offset() &&
          m.scalar_type() == t.scalar_type() && impl == m.unsafeGetTensorImpl())
        return &tr;
    }
    return nullptr;
  }

  value lift_constant(const at::Tensor& t) {
    const std::string target = "lifted_tensor_" + std::to_string(lifted_constants_count_++);
    auto v = builder_.constant(target, t);
    lifted_constants_.emplace(v.impl(), target);
    bind(t, v, meta_like(t));
    return v;
  }

  // One argument from the dispatcher's stack: the recorded argument and what the meta run gets.
  void convert(const c10::IValue& iv, const c10::TypePtr& type, argument& arg, c10::IValue& meta) {
    if (iv.isTensor()) {
      const auto& t = iv.toTensor();
      if (!t.defined()) {
        arg = none;
        meta = iv;
        return;
      }
      if (!by_impl_.count(t.unsafeGetTensorImpl()) && t.unsafeGetTensorImpl()->is_wrapped_number()) {
        // a C++ scalar the API wrapped into a tensor: record the number, as torch does
        const auto s = t.item();
        arg = s.isFloatingPoint() ? argument(s.toDouble())
              : s.isBoolean()     ? argument(s.toBool())
                                  : argument(s.toLong());
        meta = iv;
        return;
      }
      const auto& tr = tracked_of(t);
      arg = tr.v;
      meta = tr.meta;
      return;
    }
    if (iv.isTensorList()) {
      argument::list_type items;
      c10::List<at::Tensor> metas;
      for (const auto& t : iv.toTensorVector()) {
        const auto& tr = tracked_of(t);
        items.emplace_back(tr.v);
        metas.push_back(tr.meta);
      }
      arg = std::move(items);
      meta = metas;
      return;
    }
    if (iv.isList() && unwrap_optional(type)->kind() == c10::TypeKind::ListType &&
        unwrap_optional(type)->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::OptionalType) {
      argument::list_type items;
      c10::List<c10::optional<at::Tensor>> metas;
      for (const auto& e : iv.toListRef()) {
        if (e.isNone() || (e.isTensor() && !e.toTensor().defined())) {
          items.emplace_back(none);
          metas.push_back(c10::nullopt);
        } else {
          const auto& tr = tracked_of(e.toTensor());
          items.emplace_back(tr.v);
          metas.push_back(tr.meta);
        }
      }
      arg = std::move(items);
      meta = metas;
      return;
    }
    if (iv.isDevice()) {
      const auto d = iv.toDevice();
      arg = d.is_meta() ? fake_device_ : d;  // tensors the code sees are meta: report the real device
      meta = c10::Device(c10::kMeta);
      return;
    }
    if (iv.isGenerator()) {
      arg = none;
      meta = c10::IValue();
      return;
    }
    arg = from_ivalue(iv, type);
    meta = iv;
  }

  // What Python's argument parser passes when the caller leaves them out, so that the program
  // records what torch.export records: a factory (no tensor argument) gets the default device,
  // every op with a `pin_memory` argument gets False. The meta run keeps its own arguments.
  void fill_python_defaults(const op_info& op, std::vector<argument>& args) const {
    if (op.is_factory && op.device_arg >= 0 && args[static_cast<std::size_t>(op.device_arg)].is_none())
      args[static_cast<std::size_t>(op.device_arg)] = fake_device_;
    if (op.pin_memory_arg >= 0 && args[static_cast<std::size_t>(op.pin_memory_arg)].is_none())
      args[static_cast<std::size_t>(op.pin_memory_arg)] = false;
  }

  // A mutated lifted constant is an error (torch.export says the same).
  void check_mutations(const op_info& op, const std::vector<argument>& args) {
    if (!op.is_mutable) return;
    const auto& params = op.schema().arguments();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto* ai = params[i].alias_info();
      if (!ai || !ai->isWrite()) continue;
      args[i].for_each_value([&](const value& v) {
        if (auto it = lifted_constants_.find(v.impl()); it != lifted_constants_.end())
          throw export_error("xport.export.constant_mutation",
                             "Constant " + it->second + " is mutated in the forward method by " + op.qualified +
                                 ". Pls register it as buffer: a tensor that the traced code "
                                 "captures from outside and updates in place must be module state "
                                 "(register_buffer(\"name\", tensor) in the module's constructor), or "
                                 "clone it before updating it");
      });
    }
  }

  // Index of the argument that return `r` writes through (same alias set), if any.
  static std::optional<std::size_t> aliased_argument(const c10::FunctionSchema& s, std::size_t r) {
    const auto* ra = s.returns()[r].alias_info();
    for (std::size_t i = 0; i < s.arguments().size(); ++i) {
      const auto* aa = s.arguments()[i].alias_info();
      if (aa && aa->isWrite() && aa->beforeSets() == ra->beforeSets()) return i;
    }
    return std::nullopt;
  }

  // The module a node belongs to, from the module state it reads (`layer1.0.conv1.weight` ->
  // `layer1.0.conv1`).
  std::string module_path_of(const node& n) const {
    if (state_fqn_.empty()) return {};
    for (std::size_t i = 0; i < n.num_inputs(); ++i)
      if (auto it = state_fqn_.find(n.input(i).impl()); it != state_fqn_.end()) {
        const auto dot = it->second.rfind('.');
        return dot == std::string::npos ? std::string() : it->second.substr(0, dot);
      }
    return {};
  }

  program_builder builder_;
  c10::Device fake_device_;
  std::unordered_map<const c10::TensorImpl*, tracked> by_impl_;
  std::unordered_map<const value_impl*, at::Tensor> meta_;  // strict front end only
  bool keep_value_meta_ = false;
  decompose_hook decompose_;
  bool python_frontend_ = true;
  std::vector<c10::IValue> originals_, meta_stack_;
  std::unordered_map<const value_impl*, std::string> state_fqn_;
  std::unordered_map<const value_impl*, std::string> lifted_constants_;
  std::unordered_map<const c10::FunctionSchema*, const op_info*> ops_;
  int lifted_constants_count_ = 0;
  std::vector<std::vector<std::int64_t>> input_sizes_;
  std::size_t next_input_ = 0;
  bool sizes_may_vary_ = false;
  capture* outer_ = nullptr;  // the enclosing capture of a subgraph's
  std::vector<value> lifted_;
  std::unordered_map<const value_impl*, std::pair<value, at::Tensor>> from_outer_;  // enclosing capture's value -> input here
  std::unordered_map<std::string, int> subgraphs_;  // kind ("cond", "while_loop") -> subgraphs so far
};

inline void capture_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // Everything below (meta runs, helpers) must not come back here.
  c10::impl::ExcludeDispatchKeyGuard no_capture(capture_key);
  if (!active_capture) {
    op.callBoxed(stack);
    return;
  }
  active_capture->record(op, *stack);
}

/// Makes `c` the recording capture on this thread for the guard's lifetime.
class capture_scope {
 public:
  explicit capture_scope(capture& c) : prev_((ensure_capture_fallback(), active_capture)), include_(capture_key) {
    active_capture = &c;
  }
  ~capture_scope() { active_capture = prev_; }
  capture_scope(const capture_scope&) = delete;
  capture_scope& operator=(const capture_scope&) = delete;

 private:
  capture* prev_;
  c10::impl::IncludeDispatchKeyGuard include_;
};

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/trace/strict.hpp>
// xport/trace/strict.hpp: the strict tracing policy's front end, xport's symbolic tensor type.
// Code written against sym_tensor (or as a template over the tensor type, so the same source
// also runs on at::Tensor) records each op as it is called, with the std::source_location of the
// user's line: printed as torch prints `# File: model.cpp:12 in forward, code: <line text>`.
// Nothing data-dependent compiles: sym_tensor has no item(), no data pointer, and does not
// convert to bool; each of these is a compile error that says why and what to do instead.
// The functions mirror the at:: API and record the same ATen overloads, so strict and
// non-strict capture give the same IR for the same computation.

#include <cstdint>          // std::int64_t
#include <fstream>          // std::ifstream
#include <memory>           // std::shared_ptr
#include <mutex>            // std::mutex
#include <optional>         // std::optional
#include <source_location>  // std::source_location
#include <string>           // std::string
#include <string_view>      // std::string_view
#include <unordered_map>    // std::unordered_map
#include <vector>           // std::vector

// #include <xport/config.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/trace/capture.hpp>
// #include <xport/trace/tree.hpp>

XPORT_BEGIN_NAMESPACE

/// Tracing policy: the code is written against xport::sym_tensor; every node records the C++
/// line that made it (torch.export's strict mode, with the compiler playing Dynamo).
struct strict {};

namespace detail {

/// The text of line `line` of `file`, trimmed; empty when the file cannot be read.
inline std::string source_line(const char* file, std::uint32_t line) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::vector<std::string>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(file);
  if (it == cache.end()) {
    std::vector<std::string> lines;
    std::ifstream in(file);
    for (std::string l; std::getline(in, l);) lines.push_back(std::move(l));
    it = cache.emplace(file, std::move(lines)).first;
  }
  if (line == 0 || line > it->second.size()) return {};
  const auto& l = it->second[line - 1];
  const auto b = l.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = l.find_last_not_of(" \t\r");
  return l.substr(b, e - b + 1);
}

/// `forward` for `Tensor Net::forward(Tensor)`, `f` for `T f(T) [with T = ...]`; lambdas are
/// reported as `forward`.
inline std::string short_function_name(std::string_view full) {
  if (full.find("<lambda") != std::string_view::npos) return "forward";
  const auto paren = full.find('(');
  auto head = full.substr(0, paren);
  if (const auto lt = head.find('<'); lt != std::string_view::npos) head = head.substr(0, lt);
  const auto sep = head.find_last_of(" :");
  auto name = sep == std::string_view::npos ? head : head.substr(sep + 1);
  return name.empty() ? std::string("forward") : std::string(name);
}

inline std::shared_ptr<const source_location> make_source(const std::source_location& loc) {
  return std::make_shared<const source_location>(
      source_location{loc.file_name(), loc.line(), short_function_name(loc.function_name()),
                      source_line(loc.file_name(), loc.line())});
}

struct sym_slot {
  value v;
  capture* cap;
};

/// The capture of the xport::cond branch being traced on this thread (strict policy): every op
/// the branch's code calls is recorded there, whichever capture its tensors come from (those of
/// an enclosing one become inputs of the branch).
inline thread_local capture* strict_branch = nullptr;
inline capture& recording_capture(capture& own) noexcept { return strict_branch ? *strict_branch : own; }

}  // namespace detail

class sym_tensor;

namespace detail {
template <class T>
inline constexpr bool always_false_v = false;
}  // namespace detail

/// A tensor of a strict trace: a graph value with its static type. Copies share identity (like
/// at::Tensor handles), so an in-place op through one copy is seen through every other.
class sym_tensor {
 public:
  using xport_tensor_leaf = void;

  sym_tensor(value v, detail::capture* cap) : s_(std::make_shared<detail::sym_slot>(detail::sym_slot{v, cap})) {}

  [[nodiscard]] value graph_value() const { return s_->v; }
  [[nodiscard]] detail::capture& owner() const { return *s_->cap; }
  [[nodiscard]] const tensor_meta& meta() const { return s_->v.meta(); }
  [[nodiscard]] std::int64_t dim() const { return meta().dim(); }
  [[nodiscard]] std::int64_t size(std::int64_t d) const {
    const auto r = dim();
    return meta().sizes.at(static_cast<std::size_t>(d < 0 ? d + r : d)).hint();
  }
  [[nodiscard]] std::vector<std::int64_t> sizes() const { return meta().size_hints(); }
  [[nodiscard]] std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto s : sizes()) n *= s;
    return n;
  }
  [[nodiscard]] c10::ScalarType scalar_type() const { return meta().dtype; }
  [[nodiscard]] c10::Device device() const { return meta().device; }

  // ---- what does not compile ------------------------------------------------------------------
  template <class T = double>
  T item() const {
    static_assert(detail::always_false_v<T>,
                  "xport::sym_tensor::item(): reading a tensor's value is a graph break in strict "
                  "export: the program must not depend on tensor data. Make the value an input (an "
                  "int64_t/double argument is specialized as a constant) or compute with tensor ops "
                  "(xport::where, clamp, ...)");
    return T{};
  }
  template <class B>
    requires std::is_same_v<B, bool>
  explicit operator B() const {
    static_assert(detail::always_false_v<B>,
                  "xport::sym_tensor used as a bool: branching on a tensor's value is a graph break in "
                  "strict export. Branch on static information (dim(), size(i)) or select with "
                  "xport::where(condition, a, b)");
    return false;
  }
  template <class T = void>
  T* data_ptr() const {
    static_assert(detail::always_false_v<T>,
                  "xport::sym_tensor::data_ptr(): a traced tensor has no data; export records ops, "
                  "it does not compute them");
    return nullptr;
  }

  // ---- recording --------------------------------------------------------------------------------
  /// Records `op` on these arguments at `loc`; returns the node.
  node record(std::string_view op, std::vector<argument> args, std::vector<kwarg> kwargs,
              const std::source_location& loc) const {
    try {
      return detail::recording_capture(*s_->cap).call(find_op(op), std::move(args), std::move(kwargs),
                                                    detail::make_source(loc));
    } catch (const graph_error& e) {  // name the C++ line: the strict front end knows it
      if (e.id() != "xport.fake.op_rejected") throw;
      throw graph_error(e.id(), std::string(e.what()).substr(e.id().size() + 3) + " (at " + loc.file_name() + ":" +
                                    std::to_string(loc.line()) + ")");
    }
  }
  /// Wraps an output value of this trace.
  [[nodiscard]] sym_tensor wrap(value v) const { return sym_tensor(v, &detail::recording_capture(*s_->cap)); }
  /// After an in-place op: this tensor (and every copy of it) now stands for `v`.
  void rebind(value v) const { s_->v = v; }

  operator argument() const { return argument(s_->v); }  // NOLINT

  // ---- methods, as at::Tensor spells them ------------------------------------------------------
  sym_tensor view(std::vector<std::int64_t> size, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::view", {*this, size}, {}, loc));
  }
  sym_tensor reshape(std::vector<std::int64_t> size, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::reshape", {*this, size}, {}, loc));
  }
  sym_tensor transpose(std::int64_t a, std::int64_t b, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::transpose.int", {*this, a, b}, {}, loc));
  }
  sym_tensor t(std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::t", {*this}, {}, loc));
  }
  sym_tensor permute(std::vector<std::int64_t> dims, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::permute", {*this, dims}, {}, loc));
  }
  sym_tensor flatten(std::int64_t start = 0, std::int64_t end = -1,
                     std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::flatten.using_ints", {*this, start, end}, {}, loc));
  }
  sym_tensor unsqueeze(std::int64_t d, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::unsqueeze", {*this, d}, {}, loc));
  }
  sym_tensor squeeze(std::int64_t d, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::squeeze.dim", {*this, d}, {}, loc));
  }
  sym_tensor expand(std::vector<std::int64_t> size, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::expand", {*this, size}, {}, loc));
  }
  sym_tensor select(std::int64_t d, std::int64_t i, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::select.int", {*this, d, i}, {}, loc));
  }
  sym_tensor narrow(std::int64_t d, std::int64_t start, std::int64_t len,
                    std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::narrow", {*this, d, start, len}, {}, loc));
  }
  /// No op when already contiguous, as Tensor::contiguous().
  sym_tensor contiguous(std::source_location loc = std::source_location::current()) const {
    const auto& m = meta();
    if (m.strides == tensor_meta::contiguous(m.dtype, m.sizes).strides) return *this;
    return wrap(record("aten::contiguous", {*this}, {}, loc));
  }
  sym_tensor clone(std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::clone", {*this}, {}, loc));
  }
  sym_tensor to(c10::ScalarType dtype, std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::to.dtype", {*this, dtype}, {}, loc));
  }
  sym_tensor sum(std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::sum", {*this}, {}, loc));
  }
  sym_tensor sum(std::vector<std::int64_t> dims, bool keepdim = false,
                 std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::sum.dim_IntList", {*this, dims, keepdim}, {}, loc));
  }
  sym_tensor mean(std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::mean", {*this}, {}, loc));
  }
  sym_tensor mean(std::vector<std::int64_t> dims, bool keepdim = false,
                  std::source_location loc = std::source_location::current()) const {
    return wrap(record("aten::mean.dim", {*this, dims, keepdim}, {}, loc));
  }
  // in-place ops rebind this tensor (and its copies) to the op's result
  const sym_tensor& add_(const sym_tensor& other, std::source_location loc = std::source_location::current()) const {
    rebind(record("aten::add_.Tensor", {*this, other}, {}, loc).out());
    return *this;
  }
  const sym_tensor& mul_(double s, std::source_location loc = std::source_location::current()) const {
    rebind(record("aten::mul_.Scalar", {*this, s}, {}, loc).out());
    return *this;
  }
  const sym_tensor& relu_(std::source_location loc = std::source_location::current()) const {
    rebind(record("aten::relu_", {*this}, {}, loc).out());
    return *this;
  }

 private:
  std::shared_ptr<detail::sym_slot> s_;
};

/// The first operand of an operator, with the source location of the expression it is in
/// (operators cannot take a defaulted std::source_location of their own).
struct located {
  located(const sym_tensor& t, std::source_location l = std::source_location::current()) : x(t), loc(l) {}  // NOLINT
  const sym_tensor& x;
  std::source_location loc;
};

/// Calls any operator by name on symbolic tensors: `xport::call("aten::erf", {x})`.
inline node call(std::string_view op, const sym_tensor& any, std::vector<argument> args, std::vector<kwarg> kwargs = {},
                 std::source_location loc = std::source_location::current()) {
  return any.record(op, std::move(args), std::move(kwargs), loc);
}

namespace detail {
inline sym_tensor unary(std::string_view op, const sym_tensor& x, const std::source_location& loc) {
  return x.wrap(x.record(op, {x}, {}, loc));
}
}  // namespace detail

// ---- elementwise (at::sin, at::relu, ...) ---------------------------------------------------------
#define XPORT_STRICT_UNARY(name, op)                                                               \
  inline sym_tensor name(const sym_tensor& x, std::source_location loc = std::source_location::current()) { \
    return detail::unary(op, x, loc);                                                              \
  }
XPORT_STRICT_UNARY(sin, "aten::sin")
XPORT_STRICT_UNARY(cos, "aten::cos")
XPORT_STRICT_UNARY(tan, "aten::tan")
XPORT_STRICT_UNARY(exp, "aten::exp")
XPORT_STRICT_UNARY(log, "aten::log")
XPORT_STRICT_UNARY(sqrt, "aten::sqrt")
XPORT_STRICT_UNARY(rsqrt, "aten::rsqrt")
XPORT_STRICT_UNARY(abs, "aten::abs")
XPORT_STRICT_UNARY(neg, "aten::neg")
XPORT_STRICT_UNARY(erf, "aten::erf")
XPORT_STRICT_UNARY(relu, "aten::relu")
XPORT_STRICT_UNARY(sigmoid, "aten::sigmoid")
XPORT_STRICT_UNARY(tanh, "aten::tanh")
XPORT_STRICT_UNARY(silu, "aten::silu")
XPORT_STRICT_UNARY(floor, "aten::floor")
XPORT_STRICT_UNARY(ceil, "aten::ceil")
#undef XPORT_STRICT_UNARY

inline sym_tensor gelu(const sym_tensor& x, std::string approximate = "none",
                       std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::gelu", {x}, {{"approximate", std::move(approximate)}}, loc));
}
inline sym_tensor leaky_relu(const sym_tensor& x, double slope = 0.01, std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::leaky_relu", {x, slope}, {}, loc));
}
inline sym_tensor clamp(const sym_tensor& x, std::optional<double> lo, std::optional<double> hi,
                        std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::clamp", {x, lo, hi}, {}, loc));
}
inline sym_tensor pow(const sym_tensor& x, double e, std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::pow.Tensor_Scalar", {x, e}, {}, loc));
}
inline sym_tensor where(const sym_tensor& c, const sym_tensor& a, const sym_tensor& b,
                        std::source_location loc = std::source_location::current()) {
  return a.wrap(a.record("aten::where.self", {c, a, b}, {}, loc));
}
inline sym_tensor maximum(const sym_tensor& a, const sym_tensor& b, std::source_location loc = std::source_location::current()) {
  return a.wrap(a.record("aten::maximum", {a, b}, {}, loc));
}
inline sym_tensor minimum(const sym_tensor& a, const sym_tensor& b, std::source_location loc = std::source_location::current()) {
  return a.wrap(a.record("aten::minimum", {a, b}, {}, loc));
}

// ---- operators: the overloads at::Tensor's operators call ----------------------------------------
inline sym_tensor operator+(located a, const sym_tensor& b) { return a.x.wrap(a.x.record("aten::add.Tensor", {a.x, b}, {}, a.loc)); }
inline sym_tensor operator-(located a, const sym_tensor& b) { return a.x.wrap(a.x.record("aten::sub.Tensor", {a.x, b}, {}, a.loc)); }
inline sym_tensor operator*(located a, const sym_tensor& b) { return a.x.wrap(a.x.record("aten::mul.Tensor", {a.x, b}, {}, a.loc)); }
inline sym_tensor operator/(located a, const sym_tensor& b) { return a.x.wrap(a.x.record("aten::div.Tensor", {a.x, b}, {}, a.loc)); }
inline sym_tensor operator+(located a, double s) { return a.x.wrap(a.x.record("aten::add.Scalar", {a.x, s}, {}, a.loc)); }
inline sym_tensor operator-(located a, double s) { return a.x.wrap(a.x.record("aten::sub.Scalar", {a.x, s}, {}, a.loc)); }
inline sym_tensor operator*(located a, double s) { return a.x.wrap(a.x.record("aten::mul.Scalar", {a.x, s}, {}, a.loc)); }
inline sym_tensor operator/(located a, double s) { return a.x.wrap(a.x.record("aten::div.Scalar", {a.x, s}, {}, a.loc)); }
inline sym_tensor operator-(located a) { return a.x.wrap(a.x.record("aten::neg", {a.x}, {}, a.loc)); }
inline sym_tensor operator>(located a, double s) { return a.x.wrap(a.x.record("aten::gt.Scalar", {a.x, s}, {}, a.loc)); }
inline sym_tensor operator<(located a, double s) { return a.x.wrap(a.x.record("aten::lt.Scalar", {a.x, s}, {}, a.loc)); }

// ---- reductions, linear algebra, shapes, nn ---------------------------------------------------------
inline sym_tensor softmax(const sym_tensor& x, std::int64_t dim, std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::softmax.int", {x, dim}, {}, loc));
}
inline sym_tensor log_softmax(const sym_tensor& x, std::int64_t dim, std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::log_softmax.int", {x, dim}, {}, loc));
}
inline sym_tensor matmul(const sym_tensor& a, const sym_tensor& b, std::source_location loc = std::source_location::current()) {
  return a.wrap(a.record("aten::matmul", {a, b}, {}, loc));
}
inline sym_tensor mm(const sym_tensor& a, const sym_tensor& b, std::source_location loc = std::source_location::current()) {
  return a.wrap(a.record("aten::mm", {a, b}, {}, loc));
}
inline sym_tensor bmm(const sym_tensor& a, const sym_tensor& b, std::source_location loc = std::source_location::current()) {
  return a.wrap(a.record("aten::bmm", {a, b}, {}, loc));
}
inline sym_tensor addmm(const sym_tensor& bias, const sym_tensor& a, const sym_tensor& b,
                        std::source_location loc = std::source_location::current()) {
  return a.wrap(a.record("aten::addmm", {bias, a, b}, {}, loc));
}
inline sym_tensor linear(const sym_tensor& x, const sym_tensor& w, const std::optional<sym_tensor>& b = std::nullopt,
                         std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::linear", {x, w, b ? argument(*b) : argument()}, {}, loc));
}
inline sym_tensor cat(const std::vector<sym_tensor>& xs, std::int64_t dim = 0,
                      std::source_location loc = std::source_location::current()) {
  argument::list_type l(xs.begin(), xs.end());
  return xs.at(0).wrap(xs.at(0).record("aten::cat", {std::move(l), dim}, {}, loc));
}
inline sym_tensor stack(const std::vector<sym_tensor>& xs, std::int64_t dim = 0,
                        std::source_location loc = std::source_location::current()) {
  argument::list_type l(xs.begin(), xs.end());
  return xs.at(0).wrap(xs.at(0).record("aten::stack", {std::move(l), dim}, {}, loc));
}
inline sym_tensor conv2d(const sym_tensor& x, const sym_tensor& w, const std::optional<sym_tensor>& b,
                         std::vector<std::int64_t> stride = {1, 1}, std::vector<std::int64_t> padding = {0, 0},
                         std::vector<std::int64_t> dilation = {1, 1}, std::int64_t groups = 1,
                         std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::conv2d", {x, w, b ? argument(*b) : argument(), stride, padding, dilation, groups}, {}, loc));
}
inline sym_tensor max_pool2d(const sym_tensor& x, std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride = {},
                             std::vector<std::int64_t> padding = {0, 0}, std::vector<std::int64_t> dilation = {1, 1},
                             bool ceil_mode = false, std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::max_pool2d", {x, kernel, stride, padding, dilation, ceil_mode}, {}, loc));
}
inline sym_tensor adaptive_avg_pool2d(const sym_tensor& x, std::vector<std::int64_t> size,
                                      std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::adaptive_avg_pool2d", {x, size}, {}, loc));
}
inline sym_tensor dropout(const sym_tensor& x, double p, bool train, std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::dropout", {x, p, train}, {}, loc));
}
inline sym_tensor layer_norm(const sym_tensor& x, std::vector<std::int64_t> shape, const std::optional<sym_tensor>& w = std::nullopt,
                             const std::optional<sym_tensor>& b = std::nullopt, double eps = 1e-5,
                             std::source_location loc = std::source_location::current()) {
  return x.wrap(x.record("aten::layer_norm", {x, shape, w ? argument(*w) : argument(), b ? argument(*b) : argument(), eps, true}, {}, loc));
}
inline sym_tensor embedding(const sym_tensor& w, const sym_tensor& idx, std::source_location loc = std::source_location::current()) {
  return w.wrap(w.record("aten::embedding", {w, idx}, {}, loc));
}

namespace detail {

/// `x` with every at::Tensor leaf replaced by make(leaf) (a sym_tensor); containers of tensors
/// become the same containers of sym_tensor (c10::Dict becomes std::map).
template <class T, class F>
auto to_sym(const T& x, F& make) {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return make(x);
  } else if constexpr (is_scalar_leaf<T> || std::is_same_v<T, std::string>) {
    return x;
  } else if constexpr (is_optional<T>::value) {
    using U = decltype(to_sym(std::declval<const typename T::value_type&>(), make));
    return x ? std::optional<U>(to_sym(*x, make)) : std::optional<U>();
  } else if constexpr (is_vector<T>::value || is_std_array<T>::value) {
    using U = decltype(to_sym(std::declval<const typename T::value_type&>(), make));
    std::vector<U> out;
    for (const auto& e : x) out.push_back(to_sym(e, make));
    return out;
  } else if constexpr (is_tuple_like<T>::value) {
    return std::apply([&](const auto&... es) { return std::tuple{to_sym(es, make)...}; }, x);
  } else if constexpr (is_string_map<T>::value) {
    using U = decltype(to_sym(std::declval<const typename T::mapped_type&>(), make));
    std::map<std::string, U> out;
    for (const auto& [k, v] : x) out.emplace(k, to_sym(v, make));
    return out;
  } else if constexpr (is_c10_dict<T>::value) {
    using U = decltype(to_sym(std::declval<const typename T::mapped_type&>(), make));
    std::map<std::string, U> out;
    for (const auto& e : x) out.emplace(e.key(), to_sym(e.value(), make));
    return out;
  } else {
    static_assert(dependent_false<T>, "xport: unsupported input type (see flatten_into)");
  }
}

}  // namespace detail

XPORT_END_NAMESPACE
// #include <xport/trace/control_flow.hpp>
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

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/op.hpp>
// #include <xport/ops/meta_infer.hpp>
// #include <xport/program/verify.hpp>
// #include <xport/trace/capture.hpp>
// #include <xport/trace/strict.hpp>
// #include <xport/trace/tree.hpp>

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
  std::vector<value> operand_values;
  auto of = [&](const at::Tensor& t) { operand_values.push_back(outer->value_of(t)); };
  (void)detail::flatten_into(operands, of);
  std::optional<R> result;
  const detail::branch_tracer body = [&](detail::capture& c, const std::vector<value>&, const std::vector<at::Tensor>& metas) {
    std::size_t k = 0;
    auto to_meta = [&](const at::Tensor&) { return metas.at(k++); };
    const auto args = detail::map_tensors(operands, to_meta);
    {
      detail::capture_scope scope(c);
      const c10::AutoGradMode mode(enabled);
      result.emplace(std::apply(fn, args));
    }
    std::vector<value> outs;
    auto out = [&](const at::Tensor& t) { outs.push_back(c.value_of(t)); };
    (void)detail::flatten_into(*result, out);
    return outs;
  };
  const auto r = detail::trace_set_grad_enabled(*outer, enabled, std::move(operand_values), body);
  std::size_t k = 0;
  auto from_node = [&](const at::Tensor&) { return r.metas.at(k++); };
  return detail::map_tensors(*result, from_node);
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
// #include <xport/trace/dynamic.hpp>
// xport/trace/dynamic.hpp: the dynamic_shapes argument of export (torch.export.Dim and friends).
//
//   auto batch = xport::Dim("batch", 1, 1024);
//   auto p = xport::export_program(model, std::tuple{x}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
//   // p prints `x: "f32[s0, 3, 224, 224]"` and `Range constraints: {s0: VR[1, 1024]}`
//
// A spec mirrors the inputs: per argument (by name, or positionally), per dimension (a map from
// dimension index, or one entry per dimension with xport::shape(...)), nested like the inputs
// (shape_spec::list / shape_spec::dict). A dimension is a named Dim (strict: export fails if the
// code fixes or narrows it), a derived Dim (`2*batch`, `batch + 1`), a hint (Dim::automatic,
// Dim::dynamic, Dim::static_), an int (static, must match) or std::nullopt (static).

#include <algorithm>         // std::sort, std::find
#include <cstddef>           // std::size_t
#include <cstdint>           // std::int64_t
#include <initializer_list>  // std::initializer_list
#include <map>               // std::map
#include <optional>          // std::optional
#include <string>            // std::string
#include <type_traits>       // std::is_integral_v
#include <utility>           // std::pair
#include <variant>           // std::variant
#include <vector>            // std::vector

#include <ATen/core/Tensor.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/sym_expr.hpp>
// #include <xport/ir/treespec.hpp>

XPORT_BEGIN_NAMESPACE

/// Dim::automatic, Dim::dynamic, Dim::static_ (torch's Dim.AUTO / DYNAMIC / STATIC); callable
/// for bounds: `Dim::dynamic(std::nullopt, 64)`.
struct dim_hint {
  enum class kind : std::uint8_t { automatic, dynamic, static_ };
  kind type = kind::automatic;
  std::optional<std::int64_t> min, max;

  [[nodiscard]] dim_hint operator()(std::optional<std::int64_t> lo = std::nullopt,
                                    std::optional<std::int64_t> hi = std::nullopt) const {
    if (lo && *lo < 0) throw export_error("xport.export.dynamic_shapes", "Dim hint min must be non-negative");
    if (lo && hi && *lo > *hi) throw export_error("xport.export.dynamic_shapes", "Dim hint min must be <= max");
    return {type, lo, hi};
  }
  /// torch's repr: `DimHint(DYNAMIC)`, `DimHint(AUTO, min=16)`.
  [[nodiscard]] std::string str() const {
    std::string s = "DimHint(";
    s += type == kind::automatic ? "AUTO" : type == kind::dynamic ? "DYNAMIC" : "STATIC";
    if (min) s += ", min=" + std::to_string(*min);
    if (max) s += ", max=" + std::to_string(*max);
    return s + ")";
  }
};

/// A named dynamic dimension, or a dimension derived from one (`2*batch`, `batch + 1`). Dims
/// with the same name are the same dimension.
class Dim {
 public:
  /// torch's defaults: min 0, max infinity.
  explicit Dim(std::string name, std::optional<std::int64_t> min = std::nullopt,
               std::optional<std::int64_t> max = std::nullopt)
      : root_(std::move(name)), min_(min.value_or(0)), max_(max.value_or(int_oo)) {
    if (!is_identifier(root_))
      throw export_error("xport.export.dynamic_shapes", "Dim name must be a valid identifier, got " + root_);
    if (!(max_ > min_))
      throw export_error("xport.export.dynamic_shapes", "Cannot create Dim with inconsistent min=" +
                                                            std::to_string(min_) + ", max=" + bound(max_));
    if (min_ < 0)
      throw export_error("xport.export.dynamic_shapes",
                         "Cannot create Dim " + root_ + " with min=" + std::to_string(min_) + ": sizes are >= 0");
  }

  static constexpr dim_hint automatic{dim_hint::kind::automatic, std::nullopt, std::nullopt};
  static constexpr dim_hint dynamic{dim_hint::kind::dynamic, std::nullopt, std::nullopt};
  static constexpr dim_hint static_{dim_hint::kind::static_, std::nullopt, std::nullopt};

  /// The name: the root's, or the derived expression as sympy prints it (`2*batch + 1`).
  [[nodiscard]] std::string name() const {
    if (!derived()) return root_;
    std::string s = a_ == 1 ? root_ : std::to_string(a_) + "*" + root_;
    if (b_ > 0) s += " + " + std::to_string(b_);
    if (b_ < 0) s += " - " + std::to_string(-b_);
    return s;
  }
  [[nodiscard]] const std::string& root() const noexcept { return root_; }
  [[nodiscard]] bool derived() const noexcept { return a_ != 1 || b_ != 0; }
  [[nodiscard]] std::int64_t scale() const noexcept { return a_; }
  [[nodiscard]] std::int64_t offset() const noexcept { return b_; }
  /// The root's bounds.
  [[nodiscard]] std::int64_t root_min() const noexcept { return min_; }
  [[nodiscard]] std::int64_t root_max() const noexcept { return max_; }
  /// This dimension's bounds (derived: the root's, mapped).
  [[nodiscard]] std::int64_t min() const noexcept { return a_ * min_ + b_; }
  [[nodiscard]] std::int64_t max() const noexcept { return max_ == int_oo ? int_oo : a_ * max_ + b_; }

  /// torch's readable form: `Dim('batch', min=0)`, `Dim('batch', min=1, max=1024)`, `2*batch`.
  [[nodiscard]] std::string str() const {
    if (derived()) return name();
    std::string s = "Dim('" + root_ + "'";
    if (min_ != 2) s += ", min=" + std::to_string(min_);
    if (max_ != int_oo) s += ", max=" + std::to_string(max_);
    return s + ")";
  }

  friend Dim operator*(const Dim& d, std::int64_t k) {
    if (k <= 0) fail_op("Attempted to multiply " + std::to_string(k) + " with " + d.name() +
                        ", where a positive integer was expected.");
    Dim r = d;
    r.a_ *= k;
    r.b_ *= k;
    return r.checked();
  }
  friend Dim operator*(std::int64_t k, const Dim& d) { return d * k; }
  friend Dim operator+(const Dim& d, std::int64_t k) {
    Dim r = d;
    r.b_ += k;
    return r.checked();
  }
  friend Dim operator+(std::int64_t k, const Dim& d) { return d + k; }
  friend Dim operator-(const Dim& d, std::int64_t k) { return d + (-k); }
  /// `k - dim` decreases: torch refuses it, and so does xport (at run time: C++ cannot say it earlier).
  friend Dim operator-(std::int64_t, const Dim& d) { fail_op("Attempted to negate " + d.name() + "."); }
  friend Dim operator+(const Dim& d, const Dim& o) {
    fail_op("Attempted to add " + o.name() + " to " + d.name() + ", where an integer was expected.");
  }
  friend Dim operator-(const Dim& d, const Dim& o) {
    fail_op("Attempted to subtract " + o.name() + " from " + d.name() + ", where an integer was expected.");
  }
  friend Dim operator*(const Dim& d, const Dim& o) {
    fail_op("Attempted to multiply " + o.name() + " with " + d.name() + ", where a positive integer was expected.");
  }

 private:
  [[noreturn]] static void fail_op(const std::string& what) {
    throw export_error("xport.export.dynamic_shapes",
                       what + " (Only increasing linear operations with integer coefficients are supported.)");
  }
  Dim checked() const {
    if (min() < 0)
      throw export_error("xport.export.dynamic_shapes",
                         "Derived dim " + name() + " would have min " + std::to_string(min()) +
                             " for " + root_ + " = " + std::to_string(min_) +
                             ": sizes are >= 0; raise the min of Dim('" + root_ + "')");
    return *this;
  }
  static std::string bound(std::int64_t v) { return v == int_oo ? "int_oo" : std::to_string(v); }
  static bool is_identifier(const std::string& s) {
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
    for (char c : s)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
  }

  std::string root_;
  std::int64_t min_, max_;
  std::int64_t a_ = 1, b_ = 0;
};

/// What one dimension of one input is: static (None or an int), a Dim, or a hint.
class dim_spec {
 public:
  dim_spec() = default;
  dim_spec(std::nullopt_t) {}                          // NOLINT
  dim_spec(Dim d) : v_(std::move(d)) {}                // NOLINT
  dim_spec(dim_hint h) : v_(h) {}                      // NOLINT
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  dim_spec(I n) : v_(static_cast<std::int64_t>(n)) {}  // NOLINT

  [[nodiscard]] bool is_none() const noexcept { return v_.index() == 0; }
  [[nodiscard]] const std::int64_t* fixed() const noexcept { return std::get_if<std::int64_t>(&v_); }
  [[nodiscard]] const Dim* dim() const noexcept { return std::get_if<Dim>(&v_); }
  [[nodiscard]] const dim_hint* hint() const noexcept { return std::get_if<dim_hint>(&v_); }
  /// As torch's messages show it.
  [[nodiscard]] std::string str() const {
    if (is_none()) return "None";
    if (fixed()) return std::to_string(*fixed());
    if (dim()) return dim()->str();
    return hint()->str();
  }

 private:
  std::variant<std::monostate, std::int64_t, Dim, dim_hint> v_;
};

/// The spec of one input: None (all static), a tensor's dims (by index: `{{0, batch}}`, or all of
/// them: xport::shape(batch, 3, Dim::static_)), or a container's items (list / dict).
class shape_spec {
 public:
  enum class kind : std::uint8_t { none, by_index, sizes, list, dict };

  shape_spec() = default;
  shape_spec(std::nullopt_t) {}  // NOLINT
  shape_spec(std::initializer_list<std::pair<const std::int64_t, dim_spec>> dims)  // NOLINT
      : kind_(kind::by_index), by_index_(dims) {}
  static shape_spec sizes(std::vector<dim_spec> dims) {
    shape_spec s;
    s.kind_ = kind::sizes;
    s.sizes_ = std::move(dims);
    return s;
  }
  static shape_spec list(std::vector<shape_spec> items) {
    shape_spec s;
    s.kind_ = kind::list;
    s.items_ = std::move(items);
    return s;
  }
  static shape_spec dict(std::vector<std::pair<std::string, shape_spec>> items) {
    shape_spec s;
    s.kind_ = kind::dict;
    for (auto& [k, v] : items) {
      s.keys_.push_back(std::move(k));
      s.items_.push_back(std::move(v));
    }
    return s;
  }

  [[nodiscard]] kind type() const noexcept { return kind_; }
  [[nodiscard]] const std::map<std::int64_t, dim_spec>& by_index() const noexcept { return by_index_; }
  [[nodiscard]] const std::vector<dim_spec>& dims() const noexcept { return sizes_; }
  [[nodiscard]] const std::vector<shape_spec>& items() const noexcept { return items_; }
  [[nodiscard]] const std::vector<std::string>& keys() const noexcept { return keys_; }

  /// As Python would print the spec: `{0: Dim('batch', min=0)}`, `(Dim('b'), 3)`, `None`.
  [[nodiscard]] std::string str() const {
    std::string s;
    switch (kind_) {
      case kind::none: return "None";
      case kind::by_index:
        for (const auto& [i, d] : by_index_) s += (s.empty() ? "" : ", ") + std::to_string(i) + ": " + d.str();
        return "{" + s + "}";
      case kind::sizes:
        for (const auto& d : sizes_) s += (s.empty() ? "" : ", ") + d.str();
        return "(" + s + (sizes_.size() == 1 ? ",)" : ")");
      case kind::list:
        for (const auto& d : items_) s += (s.empty() ? "" : ", ") + d.str();
        return "[" + s + "]";
      case kind::dict:
        for (std::size_t i = 0; i < items_.size(); ++i)
          s += (i ? ", " : "") + ("'" + keys_[i] + "': ") + items_[i].str();
        return "{" + s + "}";
    }
    return "?";
  }

 private:
  kind kind_ = kind::none;
  std::map<std::int64_t, dim_spec> by_index_;
  std::vector<dim_spec> sizes_;
  std::vector<shape_spec> items_;
  std::vector<std::string> keys_;
};

/// Every dimension of a tensor, in order: `xport::shape(batch, 3, xport::Dim::static_)`.
template <class... D>
shape_spec shape(D&&... dims) {
  return shape_spec::sizes({dim_spec(std::forward<D>(dims))...});
}

/// Several Dims with the same bounds: `auto hw = xport::dims({"h", "w"}, 1, 512);` (torch's dims()).
inline std::vector<Dim> dims(const std::vector<std::string>& names, std::optional<std::int64_t> min = std::nullopt,
                             std::optional<std::int64_t> max = std::nullopt) {
  std::vector<Dim> out;
  for (const auto& n : names) out.emplace_back(n, min, max);
  return out;
}

/// export's `dynamic_shapes`: by argument name (`{{"x", {{0, batch}}}}`) or positional.
class dynamic_shapes {
 public:
  dynamic_shapes() = default;
  dynamic_shapes(std::initializer_list<std::pair<std::string, shape_spec>> by_name)  // NOLINT
      : named_(true) {
    for (const auto& [k, v] : by_name) {
      keys_.push_back(k);
      items_.push_back(v);
    }
  }
  static dynamic_shapes positional(std::vector<shape_spec> items) {
    dynamic_shapes d;
    d.items_ = std::move(items);
    d.positional_ = true;
    return d;
  }

  [[nodiscard]] bool empty() const noexcept { return !named_ && !positional_; }
  [[nodiscard]] bool named() const noexcept { return named_; }
  [[nodiscard]] const std::vector<std::string>& keys() const noexcept { return keys_; }
  [[nodiscard]] const std::vector<shape_spec>& items() const noexcept { return items_; }

 private:
  bool named_ = false, positional_ = false;
  std::vector<std::string> keys_;
  std::vector<shape_spec> items_;
};

namespace detail {

/// torch's report of dynamic dims that the code or the examples do not allow, thrown as
/// constraint_violation (the one place that writes it):
///   Constraints violated (a, b)!
///     - <problem>
///   Suggested fixes:
///     <fix, one per line>
/// `dims` are sorted; without fixes there is no "Suggested fixes".
[[noreturn]] inline void throw_constraints_violated(std::vector<std::string> dims, const std::string& problem,
                                                    const std::vector<std::string>& fixes = {}) {
  std::sort(dims.begin(), dims.end());
  std::string msg = "Constraints violated (";
  for (std::size_t i = 0; i < dims.size(); ++i) msg += (i ? ", " : "") + dims[i];
  msg += ")!\n  - " + problem;
  if (!fixes.empty()) msg += "\nSuggested fixes:";
  for (const auto& f : fixes) msg += "\n  " + f;
  throw constraint_violation("xport.export.constraint_violation", msg);
}

/// One symbol of a dynamic export: a user's Dim, or a dimension marked with a hint.
struct dyn_root {
  std::string dim_name;  ///< the user's name (`batch`), or the input path for hints
  std::int64_t min = 0, max = int_oo;
  std::int64_t hint = -1;  ///< the example's value (-1 until an input gives it)
  bool named = true;       ///< a Dim (strict) rather than a hint
  bool automatic = false;  ///< Dim::automatic: falls back to static when the code specializes it
  std::string where;       ///< the first input dimension it came from: `x.shape[0]`
  std::string source;      ///< that dimension as torch names it: `L['x'].size()[0]`
};
/// One input dimension: static, or a*root + b.
struct dyn_dim {
  int root = -1;
  std::int64_t a = 1, b = 0;
};
/// The dynamic dims of every tensor input (in leaf order).
struct dyn_plan {
  std::vector<dyn_root> roots;
  std::vector<std::vector<dyn_dim>> leaves;
  [[nodiscard]] bool any() const noexcept { return !roots.empty(); }
};

class dyn_resolver {
 public:
  dyn_resolver(const std::vector<at::Tensor>& examples, const std::vector<std::string>& leaf_names)
      : examples_(examples), leaf_names_(leaf_names) {
    plan_.leaves.resize(examples.size());
    for (std::size_t i = 0; i < examples.size(); ++i)
      plan_.leaves[i].resize(static_cast<std::size_t>(examples[i].dim()));
  }

  dyn_plan resolve(const dynamic_shapes& spec, const treespec& in_spec, const std::vector<std::string>& arg_names) {
    const auto& args = in_spec.children;
    if (spec.named()) {
      auto want = arg_names, got = spec.keys();
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      if (want != got)
        fail("When `dynamic_shapes` is specified as a dict, its top-level keys must be the arg names " +
             list_repr(arg_names) + " of `inputs`, but here they are " + list_repr(spec.keys()) +
             ". Alternatively, you could also ignore arg names entirely and specify `dynamic_shapes` as a "
             "list/tuple matching `inputs` (xport::dynamic_shapes::positional), or name the arguments "
             "with export_options::input_names.");
      for (std::size_t i = 0; i < args.size(); ++i) {
        const auto k = static_cast<std::size_t>(
            std::find(spec.keys().begin(), spec.keys().end(), arg_names[i]) - spec.keys().begin());
        walk(args[i], spec.items()[k], "['" + arg_names[i] + "']", "L['" + arg_names[i] + "']");
      }
    } else {
      if (spec.items().size() != args.size())
        fail("`dynamic_shapes` has " + std::to_string(spec.items().size()) + " positional entries, but the "
             "program takes " + std::to_string(args.size()) + " argument(s); give one entry per argument "
             "(std::nullopt for an argument with only static sizes)");
      for (std::size_t i = 0; i < args.size(); ++i)
        walk(args[i], spec.items()[i], "[" + std::to_string(i) + "]", "L['" + arg_names[i] + "']");
    }
    solve_hints();
    return std::move(plan_);
  }

 private:
  [[noreturn]] static void fail(const std::string& msg) { throw export_error("xport.export.dynamic_shapes", msg); }
  static std::string list_repr(const std::vector<std::string>& xs) {
    std::string s;
    for (const auto& x : xs) s += (s.empty() ? "'" : ", '") + x + "'";
    return "[" + s + "]";
  }
  static std::string type_name(const treespec& t) {
    switch (t.type) {
      case treespec::kind::leaf: return "Tensor";
      case treespec::kind::constant: return t.value.is_string() ? "str" : t.value.is_double() ? "float" : t.value.is_bool() ? "bool" : "int";
      case treespec::kind::none: return "None";
      case treespec::kind::tuple: return "tuple";
      case treespec::kind::list: return "list";
      case treespec::kind::dict: return "dict";
      case treespec::kind::node: return t.short_type_name();
    }
    return "?";
  }

  // `path` locates the spec in messages; `source` is how torch names the same input (`L['x'][0]`)
  void walk(const treespec& t, const shape_spec& s, const std::string& path, const std::string& source) {
    using K = shape_spec::kind;
    if (s.type() == K::none) {
      leaf_ += t.num_leaves();
      return;
    }
    switch (t.type) {
      case treespec::kind::leaf: {
        if (s.type() == K::list || s.type() == K::dict)
          fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path +
               "` is a Tensor, but `dynamic_shapes" + path + "` is a " + (s.type() == K::list ? "list" : "dict") +
               " (" + s.str() + ")");
        tensor(leaf_++, s, path, source);
        return;
      }
      case treespec::kind::node:  // a dataclass: a dict of its fields, or a list of its children
        if (!t.keys.empty() && s.type() == K::dict) {
          walk_dict(t, s, path, source);
          return;
        }
        [[fallthrough]];
      case treespec::kind::tuple:
      case treespec::kind::list: {
        if (s.type() != K::list)
          fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path + "` is a " +
               type_name(t) + ", but `dynamic_shapes" + path + "` is not (it is " + s.str() +
               "; use xport::shape_spec::list)");
        if (s.items().size() != t.children.size())
          fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path + "` has " +
               std::to_string(t.children.size()) + " elements, but `dynamic_shapes" + path + "` has " +
               std::to_string(s.items().size()) + " elements");
        for (std::size_t i = 0; i < t.children.size(); ++i)
          walk(t.children[i], s.items()[i], path + "[" + std::to_string(i) + "]", source + "[" + std::to_string(i) + "]");
        return;
      }
      case treespec::kind::dict: {
        if (s.type() != K::dict)
          fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path +
               "` is a dict, but `dynamic_shapes" + path + "` is not (it is " + s.str() +
               "; use xport::shape_spec::dict)");
        walk_dict(t, s, path, source);
        return;
      }
      default:
        fail("Cannot associate shape " + s.str() + " specified at `dynamic_shapes" + path + "` to non-tensor type " +
             type_name(t) + " at `inputs" + path + "` (expected None)");
    }
  }

  // a dict, or a node with field names, against a dict of specs
  void walk_dict(const treespec& t, const shape_spec& s, const std::string& path, const std::string& source) {
    auto want = t.keys, got = s.keys();
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    if (want != got)
      fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path +
           "` has keys " + list_repr(t.keys) + ", but `dynamic_shapes" + path + "` has keys " + list_repr(s.keys()));
    for (std::size_t i = 0; i < t.children.size(); ++i) {
      const auto k = static_cast<std::size_t>(std::find(s.keys().begin(), s.keys().end(), t.keys[i]) - s.keys().begin());
      walk(t.children[i], s.items()[k], path + "['" + t.keys[i] + "']", source + "['" + t.keys[i] + "']");
    }
  }

  void tensor(std::size_t leaf, const shape_spec& s, const std::string& path, const std::string& source) {
    const auto& ex = examples_[leaf];
    const auto n = ex.dim();
    auto shape_text = [&] {
      std::string t;
      for (auto v : ex.sizes()) t += (t.empty() ? "" : ", ") + std::to_string(v);
      return "torch.Size([" + t + "])";
    };
    if (s.type() == shape_spec::kind::sizes) {
      if (static_cast<std::int64_t>(s.dims().size()) != n)
        fail("Expected dynamic shape spec " + s.str() + " specified at `dynamic_shapes" + path +
             "` to have the same length as the actual tensor shape " + shape_text() + " (expected " +
             std::to_string(n) + ", but got " + std::to_string(s.dims().size()) + " instead)");
      for (std::int64_t d = 0; d < n; ++d) one(leaf, d, s.dims()[static_cast<std::size_t>(d)], path, source);
      return;
    }
    for (const auto& [d, spec] : s.by_index()) {
      if (d < 0 || d >= n)
        fail("Dynamic shape spec " + s.str() + " specified at `dynamic_shapes" + path + "` names dimension " +
             std::to_string(d) + ", but the tensor at `inputs" + path + "` has shape " + shape_text() + " (" +
             std::to_string(n) + " dimension(s))");
      one(leaf, d, spec, path, source);
    }
  }

  void one(std::size_t leaf, std::int64_t d, const dim_spec& spec, const std::string& path, const std::string& source) {
    const auto size = examples_[leaf].size(d);
    const auto where = leaf_names_[leaf] + ".shape[" + std::to_string(d) + "]";
    const auto dim_source = source + ".size()[" + std::to_string(d) + "]";
    auto& slot = plan_.leaves[leaf][static_cast<std::size_t>(d)];
    if (spec.is_none()) return;
    if (const auto* f = spec.fixed()) {
      if (*f != size)
        fail("`dynamic_shapes" + path + "` gives dimension " + std::to_string(d) + " the static size " +
             std::to_string(*f) + ", but the example input " + where + " is " + std::to_string(size));
      return;
    }
    if (const auto* h = spec.hint()) {
      if (h->type == dim_hint::kind::static_) return;
      dyn_root r;
      r.dim_name = where;
      r.min = h->min.value_or(0);
      r.max = h->max.value_or(int_oo);
      r.named = false;
      r.automatic = h->type == dim_hint::kind::automatic;
      r.where = where;
      r.source = dim_source;
      r.hint = size;
      if (size < r.min || size > r.max)
        fail("the example size " + std::to_string(size) + " of " + where + " is outside " + h->str() + " given at `dynamic_shapes" +
             path + "[" + std::to_string(d) + "]`");
      slot.root = static_cast<int>(plan_.roots.size());
      plan_.roots.push_back(std::move(r));
      return;
    }
    const Dim& dim = *spec.dim();
    int root = -1;
    for (std::size_t i = 0; i < plan_.roots.size(); ++i)
      if (plan_.roots[i].named && plan_.roots[i].dim_name == dim.root()) root = static_cast<int>(i);
    if (root < 0) {
      dyn_root r;
      r.dim_name = dim.root();
      r.min = dim.root_min();
      r.max = dim.root_max();
      r.source = dim_source;
      root = static_cast<int>(plan_.roots.size());
      plan_.roots.push_back(std::move(r));
    } else {
      auto& r = plan_.roots[static_cast<std::size_t>(root)];
      if (r.min != dim.root_min() || r.max != dim.root_max()) {
        const Dim mine(dim.root(), dim.root_min(), dim.root_max());
        fail("Found different definitions " + def_of(root).str() + " and " + mine.str() +
             " for the same symbolic dimension " + dim.root() + "!");
      }
    }
    slot = {root, dim.scale(), dim.offset()};
    uses_.push_back({leaf, d, dim, path});
  }

  /// The user's definition of a named root.
  Dim def_of(int root) const {
    const auto& r = plan_.roots[static_cast<std::size_t>(root)];
    return Dim(r.dim_name, r.min, r.max);
  }

  // Hints of named roots: from a direct use, else solved from a derived one; then every use must
  // agree and lie in range.
  void solve_hints() {
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& u : uses_) {
        auto& r = plan_.roots[static_cast<std::size_t>(slot_of(u).root)];
        if (r.hint >= 0) continue;
        const auto size = examples_[u.leaf].size(u.dim);
        const auto where = leaf_names_[u.leaf] + ".shape[" + std::to_string(u.dim) + "]";
        if (!u.spec.derived()) {
          r.hint = size;
          r.where = where;
        } else if (pass == 1) {
          const auto a = u.spec.scale(), b = u.spec.offset();
          if ((size - b) % a != 0 || (size - b) / a < 0)
            throw constraint_violation("xport.export.constraint_violation",
                                       "Expected shape[" + std::to_string(u.dim) + "] = " + std::to_string(size) +
                                           " of input Tensor " + leaf_names_[u.leaf] + " to be of the form " +
                                           u.spec.name() + ", where " + u.spec.root() + " is an integer");
          r.hint = (size - b) / a;
          r.where = where;
        }
      }
    for (const auto& u : uses_) {
      const auto& r = plan_.roots[static_cast<std::size_t>(slot_of(u).root)];
      const auto size = examples_[u.leaf].size(u.dim);
      const auto where = leaf_names_[u.leaf] + ".shape[" + std::to_string(u.dim) + "]";
      const auto want = u.spec.scale() * r.hint + u.spec.offset();
      if (want != size)
        throw_constraints_violated({u.spec.root()}, where + " = " + std::to_string(size) + " is not equal to " +
                                                        (u.spec.derived() ? u.spec.name() + " = " : "") + std::to_string(want) +
                                                        " (" + u.spec.root() + " = " + std::to_string(r.hint) + " from " +
                                                        r.where + "): the example inputs must satisfy the relations dynamic_shapes states");
      if (r.hint < r.min || r.hint > r.max)
        fail("the example inputs give " + r.dim_name + " = " + std::to_string(r.hint) + " (from " + r.where +
             "), outside " + def_of(slot_of(u).root).str() + "; pick example sizes inside the Dim's range");
    }
  }

  struct use_site {
    std::size_t leaf;
    std::int64_t dim;
    Dim spec;
    std::string path;
  };
  const dyn_dim& slot_of(const use_site& u) const { return plan_.leaves[u.leaf][static_cast<std::size_t>(u.dim)]; }

  const std::vector<at::Tensor>& examples_;
  const std::vector<std::string>& leaf_names_;
  dyn_plan plan_;
  std::vector<use_site> uses_;
  std::size_t leaf_ = 0;
};

}  // namespace detail

XPORT_END_NAMESPACE
// #include <xport/trace/symbolic.hpp>
// xport/trace/symbolic.hpp: symbolic sizes for a dynamic export.
//
// Note [Capturing at several sizes]: LibTorch's C++ ops compute sizes as plain integers (meta
// kernels, and `size()` in user code), so one capture cannot see how a size depends on a
// dynamic dimension. Export therefore captures the program once at the example sizes and again
// with each dynamic dimension moved to another value (and once with all of them moved), on meta
// tensors: a few captures cost well under a millisecond each. Then:
//  - the captures must record the same ops in the same order, with the same arguments except
//    integers; otherwise the traced code decided something on a size (it specialized the dim),
//    and export fails with torch's "Constraints violated" report naming the dim and the op;
//  - every size of every node, and every integer argument that changed (sizes the code computed
//    with `size()`), is fitted as an exact expression of the dims: a linear form in the dims, or
//    c*P + b where P is a product of the node's input sizes or a shape rule's result (convolution
//    and pooling windows: `((s0 - 3)//2) + 1`), checked against every capture.
// Integer arguments that depend on a dim are recorded as symbolic arguments, evaluated from the
// inputs' sizes on every run. Because the other sizes are >= 2, an example size of 0 or 1 is never
// specialized silently: either the program is right for every size, or a capture fails and
// export names the op.

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <optional>   // std::optional
#include <set>        // std::set
#include <string>     // std::string
#include <string_view>  // std::string_view
#include <vector>     // std::vector

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

// #include <xport/config.hpp>
// #include <xport/ops/higher_order.hpp>
// #include <xport/ops/op_sets.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/ops/shape_formulas.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/sym_expr.hpp>
// #include <xport/trace/dynamic.hpp>
// #include <xport/trace/unbacked.hpp>
// #include <xport/ir/unbacked.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Thrown inside the dynamic export when a capture at other sizes shows that the code fixes a
/// dim; caught to fall back to static for Dim::automatic, reported otherwise.
struct dim_specialized {
  int root;
  std::string why;
};
/// Two dims the code needs equal (they work when moved together).
struct dims_related {
  int root, other;
  std::string why;
};
/// A dim that works only in part of its range: [lo, hi] is the part found to work.
struct dim_narrowed {
  int root;
  std::int64_t lo, hi;
  std::int64_t bad;
  std::string why;
};

/// The dims of a symbolic program and their values in each capture (0 = the example's; capture
/// j in 1..k moved dim j-1 alone; the last moved all of them).
struct sym_runs {
  std::vector<sym_int> symbols;
  std::vector<std::string> dim_names;           ///< for messages: `batch`
  std::vector<std::vector<std::int64_t>> values;  ///< per capture, per symbol
  std::vector<int> moved;                         ///< per capture: the one dim it moved, or -1
};

class symbolic_fitter {
 public:
  explicit symbolic_fitter(const sym_runs& runs) : runs_(runs) {
    for (const auto& s : runs.symbols) names_.push_back(s.str());
  }

  /// The value of `e` in capture `run`.
  [[nodiscard]] std::int64_t eval(const sym_int& e, std::size_t run) const {
    if (e.is_constant()) return e.hint();
    const auto& values = runs_.values[run];
    auto v = sym::eval(e, [&](std::string_view name) -> std::optional<std::int64_t> {
      for (std::size_t i = 0; i < names_.size(); ++i)
        if (names_[i] == name) return values[i];
      return std::nullopt;
    });
    return v.value_or(e.hint());
  }

  /// An exact expression taking value obs[r] in every capture r, or nullopt. `basis` holds
  /// candidate expressions (products of input sizes, shape-rule results).
  [[nodiscard]] std::optional<sym_int> fit(const std::vector<std::int64_t>& obs, const std::vector<sym_int>& basis,
                                           const std::vector<sym_int>& rules = {}) const {
    bool all_equal = true;
    for (auto v : obs) all_equal = all_equal && v == obs[0];
    if (all_equal) return sym_int(obs[0]);
    // a shape rule's result (exact by construction) first
    for (const auto& e : rules)
      if (matches(e, obs)) return e;
    // a linear form in the dims: capture j (1..k) moved dim j-1 alone
    const auto& symbols_ = runs_.symbols;
    const auto& runs_v = runs_.values;
    const std::size_t k = symbols_.size();
    if (obs.size() >= k + 2) {
      bool ok = true;
      sym_int e = 0;
      std::int64_t b = obs[0];
      for (std::size_t j = 0; j < k && ok; ++j) {
        const auto dx = runs_v[j + 1][j] - runs_v[0][j];
        const auto dy = obs[j + 1] - obs[0];
        if (dx == 0 || dy % dx != 0) {
          ok = false;
          break;
        }
        const auto c = dy / dx;
        if (c != 0) e = e + symbols_[j] * c;
        b -= c * runs_v[0][j];
      }
      if (ok) {
        e = e + b;
        if (matches(e, obs)) return e;
      }
    }
    for (const auto& p : basis) {
      if (p.is_constant()) continue;
      std::vector<std::int64_t> pv(obs.size());
      for (std::size_t r = 0; r < obs.size(); ++r) pv[r] = eval(p, r);
      for (std::size_t r = 1; r < obs.size(); ++r) {
        if (pv[r] == pv[0]) continue;
        const auto dy = obs[r] - obs[0], dx = pv[r] - pv[0];
        if (dy % dx != 0) break;
        const auto c = dy / dx, b = obs[0] - c * pv[0];
        if (c == 0) break;
        sym_int e = c == 1 ? p : p * c;
        if (b != 0) e = e + b;
        if (matches(e, obs)) return e;
        break;
      }
    }
    return std::nullopt;
  }

 private:
  bool matches(const sym_int& e, const std::vector<std::int64_t>& obs) const {
    for (std::size_t r = 0; r < obs.size(); ++r)
      if (eval(e, r) != obs[r]) return false;
    return true;
  }

  const sym_runs& runs_;
  std::vector<std::string> names_;
};

/// Values other than the example's for a dim to take in the extra captures: >= 2 (so no size
/// is 0 or 1), inside the dim's range, steps of 8 first (keeps the sizes' divisibility by 2, 4, 8).
inline std::vector<std::int64_t> other_sizes(std::int64_t h, std::int64_t min, std::int64_t max) {
  std::vector<std::int64_t> out;
  const auto lo = std::max<std::int64_t>(min, 2);
  for (auto c : {h + 8, h + 16, h - 8, h + 24, h - 16, h + 1, h + 2, h - 1, h - 2, h + 3, lo, lo + 1, max}) {
    if (c < lo || c > max || c == h || std::find(out.begin(), out.end(), c) != out.end()) continue;
    out.push_back(c);
    if (out.size() == 2) break;
  }
  return out;
}

/// The sizes each user input gets for one assignment of the dims.
inline std::vector<std::vector<std::int64_t>> input_sizes_at(const dyn_plan& plan, const std::vector<at::Tensor>& examples,
                                                             const std::vector<std::int64_t>& values) {
  std::vector<std::vector<std::int64_t>> out(examples.size());
  for (std::size_t i = 0; i < examples.size(); ++i) {
    auto sizes = examples[i].sizes().vec();
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      const auto& dd = plan.leaves[i][d];
      if (dd.root >= 0) sizes[d] = dd.a * values[static_cast<std::size_t>(dd.root)] + dd.b;
    }
    out[i] = std::move(sizes);
  }
  return out;
}

inline std::string assignment_text(const std::vector<std::string>& names, const std::vector<std::int64_t>& values,
                                   int only = -1) {
  std::string s;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (only >= 0 && static_cast<int>(i) != only) continue;
    s += (s.empty() ? "" : ", ") + names[i] + " = " + std::to_string(values[i]);
  }
  return s;
}

inline std::string node_text(const node& n) {
  std::string s = "'" + n.name() + "' (" + (n.is_call() ? n.op().qualified : n.target()) + ")";
  if (const auto& src = n.source(); src && !src->file.empty())
    s += " at " + src->file + ":" + std::to_string(src->line);
  return s;
}

/// Compares one argument of two captures; collects integer positions that differ.
inline bool same_shape_args(const argument& a, const argument& b, std::vector<std::pair<const argument*, const argument*>>& ints) {
  if (a.type() != b.type()) return false;
  if (a.is_int()) {
    if (a.as_int() != b.as_int()) ints.emplace_back(&a, &b);
    return true;
  }
  if (a.is_value()) return a.as_value().name() == b.as_value().name();
  if (a.is_graph()) return a.as_graph()->name == b.as_graph()->name;  // their nodes are compared on their own
  if (a.is_list()) {
    if (a.as_list().size() != b.as_list().size()) return false;
    for (std::size_t i = 0; i < a.as_list().size(); ++i)
      if (!same_shape_args(a.as_list()[i], b.as_list()[i], ints)) return false;
    return true;
  }
  return a == b;
}

inline sym_shape contiguous_strides(const sym_shape& sizes) {
  sym_shape st(sizes.size());
  sym_int stride = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    st[i] = stride;
    stride = sizes[i].is_constant() ? stride * std::max<std::int64_t>(sizes[i].hint(), 1) : stride * sizes[i];
  }
  return st;
}

inline bool strides_contiguous(const tensor_meta& m) {
  std::int64_t expect = 1;
  for (std::size_t i = m.sizes.size(); i-- > 0;) {
    if (m.sizes[i].hint() != 1 && m.strides[i].hint() != expect) return false;
    expect *= std::max<std::int64_t>(m.sizes[i].hint(), 1);
  }
  return true;
}

inline std::string values_text(const std::vector<std::int64_t>& obs, const sym_runs& runs) {
  std::string s;
  for (std::size_t r = 0; r < obs.size(); ++r)
    s += (s.empty() ? "" : ", ") + std::to_string(obs[r]) + " at " + assignment_text(runs.dim_names, runs.values[r]);
  return s;
}

/// Replaces the int at `site` (inside `base`, mirrored in `out`) by `e`.
inline bool replace_int(argument& out, const argument* site, const argument& base, const sym_int& e) {
  if (&base == site) {
    out = argument(e);
    return true;
  }
  if (base.is_list())
    for (std::size_t i = 0; i < base.as_list().size(); ++i)
      if (replace_int(out.as_list()[i], site, base.as_list()[i], e)) return true;
  return false;
}

/// A node of a program or of one of its subgraphs, in the order the symbolic passes visit them:
/// a control-flow call's subgraphs come just before it, each right after its operands.
struct flat_node {
  node n;
  value source;         ///< for a subgraph's placeholder: the operand the call passes it
  bool slice = false;   ///< ... one slice of it (torch.map's and torch.scan's xs: sizes without the leading dim)
};

inline void flatten_nodes(const graph& g, std::vector<flat_node>& out, bool skip_placeholders = false) {
  for (auto n : g.nodes()) {
    if (skip_placeholders && n.is_placeholder()) continue;
    if (n.is_call() && n.op().higher_order) {
      const auto operands = subgraph_operands(n);
      const auto [first_row, last_row] = row_operands(n);
      for (const auto& a : n.args()) {
        if (!a.is_graph()) continue;
        std::size_t i = 0;
        for (auto inner : a.as_graph()->body.nodes()) {
          if (!inner.is_placeholder()) break;
          const auto& op = i < operands.size() ? operands[i] : argument();
          out.push_back({inner, op.is_value() ? op.as_value() : value(), i >= first_row && i < last_row});
          ++i;
        }
        flatten_nodes(a.as_graph()->body, out, /*skip_placeholders=*/true);
      }
    }
    out.push_back({n, value()});
  }
}

inline std::vector<flat_node> flat_nodes(const graph& g) {
  std::vector<flat_node> out;
  flatten_nodes(g, out);
  return out;
}

/// The first difference between the ops two captures record ("" when they record the same).
/// With `layout_only`, ops that only change memory layout (`contiguous`, `clone`) are skipped
/// on both sides: `contiguous()` records nothing on a tensor that already is, which size-1 dims
/// make more tensors be, and the program with the copy is still right there.
inline std::string structure_difference(const exported_program& base, const exported_program& probe,
                                        bool layout_only = false) {
  auto keep = [&](const node& n) {
    if (!layout_only || !n.is_call()) return true;
    const auto& name = n.op().name;
    return !is_layout_only_op(name);
  };
  std::vector<node> a, b;
  for (const auto& f : flat_nodes(base.graph()))
    if (keep(f.n)) a.push_back(f.n);
  for (const auto& f : flat_nodes(probe.graph()))
    if (keep(f.n)) b.push_back(f.n);
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i].kind() == b[i].kind() && (!a[i].is_call() || a[i].op_ptr() == b[i].op_ptr()))
    ++i;
  if (a.size() != b.size())
    return "the traced code records " + std::to_string(b.size()) + " nodes instead of " + std::to_string(a.size()) +
           (i < a.size() ? ", from node " + node_text(a[i]) + " on" : std::string());
  if (i < a.size()) return "node " + node_text(b[i]) + " is recorded instead of " + node_text(a[i]);
  return {};
}

/// A capture that shows the code fixed a dim: `what` happened in capture `r`.
inline dim_specialized specialized_at(const sym_runs& runs, std::size_t r, const std::string& what) {
  const int root = r < runs.moved.size() ? runs.moved[r] : -1;
  return {root, "with " + assignment_text(runs.dim_names, runs.values[r], root) + " instead of the example's " +
                    assignment_text(runs.dim_names, runs.values[0], root) + ", " + what};
}

/// Every capture records the ops of `base`, or the code takes another path at another size.
inline void require_same_ops(const exported_program& base, const std::vector<const exported_program*>& others,
                             const sym_runs& runs) {
  for (std::size_t r = 1; r < runs.values.size(); ++r)
    if (auto why = structure_difference(base, *others[r - 1]); !why.empty())
      throw specialized_at(runs, r, why + ": the traced code takes a different path depending on the size");
}

/// Gives a base capture symbolic sizes and arguments, node by node, from the captures at other
/// sizes. `runs[r]` is the dims' values in capture r (0 = the example).
class symbolic_maker {
 public:
  symbolic_maker(exported_program& base, const std::vector<const exported_program*>& others, const sym_runs& runs)
      : runs_(runs), fit_(runs), nruns_(runs.values.size()), nodes_(nruns_) {
    base_ = flat_nodes(base.graph());
    for (const auto& f : base_) nodes_[0].push_back(f.n);
    for (std::size_t r = 1; r < nruns_; ++r)
      for (const auto& f : flat_nodes(others[r - 1]->graph())) nodes_[r].push_back(f.n);
  }

  /// Gives the user inputs (placeholders per `specs`) the sizes `user_input_sizes`, then fits every call node.
  void run(const std::vector<input_spec>& specs, const std::vector<sym_shape>& user_input_sizes) {
    std::size_t leaf = 0;
    std::size_t ph = 0;
    for (std::size_t i = 0; i < nodes_[0].size(); ++i) {
      const node n = nodes_[0][i];
      if (n.is_placeholder() && base_[i].source) {  // a subgraph's: typed as its operand is now
        const auto v = n.out();
        if (v.kind() != value_kind::tensor) continue;
        auto m = v.meta();
        const auto& from = base_[i].source.meta();
        if (base_[i].slice && !from.sizes.empty()) {  // a map's or scan's slice: a contiguous copy of one row
          m.sizes.assign(from.sizes.begin() + 1, from.sizes.end());
          m.strides = contiguous_strides(m.sizes);
          m.storage_offset = 0;
        } else {
          m.sizes = from.sizes;
          m.strides = from.strides;
          m.storage_offset = from.storage_offset;
        }
        v.set_meta(std::move(m));
        continue;
      }
      if (n.is_placeholder()) {
        const auto& spec = specs.at(ph++);
        if (spec.kind != input_kind::user_input) continue;
        const auto v = n.out();
        if (v.kind() != value_kind::tensor) continue;
        auto m = v.meta();
        const auto& sizes = user_input_sizes.at(leaf);
        if (sizes.size() != m.sizes.size())
          throw graph_error("xport.symbolic.inputs", "input " + v.name() + " changed rank while made symbolic");
        m.sizes = sizes;
        m.strides = contiguous_strides(m.sizes);
        v.set_meta(std::move(m));
        ++leaf;
        continue;
      }
      if (n.is_output()) continue;
      fit_node(i);
    }
  }

 private:
  /// Fails with what capture `r` shows: the code fixed a dim.
  [[noreturn]] void differs(std::size_t r, const std::string& what) const { throw specialized_at(runs_, r, what); }

  /// Fits call node `i` of the base: its integer arguments, then the sizes of its outputs.
  void fit_node(std::size_t i) {
    const node n = nodes_[0][i];
    std::vector<std::vector<sym_int>> input_shapes;
    for (auto v : n.inputs())
      if (v.kind() == value_kind::tensor) input_shapes.emplace_back(v.meta().sizes.begin(), v.meta().sizes.end());
    auto basis = size_basis(input_shapes);
    // then every size seen so far: a view back to [batch, frames, features] after a linear's
    // matmul on [batch*frames, features] reads `frames` from an earlier node, not its input
    basis.insert(basis.end(), seen_sizes_.begin(), seen_sizes_.end());
    // arguments: integers that differ become symbolic, anything else that differs specializes
    std::vector<argument> args(n.args().begin(), n.args().end());
    bool changed = false;
    for (std::size_t k = 0; k < args.size(); ++k) changed = fit_argument(i, k, basis, args[k]) || changed;
    if (changed) n.set_args(std::move(args));
    // sizes of every output
    std::size_t out_i = 0;
    for (auto v : n.outputs()) {
      const std::size_t oi = out_i++;
      if (v.kind() == value_kind::sym_int) fit_scalar_output(i, oi, v, basis);
      if (v.kind() != value_kind::tensor) continue;
      fit_output(i, oi, v, input_shapes, basis);
    }
  }

  /// Fits output `oi` of node `i`, an int (item()'s: Note [Unbacked sizes in a capture]).
  void fit_scalar_output(std::size_t i, std::size_t oi, value v, const std::vector<sym_int>& basis) const {
    std::vector<std::int64_t> obs(nruns_, v.type().scalar.hint());
    for (std::size_t r = 1; r < nruns_; ++r) obs[r] = nodes_[r][i].output(oi).type().scalar.hint();
    const auto e = fit_.fit(obs, basis);
    if (!e)
      throw dim_specialized{-1, "the int node " + node_text(nodes_[0][i]) + " gives is " + values_text(obs, runs_) +
                                    ", which xport cannot express in the dynamic dims"};
    v.set_type(value_type::of_sym_int(*e));
  }

  /// The products of trailing input dims from the first symbolic one on: what sizes are fitted in.
  static std::vector<sym_int> size_basis(const std::vector<std::vector<sym_int>>& input_shapes) {
    std::vector<sym_int> basis;
    for (const auto& s : input_shapes)
      for (std::size_t a = 0; a < s.size(); ++a) {
        sym_int p = 1;
        bool symbolic = false;
        for (std::size_t b = a; b < s.size(); ++b) {
          p = p * s[b];
          symbolic = symbolic || s[b].is_symbolic();
          if (symbolic) basis.push_back(p);
        }
      }
    return basis;
  }

  /// Makes each int of argument `k` of node `i` that differs between captures an expression in
  /// `arg` (a copy of it); returns whether any did.
  bool fit_argument(std::size_t i, std::size_t k, const std::vector<sym_int>& basis, argument& arg) const {
    const node n = nodes_[0][i];
    std::vector<std::vector<std::pair<const argument*, const argument*>>> diffs(nruns_);
    for (std::size_t r = 1; r < nruns_; ++r)
      if (!same_shape_args(n.args()[k], nodes_[r][i].args()[k], diffs[r])) {
        const auto& param = n.op().schema().arguments()[k].name();
        differs(r, "argument '" + param + "' of node " + node_text(n) + " is " + describe(nodes_[r][i].args()[k]) +
                       " instead of " + describe(n.args()[k]) +
                       ": the traced code computed it from the size (as a C++ number, which export cannot follow)");
      }
    // each differing int, by its address in the base argument
    std::vector<const argument*> sites;
    for (std::size_t r = 1; r < nruns_; ++r)
      for (const auto& [pa, pb] : diffs[r])
        if (std::find(sites.begin(), sites.end(), pa) == sites.end()) sites.push_back(pa);
    bool changed = false;
    for (const auto* site : sites) {
      std::vector<std::int64_t> obs(nruns_, site->as_int());
      for (std::size_t r = 1; r < nruns_; ++r)
        for (const auto& [pa, pb] : diffs[r])
          if (pa == site) obs[r] = pb->as_int();
      auto e = fit_.fit(obs, basis);
      if (!e) {
        const auto& param = n.op().schema().arguments()[k].name();
        throw dim_specialized{-1, "argument '" + param + "' of node " + node_text(n) + " is " + values_text(obs, runs_) +
                                      ": the traced code computed it from a dynamic size in a way xport cannot "
                                      "express (only linear forms, products and window sizes are recovered)"};
      }
      replace_int(arg, site, n.args()[k], *e);
      changed = true;
    }
    return changed;
  }

  /// Fits the sizes of output `oi` (value `v`) of node `i`, and its strides when a size is symbolic.
  void fit_output(std::size_t i, std::size_t oi, value v, const std::vector<std::vector<sym_int>>& input_shapes,
                  const std::vector<sym_int>& basis) {
    const node n = nodes_[0][i];
    auto m = v.meta();
    std::vector<const tensor_meta*> metas(nruns_);
    for (std::size_t r = 1; r < nruns_; ++r) {
      const auto w = nodes_[r][i].output(oi);
      if (w.kind() != value_kind::tensor || w.meta().sizes.size() != m.sizes.size())
        differs(r, "node " + node_text(n) + " returns a tensor of another rank");
      metas[r] = &w.meta();
    }
    std::vector<sym_int> rules;
    if (!input_shapes.empty()) window_candidates(n, input_shapes[0], rules);
    bool symbolic = false;
    for (std::size_t d = 0; d < m.sizes.size(); ++d) {
      std::vector<std::int64_t> obs(nruns_, m.sizes[d].hint());
      for (std::size_t r = 1; r < nruns_; ++r) obs[r] = metas[r]->sizes[d].hint();
      auto e = fit_.fit(obs, basis, rules);
      if (!e)
        throw dim_specialized{-1, "size " + std::to_string(d) + " of node " + node_text(n) + " is " +
                                      values_text(obs, runs_) +
                                      ", which xport cannot express in the dynamic dims (no linear form, product "
                                      "of input sizes or window rule gives it)"};
      symbolic = symbolic || e->is_symbolic();
      m.sizes[d] = *e;
      if (e->is_symbolic() && seen_text_.insert(e->str()).second) seen_sizes_.push_back(*e);
    }
    if (!symbolic) return;
    // strides: contiguous ones follow the sizes; others are fitted like sizes when they move
    const bool contiguous = strides_contiguous(m);
    if (contiguous) m.strides = contiguous_strides(m.sizes);
    else fit_strides(m, metas);
    v.set_meta(std::move(m));
  }

  /// Fits the strides of `m` (symbolic sizes, other strides) in the products of its trailing
  /// sizes; `metas[r]` is the output in capture r.
  void fit_strides(tensor_meta& m, const std::vector<const tensor_meta*>& metas) const {
    std::vector<sym_int> own;
    for (std::size_t a = 0; a < m.sizes.size(); ++a) {
      sym_int p = 1;
      for (std::size_t b = a; b < m.sizes.size(); ++b) {
        p = p * m.sizes[b];
        own.push_back(p);
      }
    }
    for (std::size_t d = 0; d < m.strides.size(); ++d) {
      std::vector<std::int64_t> obs(nruns_, m.strides[d].hint());
      for (std::size_t r = 1; r < nruns_; ++r)
        obs[r] = d < metas[r]->strides.size() ? metas[r]->strides[d].hint() : obs[0];
      if (auto e = fit_.fit(obs, own)) m.strides[d] = *e;
    }
  }

  const sym_runs& runs_;
  symbolic_fitter fit_;
  std::vector<sym_int> seen_sizes_;      // every symbolic output size fitted so far, once each
  std::set<std::string> seen_text_;
  std::size_t nruns_;
  std::vector<std::vector<node>> nodes_;  // per capture, its nodes in order (0 = the base's)
  std::vector<flat_node> base_;           // the base's, with the operand of each subgraph placeholder
};

/// Gives the base capture symbolic sizes and arguments from the captures at other sizes.
/// `runs[r]` is the dims' values in capture r (0 = the example).
inline void make_symbolic(exported_program& base, const std::vector<const exported_program*>& others,
                          const sym_runs& runs, const std::vector<sym_shape>& user_input_sizes) {
  symbolic_maker maker(base, others, runs);
  require_same_ops(base, others, runs);
  maker.run(base.signature().input_specs, user_input_sizes);
}


/// Values for the captures of a program with dims `symbols` (ranges [mins, maxs]): the hints,
/// each dim moved alone, then all moved (to a second other value where the range allows).
inline sym_runs make_runs(std::vector<sym_int> symbols, std::vector<std::string> names,
                          const std::vector<std::int64_t>& mins, const std::vector<std::int64_t>& maxs) {
  sym_runs r;
  const std::size_t k = symbols.size();
  r.values.assign(k + 2, {});
  for (const auto& s : symbols) r.values[0].push_back(s.hint());
  for (std::size_t j = 0; j < k; ++j) {
    const auto alt = other_sizes(symbols[j].hint(), mins[j], maxs[j]);
    if (alt.empty())
      throw export_error("xport.export.dynamic_shapes",
                         "the range of " + names[j] + " allows one size only; make it static");
    r.values[j + 1] = r.values[0];
    r.values[j + 1][j] = alt[0];
    r.values[k + 1].push_back(alt.size() > 1 ? alt[1] : alt[0]);
  }
  r.moved.assign(k + 2, -1);
  for (std::size_t j = 0; j < k; ++j) r.moved[j + 1] = static_cast<int>(j);
  r.symbols = std::move(symbols);
  r.dim_names = std::move(names);
  return r;
}

/// The runs of a symbolic program, from its range constraints.
inline sym_runs runs_of(const exported_program& p) {
  std::vector<sym_int> symbols;
  std::vector<std::string> names;
  std::vector<std::int64_t> mins, maxs;
  for (const auto& rc : p.range_constraints()) {
    if (!rc.symbol.is_symbolic()) continue;
    symbols.push_back(rc.symbol);
    names.push_back(rc.name.empty() ? rc.symbol.str() : rc.name);
    mins.push_back(rc.min);
    maxs.push_back(rc.max.value_or(int_oo));
  }
  return make_runs(std::move(symbols), std::move(names), mins, maxs);
}

/// Replaces every symbolic size and argument `e` of `g` (and of its subgraphs, copied: they are
/// shared) by `f(e)`.
template <class F>
void substitute_sizes(graph& g, const F& f) {
  const std::function<argument(const argument&)> arg = [&](const argument& a) -> argument {
    if (a.is_symbolic()) return f(a.as_sym());
    if (!a.is_list()) return a;
    argument::list_type l;
    l.reserve(a.as_list().size());
    for (const auto& e : a.as_list()) l.push_back(arg(e));
    return l;
  };
  for (auto n : g.nodes()) {
    for (auto v : n.outputs()) {
      if (v.kind() == value_kind::sym_int && v.type().scalar.is_symbolic()) {
        v.set_type(value_type::of_sym_int(f(v.type().scalar)));
        continue;
      }
      if (v.kind() != value_kind::tensor) continue;
      auto m = v.meta();
      bool symbolic = m.storage_offset.is_symbolic();
      for (const auto& d : m.sizes) symbolic = symbolic || d.is_symbolic();
      for (const auto& d : m.strides) symbolic = symbolic || d.is_symbolic();
      if (!symbolic) continue;
      for (auto& d : m.sizes) d = f(d);
      for (auto& d : m.strides) d = f(d);
      m.storage_offset = f(m.storage_offset);
      v.set_meta(std::move(m));
    }
    if (!n.is_call()) continue;
    bool symbolic = false;
    for (const auto& a : n.args()) {
      symbolic = symbolic || a.is_symbolic() || a.is_graph();
      if (a.is_list())
        for (const auto& e : a.as_list()) symbolic = symbolic || e.is_symbolic();
    }
    if (!symbolic) continue;
    std::vector<argument> args;
    for (const auto& a : n.args()) {
      if (!a.is_graph()) {
        args.push_back(arg(a));
        continue;
      }
      auto body = a.as_graph()->body.clone();
      substitute_sizes(body, f);
      args.emplace_back(std::make_shared<const subgraph>(subgraph{a.as_graph()->name, std::move(body)}));
    }
    n.set_args(std::move(args));
  }
}

/// Gives every value of `g` (and of its subgraphs, copied: they are shared) its sizes and
/// arguments at their values in capture `run`.
inline void specialize_graph(graph& g, const symbolic_fitter& fit, std::size_t run) {
  substitute_sizes(g, [&](const sym_int& e) { return sym_int(fit.eval(e, run)); });
}

/// `p` with its dims at their values in capture `run`: a static program.
inline exported_program specialize(const exported_program& p, const sym_runs& runs, std::size_t run) {
  symbolic_fitter fit(runs);
  auto q = p.clone();
  specialize_graph(q.graph_mut(), fit, run);
  q.range_constraints_mut().clear();
  return q;
}

/// Applies `f`, a transformation of static programs (re-capture, decomposition,
/// functionalization), to a program with dynamic dims: `f` runs on the program specialized at
/// several sizes and the results are made symbolic again (Note [Capturing at several sizes]).
template <class F>
exported_program transform_symbolic(const exported_program& p, std::string_view what, F&& f) {
  if (p.range_constraints().empty()) return f(p);
  const auto runs = runs_of(p);
  // the row counts of the data-dependent calls, in the order they are made (Note [Unbacked sizes in a capture])
  std::vector<std::size_t> rows_of;
  std::unordered_set<std::string> seen;
  for (auto n : p.graph().nodes())
    if (n.is_call())
      for_each_unbacked_given(n, seen, [&](const value&, std::int64_t, const std::string& symbol, const sym_int&) {
        for (std::size_t i = 0; i < runs.symbols.size(); ++i)
          if (runs.symbols[i].str() == symbol) rows_of.push_back(i);
      });
  const auto at_run = [&](std::size_t r) {
    std::vector<std::int64_t> rows;
    for (auto i : rows_of) rows.push_back(runs.values[r][i]);
    unbacked_scope scope(std::move(rows));
    return f(specialize(p, runs, r));
  };
  exported_program base = at_run(0);
  std::vector<exported_program> others;
  for (std::size_t r = 1; r < runs.values.size(); ++r) others.push_back(at_run(r));
  std::vector<const exported_program*> ptrs;
  for (const auto& o : others) ptrs.push_back(&o);
  std::vector<sym_shape> inputs;
  const auto phs = p.graph().placeholders();
  for (std::size_t i = 0; i < phs.size(); ++i)
    if (p.signature().input_specs.at(i).kind == input_kind::user_input && phs[i].out().kind() == value_kind::tensor)
      inputs.push_back(phs[i].out().meta().sizes);
  try {
    make_symbolic(base, ptrs, runs, inputs);
  } catch (const dim_specialized& s) {
    throw export_error("xport.symbolic.specialized",
                       std::string(what) + ": the " + (what == "run_decompositions" ? "decomposed" : "transformed") +
                           " programs differ between sizes: " + s.why +
                           ". A decomposition that loops over a dynamic dim (aten::lstm's over the sequence) unrolls "
                           "differently at each size: keep that op (decomposition_table::core_aten().keep(...)), or "
                           "make the dim static");
  }
  base.range_constraints_mut() = p.range_constraints();
  return base;
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/trace/export.hpp>
// xport/trace/export.hpp: export_program, torch.export.export for C++ callables and modules.
//
//   auto p = xport::export_program(model, std::tuple{x});              // a torch::nn module
//   auto q = xport::export_program([](const at::Tensor& a, const at::Tensor& b) {
//     return at::sin(a) + at::cos(b);
//   }, std::tuple{x, y}, {.input_names = {"x", "y"}});
//   xport::callable<at::Tensor(at::Tensor, at::Tensor)> f(q);         // same C++ types back
//
// The result is torch.export's training IR: ATen ops as the code called them (before autograd and
// before composite ops decompose), in-place ops kept, parameters and buffers lifted to inputs
// named `p_<fqn>` / `b_<fqn>`, tensors captured from outside lifted as constants.

#include <algorithm>    // std::min, std::max, std::sort
#include <cstdlib>      // std::abort
#include <functional>   // std::invoke
#include <memory>       // std::shared_ptr
#include <optional>     // std::optional
#include <string>       // std::string
#include <tuple>        // std::tuple, std::apply
#include <type_traits>  // std::decay_t
#include <utility>      // std::forward
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>

// #include <xport/config.hpp>
// #include <xport/detail/sha256.hpp>
// xport/detail/sha256.hpp: SHA-256 (FIPS 180-4), for names torch derives from hashes: the
// symbol of a dynamic dim is `s` + sha256(source name) mod 100 (torch's ShapeEnv).

#include <array>        // std::array
#include <cstdint>      // std::uint32_t
#include <string_view>  // std::string_view

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

inline std::array<std::uint8_t, 32> sha256(std::string_view data) {
  static constexpr std::uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  std::uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto rotr = [](std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  // the message, padded: 0x80, zeros, and the bit length (big-endian) to a multiple of 64 bytes
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
  const std::size_t total = ((data.size() + 8) / 64 + 1) * 64;
  const auto byte_at = [&](std::size_t i) -> std::uint8_t {
    if (i < data.size()) return static_cast<std::uint8_t>(data[i]);
    if (i == data.size()) return 0x80;
    if (i >= total - 8) return static_cast<std::uint8_t>(bits >> (8 * (total - 1 - i)));
    return 0;
  };
  for (std::size_t block = 0; block < total; block += 64) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (std::uint32_t{byte_at(block + 4 * i)} << 24) | (std::uint32_t{byte_at(block + 4 * i + 1)} << 16) |
             (std::uint32_t{byte_at(block + 4 * i + 2)} << 8) | std::uint32_t{byte_at(block + 4 * i + 3)};
    for (int i = 16; i < 64; ++i) {
      const auto s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const auto s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const auto t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const auto t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
  }
  std::array<std::uint8_t, 32> out{};
  for (int i = 0; i < 32; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h[i / 4] >> (24 - 8 * (i % 4)));
  return out;
}

/// The digest as a big integer, modulo `m` (Python's `int(hexdigest, 16) % m`).
inline std::uint32_t sha256_mod(std::string_view data, std::uint32_t m) {
  std::uint64_t r = 0;
  for (const auto byte : sha256(data)) r = (r * 256 + byte) % m;
  return static_cast<std::uint32_t>(r);
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/error.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/trace/capture.hpp>
// #include <xport/trace/dynamic.hpp>
// #include <xport/trace/strict.hpp>
// #include <xport/trace/symbolic.hpp>
// #include <xport/trace/tree.hpp>
// #include <xport/trace/unbacked.hpp>
// #include <xport/ir/unbacked.hpp>

XPORT_BEGIN_NAMESPACE

/// Tracing policy: ordinary at::Tensor code and torch::nn modules run on fake (meta) tensors
/// while the dispatcher records each op (torch.export's non-strict mode).
struct non_strict {};

struct export_options {
  /// Names of the positional arguments (`x`, `y`); nested tensors get `x_0`, `x_key` suffixes.
  /// By default one argument is `x` and several are `args_0`, `args_1`, ...
  std::vector<std::string> input_names = {};
  /// Keep the example inputs in the program (exported_program::example_inputs()).
  bool keep_example_inputs = true;
  /// Which input dimensions are dynamic (trace/dynamic.hpp): `{{"x", {{0, batch}}}}`.
  xport::dynamic_shapes dynamic_shapes = {};
};

namespace detail {

// A torch::nn module: a ModuleHolder (`Linear`), a std::shared_ptr to a module, or a module.
template <class M>
decltype(auto) module_impl(M& m) {
  if constexpr (requires { m.ptr(); }) return *m.ptr();
  else if constexpr (requires { *m; m.get(); }) return *m;
  else return (m);
}

template <class M>
concept module_like = requires(M& m) {
  module_impl(m).named_parameters(true);
  module_impl(m).named_buffers(true);
};

inline std::string default_input_name(std::size_t i, std::size_t n) {
  return n == 1 ? std::string("x") : "args_" + std::to_string(i);
}

/// The input treespec (a tuple of the arguments, named), the example tensors and their names.
template <class... Args>
treespec describe_inputs(const std::tuple<Args...>& args, const export_options& opts,
                         std::vector<at::Tensor>& examples, std::vector<std::string>& names) {
  constexpr std::size_t n = sizeof...(Args);
  if (!opts.input_names.empty() && opts.input_names.size() != n)
    throw export_error("xport.export.input_names",
                       "export_options::input_names has " + std::to_string(opts.input_names.size()) +
                           " name(s) but the program takes " + std::to_string(n) + " argument(s)");
  treespec in_spec = treespec::of(treespec::kind::tuple);
  std::size_t k = 0;
  std::apply(
      [&](const auto&... a) {
        ((in_spec.children.push_back(flatten(a, examples)),
          in_spec.keys.push_back(opts.input_names.empty() ? default_input_name(k, n) : opts.input_names[k]),
          leaf_names(in_spec.children.back(), in_spec.keys.back(), names), ++k),
         ...);
      },
      args);
  for (const auto& t : examples)
    if (!t.defined()) throw export_error("xport.export.undefined_input", "an example input is an undefined tensor");
  return in_spec;
}

/// A specialized constant input: a placeholder, as torch.export makes one for every input, that
/// the graph does not read (the calls were specialized to its value, which the spec keeps).
inline void add_constant_input(capture& cap, const std::string& name, const argument& v) {
  for (int k = 0;; ++k) {  // a taken name gets a suffix, as tensor inputs' do
    const std::string n = k ? name + "_" + std::to_string(k) : name;
    try {
      (void)cap.builder().placeholder(input_spec{input_kind::user_input, argument_spec::constant_value(n, v), {}, {}},
                                      value_type{value_kind::none, {}, {}});
      return;
    } catch (const graph_error&) {
      if (k >= 64) throw;
    }
  }
}

/// One placeholder per leaf of the inputs, in torch.export's order: `tensor(i, name)` makes the
/// i-th tensor input, constant leaves become constant inputs.
template <class Tensor>
void add_inputs(capture& cap, const treespec& in_spec, Tensor&& tensor) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < in_spec.children.size(); ++i) leaf_names(in_spec.children[i], in_spec.keys[i], names, true);
  std::size_t leaf = 0, t = 0;
  const auto visit = [&](const auto& self, const treespec& s) -> void {
    if (s.type == treespec::kind::leaf) tensor(t++, names[leaf++]);
    else if (s.type == treespec::kind::constant) add_constant_input(cap, names[leaf++], s.value);
    else
      for (const auto& c : s.children) self(self, c);
  };
  visit(visit, in_spec);
}

/// Finishes a capture: outputs (graph values of the result's leaves), build, call spec.
inline exported_program finish(capture& cap, std::vector<value> outs, treespec in_spec, treespec out_spec,
                               const export_options& opts) {
  // torch.export returns a None (an undefined at::Tensor, an empty std::optional) as an output
  // of its own: a leaf of the output spec, `None` in the graph's return, `: USER_OUTPUT`
  std::size_t next = 0;
  const auto visit = [&](const auto& self, treespec& s) -> void {
    if (s.type == treespec::kind::leaf) {
      cap.builder().output(outs.at(next++));
    } else if (s.type == treespec::kind::none) {
      // the spec keeps the value, as a loaded program's does (see serde's with_constants)
      cap.builder().output_arg(argument(none), output_kind::user_output);
      s = treespec::constant(none);
    } else {
      for (auto& c : s.children) self(self, c);
    }
  };
  visit(visit, out_spec);
  // Every call was bound by the dispatcher (non-strict) or by bind_arguments (strict): the
  // structural and signature checks run, the per-argument schema checks need not.
  exported_program p = std::move(cap.builder()).build(ir_dialect::training, verify_options{.check_schemas = false});
  p.set_call_spec(std::move(in_spec), std::move(out_spec));
  if (!opts.keep_example_inputs) p.set_example_inputs(std::nullopt);
  return p;
}

template <class Call, class... Args>
exported_program trace_strict(Call&& call, const std::tuple<Args...>& args, const export_options& opts,
                              capture& cap) {
  std::vector<at::Tensor> examples;
  std::vector<std::string> names;
  auto in_spec = describe_inputs(args, opts, examples, names);
  if (!examples.empty()) cap.set_fake_device(examples.front().device());
  cap.keep_value_meta();
  std::vector<value> inputs;
  add_inputs(cap, in_spec, [&](std::size_t i, const std::string& name) { inputs.push_back(cap.add_input_value(name, examples[i])); });
  std::size_t leaf = 0;
  auto make = [&](const at::Tensor&) { return sym_tensor(inputs[leaf++], &cap); };
  auto sym_args = std::apply([&](const auto&... a) { return std::tuple{to_sym(a, make)...}; }, args);
  auto result = std::apply(call, sym_args);
  std::vector<value> outs;
  auto collect = [&](const auto& t) {
    if constexpr (std::is_same_v<std::decay_t<decltype(t)>, at::Tensor>)
      outs.push_back(cap.value_of(t));
    else
      outs.push_back(t.graph_value());
  };
  auto out_spec = flatten_into(result, collect);
  return finish(cap, std::move(outs), std::move(in_spec), std::move(out_spec), opts);
}

template <class Call, class... Args>
exported_program trace_non_strict(Call&& call, const std::tuple<Args...>& args, const export_options& opts,
                                  capture& cap) {
  std::vector<at::Tensor> examples;
  std::vector<std::string> names;
  auto in_spec = describe_inputs(args, opts, examples, names);
  if (!examples.empty()) cap.set_fake_device(examples.front().device());
  // the traced code gets meta tensors in the same structure
  std::vector<at::Tensor> metas;
  add_inputs(cap, in_spec, [&](std::size_t i, const std::string& name) { metas.push_back(cap.add_input(name, examples[i])); });
  std::size_t leaf = 0;
  auto to_meta = [&](const at::Tensor&) { return metas[leaf++]; };
  auto meta_args = std::apply([&](const auto&... a) { return std::tuple{map_tensors(a, to_meta)...}; }, args);

  auto result = [&] {
    capture_scope scope(cap);
    return std::apply(call, meta_args);
  }();

  std::vector<at::Tensor> leaves;
  auto out_spec = flatten(result, leaves);
  std::vector<value> outs;
  for (const auto& t : leaves) outs.push_back(cap.value_of(t));
  return finish(cap, std::move(outs), std::move(in_spec), std::move(out_spec), opts);
}

[[noreturn]] inline void throw_specialized(const dyn_plan& plan, const dim_specialized& s) {
  if (s.root < 0) {
    std::vector<std::string> names;
    for (const auto& r : plan.roots) names.push_back(r.dim_name);
    throw_constraints_violated(std::move(names), "The dynamic dims cannot all be kept: " + s.why + ".");
  }
  const auto& r = plan.roots[static_cast<std::size_t>(s.root)];
  throw_constraints_violated({r.dim_name},
                             "You marked " + r.dim_name + " as dynamic but your code specialized it to be a constant (" +
                                 std::to_string(r.hint) + "): " + s.why + ".",
                             {r.named ? r.dim_name + " = " + std::to_string(r.hint)
                                      : "use Dim::static_ (or Dim::automatic) for " + r.where + " instead of Dim::dynamic"});
}

inline void drop_root(dyn_plan& plan, int root) {
  plan.roots.erase(plan.roots.begin() + root);
  for (auto& leaf : plan.leaves)
    for (auto& d : leaf) {
      if (d.root == root) d = dyn_dim{};
      else if (d.root > root) --d.root;
    }
}

/// `from` becomes `into` (a hinted dim the code needs equal to another).
inline void merge_roots(dyn_plan& plan, int from, int into) {
  for (auto& leaf : plan.leaves)
    for (auto& d : leaf)
      if (d.root == from) d.root = into;
  auto& a = plan.roots[static_cast<std::size_t>(into)];
  const auto& b = plan.roots[static_cast<std::size_t>(from)];
  a.min = std::max(a.min, b.min);
  a.max = std::min(a.max, b.max);
  plan.roots.erase(plan.roots.begin() + from);
  for (auto& leaf : plan.leaves)
    for (auto& d : leaf)
      if (d.root > from) --d.root;
}

/// Captures at the ends of every dim's range the other captures did not reach (its min and
/// min + 1, its max when finite): where they record the same ops, they join the captures the
/// sizes are fitted to (so a form that only fits the middle of the range is caught); where they
/// fail or record other ops, the part of the range that works is found by bisection and
/// reported as dim_narrowed.
template <class AttemptAt>
void probe_ranges(AttemptAt& attempt_at, const exported_program& base, const dyn_plan& plan, sym_runs& runs,
                  std::vector<exported_program>& others) {
  const std::size_t k = plan.roots.size();
  for (std::size_t j = 0; j < k; ++j) {
    const auto& r = plan.roots[j];
    std::int64_t tried_lo = int_oo, tried_hi = 0;
    for (const auto& v : runs.values) {
      tried_lo = std::min(tried_lo, v[j]);
      tried_hi = std::max(tried_hi, v[j]);
    }
    auto at = [&](std::int64_t v) {
      auto values = runs.values[0];
      values[j] = v;
      return values;
    };
    auto why_not = [&](std::int64_t v, std::optional<exported_program>* keep) -> std::string {
      try {
        auto probe = attempt_at(at(v));
        auto why = structure_difference(base, probe);
        if (why.empty() && keep) keep->emplace(std::move(probe));
        if (!why.empty() && structure_difference(base, probe, /*layout_only=*/true).empty()) return {};
        return why;
      } catch (const std::exception& e) {
        return "export fails: " + first_line(e.what());
      }
    };
    auto probe = [&](std::int64_t v, std::int64_t good) {
      std::optional<exported_program> kept;
      auto why = why_not(v, &kept);
      if (why.empty()) {
        if (kept) {  // the same ops: the sizes there must fit too
          runs.values.push_back(at(v));
          runs.moved.push_back(static_cast<int>(j));
          others.push_back(std::move(*kept));
        }
        return;
      }
      std::int64_t bad = v;  // bisect for the last size that works, between bad and good
      while (good - bad > 1 || bad - good > 1) {
        const auto mid = bad + (good - bad) / 2;
        (why_not(mid, nullptr).empty() ? good : bad) = mid;
      }
      throw dim_narrowed{static_cast<int>(j), bad < good ? good : r.min, bad < good ? r.max : good, v, why};
    };
    for (const auto v : {r.min, r.min + 1})
      if (v < tried_lo && v <= r.max) probe(v, tried_lo);
    if (r.max != int_oo && r.max > tried_hi) probe(r.max, tried_hi);
  }
}

/// Thrown inside a dynamic export when a capture with another row count of a data-dependent call
/// fails or records other ops: the code decides something on the count (Note [Unbacked sizes in
/// a capture]).
struct unbacked_decided {
  std::string why;
};

/// What a capture that gave data-dependent values threw, when it is not xport's own error: the
/// traced code checked such a value (LibTorch 1.13's embedding_bag checks offsets[0].item() == 0),
/// which it sees as the value the capture made up (Note [Unbacked sizes in a capture]).
[[noreturn]] inline void throw_data_check_failed(const std::exception& e) {
  throw graph_break("xport.export.graph_break",
                    "graph break: the traced code failed on a value only the data knows (an item(), a nonzero's "
                    "row count: export gives it a made-up value): " + first_line(e.what()) +
                    ". Code that checks tensor contents cannot be exported; export the computation without the "
                    "check, or make the value an input of the program");
}

/// `f()`, a capture under unbacked scope `rows`: an exception not xport's, from a capture that
/// gave data-dependent values, becomes throw_data_check_failed's graph break.
template <class F>
auto capture_checked(const unbacked_scope& rows, F&& f) {
  try {
    return f();
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    if (rows.given() == 0) throw;
    throw_data_check_failed(e);
  }
}

/// Captures with each row count of a data-dependent call at 0, 1, 2 and a large count: the
/// traced code must record the same ops (else it decides on the count: unbacked_decided); the
/// captures at 2 and at the large count join the fit (a size that follows the count only part
/// of the way, a slice's clamp, fails to fit instead of being wrong for other counts).
template <class AttemptAt>
void probe_unbacked(AttemptAt& attempt_at, const exported_program& base, std::size_t k, sym_runs& runs,
                    std::vector<exported_program>& others, const std::vector<value_range>& facts) {
  for (std::size_t j = k; j < runs.symbols.size(); ++j)
    for (const std::int64_t v : {0, 1, 2, 61, -3}) {
      const auto& fact = facts[j - k];
      if (!fact.contains(v) || v == runs.values[0][j]) continue;
      auto values = runs.values[0];
      values[j] = v;
      std::string why;
      try {
        auto probe = attempt_at(values);
        why = structure_difference(base, probe);
        if (why.empty() && (v >= 2 || v < 0)) {
          runs.values.push_back(values);
          runs.moved.push_back(static_cast<int>(j));
          others.push_back(std::move(probe));
        }
        if (!why.empty() && structure_difference(base, probe, /*layout_only=*/true).empty()) why.clear();
      } catch (const std::exception& e) {
        // a shape rule that cannot take 0 or 1 rows on meta tensors (index_add's) decides nothing
        if (v >= 2 || v < 0) why = "export fails: " + first_line(e.what());
      }
      if (!why.empty())
        throw unbacked_decided{"with " + runs.dim_names[j] + " = " + std::to_string(v) + " instead of " +
                               std::to_string(runs.values[0][j]) + ", " + why};
    }
}

/// The name torch's ShapeEnv gives the symbol of a dynamic dim first seen at `source`
/// (`L['x'].size()[0]` -> `s77`): `s` + sha256(source) mod 100, the next free number on a clash.
inline std::string torch_symbol_name(const std::string& source, const std::vector<std::string>& taken) {
  auto id = sha256_mod(source, 100);
  while (std::find(taken.begin(), taken.end(), "s" + std::to_string(id)) != taken.end()) ++id;
  return "s" + std::to_string(id);
}

/// The data-dependent calls of `base`: the op that gives each unbacked symbol, in order.
inline std::vector<std::string> unbacked_ops(const exported_program& base) {
  std::vector<std::string> ops;
  std::unordered_set<std::string> seen;
  for (auto n : base.graph().nodes())
    if (n.is_call()) for_each_unbacked_given(n, seen, [&](const value&, std::int64_t, const std::string&, const sym_int&) {
        ops.push_back(n.op().qualified + " ('" + n.name() + "')");
      });
  return ops;
}

/// Gives each unbacked symbol of `base` its range, as torch's runtime assertions bound it: what
/// xport::check_range said of it (`facts`, by call), and for a row count [0, the element count of
/// what its call reads]; adds it to the range constraints.
inline void range_unbacked(exported_program& base, const std::vector<value_range>& facts) {
  std::unordered_set<std::string> seen;
  std::vector<std::pair<std::string, sym_int>> ranged;  // in the order the calls give them
  for (auto n : base.graph().nodes()) {
    if (!n.is_call()) continue;
    for_each_unbacked_given(n, seen, [&](const value&, std::int64_t, const std::string& symbol, const sym_int& e) {
      const auto j = static_cast<std::size_t>(std::stoll(symbol.substr(1)));
      auto r = j < facts.size() ? facts[j] : value_range{-int_oo, int_oo};
      if (n.op().name != "aten::item") {
        const auto& read = n.op().name == "aten::index" ? n.args()[1].as_list()[0].as_value() : n.input(0);
        sym_int numel = 1;
        for (const auto& d : read.meta().sizes) numel = numel * d;
        r.lo = std::max<std::int64_t>(r.lo, 0);
        r.hi = std::min(r.hi, sym::range(numel).hi);
      }
      ranged.emplace_back(symbol, sym::symbol(symbol, std::clamp(e.hint(), r.lo, r.hi), r));
    });
  }
  substitute_sizes(base.graph_mut(), [&](const sym_int& e) {
    return sym::substitute(e, [&](std::string_view name) -> std::optional<sym_int> {
      for (const auto& [s, u] : ranged)
        if (s == name) return u;
      return std::nullopt;
    });
  });
  for (const auto& [name, u] : ranged) {
    const auto r = sym::range(u);
    base.range_constraints_mut().push_back({u, r.lo, r.hi == int_oo ? std::nullopt : std::optional<std::int64_t>(r.hi), ""});
  }
  auto& rc = base.range_constraints_mut();
  std::stable_sort(rc.begin(), rc.end(), [](const range_constraint& a, const range_constraint& b) {
    return sym::is_unbacked(a.symbol.str()) && !sym::is_unbacked(b.symbol.str());  // u's first, as torch lists them
  });
}

/// The captures of runs 1.. of `runs` (k dims, then n_unbacked row counts, each moved alone; then
/// all moved): a capture that fails reports the dim (or the row count) it moved.
template <class AttemptAt>
std::vector<exported_program> capture_moved(AttemptAt& attempt_at, const sym_runs& runs, std::size_t k, std::size_t n_unbacked) {
  std::vector<exported_program> others;
  others.reserve(runs.values.size());
  for (std::size_t r = 1; r < runs.values.size(); ++r) {
    const int root = r <= k ? static_cast<int>(r - 1) : -1;
    std::string failure;
    try {
      others.push_back(attempt_at(runs.values[r]));
    } catch (const std::exception& e) {
      failure = first_line(e.what());
    }
    if (failure.empty()) continue;
    if (r > k && r <= k + n_unbacked)
      throw unbacked_decided{"with " + assignment_text(runs.dim_names, runs.values[r], static_cast<int>(r - 1)) + " instead of " +
                             std::to_string(runs.values[0][r - 1]) + " export fails: " + failure};
    // moved alone it fails: does it work moved together with another dim of the same size?
    for (std::size_t i = 0; root >= 0 && i < k; ++i) {
      if (static_cast<int>(i) == root || runs.values[0][i] != runs.values[0][static_cast<std::size_t>(root)]) continue;
      auto both = runs.values[0];
      both[i] = both[static_cast<std::size_t>(root)] = runs.values[r][static_cast<std::size_t>(root)];
      bool works = false;
      try {
        (void)attempt_at(both);
        works = true;
      } catch (const std::exception&) {
      }
      if (works) throw dims_related{root, static_cast<int>(i), failure};
    }
    throw dim_specialized{root, "with " + assignment_text(runs.dim_names, runs.values[r], root) + " instead of the example's " +
                                    assignment_text(runs.dim_names, runs.values[0], root) + " export fails: " + failure};
  }
  return others;
}

/// The sizes of the inputs `examples` in the dims `symbols` of `plan`.
inline std::vector<sym_shape> symbolic_input_sizes(const dyn_plan& plan, const std::vector<at::Tensor>& examples,
                                                   const std::vector<sym_int>& symbols) {
  std::vector<sym_shape> inputs;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    sym_shape sizes;
    for (std::size_t d = 0; d < static_cast<std::size_t>(examples[i].dim()); ++d) {
      const auto& dd = plan.leaves[i][d];
      sizes.push_back(dd.root < 0 ? sym_int(examples[i].size(static_cast<std::int64_t>(d)))
                                  : symbols[static_cast<std::size_t>(dd.root)] * dd.a + dd.b);
    }
    inputs.push_back(std::move(sizes));
  }
  return inputs;
}

template <class Attempt>
exported_program dynamic_attempt(Attempt& attempt, const dyn_plan& plan, const std::vector<at::Tensor>& examples) {
  const std::size_t k = plan.roots.size();
  std::vector<sym_int> symbols;
  std::vector<std::string> names;
  std::vector<std::int64_t> mins, maxs;
  std::vector<std::string> symbol_names;
  for (const auto& r : plan.roots) symbol_names.push_back(torch_symbol_name(r.source, symbol_names));
  for (std::size_t i = 0; i < k; ++i) {
    const auto& r = plan.roots[i];
    symbols.push_back(sym::symbol(symbol_names[i], r.hint, value_range{r.min, r.max}));
    names.push_back(r.dim_name);
    mins.push_back(r.min);
    maxs.push_back(r.max);
  }
  // a capture at the values of the dims (and of the row counts that follow them)
  auto attempt_at = [&](const std::vector<std::int64_t>& values) {
    unbacked_scope rows(std::vector<std::int64_t>(values.begin() + static_cast<std::ptrdiff_t>(std::min(k, values.size())), values.end()));
    return capture_checked(rows, [&] { return attempt(input_sizes_at(plan, examples, values)); });
  };
  std::size_t n_unbacked = 0;
  std::vector<value_range> facts;  // what xport::check_range said of each data-dependent value
  exported_program base = [&] {
    unbacked_scope rows({});
    auto b = capture_checked(rows, [&] { return attempt({}); });
    n_unbacked = rows.given();
    facts = rows.facts();
    return b;
  }();
  if (k == 0 && n_unbacked == 0) return base;
  std::vector<std::int64_t> at_facts;  // the dims' hints, then each value within its facts
  for (const auto& sym : symbols) at_facts.push_back(sym.hint());
  for (std::size_t j = 0; j < n_unbacked; ++j)
    at_facts.push_back(std::clamp(unbacked_plan::default_value(j), facts[j].lo, facts[j].hi));
  for (std::size_t j = 0; j < n_unbacked; ++j)
    if (at_facts[k + j] != unbacked_plan::default_value(j)) {  // the base broke a fact: captured again within them
      base = attempt_at(at_facts);
      break;
    }
  const auto ops = unbacked_ops(base);
  for (std::size_t j = 0; j < n_unbacked; ++j) {
    symbols.push_back(sym::symbol("u" + std::to_string(j), at_facts[k + j], facts[j]));
    names.push_back(j < ops.size() ? "the value of " + ops[j] : "u" + std::to_string(j));
    mins.push_back(facts[j].lo);
    maxs.push_back(facts[j].hi);
  }
  auto runs = make_runs(symbols, names, mins, maxs);
  auto others = capture_moved(attempt_at, runs, k, n_unbacked);
  {
    std::vector<const exported_program*> ptrs;
    for (const auto& o : others) ptrs.push_back(&o);
    require_same_ops(base, ptrs, runs);  // before probing the range ends: another path is no narrowing
  }
  probe_ranges(attempt_at, base, plan, runs, others);
  probe_unbacked(attempt_at, base, k, runs, others, facts);
  std::vector<const exported_program*> ptrs;
  for (const auto& o : others) ptrs.push_back(&o);
  try {
    make_symbolic(base, ptrs, runs, symbolic_input_sizes(plan, examples, symbols));
  } catch (const dim_specialized& s) {
    if (k == 0) throw unbacked_decided{s.why};  // only row counts vary: they are what the code decided on
    throw;
  }
  auto& rc = base.range_constraints_mut();
  rc.clear();
  for (std::size_t i = 0; i < k; ++i) {
    const auto& r = plan.roots[i];
    rc.push_back({symbols[i], r.min, r.max == int_oo ? std::nullopt : std::optional<std::int64_t>(r.max), r.dim_name});
  }
  if (n_unbacked) range_unbacked(base, facts);
  return base;
}

/// A dynamic export (Note [Capturing at several sizes] in trace/symbolic.hpp).
template <class Attempt, class... Args>
exported_program export_dynamic(Attempt& attempt, const std::tuple<Args...>& args, const export_options& opts) {
  std::vector<at::Tensor> examples;
  std::vector<std::string> names;
  auto in_spec = describe_inputs(args, opts, examples, names);
  std::vector<std::string> arg_names;
  for (std::size_t i = 0; i < sizeof...(Args); ++i)
    arg_names.push_back(opts.input_names.empty() ? default_input_name(i, sizeof...(Args)) : opts.input_names[i]);
  dyn_plan plan;  // no dynamic_shapes: static dims (a capture with data-dependent calls comes here)
  if (!opts.dynamic_shapes.empty()) plan = dyn_resolver(examples, names).resolve(opts.dynamic_shapes, in_spec, arg_names);
  for (std::size_t i = plan.leaves.size(); i < examples.size(); ++i)
    plan.leaves.emplace_back(static_cast<std::size_t>(examples[i].dim()));
  for (;;) {
    try {
      return dynamic_attempt(attempt, plan, examples);
    } catch (const unbacked_decided& u) {
      throw graph_break("xport.export.graph_break",
                        "graph break: the traced code decides something on the number of rows a data-dependent call "
                        "gives (nonzero, masked_select, a boolean-mask index), or on an item() (values only the data "
                        "knows, torch's unbacked SymInts): " + u.why + ". Way out: write the code so that it does the "
                        "same for every value (0 rows included: empty tensors flow through ATen ops), state the range "
                        "it relies on with xport::check_range(v, min, max) (torch._check), or keep the shape with a "
                        "mask (at::where(mask, x, 0))");
    } catch (const dim_specialized& s) {
      if (s.root >= static_cast<int>(plan.roots.size()))
        throw graph_break("xport.export.graph_break",
                          "graph break: the traced code decides something on the number of rows a data-dependent "
                          "call gives (torch's unbacked SymInt): " + s.why);
      if (s.root >= 0 && plan.roots[static_cast<std::size_t>(s.root)].automatic) {
        drop_root(plan, s.root);  // Dim::automatic: static after all
        continue;
      }
      throw_specialized(plan, s);
    } catch (const dims_related& s) {
      // a: the earlier dim, b: the later one, which the fix defines as a
      const auto& a = plan.roots[static_cast<std::size_t>(std::min(s.root, s.other))];
      const auto& b = plan.roots[static_cast<std::size_t>(std::max(s.root, s.other))];
      if (!a.named || !b.named) {  // a hint takes the relation: one dim
        const int ia = std::min(s.root, s.other), ib = std::max(s.root, s.other);
        merge_roots(plan, a.named ? ib : ia, a.named ? ia : ib);
        continue;
      }
      throw_constraints_violated({a.dim_name, b.dim_name},
                                 "The values of " + b.dim_name + " = " + b.where + " and " + a.dim_name + " = " + a.where +
                                     " must always be equal (moved alone, " + s.why + ").",
                                 {b.dim_name + " = " + a.dim_name});
    } catch (const dim_narrowed& s) {
      auto& r = plan.roots[static_cast<std::size_t>(s.root)];
      if (!r.named) {  // bounds of a hint are hints: take the range that works
        r.min = s.lo;
        r.max = s.hi;
        continue;
      }
      const Dim fixed(r.dim_name, s.lo, s.hi == int_oo ? std::nullopt : std::optional<std::int64_t>(s.hi));
      const auto range = std::to_string(r.min) + " <= " + r.dim_name + (r.max == int_oo ? "" : " <= " + std::to_string(r.max));
      const auto guard = s.bad < s.lo ? std::to_string(s.lo) + " <= " + r.where : r.where + " <= " + std::to_string(s.hi);
      throw_constraints_violated({r.dim_name},
                                 "Not all values of " + r.dim_name + " = " + r.where + " in the specified range " + range +
                                     " satisfy the generated guard " + guard + ": with " + r.dim_name + " = " +
                                     std::to_string(s.bad) + ", " + s.why + ".",
                                 {r.dim_name + " = " + fixed.str()});
    }
  }
}

}  // namespace detail

/// Exports a C++ callable over at::Tensor, or a torch::nn module (whose forward is called with
/// `args`), into an exported_program (training IR). No real computation runs: the code sees
/// meta tensors, and the module's parameters and buffers are left exactly as they were.
template <class Policy = non_strict, class F, class... Args>
exported_program export_program(F&& f, const std::tuple<Args...>& args, const export_options& opts = {}) {
  static_assert(std::is_same_v<Policy, non_strict> || std::is_same_v<Policy, strict>,
                "xport::export_program: unknown tracing policy (use xport::non_strict or xport::strict)");
  constexpr bool inputs_ok = (detail::is_tree_type<Args>() && ...);
  static_assert(inputs_ok,
                "xport: this type cannot be an input or output of an exported program. Supported: "
                "at::Tensor; int64_t, int, double, float, bool and std::string (specialized as "
                "constants); std::optional, std::vector, std::array, std::tuple, std::pair, "
                "std::map<std::string, T> and c10::Dict<std::string, T> of supported types. The "
                "offending type is in `Args = {...}` of this instantiation, as the compiler prints it.");
  auto attempt = [&](std::vector<std::vector<std::int64_t>> sizes) -> exported_program {
    detail::capture cap;
    cap.set_input_sizes(std::move(sizes));
    cap.set_sizes_may_vary(!opts.dynamic_shapes.empty());
    if constexpr (!inputs_ok) {
      std::abort();  // unreachable: the static_assert above is the one error
    } else if constexpr (std::is_same_v<Policy, strict>) {
      static_assert(!detail::module_like<std::remove_reference_t<F>>,
                    "xport::export_program<xport::strict>: torch::nn modules run on at::Tensor; export "
                    "them with the non_strict policy, or write the forward against xport::sym_tensor");
      return detail::trace_strict(f, args, opts, cap);
    } else if constexpr (detail::module_like<std::remove_reference_t<F>>) {
      auto& m = detail::module_impl(f);
      for (const auto& item : m.named_parameters(true)) cap.add_state(input_kind::parameter, item.key(), item.value());
      for (const auto& item : m.named_buffers(true)) cap.add_state(input_kind::buffer, item.key(), item.value());
      auto p = detail::trace_non_strict([&](auto&&... a) { return m.forward(std::forward<decltype(a)>(a)...); },
                                        args, opts, cap);
      std::vector<std::pair<std::string, std::string>> types{{"", m.name()}};
      for (const auto& item : m.named_modules("", /*include_self=*/false)) types.emplace_back(item.key(), item.value()->name());
      p.set_module_types(std::move(types));
      return p;
    } else {
      return detail::trace_non_strict(f, args, opts, cap);
    }
  };
  if (opts.dynamic_shapes.empty()) {
    detail::unbacked_scope rows({});  // Note [Unbacked sizes in a capture]: captured again when the code calls any
    auto p = detail::capture_checked(rows, [&] { return attempt({}); });
    if (rows.given() == 0) return p;
  }
  if constexpr (inputs_ok) return detail::export_dynamic(attempt, args, opts);
  else std::abort();
}

XPORT_END_NAMESPACE

// lowering: functionalize, run_decompositions
// #include <xport/lower/functionalize.hpp>
// xport/lower/functionalize.hpp: the functional form of a program (torch's functionalization).
// In-place ops become their out-of-place variants (`add_` -> `add`); a mutation through a view
// is written back to its base with the matching scatter (`select_scatter`, `slice_scatter`, ...)
// and views of a mutated base are regenerated before their next read; BatchNorm's running
// statistics (which LibTorch 1.13's schema does not mark as mutated) are computed explicitly;
// and every mutated placeholder becomes a mutation output, before the user outputs, as
// torch.export orders them: `buffer_mutation` for buffers, `user_input_mutation` for inputs.

#include <cstddef>        // std::size_t
#include <cstdint>        // std::int64_t
#include <optional>       // std::optional
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::move
#include <vector>         // std::vector

// #include <xport/config.hpp>
// #include <xport/error.hpp>
#include <ATen/core/dispatch/Dispatcher.h>

// #include <xport/program/builder.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/op.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ops/op_sets.hpp>

XPORT_BEGIN_NAMESPACE

/// Functionalization cannot express a program (a mutation through an unsupported view, an
/// in-place op without an out-of-place variant).
class functionalize_error : public error {
 public:
  using error::error;
};

namespace detail {

inline bool is_view_op(const op_info& op) {
  if (op.is_mutable || is_maybe_alias_op(op.name)) return false;
  const auto& rets = op.schema().returns();
  if (rets.empty()) return false;
  for (const auto& r : rets) {
    const auto* ai = r.alias_info();
    if (ai && !ai->isWrite()) return true;
    // Tensor(a)[] returns (split, unbind, chunk): the alias is on the list's elements
    if (r.type()->kind() == c10::TypeKind::ListType && !ai) {
      const auto& args = op.schema().arguments();
      if (!args.empty() && args[0].alias_info() && !args[0].alias_info()->isWrite()) return true;
    }
  }
  return false;
}

inline bool is_batch_norm_with_stats(const node& n) {
  const auto& name = n.op().name;
  if (!is_batch_norm_op(name)) return false;
  const auto args = n.args();
  // (input, weight, bias, running_mean, running_var, training, momentum, eps, ...)
  return args.size() >= 8 && args[3].is_value() && args[4].is_value() && args[5].is_bool() && args[5].as_bool();
}

class functionalizer {
 public:
  explicit functionalizer(const exported_program& src) : src_(src) {}

  exported_program run() {
    const auto& g = src_.graph();
    const auto phs = g.placeholders();
    const auto& specs = src_.signature().input_specs;
    for (std::size_t i = 0; i < phs.size(); ++i) {
      const value pv = phs[i].output(0);
      const value nv = b_.placeholder(specs.at(i), pv.type());
      nv.producer().set_source(phs[i].source());
      nv.producer().copy_custom_meta_from(phs[i]);
      base_of(pv);
      cur_[pv.impl()] = nv;
    }
    for (auto n : g.nodes()) {
      if (!n.is_call()) continue;
      b_.like(n);
      if (is_batch_norm_with_stats(n)) batch_norm(n);
      else if (n.op().inplace_view) inplace_view(n);
      else if (n.op().is_mutable) mutation(n);
      else copy(n, is_view_op(n.op()));
    }
    // mutated placeholders first (in input order), then the user outputs
    for (std::size_t i = 0; i < phs.size(); ++i) {
      const value pv = phs[i].output(0);
      if (version(pv) == 0) continue;
      const auto& spec = specs[i];
      switch (spec.kind) {
        case input_kind::buffer: b_.output(get(pv), output_kind::buffer_mutation, spec.target); break;
        case input_kind::parameter: b_.output(get(pv), output_kind::parameter_mutation, spec.target); break;
        case input_kind::user_input: b_.output(get(pv), output_kind::user_input_mutation, spec.arg.name); break;
        default:
          throw functionalize_error("xport.functionalize.constant_mutation",
                                    "the program mutates constant '" + spec.target.value_or(spec.arg.name) +
                                        "'; register it as a buffer");
      }
    }
    const auto outs = g.output_node().args();
    const auto& out_specs = src_.signature().output_specs;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const auto& spec = out_specs.at(i);
      if (spec.kind == output_kind::buffer_mutation || spec.kind == output_kind::user_input_mutation ||
          spec.kind == output_kind::parameter_mutation)
        continue;  // already functional input: re-derived above
      if (!outs[i].is_value()) {  // a constant output (None): returned as it is
        b_.output_arg(outs[i], spec.kind, spec.target);
        continue;
      }
      b_.output(get(outs[i].as_value()), spec.kind, spec.target);
    }
    b_.set_state(src_.state_dict(), src_.constants());
    b_.set_examples(src_.example_inputs());
    auto p = std::move(b_).build(ir_dialect::aten);
    p.set_call_spec(src_.in_spec(), src_.out_spec());
    p.range_constraints_mut() = src_.range_constraints();
    return p;
  }

 private:
  // One step from a base to a view: the view node (in the source graph) and which of its outputs.
  struct view_step {
    node n;
    std::size_t out = 0;
    const op_info* op = nullptr;  // the view op to replay, when not n's own (in-place views)
  };
  struct alias {
    const value_impl* base;
    std::vector<view_step> chain;
  };
  struct materialized {
    value v;
    std::uint64_t version;
  };

  const alias& base_of(value v) {
    auto it = alias_.find(v.impl());
    if (it == alias_.end()) it = alias_.emplace(v.impl(), alias{v.impl(), {}}).first;
    return it->second;
  }
  std::uint64_t version(value v) { return version_[base_of(v).base]; }

  /// The new-graph value holding `v`'s current contents (regenerating a stale view).
  value get(value v) {
    const alias a = base_of(v);
    if (a.chain.empty()) return cur_.at(a.base);
    const auto ver = version_[a.base];
    if (auto it = views_.find(v.impl()); it != views_.end() && it->second.version == ver) return it->second.v;
    value x = cur_.at(a.base);
    for (const auto& step : a.chain) x = replay(step, x);
    views_[v.impl()] = {x, ver};
    return x;
  }

  // A view step applied to `input` in the new graph (same op, same constant arguments).
  value replay(const view_step& step, value input) {
    auto args = std::vector<argument>(step.n.args().begin(), step.n.args().end());
    args[0] = input;
    auto types = std::vector<value_type>();
    for (auto o : step.n.outputs()) types.push_back(o.type());
    auto r = b_.record(step.op ? *step.op : step.n.op(), std::move(args), std::move(types));
    return r.output(step.out);
  }

  // Arguments with every value replaced by its current contents.
  std::vector<argument> current_args(const node& n) {
    std::vector<argument> args(n.args().begin(), n.args().end());
    for (auto& a : args) a.for_each_value([&](value& v) { v = get(v); });
    return args;
  }

  void copy(const node& n, bool view) {
    std::vector<value_type> types;
    for (auto o : n.outputs()) types.push_back(o.type());
    auto r = b_.record(n.op(), current_args(n), std::move(types));
    for (std::size_t i = 0; i < n.num_outputs(); ++i) {
      const value src = n.output(i), dst = r.output(i);
      if (view && n.num_inputs() > 0 && n.args()[0].is_value()) {
        const alias in = base_of(n.args()[0].as_value());
        alias out = in;
        out.chain.push_back({n, i});
        alias_[src.impl()] = std::move(out);
        views_[src.impl()] = {dst, version_[in.base]};
      } else {
        alias_[src.impl()] = alias{src.impl(), {}};
        cur_[src.impl()] = dst;
      }
    }
  }

  // The out-of-place twin of an in-place op: same name without `_`, and the overload whose
  // argument names match (`add_.Tensor` -> `add.Tensor`, `bernoulli_.float` -> `bernoulli.p`,
  // `transpose_` -> `transpose.int`).
  static const op_info* functional_variant(const op_info& op) {
    std::string name = op.name;
    if (name.size() > 1 && name.back() == '_') name.pop_back();
    else return nullptr;
    if (const auto* f = try_find_op(op.overload.empty() ? name : name + "." + op.overload)) return f;
    const auto& want = op.schema().arguments();
    for (const auto& n : c10::Dispatcher::singleton().getAllOpNames()) {
      if (n.name != name) continue;
      const auto* f = try_find_op(n.overload_name.empty() ? name : name + "." + n.overload_name);
      if (!f || f->is_mutable) continue;
      const auto& got = f->schema().arguments();
      bool same = got.size() == want.size();
      for (std::size_t i = 0; same && i < got.size(); ++i) same = got[i].name() == want[i].name();
      if (same) return f;
    }
    return nullptr;
  }

  // An in-place view op (transpose_, squeeze_, ...) changes how its argument views its storage,
  // not the data: its output is a view of the same base, made by the out-of-place view op.
  void inplace_view(const node& n) {
    const auto* f = functional_variant(n.op());
    if (!f || !n.args()[0].is_value())
      throw functionalize_error("xport.functionalize.no_functional_variant",
                                n.op().qualified + " (node '" + n.name() + "') has no out-of-place view variant");
    const value target = n.args()[0].as_value();
    const alias in = base_of(target);
    auto args = current_args(n);
    const value dst = b_.call_bound(*f, std::move(args)).out();
    alias out = in;
    out.chain.push_back({n, 0, f});
    alias_[n.output(0).impl()] = std::move(out);
    views_[n.output(0).impl()] = {dst, version_[in.base]};
  }

  // An in-place op: compute the new contents out of place, then write them to the base.
  void mutation(const node& n) {
    const auto& op = n.op();
    const auto& params = op.schema().arguments();
    std::size_t written = params.size();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i].alias_info() && params[i].alias_info()->isWrite()) written = i;
    if (written == params.size() || !n.args()[written].is_value())
      throw functionalize_error("xport.functionalize.unsupported_mutation",
                                op.qualified + " (node '" + n.name() + "') mutates something functionalization cannot track");
    const auto* f = functional_variant(op);
    if (!f || written != 0)
      throw functionalize_error("xport.functionalize.no_functional_variant",
                                op.qualified + " (node '" + n.name() + "') has no out-of-place variant (" +
                                    op.name.substr(0, op.name.size() - 1) +
                                    "); functionalization needs one, or a decomposition of the op");
    const value target = n.args()[0].as_value();
    auto args = current_args(n);
    value fresh = b_.call_bound(*f, std::move(args));
    // in-place ops keep the target's dtype (add_ of an int tensor and a float stays int)
    const auto& want = target.meta();
    if (fresh.meta().dtype != want.dtype) fresh = b_.call("aten::_to_copy", {fresh}, {{"dtype", want.dtype}});
    if (fresh.meta().size_hints() != want.size_hints())
      throw functionalize_error("xport.functionalize.shape",
                                op.qualified + " (node '" + n.name() + "') changes the shape of its target");
    write(target, fresh);
    // the in-place op's output is the target itself
    alias_[n.output(0).impl()] = base_of(target);
    if (!base_of(target).chain.empty()) views_[n.output(0).impl()] = {fresh, version(target)};
  }

  // `target` (a base, or a view of one) now holds `contents`.
  void write(value target, value contents) {
    const alias a = base_of(target);
    if (a.chain.empty()) {
      cur_[a.base] = contents;
    } else {
      // the views from the base down to the target, at the current version
      std::vector<value> levels{cur_.at(a.base)};
      for (std::size_t i = 0; i + 1 < a.chain.size(); ++i) levels.push_back(replay(a.chain[i], levels.back()));
      value v = contents;
      for (std::size_t i = a.chain.size(); i-- > 0;) v = scatter(a.chain[i], levels[i], v);
      cur_[a.base] = v;
      views_[target.impl()] = {contents, version_[a.base] + 1};
    }
    ++version_[a.base];
  }

  // The inverse of one view step: `base` with `src` written where the view reads.
  value scatter(const view_step& step, value base, value src) {
    const auto& op = step.op ? *step.op : step.n.op();
    const auto args = step.n.args();
    const auto& name = op.name;
    if (name == "aten::select") return b_.call("aten::select_scatter", {base, src, args[1], args[2]});
    if (name == "aten::slice")
      return b_.call("aten::slice_scatter", {base, src, args[1], args[2], args[3], args[4]});
    if (name == "aten::diagonal") return b_.call("aten::diagonal_scatter", {base, src, args[1], args[2], args[3]});
    if (name == "aten::as_strided")
      return b_.call("aten::as_strided_scatter", {base, src, args[1], args[2], args[3]});
    if (name == "aten::transpose") return b_.call("aten::transpose.int", {src, args[1], args[2]});
    if (name == "aten::t") return b_.call("aten::t", {src});
    if (name == "aten::permute") {
      const auto& dims = args[1].as_list();
      std::vector<std::int64_t> inv(dims.size());
      const auto rank = static_cast<std::int64_t>(dims.size());
      for (std::size_t i = 0; i < dims.size(); ++i) {
        auto d = dims[i].as_int();
        inv[static_cast<std::size_t>(d < 0 ? d + rank : d)] = static_cast<std::int64_t>(i);
      }
      return b_.call("aten::permute", {src, inv});
    }
    if (name == "aten::view" || name == "aten::_reshape_alias" || name == "aten::unsqueeze" ||
        name == "aten::squeeze" || name == "aten::alias" || name == "aten::detach" || name == "aten::_unsafe_view")
      return b_.call("aten::view", {src, base.meta().size_hints()});
    if (name == "aten::split" || name == "aten::split_with_sizes" || name == "aten::unbind") {
      const auto dim = name == "aten::unbind" ? args[1].as_int() : args[2].as_int();
      const auto rank = base.meta().dim();
      const auto d = dim < 0 ? dim + rank : dim;
      if (name == "aten::unbind") return b_.call("aten::select_scatter", {base, src, d, static_cast<std::int64_t>(step.out)});
      std::int64_t start = 0;
      for (std::size_t k = 0; k < step.out; ++k) start += step.n.output(k).meta().sizes[static_cast<std::size_t>(d)].hint();
      const auto len = step.n.output(step.out).meta().sizes[static_cast<std::size_t>(d)].hint();
      return b_.call("aten::slice_scatter", {base, src, d, start, start + len, 1});
    }
    throw functionalize_error("xport.functionalize.unsupported_view",
                              "a tensor made by " + op.qualified + " (node '" + step.n.name() +
                                  "') is mutated in place; functionalization cannot write it back to its "
                                  "base. Mutate a clone, or the base itself");
  }

  // BatchNorm in train mode with running statistics: the output from native_batch_norm without
  // the statistics, and their updates written out (LibTorch 1.13 does not mark them mutated).
  void batch_norm(const node& n) {
    const auto args = current_args(n);
    const value x = args[0].as_value();
    const double momentum = args[6].as_double();
    auto nbn = b_.call("aten::native_batch_norm", {args[0], args[1], args[2], none, none, true, momentum, args[7]});
    std::vector<std::int64_t> dims;
    for (std::int64_t d = 0; d < x.meta().dim(); ++d)
      if (d != 1) dims.push_back(d);
    const value mean = b_.call("aten::mean.dim", {x, dims});
    const value var = b_.call("aten::var.correction", {x, dims}, {{"correction", 1}});
    const auto update = [&](value running, value batch) {
      value kept = b_.call("aten::mul.Tensor", {running, 1.0 - momentum});
      value add = b_.call("aten::mul.Tensor", {batch, momentum});
      return b_.call("aten::add.Tensor", {kept, add}).out();
    };
    const value rm = n.args()[3].as_value(), rv = n.args()[4].as_value();
    write(rm, update(args[3].as_value(), mean));
    write(rv, update(args[4].as_value(), var));
    if (n.op().name == "aten::batch_norm") {
      alias_[n.output(0).impl()] = alias{n.output(0).impl(), {}};
      cur_[n.output(0).impl()] = nbn[0];
    } else {
      for (std::size_t i = 0; i < 3; ++i) {
        alias_[n.output(i).impl()] = alias{n.output(i).impl(), {}};
        cur_[n.output(i).impl()] = nbn[i];
      }
    }
  }

  const exported_program& src_;
  program_builder b_;
  std::unordered_map<const value_impl*, alias> alias_;              // source value -> base + views
  std::unordered_map<const value_impl*, value> cur_;                // source base -> new contents
  std::unordered_map<const value_impl*, std::uint64_t> version_;    // source base -> mutations
  std::unordered_map<const value_impl*, materialized> views_;       // source view -> new value
};

}  // namespace detail

/// The functional form of `p` (torch's inference IR without decompositions, dialect ATEN):
/// no in-place op, mutations returned as outputs. `p` is left as it is.
inline exported_program functionalize(const exported_program& p) { return detail::functionalizer(p).run(); }

XPORT_END_NAMESPACE
// #include <xport/lower/decompose.hpp>
// xport/lower/decompose.hpp: run_decompositions(), the functional core-ATen inference IR.
// A decomposition table says, op by op, what happens to ops outside the core ATen set: kept,
// decomposed by a C++ function written with at:: calls (the user's, or xport's counterpart of
// torch's Python decomposition), or by the op's CompositeImplicitAutograd kernel. Decomposing
// re-captures the program: every node is called again through the dispatcher.
//
// On LibTorch >= 2.1 this is torch.export's own recipe: the calls go through LibTorch's
// functionalization (FunctionalTensorWrapper, views re-applied), decompositions are chosen above
// it (xport's capture key) and the functional calls it makes are recorded below it (the Fake
// key), so the program holds the same ops, in the same order and with the same names as
// torch's. On 1.13 the decomposed program is functionalized by xport's own pass
// (lower/functionalize.hpp).

#include <functional>     // std::function
#include <optional>       // std::optional
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <vector>         // std::vector

// #include <xport/ops/higher_order.hpp>
// #include <xport/detail/compat.hpp>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#if XPORT_HAS_TORCH_FUNCTIONALIZATION
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#endif
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/native_dropout.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/WrapDimMinimal.h>

// #include <xport/config.hpp>
// #include <xport/detail/compat.hpp>
// #include <xport/ops/call.hpp>
// #include <xport/ops/core_ops.hpp>
// #include <xport/ops/op_sets.hpp>
// #include <xport/ops/decompositions.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/program/dead_code.hpp>
// #include <xport/lower/functionalize.hpp>
// #include <xport/trace/capture.hpp>
// #include <xport/trace/symbolic.hpp>

XPORT_BEGIN_NAMESPACE

/// A decomposition: the op's arguments (as the dispatcher passes them) in, its results out,
/// computed with at:: calls, which are recorded in place of the op.
using decomposition = detail::decomposition_fn;

namespace detail {

/// Whether `op` is in the core ATen set: the running LibTorch's `core` tag (>= 2.1), or the set
/// xport carries for 1.13.
inline bool is_core_op(const op_info& op) {
#if XPORT_HAS_TORCH_FUNCTIONALIZATION
  return op.handle.hasTag(at::Tag::core);
#else
  return is_core_aten_op(op.qualified);
#endif
}

}  // namespace detail

/// What run_decompositions does with each op (torch.export's decomposition table).
class decomposition_table {
 public:
  /// Lower to the core ATen op set (torch.export.default_decompositions()).
  static decomposition_table core_aten() { return decomposition_table(true); }
  /// Decompose nothing: run_decompositions only functionalizes (torch's `decomp_table={}`).
  static decomposition_table none() { return decomposition_table(false); }

  /// Keep `op` (`"aten::linear"`) as it is (torch: `del table[op]`).
  decomposition_table& keep(std::string_view op) {
    keep_.insert(qualified(op));
    return *this;
  }
  /// Decompose `op` with `fn` (torch: `table[op] = fn`).
  decomposition_table& set(std::string_view op, decomposition fn) {
    const auto q = qualified(op);
    keep_.erase(q);
    custom_[q] = std::move(fn);
    return *this;
  }

  /// The decomposition to apply to `op`, or nullptr to record it as it is (LibTorch 1.13).
  [[nodiscard]] const decomposition* find(const op_info& op) const;

  /// What lowering does with `op` (LibTorch >= 2.1), as torch.export's run_decompositions does:
  /// above autograd and functionalization (`lowering`), and below, as the functional calls are
  /// recorded (`lowering_below`: a decomposition, or nullptr to record the op).
  struct action {
    enum kind_t : std::uint8_t {
      functionalize,  ///< on through autograd and functionalization as it is
      preserve,       ///< kept whole: a composite op the table keeps (recorded past functionalization)
      decompose,      ///< by `fn`, or by its CompositeImplicitAutograd kernel when `fn` is null
    } kind;
    const decomposition* fn = nullptr;
  };
  [[nodiscard]] action lowering(const op_info& op) const;
  [[nodiscard]] action lowering_below(const op_info& op) const;

  /// Whether lowering decomposes `op` (else it stays in the lowered program: a core op, one the
  /// table keeps, or one with no known decomposition, which torch keeps too).
  [[nodiscard]] bool decomposes(const op_info& op) const;

 private:
  explicit decomposition_table(bool core) : core_(core) {}
  static std::string qualified(std::string_view op) { return find_op(op).qualified; }

  bool core_;
  std::unordered_set<std::string> keep_;
  std::unordered_map<std::string, decomposition> custom_;
};

namespace detail {

/// xport's own decompositions of non-core ops that have no CompositeImplicitAutograd kernel
/// (the C++ counterparts of entries of torch._decomp's core table).
inline const std::unordered_map<std::string, decomposition>& builtin_decompositions() {
  static const std::unordered_map<std::string, decomposition> table = [] {
    std::unordered_map<std::string, decomposition> t;
    using S = std::vector<c10::IValue>;
    t["aten::t"] = [](const S& a) -> S {
      const auto& x = a[0].toTensor();
      return {x.dim() < 2 ? x.alias() : x.permute({1, 0})};
    };
    t["aten::transpose.int"] = [](const S& a) -> S {
      const auto& x = a[0].toTensor();
      if (x.dim() == 0) return {x.alias()};
      std::vector<std::int64_t> perm(static_cast<std::size_t>(x.dim()));
      for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int64_t>(i);
      const auto d0 = c10::maybe_wrap_dim(a[1].toInt(), x.dim()), d1 = c10::maybe_wrap_dim(a[2].toInt(), x.dim());
      std::swap(perm[static_cast<std::size_t>(d0)], perm[static_cast<std::size_t>(d1)]);
      return {x.permute(perm)};
    };
    // CPU's dropout kernel draws one bernoulli_ mask like native_dropout's: same randomness
    t["aten::dropout"] = [](const S& a) -> S {
      const auto& x = a[0].toTensor();
      if (!a[2].toBool()) return {x};
      return {std::get<0>(at::native_dropout(x, a[1].toDouble(), true))};
    };
    t["aten::silu"] = [](const S& a) -> S {
      const auto& x = a[0].toTensor();
      return {x.mul(x.sigmoid())};
    };
    // the dtype is always given: `full` infers i64 from an integer fill value, zeros is f32
    const auto full_of = [](const S& a, int fill) -> S {
      const auto dtype = a[1].isNone() ? c10::get_default_dtype_as_scalartype() : a[1].toScalarType();
      auto opts = at::TensorOptions().dtype(dtype).layout(c10::kStrided).device(a[3].toOptional<c10::Device>());
      return {at::full(a[0].toIntVector(), fill, opts)};
    };
    t["aten::zeros"] = [full_of](const S& a) { return full_of(a, 0); };
    t["aten::ones"] = [full_of](const S& a) { return full_of(a, 1); };
    // torch's core set has neither: both are views of the same elements in order
    t["aten::_reshape_alias"] = [](const S& a) -> S { return {a[0].toTensor().view(a[1].toIntVector())}; };
    t["aten::_unsafe_view"] = [](const S& a) -> S { return {a[0].toTensor().view(a[1].toIntVector())}; };
    t["aten::zeros_like"] = [](const S& a) -> S { return {at::full_like(a[0].toTensor(), 0)}; };
    t["aten::ones_like"] = [](const S& a) -> S { return {at::full_like(a[0].toTensor(), 1)}; };
    t["aten::rsub.Scalar"] = [](const S& a) -> S {  // other - alpha * self
      return {a[0].toTensor().mul(-a[2].toScalar().toDouble()).add(a[1].toScalar())};
    };
    return t;
  }();
  return table;
}

/// Whether the op has a CompositeImplicitAutograd kernel (torch decomposes those by default).
inline bool has_composite_kernel(const op_info& op) {
  return op.handle.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
}

}  // namespace detail

inline const decomposition* decomposition_table::find(const op_info& op) const {
  if (auto it = custom_.find(op.qualified); it != custom_.end()) return &it->second;
  if (!core_ || keep_.count(op.qualified) || detail::is_core_aten_op(op.qualified)) return nullptr;
  const auto& builtin = detail::builtin_decompositions();
  if (auto it = builtin.find(op.qualified); it != builtin.end()) return &it->second;
  static const decomposition cia;  // empty: use the op's CompositeImplicitAutograd kernel
  if (detail::has_composite_kernel(op)) return &cia;
  return nullptr;  // no decomposition known: kept, as torch keeps it
}

#if XPORT_HAS_TORCH_FUNCTIONALIZATION
namespace detail {
inline bool maybe_aliasing_or_mutating(const op_info& op) {
#if XPORT_TORCH_VERSION_AT_LEAST(2, 5)
  if (op.handle.hasTag(at::Tag::maybe_aliasing_or_mutating)) return true;
#endif
  return in_set(op.qualified, maybe_aliasing_or_mutating_ops);
}
}  // namespace detail

inline decomposition_table::action decomposition_table::lowering(const op_info& op) const {
  const bool cia = detail::has_composite_kernel(op);
  if (auto it = custom_.find(op.qualified); it != custom_.end() && cia) return {action::decompose, &it->second};
  // torch decomposes a composite op that aliases or mutates whatever the table says (its
  // functionalization needs the pieces), and those whose schema hides that they may (the
  // `maybe_aliasing_or_mutating` tag: batch_norm updates its running statistics, dropout may
  // return its input)
  bool functional_schema = !op.is_mutable && !detail::maybe_aliasing_or_mutating(op);
  for (const auto& a : op.schema().arguments()) functional_schema = functional_schema && !a.alias_info();
  const auto& ports = detail::torch_composite_decompositions();
  const auto port = ports.find(op.qualified);
  if (!core_ || keep_.count(op.qualified)) {
    if (cia && functional_schema) return {action::preserve};
    // what must decompose does, by torch's decomposition where it has one (native_batch_norm)
    if (port != ports.end() && detail::maybe_aliasing_or_mutating(op)) return {action::decompose, &port->second};
    return {cia ? action::decompose : action::functionalize};
  }
  if (port != ports.end()) return {action::decompose, &port->second};
  if (cia && !detail::is_core_op(op)) return {action::decompose};
  return {action::functionalize};
}

inline decomposition_table::action decomposition_table::lowering_below(const op_info& op) const {
  if (auto it = custom_.find(op.qualified); it != custom_.end()) return {action::decompose, &it->second};
  if (!core_ || keep_.count(op.qualified)) return {action::functionalize};
  // torch's table decomposes a few core ops too (squeeze.dim into squeeze.dims)
  const auto& ports = detail::torch_decompositions();
  if (auto it = ports.find(op.qualified); it != ports.end()) return {action::decompose, &it->second};
  if (detail::has_composite_kernel(op) && !detail::is_core_op(op)) return {action::decompose};
  return {action::functionalize};  // recorded: core, or no decomposition known (kept, as torch keeps it)
}

inline bool decomposition_table::decomposes(const op_info& op) const {
  return lowering(op).kind == action::decompose || lowering_below(op).kind == action::decompose;
}
#else
inline bool decomposition_table::decomposes(const op_info& op) const { return find(op) != nullptr; }
#endif

namespace detail {

/// How the running lowering treats a control-flow call (set while run_decompositions lowers):
/// each subgraph is lowered as a program of its own, and the call recorded again on the lowered
/// subgraphs (its kernel is not run: the branch taken depends on data).
struct subgraph_lowering {
  std::unordered_map<const subgraph*, std::shared_ptr<const subgraph>> lowered;  ///< lowered first, on their own
  std::function<c10::IValue(const at::Tensor&)> hold;    ///< a tracked meta tensor -> what the calls see
  std::function<at::Tensor(const c10::IValue&)> unhold;  ///< what the calls see -> the tracked tensor
};
inline thread_local const subgraph_lowering* active_subgraph_lowering = nullptr;

inline void recall_higher_order(capture& cap, const node& n, std::unordered_map<const value_impl*, c10::IValue>& held) {
  if (!active_subgraph_lowering)
    throw export_error("xport.decompose.higher_order",
                       "run_decompositions: " + n.op().qualified + " (node '" + n.name() + "') is lowered only with "
                       "LibTorch's functionalization (LibTorch 2.x); this LibTorch (" + torch_version() + ") has none");
  const auto& lowering = *active_subgraph_lowering;
  const std::function<argument(const argument&)> now = [&](const argument& a) -> argument {
    if (a.is_graph()) {
      const auto it = lowering.lowered.find(a.as_graph().get());
      if (it == lowering.lowered.end())
        throw export_error("xport.decompose.higher_order", "run_decompositions: subgraph '" + a.as_graph()->name +
                                                               "' of node '" + n.name() + "' was not lowered");
      return it->second;
    }
    if (a.is_list()) {
      argument::list_type l;
      for (const auto& e : a.as_list()) l.push_back(now(e));
      return l;
    }
    if (!a.is_value()) return a;
    const auto& iv = held.at(a.as_value().impl());
    if (iv.isBool()) return iv.toBool();
    return cap.value_of(lowering.unhold(iv));
  };
  std::vector<argument> args;
  for (const auto& a : n.args()) args.push_back(now(a));
  auto types = subgraph_outputs(n.op(), args);
  node recorded;
  const auto metas = cap.record_values(n.op(), std::move(args), std::move(types), &recorded);
  recorded.set_tuple_operands(n.has_tuple_operands());
  for (std::size_t k = 0; k < metas.size(); ++k) held[n.output(k).impl()] = lowering.hold(metas[k]);
}

inline void recall(capture& cap, const node& n, std::unordered_map<const value_impl*, c10::IValue>& held);

/// A call that runs its body under a mode (no_grad, autocast), lowered as torch lowers it: the
/// body's calls, inlined, under that mode (autocast's casts become `_to_copy` calls of their own).
inline void recall_inlined(capture& cap, const node& n, const higher_order_op& hop,
                           std::unordered_map<const value_impl*, c10::IValue>& held) {
  const auto args = n.args();
  const auto& body = args[hop.graph_params().at(0)].as_graph()->body;
  const auto& operands = args.back().as_list();
  std::unordered_map<const value_impl*, c10::IValue> inner;
  const auto phs = body.placeholders();
  for (std::size_t i = 0; i < phs.size() && i < operands.size(); ++i)
    inner[phs[i].output(0).impl()] = held.at(operands[i].as_value().impl());
  const auto run_body = [&] {
    for (auto m : body.nodes())
      if (m.is_call()) recall(cap, m, inner);
  };
  if (hop.which == higher_order_op::id::set_grad_enabled) {
    const c10::AutoGradMode mode(args[0].as_bool());
    run_body();
  } else {
    const auto dtype = args[1].is_dtype() ? args[1].as_dtype() : c10::ScalarType::Undefined;
    const int cache = args[3].is_bool() ? static_cast<int>(args[3].as_bool()) : -1;
    const autocast_scope mode(autocast_device(args[0].as_string()), dtype, args[2].as_bool(), cache);
    run_body();
  }
  const auto outs = body.output_node().args();
  for (std::size_t k = 0; k < outs.size() && k < n.num_outputs(); ++k)
    held[n.output(k).impl()] = inner.at(outs[k].as_value().impl());
}

/// Calls node `n` again, under the active capture, on what its operands hold now (`held`:
/// source value -> IValue), and records what each of its outputs holds after the call.
inline void recall(capture& cap, const node& n, std::unordered_map<const value_impl*, c10::IValue>& held) {
  cap.builder().like(n);
  if (const auto* hop = hop_of(n.op()); hop && hop->inlined_by_lowering) return recall_inlined(cap, n, *hop, held);
  if (n.op().higher_order) return recall_higher_order(cap, n, held);
  torch::jit::Stack stack;
  call_node(n, [&](const value& v) -> const c10::IValue& { return held.at(v.impl()); }, stack);
  take_outputs(stack, [&](std::size_t k, c10::IValue&& r) { held[n.output(k).impl()] = std::move(r); });
}

/// A decomposition that LibTorch refused on the program's shapes (a composite kernel that reads
/// what meta tensors do not have): typed, with the way to keep the op.
[[noreturn]] inline void throw_decomposition_failed(const op_info& op, const c10::Error& e) {
  throw export_error("xport.decompose.failed",
                     "run_decompositions: decomposing " + op.qualified + " failed on the program's shapes: " +
                         first_line(e.what_without_backtrace()) + ". Keep the op whole instead: pass "
                         "decomposition_table::core_aten().keep(\"" + op.name + "\")");
}

/// Re-captures `p` with `table`'s decompositions applied (no functionalization).
inline exported_program decompose(const exported_program& p, const decomposition_table& table) {
  capture cap;
  cap.set_decompose_hook([&table](const op_info& op, torch::jit::Stack& stack) {
    const auto* d = table.find(op);
    if (!d) return false;
    capture_reenabled recording;  // the decomposition's own ATen calls are recorded
    try {
      if (*d) {
        const auto n = op.schema().arguments().size();
        std::vector<c10::IValue> args(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(n)),
                                      std::make_move_iterator(stack.end()));
        torch::jit::drop(stack, n);
        for (auto& r : (*d)(args)) stack.push_back(std::move(r));
      } else {
        op.handle.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, stack);
      }
    } catch (const c10::Error& e) {
      throw_decomposition_failed(op, e);
    }
    return true;
  });
  const auto& g = p.graph();
  const auto phs = g.placeholders();
  std::unordered_map<const value_impl*, c10::IValue> held;  // source value -> what the calls see
  for (std::size_t i = 0; i < phs.size(); ++i) {
    const value v = phs[i].output(0);
    held[v.impl()] = cap.add_placeholder(p.signature().input_specs.at(i), v.type());
  }
  if (!phs.empty() && phs[0].output(0).kind() == value_kind::tensor) cap.set_fake_device(phs[0].output(0).meta().device);
  {
    capture_scope scope(cap);
    for (auto n : g.nodes())
      if (n.is_call()) recall(cap, n, held);
  }
  const auto outs = g.output_node().args();
  const auto& specs = p.signature().output_specs;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].is_value()) {  // a constant output (None): returned as it is
      cap.builder().output_arg(outs[i], specs.at(i).kind, specs.at(i).target);
      continue;
    }
    cap.builder().output(cap.value_of(held.at(outs[i].as_value().impl()).toTensor()), specs.at(i).kind,
                         specs.at(i).target);
  }
  cap.builder().set_state(p.state_dict(), p.constants());
  cap.builder().set_examples(p.example_inputs());
  auto q = std::move(cap.builder()).build(p.dialect(), verify_options{.check_schemas = false});
  q.set_call_spec(p.in_spec(), p.out_spec());
  q.range_constraints_mut() = p.range_constraints();
  return q;
}

inline bool needs_more_work(const exported_program& p, const decomposition_table& table) {
  for (auto n : p.graph().nodes())
    if (n.is_call() && (n.op().is_mutable || table.find(n.op()))) return true;
  return false;
}

#if XPORT_HAS_TORCH_FUNCTIONALIZATION

/// The key below LibTorch's functionalization where lowering records the functional calls.
inline constexpr c10::DispatchKey lowering_record_key = c10::DispatchKey::Fake;

/// The table of the lowering running on this thread (what the recording fallback decomposes).
inline thread_local const decomposition_table* active_lowering = nullptr;

/// Runs `a`'s decomposition of `op` on `stack`: its calls come back to the key that called this.
inline void run_decomposition(const op_info& op, const decomposition_table::action& a, torch::jit::Stack& stack) {
  if (a.fn && *a.fn) {
    const auto n = op.schema().arguments().size();
    std::vector<c10::IValue> args(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(n)),
                                  std::make_move_iterator(stack.end()));
    torch::jit::drop(stack, n);
    for (auto& r : (*a.fn)(args)) stack.push_back(std::move(r));
  } else {
    op.handle.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, stack);
  }
}

inline void lowering_record_fallback(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard no_record(c10::DispatchKeySet({lowering_record_key, capture_key}));
  // Functionalization first runs an in-place op on fresh meta copies of its arguments (to catch
  // shape errors), with the Python key excluded: that check is not part of the program, and
  // torch's own tracing does not see it either.
  if (!active_capture || !active_lowering || c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Python)) {
    handle.callBoxed(stack);
    return;
  }
  const op_info& op = active_capture->op_for(handle);
  const auto a = active_lowering->lowering_below(op);
  if (a.kind == decomposition_table::action::decompose) {
    // below autograd, as torch's decompositions run as it records; the pieces come back here
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    c10::impl::ExcludeDispatchKeyGuard no_top(capture_key);
    c10::impl::tls_set_dispatch_key_excluded(lowering_record_key, false);
    try {
      run_decomposition(op, a, *stack);
    } catch (...) {
      c10::impl::tls_set_dispatch_key_excluded(lowering_record_key, true);
      throw;
    }
    c10::impl::tls_set_dispatch_key_excluded(lowering_record_key, true);
    return;
  }
  active_capture->record_op(op, *stack);
}

inline void ensure_lowering_record_fallback() {
  static const bool registered = [] {
    try {
      static const c10::RegistrationHandleRAII handle = c10::Dispatcher::singleton().registerFallback(
          lowering_record_key, c10::KernelFunction::makeFromBoxedFunction<&lowering_record_fallback>(),
          "xport lowering fallback");
      (void)handle;
    } catch (const c10::Error& e) {
      throw export_error("xport.decompose.fallback",
                         "cannot register xport's lowering fallback for dispatch key Fake: another library "
                         "already uses it. LibTorch said: " + first_line(e.what_without_backtrace()));
    }
    return true;
  }();
  (void)registered;
}

/// A tensor argument's value below functionalization (pending view updates applied).
inline c10::IValue unwrap_functional(const c10::IValue& v) {
  namespace fz = at::functionalization::impl;
  const auto one = [](const at::Tensor& t) {
    if (!t.defined() || !fz::isFunctionalTensor(t)) return t;
    fz::sync(t);
    return fz::from_functional_tensor(t);
  };
  if (v.isTensor()) return one(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const auto& t : v.toTensorVector()) out.push_back(one(t));
    return out;
  }
  if (v.isList() && v.toListRef().size() && (v.toListRef()[0].isTensor() || v.toListRef()[0].isNone())) {
    c10::List<c10::optional<at::Tensor>> out;
    for (const auto& e : v.toListRef()) out.push_back(e.isNone() ? c10::optional<at::Tensor>() : one(e.toTensor()));
    return out;
  }
  return v;
}

/// A composite op the table keeps: recorded whole, past functionalization (it mutates nothing),
/// its results handed back as functional tensors.
inline void record_preserved(capture& cap, const op_info& op, torch::jit::Stack& stack) {
  const auto n = op.schema().arguments().size();
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end(); ++it) *it = unwrap_functional(*it);
  {
    c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKeySet({lowering_record_key, c10::DispatchKey::Functionalize}));
    cap.record_op(op, stack);
  }
  const auto m = op.schema().returns().size();
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(m); it != stack.end(); ++it) {
    if (it->isTensor()) *it = at::functionalization::impl::to_functional_tensor(it->toTensor());
    else if (it->isTensorList()) *it = c10::List<at::Tensor>(at::functionalization::impl::to_functional_tensor(it->toTensorVector()));
  }
}

/// What requires grad where torch's tracing runs autograd (above functionalization): parameters
/// that do, and what differentiable ops make from them outside decompositions that run below
/// autograd. xport lowers without autograd (it records nothing); this answers what torch's
/// decompositions ask (matmul folds a batch when its right operand requires grad).
class grad_tracker {
 public:
  void mark(const at::Tensor& t) {
    if (!t.defined() || !(c10::isFloatingType(t.scalar_type()) || c10::isComplexType(t.scalar_type()))) return;
    if (set_.insert(t.unsafeGetTensorImpl()).second) keep_.push_back(t);  // kept: no address reuse
  }
  [[nodiscard]] bool requires_grad(const at::Tensor& t) const { return t.defined() && set_.count(t.unsafeGetTensorImpl()); }
  /// Whether any tensor among the `n` arguments on top of `stack` requires grad.
  [[nodiscard]] bool any(const torch::jit::Stack& stack, std::size_t n) const {
    bool r = false;
    for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end() && !r; ++it) {
      if (it->isTensor()) r = requires_grad(it->toTensor());
      else if (it->isTensorList())
        for (const auto& t : it->toTensorVector()) r = r || requires_grad(t);
    }
    return r;
  }
  /// Marks the `n` results on top of `stack`.
  void mark_results(const torch::jit::Stack& stack, std::size_t n) {
    for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end(); ++it) {
      if (it->isTensor()) mark(it->toTensor());
      else if (it->isTensorList())
        for (const auto& t : it->toTensorVector()) mark(t);
    }
  }

 private:
  std::unordered_set<const c10::TensorImpl*> set_;
  std::vector<at::Tensor> keep_;
};

/// Restores a thread-local setting of functionalization when it goes.
struct reapply_views_scope {
  bool prev = at::functionalization::impl::getFunctionalizationReapplyViewsTLS();
  reapply_views_scope() { at::functionalization::impl::setFunctionalizationReapplyViewsTLS(true); }
  ~reapply_views_scope() { at::functionalization::impl::setFunctionalizationReapplyViewsTLS(prev); }
  reapply_views_scope(const reapply_views_scope&) = delete;
  reapply_views_scope& operator=(const reapply_views_scope&) = delete;
};

/// What the lowering's capture does with each op it sees above functionalization: `table`'s
/// action, with what requires grad tracked in `grads` (`below_autograd`: inside a decomposition
/// torch runs as an autograd kernel, where nothing is marked).
inline capture::decompose_hook lowering_hook(capture& cap, const decomposition_table& table, grad_tracker& grads,
                                             bool& below_autograd) {
  return [&cap, &table, &grads, &below_autograd](const op_info& op, torch::jit::Stack& stack) {
    const auto a = table.lowering(op);
    const bool grad = !below_autograd && grads.any(stack, op.schema().arguments().size());
    if (a.kind == decomposition_table::action::functionalize) {
      op.handle.callBoxed(stack);  // on through functionalization, recorded below it
    } else if (a.kind == decomposition_table::action::preserve) {
      record_preserved(cap, op, stack);
    } else {
      capture_reenabled recording;  // the decomposition's own calls come back here
      const bool was_below = below_autograd;
      below_autograd = below_autograd || (a.fn && detail::runs_below_autograd(op));
      try {
        run_decomposition(op, a, stack);
      } catch (...) {
        below_autograd = was_below;
        throw;
      }
      below_autograd = was_below;
    }
    if (grad) grads.mark_results(stack, op.schema().returns().size());
    return true;
  };
}

/// The placeholders of `p` in `cap`, each held as a functional tensor (parameters that require
/// grad marked in `grads`); returns each placeholder's meta tensor (undefined where it has none).
inline std::vector<at::Tensor> functional_placeholders(capture& cap, const exported_program& p, grad_tracker& grads,
                                                       std::unordered_map<const value_impl*, c10::IValue>& held) {
  namespace fz = at::functionalization::impl;
  const auto phs = p.graph().placeholders();
  std::vector<at::Tensor> inputs(phs.size());
  for (std::size_t i = 0; i < phs.size(); ++i) {
    const value v = phs[i].output(0);
    auto meta = cap.add_placeholder(p.signature().input_specs.at(i), v.type());
    if (meta.defined()) {
      inputs[i] = meta;
      auto ft = fz::to_functional_tensor(meta);
      if (v.kind() == value_kind::tensor && v.meta().requires_grad) grads.mark(ft);
      held[v.impl()] = std::move(ft);
    } else {
      held[v.impl()] = meta;
    }
  }
  if (!phs.empty() && phs[0].output(0).kind() == value_kind::tensor) cap.set_fake_device(phs[0].output(0).meta().device);
  return inputs;
}

/// What replaying `p`'s calls under `cap` left: the new value of each placeholder it mutated
/// (in placeholder order, empty where none), and the outputs.
struct functional_replay {
  std::vector<std::optional<value>> mutated;
  std::vector<argument> results;
};

/// Calls every node of `p` again on functional tensors (`held`, from functional_placeholders),
/// then reads what each input holds now and the outputs: pending views are replayed (recorded
/// below, not decomposed again, as in torch).
inline functional_replay replay_functional(capture& cap, const exported_program& p, const std::vector<at::Tensor>& inputs,
                                           std::unordered_map<const value_impl*, c10::IValue>& held,
                                           const std::function<void()>& after_calls = {}) {
  const auto& g = p.graph();
  const auto phs = g.placeholders();
  functional_replay out{std::vector<std::optional<value>>(phs.size()), {}};
  c10::InferenceMode no_inference(false);
  capture_scope scope(cap);
  c10::impl::IncludeDispatchKeyGuard functionalize(c10::DispatchKey::Functionalize), record(lowering_record_key);
  reapply_views_scope views;
  for (auto n : g.nodes())
    if (n.is_call()) recall(cap, n, held);
  if (after_calls) after_calls();  // the joint graph's backward (lower/joint.hpp), recorded the same way
  c10::impl::ExcludeDispatchKeyGuard below(capture_key);
  const auto now = [&](const value& v) { return cap.value_of(unwrap_functional(held.at(v.impl())).toTensor()); };
  for (std::size_t i = 0; i < phs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    const value nv = now(phs[i].output(0));
    if (nv != cap.value_of(inputs[i])) out.mutated[i] = nv;
  }
  const node graph_out = g.output_node();
  for (const auto& a : graph_out.args()) {
    if (!a.is_value()) {  // a constant output (None): returned as it is
      out.results.push_back(a);
      continue;
    }
    if (a.as_value().kind() != value_kind::tensor)
      throw error("xport.decompose.output", "run_decompositions: an output that is not a tensor value is not supported");
    out.results.push_back(now(a.as_value()));
  }
  return out;
}

/// The lowered program's outputs: mutated inputs first (in input order), as torch orders them,
/// then the other outputs of `p`.
inline void lowered_outputs(capture& cap, const exported_program& p, const functional_replay& replay,
                            std::optional<std::size_t> loss_index = std::nullopt) {
  const auto& specs = p.signature().input_specs;
  const auto& out_specs = p.signature().output_specs;
  const auto& results = replay.results;
  const auto mutation_target = [](const output_spec& o) {
    return o.kind == output_kind::buffer_mutation || o.kind == output_kind::parameter_mutation ||
           o.kind == output_kind::user_input_mutation;
  };
  for (std::size_t i = 0; i < replay.mutated.size(); ++i) {
    const auto& spec = specs[i];
    std::optional<value> v = replay.mutated[i];
    for (std::size_t o = 0; !v && o < out_specs.size(); ++o)  // an already functional program's
      if (mutation_target(out_specs[o]) && results[o].is_value() &&
          out_specs[o].target == (spec.kind == input_kind::user_input ? std::optional(spec.arg.name) : spec.target))
        v = results[o].as_value();
    if (!v) continue;
    switch (spec.kind) {
      case input_kind::buffer: cap.builder().output(*v, output_kind::buffer_mutation, spec.target); break;
      case input_kind::parameter: cap.builder().output(*v, output_kind::parameter_mutation, spec.target); break;
      case input_kind::user_input: cap.builder().output(*v, output_kind::user_input_mutation, spec.arg.name); break;
      default:
        throw functionalize_error("xport.functionalize.constant_mutation",
                                  "the program mutates constant '" + spec.target.value_or(spec.arg.name) +
                                      "'; register it as a buffer");
    }
  }
  for (std::size_t o = 0; o < out_specs.size(); ++o)
    if (!mutation_target(out_specs[o]))
      cap.builder().output_arg(results[o], o == loss_index ? output_kind::loss_output : out_specs[o].kind,
                               out_specs[o].target);
}

/// torch.export's lowering of `p` (one size): every node called again on functional meta
/// tensors; `table` decides above functionalization, the functional calls are recorded below.
/// What lower_functional adds for a joint graph (lower/joint.hpp): the backward, run by autograd
/// on the replayed forward, and its gradients as outputs.
struct joint_hooks {
  std::size_t loss_index = 0;
  // requires grad on what is differentiated: (placeholder index, its functional tensor)
  std::function<void(std::size_t, at::Tensor&)> mark;
  // runs the backward after the forward's calls (held: source value -> what the calls saw)
  std::function<void(capture&, std::unordered_map<const value_impl*, c10::IValue>&)> backward;
  // adds the gradient outputs, after the others
  std::function<void(capture&)> outputs;
};

inline exported_program lower_functional(const exported_program& p, const decomposition_table& table,
                                         const joint_hooks* joint = nullptr) {
  ensure_lowering_record_fallback();
  capture cap;
  cap.set_python_frontend(false);
  grad_tracker grads;
  bool below_autograd = false;  // inside a decomposition torch runs as an autograd kernel
  cap.set_decompose_hook(lowering_hook(cap, table, grads, below_autograd));
  const std::function<bool(const at::Tensor&)> grad_query = [&](const at::Tensor& t) { return grads.requires_grad(t); };
  struct grad_scope {
    const std::function<bool(const at::Tensor&)>* prev;
    ~grad_scope() { torch_decomp::requires_grad_query = prev; }
  } restore_grads{torch_decomp::requires_grad_query};
  torch_decomp::requires_grad_query = &grad_query;
  struct lowering_scope {
    const decomposition_table* prev;
    ~lowering_scope() { active_lowering = prev; }
  } restore{active_lowering};
  active_lowering = &table;
  std::unordered_map<const value_impl*, c10::IValue> held;  // source value -> what the calls see
  const auto inputs = functional_placeholders(cap, p, grads, held);  // placeholder -> its meta tensor
  if (!joint) {
    lowered_outputs(cap, p, replay_functional(cap, p, inputs, held));
  } else {
    const auto phs = p.graph().placeholders();
    for (std::size_t i = 0; i < phs.size(); ++i)
      if (auto& h = held.at(phs[i].output(0).impl()); h.isTensor()) {
        auto t = h.toTensor();
        joint->mark(i, t);
        h = t;
      }
    lowered_outputs(cap, p, replay_functional(cap, p, inputs, held, [&] { joint->backward(cap, held); }),
                    joint->loss_index);
    joint->outputs(cap);
  }
  cap.builder().set_state(p.state_dict(), p.constants());
  cap.builder().set_examples(p.example_inputs());
  auto q = std::move(cap.builder()).build(ir_dialect::aten, verify_options{.check_schemas = false});
  q.set_call_spec(p.in_spec(), p.out_spec());
  q.range_constraints_mut() = p.range_constraints();
  eliminate_dead_code(q.graph_mut());
  return q;
}

#endif  // XPORT_HAS_TORCH_FUNCTIONALIZATION

}  // namespace detail

/// torch.export's run_decompositions(): the functional inference IR (dialect ATEN), lowered to
/// core ATen by `table` (the default), or only functionalized (decomposition_table::none()).
/// `p` is left as it is.
inline exported_program run_decompositions(const exported_program& p,
                                           const decomposition_table& table = decomposition_table::core_aten()) {
  // dynamic dims: decomposed at several sizes and made symbolic again (trace/symbolic.hpp)
  auto q = detail::transform_symbolic(p, "run_decompositions", [&](const exported_program& s) {
#if XPORT_HAS_TORCH_FUNCTIONALIZATION
    // control flow: each subgraph is lowered first, on its own (at these sizes)
    detail::subgraph_lowering lowering{
        {},
        [](const at::Tensor& meta) -> c10::IValue { return at::functionalization::impl::to_functional_tensor(meta); },
        [](const c10::IValue& v) { return detail::unwrap_functional(v).toTensor(); }};
    // (a body lowering inlines, a no_grad or autocast region's, is looked into instead)
    const std::function<void(const graph&)> lower_subgraphs = [&](const graph& outer) {
      for (auto n : outer.nodes())
        if (n.is_call() && n.op().higher_order)
          for_each_subgraph(n, [&](const subgraph& g) {
            if (const auto* hop = hop_of(n.op()); hop && hop->inlined_by_lowering) return lower_subgraphs(g.body);
            auto lowered = run_decompositions(subgraph_program(g), table);
            auto body = lowered.graph().clone();
            if (g.body.returns_bare()) body.set_returns_bare(true);
            if (g.body.returns_list()) body.set_returns_list(true);
            lowering.lowered.emplace(&g, std::make_shared<const subgraph>(subgraph{g.name, std::move(body)}));
          });
    };
    lower_subgraphs(s.graph());
    struct lowering_scope {
      const detail::subgraph_lowering* prev = detail::active_subgraph_lowering;
      ~lowering_scope() { detail::active_subgraph_lowering = prev; }
    } restore;
    detail::active_subgraph_lowering = &lowering;
    try {
      return detail::lower_functional(s, table);
    } catch (const c10::Error& e) {
      throw export_error("xport.decompose.failed", "run_decompositions: LibTorch refused a call while lowering "
                                                   "the program: " + detail::first_line(e.what_without_backtrace()));
    }
#else
    auto r = functionalize(detail::decompose(s, table));
    for (int round = 0; round < 3 && detail::needs_more_work(r, table); ++round)
      r = functionalize(detail::decompose(r, table));
    eliminate_dead_code(r.graph_mut());  // e.g. the reserve buffer batch_norm's decomposition makes
    return r;
#endif
  });
  verify(q);
  // the inputs are the same, in the same order: they keep their custom metadata
  const auto from = p.graph().placeholders();
  const auto to = q.graph().placeholders();
  for (std::size_t i = 0; i < from.size() && i < to.size(); ++i) to[i].copy_custom_meta_from(from[i]);
  return q;
}

XPORT_END_NAMESPACE
// #include <xport/lower/joint.hpp>
// xport/lower/joint.hpp: export_forward_backward(), the joint graph: one functional core-ATen
// program that computes a loss and its gradients, torch's
// `torch.export.experimental._export_forward_backward(ep, joint_loss_index)`.
//
// Made as torch makes it (AOTAutograd's joint trace): the program is lowered as
// run_decompositions() lowers it (lower/decompose.hpp), with the parameters requiring grad and
// autograd on above functionalization, then LibTorch's autograd engine runs the backward of the
// loss on the same functional meta tensors; every call of the backward formulas is recorded,
// decomposed by the same table. The program returns its buffer mutations, its outputs (the loss
// as LOSS_OUTPUT) and the gradients: GRADIENT_TO_PARAMETER per parameter that requires grad,
// GRADIENT_TO_USER_INPUT per user input that does.

#include <cstddef>        // std::size_t
#include <optional>       // std::optional
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::pair
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/lower/decompose.hpp>
// #include <xport/ops/higher_order.hpp>
// #include <xport/trace/symbolic.hpp>
// #include <xport/program/verify.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

/// The gradients of `loss` to `inputs` (undefined where unused) by LibTorch's autograd engine,
/// for the joint graph's backward. run/module.hpp installs it (xport/train.hpp): LibTorch's
/// autograd API is parsed only by the programs that train.
using autograd_grad_fn = std::vector<at::Tensor> (*)(const at::Tensor& loss, const std::vector<at::Tensor>& inputs);
inline autograd_grad_fn autograd_grad = nullptr;

#if XPORT_HAS_TORCH_FUNCTIONALIZATION

/// What is differentiated: the parameters that require grad, and the user inputs that do.
inline bool differentiated(const input_spec& spec, const value& v) {
  if (v.kind() != value_kind::tensor || !c10::isFloatingType(v.meta().dtype)) return false;
  if (spec.kind == input_kind::parameter) return v.meta().requires_grad;
  return spec.kind == input_kind::user_input && v.meta().requires_grad;
}

/// The joint graph of one static program (export_forward_backward runs it at several sizes for
/// dynamic dims).
inline exported_program joint_functional(const exported_program& p, std::size_t loss_index,
                                         const decomposition_table& table) {
  const auto phs = p.graph().placeholders();
  const auto& specs = p.signature().input_specs;
  std::vector<std::pair<std::size_t, at::Tensor>> wrt;  // placeholder index, its functional tensor
  std::vector<std::pair<std::size_t, value>> grads;     // placeholder index, its gradient's value
  joint_hooks hooks;
  hooks.loss_index = loss_index;
  hooks.mark = [&](std::size_t i, at::Tensor& t) {
    if (!differentiated(specs.at(i), phs[i].output(0))) return;
    t.requires_grad_(true);
    wrt.emplace_back(i, t);
  };
  hooks.backward = [&](capture& cap, std::unordered_map<const value_impl*, c10::IValue>& held) {
    const auto outs = p.graph().output_node().args();
    const auto& arg = outs[loss_index];
    const at::Tensor loss = arg.is_value() && held.at(arg.as_value().impl()).isTensor()
                                ? held.at(arg.as_value().impl()).toTensor()
                                : at::Tensor();
    if (!loss.defined() || loss.dim() != 0 || !loss.requires_grad())
      throw export_error("xport.joint.loss",
                         "export_forward_backward: output " + std::to_string(loss_index) +
                             " is not a scalar loss that depends on a parameter requiring grad (it is " +
                             (loss.defined() ? "a " + std::to_string(loss.dim()) + "-d tensor" +
                                                   (loss.requires_grad() ? "" : " that requires no grad")
                                             : std::string("not a tensor")) +
                             "). Return the loss from the program (e.g. a torch::mse_loss of its output and a "
                             "target input) and pass its output index");
    std::vector<at::Tensor> inputs;
    for (const auto& [i, t] : wrt) inputs.push_back(t);
    const auto gs = autograd_grad(loss, inputs);
    c10::impl::ExcludeDispatchKeyGuard below(capture_key);
    for (std::size_t k = 0; k < gs.size(); ++k)
      if (gs[k].defined()) grads.emplace_back(wrt[k].first, cap.value_of(unwrap_functional(gs[k]).toTensor()));
  };
  hooks.outputs = [&](capture& cap) {
    for (const auto& [i, v] : grads) {
      const auto& spec = specs.at(i);
      if (spec.kind == input_kind::parameter) cap.builder().output(v, output_kind::gradient_to_parameter, spec.target);
    }
    for (const auto& [i, v] : grads) {
      const auto& spec = specs.at(i);
      if (spec.kind == input_kind::user_input) cap.builder().output(v, output_kind::gradient_to_user_input, spec.arg.name);
    }
  };
  const c10::AutoGradMode grad_on(true);
  return lower_functional(p, table, &hooks);
}

#endif  // XPORT_HAS_TORCH_FUNCTIONALIZATION

}  // namespace detail

/// torch's `_export_forward_backward(ep, joint_loss_index)`: the joint forward+backward program
/// of `p`, whose output `loss_index` is a scalar loss. Functional core ATen (`table` decides, as
/// in run_decompositions); its outputs are `p`'s buffer mutations, `p`'s outputs (output
/// `loss_index` a LOSS_OUTPUT) and the gradients of the loss to every parameter (and user input)
/// that requires grad, in signature order. Running it (xport::run, the engine) returns the user
/// outputs, then the gradients; it saves and loads like any program. Needs LibTorch >= 2.1.
inline exported_program export_forward_backward(const exported_program& p, std::size_t loss_index = 0,
                                                const decomposition_table& table = decomposition_table::core_aten()) {
#if XPORT_HAS_TORCH_FUNCTIONALIZATION
  if (!detail::autograd_grad)
    throw export_error("xport.joint.autograd", "export_forward_backward: include <xport/train.hpp> in the program that "
                                               "calls it (it brings LibTorch's autograd API, which the backward runs on)");
  std::size_t user = 0;
  for (const auto& s : p.signature().output_specs)
    user += s.kind == output_kind::user_output || s.kind == output_kind::loss_output;
  if (loss_index >= user)
    throw export_error("xport.joint.loss", "export_forward_backward: loss index " + std::to_string(loss_index) +
                                               " is out of range: the program has " + std::to_string(user) +
                                               " user output(s)");
  for (auto n : p.graph().nodes())
    if (n.is_call() && n.op().higher_order)
      if (const auto* hop = hop_of(n.op()); !hop || !hop->inlined_by_lowering)
        throw export_error("xport.joint.control_flow",
                           "export_forward_backward: node " + n.name() + " calls " + n.op().qualified +
                               "; the joint graph of a program with control flow is not supported (torch's is "
                               "not either). Differentiate the program with p.module() instead");
  // the loss index counts user outputs; the graph's outputs put the mutations first
  std::size_t index = 0;
  for (std::size_t o = 0, u = 0; o < p.signature().output_specs.size(); ++o) {
    const auto k = p.signature().output_specs[o].kind;
    if (k != output_kind::user_output && k != output_kind::loss_output) continue;
    if (u++ == loss_index) index = o;
  }
  auto q = detail::transform_symbolic(p, "export_forward_backward", [&](const exported_program& s) {
    try {
      return detail::joint_functional(s, index, table);
    } catch (const c10::Error& e) {
      throw export_error("xport.joint.failed", "export_forward_backward: LibTorch refused a call while tracing the "
                                               "backward: " + detail::first_line(e.what_without_backtrace()));
    }
  });
  verify(q);
  return q;
#else
  (void)p, (void)loss_index, (void)table;
  throw export_error("xport.joint.unsupported", "export_forward_backward needs LibTorch >= 2.1 (its functionalization); "
                                                "this build has " + detail::torch_version());
#endif
}

XPORT_END_NAMESPACE

// passes and pipelines
// #include <xport/passes/pass.hpp>
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

// #include <xport/config.hpp>
// #include <xport/program/print.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/program/verify.hpp>

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
// #include <xport/passes/standard.hpp>
// xport/passes/standard.hpp: every built-in pass, and the one list of them.
// Functionalization, decomposition and verify() as pipeline stages are defined here; the other
// passes have a header each. `builtin_passes()` is the list the pass manager registers by name
// (and a test checks that docs/passes.md names each one): a new built-in pass is its header, one
// include and one entry below.

#include <string_view>  // std::string_view
#include <tuple>        // std::tie
#include <utility>      // std::move

// #include <xport/config.hpp>
// #include <xport/passes/canonicalize.hpp>
// xport/passes/canonicalize.hpp: a canonical form, so that two equal programs print equal.
// Call nodes are put in one deterministic topological order (depth first from the outputs, in
// output and argument order; calls no output needs follow, in their old order) and renamed in
// that order as the builder names them (`add`, `add_1`, ...). Placeholders keep their names
// (they are the signature). A program with mutations keeps its order (moving a read across a
// write would change it) and is only renamed.

#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::pair
#include <vector>         // std::vector

// #include <xport/config.hpp>
// #include <xport/program/builder.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

struct canonicalize_t : pass_base<canonicalize_t> {
  static constexpr std::string_view name = "canonicalize";
  static constexpr passes::traits traits{.transactional = true};  // builds the new program before replacing

  pass_result run(exported_program& p) const {
    const auto& g = p.graph();
    bool mutations = false;
    for (auto n : g.nodes()) mutations = mutations || (n.is_call() && n.op().is_mutable);
    // 1. the order
    std::vector<node> order;
    if (mutations) {
      for (auto n : g.nodes())
        if (n.is_call()) order.push_back(n);
    } else {
      std::unordered_set<const detail::node_impl*> done;
      std::vector<std::pair<node, std::size_t>> stack;  // node, next input to visit
      const auto visit = [&](node root) {
        if (!root.is_call() || done.count(root.impl())) return;
        stack.emplace_back(root, 0);
        done.insert(root.impl());
        while (!stack.empty()) {
          auto& [n, i] = stack.back();
          if (i < n.num_inputs()) {
            const node in = n.input(i++).producer();
            if (in.is_call() && done.insert(in.impl()).second) stack.emplace_back(in, 0);
          } else {
            order.push_back(n);
            stack.pop_back();
          }
        }
      };
      for (auto v : g.outputs()) visit(v.producer());
      for (auto n : g.nodes()) visit(n);  // what no output needs, in its old order
    }
    // 2. rebuild with fresh names
    program_builder b;
    std::unordered_map<const detail::value_impl*, value> map;
    const auto phs = g.placeholders();
    for (std::size_t i = 0; i < phs.size(); ++i) {
      const value v = b.placeholder(p.signature().input_specs.at(i), phs[i].output(0).type());
      v.producer().copy_custom_meta_from(phs[i]);
      map.emplace(phs[i].output(0).impl(), v);
    }
    for (auto n : order) {
      std::vector<argument> args(n.args().begin(), n.args().end());
      for (auto& a : args) a.for_each_value([&](value& v) { v = map.at(v.impl()); });
      std::vector<value_type> types;
      for (auto v : n.outputs()) types.push_back(v.type());
      b.like(n);
      const node m = b.record(n.op(), std::move(args), std::move(types));
      for (std::size_t i = 0; i < n.num_outputs(); ++i) map.emplace(n.output(i).impl(), m.output(i));
    }
    const auto outs = g.output_node().args();
    const auto& specs = p.signature().output_specs;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].is_value()) b.output(map.at(outs[i].as_value().impl()), specs.at(i).kind, specs.at(i).target);
      else b.output_arg(outs[i], specs.at(i).kind, specs.at(i).target);  // a constant output (None)
    }
    b.set_state(p.state_dict(), p.constants());
    b.set_examples(p.example_inputs());
    auto q = std::move(b).build(p.dialect(), verify_options{.check_schemas = false});
    q.set_call_spec(p.in_spec(), p.out_spec());
    q.range_constraints_mut() = p.range_constraints();
    const bool changed = to_string(q.graph()) != to_string(g);
    p = std::move(q);
    return pass_result::modified(changed);
  }
};
inline constexpr canonicalize_t canonicalize{};

}  // namespace passes
XPORT_END_NAMESPACE
// #include <xport/passes/cse.hpp>
// xport/passes/cse.hpp: common-subexpression elimination.
// Two calls of the same operator on the same arguments (the same values, equal constants)
// compute the same thing: the later one is replaced by the earlier. Never merged: calls that
// draw random numbers (rand, dropout, ...) and calls that write an argument. On a program with
// in-place calls (torch's training IR), writes are effects (Note [Mutations as effects],
// ops/effects.hpp): two calls merge only when every argument has seen the same writes at both,
// and never when their results are written later.
// Expected linear time: one open-addressed hash table keyed by (op, arguments, their versions).

#include <cstddef>        // std::size_t
#include <cstring>        // std::memcpy
#include <functional>     // std::hash
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_multimap
#include <vector>         // std::vector

// #include <xport/config.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ops/effects.hpp>
// xport/ops/effects.hpp: what a call writes, and which values share memory, in a graph that may
// mutate (torch's training IR: relu_, add_, a BatchNorm's running statistics). The passes that
// merge, fold or move calls ask it (passes/cse.hpp, passes/fold.hpp). Read from the operators'
// schemas (`Tensor(a!) self`, `-> Tensor(a)`), plus the ops whose schema does not say that they
// write (batch_norm in training writes its running statistics).

#include <cstddef>        // std::size_t
#include <numeric>        // std::iota
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

// #include <xport/config.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ops/op_sets.hpp>

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
// #include <xport/passes/dce.hpp>
// xport/passes/dce.hpp: dead-code elimination as a pass (program/dead_code.hpp does the work).

#include <string_view>  // std::string_view

// #include <xport/config.hpp>
// #include <xport/program/dead_code.hpp>
// #include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE

namespace passes {

/// Dead-code elimination as a pass (keeps side-effecting calls and every signature output).
struct dce_t : pass_base<dce_t> {
  static constexpr std::string_view name = "dce";
  static constexpr passes::traits traits{.transactional = true};  // erasing dead nodes cannot fail
  pass_result run(exported_program& p) const {
    return pass_result::modified(eliminate_dead_code(p.graph_mut()) != 0);
  }
};
inline constexpr dce_t dce{};

}  // namespace passes

XPORT_END_NAMESPACE
// #include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

inline std::size_t hash_combine(std::size_t h, std::size_t v) {
  return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

inline std::size_t hash_argument(const argument& a) {
  std::size_t h = static_cast<std::size_t>(a.type());
  switch (a.type()) {
    case argument::kind::none: return h;
    case argument::kind::boolean: return hash_combine(h, a.as_bool());
    case argument::kind::integer: return hash_combine(h, std::hash<std::int64_t>{}(a.as_int()));
    case argument::kind::floating: {
      std::uint64_t bits;
      const double d = a.as_double();
      std::memcpy(&bits, &d, sizeof bits);
      return hash_combine(h, std::hash<std::uint64_t>{}(bits));
    }
    case argument::kind::string: return hash_combine(h, std::hash<std::string>{}(a.as_string()));
    case argument::kind::dtype: return hash_combine(h, static_cast<std::size_t>(a.as_dtype()));
    case argument::kind::device: return hash_combine(h, std::hash<c10::Device>{}(a.as_device()));
    case argument::kind::layout: return hash_combine(h, static_cast<std::size_t>(a.as_layout()));
    case argument::kind::memory_format: return hash_combine(h, static_cast<std::size_t>(a.as_memory_format()));
    case argument::kind::value: return hash_combine(h, std::hash<value>{}(a.as_value()));
    case argument::kind::symbolic: return hash_combine(h, a.as_sym().expr()->hash());
    case argument::kind::graph: return hash_combine(h, std::hash<const void*>{}(a.as_graph().get()));
    case argument::kind::list:
      for (const auto& e : a.as_list()) h = hash_combine(h, hash_argument(e));
      return h;
  }
  return h;
}

}  // namespace detail

/// Merges duplicate pure calls; returns how many were removed.
/// The table is open-addressed and holds each call's hash beside it, so a probe that misses
/// touches one cache line and no node: what keeps the pass linear on graphs larger than cache.
inline std::size_t eliminate_common_subexpressions(graph& g) {
  struct slot {
    std::size_t hash = 0;
    detail::node_impl* n = nullptr;
    std::size_t versions = 0;  ///< where the call's argument versions start in `seen`
  };
  std::size_t capacity = 16;
  while (capacity < 2 * g.size()) capacity *= 2;
  std::vector<slot> table(capacity);
  const std::size_t mask = capacity - 1;
  std::size_t removed = 0;
  // Note [Mutations as effects]: the writes each alias class has seen so far
  const alias_classes aliases(g);
  const bool writes = aliases.any_written();
  std::vector<std::size_t> version(writes ? aliases.size() : 0, 0), seen;
  std::vector<std::size_t> now;  // the current call's argument versions
  std::vector<value> written;  // what the current call writes
  const auto mergeable = [&](const node& n) {
    if (!n.is_call() || has_side_effects(n) || !written.empty()) return false;
    for (auto v : n.outputs())
      if (writes && aliases.written(v)) return false;
    return true;
  };
  for (node n = g.first(); n;) {
    const node next = n.next();
    written = n.is_call() ? alias_classes::writes(n) : std::vector<value>{};
    if (mergeable(n)) {
      std::size_t h = std::hash<const void*>{}(n.op_ptr());
      for (const auto& a : n.args()) h = detail::hash_combine(h, detail::hash_argument(a));
      now.clear();
      if (writes)
        for (std::size_t k = 0; k < n.num_inputs(); ++k) now.push_back(version[aliases.class_of(n.input(k))]);
      for (auto v : now) h = detail::hash_combine(h, v);
      h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ULL;  // spread into the low bits
      std::size_t i = (h >> 17) & mask;
      bool merged = false;
      for (; table[i].n; i = (i + 1) & mask) {
        if (table[i].hash != h) continue;
        const node m(table[i].n);
        if (m.op_ptr() != n.op_ptr() || m.num_outputs() != n.num_outputs()) continue;
        const auto ma = m.args(), na = n.args();
        bool same = ma.size() == na.size();
        for (std::size_t k = 0; same && k < ma.size(); ++k) same = ma[k] == na[k];
        for (std::size_t k = 0; same && k < now.size(); ++k) same = seen[table[i].versions + k] == now[k];
        if (!same) continue;
        for (std::size_t k = 0; k < n.num_outputs(); ++k) n.output(k).replace_all_uses_with(m.output(k));
        g.erase(n);
        ++removed;
        merged = true;
        break;
      }
      if (!merged) {
        table[i] = slot{h, n.impl(), seen.size()};
        seen.insert(seen.end(), now.begin(), now.end());
      }
    } else {
      for (const auto& v : written) ++version[aliases.class_of(v)];
    }
    n = next;
  }
  return removed;
}

namespace passes {

struct cse_t : pass_base<cse_t> {
  static constexpr std::string_view name = "cse";
  static constexpr passes::traits traits{.transactional = true};  // merges or leaves each call: nothing half-done
  pass_result run(exported_program& p) const {
    return pass_result::modified(eliminate_common_subexpressions(p.graph_mut()) != 0);
  }
};
inline constexpr cse_t cse{};

}  // namespace passes
XPORT_END_NAMESPACE
// #include <xport/passes/dce.hpp>
// #include <xport/passes/fold.hpp>
// xport/passes/fold.hpp: constant folding.
// A call whose inputs are all constants (lifted constant tensors, or results of other such
// calls) computes the same thing on every run: it is computed once, now, and the results that
// the rest of the program reads are lifted as new CONSTANT_TENSOR inputs (`c__folded_0`, ...).
// Calls that draw random numbers, write, or take a symbolic size (what they compute differs
// from size to size) are never folded, nor is anything a call writes to (Note [Mutations as
// effects], ops/effects.hpp: a lifted constant written in place would change from run to run);
// results larger than the size limit are left to run (so weights are not duplicated). With `fold_state`, parameters and buffers count as constants too
// (for inference deployment, e.g. after folding batch norm into a conv), except those the
// program mutates (a counter buffer changes from run to run).

#include <algorithm>      // std::find
#include <cstddef>        // std::size_t
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <cstdint>        // std::uint32_t
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

// #include <xport/config.hpp>
// #include <xport/ops/call.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ops/effects.hpp>
// #include <xport/passes/dce.hpp>
// #include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

struct fold_t : pass_base<fold_t> {
  static constexpr std::string_view name = "fold";
  // computes everything before changing anything: transactional
  static constexpr passes::traits traits{.needs_shapes = true, .transactional = true};

  /// Results larger than this stay computed at run time.
  std::size_t max_bytes = std::size_t{1} << 20;
  /// Treat parameters and buffers as constants (inference deployment).
  bool fold_state = false;

  /// A copy with another size limit / state policy: `fold.limit(64 << 20).with_state()`.
  [[nodiscard]] constexpr fold_t limit(std::size_t bytes) const {
    fold_t f = *this;
    f.max_bytes = bytes;
    return f;
  }
  [[nodiscard]] constexpr fold_t with_state(bool on = true) const {
    fold_t f = *this;
    f.fold_state = on;
    return f;
  }

  pass_result run(exported_program& p) const {
    known_values known;
    const auto folded = compute_constants(p, known);
    const auto frontier = frontier_of(folded, known);
    if (frontier.empty()) return pass_result::unchanged();
    lift(p, frontier, known);
    return pass_result::modified();
  }

 private:
  // The constant values and what they hold: value::scratch() is 1 + an index into `held`, or 0.
  struct known_values {
    std::vector<c10::IValue> held;
    const c10::IValue& of(value v) const { return held[v.scratch() - 1]; }
    void remember(value v, c10::IValue t) {
      held.push_back(std::move(t));
      v.scratch() = static_cast<std::uint32_t>(held.size());
    }
  };

  // Parameters and buffers the program writes (BUFFER_MUTATION, PARAMETER_MUTATION): they change
  // from run to run, so they are never constants, even with fold_state.
  static std::vector<std::string_view> mutated_state(const exported_program& p) {
    std::vector<std::string_view> mutated;
    for (const auto& o : p.signature().output_specs)
      if ((o.kind == output_kind::buffer_mutation || o.kind == output_kind::parameter_mutation) && o.target)
        mutated.push_back(*o.target);
    return mutated;
  }

  // Whether placeholder input `s` is a constant.
  bool is_constant_input(const input_spec& s, const std::vector<std::string_view>& mutated) const {
    if (s.kind == input_kind::constant_tensor) return true;
    return fold_state && (s.kind == input_kind::parameter || s.kind == input_kind::buffer) &&
           !(s.target && std::find(mutated.begin(), mutated.end(), *s.target) != mutated.end());
  }

  // Calls `n` on the constants it reads; true (its outputs known) when every result is a tensor.
  // A call whose arguments hold a symbolic size computes something else at every size: it stays.
  static bool fold_call(const node& n, known_values& known) {
    if (detail::has_symbolic_argument(n.args())) return false;
    torch::jit::Stack stack;
    detail::call_node(n, [&](const value& v) -> const c10::IValue& { return known.of(v); }, stack);
    bool all_tensors = true;
    const auto outputs = detail::for_each_output(
        stack, [&](std::size_t, const c10::IValue& r) { all_tensors = all_tensors && r.isTensor(); });
    if (!all_tensors || outputs != n.num_outputs()) return false;
    detail::take_outputs(stack, [&](std::size_t k, c10::IValue&& r) { known.remember(n.output(k), std::move(r)); });
    return true;
  }

  // 1. Which values are constant, and what they hold (one forward walk: producers come before
  //    users, so a call's inputs are known or not when it is reached); returns the folded calls.
  //    An exception here fails the pass before any change.
  std::vector<node> compute_constants(const exported_program& p, known_values& known) const {
    const auto& specs = p.signature().input_specs;
    const auto mutated = mutated_state(p);
    const alias_classes aliases(p.graph());  // Note [Mutations as effects]: what is written is never a constant
    const auto written = [&](const node& n) {
      for (auto v : n.outputs())
        if (aliases.written(v)) return true;
      return !alias_classes::writes(n).empty();
    };
    std::vector<node> folded;
    c10::NoGradGuard no_grad;
    std::size_t ph_index = 0;
    for (auto n : p.graph().nodes()) {
      for (auto v : n.outputs()) v.scratch() = 0;
      if (n.is_placeholder()) {
        const auto& s = specs[ph_index++];
        if (is_constant_input(s, mutated) && !written(n)) known.remember(n.output(0), p.lifted_tensor(s).detach());
        continue;
      }
      if (!n.is_call() || n.op().higher_order || has_side_effects(n) || n.num_outputs() == 0 || written(n)) continue;
      bool all_known = true;
      for (std::size_t i = 0; i < n.num_inputs() && all_known; ++i) all_known = n.input(i).scratch() != 0;
      if (all_known && fold_call(n, known)) folded.push_back(n);
    }
    return folded;
  }

  // 2. The frontier: folded results read by calls that stay, or returned (a user is folded when
  //    it is a call whose outputs are known), and small enough to lift.
  std::vector<value> frontier_of(const std::vector<node>& folded, const known_values& known) const {
    const auto is_folded = [](const use& u) {
      const node un = u.user();
      return un.is_call() && un.num_outputs() != 0 && un.output(0).scratch() != 0;
    };
    std::vector<value> frontier;
    for (auto n : folded)
      for (auto v : n.outputs()) {
        bool needed = false;
        for (const auto& u : v.uses()) needed = needed || !is_folded(u);
        if (needed && known.of(v).toTensor().nbytes() <= max_bytes) frontier.push_back(v);
      }
    return frontier;
  }

  // 3. Lifts the frontier as CONSTANT_TENSOR inputs (`c__folded_0`, ...), before the user
  //    inputs, and removes what no longer runs.
  static void lift(exported_program& p, const std::vector<value>& frontier, const known_values& known) {
    const auto phs = p.graph().placeholders();
    auto& gm = p.graph_mut();
    auto& sig = p.signature_mut();
    std::size_t insert_at = 0;
    while (insert_at < sig.input_specs.size() && sig.input_specs[insert_at].kind != input_kind::user_input) ++insert_at;
    // new placeholders go before the first user input, or after the last placeholder
    const node before = insert_at < phs.size() ? phs[insert_at] : (phs.empty() ? gm.first() : phs.back().next());
    std::size_t k = 0;
    while (p.constants().contains("_folded_" + std::to_string(k))) ++k;
    std::vector<input_spec> lifted;
    lifted.reserve(frontier.size());
    for (auto v : frontier) {
      const std::string target = "_folded_" + std::to_string(k++);
      auto t = known.of(v).toTensor();
      auto ph = gm.add_placeholder_fresh("c" + target, value_type::of(tensor_meta::of(t)), before);
      lifted.push_back(input_spec{input_kind::constant_tensor, argument_spec::tensor(ph.name()), target, {}});
      p.constants_mut().set(target, std::move(t));
      v.replace_all_uses_with(ph);
    }
    sig.input_specs.insert(sig.input_specs.begin() + static_cast<std::ptrdiff_t>(insert_at), lifted.begin(), lifted.end());
    eliminate_dead_code(gm);
  }
};
inline constexpr fold_t fold{};

}  // namespace passes
XPORT_END_NAMESPACE
// #include <xport/lower/functionalize.hpp>
// #include <xport/passes/pass.hpp>
// #include <xport/passes/rewrite.hpp>
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

#include <algorithm>      // std::sort
#include <memory>         // std::shared_ptr
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

// #include <xport/config.hpp>
// #include <xport/ops/meta_infer.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/passes/pass.hpp>

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
// #include <xport/passes/shapes.hpp>
// xport/passes/shapes.hpp: shape (meta) propagation.
// Recomputes every call's output types from its inputs' (on meta tensors, the same inference
// as the builder), in order: after a rewrite that left stale shapes, or after editing a
// placeholder's type. Types are replaced in graph order (each call sees its inputs' new types);
// the pass is not transactional, so a pipeline runs it on a snapshot and a failure (a call
// whose output count changed) leaves the program as it was.

#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

// #include <xport/config.hpp>
// #include <xport/ops/meta_infer.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/passes/pass.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

struct propagate_shapes_t : pass_base<propagate_shapes_t> {
  static constexpr std::string_view name = "propagate_shapes";
  static constexpr passes::traits traits{.makes_shapes = true};

  pass_result run(exported_program& p) const {
    auto& g = p.graph_mut();
    bool changed = false;
    for (auto n : g.nodes()) {
      if (!n.is_call()) continue;
      const std::vector<argument> args(n.args().begin(), n.args().end());
      auto types = detail::infer_outputs(n.op(), args);
      if (types.size() != n.num_outputs())
        return pass_result::failure("node '" + n.name() + "' (" + n.op().qualified + ") now has " +
                                    std::to_string(types.size()) + " outputs, the graph says " +
                                    std::to_string(n.num_outputs()));
      for (std::size_t i = 0; i < types.size(); ++i) {
        // keep the requires_grad the capture recorded: inference here does not see autograd
        if (types[i].kind == value_kind::tensor && n.output(i).kind() == value_kind::tensor)
          types[i].tensor.requires_grad = n.output(i).meta().requires_grad;
        if (!(types[i] == n.output(i).type())) {
          n.output(i).set_type(std::move(types[i]));
          changed = true;
        }
      }
    }
    return pass_result::modified(changed);
  }
};
inline constexpr propagate_shapes_t propagate_shapes{};

}  // namespace passes
XPORT_END_NAMESPACE
// #include <xport/lower/decompose.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

/// xport::functionalize as a stage: in-place ops out, mutations as outputs.
struct functionalize_t : pass_base<functionalize_t> {
  static constexpr std::string_view name = "functionalize";
  static constexpr passes::traits traits{.makes_functional = true, .makes_shapes = true, .transactional = true};
  pass_result run(exported_program& p) const {
    p = xport::functionalize(p);
    return pass_result::modified();
  }
};
inline constexpr functionalize_t functionalize{};

/// run_decompositions as a stage, with a table (the core ATen one by default), shared with
/// xport::run_decompositions.
struct decompose_t : pass_base<decompose_t> {
  static constexpr std::string_view name = "decompose";
  static constexpr passes::traits traits{.makes_functional = true, .makes_shapes = true, .transactional = true};
  decomposition_table table = decomposition_table::core_aten();
  pass_result run(exported_program& p) const {
    p = run_decompositions(p, table);
    return pass_result::modified();
  }
};
inline const decompose_t decompose{};
inline decompose_t decompose_with(decomposition_table table) {
  decompose_t d;
  d.table = std::move(table);
  return d;
}

/// verify() as a stage.
struct verify_t : pass_base<verify_t> {
  static constexpr std::string_view name = "verify";
  static constexpr passes::traits traits{.needs_shapes = true, .transactional = true};
  pass_result run(exported_program& p) const {
    xport::verify(p);
    return pass_result::unchanged();
  }
};
inline constexpr verify_t verify_stage{};

/// Every built-in pass, in the order `pass_manager::registered()` lists them.
inline auto builtin_passes() {
  return std::tie(dce, cse, fold, canonicalize, propagate_shapes, functionalize, decompose, verify_stage);
}

}  // namespace passes
XPORT_END_NAMESPACE
// #include <xport/passes/manager.hpp>
// xport/passes/manager.hpp: pipelines built at run time, from names (for tools and configs).
//
//   auto pm = xport::passes::pass_manager::parse("functionalize,dce,cse,fold");
//   pm.verify_each(true).print_to(std::cerr);
//   auto r = pm.run(program);
//
// The same passes as the compile-time pipelines (standard.hpp's builtin_passes()), type-erased;
// user passes can be registered by name. verify_each runs verify() after every pass; print_to prints the program before and
// after each one.

#include <functional>     // std::function
#include <map>            // std::map
#include <mutex>          // std::mutex
#include <ostream>        // std::ostream
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <tuple>          // std::apply
#include <vector>         // std::vector

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/passes/pass.hpp>
// #include <xport/passes/standard.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

/// A pass behind a name.
struct any_pass {
  std::string name;
  std::function<pass_result(exported_program&, const pipeline_options&)> run;

  template <class P>
    requires pass<P>
  static any_pass of(P p) {
    return {std::string(P::name), [p = std::move(p)](exported_program& prog, const pipeline_options& o) {
              return run_pass(p, prog, o);
            }};
  }
};

class pass_manager {
 public:
  using factory = std::function<any_pass()>;

  /// Registers a pass under `name` for parse()/add(name).
  static void register_pass(const std::string& name, factory make) {
    std::lock_guard<std::mutex> lock(mutex());
    registry()[name] = std::move(make);
  }
  /// The registered names.
  static std::vector<std::string> registered() {
    std::lock_guard<std::mutex> lock(mutex());
    std::vector<std::string> out;
    for (const auto& [k, v] : registry()) out.push_back(k);
    return out;
  }

  /// "dce,cse,fold" -> a manager running those passes in that order.
  static pass_manager parse(std::string_view text) {
    pass_manager pm;
    std::size_t start = 0;
    while (start <= text.size()) {
      auto end = text.find(',', start);
      if (end == std::string_view::npos) end = text.size();
      auto item = text.substr(start, end - start);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (!item.empty()) pm.add(item);
      start = end + 1;
    }
    return pm;
  }

  pass_manager& add(std::string_view name) {
    std::lock_guard<std::mutex> lock(mutex());
    const auto it = registry().find(std::string(name));
    if (it == registry().end()) {
      std::string known;
      for (const auto& [k, v] : registry()) known += (known.empty() ? "" : ", ") + k;
      throw error("xport.passes.unknown", "no pass named '" + std::string(name) + "' (known: " + known + ")");
    }
    passes_.push_back(it->second());
    return *this;
  }
  template <class P>
    requires pass<P>
  pass_manager& add(P p) {
    passes_.push_back(any_pass::of(std::move(p)));
    return *this;
  }
  pass_manager& verify_each(bool on = true) {
    options_.verify_each = on;
    return *this;
  }
  pass_manager& print_to(std::ostream& os) {
    options_.print = &os;
    return *this;
  }

  /// Runs the passes in order; stops at the first failure (the program is left as that pass
  /// found it) and returns it, prefixed with the pass's name.
  pass_result run(exported_program& p) const {
    pass_result total;
    for (const auto& ps : passes_) {
      auto r = ps.run(p, options_);
      total.changed = total.changed || r.changed;
      if (!r.ok()) return pass_result::failure(ps.name + ": " + r.error);
    }
    return total;
  }

  /// "dce,cse,fold": the textual pipeline, as parse() reads it.
  [[nodiscard]] std::string str() const {
    std::string s;
    for (const auto& ps : passes_) s += (s.empty() ? "" : ",") + ps.name;
    return s;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<std::string, factory>& registry() {
    static std::map<std::string, factory> r = [] {
      std::map<std::string, factory> m;
      std::apply([&](const auto&... p) { ((m[std::string(p.name)] = [&p] { return any_pass::of(p); }), ...); },
                 builtin_passes());
      return m;
    }();
    return r;
  }

  std::vector<any_pass> passes_;
  pipeline_options options_;
};

}  // namespace passes
XPORT_END_NAMESPACE

// running
// #include <xport/run/guards.hpp>
// xport/run/guards.hpp: the checks a program makes on its inputs before running.
// Count, definedness, dtype, device, rank and every static size; a mismatch is a guard_error
// `[xport.guard.<what>] input <name>: ...` naming the input, the dimension, what the program
// expects and what it got, and how to fix it.

#include <algorithm>  // std::find
#include <cstddef>  // std::size_t
#include <optional>  // std::optional
#include <string_view>  // std::string_view
#include <string>   // std::string
#include <vector>   // std::vector

#include <ATen/core/Tensor.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/dtype.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/sym_expr.hpp>
// #include <xport/ir/tensor_meta.hpp>

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
      return;
    }
    throw run_error("xport.run.unbound_symbol", "node '" + where + "' gives " + std::string(name) +
                                                    ", a symbol the program's range constraints do not name");
  }

 private:
  friend class input_guards;
  const std::vector<std::string>* names_ = nullptr;
  const std::vector<value_range>* ranges_ = nullptr;
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
};

XPORT_END_NAMESPACE
// #include <xport/run/interpreter.hpp>
// xport/run/interpreter.hpp: running an exported program through the LibTorch dispatcher.
// The program is compiled once (run/compiled.hpp: a flat instruction list, one register per
// value, each value moved into its last use). Running checks the inputs against the program's
// guards, then makes one boxed call per instruction; the dispatcher picks the kernel (CPU or
// CUDA) from the tensors, and autograd records when parameters require grad.
// An interpreter is immutable after construction: any number of threads may run it at once.

#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint32_t
#include <memory>         // std::shared_ptr
#include <mutex>          // std::lock_guard
#include <optional>       // std::optional
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

// #include <xport/config.hpp>
// #include <xport/ops/call.hpp>
// #include <xport/ops/op_sets.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/unbacked.hpp>
// #include <xport/run/compiled.hpp>
// xport/run/compiled.hpp: a program compiled for running, the one contract between the
// interpreter (run/interpreter.hpp), which makes and runs it, and the engine (run/engine.hpp),
// which plans memory and dispatch over the same code. The compiled form is a flat instruction
// list: operator handles resolved, constant arguments pre-boxed (every argument passed as
// ops/call.hpp decides for all calls), one register per value, each value moved into its last
// use (or dropped at once when nothing uses it), so memory is freed as early as in eager. Beside
// the code it holds where the user inputs and the lifted state enter (their registers), what the
// graph outputs are (registers or constants, user outputs or mutations to write back) and which
// calls bind unbacked symbols. It is immutable after construction; running it (execute) needs
// only a register file of the caller's, so any number of threads may run one at once.

#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint32_t
#include <optional>       // std::optional
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move, std::pair
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/GradMode.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/unbacked.hpp>
// #include <xport/ops/call.hpp>
// #include <xport/ops/op_sets.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/run/guards.hpp>

XPORT_BEGIN_NAMESPACE

class compiled_program {
 public:

  // How one argument is pushed: a pre-boxed constant, a register (copied, or moved when this is
  // its last use), or a list assembled from registers.
  struct arg_op {
    enum class kind : std::uint8_t {
      constant, reg_copy, reg_move, tensor_list, opt_tensor_list, int_list, symbolic,
      symbolic_number, reg_number  // a size where a Tensor is expected: passed as a wrapped number
    };
    kind type;
    std::uint32_t index;  // into constants, regs, lists or syms
  };
  struct list_op {
    std::vector<arg_op> elems;  // constant (None / int) or register
  };
  // Note [Unbacked symbols]: a data-dependent op (nonzero, a boolean-mask index, item()) gives a
  // symbol only its result knows (`u0`, torch's unbacked SymInt). The first call whose output has
  // it as a dim (or is it, for item) binds it in the run's sym_env, checked against its range
  // (what torch's `_assert_scalar` nodes assert); later sizes that use it evaluate from there.
  struct unbacked_bind {
    std::size_t output;
    std::int64_t dim;  // -1: the output is the SymInt itself
    std::string symbol;
  };
  struct instr {
    const c10::OperatorHandle* op;
    const op_info* info;
    std::string node_name;
    std::vector<arg_op> args;
    std::vector<std::uint32_t> outputs;  // register per output; `dead` = unused, dropped at once
    std::vector<unbacked_bind> binds;    // the unbacked symbols this call gives (Note [Unbacked symbols])
  };
  struct mutation {
    std::size_t output;   // index among graph outputs
    int user_input = -1;  // write back into this user input...
    at::Tensor state;     // ...or into this state tensor
    bool statistics = false;  // running statistics only (Note [Running statistics written back])
  };
  static constexpr std::uint32_t dead = 0xffffffffu;
  struct output_slot {
    bool is_reg;
    std::uint32_t index;
  };

  /// Compiles `p`'s graph (its state is referenced, not copied: training it trains the program).
  explicit compiled_program(const exported_program& p) { compile(p); }

  // ---- the compiled form (read-only after construction) ----------------------------------------
  std::vector<instr> code;
  std::vector<c10::IValue> constants;
  std::vector<list_op> lists;
  std::vector<sym_int> syms;                 // symbolic arguments, evaluated per call
  std::unordered_set<std::string> unbacked;  // the unbacked symbols a call binds
  std::vector<std::uint32_t> user_slots;     // per tensor user input: its register
  std::vector<std::optional<c10::MemoryFormat>> input_layout;  // per user input (see in_exported_layout)
  std::vector<std::pair<std::uint32_t, at::Tensor>> state_slots;  // the lifted state's registers
  std::vector<output_slot> outputs;      // per graph output: a register or a constant
  std::vector<std::size_t> user_outputs;  // the graph outputs run() returns, in order
  std::vector<mutation> mutations;       // the graph outputs run() writes back
  std::size_t num_regs = 0;
  std::size_t max_args = 0;  // the most arguments one call pushes

  /// Whether a call gives a symbol at run time (Note [Unbacked symbols]).
  [[nodiscard]] bool binds_unbacked() const noexcept { return !unbacked.empty(); }

  // ---- running it ----------------------------------------------------------------------------

  // Note [Inputs in the exported layout]: a program assumes its examples' memory layout where
  // the ops it was traced through did: a composite kernel that called `.contiguous()` on a
  // contiguous example recorded nothing (`_embedding_bag` then reads a strided index tensor
  // wrongly), a decomposed reshape became a view. The guards accept any layout, so an input
  // whose layout differs from its example's (contiguous or channels_last) is copied into it
  // first: same values, the layout every recorded op assumed. Inputs the program writes in
  // place are passed as they are (their writes must reach the caller's tensor).
  const std::vector<at::Tensor>& in_exported_layout(const std::vector<at::Tensor>& inputs,
                                                    std::vector<at::Tensor>& relaid) const {
    for (std::size_t i = 0; i < inputs.size() && i < input_layout.size(); ++i) {
      const auto& fmt = input_layout[i];
      if (!fmt || !inputs[i].defined() || inputs[i].is_contiguous(*fmt)) continue;
      if (relaid.empty()) relaid = inputs;
      relaid[i] = inputs[i].contiguous(*fmt);
    }
    return relaid.empty() ? inputs : relaid;
  }

  // The user outputs of a run's graph outputs `outs`, after writing its mutations back.
  std::vector<at::Tensor> deliver(const std::vector<c10::IValue>& outs, const std::vector<at::Tensor>& inputs) const {
    std::vector<at::Tensor> user;
    user.reserve(user_outputs.size());
    for (auto i : user_outputs) user.push_back(outs[i].isTensor() ? outs[i].toTensor() : at::Tensor());
    if (!mutations.empty()) {
      c10::NoGradGuard no_grad;
      for (const auto& m : mutations) {
        auto& target = m.user_input >= 0 ? inputs[static_cast<std::size_t>(m.user_input)] : m.state;
        const auto& fresh = outs[m.output].toTensor();
        if (target.is_same(fresh)) continue;
        if (m.statistics) target.variable_data().copy_(fresh);  // its version unchanged
        else target.copy_(fresh);
      }
    }
    return user;
  }

  c10::IValue take(std::vector<c10::IValue>& regs, const sym_env& env, const arg_op& a) const {
    switch (a.type) {
      case arg_op::kind::symbolic: return env.eval(syms[a.index]);
      case arg_op::kind::symbolic_number: return detail::wrapped_number(c10::IValue(env.eval(syms[a.index])));
      case arg_op::kind::reg_number: return detail::wrapped_number(regs[a.index]);
      case arg_op::kind::constant: return constants[a.index];
      case arg_op::kind::reg_copy: return regs[a.index];
      case arg_op::kind::reg_move: return std::move(regs[a.index]);
      default: return {};
    }
  }

  // The registers at the start of a run: the user inputs and the lifted state in their slots.
  std::vector<c10::IValue> initial_registers(const std::vector<at::Tensor>& inputs) const {
    std::vector<c10::IValue> regs(num_regs);
    for (std::size_t i = 0; i < user_slots.size(); ++i) regs[user_slots[i]] = inputs[i];
    for (const auto& [r, t] : state_slots) regs[r] = t;
    return regs;
  }

  // Pushes instruction `in`'s arguments onto `stack` (moving registers at their last use).
  void push_arguments(const instr& in, std::vector<c10::IValue>& regs, const sym_env& env, torch::jit::Stack& stack) const {
    for (const auto& a : in.args) {
      switch (a.type) {
        case arg_op::kind::constant:
        case arg_op::kind::symbolic:
        case arg_op::kind::symbolic_number:
        case arg_op::kind::reg_number:
        case arg_op::kind::reg_copy:
        case arg_op::kind::reg_move: stack.push_back(take(regs, env, a)); break;
        case arg_op::kind::tensor_list: {
          const auto& l = lists[a.index];
          c10::List<at::Tensor> ts;
          ts.reserve(l.elems.size());
          for (const auto& e : l.elems) ts.push_back(take(regs, env, e).toTensor());
          stack.emplace_back(std::move(ts));
          break;
        }
        case arg_op::kind::opt_tensor_list: {
          const auto& l = lists[a.index];
          c10::List<c10::optional<at::Tensor>> ts;
          ts.reserve(l.elems.size());
          for (const auto& e : l.elems) {
            auto v = take(regs, env, e);
            if (v.isNone()) ts.push_back(c10::nullopt);
            else ts.push_back(v.toTensor());
          }
          stack.emplace_back(std::move(ts));
          break;
        }
        case arg_op::kind::int_list: {
          const auto& l = lists[a.index];
          c10::List<std::int64_t> is;
          for (const auto& e : l.elems) is.push_back(take(regs, env, e).toInt());
          stack.emplace_back(std::move(is));
          break;
        }
      }
    }
  }

  // The graph outputs, read from the registers at the end of a run.
  std::vector<c10::IValue> graph_outputs(const std::vector<c10::IValue>& regs) const {
    std::vector<c10::IValue> out;
    out.reserve(outputs.size());
    for (const auto& o : outputs) out.push_back(o.is_reg ? regs[o.index] : constants[o.index]);
    return out;
  }

  [[noreturn]] static void throw_op_failed(const instr& in, const c10::Error& e) {
    throw run_error("xport.run.op_failed",
                    "node '" + in.node_name + "' (" + in.info->qualified + ") failed: " + e.what_without_backtrace());
  }

  std::vector<c10::IValue> execute(const std::vector<at::Tensor>& inputs, sym_env env) const {
    auto regs = initial_registers(inputs);
    torch::jit::Stack stack;
    stack.reserve(max_args + 4);
    for (const auto& in : code) {
      push_arguments(in, regs, env, stack);
      detail::call_op(*in.op, stack, [&](const c10::Error& e) { throw_op_failed(in, e); });
      detail::take_outputs(stack, [&](std::size_t k, c10::IValue&& r) {
        if (!in.binds.empty()) bind_unbacked(in, k, r, env);
        if (k < in.outputs.size() && in.outputs[k] != dead) regs[in.outputs[k]] = std::move(r);
      });
      stack.clear();
    }
    return graph_outputs(regs);
  }

  // Binds the unbacked symbols of instruction `in` from its output `k`, `r` (Note [Unbacked symbols]).
  static void bind_unbacked(const instr& in, std::size_t k, const c10::IValue& r, sym_env& env) {
    for (const auto& b : in.binds) {
      if (b.output != k) continue;
      const auto v = b.dim < 0 ? r.toInt() : r.toTensor().size(b.dim);
      env.bind_unbacked(b.symbol, v, in.node_name);
    }
  }

  /// Calls `f(register)` for every register instruction `in` reads (lists included).
  template <class F>
  void for_each_register_use(const instr& in, F&& f) const {
    const auto visit = [&](const arg_op& a) {
      if (a.type == arg_op::kind::reg_copy || a.type == arg_op::kind::reg_move || a.type == arg_op::kind::reg_number) f(a.index);
    };
    for (const auto& a : in.args) {
      if (a.type == arg_op::kind::tensor_list || a.type == arg_op::kind::opt_tensor_list || a.type == arg_op::kind::int_list) {
        for (const auto& e : lists[a.index].elems) visit(e);
      } else {
        visit(a);
      }
    }
  }

  /// This code with every move out of a register made a copy: for runs whose calls read a
  /// register from several threads (the engine's parallel branches).
  [[nodiscard]] compiled_program copying() const {
    compiled_program c = *this;
    for (auto& in : c.code)
      for (auto& a : in.args)
        if (a.type == arg_op::kind::reg_move) a.type = arg_op::kind::reg_copy;
    for (auto& l : c.lists)
      for (auto& e : l.elems)
        if (e.type == arg_op::kind::reg_move) e.type = arg_op::kind::reg_copy;
    return c;
  }

 private:
  // The layout of a placeholder's example, when it is one `.contiguous(format)` makes.
  static std::optional<c10::MemoryFormat> exported_layout(const value& v) {
    if (v.kind() != value_kind::tensor) return std::nullopt;
    const auto& m = v.meta();
    if (m.layout != c10::kStrided) return std::nullopt;
    const auto t = m.make_meta();
    for (auto fmt : {c10::MemoryFormat::Contiguous, c10::MemoryFormat::ChannelsLast, c10::MemoryFormat::ChannelsLast3d})
      if ((fmt != c10::MemoryFormat::ChannelsLast || t.dim() == 4) && (fmt != c10::MemoryFormat::ChannelsLast3d || t.dim() == 5) &&
          t.is_contiguous(fmt))
        return fmt;
    return std::nullopt;
  }

  // Placeholders some in-place op writes to, directly or through a view.
  static std::unordered_set<const detail::value_impl*> written_placeholders(const graph& g) {
    std::unordered_map<const detail::value_impl*, const detail::value_impl*> root;
    for (auto ph : g.placeholders()) root[ph.output(0).impl()] = ph.output(0).impl();
    std::unordered_set<const detail::value_impl*> written;
    for (auto n : g.nodes()) {
      if (!n.is_call()) continue;
      const auto& op = n.op();
      const auto args = n.args();
      const auto& params = op.schema().arguments();
      const auto root_of = [&](const argument& a) -> const detail::value_impl* {
        if (!a.is_value()) return nullptr;
        const auto it = root.find(a.as_value().impl());
        return it == root.end() ? nullptr : it->second;
      };
      const detail::value_impl* aliased = nullptr;
      for (std::size_t i = 0; i < params.size() && i < args.size(); ++i) {
        const auto* ai = params[i].alias_info();
        if (!ai) continue;
        const auto* r = root_of(args[i]);
        if (ai->isWrite() && r) written.insert(r);
        if (!aliased) aliased = r;
      }
      if (aliased && (op.is_view || op.is_mutable || op.inplace_view))
        for (auto v : n.outputs()) root[v.impl()] = aliased;
    }
    return written;
  }

  using reg_map = std::unordered_map<const detail::value_impl*, std::uint32_t>;
  using last_use_map = std::unordered_map<const detail::value_impl*, const detail::node_impl*>;

  void compile(const exported_program& p) {
    const auto& g = p.graph();
    reg_map reg;
    compile_inputs(p, reg);
    last_use_map last_use;  // last use of every value, by node order
    for (auto n : g.nodes())
      for (std::size_t i = 0; i < n.num_inputs(); ++i) last_use[n.input(i).impl()] = n.impl();
    for (auto n : g.nodes())
      if (n.is_call()) compile_call(n, reg, last_use);
    num_regs = reg.size();
    compile_outputs(p, reg);
    keep_output_registers();
  }

  // A register per placeholder: the user inputs' slots (and layouts), the state's tensors.
  void compile_inputs(const exported_program& p, reg_map& reg) {
    const auto& sig = p.signature();
    const auto phs = p.graph().placeholders();
    const auto written = written_placeholders(p.graph());
    for (std::size_t i = 0; i < phs.size(); ++i) {
      const auto r = static_cast<std::uint32_t>(reg.size());
      reg.emplace(phs[i].output(0).impl(), r);
      const auto& spec = sig.input_specs.at(i);
      if (spec.kind == input_kind::user_input && spec.arg.type == argument_spec::kind::constant) {
        continue;  // a specialized constant: nothing reads its placeholder
      } else if (spec.kind == input_kind::user_input) {
        user_slots.push_back(r);
        input_layout.push_back(written.count(phs[i].output(0).impl()) ? std::nullopt : exported_layout(phs[i].output(0)));
      } else {
        state_slots.emplace_back(r, p.lifted_tensor(spec));
      }
    }
  }

  // The instruction of call node `n`: how each argument is pushed, a register per used output.
  void compile_call(const node& n, reg_map& reg, const last_use_map& last_use) {
    instr in;
    in.info = &n.op();
    in.op = &in.info->handle;
    in.node_name = n.name();
    // operands whose last use is this node are moved at their last occurrence here
    std::unordered_map<const detail::value_impl*, std::size_t> remaining;
    for (std::size_t i = 0; i < n.num_inputs(); ++i) ++remaining[n.input(i).impl()];
    const auto reg_op = [&](const value& v) -> arg_op {
      const auto r = reg.at(v.impl());
      const bool last = last_use.at(v.impl()) == n.impl() && --remaining[v.impl()] == 0;
      return {last ? arg_op::kind::reg_move : arg_op::kind::reg_copy, r};
    };
    const auto& params = in.info->schema().arguments();
    const auto args = n.args();
    for (std::size_t i = 0; i < params.size(); ++i) in.args.push_back(compile_argument(params[i], args[i], reg_op));
    for (auto v : n.outputs()) {
      if (v.num_uses() == 0) {
        in.outputs.push_back(dead);
      } else {
        const auto r = static_cast<std::uint32_t>(reg.size());
        reg.emplace(v.impl(), r);
        in.outputs.push_back(r);
      }
    }
    compile_unbacked_binds(n, in);
    run_views_as_reshape(in);
    max_args = std::max(max_args, in.args.size());
    code.push_back(std::move(in));
  }

  // The unbacked symbols call `n` is the first to give (Note [Unbacked symbols]).
  void compile_unbacked_binds(const node& n, instr& in) {
    for_each_unbacked_given(n, unbacked, [&](const value& v, std::int64_t dim, const std::string& s, const sym_int&) {
      in.binds.push_back({v.index(), dim, s});
    });
  }

  // How argument `a` of parameter `param` is pushed, as detail::form_of decides for every call;
  // `reg_op(value)` is a value's register operand.
  template <class RegOp>
  arg_op compile_argument(const c10::Argument& param, const argument& a, RegOp&& reg_op) {
    using form = detail::arg_form;
    const auto f = detail::form_of(param, a);
    switch (f) {
      case form::constant:
        constants.push_back(detail::constant_ivalue(param, a));
        return {arg_op::kind::constant, static_cast<std::uint32_t>(constants.size() - 1)};
      case form::value: return reg_op(a.as_value());
      case form::value_number: return {arg_op::kind::reg_number, reg_op(a.as_value()).index};
      case form::symbolic:
      case form::symbolic_number:
        syms.push_back(a.as_sym());
        return {f == form::symbolic ? arg_op::kind::symbolic : arg_op::kind::symbolic_number,
                static_cast<std::uint32_t>(syms.size() - 1)};
      case form::tensor_list:
      case form::optional_tensor_list:
      case form::int_list: break;
    }
    // a list holding values: Tensor[], Tensor?[] or SymInt[]
    list_op l;
    for (const auto& e : a.as_list()) {
      if (e.is_value()) {
        l.elems.push_back(reg_op(e.as_value()));
      } else if (e.is_symbolic()) {
        syms.push_back(e.as_sym());
        l.elems.push_back({arg_op::kind::symbolic, static_cast<std::uint32_t>(syms.size() - 1)});
      } else {
        constants.push_back(e.is_int() ? c10::IValue(e.as_int()) : c10::IValue());
        l.elems.push_back({arg_op::kind::constant, static_cast<std::uint32_t>(constants.size() - 1)});
      }
    }
    lists.push_back(std::move(l));
    const auto k = f == form::tensor_list            ? arg_op::kind::tensor_list
                   : f == form::optional_tensor_list ? arg_op::kind::opt_tensor_list
                                                     : arg_op::kind::int_list;
    return {k, static_cast<std::uint32_t>(lists.size() - 1)};
  }

  // Where each graph output comes from (a register, or a constant), and what it is to run().
  void compile_outputs(const exported_program& p, const reg_map& reg) {
    const auto out_args = p.graph().output_node().args();
    for (std::size_t i = 0; i < out_args.size(); ++i) {
      const auto& a = out_args[i];
      if (a.is_value()) {
        outputs.push_back({true, reg.at(a.as_value().impl())});
      } else {
        constants.push_back(detail::constant_ivalue(a, c10::AnyType::get()));
        outputs.push_back({false, static_cast<std::uint32_t>(constants.size() - 1)});
      }
      compile_output_kind(p, i);
    }
  }

  // Output `i` is a user output, or a mutation run() writes back (into state, or a user input).
  void compile_output_kind(const exported_program& p, std::size_t i) {
    const auto& sig = p.signature();
    const auto& spec = sig.output_specs.at(i);
    switch (spec.kind) {
      case output_kind::user_output:
      case output_kind::loss_output:
      case output_kind::gradient_to_parameter:  // a joint graph's (lower/joint.hpp): after the user outputs
      case output_kind::gradient_to_user_input: user_outputs.push_back(i); break;
      case output_kind::buffer_mutation:
      case output_kind::parameter_mutation: {
        input_spec lookup;
        lookup.kind = spec.kind == output_kind::buffer_mutation ? input_kind::buffer : input_kind::parameter;
        std::size_t at = 0;
        for (std::size_t k = 0; k < sig.input_specs.size(); ++k)
          if (sig.input_specs[k].kind == lookup.kind && sig.input_specs[k].target == spec.target) {
            lookup = sig.input_specs[k];
            at = k;
          }
        mutations.push_back({i, -1, p.lifted_tensor(lookup), only_running_statistics(p.graph().placeholders().at(at))});
        break;
      }
      case output_kind::user_input_mutation: {
        int k = 0;
        for (const auto& s : sig.input_specs) {
          if (s.kind != input_kind::user_input || s.arg.type == argument_spec::kind::constant) continue;
          if (s.arg.name == spec.target) break;
          ++k;
        }
        mutations.push_back({i, k, {}});
        break;
      }
      default: break;
    }
  }

  // Note [Running statistics written back]: a lowered BatchNorm in train mode is
  // `_native_batch_norm_legit_functional`, which returns the new running mean and variance; the
  // run writes them into the buffers afterwards. Autograd saved the buffers for the op's
  // backward, so a plain copy_ bumps their version and the backward refuses to run (torch's
  // unlifted module fails so). Eager updates them inside the op, and in train mode the backward
  // never reads them: when batch-norm calls in train mode are a buffer's only readers, its new
  // value is written without a version bump. Any other reader keeps copy_ and autograd's check.
  static bool only_running_statistics(const node& placeholder) {
    const auto v = placeholder.output(0);
    if (v.num_uses() == 0) return false;
    for (const auto& u : v.uses()) {
      const auto user = u.user();
      if (!user.is_call() || user.op().name.find("batch_norm") == std::string::npos) return false;
      const auto& params = user.op().schema().arguments();
      const auto args = user.args();
      bool training = false, stats_only = true;
      for (std::size_t i = 0; i < params.size() && i < args.size(); ++i) {
        if (params[i].name() == "training" && args[i].is_bool()) training = args[i].as_bool();
        if (args[i].is_value() && args[i].as_value() == v)
          stats_only = stats_only && (params[i].name() == "running_mean" || params[i].name() == "running_var");
      }
      if (!training || !stats_only) return false;
    }
    return true;
  }

  // A register read by the output node must survive to the end: never move out of it.
  void keep_output_registers() {
    std::vector<bool> is_output_reg(num_regs, false);
    for (const auto& o : outputs)
      if (o.is_reg) is_output_reg[o.index] = true;
    const auto keep = [&](arg_op& a) {
      if (a.type == arg_op::kind::reg_move && is_output_reg[a.index]) a.type = arg_op::kind::reg_copy;
    };
    for (auto& in : code)
      for (auto& a : in.args) keep(a);
    for (auto& l : lists)
      for (auto& e : l.elems) keep(e);
  }

  // Note [Views run as reshape]: a decomposed `reshape` is a `view` (torch 2.x) or an
  // `_reshape_alias` with the example's strides (LibTorch 1.13): both assume the example's
  // layout. Given a transposed, sliced or channels_last input, `view` fails and `_reshape_alias`
  // reads the wrong elements. They run as `reshape` instead: the same view whenever one exists
  // (so aliasing is kept), a copy otherwise, the right values for every layout.
  static void run_views_as_reshape(instr& in) {
    const auto& name = in.info->name;
    if (!detail::is_reshaping_view(name, in.info->overload)) return;
    static const op_info& reshape = find_op("aten::reshape");
    in.op = &reshape.handle;
    in.args.resize(2);  // self, size (`_reshape_alias`'s strides are the example's: dropped)
  }
};

XPORT_END_NAMESPACE
// #include <xport/run/guards.hpp>

XPORT_BEGIN_NAMESPACE

struct run_options {
  /// Check inputs against the program's guards before running (count, dtype, device, shape).
  bool check_inputs = true;
  /// Run under c10::InferenceMode: no autograd recording, ~0.2 us less per op. Results are
  /// inference tensors.
  bool inference_mode = false;
};

class interpreter {
 public:
  explicit interpreter(const exported_program& p) : guards_(p), code_(p) {}

  /// Runs on the user inputs (the tensor ones, in signature order: a specialized constant input
  /// is no argument here, its value is the program's); returns the user outputs. Buffer and
  /// input mutations the program returns are written back (into the program's state, and into
  /// the given input tensors) as eager would have done in place.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, const run_options& opts = {}) const {
    sym_env env = opts.check_inputs ? guards_.check_and_bind(inputs) : guards_.bind(inputs);
    std::optional<c10::InferenceMode> inference;
    if (opts.inference_mode) inference.emplace();
    std::vector<at::Tensor> relaid;
    return code_.deliver(code_.execute(code_.in_exported_layout(inputs, relaid), std::move(env)), inputs);
  }

  /// Runs and returns every graph output (mutations included) as IValues, without guards or
  /// write-back: the graph as a pure function of (lifted state, user inputs).
  std::vector<c10::IValue> run_all(const std::vector<at::Tensor>& inputs) const {
    std::vector<at::Tensor> relaid;
    return code_.execute(code_.in_exported_layout(inputs, relaid), guards_.bind(inputs));
  }

  [[nodiscard]] std::size_t num_instructions() const noexcept { return code_.code.size(); }
  /// Whether a call gives a symbol at run time (Note [Unbacked symbols]).
  [[nodiscard]] bool binds_unbacked() const noexcept { return code_.binds_unbacked(); }
  [[nodiscard]] const input_guards& guards() const noexcept { return guards_; }
  /// The compiled code this interpreter runs (what the engine plans over).
  [[nodiscard]] const compiled_program& compiled() const noexcept { return code_; }

 private:
  input_guards guards_;
  compiled_program code_;
};

namespace detail {

// Note [Subgraphs as capsules]: a control-flow node's subgraph argument reaches its kernel
// (ops/higher_order.hpp, cond_kernel) as a constant: a capsule holding the subgraph compiled once into an
// interpreter of its own, run without guards (the operands are what the calling program made).
// The interpreter and the engine push it like any other constant, so a cond runs, records
// autograd and plans memory around it as any call does.
class compiled_subgraph final : public subgraph_fn {
 public:
  explicit compiled_subgraph(const subgraph& s) : program_(subgraph_program(s)), code_(program_) {}

  [[nodiscard]] std::vector<at::Tensor> call(std::vector<at::Tensor> operands) const override {
    const auto outs = code_.run_all(operands);
    std::vector<at::Tensor> r;
    r.reserve(outs.size());
    for (const auto& o : outs) r.push_back(o.isTensor() ? o.toTensor() : at::Tensor());
    return r;
  }

 private:
  exported_program program_;
  interpreter code_;
};

inline c10::IValue compile_subgraph(const subgraph& s) {
  return c10::IValue::make_capsule(c10::make_intrusive<compiled_subgraph>(s));
}
inline const bool subgraph_compiler_installed = (subgraph_compiler = &compile_subgraph, true);

struct interpreter_cache : run_cache {
  explicit interpreter_cache(const exported_program& p) : interp(p) {}
  interpreter interp;
};
}  // namespace detail

/// The program's interpreter, compiled on first use and cached until the program is mutated.
inline std::shared_ptr<const interpreter> interpreter_for(const exported_program& p) {
  if (auto c = p.run_cache_get()) return {c, &static_cast<detail::interpreter_cache*>(c.get())->interp};
  std::lock_guard<std::mutex> lock(p.run_cache_mutex());
  if (auto c = p.run_cache_get()) return {c, &static_cast<detail::interpreter_cache*>(c.get())->interp};
  auto c = std::make_shared<detail::interpreter_cache>(p);
  p.run_cache_set(c);
  return {c, &c->interp};
}

/// Runs `p` on its user inputs and returns its user outputs (see interpreter::run).
inline std::vector<at::Tensor> run(const exported_program& p, const std::vector<at::Tensor>& inputs,
                                   const run_options& opts = {}) {
  return interpreter_for(p)->run(inputs, opts);
}

XPORT_END_NAMESPACE
// #include <xport/run/callable.hpp>
// xport/run/callable.hpp: an exported program called with the C++ types it was exported with.
// Inputs are flattened (trace/tree.hpp) and checked against the program's input structure,
// run by the interpreter, and the outputs rebuilt into the declared result type.

#include <cstddef>  // std::size_t
#include <utility>  // std::move
#include <vector>   // std::vector

#include <ATen/core/Tensor.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/treespec.hpp>
// #include <xport/run/interpreter.hpp>
// #include <xport/trace/tree.hpp>

XPORT_BEGIN_NAMESPACE

/// An exported program called with the C++ types it was exported with:
///   xport::callable<at::Tensor(at::Tensor, std::vector<at::Tensor>)> f(program);
/// Inputs are flattened and checked against the program's input structure (constants included;
/// keyword arguments of a program torch wrote come last, by position), outputs rebuilt into R:
/// the same C++ types, a registered dataclass (by field name), or xport::tree_value (any
/// structure, a ModelOutput's fields by name).
template <class Sig>
class callable;

template <class R, class... Args>
class callable<R(Args...)> {
 public:
  explicit callable(const exported_program& p) : program_(&p) {
    if (!p.in_spec() || !p.out_spec())
      throw error("xport.callable.no_spec",
                  "this program has no input/output structure (it was not made by export_program); "
                  "run it with xport::run on flat tensors instead");
  }

  R operator()(const Args&... args) const {
    std::vector<at::Tensor> leaves;
    treespec got = treespec::of(treespec::kind::tuple);
    (got.children.push_back(flatten(args, leaves)), ...);
    const auto& want = *program_->in_spec();
    // C++ passes keyword arguments (of a program torch wrote) by position; named as the program names them
    got.num_kwargs = want.num_kwargs;
    got.keys = want.keys;
    if (!got.same_structure(want))
      throw guard_error("xport.guard.structure",
                        "the inputs have structure " + got.str() + " but the program was exported with " +
                            want.str() + " (containers, None and specialized constants must match)");
    auto outs = run(*program_, leaves, opts_);
    // constant outputs (None, a loaded program's numbers) are in the out_spec itself
    const auto& specs = program_->signature().output_specs;
    std::size_t u = 0, kept = 0;
    for (const auto& s : specs) {
      if (s.kind != output_kind::user_output && s.kind != output_kind::loss_output) continue;
      if (s.arg.type != argument_spec::kind::constant && u < outs.size()) outs[kept++] = std::move(outs[u]);
      ++u;
    }
    if (u == outs.size()) outs.resize(kept);
    return unflatten<R>(*program_->out_spec(), outs);
  }

  /// Options for every call (guards, inference mode).
  callable& with(run_options o) {
    opts_ = o;
    return *this;
  }

 private:
  const exported_program* program_;
  run_options opts_;
};

XPORT_END_NAMESPACE

// .pt2 archives
// #include <xport/serde/zip_index.hpp>
// xport/serde/zip_index.hpp: a bounds-checked index of a zip archive's records.
// The archive itself is read and written by LibTorch's PyTorchStreamReader/Writer; this index
// is the loader's own check of the central directory before it trusts any size in it: every
// record must be stored (not compressed), lie inside the file, and have a sane name. It also
// tells where each record's bytes start, so weights are read straight into tensor storage.

#include <algorithm>      // std::min
#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint64_t
#include <cstring>        // std::memcpy
#include <map>            // std::map
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <vector>         // std::vector

#include <caffe2/serialize/read_adapter_interface.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

struct zip_record {
  std::uint64_t data_offset = 0;  ///< where the stored bytes start in the file
  std::uint64_t size = 0;
};

/// Records by name, without the archive's root folder (`archive/models/model.json` is
/// `models/model.json`).
class zip_index {
 public:
  explicit zip_index(caffe2::serialize::ReadAdapterInterface& in) : in_(in), file_size_(in.size()) { scan(); }

  [[nodiscard]] const zip_record* find(const std::string& name) const {
    const auto it = records_.find(name);
    return it == records_.end() ? nullptr : &it->second;
  }
  [[nodiscard]] const zip_record& at(const std::string& name) const {
    if (const auto* r = find(name)) return *r;
    throw load_error("xport.load.missing_record", "record '" + name + "' is missing from the archive");
  }
  [[nodiscard]] const std::map<std::string, zip_record>& records() const noexcept { return records_; }
  [[nodiscard]] const std::string& root() const noexcept { return root_; }

  /// The bytes of a record (bounded by the file's size, checked by the scan).
  [[nodiscard]] std::string read(const std::string& name) const {
    const auto& r = at(name);
    std::string out(static_cast<std::size_t>(r.size), '\0');
    read_exact(r.data_offset, out.data(), out.size(), name);
    return out;
  }
  void read_exact(std::uint64_t pos, void* dst, std::size_t n, const std::string& what) const {
    if (pos > file_size_ || n > file_size_ - pos)
      throw load_error("xport.load.truncated", what + ": " + std::to_string(n) + " bytes at offset " +
                                                   std::to_string(pos) + " run past the end of the file (" +
                                                   std::to_string(file_size_) + " bytes)");
    if (n == 0) return;
    const auto got = in_.read(pos, dst, n, what.c_str());
    if (got != n)
      throw load_error("xport.load.truncated", what + ": could read only " + std::to_string(got) + " of " +
                                                   std::to_string(n) + " bytes at offset " + std::to_string(pos));
  }

 private:
  static std::uint64_t le(const unsigned char* p, int n) {
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  [[noreturn]] void bad(const std::string& what, std::uint64_t at) const {
    throw load_error("xport.load.bad_zip", "not a valid archive: " + what + " (offset " + std::to_string(at) + ")");
  }

  /// Where the central directory lies and how many entries it has.
  struct central_directory {
    std::uint64_t entries = 0, size = 0, offset = 0;
  };

  /// Reads the end-of-central-directory record (and the zip64 one it points at, if any).
  [[nodiscard]] central_directory find_central_directory() const {
    constexpr std::uint64_t eocd_size = 22;
    if (file_size_ < eocd_size) bad("the file is too small to be a zip archive (" + std::to_string(file_size_) + " bytes)", 0);
    // the end-of-central-directory record: within the last 22 + 65535 bytes
    const std::uint64_t tail = std::min<std::uint64_t>(file_size_, eocd_size + 65535);
    std::vector<unsigned char> buf(static_cast<std::size_t>(tail));
    read_exact(file_size_ - tail, buf.data(), buf.size(), "end of central directory");
    std::size_t eocd = buf.size();
    for (std::size_t i = buf.size() - eocd_size + 1; i-- > 0;)
      if (le(&buf[i], 4) == 0x06054b50) {
        eocd = i;
        break;
      }
    if (eocd == buf.size()) bad("no end-of-central-directory record", file_size_);
    const std::uint64_t eocd_pos = file_size_ - tail + eocd;
    std::uint64_t entries = le(&buf[eocd + 10], 2);
    std::uint64_t cd_size = le(&buf[eocd + 12], 4);
    std::uint64_t cd_offset = le(&buf[eocd + 16], 4);
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
      // zip64: a locator right before the EOCD points at the zip64 EOCD record
      if (eocd_pos < 20) bad("zip64 locator missing", eocd_pos);
      unsigned char loc[20];
      read_exact(eocd_pos - 20, loc, 20, "zip64 locator");
      if (le(loc, 4) != 0x07064b50) bad("zip64 locator missing", eocd_pos - 20);
      const std::uint64_t z = le(loc + 8, 8);
      unsigned char rec[56];
      read_exact(z, rec, 56, "zip64 end of central directory");
      if (le(rec, 4) != 0x06064b50) bad("bad zip64 end-of-central-directory signature", z);
      entries = le(rec + 32, 8);
      cd_size = le(rec + 40, 8);
      cd_offset = le(rec + 48, 8);
    }
    return {entries, cd_size, cd_offset};
  }

  void scan() {
    const auto [entries, cd_size, cd_offset] = find_central_directory();
    if (cd_offset > file_size_ || cd_size > file_size_ - cd_offset) bad("central directory outside the file", cd_offset);
    if (entries > cd_size / 46) bad("more entries (" + std::to_string(entries) + ") than the central directory holds", cd_offset);
    std::vector<unsigned char> cd(static_cast<std::size_t>(cd_size));
    read_exact(cd_offset, cd.data(), cd.size(), "central directory");
    std::size_t p = 0;
    for (std::uint64_t e = 0; e < entries; ++e) p += scan_entry(cd, p, e, cd_offset);
  }

  /// Checks central directory entry `e` (at `p` in `cd`) and its local header, and records it;
  /// returns the entry's length.
  std::uint64_t scan_entry(const std::vector<unsigned char>& cd, std::size_t p, std::uint64_t e, std::uint64_t cd_offset) {
    const std::uint64_t at = cd_offset + p;
    if (p + 46 > cd.size() || le(&cd[p], 4) != 0x02014b50) bad("bad central directory entry " + std::to_string(e), at);
    const auto method = le(&cd[p + 10], 2);
    std::uint64_t comp = le(&cd[p + 20], 4), uncomp = le(&cd[p + 24], 4);
    const auto name_len = le(&cd[p + 28], 2), extra_len = le(&cd[p + 30], 2), comment_len = le(&cd[p + 32], 2);
    std::uint64_t local = le(&cd[p + 42], 4);
    if (p + 46 + name_len + extra_len + comment_len > cd.size()) bad("central directory entry " + std::to_string(e) + " runs past the directory", at);
    std::string name(reinterpret_cast<const char*>(&cd[p + 46]), static_cast<std::size_t>(name_len));
    read_zip64_extra(cd, p + 46 + name_len, p + 46 + name_len + extra_len, name, at, uncomp, comp, local);
    if (method != 0) bad("record '" + name + "' is compressed (method " + std::to_string(method) + "); pt2 records are stored", at);
    if (comp != uncomp) bad("record '" + name + "' has different stored and original sizes", at);
    if (local > file_size_ || file_size_ - local < 30) bad("local header of '" + name + "' outside the file", local);
    unsigned char lh[30];
    read_exact(local, lh, 30, "local header of '" + name + "'");
    if (le(lh, 4) != 0x04034b50) bad("bad local header signature for '" + name + "'", local);
    const std::uint64_t data = local + 30 + le(lh + 26, 2) + le(lh + 28, 2);
    if (data > file_size_ || uncomp > file_size_ - data) bad("record '" + name + "' (" + std::to_string(uncomp) + " bytes) runs past the end of the file", data);
    const auto slash = name.find('/');
    if (slash == std::string::npos || slash == 0) bad("record '" + name + "' is not under the archive's root folder", at);
    const auto root = name.substr(0, slash);
    if (root_.empty()) root_ = root;
    else if (root != root_) bad("records under two root folders ('" + root_ + "' and '" + root + "')", at);
    if (!records_.emplace(name.substr(slash + 1), zip_record{data, uncomp}).second) bad("record '" + name + "' appears twice", at);
    return 46 + name_len + extra_len + comment_len;
  }

  /// Reads the zip64 extra field among the extra fields in [begin, end) of `cd`: 8-byte values
  /// for the fields that are 0xFFFFFFFF, in order.
  void read_zip64_extra(const std::vector<unsigned char>& cd, std::size_t begin, std::size_t end, const std::string& name,
                        std::uint64_t at, std::uint64_t& uncomp, std::uint64_t& comp, std::uint64_t& local) const {
    for (std::size_t x = begin; x + 4 <= end;) {
      const auto id = le(&cd[x], 2), len = le(&cd[x + 2], 2);
      if (x + 4 + len > end) bad("extra field of '" + name + "' runs past its entry", at);
      if (id == 1) {
        std::size_t q = x + 4;
        const auto take = [&](std::uint64_t& f) {
          if (f != 0xFFFFFFFF) return;
          if (q + 8 > x + 4 + len) bad("short zip64 field in '" + name + "'", at);
          f = le(&cd[q], 8);
          q += 8;
        };
        take(uncomp);
        take(comp);
        take(local);
      }
      x += 4 + len;
    }
  }

  caffe2::serialize::ReadAdapterInterface& in_;
  std::uint64_t file_size_ = 0;
  std::string root_;
  std::map<std::string, zip_record> records_;
};

}  // namespace detail

XPORT_END_NAMESPACE
// #include <xport/serde/json.hpp>
// xport/serde/json.hpp: an exported_program as torch.export's JSON (torch/_export/serde/schema.py).
// The schema version written is torch 2.13's SCHEMA_VERSION = (8, 20); a file of another major
// version is refused, every 8.x loads. Unions are one-key objects (`{"as_tensor": {"name":
// "x"}}`), enums are the schema's own numbers (ScalarType FLOAT is 7, not c10's 6), optional
// fields that are None are left out, non-finite floats are the strings "Infinity", "-Infinity"
// and "NaN" (as torch writes them), symbolic sizes are sympy srepr text.
//
// Reading trusts nothing: every field is looked up with its type checked, and a wrong or
// missing one is a load_error naming the JSON path (`graph_module.graph.nodes[3].inputs[1]`).

#include <cmath>        // std::isfinite
#include <cstdint>      // std::int64_t
#include <functional>   // std::function
#include <limits>       // std::numeric_limits
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <unordered_map>
#include <unordered_set>
#include <utility>      // std::move
#include <vector>       // std::vector

#include <nlohmann/json.hpp>

// #include <xport/config.hpp>
// #include <xport/detail/compat.hpp>
// #include <xport/ops/schema.hpp>
// #include <xport/ir/graph.hpp>
// #include <xport/ir/op.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ir/sym_expr.hpp>
// #include <xport/program/verify.hpp>
// #include <xport/serde/zip_index.hpp>

XPORT_BEGIN_NAMESPACE

/// torch/_export/serde/schema.py SCHEMA_VERSION of torch 2.13, the version xport writes.
inline constexpr int schema_version_major = 8;
inline constexpr int schema_version_minor = 20;

namespace detail::serde {

using json = nlohmann::json;

// ---- enums, with the schema's numbering ---------------------------------------------------

inline int scalar_type_number(c10::ScalarType t) {
  using S = c10::ScalarType;
  switch (t) {
    case S::Byte: return 1;
    case S::Char: return 2;
    case S::Short: return 3;
    case S::Int: return 4;
    case S::Long: return 5;
    case S::Half: return 6;
    case S::Float: return 7;
    case S::Double: return 8;
    case S::ComplexHalf: return 9;
    case S::ComplexFloat: return 10;
    case S::ComplexDouble: return 11;
    case S::Bool: return 12;
    case S::BFloat16: return 13;
    default: break;
  }
  throw error("xport.save.dtype", std::string("dtype ") + c10::toString(t) + " has no number in the export schema");
}
inline std::optional<c10::ScalarType> scalar_type_of(std::int64_t n) {
  using S = c10::ScalarType;
  switch (n) {
    case 1: return S::Byte;
    case 2: return S::Char;
    case 3: return S::Short;
    case 4: return S::Int;
    case 5: return S::Long;
    case 6: return S::Half;
    case 7: return S::Float;
    case 8: return S::Double;
    case 9: return S::ComplexHalf;
    case 10: return S::ComplexFloat;
    case 11: return S::ComplexDouble;
    case 12: return S::Bool;
    case 13: return S::BFloat16;
    default: return std::nullopt;
  }
}
inline int layout_number(c10::Layout l) {
  switch (l) {
    case c10::kStrided: return 7;
    case c10::kSparse: return 1;
    case c10::kSparseCsr: return 2;
    case c10::kSparseCsc: return 3;
    case c10::kSparseBsr: return 4;
    case c10::kSparseBsc: return 5;
    case c10::kMkldnn: return 6;
    default: return 0;
  }
}
inline std::optional<c10::Layout> layout_of(std::int64_t n) {
  switch (n) {
    case 7: return c10::kStrided;
    case 1: return c10::kSparse;
    case 2: return c10::kSparseCsr;
    case 3: return c10::kSparseCsc;
    case 4: return c10::kSparseBsr;
    case 5: return c10::kSparseBsc;
    case 6: return c10::kMkldnn;
    default: return std::nullopt;
  }
}
inline int memory_format_number(c10::MemoryFormat m) {
  switch (m) {
    case c10::MemoryFormat::Contiguous: return 1;
    case c10::MemoryFormat::ChannelsLast: return 2;
    case c10::MemoryFormat::ChannelsLast3d: return 3;
    case c10::MemoryFormat::Preserve: return 4;
    default: return 0;
  }
}
inline std::optional<c10::MemoryFormat> memory_format_of(std::int64_t n) {
  switch (n) {
    case 1: return c10::MemoryFormat::Contiguous;
    case 2: return c10::MemoryFormat::ChannelsLast;
    case 3: return c10::MemoryFormat::ChannelsLast3d;
    case 4: return c10::MemoryFormat::Preserve;
    default: return std::nullopt;
  }
}

// ---- checked reading ------------------------------------------------------------------------

/// A JSON node with the path it was reached by, for error messages.
struct at_path {
  const json& j;
  std::string path;
  const std::string& record;

  [[noreturn]] void fail(const std::string& what) const {
    throw load_error("xport.load.schema", record + ": " + (path.empty() ? std::string("<root>") : path) + ": " + what);
  }
  [[nodiscard]] std::string_view type() const { return j.type_name(); }

  [[nodiscard]] at_path operator[](std::string_view key) const {
    if (!j.is_object()) fail("expected an object, got " + std::string(type()));
    const auto it = j.find(key);
    if (it == j.end()) fail("missing field '" + std::string(key) + "'");
    return {*it, path.empty() ? std::string(key) : path + "." + std::string(key), record};
  }
  [[nodiscard]] std::optional<at_path> get(std::string_view key) const {
    if (!j.is_object()) fail("expected an object, got " + std::string(type()));
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    return at_path{*it, path.empty() ? std::string(key) : path + "." + std::string(key), record};
  }
  [[nodiscard]] at_path operator[](std::size_t i) const {
    return {j[i], path + "[" + std::to_string(i) + "]", record};
  }
  [[nodiscard]] std::size_t size_of_array() const {
    if (!j.is_array()) fail("expected an array, got " + std::string(type()));
    return j.size();
  }
  [[nodiscard]] const json& object() const {
    if (!j.is_object()) fail("expected an object, got " + std::string(type()));
    return j;
  }
  [[nodiscard]] std::string str() const {
    if (!j.is_string()) fail("expected a string, got " + std::string(type()));
    return j.get<std::string>();
  }
  [[nodiscard]] std::int64_t integer() const {
    if (!j.is_number_integer()) fail("expected an integer, got " + std::string(type()));
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail("integer out of range");
    return j.get<std::int64_t>();
  }
  /// A float: a JSON number, or one of the strings torch writes for non-finite values.
  [[nodiscard]] double number() const {
    if (j.is_string()) {
      const auto& t = j.get_ref<const std::string&>();
      if (t == "Infinity") return std::numeric_limits<double>::infinity();
      if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
      if (t == "NaN") return std::numeric_limits<double>::quiet_NaN();
      fail("expected a number, got the string '" + t.substr(0, 32) + "'");
    }
    if (!j.is_number()) fail("expected a number, got " + std::string(type()));
    return j.get<double>();
  }
  [[nodiscard]] bool boolean() const {
    if (!j.is_boolean()) fail("expected a bool, got " + std::string(type()));
    return j.get<bool>();
  }
  /// A union: an object with exactly one key. Returns (member, value).
  [[nodiscard]] std::pair<std::string, at_path> one_of() const {
    const auto& o = object();
    if (o.size() != 1) fail("expected a union (an object with one key), got " + std::to_string(o.size()) + " keys");
    const auto it = o.begin();
    return {it.key(), at_path{it.value(), path + "." + it.key(), record}};
  }
};

/// Parses JSON text; nesting deeper than 64 levels is refused (no recursion on hostile input).
inline json parse(const std::string& text, const std::string& record) {
  try {
    return json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > 64) throw load_error("xport.load.json", record + ": JSON nested deeper than 64 levels");
      return true;
    });
  } catch (const json::exception& e) {
    throw load_error("xport.load.json", record + ": malformed JSON: " + e.what());
  }
}

/// A float as torch writes it: a number, or "Infinity" / "-Infinity" / "NaN" (JSON has no
/// literal for them; nlohmann would write null).
inline json float_json(double v) {
  if (std::isfinite(v)) return v;
  if (std::isnan(v)) return "NaN";
  return v > 0 ? "Infinity" : "-Infinity";
}

// ---- sizes, meta --------------------------------------------------------------------------

inline json sym_int_json(const sym_int& s) {
  if (s.is_constant()) return {{"as_int", s.value()}};
  // a size only the data knows has no example value in torch's files (its hint is null)
  const auto syms = sym::free_symbols(s);
  const bool unbacked = std::any_of(syms.begin(), syms.end(), [](const std::string& n) { return sym::is_unbacked(n); });
  return {{"as_expr", {{"expr_str", sym::srepr(s)}, {"hint", unbacked ? json(nullptr) : json{{"as_int", s.hint()}}}}}};
}
/// The symbols of the program being read: made on first use, with the range the file's
/// range_constraints give them (read before the graph).
struct symbol_table {
  struct entry {
    std::string name;
    value_range range;
    std::optional<sym_int> symbol;
  };
  std::vector<entry> entries;

  entry& find_or_add(std::string_view name) {
    for (auto& e : entries)
      if (e.name == name) return e;
    entries.push_back({std::string(name), value_range{}, std::nullopt});
    return entries.back();
  }
  /// The symbol `name`; a new one takes `hint` as its example value.
  sym_int get(std::string_view name, std::int64_t hint) {
    auto& e = find_or_add(name);
    if (!e.symbol) e.symbol = sym::symbol(e.name, hint, e.range);
    return *e.symbol;
  }
};
inline thread_local symbol_table* active_symbols = nullptr;

inline sym_int sym_int_of(const at_path& j) {
  auto [k, v] = j.one_of();
  if (k == "as_int") return v.integer();
  if (k == "as_expr") {
    const auto text = v["expr_str"].str();
    std::int64_t hint = 2;
    if (auto h = v.get("hint")) {
      auto [hk, hv] = h->one_of();
      if (hk == "as_int") hint = hv.integer();
    }
    if (!active_symbols) v.fail("symbolic size '" + text + "' outside a program");
    try {
      // a symbol met for the first time takes its value from the hint (solved when the
      // expression is linear in it: `2*s0` with hint 8 gives s0 = 4)
      std::vector<std::string> fresh;
      auto first = sym::parse(text, [&](std::string_view name) -> std::optional<sym_int> {
        for (const auto& e : active_symbols->entries)
          if (e.name == name && e.symbol) return *e.symbol;
        fresh.emplace_back(name);
        return sym::symbol(std::string(name), 0, value_range{});
      });
      if (fresh.empty()) return first;
      const auto lin = sym::as_linear(first);
      for (const auto& name : fresh) {
        std::int64_t h = 2;
        if (lin && lin->symbol == name && lin->a != 0 && (hint - lin->b) % lin->a == 0) h = (hint - lin->b) / lin->a;
        (void)active_symbols->get(name, h);
      }
      return sym::parse(text, [&](std::string_view name) -> std::optional<sym_int> { return active_symbols->get(name, 2); });
    } catch (const graph_error& e) {
      v["expr_str"].fail("cannot read the symbolic size '" + text + "': " + e.what());
    }
  }
  v.fail("unknown SymInt member '" + k + "'");
}

inline json device_json(c10::Device d) {
  json j = {{"type", c10::DeviceTypeName(d.type(), /*lower_case=*/true)}};
  if (d.has_index()) j["index"] = d.index();
  return j;
}
inline c10::Device device_of(const at_path& j) {
  const auto type = j["type"].str();
  try {
    c10::Device d(type);
    if (auto i = j.get("index")) {
      const auto idx = i->integer();
      if (idx < -1 || idx > 127) i->fail("device index out of range");
      d = c10::Device(d.type(), static_cast<c10::DeviceIndex>(idx));
    }
    return d;
  } catch (const c10::Error&) {
    j["type"].fail("unknown device type '" + type + "'");
  }
}

inline json tensor_meta_json(const tensor_meta& m) {
  json sizes = json::array(), strides = json::array();
  for (const auto& s : m.sizes) sizes.push_back(sym_int_json(s));
  for (const auto& s : m.strides) strides.push_back(sym_int_json(s));
  return {{"dtype", scalar_type_number(m.dtype)}, {"sizes", std::move(sizes)},   {"requires_grad", m.requires_grad},
          {"device", device_json(m.device)},     {"strides", std::move(strides)}, {"storage_offset", sym_int_json(m.storage_offset)},
          {"layout", layout_number(m.layout)}};
}
inline tensor_meta tensor_meta_of(const at_path& j) {
  tensor_meta m;
  const auto dt = j["dtype"];
  const auto st = scalar_type_of(dt.integer());
  if (!st) dt.fail("unknown ScalarType " + std::to_string(dt.integer()));
  m.dtype = *st;
  const auto sizes = j["sizes"], strides = j["strides"];
  const auto n = sizes.size_of_array();
  if (n > 64) sizes.fail("more than 64 dimensions");
  for (std::size_t i = 0; i < n; ++i) {
    auto s = sym_int_of(sizes[i]);
    if (s.hint() < 0) sizes[i].fail("negative size");
    m.sizes.push_back(std::move(s));
  }
  const auto ns = strides.size_of_array();
  if (ns != n && ns != 0) strides.fail("has " + std::to_string(ns) + " strides for " + std::to_string(n) + " sizes");
  for (std::size_t i = 0; i < ns; ++i) {
    auto s = sym_int_of(strides[i]);
    if (s.hint() < 0) strides[i].fail("negative stride");
    m.strides.push_back(std::move(s));
  }
  m.requires_grad = j["requires_grad"].boolean();
  m.device = device_of(j["device"]);
  m.storage_offset = sym_int_of(j["storage_offset"]);
  if (m.storage_offset.hint() < 0) j["storage_offset"].fail("negative storage offset");
  const auto l = layout_of(j["layout"].integer());
  if (!l) j["layout"].fail("unknown Layout " + std::to_string(j["layout"].integer()));
  m.layout = *l;
  return m;
}

// ---- arguments ----------------------------------------------------------------------------

inline json value_ref(value v) {
  switch (v.kind()) {
    case value_kind::sym_int: return {{"as_sym_int", {{"as_name", v.name()}}}};
    case value_kind::sym_bool: return {{"as_sym_bool", {{"as_name", v.name()}}}};
    case value_kind::sym_float: return {{"as_sym_float", {{"as_name", v.name()}}}};
    default: return {{"as_tensor", {{"name", v.name()}}}};
  }
}

/// The element type of a (possibly optional) list type, or nullptr.
inline c10::TypePtr list_element(const c10::TypePtr& t) {
  const auto u = unwrap_optional(t);
  if (u->kind() == c10::TypeKind::ListType) return u->castRaw<c10::ListType>()->getElementType();
  return nullptr;
}

/// Names the graph value that computes a symbolic size (writing the sym_size / _operator nodes
/// that compute it first); see graph_json.
using sym_namer = std::function<std::string(const sym_int&)>;

inline json argument_json(const argument& a, const c10::TypePtr& type, const sym_namer& name_sym = {}) {
  using K = argument::kind;
  switch (a.type()) {
    case K::none: return {{"as_none", true}};
    case K::boolean: return {{"as_bool", a.as_bool()}};
    case K::integer: return {{"as_int", a.as_int()}};
    case K::floating: return {{"as_float", float_json(a.as_double())}};
    case K::string: return {{"as_string", a.as_string()}};
    case K::dtype: return {{"as_scalar_type", scalar_type_number(a.as_dtype())}};
    case K::device: return {{"as_device", device_json(a.as_device())}};
    case K::layout: return {{"as_layout", layout_number(a.as_layout())}};
    case K::memory_format: return {{"as_memory_format", memory_format_number(a.as_memory_format())}};
    case K::value: return value_ref(a.as_value());
    case K::symbolic: return {{"as_sym_int", {{"as_name", name_sym(a.as_sym())}}}};
    case K::graph: throw graph_error("xport.serde.subgraph", "subgraph '" + a.as_graph()->name + "' is written by graph_json, not as an argument");
    case K::list: break;
  }
  const auto& l = a.as_list();
  const auto elem = type ? list_element(type) : nullptr;
  const bool optional_tensors = elem && elem->kind() == c10::TypeKind::OptionalType &&
                                unwrap_optional(elem)->kind() == c10::TypeKind::TensorType;
  bool all_int = true, all_float = true, all_bool = true, all_str = true, all_tensor = true, any_sym = false;
  for (const auto& e : l) {
    const bool sym = (e.is_value() && e.as_value().kind() == value_kind::sym_int) || e.is_symbolic();
    any_sym = any_sym || sym;
    all_int = all_int && (e.is_int() || sym);
    all_float = all_float && (e.is_double() || e.is_int());
    all_bool = all_bool && e.is_bool();
    all_str = all_str && e.is_string();
    all_tensor = all_tensor && e.is_value() && e.as_value().kind() == value_kind::tensor;
  }
  if (optional_tensors) {
    json out = json::array();
    for (const auto& e : l)
      out.push_back(e.is_none() ? json{{"as_none", true}} : json{{"as_tensor", {{"name", e.as_value().name()}}}});
    return {{"as_optional_tensors", std::move(out)}};
  }
  if (l.empty()) {
    const auto k = elem ? unwrap_optional(elem)->kind() : c10::TypeKind::IntType;
    switch (k) {
      case c10::TypeKind::FloatType: return {{"as_floats", json::array()}};
      case c10::TypeKind::BoolType: return {{"as_bools", json::array()}};
      case c10::TypeKind::StringType: return {{"as_strings", json::array()}};
      case c10::TypeKind::TensorType: return {{"as_tensors", json::array()}};
      default: return {{"as_ints", json::array()}};
    }
  }
  json out = json::array();
  if (all_tensor) {
    for (const auto& e : l) out.push_back({{"name", e.as_value().name()}});
    return {{"as_tensors", std::move(out)}};
  }
  if (all_int && any_sym) {
    for (const auto& e : l)
      out.push_back(e.is_int()        ? json{{"as_int", e.as_int()}}
                    : e.is_symbolic() ? json{{"as_name", name_sym(e.as_sym())}}
                                      : json{{"as_name", e.as_value().name()}});
    return {{"as_sym_ints", std::move(out)}};
  }
  if (all_int) {
    for (const auto& e : l) out.push_back(e.as_int());
    return {{"as_ints", std::move(out)}};
  }
  if (all_bool) {
    for (const auto& e : l) out.push_back(e.as_bool());
    return {{"as_bools", std::move(out)}};
  }
  if (all_float) {
    for (const auto& e : l) out.push_back(float_json(e.is_int() ? static_cast<double>(e.as_int()) : e.as_double()));
    return {{"as_floats", std::move(out)}};
  }
  if (all_str) {
    for (const auto& e : l) out.push_back(e.as_string());
    return {{"as_strings", std::move(out)}};
  }
  throw error("xport.save.argument", "a list mixing " + std::string(l.front().type_name()) +
                                          " and other kinds has no form in the export schema");
}

/// Resolves value names while a graph is read: a name must be defined before it is used.
struct value_scope {
  std::unordered_map<std::string, value> defined;
  std::unordered_set<std::string> later;  ///< every name some node defines (for the cycle message)
  /// Sizes computed by sym_size / _operator nodes: arguments that use them become symbolic.
  std::unordered_map<std::string, sym_int> syms;
  /// The SymBools `_operator.ge` / `le` / ... nodes compute, for the `_assert_scalar` nodes.
  struct condition {
    sym_int lhs;
    std::string op;  // ">=", "<=", ">", "<", "=="
    sym_int rhs;
  };
  std::unordered_map<std::string, condition> conditions;

  /// A SymInt argument named `name`: a symbolic size, or a graph value.
  [[nodiscard]] argument sym_arg(const at_path& j, const std::string& name) const {
    if (const auto it = syms.find(name); it != syms.end()) return argument(it->second);
    return (*this)(j, name);
  }

  value operator()(const at_path& j, const std::string& name) const {
    if (const auto it = defined.find(name); it != defined.end()) return it->second;
    if (later.count(name))
      j.fail("'" + name + "' is used before the node that defines it (the nodes are out of order or form a cycle)");
    j.fail("'" + name + "' names no value in the graph");
  }
};

/// The kinds of Argument xport has no form for, each with what it is, for the load_error.
[[noreturn]] inline void unsupported_argument(const at_path& where, const std::string& kind) {
  static constexpr std::pair<std::string_view, std::string_view> known[] = {
      {"as_graph", "a subgraph of a higher-order operator (torch.cond, torch.map, while_loop, ...)"},
      {"as_custom_obj", "a custom object (a TorchBind class instance)"},
      {"as_complex", "a complex number"},
      {"as_operator", "an operator passed as an argument (used by higher-order operators)"},
      {"as_string_to_argument", "a dict of arguments"},
      {"as_nested_tensors", "a list of tensor lists"},
      {"as_token", "an effect token"},
  };
  for (const auto& [k, what] : known)
    if (k == kind) where.fail("argument kind '" + kind + "' (" + std::string(what) + ") is not supported by xport");
  where.fail("argument kind '" + kind + "' is not supported by xport");
}

inline argument argument_of(const at_path& j, const value_scope& scope) {
  auto [k, v] = j.one_of();
  const auto name_of = [&](const at_path& t) { return scope(t, t["name"].str()); };
  if (k == "as_none") return none;
  if (k == "as_tensor") return name_of(v);
  if (k == "as_optional_tensor") {
    auto [k2, v2] = v.one_of();
    if (k2 == "as_none") return none;
    if (k2 == "as_tensor") return name_of(v2);
    v.fail("unknown OptionalTensorArgument member '" + k2 + "'");
  }
  if (k == "as_int") return v.integer();
  if (k == "as_float") return v.number();
  if (k == "as_bool") return v.boolean();
  if (k == "as_string") return v.str();
  if (k == "as_scalar_type") {
    const auto t = scalar_type_of(v.integer());
    if (!t) v.fail("unknown ScalarType " + std::to_string(v.integer()));
    return *t;
  }
  if (k == "as_layout") {
    const auto l = layout_of(v.integer());
    if (!l) v.fail("unknown Layout " + std::to_string(v.integer()));
    return *l;
  }
  if (k == "as_memory_format") {
    const auto m = memory_format_of(v.integer());
    if (!m) v.fail("unknown MemoryFormat " + std::to_string(v.integer()));
    return *m;
  }
  if (k == "as_device") return device_of(v);
  if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") {
    auto [k2, v2] = v.one_of();
    if (k2 == "as_name") return scope.sym_arg(v2, v2.str());
    if (k2 == "as_int") return v2.integer();
    if (k2 == "as_bool") return v2.boolean();
    if (k2 == "as_float") return v2.number();
    v.fail("unknown member '" + k2 + "'");
  }
  argument::list_type out;
  const auto each = [&](auto&& f) {
    const auto n = v.size_of_array();
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(f(v[i]));
    return argument(std::move(out));
  };
  if (k == "as_tensors") return each([&](const at_path& e) { return argument(name_of(e)); });
  if (k == "as_ints") return each([](const at_path& e) { return argument(e.integer()); });
  if (k == "as_floats") return each([](const at_path& e) { return argument(e.number()); });
  if (k == "as_bools") return each([](const at_path& e) { return argument(e.boolean()); });
  if (k == "as_strings") return each([](const at_path& e) { return argument(e.str()); });
  if (k == "as_optional_tensors" || k == "as_sym_ints" || k == "as_sym_bools" || k == "as_sym_floats")
    return each([&](const at_path& e) -> argument {
      auto [k2, v2] = e.one_of();
      if (k2 == "as_none") return none;
      if (k2 == "as_tensor") return name_of(v2);
      if (k2 == "as_name") return scope.sym_arg(v2, v2.str());
      if (k2 == "as_int") return v2.integer();
      if (k2 == "as_bool") return v2.boolean();
      if (k2 == "as_float") return v2.number();
      e.fail("unknown member '" + k2 + "'");
    });
  // lists of lists: int[][] and float[][] arguments
  if (k == "as_int_lists" || k == "as_float_lists")
    return each([&](const at_path& e) -> argument {
      argument::list_type inner;
      for (std::size_t i = 0, n = e.size_of_array(); i < n; ++i)
        inner.push_back(k == "as_int_lists" ? argument(e[i].integer()) : argument(e[i].number()));
      return argument(std::move(inner));
    });
  unsupported_argument(v, k);
}

// ---- signature ----------------------------------------------------------------------------

inline json constant_value_json(const argument& a) {
  if (a.is_none()) return {{"as_none", true}};
  if (a.is_int()) return {{"as_int", a.as_int()}};
  if (a.is_double()) return {{"as_float", float_json(a.as_double())}};
  if (a.is_string()) return {{"as_string", a.as_string()}};
  if (a.is_bool()) return {{"as_bool", a.as_bool()}};
  throw error("xport.save.constant", "a constant input of kind " + std::string(a.type_name()) + " has no form in the schema");
}
inline argument constant_value_of(const at_path& j) {
  auto [k, v] = j.one_of();
  if (k == "as_none") return none;
  if (k == "as_int") return v.integer();
  if (k == "as_float") return v.number();
  if (k == "as_string") return v.str();
  if (k == "as_bool") return v.boolean();
  v.fail("unknown ConstantValue member '" + k + "'");
}

inline json spec_arg_json(const argument_spec& a) {
  switch (a.type) {
    case argument_spec::kind::sym_int: return {{"as_sym_int", {{"as_name", a.name}}}};
    case argument_spec::kind::sym_bool: return {{"as_sym_bool", {{"as_name", a.name}}}};
    case argument_spec::kind::sym_float: return {{"as_sym_float", {{"as_name", a.name}}}};
    case argument_spec::kind::token:  // Argument has no token member: tokens travel as TokenArgument
      throw error("xport.save.token", "effect token '" + a.name + "' cannot be a user input or output in the export schema");
    case argument_spec::kind::custom_obj: return {{"as_custom_obj", {{"name", a.name}, {"class_fqn", a.class_fqn}}}};
    case argument_spec::kind::constant:  // the constant itself, as torch writes constant user outputs
      return constant_value_json(a.constant);
    case argument_spec::kind::tensor: break;
  }
  return {{"as_tensor", {{"name", a.name}}}};
}
inline argument_spec spec_arg_of(const at_path& j) {
  auto [k, v] = j.one_of();
  if (k == "as_tensor") return argument_spec::tensor(v["name"].str());
  if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") {
    auto [k2, v2] = v.one_of();
    if (k2 != "as_name") v.fail("expected a symbol name");
    argument_spec s = argument_spec::sym_int(v2.str());
    if (k == "as_sym_bool") s.type = argument_spec::kind::sym_bool;
    if (k == "as_sym_float") s.type = argument_spec::kind::sym_float;
    return s;
  }
  if (k == "as_custom_obj") {
    argument_spec s{argument_spec::kind::custom_obj, v["name"].str(), {}, v["class_fqn"].str()};
    return s;
  }
  if (k == "as_none" || k == "as_int" || k == "as_float" || k == "as_string" || k == "as_bool")
    return argument_spec::constant_value("", constant_value_of(j));
  unsupported_argument(v, k);
}

inline json input_spec_json(const input_spec& s) {
  const json tensor = {{"name", s.arg.name}};
  switch (s.kind) {
    case input_kind::user_input:
      if (s.arg.type == argument_spec::kind::constant)
        return {{"constant_input", {{"name", s.arg.name}, {"value", constant_value_json(s.arg.constant)}}}};
      return {{"user_input", {{"arg", spec_arg_json(s.arg)}}}};
    case input_kind::parameter: return {{"parameter", {{"arg", tensor}, {"parameter_name", s.target.value_or("")}}}};
    case input_kind::buffer:
      return {{"buffer", {{"arg", tensor}, {"buffer_name", s.target.value_or("")}, {"persistent", s.persistent.value_or(true)}}}};
    case input_kind::constant_tensor:
      return {{"tensor_constant", {{"arg", tensor}, {"tensor_constant_name", s.target.value_or("")}}}};
    case input_kind::custom_obj:
      return {{"custom_obj", {{"arg", {{"name", s.arg.name}, {"class_fqn", s.arg.class_fqn}}}, {"custom_obj_name", s.target.value_or("")}}}};
    case input_kind::token: return {{"token", {{"arg", tensor}}}};
  }
  return {};
}
inline input_spec input_spec_of(const at_path& j) {
  auto [k, v] = j.one_of();
  input_spec s;
  const auto tensor_arg = [&] { return argument_spec::tensor(v["arg"]["name"].str()); };
  if (k == "user_input") {
    s.kind = input_kind::user_input;
    s.arg = spec_arg_of(v["arg"]);
  } else if (k == "constant_input") {
    s.kind = input_kind::user_input;
    s.arg = argument_spec::constant_value(v["name"].str(), constant_value_of(v["value"]));
  } else if (k == "parameter") {
    s.kind = input_kind::parameter;
    s.arg = tensor_arg();
    s.target = v["parameter_name"].str();
  } else if (k == "buffer") {
    s.kind = input_kind::buffer;
    s.arg = tensor_arg();
    s.target = v["buffer_name"].str();
    s.persistent = v["persistent"].boolean();
  } else if (k == "tensor_constant") {
    s.kind = input_kind::constant_tensor;
    s.arg = tensor_arg();
    s.target = v["tensor_constant_name"].str();
  } else if (k == "custom_obj") {
    s.kind = input_kind::custom_obj;
    s.arg = argument_spec{argument_spec::kind::custom_obj, v["arg"]["name"].str(), {}, v["arg"]["class_fqn"].str()};
    s.target = v["custom_obj_name"].str();
  } else if (k == "token") {
    s.kind = input_kind::token;
    s.arg = argument_spec::token(v["arg"]["name"].str());
  } else {
    j.fail("unknown InputSpec member '" + k + "'");
  }
  return s;
}

struct output_kind_name {
  output_kind kind;
  const char* member;
  const char* target_field;  ///< nullptr when the spec has no target
};
inline constexpr output_kind_name output_kinds[] = {
    {output_kind::user_output, "user_output", nullptr},
    {output_kind::loss_output, "loss_output", nullptr},
    {output_kind::buffer_mutation, "buffer_mutation", "buffer_name"},
    {output_kind::gradient_to_parameter, "gradient_to_parameter", "parameter_name"},
    {output_kind::gradient_to_user_input, "gradient_to_user_input", "user_input_name"},
    {output_kind::user_input_mutation, "user_input_mutation", "user_input_name"},
    {output_kind::token, "token", nullptr},
    {output_kind::parameter_mutation, "parameter_mutation", "parameter_name"},
};

inline json output_spec_json(const output_spec& s) {
  for (const auto& k : output_kinds) {
    if (k.kind != s.kind) continue;
    json body;
    if (s.kind == output_kind::user_output) body["arg"] = spec_arg_json(s.arg);
    else body["arg"] = {{"name", s.arg.name}};
    if (k.target_field) body[k.target_field] = s.target.value_or("");
    return {{k.member, std::move(body)}};
  }
  return {};
}
inline output_spec output_spec_of(const at_path& j) {
  auto [k, v] = j.one_of();
  for (const auto& ok : output_kinds) {
    if (k != ok.member) continue;
    output_spec s;
    s.kind = ok.kind;
    if (ok.kind == output_kind::user_output) s.arg = spec_arg_of(v["arg"]);
    else if (ok.kind == output_kind::token) s.arg = argument_spec::token(v["arg"]["name"].str());
    else s.arg = argument_spec::tensor(v["arg"]["name"].str());
    if (ok.target_field) s.target = v[ok.target_field].str();
    return s;
  }
  j.fail("unknown OutputSpec member '" + k + "'");
}

// ---- treespecs ----------------------------------------------------------------------------

/// xport's own treespec form, which xport before schema 8.20 kept in GraphModule.metadata
/// (`xport.in_spec`); read for those archives.
inline treespec treespec_of(const at_path& j) {
  static constexpr std::string_view kinds[] = {"leaf", "constant", "none", "tuple", "list", "dict"};
  treespec t;
  const auto k = j["kind"].str();
  int idx = -1;
  for (int i = 0; i < 6; ++i)
    if (kinds[i] == k) idx = i;
  if (idx < 0) j["kind"].fail("unknown treespec kind '" + k + "'");
  t.type = static_cast<treespec::kind>(idx);
  if (t.type == treespec::kind::constant) t.value = constant_value_of(j["value"]);
  if (auto c = j.get("children")) {
    if (t.type != treespec::kind::tuple && t.type != treespec::kind::list && t.type != treespec::kind::dict)
      c->fail("a " + k + " has no children");
    for (std::size_t i = 0, n = c->size_of_array(); i < n; ++i) t.children.push_back(treespec_of((*c)[i]));
  }
  if (t.type == treespec::kind::dict) {
    const auto keys = j["keys"];
    for (std::size_t i = 0, n = keys.size_of_array(); i < n; ++i) t.keys.push_back(keys[i].str());
    if (t.keys.size() != t.children.size()) keys.fail("a dict needs one key per child");
  }
  return t;
}

/// torch.utils._pytree's `treespec_dumps` form (protocol 1), for Python readers. Constant leaves
/// are leaves there too: each has its placeholder (a constant input), which holds the value.
/// Types and contexts read from torch's files are written back as read (Note [Pytree node types]).
inline json pytree_json(const treespec& t) {
  json children = json::array();
  for (const auto& c : t.children) children.push_back(pytree_json(c));
  const auto node = [&](const char* builtin, json context) -> json {
    json ctx = t.context.empty() ? std::move(context) : t.context_is_json ? json::parse(t.context) : json(t.context);
    return {{"type", t.type_name.empty() ? std::string(builtin) : t.type_name}, {"context", std::move(ctx)},
            {"children_spec", std::move(children)}};
  };
  switch (t.type) {
    case treespec::kind::leaf:
    case treespec::kind::constant: return {{"type", nullptr}, {"context", nullptr}, {"children_spec", json::array()}};
    case treespec::kind::none: return node("builtins.NoneType", "null");
    case treespec::kind::tuple: return node("builtins.tuple", "null");
    case treespec::kind::list: return node("builtins.list", "null");
    case treespec::kind::dict: return node("builtins.dict", json(t.keys).dump());
    case treespec::kind::node: return node("", nullptr);
  }
  return {};
}

/// The keys of a dict of type `type` from its context (the parsed JSON of torch's context).
inline std::vector<std::string> dict_keys_of(const std::string& type, const at_path& ctx) {
  // a defaultdict's context is an object: {default_factory_module, default_factory_name, dict_context}
  const at_path keys = type == "collections.defaultdict" ? ctx["dict_context"] : ctx;
  std::vector<std::string> out;
  for (std::size_t i = 0, m = keys.size_of_array(); i < m; ++i) {
    if (!keys[i].j.is_string()) keys[i].fail("a dict key must be a string for xport, got " + std::string(keys[i].type()));
    out.push_back(keys[i].str());
  }
  return out;
}

/// A node's field names from its context, where the context names one per child: a dataclass's
/// `[[fields], [None fields]]` (torch.export.register_dataclass), a list of keys (a Hugging Face
/// ModelOutput, most registered types); otherwise none (the children are positional).
inline std::vector<std::string> node_fields_of(const json& ctx, std::size_t children) {
  const auto strings = [](const json& j) {
    if (!j.is_array()) return false;
    for (const auto& e : j)
      if (!e.is_string()) return false;
    return true;
  };
  const json* names = nullptr;
  if (strings(ctx)) names = &ctx;
  else if (ctx.is_array() && ctx.size() == 2 && strings(ctx[0]) && strings(ctx[1])) names = &ctx[0];
  if (!names || names->size() != children) return {};
  return names->get<std::vector<std::string>>();
}

/// A treespec from `treespec_dumps` JSON; every leaf is a tensor leaf (see with_constants).
inline treespec pytree_of(const at_path& j) {
  const auto type_j = j["type"];
  const auto children_j = j["children_spec"];
  const auto n = children_j.size_of_array();
  if (type_j.j.is_null()) {
    if (n != 0) children_j.fail("a leaf has no children");
    return treespec::leaf();
  }
  const auto type = type_j.str();
  treespec t;
  if (type == "builtins.tuple") t.type = treespec::kind::tuple;
  else if (type == "builtins.list" || type == "torch.fx.immutable_collections.immutable_list") t.type = treespec::kind::list;
  else if (type == "builtins.dict" || type == "collections.OrderedDict" || type == "collections.defaultdict" ||
           type == "torch.fx.immutable_collections.immutable_dict")
    t.type = treespec::kind::dict;
  else if (type == "builtins.NoneType") t.type = treespec::kind::none;
  else t.type = treespec::kind::node;
  if (!type.starts_with("builtins.")) t.type_name = type;
  for (std::size_t i = 0; i < n; ++i) t.children.push_back(pytree_of(children_j[i]));
  const auto ctx_j = j["context"];
  if (!t.type_name.empty()) {  // written back as read
    t.context_is_json = !ctx_j.j.is_string();
    t.context = t.context_is_json ? ctx_j.j.dump() : ctx_j.str();
  }
  if (t.type == treespec::kind::dict) {
    // torch writes a context as JSON text, and a defaultdict's as a JSON object
    const auto ctx = ctx_j.j.is_string() ? parse(ctx_j.str(), ctx_j.record + " (" + ctx_j.path + ")") : ctx_j.j;
    t.keys = dict_keys_of(type, at_path{ctx, ctx_j.path, ctx_j.record});
    if (t.keys.size() != t.children.size()) ctx_j.fail("a dict needs one key per child");
  } else if (t.type == treespec::kind::node) {
    json ctx = ctx_j.j;
    if (ctx.is_string()) {  // JSON text, or not JSON at all: a namedtuple's context is its type's name
      try {
        ctx = parse(ctx.get<std::string>(), ctx_j.record);
      } catch (const load_error&) {
        ctx = nullptr;
      }
    }
    t.keys = node_fields_of(ctx, t.children.size());
  } else if (t.type == treespec::kind::none && n != 0) {
    children_j.fail("None has no children");
  }
  return t;
}
/// `[1, {...}]`: the protocol version, then the spec.
inline treespec pytree_of_dumps(const at_path& text) {
  const auto doc = parse(text.str(), text.record + " (" + text.path + ")");
  const at_path j{doc, text.path, text.record};
  if (j.size_of_array() != 2) j.fail("expected [protocol, spec]");
  if (j[0].integer() != 1) j[0].fail("pytree protocol " + std::to_string(j[0].integer()) + " is not readable by xport (1 is)");
  return pytree_of(j[1]);
}
/// `t` with its leaves, in order, made constant leaves where `constants` gives a value (the
/// constant inputs' and outputs' specs hold the values torch's specs leave out).
inline void with_constants(treespec& t, const std::vector<std::optional<argument>>& constants, std::size_t& leaf,
                           const at_path& where) {
  if (t.type == treespec::kind::leaf) {
    if (leaf >= constants.size())
      where.fail("the spec has more leaves than the signature has entries (" + std::to_string(constants.size()) + ")");
    if (const auto& c = constants[leaf++]) t = treespec::constant(*c);
    return;
  }
  for (auto& c : t.children) with_constants(c, constants, leaf, where);
}

/// The name of argument `i` of a call spec (a keyword argument's is its keyword).
inline std::string argument_name(const treespec& in, std::size_t i) {
  return i < in.keys.size() ? in.keys[i] : "arg_" + std::to_string(i);
}

/// The call spec torch writes: in_spec is `(args, kwargs)`; the last `num_kwargs` arguments of
/// xport's in_spec are the keyword ones.
inline std::string pytree_in_spec(const treespec& in) {
  const std::size_t n = in.children.size(), k = std::min(in.num_kwargs, n);
  treespec args = treespec::of(treespec::kind::tuple), kwargs = treespec::of(treespec::kind::dict);
  for (std::size_t i = 0; i < n; ++i) {
    if (i < n - k) {
      args.children.push_back(in.children[i]);
      continue;
    }
    kwargs.children.push_back(in.children[i]);
    kwargs.keys.push_back(argument_name(in, i));
  }
  return json::array({1, pytree_json(treespec::of(treespec::kind::tuple, {std::move(args), std::move(kwargs)}))}).dump();
}

}  // namespace detail::serde

XPORT_END_NAMESPACE
// #include <xport/serde/program_json.hpp>
// xport/serde/program_json.hpp: a whole program as torch.export's `models/model.json`, both
// ways. Writing: the graph (nodes, size nodes for symbolic arguments as torch writes them,
// nn_module_stack), the signature, the module call graph with the call structure, range
// constraints and the opset versions. Reading: the same, every field checked (serde/json.hpp
// reads and writes the parts: tensor metadata, arguments, specs), into a program that is
// verified before it is returned.

#include <algorithm>      // std::find, std::stable_sort
#include <cctype>         // std::isalpha
#include <cmath>          // std::isnan
#include <cstdint>        // std::int64_t
#include <memory>         // std::shared_ptr
#include <optional>       // std::optional
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::pair
#include <vector>         // std::vector

#include <ATen/core/dispatch/Dispatcher.h>
#include <caffe2/serialize/versions.h>

// #include <xport/ops/higher_order.hpp>
// #include <xport/config.hpp>
// #include <xport/detail/python_repr.hpp>
// #include <xport/ir/unbacked.hpp>
// #include <xport/serde/json.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail::serde {

inline constexpr std::string_view archive_format = "pt2";
inline constexpr std::string_view archive_version = "0";

/// The opset version of aten, as torch writes it: torch._C._get_max_operator_version(), which
/// is the running LibTorch's caffe2::serialize::kProducedFileFormatVersion.
inline int aten_opset_version() { return static_cast<int>(caffe2::serialize::kProducedFileFormatVersion); }

inline std::string stack_trace_of(const source_location& s) {
  std::string t = "File \"" + s.file + "\", line " + std::to_string(s.line) + ", in " + s.function;
  if (!s.code.empty()) t += "\n    " + s.code;
  return t;
}
inline std::shared_ptr<const source_location> source_of(const std::string& trace) {
  // the last frame: `  File "<file>", line <n>, in <function>\n    <code>`
  const auto at = trace.rfind("File \"");
  if (at == std::string::npos) return nullptr;
  const auto q = trace.find("\", line ", at + 6);
  if (q == std::string::npos) return nullptr;
  source_location s;
  s.file = trace.substr(at + 6, q - at - 6);
  std::size_t p = q + 8;
  std::uint64_t line = 0;
  while (p < trace.size() && trace[p] >= '0' && trace[p] <= '9' && line < 1000000000) line = line * 10 + static_cast<std::uint64_t>(trace[p++] - '0');
  s.line = static_cast<std::uint32_t>(line);
  if (trace.compare(p, 5, ", in ") != 0) return nullptr;
  p += 5;
  const auto eol = trace.find('\n', p);
  s.function = trace.substr(p, eol == std::string::npos ? std::string::npos : eol - p);
  if (eol != std::string::npos) {
    auto code = trace.substr(eol + 1);
    const auto first = code.find_first_not_of(' ');
    s.code = first == std::string::npos ? std::string() : code.substr(first);
  }
  return std::make_shared<const source_location>(std::move(s));
}

/// Python's repr of a JSON value read as Python reads it (json.loads, keys in their order): `{'a': True, 'b': [1, 'x']}`.
inline std::string python_repr_of_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return "None";
    case nlohmann::ordered_json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case nlohmann::ordered_json::value_t::number_integer: return std::to_string(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return std::to_string(j.get<std::uint64_t>());
    case nlohmann::ordered_json::value_t::number_float: return python_float_repr(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return python_str_repr(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::string s = "[";
      for (std::size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + python_repr_of_json(j[i]);
      return s + "]";
    }
    case nlohmann::ordered_json::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        s += (first ? "" : ", ") + python_str_repr(k) + ": " + python_repr_of_json(v);
        first = false;
      }
      return s + "}";
    }
    default: return "None";
  }
}

/// How torch.fx prints a node's `custom` metadata after `# Annotation: `: its dict, each value
/// whose str() is longer than 40 characters cut there and ended with `...`; empty when it is
/// not a JSON object (or is an empty one).
inline std::string annotation_of(const std::string& custom_json) {
  const auto j = nlohmann::ordered_json::parse(custom_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.empty()) return "";
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : j.items()) {
    const std::string str = v.is_string() ? v.get<std::string>() : python_repr_of_json(v);
    s += (first ? "" : ", ") + python_str_repr(k) + ": " +
         (str.size() > 40 ? python_str_repr(str.substr(0, 40) + "...") : python_repr_of_json(v));
    first = false;
  }
  return s + "}";
}

// ---- program -> JSON -------------------------------------------------------------------------

/// Note [Symbolic arguments in .pt2]: an argument that depends on a dynamic dim (`[s0, -1]`) is
/// written as torch writes it: a `torch.ops.aten.sym_size.int(x, 0)` node reads the dim from an
/// input, `_operator.mul` / `add` / `sub` / `floordiv` nodes compute the linear form, and the
/// argument names the result (`as_sym_int: {as_name: ...}`). Reading turns them back into
/// expressions; the nodes are not kept in the graph.
class sym_writer {
 public:
  sym_writer(const graph& g, json& nodes, json& sym_int_values) : nodes_(nodes), values_(sym_int_values) {
    for (auto n : g.nodes())
      for (auto v : n.outputs()) taken_.insert(v.name());
    for (auto ph : g.placeholders()) {
      const auto v = ph.out();
      if (v.kind() != value_kind::tensor) continue;
      const auto& sizes = v.meta().sizes;
      for (std::size_t d = 0; d < sizes.size(); ++d)
        if (auto lin = sizes[d].is_symbolic() ? sym::as_linear(sizes[d]) : std::nullopt)
          sites_.push_back({lin->symbol, v.name(), static_cast<std::int64_t>(d), lin->a, lin->b, sizes[d]});
    }
  }

  /// After call `n` (written): the `sym_size.int` read of each unbacked symbol it is the first to
  /// give, then the `_operator.ge` / `le` and `_assert_scalar` nodes of the symbol's range, as
  /// torch writes them (Note [Runtime assertions as ranges]); `sym_bool_values` gets their types.
  void give_unbacked(const node& n, json& sym_bool_values) {
    for_each_unbacked_given(n, unbacked_, [&](const value& v, std::int64_t dim, const std::string& symbol, const sym_int& e) {
      std::string src = v.name();
      if (dim >= 0) {
        src = fresh("sym_size_int");
        nodes_.push_back({{"target", "torch.ops.aten.sym_size.int"},
                          {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_tensor", {{"name", v.name()}}}}}, {"kind", 1}},
                                                  {{"name", "dim"}, {"arg", {{"as_int", dim}}}, {"kind", 1}}})},
                          {"outputs", json::array({{{"as_sym_int", {{"as_name", src}}}}})},
                          {"metadata", nodes_.back()["metadata"]},
                          {"name", src}});
        values_[src] = sym_int_json(e);
      }
      symbols_.emplace(symbol, std::pair{src, e});
      const auto r = sym::range(e);
      const auto meta = nodes_.back()["metadata"];
      const auto assert_bound = [&](const char* what, const char* relation, const char* op, std::int64_t k) {
        if (dim < 0) (void)fresh(what);  // named as print names it (program/print.hpp, plan_unbacked)
        const auto name = fresh(what);
        nodes_.push_back({{"target", std::string("_operator.") + what},
                          {"inputs", json::array({{{"name", "a"}, {"arg", {{"as_sym_int", {{"as_name", src}}}}}, {"kind", 1}},
                                                  {{"name", "b"}, {"arg", {{"as_int", k}}}, {"kind", 1}}})},
                          {"outputs", json::array({{{"as_sym_bool", {{"as_name", name}}}}})},
                          {"metadata", meta},
                          {"name", name}});
        sym_bool_values[name] = {{"as_expr", {{"expr_str", std::string(relation) + "(" + sym::srepr(e) + ", Integer(" + std::to_string(k) + "))"},
                                              {"hint", nullptr}}}};
        const auto msg = "Runtime assertion failed for expression " + symbol + " " + op + " " + std::to_string(k) +
                         " on node '" + name + "'";
        const auto assert_name = fresh("_assert_scalar_default");
        nodes_.push_back({{"target", "torch.ops.aten._assert_scalar.default"},
                          {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_sym_bool", {{"as_name", name}}}}}, {"kind", 1}},
                                                  {{"name", "assert_msg"}, {"arg", {{"as_string", msg}}}, {"kind", 1}}})},
                          {"outputs", json::array()},
                          {"metadata", meta},
                          {"name", assert_name}});
      };
      if (r.lo > -int_oo) assert_bound("ge", "GreaterThan", ">=", r.lo);
      if (r.hi < int_oo) assert_bound("le", "LessThan", "<=", r.hi);
    });
  }

  /// The name of a value equal to `e` (written on first use): sums and products of the dims,
  /// floor division, modulo, min and max, as torch writes them.
  std::string operator()(const sym_int& e) {
    if (auto it = named_.find(e.str()); it != named_.end()) return it->second;
    std::string name;
    const auto& n = xport::detail::node_of(e);
    using K = xport::detail::sym_kind;
    switch (n.kind) {
      case K::symbol: name = symbol(n.name).first; break;
      case K::poly: {
        std::optional<std::pair<std::string, sym_int>> acc;  // the sum so far
        for (const auto& t : n.terms) {
          std::optional<std::pair<std::string, sym_int>> prod;
          for (const auto& f : t.factors)
            for (std::int64_t k = 0; k < f.power; ++k) {
              const auto atom = rehint(f.atom);
              prod = !prod ? std::pair{(*this)(atom), atom}
                           : std::pair{op("mul", prod->first, operand(atom), prod->second * atom), prod->second * atom};
            }
          if (t.coeff != 1) prod = std::pair{op("mul", prod->first, json{{"as_int", t.coeff}}, prod->second * t.coeff), prod->second * t.coeff};
          acc = !acc ? prod
                     : std::pair{op("add", acc->first, json{{"as_name", prod->first}}, acc->second + prod->second), acc->second + prod->second};
        }
        if (n.constant > 0) acc = std::pair{op("add", acc->first, json{{"as_int", n.constant}}, acc->second + n.constant), acc->second + n.constant};
        if (n.constant < 0) acc = std::pair{op("sub", acc->first, json{{"as_int", -n.constant}}, acc->second - (-n.constant)), acc->second - (-n.constant)};
        name = acc->first;
        break;
      }
      case K::floordiv: name = op_node("floordiv", operand(rehint(n.args[0])), operand(rehint(n.args[1])), e, "_operator."); break;
      case K::mod: name = op_node("mod", operand(rehint(n.args[0])), operand(rehint(n.args[1])), e, "_operator."); break;
      case K::min:
      case K::max: {  // n-ary, folded pairwise
        std::vector<sym_int> args;
        for (const auto& a : n.args) args.push_back(rehint(a));
        sym_int acc = args[0];
        json acc_j = operand(acc);
        for (std::size_t i = 1; i < args.size(); ++i) {
          acc = n.kind == K::min ? sym::min(acc, args[i]) : sym::max(acc, args[i]);
          acc_j = {{"as_name", op_node(n.kind == K::min ? "min" : "max", acc_j, operand(args[i]), acc, "torch.sym_")}};
        }
        name = acc_j["as_name"].get<std::string>();
        break;
      }
    }
    named_.emplace(e.str(), name);
    return name;
  }

 private:
  struct site {
    std::string symbol, input;
    std::int64_t dim, a, b;
    sym_int size;
  };

  std::string fresh(const std::string& base) {
    std::string n = base;
    for (int k = 1; taken_.count(n); ++k) n = base + "_" + std::to_string(k);
    taken_.insert(n);
    return n;
  }

  // A value equal to the bare symbol `s`: sym_size of the input dim that gives it.
  std::pair<std::string, sym_int> symbol(const std::string& s) {
    if (auto it = symbols_.find(s); it != symbols_.end()) return it->second;
    const site* best = nullptr;
    for (const auto& st : sites_)
      if (st.symbol == s && (!best || (st.a == 1 && st.b == 0 && (best->a != 1 || best->b != 0)))) best = &st;
    if (!best)
      throw error("xport.save.symbolic_argument", "an operator argument uses the symbol " + s +
                                                      ", which no input dimension gives; the program is malformed");
    std::string name = fresh("sym_size_int");
    nodes_.push_back({{"target", "torch.ops.aten.sym_size.int"},
                      {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_tensor", {{"name", best->input}}}}}, {"kind", 1}},
                                              {{"name", "dim"}, {"arg", {{"as_int", best->dim}}}, {"kind", 1}}})},
                      {"outputs", json::array({{{"as_sym_int", {{"as_name", name}}}}})},
                      {"metadata", json::object()},
                      {"name", name}});
    values_[name] = sym_int_json(best->size);
    sym_int expr = best->size;  // a derived dim (a*s + b) gives s back as (size - b) // a
    if (best->b != 0) name = op("sub", name, best->b, expr = expr - best->b);
    if (best->a != 1) name = op("floordiv", name, best->a, expr = sym::floordiv(expr, best->a));
    return symbols_.emplace(s, std::pair{name, expr}).first->second;
  }

  /// `e` with the hints of its parts (the atoms of a canonical form keep none of their own).
  static sym_int rehint(const sym_int& e) {
    return sym::substitute(e, [](std::string_view) { return std::optional<sym_int>(); });
  }
  /// `{"as_int": c}` for a constant, else `{"as_name": <its value>}`.
  json operand(const sym_int& e) {
    if (e.is_constant()) return {{"as_int", e.value()}};
    return {{"as_name", (*this)(e)}};
  }
  std::string op(const char* what, const std::string& lhs, std::int64_t rhs, const sym_int& result) {
    return op(what, lhs, json{{"as_int", rhs}}, result);
  }
  std::string op(const char* what, const std::string& lhs, json rhs, const sym_int& result,
                 const std::string& prefix = "_operator.") {
    return op_node(what, json{{"as_name", lhs}}, std::move(rhs), result, prefix);
  }
  /// `<prefix><what>(a, b)`: `_operator.mul(a, b)`, `torch.sym_max(a, b)`; operands are
  /// `{"as_name": ...}` or `{"as_int": ...}`.
  std::string op_node(const char* what, json a, json b, const sym_int& result, const std::string& prefix) {
    std::string name = fresh(std::string("sym_") + what);
    nodes_.push_back({{"target", prefix + what},
                      {"inputs", json::array({{{"name", "a"}, {"arg", {{"as_sym_int", std::move(a)}}}, {"kind", 1}},
                                              {{"name", "b"}, {"arg", {{"as_sym_int", std::move(b)}}}, {"kind", 1}}})},
                      {"outputs", json::array({{{"as_sym_int", {{"as_name", name}}}}})},
                      {"metadata", json::object()},
                      {"name", name}});
    values_[name] = sym_int_json(result);
    return name;
  }

  json& nodes_;
  json& values_;
  std::unordered_set<std::string> taken_;
  std::unordered_map<std::string, std::string> named_;                       // expression -> value
  std::unordered_map<std::string, std::pair<std::string, sym_int>> symbols_;  // symbol -> value
  std::unordered_set<std::string> unbacked_;                                   // the unbacked symbols given so far
  std::vector<site> sites_;
};

/// torch's `nn_module_stack` of a node in module `path`: one `key,path,type` entry per
/// module from the root down (`L__self__,,Net;L__self__fc,fc,torch::nn::LinearImpl`), joined
/// by ';'. Types come from the program's module table ('<' '>' become '[' ']' so that commas of
/// template arguments stay nested, as torch's reader expects; ';' becomes ':').
inline std::string nn_module_stack_of(const std::string& path, const std::unordered_map<std::string, std::string>& types) {
  const auto entry = [&](const std::string& fqn) {
    std::string type;
    if (auto it = types.find(fqn); it != types.end())
      for (char c : it->second) type += c == '<' ? '[' : c == '>' ? ']' : c == ';' ? ':' : c;
    return "L__self__" + fqn + "," + fqn + "," + type;
  };
  std::string out = entry("");
  for (std::size_t dot = 0; !path.empty() && dot != std::string::npos;) {
    dot = path.find('.', dot + 1);
    out += ";" + entry(path.substr(0, dot));
  }
  return out;
}
/// The path of the innermost module of an `nn_module_stack` (`fc` above), and every (path, type).
inline std::string module_path_of_stack(const std::string& stack, std::vector<std::pair<std::string, std::string>>* types) {
  std::string path;
  std::size_t start = 0;
  while (start <= stack.size()) {
    const auto end = std::min(stack.find(';', start), stack.size());
    // key,path,type with commas nested in () or [] kept (torch's metadata_split)
    std::vector<std::string> fields(1);
    int nesting = 0;
    for (std::size_t i = start; i < end; ++i) {
      const char c = stack[i];
      if (c == '(' || c == '[') ++nesting;
      if (c == ')' || c == ']') --nesting;
      if (c == ',' && nesting == 0) fields.emplace_back();
      else fields.back() += c;
    }
    if (fields.size() >= 2) {
      path = fields[1];
      if (types && fields.size() == 3) types->emplace_back(fields[1], fields[2]);
    }
    start = end + 1;
  }
  return path;
}

/// Subgraph `s` of `p` as a program of its own, its nodes' modules typed as `p`'s are.
inline exported_program subgraph_program_of(const exported_program& p, const subgraph& s) {
  auto q = subgraph_program(s);
  q.set_module_types(p.module_types());
  return q;
}

inline json graph_json(const exported_program& p) {
  const graph& g = p.graph();
  json inputs = json::array(), nodes = json::array(), outputs = json::array();
  json tensor_values = json::object(), sym_int_values = json::object(), sym_bool_values = json::object();
  sym_writer name_sym(g, nodes, sym_int_values);
  const sym_namer namer = [&](const sym_int& e) { return name_sym(e); };
  // an output no getitem reads (value::unpacked) is named as torch names it: <node>_unused_<i>
  const auto name_of = [](const node& n, value v) {
    return n.has_tuple_output() && !v.unpacked() && v.num_uses() == 0
               ? n.name() + "_unused_" + std::to_string(v.index())
               : v.name();
  };
  const auto record = [&](value v, const std::string& name) {
    if (v.kind() == value_kind::tensor) tensor_values[name] = tensor_meta_json(v.meta());
    else if (v.kind() == value_kind::sym_int) sym_int_values[name] = sym_int_json(v.type().scalar);
  };
  const std::unordered_map<std::string, std::string> types(p.module_types().begin(), p.module_types().end());
  std::size_t ph = 0;
  for (auto n : g.nodes()) {
    if (n.is_placeholder()) {
      const auto& spec = p.signature().input_specs.at(ph++);
      // a specialized constant is written as its value, as torch writes it (its name is the spec's)
      if (spec.arg.type == argument_spec::kind::constant) inputs.push_back(constant_value_json(spec.arg.constant));
      else inputs.push_back(value_ref(n.output(0)));
      record(n.output(0), n.output(0).name());
      continue;
    }
    if (n.kind() == node_kind::output) {
      for (const auto& a : n.args()) outputs.push_back(argument_json(a, nullptr));
      continue;
    }
    const auto& op = n.op();
    const auto& params = op.schema().arguments();
    json in = json::array();
    const auto args = n.args();
    const auto* hop = hop_of(op);
    for (std::size_t i = 0; i < params.size() && i < args.size(); ++i) {
      if (hop && hop->spread_last && i + 1 == params.size() && args[i].is_list()) {  // written spread, as torch writes it
        for (const auto& e : args[i].as_list()) in.push_back({{"name", ""}, {"arg", argument_json(e, nullptr, namer)}, {"kind", 1}});
        continue;
      }
      // a control-flow call's arguments are positional and unnamed, its subgraphs written whole
      json arg = args[i].is_graph() ? json{{"as_graph", {{"name", args[i].as_graph()->name},
                                                         {"graph", graph_json(subgraph_program_of(p, *args[i].as_graph()))}}}}
                                    : argument_json(args[i], op.higher_order ? nullptr : params[i].real_type(), namer);
      in.push_back({{"name", op.higher_order ? std::string() : params[i].name()},
                    {"arg", std::move(arg)},
                    {"kind", params[i].kwarg_only() ? 2 : 1}});
    }
    json out = json::array();
    if (op.returns_list && !op.higher_order) {
      json list = json::array();
      for (auto v : n.outputs()) list.push_back({{"name", name_of(n, v)}});
      out.push_back({{"as_tensors", std::move(list)}});
    } else {
      for (auto v : n.outputs()) {
        json ref = value_ref(v);
        if (v.kind() == value_kind::tensor) ref["as_tensor"]["name"] = name_of(n, v);
        out.push_back(v.kind() == value_kind::none ? json{{"as_none", true}} : std::move(ref));
      }
    }
    for (auto v : n.outputs()) record(v, name_of(n, v));
    json meta = json::object();
    if (const auto& s = n.source(); s && !s->file.empty()) meta["stack_trace"] = stack_trace_of(*s);
    if (const auto& s = n.source(); s && !s->custom_json.empty()) meta["custom"] = s->custom_json;
    meta["nn_module_stack"] = nn_module_stack_of(n.module_path(), types);
    nodes.push_back({{"target", op.target}, {"inputs", std::move(in)}, {"outputs", std::move(out)},
                     {"metadata", std::move(meta)}, {"name", n.name()}});
    if (op.higher_order) nodes.back()["is_hop_single_tensor_return"] = false;
    name_sym.give_unbacked(n, sym_bool_values);
  }
  return {{"inputs", std::move(inputs)},   {"outputs", std::move(outputs)},
          {"nodes", std::move(nodes)},     {"tensor_values", std::move(tensor_values)},
          {"sym_int_values", std::move(sym_int_values)}, {"sym_bool_values", std::move(sym_bool_values)},
          {"is_single_tensor_return", g.returns_bare()}, {"custom_obj_values", json::object()},
          {"sym_float_values", json::object()}};
}

/// The program's call structure: its in_spec and out_spec or, for a program built by hand, one
/// argument per user input (named by it) and one result per user output.
inline std::pair<treespec, treespec> call_specs(const exported_program& p) {
  if (p.in_spec() && p.out_spec()) return {*p.in_spec(), *p.out_spec()};
  treespec in = treespec::of(treespec::kind::tuple), out = treespec::of(treespec::kind::tuple);
  for (const auto& s : p.signature().input_specs) {
    if (s.kind != input_kind::user_input) continue;
    in.children.push_back(s.arg.type == argument_spec::kind::constant ? treespec::constant(s.arg.constant) : treespec::leaf());
    in.keys.push_back(s.arg.name);
  }
  for (const auto& s : p.signature().output_specs)
    if (s.kind == output_kind::user_output || s.kind == output_kind::loss_output)
      out.children.push_back(s.arg.type == argument_spec::kind::constant ? treespec::constant(s.arg.constant) : treespec::leaf());
  return {std::move(in), std::move(out)};
}

/// torch's module call graph: the root's signature (how ep.module() is called: in_spec of
/// `(args, kwargs)`, out_spec, the forward's argument names), then one entry per submodule.
inline json module_call_graph_json(const exported_program& p) {
  const auto [in, out] = call_specs(p);
  json names = json::array();
  if (in.keys.size() == in.children.size())
    for (const auto& k : in.keys) names.push_back(k);
  json graph = json::array({{{"fqn", ""},
                             {"signature",
                              {{"inputs", json::array()},
                               {"outputs", json::array()},
                               {"in_spec", pytree_in_spec(in)},
                               {"out_spec", json::array({1, pytree_json(out)}).dump()},
                               {"forward_arg_names", std::move(names)}}}}});
  for (const auto& [fqn, type] : p.module_types())
    if (!fqn.empty()) graph.push_back({{"fqn", fqn}, {"signature", nullptr}});
  return graph;
}

inline json program_json(const exported_program& p) {
  json input_specs = json::array(), output_specs = json::array();
  for (const auto& s : p.signature().input_specs) input_specs.push_back(input_spec_json(s));
  for (const auto& s : p.signature().output_specs) output_specs.push_back(output_spec_json(s));
  json metadata = json::object();
  json ranges = json::object(), dim_names = json::object();
  for (const auto& r : p.range_constraints()) {
    ranges[r.symbol.str()] = {{"min_val", r.min <= -int_oo ? json(nullptr) : json(r.min)},
                              {"max_val", r.max ? json(*r.max) : json(nullptr)}};
    if (!r.name.empty()) dim_names[r.symbol.str()] = r.name;
  }
  // the user's names of the dims (`s0` is `batch`), for guard messages after loading
  if (!dim_names.empty()) metadata["xport.dim_names"] = dim_names.dump();
  return {{"graph_module",
           {{"graph", graph_json(p)},
            {"signature", {{"input_specs", std::move(input_specs)}, {"output_specs", std::move(output_specs)}}},
            {"module_call_graph", module_call_graph_json(p)},
            {"metadata", std::move(metadata)},
            {"treespec_namedtuple_fields", json::object()}}},
          {"opset_version", {{"aten", aten_opset_version()}}},
          {"range_constraints", std::move(ranges)},
          {"schema_version", {{"major", schema_version_major}, {"minor", schema_version_minor}}},
          {"verifiers", json::array({std::string(to_string(p.dialect()))})},
          {"torch_version", torch_version()},
          {"guards_code", json::array()}};
}

// ---- JSON -> program -------------------------------------------------------------------------

/// Whether a node computes an integer size (read into an expression, not kept as a node):
/// `aten.sym_size.int` and its kin, `_operator.*`, `torch.sym_*`, `math.*`.
inline bool is_sym_node(const std::string& target) {
  return target == "torch.ops.aten.sym_size.int" || target == "torch.ops.aten.sym_stride.int" ||
         target == "torch.ops.aten.sym_numel.default" || target == "torch.ops.aten.sym_storage_offset.default" ||
         target.rfind("_operator.", 0) == 0 || target.rfind("torch.sym_", 0) == 0 || target.rfind("math.", 0) == 0;
}

/// The inputs of one sym_size / _operator node, read against the scope.
struct sym_node_reader {
  const at_path& nj;
  const std::string& target;
  const value_scope& scope;
  at_path ins;

  /// The argument the node passes as input `name`.
  at_path input(const char* name) const {
    for (std::size_t a = 0, n = ins.size_of_array(); a < n; ++a)
      if (ins[a]["name"].str() == name) return ins[a]["arg"];
    ins.fail(target + " has no input '" + name + "'");
  }

  /// A SymInt operand: an integer, a size an earlier node computed, or a SymInt value.
  sym_int operand(const at_path& j) const {
    auto [k, v] = j.one_of();
    if (k == "as_int") return v.integer();
    if (k != "as_sym_int") j.fail("expected a SymInt, got '" + k + "'");
    auto [k2, v2] = v.one_of();
    if (k2 == "as_int") return v2.integer();
    if (k2 != "as_name") v.fail("unknown member '" + k2 + "'");
    const auto name = v2.str();
    if (auto it = scope.syms.find(name); it != scope.syms.end()) return it->second;
    const auto val = scope(v2, name);
    if (val.kind() != value_kind::sym_int) v2.fail("'" + name + "' is not a SymInt");
    return val.type().scalar;
  }

  /// The tensor input `self`.
  value tensor_in() const {
    const auto self = input("self");
    auto [k, v] = self.one_of();
    if (k != "as_tensor") self.fail("expected a tensor, got '" + k + "'");
    const auto t = scope(v, v["name"].str());
    if (t.kind() != value_kind::tensor) v.fail("'" + t.name() + "' is not a tensor");
    return t;
  }

  /// The input `dim`, wrapped and checked against the rank of `t`.
  std::size_t dim_of(const value& t) const {
    const auto dj = input("dim");
    auto d = operand(dj);
    const auto r = static_cast<std::int64_t>(t.meta().sizes.size());
    std::int64_t dim = d.is_constant() ? d.hint() : r;
    if (dim < 0) dim += r;
    if (dim < 0 || dim >= r)
      dj.fail("dim " + d.str() + " is out of range for '" + t.name() + "' of rank " + std::to_string(r));
    return static_cast<std::size_t>(dim);
  }

  /// The size the node computes.
  sym_int result() const {
    const auto binary = [&](auto&& f) { return f(operand(input("a")), operand(input("b"))); };
    sym_int result;
    if (target == "torch.ops.aten.sym_size.int") {
      const auto t = tensor_in();
      result = t.meta().sizes[dim_of(t)];
    } else if (target == "torch.ops.aten.sym_stride.int") {
      const auto t = tensor_in();
      if (t.meta().strides.size() != t.meta().sizes.size()) nj.fail("'" + t.name() + "' has no strides");
      result = t.meta().strides[dim_of(t)];
    } else if (target == "torch.ops.aten.sym_numel.default") {
      result = 1;
      for (const auto& d : tensor_in().meta().sizes) result = result * d;
    } else if (target == "torch.ops.aten.sym_storage_offset.default") {
      result = tensor_in().meta().storage_offset;
    } else if (target == "_operator.add") result = binary([](const sym_int& a, const sym_int& b) { return a + b; });
    else if (target == "_operator.sub") result = binary([](const sym_int& a, const sym_int& b) { return a - b; });
    else if (target == "_operator.mul") result = binary([](const sym_int& a, const sym_int& b) { return a * b; });
    else if (target == "_operator.floordiv") result = binary([](const sym_int& a, const sym_int& b) { return sym::floordiv(a, b); });
    else if (target == "_operator.mod") result = binary([](const sym_int& a, const sym_int& b) { return sym::mod(a, b); });
    else if (target == "torch.sym_max") result = binary([](const sym_int& a, const sym_int& b) { return sym::max(a, b); });
    else if (target == "torch.sym_min") result = binary([](const sym_int& a, const sym_int& b) { return sym::min(a, b); });
    else if (target == "_operator.neg") result = -operand(input("a"));
    else if (target == "_operator.pos") result = operand(input("a"));
    else if (target == "_operator.pow") {
      const auto a = operand(input("a")), b = operand(input("b"));
      if (!b.is_constant() || b.hint() < 0 || b.hint() > 8) input("b").fail("expected an integer exponent in [0, 8]");
      result = 1;
      for (std::int64_t i = 0; i < b.hint(); ++i) result = result * a;
    } else {
      nj["target"].fail("operator '" + target + "' on sizes is not supported by xport (it reads sym_size, sym_stride, "
                        "sym_numel, sym_storage_offset, _operator add/sub/mul/floordiv/mod/neg/pos/pow and "
                        "torch.sym_max/sym_min)");
    }
    return result;
  }
};

/// The relation `_operator.ge` and its kin compute (`">="`), or null for another target.
inline const char* comparison_of(const std::string& target) {
  if (target == "_operator.ge") return ">=";
  if (target == "_operator.le") return "<=";
  if (target == "_operator.gt") return ">";
  if (target == "_operator.lt") return "<";
  if (target == "_operator.eq") return "==";
  return nullptr;
}

/// Whether a node asserts a fact on sizes (`_assert_scalar`, `sym_constrain_range[_for_size]`):
/// xport keeps it as the range of its symbol (Note [Runtime assertions as ranges]).
inline bool is_assert_node(const std::string& target) {
  return target == "torch.ops.aten._assert_scalar.default" || target == "torch.ops.aten.sym_constrain_range_for_size.default" ||
         target == "torch.ops.aten.sym_constrain_range.default";
}

// Note [Runtime assertions as ranges]: torch asserts what it knows of an unbacked symbol with
// `_assert_scalar` nodes on SymBools (`ge: "Sym(u0 >= 0)" = sym_size_int >= 0`), one bound each,
// the same bounds its range_constraints list. xport keeps each bound as the symbol's range: the
// interpreter checks it where the symbol gets its value (a nonzero's row count, an item()), with
// torch's message, and print and save make torch's nodes again from the range. An assertion of
// another form (`u0 <= s0`, `u0 + u1 == 8`) is refused by name.
inline void read_assert_node(const at_path& nj, const std::string& target, value_scope& scope) {
  const sym_node_reader reader{nj, target, scope, nj["inputs"]};
  if (!active_symbols) nj.fail("an assertion outside a program");
  const auto bound = [&](const sym_int& s, const at_path& where, std::int64_t lo, std::int64_t hi) {
    const auto lin = sym::as_linear(s);
    if (!lin || lin->a != 1 || lin->b != 0)
      where.fail("xport keeps runtime assertions that bound one symbol by constants; " + s.str() + " is not a symbol");
    auto& r = active_symbols->find_or_add(lin->symbol).range;
    r.lo = std::max(r.lo, lo);
    r.hi = std::min(r.hi, hi);
    if (r.lo > r.hi) where.fail("the assertions leave " + lin->symbol + " no value (" + r.str() + ")");
  };
  if (target != "torch.ops.aten._assert_scalar.default") {
    const auto opt = [&](const char* name, std::int64_t dflt) {
      const auto a = reader.input(name);
      auto [k, v] = a.one_of();
      return k == "as_none" ? dflt : v.integer();
    };
    const auto size = reader.input("size");
    const bool for_size = target == "torch.ops.aten.sym_constrain_range_for_size.default";
    bound(reader.operand(size), size, opt("min", for_size ? 0 : -int_oo), opt("max", int_oo));
    return;
  }
  const auto self = reader.input("self");
  auto [k, v] = self.one_of();
  if (k != "as_sym_bool") self.fail("_assert_scalar asserts a SymBool, not '" + k + "'");
  auto [k2, v2] = v.one_of();
  if (k2 != "as_name") v.fail("expected a SymBool node's name, got '" + k2 + "'");
  const auto it = scope.conditions.find(v2.str());
  if (it == scope.conditions.end())
    v2.fail("'" + v2.str() + "' is no comparison of sizes (xport reads _operator ge/le/gt/lt/eq nodes as SymBools)");
  const auto& c = it->second;
  const bool sym_left = c.rhs.is_constant();
  if (sym_left == c.lhs.is_constant())
    v2.fail("xport keeps runtime assertions that bound one symbol by constants; " + c.lhs.str() + " " + c.op + " " +
            c.rhs.str() + " is not one");
  const auto& s = sym_left ? c.lhs : c.rhs;
  const auto n = (sym_left ? c.rhs : c.lhs).hint();
  std::string op = c.op;
  if (!sym_left) op = op == ">=" ? "<=" : op == "<=" ? ">=" : op == ">" ? "<" : op == "<" ? ">" : op;  // n OP s: s OP' n
  if (op == ">=") bound(s, v2, n, int_oo);
  else if (op == ">") bound(s, v2, n + 1, int_oo);
  else if (op == "<=") bound(s, v2, -int_oo, n);
  else if (op == "<") bound(s, v2, -int_oo, n - 1);
  else bound(s, v2, n, n);
}

/// A sym_size / _operator node: its result becomes an expression arguments can name.
inline void read_sym_node(const at_path& nj, const std::string& target, value_scope& scope) {
  const sym_node_reader reader{nj, target, scope, nj["inputs"]};
  const auto outs = nj["outputs"];
  if (outs.size_of_array() != 1) outs.fail(target + " returns one SymInt");
  auto [ok, ov] = outs[0].one_of();
  if (ok == "as_sym_bool" && comparison_of(target)) {
    scope.conditions[ov["as_name"].str()] = {reader.operand(reader.input("a")), comparison_of(target),
                                             reader.operand(reader.input("b"))};
    return;
  }
  if (ok == "as_sym_bool" || ok == "as_sym_float")
    nj["target"].fail("operator '" + target + "' computes a " + (ok == "as_sym_bool" ? "SymBool" : "SymFloat") +
                      ", which xport does not represent (it reads integer size arithmetic only)");
  if (ok != "as_sym_int") outs[0].fail(target + " returns a SymInt, not '" + ok + "'");
  const auto out_name = ov["as_name"].str();
  sym_int result;
  try {
    result = reader.result();
  } catch (const graph_error& e) {
    nj.fail(e.what());
  }
  scope.syms[out_name] = result;
}

/// The graph's tables of value types: tensor_values, sym_int_values, and the optional
/// sym_bool_values and sym_float_values.
struct value_types {
  at_path tensor_values, sym_int_values;
  std::optional<at_path> sym_bool_values, sym_float_values;

  /// The type of the value `name`, which `where` names.
  value_type operator()(const at_path& where, const std::string& name) const {
    if (auto t = tensor_values.get(name)) return value_type::of(tensor_meta_of(*t));
    if (auto s = sym_int_values.get(name)) return value_type::of_sym_int(sym_int_of(*s));
    if (sym_bool_values && sym_bool_values->get(name)) return value_type{value_kind::sym_bool, {}, {}};
    if (sym_float_values && sym_float_values->get(name)) return value_type{value_kind::sym_float, {}, {}};
    where.fail("value '" + name + "' has no entry in tensor_values, sym_int_values, sym_bool_values or sym_float_values");
  }
};

/// The value type tables of graph `gj`, each checked to be an object.
inline value_types value_types_of(const at_path& gj) {
  const auto tensor_values = gj["tensor_values"];
  const auto sym_int_values = gj["sym_int_values"];
  (void)tensor_values.object();
  (void)sym_int_values.object();
  const auto sym_bool_values = gj.get("sym_bool_values"), sym_float_values = gj.get("sym_float_values");
  if (sym_bool_values) (void)sym_bool_values->object();
  if (sym_float_values) (void)sym_float_values->object();
  return {tensor_values, sym_int_values, sym_bool_values, sym_float_values};
}

/// Calls `f(where, name)` for each value a node output `out` names.
template <class F>
void each_output_name(const at_path& out, F&& f) {
  auto [k, v] = out.one_of();
  if (k == "as_tensor") f(v, v["name"].str());
  else if (k == "as_tensors")
    for (std::size_t i = 0, n = v.size_of_array(); i < n; ++i) f(v[i], v[i]["name"].str());
  else if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") f(v, v["as_name"].str());
  else if (k != "as_none") out.fail("unsupported node output kind '" + k + "'");
}

/// Adds a placeholder to `g` for each graph input, checked against its input spec.
inline void read_graph_inputs(const at_path& inputs, const graph_signature& sig, const value_types& type_of,
                              graph& g, value_scope& scope) {
  if (inputs.size_of_array() != sig.input_specs.size())
    inputs.fail("the graph has " + std::to_string(inputs.size_of_array()) + " inputs but the signature has " +
                std::to_string(sig.input_specs.size()) + " input specs");
  for (std::size_t i = 0, n = inputs.size_of_array(); i < n; ++i) {
    auto [k, v] = inputs[i].one_of();
    const auto& spec = sig.input_specs[i];
    const bool constant = spec.arg.type == argument_spec::kind::constant;
    try {
      if (k == "as_int" || k == "as_float" || k == "as_bool" || k == "as_string" || k == "as_none") {
        // a specialized constant input: named by its spec, which holds the same value; nothing reads it
        if (!constant) inputs[i].fail("a constant graph input needs a constant_input spec, input spec " + std::to_string(i) + " is '" + spec.arg.name + "'");
        const auto value = constant_value_of(inputs[i]);
        const bool same = value == spec.arg.constant ||
                          (value.is_double() && spec.arg.constant.is_double() && std::isnan(value.as_double()) &&
                           std::isnan(spec.arg.constant.as_double()));
        if (!same) inputs[i].fail("the graph input's value differs from constant input '" + spec.arg.name + "'");
        (void)g.add_placeholder(spec.arg.name, value_type{value_kind::none, {}, {}});
        continue;
      }
      std::string name;
      if (k == "as_tensor") name = v["name"].str();
      else if (k == "as_sym_int") name = v["as_name"].str();
      else if (k == "as_custom_obj") inputs[i].fail("graph input '" + v["name"].str() + "' is a custom object (a TorchBind class instance), which xport does not support");
      else inputs[i].fail("a graph input must be a tensor, a SymInt or a constant, got '" + k + "'");
      if (constant) inputs[i].fail("input spec " + std::to_string(i) + " is the constant input '" + spec.arg.name + "' but the graph input is '" + name + "'");
      scope.defined.emplace(name, g.add_placeholder(name, type_of(inputs[i], name)));
    } catch (const graph_error& e) {
      inputs[i].fail(e.what());
    }
  }
}

/// The types and names of a call node's outputs.
struct call_outputs {
  std::vector<value_type> types;
  std::vector<std::string> names;
};

/// Reads the outputs `outs` of a call of `op` (node `node_name`), checked against what `op` returns.
inline call_outputs read_call_outputs(const at_path& outs, const op_info& op, const std::string& node_name,
                                      const value_types& type_of) {
  call_outputs r;
  std::size_t unnamed = 0;
  for (std::size_t o = 0, n = outs.size_of_array(); o < n; ++o) {
    auto [k, v] = outs[o].one_of();
    if (k == "as_none") {
      r.types.push_back(value_type{value_kind::none, {}, {}});
      r.names.push_back((node_name.empty() ? op.packet : node_name) + "_unused_" + std::to_string(unnamed++));
      continue;
    }
    each_output_name(outs[o], [&](const at_path& where, const std::string& name) {
      r.types.push_back(type_of(where, name));
      r.names.push_back(name);
    });
  }
  const bool tuple = op.returns_list || op.num_returns() != 1;
  if (!tuple && r.names.size() != 1) outs.fail(op.qualified + " returns one value, the node lists " + std::to_string(r.names.size()));
  if (op.returns_list && (outs.size_of_array() != 1 || !outs[0].object().contains("as_tensors")))
    outs.fail(op.qualified + " returns a Tensor[]: expected one as_tensors output");
  if (!op.returns_list && tuple && r.names.size() != op.num_returns())
    outs.fail(op.qualified + " returns " + std::to_string(op.num_returns()) + " values, the node lists " +
              std::to_string(r.names.size()));
  return r;
}

/// Why `target` cannot be read, and the fix: LibTorch's own operators need another LibTorch; a
/// user's operator needs the library that registers it loaded into the process first.
inline std::string unregistered_operator(const std::string& target) {
  const auto parts = detail::split_op_name(target);
  const std::string name = parts.ns + "::" + parts.name + (parts.overload.empty() ? "" : "." + parts.overload);
  if (parts.ns == "aten" || parts.ns == "prims")
    return "operator '" + target + "' is not registered in this LibTorch (" + torch_version() +
           "): the program needs a LibTorch that has " + name;
  std::vector<std::string> known;  // the library is loaded, but has no such operator (a version mismatch)
  for (const auto& n : c10::Dispatcher::singleton().getAllOpNames())
    if (n.name.rfind(parts.ns + "::", 0) == 0 && known.size() < 8)
      known.push_back(n.overload_name.empty() ? n.name : n.name + "." + n.overload_name);
  std::string msg = "custom operator " + name + " ('" + target + "') is not registered in this process: ";
  if (known.empty())
    msg += "no operator of library '" + parts.ns + "' is. Fix: load the library that defines it before load() "
           "(link it, or dlopen its shared library: its TORCH_LIBRARY(" + parts.ns + ", m) block registers " +
           "the schema, its TORCH_LIBRARY_IMPL blocks the kernels)";
  else {
    msg += "library '" + parts.ns + "' is loaded but defines no such operator (it has:";
    for (const auto& k : known) msg += " " + k;
    msg += "). Fix: load the version of the library the program was exported with";
  }
  return msg;
}

/// Reads a subgraph (an as_graph argument): its inputs become placeholders, its values a scope of
/// their own.
inline std::shared_ptr<const subgraph> subgraph_of(const at_path& aj,
                                                   std::vector<std::pair<std::string, std::string>>& module_types);

/// Reads the source, module path and stack of call node `nj` onto `created`.
inline void read_node_metadata(const at_path& nj, node created,
                               std::vector<std::pair<std::string, std::string>>& module_types) {
  const auto meta = nj["metadata"];
  (void)meta.object();
  std::shared_ptr<const source_location> src;
  if (auto st = meta.get("stack_trace")) src = source_of(st->str());
  if (auto custom = meta.get("custom")) {
    auto s = src ? *src : source_location{};
    s.custom_json = custom->str();
    s.annotation = annotation_of(s.custom_json);
    src = std::make_shared<const source_location>(std::move(s));
  }
  if (src) created.set_source(std::move(src));
  if (auto ms = meta.get("nn_module_stack")) created.set_module_path(module_path_of_stack(ms->str(), &module_types));
}

/// Fails unless `args` fit the layout of higher-order operator `hop` (graphs where it takes
/// subgraphs, tensors in its lists, a bool, a string or a dtype where it takes one).
inline void check_higher_order_args(const higher_order_op& hop, const std::vector<argument>& args, const at_path& ins) {
  using T = higher_order_op::param::type;
  for (std::size_t a = 0; a < args.size(); ++a) {
    const auto& p = hop.params[a];
    const auto& x = args[a];
    const bool ok = p.kind == T::any || (p.kind == T::graph && x.is_graph()) || (p.kind == T::tensors && x.is_list()) ||
                    (p.kind == T::boolean && x.is_bool()) || (p.kind == T::string && x.is_string()) ||
                    (p.kind == T::dtype_opt && (x.is_dtype() || x.is_none())) ||
                    (p.kind == T::bool_opt && (x.is_bool() || x.is_none()));
    if (!ok)
      ins.fail(std::string(hop.python) + "'s arguments are " + hop.layout() + ": argument " + std::to_string(a) + " (" +
               std::string(p.name) + ") is not " + (p.kind == T::graph ? "a subgraph (as_graph)" : p.kind == T::tensors ? "a list of tensors" : "of its type"));
    if (p.kind != T::tensors) continue;
    for (std::size_t i = 0; i < x.as_list().size(); ++i)
      if (!x.as_list()[i].is_value() || x.as_list()[i].as_value().kind() != value_kind::tensor)
        ins.fail("operand " + std::to_string(i) + " of " + hop.target() + " is not a tensor: xport's higher-order "
                 "operators pass tensors only (torch carries an int as an unbacked SymInt; carry it as a 0-d tensor, "
                 "torch.tensor(n), instead)");
  }
}

/// Reads a call of a higher-order operator (torch.cond, while_loop, map, scan, wrap_with_...):
/// positional arguments (trailing ones gathered into one list where torch spreads them),
/// subgraphs as as_graph, one as_tensor output per result.
inline void read_higher_order_node(const at_path& nj, const std::string& target, const value_types& type_of,
                                   graph& g, value_scope& scope,
                                   std::vector<std::pair<std::string, std::string>>& module_types) {
  const auto& op = find_op(target);
  const auto& hop = *hop_of(op);
  const auto ins = nj["inputs"];
  std::vector<argument> args;
  for (std::size_t a = 0, n = ins.size_of_array(); a < n; ++a) {
    const auto aj = ins[a]["arg"];
    args.push_back(aj.object().contains("as_graph") ? argument(subgraph_of(aj["as_graph"], module_types))
                                                   : argument_of(aj, scope));
  }
  if (hop.spread_last && args.size() + 1 >= hop.params.size()) {  // the trailing operands, one list
    argument::list_type spread(args.begin() + static_cast<std::ptrdiff_t>(hop.params.size() - 1), args.end());
    args.resize(hop.params.size() - 1);
    args.emplace_back(std::move(spread));
  }
  if (args.size() != hop.params.size())
    ins.fail(op.qualified + " takes " + std::to_string(hop.params.size()) + " arguments " + hop.layout() + ", the node has " +
             std::to_string(args.size()));
  check_higher_order_args(hop, args, ins);
  std::vector<value_type> types;
  std::vector<std::string> names;
  const auto outs = nj["outputs"];
  for (std::size_t o = 0, n = outs.size_of_array(); o < n; ++o)
    each_output_name(outs[o], [&](const at_path& where, const std::string& name) {
      types.push_back(type_of(where, name));
      names.push_back(name);
    });
  const auto node_name = nj.get("name") ? nj["name"].str() : std::string(hop.name);
  node created;
  try {
    created = g.create_call_named(op, std::move(args), std::move(types), node_name, names);
  } catch (const graph_error& e) {
    nj.fail(e.what());
  }
  for (auto v : created.outputs()) scope.defined.emplace(v.name(), v);
  read_node_metadata(nj, created, module_types);
}

/// Reads call node `nj` (of operator `target`) into `g`, its outputs into the scope; `module_types`
/// gets the modules its stack names.
inline void read_call_node(const at_path& nj, const std::string& target, const value_types& type_of, graph& g,
                           value_scope& scope, std::vector<std::pair<std::string, std::string>>& module_types) {
  if (target.rfind("torch.ops.higher_order.", 0) == 0) {
    if (!find_higher_order(target.substr(23)))
      nj["target"].fail("higher-order operator '" + target + "' (torch." + target.substr(23) +
                        ", with its subgraphs as as_graph arguments) is not supported by xport: of torch's "
                        "higher-order operators it reads " + higher_order_names());
    read_higher_order_node(nj, target, type_of, g, scope, module_types);
    return;
  }
  const auto* op = try_find_op(target);
  if (!op) nj["target"].fail(unregistered_operator(target));
  std::vector<kwarg> kwargs;
  const auto ins = nj["inputs"];
  for (std::size_t a = 0, n = ins.size_of_array(); a < n; ++a)
    kwargs.push_back(kwarg{ins[a]["name"].str(), argument_of(ins[a]["arg"], scope)});
  std::vector<argument> args;
  try {
    args = detail::bind_arguments(*op, {}, std::move(kwargs));
  } catch (const schema_error& e) {
    ins.fail(e.what());
  }
  const auto outs = nj["outputs"];
  const auto node_name = nj.get("name") ? nj["name"].str() : std::string();
  auto [types, names] = read_call_outputs(outs, *op, node_name, type_of);
  node created;
  try {
    created = g.create_call_named(*op, std::move(args), std::move(types),
                                  node_name.empty() ? op->packet : node_name, names);
  } catch (const graph_error& e) {
    nj.fail(e.what());
  }
  for (auto v : created.outputs()) {
    scope.defined.emplace(v.name(), v);
    if (v.name() == created.name() + "_unused_" + std::to_string(v.index())) v.set_unpacked(false);
  }
  read_node_metadata(nj, created, module_types);
}

/// Reads graph `gj`; its inputs are read by `read_inputs(type_of, g, scope)`.
template <class ReadInputs>
graph graph_body_of(const at_path& gj, std::vector<std::pair<std::string, std::string>>& module_types,
                    ReadInputs&& read_inputs) {
  graph g;
  const auto type_of = value_types_of(gj);
  value_scope scope;
  const auto nodes = gj["nodes"];
  const auto n_nodes = nodes.size_of_array();
  for (std::size_t i = 0; i < n_nodes; ++i) {
    const auto outs = nodes[i]["outputs"];
    for (std::size_t o = 0, n = outs.size_of_array(); o < n; ++o)
      each_output_name(outs[o], [&](const at_path&, const std::string& name) { scope.later.insert(name); });
  }
  read_inputs(type_of, g, scope);
  for (std::size_t i = 0; i < n_nodes; ++i) {
    const auto nj = nodes[i];
    const auto target = nj["target"].str();
    if (is_sym_node(target)) {
      read_sym_node(nj, target, scope);  // Note [Symbolic arguments in .pt2]
      continue;
    }
    if (is_assert_node(target)) {
      read_assert_node(nj, target, scope);  // Note [Runtime assertions as ranges]
      continue;
    }
    read_call_node(nj, target, type_of, g, scope, module_types);
  }
  std::vector<argument> results;
  const auto outputs = gj["outputs"];
  for (std::size_t i = 0, n = outputs.size_of_array(); i < n; ++i) results.push_back(argument_of(outputs[i], scope));
  g.set_output(std::move(results));
  return g;
}

/// Reads the program's graph; `module_types` gets the (path, type) of every module its nodes' stacks name.
inline graph graph_of(const at_path& gj, const graph_signature& sig, std::vector<std::pair<std::string, std::string>>& module_types) {
  return graph_body_of(gj, module_types, [&](const value_types& type_of, graph& g, value_scope& scope) {
    read_graph_inputs(gj["inputs"], sig, type_of, g, scope);
  });
}

inline std::shared_ptr<const subgraph> subgraph_of(const at_path& aj,
                                                   std::vector<std::pair<std::string, std::string>>& module_types) {
  auto name = aj["name"].str();
  const auto gj = aj["graph"];
  auto body = graph_body_of(gj, module_types, [&](const value_types& type_of, graph& g, value_scope& scope) {
    const auto inputs = gj["inputs"];
    for (std::size_t i = 0, n = inputs.size_of_array(); i < n; ++i) {
      auto [k, v] = inputs[i].one_of();
      if (k != "as_tensor" && k != "as_sym_int")
        inputs[i].fail("an input of subgraph '" + name + "' must be a tensor or a SymInt, got '" + k + "'");
      const auto input_name = k == "as_tensor" ? v["name"].str() : v["as_name"].str();
      try {
        scope.defined.emplace(input_name, g.add_placeholder(input_name, type_of(inputs[i], input_name)));
      } catch (const graph_error& e) {
        inputs[i].fail(e.what());
      }
    }
  });
  if (const auto bare = gj.get("is_single_tensor_return"); bare && bare->boolean() &&
      body.outputs().size() == 1)
    body.set_returns_bare(true);  // a while_loop's cond graph: `return lt`
  return std::make_shared<const subgraph>(subgraph{std::move(name), std::move(body)});
}

struct loaded_json {
  graph g;
  graph_signature sig;
  ir_dialect dialect = ir_dialect::training;
  std::optional<treespec> in_spec, out_spec;
  std::vector<range_constraint> ranges;
  std::vector<std::pair<std::string, std::string>> module_types;
};

/// The root entry of the module call graph gives the call structure: `(args, kwargs)` becomes
/// xport's in_spec (the arguments, named by forward_arg_names, keyword ones last), with constant
/// leaves where the constant inputs are; the entries' FQNs, with the types the nodes' module
/// stacks give, become the module table.
inline void read_call_graph(const at_path& mcg, loaded_json& out,
                            const std::vector<std::pair<std::string, std::string>>& stack_types, bool call_spec) {
  const auto type_of = [&](const std::string& fqn) {
    for (const auto& [path, type] : stack_types)
      if (path == fqn) return type;
    return std::string();
  };
  for (std::size_t i = 0, n = mcg.size_of_array(); i < n; ++i) {
    const auto fqn = mcg[i]["fqn"].str();
    out.module_types.emplace_back(fqn, type_of(fqn));
    if (i != 0 || !fqn.empty() || !call_spec) continue;
    const auto sig = mcg[i].get("signature");
    if (!sig) continue;
    std::vector<std::optional<argument>> in_constants, out_constants;
    for (const auto& s : out.sig.input_specs)
      if (s.kind == input_kind::user_input)
        in_constants.push_back(s.arg.type == argument_spec::kind::constant ? std::optional<argument>(s.arg.constant) : std::nullopt);
    for (const auto& s : out.sig.output_specs)
      if (s.kind == output_kind::user_output || s.kind == output_kind::loss_output)
        out_constants.push_back(s.arg.type == argument_spec::kind::constant ? std::optional<argument>(s.arg.constant) : std::nullopt);
    const auto in_j = (*sig)["in_spec"], out_j = (*sig)["out_spec"];
    auto call = pytree_of_dumps(in_j);
    if (call.type != treespec::kind::tuple || call.children.size() != 2 || call.children[0].type != treespec::kind::tuple ||
        call.children[1].type != treespec::kind::dict)
      in_j.fail("expected the in_spec of a call, a tuple of (args tuple, kwargs dict)");
    treespec in = std::move(call.children[0]);
    auto& kwargs = call.children[1];
    in.num_kwargs = kwargs.children.size();
    for (std::size_t k = 0; k < kwargs.children.size(); ++k) in.children.push_back(std::move(kwargs.children[k]));
    std::size_t leaf = 0;
    with_constants(in, in_constants, leaf, in_j);
    if (leaf != in_constants.size())
      in_j.fail("the in_spec has " + std::to_string(leaf) + " leaves but the program has " +
                std::to_string(in_constants.size()) + " user inputs");
    if (const auto names = sig->get("forward_arg_names"); names && names->size_of_array() == in.children.size()) {
      for (std::size_t k = 0, m = names->size_of_array(); k < m; ++k) in.keys.push_back((*names)[k].str());
    } else {  // torch's own names for unnamed arguments
      for (std::size_t k = 0; k + in.num_kwargs < in.children.size(); ++k) in.keys.push_back("arg_" + std::to_string(k));
      for (const auto& key : kwargs.keys) in.keys.push_back(key);
    }
    auto result = pytree_of_dumps(out_j);
    leaf = 0;
    with_constants(result, out_constants, leaf, out_j);
    if (leaf != out_constants.size())
      out_j.fail("the out_spec has " + std::to_string(leaf) + " leaves but the program has " +
                 std::to_string(out_constants.size()) + " user outputs");
    out.in_spec = std::move(in);
    out.out_spec = std::move(result);
  }
}

/// Fails unless the document's schema version has the major version xport reads.
inline void check_schema_version(const at_path& root) {
  const auto ver = root["schema_version"];
  const auto major = ver["major"].integer();
  if (major != schema_version_major)
    ver.fail("schema version " + std::to_string(major) + "." + std::to_string(ver["minor"].integer()) +
             " is not readable by this xport, which reads major version " + std::to_string(schema_version_major) +
             " (written by torch 2.8 and later); re-export the program with a matching torch");
  (void)ver["minor"].integer();
}

/// The dialect the document's verifiers name (the last one), training when there are none.
inline ir_dialect dialect_of(const at_path& root) {
  ir_dialect dialect = ir_dialect::training;
  if (auto v = root.get("verifiers")) {
    for (std::size_t i = 0, n = v->size_of_array(); i < n; ++i) {
      const auto d = (*v)[i].str();
      if (d == "ATEN") dialect = ir_dialect::aten;
      else if (d == "TRAINING") dialect = ir_dialect::training;
      else (*v)[i].fail("unknown dialect '" + d + "'");
    }
  }
  return dialect;
}

/// Adds each symbol of `ranges` (the range_constraints) to `symbols`, with its range.
inline void read_symbol_ranges(const at_path& ranges, symbol_table& symbols) {
  for (const auto& item : ranges.object().items()) {
    const std::string name = item.key();
    const auto r = ranges[name];
    // ranges of derived expressions (`2*s0`) follow from their symbols': only symbols are kept
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos)
      continue;
    auto& e = symbols.find_or_add(name);
    const auto lo = r.get("min_val"), hi = r.get("max_val");
    e.range.lo = lo ? lo->integer() : sym::is_unbacked(name) ? -int_oo : 0;  // torch writes -int_oo as null
    e.range.hi = hi ? hi->integer() : int_oo;
    if (e.range.lo > e.range.hi) r.fail("min_val " + std::to_string(e.range.lo) + " > max_val " + std::to_string(e.range.hi));
  }
}

/// The range constraints of `symbols` (making the symbols the graph did not), in the order the
/// inputs' sizes of `g` first name them.
inline std::vector<range_constraint> ranges_of(symbol_table& symbols, const graph& g) {
  std::vector<range_constraint> ranges;
  for (auto& e : symbols.entries) {
    if (!e.symbol) e.symbol = sym::symbol(e.name, std::min(std::max<std::int64_t>(e.range.lo, 2), e.range.hi), e.range);
    ranges.push_back({*e.symbol, e.range.lo, e.range.hi == int_oo ? std::nullopt : std::optional<std::int64_t>(e.range.hi), ""});
  }
  // the JSON object's keys come sorted; torch lists the ranges as its symbols were made, in the
  // order of the inputs' sizes: so does xport
  std::vector<std::string> made;
  for (auto ph : g.placeholders())
    if (ph.out().kind() == value_kind::tensor)
      for (const auto& d : ph.out().meta().sizes)
        for (auto& s : sym::free_symbols(d))
          if (std::find(made.begin(), made.end(), s) == made.end()) made.push_back(std::move(s));
  const auto rank = [&](const range_constraint& r) {
    return static_cast<std::size_t>(std::find(made.begin(), made.end(), r.symbol.str()) - made.begin());
  };
  std::stable_sort(ranges.begin(), ranges.end(),
                   [&](const range_constraint& a, const range_constraint& b) { return rank(a) < rank(b); });
  return ranges;
}

/// Reads xport's entries of the graph module's metadata `md`: the legacy in_spec and out_spec,
/// and the user's names of the dims.
inline void read_metadata(const at_path& md, bool legacy, const std::string& record, loaded_json& out) {
  (void)md.object();
  const auto spec = [&](const char* key) -> std::optional<treespec> {
    auto s = md.get(key);
    if (!s) return std::nullopt;
    const auto text = s->str();
    const auto j = parse(text, record + " (" + std::string(key) + ")");
    return treespec_of(at_path{j, std::string("graph_module.metadata.") + key, record});
  };
  if (legacy) {
    out.in_spec = spec("xport.in_spec");
    out.out_spec = spec("xport.out_spec");
  }
  if (auto names = md.get("xport.dim_names")) {
    const auto j = parse(names->str(), record + " (xport.dim_names)");
    const at_path nj{j, "graph_module.metadata.xport.dim_names", record};
    for (auto& r : out.ranges)
      if (auto n = nj.get(r.symbol.str())) r.name = n->str();
  }
}

inline loaded_json program_of(const json& doc, const std::string& record) {
  const at_path root{doc, "", record};
  check_schema_version(root);
  loaded_json out;
  out.dialect = dialect_of(root);
  const auto opsets = root["opset_version"];
  (void)opsets.object();
  // symbols and their ranges first: the graph's sizes refer to them
  symbol_table symbols;
  read_symbol_ranges(root["range_constraints"], symbols);
  struct scope_guard {
    symbol_table* prev;
    ~scope_guard() { active_symbols = prev; }
  } restore{active_symbols};
  active_symbols = &symbols;
  const auto gm = root["graph_module"];
  const auto sig = gm["signature"];
  const auto ins = sig["input_specs"], outs = sig["output_specs"];
  for (std::size_t i = 0, n = ins.size_of_array(); i < n; ++i) out.sig.input_specs.push_back(input_spec_of(ins[i]));
  for (std::size_t i = 0, n = outs.size_of_array(); i < n; ++i) out.sig.output_specs.push_back(output_spec_of(outs[i]));
  std::vector<std::pair<std::string, std::string>> stack_types;
  out.g = graph_of(gm["graph"], out.sig, stack_types);
  out.ranges = ranges_of(symbols, out.g);
  const auto md = gm.get("metadata");
  // archives of xport before schema 8.20 keep the exact structure in the metadata (xport.in_spec;
  // their constants have no placeholders, so the call graph's leaves do not match them)
  const bool legacy = md && md->object().contains("xport.in_spec");
  read_call_graph(gm["module_call_graph"], out, stack_types, !legacy);
  if (md) read_metadata(*md, legacy, record, out);
  return out;
}

}  // namespace detail::serde

XPORT_END_NAMESPACE
// #include <xport/serde/pt2.hpp>
// xport/serde/pt2.hpp: save and load .pt2 archives in torch.export's own layout.
//
//   archive_format                       "pt2"
//   archive_version                      "0"
//   models/model.json                    the program (serde/program_json.hpp; schema 8.20, torch 2.13's)
//   data/weights/weight_<i>              raw bytes of one storage (shared storage written once)
//   data/weights/model_weights_config.json     {"config": {fqn: PayloadMeta}}
//   data/constants/tensor_<i>, data/constants/model_constants_config.json
//   data/sample_inputs/model.pt          example inputs, torch.save'd (args, kwargs); always
//                                        there (torch's loader reads it), empty when not asked
//
// The zip is written by LibTorch's PyTorchStreamWriter (records stored, 64-byte aligned, under
// an `archive/` root folder, which torch's reader strips as it strips its own) and read with its
// PyTorchStreamReader after xport's own bounds check of the central directory; weights are read
// straight into fresh tensor storage, or, with `load_options::mmap`, are read-only views of the
// mapped file (serde/mapped_file.hpp). Loading never runs anything from the file.

#include <algorithm>    // std::find, std::stable_sort
#include <cctype>       // std::isalpha
#include <cstdio>       // std::FILE
#include <functional>   // std::function
#include <istream>      // std::istream
#include <map>          // std::map
#include <set>          // std::set
#include <memory>       // std::shared_ptr
#include <ostream>      // std::ostream
#include <string>       // std::string
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <caffe2/serialize/file_adapter.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/versions.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <ATen/core/ivalue.h>
#include <c10/macros/Export.h>
#include <torch/csrc/jit/serialization/pickler.h>

// #include <xport/config.hpp>
// #include <xport/ops/op_sets.hpp>
// #include <xport/serde/mapped_file.hpp>
// xport/serde/mapped_file.hpp: a .pt2 file mapped read-only, and tensors that are views of it.
//
// `load(path, {.mmap = true})` maps the archive once (PROT_READ, MAP_SHARED) and makes each
// weight a tensor whose storage points into the mapping: nothing is copied, and N processes
// that load one file share its pages through the page cache. The mapping lives as long as the
// last tensor that points into it. The pages are mapped read-only, so a write to a mapped
// tensor is refused by the processor: the process gets SIGSEGV, and neither the file nor any
// other process ever sees the write (check is_mapped() before writing a weight). LibTorch's
// own read-only storages (`set_throw_on_mutable_data_ptr`, 2.1+) are not used: some CPU kernels
// (aten::lstm's) read weights through the mutable data pointer, and would be refused reads.
// Linux and other POSIX systems only.

#include <cerrno>    // errno
#include <cstdint>   // std::uint64_t
#include <cstring>   // std::strerror
#include <memory>    // std::shared_ptr
#include <string>    // std::string

#include <fcntl.h>     // open
#include <sys/mman.h>  // mmap, munmap
#include <sys/stat.h>  // fstat
#include <unistd.h>    // close

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// A whole file mapped read-only; unmapped when the last owner goes.
class mapped_file {
 public:
  explicit mapped_file(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw load_error("xport.load.open", "cannot open '" + path + "' for reading: " + std::strerror(errno));
    struct ::stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      throw load_error("xport.load.open", "cannot map '" + path + "': it is empty or not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED)
      throw load_error("xport.load.mmap", "cannot map '" + path + "' (" + std::strerror(err) +
                                              "); load it without mmap to read it into memory");
    base_ = static_cast<const unsigned char*>(p);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file() { ::munmap(const_cast<unsigned char*>(base_), size_); }

  [[nodiscard]] const unsigned char* data() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  const unsigned char* base_ = nullptr;
  std::size_t size_ = 0;
};

/// The deleter of a mapped storage: drops its share of the mapping. Its address marks the storages
/// that are mapped (is_mapped).
inline void release_mapping(void* owner) noexcept { delete static_cast<std::shared_ptr<const mapped_file>*>(owner); }

/// A read-only byte storage of `size` bytes at `offset` in `file` (the caller checked the bounds).
inline c10::Storage mapped_storage(const std::shared_ptr<const mapped_file>& file, std::uint64_t offset, std::uint64_t size) {
  void* bytes = const_cast<unsigned char*>(file->data() + offset);
  auto* owner = new std::shared_ptr<const mapped_file>(file);
  c10::DataPtr ptr(bytes, owner, &release_mapping, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<std::size_t>(size), std::move(ptr),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return storage;
}

}  // namespace detail

/// True when `t`'s storage is a view of an archive mapped by `load(path, {.mmap = true})`: its
/// bytes are the file's pages, shared with every process that maps the file, and read-only.
inline bool is_mapped(const at::Tensor& t) {
  return t.defined() && t.has_storage() && t.storage().data_ptr().get_deleter() == &detail::release_mapping;
}

XPORT_END_NAMESPACE
// #include <xport/serde/program_json.hpp>

// LibTorch's unpickler (torch/csrc/jit/serialization/pickle.h, same in 1.13 and 2.x), declared
// here: its header pulls in the whole JIT IR, against the narrow-headers rule.
namespace torch::jit {
TORCH_API c10::IValue pickle_load(const std::vector<char>& data);
}  // namespace torch::jit


XPORT_BEGIN_NAMESPACE

struct save_options {
  /// The model's name inside the archive (`models/<name>.json`); torch.export.save uses "model".
  std::string model_name = "model";
  /// Write the example inputs kept on the program into `data/sample_inputs/<name>.pt` as torch
  /// does, `(args, kwargs)` nested as the program's inputs; otherwise that record is empty (as
  /// torch writes it for a program without example inputs).
  bool example_inputs = false;
};

struct load_options {
  std::string model_name = "model";
  /// Read example inputs when the archive has them (parsed by LibTorch's unpickler: only for
  /// files you trust).
  bool example_inputs = false;
  /// Check the rebuilt program with verify() (on by default; a failure is a load_error).
  bool verify = true;
  /// Map the file instead of reading it (`load(path, ...)` only): parameters, buffers and
  /// constants become read-only views of the file's pages (is_mapped() is true for them), so
  /// loading copies no weights and every process that maps one file shares them. The pages are
  /// read-only: a write to a mapped tensor kills the process with SIGSEGV (it never reaches the
  /// file or another process; check is_mapped() first). State the program writes (mutated buffers, BatchNorm's running statistics
  /// in a training-mode program) and records not 64-byte aligned in the file are read into
  /// memory as without mmap. For inference: load without it to train the weights.
  bool mmap = false;
  /// Where the program's tensors go (torch's `map_location`): unset, each tensor goes to the
  /// device it was saved on, as torch.export.load puts it; set, every tensor goes here and the
  /// graph is retargeted (exported_program::to), so a CUDA archive loads on a CPU-only machine.
  std::optional<c10::Device> device;
};

namespace detail {

/// `v` in torch.save's format (a zip of data.pkl and data/<i>), as torch::pickle_save writes it but
/// without the JIT's type tags on dicts and lists (`torch.jit._pickle.restore_type_tag`), which
/// torch.load(weights_only=True), what torch's .pt2 loader tries first, refuses. Dicts and lists
/// come back untyped in C++; tensors as they were.
inline std::vector<char> pickle_bytes(const c10::IValue& v) {
  std::vector<char> pkl;
  torch::jit::Pickler pickler([&](const char* b, std::size_t n) { pkl.insert(pkl.end(), b, b + n); }, nullptr, nullptr,
                              nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(v);
  pickler.stop();
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* d, std::size_t n) {
    out.insert(out.end(), static_cast<const char*>(d), static_cast<const char*>(d) + n);
    return n;
  });
  const auto& tensors = pickler.tensorData();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto data = torch::jit::getWriteableTensorData(tensors[i]);
    w.writeRecord("data/" + std::to_string(i), data.data(), data.sizeInBytes());
  }
  w.writeRecord("data.pkl", pkl.data(), pkl.size());
  w.writeEndOfFile();
  return out;
}

/// The example inputs as torch.save'd `(args, kwargs)`, nested as `in_spec` says (constants
/// included); without a spec, the tensors as positional arguments.
inline c10::IValue example_inputs_ivalue(const std::vector<at::Tensor>& tensors, const std::optional<treespec>& in_spec) {
  c10::impl::GenericDict kwargs(c10::StringType::get(), c10::AnyType::get());
  if (!in_spec) {
    std::vector<c10::IValue> args;
    for (const auto& t : tensors) args.emplace_back(t.cpu());
    return c10::ivalue::Tuple::create({c10::ivalue::Tuple::create(std::move(args)), kwargs});
  }
  std::size_t next = 0;
  const auto build = [&](const auto& self, const treespec& s) -> c10::IValue {
    using K = treespec::kind;
    switch (s.type) {
      case K::leaf:
        if (next >= tensors.size()) throw error("xport.save.example_inputs", "the example inputs are fewer than the program's tensor inputs");
        return tensors[next++].cpu();
      case K::constant: return to_ivalue(s.value, c10::AnyType::get(), [](const value&) { return c10::IValue(); });
      case K::none: return c10::IValue();
      case K::node:  // C++ cannot make the Python type: its children, as a tuple
      case K::tuple: {
        std::vector<c10::IValue> es;
        for (const auto& c : s.children) es.push_back(self(self, c));
        return c10::ivalue::Tuple::create(std::move(es));
      }
      case K::list: {
        c10::impl::GenericList l(c10::AnyType::get());
        for (const auto& c : s.children) l.push_back(self(self, c));
        return l;
      }
      case K::dict: {
        c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
        for (std::size_t i = 0; i < s.children.size(); ++i) d.insert(s.keys[i], self(self, s.children[i]));
        return d;
      }
    }
    return c10::IValue();
  };
  const std::size_t n = in_spec->children.size(), k = std::min(in_spec->num_kwargs, n);
  std::vector<c10::IValue> args;
  for (std::size_t i = 0; i < n; ++i) {
    auto v = build(build, in_spec->children[i]);
    if (i < n - k) args.push_back(std::move(v));
    else kwargs.insert(serde::argument_name(*in_spec, i), std::move(v));
  }
  return c10::ivalue::Tuple::create({c10::ivalue::Tuple::create(std::move(args)), kwargs});
}

/// The tensors of a call `(args, kwargs)` (as torch.save'd example inputs hold it), in the order
/// of the program's inputs, `in_spec` (without one: the tensors of args, in order); what does
/// not fit the spec is a load_error naming `record`.
inline std::vector<at::Tensor> inputs_of_call(const c10::IValue& v, const std::optional<treespec>& in_spec,
                                              const std::string& record) {
  const auto fail = [&](const std::string& what) -> void { throw load_error("xport.load.sample_inputs", record + ": " + what); };
  if (!v.isTuple() || v.toTupleRef().elements().size() != 2 || !v.toTupleRef().elements()[1].isGenericDict())
    fail("expected a tuple (args, kwargs)");
  const auto& args = v.toTupleRef().elements()[0];
  const auto kwargs = v.toTupleRef().elements()[1].toGenericDict();
  std::vector<at::Tensor> out;
  if (!in_spec) {
    const auto visit = [&](const auto& self, const c10::IValue& x, int depth) -> void {
      if (depth > 32) fail("nested too deeply");
      if (x.isTensor()) out.push_back(x.toTensor());
      else if (x.isTuple())
        for (const auto& e : x.toTupleRef().elements()) self(self, e, depth + 1);
      else if (x.isList())
        for (const auto& e : x.toListRef()) self(self, e, depth + 1);
    };
    visit(visit, args, 0);
    return out;
  }
  // the spec's depth is bounded by the JSON nesting limit
  const auto take = [&](const auto& self, const treespec& s, const c10::IValue& x) -> void {
    using K = treespec::kind;
    switch (s.type) {
      case K::leaf:
        if (!x.isTensor()) fail("expected a tensor where the program takes one, got " + x.tagKind());
        out.push_back(x.toTensor());
        return;
      case K::constant:
      case K::none: return;
      case K::node:  // written by xport as a tuple of its children (a Python object does not unpickle here)
      case K::tuple:
      case K::list: {
        const auto elems = x.isTuple() ? x.toTupleRef().elements().vec() : x.isList() ? x.toListRef().vec() : std::vector<c10::IValue>{};
        if ((!x.isTuple() && !x.isList()) || elems.size() != s.children.size())
          fail("expected a " + (s.type == K::node ? s.short_type_name() + " (as a tuple)" : s.short_type_name()) + " of " +
               std::to_string(s.children.size()));
        for (std::size_t i = 0; i < elems.size(); ++i) self(self, s.children[i], elems[i]);
        return;
      }
      case K::dict: {
        if (!x.isGenericDict()) fail("expected a dict, got " + x.tagKind());
        const auto d = x.toGenericDict();
        for (std::size_t i = 0; i < s.children.size(); ++i) {
          const auto it = d.find(s.keys[i]);
          if (it == d.end()) fail("the dict has no key '" + s.keys[i] + "'");
          self(self, s.children[i], it->value());
        }
        return;
      }
    }
  };
  const std::size_t n = in_spec->children.size(), k = std::min(in_spec->num_kwargs, n);
  if (!args.isTuple() || args.toTupleRef().elements().size() != n - k)
    fail("expected " + std::to_string(n - k) + " positional argument(s)");
  for (std::size_t i = 0; i < n; ++i) {
    if (i < n - k) {
      take(take, in_spec->children[i], args.toTupleRef().elements()[i]);
      continue;
    }
    const auto key = serde::argument_name(*in_spec, i);
    const auto it = kwargs.find(key);
    if (it == kwargs.end()) fail("kwargs have no '" + key + "'");
    take(take, in_spec->children[i], it->value());
  }
  return out;
}

/// Example inputs from `torch.save((args, kwargs))` bytes (see inputs_of_call).
inline std::vector<at::Tensor> unpickle_inputs(const std::string& bytes, const std::string& record,
                                               const std::optional<treespec>& in_spec) {
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    // e.g. a dataclass input: C++ cannot rebuild a Python object
    throw load_error("xport.load.sample_inputs", record + ": " + first_line(e.what_without_backtrace()) +
                                                     " (load without load_options::example_inputs to skip them)");
  } catch (const std::exception& e) {
    throw load_error("xport.load.sample_inputs", record + ": " + first_line(e.what()));
  }
  return inputs_of_call(v, in_spec, record);
}

}  // namespace detail

namespace detail::serde {

// ---- weights ---------------------------------------------------------------------------------

/// Bytes a strided tensor spans in its storage (from element 0), or nullopt on overflow.
inline std::optional<std::uint64_t> span_bytes(const tensor_meta& m) {
  const std::uint64_t item = c10::elementSize(m.dtype);
  std::uint64_t last = static_cast<std::uint64_t>(m.storage_offset.hint());
  for (std::size_t i = 0; i < m.sizes.size(); ++i) {
    const auto n = static_cast<std::uint64_t>(m.sizes[i].hint());
    if (n == 0) return 0;
    std::uint64_t step = 0;
    if (__builtin_mul_overflow(n - 1, static_cast<std::uint64_t>(m.strides[i].hint()), &step) ||
        __builtin_add_overflow(last, step, &last))
      return std::nullopt;
  }
  std::uint64_t bytes = 0;
  if (__builtin_add_overflow(last, std::uint64_t{1}, &last) || __builtin_mul_overflow(last, item, &bytes)) return std::nullopt;
  return bytes;
}

/// The bytes of `storage` in host memory: the storage itself on the CPU, else one copy of the
/// whole storage (not of a view of it: the record must hold every element its views reach).
/// `copy` forces the copy on the CPU too (the path device storages take, tested without one).
inline at::Tensor host_bytes(const c10::Storage& storage, c10::Device device, bool copy = false) {
  const auto n = static_cast<std::int64_t>(storage.nbytes());
  at::Tensor bytes = at::empty({0}, at::TensorOptions().dtype(c10::kByte).device(device));
  bytes.set_(storage, 0, {n}, {1});
  return device.is_cpu() && !copy ? bytes : bytes.to(c10::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

/// Whether `t` holds a Python type C++ cannot make (Note [Pytree node types]): a node, or a dict
/// or list of a type of its own.
inline bool has_node_type(const treespec& t) {
  if (!t.type_name.empty()) return true;
  for (const auto& c : t.children)
    if (has_node_type(c)) return true;
  return false;
}

/// Set (per thread) by tests to send CPU storages through host_bytes' copy, the path a device's
/// storages take: the suite covers it on machines without one.
inline bool& force_host_copy() {
  thread_local bool on = false;
  return on;
}

/// Writes each storage once, whatever its device: tensors are keyed by their own storage (never
/// by a temporary host copy, whose address the next copy may reuse), so views of one storage,
/// tied weights among them, share one record, as torch writes them and reads them back.
struct payload_writer {
  caffe2::serialize::PyTorchStreamWriter& w;
  std::string dir, prefix;
  std::map<const c10::StorageImpl*, std::string> written;  ///< the tensor's own storage -> record
  std::size_t next = 0;
  bool copy_to_host = false;  ///< copy CPU storages too (tests of the device path)

  json add(const std::string& fqn, const at::Tensor& t, bool is_param) {
    if (t.layout() != c10::kStrided)
      throw error("xport.save.layout", "tensor '" + fqn + "' is not strided; only strided tensors can be saved");
    if (!t.has_storage())
      throw error("xport.save.storage", "tensor '" + fqn + "' on " + t.device().str() +
                                            " has no storage to write; move it to a device with memory first");
    const auto& storage = t.storage();
    auto it = written.find(storage.unsafeGetStorageImpl());
    if (it == written.end()) {
      const std::string name = prefix + std::to_string(next++);
      const at::Tensor bytes = host_bytes(storage, t.device(), copy_to_host);
      w.writeRecord(dir + name, bytes.data_ptr(), storage.nbytes());
      it = written.emplace(storage.unsafeGetStorageImpl(), name).first;
    }
    auto meta = tensor_meta::of(t);  // offset and strides into the storage, on the tensor's device
    meta.requires_grad = t.requires_grad();
    return {{"path_name", it->second}, {"is_param", is_param}, {"use_pickle", false}, {"tensor_meta", tensor_meta_json(meta)}};
  }
};

/// Where read_payloads puts a record's bytes: fresh memory, or a view of the mapped file for
/// records aligned for it unless an fqn in `copy` (state the program writes) uses it.
struct payload_source {
  std::shared_ptr<const mapped_file> map;  ///< null: read every record into memory
  std::set<std::string> copy;
  std::optional<c10::Device> device;  ///< load_options::device: every tensor there, not where recorded

  [[nodiscard]] bool maps(const zip_record& r) const { return map && r.data_offset % 64 == 0; }
};

/// The fqns of the parameters and buffers the program of `g` and `sig` writes: a mutation output,
/// or (in the training IR) an in-place op on the tensor or on a view of it. Never mapped.
inline std::set<std::string> written_state(const graph& g, const graph_signature& sig) {
  std::set<std::string> out;
  for (const auto& spec : sig.output_specs)
    if ((spec.kind == output_kind::buffer_mutation || spec.kind == output_kind::parameter_mutation) && spec.target)
      out.insert(*spec.target);
  std::map<const void*, std::string> state_of;  // value -> the state tensor it aliases
  const auto phs = g.placeholders();
  for (std::size_t i = 0; i < phs.size() && i < sig.input_specs.size(); ++i) {
    const auto& spec = sig.input_specs[i];
    if ((spec.kind == input_kind::parameter || spec.kind == input_kind::buffer) && spec.target)
      state_of[phs[i].output(0).impl()] = *spec.target;
  }
  for (auto n : g.nodes()) {
    if (!n.is_call()) continue;
    const auto args = n.args();
    // batch_norm(input, weight, bias, running_mean, running_var, training, ...) writes the
    // statistics in training without saying so in its schema
    if (is_batch_norm_op(n.op().name) && args.size() > 5 && args[5].is_bool() && args[5].as_bool())
      for (std::size_t i : {3, 4})
        args[i].for_each_value([&](const value& v) {
          if (const auto it = state_of.find(v.impl()); it != state_of.end()) out.insert(it->second);
        });
    if (!(n.op().is_mutable || n.op().is_view)) continue;
    const auto& params = n.op().schema().arguments();
    for (std::size_t i = 0; i < args.size() && i < params.size(); ++i) {
      const auto* alias = params[i].alias_info();
      if (!alias) continue;
      args[i].for_each_value([&](const value& v) {
        const auto it = state_of.find(v.impl());
        if (it == state_of.end()) return;
        const std::string fqn = it->second;
        if (alias->isWrite()) out.insert(fqn);
        for (const auto& r : n.outputs()) state_of[r.impl()] = fqn;  // a view or the written tensor
      });
    }
  }
  return out;
}

/// The bytes of record `rec` as a flat byte tensor: a view of the mapping or a fresh copy.
inline at::Tensor record_bytes(const zip_index& zip, const zip_record& r, const std::string& rec, bool mapped,
                               const payload_source& source) {
  if (mapped)
    return at::empty({0}, at::TensorOptions().dtype(c10::kByte))
        .set_(mapped_storage(source.map, r.data_offset, r.size), 0, {static_cast<std::int64_t>(r.size)}, {1});
  at::Tensor bytes = at::empty({static_cast<std::int64_t>(r.size)}, at::TensorOptions().dtype(c10::kByte));
  zip.read_exact(r.data_offset, bytes.data_ptr(), static_cast<std::size_t>(r.size), rec);
  return bytes;
}

/// A record's bytes on `device` (where its tensor was recorded, or load_options::device); a
/// device this process cannot use is a load_error that says how to load elsewhere.
inline at::Tensor to_device(const at::Tensor& bytes, c10::Device device, const at_path& entry) {
  try {
    return bytes.to(device);
  } catch (const c10::Error& e) {
    throw load_error("xport.load.device", entry.record + ": " + entry.path + ".tensor_meta.device: the tensor was saved on " +
                                              device.str() + ", which this process cannot use (" +
                                              first_line(e.what_without_backtrace()) +
                                              "); load it elsewhere with load_options::device (torch's map_location), "
                                              "e.g. load_options{.device = at::kCPU}");
  }
}

/// Reads `{"config": {fqn: PayloadMeta}}` and the records it names into `out`.
inline void read_payloads(const zip_index& zip, const std::string& dir, const std::string& config_name,
                          const payload_source& source, tensor_dict& out) {
  const std::string record = dir + config_name;
  if (!zip.find(record)) return;
  const auto doc = parse(zip.read(record), record);
  const at_path root{doc, "", record};
  const auto& config = root["config"].object();
  std::map<std::string, at::Tensor> storages;  // "<record>@<device>" -> flat bytes
  std::set<std::string> copied;                // records of state the program writes: read, not mapped
  if (source.map)
    for (auto it = config.begin(); it != config.end(); ++it)
      if (source.copy.count(it.key()) && it.value().is_object() && it.value().contains("path_name") &&
          it.value()["path_name"].is_string())
        copied.insert(dir + it.value()["path_name"].get<std::string>());
  for (auto it = config.begin(); it != config.end(); ++it) {
    const at_path entry{it.value(), "config." + it.key(), record};
    const std::string fqn = it.key();
    if (entry["use_pickle"].boolean()) entry.fail("pickled payloads are not read by xport (custom objects, tensor subclasses)");
    const auto path = entry["path_name"].str();
    const auto meta_j = entry.get("tensor_meta");
    if (!meta_j) entry.fail("missing tensor_meta");
    const auto meta = tensor_meta_of(*meta_j);
    if (meta.layout != c10::kStrided) entry.fail("only strided tensors are supported");
    if (meta.strides.size() != meta.sizes.size()) entry.fail("needs one stride per size");
    const std::string rec = dir + path;
    const auto* r = zip.find(rec);
    if (!r) entry["path_name"].fail("names record '" + rec + "', which is missing from the archive");
    const auto need = span_bytes(meta);
    if (!need) entry.fail("sizes and strides overflow");
    if (*need > r->size)
      entry.fail(std::string(c10::toString(meta.dtype)) + " tensor of " + meta.annotation() + " needs " +
                 std::to_string(*need) + " bytes but record '" + rec + "' holds " + std::to_string(r->size));
    if (meta.requires_grad && !c10::isFloatingType(meta.dtype) && !c10::isComplexType(meta.dtype))
      entry["tensor_meta"]["requires_grad"].fail(std::string("a ") + c10::toString(meta.dtype) +
                                                 " tensor cannot require grad (only floating-point and complex tensors can)");
    // Every LibTorch call on the way (allocation, set_, requires_grad_) is checked above; one
    // that still refuses the entry is reported at it, never as a raw c10::Error.
    at::Tensor t;
    try {
      const c10::Device device = source.device.value_or(meta.device);
      auto st = storages.find(rec + "@" + device.str());
      if (st == storages.end()) {  // each record read once, and moved to each device once
        auto host = storages.find(rec + "@cpu");
        if (host == storages.end())
          host = storages.emplace(rec + "@cpu", record_bytes(zip, *r, rec, source.maps(*r) && !copied.count(rec), source)).first;
        st = device.is_cpu() ? host : storages.emplace(rec + "@" + device.str(), to_device(host->second, device, entry)).first;
      }
      t = at::empty({0}, at::TensorOptions().dtype(meta.dtype).device(device));
      t.set_(st->second.storage(), meta.storage_offset.hint(), meta.size_hints(), meta.stride_hints());
      if (meta.requires_grad) t.requires_grad_(true);
    } catch (const c10::Error& e) {
      entry.fail("LibTorch cannot make this " + std::string(c10::toString(meta.dtype)) + " tensor of " +
                 meta.annotation() + " from record '" + rec + "': " + first_line(e.what_without_backtrace()));
    }
    (void)entry["is_param"].boolean();  // required by the schema; the signature says what is a parameter
    out.set(fqn, std::move(t));
  }
}

}  // namespace detail::serde

// ---- the API ---------------------------------------------------------------------------------

/// Writes `p` as a .pt2 archive through `writer(bytes, n)` (returns bytes written).
inline void save(const exported_program& p, const std::function<std::size_t(const void*, std::size_t)>& writer,
                 const save_options& options = {}) {
  namespace s = detail::serde;
  c10::NoGradGuard no_grad;
  const std::string doc = s::program_json(p).dump();  // before anything is written: errors leave no file
  caffe2::serialize::PyTorchStreamWriter w(writer);
  w.writeRecord("archive_format", s::archive_format.data(), s::archive_format.size());
  w.writeRecord("archive_version", s::archive_version.data(), s::archive_version.size());
  const auto& sig = p.signature();
  std::unordered_set<std::string> params;
  for (const auto& f : sig.parameters()) params.insert(f);
  s::payload_writer weights{w, "data/weights/", "weight_", {}, 0, s::force_host_copy()};
  s::json wconfig = s::json::object();
  for (const auto& [fqn, t] : p.state_dict()) wconfig[fqn] = weights.add(fqn, t, params.count(fqn) > 0);
  const std::string wtext = s::json{{"config", std::move(wconfig)}}.dump();
  w.writeRecord("data/weights/" + options.model_name + "_weights_config.json", wtext.data(), wtext.size());
  s::payload_writer constants{w, "data/constants/", "tensor_", {}, 0, s::force_host_copy()};
  s::json cconfig = s::json::object();
  for (const auto& [fqn, t] : p.constants()) cconfig[fqn] = constants.add(fqn, t, false);
  const std::string ctext = s::json{{"config", std::move(cconfig)}}.dump();
  w.writeRecord("data/constants/" + options.model_name + "_constants_config.json", ctext.data(), ctext.size());
  w.writeRecord("models/" + options.model_name + ".json", doc.data(), doc.size());
  // always there: torch's loader reads it unconditionally (empty means no example inputs)
  // (torch checks them against the in_spec on load: with a Python type in it, which C++ cannot
  // pickle, the record stays empty)
  std::vector<char> inputs;
  if (options.example_inputs && p.example_inputs() && !(p.in_spec() && s::has_node_type(*p.in_spec())))
    inputs = detail::pickle_bytes(detail::example_inputs_ivalue(*p.example_inputs(), p.in_spec()));
  w.writeRecord("data/sample_inputs/" + options.model_name + ".pt", inputs.data(), inputs.size());
  w.writeEndOfFile();
}

/// Writes `p` to `path` as a .pt2 archive.
inline void save(const exported_program& p, const std::string& path, const save_options& options = {}) {
  // written next to the target and renamed over it at the end: a failed save leaves an existing
  // file as it was
  const std::string tmp = path + ".xport-partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw error("xport.save.open", "cannot open '" + tmp + "' for writing");
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  try {
    // (the zip writer passes a null pointer for empty writes, which fwrite may not take)
    save(p, [&](const void* data, std::size_t n) { return n == 0 ? std::size_t{0} : std::fwrite(data, 1, n, f); }, options);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw error("xport.save.write", "writing '" + path + "' failed");
  }
}

/// Writes `p` to a stream.
inline void save(const exported_program& p, std::ostream& out, const save_options& options = {}) {
  save(p, [&](const void* data, std::size_t n) {
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    return out ? n : std::size_t{0};
  }, options);
}

/// The archive as bytes.
inline std::string save_to_string(const exported_program& p, const save_options& options = {}) {
  std::string out;
  save(p, [&](const void* data, std::size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  }, options);
  return out;
}

/// Reads a program from an archive behind `in`; throws load_error naming the record and the
/// problem for any file that is not a valid archive of a program this LibTorch can run.
namespace detail::serde {
inline exported_program load_archive(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in,
                                     std::shared_ptr<const mapped_file> map, const load_options& options,
                                     std::string& stage);

/// load_archive with every exception that leaves it a load_error: the readers check what they
/// read, and anything LibTorch still refuses (building the graph, its tensors, the sample inputs)
/// is reported with the part of the archive being read.
inline exported_program load_checked(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in,
                                     std::shared_ptr<const mapped_file> map, const load_options& options) {
  std::string stage = "the archive";
  try {
    return load_archive(std::move(in), std::move(map), options, stage);
  } catch (const load_error&) {
    throw;
  } catch (const error& e) {
    throw load_error("xport.load.refused", stage + ": " + e.what());
  } catch (const c10::Error& e) {
    throw load_error("xport.load.refused", stage + ": LibTorch refused it: " + detail::first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw load_error("xport.load.refused", stage + ": " + detail::first_line(e.what()));
  }
}
}  // namespace detail::serde

inline exported_program load(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in, const load_options& options = {}) {
  if (options.mmap)
    throw load_error("xport.load.mmap", "load_options::mmap maps a file: call load(path, options) with the file's "
                                        "path (a reader or a stream is read into memory)");
  return detail::serde::load_checked(std::move(in), nullptr, options);
}

namespace detail::serde {

/// LibTorch's reader of the archive behind `in`, which checks the archive as a whole (and CRCs of what it reads).
inline std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_stream_reader(
    const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& in) {
  try {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(in);
  } catch (const c10::Error& e) {
    throw load_error("xport.load.bad_zip", std::string("not a valid archive: ") + e.what_without_backtrace());
  }
}

/// The bytes of record `name`, which the index must list.
inline std::string record_text(const zip_index& zip, caffe2::serialize::PyTorchStreamReader& reader,
                               const std::string& name) {
  (void)zip.at(name);
  try {
    auto [ptr, size] = reader.getRecord(name);
    return std::string(static_cast<const char*>(ptr.get()), size);
  } catch (const c10::Error& e) {
    throw load_error("xport.load.bad_record", "record '" + name + "': " + e.what_without_backtrace());
  }
}

/// Fails unless the archive's archive_format and archive_version records are the ones xport reads.
inline void check_archive_version(const zip_index& zip, caffe2::serialize::PyTorchStreamReader& reader) {
  const auto format = record_text(zip, reader, "archive_format");
  if (format != archive_format)
    throw load_error("xport.load.format", "record 'archive_format' says '" + format.substr(0, 64) + "', not 'pt2'");
  const auto version = record_text(zip, reader, "archive_version");
  if (version != archive_version)
    throw load_error("xport.load.version", "archive version '" + version.substr(0, 64) +
                                               "' is not the PT2 archive version this xport reads (0)");
}

/// Fails unless the archive has the record `model`, listing the models it has.
inline void check_model_record(const zip_index& zip, const std::string& model) {
  if (zip.find(model)) return;
  std::string models;
  for (const auto& [name, r] : zip.records())
    if (name.rfind("models/", 0) == 0) models += (models.empty() ? "" : ", ") + name;
  throw load_error("xport.load.missing_record", "record '" + model + "' is missing" +
                                                    (models.empty() ? std::string(" (the archive has no models/)") : " (the archive has: " + models + ")"));
}

/// Fails unless every lifted input of `sig` has its tensor in `state` or `constants`.
inline void check_lifted_tensors(const graph_signature& sig, const tensor_dict& state, const tensor_dict& constants,
                                 const load_options& options) {
  for (const auto& spec : sig.input_specs) {
    if (spec.kind == input_kind::user_input || spec.kind == input_kind::token) continue;
    const bool in_state = spec.kind == input_kind::parameter || (spec.kind == input_kind::buffer && spec.persistent.value_or(true));
    if (!spec.target) continue;
    if (!(in_state ? state : constants).contains(*spec.target))
      throw load_error("xport.load.missing_tensor", std::string(in_state ? "data/weights/" : "data/constants/") +
                                                        options.model_name + (in_state ? "_weights_config.json" : "_constants_config.json") +
                                                        ": no tensor for " + std::string(to_string(spec.kind)) + " '" +
                                                        *spec.target + "' (input '" + spec.arg.name + "')");
  }
}

/// Sets the example inputs of `p` from the archive's sample inputs record, when it has a non-empty one.
inline void read_sample_inputs(const zip_index& zip, caffe2::serialize::PyTorchStreamReader& reader,
                               const load_options& options, std::string& stage, exported_program& p) {
  const std::string rec = "data/sample_inputs/" + options.model_name + ".pt";
  stage = "record '" + rec + "'";
  if (const auto* r = zip.find(rec); r && r->size > 0) {
    auto inputs = detail::unpickle_inputs(record_text(zip, reader, rec), rec, p.in_spec());
    std::size_t want = 0;
    for (const auto& s : p.signature().input_specs)
      want += s.kind == input_kind::user_input && s.arg.type != argument_spec::kind::constant;
    if (inputs.size() != want)
      throw load_error("xport.load.sample_inputs", rec + ": holds " + std::to_string(inputs.size()) +
                                                       " tensor(s), the program takes " + std::to_string(want));
    p.set_example_inputs(std::move(inputs));
  }
}

}  // namespace detail::serde

inline exported_program detail::serde::load_archive(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in,
                                                    std::shared_ptr<const mapped_file> map,
                                                    const load_options& options, std::string& stage) {
  namespace s = detail::serde;
  const detail::zip_index zip(*in);
  const auto reader = s::open_stream_reader(in);
  s::check_archive_version(zip, *reader);
  const std::string model = "models/" + options.model_name + ".json";
  s::check_model_record(zip, model);
  stage = "record '" + model + "'";
  const auto doc = s::parse(s::record_text(zip, *reader, model), model);
  auto parts = s::program_of(doc, model);
  tensor_dict state, constants;
  auto copy = map ? s::written_state(parts.g, parts.sig) : std::set<std::string>{};
  const s::payload_source source{std::move(map), std::move(copy), options.device};
  stage = "data/weights/" + options.model_name + "_weights_config.json";
  s::read_payloads(zip, "data/weights/", options.model_name + "_weights_config.json", source, state);
  stage = "data/constants/" + options.model_name + "_constants_config.json";
  s::read_payloads(zip, "data/constants/", options.model_name + "_constants_config.json", source, constants);
  stage = "record '" + model + "'";
  s::check_lifted_tensors(parts.sig, state, constants, options);
  exported_program p(std::move(parts.g), std::move(parts.sig), std::move(state), std::move(constants),
                     std::move(parts.ranges), parts.dialect);
  p.set_call_spec(std::move(parts.in_spec), std::move(parts.out_spec));
  p.set_module_types(std::move(parts.module_types));
  if (options.example_inputs) s::read_sample_inputs(zip, *reader, options, stage, p);
  if (options.device) p.to(*options.device);  // the graph's devices (the tensors are there already)
  stage = "record '" + model + "'";
  if (options.verify) {
    try {
      verify(p);
    } catch (const verify_error& e) {
      throw load_error("xport.load.invalid_program", model + ": the program does not verify: " + e.what());
    }
  }
  return p;
}

/// Reads a program from a .pt2 file (maps it with `options.mmap`).
inline exported_program load(const std::string& path, const load_options& options = {}) {
  if (options.mmap) {
    auto map = std::make_shared<const detail::mapped_file>(path);
    auto in = std::make_shared<caffe2::serialize::MemoryReadAdapter>(map->data(), static_cast<off_t>(map->size()));
    return detail::serde::load_checked(std::move(in), std::move(map), options);
  }
  std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in;
  try {
    in = std::make_shared<caffe2::serialize::FileAdapter>(path);
  } catch (const c10::Error&) {
    throw load_error("xport.load.open", "cannot open '" + path + "' for reading");
  }
  return load(std::move(in), options);
}

/// Reads a program from bytes in memory (copied into the program's tensors; `data` may go).
inline exported_program load_from_memory(const void* data, std::size_t size, const load_options& options = {}) {
  return load(std::make_shared<caffe2::serialize::MemoryReadAdapter>(data, static_cast<off_t>(size)), options);
}

/// Reads a program from a stream (read whole).
inline exported_program load(std::istream& in, const load_options& options = {}) {
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return load_from_memory(bytes.data(), bytes.size(), options);
}

XPORT_END_NAMESPACE

// #include <xport/detail/macro_unscope.hpp>
// xport/detail/macro_unscope.hpp: undefines xport's internal macros at the end of the umbrella
// header. XPORT_BEGIN_NAMESPACE / XPORT_END_NAMESPACE and the version macros stay: they are part
// of the public surface (extensions declare into xport's namespace with them).

#undef XPORT_TORCH_VERSION_AT_LEAST
#undef XPORT_HAS_TORCH_FUNCTIONALIZATION
#undef XPORT_HAS_CONV_BACKEND_SELECTION
