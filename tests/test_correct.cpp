// Correct on every input: a program gives eager's result for every input its guards accept, or a
// typed error says why not. Layouts (transposed, sliced, channels_last) through both IRs, the
// default dtype of factories, state a program mutates (never folded), questions metadata
// answers (at::equal on other sizes), None outputs, no-grad updates of parameters, size
// products, data-dependent calls, and a table of ops real models call.
#include <torch/torch.h>

#include "common.hpp"

using namespace xport;
using xport_test::layouts_of;

namespace {

using tensors = std::vector<at::Tensor>;

void check_same(const at::Tensor& got, const at::Tensor& want, double rtol = 1e-4, double atol = 1e-5) {
  REQUIRE(got.defined());
  CHECK((got.sizes() == want.sizes()));
  CHECK((got.scalar_type() == want.scalar_type()));
  if (got.sizes() == want.sizes()) CHECK(at::allclose(got.to(at::kDouble), want.to(at::kDouble), rtol, atol));
}

// Both IRs of `p`: the training IR as exported and run_decompositions()'s, whose calls are all
// core ATen (the running LibTorch's set) or ops no decomposition is known for (torch keeps those).
std::vector<std::pair<const char*, exported_program>> both_irs(const exported_program& p) {
  std::vector<std::pair<const char*, exported_program>> out;
  out.emplace_back("training IR", p.clone());
  out.emplace_back("inference IR", run_decompositions(p));
  for (auto n : out.back().second.graph().nodes())
    if (n.is_call()) {
      INFO("non-core op in the inference IR: " << n.op().qualified);
      CHECK((xport::detail::is_core_op(n.op()) || !decomposition_table::core_aten().decomposes(n.op())));
    }
  return out;
}

// Runs `p` in both IRs on every layout of every input (one input varied at a time) against `f`.
template <class F>
void check_layouts(const exported_program& p, F&& f, const tensors& inputs) {
  for (const auto& [ir, q] : both_irs(p)) {
    INFO(ir << ":\n" << to_string(q));
    for (std::size_t i = 0; i < inputs.size(); ++i)
      for (const auto& [layout, x] : layouts_of(inputs[i])) {
        INFO("input " << i << " " << layout);
        auto args = inputs;
        args[i] = x;
        check_same(run(q, args)[0], f(inputs));
      }
  }
}

struct Counter : torch::nn::Module {
  Counter() {
    count = register_buffer("count", torch::zeros({1}));
    scale = register_buffer("scale", torch::full({1}, 3.0));
  }
  torch::Tensor forward(torch::Tensor x) {
    count.add_(1);
    return x * (scale * 2) + count;
  }
  torch::Tensor count, scale;
};

struct MaxNormEmbedding : torch::nn::Module {
  torch::nn::Embedding emb{torch::nn::EmbeddingOptions(10, 4).max_norm(1.0)};
  MaxNormEmbedding() { register_module("emb", emb); }
  torch::Tensor forward(torch::Tensor i) { return emb(i); }
};

struct Decoder : torch::nn::Module {
  torch::nn::TransformerDecoderLayer layer{torch::nn::TransformerDecoderLayerOptions(16, 2).dim_feedforward(32).dropout(0.0)};
  Decoder() { register_module("layer", layer); }
  torch::Tensor forward(torch::Tensor tgt, torch::Tensor memory) { return layer(tgt, memory); }
};

struct Attention : torch::nn::Module {
  torch::nn::MultiheadAttention mha{torch::nn::MultiheadAttentionOptions(8, 2)};
  Attention() { register_module("mha", mha); }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor q) { return mha->forward(q, q, q, at::Tensor(), /*need_weights=*/false); }
};

}  // namespace

TEST_CASE("layouts: reshape, flatten and decomposed views give eager's result for every input layout") {
  torch::manual_seed(0);
  const auto w = at::randn({5, 4 * 6 * 6}), cw = at::randn({4, 3, 3, 3});
  const std::vector<std::pair<const char*, std::function<at::Tensor(const tensors&)>>> cases = {
      {"reshape", [](const tensors& x) { return x[0].reshape({-1, 4}) * 2; }},
      {"flatten", [](const tensors& x) { return x[0].flatten(1).relu(); }},
      {"permute + reshape", [](const tensors& x) { return x[0].permute({2, 0, 1}).reshape({4, -1}); }},
      {"matmul (decomposes to views)", [](const tensors& x) { return x[0].matmul(x[0].transpose(-1, -2)); }},
      {"unflatten + sum", [](const tensors& x) { return x[0].unflatten(2, {2, 2}).sum(-1); }},
  };
  const auto x = at::randn({2, 3, 4});
  for (const auto& [name, f] : cases) {
    INFO(name);
    auto p = export_program([&](const at::Tensor& a) { return f({a}); }, std::tuple{x});
    check_layouts(p, f, {x});
  }
  // conv -> flatten -> linear, the classifier head of every CNN: channels_last in, or exported
  // from a channels_last example and given a contiguous one
  const auto head = [&](const tensors& a) { return at::linear(at::conv2d(a[0], cw).flatten(1), w); };
  const auto img = at::randn({2, 3, 8, 8});
  check_layouts(export_program([&](const at::Tensor& a) { return head({a}); }, std::tuple{img}), head, {img});
  auto from_cl = export_program([&](const at::Tensor& a) { return head({a}); },
                                std::tuple{img.contiguous(at::MemoryFormat::ChannelsLast)});
  check_layouts(from_cl, head, {img});
}

TEST_CASE("layouts: an input the program writes in place is written, whatever its layout") {
  auto p = export_program(
      [](const at::Tensor& x) {
        x.mul_(2);
        return x.sum(0);
      },
      std::tuple{at::randn({3, 4})});
  for (const auto& [ir, q] : both_irs(p)) {
    INFO(ir);
    auto base = at::randn({4, 3});
    auto x = base.t();  // transposed: written through
    const auto want = x * 2;
    const auto out = run(q, {x})[0];
    CHECK(at::allclose(x, want));
    CHECK(at::allclose(out, want.sum(0)));
  }
}

TEST_CASE("dtypes: factories without a dtype make torch's default dtype, in both IRs and after save/load") {
  const auto f = [](const at::Tensor& x) {
    return x.matmul(at::ones({6, 2})) + at::zeros({2}) + x.new_zeros({3, 2}) + at::zeros_like(x).sum(1, true) +
           at::full({2}, 1.5);
  };
  const auto x = at::randn({3, 6});
  const auto want = f(x);
  auto p = export_program(f, std::tuple{x});
  for (const auto& [ir, q] : both_irs(p)) {
    INFO(ir << ":\n" << to_string(q));
    check_same(run(q, {x})[0], want);
    auto back = xport_test::reload(q);
    check_same(run(back, {x})[0], want);
    for (auto n : q.graph().nodes())
      if (n.is_call() && n.op().name == "aten::full") CHECK((n.output(0).meta().dtype == at::kFloat));
  }
  // integer factories stay integers, as in eager
  const auto g = [](const at::Tensor& x) { return x + at::arange(4); };
  const auto xi = at::randint(5, {4}, at::kLong);
  auto pi = export_program(g, std::tuple{xi});
  for (const auto& [ir, q] : both_irs(pi)) check_same(run(q, {xi})[0], g(xi));
}

TEST_CASE("fold.with_state(): a buffer the program mutates is never a constant") {
  auto m = std::make_shared<Counter>();
  auto eager = std::make_shared<Counter>();
  auto p = run_decompositions(export_program(m, std::tuple{at::randn({2})}));
  REQUIRE((p | passes::fold.with_state()).ok());
  const auto text = to_string(p);
  INFO(text);
  // `scale * 2` reads a buffer nothing writes: folded; `count` is written every run: kept
  CHECK(text.find("c_folded_0: CONSTANT_TENSOR target='_folded_0'") != std::string::npos);
  CHECK(text.find("BUFFER_MUTATION target='count'") != std::string::npos);
  const auto x = at::randn({2});
  at::Tensor got, want;
  for (int i = 0; i < 3; ++i) {
    got = run(p, {x})[0];
    want = eager->forward(x);
  }
  CHECK(at::allclose(got, want));
  CHECK(p.state_dict().at("count").item<float>() == 3.0f);
}

TEST_CASE("at::equal is answered from metadata where metadata decides") {
  const auto f = [](const at::Tensor& a, const at::Tensor& b) { return at::equal(a, b) ? a * 2 : a * 3; };
  auto p = export_program(f, std::tuple{at::randn({2, 3}), at::randn({4, 3})});
  CHECK(to_string(p).find("torch.ops.aten.mul.Tensor(args_0, 3)") != std::string::npos);
  // same sizes: only the data can say
  XPORT_CHECK_THROWS_MSG(export_program(f, std::tuple{at::randn({2, 3}), at::randn({2, 3})}), graph_break,
                         "graph break: aten::equal (at::equal) reads the contents of a tensor");
  // dynamic sizes that may be equal: data again
  XPORT_CHECK_THROWS_MSG(
      export_program(f, std::tuple{at::randn({2, 3}), at::randn({4, 3})},
                     {.dynamic_shapes = dynamic_shapes::positional({shape(Dim("a"), 3), shape(Dim("b"), 3)})}),
      graph_break, "sizes differ at the example inputs but may be equal for other inputs of a dynamic program");
}

TEST_CASE("cross-attention: nn::TransformerDecoderLayer exports and runs in both IRs") {
  torch::manual_seed(0);
  auto m = std::make_shared<Decoder>();
  torch::manual_seed(0);
  auto eager = std::make_shared<Decoder>();
  m->eval();
  eager->eval();
  const auto tgt = at::randn({5, 2, 16}), memory = at::randn({7, 2, 16});
  auto p = export_program(m, std::tuple{tgt, memory});
  for (const auto& [ir, q] : both_irs(p)) {
    INFO(ir);
    verify(q);
    for (const auto& [layout, t] : layouts_of(tgt)) {
      INFO(layout);
      CHECK(at::allclose(run(q, {t, memory})[0], eager->forward(tgt, memory), 1e-4, 1e-5));
    }
  }
}

TEST_CASE("None outputs: an undefined tensor in the result is None, as torch.export returns it") {
  torch::manual_seed(0);
  auto m = std::make_shared<Attention>();
  m->eval();
  const auto q = at::randn({5, 2, 8});
  auto p = export_program(m, std::tuple{q});
  const auto text = to_string(p);
  INFO(text);
  CHECK(text.find("return (add__1, None)") != std::string::npos);
  CHECK(text.find("\n    : USER_OUTPUT\n") != std::string::npos);
  CHECK(p.out_spec()->str() == "(*, None)");
  const auto outs = run(p, {q});
  REQUIRE(outs.size() == 2);
  CHECK_FALSE(outs[1].defined());
  const auto want = std::get<0>(m->forward(q));
  for (const auto& [ir, r] : both_irs(p)) {
    INFO(ir);
    auto back = xport_test::reload(r);
    for (const auto* prog : std::vector<const exported_program*>{&r, &back}) {
      callable<std::tuple<at::Tensor, at::Tensor>(at::Tensor)> f(*prog);
      const auto [out, weights] = f(q);
      CHECK(at::allclose(out, want, 1e-4, 1e-5));
      CHECK_FALSE(weights.defined());
    }
  }
  // a plain function returning an undefined tensor
  auto g = export_program([](const at::Tensor& x) { return std::tuple{x + 1, at::Tensor()}; }, std::tuple{q});
  callable<std::tuple<at::Tensor, at::Tensor>(at::Tensor)> h(g);
  CHECK_FALSE(std::get<1>(h(q)).defined());
}

TEST_CASE("nn::Embedding with max_norm renorms its weight as eager does (torch's detach + embedding_renorm_)") {
  torch::manual_seed(0);
  auto m = std::make_shared<MaxNormEmbedding>();
  const auto idx = at::tensor({1, 2, 7}, at::kLong);
  auto p = export_program(m, std::tuple{idx});
  const auto text = to_string(p);
  INFO(text);
  CHECK(text.find("detach: \"f32[10, 4]\" = torch.ops.aten.detach.default(p_emb_weight)") != std::string::npos);
  CHECK(text.find("torch.ops.aten.embedding_renorm_.default(detach, x, 1.0, 2.0)") != std::string::npos);
  auto inf = run_decompositions(p);
  CHECK(to_string(inf).find("PARAMETER_MUTATION target='emb.weight'") != std::string::npos);
#if XPORT_TEST_TORCH_FUNCTIONALIZATION  // torch 2.13's own text (1.13's functionalizer writes it back through a view)
  CHECK(to_string(inf).find("embedding_renorm: \"f32[10, 4]\" = torch.ops.aten.embedding_renorm.default(alias, x, 1.0, 2.0)") != std::string::npos);
  CHECK(to_string(inf).find("embedding_renorm: PARAMETER_MUTATION target='emb.weight'") != std::string::npos);
#endif
  for (auto* q : {&p, &inf}) {
    torch::manual_seed(0);
    auto fresh = std::make_shared<MaxNormEmbedding>();
    for (const auto& i : {idx, at::tensor({0, 7, 9}, at::kLong)}) {
      const auto got = run(*q, {i})[0];
      const auto want = fresh->forward(i);
      CHECK(at::allclose(got, want));
    }
    // the renormed rows are in the program's weight, as in the module's
    CHECK(at::allclose(q->state_dict().at("emb.weight"), fresh->emb->weight));
  }
}

TEST_CASE("sizes: products of dims (s0**2) print as sym_size and _operator nodes and survive save/load") {
  const auto f = [](const at::Tensor& x) { return x.reshape({x.size(0) * x.size(0)}) * 2; };
  auto p = export_program(f, std::tuple{at::randn({3, 3})},
                          {.dynamic_shapes = dynamic_shapes::positional({shape(Dim("a", 2, 64), Dim("a", 2, 64))})});
  const auto text = to_string(p);
  INFO(text);
  CHECK(text.find("mul_1: \"Sym(s77**2)\" = sym_size_int_1 * sym_size_int_1") != std::string::npos);
  CHECK(text.find("torch.ops.aten.reshape.default(x, [mul_1])") != std::string::npos);
  for (const auto& [ir, q] : both_irs(p)) {
    INFO(ir);
    auto back = xport_test::reload(q);
    for (std::int64_t n : {2, 5, 9}) {
      const auto x = at::randn({n, n});
      CHECK(at::allclose(run(back, {x})[0], f(x)));
    }
  }
  // attention over a dynamic sequence: seq*seq scores, decomposed, saved and loaded
  const auto attn = [](const at::Tensor& x) { return at::softmax(x.matmul(x.transpose(-2, -1)), -1).matmul(x); };
  auto a = run_decompositions(export_program(
      attn, std::tuple{at::randn({2, 5, 8})},
      {.dynamic_shapes = dynamic_shapes::positional({shape(Dim::static_, Dim("seq", 2, 64), Dim::static_)})}));
  auto back = xport_test::reload(a);
  const auto x = at::randn({2, 11, 8});
  CHECK(at::allclose(run(back, {x})[0], attn(x), 1e-4, 1e-5));
}

TEST_CASE("data-dependent sizes: boolean masks and masked_select give unbacked rows; other mask indices and one_hot break") {
  const auto x = at::randn({5});
  const auto masked = export_program([](const at::Tensor& t) { return t.index({t > 0}); }, std::tuple{x});
  const auto selected = export_program([](const at::Tensor& t) { return at::masked_select(t, t > 0); }, std::tuple{x});
  for (const auto& in : {x, -x.abs(), at::randn({10}).slice(0, 0, 10, 2)}) {
    CHECK(at::equal(run(masked, {in})[0], in.index({in > 0})));
    CHECK(at::equal(run(selected, {in})[0], at::masked_select(in, in > 0)));
  }
  using at::indexing::Slice;
  XPORT_CHECK_THROWS_MSG(
      export_program([](const at::Tensor& t) { return t.index({Slice(), t.sum(0) > 0}); }, std::tuple{at::randn({3, 4})}),
      graph_break, "aten::index.Tensor with a boolean (or uint8) mask as an index selects as many elements as the mask holds true values");
  XPORT_CHECK_THROWS_MSG(
      export_program([](const at::Tensor& t) { return t.index({Slice(), t.sum(0) > 0}); }, std::tuple{at::randn({3, 4})}),
      graph_break, "Way out: keep the shape and zero the rest (at::where(mask, x, 0)");
  XPORT_CHECK_THROWS_MSG(export_program([](const at::Tensor& x) { return at::one_hot(x, -1); }, std::tuple{at::randint(4, {5}, at::kLong)}),
                         graph_break, "at::one_hot without num_classes takes its class count from the largest value");
}

namespace {

struct table_op {
  const char* name;
  std::function<at::Tensor(const tensors&)> f;
  std::function<tensors()> inputs;
  bool on_libtorch_1 = true;  // LibTorch 1.13 exports and lowers it too
};

std::vector<table_op> op_table() {
  namespace F = torch::nn::functional;
  static auto bag = torch::nn::EmbeddingBag(torch::nn::EmbeddingBagOptions(10, 3).mode(torch::kMean));
  const auto r = [](std::vector<std::int64_t> s) { return at::randn(s); };
  return {
      {"flip", [](const tensors& v) { return v[0].flip({0, 2}); }, [=] { return tensors{r({2, 3, 4})}; }},
      {"roll", [](const tensors& v) { return v[0].roll({1}, {1}); }, [=] { return tensors{r({2, 3, 4})}; }},
      {"cdist", [](const tensors& v) { return at::cdist(v[0], v[1]); }, [=] { return tensors{r({2, 5, 3}), r({2, 4, 3})}; }},
      {"logsumexp", [](const tensors& v) { return v[0].logsumexp({1}); }, [=] { return tensors{r({2, 3, 4})}; }},
      {"median.dim", [](const tensors& v) { return std::get<0>(v[0].median(1)); }, [=] { return tensors{r({2, 5, 4})}; }},
      {"kthvalue", [](const tensors& v) { return std::get<1>(v[0].kthvalue(2, 1)); }, [=] { return tensors{r({2, 5, 4})}; }},
      {"repeat_interleave", [](const tensors& v) { return v[0].repeat_interleave(2, 1); }, [=] { return tensors{r({2, 3, 4})}; }, false},
      {"F::unfold (im2col)", [](const tensors& v) { return F::unfold(v[0], F::UnfoldFuncOptions({2, 2})); }, [=] { return tensors{r({2, 3, 5, 5})}; }},
      {"F::fold (col2im)", [](const tensors& v) { return F::fold(v[0], F::FoldFuncOptions({4, 4}, {2, 2})); }, [=] { return tensors{r({2, 12, 9})}; }},
      {"grid_sample", [](const tensors& v) { return F::grid_sample(v[0], v[1], F::GridSampleFuncOptions().align_corners(false)); },
       [=] { return tensors{r({2, 3, 5, 5}), at::rand({2, 4, 4, 2}) * 2 - 1}; }},
      {"pad reflect", [](const tensors& v) { return F::pad(v[0], F::PadFuncOptions({1, 1, 2, 2}).mode(torch::kReflect)); }, [=] { return tensors{r({2, 3, 5, 5})}; }},
      {"pad replicate", [](const tensors& v) { return F::pad(v[0], F::PadFuncOptions({1, 1, 2, 2}).mode(torch::kReplicate)); }, [=] { return tensors{r({2, 3, 5, 5})}; }},
      {"pad circular", [](const tensors& v) { return F::pad(v[0], F::PadFuncOptions({1, 1, 2, 2}).mode(torch::kCircular)); }, [=] { return tensors{r({2, 3, 5, 5})}; }},
      {"huber_loss", [](const tensors& v) { return at::huber_loss(v[0], v[1]); }, [=] { return tensors{r({3, 4}), r({3, 4})}; }},
      {"smooth_l1_loss", [](const tensors& v) { return at::smooth_l1_loss(v[0], v[1]); }, [=] { return tensors{r({3, 4}), r({3, 4})}; }},
      {"floor_divide", [](const tensors& v) { return at::floor_divide(v[0], v[1]); }, [=] { return tensors{r({3, 4}) * 10, at::rand({3, 4}) + 1}; }},
      {"diag", [](const tensors& v) { return v[0].diag(); }, [=] { return tensors{r({4, 4})}; }},
      {"searchsorted", [](const tensors& v) { return at::searchsorted(v[0], v[1]); },
       [=] { return tensors{std::get<0>(at::randn({3, 6}).sort(1)), r({3, 4})}; }},
      {"bucketize", [](const tensors& v) { return at::bucketize(v[0], v[1]); }, [=] { return tensors{r({3, 4}), std::get<0>(at::randn({6}).sort())}; }},
      {"channel_shuffle", [](const tensors& v) { return at::channel_shuffle(v[0], 2); }, [=] { return tensors{r({2, 4, 3, 3})}; }},
      {"pixel_shuffle", [](const tensors& v) { return at::pixel_shuffle(v[0], 2); }, [=] { return tensors{r({2, 8, 3, 3})}; }},
      {"nn::EmbeddingBag", [](const tensors& v) { return bag->forward(v[0], v[1]); },
       [] { return tensors{at::randint(10, {8}, at::kLong), at::tensor({0, 3, 5}, at::kLong)}; }, false},
      {"one_hot(num_classes)", [](const tensors& v) { return at::one_hot(v[0], 5); }, [] { return tensors{at::randint(5, {3, 4}, at::kLong)}; }, false},
      {"log_sigmoid", [](const tensors& v) { return at::log_sigmoid(v[0]); }, [=] { return tensors{r({3, 4})}; }},
      {"tril", [](const tensors& v) { return v[0].tril(); }, [=] { return tensors{r({4, 4})}; }},
      {"masked_fill", [](const tensors& v) { return v[0].masked_fill(v[0] > 0, 0.5); }, [=] { return tensors{r({4, 4})}; }},
      {"cumsum + cummax", [](const tensors& v) { return std::get<0>(v[0].cumsum(1).cummax(0)); }, [=] { return tensors{r({4, 5})}; }},
      {"topk", [](const tensors& v) { return std::get<0>(v[0].topk(2, 1)); }, [=] { return tensors{r({3, 6})}; }},
  };
}

}  // namespace

TEST_CASE("op table: ops real models call, exported, in both IRs, on every input layout, against eager") {
  torch::manual_seed(0);
  for (const auto& op : op_table()) {
    INFO("op: " << op.name);
    const auto inputs = op.inputs();
    const auto f2 = [&](const at::Tensor& a, const at::Tensor& b) {
      tensors v{a, b};
      return op.f(v);
    };
    const auto second = inputs.size() > 1 ? inputs[1] : at::zeros({1});
#if !XPORT_TEST_TORCH_FUNCTIONALIZATION
    if (!op.on_libtorch_1) {  // a typed error, never a raw LibTorch one
      CHECK_THROWS_AS(run_decompositions(export_program(f2, std::tuple{inputs[0], second})), xport::error);
      continue;
    }
#endif
    auto p = export_program(f2, std::tuple{inputs[0], second});
    check_layouts(p, [&](const tensors& v) { return op.f(v); }, {inputs[0], second});
  }
}
