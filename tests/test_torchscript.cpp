// TorchScript modules to exported programs without Python (<xport/torchscript.hpp>): modules
// written in TorchScript from C++ (torch::jit::Module::define) and saved, converted, run against
// the TorchScript interpreter; the oracle cases (suite "oracle_package") convert the `.pt` files
// torch.jit.script wrote (tests/python/packages.py) and match torch's own converter.
#include <filesystem>
#include <set>

#include <unistd.h>

#include <torch/torch.h>
#include <xport/torchscript.hpp>
#include <xport/train.hpp>

#include "common.hpp"
#include "io_files.hpp"

using namespace xport;

namespace {

std::string ts_temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name)).string();
}

/// A TorchScript module with a submodule, a buffer forward writes, a loop with a constant trip
/// count, a size read, a tuple output and a branch on data, written and saved from C++.
std::string scripted_codec(const std::string& name) {
  torch::manual_seed(21);
  torch::jit::Module enc("Encoder");
  enc.register_parameter("weight", torch::randn({4, 8}), false);
  enc.register_parameter("bias", torch::randn({4}), false);
  enc.define("def forward(self, x):\n    return torch.relu(torch.linear(x, self.weight, self.bias))\n");
  torch::jit::Module m("Codec");
  m.register_module("encoder", enc);
  m.register_buffer("calls", torch::zeros({1}, torch::kInt64));
  m.register_parameter("mix", torch::randn({4, 4}), false);
  m.define(R"(
def forward(self, x):
    self.calls.add_(1)
    y = self.encoder.forward(x)
    for i in range(3):
        y = torch.matmul(y, self.mix) * 0.5
    return y + x.size(0), y.sum(1)

def encode(self, x):
    return self.encoder.forward(x) + self.calls

def pick(self, x):
    if bool(x.sum() > 0):
        return x * 2
    return x - 1

def count(self, x, n: int):
    return x * n

def gate(self, x):
    if bool(x.sum() > 0):
        y = self.encoder.forward(x) * 2.0
    else:
        y = self.encoder.forward(-x)
    return y

def nested(self, x, y):
    if bool(x.mean() > y.mean()):
        if not bool(x.max() > 1.5):
            return x + y, x
        return x - y, y
    return x * y, x

def spin(self, x):
    while bool(x.sum() < 100):
        x = x * 2
    return x

def heads(self, x):
    return {"enc": self.encoder.forward(x), "total": x.sum(1)}

def checked(self, x):
    msg = "expected {} features, got {}".format(8, x.size(1))
    assert x.size(1) == 8, msg
    return x + 1

def guarded(self, x):
    assert bool(x.sum() > 0), "the sum must be positive"
    return x * 2

def stop(self, x):
    for i in range(10):
        if bool(x.sum() > 100):
            break
        x = x * 2
    return x

def remember(self, x):
    self.calls = self.calls + 1
    return x
)");
  const auto path = ts_temp_path(name);
  m.save(path, {{"config.json", R"({"hidden": 4})"}});
  return path;
}

/// The files of `dir` named torch_<version><suffix> (a version of digits and dots), with it.
std::vector<std::pair<std::filesystem::path, std::string>> torch_files(const std::filesystem::path& dir,
                                                                       const std::string& suffix) {
  std::vector<std::pair<std::filesystem::path, std::string>> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("torch_", 0) != 0 || name.size() < 6 + suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const auto version = name.substr(6, name.size() - 6 - suffix.size());
    if (version.find_first_not_of("0123456789.") == std::string::npos) out.emplace_back(entry.path(), version);
  }
  return out;
}

/// The program lifts the state torch's TS2EPConverter lifts from the same file (io's "state"), by name.
void check_converter_state(const c10::impl::GenericDict& io, const exported_program& p) {
  std::vector<std::string> want, got;
  for (const auto& t : xport_test::field(io, "state").toListRef()) want.push_back(t.toStringRef());
  for (const auto& s : p.signature().input_specs)
    if (s.target) got.push_back(*s.target);
  std::sort(got.begin(), got.end());
  CHECK(got == want);
}

}  // namespace

TEST_CASE("torchscript: a scripted module's methods convert without Python, state under its names, dims dynamic") {
  const auto path = scripted_codec("xport_ts_codec.pt");
  const auto x = at::randn({2, 8});
  const Dim batch("batch");
  auto p = from_torchscript(path, {x}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
  const auto printed = to_string(p);
  INFO(printed);
  // the module's names (submodule included), the method's argument name, the loop unrolled,
  // x.size(0) a symbol, the tuple output kept
  CHECK(printed.find("p_encoder_weight: PARAMETER target='encoder.weight'") != std::string::npos);
  CHECK(printed.find("b_calls: BUFFER target='calls'") != std::string::npos);
  CHECK(printed.find("x: USER_INPUT") != std::string::npos);
  CHECK(printed.find("x: \"f32[s") != std::string::npos);
  CHECK(printed.find("matmul_2") != std::string::npos);
  CHECK(printed.find("torch.ops.aten.sym_size.int(x, 0)") != std::string::npos);
  CHECK(printed.find("aten.size.int") == std::string::npos);
  REQUIRE(p.out_spec().has_value());
  CHECK(p.out_spec()->type == treespec::kind::tuple);
  CHECK(p.module_types().at(0).second.find("Codec") != std::string::npos);
  // a dict by str returned (torchvision's segmentation models return {"out": ..., "aux": ...})
  const auto heads = from_torchscript(path, {x}, {.method = "heads", .dynamic_shapes = {{"x", {{0, batch}}}}});
  REQUIRE(heads.out_spec().has_value());
  CHECK(heads.out_spec()->type == treespec::kind::dict);
  CHECK((heads.out_spec()->keys == std::vector<std::string>{"enc", "total"}));
  // a variadic operator (aten::format) and an assert the example passes (a branch on a static size)
  const auto checked = from_torchscript(path, {x}, {.method = "checked", .dynamic_shapes = {{"x", {{0, batch}}}}});
  CHECK(at::equal(run(checked, {x})[0], x + 1));

  // against the TorchScript interpreter on its own copy of the module, call after call (forward
  // counts in the buffer that encode reads), other batches, a sliced input
  auto ref = torch::jit::load(path);
  auto pkg = from_torchscript(path, {{"forward", {{x}, {{"x", {{0, batch}}}}}}, {"encode", {{x}, {{"x", {{0, batch}}}}}}});
  CHECK((pkg.names() == std::vector<std::string>{"encode", "forward"}));
  CHECK(pkg.extra_files.at("config.json") == R"({"hidden": 4})");
  for (int call = 0; call < 3; ++call) {
    const auto xi = at::randn({3 + call, 10}).narrow(1, 1, 8).contiguous();
    const auto want = ref.forward({xi}).toTuple();
    const auto got = run(pkg.at("forward"), {xi});
    REQUIRE(got.size() == 2);
    CHECK(at::equal(got[0], want->elements()[0].toTensor()));
    CHECK(at::equal(got[1], want->elements()[1].toTensor()));
    CHECK(at::equal(run(pkg.at("encode"), {xi})[0], ref.get_method("encode")({xi}).toTensor()));
    const auto want_heads = ref.get_method("heads")({xi}).toGenericDict();
    const auto got_heads = run(heads, {xi});
    REQUIRE(got_heads.size() == 2);
    CHECK(at::equal(got_heads[0], want_heads.at("enc").toTensor()));
    CHECK(at::equal(got_heads[1], want_heads.at("total").toTensor()));
  }
  // one state for both programs: saved once, shared again after load
  const auto saved = ts_temp_path("xport_ts_codec.pt2");
  save(pkg, saved);
  auto back = load_package(saved);
  CHECK(back.at("encode").state_dict().at("calls").data_ptr() == back.at("forward").state_dict().at("calls").data_ptr());
  CHECK(back.extra_files == pkg.extra_files);
  CHECK(back.at("encode").state_dict().at("calls").item<std::int64_t>() == 3);
  // the methods as one module again (<xport/train.hpp>): one state, each method its program
  auto m = back.module();
  CHECK((m->methods() == std::vector<std::string>{"encode", "forward"}));
  CHECK(m->named_parameters(true).size() == 3);
  const auto xm = at::randn({4, 8});
  const auto want = ref.forward({xm}).toTuple();
  const auto got = m->forward({xm});
  REQUIRE(got.size() == 2);
  CHECK(at::equal(got[0], want->elements()[0].toTensor()));
  CHECK(at::equal(m->run_method("encode", {xm})[0], ref.get_method("encode")({xm}).toTensor()));
  CHECK(m->named_buffers(true)["calls"].item<std::int64_t>() == 4);
  std::remove(saved.c_str());
  std::remove(path.c_str());
}

TEST_CASE("torchscript: what neither route can keep is a typed error naming the TorchScript line") {
  const auto path = scripted_codec("xport_ts_refusals.pt");
  auto m = torch::jit::load(path);
  const auto x = at::randn({2, 8});
  // a branch on the contents of a tensor is never specialized: capture refuses it (translation
  // makes it a torch.cond), and a loop on data is refused by both, naming the line
  const torchscript_options capture{.method = "pick", .route = torchscript_route::capture};
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, capture), graph_break,
                         "[xport.torchscript.graph_break] the TorchScript method 'pick' branches or loops on the contents of a tensor");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, capture), graph_break, "if bool(x.sum() > 0):");
  // (a break on data: TorchScript makes it a branch that gives the loop's go-on flag, a bool)
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, {.method = "stop"}), export_error,
                         "[xport.torchscript.unsupported] a branch on the contents of a tensor gives a bool: torch.cond's "
                         "branches return tensors");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, {.method = "stop"}), export_error, "if bool(x.sum() > 100):");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x.abs()}, {.method = "guarded"}), export_error,
                         "[xport.torchscript.unsupported] the method raises in a branch on the contents of a tensor (an "
                         "assert on data)");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x.abs()}, {.method = "guarded"}), export_error,
                         "assert bool(x.sum() > 0)");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, {.method = "remember"}), export_error,
                         "[xport.torchscript.unsupported] the method assigns attribute 'calls' (prim::SetAttr)");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, {.method = "remember"}), export_error,
                         "self.calls = self.calls + 1");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, {.method = "predict"}), export_error,
                         "[xport.torchscript.method] the TorchScript module has no method 'predict'; it has 'forward', 'encode'");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, {.method = "count"}), export_error,
                         "[xport.torchscript.argument] argument 'n' of TorchScript method 'count' has type int");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x, x}), export_error,
                         "[xport.torchscript.argument] TorchScript method 'forward' takes 1 tensor argument(s), 2 example input(s) given");
  XPORT_CHECK_THROWS_MSG(from_torchscript(path + ".missing", {x}), load_error, "[xport.torchscript.load] cannot read TorchScript file");
  // the module converted is as it was (the capture ran it on stand-ins)
  CHECK(m.attr("calls").toTensor().item<std::int64_t>() == 0);
  std::remove(path.c_str());
}

TEST_CASE("torchscript: translation makes a branch on a tensor's contents a torch.cond and a while loop on one a torch.while_loop, equal to TorchScript") {
  const auto path = scripted_codec("xport_ts_cond.pt");
  auto ref = torch::jit::load(path);
  const auto x = at::randn({3, 8});
  const Dim batch("batch");
  const auto check_both = [&](const std::string& method, const exported_program& p, int n_inputs,
                              const char* op = "torch.ops.higher_order.cond") {
    INFO(method << "\n" << to_string(p));
    CHECK(to_string(p).find(op) != std::string::npos);
    for (const double sign : {1.0, -1.0}) {  // both branches taken, other batch sizes, a sliced input
      for (const std::int64_t rows : {2, 5}) {
        const auto xi = (at::rand({rows, 10}) + 0.1).narrow(1, 1, 8) * sign;
        const auto yi = at::randn({rows, 8}) * 0.1;
        std::vector<c10::IValue> args{xi};
        std::vector<at::Tensor> ins{xi};
        if (n_inputs == 2) {
          args.emplace_back(yi);
          ins.push_back(yi);
        }
        const auto want = ref.get_method(method)(args);
        const auto got = run(p, ins);
        if (want.isTuple()) {
          REQUIRE(got.size() == want.toTupleRef().elements().size());
          for (std::size_t i = 0; i < got.size(); ++i) CHECK(at::equal(got[i], want.toTupleRef().elements()[i].toTensor()));
        } else {
          REQUIRE(got.size() == 1);
          CHECK(at::equal(got[0], want.toTensor()));
        }
      }
    }
  };
  // early returns, a branch reading module state (lifted into both subgraphs), nested branches
  // with a negated condition, dims dynamic through the branches
  check_both("pick", from_torchscript(path, {x}, {.method = "pick", .dynamic_shapes = {{"x", {{0, batch}}}}}), 1);
  const auto gate = from_torchscript(path, {x}, {.method = "gate", .dynamic_shapes = {{"x", {{0, batch}}}}});
  CHECK(to_string(gate).find("p_encoder_weight") != std::string::npos);
  check_both("gate", gate, 1);
  const auto nested = from_torchscript(path, {x, x}, {.method = "nested",
                                                      .dynamic_shapes = {{"x", {{0, batch}}}, {"y", {{0, batch}}}}});
  check_both("nested", nested, 2);
  // `while bool(x.sum() < 100): x = x * 2`: 0 to many iterations (positive inputs only: the
  // TorchScript loop never ends on a negative sum); reloaded, too
  const auto spin = from_torchscript(path, {x.abs()}, {.method = "spin", .dynamic_shapes = {{"x", {{0, batch}}}}});
  INFO(to_string(spin));
  CHECK(to_string(spin).find("torch.ops.higher_order.while_loop") != std::string::npos);
  for (const double scale : {0.01, 1.0, 50.0}) {
    const auto xi = (at::rand({4, 10}) * scale).narrow(1, 2, 8);
    CHECK(at::equal(run(spin, {xi})[0], ref.get_method("spin")({xi}).toTensor()));
  }
  // the program round-trips and torch's reading of it is tested with the rest of the
  // package (packages.py reads xport_from_ts_*); here, xport's own reload
  const auto saved = ts_temp_path("xport_ts_cond.pt2");
  save(gate, saved);
  check_both("gate", load(saved), 1);
  std::remove(saved.c_str());
  std::remove(path.c_str());
}

// ---- the oracle: `.pt` files torch.jit.script wrote (tests/python/packages.py) ----------------

TEST_CASE("torchscript: xport converts the TorchScript files torch wrote, as torch's converter lifts them" *
          doctest::test_suite("oracle_package")) {
  const auto dir = xport_test::shared_dir("XPORT_PACKAGE_DIR", "", "oracle_package");
  std::size_t seen = 0;
  for (const auto& [path, tag] : torch_files(dir, ".ts.pt")) {
    const auto name = path.filename().string();
    INFO("TorchScript file " << name);
    ++seen;
    const auto io = xport_test::read_pickle(dir / ("torch_" + tag + ".ts.io.pt")).toGenericDict();
    const Dim batch("batch");
    const auto x = at::randn({2, 8}), z = at::randn({2, 4});
    auto pkg = from_torchscript(path.string(), {{"forward", {{x}, {{"x", {{0, batch}}}}}},
                                                {"encode", {{x}, {{"x", {{0, batch}}}}}},
                                                {"decode", {{z}, {{"z", {{0, batch}}}}}}});
    check_converter_state(io, pkg.at("forward"));  // the state torch's TS2EPConverter lifts, under the same names
    for (const auto& kv : xport_test::field(io, "extra_files").toGenericDict())
      CHECK(pkg.extra_files.at(kv.key().toStringRef()) == kv.value().toStringRef());
    // each program gives what the TorchScript module gives
    auto ref = torch::jit::load(path.string());
    const auto xi = at::randn({5, 8});
    CHECK(at::equal(run(pkg.at("forward"), {xi})[0], ref.forward({xi}).toTensor()));
    CHECK(at::equal(run(pkg.at("encode"), {xi})[0], ref.get_method("encode")({xi}).toTensor()));
    CHECK(at::equal(run(pkg.at("decode"), {z})[0], ref.get_method("decode")({z}).toTensor()));
    // for torch's load_pt2 (packages.py read), from the state as the file holds it
    save(from_torchscript(path.string(), {{"forward", {{x}, {{"x", {{0, batch}}}}}},
                                          {"encode", {{x}, {{"x", {{0, batch}}}}}},
                                          {"decode", {{z}, {{"z", {{0, batch}}}}}}}),
         (dir / ("xport_from_ts_" + tag + ".pt2")).string());
  }
  CHECK(seen >= 1);
}

TEST_CASE("torchscript: control flow on data in files torch scripted becomes torch.cond and torch.while_loop, as torch's converter lifts it" *
          doctest::test_suite("oracle_package")) {
  const auto dir = xport_test::shared_dir("XPORT_PACKAGE_DIR", "", "oracle_package");
  std::size_t seen = 0;
  for (const auto& [path, version] : torch_files(dir, ".gated.ts.pt")) {
    INFO("TorchScript file " << path.filename().string());
    ++seen;
    const auto io = xport_test::read_pickle(dir / ("torch_" + version + ".gated.io.pt")).toGenericDict();
    const Dim batch("batch");
    const auto x = at::randn({2, 8});
    auto pkg = from_torchscript(path.string(), {{"forward", {{x}, {{"x", {{0, batch}}}}}},
                                                {"spin", {{x.abs()}, {{"x", {{0, batch}}}}}}});
    // the state TS2EPConverter lifts, and its torch.cond where xport makes one
    check_converter_state(io, pkg.at("forward"));
    for (const auto& op : xport_test::field(io, "higher_order").toListRef()) {
      INFO("torch's converter calls " << op.toStringRef());
      CHECK(to_string(pkg.at("forward")).find(op.toStringRef()) != std::string::npos);
    }
    CHECK(to_string(pkg.at("spin")).find("torch.ops.higher_order.while_loop") != std::string::npos);
    auto ref = torch::jit::load(path.string());
    for (const double sign : {1.0, -1.0}) {
      const auto xi = at::randn({4, 8}).abs() * sign;
      CHECK(at::equal(run(pkg.at("forward"), {xi})[0], ref.forward({xi}).toTensor()));
    }
    for (const double scale : {0.05, 40.0}) {
      const auto xi = at::rand({3, 8}) * scale;
      CHECK(at::equal(run(pkg.at("spin"), {xi})[0], ref.get_method("spin")({xi}).toTensor()));
    }
    save(pkg, (dir / ("xport_from_ts_gated_" + version + ".pt2")).string());  // for packages.py read
  }
  CHECK(seen >= 1);
}

TEST_CASE("torchscript: torchvision's models scripted by torch convert, dynamic batch, equal to the TorchScript module" *
          doctest::test_suite("oracle_package")) {
  const auto dir = xport_test::shared_dir("XPORT_PACKAGE_DIR", "", "oracle_package");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    // tv_<model>_<version>.ts.pt: written where torchvision imports (the 2.14.1 venv)
    if (name.rfind("tv_", 0) != 0 || name.size() < 6 || name.substr(name.size() - 6) != ".ts.pt") continue;
    INFO("TorchScript file " << name);
    auto ref = torch::jit::load(entry.path().string());
    const Dim batch("batch", 1, 64);
    auto p = from_torchscript(ref, {at::randn({2, 3, 64, 64})}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
    for (const auto& x : {at::randn({3, 3, 64, 64}), at::randn({1, 3, 64, 64})})
      CHECK(at::equal(run(p, {x})[0], ref.forward({x}).toTensor()));
    // the module tree came along: each call is the submodule's it was made in (nn_module_stack,
    // by which torch's unflatten nests them: packages.py), a relu of layer1.0 layer1.0's
    std::set<std::string> submodules{""};
    for (const auto& sub : ref.named_modules()) submodules.insert(sub.name);
    std::size_t nested = 0;
    for (auto n : p.graph().nodes())
      if (n.is_call()) {
        INFO("node " << n.name() << " in module '" << n.module_path() << "'");
        CHECK(submodules.count(n.module_path()) == 1);
        nested += n.module_path().find('.') != std::string::npos;
      }
    CHECK(nested >= 20);
    save(p, (dir / ("xport_from_ts_" + name.substr(0, name.size() - 6) + ".pt2")).string());
  }
}

TEST_CASE("torchscript: files torch.jit.trace wrote convert, their traced sizes kept as sizes (symbolic where dynamic)" *
          doctest::test_suite("oracle_package")) {
  const auto dir = xport_test::shared_dir("XPORT_PACKAGE_DIR", "", "oracle_package");
  const Dim batch("batch", 1, 64);
  std::size_t flatten = 0, bert = 0;
  for (const auto& [path, tag] : torch_files(dir, ".traced.pt")) {
    INFO("traced file " << path << " (torch " << tag << "): x.view(x.size(0), -1) * 2");
    auto ref = torch::jit::load(path.string());
    const auto p = from_torchscript(ref, {at::randn({2, 3, 4})}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
    for (const auto& x : {at::randn({5, 3, 4}), at::randn({1, 3, 4})})
      CHECK(at::equal(run(p, {x})[0], ref.forward({x}).toTensor()));
    const auto printed = to_string(p);
    CHECK(printed.find("torch.ops.aten.sym_size.int") != std::string::npos);  // the size, not the example's 2
    CHECK(printed.find("scalar_tensor") == std::string::npos);
    // the capture route still reads the traced size as tensor data: refused, pointing to translation
    // (on a fresh load: the module ran above, and the JIT's executor folds aten::Int(NumToTensor) once it has)
    auto fresh = torch::jit::load(path.string());
    XPORT_CHECK_THROWS_MSG(from_torchscript(fresh, {at::randn({2, 3, 4})}, {.dynamic_shapes = {{"x", {{0, batch}}}},
                                                                            .route = torchscript_route::capture}),
                           graph_break, "This module was made by torch.jit.trace");
    ++flatten;
  }
  for (const auto& [path, tag] : torch_files(dir, ".row_mean.traced.pt")) {  // x.sum(0) / x.size(0)
    INFO("traced file " << path << " (torch " << tag << ")");
    auto ref = torch::jit::load(path.string());
    // the size a 0-dim tensor again: scalar_tensor of the example's 4 when static, of sym_size when dynamic
    const auto x = at::randn({4, 3});
    const auto fixed = from_torchscript(ref, {x});
    CHECK(at::equal(run(fixed, {x})[0], ref.forward({x}).toTensor()));
    const auto p = from_torchscript(ref, {x}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
    CHECK(to_string(p).find("torch.ops.aten.scalar_tensor.default(sym_size_int") != std::string::npos);
    for (const auto& xi : {at::randn({9, 3}), at::randn({1, 3})})
      CHECK(at::equal(run(p, {xi})[0], ref.forward({xi}).toTensor()));
  }
  // transformers' BERT as its docs trace it (torchscript=True), where transformers imports
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("hf_bert_", 0) != 0 || name.find(".traced.pt") == std::string::npos) continue;
    INFO("traced file " << name);
    auto ref = torch::jit::load(entry.path().string());
    torch::manual_seed(15);
    // its traced sizes translate (the position ids' slice: seq_length + a tensor constant 0), its
    // attention is sdpa with a mask (a shape rule: LibTorch's meta run of it calls where, which has none)
    // batch and sequence length dynamic (the position ids' slice up to the sequence length)
    const Dim seq("seq", 2, 64);
    const auto p = from_torchscript(ref, {at::randint(0, 100, {2, 7})},
                                    {.dynamic_shapes = {{"input_ids", {{0, batch}, {1, seq}}}}});
    CHECK(to_string(p).find("torch.ops.aten.scaled_dot_product_attention.default") != std::string::npos);
    for (const auto& ids : {at::randint(0, 100, {5, 7}), at::randint(0, 100, {1, 20}), at::randint(0, 100, {3, 64})}) {
      const auto got = run(p, {ids});
      // transformers 5 returns its output dict even with torchscript=True: last_hidden_state, pooler_output
      const auto out = ref.forward({ids});
      std::vector<at::Tensor> want;
      if (out.isGenericDict())
        for (const auto& kv : out.toGenericDict()) want.push_back(kv.value().toTensor());
      else
        for (const auto& e : out.toTupleRef().elements()) want.push_back(e.toTensor());
      REQUIRE(got.size() == 2);
      REQUIRE(want.size() == 2);
      for (std::size_t i = 0; i < 2; ++i)
        CHECK(at::allclose(got[i], want[i], 1e-5, 1e-6));
    }
    save(p, (dir / ("xport_from_ts_" + name.substr(0, name.size() - 10) + ".pt2")).string());  // packages.py reads it
    ++bert;
  }
  CHECK(flatten >= 1);
  MESSAGE("traced files converted: " << flatten << " (+ " << bert << " BERT)");
}
