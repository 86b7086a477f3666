// xport/detail/macro_unscope.hpp: undefines xport's internal macros at the end of the umbrella
// header. XPORT_BEGIN_NAMESPACE / XPORT_END_NAMESPACE and the version macros stay: they are part
// of the public surface (extensions declare into xport's namespace with them).
#pragma once

#undef XPORT_TORCH_VERSION_AT_LEAST
#undef XPORT_HAS_TORCH_FUNCTIONALIZATION
#undef XPORT_HAS_CONV_BACKEND_SELECTION
