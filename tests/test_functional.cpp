// The functional IR: functionalize() and run_decompositions() with decomposition tables.
#include <torch/torch.h>

#include "common.hpp"

using namespace xport;

namespace {

std::vector<std::string> ops_of(const exported_program& p) {
  std::vector<std::string> out;
  for (auto n : p.graph().nodes())
    if (n.is_call()) out.push_back(n.op().qualified);
  return out;
}

bool has_op(const exported_program& p, std::string_view op) {
  for (auto n : p.graph().nodes())
    if (n.is_call() && n.op().qualified == op) return true;
  return false;
}

template <class F>
exported_program export2(F f) {
  return export_program(f, std::tuple{at::randn({3, 4}), at::randn({3, 4})}, {.input_names = {"x", "y"}});
}

}  // namespace

TEST_CASE("functionalize: in-place ops become out-of-place") {
  auto p = export2([](const at::Tensor& x, const at::Tensor& y) {
    auto z = x * 2;
    z.add_(y);
    z.relu_();
    return z;
  });
  auto f = functionalize(p);
  verify(f);
  CHECK(f.dialect() == ir_dialect::aten);
  CHECK((ops_of(f) == std::vector<std::string>{"aten::mul.Tensor", "aten::add.Tensor", "aten::relu"}));
  const auto x = at::randn({3, 4}), y = at::randn({3, 4});
  CHECK(at::allclose(run(f, {x, y})[0], at::relu(x * 2 + y)));
  CHECK(has_op(p, "aten::add_.Tensor"));  // the source is left as it was
}

TEST_CASE("functionalize: a mutated user input becomes a USER_INPUT_MUTATION output, first") {
  auto p = export2([](const at::Tensor& x, const at::Tensor& y) {
    x.mul_(2);
    return x.cos() + y;
  });
  auto f = functionalize(p);
  verify(f);
  const auto& outs = f.signature().output_specs;
  REQUIRE(outs.size() == 2);
  CHECK(outs[0].str() == "mul: USER_INPUT_MUTATION target='x'");
  CHECK(outs[1].kind == output_kind::user_output);
  // running writes the mutation back into the caller's tensor, as eager would
  auto x = at::randn({3, 4});
  const auto x0 = x.clone(), y = at::randn({3, 4});
  const auto out = run(f, {x, y});
  CHECK(at::allclose(x, x0 * 2));
  CHECK(at::allclose(out[0], (x0 * 2).cos() + y));
}

TEST_CASE("functionalize: mutations through views are scattered back to their base") {
  SUBCASE("select") {
    auto p = export2([](const at::Tensor& x, const at::Tensor&) {
      auto c = x.clone();
      c.select(0, 1).fill_(7);
      return c;
    });
    auto f = functionalize(p);
    verify(f);
    CHECK(has_op(f, "aten::select_scatter"));
    const auto x = at::randn({3, 4});
    auto want = x.clone();
    want.select(0, 1).fill_(7);
    CHECK(at::allclose(run(f, {x, at::randn({3, 4})})[0], want));
  }
  SUBCASE("slice of a transpose, then reads of the stale view and of the base") {
    auto fn = [](const at::Tensor& x, const at::Tensor& y) {
      auto c = x.clone();
      auto v = c.t();                 // view
      auto s = v.slice(0, 1, 3);      // view of a view
      auto before = s.sum();          // read before the mutation
      s.mul_(y.slice(1, 1, 3).t());   // mutate through two views
      return std::make_tuple(c, v.sum(1), before);
    };
    auto p = export2(fn);
    auto f = functionalize(p);
    verify(f);
    CHECK(has_op(f, "aten::slice_scatter"));
    const auto x = at::randn({3, 4}), y = at::randn({3, 4});
    const auto got = run(f, {x, y});
    const auto [c, vs, before] = fn(x.clone(), y);
    CHECK(at::allclose(got[0], c));
    CHECK(at::allclose(got[1], vs));
    CHECK(at::allclose(got[2], before));
  }
  SUBCASE("an unsupported view says so") {
    auto p = export2([](const at::Tensor& x, const at::Tensor&) {
      auto c = x.clone();
      c.unfold(0, 2, 1).zero_();
      return c;
    });
    XPORT_CHECK_THROWS_MSG(functionalize(p), functionalize_error, "[xport.functionalize.");
  }
}

TEST_CASE("functionalize: train-mode BatchNorm updates its running statistics as eager does") {
  torch::manual_seed(0);
  auto bn = torch::nn::BatchNorm2d(3);
  auto eager = torch::nn::BatchNorm2d(3);
  bn->train();
  eager->train();
  auto p = functionalize(export_program(bn, std::tuple{at::randn({2, 3, 4, 4})}));
  verify(p);
  const auto& outs = p.signature().output_specs;
  REQUIRE(outs.size() == 4);
  CHECK(outs[0].kind == output_kind::buffer_mutation);
  CHECK(outs[0].target == "running_mean");
  CHECK(outs[1].target == "running_var");
  CHECK(outs[2].target == "num_batches_tracked");
  for (int step = 0; step < 4; ++step) {
    const auto x = at::randn({2, 3, 4, 4}) * (step + 1);
    CHECK(at::allclose(run(p, {x})[0], eager->forward(x), 1e-4, 1e-5));
  }
  CHECK(at::allclose(bn->running_mean, eager->running_mean, 1e-5, 1e-6));
  CHECK(at::allclose(bn->running_var, eager->running_var, 1e-5, 1e-6));
  CHECK(bn->num_batches_tracked.item<std::int64_t>() == 4);
}

TEST_CASE("run_decompositions: conv + batch_norm lowers to core ATen as torch shows it") {
  torch::manual_seed(0);
  auto m = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 3, 1)), torch::nn::BatchNorm2d(3));
  m->train();
  auto p = export_program(m, std::tuple{at::randn({1, 1, 3, 3})});
  auto q = run_decompositions(p);
  verify(q);
  const auto text = to_string(q);
  CHECK(text.find("convolution: \"f32[1, 3, 3, 3]\" = torch.ops.aten.convolution.default(x, p_0_weight, p_0_bias, "
                  "[1, 1], [0, 0], [1, 1], False, [0, 0], 1)") != std::string::npos);
  CHECK(text.find("empty") == std::string::npos);  // dead code from the decomposition is gone
  for (auto n : q.graph().nodes())
    if (n.is_call()) {
      INFO(n.op().qualified);
      CHECK((xport::detail::is_core_op(n.op()) || !decomposition_table::core_aten().decomposes(n.op())));
    }
  // functionalize only: conv2d stays
  auto r = run_decompositions(p, decomposition_table::none());
  CHECK(has_op(r, "aten::conv2d"));
  CHECK_FALSE(has_op(r, "aten::convolution"));
  verify(r);
}

TEST_CASE("run_decompositions: a table can keep an op or decompose it with C++") {
  torch::manual_seed(0);
  auto lin = torch::nn::Linear(4, 3);
  auto p = export_program([&](const at::Tensor& x) { return at::linear(at::relu(x), lin->weight, lin->bias); },
                          std::tuple{at::randn({2, 4})});
  SUBCASE("default: linear is not core") {
    auto q = run_decompositions(p);
    CHECK_FALSE(has_op(q, "aten::linear"));
    CHECK(has_op(q, "aten::addmm"));
    CHECK(has_op(q, "aten::permute"));
  }
  SUBCASE("kept") {
    auto q = run_decompositions(p, decomposition_table::core_aten().keep("aten::linear"));
    CHECK(has_op(q, "aten::linear"));
  }
  SUBCASE("decomposed by the user's C++") {
    auto table = decomposition_table::core_aten().set("aten::relu", [](const std::vector<c10::IValue>& a) {
      return std::vector<c10::IValue>{at::clamp_min(a[0].toTensor(), 0)};
    });
    auto q = run_decompositions(p, table);
    CHECK_FALSE(has_op(q, "aten::relu"));
    CHECK(has_op(q, "aten::clamp_min"));
    const auto x = at::randn({2, 4});
    CHECK(at::allclose(run(q, {x})[0], at::linear(at::relu(x), lin->weight, lin->bias)));
  }
}

TEST_CASE("run_decompositions: leaves the source program as it was and prints") {
  auto p = export2([](const at::Tensor& x, const at::Tensor& y) { return at::softmax(x, 1) * y.t().t(); });
  const auto before = to_string(p);
  auto q = run_decompositions(p);
  CHECK(to_string(p) == before);
  // C++ evaluates the right operand of * first
  CHECK((ops_of(q) == std::vector<std::string>{"aten::permute", "aten::permute", "aten::_softmax", "aten::mul.Tensor"}));
  xport_test::check_golden("inference_ir.txt", to_string(q));
}
