// The functional IR: functionalize() and run_decompositions() with decomposition tables.
#include <torch/torch.h>

#include "common.hpp"

#include <map>

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

namespace {

// A static cache's counters, as transformers updates them: buffers written through what returns
// them (`to` that converts nothing, `contiguous()`, a viewing `reshape`), and one `to` that
// converts, whose write never reaches its buffer.
struct ThroughToImpl : torch::nn::Module {
  at::Tensor n, m, k, c;
  ThroughToImpl()
      : n(register_buffer("n", at::zeros({}, at::kLong))),
        m(register_buffer("m", at::zeros({2, 3}))),
        k(register_buffer("k", at::zeros({4}, at::kInt))),
        c(register_buffer("c", at::zeros({6}))) {}
  std::vector<at::Tensor> forward(const at::Tensor& x) {
    auto t = n.to(at::kCPU, at::kLong);
    t.add_(1);
    m.to(at::kFloat).add_(x.slice(0, 0, 2).slice(1, 0, 3));
    m.contiguous().mul_(2);
    auto u = k.to(at::kLong);
    u.add_(5);
    c.view({2, 3}).reshape({3, 2}).add_(1);
    return {x + t, u};
  }
};
TORCH_MODULE(ThroughTo);

// What a real call of node `n`'s op gives for its first argument `x` (`held`: what each value
// of the call holds): that tensor itself, a view of it, or a copy.
template <class Held>
returns real_aliasing(const node& n, const at::Tensor& x, Held&& held) {
  torch::jit::Stack stack;
  xport::detail::call_node(n, [&](const value& v) -> c10::IValue { return held(v); }, stack);
  const auto r = stack.at(0).toTensor();
  return r.is_same(x) ? returns::input : r.is_alias_of(x) ? returns::view : returns::copy;
}

}  // namespace

TEST_CASE("aliasing: each rule says what LibTorch's kernel returns, for inputs in every layout") {
  const auto base = at::randn({2, 3, 4, 5});
  const std::vector<std::pair<std::string, at::Tensor>> inputs{
      {"contiguous", base},
      {"transposed", base.transpose(1, 3)},
      {"channels_last", base.contiguous(at::MemoryFormat::ChannelsLast)},
      {"sliced", base.slice(2, 0, 4, 2)},
      {"size-1 dims", at::randn({1, 3, 1, 5}).permute({2, 1, 0, 3})},
      {"int64", base.to(at::kLong)},
  };
  const auto cpu = c10::Device(c10::kCPU);
  std::size_t checked = 0;
  std::map<returns, std::size_t> seen;
  for (const auto& [layout, x] : inputs) {
    CAPTURE(layout);
    program_builder b;
    const auto in = b.input("x", x);
    const auto other_t = at::randn({2, 3}, at::kDouble), same_t = at::zeros({2}, x.scalar_type());
    const auto other = b.input("other", other_t), same = b.input("same", same_t);
    const auto held = [&](const value& v) { return v == in ? x : v == other ? other_t : same_t; };
    const auto dtype = x.scalar_type();
    struct call {
      std::string op;
      std::vector<argument> args;
      std::vector<kwarg> kwargs = {};
    };
    std::vector<call> calls{
        {"aten::to.device", {in, cpu, at::kFloat}},
        {"aten::to.device", {in, cpu, at::kLong}},
        {"aten::to.device", {in, cpu, dtype, false, true}},
        {"aten::to.device", {in, cpu, dtype}, {{"memory_format", at::MemoryFormat::ChannelsLast}}},
        {"aten::to.device", {in, cpu, dtype}, {{"memory_format", at::MemoryFormat::Contiguous}}},
        {"aten::to.dtype", {in, at::kFloat}},
        {"aten::to.dtype", {in, at::kDouble}},
        {"aten::to.dtype_layout", {in}, {{"dtype", dtype}, {"device", cpu}}},
        {"aten::to.dtype_layout", {in}, {{"device", cpu}, {"copy", true}}},
        {"aten::to.other", {in, other}},
        {"aten::to.other", {in, same}},
        {"aten::type_as", {in, other}},
        {"aten::type_as", {in, same}},
        {"aten::contiguous", {in}},
        {"aten::contiguous", {in}, {{"memory_format", at::MemoryFormat::ChannelsLast}}},
        {"aten::reshape", {in, std::vector<std::int64_t>{-1}}},
        {"aten::reshape", {in, std::vector<std::int64_t>{x.size(0), -1}}},
        {"aten::reshape", {in, x.sizes().vec()}},
        {"aten::flatten.using_ints", {in, 1, 2}},
        {"aten::flatten.using_ints", {in, 2, 2}},
        {"aten::flatten.using_ints", {in}},
        {"aten::atleast_3d", {in}},
        {"aten::lift_fresh", {in}},
        {"aten::clone", {in}},
        {"aten::_to_copy", {in}},
    };
    if (x.is_floating_point())
      for (const auto& [p, train] : {std::pair{0.5, false}, {0.0, true}, {0.5, true}})
        calls.push_back({"aten::dropout", {in, p, train}});
    for (const auto& c : calls) {
      CAPTURE(c.op);
      const node n = b.call(c.op, c.args, c.kwargs);
      const auto rule = result_aliasing(n);
      REQUIRE(rule.has_value());
      CHECK(*rule == real_aliasing(n, x, held));
      ++seen[*rule];
      ++checked;
    }
  }
  CHECK(checked >= 150);
  CHECK(seen[returns::input] >= 40);  // each answer is exercised
  CHECK(seen[returns::view] >= 15);
  CHECK(seen[returns::copy] >= 40);
  // an op whose schema says what it returns has no rule here
  program_builder b;
  CHECK_FALSE(result_aliasing(b.call("aten::sin", {b.input("x", at::randn({3}))})).has_value());
}

TEST_CASE("functionalize and run_decompositions: buffers written through `to` and `contiguous` count as eager's") {
  ThroughTo traced;
  const auto p = export_program(traced, std::tuple{at::randn({3, 4})});
  for (const bool decompose : {false, true}) {
    CAPTURE(decompose);
    ThroughTo eager;
    auto q = decompose ? run_decompositions(p) : functionalize(p);
    verify(q);
    for (auto n : q.graph().nodes()) CHECK_FALSE((n.is_call() && n.op().is_mutable));
    std::vector<std::string> mutated;  // n, m and c; never k (its `to` converts)
    for (const auto& o : q.signature().output_specs)
      if (o.kind == output_kind::buffer_mutation) mutated.push_back(*o.target);
    CHECK((mutated == std::vector<std::string>{"n", "m", "c"}));
    for (const auto& [name, t] : q.state_dict()) t.zero_();
    for (int call = 1; call <= 3; ++call) {
      const auto x = at::randn({3, 4});
      const auto want = eager->forward(x);
      const auto got = run(q, {x});
      CHECK(at::equal(got[0], want[0]));
      CHECK(at::equal(got[1], want[1]));
      for (const auto& b : eager->named_buffers()) {
        CAPTURE(b.key());
        CHECK(at::equal(q.state_dict().at(b.key()), b.value()));
      }
    }
    CHECK(q.state_dict().at("n").item<std::int64_t>() == 3);
  }
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
#if XPORT_TEST_TORCH_FUNCTIONALIZATION
    CHECK(has_op(q, "aten::clamp"));  // clamp_min is not core: lowered further, as torch lowers it
#else
    CHECK(has_op(q, "aten::clamp_min"));  // LibTorch 1.13: xport's carried core set, no Python decomposition ported
#endif
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
