// Save and load: .pt2 round trips of real programs, and bad files rejected with load_error.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>
#include <dlfcn.h>

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include "custom_ops.hpp"
#include "models.hpp"

#include "common.hpp"
#include "io_files.hpp"

#include <xport/engine.hpp>
#include <xport/torchscript.hpp>

using namespace xport;
namespace m = xport_models;
using json = nlohmann::json;

namespace {

/// A file in the temporary directory, one per process: ctest runs the suite's executables (both
/// header trees, the sanitized serde tests) at once, and they must not share files.
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name)).string();
}

/// Every record of an archive (root folder stripped), in file order.
std::vector<std::pair<std::string, std::string>> records_of(const std::string& bytes) {
  caffe2::serialize::MemoryReadAdapter in(bytes.data(), static_cast<off_t>(bytes.size()));
  const xport::detail::zip_index zip(in);
  std::vector<std::pair<std::uint64_t, std::string>> order;
  for (const auto& [name, r] : zip.records()) order.emplace_back(r.data_offset, name);
  std::sort(order.begin(), order.end());
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [off, name] : order)
    if (name != "version" && name != ".data/version" && name != "byteorder" && name != ".data/serialization_id")
      out.emplace_back(name, zip.read(name));
  return out;
}

/// The archive with record `name` replaced by `content` (or removed when `content` is nullopt).
std::string rewrite(const std::string& bytes, const std::string& name, std::optional<std::string> content) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* d, std::size_t n) {
    out.append(static_cast<const char*>(d), n);
    return n;
  });
  for (const auto& [rec, data] : records_of(bytes)) {
    if (rec != name) w.writeRecord(rec, data.data(), data.size());
    else if (content) w.writeRecord(rec, content->data(), content->size());
  }
  w.writeEndOfFile();
  return out;
}

json model_json(const std::string& bytes) {
  for (const auto& [rec, data] : records_of(bytes))
    if (rec == "models/model.json") return json::parse(data);
  FAIL("no models/model.json");
  return {};
}
std::string with_model(const std::string& bytes, const json& j) { return rewrite(bytes, "models/model.json", j.dump()); }

using xport_test::reload;

/// load(save(p)) prints as p prints, and runs bit-identically (same seed, same inputs).
void check_round_trip(const exported_program& p, const std::vector<at::Tensor>& inputs) {
  auto q = reload(p);
  CHECK(to_string(q) == to_string(p));
  CHECK(q.dialect() == p.dialect());
  CHECK((q.signature().input_specs == p.signature().input_specs));
  CHECK((q.signature().output_specs == p.signature().output_specs));
  CHECK((q.in_spec() == p.in_spec()));
  CHECK((q.out_spec() == p.out_spec()));
  REQUIRE(q.state_dict().size() == p.state_dict().size());
  for (const auto& [k, t] : p.state_dict()) {
    const auto& u = q.state_dict().at(k);
    CHECK(u.requires_grad() == t.requires_grad());
    CHECK(u.sizes() == t.sizes());
    CHECK(u.strides() == t.strides());
    CHECK(at::equal(u, t));
  }
  for (const auto& [k, t] : p.constants()) CHECK(at::equal(q.constants().at(k), t));
  verify(q);
  auto pp = p.clone();  // running updates buffers: run both from the same state
  torch::manual_seed(7);
  const auto a = run(pp, inputs);
  torch::manual_seed(7);
  const auto b = run(q, inputs);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(at::equal(a[i], b[i]));
}

template <class Module>
void check_model(Module model, at::Tensor x) {
  for (bool train : {false, true}) {
    CAPTURE(train);
    torch::manual_seed(0);
    model->train(train);
    auto p = export_program(model, std::tuple{x});
    check_round_trip(p, {x});
    check_round_trip(run_decompositions(p), {x});
  }
}

/// A submodule called twice, another between: torch's stacks count the calls (`c1@1`).
struct TwiceImpl : torch::nn::Module {
  torch::nn::Linear c1{4, 4}, c2{4, 4};
  TwiceImpl() {
    register_module("c1", c1);
    register_module("c2", c2);
  }
  at::Tensor forward(const at::Tensor& x) { return c1(c2(c1(x))); }
};
TORCH_MODULE(Twice);

}  // namespace

TEST_CASE("serde: real models round-trip in both IRs, eval and train") {
  torch::manual_seed(0);
  m::for_each_model([](const char* title, const char*, auto net, at::Tensor x) {
    SUBCASE(title) { check_model(net, x); }
  });
}

TEST_CASE("serde: structure, constants, strict source lines and module paths round-trip") {
  SUBCASE("dict in, tuple out, specialized scalars, a lifted constant") {
    const auto c = at::randn({3});
    auto fn = [&](const std::map<std::string, at::Tensor>& d, std::int64_t k, double s, bool flag) {
      auto y = d.at("a") * s + d.at("b") * k + c;
      return std::tuple{flag ? y.relu() : y, std::vector<at::Tensor>{y.sum(), y.abs()}};
    };
    std::map<std::string, at::Tensor> d{{"a", at::randn({2, 3})}, {"b", at::randn({2, 3})}};
    auto p = export_program(fn, std::tuple{d, std::int64_t{2}, 0.5, true});
    check_round_trip(p, {d.at("a"), d.at("b")});
    auto q = reload(p);
    callable<std::tuple<at::Tensor, std::vector<at::Tensor>>(std::map<std::string, at::Tensor>, std::int64_t, double, bool)> f(q);
    const auto [y, rest] = f(d, 2, 0.5, true);
    CHECK(at::equal(y, std::get<0>(fn(d, 2, 0.5, true))));
  }
  SUBCASE("tuple-returning ops keep their getitem names; captured tensors are constants") {
    struct NetImpl : torch::nn::Module {
      NetImpl() { conv = register_module("conv", torch::nn::Conv1d(3, 4, 3)); }
      at::Tensor forward(at::Tensor x) {
        auto [v, i] = at::max_pool1d_with_indices(conv(x), 2);
        return v * scale.unsqueeze(-1) + i.to(at::kFloat);
      }
      torch::nn::Conv1d conv{nullptr};
      at::Tensor scale = at::full({4}, 2.0);
    };
    auto net = std::make_shared<NetImpl>();
    const auto x = at::randn({2, 3, 10});
    auto p = export_program(net, std::tuple{x});
    CHECK(p.constants().size() == 1);
    CHECK(to_string(p).find("getitem") != std::string::npos);
    check_round_trip(p, {x});
  }
  SUBCASE("the strict front end's source lines") {
    auto p = export_program<xport::strict>([](sym_tensor x) {
      auto s = sin(x);
      return s * x;
    },
                                           std::tuple{at::randn({4, 4})});
    REQUIRE(p.graph().nodes().begin() != p.graph().nodes().end());
    CHECK(to_string(p).find("# File: ") != std::string::npos);
    check_round_trip(p, {at::randn({4, 4})});
  }
}

TEST_CASE("serde: the archive follows torch's PT2 layout and schema") {
  torch::manual_seed(0);
  m::MLP mlp;
  auto p = export_program(mlp, std::tuple{at::randn({2, 16})});
  const auto bytes = save_to_string(p);
  std::set<std::string> names;
  for (const auto& [rec, data] : records_of(bytes)) names.insert(rec);
  CHECK(names.count("archive_format"));
  CHECK(names.count("archive_version"));
  CHECK(names.count("models/model.json"));
  CHECK(names.count("data/weights/model_weights_config.json"));
  CHECK(names.count("data/constants/model_constants_config.json"));
  CHECK(names.count("data/weights/weight_0"));
  const auto j = model_json(bytes);
  CHECK(j["schema_version"]["major"] == 8);
  CHECK(j["schema_version"]["minor"] == 20);
  CHECK(j["verifiers"] == json::array({"TRAINING"}));
  const auto& node = j["graph_module"]["graph"]["nodes"][0];
  CHECK(node["target"] == "torch.ops.aten.t.default");
  CHECK(node["inputs"][0]["name"] == "self");
  CHECK(j["graph_module"]["graph"]["tensor_values"][p.signature().user_inputs()[0]]["dtype"] == 7);  // FLOAT is 7, not c10's 6
  CHECK(j["graph_module"]["signature"]["input_specs"][0]["parameter"]["parameter_name"] ==
        *p.signature().input_specs[0].target);
  // weights are stored, aligned records
  caffe2::serialize::MemoryReadAdapter in(bytes.data(), static_cast<off_t>(bytes.size()));
  const xport::detail::zip_index zip(in);
  CHECK(zip.at("data/weights/weight_0").data_offset % 64 == 0);
}

TEST_CASE("serde: every dtype the export schema numbers round-trips in weights, metadata and arguments") {
  std::size_t checked = 0;
  namespace serde = xport::detail::serde;
  for (const auto& row : serde::scalar_type_rows) {
    const auto dtype = serde::scalar_type_named(row.c10);
    if (!dtype) continue;  // not in this LibTorch (1.13 has no uint16, uint32, uint64, float8_e8m0fnu)
    CAPTURE(row.c10);
    program_builder b;
    auto x = b.input("x", at::arange(6.0).reshape({2, 3}));
    const auto w = (at::arange(6).reshape({2, 3}) % 3).to(*dtype);
    auto buf = b.buffer("b", w);
    b.output(b.call("aten::_to_copy", {x}, {{"dtype", argument(*dtype)}}));
    b.output(b.call("aten::clone", {buf}));
    const auto p = std::move(b).build();
    CHECK(serde::scalar_type_number(*dtype) == row.number);
    const auto q = xport_test::reload(p);
    CHECK(to_string(q) == to_string(p));
    const auto& got = q.state_dict().at("b");
    CHECK((got.scalar_type() == *dtype));
    CHECK(at::equal(got.reshape(-1).contiguous().view(at::kByte), w.reshape(-1).contiguous().view(at::kByte)));
    const auto out = run(q, {at::arange(6.0).reshape({2, 3})});
    CHECK((out[0].scalar_type() == *dtype));
    CHECK((out[1].scalar_type() == *dtype));
    ++checked;
  }
  CHECK(checked >= (XPORT_TEST_TORCH_FUNCTIONALIZATION ? 20u : 13u));  // (2.13: all 21)
  // a number the schema does not have, and a dtype without a number, say so
  CHECK_FALSE(serde::scalar_type_of(27).has_value());
  CHECK_FALSE(serde::scalar_type_of(99).has_value());
  XPORT_CHECK_THROWS_MSG(serde::scalar_type_number(c10::ScalarType::QInt8), xport::error,
                         "[xport.save.dtype] dtype torch.qint8 has no number in the export schema");
}

TEST_CASE("serde: tensors that share storage are written once and stay views of one storage") {
  auto w = at::randn({8, 4});
  auto a = w.narrow(0, 0, 4), b = w.narrow(0, 4, 4);
  program_builder pb;
  auto x = pb.input("x", at::randn({2, 4}));
  auto pa = pb.parameter("a", a), pbb = pb.parameter("b", b);
  pb.output(pb.call("aten::mm", {x, pb.call("aten::t", {pa})}));
  pb.output(pb.call("aten::mm", {x, pb.call("aten::t", {pbb})}));
  auto p = std::move(pb).build();
  const auto bytes = save_to_string(p);
  int weight_records = 0;
  for (const auto& [rec, data] : records_of(bytes)) weight_records += rec.rfind("data/weights/weight_", 0) == 0;
  CHECK(weight_records == 1);
  auto q = load_from_memory(bytes.data(), bytes.size());
  const auto& qa = q.state_dict().at("a");
  const auto& qb = q.state_dict().at("b");
  CHECK(qa.storage().unsafeGetStorageImpl() == qb.storage().unsafeGetStorageImpl());
  CHECK(qb.storage_offset() == 16);
  CHECK(at::equal(qa, a));
  CHECK(at::equal(qb, b));
}

namespace {

/// A program whose state is what a real model's is: many storages of different sizes (a
/// temporary host copy of each is freed before the next, so its address comes back), views of
/// one storage at offsets, a transposed view, and one tensor under two names (tied weights).
exported_program shared_state_program() {
  program_builder pb;
  auto x = pb.input("x", at::randn({2, 4}));
  value acc = x;
  for (int i = 0; i < 6; ++i) {  // 4x4 weights of their own storage, and biases of i+1 elements' storage
    auto w = pb.parameter("layer" + std::to_string(i) + ".weight", at::randn({4, 4}));
    auto b = pb.buffer("layer" + std::to_string(i) + ".scale", at::randn({i + 1}).narrow(0, 0, 1).expand({4}).contiguous());
    acc = pb.call("aten::mul.Tensor", {pb.call("aten::mm", {acc, w}), b});
  }
  auto big = at::randn({8, 4});
  auto lo = pb.parameter("views.lo", big.narrow(0, 0, 4)), hi = pb.parameter("views.hi", big.narrow(0, 4, 4));
  auto tr = pb.parameter("views.t", at::randn({4, 4}).t());
  const auto tied = at::randn({4, 4});
  auto e = pb.parameter("embed.weight", tied), h = pb.parameter("head.weight", tied);
  for (auto v : {lo, hi, tr, e, h}) acc = pb.call("aten::add.Tensor", {acc, pb.call("aten::mm", {x, v})});
  pb.output(acc);
  return std::move(pb).build();
}

/// Checks that `q`'s state holds `p`'s values with `p`'s sharing: the same storage where p's
/// tensors share one, the same offsets and strides.
void check_same_state(const exported_program& p, const exported_program& q) {
  REQUIRE(q.state_dict().size() == p.state_dict().size());
  for (const auto& [k, t] : p.state_dict()) {
    CAPTURE(k);
    const auto& u = q.state_dict().at(k);
    CHECK(u.strides() == t.strides());
    CHECK(u.storage_offset() == t.storage_offset());
    CHECK(at::equal(u.cpu(), t.cpu()));
    for (const auto& [k2, t2] : p.state_dict()) {
      const bool shared = t.storage().unsafeGetStorageImpl() == t2.storage().unsafeGetStorageImpl();
      CHECK_MESSAGE(shared == (u.storage().unsafeGetStorageImpl() == q.state_dict().at(k2).storage().unsafeGetStorageImpl()),
                    k << " and " << k2);
    }
  }
}

/// force_host_copy() on for one scope.
struct host_copy_scope {
  host_copy_scope() { xport::detail::serde::force_host_copy() = true; }
  ~host_copy_scope() { xport::detail::serde::force_host_copy() = false; }
};

}  // namespace

TEST_CASE("serde: storages are keyed by the tensor's own storage through the host copy a device needs") {
  // Device storages reach the file through one host copy each; keyed by that temporary copy,
  // later tensors were written as views of an earlier record (wrong weights on reload). The
  // same path runs here on the CPU.
  const auto p = shared_state_program();
  const auto x = at::randn({2, 4});
  const auto expected = run(p, {x})[0];
  for (const bool copy : {false, true}) {
    CAPTURE(copy);
    std::string bytes;
    {
      std::optional<host_copy_scope> scope;
      if (copy) scope.emplace();
      bytes = save_to_string(p);
    }
    std::set<const void*> storages;
    for (const auto& [k, t] : p.state_dict()) storages.insert(t.storage().unsafeGetStorageImpl());
    int records = 0;
    for (const auto& [rec, data] : records_of(bytes)) records += rec.rfind("data/weights/weight_", 0) == 0;
    CHECK(records == static_cast<int>(storages.size()));  // 6 + 6 + big + transposed + tied = 15
    CHECK(records == 15);
    const auto q = load_from_memory(bytes.data(), bytes.size());
    check_same_state(p, q);
    CHECK(at::equal(run(q, {x})[0], expected));
  }
}

TEST_CASE("serde: an archive of a CUDA program loads where its tensors were, or where load_options::device says") {
  // torch.export.load puts each tensor on its recorded device; a CPU-only machine loads a CUDA
  // archive with load_options::device (torch's map_location). Made here by rewriting a CPU
  // archive's devices, so the CPU-only suite reads one.
  const auto p = shared_state_program();
  const auto x = at::randn({2, 4});
  const auto bytes = save_to_string(p);
  json weights;
  std::string config_name;
  for (const auto& [rec, data] : records_of(bytes))
    if (rec.ends_with("_weights_config.json")) config_name = rec, weights = json::parse(data);
  for (auto& [fqn, entry] : weights["config"].items()) entry["tensor_meta"]["device"] = {{"type", "cuda"}, {"index", 0}};
  auto model = model_json(bytes);
  const auto cuda = with_model(rewrite(bytes, config_name, weights.dump()), model);
  if (!at::hasCUDA()) {
    XPORT_CHECK_THROWS_MSG(load_from_memory(cuda.data(), cuda.size()), load_error,
                           "[xport.load.device] " + config_name + ": config.embed.weight.tensor_meta.device: the tensor was saved "
                                                                "on cuda:0, which this process cannot use");
    XPORT_CHECK_THROWS_MSG(load_from_memory(cuda.data(), cuda.size()), load_error,
                           "load it elsewhere with load_options::device (torch's map_location)");
  } else {
    const auto q = load_from_memory(cuda.data(), cuda.size());
    for (const auto& [k, t] : q.state_dict()) CHECK(t.is_cuda());
    check_same_state(p, q);
  }
  load_options on_cpu;
  on_cpu.device = c10::Device(c10::kCPU);
  const auto q = load_from_memory(cuda.data(), cuda.size(), on_cpu);
  for (const auto& [k, t] : q.state_dict()) CHECK(t.device().is_cpu());
  check_same_state(p, q);
  CHECK(at::equal(run(q, {x})[0], run(p, {x})[0]));
  CHECK(to_string(q) == to_string(p));
}

TEST_CASE("serde: a CUDA program saves and loads on CUDA with its weights and sharing" * doctest::skip(!at::hasCUDA())) {
  auto p = shared_state_program();
  const auto x = at::randn({2, 4});
  const auto expected = run(p, {x})[0];
  p.to(c10::Device(c10::kCUDA));
  const auto bytes = save_to_string(p);
  const auto q = load_from_memory(bytes.data(), bytes.size());
  for (const auto& [k, t] : q.state_dict()) CHECK(t.is_cuda());
  check_same_state(p, q);
  CHECK(at::allclose(run(q, {x.cuda()})[0].cpu(), expected, 1e-4, 1e-5));
  load_options on_cpu;
  on_cpu.device = c10::Device(c10::kCPU);
  const auto r = load_from_memory(bytes.data(), bytes.size(), on_cpu);
  check_same_state(p, r);
  CHECK(at::allclose(run(r, {x})[0], expected, 1e-4, 1e-5));
}

TEST_CASE("serde: files, streams and example inputs") {
  torch::manual_seed(0);
  m::LeNet net;
  net->eval();
  const auto x = at::randn({1, 1, 28, 28});
  auto p = export_program(net, std::tuple{x});
  p.set_example_inputs(std::vector<at::Tensor>{x});
  const auto path = temp_path("xport_test_lenet.pt2");
  save_options so;
  so.example_inputs = true;
  save(p, path, so);
  auto q = load(path);
  CHECK(to_string(q) == to_string(p));
  CHECK_FALSE(q.example_inputs().has_value());
  load_options lo;
  lo.example_inputs = true;
  auto r = load(path, lo);
  REQUIRE(r.example_inputs().has_value());
  CHECK(at::equal(r.example_inputs()->at(0), x));
  std::stringstream ss;
  save(p, ss);
  auto s = load(ss);
  CHECK(at::equal(run(s, {x})[0], net->forward(x)));
  // a save that fails leaves the existing file as it was
  program_builder bad;
  auto in = bad.input("x", at::randn({2}));
  bad.output(bad.call("aten::sin", {in}));
  auto broken = std::move(bad).build();
  broken.state_dict_mut().set("sparse", at::eye(2).to_sparse());
  XPORT_CHECK_THROWS_MSG(save(broken, path), xport::error, "[xport.save.layout] tensor 'sparse' is not strided");
  CHECK(to_string(load(path)) == to_string(p));
  CHECK_FALSE(std::filesystem::exists(path + ".xport-partial"));
  std::remove(path.c_str());
  XPORT_CHECK_THROWS_MSG(load(path), load_error, "[xport.load.open] cannot open '");
}

// ---- bad files --------------------------------------------------------------------------------

namespace {

exported_program small_program() {
  torch::manual_seed(0);
  auto lin = torch::nn::Linear(4, 3);
  auto bn = torch::nn::BatchNorm1d(3);
  auto seq = torch::nn::Sequential(lin, bn, torch::nn::ReLU());
  seq->eval();
  return export_program(seq, std::tuple{at::randn({2, 4})});
}

void check_bad(const std::string& bytes, const std::string& fragment) {
  XPORT_CHECK_THROWS_MSG(load_from_memory(bytes.data(), bytes.size()), load_error, fragment);
}

}  // namespace

TEST_CASE("serde: every truncation of an archive is a load_error") {
  const auto bytes = save_to_string(small_program());
  int rejected = 0;
  for (std::size_t n = 0; n < bytes.size(); n += std::max<std::size_t>(1, bytes.size() / 300)) {
    try {
      (void)load_from_memory(bytes.data(), n);
    } catch (const load_error&) {
      ++rejected;
      continue;
    }
    FAIL("a truncation to " << n << " bytes loaded");
  }
  CHECK(rejected > 250);
  check_bad(bytes.substr(0, 10), "[xport.load.bad_zip] not a valid archive: the file is too small");
  check_bad(bytes.substr(0, bytes.size() - 30), "[xport.load.bad_zip]");
}

TEST_CASE("serde: corrupted bytes never crash the loader") {
  const auto bytes = save_to_string(small_program());
  std::mt19937 rng(1234);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    auto b = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<char>(rng());
    try {
      auto p = load_from_memory(b.data(), b.size());
      ++loaded;  // e.g. a flipped weight byte: a valid file with other weights
    } catch (const xport::error&) {
      ++rejected;
    }
  }
  CHECK(loaded + rejected == 400);
  CHECK(rejected > 0);
}

TEST_CASE("serde: hostile records give load_errors naming the record and the problem") {
  const auto p = small_program();
  const auto bytes = save_to_string(p);
  const auto j = model_json(bytes);
  const std::string input = j["graph_module"]["graph"]["inputs"].back()["as_tensor"]["name"];
  SUBCASE("missing records") {
    check_bad(rewrite(bytes, "models/model.json", std::nullopt),
              "[xport.load.missing_record] record 'models/model.json' is missing (the archive has no models/)");
    check_bad(rewrite(bytes, "archive_format", std::nullopt),
              "[xport.load.missing_record] record 'archive_format' is missing from the archive");
    check_bad(rewrite(bytes, "data/weights/weight_0", std::nullopt),
              "names record 'data/weights/weight_0', which is missing from the archive");
  }
  SUBCASE("format and versions") {
    check_bad(rewrite(bytes, "archive_format", "zip"), "[xport.load.format] record 'archive_format' says 'zip', not 'pt2'");
    check_bad(rewrite(bytes, "archive_version", "7"), "[xport.load.version] archive version '7' is not");
    auto k = j;
    k["schema_version"]["major"] = 9;
    check_bad(with_model(bytes, k), "models/model.json: schema_version: schema version 9.20 is not readable by this xport, "
                                     "which reads major version 8");
    k = j;
    k["schema_version"]["minor"] = 99;  // a newer minor version loads
    const auto b = with_model(bytes, k);
    CHECK(to_string(load_from_memory(b.data(), b.size())) == to_string(p));
  }
  SUBCASE("malformed and mistyped JSON") {
    check_bad(rewrite(bytes, "models/model.json", "{\"graph_module\": [1, 2"), "[xport.load.json] models/model.json: malformed JSON");
    check_bad(rewrite(bytes, "models/model.json", std::string(100, '[') + std::string(100, ']')),
              "[xport.load.json] models/model.json: JSON nested deeper than 64 levels");
    auto k = j;
    k["graph_module"]["graph"]["nodes"][0]["inputs"][0]["name"] = 5;
    check_bad(with_model(bytes, k), "[xport.load.schema] models/model.json: graph_module.graph.nodes[0].inputs[0].name: expected a string, got number");
    k = j;
    k["graph_module"]["graph"].erase("tensor_values");
    check_bad(with_model(bytes, k), "graph_module.graph: missing field 'tensor_values'");
    k = j;
    k["graph_module"]["graph"]["tensor_values"][input]["dtype"] = 99;
    check_bad(with_model(bytes, k), "graph_module.graph.tensor_values." + input + ".dtype: unknown ScalarType 99");
  }
  SUBCASE("dangling names, cycles, unknown ops, bad arguments") {
    auto k = j;
    k["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {{"as_tensor", {{"name", "ghost"}}}};
    check_bad(with_model(bytes, k), "'ghost' names no value in the graph");
    k = j;
    auto& nodes = k["graph_module"]["graph"]["nodes"];
    std::swap(nodes[0], nodes[1]);
    check_bad(with_model(bytes, k), "is used before the node that defines it (the nodes are out of order or form a cycle)");
    k = j;
    k["graph_module"]["graph"]["nodes"][0]["target"] = "torch.ops.aten.frobnicate.default";
    check_bad(with_model(bytes, k), "graph_module.graph.nodes[0].target: operator 'torch.ops.aten.frobnicate.default' is not "
                                     "registered in this LibTorch");
    k = j;
    k["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {{"as_string", "x"}};
    check_bad(with_model(bytes, k), "[xport.schema.arg_type]");
    k = j;
    k["graph_module"]["graph"]["nodes"][0]["outputs"][0]["as_tensor"]["name"] = input;
    check_bad(with_model(bytes, k), "name '" + input + "' is already used in this graph");
  }
  SUBCASE("weights whose config and bytes disagree") {
    std::string config;
    for (const auto& [rec, data] : records_of(bytes))
      if (rec == "data/weights/model_weights_config.json") config = data;
    auto c = json::parse(config);
    c["config"]["0.weight"]["tensor_meta"]["sizes"] = json::array({{{"as_int", 3000}}, {{"as_int", 4}}});
    check_bad(rewrite(bytes, "data/weights/model_weights_config.json", c.dump()),
              "config.0.weight: Float tensor of f32[3000, 4] needs 48000 bytes but record 'data/weights/weight_0' holds 48");
    c = json::parse(config);
    c["config"]["0.weight"]["tensor_meta"]["strides"] = json::array({{{"as_int", INT64_MAX}}, {{"as_int", 1}}});
    check_bad(rewrite(bytes, "data/weights/model_weights_config.json", c.dump()), "config.0.weight: sizes and strides overflow");
    c = json::parse(config);
    c["config"]["0.weight"]["tensor_meta"]["dtype"] = 8;  // double: twice the bytes
    check_bad(rewrite(bytes, "data/weights/model_weights_config.json", c.dump()), "needs 96 bytes but record");
    c = json::parse(config);
    c["config"].erase("0.weight");
    check_bad(rewrite(bytes, "data/weights/model_weights_config.json", c.dump()),
              "[xport.load.missing_tensor] data/weights/model_weights_config.json: no tensor for PARAMETER '0.weight'");
    c = json::parse(config);
    c["config"]["0.weight"]["use_pickle"] = true;
    check_bad(rewrite(bytes, "data/weights/model_weights_config.json", c.dump()), "pickled payloads other than custom objects are not read by xport (pickled tensors, tensor subclasses");
  }
  SUBCASE("a program that does not verify") {
    auto k = j;
    auto& specs = k["graph_module"]["signature"]["input_specs"];
    std::swap(specs[0], specs[1]);
    check_bad(with_model(bytes, k), "[xport.load.invalid_program] models/model.json: the program does not verify");
  }
}

TEST_CASE("serde: symbolic sizes, ranges and size nodes of hostile files give load_errors") {
  auto f = [](const at::Tensor& x) { return x.view({x.size(0), -1}) * 2; };
  const auto p = export_program(f, std::tuple{at::randn({3, 2, 2})}, {.dynamic_shapes = {{"x", {{0, Dim("b", 1, 64)}}}}});
  const auto bytes = save_to_string(p);
  const auto good = model_json(bytes);
  auto q = load_from_memory(bytes.data(), bytes.size());
  CHECK(to_string(q) == to_string(p));
  auto edit = [&](auto&& change) {
    json j = good;
    change(j);
    return with_model(bytes, j);
  };
  auto sym_node = [](json& j) -> json& {
    for (auto& n : j["graph_module"]["graph"]["nodes"])
      if (n["target"] == "torch.ops.aten.sym_size.int") return n;
    throw std::runtime_error("no sym_size node");
  };
  check_bad(edit([](json& j) { j["range_constraints"]["s77"]["min_val"] = 70; }), "min_val 70 > max_val 64");
  {  // a range of a derived expression (torch may write one) follows from its symbol's: ignored
    const auto derived = edit([](json& j) { j["range_constraints"]["2*s77"] = {{"min_val", 2}, {"max_val", 128}}; });
    auto d = load_from_memory(derived.data(), derived.size());
    CHECK(d.range_constraints().size() == 1);
    CHECK(at::equal(run(d, {at::ones({5, 2, 2})})[0], at::full({5, 4}, 2.0)));
  }
  check_bad(edit([&](json& j) { sym_node(j)["inputs"][1]["arg"]["as_int"] = 7; }), "dim 7 is out of range for 'x' of rank 3");
  check_bad(edit([&](json& j) { sym_node(j)["target"] = "_operator.pow"; }), "_operator.pow");
  check_bad(edit([](json& j) { j["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]["expr_str"] = "s77 +* 2"; }),
            "cannot read the symbolic size 's77 +* 2'");
  check_bad(edit([](json& j) { j["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]["expr_str"] = "s77//0"; }),
            "division by zero");
  check_bad(edit([](json& j) { j["graph_module"]["metadata"]["xport.dim_names"] = "{\"s77\": 5}"; }), "expected a string");
}

// ---- torch.export 2.13's forms (tests/test_interop.cpp runs torch itself on them) ---------------

TEST_CASE("serde: torch's forms of floats, constant inputs, example inputs and module stacks") {
  SUBCASE("-inf and NaN are the strings torch writes, and load back") {
    auto fn = [](const at::Tensor& x) {
      auto y = x.masked_fill(x > 0, -std::numeric_limits<double>::infinity());
      return y.nan_to_num(std::numeric_limits<double>::quiet_NaN(), 1.0, -1.0);
    };
    auto p = export_program(fn, std::tuple{at::randn({6})});
    const auto bytes = save_to_string(p);
    const auto text = model_json(bytes).dump();
    CHECK(text.find("\"as_float\":\"-Infinity\"") != std::string::npos);
    CHECK(text.find("\"as_float\":\"NaN\"") != std::string::npos);
    check_round_trip(p, {at::randn({6})});
  }
  SUBCASE("a specialized constant has a placeholder and a constant_input spec, as torch writes them") {
    auto fn = [](const at::Tensor& x, std::int64_t k, const std::map<std::string, double>& d) { return x * k + d.at("s"); };
    auto p = export_program(fn, std::tuple{at::randn({3}), std::int64_t{2}, std::map<std::string, double>{{"s", 0.5}}},
                            {.input_names = {"x", "k", "d"}});
    CHECK(to_string(p).find("def forward(self, x: \"f32[3]\", k, d_s):") != std::string::npos);
    CHECK(p.signature().user_inputs() == std::vector<std::string>{"x", "k", "d_s"});
    const auto j = model_json(save_to_string(p));
    const auto& g = j["graph_module"]["graph"];
    CHECK(g["inputs"][1] == json{{"as_int", 2}});
    CHECK(g["inputs"][2] == json{{"as_float", 0.5}});
    CHECK(j["graph_module"]["signature"]["input_specs"][1] == json{{"constant_input", {{"name", "k"}, {"value", {{"as_int", 2}}}}}});
    const auto& call = j["graph_module"]["module_call_graph"][0]["signature"];
    CHECK(call["forward_arg_names"] == json::array({"x", "k", "d"}));
    CHECK(call["inputs"] == json::array());
    check_round_trip(p, {at::randn({3})});
    // xport::run takes the tensors; callable<Sig> takes the constants too and checks them
    auto q = reload(p);
    callable<at::Tensor(at::Tensor, std::int64_t, std::map<std::string, double>)> f(q);
    const auto x = at::randn({3});
    CHECK(at::equal(f(x, 2, {{"s", 0.5}}), run(q, {x})[0]));
    XPORT_CHECK_THROWS_MSG(f(x, 3, {{"s", 0.5}}), guard_error, "[xport.guard.structure] the inputs have structure (*, 3, {'s': 0.5})");
    // a constant input whose graph value and spec disagree, or that the graph reads
    auto k = j;
    k["graph_module"]["graph"]["inputs"][1] = {{"as_int", 7}};
    check_bad(with_model(save_to_string(p), k), "graph_module.graph.inputs[1]: the graph input's value differs from constant input 'k'");
    k = j;
    k["graph_module"]["graph"]["nodes"][0]["inputs"][1]["arg"] = {{"as_tensor", {{"name", "k"}}}};
    check_bad(with_model(save_to_string(p), k), "'k' names no value in the graph");
  }
  SUBCASE("data/sample_inputs is always there: empty without example inputs, (args, kwargs) nested with them") {
    auto fn = [](const std::vector<at::Tensor>& xs, std::int64_t k) { return xs[0] * k + xs[1]; };
    auto p = export_program(fn, std::tuple{std::vector<at::Tensor>{at::randn({2}), at::randn({2})}, std::int64_t{3}});
    const auto plain = save_to_string(p);
    bool empty_record = false;
    for (const auto& [rec, data] : records_of(plain)) empty_record = empty_record || (rec == "data/sample_inputs/model.pt" && data.empty());
    CHECK(empty_record);
    load_options lo;
    lo.example_inputs = true;
    CHECK_FALSE(load_from_memory(plain.data(), plain.size(), lo).example_inputs().has_value());
    save_options so;
    so.example_inputs = true;
    const auto with = save_to_string(p, so);
    std::string record;
    for (const auto& [rec, data] : records_of(with))
      if (rec == "data/sample_inputs/model.pt") record = data;
    const auto v = torch::jit::pickle_load(std::vector<char>(record.begin(), record.end()));
    const auto& args = v.toTupleRef().elements()[0].toTupleRef().elements();
    REQUIRE(args.size() == 2);  // ([x0, x1], 3)
    CHECK(args[0].toListRef().size() == 2);
    CHECK(args[1].toInt() == 3);
    const auto q = load_from_memory(with.data(), with.size(), lo);
    REQUIRE(q.example_inputs().has_value());
    CHECK(at::equal(q.example_inputs()->at(1), p.example_inputs()->at(1)));
  }
  SUBCASE("nn_module_stack has every ancestor with its C++ type; the innermost path is read back") {
    torch::manual_seed(0);
    m::MLP mlp;
    auto p = export_program(mlp, std::tuple{at::randn({2, 16})});
    REQUIRE(p.module_types().size() >= 3);
    CHECK(p.module_types()[0] == std::pair<std::string, std::string>{"", "xport_models::MLPImpl"});
    const auto j = model_json(save_to_string(p));
    const auto& node = j["graph_module"]["graph"]["nodes"][0];
    CHECK(node["metadata"]["nn_module_stack"] ==
          "L__self__,,xport_models::MLPImpl;L__self__layers,layers,torch::nn::SequentialImpl;"
          "L__self__layers.0,layers.0,torch::nn::LinearImpl");
    CHECK(j["graph_module"]["module_call_graph"][1] == json{{"fqn", "layers"}, {"signature", nullptr}});
    // a container nothing calls (ModuleList) is no frame, as in torch's stacks (its unflatten nests
    // by them); the GELU between a Sequential's Linears is the Sequential's, which is called once
    m::MoE moe;
    const auto mj = model_json(save_to_string(export_program(moe, std::tuple{at::randn({6, 8})})));
    std::set<std::string> stacks;
    for (const auto& n : mj["graph_module"]["graph"]["nodes"])
      if (n["metadata"].contains("nn_module_stack")) stacks.insert(n["metadata"]["nn_module_stack"].get<std::string>());
    CHECK(stacks.count("L__self__,,xport_models::MoEImpl;L__self__experts.1,experts.1,torch::nn::SequentialImpl;"
                       "L__self__experts.1.2,experts.1.2,torch::nn::LinearImpl") == 1);
    CHECK(stacks.count("L__self__,,xport_models::MoEImpl;L__self__experts.1,experts.1,torch::nn::SequentialImpl") == 1);
    for (const auto& st : stacks) CHECK_MESSAGE(st.find('@') == std::string::npos, st);
    // a module's next call is `@1` (its nodes in a row are one call), as torch counts them
    Twice twice;
    const auto tj = model_json(save_to_string(export_program(twice, std::tuple{at::randn({2, 4})})));
    std::vector<std::string> keys;
    for (const auto& n : tj["graph_module"]["graph"]["nodes"]) {
      const auto stack = n["metadata"]["nn_module_stack"].get<std::string>();
      keys.push_back(stack.substr(stack.rfind(';') + 1, stack.find(',', stack.rfind(';')) - stack.rfind(';') - 1));
    }
    CHECK((keys == std::vector<std::string>{"L__self__c1", "L__self__c1", "L__self__c2", "L__self__c2", "L__self__c1@1",
                                            "L__self__c1@1"}));
    const auto first_call = [](const exported_program& e) {
      for (auto n : e.graph().nodes())
        if (n.is_call()) return n;
      return xport::node();
    };
    const auto q = reload(p);
    CHECK(first_call(q).module_path() == "layers.0");
    // the module call graph keeps every FQN; the file has the types of the modules in some stack
    REQUIRE(q.module_types().size() == p.module_types().size());
    for (std::size_t i = 0; i < p.module_types().size(); ++i) {
      CHECK(q.module_types()[i].first == p.module_types()[i].first);
      if (!q.module_types()[i].second.empty()) CHECK(q.module_types()[i].second == p.module_types()[i].second);
    }
    CHECK(q.module_types()[2] == std::pair<std::string, std::string>{"layers.0", "torch::nn::LinearImpl"});
    // xport's form before 8.20 (`path,path,`) still reads
    auto k = j;
    k["graph_module"]["graph"]["nodes"][0]["metadata"]["nn_module_stack"] = "layers.2,layers.2,";
    const auto old = with_model(save_to_string(p), k);
    CHECK(first_call(load_from_memory(old.data(), old.size())).module_path() == "layers.2");
  }
}

TEST_CASE("serde: size arguments of any form are written as torch's size nodes and read back") {
  // a product of dims: _operator.mul over sym_size.int nodes (floor division, modulo, min and max
  // are written as torch writes them too: test_interop saves torch's own programs with them again)
  auto f = [](const at::Tensor& x) { return std::tuple{x.reshape({x.size(0) * x.size(1)}), x.sum(1) * x.size(0)}; };
  const auto p = export_program(f, std::tuple{at::randn({5, 3})},
                                {.dynamic_shapes = {{"x", {{0, Dim("a", 3, 64)}, {1, Dim("b", 2, 64)}}}}});
  const auto bytes = save_to_string(p);
  std::set<std::string> targets;
  const auto j = model_json(bytes);
  for (const auto& n : j["graph_module"]["graph"]["nodes"]) targets.insert(n["target"].get<std::string>());
  CHECK(targets.count("torch.ops.aten.sym_size.int"));
  CHECK(targets.count("_operator.mul"));
  const auto q = load_from_memory(bytes.data(), bytes.size());
  CHECK(to_string(q) == to_string(p));
  const auto x = at::randn({7, 5});
  const auto got = run(q, {x});
  CHECK(at::equal(got[0], x.reshape({35})));
  CHECK(at::allclose(got[1], x.sum(1) * 7));
}

TEST_CASE("serde: archives of xport before schema 8.20 keep their structure in the metadata") {
  // they wrote specialized constants as in_spec leaves without placeholders, and the exact
  // structure as graph_module.metadata["xport.in_spec"]
  auto p = export_program([](const at::Tensor& x) { return x * 2; }, std::tuple{at::randn({3})});
  auto j = model_json(save_to_string(p));
  j["graph_module"]["metadata"]["xport.in_spec"] =
      R"({"kind": "tuple", "children": [{"kind": "leaf"}, {"kind": "constant", "value": {"as_int": 2}}]})";
  j["graph_module"]["metadata"]["xport.out_spec"] = R"({"kind": "leaf"})";
  auto& sig = j["graph_module"]["module_call_graph"][0]["signature"];
  sig["in_spec"] = R"([1, {"type": "builtins.tuple", "context": "null", "children_spec": [{"type": "builtins.tuple", "context": "null", "children_spec": [{"type": null, "context": null, "children_spec": []}, {"type": null, "context": null, "children_spec": []}]}, {"type": "builtins.dict", "context": "[]", "children_spec": []}]}])";
  const auto old = with_model(save_to_string(p), j);
  const auto q = load_from_memory(old.data(), old.size());
  REQUIRE(q.in_spec().has_value());
  CHECK(q.in_spec()->str() == "(*, 2)");
  CHECK(at::equal(run(q, {at::ones({3})})[0], at::full({3}, 2.0)));
}

TEST_CASE("serde: a model with custom operators round-trips; an unloaded operator library is a load_error naming it") {
  SUBCASE("GatedBlock, both IRs") { check_model(xport_test::GatedBlock(), at::randn({2, 5, 32})); }
  torch::manual_seed(0);
  xport_test::GatedBlock net;
  net->eval();
  const auto bytes = save_to_string(export_program(net, std::tuple{at::randn({2, 5, 32})}));
  auto j = model_json(bytes);
  auto& nodes = j["graph_module"]["graph"]["nodes"];
  std::size_t gate = 0;
  while (gate < nodes.size() && nodes[gate]["target"] != "torch.ops.xport_ops.top_k_gate.default") ++gate;
  REQUIRE(gate < nodes.size());
  const std::string where = "[xport.load.schema] models/model.json: graph_module.graph.nodes[" + std::to_string(gate) + "].target: ";
  SUBCASE("a library the process has not loaded") {
    nodes[gate]["target"] = "torch.ops.xport_router.top_k_gate.default";
    check_bad(with_model(bytes, j), where + "custom operator xport_router::top_k_gate ('torch.ops.xport_router.top_k_gate.default') "
                                            "is not registered in this process: no operator of library 'xport_router' is. Fix: "
                                            "load the library that defines it before load() (link it, or dlopen its shared library: "
                                            "its TORCH_LIBRARY(xport_router, m) block registers the schema");
  }
  SUBCASE("a library without that operator (another version of it)") {
    nodes[gate]["target"] = "torch.ops.xport_ops.top_k_gate.v2";
    check_bad(with_model(bytes, j), where + "custom operator xport_ops::top_k_gate.v2 ('torch.ops.xport_ops.top_k_gate.v2') is not "
                                            "registered in this process: library 'xport_ops' is loaded but defines no such operator "
                                            "(it has: ");
    check_bad(with_model(bytes, j), " xport_ops::top_k_gate ");
  }
  SUBCASE("arguments the schema does not have") {
    nodes[gate]["inputs"].push_back({{"name", "temperature"}, {"arg", {{"as_float", 0.5}}}, {"kind", 1}});
    check_bad(with_model(bytes, j), "has no argument named 'temperature'");
  }
}

TEST_CASE("serde: what xport cannot represent is a load_error naming the kind") {
  auto fn = [](const at::Tensor& x) { return x.view({x.size(0), -1}) * 2; };
  const auto p = export_program(fn, std::tuple{at::randn({3, 2, 2})}, {.dynamic_shapes = {{"x", {{0, Dim("b", 1, 64)}}}}});
  const auto bytes = save_to_string(p);
  const auto good = model_json(bytes);
  const auto edit = [&](auto&& change) {
    json j = good;
    change(j);
    return with_model(bytes, j);
  };
  const auto node_of = [](json& j, const std::string& target) -> json& {  // by target prefix
    for (auto& n : j["graph_module"]["graph"]["nodes"])
      if (n["target"].get<std::string>().rfind(target, 0) == 0) return n;
    throw std::runtime_error("no " + target);
  };
  const auto arg = [&](const json& a) {
    return edit([&](json& j) { node_of(j, "torch.ops.aten.mul.")["inputs"][1]["arg"] = a; });
  };
  const auto complex = arg({{"as_complex", {{"real", 1.0}, {"imag", 2.0}}}});  // read: a Python complex
  CHECK(to_string(load_from_memory(complex.data(), complex.size())).find("torch.ops.aten.mul.Tensor(view, (1+2j))") !=
        std::string::npos);
  check_bad(arg({{"as_graph", {{"name", "true_graph_0"}}}}), "argument kind 'as_graph' (a subgraph of a higher-order operator");
  check_bad(arg({{"as_operator", "torch.ops.aten.sin.default"}}), "argument kind 'as_operator'");
  check_bad(arg({{"as_string_to_argument", json::object()}}), "argument kind 'as_string_to_argument' (a dict of arguments)");
  // (a custom object is a CUSTOM_OBJ input: an argument naming none is refused at its name)
  check_bad(arg({{"as_custom_obj", {{"name", "obj"}, {"class_fqn", "a.B"}}}}), "arg.as_custom_obj: 'obj' names no value in the graph");
  check_bad(arg({{"as_token", {{"name", "t"}}}}), "argument kind 'as_token'");
  check_bad(arg({{"as_int_lists", json::array({json::array({1, 2})})}}), "[xport.schema.arg_type]");  // read, but mul takes no int[][]
  check_bad(edit([&](json& j) { node_of(j, "torch.ops.aten.mul.")["target"] = "torch.ops.higher_order.associative_scan"; }),
            "higher-order operator 'torch.ops.higher_order.associative_scan' (torch.associative_scan, with its subgraphs "
            "as as_graph arguments) is not supported by xport: of torch's higher-order operators it reads torch.cond, "
            "torch.while_loop, torch.map, torch.scan, torch.no_grad / torch.enable_grad, torch.autocast");
  check_bad(edit([&](json& j) { node_of(j, "torch.ops.aten.mul.")["target"] = "torch.ops.higher_order.scan"; }),
            "higher_order::scan takes 4 arguments (combine_fn, init, xs, additional_inputs), the node has 2");
  check_bad(edit([&](json& j) { node_of(j, "torch.ops.aten.mul.")["target"] = "torch.ops.higher_order.while_loop"; }),
            "higher_order::while_loop takes 4 arguments (cond_fn, body_fn, carried_inputs, additional_inputs), the node has 2");
  check_bad(edit([&](json& j) { node_of(j, "torch.ops.aten.mul.")["target"] = "torch.ops.higher_order.cond"; }),
            "higher_order::cond takes 4 arguments (pred, true_fn, false_fn, operands), the node has 2");
  check_bad(edit([&](json& j) {
              auto& n = node_of(j, "torch.ops.aten.sym_size.int");
              n["target"] = "_operator.xor";
              n["outputs"][0] = {{"as_sym_bool", {{"as_name", "xor"}}}};
            }),
            "operator '_operator.xor' computes a SymBool xport does not represent (it reads comparisons of sizes");
  {  // assertions on sizes (Note [Runtime assertions as ranges])
    const auto with_assert = [&](json cond_b) {
      return edit([&](json& j) {
        auto& nodes = j["graph_module"]["graph"]["nodes"];
        const auto size = node_of(j, "torch.ops.aten.sym_size.int")["outputs"][0]["as_sym_int"]["as_name"];
        const json a = {{"name", "a"}, {"arg", {{"as_sym_int", {{"as_name", size}}}}}, {"kind", 1}};
        nodes.insert(nodes.begin() + 1, json{{"target", "_operator.le"},
                                             {"inputs", json::array({a, {{"name", "b"}, {"arg", cond_b}, {"kind", 1}}})},
                                             {"outputs", json::array({{{"as_sym_bool", {{"as_name", "le"}}}}})},
                                             {"metadata", json::object()}, {"name", "le"}});
        nodes.insert(nodes.begin() + 2, json{{"target", "torch.ops.aten._assert_scalar.default"},
                                             {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_sym_bool", {{"as_name", "le"}}}}}, {"kind", 1}},
                                                                     {{"name", "assert_msg"}, {"arg", {{"as_string", "m"}}}, {"kind", 1}}})},
                                             {"outputs", json::array()}, {"metadata", json::object()}, {"name", "a"}});
      });
    };
    const auto size_name = [&] {
      json j = good;
      return node_of(j, "torch.ops.aten.sym_size.int")["outputs"][0]["as_sym_int"]["as_name"];
    };
    {  // two sizes compared: kept as a relation between them, checked on every run
      const auto rel = with_assert({{"as_sym_int", {{"as_name", size_name()}}}});
      const auto q = load_from_memory(rel.data(), rel.size());
      std::size_t relations = 0;
      for (const auto& rc : q.range_constraints()) relations += rc.relations.size();
      CHECK(relations == 1);
      CHECK(to_string(q).find("Runtime assertion failed for expression s77 <= s77") != std::string::npos);
    }
    check_bad(with_assert({{"as_int", -5}}), "the assertions leave s");
  }
  check_bad(edit([&](json& j) { node_of(j, "torch.ops.aten.sym_size.int")["target"] = "_operator.lshift"; }),
            "operator '_operator.lshift' on sizes is not supported by xport");
  check_bad(edit([](json& j) {
              j["graph_module"]["module_call_graph"][0]["signature"]["in_spec"] =
                  R"([1, {"type": "collections.namedtuple", "context": "P", "children_spec": []}])";
            }),
            "expected the in_spec of a call, a tuple of (args tuple, kwargs dict)");
  check_bad(edit([](json& j) { j["graph_module"]["module_call_graph"][0]["signature"]["in_spec"] = "[2, {}]"; }),
            "pytree protocol 2 is not readable by xport");
  // sym_bool_values are read: a graph value typed there is known
  const auto b = edit([](json& j) { j["graph_module"]["graph"]["sym_bool_values"]["flag"] = {{"as_bool", true}}; });
  CHECK(to_string(load_from_memory(b.data(), b.size())) == to_string(p));
}

TEST_CASE("serde: a weight that cannot require grad is a load_error (a user's file)") {
  // a bool parameter marked requires_grad: LibTorch's requires_grad_ would throw a c10::Error
  XPORT_CHECK_THROWS_MSG(load(xport_test::test_dir() + "/data/load-requires-grad-int.pt2"), load_error,
                         "[xport.load.schema] data/weights/model_weights_config.json: config.1.weight.tensor_meta.requires_grad: "
                         "a Bool tensor cannot require grad (only floating-point and complex tensors can)");
}

// ---- mapped weights ---------------------------------------------------------------------------

namespace {

/// The address ranges of `path` in this process's mappings (/proc/self/maps).
std::vector<std::pair<std::uintptr_t, std::uintptr_t>> mappings_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> out;
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() < path.size() || line.compare(line.size() - path.size(), path.size(), path) != 0) continue;
    const auto dash = line.find('-');
    out.emplace_back(std::stoull(line.substr(0, dash), nullptr, 16), std::stoull(line.substr(dash + 1), nullptr, 16));
  }
  return out;
}

bool inside(const at::Tensor& t, const std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& ranges) {
  const auto a = reinterpret_cast<std::uintptr_t>(static_cast<const void*>(t.storage().data()));
  for (const auto& [lo, hi] : ranges)
    if (a >= lo && a + t.storage().nbytes() <= hi) return true;
  return false;
}


/// `p` saved, loaded with mmap: every state tensor but the ones it writes is a read-only view of
/// the file, equal to p's; runs equal p's runs bit for bit, twice (mutations written back).
template <class Module>
void check_mapped(Module model, const at::Tensor& x) {
  for (const auto& [train, decomposed] : {std::pair{false, false}, {false, true}, {true, false}, {true, true}}) {
    CAPTURE(train);
    CAPTURE(decomposed);
    model->train(train);
    auto p = export_program(model, std::tuple{x});
    if (decomposed) p = run_decompositions(p);
    const auto path = temp_path("xport_test_mapped.pt2");
    save(p, path);
    load_options lo;
    lo.mmap = true;
    auto q = load(path, lo);
    const auto ranges = mappings_of(path);
    REQUIRE_FALSE(ranges.empty());
    std::remove(path.c_str());  // the mapping keeps the file's pages
    CHECK(to_string(q) == to_string(p));
    std::set<std::string> mutated;  // BatchNorm's statistics in training mode: read into memory
    for (const auto& [k, t] : p.state_dict())
      for (const char* stat : {"running_mean", "running_var", "num_batches_tracked"})
        if (train && k.size() > std::strlen(stat) && k.compare(k.size() - std::strlen(stat), std::string::npos, stat) == 0)
          mutated.insert(k);
    for (const auto& [k, t] : p.state_dict()) {
      CAPTURE(k);
      const auto& u = q.state_dict().at(k);
      CHECK(is_mapped(u) == !mutated.count(k));
      CHECK(inside(u, ranges) == !mutated.count(k));
      CHECK(u.requires_grad() == t.requires_grad());
      CHECK(at::equal(u, t));
    }
    for (const auto& [k, t] : p.constants()) CHECK(is_mapped(q.constants().at(k)));
    auto pp = p.clone();
    for (int i = 0; i < 2; ++i) {
      torch::manual_seed(7);
      const auto a = run(pp, {x});
      torch::manual_seed(7);
      const auto b = run(q, {x});
      REQUIRE(a.size() == b.size());
      for (std::size_t j = 0; j < a.size(); ++j) CHECK(at::equal(a[j], b[j]));
    }
    for (const auto& [k, t] : pp.state_dict()) CHECK(at::equal(q.state_dict().at(k), t));
  }
}

}  // namespace

TEST_CASE("serde: load with mmap maps every weight read-only, on real models in both IRs") {
  torch::manual_seed(0);
  m::for_each_model([](const char* title, const char*, auto net, at::Tensor x) {
    SUBCASE(title) { check_mapped(net, x); }
  });
}

TEST_CASE("serde: a mapped weight refuses writes, and the mapping lives as long as its tensors") {
  auto p = small_program();
  const auto path = temp_path("xport_test_mapped_small.pt2");
  save(p, path);
  load_options lo;
  lo.mmap = true;
  at::Tensor kept;
  {
    auto q = load(path, lo);
    auto w = q.state_dict().at("0.weight");
    REQUIRE(is_mapped(w));
    const auto before = w.clone();
    {  // the pages refuse the write: the child process that writes dies, the parent's weights stay
      c10::NoGradGuard no_grad;  // as a user writes weights
      std::fflush(nullptr);
      const pid_t child = fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        std::signal(SIGSEGV, SIG_DFL);  // not the test framework's crash report
        w.add_(1);
        _exit(0);
      }
      int status = 0;
      REQUIRE(waitpid(child, &status, 0) == child);
      INFO("child status " << status);
      CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
      if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGSEGV);
    }
    CHECK(at::equal(w, before));
    // reading works everywhere: views, copies, saving, passes, running
    CHECK(at::equal(w.t().contiguous().t(), w));
    const auto x = at::randn({2, 4});
    CHECK(at::allclose(run(q, {x})[0], run(p, {x})[0]));
    const auto again = save_to_string(q);
    CHECK(to_string(load_from_memory(again.data(), again.size())) == to_string(p));
    auto d = run_decompositions(q);
    CHECK(is_mapped(d.state_dict().at("0.weight")));
    CHECK(at::allclose(run(d, {x})[0], run(p, {x})[0]));
    kept = q.state_dict().at("1.running_var");
  }
  std::remove(path.c_str());
  CHECK(mappings_of(path + " (deleted)").size() == 1);  // one tensor keeps the mapping
  CHECK(at::equal(kept, p.state_dict().at("1.running_var")));
  kept = at::Tensor();
  CHECK(mappings_of(path + " (deleted)").empty());
}

TEST_CASE("serde: mmap needs a file, and says so") {
  auto p = small_program();
  const auto bytes = save_to_string(p);
  load_options lo;
  lo.mmap = true;
  std::stringstream ss(bytes);
  XPORT_CHECK_THROWS_MSG(load(ss, lo), load_error, "[xport.load.mmap] load_options::mmap maps a file: call load(path, options)");
  XPORT_CHECK_THROWS_MSG(load_from_memory(bytes.data(), bytes.size(), lo), load_error, "[xport.load.mmap]");
  XPORT_CHECK_THROWS_MSG(load(temp_path("xport_test_no_such.pt2"), lo), load_error,
                         "[xport.load.open] cannot open '");
  const auto path = temp_path("xport_test_mapped_bad.pt2");
  { std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2); }
  XPORT_CHECK_THROWS_MSG(load(path, lo), load_error, "[xport.load.");
  std::remove(path.c_str());
}

// ---- custom classes (torchbind) both ways with torch: tests/python/torchbind.py ------------------

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define XPORT_TEST_TORCHBIND 1
namespace torch {
TORCH_API c10::ClassTypePtr getCustomClass(const std::string& name);  // (torch/custom_class.h, narrow)
}  // namespace torch

namespace {
at::Tensor torchbind_input() {
  return (torch::arange(15, torch::kFloat) * 0.37).sin().reshape({5, 3});
}
// A RunningMean made as torch.classes.xport_classes.RunningMean(zeros(3)) makes it (its class
// is in the library, not here)
c10::IValue make_running_mean(const std::string& cls) {
  const auto type = torch::getCustomClass(cls);
  REQUIRE(type);
  auto obj = c10::ivalue::Object::create(c10::StrongTypePtr(nullptr, type), 1);
  torch::jit::Stack init{c10::IValue(obj), at::zeros({3})};
  type->getMethod("__init__").run(init);
  return c10::IValue(obj);
}
at::Tensor scale_by_count(const c10::IValue& obj, const at::Tensor& x) {
  torch::jit::Stack call{obj, x};
  c10::Dispatcher::singleton().findSchemaOrThrow("xport_classes::scale_by_count", "").callBoxed(call);
  return call.at(0).toTensor();
}
std::vector<std::vector<float>> rows_of(const at::Tensor& t) {
  std::vector<std::vector<float>> rows;
  for (std::int64_t i = 0; i < t.size(0); ++i) {
    const auto row = t[i].contiguous();
    rows.emplace_back(row.data_ptr<float>(), row.data_ptr<float>() + row.numel());
  }
  return rows;
}
at::Tensor float_rows(const json& rows) {
  std::vector<float> flat;
  for (const auto& r : rows)
    for (const auto& v : r) flat.push_back(v.get<float>());
  return torch::tensor(flat).reshape({static_cast<std::int64_t>(rows.size()), -1});
}

// The lines of torch's print that name a target (the lifted inputs), and the operators its graph calls, in order.
std::vector<std::string> target_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(" target='") != std::string::npos) out.push_back(line);
  return out;
}
std::vector<std::string> called_ops(const std::string& text) {
  std::vector<std::string> out;
  static const std::regex call(R"(= (torch\.ops\.[\w.]+)\()");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), call); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

// A scripted module holding the object (stats_scripted.pt: Outer, the object 'block.stats')
// converts as torch's TS2EPConverter converts it: each call on the object a call_torchbind, the
// operator taking it, the object lifted under its attribute's name; the program changes the object
// as the TorchScript module changes its own, with a batch that varies; torch runs the archive.
void torchbind_from_torchscript(const std::filesystem::path& py, const std::filesystem::path& cpp, json& resaved) {
  const std::string cls = "__torch__.torch.classes.xport_classes.RunningMean";
  const auto path = (py / "stats_scripted.pt").string();
  const auto x = torchbind_input();
  for (const std::string method : {"normalize", "mix"})  // (update's fake the case above registered)
    xport::register_fake_method(cls, method, [](const c10::IValue&, const std::vector<c10::IValue>& args) {
      return at::empty_like(args.at(0).toTensor());
    });
  const xport::Dim batch("batch", 1, 64);
  auto p = xport::from_torchscript(path, {x}, {.dynamic_shapes = {{"x", {{0, batch}}}}});
  const auto text = xport::to_string(p);
  const auto converter = xport_test::read_file((py / "stats_scripted_converter.txt").string());
  CHECK(target_lines(text) == target_lines(converter));  // p_block_proj_weight ..., obj_block_stats: CUSTOM_OBJ target='block.stats'
  CHECK(text.find("obj_block_stats: CUSTOM_OBJ target='block.stats'") != std::string::npos);
  CHECK(called_ops(text) == called_ops(converter));
  REQUIRE(p.custom_objs().size() == 1);
  CHECK(p.custom_objs().begin()->first == "block.stats");
  // the TorchScript module run beside the program, each on its own object: equal call after call
  auto ts = torch::jit::load(path);
  for (const auto& in : {x, at::randn({7, 3}), x.t().contiguous().t(), x})
    CHECK(at::equal(xport::run(p, {in})[0], ts.forward({in}).toTensor()));
  xport::save(p, (cpp / "converted.pt2").string());
  resaved["converted"] = rows_of(xport::run(xport::load((cpp / "converted.pt2").string()), {x})[0]);
  // the capture route would run the method's C++ code and keep its result: refused
  XPORT_CHECK_THROWS_MSG(xport::from_torchscript(path, {x}, {.route = xport::torchscript_route::capture}), export_error,
                         "[xport.torchscript.custom_obj] attribute 'block.stats' of the module is a custom class instance "
                         "(a torch::class_): the capture route would run its methods' C++ code");
  // a method whose result is no tensor: refused at its line
  XPORT_CHECK_THROWS_MSG(xport::from_torchscript((py / "seen_scripted.pt").string(), {x}), export_error,
                         "[xport.torchscript.unsupported] the method calls " + cls + ".seen, which returns int: a program "
                         "calls the methods of a custom object that return one tensor (call_torchbind); return the value as a "
                         "tensor\nat TorchScript");
}
}  // namespace
#else
#define XPORT_TEST_TORCHBIND 0
#endif

TEST_CASE("torchbind oracle: torch's programs holding a custom object load, run their object calls in order, "
          "print as torch does, and save for torch" * doctest::test_suite("oracle_torchbind")) {
#if !XPORT_TEST_TORCHBIND
  MESSAGE("custom objects load with LibTorch 2.3 or newer");
#else
  const auto root = xport_test::shared_dir("XPORT_TORCHBIND_DIR", "", "torchbind_*");
  const auto py = root / "py", cpp = root / "cpp";
  std::filesystem::create_directories(cpp);
  const std::string cls = "__torch__.torch.classes.xport_classes.RunningMean";
  // until the library that registers the class is loaded, the archive is refused, saying so:
  // at its operator (read first, with the graph), or, calling only methods, at its object
  if (!torch::getCustomClass(cls)) {
    XPORT_CHECK_THROWS_MSG(xport::load((py / "stats.pt2").string()), load_error,
                           "custom operator xport_classes::scale_by_count ('torch.ops.xport_classes.scale_by_count.default') "
                           "is not registered in this process");
    XPORT_CHECK_THROWS_MSG(xport::load((py / "methods_only.pt2").string()), load_error,
                           "config.stats: cannot read the custom object in record 'data/constants/custom_obj_0': ");
    XPORT_CHECK_THROWS_MSG(xport::load((py / "methods_only.pt2").string()), load_error,
                           "(its class must be registered with torch::class_ in this process: link or dlopen the library "
                           "that defines it before loading)");
  }
  const char* lib = std::getenv("XPORT_TEST_CLASSES_LIB");  // (ctest sets it: tests/CMakeLists.txt)
  REQUIRE_MESSAGE(lib != nullptr, "XPORT_TEST_CLASSES_LIB is not set: run this case through ctest (torchbind_* tests)");
  REQUIRE_MESSAGE(dlopen(lib, RTLD_NOW | RTLD_GLOBAL) != nullptr, dlerror());
  const auto expected = json::parse(xport_test::read_file((py / "expected.json").string()));
  const auto x = torchbind_input();
  json resaved;
  for (const std::string name : {"stats", "stats_decomposed"}) {
    INFO("program " << name);
    const auto path = (py / (name + ".pt2")).string();
    auto p = xport::load(path);
    REQUIRE(p.custom_objs().size() == 1);
    CHECK(p.custom_objs().begin()->first == "stats");
    CHECK(p.custom_objs().begin()->second.type()->str() == cls);
    CHECK(xport::to_string(p) == xport_test::read_file((py / (name + ".txt")).string()));
    // two calls in a row: the second sees the first's update(), as in torch (bit for bit)
    for (std::size_t r = 0; r < 2; ++r) CHECK(at::equal(xport::run(p, {x})[0], float_rows(expected[name][r])));
    // the engine on a fresh load, and a program through dce, cse and fold: the same two results
    auto q = xport::load(path);
    xport::passes::pass_manager::parse("dce,cse,fold").run(q);
    CHECK(q.graph().size() == p.graph().size());
    xport::engine e(q);
    for (std::size_t r = 0; r < 2; ++r) CHECK(at::equal(e.run({x})[0], float_rows(expected[name][r])));
    // lowering runs a program's calls on fake tensors, which an object's C++ methods cannot take
    XPORT_CHECK_THROWS_MSG(xport::run_decompositions(p), xport::error, "[xport.lower.custom_obj] run_decompositions: the program "
                           "takes the custom object 'stats' (" + cls + ")");
    // saved with the object as it stands (after two updates); xport's own load of it runs on from there
    xport::save(p, (cpp / (name + ".pt2")).string());
    auto back = xport::load((cpp / (name + ".pt2")).string());
    const auto third = xport::run(back, {x})[0];
    CHECK(!at::equal(third, float_rows(expected[name][1])));
    resaved[name] = rows_of(third);
  }
  // C++ code calling the object (xport::call_method, an operator taking it) exports: the object a
  // CUSTOM_OBJ input, its method one call_torchbind typed by its fake (not run: the object stays
  // as it was), the program runs as the code does, and torch runs it
  const auto body = [](c10::IValue obj) {
    return [obj](const at::Tensor& in) {
      const auto centered = xport::call_method(obj, "update", {in});
      const auto scaled = scale_by_count(obj, in);
      return centered.relu() + scaled;
    };
  };
  const auto traced = make_running_mean(cls), twin = make_running_mean(cls);
  XPORT_CHECK_THROWS_MSG(xport::export_program(body(traced), std::tuple{x}), xport::error,
                         "[xport.run.torchbind] call_torchbind: " + cls + ".update has no fake, which export runs in place of "
                         "its C++ code (on meta tensors, leaving the object as it is): register one with xport::register_fake_method(");
  xport::register_fake_method(cls, "update", [](const c10::IValue&, const std::vector<c10::IValue>& args) {
    return at::empty_like(args.at(0).toTensor());
  });
  auto exported = xport::export_program(body(traced), std::tuple{x});
  const auto text = xport::to_string(exported);
  CHECK(text.find("call_torchbind: \"f32[5, 3]\" = torch.ops.higher_order.call_torchbind(obj_lifted_custom_0, 'update', x)") !=
        std::string::npos);
  CHECK(text.find("obj_lifted_custom_0: CUSTOM_OBJ target='lifted_custom_0'") != std::string::npos);
  CHECK(exported.custom_objs().at("lifted_custom_0").internalToPointer() == traced.internalToPointer());
  for (int r = 0; r < 2; ++r) CHECK(at::equal(xport::run(exported, {x})[0], body(twin)(x)));  // (its first: export ran nothing)
  const auto strided = x.t().contiguous().t();  // the same values in column-major strides
  REQUIRE(!strided.is_contiguous());
  CHECK(at::equal(xport::run(exported, {strided})[0], body(twin)(strided)));
  xport::save(exported, (cpp / "exported.pt2").string());
  resaved["exported"] = rows_of(xport::run(xport::load((cpp / "exported.pt2").string()), {x})[0]);
  torchbind_from_torchscript(py, cpp, resaved);
  std::ofstream(cpp / "expected.json") << resaved.dump();
#endif
}
