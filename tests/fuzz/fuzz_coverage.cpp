// The trace-pc callback for the GCC fuzz driver (fuzz_load.cpp): GCC calls it at the start of
// every basic block of the instrumented file. Hashes (previous block, this block) into a byte
// map of edge hit counts, as AFL does. Compiled without instrumentation itself.
#include <cstdint>

namespace xport_fuzz {
std::uint8_t coverage[1 << 16];
}

namespace {
thread_local std::uintptr_t previous = 0;
}

extern "C" void __sanitizer_cov_trace_pc() {
  const auto pc = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
  const auto here = (pc ^ (pc >> 15)) & 0xFFFF;
  auto& c = xport_fuzz::coverage[(here ^ previous) & 0xFFFF];
  if (c != 255) ++c;
  previous = here >> 1;
}
