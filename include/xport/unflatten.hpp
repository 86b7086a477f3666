// xport/unflatten.hpp: torch's `torch.export.unflatten` in C++, an opt-in entry beside the
// umbrella header (it parses torch::nn): `xport::unflatten(p)` gives the program as the tree of
// modules it was exported from, whose preserved submodule calls run on their own and can be
// swapped for another program or function of the same signature (run/unflatten.hpp).
//
//   auto p = xport::export_program(net, std::tuple{x}, {.preserve_module_call_signature = {"layers.0"}});
//   auto u = xport::unflatten(p);
//   u->submodule("layers.0")->program();              // the call's own program (local state names)
//   u->set_submodule("layers.0", other_layer_program);
//   auto y = u->forward({x});
#pragma once

#include <xport/train.hpp>
#include <xport/run/unflatten.hpp>
