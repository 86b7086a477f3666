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
