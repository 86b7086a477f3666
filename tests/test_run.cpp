// The interpreter against eager LibTorch: 40 ops (multi-output, list arguments and returns,
// optional and default arguments, scalars and dtypes, views, in-place ops), input guards with
// their messages, state updates, autograd, many threads, and CUDA when a GPU is present.
#include <set>
#include <thread>

#include <torch/library.h>

#include "common.hpp"

using namespace xport;

namespace {

using ints = std::vector<std::int64_t>;

struct op_case {
  const char* name;
  std::vector<at::Tensor> inputs;
  std::function<std::vector<node>(program_builder&, const std::vector<value>&)> build;
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> eager;
};

at::Tensor r(at::IntArrayRef s) { return at::randn(s); }

std::vector<op_case> op_cases() {
  using T = std::vector<at::Tensor>;
  using N = std::vector<node>;
  using V = const std::vector<value>&;
  using I = const std::vector<at::Tensor>&;
  const auto img = [] { return r({2, 3, 8, 8}); };
  return {
      {"sin", {r({4, 5})}, [](auto& b, V v) { return N{b.call("aten::sin", {v[0]})}; },
       [](I x) { return T{at::sin(x[0])}; }},
      {"cos", {r({4, 5})}, [](auto& b, V v) { return N{b.call("aten::cos", {v[0]})}; },
       [](I x) { return T{at::cos(x[0])}; }},
      {"add with alpha", {r({4, 5}), r({5})},
       [](auto& b, V v) { return N{b.call("aten::add.Tensor", {v[0], v[1]}, {{"alpha", 2.5}})}; },
       [](I x) { return T{at::add(x[0], x[1], 2.5)}; }},
      {"sub", {r({4, 5}), r({4, 1})}, [](auto& b, V v) { return N{b.call("aten::sub.Tensor", {v[0], v[1]})}; },
       [](I x) { return T{x[0] - x[1]}; }},
      {"mul scalar", {r({4, 5})}, [](auto& b, V v) { return N{b.call("aten::mul.Scalar", {v[0], 3})}; },
       [](I x) { return T{x[0] * 3}; }},
      {"div rounding mode", {r({4, 5}), r({4, 5})},
       [](auto& b, V v) { return N{b.call("aten::div.Tensor_mode", {v[0], v[1]}, {{"rounding_mode", "floor"}})}; },
       [](I x) { return T{at::div(x[0], x[1], "floor")}; }},
      {"relu", {r({4, 5})}, [](auto& b, V v) { return N{b.call("aten::relu", {v[0]})}; },
       [](I x) { return T{at::relu(x[0])}; }},
      {"sigmoid and tanh", {r({4, 5})},
       [](auto& b, V v) { return N{b.call("aten::tanh", {b.call("aten::sigmoid", {v[0]})})}; },
       [](I x) { return T{at::tanh(at::sigmoid(x[0]))}; }},
      {"exp and log", {r({4, 5})},
       [](auto& b, V v) { return N{b.call("aten::log", {b.call("aten::exp", {v[0]})})}; },
       [](I x) { return T{at::log(at::exp(x[0]))}; }},
      {"gelu tanh (string argument)", {r({4, 5})},
       [](auto& b, V v) { return N{b.call("aten::gelu", {v[0]}, {{"approximate", "tanh"}})}; },
       [](I x) { return T{at::gelu(x[0], "tanh")}; }},
      {"clamp with None min (optional scalar)", {r({4, 5})},
       [](auto& b, V v) { return N{b.call("aten::clamp", {v[0], none, 0.5})}; },
       [](I x) { return T{at::clamp(x[0], c10::nullopt, 0.5)}; }},
      {"mm", {r({4, 5}), r({5, 3})}, [](auto& b, V v) { return N{b.call("aten::mm", {v[0], v[1]})}; },
       [](I x) { return T{at::mm(x[0], x[1])}; }},
      {"t + addmm (Linear)", {r({4, 5}), r({3, 5}), r({3})},
       [](auto& b, V v) { return N{b.call("aten::addmm", {v[2], v[0], b.call("aten::t", {v[1]})})}; },
       [](I x) { return T{at::linear(x[0], x[1], x[2])}; }},
      {"bmm", {r({2, 4, 5}), r({2, 5, 3})}, [](auto& b, V v) { return N{b.call("aten::bmm", {v[0], v[1]})}; },
       [](I x) { return T{at::bmm(x[0], x[1])}; }},
      {"view", {r({4, 6})}, [](auto& b, V v) { return N{b.call("aten::view", {v[0], ints{2, 12}})}; },
       [](I x) { return T{x[0].view({2, 12})}; }},
      {"transpose + contiguous clone", {r({4, 6})},
       [](auto& b, V v) {
         auto t = b.call("aten::transpose.int", {v[0], 0, 1});
         return N{b.call("aten::clone", {t}, {{"memory_format", c10::MemoryFormat::Contiguous}})};
       },
       [](I x) { return T{x[0].transpose(0, 1).contiguous()}; }},
      {"permute", {img()}, [](auto& b, V v) { return N{b.call("aten::permute", {v[0], ints{0, 2, 3, 1}})}; },
       [](I x) { return T{x[0].permute({0, 2, 3, 1})}; }},
      {"slice with default step", {r({6, 5})},
       [](auto& b, V v) { return N{b.call("aten::slice.Tensor", {v[0], 0, 1, 5})}; },
       [](I x) { return T{x[0].slice(0, 1, 5)}; }},
      {"select and unsqueeze", {r({6, 5})},
       [](auto& b, V v) { return N{b.call("aten::unsqueeze", {b.call("aten::select.int", {v[0], 1, 2}), 0})}; },
       [](I x) { return T{x[0].select(1, 2).unsqueeze(0)}; }},
      {"expand", {r({1, 5})}, [](auto& b, V v) { return N{b.call("aten::expand", {v[0], ints{3, 5}})}; },
       [](I x) { return T{x[0].expand({3, 5})}; }},
      {"cat (Tensor[] argument)", {r({2, 3}), r({4, 3}), r({1, 3})},
       [](auto& b, V v) { return N{b.call("aten::cat", {std::vector<value>{v[0], v[1], v[2]}})}; },
       [](I x) { return T{at::cat({x[0], x[1], x[2]})}; }},
      {"stack with a value used twice", {r({2, 3}), r({2, 3})},
       [](auto& b, V v) { return N{b.call("aten::stack", {std::vector<value>{v[0], v[1], v[0]}, 1})}; },
       [](I x) { return T{at::stack({x[0], x[1], x[0]}, 1)}; }},
      {"index with None (Tensor?[] argument)", {r({5, 4}), at::tensor({3, 0, 1}, at::kLong)},
       [](auto& b, V v) { return N{b.call("aten::index.Tensor", {v[0], argument::list_type{none, v[1]}})}; },
       [](I x) { return T{x[0].index({at::indexing::Slice(), x[1]})}; }},
      {"sum with keepdim and dtype", {r({4, 5})},
       [](auto& b, V v) { return N{b.call("aten::sum.dim_IntList", {v[0], ints{1}, true}, {{"dtype", at::kDouble}})}; },
       [](I x) { return T{at::sum(x[0], {1}, true, at::kDouble)}; }},
      {"mean and var", {r({4, 5})},
       [](auto& b, V v) {
         return N{b.call("aten::mean.dim", {v[0], ints{0}}), b.call("aten::var.correction", {v[0], ints{1}})};
       },
       [](I x) { return T{at::mean(x[0], at::IntArrayRef{0}), at::var(x[0], at::IntArrayRef{1})}; }},
      {"softmax and log_softmax", {r({4, 5})},
       [](auto& b, V v) {
         return N{b.call("aten::_softmax", {v[0], 1, false}), b.call("aten::_log_softmax", {v[0], -1, false})};
       },
       [](I x) { return T{at::softmax(x[0], 1), at::log_softmax(x[0], -1)}; }},
      {"to dtype", {r({4, 5})}, [](auto& b, V v) { return N{b.call("aten::to.dtype", {v[0], at::kHalf})}; },
       [](I x) { return T{x[0].to(at::kHalf)}; }},
      {"zeros factory and where", {r({4, 5})},
       [](auto& b, V v) {
         auto z = b.call("aten::zeros", {ints{4, 5}}, {{"dtype", at::kFloat}, {"device", at::kCPU}});
         auto c = b.call("aten::gt.Scalar", {v[0], 0});
         return N{b.call("aten::where.self", {c, v[0], z})};
       },
       [](I x) { return T{at::where(x[0] > 0, x[0], at::zeros({4, 5}))}; }},
      {"arange", {r({5})},
       [](auto& b, V v) {
         auto a = b.call("aten::arange.start_step", {0, 10, 2}, {{"dtype", at::kFloat}});
         return N{b.call("aten::add.Tensor", {v[0], a})};
       },
       [](I x) { return T{x[0] + at::arange(0, 10, 2, at::kFloat)}; }},
      {"convolution", {img(), r({4, 3, 3, 3}), r({4})},
       [](auto& b, V v) { return N{b.call("aten::conv2d", {v[0], v[1], v[2], 2, 1})}; },
       [](I x) { return T{at::conv2d(x[0], x[1], x[2], 2, 1)}; }},
      {"native_batch_norm (three outputs)", {img(), r({3}), r({3}), at::zeros({3}), at::ones({3})},
       [](auto& b, V v) {
         auto n = b.call("aten::native_batch_norm", {v[0], v[1], v[2], v[3], v[4], false, 0.1, 1e-5});
         return N{n};
       },
       [](I x) {
         auto o = at::native_batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5);
         return T{std::get<0>(o), std::get<1>(o), std::get<2>(o)};
       }},
      {"layer_norm without weight", {r({2, 4, 6})},
       [](auto& b, V v) { return N{b.call("aten::layer_norm", {v[0], ints{6}})}; },
       [](I x) { return T{at::layer_norm(x[0], {6})}; }},
      {"max_pool2d_with_indices", {img()},
       [](auto& b, V v) { return N{b.call("aten::max_pool2d_with_indices", {v[0], 3, 2, 1})}; },
       [](I x) {
         auto o = at::max_pool2d_with_indices(x[0], 3, 2, 1);
         return T{std::get<0>(o), std::get<1>(o)};
       }},
      {"adaptive_avg_pool2d", {img()},
       [](auto& b, V v) { return N{b.call("aten::_adaptive_avg_pool2d", {v[0], ints{3, 3}})}; },
       [](I x) { return T{at::_adaptive_avg_pool2d(x[0], {3, 3})}; }},
      {"topk", {r({4, 10})}, [](auto& b, V v) { return N{b.call("aten::topk", {v[0], 3})}; },
       [](I x) {
         auto o = at::topk(x[0], 3);
         return T{std::get<0>(o), std::get<1>(o)};
       }},
      {"split (Tensor[] return)", {r({7, 3})}, [](auto& b, V v) { return N{b.call("aten::split.Tensor", {v[0], 3})}; },
       [](I x) { return at::split(x[0], 3); }},
      {"embedding", {at::tensor({1, 4, 4, 0}, at::kLong), r({6, 3})},
       [](auto& b, V v) { return N{b.call("aten::embedding", {v[1], v[0]})}; },
       [](I x) { return T{at::embedding(x[1], x[0])}; }},
      {"in-place add_ and relu_ on an intermediate", {r({4, 5}), r({4, 5})},
       [](auto& b, V v) {
         auto m = b.call("aten::mul.Scalar", {v[0], 2});
         auto a = b.call("aten::add_.Tensor", {m, v[1]});
         return N{b.call("aten::relu_", {a})};
       },
       [](I x) {
         auto m = x[0] * 2;
         m.add_(x[1]);
         return T{m.relu_()};
       }},
      {"in-place fill_ on a view", {r({4, 5})},
       [](auto& b, V v) {
         auto c = b.call("aten::clone", {v[0]});
         auto s = b.call("aten::select.int", {c, 0, 1});
         b.call("aten::fill_.Scalar", {s, 7});
         return N{c};
       },
       [](I x) {
         auto c = x[0].clone();
         c.select(0, 1).fill_(7);
         return T{c};
       }},
      {"scalar tensor and type promotion", {r({4, 5}), at::tensor(3, at::kLong)},
       [](auto& b, V v) { return N{b.call("aten::mul.Tensor", {v[0], v[1]})}; },
       [](I x) { return T{x[0] * x[1]}; }},
  };
}

}  // namespace

TEST_CASE("run: every op agrees with eager LibTorch") {
  for (auto& c : op_cases()) {
    SUBCASE(c.name) {
      program_builder b;
      std::vector<value> vs;
      for (std::size_t i = 0; i < c.inputs.size(); ++i) vs.push_back(b.input("x" + std::to_string(i), c.inputs[i]));
      std::vector<value> outs;
      for (auto n : c.build(b, vs))
        for (auto v : n.outputs()) outs.push_back(v);
      for (auto v : outs) b.output(v);
      auto p = std::move(b).build();
      const auto got = run(p, c.inputs);
      const auto expected = c.eager(c.inputs);
      REQUIRE(got.size() == expected.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("output " << i);
        CHECK((got[i].sizes() == expected[i].sizes()));
        CHECK((got[i].scalar_type() == expected[i].scalar_type()));
        CHECK(at::allclose(got[i].to(at::kDouble), expected[i].to(at::kDouble), 1e-5, 1e-6));
        // the inferred meta agrees with what ran
        CHECK((outs[i].meta().size_hints() == got[i].sizes().vec()));
        CHECK((outs[i].meta().dtype == got[i].scalar_type()));
      }
    }
  }
}

TEST_CASE("run: the suite covers at least 30 distinct operators") {
  std::set<std::string> ops;
  for (auto& c : op_cases()) {
    program_builder b;
    std::vector<value> vs;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) vs.push_back(b.input("x" + std::to_string(i), c.inputs[i]));
    c.build(b, vs);
    for (auto n : b.graph_ref().nodes())
      if (n.is_call()) ops.insert(n.op().qualified);
  }
  CHECK(ops.size() >= 30);
  MESSAGE(ops.size() << " distinct operators");
}

namespace {
exported_program two_input_program() {
  program_builder b;
  auto x = b.input("x", at::randn({10, 10}));
  auto y = b.input("y", at::randn({10, 10}));
  b.output(b.call("aten::add.Tensor", {b.call("aten::sin", {x}), b.call("aten::cos", {y})}));
  return std::move(b).build();
}
}  // namespace

TEST_CASE("run: inputs are checked against the program's guards") {
  auto p = two_input_program();
  const auto ok = at::randn({10, 10});
  CHECK_THROWS_WITH_AS(run(p, {ok}), "[xport.guard.count] expected 2 input(s) (x, y), got 1", guard_error);
  CHECK_THROWS_WITH_AS(run(p, {ok, at::randn({10, 10}, at::kDouble)}),
                       "[xport.guard.dtype] input y: expected dtype f32 (torch.float32), got f64 "
                       "(torch.float64); convert it with .to(torch.float32)",
                       guard_error);
  CHECK_THROWS_WITH_AS(run(p, {at::randn({4, 10}), ok}),
                       "[xport.guard.shape] input x: dim 0 must be 10, got 4 (the program was exported "
                       "with a static size here; export with a dynamic Dim for this dimension to accept "
                       "other sizes)",
                       guard_error);
  CHECK_THROWS_WITH_AS(run(p, {at::randn({10, 10, 1}), ok}),
                       "[xport.guard.rank] input x: expected 2 dimension(s) f32[10, 10], got 3 f32[10, 10, 1]",
                       guard_error);
  CHECK_THROWS_WITH_AS(run(p, {at::Tensor(), ok}),
                       "[xport.guard.undefined] input x: expected a tensor f32[10, 10], got an undefined tensor",
                       guard_error);
  CHECK_THROWS_WITH_AS(run(p, {at::randn({10, 10}, at::device(c10::kMeta)), ok}),
                       "[xport.guard.device] input x: expected a tensor on cpu, got one on meta; move the "
                       "input, or move the program with exported_program::to(device)",
                       guard_error);
  run_options unchecked;
  unchecked.check_inputs = false;
  XPORT_CHECK_THROWS_MSG(run(p, {at::randn({4, 10}), ok}, unchecked), run_error,
                         "[xport.run.op_failed] node 'add' (aten::add.Tensor) failed: The size of tensor a (4) "
                         "must match the size of tensor b (10)");
}

TEST_CASE("run: many threads share one program") {
  auto p = two_input_program();
  std::vector<std::pair<at::Tensor, at::Tensor>> ins;
  for (int i = 0; i < 8; ++i) ins.emplace_back(at::randn({10, 10}), at::randn({10, 10}));
  std::vector<int> ok(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 50; ++k) {
        auto [x, y] = ins[static_cast<std::size_t>((t + k) % 8)];
        auto out = run(p, {x, y});
        if (!at::allclose(out[0], at::sin(x) + at::cos(y))) return;
      }
      ok[static_cast<std::size_t>(t)] = 1;
    });
  for (auto& t : threads) t.join();
  CHECK(std::count(ok.begin(), ok.end(), 1) == 8);
}

TEST_CASE("run: gradients of parameters match eager") {
  // A two-layer MLP, parameters requiring grad, as the training IR captures it.
  auto w1 = at::randn({16, 8}).requires_grad_();
  auto b1 = at::randn({16}).requires_grad_();
  auto w2 = at::randn({4, 16}).requires_grad_();
  auto b2 = at::randn({4}).requires_grad_();
  const auto x = at::randn({5, 8});

  program_builder b;
  auto xi = b.input("x", x);
  auto h = b.call("aten::addmm", {b.parameter("fc1.bias", b1), xi, b.call("aten::t", {b.parameter("fc1.weight", w1)})});
  h = b.call("aten::relu", {h});
  auto o = b.call("aten::addmm", {b.parameter("fc2.bias", b2), h, b.call("aten::t", {b.parameter("fc2.weight", w2)})});
  b.output(o);
  auto p = std::move(b).build();

  // eager on copies of the same parameters
  auto e1 = w1.detach().clone().requires_grad_(), f1 = b1.detach().clone().requires_grad_();
  auto e2 = w2.detach().clone().requires_grad_(), f2 = b2.detach().clone().requires_grad_();
  auto expected = at::linear(at::relu(at::linear(x, e1, f1)), e2, f2);
  expected.pow(2).sum().backward();

  auto got = run(p, {x})[0];
  CHECK(got.requires_grad());
  got.pow(2).sum().backward();
  CHECK(at::allclose(got, expected));
  CHECK(at::allclose(w1.grad(), e1.grad()));
  CHECK(at::allclose(b1.grad(), f1.grad()));
  CHECK(at::allclose(w2.grad(), e2.grad()));
  CHECK(at::allclose(b2.grad(), f2.grad()));

  // inference mode records nothing
  run_options inf;
  inf.inference_mode = true;
  CHECK_FALSE(run(p, {x}, inf)[0].requires_grad());
}

TEST_CASE("run: in-place buffer updates in the training IR change the program's state as eager does") {
  // BatchNorm in train mode, as torch.export's training IR keeps it: num_batches_tracked.add_(1)
  // and batch_norm updating running_mean/var in place.
  program_builder b;
  const auto x0 = at::randn({8, 4});
  auto x = b.input("x", x0);
  auto w = b.parameter("bn.weight", at::ones({4}));
  auto bias = b.parameter("bn.bias", at::zeros({4}));
  auto rm = b.buffer("bn.running_mean", at::zeros({4}));
  auto rv = b.buffer("bn.running_var", at::ones({4}));
  auto nbt = b.buffer("bn.num_batches_tracked", at::zeros({}, at::kLong));
  b.call("aten::add_.Tensor", {nbt, 1});
  b.output(b.call("aten::batch_norm", {x, w, bias, rm, rv, true, 0.1, 1e-05, false}));
  auto p = std::move(b).build();

  auto erm = at::zeros({4}), erv = at::ones({4});
  auto enbt = at::zeros({}, at::kLong);
  for (int step = 0; step < 3; ++step) {
    const auto xs = at::randn({8, 4});
    const auto got = run(p, {xs})[0];
    enbt.add_(1);
    const auto want = at::batch_norm(xs, at::ones({4}), at::zeros({4}), erm, erv, true, 0.1, 1e-5, false);
    CHECK(at::allclose(got, want, 1e-5, 1e-6));
  }
  CHECK(at::allclose(p.state_dict().at("bn.running_mean"), erm));
  CHECK(at::allclose(p.state_dict().at("bn.running_var"), erv));
  CHECK(p.state_dict().at("bn.num_batches_tracked").item<std::int64_t>() == 3);
}

TEST_CASE("run: functional mutation outputs are written back to buffers and inputs") {
  program_builder b;
  auto x = b.input("x", at::randn({3}));
  auto counter = b.buffer("counter", at::zeros({3}));
  auto c1 = b.call("aten::add.Tensor", {counter, x});
  auto x2 = b.call("aten::mul.Scalar", {x, 2});
  b.output(c1, output_kind::buffer_mutation, "counter");
  b.output(x2, output_kind::user_input_mutation, "x");
  b.output(b.call("aten::sin", {c1}));
  auto p = std::move(b).build(ir_dialect::aten);
  auto in = at::ones({3});
  auto out = run(p, {in});
  REQUIRE(out.size() == 1);
  CHECK(at::allclose(out[0], at::sin(at::ones({3}))));
  CHECK(at::allclose(p.state_dict().at("counter"), at::ones({3})));
  CHECK(at::allclose(in, at::full({3}, 2.0)));
  run(p, {at::ones({3})});
  CHECK(at::allclose(p.state_dict().at("counter"), at::full({3}, 2.0)));
}

TEST_CASE("run: mutating the program recompiles it") {
  auto p = two_input_program();
  const auto x = at::randn({10, 10}), y = at::randn({10, 10});
  CHECK(at::allclose(run(p, {x, y})[0], at::sin(x) + at::cos(y)));
  auto& g = p.graph_mut();
  for (auto n : g.nodes())
    if (n.is_call() && n.op().name == "aten::sin") {
      auto e = g.create_call(find_op("aten::exp"), {n.input(0)}, {n.output(0).type()}, n);
      n.out().replace_all_uses_with(e.out());
      g.erase(n);
      break;
    }
  verify(p);
  CHECK(at::allclose(run(p, {x, y})[0], at::exp(x) + at::cos(y)));
}

namespace {
// A test operator that records how many references its input has while it runs: 1 means the
// interpreter handed over its own reference (the value was dead after this use).
long probe_use_count = 0;
at::Tensor probe_cpu(const at::Tensor& x) {
  probe_use_count = x.use_count();
  return x.clone();
}
at::Tensor probe_meta(const at::Tensor& x) { return at::empty_like(x); }
TORCH_LIBRARY(xport_test, m) { m.def("probe(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(xport_test, CPU, m) { m.impl("probe", probe_cpu); }
TORCH_LIBRARY_IMPL(xport_test, Meta, m) { m.impl("probe", probe_meta); }
}  // namespace

TEST_CASE("run: each intermediate is released at its last use") {
  SUBCASE("dead after the probe: moved into the call") {
    program_builder b;
    auto x = b.input("x", at::randn({4}));
    auto a = b.call("aten::sin", {x});
    b.output(b.call("aten::cos", {b.call("xport_test::probe", {a})}));
    auto p = std::move(b).build();
    run(p, {at::randn({4})});
    CHECK(probe_use_count == 1);
  }
  SUBCASE("still needed after the probe: shared") {
    program_builder b;
    auto x = b.input("x", at::randn({4}));
    auto a = b.call("aten::sin", {x});
    auto q = b.call("xport_test::probe", {a});
    b.output(b.call("aten::add.Tensor", {q, a}));
    auto p = std::move(b).build();
    run(p, {at::randn({4})});
    CHECK(probe_use_count == 2);
  }
  SUBCASE("a program output is never given away") {
    program_builder b;
    auto x = b.input("x", at::randn({4}));
    auto a = b.call("aten::sin", {x});
    b.output(b.call("xport_test::probe", {a})).output(a);
    auto p = std::move(b).build();
    auto out = run(p, {at::randn({4})});
    CHECK(probe_use_count == 2);
    CHECK(out[1].defined());
  }
}

TEST_CASE("run: CUDA tensors run by dispatch" * doctest::skip(!at::hasCUDA())) {
  auto p = two_input_program();
  p.to(c10::Device(c10::kCUDA));
  const auto x = at::randn({10, 10}, at::device(c10::kCUDA)), y = at::randn({10, 10}, at::device(c10::kCUDA));
  const auto out = run(p, {x, y})[0];
  CHECK(out.is_cuda());
  CHECK(at::allclose(out.cpu(), (at::sin(x) + at::cos(y)).cpu()));
  CHECK_THROWS_AS(run(p, {x.cpu(), y.cpu()}), guard_error);
}

TEST_CASE("run: CUDA out_dtype of an int8 mm is torch's _int_mm, equal to the CPU's int32 product" * doctest::skip(!at::hasCUDA())) {
  // _int_mm's shapes: more than 16 rows, k and n multiples of 8
  const auto a = at::randint(-128, 128, {32, 64}, at::kChar), b = at::randint(-128, 128, {64, 24}, at::kChar);
  const auto want = xport::out_dtype("aten::mm", at::kInt, {a, b});
  const auto got = xport::out_dtype("aten::mm", at::kInt, {a.cuda(), b.cuda()});
  CHECK(got.is_cuda());
  CHECK((got.scalar_type() == at::kInt));
  CHECK(at::equal(got.cpu(), want));
  CHECK(at::equal(want, at::mm(a.to(at::kInt), b.to(at::kInt))));
}

TEST_CASE("run: a program with parameters moves to CUDA with its state" * doctest::skip(!at::hasCUDA())) {
  program_builder b;
  auto x = b.input("x", at::randn({4, 8}));
  auto w = b.parameter("fc.weight", at::randn({3, 8}));
  auto z = b.call("aten::zeros", {ints{4, 3}}, {{"dtype", at::kFloat}, {"device", at::kCPU}});
  b.output(b.call("aten::add.Tensor", {b.call("aten::mm", {x, b.call("aten::t", {w})}), z}));
  auto p = std::move(b).build();
  const auto xs = at::randn({4, 8});
  const auto cpu = run(p, {xs})[0];
  p.to(c10::Device(c10::kCUDA));
  CHECK(p.state_dict().at("fc.weight").is_cuda());
  const auto gpu = run(p, {xs.cuda()})[0];
  CHECK(gpu.is_cuda());
  CHECK(at::allclose(gpu.cpu(), cpu, 1e-4, 1e-5));
}

TEST_CASE("run: to(device) moves storages whole, so tied weights and views stay shared") {
  // checked on the meta device, which every build has: the sharing is what is tested
  program_builder b;
  auto x = b.input("x", at::randn({4, 4}));
  const auto tied = at::randn({4, 4});
  const auto big = at::randn({8, 4});
  auto e = b.parameter("embed.weight", tied), h = b.parameter("head.weight", tied);
  auto lo = b.parameter("lo", big.narrow(0, 0, 4)), hi = b.buffer("hi", big.narrow(0, 4, 4));
  value acc = x;
  for (auto v : {e, h, lo, hi}) acc = b.call("aten::mm", {acc, v});
  b.output(acc);
  auto p = std::move(b).build();
  p.state_dict_mut().set("embed.weight", p.state_dict().at("embed.weight").requires_grad_(true));
  p.to(c10::Device(c10::kMeta));
  const auto& sd = p.state_dict();
  for (const auto& [k, t] : sd) CHECK(t.is_meta());
  CHECK(sd.at("embed.weight").unsafeGetTensorImpl() == sd.at("head.weight").unsafeGetTensorImpl());
  CHECK(sd.at("embed.weight").requires_grad());
  CHECK(sd.at("embed.weight").is_leaf());
  CHECK(sd.at("lo").storage().unsafeGetStorageImpl() == sd.at("hi").storage().unsafeGetStorageImpl());
  CHECK(sd.at("hi").storage_offset() == 16);
  for (auto n : p.graph().nodes())
    for (auto v : n.outputs())
      if (v.kind() == value_kind::tensor) CHECK(v.meta().device.is_meta());
}

TEST_CASE("run: inputs on another device than the program's state are a guard error before any op runs") {
  program_builder b;
  auto x = b.input("x", at::randn({4, 8}));
  auto w = b.parameter("fc.weight", at::randn({3, 8}));
  b.output(b.call("aten::mm", {x, b.call("aten::t", {w})}));
  auto p = std::move(b).build();
  // the state alone moved (a hand-made mix; to(device) moves the graph with it)
  p.state_dict_mut().set("fc.weight", p.state_dict().at("fc.weight").to(c10::kMeta));
  XPORT_CHECK_THROWS_MSG(run(p, {at::randn({4, 8})}), guard_error,
                         "[xport.guard.device] input x: expected a tensor on meta, where the program's state is "
                         "('fc.weight'), got one on cpu; move the input with .to(meta), or move the program with "
                         "exported_program::to(cpu)");
}

TEST_CASE("run: what the interpreter compiled belongs to one program object, through moves") {
  static_assert(std::is_nothrow_move_constructible_v<exported_program>);
  static_assert(std::is_nothrow_move_assignable_v<exported_program>);
  const auto x = at::randn({3});
  auto p = export_program([](const at::Tensor& a) { return a.sin(); }, std::tuple{at::randn({3})});
  CHECK(at::allclose(run(p, {x})[0], x.sin()));  // compiled and cached
  exported_program q = std::move(p);
  CHECK(at::allclose(run(q, {x})[0], x.sin()));
  auto r = export_program([](const at::Tensor& a) { return a.cos(); }, std::tuple{at::randn({3})});
  CHECK(at::allclose(run(r, {x})[0], x.cos()));
  r = std::move(q);  // r's compiled cos must not answer for the sin it now holds
  CHECK(at::allclose(run(r, {x})[0], x.sin()));
  callable<at::Tensor(at::Tensor)> f(r);
  CHECK(at::allclose(f(x), x.sin()));
}
