// xport/run/graphs.hpp: what the engine needs to capture a planned run into a graph and replay
// it (engine_options::cuda_graphs). The engine holds the logic (when to capture, the static
// input and output buffers, the fallbacks); the capture itself is a backend's, installed by
// <xport/cuda_graphs.hpp> in a CUDA build of LibTorch (at::cuda::CUDAGraph), so this header and
// the engine parse without CUDA's headers.
#pragma once

#include <functional>  // std::function
#include <memory>      // std::unique_ptr
#include <string>      // std::string

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

/// The installed backend (<xport/cuda_graphs.hpp> installs CUDA's), or null.
inline const graph_backend* installed_graph_backend = nullptr;

}  // namespace detail
XPORT_END_NAMESPACE
