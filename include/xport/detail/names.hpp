// xport/detail/names.hpp: unique value names, chosen the way torch.fx chooses them, and which
// module types are containers (no nn_module_stack frame of their own).
// `add`, `add_1`, `add_2`; Python keywords and builtins are never used bare (`sum` -> `sum_1`),
// so printed programs read exactly as torch.export prints the same program.
#pragma once

#include <algorithm>      // std::binary_search
#include <array>          // std::array
#include <cstdint>        // std::int64_t
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

// Python 3 keywords and lower-case builtins, plus the globals torch.fx registers (inf, nan,
// NoneType, torch, device, fx_pytree, pytree) and `self`. Sorted for binary search.
inline constexpr std::array<std::string_view, 126> reserved_python_names{
    "False", "None", "NoneType", "True", "__build_class__", "__debug__", "__doc__", "__import__",
    "__loader__", "__name__", "__package__", "__spec__", "abs", "aiter", "all", "and", "anext",
    "any", "as", "ascii", "assert", "async", "await", "bin", "bool", "break", "breakpoint",
    "bytearray", "bytes", "callable", "chr", "class", "classmethod", "compile", "complex",
    "continue", "copyright", "credits", "def", "del", "delattr", "device", "dict", "dir", "divmod",
    "elif", "else", "enumerate", "eval", "except", "exec", "exit", "filter", "finally", "float",
    "for", "format", "from", "frozenset", "fx_pytree", "getattr", "global", "globals", "hasattr",
    "hash", "help", "hex", "id", "if", "import", "in", "inf", "input", "int", "is", "isinstance",
    "issubclass", "iter", "lambda", "len", "license", "list", "locals", "map", "max", "memoryview",
    "min", "nan", "next", "nonlocal", "not", "object", "oct", "open", "or", "ord", "pass", "pow",
    "print", "property", "pytree", "quit", "raise", "range", "repr", "return", "reversed", "round",
    "self", "set", "setattr", "slice", "sorted", "staticmethod", "str", "sum", "super", "torch",
    "try", "tuple", "type", "vars", "while", "with", "yield", "zip"
};

inline bool is_reserved_python_name(std::string_view s) {
  if (!s.empty() && s.front() >= 'A' && s.front() <= 'Z') {
    // Exception and warning classes: every builtin starting with a capital letter other than
    // the three constants is an exception type.
    return s == "False" || s == "None" || s == "True" || s == "NoneType" ||
           s.ends_with("Error") || s.ends_with("Exception") || s.ends_with("Warning") ||
           s == "BaseException" || s == "BaseExceptionGroup" || s == "ExceptionGroup" ||
           s == "Ellipsis" || s == "NotImplemented" || s == "GeneratorExit" ||
           s == "KeyboardInterrupt" || s == "StopIteration" || s == "StopAsyncIteration" ||
           s == "SystemExit";
  }
  return std::binary_search(reserved_python_names.begin(), reserved_python_names.end(), s);
}

/// Python's keywords, and `self` (forward's first parameter): never a value's name.
inline bool is_python_keyword(std::string_view s) {
  static constexpr std::array<std::string_view, 36> keywords{
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def",
      "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is",
      "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "self", "try", "while", "with", "yield"};
  return std::binary_search(keywords.begin(), keywords.end(), s);
}

/// `_snake_case` + illegal-character cleanup of torch.fx: `pascalCase` -> `pascal_case`,
/// characters outside [0-9a-zA-Z_] -> `_`, a leading digit gets a `_` prefix.
inline std::string sanitize_name(std::string_view candidate) {
  std::string out;
  out.reserve(candidate.size() + 1);
  char prev = 0;
  bool in_bad_run = false;
  for (char c : candidate) {
    const bool lower = c >= 'a' && c <= 'z';
    const bool upper = c >= 'A' && c <= 'Z';
    const bool digit = c >= '0' && c <= '9';
    if (upper && prev >= 'a' && prev <= 'z') out += '_';
    if (lower || upper || digit || c == '_') {
      out += upper ? static_cast<char>(c - 'A' + 'a') : c;
      in_bad_run = false;
    } else if (!in_bad_run) {
      out += '_';
      in_bad_run = true;
    }
    prev = c;
  }
  if (out.empty()) out = "_unnamed";
  if (out.front() >= '0' && out.front() <= '9') out.insert(out.begin(), '_');
  return out;
}

/// Lower-case identifiers need no sanitizing (the common case: op packet names).
inline bool is_clean(std::string_view s) {
  if (s.empty() || (s.front() >= '0' && s.front() <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

inline bool ends_with_number(std::string_view s) {
  const auto us = s.rfind('_');
  if (us == std::string_view::npos || us + 1 == s.size()) return false;
  for (std::size_t i = us + 1; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

/// The names in use in one graph, and the next suffix per base name (torch.fx `_Namespace`).
/// One hash table serves both: an entry per string says whether it is a used name and, as a
/// base, the last suffix given out.
class name_table {
 public:
  /// A fresh name derived from `candidate`; records it as used.
  std::string create(std::string_view candidate) {
    const bool clean = is_clean(candidate);
    if (clean && !ends_with_number(candidate) && !is_reserved_python_name(candidate)) {
      // common case: `add`, `add`, `add`... -> add, add_1, add_2
      auto& base = table_[std::string(candidate)];
      if (!base.used) {
        base.used = true;
        base.count = 0;
        return std::string(candidate);
      }
      std::int64_t num = base.count < 0 ? 0 : base.count;  // claimed exactly, never a base yet
      std::string name;
      do {
        name = std::string(candidate) + "_" + std::to_string(++num);
      } while (!mark_used(name));
      table_[std::string(candidate)].count = num;
      return name;
    }
    std::string name = clean ? std::string(candidate) : sanitize_name(candidate);
    // split "base_<digits>"
    std::string base = name;
    std::int64_t num = -1;
    if (auto us = name.rfind('_'); us != std::string::npos && us + 1 < name.size() && us > 0) {
      bool digits = true;
      for (std::size_t i = us + 1; i < name.size(); ++i) digits = digits && name[i] >= '0' && name[i] <= '9';
      if (digits && name.size() - us - 1 < 18) {
        base = name.substr(0, us);
        num = std::stoll(name.substr(us + 1));
      }
    }
    if (num < 0 || is_used(name)) {
      const auto it = table_.find(name);
      num = it == table_.end() || it->second.count < 0 ? 0 : it->second.count;
      if (is_reserved_python_name(name)) {
        ++num;
        name = base + "_" + std::to_string(num);
      }
    }
    while (!mark_used(name)) {
      ++num;
      name = base + "_" + std::to_string(num);
    }
    table_[base].count = num;
    return name;
  }

  /// Claims `name` exactly; false when it is taken or a Python keyword (or `self`). A builtin's
  /// name is claimed: torch names a user input after its argument, `input` included, and keeps
  /// it so in its files; only names xport makes up (create) avoid builtins.
  bool claim(const std::string& name) {
    if (is_python_keyword(name)) return false;
    return mark_used(name);
  }

  void release(const std::string& name) {
    if (auto it = table_.find(name); it != table_.end()) it->second.used = false;
  }
  [[nodiscard]] bool contains(const std::string& name) const { return is_used(name); }

 private:
  struct entry {
    bool used = false;
    std::int64_t count = -1;  // as a base: the last suffix given out
  };
  bool is_used(const std::string& name) const {
    const auto it = table_.find(name);
    return it != table_.end() && it->second.used;
  }
  bool mark_used(const std::string& name) {
    auto& e = table_[name];
    if (e.used) return false;
    e.used = true;
    return true;
  }

  std::unordered_map<std::string, entry> table_;
};

/// Whether a module type is a container nothing calls (its children are called instead), whose
/// FQN is a module path but never a frame of torch's nn_module_stack: C++'s
/// `torch::nn::ModuleListImpl` and the like, Python's `torch.nn.ModuleList` and the like (a
/// TorchScript file names `__torch__.torch.nn.modules.container.___torch_mangle_3.ModuleList`).
inline bool is_module_container(std::string_view type) {
  const auto cut = type.find_last_of(".:");
  const auto last = cut == std::string_view::npos ? type : type.substr(cut + 1);
  for (const std::string_view c : {"ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})
    if (last == c || (last.size() == c.size() + 4 && last.substr(0, c.size()) == c && last.substr(c.size()) == "Impl"))
      return true;
  return false;
}

}  // namespace detail
XPORT_END_NAMESPACE
