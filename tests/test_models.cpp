// Real models (tests/models.hpp) exported from their C++ torch::nn modules, verified, printed,
// and run against eager LibTorch: in eval mode, and in train mode over several steps, with the
// buffer updates (BatchNorm running statistics, num_batches_tracked) equal to eager's; every
// input also in transposed, sliced and channels_last layouts.
#include "models.hpp"

#include "common.hpp"

using namespace xport;
namespace m = xport_models;

namespace {

template <class Module>
std::vector<at::Tensor> flat_outputs(Module& mod, const at::Tensor& x) {
  std::vector<at::Tensor> leaves;
  flatten(mod->forward(x), leaves);
  return leaves;
}

void check_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, double rtol = 1e-4,
                 double atol = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i);
    CHECK((got[i].sizes() == want[i].sizes()));
    CHECK(at::allclose(got[i], want[i], rtol, atol));
  }
}

// Two modules with identical weights: one is exported (and its state then belongs to the
// program), the other runs eagerly as the oracle. `inference_ir`: through run_decompositions().
template <class Module, class Make, class Input>
void check_model_ir(Make make, Input make_input, const std::vector<std::string>& expected_ops, int steps,
                    bool inference_ir) {
  torch::manual_seed(0);
  Module exported = make();
  torch::manual_seed(0);
  Module eager = make();
  const auto prepare = [&](exported_program p) { return inference_ir ? run_decompositions(p) : std::move(p); };
  {  // eval
    exported->eval();
    eager->eval();
    auto p = prepare(export_program(exported, std::tuple{make_input()}));
    verify(p);
    const auto text = to_string(p);
    if (!inference_ir)
      for (const auto& op : expected_ops) {
        INFO("expected op " << op << " in\n" << text);
        CHECK(text.find("torch.ops.aten." + op) != std::string::npos);
      }
    else
      for (auto n : p.graph().nodes())
        if (n.is_call()) {
          INFO("non-core op " << n.op().qualified);
          CHECK((xport::detail::is_core_op(n.op()) || !decomposition_table::core_aten().decomposes(n.op())));
        }
    for (int i = 0; i < 2; ++i) {
      const auto x = make_input();
      // every layout a caller may pass: the program is right for each (Note [Inputs in the
      // exported layout], Note [Views run as reshape])
      for (const auto& [layout, xl] : xport_test::layouts_of(x)) {
        INFO("input layout: " << layout);
        check_close(run(p, {xl}), flat_outputs(eager, x));
      }
    }
  }
  {  // train, with buffer updates over several steps
    exported->train();
    eager->train();
    auto p = prepare(export_program(exported, std::tuple{make_input()}));
    verify(p);
    for (int step = 0; step < steps; ++step) {
      const auto x = make_input();
      torch::manual_seed(100 + step);
      const auto got = run(p, {x});
      torch::manual_seed(100 + step);
      const auto want = flat_outputs(eager, x);
      check_close(got, want);
    }
    const auto buffers = p.named_buffers();
    const auto eager_buffers = eager->named_buffers(true);
    REQUIRE(buffers.size() == eager_buffers.size());
    for (const auto& [name, t] : buffers) {
      INFO("buffer " << name);
      CHECK(at::allclose(t, eager_buffers[name], 1e-4, 1e-6));
    }
  }
}

// Both IRs: the training IR as exported, and the functional core-ATen inference IR.
template <class Module, class Make, class Input>
void check_model(Make make, Input make_input, const std::vector<std::string>& expected_ops, int steps = 3) {
  for (const bool ir : {false, true}) {
    INFO((ir ? "inference IR" : "training IR"));
    check_model_ir<Module>(make, make_input, expected_ops, steps, ir);
  }
}

}  // namespace

TEST_CASE("models: MLP") {
  check_model<m::MLP>([] { return m::MLP(); }, [] { return at::randn({5, 16}); }, {"t.default", "addmm.default", "relu.default"});
}

TEST_CASE("models: LeNet (conv, max-pool, dropout, linear, log_softmax)") {
  check_model<m::LeNet>([] { return m::LeNet(); }, [] { return at::randn({2, 1, 28, 28}); },
                        {"conv2d.default", "max_pool2d.default", "dropout.default", "addmm.default", "log_softmax.int"});
}

TEST_CASE("models: DCGAN generator (ConvTranspose2d, BatchNorm2d, Tanh)") {
  check_model<m::Generator>([] { return m::Generator(); }, [] { return at::randn({2, 16, 1, 1}); },
                            {"conv_transpose2d.input", "batch_norm.default", "relu_.default", "tanh.default"});
}

TEST_CASE("models: DCGAN discriminator (LeakyReLU, BatchNorm2d, Sigmoid)") {
  check_model<m::Discriminator>([] { return m::Discriminator(); }, [] { return at::randn({2, 3, 16, 16}); },
                                {"conv2d.default", "leaky_relu.default", "batch_norm.default", "sigmoid.default"});
}

TEST_CASE("models: ResNet-18") {
  check_model<m::ResNet18>([] { return m::ResNet18(); }, [] { return at::randn({1, 3, 64, 64}); },
                           {"conv2d.default", "batch_norm.default", "max_pool2d.default", "add.Tensor",
                            "adaptive_avg_pool2d.default", "flatten.using_ints"},
                           2);
}

TEST_CASE("models: Transformer encoder layer (MultiheadAttention, LayerNorm, GELU)") {
  check_model<m::Encoder>([] { return m::Encoder(); }, [] { return at::randn({5, 2, 32}); },
                          {"layer_norm.default", "gelu.default", "bmm.default", "softmax.int", "dropout.default"});
}

TEST_CASE("models: LSTM") {
  check_model<m::LSTMNet>([] { return m::LSTMNet(); }, [] { return at::randn({2, 5, 8}); }, {"lstm.input", "zeros.default"});
}

TEST_CASE("models: GRU") {
  check_model<m::GRUNet>([] { return m::GRUNet(); }, [] { return at::randn({2, 5, 8}); }, {"gru.input", "select.int"});
}

TEST_CASE("models: embedding + mean-pool classifier") {
  check_model<m::EmbeddingClassifier>([] { return m::EmbeddingClassifier(); },
                                      [] { return at::randint(100, {4, 7}, at::kLong); },
                                      {"embedding.default", "mean.dim", "addmm.default"});
}

TEST_CASE("models: ResNet-18 prints its lifted state as torch.export names it") {
  torch::manual_seed(0);
  m::ResNet18 net;
  net->eval();
  auto p = export_program(net, std::tuple{at::randn({1, 3, 64, 64})});
  const auto text = to_string(p);
  CHECK(text.find("p_layer1_0_conv1_weight: PARAMETER target='layer1.0.conv1.weight'") != std::string::npos);
  CHECK(text.find("b_layer2_0_downsample_1_running_var: BUFFER target='layer2.0.downsample.1.running_var' "
                  "persistent=True") != std::string::npos);
  CHECK(text.find("flatten: \"f32[1, 512]\"") != std::string::npos);
  CHECK(p.signature().parameters().size() == 62);
  CHECK(p.signature().buffers().size() == 60);
  // nodes reading module state know their module
  for (auto n : p.graph().nodes())
    if (n.is_call() && n.op().name == "aten::conv2d" && n.input(1).name() == "p_layer1_0_conv1_weight")
      CHECK(n.module_path() == "layer1.0.conv1");
}
