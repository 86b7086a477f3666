// xport/xport.hpp: the whole library. torch.export for C++: export C++ code and torch::nn
// modules, build, check, print and run exported programs of ATen ops, with no Python.
// Includes only narrow LibTorch headers (ATen/core/Tensor.h, the dispatcher, per-op headers),
// never <torch/torch.h> or <ATen/ATen.h>.
#pragma once

#include <xport/config.hpp>
#include <xport/version.hpp>
#include <xport/error.hpp>
#include <xport/fwd.hpp>

#include <xport/ir/dtype.hpp>
#include <xport/ir/sym_int.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/ir/tensor_meta.hpp>
#include <xport/ir/op.hpp>
#include <xport/ir/graph.hpp>
#include <xport/ir/signature.hpp>
#include <xport/ir/program.hpp>
#include <xport/ir/verify.hpp>
#include <xport/ir/builder.hpp>
#include <xport/ir/print.hpp>
#include <xport/ir/treespec.hpp>
#include <xport/detail/core_ops.hpp>

#include <xport/run/guards.hpp>
#include <xport/run/interpreter.hpp>

#include <xport/trace/tree.hpp>
#include <xport/trace/capture.hpp>
#include <xport/trace/strict.hpp>
#include <xport/trace/dynamic.hpp>
#include <xport/trace/symbolic.hpp>
#include <xport/trace/export.hpp>
#include <xport/passes/pass.hpp>
#include <xport/passes/dce.hpp>
#include <xport/passes/functionalize.hpp>
#include <xport/trace/decompose.hpp>
#include <xport/passes/cse.hpp>
#include <xport/passes/fold.hpp>
#include <xport/passes/shapes.hpp>
#include <xport/passes/canonicalize.hpp>
#include <xport/passes/rewrite.hpp>
#include <xport/passes/standard.hpp>
#include <xport/passes/manager.hpp>
#include <xport/serde/zip_index.hpp>
#include <xport/serde/json.hpp>
#include <xport/serde/pt2.hpp>

#include <xport/detail/macro_unscope.hpp>
