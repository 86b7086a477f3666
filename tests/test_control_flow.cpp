// Control flow: torch.cond as xport represents it (a higher_order::cond call whose branches are
// subgraphs), built by hand, verified, run by the interpreter and the engine, printed, saved and
// loaded, lowered. Programs torch.export wrote with torch.cond are checked against torch itself
// in test_interop.cpp (the cond* fixtures).
#include "common.hpp"

#include <xport/engine.hpp>

namespace {
using namespace xport;

/// A branch of one input `x` of `example`'s shape: `body(builder, x)` returns what it returns.
template <class Body>
std::shared_ptr<const subgraph> branch(const std::string& name, std::vector<at::Tensor> examples, Body&& body) {
  program_builder b;
  std::vector<value> xs;
  const char* names[] = {"x", "w", "b"};
  for (std::size_t i = 0; i < examples.size(); ++i) xs.push_back(b.input(names[i], examples[i]));
  for (auto v : body(b, xs)) b.output(v);
  auto p = std::move(b).build();
  return std::make_shared<const subgraph>(subgraph{name, p.graph().clone()});
}

/// `cond(x.sum() > 0, linear(x, w, b).cos(), x.sin() - 1, (x, w, b)) * 2` for x of [n, 3].
exported_program cond_program(std::shared_ptr<const subgraph> true_branch = nullptr,
                              std::shared_ptr<const subgraph> false_branch = nullptr) {
  const auto x0 = at::randn({4, 3}), w0 = at::randn({5, 3}), b0 = at::randn({5});
  if (!true_branch)
    true_branch = branch("true_graph_0", {x0, w0, b0}, [](program_builder& b, const std::vector<value>& v) {
      auto lin = b.call("aten::linear", {v[0], v[1], v[2]});
      return std::vector<value>{b.call("aten::cos", {lin.out()}).out()};
    });
  if (!false_branch)
    false_branch = branch("false_graph_0", {x0, w0, b0}, [](program_builder& b, const std::vector<value>& v) {
      auto mm = b.call("aten::mm", {v[0], b.call("aten::t", {v[1]}).out()});
      return std::vector<value>{b.call("aten::sub.Tensor", {b.call("aten::sin", {mm.out()}).out(), v[2]}).out()};
    });
  program_builder b;
  auto w = b.parameter("lin.weight", w0);
  auto bias = b.parameter("lin.bias", b0);
  auto x = b.input("x", x0);
  auto pred = b.call("aten::gt.Scalar", {b.call("aten::sum", {x}).out(), 0});
  auto c = b.call("higher_order::cond", {pred.out(), true_branch, false_branch, std::vector<argument>{x, w, bias}});
  b.output(b.call("aten::mul.Tensor", {c.outputs()[0], 2}));
  return std::move(b).build();
}

at::Tensor eager(const exported_program& p, const at::Tensor& x) {
  const auto& w = p.state_dict().at("lin.weight");
  const auto& b = p.state_dict().at("lin.bias");
  auto r = x.sum().item<float>() > 0 ? at::cos(at::linear(x, w, b)) : at::sub(at::sin(at::mm(x, w.t())), b);
  return at::mul(r, 2);
}

}  // namespace

TEST_CASE("cond: the branch the predicate picks runs, in the interpreter and the engine, for every layout") {
  const auto p = cond_program();
  engine e(p);
  const auto base = at::randn({4, 3});
  // both branches, and inputs a user may pass: contiguous, transposed, sliced
  const std::vector<at::Tensor> inputs{base.abs() + 0.1, -base.abs() - 0.1, at::randn({3, 4}).t(),
                                       at::randn({8, 3}).slice(0, 0, 8, 2), at::randn({4, 6}).slice(1, 1, 4)};
  std::size_t taken_true = 0;
  for (const auto& x : inputs) {
    const auto want = eager(p, x);
    taken_true += x.sum().item<float>() > 0;
    CHECK(at::equal(run(p, {x})[0], want));
    CHECK(at::equal(e.run({x})[0], want));
  }
  CHECK(taken_true >= 1);
  CHECK(taken_true < inputs.size());
}

TEST_CASE("cond: gradients flow through the branch taken") {
  const auto p = cond_program();
  for (const float sign : {1.0f, -1.0f}) {
    auto x = (at::rand({4, 3}) + 0.1) * sign;
    auto xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
    run(p, {xa})[0].sum().backward();
    eager(p, xb).sum().backward();
    REQUIRE(xa.grad().defined());
    CHECK(at::allclose(xa.grad(), xb.grad()));
  }
}

TEST_CASE("cond: printed as torch prints it, the branches as nested classes after forward") {
  const auto text = to_string(cond_program());
  CHECK(text.find("            true_graph_0 = self.true_graph_0\n"
                  "            false_graph_0 = self.false_graph_0\n"
                  "            cond = torch.ops.higher_order.cond(gt, true_graph_0, false_graph_0, [x, p_lin_weight, "
                  "p_lin_bias]);  gt = true_graph_0 = false_graph_0 = x = p_lin_weight = p_lin_bias = None\n"
                  "            getitem: \"f32[4, 5]\" = cond[0];  cond = None\n") != std::string::npos);
  CHECK(text.find("            return (mul,)\n    \n        class true_graph_0(torch.nn.Module):\n"
                  "            def forward(self, x: \"f32[4, 3]\", w: \"f32[5, 3]\", b: \"f32[5]\"):\n") != std::string::npos);
  CHECK(text.find("                return (sub,)\n    \nGraph signature:") != std::string::npos);
}

TEST_CASE("cond: saved and loaded with its branches; run_decompositions lowers inside them") {
  const auto p = cond_program();
  const auto bytes = save_to_string(p);
  const auto q = load_from_memory(bytes.data(), bytes.size());
  CHECK(to_string(q) == to_string(p));
  const auto x = at::randn({4, 3});
  CHECK(at::equal(run(q, {x})[0], run(p, {x})[0]));
  CHECK(at::equal(run(q, {-x})[0], run(p, {-x})[0]));
#if XPORT_HAS_TORCH_FUNCTIONALIZATION
  const auto core = run_decompositions(p);
  const auto printed = to_string(core);
  CHECK(printed.find("torch.ops.aten.addmm.default(b, x, permute)") != std::string::npos);  // linear, lowered in the branch
  CHECK(printed.find("aten.linear") == std::string::npos);
  CHECK(printed.find("torch.ops.aten.permute.default(w, [1, 0])") != std::string::npos);  // t, lowered in the other
  for (const auto& in : {x.abs(), -x.abs()}) CHECK(at::allclose(run(core, {in})[0], eager(p, in)));
#endif
}

TEST_CASE("cond: verify refuses branches that disagree, mutate or alias, with torch's texts") {
  const auto x0 = at::randn({4, 3}), w0 = at::randn({5, 3}), b0 = at::randn({5});
  const auto f64 = branch("false_graph_0", {x0, w0, b0}, [](program_builder& b, const std::vector<value>& v) {
    auto lin = b.call("aten::linear", {v[0], v[1], v[2]});
    return std::vector<value>{b.call("aten::to.dtype", {lin.out(), at::kDouble}).out()};
  });
  XPORT_CHECK_THROWS_MSG(cond_program(nullptr, f64), verify_error,
                         "When merging two branches' output in torch.cond,  expected same dtype but got torch.float32 and "
                         "torch.float64 (output 0 of 'cond')");
  const auto other_shape = branch("false_graph_0", {x0, w0, b0}, [](program_builder& b, const std::vector<value>& v) {
    return std::vector<value>{b.call("aten::sum.dim_IntList", {v[0], std::vector<std::int64_t>{0}}).out()};
  });
  XPORT_CHECK_THROWS_MSG(cond_program(nullptr, other_shape), verify_error,
                         "torch.cond's branches return output 0 in different shapes (f32[4, 5] and f32[3])");
  const auto two = branch("false_graph_0", {x0, w0, b0}, [](program_builder& b, const std::vector<value>& v) {
    auto lin = b.call("aten::linear", {v[0], v[1], v[2]});
    return std::vector<value>{lin.out(), lin.out()};
  });
  XPORT_CHECK_THROWS_MSG(cond_program(nullptr, two), verify_error,
                         "Unmatched output spec from torch.cond branches: 'true_graph_0' returns 1 values, 'false_graph_0' 2");
  const auto mutates = branch("false_graph_0", {x0, w0, b0}, [](program_builder& b, const std::vector<value>& v) {
    auto lin = b.call("aten::linear", {v[0], v[1], v[2]});
    return std::vector<value>{b.call("aten::cos_", {lin.out()}).out()};
  });
  XPORT_CHECK_THROWS_MSG(cond_program(nullptr, mutates), verify_error,
                         "Higher order ops do not support input mutation: node 'cos_' of subgraph 'false_graph_0' calls aten::cos_");
  const auto one_input = branch("false_graph_0", {x0}, [](program_builder& b, const std::vector<value>& v) {
    return std::vector<value>{b.call("aten::cos", {v[0]}).out()};
  });
  XPORT_CHECK_THROWS_MSG(cond_program(nullptr, one_input), verify_error,
                         "subgraph 'false_graph_0' takes 1 inputs, torch.cond passes it 3 operands");
}

TEST_CASE("cond: the predicate is one element, checked when built and when run") {
  program_builder b;
  auto x = b.input("x", at::randn({3}));
  const auto same = branch("true_graph_0", {at::randn({3})}, [](program_builder& g, const std::vector<value>& v) {
    return std::vector<value>{g.call("aten::cos", {v[0]}).out()};
  });
  auto pred = b.call("aten::gt.Scalar", {x, 0});  // three elements
  auto c = b.call("higher_order::cond", {pred.out(), same, same, std::vector<argument>{x}});
  b.output(c.outputs()[0]);
  XPORT_CHECK_THROWS_MSG(std::move(b).build(), verify_error,
                         "Expected pred to be bool or single-element tensor, but got b8[3] ('gt', the predicate of 'cond')");
  // a kernel called directly, outside a program, refuses such a predicate too
  const auto& op = find_op("higher_order::cond");
  torch::jit::Stack stack{at::ones({2}), c10::IValue(), c10::IValue(), c10::List<at::Tensor>()};
  XPORT_CHECK_THROWS_MSG(op.handle.callBoxed(stack), run_error,
                         "torch.cond: Expected pred to be bool or single-element tensor, but got a tensor of 2 elements");
}
