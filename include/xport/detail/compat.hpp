// xport/detail/compat.hpp: every difference between the LibTorch versions xport supports.
// LibTorch 2.13 (the pip wheel) is the primary build; Debian's 1.13 (Debian 12) and 2.6
// (Debian 13) are built and tested too. Version tests are the macros here.
#pragma once

#include <string>  // std::string

#include <torch/version.h>

#include <xport/config.hpp>

#define XPORT_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||                \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/// LibTorch's functionalization with view replay (FunctionalTensorWrapper, reapply_views), the
/// `core` operator tag and the `_native_batch_norm_legit` family, which torch.export's own
/// run_decompositions() is built on: xport lowers with them (trace/decompose.hpp). 1.13 has
/// neither the tag nor functional BatchNorm statistics: xport's own functionalizer serves it.
#define XPORT_HAS_TORCH_FUNCTIONALIZATION XPORT_TORCH_VERSION_AT_LEAST(2, 1)

XPORT_BEGIN_NAMESPACE
namespace detail {

/// "1.13.1": the LibTorch xport was compiled against, named in errors about missing ops.
inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace detail
XPORT_END_NAMESPACE
