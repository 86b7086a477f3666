// xport/ir/treespec.hpp: the structure of a program's inputs and outputs (torch's TreeSpec).
// Tensor leaves, constant leaves (specialized C++ scalars and strings), None, and tuple / list /
// dict containers. A program's in_spec is the tuple of the forward's arguments, which may name
// them (torch's forward_arg_names) and mark the last ones as keyword arguments (programs
// written by torch with kwargs). Building specs from C++ values lives in trace/tree.hpp.
#pragma once

#include <cstdint>  // std::uint8_t
#include <string>   // std::string
#include <vector>   // std::vector

#include <xport/config.hpp>
#include <xport/detail/python_repr.hpp>
#include <xport/ir/graph.hpp>

XPORT_BEGIN_NAMESPACE

/// The structure of a (nested) C++ value: tensor leaves, constant leaves, and containers.
struct treespec {
  enum class kind : std::uint8_t { leaf, constant, none, tuple, list, dict };
  kind type = kind::leaf;
  argument value;                 ///< a constant leaf's value
  /// Dict keys, in iteration order. At the top of an in_spec (a tuple of the arguments): the
  /// arguments' names, one per child, or none when they are not known.
  std::vector<std::string> keys;
  std::vector<treespec> children;
  /// At the top of an in_spec: how many of the last children are keyword arguments.
  std::size_t num_kwargs = 0;

  static treespec leaf() { return {}; }
  static treespec constant(argument v) { return {kind::constant, std::move(v), {}, {}, 0}; }
  static treespec of(kind k, std::vector<treespec> children = {}, std::vector<std::string> keys = {}) {
    return {k, {}, std::move(keys), std::move(children), 0};
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
    if (type == kind::dict ? keys != o.keys : !(value == o.value)) return false;
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
        std::string s = "{";
        for (std::size_t i = 0; i < children.size(); ++i)
          s += (i ? ", " : "") + ("'" + keys[i] + "': ") + children[i].str();
        return s + "}";
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
