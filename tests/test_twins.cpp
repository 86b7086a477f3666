// The C++ side of the print diff against torch.export 2.13 (ctest oracle_print_diff): every real
// model of models.hpp, in eval and train mode, exported and lowered with run_decompositions(),
// printed to $XPORT_ORACLE_DIR/print/<case>.<training|inference>.txt. tests/python/print_diff.py
// exports each Python twin (tests/python/twins.py, same case names) with torch.export and
// requires the same text. Suite "oracle": run by ctest after the Python fixtures exist.
#include <filesystem>
#include <fstream>
#include <functional>

#include "models.hpp"

#include "common.hpp"

namespace m = xport_models;

namespace {

std::filesystem::path oracle_dir() {
  const char* d = std::getenv("XPORT_ORACLE_DIR");
  REQUIRE_MESSAGE(d, "XPORT_ORACLE_DIR is not set (ctest sets it for the oracle suite)");
  return d;
}

template <class Module, class Input>
void print_case(const std::string& name, Input make_input, bool train, xport::dynamic_shapes dynamic = {}) {
  torch::manual_seed(0);
  Module mod;
  mod->train(train);
  const auto p = xport::export_program(mod, std::tuple{make_input()}, {.dynamic_shapes = std::move(dynamic)});
  const auto dir = oracle_dir() / "print";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / (name + ".training.txt")) << p;
  std::ofstream(dir / (name + ".inference.txt")) << xport::run_decompositions(p);
}

// name, and whether the train-mode variant prints too (models whose modules differ in train mode)
template <class Module, class Input>
void print_model(const std::string& name, Input make_input, bool train_too) {
  print_case<Module>(name, make_input, false);
  if (train_too) print_case<Module>(name + ".train", make_input, true);
}

// twins.py RenormedEmbedding: a no-grad update of the weight in forward (max_norm)
struct RenormedEmbeddingImpl : torch::nn::Module {
  torch::nn::Embedding emb{torch::nn::EmbeddingOptions(100, 4).max_norm(1.0)};
  RenormedEmbeddingImpl() { register_module("emb", emb); }
  torch::Tensor forward(torch::Tensor x) { return emb(x); }
};
TORCH_MODULE(RenormedEmbedding);

// twins.py NoneOutput: an undefined tensor among the outputs is torch's None
struct NoneOutputImpl : torch::nn::Module {
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) { return {x + 1, torch::Tensor()}; }
};
TORCH_MODULE(NoneOutput);

}  // namespace

TEST_CASE("oracle: xport's prints of the real models, for the diff against torch.export" *
          doctest::test_suite("oracle")) {
  print_model<m::MLP>("mlp", [] { return at::randn({5, 16}); }, false);
  print_model<m::LeNet>("lenet", [] { return at::randn({2, 1, 28, 28}); }, true);
  print_model<m::Generator>("generator", [] { return at::randn({2, 16, 1, 1}); }, true);
  print_model<m::Discriminator>("discriminator", [] { return at::randn({2, 3, 16, 16}); }, true);
  print_model<m::ResNet18>("resnet18", [] { return at::randn({1, 3, 64, 64}); }, true);
  print_model<m::Encoder>("encoder", [] { return at::randn({5, 2, 32}); }, true);
  print_model<m::LSTMNet>("lstm", [] { return at::randn({2, 5, 8}); }, true);
  print_model<m::GRUNet>("gru", [] { return at::randn({2, 5, 8}); }, true);
  print_model<m::EmbeddingClassifier>("embedding", [] { return at::randint(100, {4, 7}, at::kLong); }, false);
  print_model<m::CondGate>("cond_gate", [] { return at::randn({5, 16}); }, false);
  // dynamic variants (twins.py DYNAMIC gives the same specs)
  using xport::Dim;
  const auto batch = Dim("batch", 1, 1024), small_batch = Dim("batch", 1, 64), seq = Dim("seq", 1, 64);
  print_case<m::MLP>("mlp.dynamic", [] { return at::randn({5, 16}); }, false, {{"x", {{0, batch}}}});
  print_case<m::LeNet>("lenet.dynamic", [] { return at::randn({2, 1, 28, 28}); }, false, {{"x", {{0, batch}}}});
  print_case<m::ResNet18>("resnet18.dynamic", [] { return at::randn({2, 3, 64, 64}); }, false,
                          {{"x", {{0, Dim("batch", 1, 256)}}}});
  print_case<m::Encoder>("encoder.dynamic", [] { return at::randn({5, 2, 32}); }, false,
                         {{"x", {{0, seq}, {1, small_batch}}}});
  print_case<m::LSTMNet>("lstm.dynamic", [] { return at::randn({2, 5, 8}); }, false, {{"x", {{0, small_batch}}}});
  print_case<m::GRUNet>("gru.dynamic", [] { return at::randn({2, 5, 8}); }, false, {{"x", {{0, small_batch}}}});
  print_case<m::EmbeddingClassifier>("embedding.dynamic", [] { return at::randint(100, {4, 7}, at::kLong); }, false,
                                     {{"x", {{0, small_batch}, {1, seq}}}});
  print_case<m::CondGate>("cond_gate.dynamic", [] { return at::randn({5, 16}); }, false, {{"x", {{0, batch}}}});
  print_model<RenormedEmbedding>("embedding_max_norm", [] { return at::randint(100, {4, 7}, at::kLong); }, false);
  print_model<NoneOutput>("none_output", [] { return at::randn({2, 3}); }, false);
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(oracle_dir() / "print")) files += e.is_regular_file();
  CHECK(files >= 50);
}
