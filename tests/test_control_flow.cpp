// Control flow: torch.cond as xport represents it (a higher_order::cond call whose branches are
// subgraphs), built by hand, verified, run by the interpreter and the engine, printed, saved and
// loaded, lowered; then xport::cond captured from C++ code by both tracers (CondGate of
// models.hpp, closures, nested conds, passes inside the branches); xport::while_loop
// (LoopRefiner), xport::map and xport::scan (ScanRNN), both tracers, with torch's rules and texts; xport::out_dtype (torch's out_dtype). Programs torch.export wrote with torch.cond are checked against torch itself
// in test_interop.cpp (the cond* fixtures).
#include "common.hpp"
#include "models.hpp"

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
  const auto q = xport_test::reload(p);
  CHECK(to_string(q) == to_string(p));
  const auto x = at::randn({4, 3});
  CHECK(at::equal(run(q, {x})[0], run(p, {x})[0]));
  CHECK(at::equal(run(q, {-x})[0], run(p, {-x})[0]));
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
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
    auto row = b.call("aten::select.int", {v[0], 0, 0});  // a write through a view of an input is one to it
    b.call("aten::cos_", {row.out()});
    return std::vector<value>{b.call("aten::linear", {v[0], v[1], v[2]}).out()};
  });
  const auto writes_own = branch("false_graph_0", {x0, w0, b0}, [](program_builder& b, const std::vector<value>& v) {
    auto lin = b.call("aten::linear", {v[0], v[1], v[2]});
    b.call("aten::cos_", {lin.out()});  // its own tensor: allowed, as torch allows it
    return std::vector<value>{lin.out()};
  });
  CHECK_NOTHROW(cond_program(nullptr, writes_own));
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

// ---- xport::cond: capturing C++ code (both tracing policies) -------------------------------------

namespace {

/// Inputs of CondGate that take each branch: x scaled up, and its negation (the gate's score
/// flips sign with it when the bias is small against w.x).
std::pair<at::Tensor, at::Tensor> both_branches(xport_models::CondGate& net, std::int64_t batch) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    const auto x = at::randn({batch, 16}) * 10;
    const bool a = net->gate(x).mean().item<float>() > 0, b = net->gate(-x).mean().item<float>() > 0;
    if (a != b) return a ? std::pair{x, -x} : std::pair{-x, x};
  }
  FAIL("no input found that takes each branch");
  return {};
}

std::size_t calls_in(const subgraph& s, std::string_view op) {
  std::size_t n = 0;
  for (auto node : s.body.nodes()) n += node.is_call() && node.op().name == op;
  return n;
}

const node& cond_node(const exported_program& p) {
  static node found;
  found = node();
  for (auto n : p.graph().nodes())
    if (n.is_call() && n.op().higher_order) found = n;
  REQUIRE(found);
  return found;
}

}  // namespace

TEST_CASE("xport::cond (non-strict): a module's cond is captured, both branches, and runs as eager does") {
  torch::manual_seed(0);
  xport_models::CondGate net;
  net->eval();
  const auto [pos, neg] = both_branches(net, 5);
  const auto p = export_program(net, std::tuple{pos});
  // the branches read the experts' parameters: lifted to operands, module state by FQN
  const auto printed = to_string(p);
  // the operands a tuple, as torch.export records them (a loaded program holds a list)
  CHECK(printed.find("cond = torch.ops.higher_order.cond(gt, true_graph_0, false_graph_0, (x, p_expert_a_bias, "
                     "p_expert_a_weight, p_expert_b_bias, p_expert_b_weight))") != std::string::npos);
  CHECK(printed.find("class true_graph_0(torch.nn.Module):") != std::string::npos);
  const auto args = cond_node(p).args();
  CHECK(calls_in(*args[1].as_graph(), "aten::relu") == 1);
  CHECK(calls_in(*args[2].as_graph(), "aten::tanh") == 1);
  CHECK(calls_in(*args[1].as_graph(), "aten::tanh") == 0);
  engine e(p);
  for (const auto& x : {pos, neg})
    for (const auto& [layout, in] : xport_test::layouts_of(x)) {
      INFO(layout);
      const auto want = net->forward(in);
      // close, not equal: a CPU's BLAS may sum a transposed input's products in another order
      CHECK(at::allclose(run(p, {in})[0], want, 1e-5, 1e-6));
      CHECK(at::allclose(e.run({in})[0], want, 1e-5, 1e-6));
    }
  // eagerly, outside an export, xport::cond runs the branch the predicate picks
  CHECK(at::equal(net->forward(neg), net->head(torch::tanh(net->expert_b(neg)) * 2)));
}

TEST_CASE("xport::cond (non-strict): a dynamic batch, guarded; saved, loaded and lowered with its branches") {
  torch::manual_seed(0);
  xport_models::CondGate net;
  net->eval();
  const auto [pos, neg] = both_branches(net, 5);
  const auto p = export_program(net, std::tuple{pos}, {.dynamic_shapes = {{"x", {{0, Dim("batch", 1, 64)}}}}});
  CHECK(to_string(p).find("relu: \"f32[s77, 16]\"") != std::string::npos);  // symbolic inside the branch too
  const auto q = xport_test::reload(p);
  // loaded, the operands are a list (as torch.export.load gives them); nothing else differs
  const std::string tuple = "(x, p_expert_a_bias, p_expert_a_weight, p_expert_b_bias, p_expert_b_weight)";
  auto as_loaded = to_string(p);
  REQUIRE(as_loaded.find(tuple) != std::string::npos);
  as_loaded.replace(as_loaded.find(tuple), tuple.size(), "[" + tuple.substr(1, tuple.size() - 2) + "]");
  CHECK(to_string(q) == as_loaded);
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
  const auto core = run_decompositions(p);
  CHECK(to_string(core).find(tuple) != std::string::npos);
  CHECK(to_string(core).find("torch.ops.aten.permute.default(p_expert_a_weight, [1, 0])") != std::string::npos);
#endif
  for (std::int64_t batch : {1, 7, 64}) {
    const auto [a, b] = both_branches(net, batch);
    for (const auto& x : {a, b}) {
      const auto want = net->forward(x);
      CHECK(at::equal(run(p, {x})[0], want));
      CHECK(at::equal(run(q, {x})[0], want));
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
      CHECK(at::allclose(run(core, {x})[0], want, 1e-5, 1e-6));
#endif
    }
  }
  XPORT_CHECK_THROWS_MSG(run(p, {at::randn({65, 16})}), guard_error, "input x: dim 0 (batch) must be in [1, 64], got 65");
}

TEST_CASE("xport::cond (non-strict): gradients flow through the branch taken, to the input and the experts") {
  torch::manual_seed(0);
  xport_models::CondGate net;
  const auto [pos, neg] = both_branches(net, 4);
  const auto p = export_program(net, std::tuple{pos});
  for (const auto& x : {pos, neg}) {
    auto xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
    run(p, {xa})[0].sum().backward();
    net->forward(xb).sum().backward();
    CHECK(at::allclose(xa.grad(), xb.grad()));
  }
}

TEST_CASE("xport::cond (non-strict): closures over computed and outside tensors are lifted; nested conds; bool preds") {
  const auto c = at::randn({3});  // captured from outside: a constant of the program
  auto fn = [&](const at::Tensor& x, const at::Tensor& y) {
    auto z = x * 2;
    return xport::cond(
        x.sum() > 0,
        [&](const at::Tensor& a) {
          return xport::cond(y.mean() > 0, [&](const at::Tensor& b) { return b + z; },
                             [&](const at::Tensor& b) { return b * c; }, std::tuple{a});
        },
        [&](const at::Tensor& a) { return a.cos() - y; }, std::tuple{x});
  };
  const auto p = export_program(fn, std::tuple{at::randn({2, 3}), at::randn({2, 3})}, {.input_names = {"x", "y"}});
  const auto printed = to_string(p);
  CHECK(printed.find("torch.ops.higher_order.cond(gt, true_graph_0, false_graph_0, (x, y, mul, c_lifted_tensor_0))") !=
        std::string::npos);
  CHECK(printed.find("class true_graph_0(torch.nn.Module):") != std::string::npos);
  // the inner cond sits in the outer true branch, with its own numbering
  const auto& inner = *cond_node(p).args()[1].as_graph();
  CHECK(calls_in(inner, "higher_order::cond") == 1);
  engine e(p);
  for (float sx : {1.f, -1.f})
    for (float sy : {1.f, -1.f}) {
      const auto x = at::rand({2, 3}) * sx + 0.01 * sx, y = at::rand({2, 3}) * sy + 0.01 * sy;
      for (const auto& [layout, xl] : xport_test::layouts_of(x)) {
        INFO(layout);
        const auto want = fn(xl, y.t().contiguous().t());
        CHECK(at::equal(run(p, {xl, y.t().contiguous().t()})[0], want));
        CHECK(at::equal(e.run({xl, y})[0], fn(xl, y)));
      }
    }
  // a C++ bool is a constant: only the branch it picks is traced
  auto fixed = [](const at::Tensor& x) {
    return xport::cond(x.size(0) > 1, [](const at::Tensor& a) { return a.sin(); }, [](const at::Tensor& a) { return a.cos(); },
                       std::tuple{x});
  };
  const auto q = export_program(fixed, std::tuple{at::randn({2, 3})});
  CHECK(to_string(q).find("higher_order") == std::string::npos);
  CHECK(to_string(q).find("aten.sin.default") != std::string::npos);
}

TEST_CASE("xport::cond: branches that disagree, mutate or alias are refused at export, with torch's texts") {
  const auto x = at::randn({5, 3});
  const auto check = [&](auto true_fn, auto false_fn, const std::string& fragment) {
    auto fn = [&](const at::Tensor& a) { return xport::cond(a.sum() > 0, true_fn, false_fn, std::tuple{a}); };
    XPORT_CHECK_THROWS_MSG(export_program(fn, std::tuple{x}), xport::error, fragment);
  };
  const auto sin = [](const at::Tensor& a) { return a.sin(); };
  check(sin, [](const at::Tensor& a) { return a.to(at::kInt); },
        "When merging two branches' output in torch.cond,  expected same dtype but got torch.float32 and torch.int32");
  check([](const at::Tensor& a) { return a; }, sin,
        "Higher order ops do not support aliasing: subgraph 'true_graph_0' of 'cond' returns its input 'x'");
  check(
      [](const at::Tensor& a) {
        auto b = a.clone();
        a.add_(1);
        return b;
      },
      sin, "Higher order ops do not support input mutation: node 'add_' of subgraph 'true_graph_0'");
  check(sin, [](const at::Tensor& a) { return a.sum(0); }, "torch.cond's branches return output 0 in different shapes");
  const auto one = [](const at::Tensor& a) { return std::vector<at::Tensor>{a.sin()}; };
  const auto two = [](const at::Tensor& a) { return std::vector<at::Tensor>{a.sin(), a.cos()}; };
  check(one, two, "Unmatched output spec from torch.cond branches: 'true_graph_0' returns 1 values, 'false_graph_0' 2");
  auto vector_pred = [](const at::Tensor& a) { return xport::cond(a > 0, [](const at::Tensor& b) { return b.sin(); },
                                                                  [](const at::Tensor& b) { return b.cos(); }, std::tuple{a}); };
  XPORT_CHECK_THROWS_MSG(export_program(vector_pred, std::tuple{x}), xport::error,
                         "Expected pred to be bool or single-element tensor, but got a tensor of sizes [5, 3]");
  XPORT_CHECK_THROWS_MSG(vector_pred(x), xport::error, "Expected pred to be bool or single-element tensor");  // eagerly too
}

TEST_CASE("xport::cond (strict): branches are traced on sym_tensors, every node with its C++ line") {
  auto fn = [](const sym_tensor& x, const sym_tensor& w) {
    auto h = relu(x);
    auto r = cond(x.sum() > 0.0,
                  [&](const sym_tensor& a) { return std::tuple{matmul(a, w), a * 2.0}; },  // reads w: lifted
                  [&](const sym_tensor& a) { return std::tuple{matmul(h, w), a - 1.0}; }, std::tuple{x});
    return std::get<0>(r) + std::get<1>(r).sum();
  };
  const auto x0 = at::randn({3, 3}), w0 = at::randn({3, 3});
  const auto p = export_program<xport::strict>(fn, std::tuple{x0, w0}, {.input_names = {"x", "w"}});
  const auto printed = to_string(p);
  CHECK(printed.find("torch.ops.higher_order.cond(gt, true_graph_0, false_graph_0, (x, w, relu))") != std::string::npos);
  CHECK(printed.find("code: [&](const sym_tensor& a) { return std::tuple{matmul(a, w), a * 2.0}; },  // reads w: lifted") !=
        std::string::npos);
  CHECK(printed.find("in forward, code: auto r = cond(x.sum() > 0.0,") != std::string::npos);
  auto eager = [](const at::Tensor& x, const at::Tensor& w) {
    const bool t = x.sum().item<double>() > 0;
    auto a = t ? at::matmul(x, w) : at::matmul(at::relu(x), w);
    auto b = t ? x * 2.0 : x - 1.0;
    return a + b.sum();
  };
  // (the program runs an input in its example's layout, eager as it is given: another gemm path,
  // so the last bit may differ)
  const auto wt = w0.t().contiguous().t();
  for (const auto& x : {x0.abs(), -x0.abs()})
    for (const auto& [layout, xl] : xport_test::layouts_of(x)) {
      INFO(layout);
      CHECK(at::allclose(run(p, {xl, wt})[0], eager(xl, wt), 1e-6, 1e-6));
    }
}

TEST_CASE("xport::cond: every pass works inside the branches (cse, dce), a failed one leaves them as they were") {
  auto fn = [](const at::Tensor& x) {
    return xport::cond(
        x.sum() > 0,
        [](const at::Tensor& a) {
          auto unused = a.exp();
          (void)unused;
          return a.sin() + a.sin();
        },
        [](const at::Tensor& a) { return a.cos(); }, std::tuple{x});
  };
  auto p = export_program(fn, std::tuple{at::randn({2, 3})});
  const auto before = to_string(p);
  const auto& branch = [&]() -> const subgraph& { return *cond_node(p).args()[1].as_graph(); };
  CHECK(calls_in(branch(), "aten::sin") == 2);
  CHECK(calls_in(branch(), "aten::exp") == 1);
  const auto kept = cond_node(p).args()[1].as_graph();  // shared by copies: never changed in place
  const auto copy = p.clone();
  const auto r = p | (passes::cse | passes::dce);
  REQUIRE(r.ok());
  CHECK(r.changed);
  CHECK(calls_in(branch(), "aten::sin") == 1);
  CHECK(calls_in(branch(), "aten::exp") == 0);
  CHECK(calls_in(*kept, "aten::sin") == 2);
  CHECK(to_string(copy) == before);
  const auto x = at::randn({2, 3}).abs();
  CHECK(at::equal(run(p, {x})[0], fn(x)));
  CHECK(at::equal(run(p, {-x})[0], fn(-x)));
}

// ---- xport::while_loop ---------------------------------------------------------------------

namespace {
/// LoopRefiner's forward, eagerly and by hand: `steps` refinements of h from zeros.
at::Tensor refined(xport_models::LoopRefiner& net, const at::Tensor& x, std::int64_t steps) {
  auto h = at::zeros_like(x);
  for (std::int64_t i = 0; i < steps; ++i) h = at::tanh(net->lin(h)) + x;
  return h * 2;
}
}  // namespace

TEST_CASE("xport::while_loop (non-strict): a refiner loops as many steps as its input asks, in every layout") {
  torch::manual_seed(0);
  xport_models::LoopRefiner net;
  net->eval();
  const auto x = at::randn({2, 4});
  const auto p = export_program(net, std::tuple{x, at::tensor(3L).squeeze()}, {.input_names = {"x", "steps"}});
  const auto printed = to_string(p);
  INFO(printed);
  // as torch.export records it (pt2_fixtures.py WhileLoopRefine): cond_fn's free values, then the
  // body's (module state by FQN first), as additional inputs; the subgraphs counted apart
  CHECK(printed.find("while_loop = torch.ops.higher_order.while_loop(while_loop_cond_graph_0, while_loop_body_graph_0, "
                     "(zeros, zeros_like), (steps, p_lin_bias, p_lin_weight, x))") != std::string::npos);
  CHECK(printed.find("class while_loop_cond_graph_0(torch.nn.Module):") != std::string::npos);
  // the subgraphs' inputs named as torch's while_loop names them (arg<i>_1)
  CHECK(printed.find("lt: \"b8[]\" = torch.ops.aten.lt.Tensor(arg0_1, arg2_1)") != std::string::npos);
  CHECK(printed.find("return lt\n") != std::string::npos);  // cond_fn's bool returned bare, as torch prints it
  CHECK(calls_in(*cond_node(p).args()[1].as_graph(), "aten::tanh") == 1);
  engine e(p);
  for (std::int64_t steps : {0, 1, 3, 9})
    for (const auto& [layout, in] : xport_test::layouts_of(x)) {
      INFO(layout << " steps " << steps);
      const auto n = at::tensor(steps).squeeze();
      const auto want = refined(net, in, steps);
      CHECK(at::allclose(net->forward(in, n), want));  // eagerly, xport::while_loop loops
      CHECK(at::equal(run(p, {in, n})[0], net->forward(in, n)));
      CHECK(at::equal(e.run({in, n})[0], net->forward(in, n)));
    }
  // saved and loaded, the operands are lists, as torch.export.load gives them
  const auto q = xport_test::reload(p);
  CHECK(to_string(q).find("while_loop_body_graph_0, [zeros, zeros_like], [steps, p_lin_bias, p_lin_weight, x])") !=
        std::string::npos);
  CHECK(at::equal(run(q, {-x, at::tensor(5L).squeeze()})[0], net->forward(-x, at::tensor(5L).squeeze())));
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
  const auto core = run_decompositions(p);
  CHECK(to_string(core).find("torch.ops.aten.permute.default(arg4_1, [1, 0])") != std::string::npos);  // lowered inside
  CHECK(at::allclose(run(core, {x, at::tensor(4L).squeeze()})[0], refined(net, x, 4), 1e-5, 1e-6));
#endif
  // gradients flow through every iteration, to the input and the parameters
  auto xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
  run(p, {xa, at::tensor(4L).squeeze()})[0].sum().backward();
  refined(net, xb, 4).sum().backward();
  CHECK(at::allclose(xa.grad(), xb.grad(), 1e-5, 1e-6));
}

TEST_CASE("xport::while_loop: cond_fn and body_fn that break torch's rules are refused, with its texts") {
  const auto x = at::randn({5, 3});
  const auto zero = at::zeros({}, at::kLong);
  const auto check = [&](auto cond_fn, auto body_fn, const std::string& fragment) {
    auto fn = [&](const at::Tensor& a) { return std::get<1>(xport::while_loop(cond_fn, body_fn, std::tuple{zero, a})); };
    XPORT_CHECK_THROWS_MSG(export_program(fn, std::tuple{x}), xport::error, fragment);
  };
  const auto below3 = [](const at::Tensor& i, const at::Tensor&) { return i < 3; };
  using T2 = std::tuple<at::Tensor, at::Tensor>;
  check(below3, [](const at::Tensor& i, const at::Tensor& a) { return T2{i + 1, a.sum(0)}; },
        "Expected body_fn_output and carried_inputs to have same metadata but found: pair[1] differ, where body_fn "
        "returns f32[3] and carried_inputs[1] is f32[5, 3]");
  check(below3, [](const at::Tensor& i, const at::Tensor& a) { return T2{i + 1, a.to(at::kInt)}; },
        "pair[1] differ, where body_fn returns i32[5, 3] and carried_inputs[1] is f32[5, 3]");
  check(below3, [](const at::Tensor& i, const at::Tensor& a) { return T2{i + 1, a}; },
        "Higher order ops do not support aliasing: subgraph 'while_loop_body_graph_0' of 'while_loop' returns its input");
  check(below3, [](const at::Tensor& i, const at::Tensor& a) { return T2{i + 1, a.mul_(2).clone()}; },
        "Higher order ops do not support input mutation: node 'mul_' of subgraph 'while_loop_body_graph_0'");
  const auto vector_pred = [](const at::Tensor&, const at::Tensor& a) { return a > 0; };
  const auto step = [](const at::Tensor& i, const at::Tensor& a) { return T2{i + 1, a * 2}; };
  check(vector_pred, step, "cond_fn must return a boolean scalar tensor or a boolean but got b8[5, 3]");
  XPORT_CHECK_THROWS_MSG(xport::while_loop(vector_pred, step, std::tuple{zero, x}), xport::error,  // eagerly too
                         "cond_fn must return a boolean scalar tensor or a boolean but got a tensor of sizes [5, 3]");
  // never entered, the loop still returns copies: no output aliases an input (torch clones)
  const auto r = xport::while_loop([](const at::Tensor& i, const at::Tensor&) { return i > 0; }, step, std::tuple{zero, x});
  CHECK(at::equal(std::get<1>(r), x));
  CHECK(!std::get<1>(r).is_same(x));
}

TEST_CASE("xport::while_loop (strict): traced on sym_tensors, every node with its C++ line") {
  auto fn = [](const sym_tensor& i0, const sym_tensor& x) {
    auto r = while_loop([](const sym_tensor& i, const sym_tensor&) { return i < 4.0; },
                        [&](const sym_tensor& i, const sym_tensor& h) { return std::tuple{i + 1.0, relu(h) * 0.5 + x}; },
                        std::tuple{i0, x * 1.0});
    return std::get<1>(r);
  };
  const auto x0 = at::randn({2, 3});
  const auto p = export_program<xport::strict>(fn, std::tuple{at::zeros({}), x0}, {.input_names = {"i", "x"}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("torch.ops.higher_order.while_loop(while_loop_cond_graph_0, while_loop_body_graph_0, (i, mul), (x,))") !=
        std::string::npos);
  CHECK(printed.find("code: [&](const sym_tensor& i, const sym_tensor& h) { return std::tuple{i + 1.0, relu(h) * 0.5 + x}; },") !=
        std::string::npos);
  auto eager = [](float i, at::Tensor h, const at::Tensor& x) {
    for (; i < 4; ++i) h = at::relu(h) * 0.5 + x;
    return h;
  };
  for (float i : {0.f, 2.f, 7.f})
    for (const auto& [layout, xl] : xport_test::layouts_of(x0)) {
      INFO(layout << " i " << i);
      CHECK(at::allclose(run(p, {at::full({}, i), xl})[0], eager(i, xl * 1.0, xl)));
    }
}

// ---- xport::map ----------------------------------------------------------------------------

TEST_CASE("xport::map (non-strict): a row-wise block over the batch, captured as torch.map, runs as eager does") {
  torch::manual_seed(0);
  torch::nn::Linear lin(3, 3);
  auto fn = [&](const at::Tensor& xs, const at::Tensor& y) {
    return xport::map([&](const at::Tensor& row, const at::Tensor& b) { return torch::relu(lin(row)) + b; }, xs,
                      std::tuple{y});
  };
  const auto xs = at::randn({4, 3}), y = at::randn({3});
  const auto p = export_program(fn, std::tuple{xs, y}, {.input_names = {"xs", "y"}});
  const auto printed = to_string(p);
  INFO(printed);
  // as torch.export records a map: lists, the body's inputs a row of xs and the pos_args
  CHECK(printed.find("map_impl = torch.ops.higher_order.map_impl(body_graph_0, [xs], [y, c_lifted_tensor_0, "
                     "c_lifted_tensor_1])") != std::string::npos);
  CHECK(printed.find("def forward(self, xs: \"f32[3]\", y: \"f32[3]\"") != std::string::npos);
  CHECK(printed.find("getitem: \"f32[4, 3]\" = map_impl[0]") != std::string::npos);
  engine e(p);
  for (const auto& [layout, in] : xport_test::layouts_of(xs)) {
    INFO(layout);
    const auto want = at::relu(lin(in)) + y;  // what mapping each row computes, batched
    CHECK(at::allclose(fn(in, y), want, 1e-5, 1e-6));
    CHECK(at::allclose(run(p, {in, y})[0], want, 1e-5, 1e-6));
    CHECK(at::allclose(e.run({in, y})[0], want, 1e-5, 1e-6));
  }
  const auto q = xport_test::reload(p);
  CHECK(to_string(q) == printed);
  CHECK(at::allclose(run(q, {xs * 2, y})[0], fn(xs * 2, y)));
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
  const auto core = run_decompositions(p);
  CHECK(at::allclose(run(core, {xs, y})[0], fn(xs, y), 1e-5, 1e-6));
#endif
  // gradients flow through every row
  auto xa = xs.clone().requires_grad_(true), xb = xs.clone().requires_grad_(true);
  run(p, {xa, y})[0].pow(2).sum().backward();
  fn(xb, y).pow(2).sum().backward();
  CHECK(at::allclose(xa.grad(), xb.grad(), 1e-5, 1e-6));
}

TEST_CASE("xport::map: several results stacked, a dynamic number of rows, torch's errors") {
  auto fn = [](const at::Tensor& xs) {
    return xport::map([](const at::Tensor& row) { return std::tuple{row.sin(), row.sum()}; }, xs);
  };
  const auto xs = at::randn({5, 2});
  const auto p = export_program(fn, std::tuple{xs}, {.input_names = {"xs"}, .dynamic_shapes = {{"xs", {{0, Dim("rows", 1, 64)}}}}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("getitem_1: \"f32[s") != std::string::npos);  // stacked over the symbolic rows
  for (std::int64_t rows : {1, 5, 17})
    for (const auto& [layout, x] : xport_test::layouts_of(at::randn({rows, 2}))) {
      INFO(layout << " rows " << rows);
      const auto outs = run(p, {x});
      REQUIRE(outs.size() == 2);
      CHECK(at::equal(outs[0], x.sin()));
      CHECK(at::allclose(outs[1], x.sum(1)));
    }
  XPORT_CHECK_THROWS_MSG(fn(at::randn({0, 2})), xport::error, "Leading dimensions of mapped xs cannot be 0.");
  XPORT_CHECK_THROWS_MSG(export_program(fn, std::tuple{at::randn({0, 2})}), xport::error,
                         "Leading dimensions of mapped xs cannot be 0.");
  auto mutate = [](const at::Tensor& x) {
    return xport::map([](const at::Tensor& row) { return row.mul_(2).clone(); }, x);
  };
  XPORT_CHECK_THROWS_MSG(export_program(mutate, std::tuple{xs}), xport::error,
                         "Higher order ops do not support input mutation: node 'mul_' of subgraph 'body_graph_0'");
}

TEST_CASE("xport::map: xs a tree of tensors, each mapped over its leading dim, as torch.map takes a pytree") {
  using T2 = std::tuple<at::Tensor, at::Tensor>;
  auto fn = [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& w) {
    return xport::map([](const T2& row, const at::Tensor& v) { return (std::get<0>(row) * v).sum() + std::get<1>(row); },
                      T2{a, b}, std::tuple{w});
  };
  const auto a = at::randn({4, 3}), b = at::randn({4, 2}), w = at::randn({3});
  const auto p = export_program(fn, std::tuple{a, b, w}, {.input_names = {"a", "b", "w"}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("torch.ops.higher_order.map_impl(body_graph_0, [a, b], [w])") != std::string::npos);
  CHECK(printed.find("def forward(self, a: \"f32[3]\", b: \"f32[2]\", w: \"f32[3]\"") != std::string::npos);
  for (const auto& [layout, in] : xport_test::layouts_of(a)) {
    INFO(layout);
    const auto want = (in * w).sum(1, true) + b;  // each row's result, batched
    CHECK(at::allclose(fn(in, b, w), want, 1e-5, 1e-6));
    CHECK(at::allclose(run(p, {in, b, w})[0], want, 1e-5, 1e-6));
  }
  XPORT_CHECK_THROWS_MSG(fn(a, at::randn({5, 2}), w), xport::error,
                         "Leading dimensions of mapped xs must be consistent. Got shapes [[4, 3], [5, 2]].");
  XPORT_CHECK_THROWS_MSG(export_program(fn, std::tuple{a, at::randn({5, 2}), w}), xport::error,
                         "Leading dimensions of mapped xs must be consistent. Got shapes [[4, 3], [5, 2]].");
}

TEST_CASE("xport::map (strict): the body is traced on a row of sym_tensors, with its C++ lines") {
  auto fn = [](const sym_tensor& xs, const sym_tensor& w) {
    return xport::map([](const sym_tensor& row, const sym_tensor& v) { return relu(row * v) - 1.0; }, xs, std::tuple{w});
  };
  const auto xs = at::randn({3, 4}), w = at::randn({4});
  const auto p = export_program<xport::strict>(fn, std::tuple{xs, w}, {.input_names = {"xs", "w"}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("torch.ops.higher_order.map_impl(body_graph_0, [xs], [w])") != std::string::npos);
  CHECK(printed.find("code: return xport::map([](const sym_tensor& row, const sym_tensor& v) { return relu(row * v) - 1.0; }, "
                     "xs, std::tuple{w});") != std::string::npos);
  for (const auto& [layout, in] : xport_test::layouts_of(xs)) {
    INFO(layout);
    CHECK(at::allclose(run(p, {in, w})[0], at::relu(in * w) - 1.0));
  }
}

// ---- xport::scan ---------------------------------------------------------------------------

namespace {
/// ScanRNN's recurrence as a plain loop over the sequence: the last state, the stacked ys.
std::tuple<at::Tensor, at::Tensor> rnn_by_hand(xport_models::ScanRNN& net, at::Tensor h, const at::Tensor& xs) {
  std::vector<at::Tensor> ys;
  for (std::int64_t t = 0; t < xs.size(0); ++t) {
    h = at::tanh(net->inp(xs[t]) + net->rec(h));
    ys.push_back(net->out(h));
  }
  return {h, at::stack(ys)};
}
}  // namespace

TEST_CASE("xport::scan (non-strict): an RNN over a sequence, captured as torch.scan, runs as eager does") {
  torch::manual_seed(0);
  xport_models::ScanRNN net;
  net->eval();
  const auto h0 = at::randn({2, 4}), xs = at::randn({5, 2, 3});
  const auto p = export_program(net, std::tuple{h0, xs}, {.input_names = {"h0", "xs"}});
  const auto printed = to_string(p);
  INFO(printed);
  // as torch.export records a scan (pt2_fixtures.py ScanRNN): init and xs as lists, the
  // parameters the combine function reads lifted to additional inputs (a tuple), by FQN
  CHECK(printed.find("scan = torch.ops.higher_order.scan(scan_combine_graph_0, [h0], [xs], (p_inp_bias, p_inp_weight, "
                     "p_out_bias, p_out_weight, p_rec_bias, p_rec_weight))") != std::string::npos);
  CHECK(printed.find("def forward(self, arg0_1: \"f32[2, 4]\", arg1_1: \"f32[2, 3]\"") != std::string::npos);
  CHECK(printed.find("return [tanh, ") != std::string::npos);  // the combine graph returns a list, as torch prints it
  CHECK(printed.find("getitem_1: \"f32[5, 2, 2]\" = scan[1]") != std::string::npos);
  engine e(p);
  for (const auto& [layout, in] : xport_test::layouts_of(xs)) {
    INFO(layout);
    const auto [h, ys] = rnn_by_hand(net, h0, in);
    const auto eager = net->forward(h0, in);  // eagerly, xport::scan loops
    CHECK(at::allclose(std::get<0>(eager), h, 1e-5, 1e-6));
    CHECK(at::allclose(std::get<1>(eager), ys, 1e-5, 1e-6));
    for (const auto& outs : {run(p, {h0, in}), e.run({h0, in})}) {
      REQUIRE(outs.size() == 2);
      CHECK(at::allclose(outs[0], h, 1e-5, 1e-6));
      CHECK(at::allclose(outs[1], ys, 1e-5, 1e-6));
    }
  }
  // saved and loaded, the operands are lists and the combine graph returns a tuple, as
  // torch.export.load gives them
  const auto q = xport_test::reload(p);
  const auto loaded = to_string(q);
  CHECK(loaded.find("torch.ops.higher_order.scan(scan_combine_graph_0, [h0], [xs], [p_inp_bias, ") != std::string::npos);
  CHECK(loaded.find("return [tanh, ") == std::string::npos);
  CHECK(at::allclose(run(q, {-h0, xs})[1], std::get<1>(net->forward(-h0, xs)), 1e-5, 1e-6));
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
  const auto core = run_decompositions(p);
  CHECK(to_string(core).find("return [tanh, ") != std::string::npos);  // lowered inside, still a list
  CHECK(at::allclose(run(core, {h0, xs})[1], std::get<1>(rnn_by_hand(net, h0, xs)), 1e-5, 1e-6));
#endif
  // gradients flow through every step, to the input and the initial state
  auto xa = xs.clone().requires_grad_(true), xb = xs.clone().requires_grad_(true);
  auto ha = h0.clone().requires_grad_(true), hb = h0.clone().requires_grad_(true);
  run(p, {ha, xa})[1].pow(2).sum().backward();
  std::get<1>(rnn_by_hand(net, hb, xb)).pow(2).sum().backward();
  CHECK(at::allclose(xa.grad(), xb.grad(), 1e-5, 1e-6));
  CHECK(at::allclose(ha.grad(), hb.grad(), 1e-5, 1e-6));
}

TEST_CASE("xport::scan: tuple carries, dim and reverse, a dynamic sequence length, torch's errors") {
  // a running sum and a running max over dim 1, from the end, ys a tuple of two
  auto fn = [](const at::Tensor& s0, const at::Tensor& m0, const at::Tensor& xs) {
    return xport::scan(
        [](const std::tuple<at::Tensor, at::Tensor>& c, const at::Tensor& x) {
          auto s = std::get<0>(c) + x;
          auto m = at::maximum(std::get<1>(c), x);
          return std::tuple{std::tuple{s, m}, std::tuple{s * 2, x.sum()}};
        },
        std::tuple{s0, m0}, xs, {.dim = 1, .reverse = true});
  };
  auto by_hand = [](at::Tensor s, at::Tensor m, const at::Tensor& xs) {
    std::vector<at::Tensor> a(static_cast<std::size_t>(xs.size(1))), b(a.size());
    for (auto t = xs.size(1) - 1; t >= 0; --t) {
      const auto x = xs.select(1, t);
      s = s + x;
      m = at::maximum(m, x);
      a[static_cast<std::size_t>(t)] = s * 2;
      b[static_cast<std::size_t>(t)] = x.sum();
    }
    return std::tuple{s, m, at::stack(a, 1), at::stack(b, 0)};
  };
  auto flat = [&](const at::Tensor& s0, const at::Tensor& m0, const at::Tensor& xs) {
    auto [c, ys] = fn(s0, m0, xs);
    return std::tuple{std::get<0>(c), std::get<1>(c), std::get<0>(ys), std::get<1>(ys)};
  };
  const auto s0 = at::zeros({3}), m0 = at::full({3}, -1e9), xs = at::randn({3, 6});
  const auto p = export_program(flat, std::tuple{s0, m0, xs},
                                {.input_names = {"s0", "m0", "xs"}, .dynamic_shapes = {{"s0", {}}, {"m0", {}}, {"xs", {{1, Dim("steps", 1, 64)}}}}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("torch.ops.higher_order.scan(scan_combine_graph_0, [s0, m0], [flip], ())") != std::string::npos);
  CHECK(printed.find("getitem_2: \"f32[s") != std::string::npos);  // stacked over the symbolic steps
  for (std::int64_t steps : {1, 6, 11})
    for (const auto& [layout, x] : xport_test::layouts_of(at::randn({3, steps}))) {
      INFO(layout << " steps " << steps);
      const auto want = by_hand(s0, m0, x);
      const auto eager = flat(s0, m0, x);
      const auto outs = run(p, {s0, m0, x});
      REQUIRE(outs.size() == 4);
      CHECK(at::allclose(std::get<0>(eager), std::get<0>(want)));
      CHECK(at::allclose(std::get<2>(eager), std::get<2>(want)));
      CHECK(at::allclose(outs[0], std::get<0>(want)));
      CHECK(at::equal(outs[1], std::get<1>(want)));
      CHECK(at::allclose(outs[2], std::get<2>(want)));
      CHECK(at::allclose(outs[3], std::get<3>(want)));
    }
  const auto q = xport_test::reload(p);
  CHECK(at::allclose(run(q, {s0, m0, xs * 3})[2], std::get<2>(by_hand(s0, m0, xs * 3))));
  // torch's rules, with its texts, eagerly and at export
  XPORT_CHECK_THROWS_MSG(flat(s0, m0, at::randn({3, 0})), xport::error,
                         "All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0");
  XPORT_CHECK_THROWS_MSG(fn(s0, m0, at::randn({3})), xport::error,
                         "All xs leaves must at least have 'dim' number of dimensions and scan dimension > 0");
  auto grows = [](const at::Tensor& h0, const at::Tensor& xs) {
    return std::get<1>(xport::scan([](const at::Tensor& h, const at::Tensor& x) { return std::tuple{h.sum(0), x * 2}; }, h0, xs));
  };
  const auto h0 = at::zeros({2, 3}), seq = at::randn({4, 3});
  XPORT_CHECK_THROWS_MSG(grows(h0, seq), xport::error,
                         "Expected init and carry to have same metadata but found: pair[0] differ, where init is "
                         "Float[2, 3] and carry is Float[3]");
  XPORT_CHECK_THROWS_MSG(export_program(grows, std::tuple{h0, seq}), xport::error,
                         "Expected init and carry to have same metadata but found: pair[0] differ, where init is "
                         "f32[2, 3] and carry is f32[3]");
  auto aliases = [](const at::Tensor& h0, const at::Tensor& xs) {
    return std::get<1>(xport::scan([](const at::Tensor& h, const at::Tensor& x) { return std::tuple{h + x, x}; }, h0, xs));
  };
  XPORT_CHECK_THROWS_MSG(export_program(aliases, std::tuple{at::zeros({3}), seq}), xport::error,
                         "Higher order ops do not support aliasing: subgraph 'scan_combine_graph_0' of 'scan' returns its input");
}

TEST_CASE("xport::scan (strict): the combine function is traced on sym_tensors, with its C++ lines") {
  auto fn = [](const sym_tensor& h0, const sym_tensor& xs, const sym_tensor& w) {
    auto [h, ys] = xport::scan([&](const sym_tensor& h, const sym_tensor& x) {
      auto next = relu(h * w + x);
      return std::tuple{next, next * 2.0};
    }, h0, xs, {.dim = 1});
    return std::tuple{h, ys};
  };
  const auto h0 = at::randn({4}), xs = at::randn({4, 3}), w = at::randn({4});
  const auto p = export_program<xport::strict>(fn, std::tuple{h0, xs, w}, {.input_names = {"h0", "xs", "w"}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("torch.ops.aten.movedim.int(xs, 1, 0)") != std::string::npos);
  CHECK(printed.find("torch.ops.higher_order.scan(scan_combine_graph_0, [h0], [movedim], (w,))") != std::string::npos);
  CHECK(printed.find("code: auto next = relu(h * w + x);") != std::string::npos);
  for (const auto& [layout, in] : xport_test::layouts_of(xs)) {
    INFO(layout);
    auto h = h0;
    std::vector<at::Tensor> ys;
    for (std::int64_t t = 0; t < 3; ++t) {
      h = at::relu(h * w + in.select(1, t));
      ys.push_back(h * 2.0);
    }
    const auto outs = run(p, {h0, in, w});
    REQUIRE(outs.size() == 2);
    CHECK(at::allclose(outs[0], h));
    CHECK(at::allclose(outs[1], at::stack(ys, 1)));
  }
}

TEST_CASE("xport::scan: passes work inside the combine graph, which still returns a list as torch prints it") {
  auto fn = [](const at::Tensor& h0, const at::Tensor& xs) {
    return xport::scan(
        [](const at::Tensor& h, const at::Tensor& x) {
          auto unused = x.exp();
          (void)unused;
          auto next = h + x.sin() * x.sin();
          return std::tuple{next, next.cos()};
        },
        h0, xs);
  };
  auto p = export_program(fn, std::tuple{at::zeros({3}), at::randn({4, 3})});
  const auto& body = [&]() -> const subgraph& { return *cond_node(p).args()[0].as_graph(); };
  CHECK(calls_in(body(), "aten::sin") == 2);
  CHECK(calls_in(body(), "aten::exp") == 1);
  const auto r = p | (passes::cse | passes::dce);
  REQUIRE(r.ok());
  CHECK(calls_in(body(), "aten::sin") == 1);
  CHECK(calls_in(body(), "aten::exp") == 0);
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("return [add, cos]") != std::string::npos);
  for (const auto& [layout, xs] : xport_test::layouts_of(at::randn({4, 3}))) {
    INFO(layout);
    const auto outs = run(p, {at::ones({3}), xs});
    const auto want = fn(at::ones({3}), xs);
    CHECK(at::equal(outs[0], std::get<0>(want)));
    CHECK(at::equal(outs[1], std::get<1>(want)));
  }
}

// ---- data-dependent sizes: nonzero, masked_select, boolean-mask indexing ---------------------------

TEST_CASE("data-dependent: a mixture of experts routing with nonzero exports, with unbacked sizes torch's way") {
  torch::manual_seed(0);
  xport_models::MoE moe;
  moe->eval();
  const auto x = at::randn({10, 8});
  auto p = export_program(moe, std::tuple{x});
  const auto text = to_string(p);
  CHECK(text.find("nonzero: \"i64[u0, 1]\" = torch.ops.aten.nonzero.default(eq)") != std::string::npos);
  CHECK(text.find("sym_size_int: \"Sym(u0)\" = torch.ops.aten.sym_size.int(nonzero, 0)") != std::string::npos);
  CHECK(text.find("ge: \"Sym(u0 >= 0)\" = sym_size_int >= 0") != std::string::npos);
  CHECK(text.find("torch.ops.aten._assert_scalar.default(le, \"Runtime assertion failed for expression u0 <= 10 on node 'le'\")") !=
        std::string::npos);
  CHECK(text.find("index: \"f32[u0, 8]\" = torch.ops.aten.index.Tensor(x, [squeeze])") != std::string::npos);
  CHECK(text.find("Range constraints: {u0: VR[0, 10], u1: VR[0, 10], u2: VR[0, 10]}") != std::string::npos);
  verify(p);
  const auto lowered = run_decompositions(p);
  verify(lowered);
  auto optimized = p.clone();
  REQUIRE((optimized | (passes::canonicalize | passes::cse | passes::fold | passes::dce)).ok());
  const auto loaded = xport_test::reload(p);
  engine e(p);
  // every layout; a batch whose tokens all go to one expert (the others get u = 0 rows)
  for (const auto& in : {at::randn({10, 8}), at::randn({20, 8}).slice(0, 0, 20, 2), at::randn({8, 10}).t(), at::zeros({10, 8}),
                         x.contiguous(at::MemoryFormat::Contiguous)}) {
    // inputs run in the exported layout (Note [Inputs in the exported layout]): bits as eager's on a contiguous copy
    const auto want = moe->forward(in.contiguous());
    CHECK(at::allclose(moe->forward(in), want, 1e-5, 1e-6));
    CHECK(at::equal(run(p, {in})[0], want));
    CHECK(at::equal(e.run({in})[0], want));
    CHECK(at::equal(run(optimized, {in})[0], want));
    CHECK(at::equal(run(loaded, {in})[0], want));
    CHECK(at::allclose(run(lowered, {in})[0], want, 1e-5, 1e-6));
  }
  // a dynamic token count: the counts are bounded by it
  auto d = export_program(moe, std::tuple{x}, {.input_names = {"x"}, .dynamic_shapes = {{"x", {{0, Dim("tokens", 1, 256)}}}}});
  CHECK(to_string(d).find("Range constraints: {u0: VR[0, 256], u1: VR[0, 256], u2: VR[0, 256], s77: VR[1, 256]}") != std::string::npos);
  for (const auto n : {1, 37, 256}) {
    const auto in = at::randn({n, 8});
    CHECK(at::equal(run(d, {in})[0], moe->forward(in)));
  }
  const auto dl = run_decompositions(d);
  for (const auto n : {2, 40}) {
    const auto in = at::randn({n, 8});
    CHECK(at::allclose(run(dl, {in})[0], moe->forward(in), 1e-5, 1e-6));
  }
}

TEST_CASE("data-dependent: boolean masks and masked_select give unbacked rows; code that decides on them is a graph break") {
  auto masked = [](const at::Tensor& x) { return std::tuple{x.index({x > 0}) * 2, at::masked_select(x, x < 0).sum()}; };
  const auto x = at::randn({5, 3});
  auto p = export_program(masked, std::tuple{x});
  CHECK(to_string(p).find("index: \"f32[u0]\" = torch.ops.aten.index.Tensor(x, [gt])") != std::string::npos);
  CHECK(to_string(p).find("masked_select: \"f32[u1]\"") != std::string::npos);
  for (const auto& in : {at::randn({5, 3}), -at::ones({5, 3}), at::randn({3, 5}).t()}) {
    const auto out = run(p, {in});
    CHECK(at::equal(out[0], in.index({in > 0}) * 2));
    CHECK(at::equal(out[1], at::masked_select(in, in < 0).sum()));
  }
  // a branch on the count, a slice that clamps it: both would be wrong for other data
  auto branches = [](const at::Tensor& x) {
    const auto idx = at::nonzero(x > 0);
    return idx.size(0) > 6 ? x * 2 : x + 1;
  };
  CHECK_THROWS_WITH_AS(export_program(branches, std::tuple{at::randn({4, 4})}),
                       doctest::Contains("graph break: the traced code decides something on the number of rows a data-dependent call gives"),
                       graph_break);
  auto clamps = [](const at::Tensor& x) { return at::nonzero(x > 0).slice(0, 0, 4).sum(0); };
  CHECK_THROWS_AS(export_program(clamps, std::tuple{at::randn({4, 4})}), graph_break);
  // unique: values and counts of u0 rows, the inverse of the input's shape
  auto uniq = [](const at::Tensor& t) {
    const auto [v, inverse, counts] = at::_unique2(t, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/true);
    return std::tuple{v * 2, inverse, counts};
  };
  const auto u = export_program(uniq, std::tuple{at::tensor({3L, 1L, 3L, 2L, 1L, 1L})});
  CHECK(to_string(u).find("Range constraints: {u0: VR[0, 6]}") != std::string::npos);
  for (const auto& in : {at::tensor({3L, 1L, 3L, 2L, 1L, 1L}), at::tensor({5L, 5L, 5L, 5L, 5L, 5L}), at::arange(12L).slice(0, 0, 12, 2)}) {
    const auto got = run(u, {in});
    const auto [v, inverse, counts] = at::_unique2(in, true, true, true);
    CHECK(at::equal(got[0], v * 2));
    CHECK(at::equal(got[1], inverse));
    CHECK(at::equal(got[2], counts));
  }
  // item() of a float tensor is still a graph break, with the way out
  auto reads = [](const at::Tensor& x) { return x * x.sum().item<double>(); };
  CHECK_THROWS_WITH_AS(export_program(reads, std::tuple{at::randn({3})}), doctest::Contains("Tensor::item()"), graph_break);
}

TEST_CASE("data-dependent: item() of an integer tensor is an unbacked SymInt; xport::check_range gives the facts slicing needs") {
  // the twin of tests/python/pt2_fixtures.py's ItemSlice (torch._check(k >= 1), torch._check(k <= x.shape[0]))
  auto first_rows = [](const at::Tensor& x, const at::Tensor& n) {
    const auto k = n.item<std::int64_t>();
    xport::check_range(k, 1, x.size(0));
    return x.slice(0, 0, k) + 1;
  };
  const auto x = at::randn({8, 3});
  const auto p = export_program(first_rows, std::tuple{x, at::tensor(3L)}, {.input_names = {"x", "n"}});
  const auto text = to_string(p);
  CHECK(text.find("item: \"Sym(u0)\" = torch.ops.aten.item.default(n)") != std::string::npos);
  CHECK(text.find("ge_1: \"Sym(u0 >= 1)\" = item >= 1") != std::string::npos);  // torch's names (print.hpp)
  CHECK(text.find("slice_1: \"f32[u0, 3]\" = torch.ops.aten.slice.Tensor(x, 0, 0, item)") != std::string::npos);
  CHECK(text.find("Range constraints: {u0: VR[1, 8]}") != std::string::npos);
  for (const std::int64_t k : {1, 5, 8}) CHECK(at::equal(run(p, {x, at::tensor(k)})[0], first_rows(x, at::tensor(k))));
  CHECK_THROWS_WITH_AS(run(p, {x, at::tensor(0L)}),
                       doctest::Contains("Runtime assertion failed for expression u0 >= 1 on node 'item' (u0 = 0 in this call)"), run_error);
  CHECK_THROWS_WITH_AS(run(p, {x, at::tensor(9L)}), doctest::Contains("u0 <= 8"), run_error);
  const auto back = xport_test::reload(p);
  CHECK(at::equal(run(back, {x, at::tensor(4L)})[0], x.slice(0, 0, 4) + 1));
  if (XPORT_TEST_TORCH_FUNCTIONALIZATION) {  // LibTorch 1.13 lowers with xport's functionalizer, which loses item()'s symbol
    CHECK(at::equal(run(run_decompositions(p), {x, at::tensor(6L)})[0], x.slice(0, 0, 6) + 1));
  } else {
    CHECK_THROWS_WITH_AS(run(run_decompositions(p), {x, at::tensor(6L)}), doctest::Contains("uses a symbol no input binds"), run_error);
  }
  // without the facts the slice clamps some values: a graph break that names the way out
  auto unchecked = [](const at::Tensor& x, const at::Tensor& n) { return x.slice(0, 0, n.item<std::int64_t>()) + 1; };
  CHECK_THROWS_WITH_AS(export_program(unchecked, std::tuple{x, at::tensor(3L)}), doctest::Contains("xport::check_range(v, min, max)"),
                       graph_break);
  // no facts needed where every value works: u0 in VR[-int_oo, int_oo], as torch has it
  auto scale = [](const at::Tensor& x, const at::Tensor& n) { return x * n.item<std::int64_t>(); };
  const auto s = export_program(scale, std::tuple{at::randn({3}), at::tensor(2L)}, {.input_names = {"x", "n"}});
  CHECK(to_string(s).find("Range constraints: {u0: VR[-int_oo, int_oo]}") != std::string::npos);
  const auto v = at::randn({3});
  for (const std::int64_t k : {-7, 0, 1000}) CHECK(at::equal(run(s, {v, at::tensor(k)})[0], v * k));
  // outside export the check runs on the value
  CHECK_THROWS_WITH_AS(xport::check_range(0, 1, 8), "[xport.check.failed] xport::check_range: 0 is not in VR[1, 8]", run_error);
}

namespace {
/// `with torch.no_grad(): y = self.l(x) * 2; return x + y, self.l(x).relu()`: NoGradBlock of
/// tests/python/pt2_fixtures.py, in C++.
struct NoGradBlockImpl : torch::nn::Module {
  torch::nn::Linear l{4, 4};
  NoGradBlockImpl() { register_module("l", l); }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto y = xport::no_grad([this](const at::Tensor& x) { return l(x) * 2; }, std::tuple{x});
    return {x + y, l(x).relu()};
  }
};
TORCH_MODULE(NoGradBlock);
}  // namespace

TEST_CASE("xport::no_grad (non-strict): captured as torch's wrap_with_set_grad_enabled, run, saved, lowered") {
  torch::manual_seed(0);
  NoGradBlock net;
  const auto x = at::randn({2, 4});
  const auto p = export_program(net, std::tuple{x});
  const auto printed = to_string(p);
  // torch 2.13 prints NoGradBlock's export with this line and class
  INFO(printed);
  // (torch names the node after the block's last op, `mul = ...`; xport after the operator)
  CHECK(printed.find("torch.ops.higher_order.wrap_with_set_grad_enabled(False, submod_1, x, p_l_weight, p_l_bias)") !=
        std::string::npos);
  CHECK(printed.find("class submod_1(torch.nn.Module):") != std::string::npos);
  const auto [w0, w1] = net->forward(x);
  engine e(p);
  for (const auto& [layout, in] : xport_test::layouts_of(x)) {
    INFO(layout);
    const auto [e0, e1] = net->forward(in);
    const auto got = run(p, {in});
    CHECK(at::allclose(got[0], e0, 1e-5, 1e-6));
    CHECK(at::allclose(got[1], e1, 1e-5, 1e-6));
    CHECK(at::allclose(e.run({in})[0], e0, 1e-5, 1e-6));
  }
  // autograd: nothing flows back through the no_grad block, as eagerly
  const auto xe = x.clone().requires_grad_(), xr = x.clone().requires_grad_();
  const auto [a0, a1] = net->forward(xe);
  (a0.sum() + a1.sum()).backward();
  const auto r = run(p, {xr});
  CHECK_FALSE(r[0].grad_fn() == nullptr);
  (r[0].sum() + r[1].sum()).backward();
  CHECK(at::allclose(xr.grad(), xe.grad(), 1e-5, 1e-6));
  // saved and loaded with its body; lowered as torch lowers it (the body inlined, no HOP left)
  const auto q = xport_test::reload(p);
  CHECK(to_string(q) == printed);
  CHECK(at::equal(run(q, {x})[0], run(p, {x})[0]));
  const auto core = run_decompositions(p);
  CHECK(to_string(core).find("higher_order") == std::string::npos);
  CHECK(at::allclose(run(core, {x})[0], w0, 1e-5, 1e-6));
  CHECK(at::allclose(run(core, {x})[1], w1, 1e-5, 1e-6));
  // eagerly, and under an export that already runs without grad, it is the block itself
  {
    const c10::AutoGradMode off(false);
    const auto p2 = export_program(net, std::tuple{x});
    CHECK(to_string(p2).find("higher_order") == std::string::npos);
  }
  CHECK(std::get<0>(net->forward(xe)).requires_grad());  // x + y: x still requires grad
}

TEST_CASE("xport::no_grad (strict): traced on sym_tensors into wrap_with_set_grad_enabled, with its C++ lines") {
  auto fn = [](const sym_tensor& x, const sym_tensor& w) {
    auto h = matmul(x, w);
    auto y = xport::no_grad([&](const sym_tensor& a) { return relu(matmul(a, w)) * 2.0; }, std::tuple{h});
    return h + y;
  };
  const auto x0 = at::randn({3, 3}), w0 = at::randn({3, 3});
  const auto p = export_program<xport::strict>(fn, std::tuple{x0, w0}, {.input_names = {"x", "w"}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("torch.ops.higher_order.wrap_with_set_grad_enabled(False, submod_1, matmul, w)") != std::string::npos);
  CHECK(printed.find("code: auto y = xport::no_grad([&](const sym_tensor& a) { return relu(matmul(a, w)) * 2.0; }, "
                     "std::tuple{h});") != std::string::npos);
  auto eager = [](const at::Tensor& x, const at::Tensor& w) {
    auto h = at::matmul(x, w);
    at::Tensor y;
    {
      const c10::NoGradGuard off;
      y = at::relu(at::matmul(h, w)) * 2.0;
    }
    return h + y;
  };
  CHECK(at::allclose(run(p, {x0, w0})[0], eager(x0, w0), 1e-5, 1e-6));
  // gradients flow around the block only, as eagerly
  const auto xe = x0.clone().requires_grad_(), we = w0.clone().requires_grad_();
  const auto xr = x0.clone().requires_grad_(), wr = w0.clone().requires_grad_();
  eager(xe, we).sum().backward();
  run(p, {xr, wr})[0].sum().backward();
  CHECK(at::allclose(xr.grad(), xe.grad(), 1e-5, 1e-6));
  CHECK(at::allclose(wr.grad(), we.grad(), 1e-5, 1e-6));
  // lowered as the non-strict block is: the body inlined
  const auto core = run_decompositions(p);
  CHECK(to_string(core).find("higher_order") == std::string::npos);
  CHECK(at::allclose(run(core, {x0, w0})[0], eager(x0, w0), 1e-5, 1e-6));
}

namespace {

// torch's out_dtype, written in C++ as tests/python/pt2_fixtures.py's OutDtype writes it in Python
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> out_dtype_calls(const at::Tensor& a, const at::Tensor& b,
                                                                           const at::Tensor& x, const at::Tensor& w,
                                                                           const at::Tensor& img, const at::Tensor& k) {
  const std::vector<std::int64_t> one{1, 1}, pad{1, 0}, none{0, 0};
  auto i = xport::out_dtype("aten::mm", at::kInt, {a, b});
  auto h = xport::out_dtype("aten::linear", at::kHalf, {x, w});
  auto c = xport::out_dtype("aten::convolution", at::kHalf, {img, k, c10::IValue(), one, pad, one, false, none, 1});
  auto m = xport::out_dtype("aten::mul.Scalar", at::kFloat, {x, 0.3});
  return {at::add(i, 1), h, c, m};
}

}  // namespace

TEST_CASE("export: C++ code under autocast is refused, never traced in the inputs' dtype") {
  // the capture runs ops on meta tensors, which autocast does not cast: a program traced under it
  // would compute in float32 where the code computes in bfloat16
  torch::manual_seed(0);
  torch::nn::Linear l(4, 4);
  const auto x = at::randn({2, 4});
  const auto autocast_forward = [&](const at::Tensor& t) {
    const xport::detail::autocast_scope mode(c10::DeviceType::CPU, at::kBFloat16, true, -1);
    return l(t).relu();
  };
  CHECK((autocast_forward(x).scalar_type() == at::kBFloat16));  // eagerly: bfloat16
  XPORT_CHECK_THROWS_MSG(export_program(autocast_forward, std::tuple{x}), export_error,
                         "export: autocast is on for cpu (BFloat16) while the traced code calls aten::");
  XPORT_CHECK_THROWS_MSG(export_program(autocast_forward, std::tuple{x}), export_error,
                         "write the block with xport::autocast(at::kCPU, at::kBFloat16, fn, operands)");
  {  // export_program called inside an autocast region: the same
    const xport::detail::autocast_scope mode(c10::DeviceType::CPU, at::kBFloat16, true, -1);
    XPORT_CHECK_THROWS_MSG(export_program(l, std::tuple{x}), export_error, "xport traces on meta tensors");
  }
  // with autocast off, as before
  CHECK(at::allclose(run(export_program(l, std::tuple{x}), {x})[0], l(x)));
}

namespace {
/// A block under `torch.autocast("cpu", dtype=torch.bfloat16)`: a Linear (torch::nn's: addmm or
/// matmul + add_), an einsum (a composite op: autocast reaches the bmm it calls), a softmax of
/// the result and a float32 log_softmax of a cast back.
struct AutocastNetImpl : torch::nn::Module {
  torch::nn::Linear l{8, 8};
  at::Tensor w;
  AutocastNetImpl() {
    register_module("l", l);
    w = register_parameter("w", torch::randn({8, 8}));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto [s, ls] = xport::autocast(
        at::kCPU, at::kBFloat16,
        [this](const at::Tensor& t) {
          auto h = l(t);
          return std::tuple{at::einsum("bi,ij->bj", {h, w}).softmax(-1), h.to(at::kFloat).log_softmax(-1)};
        },
        std::tuple{x});
    return s.to(at::kFloat) + ls;
  }
};
TORCH_MODULE(AutocastNet);
}  // namespace

TEST_CASE("xport::autocast (non-strict): captured as torch's wrap_with_autocast, typed as autocast computes, run, "
          "saved, lowered with autocast's casts") {
  torch::manual_seed(0);
  AutocastNet net;
  const auto x = at::randn({4, 8});
  const auto want = net->forward(x);
  const auto p = export_program(net, std::tuple{x}, {.dynamic_shapes = {{"x", {{0, Dim("batch", 1, 64)}}}}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("torch.ops.higher_order.wrap_with_autocast('cpu', torch.bfloat16, True, False, submod_1, x, "
                     "p_l_weight, p_l_bias, p_w)") != std::string::npos);
  // the body's calls as written, typed as autocast computes them (the einsum's bmm is cast too)
  CHECK(printed.find("addmm: \"bf16[s77, 8]\" = torch.ops.aten.addmm.default(p_l_bias, x, t)") != std::string::npos);
  CHECK(printed.find("einsum: \"bf16[s77, 8]\" = torch.ops.aten.einsum.default('bi,ij->bj', [addmm, p_w])") !=
        std::string::npos);
  CHECK(printed.find("log_softmax: \"f32[s77, 8]\"") != std::string::npos);
  engine e(p);
  for (const auto& [layout, in] : xport_test::layouts_of(x)) {
    INFO(layout);
    const auto eager = net->forward(in);
    // bit for bit (LibTorch 1.13's bfloat16 gemm of a transposed input takes another path than the
    // program's: there within bfloat16's rounding)
    const auto same = [&](const at::Tensor& got) {
      return at::equal(got, eager) || (TORCH_VERSION_MAJOR < 2 && at::allclose(got, eager, 1e-2, 1e-2));
    };
    CHECK(same(run(p, {in})[0]));
    CHECK(same(e.run({in})[0]));
  }
  const auto x9 = at::randn({9, 8});
  CHECK(at::equal(run(p, {x9})[0], net->forward(x9)));
  // saved with its body and loaded as it was
  const auto q = xport_test::reload(p);
  CHECK(to_string(q) == printed);
  CHECK(at::equal(run(q, {x})[0], want));
  // lowered as torch lowers a torch.autocast block: each cast autocast makes is a _to_copy call of
  // its own, in the order its kernel makes them (the weight's, then the input's, then the bias's)
  const auto core = run_decompositions(p);
  const auto lowered = to_string(core);
  INFO(lowered);
  CHECK(lowered.find("higher_order") == std::string::npos);
  CHECK(lowered.find("_to_copy: \"bf16[8, 8]\" = torch.ops.aten._to_copy.default(permute, dtype = torch.bfloat16") !=
        std::string::npos);
  CHECK(lowered.find("bmm: \"bf16[1, s77, 8]\" = torch.ops.aten.bmm.default(view, _to_copy_3)") != std::string::npos);
  CHECK(at::equal(run(core, {x})[0], want));
  CHECK(at::equal(run(core, {x9})[0], net->forward(x9)));
  // eagerly it is LibTorch's autocast
  CHECK((std::get<0>(xport::autocast(
             at::kCPU, at::kBFloat16, [&](const at::Tensor& t) { return std::tuple{net->l(t)}; }, std::tuple{x}))
             .scalar_type() == at::kBFloat16));
  CHECK_FALSE(xport::detail::autocast_enabled(c10::DeviceType::CPU));
}

TEST_CASE("xport::autocast (strict): traced on sym_tensors into wrap_with_autocast, typed as autocast computes") {
  auto fn = [](const sym_tensor& x, const sym_tensor& w) {
    auto [y] = xport::autocast(at::kCPU, at::kBFloat16, [&](const sym_tensor& a) { return std::tuple{matmul(relu(a), w)}; },
                               std::tuple{x});
    return y.to(at::kFloat) + x;
  };
  const auto x0 = at::randn({3, 4}), w0 = at::randn({4, 4});
  const auto p = export_program<xport::strict>(fn, std::tuple{x0, w0}, {.input_names = {"x", "w"}});
  const auto printed = to_string(p);
  INFO(printed);
  CHECK(printed.find("torch.ops.higher_order.wrap_with_autocast('cpu', torch.bfloat16, True, False, submod_1, x, w)") !=
        std::string::npos);
  CHECK(printed.find("relu: \"f32[3, 4]\"") != std::string::npos);  // no autocast kernel: as it was
  CHECK(printed.find("matmul: \"bf16[3, 4]\"") != std::string::npos);
  auto eager = [](const at::Tensor& x, const at::Tensor& w) {
    at::Tensor y;
    {
      const xport::detail::autocast_scope mode(c10::DeviceType::CPU, at::kBFloat16, true, -1);
      y = at::matmul(at::relu(x), w);
    }
    return y.to(at::kFloat) + x;
  };
  CHECK(at::equal(run(p, {x0, w0})[0], eager(x0, w0)));
  CHECK(at::equal(run(run_decompositions(p), {x0, w0})[0], eager(x0, w0)));
}

TEST_CASE("xport::autocast for cuda leaves CPU tensors alone, as eagerly") {
  const auto fn = [](const at::Tensor& x) {
    auto [y] = xport::autocast(
        at::kCUDA, at::kHalf, [](const at::Tensor& t) { return std::tuple{at::matmul(t, t)}; }, std::tuple{x});
    return y;
  };
  const auto x = at::randn({3, 3});
  const auto p = export_program(fn, std::tuple{x});
  CHECK(to_string(p).find("wrap_with_autocast('cuda', torch.float16, True, False, submod_1, x)") != std::string::npos);
  CHECK(((run(p, {x})[0].scalar_type() == at::kFloat)));
  CHECK(at::equal(run(p, {x})[0], fn(x)));
  const auto core = run_decompositions(p);
  CHECK(to_string(core).find("_to_copy") == std::string::npos);
  CHECK(at::equal(run(core, {x})[0], fn(x)));
}

TEST_CASE("xport::autocast on CUDA: a float16 block exported on the GPU, run and lowered as eagerly" *
          doctest::skip(!at::hasCUDA())) {
  const c10::Device gpu(c10::kCUDA);
  torch::manual_seed(0);
  torch::nn::Linear l(8, 8);
  l->to(gpu);
  const auto fn = [&](const at::Tensor& x) {
    auto [y, z] = xport::autocast(
        at::kCUDA, at::kHalf,
        [&](const at::Tensor& t) {
          auto h = l(t);
          return std::tuple{h, at::einsum("bi,bj->ij", {h, t})};
        },
        std::tuple{x});
    return std::tuple{y, z.to(at::kFloat) + 1};
  };
  const auto x = at::randn({4, 8}, at::TensorOptions().device(gpu));
  const auto [w0, w1] = fn(x);
  const auto p = export_program(fn, std::tuple{x});
  INFO(to_string(p));
  const auto core = run_decompositions(p);
  for (const auto* q : {&p, &core}) {
    const auto got = run(*q, {x});
    CHECK(((got[0].scalar_type() == w0.scalar_type())));
    CHECK(at::equal(got[0], w0));
    CHECK(at::equal(got[1], w1));
    CHECK(at::equal(engine(*q).run({x})[1], w1));
  }
}

TEST_CASE("run_decompositions of torch's autocast program: autocast's casts recorded as torch records them") {
  // AutocastBlock of tests/python/pt2_fixtures.py: `with torch.autocast("cpu", bfloat16): y = x @ self.w`
  torch::manual_seed(0);
  const auto w = at::randn({4, 4});
  const auto p = export_program(
      [&](const at::Tensor& x) {
        auto [y] = xport::autocast(
            at::kCPU, at::kBFloat16, [&](const at::Tensor& t) { return std::tuple{at::matmul(t, w)}; }, std::tuple{x});
        return y.to(at::kFloat) + 1;
      },
      std::tuple{at::randn({2, 4})});
  const auto lowered = to_string(run_decompositions(p));
  INFO(lowered);
  // torch 2.13's run_decompositions of the Python twin: the same three calls (matmul's casts, then mm)
  for (const char* line : {"_to_copy: \"bf16[4, 4]\" = torch.ops.aten._to_copy.default(",
                           "_to_copy_1: \"bf16[2, 4]\" = torch.ops.aten._to_copy.default(",
                           "mm: \"bf16[2, 4]\" = torch.ops.aten.mm.default(_to_copy_1, _to_copy)"})
    CHECK(lowered.find(line) != std::string::npos);
}

TEST_CASE("xport::out_dtype: computed in the promoted type as torch's, exported as one node, run, lowered and saved") {
  const auto a = at::randint(-100, 100, {5, 16}, at::kChar), b = at::randint(-100, 100, {16, 3}, at::kChar);
  const auto x = at::randn({4, 8}, at::kHalf), w = at::randn({6, 8}, at::kHalf);
  const auto img = at::randn({2, 3, 6, 6}, at::kHalf), k = at::randn({4, 3, 3, 3}, at::kHalf);
  // eager: torch's out_dtype_fallback (int8 operands promoted with int32: no overflow; half ones
  // computed in float, then cast)
  const auto [i, h, c, m] = out_dtype_calls(a, b, x, w, img, k);
  CHECK(at::equal(i, at::add(at::mm(a.to(at::kInt), b.to(at::kInt)), 1)));
  CHECK(at::equal(h, at::linear(x.to(at::kFloat), w.to(at::kFloat)).to(at::kHalf)));
  CHECK(at::equal(c, at::convolution(img.to(at::kFloat), k.to(at::kFloat), {}, {1, 1}, {1, 0}, {1, 1}, false, {0, 0}, 1)
                         .to(at::kHalf)));
  CHECK((m.scalar_type() == at::kFloat));
  CHECK(at::equal(m, at::mul(x.to(at::kFloat), 0.3)));

  const auto p = export_program(out_dtype_calls, std::tuple{a, b, x, w, img, k}, {.input_names = {"a", "b", "x", "w", "img", "k"}});
  const auto printed = to_string(p);  // torch's lines for the same calls (the oracle fixture prints them)
  CHECK(printed.find("out_dtype: \"i32[5, 3]\" = torch.ops.higher_order.out_dtype(torch.ops.aten.mm.default, torch.int32, a, b)") !=
        std::string::npos);
  CHECK(printed.find("torch.ops.higher_order.out_dtype(torch.ops.aten.convolution.default, torch.float16, img, k, None, "
                     "[1, 1], [1, 0], [1, 1], False, [0, 0], 1)") != std::string::npos);
  CHECK(printed.find("out_dtype_3: \"f32[4, 8]\" = torch.ops.higher_order.out_dtype(torch.ops.aten.mul.Scalar, "
                     "torch.float32, x, 0.3)") != std::string::npos);
  CHECK(printed.find("out_dtype[0]") == std::string::npos);  // one tensor, not a list
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
  const auto lowered = run_decompositions(p);  // kept, as torch's core ATen keeps it
  CHECK(to_string(lowered).find("torch.ops.higher_order.out_dtype(torch.ops.aten.linear.default") != std::string::npos);
#else  // LibTorch 1.13: no functionalization, which lowers higher-order calls
  XPORT_CHECK_THROWS_MSG(run_decompositions(p), export_error, "is lowered only with LibTorch's functionalization");
  const auto& lowered = p;
#endif
  const auto reloaded = xport_test::reload(lowered);
  engine e(reloaded);
  // inputs a user may pass: contiguous, transposed, sliced, channels_last
  const std::vector<std::vector<at::Tensor>> calls{
      {a, b, x, w, img, k},
      {a.t().contiguous().t(), b.slice(0, 0, 16), x * 4, w.t().contiguous().t(),
       img.contiguous(at::MemoryFormat::ChannelsLast), -k}};
  for (const auto& in : calls) {
    const auto want = out_dtype_calls(in[0], in[1], in[2], in[3], in[4], in[5]);
    for (const auto& got : {run(p, in), run(reloaded, in), e.run(in)}) {
      REQUIRE(got.size() == 4);
      CHECK(at::equal(got[0], std::get<0>(want)));
      CHECK(at::equal(got[1], std::get<1>(want)));
      CHECK(at::equal(got[2], std::get<2>(want)));
      CHECK(at::equal(got[3], std::get<3>(want)));
    }
  }
}

TEST_CASE("xport::out_dtype: an operator torch's out_dtype does not take is refused with torch's text") {
  const auto a = at::randn({2, 2});
  CHECK_THROWS_WITH_AS(xport::out_dtype("aten::add.Tensor", at::kDouble, {a, a}),
                       doctest::Contains("out_dtype only allows the following operators: aten::linear, aten::mm"),
                       run_error);
  CHECK_THROWS_WITH_AS(xport::out_dtype("aten::add_.Tensor", at::kDouble, {a, a}),
                       doctest::Contains("needs to be a functional operator"), run_error);
  CHECK_THROWS_WITH_AS(xport::out_dtype("aten::max.dim", at::kDouble, {a, 0}),
                       doctest::Contains("can only apply to ops that return a single tensor"), run_error);
  CHECK_THROWS_WITH_AS(xport::out_dtype("aten::nope", at::kDouble, {a}), doctest::Contains("no operator aten::nope"),
                       run_error);
}
