// xport/ir/dtype.hpp: how torch spells dtypes, devices, layouts and memory formats.
// `dtype_abbr` gives the annotation form that torch.fx prints (`f32`, `bf16`, `b8`, ...);
// `python_repr` the Python form that appears in printed arguments (`torch.float32`).
#pragma once

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <string_view>  // std::string_view

#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE

namespace detail {

struct dtype_names {
  std::string_view c10;     // c10::toString spelling, stable across LibTorch versions
  std::string_view abbr;    // torch/utils/_dtype_abbrs.py
  std::string_view python;  // str(torch.<dtype>)
};

// Keyed by the c10 spelling rather than the enum value: the enum grows between LibTorch
// versions (float8, uint16, bits...), the names do not change.
inline constexpr std::array<dtype_names, 38> dtype_table{{
    {"Byte", "u8", "torch.uint8"},
    {"Char", "i8", "torch.int8"},
    {"Short", "i16", "torch.int16"},
    {"Int", "i32", "torch.int32"},
    {"Long", "i64", "torch.int64"},
    {"Half", "f16", "torch.float16"},
    {"Float", "f32", "torch.float32"},
    {"Double", "f64", "torch.float64"},
    {"ComplexHalf", "c32", "torch.complex32"},
    {"ComplexFloat", "c64", "torch.complex64"},
    {"ComplexDouble", "c128", "torch.complex128"},
    {"Bool", "b8", "torch.bool"},
    {"QInt8", "qi8", "torch.qint8"},
    {"QUInt8", "qu8", "torch.quint8"},
    {"QInt32", "qi32", "torch.qint32"},
    {"BFloat16", "bf16", "torch.bfloat16"},
    {"QUInt4x2", "qu4x2", "torch.quint4x2"},
    {"QUInt2x4", "qu2x4", "torch.quint2x4"},
    {"Bits1x8", "b1x8", "torch.bits1x8"},
    {"Bits2x4", "b2x4", "torch.bits2x4"},
    {"Bits4x2", "b4x2", "torch.bits4x2"},
    {"Bits8", "bits8", "torch.bits8"},
    {"Bits16", "b16", "torch.bits16"},
    {"Float8_e5m2", "f8e5m2", "torch.float8_e5m2"},
    {"Float8_e4m3fn", "f8e4m3fn", "torch.float8_e4m3fn"},
    {"Float8_e5m2fnuz", "f8e5m2fnuz", "torch.float8_e5m2fnuz"},
    {"Float8_e4m3fnuz", "f8e4m3fnuz", "torch.float8_e4m3fnuz"},
    {"UInt16", "u16", "torch.uint16"},
    {"UInt32", "u32", "torch.uint32"},
    {"UInt64", "u64", "torch.uint64"},
    {"Float8_e8m0fnu", "f8e8m0fnu", "torch.float8_e8m0fnu"},
    {"Float4_e2m1fn_x2", "f4e2m1fnx2", "torch.float4_e2m1fn_x2"},
    {"Int1", "i1", "torch.int1"},
    {"Int2", "i2", "torch.int2"},
    {"Int4", "i4", "torch.int4"},
    {"UInt1", "u1", "torch.uint1"},
    {"UInt2", "u2", "torch.uint2"},
    {"UInt4", "u4", "torch.uint4"},
}};

inline const dtype_names* find_dtype_names(c10::ScalarType t) {
  const std::string_view name = c10::toString(t);
  for (const auto& entry : dtype_table)
    if (entry.c10 == name) return &entry;
  return nullptr;
}

}  // namespace detail

/// The abbreviation torch.fx prints in annotations: `f32`, `i64`, `b8`, `bf16`, `c64`, ...
inline std::string dtype_abbr(c10::ScalarType t) {
  const auto* n = detail::find_dtype_names(t);
  return n ? std::string(n->abbr) : std::string(c10::toString(t));
}

/// The dtype as Python prints it: `torch.float32`.
inline std::string python_repr(c10::ScalarType t) {
  const auto* n = detail::find_dtype_names(t);
  return n ? std::string(n->python) : "torch." + std::string(c10::toString(t));
}

/// The device as Python prints it: `device(type='cpu')`, `device(type='cuda', index=0)`.
inline std::string python_repr(c10::Device d) {
  std::string type = c10::DeviceTypeName(d.type(), /*lower_case=*/true);
  std::string out = "device(type='" + type + "'";
  if (d.has_index()) out += ", index=" + std::to_string(static_cast<int>(d.index()));
  return out + ")";
}

/// The layout as Python prints it: `torch.strided`, `torch.sparse_coo`, ...
inline std::string python_repr(c10::Layout l) {
  switch (l) {
    case c10::kStrided: return "torch.strided";
    case c10::kSparse: return "torch.sparse_coo";
    case c10::kMkldnn: return "torch._mkldnn";
    case c10::kSparseCsr: return "torch.sparse_csr";
    case c10::kSparseCsc: return "torch.sparse_csc";
    case c10::kSparseBsr: return "torch.sparse_bsr";
    case c10::kSparseBsc: return "torch.sparse_bsc";
    default: return "torch.layout(" + std::to_string(static_cast<int>(l)) + ")";
  }
}

/// The memory format as Python prints it: `torch.contiguous_format`, `torch.channels_last`, ...
inline std::string python_repr(c10::MemoryFormat m) {
  switch (m) {
    case c10::MemoryFormat::Contiguous: return "torch.contiguous_format";
    case c10::MemoryFormat::Preserve: return "torch.preserve_format";
    case c10::MemoryFormat::ChannelsLast: return "torch.channels_last";
    case c10::MemoryFormat::ChannelsLast3d: return "torch.channels_last_3d";
    default: return "torch.memory_format(" + std::to_string(static_cast<int>(m)) + ")";
  }
}

XPORT_END_NAMESPACE
