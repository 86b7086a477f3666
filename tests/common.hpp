// Helpers shared by the test files: golden files and exception-message checks.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <xport/xport.hpp>

// The umbrella undefines xport's internal version macros; the suite keeps its own test of
// the LibTorch that lowering is built on (detail/compat.hpp's XPORT_HAS_TORCH_FUNCTIONALIZATION).
#include <torch/version.h>
#define XPORT_TEST_TORCH_FUNCTIONALIZATION (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))

namespace xport_test {

/// tests/ of the source tree: $XPORT_TEST_DIR (ctest sets it), else found from the executable's
/// directory. The build passes only the relative path (XPORT_TEST_DIR_FROM_BINARY), so the
/// compiler's command line names no absolute path and ccache hits across clones.
inline const std::string& test_dir() {
  static const std::string dir = [] {
    if (const char* env = std::getenv("XPORT_TEST_DIR"); env && *env) return std::string(env);
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return (exe.parent_path() / XPORT_TEST_DIR_FROM_BINARY).lexically_normal().string();
  }();
  return dir;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Compares `actual` with tests/golden/<name>; XPORT_UPDATE_GOLDEN=1 rewrites the file instead.
/// LibTorch 1.13 lowers with xport's own functionalizer: where its output differs, its golden is
/// <stem>.torch1.<ext> (written on update only when it differs; removed when it agrees).
inline void check_golden(const std::string& name, const std::string& actual) {
  const std::string path = test_dir() + "/golden/" + name;
  std::string alt;
#if !XPORT_TEST_TORCH_FUNCTIONALIZATION
  const auto dot = name.rfind('.');
  alt = test_dir() + "/golden/" + name.substr(0, dot) + ".torch1" + name.substr(dot);
#endif
  if (std::getenv("XPORT_UPDATE_GOLDEN")) {
    if (alt.empty()) std::ofstream(path, std::ios::binary) << actual;
    else if (read_file(path) == actual) std::remove(alt.c_str());
    else std::ofstream(alt, std::ios::binary) << actual;
    return;
  }
  const std::string expected = read_file(!alt.empty() && std::ifstream(alt).good() ? alt : path);
  INFO("golden file: " << path << "\n--- expected ---\n" << expected << "--- actual ---\n" << actual);
  CHECK(actual == expected);
}

/// `p` saved to .pt2 bytes and loaded back (save_to_string, load_from_memory).
inline xport::exported_program reload(const xport::exported_program& p) {
  const auto bytes = xport::save_to_string(p);
  return xport::load_from_memory(bytes.data(), bytes.size());
}

/// `x` in the layouts a caller may pass, same values: as it is, with its strides reversed
/// (a transposed copy transposed back), a strided slice of a larger tensor, and channels_last
/// (4-d) or channels_last_3d (5-d).
inline std::vector<std::pair<std::string, at::Tensor>> layouts_of(const at::Tensor& x) {
  std::vector<std::pair<std::string, at::Tensor>> out{{"contiguous", x}};
  if (x.dim() >= 2) {
    std::vector<std::int64_t> rev;
    for (auto d = x.dim() - 1; d >= 0; --d) rev.push_back(d);
    out.emplace_back("transposed", x.permute(rev).contiguous().permute(rev));
  }
  if (x.dim() >= 1) {
    auto sizes = x.sizes().vec();
    sizes.back() *= 2;
    auto big = at::zeros(sizes, x.options());
    auto view = big.slice(-1, 0, sizes.back(), 2);
    view.copy_(x);
    out.emplace_back("sliced", view);
  }
  if (x.dim() == 4) out.emplace_back("channels_last", x.contiguous(at::MemoryFormat::ChannelsLast));
  if (x.dim() == 5) out.emplace_back("channels_last_3d", x.contiguous(at::MemoryFormat::ChannelsLast3d));
  return out;
}

}  // namespace xport_test

/// Checks that `expr` throws `type` whose what() contains `fragment`.
#define XPORT_CHECK_THROWS_MSG(expr, type, fragment)                                        \
  do {                                                                                      \
    try {                                                                                   \
      (void)(expr);                                                                         \
      FAIL_CHECK("expected " #type " from: " #expr);                                        \
    } catch (const type& e_) {                                                              \
      const std::string what_ = e_.what();                                                  \
      INFO("message: " << what_);                                                             \
      CHECK(what_.find(fragment) != std::string::npos);                                     \
    }                                                                                       \
  } while (0)
