// xport/torchscript.hpp: TorchScript modules (`.pt` files torch.jit.script / torch.jit.trace
// saved) to exported programs, without Python; an opt-in entry beside the umbrella header (it
// parses LibTorch's JIT headers):
//
//   auto p = xport::from_torchscript("model.pt", {x});                 // forward, one program
//   auto q = xport::from_torchscript(jit_module, {x}, {.method = "encode", .dynamic_shapes = ...});
//   auto pkg = xport::from_torchscript("model.pt", {{"forward", {{x}}}, {"encode", {{x}}}});
//   xport::save(pkg, "model.pt2");                                      // <xport/package.hpp>
//
// Two routes (torchscript_options::route). Translation, the default (Note [TorchScript by
// translation]): xport walks the method's TorchScript graph under export's non-strict capture,
// each operator call made as the interpreter makes it, `if bool(t):` a torch.cond and
// `while bool(t):` a torch.while_loop. Capture (Note [TorchScript by capture]): LibTorch's
// TorchScript interpreter runs the method under the capture, which sees every ATen call it
// makes through the dispatcher. Either way state is lifted under the module's fully qualified
// names, as torch's converter (TS2EPConverter) names it; loops with a trip count run, unrolled
// as far as the example's sizes take them, and sizes the method reads (`x.size(0)`) stay
// symbolic where a Dim makes them so. A branch or loop on the contents of a tensor is never
// specialized: translated where torch.cond / torch.while_loop can hold it, a typed graph_break
// naming the TorchScript line where not (and always on the capture route).
#pragma once

#include <algorithm>    // std::sort
#include <atomic>       // std::atomic
#include <functional>   // std::function
#include <limits>       // std::numeric_limits
#include <map>          // std::map
#include <string>       // std::string
#include <tuple>        // std::tuple
#include <unordered_map>  // std::unordered_map
#include <utility>      // std::index_sequence
#include <vector>       // std::vector

#include <caffe2/serialize/file_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <xport/xport.hpp>
#include <xport/package.hpp>

XPORT_BEGIN_NAMESPACE

/// How a TorchScript method becomes a program (Note [TorchScript by translation]).
enum class torchscript_route {
  /// xport walks the method's TorchScript graph: every operator call is captured as the
  /// interpreter would make it, `prim::If` on the contents of a tensor becomes torch.cond, loops
  /// with a known trip count are unrolled. The default.
  translate,
  /// LibTorch's TorchScript interpreter runs the method under export's capture (Note
  /// [TorchScript by capture]): the same program where there is no branch on data, and a typed
  /// graph_break where there is one.
  capture,
};

struct torchscript_options {
  /// The method to convert: `forward`, or one `@torch.jit.export` made.
  std::string method = "forward";
  /// The dims that vary, by the method's own argument names (`{{"x", {{0, batch}}}}`).
  xport::dynamic_shapes dynamic_shapes = {};
  /// Translation of the TorchScript graph (control flow on data kept), or capture of its run.
  torchscript_route route = torchscript_route::translate;
};

/// One method of a TorchScript module to convert into a package: example inputs (tensors, in
/// the method's order) and the dims that vary, by argument name.
struct torchscript_method {
  std::vector<at::Tensor> example_inputs;
  xport::dynamic_shapes dynamic_shapes = {};
  torchscript_route route = torchscript_route::translate;
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

/// What a failure on tensor data means in a file torch.jit.trace wrote; empty for other files.
inline std::string traced_hint(const torch::jit::Module& m) {
  return traced_sizes(m)
             ? " This module was made by torch.jit.trace: a traced graph turns sizes into tensors (prim::NumToTensor) and "
               "back (aten::Int), which the capture reads as tensor data: convert it with torchscript_route::translate "
               "(the default), which keeps such sizes as ints."
             : "";
}

/// xport's own error back from the TorchScript interpreter's wrapper (Note [TorchScript by
/// capture]), with the TorchScript traceback; any other failure as xport.torchscript.run.
[[noreturn]] inline void torchscript_error(torch::jit::Module& m, const std::string& method, const std::string& what) {
  const auto at = what.find("[xport.");
  std::string traceback = what.substr(0, at == std::string::npos ? what.size() : at);
  for (const std::string tail : {"RuntimeError: \n", "RuntimeError: "})  // the interpreter's label for what follows
    if (traceback.size() >= tail.size() && traceback.compare(traceback.size() - tail.size(), tail.size(), tail) == 0)
      traceback.resize(traceback.size() - tail.size());
  const std::string traced = traced_hint(m);
  if (at != std::string::npos) {
    const auto close = what.find(']', at);
    const std::string id = what.substr(at + 1, close - at - 1), message = what.substr(close + 2);
    const std::string full = message + traced + "\nin TorchScript method '" + method + "':\n" + traceback;
    if (id == "xport.export.graph_break")
      throw graph_break("xport.torchscript.graph_break",
                        "the TorchScript method '" + method + "' branches or loops on the contents of a tensor, which "
                        "conversion by capture does not specialize (torchscript_route::translate, the default, "
                        "makes such a prim::If a torch.cond): " + full);
    throw export_error(id, full);
  }
  throw export_error("xport.torchscript.run",
                     "the TorchScript method '" + method + "' failed while being captured:" + traced + "\n" + what);
}

// Note [TorchScript by translation]
// The method's graph, with every method it calls inlined (torch::jit::Inline), is walked node by
// node under export's capture: an operator node runs its JIT operator (the call the interpreter
// would make, through the dispatcher, where the capture records it), `prim::GetAttr` reads the
// module object (the module's own tensors, lifted beforehand under their names), and the nodes
// the interpreter runs as instructions (constants, tuples, lists) are evaluated here. Control
// flow is where the two routes part: `bool(t)` of a tensor is not read at once; a `prim::If`
// on it becomes xport::cond over both blocks (torch.cond: both traced as subgraphs, the values
// they read lifted), and any other use reads it, which the capture refuses as data-dependent.
// A `prim::If` on a constant or a size takes its branch; a `prim::Loop` with a known trip count
// runs (unrolled); a `while bool(t):` loop becomes xport's torch.while_loop, its predicate
// carried beside the loop's tensors (TorchScript tests it at the end of the body, torch's
// cond_fn at the start of the next iteration: the body computes the next predicate, cond_fn
// returns it). A loop that leaves on data from inside its body (a break), counts its
// iterations, or carries a non-tensor is refused, as is `prim::SetAttr`. Sizes torch.jit.trace
// recorded as tensors stay sizes (Note [Traced sizes]). Every failure names the TorchScript line.

// Note [Traced sizes]
// torch.jit.trace records a size it saw as a tensor: `aten::size` gives an int, `prim::NumToTensor`
// makes it a 0-dim tensor, integer arithmetic on it is tensor arithmetic (`aten::mul(t, 2)`), and
// `aten::Int` reads it back where an int is needed (a view's shape). Run as tensors, the capture
// would read tensor data at `aten::Int` (a graph break), or keep the example's size. The
// translation keeps such a value as the int it is (a SymInt where the dim is dynamic, so the
// program keeps the size symbolic, as torch's TS2EPConverter does): NumToTensor records it,
// add / sub / rsub / mul / floor_divide / remainder of such values and ints (or 0-dim integer
// tensor constants: ints the trace saw as tensors) compute on the ints,
// and Int / Float / ScalarImplicit read them. Any other use makes it a 0-dim tensor again,
// aten::scalar_tensor of the size (of its sym_size where the dim is dynamic: what torch's
// converter writes for prim::NumToTensor).

// Note [Custom objects from TorchScript]
// A torch::class_ instance held by the module (`self.stats`) is C++ state its methods change, so
// the translation keeps every use of it a use of the object, never what its methods computed on
// the example: `self.stats.update(x)` (prim::CallMethod on the class) is xport::call_method, one
// call_torchbind node, and an operator taking the object (`torch.ops.ns.op(self.stats, x)`) is
// recorded with it as an argument. The capture lifts the object as a CUSTOM_OBJ input on its
// first use, typed by the method's fake (xport::register_fake_method, torch's
// register_fake_class): the method's C++ code does not run while converting. The input is then
// given the attribute's fully qualified name (target 'stats', placeholder obj_stats), as torch's
// TS2EPConverter names it, and the program holds the module's own object: running the program
// changes it as running the TorchScript module does. The capture route cannot do this (the
// interpreter calls the method's C++ code directly, whose ATen calls the capture would record
// with the object's state fixed in the program), so it refuses such a module.

/// Whether `type` is a custom class (a torch::class_ registered from C++, `__torch__.torch.classes.*`).
inline bool is_custom_class(const c10::Type& type) {
  const auto* c = type.castRaw<c10::ClassType>();
  return c && !c->is_module() && c->name() && c->name()->qualifiedName().rfind("__torch__.torch.classes.", 0) == 0;
}

/// Walks one TorchScript graph under export's capture (Note [TorchScript by translation]).
class ts_translator {
 public:
  /// `module_of`: the module each node of the inlined graph was called in (inlined_graph).
  ts_translator(std::string method, const std::unordered_map<const torch::jit::Node*, std::string>& module_of)
      : method_(std::move(method)), module_of_(module_of) {}

  c10::IValue run(const torch::jit::Graph& g, const std::vector<c10::IValue>& inputs) {
    const auto ins = g.inputs();
    for (std::size_t i = 0; i < ins.size(); ++i) env_[ins[i]] = inputs.at(i);
    walk(g.block());
    return read(g.outputs()[0]);
  }

 private:
  using value_ptr = const torch::jit::Value*;

  void walk(const torch::jit::Block* b) {
    for (const auto* n : b->nodes()) {
      try {
        const auto module = module_of_.find(n);
        const module_scope in_module(module == module_of_.end() ? std::string() : module->second);
        current_ = n;
        step(n);
      } catch (const graph_break& e) {
        if (std::string(e.what()).find("\nat TorchScript ") != std::string::npos) throw;
        throw graph_break("xport.torchscript.graph_break",
                          "the TorchScript method '" + method_ + "' reads the contents of a tensor where no torch.cond "
                          "can keep both outcomes: " + std::string(e.what()).substr(e.id().size() + 3) + where(n));
      } catch (const error&) {
        throw;  // xport's own (a constraint violation, a refusal above): as it is
      } catch (const std::exception& e) {
        throw export_error("xport.torchscript.run", "the TorchScript method '" + method_ + "' failed while being "
                           "translated: " + first_line(e.what()) + where(n));
      }
    }
  }

  /// While a node runs, the calls it records are its module's (Note [Module paths of calls]):
  /// nn_module_stack in the program, by which torch's unflatten nests modules.
  class module_scope {
   public:
    explicit module_scope(std::string path)
        : modules_(!path.empty() && active_capture ? &active_capture->modules() : nullptr) {
      if (modules_) modules_->enter(std::move(path));
    }
    ~module_scope() {
      if (modules_) modules_->leave();
    }
    module_scope(const module_scope&) = delete;
    module_scope& operator=(const module_scope&) = delete;

   private:
    module_call_tracker* modules_;
  };

  /// "at TorchScript line ..." with the line's text, for a message.
  static std::string where(const torch::jit::Node* n) {
    auto range = n->sourceRange();
    for (auto* in : n->inputs())  // a node the compiler made (prim::SetAttr) has none: its operands' line
      if (!range.source() && in->node()->kind() != c10::prim::Param) range = in->node()->sourceRange();
    if (const auto original = range.findSourceRangeThatGenerated()) range = *original;  // a loaded file's source
    std::string text;
    if (const auto src = range.source()) {
      const auto line = src->lineno_for_offset(range.start());
      const auto start = src->offset_for_line(line);
      auto line_text = src->text_str().str().substr(start);
      line_text = line_text.substr(0, line_text.find('\n'));
      const auto file = src->filename();
      text = "\nat TorchScript " + (file ? *file + ", " : std::string()) + "line " +
             std::to_string(line + src->starting_line_no() + 1) + ": " + line_text;
    } else {
      text = "\nat TorchScript node " + std::string(n->kind().toQualString());
    }
    return text;
  }

  [[noreturn]] static void refuse(const torch::jit::Node* n, const std::string& what) {
    throw export_error("xport.torchscript.unsupported", what + where(n));
  }

  /// A value's IValue; a deferred `bool(t)` is read now (the capture refuses it: data).
  c10::IValue read(value_ptr v) {
    if (const auto d = deferred_.find(v); d != deferred_.end()) {
      torch::jit::Stack stack{c10::IValue(d->second.first)};
      d->second.second->getOperation()(stack);  // the capture's graph_break: the reader needs the data
      return stack.back();
    }
    auto it = env_.find(v);
    if (it == env_.end() && sizes_.count(v)) it = env_.emplace(v, size_as_tensor(sizes_.at(v))).first;
    if (it == env_.end())
      throw export_error("xport.torchscript.run", "TorchScript value %" + v->debugName() + " is read before it is set");
    return it->second;
  }

  /// A traced size used as a tensor (Note [Traced sizes]): a 0-dim tensor of it, when it is known.
  at::Tensor size_as_tensor(const c10::IValue& size) const {
    if (size.isInt()) return at::scalar_tensor(size.toInt(), at::kLong);
    if (size.isDouble()) return at::scalar_tensor(size.toDouble(), at::kDouble);
    throw graph_break("xport.torchscript.graph_break",
                      "the TorchScript method '" + method_ + "' uses a size that varies (a dynamic dim's) as a "
                          "tensor: torch.jit.trace recorded the size as a tensor (prim::NumToTensor), and a "
                          "tensor would keep the example's value. Make that dim static, or script the module "
                          "(torch.jit.script keeps sizes as ints)" + where(current_));
  }

  /// `aten::Int(t)` (Float, ScalarImplicit) of a traced size: the number itself.
  std::optional<c10::IValue> size_read(const torch::jit::Node* n) const {
    const auto kind = n->kind();
    const bool as_int = kind == c10::aten::Int || kind == c10::aten::IntImplicit || kind == c10::aten::ScalarImplicit;
    const bool as_float = kind == c10::aten::Float || kind == c10::aten::FloatImplicit;
    if ((!as_int && !as_float) || n->inputs().size() != 1) return std::nullopt;
    const auto s = sizes_.find(n->input(0));
    if (s == sizes_.end()) return std::nullopt;
    if (as_float && s->second.isInt()) return c10::IValue(static_cast<double>(s->second.toInt()));
    if (as_float && !s->second.isDouble()) return std::nullopt;  // a symbolic int as a float: as a tensor
    return s->second;
  }

  /// The value of a 0-dim integer tensor constant (`prim::Constant[value={0}]`, an int the trace
  /// saw as a tensor), if `v` is one.
  static std::optional<std::int64_t> constant_int(const torch::jit::Value* v) {
    if (v->node()->kind() != c10::prim::Constant) return std::nullopt;
    const auto k = torch::jit::toIValue(v);
    if (!k || !k->isTensor()) return std::nullopt;
    const auto& t = k->toTensor();  // read its memory: item() would go through the capture (data)
    if (t.dim() != 0 || !t.device().is_cpu()) return std::nullopt;
    if (t.scalar_type() == at::kLong) return *static_cast<const std::int64_t*>(t.data_ptr());
    if (t.scalar_type() == at::kInt) return *static_cast<const std::int32_t*>(t.data_ptr());
    return std::nullopt;
  }

  /// Integer arithmetic torch.jit.trace recorded on traced sizes, computed on the ints.
  std::optional<c10::IValue> size_arithmetic(const torch::jit::Node* n) {
    const auto kind = n->kind();
    const bool known = kind == c10::aten::add || kind == c10::aten::sub || kind == c10::aten::rsub ||
                       kind == c10::aten::mul || kind == c10::aten::floor_divide || kind == c10::aten::remainder;
    if (!known || n->inputs().size() < 2 || n->inputs().size() > 3) return std::nullopt;
    bool any_size = false;
    std::vector<c10::SymInt> ints;
    for (std::size_t i = 0; i < 2; ++i) {
      const auto* v = n->input(i);
      if (const auto s = sizes_.find(v); s != sizes_.end()) {
        if (!s->second.isInt() && !s->second.isSymInt()) return std::nullopt;
        any_size = true;
        ints.push_back(s->second.toSymInt());
        continue;
      }
      if (v->type()->isSubtypeOf(*c10::IntType::get())) {
        ints.push_back(read(v).toSymInt());
      } else if (const auto k = constant_int(v)) {  // an int the trace kept as a tensor constant
        ints.push_back(c10::SymInt(*k));
      } else {
        return std::nullopt;
      }
    }
    if (!any_size) return std::nullopt;
    if (n->inputs().size() == 3) {  // alpha
      const auto alpha = read(n->input(2));
      if (!alpha.isInt()) return std::nullopt;
      ints[1] = ints[1] * alpha.toInt();
    }
    const auto& a = ints[0];
    const auto& b = ints[1];
    if (kind == c10::aten::add) return c10::IValue(a + b);
    if (kind == c10::aten::sub) return c10::IValue(a - b);
    if (kind == c10::aten::rsub) return c10::IValue(b - a);
    if (kind == c10::aten::mul) return c10::IValue(a * b);
    if (kind == c10::aten::floor_divide) return c10::IValue(a / b);  // sizes: not negative
    return c10::IValue(a % b);
  }

  static bool is_tensor_bool(const torch::jit::Node* n) {
    if (n->kind() != c10::aten::Bool && n->kind() != c10::aten::is_nonzero) return false;
    return n->inputs().size() == 1 && n->input(0)->type()->isSubtypeOf(*c10::TensorType::get());
  }

  void step(const torch::jit::Node* n) {
    const auto kind = n->kind();
    if (kind == c10::prim::Constant) {
      env_[n->output()] = torch::jit::toIValue(n->output()).value_or(c10::IValue());
    } else if (kind == c10::prim::GetAttr) {
      env_[n->output()] = read(n->input(0)).toObjectRef().getAttr(n->s(c10::attr::name));
    } else if (is_tensor_bool(n)) {  // read when a branch or another node needs it
      deferred_[n->output()] = {read(n->input(0)).toTensor(), n};
    } else if (kind == c10::aten::__not__ && deferred_.count(n->input(0))) {
      const auto& [t, reader] = deferred_.at(n->input(0));
      deferred_[n->output()] = {at::logical_not(t), reader};
    } else if (kind == c10::prim::NumToTensor) {  // torch.jit.trace's sizes (Note [Traced sizes])
      sizes_[n->output()] = read(n->input(0));
    } else if (auto size = size_arithmetic(n)) {
      sizes_[n->output()] = std::move(*size);
    } else if (auto number = size_read(n)) {
      env_[n->output()] = std::move(*number);
    } else if (kind == c10::prim::If) {
      branch(n);
    } else if (kind == c10::prim::Loop) {
      loop(n);
    } else if (kind == c10::prim::TupleConstruct) {
      std::vector<c10::IValue> elems;
      for (auto* v : n->inputs()) elems.push_back(read(v));
      env_[n->output()] = c10::ivalue::Tuple::create(std::move(elems));
    } else if (kind == c10::prim::TupleUnpack || kind == c10::prim::ListUnpack) {
      const auto v = read(n->input(0));
      const auto elems = v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
      if (elems.size() != n->outputs().size()) refuse(n, "unpacks " + std::to_string(elems.size()) + " values into " +
                                                             std::to_string(n->outputs().size()));
      for (std::size_t i = 0; i < elems.size(); ++i) env_[n->output(i)] = elems[i];
    } else if (kind == c10::prim::ListConstruct) {
      c10::impl::GenericList list(n->output()->type()->expectRef<c10::ListType>().getElementType());
      for (auto* v : n->inputs()) list.push_back(read(v));
      env_[n->output()] = std::move(list);
    } else if (kind == c10::prim::DictConstruct) {  // key, value, key, value...
      const auto& type = n->output()->type()->expectRef<c10::DictType>();
      c10::impl::GenericDict dict(type.getKeyType(), type.getValueType());
      for (std::size_t i = 0; i + 1 < n->inputs().size(); i += 2)
        dict.insert_or_assign(read(n->input(i)), read(n->input(i + 1)));
      env_[n->output()] = std::move(dict);
    } else if (kind == c10::prim::TupleIndex) {
      env_[n->output()] = read(n->input(0)).toTupleRef().elements().at(read(n->input(1)).toInt());
    } else if (kind == c10::prim::unchecked_cast) {
      env_[n->output()] = read(n->input(0));
    } else if (kind == c10::prim::Uninitialized) {
      env_[n->output()] = c10::IValue();
    } else if (kind == c10::aten::warn) {  // the interpreter's own: warned as it warns, nothing in the program
      TORCH_WARN(read(n->input(0)).toStringRef());
    } else if (kind == c10::prim::SetAttr) {
      refuse(n, "the method assigns attribute '" + n->s(c10::attr::name) + "' (prim::SetAttr), which a program cannot "
                "do: write a buffer in place instead (self.count.add_(1), self.state.copy_(new))");
    } else if (kind == c10::prim::RaiseException && in_data_branch_ > 0) {
      refuse(n, "the method raises in a branch on the contents of a tensor (an assert on data): torch.export records "
                "such a check as aten._assert_async.msg, which xport does not capture yet; check the input before "
                "calling the program, or assert on sizes");
    } else if (kind == c10::prim::CallMethod && is_custom_class(*n->input(0)->type())) {
      object_call(n);
    } else if (kind == c10::prim::CallMethod || kind == c10::prim::CallFunction || kind == c10::prim::Enter ||
               kind == c10::prim::Exit || kind == c10::prim::fork || kind == c10::prim::RaiseException) {
      refuse(n, std::string("the method runs ") + kind.toQualString() +
                    (kind == c10::prim::RaiseException ? " (a raise the example input reaches)" : "") +
                    ", which the translation does not convert; try torchscript_route::capture");
    } else {
      torch::jit::Stack stack;
      for (auto* v : n->inputs()) stack.push_back(read(v));
      if (n->getOperator().schema().is_vararg())  // (the interpreter pushes a variadic call's count too)
        stack.emplace_back(static_cast<std::int64_t>(n->inputs().size()));
      n->getOperation()(stack);
      const auto outs = n->outputs();
      if (stack.size() != outs.size()) refuse(n, "the operator left " + std::to_string(stack.size()) + " values for " +
                                                     std::to_string(outs.size()) + " outputs");
      for (std::size_t i = 0; i < outs.size(); ++i) env_[outs[i]] = std::move(stack[i]);
    }
  }

  /// `self.obj.method(args)` on a custom object (Note [Custom objects from TorchScript]): one
  /// call_torchbind on the object, typed by the method's fake.
  void object_call(const torch::jit::Node* n) {
    const auto cls = n->input(0)->type()->annotation_str();
    const auto name = n->s(c10::attr::name);
    if (n->outputs().size() != 1 || !n->output()->type()->isSubtypeOf(*c10::TensorType::get()))
      refuse(n, "the method calls " + cls + "." + name + ", which returns " +
                    (n->outputs().empty() ? std::string("nothing") : n->output()->type()->annotation_str()) +
                    ": a program calls the methods of a custom object that return one tensor (call_torchbind); "
                    "return the value as a tensor");
    if (in_data_branch_ > 0)
      refuse(n, "the method calls " + cls + "." + name + " inside a branch or loop on the contents of a tensor: xport "
                "lifts custom objects at the top level of a program only; call it outside the branch");
    std::vector<c10::IValue> args;
    for (std::size_t i = 1; i < n->inputs().size(); ++i) args.push_back(read(n->input(i)));
    env_[n->output()] = call_method(read(n->input(0)), name, std::move(args));
  }

  /// Walks `b` with its inputs bound to `ins`.
  void bind_and_walk(const torch::jit::Block* b, const std::vector<c10::IValue>& ins) {
    for (std::size_t i = 0; i < b->inputs().size(); ++i) env_[b->inputs()[i]] = ins.at(i);
    walk(b);
  }

  /// Walks `b` (no inputs: an If's block); returns its outputs.
  std::vector<c10::IValue> run_block(const torch::jit::Block* b) {
    bind_and_walk(b, {});
    std::vector<c10::IValue> out;
    for (auto* v : b->outputs()) out.push_back(read(v));
    return out;
  }

  /// prim::If: the branch a known condition picks; torch.cond when the condition is a tensor's contents.
  void branch(const torch::jit::Node* n) {
    const auto d = deferred_.find(n->input(0));
    std::vector<c10::IValue> outs;
    if (d == deferred_.end()) {
      outs = run_block(n->blocks()[read(n->input(0)).toBool() ? 0 : 1]);
    } else {
      for (auto* o : n->outputs())
        if (!tensor_tree(*o->type()))
          refuse(n, "a branch on the contents of a tensor gives a " + o->type()->annotation_str() +
                        ": torch.cond's branches return tensors (and tuples of them) only (return it as a tensor)");
      const auto block_fn = [&](const torch::jit::Block* b) {
        return [this, b](const std::vector<at::Tensor>&) {
          std::vector<at::Tensor> outer, ts;
          for (const auto& [v, iv] : env_) collect_tensors(iv, outer);
          for (const auto& v : run_block(b)) flatten_tensors(v, ts);
          for (auto& t : ts)  // torch.cond's branches return no tensor from outside (nor a view of one) as it is
            for (const auto& o : outer)
              if (t.is_same(o) || t.is_alias_of(o)) {
                t = t.clone();
                break;
              }
          return ts;
        };
      };
      const auto pred = d->second.first;
      const depth_guard in_branch(in_data_branch_);
      const auto flat = xport::cond(pred, block_fn(n->blocks()[0]), block_fn(n->blocks()[1]),
                                    std::tuple{std::vector<at::Tensor>{}});
      std::size_t k = 0;
      for (auto* o : n->outputs()) outs.push_back(unflatten_tensors(*o->type(), flat, k));
    }
    for (std::size_t i = 0; i < outs.size(); ++i) env_[n->output(i)] = std::move(outs[i]);
  }

  /// The tensors in `v` (tuples and lists looked into).
  static void collect_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
    if (v.isTensor()) {
      if (v.toTensor().defined()) out.push_back(v.toTensor());
    } else if (v.isTuple()) {
      for (const auto& e : v.toTupleRef().elements()) collect_tensors(e, out);
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) collect_tensors(e, out);
    }
  }

  /// Whether values of `type` are tensors, or tuples of them (nested).
  static bool tensor_tree(const c10::Type& type) {
    if (type.isSubtypeOf(*c10::TensorType::get())) return true;
    const auto* tuple = type.castRaw<c10::TupleType>();
    if (!tuple) return false;
    for (const auto& e : tuple->elements())
      if (!tensor_tree(*e)) return false;
    return true;
  }
  static void flatten_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
    if (v.isTuple()) {
      for (const auto& e : v.toTupleRef().elements()) flatten_tensors(e, out);
    } else {
      out.push_back(v.toTensor());
    }
  }
  static c10::IValue unflatten_tensors(const c10::Type& type, const std::vector<at::Tensor>& flat, std::size_t& k) {
    const auto* tuple = type.castRaw<c10::TupleType>();
    if (!tuple) return flat.at(k++);
    std::vector<c10::IValue> elems;
    for (const auto& e : tuple->elements()) elems.push_back(unflatten_tensors(*e, flat, k));
    return c10::ivalue::Tuple::create(std::move(elems));
  }

  /// prim::Loop(trip count, condition, carried...): runs (unrolled) while both are known;
  /// torch.while_loop when the condition is a tensor's contents from the start.
  void loop(const torch::jit::Node* n) {
    const auto* body = n->blocks()[0];
    const auto trips = read(n->input(0)).toInt();
    std::vector<c10::IValue> carried;
    for (std::size_t i = 2; i < n->inputs().size(); ++i) carried.push_back(read(n->input(i)));
    if (const auto d = deferred_.find(n->input(1)); d != deferred_.end()) {
      while_loop(n, d->second.first, carried, trips);
      return;
    }
    bool more = read(n->input(1)).toBool();
    for (std::int64_t i = 0; more && i < trips; ++i) {
      std::vector<c10::IValue> ins{c10::IValue(i)};
      ins.insert(ins.end(), carried.begin(), carried.end());
      bind_and_walk(body, ins);
      if (deferred_.count(body->outputs()[0]))
        throw graph_break("xport.torchscript.graph_break",
                          "the TorchScript method '" + method_ + "' leaves a loop on the contents of a tensor from "
                          "inside its body (a break): only a `while` whose own test reads the tensor becomes "
                          "torch.while_loop" + where(n));
      more = read(body->outputs()[0]).toBool();
      for (std::size_t k = 1; k < body->outputs().size(); ++k) carried[k - 1] = read(body->outputs()[k]);
    }
    for (std::size_t i = 0; i < carried.size(); ++i) env_[n->output(i)] = std::move(carried[i]);
  }

  /// A bool tensor of no dims, as torch.while_loop's cond_fn returns, from what `bool(t)` read.
  static at::Tensor as_predicate(at::Tensor t) {
    if (t.dim() != 0) t = t.reshape({});
    if (t.scalar_type() != at::kBool) t = t.ne(0);
    return t;
  }

  /// `while bool(t):` as torch.while_loop: the predicate is carried beside the loop's values
  /// (cond_fn returns it; body_fn computes the next one where TorchScript tests it, at the end
  /// of the body).
  void while_loop(const torch::jit::Node* n, const at::Tensor& first, const std::vector<c10::IValue>& carried,
                  std::int64_t trips) {
    const auto* body = n->blocks()[0];
    const auto loop_refusal = [&](const std::string& why) {
      throw graph_break("xport.torchscript.graph_break", "the TorchScript method '" + method_ + "' loops while the "
                        "contents of a tensor say so, and " + why + where(n));
    };
    if (trips != std::numeric_limits<std::int64_t>::max())
      loop_refusal("counts its iterations too (a for loop with a test on data): torch.while_loop takes a `while` loop");
    if (body->inputs()[0]->hasUses())
      loop_refusal("reads its iteration count: carry a counter tensor instead");
    std::vector<at::Tensor> init{as_predicate(first)};
    for (const auto& c : carried) {
      if (!c.isTensor())
        loop_refusal("carries a " + c.tagKind() + ": torch.while_loop carries tensors only (make it a tensor)");
      init.push_back(c.toTensor());
    }
    auto* outer = active_capture;
    std::vector<value> values;
    for (const auto& t : init) values.push_back(outer->value_of(t));
    const branch_tracer cond_fn = [](capture& c, const std::vector<value>&, const std::vector<at::Tensor>& metas) {
      at::Tensor p;
      {
        capture_scope scope(c);
        p = metas.at(0).clone();  // (a loop's cond_fn returns no input as it is)
      }
      return std::vector<value>{c.value_of(p)};
    };
    const branch_tracer body_fn = [&](capture& c, const std::vector<value>&, const std::vector<at::Tensor>& metas) {
      std::vector<at::Tensor> outs;
      {
        capture_scope scope(c);
        std::vector<c10::IValue> ins{c10::IValue(std::int64_t{0})};
        for (std::size_t k = 1; k < metas.size(); ++k) ins.emplace_back(metas[k]);
        bind_and_walk(body, ins);
        const auto d = deferred_.find(body->outputs()[0]);
        if (d == deferred_.end()) loop_refusal("its body's test is not a tensor's contents");
        outs.push_back(as_predicate(d->second.first));
        for (std::size_t k = 1; k < body->outputs().size(); ++k) {
          auto t = read(body->outputs()[k]).toTensor();
          for (const auto& m : metas)  // the body returns no carried value as it is
            if (t.is_same(m) || t.is_alias_of(m)) {
              t = t.clone();
              break;
            }
          outs.push_back(t);
        }
      }
      std::vector<value> r;
      for (const auto& t : outs) r.push_back(c.value_of(t));
      return r;
    };
    const depth_guard in_loop(in_data_branch_);
    const auto w = trace_while_loop(*outer, std::move(values), cond_fn, body_fn);
    for (std::size_t k = 0; k < carried.size(); ++k) env_[n->output(k)] = w.metas.at(k + 1);
  }

  // Counts the branches on data being traced (both sides run, whatever the example says).
  struct depth_guard {
    explicit depth_guard(int& depth) : d(depth) { ++d; }
    ~depth_guard() { --d; }
    depth_guard(const depth_guard&) = delete;
    depth_guard& operator=(const depth_guard&) = delete;
    int& d;
  };

  std::string method_;
  const std::unordered_map<const torch::jit::Node*, std::string>& module_of_;
  int in_data_branch_ = 0;
  const torch::jit::Node* current_ = nullptr;  // the node being translated (for messages)
  std::unordered_map<value_ptr, c10::IValue> env_;
  // torch.jit.trace's sizes as tensors, kept as the numbers they are (Note [Traced sizes])
  std::unordered_map<value_ptr, c10::IValue> sizes_;
  // `bool(t)` not read yet: t, and the node that reads it when something needs the value
  std::unordered_map<value_ptr, std::pair<at::Tensor, const torch::jit::Node*>> deferred_;
};

/// The path of a module value from `self` through the attributes it was read from
/// (`self.blocks[0]` is GetAttr `0` of GetAttr `blocks`: `blocks.0`); nullopt for a module value
/// of another origin.
inline std::optional<std::string> module_value_path(const torch::jit::Value* v, const torch::jit::Value* self) {
  std::string path;
  for (; v != self; v = v->node()->input(0)) {
    if (v->node()->kind() != c10::prim::GetAttr) return std::nullopt;
    const auto& name = v->node()->s(c10::attr::name);
    path = path.empty() ? name : name + "." + path;
  }
  return path;
}

/// A method's graph with every method and function it calls inlined, and the module each node
/// was called in: the nodes a call of `self.blocks[0].forward` brings are module `blocks.0`'s, a
/// function's are its caller's (TorchScript's own inlined call stacks keep one level only when
/// inlining one level at a time, as here).
struct inlined_method {
  std::shared_ptr<torch::jit::Graph> graph;
  std::unordered_map<const torch::jit::Node*, std::string> module_of;
};

/// `method`'s graph, one level of calls inlined per pass (a callee's own calls stay calls) until
/// none is left (TorchScript has no recursion); each inlined node is given its module.
inline inlined_method inlined_graph(torch::jit::Module& m, const std::string& method) {
  inlined_method out{m.get_method(method).graph()->copy(), {}};
  auto& g = *out.graph;
  const auto calls_in = [](const auto& self, torch::jit::Block* b, std::vector<torch::jit::Node*>& found) -> void {
    for (auto* n : b->nodes()) {
      if (n->kind() == c10::prim::CallMethod || n->kind() == c10::prim::CallFunction) found.push_back(n);
      for (auto* sub : n->blocks()) self(self, sub, found);
    }
  };
  const auto mark = [&](const auto& self, torch::jit::Node* n, const std::string& path) -> void {
    out.module_of[n] = path;
    for (auto* sub : n->blocks())
      for (auto* inner : sub->nodes()) self(self, inner, path);
  };
  for (int pass = 0; pass < 256; ++pass) {
    std::vector<torch::jit::Node*> calls;
    calls_in(calls_in, g.block(), calls);
    bool inlined = false;
    for (auto* call : calls) {
      const auto it = out.module_of.find(call);
      std::string path = it == out.module_of.end() ? std::string() : it->second;
      torch::jit::GraphFunction* fn = nullptr;
      if (call->kind() == c10::prim::CallMethod) {
        fn = torch::jit::tryToGraphFunction(
            call->input(0)->type()->expectRef<c10::ClassType>().getMethod(call->s(c10::attr::name)));
        if (const auto module = module_value_path(call->input(0), g.inputs()[0])) path = *module;
      } else if (call->input(0)->node()->kind() == c10::prim::Constant) {
        fn = torch::jit::tryToGraphFunction(*call->input(0)->type()->expectRef<c10::FunctionType>().function());
        if (fn) call->removeInput(0);
      }
      if (!fn) continue;  // a builtin: left as a call (the translation refuses it, naming it)
      auto* before = call->prev();
      auto* after = call->next();
      out.module_of.erase(call);
      torch::jit::inlineCallTo(call, fn, /*use_graph=*/true);
      for (auto* n = before->next(); n != after; n = n->next()) mark(mark, n, path);
      inlined = true;
    }
    if (!inlined) break;
  }
  return out;
}

/// A TorchScript module seen as the module export_program lifts: parameters and buffers under
/// their fully qualified names, and `forward` calling one of its methods. The method's result
/// comes back flat (its tensors, in order); its structure is kept in `out_spec`.
struct jit_method_view {
  torch::jit::Module& m;
  std::string method;
  std::optional<treespec>* out_spec;
  torchscript_route route = torchscript_route::translate;

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
  /// lists, dicts by str and None is refused (a program's outputs are tensors).
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
    } else if (v.isGenericDict() && v.toGenericDict().keyType()->kind() == c10::TypeKind::StringType) {
      spec = treespec::of(K::dict);  // Dict[str, Tensor] (torchvision's segmentation models: "out", "aux")
      for (const auto& kv : v.toGenericDict()) {
        const auto& key = kv.key().toStringRef();
        spec.keys.push_back(key);
        spec.children.emplace_back();
        flatten(kv.value(), out, spec.children.back(), where + "['" + key + "']");
      }
    } else {
      throw export_error("xport.torchscript.output", "the TorchScript method returns a " + v.tagKind() + " at " + where +
                                                         ": only tensors, tuples, lists and dicts (by str) of them, and "
                                                         "None can be outputs of a program; return it as a tensor");
    }
  }

  template <class... A>
  std::vector<at::Tensor> forward(const A&... a) const {
    c10::IValue result;
    if (route == torchscript_route::translate) {
      const auto inlined = inlined_graph(m, method);
      result = ts_translator(method, inlined.module_of).run(*inlined.graph, {c10::IValue(m._ivalue()), c10::IValue(a)...});
    } else try {
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
                                   const export_options& opts, std::optional<treespec>& out_spec, torchscript_route route,
                                   std::index_sequence<I...>) {
  jit_method_view view{m, method, &out_spec, route};
  try {
    return export_program(view, std::tuple{in[I]...}, opts);
  } catch (const graph_break& e) {  // captured from a traced file: say why, and what converts it
    const auto hint = route == torchscript_route::capture ? traced_hint(m) : std::string();
    if (hint.empty() || std::string(e.what()).find(hint) != std::string::npos) throw;
    throw graph_break(e.id(), std::string(e.what()).substr(e.id().size() + 3) + hint);
  }
}

/// The argument names of `method` (its schema, without self), checked against `n` tensors.
inline std::vector<std::string> jit_argument_names(torch::jit::Module& m, const std::string& method, std::size_t n) {
  const auto found = m.find_method(method);
  if (!found) {
    std::vector<std::string> names;
    for (const auto& f : m.get_methods()) names.push_back(f.name());
    throw export_error("xport.torchscript.method",
                       "the TorchScript module has no method '" + method + "'; it has " + quoted_list(names));
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

/// The custom objects (torch::class_ attributes) of a module tree by object, each under the
/// fully qualified name of the first attribute holding it.
inline void custom_object_names(const torch::jit::Module& m, std::unordered_map<const void*, std::string>& out,
                                const std::string& prefix = "") {
  const auto& type = m.type();
  for (std::size_t i = 0; i < type->numAttributes(); ++i) {
    if (!is_custom_class(*type->getAttribute(i))) continue;
    const auto obj = m._ivalue()->getSlot(i);
    if (obj.isObject()) out.try_emplace(obj.internalToPointer(), prefix + type->getAttributeName(i));
  }
  for (const auto& child : m.named_children()) custom_object_names(child.value, out, prefix + child.name + ".");
}

/// Refuses, on the capture route, a module holding a custom class instance (Note [Custom objects
/// from TorchScript]), naming the attribute.
inline void refuse_captured_custom_objects(const torch::jit::Module& m) {
  std::unordered_map<const void*, std::string> names;
  custom_object_names(m, names);
  if (names.empty()) return;
  std::vector<std::string> attrs;
  for (const auto& [obj, fqn] : names) attrs.push_back(fqn);
  std::sort(attrs.begin(), attrs.end());
  throw export_error("xport.torchscript.custom_obj",
                     "attribute '" + attrs.front() + "' of the module is a custom class instance (a torch::class_): the "
                     "capture route would run its methods' C++ code and fix the object's state into the program; use "
                     "torchscript_route::translate (the default), which keeps each call on the object");
}

/// Gives each custom object the capture lifted (`lifted_custom_<i>`) the name of the module's
/// attribute holding it (Note [Custom objects from TorchScript]).
inline void name_custom_objects(exported_program& p, const torch::jit::Module& m) {
  std::unordered_map<const void*, std::string> names;
  custom_object_names(m, names);
  if (names.empty() || p.custom_objs().empty()) return;
  auto objs = p.custom_objs();
  std::map<std::string, c10::IValue> renamed;
  auto& g = p.graph_mut();
  for (auto& spec : p.signature_mut().input_specs) {
    if (spec.kind != input_kind::custom_obj || !spec.target) continue;
    const auto& obj = objs.at(*spec.target);
    const auto fqn = names.find(obj.internalToPointer());
    if (fqn == names.end()) {  // (an object the module does not hold: as it was lifted)
      renamed[*spec.target] = obj;
      continue;
    }
    const auto name = lifted_name(input_kind::custom_obj, fqn->second);
    for (const auto& ph : g.placeholders())
      if (ph.output(0).name() == spec.arg.name) g.rename(ph.output(0), name);
    spec.arg.name = name;
    spec.target = fqn->second;
    renamed[fqn->second] = obj;
  }
  p.custom_objs_mut() = std::move(renamed);
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
/// it was. A custom object the module holds is the program's too (Note [Custom objects from
/// TorchScript]): running the program changes it as the module's own calls would.
inline exported_program from_torchscript(torch::jit::Module& m, const std::vector<at::Tensor>& example_inputs,
                                         const torchscript_options& options = {}) {
  if (options.route == torchscript_route::capture) detail::refuse_captured_custom_objects(m);
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
  case N: \
    p.emplace(detail::export_jit_method(m, method, example_inputs, opts, out_spec, options.route, std::make_index_sequence<N>{})); \
    break;
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
  detail::name_custom_objects(*p, m);
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
    out.programs.emplace(name, from_torchscript(m, spec.example_inputs, {.method = name, .dynamic_shapes = spec.dynamic_shapes, .route = spec.route}));
  out.extra_files = detail::torchscript_extra_files(path);
  return out;
}

XPORT_END_NAMESPACE
