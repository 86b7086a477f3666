// xport/ops/data_dependent.hpp: the ops that read tensor data, in one place.
// Export runs on shapes only (meta tensors), so an op whose result depends on the values a
// tensor holds has no meta kernel. xport knows three kinds (torch.export's own split):
//  - ops that give a row count only the data knows (nonzero, masked_select, unique, an index by
//    a boolean mask): recorded with an unbacked size when the capture plans one (Note [Unbacked
//    sizes in a capture], trace/unbacked.hpp), the shape rule below making the meta result;
//  - item() of an integer tensor of one element: an unbacked SymInt, the same way;
//  - every other read (item() of a float, a tensor used as a bool, equal, allclose, the unique
//    variants torch.export does not record): a graph break.
// Every read of data export cannot stand a value for is one error: graph_break, id
// xport.export.graph_break (the tracer's other breaks, on a made-up row count, share it).
// The tracer (trace/capture.hpp) asks these predicates and records; the IR's dead-code removal
// (program/dead_code.hpp), the builder's inference (ops/meta_infer.hpp) and the engine's plan
// (run/engine.hpp, run/schedule.hpp) ask reads_data.
#pragma once

#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/ir/op.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// What an op that reads tensor data gives back.
enum class data_read : std::uint8_t {
  rows,    ///< a tensor with as many rows as the data holds (recorded with an unbacked size)
  number,  ///< a Python number (item(): an unbacked SymInt when the tensor is an integer)
  answer,  ///< a bool or a result torch.export does not record: always a graph break
};

/// One op that reads tensor data, and how the traced C++ code spells the call (for messages).
struct data_reading_op {
  std::string_view name;
  std::string_view call;
  data_read gives;
};

/// Every op xport knows to read tensor data (names without overload).
inline constexpr data_reading_op data_reading_ops[] = {
    {"aten::nonzero", "at::nonzero", data_read::rows},
    {"aten::masked_select", "at::masked_select", data_read::rows},
    {"aten::_unique2", "at::_unique2", data_read::rows},
    {"aten::_local_scalar_dense", "Tensor::item()", data_read::number},
    {"aten::item", "Tensor::item()", data_read::number},
    {"aten::is_nonzero", "using a tensor as a bool (Tensor::is_nonzero())", data_read::answer},
    {"aten::equal", "at::equal", data_read::answer},
    {"aten::allclose", "at::allclose", data_read::answer},
    {"aten::unique", "at::unique", data_read::answer},
    {"aten::_unique", "at::_unique", data_read::answer},
    {"aten::unique_dim", "at::unique_dim", data_read::answer},
    {"aten::unique_consecutive", "at::unique_consecutive", data_read::answer},
    {"aten::nonzero_numpy", "at::nonzero_numpy", data_read::answer},
    {"aten::argwhere", "at::argwhere", data_read::answer},
};

inline const data_reading_op* find_data_reading_op(std::string_view name) {
  if (name.size() < 6 || name.substr(0, 6) != "aten::") return nullptr;
  for (const auto& op : data_reading_ops)
    if (op.name == name) return &op;
  return nullptr;
}

/// Whether the op's result depends on tensor data: no meta kernel can exist for it, dead-code
/// removal keeps it, and the engine plans no memory around it.
inline bool reads_data(std::string_view name) { return find_data_reading_op(name) != nullptr; }
inline bool reads_data(const op_info& op) { return reads_data(op.name); }

/// What the traced C++ call was, for graph-break messages.
inline std::string user_facing_call(std::string_view name) {
  const auto* op = find_data_reading_op(name);
  return std::string(op ? op->call : name);
}

/// Whether an index list holds a boolean (or uint8) mask anywhere.
inline bool has_mask_index(const c10::IValue& indices) {
  if (!indices.isList()) return false;
  for (const auto& e : indices.toListRef()) {
    if (!e.isTensor() || !e.toTensor().defined()) continue;
    const auto st = e.toTensor().scalar_type();
    if (st == c10::kBool || st == c10::kByte) return true;
  }
  return false;
}

/// Whether `op` on `stack` (its arguments last) gives as many rows as its data holds, a count
/// export makes a symbol of: nonzero, masked_select, `_unique2` (what at::_unique2 and
/// torch.unique call), an index by one boolean (or uint8) mask in the first position.
inline bool gives_unbacked_rows(const op_info& op, const std::vector<c10::IValue>& stack) {
  if (op.overload.empty()) {
    const auto* known = find_data_reading_op(op.name);
    if (known && known->gives == data_read::rows) return true;
  }
  if (op.name != "aten::index" || op.overload != "Tensor") return false;
  const auto& indices = stack.back();
  if (!indices.isList() || indices.toListRef().empty()) return false;
  const auto& list = indices.toListRef();
  for (std::size_t i = 1; i < list.size(); ++i)
    if (list[i].isTensor() && list[i].toTensor().defined()) return false;
  if (!list[0].isTensor() || !list[0].toTensor().defined()) return false;
  const auto st = list[0].toTensor().scalar_type();
  return st == c10::kBool || st == c10::kByte;
}

/// Whether `op` on `stack` is item() of an integer tensor of one element: an int only the data knows.
inline bool reads_unbacked_int(const op_info& op, const std::vector<c10::IValue>& stack) {
  if (op.name != "aten::item" && op.name != "aten::_local_scalar_dense") return false;
  const auto& self = stack.back();
  return self.isTensor() && self.toTensor().defined() && self.toTensor().numel() == 1 &&
         c10::isIntegralType(self.toTensor().scalar_type(), /*includeBool=*/false);
}

/// The shape rule of a call gives_unbacked_rows accepts: its meta results, given its meta
/// arguments and the row count `rows`. `[rows, self.dim()]` int64 (nonzero), `[rows]`
/// (masked_select), `[rows, self's dims after the mask's]` (a mask index); `_unique2`'s values
/// `[rows]`, inverse (self's shape, or `[0]` when not asked for) and counts (`[rows]`, or `[0]`).
inline std::vector<at::Tensor> unbacked_rows_results(const op_info& op, const std::vector<c10::IValue>& args,
                                                     std::int64_t rows) {
  const auto self = args[0].toTensor();
  const auto index = self.options().dtype(at::kLong);
  if (op.name == "aten::_unique2") {
    const bool inverse = args[2].toBool(), counts = args[3].toBool();
    return {at::empty({rows}, self.options()), inverse ? at::empty(self.sizes(), index) : at::empty({0}, index),
            counts ? at::empty({rows}, index) : at::empty({0}, index)};
  }
  if (op.name == "aten::nonzero") return {at::empty({rows, self.dim()}, index)};
  if (op.name == "aten::masked_select") return {at::empty({rows}, self.options())};
  const auto mask_dims = args[1].toListRef()[0].toTensor().dim();
  if (mask_dims > self.dim())
    throw graph_error("xport.fake.op_rejected", op.qualified + ": a mask of " + std::to_string(mask_dims) +
                                                    " dims indexes a tensor of " + std::to_string(self.dim()));
  std::vector<std::int64_t> sizes{rows};
  for (auto d = mask_dims; d < self.dim(); ++d) sizes.push_back(self.size(d));
  return {at::empty(sizes, self.options())};
}

/// The one error for a call that reads tensor data where no value can stand for it: torch's
/// graph break, with the way out.
[[noreturn]] inline void throw_reads_data(const op_info& op) {
  throw graph_break(
      "xport.export.graph_break",
      "graph break: " + op.qualified + " (" + user_facing_call(op.name) +
          ") reads the contents of a tensor, which export cannot know: it runs on shapes only, "
          "and the program must be the same for every input. Way out: make the value an input "
          "of the program (a C++ int64_t/double/bool argument is specialized as a constant), or "
          "write the computation without reading data (e.g. at::where / at::clamp instead of "
          "branching on a value, masks with at::where instead of at::nonzero)");
}

/// Boolean-mask indexing (`x.index({mask})`, `x[mask]`) where no row count can stand for the
/// result: its size is the mask's count of true elements.
[[noreturn]] inline void throw_mask_index_break(const op_info& op) {
  throw graph_break(
      "xport.export.graph_break",
      "graph break: " + op.qualified + " with a boolean (or uint8) mask as an index selects as many "
          "elements as the mask holds true values, a data-dependent output size that export cannot "
          "know: it runs on shapes only. Way out: keep the shape and zero the rest "
          "(at::where(mask, x, 0), x * mask), or index with positions computed outside the "
          "program and passed as an input");
}

}  // namespace detail
XPORT_END_NAMESPACE
