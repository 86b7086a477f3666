// xport/run/plan.hpp: the engine's plans (run/engine.hpp), one per input signature: what a
// plan records on its first run (each candidate result's metadata, resolved key sets), the
// lifetimes of the registers an arena is laid out by, and the pool that keeps the plans of the
// signatures seen last.
#pragma once

#include <algorithm>  // std::max, std::find
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t, std::uint8_t, std::uint32_t
#include <list>       // std::list
#include <memory>     // std::unique_ptr
#include <mutex>      // std::mutex, std::lock_guard
#include <optional>   // std::optional
#include <string>     // std::string
#include <utility>    // std::pair
#include <vector>     // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <xport/config.hpp>
#include <xport/run/compiled.hpp>
#include <xport/run/graphs.hpp>
#include <xport/run/guards.hpp>
#include <xport/run/unboxed.hpp>

XPORT_BEGIN_NAMESPACE

/// What one plan does (engine::plan_info).
struct engine_plan_info {
  std::size_t nodes = 0;              ///< call nodes in the program
  std::size_t out_variant_nodes = 0;  ///< nodes that write into the arena through an out= kernel
  std::size_t in_place_nodes = 0;     ///< nodes run in place on a result nothing else uses
  std::size_t elided_nodes = 0;       ///< clones of a result nothing uses after them: that result itself
  std::size_t in_place_bases = 0;     ///< bases auto_functionalized_v2 writes itself, not a copy of (dead after the call)
  std::size_t hoisted_nodes = 0;      ///< views of the program's state, made once per engine
  std::size_t planned_views = 0;      ///< views of the arena's results, made once per plan
  std::size_t resolved_nodes = 0;     ///< nodes called with a resolved dispatch key set
  std::size_t unboxed_nodes = 0;      ///< of those, nodes called through their typed kernel (no boxed stack)
  std::size_t arena_buffers = 0;      ///< buffers the arena holds
  std::size_t arena_bytes = 0;        ///< their bytes
  std::size_t planned_bytes = 0;      ///< bytes of all planned results (what eager allocates for them)
  std::size_t parallel_width = 0;     ///< most nodes the schedule can run at once (`threads` > 1), else 0
  bool graph = false;                 ///< runs replay a captured graph (engine_options::cuda_graphs)
  std::string graph_fallback;         ///< why the plan runs without one, when cuda_graphs asked for it
};

namespace detail {

inline constexpr std::uint32_t no_reg = 0xffffffffu;  // no register (or no instruction, no slot)

// A result's metadata, recorded on a plan's first run.
struct result_meta {
  std::vector<std::int64_t> sizes, strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device = c10::kCPU;
  std::size_t bytes = 0;
};

inline bool same_layout(const c10::IValue& a, const c10::IValue& b) {
  if (!a.isTensor() || !b.isTensor()) return false;
  const auto &x = a.toTensor(), &y = b.toTensor();
  return x.defined() && y.defined() && x.layout() == c10::kStrided && y.layout() == c10::kStrided &&
         x.scalar_type() == y.scalar_type() && x.device() == y.device() && x.sizes() == y.sizes() &&
         x.strides() == y.strides() && x.is_non_overlapping_and_dense();
}

inline result_meta meta_of(const c10::IValue& v) {
  result_meta m;
  if (!v.isTensor()) return m;
  const auto& t = v.toTensor();
  if (!t.defined() || t.layout() != c10::kStrided || t.is_quantized()) return m;
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.dtype = t.scalar_type();
  m.device = t.device();
  std::size_t extent = 1;
  for (std::size_t d = 0; d < m.sizes.size(); ++d) {
    if (m.sizes[d] == 0) return result_meta{};  // nothing to plan
    extent += static_cast<std::size_t>((m.sizes[d] - 1) * m.strides[d]);
  }
  m.bytes = extent * t.element_size();
  return m;
}

struct engine_plan {
  std::vector<std::int64_t> key;
  std::vector<c10::DispatchKeySet> keys;  // per instruction, valid where `resolved`
  std::vector<std::uint8_t> resolved;
  std::vector<result_meta> meta;  // per instruction, for out= candidates
  std::vector<at::Tensor> out;    // per instruction: the slot its out= kernel writes (or undefined)
  std::vector<std::uint8_t> in_place;  // per instruction: runs as its in-place overload
  // per instruction (an auto_functionalized_v2 call): per base, whether its kernel may write the
  // base itself (Note [Bases written in place]); empty for the others
  std::vector<std::vector<std::uint8_t>> bases_in_place;
  std::vector<unboxed_call> unboxed;    // per instruction: its typed call, where it has one (run/unboxed.hpp)
  std::vector<c10::IValue> constants;   // the constant tensors typed calls read, in registers num_regs on
  bool unplannable = false;            // an alias the plan cannot follow was seen: plain calls
  std::vector<std::uint8_t> skip;      // per instruction: no part of a run (hoisted, or a planned view)
  std::vector<std::pair<std::uint32_t, c10::IValue>> views;  // the planned views' registers, preset on each run
  std::vector<at::Tensor> buffers;
  std::vector<c10::IValue> regs;  // the registers, kept between runs (empty after each)
  torch::jit::Stack stack;
  engine_plan_info info;
  // the schedule of parallel runs (threads > 1): per instruction its predecessor count and its
  // successors, per register how many argument uses read it (cleared after the last; `keep`:
  // an output, never cleared), and the instructions nothing waits for at the start
  std::vector<std::uint32_t> deps, reads;
  std::vector<std::vector<std::uint32_t>> succ;
  std::vector<std::uint8_t> keep;
  std::vector<std::uint32_t> roots;
  // a captured run (engine_options::cuda_graphs): tried once per plan, on its second run; the
  // graph reads its inputs from `graph_inputs` and leaves its outputs in `graph_outputs`
  bool graph_tried = false;
  std::string host_node;  // a node whose result was on the CPU in a device program (no capture)
  std::unique_ptr<captured_run> graph;
  std::vector<at::Tensor> graph_inputs;
  std::vector<c10::IValue> graph_outputs;
  std::optional<sym_env> graph_env;
};

/// The registers of the bases (`_all_bases`) of instruction `in`, an auto_functionalized_v2 call,
/// no_reg for one that is no register (None); empty for any other instruction.
inline std::vector<std::uint32_t> functionalized_bases(const compiled_program& cp, const compiled_program::instr& in) {
  using kind = compiled_program::arg_op::kind;
  std::vector<std::uint32_t> regs;
  if (in.info->qualified != "higher_order::auto_functionalized_v2" || in.args.size() != 2 || in.args[1].type != kind::any_list)
    return regs;
  for (const auto& pair : cp.lists[in.args[1].index].elems) {
    if (pair.type != kind::any_list) continue;
    const auto& kv = cp.lists[pair.index].elems;
    if (kv.size() != 2 || kv[0].type != kind::constant || !cp.constants[kv[0].index].isString() ||
        cp.constants[kv[0].index].toStringRef() != "_all_bases" || kv[1].type != kind::any_list)
      continue;
    for (const auto& b : cp.lists[kv[1].index].elems)
      regs.push_back(b.type == kind::reg_copy || b.type == kind::reg_move ? b.index : no_reg);
  }
  return regs;
}

// Roots and lifetimes: a view's (or an in-place op's) result has the root of what it aliases, a
// root lives until the last use of any alias (`last`), and a root some graph output or in-place
// op of the graph reaches is `pinned`: never planned. `in_place[i]`: instruction i's result
// aliases its first argument too.
struct lifetimes {
  std::vector<std::uint32_t> root, def, last;
  std::vector<std::uint8_t> pinned;
};

// `in_place[i]`: instruction i runs in place; `alias[i]`: the register instruction i's result
// was seen to alias on the plan's first run (a functional op may return its argument itself,
// as dropout does in eval mode), or `no_reg`; `bases_in_place[i]` (where not empty): the bases
// instruction i writes itself, each new base aliasing the old (Note [Bases written in place]).
inline lifetimes trace_lifetimes(const compiled_program& cp, const std::vector<std::uint8_t>& in_place,
                                 const std::vector<std::uint32_t>& alias,
                                 const std::vector<std::vector<std::uint8_t>>& bases_in_place = {}) {
  const auto& code = cp.code;
  lifetimes l;
  l.root.resize(cp.num_regs);
  for (std::uint32_t r = 0; r < l.root.size(); ++r) l.root[r] = r;
  l.def.assign(cp.num_regs, no_reg);
  l.last.assign(cp.num_regs, 0);
  l.pinned.assign(cp.num_regs, 0);
  for (std::size_t i = 0; i < code.size(); ++i) {
    const auto& in = code[i];
    const auto& op = *in.info;
    std::uint32_t aliased = no_reg;
    if (alias[i] != no_reg) {
      aliased = l.root[alias[i]];
    } else if (op.is_view || op.is_mutable || op.inplace_view || in.op != &op.handle || in_place[i]) {
      // the first argument with an alias annotation (reshape, run for a view, aliases its self)
      const auto& params = op.schema().arguments();
      for (std::size_t k = 0; k < in.args.size() && k < params.size() && aliased == no_reg; ++k) {
        const auto& a = in.args[k];
        if ((params[k].alias_info() || k == 0) && (a.type == compiled_program::arg_op::kind::reg_copy || a.type == compiled_program::arg_op::kind::reg_move))
          aliased = l.root[a.index];
      }
      if (op.is_mutable)
        cp.for_each_register_use(in, [&](std::uint32_t r) { l.pinned[l.root[r]] = 1; });
    }
    cp.for_each_register_use(in, [&](std::uint32_t r) { l.last[l.root[r]] = static_cast<std::uint32_t>(i); });
    for (auto r : in.outputs) {
      if (r == compiled_program::dead) continue;
      if (aliased != no_reg) l.root[r] = aliased;
      else l.def[r] = static_cast<std::uint32_t>(i);
    }
    if (i < bases_in_place.size() && !bases_in_place[i].empty()) {  // the new bases follow the op's results
      const auto bases = functionalized_bases(cp, in);
      const auto first = in.outputs.size() - bases.size();
      for (std::size_t k = 0; k < bases.size(); ++k) {
        const auto r = in.outputs[first + k];
        if (!bases_in_place[i][k] || r == compiled_program::dead) continue;
        l.root[r] = l.root[bases[k]];
        l.def[r] = no_reg;
      }
    }
  }
  for (const auto& o : cp.outputs)
    if (o.is_reg) l.pinned[l.root[o.index]] = 1;
  return l;
}

// Which bases of plan `p`'s auto_functionalized_v2 calls their kernel writes itself (Note [Bases
// written in place]), by lifetimes `l` that know nothing of such writes: a base (or what it is a
// view of) that an earlier call made, no output, read by nothing after the call and by nothing
// else in it (no other argument of the call shares its root). The arena then keeps its slot
// for the new base (trace_lifetimes with the choice).
inline void choose_bases_in_place(engine_plan& p, const compiled_program& cp, const lifetimes& l) {
  p.bases_in_place.assign(cp.code.size(), {});
  for (std::size_t i = 0; i < cp.code.size(); ++i) {
    const auto& in = cp.code[i];
    const auto bases = functionalized_bases(cp, in);
    if (bases.empty()) continue;
    std::vector<std::uint8_t> mask(bases.size(), 0);
    bool any = false;
    for (std::size_t k = 0; k < bases.size(); ++k) {
      if (bases[k] == no_reg) continue;
      const auto root = l.root[bases[k]];
      if (l.def[root] == no_reg || l.last[root] != i || l.pinned[root]) continue;
      std::size_t uses = 0;
      cp.for_each_register_use(in, [&](std::uint32_t u) { uses += l.root[u] == root ? 1 : 0; });
      mask[k] = uses == 1 ? 1 : 0;
      any = any || mask[k] != 0;
      p.info.in_place_bases += mask[k];
    }
    if (any) p.bases_in_place[i] = std::move(mask);
  }
}

// The arena of plan `p`: gives every `candidate` instruction's result a slot, a buffer no result
// alive at the same time uses (the smallest free one that fits, else the largest free one grown,
// else a new one) on its device, and makes the buffers and each result's view of its slot
// (p.out). Returns the slot per instruction (no_reg: none); p.meta is spent.
inline std::vector<std::uint32_t> lay_out_arena(engine_plan& p, const compiled_program& cp, const lifetimes& l,
                                                const std::vector<std::uint8_t>& candidate) {
  const auto& code = cp.code;
  struct buffer {
    std::size_t bytes;
    c10::Device device;
    std::uint32_t busy_until;
  };
  std::vector<buffer> bufs;
  std::vector<std::uint32_t> slot(code.size(), no_reg);
  for (std::size_t i = 0; i < code.size(); ++i) {
    if (!candidate[i]) continue;
    const auto& m = p.meta[i];
    const auto r = code[i].outputs.empty() ? compiled_program::dead : code[i].outputs[0];
    const auto last_use = r == compiled_program::dead ? static_cast<std::uint32_t>(i) : std::max(l.last[r], static_cast<std::uint32_t>(i));
    std::uint32_t best = no_reg, largest = no_reg;
    for (std::uint32_t b = 0; b < bufs.size(); ++b) {
      if (bufs[b].device != m.device || bufs[b].busy_until >= i) continue;
      if (bufs[b].bytes >= m.bytes && (best == no_reg || bufs[b].bytes < bufs[best].bytes)) best = b;
      if (largest == no_reg || bufs[b].bytes > bufs[largest].bytes) largest = b;
    }
    if (best == no_reg && largest != no_reg) best = largest;
    if (best == no_reg) {
      best = static_cast<std::uint32_t>(bufs.size());
      bufs.push_back({0, m.device, 0});
    }
    bufs[best].bytes = std::max(bufs[best].bytes, m.bytes);
    bufs[best].busy_until = last_use;
    slot[i] = best;
    p.info.planned_bytes += m.bytes;
  }
  for (const auto& b : bufs) {
    p.buffers.push_back(at::empty({static_cast<std::int64_t>(b.bytes)}, at::TensorOptions().dtype(at::kByte).device(b.device)));
    p.info.arena_bytes += b.bytes;
  }
  p.out.assign(code.size(), at::Tensor());
  for (std::size_t i = 0; i < code.size(); ++i) {
    if (slot[i] == no_reg) continue;
    const auto& m = p.meta[i];
    p.out[i] = at::empty({0}, at::TensorOptions().dtype(m.dtype).device(m.device));
    p.out[i].set_(p.buffers[slot[i]].storage(), 0, m.sizes, m.strides);
    ++p.info.out_variant_nodes;
  }
  p.meta.clear();
  p.info.arena_buffers = bufs.size();
  return slot;
}

// Note [Views made once per plan]: a view's result depends on its base's metadata only, and in a
// plan the arena's results are the same tensors on every run (an out= kernel writes into its
// slot's tensor, an in-place one into its argument, an elided clone is its argument). So a view
// of one (or of the state), its other arguments constants or sizes of the plan's signature, is
// made once, when the plan is, and preset in its register on every run (engine_plan::views).
// Left to run: a view op that copied (its result is on other storage: a reshape of a
// non-contiguous tensor), one whose result the graph mutates or returns, one that fails.
inline void make_planned_views(engine_plan& p, const compiled_program& cp, const std::vector<std::uint8_t>& hoisted,
                               const std::vector<std::pair<std::uint32_t, c10::IValue>>& preset, const sym_env& env) {
  const auto& code = cp.code;
  p.skip = hoisted;
  std::vector<c10::IValue> stable(cp.num_regs);  // the registers that hold the same tensor on every run
  for (const auto& [r, t] : cp.state_slots) stable[r] = t;
  for (const auto& [r, v] : preset) stable[r] = v;
  std::vector<std::uint8_t> kept(cp.num_regs, 0);  // graph outputs, and what the graph mutates
  for (const auto& o : cp.outputs)
    if (o.is_reg) kept[o.index] = 1;
  for (const auto& in : code)
    if (in.info->is_mutable || in.info->inplace_view) cp.for_each_register_use(in, [&](std::uint32_t r) { kept[r] = 1; });
  torch::jit::Stack stack;
  std::vector<std::pair<std::uint32_t, c10::IValue>> used;
  for (std::size_t i = 0; i < code.size(); ++i) {
    if (hoisted[i]) continue;
    const auto& in = code[i];
    const auto out0 = in.outputs.empty() ? compiled_program::dead : in.outputs[0];
    if (p.out[i].defined() || p.in_place[i]) {
      const c10::IValue t = p.out[i].defined() ? c10::IValue(p.out[i]) : stable[in.args[0].index];
      if (out0 != compiled_program::dead && t.isTensor()) stable[out0] = t;
      continue;
    }
    const auto& op = *in.info;
    if (!op.is_view || op.is_mutable || op.inplace_view || !in.binds.empty() || in.outputs.empty()) continue;
    bool ok = true;
    std::vector<const c10::StorageImpl*> bases;
    used.clear();
    cp.for_each_register_use(in, [&](std::uint32_t r) {
      ok = ok && stable[r].isTensor() && stable[r].toTensor().has_storage();
      if (ok) bases.push_back(stable[r].toTensor().storage().unsafeGetStorageImpl());
      used.emplace_back(r, stable[r]);
    });
    for (auto r : in.outputs) ok = ok && (r == compiled_program::dead || !kept[r]);
    if (!ok || bases.empty()) continue;
    cp.push_arguments(in, stable, env, stack);
    for (auto& [r, v] : used) stable[r] = v;  // (a last use moves out of its register)
    try {
      in.op->callBoxed(stack);
    } catch (const c10::Error&) {
      stack.clear();
      continue;
    }
    const auto on_bases = [&](const at::Tensor& t) {
      return t.defined() && t.has_storage() &&
             std::find(bases.begin(), bases.end(), t.storage().unsafeGetStorageImpl()) != bases.end();
    };
    for (const auto& v : stack) {
      if (v.isTensor()) ok = ok && on_bases(v.toTensor());
      else if (v.isTensorList())
        for (const auto& t : v.toTensorVector()) ok = ok && on_bases(t);
      else ok = false;
    }
    if (ok) {
      detail::take_outputs(stack, [&](std::size_t k, c10::IValue&& r) {
        if (k >= in.outputs.size() || in.outputs[k] == compiled_program::dead) return;
        stable[in.outputs[k]] = r;
        p.views.emplace_back(in.outputs[k], std::move(r));
      });
      p.skip[i] = 1;
      ++p.info.planned_views;
    }
    stack.clear();
  }
}

inline void add_tensor_key(std::vector<std::int64_t>& key, const at::Tensor& t) {
  if (!t.defined()) {
    key.push_back(-1);
    return;
  }
  key.push_back(t.dim());
  key.insert(key.end(), t.sizes().begin(), t.sizes().end());
  if (t.layout() == c10::kStrided) key.insert(key.end(), t.strides().begin(), t.strides().end());
  key.push_back(static_cast<std::int64_t>(t.scalar_type()));
  key.push_back(static_cast<std::int64_t>(t.device().type()) * 1024 + t.device().index());
  key.push_back(static_cast<std::int64_t>(t.layout()) * 2 + (t.requires_grad() ? 1 : 0));
}

// What a plan depends on: each input's sizes, strides, dtype, device and layout, and the
// thread's dispatch state (autocast, ...), which resolved key sets include.
inline void signature_of(const std::vector<at::Tensor>& inputs, std::vector<std::int64_t>& key) {
  key.clear();
  auto tls = c10::impl::tls_local_dispatch_key_set();  // (raw_repr is not const in LibTorch 1.13)
  key.push_back(static_cast<std::int64_t>(tls.included_.raw_repr()));
  key.push_back(static_cast<std::int64_t>(tls.excluded_.raw_repr()));
  for (const auto& t : inputs) add_tensor_key(key, t);
}

// The plans not running now, most recent first: a run takes the plan of its signature (or makes
// one when all are busy) and gives it back after.
class plan_pool {
 public:
  explicit plan_pool(std::size_t max_plans) : max_plans_(max_plans) {}

  /// The idle plan of signature `key`, taken out of the pool; null when there is none.
  std::unique_ptr<engine_plan> checkout(const std::vector<std::int64_t>& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if ((*it)->key != key) continue;
      auto p = std::move(*it);
      idle_.erase(it);
      return p;
    }
    return nullptr;
  }

  /// Returns a plan to the pool, first in line; a `fresh` one drops the plans of signatures
  /// beyond `max_plans` (the least recently used).
  void checkin(std::unique_ptr<engine_plan> p, bool fresh) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_front(std::move(p));
    if (!fresh) return;
    std::vector<const std::vector<std::int64_t>*> seen;
    for (auto it = idle_.begin(); it != idle_.end();) {
      bool known = false;
      for (const auto* k : seen) known = known || *k == (*it)->key;
      if (!known) seen.push_back(&(*it)->key);
      if (!known && seen.size() > std::max<std::size_t>(max_plans_, 1)) {
        it = idle_.erase(it);
        seen.pop_back();
      } else {
        ++it;
      }
    }
  }

  /// What the idle plan of signature `key` does, if one is kept.
  [[nodiscard]] std::optional<engine_plan_info> info(const std::vector<std::int64_t>& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& p : idle_)
      if (p->key == key) return p->info;
    return std::nullopt;
  }

  [[nodiscard]] std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return idle_.size();
  }

 private:
  std::size_t max_plans_;
  mutable std::mutex mutex_;
  std::list<std::unique_ptr<engine_plan>> idle_;
};

}  // namespace detail

XPORT_END_NAMESPACE
