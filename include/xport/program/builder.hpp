// xport/program/builder.hpp: building exported programs by hand, op by op.
// program_builder adds user inputs, parameters, buffers and constants as placeholders (named as
// torch.export names them: `x`, `p_fc_weight`, `b_bn_running_mean`, `c_scale`), calls any
// registered operator by name with arguments checked against its schema, infers every output's
// dtype and shape on meta tensors, and finishes with a verified exported_program.
//
//   xport::program_builder b;
//   auto x = b.input("x", at::randn({10, 10}));
//   auto y = b.input("y", at::randn({10, 10}));
//   auto s = b.call("aten::sin", {x});
//   auto c = b.call("aten::cos", {y});
//   b.output(b.call("aten::add.Tensor", {s, c}));
//   xport::exported_program p = std::move(b).build();
#pragma once

#include <algorithm>    // std::stable_sort
#include <map>          // std::map
#include <memory>       // std::shared_ptr, std::make_shared
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <xport/config.hpp>
#include <xport/ops/meta_infer.hpp>
#include <xport/ops/schema.hpp>
#include <xport/error.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/signature.hpp>
#include <xport/program/verify.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {
/// `p_` + FQN lower-cased with every non-alphanumeric character as `_` (torch.export's
/// placeholder_naming_pass): `bar.l0.weight` -> `p_bar_l0_weight`.
inline std::string lifted_name(input_kind k, std::string_view fqn) {
  std::string s(placeholder_prefix(k));
  for (char c : fqn) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    s += alnum ? static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c) : '_';
  }
  return s;
}
inline int input_rank(input_kind k) {
  switch (k) {
    case input_kind::token: return 0;
    case input_kind::parameter: return 1;
    case input_kind::buffer: return 2;
    case input_kind::constant_tensor: return 3;
    case input_kind::custom_obj: return 4;
    case input_kind::user_input: return 5;
  }
  return 6;
}
}  // namespace detail

class program_builder {
 public:
  program_builder() = default;

  /// A user input, typed like `example` (kept as the program's example input). With
  /// `exact_name` false, a taken or reserved name gets a suffix (`input` -> `input_1`).
  value input(const std::string& name, const at::Tensor& example, bool exact_name = true) {
    auto v = add_input(input_spec{input_kind::user_input, argument_spec::tensor(name), {}, {}},
                       tensor_meta::of(example), exact_name);
    examples_.push_back(example);
    return v;
  }
  /// A user input of the given type.
  value input(const std::string& name, tensor_meta meta, bool exact_name = true) {
    has_all_examples_ = false;
    return add_input(input_spec{input_kind::user_input, argument_spec::tensor(name), {}, {}},
                     std::move(meta), exact_name);
  }
  /// A parameter with its fully qualified name; the tensor goes to the state dict.
  value parameter(const std::string& fqn, const at::Tensor& t) {
    state_dict_.set(fqn, t);
    return add_lifted(input_kind::parameter, fqn, t, std::nullopt);
  }
  /// A buffer; persistent buffers go to the state dict, others to the constants.
  value buffer(const std::string& fqn, const at::Tensor& t, bool persistent = true) {
    (persistent ? state_dict_ : constants_).set(fqn, t);
    return add_lifted(input_kind::buffer, fqn, t, persistent);
  }
  /// A constant tensor (CONSTANT_TENSOR), lifted to an input and kept in the constants.
  value constant(const std::string& fqn, const at::Tensor& t) {
    constants_.set(fqn, t);
    return add_lifted(input_kind::constant_tensor, fqn, t, std::nullopt);
  }

  /// A custom object (a torch::class_ instance, CUSTOM_OBJ), lifted to an input named `obj_` +
  /// FQN and kept in the program's custom objects: calls read it as torch's do.
  value custom_obj(const std::string& fqn, const c10::IValue& obj) {
    if (!obj.isObject())
      throw graph_error("xport.builder.custom_obj", "custom object '" + fqn + "' is a " + std::string(obj.tagKind()) +
                                                        ", not a torch::class_ instance");
    const auto cls = obj.type()->str();
    custom_objs_[fqn] = obj;
    input_spec spec{input_kind::custom_obj, argument_spec{argument_spec::kind::custom_obj, detail::lifted_name(input_kind::custom_obj, fqn), {}, cls}, fqn, std::nullopt};
    return placeholder(spec, value_type::of_object(cls));
  }

  /// A placeholder exactly as `spec` describes it (its name, kind, target, persistence), typed
  /// `type`; for passes that rebuild a program. State tensors come from set_state().
  value placeholder(const input_spec& spec, value_type type) {
    value v = graph_.add_placeholder(spec.arg.name, std::move(type));
    input_specs_.push_back(spec);
    return v;
  }
  /// The state dict and constants of the program being built (replacing what is there).
  void set_state(tensor_dict state_dict, tensor_dict constants) {
    state_dict_ = std::move(state_dict);
    constants_ = std::move(constants);
  }
  /// The custom objects the program's CUSTOM_OBJ inputs read (exported_program::custom_objs).
  void set_custom_objs(std::map<std::string, c10::IValue> objs) { custom_objs_ = std::move(objs); }
  /// Example inputs to keep in the program (or none).
  void set_examples(std::optional<std::vector<at::Tensor>> examples) {
    has_all_examples_ = examples.has_value();
    examples_ = examples ? std::move(*examples) : std::vector<at::Tensor>{};
  }

  /// Calls operator `op` (`"aten::add.Tensor"`, `"aten::sin"`): arguments are bound to its
  /// schema (positional then keyword, defaults filled) and checked; output types are inferred on
  /// meta tensors. Throws schema_error or missing_fake_kernel, leaving the graph unchanged.
  node call(std::string_view op, std::vector<argument> args = {}, std::vector<kwarg> kwargs = {}) {
    return call(find_op(op), std::move(args), std::move(kwargs));
  }
  node call(const op_info& op, std::vector<argument> args = {}, std::vector<kwarg> kwargs = {}) {
    for (auto& a : args) check_owned(a, &op);
    for (auto& k : kwargs) check_owned(k.value, &op);
    auto bound = detail::bind_arguments(op, std::move(args), std::move(kwargs));
    auto types = detail::infer_outputs(op, bound);
    auto n = graph_.create_call(op, std::move(bound), std::move(types));
    stamp(n);
    return n;
  }

  /// Calls `op` with arguments already in schema order (all of them, defaults included), as a
  /// pass rewriting nodes has them; output types are inferred on meta tensors.
  node call_bound(const op_info& op, std::vector<argument> bound) {
    if (bound.size() != op.schema().arguments().size())
      throw schema_error("xport.schema.arg_count", op.qualified + " takes " +
                                                       std::to_string(op.schema().arguments().size()) +
                                                       " arguments, " + std::to_string(bound.size()) + " were bound");
    auto types = detail::infer_outputs(op, bound);
    return record(op, std::move(bound), std::move(types));
  }

  /// Adds a call node whose arguments are already bound to the schema and whose output types
  /// are known (what a tracer records). Only the graph's own checks apply.
  node record(const op_info& op, std::vector<argument> bound, std::vector<value_type> types) {
    auto n = graph_.create_call(op, std::move(bound), std::move(types));
    stamp(n);
    return n;
  }

  /// Source location recorded on the nodes created from now on.
  program_builder& at(source_location loc) {
    source_ = std::make_shared<const source_location>(std::move(loc));
    return *this;
  }
  /// Only the code text (`a = torch.sin(x)`) for the nodes created from now on.
  program_builder& code(std::string text) { return at(source_location{{}, 0, {}, std::move(text)}); }
  /// Module path (FQN of the calling module) recorded on the nodes created from now on.
  program_builder& in_module(std::string path) {
    module_ = std::move(path);
    return *this;
  }

  /// The nodes created from now on take `origin`'s source location, module path and custom
  /// metadata (a copy each), as torch keeps a node's meta on the nodes lowering makes from it.
  program_builder& like(node origin) {
    source_ = origin.source();
    module_ = origin.module_path();
    custom_ = origin.impl()->custom ? std::shared_ptr<const detail::custom_meta_box>(origin.impl()->custom->clone())
                                    : nullptr;
    return *this;
  }

  /// Source location for the nodes created from now on (shared, no copy).
  program_builder& at(std::shared_ptr<const source_location> loc) {
    source_ = std::move(loc);
    return *this;
  }

  /// Adds a user output.
  program_builder& output(value v) { return output(v, output_kind::user_output); }
  program_builder& output(const node& n) { return output(n.out()); }
  /// Adds an output of the given kind; `target` names the mutated buffer/parameter/input.
  program_builder& output(value v, output_kind kind, std::optional<std::string> target = std::nullopt) {
    check_owned(v, nullptr);
    outputs_.emplace_back(v);
    output_specs_.push_back(output_spec{kind, argument_spec::tensor(v.name()), std::move(target)});
    return *this;
  }
  /// Adds an output that is a graph value or a constant (`None` where the traced code returned
  /// an undefined tensor; a constant output of a loaded program): a constant is returned by the
  /// output node itself, its spec a ConstantArgument with no name, as torch.export records it.
  program_builder& output_arg(const argument& a, output_kind kind, std::optional<std::string> target = std::nullopt) {
    if (a.is_value()) return output(a.as_value(), kind, std::move(target));
    outputs_.push_back(a);
    output_specs_.push_back(output_spec{kind, argument_spec::constant_value("", a), std::move(target)});
    return *this;
  }

  [[nodiscard]] graph& graph_ref() noexcept { return graph_; }

  /// Finishes: lifted inputs are ordered before user inputs and mutation outputs before user
  /// outputs (torch.export's order), then the program is verified. The builder is left empty.
  [[nodiscard]] exported_program build(ir_dialect dialect = ir_dialect::training) && {
    return std::move(*this).build(dialect, verify_options{});
  }
  /// As build(); `checks` says which of verify()'s checks run (a tracer that bound every call
  /// from the dispatcher's own stack can skip the schema checks).
  [[nodiscard]] exported_program build(ir_dialect dialect, const verify_options& checks) && {
    // placeholders: stable by kind rank
    auto phs = graph_.placeholders();
    std::vector<std::size_t> order(phs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return detail::input_rank(input_specs_[a].kind) < detail::input_rank(input_specs_[b].kind);
    });
    graph_signature sig;
    const node first_non_ph = phs.empty() ? graph_.first() : phs.back().next();
    for (auto i : order) {
      sig.input_specs.push_back(input_specs_[i]);
      graph_.move_before(phs[i], first_non_ph);  // a null position appends
    }
    // outputs: tokens, mutations, then the rest, each group in the order given
    std::vector<std::size_t> out_order(outputs_.size());
    for (std::size_t i = 0; i < out_order.size(); ++i) out_order[i] = i;
    const auto out_rank = [&](std::size_t i) {
      switch (output_specs_[i].kind) {
        case output_kind::token: return 0;
        case output_kind::buffer_mutation:
        case output_kind::parameter_mutation:
        case output_kind::user_input_mutation: return 1;
        default: return 2;
      }
    };
    std::stable_sort(out_order.begin(), out_order.end(),
                     [&](std::size_t a, std::size_t b) { return out_rank(a) < out_rank(b); });
    std::vector<argument> results;
    for (auto i : out_order) {
      results.emplace_back(outputs_[i]);
      sig.output_specs.push_back(output_specs_[i]);
    }
    graph_.set_output(std::move(results));
    exported_program p(std::move(graph_), std::move(sig), std::move(state_dict_),
                       std::move(constants_), {}, dialect);
    p.custom_objs_mut() = std::move(custom_objs_);
    if (has_all_examples_ && !examples_.empty()) p.set_example_inputs(std::move(examples_));
    verify(p, checks);
    *this = program_builder();
    return p;
  }

 private:
  void check_owned(const argument& a, const op_info* op) {
    a.for_each_value([&](const value& v) {
      if (v && v.producer().impl()->owner != &graph_)
        throw graph_error("xport.builder.foreign_value",
                          "value '" + v.name() + "' belongs to another graph" +
                              (op ? " (argument of " + op->qualified + ")" : std::string()) +
                              "; use values made by this builder");
    });
  }

  value add_input(input_spec spec, tensor_meta meta, bool exact_name) {
    value v = exact_name ? graph_.add_placeholder(spec.arg.name, value_type::of(std::move(meta)))
                         : graph_.add_placeholder_fresh(spec.arg.name, value_type::of(std::move(meta)));
    spec.arg.name = v.name();
    input_specs_.push_back(std::move(spec));
    return v;
  }

  value add_lifted(input_kind k, const std::string& fqn, const at::Tensor& t,
                   std::optional<bool> persistent) {
    input_spec spec{k, argument_spec::tensor(detail::lifted_name(k, fqn)), fqn, persistent};
    return add_input(std::move(spec), tensor_meta::of(t), false);
  }

  xport::graph graph_;
  std::vector<input_spec> input_specs_;  // in placeholder creation order
  std::vector<argument> outputs_;
  std::vector<output_spec> output_specs_;
  tensor_dict state_dict_;
  tensor_dict constants_;
  std::map<std::string, c10::IValue> custom_objs_;
  std::vector<at::Tensor> examples_;
  bool has_all_examples_ = true;
  void stamp(node n) const {
    n.set_source(source_);
    n.set_module_path(module_);
    if (custom_) n.impl()->custom = custom_->clone();
  }

  std::shared_ptr<const source_location> source_;
  std::string module_;
  std::shared_ptr<const detail::custom_meta_box> custom_;  // set by like()
};

XPORT_END_NAMESPACE
