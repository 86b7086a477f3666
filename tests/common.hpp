// Helpers shared by the test files: golden files and exception-message checks.
#pragma once

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
inline void check_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(XPORT_TEST_DIR) + "/golden/" + name;
  if (std::getenv("XPORT_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  const std::string expected = read_file(path);
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
