// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
#pragma once

#include <xport/xport.hpp>
// xport/engine.hpp: the inference engine (run/engine.hpp), an opt-in entry beside the umbrella
// header, so code that only exports, prints or saves does not parse it.

// #include <xport/xport.hpp>
// #include <xport/run/engine.hpp>
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

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/ops/auto_functionalize.hpp>
// #include <xport/ops/data_dependent.hpp>
// #include <xport/run/compiled.hpp>
// #include <xport/run/engine_options.hpp>
// xport/run/engine_options.hpp: how an engine runs (run/engine.hpp), in a header of its own so
// that <xport/compiled.hpp> gives it to TUs that do not parse the engine.

#include <cstddef>  // std::size_t

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE

struct engine_options {
  /// Check inputs against the program's guards before running (count, dtype, device, shape).
  bool check_inputs = true;
  /// Write the results of ops with an out= kernel into a per-signature arena reused across runs.
  bool plan_memory = true;
  /// Run a functional op in place on its first argument when nothing else uses that result.
  bool in_place = true;
  /// Call each node's kernel with the dispatch key set its plan resolved (no key computation).
  bool resolve_dispatch = true;
  /// Input signatures whose plans are kept (the least recently used goes first).
  std::size_t max_plans = 4;
  /// Threads that run a planned run's independent nodes at once, the caller's included (1: one
  /// node after the other). Each takes LibTorch's intra-op thread count, so set OMP_NUM_THREADS
  /// (or at::set_num_threads) low enough that the two kinds together fit the cores.
  std::size_t threads = 1;
  /// Capture each plan's run into a CUDA graph on its second run (the first planned one is the
  /// warm-up) and replay it on later runs of that input signature: one launch for the whole
  /// program. Inputs are copied into the graph's static inputs, outputs copied out of its static
  /// outputs (a result the caller keeps is never overwritten by the next replay). Needs
  /// <xport/cuda_graphs.hpp> (a CUDA build of LibTorch); where a plan cannot be captured (no
  /// backend, a CPU input or op, parallel branches, a host sync) it runs as it would without,
  /// and plan_info().graph_fallback says why.
  bool cuda_graphs = false;
};

XPORT_END_NAMESPACE
// #include <xport/run/graphs.hpp>
// xport/run/graphs.hpp: what the engine needs to capture a planned run into a graph and replay
// it (engine_options::cuda_graphs). The engine holds the logic (when to capture, the static
// input and output buffers, the fallbacks); the capture itself is a backend's, installed by
// <xport/cuda_graphs.hpp> in a CUDA build of LibTorch (at::cuda::CUDAGraph), so this header and
// the engine parse without CUDA's headers.

#include <algorithm>   // std::sort
#include <cstdint>     // std::int64_t
#include <functional>  // std::function
#include <memory>      // std::unique_ptr
#include <optional>    // std::optional
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Device.h>

// #include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// One captured run: replaying it runs the same kernels on the same memory again.
class captured_run {
 public:
  virtual ~captured_run() = default;
  virtual void replay() = 0;
};

/// Captures runs on a device kind (CUDA): `capture(device, body)` runs `body` once as warm-up,
/// then again under capture, and returns the graph. It throws when the body does what capture
/// forbids (a host sync, a CPU tensor read on the host); the engine then runs the plan without.
class graph_backend {
 public:
  virtual ~graph_backend() = default;
  [[nodiscard]] virtual bool supports(const c10::Device& device) const = 0;
  [[nodiscard]] virtual std::unique_ptr<captured_run> capture(const c10::Device& device,
                                                              const std::function<void()>& body) const = 0;
  [[nodiscard]] virtual std::string name() const = 0;
};

/// `t` without its broadcast: each dimension of stride 0 narrowed to one element, so the
/// elements it holds are each held once (a graph's static input is copied in through this).
inline at::Tensor without_broadcast(at::Tensor t) {
  for (std::int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) t = t.narrow(d, 0, 1);
  return t;
}

/// A graph's static copy of input `t`, with its sizes and strides (a plan is made for them):
/// fresh memory holding its elements once, broadcast again where `t` is (an expand()ed input).
/// Null when `t`'s elements overlap otherwise (an as_strided view): no copy can keep its strides.
inline std::optional<at::Tensor> static_copy(const at::Tensor& t) {
  const auto base = without_broadcast(t);
  // no two indices at one offset: sorted by stride, each dimension steps past all the smaller
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, size) of sizes > 1
  for (std::int64_t d = 0; d < base.dim(); ++d)
    if (base.size(d) > 1) dims.emplace_back(base.stride(d), base.size(d));
  std::sort(dims.begin(), dims.end());
  std::int64_t reach = 0;  // the largest offset the smaller dimensions make
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return std::nullopt;
    reach += stride * (size - 1);
  }
  auto copy = at::empty_strided(base.sizes(), base.strides(), base.options());
  copy.copy_(base);
  return copy.expand(t.sizes());
}

/// The installed backend (<xport/cuda_graphs.hpp> installs CUDA's), or null.
inline const graph_backend* installed_graph_backend = nullptr;

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/run/interpreter.hpp>
// #include <xport/run/overloads.hpp>
// xport/run/overloads.hpp: the kernel choices the engine (run/engine.hpp) makes per node: the
// out= and in-place overloads of a functional op, whether two overloads are one kernel for a
// backend, and the dispatch key set a call resolves to (called directly on later runs).

#include <cstddef>        // std::size_t
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

// #include <xport/config.hpp>
// #include <xport/ops/schema.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

// Every out= overload of the operators named like `op`, by operator name (built once).
inline const std::vector<c10::OperatorName>& overloads_of(const std::string& name) {
  static const auto table = [] {
    std::unordered_map<std::string, std::vector<c10::OperatorName>> t;
    for (const auto& n : c10::Dispatcher::singleton().getAllOpNames()) t[n.name].push_back(n);
    return t;
  }();
  static const std::vector<c10::OperatorName> empty;
  const auto it = table.find(name);
  return it == table.end() ? empty : it->second;
}

// Whether `op` is functional: no argument or return aliased, one Tensor returned.
inline bool is_functional(const op_info& op) {
  const auto& f = op.schema();
  if (op.is_mutable || op.is_view || op.returns_list || f.returns().size() != 1 ||
      f.returns()[0].type()->kind() != c10::TypeKind::TensorType || f.returns()[0].alias_info())
    return false;
  for (const auto& a : f.arguments())
    if (a.alias_info()) return false;
  return true;
}

inline bool same_arguments(const std::vector<c10::Argument>& a, const std::vector<c10::Argument>& b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (a[i].name() != b[i].name() || !(*a[i].type() == *b[i].type())) return false;
  return true;
}

// The out= overload of functional op `op`: the same arguments (names and types), then one
// keyword-only `Tensor(a!) out`, returning it. Null when there is none.
inline const c10::OperatorHandle* out_overload(const op_info& op) {
  if (!is_functional(op)) return nullptr;
  const auto& f = op.schema().arguments();
  for (const auto& name : overloads_of(op.name)) {
    const auto* info = try_find_op(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
    if (!info || info == &op) continue;
    const auto& s = info->schema();
    const auto& args = s.arguments();
    if (args.size() != f.size() + 1 || s.returns().size() != 1 || !same_arguments(args, f, f.size())) continue;
    const auto& out = args.back();
    if (out.kwarg_only() && out.alias_info() && out.alias_info()->isWrite() &&
        out.type()->kind() == c10::TypeKind::TensorType && s.returns()[0].alias_info())
      return &info->handle;
  }
  return nullptr;
}

// The in-place overload of functional op `op` (relu -> relu_, add.Tensor -> add_.Tensor): the
// same arguments, the first written (`Tensor(a!) self`) and returned. Null when there is none.
inline const c10::OperatorHandle* in_place_overload(const op_info& op) {
  if (!is_functional(op) || op.schema().arguments().empty()) return nullptr;
  const auto* info = try_find_op(op.name + "_" + (op.overload.empty() ? "" : "." + op.overload));
  if (!info) return nullptr;
  const auto& s = info->schema();
  const auto& f = op.schema().arguments();
  const auto& args = s.arguments();
  if (args.size() != f.size() || s.returns().size() != 1 || !s.returns()[0].alias_info()) return nullptr;
  const auto* self = args[0].alias_info();
  if (!self || !self->isWrite() || args[0].type()->kind() != c10::TypeKind::TensorType) return nullptr;
  for (std::size_t i = 1; i < args.size(); ++i)
    if (args[i].alias_info()) return nullptr;
  return same_arguments(args, f, f.size()) ? &info->handle : nullptr;
}


// The key set the dispatcher computes for a functional op's arguments on `stack`: the tensors'
// keys with the thread's included keys added and excluded ones removed, less BackendSelect and
// ADInplaceOrView, which only factories and in-place or view ops have kernels for (the
// dispatcher skips them for the others). Resolved only where that leaves a dense CPU or CUDA
// kernel; anything else (a factory, a view, sparse, ...) is dispatched on every call.
inline bool resolve_keys(const op_info& op, const torch::jit::Stack& stack, c10::DispatchKeySet& ks) {
  if (op.is_factory || op.is_view || op.is_mutable || op.inplace_view || op.device_arg >= 0) return false;
  c10::DispatchKeySet seen;
  bool any = false;
  const auto add = [&](const c10::IValue& v) {
    if (v.isTensor() && v.toTensor().defined()) {
      seen = seen | v.toTensor().key_set();
      any = true;
    }
  };
  for (const auto& v : stack) {
    if (v.isTensorList()) {
      for (const auto& t : v.toTensorVector()) add(c10::IValue(t));
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) add(e);
    } else {
      add(v);
    }
  }
  if (!any) return false;
  const auto tls = c10::impl::tls_local_dispatch_key_set();
  ks = ((seen | tls.included_) - tls.excluded_).remove(c10::DispatchKey::BackendSelect).remove(c10::DispatchKey::ADInplaceOrView);
  const auto top = ks.highestPriorityTypeId();
  return top == c10::DispatchKey::CPU || top == c10::DispatchKey::CUDA;
}

// Whether `op` and its overload `other` (out= or in-place) both have a kernel of their own for
// dispatch key `key`: then they are one kernel (a structured kernel's functional, out= and
// in-place forms), and the overload computes the same bits. A composite functional op is not:
// adaptive_avg_pool2d is a mean for a 1x1 output, its out= form a pooling kernel.
inline bool own_kernels(const op_info& op, const c10::OperatorHandle& other, c10::DispatchKey key) {
  return op.handle.hasKernelForDispatchKey(key) && other.hasKernelForDispatchKey(key);
}

}  // namespace detail
XPORT_END_NAMESPACE
// #include <xport/run/plan.hpp>
// xport/run/plan.hpp: the engine's plans (run/engine.hpp), one per input signature: what a
// plan records on its first run (each candidate result's metadata, resolved key sets), the
// lifetimes of the registers an arena is laid out by, and the pool that keeps the plans of the
// signatures seen last.

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

// #include <xport/config.hpp>
// #include <xport/run/compiled.hpp>
// #include <xport/run/graphs.hpp>
// #include <xport/run/guards.hpp>
// #include <xport/run/unboxed.hpp>
// xport/run/unboxed.hpp: the engine's planned calls without the boxed stack.
// Note [Unboxed planned calls]: a boxed call pushes each argument onto a stack of IValues, and
// the kernel's boxed wrapper pops and converts them back, calls the typed kernel and pushes its
// result, which the caller pops again: about a third of what a small elementwise op costs beyond
// its kernel. Most nodes of a planned run have one of a few C++ signatures (tensors and scalars
// in, one tensor out: `sin`, `add.Tensor`, `addmm`, their in-place and out= overloads). For
// those, the plan keeps the operator's typed handle and calls it with the plan's resolved key set
// (TypedOperatorHandle::redispatch): the same kernel the boxed call reaches, its arguments read
// from the registers by reference, its scalars converted once. Every other node, and every node
// of a plan whose key sets are not resolved, is called boxed as before.

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t, std::uint8_t, std::uint32_t
#include <cstring>      // std::memcpy
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <tuple>        // std::tuple, std::apply
#include <type_traits>  // std::conditional_t
#include <utility>      // std::index_sequence, std::move
#include <variant>      // std::variant, std::monostate
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/Scalar.h>
#include <c10/macros/Macros.h>

// #include <xport/config.hpp>
// #include <xport/run/compiled.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

// How an argument of an unboxed form is passed: a tensor read from a register ('T'), the
// in-place self read from a register and written ('W'), a scalar constant ('S'), an int ('I'),
// bool ('B') or string ('V') constant, a constant list of sizes ('L', SymInt[]) or of ints ('K',
// int[]), the out= tensor of the plan's arena ('O').
template <char C>
struct unboxed_arg_type;
template <>
struct unboxed_arg_type<'T'> { using type = const at::Tensor&; };
template <>
struct unboxed_arg_type<'W'> { using type = at::Tensor&; };
template <>
struct unboxed_arg_type<'S'> { using type = const c10::Scalar&; };
template <>
struct unboxed_arg_type<'O'> { using type = at::Tensor&; };
template <>
struct unboxed_arg_type<'I'> { using type = std::int64_t; };
template <>
struct unboxed_arg_type<'B'> { using type = bool; };
template <>
struct unboxed_arg_type<'V'> { using type = c10::string_view; };
template <>
struct unboxed_arg_type<'L'> { using type = c10::SymIntArrayRef; };
template <>
struct unboxed_arg_type<'K'> { using type = at::IntArrayRef; };

// One form: the argument classes, and whether the op returns a new tensor (functional) or its
// written argument (in place, out=).
template <bool Functional, char... C>
struct unboxed_form {
  using result = std::conditional_t<Functional, at::Tensor, at::Tensor&>;
  using sig = result(typename unboxed_arg_type<C>::type...);
  using handle = c10::TypedOperatorHandle<sig>;
  static constexpr bool functional = Functional;
  static constexpr char code[] = {C..., '\0'};
};

// The forms most nodes have (`code` reads the schema's arguments in order).
using unboxed_forms = std::tuple<
    unboxed_form<true, 'T'>, unboxed_form<true, 'T', 'T'>, unboxed_form<true, 'T', 'T', 'S'>,
    unboxed_form<true, 'T', 'S'>, unboxed_form<true, 'T', 'S', 'S'>, unboxed_form<true, 'T', 'T', 'T', 'S', 'S'>,
    unboxed_form<false, 'W'>, unboxed_form<false, 'W', 'T'>, unboxed_form<false, 'W', 'T', 'S'>,
    unboxed_form<false, 'W', 'S'>, unboxed_form<false, 'W', 'S', 'S'>,
    unboxed_form<false, 'T', 'O'>, unboxed_form<false, 'T', 'T', 'O'>, unboxed_form<false, 'T', 'T', 'S', 'O'>,
    unboxed_form<false, 'T', 'S', 'O'>, unboxed_form<false, 'T', 'S', 'S', 'O'>,
    unboxed_form<false, 'T', 'T', 'T', 'S', 'S', 'O'>,
    // softmax and log_softmax (dim, half_to_float); gelu (approximate)
    unboxed_form<true, 'T', 'I', 'B'>, unboxed_form<false, 'T', 'I', 'B', 'O'>,
    unboxed_form<true, 'T', 'V'>, unboxed_form<false, 'W', 'V'>, unboxed_form<false, 'T', 'V', 'O'>,
    // views: view, reshape, _unsafe_view (sizes); permute (dims); expand (sizes, implicit)
    unboxed_form<true, 'T', 'L'>, unboxed_form<true, 'T', 'K'>, unboxed_form<true, 'T', 'L', 'B'>>;

template <class Forms>
struct unboxed_handles;
template <class... F>
struct unboxed_handles<std::tuple<F...>> {
  using type = std::variant<std::monostate, typename F::handle...>;
};

/// One instruction of a plan, called unboxed (empty `run`: called boxed).
struct unboxed_call {
  using runner = void (*)(const unboxed_call&, std::vector<c10::IValue>& regs, at::Tensor& out, c10::DispatchKeySet ks);
  runner run = nullptr;
  typename unboxed_handles<unboxed_forms>::type handle;
  std::array<std::uint32_t, 3> reg{};     // the tensor arguments' registers, in order (a constant's: past the program's)
  std::array<c10::Scalar, 2> scalar{};    // the scalar arguments, in order
  std::array<std::int64_t, 1> ints{};     // the int arguments
  std::array<bool, 1> bools{};            // the bool arguments
  std::string text;                       // the string argument
  std::vector<c10::SymInt> sizes;         // the sizes argument ('L'; native_layer_norm: normalized_shape)
  std::vector<std::int64_t> dims;         // the int[] argument ('K')
  std::array<std::uint32_t, 3> results{};  // native_layer_norm: its three results' registers (or dead)
  std::uint8_t given = 0;                  // native_layer_norm: bit k, reg[k + 1] holds weight (0) or bias (1)
  std::uint8_t moves = 0;                 // bit k: reg[k]'s last use (cleared after the call)
  std::uint32_t result = compiled_program::dead;
};

template <std::size_t K, char... C>
constexpr std::size_t count_before(bool (*pred)(char)) {
  constexpr char cs[] = {C...};
  std::size_t n = 0;
  for (std::size_t i = 0; i < K; ++i) n += pred(cs[i]) ? 1 : 0;
  return n;
}
constexpr bool is_register_arg(char c) { return c == 'T' || c == 'W'; }
constexpr bool is_scalar_arg(char c) { return c == 'S'; }

// Argument X of a call, the T-th register or the S-th scalar (the only int, bool and string).
template <char X, std::size_t T, std::size_t S>
decltype(auto) unboxed_fetch(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor& out) {
  if constexpr (X == 'S') return (c.scalar[S]);
  else if constexpr (X == 'I') return c.ints[0];
  else if constexpr (X == 'B') return c.bools[0];
  else if constexpr (X == 'V') return c10::string_view(c.text.data(), c.text.size());
  else if constexpr (X == 'L') return c10::SymIntArrayRef(c.sizes);
  else if constexpr (X == 'K') return at::IntArrayRef(c.dims);
  else if constexpr (X == 'O') return (out);
  else return (regs[c.reg[T]].toTensor());
}

// After a call: the arguments used for the last time leave their registers (in line: every
// node of a planned run pays for these).
C10_ALWAYS_INLINE void clear_moved(const unboxed_call& c, std::vector<c10::IValue>& regs) {
  for (std::size_t k = 0; k < c.reg.size(); ++k)
    if (c.moves & (1u << k)) regs[c.reg[k]] = c10::IValue();
}

// ... and the call's result goes to its register (taken before the arguments' are cleared: an
// in-place or out= call's result is one of them).
C10_ALWAYS_INLINE void unboxed_store(const unboxed_call& c, std::vector<c10::IValue>& regs, c10::IValue result) {
  clear_moved(c, regs);
  if (c.result != compiled_program::dead) regs[c.result] = std::move(result);
}

template <class F, char... C, std::size_t... K>
void unboxed_invoke(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor& out, c10::DispatchKeySet ks,
                    std::index_sequence<K...>) {
  constexpr char cs[] = {C...};
  const auto& h = *std::get_if<typename F::handle>(&c.handle);
  if constexpr (F::functional) {
    auto r = h.redispatch(ks, unboxed_fetch<cs[K], count_before<K, C...>(is_register_arg),
                                             count_before<K, C...>(is_scalar_arg)>(c, regs, out)...);
    unboxed_store(c, regs, c10::IValue(std::move(r)));
  } else {
    at::Tensor& r = h.redispatch(ks, unboxed_fetch<cs[K], count_before<K, C...>(is_register_arg),
                                                    count_before<K, C...>(is_scalar_arg)>(c, regs, out)...);
    unboxed_store(c, regs, c10::IValue(r));
  }
}

template <class F>
struct unboxed_runner;
template <bool Functional, char... C>
struct unboxed_runner<unboxed_form<Functional, C...>> {
  static void run(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor& out, c10::DispatchKeySet ks) {
    unboxed_invoke<unboxed_form<Functional, C...>, C...>(c, regs, out, ks, std::make_index_sequence<sizeof...(C)>{});
  }
};

// Note [addmm's bias copied by the plan]: on the CPU, addmm.out(bias, x, w, out) first copies
// its bias, expanded to the result's rows, into `out` (an `expand` and a TensorIterator copy:
// about half of what a small linear layer costs), then runs the gemm with beta on `out`; it
// skips the copy when its bias *is* `out` (the in-place addmm_ and mm call it so). When `out`
// is contiguous and the bias a contiguous row (or the whole matrix) of its dtype, the plan
// copies the bias rows itself (memcpy) and calls the same kernel with `out` as its bias: the
// same gemm runs on the same bytes, so the result is the same bit for bit. Any other bias (a
// column, a broadcast view, a conjugate, another device) takes the plain out= call.
inline bool copy_addmm_bias(const at::Tensor& bias, at::Tensor& out) {
  if (!bias.defined() || bias.layout() != c10::kStrided || out.layout() != c10::kStrided || !bias.is_cpu() ||
      !out.is_cpu() || bias.scalar_type() != out.scalar_type() || out.dim() != 2 || bias.is_conj() || bias.is_neg() ||
      out.is_conj() || out.is_neg() || !bias.is_contiguous() || !out.is_contiguous() || bias.is_same(out) ||
      out.numel() == 0 || !bias.has_storage() || !out.has_storage())
    return false;
  const auto rows = out.size(0), cols = out.size(1);
  const auto row_bytes = static_cast<std::size_t>(cols) * out.element_size();
  const bool row = (bias.dim() == 1 && bias.size(0) == cols) || (bias.dim() == 2 && bias.size(0) == 1 && bias.size(1) == cols);
  const bool whole = bias.dim() == 2 && bias.size(0) == rows && bias.size(1) == cols;
  if (!row && !whole) return false;
  const auto* from = static_cast<const char*>(bias.data_ptr());
  auto* to = static_cast<char*>(out.data_ptr());
  if (whole) {
    std::memcpy(to, from, row_bytes * static_cast<std::size_t>(rows));
  } else {
    for (std::int64_t r = 0; r < rows; ++r) std::memcpy(to + static_cast<std::size_t>(r) * row_bytes, from, row_bytes);
  }
  return true;
}

// addmm.out with its bias copied by the plan (Note [addmm's bias copied by the plan]).
inline void run_addmm_copied_bias(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor& out, c10::DispatchKeySet ks) {
  using F = unboxed_form<false, 'T', 'T', 'T', 'S', 'S', 'O'>;
  if (!copy_addmm_bias(regs[c.reg[0]].toTensor(), out)) return unboxed_runner<F>::run(c, regs, out, ks);
  const auto& h = *std::get_if<typename F::handle>(&c.handle);
  at::Tensor& r = h.redispatch(ks, out, regs[c.reg[1]].toTensor(), regs[c.reg[2]].toTensor(), c.scalar[0], c.scalar[1], out);
  unboxed_store(c, regs, c10::IValue(r));
}

// An elided clone (engine: a clone of a result nothing uses after it is that result itself).
inline void run_identity(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor&, c10::DispatchKeySet) {
  c10::IValue v = regs[c.reg[0]];
  unboxed_store(c, regs, std::move(v));
}

// A clone into the arena: a copy of its argument into the plan's slot, of the clone's layout,
// with the clone's resolved key set (its argument's), or dispatched.
inline void run_copy_into(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor& out, c10::DispatchKeySet ks) {
  at::_ops::copy_::redispatch(ks, out, regs[c.reg[0]].toTensor(), false);
  unboxed_store(c, regs, c10::IValue(out));
}
inline void run_copy_into_dispatched(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor& out, c10::DispatchKeySet) {
  out.copy_(regs[c.reg[0]].toTensor());
  unboxed_store(c, regs, c10::IValue(out));
}

// native_layer_norm, the inference IR's layer_norm: a list of sizes, two optional tensors, three
// results (the generated typed entry, with the plan's key set).
inline void run_native_layer_norm(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor&, c10::DispatchKeySet ks) {
  const auto optional = [&](std::size_t k) {
    return (c.given & (1u << k)) ? c10::optional<at::Tensor>(regs[c.reg[k + 1]].toTensor()) : c10::optional<at::Tensor>();
  };
  auto r = at::_ops::native_layer_norm::redispatch(ks, regs[c.reg[0]].toTensor(), c10::SymIntArrayRef(c.sizes), optional(0),
                                                   optional(1), c.scalar[0].toDouble());
  clear_moved(c, regs);
  if (c.results[0] != compiled_program::dead) regs[c.results[0]] = std::move(std::get<0>(r));
  if (c.results[1] != compiled_program::dead) regs[c.results[1]] = std::move(std::get<1>(r));
  if (c.results[2] != compiled_program::dead) regs[c.results[2]] = std::move(std::get<2>(r));
}

// The typed call of native_layer_norm `in` (constant sizes and eps), or one with an empty `run`.
inline unboxed_call make_native_layer_norm(const compiled_program& cp, const compiled_program::instr& in) {
  using kind = compiled_program::arg_op::kind;
  unboxed_call c;
  const auto is_reg = [](const compiled_program::arg_op& a) { return a.type == kind::reg_copy || a.type == kind::reg_move; };
  const auto constant = [&](const compiled_program::arg_op& a) { return a.type == kind::constant ? &cp.constants[a.index] : nullptr; };
  if (in.args.size() != 5 || in.outputs.size() != 3 || !in.binds.empty() || !is_reg(in.args[0])) return c;
  const auto* shape = constant(in.args[1]);
  const auto* eps = constant(in.args[4]);
  if (!shape || !shape->isIntList() || !eps || !eps->isDouble()) return c;
  for (auto d : shape->toIntVector()) c.sizes.emplace_back(d);
  for (std::size_t k = 0; k < 3; ++k) {
    const auto& a = in.args[k == 0 ? 0 : k + 1];
    if (is_reg(a)) {
      c.reg[k] = a.index;
      if (a.type == kind::reg_move) c.moves |= static_cast<std::uint8_t>(1u << k);
      if (k > 0) c.given |= static_cast<std::uint8_t>(1u << (k - 1));
    } else if (!constant(a) || !constant(a)->isNone()) {
      return unboxed_call{};
    }
  }
  c.scalar[0] = eps->toDouble();
  for (std::size_t k = 0; k < 3; ++k) c.results[k] = in.outputs[k];
  c.run = &run_native_layer_norm;
  return c;
}

/// The call of clone `in` as a plan runs it: `elided`, its argument handed on as its result
/// (run_identity); else a copy into its arena slot (run_copy_into, `resolved`: with the plan's
/// key set).
inline unboxed_call make_clone(const compiled_program::instr& in, bool elided, bool resolved) {
  unboxed_call c;
  c.run = elided ? &run_identity : resolved ? &run_copy_into : &run_copy_into_dispatched;
  c.reg[0] = in.args[0].index;
  c.moves = in.args[0].type == compiled_program::arg_op::kind::reg_move ? 1 : 0;
  c.result = in.outputs.empty() ? compiled_program::dead : in.outputs[0];
  return c;
}

// The form code of `op`'s schema ("TTSO"), or "" when an argument or the return is of another
// kind (optional, a list of tensors, float, ...) or more than one result. `functional`: the op
// returns a new tensor (a view too), not one it wrote.
inline std::string unboxed_code(const c10::FunctionSchema& s, bool& functional) {
  const auto& rets = s.returns();
  if (rets.size() != 1 || rets[0].type()->kind() != c10::TypeKind::TensorType) return "";
  functional = !rets[0].alias_info() || !rets[0].alias_info()->isWrite();  // (a view returns a new tensor too)
  std::string code;
  const auto& args = s.arguments();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    const auto kind = a.type()->kind();
    const bool written = a.alias_info() && a.alias_info()->isWrite();
    if (kind == c10::TypeKind::TensorType) code += !written ? 'T' : i == 0 ? 'W' : i + 1 == args.size() ? 'O' : '?';
    else if (kind == c10::TypeKind::NumberType) code += 'S';
    else if (kind == c10::TypeKind::IntType) code += 'I';
    else if (kind == c10::TypeKind::BoolType) code += 'B';
    else if (kind == c10::TypeKind::StringType) code += 'V';
    else if (kind == c10::TypeKind::ListType && a.type()->containedTypes()[0]->kind() == c10::TypeKind::SymIntType) code += 'L';
    else if (kind == c10::TypeKind::ListType && a.type()->containedTypes()[0]->kind() == c10::TypeKind::IntType) code += 'K';
    else return "";
  }
  return code.find('?') == std::string::npos ? code : "";
}

template <class F>
bool try_unboxed_form(const c10::OperatorHandle& op, std::string_view code, bool functional, unboxed_call& c) {
  if (F::functional != functional || code != std::string_view(F::code)) return false;
  try {
    c.handle = op.typed<typename F::sig>();
  } catch (const c10::Error&) {  // the kernel's C++ signature is not the schema's usual one
    return false;
  }
  c.run = &unboxed_runner<F>::run;
  return true;
}

/// The unboxed form of instruction `in` called as `op` (its functional op, its in-place overload,
/// or its out= overload with `out`), or one with an empty `run` when it has none. A constant
/// tensor argument is read from a register past the program's: the call appends it to
/// `constants`, the plan's registers from cp.num_regs on (pushed only when the call is made).
inline unboxed_call make_unboxed(const compiled_program& cp, const compiled_program::instr& in, const c10::OperatorHandle& op,
                                 std::vector<c10::IValue>& constants) {
  const auto given_constants = constants.size();
  const auto fail = [&] {
    constants.resize(given_constants);
    return unboxed_call{};
  };
  unboxed_call c;
  if (op.schema().name() == "aten::native_layer_norm" && op.schema().overload_name().empty()) return make_native_layer_norm(cp, in);
  if (in.outputs.size() != 1 || !in.binds.empty()) return c;
  bool functional = false;
  const auto code = unboxed_code(op.schema(), functional);
  const std::size_t given = code.empty() || code.back() != 'O' ? code.size() : code.size() - 1;
  if (code.empty() || in.args.size() != given) return c;
  std::size_t t = 0, s = 0, ints = 0, bools = 0, texts = 0, lists = 0;
  for (std::size_t k = 0; k < given; ++k) {
    const auto& a = in.args[k];
    using kind = compiled_program::arg_op::kind;
    const c10::IValue* v = a.type == kind::constant ? &cp.constants[a.index] : nullptr;
    if (code[k] == 'S') {
      if (!v || !v->isScalar() || s == c.scalar.size()) return fail();
      c.scalar[s++] = v->toScalar();
    } else if (code[k] == 'I') {
      if (!v || !v->isInt() || ints++ == c.ints.size()) return fail();
      c.ints[0] = v->toInt();
    } else if (code[k] == 'B') {
      if (!v || !v->isBool() || bools++ == c.bools.size()) return fail();
      c.bools[0] = v->toBool();
    } else if (code[k] == 'V') {
      if (!v || !v->isString() || texts++ == 1) return fail();
      c.text = v->toStringRef();
    } else if (code[k] == 'L' || code[k] == 'K') {
      if (!v || !v->isIntList() || lists++ == 1) return fail();
      const auto ints_of = v->toIntVector();
      if (code[k] == 'K') c.dims = ints_of;
      else c.sizes.assign(ints_of.begin(), ints_of.end());
    } else if (code[k] == 'T' && v && v->isTensor()) {  // (a number where a Tensor is expected)
      if (t == c.reg.size()) return fail();
      c.reg[t++] = static_cast<std::uint32_t>(cp.num_regs + constants.size());
      constants.push_back(*v);
    } else {
      if ((a.type != kind::reg_copy && a.type != kind::reg_move) || t == c.reg.size()) return fail();
      if (a.type == kind::reg_move) c.moves |= static_cast<std::uint8_t>(1u << t);
      c.reg[t++] = a.index;
    }
  }
  c.result = in.outputs[0];
  std::apply([&](auto... f) { (void)(try_unboxed_form<decltype(f)>(op, code, functional, c) || ...); },
             unboxed_forms{});
  if (!c.run) return fail();
  const auto& name = op.schema().operator_name();
  if (name.name == "aten::addmm" && name.overload_name == "out" && c.scalar[0].toComplexDouble() != 0.0)
    c.run = &run_addmm_copied_bias;
  return c;
}

}  // namespace detail
XPORT_END_NAMESPACE

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
// #include <xport/run/schedule.hpp>
// xport/run/schedule.hpp: the engine's parallel branches (engine_options::threads > 1): the
// hazards of a planned run as edges between instructions, and the pool of threads that runs the
// instructions whose inputs are ready.

#include <algorithm>           // std::sort, std::unique, std::max
#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t
#include <cstdint>             // std::uint32_t, std::uint8_t
#include <deque>               // std::deque
#include <functional>          // std::function
#include <mutex>               // std::mutex, std::lock_guard, std::unique_lock
#include <thread>              // std::thread
#include <utility>             // std::move
#include <vector>              // std::vector

#include <ATen/Parallel.h>

// #include <xport/config.hpp>
// #include <xport/ops/data_dependent.hpp>
// #include <xport/run/compiled.hpp>
// #include <xport/run/plan.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// A fixed set of threads running posted jobs (the engine's parallel branches). Each thread takes
/// LibTorch's intra-op thread count as its own, as LibTorch's own pools do.
class branch_pool {
 public:
  explicit branch_pool(std::size_t workers) {
    for (std::size_t i = 0; i < workers; ++i)
      threads_.emplace_back([this] {
        at::init_num_threads();
        for (;;) {
          std::function<void()> job;
          {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // stopping
            job = std::move(jobs_.front());
            jobs_.pop_front();
          }
          job();
        }
      });
  }
  branch_pool(const branch_pool&) = delete;
  branch_pool& operator=(const branch_pool&) = delete;
  ~branch_pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  [[nodiscard]] std::size_t size() const noexcept { return threads_.size(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// The hazards of a planned run as edges between instructions. Memory is tracked per resource:
// the arena buffer a planned root lives in, else the root itself (views and in-place results
// share their base's); one more resource orders random and effectful ops. An instruction
// follows the makers of its arguments and the last writer of each resource it reads; one that
// writes a resource (a fresh result, an in-place or out= call, a mutating op) follows every
// earlier reader and writer of it.
inline std::size_t parallel_width(const engine_plan& p, const std::vector<std::uint8_t>& hoisted);

// `hoisted[i]`: instruction i is made once (no part of a run); `slot[i]`: the arena buffer
// instruction i's result lives in (or no_reg), of `buffers`.
inline void schedule(engine_plan& p, const compiled_program& cp, const std::vector<std::uint8_t>& hoisted, const lifetimes& l,
                     const std::vector<std::uint32_t>& slot, std::uint32_t buffers) {
  const auto& code = cp.code;
  const auto nregs = static_cast<std::uint32_t>(cp.num_regs);
  const std::uint32_t effects = nregs + buffers;
  const auto resource = [&](std::uint32_t r) {
    const auto root = l.root[r];
    const auto d = l.def[root];
    return d != no_reg && slot[d] != no_reg ? nregs + slot[d] : root;
  };
  struct use {
    std::uint32_t writer = no_reg;
    std::vector<std::uint32_t> readers;
  };
  std::vector<use> uses(effects + 1);
  std::vector<std::uint32_t> maker(nregs, no_reg);
  p.deps.assign(code.size(), 0);
  p.succ.assign(code.size(), {});
  p.reads.assign(nregs, 0);
  p.keep.assign(nregs, 0);
  for (const auto& o : cp.outputs)
    if (o.is_reg) p.keep[o.index] = 1;
  std::vector<std::uint32_t> preds, reads, writes;
  for (std::uint32_t i = 0; i < code.size(); ++i) {
    if (hoisted[i]) continue;
    const auto& in = code[i];
    const auto& op = *in.info;
    preds.clear();
    reads.clear();
    writes.clear();
    cp.for_each_register_use(in, [&](std::uint32_t r) {
      ++p.reads[r];
      if (maker[r] != no_reg) preds.push_back(maker[r]);
      reads.push_back(resource(r));
    });
    if (p.in_place[i]) writes.push_back(resource(in.args[0].index));
    if (!p.bases_in_place[i].empty()) {  // (Note [Bases written in place])
      const auto bases = functionalized_bases(cp, in);
      for (std::size_t k = 0; k < bases.size(); ++k)
        if (p.bases_in_place[i][k]) writes.push_back(resource(bases[k]));
    }
    if (op.is_mutable || op.inplace_view) writes.insert(writes.end(), reads.begin(), reads.end());
    if (op.nondeterministic || op.ordered || in.outputs.empty() || reads_data(op)) writes.push_back(effects);
    for (auto r : in.outputs)
      if (r != compiled_program::dead && l.def[r] == i) writes.push_back(resource(r));
    for (auto res : reads)
      if (uses[res].writer != no_reg) preds.push_back(uses[res].writer);
    for (auto res : writes) {
      if (uses[res].writer != no_reg) preds.push_back(uses[res].writer);
      preds.insert(preds.end(), uses[res].readers.begin(), uses[res].readers.end());
    }
    for (auto res : reads) uses[res].readers.push_back(i);
    for (auto res : writes) {
      uses[res].writer = i;
      uses[res].readers.clear();
    }
    for (auto r : in.outputs)
      if (r != compiled_program::dead) maker[r] = i;
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    for (auto q : preds) {
      if (q == i) continue;
      p.succ[q].push_back(i);
      ++p.deps[i];
    }
  }
  p.roots.clear();
  for (std::uint32_t i = 0; i < code.size(); ++i)
    if (!hoisted[i] && p.deps[i] == 0) p.roots.push_back(i);
  p.info.parallel_width = parallel_width(p, hoisted);
}

// The most instructions at one depth of the schedule (a level is one more than its deepest predecessor).
inline std::size_t parallel_width(const engine_plan& p, const std::vector<std::uint8_t>& hoisted) {
  std::vector<std::uint32_t> level(p.deps.size(), 0), count;
  std::size_t widest = 0;
  for (std::uint32_t i = 0; i < p.deps.size(); ++i) {  // predecessors come first in code order
    if (hoisted[i]) continue;
    if (level[i] >= count.size()) count.resize(level[i] + 1, 0);
    widest = std::max<std::size_t>(widest, ++count[level[i]]);
    for (auto s : p.succ[i]) level[s] = std::max(level[s], level[i] + 1);
  }
  return widest;
}

}  // namespace detail
XPORT_END_NAMESPACE

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
