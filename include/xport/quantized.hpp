// xport/quantized.hpp: quantized programs, an opt-in entry beside the umbrella header. Including
// it defines torch's `quantized_decomposed` operators in the process (ops/quantized_decomposed.hpp:
// Note [quantized_decomposed in C++]), so the int8 programs PT2E quantization writes (torchao's
// `convert_pt2e`, then torch.export) load, run, lower and save like any other.
//
// A process that also runs torch's Python and imports torch.ao.quantization after this must not:
// the library is defined once per process (here, or by torch's Python module first, in which
// case this defines nothing).
#pragma once

#include <xport/xport.hpp>
#include <xport/ops/quantized_decomposed.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {
/// Defines the operators before main() (an inline variable: once per program, whichever
/// translation units include this header).
inline const bool quantized_decomposed_defined = (register_quantized_decomposed(), true);
}  // namespace detail
XPORT_END_NAMESPACE
