// Printing: torch.export's text format and the seed document's layout, byte for byte against
// golden files (the seed program's goldens are copied from torch's docs and the seed document,
// not generated), and Graphviz DOT.
#include "common.hpp"

using namespace xport;
using xport_test::check_golden;

namespace {

exported_program seed_program() {
  program_builder b;
  auto x = b.input("x", at::randn({10, 10}));
  auto y = b.input("y", at::randn({10, 10}));
  const std::string file = "/tmp/ipykernel_263/2550508656.py";
  b.at({file, 6, "forward", "a = torch.sin(x)"});
  auto a = b.call("aten::sin", {x});
  b.at({file, 7, "forward", "b = torch.cos(y)"});
  auto c = b.call("aten::cos", {y});
  b.at({file, 8, "forward", "return a + b"});
  b.output(b.call("aten::add.Tensor", {a, c}));
  return std::move(b).build();
}

}  // namespace

TEST_CASE("print: the seed program prints exactly as torch.export prints it") {
  check_golden("seed_torch_export.txt", to_string(seed_program()));
}

TEST_CASE("print: the seed program in the seed document's layout") {
  check_golden("seed_seed_style.txt", to_string(seed_program(), {print_style::seed}));
}

TEST_CASE("print: operator<< is the torch.export form") {
  auto p = seed_program();
  std::ostringstream os;
  os << p;
  CHECK(os.str() == to_string(p));
}

TEST_CASE("print: parameters, buffers and an in-place buffer update (training IR)") {
  // What torch.export prints for Linear(8, 16) -> BatchNorm1d(16) -> ReLU in train mode.
  program_builder b;
  auto x = b.input("x", at::randn({4, 8}));
  auto w = b.parameter("fc.weight", at::randn({16, 8}));
  auto bias = b.parameter("fc.bias", at::randn({16}));
  auto bw = b.parameter("bn.weight", at::ones({16}));
  auto bb = b.parameter("bn.bias", at::zeros({16}));
  auto rm = b.buffer("bn.running_mean", at::zeros({16}));
  auto rv = b.buffer("bn.running_var", at::ones({16}));
  auto nbt = b.buffer("bn.num_batches_tracked", at::zeros({}, at::kLong));
  const std::string file = "/work/model.cpp";
  b.in_module("fc").at({file, 21, "forward", "x = fc(x);"});
  auto t = b.call("aten::t", {w});
  auto mm = b.call("aten::addmm", {bias, x, t});
  b.in_module("bn").at({file, 22, "forward", "x = bn(x);"});
  b.call("aten::add_.Tensor", {nbt, 1});
  auto bn = b.call("aten::batch_norm", {mm, bw, bb, rm, rv, true, 0.1, 1e-05, false});
  b.in_module("").at({file, 23, "forward", "return torch::relu(x);"});
  b.output(b.call("aten::relu", {bn}));
  auto p = std::move(b).build();
  check_golden("params_buffers.txt", to_string(p));
  check_golden("params_buffers_seed.txt", to_string(p, {print_style::seed}));
}

TEST_CASE("print: multi-output and list-returning ops print getitem lines") {
  program_builder b;
  auto x = b.input("x", at::randn({1, 3, 8, 8}));
  auto rm = b.buffer("rm", at::zeros({3}));
  auto rv = b.buffer("rv", at::ones({3}));
  auto bn = b.call("aten::native_batch_norm", {x, none, none, rm, rv, false, 0.1, 1e-05});
  auto mp = b.call("aten::max_pool2d_with_indices", {bn[0], 2});
  auto flat = b.call("aten::flatten.using_ints", {mp[0], 1});
  auto tk = b.call("aten::topk", {flat, 5});
  auto parts = b.call("aten::split.Tensor", {tk[0], 2, 1});
  b.output(parts[0]).output(parts[2]).output(tk[1]).output(mp[1]);
  auto p = std::move(b).build();
  check_golden("multi_output.txt", to_string(p));
}

TEST_CASE("print: constants, keyword-only arguments and defaults") {
  program_builder b;
  auto x = b.input("x", at::randn({2, 3}));
  auto s = b.call("aten::sum.dim_IntList", {x, std::vector<std::int64_t>{1}, true});
  auto z = b.call("aten::zeros", {std::vector<std::int64_t>{2, 1}},
                  {{"dtype", at::kFloat}, {"device", at::kCPU}, {"pin_memory", false}});
  auto a = b.call("aten::add.Tensor", {s, z}, {{"alpha", 0.5}});
  auto g = b.call("aten::gelu", {a}, {{"approximate", "tanh"}});
  auto c = b.call("aten::clamp", {g, none, 6});
  auto d = b.call("aten::to.dtype", {c, at::kDouble});
  auto e = b.call("aten::mul.Scalar", {d, 1e-05});
  auto f = b.call("aten::empty_like", {e}, {{"memory_format", c10::MemoryFormat::Contiguous}});
  auto h = b.call("aten::fill_.Scalar", {f, -2.5});
  auto i = b.call("aten::sum", {h});
  b.output(e).output(i);
  auto p = std::move(b).build();
  check_golden("constants_kwargs.txt", to_string(p));
}

TEST_CASE("print: graphs without source locations say so once") {
  program_builder b;
  auto x = b.input("x", at::randn({3}));
  auto y = b.call("aten::neg", {x});
  b.output(b.call("aten::abs", {y}));
  auto p = std::move(b).build();
  const auto text = to_string(p);
  CHECK(text.find("            # No stacktrace found for following nodes\n"
                  "            neg: \"f32[3]\" = torch.ops.aten.neg.default(x);  x = None\n"
                  "            abs_1: \"f32[3]\" = torch.ops.aten.abs.default(neg);  neg = None\n"
                  "            return (abs_1,)\n") != std::string::npos);
}

TEST_CASE("print: stride and device annotations on request") {
  program_builder b;
  auto x = b.input("x", at::randn({2, 3}));
  b.output(b.call("aten::t", {x}));
  auto p = std::move(b).build();
  print_options o;
  o.include_stride = true;
  o.include_device = true;
  const auto text = to_string(p, o);
  CHECK(text.find("t: \"f32[3, 2][1, 3]cpu\" = torch.ops.aten.t.default(x)") != std::string::npos);
}

TEST_CASE("print: DOT shows ops, types and edges") {
  check_golden("seed.dot", to_dot(seed_program().graph()));
  program_builder b;
  auto x = b.input("x", at::randn({1, 3, 8, 8}));
  auto mp = b.call("aten::max_pool2d_with_indices", {x, 2});
  b.output(mp[0]).output(mp[1]);
  auto p = std::move(b).build();
  const auto dot = to_dot(p.graph());
  CHECK(dot.find("\"max_pool2d_with_indices\" -> \"output\" [label=\"[1]\"];") != std::string::npos);
  CHECK(dot.find("getitem_1: i64[1, 3, 4, 4]") != std::string::npos);
}
