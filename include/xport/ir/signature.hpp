// xport/ir/signature.hpp: the graph signature of an exported program.
// One list of input specs and one of output specs, in torch.export's vocabulary and order
// (lifted state before user inputs; mutations before user outputs). Every other view
// (parameters, buffers_to_mutate, user_inputs, ...) is computed from the two lists.
#pragma once

#include <cstdint>      // std::uint8_t
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

#include <xport/config.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/treespec.hpp>

XPORT_BEGIN_NAMESPACE

/// torch.export.graph_signature.InputKind, with its numbering.
enum class input_kind : std::uint8_t {
  user_input = 1,
  parameter = 2,
  buffer = 3,
  constant_tensor = 4,
  custom_obj = 5,
  token = 6,
};

/// torch.export.graph_signature.OutputKind, with the numbering of current torch.
enum class output_kind : std::uint8_t {
  user_output = 1,
  loss_output = 2,
  buffer_mutation = 3,
  parameter_mutation = 4,
  gradient_to_parameter = 5,
  gradient_to_user_input = 6,
  user_input_mutation = 7,
  token = 8,
};

/// `USER_INPUT`, `PARAMETER`, ...
inline std::string_view to_string(input_kind k) {
  switch (k) {
    case input_kind::user_input: return "USER_INPUT";
    case input_kind::parameter: return "PARAMETER";
    case input_kind::buffer: return "BUFFER";
    case input_kind::constant_tensor: return "CONSTANT_TENSOR";
    case input_kind::custom_obj: return "CUSTOM_OBJ";
    case input_kind::token: return "TOKEN";
  }
  return "?";
}

/// `USER_OUTPUT`, `BUFFER_MUTATION`, ...
inline std::string_view to_string(output_kind k) {
  switch (k) {
    case output_kind::user_output: return "USER_OUTPUT";
    case output_kind::loss_output: return "LOSS_OUTPUT";
    case output_kind::buffer_mutation: return "BUFFER_MUTATION";
    case output_kind::parameter_mutation: return "PARAMETER_MUTATION";
    case output_kind::gradient_to_parameter: return "GRADIENT_TO_PARAMETER";
    case output_kind::gradient_to_user_input: return "GRADIENT_TO_USER_INPUT";
    case output_kind::user_input_mutation: return "USER_INPUT_MUTATION";
    case output_kind::token: return "TOKEN";
  }
  return "?";
}

/// The placeholder-name prefix torch.export gives each kind of lifted input.
inline std::string_view placeholder_prefix(input_kind k) {
  switch (k) {
    case input_kind::parameter: return "p_";
    case input_kind::buffer: return "b_";
    case input_kind::constant_tensor: return "c_";
    case input_kind::custom_obj: return "obj_";
    case input_kind::token: return "token";
    case input_kind::user_input: return "";
  }
  return "";
}

/// What a spec refers to: TensorArgument(name), SymIntArgument(name), ConstantArgument(name,
/// value), CustomObjArgument(name, class_fqn), TokenArgument(name). A user input that is a
/// ConstantArgument is a specialized constant (torch's `constant_input`): its placeholder has
/// value_kind::none, nothing reads it, and it is no run-time input (xport::run takes the tensor
/// inputs; callable<Sig> checks the constant).
struct argument_spec {
  enum class kind : std::uint8_t { tensor, sym_int, sym_float, sym_bool, constant, custom_obj, token };
  kind type = kind::tensor;
  std::string name;
  argument constant;      ///< the value of a ConstantArgument
  std::string class_fqn;  ///< the class of a CustomObjArgument

  static argument_spec tensor(std::string n) { return {kind::tensor, std::move(n), {}, {}}; }
  static argument_spec sym_int(std::string n) { return {kind::sym_int, std::move(n), {}, {}}; }
  static argument_spec token(std::string n) { return {kind::token, std::move(n), {}, {}}; }
  static argument_spec constant_value(std::string n, argument v) {
    return {kind::constant, std::move(n), std::move(v), {}};
  }
  friend bool operator==(const argument_spec&, const argument_spec&) = default;
};

struct input_spec {
  input_kind kind = input_kind::user_input;
  argument_spec arg;
  std::optional<std::string> target;  ///< FQN of a parameter/buffer/constant
  std::optional<bool> persistent;     ///< set for buffers only

  /// `p_fc_weight: PARAMETER target='fc.weight'`, as torch prints an InputSpec.
  [[nodiscard]] std::string str() const {
    std::string s = arg.name + ": " + std::string(to_string(kind));
    if (target) s += " target='" + *target + "'";
    if (persistent) s += *persistent ? " persistent=True" : " persistent=False";
    return s;
  }
  friend bool operator==(const input_spec&, const input_spec&) = default;
};

struct output_spec {
  output_kind kind = output_kind::user_output;
  argument_spec arg;
  std::optional<std::string> target;  ///< mutated buffer/parameter FQN, or mutated input's name

  /// `add_2: BUFFER_MUTATION target='my_buffer2'`, as torch prints an OutputSpec.
  [[nodiscard]] std::string str() const {
    std::string s = arg.name + ": " + std::string(to_string(kind));
    if (target) s += " target='" + *target + "'";
    return s;
  }
  friend bool operator==(const output_spec&, const output_spec&) = default;
};

/// torch.export.ExportGraphSignature: the only stored data are the two spec lists.
class graph_signature {
 public:
  using name_map = std::vector<std::pair<std::string, std::string>>;

  std::vector<input_spec> input_specs;
  std::vector<output_spec> output_specs;

  /// FQNs of the parameters, in input order.
  [[nodiscard]] std::vector<std::string> parameters() const { return targets(input_kind::parameter); }
  /// FQNs of the buffers (persistent or not), in input order.
  [[nodiscard]] std::vector<std::string> buffers() const { return targets(input_kind::buffer); }
  [[nodiscard]] std::vector<std::string> non_persistent_buffers() const {
    std::vector<std::string> out;
    for (const auto& s : input_specs)
      if (s.kind == input_kind::buffer && s.persistent == false && s.target) out.push_back(*s.target);
    return out;
  }
  [[nodiscard]] std::vector<std::string> lifted_tensor_constants() const {
    return targets(input_kind::constant_tensor);
  }
  [[nodiscard]] std::vector<std::string> lifted_custom_objs() const {
    return targets(input_kind::custom_obj);
  }
  /// Names of the user inputs (placeholder names; constant inputs by their name).
  [[nodiscard]] std::vector<std::string> user_inputs() const {
    std::vector<std::string> out;
    for (const auto& s : input_specs)
      if (s.kind == input_kind::user_input) out.push_back(s.arg.name);
    return out;
  }
  /// Names of the user outputs (and the loss output), in output order.
  [[nodiscard]] std::vector<std::string> user_outputs() const {
    std::vector<std::string> out;
    for (const auto& s : output_specs)
      if (s.kind == output_kind::user_output || s.kind == output_kind::loss_output)
        out.push_back(s.arg.name);
    return out;
  }
  [[nodiscard]] name_map inputs_to_parameters() const { return input_map(input_kind::parameter); }
  [[nodiscard]] name_map inputs_to_buffers() const { return input_map(input_kind::buffer); }
  [[nodiscard]] name_map inputs_to_lifted_tensor_constants() const {
    return input_map(input_kind::constant_tensor);
  }
  [[nodiscard]] name_map inputs_to_lifted_custom_objs() const {
    return input_map(input_kind::custom_obj);
  }
  /// Output name -> FQN of the buffer it updates.
  [[nodiscard]] name_map buffers_to_mutate() const { return output_map(output_kind::buffer_mutation); }
  [[nodiscard]] name_map parameters_to_mutate() const {
    return output_map(output_kind::parameter_mutation);
  }
  /// Output name -> name of the user input it updates.
  [[nodiscard]] name_map user_inputs_to_mutate() const {
    return output_map(output_kind::user_input_mutation);
  }
  [[nodiscard]] std::vector<std::string> input_tokens() const {
    std::vector<std::string> out;
    for (const auto& s : input_specs)
      if (s.kind == input_kind::token) out.push_back(s.arg.name);
    return out;
  }
  [[nodiscard]] std::vector<std::string> output_tokens() const {
    std::vector<std::string> out;
    for (const auto& s : output_specs)
      if (s.kind == output_kind::token) out.push_back(s.arg.name);
    return out;
  }

  /// The spec of the input named `name`, or nullptr.
  [[nodiscard]] const input_spec* find_input(std::string_view name) const {
    for (const auto& s : input_specs)
      if (s.arg.name == name) return &s;
    return nullptr;
  }

  /// torch's `str(ExportGraphSignature)`: "\n# inputs\n...\n\n# outputs\n...\n".
  [[nodiscard]] std::string str() const {
    std::string s = "\n# inputs\n";
    for (const auto& i : input_specs) s += i.str() + "\n";
    s += "\n# outputs\n";
    for (const auto& o : output_specs) s += o.str() + "\n";
    return s;
  }

  friend bool operator==(const graph_signature&, const graph_signature&) = default;

 private:
  [[nodiscard]] std::vector<std::string> targets(input_kind k) const {
    std::vector<std::string> out;
    for (const auto& s : input_specs)
      if (s.kind == k && s.target) out.push_back(*s.target);
    return out;
  }
  [[nodiscard]] name_map input_map(input_kind k) const {
    name_map out;
    for (const auto& s : input_specs)
      if (s.kind == k && s.target) out.emplace_back(s.arg.name, *s.target);
    return out;
  }
  [[nodiscard]] name_map output_map(output_kind k) const {
    name_map out;
    for (const auto& s : output_specs)
      if (s.kind == k && s.target) out.emplace_back(s.arg.name, *s.target);
    return out;
  }
};

// Note [Preserved module calls]
// torch.export(..., preserve_module_call_signature=("block",)) keeps submodule `block`'s call
// boundary: the archive's module_call_graph entry for it names the graph values that went in and
// came out, and torch's `unflatten` rebuilds `block` as a module called with exactly those (one
// that can be swapped for another program of the same signature). xport reads these entries,
// keeps them by FQN, and writes them back; a transformation that builds a new graph
// (run_decompositions) renames each boundary value to the value its lowering became, as torch's
// node provenance does, and the save refuses a signature naming a value the graph lost
// (`xport.save.module_call`) rather than write one torch could not wire.

/// torch.export's ModuleCallSignature: how a preserved submodule is called, so that torch's
/// `unflatten` can rebuild it as a module of its own (and swap it for another program of the
/// same signature). `inputs` and `outputs` name the graph's values at the submodule's boundary
/// (`x`, `mul` in; `add`, `sum_1` out); `in_spec` is the call's structure, a tuple of (the
/// positional arguments' tuple, the keyword arguments' dict), and `out_spec` the result's, as
/// torch's pytree has them. `forward_arg_names` is absent where torch writes null (a
/// submodule's). A program keeps these by FQN (exported_program::module_call_signatures()); a
/// pass that replaces a boundary value carries the name over (run_decompositions) or the save
/// refuses the stale name.
struct module_call_signature {
  std::vector<argument_spec> inputs, outputs;
  treespec in_spec, out_spec;
  std::optional<std::vector<std::string>> forward_arg_names;
  friend bool operator==(const module_call_signature&, const module_call_signature&) = default;
};

XPORT_END_NAMESPACE
