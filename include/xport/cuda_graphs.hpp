// xport/cuda_graphs.hpp: CUDA graphs for the engine (engine_options::cuda_graphs), an opt-in
// entry for CUDA builds of LibTorch: it parses CUDA's runtime headers (at::cuda::CUDAGraph), so
// include it in one translation unit of a program that links torch_cuda. Including it installs
// the capture backend the engine uses; without it a plan asked for a graph runs without one and
// says so in plan_info().graph_fallback.
//
// A capture runs the planned run once on a side stream as warm-up (cuBLAS and cuDNN set up
// their workspaces there), then again under capture into a graph whose memory pool is its own;
// the caller's stream waits for both. Replays launch on the caller's current stream. Random ops
// draw from CUDA's generator, which registers itself with each capture (a replay advances its
// offset as eager would).
#pragma once

#include <functional>  // std::function
#include <memory>      // std::unique_ptr, std::make_unique
#include <string>      // std::string

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <xport/engine.hpp>
#include <xport/run/graphs.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

class cuda_captured_run final : public captured_run {
 public:
  cuda_captured_run(const c10::Device& device, const std::function<void()>& body) : device_(device) {
    c10::cuda::CUDAGuard guard(device);
    const auto caller = c10::cuda::getCurrentCUDAStream(device.index());
    auto side = c10::cuda::getStreamFromPool(false, device.index());
    caller.synchronize();  // the static inputs were written on the caller's stream
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      body();  // warm-up, outside the capture
      side.synchronize();
      // thread-local capture: another thread's CUDA calls (its own capture, an allocation) go on
      graph_.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        body();
      } catch (...) {
        try {
          graph_.capture_end();
        } catch (...) {  // the capture is invalid already; the first error is the one to report
        }
        throw;
      }
      graph_.capture_end();
    }
    side.synchronize();
  }

  void replay() override {
    c10::cuda::CUDAGuard guard(device_);
    graph_.replay();
  }

 private:
  c10::Device device_;
  at::cuda::CUDAGraph graph_;
};

class cuda_graph_backend final : public graph_backend {
 public:
  [[nodiscard]] bool supports(const c10::Device& device) const override { return device.is_cuda(); }
  [[nodiscard]] std::unique_ptr<captured_run> capture(const c10::Device& device,
                                                      const std::function<void()>& body) const override {
    return std::make_unique<cuda_captured_run>(device, body);
  }
  [[nodiscard]] std::string name() const override { return "CUDA"; }
};

inline const cuda_graph_backend cuda_graphs_backend;
inline const bool cuda_graphs_installed = (installed_graph_backend = &cuda_graphs_backend, true);

}  // namespace detail
XPORT_END_NAMESPACE
