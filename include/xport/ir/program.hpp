// xport/ir/program.hpp: exported_program, what torch.export.export returns.
// A graph, its signature, the state dict (parameters and persistent buffers), the constants
// (lifted tensors and non-persistent buffers), range constraints of symbolic sizes, the call
// structure and module types when exported from C++ values, and optionally the example inputs. Running lives in run/interpreter.hpp; checking in verify.hpp;
// printing in print.hpp.
#pragma once

#include <algorithm>  // std::find
#include <array>      // std::array
#include <cstdint>    // std::int64_t
#include <memory>     // std::shared_ptr
#include <map>        // std::map
#include <mutex>      // std::mutex
#include <optional>   // std::optional
#include <unordered_map>  // std::unordered_map
#include <string>     // std::string
#include <string_view>  // std::string_view
#include <utility>    // std::pair, std::move
#include <vector>     // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/signature.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/ir/treespec.hpp>

XPORT_BEGIN_NAMESPACE

/// An insertion-ordered map from names to tensors (Python's dict of state), with O(1) lookup.
class tensor_dict {
 public:
  using item = std::pair<std::string, at::Tensor>;

  tensor_dict() = default;
  tensor_dict(std::initializer_list<item> items) {
    for (const auto& [k, v] : items) set(k, v);
  }

  [[nodiscard]] const at::Tensor* find(std::string_view name) const {
    const auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  [[nodiscard]] bool contains(std::string_view name) const { return find(name) != nullptr; }
  [[nodiscard]] const at::Tensor& at(std::string_view name) const {
    if (const auto* t = find(name)) return *t;
    throw error("xport.program.missing_state", "no tensor named '" + std::string(name) + "'");
  }
  /// Inserts or replaces.
  void set(const std::string& name, at::Tensor t) {
    const auto [it, fresh] = index_.try_emplace(name, items_.size());
    if (fresh) items_.emplace_back(name, std::move(t));
    else items_[it->second].second = std::move(t);
  }
  bool erase(std::string_view name) {
    const auto it = index_.find(std::string(name));
    if (it == index_.end()) return false;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (std::size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    return true;
  }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }
  [[nodiscard]] auto begin() const noexcept { return items_.begin(); }
  [[nodiscard]] auto end() const noexcept { return items_.end(); }
  /// Iteration may replace tensors, not names.
  [[nodiscard]] auto begin() noexcept { return items_.begin(); }
  [[nodiscard]] auto end() noexcept { return items_.end(); }

 private:
  std::vector<item> items_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// A runtime assertion between sizes that no range states: `u0 <= s77` (torch._check of an
/// item() against an input dim), `u0 + u1 + 2 <= s77`. Checked on every run when the last of its
/// symbols gets its value (Note [Runtime assertions as ranges] in serde/program_json.hpp).
struct sym_relation {
  /// One relation as each form names it: `<=`, torch's `_operator.le` node (`le_2`), sympy's `LessThan`.
  struct kind {
    std::string_view op, fx, sympy;
  };
  static constexpr std::array<kind, 6> kinds{{{">=", "ge", "GreaterThan"},
                                              {"<=", "le", "LessThan"},
                                              {">", "gt", "StrictGreaterThan"},
                                              {"<", "lt", "StrictLessThan"},
                                              {"==", "eq", "Equality"},
                                              {"!=", "ne", "Unequality"}}};

  sym_int lhs;
  std::string op;  ///< one of kinds' ops
  sym_int rhs;

  /// The row of `kinds` for comparison `op` (`<=`).
  [[nodiscard]] static const kind& kind_of(std::string_view op) {
    for (const auto& k : kinds)
      if (k.op == op) return k;
    throw graph_error("xport.program.relation", "'" + std::string(op) + "' is no relation (expected >=, <=, >, <, == or !=)");
  }
  /// The row of `kinds` for this relation.
  [[nodiscard]] const kind& kind_of() const { return kind_of(op); }
  /// Whether the relation holds for these values of its two sides.
  [[nodiscard]] bool holds(std::int64_t a, std::int64_t b) const {
    const auto o = kind_of().op;
    return o == ">=" ? a >= b : o == "<=" ? a <= b : o == ">" ? a > b : o == "<" ? a < b : o == "==" ? a == b : a != b;
  }
  /// The symbols it names, each once, the left side's first.
  [[nodiscard]] std::vector<std::string> symbols() const {
    auto out = sym::free_symbols(lhs);
    for (auto& s : sym::free_symbols(rhs))
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
    return out;
  }
  /// `u0 <= s77` (`Eq(u0, 2)`, `Ne(u0, s77)`), as torch's assertion messages write it: sympy's str.
  [[nodiscard]] std::string str() const {
    if (op == "==" || op == "!=") return std::string(op == "==" ? "Eq(" : "Ne(") + lhs.str() + ", " + rhs.str() + ")";
    return lhs.str() + " " + op + " " + rhs.str();
  }
};

/// The range of one symbol: `VR[min, max]`; an absent max is infinity (`int_oo`).
struct range_constraint {
  sym_int symbol;
  std::int64_t min = 0;
  std::optional<std::int64_t> max;
  /// The user's name for the dimension (`batch`), or where a hinted dim came from (`x.shape[1]`);
  /// used in guard messages, not printed.
  std::string name;
  /// The assertions that relate this (data-dependent) symbol to other sizes, kept with it so
  /// every copy of the ranges carries them; not printed among the ranges (torch prints them as
  /// `_assert_scalar` nodes).
  std::vector<sym_relation> relations;

  [[nodiscard]] std::string str() const {
    return symbol.str() + ": " + value_range{min, max.value_or(int_oo)}.str();
  }
};

/// Which verifier a program satisfies: torch's "TRAINING" (in-place ops allowed) or "ATEN"
/// (functional).
enum class ir_dialect : std::uint8_t { training, aten };

inline std::string_view to_string(ir_dialect d) { return d == ir_dialect::training ? "TRAINING" : "ATEN"; }

namespace detail {
/// Whatever the interpreter caches per program; opaque here (see run/interpreter.hpp).
struct run_cache {
  virtual ~run_cache() = default;
};

/// The slot run/interpreter.hpp keeps its compiled interpreter in. It belongs to one program
/// object: a moved-to or assigned program starts empty (what was compiled refers to the program
/// it was built from), and every mutable access to the program empties it. Thread-safe.
class run_cache_slot {
 public:
  run_cache_slot() = default;
  run_cache_slot(run_cache_slot&&) noexcept {}
  run_cache_slot& operator=(run_cache_slot&&) noexcept {
    reset();
    return *this;
  }

  [[nodiscard]] std::shared_ptr<run_cache> get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_;
  }
  void set(std::shared_ptr<run_cache> c) const {
    std::lock_guard<std::mutex> lock(mu_);
    cache_ = std::move(c);
  }
  void reset() const {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.reset();
  }
  /// Held while the interpreter is compiled, so that two first runs compile once.
  [[nodiscard]] std::mutex& build_mutex() const { return build_mu_; }

 private:
  mutable std::shared_ptr<run_cache> cache_;
  mutable std::mutex mu_;
  mutable std::mutex build_mu_;
};
// A program's graph, held by pointer so that a basic_exported_program<Policy> holds a
// basic_graph<Policy>. Assigning one holder to another moves the graph's nodes into the graph
// object already held, so a program's graph keeps the policy it was made with whatever is
// assigned to the program (a pass writing `program = lowered(program)` through an
// exported_program& keeps a policy program's typed graph).
class graph_holder {
 public:
  explicit graph_holder(std::unique_ptr<graph> g) noexcept : g_(std::move(g)) {}
  graph_holder(graph_holder&&) noexcept = default;
  graph_holder& operator=(graph_holder&& o) noexcept {
    if (this == &o) return *this;
    if (g_ && o.g_) *g_ = std::move(*o.g_);
    else g_ = std::move(o.g_);
    return *this;
  }
  graph_holder(const graph_holder&) = delete;
  graph_holder& operator=(const graph_holder&) = delete;
  ~graph_holder() = default;
  [[nodiscard]] graph* get() const noexcept { return g_.get(); }
  void reset(std::unique_ptr<graph> g) noexcept { g_ = std::move(g); }

 private:
  std::unique_ptr<graph> g_;
};


/// Moves tensors to one device storage by storage (see exported_program::to).
class storage_mover {
 public:
  explicit storage_mover(c10::Device device) : device_(device) {}

  at::Tensor operator()(const at::Tensor& t) {
    if (!t.defined() || t.device() == device_) return t;
    if (const auto it = tensors_.find(t.unsafeGetTensorImpl()); it != tensors_.end()) return it->second;
    const bool grad = t.requires_grad();
    at::Tensor out;
    if (t.layout() != c10::kStrided || !t.has_storage()) {
      out = t.detach().to(device_);
    } else {
      const c10::Storage& from = t.storage();
      auto it = storages_.find(from.unsafeGetStorageImpl());
      if (it == storages_.end()) {
        const auto n = static_cast<std::int64_t>(from.nbytes());
        at::Tensor bytes = t.new_empty({0}, t.options().dtype(c10::kByte).requires_grad(false));
        bytes.set_(from, 0, {n}, {1});
        it = storages_.emplace(from.unsafeGetStorageImpl(), bytes.to(device_).storage()).first;
      }
      out = t.new_empty({0}, t.options().device(device_).requires_grad(false));
      out.set_(it->second, t.storage_offset(), t.sizes(), t.strides());
    }
    if (grad) out.requires_grad_(true);
    tensors_.emplace(t.unsafeGetTensorImpl(), out);
    return out;
  }

 private:
  c10::Device device_;
  std::unordered_map<const c10::StorageImpl*, c10::Storage> storages_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> tensors_;
};

/// `device=` arguments and tensor meta of `g` and of its subgraphs, set to `device`.
inline void retarget_device(graph& g, c10::Device device) {
  const auto retarget = [&](auto&& self, argument& a) -> bool {
    if (a.is_device()) {
      a = device;
      return true;
    }
    if (a.is_graph()) {
      auto sub = std::make_shared<subgraph>(subgraph{a.as_graph()->name, a.as_graph()->body.clone()});
      retarget_device(sub->body, device);
      a = std::shared_ptr<const subgraph>(std::move(sub));
      return true;
    }
    bool changed = false;
    if (a.is_list())
      for (auto& e : a.as_list()) changed = self(self, e) || changed;
    return changed;
  };
  for (auto n : g.nodes()) {
    for (auto v : n.outputs())
      if (v.kind() == value_kind::tensor) {
        auto m = v.meta();
        m.device = device;
        v.set_meta(std::move(m));
      }
    if (!n.is_call()) continue;
    std::vector<argument> args(n.args().begin(), n.args().end());
    bool changed = false;
    for (auto& a : args) changed = retarget(retarget, a) || changed;
    if (changed) n.set_args(std::move(args));
  }
}

}  // namespace detail

template <>
class basic_exported_program<default_policy> {
 public:
  using graph_type = xport::graph;
  using signature_type = xport::graph_signature;

  basic_exported_program(graph_type g, signature_type sig, tensor_dict state_dict = {},
                         tensor_dict constants = {}, std::vector<range_constraint> range_constraints = {},
                         ir_dialect dialect = ir_dialect::training)
      : graph_(std::make_unique<graph_type>(std::move(g))),
        signature_(std::move(sig)),
        state_dict_(std::move(state_dict)),
        constants_(std::move(constants)),
        range_constraints_(std::move(range_constraints)),
        dialect_(dialect) {}

  /// A moved-from program holds no graph: reading it is a typed error, assigning to it is fine.
  /// Assigning keeps the graph object (and so the policy) this program was made with.
  basic_exported_program(basic_exported_program&&) noexcept = default;
  basic_exported_program& operator=(basic_exported_program&&) noexcept = default;
  basic_exported_program(const basic_exported_program&) = delete;
  basic_exported_program& operator=(const basic_exported_program&) = delete;
  ~basic_exported_program() = default;

  /// A deep copy of the graph (custom node metadata included) and signature; tensors are
  /// shared, not copied.
  [[nodiscard]] exported_program clone() const {
    exported_program p(checked_graph().clone(), signature_, state_dict_, constants_, range_constraints_, dialect_);
    p.example_inputs_ = example_inputs_;
    p.in_spec_ = in_spec_;
    p.out_spec_ = out_spec_;
    p.module_types_ = module_types_;
    p.module_signatures_ = module_signatures_;
    p.custom_objs_ = custom_objs_;
    return p;
  }

  [[nodiscard]] const graph_type& graph() const { return checked_graph(); }
  /// Mutable access; drops whatever the interpreter cached for this program.
  [[nodiscard]] graph_type& graph_mut() {
    invalidate();
    return checked_graph();
  }
  [[nodiscard]] const signature_type& signature() const noexcept { return signature_; }
  [[nodiscard]] signature_type& signature_mut() {
    invalidate();
    return signature_;
  }
  /// Parameters and persistent buffers, by FQN.
  [[nodiscard]] const tensor_dict& state_dict() const noexcept { return state_dict_; }
  [[nodiscard]] tensor_dict& state_dict_mut() {
    invalidate();
    return state_dict_;
  }
  /// Lifted constant tensors and non-persistent buffers, by FQN.
  [[nodiscard]] const tensor_dict& constants() const noexcept { return constants_; }
  [[nodiscard]] tensor_dict& constants_mut() {
    invalidate();
    return constants_;
  }
  /// The custom class instances (torch::class_ objects) the CUSTOM_OBJ inputs read, by FQN (torch
  /// keeps them in `ep.constants`). Shared with copies, as a TorchScript module's are: a method
  /// that changes its object changes it for every program holding it.
  [[nodiscard]] const std::map<std::string, c10::IValue>& custom_objs() const noexcept { return custom_objs_; }
  [[nodiscard]] std::map<std::string, c10::IValue>& custom_objs_mut() {
    invalidate();
    return custom_objs_;
  }
  [[nodiscard]] const std::vector<range_constraint>& range_constraints() const noexcept {
    return range_constraints_;
  }
  [[nodiscard]] std::vector<range_constraint>& range_constraints_mut() {
    invalidate();
    return range_constraints_;
  }
  [[nodiscard]] ir_dialect dialect() const noexcept { return dialect_; }
  void set_dialect(ir_dialect d) noexcept { dialect_ = d; }

  /// The structure of the inputs (a tuple of the positional arguments) and of the outputs, when
  /// the program was exported from C++ values; absent for hand-built programs (flat tensors).
  [[nodiscard]] const std::optional<treespec>& in_spec() const noexcept { return in_spec_; }
  [[nodiscard]] const std::optional<treespec>& out_spec() const noexcept { return out_spec_; }
  void set_call_spec(std::optional<treespec> in, std::optional<treespec> out) {
    in_spec_ = std::move(in);
    out_spec_ = std::move(out);
  }

  /// (FQN, type) of the exported module and its submodules, root ("") first, as
  /// `named_modules()` lists them (`{"", "MLPImpl"}, {"fc1", "torch::nn::LinearImpl"}`): torch's
  /// module call graph, and the types of a node's `nn_module_stack` in a .pt2. Empty when the
  /// program was not exported from a module; loaded from a .pt2, the types are those its nodes'
  /// module stacks name (empty for the others).
  [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& module_types() const noexcept {
    return module_types_;
  }
  void set_module_types(std::vector<std::pair<std::string, std::string>> types) { module_types_ = std::move(types); }

  /// The call signatures of the submodules whose boundaries were preserved (torch's
  /// `preserve_module_call_signature`), by FQN: the `module_call_graph` entries torch writes with
  /// a signature, read from a .pt2 and written back. The root's call is in_spec()/out_spec().
  [[nodiscard]] const std::map<std::string, module_call_signature>& module_call_signatures() const noexcept {
    return module_signatures_;
  }
  /// Sets (or, with nullopt, drops) the preserved call signature of submodule `fqn`.
  void set_module_call_signature(const std::string& fqn, std::optional<module_call_signature> sig) {
    if (sig) module_signatures_.insert_or_assign(fqn, std::move(*sig));
    else module_signatures_.erase(fqn);
  }

  /// The example user inputs the program was captured with, if kept.
  [[nodiscard]] const std::optional<std::vector<at::Tensor>>& example_inputs() const noexcept {
    return example_inputs_;
  }
  void set_example_inputs(std::optional<std::vector<at::Tensor>> inputs) {
    example_inputs_ = std::move(inputs);
  }

  /// (FQN, tensor) of every parameter, in signature order.
  [[nodiscard]] std::vector<std::pair<std::string, at::Tensor>> named_parameters() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& fqn : signature_.parameters()) out.emplace_back(fqn, state_dict_.at(fqn));
    return out;
  }
  /// (FQN, tensor) of every buffer: persistent ones from the state dict, others from constants.
  [[nodiscard]] std::vector<std::pair<std::string, at::Tensor>> named_buffers() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& s : signature_.input_specs)
      if (s.kind == input_kind::buffer && s.target)
        out.emplace_back(*s.target, s.persistent.value_or(true) ? state_dict_.at(*s.target)
                                                                : constants_.at(*s.target));
    return out;
  }
  [[nodiscard]] std::vector<at::Tensor> parameters() const { return values_of(named_parameters()); }
  [[nodiscard]] std::vector<at::Tensor> buffers() const { return values_of(named_buffers()); }

  /// Moves the state and constants to `device` and retargets the graph, its subgraphs included
  /// (tensor meta and `device=` arguments), so the program runs on inputs on that device.
  /// Storages move whole, once each: views of one storage (tied weights) stay views of one
  /// storage, and one tensor under two names stays one tensor. Parameters stay leaves with
  /// their requires_grad flag. torch's `move_to_device_pass`.
  void to(c10::Device device) {
    detail::storage_mover mover(device);
    for (auto& [name, t] : state_dict_) t = mover(t);
    for (auto& [name, t] : constants_) t = mover(t);
    detail::retarget_device(checked_graph(), device);
    if (example_inputs_)
      for (auto& t : *example_inputs_) t = mover(t);
    invalidate();
  }

  /// torch's `ep.module()`: the program as a torch::nn::Module that torch::optim trains, its
  /// parameters and buffers this program's state (run/module.hpp; include <xport/train.hpp>).
  template <class Module = program_module>
  [[nodiscard]] std::shared_ptr<Module> module() const {
    return std::make_shared<Module>(*this);
  }

  /// The tensor a lifted input (parameter, buffer or constant) reads, by its input spec.
  [[nodiscard]] const at::Tensor& lifted_tensor(const input_spec& s) const {
    const bool in_state = s.kind == input_kind::parameter ||
                          (s.kind == input_kind::buffer && s.persistent.value_or(true));
    const auto& dict = in_state ? state_dict_ : constants_;
    if (!s.target)
      throw error("xport.program.missing_state", "input '" + s.arg.name + "' has no target");
    return dict.at(*s.target);
  }

  /// The object a CUSTOM_OBJ input reads, by its input spec.
  [[nodiscard]] const c10::IValue& lifted_object(const input_spec& s) const {
    const auto it = s.target ? custom_objs_.find(*s.target) : custom_objs_.end();
    if (it == custom_objs_.end())
      throw error("xport.program.missing_state", "custom object input '" + s.arg.name + "' names " +
                                                     (s.target ? "'" + *s.target + "', which the program does not hold" : "no target"));
    return it->second;
  }

  /// For run/interpreter.hpp: the cache slot; emptied on every mutable access.
  [[nodiscard]] std::shared_ptr<detail::run_cache> run_cache_get() const { return cache_.get(); }
  void run_cache_set(std::shared_ptr<detail::run_cache> c) const { cache_.set(std::move(c)); }
  [[nodiscard]] std::mutex& run_cache_mutex() const { return cache_.build_mutex(); }

 private:
  static std::vector<at::Tensor> values_of(const std::vector<std::pair<std::string, at::Tensor>>& xs) {
    std::vector<at::Tensor> out;
    out.reserve(xs.size());
    for (const auto& [k, v] : xs) out.push_back(v);
    return out;
  }
  void invalidate() { cache_.reset(); }

 protected:
  /// For basic_exported_program<Policy>: replaces the graph object by one made from it.
  template <class G>
  void adopt_graph_as() {
    graph_.reset(std::make_unique<G>(std::move(checked_graph())));
  }
  [[nodiscard]] graph_type& checked_graph() const {
    if (!graph_.get())
      throw error("xport.program.moved_from",
                  "this exported_program was moved from and holds no graph: use the program it was moved to");
    return *graph_.get();
  }

 private:
  detail::graph_holder graph_;
  signature_type signature_;
  tensor_dict state_dict_;
  tensor_dict constants_;
  std::vector<range_constraint> range_constraints_;
  std::optional<std::vector<at::Tensor>> example_inputs_;
  std::optional<treespec> in_spec_;
  std::optional<treespec> out_spec_;
  std::vector<std::pair<std::string, std::string>> module_types_;
  std::map<std::string, module_call_signature> module_signatures_;
  std::map<std::string, c10::IValue> custom_objs_;
  ir_dialect dialect_ = ir_dialect::training;
  detail::run_cache_slot cache_;
};

/// A program whose graph is a basic_graph<Policy> (its nodes carry `Policy::node_meta`). It is
/// an exported_program: run, print, verify, save and every pass take it as one. Made from any
/// program (`basic_exported_program<P> p = export_program(...);`): the nodes move, no copy.
template <class Policy>
class basic_exported_program : public exported_program {
 public:
  using policy_type = Policy;
  using graph_type = basic_graph<Policy>;

  basic_exported_program(exported_program&& p) : exported_program(std::move(p)) {  // NOLINT: by design
    adopt_graph_as<graph_type>();
  }
  basic_exported_program(basic_exported_program&&) noexcept = default;
  basic_exported_program& operator=(basic_exported_program&&) noexcept = default;
  ~basic_exported_program() = default;

  /// The typed graph (a typed error if a moved-from program was assigned a plain program's).
  [[nodiscard]] const graph_type& graph() const { return graph_cast<Policy>(checked_graph()); }
  [[nodiscard]] graph_type& graph_mut() { return graph_cast<Policy>(exported_program::graph_mut()); }
  /// A deep copy, metadata included.
  [[nodiscard]] basic_exported_program clone() const { return basic_exported_program(exported_program::clone()); }
};

/// A subgraph as a program of its own: every placeholder a user input, every output a user
/// output, no state (what the interpreter compiles, and what lowering and passes transform).
inline exported_program subgraph_program(const subgraph& s, ir_dialect dialect = ir_dialect::training) {
  graph_signature sig;
  for (auto ph : s.body.placeholders())
    sig.input_specs.push_back(input_spec{input_kind::user_input, argument_spec::tensor(ph.name()), {}, {}});
  const node out = s.body.output_node();
  for (const auto& a : out.args())
    sig.output_specs.push_back(output_spec{output_kind::user_output,
                                           a.is_value() ? argument_spec::tensor(a.as_value().name())
                                                        : argument_spec::constant_value("", a),
                                           {}});
  return exported_program(s.body.clone(), std::move(sig), {}, {}, {}, dialect);
}

XPORT_END_NAMESPACE
