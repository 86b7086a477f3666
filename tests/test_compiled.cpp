// The compiled mode (<xport/compiled.hpp>, xport::xport_compiled): the same program through the
// light handle and through the header-only API gives the same results, text, names and errors,
// on real models, from many threads. (tests/package/ checks a TU that includes compiled.hpp
// alone, installed and added as a subdirectory.)
#include <string>
#include <thread>
#include <vector>

#include <xport/compiled.hpp>
#include <xport/engine.hpp>

#include "models.hpp"

#include "common.hpp"

namespace m = xport_models;

namespace {

template <class Net>
xport::exported_program compiled_case(Net net, const at::Tensor& x, bool decompose) {
  net->eval();
  auto p = xport::export_program(net, std::tuple{x});
  return decompose ? xport::run_decompositions(p) : std::move(p);
}

// Whatever `f` throws, as (type, message); ("", "") when it returns.
template <class F>
std::pair<std::string, std::string> thrown_by(F&& f) {
  try {
    f();
  } catch (const xport::guard_error& e) {
    return {"guard_error", e.what()};
  } catch (const xport::load_error& e) {
    return {"load_error", e.what()};
  } catch (const xport::error& e) {
    return {"error", e.what()};
  }
  return {"", ""};
}

}  // namespace

TEST_CASE("compiled mode: a loaded program runs, prints and saves as the header-only API does") {
  torch::manual_seed(0);
  struct named {
    std::string name;
    xport::exported_program p;
    at::Tensor x;
  };
  std::vector<named> cases;
  cases.push_back({"ResNet-18 (inference IR)", compiled_case(m::ResNet18(), at::randn({2, 3, 32, 32}), true), at::randn({2, 3, 32, 32})});
  cases.push_back({"encoder layer (training IR)", compiled_case(m::Encoder(), at::randn({6, 2, 32}), false), at::randn({6, 2, 32})});
  cases.push_back({"LSTM (inference IR)", compiled_case(m::LSTMNet(), at::randn({5, 3, 8}), true), at::randn({5, 3, 8})});
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const auto bytes = xport::save_to_string(c.p);
    const auto h = xport::compiled::program::load_from_memory(bytes.data(), bytes.size());
    const auto full = xport::load_from_memory(bytes.data(), bytes.size());
    CHECK(h.str() == xport::to_string(full));
    CHECK(h.input_names() == full.signature().user_inputs());
    CHECK(h.output_names() == full.signature().user_outputs());
    const auto want = xport::run(full, {c.x});
    const auto got = h.run({c.x});
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(at::equal(got[i], want[i]));
    const xport::compiled::engine e(h);
    const auto eng = xport::engine(full).run({c.x});
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(at::equal(e.run({c.x})[i], eng[i]));
    // a channels_last and a sliced input: the same results as the header-only API's
    for (const auto& [layout, v] : xport_test::layouts_of(c.x)) {
      CAPTURE(layout);
      CHECK(at::equal(h.run({v})[0], xport::run(full, {v})[0]));
      CHECK(at::equal(e.run({v})[0], xport::engine(full).run({v})[0]));
    }
    // saved again through the handle: the same program
    const auto again = h.save_to_string();
    CHECK(xport::to_string(xport::load_from_memory(again.data(), again.size())) == h.str());
    CHECK(xport::compiled::program(h.get().clone()).str() == h.str());  // from the header-only API
  }
}

TEST_CASE("compiled mode: errors are the header-only API's, typed, with its messages") {
  torch::manual_seed(0);
  const auto p = compiled_case(m::MLP(), at::randn({4, 16}), true);
  const xport::compiled::program h(p.clone());
  const xport::compiled::engine e(h);
  const auto wrong = at::randn({4, 17});
  const auto want = thrown_by([&] { (void)xport::run(p, {wrong}); });
  CHECK(want.first == "guard_error");
  CHECK(thrown_by([&] { (void)h.run({wrong}); }) == want);
  CHECK(thrown_by([&] { (void)e.run({wrong}); }).first == "guard_error");
  const std::string junk = "not an archive";
  const auto bad = thrown_by([&] { (void)xport::load_from_memory(junk.data(), junk.size()); });
  CHECK(bad.first == "load_error");
  CHECK(thrown_by([&] { (void)xport::compiled::program::load_from_memory(junk.data(), junk.size()); }) == bad);
  CHECK(thrown_by([&] { (void)xport::compiled::program::load("/nonexistent/model.pt2"); }) ==
        thrown_by([&] { (void)xport::load("/nonexistent/model.pt2"); }));
}

TEST_CASE("compiled mode: one engine runs from many threads, each result its own") {
  torch::manual_seed(0);
  const auto p = compiled_case(m::Encoder(), at::randn({6, 2, 32}), true);
  const xport::compiled::engine e{xport::compiled::program(p.clone())};
  std::vector<at::Tensor> inputs, got(8), want;
  for (int i = 0; i < 8; ++i) {
    inputs.push_back(at::randn({6, 2, 32}));
    want.push_back(xport::run(p, {inputs.back()})[0]);
  }
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < 8; ++i) threads.emplace_back([&, i] { got[i] = e.run({inputs[i]})[0]; });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < 8; ++i) CHECK(at::allclose(got[i], want[i], 1e-5, 1e-6));
}
