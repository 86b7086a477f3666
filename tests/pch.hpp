// Precompiled for every test TU: LibTorch's ATen and doctest (the slow parts). xport itself is
// not in here, so the include/ and single_include/ builds each parse their own tree.
#pragma once
#include <ATen/ATen.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
