// Helpers shared by the test files: golden files and exception-message checks.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <xport/xport.hpp>

namespace xport_test {

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
  const std::string path = std::string(XPORT_TEST_DIR) + "/golden/" + name;
  std::string alt;
#if !XPORT_HAS_TORCH_FUNCTIONALIZATION
  const auto dot = name.rfind('.');
  alt = std::string(XPORT_TEST_DIR) + "/golden/" + name.substr(0, dot) + ".torch1" + name.substr(dot);
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
