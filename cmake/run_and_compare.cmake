# Runs PROGRAM (with ARGS) and compares its standard output with the file EXPECTED.
# -DUPDATE=1 rewrites EXPECTED instead.
execute_process(COMMAND ${PROGRAM} ${ARGS} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}\n${out}\n${err}")
endif()
if(UPDATE OR DEFINED ENV{XPORT_UPDATE_GOLDEN})
  file(WRITE ${EXPECTED} "${out}")
  return()
endif()
file(READ ${EXPECTED} expected)
if(NOT out STREQUAL expected)
  message(FATAL_ERROR "output of ${PROGRAM} differs from ${EXPECTED}\n--- expected ---\n${expected}--- actual ---\n${out}")
endif()
