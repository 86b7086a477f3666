// xport/ops/schema.hpp: arguments against an operator's schema.
// `bind_arguments` turns positional + keyword arguments into the full schema-ordered list
// (defaults filled, ints widened to floats where the schema wants a float, `int[2]` from a
// single int), or throws schema_error naming the op, the argument and the expected type.
// `to_ivalue` turns a bound constant argument into the IValue the dispatcher expects.
#pragma once

#include <complex>      // std::complex
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t, std::uint64_t
#include <span>         // std::span
#include <sstream>      // std::ostringstream
#include <string>       // std::string
#include <vector>       // std::vector

#include <ATen/core/class_type.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/ScalarOps.h>

#include <xport/config.hpp>
#include <xport/detail/python_repr.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

inline std::string schema_string(const c10::FunctionSchema& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

/// Human text for an argument given by the user: `int 3`, `Tensor x`, `list [1, 2]`.
inline std::string describe(const argument& a) {
  switch (a.type()) {
    case argument::kind::none: return "None";
    case argument::kind::boolean: return std::string("bool ") + (a.as_bool() ? "True" : "False");
    case argument::kind::integer: return "int " + std::to_string(a.as_int());
    case argument::kind::floating: return "float " + python_float_repr(a.as_double());
    case argument::kind::complex: return "complex " + python_complex_repr(a.as_complex());
    case argument::kind::string: return "str " + python_str_repr(a.as_string());
    case argument::kind::dtype: return "dtype";
    case argument::kind::device: return "device";
    case argument::kind::layout: return "layout";
    case argument::kind::memory_format: return "memory_format";
    case argument::kind::value: {
      auto v = a.as_value();
      if (!v) return "a null value";
      switch (v.kind()) {
        case value_kind::tensor: return "Tensor '" + v.name() + "'";
        case value_kind::sym_int: return "SymInt '" + v.name() + "'";
        case value_kind::sym_float: return "SymFloat '" + v.name() + "'";
        case value_kind::sym_bool: return "SymBool '" + v.name() + "'";
        case value_kind::none: return "None value '" + v.name() + "'";
        case value_kind::object: return "custom object '" + v.name() + "' (" + v.type().class_fqn + ")";
      }
      return "value";
    }
    case argument::kind::list: return "a list of " + std::to_string(a.as_list().size());
    case argument::kind::symbolic: return "SymInt " + a.as_sym().str();
    case argument::kind::scalar: return (a.as_scalar().is_bool() ? "SymBool " : "SymFloat ") + a.as_scalar().str();
    case argument::kind::graph: return "subgraph '" + a.as_graph()->name + "'";
  }
  return "?";
}

inline bool is_value_of(const argument& a, value_kind k) {
  return a.is_value() && a.as_value() && a.as_value().kind() == k;
}

/// Checks `a` against schema type `t` and coerces it in place (int -> float, scalar -> fixed
/// size list). Returns false when it does not fit.
inline bool coerce(argument& a, const c10::TypePtr& t, const c10::optional<int32_t>& fixed_n) {
  using K = c10::TypeKind;
  switch (t->kind()) {
    case K::OptionalType:
      return a.is_none() || coerce(a, t->castRaw<c10::OptionalType>()->getElementType(), fixed_n);
    case K::TensorType:
      // A Python number where a Tensor is expected becomes a wrapped-number tensor, as in
      // torch (`aten.add.Tensor(x, 1)` is how torch.export records `x + 1`); a symbolic size
      // too (`aten.mul.Tensor(x, sym_size_int_1)` is `x * x.size(0)`).
      return is_value_of(a, value_kind::tensor) || a.is_int() || a.is_double() || a.is_bool() || a.is_complex() ||
             a.is_symbolic() || a.is_scalar() || is_value_of(a, value_kind::sym_int) || is_value_of(a, value_kind::sym_float);
    case K::ComplexType:
      if (a.is_int()) a = std::complex<double>(static_cast<double>(a.as_int()), 0);
      if (a.is_double()) a = std::complex<double>(a.as_double(), 0);
      return a.is_complex();
    case K::IntType:
    case K::SymIntType: return a.is_int() || a.is_symbolic() || is_value_of(a, value_kind::sym_int);
    case K::FloatType:
      if (a.is_int()) a = static_cast<double>(a.as_int());
      return a.is_double() || (a.is_scalar() && !a.as_scalar().is_bool()) || is_value_of(a, value_kind::sym_float);
    case K::BoolType: return a.is_bool() || (a.is_scalar() && a.as_scalar().is_bool()) || is_value_of(a, value_kind::sym_bool);
    case K::NumberType:
      return a.is_int() || a.is_double() || a.is_bool() || a.is_complex() || a.is_symbolic() || a.is_scalar() || is_value_of(a, value_kind::sym_int) ||
             is_value_of(a, value_kind::sym_float);
    case K::StringType: return a.is_string();
    case K::ScalarTypeType: return a.is_dtype();
    case K::LayoutType: return a.is_layout();
    case K::MemoryFormatType: return a.is_memory_format();
    case K::DeviceObjType: return a.is_device();
    case K::GeneratorType: return a.is_none();
    case K::AnyType: return true;  // a control-flow operator's branch, or its predicate
    case K::AnyClassType: return is_value_of(a, value_kind::object);  // (call_torchbind's object)
    case K::ClassType:  // a custom class instance (`__torch__.torch.classes.ns.Name obj`) of that class
      return is_value_of(a, value_kind::object) &&
             a.as_value().type().class_fqn == t->castRaw<c10::ClassType>()->name()->qualifiedName();
    case K::ListType: {
      const auto& elem = t->castRaw<c10::ListType>()->getElementType();
      if (!a.is_list()) {
        // `int[2] stride` accepts a single int, as in Python.
        if (fixed_n && (a.is_int() || a.is_bool() || a.is_double())) {
          argument one = a;
          if (!coerce(one, elem, c10::nullopt)) return false;
          a = argument::list_type(static_cast<std::size_t>(*fixed_n), one);
          return true;
        }
        return false;
      }
      for (auto& e : a.as_list())
        if (!coerce(e, elem, c10::nullopt)) return false;
      return true;
    }
    default: return false;
  }
}

/// The schema type with Optional[...] removed.
inline c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType)
    return t->castRaw<c10::OptionalType>()->getElementType();
  return t;
}

/// A constant IValue (a schema default) as an argument of schema type `t`.
inline argument from_ivalue(const c10::IValue& v, const c10::TypePtr& t) {
  using K = c10::TypeKind;
  const auto kind = unwrap_optional(t)->kind();
  if (v.isNone()) return none;
  if (v.isBool()) return v.toBool();
  if (v.isInt()) {
    const auto i = v.toInt();
    if (kind == K::ScalarTypeType) return static_cast<c10::ScalarType>(i);
    if (kind == K::LayoutType) return static_cast<c10::Layout>(i);
    if (kind == K::MemoryFormatType) return static_cast<c10::MemoryFormat>(i);
    return i;
  }
  if (v.isDouble()) return v.toDouble();
  if (v.isComplexDouble()) return std::complex<double>(v.toComplexDouble());
  if (v.isString()) return v.toStringRef();
  if (v.isDevice()) return v.toDevice();
  if (v.isList()) {
    const auto elem = kind == K::ListType ? unwrap_optional(t)->castRaw<c10::ListType>()->getElementType()
                                          : c10::TypePtr(c10::AnyType::get());
    argument::list_type out;
    for (const auto& e : v.toListRef()) out.push_back(from_ivalue(e, elem));
    return out;
  }
  throw schema_error("xport.schema.default", "unsupported default value " + v.tagKind());
}

/// A Python number passed where a Tensor is expected: a 0-dim CPU tensor flagged as a wrapped
/// number, so type promotion treats it as the scalar it is.
/// Made without the dispatcher, so that no capture records it.
inline at::Tensor wrapped_number(const argument& a) {
  at::Tensor t = a.is_int()      ? at::detail::scalar_tensor_static(a.as_int(), c10::kLong, c10::kCPU)
                 : a.is_double() ? at::detail::scalar_tensor_static(a.as_double(), c10::kDouble, c10::kCPU)
                 : a.is_complex()
                     ? at::detail::scalar_tensor_static(c10::complex<double>(a.as_complex()), c10::kComplexDouble, c10::kCPU)
                     : at::detail::scalar_tensor_static(a.as_bool(), c10::kBool, c10::kCPU);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

/// A number computed at run time (a symbolic size, a sym_int value) passed where a Tensor is
/// expected: the wrapped-number tensor Python's binding makes of it; anything else unchanged.
inline c10::IValue wrapped_number(c10::IValue v) {
  if (v.isInt()) return wrapped_number(argument(v.toInt()));
  if (v.isDouble()) return wrapped_number(argument(v.toDouble()));
  if (v.isBool()) return wrapped_number(argument(v.toBool()));
  if (v.isComplexDouble()) return wrapped_number(argument(std::complex<double>(v.toComplexDouble())));
  return v;
}

/// `int[2] stride` given as `[1]` (what at::conv2d(x, w, b, 1) passes) is `[1, 1]`: one
/// spelling per value, so equal calls compare, hash and print equal.
inline void expand_fixed_list(argument& a, const c10::Argument& param) {
  const auto n = param.N();
  if (!n || *n <= 1 || !a.is_list() || a.as_list().size() != 1) return;
  argument one = a.as_list()[0];
  a = argument::list_type(static_cast<std::size_t>(*n), one);
}

/// A schema default as an argument (fixed-size lists expanded).
inline argument default_argument(const c10::Argument& param) {
  argument a = from_ivalue(*param.default_value(), param.real_type());
  expand_fixed_list(a, param);
  return a;
}

/// The IValue of SymFloat or SymBool `s` whose value is `v`: a double, or a bool.
inline c10::IValue scalar_ivalue(const sym_scalar& s, double v) {
  return s.is_bool() ? c10::IValue(v != 0) : c10::IValue(v);
}

/// Compiles a subgraph into the capsule a control-flow kernel receives (set by
/// run/interpreter.hpp, which every build of xport includes).
inline c10::IValue (*subgraph_compiler)(const subgraph&) = nullptr;

/// The IValue a subgraph argument is passed as: its compiled form (see subgraph_fn).
inline c10::IValue subgraph_ivalue(const subgraph& g) {
  if (!subgraph_compiler)
    throw graph_error("xport.argument.subgraph", "subgraph '" + g.name + "' cannot be called: include "
                                                 "<xport/run/interpreter.hpp>, which compiles subgraphs");
  return subgraph_compiler(g);
}

/// A bound constant argument as the IValue the dispatcher expects for schema type `t`.
/// Values (graph operands) are looked up with `lookup(value) -> c10::IValue`.
template <class Lookup>
c10::IValue to_ivalue(const argument& a, const c10::TypePtr& t, Lookup&& lookup) {
  using K = c10::TypeKind;
  if (t->kind() == K::TensorType && (a.is_int() || a.is_double() || a.is_bool() || a.is_complex())) return wrapped_number(a);
  if (t->kind() == K::TensorType && a.is_symbolic()) return wrapped_number(c10::IValue(a.as_sym().hint()));
  if (t->kind() == K::TensorType && a.is_scalar()) return wrapped_number(scalar_ivalue(a.as_scalar(), a.as_scalar().hint()));
  if (t->kind() == K::TensorType && a.is_value() && a.as_value() && a.as_value().kind() != value_kind::tensor)
    return wrapped_number(lookup(a.as_value()));
  switch (a.type()) {
    case argument::kind::none: return {};
    case argument::kind::boolean: return a.as_bool();
    case argument::kind::integer: return a.as_int();
    case argument::kind::floating: return a.as_double();
    case argument::kind::complex: return c10::complex<double>(a.as_complex());
    case argument::kind::string: return a.as_string();
    case argument::kind::dtype: return a.as_dtype();
    case argument::kind::device: return a.as_device();
    case argument::kind::layout: return a.as_layout();
    case argument::kind::memory_format: return a.as_memory_format();
    case argument::kind::value: return lookup(a.as_value());
    case argument::kind::symbolic: return a.as_sym().hint();  // the example value (meta runs)
    case argument::kind::scalar: return scalar_ivalue(a.as_scalar(), a.as_scalar().hint());
    case argument::kind::graph: return subgraph_ivalue(*a.as_graph());
    case argument::kind::list: break;
  }
  const auto lt = unwrap_optional(t);
  const auto elem = lt->kind() == K::ListType ? lt->castRaw<c10::ListType>()->getElementType()
                                              : c10::TypePtr(c10::AnyType::get());
  const auto& items = a.as_list();
  switch (elem->kind()) {
    case K::IntType:
    case K::SymIntType: {
      bool all_const = true;
      for (const auto& e : items) all_const = all_const && e.is_int();
      if (all_const) {
        c10::List<std::int64_t> l;
        l.reserve(items.size());
        for (const auto& e : items) l.push_back(e.as_int());
        return l;
      }
      c10::List<std::int64_t> l;
      for (const auto& e : items)
        l.push_back(e.is_int() ? e.as_int() : e.is_symbolic() ? e.as_sym().hint() : lookup(e.as_value()).toInt());
      return l;
    }
    case K::FloatType: {
      c10::List<double> l;
      for (const auto& e : items) l.push_back(e.is_double() ? e.as_double() : static_cast<double>(e.as_int()));
      return l;
    }
    case K::BoolType: {
      c10::List<bool> l;
      for (const auto& e : items) l.push_back(e.as_bool());
      return l;
    }
    case K::TensorType: {
      c10::List<at::Tensor> l;
      l.reserve(items.size());
      for (const auto& e : items) l.push_back(lookup(e.as_value()).toTensor());
      return l;
    }
    case K::OptionalType: {
      c10::List<c10::optional<at::Tensor>> l;
      l.reserve(items.size());
      for (const auto& e : items) {
        if (e.is_none()) l.push_back(c10::nullopt);
        else l.push_back(lookup(e.as_value()).toTensor());
      }
      return l;
    }
    default: {
      c10::impl::GenericList l(c10::AnyType::get());
      for (const auto& e : items) l.push_back(to_ivalue(e, elem, lookup));
      return l;
    }
  }
}

/// The call form (Note [Call forms], ir/graph.hpp) the dispatcher gives a call of `op` with
/// schema-bound `args` when it hands it to Python: positional arguments up to the last one that
/// is not its default, keyword-only ones by name where not their default. nullopt for a schema
/// of more than 64 arguments.
inline std::optional<node::call_form> default_call_form(const op_info& op, std::span<const argument> args) {
  const auto& params = op.schema().arguments();
  if (params.size() > 64 || args.size() != params.size()) return std::nullopt;
  const auto is_default = [&](std::size_t i) {
    return params[i].default_value() && default_argument(params[i]) == args[i];
  };
  node::call_form f;
  std::size_t last_pos = 0;  // one past the last positional argument given
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!params[i].kwarg_only() && !is_default(i)) last_pos = i + 1;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto bit = std::uint64_t{1} << i;
    if (!params[i].kwarg_only() && i < last_pos) f.given |= bit;
    if (params[i].kwarg_only() && !is_default(i)) f.given |= bit, f.keyword |= bit;
  }
  return f;
}

/// The schema-ordered argument list for `op`, defaults filled in.
inline std::vector<argument> bind_arguments(const op_info& op, std::vector<argument> args,
                                            std::vector<kwarg> kwargs) {
  const auto& schema = op.schema();
  const auto& params = schema.arguments();
  const auto fail = [&](const std::string& id, const std::string& what) -> void {
    throw schema_error(id, op.qualified + ": " + what + "\n  schema: " + schema_string(schema));
  };
  std::size_t n_positional = 0;
  for (const auto& p : params)
    if (!p.kwarg_only()) ++n_positional;
  if (args.size() > n_positional)
    fail("xport.schema.too_many_args",
         "takes at most " + std::to_string(n_positional) + " positional argument(s), got " +
             std::to_string(args.size()));

  std::vector<argument> bound(params.size());
  std::vector<bool> given(params.size(), false);
  for (std::size_t i = 0; i < args.size(); ++i) {
    bound[i] = std::move(args[i]);
    given[i] = true;
  }
  for (auto& kw : kwargs) {
    std::size_t i = 0;
    while (i < params.size() && params[i].name() != kw.name) ++i;
    if (i == params.size()) {
      std::string names;
      for (const auto& p : params) names += (names.empty() ? "" : ", ") + p.name();
      fail("xport.schema.unknown_kwarg",
           "has no argument named '" + kw.name + "' (arguments: " + names + ")");
    }
    if (given[i]) fail("xport.schema.duplicate_arg", "argument '" + kw.name + "' given twice");
    bound[i] = std::move(kw.value);
    given[i] = true;
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (!given[i]) {
      // An optional argument without a default (`*, int? correction` in LibTorch 1.13) is None,
      // as later schemas spell it.
      if (!p.default_value() && p.real_type()->kind() == c10::TypeKind::OptionalType) continue;
      if (!p.default_value())
        fail("xport.schema.missing_arg", "missing required argument '" + p.name() + "' (" +
                                             p.real_type()->str() + ")");
      bound[i] = default_argument(p);
      continue;
    }
    expand_fixed_list(bound[i], p);
    if (!coerce(bound[i], p.real_type(), p.N()))
      fail("xport.schema.arg_type", "argument '" + p.name() + "' (position " + std::to_string(i) +
                                        ") must be " + p.real_type()->str() + ", got " +
                                        describe(bound[i]));
  }
  return bound;
}

}  // namespace detail
XPORT_END_NAMESPACE
