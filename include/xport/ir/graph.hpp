// xport/ir/graph.hpp: the graph IR: graph, node, value, argument, use lists.
// The graph owns every node and value; `node` and `value` are one-pointer handles with value
// semantics (copyable, comparable, hashable). Node kinds follow torch.fx: placeholder,
// call_function, output. A call node holds its operator (op_info), its arguments in schema
// order (defaults filled), one value per output, and metadata (source location, module path,
// and one object of the user's own type: node.custom_meta<T>(), torch.fx's `node.meta`).
// `graph` is `basic_graph<>`; `basic_graph<Policy>` (after the core class) names the node
// metadata type and the memory resource of a user's graphs. Not here: building programs from op names (builder.hpp), checking (verify.hpp), printing.
#pragma once

#include <complex>      // std::complex
#include <cstddef>      // std::size_t
#include <concepts>     // std::copy_constructible, std::default_initializable
#include <cstdint>      // std::int64_t, std::uint32_t, std::uint64_t
#include <functional>   // std::hash
#include <initializer_list>  // std::initializer_list
#include <iterator>     // std::forward_iterator_tag
#include <memory>       // std::unique_ptr, std::shared_ptr
#include <memory_resource>  // std::pmr::memory_resource
#include <optional>     // std::optional, std::nullopt_t
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <type_traits>  // std::is_same_v
#include <typeinfo>     // std::type_info
#include <unordered_map>  // std::unordered_map
#include <utility>      // std::move, std::exchange, std::pair
#include <variant>      // std::variant
#include <vector>       // std::vector

#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>
#include <c10/util/Type.h>  // c10::demangle

#include <xport/config.hpp>
#include <xport/detail/names.hpp>
#include <xport/detail/pool.hpp>
#include <xport/detail/python_repr.hpp>
#include <xport/error.hpp>
#include <xport/fwd.hpp>
#include <xport/ir/op.hpp>
#include <xport/ir/sym_int.hpp>
#include <xport/ir/sym_scalar.hpp>
#include <xport/ir/tensor_meta.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {
struct node_impl;
struct value_impl;
}  // namespace detail

enum class node_kind : std::uint8_t { placeholder, call_function, output };

/// What a value holds at run time.
enum class value_kind : std::uint8_t {
  tensor,    ///< a Tensor; its tensor_meta is known
  sym_int,   ///< an int computed in the graph (e.g. aten::sym_size.int); its sym_int is known
  sym_float,
  sym_bool,
  none,      ///< an op output that is always None
  object,    ///< a custom class instance (torch::class_, a CUSTOM_OBJ input); its class_fqn is known
};

inline std::string_view to_string(node_kind k) {
  switch (k) {
    case node_kind::placeholder: return "placeholder";
    case node_kind::call_function: return "call_function";
    case node_kind::output: return "output";
  }
  return "?";
}

/// The type of a value: a tensor with its meta, or a symbolic scalar.
struct value_type {
  value_kind kind = value_kind::tensor;
  tensor_meta tensor;  ///< meaningful when kind == tensor
  sym_int scalar;      ///< meaningful when kind == sym_int
  /// Meaningful when kind == object: the class as TorchScript names it
  /// (`__torch__.torch.classes.ns.Name`).
  std::string class_fqn = {};

  static value_type of(tensor_meta m) { return {value_kind::tensor, std::move(m), {}}; }
  static value_type of_sym_int(sym_int s) { return {value_kind::sym_int, {}, std::move(s)}; }
  static value_type of_object(std::string class_fqn) { return {value_kind::object, {}, {}, std::move(class_fqn)}; }
  friend bool operator==(const value_type&, const value_type&) = default;
};

/// Where a node came from in the user's code: printed as
/// `# File: {file}:{line} in {function}, code: {code}`.
struct source_location {
  source_location() = default;
  /// (a constructor, not an aggregate: the metadata fields below may grow without a
  /// -Wmissing-field-initializers warning in code that writes `{file, line, function, code}`)
  source_location(std::string file_, std::uint32_t line_, std::string function_, std::string code_,
                  std::string custom_json_ = {}, std::string annotation_ = {})
      : file(std::move(file_)),
        line(line_),
        function(std::move(function_)),
        code(std::move(code_)),
        custom_json(std::move(custom_json_)),
        annotation(std::move(annotation_)) {}
  std::string file;
  std::uint32_t line = 0;
  std::string function;
  std::string code;
  /// torch's `custom` node metadata (user annotations, `torch.fx.traceback.annotate`, and what
  /// torch.compiler.disable marks), kept as the JSON text torch writes, and as torch prints it
  /// after `# Annotation: ` (its Python dict, each value cut at 40 characters).
  std::string custom_json;
  std::string annotation;
  friend bool operator==(const source_location&, const source_location&) = default;
};

class node;
struct use;
struct subgraph;

/// A value: a placeholder, or one output of a call node. One pointer; compare and hash freely.
class value {
 public:
  value() noexcept = default;
  explicit value(detail::value_impl* p) noexcept : p_(p) {}

  explicit operator bool() const noexcept { return p_ != nullptr; }
  [[nodiscard]] detail::value_impl* impl() const noexcept { return p_; }

  [[nodiscard]] const std::string& name() const;
  [[nodiscard]] node producer() const;
  /// The output position of this value in its producer (0 for placeholders).
  [[nodiscard]] std::size_t index() const;
  [[nodiscard]] value_kind kind() const;
  [[nodiscard]] const value_type& type() const;
  /// The tensor meta; throws graph_error when the value is not a tensor.
  [[nodiscard]] const tensor_meta& meta() const;
  void set_type(value_type t) const;
  void set_meta(tensor_meta m) const { set_type(value_type::of(std::move(m))); }

  [[nodiscard]] std::span<const use> uses() const;
  [[nodiscard]] std::size_t num_uses() const;
  /// Points every use of this value at `other` instead (Note [Use lists]).
  void replace_all_uses_with(value other) const;

  /// A word a pass may use as it likes (e.g. an index into its own table) instead of a hash
  /// map keyed by value. Not copied by clone; a pass sets it before it reads it.
  [[nodiscard]] std::uint32_t& scratch() const noexcept;

  /// Whether a getitem reads this output of a multi-output call (see value_impl::unpacked).
  [[nodiscard]] bool unpacked() const noexcept;
  void set_unpacked(bool u) const noexcept;

  friend bool operator==(value a, value b) noexcept { return a.p_ == b.p_; }

 private:
  detail::value_impl* p_ = nullptr;
};

struct none_t {
  friend bool operator==(none_t, none_t) noexcept { return true; }
};
/// The None argument.
inline constexpr none_t none{};

/// A call argument: a constant (None, bool, int, float, complex, str, dtype, device, layout, memory
/// format), a graph value, a list of arguments, or a subgraph (a branch or body of a
/// control-flow operator). Lists keep no element type of their own: the operator's schema says
/// whether `[1, 2]` is an `int[]` or a `float[]`.
class argument {
 public:
  using list_type = std::vector<argument>;
  enum class kind : std::uint8_t {
    none, boolean, integer, floating, string, dtype, device, layout, memory_format, value, list, symbolic, graph,
    complex,  ///< a Python complex number (`x * (1+2j)`): an `as_complex` argument
    scalar    ///< a SymFloat or SymBool computed from sizes (`s77 / 2`, `s77 > s17`): sym_scalar
  };

  argument() noexcept = default;
  argument(none_t) noexcept {}                   // NOLINT
  argument(std::nullopt_t) noexcept {}           // NOLINT
  argument(bool b) noexcept : v_(b) {}           // NOLINT
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool> && !std::is_same_v<I, char>)
  argument(I i) noexcept : v_(static_cast<std::int64_t>(i)) {}  // NOLINT
  argument(double d) noexcept : v_(d) {}         // NOLINT
  argument(float d) noexcept : v_(static_cast<double>(d)) {}  // NOLINT
  argument(std::complex<double> c) noexcept : v_(c) {}  // NOLINT
  argument(std::string s) : v_(std::move(s)) {}  // NOLINT
  argument(const char* s) : v_(std::string(s)) {}  // NOLINT
  argument(std::string_view s) : v_(std::string(s)) {}  // NOLINT
  argument(c10::ScalarType t) noexcept : v_(t) {}  // NOLINT
  argument(c10::Device d) noexcept : v_(d) {}    // NOLINT
  argument(c10::DeviceType d) : v_(c10::Device(d)) {}  // NOLINT
  argument(c10::Layout l) noexcept : v_(l) {}    // NOLINT
  argument(c10::MemoryFormat m) noexcept : v_(m) {}  // NOLINT
  argument(value v) noexcept : v_(v) {}          // NOLINT
  argument(const node& n);                       // NOLINT: a node with exactly one output
  argument(list_type l) : v_(std::move(l)) {}    // NOLINT
  /// A size that depends on a dynamic dimension (`s0`, `8*s0`): evaluated on every run from the
  /// inputs' sizes. A constant sym_int is stored as a plain int.
  argument(const sym_int& s) {  // NOLINT
    if (s.is_constant()) v_ = s.hint();
    else v_ = s;
  }
  /// A SymFloat or SymBool that depends on dynamic dimensions, evaluated on every run.
  argument(sym_scalar s) : v_(std::move(s)) {}  // NOLINT
  argument(std::initializer_list<argument> l) : v_(list_type(l)) {}  // NOLINT
  /// A subgraph (`true_graph_0` of a cond): shared, never changed once made (see subgraph).
  argument(std::shared_ptr<const subgraph> g) noexcept : v_(std::move(g)) {}  // NOLINT
  template <class T>
    requires(!std::is_same_v<T, argument> && std::is_constructible_v<argument, const T&>)
  argument(const std::vector<T>& xs) : v_(list_type(xs.begin(), xs.end())) {}  // NOLINT
  template <class T>
  argument(const std::optional<T>& o) : argument(o ? argument(*o) : argument()) {}  // NOLINT

  [[nodiscard]] kind type() const noexcept { return static_cast<kind>(v_.index()); }
  [[nodiscard]] bool is_none() const noexcept { return type() == kind::none; }
  [[nodiscard]] bool is_bool() const noexcept { return type() == kind::boolean; }
  [[nodiscard]] bool is_int() const noexcept { return type() == kind::integer; }
  [[nodiscard]] bool is_double() const noexcept { return type() == kind::floating; }
  [[nodiscard]] bool is_string() const noexcept { return type() == kind::string; }
  [[nodiscard]] bool is_dtype() const noexcept { return type() == kind::dtype; }
  [[nodiscard]] bool is_device() const noexcept { return type() == kind::device; }
  [[nodiscard]] bool is_layout() const noexcept { return type() == kind::layout; }
  [[nodiscard]] bool is_memory_format() const noexcept { return type() == kind::memory_format; }
  [[nodiscard]] bool is_value() const noexcept { return type() == kind::value; }
  [[nodiscard]] bool is_list() const noexcept { return type() == kind::list; }
  [[nodiscard]] bool is_symbolic() const noexcept { return type() == kind::symbolic; }
  [[nodiscard]] bool is_graph() const noexcept { return type() == kind::graph; }
  [[nodiscard]] bool is_complex() const noexcept { return type() == kind::complex; }
  [[nodiscard]] bool is_scalar() const noexcept { return type() == kind::scalar; }

  [[nodiscard]] bool as_bool() const { return get<bool>(); }
  [[nodiscard]] std::int64_t as_int() const { return get<std::int64_t>(); }
  [[nodiscard]] double as_double() const { return get<double>(); }
  [[nodiscard]] std::complex<double> as_complex() const { return get<std::complex<double>>(); }
  [[nodiscard]] const std::string& as_string() const { return get<std::string>(); }
  [[nodiscard]] c10::ScalarType as_dtype() const { return get<c10::ScalarType>(); }
  [[nodiscard]] c10::Device as_device() const { return get<c10::Device>(); }
  [[nodiscard]] c10::Layout as_layout() const { return get<c10::Layout>(); }
  [[nodiscard]] c10::MemoryFormat as_memory_format() const { return get<c10::MemoryFormat>(); }
  [[nodiscard]] value as_value() const { return get<value>(); }
  [[nodiscard]] const sym_int& as_sym() const { return get<sym_int>(); }
  [[nodiscard]] const sym_scalar& as_scalar() const { return get<sym_scalar>(); }
  [[nodiscard]] const list_type& as_list() const { return get<list_type>(); }
  [[nodiscard]] const std::shared_ptr<const subgraph>& as_graph() const { return get<std::shared_ptr<const subgraph>>(); }
  [[nodiscard]] list_type& as_list() { return std::get<list_type>(v_); }
  [[nodiscard]] value* value_slot() noexcept { return std::get_if<value>(&v_); }

  /// Calls f(value&) for every value in this argument, depth first, in order.
  template <class F>
  void for_each_value(F&& f) {
    if (auto* v = std::get_if<value>(&v_)) f(*v);
    else if (auto* l = std::get_if<list_type>(&v_))
      for (auto& a : *l) a.for_each_value(f);
  }
  template <class F>
  void for_each_value(F&& f) const {
    if (auto* v = std::get_if<value>(&v_)) f(*v);
    else if (auto* l = std::get_if<list_type>(&v_))
      for (const auto& a : *l) a.for_each_value(f);
  }

  [[nodiscard]] std::string_view type_name() const noexcept {
    constexpr std::string_view names[] = {"None", "bool", "int", "float", "str", "dtype",
                                          "device", "layout", "memory_format", "value", "list", "SymInt",
                                          "GraphModule", "complex", "SymFloat"};
    return names[v_.index()];
  }

  friend bool operator==(const argument& a, const argument& b) { return a.v_ == b.v_; }

 private:
  template <class T>
  const T& get() const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    throw graph_error("xport.argument.type", std::string("argument holds ") +
                                                 std::string(type_name()) + ", not the type asked for");
  }

  std::variant<none_t, bool, std::int64_t, double, std::string, c10::ScalarType, c10::Device,
               c10::Layout, c10::MemoryFormat, value, list_type, sym_int, std::shared_ptr<const subgraph>,
               std::complex<double>, sym_scalar>
      v_;
};

/// A keyword argument for builder calls: `{"keepdim", true}`.
struct kwarg {
  std::string name;
  argument value;
};

/// One use of a value: operand `index` of node `user`. Note [Use lists]: a use names the operand
/// position, not only the user, because `add(x, x)` uses `x` twice.
struct use {
  detail::node_impl* user_impl = nullptr;
  std::uint32_t index = 0;
  [[nodiscard]] node user() const;
  friend bool operator==(const use&, const use&) = default;
};

/// A node of the graph. One pointer; compare and hash freely.
class node {
 public:
  node() noexcept = default;
  explicit node(detail::node_impl* p) noexcept : p_(p) {}
  explicit operator bool() const noexcept { return p_ != nullptr; }
  [[nodiscard]] detail::node_impl* impl() const noexcept { return p_; }

  [[nodiscard]] node_kind kind() const;
  [[nodiscard]] bool is_placeholder() const { return kind() == node_kind::placeholder; }
  [[nodiscard]] bool is_call() const { return kind() == node_kind::call_function; }
  [[nodiscard]] bool is_output() const { return kind() == node_kind::output; }

  /// The node's name: its output's name, or for multi-output nodes the name of the tuple.
  [[nodiscard]] const std::string& name() const;
  /// The operator of a call node; throws graph_error for other kinds.
  [[nodiscard]] const op_info& op() const;
  [[nodiscard]] const op_info* op_ptr() const;
  /// `torch.ops.aten.add.Tensor`, `placeholder`, `output`.
  [[nodiscard]] std::string target() const;

  /// Arguments in schema order, defaults filled in (for output: the returned values).
  [[nodiscard]] std::span<const argument> args() const;
  /// Replaces all arguments (use lists updated).
  void set_args(std::vector<argument> args) const;

  /// Value operands, flattened in argument order (lists included).
  [[nodiscard]] std::size_t num_inputs() const;
  [[nodiscard]] value input(std::size_t i) const;
  [[nodiscard]] std::vector<value> inputs() const;
  void replace_input(std::size_t i, value v) const;
  /// Replaces every operand equal to `from` by `to`.
  void replace_input_with(value from, value to) const;

  [[nodiscard]] std::size_t num_outputs() const;
  [[nodiscard]] value output(std::size_t i) const;
  [[nodiscard]] std::vector<value> outputs() const;
  /// The single output; throws graph_error when the node has none or several.
  [[nodiscard]] value out() const;
  operator value() const { return out(); }  // NOLINT: FX nodes are values
  value operator[](std::size_t i) const { return output(i); }
  /// Whether the outputs form a tuple (or Tensor[]) rather than a single value.
  [[nodiscard]] bool has_tuple_output() const;
  /// Whether its list argument (a torch.cond's operands) is a Python tuple, as torch.export
  /// records it in a program it traced; a program it loaded holds a list (printed so).
  [[nodiscard]] bool has_tuple_operands() const;
  void set_tuple_operands(bool on) const;
  /// Note [Call forms]: which of a call's schema-bound arguments its maker passed, and which of
  /// those by keyword (bit i: argument i), as torch records them (`kind: 2` in a .pt2, `dtype =
  /// torch.int64` in print(ep)): `_assert_tensor_metadata(b, dtype = torch.int64)` passes one of
  /// three defaults, by name. Unknown (nullopt) for a call xport made: its form follows from the
  /// schema (positional up to the last argument that is not its default, keyword-only ones by
  /// name where not default), as the dispatcher hands a call to Python.
  struct call_form {
    std::uint64_t given = 0;
    std::uint64_t keyword = 0;
    friend bool operator==(const call_form&, const call_form&) = default;
  };
  [[nodiscard]] std::optional<call_form> form() const;
  void set_form(std::optional<call_form> f) const;

  [[nodiscard]] node next() const;
  [[nodiscard]] node prev() const;
  /// Position in the node list: a before b iff a.order() < b.order().
  [[nodiscard]] std::uint64_t order() const;
  [[nodiscard]] bool is_before(node other) const { return order() < other.order(); }
  [[nodiscard]] graph& owning_graph() const;

  [[nodiscard]] const std::shared_ptr<const source_location>& source() const;
  void set_source(std::shared_ptr<const source_location> s) const;
  /// Fully qualified name of the module whose forward made this node ("" for the root).
  [[nodiscard]] const std::string& module_path() const;
  void set_module_path(std::string path) const;

  /// The user's metadata on this node (torch.fx's `node.meta`): one object of any copyable type,
  /// made by T's default constructor on first use. Passes that keep a node keep it, graph copies
  /// copy it, and the nodes lowering makes from a node (functionalize, run_decompositions,
  /// canonicalize, rewrite) start with a copy of it. Throws graph_error when the node holds an
  /// object of another type.
  template <class T>
  T& custom_meta() const;
  /// The metadata if the node holds some (nullptr otherwise); throws graph_error as above.
  template <class T>
  [[nodiscard]] T* find_custom_meta() const;
  /// Replaces the node's metadata, whatever its type was.
  template <class T>
  void set_custom_meta(T meta) const;
  [[nodiscard]] bool has_custom_meta() const;
  void clear_custom_meta() const;
  /// Makes this node's metadata a copy of `other`'s (none if it has none).
  void copy_custom_meta_from(node other) const;

  friend bool operator==(node a, node b) noexcept { return a.p_ == b.p_; }

 private:
  detail::node_impl* p_ = nullptr;
};

inline argument::argument(const node& n) : v_(n.out()) {}

namespace detail {

// A node's user metadata, type-erased so that the graph stays one type for every policy.
struct custom_meta_box {
  custom_meta_box() = default;
  custom_meta_box(const custom_meta_box&) = delete;
  custom_meta_box& operator=(const custom_meta_box&) = delete;
  virtual ~custom_meta_box() = default;
  [[nodiscard]] virtual const std::type_info& type() const noexcept = 0;
  [[nodiscard]] virtual std::unique_ptr<custom_meta_box> clone() const = 0;
};
template <class T>
struct custom_meta_of final : custom_meta_box {
  explicit custom_meta_of(T v) : value(std::move(v)) {}
  [[nodiscard]] const std::type_info& type() const noexcept override { return typeid(T); }
  [[nodiscard]] std::unique_ptr<custom_meta_box> clone() const override {
    return std::make_unique<custom_meta_of>(value);
  }
  T value;
};

// Field order follows use: what a walk over the graph reads (links, op, outputs, uses) sits in
// the first cache line of each object, the rest after it.
struct value_impl {
  std::vector<use> uses;
  node_impl* producer = nullptr;
  std::uint32_t index = 0;
  /// Free for the pass that is running (fits in the padding after `index`); not copied by
  /// clone. A pass that uses it sets it on every value it reads before relying on it.
  mutable std::uint32_t scratch = 0;
  /// An output of a multi-output call that a `getitem` reads in torch.fx terms: set when the
  /// node is made (the traced code received every output), cleared for unused outputs by
  /// dead-code elimination, as FX's drops the unused getitem nodes.
  bool unpacked = true;
  std::string name;
  value_type type;
};

struct node_impl {
  node_impl* prev = nullptr;
  node_impl* next = nullptr;
  std::uint64_t order = 0;
  const op_info* op = nullptr;
  node_kind kind = node_kind::call_function;
  bool tuple_output = false;
  bool tuple_operands = false;
  bool has_form = false;  // node::form(): the call form torch recorded (Note [Call forms])
  std::uint64_t form_given = 0, form_keyword = 0;
  bool bare_return = false;  // the output node of a graph returning its one value bare
  bool list_return = false;  // the output node of a graph returning a list (torch.scan's combine graph)
  c10::SmallVector<value_impl*, 1> outputs;
  c10::SmallVector<value*, 4> slots;  // each operand's `value` inside args (Note [Use lists])
  c10::SmallVector<std::uint32_t, 4> use_pos;  // where each operand's use sits in its value's list
  graph* owner = nullptr;
  c10::SmallVector<argument, 4> args;
  std::string name;  // tuple name; single-output nodes use outputs[0]->name
  std::shared_ptr<const source_location> source;
  std::string module_path;
  std::unique_ptr<custom_meta_box> custom;  // node.custom_meta<T>()
};

// O(1): the operand knows its use's position; the last use takes its place.
inline void remove_use(value_impl* v, node_impl* user, std::uint32_t index) {
  auto& u = v->uses;
  const std::uint32_t pos = user->use_pos[index];
  const use last = u.back();
  u[pos] = last;
  last.user_impl->use_pos[last.index] = pos;
  u.pop_back();
}
inline void add_use(value_impl* v, node_impl* user, std::uint32_t index) {
  user->use_pos[index] = static_cast<std::uint32_t>(v->uses.size());
  v->uses.push_back(use{user, index});
}

}  // namespace detail

/// Forward range over a graph's nodes, in order.
class node_range {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = node;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = node;
    iterator() = default;
    explicit iterator(detail::node_impl* p) : p_(p) {}
    node operator*() const { return node(p_); }
    iterator& operator++() {
      p_ = p_->next;
      return *this;
    }
    iterator operator++(int) {
      auto t = *this;
      p_ = p_->next;
      return t;
    }
    friend bool operator==(iterator a, iterator b) { return a.p_ == b.p_; }

   private:
    detail::node_impl* p_ = nullptr;
  };
  node_range(detail::node_impl* first) : first_(first) {}
  [[nodiscard]] iterator begin() const { return iterator(first_); }
  [[nodiscard]] iterator end() const { return iterator(nullptr); }

 private:
  detail::node_impl* first_;
};

/// The graph: an ordered list of nodes that owns every node and value.
///
/// Note [Topological invariant]: nodes are kept in an order where every value is defined before
/// any node that uses it; placeholders come first, the output node (when present) last.
/// Every mutation keeps this true; verify() checks it.
///
/// Note [Use lists]: every operand slot of every node appears exactly once in the use list of
/// the value it refers to, as (user, operand index); operand indices count the values met when
/// walking the arguments depth first. Each operand also records where its use sits in that list,
/// so removing a use is O(1) (use lists are unordered). verify() checks it all.
template <>
class basic_graph<default_policy> {
 public:
  using policy_type = default_policy;

  basic_graph() = default;
  /// A graph whose nodes and values are carved from `resource` (which must outlive it).
  explicit basic_graph(std::pmr::memory_resource* resource) noexcept
      : node_pool_(resource), value_pool_(resource) {}
  basic_graph(const basic_graph&) = delete;
  basic_graph& operator=(const basic_graph&) = delete;
  /// Takes `o`'s nodes and memory resource; `o` is left empty.
  basic_graph(basic_graph&& o) noexcept : node_pool_(o.node_pool_.resource()), value_pool_(o.value_pool_.resource()) {
    steal(o);
  }
  /// Takes `o`'s nodes; the policy and the resource of new nodes stay this graph's.
  basic_graph& operator=(basic_graph&& o) noexcept {
    if (this != &o) {
      clear();
      steal(o);
    }
    return *this;
  }
  ~basic_graph() { clear(); }

  /// Where this graph's node and value storage comes from.
  [[nodiscard]] std::pmr::memory_resource* memory_resource() const noexcept { return node_pool_.resource(); }
  /// The policy this graph object was made with (`default_policy` for a plain graph).
  [[nodiscard]] const std::type_info& policy() const noexcept { return *policy_; }

  [[nodiscard]] node_range nodes() const { return node_range(first_); }
  [[nodiscard]] node first() const { return node(first_); }
  [[nodiscard]] node last() const { return node(last_); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  [[nodiscard]] std::vector<node> placeholders() const {
    std::vector<node> out;
    for (auto* n = first_; n && n->kind == node_kind::placeholder; n = n->next) out.emplace_back(n);
    return out;
  }
  /// The output node, or a null node when the graph has none yet.
  [[nodiscard]] node output_node() const {
    return last_ && last_->kind == node_kind::output ? node(last_) : node();
  }
  /// Whether the graph returns its one value bare (`return lt`), not as a 1-tuple, as torch's
  /// while_loop cond graph does (`is_single_tensor_return` in a .pt2). Kept by clone().
  [[nodiscard]] bool returns_bare() const noexcept { return last_ && last_->kind == node_kind::output && last_->bare_return; }
  void set_returns_bare(bool on) {
    if (!last_ || last_->kind != node_kind::output)
      throw graph_error("xport.graph.no_output", "set_returns_bare: the graph has no output node yet");
    last_->bare_return = on;
  }
  /// Whether the graph returns a list (`return [add, clone]`), as the combine graph of a
  /// torch.scan torch traced does (a loaded one returns a tuple). Kept by clone().
  [[nodiscard]] bool returns_list() const noexcept { return last_ && last_->kind == node_kind::output && last_->list_return; }
  void set_returns_list(bool on) {
    if (!last_ || last_->kind != node_kind::output)
      throw graph_error("xport.graph.no_output", "set_returns_list: the graph has no output node yet");
    last_->list_return = on;
  }
  /// Values the graph returns (operands of the output node).
  [[nodiscard]] std::vector<value> outputs() const {
    auto o = output_node();
    return o ? o.inputs() : std::vector<value>{};
  }

  /// Appends a placeholder after the existing placeholders. `name` is used as given; it must be
  /// a fresh Python identifier.
  value add_placeholder(const std::string& name, value_type type) {
    if (!detail::is_identifier(name))
      throw graph_error("xport.graph.bad_name",
                        "placeholder name '" + name + "' is not a valid Python identifier");
    if (!names_.claim(name))
      throw graph_error("xport.graph.duplicate_name",
                        "placeholder name '" + name + "' is already used in this graph or is a "
                        "Python keyword; pick another name");
    return link_placeholder(name, std::move(type));
  }
  /// Appends a placeholder named after `candidate`, made unique (`x`, `x_1`, ...); with
  /// `before`, inserts it there instead (a placeholder: the caller keeps placeholders first).
  value add_placeholder_fresh(std::string_view candidate, value_type type, node before = {}) {
    return link_placeholder(names_.create(candidate), std::move(type), before.impl());
  }

 private:
  value link_placeholder(const std::string& name, value_type type, detail::node_impl* before = nullptr) {
    auto* n = node_pool_.create();
    n->kind = node_kind::placeholder;
    auto* v = value_pool_.create();
    v->producer = n;
    v->type = std::move(type);
    v->name = name;
    value result(v);
    n->outputs.push_back(v);
    if (before) {
      link_before(n, before);
      return result;
    }
    detail::node_impl* after = nullptr;
    for (auto* p = first_; p && p->kind == node_kind::placeholder; p = p->next) after = p;
    link_after(n, after);
    return result;
  }

 public:

  /// Creates a call node for `op` with `args` (already in schema order) and one value per entry
  /// of `outputs`, inserted before `before` (default: before the output node, else at the end).
  /// `name_hint` defaults to the op's packet name (`add`, `max_pool2d_with_indices`).
  node create_call(const op_info& op, std::vector<argument> args, std::vector<value_type> outputs,
                   node before = {}, std::string_view name_hint = {}) {
    auto* n = node_pool_.create();
    n->kind = node_kind::call_function;
    n->op = &op;
    n->tuple_output = op.returns_list || op.num_returns() != 1;
    std::string base = names_.create(name_hint.empty() ? std::string_view(op.packet) : name_hint);
    if (n->tuple_output) {
      n->name = std::move(base);
      for (std::size_t i = 0; i < outputs.size(); ++i)
        add_output(n, std::move(outputs[i]), names_.create("getitem"));
    } else {
      if (outputs.size() != 1) {
        names_.release(base);
        destroy_node(n);
        throw graph_error("xport.graph.output_count",
                          op.qualified + " returns one value but " + std::to_string(outputs.size()) +
                              " output types were given");
      }
      add_output(n, std::move(outputs[0]), std::move(base));
    }
    n->args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
    link_before(n, before ? before.impl() : default_insert_point());
    attach_args(n);
    return node(n);
  }

  /// Creates a call node whose node and output names are given exactly (a loader rebuilding a
  /// saved graph). `output_names` has one name per output; for a single-output call the node is
  /// named after its output. Throws graph_error naming the name when one is taken or invalid.
  node create_call_named(const op_info& op, std::vector<argument> args, std::vector<value_type> outputs,
                         const std::string& node_name, const std::vector<std::string>& output_names) {
    const bool tuple = op.returns_list || op.num_returns() != 1;
    if (output_names.size() != outputs.size() || (!tuple && outputs.size() != 1))
      throw graph_error("xport.graph.output_count", op.qualified + " returns " +
                                                        std::to_string(op.num_returns()) + " value(s) but " +
                                                        std::to_string(outputs.size()) + " outputs were given");
    std::vector<std::string> claimed;
    const auto claim = [&](const std::string& name) {
      if (!detail::is_identifier(name) || !names_.claim(name)) {
        for (const auto& c : claimed) names_.release(c);
        throw graph_error("xport.graph.duplicate_name",
                          "name '" + name + "' is already used in this graph or is not a valid Python identifier");
      }
      claimed.push_back(name);
    };
    if (tuple) claim(node_name);
    for (const auto& n : output_names) claim(n);
    auto* n = node_pool_.create();
    n->kind = node_kind::call_function;
    n->op = &op;
    n->tuple_output = tuple;
    if (tuple) n->name = node_name;
    for (std::size_t i = 0; i < outputs.size(); ++i) add_output(n, std::move(outputs[i]), output_names[i]);
    n->args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
    link_before(n, default_insert_point());
    attach_args(n);
    return node(n);
  }

  /// Sets the values (or constants) the graph returns, creating the output node if needed.
  node set_output(std::vector<argument> results) {
    auto* n = last_ && last_->kind == node_kind::output ? last_ : nullptr;
    if (!n) {
      n = node_pool_.create();
      n->kind = node_kind::output;
      n->name = "output";
      link_after(n, last_);
    } else {
      detach_args(n);
    }
    n->args.assign(std::make_move_iterator(results.begin()), std::make_move_iterator(results.end()));
    attach_args(n);
    return node(n);
  }

  /// Removes a node whose outputs have no uses. Its names stay taken (as in torch.fx), so a
  /// later node never silently takes the name an earlier printout gave another one.
  void erase(node nd) {
    auto* n = nd.impl();
    for (auto& v : n->outputs)
      if (!v->uses.empty())
        throw graph_error("xport.graph.erase_used",
                          "cannot erase node '" + nd.name() + "': its output '" + v->name +
                              "' still has " + std::to_string(v->uses.size()) +
                              " use(s); replace them first (value::replace_all_uses_with)");
    detach_args(n);
    unlink(n);
    destroy_node(n);
  }

  /// Memory held by the graph's nodes and values (their pools), in bytes.
  [[nodiscard]] std::size_t bytes_reserved() const noexcept {
    return node_pool_.bytes_reserved() + value_pool_.bytes_reserved();
  }

  /// Moves `n` to just before `pos` (the caller keeps Note [Topological invariant]).
  void move_before(node n, node pos) {
    unlink(n.impl());
    link_before(n.impl(), pos.impl());
  }

  /// A fresh name derived from `candidate`, recorded as used.
  std::string unique_name(std::string_view candidate) { return names_.create(candidate); }
  /// Renames a value; `name` must be fresh.
  void rename(value v, const std::string& name) {
    if (v.impl()->name == name) return;
    if (!names_.claim(name))
      throw graph_error("xport.graph.duplicate_name", "name '" + name + "' is already used");
    names_.release(v.impl()->name);
    v.impl()->name = name;
  }

  /// Where create_call inserts by default: before the output node, else at the end.
  void set_insert_point(node before) { insert_point_ = before.impl(); }
  void reset_insert_point() { insert_point_ = nullptr; }

  /// A deep copy; `map` (if given) receives old value -> new value.
  graph clone(std::unordered_map<detail::value_impl*, value>* map = nullptr) const {
    graph g(memory_resource());
    std::unordered_map<detail::value_impl*, value> local;
    auto& m = map ? *map : local;
    const auto remap = [&](const c10::SmallVector<argument, 4>& from) {
      std::vector<argument> args(from.begin(), from.end());
      for (auto& a : args) a.for_each_value([&](value& v) { v = m.at(v.impl()); });
      return args;
    };
    for (auto* n = first_; n; n = n->next) {
      switch (n->kind) {
        case node_kind::placeholder: {
          auto v = g.add_placeholder(n->outputs[0]->name, n->outputs[0]->type);
          m.emplace(n->outputs[0], v);
          v.producer().impl()->source = n->source;
          v.producer().impl()->module_path = n->module_path;
          if (n->custom) v.producer().impl()->custom = n->custom->clone();
          break;
        }
        case node_kind::call_function: {
          auto* c = g.node_pool_.create();
          c->kind = n->kind;
          c->op = n->op;
          c->tuple_output = n->tuple_output;
          c->tuple_operands = n->tuple_operands;
          c->has_form = n->has_form;
          c->form_given = n->form_given;
          c->form_keyword = n->form_keyword;
          c->name = n->name;
          if (!c->name.empty()) g.names_.claim(c->name);
          for (auto* o : n->outputs) {
            g.names_.claim(o->name);
            g.add_output(c, o->type, o->name);
            c->outputs.back()->unpacked = o->unpacked;
            m.emplace(o, value(c->outputs.back()));
          }
          auto args = remap(n->args);
          c->args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
          c->source = n->source;
          c->module_path = n->module_path;
          if (n->custom) c->custom = n->custom->clone();
          g.link_after(c, g.last_);
          g.attach_args(c);
          break;
        }
        case node_kind::output:
          g.set_output(remap(n->args));
          g.last_->bare_return = n->bare_return;
          g.last_->list_return = n->list_return;
          break;
      }
    }
    return g;
  }

 protected:
  /// For basic_graph<Policy>: the policy its objects report.
  void set_policy(const std::type_info& p, std::pmr::memory_resource* resource) noexcept {
    policy_ = &p;
    node_pool_.set_resource(resource);
    value_pool_.set_resource(resource);
  }

 private:
  friend class node;
  friend class value;

  detail::node_impl* default_insert_point() const {
    if (insert_point_) return insert_point_;
    return last_ && last_->kind == node_kind::output ? last_ : nullptr;
  }

  void add_output(detail::node_impl* n, value_type t, std::string name) {
    auto* v = value_pool_.create();
    v->producer = n;
    v->index = static_cast<std::uint32_t>(n->outputs.size());
    v->type = std::move(t);
    v->name = std::move(name);
    v->unpacked = v->type.kind != value_kind::none;  // a None result is read by no getitem (until a load says so)
    n->outputs.push_back(v);
  }

  void destroy_node(detail::node_impl* n) noexcept {
    for (auto* v : n->outputs) value_pool_.destroy(v);
    node_pool_.destroy(n);
  }

  void attach_args(detail::node_impl* n) {
    n->slots.clear();
    n->use_pos.clear();
    for (auto& a : n->args)
      a.for_each_value([&](value& v) {
        if (!v)
          throw graph_error("xport.graph.null_value",
                            "node '" + node(n).name() + "' was given a null value as an argument");
        const auto index = static_cast<std::uint32_t>(n->slots.size());
        n->slots.push_back(&v);
        n->use_pos.push_back(0);
        detail::add_use(v.impl(), n, index);
      });
  }

  static void detach_args(detail::node_impl* n) {
    for (std::size_t i = 0; i < n->slots.size(); ++i)
      detail::remove_use(n->slots[i]->impl(), n, static_cast<std::uint32_t>(i));
    n->slots.clear();
    n->use_pos.clear();
  }

  void link_after(detail::node_impl* n, detail::node_impl* after) {
    n->owner = this;
    n->prev = after;
    n->next = after ? after->next : first_;
    (n->prev ? n->prev->next : first_) = n;
    (n->next ? n->next->prev : last_) = n;
    ++size_;
    assign_order(n);
  }
  void link_before(detail::node_impl* n, detail::node_impl* before) {
    link_after(n, before ? before->prev : last_);
  }
  void unlink(detail::node_impl* n) {
    (n->prev ? n->prev->next : first_) = n->next;
    (n->next ? n->next->prev : last_) = n->prev;
    n->prev = n->next = nullptr;
    --size_;
  }

  // Order keys with gaps, so is_before is O(1). When no key is left between two neighbours, a
  // window around the new node, doubled until it spans enough key space, is spread evenly
  // (list order maintenance): repeated inserts at one spot cost O(log n) each, not O(n).
  static constexpr std::uint64_t order_gap = std::uint64_t{1} << 20;
  void assign_order(detail::node_impl* n) {
    const std::uint64_t lo = n->prev ? n->prev->order : 0;
    if (!n->next) {
      n->order = lo + order_gap;
      return;
    }
    const std::uint64_t hi = n->next->order;
    if (hi - lo > 1) {
      n->order = lo + (hi - lo) / 2;
      return;
    }
    detail::node_impl* left = n;
    detail::node_impl* right = n;
    std::uint64_t count = 1;
    while (true) {
      for (std::uint64_t k = 0, grow = count; k < grow; ++k) {
        if (left->prev) left = left->prev, ++count;
        if (right->next) right = right->next, ++count;
      }
      const std::uint64_t lo_key = left->prev ? left->prev->order : 0;
      if (!right->next) {  // the window reaches the end: keys above it are free
        std::uint64_t key = lo_key;
        for (auto* p = left; p; p = p->next) p->order = (key += order_gap);
        return;
      }
      const std::uint64_t hi_key = right->next->order;
      if ((hi_key - lo_key) / (count + 1) >= 64) {  // room enough: spread the window evenly
        const std::uint64_t step = (hi_key - lo_key) / (count + 1);
        std::uint64_t key = lo_key;
        for (auto* p = left;; p = p->next) {
          p->order = (key += step);
          if (p == right) return;
        }
      }
    }
  }

  void clear() noexcept {
    for (auto* n = first_; n;) {
      auto* next = n->next;
      destroy_node(n);
      n = next;
    }
    node_pool_.release();
    value_pool_.release();
    first_ = last_ = insert_point_ = nullptr;
    size_ = 0;
    names_ = {};
  }
  void steal(basic_graph& o) noexcept {
    first_ = std::exchange(o.first_, nullptr);
    last_ = std::exchange(o.last_, nullptr);
    insert_point_ = std::exchange(o.insert_point_, nullptr);
    size_ = std::exchange(o.size_, 0);
    names_ = std::move(o.names_);
    node_pool_ = std::move(o.node_pool_);
    value_pool_ = std::move(o.value_pool_);
    for (auto* n = first_; n; n = n->next) n->owner = this;
  }

  detail::node_impl* first_ = nullptr;
  detail::node_impl* last_ = nullptr;
  detail::node_impl* insert_point_ = nullptr;
  std::size_t size_ = 0;
  detail::name_table names_;
  detail::object_pool<detail::node_impl> node_pool_;
  detail::object_pool<detail::value_impl> value_pool_;
  const std::type_info* policy_ = &typeid(default_policy);  // of this object, never moved
};

// ---- value ----------------------------------------------------------------------------------

inline const std::string& value::name() const { return p_->name; }
inline node value::producer() const { return node(p_->producer); }
inline std::size_t value::index() const { return p_->index; }
inline value_kind value::kind() const { return p_->type.kind; }
inline const value_type& value::type() const { return p_->type; }
inline const tensor_meta& value::meta() const {
  if (p_->type.kind != value_kind::tensor)
    throw graph_error("xport.value.not_tensor", "value '" + p_->name + "' is not a tensor");
  return p_->type.tensor;
}
inline void value::set_type(value_type t) const { p_->type = std::move(t); }
inline std::span<const use> value::uses() const { return p_->uses; }
inline std::uint32_t& value::scratch() const noexcept { return p_->scratch; }
inline bool value::unpacked() const noexcept { return p_->unpacked; }
inline void value::set_unpacked(bool u) const noexcept { p_->unpacked = u; }
inline std::size_t value::num_uses() const { return p_->uses.size(); }
inline void value::replace_all_uses_with(value other) const {
  if (other == *this) return;
  auto uses = std::move(p_->uses);
  p_->uses.clear();
  for (const auto& u : uses) {
    *u.user_impl->slots[u.index] = other;
    detail::add_use(other.p_, u.user_impl, u.index);
  }
}

// ---- node -----------------------------------------------------------------------------------

inline node use::user() const { return node(user_impl); }

inline node_kind node::kind() const { return p_->kind; }
inline const std::string& node::name() const {
  if (p_->kind != node_kind::output && !p_->tuple_output) return p_->outputs[0]->name;
  return p_->name;
}
inline const op_info& node::op() const {
  if (!p_->op)
    throw graph_error("xport.node.no_op", "node '" + name() + "' is a " +
                                              std::string(to_string(p_->kind)) + ", not a call");
  return *p_->op;
}
inline const op_info* node::op_ptr() const { return p_->op; }
inline std::string node::target() const {
  return p_->op ? p_->op->target : std::string(to_string(p_->kind));
}
inline std::span<const argument> node::args() const { return {p_->args.data(), p_->args.size()}; }
inline void node::set_args(std::vector<argument> args) const {
  graph::detach_args(p_);
  p_->args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  p_->owner->attach_args(p_);
}
inline std::size_t node::num_inputs() const { return p_->slots.size(); }
inline value node::input(std::size_t i) const { return *p_->slots.at(i); }
inline std::vector<value> node::inputs() const {
  std::vector<value> out;
  out.reserve(p_->slots.size());
  for (auto* s : p_->slots) out.push_back(*s);
  return out;
}
inline void node::replace_input(std::size_t i, value v) const {
  auto* slot = p_->slots.at(i);
  if (*slot == v) return;
  detail::remove_use(slot->impl(), p_, static_cast<std::uint32_t>(i));
  *slot = v;
  detail::add_use(v.impl(), p_, static_cast<std::uint32_t>(i));
}
inline void node::replace_input_with(value from, value to) const {
  for (std::size_t i = 0; i < p_->slots.size(); ++i)
    if (*p_->slots[i] == from) replace_input(i, to);
}
inline std::size_t node::num_outputs() const { return p_->outputs.size(); }
inline value node::output(std::size_t i) const {
  if (i >= p_->outputs.size())
    throw graph_error("xport.node.output_index", "node '" + name() + "' has " +
                                                     std::to_string(p_->outputs.size()) +
                                                     " output(s); index " + std::to_string(i) +
                                                     " is out of range");
  return value(p_->outputs[i]);
}
inline std::vector<value> node::outputs() const {
  std::vector<value> out;
  out.reserve(p_->outputs.size());
  for (auto* v : p_->outputs) out.emplace_back(v);
  return out;
}
inline value node::out() const {
  if (p_->outputs.size() != 1 || p_->tuple_output)
    throw graph_error("xport.node.not_single_output",
                      "node '" + name() + "' has " + std::to_string(p_->outputs.size()) +
                          " outputs; pick one with node[i]");
  return value(p_->outputs[0]);
}
inline bool node::has_tuple_output() const { return p_->tuple_output; }
inline bool node::has_tuple_operands() const { return p_->tuple_operands; }
inline void node::set_tuple_operands(bool on) const { p_->tuple_operands = on; }
inline std::optional<node::call_form> node::form() const {
  if (!p_->has_form) return std::nullopt;
  return call_form{p_->form_given, p_->form_keyword};
}
inline void node::set_form(std::optional<call_form> f) const {
  p_->has_form = f.has_value();
  p_->form_given = f ? f->given : 0;
  p_->form_keyword = f ? f->keyword : 0;
}
inline node node::next() const { return node(p_->next); }
inline node node::prev() const { return node(p_->prev); }
inline std::uint64_t node::order() const { return p_->order; }
inline graph& node::owning_graph() const { return *p_->owner; }
inline const std::shared_ptr<const source_location>& node::source() const { return p_->source; }
inline void node::set_source(std::shared_ptr<const source_location> s) const {
  p_->source = std::move(s);
}
inline const std::string& node::module_path() const { return p_->module_path; }
inline void node::set_module_path(std::string path) const { p_->module_path = std::move(path); }

namespace detail {
[[noreturn]] inline void custom_meta_mismatch(const node& n, const std::type_info& held, const std::type_info& asked) {
  throw graph_error("xport.graph.custom_meta_type",
                    "node '" + n.name() + "' holds custom metadata of type " + c10::demangle(held.name()) +
                        ", not " + c10::demangle(asked.name()) +
                        ": a node holds one metadata object, so passes that share nodes share its type (a struct "
                        "with a field for each), or one replaces it with set_custom_meta()");
}
}  // namespace detail

template <class T>
T* node::find_custom_meta() const {
  const auto& box = p_->custom;
  if (!box) return nullptr;
  if (box->type() != typeid(T)) detail::custom_meta_mismatch(*this, box->type(), typeid(T));
  return &static_cast<detail::custom_meta_of<T>*>(box.get())->value;
}
template <class T>
T& node::custom_meta() const {
  if (T* m = find_custom_meta<T>()) return *m;
  auto box = std::make_unique<detail::custom_meta_of<T>>(T{});
  T& out = box->value;
  p_->custom = std::move(box);
  return out;
}
template <class T>
void node::set_custom_meta(T meta) const {
  p_->custom = std::make_unique<detail::custom_meta_of<T>>(std::move(meta));
}
inline bool node::has_custom_meta() const { return p_->custom != nullptr; }
inline void node::clear_custom_meta() const { p_->custom.reset(); }
inline void node::copy_custom_meta_from(node other) const {
  if (other.p_ == p_) return;
  p_->custom = other.p_->custom ? other.p_->custom->clone() : nullptr;
}

/// What a graph policy names: `node_meta`, the type of every node's custom metadata (copyable,
/// default-constructible), and optionally `static std::pmr::memory_resource* memory_resource()`,
/// where the graph's nodes and values are carved from (new/delete otherwise).
template <class P>
concept graph_policy = requires { typename P::node_meta; } && std::copy_constructible<typename P::node_meta> &&
                       std::default_initializable<typename P::node_meta>;

/// A graph whose nodes carry `Policy::node_meta` (the basic_json / json pattern: `graph` is
/// `basic_graph<>`). It is a graph, so every pass, the verifier, the printer and the interpreter
/// take it as one; what it adds is typed access to the metadata and its policy's memory resource.
template <class Policy>
class basic_graph : public basic_graph<default_policy> {
  static_assert(graph_policy<Policy>,
                "a graph policy names `using node_meta = T;` (T copyable and default-constructible) and "
                "may name `static std::pmr::memory_resource* memory_resource()`");

 public:
  using policy_type = Policy;
  using node_meta = typename Policy::node_meta;

  basic_graph() : graph(policy_resource()) { set_policy(typeid(Policy), policy_resource()); }
  /// Adopts a plain graph's nodes (their metadata stays; new nodes come from the policy's resource).
  explicit basic_graph(graph&& g) noexcept : graph(std::move(g)) { set_policy(typeid(Policy), policy_resource()); }
  basic_graph(basic_graph&& o) noexcept : graph(std::move(o)) { set_policy(typeid(Policy), policy_resource()); }
  basic_graph& operator=(basic_graph&& o) noexcept {
    graph::operator=(std::move(o));
    return *this;
  }

  /// The node's metadata, default-made on first use; `n` must belong to this graph.
  [[nodiscard]] node_meta& meta(node n) const {
    if (!n || &n.owning_graph() != this)
      throw graph_error("xport.graph.foreign_node", "meta(): the node is not in this graph");
    return n.custom_meta<node_meta>();
  }
  /// A deep copy, metadata included.
  [[nodiscard]] basic_graph clone(std::unordered_map<detail::value_impl*, value>* map = nullptr) const {
    return basic_graph(graph::clone(map));
  }

  static std::pmr::memory_resource* policy_resource() noexcept {
    if constexpr (requires { Policy::memory_resource(); }) return Policy::memory_resource();
    else return std::pmr::new_delete_resource();
  }
};

/// `g` as the basic_graph<Policy> it was made as; a typed error if it was made with another
/// policy (a pass written for one policy run on another's program).
template <class Policy>
basic_graph<Policy>& graph_cast(graph& g) {
  if constexpr (std::is_same_v<Policy, default_policy>) {
    return g;
  } else {
    if (g.policy() != typeid(Policy))
      throw graph_error("xport.graph.policy",
                        "this graph was made with policy " + c10::demangle(g.policy().name()) + ", not " +
                            c10::demangle(typeid(Policy).name()) +
                            ": wrap the program first (`basic_exported_program<Policy> p = std::move(program);`)");
    return static_cast<basic_graph<Policy>&>(g);
  }
}
template <class Policy>
const basic_graph<Policy>& graph_cast(const graph& g) {
  return graph_cast<Policy>(const_cast<graph&>(g));
}

/// A subgraph: the branch of a `cond` (`true_graph_0`), the body of a loop. Its placeholders are
/// the operands the operator passes it, its outputs what it returns; its values are its own (no
/// operand of an inner node is a value of the graph that calls it). Once attached to a node it
/// is never changed: copies of the calling graph share it, and a pass that rewrites a branch
/// builds a new subgraph and swaps the argument, so a failed pass leaves the caller's intact.
struct subgraph {
  std::string name;  ///< the attribute torch names it by: `true_graph_0`, `body_graph_0`
  graph body;
};

/// Calls `f(const subgraph&)` for every subgraph node `n` passes (directly, not nested ones).
template <class F>
void for_each_subgraph(const node& n, F&& f) {
  for (const auto& a : n.args())
    if (a.is_graph()) f(*a.as_graph());
}

/// What a control-flow call passes its subgraphs' placeholders, in their order: its list
/// arguments one after the other (torch.cond's operands; while_loop's carried_inputs, then its
/// additional_inputs).
inline argument::list_type subgraph_operands(const node& n) {
  argument::list_type all;
  for (const auto& a : n.args())
    if (a.is_list()) all.insert(all.end(), a.as_list().begin(), a.as_list().end());
  return all;
}

XPORT_END_NAMESPACE

template <>
struct std::hash<xport::value> {
  std::size_t operator()(xport::value v) const noexcept {
    return std::hash<const void*>{}(v.impl());
  }
};
template <>
struct std::hash<xport::node> {
  std::size_t operator()(xport::node n) const noexcept {
    return std::hash<const void*>{}(n.impl());
  }
};
