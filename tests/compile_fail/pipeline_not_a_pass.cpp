// must not compile: 42 is not a pass.
#include <xport/xport.hpp>
void f() { auto p = xport::passes::dce | 42; }
