// .pt2 interop with torch.export 2.13, judged by torch itself (ctest's oracle chain, see
// tests/CMakeLists.txt; every case needs $XPORT_ORACLE_DIR and fails without it):
//   suite "oracle"          loads and runs every archive tests/python/pt2_fixtures.py wrote with
//                           torch.export.save (py/) and saves it again (xport_saved/), checks the
//                           typed errors of what xport does not support, and writes xport's own
//                           archives (cpp/), both for tests/python/check_xport_archives.py;
//   suite "oracle_resaved"  loads the archives torch.export.save wrote again from xport's
//                           (resaved/) and checks they are the programs xport wrote.
// Each archive <name>.pt2 comes with <name>.io.pt, a dict torch.save'd by Python, or written here in
// torch::pickle_save's format without the JIT's type tags (xport::detail::pickle_bytes: Python's
// torch.load(weights_only=True) refuses the tags torch::pickle_save writes on dicts and lists):
//   "args", "kwargs"  the call (nested as the program's inputs)
//   "outputs"         the user outputs, flat (tree order)
//   "state"           every state tensor and constant, by FQN, as saved (C++ side)
//   "after"           {"state": buffers after the call, "inputs": flat tensor inputs after it}
//   "extra"           more calls ({"args", "kwargs", "outputs"}) at other sizes (dynamic shapes)
//   "seed"            the RNG seed set before each call
// and an index.json listing the archives, so that a missing one fails the count.
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <torch/torch.h>

#include "custom_ops.hpp"
#include "models.hpp"

#include "common.hpp"
#include "io_files.hpp"
#include <xport/engine.hpp>
#include <xport/quantized.hpp>  // the quantized fixtures (PT2E) call quantized_decomposed operators
#include <xport/unflatten.hpp>

using namespace xport;
namespace fs = std::filesystem;
namespace m = xport_models;
using json = nlohmann::json;
using xport_test::call_of, xport_test::field, xport_test::io_call, xport_test::read_index, xport_test::read_pickle, xport_test::write_pickle;

namespace {

fs::path oracle_dir(const std::string& sub) { return xport_test::shared_dir("XPORT_ORACLE_DIR", sub, "oracle_*"); }


bool same(const at::Tensor& a, const at::Tensor& b, bool exact) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (xport_test::bytes_only(a.scalar_type()))  // at::equal has no kernel for them: their bytes
    return at::equal(a.reshape(-1).contiguous().view(at::kByte), b.reshape(-1).contiguous().view(at::kByte));
  if (exact || !a.is_floating_point()) return at::equal(a, b);
  return at::allclose(a, b, 1e-5, 1e-6, /*equal_nan=*/true);
}

/// Runs `p` on `c` (after seeding) and checks every output; returns how many outputs were bit-equal.
int check_outputs(const exported_program& p, const io_call& c, std::int64_t seed, const std::string& what) {
  torch::manual_seed(static_cast<std::uint64_t>(seed));
  std::vector<at::Tensor> got;
  for (auto& t : run(p, c.inputs))
    if (t.defined()) got.push_back(std::move(t));  // None outputs: not in c.outputs (call_of)
  REQUIRE_MESSAGE(got.size() == c.outputs.size(), what << ": " << got.size() << " outputs, expected " << c.outputs.size());
  int exact = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << ": output " << i);
    CHECK(same(got[i], c.outputs[i], false));
    const bool bits = same(got[i], c.outputs[i], true);
    if (!bits) MESSAGE(what << ": output " << i << " not bit-equal");
    exact += bits;
  }
  return exact;
}

/// The module paths of torch's unflatten that xport's tree has too: torch also makes a module of
/// each higher-order operator's subgraph (`true_graph_0`, `body_graph_0`, `submod_1`) and of a
/// module's second call where it differs from the first (`l@1`); xport's subgraphs are arguments.
std::vector<std::string> torch_module_paths(const json& names) {
  static const std::regex made_by_torch(R"((^|\.)([A-Za-z_]+_graph_\d+|submod_\d+)($|\.)|@)");
  std::vector<std::string> out;
  for (const auto& n : names)
    if (!std::regex_search(n.get<std::string>(), made_by_torch)) out.push_back(n.get<std::string>());
  return out;
}

/// The lines of a printed program that hold code (no comment, no blank line): torch's print
/// annotates the nodes its Python decompositions made, which xport's do not carry.
std::string code_lines(const std::string& printed) {
  std::istringstream in(printed);
  std::string out, line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(' ');
    if (first != std::string::npos && line[first] != '#') out += line + "\n";
  }
  return out;
}

/// xport's lowerings of the training-IR program at `path`, each on a fresh load, run on the call
/// The preserved submodule calls of a module_call_graph torch wrote: fqn -> (input names, output
/// names), for the entries with a signature (the root's call is in_spec / out_spec).
std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> preserved_calls(const json& graph) {
  std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> out;
  for (const auto& e : graph) {
    if (e["fqn"].get<std::string>().empty() || e["signature"].is_null()) continue;
    auto& [in, res] = out[e["fqn"].get<std::string>()];
    for (const auto& a : e["signature"]["inputs"]) in.push_back(a["as_tensor"]["name"].get<std::string>());
    for (const auto& a : e["signature"]["outputs"]) res.push_back(a["as_tensor"]["name"].get<std::string>());
  }
  return out;
}
std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> preserved_calls(const exported_program& p) {
  std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> out;
  for (const auto& [fqn, sig] : p.module_call_signatures()) {
    auto& [in, res] = out[fqn];
    for (const auto& a : sig.inputs) in.push_back(a.name);
    for (const auto& a : sig.outputs) res.push_back(a.name);
  }
  return out;
}

/// of `io` (the call's inputs as torch saved them): run_decompositions() against torch's own
/// (io["lowered"]: the same code as torch's print, `printed`, where given; outputs, buffers and
/// inputs after), and
/// functionalize() against the program itself (io["outputs"], "after": the same kernels).
/// Returns how many outputs were bit-equal; `outputs` counts them all.
int check_lowered(const fs::path& path, const std::optional<std::string>& printed, std::int64_t seed,
                  const std::string& name, std::size_t& outputs, const json& entry) {
  int exact = 0;
  for (const bool decompose : {true, false}) {
    const std::string what = name + (decompose ? " (run_decompositions)" : " (functionalize)");
    auto io = read_pickle(fs::path(path).replace_extension(".io.pt")).toGenericDict();  // unmutated inputs
    const auto low = decompose ? field(io, "lowered").toGenericDict() : io;
    const auto after = field(low, "after").toGenericDict();
    load_options lo;
    lo.example_inputs = false;
    const auto fresh = load(path.string(), lo);
    const auto q = decompose ? run_decompositions(fresh) : functionalize(fresh);
    if (decompose && printed) CHECK(code_lines(to_string(q)) == code_lines(*printed));  // as torch lowers it
    if (decompose && entry.contains("lowered_module_call_graph"))  // boundary values renamed as torch's provenance does
      CHECK((preserved_calls(q) == preserved_calls(entry["lowered_module_call_graph"])));
    auto c = call_of(q, io, what);
    c.outputs.clear();
    for (const auto& t : field(low, "outputs").toListRef())
      if (!t.isNone()) c.outputs.push_back(t.toTensor());
    exact += check_outputs(q, c, seed, what);
    outputs += c.outputs.size();
    for (const auto& e : field(after, "state").toGenericDict()) {
      INFO(what << ": buffer after the call: " << e.key().toStringRef());
      const auto* t = q.state_dict().find(e.key().toStringRef());
      const auto* k = t ? t : q.constants().find(e.key().toStringRef());
      REQUIRE(k != nullptr);
      CHECK(at::equal(*k, e.value().toTensor()));
    }
    const auto inputs = field(after, "inputs").toListRef();
    REQUIRE(inputs.size() == c.inputs.size());
    for (std::size_t i = 0; i < c.inputs.size(); ++i) CHECK(at::equal(c.inputs[i], inputs[i].toTensor()));
  }
  return exact;
}

// ---- Python -> C++ ----------------------------------------------------------------------------

/// What xport says about each fixture holding content it does not support (test the messages).
const std::map<std::string, std::string>& unsupported_fixtures() {
  static const std::map<std::string, std::string> m{
      {"unsupported_vmap", "'torch._functorch.predispatch.lazy_load_decompositions' is a step of torch.vmap"},
      // (custom objects load: this one's library is not loaded here, so its operator is refused first)
      {"unsupported_custom_obj", "custom operator xport_fixtures::scaled ('torch.ops.xport_fixtures.scaled.default') is "
                                 "not registered in this process"},
      {"unsupported_pickled_weight", "pickled payloads other than custom objects are not read by xport (pickled tensors, "
                                     "tensor subclasses"},
  };
  return m;
}

}  // namespace

TEST_CASE("interop: xport loads, runs and describes every program torch.export saved" * doctest::test_suite("oracle")) {
  xport_test::load_custom_ops();  // programs call xport_ops operators: their library is loaded first
  const auto dir = oracle_dir("py"), saved = oracle_dir("xport_saved");
  const auto index = read_index(dir);
  json saved_index = json::array();
  std::size_t checked = 0, calls = 0, exact = 0, outputs = 0, mapped = 0, lowered = 0, lowered_exact = 0, lowered_outputs = 0;
  std::size_t preserved = 0;  // programs with preserved submodule calls
  std::size_t unflattened = 0;  // programs whose unflatten() tree was compared with torch's
  std::vector<std::string> unmapped;  // loaded with mmap, but read: state the program writes
  for (const auto& entry : index) {
    const std::string name = entry["name"];
    if (unsupported_fixtures().count(name)) continue;
    CAPTURE(name);
    load_options lo;
    // example inputs that hold Python objects (a dataclass) do not unpickle in C++: a load_error
    const bool python_inputs = entry.value("python_inputs", false);
    lo.example_inputs = !python_inputs;
    if (python_inputs) {
      load_options with_inputs;
      with_inputs.example_inputs = true;
      XPORT_CHECK_THROWS_MSG(load((dir / (name + ".pt2")).string(), with_inputs), load_error,
                             "[xport.load.sample_inputs] data/sample_inputs/model.pt: ");
    }
    exported_program p = load((dir / (name + ".pt2")).string(), lo);
    if (entry.contains("printed")) CHECK(to_string(p) == entry["printed"].get<std::string>());  // as torch prints it
    auto io = read_pickle(dir / (name + ".io.pt")).toGenericDict();
    const auto seed = field(io, "seed").toInt();
    // saved again by xport, for torch to load (with the state as loaded, for the weights check)
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    for (const auto& [k, t] : p.state_dict())
      if (!xport_test::not_in_io_files(t.scalar_type())) state.insert(k, t.detach().clone());
    for (const auto& [k, t] : p.constants())
      if (!xport_test::not_in_io_files(t.scalar_type())) state.insert(k, t.detach().clone());
    save_options so;
    so.example_inputs = true;
    save(p, (saved / (name + ".pt2")).string(), so);
    io.insert_or_assign("state", state);
    write_pickle(saved / (name + ".io.pt"), io);
    saved_index.push_back({{"name", name}});
    // the structure torch wrote: as many leaves as user inputs, forward's argument names
    REQUIRE(p.in_spec().has_value());
    REQUIRE(p.out_spec().has_value());
    CHECK(p.in_spec()->keys == entry["forward_arg_names"].get<std::vector<std::string>>());
    CHECK(p.in_spec()->num_kwargs == entry["num_kwargs"].get<std::size_t>());
    CHECK(p.in_spec()->num_all_leaves() == p.signature().user_inputs().size());
    CHECK(p.signature().input_specs.size() == entry["num_inputs"].get<std::size_t>());
    // the example inputs torch saved are the call's
    const auto c = call_of(p, io, name);
    if (entry.contains("unflattened")) {  // xport::unflatten's tree has the module paths torch's has
      const auto u = unflatten(p);
      std::vector<std::string> mine;
      for (const auto& item : u->named_modules()) mine.push_back(item.key());
      CHECK(mine == torch_module_paths(entry["unflattened"]));
      ++unflattened;
    }
    if (!python_inputs) {
      REQUIRE(p.example_inputs().has_value());
      REQUIRE(p.example_inputs()->size() == c.inputs.size());
      for (std::size_t i = 0; i < c.inputs.size(); ++i) CHECK(at::equal(p.example_inputs()->at(i), c.inputs[i]));
    }
    {  // mapped: the same program, its weights read-only views of torch's file
      load_options lm;
      lm.mmap = true;
      auto mp = load((dir / (name + ".pt2")).string(), lm);
      for (const auto& [k, t] : mp.state_dict()) {
        if (is_mapped(t)) ++mapped;
        else unmapped.push_back(name + ":" + k);
        CHECK(same(t, p.state_dict().at(k), false));
      }
      for (const auto& [k, t] : mp.constants()) {
        if (is_mapped(t)) ++mapped;
        else unmapped.push_back(name + ":" + k);
      }
      auto fresh = c;  // the program may mutate its inputs: c's are for the call below
      for (auto& t : fresh.inputs) t = t.clone();
      exact += check_outputs(mp, fresh, seed, name + " (mapped)");
      outputs += c.outputs.size();
    }
    auto q = p.clone();  // mutations go to q's state, which is p's: compare "after" on it
    exact += check_outputs(q, c, seed, name);
    outputs += c.outputs.size();
    ++calls;
    const auto after = field(io, "after").toGenericDict();
    for (const auto& e : field(after, "state").toGenericDict()) {
      INFO("buffer after the call: " << e.key().toStringRef());
      const auto* t = p.state_dict().find(e.key().toStringRef());
      const auto* k = t ? t : p.constants().find(e.key().toStringRef());
      REQUIRE(k != nullptr);
      CHECK(same(*k, e.value().toTensor(), false));
    }
    const auto mutated = field(after, "inputs").toListRef();
    REQUIRE(mutated.size() == c.inputs.size());
    for (std::size_t i = 0; i < c.inputs.size(); ++i) CHECK(same(c.inputs[i], mutated[i].toTensor(), false));
    for (const auto& x : field(io, "extra").toListRef()) {
      const auto e = call_of(p, x.toGenericDict(), name + " (extra)");
      exact += check_outputs(p, e, seed, name + " (extra)");
      outputs += e.outputs.size();
      ++calls;
    }
    if (entry.contains("printed_lowered")) {  // xport's lowering of torch's training IR against torch's own
      const auto printed = entry.value("lowered_values_only", false) ? std::nullopt
                                                                     : std::optional<std::string>(entry["printed_lowered"]);
      lowered_exact += check_lowered(dir / (name + ".pt2"), printed, seed, name, lowered_outputs, entry);
      ++lowered;
    }
    // a program torch wrote survives xport's save and load
    auto r = xport_test::reload(p);
    CHECK(to_string(r) == to_string(p));
    CHECK((r.in_spec() == p.in_spec()));
    CHECK((r.out_spec() == p.out_spec()));
    CHECK((r.module_types() == p.module_types()));
    CHECK((r.module_call_signatures() == p.module_call_signatures()));
    if (entry.contains("module_call_graph")) {  // preserved submodule calls, as torch wrote them
      CHECK(!p.module_call_signatures().empty());
      CHECK((preserved_calls(p) == preserved_calls(entry["module_call_graph"])));
      ++preserved;
    }
    ++checked;
  }
  std::ofstream(saved / "index.json") << saved_index.dump(1);
  MESSAGE("torch-written archives loaded and run: " << checked << " (" << calls << " calls, " << exact << " of "
                                                    << outputs << " outputs bit-equal)");
  CHECK(exact == outputs);  // the same graph through the same kernels as ep.module()
  CHECK(preserved >= 2);
  MESSAGE("unflatten() trees equal to torch's: " << unflattened);
  CHECK(unflattened >= 100);
  MESSAGE("training-IR programs lowered by xport and run against torch's lowering: " << lowered << " ("
          << lowered_exact << " of " << lowered_outputs << " outputs bit-equal)");
  CHECK(lowered >= 5);
  CHECK(lowered_exact == lowered_outputs);  // computed in the dtypes torch's decompositions compute in
  // read, not mapped: exactly the state the programs write (BatchNorm statistics in training,
  // the embedding max_norm renormalizes in place, the mutated buffers)
  for (const auto& u : unmapped) {
    INFO("read, not mapped: " << u);
    const bool bn_stat = u.find("train:") != std::string::npos &&
                         (u.ends_with(".running_mean") || u.ends_with(".running_var") || u.ends_with(".num_batches_tracked"));
    CHECK((bn_stat || u == "embedding_max_norm:emb.weight" || u.rfind("buffer_mutation", 0) == 0 ||
           u.rfind("through_to:", 0) == 0 || u.rfind("custom_mutation", 0) == 0));
  }
  MESSAGE("loaded with mmap: " << mapped << " tensors mapped, " << unmapped.size() << " read (written by their program)");
  CHECK(mapped >= 100);
  CHECK(checked + unsupported_fixtures().size() == index.size());
  CHECK(checked >= 30);
}

TEST_CASE("interop: a preserved submodule call names values the graph has, or the save refuses it" * doctest::test_suite("oracle")) {
  // torch.export(..., preserve_module_call_signature=("layers.0", "layers.1")) (tests/python/preserved.py)
  const auto p = load((oracle_dir("py") / "preserved_calls.pt2").string());
  REQUIRE(p.module_call_signatures().size() == 2);
  const auto& layer = p.module_call_signatures().at("layers.0");
  CHECK((layer.inputs == std::vector{argument_spec::tensor("x"), argument_spec::tensor("sigmoid")}));
  CHECK((layer.outputs == std::vector{argument_spec::tensor("add"), argument_spec::tensor("linear_1")}));
  CHECK(!layer.forward_arg_names.has_value());  // torch writes null for a submodule's
  CHECK(layer.in_spec.type == treespec::kind::tuple);  // (args, kwargs)
  REQUIRE(layer.in_spec.children.size() == 2);
  CHECK(layer.in_spec.children[0].children.size() == 2);
  CHECK(layer.out_spec.children.size() == 2);
  // the lowered program's layers end in view_3 / view_7 (linear on [2, 5, 8]: view, addmm, view)
  const auto q = run_decompositions(p);
  CHECK(q.module_call_signatures().at("layers.0").outputs[1].name == "view_3");
  CHECK(q.module_call_signatures().at("layers.1").outputs[1].name == "view_7");
  CHECK((q.module_types() == p.module_types()));
  // a transformation that lost a boundary value: the save says which, and the way out
  auto stale = p.clone();
  auto sig = layer;
  sig.outputs[1].name = "linear_99";
  stale.set_module_call_signature("layers.0", sig);
  const auto path = (fs::temp_directory_path() / "xport_stale_call.pt2").string();
  XPORT_CHECK_THROWS_MSG(save(stale, path), error,
                         "[xport.save.module_call] the preserved call signature of submodule 'layers.0' names value "
                         "'linear_99' as one of its outputs, but the graph has no value of that name (a transformation "
                         "replaced it without carrying the boundary over). Export again with the boundary preserved, or "
                         "drop it with p.set_module_call_signature(\"layers.0\", std::nullopt): torch then unflattens "
                         "the submodule without its call signature");
  CHECK(!fs::exists(path));
  CHECK((stale.module_call_signatures().at("layers.0") == sig));  // the caller's program as it was
  stale.set_module_call_signature("layers.0", std::nullopt);
  save(stale, path);
  const auto back = load(path);
  CHECK(back.module_call_signatures().size() == 1);
  CHECK(back.module_call_signatures().count("layers.1") == 1);
  fs::remove(path);
}

TEST_CASE("unflatten: torch's preserved calls give torch's module tree; a layer runs alone and is swapped for torch's program of another" * doctest::test_suite("oracle")) {
  // preserved_calls.unflatten.pt: what torch.export.unflatten gave (tests/python/pt2_fixtures.py, unflatten_oracle)
  const auto dir = oracle_dir("py");
  const auto oracle = read_pickle(dir / "preserved_calls.unflatten.pt").toGenericDict();
  const auto tensors = [&](const char* key) {
    std::vector<at::Tensor> out;
    for (const auto& t : oracle.at(key).toList()) out.push_back(t.get().toTensor());
    return out;
  };
  const auto strings = [&](const char* key) {
    std::vector<std::string> out;
    for (const auto& t : oracle.at(key).toList()) out.push_back(t.get().toStringRef());
    return out;
  };
  const auto p = load((dir / "preserved_calls.pt2").string());
  const auto u = unflatten(p);
  std::vector<std::string> modules;
  for (const auto& item : u->named_modules()) modules.push_back(item.key());
  CHECK(modules == strings("modules"));  // '', 'layers', 'layers.0', 'layers.0.norm', ... 'head', in torch's order
  const auto layer = u->submodule("layers.0");
  CHECK(layer->type_name() == "preserved.Layer");
  CHECK(layer->is_callable());
  CHECK((layer->signature() == p.module_call_signatures().at("layers.0")));
  std::vector<std::string> local;
  for (const auto& item : layer->named_parameters()) local.push_back(item.key());
  std::sort(local.begin(), local.end());
  CHECK(local == strings("layer_state"));  // fc1.bias, fc1.weight, ...: the layer's own names
  CHECK(layer->named_parameters()["fc1.weight"].data_ptr() == p.state_dict().at("layers.0.fc1.weight").data_ptr());
  // the layer on its own: torch's InterpreterModule, bit for bit (the same kernels)
  const auto mine = layer->forward(tensors("layer_args"));
  const auto theirs = tensors("layer_outputs");
  REQUIRE(mine.size() == 2);
  CHECK(at::equal(mine[0], theirs[0]));
  CHECK(at::equal(mine[1], theirs[1]));
  // its program: the state it reads under local names, its signature's values as inputs and outputs
  const auto& own = layer->program();
  CHECK((own.signature().user_inputs() == std::vector<std::string>{"x", "sigmoid"}));
  CHECK((own.signature().user_outputs() == std::vector<std::string>{"add", "linear_1"}));
  CHECK(own.signature().parameters().front() == "norm.weight");
  CHECK(own.state_dict().size() == 6);
  // the whole tree runs as the program does
  const auto args = tensors("args");
  const auto whole = run(p, args);
  CHECK(at::equal(u->forward(args)[0], whole[0]));
  // layers.0 swapped for torch's export of an eager layer holding layers.1's weights: torch's swap
  u->set_submodule("layers.0", load((dir / "preserved_layer.pt2").string()));
  const auto got = u->forward(args);
  const auto want = tensors("swapped_outputs");
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(at::allclose(got[i], want[i], 1e-5, 1e-6));
  CHECK(!at::allclose(got[0], whole[0]));  // the swap changed the result
  CHECK(u->submodule("layers.0")->program().state_dict().size() == 6);  // the replacement's tree
  CHECK((u->submodule("layers.0")->signature() == p.module_call_signatures().at("layers.0")));

  // torch's lowering: the boundaries renamed (view_3), the layer's program cut from core ATen
  const auto q = load((dir / "preserved_calls_core_aten.pt2").string());
  const auto v = unflatten(q);
  const auto base = run(q, args);
  CHECK(at::equal(v->forward(args)[1], base[1]));
  v->set_submodule("layers.1", v->submodule("layers.1")->program().clone());  // swapped for itself: run in steps
  const auto stepped = v->forward(args);
  CHECK(at::equal(stepped[0], base[0]));
  CHECK(at::equal(stepped[1], base[1]));

  // a call that is not closed, or names a value the graph lost: refused, the program as it was
  auto open = p.clone();
  auto sig = p.module_call_signatures().at("layers.0");
  sig.outputs.pop_back();  // `linear_1` (h) goes on to the gate, yet the call would not return it
  open.set_module_call_signature("layers.0", sig);
  XPORT_CHECK_THROWS_MSG(unflatten(open), error,
                         "[xport.unflatten.boundary] unflatten: the preserved call of submodule 'layers.0' makes "
                         "'linear_1', which 'mean_1' outside it reads, but does not return it. Return it from the "
                         "submodule, or do not preserve its call");
  sig = p.module_call_signatures().at("layers.0");
  sig.inputs.erase(sig.inputs.begin());  // it reads `x` all the same
  open.set_module_call_signature("layers.0", sig);
  XPORT_CHECK_THROWS_MSG(unflatten(open), error,
                         "[xport.unflatten.boundary] unflatten: the preserved call of submodule 'layers.0' reads the "
                         "program's input 'x', which is not among its inputs. Pass it to the submodule as an argument, "
                         "or do not preserve its call");
  sig.inputs = p.module_call_signatures().at("layers.0").inputs;
  sig.outputs[1].name = "linear_99";
  open.set_module_call_signature("layers.0", sig);
  XPORT_CHECK_THROWS_MSG(unflatten(open), error,
                         "[xport.unflatten.boundary] unflatten: the preserved call of submodule 'layers.0' names output "
                         "'linear_99', which the graph does not have. The program was changed without carrying the "
                         "boundary over; drop it with p.set_module_call_signature(\"layers.0\", std::nullopt)");
  CHECK(open.graph().nodes().begin() != open.graph().nodes().end());
}

TEST_CASE("interop: torch's data-dependent programs (nonzero, masks, item) run with their assertions checked" * doctest::test_suite("oracle")) {
  const auto dir = oracle_dir("py");
  torch::manual_seed(3);
  SUBCASE("item() bounded by torch._check: an input outside the facts is refused with torch's text") {
    const auto p = load((dir / "item_slice.pt2").string());
    const auto x = torch::randn({8, 3});
    CHECK(at::equal(run(p, {x, torch::tensor(5)})[0], x.slice(0, 0, 5) + 1));
    CHECK_THROWS_WITH_AS(run(p, {x, torch::tensor(0)}),
                         doctest::Contains("Runtime assertion failed for expression u0 >= 1 on node 'item' (u0 = 0 in this call)"),
                         run_error);
    CHECK_THROWS_WITH_AS(run(p, {x, torch::tensor(9)}),
                         doctest::Contains("Runtime assertion failed for expression u0 <= 8 on node 'item'"), run_error);
    engine e(p);
    CHECK_THROWS_AS(e.run({x, torch::tensor(-2)}), run_error);
    CHECK(at::equal(e.run({x, torch::tensor(8)})[0], x + 1));
  }
  SUBCASE("assertions between sizes (torch._check(k <= x.shape[0])): checked on every run, kept by every step") {
    const auto p = load((dir / "size_relation.pt2").string());
    const auto sum = load((dir / "size_relation_sum.pt2").string());
    REQUIRE(p.range_constraints().size() == 2);
    const auto x = torch::randn({6, 2});
    CHECK(at::equal(run(p, {x, torch::tensor(6)})[0], x * 2));
    const auto lowered = run_decompositions(p);
    const auto sum_lowered = run_decompositions(sum);
    engine e(p), es(sum);
    for (const auto* q : {&p, &lowered}) {
      CHECK_THROWS_WITH_AS(run(*q, {x, torch::tensor(7)}),
                           doctest::Contains("Runtime assertion failed for expression u0 <= s77 on node 'item' (u0 = 7, s77 = 6 in this call)"),
                           run_error);
      CHECK_THROWS_WITH_AS(run(xport_test::reload(*q), {x.t().contiguous().t(), torch::tensor(9)}),
                           doctest::Contains("u0 <= s77"), run_error);
    }
    CHECK_THROWS_WITH_AS(e.run({x, torch::tensor(7)}), doctest::Contains("u0 <= s77"), run_error);
    // u0 + u1 + 2 <= s77: k = 3, j = 1 + 1 need 6 rows of the 7, and 5 are too few
    const auto y = torch::randn({7, 2});
    const auto want = run(sum, {y, torch::tensor({3, 1})});
    CHECK(at::equal(want[1], y.slice(0, 0, 2).sum(0)));
    CHECK(at::equal(run(sum_lowered, {y, torch::tensor({3, 1})})[1], want[1]));
    for (const auto* q : {&sum, &sum_lowered})
      CHECK_THROWS_WITH_AS(run(*q, {y.slice(0, 0, 5), torch::tensor({3, 1})}),
                           doctest::Contains("Runtime assertion failed for expression u0 + u1 + 2 <= s77 on node 'item_1' "
                                             "(u0 = 3, u1 = 1, s77 = 5 in this call)"),
                           run_error);
    CHECK_THROWS_AS(es.run({y.slice(0, 0, 5), torch::tensor({3, 1})}), run_error);
    CHECK(to_string(xport_test::reload(sum_lowered)).find("u0 + u1 + 2 <= s77") != std::string::npos);
  }
  SUBCASE("a gated mixture of experts routing with nonzero: verified, optimized, lowered, run by both runtimes") {
    const auto p = load((dir / "moe_nonzero_dynamic.pt2").string());
    verify(p);
    auto optimized = p.clone();
    REQUIRE((optimized | (passes::canonicalize | passes::cse | passes::fold | passes::dce)).ok());
    // lowered by xport (traced again, the row counts moved as a dim is) and by torch
    const auto lowered = run_decompositions(p);
    verify(lowered);
    CHECK(to_string(lowered).find("nonzero: \"i64[u0, 1]\" = torch.ops.aten.nonzero.default(eq)") != std::string::npos);
    const auto torch_lowered = load((dir / "moe_nonzero_core_aten.pt2").string());
    verify(torch_lowered);
    engine e(p);
    // every layout; a batch where one expert gets every token and the others none (u = 0)
    const auto wide = torch::randn({16, 40}).slice(1, 0, 40, 5);
    for (const auto& x : {torch::randn({1, 8}), torch::randn({37, 8}), wide, torch::randn({8, 12}).t().slice(1, 0, 8),
                          torch::zeros({5, 8})}) {
      const auto want = run(p, {x})[0];
      CHECK(want.sizes() == x.sizes());
      CHECK(at::equal(run(optimized, {x})[0], want));
      CHECK(at::equal(e.run({x})[0], want));
      CHECK(at::allclose(run(lowered, {x})[0], want, 1e-5, 1e-6));
    }
    const auto ten = torch::randn({10, 8});
    CHECK(at::allclose(run(torch_lowered, {ten})[0], run(p, {ten})[0], 1e-5, 1e-6));
    CHECK_THROWS_WITH_AS(run(p, {torch::randn({257, 8})}), doctest::Contains("input x: dim 0 (s77) must be in [0, 256], got 257"), guard_error);
  }
  SUBCASE("nonzero's rows returned: the output's size is what the data gives") {
    const auto p = load((dir / "nonzero.pt2").string());
    const auto x = torch::randn({6, 3});
    const auto out = run(p, {x});
    CHECK(at::equal(out[0], at::nonzero(x > 0).sum(0)));
    CHECK(at::equal(out[1], x.index({x > 0}) * 2));
    CHECK(run(p, {-torch::ones({6, 3})})[1].numel() == 0);
  }
}

TEST_CASE("interop: what xport does not support is a load_error naming it" * doctest::test_suite("oracle")) {
  const auto dir = oracle_dir("py");
  const auto index = read_index(dir);
  std::size_t seen = 0;
  for (const auto& entry : index) {
    const std::string name = entry["name"];
    const auto it = unsupported_fixtures().find(name);
    if (it == unsupported_fixtures().end()) continue;
    CAPTURE(name);
    XPORT_CHECK_THROWS_MSG(load((dir / (name + ".pt2")).string()), load_error, it->second);
    ++seen;
  }
  CHECK(seen == unsupported_fixtures().size());
}

// ---- C++ -> Python -----------------------------------------------------------------------------

namespace {

/// Writes cpp/<name>.pt2 and its io file; the call is run here (the expected outputs).
class archive_writer {
 public:
  archive_writer() : dir_(oracle_dir("cpp")) {}

  template <class... Args>
  void add(const std::string& name, const exported_program& p, const std::tuple<Args...>& args,
           std::vector<std::tuple<Args...>> extra = {}, std::int64_t seed = 0) {
    CAPTURE(name);
    save_options so;
    so.example_inputs = true;
    auto q = p.clone();
    q.set_example_inputs(flat(args));
    save(q, (dir_ / (name + ".pt2")).string(), so);
    c10::impl::GenericDict io(c10::StringType::get(), c10::AnyType::get());
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    for (const auto& [k, t] : p.state_dict()) state.insert(k, t.detach().clone());
    for (const auto& [k, t] : p.constants()) state.insert(k, t.detach().clone());
    io.insert("state", state);
    io.insert("seed", seed);
    // the call: inputs as saved, outputs and what it mutated
    auto fresh = deep_copy(args);
    const auto [a, kw] = call_ivalue(p, args);
    io.insert("args", a);
    io.insert("kwargs", kw);
    auto inputs = flat(fresh);
    torch::manual_seed(static_cast<std::uint64_t>(seed));
    io.insert("outputs", tensors(run(q, inputs)));
    c10::impl::GenericDict after(c10::StringType::get(), c10::AnyType::get()), after_state(c10::StringType::get(), c10::AnyType::get());
    for (const auto& spec : p.signature().input_specs)
      if (spec.kind == input_kind::buffer && spec.target) after_state.insert(*spec.target, q.lifted_tensor(spec).detach().clone());
    after.insert("state", after_state);
    after.insert("inputs", tensors(inputs));
    io.insert("after", after);
    c10::impl::GenericList more(c10::AnyType::get());
    for (const auto& e : extra) {
      c10::impl::GenericDict x(c10::StringType::get(), c10::AnyType::get());
      const auto [ea, ekw] = call_ivalue(p, e);
      x.insert("args", ea);
      x.insert("kwargs", ekw);
      auto r = p.clone();  // from the saved state
      restore(r, state);
      torch::manual_seed(static_cast<std::uint64_t>(seed));
      x.insert("outputs", tensors(run(r, flat(deep_copy(e)))));
      more.push_back(x);
    }
    io.insert("extra", more);
    write_pickle(dir_ / (name + ".io.pt"), io);
    restore(q, state);  // q shares p's tensors: leave p as it was
    index_.push_back({{"name", name}});
  }

  ~archive_writer() {
    std::ofstream(dir_ / "index.json") << index_.dump(1);
  }
  [[nodiscard]] std::size_t size() const { return index_.size(); }

 private:
  template <class T>
  static T deep_copy(const T& x) {
    auto f = [](const at::Tensor& t) { return t.clone(); };
    if constexpr (xport::detail::is_tuple_like<T>::value)
      return std::apply([&](const auto&... es) { return T(xport::detail::map_tensors(es, f)...); }, x);
    else return xport::detail::map_tensors(x, f);
  }
  template <class... Args>
  static std::vector<at::Tensor> flat(const std::tuple<Args...>& args) {
    std::vector<at::Tensor> out;
    std::apply([&](const auto&... a) { (xport::flatten(a, out), ...); }, args);
    return out;
  }
  static c10::impl::GenericList tensors(const std::vector<at::Tensor>& ts) {
    c10::impl::GenericList l(c10::AnyType::get());
    for (const auto& t : ts) {
      if (t.defined()) l.push_back(t.detach().clone());
      else l.push_back(c10::IValue());  // a None output, a leaf of torch's pytree too
    }
    return l;
  }
  /// (args, kwargs) as torch's example inputs: the save writes them, read them back from there
  template <class... Args>
  static std::pair<c10::IValue, c10::IValue> call_ivalue(const exported_program& p, const std::tuple<Args...>& args) {
    const auto v = xport::detail::example_inputs_ivalue(flat(deep_copy(args)), p.in_spec());
    return {v.toTupleRef().elements()[0], v.toTupleRef().elements()[1]};
  }
  static void restore(exported_program& p, const c10::impl::GenericDict& state) {
    c10::NoGradGuard g;
    for (const auto& e : state) {
      const auto& k = e.key().toStringRef();
      if (const auto* t = p.state_dict().find(k)) const_cast<at::Tensor&>(*t).copy_(e.value().toTensor());
      else if (const auto* c = p.constants().find(k)) const_cast<at::Tensor&>(*c).copy_(e.value().toTensor());
    }
  }

  fs::path dir_;
  json index_ = json::array();
};

struct BufferNetImpl : torch::nn::Module {
  BufferNetImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    count = register_buffer("count", at::zeros({4}));
  }
  at::Tensor forward(at::Tensor x) {
    count.add_(x.sum(0));
    return fc(x) + count;
  }
  torch::nn::Linear fc{nullptr};
  at::Tensor count;
};
TORCH_MODULE(BufferNet);

/// tests/python/preserved.py's Layer and Stack in C++: the forward calls each layer through
/// xport::call, so that export sees the call (and can preserve its boundary).
struct LayerImpl : torch::nn::Module {
  LayerImpl() {
    register_module("norm", norm);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& gate) {
    auto h = fc2(torch::relu(fc1(norm(x))));
    return {x + h * gate, h};
  }
  torch::nn::LayerNorm norm{torch::nn::LayerNormOptions({8})};
  torch::nn::Linear fc1{8, 16}, fc2{16, 8};
};
TORCH_MODULE(Layer);

struct StackImpl : torch::nn::Module {
  explicit StackImpl(bool through_call = true) : through_call_(through_call) {
    layers->push_back(Layer());
    layers->push_back(Layer());
    register_module("layers", layers);
    register_module("head", head);
  }
  std::tuple<at::Tensor, at::Tensor> forward(at::Tensor x) {
    auto gate = torch::sigmoid(x.mean(-1, true));
    for (std::size_t i = 0; i < layers->size(); ++i) {
      const auto layer = layers->ptr<LayerImpl>(i);
      auto [y, h] = through_call_ ? xport::call(layer, x, gate) : layer->forward(x, gate);
      x = y;
      gate = gate * h.mean(-1, true).tanh();
    }
    return {head(x), gate};
  }
  torch::nn::ModuleList layers;
  torch::nn::Linear head{8, 3};
  bool through_call_;
};
TORCH_MODULE(Stack);

}  // namespace

TEST_CASE("export: preserve_module_call_signature keeps the boundaries of submodules the forward calls through xport::call" * doctest::test_suite("oracle")) {
  torch::manual_seed(0);
  Stack net;
  net->eval();
  const auto x = at::randn({2, 5, 8});
  const auto p = export_program(net, std::tuple{x}, {.preserve_module_call_signature = {"layers.0", "layers.1"}});
  // LibTorch's C++ Linear on [2, 5, 8] is t, matmul, add_ where Python's is one linear: the
  // names are the graph's own (torch gives `linear_1` for what is `add__1` here)
  CHECK((preserved_calls(p) == decltype(preserved_calls(p)){{"layers.0", {{"x", "sigmoid"}, {"add", "add__1"}}},
                                                            {"layers.1", {{"add", "mul_1"}, {"add_1", "add__3"}}}}));
  const auto& layer = p.module_call_signatures().at("layers.1");
  CHECK(layer.in_spec.str() == "((*, *), {})");
  CHECK(layer.out_spec.str() == "(*, *)");
  CHECK(!layer.forward_arg_names.has_value());
  // the nodes of a call are its module's: the relu reads no state of its own, yet is layers.0's
  std::map<std::string, std::string> path_of;
  for (auto n : p.graph().nodes())
    if (n.is_call()) path_of[n.name()] = n.module_path();
  CHECK(path_of.at("relu") == "layers.0");
  CHECK(path_of.at("add") == "layers.0");
  CHECK(path_of.at("add__1") == "layers.0.fc2");  // reads fc2's bias
  CHECK(path_of.at("matmul_1") == "layers.0.fc2");  // between two of fc2's (Note [Module paths of calls])
  CHECK(path_of.at("relu_1") == "layers.1");
  CHECK(path_of.at("sigmoid").empty());
  const auto want = net->forward(x);
  const auto got = run(p, {x});
  CHECK(at::allclose(got[0], std::get<0>(want)));
  // written and read back as torch writes them; lowered, the boundaries follow (view_3: linear's last)
  CHECK((xport_test::reload(p).module_call_signatures() == p.module_call_signatures()));
  const auto lowered = run_decompositions(p);
  CHECK(lowered.module_call_signatures().at("layers.0").outputs[1].name != "add__1");  // the lowered add's
  CHECK((xport_test::reload(lowered).module_call_signatures() == lowered.module_call_signatures()));
  // no boundary without the call: the way to write it
  Stack hidden(false);
  XPORT_CHECK_THROWS_MSG(export_program(hidden, std::tuple{x}, {.preserve_module_call_signature = {"layers.0"}}),
                         export_error,
                         "[xport.export.preserve] preserve_module_call_signature: submodule 'layers.0' was not called "
                         "through xport::call, so export did not see its boundary (C++ has no hook on forward()). Call it "
                         "as xport::call(layers.0, args...) in the forward, where it is called now");
  XPORT_CHECK_THROWS_MSG(export_program(net, std::tuple{x}, {.preserve_module_call_signature = {"layers.2"}}), export_error,
                         "[xport.export.preserve] preserve_module_call_signature: the module has no submodule 'layers.2'; "
                         "its submodules are 'layers', 'layers.0', 'layers.0.norm', 'layers.0.fc1', 'layers.0.fc2', "
                         "'layers.1', 'layers.1.norm', 'layers.1.fc1', 'layers.1.fc2', 'head'");
  // outside export, xport::call is the call
  const auto direct = xport::call(net->layers->ptr<LayerImpl>(0), x, x);
  CHECK(at::equal(std::get<1>(direct), std::get<1>(net->layers->ptr<LayerImpl>(0)->forward(x, x))));
}

TEST_CASE("unflatten: xport's export of a C++ stack: the tree, a layer alone, swapped for an eager layer or a program") {
  torch::manual_seed(0);
  Stack net;
  net->eval();
  const auto x = at::randn({2, 5, 8});
  const auto p = export_program(net, std::tuple{x}, {.preserve_module_call_signature = {"layers.0", "layers.1"}});
  const auto u = unflatten(p);
  CHECK(u->type_name() == "(anonymous namespace)::StackImpl");
  CHECK(u->submodule("layers")->type_name() == "torch::nn::ModuleListImpl");
  CHECK(u->submodule("layers.0.fc1")->type_name() == "torch::nn::LinearImpl");
  CHECK(!u->submodule("layers.0.fc1")->is_callable());
  CHECK(u->named_parameters().size() == net->named_parameters().size());
  const auto eager = [&](int first, int second, const at::Tensor& in) {  // the stack with its layers chosen
    auto h = in;
    auto gate = torch::sigmoid(in.mean(-1, true));
    for (int i : {first, second}) {
      auto [y, hh] = net->layers->ptr<LayerImpl>(static_cast<std::size_t>(i))->forward(h, gate);
      h = y;
      gate = gate * hh.mean(-1, true).tanh();
    }
    return std::vector<at::Tensor>{net->head(h), gate};
  };
  const auto same_as = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    return a.size() == b.size() && at::allclose(a[0], b[0], 1e-5, 1e-6) && at::allclose(a[1], b[1], 1e-5, 1e-6);
  };
  CHECK(same_as(u->forward({x}), eager(0, 1, x)));
  // a layer alone, on inputs of another layout: its program's guards and relayout are the program's
  const auto wide = at::randn({2, 8, 5}).transpose(1, 2);
  const auto gate = at::rand({2, 5, 1});
  const auto alone = (*u->submodule("layers.1"))(wide, gate);
  const auto [y1, h1] = net->layers->ptr<LayerImpl>(1)->forward(wide, gate);
  CHECK(at::allclose(alone[0], y1));
  CHECK(at::allclose(alone[1], h1));
  // layers.0 swapped for an eager layer (layers.1's forward), then for a program of it
  u->set_submodule("layers.0", [&](const std::vector<at::Tensor>& in) {
    auto [y, h] = net->layers->ptr<LayerImpl>(1)->forward(in[0], in[1]);
    return std::vector<at::Tensor>{y, h};
  });
  XPORT_CHECK_THROWS_MSG((void)u->submodule("layers.0")->program(), error,
                         "[xport.unflatten.call] unflattened module 'layers.0' is the function set_submodule put there: "
                         "it has no program");
  CHECK(same_as(u->forward({x}), eager(1, 1, x)));
  const auto layer1 = export_program(*net->layers->ptr<LayerImpl>(1), std::tuple{x, gate});
  u->set_submodule("layers.0", layer1);
  CHECK(same_as(u->forward({x}), eager(1, 1, x)));
  CHECK(same_as(u->forward({x.contiguous(at::MemoryFormat::Contiguous) * 2}), eager(1, 1, x * 2)));
  // the layer's own program, saved and loaded, is the layer
  const auto own = xport_test::reload(u->submodule("layers.1")->program());
  CHECK(at::allclose(run(own, {wide, gate})[0], y1));
  // refusals, each naming what to do
  XPORT_CHECK_THROWS_MSG(u->set_submodule("head", layer1), error,
                         "[xport.unflatten.swap] set_submodule('head'): the call of 'head' was not preserved, so the "
                         "program has no boundary to call another module at; the preserved calls there are 'layers.0', "
                         "'layers.1'. Export with preserve_module_call_signature = {\"head\"} to swap it");
  XPORT_CHECK_THROWS_MSG(u->submodule("head")->forward({x}), error,
                         "[xport.unflatten.call] unflattened module 'head' cannot be called: only the root and "
                         "submodules whose call was preserved run on their own. Export with "
                         "preserve_module_call_signature = {\"head\"} (and call it through xport::call) to call it");
  XPORT_CHECK_THROWS_MSG(u->submodule("layers.2"), error,
                         "[xport.unflatten.submodule] unflattened module has no submodule 'layers.2'; its submodules are "
                         "'layers', 'layers.0', 'layers.0.norm', 'layers.0.fc1', 'layers.0.fc2', 'layers.1', "
                         "'layers.1.norm', 'layers.1.fc1', 'layers.1.fc2', 'head'");
  const auto batched = export_program(*net->layers->ptr<LayerImpl>(1), std::tuple{x.unsqueeze(0), gate.unsqueeze(0)});
  XPORT_CHECK_THROWS_MSG(u->set_submodule("layers.1", batched), error,
                         "[xport.unflatten.swap] set_submodule('layers.1'): input 0 of the replacement is f32[1, 2, 5, 8], "
                         "the call's is f32[2, 5, 8]; a replacement takes and returns the tensors of the preserved call, "
                         "in its signature's order");
  const auto one_out = export_program([](const at::Tensor& a, const at::Tensor& b) { return a * b; }, std::tuple{x, gate});
  XPORT_CHECK_THROWS_MSG(u->submodule("layers")->set_submodule("1", one_out), error,
                         "[xport.unflatten.swap] set_submodule('1'): the replacement has 1 tensor outputs, the call 2");
  CHECK(same_as(u->forward({x}), eager(1, 1, x)));  // refused swaps changed nothing
}

namespace {
/// A block with a BatchNorm whose running statistics its calls update, for unflatten's buffer writes.
struct NormBlockImpl : torch::nn::Module {
  NormBlockImpl() {
    register_module("fc", fc);
    register_module("bn", bn);
  }
  at::Tensor forward(const at::Tensor& x) { return torch::relu(bn(fc(x))); }
  torch::nn::Linear fc{6, 6};
  torch::nn::BatchNorm1d bn{6};
};
TORCH_MODULE(NormBlock);
struct TwoBlocksImpl : torch::nn::Module {
  TwoBlocksImpl() {
    register_module("a", a);
    register_module("b", b);
    register_module("out", out);
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = xport::call(a, x);
    h = xport::call(b, h * 2);
    return out(h + x);
  }
  NormBlock a, b;
  torch::nn::Linear out{6, 2};
};
TORCH_MODULE(TwoBlocks);
}  // namespace

TEST_CASE("unflatten: buffers the preserved calls update (BatchNorm in train mode) are updated as eager does, swapped or not; dynamic batch") {
  torch::manual_seed(0);
  TwoBlocks net, ref;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : ref->named_parameters()) item.value().copy_(net->named_parameters()[item.key()]);
  }
  net->train();
  ref->train();
  const auto x = at::randn({4, 6});
  const auto p = export_program(net, std::tuple{x}, {.preserve_module_call_signature = {"a", "b"}});
  const auto u = unflatten(p);
  const auto stats = [&](const char* name) {
    return at::allclose(u->named_buffers()[name], ref->named_buffers()[name]);
  };
  CHECK(at::allclose(u->forward({x})[0], ref->forward(x), 1e-5, 1e-6));
  CHECK(stats("a.bn.running_mean"));
  CHECK(stats("b.bn.running_var"));
  u->set_submodule("b", u->submodule("b")->program().clone());  // in steps: b's program updates b's copy
  CHECK(at::allclose(u->forward({x})[0], ref->forward(x), 1e-5, 1e-6));
  CHECK(stats("a.bn.running_mean"));
  CHECK(at::equal(u->named_buffers()["a.bn.num_batches_tracked"], ref->named_buffers()["a.bn.num_batches_tracked"]));
  CHECK(stats("b.bn.running_mean"));  // a program's clone holds its tensors: b's own buffers
  // a dynamic batch: the calls' programs keep the range constraints
  net->eval();
  ref->eval();
  const auto batch = Dim("batch", 2, 64);
  const auto d = export_program(net, std::tuple{x}, {.input_names = {"x"}, .dynamic_shapes = {{"x", {{0, batch}}}},
                                                     .preserve_module_call_signature = {"a", "b"}});
  const auto v = unflatten(d);
  const auto x9 = at::randn({9, 6});
  CHECK(at::allclose(v->forward({x9})[0], ref->forward(x9), 1e-5, 1e-6));
  CHECK(at::allclose(v->submodule("a")->forward({x9})[0], ref->a->forward(x9), 1e-5, 1e-6));
  v->set_submodule("a", [&](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{ref->b->forward(in[0])}; });
  CHECK(at::allclose(v->forward({x9})[0], ref->out(ref->b->forward(ref->b->forward(x9) * 2) + x9), 1e-5, 1e-6));
  XPORT_CHECK_THROWS_MSG(v->submodule("b")->forward({at::randn({70, 6})}), guard_error, "batch");
}

TEST_CASE("interop: xport writes an archive of every kind of program for torch.export.load" * doctest::test_suite("oracle")) {
  archive_writer w;
  {  // preserved submodule calls: torch unflattens them and swaps a layer for an eager one
    torch::manual_seed(0);
    Stack net;
    net->eval();
    const auto x = at::randn({2, 5, 8});
    const auto p = export_program(net, std::tuple{x}, {.preserve_module_call_signature = {"layers.0", "layers.1"}});
    w.add("preserved_calls", p, std::tuple{x});
    w.add("preserved_calls_core_aten", run_decompositions(p), std::tuple{x});
    // a preserved call's own program, cut out by unflatten (local state names)
    w.add("unflattened_layer", unflatten(p)->submodule("layers.1")->program(),
          std::tuple{x, torch::sigmoid(x.mean(-1, true))});
  }
  const auto model = [&](const std::string& name, auto net, at::Tensor x) {
    for (bool train : {false, true}) {
      torch::manual_seed(0);
      net->train(train);
      const auto mode = std::string(train ? "_train" : "_eval");
      auto p = export_program(net, std::tuple{x});
      w.add(name + mode, p, std::tuple{x}, {}, 11);
      w.add(name + mode + "_core_aten", run_decompositions(p), std::tuple{x}, {}, 11);
    }
  };
  m::for_each_model([&](const char*, const char* key, auto net, at::Tensor x) { model(key, net, x); });
  model("custom_ops_block", xport_test::GatedBlock(), at::randn({2, 5, 32}));  // the suite's xport_ops operators
  model("cond_gate", m::CondGate(), at::randn({5, 16}));                      // xport::cond, captured


  {  // dynamic shapes: a Dim, a derived dim, sizes the code computes
    torch::manual_seed(0);
    m::ResNet18 resnet;
    resnet->eval();
    const auto x = at::randn({2, 3, 32, 32});
    auto rd = export_program(resnet, std::tuple{x}, {.dynamic_shapes = {{"x", {{0, Dim("batch", 1, 64)}, {2, Dim("h", 32, 128)}}}}});
    using T1 = std::tuple<at::Tensor>;
    w.add("resnet18_dynamic", rd, T1{x}, {T1{at::randn({3, 3, 40, 32})}, T1{at::randn({1, 3, 64, 32})}});
    m::Encoder enc;
    enc->eval();
    const auto e = at::randn({5, 2, 32});
    auto ed = export_program(enc, std::tuple{e}, {.dynamic_shapes = {{"x", {{0, Dim("seq", 1, 64)}, {1, Dim("batch", 1, 64)}}}}});
    w.add("encoder_dynamic", ed, T1{e}, {T1{at::randn({7, 3, 32})}, T1{at::randn({1, 1, 32})}});
    w.add("encoder_dynamic_core_aten", run_decompositions(ed), T1{e}, {T1{at::randn({9, 2, 32})}});
    auto cat2 = [](const at::Tensor& a, const at::Tensor& b) { return at::cat({a, b}, 0).relu() * b.size(0); };
    const auto batch = Dim("batch", 1, 32);
    using T2 = std::tuple<at::Tensor, at::Tensor>;
    auto dd = export_program(cat2, T2{at::randn({3, 2}), at::randn({6, 2})},
                             {.input_names = {"a", "b"}, .dynamic_shapes = {{"a", {{0, batch}}}, {"b", {{0, 2 * batch}}}}});
    w.add("derived_dims", dd, T2{at::randn({3, 2}), at::randn({6, 2})}, {T2{at::randn({5, 2}), at::randn({10, 2})}});
    xport_test::GatedBlock block;
    block->eval();
    auto bd = export_program(block, std::tuple{at::randn({2, 6, 32})},
                             {.dynamic_shapes = {{"x", {{0, Dim("batch", 1, 16)}, {1, Dim("seq", 2, 64)}}}}});
    w.add("custom_ops_block_dynamic", bd, T1{at::randn({2, 6, 32})}, {T1{at::randn({5, 9, 32})}, T1{at::randn({1, 64, 32})}});
    // xport::cond with a dynamic batch: the calls take both branches (x and -x flip the gate's sign)
    m::CondGate gate;
    gate->eval();
    const auto g = at::randn({5, 16}) * 10;
    auto gd = export_program(gate, std::tuple{g}, {.dynamic_shapes = {{"x", {{0, Dim("batch", 1, 64)}}}}});
    const auto g2 = at::randn({9, 16}) * 10;
    w.add("cond_gate_dynamic", gd, T1{g}, {T1{-g}, T1{g2}, T1{-g2}});
    w.add("cond_gate_dynamic_core_aten", run_decompositions(gd), T1{g}, {T1{-g}, T1{g2}, T1{-g2}});
    // xport::while_loop: the calls loop zero, three and seven times
    m::LoopRefiner refiner;
    refiner->eval();
    const auto r = at::randn({2, 4});
    auto rp = export_program(refiner, T2{r, at::tensor(3L).squeeze()}, {.input_names = {"x", "steps"}});
    const std::vector<T2> loops{T2{r, at::tensor(0L).squeeze()}, T2{-r, at::tensor(7L).squeeze()}};
    w.add("loop_refiner", rp, T2{r, at::tensor(3L).squeeze()}, loops);
    w.add("loop_refiner_core_aten", run_decompositions(rp), T2{r, at::tensor(3L).squeeze()}, loops);
    // xport::map: a row-wise block, with a dynamic number of rows
    torch::nn::Linear row_lin(3, 3);
    auto rows = [&](const at::Tensor& xs, const at::Tensor& y) {
      return xport::map([&](const at::Tensor& row, const at::Tensor& b) { return std::tuple{torch::relu(row_lin(row)) + b, row.sum()}; },
                        xs, std::tuple{y});
    };
    const auto xs = at::randn({4, 3}), yb = at::randn({3});
    auto mp = export_program(rows, T2{xs, yb}, {.input_names = {"xs", "y"}, .dynamic_shapes = {{"xs", {{0, Dim("rows", 1, 64)}}}, {"y", {}}}});
    w.add("map_rows_dynamic", mp, T2{xs, yb}, {T2{at::randn({9, 3}), yb}, T2{at::randn({1, 3}), -yb}});
    w.add("map_rows_dynamic_core_aten", run_decompositions(mp), T2{xs, yb}, {T2{at::randn({6, 3}), yb}});
    // xport::scan: an RNN over a sequence of any length
    m::ScanRNN rnn;
    rnn->eval();
    const auto h0 = at::randn({2, 4}), seq = at::randn({5, 2, 3});
    auto sp = export_program(rnn, T2{h0, seq}, {.input_names = {"h0", "xs"}, .dynamic_shapes = {{"h0", {}}, {"xs", {{0, Dim("time", 1, 64)}}}}});
    const std::vector<T2> seqs{T2{-h0, at::randn({9, 2, 3})}, T2{h0, at::randn({2, 1, 3}).transpose(0, 1)}};
    w.add("scan_rnn_dynamic", sp, T2{h0, seq}, seqs);
    w.add("scan_rnn_dynamic_core_aten", run_decompositions(sp), T2{h0, seq}, seqs);
    // xport::autocast: a Linear and a matmul in bfloat16, torch's wrap_with_autocast; lowered, the casts
    // (not an einsum: torch 2.13's own run_decompositions of that block fails, its einsum decomposed below
    // autocast into a bmm of bfloat16 and float32; xport's lowering casts there as eager does, test_control_flow)
    torch::nn::Linear amp_lin(3, 3);
    const auto amp_w = at::randn({3, 3});
    auto amp = [&](const at::Tensor& x) {
      auto [h] = xport::autocast(
          at::kCPU, at::kBFloat16,
          [&](const at::Tensor& t) { return std::tuple{at::matmul(amp_lin(t), amp_w).softmax(-1)}; },
          std::tuple{x});
      return h.to(at::kFloat) * x;
    };
    const auto ax = at::randn({4, 3});
    auto ap = export_program(amp, T1{ax}, {.input_names = {"x"}, .dynamic_shapes = {{"x", {{0, Dim("batch", 1, 64)}}}}});
    w.add("autocast_block_dynamic", ap, T1{ax}, {T1{at::randn({7, 3})}, T1{at::randn({3, 5}).t()}});
    w.add("autocast_block_dynamic_core_aten", run_decompositions(ap), T1{ax}, {T1{at::randn({2, 3})}});
    // nonzero routing: a gated mixture of experts, its expert batches of sizes only the data knows
    torch::manual_seed(0);
    m::MoE moe;
    moe->eval();
    using T1 = std::tuple<at::Tensor>;
    const auto tokens = at::randn({10, 8});
    auto ep = export_program(moe, T1{tokens}, {.input_names = {"x"}});
    w.add("moe_nonzero", ep, T1{tokens}, {T1{at::zeros({10, 8})}, T1{at::randn({20, 8}).slice(0, 0, 20, 2)}});
    auto dp = export_program(moe, T1{tokens}, {.input_names = {"x"}, .dynamic_shapes = {{"x", {{0, Dim("tokens", 1, 256)}}}}});
    w.add("moe_nonzero_dynamic", dp, T1{tokens}, {T1{at::randn({1, 8})}, T1{at::randn({77, 8})}});
    w.add("moe_nonzero_dynamic_core_aten", run_decompositions(dp), T1{tokens}, {T1{at::randn({3, 8})}});
    // unique's values and counts, and a boolean mask: more sizes only the data knows
    auto uniq = [](const at::Tensor& t) {
      const auto [v, inverse, counts] = at::_unique2(t, true, true, true);
      return std::tuple{v * 2, inverse, counts, t.index({t > 2})};
    };
    const auto ints = at::tensor({3L, 1L, 3L, 2L, 1L, 4L});
    w.add("unique_masked", export_program(uniq, T1{ints}, {.input_names = {"x"}}), T1{ints},
          {T1{at::full({6}, 5L)}, T1{at::arange(12L).slice(0, 0, 12, 2)}});
  }
  {  // structure: dict / list / int / float / bool / string inputs, tuple / list / dict outputs
    const auto c = at::randn({3});
    auto fn = [&](const std::map<std::string, at::Tensor>& d, const std::vector<at::Tensor>& xs, std::int64_t k, double s,
                  bool flag, const std::string& tag) {
      auto y = d.at("a") * s + d.at("b") * k + c + xs[0] - xs[1];
      std::map<std::string, at::Tensor> out{{"y", flag ? y.relu() : y}, {tag, y.sum()}};
      return std::tuple{out, std::vector<at::Tensor>{y.abs(), y.exp()}, y.mean()};
    };
    using T = std::tuple<std::map<std::string, at::Tensor>, std::vector<at::Tensor>, std::int64_t, double, bool, std::string>;
    const T args{{{"a", at::randn({2, 3})}, {"b", at::randn({2, 3})}}, {at::randn({3}), at::randn({3})}, 2, 0.5, true, "total"};
    auto p = export_program(fn, args, {.input_names = {"d", "xs", "k", "s", "flag", "tag"}});
    w.add("structured", p, args);
    w.add("structured_core_aten", run_decompositions(p), args);
  }
  {  // a causal mask of -inf (masked_fill), softmax over it
    auto attn = [](const at::Tensor& q) {
      const auto n = q.size(1);
      auto scores = at::matmul(q, q.transpose(1, 2));
      auto mask = at::ones({n, n}, q.options()).triu(1).to(at::kBool);
      return at::softmax(scores.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
    };
    using T = std::tuple<at::Tensor>;
    auto p = export_program(attn, T{at::randn({2, 5, 4})}, {.input_names = {"q"}});
    w.add("causal_mask", p, T{at::randn({2, 5, 4})});
    w.add("causal_mask_core_aten", run_decompositions(p), T{at::randn({2, 5, 4})});
  }
  {  // buffer mutation and user-input mutation
    torch::manual_seed(0);
    BufferNet net;
    using T = std::tuple<at::Tensor>;
    auto p = export_program(net, T{at::randn({3, 4})});
    w.add("buffer_mutation", p, T{at::randn({3, 4})});
    w.add("buffer_mutation_core_aten", run_decompositions(p), T{at::randn({3, 4})});
    auto bump = [](at::Tensor x, const at::Tensor& y) {
      x.add_(y);
      return x * 2;
    };
    using T2 = std::tuple<at::Tensor, at::Tensor>;
    auto q = export_program(bump, T2{at::randn({4}), at::randn({4})}, {.input_names = {"x", "y"}});
    w.add("input_mutation", q, T2{at::randn({4}), at::randn({4})});
    w.add("input_mutation_core_aten", run_decompositions(q), T2{at::randn({4}), at::randn({4})});
  }
  {  // None outputs (MultiheadAttention without its weights): `return (out, None)`
    torch::manual_seed(0);
    torch::nn::MultiheadAttention mha(torch::nn::MultiheadAttentionOptions(8, 2));
    mha->eval();
    auto attn = [&](const at::Tensor& q) { return mha->forward(q, q, q, {}, /*need_weights=*/false); };
    using T = std::tuple<at::Tensor>;
    auto p = export_program(attn, T{at::randn({5, 2, 8})}, {.input_names = {"q"}});
    w.add("none_output", p, T{at::randn({5, 2, 8})});
    w.add("none_output_core_aten", run_decompositions(p), T{at::randn({5, 2, 8})});
  }
  {  // the strict front end (source lines), a hand-built program (no call structure)
    using T = std::tuple<at::Tensor>;
    auto s = export_program<xport::strict>([](sym_tensor x) { return sin(x) * x + 1; }, T{at::randn({4, 4})});
    w.add("strict", s, T{at::randn({4, 4})});
    program_builder b;
    auto x = b.input("x", at::randn({2, 3}));
    auto wt = b.parameter("w", at::randn({3, 3}));
    b.output(b.call("aten::mm", {x, wt}));
    b.output(b.call("aten::relu", {x}));
    w.add("hand_built", std::move(b).build(), T{at::randn({2, 3})});
  }
  {  // registered C++ aggregates in and out: torch unflattens them into its dataclasses of the same names
    using T = std::tuple<m::attn_in>;
    auto p = export_program(m::attend, T{m::attn_in{at::randn({2, 5}), at::ones({2, 5})}});
    w.add("cpp_dataclass", p, T{m::attn_in{at::randn({2, 5}), (at::rand({2, 5}) > 0.5).to(at::kFloat)}});
  }
  MESSAGE("archives written for torch: " << w.size());
  CHECK(w.size() == 44 + 7 + 2 + 2 + 4 + 2 + 2 + 2 + 2 + 2 + 2 + 4 + 1 + 2 + 1);  // ..., autocast_block*, moe_nonzero*, unique_masked, cpp_dataclass, unflattened_layer
}

// ---- C++ -> Python -> C++ -----------------------------------------------------------------------

TEST_CASE("interop: the archives torch.export.save wrote again are the programs xport wrote" * doctest::test_suite("oracle_resaved")) {
  xport_test::load_custom_ops();  // programs call xport_ops operators: their library is loaded first
  const auto cpp = oracle_dir("cpp"), resaved = oracle_dir("resaved");
  const auto index = read_index(cpp);
  std::size_t checked = 0;
  for (const auto& entry : index) {
    const std::string name = entry["name"];
    CAPTURE(name);
    const auto ours = load((cpp / (name + ".pt2")).string());
    load_options lo;
    lo.example_inputs = true;
    const auto theirs = load((resaved / (name + ".pt2")).string(), lo);
    CHECK(to_string(theirs) == to_string(ours));
    CHECK((theirs.signature() == ours.signature()));
    CHECK((theirs.in_spec() == ours.in_spec()));
    CHECK((theirs.out_spec() == ours.out_spec()));
    CHECK((theirs.module_types() == ours.module_types()));
    CHECK(theirs.dialect() == ours.dialect());
    REQUIRE(theirs.state_dict().size() == ours.state_dict().size());
    for (const auto& [k, t] : ours.state_dict()) CHECK(at::equal(theirs.state_dict().at(k), t));
    for (const auto& [k, t] : ours.constants()) CHECK(at::equal(theirs.constants().at(k), t));
    const auto io = read_pickle(cpp / (name + ".io.pt")).toGenericDict();
    const auto c = call_of(theirs, io, name);
    if (ours.in_spec() && xport::detail::serde::has_node_type(*ours.in_spec())) {
      CHECK_FALSE(theirs.example_inputs().has_value());  // xport writes none: C++ cannot make the Python objects
    } else {
      REQUIRE(theirs.example_inputs().has_value());
      REQUIRE(theirs.example_inputs()->size() == c.inputs.size());
    }
    auto q = theirs.clone();
    const auto seed = field(io, "seed").toInt();
    CHECK(check_outputs(q, c, seed, name) == static_cast<int>(c.outputs.size()));  // the same kernels, bit-equal
    for (const auto& x : field(io, "extra").toListRef()) {
      const auto e = call_of(theirs, x.toGenericDict(), name + " (extra)");
      CHECK(check_outputs(theirs, e, seed, name + " (extra)") == static_cast<int>(e.outputs.size()));
    }
    ++checked;
  }
  CHECK(checked == index.size());
  CHECK(checked >= 50);
}

TEST_CASE("interop: the engine runs torch's quantized programs, in both IRs and optimized, as torch's module does" * doctest::test_suite("oracle")) {
  const auto dir = oracle_dir("py");
  std::size_t programs = 0, outputs = 0;
  for (const auto& entry : read_index(dir)) {
    const std::string name = entry["name"];
    if (name.rfind("quantized", 0) != 0) continue;
    CAPTURE(name);
    const auto p = load((dir / (name + ".pt2")).string());
    auto io = read_pickle(dir / (name + ".io.pt")).toGenericDict();
    std::vector<io_call> calls{call_of(p, io, name)};
    for (const auto& x : field(io, "extra").toListRef()) calls.push_back(call_of(p, x.toGenericDict(), name + " (extra)"));
    const auto lowered = run_decompositions(p);
    auto optimized = run_decompositions(p);
    namespace ps = xport::passes;
    const auto r = optimized | (ps::dce | ps::cse | ps::fold | ps::canonicalize);
    REQUIRE_MESSAGE(r.ok(), r.error);
    for (const exported_program* program : std::array<const exported_program*, 3>{&p, &lowered, &optimized}) {
      const engine e(*program);
      for (const auto& c : calls) {
        const auto got = e.run(c.inputs);
        REQUIRE(got.size() == c.outputs.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("output " << i);
          CHECK(same(got[i], c.outputs[i], true));  // the interpreter's kernels: bit for bit
          ++outputs;
        }
      }
    }
    ++programs;
  }
  MESSAGE("quantized programs run by the engine: " << programs << " (" << outputs << " outputs; both IRs, optimized)");
  CHECK(programs >= 4);
}

TEST_CASE("interop: <xport/quantized.hpp> defines torch's quantized_decomposed operators, with torch's checks") {
  auto& d = c10::Dispatcher::singleton();
  for (const char* op : {"quantize_per_tensor", "dequantize_per_channel", "choose_qparams_per_token_asymmetric",
                         "dequantize_per_channel_group", "fake_quant_per_channel"})
    CHECK(d.findSchema({std::string("quantized_decomposed::") + op, ""}).has_value());
  register_quantized_decomposed();  // again: nothing happens
  const auto x = at::tensor({-1.0f, 0.0f, 0.26f, 10.0f});
  const auto q = d.findSchemaOrThrow("quantized_decomposed::quantize_per_tensor", "")
                     .typed<at::Tensor(const at::Tensor&, double, std::int64_t, std::int64_t, std::int64_t, at::ScalarType)>();
  CHECK(at::equal(q.call(x, 0.1, 2, -128, 127, at::kChar), at::tensor({-8, 2, 5, 102}, at::kChar)));
  CHECK(at::equal(q.call(x, 0.1, 2, 0, 5, at::kByte), at::tensor({0, 2, 5, 5}, at::kByte)));  // clamped
  XPORT_CHECK_THROWS_MSG(q.call(x, 0.1, 0, -200, 127, at::kChar), std::exception,
                         "quant_min out of bounds for dtype, quant_min_lower_bound: -128 quant_min: -200");
  XPORT_CHECK_THROWS_MSG(q.call(x.to(at::kDouble), 0.1, 0, -128, 127, at::kChar), std::exception,
                         "Expecting input to have dtype torch.float32, but got dtype: Double");
  // where the header is not included, load() says to include it
  const auto why = xport::detail::serde::unregistered_operator("torch.ops.quantized_decomposed.quantize_per_tensor.default");
  CHECK(why.find("Fix: #include <xport/quantized.hpp>") != std::string::npos);
}
