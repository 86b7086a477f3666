// xport/ops/autocast.hpp: autocast's casts, found for tensors autocast does not look at.
// LibTorch's autocast casts only tensors on a real backend (AutocastCPU sees CPU tensors): the
// capture's meta tensors and the lowering's functional ones pass through it uncast. Under an
// autocast region the capture asks LibTorch's own autocast kernel of each op what it would do
// (Note [Autocast by probe]) and does it on its own tensors: recorded where a lowering inlines a
// torch.autocast block (torch's lowering records the casts as `_to_copy` calls), on meta tensors
// only where C++ code writes the block (torch's training IR keeps the body's calls as written).
#pragma once

#include <cstddef>        // std::size_t
#include <optional>       // std::optional
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::move
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ops/higher_order.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

// Note [Autocast by probe]: which arguments autocast casts, and to what, is LibTorch's policy
// (lower-precision ops, float32 ops, promoting ops, an appended dtype), per device and per
// version. Rather than copy its tables, the capture calls the op's Autocast kernel itself on
// stand-ins: empty tensors of the arguments' dtypes on the device the program runs on, which the
// kernel takes as eligible. The kernel's calls come back to the capture's dispatch key: each
// `to(dtype)` is noted (the stand-in it casts, the dtype), and its first other call is the call
// it makes after the casts (the op again, or the overload it redirects to), taken with its
// arguments and then abandoned. The casts are then done on the real operands in the order the
// kernel did them, and that call made with autocast off for its extent, as the kernel excludes
// its own key.

/// Whether the capture applies autocast to the ops it sees (inside an autocast region that
/// C++ code writes or a lowering inlines), by the autocast state LibTorch holds for the device.
inline thread_local bool autocast_emulated = false;

/// Sets autocast_emulated for the guard's lifetime.
class autocast_emulation {
 public:
  explicit autocast_emulation(bool on) : was_(autocast_emulated) { autocast_emulated = on; }
  ~autocast_emulation() { autocast_emulated = was_; }
  autocast_emulation(const autocast_emulation&) = delete;
  autocast_emulation& operator=(const autocast_emulation&) = delete;

 private:
  bool was_;
};

inline c10::DispatchKey autocast_key_of(c10::DeviceType d) {
  return d == c10::DeviceType::CUDA ? c10::DispatchKey::AutocastCUDA : c10::DispatchKey::AutocastCPU;
}

/// Whether autocast changes a call of `op` on tensors of `device` now.
inline bool autocast_applies(const c10::OperatorHandle& op, c10::Device device) {
  if (!autocast_emulated || (!device.is_cpu() && !device.is_cuda()) || !autocast_enabled(device.type())) return false;
  return op.hasKernelForDispatchKey(autocast_key_of(device.type()));
}

/// What an op's Autocast kernel did on stand-ins (Note [Autocast by probe]).
struct autocast_plan {
  struct cast {
    const c10::TensorImpl* from;  ///< the stand-in cast
    c10::ScalarType dtype;
    at::Tensor to;  ///< the stand-in for its result
  };
  std::unordered_map<const c10::TensorImpl*, at::Tensor> operands;  ///< stand-in -> the operand it stands for
  std::vector<cast> casts;                                          ///< in the kernel's order
  std::optional<c10::OperatorHandle> call;                          ///< the call after the casts
  torch::jit::Stack call_args;                                      ///< its arguments (stand-ins)
};

/// The probe running on this thread, if any.
inline thread_local autocast_plan* active_autocast_probe = nullptr;

struct autocast_probe_done {};

/// Maps each tensor of `v` (in lists too) through `f`.
template <class F>
c10::IValue map_ivalue_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isList()) {
    const auto l = v.toList();
    c10::impl::GenericList out(l.elementType());
    for (std::size_t i = 0; i < l.size(); ++i) out.push_back(map_ivalue_tensors(l.get(i), f));
    return out;
  }
  return v;
}

/// Takes a call the Autocast kernel made during a probe (the capture's fallback calls this first,
/// with its own key excluded): a cast is noted and answered with a new stand-in, any other call
/// ends the probe.
inline void autocast_probe_takes(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  auto& plan = *active_autocast_probe;
  const auto& schema = op.schema();
  if (schema.name() == "aten::to" && schema.overload_name() == "dtype") {
    const auto n = schema.arguments().size();
    const auto from = stack[stack.size() - n].toTensor();
    const auto dtype = stack[stack.size() - n + 1].toScalarType();
    auto to = at::empty({0}, from.options().dtype(dtype));
    plan.casts.push_back({from.unsafeGetTensorImpl(), dtype, to});
    torch::jit::drop(stack, n);
    stack.emplace_back(std::move(to));
    return;
  }
  plan.call = op;
  plan.call_args = stack;
  throw autocast_probe_done{};
}

/// Runs `op`'s Autocast kernel for `device` on stand-ins of `args` (Note [Autocast by probe]);
/// `intercept` is the capture's dispatch key, which sees the kernel's calls.
inline autocast_plan probe_autocast(const c10::OperatorHandle& op, const torch::jit::Stack& args, c10::Device device,
                                    c10::DispatchKey intercept) {
  if (device.is_cuda() && !c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
    throw export_error("xport.export.autocast_device",
                       "autocast for cuda: xport finds which arguments of " + op.schema().operator_name().name +
                           " autocast casts by calling LibTorch's AutocastCUDA kernel on empty CUDA tensors, and this "
                           "process has no CUDA. Way out: export or lower the program on a machine with a GPU");
  autocast_plan plan;
  torch::jit::Stack stack;
  // plain tensors throughout: a lowering's functionalization and recording stay out of the probe
  const c10::impl::ExcludeDispatchKeyGuard plain(
      c10::DispatchKeySet({c10::DispatchKey::Functionalize, c10::DispatchKey::Fake, c10::DispatchKey::Python}));
  {
    const c10::impl::ExcludeDispatchKeyGuard own(intercept);
    for (const auto& a : args)
      stack.push_back(map_ivalue_tensors(a, [&](const at::Tensor& t) {
        if (!t.defined()) return t;
        auto s = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(device));
        plan.operands.emplace(s.unsafeGetTensorImpl(), t);
        return s;
      }));
  }
  struct probe_scope {
    autocast_plan* prev = active_autocast_probe;
    bool was_excluded;
    c10::DispatchKey key;
    ~probe_scope() {
      active_autocast_probe = prev;
      c10::impl::tls_set_dispatch_key_excluded(key, was_excluded);
    }
  } scope{active_autocast_probe, c10::impl::tls_is_dispatch_key_excluded(intercept), intercept};
  const c10::impl::IncludeDispatchKeyGuard see(intercept);
  c10::impl::tls_set_dispatch_key_excluded(intercept, false);
  active_autocast_probe = &plan;
  try {
    op.redispatchBoxed(c10::DispatchKeySet(autocast_key_of(device.type())), &stack);
  } catch (const autocast_probe_done&) {
  } catch (const c10::Error& e) {
    throw export_error("xport.export.autocast",
                       "autocast refused " + op.schema().operator_name().name + ": " + first_line(e.what_without_backtrace()));
  }
  if (!plan.call)
    throw export_error("xport.export.autocast", "autocast's kernel of " + op.schema().operator_name().name +
                                                    " made no call xport could follow");
  return plan;
}

/// Does what `plan` found on the operands it stands for: `cast(tensor, dtype)` for each cast in
/// order; returns the arguments of the call after them.
template <class Cast>
torch::jit::Stack replay_autocast(const autocast_plan& plan, Cast&& cast) {
  auto real = plan.operands;
  for (const auto& c : plan.casts) real[c.to.unsafeGetTensorImpl()] = cast(real.at(c.from), c.dtype);
  torch::jit::Stack out;
  for (const auto& a : plan.call_args)
    out.push_back(map_ivalue_tensors(a, [&](const at::Tensor& t) {
      if (!t.defined()) return t;
      const auto it = real.find(t.unsafeGetTensorImpl());
      if (it == real.end())
        throw export_error("xport.export.autocast", "autocast's kernel of " + plan.call->schema().operator_name().name +
                                                        " passed a tensor xport cannot trace back to an operand");
      return it->second;
    }));
  return out;
}

}  // namespace detail
XPORT_END_NAMESPACE
