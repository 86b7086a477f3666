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
#pragma once

#include <cstddef>        // std::size_t
#include <optional>       // std::optional
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::pair
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/program.hpp>
#include <xport/lower/decompose.hpp>
#include <xport/ops/higher_order.hpp>
#include <xport/trace/symbolic.hpp>
#include <xport/program/verify.hpp>

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
  detail::refuse_custom_objs(p, "export_forward_backward");
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
