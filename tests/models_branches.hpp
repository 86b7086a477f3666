// A network with independent branches, for the engine's parallel runs: GoogLeNet's Inception
// module (Szegedy et al., "Going deeper with convolutions"), four towers over one input (1x1;
// 1x1 then 3x3; 1x1 then 5x5; 3x3 max pool then 1x1), each conv followed by BatchNorm and ReLU
// as in Inception-v2, concatenated on channels. InceptionNet stacks a stem and two modules
// (GoogLeNet's 3a and 3b widths) before a pool and a classifier. Used by test_engine.cpp and
// bench_interpreter.cpp.
#pragma once

#include <torch/torch.h>

namespace xport_models {

struct ConvBNImpl : torch::nn::Module {
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  ConvBNImpl(std::int64_t in, std::int64_t out, std::int64_t kernel) {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).padding(kernel / 2).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm2d(out));
  }
  torch::Tensor forward(torch::Tensor x) { return torch::relu(bn(conv(x))); }
};
TORCH_MODULE(ConvBN);

struct InceptionImpl : torch::nn::Module {
  ConvBN b1{nullptr};
  torch::nn::Sequential b2, b3, b4;
  InceptionImpl(std::int64_t in, std::int64_t c1, std::int64_t c3r, std::int64_t c3, std::int64_t c5r, std::int64_t c5,
                std::int64_t pool)
      : b2(ConvBN(in, c3r, 1), ConvBN(c3r, c3, 3)),
        b3(ConvBN(in, c5r, 1), ConvBN(c5r, c5, 5)),
        b4(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(1).padding(1)), ConvBN(in, pool, 1)) {
    b1 = register_module("branch1", ConvBN(in, c1, 1));
    register_module("branch2", b2);
    register_module("branch3", b3);
    register_module("branch4", b4);
  }
  torch::Tensor forward(torch::Tensor x) {
    return torch::cat({b1(x), b2->forward(x), b3->forward(x), b4->forward(x)}, 1);
  }
};
TORCH_MODULE(Inception);

struct InceptionNetImpl : torch::nn::Module {
  ConvBN stem{nullptr};
  Inception a{nullptr}, b{nullptr};
  torch::nn::Linear fc{nullptr};
  explicit InceptionNetImpl(std::int64_t width = 192) {
    stem = register_module("stem", ConvBN(3, width, 3));
    a = register_module("inception3a", Inception(width, 64, 96, 128, 16, 32, 32));
    b = register_module("inception3b", Inception(256, 128, 128, 192, 32, 96, 64));
    fc = register_module("fc", torch::nn::Linear(480, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = b(a(stem(x)));
    return fc(torch::flatten(torch::adaptive_avg_pool2d(x, {1, 1}), 1));
  }
};
TORCH_MODULE(InceptionNet);

}  // namespace xport_models
