// The ExportDB gallery: C++ counterparts of torch.export's ExportDB cases (what exports, what
// does not, and what the program looks like). Each case registers itself and prints its
// result; `exportdb <case>` runs one, and ctest compares each with <case>.expected.
#pragma once

#include <functional>
#include <iostream>
#include <map>
#include <string>

#include <ATen/ATen.h>
#include <xport/xport.hpp>

namespace exportdb {

struct entry {
  std::string description;
  std::string support;  // SUPPORTED / NOT_SUPPORTED_YET, as ExportDB labels its cases
  std::function<void(std::ostream&)> run;
};

inline std::map<std::string, entry>& registry() {
  static std::map<std::string, entry> r;
  return r;
}

struct registrar {
  registrar(const std::string& name, const std::string& description, const std::string& support,
            std::function<void(std::ostream&)> run) {
    registry().emplace(name, entry{description, support, std::move(run)});
  }
};

/// Prints what an export that must fail reported.
template <class F>
void expect_error(std::ostream& os, F&& f) {
  try {
    f();
    os << "unexpectedly exported\n";
  } catch (const xport::error& e) {
    os << "error: " << e.what() << "\n";
  }
}

}  // namespace exportdb
