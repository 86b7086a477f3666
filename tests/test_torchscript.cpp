// TorchScript modules to exported programs without Python (<xport/torchscript.hpp>): modules
// written in TorchScript from C++ (torch::jit::Module::define) and saved, converted, run against
// the TorchScript interpreter; the oracle cases (suite "oracle_package") convert the `.pt` files
// torch.jit.script wrote (tests/python/packages.py) and match torch's own converter.
#include <filesystem>

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
)");
  const auto path = ts_temp_path(name);
  m.save(path, {{"config.json", R"({"hidden": 4})"}});
  return path;
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

TEST_CASE("torchscript: what conversion by capture cannot keep is a typed error naming the TorchScript line") {
  const auto path = scripted_codec("xport_ts_refusals.pt");
  auto m = torch::jit::load(path);
  const auto x = at::randn({2, 8});
  // a branch on the contents of a tensor is never specialized
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, {.method = "pick"}), graph_break,
                         "[xport.torchscript.graph_break] the TorchScript method 'pick' branches or loops on the contents of a tensor");
  XPORT_CHECK_THROWS_MSG(from_torchscript(m, {x}, {.method = "pick"}), graph_break, "if bool(x.sum() > 0):");
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

// ---- the oracle: `.pt` files torch.jit.script wrote (tests/python/packages.py) ----------------

TEST_CASE("torchscript: xport converts the TorchScript files torch wrote, as torch's converter lifts them" *
          doctest::test_suite("oracle_package")) {
  const auto dir = xport_test::shared_dir("XPORT_PACKAGE_DIR", "", "oracle_package");
  std::size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("torch_", 0) != 0 || name.size() < 6 || name.substr(name.size() - 6) != ".ts.pt") continue;
    INFO("TorchScript file " << name);
    ++seen;
    const auto tag = name.substr(6, name.size() - 12);
    const auto io = xport_test::read_pickle(dir / ("torch_" + tag + ".ts.io.pt")).toGenericDict();
    const Dim batch("batch");
    const auto x = at::randn({2, 8}), z = at::randn({2, 4});
    auto pkg = from_torchscript(entry.path().string(), {{"forward", {{x}, {{"x", {{0, batch}}}}}},
                                                        {"encode", {{x}, {{"x", {{0, batch}}}}}},
                                                        {"decode", {{z}, {{"z", {{0, batch}}}}}}});
    // the state torch's TS2EPConverter lifts, under the same names
    std::vector<std::string> want, got;
    for (const auto& t : xport_test::field(io, "state").toListRef()) want.push_back(t.toStringRef());
    for (const auto& s : pkg.at("forward").signature().input_specs)
      if (s.target) got.push_back(*s.target);
    std::sort(got.begin(), got.end());
    CHECK(got == want);
    for (const auto& kv : xport_test::field(io, "extra_files").toGenericDict())
      CHECK(pkg.extra_files.at(kv.key().toStringRef()) == kv.value().toStringRef());
    // each program gives what the TorchScript module gives
    auto ref = torch::jit::load(entry.path().string());
    const auto xi = at::randn({5, 8});
    CHECK(at::equal(run(pkg.at("forward"), {xi})[0], ref.forward({xi}).toTensor()));
    CHECK(at::equal(run(pkg.at("encode"), {xi})[0], ref.get_method("encode")({xi}).toTensor()));
    CHECK(at::equal(run(pkg.at("decode"), {z})[0], ref.get_method("decode")({z}).toTensor()));
    // for torch's load_pt2 (packages.py read), from the state as the file holds it
    save(from_torchscript(entry.path().string(), {{"forward", {{x}, {{"x", {{0, batch}}}}}},
                                                  {"encode", {{x}, {{"x", {{0, batch}}}}}},
                                                  {"decode", {{z}, {{"z", {{0, batch}}}}}}}),
         (dir / ("xport_from_ts_" + tag + ".pt2")).string());
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
    save(p, (dir / ("xport_from_ts_" + name.substr(0, name.size() - 6) + ".pt2")).string());
  }
  // a traced file records sizes as tensors: refused, saying so
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.size() < 10 || name.substr(name.size() - 10) != ".traced.pt") continue;
    INFO("traced file " << name);
    XPORT_CHECK_THROWS_MSG(from_torchscript(entry.path().string(), {at::randn({2, 3, 4})}), export_error,
                           "This module was made by torch.jit.trace");
  }
}
