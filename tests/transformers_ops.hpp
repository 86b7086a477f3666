// C++ kernels for the operators Hugging Face transformers defines in Python (torch.library), as a
// LibTorch user writes them to run such a program: a program torch.export wrote calls them by
// name, and xport loads it once the process has registered them (load() names the missing ones
// and says so). One today: the grouped matmul transformers' mixture-of-experts layers (Mixtral)
// call, `transformers::grouped_mm_fallback`, ported from transformers/integrations/moe.py
// (same schema, same calls: the same results bit for bit).
//
// Registered by load_transformers_ops(), once per process (see custom_ops.hpp for why not with
// TORCH_LIBRARY's static registration in a header).
#pragma once

#include <memory>
#include <vector>

#include <torch/library.h>
#include <torch/torch.h>

namespace xport_test {

namespace transformers_kernels {

/// Rows [offs[i-1], offs[i]) of `input` (sorted by expert) times expert i's weight.
inline at::Tensor grouped_mm_fallback(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offs) {
  // below autograd, as torch.library.custom_op runs its Python function (mm's out= form is not
  // differentiable; the op's autograd formula is its own)
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  auto output = at::zeros({input.size(0), weight.size(2)}, input.options());
  const auto ends = offs.to(at::kCPU, at::kLong).contiguous();  // one host sync, as the Python one
  std::int64_t start = 0;
  for (std::int64_t i = 0; i < ends.numel(); ++i) {
    const auto end = ends.data_ptr<std::int64_t>()[i];
    if (start == end) continue;
    auto out = output.slice(0, start, end);
    at::mm_out(out, input.slice(0, start, end), weight[i]);
    start = end;
  }
  return output;
}

inline at::Tensor grouped_mm_fallback_meta(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offs) {
  TORCH_CHECK(input.dim() == 2 && weight.dim() == 3 && offs.dim() == 1,
              "transformers::grouped_mm_fallback: input must be 2-d, weight 3-d and offs 1-d");
  TORCH_CHECK(offs.size(0) == weight.size(0) && input.size(1) == weight.size(1),
              "transformers::grouped_mm_fallback: offs, weight and input do not match");
  return at::empty({input.size(0), weight.size(2)}, input.options());
}

}  // namespace transformers_kernels

/// Registers the `transformers` operators (schemas, CPU and Meta kernels) once per process.
inline void load_transformers_ops() {
  static const auto libraries = [] {
    namespace k = transformers_kernels;
    std::vector<std::unique_ptr<torch::Library>> libs;
    auto& def = *libs.emplace_back(std::make_unique<torch::Library>(torch::Library::DEF, "transformers", c10::nullopt, __FILE__, __LINE__));
    def.def("grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor");
    auto& cpu = *libs.emplace_back(std::make_unique<torch::Library>(torch::Library::IMPL, "transformers", c10::DispatchKey::CPU, __FILE__, __LINE__));
    cpu.impl("grouped_mm_fallback", &k::grouped_mm_fallback);
    auto& meta = *libs.emplace_back(std::make_unique<torch::Library>(torch::Library::IMPL, "transformers", c10::DispatchKey::Meta, __FILE__, __LINE__));
    meta.impl("grouped_mm_fallback", &k::grouped_mm_fallback_meta);
    return libs;
  }();
  (void)libraries;
}

}  // namespace xport_test
