// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
#pragma once

#include <xport/xport.hpp>
// xport/train.hpp: training in C++, an opt-in entry beside the umbrella header (it parses
// torch::nn): `p.module()`, the program as a torch::nn::Module that torch::optim trains
// (run/module.hpp), and `pkg.module()`, a package's programs as one module's methods
// (serde/package_module.hpp); it also lets export_forward_backward() (lower/joint.hpp) run the backward.

// #include <xport/xport.hpp>
// #include <xport/run/module.hpp>
// xport/run/module.hpp: an exported program as a torch::nn::Module, torch's `ep.module()`, so
// that torch::optim trains it. The module's parameters and buffers are the program's state,
// registered under their fully qualified names (nested as the names nest: `layers.0.weight` is
// parameter `weight` of submodule `0` of submodule `layers`), and forward runs the program
// through the interpreter with autograd on. Opt-in (xport/train.hpp): it parses torch::nn.

#include <cstddef>        // std::size_t
#include <cstdint>        // std::int64_t
#include <map>            // std::map
#include <memory>         // std::shared_ptr
#include <optional>       // std::optional
#include <string>         // std::string
#include <tuple>          // std::tuple
#include <utility>        // std::move
#include <vector>         // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/ops/equal.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/module.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/ir/program.hpp>
// #include <xport/lower/joint.hpp>
// #include <xport/run/callable.hpp>
// #include <xport/run/interpreter.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

/// The mode a program was exported in, read from its calls: an argument named `train` or
/// `training` (dropout, batch_norm, native_dropout, _native_batch_norm_legit_functional...)
/// holds it, `_native_batch_norm_legit_no_training` is eval. The node that decides it is named.
/// Empty when no call depends on the mode (an MLP): such a program is the same in both.
struct exported_mode {
  bool training = false;
  std::string node;  // the first call that fixes it, `batch_norm` (aten.batch_norm.default)
};

inline std::optional<exported_mode> exported_mode_of(const graph& g) {
  for (auto n : g.nodes()) {
    if (!n.is_call() || n.op().higher_order) continue;
    const auto& op = n.op();
    const auto where = n.name() + " (" + op.qualified + ")";
    if (op.name.find("no_training") != std::string::npos) return exported_mode{false, where};
    const auto& params = op.schema().arguments();
    const auto args = n.args();
    for (std::size_t i = 0; i < params.size() && i < args.size(); ++i)
      if ((params[i].name() == "train" || params[i].name() == "training") && args[i].is_bool())
        return exported_mode{args[i].as_bool(), where};
  }
  return std::nullopt;
}

/// The state of one or more programs registered on a torch::nn::Module, each tensor once under
/// its FQN (nested as the names nest: `layers.0.weight` is parameter `weight` of submodule `0`
/// of submodule `layers`): parameters as leaves sharing the program's storage, buffers as the
/// program's own tensors (their in-place updates reach the program). Each program then holds the
/// registered tensors, so what an optimizer changes is what every program reads.
class module_state {
 public:
  explicit module_state(torch::nn::Module& root) : root_(root) {}

  /// Registers `p`'s parameters and buffers (`p` is named `name` in messages). A tensor already
  /// registered (a tied weight, or the same view of a storage another program holds) is used
  /// again; an FQN registered by an earlier program with another tensor is used again when the
  /// two are equal (torch's package_pt2 gives each program its own copy), refused otherwise.
  void adopt(exported_program& p, const std::string& name) {
    for (const auto& spec : p.signature().input_specs) {
      if ((spec.kind != input_kind::parameter && spec.kind != input_kind::buffer) || !spec.target) continue;
      const auto& fqn = *spec.target;
      const auto& t = p.lifted_tensor(spec);
      at::Tensor reg;
      if (const auto it = by_view_.find(view_key(t)); it != by_view_.end()) {
        reg = it->second;
      } else if (const auto f = by_fqn_.find(fqn); f != by_fqn_.end()) {
        reg = same_state(f->second, t, spec.kind, fqn, name);
      } else {
        reg = add(spec.kind, fqn, t);
        by_fqn_.emplace(fqn, registered{reg, spec.kind, name});
      }
      by_view_.emplace(view_key(t), reg);
      const bool in_state = spec.kind == input_kind::parameter || spec.persistent.value_or(true);
      (in_state ? p.state_dict_mut() : p.constants_mut()).set(fqn, reg);
    }
  }

 private:
  struct registered {
    at::Tensor tensor;
    input_kind kind;
    std::string program;
  };
  // a view of a storage: two tensors with one key read and write the same elements
  using key = std::tuple<const void*, std::int64_t, std::vector<std::int64_t>, std::vector<std::int64_t>, int>;
  static key view_key(const at::Tensor& t) {
    return {t.storage().unsafeGetStorageImpl(), t.storage_offset(), t.sizes().vec(), t.strides().vec(),
            static_cast<int>(t.scalar_type())};
  }

  at::Tensor add(input_kind kind, const std::string& fqn, const at::Tensor& t) {
    if (kind == input_kind::buffer) {
      owner(fqn).register_buffer(leaf(fqn), t);
      return t;
    }
    const bool grad = t.requires_grad();
    auto leaf_t = t.detach();
    leaf_t.requires_grad_(grad);
    owner(fqn).register_parameter(leaf(fqn), leaf_t, grad);
    return leaf_t;
  }

  static at::Tensor same_state(const registered& r, const at::Tensor& t, input_kind kind, const std::string& fqn,
                               const std::string& program) {
    const auto kind_name = [](input_kind k) { return k == input_kind::parameter ? "a parameter" : "a buffer"; };
    const auto refuse = [&](const std::string& why) {
      throw error("xport.module.state", "programs '" + r.program + "' and '" + program + "' both hold state '" + fqn +
                                            "', " + why + ": one module cannot hold both. Make a module of each program "
                                            "(pkg.at(name).module()), or export the methods from one module");
    };
    if (r.kind != kind) refuse(std::string("as ") + kind_name(r.kind) + " and as " + kind_name(kind));
    c10::NoGradGuard no_grad;
    if (r.tensor.scalar_type() != t.scalar_type() || r.tensor.sizes() != t.sizes() ||
        r.tensor.device() != t.device() || !at::equal(r.tensor, t))
      refuse("with different values");
    return r.tensor;
  }

  static std::string leaf(const std::string& fqn) {
    const auto dot = fqn.rfind('.');
    return dot == std::string::npos ? fqn : fqn.substr(dot + 1);
  }

  // The submodule that holds `fqn`'s leaf, made as the name's prefixes nest.
  torch::nn::Module& owner(const std::string& fqn) {
    torch::nn::Module* m = &root_;
    std::size_t start = 0;
    for (auto dot = fqn.find('.'); dot != std::string::npos; start = dot + 1, dot = fqn.find('.', start)) {
      const auto part = fqn.substr(start, dot - start);
      auto children = m->named_children();
      if (auto* child = children.find(part)) {
        m = child->get();
      } else {
        m = m->register_module(part, std::make_shared<torch::nn::Module>("xport::program_module")).get();
      }
    }
    return *m;
  }

  torch::nn::Module& root_;
  std::map<key, at::Tensor> by_view_;
  std::map<std::string, registered> by_fqn_;
};

/// A program module's to(device) after torch::nn::Module::to moved the registered state: the
/// program's lifted constants moved in place, its graph retargeted (the interpreter compiles again).
inline void move_rest_of_program(exported_program& p, torch::Device device, bool non_blocking) {
  for (auto& [name, t] : p.constants_mut())
    if (t.defined() && t.device() != device) t.set_data(t.to(device, non_blocking));
  retarget_device(p.graph_mut(), device);
}

/// A program module's to(dtype): refused unless every floating state tensor of `p` is `dtype`
/// already (`module`: the class in the message; `program`: the program's name in a package, or "").
inline void check_state_dtype(const exported_program& p, torch::Dtype dtype, const std::string& module,
                              const std::string& program) {
  for (const auto& [name, t] : p.state_dict())
    if (t.defined() && t.is_floating_point() && t.scalar_type() != dtype)
      throw error("xport.module.dtype", module + "::to(" + std::string(c10::toString(dtype)) + "): state '" + name + "'" +
                                            (program.empty() ? "" : " of program '" + program + "'") + " is " +
                                            c10::toString(t.scalar_type()) +
                                            "; a program's dtypes are fixed at export (its graph computes in them). "
                                            "Convert the eager module and export it again");
}

inline std::vector<at::Tensor> autograd_grad_of(const at::Tensor& loss, const std::vector<at::Tensor>& inputs) {
  // the seed as Python's torch.autograd.grad makes it (ones_like, preserving the loss's format)
  const auto seed = at::ones_like(loss, at::MemoryFormat::Preserve);
  return torch::autograd::grad({loss}, inputs, {seed}, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}
inline const bool autograd_grad_installed = (autograd_grad = &autograd_grad_of, true);

}  // namespace detail

/// An exported program as a torch::nn::Module: torch's `ep.module()`, made by `p.module()`.
///
///     auto m = p.module();                                   // #include <xport/train.hpp>
///     torch::optim::AdamW opt(m->parameters(), 1e-3);
///     auto loss = m->forward({x, y})[0];
///     opt.zero_grad(); loss.backward(); opt.step();
///
/// - The parameters and buffers are the program's state tensors: the same storage as `p`'s
///   (training the module trains `p`'s weights, as in torch), registered once each by FQN
///   (tied weights are one parameter, under the first name the signature gives it).
///   Parameters are leaves that require grad as the program's state did; freeze one with
///   `requires_grad_(false)`. Lifted constants are neither: they are not trained.
/// - forward runs the program (guards checked, autograd on unless the caller turns it off);
///   the buffers it mutates (BatchNorm's running statistics) are updated in place, as eager
///   updates them.
/// - A program is exported in one mode. train()/eval() to that mode, or on a program no call of
///   which depends on the mode, is accepted; to the other mode it throws `xport.module.mode`
///   naming the call that fixes the mode (torch's unlifted module refuses both always).
/// - to(device) moves the state in place (the registered tensors stay the same objects, so an
///   optimizer made before keeps working) and retargets the graph; to(dtype) is refused: a
///   program's dtypes are fixed at export.
class program_module : public torch::nn::Module {
 public:
  explicit program_module(const exported_program& p) : torch::nn::Module("xport::program_module"), program_(p.clone()) {
    mode_ = detail::exported_mode_of(program_.graph());
    detail::module_state(*this).adopt(program_, "");
    if (mode_) torch::nn::Module::train(mode_->training);
  }

  /// Runs the program on its user inputs (tensors, in signature order); returns its user outputs.
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& inputs) { return run(program_, inputs, opts_); }

  /// forward on the tensors given: `m(x, y)`.
  template <class... Tensors>
  std::vector<at::Tensor> operator()(const Tensors&... xs) {
    return forward(std::vector<at::Tensor>{xs...});
  }

  /// The structured call: `m->as<at::Tensor(at::Tensor, at::Tensor)>()(x, y)` (run/callable.hpp),
  /// bound to this module's program (valid while the module lives).
  template <class Sig>
  [[nodiscard]] callable<Sig> as() const {
    return callable<Sig>(program_).with(opts_);
  }

  /// Options for every forward (guards on by default).
  program_module& with(run_options o) {
    opts_ = o;
    return *this;
  }

  /// The program, its state the module's tensors: save it (xport::save) to hand the trained
  /// weights to torch.export.load.
  [[nodiscard]] const exported_program& program() const noexcept { return program_; }

  /// The mode the program was exported in; empty when no call depends on it.
  [[nodiscard]] std::optional<bool> exported_training() const {
    return mode_ ? std::optional<bool>(mode_->training) : std::nullopt;
  }

  void train(bool on = true) override {
    if (mode_ && mode_->training != on)
      throw error("xport.module.mode",
                  std::string("program_module::") + (on ? "train()" : "eval()") + ": the program was exported in " +
                      (mode_->training ? "train" : "eval") + " mode, and call " + mode_->node +
                      " keeps that mode in the graph (batch statistics, dropout). A program's mode is fixed at export: "
                      "export the module again after module->" + (on ? "train()" : "eval()") +
                      ", or keep this mode (gradients flow in either)");
    torch::nn::Module::train(on);
  }

  void to(torch::Device device, bool non_blocking = false) override {
    torch::nn::Module::to(device, non_blocking);  // set_data: the registered tensors stay the same objects
    detail::move_rest_of_program(program_, device, non_blocking);
  }
  void to(torch::Dtype dtype, bool /*non_blocking*/ = false) override {
    detail::check_state_dtype(program_, dtype, "program_module", "");
  }
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override {
    detail::check_state_dtype(program_, dtype, "program_module", "");
    to(device, non_blocking);
  }

 private:
  exported_program program_;
  std::optional<detail::exported_mode> mode_;
  run_options opts_;
};

XPORT_END_NAMESPACE
#include <xport/package.hpp>
// #include <xport/serde/package_module.hpp>
// xport/serde/package_module.hpp: a package of programs (serde/package.hpp) as one torch::nn::Module,
// a TorchScript module's methods again: one state, registered once, that every method reads and
// torch::optim trains; forward and the other methods run their programs by name; a method exported
// in both modes switches program on train()/eval(). Opt-in (xport/train.hpp): it parses torch::nn.

#include <map>       // std::map
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include <torch/nn/module.h>

// #include <xport/config.hpp>
// #include <xport/error.hpp>
// #include <xport/run/module.hpp>
// #include <xport/serde/package.hpp>

XPORT_BEGIN_NAMESPACE

/// A package as a torch::nn::Module, made by `pkg.module()`: its programs are the module's methods.
///
///     auto m = xport::load_package("codec.pt2").module();     // #include <xport/train.hpp>
///     auto y = m->forward({x});                                  // the program "forward"
///     auto z = m->run_method("encode", {x});                     // the program "encode"
///     torch::optim::AdamW opt(m->parameters(), 1e-3);           // trains every method's weights
///
/// - Method `M` is the program named `M`, or the pair `M.train` / `M.eval`: the one whose graph
///   runs in the module's mode (read from its calls, as program_module reads it) runs, so
///   `m->train()` / `m->eval()` switch programs. A program that no call makes mode-dependent runs
///   in either mode; one that runs in the other mode only is refused when called
///   (`xport.module.mode`, naming the program and the call that fixes its mode). The module starts
///   in the mode of its forward (of its first mode-dependent program otherwise; eval when only
///   pairs are mode-dependent).
/// - The state is registered once, under its FQNs: a tensor the programs share (a package xport
///   wrote, export_methods) is one parameter; an FQN two programs hold as equal copies (torch's
///   package_pt2 writes each program's own) becomes one tensor again, so what training changes
///   every method reads; two different tensors under one FQN are refused (`xport.module.state`).
/// - to(device) moves every program; to(dtype) is refused (a program's dtypes are fixed at export).
class package_module : public torch::nn::Module {
 public:
  explicit package_module(const package& pkg)
      : torch::nn::Module("xport::package_module"), extra_files_(pkg.extra_files), other_records_(pkg.other_records) {
    if (pkg.programs.empty())
      throw error("xport.module.empty", "package_module: the package has no programs (load_package read none, or "
                                        "none were added): a module needs at least one method");
    detail::module_state state(*this);
    for (const auto& [name, p] : pkg.programs) {
      auto& slot = programs_.emplace(name, p.clone()).first->second;
      state.adopt(slot, name);
      const auto [method, named] = detail::serde::method_of(name);
      const auto mode = detail::exported_mode_of(slot.graph());
      if (named && (!mode || mode->training != *named))
        throw error("xport.module.mode",
                    "program '" + name + "' is named for " + (*named ? "train" : "eval") + " mode but " +
                        (mode ? "was exported in " + std::string(mode->training ? "train" : "eval") + " mode (call " +
                                    mode->node + ")"
                              : std::string("no call of it depends on the mode: name it '") + method + "'") +
                        "; name a program '<method>.train' or '<method>.eval' after the mode it was exported in");
      auto& variants = methods_[method];
      for (const auto& v : variants)
        if (mode && v.training == mode->training)
          throw error("xport.module.mode", "programs '" + v.program + "' and '" + name + "' are both method '" + method +
                                               "' in " + (mode->training ? "train" : "eval") +
                                               " mode: keep one (a method is '<method>', or '<method>.train' and "
                                               "'<method>.eval')");
      variants.push_back({name, mode ? std::optional<bool>(mode->training) : std::nullopt});
    }
    torch::nn::Module::train(initial_mode());
  }

  /// Runs the program of `method` for the module's mode on its user inputs (tensors, in
  /// signature order); returns its user outputs.
  std::vector<at::Tensor> run_method(const std::string& method, const std::vector<at::Tensor>& inputs) {
    return run(program(method), inputs, opts_);
  }

  /// The method "forward".
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& inputs) { return run_method("forward", inputs); }

  /// forward on the tensors given: `m(x, y)`.
  template <class... Tensors>
  std::vector<at::Tensor> operator()(const Tensors&... xs) {
    return forward(std::vector<at::Tensor>{xs...});
  }

  /// The structured call of a method for the module's mode now:
  /// `m->as<at::Tensor(at::Tensor)>("encode")(x)` (valid while the module lives, in this mode).
  template <class Sig>
  [[nodiscard]] callable<Sig> as(const std::string& method = "forward") const {
    return callable<Sig>(program(method)).with(opts_);
  }

  /// Options for every call (guards on by default).
  package_module& with(run_options o) {
    opts_ = o;
    return *this;
  }

  /// The methods' names (`forward`, `encode`: a pair `forward.train` / `forward.eval` is one), in order.
  [[nodiscard]] std::vector<std::string> methods() const {
    std::vector<std::string> out;
    for (const auto& [name, v] : methods_) out.push_back(name);
    return out;
  }

  /// The program `method` runs in the module's mode (its state the module's tensors).
  [[nodiscard]] const exported_program& program(const std::string& method) const {
    const auto it = methods_.find(method);
    if (it == methods_.end())
      throw error("xport.package.name", "package_module: no method '" + method + "'; it has " +
                                            detail::quoted_list(methods()));
    const bool mode = is_training();
    for (const auto& v : it->second)  // the program for this mode, else one that runs in either
      if (v.training == mode) return programs_.at(v.program);
    for (const auto& v : it->second)
      if (!v.training) return programs_.at(v.program);
    const auto& only = it->second.front();
    const auto& p = programs_.at(only.program);
    throw error("xport.module.mode",
                "package_module: method '" + method + "' has no program for " + (mode ? "train" : "eval") +
                    " mode: program '" + only.program + "' was exported in " + (mode ? "eval" : "train") +
                    " mode, and call " + detail::exported_mode_of(p.graph())->node +
                    " keeps that mode in the graph. Call module->" + (mode ? "eval()" : "train()") +
                    " first, or export the method in this mode too and save it as '" + method +
                    (mode ? ".train'" : ".eval'") + " beside '" + method + (mode ? ".eval'" : ".train'"));
  }

  /// The programs by name, their state the module's tensors.
  [[nodiscard]] const std::map<std::string, exported_program>& programs() const noexcept { return programs_; }

  /// The package again, its programs' state the module's tensors (the trained weights) and the
  /// extra files and kept records it was made with: `xport::save(m->to_package(), path)`.
  [[nodiscard]] package to_package() const {
    package out;
    for (const auto& [name, p] : programs_) out.programs.emplace(name, p.clone());
    out.extra_files = extra_files_;
    out.other_records = other_records_;
    return out;
  }

  void train(bool on = true) override {
    bool any = false;
    for (const auto& [method, variants] : methods_)
      for (const auto& v : variants) any = any || !v.training || *v.training == on;
    if (!any)
      throw error("xport.module.mode", std::string("package_module::") + (on ? "train()" : "eval()") +
                                           ": every program of the package was exported in " + (on ? "eval" : "train") +
                                           " mode, so no method could run. A program's mode is fixed at export: export "
                                           "the methods again in this mode and save them beside the others as "
                                           "'<method>." + (on ? "train'" : "eval'"));
    torch::nn::Module::train(on);
  }

  void to(torch::Device device, bool non_blocking = false) override {
    torch::nn::Module::to(device, non_blocking);  // set_data: the registered tensors stay the same objects
    for (auto& [name, p] : programs_) detail::move_rest_of_program(p, device, non_blocking);
  }
  void to(torch::Dtype dtype, bool /*non_blocking*/ = false) override { refuse_dtype(dtype); }
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override {
    refuse_dtype(dtype);
    to(device, non_blocking);
  }

 private:
  struct variant {
    std::string program;
    std::optional<bool> training;  // the exported mode; empty when no call depends on it
  };

  [[nodiscard]] bool initial_mode() const {
    if (const auto it = methods_.find("forward"); it != methods_.end())
      for (const auto& v : it->second)
        if (v.training && !detail::serde::method_of(v.program).second) return *v.training;
    for (const auto& [method, variants] : methods_)
      for (const auto& v : variants)
        if (v.training && !detail::serde::method_of(v.program).second) return *v.training;
    return false;
  }

  void refuse_dtype(torch::Dtype dtype) const {
    for (const auto& [name, p] : programs_) detail::check_state_dtype(p, dtype, "package_module", name);
  }

  std::map<std::string, exported_program> programs_;
  std::map<std::string, std::vector<variant>> methods_;
  std::map<std::string, std::string> extra_files_, other_records_;
  run_options opts_;
};

XPORT_END_NAMESPACE
