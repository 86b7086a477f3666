// xport/ir/treespec.hpp: the structure of a program's inputs and outputs (torch's TreeSpec).
// Tensor leaves, constant leaves (specialized C++ scalars and strings), None, and tuple / list /
// dict containers. Building specs from C++ values lives in trace/tree.hpp.
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
  std::vector<std::string> keys;  ///< dict keys, in iteration order
  std::vector<treespec> children;

  static treespec leaf() { return {}; }
  static treespec constant(argument v) { return {kind::constant, std::move(v), {}, {}}; }

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
        for (std::size_t i = 0; i < children.size(); ++i) s += (i ? ", " : "") + children[i].str();
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
    if (value.is_bool()) return value.as_bool() ? "True" : "False";
    if (value.is_int()) return std::to_string(value.as_int());
    if (value.is_double()) return detail::python_float_repr(value.as_double());
    return "?";
  }
};

XPORT_END_NAMESPACE
