// Several programs in one archive (<xport/package.hpp>): torch's package_pt2 layout written and
// read, storages shared by the programs written once and shared again after load, extra files
// and the records xport does not read kept; the oracle cases (suite "oracle_package") read
// torch's packages and write one for torch's load_pt2 (tests/python/packages.py).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include <caffe2/serialize/file_adapter.h>
#include <torch/torch.h>
#include <xport/package.hpp>
#include <xport/train.hpp>

#include "common.hpp"
#include "io_files.hpp"

using namespace xport;

namespace {

std::string package_temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name)).string();
}

/// An autoencoder with three entry points over one state, as a TorchScript module exports them:
/// forward counts its calls in a buffer that encode reads.
struct CodecImpl : torch::nn::Module {
  CodecImpl() {
    enc = register_module("encoder", torch::nn::Linear(8, 4));
    dec = register_module("decoder", torch::nn::Linear(4, 8));
    scale = register_buffer("scale", torch::full({8}, 0.5));
    calls = register_buffer("calls", torch::zeros({1}, torch::kInt64));
  }
  at::Tensor encode(const at::Tensor& x) { return torch::relu(enc(x)) + calls; }
  at::Tensor decode(const at::Tensor& z) { return dec(z) * scale; }
  at::Tensor forward(const at::Tensor& x) {
    calls.add_(1);
    return decode(torch::relu(enc(x)));
  }
  torch::nn::Linear enc{nullptr}, dec{nullptr};
  at::Tensor scale, calls;
};
TORCH_MODULE(Codec);

/// The codec's three programs, exported from `net` with example batch `x`.
struct codec_programs {
  exported_program forward, encode, decode;
};
codec_programs export_codec(Codec& net, const at::Tensor& x) {
  const Dim batch("batch");
  const export_options dynamic{.dynamic_shapes = {{"x", {{0, batch}}}}};
  return {export_program(net, std::tuple{x}, dynamic),
          export_method(net, [](CodecImpl& m, const at::Tensor& a) { return m.encode(a); }, std::tuple{x}, dynamic),
          export_method(net, [](CodecImpl& m, const at::Tensor& z) { return m.decode(z); }, std::tuple{at::randn({2, 4})},
                        dynamic)};
}

/// Record names of the archive at `path` under `prefix`.
std::vector<std::string> records_under(const std::string& path, const std::string& prefix) {
  caffe2::serialize::FileAdapter in(path);
  const xport::detail::zip_index zip(in);
  std::vector<std::string> out;
  for (const auto& [name, r] : zip.records())
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  return out;
}

/// A layer and a batch norm: forward depends on the mode (batch statistics in train mode, running
/// ones in eval), embed does not.
struct NormedImpl : torch::nn::Module {
  NormedImpl() {
    fc = register_module("fc", torch::nn::Linear(6, 5));
    bn = register_module("bn", torch::nn::BatchNorm1d(5));
  }
  at::Tensor forward(const at::Tensor& x) { return bn(fc(x)); }
  at::Tensor embed(const at::Tensor& x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Normed);

/// A copy of `net` (same state, its own tensors).
template <class Net>
Net clone_net(const Net& net) {
  Net copy;
  torch::NoGradGuard no_grad;
  auto to = copy->named_parameters(true);
  for (const auto& item : net->named_parameters(true)) to[item.key()].copy_(item.value());
  auto bto = copy->named_buffers(true);
  for (const auto& item : net->named_buffers(true)) bto[item.key()].copy_(item.value());
  return copy;
}

/// What torch must give for the package at `path`: each call on a fresh load (torch's loader gives
/// each program its own state; xport's shares it, so one call's buffer write would reach the next).
void write_package_io(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& calls_made,
                      const std::map<std::string, std::string>& extra_files, const std::filesystem::path& out) {
  c10::impl::GenericDict io(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericList calls(c10::AnyType::get());
  for (const auto& [method, input] : calls_made) {
    c10::impl::GenericDict call(c10::StringType::get(), c10::AnyType::get());
    call.insert("method", method);
    call.insert("args", c10::ivalue::Tuple::create({input}));
    c10::impl::GenericList outs(c10::AnyType::get());
    for (const auto& t : run(load_package(path).at(method), {input})) outs.push_back(t);
    call.insert("outputs", outs);
    calls.push_back(call);
  }
  io.insert("calls", calls);
  c10::impl::GenericDict extra(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [name, text] : extra_files) extra.insert(name, text);
  io.insert("extra_files", extra);
  xport_test::write_pickle(out, io);
}

}  // namespace

TEST_CASE("package: a module's methods saved as one archive share their state, in the file and after load") {
  torch::manual_seed(3);
  Codec net;
  const auto x = at::randn({2, 8});
  auto progs = export_codec(net, x);
  // every method lifts the module's state under its own names (not as constants)
  CHECK(progs.encode.signature().parameters() == progs.forward.signature().parameters());
  CHECK(progs.decode.constants().size() == 0);
  CHECK(progs.encode.module_types().at(0).second == net->name());

  const auto path = package_temp_path("xport_codec.pt2");
  save({{"forward", progs.forward}, {"encode", progs.encode}, {"decode", progs.decode}}, path);
  CHECK((list_models(path) == std::vector<std::string>{"decode", "encode", "forward"}));
  // six tensors (two Linears, two buffers) held by three programs: six records
  CHECK(records_under(path, "data/weights/weight_").size() == 6);
  CHECK(records_under(path, "models/").size() == 3);

  auto pkg = load_package(path);
  REQUIRE((pkg.names() == std::vector<std::string>{"decode", "encode", "forward"}));
  for (const auto& fqn : {"encoder.weight", "decoder.bias", "scale", "calls"})
    CHECK(pkg.at("encode").state_dict().at(fqn).data_ptr() == pkg.at("forward").state_dict().at(fqn).data_ptr());
  CHECK(to_string(pkg.at("decode")) == to_string(progs.decode));

  // the programs behave as the module's methods: forward's count is what encode reads after it
  auto eager = clone_net(net);
  for (int call = 0; call < 3; ++call) {
    // another batch, a column-major layout (the program runs it in its exported layout, row-major:
    // Note [Inputs in the exported layout], so eager's bits are those of the row-major input)
    const auto xi = at::randn({3 + call, 8}).t().contiguous().t();
    CHECK(at::equal(run(pkg.at("forward"), {xi})[0], eager->forward(xi.contiguous())));
    CHECK(at::equal(run(pkg.at("encode"), {xi})[0], eager->encode(xi.contiguous())));
  }
  CHECK(pkg.at("encode").state_dict().at("calls").item<std::int64_t>() == 3);
  const auto z = at::randn({5, 4}).narrow(1, 0, 4);
  CHECK(at::equal(run(pkg.at("decode"), {z})[0], eager->decode(z)));
  // the module the programs came from is as it was
  CHECK(net->calls.item<std::int64_t>() == 0);

  // mapped: what some program writes (calls) is read into memory, the rest maps the file
  load_options mapped;
  mapped.mmap = true;
  auto mp = load_package(path, mapped);
  CHECK(is_mapped(mp.at("encode").state_dict().at("encoder.weight")));
  CHECK_FALSE(is_mapped(mp.at("encode").state_dict().at("calls")));  // encode only reads it: forward writes it
  auto eager2 = clone_net(net);
  CHECK(at::equal(run(mp.at("forward"), {x})[0], eager2->forward(x)));
  CHECK(at::equal(run(mp.at("encode"), {x})[0], eager2->encode(x)));

  // one program of the package, by name, with load()
  load_options one;
  one.model_name = "encode";
  CHECK(to_string(load(path, one)) == to_string(progs.encode));
  XPORT_CHECK_THROWS_MSG(load(path), load_error,
                         "record 'models/model.json' is missing (the archive has: models/decode.json, models/encode.json, "
                         "models/forward.json)");
  XPORT_CHECK_THROWS_MSG((void)pkg.at("predict"), xport::error,
                         "[xport.package.name] the package has no program 'predict'; it has 'decode', 'encode', 'forward'");
  std::remove(path.c_str());
}

TEST_CASE("package: extra files and the records xport does not read survive a re-save; bad names are refused") {
  torch::manual_seed(4);
  Codec net;
  const auto x = at::randn({2, 8});
  auto progs = export_codec(net, x);
  package pkg;
  pkg.programs.emplace("forward", std::move(progs.forward));
  pkg.programs.emplace("encode", std::move(progs.encode));
  pkg.extra_files["config.json"] = R"({"hidden": 4})";
  pkg.extra_files["tokenizer/vocab.txt"] = std::string("a\nb\0c", 5);  // nested, with a NUL byte
  pkg.other_records["data/executorch/model.pte"] = std::string("\x00\x01\x02pte", 6);
  pkg.other_records["data/aotinductor/model/model.so"] = "not a library";
  const auto path = package_temp_path("xport_codec_extra.pt2");
  save(pkg, path);
  auto back = load_package(path);
  CHECK(back.names() == pkg.names());
  CHECK(back.extra_files == pkg.extra_files);
  CHECK(back.other_records == pkg.other_records);
  const auto y = at::randn({4, 8});
  CHECK(at::equal(run(back.at("encode"), {y})[0], run(pkg.at("encode"), {y})[0]));

  // a re-save of what was loaded writes the same records again
  const auto again = package_temp_path("xport_codec_extra2.pt2");
  save(back, again);
  auto third = load_package(again);
  CHECK(third.extra_files == pkg.extra_files);
  CHECK(third.other_records == pkg.other_records);
  CHECK(records_under(again, "data/weights/weight_").size() == 6);

  // an archive torch.export.save would write (one program) is a package of one, "model"
  const auto single = package_temp_path("xport_codec_single.pt2");
  save(pkg.at("forward"), single);
  CHECK((list_models(single) == std::vector<std::string>{"model"}));
  auto one = load_package(single);
  CHECK((one.names() == std::vector<std::string>{"model"}));
  CHECK(one.extra_files.empty());
  CHECK(one.other_records.empty());

  // refusals leave the file that was there as it was
  const auto& fwd = pkg.at("forward");
  XPORT_CHECK_THROWS_MSG(save({{"models/forward", fwd}}, path), xport::error,
                         "[xport.save.name] model name 'models/forward' has a '/'");
  XPORT_CHECK_THROWS_MSG(save({{"", fwd}}, path), xport::error, "[xport.save.name] model name '' is empty");
  XPORT_CHECK_THROWS_MSG(save(program_refs{}, path), xport::error, "[xport.save.empty_package]");
  package clash;
  clash.other_records["models/extra.json"] = "{}";
  XPORT_CHECK_THROWS_MSG(save(clash, path), xport::error,
                         "[xport.save.name] record 'models/extra.json' is one the package writes itself");
  package escape;
  escape.extra_files["../outside"] = "x";
  XPORT_CHECK_THROWS_MSG(save(escape, path), xport::error, "[xport.save.name] extra file '../outside' must not");
  CHECK(load_package(path).extra_files == pkg.extra_files);
  XPORT_CHECK_THROWS_MSG(load_package(path + ".missing"), load_error, "[xport.load.open] cannot open");
  const std::string not_zip = "not an archive";
  XPORT_CHECK_THROWS_MSG(load_package_from_memory(not_zip.data(), not_zip.size()), load_error, "[xport.load.");
  for (const auto& p : {path, again, single}) std::remove(p.c_str());
}

TEST_CASE("package: export_methods exports a module's entry points against one state, and pkg.module() trains them as one module") {
  torch::manual_seed(5);
  Codec net;
  const auto x = at::randn({2, 8});
  const Dim batch("batch");
  const export_options dynamic{.dynamic_shapes = {{"x", {{0, batch}}}}};
  const auto encode_fn = [](CodecImpl& m, const at::Tensor& a) { return m.encode(a); };
  auto pkg = export_methods(net, method("forward", std::tuple{x}, dynamic), method("encode", encode_fn, std::tuple{x}, dynamic));
  REQUIRE((pkg.names() == std::vector<std::string>{"encode", "forward"}));
  CHECK(pkg.at("encode").state_dict().at("calls").data_ptr() == pkg.at("forward").state_dict().at("calls").data_ptr());

  // the package as one module: one parameter per tensor, whichever methods read it
  const auto path = package_temp_path("xport_codec_module.pt2");
  pkg.extra_files["codec.json"] = R"({"hidden": 4})";
  save(pkg, path);
  const auto loaded = load_package(path);
  const auto snapshot = clone_net(net);  // the programs hold net's own tensors: training them trains net
  for (const package* source : {static_cast<const package*>(&pkg), &loaded}) {
    INFO(std::string(source == &pkg ? "as exported" : "as loaded"));
    auto m = source->module();
    CHECK((m->methods() == std::vector<std::string>{"encode", "forward"}));
    CHECK(m->named_parameters(true).size() == 4);
    CHECK(m->named_buffers(true).size() == 2);
    CHECK(m->program("encode").state_dict().at("encoder.weight").data_ptr() ==
          m->named_parameters(true)["encoder.weight"].data_ptr());

    // two SGD steps on a loss of two methods: eager's parameters and results bit for bit (forward's
    // count reaches encode through the one buffer, as in the module)
    auto eager = clone_net(snapshot);
    torch::optim::SGD opt(m->parameters(), 0.1), eager_opt(eager->parameters(), 0.1);
    for (int step = 0; step < 2; ++step) {
      const auto xi = at::randn({3 + step, 8});
      const auto y = m->forward({xi})[0], z = m->run_method("encode", {xi})[0];
      const auto ey = eager->forward(xi), ez = eager->encode(xi);
      CHECK(at::equal(y, ey));
      CHECK(at::equal(z, ez));
      opt.zero_grad();
      eager_opt.zero_grad();
      (y.square().sum() + z.sum()).backward();
      (ey.square().sum() + ez.sum()).backward();
      opt.step();
      eager_opt.step();
    }
    for (const auto& item : eager->named_parameters(true))
      CHECK(at::equal(m->named_parameters(true)[item.key()], item.value()));
    CHECK(m->named_buffers(true)["calls"].item<std::int64_t>() == 2);
    // the trained package saved again: its methods read the trained weights, the extra files kept
    auto trained = m->to_package();
    CHECK(trained.extra_files == source->extra_files);
    trained.extra_files["trained.txt"] = "2 steps";
    const auto resaved = package_temp_path("xport_codec_trained.pt2");
    save(trained, resaved);
    auto back = load_package(resaved);
    CHECK(at::equal(run(back.at("encode"), {x})[0], eager->encode(x)));
    CHECK(back.extra_files.at("trained.txt") == "2 steps");
    std::remove(resaved.c_str());
    // the structured call of a method; an unknown one is named with the module's methods
    CHECK(at::equal(m->as<at::Tensor(at::Tensor)>("encode")(x), eager->encode(x)));
    XPORT_CHECK_THROWS_MSG((void)m->run_method("predict", {x}), xport::error,
                           "[xport.package.name] package_module: no method 'predict'; it has 'encode', 'forward'");
  }
  CHECK(net->calls.item<std::int64_t>() == 2);  // the module over the exported programs trained net's tensors
  XPORT_CHECK_THROWS_MSG((void)export_methods(net, method("forward", std::tuple{x}), method("forward", std::tuple{x})),
                         xport::error, "[xport.save.name] export_methods: method name 'forward' is given twice");
  XPORT_CHECK_THROWS_MSG((void)export_methods(net, method("a/b", std::tuple{x})), xport::error,
                         "[xport.save.name] method name 'a/b' has a '/'");
  std::remove(path.c_str());
}

TEST_CASE("package: a method exported in both modes makes train() and eval() switch programs, over one state") {
  torch::manual_seed(6);
  Normed net;
  net->eval();
  const auto x = at::randn({4, 6});
  const Dim batch("batch", 2);
  const export_options dynamic{.dynamic_shapes = {{"x", {{0, batch}}}}};
  const auto embed_fn = [](NormedImpl& m, const at::Tensor& a) { return m.embed(a); };
  auto pkg = export_methods(net, method("forward.train", std::tuple{x}, dynamic),
                            method("forward.eval", std::tuple{x}, dynamic), method("embed", embed_fn, std::tuple{x}));
  CHECK_FALSE(net->is_training());  // each entry's mode is put back
  CHECK_FALSE(net->bn->is_training());
  auto m = pkg.module();
  CHECK((m->methods() == std::vector<std::string>{"embed", "forward"}));
  CHECK_FALSE(m->is_training());  // only the pair depends on the mode: eval
  CHECK(m->named_parameters(true).size() == 4);
  CHECK(m->named_buffers(true).size() == 3);

  auto eager = clone_net(net);
  eager->eval();
  CHECK(at::equal(m->forward({x})[0], eager->forward(x)));
  // train mode: batch statistics, and the running ones updated in the buffers the eval program reads
  m->train();
  eager->train();
  for (int step = 0; step < 2; ++step) {
    const auto xi = at::randn({5, 6});
    CHECK(at::equal(m->forward({xi})[0], eager->forward(xi)));
  }
  CHECK(at::equal(m->named_buffers(true)["bn.running_mean"], eager->bn->running_mean));
  CHECK(m->named_buffers(true)["bn.num_batches_tracked"].item<std::int64_t>() == 2);
  m->eval();
  eager->eval();
  CHECK(at::equal(m->forward({x})[0], eager->forward(x)));
  CHECK(at::equal(m->run_method("embed", {x})[0], eager->embed(x)));
  // to(): the device in place (the CPU here: the module still runs), a dtype refused naming the program
  m->to(torch::Device(at::kCPU));
  CHECK(at::equal(m->forward({x})[0], eager->forward(x)));
  XPORT_CHECK_THROWS_MSG(m->to(at::kDouble), xport::error, "[xport.module.dtype] package_module::to(Double): state '");
  XPORT_CHECK_THROWS_MSG(m->to(at::kDouble), xport::error, "' of program 'embed' is Float");

  // a method in one mode only: refused in the other when called; train() only when nothing could run
  package eval_only;
  eval_only.programs.emplace("forward", pkg.at("forward.eval").clone());
  eval_only.programs.emplace("embed", pkg.at("embed").clone());
  auto e = eval_only.module();
  e->train();
  CHECK(at::equal(e->run_method("embed", {x})[0], eager->embed(x)));
  XPORT_CHECK_THROWS_MSG((void)e->forward({x}), xport::error,
                         "[xport.module.mode] package_module: method 'forward' has no program for train mode: program "
                         "'forward' was exported in eval mode, and call");
  package only_eval;
  only_eval.programs.emplace("forward", pkg.at("forward.eval").clone());
  XPORT_CHECK_THROWS_MSG(only_eval.module()->train(), xport::error,
                         "[xport.module.mode] package_module::train(): every program of the package was exported in "
                         "eval mode");
  // names that say another mode than the graph's, two programs of one mode, and two values of one FQN
  package misnamed;
  misnamed.programs.emplace("forward.train", pkg.at("forward.eval").clone());
  XPORT_CHECK_THROWS_MSG((void)misnamed.module(), xport::error,
                         "[xport.module.mode] program 'forward.train' is named for train mode but was exported in eval mode");
  package twice;
  twice.programs.emplace("forward", pkg.at("forward.eval").clone());
  twice.programs.emplace("forward.eval", pkg.at("forward.eval").clone());
  XPORT_CHECK_THROWS_MSG((void)twice.module(), xport::error,
                         "[xport.module.mode] programs 'forward' and 'forward.eval' are both method 'forward' in eval mode");
  Normed other;
  package clash;
  clash.programs.emplace("embed", pkg.at("embed").clone());
  clash.programs.emplace("other", export_method(other, embed_fn, std::tuple{x}));
  XPORT_CHECK_THROWS_MSG((void)clash.module(), xport::error,
                         "[xport.module.state] programs 'embed' and 'other' both hold state 'fc.weight', with different values");
}

// ---- the oracle: torch's package_pt2 / load_pt2 (tests/python/packages.py) --------------------

TEST_CASE("package: xport reads the packages torch's package_pt2 wrote" * doctest::test_suite("oracle_package")) {
  const auto dir = xport_test::shared_dir("XPORT_PACKAGE_DIR", "", "oracle_package");
  std::size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("torch_", 0) != 0 || entry.path().extension() != ".pt2") continue;
    INFO("package " << name);
    ++seen;
    const auto io = xport_test::read_pickle(entry.path().parent_path() / (entry.path().stem().string() + ".io.pt")).toGenericDict();
    auto pkg = load_package(entry.path().string());
    // the methods and extra files torch wrote, by name
    std::vector<std::string> want;
    for (const auto& m : xport_test::field(io, "methods").toListRef()) want.push_back(m.toStringRef());
    CHECK(pkg.names() == want);
    CHECK(list_models(entry.path().string()) == want);
    for (const auto& kv : xport_test::field(io, "extra_files").toGenericDict())
      CHECK(pkg.extra_files.at(kv.key().toStringRef()) == kv.value().toStringRef());
    for (const auto& kv : xport_test::field(io, "executorch_files").toGenericDict())
      CHECK(pkg.other_records.at("data/executorch/" + kv.key().toStringRef()) == kv.value().toStringRef());
    // the calls, in the order torch made them on one module (forward's buffer write is seen by
    // encode only where the state is shared: torch's loader gives each program its own copy, so
    // the io file holds each program's own results)
    for (const auto& c : xport_test::field(io, "calls").toListRef()) {
      const auto d = c.toGenericDict();
      const auto method = xport_test::field(d, "method").toStringRef();
      INFO("method " << method);
      const auto& p = pkg.at(method);
      const auto call = xport_test::call_of(p, d, name + ":" + method);
      const auto out = run(p, call.inputs);
      REQUIRE(out.size() == call.outputs.size());
      for (std::size_t i = 0; i < out.size(); ++i) CHECK(at::equal(out[i], call.outputs[i]));
    }
    // as one module: torch gives each program its own copy of the state; equal copies are one
    // tensor again (of a fresh load: the calls above wrote forward's own copy of a buffer)
    std::set<std::string> fqns;
    for (const auto& [method, p] : pkg.programs)
      for (const auto& [fqn, t] : p.state_dict()) fqns.insert(fqn);
    auto m = load_package(entry.path().string()).module();
    std::map<std::string, const void*> first;
    for (const auto& [method, p] : m->programs())
      for (const auto& [fqn, t] : p.state_dict())
        CHECK(first.try_emplace(fqn, t.data_ptr()).first->second == t.data_ptr());
    CHECK(first.size() == fqns.size());
    // xport saves it again (for packages.py to read back with load_pt2)
    save(pkg, (dir / ("xport_resaved_" + name.substr(6))).string());
  }
  CHECK(seen >= 1);
}

TEST_CASE("package: xport writes a package of a module's methods for torch's load_pt2" * doctest::test_suite("oracle_package")) {
  const auto dir = xport_test::shared_dir("XPORT_PACKAGE_DIR", "", "oracle_package");
  torch::manual_seed(7);
  Codec net;
  const auto x = at::randn({2, 8});
  auto progs = export_codec(net, x);
  const auto path = (dir / "xport_codec.pt2").string();
  package pkg;
  pkg.programs.emplace("forward", std::move(progs.forward));
  pkg.programs.emplace("encode", std::move(progs.encode));
  pkg.programs.emplace("decode", std::move(progs.decode));
  pkg.extra_files["config.json"] = R"({"in": 8, "hidden": 4})";
  pkg.other_records["data/executorch/model.pte"] = "pte bytes";
  save(pkg, path);
  const auto z = at::randn({3, 4});
  write_package_io(path, {{"forward", x}, {"encode", x}, {"decode", z}}, pkg.extra_files, dir / "xport_codec.io.pt");

  // a method in both modes (tests/python/packages.py reads it as every other package)
  Normed normed;
  const auto xn = at::randn({4, 6});
  const auto modes_path = (dir / "xport_modes.pt2").string();
  save(export_methods(normed, method("forward.train", std::tuple{xn}), method("forward.eval", std::tuple{xn})), modes_path);
  write_package_io(modes_path, {{"forward.train", xn}, {"forward.eval", xn}}, {}, dir / "xport_modes.io.pt");
}
