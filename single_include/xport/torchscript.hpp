// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
#pragma once

#include <xport/xport.hpp>
// xport/torchscript.hpp: TorchScript modules (`.pt` files torch.jit.script / torch.jit.trace
// saved) to exported programs, without Python; an opt-in entry beside the umbrella header (it
// parses LibTorch's JIT headers):
//
//   auto p = xport::from_torchscript("model.pt", {x});                 // forward, one program
//   auto q = xport::from_torchscript(jit_module, {x}, {.method = "encode", .dynamic_shapes = ...});
//   auto pkg = xport::from_torchscript("model.pt", {{"forward", {{x}}}, {"encode", {{x}}}});
//   xport::save(pkg, "model.pt2");                                      // <xport/package.hpp>
//
// The route is capture (Note [TorchScript by capture]): the module's method runs in LibTorch's
// TorchScript interpreter under export's non-strict capture, which sees every ATen call the
// interpreter makes through the dispatcher. State is lifted under the module's fully qualified
// names, as torch's converter (TS2EPConverter) names it; loops run, so a loop is unrolled as far
// as the example's sizes take it, and sizes the method reads (`x.size(0)`) stay symbolic where a
// Dim makes them so. A branch or loop on the contents of a tensor (`if bool(x.sum() > 0)`) is
// never specialized: it is a typed graph_break that names the TorchScript line.

#include <atomic>       // std::atomic
#include <functional>   // std::function
#include <map>          // std::map
#include <string>       // std::string
#include <tuple>        // std::tuple
#include <utility>      // std::index_sequence
#include <vector>       // std::vector

#include <caffe2/serialize/file_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

// #include <xport/xport.hpp>
#include <xport/package.hpp>

XPORT_BEGIN_NAMESPACE

struct torchscript_options {
  /// The method to convert: `forward`, or one `@torch.jit.export` made.
  std::string method = "forward";
  /// The dims that vary, by the method's own argument names (`{{"x", {{0, batch}}}}`).
  xport::dynamic_shapes dynamic_shapes = {};
};

/// One method of a TorchScript module to convert into a package: example inputs (tensors, in
/// the method's order) and the dims that vary, by argument name.
struct torchscript_method {
  std::vector<at::Tensor> example_inputs;
  xport::dynamic_shapes dynamic_shapes = {};
};

namespace detail {

// Note [TorchScript by capture]
// A TorchScript method is a graph LibTorch's interpreter runs: every aten:: op it calls goes
// through the dispatcher, where export's capture records it, and `prim::GetAttr` hands the op
// the module's own parameter and buffer tensors, which the capture knows by identity (lifted
// beforehand under their fully qualified names). So the method is exported as C++ code is, with
// no translation of the TorchScript graph: loops run (unrolled), `x.size(0)` is a SymInt where
// the dim is dynamic, and reading a tensor's contents (`bool(t)`, `int(t)`, `t.item()`) is the
// capture's graph_break. The interpreter wraps any exception thrown inside it in its own error
// with the TorchScript traceback; torchscript_error turns that back into xport's type and id,
// keeping the traceback (it names the line). The graph optimizer and the profiling executor are
// off while capturing (both restored after): their specializations would see meta tensors.

/// An item of a named list as export_program reads it (`key()`, `value()`).
template <class V>
struct named_item {
  std::string k;
  V v;
  [[nodiscard]] const std::string& key() const noexcept { return k; }
  [[nodiscard]] const V& value() const noexcept { return v; }
};

/// A submodule's type, as export_program records module types (`value()->name()`).
struct jit_module_type {
  std::string type_name;
  [[nodiscard]] const jit_module_type* operator->() const noexcept { return this; }
  [[nodiscard]] const std::string& name() const noexcept { return type_name; }
};

/// Whether the module was made by torch.jit.trace: a traced graph turns sizes into tensors
/// (`prim::NumToTensor`) and back (`aten::Int`), which the capture reads as tensor data. Every
/// method of the module tree is looked at (the method calls its submodules').
inline bool traced_sizes(const torch::jit::Module& m) {
  const auto visit = [](const auto& self, const torch::jit::Block* b) -> bool {
    for (const auto* n : b->nodes()) {
      if (n->kind() == c10::prim::NumToTensor) return true;
      for (const auto* sub : n->blocks())
        if (self(self, sub)) return true;
    }
    return false;
  };
  for (const auto& sub : m.modules())
    for (const auto& method : sub.get_methods())
      if (visit(visit, method.graph()->block())) return true;
  return false;
}

/// xport's own error back from the TorchScript interpreter's wrapper (Note [TorchScript by
/// capture]), with the TorchScript traceback; any other failure as xport.torchscript.run.
[[noreturn]] inline void torchscript_error(torch::jit::Module& m, const std::string& method, const std::string& what) {
  const auto at = what.find("[xport.");
  std::string traceback = what.substr(0, at == std::string::npos ? what.size() : at);
  for (const std::string tail : {"RuntimeError: \n", "RuntimeError: "})  // the interpreter's label for what follows
    if (traceback.size() >= tail.size() && traceback.compare(traceback.size() - tail.size(), tail.size(), tail) == 0)
      traceback.resize(traceback.size() - tail.size());
  const std::string traced =
      traced_sizes(m)
          ? " This module was made by torch.jit.trace: a traced graph turns sizes into tensors (prim::NumToTensor) and "
            "back (aten::Int), which the capture reads as tensor data; converting traced files is not supported yet: "
            "save the model with torch.jit.script, or export it with torch.export."
          : "";
  if (at != std::string::npos) {
    const auto close = what.find(']', at);
    const std::string id = what.substr(at + 1, close - at - 1), message = what.substr(close + 2);
    const std::string full = message + traced + "\nin TorchScript method '" + method + "':\n" + traceback;
    if (id == "xport.export.graph_break")
      throw graph_break("xport.torchscript.graph_break",
                        "the TorchScript method '" + method + "' branches or loops on the contents of a tensor, which "
                        "conversion by capture does not specialize (the translation of such a prim::If into "
                        "torch.cond is not built): " + full);
    throw export_error(id, full);
  }
  throw export_error("xport.torchscript.run",
                     "the TorchScript method '" + method + "' failed while being captured:" + traced + "\n" + what);
}

/// A TorchScript module seen as the module export_program lifts: parameters and buffers under
/// their fully qualified names, and `forward` calling one of its methods. The method's result
/// comes back flat (its tensors, in order); its structure is kept in `out_spec`.
struct jit_method_view {
  torch::jit::Module& m;
  std::string method;
  std::optional<treespec>* out_spec;

  [[nodiscard]] std::vector<named_item<at::Tensor>> named_parameters(bool) const {
    std::vector<named_item<at::Tensor>> out;
    for (const auto& p : m.named_parameters(true)) out.push_back({p.name, p.value});
    return out;
  }
  [[nodiscard]] std::vector<named_item<at::Tensor>> named_buffers(bool) const {
    std::vector<named_item<at::Tensor>> out;
    for (const auto& b : m.named_buffers(true)) out.push_back({b.name, b.value});
    return out;
  }
  [[nodiscard]] std::vector<named_item<jit_module_type>> named_modules(const std::string&, bool) const {
    std::vector<named_item<jit_module_type>> out;
    for (const auto& s : m.named_modules())
      if (!s.name.empty()) out.push_back({s.name, {type_name_of(s.value)}});
    return out;
  }
  [[nodiscard]] std::string name() const { return type_name_of(m); }

  static std::string type_name_of(const torch::jit::Module& mod) {
    const auto& n = mod.type()->name();
    return n ? n->qualifiedName() : std::string("Module");
  }

  /// The tensors of a method's result, its structure into `spec`; anything but tensors, tuples,
  /// lists and None is refused (a program's outputs are tensors).
  static void flatten(const c10::IValue& v, std::vector<at::Tensor>& out, treespec& spec, const std::string& where) {
    using K = treespec::kind;
    if (v.isTensor()) {
      out.push_back(v.toTensor());
      spec = treespec::leaf();
    } else if (v.isNone()) {
      spec = treespec::of(K::none);
    } else if (v.isTuple() || v.isList()) {
      const auto elems = v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
      spec = treespec::of(v.isTuple() ? K::tuple : K::list);
      for (std::size_t i = 0; i < elems.size(); ++i) {
        spec.children.emplace_back();
        flatten(elems[i], out, spec.children.back(), where + "[" + std::to_string(i) + "]");
      }
    } else {
      throw export_error("xport.torchscript.output", "the TorchScript method returns a " + v.tagKind() + " at " + where +
                                                         ": only tensors, tuples and lists of them, and None can be "
                                                         "outputs of a program; return it as a tensor");
    }
  }

  template <class... A>
  std::vector<at::Tensor> forward(const A&... a) const {
    c10::IValue result;
    try {
      result = m.get_method(method)({c10::IValue(a)...});
    } catch (const error&) {
      throw;
    } catch (const std::exception& e) {  // before the capture takes it for a failure on a data-dependent value
      torchscript_error(m, method, e.what());
    }
    std::vector<at::Tensor> out;
    treespec spec;
    flatten(result, out, spec, "the result");
    *out_spec = std::move(spec);
    return out;
  }
};

/// Exports `method` of `m` for `n` tensor arguments (1 to 8, chosen at run time).
template <std::size_t... I>
exported_program export_jit_method(torch::jit::Module& m, const std::string& method, const std::vector<at::Tensor>& in,
                                   const export_options& opts, std::optional<treespec>& out_spec, std::index_sequence<I...>) {
  jit_method_view view{m, method, &out_spec};
  return export_program(view, std::tuple{in[I]...}, opts);
}

/// The argument names of `method` (its schema, without self), checked against `n` tensors.
inline std::vector<std::string> jit_argument_names(torch::jit::Module& m, const std::string& method, std::size_t n) {
  const auto found = m.find_method(method);
  if (!found) {
    std::vector<std::string> names;
    for (const auto& f : m.get_methods()) names.push_back(f.name());
    throw export_error("xport.torchscript.method",
                       "the TorchScript module has no method '" + method + "'; it has " + serde::quoted_list(names));
  }
  const auto& args = found->function().getSchema().arguments();
  std::vector<std::string> names;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (!args[i].type()->isSubtypeOf(*c10::TensorType::get()))
      throw export_error("xport.torchscript.argument", "argument '" + args[i].name() + "' of TorchScript method '" + method +
                                                           "' has type " + args[i].type()->annotation_str() +
                                                           ": the conversion takes tensor arguments only (make it a "
                                                           "tensor, or a constant of the module)");
    names.push_back(args[i].name());
  }
  if (names.size() != n)
    throw export_error("xport.torchscript.argument", "TorchScript method '" + method + "' takes " + std::to_string(names.size()) +
                                                         " tensor argument(s), " + std::to_string(n) + " example input(s) given");
  if (n == 0 || n > 8)
    throw export_error("xport.torchscript.argument", "TorchScript method '" + method + "' takes " + std::to_string(n) +
                                                         " arguments: the conversion takes 1 to 8 tensors");
  return names;
}

/// Sets the JIT's graph optimizer and profiling executor off for its lifetime.
class jit_plain_executor {
 public:
  jit_plain_executor() : optimizer_(false), profiling_(torch::jit::getProfilingMode().exchange(false)) {}
  ~jit_plain_executor() { torch::jit::getProfilingMode() = profiling_; }
  jit_plain_executor(const jit_plain_executor&) = delete;
  jit_plain_executor& operator=(const jit_plain_executor&) = delete;

 private:
  torch::jit::GraphOptimizerEnabledGuard optimizer_;
  bool profiling_;
};

/// The `extra/<name>` records of a TorchScript file (its `_extra_files`).
inline std::map<std::string, std::string> torchscript_extra_files(const std::string& path) {
  std::map<std::string, std::string> out;
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<caffe2::serialize::FileAdapter>(path));
  for (const auto& name : reader.getAllRecords()) {
    if (name.rfind("extra/", 0) != 0 || name.size() <= 6) continue;
    auto [data, size] = reader.getRecord(name);
    out[name.substr(6)] = std::string(static_cast<const char*>(data.get()), size);
  }
  return out;
}

inline torch::jit::Module load_torchscript(const std::string& path) {
  try {
    return torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    throw load_error("xport.torchscript.load", "cannot read TorchScript file '" + path + "': " +
                                                   first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {  // the JIT's own errors (a class it cannot compile again)
    throw load_error("xport.torchscript.load", "cannot read TorchScript file '" + path + "': " + first_line(e.what()));
  }
}

}  // namespace detail

/// Converts a method of a TorchScript module (`options.method`, forward by default) into an
/// exported program (training IR), state lifted under the module's names; the module is left as
/// it was.
inline exported_program from_torchscript(torch::jit::Module& m, const std::vector<at::Tensor>& example_inputs,
                                         const torchscript_options& options = {}) {
  const auto& method = options.method;
  export_options opts;
  opts.input_names = detail::jit_argument_names(m, method, example_inputs.size());
  opts.dynamic_shapes = options.dynamic_shapes;
  std::optional<treespec> out_spec;
  const detail::jit_plain_executor plain;
  std::optional<exported_program> p;
  try {
    switch (example_inputs.size()) {
#define XPORT_TS_CASE(N) \
  case N: p.emplace(detail::export_jit_method(m, method, example_inputs, opts, out_spec, std::make_index_sequence<N>{})); break;
      XPORT_TS_CASE(1) XPORT_TS_CASE(2) XPORT_TS_CASE(3) XPORT_TS_CASE(4)
      XPORT_TS_CASE(5) XPORT_TS_CASE(6) XPORT_TS_CASE(7) XPORT_TS_CASE(8)
#undef XPORT_TS_CASE
      default: break;  // (jit_argument_names took 1 to 8)
    }
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    detail::torchscript_error(m, method, e.what());
  }
  eliminate_dead_code(p->graph_mut());  // the interpreter's size queries, which the capture bound to symbols
  p->set_call_spec(p->in_spec(), out_spec);
  return std::move(*p);
}

/// Reads a TorchScript file (torch.jit.save) and converts one method (see above).
inline exported_program from_torchscript(const std::string& path, const std::vector<at::Tensor>& example_inputs,
                                         const torchscript_options& options = {}) {
  auto m = detail::load_torchscript(path);
  return from_torchscript(m, example_inputs, options);
}

/// Reads a TorchScript file and converts each named method into one package, with the file's
/// extra files (`_extra_files`): the programs hold the module's state together, so
/// save(pkg, path) writes it once and load_package shares it again.
inline package from_torchscript(const std::string& path, const std::map<std::string, torchscript_method>& methods) {
  auto m = detail::load_torchscript(path);
  package out;
  for (const auto& [name, spec] : methods)
    out.programs.emplace(name, from_torchscript(m, spec.example_inputs, {.method = name, .dynamic_shapes = spec.dynamic_shapes}));
  out.extra_files = detail::torchscript_extra_files(path);
  return out;
}

XPORT_END_NAMESPACE
