// Captured runs in the engine (engine_options::cuda_graphs). Everywhere: the fallbacks (no
// backend, parallel branches, a failed capture) and the engine's side of a captured run, through
// a stand-in backend that "captures" on the CPU by keeping the run and "replays" by running it
// again on the same static buffers, which is what a CUDA graph's replay does: the static inputs
// are refilled, the static outputs rewritten, results the caller keeps are copies. With a CUDA
// build and a GPU (tools/gpu-check.sh): the real CUDA graphs, against the engine without them.
#include <functional>
#include <memory>
#include <string>

#include <xport/engine.hpp>
#if defined(XPORT_TEST_CUDA_GRAPHS)
#include <xport/cuda_graphs.hpp>
#endif

#include "models.hpp"

#include "common.hpp"

using namespace xport;
namespace m = xport_models;

namespace {

// A CPU stand-in for CUDA's backend: capture runs the body twice (warm-up, capture) and keeps it;
// replay runs it again. `fail` makes capture throw as CUDA does on a host sync.
struct stand_in_backend final : xport::detail::graph_backend {
  mutable int captures = 0;
  mutable int replays = 0;
  bool fail = false;

  struct run final : xport::detail::captured_run {
    std::function<void()> body;
    int* replays;
    void replay() override {
      ++*replays;
      body();
    }
  };
  [[nodiscard]] bool supports(const c10::Device& d) const override { return d.is_cpu(); }
  [[nodiscard]] std::unique_ptr<xport::detail::captured_run> capture(const c10::Device&, const std::function<void()>& body) const override {
    ++captures;
    body();
    if (fail) throw std::runtime_error("operation not permitted when stream is capturing");
    body();
    auto r = std::make_unique<run>();
    r->body = body;
    r->replays = &replays;
    return r;
  }
  [[nodiscard]] std::string name() const override { return "CPU stand-in"; }
};

// Installs `b` for the scope, then puts back what was there.
struct installed {
  const xport::detail::graph_backend* before = xport::detail::installed_graph_backend;
  explicit installed(const xport::detail::graph_backend* b) { xport::detail::installed_graph_backend = b; }
  ~installed() { xport::detail::installed_graph_backend = before; }
  installed(const installed&) = delete;
  installed& operator=(const installed&) = delete;
};

engine_options graphs(std::size_t threads = 1) {
  engine_options o;
  o.cuda_graphs = true;
  o.threads = threads;
  return o;
}

exported_program mlp_program(const at::Tensor& x) {
  torch::manual_seed(0);
  m::MLP net;
  net->eval();
  return run_decompositions(export_program(net, std::tuple{x}));
}

}  // namespace

TEST_CASE("cuda graphs: without a backend a plan runs as before and says why") {
  installed none(nullptr);
  const auto x = at::randn({5, 16});
  const auto p = mlp_program(x);
  engine plain(p), e(p, graphs());
  for (int k = 0; k < 3; ++k) {
    const auto v = at::randn({5, 16});
    CHECK(at::equal(e.run({v})[0], plain.run({v})[0]));
  }
  const auto info = e.plan_info({x});
  CHECK_FALSE(info.graph);
  CHECK(info.graph_fallback == "no graph backend: include <xport/cuda_graphs.hpp> (a CUDA build of LibTorch)");
  CHECK(engine(p).plan_info({x}).graph_fallback.empty());  // not asked: nothing to say
}

TEST_CASE("cuda graphs: a captured run replays the engine's results on new inputs (CPU stand-in)") {
  stand_in_backend backend;
  installed use(&backend);
  torch::manual_seed(0);
  m::Encoder enc;
  enc->eval();
  const auto x = at::randn({6, 2, 32});
  const auto p = run_decompositions(export_program(enc, std::tuple{x}));
  engine plain(p), e(p, graphs());
  std::vector<at::Tensor> kept, inputs;
  for (int k = 0; k < 6; ++k) {
    CAPTURE(k);
    inputs.push_back(at::randn({6, 2, 32}));
    const auto got = e.run({inputs.back()});
    CHECK(at::equal(got[0], plain.run({inputs.back()})[0]));
    kept.push_back(got[0]);
  }
  // run 1 records; run 2 captures, then replays as every later run does
  CHECK(backend.captures == 1);
  CHECK(backend.replays == 5);
  for (std::size_t k = 0; k < kept.size(); ++k) CHECK(at::equal(kept[k], plain.run({inputs[k]})[0]));  // never overwritten
  const auto info = e.plan_info({x});
  CHECK(info.graph);
  CHECK(info.graph_fallback.empty());
  // a transposed input is copied into the exported layout first: the same plan, the same graph
  const auto t = at::randn({2, 6, 32}).transpose(0, 1);
  for (int k = 0; k < 3; ++k) CHECK(at::equal(e.run({t})[0], plain.run({t})[0]));
  CHECK(backend.captures == 1);
  CHECK(backend.replays == 8);
}

TEST_CASE("cuda graphs: mutated buffers are written back after every replay (CPU stand-in)") {
  stand_in_backend backend;
  installed use(&backend);
  program_builder b;
  auto in = b.input("x", at::randn({3}));
  auto count = b.buffer("count", at::zeros({3}));
  auto next = b.call("aten::add.Tensor", {count, in});
  auto out = b.call("aten::mul.Tensor", {b.call("aten::sin", {next}), 2});
  b.output(next, output_kind::buffer_mutation, "count");
  b.output(out);
  auto q = std::move(b).build();
  engine e(q, graphs());
  auto total = at::zeros({3});
  for (int k = 0; k < 5; ++k) {
    const auto v = at::randn({3});
    total = total + v;
    CHECK(at::allclose(e.run({v})[0], at::sin(total) * 2));
    CHECK(at::allclose(q.state_dict().at("count"), total));
  }
  CHECK(e.plan_info({at::randn({3})}).graph);
  CHECK(backend.replays == 4);
}

TEST_CASE("cuda graphs: parallel branches and a failed capture fall back, saying why (CPU stand-in)") {
  stand_in_backend backend;
  installed use(&backend);
  const auto x = at::randn({5, 16});
  const auto p = mlp_program(x);
  engine plain(p);
  {
    engine e(p, graphs(2));
    for (int k = 0; k < 3; ++k) CHECK(at::equal(e.run({x})[0], plain.run({x})[0]));
    CHECK(e.plan_info({x}).graph_fallback == "parallel branches (threads > 1) are not captured");
    CHECK(backend.captures == 0);
  }
  backend.fail = true;
  engine e(p, graphs());
  for (int k = 0; k < 4; ++k) {
    const auto v = at::randn({5, 16});
    CHECK(at::equal(e.run({v})[0], plain.run({v})[0]));
  }
  const auto info = e.plan_info({x});
  CHECK_FALSE(info.graph);
  CHECK(info.graph_fallback == "capture failed: operation not permitted when stream is capturing");
  CHECK(backend.captures == 1);  // tried once per plan
  CHECK(backend.replays == 0);
}

TEST_CASE("cuda graphs: a data-dependent program runs unplanned, saying why (CPU stand-in)") {
  stand_in_backend backend;
  installed use(&backend);
  torch::manual_seed(0);
  m::MoE moe;
  moe->eval();
  const auto x = at::randn({6, 8});
  const auto p = run_decompositions(export_program(moe, std::tuple{x}));
  engine e(p, graphs());
  interpreter interp(p);
  for (int k = 0; k < 3; ++k) {
    const auto v = at::randn({6, 8});
    CHECK(at::allclose(e.run({v})[0], interp.run({v})[0]));
  }
  const auto info = e.plan_info({x});
  CHECK_FALSE(info.graph);
  CHECK(info.graph_fallback == "a size only the data knows (nonzero, item, ...): runs unplanned, no graph");
  CHECK(info.nodes == interp.num_instructions());
  CHECK(backend.captures == 0);
}

TEST_CASE("cuda graphs: broadcast and sliced inputs keep their strides, overlapping ones fall back (CPU stand-in)") {
  // Examples in these layouts export with no layout to copy into: run() passes such inputs as
  // they are, and the static copies must have their strides (the plan was made for them).
  stand_in_backend backend;
  installed use(&backend);
  const auto f = [](const at::Tensor& x, const at::Tensor& y) { return (x * 2 + y).sum(1); };
  const auto rows = [] { return at::randn({1, 8}).expand({4, 8}); };  // stride 0 in dimension 0
  const auto sliced = [] { return at::randn({4, 16}).slice(1, 0, 16, 2); };  // strides (16, 2)
  const auto p = export_program(f, std::tuple{rows(), sliced()});
  engine plain(p), e(p, graphs());
  std::vector<at::Tensor> kept, xs, ys;
  for (int k = 0; k < 5; ++k) {
    CAPTURE(k);
    xs.push_back(rows());
    ys.push_back(sliced());
    REQUIRE(xs.back().stride(0) == 0);
    const auto got = e.run({xs.back(), ys.back()});
    CHECK(at::equal(got[0], plain.run({xs.back(), ys.back()})[0]));
    CHECK(at::allclose(got[0], (xs.back() * 2 + ys.back()).sum(1)));
    kept.push_back(got[0]);
  }
  for (std::size_t k = 0; k < kept.size(); ++k) CHECK(at::equal(kept[k], plain.run({xs[k], ys[k]})[0]));
  CHECK(e.plan_info({rows(), sliced()}).graph);
  CHECK(backend.captures == 1);
  CHECK(backend.replays == 4);

  // elements that overlap otherwise (as_strided): no copy keeps the strides, so no graph
  const auto overlapping = [] { return at::randn({12}).as_strided({4, 8}, {1, 1}); };
  const auto q = export_program(f, std::tuple{overlapping(), sliced()});
  engine plain_q(q), eq(q, graphs());
  for (int k = 0; k < 3; ++k) {
    const auto x = overlapping(), y = sliced();
    CHECK(at::equal(eq.run({x, y})[0], plain_q.run({x, y})[0]));
  }
  const auto info = eq.plan_info({overlapping(), sliced()});
  CHECK_FALSE(info.graph);
  CHECK(info.graph_fallback ==
        "capture failed: input 0 has overlapping elements (strides [1, 1]): no static copy keeps them; pass it contiguous (.contiguous())");
  CHECK(backend.captures == 1);  // (the first program's)
}

#if defined(XPORT_TEST_CUDA_GRAPHS)
// ---- CUDA (tools/gpu-check.sh runs these on a lent GPU) -----------------------------------------

TEST_CASE("cuda graphs: CUDA graphs replay the engine's results" * doctest::skip(!at::hasCUDA())) {
  REQUIRE(xport::detail::installed_graph_backend != nullptr);
  const c10::Device gpu(c10::kCUDA);
  torch::manual_seed(0);
  m::Encoder enc;
  m::ResNet18 resnet;
  m::MLP mlp;
  const auto check = [&](auto& net, const at::Tensor& x) {
    net->eval();
    auto p = run_decompositions(export_program(net, std::tuple{x}));
    p.to(gpu);
    engine plain(p), e(p, graphs());
    std::vector<at::Tensor> kept, want;
    for (int k = 0; k < 5; ++k) {
      const auto v = at::randn_like(x).to(gpu);
      kept.push_back(e.run({v})[0]);
      want.push_back(plain.run({v})[0]);
      CHECK(at::allclose(kept.back(), want.back(), 1e-5, 1e-6));
    }
    for (std::size_t k = 0; k < kept.size(); ++k) CHECK(at::allclose(kept[k], want[k], 1e-5, 1e-6));
    const auto info = e.plan_info({x.to(gpu)});
    CHECK(info.graph);
    CHECK(info.graph_fallback == "");
  };
  check(enc, at::randn({6, 2, 32}));
  check(resnet, at::randn({1, 3, 64, 64}));
  check(mlp, at::randn({1, 16}));
}

TEST_CASE("cuda graphs: a CPU input falls back" * doctest::skip(!at::hasCUDA())) {
  const auto x = at::randn({5, 16});
  const auto p = mlp_program(x);
  engine e(p, graphs());
  for (int k = 0; k < 3; ++k) (void)e.run({x});
  CHECK(e.plan_info({x}).graph_fallback == "input 0 is on cpu: a CUDA graph runs CUDA tensors only");
}
#endif
