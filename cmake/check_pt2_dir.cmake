# Runs tools/check_pt2.py on every archive in DIR (with its <name>.state.pt), with Debian's
# python3 (torch 1.13). Fails when there is no archive or when one check fails.
file(GLOB archives "${DIR}/*.pt2")
if(NOT archives)
  message(FATAL_ERROR "no .pt2 archives in ${DIR} (xport_tests writes them)")
endif()
foreach(a IN LISTS archives)
  string(REGEX REPLACE "\\.pt2$" ".state.pt" state "${a}")
  execute_process(COMMAND /usr/bin/python3 ${CHECKER} ${a} --expect-state ${state}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_pt2.py failed on ${a}")
  endif()
endforeach()
