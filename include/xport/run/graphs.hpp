// xport/run/graphs.hpp: what the engine needs to capture a planned run into a graph and replay
// it (engine_options::cuda_graphs). The engine holds the logic (when to capture, the static
// input and output buffers, the fallbacks); the capture itself is a backend's, installed by
// <xport/cuda_graphs.hpp> in a CUDA build of LibTorch (at::cuda::CUDAGraph), so this header and
// the engine parse without CUDA's headers.
#pragma once

#include <algorithm>   // std::sort
#include <cstdint>     // std::int64_t
#include <functional>  // std::function
#include <memory>      // std::unique_ptr
#include <optional>    // std::optional
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Device.h>

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// One captured run: replaying it runs the same kernels on the same memory again.
class captured_run {
 public:
  virtual ~captured_run() = default;
  virtual void replay() = 0;
};

/// Captures runs on a device kind (CUDA): `capture(device, body)` runs `body` once as warm-up,
/// then again under capture, and returns the graph. It throws when the body does what capture
/// forbids (a host sync, a CPU tensor read on the host); the engine then runs the plan without.
class graph_backend {
 public:
  virtual ~graph_backend() = default;
  [[nodiscard]] virtual bool supports(const c10::Device& device) const = 0;
  [[nodiscard]] virtual std::unique_ptr<captured_run> capture(const c10::Device& device,
                                                              const std::function<void()>& body) const = 0;
  [[nodiscard]] virtual std::string name() const = 0;
};

/// `t` without its broadcast: each dimension of stride 0 narrowed to one element, so the
/// elements it holds are each held once (a graph's static input is copied in through this).
inline at::Tensor without_broadcast(at::Tensor t) {
  for (std::int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) t = t.narrow(d, 0, 1);
  return t;
}

/// A graph's static copy of input `t`, with its sizes and strides (a plan is made for them):
/// fresh memory holding its elements once, broadcast again where `t` is (an expand()ed input).
/// Null when `t`'s elements overlap otherwise (an as_strided view): no copy can keep its strides.
inline std::optional<at::Tensor> static_copy(const at::Tensor& t) {
  const auto base = without_broadcast(t);
  // no two indices at one offset: sorted by stride, each dimension steps past all the smaller
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, size) of sizes > 1
  for (std::int64_t d = 0; d < base.dim(); ++d)
    if (base.size(d) > 1) dims.emplace_back(base.stride(d), base.size(d));
  std::sort(dims.begin(), dims.end());
  std::int64_t reach = 0;  // the largest offset the smaller dimensions make
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return std::nullopt;
    reach += stride * (size - 1);
  }
  auto copy = at::empty_strided(base.sizes(), base.strides(), base.options());
  copy.copy_(base);
  return copy.expand(t.sizes());
}

/// The installed backend (<xport/cuda_graphs.hpp> installs CUDA's), or null.
inline const graph_backend* installed_graph_backend = nullptr;

}  // namespace detail
XPORT_END_NAMESPACE
