// The files the Python oracles and the C++ suite hand each other (tests/test_interop.cpp,
// tests/test_corpus.cpp): a directory named by an environment variable that ctest sets, io
// files (torch.save'd dicts; the layout is in test_interop.cpp) and index.json lists.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common.hpp"

namespace xport_test {

/// $`env`/`sub`, made if missing; fails the case when ctest did not set `env`.
inline std::filesystem::path shared_dir(const char* env, const std::string& sub, const char* tests) {
  const char* dir = std::getenv(env);
  REQUIRE_MESSAGE(dir != nullptr, std::string(env) << " is not set: run these cases through ctest (" << std::string(tests) << " tests)");
  const auto path = std::filesystem::path(dir) / sub;
  std::filesystem::create_directories(path);
  return path;
}

/// Dtypes at::equal has no kernel for (float8, complex32): tests compare them by their bytes.
/// By name: LibTorch 1.13's enum lacks some.
inline bool bytes_only(c10::ScalarType t) {
  const std::string_view n = c10::toString(t);
  return n == "ComplexHalf" || n.rfind("Float8_", 0) == 0;
}

/// Dtypes torch.save writes with `_rebuild_tensor_v3` and torch.load(weights_only=True) refuses
/// as LibTorch's pickler writes them (float8, complex32, uint16/32/64): io files leave them out.
inline bool not_in_io_files(c10::ScalarType t) {
  const std::string_view n = c10::toString(t);
  return bytes_only(t) || n == "UInt16" || n == "UInt32" || n == "UInt64";
}

inline c10::IValue read_pickle(const std::filesystem::path& path) {
  const auto bytes = read_file(path.string());
  REQUIRE_MESSAGE(!bytes.empty(), "missing or empty " << path);
  return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
}

inline void write_pickle(const std::filesystem::path& path, const c10::IValue& v) {
  const auto bytes = xport::detail::pickle_bytes(v);  // torch.load(weights_only=True) reads it
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline nlohmann::json read_index(const std::filesystem::path& dir) {
  const auto text = read_file((dir / "index.json").string());
  REQUIRE_MESSAGE(!text.empty(), "missing " << (dir / "index.json"));
  return nlohmann::json::parse(text);
}

inline c10::IValue field(const c10::impl::GenericDict& d, const std::string& key) {
  const auto it = d.find(key);
  REQUIRE_MESSAGE(it != d.end(), "the io file has no '" << key << "'");
  return it->value();
}

/// One call of an io file: its args and kwargs as saved, the program's tensor inputs in its
/// order, and the outputs torch gave (None ones left out: run() gives undefined tensors for them,
/// and Python checks them).
struct io_call {
  c10::IValue args, kwargs;
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> outputs;
};

inline io_call call_of(const xport::exported_program& p, const c10::impl::GenericDict& d, const std::string& what) {
  io_call c;
  c.args = field(d, "args");
  c.kwargs = field(d, "kwargs");
  c.inputs = xport::detail::inputs_of_call(c10::ivalue::Tuple::create({c.args, c.kwargs}), p.in_spec(), what);
  for (const auto& t : field(d, "outputs").toListRef())
    if (!t.isNone()) c.outputs.push_back(t.toTensor());
  return c;
}

}  // namespace xport_test
