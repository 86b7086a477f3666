// xport/config.hpp: the namespace macros. Every declaration of xport sits between
// XPORT_BEGIN_NAMESPACE and XPORT_END_NAMESPACE, in the inline namespace version.hpp names.
#pragma once

#include <xport/version.hpp>

// The API sits in xport::v<major>_<minor>_<patch>, an inline namespace: users write xport::graph,
// the linker sees the version.
#define XPORT_BEGIN_NAMESPACE \
  namespace xport {           \
  inline namespace XPORT_ABI_NAMESPACE {
#define XPORT_END_NAMESPACE \
  }                         \
  }
