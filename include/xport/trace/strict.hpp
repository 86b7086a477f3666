// xport/trace/strict.hpp: the strict tracing policy's front end, xport's symbolic tensor type.
// Code written against sym_tensor (or as a template over the tensor type, so the same source
// also runs on at::Tensor) records each op as it is called, with the std::source_location of the
// user's line: printed as torch prints `# File: model.cpp:12 in forward, code: <line text>`.
// Nothing data-dependent compiles: sym_tensor has no item(), no data pointer, and does not
// convert to bool; each of these is a compile error that says why and what to do instead.
// The functions mirror the at:: API and record the same ATen overloads, so strict and
// non-strict capture give the same IR for the same computation.
#pragma once

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

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/trace/capture.hpp>
#include <xport/trace/tree.hpp>

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
