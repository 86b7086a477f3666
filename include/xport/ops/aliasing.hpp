// xport/ops/aliasing.hpp: the operators that may return their input itself, and when they do.
// A schema cannot say it: `to(Tensor(a) self, ...) -> Tensor(a)` annotates a view on an op that
// copies whenever it converts, `contiguous` and `reshape` copy unless the layout allows a view,
// and `dropout(Tensor input, ...) -> Tensor` has no annotation yet returns its input in eval
// mode. Each rule here is the ATen kernel's own test (`to_will_alias`, `is_contiguous`,
// `computeStride`, `_dropout_impl`), decided on a node's tensor metadata, so that whoever must
// know before running (functionalization, lower/functionalize.hpp) makes a write through
// `t = buf.to(...); t.add_(1)` reach the buffer exactly when eager's does. Lowering asks LibTorch
// itself instead (trace/capture.hpp: devices as the code sees them); the engine sees aliasing
// on a plan's first run (run/plan.hpp). tests/test_functional.cpp checks every rule against the
// kernels on real tensors in every layout.
#pragma once

#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t, std::uint8_t
#include <optional>     // std::optional
#include <span>         // std::span
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/TensorUtils.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/WrapDimMinimal.h>

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>
#include <xport/ops/op_sets.hpp>

XPORT_BEGIN_NAMESPACE

/// What a call of an op that may return its input gives back.
enum class returns : std::uint8_t {
  copy,   ///< a new tensor (its own storage)
  input,  ///< its first argument itself (the same tensor)
  view,   ///< a view of its first argument (same storage, other sizes or strides)
};

namespace detail {

/// The ops whose result may or may not alias their first argument, by the rule that decides it.
/// `_to_copy` and `clone` are here as what `to` and `contiguous` become when they copy: always a copy.
inline constexpr std::string_view conversion_ops[] = {"aten::to", "aten::type_as"};
inline constexpr std::string_view reshape_ops[] = {"aten::reshape", "aten::reshape_as", "aten::flatten",
                                                   "aten::unflatten", "aten::view_as"};
inline constexpr std::string_view dropout_ops[] = {"aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
                                                   "aten::feature_alpha_dropout"};
inline constexpr std::string_view at_least_ops[] = {"aten::atleast_1d", "aten::atleast_2d", "aten::atleast_3d"};
inline constexpr std::string_view copy_ops[] = {"aten::_to_copy", "aten::clone"};

/// Whether `name` (`aten::to`, no overload) is an op whose result may be its input or a copy.
constexpr bool is_maybe_alias_op(std::string_view name) {
  return in_set(name, conversion_ops) || in_set(name, reshape_ops) || in_set(name, dropout_ops) ||
         in_set(name, at_least_ops) || in_set(name, copy_ops) || name == "aten::contiguous" ||
         name == "aten::lift_fresh";
}

/// The argument of `op` named `param` in its schema, or nullptr (this overload has none).
inline const argument* named_arg(const op_info& op, std::span<const argument> args, std::string_view param) {
  const auto& params = op.schema().arguments();
  for (std::size_t i = 0; i < params.size() && i < args.size(); ++i)
    if (params[i].name() == param) return &args[i];
  return nullptr;
}

/// A meta tensor laid out as `m` (its strides, at the sizes' hints): what the kernels' layout
/// tests read.
inline at::Tensor layout_probe(const tensor_meta& m) { return m.make_meta(); }

/// ATen's `is_null_or_equal_to(device, self.device())` after `ensure_has_index`: a device with
/// no index names the current one, which xport takes to be index 0.
inline bool same_device(c10::Device asked, c10::Device have) {
  if (asked.type() != have.type()) return false;
  if (asked.has_index() && have.has_index()) return asked.index() == have.index();
  const auto index = asked.has_index() ? asked.index() : have.index();
  return asked.is_cpu() || index <= 0;
}

/// `to_will_alias`: nothing to convert, no copy asked, the memory format kept.
inline returns conversion_result(const op_info& op, std::span<const argument> args, const tensor_meta& self) {
  auto dtype = std::optional<c10::ScalarType>{};
  auto layout = std::optional<c10::Layout>{};
  auto device = std::optional<c10::Device>{};
  if (const auto* other = named_arg(op, args, "other"); other && other->is_value()) {  // to.other, type_as
    const auto& o = other->as_value().meta();
    dtype = o.dtype;
    layout = o.layout;
    device = o.device;
  }
  if (const auto* a = named_arg(op, args, "dtype"); a && a->is_dtype()) dtype = a->as_dtype();
  if (const auto* a = named_arg(op, args, "layout"); a && a->is_layout()) layout = a->as_layout();
  if (const auto* a = named_arg(op, args, "device"); a && a->is_device()) device = a->as_device();
  const auto* copy = named_arg(op, args, "copy");
  const auto* mf = named_arg(op, args, "memory_format");
  const auto format = mf && mf->is_memory_format() ? mf->as_memory_format() : c10::MemoryFormat::Preserve;
  const bool alias = (!dtype || *dtype == self.dtype) && (!layout || *layout == self.layout) &&
                     (!device || same_device(*device, self.device)) && !(copy && copy->is_bool() && copy->as_bool()) &&
                     (format == c10::MemoryFormat::Preserve || layout_probe(self).suggest_memory_format() == format);
  return alias ? returns::input : returns::copy;
}

/// `shape` with its `-1` (if any) inferred from `numel` (at::infer_size's rule, minus its checks:
/// a call the program holds was checked when it was made).
inline std::vector<std::int64_t> with_inferred_dim(std::vector<std::int64_t> shape, std::int64_t numel) {
  std::int64_t known = 1;
  std::size_t infer = shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) infer = i;
    else known *= shape[i];
  }
  if (infer < shape.size()) shape[infer] = known == 0 ? 0 : numel / known;
  return shape;
}

/// The sizes a reshape-like call asks for (`-1` inferred), or nullopt when `self` is kept as it is.
inline std::optional<std::vector<std::int64_t>> reshape_target(const op_info& op, std::span<const argument> args,
                                                               const tensor_meta& self) {
  const auto sizes_of = [](const argument& a) {
    std::vector<std::int64_t> out;
    if (a.is_value()) return a.as_value().meta().size_hints();
    for (const auto& e : a.as_list()) out.push_back(e.is_symbolic() ? e.as_sym().hint() : e.as_int());
    return out;
  };
  auto have = self.size_hints();
  std::int64_t numel = 1;
  for (auto s : have) numel *= s;
  const auto rank = self.dim();
  if (op.name == "aten::reshape") return with_inferred_dim(sizes_of(*named_arg(op, args, "shape")), numel);
  if (op.name == "aten::reshape_as" || op.name == "aten::view_as") return sizes_of(*named_arg(op, args, "other"));
  if (op.name == "aten::flatten") {
    if (rank == 0) return std::vector<std::int64_t>{1};
    const auto start = c10::maybe_wrap_dim(named_arg(op, args, "start_dim")->as_int(), rank);
    const auto end = c10::maybe_wrap_dim(named_arg(op, args, "end_dim")->as_int(), rank);
    if (start == end) return std::nullopt;
    std::vector<std::int64_t> out(have.begin(), have.begin() + start);
    std::int64_t folded = 1;
    for (auto d = start; d <= end; ++d) folded *= have[static_cast<std::size_t>(d)];
    out.push_back(folded);
    out.insert(out.end(), have.begin() + end + 1, have.end());
    return out;
  }
  // unflatten(dim, sizes)
  const auto dim = c10::maybe_wrap_dim(named_arg(op, args, "dim")->as_int(), rank);
  const auto parts = sizes_of(*named_arg(op, args, "sizes"));
  std::vector<std::int64_t> out(have.begin(), have.begin() + dim);
  const auto inner = with_inferred_dim(parts, have[static_cast<std::size_t>(dim)]);
  out.insert(out.end(), inner.begin(), inner.end());
  out.insert(out.end(), have.begin() + dim + 1, have.end());
  return out;
}

}  // namespace detail

/// What a call of `op` with schema-bound `args` returns, where `op` may return its input or a
/// copy by its arguments and its input's layout (detail::is_maybe_alias_op); nullopt for every
/// other op (its schema says: a view op's result aliases, a functional op's does not). Sizes are
/// taken at their hints.
inline std::optional<returns> result_aliasing(const op_info& op, std::span<const argument> args) {
  using namespace detail;
  if (!is_maybe_alias_op(op.name)) return std::nullopt;
  if (in_set(op.name, copy_ops)) return returns::copy;
  if (args.empty() || !args[0].is_value() || args[0].as_value().kind() != value_kind::tensor) return std::nullopt;
  const auto& self = args[0].as_value().meta();
  if (op.name == "aten::lift_fresh") return returns::input;
  if (in_set(op.name, conversion_ops)) return conversion_result(op, args, self);
  if (op.name == "aten::contiguous") {
    const auto* mf = named_arg(op, args, "memory_format");
    const auto format = mf && mf->is_memory_format() ? mf->as_memory_format() : c10::MemoryFormat::Contiguous;
    return layout_probe(self).is_contiguous(format) ? returns::input : returns::copy;
  }
  if (in_set(op.name, dropout_ops)) {  // _dropout_impl: nothing dropped, the input itself
    const auto* p = named_arg(op, args, "p");
    const auto* train = named_arg(op, args, "train");
    std::int64_t numel = 1;
    for (auto s : self.size_hints()) numel *= s;
    const bool drops = train && train->is_bool() && train->as_bool() && p && p->is_double() && p->as_double() != 0;
    return drops && numel != 0 ? returns::copy : returns::input;
  }
  if (in_set(op.name, at_least_ops)) {  // atleast_Nd: the input when it has N dims, else a view
    const auto n = op.name[op.name.size() - 2] - '0';
    return self.dim() >= n ? returns::input : returns::view;
  }
  const auto target = reshape_target(op, args, self);
  if (!target) return returns::input;
  return at::detail::computeStride(self.size_hints(), self.stride_hints(), *target) ? returns::view : returns::copy;
}

/// result_aliasing of call node `n`.
inline std::optional<returns> result_aliasing(const node& n) {
  if (!n.is_call() || n.op().higher_order) return std::nullopt;
  return result_aliasing(n.op(), n.args());
}

XPORT_END_NAMESPACE
