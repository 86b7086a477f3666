// Dynamic shapes: the dynamic_shapes spec and its errors, symbolic sizes on every node, sizes
// the traced code computes with size(), specialization reported as "Constraints violated",
// no silent 0/1 specialization, run-time guards, and real models run at several sizes against
// eager LibTorch.
#include <torch/torch.h>

#include <xport/engine.hpp>

#include "common.hpp"
#include "models.hpp"

using namespace xport;
namespace m = xport_models;

namespace {

std::string annotation_of(const exported_program& p, const std::string& name) {
  for (auto n : p.graph().nodes())
    for (auto v : n.outputs())
      if (v.name() == name && v.kind() == value_kind::tensor) return v.meta().annotation();
  return "<no value " + name + ">";
}

void check_close(const at::Tensor& got, const at::Tensor& want, double rtol = 1e-4, double atol = 1e-5) {
  REQUIRE((got.sizes() == want.sizes()));
  CHECK(at::allclose(got, want, rtol, atol));
}

at::Tensor add_rows(const at::Tensor& x, const at::Tensor& y) { return x + y; }

}  // namespace

TEST_CASE("dynamic: Dim, derived dims and hints print and fail as torch's") {
  CHECK(Dim("batch").str() == "Dim('batch', min=0)");
  CHECK(Dim("batch", 1, 1024).str() == "Dim('batch', min=1, max=1024)");
  CHECK(Dim("n", 2).str() == "Dim('n')");
  CHECK(Dim("n", std::nullopt, 5).str() == "Dim('n', min=0, max=5)");
  const Dim b("b", 1, 64);
  CHECK((2 * b).name() == "2*b");
  CHECK((b + 1).name() == "b + 1");
  CHECK((b - 1).name() == "b - 1");
  CHECK((2 * b + 1).name() == "2*b + 1");
  CHECK(((b + 1) * 2).name() == "2*b + 2");
  CHECK((2 * b).min() == 2);
  CHECK((2 * b).max() == 128);
  CHECK(Dim::dynamic.str() == "DimHint(DYNAMIC)");
  CHECK(Dim::automatic(16).str() == "DimHint(AUTO, min=16)");
  XPORT_CHECK_THROWS_MSG(Dim("2x"), export_error, "Dim name must be a valid identifier, got 2x");
  XPORT_CHECK_THROWS_MSG(Dim("x", 5, 3), export_error, "Cannot create Dim with inconsistent min=5, max=3");
  XPORT_CHECK_THROWS_MSG((void)(b * 0), export_error,
                         "Attempted to multiply 0 with b, where a positive integer was expected. (Only increasing "
                         "linear operations with integer coefficients are supported.)");
  XPORT_CHECK_THROWS_MSG((void)(3 - b), export_error, "Attempted to negate b.");
  XPORT_CHECK_THROWS_MSG((void)(b + b), export_error, "Attempted to add b to b, where an integer was expected.");
  XPORT_CHECK_THROWS_MSG((void)(b - 5), export_error, "Derived dim b - 5 would have min -4");
  XPORT_CHECK_THROWS_MSG(Dim::dynamic(-1), export_error, "min must be non-negative");
  XPORT_CHECK_THROWS_MSG(Dim::dynamic(5, 3), export_error, "min must be <= max");
}

TEST_CASE("dynamic: a shared batch dim prints symbolic sizes and range constraints, runs at any size") {
  const auto batch = Dim("batch", 1, 1024);
  auto p = export_program(add_rows, std::tuple{at::randn({4, 3}), at::randn({4, 3})},
                          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, batch}}}, {"y", {{0, batch}}}}});
  verify(p);
  const auto text = to_string(p);
  INFO(text);
  CHECK(text.find("x: \"f32[s77, 3]\"") != std::string::npos);
  CHECK(text.find("add: \"f32[s77, 3]\"") != std::string::npos);
  CHECK(text.find("Range constraints: {s77: VR[1, 1024]}") != std::string::npos);
  for (std::int64_t n : {1, 4, 7, 1024}) {
    auto x = at::randn({n, 3}), y = at::randn({n, 3});
    check_close(run(p, {x, y})[0], x + y);
  }
  XPORT_CHECK_THROWS_MSG(run(p, {at::randn({2048, 3}), at::randn({2048, 3})}), guard_error,
                         "[xport.guard.range] input x: dim 0 (batch) must be in [1, 1024], got 2048");
  XPORT_CHECK_THROWS_MSG(run(p, {at::randn({4, 3}), at::randn({5, 3})}), guard_error,
                         "[xport.guard.equal] x.shape[0] (batch=4) must equal y.shape[0], got 5");
  XPORT_CHECK_THROWS_MSG(run(p, {at::randn({4, 2}), at::randn({4, 2})}), guard_error, "[xport.guard.shape] input x: dim 1 must be 3, got 2");
  // positional spec, per-dim form, default bounds
  auto q = export_program(add_rows, std::tuple{at::randn({4, 3}), at::randn({4, 3})},
                          {.dynamic_shapes = dynamic_shapes::positional(
                               {shape(Dim("n"), Dim::static_), shape(Dim("n"), 3)})});
  CHECK(to_string(q).find("Range constraints: {s27: VR[0, int_oo]}") != std::string::npos);  // L['args_0'].size()[0]
  check_close(run(q, {at::ones({9, 3}), at::ones({9, 3})})[0], at::full({9, 3}, 2.0));
  check_close(run(q, {at::ones({0, 3}), at::ones({0, 3})})[0], at::ones({0, 3}));
}

TEST_CASE("dynamic: spec validation names the path") {
  const auto x = at::randn({4, 3}), y = at::randn({4, 3});
  const auto b = Dim("b");
  XPORT_CHECK_THROWS_MSG(export_program(add_rows, std::tuple{x, y}, {.input_names = {"x", "y"}, .dynamic_shapes = {{"z", {{0, b}}}}}),
                         export_error,
                         "When `dynamic_shapes` is specified as a dict, its top-level keys must be the arg names ['x', 'y'] "
                         "of `inputs`, but here they are ['z']");
  XPORT_CHECK_THROWS_MSG(
      export_program(add_rows, std::tuple{x, y}, {.dynamic_shapes = dynamic_shapes::positional({shape(b), std::nullopt})}),
      export_error,
      "Expected dynamic shape spec (Dim('b', min=0),) specified at `dynamic_shapes[0]` to have the same length as the "
      "actual tensor shape torch.Size([4, 3]) (expected 2, but got 1 instead)");
  XPORT_CHECK_THROWS_MSG(
      export_program(add_rows, std::tuple{x, y}, {.dynamic_shapes = dynamic_shapes::positional({{{2, b}}, std::nullopt})}),
      export_error, "names dimension 2, but the tensor at `inputs[0]` has shape torch.Size([4, 3])");
  XPORT_CHECK_THROWS_MSG(
      export_program(add_rows, std::tuple{x, y}, {.dynamic_shapes = dynamic_shapes::positional({std::nullopt})}),
      export_error, "`dynamic_shapes` has 1 positional entries, but the program takes 2 argument(s)");
  XPORT_CHECK_THROWS_MSG(export_program(add_rows, std::tuple{x, y},
                                        {.dynamic_shapes = dynamic_shapes::positional({{{0, Dim("b", 0, 8)}}, {{0, Dim("b", 0, 9)}}})}),
                         export_error,
                         "Found different definitions Dim('b', min=0, max=8) and Dim('b', min=0, max=9) for the same "
                         "symbolic dimension b!");
  XPORT_CHECK_THROWS_MSG(
      export_program(add_rows, std::tuple{x, y}, {.dynamic_shapes = dynamic_shapes::positional({{{0, 5}}, std::nullopt})}),
      export_error, "gives dimension 0 the static size 5, but the example input args_0.shape[0] is 4");
  XPORT_CHECK_THROWS_MSG(export_program(add_rows, std::tuple{x, y},
                                        {.dynamic_shapes = dynamic_shapes::positional({{{0, Dim("b", 8)}}, std::nullopt})}),
                         export_error, "the example inputs give b = 4");
  XPORT_CHECK_THROWS_MSG(
      export_program(add_rows, std::tuple{x, y},
                     {.dynamic_shapes = dynamic_shapes::positional({shape_spec::list({std::nullopt}), std::nullopt})}),
      export_error,
      "Detected mismatch between the structure of `inputs` and `dynamic_shapes`: `inputs[0]` is a Tensor, but "
      "`dynamic_shapes[0]` is a list");
  // nested inputs: a vector of tensors
  auto cat = [](const std::vector<at::Tensor>& xs) { return at::cat(xs, 0); };
  const auto n = Dim("n");
  auto p = export_program(cat, std::tuple{std::vector<at::Tensor>{x, y}},
                          {.dynamic_shapes = {{"x", shape_spec::list({{{0, n}}, {{0, Dim("m")}}})}}});
  CHECK(annotation_of(p, "cat") == "f32[s23 + s53, 3]");
  check_close(run(p, {at::ones({2, 3}), at::ones({5, 3})})[0], at::ones({7, 3}));
  XPORT_CHECK_THROWS_MSG(export_program(cat, std::tuple{std::vector<at::Tensor>{x, y}},
                                        {.dynamic_shapes = {{"x", shape_spec::list({{{0, n}}})}}}),
                         export_error, "`inputs['x']` has 2 elements, but `dynamic_shapes['x']` has 1 elements");
  XPORT_CHECK_THROWS_MSG(
      export_program([](const at::Tensor& a, std::int64_t k) { return a * k; }, std::tuple{x, std::int64_t{3}},
                     {.dynamic_shapes = dynamic_shapes::positional({std::nullopt, {{0, n}}})}),
      export_error, "Cannot associate shape {0: Dim('n', min=0)} specified at `dynamic_shapes[1]` to non-tensor type int at `inputs[1]` (expected None)");
}

TEST_CASE("dynamic: derived dims relate inputs and are checked at run time") {
  const auto b = Dim("b", 1, 100);
  auto f = [](const at::Tensor& x, const at::Tensor& y) { return at::cat({x, y}, 0); };
  auto p = export_program(f, std::tuple{at::randn({3, 2}), at::randn({6, 2})},
                          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, b}}}, {"y", {{0, 2 * b}}}}});
  CHECK(annotation_of(p, "y") == "f32[2*s77, 2]");
  CHECK(annotation_of(p, "cat") == "f32[3*s77, 2]");
  check_close(run(p, {at::ones({5, 2}), at::ones({10, 2})})[0], at::ones({15, 2}));
  XPORT_CHECK_THROWS_MSG(run(p, {at::ones({5, 2}), at::ones({9, 2})}), guard_error,
                         "[xport.guard.equal] y.shape[0] must be 2*s77 = 10");
  XPORT_CHECK_THROWS_MSG(export_program(f, std::tuple{at::randn({3, 2}), at::randn({7, 2})},
                                        {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, b}}}, {"y", {{0, 2 * b}}}}}),
                         constraint_violation, "y.shape[0] = 7 is not equal to 2*b = 6");
  // a root no input gives directly is solved from the derived one
  auto q = export_program(f, std::tuple{at::randn({4, 2}), at::randn({5, 2})},
                          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, b + 3}}}, {"y", {{0, b + 4}}}}});
  CHECK(annotation_of(q, "x") == "f32[s77 + 3, 2]");
  check_close(run(q, {at::ones({10, 2}), at::ones({11, 2})})[0], at::ones({21, 2}));
  XPORT_CHECK_THROWS_MSG(run(q, {at::ones({10, 2}), at::ones({12, 2})}), guard_error, "[xport.guard.equal]");
  XPORT_CHECK_THROWS_MSG(export_program(f, std::tuple{at::randn({5, 2}), at::randn({5, 2})},
                                        {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, 2 * b}}}, {"y", std::nullopt}}}),
                         constraint_violation,
                         "Expected shape[0] = 5 of input Tensor x to be of the form 2*b, where b is an integer");
}

TEST_CASE("dynamic: a relation between dims added to the ranges is checked on every call, printed, saved and lowered") {
  auto f = [](const at::Tensor& x, const at::Tensor& y) { return x.sum(0) + y.slice(0, 0, 2).sum(0); };
  auto p = export_program(f, std::tuple{at::randn({3, 2}), at::randn({5, 2})},
                          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, Dim("a", 2, 64)}}}, {"y", {{0, Dim("b", 2, 64)}}}}});
  REQUIRE(p.range_constraints().size() == 2);
  auto& rc = p.range_constraints_mut();
  rc[1].relations.push_back({rc[0].symbol, "<=", rc[1].symbol});  // a <= b, as torch._check(x.shape[0] <= y.shape[0]) would state it
  const auto expr = rc[0].symbol.str() + " <= " + rc[1].symbol.str();
  const auto x = at::randn({4, 2}), y = at::randn({6, 2});
  const auto want = f(x, y);
  const auto fails = "Runtime assertion failed for expression " + expr;
  const auto lowered = run_decompositions(p);
  const auto back = xport_test::reload(p);
  CHECK(to_string(back) == to_string(p));
  CHECK(to_string(p).find("_assert_scalar.default(le, \"" + fails + " on node 'le'\")") != std::string::npos);
  const exported_program& cp = p;
  engine e(cp);
  for (const auto* q : {&cp, &lowered, &back}) {
    CHECK(at::allclose(run(*q, {x, y})[0], want));
    CHECK(at::allclose(run(*q, {x, x})[0], f(x, x)));  // equal sizes satisfy it
    CHECK_THROWS_WITH_AS(run(*q, {y, x}), doctest::Contains(fails.c_str()), run_error);
  }
  const auto where = fails + " on the inputs' sizes (" + rc[0].symbol.str() + " = 6, " + rc[1].symbol.str() + " = 4 in this call)";
  CHECK_THROWS_WITH_AS(run(p, {y, x}), doctest::Contains(where.c_str()), run_error);
  CHECK(at::allclose(e.run({x, y})[0], want));
  CHECK_THROWS_WITH_AS(e.run({y, x}), doctest::Contains(fails.c_str()), run_error);
}

TEST_CASE("dynamic: sizes computed with size() follow the dim instead of being baked in") {
  auto f = [](const at::Tensor& x) {
    const auto n = x.size(0);
    auto h = at::zeros({2, n, 4});  // an LSTM's initial state
    return x.view({n, -1}).sum(1) + h.sum(0).sum(1) + at::ones({n * 2}).view({n, 2}).sum(1);
  };
  const auto batch = Dim("batch", 1, 64);
  auto p = export_program(f, std::tuple{at::randn({3, 4, 5})}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
  const auto text = to_string(p);
  INFO(text);
  // printed as torch prints them: a sym_size read of the dim, size arithmetic as nodes
  CHECK(text.find("sym_size_int_1: \"Sym(s77)\" = torch.ops.aten.sym_size.int(x, 0)") != std::string::npos);
  CHECK(text.find("torch.ops.aten.zeros.default([2, sym_size_int_1, 4]") != std::string::npos);
  CHECK(text.find("torch.ops.aten.view.default(x, [sym_size_int_1, -1])") != std::string::npos);
  CHECK(text.find("mul: \"Sym(2*s77)\" = sym_size_int_1 * 2") != std::string::npos);
  CHECK(text.find("torch.ops.aten.ones.default([mul]") != std::string::npos);
  for (std::int64_t n : {1, 3, 10}) {
    auto x = at::randn({n, 4, 5});
    check_close(run(p, {x})[0], f(x));
  }
}

TEST_CASE("dynamic: code that specializes a dim fails with Constraints violated and a fix") {
  // broadcasting against a fixed size with an example of 1: torch specializes silently, xport fails
  auto g = [](const at::Tensor& x, const at::Tensor& y) { return x + y; };
  const auto batch = Dim("batch");
  XPORT_CHECK_THROWS_MSG(export_program(g, std::tuple{at::randn({1, 4}), at::randn({5, 4})},
                                        {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, batch}}}, {"y", std::nullopt}}}),
                         constraint_violation,
                         "Constraints violated (batch)!\n  - You marked batch as dynamic but your code specialized it to be "
                         "a constant (1): with batch = 9 instead of the example's batch = 1 export fails");
  XPORT_CHECK_THROWS_MSG(export_program(g, std::tuple{at::randn({1, 4}), at::randn({5, 4})},
                                        {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, batch}}}, {"y", std::nullopt}}}),
                         constraint_violation, "aten::add.Tensor");
  XPORT_CHECK_THROWS_MSG(export_program(g, std::tuple{at::randn({1, 4}), at::randn({5, 4})},
                                        {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, batch}}}, {"y", std::nullopt}}}),
                         constraint_violation, "Suggested fixes:\n  batch = 1");
  // Dim::automatic falls back to static instead
  auto s = export_program(g, std::tuple{at::randn({1, 4}), at::randn({5, 4})},
                          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, Dim::automatic}}}, {"y", std::nullopt}}});
  CHECK(annotation_of(s, "x") == "f32[1, 4]");
  CHECK(s.range_constraints().empty());
  // Dim::dynamic is strict too
  XPORT_CHECK_THROWS_MSG(export_program(g, std::tuple{at::randn({1, 4}), at::randn({5, 4})},
                                        {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, Dim::dynamic}}}, {"y", std::nullopt}}}),
                         constraint_violation, "use Dim::static_ (or Dim::automatic) for x.shape[0]");
  // a branch on the size
  auto h = [](const at::Tensor& x) { return x.size(0) > 4 ? x.sin() : x.cos(); };
  XPORT_CHECK_THROWS_MSG(export_program(h, std::tuple{at::randn({4, 2})}, {.dynamic_shapes = {{"x", {{0, batch}}}}}),
                         constraint_violation, "takes a different path depending on the size");
  // a float computed from a size in a way no SymFloat form gives
  auto k = [](const at::Tensor& x) { return x * std::log(static_cast<double>(x.size(0))); };
  XPORT_CHECK_THROWS_MSG(export_program(k, std::tuple{at::randn({4, 2})}, {.dynamic_shapes = {{"x", {{0, batch}}}}}),
                         constraint_violation,
                         "argument 'other' of node 'mul' (aten::mul.Tensor) is 1.3862943611198906 at batch = 4, "
                         "2.4849066497880004 at batch = 12");
}

TEST_CASE("dynamic: a float C++ code computes from a size is a SymFloat, evaluated on every call, printed and saved as torch's") {
  // 1.0 / x.size(0) and sqrt(x.size(1)): torch's FloatTrueDiv(1.0, ToFloat(s77)) and FloatPow(ToFloat(s27), 0.5)
  auto f = [](const at::Tensor& x) {
    return x * (1.0 / static_cast<double>(x.size(0))) + std::sqrt(static_cast<double>(x.size(1)));
  };
  auto p = export_program(f, std::tuple{at::randn({4, 9})},
                          {.dynamic_shapes = {{"x", {{0, Dim("batch", 2, 64)}, {1, Dim("features", 2, 64)}}}}});
  const auto text = to_string(p);
  CHECK(text.find("truediv: \"Sym(FloatTrueDiv(1.0, ToFloat(s77)))\" = 1.0 / sym_float;") != std::string::npos);
  CHECK(text.find("pow_1: \"Sym(FloatPow(ToFloat(s27), 0.5))\" = sym_float_1 ** 0.5;") != std::string::npos);
  CHECK(text.find("torch.ops.aten.mul.Tensor(x, truediv)") != std::string::npos);
  engine e(p);
  const auto bytes = save_to_string(p);
  const auto back = load_from_memory(bytes.data(), bytes.size());
  auto low = run_decompositions(p);
  for (auto x : {at::randn({7, 5}), at::randn({3, 12}).t(), at::randn({2, 2})}) {
    const auto want = f(x);
    CHECK(at::equal(run(p, {x})[0], want));  // bit for bit: the same double the C++ code computes
    CHECK(at::equal(e.run({x})[0], want));
    CHECK(at::equal(run(back, {x})[0], want));
    CHECK(at::equal(run(low, {x})[0], want));
  }
  // with batch's default minimum, 0: a call at batch 0 divides by zero, a typed error as in Python
  auto q = export_program(f, std::tuple{at::randn({4, 9})}, {.dynamic_shapes = {{"x", {{0, Dim("batch")}}}}});
  CHECK(at::equal(run(q, {at::ones({3, 9})})[0], f(at::ones({3, 9}))));
  XPORT_CHECK_THROWS_MSG(run(q, {at::ones({0, 9})}), run_error,
                         "division by zero in the size expression FloatTrueDiv(1.0, ToFloat(s77))");
}

TEST_CASE("dynamic: relations between dims and narrowed ranges are reported with a fix") {
  auto g = [](const at::Tensor& x, const at::Tensor& y) { return x + y; };
  const auto a = Dim("a"), b = Dim("b");
  XPORT_CHECK_THROWS_MSG(export_program(g, std::tuple{at::randn({4, 3}), at::randn({4, 3})},
                                        {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, a}}}, {"y", {{0, b}}}}}),
                         constraint_violation,
                         "Constraints violated (a, b)!\n  - The values of b = y.shape[0] and a = x.shape[0] must always be equal");
  XPORT_CHECK_THROWS_MSG(export_program(g, std::tuple{at::randn({4, 3}), at::randn({4, 3})},
                                        {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, a}}}, {"y", {{0, b}}}}}),
                         constraint_violation, "Suggested fixes:\n  b = a");
  // a hint takes the relation: one dim
  auto p = export_program(g, std::tuple{at::randn({4, 3}), at::randn({4, 3})},
                          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, a}}}, {"y", {{0, Dim::dynamic}}}}});
  CHECK(annotation_of(p, "y") == "f32[s77, 3]");
  XPORT_CHECK_THROWS_MSG(run(p, {at::randn({4, 3}), at::randn({5, 3})}), guard_error,
                         "[xport.guard.equal] x.shape[0] (a=4) must equal y.shape[0], got 5");

  // code that works only for part of the range
  auto h = [](const at::Tensor& x) { return x.narrow(0, 0, 3) * 2; };
  XPORT_CHECK_THROWS_MSG(export_program(h, std::tuple{at::randn({4, 2})}, {.dynamic_shapes = {{"x", {{0, Dim("batch")}}}}}),
                         constraint_violation,
                         "Constraints violated (batch)!\n  - Not all values of batch = x.shape[0] in the specified range "
                         "0 <= batch satisfy the generated guard 3 <= x.shape[0]: with batch = 0, export fails");
  XPORT_CHECK_THROWS_MSG(export_program(h, std::tuple{at::randn({4, 2})}, {.dynamic_shapes = {{"x", {{0, Dim("batch")}}}}}),
                         constraint_violation, "Suggested fixes:\n  batch = Dim('batch', min=3)");
  auto q = export_program(h, std::tuple{at::randn({4, 2})}, {.dynamic_shapes = {{"x", {{0, Dim("batch", 3)}}}}});
  check_close(run(q, {at::ones({3, 2})})[0], at::full({3, 2}, 2.0));
  // with a hint the range narrows by itself
  auto r = export_program(h, std::tuple{at::randn({4, 2})}, {.dynamic_shapes = {{"x", {{0, Dim::dynamic}}}}});
  CHECK(to_string(r).find("Range constraints: {s77: VR[3, int_oo]}") != std::string::npos);
  XPORT_CHECK_THROWS_MSG(run(r, {at::ones({2, 2})}), guard_error,
                         "[xport.guard.range] input x: dim 0 (x.shape[0]) must be in [3, int_oo], got 2");
  // an upper bound the code cannot reach
  auto u = [](const at::Tensor& x) { return x.sum(1) + at::zeros({100 - x.size(0)}).sum(); };
  XPORT_CHECK_THROWS_MSG(export_program(u, std::tuple{at::randn({4, 2})}, {.dynamic_shapes = {{"x", {{0, Dim("n", 1, 200)}}}}}),
                         constraint_violation, "satisfy the generated guard x.shape[0] <= 100");
}

TEST_CASE("dynamic: example sizes 0 and 1 stay symbolic and the program is right for every size") {
  auto f = [](const at::Tensor& x, const at::Tensor& bias) { return (x * 2 + bias).relu().sum(1); };
  const auto n = Dim("n");
  for (std::int64_t example : {0, 1}) {
    auto p = export_program(f, std::tuple{at::randn({example, 4}), at::randn({4})},
                            {.input_names = {"x", "bias"}, .dynamic_shapes = {{"x", {{0, n}}}, {"bias", std::nullopt}}});
    CHECK(annotation_of(p, "x") == "f32[s77, 4]");
    CHECK(annotation_of(p, "sum_1") == "f32[s77]");
    for (std::int64_t k : {0, 1, 2, 9}) {
      auto x = at::randn({k, 4}), b = at::randn({4});
      check_close(run(p, {x, b})[0], f(x, b));
    }
  }
  // a dim that broadcasts against another dynamic dim stays symbolic when the example is 1
  auto g = [](const at::Tensor& x, const at::Tensor& y) { return x * y; };
  auto q = export_program(g, std::tuple{at::randn({1, 3}), at::randn({1, 3})},
                          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, n}}}, {"y", {{0, n}}}}});
  CHECK(annotation_of(q, "mul") == "f32[s77, 3]");
  auto x = at::randn({6, 3}), y = at::randn({6, 3});
  check_close(run(q, {x, y})[0], x * y);
}

TEST_CASE("dynamic: symbolic shapes through every op family") {
  torch::manual_seed(0);
  struct op_case {
    const char* name;
    std::function<at::Tensor(const at::Tensor&)> f;
    std::vector<std::int64_t> shape;  // example; dim 0 dynamic (and `spatial` dims too)
    bool spatial = false;
    const char* expect = nullptr;  // annotation of the output, when given
  };
  const auto w = at::randn({6, 5});
  const auto cw = at::randn({4, 3, 3, 3});
  const auto emb = at::randn({10, 4});
  const auto idx = at::tensor({0, 2}, at::kLong);
  const std::vector<op_case> cases = {
      {"elementwise + broadcasting", [](const at::Tensor& x) { return (x.sigmoid() * 3 + x.unsqueeze(1).sum(1)).clamp(0, 1); }, {4, 6}},
      {"reductions", [](const at::Tensor& x) { return x.sum(0) + x.mean(0) + std::get<0>(x.max(0)); }, {4, 6}, false, "f32[6]"},
      {"keepdim reduction", [](const at::Tensor& x) { return x.amax(1, true) - x; }, {4, 6}},
      {"matmul", [w](const at::Tensor& x) { return x.matmul(w); }, {4, 6}, false, "f32[s77, 5]"},
      {"bmm", [](const at::Tensor& x) { return at::bmm(x, x.transpose(1, 2)); }, {4, 3, 2}, false, "f32[s77, 3, 3]"},
      {"conv2d", [cw](const at::Tensor& x) { return at::conv2d(x, cw, {}, 2, 1); }, {2, 3, 9, 9}, true},
      {"max_pool2d", [](const at::Tensor& x) { return at::max_pool2d(x, 3, 2, 1); }, {2, 3, 9, 9}, true},
      {"avg_pool2d", [](const at::Tensor& x) { return at::avg_pool2d(x, 2); }, {2, 3, 8, 8}, true},
      {"adaptive_avg_pool2d", [](const at::Tensor& x) { return at::adaptive_avg_pool2d(x, {1, 1}); }, {2, 3, 8, 8}, true},
      {"view / reshape / flatten", [](const at::Tensor& x) { return x.reshape({-1, 6}).flatten(); }, {4, 2, 3}, false, "f32[6*s77]"},
      {"flatten spatial", [](const at::Tensor& x) { return x.flatten(1); }, {2, 3, 8, 8}, true},
      {"transpose / permute", [](const at::Tensor& x) { return x.permute({2, 0, 1}).transpose(0, 1).contiguous(); }, {4, 2, 3}, false, "f32[s77, 3, 2]"},
      {"cat / stack", [](const at::Tensor& x) { return at::cat({x, x * 2}, 0) + at::stack({x, x}, 0).sum(0).repeat({2, 1}); }, {4, 6}, false, "f32[2*s77, 6]"},
      {"split / chunk", [](const at::Tensor& x) { return x.split(2, 1)[0] + x.chunk(3, 1)[2]; }, {4, 6}, false, "f32[s77, 2]"},
      {"slicing / indexing", [idx](const at::Tensor& x) { return x.narrow(1, 1, 3).select(1, 0) + x.index_select(1, idx).sum(1) + x.slice(0, 0, 9223372036854775807LL).sum(1); }, {4, 6}},
      {"padding", [](const at::Tensor& x) { return at::constant_pad_nd(x, {1, 1, 2, 0}); }, {4, 6}, false, "f32[s77 + 2, 8]"},
      {"upsampling", [](const at::Tensor& x) { return at::upsample_nearest2d(x, {}, std::vector<double>{2.0, 2.0}); }, {2, 3, 4, 4}, true},
      {"embedding", [emb](const at::Tensor& x) { return at::embedding(emb, (x.abs() * 3).to(at::kLong).clamp(0, 9)); }, {4, 6}, false, "f32[s77, 6, 4]"},
      {"normalisations", [](const at::Tensor& x) { return at::layer_norm(x, {6}) + at::group_norm(x.unsqueeze(2), 2).squeeze(2) + at::batch_norm(x, {}, {}, at::zeros({6}), at::ones({6}), false, 0.1, 1e-5, false); }, {4, 6}},
      {"attention", [](const at::Tensor& x) {
         auto q = x.view({x.size(0), x.size(1), 2, 3}).transpose(1, 2);
         auto att = at::softmax(at::matmul(q, q.transpose(-2, -1)) / 1.7320508, -1);
         return at::matmul(att, q).transpose(1, 2).reshape({x.size(0), x.size(1), 6});
       }, {2, 5, 6}},
  };
  for (const auto& c : cases) {
    INFO("op family: " << c.name);
    std::map<std::int64_t, dim_spec> dims{{0, Dim("batch", 1, 64)}};
    if (c.spatial) dims = {{0, Dim("batch", 1, 64)}, {2, Dim("h", 4, 128)}, {3, Dim("w", 4, 128)}};
    shape_spec spec;
    switch (dims.size()) {
      case 1: spec = {{0, dims[0]}}; break;
      default: spec = {{0, dims[0]}, {2, dims[2]}, {3, dims[3]}}; break;
    }
    const auto ex = at::randn(c.shape);
    exported_program p = export_program(c.f, std::tuple{ex}, {.dynamic_shapes = {{"x", spec}}});
    verify(p);
    const auto text = to_string(p);
    INFO(text);
    CHECK(text.find("x: \"f32[s77") != std::string::npos);
    if (c.expect) {
      const auto out = p.graph().output_node().args()[0].as_value();
      CHECK(out.meta().annotation() == c.expect);
    }
    for (std::int64_t k : {1, 3, 7}) {
      auto shape = c.shape;
      shape[0] = k;
      if (c.spatial) shape[2] = shape[3] = 4 + 3 * k;
      const auto x = at::randn(shape);
      const auto got = run(p, {x})[0];
      const auto want = c.f(x);
      check_close(got, want, 1e-4, 1e-4);
      // the program's symbolic output size, evaluated at these sizes, is the size eager gives
      const auto out = p.graph().output_node().args()[0].as_value();
      for (std::size_t d = 0; d < out.meta().sizes.size(); ++d) {
        std::unordered_map<std::string, std::int64_t> env{{"s77", k}};
        if (c.spatial) env["s53"] = env["s0"] = 4 + 3 * k;
        CHECK(sym::eval(out.meta().sizes[d], env) == want.size(static_cast<std::int64_t>(d)));
      }
    }
  }
}

TEST_CASE("dynamic: window sizes of convolution and pooling print as torch does") {
  const auto cw = at::randn({4, 3, 3, 3});
  auto f = [cw](const at::Tensor& x) { return at::max_pool2d(at::conv2d(x, cw, {}, 2), 2); };
  auto p = export_program(f, std::tuple{at::randn({1, 3, 32, 32})},
                          {.dynamic_shapes = {{"x", {{2, Dim("h", 8, 512)}, {3, Dim("w", 8, 512)}}}}});
  CHECK(annotation_of(p, "conv2d") == "f32[1, 4, ((s53 - 3)//2) + 1, ((s0 - 3)//2) + 1]");
  CHECK(annotation_of(p, "max_pool2d") == "f32[1, 4, ((((s53 - 3)//2) - 1)//2) + 1, ((((s0 - 3)//2) - 1)//2) + 1]");
  CHECK(to_string(p).find("Range constraints: {s53: VR[8, 512], s0: VR[8, 512]}") != std::string::npos);
}

TEST_CASE("dynamic: real models with a dynamic batch (and sequence) run at several sizes like eager") {
  auto check = [](auto make, std::vector<std::int64_t> shape, std::vector<std::pair<std::int64_t, Dim>> dyn,
                  std::vector<std::vector<std::int64_t>> sizes, auto input_of,
                  const decomposition_table& table = decomposition_table::core_aten()) {
    torch::manual_seed(0);
    auto exported = make();
    torch::manual_seed(0);
    auto eager = make();
    exported->eval();
    eager->eval();
    shape_spec spec;
    if (dyn.size() == 1) spec = {{dyn[0].first, dyn[0].second}};
    else spec = {{dyn[0].first, dyn[0].second}, {dyn[1].first, dyn[1].second}};
    auto p = export_program(exported, std::tuple{input_of(shape)}, {.dynamic_shapes = {{"x", spec}}});
    verify(p);
    auto core = run_decompositions(p, table);
    verify(core);
    for (const auto& s : sizes) {
      auto x = input_of(s);
      std::vector<at::Tensor> want;
      flatten(eager->forward(x), want);
      for (const auto* prog : {&p, &core}) {
        auto got = run(*prog, {x});
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) check_close(got[i], want[i], 1e-4, 1e-4);
      }
    }
    return p;
  };
  const auto batch = Dim("batch", 1, 256);
  const auto seq = Dim("seq", 1, 128);
  auto randn = [](const std::vector<std::int64_t>& s) { return at::randn(s); };
  SUBCASE("MLP") { check([] { return m::MLP(); }, {5, 16}, {{0, batch}}, {{1, 16}, {2, 16}, {9, 16}}, randn); }
  SUBCASE("LeNet") { check([] { return m::LeNet(); }, {2, 1, 28, 28}, {{0, batch}}, {{1, 1, 28, 28}, {5, 1, 28, 28}}, randn); }
  SUBCASE("DCGAN generator") { check([] { return m::Generator(); }, {2, 16, 1, 1}, {{0, batch}}, {{1, 16, 1, 1}, {3, 16, 1, 1}}, randn); }
  SUBCASE("DCGAN discriminator") { check([] { return m::Discriminator(); }, {2, 3, 16, 16}, {{0, batch}}, {{1, 3, 16, 16}, {4, 3, 16, 16}}, randn); }
  SUBCASE("ResNet-18, example batch 1") {
    auto p = check([] { return m::ResNet18(); }, {1, 3, 32, 32}, {{0, batch}}, {{1, 3, 32, 32}, {3, 3, 32, 32}}, randn);
    CHECK(to_string(p).find("flatten: \"f32[s77, 512]\"") != std::string::npos);
  }
  SUBCASE("ResNet-18, dynamic height and width") {
    check([] { return m::ResNet18(); }, {2, 3, 64, 64}, {{2, Dim("h", 32, 256)}, {3, Dim("w", 32, 256)}},
          {{2, 3, 32, 48}, {2, 3, 70, 33}}, randn);
  }
  SUBCASE("Transformer encoder layer, dynamic sequence and batch") {
    auto p = check([] { return m::Encoder(); }, {5, 2, 32}, {{0, seq}, {1, batch}}, {{1, 1, 32}, {7, 3, 32}, {2, 8, 32}}, randn);
    CHECK(to_string(p).find("x: \"f32[s77, s27, 32]\"") != std::string::npos);
  }
  SUBCASE("LSTM, dynamic batch and sequence") {
    // aten::lstm's decomposition unrolls over the sequence: keep the op in the inference IR
    auto p = check([] { return m::LSTMNet(); }, {2, 5, 8}, {{0, batch}, {1, seq}}, {{1, 1, 8}, {3, 9, 8}}, randn,
                   decomposition_table::core_aten().keep("aten::lstm.input"));
    XPORT_CHECK_THROWS_MSG(run_decompositions(p), export_error,
                           "run_decompositions: the decomposed programs differ between sizes: with seq = 13 instead of "
                           "the example's seq = 5, the traced code records");
    // with a dynamic batch only, the default decomposition works
    check([] { return m::LSTMNet(); }, {2, 5, 8}, {{0, batch}}, {{1, 5, 8}, {3, 5, 8}}, randn);
  }
  SUBCASE("GRU") {
    check([] { return m::GRUNet(); }, {2, 5, 8}, {{0, batch}, {1, seq}}, {{1, 2, 8}, {4, 7, 8}}, randn,
          decomposition_table::core_aten().keep("aten::gru.input"));
  }
  SUBCASE("embedding classifier") {
    check([] { return m::EmbeddingClassifier(); }, {2, 7}, {{0, batch}, {1, seq}}, {{1, 3}, {5, 11}},
          [](const std::vector<std::int64_t>& s) { return at::randint(0, 100, s, at::kLong); });
  }
}

TEST_CASE("dynamic: strict front end") {
  auto p = export_program<strict>([](sym_tensor a, sym_tensor b) { return sin(a) + cos(b); },
                                  std::tuple{at::randn({3, 2}), at::randn({3, 2})},
                                  {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, Dim("n")}}}, {"y", {{0, Dim("n")}}}}});
  CHECK(annotation_of(p, "add") == "f32[s77, 2]");
  auto x = at::randn({8, 2}), y = at::randn({8, 2});
  check_close(run(p, {x, y})[0], x.sin() + y.cos());
  // size() gives the example's value; the relation is recovered like in non-strict code, and a
  // specialization names the C++ line
  auto q = export_program<strict>([](sym_tensor a) { return relu(a.view({a.size(0), -1})); },
                                  std::tuple{at::randn({3, 2, 2})}, {.dynamic_shapes = {{"x", {{0, Dim("n", 1)}}}}});
  CHECK(to_string(q).find("torch.ops.aten.view.default(x, [sym_size_int_1, -1])") != std::string::npos);
  const auto z = at::randn({5, 2, 2});
  check_close(run(q, {z})[0], z.view({5, 4}).relu());
  XPORT_CHECK_THROWS_MSG(export_program<strict>([](sym_tensor a) { return a.view({3, -1}); }, std::tuple{at::randn({3, 2, 2})},
                                                {.dynamic_shapes = {{"x", {{0, Dim("n")}}}}}),
                         constraint_violation, "test_dynamic.cpp:");
}

TEST_CASE("dynamic: save and load keep symbolic sizes and ranges") {
  torch::manual_seed(0);
  m::MLP mlp;
  mlp->eval();
  auto p = export_program(mlp, std::tuple{at::randn({4, 16})}, {.dynamic_shapes = {{"x", {{0, Dim("batch", 1, 512)}}}}});
  const auto bytes = save_to_string(p);
  auto q = load_from_memory(bytes.data(), bytes.size());
  CHECK(to_string(q) == to_string(p));
  CHECK(q.range_constraints().size() == 1);
  const auto x = at::randn({11, 16});
  check_close(run(q, {x})[0], mlp->forward(x));
  XPORT_CHECK_THROWS_MSG(run(q, {at::randn({600, 16})}), guard_error, "[xport.guard.range] input x: dim 0 (batch) must be in [1, 512], got 600");
  // op arguments that depend on a dim travel as torch writes them: sym_size.int + _operator nodes
  auto f = [](const at::Tensor& x, const at::Tensor& y) {
    return x.view({x.size(0), -1}).sum(1) + at::zeros({2 * y.size(0) / 2 + 1}).sum() + y.slice(0, 0, y.size(0) - 1).sum();
  };
  const auto b = Dim("b", 2);
  auto r = export_program(f, std::tuple{at::randn({3, 2, 2}), at::randn({8})},
                          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, b}}}, {"y", {{0, 2 * b + 2}}}}});
  const auto text = save_to_string(r);  // stored records: the JSON is readable in the bytes
  CHECK(text.find("torch.ops.aten.sym_size.int") != std::string::npos);
  CHECK(text.find("_operator.add") != std::string::npos);
  auto r2 = load_from_memory(text.data(), text.size());
  CHECK(to_string(r2) == to_string(r));
  const auto x2 = at::randn({6, 2, 2}), y2 = at::randn({14});
  check_close(run(r2, {x2, y2})[0], f(x2, y2));
  XPORT_CHECK_THROWS_MSG(run(r2, {x2, at::randn({13})}), guard_error, "[xport.guard.equal]");
  // a real model: the Transformer layer with a dynamic sequence and batch
  torch::manual_seed(0);
  m::Encoder enc;
  enc->eval();
  auto e = export_program(enc, std::tuple{at::randn({5, 2, 32})},
                          {.dynamic_shapes = {{"x", {{0, Dim("seq", 1, 64)}, {1, Dim("batch", 1, 64)}}}}});
  const auto bytes2 = save_to_string(e);
  auto e2 = load_from_memory(bytes2.data(), bytes2.size());
  const auto z = at::randn({7, 3, 32});
  check_close(run(e2, {z})[0], enc->forward(z), 1e-4, 1e-4);
}
