// must not compile: a temporary program piped into a pass (nothing would see the result).
#include <xport/xport.hpp>
xport::exported_program make();
void f() { (void)(make() | xport::passes::dce); }
