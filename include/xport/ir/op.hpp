// xport/ir/op.hpp: operators as the graph refers to them.
// An op_info is resolved once per operator overload (name -> c10::OperatorHandle + schema) and
// interned for the life of the process; nodes hold a pointer to it. Lookup accepts
// `aten::add.Tensor`, `aten::add` (the default overload), `aten.add.Tensor`,
// `torch.ops.aten.add.Tensor` and `aten::add.default`. The operators torch calls higher-order
// (`torch.ops.higher_order.cond`, ...) are registered with the dispatcher on their first lookup
// (by the hook ops/higher_order.hpp installs), so that every part of xport treats them as operators.
#pragma once

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

#include <xport/config.hpp>
#include <xport/detail/compat.hpp>
#include <xport/error.hpp>

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
  /// Takes a custom class instance (a `__torch__.torch.classes...` argument, or any class object:
  /// higher_order::call_torchbind). torch orders such calls as effects (_EffectType.ORDERED): the
  /// object may change, so they are never merged, removed or run out of order.
  bool ordered = false;
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
    std::unique_ptr<op_info> op(new op_info{*handle, {}, {}, {}, {}, {}, false, false, false, false, false, false, -1, -1, false, false, {0}});
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
    if (t->kind() == c10::TypeKind::ClassType || t->kind() == c10::TypeKind::AnyClassType) op.ordered = true;
  }
  if (op.ordered) op.is_factory = false;  // (its object's tensors are its inputs)
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
