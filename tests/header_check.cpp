// Compiled, never run: the library's headers must not pull in ATen's full operator set.
// TORCH_ASSERT_ONLY_METHOD_OPERATORS turns an include of <ATen/ATen.h>, <ATen/Functions.h> or
// <torch/torch.h> anywhere below into a compile error.
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <xport/xport.hpp>
