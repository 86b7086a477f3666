// program_builder: schema binding (defaults, keywords, coercions), the errors for bad calls,
// inferred output types (meta kernels and xport's shape rules) against eager, and the layout of
// the program it builds.
#include <map>
#include <string>
#include <vector>

#include "common.hpp"

using namespace xport;

TEST_CASE("builder: arguments are bound to the schema with defaults filled") {
  program_builder b;
  auto x = b.input("x", at::randn({2, 3}));
  auto n = b.call("aten::add.Tensor", {x, x});
  REQUIRE(n.args().size() == 3);
  CHECK(n.args()[2] == argument(1));  // alpha=1
  auto m = b.call("aten::sum.dim_IntList", {x, std::vector<std::int64_t>{1}}, {{"keepdim", true}});
  CHECK(m.args()[2] == argument(true));
  CHECK(m.args()[3].is_none());  // dtype=None
  CHECK(m.out().meta().annotation() == "f32[2, 1]");
}

TEST_CASE("builder: a factory's shapes are inferred on meta, without allocating") {
  // 100000 x 100000 floats are 40 GB: inference must not make them on the CPU
  program_builder b;
  auto n = b.call("aten::ones", {std::vector<std::int64_t>{100000, 100000}});
  CHECK(n.out().meta().annotation() == "f32[100000, 100000]");
  CHECK(n.out().meta().device == c10::Device(c10::kCPU));
  auto z = b.call("aten::zeros", {std::vector<std::int64_t>{100000, 100000}}, {{"pin_memory", false}});
  CHECK(z.out().meta().annotation() == "f32[100000, 100000]");
}

TEST_CASE("builder: ints widen to floats and fixed-size lists accept one int") {
  program_builder b;
  auto x = b.input("x", at::randn({1, 3, 8, 8}));
  auto l = b.call("aten::leaky_relu", {x, 1});  // Scalar keeps the int
  CHECK(l.args()[1] == argument(1));
  auto e = b.call("aten::elu", {x}, {{"alpha", 2}});
  CHECK(e.args()[1] == argument(2));
  auto c = b.call("aten::clamp", {x, 0, 6});
  CHECK(c.out().meta().annotation() == "f32[1, 3, 8, 8]");
  auto p = b.call("aten::max_pool2d", {x, 2});  // int[2] kernel_size from a single int
  CHECK(p.args()[1] == argument(std::vector<std::int64_t>{2, 2}));
  CHECK(p.out().meta().annotation() == "f32[1, 3, 4, 4]");
  auto d = b.call("aten::dropout", {x, 0, false});  // float p from int 0
  CHECK(d.args()[1].is_double());
}

TEST_CASE("builder: bad calls are errors that name the op, the argument and the type") {
  program_builder b;
  auto x = b.input("x", at::randn({2, 3}));
  const auto size_before = b.graph_ref().size();
  SUBCASE("wrong type") {
    XPORT_CHECK_THROWS_MSG(b.call("aten::add.Tensor", {x, "two"}), schema_error,
                           "[xport.schema.arg_type] aten::add.Tensor: argument 'other' (position 1) "
                           "must be Tensor, got str 'two'\n  schema: aten::add.Tensor(Tensor self, "
                           "Tensor other, *, Scalar alpha=1) -> Tensor");
  }
  SUBCASE("too many positional arguments") {
    XPORT_CHECK_THROWS_MSG(b.call("aten::sin", {x, x}), schema_error,
                           "[xport.schema.too_many_args] aten::sin: takes at most 1 positional "
                           "argument(s), got 2");
  }
  SUBCASE("missing argument") {
    XPORT_CHECK_THROWS_MSG(b.call("aten::mm", {x}), schema_error,
                           "[xport.schema.missing_arg] aten::mm: missing required argument 'mat2' (Tensor)");
  }
  SUBCASE("unknown keyword") {
    XPORT_CHECK_THROWS_MSG(b.call("aten::add.Tensor", {x, x}, {{"beta", 2}}), schema_error,
                           "[xport.schema.unknown_kwarg] aten::add.Tensor: has no argument named "
                           "'beta' (arguments: self, other, alpha)");
  }
  SUBCASE("argument given twice") {
    XPORT_CHECK_THROWS_MSG(b.call("aten::add.Tensor", {x, x}, {{"other", x}}), schema_error,
                           "[xport.schema.duplicate_arg] aten::add.Tensor: argument 'other' given twice");
  }
  SUBCASE("list of the wrong element type") {
    XPORT_CHECK_THROWS_MSG(b.call("aten::view", {x, std::vector<double>{2.0, 3.0}}), schema_error,
                           "argument 'size' (position 1) must be SymInt[], got a list of 2");
  }
  SUBCASE("unknown op") {
    XPORT_CHECK_THROWS_MSG(b.call("aten::sine", {x}), schema_error,
                           "[xport.op.unknown] no operator 'aten::sine' is registered");
  }
  SUBCASE("a value of another builder") {
    program_builder other;
    auto y = other.input("y", at::randn({2, 3}));
    XPORT_CHECK_THROWS_MSG(b.call("aten::add.Tensor", {x, y}), graph_error,
                           "[xport.builder.foreign_value] value 'y' belongs to another graph "
                           "(argument of aten::add.Tensor); use values made by this builder");
  }
  SUBCASE("shapes that do not fit") {
    XPORT_CHECK_THROWS_MSG(b.call("aten::mm", {x, x}), graph_error,
                           "[xport.fake.op_rejected] aten::mm rejected its arguments (self: f32[2, 3], "
                           "mat2: f32[2, 3]): ");
  }
  CHECK(b.graph_ref().size() == size_before);  // a failed call leaves the graph as it was
}

TEST_CASE("builder: a data-dependent op cannot be captured, and says why") {
  program_builder b;
  auto x = b.input("x", at::randn({4}));
  XPORT_CHECK_THROWS_MSG(b.call("aten::nonzero", {x}), graph_break,
                         "[xport.export.graph_break] graph break: aten::nonzero (at::nonzero) reads the contents "
                         "of a tensor, which export cannot know");
}

TEST_CASE("builder: an op with neither meta kernel nor shape rule names the fix") {
  program_builder b;
  auto x = b.input("x", at::randn({4, 4}));
  // _cdist_forward has no meta kernel in LibTorch 1.13 and no xport rule.
  auto op = try_find_op("aten::_cdist_forward");
  REQUIRE(op);
  try {
    b.call(*op, {x, x, 2.0, none});
    MESSAGE("this LibTorch has a meta kernel for _cdist_forward; nothing to check");
  } catch (const missing_fake_kernel& e) {
    const std::string what = e.what();
    CHECK(what.find("[xport.fake.missing_kernel] aten::_cdist_forward has no meta (fake) kernel") == 0);
    CHECK(what.find("Fix: add a shape rule for it") != std::string::npos);
  }
}

TEST_CASE("builder: the fake kernels that live only in torch's Python, and how xport covers each") {
  // tests/data/fake_kernels_torch-2.13.json (tools/fake_kernel_inventory.py; ctest checks it is
  // current): every ATen operator whose fake kernel torch 2.13 gives from Python only.
  const auto inventory =
      nlohmann::json::parse(xport_test::read_file(xport_test::test_dir() + "/data/fake_kernels_torch-2.13.json"));
  std::map<std::string, std::vector<std::string>> by_class;
  std::map<std::string, std::string> class_of;
  for (const auto& row : inventory["ops"]) {
    const std::string name = row["op"];
    const auto* op = try_find_op(name);
    std::string c;
    if (!op) c = "not in this LibTorch";
    else if (op->handle.hasKernelForDispatchKey(c10::DispatchKey::Meta)) c = "LibTorch's C++ Meta kernel";
    else if (xport::detail::find_meta_rule(op->qualified)) c = "xport shape rule";
    else if (xport::detail::is_shape_only(op->qualified)) c = "xport: the CPU kernel on zeros";
#if XPORT_TEST_TORCH_FUNCTIONALIZATION  // xport's ports of torch's decompositions (LibTorch 2.1+)
    else if (xport::detail::torch_decompositions().count(op->qualified) || xport::detail::torch_composite_decompositions().count(op->qualified))
      c = "xport C++ decomposition";
#endif
    else if (xport::detail::reads_data(op->name)) c = "xport data-dependent (unbacked sizes or a graph break)";
    else if (op->handle.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
             op->handle.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
      c = "LibTorch composite (runs on meta tensors)";
    else c = "missing";
    by_class[c].push_back(name);
    class_of[name] = c;
  }
  std::string summary;
  for (const auto& [c, ops] : by_class) summary += "\n  " + std::to_string(ops.size()) + " " + c;
  MESSAGE(inventory["ops"].size() << " operators have their fake kernel in torch " << inventory["torch"].get<std::string>()
                                  << "'s Python only; on LibTorch " << xport::detail::torch_version() << ":" << summary);
  std::string missing;
  for (const auto& name : by_class["missing"]) missing += " " + name;
  MESSAGE("missing (no kernel for meta tensors in LibTorch, no rule in xport):" << missing);
  CHECK(inventory["ops"].size() > 1000);
  // every one the corpora of real models meet (tests/test_corpus.cpp) is covered
  for (const char* used : {"aten::_safe_softmax", "aten::_weight_norm_interface", "aten::floor_divide",
                           "aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices"}) {
    INFO(used);
    REQUIRE(class_of.count(used));
    CHECK(class_of[used] != "missing");
  }
}

TEST_CASE("builder: scaled_dot_product_attention with a mask gets its shape from a rule, which checks the shapes") {
  // LibTorch's meta run of sdpa goes down its math path, which calls where: no C++ meta kernel
  const auto* op = try_find_op("aten::scaled_dot_product_attention");
  if (!op) return;  // LibTorch 1.13 has no sdpa
  program_builder b;
  auto q = b.input("q", at::randn({2, 3, 5, 8}));
  auto k = b.input("k", at::randn({2, 3, 6, 8}));
  auto v = b.input("v", at::randn({2, 3, 6, 4}));
  auto mask = b.input("mask", at::randn({2, 1, 1, 6}));
  const auto out = b.call(*op, {q, k, v, mask});
  CHECK(out.out().meta().annotation() == "f32[2, 3, 5, 4]");
  // a bool mask of the scores' sizes broadcasts; a 0-dim one is refused, as torch's kernel refuses
  // it ("Dimension specified as -2 but tensor has no dimensions")
  auto scalar_mask = b.input("scalar_mask", at::randn({}));
  XPORT_CHECK_THROWS_MSG(b.call(*op, {q, k, v, scalar_mask}), graph_error, "attn_mask of sizes [] does not broadcast");
  auto bool_mask = b.input("bool_mask", at::ones({5, 6}, at::kBool));
  CHECK(b.call(*op, {q, k, v, bool_mask}).out().meta().annotation() == "f32[2, 3, 5, 4]");
  auto wrong = b.input("wrong", at::randn({2, 1, 1, 7}));
  XPORT_CHECK_THROWS_MSG(b.call(*op, {q, k, v, wrong}), graph_error,
                         "[xport.fake.op_rejected] aten::scaled_dot_product_attention rejected its arguments "
                         "(query: f32[2, 3, 5, 8], key: f32[2, 3, 6, 8], value: f32[2, 3, 6, 4], attn_mask: "
                         "f32[2, 1, 1, 7]): attn_mask of sizes [2, 1, 1, 7] does not broadcast to the attention "
                         "scores' [5, 6]");
  XPORT_CHECK_THROWS_MSG(b.call(*op, {q, v, v}), graph_error,
                         "): query's last dimension (8) must equal key's (4)");
}

namespace {

struct meta_case {
  const char* name;
  std::function<node(program_builder&, value)> build;
  std::function<std::vector<at::Tensor>(const at::Tensor&)> eager;
  std::vector<std::int64_t> input_shape{1, 3, 8, 8};
};

}  // namespace

TEST_CASE("builder: inferred output types match eager, including ops without meta kernels") {
  const std::vector<meta_case> cases = {
      {"relu", [](auto& b, value x) { return b.call("aten::relu", {x}); },
       [](const at::Tensor& x) { return std::vector<at::Tensor>{at::relu(x)}; }},
      {"hardtanh", [](auto& b, value x) { return b.call("aten::hardtanh", {x, -1, 1}); },
       [](const at::Tensor& x) { return std::vector<at::Tensor>{at::hardtanh(x, -1, 1)}; }},
      {"conv2d", [](auto& b, value x) {
         auto w = b.parameter("w", at::randn({5, 3, 3, 3}));
         return b.call("aten::conv2d", {x, w, none, 2, 1});
       },
       [](const at::Tensor& x) { return std::vector<at::Tensor>{at::conv2d(x, at::randn({5, 3, 3, 3}), {}, 2, 1)}; }},
      {"convolution transposed", [](auto& b, value x) {
         auto w = b.parameter("w", at::randn({3, 4, 3, 3}));
         return b.call("aten::convolution", {x, w, none, std::vector<std::int64_t>{2, 2}, std::vector<std::int64_t>{1, 1},
                                             std::vector<std::int64_t>{1, 1}, true, std::vector<std::int64_t>{1, 1}, 1});
       },
       [](const at::Tensor& x) {
         return std::vector<at::Tensor>{at::convolution(x, at::randn({3, 4, 3, 3}), {}, {2, 2}, {1, 1}, {1, 1}, true, {1, 1}, 1)};
       }},
      {"native_batch_norm train", [](auto& b, value x) {
         auto rm = b.buffer("rm", at::zeros({3}));
         auto rv = b.buffer("rv", at::ones({3}));
         return b.call("aten::native_batch_norm", {x, none, none, rm, rv, true, 0.1, 1e-5});
       },
       [](const at::Tensor& x) {
         auto r = at::native_batch_norm(x, {}, {}, at::zeros({3}), at::ones({3}), true, 0.1, 1e-5);
         return std::vector<at::Tensor>{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
       }},
      {"native_batch_norm eval", [](auto& b, value x) {
         auto rm = b.buffer("rm", at::zeros({3}));
         auto rv = b.buffer("rv", at::ones({3}));
         return b.call("aten::native_batch_norm", {x, none, none, rm, rv, false, 0.1, 1e-5});
       },
       [](const at::Tensor& x) {
         auto r = at::native_batch_norm(x, {}, {}, at::zeros({3}), at::ones({3}), false, 0.1, 1e-5);
         return std::vector<at::Tensor>{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
       }},
      {"native_layer_norm", [](auto& b, value x) {
         return b.call("aten::native_layer_norm", {x, std::vector<std::int64_t>{8, 8}, none, none, 1e-5});
       },
       [](const at::Tensor& x) {
         auto r = at::native_layer_norm(x, {8, 8}, {}, {}, 1e-5);
         return std::vector<at::Tensor>{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
       }},
      {"native_group_norm", [](auto& b, value x) {
         return b.call("aten::native_group_norm", {x, none, none, 1, 3, 64, 3, 1e-5});
       },
       [](const at::Tensor& x) {
         auto r = at::native_group_norm(x, {}, {}, 1, 3, 64, 3, 1e-5);
         return std::vector<at::Tensor>{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
       }},
      {"index_select", [](auto& b, value x) {
         auto i = b.constant("idx", at::tensor({0, 2}, at::kLong));
         return b.call("aten::index_select", {x, 1, i});
       },
       [](const at::Tensor& x) { return std::vector<at::Tensor>{at::index_select(x, 1, at::tensor({0, 2}, at::kLong))}; }},
      {"embedding", [](auto& b, value x) {
         auto w = b.parameter("emb", at::randn({10, 4}));
         return b.call("aten::embedding", {w, x});
       },
       [](const at::Tensor& x) { return std::vector<at::Tensor>{at::embedding(at::randn({10, 4}), x)}; },
       {2, 5}},
      {"where", [](auto& b, value x) {
         auto c = b.call("aten::gt.Scalar", {x, 0});
         auto z = b.constant("z", at::zeros({8}, at::kDouble));
         return b.call("aten::where.self", {c, x, z});
       },
       [](const at::Tensor& x) { return std::vector<at::Tensor>{at::where(x > 0, x, at::zeros({8}, at::kDouble))}; }},
      {"var", [](auto& b, value x) { return b.call("aten::var.correction", {x, std::vector<std::int64_t>{2, 3}}, {{"keepdim", true}}); },
       [](const at::Tensor& x) { return std::vector<at::Tensor>{at::var(x, {2, 3}, /*unbiased=*/true, /*keepdim=*/true)}; }},
      {"adaptive_avg_pool2d", [](auto& b, value x) { return b.call("aten::_adaptive_avg_pool2d", {x, std::vector<std::int64_t>{3, 3}}); },
       [](const at::Tensor& x) { return std::vector<at::Tensor>{at::_adaptive_avg_pool2d(x, {3, 3})}; }},
      {"max_pool2d_with_indices", [](auto& b, value x) { return b.call("aten::max_pool2d_with_indices", {x, 3, 2, 1}); },
       [](const at::Tensor& x) {
         auto r = at::max_pool2d_with_indices(x, 3, 2, 1);
         return std::vector<at::Tensor>{std::get<0>(r), std::get<1>(r)};
       }},
      {"split", [](auto& b, value x) { return b.call("aten::split.Tensor", {x, 3, 2}); },
       [](const at::Tensor& x) { return at::split(x, 3, 2); }},
  };
  for (const auto& c : cases) {
    SUBCASE(c.name) {
      program_builder b;
      const auto example = std::string(c.name) == "embedding" ? at::randint(10, c.input_shape, at::kLong)
                                                               : at::randn(c.input_shape);
      auto x = b.input("x", example);
      auto n = c.build(b, x);
      const auto expected = c.eager(example);
      REQUIRE(n.num_outputs() == expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("output " << i);
        CHECK((n.output(i).meta().size_hints() == expected[i].sizes().vec()));
        CHECK((n.output(i).meta().dtype == expected[i].scalar_type()));
        CHECK((n.output(i).meta().device == expected[i].device()));
      }
    }
  }
}

TEST_CASE("builder: lifted state is named as torch.export names it and ordered first") {
  program_builder b;
  auto x = b.input("x", at::randn({2, 4}));
  auto w = b.parameter("fc.weight", at::randn({3, 4}));
  auto bias = b.parameter("fc.bias", at::randn({3}));
  auto rm = b.buffer("Block.running_mean", at::zeros({3}));
  auto tmp = b.buffer("cache", at::zeros({3}), /*persistent=*/false);
  auto k = b.constant("scale", at::ones({}));
  auto wt = b.call("aten::t", {w});
  auto y = b.call("aten::addmm", {bias, x, wt});
  auto z = b.call("aten::add.Tensor", {y, rm});
  auto z2 = b.call("aten::add.Tensor", {z, tmp});
  auto out = b.call("aten::mul.Tensor", {z2, k});
  b.output(out);
  auto p = std::move(b).build();
  const auto& specs = p.signature().input_specs;
  REQUIRE(specs.size() == 6);
  CHECK(specs[0].str() == "p_fc_weight: PARAMETER target='fc.weight'");
  CHECK(specs[1].str() == "p_fc_bias: PARAMETER target='fc.bias'");
  CHECK(specs[2].str() == "b_block_running_mean: BUFFER target='Block.running_mean' persistent=True");
  CHECK(specs[3].str() == "b_cache: BUFFER target='cache' persistent=False");
  CHECK(specs[4].str() == "c_scale: CONSTANT_TENSOR target='scale'");
  CHECK(specs[5].str() == "x: USER_INPUT");
  const auto phs = p.graph().placeholders();
  for (std::size_t i = 0; i < phs.size(); ++i) CHECK(phs[i].name() == specs[i].arg.name);
  CHECK(p.state_dict().size() == 3);
  CHECK(p.constants().size() == 2);
  CHECK((p.signature().parameters() == std::vector<std::string>{"fc.weight", "fc.bias"}));
  CHECK((p.signature().buffers() == std::vector<std::string>{"Block.running_mean", "cache"}));
  CHECK((p.signature().non_persistent_buffers() == std::vector<std::string>{"cache"}));
  CHECK((p.signature().user_inputs() == std::vector<std::string>{"x"}));
  CHECK((p.signature().user_outputs() == std::vector<std::string>{"mul"}));
  CHECK((p.signature().inputs_to_parameters() ==
        graph_signature::name_map{{"p_fc_weight", "fc.weight"}, {"p_fc_bias", "fc.bias"}}));
  CHECK(p.named_buffers().size() == 2);
  CHECK(p.named_buffers()[1].first == "cache");
  CHECK(p.example_inputs().has_value());
  (void)tmp;
}

TEST_CASE("builder: mutation outputs are placed before user outputs") {
  program_builder b;
  auto x = b.input("x", at::randn({3}));
  auto buf = b.buffer("count", at::zeros({3}));
  auto y = b.call("aten::sin", {x});
  b.output(y);
  auto upd = b.call("aten::add.Tensor", {buf, 1});
  b.output(upd, output_kind::buffer_mutation, "count");
  auto p = std::move(b).build(ir_dialect::aten);
  CHECK(p.signature().output_specs[0].str() == "add: BUFFER_MUTATION target='count'");
  CHECK(p.signature().output_specs[1].str() == "sin: USER_OUTPUT");
  CHECK((p.signature().buffers_to_mutate() == graph_signature::name_map{{"add", "count"}}));
  CHECK(p.graph().outputs()[0] == upd.out());
}
