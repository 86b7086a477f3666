// src/cli/inputs.hpp: the tensors `xport run`, `xport bench` and `xport convert` call a program
// with: the archive's own sample inputs, random ones of the signature's types, tensors torch.save
// wrote, or shapes given on the command line.
#pragma once

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <torch/serialize.h>

#include <xport/xport.hpp>

#include "args.hpp"

namespace xport_cli {

/// The user inputs' placeholders of `p`, in order.
inline std::vector<xport::value> user_input_values(const xport::exported_program& p) {
  std::vector<xport::value> out;
  const auto& specs = p.signature().input_specs;
  const auto phs = p.graph().placeholders();
  for (std::size_t i = 0; i < specs.size() && i < phs.size(); ++i)
    if (specs[i].kind == xport::input_kind::user_input) out.push_back(phs[i].output(0));
  return out;
}

/// A dim's size for a random input: the size the program was exported with (its hint), within
/// the dim's range.
inline std::int64_t random_size(const xport::sym_int& s, const xport::exported_program& p) {
  if (s.is_constant()) return s.value();
  std::int64_t v = s.hint() > 0 ? s.hint() : 2;
  for (const auto& r : p.range_constraints())
    if (r.symbol.str() == s.str()) v = std::clamp(v, r.min, r.max.value_or(v > r.min ? v : r.min));
  return v;
}

/// Values of `dtype` with `sizes`: normal floats, integers in [0, 10) (valid token ids and
/// indices of small tables), booleans at random.
inline at::Tensor random_tensor(c10::ScalarType dtype, at::IntArrayRef sizes, c10::Device device) {
  const auto opts = at::TensorOptions().device(device);
  if (dtype == at::kBool) return at::randint(0, 2, sizes, opts.dtype(at::kLong)).to(at::kBool);
  if (c10::isIntegralType(dtype, false)) return at::randint(0, 10, sizes, opts.dtype(dtype));
  if (c10::isComplexType(dtype)) return at::randn(sizes, opts.dtype(dtype));
  return at::randn(sizes, opts.dtype(at::kFloat)).to(dtype);
}

/// Random tensors of the program's user input types (seeded: the same every run).
inline std::vector<at::Tensor> random_inputs(const xport::exported_program& p, c10::Device device) {
  at::manual_seed(0);
  std::vector<at::Tensor> out;
  for (const auto& v : user_input_values(p)) {
    const auto& t = v.type();
    if (t.kind != xport::value_kind::tensor)
      throw xport::error("xport.cli.inputs", "input '" + v.name() + "' is not a tensor: give the inputs as a file "
                                             "(--inputs FILE.pt, torch.save of a tuple)");
    std::vector<std::int64_t> sizes;
    for (const auto& s : t.tensor.sizes) sizes.push_back(random_size(s, p));
    out.push_back(random_tensor(t.tensor.dtype, sizes, device));
  }
  return out;
}

/// Every tensor of `v` in order (tuples, lists, dict values): torch.save of a tuple of inputs,
/// or of torch's (args, kwargs) sample inputs.
inline void collect_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) collect_tensors(e, out);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) collect_tensors(e, out);
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict()) collect_tensors(kv.value(), out);
  }
}

/// The tensors in a file torch.save wrote (a tensor, or a tuple, list or dict of them).
inline std::vector<at::Tensor> tensors_from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw xport::error("xport.cli.inputs", "cannot open inputs file '" + path + "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw xport::error("xport.cli.inputs", "cannot read inputs file '" + path + "' (torch.save of a tuple of tensors): " +
                                               std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
  }
  std::vector<at::Tensor> out;
  collect_tensors(v, out);
  if (out.empty()) throw xport::error("xport.cli.inputs", "inputs file '" + path + "' holds no tensor");
  return out;
}

/// `float32:1,3,224,224` (dtype optional, float32 by default): a random tensor of that type.
inline at::Tensor tensor_from_shape(const std::string& text) {
  static const std::vector<std::pair<std::string, c10::ScalarType>> dtypes{
      {"float32", at::kFloat}, {"float", at::kFloat},   {"float64", at::kDouble}, {"float16", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"int64", at::kLong}, {"int32", at::kInt},     {"int8", at::kChar},
      {"uint8", at::kByte},    {"bool", at::kBool}};
  auto dtype = at::kFloat;
  auto dims = text;
  if (const auto colon = text.find(':'); colon != std::string::npos) {
    const auto name = text.substr(0, colon);
    const auto it = std::find_if(dtypes.begin(), dtypes.end(), [&](const auto& d) { return d.first == name; });
    if (it == dtypes.end()) throw usage_error("unknown dtype '" + name + "' in --shape " + text);
    dtype = it->second;
    dims = text.substr(colon + 1);
  }
  std::vector<std::int64_t> sizes;
  for (std::size_t start = 0; start <= dims.size() && !dims.empty();) {
    auto end = dims.find_first_of(",x", start);
    if (end == std::string::npos) end = dims.size();
    const auto item = dims.substr(start, end - start);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
      throw usage_error("--shape takes [DTYPE:]D0,D1,... (sizes as numbers), not '" + text + "'");
    sizes.push_back(std::stoll(item));
    start = end + 1;
  }
  return random_tensor(dtype, sizes, c10::Device(c10::kCPU));
}

/// The inputs `--inputs` names: `sample` (the archive's), `random` (the default), or a file.
inline std::vector<at::Tensor> program_inputs(const xport::exported_program& p, const std::string& how, c10::Device device) {
  if (how == "random") return random_inputs(p, device);
  std::vector<at::Tensor> out;
  if (how == "sample") {
    if (!p.example_inputs())
      throw xport::error("xport.cli.inputs", "the archive holds no sample inputs (data/sample_inputs/): use --inputs "
                                             "random, or --inputs FILE.pt (torch.save of a tuple of tensors)");
    out = *p.example_inputs();
  } else {
    out = tensors_from_file(how);
  }
  for (auto& t : out) t = t.to(device);
  return out;
}

}  // namespace xport_cli
