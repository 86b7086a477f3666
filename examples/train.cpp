// Training in C++: a program exported in Python, trained with torch::optim, handed back.
//
//   # Python
//   ep = torch.export.export(model.train(), (torch.randn(8, 16),))
//   torch.export.save(ep, "mlp.pt2")
//   # C++
//   ./train mlp.pt2 trained.pt2
//   # Python again
//   trained = torch.export.load("trained.pt2")      # the trained weights, runnable
//
// Without arguments it exports a C++ MLP of the same structure itself (what ctest runs; ctest
// also runs it on tests/python/training.py's archive of the Python twin).
#include <cstdio>
#include <filesystem>
#include <string>

#include <torch/torch.h>

#include <xport/train.hpp>

namespace {

// The C++ twin of the Python MLP: Linear(16, 32), ReLU, Linear(32, 32), ReLU, Linear(32, 4).
struct MLPImpl : torch::nn::Module {
  torch::nn::Sequential layers{torch::nn::Linear(16, 32), torch::nn::ReLU(), torch::nn::Linear(32, 32),
                               torch::nn::ReLU(), torch::nn::Linear(32, 4)};
  MLPImpl() { register_module("layers", layers); }
  torch::Tensor forward(torch::Tensor x) { return layers->forward(x); }
};
TORCH_MODULE(MLP);

}  // namespace

int main(int argc, char** argv) {
  torch::manual_seed(0);
  const auto p = argc > 1 ? xport::load(argv[1]) : xport::export_program(MLP(), std::tuple{torch::randn({8, 16})});
  const std::string out =
      argc > 2 ? argv[2] : (std::filesystem::temp_directory_path() / "xport_trained.pt2").string();

  // the program as a torch::nn::Module: its parameters are the program's weights, by FQN
  auto model = p.module();
  for (const auto& item : model->named_parameters())
    std::printf("parameter %-16s %s\n", item.key().c_str(), c10::str(item.value().sizes()).c_str());

  // an ordinary LibTorch training loop
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  const auto x = torch::randn({8, 16});
  const auto y = torch::sin(x.narrow(1, 0, 4) * 2);
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward({x})[0], y);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::printf("trained 200 steps: the loss fell %s\n", last < first / 4 ? "by more than 4x" : "too little");

  // the trained program, saved for torch.export.load (or xport::load)
  xport::save(model->program(), out);
  const auto back = xport::load(out);
  const bool same = xport::run(back, {x})[0].equal(model->forward({x})[0]);
  std::printf("saved the trained program: it runs the trained weights: %s\n", same ? "yes" : "no");
  return same && last < first / 4 ? 0 : 1;
}
