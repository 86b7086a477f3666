// xport/version.hpp: the library's version, as macros. The inline namespace every declaration
// lives in, XPORT_ABI_NAMESPACE, carries the same numbers (a test checks they agree), so two
// different copies of xport in one program cannot silently mix.
#pragma once

#define XPORT_VERSION_MAJOR 0
#define XPORT_VERSION_MINOR 1
#define XPORT_VERSION_PATCH 0
#define XPORT_VERSION_STRING "0.1.0"
#define XPORT_ABI_NAMESPACE v0_1_0  // v<major>_<minor>_<patch>
