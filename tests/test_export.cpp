// export_program: callables and modules, inputs and outputs of every supported structure, the
// strict front end, lifted state and constants, and every limit reported as a typed error.
#include <map>
#include <optional>

#include <torch/library.h>
#include <torch/torch.h>

#include "models.hpp"

#include "common.hpp"

using namespace xport;

namespace {

// The body lines of a program's forward (`name: "ann" = target(args)`), without comments,
// blank lines and last-use lists: what two captures of the same computation must share.
std::vector<std::string> body_lines(const exported_program& p) {
  std::vector<std::string> out;
  std::istringstream in(to_string(p.graph()));
  for (std::string l; std::getline(in, l);) {
    const auto b = l.find_first_not_of(' ');
    if (b == std::string::npos || l[b] == '#' || l.compare(b, 4, "def ") == 0 || l.compare(b, 6, "class ") == 0) continue;
    l = l.substr(b);
    if (auto d = l.find(";  "); d != std::string::npos) l.resize(d);
    out.push_back(l);
  }
  return out;
}

// An op with a CPU kernel only: export cannot learn its output shape.
at::Tensor cpu_only(const at::Tensor& x) { return x.clone(); }
TORCH_LIBRARY(xport_export_test, m) { m.def("cpu_only(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(xport_export_test, CPU, m) { m.impl("cpu_only", cpu_only); }

template <class T>
T seed_forward(const T& x, const T& y) {
  auto a = sin(x);
  auto b = cos(y);
  return a + b;
}

template <class T>
T block(const T& x, const T& w, const T& b) {
  auto h = linear(x, w, b);  // NOLINT
  h = relu(h);
  auto s = softmax(h, 1);
  return h * s + h.transpose(0, 1).transpose(0, 1).mean({0}, true);
}

}  // namespace

TEST_CASE("export: registered aggregates are inputs and outputs, flattened as torch flattens dataclasses") {
  using xport_models::attend, xport_models::attn_in, xport_models::attn_out;
  const attn_in example{at::randn({2, 5}), at::ones({2, 5})};
  auto p = export_program(attend, std::tuple{example});
  verify(p);
  std::vector<std::string> names;
  for (auto n : p.graph().placeholders()) names.push_back(n.name());
  CHECK((names == std::vector<std::string>{"x_x", "x_mask"}));  // torch's names for fields x.x, x.mask
  CHECK(p.in_spec()->str() == "(AttnIn(x=*, mask=*),)");
  CHECK(p.out_spec()->str() == "AttnOut(hidden=*, extras=[*, *])");
  CHECK(p.out_spec()->type_name == "xport_tests.AttnOut");
  CHECK(p.out_spec()->context == R"([["hidden", "extras"], ["weights"]])");  // json.dumps of torch's context
  const attn_in in{at::randn({2, 5}), (at::rand({2, 5}) > 0.5).to(at::kFloat)};
  const auto want = attend(in);
  SUBCASE("bound to the C++ type, by field name") {
    callable<attn_out(attn_in)> f(p);
    const auto got = f(in);
    CHECK(at::allclose(got.hidden, want.hidden));
    CHECK(!got.weights.has_value());
    REQUIRE(got.extras.size() == 2);
    CHECK(at::allclose(got.extras[1], want.extras[1]));
  }
  SUBCASE("as a tree_value, field by name") {
    callable<tree_value(attn_in)> f(p);
    const auto got = f(in);
    CHECK(got.type_name() == "xport_tests.AttnOut");
    CHECK((got.keys() == std::vector<std::string>{"hidden", "extras"}));
    CHECK(got.contains("hidden"));
    CHECK(!got.contains("weights"));
    CHECK(at::allclose(got["hidden"].tensor(), want.hidden));
    CHECK(at::allclose(got["extras"][0].tensor(), want.extras[0]));
    CHECK(got.leaves().size() == 3);
    XPORT_CHECK_THROWS_MSG(got["weights"], error, "[xport.tree.field] no field 'weights' in AttnOut(hidden=*, extras=[*, *]) (it has 'hidden', 'extras')");
    XPORT_CHECK_THROWS_MSG(got["extras"][2], error, "[xport.tree.index] index 2 is out of range for [*, *] (2 children)");
    XPORT_CHECK_THROWS_MSG(got["extras"].tensor(), error, "[xport.tree.not_a_tensor] [*, *] is not a tensor");
  }
  SUBCASE("as a map of its fields, or a tuple of its children") {
    using map_t = std::map<std::string, tree_value>;
    const auto m = callable<map_t(attn_in)>(p)(in);
    CHECK(m.size() == 2);
    CHECK(at::allclose(m.at("hidden").tensor(), want.hidden));
    const auto [h, extras] = callable<std::tuple<at::Tensor, std::vector<at::Tensor>>(attn_in)>(p)(in);
    CHECK(at::allclose(h, want.hidden));
    CHECK(extras.size() == 2);
  }
  SUBCASE("a field None at export must be None at every call, as in torch") {
    callable<attn_out(attn_in)> f(p);
    attn_in no_mask{in.x, at::Tensor()};
    XPORT_CHECK_THROWS_MSG(f(no_mask), guard_error,
                           "[xport.guard.structure] the inputs have structure (AttnIn(x=*),) but the program was "
                           "exported with (AttnIn(x=*, mask=*),)");
  }
  SUBCASE("saved and loaded, the type name and context are kept") {
    const auto q = xport_test::reload(p);
    CHECK((q.in_spec() == p.in_spec()));
    CHECK((q.out_spec() == p.out_spec()));
    const auto got = callable<attn_out(attn_in)>(q)(in);
    CHECK(at::allclose(got.hidden, want.hidden));
  }
}

TEST_CASE("export: a C++ lambda over tensors") {
  const auto x = at::randn({10, 10}), y = at::randn({10, 10});
  auto p = export_program([](const at::Tensor& a, const at::Tensor& b) { return seed_forward(a, b); },
                          std::tuple{x, y}, {.input_names = {"x", "y"}});
  verify(p);
  CHECK((body_lines(p) == std::vector<std::string>{
             "sin: \"f32[10, 10]\" = torch.ops.aten.sin.default(x)",
             "cos: \"f32[10, 10]\" = torch.ops.aten.cos.default(y)",
             "add: \"f32[10, 10]\" = torch.ops.aten.add.Tensor(sin, cos)", "return (add,)"}));
  CHECK(at::allclose(run(p, {x, y})[0], at::sin(x) + at::cos(y)));
  callable<at::Tensor(at::Tensor, at::Tensor)> f(p);
  const auto x2 = at::randn({10, 10}), y2 = at::randn({10, 10});
  CHECK(at::allclose(f(x2, y2), at::sin(x2) + at::cos(y2)));
  CHECK(p.dialect() == ir_dialect::training);
}

TEST_CASE("export: strict and non-strict give the same IR") {
  const auto x = at::randn({4, 6}), w = at::randn({5, 6}), b = at::randn({5});
  auto ns = export_program([](const at::Tensor& a, const at::Tensor& c, const at::Tensor& d) {
    using namespace at;
    return block(a, c, d);
  }, std::tuple{x, w, b}, {.input_names = {"x", "w", "b"}});
  auto st = export_program<strict>([](auto a, auto c, auto d) { return block(a, c, d); }, std::tuple{x, w, b},
                                   {.input_names = {"x", "w", "b"}});
  verify(ns);
  verify(st);
  CHECK(body_lines(ns) == body_lines(st));
  CHECK(body_lines(ns).size() == 9);  // linear relu softmax transpose transpose mean mul add return
  const auto want = block(x, w, b);
  CHECK(at::allclose(run(ns, {x, w, b})[0], want));
  CHECK(at::allclose(run(st, {x, w, b})[0], want));
}

TEST_CASE("export: strict records the C++ line of every node") {
  const auto x = at::randn({3}), y = at::randn({3});
  auto p = export_program<strict>([](sym_tensor a, sym_tensor b) {
    auto s = sin(a);  // line L
    return s * b;     // line L+1
  }, std::tuple{x, y}, {.input_names = {"x", "y"}});
  const int line = __LINE__ - 3;
  const auto text = to_string(p);
  const std::string file = __FILE__;
  INFO(text);
  CHECK(text.find("# File: " + file + ":" + std::to_string(line) +
                  " in forward, code: auto s = sin(a);  // line L\n"
                  "            sin: \"f32[3]\" = torch.ops.aten.sin.default(x);  x = None") != std::string::npos);
  CHECK(text.find("# File: " + file + ":" + std::to_string(line + 1) + " in forward, code: return s * b;") !=
        std::string::npos);
  for (auto n : p.graph().nodes())
    if (n.is_call()) CHECK(n.source() != nullptr);
}

TEST_CASE("export: the leaves of a tuple or pair argument reach the traced code in order") {
  // same shapes: a swap would go unnoticed by every shape check
  auto fn = [](const std::pair<at::Tensor, at::Tensor>& p, const std::tuple<at::Tensor, at::Tensor, at::Tensor>& t) {
    return p.first * 2 - p.second + std::get<0>(t) * 3 - std::get<2>(t) * std::get<1>(t);
  };
  const auto make = [] { return at::randn({2, 3}); };
  const std::pair<at::Tensor, at::Tensor> pa{make(), make()};
  const std::tuple<at::Tensor, at::Tensor, at::Tensor> tu{make(), make(), make()};
  const auto p = export_program(fn, std::tuple{pa, tu}, {.input_names = {"p", "t"}});
  CHECK(at::allclose(run(p, {pa.first, pa.second, std::get<0>(tu), std::get<1>(tu), std::get<2>(tu)})[0], fn(pa, tu)));
}

TEST_CASE("export: nested inputs and outputs keep their C++ structure") {
  using in_t = std::tuple<at::Tensor, std::vector<at::Tensor>, std::map<std::string, at::Tensor>,
                          std::optional<at::Tensor>, std::optional<at::Tensor>, std::int64_t, double, bool>;
  const auto a = at::randn({2}), b0 = at::randn({2}), b1 = at::randn({2}), m = at::randn({2}), o = at::randn({2});
  auto fn = [](const at::Tensor& x, const std::vector<at::Tensor>& xs, const std::map<std::string, at::Tensor>& d,
               const std::optional<at::Tensor>& opt, const std::optional<at::Tensor>& missing, std::int64_t k,
               double scale, bool flag) {
    auto s = x + xs[0] * xs[1];
    if (opt) s = s + *opt;
    if (!missing && flag) s = s * scale;
    return std::make_tuple(s * k, std::vector<at::Tensor>{d.at("Mask-A"), s}, std::string("tag"), k + 1);
  };
  const in_t args{a, {b0, b1}, {{"Mask-A", m}}, o, std::nullopt, 3, 0.5, true};
  auto p = export_program(fn, args, {.input_names = {"x", "xs", "d", "opt", "missing", "k", "scale", "flag"}});
  verify(p);
  std::vector<std::string> names;
  for (auto n : p.graph().placeholders()) names.push_back(n.name());
  // a placeholder per leaf, specialized constants too (as torch.export has them)
  CHECK((names == std::vector<std::string>{"x", "xs_0", "xs_1", "d_mask_a", "opt", "k", "scale", "flag"}));
  CHECK(p.in_spec()->str() == "(*, [*, *], {'Mask-A': *}, *, None, 3, 0.5, True)");
  CHECK(p.out_spec()->str() == "(*, [*, *], 'tag', 4)");
  using out_t = std::tuple<at::Tensor, std::vector<at::Tensor>, std::string, std::int64_t>;
  callable<out_t(at::Tensor, std::vector<at::Tensor>, std::map<std::string, at::Tensor>, std::optional<at::Tensor>,
                 std::optional<at::Tensor>, std::int64_t, double, bool)>
      f(p);
  const auto a2 = at::randn({2}), c0 = at::randn({2}), c1 = at::randn({2}), m2 = at::randn({2}), o2 = at::randn({2});
  auto [t, v, s, n] = f(a2, {c0, c1}, {{"Mask-A", m2}}, o2, std::nullopt, 3, 0.5, true);
  auto [et, ev, es, en] = fn(a2, {c0, c1}, {{"Mask-A", m2}}, o2, std::nullopt, 3, 0.5, true);
  CHECK(at::allclose(t, et));
  REQUIRE(v.size() == 2);
  CHECK(at::allclose(v[0], ev[0]));
  CHECK(at::allclose(v[1], ev[1]));
  CHECK(s == "tag");
  CHECK(n == 4);
  // a specialized constant is checked on every call
  CHECK_THROWS_WITH_AS(f(a2, {c0, c1}, {{"Mask-A", m2}}, o2, std::nullopt, 4, 0.5, true),
                       "[xport.guard.structure] the inputs have structure (*, [*, *], {'Mask-A': *}, *, None, "
                       "4, 0.5, True) but the program was exported with (*, [*, *], {'Mask-A': *}, *, None, 3, "
                       "0.5, True) (containers, None and specialized constants must match)",
                       guard_error);
}

TEST_CASE("export: c10::Dict inputs and default input names") {
  c10::Dict<std::string, at::Tensor> d;
  d.insert("b", at::randn({3}));
  d.insert("a", at::randn({3}));
  auto p = export_program([](const c10::Dict<std::string, at::Tensor>& m) { return m.at("a") - m.at("b"); },
                          std::tuple{d});
  std::vector<std::string> names;
  for (auto n : p.graph().placeholders()) names.push_back(n.name());
  CHECK((names == std::vector<std::string>{"x_b", "x_a"}));  // insertion order, as Python dicts
  auto q = export_program([](const at::Tensor& a, const at::Tensor& b) { return a * b; },
                          std::tuple{at::randn({2}), at::randn({2})});
  CHECK(q.graph().placeholders()[0].name() == "args_0");
  CHECK(q.graph().placeholders()[1].name() == "args_1");
}

TEST_CASE("export: a torch::nn module leaves its parameters and buffers exactly as they were") {
  torch::manual_seed(0);
  auto bn = torch::nn::BatchNorm1d(4);
  auto lin = torch::nn::Linear(8, 4);
  auto net = torch::nn::Sequential(lin, bn, torch::nn::ReLU());
  net->train();
  std::vector<at::Tensor> before;
  for (const auto& t : net->parameters()) before.push_back(t.clone());
  for (const auto& t : net->buffers()) before.push_back(t.clone());
  auto p = export_program(net, std::tuple{at::randn({3, 8})});
  std::size_t i = 0;
  for (const auto& t : net->parameters()) CHECK(at::equal(t, before[i++]));
  for (const auto& t : net->buffers()) CHECK(at::equal(t, before[i++]));
  CHECK(bn->num_batches_tracked.item<std::int64_t>() == 0);
  verify(p);
  const auto text = to_string(p);
  CHECK(text.find("add_: \"i64[]\" = torch.ops.aten.add_.Tensor(b_1_num_batches_tracked, 1)") != std::string::npos);
  CHECK(text.find("p_0_weight: PARAMETER target='0.weight'") != std::string::npos);
  CHECK(text.find("b_1_running_mean: BUFFER target='1.running_mean' persistent=True") != std::string::npos);
}

TEST_CASE("export: no real computation runs during export") {
  // 100k x 100k is 40 GB of floats: only shapes can flow through this.
  const auto huge = at::empty({100000, 100000}, at::device(c10::kMeta));
  auto p = export_program([](const at::Tensor& x) { return at::matmul(x, x).relu().sum(); }, std::tuple{huge});
  CHECK(p.graph().outputs()[0].meta().annotation() == "f32[]");
  CHECK(p.graph().placeholders()[0].output(0).meta().annotation() == "f32[100000, 100000]");
}

TEST_CASE("export: tensors captured from outside are lifted as constants") {
  const auto scale = at::full({3}, 2.0);
  auto p = export_program([&](const at::Tensor& x) { return x * scale; }, std::tuple{at::randn({3})});
  const auto& s = p.signature().input_specs;
  REQUIRE(s.size() == 2);
  CHECK(s[0].str() == "c_lifted_tensor_0: CONSTANT_TENSOR target='lifted_tensor_0'");
  CHECK(p.constants().at("lifted_tensor_0").is_same(scale));
  const auto x = at::randn({3});
  CHECK(at::allclose(run(p, {x})[0], x * scale));
}

TEST_CASE("export: limits are typed errors that say what to do") {
  const auto x = at::randn({4});
  SUBCASE("item() is a graph break") {
    XPORT_CHECK_THROWS_MSG(export_program([](const at::Tensor& t) { return t * t.sum().item<double>(); }, std::tuple{x}),
                           graph_break,
                           "[xport.export.graph_break] graph break: aten::item (Tensor::item()) reads "
                           "the contents of a tensor, which export cannot know");
  }
  SUBCASE("branching on a tensor is a graph break") {
    XPORT_CHECK_THROWS_MSG(export_program([](const at::Tensor& t) { return t.sum().is_nonzero() ? t : -t; }, std::tuple{x}),
                           graph_break, "aten::is_nonzero (using a tensor as a bool (Tensor::is_nonzero()))");
  }
  SUBCASE("nonzero gives an unbacked row count (u0); a branch on it is a graph break") {
    const auto p = export_program([](const at::Tensor& t) { return at::nonzero(t > 0); }, std::tuple{x});
    CHECK(to_string(p).find("nonzero: \"i64[u0, " + std::to_string(x.dim()) + "]\"") != std::string::npos);
    CHECK(at::equal(run(p, {x})[0], at::nonzero(x > 0)));
    XPORT_CHECK_THROWS_MSG(export_program([](const at::Tensor& t) { return at::nonzero(t).size(0) == 0 ? t : -t; }, std::tuple{x}),
                           graph_break, "decides something on the number of rows a data-dependent call gives");
  }
  SUBCASE("unique gives an unbacked count of values (u0)") {
    const auto p = export_program([](const at::Tensor& t) { return std::get<0>(at::_unique2(t.round())); }, std::tuple{x});
    CHECK(to_string(p).find("Range constraints: {u0: VR[0, " + std::to_string(x.numel()) + "]}") != std::string::npos);
    const auto in = at::tensor({1.f, 2.f, 1.f, 3.f});
    CHECK(at::equal(run(p, {in})[0], std::get<0>(at::_unique2(in.round()))));
  }
  SUBCASE("a captured tensor updated in place must be a buffer") {
    auto counter = at::zeros({4});
    XPORT_CHECK_THROWS_MSG(export_program([&](const at::Tensor& t) { return counter.add_(t); }, std::tuple{x}),
                           export_error,
                           "[xport.export.constant_mutation] Constant lifted_tensor_0 is mutated in the forward "
                           "method by aten::add_.Tensor. Pls register it as buffer");
    CHECK(at::equal(counter, at::zeros({4})));
  }
  SUBCASE("an op without a meta kernel or shape rule") {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("xport_export_test::cpu_only", "")
                         .typed<at::Tensor(const at::Tensor&)>();
    XPORT_CHECK_THROWS_MSG(export_program([](const at::Tensor& t) { return op.call(t); }, std::tuple{x}),
                           missing_fake_kernel,
                           "[xport.fake.missing_kernel] xport_export_test::cpu_only has no meta (fake) kernel");
  }
  // after any failure the thread records nothing and eager works
  CHECK(at::allclose(at::sin(x), at::sin(x)));
  CHECK(x.sin().sum().item<double>() == doctest::Approx(at::sin(x).sum().item<double>()));
}

TEST_CASE("export: in-place ops stay in the training IR and run like eager") {
  auto p = export_program([](const at::Tensor& x, const at::Tensor& y) {
    auto z = x * 2;
    z.add_(y);
    z.relu_();
    return z + y;
  }, std::tuple{at::randn({4}), at::randn({4})}, {.input_names = {"x", "y"}});
  CHECK((body_lines(p) == std::vector<std::string>{
             "mul: \"f32[4]\" = torch.ops.aten.mul.Tensor(x, 2)",
             "add_: \"f32[4]\" = torch.ops.aten.add_.Tensor(mul, y)",
             "relu_: \"f32[4]\" = torch.ops.aten.relu_.default(add_)",
             "add: \"f32[4]\" = torch.ops.aten.add.Tensor(relu_, y)", "return (add,)"}));
  const auto x = at::randn({4}), y = at::randn({4});
  CHECK(at::allclose(run(p, {x, y})[0], at::relu(x * 2 + y) + y));
}

TEST_CASE("export: C++ calls are recorded as the calls Python's torch makes for the same code") {
  // Python binds no .Scalar overloads of add/sub/mul/div (x * 2 is mul.Tensor there); its
  // argument parser gives every factory the default device and every op pin_memory=False
  auto p = export_program([](const at::Tensor& x) {
    auto a = x * 2 + 1;
    a.div_(3);
    auto b = a.sub(x, 2);
    b = b + at::ones({4});
    b = b + at::zeros_like(x);
    return b + x.div(2, "floor");
  }, std::tuple{at::randn({4})});
  CHECK((body_lines(p) == std::vector<std::string>{
             "mul: \"f32[4]\" = torch.ops.aten.mul.Tensor(x, 2)",
             "add: \"f32[4]\" = torch.ops.aten.add.Tensor(mul, 1)",
             "div_: \"f32[4]\" = torch.ops.aten.div_.Tensor(add, 3)",
             "sub: \"f32[4]\" = torch.ops.aten.sub.Tensor(div_, x, alpha = 2)",
             "ones: \"f32[4]\" = torch.ops.aten.ones.default([4], device = device(type='cpu'), pin_memory = False)",
             "add_1: \"f32[4]\" = torch.ops.aten.add.Tensor(sub, ones)",
             "zeros_like: \"f32[4]\" = torch.ops.aten.zeros_like.default(x, pin_memory = False)",
             "add_2: \"f32[4]\" = torch.ops.aten.add.Tensor(add_1, zeros_like)",
             "div: \"f32[4]\" = torch.ops.aten.div.Tensor_mode(x, 2, rounding_mode = 'floor')",
             "add_3: \"f32[4]\" = torch.ops.aten.add.Tensor(add_2, div)", "return (add_3,)"}));
  const auto x = at::randn({4});
  CHECK(at::allclose(run(p, {x})[0], ((x * 2 + 1) / 3).sub(x, 2) + 1 + x.div(2, "floor")));
}
