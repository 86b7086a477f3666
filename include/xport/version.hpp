// xport/version.hpp: the library's version, as macros and as constants.
// The inline namespace that every declaration lives in carries the same numbers
// (see config.hpp), so two different copies of xport cannot silently mix.
#pragma once

#define XPORT_VERSION_MAJOR 0
#define XPORT_VERSION_MINOR 1
#define XPORT_VERSION_PATCH 0
#define XPORT_VERSION_STRING "0.1.0"
