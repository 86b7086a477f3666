// xport/config.hpp: namespace and ABI macros, the internal assertion macro.
// Everything here is XPORT_-prefixed; the umbrella header undefines the internal macros
// at its end (see detail/macro_unscope.hpp).
#pragma once

#include <xport/version.hpp>

#define XPORT_ABI_CONCAT_EX(a, b, c) v##a##_##b##_##c
#define XPORT_ABI_CONCAT(a, b, c) XPORT_ABI_CONCAT_EX(a, b, c)
#define XPORT_ABI_NAMESPACE \
  XPORT_ABI_CONCAT(XPORT_VERSION_MAJOR, XPORT_VERSION_MINOR, XPORT_VERSION_PATCH)

// The API sits in xport::v<major>_<minor>_<patch>, an inline namespace: users write xport::graph,
// the linker sees the version.
#define XPORT_BEGIN_NAMESPACE \
  namespace xport {           \
  inline namespace XPORT_ABI_NAMESPACE {
#define XPORT_END_NAMESPACE \
  }                         \
  }

#if defined(__GNUC__) || defined(__clang__)
#define XPORT_LIKELY(x) __builtin_expect(!!(x), 1)
#define XPORT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define XPORT_LIKELY(x) (x)
#define XPORT_UNLIKELY(x) (x)
#endif
