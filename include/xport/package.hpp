// xport/package.hpp: several programs in one .pt2 archive, an opt-in entry beside the umbrella
// header, in the layout torch's package_pt2 / load_pt2 write and read (serde/package.hpp):
//
//   auto fwd = xport::export_program(net, std::tuple{x});
//   auto enc = xport::export_method(net, [](CodecImpl& m, const at::Tensor& x) { return m.encode(x); },
//                                   std::tuple{x});
//   xport::save({{"forward", fwd}, {"encode", enc}}, "codec.pt2");   // one storage per weight
//   auto pkg = xport::load_package("codec.pt2");                      // pkg.at("encode"), ...
//   xport::list_models("codec.pt2");                                  // {"encode", "forward"}
#pragma once

#include <string>       // std::string
#include <tuple>        // std::tuple
#include <utility>      // std::forward

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

XPORT_END_NAMESPACE
