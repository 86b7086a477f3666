// Passes: the contract (results, failures that leave the program as it was), compile-time
// pipelines and the run-time pass manager, and each standard pass on hand-built graphs and on
// exported real models, with the program still equal to eager afterwards.
#include <algorithm>
#include <memory_resource>
#include <typeinfo>
#include <sstream>

#include <torch/torch.h>

#include <xport/engine.hpp>

#include "models.hpp"

#include "common.hpp"

using namespace xport;
namespace ps = xport::passes;

namespace {

std::size_t count_op(const exported_program& p, std::string_view op) {
  std::size_t n = 0;
  for (auto node : p.graph().nodes()) n += node.is_call() && node.op().qualified == op;
  return n;
}

exported_program functional(exported_program p) { return run_decompositions(p, decomposition_table::none()); }

// A user pass that breaks the graph on purpose (moves a call before its input's producer).
struct vandal_t : ps::pass_base<vandal_t> {
  static constexpr std::string_view name = "vandal";
  ps::pass_result run(exported_program& p) const {
    auto& g = p.graph_mut();
    node last_call;
    for (auto n : g.nodes())
      if (n.is_call()) last_call = n;
    g.move_before(last_call, g.placeholders().back());
    return ps::pass_result::modified();
  }
};

}  // namespace

TEST_CASE("passes: pipelines compose at compile time and run on a program") {
  auto p = functional(export_program(
      [](const at::Tensor& x, const at::Tensor& y) {
        auto a = x.sin() * y;
        auto b = x.sin() * y;  // duplicate
        auto unused = a.cos();  // dead
        (void)unused;
        return a + b;
      },
      std::tuple{at::randn({3}), at::randn({3})}, {.input_names = {"x", "y"}}));
  constexpr auto pipe = ps::dce | ps::cse | ps::dce;
  static_assert(std::tuple_size_v<decltype(pipe.stages)> == 3);
  const auto before = p.graph().size();
  auto r = p | pipe;
  CHECK(r.ok());
  CHECK(r.changed);
  CHECK(p.graph().size() == before - 2);  // the second sin and mul (run_decompositions dropped cos)
  verify(p);
  auto again = pipe(p);
  CHECK(again.ok());
  CHECK_FALSE(again.changed);
  const auto x = at::randn({3}), y = at::randn({3});
  CHECK(at::allclose(run(p, {x, y})[0], 2 * x.sin() * y));
}

TEST_CASE("passes: dce keeps side effects and signature outputs") {
  program_builder b;
  auto x = b.input("x", at::randn({3}));
  auto buf = b.buffer("count", at::zeros({3}));
  b.call("aten::add_.Tensor", {buf, x});            // side effect: kept
  b.call("aten::rand_like", {x});                   // draws random numbers: kept
  auto dead = b.call("aten::cos", {x});             // dead
  b.call("aten::exp", {dead});                      // dead
  auto kept = b.call("aten::sin", {x});
  b.output(kept);
  auto p = std::move(b).build();
  auto r = ps::dce(p);
  CHECK(r.changed);
  CHECK(count_op(p, "aten::add_.Tensor") == 1);
  CHECK(count_op(p, "aten::rand_like") == 1);
  CHECK(count_op(p, "aten::cos") == 0);
  CHECK(count_op(p, "aten::exp") == 0);
  CHECK(count_op(p, "aten::sin") == 1);
  verify(p);
}

TEST_CASE("passes: cse never merges random or mutating calls, and refuses non-functional IR") {
  SUBCASE("random draws stay apart") {
    program_builder b;
    auto x = b.input("x", at::randn({8}));
    auto d1 = b.call("aten::dropout", {x, 0.5, true});
    auto d2 = b.call("aten::dropout", {x, 0.5, true});
    auto r1 = b.call("aten::rand_like", {x});
    auto r2 = b.call("aten::rand_like", {x});
    b.output(b.call("aten::add.Tensor", {b.call("aten::add.Tensor", {d1, d2}), b.call("aten::add.Tensor", {r1, r2})}));
    auto p = std::move(b).build(ir_dialect::aten);
    CHECK_FALSE(ps::cse(p).changed);
    CHECK(count_op(p, "aten::dropout") == 2);
    CHECK(count_op(p, "aten::rand_like") == 2);
  }
  SUBCASE("writes are effects: calls merge only across no write to what they read, never a written result") {
    // torch's training IR keeps in-place calls (Note [Mutations as effects])
    const auto fn = [](const at::Tensor& x, const at::Tensor& s) {
      auto a = x.sin();
      a.add_(1);                  // a is written: the later x.sin() must stay its own
      auto b = x.sin();
      auto c1 = s.cos(), c2 = s.cos();  // the same reads: merged
      s.view({-1}).mul_(2);       // writes s through a view
      auto c3 = s.cos();          // reads s after the write: not merged with c1
      auto e1 = x.exp(), e2 = x.exp();
      return a + b + c1 + c2 + c3 + e1 * e2;
    };
    auto p = export_program(fn, std::tuple{at::randn({3}), at::randn({3})});
    auto r = p | ps::cse;
    REQUIRE(r.ok());
    CHECK(r.changed);
    CHECK(count_op(p, "aten::sin") == 2);
    CHECK(count_op(p, "aten::cos") == 2);
    CHECK(count_op(p, "aten::exp") == 1);
    verify(p);
    const auto x = at::randn({3}), s = at::randn({3});
    auto s1 = s.clone(), s2 = s.clone();
    const auto want = fn(x, s1);
    CHECK(at::allclose(run(p, {x, s2})[0], want));
    CHECK(at::equal(s2, s1));  // the input written as eager writes it
  }
}

TEST_CASE("passes: the standard pipeline on training IR with in-place calls keeps every write, in order") {
  const auto k = at::full({4}, 2.0);
  const auto fn = [&](const at::Tensor& x) {
    auto t = k.clone();  // a constant's copy, written below: folding it would write the constant on every run
    t.add_(1);
    auto h = (x * t).relu_();
    auto unused = x.sin();  // dead: removed
    (void)unused;
    h.mul_(k.exp());        // k.exp() reads a constant nobody writes: folded
    return h + x.relu();
  };
  auto p = export_program(fn, std::tuple{at::randn({4})});
  const auto x = at::randn({4});
  const auto want = fn(x);
  auto r = p | (ps::dce | ps::cse | ps::fold | ps::canonicalize);
  REQUIRE_MESSAGE(r.ok(), r.error);
  CHECK(count_op(p, "aten::sin") == 0);
  CHECK(count_op(p, "aten::exp") == 0);    // folded into a lifted constant
  CHECK(count_op(p, "aten::clone") == 1);  // written later: computed on every run
  CHECK(count_op(p, "aten::add_.Tensor") == 1);
  CHECK(count_op(p, "aten::relu_") == 1);
  CHECK(count_op(p, "aten::mul_.Tensor") == 1);
  verify(p);
  for (int i = 0; i < 3; ++i) CHECK(at::allclose(run(p, {x})[0], want));  // the same every run
}

TEST_CASE("passes: fold computes constant subgraphs once and lifts them") {
  const auto k = at::full({4}, 2.0);
  auto p = functional(export_program(
      [&](const at::Tensor& x) {
        auto kc = k;
        for (int i = 0; i < 3; ++i) kc = kc * k;  // constant: folded
        return x * kc + k.exp().sum();
      },
      std::tuple{at::randn({4})}));
  auto r = ps::fold(p);
  CHECK(r.changed);
  verify(p);
  CHECK(count_op(p, "aten::exp") == 0);
  CHECK(count_op(p, "aten::sum") == 0);
  CHECK(count_op(p, "aten::mul.Tensor") == 1);  // x * kc
  std::size_t folded = 0;
  for (const auto& s : p.signature().input_specs) folded += s.target.value_or("").starts_with("_folded_");
  CHECK(folded == 2);
  const auto x = at::randn({4});
  CHECK(at::allclose(run(p, {x})[0], x * k.pow(4) + k.exp().sum()));
  SUBCASE("results above the size limit stay computed") {
    const auto big = at::randn({64, 64});
    auto q = functional(export_program([&](const at::Tensor& x) { return x + big.t().contiguous(); },
                                       std::tuple{at::randn({64, 64})}));
    CHECK_FALSE(ps::fold.limit(1024)(q).changed);
    CHECK(ps::fold(q).changed);
  }
}

TEST_CASE("passes: the rewriter turns t + addmm into linear, on an exported model") {
  const auto x = at::randn({2, 4}), w = at::randn({3, 4}), bias = at::randn({3});
  auto pattern = export_program([](const at::Tensor& a, const at::Tensor& wt, const at::Tensor& bs) {
    return at::addmm(bs, a, wt.t());
  }, std::tuple{x, w, bias});
  auto replacement = export_program([](const at::Tensor& a, const at::Tensor& wt, const at::Tensor& bs) {
    return at::linear(a, wt, bs);
  }, std::tuple{x, w, bias});
  torch::manual_seed(0);
  xport_models::MLP mlp;
  mlp->eval();
  auto p = export_program(mlp, std::tuple{at::randn({5, 16})});
  CHECK(count_op(p, "aten::addmm") == 3);
  auto r = p | ps::rewrite(std::move(pattern), std::move(replacement));
  CHECK(r.ok());
  CHECK(r.changed);
  verify(p);
  CHECK(count_op(p, "aten::addmm") == 0);
  CHECK(count_op(p, "aten::t") == 0);
  CHECK(count_op(p, "aten::linear") == 3);
  const auto in = at::randn({5, 16});
  CHECK(at::allclose(run(p, {in})[0], mlp->forward(in), 1e-5, 1e-6));
}

TEST_CASE("passes: fold never folds a call whose arguments hold a symbolic size") {
  // `ones({n, 1})` has only constant inputs, but its size is the input's: folding it at the
  // example size would fix the program to that size
  auto p = run_decompositions(export_program(
      [](const at::Tensor& x) { return x + at::ones({x.size(0), 1}); }, std::tuple{at::randn({4, 3})},
      {.dynamic_shapes = dynamic_shapes::positional({shape(Dim("n", 2, 64), 3)})}));
  auto r = ps::fold(p);
  CHECK(r.ok());
  verify(p);
  for (const auto& s : p.signature().input_specs) CHECK_FALSE(s.target.value_or("").starts_with("_folded_"));
  for (std::int64_t n : {4, 7, 64}) {
    for (const auto& x : {at::randn({n, 3}), at::randn({3, n}).t(), at::randn({n, 6}).slice(1, 0, 6, 2)}) {
      INFO("n = " << n << ", contiguous: " << x.is_contiguous());
      CHECK(at::allclose(run(p, {x})[0], x + 1));
    }
  }
}

TEST_CASE("passes: conv + batch_norm (eval) folds into one conv") {
  torch::manual_seed(0);
  auto net = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)),
                                   torch::nn::BatchNorm2d(8), torch::nn::ReLU());
  // give the batch norm non-trivial statistics
  net->train();
  for (int i = 0; i < 3; ++i) net->forward(at::randn({4, 3, 8, 8}));
  net->eval();
  const auto x = at::randn({1, 3, 8, 8}), w = at::randn({8, 3, 3, 3}), b = at::randn({8}), c = at::randn({8});
  auto pattern = export_program([](const at::Tensor& in, const at::Tensor& wt, const at::Tensor& bs, const at::Tensor& g,
                                   const at::Tensor& be, const at::Tensor& m, const at::Tensor& v) {
    return at::batch_norm(at::conv2d(in, wt, bs, 1, 1), g, be, m, v, false, 0.1, 1e-5, true);
  }, std::tuple{x, w, b, c, c, c, c.abs()});
  auto replacement = export_program([](const at::Tensor& in, const at::Tensor& wt, const at::Tensor& bs, const at::Tensor& g,
                                       const at::Tensor& be, const at::Tensor& m, const at::Tensor& v) {
    auto scale = g * (v + 1e-5).rsqrt();
    return at::conv2d(in, wt * scale.reshape({-1, 1, 1, 1}), (bs - m) * scale + be, 1, 1);
  }, std::tuple{x, w, b, c, c, c, c.abs()});
  auto p = export_program(net, std::tuple{at::randn({1, 3, 8, 8})});
  auto r = p | (ps::rewrite(std::move(pattern), std::move(replacement)) | ps::fold.with_state() | ps::dce);
  CHECK(r.ok());
  verify(p);
  CHECK(count_op(p, "aten::batch_norm") == 0);
  CHECK(count_op(p, "aten::conv2d") == 1);
  CHECK(count_op(p, "aten::mul.Tensor") == 0);  // the scaling was folded into the weights
  const auto in = at::randn({1, 3, 8, 8});
  CHECK(at::allclose(run(p, {in})[0], net->forward(in), 1e-4, 1e-5));
}

TEST_CASE("passes: propagate_shapes recomputes types after an edit") {
  auto p = export_program([](const at::Tensor& x) { return x.relu().sum(0); }, std::tuple{at::randn({4, 3})});
  auto& g = p.graph_mut();
  g.placeholders()[0].output(0).set_meta(tensor_meta::contiguous(at::kFloat, {7, 5}));
  CHECK(ps::propagate_shapes(p).changed);
  CHECK(g.outputs()[0].meta().annotation() == "f32[5]");
}

TEST_CASE("passes: canonicalize makes equal programs print equal") {
  auto a = functional(export_program([](const at::Tensor& x, const at::Tensor& y) {
    auto s = x.sin();
    auto c = y.cos();
    return s * c;
  }, std::tuple{at::randn({3}), at::randn({3})}, {.input_names = {"x", "y"}}));
  auto b = functional(export_program([](const at::Tensor& x, const at::Tensor& y) {
    auto c = y.cos();
    auto unused = x.exp();
    (void)unused;
    auto s = x.sin();
    return s * c;
  }, std::tuple{at::randn({3}), at::randn({3})}, {.input_names = {"x", "y"}}));
  CHECK(to_string(a) != to_string(b));
  auto pipe = ps::dce | ps::canonicalize;
  CHECK((a | pipe).ok());
  CHECK((b | pipe).ok());
  CHECK(to_string(a) == to_string(b));
}

TEST_CASE("passes: a failed pass leaves the program as it was, and the pipeline stops there") {
  auto p = export_program([](const at::Tensor& x) { return x.sin().cos(); }, std::tuple{at::randn({3})});
  const auto before = to_string(p);
  ps::pipeline_options opts;
  opts.verify_each = true;
  auto r = (vandal_t{} | ps::dce).run(p, opts);
  CHECK_FALSE(r.ok());
  CHECK(r.error.find("vandal: the program does not verify after the pass: [xport.verify.") == 0);
  CHECK(to_string(p) == before);
}

TEST_CASE("passes: the pass manager builds pipelines from names") {
  auto p = functional(export_program([](const at::Tensor& x) { return x.sin() + x.sin(); }, std::tuple{at::randn({3})}));
  auto pm = ps::pass_manager::parse("dce, cse ,fold,canonicalize");
  CHECK(pm.str() == "dce,cse,fold,canonicalize");
  std::ostringstream log;
  pm.verify_each().print_to(log);
  auto r = pm.run(p);
  CHECK(r.ok());
  CHECK(count_op(p, "aten::sin") == 1);
  CHECK(log.str().find("--- before cse ---") != std::string::npos);
  CHECK(log.str().find("--- after fold (unchanged) ---") != std::string::npos);
  XPORT_CHECK_THROWS_MSG(ps::pass_manager::parse("dce,fuse"), xport::error,
                         "[xport.passes.unknown] no pass named 'fuse' (known: ");
  pm.add(vandal_t{});
  CHECK_FALSE(pm.run(p).ok());
  verify(p);
}

namespace user {
// Passes written outside xport, without a base class: the pass concept is enough.
struct count_calls {
  static constexpr std::string_view name = "count_calls";
  std::size_t* seen;
  ps::pass_result run(exported_program& p) const {
    for (auto n : p.graph().nodes()) *seen += n.is_call() ? 1 : 0;
    return ps::pass_result::unchanged();
  }
};
struct drop_dead {
  static constexpr std::string_view name = "drop_dead";
  static constexpr ps::traits traits{.needs_functional = true, .transactional = true};
  ps::pass_result run(exported_program& p) const { return ps::pass_result::modified(eliminate_dead_code(p.graph_mut()) != 0); }
};
}  // namespace user

TEST_CASE("passes: a user's pass types compose with each other, with built-ins and with a program") {
  auto p = functional(export_program([](const at::Tensor& x) { return x.sin() + x.sin(); }, std::tuple{at::randn({3})}));
  std::size_t seen = 0;
  constexpr auto traits = ps::traits_of<user::drop_dead>();
  static_assert(traits.needs_functional && traits.transactional && !traits.needs_shapes);
  auto r = p | (user::count_calls{&seen} | ps::cse | user::drop_dead{} | user::count_calls{&seen});
  CHECK(r.ok());
  CHECK(r.changed);
  CHECK(seen == 3 + 2);  // sin, sin, add before; sin, add after
  CHECK((p | user::count_calls{&seen}).ok());
  CHECK(seen == 7);
  CHECK(at::allclose(run(p, {at::ones({3})})[0], at::ones({3}).sin() * 2));
}

TEST_CASE("passes: the pass manager knows every built-in pass, and docs/passes.md names each") {
  const auto names = ps::pass_manager::registered();
  std::vector<std::string> builtin;
  std::apply([&](const auto&... pass) { (builtin.emplace_back(pass.name), ...); }, ps::builtin_passes());
  CHECK(builtin.size() == std::tuple_size_v<decltype(ps::builtin_passes())>);
  const auto doc = xport_test::read_file(xport_test::test_dir() + "/../docs/passes.md");
  REQUIRE_FALSE(doc.empty());
  for (const auto& name : builtin) {
    CHECK_MESSAGE(std::count(names.begin(), names.end(), name) == 1, "the pass manager does not know `", name, "`");
    CHECK_MESSAGE(doc.find("| `" + name) != std::string::npos, "docs/passes.md's pass table has no row for `", name, "`");
  }
}

TEST_CASE("passes: ResNet-18's inference IR through dce | cse | fold stays equal to eager") {
  torch::manual_seed(0);
  xport_models::ResNet18 net;
  net->eval();
  auto p = run_decompositions(export_program(net, std::tuple{at::randn({1, 3, 64, 64})}));
  auto r = p | (ps::dce | ps::cse | ps::fold | ps::canonicalize);
  CHECK(r.ok());
  verify(p);
  const auto x = at::randn({1, 3, 64, 64});
  CHECK(at::allclose(run(p, {x})[0], net->forward(x), 1e-4, 1e-5));
}

namespace {

// An LSTM as users write one: optional initial state, any number of layers, one direction or two.
struct SeqNetImpl : torch::nn::Module {
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear head{nullptr};
  SeqNetImpl(std::int64_t layers, bool bidirectional, bool batch_first) {
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(8, 16).num_layers(layers)
                                                       .bidirectional(bidirectional).batch_first(batch_first)));
    head = register_module("head", torch::nn::Linear(bidirectional ? 32 : 16, 3));
  }
  std::tuple<at::Tensor, at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& h0, const at::Tensor& c0) {
    auto [out, state] = lstm(x, std::make_tuple(h0, c0));
    return {head(out), std::get<0>(state), std::get<1>(state)};
  }
};
TORCH_MODULE(SeqNet);

#if XPORT_TEST_TORCH_FUNCTIONALIZATION
constexpr bool lstm_fusable = true;  // torch's lstm decomposition (ops/decompositions.hpp, LibTorch 2.1+)
#else
constexpr bool lstm_fusable = false;  // LibTorch 1.13 unrolls lstm by its own composite, which fuse_lstm does not match
#endif

// `fast` (fused) against `slow` (decomposed) and eager, on inputs in every layout.
void check_fused_equal(const exported_program& fast, const exported_program& slow, SeqNet& net,
                       const std::vector<at::Tensor>& in) {
  for (const auto& [layout, x] : xport_test::layouts_of(in[0])) {
    INFO("layout " << layout);
    const std::vector<at::Tensor> args{x, in[1], in[2]};
    const auto got = run(fast, args);
    const auto want = run(slow, args);
    const auto [y, h, c] = net->forward(x, in[1], in[2]);
    const std::vector<at::Tensor> eager{y, h, c};
    REQUIRE(got.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("output " << i);
      CHECK((got[i].sizes() == want[i].sizes()));
      CHECK(at::allclose(got[i], want[i], 1e-5, 1e-6));
      CHECK(at::allclose(got[i], eager[i], 1e-5, 1e-6));
    }
  }
}

}  // namespace

TEST_CASE("passes: fuse_lstm runs each unrolled LSTM layer as one lstm.input, equal to the decomposed program") {
  struct shape {
    std::int64_t layers;
    bool bidirectional, batch_first;
    std::size_t fused;  // layers fused: the forward direction of each
  };
  for (const auto s : {shape{1, false, false, 1}, shape{2, false, true, 2}, shape{3, true, true, 3}}) {
    CAPTURE(s.layers);
    CAPTURE(s.bidirectional);
    CAPTURE(s.batch_first);
    torch::manual_seed(0);
    SeqNet net(s.layers, s.bidirectional, s.batch_first);
    net->eval();
    const auto dirs = s.bidirectional ? 2 : 1;
    const auto x = s.batch_first ? at::randn({2, 6, 8}) : at::randn({6, 2, 8});
    const auto h0 = at::randn({s.layers * dirs, 2, 16}), c0 = at::randn({s.layers * dirs, 2, 16});
    const auto slow = run_decompositions(export_program(net, std::tuple{x, h0, c0}));
    REQUIRE(count_op(slow, "aten::lstm.input") == 0);
    auto fast = run_decompositions(export_program(net, std::tuple{x, h0, c0}));
    const auto before = fast.graph().size();
    const auto r = fast | ps::fuse_lstm;
    REQUIRE(r.ok());
    verify(fast);
    check_fused_equal(fast, slow, net, {x, h0, c0});
    if (!lstm_fusable) {
      CHECK_FALSE(r.changed);  // nothing it knows: the program stays as it was
      continue;
    }
    CHECK(r.changed);
    CHECK(count_op(fast, "aten::lstm.input") == s.fused);
    // a reversed direction stays unrolled; a forward one leaves no cell behind
    CHECK(count_op(fast, "aten::split_with_sizes") == (s.bidirectional ? 6 * s.layers : 0));
    CHECK(fast.graph().size() < before);
    verify(fast);
    check_fused_equal(fast, slow, net, {x, h0, c0});
    // saved and loaded, the fused program is the same program
    const auto loaded = xport_test::reload(fast);
    CHECK(count_op(loaded, "aten::lstm.input") == s.fused);
    CHECK(at::allclose(run(loaded, {x, h0, c0})[0], run(slow, {x, h0, c0})[0], 1e-5, 1e-6));
    // and the engine runs it
    xport::engine e(fast);
    for (int rep = 0; rep < 2; ++rep) CHECK(at::allclose(e.run({x, h0, c0})[0], run(slow, {x, h0, c0})[0], 1e-5, 1e-6));
  }
}

TEST_CASE("passes: fuse_lstm keeps a dynamic batch, leaves other programs alone, and runs by name") {
  torch::manual_seed(0);
  SeqNet net(2, false, true);
  net->eval();
  const auto x = at::randn({3, 5, 8}), h0 = at::randn({2, 3, 16}), c0 = at::randn({2, 3, 16});
  const Dim batch("batch", 1, 64);
  export_options o;
  o.dynamic_shapes = dynamic_shapes::positional({shape(batch, 5, 8), shape(2, batch, 16), shape(2, batch, 16)});
  const auto slow = run_decompositions(export_program(net, std::tuple{x, h0, c0}, o));
  auto fast = run_decompositions(export_program(net, std::tuple{x, h0, c0}, o));
  if (!lstm_fusable) {
    CHECK_FALSE((fast | ps::fuse_lstm).changed);
    return;
  }
  REQUIRE((fast | ps::fuse_lstm).changed);
  CHECK(count_op(fast, "aten::lstm.input") == 2);
  for (const std::int64_t b : {1, 7}) {
    CAPTURE(b);
    check_fused_equal(fast, slow, net, {at::randn({b, 5, 8}), at::randn({2, b, 16}), at::randn({2, b, 16})});
  }
  // the guards still hold: the time dim was unrolled, so it stays static
  XPORT_CHECK_THROWS_MSG(run(fast, {at::randn({3, 6, 8}), h0, c0}), guard_error, "dim 1 must be 5, got 6");

  // nothing to fuse: the GRU's cells, ResNet's graph, and the training IR (lstm kept whole)
  torch::manual_seed(0);
  xport_models::GRUNet gru;
  gru->eval();
  auto g = run_decompositions(export_program(gru, std::tuple{at::randn({2, 5, 8})}));
  const auto printed = to_string(g);
  CHECK_FALSE((g | ps::fuse_lstm).changed);
  CHECK(to_string(g) == printed);
  auto trained = export_program(net, std::tuple{x, h0, c0});
  CHECK_FALSE((trained | ps::fuse_lstm).changed);

  // by name, as a pipeline from a config
  auto named = run_decompositions(export_program(net, std::tuple{x, h0, c0}));
  const auto pipeline = ps::pass_manager::parse("fuse_lstm,dce");
  REQUIRE(pipeline.run(named).ok());
  CHECK(count_op(named, "aten::lstm.input") == 2);
}

// ---- graph policies: basic_graph<Policy> / basic_exported_program<Policy> ----------------------

namespace user {
// What a pipeline-parallel placement pass attaches to each node (torch.fx users keep such data
// in node.meta).
struct placement {
  int stage = -1;
  std::string device;
};
// Counts what the graph asks of it, then forwards to new/delete.
struct counting_resource final : std::pmr::memory_resource {
  std::size_t bytes = 0;
  void* do_allocate(std::size_t n, std::size_t align) override {
    bytes += n;
    return std::pmr::new_delete_resource()->allocate(n, align);
  }
  void do_deallocate(void* p, std::size_t n, std::size_t align) override {
    std::pmr::new_delete_resource()->deallocate(p, n, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};
struct placement_policy {
  using node_meta = placement;
  static counting_resource& resource() {
    static counting_resource r;
    return r;
  }
  static std::pmr::memory_resource* memory_resource() { return &resource(); }
};
using placed_program = basic_exported_program<placement_policy>;

// Puts the first half of the calls on stage 0, the rest on stage 1, through the typed graph.
struct assign_stages {
  static constexpr std::string_view name = "assign_stages";
  ps::pass_result run(exported_program& p) const {
    auto& g = graph_cast<placement_policy>(p.graph_mut());
    std::size_t calls = 0;
    for (auto n : g.nodes()) calls += n.is_call();
    std::size_t i = 0;
    for (auto n : g.nodes()) {
      if (!n.is_call()) continue;
      auto& m = g.meta(n);
      m.stage = 2 * i++ < calls ? 0 : 1;
      m.device = "cpu:" + std::to_string(m.stage);
    }
    return ps::pass_result::modified(calls != 0);
  }
};
}  // namespace user

TEST_CASE("graph policy: typed node metadata from export through passes, lowering, print and run") {
  using user::placement;
  torch::manual_seed(0);
  xport_models::MLP net;
  const auto x = at::randn({2, 16});
  user::placed_program p = export_program(net, std::tuple{x});
  static_assert(std::is_same_v<decltype(p.graph()), const basic_graph<user::placement_policy>&>);
  CHECK(p.graph().policy() == typeid(user::placement_policy));
  const auto plain = export_program(net, std::tuple{x});
  CHECK(to_string(p) == to_string(plain));  // metadata is not part of torch's text

  REQUIRE((p | user::assign_stages{}).ok());
  std::vector<int> stages;
  for (auto n : p.graph().nodes())
    if (n.is_call()) stages.push_back(p.graph().meta(n).stage);
  REQUIRE(stages.size() >= 5);  // 3 linear, 2 relu
  CHECK(std::is_sorted(stages.begin(), stages.end()));
  CHECK(std::count(stages.begin(), stages.end(), 0) == static_cast<std::ptrdiff_t>((stages.size() + 1) / 2));
  CHECK(std::count(stages.begin(), stages.end(), 1) == static_cast<std::ptrdiff_t>(stages.size() / 2));
  CHECK(p.graph().placeholders().front().find_custom_meta<placement>() == nullptr);
  CHECK(to_string(p) == to_string(plain));
  for (const auto& [layout, xi] : xport_test::layouts_of(at::randn({2, 16}))) {
    INFO("layout: " << layout);
    CHECK(at::allclose(run(p, {xi})[0], net->forward(xi), 1e-5, 1e-6));
  }

  // copies and the built-in passes keep it; lowering gives each new node its origin's
  auto q = p.clone();
  CHECK(q.graph().policy() == typeid(user::placement_policy));
  CHECK((q | (ps::dce | ps::cse | ps::fold)).ok());
  user::placed_program low = run_decompositions(p);
  std::size_t placed = 0, calls = 0;
  for (auto n : low.graph().nodes()) {
    if (!n.is_call()) continue;
    ++calls;
    const auto* m = n.find_custom_meta<placement>();
    if (m && m->device == "cpu:" + std::to_string(m->stage)) ++placed;
  }
  CHECK(calls >= 5);  // permute + addmm per linear, relu
  CHECK(placed == calls);
  CHECK(at::allclose(run(low, {x})[0], net->forward(x), 1e-5, 1e-6));

  // assigning through an exported_program& keeps the typed graph
  exported_program& base = q;
  base = run_decompositions(plain);
  CHECK(q.graph().policy() == typeid(user::placement_policy));
  CHECK((q | user::assign_stages{}).ok());
  CHECK(at::allclose(run(q, {x})[0], net->forward(x), 1e-5, 1e-6));

  // the errors: a pass for one policy on another's program, a second metadata type on a node,
  // a moved-from program
  auto other = plain.clone();
  const auto refused = other | user::assign_stages{};  // a pass's error is its result
  CHECK_FALSE(refused.ok());
  CHECK(refused.error.find("this graph was made with policy xport::") != std::string::npos);
  CHECK(refused.error.find("wrap the program first (`basic_exported_program<Policy> p = std::move(program);`)") !=
        std::string::npos);
  XPORT_CHECK_THROWS_MSG(graph_cast<user::placement_policy>(other.graph()), graph_error, "not user::placement_policy");
  const node first_call = *std::find_if(p.graph().nodes().begin(), p.graph().nodes().end(),
                                        [](node n) { return n.is_call(); });
  XPORT_CHECK_THROWS_MSG(first_call.custom_meta<int>(), graph_error, "holds custom metadata of type user::placement, not int");
  CHECK(p.graph().meta(first_call).stage == 0);  // the failed access changed nothing
  user::placed_program moved = std::move(p);
  XPORT_CHECK_THROWS_MSG((void)p.graph(), error, "was moved from and holds no graph");  // NOLINT(bugprone-use-after-move)
  CHECK(moved.graph().meta(first_call).stage == 0);
}

TEST_CASE("graph policy: a policy graph's nodes come from its memory resource, and a dynamic export keeps the metadata") {
  auto& counted = user::placement_policy::resource();
  const auto before = counted.bytes;
  {
    basic_graph<user::placement_policy> g;
    const value a = g.add_placeholder("a", value_type::of(tensor_meta::of(at::ones({2}))));
    g.meta(a.producer()).device = "cpu";
    CHECK(counted.bytes > before);
    auto c = g.clone();
    CHECK(c.meta(c.placeholders().front()).device == "cpu");
    XPORT_CHECK_THROWS_MSG((void)g.meta(c.placeholders().front()), graph_error, "the node is not in this graph");
  }
  // a dynamic batch: lowering runs at several sizes and makes the sizes symbolic again
  torch::manual_seed(0);
  xport_models::MLP net;
  const Dim batch("batch", 1, 64);
  user::placed_program p = export_program(net, std::tuple{at::randn({4, 16})},
                                          {.dynamic_shapes = dynamic_shapes::positional({shape(batch, 16)})});
  REQUIRE((p | user::assign_stages{}).ok());
  user::placed_program low = run_decompositions(p);
  std::size_t calls = 0, placed = 0;
  for (auto n : low.graph().nodes()) {
    if (!n.is_call()) continue;
    ++calls;
    placed += n.find_custom_meta<user::placement>() != nullptr;
  }
  CHECK(placed == calls);
  for (const auto n : {1, 7}) {
    const auto xi = at::randn({n, 16});
    CHECK(at::allclose(run(low, {xi})[0], net->forward(xi), 1e-5, 1e-6));
  }
}
