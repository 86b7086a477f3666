// xport/run/engine.hpp: an inference engine for exported programs. It runs the interpreter's
// compiled code (run/interpreter.hpp: same arguments, same kernels, same guards) and adds what a
// program known ahead of time allows and eager cannot do:
//   * planned memory: every node whose op has an out= kernel of its own for the device writes its
//     result into a slot of an arena; a lifetime analysis over the graph (views extend the life of
//     what they view) lets results that are never alive together share a buffer. Results that
//     leave the run (outputs, and everything they view) are never planned, so a result the caller
//     keeps is never overwritten by the next run.
//   * in-place reuse: a functional op whose first argument is a fresh result used nowhere after it
//     (relu of a matmul's result) runs as its in-place overload (relu_) when the result has that
//     argument's size and dtype, so it allocates nothing; the two then share one lifetime. A
//     `clone` of such a result (dropout in eval mode, in the inference IR) with the same layout is
//     elided: its result is that tensor itself. Any other planned clone copies into the arena.
//   * hoisted views: a view of the program's state (the `permute` of a weight in the inference IR)
//     is made once, when the engine is built, not on every run; a view of a result the arena
//     holds, once per plan (Note [Views made once per plan], run/plan.hpp).
//   * resolved dispatch: the dispatch key set of each node is computed on the first run of a plan
//     and the kernel is called with it directly on later runs (redispatch), under InferenceMode,
//     so neither autograd nor ADInplaceOrView is visited.
//   * parallel branches (`threads` > 1, off by default): a planned run hands the nodes whose
//     inputs are ready to a small pool of threads, so independent branches (an Inception block's
//     four towers) run at once. Every hazard is an edge of the schedule: a node waits for the
//     nodes that made its arguments, a write (in place, into an arena buffer, an op of the graph
//     that mutates) waits for every earlier reader and writer of that memory, and random or
//     effectful ops keep their order; results are identical to a sequential run's.
// The engine runs the interpreter's compiled code (run/compiled.hpp, the contract between the
// two); its parts live beside it: the overload and kernel choices (run/overloads.hpp), the plans,
// their lifetimes and their pool (run/plan.hpp), the parallel schedule (run/schedule.hpp).
// A plan is made per input signature (sizes, strides, dtype, device of every input) on its first
// run, which runs as the interpreter does and records each result's metadata; a dynamic program
// gets one plan per shape it sees, the last `max_plans` signatures kept. Runs from many threads
// are safe: each run takes a plan of its own (another instance is made when all are busy).
#pragma once

#include <algorithm>           // std::max, std::copy
#include <atomic>              // std::atomic
#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t, std::ptrdiff_t
#include <cstdint>             // std::int64_t, std::uint8_t, std::uint32_t
#include <exception>           // std::exception_ptr, std::exception
#include <memory>              // std::unique_ptr, std::shared_ptr
#include <mutex>               // std::mutex, std::unique_lock
#include <optional>            // std::optional
#include <string>              // std::string, std::to_string
#include <utility>             // std::move, std::pair
#include <vector>              // std::vector

#include <ATen/ThreadLocalState.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <c10/core/InferenceMode.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/program.hpp>
#include <xport/ops/auto_functionalize.hpp>
#include <xport/ops/data_dependent.hpp>
#include <xport/run/compiled.hpp>
#include <xport/run/engine_options.hpp>
#include <xport/run/graphs.hpp>
#include <xport/run/interpreter.hpp>
#include <xport/run/overloads.hpp>
#include <xport/run/plan.hpp>
#include <xport/run/schedule.hpp>

XPORT_BEGIN_NAMESPACE

class engine {
 public:
  explicit engine(const exported_program& p, engine_options opts = {}) : interp_(p), opts_(opts), plans_(opts.max_plans) {
    analyze();
    if (opts_.threads > 1) {
      copying_.emplace(compiled().copying());
      pool_ = std::make_unique<detail::branch_pool>(opts_.threads - 1);
    }
  }

  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Runs on the user inputs and returns the user outputs, as interpreter::run does (mutations the
  /// program returns are written back); results are inference tensors.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const {
    // sizes only the data knows (Note [Unbacked symbols]) are bound call by call: no plan
    if (interp_.binds_unbacked()) return interp_.run(inputs, {.check_inputs = opts_.check_inputs, .inference_mode = true});
    const sym_env env = opts_.check_inputs ? interp_.guards().check_and_bind(inputs) : interp_.guards().bind(inputs);
    c10::InferenceMode inference;
    std::vector<at::Tensor> relaid;
    const auto& in = compiled().in_exported_layout(inputs, relaid);
    thread_local std::vector<std::int64_t> key;
    detail::signature_of(in, key);
    auto p = plans_.checkout(key);
    std::vector<c10::IValue> outs;
    if (!p) {
      p = std::make_unique<plan>();
      p->key = key;
      std::vector<std::uint32_t> alias;
      outs = record(in, env, *p, alias);
      make_arena(*p, alias, env);
      plans_.checkin(std::move(p), true);
    } else {
      if (opts_.cuda_graphs && !p->graph_tried) try_capture(in, env, *p);
      outs = p->graph ? replay(in, *p) : execute(in, env, *p);
      plans_.checkin(std::move(p), false);
    }
    return compiled().deliver(outs, inputs);
  }

  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs) const { return run(inputs); }

  /// The plan for `inputs`' signature (made by running once when there is none).
  /// A program with a size only the data knows gets no plan: its info counts the nodes, and
  /// says so in graph_fallback when CUDA graphs were asked for.
  [[nodiscard]] engine_plan_info plan_info(const std::vector<at::Tensor>& inputs) const {
    if (interp_.binds_unbacked()) {
      engine_plan_info info;
      info.nodes = compiled().code.size();
      if (opts_.cuda_graphs) info.graph_fallback = "a size only the data knows (nonzero, item, ...): runs unplanned, no graph";
      return info;
    }
    const auto find = [&]() -> std::optional<engine_plan_info> {
      c10::InferenceMode inference;  // the state run() computes signatures in
      std::vector<at::Tensor> relaid;
      std::vector<std::int64_t> key;
      detail::signature_of(compiled().in_exported_layout(inputs, relaid), key);
      return plans_.info(key);
    };
    if (auto info = find()) return *info;
    (void)run(inputs);
    if (auto info = find()) return *info;
    throw run_error("xport.engine.no_plan", "no plan was kept for these inputs (max_plans is 0?)");
  }

  /// Plans kept now (instances for concurrent runs included).
  [[nodiscard]] std::size_t num_plans() const {
    return plans_.size();
  }

  [[nodiscard]] const interpreter& code() const noexcept { return interp_; }
  /// The compiled code every run executes (run/compiled.hpp).
  [[nodiscard]] const compiled_program& compiled() const noexcept { return interp_.compiled(); }

 private:
  using instr = compiled_program::instr;
  using plan = detail::engine_plan;
  using arg_kind = compiled_program::arg_op::kind;
  static constexpr std::uint32_t none = 0xffffffffu;

  // ---- analysis, once per program ------------------------------------------------------------

  // What each instruction may become (per plan, see make_plan): hoisted, an out= call, an in-place
  // call. A program with a data-dependent size gets neither of the last two.
  void analyze() {
    const auto& code = compiled().code;
    const std::size_t n = code.size();
    out_ops_.assign(n, nullptr);
    in_place_ops_.assign(n, nullptr);
    clone_.assign(n, 0);
    for (const auto& in : code) writes_bases_ = writes_bases_ || !detail::functionalized_bases(compiled(), in).empty();
    hoist();
    bool data_dependent = false;
    for (const auto& in : code) data_dependent = data_dependent || detail::reads_data(*in.info);
    if (data_dependent || !opts_.plan_memory) return;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& in = code[i];
      if (hoisted_[i] || in.op != &in.info->handle || in.outputs.size() != 1) continue;
      out_ops_[i] = detail::out_overload(*in.info);
      const bool self_reg = !in.args.empty() && (in.args[0].type == arg_kind::reg_move || in.args[0].type == arg_kind::reg_copy);
      if (opts_.in_place && self_reg) in_place_ops_[i] = detail::in_place_overload(*in.info);
      clone_[i] = self_reg && in.info->qualified == "aten::clone" ? 1 : 0;
    }
  }

  // Which candidates of plan `p` run in place: the first argument is a result of an earlier call,
  // no view of anything, nothing uses it (or a view of it) later, it is no output, it occurs once
  // among the arguments, and the result has its size, strides and dtype. An elided clone's
  // argument may be a view (of such a result): the clone's result is that view.
  void choose_in_place(plan& p, const std::vector<std::uint32_t>& alias) const {
    const auto& code = compiled().code;
    const auto plain = detail::trace_lifetimes(compiled(), std::vector<std::uint8_t>(code.size(), 0), alias);
    for (std::size_t i = 0; i < code.size(); ++i) {
      if (!p.in_place[i]) continue;
      const auto& in = code[i];
      const auto r = in.args[0].index;
      std::size_t uses = 0;
      compiled().for_each_register_use(in, [&](std::uint32_t u) { uses += u == r ? 1 : 0; });
      const auto root = clone_[i] ? plain.root[r] : r;
      const bool ok = uses == 1 && plain.root[r] == root && plain.def[root] != none && plain.last[root] == i && !plain.pinned[root];
      p.in_place[i] = ok ? 1 : 0;
    }
  }

  // Views of the program's state (and of such views) with constant arguments: made once, here.
  void hoist() {
    const auto& code = compiled().code;
    hoisted_.assign(code.size(), 0);
    std::vector<std::uint8_t> constant(compiled().num_regs, 0);
    for (const auto& [r, t] : compiled().state_slots) constant[r] = 1;
    c10::InferenceMode inference;
    std::vector<c10::IValue> regs(compiled().num_regs);
    for (const auto& [r, t] : compiled().state_slots) regs[r] = t;
    torch::jit::Stack stack;
    for (std::size_t i = 0; i < code.size(); ++i) {
      const auto& in = code[i];
      const auto& op = *in.info;
      if (!op.is_view || op.is_mutable || op.inplace_view || in.op != &op.handle || in.outputs.size() != 1) continue;
      bool ok = true;
      for (const auto& a : in.args)
        ok = ok && (a.type == arg_kind::constant ||
                    ((a.type == arg_kind::reg_copy || a.type == arg_kind::reg_move) && constant[a.index]));
      if (!ok) continue;
      for (const auto& a : in.args) {  // push without moving: the state stays in its register
        if (a.type == arg_kind::constant) stack.push_back(compiled().constants[a.index]);
        else stack.push_back(regs[a.index]);
      }
      try {
        in.op->callBoxed(stack);
      } catch (const c10::Error&) {
        stack.clear();
        continue;  // left to run
      }
      hoisted_[i] = 1;
      if (in.outputs[0] != compiled_program::dead) {
        constant[in.outputs[0]] = 1;
        regs[in.outputs[0]] = stack[0];
        preset_.emplace_back(in.outputs[0], stack[0]);
      }
      stack.clear();
    }
  }

  // ---- plans, per input signature ------------------------------------------------------------

  // The registers at the start of a run: the user inputs, the state, the hoisted views.
  void load_registers(plan& p, const std::vector<at::Tensor>& inputs) const {
    p.regs.resize(compiled().num_regs + p.constants.size());
    std::copy(p.constants.begin(), p.constants.end(), p.regs.begin() + static_cast<std::ptrdiff_t>(compiled().num_regs));
    for (std::size_t i = 0; i < compiled().user_slots.size(); ++i) p.regs[compiled().user_slots[i]] = inputs[i];
    for (const auto& [r, t] : compiled().state_slots) p.regs[r] = t;
    for (const auto& [r, v] : preset_) p.regs[r] = v;
    for (const auto& [r, v] : p.views) p.regs[r] = v;
  }

  // The graph outputs; the registers are emptied (nothing is held between runs).
  std::vector<c10::IValue> unload_registers(plan& p) const {
    auto outs = compiled().graph_outputs(p.regs);
    for (auto& r : p.regs) r = c10::IValue();
    return outs;
  }

  void store_results(const instr& in, plan& p) const {
    detail::take_outputs(p.stack, [&](std::size_t k, c10::IValue&& r) {
      if (k < in.outputs.size() && in.outputs[k] != compiled_program::dead) p.regs[in.outputs[k]] = std::move(r);
    });
    p.stack.clear();
  }

  // Whether a result of instruction i (no view by its schema) shares storage with one of its
  // tensor arguments: then it is a view of that argument's register for this plan (dropout in
  // eval mode returns its argument, unsafe_split views of it); one of an argument that is no
  // register (inside a list) turns planning off for the plan.
  void note_alias(plan& p, std::size_t i, const std::vector<std::pair<const c10::StorageImpl*, std::uint32_t>>& args,
                  std::vector<std::uint32_t>& alias) const {
    const auto check = [&](const at::Tensor& t) {
      if (!t.defined() || !t.has_storage()) return;
      const auto* st = t.storage().unsafeGetStorageImpl();
      for (const auto& [arg, reg] : args) {
        if (arg != st) continue;
        if (reg == none) p.unplannable = true;
        else alias[i] = reg;
      }
    };
    for (const auto& r : p.stack) {  // (unsafe_split returns views of its argument in a list)
      if (r.isTensor()) check(r.toTensor());
      else if (r.isTensorList())
        for (const auto& t : r.toTensorVector()) check(t);
    }
  }

  // Notes the first node whose result is on another device than the inputs' (a CPU op in a CUDA
  // program: no graph can hold it).
  static void note_device(plan& p, const instr& in, const std::optional<c10::Device>& home) {
    if (!home || !p.host_node.empty()) return;
    for (const auto& r : p.stack)
      if (r.isTensor() && r.toTensor().defined() && r.toTensor().device() != *home) {
        p.host_node = in.node_name;
        return;
      }
  }

  // A plan's first run: the interpreter's functional calls, recording each instruction's key set,
  // each candidate's result metadata, and whether an in-place candidate's result is laid out as
  // its first argument.
  std::vector<c10::IValue> record(const std::vector<at::Tensor>& inputs, const sym_env& env, plan& p,
                                 std::vector<std::uint32_t>& alias) const {
    const auto& code = compiled().code;
    p.keys.assign(code.size(), c10::DispatchKeySet());
    p.resolved.assign(code.size(), 0);
    p.in_place.assign(code.size(), 0);
    p.meta.assign(code.size(), detail::result_meta{});
    alias.assign(code.size(), none);
    load_registers(p, inputs);
    p.stack.reserve(compiled().max_args + 4);
    std::optional<c10::Device> home;  // the inputs' device
    for (const auto& t : inputs)
      if (!home && t.defined()) home = t.device();
    for (std::size_t i = 0; i < code.size(); ++i) {
      if (hoisted_[i]) continue;
      const auto& in = code[i];
      compiled().push_arguments(in, p.regs, env, p.stack);
      const bool dense = detail::resolve_keys(*in.info, p.stack, p.keys[i]);
      p.resolved[i] = dense && opts_.resolve_dispatch ? 1 : 0;
      const c10::IValue self = (in_place_ops_[i] || (clone_[i] && opts_.in_place)) && dense ? p.stack[0] : c10::IValue();
      std::vector<std::pair<const c10::StorageImpl*, std::uint32_t>> arg_storage;  // tensor arguments
      for (std::size_t k = 0; k < p.stack.size() && k < in.args.size(); ++k)
        if (p.stack[k].isTensor() && p.stack[k].toTensor().defined() && p.stack[k].toTensor().has_storage())
          arg_storage.emplace_back(p.stack[k].toTensor().storage().unsafeGetStorageImpl(),
                                   in.args[k].type == arg_kind::reg_copy || in.args[k].type == arg_kind::reg_move ? in.args[k].index : none);
      detail::call_op(*in.op, p.stack, [&](const c10::Error& e) { compiled_program::throw_op_failed(in, e); });
      if (!in.info->is_view && !in.info->is_mutable && in.op == &in.info->handle)
        note_alias(p, i, arg_storage, alias);
      note_device(p, in, home);
      if ((out_ops_[i] || clone_[i]) && dense && p.stack.size() == 1) p.meta[i] = detail::meta_of(p.stack[0]);
      if (!self.isNone() && p.stack.size() == 1 && detail::same_layout(p.stack[0], self) &&
          (clone_[i] || own_kernels(i, in_place_ops_[i], p)))
        p.in_place[i] = 1;
      store_results(in, p);
    }
    return unload_registers(p);
  }

  // Whether instruction i's op and `other` are one kernel for plan `p`'s backend (detail::own_kernels).
  bool own_kernels(std::size_t i, const c10::OperatorHandle* other, const plan& p) const {
    return detail::own_kernels(*compiled().code[i].info, *other, p.keys[i].highestPriorityTypeId());
  }

  // Gives every recorded candidate a slot: a buffer no result alive at the same time uses (the
  // smallest free one that fits, else the largest free one grown, else a new one), on its device.
  void make_arena(plan& p, const std::vector<std::uint32_t>& alias, const sym_env& env) const {
    const auto& code = compiled().code;
    if (p.unplannable) {
      p.in_place.assign(code.size(), 0);
      p.meta.assign(code.size(), detail::result_meta{});
    }
    choose_in_place(p, alias);
    p.bases_in_place.assign(code.size(), {});
    if (writes_bases_ && opts_.in_place && !p.unplannable)
      detail::choose_bases_in_place(p, compiled(), detail::trace_lifetimes(compiled(), p.in_place, alias));
    const auto l = detail::trace_lifetimes(compiled(), p.in_place, alias, p.bases_in_place);
    std::vector<std::uint8_t> candidate(code.size(), 0);  // results an out= kernel writes into the arena
    for (std::size_t i = 0; i < code.size(); ++i) {
      const auto r = code[i].outputs.empty() ? compiled_program::dead : code[i].outputs[0];
      candidate[i] = (out_ops_[i] || clone_[i]) && !p.in_place[i] && p.meta[i].bytes > 0 && alias[i] == none &&
                     (clone_[i] || own_kernels(i, out_ops_[i], p)) &&
                     (r == compiled_program::dead || (!l.pinned[r] && l.root[r] == r && l.def[r] == i));
    }
    const auto slot = detail::lay_out_arena(p, compiled(), l, candidate);
    p.info.nodes = code.size();
    for (auto r : p.resolved) p.info.resolved_nodes += r;
    for (std::size_t i = 0; i < code.size(); ++i) (clone_[i] ? p.info.elided_nodes : p.info.in_place_nodes) += p.in_place[i];
    for (auto h : hoisted_) p.info.hoisted_nodes += h;
    detail::make_planned_views(p, compiled(), hoisted_, preset_, env);
    if (pool_) detail::schedule(p, compiled(), p.skip, l, slot, static_cast<std::uint32_t>(p.buffers.size()));
    make_unboxed(p);
  }

  // Each resolved instruction's typed call, as plan `p` makes it (Note [Unboxed planned calls]).
  void make_unboxed(plan& p) const {
    const auto& code = compiled().code;
    p.unboxed.assign(code.size(), detail::unboxed_call{});
    p.constants.clear();
    for (std::size_t i = 0; i < code.size(); ++i) {
      if (clone_[i] && (p.in_place[i] || p.out[i].defined())) {  // elided, or a copy into the arena
        p.unboxed[i] = detail::make_clone(code[i], p.in_place[i] != 0, p.resolved[i] != 0);
        continue;
      }
      if (p.skip[i] || !p.resolved[i] || !p.bases_in_place[i].empty()) continue;
      const c10::OperatorHandle* op = p.out[i].defined() ? out_ops_[i] : p.in_place[i] ? in_place_ops_[i] : code[i].op;
      p.unboxed[i] = detail::make_unboxed(compiled(), code[i], *op, p.constants);
      p.info.unboxed_nodes += p.unboxed[i].run ? 1 : 0;
    }
  }

  // ---- captured runs (engine_options::cuda_graphs) ---------------------------------------------

  // Why plan `p` cannot be captured for `inputs`, or "" when it can: every input and every piece
  // of state on one device the backend captures, no result on the CPU, one thread.
  std::string graph_fallback(const std::vector<at::Tensor>& inputs, const plan& p, c10::Device& device) const {
    const auto* backend = detail::installed_graph_backend;
    if (!backend) return "no graph backend: include <xport/cuda_graphs.hpp> (a CUDA build of LibTorch)";
    if (opts_.threads > 1) return "parallel branches (threads > 1) are not captured";
    std::optional<c10::Device> seen;
    const auto check = [&](const at::Tensor& t, const std::string& what) -> std::string {
      if (!t.defined()) return "";
      if (!backend->supports(t.device()))
        return what + " is on " + t.device().str() + ": a " + backend->name() + " graph runs " + backend->name() + " tensors only";
      if (seen && *seen != t.device()) return what + " is on " + t.device().str() + ", another on " + seen->str();
      seen = t.device();
      return "";
    };
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (auto why = check(inputs[i], "input " + std::to_string(i)); !why.empty()) return why;
    for (const auto& [r, t] : compiled().state_slots)
      if (t.isTensor())
        if (auto why = check(t.toTensor(), "a state tensor"); !why.empty()) return why;
    if (!seen) return "no tensor input or state gives the device";
    if (!p.host_node.empty()) return "node '" + p.host_node + "' gives a CPU tensor";
    device = *seen;
    return "";
  }

  // Captures plan `p`'s run once (its static inputs are copies of `inputs`); on failure the plan
  // runs without a graph from now on, plan_info saying why.
  void try_capture(const std::vector<at::Tensor>& inputs, const sym_env& env, plan& p) const {
    p.graph_tried = true;
    c10::Device device = c10::kCPU;
    p.info.graph_fallback = graph_fallback(inputs, p, device);
    if (!p.info.graph_fallback.empty()) return;
    p.graph_env.emplace(env);
    auto* pp = &p;  // the plan outlives its graph
    const auto give_up = [&](const std::string& why) {
      p.graph.reset();
      p.graph_outputs.clear();
      p.graph_inputs.clear();
      for (auto& r : p.regs) r = c10::IValue();
      p.stack.clear();
      p.info.graph_fallback = "capture failed: " + why;
    };
    try {
      if (auto why = make_static_inputs(inputs, p); !why.empty()) return give_up(why);
      p.graph = detail::installed_graph_backend->capture(
          device, [this, pp] { pp->graph_outputs = execute(pp->graph_inputs, *pp->graph_env, *pp); });
    } catch (const c10::Error& e) {  // (without LibTorch's backtrace)
      return give_up(e.what_without_backtrace());
    } catch (const std::exception& e) {
      return give_up(e.what());
    }
    p.info.graph = true;
  }

  // Plan `p`'s static inputs, copies of `inputs` with their strides; why not, when one cannot be.
  static std::string make_static_inputs(const std::vector<at::Tensor>& inputs, plan& p) {
    p.graph_inputs.clear();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto& t = inputs[i];
      if (!t.defined()) {
        p.graph_inputs.push_back(t);
        continue;
      }
      auto copy = detail::static_copy(t);
      if (!copy)
        return "input " + std::to_string(i) + " has overlapping elements (strides " + c10::str(t.strides()) +
               "): no static copy keeps them; pass it contiguous (.contiguous())";
      p.graph_inputs.push_back(std::move(*copy));
    }
    return "";
  }

  // A replay of plan `p`'s graph on `inputs`: copied in, replayed, outputs copied out. (Each
  // input has its static copy's strides, the plan's signature: a broadcast one is copied once.)
  std::vector<c10::IValue> replay(const std::vector<at::Tensor>& inputs, plan& p) const {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) detail::without_broadcast(p.graph_inputs[i]).copy_(detail::without_broadcast(inputs[i]));
    p.graph->replay();
    std::vector<c10::IValue> outs;
    outs.reserve(p.graph_outputs.size());
    for (const auto& o : p.graph_outputs) outs.push_back(o.isTensor() && o.toTensor().defined() ? c10::IValue(o.toTensor().clone()) : o);
    return outs;
  }

  // A planned run: out= kernels into the arena, in-place overloads, resolved key sets.
  std::vector<c10::IValue> execute(const std::vector<at::Tensor>& inputs, const sym_env& env, plan& p) const {
    if (pool_ && p.info.parallel_width > 1) return execute_parallel(inputs, env, p);  // (a chain: one by one)
    const auto& code = compiled().code;
    load_registers(p, inputs);
    for (std::size_t i = 0; i < code.size(); ++i) {
      if (p.skip[i]) continue;
      const auto& u = p.unboxed[i];
      if (!u.run) {
        call_planned(compiled(), i, env, p, p.stack);
        continue;
      }
      try {
        u.run(u, p.regs, p.out[i], p.keys[i]);
      } catch (const c10::Error& e) {
        compiled_program::throw_op_failed(code[i], e);  // (the plan is dropped with what it held)
      }
    }
    return unload_registers(p);
  }

  // Instruction i as plan `p` runs it, its arguments pushed by `code` (the interpreter, or its
  // copy that never moves out of a register), its results stored.
  void call_planned(const compiled_program& code, std::size_t i, const sym_env& env, plan& p, torch::jit::Stack& stack) const {
    const auto& in = code.code[i];
    if (clone_[i] && (p.in_place[i] || p.out[i].defined())) {  // elided, or a copy into the arena
      const auto u = detail::make_clone(in, p.in_place[i] != 0, p.resolved[i] != 0);
      u.run(u, p.regs, p.out[i], p.keys[i]);
      return;
    }
    code.push_arguments(in, p.regs, env, stack);
    const c10::OperatorHandle* op = in.op;
    if (p.out[i].defined()) {
      stack.emplace_back(p.out[i]);
      op = out_ops_[i];
    } else if (p.in_place[i]) {
      op = in_place_ops_[i];
    }
    try {
      if (!p.bases_in_place[i].empty()) detail::run_auto_functionalized_v2(stack, p.bases_in_place[i]);
      else if (p.resolved[i]) op->redispatchBoxed(p.keys[i], &stack);
      else op->callBoxed(stack);
    } catch (const c10::Error& e) {
      stack.clear();
      compiled_program::throw_op_failed(in, e);  // (the plan is dropped with what it held)
    }
    detail::take_outputs(stack, [&](std::size_t k, c10::IValue&& r) {
      if (k < in.outputs.size() && in.outputs[k] != compiled_program::dead) p.regs[in.outputs[k]] = std::move(r);
    });
    stack.clear();
  }

  // One parallel run's progress, shared by the caller and the pool's threads that help it.
  struct parallel_run {
    const engine* self;
    plan* p;
    const sym_env* env;
    at::ThreadLocalState tls;  // the caller's dispatch state (InferenceMode, ...), for the helpers
    std::unique_ptr<std::atomic<std::uint32_t>[]> deps, reads;
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<std::uint32_t> ready;
    std::size_t left = 0, busy = 0;
    std::exception_ptr error;
  };

  // Takes ready instructions of `run` until none is left (or one failed), making their successors
  // ready; returns when there is nothing more this thread can do.
  void help(parallel_run& run) const {
    torch::jit::Stack stack;
    std::unique_lock<std::mutex> lock(run.mutex);
    for (;;) {
      run.cv.wait(lock, [&] { return !run.ready.empty() || run.left == 0 || run.error; });
      if (run.left == 0 || run.error) return;
      const auto i = run.ready.back();
      run.ready.pop_back();
      ++run.busy;
      lock.unlock();
      std::exception_ptr failed;
      try {
        call_planned(*copying_, i, *run.env, *run.p, stack);
      } catch (...) {
        failed = std::current_exception();
      }
      compiled().for_each_register_use(compiled().code[i], [&](std::uint32_t r) {
        if (run.reads[r].fetch_sub(1) == 1 && !run.p->keep[r]) run.p->regs[r] = c10::IValue();
      });
      std::size_t woke = 0;
      lock.lock();
      --run.busy;
      if (failed && !run.error) run.error = failed;
      for (auto s : run.p->succ[i])
        if (run.deps[s].fetch_sub(1) == 1) {
          run.ready.push_back(s);
          ++woke;
        }
      --run.left;
      if (run.left == 0 || run.error || woke > 1 || run.busy == 0) run.cv.notify_all();
    }
  }

  std::vector<c10::IValue> execute_parallel(const std::vector<at::Tensor>& inputs, const sym_env& env, plan& p) const {
    load_registers(p, inputs);
    auto run = std::make_shared<parallel_run>();
    run->self = this;
    run->p = &p;
    run->env = &env;
    run->deps = std::make_unique<std::atomic<std::uint32_t>[]>(p.deps.size());
    for (std::size_t i = 0; i < p.deps.size(); ++i) run->deps[i] = p.deps[i];
    run->reads = std::make_unique<std::atomic<std::uint32_t>[]>(p.reads.size());
    for (std::size_t r = 0; r < p.reads.size(); ++r) run->reads[r] = p.reads[r];
    run->ready.assign(p.roots.rbegin(), p.roots.rend());
    for (std::size_t i = 0; i < p.deps.size(); ++i) run->left += p.skip[i] ? 0 : 1;
    for (std::size_t t = 0; t < pool_->size(); ++t)
      pool_->post([run] {  // the run outlives every helper (shared), and the plan every running one
        at::ThreadLocalStateGuard guard(run->tls);
        run->self->help(*run);
      });
    help(*run);
    {  // every helper that took an instruction has finished it
      std::unique_lock<std::mutex> lock(run->mutex);
      run->cv.wait(lock, [&] { return run->busy == 0; });
    }
    if (run->error) {
      for (auto& r : p.regs) r = c10::IValue();
      std::rethrow_exception(run->error);
    }
    return unload_registers(p);
  }

  interpreter interp_;
  engine_options opts_;
  std::vector<const c10::OperatorHandle*> out_ops_;       // per instruction: its out= overload, when plannable
  std::vector<const c10::OperatorHandle*> in_place_ops_;  // per instruction: its in-place overload, when it may run so
  bool writes_bases_ = false;  // an auto_functionalized_v2 call is in the code (Note [Bases written in place])
  std::vector<std::uint8_t> clone_;                       // per instruction: a clone (elided, or copied into the arena)
  std::vector<std::uint8_t> hoisted_;                     // per instruction: made once, in hoist()
  std::vector<std::pair<std::uint32_t, c10::IValue>> preset_;  // registers hoist() filled
  mutable detail::plan_pool plans_;                 // the plans not running now
  std::optional<compiled_program> copying_;        // threads > 1: the code, copying every register it reads
  std::unique_ptr<detail::branch_pool> pool_;      // threads > 1: the helpers (threads - 1)
};

XPORT_END_NAMESPACE
