// xport/ops/dense_inputs.hpp: operators whose kernels require an input dense in its suggested
// memory format, which a program does not guarantee, and the twins xport runs them as.
//
// Note [Kernels that need a dense input]: LibTorch 2.13's CPU `native_group_norm` checks
// `X.is_contiguous(X.suggest_memory_format())`. In eager its composite (`group_norm`) makes X so
// before the call; a program lowered to core ATen calls the kernel directly, on whatever the
// previous op gave. After a `view` of a permuted tensor with a size-1 dim the format is ambiguous
// (`[1, 64, 16, 16]` with strides `(64, 1, 1024, 64)`: diffusers' attention blocks, just before
// their residual GroupNorm) and the kernel refuses it; torch 2.13's own `ep.module()` fails the
// same way, and 2.14's kernel makes X dense itself. The interpreter and the engine run such a call
// as its `xport::` twin (run/compiled.hpp): the same schema, X made dense in its suggested format
// (nothing is copied when it already is), then the op itself, so autograd sees both calls. The
// program keeps the op torch wrote: printing, passes and saving see no difference.
#pragma once

#include <cstddef>        // std::size_t
#include <memory>         // std::make_unique
#include <mutex>          // std::mutex, std::lock_guard
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <xport/config.hpp>
#include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// The ops whose kernels require argument `arg` dense in its suggested memory format.
struct dense_input_op {
  std::string_view op;  ///< qualified name
  std::size_t arg;
};
inline constexpr dense_input_op dense_input_ops[] = {{"aten::native_group_norm", 0}};

/// The twin's kernel: argument `arg` made dense, then the original op.
struct dense_input_kernel final : c10::OperatorKernel {
  dense_input_kernel(c10::OperatorHandle original, std::size_t arg) : original_(std::move(original)), arg_(arg) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const auto n = original_.schema().arguments().size();
    auto& x = (*stack)[stack->size() - n + arg_];
    if (x.isTensor() && x.toTensor().defined() && x.toTensor().layout() == c10::kStrided) {
      const auto& t = x.toTensor();
      x = t.contiguous(t.suggest_memory_format());
    }
    original_.callBoxed(stack);
  }

 private:
  c10::OperatorHandle original_;
  std::size_t arg_;
};

/// The `xport::` twin of `op` when its kernel needs a dense input (registered with the
/// dispatcher on first use, once per process), else nullptr.
inline const c10::OperatorHandle* dense_input_twin(const op_info& op) {
  const dense_input_op* entry = nullptr;
  for (const auto& e : dense_input_ops)
    if (e.op == op.qualified) entry = &e;
  if (!entry) return nullptr;
  static std::mutex mutex;
  static std::unordered_map<std::string, c10::OperatorHandle> twins;
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = twins.find(op.qualified); it != twins.end()) return &it->second;
  auto& d = c10::Dispatcher::singleton();
  const auto name = "xport::" + op.name.substr(op.name.find("::") + 2);
  // the handles live as long as the process: never deregistered
  new c10::RegistrationHandleRAII(d.registerDef(op.schema().cloneWithName(name, op.overload), "xport: dense input twin"));
  const c10::OperatorName twin_name(name, op.overload);
  new c10::RegistrationHandleRAII(d.registerImpl(
      twin_name, c10::DispatchKey::CompositeImplicitAutograd,
      c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<dense_input_kernel>(op.handle, entry->arg)),
      c10::nullopt, nullptr, "xport: " + name + " (its input made dense first)"));
  return &twins.emplace(op.qualified, d.findSchemaOrThrow(name.c_str(), op.overload.c_str())).first->second;
}

}  // namespace detail
XPORT_END_NAMESPACE
