// xport/engine.hpp: the inference engine (run/engine.hpp), an opt-in entry beside the umbrella
// header, so code that only exports, prints or saves does not parse it.
#pragma once

#include <xport/xport.hpp>
#include <xport/run/engine.hpp>
