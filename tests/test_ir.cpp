// IR building blocks: dtype spellings, Python reprs, names, sym_int, tensor_meta, op lookup,
// and the graph's use lists and order under every mutation.
#include "common.hpp"

using namespace xport;

TEST_CASE("dtype: abbreviations are torch's") {
  CHECK(dtype_abbr(at::kFloat) == "f32");
  CHECK(dtype_abbr(at::kDouble) == "f64");
  CHECK(dtype_abbr(at::kHalf) == "f16");
  CHECK(dtype_abbr(at::kBFloat16) == "bf16");
  CHECK(dtype_abbr(at::kComplexHalf) == "c32");
  CHECK(dtype_abbr(at::kComplexFloat) == "c64");
  CHECK(dtype_abbr(at::kComplexDouble) == "c128");
  CHECK(dtype_abbr(at::kChar) == "i8");
  CHECK(dtype_abbr(at::kShort) == "i16");
  CHECK(dtype_abbr(at::kInt) == "i32");
  CHECK(dtype_abbr(at::kLong) == "i64");
  CHECK(dtype_abbr(at::kBool) == "b8");
  CHECK(dtype_abbr(at::kByte) == "u8");
  CHECK(python_repr(at::kFloat) == "torch.float32");
  CHECK(python_repr(at::kLong) == "torch.int64");
  CHECK(python_repr(at::kBool) == "torch.bool");
  CHECK(python_repr(at::kBFloat16) == "torch.bfloat16");
}

TEST_CASE("dtype: devices, layouts and memory formats print as Python prints them") {
  CHECK(python_repr(c10::Device(c10::kCPU)) == "device(type='cpu')");
  CHECK(python_repr(c10::Device(c10::kCUDA, 1)) == "device(type='cuda', index=1)");
  CHECK(python_repr(c10::kStrided) == "torch.strided");
  CHECK(python_repr(c10::MemoryFormat::ChannelsLast) == "torch.channels_last");
  CHECK(python_repr(c10::MemoryFormat::Contiguous) == "torch.contiguous_format");
}

TEST_CASE("python repr: floats print like Python's repr") {
  using xport::detail::python_float_repr;
  CHECK(python_float_repr(1.0) == "1.0");
  CHECK(python_float_repr(0.1) == "0.1");
  CHECK(python_float_repr(1e-05) == "1e-05");
  CHECK(python_float_repr(0.0001) == "0.0001");
  CHECK(python_float_repr(1e16) == "1e+16");
  CHECK(python_float_repr(1e15) == "1000000000000000.0");
  CHECK(python_float_repr(123.456) == "123.456");
  CHECK(python_float_repr(-2.5) == "-2.5");
  CHECK(python_float_repr(-0.0) == "-0.0");
  CHECK(python_float_repr(0.0) == "0.0");
  CHECK(python_float_repr(2.5e-08) == "2.5e-08");
  CHECK(python_float_repr(1.7976931348623157e308) == "1.7976931348623157e+308");
  CHECK(python_float_repr(5e-324) == "5e-324");
  CHECK(python_float_repr(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(python_float_repr(-std::numeric_limits<double>::infinity()) == "-inf");
  CHECK(python_float_repr(std::nan("")) == "nan");
  CHECK(python_float_repr(0.30000000000000004) == "0.30000000000000004");
}

TEST_CASE("python repr: strings quote and escape like Python's repr") {
  using xport::detail::python_str_repr;
  CHECK(python_str_repr("tanh") == "'tanh'");
  CHECK(python_str_repr("it's") == "\"it's\"");
  CHECK(python_str_repr("a'b\"c") == "'a\\'b\"c'");
  CHECK(python_str_repr("x\ny\t\\") == "'x\\ny\\t\\\\'");
  CHECK(python_str_repr(std::string("\x01", 1)) == "'\\x01'");
}

TEST_CASE("names: fresh names follow torch.fx") {
  xport::detail::name_table t;
  CHECK(t.create("add") == "add");
  CHECK(t.create("add") == "add_1");
  CHECK(t.create("add") == "add_2");
  CHECK(t.create("sum") == "sum_1");  // a Python builtin is never used bare
  CHECK(t.create("input") == "input_1");
  CHECK(t.create("getitem") == "getitem");
  CHECK(t.create("getitem") == "getitem_1");
  CHECK(t.create("max_pool2d_with_indices") == "max_pool2d_with_indices");
  CHECK(t.create("conv.weight") == "conv_weight");
  CHECK(t.create("2d") == "_2d");
  CHECK(t.create("camelCase") == "camel_case");
  CHECK(t.create("add_1") == "add_3");  // taken: torch.fx counts on from the base
  CHECK(t.claim("fresh"));
  CHECK_FALSE(t.claim("fresh"));
  CHECK_FALSE(t.claim("lambda"));
}

TEST_CASE("sym_int: constants compare, print, and refuse to be symbolic") {
  sym_int a = 10, b = 10, c = 3;
  CHECK(a == b);
  CHECK_FALSE(a == c);
  CHECK(a == std::int64_t{10});
  CHECK(a.is_constant());
  CHECK(a.str() == "10");
  CHECK(a.value() == 10);
  CHECK(a.maybe_value() == 10);
}

TEST_CASE("tensor_meta: of(), annotation and contiguous strides") {
  auto t = at::zeros({2, 3, 4}, at::kDouble).transpose(0, 2);
  auto m = tensor_meta::of(t);
  CHECK(m.annotation() == "f64[4, 3, 2]");
  CHECK((m.stride_hints() == std::vector<std::int64_t>{1, 4, 12}));
  CHECK(m.dim() == 3);
  CHECK(tensor_meta::of(at::zeros({}, at::kLong)).annotation() == "i64[]");
  auto c = tensor_meta::contiguous(at::kFloat, {2, 0, 5});
  CHECK((c.stride_hints() == std::vector<std::int64_t>{5, 5, 1}));
  auto mt = m.make_meta();
  CHECK(mt.is_meta());
  CHECK((mt.sizes() == t.sizes()));
  CHECK(mt.strides() == t.strides());
}

TEST_CASE("op: lookup accepts every spelling torch uses") {
  const auto& a = find_op("aten::add.Tensor");
  CHECK(&find_op("torch.ops.aten.add.Tensor") == &a);
  CHECK(&find_op("aten.add.Tensor") == &a);
  CHECK(a.target == "torch.ops.aten.add.Tensor");
  CHECK(a.packet == "add");
  CHECK_FALSE(a.is_mutable);
  const auto& s = find_op("aten::sin");
  CHECK(&find_op("aten::sin.default") == &s);
  CHECK(s.target == "torch.ops.aten.sin.default");
  CHECK(find_op("aten::add_.Tensor").is_mutable);
  CHECK(find_op("aten::split.Tensor").returns_list);
  CHECK(find_op("aten::view").is_view);
  CHECK(try_find_op("aten::no_such_op") == nullptr);
}

TEST_CASE("op: an unknown op names the known overloads") {
  XPORT_CHECK_THROWS_MSG(find_op("aten::add.Tensr"), schema_error,
                         "[xport.op.unknown] no operator 'aten::add.Tensr' is registered in this LibTorch");
  XPORT_CHECK_THROWS_MSG(find_op("aten::add.Tensr"), schema_error, "aten::add.Tensor");
  XPORT_CHECK_THROWS_MSG(find_op("aten::frobnicate"), schema_error,
                         "write it as 'namespace::name.overload', e.g. 'aten::add.Tensor'");
}

namespace {
value_type f32(sym_shape sizes) { return value_type::of(tensor_meta::contiguous(at::kFloat, std::move(sizes))); }
}  // namespace

TEST_CASE("graph: a use records its operand index, so add(x, x) uses x twice") {
  graph g;
  auto x = g.add_placeholder("x", f32({2}));
  auto n = g.create_call(find_op("aten::add.Tensor"), {x, x, 1}, {f32({2})});
  g.set_output({n.out()});
  REQUIRE(x.num_uses() == 2);
  CHECK(x.uses()[0].user() == n);
  CHECK(x.uses()[0].index == 0);
  CHECK(x.uses()[1].index == 1);
  CHECK(n.num_inputs() == 2);
  CHECK(n.out().num_uses() == 1);
  CHECK(n.out().uses()[0].user() == g.output_node());
  verify(g);
}

TEST_CASE("graph: replace_input and replace_all_uses_with update use lists") {
  graph g;
  auto x = g.add_placeholder("x", f32({2}));
  auto y = g.add_placeholder("y", f32({2}));
  auto a = g.create_call(find_op("aten::mul.Tensor"), {x, x}, {f32({2})});
  auto b = g.create_call(find_op("aten::sin"), {a}, {f32({2})});
  g.set_output({b.out(), a.out()});
  a.replace_input(1, y);
  CHECK(x.num_uses() == 1);
  CHECK(y.num_uses() == 1);
  CHECK(a.input(1) == y);
  verify(g);
  value(a).replace_all_uses_with(x);
  CHECK(a.out().num_uses() == 0);
  CHECK(x.num_uses() == 3);
  CHECK(b.input(0) == x);
  CHECK(g.outputs()[1] == x);
  verify(g);
  g.erase(a);
  CHECK(x.num_uses() == 2);
  CHECK(y.num_uses() == 0);
  CHECK(g.size() == 4);
  verify(g);
}

TEST_CASE("graph: erasing a node that is still used is refused and changes nothing") {
  graph g;
  auto x = g.add_placeholder("x", f32({2}));
  auto a = g.create_call(find_op("aten::sin"), {x}, {f32({2})});
  g.set_output({a.out()});
  XPORT_CHECK_THROWS_MSG(g.erase(a), graph_error,
                         "[xport.graph.erase_used] cannot erase node 'sin': its output 'sin' still has 1 use(s)");
  CHECK(g.size() == 3);
  verify(g);
}

TEST_CASE("graph: nodes keep topological order keys through inserts and moves") {
  graph g;
  auto x = g.add_placeholder("x", f32({2}));
  auto a = g.create_call(find_op("aten::sin"), {x}, {f32({2})});
  g.set_output({a.out()});
  // insert many nodes right after x, always at the same spot, to exhaust the key gaps
  node before = a;
  for (int i = 0; i < 64; ++i) before = g.create_call(find_op("aten::cos"), {x}, {f32({2})}, before);
  verify(g);
  node prev;
  for (auto n : g.nodes()) {
    if (prev) CHECK(prev.is_before(n));
    prev = n;
  }
  CHECK(g.placeholders().size() == 1);
  CHECK(g.size() == 67);
}

TEST_CASE("graph: placeholders must be fresh identifiers") {
  graph g;
  g.add_placeholder("x", f32({1}));
  XPORT_CHECK_THROWS_MSG(g.add_placeholder("x", f32({1})), graph_error, "[xport.graph.duplicate_name]");
  XPORT_CHECK_THROWS_MSG(g.add_placeholder("1x", f32({1})), graph_error,
                         "[xport.graph.bad_name] placeholder name '1x' is not a valid Python identifier");
  CHECK(g.add_placeholder_fresh("x", f32({1})).name() == "x_1");
}

TEST_CASE("graph: clone is deep and prints the same") {
  graph g;
  auto x = g.add_placeholder("x", f32({2, 3}));
  auto a = g.create_call(find_op("aten::relu"), {x}, {f32({2, 3})});
  auto mp = g.create_call(find_op("aten::topk"), {a, 2, 1, true, true}, {f32({2, 2}), value_type::of(tensor_meta::contiguous(at::kLong, {2, 2}))});
  g.set_output({mp[0], mp[1]});
  std::unordered_map<xport::detail::value_impl*, value> map;
  graph c = g.clone(&map);
  verify(c);
  CHECK(to_string(c) == to_string(g));
  CHECK(map.at(x.impl()) != x);
  CHECK(map.at(x.impl()).name() == "x");
  CHECK(c.size() == g.size());
}

TEST_CASE("graph: moving a graph keeps its nodes' owner") {
  graph g;
  auto x = g.add_placeholder("x", f32({2}));
  auto a = g.create_call(find_op("aten::sin"), {x}, {f32({2})});
  g.set_output({a.out()});
  graph h = std::move(g);
  CHECK(&a.owning_graph() == &h);
  CHECK(g.empty());
  verify(h);
}
