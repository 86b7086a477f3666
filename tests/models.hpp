// Real architectures written with the C++ torch::nn API, the way LibTorch users write them:
// an MLP, LeNet-5, a DCGAN generator and discriminator, ResNet-18, a Transformer encoder layer,
// an LSTM and a GRU, an embedding + mean-pool text classifier, and a gated pair of experts that
// picks one with xport::cond (torch.cond). Shared by the tests and the benchmarks. Each comes
// with an example input (small sizes, so tests stay fast): for_each_model is the one table of them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <xport/xport.hpp>

namespace xport_models {

namespace nn = torch::nn;

struct MLPImpl : nn::Module {
  nn::Sequential layers;
  MLPImpl()
      : layers(nn::Linear(16, 32), nn::ReLU(), nn::Linear(32, 32), nn::ReLU(), nn::Linear(32, 4)) {
    register_module("layers", layers);
  }
  torch::Tensor forward(torch::Tensor x) { return layers->forward(x); }
};
TORCH_MODULE(MLP);

struct LeNetImpl : nn::Module {
  nn::Conv2d conv1{nn::Conv2dOptions(1, 6, 5)}, conv2{nn::Conv2dOptions(6, 16, 5)};
  nn::MaxPool2d pool{nn::MaxPool2dOptions(2)};
  nn::Linear fc1{16 * 4 * 4, 120}, fc2{120, 84}, fc3{84, 10};
  nn::Dropout drop{0.5};
  LeNetImpl() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("pool", pool);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
    register_module("drop", drop);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = pool(torch::relu(conv1(x)));
    x = pool(torch::relu(conv2(x)));
    x = torch::flatten(x, 1);
    x = drop(torch::relu(fc1(x)));
    x = torch::relu(fc2(x));
    return torch::log_softmax(fc3(x), 1);
  }
};
TORCH_MODULE(LeNet);

// DCGAN (Radford et al.), scaled down: latent 16 -> 3x16x16 images.
struct GeneratorImpl : nn::Module {
  nn::Sequential net;
  GeneratorImpl()
      : net(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(16, 32, 4).stride(1).padding(0).bias(false)),
            nn::BatchNorm2d(32), nn::ReLU(true),
            nn::ConvTranspose2d(nn::ConvTranspose2dOptions(32, 16, 4).stride(2).padding(1).bias(false)),
            nn::BatchNorm2d(16), nn::ReLU(true),
            nn::ConvTranspose2d(nn::ConvTranspose2dOptions(16, 3, 4).stride(2).padding(1).bias(false)), nn::Tanh()) {
    register_module("net", net);
  }
  torch::Tensor forward(torch::Tensor z) { return net->forward(z); }
};
TORCH_MODULE(Generator);

struct DiscriminatorImpl : nn::Module {
  nn::Sequential net;
  DiscriminatorImpl()
      : net(nn::Conv2d(nn::Conv2dOptions(3, 16, 4).stride(2).padding(1).bias(false)),
            nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
            nn::Conv2d(nn::Conv2dOptions(16, 32, 4).stride(2).padding(1).bias(false)), nn::BatchNorm2d(32),
            nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
            nn::Conv2d(nn::Conv2dOptions(32, 1, 4).stride(1).padding(0).bias(false)), nn::Sigmoid()) {
    register_module("net", net);
  }
  torch::Tensor forward(torch::Tensor x) { return net->forward(x).flatten(1); }
};
TORCH_MODULE(Discriminator);

// ResNet-18 (He et al.): basic blocks, 1x1 downsample shortcuts, adaptive average pool.
struct BasicBlockImpl : nn::Module {
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential downsample{nullptr};
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).stride(1).padding(1).bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out)
      downsample = register_module(
          "downsample", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                       nn::BatchNorm2d(out)));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto identity = downsample ? downsample->forward(x) : x;
    auto out = torch::relu(bn1(conv1(x)));
    out = bn2(conv2(out));
    return torch::relu(out + identity);
  }
};
TORCH_MODULE(BasicBlock);

struct ResNet18Impl : nn::Module {
  nn::Conv2d conv1{nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)};
  nn::BatchNorm2d bn1{64};
  nn::MaxPool2d maxpool{nn::MaxPool2dOptions(3).stride(2).padding(1)};
  nn::Sequential layer1, layer2, layer3, layer4;
  nn::AdaptiveAvgPool2d avgpool{nn::AdaptiveAvgPool2dOptions({1, 1})};
  nn::Linear fc{512, 1000};
  ResNet18Impl()
      : layer1(BasicBlock(64, 64, 1), BasicBlock(64, 64, 1)),
        layer2(BasicBlock(64, 128, 2), BasicBlock(128, 128, 1)),
        layer3(BasicBlock(128, 256, 2), BasicBlock(256, 256, 1)),
        layer4(BasicBlock(256, 512, 2), BasicBlock(512, 512, 1)) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("maxpool", maxpool);
    register_module("layer1", layer1);
    register_module("layer2", layer2);
    register_module("layer3", layer3);
    register_module("layer4", layer4);
    register_module("avgpool", avgpool);
    register_module("fc", fc);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = maxpool(torch::relu(bn1(conv1(x))));
    x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
    return fc(torch::flatten(avgpool(x), 1));
  }
};
TORCH_MODULE(ResNet18);

// A Transformer encoder layer (Vaswani et al.): multi-head self-attention, LayerNorm, GELU
// feed-forward, residuals. Input [seq, batch, d_model].
struct EncoderImpl : nn::Module {
  nn::TransformerEncoderLayer layer{
      nn::TransformerEncoderLayerOptions(32, 4).dim_feedforward(64).dropout(0.1).activation(torch::kGELU)};
  EncoderImpl() { register_module("layer", layer); }
  torch::Tensor forward(torch::Tensor x) { return layer(x); }
};
TORCH_MODULE(Encoder);

struct LSTMNetImpl : nn::Module {
  nn::LSTM lstm{nn::LSTMOptions(8, 16).num_layers(2).batch_first(true)};
  nn::Linear head{16, 2};
  LSTMNetImpl() {
    register_module("lstm", lstm);
    register_module("head", head);
  }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto [out, state] = lstm(x);
    return {head(out), std::get<0>(state)};
  }
};
TORCH_MODULE(LSTMNet);

struct GRUNetImpl : nn::Module {
  nn::GRU gru{nn::GRUOptions(8, 16).num_layers(1).batch_first(true)};
  nn::Linear head{16, 2};
  GRUNetImpl() {
    register_module("gru", gru);
    register_module("head", head);
  }
  torch::Tensor forward(torch::Tensor x) {
    auto [out, h] = gru(x);
    return head(out.select(1, -1));
  }
};
TORCH_MODULE(GRUNet);

// Bag-of-embeddings text classifier: embed token ids, mean over the sequence, classify.
struct EmbeddingClassifierImpl : nn::Module {
  nn::Embedding emb{100, 16};
  nn::Linear fc{16, 3};
  EmbeddingClassifierImpl() {
    register_module("emb", emb);
    register_module("fc", fc);
  }
  torch::Tensor forward(torch::Tensor tokens) { return fc(emb(tokens).mean(1)); }
};
TORCH_MODULE(EmbeddingClassifier);

/// A gate scores the batch and xport::cond runs one of two experts on it (torch.cond): the
/// branches read the experts' parameters without being passed them, as a Python model's
/// lambdas close over `self`.
struct CondGateImpl : nn::Module {
  nn::Linear gate{16, 1}, expert_a{16, 16}, expert_b{16, 16}, head{16, 4};
  CondGateImpl() {
    register_module("gate", gate);
    register_module("expert_a", expert_a);
    register_module("expert_b", expert_b);
    register_module("head", head);
  }
  torch::Tensor forward(torch::Tensor x) {
    auto score = gate(x).mean();
    auto h = xport::cond(
        score > 0, [this](const torch::Tensor& x) { return torch::relu(expert_a(x)); },
        [this](const torch::Tensor& x) { return torch::tanh(expert_b(x)) * 2; }, std::tuple{x});
    return head(h);
  }
};
TORCH_MODULE(CondGate);

/// A recurrent refinement run for as many steps as the input `steps` asks (xport::while_loop, as
/// tests/python/pt2_fixtures.py WhileLoopRefine does in Python): the loop carries a count and
/// the state; its body reads the module's parameters and the input, lifted to additional inputs.
struct LoopRefinerImpl : nn::Module {
  nn::Linear lin{4, 4};
  LoopRefinerImpl() { register_module("lin", lin); }
  torch::Tensor forward(torch::Tensor x, torch::Tensor steps) {
    auto [i, h] = xport::while_loop(
        [&](const torch::Tensor& i, const torch::Tensor&) { return i < steps; },
        [&](const torch::Tensor& i, const torch::Tensor& h) { return std::tuple{i + 1, torch::tanh(lin(h)) + x}; },
        std::tuple{torch::zeros({}, torch::kLong), torch::zeros_like(x)});
    return h * 2;
  }
};
TORCH_MODULE(LoopRefiner);

/// An Elman RNN over a sequence (xport::scan, as tests/python/pt2_fixtures.py ScanRNN does in
/// Python): the carry is the hidden state, each step's y its projection; the combine function
/// reads the module's parameters, lifted to additional inputs. `xs` is [time, batch, features].
struct ScanRNNImpl : nn::Module {
  nn::Linear inp{3, 4}, rec{4, 4}, out{4, 2};  // `in` would be a Python keyword in torch's code
  ScanRNNImpl() {
    register_module("inp", inp);
    register_module("rec", rec);
    register_module("out", out);
  }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor h0, torch::Tensor xs) {
    return xport::scan(
        [&](const torch::Tensor& h, const torch::Tensor& x) {
          auto next = torch::tanh(inp(x) + rec(h));
          return std::tuple{next, out(next)};
        },
        h0, xs);
  }
};
TORCH_MODULE(ScanRNN);

/// A gated mixture of experts routing each token to its best expert with nonzero (top-1), the
/// twin of tests/python/pt2_fixtures.py's MoE: each expert sees as many rows as the data routes
/// to it, a size only the data knows (u0, u1, u2 in the program).
struct MoEImpl : nn::Module {
  nn::Linear gate{8, 3};
  nn::ModuleList experts;
  MoEImpl() {
    register_module("gate", gate);
    for (int i = 0; i < 3; ++i) experts->push_back(nn::Sequential(nn::Linear(8, 16), nn::GELU(), nn::Linear(16, 8)));
    register_module("experts", experts);
  }
  torch::Tensor forward(torch::Tensor x) {
    const auto [weight, choice] = torch::softmax(gate(x), -1).max(-1);
    auto out = torch::zeros_like(x);
    for (std::size_t i = 0; i < experts->size(); ++i) {
      const auto idx = torch::nonzero(choice == static_cast<std::int64_t>(i)).squeeze(-1);
      const auto y = experts->ptr<nn::SequentialImpl>(i)->forward(x.index({idx}));
      out = out.index_add(0, idx, y * weight.index({idx}).unsqueeze(-1));
    }
    return out;
  }
};
TORCH_MODULE(MoE);

/// The suite's table of plain models (no control flow, no data-dependent sizes), one row each:
/// `f(title, key, module, example)` with a fresh module and an example input. `key` is the
/// snake-case name archives are written under (tests/python reads them by it).
template <class F>
void for_each_model(F&& f) {
  f("MLP", "mlp", MLP(), torch::randn({5, 16}));
  f("LeNet", "lenet", LeNet(), torch::randn({2, 1, 28, 28}));
  f("DCGAN G", "generator", Generator(), torch::randn({2, 16, 1, 1}));
  f("DCGAN D", "discriminator", Discriminator(), torch::randn({2, 3, 16, 16}));
  f("ResNet-18", "resnet18", ResNet18(), torch::randn({2, 3, 32, 32}));
  f("Transformer", "encoder", Encoder(), torch::randn({5, 2, 32}));
  f("LSTM", "lstm", LSTMNet(), torch::randn({2, 5, 8}));
  f("GRU", "gru", GRUNet(), torch::randn({2, 5, 8}));
  f("embedding", "embedding", EmbeddingClassifier(), torch::randint(100, {4, 7}, torch::kLong));
}

// Aggregates registered as pytree node types (torch.export.register_dataclass's C++ side);
// tests/python/pytree_types.py registers their Python twins under the same names.
struct attn_in {
  at::Tensor x;
  at::Tensor mask;
};
struct attn_out {
  at::Tensor hidden;
  std::optional<at::Tensor> weights;  // None in attend: named in the context, not a child
  std::vector<at::Tensor> extras;
};
inline attn_out attend(const attn_in& in) {
  auto h = (in.x * in.mask).softmax(-1);
  return attn_out{h, std::nullopt, {h.sum(-1), in.x - 1}};
}

}  // namespace xport_models

XPORT_DATACLASS(xport_models::attn_in, "xport_tests.AttnIn", x, mask);
XPORT_DATACLASS(xport_models::attn_out, "xport_tests.AttnOut", hidden, weights, extras);
