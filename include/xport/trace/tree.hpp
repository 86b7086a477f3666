// xport/trace/tree.hpp: the structure of C++ inputs and outputs (torch's pytree TreeSpec).
// A program's inputs may be tensors, std::vector / std::array / std::tuple / std::pair of them,
// std::map / c10::Dict from string keys, std::optional, aggregates registered with
// XPORT_DATACLASS (torch.export.register_dataclass), and nested combinations; C++ scalars
// (int64_t, int, double, float, bool) and strings are constants that export specializes, as
// torch does (the program still has a placeholder for each, as torch's has). `flatten` lists the
// tensor leaves and records a treespec; `unflatten` rebuilds a C++ value of the same type from a
// spec and leaves, or an xport::tree_value, which holds any structure (a loaded program's
// ModelOutput) and gives its fields by name. Any other type is a compile-time error naming it.
#pragma once

#include <algorithm>    // std::find
#include <array>        // std::array
#include <concepts>     // std::convertible_to
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <map>          // std::map
#include <optional>     // std::optional
#include <memory>       // std::shared_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view
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

/// Specialized by XPORT_DATACLASS (below) for a C++ aggregate that is a pytree node, as
/// `torch.export.register_dataclass(T, serialized_type_name=...)` makes a Python dataclass one.
template <class T>
struct dataclass_traits;

/// Whether XPORT_DATACLASS registered T.
template <class T>
concept registered_dataclass = requires(const T& x) {
  { dataclass_traits<T>::type_name } -> std::convertible_to<std::string_view>;
  dataclass_traits<T>::fields(x);
};

/// A value of any program structure: a treespec with its tensors. What a program's result is in
/// C++ when it has a type C++ does not (a Hugging Face ModelOutput, a dataclass, a namedtuple):
///   xport::callable<xport::tree_value(at::Tensor, bool)> f(program);
///   at::Tensor logits = f(ids, false)["logits"].tensor();
/// A node gives its children by index, and by field name where the type has field names; a dict
/// by key. Copies share the tensors.
class tree_value {
 public:
  tree_value() : tree_value(treespec::of(treespec::kind::none), {}) {}
  /// `leaves` are the spec's tensor leaves, in order.
  tree_value(treespec spec, std::vector<at::Tensor> leaves)
      : root_(std::make_shared<const treespec>(std::move(spec))),
        leaves_(std::make_shared<const std::vector<at::Tensor>>(std::move(leaves))),
        at_(root_.get()) {
    if (root_->num_leaves() != leaves_->size())
      throw error("xport.tree.leaves", "the structure " + root_->str() + " has " + std::to_string(root_->num_leaves()) +
                                           " tensor leaves, but " + std::to_string(leaves_->size()) + " tensors were given");
  }

  [[nodiscard]] const treespec& spec() const noexcept { return *at_; }
  [[nodiscard]] treespec::kind kind() const noexcept { return at_->type; }
  /// torch's type name (`transformers.modeling_outputs.CausalLMOutputWithPast`), or the builtin's
  /// (`tuple`, `list`, `dict`, `None`); empty for a leaf.
  [[nodiscard]] std::string type_name() const { return at_->type_name.empty() ? at_->short_type_name() : at_->type_name; }
  /// The children's count (0 for a leaf).
  [[nodiscard]] std::size_t size() const noexcept { return at_->children.size(); }
  /// A dict's keys or a node's field names, in order (empty where it has none).
  [[nodiscard]] const std::vector<std::string>& keys() const noexcept { return at_->keys; }
  [[nodiscard]] bool contains(std::string_view key) const { return has_keys() && at_->child(key) != nullptr; }

  [[nodiscard]] tree_value operator[](std::size_t i) const {
    if (i >= size())
      throw error("xport.tree.index", "index " + std::to_string(i) + " is out of range for " + at_->str() + " (" +
                                          std::to_string(size()) + " children)");
    return child(i);
  }
  [[nodiscard]] tree_value operator[](std::string_view key) const {
    if (has_keys())
      for (std::size_t i = 0; i < at_->keys.size(); ++i)
        if (at_->keys[i] == key) return child(i);
    std::string have;
    if (has_keys())
      for (const auto& k : at_->keys) have += (have.empty() ? "'" : ", '") + k + "'";
    throw error("xport.tree.field", "no field '" + std::string(key) + "' in " + at_->str() +
                                        (have.empty() ? std::string(" (it has no field names: index it by position)")
                                                      : " (it has " + have + ")"));
  }

  [[nodiscard]] bool is_tensor() const noexcept { return at_->type == treespec::kind::leaf; }
  [[nodiscard]] bool is_none() const noexcept {
    return at_->type == treespec::kind::none || (at_->type == treespec::kind::constant && at_->value.is_none());
  }
  /// A tensor leaf's tensor.
  [[nodiscard]] const at::Tensor& tensor() const {
    if (!is_tensor()) throw error("xport.tree.not_a_tensor", at_->str() + " is not a tensor");
    return (*leaves_)[first_];
  }
  /// A constant leaf's value (a number, a string, None).
  [[nodiscard]] const argument& constant() const {
    if (at_->type != treespec::kind::constant) throw error("xport.tree.not_a_constant", at_->str() + " is not a constant");
    return at_->value;
  }
  /// The tensors under this value, in order.
  [[nodiscard]] std::vector<at::Tensor> leaves() const {
    const auto b = leaves_->begin() + static_cast<std::ptrdiff_t>(first_);
    return {b, b + static_cast<std::ptrdiff_t>(at_->num_leaves())};
  }
  [[nodiscard]] std::string str() const { return at_->str(); }

 private:
  [[nodiscard]] bool has_keys() const noexcept {
    return (at_->type == treespec::kind::dict || at_->type == treespec::kind::node) && at_->keys.size() == at_->children.size();
  }
  [[nodiscard]] tree_value child(std::size_t i) const {
    tree_value v = *this;
    for (std::size_t j = 0; j < i; ++j) v.first_ += at_->children[j].num_leaves();
    v.at_ = &at_->children[i];
    return v;
  }

  std::shared_ptr<const treespec> root_;
  std::shared_ptr<const std::vector<at::Tensor>> leaves_;
  const treespec* at_ = nullptr;
  std::size_t first_ = 0;
};

namespace detail {

template <class T>
inline constexpr bool dependent_false = false;

/// The field names XPORT_DATACLASS was given, from its stringized list (`logits, loss`).
inline std::vector<std::string> split_field_names(std::string_view list) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : list) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != ' ' && c != '\t' && c != '\n') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

/// torch's dataclass context, as json.dumps writes it: `[["a", "b"], ["c"]]` (fields that hold a
/// value, then fields that hold None).
inline std::string dataclass_context(const std::vector<std::string>& present, const std::vector<std::string>& absent) {
  const auto list = [](const std::vector<std::string>& xs) {
    std::string s = "[";
    for (std::size_t i = 0; i < xs.size(); ++i) s += (i ? ", \"" : "\"") + xs[i] + "\"";
    return s + "]";
  };
  return "[" + list(present) + ", " + list(absent) + "]";
}

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
  else if constexpr (registered_dataclass<T>)
    return []<class... F>(std::type_identity<std::tuple<F...>>) {
      return (is_tree_type<std::remove_cvref_t<F>>() && ...);
    }(std::type_identity<decltype(dataclass_traits<T>::fields(std::declval<const T&>()))>{});
  else return false;
}

/// Whether a dataclass field holds None (an undefined tensor, an empty optional): torch leaves
/// such fields out of the children and names them in the context's second list.
template <class T>
bool is_none_field(const T& x) {
  if constexpr (std::is_same_v<T, at::Tensor>) return !x.defined();
  else if constexpr (is_optional<T>::value) return !x.has_value();
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
  } else if constexpr (registered_dataclass<T>) {
    // torch's register_dataclass flattening: the fields holding a value are the children
    static const auto names = split_field_names(dataclass_traits<T>::field_list);
    std::vector<std::string> present, absent;
    std::vector<treespec> children;
    std::size_t i = 0;
    const auto one = [&](const auto& f) {
      if (is_none_field(f)) absent.push_back(names[i]);
      else present.push_back(names[i]), children.push_back(flatten_into(f, on_tensor));
      ++i;
    };
    std::apply([&](const auto&... f) { (one(f), ...); }, dataclass_traits<T>::fields(x));
    auto context = dataclass_context(present, absent);
    return treespec::node(std::string(dataclass_traits<T>::type_name), std::move(context), std::move(children), std::move(present));
  } else {
    static_assert(dependent_false<T>,
                  "xport: this type cannot be an input or output of an exported program. Supported: "
                  "at::Tensor; int64_t, int, double, float, bool and std::string (specialized as "
                  "constants); std::optional, std::vector, std::array, std::tuple, std::pair, "
                  "std::map<std::string, T> and c10::Dict<std::string, T> of supported types, and "
                  "aggregates registered with XPORT_DATACLASS. The offending type is T in the "
                  "instantiation below.");
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
  } else if constexpr (registered_dataclass<T>) {
    T out = x;
    const auto one = [&](auto& field) {
      if (!is_none_field(field)) field = map_tensors(field, f);
    };
    std::apply([&](auto&... fields) { (one(fields), ...); }, dataclass_traits<T>::fields(out));
    return out;
  } else {
    static_assert(dependent_false<T>, "xport: unsupported input type (see flatten_into)");
    return x;
  }
}

[[noreturn]] inline void structure_mismatch(const treespec& s, const std::string& what) {
  throw error("xport.tree.mismatch", "the program's structure " + s.str() + " cannot be " + what);
}

template <class T, class It>
T unflatten_from(const treespec& s, It& it);

/// A registered dataclass from a node or a dict, field by field by name (in any order: each
/// child's leaves are found by position in the spec). A field the spec lacks must be able to
/// hold None; a field of the spec that T lacks is an error naming it.
template <class T, class It>
T unflatten_dataclass(const treespec& s, It& it) {
  using K = treespec::kind;
  static const auto names = split_field_names(dataclass_traits<T>::field_list);
  const std::string type(dataclass_traits<T>::type_name);
  if ((s.type != K::node && s.type != K::dict) || s.keys.size() != s.children.size())
    structure_mismatch(s, "returned as " + type + " (it has no field names)");
  for (const auto& k : s.keys)
    if (std::find(names.begin(), names.end(), k) == names.end())
      structure_mismatch(s, "returned as " + type + ", which has no field '" + k + "'");
  std::vector<It> starts;
  It next = it;
  for (const auto& c : s.children) {
    starts.push_back(next);
    next += static_cast<std::ptrdiff_t>(c.num_leaves());
  }
  T out{};
  std::size_t i = 0;
  const auto one = [&](auto& field) {
    using F = std::remove_cvref_t<decltype(field)>;
    const auto& name = names[i++];
    const auto k = static_cast<std::size_t>(std::find(s.keys.begin(), s.keys.end(), name) - s.keys.begin());
    if (k == s.keys.size()) {
      if (!std::is_same_v<F, at::Tensor> && !is_optional<F>::value)
        structure_mismatch(s, "returned as " + type + ": it has no field '" + name + "' (only an at::Tensor or a std::optional field may be absent, as None)");
      return;
    }
    It at = starts[k];
    field = unflatten_from<F>(s.children[k], at);
  };
  std::apply([&](auto&... fields) { (one(fields), ...); }, dataclass_traits<T>::fields(out));
  it = next;
  return out;
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
    if (s.type != K::list && s.type != K::tuple && s.type != K::node) structure_mismatch(s, "returned as a std::vector");
    T out;
    for (const auto& c : s.children) out.push_back(unflatten_from<typename T::value_type>(c, it));
    return out;
  } else if constexpr (is_std_array<T>::value) {
    T out;
    if ((s.type != K::list && s.type != K::tuple && s.type != K::node) || s.children.size() != out.size())
      structure_mismatch(s, "returned as a std::array of " + std::to_string(out.size()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = unflatten_from<typename T::value_type>(s.children[i], it);
    return out;
  } else if constexpr (is_tuple_like<T>::value) {
    constexpr std::size_t n = std::tuple_size_v<T>;
    if ((s.type != K::tuple && s.type != K::list && s.type != K::node) || s.children.size() != n)
      structure_mismatch(s, "returned as a tuple of " + std::to_string(n));
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return T{unflatten_from<std::tuple_element_t<I, T>>(s.children[I], it)...};
    }(std::make_index_sequence<n>{});
  } else if constexpr (is_string_map<T>::value || is_c10_dict<T>::value) {
    if (s.type != K::dict && !(s.type == K::node && s.keys.size() == s.children.size() && !s.keys.empty()))
      structure_mismatch(s, "returned as a map");
    T out;
    for (std::size_t i = 0; i < s.children.size(); ++i) {
      auto v = unflatten_from<typename T::mapped_type>(s.children[i], it);
      if constexpr (is_c10_dict<T>::value) out.insert(s.keys[i], std::move(v));
      else out.emplace(s.keys[i], std::move(v));
    }
    return out;
  } else if constexpr (std::is_same_v<T, tree_value>) {
    const auto n = static_cast<std::ptrdiff_t>(s.num_leaves());
    std::vector<at::Tensor> leaves(it, it + n);
    it += n;
    return tree_value(s, std::move(leaves));
  } else if constexpr (registered_dataclass<T>) {
    return unflatten_dataclass<T>(s, it);
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
    case treespec::kind::node:
      if (s.keys.size() != s.children.size()) {
        for (std::size_t i = 0; i < s.children.size(); ++i)
          leaf_names(s.children[i], prefix + "_" + std::to_string(i), out, constants);
        return;
      }
      [[fallthrough]];
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

/// Registers a C++ aggregate as a pytree node type, as torch.export.register_dataclass registers
/// a Python dataclass: an input or output of that type is flattened to the fields that hold a
/// value (an undefined tensor or an empty optional is None), written under `serialized_name`,
/// the name a Python user registers the twin dataclass under. List every non-static data member
/// in declaration order (a wrong count is a compile error). At global scope (the macro
/// specializes xport::dataclass_traits, which only the global namespace or xport's may do):
///   struct lm_output { at::Tensor logits; std::optional<at::Tensor> loss; };
///   XPORT_DATACLASS(lm_output, "mymodels.LMOutput", logits, loss);
#define XPORT_DATACLASS(Type, serialized_name, ...)                                          \
  template <>                                                                                \
  struct xport::dataclass_traits<Type> {                                                     \
    static constexpr std::string_view type_name = serialized_name;                           \
    static constexpr std::string_view field_list = #__VA_ARGS__;                             \
    static auto fields(Type& xport_object_) {                                                \
      auto& [__VA_ARGS__] = xport_object_;                                                   \
      return std::tie(__VA_ARGS__);                                                          \
    }                                                                                        \
    static auto fields(const Type& xport_object_) {                                          \
      const auto& [__VA_ARGS__] = xport_object_;                                             \
      return std::tie(__VA_ARGS__);                                                          \
    }                                                                                        \
  }
