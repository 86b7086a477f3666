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
#pragma once

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

#include <xport/config.hpp>
#include <xport/run/compiled.hpp>

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
