// xport/trace/tree.hpp: the structure of C++ inputs and outputs (torch's pytree TreeSpec).
// A program's inputs may be tensors, std::vector / std::array / std::tuple / std::pair of them,
// std::map / c10::Dict from string keys, std::optional, and nested combinations; C++ scalars
// (int64_t, int, double, float, bool) and strings are constants that export specializes, as
// torch does (the program still has a placeholder for each, as torch's has). `flatten` lists the
// tensor leaves and records a treespec; `unflatten` rebuilds a C++ value of the same type from a
// spec and leaves. Any other type is a compile-time error naming it.
#pragma once

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <map>          // std::map
#include <optional>     // std::optional
#include <string>       // std::string
#include <tuple>        // std::tuple
#include <type_traits>  // std::is_same_v
#include <utility>      // std::pair
#include <vector>       // std::vector

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/treespec.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

template <class T>
inline constexpr bool dependent_false = false;

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};
template <class T>
struct is_tuple_like : std::false_type {};
template <class... Ts>
struct is_tuple_like<std::tuple<Ts...>> : std::true_type {};
template <class A, class B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
#if !XPORT_TORCH_VERSION_AT_LEAST(2, 1)
template <class T>
struct is_optional<c10::optional<T>> : std::true_type {};  // a distinct type before 2.1
#endif
template <class T>
struct is_string_map : std::false_type {};
template <class V, class C, class A>
struct is_string_map<std::map<std::string, V, C, A>> : std::true_type {};
template <class T>
struct is_c10_dict : std::false_type {};
template <class V>
struct is_c10_dict<c10::Dict<std::string, V>> : std::true_type {};

template <class T>
inline constexpr bool is_scalar_leaf = std::is_same_v<T, bool> || std::is_integral_v<T> ||
                                       std::is_floating_point_v<T>;

/// at::Tensor, or a tensor type of a front end (xport::sym_tensor) that declares itself a leaf.
template <class T>
concept tensor_leaf = std::is_same_v<T, at::Tensor> || requires { typename T::xport_tensor_leaf; };

/// Whether T can be an input or output of an exported program (see flatten_into).
template <class T>
constexpr bool is_tree_type() {
  if constexpr (tensor_leaf<T> || is_scalar_leaf<T> || std::is_same_v<T, std::string>) return true;
  else if constexpr (is_optional<T>::value || is_vector<T>::value || is_std_array<T>::value)
    return is_tree_type<typename T::value_type>();
  else if constexpr (is_tuple_like<T>::value)
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (is_tree_type<std::tuple_element_t<I, T>>() && ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  else if constexpr (is_string_map<T>::value || is_c10_dict<T>::value)
    return is_tree_type<typename T::mapped_type>();
  else return false;
}

/// Visits a value's tensor leaves (in order) and returns its treespec.
template <class T, class F>
treespec flatten_into(const T& x, F& on_tensor) {
  if constexpr (tensor_leaf<T>) {
    // An undefined at::Tensor is C++'s None (MultiheadAttention's weights without need_weights):
    // torch.export returns None there, and so does the program.
    if constexpr (std::is_same_v<T, at::Tensor>)
      if (!x.defined()) return treespec::of(treespec::kind::none);
    on_tensor(x);
    return treespec::leaf();
  } else if constexpr (std::is_same_v<T, bool>) {
    return treespec::constant(x);
  } else if constexpr (std::is_integral_v<T>) {
    return treespec::constant(static_cast<std::int64_t>(x));
  } else if constexpr (std::is_floating_point_v<T>) {
    return treespec::constant(static_cast<double>(x));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return treespec::constant(x);
  } else if constexpr (is_optional<T>::value) {
    if (!x) return treespec::of(treespec::kind::none);
    return flatten_into(*x, on_tensor);
  } else if constexpr (is_vector<T>::value || is_std_array<T>::value) {
    treespec s = treespec::of(treespec::kind::list);
    for (const auto& e : x) s.children.push_back(flatten_into(e, on_tensor));
    return s;
  } else if constexpr (is_tuple_like<T>::value) {
    treespec s = treespec::of(treespec::kind::tuple);
    std::apply([&](const auto&... es) { (s.children.push_back(flatten_into(es, on_tensor)), ...); }, x);
    return s;
  } else if constexpr (is_string_map<T>::value) {
    treespec s = treespec::of(treespec::kind::dict);
    for (const auto& [k, v] : x) {
      s.keys.push_back(k);
      s.children.push_back(flatten_into(v, on_tensor));
    }
    return s;
  } else if constexpr (is_c10_dict<T>::value) {
    treespec s = treespec::of(treespec::kind::dict);
    for (const auto& e : x) {
      s.keys.push_back(e.key());
      s.children.push_back(flatten_into(e.value(), on_tensor));
    }
    return s;
  } else {
    static_assert(dependent_false<T>,
                  "xport: this type cannot be an input or output of an exported program. Supported: "
                  "at::Tensor; int64_t, int, double, float, bool and std::string (specialized as "
                  "constants); std::optional, std::vector, std::array, std::tuple, std::pair, "
                  "std::map<std::string, T> and c10::Dict<std::string, T> of supported types. The "
                  "offending type is T in the instantiation below.");
    return {};
  }
}

/// A copy of `x` with every tensor leaf replaced by f(leaf).
template <class T, class F>
T map_tensors(const T& x, F& f) {
  if constexpr (tensor_leaf<T>) {
    return f(x);
  } else if constexpr (is_scalar_leaf<T> || std::is_same_v<T, std::string>) {
    return x;
  } else if constexpr (is_optional<T>::value) {
    if (!x) return x;
    return T(map_tensors(*x, f));
  } else if constexpr (is_vector<T>::value) {
    T out;
    out.reserve(x.size());
    for (const auto& e : x) out.push_back(map_tensors(e, f));
    return out;
  } else if constexpr (is_std_array<T>::value) {
    T out;
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = map_tensors(x[i], f);
    return out;
  } else if constexpr (is_tuple_like<T>::value) {
    // braces: the leaves are mapped in order (f may count them)
    return std::apply([&](const auto&... es) { return T{map_tensors(es, f)...}; }, x);
  } else if constexpr (is_string_map<T>::value) {
    T out;
    for (const auto& [k, v] : x) out.emplace(k, map_tensors(v, f));
    return out;
  } else if constexpr (is_c10_dict<T>::value) {
    T out;
    for (const auto& e : x) out.insert(e.key(), map_tensors(e.value(), f));
    return out;
  } else {
    static_assert(dependent_false<T>, "xport: unsupported input type (see flatten_into)");
    return x;
  }
}

[[noreturn]] inline void structure_mismatch(const treespec& s, const std::string& what) {
  throw error("xport.tree.mismatch", "the program's structure " + s.str() + " cannot be " + what);
}

/// Builds a T from `spec` and the tensor leaves starting at `it`.
template <class T, class It>
T unflatten_from(const treespec& s, It& it) {
  using K = treespec::kind;
  if constexpr (std::is_same_v<T, at::Tensor>) {
    if (s.type == K::none || (s.type == K::constant && s.value.is_none())) return at::Tensor();
    if (s.type != K::leaf) structure_mismatch(s, "returned as one at::Tensor");
    return *it++;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (s.type != K::constant || !s.value.is_bool()) structure_mismatch(s, "returned as a bool");
    return s.value.as_bool();
  } else if constexpr (std::is_integral_v<T>) {
    if (s.type != K::constant || !s.value.is_int()) structure_mismatch(s, "returned as an integer");
    return static_cast<T>(s.value.as_int());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (s.type != K::constant || !(s.value.is_double() || s.value.is_int()))
      structure_mismatch(s, "returned as a floating-point number");
    return static_cast<T>(s.value.is_double() ? s.value.as_double() : static_cast<double>(s.value.as_int()));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (s.type != K::constant || !s.value.is_string()) structure_mismatch(s, "returned as a string");
    return s.value.as_string();
  } else if constexpr (is_optional<T>::value) {
    if (s.type == K::none || (s.type == K::constant && s.value.is_none())) return T();
    return T(unflatten_from<typename T::value_type>(s, it));
  } else if constexpr (is_vector<T>::value) {
    if (s.type != K::list && s.type != K::tuple) structure_mismatch(s, "returned as a std::vector");
    T out;
    for (const auto& c : s.children) out.push_back(unflatten_from<typename T::value_type>(c, it));
    return out;
  } else if constexpr (is_std_array<T>::value) {
    T out;
    if ((s.type != K::list && s.type != K::tuple) || s.children.size() != out.size())
      structure_mismatch(s, "returned as a std::array of " + std::to_string(out.size()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = unflatten_from<typename T::value_type>(s.children[i], it);
    return out;
  } else if constexpr (is_tuple_like<T>::value) {
    constexpr std::size_t n = std::tuple_size_v<T>;
    if ((s.type != K::tuple && s.type != K::list) || s.children.size() != n)
      structure_mismatch(s, "returned as a tuple of " + std::to_string(n));
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return T{unflatten_from<std::tuple_element_t<I, T>>(s.children[I], it)...};
    }(std::make_index_sequence<n>{});
  } else if constexpr (is_string_map<T>::value || is_c10_dict<T>::value) {
    if (s.type != K::dict) structure_mismatch(s, "returned as a map");
    T out;
    for (std::size_t i = 0; i < s.children.size(); ++i) {
      auto v = unflatten_from<typename T::mapped_type>(s.children[i], it);
      if constexpr (is_c10_dict<T>::value) out.insert(s.keys[i], std::move(v));
      else out.emplace(s.keys[i], std::move(v));
    }
    return out;
  } else {
    static_assert(dependent_false<T>, "xport: unsupported output type (see flatten_into)");
  }
}

/// `x_b_0`: a readable name for each tensor leaf under `prefix` (torch.export's pytree naming:
/// keys lower-cased, non-alphanumerics as `_`); for constant leaves too with `constants`.
inline void leaf_names(const treespec& s, const std::string& prefix, std::vector<std::string>& out,
                       bool constants = false) {
  switch (s.type) {
    case treespec::kind::leaf: out.push_back(prefix); return;
    case treespec::kind::constant:
      if (constants) out.push_back(prefix);
      return;
    case treespec::kind::tuple:
    case treespec::kind::list:
      for (std::size_t i = 0; i < s.children.size(); ++i)
        leaf_names(s.children[i], prefix + "_" + std::to_string(i), out, constants);
      return;
    case treespec::kind::dict:
      for (std::size_t i = 0; i < s.children.size(); ++i) {
        std::string k;
        for (char c : s.keys[i]) {
          const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
          k += alnum ? static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c) : '_';
        }
        leaf_names(s.children[i], prefix + "_" + k, out, constants);
      }
      return;
    default: return;
  }
}

}  // namespace detail

/// The treespec of `x` and its tensor leaves, in order.
template <class T>
treespec flatten(const T& x, std::vector<at::Tensor>& leaves) {
  auto push = [&](const at::Tensor& t) { leaves.push_back(t); };
  return detail::flatten_into(x, push);
}

/// A T rebuilt from `spec` and `leaves` (throws when the structure does not fit T).
template <class T>
T unflatten(const treespec& spec, const std::vector<at::Tensor>& leaves) {
  auto it = leaves.begin();
  return detail::unflatten_from<T>(spec, it);
}

XPORT_END_NAMESPACE
