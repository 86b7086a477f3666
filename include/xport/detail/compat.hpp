// xport/detail/compat.hpp: every difference between the LibTorch versions xport supports.
// Debian's 1.13.1 is the CI target; 2.x (with CUDA) must build too. Nothing version-specific
// lives anywhere else.
#pragma once

#include <string>  // std::string

#include <torch/version.h>

#include <xport/config.hpp>

#define XPORT_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||                \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

XPORT_BEGIN_NAMESPACE
namespace detail {

/// "1.13.1": the LibTorch xport was compiled against, named in errors about missing ops.
inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace detail
XPORT_END_NAMESPACE
