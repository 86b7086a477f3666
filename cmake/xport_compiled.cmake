# xport::xport_compiled, the compiled mode: <xport/compiled.hpp>'s definitions, with the whole
# header-only library compiled once (src/compiled.cpp), as a static library of the project that
# links it. Used by xport's own CMakeLists.txt and by the installed xportConfig.cmake, which
# installs the source beside it (so the package stays header-only and arch-independent; the
# library is built on first use, in the consumer's build, with its compiler and flags).
function(xport_add_compiled_library source)
  if(TARGET xport_compiled)
    return()
  endif()
  add_library(xport_compiled STATIC EXCLUDE_FROM_ALL ${source})
  add_library(xport::xport_compiled ALIAS xport_compiled)
  target_link_libraries(xport_compiled PUBLIC xport::xport)
  set_target_properties(xport_compiled PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# xport::xport_c, the C API (<xport/c/xport.h>, docs/c-api.md): a shared library over the compiled
# mode (src/c_api.cpp), built the same way on first use. Only the xport_* functions are exported;
# a C program that links it needs xport's include directory only (no LibTorch header, no C++).
function(xport_add_c_library source)
  if(TARGET xport_c)
    return()
  endif()
  add_library(xport_c SHARED EXCLUDE_FROM_ALL ${source})
  add_library(xport::xport_c ALIAS xport_c)
  target_link_libraries(xport_c PRIVATE xport::xport_compiled)
  get_target_property(_xport_includes xport::xport INTERFACE_INCLUDE_DIRECTORIES)
  target_include_directories(xport_c INTERFACE ${_xport_includes})
  set_target_properties(xport_c PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(xport_c PRIVATE -Wl,--exclude-libs,ALL)  # (the static compiled mode's symbols stay inside)
  endif()
endfunction()
