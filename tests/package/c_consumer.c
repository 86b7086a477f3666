/* Consumer: xport's C API from a C program (tests/package/find_package): a load that fails is
 * a status, an id and a message, with no C++ in sight. */
#include <stdio.h>
#include <string.h>

#include <xport/c/xport.h>

int main(void) {
  xport_program* p = NULL;
  if (xport_program_load("/nonexistent/model.pt2", &p) != XPORT_ERROR_LOAD || p != NULL) return 1;
  if (strcmp(xport_last_error_id(), "xport.load.open") != 0) return 1;
  printf("xport %s from C: %s\n", xport_version(), xport_last_error_message());
  return 0;
}
