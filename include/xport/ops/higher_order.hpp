// xport/ops/higher_order.hpp: torch's higher-order operators, one descriptor each.
// A higher-order operator (torch.ops.higher_order.cond, .while_loop, .map_impl, .scan,
// .wrap_with_set_grad_enabled, .wrap_with_autocast) takes subgraphs as arguments, or calls
// another operator by name (.auto_functionalized, .auto_functionalized_v2, .with_effects: their
// kernels are in ops/auto_functionalize.hpp; .out_dtype, an operator computed in a wider type
// and cast to one it names; .call_torchbind, a method of a custom object). Each has one
// entry here: its schema as the dispatcher sees it, how torch lays its arguments out in a
// program (a trailing list written spread, as `wrap_with_set_grad_enabled(False, submod_1, x,
// w)`), which operands its subgraphs take (and which one row at a time), how its outputs are
// typed, and its kernel. Verify, print, serde, the tracers, the lowering and the runners look the
// entry up (`hop_of(op)`), never the operator's name. Registered with the dispatcher on first
// lookup (ir/op.hpp calls the hook this header installs).
#pragma once

#include <algorithm>    // std::max
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <functional>   // std::function
#include <map>          // std::map
#include <memory>       // std::make_unique
#include <mutex>        // std::mutex, std::lock_guard
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/class_type.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ops/stack.h>
#include <c10/core/GradMode.h>
#include <c10/core/ScalarType.h>

#include <xport/config.hpp>
#include <xport/detail/compat.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>
#include <xport/ops/auto_functionalize.hpp>

#if XPORT_TORCH_VERSION_AT_LEAST(2, 1)
#include <ATen/ops/_int_mm.h>  // (LibTorch 2.1 and newer)
#endif

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
  enum class id : std::uint8_t {
    cond, while_loop, map, scan, set_grad_enabled, autocast, auto_functionalized, auto_functionalized_v2, with_effects,
    out_dtype, call_torchbind
  };
  /// A parameter of the operator: its name and type in the dispatcher's schema. `op` is an
  /// operator the call names (an `as_operator` argument: its qualified name, a string), `values`
  /// that operator's positional arguments (any, written spread), `kwargs` its keyword arguments
  /// (a list of [name, value] pairs, written `name = value`), `object` a custom class instance
  /// (a CUSTOM_OBJ input).
  struct param {
    std::string_view name;
    enum class type : std::uint8_t { any, boolean, string, dtype, dtype_opt, bool_opt, graph, tensors, op, values, kwargs, object } kind;
  };
  /// How its results are typed: as its first subgraph returns them (cond's true branch), its
  /// last (while_loop's body), map's (each stacked), scan's (carries, then ys stacked), or by
  /// running its kernel on meta tensors (the operators that call an operator by name).
  enum class results : std::uint8_t { first_graph, last_graph, mapped, scanned, by_kernel };

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
  /// It returns one tensor, not a list (out_dtype): torch writes `is_hop_single_tensor_return`
  /// and prints no `[0]` after the call.
  bool single_tensor = false;

  [[nodiscard]] std::string qualified() const { return "higher_order::" + std::string(name); }
  [[nodiscard]] std::string target() const { return "torch.ops.higher_order." + std::string(name); }
  /// The index of each subgraph parameter, in order.
  [[nodiscard]] std::vector<std::size_t> graph_params() const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i].kind == param::type::graph) out.push_back(i);
    return out;
  }
  /// Whether it calls an operator by name, its arguments by keyword (auto_functionalized,
  /// with_effects): printed and written as `(op, *args, name = value, ...)`.
  [[nodiscard]] bool calls_by_name() const {
    for (const auto& p : params)
      if (p.kind == param::type::op) return true;
    return false;
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


/// The operators torch's out_dtype takes (torch/_higher_order_ops/out_dtype.py, ALLOWABLE_OPS).
inline constexpr std::string_view out_dtype_operators[] = {
    "aten::linear", "aten::mm", "aten::conv2d", "aten::convolution", "aten::mul.Tensor", "aten::mul.Scalar",
    "aten::div.Tensor", "aten::div.Scalar"};

/// Why out_dtype may not call `op` (torch's texts), or empty: it takes a functional operator that
/// returns one tensor, one of those torch allows.
inline std::string out_dtype_refusal(const op_info& op) {
  if (op.is_mutable) return "out_dtype's first argument needs to be a functional operator (" + op.qualified + " is not)";
  const auto& returns = op.schema().returns();
  if (returns.size() != 1 || returns[0].type()->kind() != c10::TypeKind::TensorType)
    return "out_dtype's can only apply to ops that return a single tensor (" + op.qualified + " does not)";
  std::string allowed;
  for (const auto name : out_dtype_operators) {
    if (op.qualified == name) return {};
    allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  }
  return "out_dtype only allows the following operators: " + allowed + "; not " + op.qualified;
}

/// The type torch's out_dtype computes in (out_dtype_fallback): the arguments' tensors and
/// numbers and a 1-d tensor of `out` promoted as torch's prims promote (ELEMENTWISE_TYPE_PROMOTION_KIND
/// DEFAULT: the highest category of any of them, then the highest dtype of that category among
/// the tensors that have dimensions), then widened to its computation type (half and bfloat16 to
/// float).
inline at::ScalarType out_dtype_compute_type(const std::vector<c10::IValue>& args, at::ScalarType out) {
  const auto category = [](at::ScalarType t) {
    return t == at::kBool ? 0 : c10::isComplexType(t) ? 3 : c10::isFloatingType(t) ? 2 : 1;
  };
  int highest = category(out);
  std::vector<std::pair<at::ScalarType, bool>> tensors{{out, true}};  // (dtype, has dimensions)
  const std::function<void(const c10::IValue&)> leaf = [&](const c10::IValue& v) {
    if (v.isNone()) return;
    if (v.isTensor()) {
      tensors.emplace_back(v.toTensor().scalar_type(), v.toTensor().dim() > 0);
      highest = std::max(highest, category(v.toTensor().scalar_type()));
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) leaf(e);
    } else if (v.isBool() || v.isInt() || v.isDouble() || v.isComplexDouble()) {
      highest = std::max(highest, v.isBool() ? 0 : v.isInt() ? 1 : v.isDouble() ? 2 : 3);
    } else {
      throw run_error("xport.run.out_dtype", "out_dtype: Unexpected type " + v.tagKind() +
                                                  " when computing elementwise type promotion!");
    }
  };
  for (const auto& a : args) leaf(a);
  if (highest == 0) return at::kBool;
  std::optional<at::ScalarType> dims, zero_dim;
  for (auto [t, has_dims] : tensors) {
    const int c = category(t);
    if (highest == 1 ? c != 1 : c < 2) continue;  // integers; floats (and complex, as complex)
    if (highest == 3 && c == 2) t = c10::toComplexType(t);
    auto& slot = has_dims ? dims : zero_dim;
    slot = slot ? c10::promoteTypes(*slot, t) : t;
  }
  const auto result = dims ? *dims : *zero_dim;  // `out` has dimensions: never empty
  if (result == at::kHalf || result == at::kBFloat16) return at::kFloat;
  return result == at::kComplexHalf ? at::kComplexFloat : result;
}

/// How a higher-order kernel calls the operator it names on meta tensors (while export or
/// load types a call): through xport's shape rules, for operators LibTorch has no Meta kernel
/// for (convolution). Set by ops/meta_infer.hpp, which this header cannot include.
inline void (*call_named_on_meta)(const op_info& op, torch::jit::Stack& stack) = nullptr;

// higher_order::out_dtype(str op, ScalarType output_dtype, Any[] args) -> Tensor: torch's
// out_dtype_dense: int8 x int8 -> int32 mm on CUDA by _int_mm; any other call with its tensors
// cast to the type out_dtype_compute_type gives, its result cast to output_dtype.
inline void out_dtype_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  const auto& op = named_operator(s[s.size() - 3], "out_dtype");
  const auto out = static_cast<at::ScalarType>(s[s.size() - 2].toInt());
  auto args = s.back().toListRef().vec();
  torch::jit::drop(s, 3);
#if XPORT_TORCH_VERSION_AT_LEAST(2, 1)
  if (op.name == "aten::mm" && out == at::kInt && args.size() == 2 && args[0].isTensor() && args[1].isTensor()) {
    const auto &a = args[0].toTensor(), &b = args[1].toTensor();
    if (a.scalar_type() == at::kChar && b.scalar_type() == at::kChar && a.is_cuda() && b.is_cuda()) {
      s.emplace_back(at::_int_mm(a, b));
      return;
    }
  }
#endif
  const auto compute = out_dtype_compute_type(args, out);
  torch::jit::Stack call;
  keyword_args("out_dtype").push_for(op, args, call);  // the defaults of what the call leaves out
  for (auto& v : call)
    if (v.isTensor()) v = v.toTensor().to(compute);
  bool meta = false;
  for (const auto& v : call) meta = meta || (v.isTensor() && v.toTensor().is_meta());
  if (meta && call_named_on_meta) call_named_on_meta(op, call);
  else op.handle.callBoxed(call);
  s.emplace_back(call.at(0).toTensor().to(out));
}

/// The fakes of custom classes' methods (xport::register_fake_method), by "<class>.<method>".
struct fake_methods {
  std::mutex mu;
  std::map<std::string, std::function<at::Tensor(const c10::IValue&, const std::vector<c10::IValue>&)>> by_name;
  static fake_methods& instance() {
    static fake_methods f;
    return f;
  }
};

/// Calls `method` of custom object `obj` (a torch::class_ instance) on `args`: its C++ code runs.
inline c10::IValue call_object_method(const c10::IValue& obj, const std::string& method, std::vector<c10::IValue> args) {
  if (!obj.isObject())
    throw run_error("xport.run.torchbind", "call_torchbind: its first argument is a " + std::string(obj.tagKind()) +
                                               ", not a custom object (a torch::class_ instance)");
  const auto& type = obj.toObjectRef().type();
  auto* fn = type->findMethod(method);
  if (!fn) {
    std::string names;
    for (const auto* m : type->methods()) names += (names.empty() ? "" : ", ") + m->name();
    throw run_error("xport.run.torchbind", "call_torchbind: " + type->name()->qualifiedName() + " has no method '" + method +
                                               "' (its methods: " + (names.empty() ? "none" : names) + ")");
  }
  torch::jit::Stack call;
  call.reserve(args.size() + 1);
  call.push_back(obj);
  for (auto& a : args) call.push_back(std::move(a));
  fn->run(call);
  return call.empty() ? c10::IValue() : std::move(call.back());
}

// higher_order::call_torchbind(AnyClassType obj, str method, Any[] args) -> Tensor: the method of
// a custom object called on the arguments (torch's `self.obj.method(x)` in an exported program).
// xport runs the methods that return one tensor (what torch writes as one as_tensor output).
inline void call_torchbind_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto& s = *stack;
  const auto& packed = s.back();
  std::vector<c10::IValue> args = packed.isList() ? packed.toListRef().vec() : std::vector<c10::IValue>{packed};
  const auto method = s[s.size() - 2].toStringRef();
  const auto obj = s[s.size() - 3];
  torch::jit::drop(s, 3);
  bool fake = false;  // on meta tensors (export traces with them) the method's fake runs instead
  for (const auto& a : args) fake = fake || (a.isTensor() && a.toTensor().is_meta());
  if (fake) {
    const auto cls = obj.isObject() ? obj.toObjectRef().type()->name()->qualifiedName() : std::string(obj.tagKind());
    std::function<at::Tensor(const c10::IValue&, const std::vector<c10::IValue>&)> fn;
    {
      auto& f = fake_methods::instance();
      std::lock_guard<std::mutex> lock(f.mu);
      if (const auto it = f.by_name.find(cls + "." + method); it != f.by_name.end()) fn = it->second;
    }
    if (!fn)
      throw run_error("xport.run.torchbind", "call_torchbind: " + cls + "." + method + " has no fake, which export runs in "
                                                 "place of its C++ code (on meta tensors, leaving the object as it is): "
                                                 "register one with xport::register_fake_method(\"" + cls + "\", \"" + method +
                                                 "\", fn), as torch's register_fake_class gives one in Python");
    s.push_back(fn(obj, args));
    return;
  }
  auto r = call_object_method(obj, method, std::move(args));
  if (!r.isTensor())
    throw run_error("xport.run.torchbind", "call_torchbind: " + obj.toObjectRef().type()->name()->qualifiedName() + "." +
                                               method + " returned a " + std::string(r.tagKind()) +
                                               ": xport runs the methods that return one tensor");
  s.push_back(std::move(r));
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
      {I::auto_functionalized, "auto_functionalized", "auto_functionalized (a custom op that mutates)",
       {{"_mutable_op", T::op}, {"kwargs", T::kwargs}}, false, R::by_kernel, -1, false, &detail::auto_functionalized_kernel},
      {I::auto_functionalized_v2, "auto_functionalized_v2", "auto_functionalized_v2 (a custom op that mutates)",
       {{"_mutable_op", T::op}, {"kwargs", T::kwargs}}, false, R::by_kernel, -1, false,
       &detail::auto_functionalized_v2_kernel},
      {I::with_effects, "with_effects", "with_effects (an op with a side effect)",
       {{"token", T::any}, {"op", T::op}, {"args", T::values}, {"kwargs", T::kwargs}}, false, R::by_kernel, -1, false,
       &detail::with_effects_kernel},
      {I::out_dtype, "out_dtype", "out_dtype (an operator computed into a dtype it names)",
       {{"op", T::op}, {"output_dtype", T::dtype}, {"args", T::values}}, false, R::by_kernel, -1, false,
       &detail::out_dtype_kernel, true},
      {I::call_torchbind, "call_torchbind", "call_torchbind (a method of a custom object)",
       {{"obj", T::object}, {"method", T::string}, {"args", T::values}}, true, R::by_kernel, -1, false,
       &detail::call_torchbind_kernel, true},
  };
  return ops;
}

/// torch's `out_dtype(op, dtype, *args)` for C++ code: operator `op` ("aten::mm", one of
/// those torch allows) called on `args` computed in the type torch promotes them to (int32 for
/// int8 operands into int32, float for half ones), its result cast to `dtype`. Runs eagerly, and
/// non-strict export records one `torch.ops.higher_order.out_dtype` node, as torch.export does:
///
///   auto y = xport::out_dtype("aten::mm", at::kInt, {a_int8, b_int8});  // int32, no overflow
///
/// Throws run_error for an operator out_dtype does not take, with torch's text.
inline at::Tensor out_dtype(std::string_view op, at::ScalarType dtype, std::vector<c10::IValue> args) {
  const auto* target = try_find_op(op);
  if (!target) throw run_error("xport.run.out_dtype", "out_dtype: no operator " + std::string(op) + " is registered");
  if (auto why = detail::out_dtype_refusal(*target); !why.empty()) throw run_error("xport.run.out_dtype", why);
  c10::impl::GenericList list(c10::AnyType::get());
  for (auto& a : args) list.push_back(std::move(a));
  torch::jit::Stack stack{c10::IValue(target->qualified), c10::IValue(static_cast<std::int64_t>(dtype)),
                          c10::IValue(std::move(list))};
  find_op("higher_order::out_dtype").handle.callBoxed(stack);
  return stack.at(0).toTensor();
}

/// Calls `method` of custom object `obj` (a torch::class_ instance, as an IValue:
/// `c10::IValue(c10::make_intrusive<MyClass>(...))`) on `args`, through
/// `torch.ops.higher_order.call_torchbind`: eagerly the method runs; under export it is one
/// call_torchbind node on the object, a CUSTOM_OBJ input of the program, typed by the method's
/// fake (register_fake_method) without running its C++ code:
///
///   auto y = xport::call_method(stats, "update", {x});
///
/// The method must return one tensor.
inline at::Tensor call_method(const c10::IValue& obj, std::string_view method, std::vector<c10::IValue> args) {
  c10::impl::GenericList list(c10::AnyType::get());
  for (auto& a : args) list.push_back(std::move(a));
  torch::jit::Stack stack{obj, c10::IValue(std::string(method)), c10::IValue(std::move(list))};
  find_op("higher_order::call_torchbind").handle.callBoxed(stack);
  return stack.at(0).toTensor();
}

/// Gives `method` of custom class `cls` (its qualified name, `__torch__.torch.classes.ns.Name`)
/// a fake: what it returns computed from the object and its arguments' sizes, dtypes and
/// devices (they are meta tensors), run in its place while export traces (torch's
/// register_fake_class, for C++). It must not change the object.
///
///   xport::register_fake_method("__torch__.torch.classes.ns.Stats", "update",
///       [](const c10::IValue&, const std::vector<c10::IValue>& args) { return at::empty_like(args[0].toTensor()); });
inline void register_fake_method(const std::string& cls, const std::string& method,
                                 std::function<at::Tensor(const c10::IValue& obj, const std::vector<c10::IValue>& args)> fn) {
  auto& f = detail::fake_methods::instance();
  std::lock_guard<std::mutex> lock(f.mu);
  f.by_name[cls + "." + method] = std::move(fn);
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
    if (p.kind == higher_order_op::param::type::dtype) {  // `ScalarType output_dtype`: an int to the dispatcher
      args.emplace_back(std::string(p.name), c10::TypePtr(c10::IntType::get()), c10::TypePtr(c10::ScalarTypeType::get()));
      continue;
    }
    c10::TypePtr t;
    switch (p.kind) {
      case higher_order_op::param::type::any:
      case higher_order_op::param::type::graph: t = c10::AnyType::get(); break;
      case higher_order_op::param::type::boolean: t = c10::BoolType::get(); break;
      case higher_order_op::param::type::string: t = c10::StringType::get(); break;
      case higher_order_op::param::type::dtype:
      case higher_order_op::param::type::dtype_opt: break;  // above
      case higher_order_op::param::type::bool_opt: t = c10::OptionalType::create(c10::BoolType::get()); break;
      case higher_order_op::param::type::tensors: t = c10::ListType::create(c10::TensorType::get()); break;
      case higher_order_op::param::type::op: t = c10::StringType::get(); break;
      case higher_order_op::param::type::object: t = c10::AnyClassType::get(); break;
      case higher_order_op::param::type::values:
      case higher_order_op::param::type::kwargs: t = c10::ListType::create(c10::AnyType::get()); break;
    }
    args.emplace_back(std::string(p.name), std::move(t));
  }
  return c10::FunctionSchema(h.qualified(), "", std::move(args),
                             {c10::Argument("", h.single_tensor ? c10::TypePtr(c10::TensorType::get())
                                                                : c10::TypePtr(c10::ListType::create(c10::TensorType::get())))});
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
