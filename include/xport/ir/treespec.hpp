// xport/ir/treespec.hpp: the structure of a program's inputs and outputs (torch's TreeSpec).
// Tensor leaves, constant leaves (specialized C++ scalars and strings), None, tuple / list /
// dict containers, and pytree nodes of types C++ does not have (a dataclass, a Hugging Face
// ModelOutput, a namedtuple, a user's registered type), kept by type name and context so that
// a program torch wrote saves back unchanged. A program's in_spec is the tuple of the forward's
// arguments, which may name them (torch's forward_arg_names) and mark the last ones as keyword
// arguments (programs written by torch with kwargs). Building specs from C++ values lives in
// trace/tree.hpp.
#pragma once

#include <cstdint>  // std::uint8_t
#include <optional>  // std::optional
#include <string>   // std::string
#include <string_view>  // std::string_view
#include <vector>   // std::vector

#include <xport/config.hpp>
#include <xport/detail/python_repr.hpp>
#include <xport/ir/graph.hpp>

XPORT_BEGIN_NAMESPACE

/// The structure of a (nested) C++ value: tensor leaves, constant leaves, and containers.
///
/// Note [Pytree node types]: torch names every container by its serialized type name and keeps
/// a context beside its children (a dict's keys, a dataclass's field names, a namedtuple's type).
/// xport reads the builtin ones as tuple / list / dict / None; a dict or list of another type
/// (`collections.OrderedDict`, `collections.defaultdict`, fx's immutable ones) stays a dict or a
/// list that remembers its type and context. Any other type is a `node`: its children in order,
/// with field names where its context gives one per child (a dataclass's `[[fields], [None
/// fields]]`, a ModelOutput's `[keys]`); a namedtuple's context names its type, not its fields,
/// so its children are positional. Saving writes the type name and context back as read.
struct treespec {
  enum class kind : std::uint8_t { leaf, constant, none, tuple, list, dict, node };
  kind type = kind::leaf;
  argument value;                 ///< a constant leaf's value
  /// Dict keys, in iteration order; a node's field names (empty when its context names none).
  /// At the top of an in_spec (a tuple of the arguments): the arguments' names, one per child,
  /// or none when they are not known.
  std::vector<std::string> keys;
  std::vector<treespec> children;
  /// At the top of an in_spec: how many of the last children are keyword arguments.
  std::size_t num_kwargs = 0;
  /// torch's serialized type name (`transformers.modeling_outputs.CausalLMOutputWithPast`,
  /// `collections.OrderedDict`); empty for the builtin tuple, list, dict and None.
  std::string type_name;
  /// The context as torch serialized it, kept to be written back unchanged: the string its
  /// `to_dumpable_context` gave (JSON text for most types, `[["a", "b"], ["c"]]` for a dataclass;
  /// a namedtuple's type name), or, where that was another JSON value (a defaultdict's object),
  /// its JSON text with `context_is_json` set. Empty when xport writes its own (builtins).
  std::string context;
  bool context_is_json = false;

  static treespec leaf() { return {}; }
  static treespec constant(argument v) { return {kind::constant, std::move(v), {}, {}, 0, {}, {}, false}; }
  static treespec of(kind k, std::vector<treespec> children = {}, std::vector<std::string> keys = {}) {
    return {k, {}, std::move(keys), std::move(children), 0, {}, {}, false};
  }
  /// A pytree node of type `type_name` (see Note [Pytree node types]).
  static treespec node(std::string type_name, std::string context, std::vector<treespec> children,
                       std::vector<std::string> fields = {}) {
    return {kind::node, {}, std::move(fields), std::move(children), 0, std::move(type_name), std::move(context), false};
  }

  /// The child under key or field `name`, or null (dicts and nodes with field names).
  [[nodiscard]] const treespec* child(std::string_view name) const {
    for (std::size_t i = 0; i < keys.size() && i < children.size(); ++i)
      if (keys[i] == name) return &children[i];
    return nullptr;
  }
  /// The type's last dotted part (`CausalLMOutputWithPast`), or the builtin's name.
  [[nodiscard]] std::string short_type_name() const {
    if (!type_name.empty()) return type_name.substr(type_name.rfind('.') + 1);
    switch (type) {
      case kind::tuple: return "tuple";
      case kind::list: return "list";
      case kind::dict: return "dict";
      case kind::none: return "None";
      default: return "";
    }
  }

  /// Number of leaves, constant leaves included: a program has one placeholder per leaf.
  [[nodiscard]] std::size_t num_all_leaves() const {
    if (type == kind::leaf || type == kind::constant) return 1;
    std::size_t n = 0;
    for (const auto& c : children) n += c.num_all_leaves();
    return n;
  }

  /// The same structure, argument names aside (what a call must match).
  [[nodiscard]] bool same_structure(const treespec& o) const {
    if (type != o.type || num_kwargs != o.num_kwargs || children.size() != o.children.size()) return false;
    if (type == kind::dict || type == kind::node ? keys != o.keys : !(value == o.value)) return false;
    if (type == kind::node && (type_name != o.type_name || context != o.context || context_is_json != o.context_is_json))
      return false;
    for (std::size_t i = 0; i < children.size(); ++i)
      if (!children[i].same_structure(o.children[i])) return false;
    return true;
  }

  /// Number of tensor leaves.
  [[nodiscard]] std::size_t num_leaves() const {
    if (type == kind::leaf) return 1;
    std::size_t n = 0;
    for (const auto& c : children) n += c.num_leaves();
    return n;
  }

  /// torch-like text: `(*, [*, *], {'a': *}, 3, None)`.
  [[nodiscard]] std::string str() const {
    switch (type) {
      case kind::leaf: return "*";
      case kind::constant: return value.is_string() ? detail::python_str_repr(value.as_string()) : constant_text();
      case kind::none: return "None";
      case kind::tuple:
      case kind::list: {
        std::string s = type == kind::tuple ? "(" : "[";
        for (std::size_t i = 0; i < children.size(); ++i) {
          const bool kwarg = i + num_kwargs >= children.size() && i < keys.size();
          s += (i ? ", " : "") + (kwarg ? keys[i] + "=" : std::string()) + children[i].str();
        }
        if (type == kind::tuple && children.size() == 1) s += ",";
        return s + (type == kind::tuple ? ")" : "]");
      }
      case kind::dict: {
        std::string s = type_name.empty() ? "{" : short_type_name() + "({";
        for (std::size_t i = 0; i < children.size(); ++i)
          s += (i ? ", " : "") + ("'" + keys[i] + "': ") + children[i].str();
        return s + (type_name.empty() ? "}" : "})");
      }
      case kind::node: {  // `CausalLMOutputWithPast(logits=*)`, a namedtuple `Point(*, *)`
        std::string s = short_type_name() + "(";
        for (std::size_t i = 0; i < children.size(); ++i)
          s += (i ? ", " : "") + (i < keys.size() ? keys[i] + "=" : std::string()) + children[i].str();
        return s + ")";
      }
    }
    return "?";
  }

  friend bool operator==(const treespec&, const treespec&) = default;

 private:
  [[nodiscard]] std::string constant_text() const {
    if (value.is_none()) return "None";
    if (value.is_bool()) return value.as_bool() ? "True" : "False";
    if (value.is_int()) return std::to_string(value.as_int());
    if (value.is_double()) return detail::python_float_repr(value.as_double());
    return "?";
  }
};

XPORT_END_NAMESPACE
