// What every sample in the docs may use without defining it (tools/doc_samples.py, the ctest
// compile_doc_samples): xport, LibTorch, and the names the prose gives a meaning ("x is an
// input", "model is a torch::nn module"), declared here and never run: the samples are compiled
// (-fsyntax-only), so a renamed function or a changed signature fails CI, not a reader.
#pragma once

#include <iostream>
#include <memory>
#include <memory_resource>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include <xport/engine.hpp>
#include <xport/train.hpp>
#include <xport/xport.hpp>

namespace doc_prelude {

/// The model of the samples: any torch::nn module with forward(Tensor) -> Tensor.
struct MyNetImpl : torch::nn::Module {
  torch::nn::Linear fc{8, 4};
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
};
TORCH_MODULE(MyNet);

}  // namespace doc_prelude

using doc_prelude::MyNet;
using doc_prelude::MyNetImpl;

// inputs (never y0/y1/j0/j1: <math.h> declares Bessel functions by those names)
extern at::Tensor x, y, a0, a1, xs, h0, n, steps, input_ids, attention_mask;
// modules
extern std::shared_ptr<MyNetImpl> net, model;
extern torch::nn::Linear lin, inp, rec, out, gate;
// programs
extern xport::exported_program ep, inf, program;
// training data
extern std::vector<std::pair<at::Tensor, at::Tensor>> batches;
// a memory resource
extern std::pmr::monotonic_buffer_resource arena;
