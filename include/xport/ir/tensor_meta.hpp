// xport/ir/tensor_meta.hpp: what the graph knows about a tensor without its data.
// dtype, symbolic sizes and strides, storage offset, device, layout, requires_grad: the
// FakeTensor of torch.export, held as plain data. Printing: `annotation()` -> `f32[10, 10]`.
#pragma once

#include <algorithm>  // std::max
#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include <ATen/core/TensorBase.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <xport/config.hpp>
#include <xport/ir/dtype.hpp>
#include <xport/ir/sym_int.hpp>

XPORT_BEGIN_NAMESPACE

/// Sizes or strides: inline storage for up to 5 dimensions (no allocation for most tensors).
using sym_shape = c10::SmallVector<sym_int, 5>;

struct tensor_meta {
  c10::ScalarType dtype = c10::ScalarType::Float;
  sym_shape sizes;
  sym_shape strides;
  sym_int storage_offset = 0;
  c10::Device device = c10::Device(c10::kCPU);
  c10::Layout layout = c10::kStrided;
  bool requires_grad = false;

  /// Meta of a contiguous tensor of the given sizes.
  static tensor_meta contiguous(c10::ScalarType dtype, sym_shape sizes,
                                c10::Device device = c10::Device(c10::kCPU)) {
    tensor_meta m;
    m.dtype = dtype;
    m.device = device;
    m.strides.resize(sizes.size());
    std::int64_t stride = 1;
    for (std::size_t i = sizes.size(); i-- > 0;) {
      m.strides[i] = stride;
      stride *= std::max<std::int64_t>(sizes[i].hint(), 1);
    }
    m.sizes = std::move(sizes);
    return m;
  }

  /// Meta of a real (or meta) tensor.
  static tensor_meta of(const at::TensorBase& t) {
    tensor_meta m;
    m.dtype = t.scalar_type();
    m.sizes.assign(t.sizes().begin(), t.sizes().end());
    if (t.layout() == c10::kStrided) {
      m.strides.assign(t.strides().begin(), t.strides().end());
      m.storage_offset = t.storage_offset();
    }
    m.device = t.device();
    m.layout = t.layout();
    m.requires_grad = t.requires_grad();
    return m;
  }

  [[nodiscard]] std::int64_t dim() const noexcept { return static_cast<std::int64_t>(sizes.size()); }

  /// Sizes as example values (hints for symbolic sizes).
  [[nodiscard]] std::vector<std::int64_t> size_hints() const {
    std::vector<std::int64_t> out;
    out.reserve(sizes.size());
    for (const auto& s : sizes) out.push_back(s.hint());
    return out;
  }
  [[nodiscard]] std::vector<std::int64_t> stride_hints() const {
    std::vector<std::int64_t> out;
    out.reserve(strides.size());
    for (const auto& s : strides) out.push_back(s.hint());
    return out;
  }

  /// A tensor on the meta device with these properties (sizes at their hints).
  [[nodiscard]] at::Tensor make_meta() const {
    const auto st = strides.size() == sizes.size() ? stride_hints()
                                                    : contiguous(dtype, sizes).stride_hints();
    auto t = at::empty_strided(size_hints(), st, at::TensorOptions().dtype(dtype).device(c10::kMeta));
    return t;
  }

  /// `f32[10, 10]`, as torch.fx annotates a tensor.
  [[nodiscard]] std::string annotation() const {
    std::string s = dtype_abbr(dtype);
    s += '[';
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (i) s += ", ";
      s += sizes[i].str();
    }
    s += ']';
    return s;
  }

  friend bool operator==(const tensor_meta&, const tensor_meta&) = default;
};

XPORT_END_NAMESPACE
