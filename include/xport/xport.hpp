// xport/xport.hpp: the whole library. torch.export for C++: export C++ code and torch::nn
// modules, build, check, print and run exported programs of ATen ops, with no Python.
// Includes only narrow LibTorch headers (ATen/core/Tensor.h, the dispatcher, per-op headers),
// never <torch/torch.h> or <ATen/ATen.h>.
#pragma once

#include <xport/config.hpp>
#include <xport/version.hpp>
#include <xport/error.hpp>
#include <xport/fwd.hpp>

// the IR: types, graphs, signatures, programs
#include <xport/ir/dtype.hpp>
#include <xport/ir/sym_int.hpp>
#include <xport/ir/sym_expr.hpp>
#include <xport/ir/tensor_meta.hpp>
#include <xport/ir/op.hpp>
#include <xport/ir/graph.hpp>
#include <xport/program/dead_code.hpp>
#include <xport/ir/signature.hpp>
#include <xport/ir/treespec.hpp>
#include <xport/ir/program.hpp>

// what xport knows about ATen operators
#include <xport/ops/op_sets.hpp>
#include <xport/ops/shape_formulas.hpp>
#include <xport/ops/schema.hpp>
#include <xport/ops/meta_rules.hpp>
#include <xport/ops/meta_infer.hpp>
#include <xport/ops/core_ops.hpp>
#include <xport/ops/decompositions.hpp>
#include <xport/ops/call.hpp>

// building, checking and printing programs
#include <xport/program/verify.hpp>
#include <xport/program/builder.hpp>
#include <xport/program/print.hpp>

// capture: export_program
#include <xport/trace/tree.hpp>
#include <xport/trace/capture.hpp>
#include <xport/trace/strict.hpp>
#include <xport/trace/control_flow.hpp>
#include <xport/trace/dynamic.hpp>
#include <xport/trace/symbolic.hpp>
#include <xport/trace/export.hpp>

// lowering: functionalize, run_decompositions
#include <xport/lower/functionalize.hpp>
#include <xport/lower/decompose.hpp>
#include <xport/lower/joint.hpp>

// passes and pipelines
#include <xport/passes/pass.hpp>
#include <xport/passes/standard.hpp>
#include <xport/passes/manager.hpp>

// running
#include <xport/run/guards.hpp>
#include <xport/run/interpreter.hpp>
#include <xport/run/callable.hpp>

// .pt2 archives
#include <xport/serde/zip_index.hpp>
#include <xport/serde/json.hpp>
#include <xport/serde/program_json.hpp>
#include <xport/serde/pt2.hpp>

#include <xport/detail/macro_unscope.hpp>
