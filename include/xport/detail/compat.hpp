// xport/detail/compat.hpp: the version tests every LibTorch difference is written against.
// LibTorch 2.13 (the pip wheel) is the primary build, Debian's 1.13 (Debian 12) the second;
// Debian 13's 2.6 builds too. Code that differs by version tests these macros (never
// TORCH_VERSION_* directly), so `grep XPORT_HAS_` and `grep XPORT_TORCH_VERSION` find every
// difference. They are internal: the umbrella header undefines them at its end.
#pragma once

#include <string>  // std::string

#include <torch/version.h>

#include <xport/config.hpp>

#define XPORT_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||                \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/// LibTorch's functionalization with view replay (FunctionalTensorWrapper, reapply_views), the
/// `core` operator tag and the `_native_batch_norm_legit` family, which torch.export's own
/// run_decompositions() is built on: xport lowers with them (lower/decompose.hpp). 1.13 has
/// neither the tag nor functional BatchNorm statistics: xport's own functionalizer serves it.
#define XPORT_HAS_TORCH_FUNCTIONALIZATION XPORT_TORCH_VERSION_AT_LEAST(2, 1)

/// LibTorch's choice of a convolution's backend (`at::native::select_conv_backend` over SymInts)
/// and of the memory format it writes (`_determine_backend_memory_format`), which torch's fake
/// convolution asks (ops/conv_layout.hpp).
#define XPORT_HAS_CONV_BACKEND_SELECTION XPORT_TORCH_VERSION_AT_LEAST(2, 1)

XPORT_BEGIN_NAMESPACE
namespace detail {

/// "1.13.1": the LibTorch xport was compiled against, named in errors about missing ops.
inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace detail
XPORT_END_NAMESPACE
