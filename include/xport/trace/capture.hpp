// xport/trace/capture.hpp: recording ATen ops through the LibTorch dispatcher (non-strict).
// While a capture is active on a thread, a dispatch key (TESTING_ONLY_GenericMode) is switched
// on in that thread's local dispatch state; a boxed fallback registered for it sees every op the
// traced code calls, before autograd and before composite ops decompose, factories included.
// The fallback records a node, runs the op on meta tensors (no data: nothing is computed) and
// hands the meta results back to the traced code. Tensors are tracked by TensorImpl identity;
// parameters and buffers are known by identity and named by their FQN before the run, so the
// module is never modified (in-place ops on its state run on meta shadows).
#pragma once

#include <complex>        // std::complex
#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint64_t
#include <functional>     // std::function
#include <iterator>       // std::make_move_iterator
#include <memory>         // std::make_shared
#include <map>            // std::map
#include <optional>       // std::optional
#include <set>            // std::set
#include <stdexcept>      // std::runtime_error
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/to_ops.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/StringUtil.h>

#include <xport/config.hpp>
#include <xport/ops/aliasing.hpp>
#include <xport/ops/autocast.hpp>
#include <xport/ops/call.hpp>
#include <xport/ops/data_dependent.hpp>
#include <xport/ops/higher_order.hpp>
#include <xport/ops/meta_infer.hpp>
#include <xport/ops/schema.hpp>
#include <xport/error.hpp>
#include <xport/program/builder.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/trace/unbacked.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

class capture;

/// The capture recording on this thread, if any.
inline thread_local capture* active_capture = nullptr;

/// The dispatch key whose fallback records ops.
inline constexpr c10::DispatchKey capture_key = c10::DispatchKey::TESTING_ONLY_GenericMode;

void capture_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

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

/// Whether the capture's fallback is typing a call of an autocast region (autocast_meta_call)
/// rather than recording.
inline thread_local bool autocast_meta_run = false;

/// Types the calls made in the guard's lifetime as autocast does (when `on`): the capture's key
/// is switched back on and its fallback runs autocast_meta_call.
class autocast_meta_scope {
 public:
  explicit autocast_meta_scope(bool on) : on_(on), was_(autocast_meta_run) {
    if (!on_) return;
    ensure_capture_fallback();
    was_included_ = c10::impl::tls_is_dispatch_key_included(capture_key);
    c10::impl::tls_set_dispatch_key_included(capture_key, true);
    was_excluded_ = c10::impl::tls_is_dispatch_key_excluded(capture_key);
    c10::impl::tls_set_dispatch_key_excluded(capture_key, false);
    autocast_meta_run = true;
  }
  ~autocast_meta_scope() {
    if (!on_) return;
    autocast_meta_run = was_;
    c10::impl::tls_set_dispatch_key_excluded(capture_key, was_excluded_);
    c10::impl::tls_set_dispatch_key_included(capture_key, was_included_);
  }
  autocast_meta_scope(const autocast_meta_scope&) = delete;
  autocast_meta_scope& operator=(const autocast_meta_scope&) = delete;

 private:
  bool on_;
  bool was_;
  bool was_included_ = false;
  bool was_excluded_ = false;
};

// An op of the traced code while autocast is on (at::autocast::set_autocast_enabled in the
// model, or export_program called inside an autocast region) is refused: the capture runs ops
// on meta tensors, which autocast does not cast, so the program would compute in the inputs'
// dtype where the code computes in autocast's, a silent wrong result. (A program torch wrote
// with a torch.autocast block loads and runs: its wrap_with_autocast sets the mode itself.)
inline void refuse_autocast(const op_info& op) {
  for (const auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
    if (!autocast_enabled(device)) continue;
    const std::string name = c10::DeviceTypeName(device, /*lower_case=*/true);
    throw export_error("xport.export.autocast",
                       "export: autocast is on for " + name + " (" + std::string(c10::toString(autocast_dtype(device))) +
                           ") while the traced code calls " + op.qualified +
                           ": xport traces on meta tensors, which autocast does not cast, so the program would "
                           "compute in the inputs' dtype where the code computes in autocast's. Way out: write the "
                           "block with xport::autocast(at::k" + std::string(device == c10::DeviceType::CPU ? "CPU" : "CUDA") +
                           ", at::k" + std::string(c10::toString(autocast_dtype(device))) +
                           ", fn, operands), which export captures as torch's wrap_with_autocast, instead of "
                           "switching LibTorch's autocast on");
  }
}

// Makes the call autocast makes of `handle` with the arguments on the stack: the casts its
// kernel makes (to calls) and the call after them, with autocast off for the call's extent.
// `recorded`: both go through the capture's key, so the lowering records them; otherwise they
// run below it (the caller excludes the key), typing only.
inline void call_as_autocast(const c10::OperatorHandle& handle, torch::jit::Stack& stack, c10::Device device,
                             bool recorded) {
  const auto n = handle.schema().arguments().size();
  const torch::jit::Stack args(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
  const auto plan = probe_autocast(handle, args, device, capture_key);
  std::optional<capture_reenabled> recording;
  if (recorded) recording.emplace();
  auto call = replay_autocast(plan, [](const at::Tensor& t, c10::ScalarType d) {
    return at::_ops::to_dtype::call(t, d, false, false, c10::nullopt);
  });
  {
    const autocast_emulation cast_already(false);
    plan.call->callBoxed(call);
  }
  torch::jit::drop(stack, n);
  for (auto& r : call) stack.push_back(std::move(r));
}

/// One capture: the program being built and the tensors the traced code holds.
/// What export knows of the exported module's submodules and their calls through xport::call
/// (Note [Preserved module calls]): each submodule's FQN by identity, which calls keep their
/// signature, the modules being called now (the innermost is the module the nodes recorded now
/// belong to), and the signatures recorded.
class module_call_tracker {
 public:
  /// `containers`: the FQNs of submodules nothing calls (ModuleList, ModuleDict).
  void set_modules(std::unordered_map<const void*, std::string> fqns, std::set<std::string> preserve,
                   std::set<std::string> containers) {
    fqns_ = std::move(fqns);
    preserve_ = std::move(preserve);
    containers_ = std::move(containers);
  }
  [[nodiscard]] bool is_container(const std::string& fqn) const { return containers_.count(fqn) != 0; }
  /// The FQN of submodule `m` (its torch::nn::Module address), or null when export does not know it.
  [[nodiscard]] const std::string* fqn_of(const void* m) const {
    const auto it = fqns_.find(m);
    return it == fqns_.end() ? nullptr : &it->second;
  }
  [[nodiscard]] bool preserves(const std::string& fqn) const { return preserve_.count(fqn) != 0; }
  void enter(std::string fqn) { scope_.push_back(std::move(fqn)); }
  void leave() { scope_.pop_back(); }
  /// The module being called now (innermost), or null at the root.
  [[nodiscard]] const std::string* current() const { return scope_.empty() ? nullptr : &scope_.back(); }
  void add(const std::string& fqn, module_call_signature sig) {
    if (!calls_.emplace(fqn, std::move(sig)).second)
      throw export_error("xport.export.preserve",
                         "preserve_module_call_signature: submodule '" + fqn + "' is called more than once, and a "
                         "preserved boundary is one call's (torch's unflatten swaps that call). Preserve a submodule "
                         "called once, or call a separate instance each time");
  }
  [[nodiscard]] const std::map<std::string, module_call_signature>& calls() const noexcept { return calls_; }

 private:
  std::unordered_map<const void*, std::string> fqns_;
  std::set<std::string> preserve_, containers_;
  std::vector<std::string> scope_;
  std::map<std::string, module_call_signature> calls_;
};

// The number a C++ scalar wrapped into a tensor holds, as an argument.
inline argument wrapped_scalar(const c10::Scalar& s) {
  if (s.isFloatingPoint()) return s.toDouble();
  if (s.isBoolean()) return s.toBool();
  if (s.isComplex()) return std::complex<double>(s.toComplexDouble());
  return s.toLong();
}

// Whether `type` is Any or a list of Any (what a generic list argument is converted as).
inline bool is_any_list(const c10::TypePtr& type) {
  const auto t = unwrap_optional(type);
  return t->kind() == c10::TypeKind::AnyType ||
         (t->kind() == c10::TypeKind::ListType &&
          t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::AnyType);
}

/// The custom objects (torch::class_ instances) a capture met: each one CUSTOM_OBJ input, lifted
/// on its first use under the name torch gives an object that is no attribute (`lifted_custom_<i>`).
struct lifted_objects {
  std::unordered_map<const void*, value> inputs;

  value input_for(program_builder& b, const c10::IValue& obj, bool in_body) {
    if (in_body)
      throw export_error("xport.export.custom_obj", "a custom object (" + obj.type()->str() +
                                                        ") is used inside the body of a control-flow operator (torch.cond, "
                                                        "while_loop, map, scan): xport lifts custom objects at the top level "
                                                        "only; call it outside the body");
    const auto [it, fresh] = inputs.try_emplace(obj.internalToPointer());
    if (fresh) it->second = b.custom_obj("lifted_custom_" + std::to_string(inputs.size() - 1), obj);
    return it->second;
  }
};

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
        user_code_(outer.user_code_),
        sizes_may_vary_(outer.sizes_may_vary_),
        outer_(&outer) {}
  capture(const capture&) = delete;
  capture& operator=(const capture&) = delete;

  [[nodiscard]] program_builder& builder() noexcept { return builder_; }
  [[nodiscard]] c10::Device fake_device() const noexcept { return fake_device_; }
  void set_fake_device(c10::Device d) noexcept { fake_device_ = d; }

  /// Makes the arguments of `op` on top of `stack` what code running on this capture's meta
  /// tensors must see before it runs (a decomposition, an op's composite kernel): a device
  /// argument naming the program's device is the meta device, as a fake tensor reports the
  /// device it stands for. Kernels compare it with their tensors' (`to` returns its input itself
  /// when nothing converts: ops/aliasing.hpp); what the code then records is reported on the
  /// program's device again (see convert).
  void devices_as_code_sees(const op_info& op, torch::jit::Stack& stack) const {
    const auto n = op.schema().arguments().size();
    for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end(); ++it)
      if (it->isDevice() && detail::same_device(it->toDevice(), fake_device_)) *it = c10::Device(c10::kMeta);
  }

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

  /// The outermost capture (this one, outside any subgraph's).
  [[nodiscard]] capture& root() noexcept { return outer_ ? outer_->root() : *this; }
  [[nodiscard]] const capture& root() const noexcept { return outer_ ? outer_->root() : *this; }
  /// The exported module's submodules and their calls (on the root capture).
  [[nodiscard]] module_call_tracker& modules() noexcept { return root().modules_; }

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
  /// Whether the code traced is the user's (export_program), not a program run again: then an
  /// op under autocast is refused (refuse_autocast).
  void set_user_code(bool on) noexcept { user_code_ = on; }

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
    std::vector<c10::IValue> results;
    {
      const autocast_meta_scope autocast_types(autocast_emulated);  // in a strict xport::autocast block
      results = run_meta(op, std::move(meta_args), [&] { return describe_args(op, bound); }, device);
    }
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
    // a lowering inlining an autocast region records autocast's casts, then the op autocast calls
    if (decompose_ && autocast_applies(handle, fake_device_)) return call_as_autocast(handle, stack, fake_device_, /*recorded=*/true);
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
    if (user_code_ && !autocast_emulated) refuse_autocast(op);
    auto args = take_arguments(op, stack);
    if (python_frontend_) fill_python_defaults(op, args);
    check_mutations(op, args);
    const auto detached = detach_state_written_without_grad(op, args);

    auto& results = meta_stack_;
    const auto device = output_device(op, args);
    {
      // in an autocast region C++ code writes, the call is recorded as written and its results
      // are typed as autocast's (Note [Autocast by probe])
      const autocast_meta_scope autocast_types(autocast_emulated && !decompose_);
      run_meta_laid_out(op, results, device, [&] { return describe_args(op, args); });
    }
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
        for (auto& t : ts) {
          const auto v = recorded.output(out_index++);
          if (t.defined()) track(v, t);  // (a None among a higher-order call's results: auto_functionalized's)
        }
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

  // A Tensor?[] argument (index's indices): each element None or a tracked tensor.
  void convert_optional_tensors(const c10::IValue& iv, argument& arg, c10::IValue& meta) {
    argument::list_type items;
    c10::List<c10::optional<at::Tensor>> metas;
    for (const auto& e : iv.toListRef()) {
      const bool absent = e.isNone() || (e.isTensor() && !e.toTensor().defined());
      const auto* tr = absent ? nullptr : &tracked_of(e.toTensor());
      items.emplace_back(tr ? argument(tr->v) : argument(none));
      metas.push_back(tr ? c10::optional<at::Tensor>(tr->meta) : c10::nullopt);
    }
    arg = std::move(items);
    meta = metas;
  }

  // One argument from the dispatcher's stack: the recorded argument and what the meta run gets.
  void convert(const c10::IValue& iv, const c10::TypePtr& type, argument& arg, c10::IValue& meta) {
    if (iv.isObject()) {  // a custom object (torch::class_): a CUSTOM_OBJ input; its methods see it
      arg = objects_.input_for(builder_, iv, outer_ != nullptr);
      meta = iv;
      return;
    }
    if (iv.isTensor()) {
      const auto& t = iv.toTensor();
      if (!t.defined()) {
        arg = none;
        meta = iv;
        return;
      }
      if (!by_impl_.count(t.unsafeGetTensorImpl()) && t.unsafeGetTensorImpl()->is_wrapped_number()) {
        // a C++ scalar the API wrapped into a tensor: record the number, as torch does
        arg = wrapped_scalar(t.item());
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
        unwrap_optional(type)->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::OptionalType)
      return convert_optional_tensors(iv, arg, meta);
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
    if (iv.isList() && !iv.isIntList() && !iv.isDoubleList() && !iv.isBoolList() && is_any_list(type)) {
      argument::list_type items;  // an Any[] (a higher-order call's arguments by name): each element in turn
      c10::impl::GenericList metas(c10::AnyType::get());
      for (const auto& e : iv.toListRef()) {
        argument a;
        c10::IValue m;
        convert(e, c10::AnyType::get(), a, m);
        items.push_back(std::move(a));
        metas.push_back(std::move(m));
      }
      arg = std::move(items);
      meta = std::move(metas);
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

  // The module a node belongs to: the module state it reads says (`layer1.0.conv1.weight` ->
  // `layer1.0.conv1`) when that is inside the module xport::call is calling now, else that
  // module (a relu in `layer1.0`), else none.
  std::string module_path_of(const node& n) const {
    const std::string* calling = root().modules_.current();
    for (std::size_t i = 0; !state_fqn_.empty() && i < n.num_inputs(); ++i)
      if (auto it = state_fqn_.find(n.input(i).impl()); it != state_fqn_.end()) {
        const auto dot = it->second.rfind('.');
        auto path = dot == std::string::npos ? std::string() : it->second.substr(0, dot);
        if (!calling || path.starts_with(*calling + ".") || path == *calling) return path;
        break;
      }
    return calling ? *calling : std::string();
  }

  program_builder builder_;
  c10::Device fake_device_;
  std::unordered_map<const c10::TensorImpl*, tracked> by_impl_;
  std::unordered_map<const value_impl*, at::Tensor> meta_;  // strict front end only
  bool keep_value_meta_ = false;
  decompose_hook decompose_;
  bool python_frontend_ = true;
  bool user_code_ = false;
  std::vector<c10::IValue> originals_, meta_stack_;
  std::unordered_map<const value_impl*, std::string> state_fqn_;
  std::unordered_map<const value_impl*, std::string> lifted_constants_;
  lifted_objects objects_;
  std::unordered_map<const c10::FunctionSchema*, const op_info*> ops_;
  int lifted_constants_count_ = 0;
  std::vector<std::vector<std::int64_t>> input_sizes_;
  std::size_t next_input_ = 0;
  bool sizes_may_vary_ = false;
  capture* outer_ = nullptr;  // the enclosing capture of a subgraph's
  std::vector<value> lifted_;
  std::unordered_map<const value_impl*, std::pair<value, at::Tensor>> from_outer_;  // enclosing capture's value -> input here
  std::unordered_map<std::string, int> subgraphs_;  // kind ("cond", "while_loop") -> subgraphs so far
  module_call_tracker modules_;                      // used on the root capture only
};

/// Note [Module paths of calls]: a call's module is the one whose state it reads, else the one
/// xport::call is calling (capture::module_path_of), so `t(fc1.weight)`, `matmul`,
/// `add_(fc1.bias)` of a C++ Linear would be fc1's, layer's, fc1's: one module entered twice,
/// which torch's unflatten cannot nest. A run of calls that read no state between two calls that
/// do is the innermost called module both of those are in (the matmul is fc1's; the GELU between
/// a Sequential's two Linears is the Sequential's; a ModuleList is called by none), where that is
/// inside the run's own module, so that each module's calls are contiguous.
inline void join_module_runs(capture& cap) {
  const auto shared = [](const std::string& a, const std::string& b) {
    std::size_t end = 0;  // the longest common prefix of whole dotted parts
    for (std::size_t i = 0;; ++i) {
      const bool a_cut = i == a.size() || a[i] == '.', b_cut = i == b.size() || b[i] == '.';
      if (a_cut && b_cut) end = i;
      if (i == a.size() || i == b.size() || a[i] != b[i]) break;
    }
    return a.substr(0, end);
  };
  std::vector<node> between;
  std::string last;
  for (auto n : cap.builder().graph_ref().nodes()) {
    if (!n.is_call()) continue;
    bool reads_state = false;
    for (std::size_t i = 0; i < n.num_inputs() && !reads_state; ++i) reads_state = !cap.state_name(n.input(i)).empty();
    if (!reads_state) {
      between.push_back(n);
      continue;
    }
    const std::string path = n.module_path();
    auto both = shared(path, last);
    while (!both.empty() && cap.modules().is_container(both)) both = both.substr(0, both.rfind('.') == std::string::npos ? 0 : both.rfind('.'));
    if (!both.empty())
      for (auto& b : between)
        if (b.module_path().empty() || both.starts_with(b.module_path() + ".")) b.set_module_path(both);
    between.clear();
    last = path;
  }
}

/// Types a call of an autocast region C++ code writes (see autocast_meta_scope): the casts and
/// the call autocast makes after them run on meta tensors, unrecorded, with autocast off for the
/// call's extent; a call autocast leaves alone runs below the capture's key, which stays on for
/// the calls it makes (a composite op's: autocast reaches them as it does eagerly).
inline void autocast_meta_call(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack& stack) {
  const auto device = active_capture ? active_capture->fake_device() : c10::Device(c10::kCPU);
  if (!autocast_applies(op, device)) {
    op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, capture_key), &stack);
    return;
  }
  const c10::impl::ExcludeDispatchKeyGuard no_capture(capture_key);
  call_as_autocast(op, stack, device, /*recorded=*/false);
}

inline void capture_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  if (active_autocast_probe) {  // a call autocast's kernel makes on stand-ins
    const c10::impl::ExcludeDispatchKeyGuard no_capture(capture_key);
    autocast_probe_takes(op, *stack);
    return;
  }
  if (autocast_meta_run) return autocast_meta_call(op, ks, *stack);
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
