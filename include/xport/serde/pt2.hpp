// xport/serde/pt2.hpp: save and load .pt2 archives in torch.export's own layout.
//
//   archive_format                       "pt2"
//   archive_version                      "0"
//   models/model.json                    the program (serde/json.hpp; schema 8.20, torch 2.13's)
//   data/weights/weight_<i>              raw bytes of one storage (shared storage written once)
//   data/weights/model_weights_config.json     {"config": {fqn: PayloadMeta}}
//   data/constants/tensor_<i>, data/constants/model_constants_config.json
//   data/sample_inputs/model.pt          example inputs, torch.save'd (args, kwargs); always
//                                        there (torch's loader reads it), empty when not asked
//
// The zip is written by LibTorch's PyTorchStreamWriter (records stored, 64-byte aligned, under
// an `archive/` root folder, which torch's reader strips as it strips its own) and read with its
// PyTorchStreamReader after xport's own bounds check of the central directory; weights are read
// straight into fresh tensor storage. Loading never runs anything from the file.
#pragma once

#include <algorithm>    // std::find, std::stable_sort
#include <cctype>       // std::isalpha
#include <cstdio>       // std::FILE
#include <functional>   // std::function
#include <istream>      // std::istream
#include <map>          // std::map
#include <memory>       // std::shared_ptr
#include <ostream>      // std::ostream
#include <string>       // std::string
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <caffe2/serialize/file_adapter.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/versions.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <ATen/core/ivalue.h>
#include <c10/macros/Export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <xport/config.hpp>
#include <xport/serde/json.hpp>

// LibTorch's unpickler (torch/csrc/jit/serialization/pickle.h, same in 1.13 and 2.x), declared
// here: its header pulls in the whole JIT IR, against the narrow-headers rule.
namespace torch::jit {
TORCH_API c10::IValue pickle_load(const std::vector<char>& data);
}  // namespace torch::jit


XPORT_BEGIN_NAMESPACE

struct save_options {
  /// The model's name inside the archive (`models/<name>.json`); torch.export.save uses "model".
  std::string model_name = "model";
  /// Write the example inputs kept on the program into `data/sample_inputs/<name>.pt` as torch
  /// does, `(args, kwargs)` nested as the program's inputs; otherwise that record is empty (as
  /// torch writes it for a program without example inputs).
  bool example_inputs = false;
};

struct load_options {
  std::string model_name = "model";
  /// Read example inputs when the archive has them (parsed by LibTorch's unpickler: only for
  /// files you trust).
  bool example_inputs = false;
  /// Check the rebuilt program with verify() (on by default; a failure is a load_error).
  bool verify = true;
};

namespace detail {

/// `v` in torch.save's format (a zip of data.pkl and data/<i>), as torch::pickle_save writes it but
/// without the JIT's type tags on dicts and lists (`torch.jit._pickle.restore_type_tag`), which
/// torch.load(weights_only=True), what torch's .pt2 loader tries first, refuses. Dicts and lists
/// come back untyped in C++; tensors as they were.
inline std::vector<char> pickle_bytes(const c10::IValue& v) {
  std::vector<char> pkl;
  torch::jit::Pickler pickler([&](const char* b, std::size_t n) { pkl.insert(pkl.end(), b, b + n); }, nullptr, nullptr,
                              nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(v);
  pickler.stop();
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* d, std::size_t n) {
    out.insert(out.end(), static_cast<const char*>(d), static_cast<const char*>(d) + n);
    return n;
  });
  const auto& tensors = pickler.tensorData();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto data = torch::jit::getWriteableTensorData(tensors[i]);
    w.writeRecord("data/" + std::to_string(i), data.data(), data.sizeInBytes());
  }
  w.writeRecord("data.pkl", pkl.data(), pkl.size());
  w.writeEndOfFile();
  return out;
}

/// The example inputs as torch.save'd `(args, kwargs)`, nested as `in_spec` says (constants
/// included); without a spec, the tensors as positional arguments.
inline c10::IValue example_inputs_ivalue(const std::vector<at::Tensor>& tensors, const std::optional<treespec>& in_spec) {
  c10::impl::GenericDict kwargs(c10::StringType::get(), c10::AnyType::get());
  if (!in_spec) {
    std::vector<c10::IValue> args;
    for (const auto& t : tensors) args.emplace_back(t.cpu());
    return c10::ivalue::Tuple::create({c10::ivalue::Tuple::create(std::move(args)), kwargs});
  }
  std::size_t next = 0;
  const auto build = [&](const auto& self, const treespec& s) -> c10::IValue {
    using K = treespec::kind;
    switch (s.type) {
      case K::leaf:
        if (next >= tensors.size()) throw error("xport.save.example_inputs", "the example inputs are fewer than the program's tensor inputs");
        return tensors[next++].cpu();
      case K::constant: return to_ivalue(s.value, c10::AnyType::get(), [](const value&) { return c10::IValue(); });
      case K::none: return c10::IValue();
      case K::tuple: {
        std::vector<c10::IValue> es;
        for (const auto& c : s.children) es.push_back(self(self, c));
        return c10::ivalue::Tuple::create(std::move(es));
      }
      case K::list: {
        c10::impl::GenericList l(c10::AnyType::get());
        for (const auto& c : s.children) l.push_back(self(self, c));
        return l;
      }
      case K::dict: {
        c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
        for (std::size_t i = 0; i < s.children.size(); ++i) d.insert(s.keys[i], self(self, s.children[i]));
        return d;
      }
    }
    return c10::IValue();
  };
  const std::size_t n = in_spec->children.size(), k = std::min(in_spec->num_kwargs, n);
  std::vector<c10::IValue> args;
  for (std::size_t i = 0; i < n; ++i) {
    auto v = build(build, in_spec->children[i]);
    if (i < n - k) args.push_back(std::move(v));
    else kwargs.insert(serde::argument_name(*in_spec, i), std::move(v));
  }
  return c10::ivalue::Tuple::create({c10::ivalue::Tuple::create(std::move(args)), kwargs});
}

/// The tensors of a call `(args, kwargs)` (as torch.save'd example inputs hold it), in the order
/// of the program's inputs, `in_spec` (without one: the tensors of args, in order); what does
/// not fit the spec is a load_error naming `record`.
inline std::vector<at::Tensor> inputs_of_call(const c10::IValue& v, const std::optional<treespec>& in_spec,
                                              const std::string& record) {
  const auto fail = [&](const std::string& what) -> void { throw load_error("xport.load.sample_inputs", record + ": " + what); };
  if (!v.isTuple() || v.toTupleRef().elements().size() != 2 || !v.toTupleRef().elements()[1].isGenericDict())
    fail("expected a tuple (args, kwargs)");
  const auto& args = v.toTupleRef().elements()[0];
  const auto kwargs = v.toTupleRef().elements()[1].toGenericDict();
  std::vector<at::Tensor> out;
  if (!in_spec) {
    const auto visit = [&](const auto& self, const c10::IValue& x, int depth) -> void {
      if (depth > 32) fail("nested too deeply");
      if (x.isTensor()) out.push_back(x.toTensor());
      else if (x.isTuple())
        for (const auto& e : x.toTupleRef().elements()) self(self, e, depth + 1);
      else if (x.isList())
        for (const auto& e : x.toListRef()) self(self, e, depth + 1);
    };
    visit(visit, args, 0);
    return out;
  }
  // the spec's depth is bounded by the JSON nesting limit
  const auto take = [&](const auto& self, const treespec& s, const c10::IValue& x) -> void {
    using K = treespec::kind;
    switch (s.type) {
      case K::leaf:
        if (!x.isTensor()) fail("expected a tensor where the program takes one, got " + x.tagKind());
        out.push_back(x.toTensor());
        return;
      case K::constant:
      case K::none: return;
      case K::tuple:
      case K::list: {
        const auto elems = x.isTuple() ? x.toTupleRef().elements().vec() : x.isList() ? x.toListRef().vec() : std::vector<c10::IValue>{};
        if ((!x.isTuple() && !x.isList()) || elems.size() != s.children.size())
          fail("expected a " + std::string(s.type == K::tuple ? "tuple" : "list") + " of " + std::to_string(s.children.size()));
        for (std::size_t i = 0; i < elems.size(); ++i) self(self, s.children[i], elems[i]);
        return;
      }
      case K::dict: {
        if (!x.isGenericDict()) fail("expected a dict, got " + x.tagKind());
        const auto d = x.toGenericDict();
        for (std::size_t i = 0; i < s.children.size(); ++i) {
          const auto it = d.find(s.keys[i]);
          if (it == d.end()) fail("the dict has no key '" + s.keys[i] + "'");
          self(self, s.children[i], it->value());
        }
        return;
      }
    }
  };
  const std::size_t n = in_spec->children.size(), k = std::min(in_spec->num_kwargs, n);
  if (!args.isTuple() || args.toTupleRef().elements().size() != n - k)
    fail("expected " + std::to_string(n - k) + " positional argument(s)");
  for (std::size_t i = 0; i < n; ++i) {
    if (i < n - k) {
      take(take, in_spec->children[i], args.toTupleRef().elements()[i]);
      continue;
    }
    const auto key = serde::argument_name(*in_spec, i);
    const auto it = kwargs.find(key);
    if (it == kwargs.end()) fail("kwargs have no '" + key + "'");
    take(take, in_spec->children[i], it->value());
  }
  return out;
}

/// Example inputs from `torch.save((args, kwargs))` bytes (see inputs_of_call).
inline std::vector<at::Tensor> unpickle_inputs(const std::string& bytes, const std::string& record,
                                               const std::optional<treespec>& in_spec) {
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    throw load_error("xport.load.sample_inputs", record + ": " + e.what());
  }
  return inputs_of_call(v, in_spec, record);
}

}  // namespace detail

namespace detail::serde {

inline constexpr std::string_view archive_format = "pt2";
inline constexpr std::string_view archive_version = "0";

/// The opset version of aten, as torch writes it: torch._C._get_max_operator_version(), which
/// is the running LibTorch's caffe2::serialize::kProducedFileFormatVersion.
inline int aten_opset_version() { return static_cast<int>(caffe2::serialize::kProducedFileFormatVersion); }

inline std::string stack_trace_of(const source_location& s) {
  std::string t = "File \"" + s.file + "\", line " + std::to_string(s.line) + ", in " + s.function;
  if (!s.code.empty()) t += "\n    " + s.code;
  return t;
}
inline std::shared_ptr<const source_location> source_of(const std::string& trace) {
  // the last frame: `  File "<file>", line <n>, in <function>\n    <code>`
  const auto at = trace.rfind("File \"");
  if (at == std::string::npos) return nullptr;
  const auto q = trace.find("\", line ", at + 6);
  if (q == std::string::npos) return nullptr;
  source_location s;
  s.file = trace.substr(at + 6, q - at - 6);
  std::size_t p = q + 8;
  std::uint64_t line = 0;
  while (p < trace.size() && trace[p] >= '0' && trace[p] <= '9' && line < 1000000000) line = line * 10 + static_cast<std::uint64_t>(trace[p++] - '0');
  s.line = static_cast<std::uint32_t>(line);
  if (trace.compare(p, 5, ", in ") != 0) return nullptr;
  p += 5;
  const auto eol = trace.find('\n', p);
  s.function = trace.substr(p, eol == std::string::npos ? std::string::npos : eol - p);
  if (eol != std::string::npos) {
    auto code = trace.substr(eol + 1);
    const auto first = code.find_first_not_of(' ');
    s.code = first == std::string::npos ? std::string() : code.substr(first);
  }
  return std::make_shared<const source_location>(std::move(s));
}

// ---- program -> JSON -------------------------------------------------------------------------

/// Note [Symbolic arguments in .pt2]: an argument that depends on a dynamic dim (`[s0, -1]`) is
/// written as torch writes it: a `torch.ops.aten.sym_size.int(x, 0)` node reads the dim from an
/// input, `_operator.mul` / `add` / `sub` / `floordiv` nodes compute the linear form, and the
/// argument names the result (`as_sym_int: {as_name: ...}`). Reading turns them back into
/// expressions; the nodes are not kept in the graph.
class sym_writer {
 public:
  sym_writer(const graph& g, json& nodes, json& sym_int_values) : nodes_(nodes), values_(sym_int_values) {
    for (auto n : g.nodes())
      for (auto v : n.outputs()) taken_.insert(v.name());
    for (auto ph : g.placeholders()) {
      const auto v = ph.out();
      if (v.kind() != value_kind::tensor) continue;
      const auto& sizes = v.meta().sizes;
      for (std::size_t d = 0; d < sizes.size(); ++d)
        if (auto lin = sizes[d].is_symbolic() ? sym::as_linear(sizes[d]) : std::nullopt)
          sites_.push_back({lin->symbol, v.name(), static_cast<std::int64_t>(d), lin->a, lin->b, sizes[d]});
    }
  }

  /// The name of a value equal to `e` (written on first use): sums and products of the dims,
  /// floor division, modulo, min and max, as torch writes them.
  std::string operator()(const sym_int& e) {
    if (auto it = named_.find(e.str()); it != named_.end()) return it->second;
    std::string name;
    const auto& n = xport::detail::node_of(e);
    using K = xport::detail::sym_kind;
    switch (n.kind) {
      case K::symbol: name = symbol(n.name).first; break;
      case K::poly: {
        std::optional<std::pair<std::string, sym_int>> acc;  // the sum so far
        for (const auto& t : n.terms) {
          std::optional<std::pair<std::string, sym_int>> prod;
          for (const auto& f : t.factors)
            for (std::int64_t k = 0; k < f.power; ++k) {
              const auto atom = rehint(f.atom);
              prod = !prod ? std::pair{(*this)(atom), atom}
                           : std::pair{op("mul", prod->first, operand(atom), prod->second * atom), prod->second * atom};
            }
          if (t.coeff != 1) prod = std::pair{op("mul", prod->first, json{{"as_int", t.coeff}}, prod->second * t.coeff), prod->second * t.coeff};
          acc = !acc ? prod
                     : std::pair{op("add", acc->first, json{{"as_name", prod->first}}, acc->second + prod->second), acc->second + prod->second};
        }
        if (n.constant > 0) acc = std::pair{op("add", acc->first, json{{"as_int", n.constant}}, acc->second + n.constant), acc->second + n.constant};
        if (n.constant < 0) acc = std::pair{op("sub", acc->first, json{{"as_int", -n.constant}}, acc->second - (-n.constant)), acc->second - (-n.constant)};
        name = acc->first;
        break;
      }
      case K::floordiv: name = op_node("floordiv", operand(rehint(n.args[0])), operand(rehint(n.args[1])), e, "_operator."); break;
      case K::mod: name = op_node("mod", operand(rehint(n.args[0])), operand(rehint(n.args[1])), e, "_operator."); break;
      case K::min:
      case K::max: {  // n-ary, folded pairwise
        std::vector<sym_int> args;
        for (const auto& a : n.args) args.push_back(rehint(a));
        sym_int acc = args[0];
        json acc_j = operand(acc);
        for (std::size_t i = 1; i < args.size(); ++i) {
          acc = n.kind == K::min ? sym::min(acc, args[i]) : sym::max(acc, args[i]);
          acc_j = {{"as_name", op_node(n.kind == K::min ? "min" : "max", acc_j, operand(args[i]), acc, "torch.sym_")}};
        }
        name = acc_j["as_name"].get<std::string>();
        break;
      }
    }
    named_.emplace(e.str(), name);
    return name;
  }

 private:
  struct site {
    std::string symbol, input;
    std::int64_t dim, a, b;
    sym_int size;
  };

  std::string fresh(const std::string& base) {
    std::string n = base;
    for (int k = 1; taken_.count(n); ++k) n = base + "_" + std::to_string(k);
    taken_.insert(n);
    return n;
  }

  // A value equal to the bare symbol `s`: sym_size of the input dim that gives it.
  std::pair<std::string, sym_int> symbol(const std::string& s) {
    if (auto it = symbols_.find(s); it != symbols_.end()) return it->second;
    const site* best = nullptr;
    for (const auto& st : sites_)
      if (st.symbol == s && (!best || (st.a == 1 && st.b == 0 && (best->a != 1 || best->b != 0)))) best = &st;
    if (!best)
      throw error("xport.save.symbolic_argument", "an operator argument uses the symbol " + s +
                                                      ", which no input dimension gives; the program is malformed");
    std::string name = fresh("sym_size_int");
    nodes_.push_back({{"target", "torch.ops.aten.sym_size.int"},
                      {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_tensor", {{"name", best->input}}}}}, {"kind", 1}},
                                              {{"name", "dim"}, {"arg", {{"as_int", best->dim}}}, {"kind", 1}}})},
                      {"outputs", json::array({{{"as_sym_int", {{"as_name", name}}}}})},
                      {"metadata", json::object()},
                      {"name", name}});
    values_[name] = sym_int_json(best->size);
    sym_int expr = best->size;  // a derived dim (a*s + b) gives s back as (size - b) // a
    if (best->b != 0) name = op("sub", name, best->b, expr = expr - best->b);
    if (best->a != 1) name = op("floordiv", name, best->a, expr = sym::floordiv(expr, best->a));
    return symbols_.emplace(s, std::pair{name, expr}).first->second;
  }

  /// `e` with the hints of its parts (the atoms of a canonical form keep none of their own).
  static sym_int rehint(const sym_int& e) {
    return sym::substitute(e, [](std::string_view) { return std::optional<sym_int>(); });
  }
  /// `{"as_int": c}` for a constant, else `{"as_name": <its value>}`.
  json operand(const sym_int& e) {
    if (e.is_constant()) return {{"as_int", e.value()}};
    return {{"as_name", (*this)(e)}};
  }
  std::string op(const char* what, const std::string& lhs, std::int64_t rhs, const sym_int& result) {
    return op(what, lhs, json{{"as_int", rhs}}, result);
  }
  std::string op(const char* what, const std::string& lhs, json rhs, const sym_int& result,
                 const std::string& prefix = "_operator.") {
    return op_node(what, json{{"as_name", lhs}}, std::move(rhs), result, prefix);
  }
  /// `<prefix><what>(a, b)`: `_operator.mul(a, b)`, `torch.sym_max(a, b)`; operands are
  /// `{"as_name": ...}` or `{"as_int": ...}`.
  std::string op_node(const char* what, json a, json b, const sym_int& result, const std::string& prefix) {
    std::string name = fresh(std::string("sym_") + what);
    nodes_.push_back({{"target", prefix + what},
                      {"inputs", json::array({{{"name", "a"}, {"arg", {{"as_sym_int", std::move(a)}}}, {"kind", 1}},
                                              {{"name", "b"}, {"arg", {{"as_sym_int", std::move(b)}}}, {"kind", 1}}})},
                      {"outputs", json::array({{{"as_sym_int", {{"as_name", name}}}}})},
                      {"metadata", json::object()},
                      {"name", name}});
    values_[name] = sym_int_json(result);
    return name;
  }

  json& nodes_;
  json& values_;
  std::unordered_set<std::string> taken_;
  std::unordered_map<std::string, std::string> named_;                       // expression -> value
  std::unordered_map<std::string, std::pair<std::string, sym_int>> symbols_;  // symbol -> value
  std::vector<site> sites_;
};

/// torch's `nn_module_stack` of a node in module `path`: one `key,path,type` entry per
/// module from the root down (`L__self__,,Net;L__self__fc,fc,torch::nn::LinearImpl`), joined
/// by ';'. Types come from the program's module table ('<' '>' become '[' ']' so that commas of
/// template arguments stay nested, as torch's reader expects; ';' becomes ':').
inline std::string nn_module_stack_of(const std::string& path, const std::unordered_map<std::string, std::string>& types) {
  const auto entry = [&](const std::string& fqn) {
    std::string type;
    if (auto it = types.find(fqn); it != types.end())
      for (char c : it->second) type += c == '<' ? '[' : c == '>' ? ']' : c == ';' ? ':' : c;
    return "L__self__" + fqn + "," + fqn + "," + type;
  };
  std::string out = entry("");
  for (std::size_t dot = 0; !path.empty() && dot != std::string::npos;) {
    dot = path.find('.', dot + 1);
    out += ";" + entry(path.substr(0, dot));
  }
  return out;
}
/// The path of the innermost module of an `nn_module_stack` (`fc` above), and every (path, type).
inline std::string module_path_of_stack(const std::string& stack, std::vector<std::pair<std::string, std::string>>* types) {
  std::string path;
  std::size_t start = 0;
  while (start <= stack.size()) {
    const auto end = std::min(stack.find(';', start), stack.size());
    // key,path,type with commas nested in () or [] kept (torch's metadata_split)
    std::vector<std::string> fields(1);
    int nesting = 0;
    for (std::size_t i = start; i < end; ++i) {
      const char c = stack[i];
      if (c == '(' || c == '[') ++nesting;
      if (c == ')' || c == ']') --nesting;
      if (c == ',' && nesting == 0) fields.emplace_back();
      else fields.back() += c;
    }
    if (fields.size() >= 2) {
      path = fields[1];
      if (types && fields.size() == 3) types->emplace_back(fields[1], fields[2]);
    }
    start = end + 1;
  }
  return path;
}

inline json graph_json(const exported_program& p) {
  const graph& g = p.graph();
  json inputs = json::array(), nodes = json::array(), outputs = json::array();
  json tensor_values = json::object(), sym_int_values = json::object();
  sym_writer name_sym(g, nodes, sym_int_values);
  const sym_namer namer = [&](const sym_int& e) { return name_sym(e); };
  // an output no getitem reads (value::unpacked) is named as torch names it: <node>_unused_<i>
  const auto name_of = [](const node& n, value v) {
    return n.has_tuple_output() && !v.unpacked() && v.num_uses() == 0
               ? n.name() + "_unused_" + std::to_string(v.index())
               : v.name();
  };
  const auto record = [&](value v, const std::string& name) {
    if (v.kind() == value_kind::tensor) tensor_values[name] = tensor_meta_json(v.meta());
    else if (v.kind() == value_kind::sym_int) sym_int_values[name] = sym_int_json(v.type().scalar);
  };
  const std::unordered_map<std::string, std::string> types(p.module_types().begin(), p.module_types().end());
  std::size_t ph = 0;
  for (auto n : g.nodes()) {
    if (n.is_placeholder()) {
      const auto& spec = p.signature().input_specs.at(ph++);
      // a specialized constant is written as its value, as torch writes it (its name is the spec's)
      if (spec.arg.type == argument_spec::kind::constant) inputs.push_back(constant_value_json(spec.arg.constant));
      else inputs.push_back(value_ref(n.output(0)));
      record(n.output(0), n.output(0).name());
      continue;
    }
    if (n.kind() == node_kind::output) {
      for (const auto& a : n.args()) outputs.push_back(argument_json(a, nullptr));
      continue;
    }
    const auto& op = n.op();
    const auto& params = op.schema().arguments();
    json in = json::array();
    const auto args = n.args();
    for (std::size_t i = 0; i < params.size() && i < args.size(); ++i)
      in.push_back({{"name", params[i].name()},
                    {"arg", argument_json(args[i], params[i].real_type(), namer)},
                    {"kind", params[i].kwarg_only() ? 2 : 1}});
    json out = json::array();
    if (op.returns_list) {
      json list = json::array();
      for (auto v : n.outputs()) list.push_back({{"name", name_of(n, v)}});
      out.push_back({{"as_tensors", std::move(list)}});
    } else {
      for (auto v : n.outputs()) {
        json ref = value_ref(v);
        if (v.kind() == value_kind::tensor) ref["as_tensor"]["name"] = name_of(n, v);
        out.push_back(v.kind() == value_kind::none ? json{{"as_none", true}} : std::move(ref));
      }
    }
    for (auto v : n.outputs()) record(v, name_of(n, v));
    json meta = json::object();
    if (const auto& s = n.source()) meta["stack_trace"] = stack_trace_of(*s);
    meta["nn_module_stack"] = nn_module_stack_of(n.module_path(), types);
    nodes.push_back({{"target", op.target}, {"inputs", std::move(in)}, {"outputs", std::move(out)},
                     {"metadata", std::move(meta)}, {"name", n.name()}});
  }
  return {{"inputs", std::move(inputs)},   {"outputs", std::move(outputs)},
          {"nodes", std::move(nodes)},     {"tensor_values", std::move(tensor_values)},
          {"sym_int_values", std::move(sym_int_values)}, {"sym_bool_values", json::object()},
          {"is_single_tensor_return", false}, {"custom_obj_values", json::object()},
          {"sym_float_values", json::object()}};
}

/// The program's call structure: its in_spec and out_spec or, for a program built by hand, one
/// argument per user input (named by it) and one result per user output.
inline std::pair<treespec, treespec> call_specs(const exported_program& p) {
  if (p.in_spec() && p.out_spec()) return {*p.in_spec(), *p.out_spec()};
  treespec in = treespec::of(treespec::kind::tuple), out = treespec::of(treespec::kind::tuple);
  for (const auto& s : p.signature().input_specs) {
    if (s.kind != input_kind::user_input) continue;
    in.children.push_back(s.arg.type == argument_spec::kind::constant ? treespec::constant(s.arg.constant) : treespec::leaf());
    in.keys.push_back(s.arg.name);
  }
  for (const auto& s : p.signature().output_specs)
    if (s.kind == output_kind::user_output || s.kind == output_kind::loss_output)
      out.children.push_back(s.arg.type == argument_spec::kind::constant ? treespec::constant(s.arg.constant) : treespec::leaf());
  return {std::move(in), std::move(out)};
}

/// torch's module call graph: the root's signature (how ep.module() is called: in_spec of
/// `(args, kwargs)`, out_spec, the forward's argument names), then one entry per submodule.
inline json module_call_graph_json(const exported_program& p) {
  const auto [in, out] = call_specs(p);
  json names = json::array();
  if (in.keys.size() == in.children.size())
    for (const auto& k : in.keys) names.push_back(k);
  json graph = json::array({{{"fqn", ""},
                             {"signature",
                              {{"inputs", json::array()},
                               {"outputs", json::array()},
                               {"in_spec", pytree_in_spec(in)},
                               {"out_spec", json::array({1, pytree_json(out)}).dump()},
                               {"forward_arg_names", std::move(names)}}}}});
  for (const auto& [fqn, type] : p.module_types())
    if (!fqn.empty()) graph.push_back({{"fqn", fqn}, {"signature", nullptr}});
  return graph;
}

inline json program_json(const exported_program& p) {
  json input_specs = json::array(), output_specs = json::array();
  for (const auto& s : p.signature().input_specs) input_specs.push_back(input_spec_json(s));
  for (const auto& s : p.signature().output_specs) output_specs.push_back(output_spec_json(s));
  json metadata = json::object();
  json ranges = json::object(), dim_names = json::object();
  for (const auto& r : p.range_constraints()) {
    ranges[r.symbol.str()] = {{"min_val", r.min}, {"max_val", r.max ? json(*r.max) : json(nullptr)}};
    if (!r.name.empty()) dim_names[r.symbol.str()] = r.name;
  }
  // the user's names of the dims (`s0` is `batch`), for guard messages after loading
  if (!dim_names.empty()) metadata["xport.dim_names"] = dim_names.dump();
  return {{"graph_module",
           {{"graph", graph_json(p)},
            {"signature", {{"input_specs", std::move(input_specs)}, {"output_specs", std::move(output_specs)}}},
            {"module_call_graph", module_call_graph_json(p)},
            {"metadata", std::move(metadata)},
            {"treespec_namedtuple_fields", json::object()}}},
          {"opset_version", {{"aten", aten_opset_version()}}},
          {"range_constraints", std::move(ranges)},
          {"schema_version", {{"major", schema_version_major}, {"minor", schema_version_minor}}},
          {"verifiers", json::array({std::string(to_string(p.dialect()))})},
          {"torch_version", torch_version()},
          {"guards_code", json::array()}};
}

// ---- JSON -> program -------------------------------------------------------------------------

/// Whether a node computes an integer size (read into an expression, not kept as a node):
/// `aten.sym_size.int` and its kin, `_operator.*`, `torch.sym_*`, `math.*`.
inline bool is_sym_node(const std::string& target) {
  return target == "torch.ops.aten.sym_size.int" || target == "torch.ops.aten.sym_stride.int" ||
         target == "torch.ops.aten.sym_numel.default" || target == "torch.ops.aten.sym_storage_offset.default" ||
         target.rfind("_operator.", 0) == 0 || target.rfind("torch.sym_", 0) == 0 || target.rfind("math.", 0) == 0;
}

/// A sym_size / _operator node: its result becomes an expression arguments can name.
inline void read_sym_node(const at_path& nj, const std::string& target, value_scope& scope) {
  const auto ins = nj["inputs"];
  const auto input = [&](const char* name) -> at_path {
    for (std::size_t a = 0, n = ins.size_of_array(); a < n; ++a)
      if (ins[a]["name"].str() == name) return ins[a]["arg"];
    ins.fail(target + " has no input '" + name + "'");
  };
  const auto outs = nj["outputs"];
  if (outs.size_of_array() != 1) outs.fail(target + " returns one SymInt");
  auto [ok, ov] = outs[0].one_of();
  if (ok == "as_sym_bool" || ok == "as_sym_float")
    nj["target"].fail("operator '" + target + "' computes a " + (ok == "as_sym_bool" ? "SymBool" : "SymFloat") +
                      ", which xport does not represent (it reads integer size arithmetic only)");
  if (ok != "as_sym_int") outs[0].fail(target + " returns a SymInt, not '" + ok + "'");
  const auto out_name = ov["as_name"].str();
  const auto operand = [&](const at_path& j) -> sym_int {
    auto [k, v] = j.one_of();
    if (k == "as_int") return v.integer();
    if (k != "as_sym_int") j.fail("expected a SymInt, got '" + k + "'");
    auto [k2, v2] = v.one_of();
    if (k2 == "as_int") return v2.integer();
    if (k2 != "as_name") v.fail("unknown member '" + k2 + "'");
    const auto name = v2.str();
    if (auto it = scope.syms.find(name); it != scope.syms.end()) return it->second;
    const auto val = scope(v2, name);
    if (val.kind() != value_kind::sym_int) v2.fail("'" + name + "' is not a SymInt");
    return val.type().scalar;
  };
  const auto tensor_in = [&]() {
    const auto self = input("self");
    auto [k, v] = self.one_of();
    if (k != "as_tensor") self.fail("expected a tensor, got '" + k + "'");
    const auto t = scope(v, v["name"].str());
    if (t.kind() != value_kind::tensor) v.fail("'" + t.name() + "' is not a tensor");
    return t;
  };
  const auto dim_of = [&](const value& t) {
    const auto dj = input("dim");
    auto d = operand(dj);
    const auto r = static_cast<std::int64_t>(t.meta().sizes.size());
    std::int64_t dim = d.is_constant() ? d.hint() : r;
    if (dim < 0) dim += r;
    if (dim < 0 || dim >= r)
      dj.fail("dim " + d.str() + " is out of range for '" + t.name() + "' of rank " + std::to_string(r));
    return static_cast<std::size_t>(dim);
  };
  const auto binary = [&](auto&& f) { return f(operand(input("a")), operand(input("b"))); };
  sym_int result;
  try {
    if (target == "torch.ops.aten.sym_size.int") {
      const auto t = tensor_in();
      result = t.meta().sizes[dim_of(t)];
    } else if (target == "torch.ops.aten.sym_stride.int") {
      const auto t = tensor_in();
      if (t.meta().strides.size() != t.meta().sizes.size()) nj.fail("'" + t.name() + "' has no strides");
      result = t.meta().strides[dim_of(t)];
    } else if (target == "torch.ops.aten.sym_numel.default") {
      result = 1;
      for (const auto& d : tensor_in().meta().sizes) result = result * d;
    } else if (target == "torch.ops.aten.sym_storage_offset.default") {
      result = tensor_in().meta().storage_offset;
    } else if (target == "_operator.add") result = binary([](const sym_int& a, const sym_int& b) { return a + b; });
    else if (target == "_operator.sub") result = binary([](const sym_int& a, const sym_int& b) { return a - b; });
    else if (target == "_operator.mul") result = binary([](const sym_int& a, const sym_int& b) { return a * b; });
    else if (target == "_operator.floordiv") result = binary([](const sym_int& a, const sym_int& b) { return sym::floordiv(a, b); });
    else if (target == "_operator.mod") result = binary([](const sym_int& a, const sym_int& b) { return sym::mod(a, b); });
    else if (target == "torch.sym_max") result = binary([](const sym_int& a, const sym_int& b) { return sym::max(a, b); });
    else if (target == "torch.sym_min") result = binary([](const sym_int& a, const sym_int& b) { return sym::min(a, b); });
    else if (target == "_operator.neg") result = -operand(input("a"));
    else if (target == "_operator.pos") result = operand(input("a"));
    else if (target == "_operator.pow") {
      const auto a = operand(input("a")), b = operand(input("b"));
      if (!b.is_constant() || b.hint() < 0 || b.hint() > 8) input("b").fail("expected an integer exponent in [0, 8]");
      result = 1;
      for (std::int64_t i = 0; i < b.hint(); ++i) result = result * a;
    } else {
      nj["target"].fail("operator '" + target + "' on sizes is not supported by xport (it reads sym_size, sym_stride, "
                        "sym_numel, sym_storage_offset, _operator add/sub/mul/floordiv/mod/neg/pos/pow and "
                        "torch.sym_max/sym_min)");
    }
  } catch (const graph_error& e) {
    nj.fail(e.what());
  }
  scope.syms[out_name] = result;
}

/// Reads the graph; `module_types` gets the (path, type) of every module its nodes' stacks name.
inline graph graph_of(const at_path& gj, const graph_signature& sig, std::vector<std::pair<std::string, std::string>>& module_types) {
  graph g;
  const auto tensor_values = gj["tensor_values"];
  const auto sym_int_values = gj["sym_int_values"];
  (void)tensor_values.object();
  (void)sym_int_values.object();
  const auto sym_bool_values = gj.get("sym_bool_values"), sym_float_values = gj.get("sym_float_values");
  if (sym_bool_values) (void)sym_bool_values->object();
  if (sym_float_values) (void)sym_float_values->object();
  const auto type_of = [&](const at_path& where, const std::string& name) -> value_type {
    if (auto t = tensor_values.get(name)) return value_type::of(tensor_meta_of(*t));
    if (auto s = sym_int_values.get(name)) return value_type::of_sym_int(sym_int_of(*s));
    if (sym_bool_values && sym_bool_values->get(name)) return value_type{value_kind::sym_bool, {}, {}};
    if (sym_float_values && sym_float_values->get(name)) return value_type{value_kind::sym_float, {}, {}};
    where.fail("value '" + name + "' has no entry in tensor_values, sym_int_values, sym_bool_values or sym_float_values");
  };
  value_scope scope;
  const auto nodes = gj["nodes"];
  const auto n_nodes = nodes.size_of_array();
  const auto each_output_name = [&](const at_path& out, auto&& f) {
    auto [k, v] = out.one_of();
    if (k == "as_tensor") f(v, v["name"].str());
    else if (k == "as_tensors")
      for (std::size_t i = 0, n = v.size_of_array(); i < n; ++i) f(v[i], v[i]["name"].str());
    else if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") f(v, v["as_name"].str());
    else if (k != "as_none") out.fail("unsupported node output kind '" + k + "'");
  };
  for (std::size_t i = 0; i < n_nodes; ++i) {
    const auto outs = nodes[i]["outputs"];
    for (std::size_t o = 0, n = outs.size_of_array(); o < n; ++o)
      each_output_name(outs[o], [&](const at_path&, const std::string& name) { scope.later.insert(name); });
  }
  const auto inputs = gj["inputs"];
  if (inputs.size_of_array() != sig.input_specs.size())
    inputs.fail("the graph has " + std::to_string(inputs.size_of_array()) + " inputs but the signature has " +
                std::to_string(sig.input_specs.size()) + " input specs");
  for (std::size_t i = 0, n = inputs.size_of_array(); i < n; ++i) {
    auto [k, v] = inputs[i].one_of();
    const auto& spec = sig.input_specs[i];
    const bool constant = spec.arg.type == argument_spec::kind::constant;
    try {
      if (k == "as_int" || k == "as_float" || k == "as_bool" || k == "as_string" || k == "as_none") {
        // a specialized constant input: named by its spec, which holds the same value; nothing reads it
        if (!constant) inputs[i].fail("a constant graph input needs a constant_input spec, input spec " + std::to_string(i) + " is '" + spec.arg.name + "'");
        const auto value = constant_value_of(inputs[i]);
        const bool same = value == spec.arg.constant ||
                          (value.is_double() && spec.arg.constant.is_double() && std::isnan(value.as_double()) &&
                           std::isnan(spec.arg.constant.as_double()));
        if (!same) inputs[i].fail("the graph input's value differs from constant input '" + spec.arg.name + "'");
        (void)g.add_placeholder(spec.arg.name, value_type{value_kind::none, {}, {}});
        continue;
      }
      std::string name;
      if (k == "as_tensor") name = v["name"].str();
      else if (k == "as_sym_int") name = v["as_name"].str();
      else if (k == "as_custom_obj") inputs[i].fail("graph input '" + v["name"].str() + "' is a custom object (a TorchBind class instance), which xport does not support");
      else inputs[i].fail("a graph input must be a tensor, a SymInt or a constant, got '" + k + "'");
      if (constant) inputs[i].fail("input spec " + std::to_string(i) + " is the constant input '" + spec.arg.name + "' but the graph input is '" + name + "'");
      scope.defined.emplace(name, g.add_placeholder(name, type_of(inputs[i], name)));
    } catch (const graph_error& e) {
      inputs[i].fail(e.what());
    }
  }
  for (std::size_t i = 0; i < n_nodes; ++i) {
    const auto nj = nodes[i];
    const auto target = nj["target"].str();
    if (is_sym_node(target)) {
      read_sym_node(nj, target, scope);  // Note [Symbolic arguments in .pt2]
      continue;
    }
    if (target.rfind("torch.ops.higher_order.", 0) == 0)
      nj["target"].fail("higher-order operator '" + target + "' (torch." + target.substr(23) +
                        ", with its subgraphs as as_graph arguments) is not supported by xport");
    const auto* op = try_find_op(target);
    if (!op)
      nj["target"].fail("operator '" + target + "' is not registered in this LibTorch (" + torch_version() +
                        "): the program needs a LibTorch that has it (or a library that registers it)");
    std::vector<kwarg> kwargs;
    const auto ins = nj["inputs"];
    for (std::size_t a = 0, n = ins.size_of_array(); a < n; ++a)
      kwargs.push_back(kwarg{ins[a]["name"].str(), argument_of(ins[a]["arg"], scope)});
    std::vector<argument> args;
    try {
      args = detail::bind_arguments(*op, {}, std::move(kwargs));
    } catch (const schema_error& e) {
      ins.fail(e.what());
    }
    std::vector<value_type> types;
    std::vector<std::string> names;
    const auto outs = nj["outputs"];
    std::size_t unnamed = 0;
    const auto node_name = nj.get("name") ? nj["name"].str() : std::string();
    for (std::size_t o = 0, n = outs.size_of_array(); o < n; ++o) {
      auto [k, v] = outs[o].one_of();
      if (k == "as_none") {
        types.push_back(value_type{value_kind::none, {}, {}});
        names.push_back((node_name.empty() ? op->packet : node_name) + "_unused_" + std::to_string(unnamed++));
        continue;
      }
      each_output_name(outs[o], [&](const at_path& where, const std::string& name) {
        types.push_back(type_of(where, name));
        names.push_back(name);
      });
    }
    const bool tuple = op->returns_list || op->num_returns() != 1;
    if (!tuple && names.size() != 1) outs.fail(op->qualified + " returns one value, the node lists " + std::to_string(names.size()));
    if (op->returns_list && (outs.size_of_array() != 1 || !outs[0].object().contains("as_tensors")))
      outs.fail(op->qualified + " returns a Tensor[]: expected one as_tensors output");
    if (!op->returns_list && tuple && names.size() != op->num_returns())
      outs.fail(op->qualified + " returns " + std::to_string(op->num_returns()) + " values, the node lists " +
                std::to_string(names.size()));
    node created;
    try {
      created = g.create_call_named(*op, std::move(args), std::move(types),
                                    node_name.empty() ? op->packet : node_name, names);
    } catch (const graph_error& e) {
      nj.fail(e.what());
    }
    for (auto v : created.outputs()) {
      scope.defined.emplace(v.name(), v);
      if (v.name() == created.name() + "_unused_" + std::to_string(v.index())) v.set_unpacked(false);
    }
    const auto meta = nj["metadata"];
    (void)meta.object();
    if (auto st = meta.get("stack_trace")) created.set_source(source_of(st->str()));
    if (auto ms = meta.get("nn_module_stack")) created.set_module_path(module_path_of_stack(ms->str(), &module_types));
  }
  std::vector<argument> results;
  const auto outputs = gj["outputs"];
  for (std::size_t i = 0, n = outputs.size_of_array(); i < n; ++i) results.push_back(argument_of(outputs[i], scope));
  g.set_output(std::move(results));
  return g;
}

struct loaded_json {
  graph g;
  graph_signature sig;
  ir_dialect dialect = ir_dialect::training;
  std::optional<treespec> in_spec, out_spec;
  std::vector<range_constraint> ranges;
  std::vector<std::pair<std::string, std::string>> module_types;
};

/// The root entry of the module call graph gives the call structure: `(args, kwargs)` becomes
/// xport's in_spec (the arguments, named by forward_arg_names, keyword ones last), with constant
/// leaves where the constant inputs are; the entries' FQNs, with the types the nodes' module
/// stacks give, become the module table.
inline void read_call_graph(const at_path& mcg, loaded_json& out,
                            const std::vector<std::pair<std::string, std::string>>& stack_types, bool call_spec) {
  const auto type_of = [&](const std::string& fqn) {
    for (const auto& [path, type] : stack_types)
      if (path == fqn) return type;
    return std::string();
  };
  for (std::size_t i = 0, n = mcg.size_of_array(); i < n; ++i) {
    const auto fqn = mcg[i]["fqn"].str();
    out.module_types.emplace_back(fqn, type_of(fqn));
    if (i != 0 || !fqn.empty() || !call_spec) continue;
    const auto sig = mcg[i].get("signature");
    if (!sig) continue;
    std::vector<std::optional<argument>> in_constants, out_constants;
    for (const auto& s : out.sig.input_specs)
      if (s.kind == input_kind::user_input)
        in_constants.push_back(s.arg.type == argument_spec::kind::constant ? std::optional<argument>(s.arg.constant) : std::nullopt);
    for (const auto& s : out.sig.output_specs)
      if (s.kind == output_kind::user_output || s.kind == output_kind::loss_output)
        out_constants.push_back(s.arg.type == argument_spec::kind::constant ? std::optional<argument>(s.arg.constant) : std::nullopt);
    const auto in_j = (*sig)["in_spec"], out_j = (*sig)["out_spec"];
    auto call = pytree_of_dumps(in_j);
    if (call.type != treespec::kind::tuple || call.children.size() != 2 || call.children[0].type != treespec::kind::tuple ||
        call.children[1].type != treespec::kind::dict)
      in_j.fail("expected the in_spec of a call, a tuple of (args tuple, kwargs dict)");
    treespec in = std::move(call.children[0]);
    auto& kwargs = call.children[1];
    in.num_kwargs = kwargs.children.size();
    for (std::size_t k = 0; k < kwargs.children.size(); ++k) in.children.push_back(std::move(kwargs.children[k]));
    std::size_t leaf = 0;
    with_constants(in, in_constants, leaf, in_j);
    if (leaf != in_constants.size())
      in_j.fail("the in_spec has " + std::to_string(leaf) + " leaves but the program has " +
                std::to_string(in_constants.size()) + " user inputs");
    if (const auto names = sig->get("forward_arg_names"); names && names->size_of_array() == in.children.size()) {
      for (std::size_t k = 0, m = names->size_of_array(); k < m; ++k) in.keys.push_back((*names)[k].str());
    } else {  // torch's own names for unnamed arguments
      for (std::size_t k = 0; k + in.num_kwargs < in.children.size(); ++k) in.keys.push_back("arg_" + std::to_string(k));
      for (const auto& key : kwargs.keys) in.keys.push_back(key);
    }
    auto result = pytree_of_dumps(out_j);
    leaf = 0;
    with_constants(result, out_constants, leaf, out_j);
    if (leaf != out_constants.size())
      out_j.fail("the out_spec has " + std::to_string(leaf) + " leaves but the program has " +
                 std::to_string(out_constants.size()) + " user outputs");
    out.in_spec = std::move(in);
    out.out_spec = std::move(result);
  }
}

inline loaded_json program_of(const json& doc, const std::string& record) {
  const at_path root{doc, "", record};
  const auto ver = root["schema_version"];
  const auto major = ver["major"].integer();
  if (major != schema_version_major)
    ver.fail("schema version " + std::to_string(major) + "." + std::to_string(ver["minor"].integer()) +
             " is not readable by this xport, which reads major version " + std::to_string(schema_version_major) +
             " (written by torch 2.8 and later); re-export the program with a matching torch");
  (void)ver["minor"].integer();
  loaded_json out;
  if (auto v = root.get("verifiers")) {
    for (std::size_t i = 0, n = v->size_of_array(); i < n; ++i) {
      const auto d = (*v)[i].str();
      if (d == "ATEN") out.dialect = ir_dialect::aten;
      else if (d == "TRAINING") out.dialect = ir_dialect::training;
      else (*v)[i].fail("unknown dialect '" + d + "'");
    }
  }
  const auto opsets = root["opset_version"];
  (void)opsets.object();
  // symbols and their ranges first: the graph's sizes refer to them
  symbol_table symbols;
  const auto ranges = root["range_constraints"];
  for (const auto& item : ranges.object().items()) {
    const std::string name = item.key();
    const auto r = ranges[name];
    // ranges of derived expressions (`2*s0`) follow from their symbols': only symbols are kept
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos)
      continue;
    auto& e = symbols.find_or_add(name);
    const auto lo = r.get("min_val"), hi = r.get("max_val");
    e.range.lo = lo ? lo->integer() : 0;
    e.range.hi = hi ? hi->integer() : int_oo;
    if (e.range.lo > e.range.hi) r.fail("min_val " + std::to_string(e.range.lo) + " > max_val " + std::to_string(e.range.hi));
  }
  struct scope_guard {
    symbol_table* prev;
    ~scope_guard() { active_symbols = prev; }
  } restore{active_symbols};
  active_symbols = &symbols;
  const auto gm = root["graph_module"];
  const auto sig = gm["signature"];
  const auto ins = sig["input_specs"], outs = sig["output_specs"];
  for (std::size_t i = 0, n = ins.size_of_array(); i < n; ++i) out.sig.input_specs.push_back(input_spec_of(ins[i]));
  for (std::size_t i = 0, n = outs.size_of_array(); i < n; ++i) out.sig.output_specs.push_back(output_spec_of(outs[i]));
  std::vector<std::pair<std::string, std::string>> stack_types;
  out.g = graph_of(gm["graph"], out.sig, stack_types);
  for (auto& e : symbols.entries) {
    if (!e.symbol) e.symbol = sym::symbol(e.name, std::min(std::max<std::int64_t>(e.range.lo, 2), e.range.hi), e.range);
    out.ranges.push_back({*e.symbol, e.range.lo, e.range.hi == int_oo ? std::nullopt : std::optional<std::int64_t>(e.range.hi), ""});
  }
  // the JSON object's keys come sorted; torch lists the ranges as its symbols were made, in the
  // order of the inputs' sizes: so does xport
  std::vector<std::string> made;
  for (auto ph : out.g.placeholders())
    if (ph.out().kind() == value_kind::tensor)
      for (const auto& d : ph.out().meta().sizes)
        for (auto& s : sym::free_symbols(d))
          if (std::find(made.begin(), made.end(), s) == made.end()) made.push_back(std::move(s));
  const auto rank = [&](const range_constraint& r) {
    return static_cast<std::size_t>(std::find(made.begin(), made.end(), r.symbol.str()) - made.begin());
  };
  std::stable_sort(out.ranges.begin(), out.ranges.end(),
                   [&](const range_constraint& a, const range_constraint& b) { return rank(a) < rank(b); });
  const auto md = gm.get("metadata");
  // archives of xport before schema 8.20 keep the exact structure in the metadata (xport.in_spec;
  // their constants have no placeholders, so the call graph's leaves do not match them)
  const bool legacy = md && md->object().contains("xport.in_spec");
  read_call_graph(gm["module_call_graph"], out, stack_types, !legacy);
  if (md) {
    (void)md->object();
    const auto spec = [&](const char* key) -> std::optional<treespec> {
      auto s = md->get(key);
      if (!s) return std::nullopt;
      const auto text = s->str();
      const auto j = parse(text, record + " (" + std::string(key) + ")");
      return treespec_of(at_path{j, std::string("graph_module.metadata.") + key, record});
    };
    if (legacy) {
      out.in_spec = spec("xport.in_spec");
      out.out_spec = spec("xport.out_spec");
    }
    if (auto names = md->get("xport.dim_names")) {
      const auto j = parse(names->str(), record + " (xport.dim_names)");
      const at_path nj{j, "graph_module.metadata.xport.dim_names", record};
      for (auto& r : out.ranges)
        if (auto n = nj.get(r.symbol.str())) r.name = n->str();
    }
  }
  return out;
}

// ---- weights ---------------------------------------------------------------------------------

/// Bytes a strided tensor spans in its storage (from element 0), or nullopt on overflow.
inline std::optional<std::uint64_t> span_bytes(const tensor_meta& m) {
  const std::uint64_t item = c10::elementSize(m.dtype);
  std::uint64_t last = static_cast<std::uint64_t>(m.storage_offset.hint());
  for (std::size_t i = 0; i < m.sizes.size(); ++i) {
    const auto n = static_cast<std::uint64_t>(m.sizes[i].hint());
    if (n == 0) return 0;
    std::uint64_t step = 0;
    if (__builtin_mul_overflow(n - 1, static_cast<std::uint64_t>(m.strides[i].hint()), &step) ||
        __builtin_add_overflow(last, step, &last))
      return std::nullopt;
  }
  std::uint64_t bytes = 0;
  if (__builtin_add_overflow(last, std::uint64_t{1}, &last) || __builtin_mul_overflow(last, item, &bytes)) return std::nullopt;
  return bytes;
}

struct payload_writer {
  caffe2::serialize::PyTorchStreamWriter& w;
  std::string dir, prefix;
  std::map<const void*, std::string> written;  ///< storage -> record
  std::size_t next = 0;

  json add(const std::string& fqn, const at::Tensor& t, bool is_param) {
    if (t.layout() != c10::kStrided)
      throw error("xport.save.layout", "tensor '" + fqn + "' is not strided; only strided tensors can be saved");
    at::Tensor cpu = t.device().is_cpu() ? t : t.cpu();
    const auto& storage = cpu.storage();
    const void* key = storage.unsafeGetStorageImpl();
    auto it = written.find(key);
    if (it == written.end()) {
      const std::string name = prefix + std::to_string(next++);
      w.writeRecord(dir + name, storage.data(), storage.nbytes());
      it = written.emplace(key, name).first;
    }
    auto meta = tensor_meta::of(cpu);
    meta.device = t.device();
    meta.requires_grad = t.requires_grad();
    return {{"path_name", it->second}, {"is_param", is_param}, {"use_pickle", false}, {"tensor_meta", tensor_meta_json(meta)}};
  }
};

/// Reads `{"config": {fqn: PayloadMeta}}` and the records it names into `out`.
inline void read_payloads(const zip_index& zip, const std::string& dir, const std::string& config_name,
                          tensor_dict& out) {
  const std::string record = dir + config_name;
  if (!zip.find(record)) return;
  const auto doc = parse(zip.read(record), record);
  const at_path root{doc, "", record};
  const auto& config = root["config"].object();
  std::map<std::string, at::Tensor> storages;  // record -> flat byte tensor
  for (auto it = config.begin(); it != config.end(); ++it) {
    const at_path entry{it.value(), "config." + it.key(), record};
    const std::string fqn = it.key();
    if (entry["use_pickle"].boolean()) entry.fail("pickled payloads are not read by xport (custom objects, tensor subclasses)");
    const auto path = entry["path_name"].str();
    const auto meta_j = entry.get("tensor_meta");
    if (!meta_j) entry.fail("missing tensor_meta");
    const auto meta = tensor_meta_of(*meta_j);
    if (meta.layout != c10::kStrided) entry.fail("only strided tensors are supported");
    if (meta.strides.size() != meta.sizes.size()) entry.fail("needs one stride per size");
    const std::string rec = dir + path;
    const auto* r = zip.find(rec);
    if (!r) entry["path_name"].fail("names record '" + rec + "', which is missing from the archive");
    const auto need = span_bytes(meta);
    if (!need) entry.fail("sizes and strides overflow");
    if (*need > r->size)
      entry.fail(std::string(c10::toString(meta.dtype)) + " tensor of " + meta.annotation() + " needs " +
                 std::to_string(*need) + " bytes but record '" + rec + "' holds " + std::to_string(r->size));
    if (meta.requires_grad && !c10::isFloatingType(meta.dtype) && !c10::isComplexType(meta.dtype))
      entry["tensor_meta"]["requires_grad"].fail(std::string("a ") + c10::toString(meta.dtype) +
                                                 " tensor cannot require grad (only floating-point and complex tensors can)");
    // Every LibTorch call on the way (allocation, set_, requires_grad_) is checked above; one
    // that still refuses the entry is reported at it, never as a raw c10::Error.
    at::Tensor t;
    try {
      auto st = storages.find(rec);
      if (st == storages.end()) {
        at::Tensor bytes = at::empty({static_cast<std::int64_t>(r->size)}, at::TensorOptions().dtype(c10::kByte));
        zip.read_exact(r->data_offset, bytes.data_ptr(), static_cast<std::size_t>(r->size), rec);
        st = storages.emplace(rec, std::move(bytes)).first;
      }
      t = at::empty({0}, at::TensorOptions().dtype(meta.dtype));
      t.set_(st->second.storage(), meta.storage_offset.hint(), meta.size_hints(), meta.stride_hints());
      if (meta.requires_grad) t.requires_grad_(true);
    } catch (const c10::Error& e) {
      entry.fail("LibTorch cannot make this " + std::string(c10::toString(meta.dtype)) + " tensor of " +
                 meta.annotation() + " from record '" + rec + "': " + first_line(e.what_without_backtrace()));
    }
    (void)entry["is_param"].boolean();  // required by the schema; the signature says what is a parameter
    out.set(fqn, std::move(t));
  }
}

}  // namespace detail::serde

// ---- the API ---------------------------------------------------------------------------------

/// Writes `p` as a .pt2 archive through `writer(bytes, n)` (returns bytes written).
inline void save(const exported_program& p, const std::function<std::size_t(const void*, std::size_t)>& writer,
                 const save_options& options = {}) {
  namespace s = detail::serde;
  c10::NoGradGuard no_grad;
  const std::string doc = s::program_json(p).dump();  // before anything is written: errors leave no file
  caffe2::serialize::PyTorchStreamWriter w(writer);
  w.writeRecord("archive_format", s::archive_format.data(), s::archive_format.size());
  w.writeRecord("archive_version", s::archive_version.data(), s::archive_version.size());
  const auto& sig = p.signature();
  std::unordered_set<std::string> params;
  for (const auto& f : sig.parameters()) params.insert(f);
  s::payload_writer weights{w, "data/weights/", "weight_", {}, 0};
  s::json wconfig = s::json::object();
  for (const auto& [fqn, t] : p.state_dict()) wconfig[fqn] = weights.add(fqn, t, params.count(fqn) > 0);
  const std::string wtext = s::json{{"config", std::move(wconfig)}}.dump();
  w.writeRecord("data/weights/" + options.model_name + "_weights_config.json", wtext.data(), wtext.size());
  s::payload_writer constants{w, "data/constants/", "tensor_", {}, 0};
  s::json cconfig = s::json::object();
  for (const auto& [fqn, t] : p.constants()) cconfig[fqn] = constants.add(fqn, t, false);
  const std::string ctext = s::json{{"config", std::move(cconfig)}}.dump();
  w.writeRecord("data/constants/" + options.model_name + "_constants_config.json", ctext.data(), ctext.size());
  w.writeRecord("models/" + options.model_name + ".json", doc.data(), doc.size());
  // always there: torch's loader reads it unconditionally (empty means no example inputs)
  std::vector<char> inputs;
  if (options.example_inputs && p.example_inputs())
    inputs = detail::pickle_bytes(detail::example_inputs_ivalue(*p.example_inputs(), p.in_spec()));
  w.writeRecord("data/sample_inputs/" + options.model_name + ".pt", inputs.data(), inputs.size());
  w.writeEndOfFile();
}

/// Writes `p` to `path` as a .pt2 archive.
inline void save(const exported_program& p, const std::string& path, const save_options& options = {}) {
  // written next to the target and renamed over it at the end: a failed save leaves an existing
  // file as it was
  const std::string tmp = path + ".xport-partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw error("xport.save.open", "cannot open '" + tmp + "' for writing");
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  try {
    save(p, [&](const void* data, std::size_t n) { return std::fwrite(data, 1, n, f); }, options);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw error("xport.save.write", "writing '" + path + "' failed");
  }
}

/// Writes `p` to a stream.
inline void save(const exported_program& p, std::ostream& out, const save_options& options = {}) {
  save(p, [&](const void* data, std::size_t n) {
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    return out ? n : std::size_t{0};
  }, options);
}

/// The archive as bytes.
inline std::string save_to_string(const exported_program& p, const save_options& options = {}) {
  std::string out;
  save(p, [&](const void* data, std::size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  }, options);
  return out;
}

/// Reads a program from an archive behind `in`; throws load_error naming the record and the
/// problem for any file that is not a valid archive of a program this LibTorch can run.
namespace detail::serde {
inline exported_program load_archive(caffe2::serialize::ReadAdapterInterface& raw,
                                     std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in,
                                     const load_options& options, std::string& stage);
}  // namespace detail::serde

inline exported_program load(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in, const load_options& options = {}) {
  // Every exception that leaves load() is a load_error: the readers check what they read, and
  // anything LibTorch still refuses (building the graph, its tensors, the sample inputs) is
  // reported with the part of the archive being read.
  std::string stage = "the archive";
  auto& raw = *in;
  try {
    return detail::serde::load_archive(raw, std::move(in), options, stage);
  } catch (const load_error&) {
    throw;
  } catch (const error& e) {
    throw load_error("xport.load.refused", stage + ": " + e.what());
  } catch (const c10::Error& e) {
    throw load_error("xport.load.refused", stage + ": LibTorch refused it: " + detail::first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw load_error("xport.load.refused", stage + ": " + detail::first_line(e.what()));
  }
}

inline exported_program detail::serde::load_archive(caffe2::serialize::ReadAdapterInterface& raw,
                                                    std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in,
                                                    const load_options& options, std::string& stage) {
  namespace s = detail::serde;
  const detail::zip_index zip(raw);
  // LibTorch's reader checks the archive as a whole (and CRCs of what it reads)
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(in);
  } catch (const c10::Error& e) {
    throw load_error("xport.load.bad_zip", std::string("not a valid archive: ") + e.what_without_backtrace());
  }
  const auto text = [&](const std::string& name) {
    (void)zip.at(name);
    try {
      auto [ptr, size] = reader->getRecord(name);
      return std::string(static_cast<const char*>(ptr.get()), size);
    } catch (const c10::Error& e) {
      throw load_error("xport.load.bad_record", "record '" + name + "': " + e.what_without_backtrace());
    }
  };
  const auto format = text("archive_format");
  if (format != s::archive_format)
    throw load_error("xport.load.format", "record 'archive_format' says '" + format.substr(0, 64) + "', not 'pt2'");
  const auto version = text("archive_version");
  if (version != s::archive_version)
    throw load_error("xport.load.version", "archive version '" + version.substr(0, 64) +
                                               "' is not the PT2 archive version this xport reads (0)");
  const std::string model = "models/" + options.model_name + ".json";
  if (!zip.find(model)) {
    std::string models;
    for (const auto& [name, r] : zip.records())
      if (name.rfind("models/", 0) == 0) models += (models.empty() ? "" : ", ") + name;
    throw load_error("xport.load.missing_record", "record '" + model + "' is missing" +
                                                      (models.empty() ? std::string(" (the archive has no models/)") : " (the archive has: " + models + ")"));
  }
  stage = "record '" + model + "'";
  const auto doc = s::parse(text(model), model);
  auto parts = s::program_of(doc, model);
  tensor_dict state, constants;
  stage = "data/weights/" + options.model_name + "_weights_config.json";
  s::read_payloads(zip, "data/weights/", options.model_name + "_weights_config.json", state);
  stage = "data/constants/" + options.model_name + "_constants_config.json";
  s::read_payloads(zip, "data/constants/", options.model_name + "_constants_config.json", constants);
  stage = "record '" + model + "'";
  // every lifted input must have its tensor
  for (const auto& spec : parts.sig.input_specs) {
    if (spec.kind == input_kind::user_input || spec.kind == input_kind::token) continue;
    const bool in_state = spec.kind == input_kind::parameter || (spec.kind == input_kind::buffer && spec.persistent.value_or(true));
    if (!spec.target) continue;
    if (!(in_state ? state : constants).contains(*spec.target))
      throw load_error("xport.load.missing_tensor", std::string(in_state ? "data/weights/" : "data/constants/") +
                                                        options.model_name + (in_state ? "_weights_config.json" : "_constants_config.json") +
                                                        ": no tensor for " + std::string(to_string(spec.kind)) + " '" +
                                                        *spec.target + "' (input '" + spec.arg.name + "')");
  }
  exported_program p(std::move(parts.g), std::move(parts.sig), std::move(state), std::move(constants),
                     std::move(parts.ranges), parts.dialect);
  p.set_call_spec(std::move(parts.in_spec), std::move(parts.out_spec));
  p.set_module_types(std::move(parts.module_types));
  if (options.example_inputs) {
    const std::string rec = "data/sample_inputs/" + options.model_name + ".pt";
    stage = "record '" + rec + "'";
    if (const auto* r = zip.find(rec); r && r->size > 0) {
      auto inputs = detail::unpickle_inputs(text(rec), rec, p.in_spec());
      std::size_t want = 0;
      for (const auto& s : p.signature().input_specs)
        want += s.kind == input_kind::user_input && s.arg.type != argument_spec::kind::constant;
      if (inputs.size() != want)
        throw load_error("xport.load.sample_inputs", rec + ": holds " + std::to_string(inputs.size()) +
                                                         " tensor(s), the program takes " + std::to_string(want));
      p.set_example_inputs(std::move(inputs));
    }
  }
  stage = "record '" + model + "'";
  if (options.verify) {
    try {
      verify(p);
    } catch (const verify_error& e) {
      throw load_error("xport.load.invalid_program", model + ": the program does not verify: " + e.what());
    }
  }
  return p;
}

/// Reads a program from a .pt2 file.
inline exported_program load(const std::string& path, const load_options& options = {}) {
  std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in;
  try {
    in = std::make_shared<caffe2::serialize::FileAdapter>(path);
  } catch (const c10::Error&) {
    throw load_error("xport.load.open", "cannot open '" + path + "' for reading");
  }
  return load(std::move(in), options);
}

/// Reads a program from bytes in memory (copied into the program's tensors; `data` may go).
inline exported_program load_from_memory(const void* data, std::size_t size, const load_options& options = {}) {
  return load(std::make_shared<caffe2::serialize::MemoryReadAdapter>(data, static_cast<off_t>(size)), options);
}

/// Reads a program from a stream (read whole).
inline exported_program load(std::istream& in, const load_options& options = {}) {
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return load_from_memory(bytes.data(), bytes.size(), options);
}

XPORT_END_NAMESPACE
