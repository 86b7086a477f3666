// xport/trace/dynamic.hpp: the dynamic_shapes argument of export (torch.export.Dim and friends).
//
//   auto batch = xport::Dim("batch", 1, 1024);
//   auto p = xport::export_program(model, std::tuple{x}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
//   // p prints `x: "f32[s0, 3, 224, 224]"` and `Range constraints: {s0: VR[1, 1024]}`
//
// A spec mirrors the inputs: per argument (by name, or positionally), per dimension (a map from
// dimension index, or one entry per dimension with xport::shape(...)), nested like the inputs
// (shape_spec::list / shape_spec::dict). A dimension is a named Dim (strict: export fails if the
// code fixes or narrows it), a derived Dim (`2*batch`, `batch + 1`), a hint (Dim::automatic,
// Dim::dynamic, Dim::static_), an int (static, must match) or std::nullopt (static).
#pragma once

#include <algorithm>         // std::sort, std::find
#include <cstddef>           // std::size_t
#include <cstdint>           // std::int64_t
#include <initializer_list>  // std::initializer_list
#include <map>               // std::map
#include <optional>          // std::optional
#include <string>            // std::string
#include <type_traits>       // std::is_integral_v
#include <utility>           // std::pair
#include <variant>           // std::variant
#include <vector>            // std::vector

#include <ATen/core/Tensor.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/ir/treespec.hpp>

XPORT_BEGIN_NAMESPACE

/// Dim::automatic, Dim::dynamic, Dim::static_ (torch's Dim.AUTO / DYNAMIC / STATIC); callable
/// for bounds: `Dim::dynamic(std::nullopt, 64)`.
struct dim_hint {
  enum class kind : std::uint8_t { automatic, dynamic, static_ };
  kind type = kind::automatic;
  std::optional<std::int64_t> min, max;

  [[nodiscard]] dim_hint operator()(std::optional<std::int64_t> lo = std::nullopt,
                                    std::optional<std::int64_t> hi = std::nullopt) const {
    if (lo && *lo < 0) throw export_error("xport.export.dynamic_shapes", "Dim hint min must be non-negative");
    if (lo && hi && *lo > *hi) throw export_error("xport.export.dynamic_shapes", "Dim hint min must be <= max");
    return {type, lo, hi};
  }
  /// torch's repr: `DimHint(DYNAMIC)`, `DimHint(AUTO, min=16)`.
  [[nodiscard]] std::string str() const {
    std::string s = "DimHint(";
    s += type == kind::automatic ? "AUTO" : type == kind::dynamic ? "DYNAMIC" : "STATIC";
    if (min) s += ", min=" + std::to_string(*min);
    if (max) s += ", max=" + std::to_string(*max);
    return s + ")";
  }
};

/// A named dynamic dimension, or a dimension derived from one (`2*batch`, `batch + 1`). Dims
/// with the same name are the same dimension.
class Dim {
 public:
  /// torch's defaults: min 0, max infinity.
  explicit Dim(std::string name, std::optional<std::int64_t> min = std::nullopt,
               std::optional<std::int64_t> max = std::nullopt)
      : root_(std::move(name)), min_(min.value_or(0)), max_(max.value_or(int_oo)) {
    if (!is_identifier(root_))
      throw export_error("xport.export.dynamic_shapes", "Dim name must be a valid identifier, got " + root_);
    if (!(max_ > min_))
      throw export_error("xport.export.dynamic_shapes", "Cannot create Dim with inconsistent min=" +
                                                            std::to_string(min_) + ", max=" + bound(max_));
    if (min_ < 0)
      throw export_error("xport.export.dynamic_shapes",
                         "Cannot create Dim " + root_ + " with min=" + std::to_string(min_) + ": sizes are >= 0");
  }

  static constexpr dim_hint automatic{dim_hint::kind::automatic, std::nullopt, std::nullopt};
  static constexpr dim_hint dynamic{dim_hint::kind::dynamic, std::nullopt, std::nullopt};
  static constexpr dim_hint static_{dim_hint::kind::static_, std::nullopt, std::nullopt};

  /// The name: the root's, or the derived expression as sympy prints it (`2*batch + 1`).
  [[nodiscard]] std::string name() const {
    if (!derived()) return root_;
    std::string s = a_ == 1 ? root_ : std::to_string(a_) + "*" + root_;
    if (b_ > 0) s += " + " + std::to_string(b_);
    if (b_ < 0) s += " - " + std::to_string(-b_);
    return s;
  }
  [[nodiscard]] const std::string& root() const noexcept { return root_; }
  [[nodiscard]] bool derived() const noexcept { return a_ != 1 || b_ != 0; }
  [[nodiscard]] std::int64_t scale() const noexcept { return a_; }
  [[nodiscard]] std::int64_t offset() const noexcept { return b_; }
  /// The root's bounds.
  [[nodiscard]] std::int64_t root_min() const noexcept { return min_; }
  [[nodiscard]] std::int64_t root_max() const noexcept { return max_; }
  /// This dimension's bounds (derived: the root's, mapped).
  [[nodiscard]] std::int64_t min() const noexcept { return a_ * min_ + b_; }
  [[nodiscard]] std::int64_t max() const noexcept { return max_ == int_oo ? int_oo : a_ * max_ + b_; }

  /// torch's readable form: `Dim('batch', min=0)`, `Dim('batch', min=1, max=1024)`, `2*batch`.
  [[nodiscard]] std::string str() const {
    if (derived()) return name();
    std::string s = "Dim('" + root_ + "'";
    if (min_ != 2) s += ", min=" + std::to_string(min_);
    if (max_ != int_oo) s += ", max=" + std::to_string(max_);
    return s + ")";
  }

  friend Dim operator*(const Dim& d, std::int64_t k) {
    if (k <= 0) fail_op("Attempted to multiply " + std::to_string(k) + " with " + d.name() +
                        ", where a positive integer was expected.");
    Dim r = d;
    r.a_ *= k;
    r.b_ *= k;
    return r.checked();
  }
  friend Dim operator*(std::int64_t k, const Dim& d) { return d * k; }
  friend Dim operator+(const Dim& d, std::int64_t k) {
    Dim r = d;
    r.b_ += k;
    return r.checked();
  }
  friend Dim operator+(std::int64_t k, const Dim& d) { return d + k; }
  friend Dim operator-(const Dim& d, std::int64_t k) { return d + (-k); }
  /// `k - dim` decreases: torch refuses it, and so does xport (at run time: C++ cannot say it earlier).
  friend Dim operator-(std::int64_t, const Dim& d) { fail_op("Attempted to negate " + d.name() + "."); }
  friend Dim operator+(const Dim& d, const Dim& o) {
    fail_op("Attempted to add " + o.name() + " to " + d.name() + ", where an integer was expected.");
  }
  friend Dim operator-(const Dim& d, const Dim& o) {
    fail_op("Attempted to subtract " + o.name() + " from " + d.name() + ", where an integer was expected.");
  }
  friend Dim operator*(const Dim& d, const Dim& o) {
    fail_op("Attempted to multiply " + o.name() + " with " + d.name() + ", where a positive integer was expected.");
  }

 private:
  [[noreturn]] static void fail_op(const std::string& what) {
    throw export_error("xport.export.dynamic_shapes",
                       what + " (Only increasing linear operations with integer coefficients are supported.)");
  }
  Dim checked() const {
    if (min() < 0)
      throw export_error("xport.export.dynamic_shapes",
                         "Derived dim " + name() + " would have min " + std::to_string(min()) +
                             " for " + root_ + " = " + std::to_string(min_) +
                             ": sizes are >= 0; raise the min of Dim('" + root_ + "')");
    return *this;
  }
  static std::string bound(std::int64_t v) { return v == int_oo ? "int_oo" : std::to_string(v); }
  static bool is_identifier(const std::string& s) {
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
    for (char c : s)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
  }

  std::string root_;
  std::int64_t min_, max_;
  std::int64_t a_ = 1, b_ = 0;
};

/// What one dimension of one input is: static (None or an int), a Dim, or a hint.
class dim_spec {
 public:
  dim_spec() = default;
  dim_spec(std::nullopt_t) {}                          // NOLINT
  dim_spec(Dim d) : v_(std::move(d)) {}                // NOLINT
  dim_spec(dim_hint h) : v_(h) {}                      // NOLINT
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  dim_spec(I n) : v_(static_cast<std::int64_t>(n)) {}  // NOLINT

  [[nodiscard]] bool is_none() const noexcept { return v_.index() == 0; }
  [[nodiscard]] const std::int64_t* fixed() const noexcept { return std::get_if<std::int64_t>(&v_); }
  [[nodiscard]] const Dim* dim() const noexcept { return std::get_if<Dim>(&v_); }
  [[nodiscard]] const dim_hint* hint() const noexcept { return std::get_if<dim_hint>(&v_); }
  /// As torch's messages show it.
  [[nodiscard]] std::string str() const {
    if (is_none()) return "None";
    if (fixed()) return std::to_string(*fixed());
    if (dim()) return dim()->str();
    return hint()->str();
  }

 private:
  std::variant<std::monostate, std::int64_t, Dim, dim_hint> v_;
};

/// The spec of one input: None (all static), a tensor's dims (by index: `{{0, batch}}`, or all of
/// them: xport::shape(batch, 3, Dim::static_)), or a container's items (list / dict).
class shape_spec {
 public:
  enum class kind : std::uint8_t { none, by_index, sizes, list, dict };

  shape_spec() = default;
  shape_spec(std::nullopt_t) {}  // NOLINT
  shape_spec(std::initializer_list<std::pair<const std::int64_t, dim_spec>> dims)  // NOLINT
      : kind_(kind::by_index), by_index_(dims) {}
  static shape_spec sizes(std::vector<dim_spec> dims) {
    shape_spec s;
    s.kind_ = kind::sizes;
    s.sizes_ = std::move(dims);
    return s;
  }
  static shape_spec list(std::vector<shape_spec> items) {
    shape_spec s;
    s.kind_ = kind::list;
    s.items_ = std::move(items);
    return s;
  }
  static shape_spec dict(std::vector<std::pair<std::string, shape_spec>> items) {
    shape_spec s;
    s.kind_ = kind::dict;
    for (auto& [k, v] : items) {
      s.keys_.push_back(std::move(k));
      s.items_.push_back(std::move(v));
    }
    return s;
  }

  [[nodiscard]] kind type() const noexcept { return kind_; }
  [[nodiscard]] const std::map<std::int64_t, dim_spec>& by_index() const noexcept { return by_index_; }
  [[nodiscard]] const std::vector<dim_spec>& dims() const noexcept { return sizes_; }
  [[nodiscard]] const std::vector<shape_spec>& items() const noexcept { return items_; }
  [[nodiscard]] const std::vector<std::string>& keys() const noexcept { return keys_; }

  /// As Python would print the spec: `{0: Dim('batch', min=0)}`, `(Dim('b'), 3)`, `None`.
  [[nodiscard]] std::string str() const {
    std::string s;
    switch (kind_) {
      case kind::none: return "None";
      case kind::by_index:
        for (const auto& [i, d] : by_index_) s += (s.empty() ? "" : ", ") + std::to_string(i) + ": " + d.str();
        return "{" + s + "}";
      case kind::sizes:
        for (const auto& d : sizes_) s += (s.empty() ? "" : ", ") + d.str();
        return "(" + s + (sizes_.size() == 1 ? ",)" : ")");
      case kind::list:
        for (const auto& d : items_) s += (s.empty() ? "" : ", ") + d.str();
        return "[" + s + "]";
      case kind::dict:
        for (std::size_t i = 0; i < items_.size(); ++i)
          s += (i ? ", " : "") + ("'" + keys_[i] + "': ") + items_[i].str();
        return "{" + s + "}";
    }
    return "?";
  }

 private:
  kind kind_ = kind::none;
  std::map<std::int64_t, dim_spec> by_index_;
  std::vector<dim_spec> sizes_;
  std::vector<shape_spec> items_;
  std::vector<std::string> keys_;
};

/// Every dimension of a tensor, in order: `xport::shape(batch, 3, xport::Dim::static_)`.
template <class... D>
shape_spec shape(D&&... dims) {
  return shape_spec::sizes({dim_spec(std::forward<D>(dims))...});
}

/// Several Dims with the same bounds: `auto hw = xport::dims({"h", "w"}, 1, 512);` (torch's dims()).
inline std::vector<Dim> dims(const std::vector<std::string>& names, std::optional<std::int64_t> min = std::nullopt,
                             std::optional<std::int64_t> max = std::nullopt) {
  std::vector<Dim> out;
  for (const auto& n : names) out.emplace_back(n, min, max);
  return out;
}

/// export's `dynamic_shapes`: by argument name (`{{"x", {{0, batch}}}}`) or positional.
class dynamic_shapes {
 public:
  dynamic_shapes() = default;
  dynamic_shapes(std::initializer_list<std::pair<std::string, shape_spec>> by_name)  // NOLINT
      : named_(true) {
    for (const auto& [k, v] : by_name) {
      keys_.push_back(k);
      items_.push_back(v);
    }
  }
  static dynamic_shapes positional(std::vector<shape_spec> items) {
    dynamic_shapes d;
    d.items_ = std::move(items);
    d.positional_ = true;
    return d;
  }

  [[nodiscard]] bool empty() const noexcept { return !named_ && !positional_; }
  [[nodiscard]] bool named() const noexcept { return named_; }
  [[nodiscard]] const std::vector<std::string>& keys() const noexcept { return keys_; }
  [[nodiscard]] const std::vector<shape_spec>& items() const noexcept { return items_; }

 private:
  bool named_ = false, positional_ = false;
  std::vector<std::string> keys_;
  std::vector<shape_spec> items_;
};

namespace detail {

/// torch's report of dynamic dims that the code or the examples do not allow, thrown as
/// constraint_violation (the one place that writes it):
///   Constraints violated (a, b)!
///     - <problem>
///   Suggested fixes:
///     <fix, one per line>
/// `dims` are sorted; without fixes there is no "Suggested fixes".
[[noreturn]] inline void throw_constraints_violated(std::vector<std::string> dims, const std::string& problem,
                                                    const std::vector<std::string>& fixes = {}) {
  std::sort(dims.begin(), dims.end());
  std::string msg = "Constraints violated (";
  for (std::size_t i = 0; i < dims.size(); ++i) msg += (i ? ", " : "") + dims[i];
  msg += ")!\n  - " + problem;
  if (!fixes.empty()) msg += "\nSuggested fixes:";
  for (const auto& f : fixes) msg += "\n  " + f;
  throw constraint_violation("xport.export.constraint_violation", msg);
}

/// One symbol of a dynamic export: a user's Dim, or a dimension marked with a hint.
struct dyn_root {
  std::string dim_name;  ///< the user's name (`batch`), or the input path for hints
  std::int64_t min = 0, max = int_oo;
  std::int64_t hint = -1;  ///< the example's value (-1 until an input gives it)
  bool named = true;       ///< a Dim (strict) rather than a hint
  bool automatic = false;  ///< Dim::automatic: falls back to static when the code specializes it
  std::string where;       ///< the first input dimension it came from: `x.shape[0]`
  std::string source;      ///< that dimension as torch names it: `L['x'].size()[0]`
};
/// One input dimension: static, or a*root + b.
struct dyn_dim {
  int root = -1;
  std::int64_t a = 1, b = 0;
};
/// The dynamic dims of every tensor input (in leaf order).
struct dyn_plan {
  std::vector<dyn_root> roots;
  std::vector<std::vector<dyn_dim>> leaves;
  [[nodiscard]] bool any() const noexcept { return !roots.empty(); }
};

class dyn_resolver {
 public:
  dyn_resolver(const std::vector<at::Tensor>& examples, const std::vector<std::string>& leaf_names)
      : examples_(examples), leaf_names_(leaf_names) {
    plan_.leaves.resize(examples.size());
    for (std::size_t i = 0; i < examples.size(); ++i)
      plan_.leaves[i].resize(static_cast<std::size_t>(examples[i].dim()));
  }

  dyn_plan resolve(const dynamic_shapes& spec, const treespec& in_spec, const std::vector<std::string>& arg_names) {
    const auto& args = in_spec.children;
    if (spec.named()) {
      auto want = arg_names, got = spec.keys();
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      if (want != got)
        fail("When `dynamic_shapes` is specified as a dict, its top-level keys must be the arg names " +
             list_repr(arg_names) + " of `inputs`, but here they are " + list_repr(spec.keys()) +
             ". Alternatively, you could also ignore arg names entirely and specify `dynamic_shapes` as a "
             "list/tuple matching `inputs` (xport::dynamic_shapes::positional), or name the arguments "
             "with export_options::input_names.");
      for (std::size_t i = 0; i < args.size(); ++i) {
        const auto k = static_cast<std::size_t>(
            std::find(spec.keys().begin(), spec.keys().end(), arg_names[i]) - spec.keys().begin());
        walk(args[i], spec.items()[k], "['" + arg_names[i] + "']", "L['" + arg_names[i] + "']");
      }
    } else {
      if (spec.items().size() != args.size())
        fail("`dynamic_shapes` has " + std::to_string(spec.items().size()) + " positional entries, but the "
             "program takes " + std::to_string(args.size()) + " argument(s); give one entry per argument "
             "(std::nullopt for an argument with only static sizes)");
      for (std::size_t i = 0; i < args.size(); ++i)
        walk(args[i], spec.items()[i], "[" + std::to_string(i) + "]", "L['" + arg_names[i] + "']");
    }
    solve_hints();
    return std::move(plan_);
  }

 private:
  [[noreturn]] static void fail(const std::string& msg) { throw export_error("xport.export.dynamic_shapes", msg); }
  static std::string list_repr(const std::vector<std::string>& xs) {
    std::string s;
    for (const auto& x : xs) s += (s.empty() ? "'" : ", '") + x + "'";
    return "[" + s + "]";
  }
  static std::string type_name(const treespec& t) {
    switch (t.type) {
      case treespec::kind::leaf: return "Tensor";
      case treespec::kind::constant: return t.value.is_string() ? "str" : t.value.is_double() ? "float" : t.value.is_bool() ? "bool" : "int";
      case treespec::kind::none: return "None";
      case treespec::kind::tuple: return "tuple";
      case treespec::kind::list: return "list";
      case treespec::kind::dict: return "dict";
      case treespec::kind::node: return t.short_type_name();
    }
    return "?";
  }

  // `path` locates the spec in messages; `source` is how torch names the same input (`L['x'][0]`)
  void walk(const treespec& t, const shape_spec& s, const std::string& path, const std::string& source) {
    using K = shape_spec::kind;
    if (s.type() == K::none) {
      leaf_ += t.num_leaves();
      return;
    }
    switch (t.type) {
      case treespec::kind::leaf: {
        if (s.type() == K::list || s.type() == K::dict)
          fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path +
               "` is a Tensor, but `dynamic_shapes" + path + "` is a " + (s.type() == K::list ? "list" : "dict") +
               " (" + s.str() + ")");
        tensor(leaf_++, s, path, source);
        return;
      }
      case treespec::kind::node:  // a dataclass: a dict of its fields, or a list of its children
        if (!t.keys.empty() && s.type() == K::dict) {
          walk_dict(t, s, path, source);
          return;
        }
        [[fallthrough]];
      case treespec::kind::tuple:
      case treespec::kind::list: {
        if (s.type() != K::list)
          fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path + "` is a " +
               type_name(t) + ", but `dynamic_shapes" + path + "` is not (it is " + s.str() +
               "; use xport::shape_spec::list)");
        if (s.items().size() != t.children.size())
          fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path + "` has " +
               std::to_string(t.children.size()) + " elements, but `dynamic_shapes" + path + "` has " +
               std::to_string(s.items().size()) + " elements");
        for (std::size_t i = 0; i < t.children.size(); ++i)
          walk(t.children[i], s.items()[i], path + "[" + std::to_string(i) + "]", source + "[" + std::to_string(i) + "]");
        return;
      }
      case treespec::kind::dict: {
        if (s.type() != K::dict)
          fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path +
               "` is a dict, but `dynamic_shapes" + path + "` is not (it is " + s.str() +
               "; use xport::shape_spec::dict)");
        walk_dict(t, s, path, source);
        return;
      }
      default:
        fail("Cannot associate shape " + s.str() + " specified at `dynamic_shapes" + path + "` to non-tensor type " +
             type_name(t) + " at `inputs" + path + "` (expected None)");
    }
  }

  // a dict, or a node with field names, against a dict of specs
  void walk_dict(const treespec& t, const shape_spec& s, const std::string& path, const std::string& source) {
    auto want = t.keys, got = s.keys();
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    if (want != got)
      fail("Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs" + path +
           "` has keys " + list_repr(t.keys) + ", but `dynamic_shapes" + path + "` has keys " + list_repr(s.keys()));
    for (std::size_t i = 0; i < t.children.size(); ++i) {
      const auto k = static_cast<std::size_t>(std::find(s.keys().begin(), s.keys().end(), t.keys[i]) - s.keys().begin());
      walk(t.children[i], s.items()[k], path + "['" + t.keys[i] + "']", source + "['" + t.keys[i] + "']");
    }
  }

  void tensor(std::size_t leaf, const shape_spec& s, const std::string& path, const std::string& source) {
    const auto& ex = examples_[leaf];
    const auto n = ex.dim();
    auto shape_text = [&] {
      std::string t;
      for (auto v : ex.sizes()) t += (t.empty() ? "" : ", ") + std::to_string(v);
      return "torch.Size([" + t + "])";
    };
    if (s.type() == shape_spec::kind::sizes) {
      if (static_cast<std::int64_t>(s.dims().size()) != n)
        fail("Expected dynamic shape spec " + s.str() + " specified at `dynamic_shapes" + path +
             "` to have the same length as the actual tensor shape " + shape_text() + " (expected " +
             std::to_string(n) + ", but got " + std::to_string(s.dims().size()) + " instead)");
      for (std::int64_t d = 0; d < n; ++d) one(leaf, d, s.dims()[static_cast<std::size_t>(d)], path, source);
      return;
    }
    for (const auto& [d, spec] : s.by_index()) {
      if (d < 0 || d >= n)
        fail("Dynamic shape spec " + s.str() + " specified at `dynamic_shapes" + path + "` names dimension " +
             std::to_string(d) + ", but the tensor at `inputs" + path + "` has shape " + shape_text() + " (" +
             std::to_string(n) + " dimension(s))");
      one(leaf, d, spec, path, source);
    }
  }

  void one(std::size_t leaf, std::int64_t d, const dim_spec& spec, const std::string& path, const std::string& source) {
    const auto size = examples_[leaf].size(d);
    const auto where = leaf_names_[leaf] + ".shape[" + std::to_string(d) + "]";
    const auto dim_source = source + ".size()[" + std::to_string(d) + "]";
    auto& slot = plan_.leaves[leaf][static_cast<std::size_t>(d)];
    if (spec.is_none()) return;
    if (const auto* f = spec.fixed()) {
      if (*f != size)
        fail("`dynamic_shapes" + path + "` gives dimension " + std::to_string(d) + " the static size " +
             std::to_string(*f) + ", but the example input " + where + " is " + std::to_string(size));
      return;
    }
    if (const auto* h = spec.hint()) {
      if (h->type == dim_hint::kind::static_) return;
      dyn_root r;
      r.dim_name = where;
      r.min = h->min.value_or(0);
      r.max = h->max.value_or(int_oo);
      r.named = false;
      r.automatic = h->type == dim_hint::kind::automatic;
      r.where = where;
      r.source = dim_source;
      r.hint = size;
      if (size < r.min || size > r.max)
        fail("the example size " + std::to_string(size) + " of " + where + " is outside " + h->str() + " given at `dynamic_shapes" +
             path + "[" + std::to_string(d) + "]`");
      slot.root = static_cast<int>(plan_.roots.size());
      plan_.roots.push_back(std::move(r));
      return;
    }
    const Dim& dim = *spec.dim();
    int root = -1;
    for (std::size_t i = 0; i < plan_.roots.size(); ++i)
      if (plan_.roots[i].named && plan_.roots[i].dim_name == dim.root()) root = static_cast<int>(i);
    if (root < 0) {
      dyn_root r;
      r.dim_name = dim.root();
      r.min = dim.root_min();
      r.max = dim.root_max();
      r.source = dim_source;
      root = static_cast<int>(plan_.roots.size());
      plan_.roots.push_back(std::move(r));
    } else {
      auto& r = plan_.roots[static_cast<std::size_t>(root)];
      if (r.min != dim.root_min() || r.max != dim.root_max()) {
        const Dim mine(dim.root(), dim.root_min(), dim.root_max());
        fail("Found different definitions " + def_of(root).str() + " and " + mine.str() +
             " for the same symbolic dimension " + dim.root() + "!");
      }
    }
    slot = {root, dim.scale(), dim.offset()};
    uses_.push_back({leaf, d, dim, path});
  }

  /// The user's definition of a named root.
  Dim def_of(int root) const {
    const auto& r = plan_.roots[static_cast<std::size_t>(root)];
    return Dim(r.dim_name, r.min, r.max);
  }

  // Hints of named roots: from a direct use, else solved from a derived one; then every use must
  // agree and lie in range.
  void solve_hints() {
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& u : uses_) {
        auto& r = plan_.roots[static_cast<std::size_t>(slot_of(u).root)];
        if (r.hint >= 0) continue;
        const auto size = examples_[u.leaf].size(u.dim);
        const auto where = leaf_names_[u.leaf] + ".shape[" + std::to_string(u.dim) + "]";
        if (!u.spec.derived()) {
          r.hint = size;
          r.where = where;
        } else if (pass == 1) {
          const auto a = u.spec.scale(), b = u.spec.offset();
          if ((size - b) % a != 0 || (size - b) / a < 0)
            throw constraint_violation("xport.export.constraint_violation",
                                       "Expected shape[" + std::to_string(u.dim) + "] = " + std::to_string(size) +
                                           " of input Tensor " + leaf_names_[u.leaf] + " to be of the form " +
                                           u.spec.name() + ", where " + u.spec.root() + " is an integer");
          r.hint = (size - b) / a;
          r.where = where;
        }
      }
    for (const auto& u : uses_) {
      const auto& r = plan_.roots[static_cast<std::size_t>(slot_of(u).root)];
      const auto size = examples_[u.leaf].size(u.dim);
      const auto where = leaf_names_[u.leaf] + ".shape[" + std::to_string(u.dim) + "]";
      const auto want = u.spec.scale() * r.hint + u.spec.offset();
      if (want != size)
        throw_constraints_violated({u.spec.root()}, where + " = " + std::to_string(size) + " is not equal to " +
                                                        (u.spec.derived() ? u.spec.name() + " = " : "") + std::to_string(want) +
                                                        " (" + u.spec.root() + " = " + std::to_string(r.hint) + " from " +
                                                        r.where + "): the example inputs must satisfy the relations dynamic_shapes states");
      if (r.hint < r.min || r.hint > r.max)
        fail("the example inputs give " + r.dim_name + " = " + std::to_string(r.hint) + " (from " + r.where +
             "), outside " + def_of(slot_of(u).root).str() + "; pick example sizes inside the Dim's range");
    }
  }

  struct use_site {
    std::size_t leaf;
    std::int64_t dim;
    Dim spec;
    std::string path;
  };
  const dyn_dim& slot_of(const use_site& u) const { return plan_.leaves[u.leaf][static_cast<std::size_t>(u.dim)]; }

  const std::vector<at::Tensor>& examples_;
  const std::vector<std::string>& leaf_names_;
  dyn_plan plan_;
  std::vector<use_site> uses_;
  std::size_t leaf_ = 0;
};

}  // namespace detail

XPORT_END_NAMESPACE
