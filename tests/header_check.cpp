// Compiled, never run: the library's headers must not pull in ATen's full operator set.
// TORCH_ASSERT_ONLY_METHOD_OPERATORS turns an include of <ATen/ATen.h>, <ATen/Functions.h> or
// <torch/torch.h> anywhere below into a compile error.
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <xport/xport.hpp>

#include <string_view>

// The umbrella leaves only the namespace and version macros behind.
#if defined(XPORT_TORCH_VERSION_AT_LEAST) || defined(XPORT_HAS_TORCH_FUNCTIONALIZATION)
#error "xport/xport.hpp leaks an internal macro (add it to detail/macro_unscope.hpp)"
#endif
#if !defined(XPORT_BEGIN_NAMESPACE) || !defined(XPORT_END_NAMESPACE) || !defined(XPORT_VERSION_STRING)
#error "xport/xport.hpp must keep the namespace and version macros (extensions use them)"
#endif

// The inline namespace carries the version: "0.1.0" is v0_1_0.
#define XPORT_CHECK_STR_EX(x) #x
#define XPORT_CHECK_STR(x) XPORT_CHECK_STR_EX(x)
constexpr bool abi_matches_version(std::string_view abi, std::string_view version) {
  if (abi.size() != version.size() + 1 || abi[0] != 'v') return false;
  for (std::size_t i = 0; i < version.size(); ++i)
    if (abi[i + 1] != (version[i] == '.' ? '_' : version[i])) return false;
  return true;
}
static_assert(abi_matches_version(XPORT_CHECK_STR(XPORT_ABI_NAMESPACE), XPORT_VERSION_STRING),
              "version.hpp: XPORT_ABI_NAMESPACE must be v<major>_<minor>_<patch> of XPORT_VERSION_STRING");
