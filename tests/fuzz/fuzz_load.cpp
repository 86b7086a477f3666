// Fuzz targets: xport::load_from_memory on arbitrary bytes, and the readers inside it on their
// own (size expressions, program JSON). A typed xport::error is the expected
// answer to a bad file; anything else (a sanitizer report, a crash, another exception type, a
// hang) is a finding.
//
// Two drivers share the targets (load, sym, json: see fuzz_target):
//  - libFuzzer (clang 16 against LibTorch 2.13: -fsanitize=fuzzer; clang 14 lacks the builtin
//    behind std::source_location and cannot compile LibTorch 1.13's headers in C++20 mode);
//  - a small coverage-guided driver of our own for GCC (-fsanitize-coverage=trace-pc plus
//    ASan/UBSan), the default of tools/fuzz.sh and what ctest runs (fuzz_load, fuzz_sym,
//    fuzz_json: a fixed number of executions from a fixed seed). It keeps inputs that reach new
//    code (edge coverage of everything compiled in this file, i.e. all of xport), and mutates
//    bytes as well as whole archive records (rewritten with valid CRCs, so the JSON and weight
//    parsers are reached, not only the zip reader).
//
// With XPORT_FUZZ_WRITE_SEEDS=<dir> in the environment, either driver writes seed archives
// (small real programs) into <dir> and exits.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <xport/xport.hpp>

namespace {

void write_seeds(const std::string& dir) {
  torch::manual_seed(0);
  int i = 0;
  const auto put = [&](const xport::exported_program& p) {
    std::ofstream(dir + "/seed_" + std::to_string(i++) + ".pt2", std::ios::binary) << xport::save_to_string(p);
  };
  auto seq = torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3), torch::nn::ReLU());
  auto p = xport::export_program(seq, std::tuple{at::randn({2, 4})});
  put(p);
  put(xport::run_decompositions(p));
  auto conv = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)), torch::nn::MaxPool2d(2));
  put(xport::export_program(conv, std::tuple{at::randn({1, 1, 6, 6})}));
  const auto c = at::randn({3});
  put(xport::export_program([&](const std::map<std::string, at::Tensor>& d, std::int64_t k) {
    return std::tuple{d.at("a") * k + c, std::vector<at::Tensor>{d.at("b").sum()}};
  }, std::tuple{std::map<std::string, at::Tensor>{{"a", at::randn({3})}, {"b", at::randn({2})}}, std::int64_t{2}}));
  // torch 2.13's forms: srepr sizes with size nodes, -inf floats, example inputs (args, kwargs)
  const auto batch = xport::Dim("batch", 1, 64);
  auto dyn = xport::export_program([](const at::Tensor& x, const at::Tensor& y) {
    auto z = at::cat({x, y}, 0).masked_fill(y.sum() > 0, -std::numeric_limits<double>::infinity());
    return z.view({x.size(0) * 3, -1});
  }, std::tuple{at::randn({2, 4}), at::randn({4, 4})},
      {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, batch}}}, {"y", {{0, 2 * batch}}}}});
  put(dyn);
  xport::save_options with_inputs;
  with_inputs.example_inputs = true;
  std::ofstream(dir + "/seed_" + std::to_string(i++) + ".pt2", std::ios::binary) << xport::save_to_string(dyn, with_inputs);
}

// What the bytes are fed to: a whole archive (`load`), a size expression in either of torch's
// texts (`sym`: str() and srepr), or a program's JSON alone (`json`: the reader that turns
// models/model.json into a graph and signature, without the zip around it).
enum class fuzz_target { load, sym, json };
fuzz_target target = fuzz_target::load;

bool set_target(const std::string& name) {
  if (name == "load") target = fuzz_target::load;
  else if (name == "sym") target = fuzz_target::sym;
  else if (name == "json") target = fuzz_target::json;
  else return false;
  return true;
}

int test_one(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    switch (target) {
      case fuzz_target::load: {
        auto p = xport::load_from_memory(data, size);
        (void)xport::to_string(p);
        break;
      }
      case fuzz_target::sym: {
        const auto symbol_of = [](std::string_view name) -> std::optional<xport::sym_int> {
          if (name.size() > 16) return std::nullopt;
          return xport::sym::symbol(std::string(name), 7);
        };
        const auto e = xport::sym::parse(text, symbol_of);
        (void)e.str();
        break;
      }
      case fuzz_target::json: {
        const auto doc = xport::detail::serde::parse(text, "models/model.json");
        auto parts = xport::detail::serde::program_of(doc, "models/model.json");
        (void)parts;
        break;
      }
    }
  } catch (const xport::error&) {
  }
  return 0;
}

// Seeds for the sym and json targets, from the same programs.
void write_text_seeds(const std::string& dir, const std::vector<std::string>& archives) {
  int i = 0;
  const auto put = [&](const std::string& text) {
    std::ofstream(dir + "/text_" + std::to_string(i++), std::ios::binary) << text;
  };
  if (target == fuzz_target::sym) {
    for (const char* e : {"s0", "2*s0 + 1", "((s0 - 3)//2) + 1", "Min(4, s0)", "Mod(s0, 2)", "s27*s77", "s77**2",
                          "Add(FloorDiv(Symbol('s0', integer=True, positive=True), Integer(2)), Integer(1))",
                          "Mul(Integer(2), Symbol('s77'))", "Max(Symbol('s0'), Integer(3))",
                          "CeilDiv(Symbol('s0'), Integer(4))", "ModularIndexing(Symbol('s0'), Integer(1), Integer(8))"})
      put(e);
    return;
  }
  for (const auto& a : archives) {
    caffe2::serialize::MemoryReadAdapter in(a.data(), static_cast<off_t>(a.size()));
    const xport::detail::zip_index zip(in);
    put(zip.read("models/model.json"));
  }
}

void write_seeds_for_target(const std::string& dir) {
  if (target == fuzz_target::load) {
    write_seeds(dir);
    return;
  }
  const auto tmp = dir + "/.archives";
  std::filesystem::create_directories(tmp);
  write_seeds(tmp);
  std::vector<std::string> archives;
  for (const auto& e : std::filesystem::directory_iterator(tmp)) {
    std::ifstream f(e.path(), std::ios::binary);
    archives.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove_all(tmp);
  write_text_seeds(dir, archives);
}

}  // namespace

#ifndef XPORT_FUZZ_STANDALONE

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* t = std::getenv("XPORT_FUZZ_TARGET"); t && !set_target(t)) {
    std::fprintf(stderr, "XPORT_FUZZ_TARGET must be load, sym or json\n");
    std::exit(2);
  }
  if (const char* dir = std::getenv("XPORT_FUZZ_WRITE_SEEDS")) {
    write_seeds_for_target(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { return test_one(data, size); }

#else  // the GCC driver

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

namespace xport_fuzz {
extern std::uint8_t coverage[1 << 16];  // fuzz_coverage.cpp: the trace-pc callback writes here
}

namespace {

using bytes = std::string;
using xport_fuzz::coverage;

/// The records of an archive in file order, or empty when it is not one.
std::vector<std::pair<std::string, bytes>> records_of(const bytes& b) {
  std::vector<std::pair<std::string, bytes>> out;
  try {
    caffe2::serialize::MemoryReadAdapter in(b.data(), static_cast<off_t>(b.size()));
    const xport::detail::zip_index zip(in);
    std::vector<std::pair<std::uint64_t, std::string>> order;
    for (const auto& [name, r] : zip.records()) order.emplace_back(r.data_offset, name);
    std::sort(order.begin(), order.end());
    for (const auto& [off, name] : order)
      if (name != "version" && name != ".data/version") out.emplace_back(name, zip.read(name));
  } catch (const xport::error&) {
    out.clear();
  }
  return out;
}

bytes write_archive(const std::vector<std::pair<std::string, bytes>>& recs) {
  bytes out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* d, std::size_t n) {
    out.append(static_cast<const char*>(d), n);
    return n;
  });
  for (const auto& [name, data] : recs) w.writeRecord(name, data.data(), data.size());
  w.writeEndOfFile();
  return out;
}

struct mutator {
  std::mt19937_64 rng;
  std::size_t below(std::size_t n) { return n ? static_cast<std::size_t>(rng() % n) : 0; }

  void bytes_mutation(bytes& b) {
    switch (below(6)) {
      case 0:
        if (!b.empty()) b[below(b.size())] ^= static_cast<char>(1u << below(8));
        break;
      case 1:
        if (!b.empty()) b[below(b.size())] = static_cast<char>(rng());
        break;
      case 2: b.resize(below(b.size() + 1)); break;
      case 3: b.insert(below(b.size() + 1), bytes(1 + below(8), static_cast<char>(rng()))); break;
      case 4:
        if (!b.empty()) b.erase(below(b.size()), 1 + below(16));
        break;
      default: {  // interesting integers
        static constexpr std::int64_t vals[] = {0, -1, 1, 255, 65535, 0x7fffffff, -0x80000000LL, 0xffffffffLL, INT64_MAX};
        if (b.size() >= 8) {
          const auto v = vals[below(std::size(vals))];
          std::memcpy(&b[below(b.size() - 7)], &v, 1 + below(8));
        }
      }
    }
  }

  void json_mutation(nlohmann::json& j, int depth = 0) {
    if (j.is_object() && !j.empty() && depth < 12 && below(4) != 0) {
      auto it = j.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(below(j.size())));
      if (below(8) == 0) {
        j.erase(it);
        return;
      }
      return json_mutation(it.value(), depth + 1);
    }
    if (j.is_array() && !j.empty() && depth < 12 && below(4) != 0) {
      const auto i = below(j.size());
      if (below(8) == 0) {
        j.insert(j.begin() + static_cast<std::ptrdiff_t>(below(j.size() + 1)), j[i]);
        return;
      }
      if (below(8) == 0) {
        j.erase(i);
        return;
      }
      return json_mutation(j[i], depth + 1);
    }
    static const nlohmann::json replacements[] = {0, -1, 1, 7, 8, 12, 100000000000LL, -100000000000LL, 1.5, true, false,
                                                  nullptr, "", "x", "getitem", "torch.ops.aten.add.Tensor",
                                                  nlohmann::json::array(), nlohmann::json::object()};
    if (j.is_number_integer() && below(2)) j = j.get<std::int64_t>() + static_cast<std::int64_t>(below(5)) - 2;
    else j = replacements[below(std::size(replacements))];
  }

  bytes mutate(const bytes& in, const std::vector<bytes>& corpus) {
    if (below(3) != 0) {  // record-level: valid zip, broken content
      auto recs = records_of(in);
      if (!recs.empty()) {
        auto& [name, data] = recs[below(recs.size())];
        const bool is_json = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
        if (is_json && below(4) != 0) {
          try {
            auto j = nlohmann::json::parse(data);
            for (std::size_t k = 0, n = 1 + below(3); k < n; ++k) json_mutation(j);
            data = j.dump();
          } catch (const nlohmann::json::exception&) {
            bytes_mutation(data);
          }
        } else if (below(6) == 0) {
          recs.erase(recs.begin() + static_cast<std::ptrdiff_t>(below(recs.size())));
        } else {
          bytes_mutation(data);
        }
        try {
          return write_archive(recs);
        } catch (const c10::Error&) {
          // a record name the writer refuses (it came from an earlier mutation): mutate bytes
        }
      }
    }
    bytes b = in;
    if (below(10) == 0 && !corpus.empty()) {  // splice
      const auto& other = corpus[below(corpus.size())];
      b = b.substr(0, below(b.size() + 1)) + other.substr(below(other.size() + 1));
    }
    for (std::size_t k = 0, n = 1 + below(4); k < n; ++k) bytes_mutation(b);
    return b;
  }
};

/// AFL-style hit-count buckets, so reaching a block more often also counts as new.
std::uint8_t bucket(std::uint8_t n) {
  if (n <= 3) return n;
  if (n <= 7) return 4;
  if (n <= 15) return 8;
  if (n <= 31) return 16;
  if (n <= 127) return 32;
  return 128;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60;
  std::uint64_t seed = 1, max_runs = std::numeric_limits<std::uint64_t>::max();
  bool grow = true;
  std::string corpus_dir, findings = ".";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-max_total_time=", 0) == 0) seconds = std::stod(a.substr(16));
    else if (a.rfind("-runs=", 0) == 0) max_runs = std::stoull(a.substr(6));
    else if (a.rfind("-seed=", 0) == 0) seed = std::stoull(a.substr(6));
    else if (a.rfind("-artifact_prefix=", 0) == 0) findings = a.substr(17);
    else if (a.rfind("-target=", 0) == 0 && set_target(a.substr(8))) continue;
    else if (a == "-no_grow") grow = false;  // keep the corpus directory as it is (ctest)
    else corpus_dir = a;
  }
  if (const char* dir = std::getenv("XPORT_FUZZ_WRITE_SEEDS")) {
    write_seeds_for_target(dir);
    return 0;
  }
  if (corpus_dir.empty()) {
    std::fprintf(stderr,
                 "usage: %s [-target=load|sym|json] [-max_total_time=S] [-runs=N] [-seed=N] [-no_grow] "
                 "[-artifact_prefix=DIR/] CORPUS_DIR\n",
                 argv[0]);
    return 2;
  }
  std::vector<bytes> corpus;
  for (const auto& e : std::filesystem::directory_iterator(corpus_dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  if (corpus.empty()) corpus.emplace_back();
  static std::uint8_t seen[1 << 16];
  const auto run = [&](const bytes& b) {
    std::memset(coverage, 0, sizeof coverage);
    try {
      test_one(reinterpret_cast<const std::uint8_t*>(b.data()), b.size());
    } catch (const std::exception& e) {
      const auto path = findings + "crash-exception-" + std::to_string(std::hash<bytes>{}(b));
      std::ofstream(path, std::ios::binary) << b;
      std::fprintf(stderr, "FINDING: %s escaped load(): %s\n  input written to %s\n", typeid(e).name(), e.what(), path.c_str());
      std::abort();
    }
    bool fresh = false;
    for (std::size_t i = 0; i < sizeof coverage; ++i)
      if (coverage[i]) {
        const auto bit = bucket(coverage[i]);
        if ((seen[i] | bit) != seen[i]) {
          seen[i] |= bit;
          fresh = true;
        }
      }
    return fresh;
  };
  for (const auto& c : corpus) run(c);
  mutator m{std::mt19937_64(seed)};
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t execs = 0, added = 0;
  auto last_report = start;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    if (elapsed >= seconds || execs >= max_runs) break;
    const auto input = m.mutate(corpus[m.below(corpus.size())], corpus);
    ++execs;
    if (run(input)) {
      corpus.push_back(input);
      ++added;
      if (grow) std::ofstream(corpus_dir + "/cov_" + std::to_string(std::hash<bytes>{}(input)), std::ios::binary) << input;
    }
    if (std::chrono::duration<double>(now - last_report).count() > 30) {
      std::size_t edges = 0;
      for (auto s : seen) edges += s != 0;
      std::fprintf(stderr, "#%llu  %.0fs  corpus %zu  edges %zu  exec/s %.0f\n", static_cast<unsigned long long>(execs),
                   elapsed, corpus.size(), edges, static_cast<double>(execs) / elapsed);
      last_report = now;
    }
  }
  std::size_t edges = 0;
  for (auto s : seen) edges += s != 0;
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "done: %llu executions in %.0f s, corpus %zu (+%llu), edges %zu, findings 0\n",
               static_cast<unsigned long long>(execs), took, corpus.size(), static_cast<unsigned long long>(added), edges);
  return 0;
}

#endif
