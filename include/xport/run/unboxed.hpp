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
#include <cstdint>      // std::uint8_t, std::uint32_t
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
#include <c10/core/DispatchKeySet.h>
#include <c10/core/Scalar.h>

#include <xport/config.hpp>
#include <xport/run/compiled.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

// How an argument of an unboxed form is passed: a tensor read from a register ('T'), the
// in-place self read from a register and written ('W'), a scalar constant ('S'), the out=
// tensor of the plan's arena ('O').
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
    unboxed_form<false, 'T', 'T', 'T', 'S', 'S', 'O'>>;

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
  std::array<std::uint32_t, 3> reg{};     // the tensor arguments' registers, in order
  std::array<c10::Scalar, 2> scalar{};    // the scalar arguments, in order
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

template <char X, std::size_t T, std::size_t S>
decltype(auto) unboxed_fetch(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor& out) {
  if constexpr (X == 'S') return (c.scalar[S]);
  else if constexpr (X == 'O') return (out);
  else return (regs[c.reg[T]].toTensor());
}

template <class F, char... C, std::size_t... K>
void unboxed_invoke(const unboxed_call& c, std::vector<c10::IValue>& regs, at::Tensor& out, c10::DispatchKeySet ks,
                    std::index_sequence<K...>) {
  constexpr char cs[] = {C...};
  const auto& h = *std::get_if<typename F::handle>(&c.handle);
  if constexpr (F::functional) {
    auto r = h.redispatch(ks, unboxed_fetch<cs[K], count_before<K, C...>(is_register_arg),
                                             count_before<K, C...>(is_scalar_arg)>(c, regs, out)...);
    for (std::size_t k = 0; k < c.reg.size(); ++k)
      if (c.moves & (1u << k)) regs[c.reg[k]] = c10::IValue();
    if (c.result != compiled_program::dead) regs[c.result] = std::move(r);
  } else {
    at::Tensor& r = h.redispatch(ks, unboxed_fetch<cs[K], count_before<K, C...>(is_register_arg),
                                                    count_before<K, C...>(is_scalar_arg)>(c, regs, out)...);
    c10::IValue kept(r);  // the written tensor (self or out), before its register is cleared
    for (std::size_t k = 0; k < c.reg.size(); ++k)
      if (c.moves & (1u << k)) regs[c.reg[k]] = c10::IValue();
    if (c.result != compiled_program::dead) regs[c.result] = std::move(kept);
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

// The form code of `op`'s schema ("TTSO"), or "" when an argument or the return is of another
// kind (optional, list, int, ...). `out`: the op is called with the plan's out= tensor.
inline std::string unboxed_code(const c10::FunctionSchema& s, bool& functional) {
  const auto& rets = s.returns();
  if (rets.size() != 1 || rets[0].type()->kind() != c10::TypeKind::TensorType) return "";
  functional = !rets[0].alias_info();
  std::string code;
  const auto& args = s.arguments();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    const auto kind = a.type()->kind();
    const bool written = a.alias_info() && a.alias_info()->isWrite();
    if (kind == c10::TypeKind::TensorType) code += !written ? 'T' : i == 0 ? 'W' : i + 1 == args.size() ? 'O' : '?';
    else if (kind == c10::TypeKind::NumberType) code += 'S';
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
/// or its out= overload with `out`), or one with an empty `run` when it has none.
inline unboxed_call make_unboxed(const compiled_program& cp, const compiled_program::instr& in, const c10::OperatorHandle& op) {
  unboxed_call c;
  if (in.outputs.size() != 1 || !in.binds.empty()) return c;
  bool functional = false;
  const auto code = unboxed_code(op.schema(), functional);
  const std::size_t given = code.empty() || code.back() != 'O' ? code.size() : code.size() - 1;
  if (code.empty() || in.args.size() != given) return c;
  std::size_t t = 0, s = 0;
  for (std::size_t k = 0; k < given; ++k) {
    const auto& a = in.args[k];
    using kind = compiled_program::arg_op::kind;
    if (code[k] == 'S') {
      if (a.type != kind::constant || !cp.constants[a.index].isScalar() || s == c.scalar.size()) return c;
      c.scalar[s++] = cp.constants[a.index].toScalar();
    } else {
      if ((a.type != kind::reg_copy && a.type != kind::reg_move) || t == c.reg.size()) return c;
      if (a.type == kind::reg_move) c.moves |= static_cast<std::uint8_t>(1u << t);
      c.reg[t++] = a.index;
    }
  }
  c.result = in.outputs[0];
  std::apply([&](auto... f) { (void)(try_unboxed_form<decltype(f)>(op, code, functional, c) || ...); },
             unboxed_forms{});
  if (!c.run) c = unboxed_call{};
  return c;
}

}  // namespace detail
XPORT_END_NAMESPACE
