// xport/serde/package_module.hpp: a package of programs (serde/package.hpp) as one torch::nn::Module,
// a TorchScript module's methods again: one state, registered once, that every method reads and
// torch::optim trains; forward and the other methods run their programs by name; a method exported
// in both modes switches program on train()/eval(). Opt-in (xport/train.hpp): it parses torch::nn.
#pragma once

#include <map>       // std::map
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include <torch/nn/module.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/run/module.hpp>
#include <xport/serde/package.hpp>

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
