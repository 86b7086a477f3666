// verify(): every invariant of the graph and of the signature, each broken on purpose once.
#include "common.hpp"

using namespace xport;

namespace {

// x (user), w (parameter), rm (persistent buffer), tmp (non-persistent buffer), k (constant)
exported_program sample(ir_dialect d = ir_dialect::training) {
  program_builder b;
  auto x = b.input("x", at::randn({2, 3}));
  auto w = b.parameter("w", at::randn({2, 3}));
  auto rm = b.buffer("rm", at::zeros({3}));
  auto tmp = b.buffer("tmp", at::zeros({3}), false);
  auto k = b.constant("k", at::ones({3}));
  auto a = b.call("aten::mul.Tensor", {x, w});
  auto c = b.call("aten::add.Tensor", {a, rm});
  auto e = b.call("aten::add.Tensor", {c, tmp});
  auto f = b.call("aten::mul.Tensor", {e, k});
  auto upd = b.call("aten::add.Tensor", {rm, 1});
  b.output(upd, output_kind::buffer_mutation, "rm");
  b.output(f);
  return std::move(b).build(d);
}

node find(const graph& g, const std::string& name) {
  for (auto n : g.nodes())
    if (n.name() == name) return n;
  FAIL("no node " << name);
  return {};
}

template <class F>
void expect_verify_error(exported_program& p, F&& breakit, const std::string& id, const std::string& fragment) {
  breakit(p);
  try {
    verify(p);
    FAIL_CHECK("verify() accepted a program with a broken '" << id << "' rule");
  } catch (const verify_error& e) {
    CHECK(e.id() == id);
    INFO("message: " << e.what());
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("verify: a well-formed program passes") {
  auto p = sample();
  verify(p);
  verify(p.graph());
}

TEST_CASE("verify: graph structure rules") {
  auto p = sample();
  SUBCASE("use before def") {
    expect_verify_error(p, [](auto& q) {
      auto& g = q.graph_mut();
      g.move_before(find(g, "add"), find(g, "mul"));
    }, "xport.verify.use_before_def", "'add' uses 'mul' (operand 0) before it is defined");
  }
  SUBCASE("use list out of sync") {
    expect_verify_error(p, [](auto& q) {
      auto& g = q.graph_mut();
      find(g, "x").output(0).impl()->uses.clear();
    }, "xport.verify.use_list", "'x' is operand 0 of 'mul' but its use list does not record it");
  }
  SUBCASE("a use that no operand matches") {
    expect_verify_error(p, [](auto& q) {
      auto& g = q.graph_mut();
      auto x = find(g, "x").output(0);
      x.impl()->uses.push_back(use{find(g, "add_1").impl(), 0});
    }, "xport.verify.use_list", "'x' records a use that no operand matches");
  }
  SUBCASE("duplicate names") {
    expect_verify_error(p, [](auto& q) {
      auto& g = q.graph_mut();
      find(g, "mul_1").output(0).impl()->name = "mul";
    }, "xport.verify.duplicate_name", "the name 'mul' is used twice");
  }
  SUBCASE("placeholder after a call") {
    expect_verify_error(p, [](auto& q) {
      auto& g = q.graph_mut();
      g.move_before(find(g, "c_k"), find(g, "mul_1"));  // c_k is first used by mul_1
    }, "xport.verify.placeholder_order", "placeholder 'c_k' comes after a call node");
  }
  SUBCASE("output node not last") {
    expect_verify_error(p, [](auto& q) {
      auto& g = q.graph_mut();
      auto dead = g.create_call(find_op("aten::cos"), {find(g, "x").output(0)},
                                {find(g, "x").output(0).type()});
      g.move_before(dead, node());  // a null position appends: after the output node
    }, "xport.verify.output_not_last", "node 'cos' comes after the output node");
  }
  SUBCASE("argument count") {
    expect_verify_error(p, [](auto& q) {
      auto& g = q.graph_mut();
      auto n = find(g, "add");
      n.impl()->args.pop_back();  // drop alpha behind the graph's back
    }, "xport.verify.arg_count", "'add' calls aten::add.Tensor with 2 arguments; its schema has 3");
  }
  SUBCASE("argument type") {
    expect_verify_error(p, [](auto& q) {
      auto& g = q.graph_mut();
      auto n = find(g, "add");
      std::vector<argument> args(n.args().begin(), n.args().end());
      args[2] = "one";
      n.set_args(args);
    }, "xport.verify.arg_type", "'add' passes str 'one' as argument 'alpha' of aten::add.Tensor, which must be Scalar");
  }
  SUBCASE("output count") {
    xport::detail::value_impl extra;
    node n = find(p.graph(), "add_2");
    expect_verify_error(p, [&](auto&) {
      extra.producer = n.impl();
      extra.name = "extra";
      n.impl()->outputs.push_back(&extra);
    }, "xport.verify.output_count", "'add_2' has 2 outputs; aten::add.Tensor returns 1");
    n.impl()->outputs.pop_back();  // `extra` is not the graph's to free
  }
  SUBCASE("no output node") {
    graph g;
    g.add_placeholder("x", value_type::of(tensor_meta::contiguous(at::kFloat, {1})));
    XPORT_CHECK_THROWS_MSG(verify(g), verify_error,
                           "[xport.verify.no_output] the graph has no output node");
  }
}

TEST_CASE("verify: the ATEN dialect allows no mutable ops") {
  program_builder b;
  auto x = b.input("x", at::randn({3}));
  auto y = b.call("aten::mul.Scalar", {x, 2});
  auto z = b.call("aten::add_.Tensor", {y, x});
  b.output(z);
  XPORT_CHECK_THROWS_MSG(std::move(b).build(ir_dialect::aten), verify_error,
                         "[xport.verify.not_functional] operator 'aten::add_.Tensor' (node 'add_') is not "
                         "functional; the ATEN dialect allows no in-place or out= ops");
}

TEST_CASE("verify: signature rules") {
  auto p = sample();
  SUBCASE("input count") {
    expect_verify_error(p, [](auto& q) { q.signature_mut().input_specs.pop_back(); },
                        "xport.verify.signature.input_count",
                        "the graph has 5 placeholders but the signature has 4 input specs");
  }
  SUBCASE("input name") {
    expect_verify_error(p, [](auto& q) { q.signature_mut().input_specs[0].arg.name = "q"; },
                        "xport.verify.signature.input_name", "input spec 0 names 'q' but placeholder 0 is 'p_w'");
  }
  SUBCASE("lifted input after a user input") {
    expect_verify_error(p, [](auto& q) {
      auto& s = q.signature_mut().input_specs;
      std::swap(s[0], s[4]);
      auto& g = q.graph_mut();
      g.move_before(find(g, "p_w"), find(g, "mul"));
      g.move_before(find(g, "x"), find(g, "b_rm"));
    }, "xport.verify.signature.input_order", "input 'b_rm' (BUFFER) comes after a user input");
  }
  SUBCASE("parameter missing from the state dict") {
    expect_verify_error(p, [](auto& q) { q.state_dict_mut().erase("w"); },
                        "xport.verify.signature.missing_parameter",
                        "parameter 'w' (input 'p_w') is not in the state dict");
  }
  SUBCASE("buffer without persistent flag") {
    expect_verify_error(p, [](auto& q) { q.signature_mut().input_specs[1].persistent.reset(); },
                        "xport.verify.signature.persistent", "Failed to specify persistent flag on BUFFER.");
  }
  SUBCASE("non-persistent buffer in the state dict") {
    expect_verify_error(p, [](auto& q) { q.state_dict_mut().set("tmp", at::zeros({3})); },
                        "xport.verify.signature.non_persistent_in_state",
                        "Non-persistent buffer tmp is in the state dict, it should not be.");
  }
  SUBCASE("constant missing") {
    expect_verify_error(p, [](auto& q) { q.constants_mut().erase("k"); },
                        "xport.verify.signature.missing_constant",
                        "CONSTANT_TENSOR 'k' (input 'c_k') is not in the constants");
  }
  SUBCASE("state tensor of the wrong shape") {
    expect_verify_error(p, [](auto& q) { q.state_dict_mut().set("w", at::zeros({3, 2})); },
                        "xport.verify.signature.state_meta",
                        "PARAMETER 'w' is f32[3, 2] but placeholder 'p_w' says f32[2, 3]");
  }
  SUBCASE("output count") {
    expect_verify_error(p, [](auto& q) { q.signature_mut().output_specs.pop_back(); },
                        "xport.verify.signature.output_count",
                        "the graph returns 2 values but the signature has 1 output specs");
  }
  SUBCASE("output name") {
    expect_verify_error(p, [](auto& q) { q.signature_mut().output_specs[1].arg.name = "add"; },
                        "xport.verify.signature.output_name",
                        "output spec 1 names 'add' but the graph returns mul_1");
  }
  SUBCASE("mutation after a user output") {
    expect_verify_error(p, [](auto& q) {
      auto& s = q.signature_mut().output_specs;
      std::swap(s[0], s[1]);
      auto& g = q.graph_mut();
      auto outs = g.outputs();
      g.set_output({outs[1], outs[0]});
    }, "xport.verify.signature.output_order", "output 'add_2' (BUFFER_MUTATION) comes after a later kind of output");
  }
  SUBCASE("mutation of something that is not a buffer") {
    expect_verify_error(p, [](auto& q) { q.signature_mut().output_specs[0].target = "w"; },
                        "xport.verify.signature.mutation_target",
                        "Mutation node add_2 is neither a buffer nor a user input.");
  }
}

TEST_CASE("verify: errors carry the offending node") {
  auto p = sample();
  auto& g = p.graph_mut();
  g.move_before(find(g, "add"), find(g, "mul"));
  try {
    verify(g);
    FAIL("expected a verify_error");
  } catch (const verify_error& e) {
    CHECK(e.node() == "add");
  }
}
