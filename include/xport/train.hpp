// xport/train.hpp: training in C++, an opt-in entry beside the umbrella header (it parses
// torch::nn): `p.module()`, the program as a torch::nn::Module that torch::optim trains
// (run/module.hpp), and `pkg.module()`, a package's programs as one module's methods
// (serde/package_module.hpp); it also lets export_forward_backward() (lower/joint.hpp) run the backward.
#pragma once

#include <xport/xport.hpp>
#include <xport/run/module.hpp>
#include <xport/package.hpp>
#include <xport/serde/package_module.hpp>
