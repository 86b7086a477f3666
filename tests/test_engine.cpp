// The inference engine (xport/engine.hpp) against eager LibTorch and the interpreter: every real
// model in both IRs and every input layout, first (recording) and planned runs; results the caller
// keeps are never overwritten; buffers are shared by results that are never alive together;
// dynamic shapes get a plan per signature; eight threads at once; the program's state is unchanged.
// Everything runs sequentially and with parallel branches (engine_options::threads = 3), whose
// results must equal the sequential ones bit for bit.
#include <cstdio>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include <xport/engine.hpp>

#include "models.hpp"
#include "models_branches.hpp"

#include "common.hpp"

using namespace xport;
namespace m = xport_models;

namespace {

template <class Module>
std::vector<at::Tensor> eager_outputs(Module& mod, const at::Tensor& x) {
  c10::InferenceMode guard;
  std::vector<at::Tensor> leaves;
  flatten(mod->forward(x), leaves);
  return leaves;
}

std::vector<std::pair<std::string, at::Tensor>> snapshot(const exported_program& p) {
  std::vector<std::pair<std::string, at::Tensor>> s;
  for (const auto& [name, t] : p.state_dict()) s.emplace_back(name, t.clone());
  return s;
}

void check_same_state(const exported_program& p, const std::vector<std::pair<std::string, at::Tensor>>& before) {
  std::size_t i = 0;
  for (const auto& [name, t] : p.state_dict()) {
    INFO("state " << name);
    REQUIRE(i < before.size());
    CHECK(at::equal(t, before[i++].second));
  }
}

// How the interpreter runs to give the engine's results: under InferenceMode.
run_options inference_options() {
  run_options o;
  o.inference_mode = true;
  return o;
}

engine_options with_threads(std::size_t threads, engine_options o = {}) {
  o.threads = threads;
  return o;
}

// Runs `p` through a fresh engine on every layout of three inputs (the first run of a signature
// records, the others run planned) and checks each result: equal to the interpreter's (the same
// kernels; at::equal) and close to eager's. Returns the plan of the contiguous input.
template <class Module, class Input>
engine_plan_info check_program(const exported_program& p, Module& eager, Input make_input, std::size_t threads) {
  INFO("threads " << threads);
  const auto before = snapshot(p);
  engine e(p, with_threads(threads));
  interpreter interp(p);
  const run_options inference = inference_options();
  for (int k = 0; k < 3; ++k) {
    const auto x = make_input();
    for (const auto& [layout, xl] : xport_test::layouts_of(x)) {
      INFO("input " << k << ", layout " << layout);
      const auto want = eager_outputs(eager, x);
      for (int rep = 0; rep < 2; ++rep) {  // the signature's first run records; the second is planned
        const auto got = e.run({xl});
        const auto same_kernels = interp.run({xl}, inference);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("output " << i << ", run " << rep);
          CHECK(at::equal(got[i], same_kernels[i]));
          CHECK((got[i].sizes() == want[i].sizes()));
          CHECK(at::allclose(got[i], want[i], 1e-4, 1e-5));
        }
      }
    }
  }
  check_same_state(p, before);
  return e.plan_info({make_input()});
}

template <class Module, class Make, class Input>
// `min_planned_lowered`: nodes of the inference IR that write into the arena or run in place, as
// the engine plans them today (a regression check: fewer means planning stopped applying).
void check_model(Make make, Input make_input, std::size_t min_planned_lowered) {
  torch::manual_seed(0);
  Module exported = make();
  torch::manual_seed(0);
  Module eager = make();
  exported->eval();
  eager->eval();
  const auto trained = export_program(exported, std::tuple{make_input()});
  {
    INFO("training IR");
    (void)check_program(trained, eager, make_input, 1);
    CHECK(check_program(trained, eager, make_input, 3).parallel_width >= 1);
  }
  {
    INFO("inference IR");
    const auto lowered = run_decompositions(trained);
    const auto info = check_program(lowered, eager, make_input, 1);
    CHECK(info.out_variant_nodes + info.in_place_nodes >= min_planned_lowered);
    CHECK(info.arena_bytes <= info.planned_bytes);
    CHECK(info.resolved_nodes > 0);
    CHECK(info.parallel_width == 0);
    const auto parallel = check_program(lowered, eager, make_input, 3);
    CHECK(parallel.out_variant_nodes == info.out_variant_nodes);
    CHECK(parallel.in_place_nodes == info.in_place_nodes);
    CHECK(parallel.parallel_width >= 1);
  }
}

}  // namespace

TEST_CASE("engine: MLP") {
  check_model<m::MLP>([] { return m::MLP(); }, [] { return at::randn({5, 16}); }, 4);
  torch::manual_seed(0);
  m::MLP net;
  net->eval();
  const auto p = run_decompositions(export_program(net, std::tuple{at::randn({5, 16})}));
  CHECK(engine(p).plan_info({at::randn({5, 16})}).hoisted_nodes == 3);  // the weights' permutes, made once
}

TEST_CASE("engine: LeNet") {
  check_model<m::LeNet>([] { return m::LeNet(); }, [] { return at::randn({2, 1, 28, 28}); }, 7);
}

TEST_CASE("engine: DCGAN generator and discriminator") {
  check_model<m::Generator>([] { return m::Generator(); }, [] { return at::randn({2, 16, 1, 1}); }, 3);
  check_model<m::Discriminator>([] { return m::Discriminator(); }, [] { return at::randn({2, 3, 16, 16}); }, 3);
}

TEST_CASE("engine: ResNet-18") {
  check_model<m::ResNet18>([] { return m::ResNet18(); }, [] { return at::randn({1, 3, 64, 64}); }, 26);
}

TEST_CASE("engine: Transformer encoder layer") {
  check_model<m::Encoder>([] { return m::Encoder(); }, [] { return at::randn({5, 2, 32}); }, 15);
  torch::manual_seed(0);
  m::Encoder net;
  net->eval();
  const auto x = at::randn({5, 2, 32});
  const auto lowered = run_decompositions(export_program(net, std::tuple{x}));
  const auto info = engine(lowered).plan_info({x});
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
  CHECK(info.elided_nodes >= 3);  // eval-mode dropouts: clones in the inference IR of LibTorch 2.1+
#else
  CHECK(info.elided_nodes == 0);  // LibTorch 1.13 lowers them to nothing; its clones make views contiguous
#endif
  CHECK(info.planned_views >= 15);  // views of the projections' results, made once per plan
}

TEST_CASE("engine: LSTM, GRU and an embedding classifier") {
  check_model<m::LSTMNet>([] { return m::LSTMNet(); }, [] { return at::randn({2, 5, 8}); }, 116);
  check_model<m::GRUNet>([] { return m::GRUNet(); }, [] { return at::randn({2, 5, 8}); }, 58);
  check_model<m::EmbeddingClassifier>([] { return m::EmbeddingClassifier(); },
                                      [] { return at::randint(100, {4, 7}, at::kLong); }, 1);
}

namespace {

// x -> sin -> +y -> *y -> sin -> ... (n ops), the benchmark's chain: each result dies at its next use.
exported_program chain(int n, const at::Tensor& x, const at::Tensor& y) {
  program_builder b;
  auto vx = b.input("x", x);
  auto vy = b.input("y", y);
  value v = vx;
  for (int i = 0; i < n; ++i)
    v = b.call(i % 3 == 0 ? "aten::sin" : i % 3 == 1 ? "aten::add.Tensor" : "aten::mul.Tensor",
               i % 3 == 0 ? std::vector<argument>{v} : std::vector<argument>{v, vy});
  b.output(v);
  return std::move(b).build();
}

at::Tensor chain_eager(int n, at::Tensor x, const at::Tensor& y) {
  for (int i = 0; i < n; ++i) x = i % 3 == 0 ? at::sin(x) : i % 3 == 1 ? at::add(x, y) : at::mul(x, y);
  return x;
}

}  // namespace

TEST_CASE("engine: results that are never alive together share one buffer") {
  const auto x = at::randn({4, 8}), y = at::randn({4, 8});
  const auto p = chain(30, x, y);
  engine e(p);
  const auto info = e.plan_info({x, y});
  CHECK(info.nodes == 30);
  // the first sin reads the input (not the program's to overwrite): a fresh result every run;
  // every later op runs in place on it, and nothing is planned into the arena
  CHECK(info.in_place_nodes == 29);
  CHECK(info.out_variant_nodes == 0);
  CHECK(info.arena_bytes == 0);
  CHECK(info.resolved_nodes == 30);
  CHECK(info.unboxed_nodes == 30);  // sin, sin_, add_, mul_: each called through its typed kernel
  engine_options no_reuse;
  no_reuse.plan_memory = true;
  no_reuse.in_place = false;
  engine arena(p, no_reuse);
  const auto ai = arena.plan_info({x, y});
  CHECK(ai.in_place_nodes == 0);
  CHECK(ai.out_variant_nodes == 29);  // all but the last: the output leaves the run
  CHECK(ai.arena_buffers == 2);       // each result dies at the next op: two buffers ping-pong
  CHECK(ai.arena_bytes == 2 * 4 * 8 * sizeof(float));
  CHECK(ai.planned_bytes == 29 * 4 * 8 * sizeof(float));
  CHECK(ai.unboxed_nodes == 30);  // sin.out, add.out, mul.out too
  for (int k = 0; k < 3; ++k) {
    const auto a = at::randn({4, 8}), b = at::randn({4, 8});
    CHECK(at::equal(arena.run({a, b})[0], chain_eager(30, a, b)));
  }
  for (int k = 0; k < 3; ++k) {
    const auto a = at::randn({4, 8}), b = at::randn({4, 8});
    CHECK(at::equal(e.run({a, b})[0], chain_eager(30, a, b)));
  }
  // a chain has no two nodes to run at once; its buffers and in-place runs are the same
  engine pe(p, with_threads(3)), parena(p, with_threads(3, no_reuse));
  CHECK(pe.plan_info({x, y}).parallel_width == 1);
  CHECK(parena.plan_info({x, y}).arena_buffers == 2);
  for (int k = 0; k < 3; ++k) {
    const auto a = at::randn({4, 8}), b = at::randn({4, 8});
    CHECK(at::equal(pe.run({a, b})[0], chain_eager(30, a, b)));
    CHECK(at::equal(parena.run({a, b})[0], chain_eager(30, a, b)));
  }
  engine_options plain;
  plain.plan_memory = false;
  plain.resolve_dispatch = false;
  engine unplanned(p, plain);
  const auto none = unplanned.plan_info({x, y});
  CHECK(none.out_variant_nodes == 0);
  CHECK(none.resolved_nodes == 0);
  CHECK(none.unboxed_nodes == 0);  // unresolved: called boxed
  CHECK(at::equal(unplanned.run({x, y})[0], chain_eager(30, x, y)));
}

TEST_CASE("engine: a result the caller keeps is never overwritten by the next run") {
  // outputs: an intermediate itself, a view of one, and a view of a view; and a result that is
  // used after a view of it was taken
  program_builder b;
  auto x = b.input("x", at::randn({4, 6}));
  auto s = b.call("aten::sin", {x});
  auto c = b.call("aten::cos", {s});
  auto t = b.call("aten::t", {c});
  auto e1 = b.call("aten::exp", {s});
  auto sl = b.call("aten::slice.Tensor", {e1, 0, 1, 3});
  auto u = b.call("aten::unsqueeze", {sl, 0});
  auto m = b.call("aten::mul.Tensor", {c, s});
  b.output(s);
  b.output(t);
  b.output(u);
  b.output(m);
  const auto p = std::move(b).build();
  for (const std::size_t threads : {1, 3}) {
  CAPTURE(threads);
  engine e(p, with_threads(threads));
  const auto eager = [](const at::Tensor& in) {
    const auto si = at::sin(in), co = at::cos(si);
    return std::vector<at::Tensor>{si, co.t(), at::exp(si).slice(0, 1, 3).unsqueeze(0), co * si};
  };
  std::vector<std::vector<at::Tensor>> kept, want;
  for (int k = 0; k < 4; ++k) {
    const auto in = at::randn({4, 6});
    kept.push_back(e.run({in}));
    want.push_back(eager(in));
  }
  for (std::size_t k = 0; k < kept.size(); ++k)
    for (std::size_t i = 0; i < 4; ++i) {
      INFO("run " << k << ", output " << i);
      CHECK(at::equal(kept[k][i], want[k][i]));
    }
  // nothing above may be planned: every result is an output or is viewed by one
  CHECK(e.plan_info({at::randn({4, 6})}).out_variant_nodes == 0);
  }
}

// Note [addmm's bias copied by the plan]: the plan copies a contiguous bias row (or matrix) into
// the arena's result itself and calls addmm with that result as its bias; every bias the copy does
// not cover (a column, a scalar, beta 0) takes the plain out= call. Either way the result must be
// the interpreter's bit for bit, in every dtype the CPU's addmm has and every input layout.
TEST_CASE("engine: addmm whose bias the plan copies gives the interpreter's bits") {
  struct bias_case {
    const char* what;
    std::vector<std::int64_t> sizes;
    double beta;
  };
  const std::vector<bias_case> cases{{"a row", {6}, 1.0},           {"a 1 x n row", {1, 6}, 1.0},
                                     {"the whole matrix", {5, 6}, 1.0}, {"a row, beta 0.5", {6}, 0.5},
                                     {"a column (plain call)", {5, 1}, 1.0}, {"beta 0 (plain call)", {6}, 0.0}};
  for (const auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    for (const auto& c : cases) {
      CAPTURE(dtype);
      INFO("bias " << std::string(c.what));
      const auto opts = at::TensorOptions().dtype(dtype);
      program_builder b;
      auto x = b.input("x", at::randn({5, 4}, opts));
      auto w = b.parameter("w", at::randn({6, 4}, opts));
      auto bias = b.parameter("bias", at::randn(c.sizes, opts));
      auto wt = b.call("aten::permute", {w, std::vector<std::int64_t>{1, 0}});
      auto mm = b.call("aten::addmm", {bias, x, wt}, {{"beta", c.beta}});
      auto scale = b.parameter("scale", at::randn({5, 6}, opts));
      b.output(b.call("aten::mul.Tensor", {scale, mm}));  // the addmm's result is the arena's, not an output
      const auto p = std::move(b).build();
      for (const std::size_t threads : {1, 3}) {
        CAPTURE(threads);
        engine e(p, with_threads(threads));
        interpreter interp(p);
        const run_options inference = inference_options();
        for (int k = 0; k < 2; ++k) {
          const auto in = at::randn({5, 4}, opts);
          for (const auto& [layout, xl] : xport_test::layouts_of(in)) {
            INFO("layout " << layout);
            for (int rep = 0; rep < 2; ++rep) CHECK(at::equal(e.run({xl})[0], interp.run({xl}, inference)[0]));
          }
        }
        CHECK(e.plan_info({at::randn({5, 4}, opts)}).out_variant_nodes >= 1);
      }
    }
  }
}

// A clone of a result nothing uses after it (dropout in eval mode becomes one in the inference IR)
// is that result itself; a clone of an input, of a result used later, or into another layout
// copies as before.
TEST_CASE("engine: a clone of a result nothing uses after it is elided, with the interpreter's results") {
  program_builder b;
  auto x = b.input("x", at::randn({4, 6}));
  auto s = b.call("aten::sin", {x});
  auto v = b.call("aten::view", {s, std::vector<std::int64_t>{6, 4}});
  auto c1 = b.call("aten::clone", {v});                    // of a view of a dead result: elided
  auto r = b.call("aten::relu", {c1});
  auto e1 = b.call("aten::exp", {x});
  auto c2 = b.call("aten::clone", {e1});                   // e1 is used after: copied
  auto sum = b.call("aten::add.Tensor", {c2, e1});
  auto c3 = b.call("aten::clone", {x});                    // the caller's input: copied
  auto t = b.call("aten::t", {b.call("aten::cos", {x})});
  auto c4 = b.call("aten::clone", {t}, {{"memory_format", c10::MemoryFormat::Contiguous}});  // another layout: copied
  auto c5 = b.call("aten::clone", {b.call("aten::tanh", {x})});  // an output: elided, never overwritten
  auto t6 = b.call("aten::t", {b.call("aten::sigmoid", {x})});
  auto c6 = b.call("aten::clone", {t6}, {{"memory_format", c10::MemoryFormat::Contiguous}});  // copied into the arena
  auto scale = b.parameter("scale", at::randn({6, 4}));
  b.output(r);
  b.output(sum);
  b.output(c3);
  b.output(c4);
  b.output(c5);
  b.output(b.call("aten::mul.Tensor", {scale, c6}));
  const auto p = std::move(b).build();
  const auto sc = p.state_dict().at("scale");
  const auto eager = [&](const at::Tensor& in) {
    const auto e = in.exp();
    return std::vector<at::Tensor>{in.sin().reshape({6, 4}).relu(), e + e, in.clone(), in.cos().t().contiguous(), in.tanh(),
                                   sc * in.sigmoid().t().contiguous()};
  };
  interpreter interp(p);
  const run_options inference = inference_options();
  for (const std::size_t threads : {1, 3}) {
    CAPTURE(threads);
    engine e(p, with_threads(threads));
    const auto info = e.plan_info({at::randn({4, 6})});
    CHECK(info.elided_nodes == 2);
    CHECK(info.out_variant_nodes == 4);  // exp, cos, sigmoid, and the clone of sigmoid's transpose (a copy)
    std::vector<std::vector<at::Tensor>> kept, want;
    for (int k = 0; k < 4; ++k) {
      for (const auto& [layout, in] : xport_test::layouts_of(at::randn({4, 6}))) {
        INFO("layout " << layout);
        const auto before = in.clone();
        kept.push_back(e.run({in}));
        want.push_back(eager(in));
        CHECK(at::equal(in, before));  // the input a clone copies is never the result
        const auto same = interp.run({in}, inference);
        for (std::size_t i = 0; i < same.size(); ++i) CHECK(at::equal(kept.back()[i], same[i]));
        CHECK(!kept.back()[2].is_same(in));
        CHECK(kept.back()[3].is_contiguous());
      }
    }
    for (std::size_t k = 0; k < kept.size(); ++k)
      for (std::size_t i = 0; i < want[k].size(); ++i) {
        INFO("run " << k << ", output " << i);
        // close to eager (equal to the interpreter, above): LibTorch 1.13's eager sigmoid of a
        // transposed input differs from the program's in the last bit
        CHECK(at::allclose(kept[k][i], want[k][i], 1e-6, 1e-7));
      }
  }
  engine_options no_reuse;
  no_reuse.in_place = false;
  CHECK(engine(p, no_reuse).plan_info({at::randn({4, 6})}).elided_nodes == 0);
}

// Note [Views made once per plan]: a view of an arena result is made when the plan is; a view op
// that copies (reshape of a transpose) must still run on every run, or it would give the first
// run's values again.
TEST_CASE("engine: views of the arena's results are made once per plan; a view op that copies runs every run") {
  program_builder b;
  auto x = b.input("x", at::randn({4, 6}));
  auto s = b.call("aten::sin", {x});
  auto t = b.call("aten::t", {s});                                                  // a view of s: made once
  auto r = b.call("aten::reshape", {t, std::vector<std::int64_t>{24}});            // copies: runs
  auto v = b.call("aten::view", {b.call("aten::cos", {x}), std::vector<std::int64_t>{24}});  // made once
  auto parts = b.call("aten::split_with_sizes", {v, std::vector<std::int64_t>{10, 14}});       // made once
  auto a = b.call("aten::mul.Tensor", {r, v});
  b.output(b.call("aten::add.Tensor", {a, b.call("aten::sum", {parts.output(1)})}));
  const auto p = std::move(b).build();
  const auto eager = [](const at::Tensor& in) {
    const auto cv = in.cos().reshape({24});
    return in.sin().t().reshape({24}) * cv + cv.split_with_sizes({10, 14})[1].sum();
  };
  interpreter interp(p);
  const run_options inference = inference_options();
  for (const std::size_t threads : {1, 3}) {
    CAPTURE(threads);
    engine e(p, with_threads(threads));
    const auto info = e.plan_info({at::randn({4, 6})});
    CHECK(info.planned_views == 3);  // t, view, split_with_sizes; not the reshape that copies
    for (int k = 0; k < 4; ++k) {
      for (const auto& [layout, in] : xport_test::layouts_of(at::randn({4, 6}))) {
        INFO("layout " << layout);
        const auto got = e.run({in});
        CHECK(at::equal(got[0], interp.run({in}, inference)[0]));
        CHECK(at::allclose(got[0], eager(in), 1e-5, 1e-6));
      }
    }
  }
  engine_options unplanned;
  unplanned.plan_memory = false;
  CHECK(engine(p, unplanned).plan_info({at::randn({4, 6})}).planned_views == 0);  // no arena: nothing to view
}

TEST_CASE("engine: dynamic shapes get a plan per signature, the last max_plans kept") {
  const auto batch = Dim("batch", 1, 64);
  const auto f = [](const at::Tensor& a, const at::Tensor& w) { return at::relu(at::matmul(at::tanh(a), w) + 1); };
  const auto w = at::randn({8, 3});
  auto p = export_program(f, std::tuple{at::randn({4, 8}), w},
                          {.input_names = {"a", "w"}, .dynamic_shapes = {{"a", {{0, batch}}}, {"w", {}}}});
  for (const bool lowered : {false, true}) {
    INFO((lowered ? "inference IR" : "training IR"));
    const auto q = lowered ? run_decompositions(p) : p.clone();
    engine_options o;
    o.max_plans = 2;
    engine e(q, o);
    for (const int n : {2, 5, 2, 7, 5, 1, 2, 2}) {
      INFO("batch " << n);
      const auto a = at::randn({n, 8});
      const auto at_ = at::randn({8, n}).t();  // transposed: put in the exported layout, then the same plan
      const auto got = e.run({a, w});
      const auto got_t = e.run({at_, w});
      c10::InferenceMode guard;
      CHECK(at::allclose(got[0], f(a, w), 1e-5, 1e-6));
      CHECK(at::allclose(got_t[0], f(at_, w), 1e-5, 1e-6));
      CHECK(e.num_plans() <= 2);
    }
    CHECK_THROWS_WITH_AS(e.run({at::randn({65, 8}), w}),
                         "[xport.guard.range] input a: dim 0 (batch) must be in [1, 64], got 65; the program was exported "
                         "for this range (widen the Dim's min/max and export again for other sizes)", guard_error);
  }
}

TEST_CASE("engine: eight threads at once give the results of one") {
  torch::manual_seed(0);
  m::ResNet18 net;
  net->eval();
  const auto p = run_decompositions(export_program(net, std::tuple{at::randn({1, 3, 32, 32})}));
  const auto before = snapshot(p);
  engine e(p);
  std::vector<at::Tensor> ins, want;
  for (int i = 0; i < 4; ++i) {
    ins.push_back(at::randn({1, 3, 32, 32}));
    want.push_back(e.run({ins.back()})[0]);
  }
  std::vector<int> ok(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      int good = 0;
      for (int k = 0; k < 6; ++k) {
        const auto i = static_cast<std::size_t>((t + k) % 4);
        good += at::equal(e.run({ins[i]})[0], want[i]) ? 1 : 0;
      }
      ok[static_cast<std::size_t>(t)] = good;
    });
  for (auto& t : threads) t.join();
  for (int t = 0; t < 8; ++t) CHECK(ok[static_cast<std::size_t>(t)] == 6);
  check_same_state(p, before);
}

TEST_CASE("engine: inputs are checked, and mutations written back, as the interpreter does") {
  const auto x = at::randn({4, 8}), y = at::randn({4, 8});
  const auto p = chain(6, x, y);
  engine e(p);
  CHECK_THROWS_WITH_AS(e.run({x}), "[xport.guard.count] expected 2 input(s) (x, y), got 1", guard_error);
  CHECK_THROWS_WITH_AS(e.run({at::randn({5, 8}), y}),
                       "[xport.guard.shape] input x: dim 0 must be 4, got 5 (the program was exported "
                       "with a static size here; export with a dynamic Dim for this dimension to accept "
                       "other sizes)",
                       guard_error);
  engine_options unchecked;
  unchecked.check_inputs = false;
  engine u(p, unchecked);
  XPORT_CHECK_THROWS_MSG(u.run({at::randn({5, 8}), y}), run_error,
                         "[xport.run.op_failed] node 'add' (aten::add.Tensor) failed: The size of tensor a (5) "
                         "must match the size of tensor b (4)");
  // a buffer the program updates (a running count): written back after every run, planned or not
  program_builder b;
  auto in = b.input("x", at::randn({3}));
  auto count = b.buffer("count", at::zeros({3}));
  auto next = b.call("aten::add.Tensor", {count, in});
  auto out = b.call("aten::mul.Tensor", {b.call("aten::sin", {next}), 2});
  b.output(next, output_kind::buffer_mutation, "count");
  b.output(out);
  auto q = std::move(b).build();
  auto total = at::zeros({3});
  for (const std::size_t threads : {1, 3}) {
    CAPTURE(threads);
    engine eq(q, with_threads(threads));
    for (int k = 0; k < 3; ++k) {
      const auto v = at::randn({3});
      total = total + v;
      CHECK(at::allclose(eq.run({v})[0], at::sin(total) * 2));
      CHECK(at::allclose(q.state_dict().at("count"), total));
    }
  }
}

TEST_CASE("engine: views a schema does not declare (unsafe_split) keep their base alive") {
  // unsafe_split returns views of its argument without saying so (LibTorch 1.13 lowers the GRU
  // with it): exp's buffer must outlive every part, and no part may be overwritten in place
  program_builder b;
  auto x = b.input("x", at::randn({4, 6}));
  auto e = b.call("aten::exp", {x});
  auto parts = b.call("aten::unsafe_split.Tensor", {e, 2, 1});
  auto s0 = b.call("aten::sigmoid", {parts.output(0)});
  auto c = b.call("aten::cos", {s0});
  auto m = b.call("aten::mul.Tensor", {parts.output(1), c});
  auto t = b.call("aten::tanh", {m});
  auto out = b.call("aten::add.Tensor", {t, parts.output(2)});
  b.output(out);
  const auto p = std::move(b).build();
  for (const std::size_t threads : {1, 3}) {
  CAPTURE(threads);
  engine en(p, with_threads(threads));
  for (int k = 0; k < 3; ++k) {
    const auto in = at::randn({4, 6});
    const auto ex = at::exp(in);
    const auto want = at::tanh(ex.slice(1, 2, 4) * at::cos(at::sigmoid(ex.slice(1, 0, 2)))) + ex.slice(1, 4, 6);
    CHECK(at::equal(en.run({in})[0], want));
  }
  }
}

TEST_CASE("engine: an op that returns its argument itself is followed as a view; inputs are never written") {
  // dropout in eval mode returns its input tensor (its schema says nothing of it): relu of it may
  // not run in place, or it would write the caller's input; exp's result dies at dropout, so its
  // buffer is the one relu_1 reads through the alias
  program_builder b;
  auto x = b.input("x", at::randn({3, 5}));
  auto d = b.call("aten::dropout", {x, 0.5, false});
  auto r = b.call("aten::relu", {d});
  auto e = b.call("aten::exp", {r});
  auto d1 = b.call("aten::dropout", {e, 0.5, false});
  auto r1 = b.call("aten::relu", {d1});
  auto s = b.call("aten::add.Tensor", {r1, r});
  b.output(s);
  const auto p = std::move(b).build();
  for (const std::size_t threads : {1, 3}) {
  CAPTURE(threads);
  engine en(p, with_threads(threads));
  for (int k = 0; k < 3; ++k) {
    const auto in = at::randn({3, 5});
    const auto copy = in.clone();
    const auto got = en.run({in});
    CHECK(at::equal(in, copy));
    CHECK(at::equal(got[0], at::relu(at::exp(at::relu(copy))) + at::relu(copy)));
  }
  }
}

// ---- parallel branches --------------------------------------------------------------------

TEST_CASE("engine: an Inception network runs its four towers at once, with the sequential results") {
  check_model<m::InceptionNet>([] { return m::InceptionNet(32); }, [] { return at::randn({2, 3, 12, 12}); }, 10);
  torch::manual_seed(0);
  m::InceptionNet net(32);
  net->eval();
  const auto x = at::randn({1, 3, 12, 12});
  const auto p = run_decompositions(export_program(net, std::tuple{x}));
  // the widest level: the towers' first convolutions and the max pool of both modules' inputs
  CHECK(engine(p, with_threads(2)).plan_info({x}).parallel_width >= 4);
}

TEST_CASE("engine: parallel engines called from many threads at once, and a failing node") {
  torch::manual_seed(0);
  m::InceptionNet net(32);
  net->eval();
  const auto p = run_decompositions(export_program(net, std::tuple{at::randn({1, 3, 12, 12})}));
  const auto before = snapshot(p);
  engine seq(p), par(p, with_threads(3));
  std::vector<at::Tensor> ins, want;
  for (int i = 0; i < 4; ++i) {
    ins.push_back(at::randn({1, 3, 12, 12}));
    want.push_back(seq.run({ins.back()})[0]);
  }
  std::vector<int> ok(4, 0);
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&, t] {
      for (int k = 0; k < 5; ++k) {
        const auto i = static_cast<std::size_t>((t + k) % 4);
        ok[static_cast<std::size_t>(t)] += at::equal(par.run({ins[i]})[0], want[i]) ? 1 : 0;
      }
    });
  for (auto& t : callers) t.join();
  for (int t = 0; t < 4; ++t) CHECK(ok[static_cast<std::size_t>(t)] == 5);
  check_same_state(p, before);

  // two branches, one of which fails on the second (planned) run: the error names the node, and
  // the engine runs again afterwards
  program_builder b;
  auto v = b.input("x", at::randn({5, 3}));
  auto idx = b.input("i", at::zeros({2}, at::kLong));
  auto left = b.call("aten::index_select", {b.call("aten::sin", {v}), 0, idx});
  auto right = b.call("aten::cos", {b.call("aten::exp", {v})});
  b.output(b.call("aten::add.Tensor", {b.call("aten::sum", {left}), b.call("aten::sum", {right})}));
  const auto q = std::move(b).build();
  engine e(q, with_threads(3));
  const auto a = at::randn({5, 3});
  const auto good = at::tensor({4, 1}, at::kLong);
  const auto want_q = at::sin(a).index_select(0, good).sum() + at::cos(at::exp(a)).sum();
  CHECK(at::equal(e.run({a, good})[0], want_q));
  XPORT_CHECK_THROWS_MSG(e.run({a, at::tensor({1, 7}, at::kLong)}), run_error,
                         "[xport.run.op_failed] node 'index_select' (aten::index_select) failed: ");
  CHECK(at::equal(e.run({a, good})[0], want_q));
  CHECK(at::equal(e.run({a, good})[0], want_q));
}

TEST_CASE("engine: a program loaded with mmap runs on its mapped weights, sequentially and in parallel") {
  torch::manual_seed(0);
  m::InceptionNet net(32);
  net->eval();
  const auto x = at::randn({1, 3, 12, 12});
  const auto p = run_decompositions(export_program(net, std::tuple{x}));
  // one file per process: ctest runs both header trees' suites at once
  const auto path = (std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_xport_test_engine_mapped.pt2")).string();
  save(p, path);
  load_options lo;
  lo.mmap = true;
  const auto q = load(path, lo);
  std::remove(path.c_str());
  for (const auto& [k, t] : q.state_dict()) CHECK(is_mapped(t));
  engine want(p);
  for (const std::size_t threads : {1, 3}) {
    CAPTURE(threads);
    engine e(q, with_threads(threads));
    for (int k = 0; k < 3; ++k) {
      const auto in = at::randn({1, 3, 12, 12});
      CHECK(at::equal(e.run({in})[0], want.run({in})[0]));
    }
    CHECK(e.plan_info({x}).hoisted_nodes == engine(p).plan_info({x}).hoisted_nodes);
  }
}

// ---- CUDA (skipped without a GPU; tools/gpu-check.sh runs these on a lent one) ------------------

TEST_CASE("engine: on CUDA the same engine plans, runs in place and in parallel" * doctest::skip(!at::hasCUDA())) {
  const c10::Device gpu(c10::kCUDA);
  torch::manual_seed(0);
  m::ResNet18 resnet;
  m::InceptionNet inception(32);
  m::MLP mlp;
  const auto check = [&](auto& net, const at::Tensor& x, bool planned) {
    net->eval();
    auto p = run_decompositions(export_program(net, std::tuple{x}));
    p.to(gpu);
    net->to(gpu);
    const auto xg = x.to(gpu);
    const auto want = eager_outputs(net, xg);
    interpreter interp(p);
    const run_options inference = inference_options();
    for (const std::size_t threads : {1, 3}) {
      CAPTURE(threads);
      engine e(p, with_threads(threads));
      for (int k = 0; k < 3; ++k) {
        const auto got = e.run({xg});
        REQUIRE(got.size() == want.size());
        CHECK(got[0].is_cuda());
        CHECK(at::allclose(got[0], interp.run({xg}, inference)[0], 1e-5, 1e-6));
        CHECK(at::allclose(got[0], want[0], 1e-3, 1e-4));
      }
      const auto info = e.plan_info({xg});
      CHECK(info.resolved_nodes > 0);
      if (planned) CHECK(info.out_variant_nodes + info.in_place_nodes > 0);
    }
  };
  check(resnet, at::randn({2, 3, 64, 64}), true);
  check(inception, at::randn({2, 3, 12, 12}), true);
  check(mlp, at::randn({5, 16}), true);
}
