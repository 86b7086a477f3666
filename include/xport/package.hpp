// xport/package.hpp: several programs in one .pt2 archive, an opt-in entry beside the umbrella
// header, in the layout torch's package_pt2 / load_pt2 write and read (serde/package.hpp):
//
//   auto fwd = xport::export_program(net, std::tuple{x});
//   auto enc = xport::export_method(net, [](CodecImpl& m, const at::Tensor& x) { return m.encode(x); },
//                                   std::tuple{x});
//   xport::save({{"forward", fwd}, {"encode", enc}}, "codec.pt2");   // one storage per weight
//   auto pkg = xport::load_package("codec.pt2");                      // pkg.at("encode"), ...
//   xport::list_models("codec.pt2");                                  // {"encode", "forward"}
//
//   auto pkg = xport::export_methods(net, xport::method("forward", std::tuple{x}),  // several at once,
//                                    xport::method("encode", encode_fn, std::tuple{x}));  // one state
#pragma once

#include <string>       // std::string
#include <tuple>        // std::tuple
#include <type_traits>  // std::decay_t
#include <utility>      // std::forward
#include <vector>       // std::vector

#include <xport/xport.hpp>
#include <xport/serde/package.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {
/// A torch::nn module seen through one of its methods: export_program lifts the module's
/// parameters and buffers under their names and calls `fn(module, args...)` for forward.
template <class M, class Fn>
struct method_view {
  M& m;
  Fn& fn;
  [[nodiscard]] auto& impl() const { return module_impl(m); }
  auto named_parameters(bool recurse) const { return impl().named_parameters(recurse); }
  auto named_buffers(bool recurse) const { return impl().named_buffers(recurse); }
  auto named_modules(const std::string& prefix, bool include_self) const { return impl().named_modules(prefix, include_self); }
  [[nodiscard]] std::string name() const { return impl().name(); }
  template <class... A>
  decltype(auto) forward(A&&... a) const {
    return fn(impl(), std::forward<A>(a)...);
  }
};
}  // namespace detail

/// Exports one method of a torch::nn module (any entry point, `fn(module, args...)`), its
/// parameters and buffers lifted under their names as for forward: the programs of one module's
/// methods hold the same tensors, so a package (save(program_refs, path)) writes them once and
/// load_package gives them back shared, as a TorchScript module's methods share them.
template <class Policy = non_strict, class M, class Fn, class... Args>
exported_program export_method(M& module, Fn&& fn, const std::tuple<Args...>& args, const export_options& opts = {}) {
  static_assert(detail::module_like<M>, "xport::export_method: the first argument is a torch::nn module");
  static_assert(std::is_same_v<Policy, non_strict>,
                "xport::export_method: torch::nn modules run on at::Tensor; export them with the non_strict policy");
  detail::method_view<M, std::remove_reference_t<Fn>> view{module, fn};
  return export_program<Policy>(view, args, opts);
}

/// One entry point for export_methods: its name in the package, `fn(module, args...)`, example
/// arguments and options (dynamic shapes...). Made by xport::method.
template <class Fn, class... Args>
struct method_entry {
  std::string name;
  Fn fn;
  std::tuple<Args...> args;
  export_options opts;
};

namespace detail {
/// The module's forward, as a method: `fn(module, args...)`.
struct call_forward {
  template <class Impl, class... A>
  decltype(auto) operator()(Impl& m, A&&... a) const {
    return m.forward(std::forward<A>(a)...);
  }
};

/// The training flag of every module of `impl`'s tree, to put back after an export in one mode.
template <class Impl>
class mode_restorer {
 public:
  explicit mode_restorer(Impl& impl) : impl_(impl) {
    for (const auto& m : impl.modules(/*include_self=*/true)) modes_.push_back(m->is_training());
  }
  mode_restorer(const mode_restorer&) = delete;
  mode_restorer& operator=(const mode_restorer&) = delete;
  ~mode_restorer() {
    std::size_t i = 0;
    for (const auto& m : impl_.modules(/*include_self=*/true))
      if (i < modes_.size()) m->train(modes_[i++]);  // in pre-order: a submodule set after its parent
  }

 private:
  Impl& impl_;
  std::vector<bool> modes_;
};

}  // namespace detail

/// An entry point `fn(module, args...)` named `name`, for export_methods.
template <class Fn, class... Args>
method_entry<std::decay_t<Fn>, Args...> method(std::string name, Fn&& fn, std::tuple<Args...> args,
                                               export_options opts = {}) {
  return {std::move(name), std::forward<Fn>(fn), std::move(args), std::move(opts)};
}

/// The module's forward named `name`, for export_methods.
template <class... Args>
method_entry<detail::call_forward, Args...> method(std::string name, std::tuple<Args...> args, export_options opts = {}) {
  return {std::move(name), detail::call_forward{}, std::move(args), std::move(opts)};
}

/// Exports several entry points of one torch::nn module into a package, against one state: the
/// programs hold the module's tensors, so saving the package writes each once and its module
/// (`pkg.module()`, <xport/train.hpp>) is one set of parameters, as a TorchScript module's methods.
///
///     auto pkg = xport::export_methods(net, xport::method("forward.train", std::tuple{x}),
///                                      xport::method("forward.eval", std::tuple{x}),
///                                      xport::method("encode", encode_fn, std::tuple{x}, dynamic));
///
/// An entry named `<method>.train` or `<method>.eval` is exported with the module in that mode
/// (every submodule's mode is put back after), so a pair gives a module that train()/eval() switch.
/// The names are checked (unique, usable as archive names) before anything is exported.
template <class Policy = non_strict, class M, class... Entries>
package export_methods(M& module, const Entries&... entries) {
  static_assert(sizeof...(Entries) > 0, "xport::export_methods: name at least one method (xport::method(...))");
  std::vector<std::string> names;
  (names.push_back(entries.name), ...);
  for (std::size_t i = 0; i < names.size(); ++i) {
    detail::serde::check_record_name(names[i], "method name", false);
    for (std::size_t j = 0; j < i; ++j)
      if (names[j] == names[i])
        throw error("xport.save.name", "export_methods: method name '" + names[i] + "' is given twice: each entry of "
                                       "the package needs its own name");
  }
  package out;
  const auto one = [&](const auto& e) {
    auto& impl = detail::module_impl(module);
    detail::mode_restorer<std::remove_reference_t<decltype(impl)>> restore(impl);
    if (const auto mode = detail::serde::method_of(e.name).second) impl.train(*mode);
    auto fn = e.fn;
    out.programs.emplace(e.name, export_method<Policy>(module, fn, e.args, e.opts));
  };
  (one(entries), ...);
  return out;
}

XPORT_END_NAMESPACE
