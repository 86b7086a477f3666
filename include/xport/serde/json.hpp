// xport/serde/json.hpp: an exported_program as torch.export's JSON (torch/_export/serde/schema.py).
// The schema version written is torch 2.13's SCHEMA_VERSION = (8, 20); a file of another major
// version is refused, every 8.x loads. Unions are one-key objects (`{"as_tensor": {"name":
// "x"}}`), enums are the schema's own numbers (ScalarType FLOAT is 7, not c10's 6), optional
// fields that are None are left out, non-finite floats are the strings "Infinity", "-Infinity"
// and "NaN" (as torch writes them), symbolic sizes are sympy srepr text.
//
// Reading trusts nothing: every field is looked up with its type checked, and a wrong or
// missing one is a load_error naming the JSON path (`graph_module.graph.nodes[3].inputs[1]`).
#pragma once

#include <cmath>        // std::isfinite
#include <complex>      // std::complex
#include <cstdint>      // std::int64_t
#include <functional>   // std::function
#include <limits>       // std::numeric_limits
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <unordered_map>
#include <unordered_set>
#include <utility>      // std::move
#include <vector>       // std::vector

#include <nlohmann/json.hpp>

#include <xport/config.hpp>
#include <xport/detail/compat.hpp>
#include <xport/ops/schema.hpp>
#include <xport/ir/dtype.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/op.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/program/verify.hpp>
#include <xport/serde/zip_index.hpp>

XPORT_BEGIN_NAMESPACE

/// torch/_export/serde/schema.py SCHEMA_VERSION of torch 2.13, the version xport writes.
inline constexpr int schema_version_major = 8;
inline constexpr int schema_version_minor = 20;

namespace detail::serde {

using json = nlohmann::json;

// ---- enums, with the schema's numbering ---------------------------------------------------
// One table per enum (torch's serializer keeps one dict, `_TORCH_TO_SERIALIZE_DTYPE`, and derives
// the reverse): both directions read it.

/// A dtype and its number in the export schema (ScalarType), by its c10 name: LibTorch's enum
/// grows between versions (1.13 has no uint16 or float8_e8m0fnu), the names do not change.
struct scalar_type_row {
  std::string_view c10;
  int number;
};
inline constexpr scalar_type_row scalar_type_rows[] = {
    {"Byte", 1},           {"Char", 2},           {"Short", 3},           {"Int", 4},
    {"Long", 5},           {"Half", 6},           {"Float", 7},           {"Double", 8},
    {"ComplexHalf", 9},    {"ComplexFloat", 10},  {"ComplexDouble", 11},  {"Bool", 12},
    {"BFloat16", 13},      {"UInt16", 28},        {"Float8_e4m3fn", 29},  {"Float8_e5m2", 30},
    {"Float8_e4m3fnuz", 31}, {"Float8_e5m2fnuz", 32}, {"Float8_e8m0fnu", 33}, {"UInt32", 34},
    {"UInt64", 35},
};

/// The running LibTorch's dtype named `c10` (its c10::toString spelling), if it has one.
inline std::optional<c10::ScalarType> scalar_type_named(std::string_view c10) {
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    const auto t = static_cast<c10::ScalarType>(i);
    if (c10::toString(t) == c10) return t;
  }
  return std::nullopt;
}

inline int scalar_type_number(c10::ScalarType t) {
  const std::string_view name = c10::toString(t);
  for (const auto& r : scalar_type_rows)
    if (r.c10 == name) return r.number;
  throw error("xport.save.dtype", std::string("dtype ") + python_repr(t) + " has no number in the export schema "
                                  "(torch.export cannot save it either)");
}
/// The dtype of schema number `n`; nullopt when the schema has no such number or the running
/// LibTorch no such dtype (`unknown` says which: the dtype's c10 name, empty for a bad number).
inline std::optional<c10::ScalarType> scalar_type_of(std::int64_t n, std::string* unknown = nullptr) {
  for (const auto& r : scalar_type_rows) {
    if (r.number != n) continue;
    auto t = scalar_type_named(r.c10);
    if (!t && unknown) *unknown = std::string(r.c10);
    return t;
  }
  return std::nullopt;
}

/// Layouts and memory formats: the same in every LibTorch, numbered by the schema.
template <class E>
struct enum_row {
  E value;
  int number;
};
inline constexpr enum_row<c10::Layout> layout_rows[] = {
    {c10::kSparse, 1}, {c10::kSparseCsr, 2}, {c10::kSparseCsc, 3}, {c10::kSparseBsr, 4},
    {c10::kSparseBsc, 5}, {c10::kMkldnn, 6}, {c10::kStrided, 7}};
inline constexpr enum_row<c10::MemoryFormat> memory_format_rows[] = {
    {c10::MemoryFormat::Contiguous, 1}, {c10::MemoryFormat::ChannelsLast, 2},
    {c10::MemoryFormat::ChannelsLast3d, 3}, {c10::MemoryFormat::Preserve, 4}};

/// The schema's number of `v` by `rows` (0, the schema's Unknown, when it has none).
template <class E, std::size_t N>
constexpr int number_of(const enum_row<E> (&rows)[N], E v) {
  for (const auto& r : rows)
    if (r.value == v) return r.number;
  return 0;
}
/// The value of schema number `n` by `rows`.
template <class E, std::size_t N>
constexpr std::optional<E> value_of(const enum_row<E> (&rows)[N], std::int64_t n) {
  for (const auto& r : rows)
    if (r.number == n) return r.value;
  return std::nullopt;
}
inline int layout_number(c10::Layout l) { return number_of(layout_rows, l); }
inline std::optional<c10::Layout> layout_of(std::int64_t n) { return value_of(layout_rows, n); }
inline int memory_format_number(c10::MemoryFormat m) { return number_of(memory_format_rows, m); }
inline std::optional<c10::MemoryFormat> memory_format_of(std::int64_t n) { return value_of(memory_format_rows, n); }

// ---- checked reading ------------------------------------------------------------------------

/// A JSON node with the path it was reached by, for error messages.
struct at_path {
  const json& j;
  std::string path;
  const std::string& record;

  [[noreturn]] void fail(const std::string& what) const {
    throw load_error("xport.load.schema", record + ": " + (path.empty() ? std::string("<root>") : path) + ": " + what);
  }
  [[nodiscard]] std::string_view type() const { return j.type_name(); }

  [[nodiscard]] at_path operator[](std::string_view key) const {
    if (!j.is_object()) fail("expected an object, got " + std::string(type()));
    const auto it = j.find(key);
    if (it == j.end()) fail("missing field '" + std::string(key) + "'");
    return {*it, path.empty() ? std::string(key) : path + "." + std::string(key), record};
  }
  [[nodiscard]] std::optional<at_path> get(std::string_view key) const {
    if (!j.is_object()) fail("expected an object, got " + std::string(type()));
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    return at_path{*it, path.empty() ? std::string(key) : path + "." + std::string(key), record};
  }
  [[nodiscard]] at_path operator[](std::size_t i) const {
    return {j[i], path + "[" + std::to_string(i) + "]", record};
  }
  [[nodiscard]] std::size_t size_of_array() const {
    if (!j.is_array()) fail("expected an array, got " + std::string(type()));
    return j.size();
  }
  [[nodiscard]] const json& object() const {
    if (!j.is_object()) fail("expected an object, got " + std::string(type()));
    return j;
  }
  [[nodiscard]] std::string str() const {
    if (!j.is_string()) fail("expected a string, got " + std::string(type()));
    return j.get<std::string>();
  }
  [[nodiscard]] std::int64_t integer() const {
    if (!j.is_number_integer()) fail("expected an integer, got " + std::string(type()));
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail("integer out of range");
    return j.get<std::int64_t>();
  }
  /// A float: a JSON number, or one of the strings torch writes for non-finite values.
  [[nodiscard]] double number() const {
    if (j.is_string()) {
      const auto& t = j.get_ref<const std::string&>();
      if (t == "Infinity") return std::numeric_limits<double>::infinity();
      if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
      if (t == "NaN") return std::numeric_limits<double>::quiet_NaN();
      fail("expected a number, got the string '" + t.substr(0, 32) + "'");
    }
    if (!j.is_number()) fail("expected a number, got " + std::string(type()));
    return j.get<double>();
  }
  [[nodiscard]] bool boolean() const {
    if (!j.is_boolean()) fail("expected a bool, got " + std::string(type()));
    return j.get<bool>();
  }
  /// A union: an object with exactly one key. Returns (member, value).
  [[nodiscard]] std::pair<std::string, at_path> one_of() const {
    const auto& o = object();
    if (o.size() != 1) fail("expected a union (an object with one key), got " + std::to_string(o.size()) + " keys");
    const auto it = o.begin();
    return {it.key(), at_path{it.value(), path + "." + it.key(), record}};
  }
};

/// Parses JSON text; nesting deeper than 64 levels is refused (no recursion on hostile input).
inline json parse(const std::string& text, const std::string& record) {
  try {
    return json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > 64) throw load_error("xport.load.json", record + ": JSON nested deeper than 64 levels");
      return true;
    });
  } catch (const json::exception& e) {
    throw load_error("xport.load.json", record + ": malformed JSON: " + e.what());
  }
}

/// A float as torch writes it: a number, or "Infinity" / "-Infinity" / "NaN" (JSON has no
/// literal for them; nlohmann would write null).
inline json float_json(double v) {
  if (std::isfinite(v)) return v;
  if (std::isnan(v)) return "NaN";
  return v > 0 ? "Infinity" : "-Infinity";
}

// ---- sizes, meta --------------------------------------------------------------------------

inline json sym_int_json(const sym_int& s) {
  if (s.is_constant()) return {{"as_int", s.value()}};
  // a size only the data knows has no example value in torch's files (its hint is null)
  const auto syms = sym::free_symbols(s);
  const bool unbacked = std::any_of(syms.begin(), syms.end(), [](const std::string& n) { return sym::is_unbacked(n); });
  return {{"as_expr", {{"expr_str", sym::srepr(s)}, {"hint", unbacked ? json(nullptr) : json{{"as_int", s.hint()}}}}}};
}
/// The symbols of the program being read: made on first use, with the range the file's
/// range_constraints give them (read before the graph).
struct symbol_table {
  struct entry {
    std::string name;
    value_range range;
    std::optional<sym_int> symbol;
    std::vector<sym_relation> relations;  // assertions relating it to other sizes (u0 <= s77)
  };
  std::vector<entry> entries;

  entry& find_or_add(std::string_view name) {
    for (auto& e : entries)
      if (e.name == name) return e;
    entries.push_back({std::string(name), value_range{}, std::nullopt, {}});
    return entries.back();
  }
  /// The symbol `name`; a new one takes `hint` as its example value.
  sym_int get(std::string_view name, std::int64_t hint) {
    auto& e = find_or_add(name);
    if (!e.symbol) e.symbol = sym::symbol(e.name, hint, e.range);
    return *e.symbol;
  }
};
inline thread_local symbol_table* active_symbols = nullptr;

inline sym_int sym_int_of(const at_path& j) {
  auto [k, v] = j.one_of();
  if (k == "as_int") return v.integer();
  if (k == "as_expr") {
    const auto text = v["expr_str"].str();
    std::int64_t hint = 2;
    if (auto h = v.get("hint")) {
      auto [hk, hv] = h->one_of();
      if (hk == "as_int") hint = hv.integer();
    }
    if (!active_symbols) v.fail("symbolic size '" + text + "' outside a program");
    try {
      // a symbol met for the first time takes its value from the hint (solved when the
      // expression is linear in it: `2*s0` with hint 8 gives s0 = 4)
      std::vector<std::string> fresh;
      auto first = sym::parse(text, [&](std::string_view name) -> std::optional<sym_int> {
        for (const auto& e : active_symbols->entries)
          if (e.name == name && e.symbol) return *e.symbol;
        fresh.emplace_back(name);
        return sym::symbol(std::string(name), 0, value_range{});
      });
      if (fresh.empty()) return first;
      const auto lin = sym::as_linear(first);
      for (const auto& name : fresh) {
        std::int64_t h = 2;
        if (lin && lin->symbol == name && lin->a != 0 && (hint - lin->b) % lin->a == 0) h = (hint - lin->b) / lin->a;
        (void)active_symbols->get(name, h);
      }
      return sym::parse(text, [&](std::string_view name) -> std::optional<sym_int> { return active_symbols->get(name, 2); });
    } catch (const graph_error& e) {
      v["expr_str"].fail("cannot read the symbolic size '" + text + "': " + e.what());
    }
  }
  v.fail("unknown SymInt member '" + k + "'");
}

inline json device_json(c10::Device d) {
  json j = {{"type", c10::DeviceTypeName(d.type(), /*lower_case=*/true)}};
  if (d.has_index()) j["index"] = d.index();
  return j;
}
inline c10::Device device_of(const at_path& j) {
  const auto type = j["type"].str();
  try {
    c10::Device d(type);
    if (auto i = j.get("index")) {
      const auto idx = i->integer();
      if (idx < -1 || idx > 127) i->fail("device index out of range");
      d = c10::Device(d.type(), static_cast<c10::DeviceIndex>(idx));
    }
    return d;
  } catch (const c10::Error&) {
    j["type"].fail("unknown device type '" + type + "'");
  }
}

inline json tensor_meta_json(const tensor_meta& m) {
  json sizes = json::array(), strides = json::array();
  for (const auto& s : m.sizes) sizes.push_back(sym_int_json(s));
  for (const auto& s : m.strides) strides.push_back(sym_int_json(s));
  return {{"dtype", scalar_type_number(m.dtype)}, {"sizes", std::move(sizes)},   {"requires_grad", m.requires_grad},
          {"device", device_json(m.device)},     {"strides", std::move(strides)}, {"storage_offset", sym_int_json(m.storage_offset)},
          {"layout", layout_number(m.layout)}};
}
/// The dtype schema number `v` names, in the running LibTorch.
inline c10::ScalarType dtype_at(const at_path& v) {
  std::string unknown;
  const auto n = v.integer();
  const auto t = scalar_type_of(n, &unknown);
  if (!t)
    v.fail(unknown.empty() ? "unknown ScalarType " + std::to_string(n)
                           : "dtype " + unknown + " (ScalarType " + std::to_string(n) + ") does not exist in this LibTorch (" +
                                 torch_version() + "); load the archive with a LibTorch that has it");
  return *t;
}

inline tensor_meta tensor_meta_of(const at_path& j) {
  tensor_meta m;
  m.dtype = dtype_at(j["dtype"]);
  const auto sizes = j["sizes"], strides = j["strides"];
  const auto n = sizes.size_of_array();
  if (n > 64) sizes.fail("more than 64 dimensions");
  for (std::size_t i = 0; i < n; ++i) {
    auto s = sym_int_of(sizes[i]);
    if (s.hint() < 0) sizes[i].fail("negative size");
    m.sizes.push_back(std::move(s));
  }
  const auto ns = strides.size_of_array();
  if (ns != n && ns != 0) strides.fail("has " + std::to_string(ns) + " strides for " + std::to_string(n) + " sizes");
  for (std::size_t i = 0; i < ns; ++i) {
    auto s = sym_int_of(strides[i]);
    if (s.hint() < 0) strides[i].fail("negative stride");
    m.strides.push_back(std::move(s));
  }
  m.requires_grad = j["requires_grad"].boolean();
  m.device = device_of(j["device"]);
  m.storage_offset = sym_int_of(j["storage_offset"]);
  if (m.storage_offset.hint() < 0) j["storage_offset"].fail("negative storage offset");
  const auto l = layout_of(j["layout"].integer());
  if (!l) j["layout"].fail("unknown Layout " + std::to_string(j["layout"].integer()));
  m.layout = *l;
  return m;
}

// ---- arguments ----------------------------------------------------------------------------

inline json value_ref(value v) {
  switch (v.kind()) {
    case value_kind::sym_int: return {{"as_sym_int", {{"as_name", v.name()}}}};
    case value_kind::sym_bool: return {{"as_sym_bool", {{"as_name", v.name()}}}};
    case value_kind::sym_float: return {{"as_sym_float", {{"as_name", v.name()}}}};
    case value_kind::object: return {{"as_custom_obj", {{"name", v.name()}, {"class_fqn", v.type().class_fqn}}}};
    default: return {{"as_tensor", {{"name", v.name()}}}};
  }
}

/// The element type of a (possibly optional) list type, or nullptr.
inline c10::TypePtr list_element(const c10::TypePtr& t) {
  const auto u = unwrap_optional(t);
  if (u->kind() == c10::TypeKind::ListType) return u->castRaw<c10::ListType>()->getElementType();
  return nullptr;
}

/// Names the graph value that computes a symbolic size, or a SymFloat / SymBool (writing the
/// sym_size / _operator nodes that compute it first); see graph_json.
struct sym_namer {
  std::function<std::string(const sym_int&)> size;
  std::function<std::string(const sym_scalar&)> scalar;
  std::string operator()(const sym_int& e) const { return size(e); }
  std::string operator()(const sym_scalar& s) const { return scalar(s); }
};

inline json argument_json(const argument& a, const c10::TypePtr& type, const sym_namer& name_sym = {}) {
  using K = argument::kind;
  switch (a.type()) {
    case K::none: return {{"as_none", true}};
    case K::boolean: return {{"as_bool", a.as_bool()}};
    case K::integer: return {{"as_int", a.as_int()}};
    case K::floating: return {{"as_float", float_json(a.as_double())}};
    case K::complex: return {{"as_complex", {{"real", float_json(a.as_complex().real())}, {"imag", float_json(a.as_complex().imag())}}}};
    case K::string: return {{"as_string", a.as_string()}};
    case K::dtype: return {{"as_scalar_type", scalar_type_number(a.as_dtype())}};
    case K::device: return {{"as_device", device_json(a.as_device())}};
    case K::layout: return {{"as_layout", layout_number(a.as_layout())}};
    case K::memory_format: return {{"as_memory_format", memory_format_number(a.as_memory_format())}};
    case K::value: return value_ref(a.as_value());
    case K::symbolic: return {{"as_sym_int", {{"as_name", name_sym(a.as_sym())}}}};
    case K::scalar: return {{a.as_scalar().is_bool() ? "as_sym_bool" : "as_sym_float", {{"as_name", name_sym(a.as_scalar())}}}};
    case K::graph: throw graph_error("xport.serde.subgraph", "subgraph '" + a.as_graph()->name + "' is written by graph_json, not as an argument");
    case K::list: break;
  }
  const auto& l = a.as_list();
  const auto elem = type ? list_element(type) : nullptr;
  const bool optional_tensors = elem && elem->kind() == c10::TypeKind::OptionalType &&
                                unwrap_optional(elem)->kind() == c10::TypeKind::TensorType;
  bool all_int = true, all_float = true, all_bool = true, all_str = true, all_tensor = true, any_sym = false;
  for (const auto& e : l) {
    const bool sym = (e.is_value() && e.as_value().kind() == value_kind::sym_int) || e.is_symbolic();
    any_sym = any_sym || sym;
    all_int = all_int && (e.is_int() || sym);
    all_float = all_float && (e.is_double() || e.is_int());
    all_bool = all_bool && e.is_bool();
    all_str = all_str && e.is_string();
    all_tensor = all_tensor && e.is_value() && e.as_value().kind() == value_kind::tensor;
  }
  if (optional_tensors) {
    json out = json::array();
    for (const auto& e : l)
      out.push_back(e.is_none() ? json{{"as_none", true}} : json{{"as_tensor", {{"name", e.as_value().name()}}}});
    return {{"as_optional_tensors", std::move(out)}};
  }
  if (l.empty()) {
    const auto k = elem ? unwrap_optional(elem)->kind() : c10::TypeKind::IntType;
    switch (k) {
      case c10::TypeKind::FloatType: return {{"as_floats", json::array()}};
      case c10::TypeKind::BoolType: return {{"as_bools", json::array()}};
      case c10::TypeKind::StringType: return {{"as_strings", json::array()}};
      case c10::TypeKind::TensorType: return {{"as_tensors", json::array()}};
      default: return {{"as_ints", json::array()}};
    }
  }
  json out = json::array();
  if (all_tensor) {
    for (const auto& e : l) out.push_back({{"name", e.as_value().name()}});
    return {{"as_tensors", std::move(out)}};
  }
  if (all_int && any_sym) {
    for (const auto& e : l)
      out.push_back(e.is_int()        ? json{{"as_int", e.as_int()}}
                    : e.is_symbolic() ? json{{"as_name", name_sym(e.as_sym())}}
                                      : json{{"as_name", e.as_value().name()}});
    return {{"as_sym_ints", std::move(out)}};
  }
  if (all_int) {
    for (const auto& e : l) out.push_back(e.as_int());
    return {{"as_ints", std::move(out)}};
  }
  if (all_bool) {
    for (const auto& e : l) out.push_back(e.as_bool());
    return {{"as_bools", std::move(out)}};
  }
  if (all_float) {
    for (const auto& e : l) out.push_back(float_json(e.is_int() ? static_cast<double>(e.as_int()) : e.as_double()));
    return {{"as_floats", std::move(out)}};
  }
  if (all_str) {
    for (const auto& e : l) out.push_back(e.as_string());
    return {{"as_strings", std::move(out)}};
  }
  throw error("xport.save.argument", "a list mixing " + std::string(l.front().type_name()) +
                                          " and other kinds has no form in the export schema");
}

/// Resolves value names while a graph is read: a name must be defined before it is used.
struct value_scope {
  std::unordered_map<std::string, value> defined;
  std::unordered_set<std::string> later;  ///< every name some node defines (for the cycle message)
  /// Sizes computed by sym_size / _operator nodes: arguments that use them become symbolic.
  std::unordered_map<std::string, sym_int> syms;
  /// The SymBools `_operator.ge` / `le` / ... nodes compute, for the `_assert_scalar` nodes.
  struct condition {
    sym_int lhs;
    std::string op;  // ">=", "<=", ">", "<", "=="
    sym_int rhs;
  };
  std::unordered_map<std::string, condition> conditions;
  /// The SymFloats and SymBools `_operator` nodes compute from sizes (`truediv`, `gt`).
  std::unordered_map<std::string, sym_scalar> scalars;
  /// How many None results of higher-order calls were read (torch names them as_none, as_none_1, ...).
  std::size_t nones = 0;

  /// A SymInt argument named `name`: a symbolic size, or a graph value.
  [[nodiscard]] argument sym_arg(const at_path& j, const std::string& name) const {
    if (const auto it = syms.find(name); it != syms.end()) return argument(it->second);
    if (const auto it = scalars.find(name); it != scalars.end()) return argument(it->second);
    return (*this)(j, name);
  }

  value operator()(const at_path& j, const std::string& name) const {
    if (const auto it = defined.find(name); it != defined.end()) return it->second;
    if (later.count(name))
      j.fail("'" + name + "' is used before the node that defines it (the nodes are out of order or form a cycle)");
    j.fail("'" + name + "' names no value in the graph");
  }
};

/// The kinds of Argument xport has no form for, each with what it is, for the load_error.
[[noreturn]] inline void unsupported_argument(const at_path& where, const std::string& kind) {
  static constexpr std::pair<std::string_view, std::string_view> known[] = {
      {"as_graph", "a subgraph of a higher-order operator (torch.cond, torch.map, while_loop, ...)"},
      {"as_operator", "an operator passed as an argument (used by higher-order operators)"},
      {"as_string_to_argument", "a dict of arguments"},
      {"as_nested_tensors", "a list of tensor lists"},
      {"as_token", "an effect token"},
  };
  for (const auto& [k, what] : known)
    if (k == kind) where.fail("argument kind '" + kind + "' (" + std::string(what) + ") is not supported by xport");
  where.fail("argument kind '" + kind + "' is not supported by xport");
}

inline argument argument_of(const at_path& j, const value_scope& scope) {
  auto [k, v] = j.one_of();
  const auto name_of = [&](const at_path& t) { return scope(t, t["name"].str()); };
  if (k == "as_none") return none;
  if (k == "as_tensor") return name_of(v);
  if (k == "as_custom_obj") {  // a CUSTOM_OBJ input (torch lifts every object)
    const auto obj = name_of(v);
    if (obj.kind() != value_kind::object || obj.type().class_fqn != v["class_fqn"].str())
      v.fail("'" + v["name"].str() + "' is read as a custom object of class " + v["class_fqn"].str() +
             ", but the graph defines it " + (obj.kind() == value_kind::object ? "of class " + obj.type().class_fqn : "as no custom object"));
    return obj;
  }
  if (k == "as_optional_tensor") {
    auto [k2, v2] = v.one_of();
    if (k2 == "as_none") return none;
    if (k2 == "as_tensor") return name_of(v2);
    v.fail("unknown OptionalTensorArgument member '" + k2 + "'");
  }
  if (k == "as_int") return v.integer();
  if (k == "as_float") return v.number();
  if (k == "as_complex") return std::complex<double>(v["real"].number(), v["imag"].number());
  if (k == "as_bool") return v.boolean();
  if (k == "as_string") return v.str();
  if (k == "as_scalar_type") {
    return dtype_at(v);
  }
  if (k == "as_layout") {
    const auto l = layout_of(v.integer());
    if (!l) v.fail("unknown Layout " + std::to_string(v.integer()));
    return *l;
  }
  if (k == "as_memory_format") {
    const auto m = memory_format_of(v.integer());
    if (!m) v.fail("unknown MemoryFormat " + std::to_string(v.integer()));
    return *m;
  }
  if (k == "as_device") return device_of(v);
  if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") {
    auto [k2, v2] = v.one_of();
    if (k2 == "as_name") return scope.sym_arg(v2, v2.str());
    if (k2 == "as_int") return v2.integer();
    if (k2 == "as_bool") return v2.boolean();
    if (k2 == "as_float") return v2.number();
    v.fail("unknown member '" + k2 + "'");
  }
  argument::list_type out;
  const auto each = [&](auto&& f) {
    const auto n = v.size_of_array();
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(f(v[i]));
    return argument(std::move(out));
  };
  if (k == "as_tensors") return each([&](const at_path& e) { return argument(name_of(e)); });
  if (k == "as_ints") return each([](const at_path& e) { return argument(e.integer()); });
  if (k == "as_floats") return each([](const at_path& e) { return argument(e.number()); });
  if (k == "as_bools") return each([](const at_path& e) { return argument(e.boolean()); });
  if (k == "as_strings") return each([](const at_path& e) { return argument(e.str()); });
  if (k == "as_optional_tensors" || k == "as_sym_ints" || k == "as_sym_bools" || k == "as_sym_floats")
    return each([&](const at_path& e) -> argument {
      auto [k2, v2] = e.one_of();
      if (k2 == "as_none") return none;
      if (k2 == "as_tensor") return name_of(v2);
      if (k2 == "as_name") return scope.sym_arg(v2, v2.str());
      if (k2 == "as_int") return v2.integer();
      if (k2 == "as_bool") return v2.boolean();
      if (k2 == "as_float") return v2.number();
      e.fail("unknown member '" + k2 + "'");
    });
  // lists of lists: int[][] and float[][] arguments
  if (k == "as_int_lists" || k == "as_float_lists")
    return each([&](const at_path& e) -> argument {
      argument::list_type inner;
      for (std::size_t i = 0, n = e.size_of_array(); i < n; ++i)
        inner.push_back(k == "as_int_lists" ? argument(e[i].integer()) : argument(e[i].number()));
      return argument(std::move(inner));
    });
  unsupported_argument(v, k);
}

// ---- signature ----------------------------------------------------------------------------

inline json constant_value_json(const argument& a) {
  if (a.is_none()) return {{"as_none", true}};
  if (a.is_int()) return {{"as_int", a.as_int()}};
  if (a.is_double()) return {{"as_float", float_json(a.as_double())}};
  if (a.is_string()) return {{"as_string", a.as_string()}};
  if (a.is_bool()) return {{"as_bool", a.as_bool()}};
  throw error("xport.save.constant", "a constant input of kind " + std::string(a.type_name()) + " has no form in the schema");
}
inline argument constant_value_of(const at_path& j) {
  auto [k, v] = j.one_of();
  if (k == "as_none") return none;
  if (k == "as_int") return v.integer();
  if (k == "as_float") return v.number();
  if (k == "as_string") return v.str();
  if (k == "as_bool") return v.boolean();
  v.fail("unknown ConstantValue member '" + k + "'");
}

inline json spec_arg_json(const argument_spec& a) {
  switch (a.type) {
    case argument_spec::kind::sym_int: return {{"as_sym_int", {{"as_name", a.name}}}};
    case argument_spec::kind::sym_bool: return {{"as_sym_bool", {{"as_name", a.name}}}};
    case argument_spec::kind::sym_float: return {{"as_sym_float", {{"as_name", a.name}}}};
    case argument_spec::kind::token:  // Argument has no token member: tokens travel as TokenArgument
      throw error("xport.save.token", "effect token '" + a.name + "' cannot be a user input or output in the export schema");
    case argument_spec::kind::custom_obj: return {{"as_custom_obj", {{"name", a.name}, {"class_fqn", a.class_fqn}}}};
    case argument_spec::kind::constant:  // the constant itself, as torch writes constant user outputs
      return constant_value_json(a.constant);
    case argument_spec::kind::tensor: break;
  }
  return {{"as_tensor", {{"name", a.name}}}};
}
inline argument_spec spec_arg_of(const at_path& j) {
  auto [k, v] = j.one_of();
  if (k == "as_tensor") return argument_spec::tensor(v["name"].str());
  if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") {
    auto [k2, v2] = v.one_of();
    if (k2 != "as_name") v.fail("expected a symbol name");
    argument_spec s = argument_spec::sym_int(v2.str());
    if (k == "as_sym_bool") s.type = argument_spec::kind::sym_bool;
    if (k == "as_sym_float") s.type = argument_spec::kind::sym_float;
    return s;
  }
  if (k == "as_custom_obj") {
    argument_spec s{argument_spec::kind::custom_obj, v["name"].str(), {}, v["class_fqn"].str()};
    return s;
  }
  if (k == "as_none" || k == "as_int" || k == "as_float" || k == "as_string" || k == "as_bool")
    return argument_spec::constant_value("", constant_value_of(j));
  unsupported_argument(v, k);
}

inline json input_spec_json(const input_spec& s) {
  const json tensor = {{"name", s.arg.name}};
  switch (s.kind) {
    case input_kind::user_input:
      if (s.arg.type == argument_spec::kind::constant)
        return {{"constant_input", {{"name", s.arg.name}, {"value", constant_value_json(s.arg.constant)}}}};
      return {{"user_input", {{"arg", spec_arg_json(s.arg)}}}};
    case input_kind::parameter: return {{"parameter", {{"arg", tensor}, {"parameter_name", s.target.value_or("")}}}};
    case input_kind::buffer:
      return {{"buffer", {{"arg", tensor}, {"buffer_name", s.target.value_or("")}, {"persistent", s.persistent.value_or(true)}}}};
    case input_kind::constant_tensor:
      return {{"tensor_constant", {{"arg", tensor}, {"tensor_constant_name", s.target.value_or("")}}}};
    case input_kind::custom_obj:
      return {{"custom_obj", {{"arg", {{"name", s.arg.name}, {"class_fqn", s.arg.class_fqn}}}, {"custom_obj_name", s.target.value_or("")}}}};
    case input_kind::token: return {{"token", {{"arg", tensor}}}};
  }
  return {};
}
inline input_spec input_spec_of(const at_path& j) {
  auto [k, v] = j.one_of();
  input_spec s;
  const auto tensor_arg = [&] { return argument_spec::tensor(v["arg"]["name"].str()); };
  if (k == "user_input") {
    s.kind = input_kind::user_input;
    s.arg = spec_arg_of(v["arg"]);
  } else if (k == "constant_input") {
    s.kind = input_kind::user_input;
    s.arg = argument_spec::constant_value(v["name"].str(), constant_value_of(v["value"]));
  } else if (k == "parameter") {
    s.kind = input_kind::parameter;
    s.arg = tensor_arg();
    s.target = v["parameter_name"].str();
  } else if (k == "buffer") {
    s.kind = input_kind::buffer;
    s.arg = tensor_arg();
    s.target = v["buffer_name"].str();
    s.persistent = v["persistent"].boolean();
  } else if (k == "tensor_constant") {
    s.kind = input_kind::constant_tensor;
    s.arg = tensor_arg();
    s.target = v["tensor_constant_name"].str();
  } else if (k == "custom_obj") {
    s.kind = input_kind::custom_obj;
    s.arg = argument_spec{argument_spec::kind::custom_obj, v["arg"]["name"].str(), {}, v["arg"]["class_fqn"].str()};
    s.target = v["custom_obj_name"].str();
  } else if (k == "token") {
    s.kind = input_kind::token;
    s.arg = argument_spec::token(v["arg"]["name"].str());
  } else {
    j.fail("unknown InputSpec member '" + k + "'");
  }
  return s;
}

struct output_kind_name {
  output_kind kind;
  const char* member;
  const char* target_field;  ///< nullptr when the spec has no target
};
inline constexpr output_kind_name output_kinds[] = {
    {output_kind::user_output, "user_output", nullptr},
    {output_kind::loss_output, "loss_output", nullptr},
    {output_kind::buffer_mutation, "buffer_mutation", "buffer_name"},
    {output_kind::gradient_to_parameter, "gradient_to_parameter", "parameter_name"},
    {output_kind::gradient_to_user_input, "gradient_to_user_input", "user_input_name"},
    {output_kind::user_input_mutation, "user_input_mutation", "user_input_name"},
    {output_kind::token, "token", nullptr},
    {output_kind::parameter_mutation, "parameter_mutation", "parameter_name"},
};

inline json output_spec_json(const output_spec& s) {
  for (const auto& k : output_kinds) {
    if (k.kind != s.kind) continue;
    json body;
    if (s.kind == output_kind::user_output) body["arg"] = spec_arg_json(s.arg);
    else body["arg"] = {{"name", s.arg.name}};
    if (k.target_field) body[k.target_field] = s.target.value_or("");
    return {{k.member, std::move(body)}};
  }
  return {};
}
inline output_spec output_spec_of(const at_path& j) {
  auto [k, v] = j.one_of();
  for (const auto& ok : output_kinds) {
    if (k != ok.member) continue;
    output_spec s;
    s.kind = ok.kind;
    if (ok.kind == output_kind::user_output) s.arg = spec_arg_of(v["arg"]);
    else if (ok.kind == output_kind::token) s.arg = argument_spec::token(v["arg"]["name"].str());
    else s.arg = argument_spec::tensor(v["arg"]["name"].str());
    if (ok.target_field) s.target = v[ok.target_field].str();
    return s;
  }
  j.fail("unknown OutputSpec member '" + k + "'");
}

// ---- treespecs ----------------------------------------------------------------------------

/// xport's own treespec form, which xport before schema 8.20 kept in GraphModule.metadata
/// (`xport.in_spec`); read for those archives.
inline treespec treespec_of(const at_path& j) {
  static constexpr std::string_view kinds[] = {"leaf", "constant", "none", "tuple", "list", "dict"};
  treespec t;
  const auto k = j["kind"].str();
  int idx = -1;
  for (int i = 0; i < 6; ++i)
    if (kinds[i] == k) idx = i;
  if (idx < 0) j["kind"].fail("unknown treespec kind '" + k + "'");
  t.type = static_cast<treespec::kind>(idx);
  if (t.type == treespec::kind::constant) t.value = constant_value_of(j["value"]);
  if (auto c = j.get("children")) {
    if (t.type != treespec::kind::tuple && t.type != treespec::kind::list && t.type != treespec::kind::dict)
      c->fail("a " + k + " has no children");
    for (std::size_t i = 0, n = c->size_of_array(); i < n; ++i) t.children.push_back(treespec_of((*c)[i]));
  }
  if (t.type == treespec::kind::dict) {
    const auto keys = j["keys"];
    for (std::size_t i = 0, n = keys.size_of_array(); i < n; ++i) t.keys.push_back(keys[i].str());
    if (t.keys.size() != t.children.size()) keys.fail("a dict needs one key per child");
  }
  return t;
}

/// torch.utils._pytree's `treespec_dumps` form (protocol 1), for Python readers. Constant leaves
/// are leaves there too: each has its placeholder (a constant input), which holds the value.
/// Types and contexts read from torch's files are written back as read (Note [Pytree node types]).
inline json pytree_json(const treespec& t) {
  json children = json::array();
  for (const auto& c : t.children) children.push_back(pytree_json(c));
  const auto node = [&](const char* builtin, json context) -> json {
    json ctx = t.context.empty() ? std::move(context) : t.context_is_json ? json::parse(t.context) : json(t.context);
    return {{"type", t.type_name.empty() ? std::string(builtin) : t.type_name}, {"context", std::move(ctx)},
            {"children_spec", std::move(children)}};
  };
  switch (t.type) {
    case treespec::kind::leaf:
    case treespec::kind::constant: return {{"type", nullptr}, {"context", nullptr}, {"children_spec", json::array()}};
    case treespec::kind::none: return node("builtins.NoneType", "null");
    case treespec::kind::tuple: return node("builtins.tuple", "null");
    case treespec::kind::list: return node("builtins.list", "null");
    case treespec::kind::dict: return node("builtins.dict", json(t.keys).dump());
    case treespec::kind::node: return node("", nullptr);
  }
  return {};
}

/// The keys of a dict of type `type` from its context (the parsed JSON of torch's context).
inline std::vector<std::string> dict_keys_of(const std::string& type, const at_path& ctx) {
  // a defaultdict's context is an object: {default_factory_module, default_factory_name, dict_context}
  const at_path keys = type == "collections.defaultdict" ? ctx["dict_context"] : ctx;
  std::vector<std::string> out;
  for (std::size_t i = 0, m = keys.size_of_array(); i < m; ++i) {
    if (!keys[i].j.is_string()) keys[i].fail("a dict key must be a string for xport, got " + std::string(keys[i].type()));
    out.push_back(keys[i].str());
  }
  return out;
}

/// A node's field names from its context, where the context names one per child: a dataclass's
/// `[[fields], [None fields]]` (torch.export.register_dataclass), a list of keys (a Hugging Face
/// ModelOutput, most registered types); otherwise none (the children are positional).
inline std::vector<std::string> node_fields_of(const json& ctx, std::size_t children) {
  const auto strings = [](const json& j) {
    if (!j.is_array()) return false;
    for (const auto& e : j)
      if (!e.is_string()) return false;
    return true;
  };
  const json* names = nullptr;
  if (strings(ctx)) names = &ctx;
  else if (ctx.is_array() && ctx.size() == 2 && strings(ctx[0]) && strings(ctx[1])) names = &ctx[0];
  if (!names || names->size() != children) return {};
  return names->get<std::vector<std::string>>();
}

/// A treespec from `treespec_dumps` JSON; every leaf is a tensor leaf (see with_constants).
inline treespec pytree_of(const at_path& j) {
  const auto type_j = j["type"];
  const auto children_j = j["children_spec"];
  const auto n = children_j.size_of_array();
  if (type_j.j.is_null()) {
    if (n != 0) children_j.fail("a leaf has no children");
    return treespec::leaf();
  }
  const auto type = type_j.str();
  treespec t;
  if (type == "builtins.tuple") t.type = treespec::kind::tuple;
  else if (type == "builtins.list" || type == "torch.fx.immutable_collections.immutable_list") t.type = treespec::kind::list;
  else if (type == "builtins.dict" || type == "collections.OrderedDict" || type == "collections.defaultdict" ||
           type == "torch.fx.immutable_collections.immutable_dict")
    t.type = treespec::kind::dict;
  else if (type == "builtins.NoneType") t.type = treespec::kind::none;
  else t.type = treespec::kind::node;
  if (!type.starts_with("builtins.")) t.type_name = type;
  for (std::size_t i = 0; i < n; ++i) t.children.push_back(pytree_of(children_j[i]));
  const auto ctx_j = j["context"];
  if (!t.type_name.empty()) {  // written back as read
    t.context_is_json = !ctx_j.j.is_string();
    t.context = t.context_is_json ? ctx_j.j.dump() : ctx_j.str();
  }
  if (t.type == treespec::kind::dict) {
    // torch writes a context as JSON text, and a defaultdict's as a JSON object
    const auto ctx = ctx_j.j.is_string() ? parse(ctx_j.str(), ctx_j.record + " (" + ctx_j.path + ")") : ctx_j.j;
    t.keys = dict_keys_of(type, at_path{ctx, ctx_j.path, ctx_j.record});
    if (t.keys.size() != t.children.size()) ctx_j.fail("a dict needs one key per child");
  } else if (t.type == treespec::kind::node) {
    json ctx = ctx_j.j;
    if (ctx.is_string()) {  // JSON text, or not JSON at all: a namedtuple's context is its type's name
      try {
        ctx = parse(ctx.get<std::string>(), ctx_j.record);
      } catch (const load_error&) {
        ctx = nullptr;
      }
    }
    t.keys = node_fields_of(ctx, t.children.size());
  } else if (t.type == treespec::kind::none && n != 0) {
    children_j.fail("None has no children");
  }
  return t;
}
/// `[1, {...}]`: the protocol version, then the spec.
inline treespec pytree_of_dumps(const at_path& text) {
  const auto doc = parse(text.str(), text.record + " (" + text.path + ")");
  const at_path j{doc, text.path, text.record};
  if (j.size_of_array() != 2) j.fail("expected [protocol, spec]");
  if (j[0].integer() != 1) j[0].fail("pytree protocol " + std::to_string(j[0].integer()) + " is not readable by xport (1 is)");
  return pytree_of(j[1]);
}
/// `t` with its leaves, in order, made constant leaves where `constants` gives a value (the
/// constant inputs' and outputs' specs hold the values torch's specs leave out).
inline void with_constants(treespec& t, const std::vector<std::optional<argument>>& constants, std::size_t& leaf,
                           const at_path& where) {
  if (t.type == treespec::kind::leaf) {
    if (leaf >= constants.size())
      where.fail("the spec has more leaves than the signature has entries (" + std::to_string(constants.size()) + ")");
    if (const auto& c = constants[leaf++]) t = treespec::constant(*c);
    return;
  }
  for (auto& c : t.children) with_constants(c, constants, leaf, where);
}

/// The name of argument `i` of a call spec (a keyword argument's is its keyword).
inline std::string argument_name(const treespec& in, std::size_t i) {
  return i < in.keys.size() ? in.keys[i] : "arg_" + std::to_string(i);
}

/// The call spec torch writes: in_spec is `(args, kwargs)`; the last `num_kwargs` arguments of
/// xport's in_spec are the keyword ones.
inline std::string pytree_in_spec(const treespec& in) {
  const std::size_t n = in.children.size(), k = std::min(in.num_kwargs, n);
  treespec args = treespec::of(treespec::kind::tuple), kwargs = treespec::of(treespec::kind::dict);
  for (std::size_t i = 0; i < n; ++i) {
    if (i < n - k) {
      args.children.push_back(in.children[i]);
      continue;
    }
    kwargs.children.push_back(in.children[i]);
    kwargs.keys.push_back(argument_name(in, i));
  }
  return json::array({1, pytree_json(treespec::of(treespec::kind::tuple, {std::move(args), std::move(kwargs)}))}).dump();
}

}  // namespace detail::serde

XPORT_END_NAMESPACE
