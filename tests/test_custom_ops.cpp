// Custom operators (tests/custom_ops.hpp's `xport_ops` library, registered from C++ with Meta
// kernels): captured as torch.ops.xport_ops.<op>.<overload> by both tracing policies, printed,
// verified against their schemas, kept by run_decompositions and every pass, run by the
// interpreter and the engine, saved and loaded (tests/test_serde.cpp: the load errors; and
// tests/test_interop.cpp: both ways with torch 2.13), on a real model, GatedBlock.
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>
#include <xport/engine.hpp>

#include "common.hpp"
#include "custom_ops.hpp"

using namespace xport;
namespace ps = xport::passes;
using xport_test::GatedBlock;
namespace custom = xport_test::custom;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

GatedBlock gated_block() {
  torch::manual_seed(0);
  GatedBlock net;
  net->eval();
  return net;
}

/// The inputs a user may pass: contiguous, a transposed view, a slice with a stride.
std::vector<at::Tensor> layouts(std::int64_t b, std::int64_t t) {
  return {at::randn({b, t, 32}), at::randn({t, b, 32}).transpose(0, 1), at::randn({b, 2 * t, 32}).slice(1, 0, 2 * t, 2)};
}

}  // namespace

TEST_CASE("custom ops: GatedBlock exports its operators as torch.ops.xport_ops.* and runs as eager") {
  auto net = gated_block();
  const auto x = at::randn({2, 6, 32});
  auto p = export_program(net, std::tuple{x});
  verify(p);
  const auto text = to_string(p);
  INFO(text);
  CHECK(count(text, "= torch.ops.xport_ops.rms_norm.default(") == 2);
  CHECK(count(text, "= torch.ops.xport_ops.fused_bias_gelu.default(") == 4);
  CHECK(count(text, "= torch.ops.xport_ops.top_k_gate.default(") == 1);
  // a two-output operator is unpacked by getitem, as torch.fx prints it; k = 2 is its default
  CHECK(text.find("top_k_gate = torch.ops.xport_ops.top_k_gate.default(matmul_4);") != std::string::npos);
  CHECK(text.find("getitem: \"f32[2, 6, 2]\" = top_k_gate[0]") != std::string::npos);
  CHECK(text.find("getitem_1: \"i64[2, 6, 2]\" = top_k_gate[1]") != std::string::npos);
  CHECK(text.find("fused_bias_gelu: \"f32[2, 6, 64]\" = torch.ops.xport_ops.fused_bias_gelu.default(matmul_5, p_experts_0_up_bias)") !=
        std::string::npos);
  c10::NoGradGuard no_grad;
  for (const auto& in : layouts(2, 6)) CHECK(at::allclose(run(p, {in})[0], net->forward(in), 1e-5, 1e-6));
}

TEST_CASE("custom ops: dynamic batch and sequence through the operators' Meta kernels") {
  auto net = gated_block();
  const auto x = at::randn({2, 6, 32});
  auto p = export_program(net, std::tuple{x}, {.dynamic_shapes = {{"x", {{0, Dim("batch", 1, 16)}, {1, Dim("seq", 2, 64)}}}}});
  verify(p);
  const auto text = to_string(p);
  INFO(text);
  CHECK(text.find("rms_norm: \"f32[s77, s27, 32]\" = torch.ops.xport_ops.rms_norm.default(x, p_norm1)") != std::string::npos);
  CHECK(text.find("getitem_1: \"i64[s77, s27, 2]\" = top_k_gate[1]") != std::string::npos);
  c10::NoGradGuard no_grad;
  for (auto [b, t] : {std::pair{1, 2}, std::pair{5, 9}, std::pair{16, 64}})
    for (const auto& in : layouts(b, t)) CHECK(at::allclose(run(p, {in})[0], net->forward(in), 1e-5, 1e-6));
  XPORT_CHECK_THROWS_MSG(run(p, {at::randn({2, 1, 32})}), guard_error, "input x: dim 1 (seq) must be in [2, 64], got 1");
}

TEST_CASE("custom ops: kept by run_decompositions and by every pass, run by the engine") {
  auto net = gated_block();
  const auto x = at::randn({3, 5, 32});
  auto p = export_program(net, std::tuple{x});
  auto core = run_decompositions(p);
  verify(core);
  const auto text = to_string(core);
  INFO(text);
  CHECK(count(text, "torch.ops.xport_ops.rms_norm.default(") == 2);
  CHECK(count(text, "torch.ops.xport_ops.fused_bias_gelu.default(") == 4);
  CHECK(text.find("torch.ops.aten.linear.default") == std::string::npos);  // the rest is core ATen
  auto r = core | (ps::dce | ps::cse | ps::fold | ps::canonicalize);
  CHECK(r.ok());
  verify(core);
  CHECK(count(to_string(core), "torch.ops.xport_ops.") == 2 + 4 + 1);
  c10::NoGradGuard no_grad;
  const auto want = net->forward(x);
  CHECK(at::allclose(run(core, {x})[0], want, 1e-5, 1e-6));
  for (std::size_t threads : {1, 3}) {
    engine_options o;
    o.threads = threads;
    engine e(core, o);
    for (const auto& in : layouts(3, 5)) CHECK(at::allclose(e.run({in})[0], net->forward(in), 1e-5, 1e-6));
  }
}

TEST_CASE("custom ops that write their arguments: the training IR calls them, lowering makes auto_functionalized_v2") {
  using xport_test::CacheWriter;
  CacheWriter traced;
  const auto x = at::randn({2, 2, 4});
  const auto pos = at::tensor({1, 4}, at::kLong);
  const auto p = export_program(traced, std::tuple{x, pos});
  CHECK(count(to_string(p), "torch.ops.xport_ops.scale_add_.default(") == 2);
  const auto calls = [](std::int64_t k) {
    torch::manual_seed(k);
    return std::pair{at::randn({2, 2, 4}), at::tensor({k % 6, (k + 3) % 6}, at::kLong)};
  };
  // every form of the program runs as eager, its buffers written as eager's, three calls in a row
  // (the programs share their state tensors: each check starts them at zero, as eager's)
  const auto check_runs = [&](const exported_program& q, const std::string& what, bool by_engine = false) {
    CAPTURE(what);
    CAPTURE(by_engine);
    CacheWriter eager;
    for (const auto& [name, t] : q.state_dict()) t.zero_();
    std::optional<engine> e;
    if (by_engine) e.emplace(q);
    for (std::int64_t k = 0; k < 3; ++k) {
      const auto [xi, pi] = calls(k);
      const auto got = by_engine ? e->run({xi, pi}) : run(q, {xi, pi});
      CHECK(at::allclose(got[0], eager->forward(xi, pi)));
      for (const auto& b : eager->named_buffers()) CHECK(at::allclose(q.state_dict().at(b.key()), b.value()));
    }
  };
  check_runs(p, "training IR");
#if !XPORT_TEST_TORCH_FUNCTIONALIZATION
  // LibTorch 1.13 has no functionalization of its own to lower the call with: a typed refusal
  XPORT_CHECK_THROWS_MSG(run_decompositions(p), xport::error, "is lowered only with LibTorch's functionalization");
  return;
#endif
  for (const bool decompose : {true, false}) {
    const auto q = decompose ? run_decompositions(p) : functionalize(p);
    verify(q);
    const auto text = to_string(q);
    INFO(text);
    CHECK(count(text, "torch.ops.higher_order.auto_functionalized_v2(torch.ops.xport_ops.") == 4);
    CHECK(text.find("torch.ops.xport_ops.kv_write_.default, pos = args_1, update = args_0, _cache_base_index = 0, "
                    "_all_bases = [b_cache])") != std::string::npos);
    for (auto n : q.graph().nodes()) CHECK_FALSE((n.is_call() && n.op().is_mutable));
    check_runs(q, decompose ? "run_decompositions" : "functionalize");
    const auto r = xport_test::reload(q);
    std::string loaded;  // a loaded program names the None results getitems read (as torch's loader does)
    std::istringstream lines(to_string(r));
    for (std::string line; std::getline(lines, line);)
      if (line.find("as_none") == std::string::npos) loaded += line + "\n";
    CHECK(loaded == text);
    CHECK(count(to_string(r), "= torch.ops.higher_order.auto_functionalized_v2(") == 4);
    CHECK(to_string(xport_test::reload(r)) == to_string(r));
    check_runs(r, "saved and loaded");
    check_runs(q, "the engine", true);
  }
}

TEST_CASE("custom ops that write their arguments: a call naming an unknown operator is refused") {
  xport_test::load_custom_ops();
  program_builder b;
  auto buf = b.buffer("buf", at::zeros({3}));
  auto x = b.input("x", at::randn({3}));
  using L = argument::list_type;
  const auto kw = [&](const std::string& op) {
    return std::vector<argument>{op, L{L{"x", x}, L{"s", 0.5}, L{"_buf_base_index", 0}, L{"_all_bases", L{buf}}}};
  };
  const auto& hop = find_op("higher_order::auto_functionalized_v2");
  const auto call = b.call_bound(hop, kw("xport_ops::scale_add_"));
  CHECK(call.num_outputs() == 2);
  CHECK(call.output(0).kind() == value_kind::none);
  XPORT_CHECK_THROWS_MSG(b.call_bound(hop, kw("xport_ops::no_such_op")), xport::error,
                         "auto_functionalized_v2 calls xport_ops::no_such_op, which is not registered");
  b.output(call.output(1));
  const auto p = std::move(b).build();
  const auto text = to_string(p);
  CHECK(text.find("torch.ops.higher_order.auto_functionalized_v2(torch.ops.xport_ops.scale_add_.default, x = x, s = 0.5, "
                  "_buf_base_index = 0, _all_bases = [b_buf])") != std::string::npos);
}

namespace {
/// Scratch tensors a mutating op writes: an intermediate (twice), then a view of it.
struct ScratchWriterImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) {
    auto h = x * 2;
    custom::scale_add_(h, x, 0.5);
    custom::scale_add_(h, x.cos(), -1.5);
    auto part = h.slice(1, 0, 2);
    custom::scale_add_(part, x.slice(1, 0, 2), 3.0);
    return h + 1;
  }
};
TORCH_MODULE(ScratchWriter);
}  // namespace

TEST_CASE("custom ops that write their arguments: the engine writes a base nothing reads after the call in place") {
  xport_test::load_custom_ops();
  c10::NoGradGuard no_grad;
  // a base something reads after the call (a later op, an output) or that the call reads too is
  // cloned, as the interpreter clones it: the results say so (written in place, the first
  // program's `add` would read m * 0.5 + x, the second's output m would be that, the third would give m)
  using L = argument::list_type;
  const auto& hop = find_op("higher_order::auto_functionalized_v2");
  const auto program = [&](int variant) {
    program_builder b;
    auto x = b.input("x", at::randn({4, 3}));
    auto m = b.call("aten::mul.Tensor", {x, x});
    const auto read = variant == 2 ? m : x;
    const auto call = b.call_bound(hop, {"xport_ops::scale_add_", L{L{"x", read}, L{"s", 0.5}, L{"_buf_base_index", 0}, L{"_all_bases", L{m}}}});
    b.output(call.output(1));
    if (variant == 0) b.output(b.call("aten::add.Tensor", {m, 1}));
    if (variant == 1) b.output(m);
    return std::move(b).build();
  };
  for (int variant : {0, 1, 2}) {
    CAPTURE(variant);
    const auto p = program(variant);
    for (std::size_t threads : {1, 3}) {
      engine_options o;
      o.threads = threads;
      engine e(p, o);
      for (const auto& t : {at::randn({4, 3}), at::randn({3, 4}).t()}) {
        const auto sq = t * t;
        for (int k = 0; k < 2; ++k) {  // the plan's first run, then a planned run
          const auto got = e.run({t});
          CHECK(at::allclose(got[0], variant == 2 ? sq * 1.5 : sq * 0.5 + t));
          if (variant == 0) CHECK(at::allclose(got[1], sq + 1));
          if (variant == 1) CHECK(at::allclose(got[1], sq));
        }
      }
      CHECK(e.plan_info({at::randn({4, 3})}).in_place_bases == 0);
    }
  }
  // the same call on a base nothing else reads: written in place, the same results
  {
    program_builder b;
    auto x = b.input("x", at::randn({4, 3}));
    auto m = b.call("aten::mul.Tensor", {x, x});
    const auto call = b.call_bound(hop, {"xport_ops::scale_add_", L{L{"x", x}, L{"s", 0.5}, L{"_buf_base_index", 0}, L{"_all_bases", L{m}}}});
    b.output(call.output(1));
    const auto p = std::move(b).build();
    engine e(p);
    const auto t = at::randn({4, 3});
    for (int k = 0; k < 2; ++k) CHECK(at::allclose(e.run({t})[0], t * t * 0.5 + t));
    CHECK(e.plan_info({t}).in_place_bases == 1);
  }
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
  // an intermediate dead once each call starts: written in place, twice (the slice's base is
  // read after its call, by torch's slice_scatter: cloned)
  ScratchWriter net;
  const auto q = run_decompositions(export_program(net, std::tuple{at::randn({2, 6, 32})}));
  INFO(to_string(q));
  for (std::size_t threads : {1, 3}) {
    engine_options o;
    o.threads = threads;
    engine e(q, o);
    for (int k = 0; k < 2; ++k)
      for (const auto& in : layouts(2, 6)) {
        CHECK(at::allclose(e.run({in})[0], net->forward(in)));
        CHECK(at::allclose(e.run({in})[0], run(q, {in})[0]));
      }
    CHECK(e.plan_info({at::randn({2, 6, 32})}).in_place_bases == 2);
  }
#endif
}

TEST_CASE("custom ops: the training IR keeps them, with autograd through the parameters around them") {
  auto net = gated_block();
  net->train(true);
  const auto x = at::randn({2, 4, 32});
  auto p = export_program(net, std::tuple{x});
  verify(p);
  CHECK(count(to_string(p), "torch.ops.xport_ops.") == 2 + 4 + 1);
  const auto out = run(p, {x})[0];
  CHECK(at::allclose(out, net->forward(x), 1e-5, 1e-6));
  // the router and the attention are ATen ops: their parameters get gradients through the program
  out.sum().backward();
  const auto* qkv = p.state_dict().find("qkv.weight");
  REQUIRE(qkv != nullptr);
  CHECK(qkv->grad().defined());
}

TEST_CASE("custom ops: the strict front end calls them by name, with the C++ line") {
  xport_test::load_custom_ops();
  const auto x = at::randn({4, 8}), w = at::randn({8}), bias = at::randn({8});
  auto p = export_program<strict>([](sym_tensor a, sym_tensor weight, sym_tensor b) {
    auto h = a.wrap(call("xport_ops::rms_norm", a, {a, weight, 1e-5}));
    return a.wrap(call("xport_ops::fused_bias_gelu", a, {h, b}));
  }, std::tuple{x, w, bias}, {.input_names = {"x", "w", "b"}});
  verify(p);
  const auto text = to_string(p);
  INFO(text);
  CHECK(text.find("rms_norm: \"f32[4, 8]\" = torch.ops.xport_ops.rms_norm.default(x, w, 1e-05);  x = w = None") !=
        std::string::npos);
  CHECK(text.find("in forward, code: auto h = a.wrap(call(\"xport_ops::rms_norm\", a, {a, weight, 1e-5}));") != std::string::npos);
  CHECK(at::allclose(run(p, {x, w, bias})[0], custom::fused_bias_gelu(custom::rms_norm(x, w, 1e-5), bias)));
}

TEST_CASE("custom ops: calls are checked against the operator's schema") {
  xport_test::load_custom_ops();
  program_builder b;
  auto x = b.input("x", at::randn({4, 8}));
  auto w = b.input("w", at::randn({8}));
  XPORT_CHECK_THROWS_MSG(b.call("xport_ops::rms_norm", {x, w, "eps"}), schema_error,
                         "xport_ops::rms_norm: argument 'eps' (position 2) must be float, got ");
  XPORT_CHECK_THROWS_MSG(b.call("xport_ops::top_k_gate", {x, 2, 3}), schema_error, "xport_ops::top_k_gate");
  // the Meta kernel's own checks refuse shapes, before anything runs
  XPORT_CHECK_THROWS_MSG(b.call("xport_ops::top_k_gate", {x, 9}), graph_error,
                         "xport_ops::top_k_gate: k = 9 is not in [1, 8]");
  auto y = b.call("xport_ops::rms_norm", {x, w});  // the default eps
  b.output(y);
  auto p = std::move(b).build();
  verify(p);
  CHECK(to_string(p).find("torch.ops.xport_ops.rms_norm.default(x, w)") != std::string::npos);
}

TEST_CASE("custom ops: an operator without a Meta kernel is an export error that shows the registration") {
  xport_test::load_custom_ops();
  XPORT_CHECK_THROWS_MSG(export_program([](const at::Tensor& t) { return custom::cpu_only_scale(t, 2.0).relu(); },
                                        std::tuple{at::randn({3})}),
                         missing_fake_kernel,
                         "[xport.fake.missing_kernel] xport_ops::cpu_only_scale has no meta (fake) kernel in LibTorch ");
  XPORT_CHECK_THROWS_MSG(export_program([](const at::Tensor& t) { return custom::cpu_only_scale(t, 2.0); },
                                        std::tuple{at::randn({3})}),
                         missing_fake_kernel,
                         "Fix: register a Meta kernel next to its other kernels, one that makes outputs of the right "
                         "sizes and dtypes without reading data:\n"
                         "  TORCH_LIBRARY_IMPL(xport_ops, Meta, m) { m.impl(\"cpu_only_scale\", cpu_only_scale_meta); }\n"
                         "where cpu_only_scale_meta takes the op's arguments (xport_ops::cpu_only_scale(Tensor x, float s) -> Tensor)");
  // eager still works afterwards
  CHECK(at::allclose(custom::cpu_only_scale(at::ones({2}), 2.0), at::full({2}, 2.0)));
}

TEST_CASE("custom ops: CUDA kernels run by dispatch" * doctest::skip(!at::hasCUDA())) {
  auto net = gated_block();
  const auto x = at::randn({2, 6, 32});
  auto p = export_program(net, std::tuple{x});
  const auto want = net->forward(x);
  p.to(c10::Device(c10::kCUDA));
  c10::NoGradGuard no_grad;
  const auto got = run(p, {x.cuda()})[0];
  CHECK(got.is_cuda());
  CHECK(at::allclose(got.cpu(), want, 1e-4, 1e-5));
}
