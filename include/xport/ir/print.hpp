// xport/ir/print.hpp: programs as torch.export prints them, and graphs as Graphviz DOT.
// print_style::torch_export is `print(ep)` of current torch (torch.fx's verbose codegen:
// annotated forward, `;  x = None` last-use lists, `# File: ... in forward, code: ...`
// summaries, the compact `# inputs` / `# outputs` signature); print_style::seed is the layout of
// the seed document (`# code: ...` comments, the pretty-printed ExportGraphSignature repr).
// Both are byte-exact contracts tested against golden files.
#pragma once

#include <cstddef>        // std::size_t
#include <ostream>        // std::ostream
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <unordered_set>  // std::unordered_set
#include <vector>         // std::vector

#include <xport/config.hpp>
#include <xport/detail/python_repr.hpp>
#include <xport/detail/schema.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/signature.hpp>

XPORT_BEGIN_NAMESPACE

enum class print_style : std::uint8_t {
  torch_export,  ///< `print(ep)` of torch >= 2.8
  seed,          ///< the layout of the seed document (torch 2.2-2.4 era signature repr)
};

struct print_options {
  print_style style = print_style::torch_export;
  bool include_stride = false;  ///< FX_GRAPH_SHOW_STRIDE=1
  bool include_device = false;  ///< FX_GRAPH_SHOW_DEVICE=1
};

namespace detail {

/// Python repr of an argument, as torch.fx's `_get_repr` writes it.
inline std::string arg_repr(const argument& a) {
  switch (a.type()) {
    case argument::kind::none: return "None";
    case argument::kind::boolean: return a.as_bool() ? "True" : "False";
    case argument::kind::integer: return std::to_string(a.as_int());
    case argument::kind::floating: return python_float_repr(a.as_double());
    case argument::kind::string: return python_str_repr(a.as_string());
    case argument::kind::dtype: return python_repr(a.as_dtype());
    case argument::kind::device: return python_repr(a.as_device());
    case argument::kind::layout: return python_repr(a.as_layout());
    case argument::kind::memory_format: return python_repr(a.as_memory_format());
    case argument::kind::value: return a.as_value().name();
    case argument::kind::symbolic: return a.as_sym().str();
    case argument::kind::list: {
      std::string s = "[";
      bool first = true;
      for (const auto& e : a.as_list()) {
        if (!first) s += ", ";
        first = false;
        s += arg_repr(e);
      }
      return s + "]";
    }
  }
  return "?";
}

/// `x, 1, alpha = 2`: positional arguments up to the last one that differs from its default,
/// keyword-only arguments that differ from their defaults (as the dispatcher hands them to
/// Python).
inline std::string call_args_repr(const op_info& op, std::span<const argument> args) {
  const auto& params = op.schema().arguments();
  const auto is_default = [&](std::size_t i) {
    return params[i].default_value() && default_argument(params[i]) == args[i];
  };
  std::size_t last_pos = 0;  // one past the last positional argument to print
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!params[i].kwarg_only() && !is_default(i)) last_pos = i + 1;
  std::string s;
  for (std::size_t i = 0; i < last_pos; ++i) {
    if (!s.empty()) s += ", ";
    s += arg_repr(args[i]);
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].kwarg_only() || is_default(i)) continue;
    if (!s.empty()) s += ", ";
    s += params[i].name() + " = " + arg_repr(args[i]);
  }
  return s;
}

inline std::string value_annotation(const value& v, const print_options& o) {
  const auto& t = v.type();
  switch (t.kind) {
    case value_kind::tensor: {
      std::string s = t.tensor.annotation();
      if (o.include_stride) {
        s += '[';
        for (std::size_t i = 0; i < t.tensor.strides.size(); ++i)
          s += (i ? ", " : "") + t.tensor.strides[i].str();
        s += ']';
      }
      if (o.include_device) s += t.tensor.device.str();
      return s;
    }
    case value_kind::sym_int: return "Sym(" + t.scalar.str() + ")";
    default: return {};
  }
}

// One line of torch.fx code: a graph node, or one `getitem` of a multi-output node.
struct fx_line {
  enum class kind : std::uint8_t { placeholder, call, getitem, output } type;
  std::string name;
  std::string annotation;
  std::string rhs;
  std::vector<std::string> inputs;  // names read, in first-appearance order
  std::size_t num_users = 0;
  const source_location* source = nullptr;
};

inline std::vector<fx_line> fx_lines(const graph& g, const print_options& o) {
  std::vector<fx_line> lines;
  std::unordered_map<std::string, std::size_t> users;  // name -> number of fx users
  const auto inputs_of = [](const node& n) {
    std::vector<std::string> names;
    std::unordered_set<std::string> seen;
    for (std::size_t i = 0; i < n.num_inputs(); ++i) {
      const auto& nm = n.input(i).name();
      if (seen.insert(nm).second) names.push_back(nm);
    }
    return names;
  };
  for (auto n : g.nodes()) {
    switch (n.kind()) {
      case node_kind::placeholder:
        lines.push_back({fx_line::kind::placeholder, n.name(), value_annotation(n.output(0), o), {}, {}, 0, nullptr});
        break;
      case node_kind::call_function: {
        const auto* src = n.source().get();
        fx_line l{fx_line::kind::call, n.name(), {}, {}, inputs_of(n), 0, src};
        l.rhs = n.op().target + "(" + call_args_repr(n.op(), n.args()) + ")";
        if (!n.has_tuple_output()) l.annotation = value_annotation(n.output(0), o);
        lines.push_back(std::move(l));
        if (n.has_tuple_output())
          for (std::size_t i = 0; i < n.num_outputs(); ++i) {
            auto v = n.output(i);
            if (v.num_uses() == 0) continue;
            lines.push_back({fx_line::kind::getitem, v.name(), value_annotation(v, o),
                             n.name() + "[" + std::to_string(i) + "]", {n.name()}, 0, src});
          }
        break;
      }
      case node_kind::output: {
        std::string r = "(";
        const auto args = n.args();
        for (std::size_t i = 0; i < args.size(); ++i) {
          if (i) r += ", ";
          r += arg_repr(args[i]);
        }
        r += args.size() == 1 ? ",)" : ")";
        lines.push_back({fx_line::kind::output, "output", {}, "return " + r, inputs_of(n), 0, nullptr});
        break;
      }
    }
  }
  for (const auto& l : lines)
    for (const auto& in : l.inputs) ++users[in];
  for (auto& l : lines) l.num_users = users[l.name];
  return lines;
}

inline std::string summary_of(const source_location* s) {
  if (!s || (s->file.empty() && s->code.empty())) return "No stacktrace found for following nodes";
  if (s->file.empty()) return "File: <unknown>:" + std::to_string(s->line) + " in " +
                              (s->function.empty() ? "forward" : s->function) + ", code: " + s->code;
  return "File: " + s->file + ":" + std::to_string(s->line) + " in " +
         (s->function.empty() ? "forward" : s->function) + ", code: " + s->code;
}

inline std::string indent_lines(std::string_view text, std::string_view pad) {
  // `_addindent`: every line but the first gets `pad`.
  std::string out;
  std::size_t start = 0;
  bool first = true;
  while (true) {
    const auto nl = text.find('\n', start);
    const auto line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (!first) out += pad;
    out += line;
    first = false;
    if (nl == std::string_view::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return out;
}

inline std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

/// `class GraphModule(torch.nn.Module):\n    def forward(...):\n        ...` (torch.fx
/// `print_readable`, verbose).
inline std::string graph_module_code(const graph& g, const print_options& o) {
  const auto lines = fx_lines(g, o);
  const bool seed = o.style == print_style::seed;
  // last uses, scanning backwards (torch.fx `register_last_uses`)
  std::unordered_map<std::string, std::size_t> last_use;
  std::vector<std::vector<std::string>> to_delete(lines.size());
  for (std::size_t i = lines.size(); i-- > 0;)
    for (const auto& in : lines[i].inputs)
      if (last_use.emplace(in, i).second) to_delete[i].push_back(in);

  std::vector<std::string> free_vars{"self"};
  std::string body;
  std::string prev_summary;
  bool have_prev = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    const std::string ann = l.annotation.empty() ? "" : ": \"" + l.annotation + "\"";
    if (l.type == fx_line::kind::placeholder) {
      free_vars.push_back(l.name + ann);
      continue;
    }
    if (l.type != fx_line::kind::output) {
      if (seed) {
        const std::string code = l.source ? l.source->code : std::string();
        if (!code.empty() && (!have_prev || code != prev_summary)) {
          body += "\n# code: " + code + "\n";
          prev_summary = code;
          have_prev = true;
        }
      } else {
        const std::string summary = "\n# " + summary_of(l.source) + "\n";
        if (!have_prev || summary != prev_summary) {
          body += summary;
          prev_summary = summary;
          have_prev = true;
        }
      }
    }
    if (l.type == fx_line::kind::output) {
      body += l.rhs + "\n";
      continue;
    }
    body += l.name + ann + " = " + l.rhs;
    auto dels = to_delete[i];
    if (l.num_users == 0) dels.push_back(l.name);
    if (!seed && !dels.empty()) {
      body += ";  ";
      for (const auto& d : dels) body += d + " = ";
      body += "None";
    }
    body += "\n";
  }
  // lstrip("\n"), then indent every line by 4
  std::size_t k = 0;
  while (k < body.size() && body[k] == '\n') ++k;
  std::string code = "    " + replace_all(body.substr(k), "\n", "\n    ");
  std::string params;
  for (std::size_t i = 0; i < free_vars.size(); ++i) params += (i ? ", " : "") + free_vars[i];
  std::string module = "class GraphModule(torch.nn.Module):\ndef forward(" + params + "):\n" + code;
  return indent_lines(module, "    ");
}

inline std::string spec_arg_repr(const argument_spec& a) {
  switch (a.type) {
    case argument_spec::kind::tensor: return "TensorArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_int: return "SymIntArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_float: return "SymFloatArgument(name='" + a.name + "')";
    case argument_spec::kind::sym_bool: return "SymBoolArgument(name='" + a.name + "')";
    case argument_spec::kind::constant:
      return "ConstantArgument(name='" + a.name + "', value=" + arg_repr(a.constant) + ")";
    case argument_spec::kind::custom_obj:
      return "CustomObjArgument(name='" + a.name + "', class_fqn='" + a.class_fqn + "', fake_val=None)";
    case argument_spec::kind::token: return "TokenArgument(name='" + a.name + "')";
  }
  return "?";
}

inline std::string opt_str_repr(const std::optional<std::string>& s) {
  return s ? python_str_repr(*s) : "None";
}

/// The seed document's pretty-printed `ExportGraphSignature(...)`, indented by `pad`.
inline std::string seed_signature(const graph_signature& sig, const std::string& pad) {
  std::string s = pad + "ExportGraphSignature(\n" + pad + "    input_specs=[";
  const auto spec_block = [&](const std::vector<std::string>& fields, bool last) {
    std::string b = "\n" + pad + "        " + fields[0] + "(\n";
    for (std::size_t i = 1; i < fields.size(); ++i)
      b += pad + "            " + fields[i] + (i + 1 < fields.size() ? ",\n" : "\n");
    b += pad + "        )" + (last ? "" : ",");
    return b;
  };
  for (std::size_t i = 0; i < sig.input_specs.size(); ++i) {
    const auto& in = sig.input_specs[i];
    s += spec_block({"InputSpec",
                     "kind=<InputKind." + std::string(to_string(in.kind)) + ": " +
                         std::to_string(static_cast<int>(in.kind)) + ">",
                     "arg=" + spec_arg_repr(in.arg), "target=" + opt_str_repr(in.target),
                     std::string("persistent=") + (in.persistent ? (*in.persistent ? "True" : "False") : "None")},
                    i + 1 == sig.input_specs.size());
  }
  s += (sig.input_specs.empty() ? "" : "\n" + pad + "    ") + "],\n" + pad + "    output_specs=[";
  for (std::size_t i = 0; i < sig.output_specs.size(); ++i) {
    const auto& out = sig.output_specs[i];
    s += spec_block({"OutputSpec",
                     "kind=<OutputKind." + std::string(to_string(out.kind)) + ": " +
                         std::to_string(static_cast<int>(out.kind)) + ">",
                     "arg=" + spec_arg_repr(out.arg), "target=" + opt_str_repr(out.target)},
                    i + 1 == sig.output_specs.size());
  }
  s += (sig.output_specs.empty() ? "" : "\n" + pad + "    ") + "]\n" + pad + ")";
  return s;
}

/// Drops trailing spaces on every line (the seed document's layout has none).
inline std::string rstrip_lines(const std::string& s) {
  std::string out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto nl = s.find('\n', start);
    if (nl == std::string::npos) nl = s.size();
    auto end = nl;
    while (end > start && s[end - 1] == ' ') --end;
    out.append(s, start, end - start);
    if (nl < s.size()) out += '\n';
    start = nl + 1;
  }
  return out;
}

inline std::string range_constraints_repr(const std::vector<range_constraint>& rc) {
  std::string s = "{";
  for (std::size_t i = 0; i < rc.size(); ++i) s += (i ? ", " : "") + rc[i].str();
  return s + "}";
}

}  // namespace detail

/// The graph as torch.fx's `print_readable` writes a GraphModule.
inline std::string to_string(const graph& g, const print_options& o = {}) {
  auto s = detail::graph_module_code(g, o);
  return o.style == print_style::seed ? detail::rstrip_lines(s) : s;
}

/// The program as `print(ep)` writes it (or in the seed document's layout).
inline std::string to_string(const exported_program& p, const print_options& o = {}) {
  const auto gm = detail::graph_module_code(p.graph(), o);
  if (o.style == print_style::seed) {
    return detail::rstrip_lines(
        "ExportedProgram:\n    " + detail::replace_all(gm, "\n", "\n    ") + "\n    Graph signature:\n" +
        detail::seed_signature(p.signature(), "        ") + "\n    Range constraints: " +
        detail::range_constraints_repr(p.range_constraints()) + "\n");
  }
  return "ExportedProgram:\n    " + detail::replace_all(gm, "\n", "\n    ") + "\nGraph signature: " +
         detail::replace_all(p.signature().str(), "\n", "\n    ") + "\nRange constraints: " +
         detail::range_constraints_repr(p.range_constraints()) + "\n";
}

inline std::ostream& operator<<(std::ostream& os, const exported_program& p) { return os << to_string(p); }
inline std::ostream& operator<<(std::ostream& os, const graph& g) { return os << to_string(g); }

/// The graph in Graphviz DOT: one box per node labelled with its name, op and annotated type,
/// edges from producer to user (labelled with the output index of multi-output nodes).
inline std::string to_dot(const graph& g, std::string_view name = "GraphModule") {
  const auto q = [](const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o + "\"";
  };
  print_options o;
  std::string s = "digraph " + q(std::string(name)) + " {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (auto n : g.nodes()) {
    std::string label = n.name() + "\\n";
    std::string shape;
    if (n.is_placeholder()) {
      label += "placeholder\\n" + detail::value_annotation(n.output(0), o);
      shape = ", shape=ellipse";
    } else if (n.is_output()) {
      label = "output";
      shape = ", shape=ellipse";
    } else {
      label += n.op().target.substr(10);  // drop "torch.ops."
      for (auto v : n.outputs()) {
        const auto a = detail::value_annotation(v, o);
        if (!a.empty()) label += "\\n" + (n.has_tuple_output() ? v.name() + ": " : std::string()) + a;
      }
    }
    s += "  " + q(n.name()) + " [label=\"" + detail::replace_all(label, "\"", "\\\"") + "\"" + shape + "];\n";
  }
  for (auto n : g.nodes())
    for (std::size_t i = 0; i < n.num_inputs(); ++i) {
      auto v = n.input(i);
      auto p = v.producer();
      s += "  " + q(p.name()) + " -> " + q(n.name());
      if (p.has_tuple_output()) s += " [label=\"[" + std::to_string(v.index()) + "]\"]";
      s += ";\n";
    }
  return s + "}\n";
}

XPORT_END_NAMESPACE
