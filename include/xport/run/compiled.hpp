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
#pragma once

#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint32_t
#include <functional>     // std::function
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
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/unbacked.hpp>
#include <xport/ops/call.hpp>
#include <xport/ops/dense_inputs.hpp>
#include <xport/ops/op_sets.hpp>
#include <xport/ops/schema.hpp>
#include <xport/run/guards.hpp>

XPORT_BEGIN_NAMESPACE

class compiled_program {
 public:

  // How one argument is pushed: a pre-boxed constant, a register (copied, or moved when this is
  // its last use), or a list assembled from registers.
  struct arg_op {
    enum class kind : std::uint8_t {
      constant, reg_copy, reg_move, tensor_list, opt_tensor_list, int_list, symbolic,
      symbolic_number, reg_number,  // a size where a Tensor is expected: passed as a wrapped number
      scalar, scalar_number,        // a SymFloat or SymBool (into scalars), as is or wrapped
      any_list  // a generic list: its elements of any kind, nested lists among them (any_list elements)
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
  std::vector<sym_scalar> scalars;           // SymFloat and SymBool arguments, evaluated per call
  std::unordered_set<std::string> unbacked;  // the unbacked symbols a call binds
  std::vector<std::uint32_t> user_slots;     // per tensor user input: its register
  std::vector<std::optional<c10::MemoryFormat>> input_layout;  // per user input (see in_exported_layout)
  std::vector<std::pair<std::uint32_t, c10::IValue>> state_slots;  // the lifted state's registers (tensors, custom objects)
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
      case arg_op::kind::scalar: return detail::scalar_ivalue(scalars[a.index], env.eval(scalars[a.index]));
      case arg_op::kind::scalar_number:
        return detail::wrapped_number(detail::scalar_ivalue(scalars[a.index], env.eval(scalars[a.index])));
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
        case arg_op::kind::scalar:
        case arg_op::kind::scalar_number:
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
        case arg_op::kind::any_list: stack.push_back(take_any_list(regs, env, a.index)); break;
      }
    }
  }

  // The generic list `lists[index]`, its nested lists built in turn.
  c10::IValue take_any_list(std::vector<c10::IValue>& regs, const sym_env& env, std::uint32_t index) const {
    c10::impl::GenericList l(c10::AnyType::get());
    for (const auto& e : lists[index].elems)
      l.push_back(e.type == arg_op::kind::any_list ? take_any_list(regs, env, e.index) : take(regs, env, e));
    return l;
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
    const std::function<void(const arg_op&)> visit_all = [&](const arg_op& a) {
      if (a.type == arg_op::kind::tensor_list || a.type == arg_op::kind::opt_tensor_list || a.type == arg_op::kind::int_list ||
          a.type == arg_op::kind::any_list) {
        for (const auto& e : lists[a.index].elems) visit_all(e);
      } else {
        visit(a);
      }
    };
    for (const auto& a : in.args) visit_all(a);
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
      } else if (spec.kind == input_kind::token) {  // an effect token: an empty tensor, as torch's module makes one
        state_slots.emplace_back(r, at::empty({0}));
      } else if (spec.kind == input_kind::custom_obj) {  // the object itself: its methods change it
        state_slots.emplace_back(r, p.lifted_object(spec));
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
    if (const auto* twin = detail::dense_input_twin(*in.info)) in.op = twin;  // See Note [Kernels that need a dense input]
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
      case form::scalar:
      case form::scalar_number:
        scalars.push_back(a.as_scalar());
        return {f == form::scalar ? arg_op::kind::scalar : arg_op::kind::scalar_number,
                static_cast<std::uint32_t>(scalars.size() - 1)};
      case form::any_list: return compile_any_list(a, reg_op);
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

  // A generic list argument (form any_list): each element a register, a symbol, a constant or a
  // nested generic list.
  template <class RegOp>
  arg_op compile_any_list(const argument& a, RegOp&& reg_op) {
    list_op l;
    for (const auto& e : a.as_list()) {
      if (e.is_value()) {
        l.elems.push_back(reg_op(e.as_value()));
      } else if (e.is_symbolic()) {
        syms.push_back(e.as_sym());
        l.elems.push_back({arg_op::kind::symbolic, static_cast<std::uint32_t>(syms.size() - 1)});
      } else if (e.is_list()) {
        l.elems.push_back(compile_any_list(e, reg_op));
      } else {
        constants.push_back(detail::constant_ivalue(e, c10::AnyType::get()));
        l.elems.push_back({arg_op::kind::constant, static_cast<std::uint32_t>(constants.size() - 1)});
      }
    }
    lists.push_back(std::move(l));
    return {arg_op::kind::any_list, static_cast<std::uint32_t>(lists.size() - 1)};
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
