// xport/serde/pt2.hpp: save and load .pt2 archives in torch.export's own layout.
//
//   archive_format                       "pt2"
//   archive_version                      "0"
//   models/model.json                    the program (serde/program_json.hpp; schema 8.20, torch 2.13's)
//   data/weights/weight_<i>              raw bytes of one storage (shared storage written once)
//   data/weights/model_weights_config.json     {"config": {fqn: PayloadMeta}}
//   data/constants/tensor_<i>, data/constants/model_constants_config.json
//   data/sample_inputs/model.pt          example inputs, torch.save'd (args, kwargs); always
//                                        there (torch's loader reads it), empty when not asked
// (several programs in one archive, torch's package_pt2, are a set of these per model name,
// sharing the storage records: serde/package.hpp)
//
// The zip is written by LibTorch's PyTorchStreamWriter (records stored, 64-byte aligned, under
// an `archive/` root folder, which torch's reader strips as it strips its own) and read with its
// PyTorchStreamReader after xport's own bounds check of the central directory; weights are read
// straight into fresh tensor storage, or, with `load_options::mmap`, are read-only views of the
// mapped file (serde/mapped_file.hpp). Loading never runs anything from the file.
#pragma once

#include <algorithm>    // std::find, std::stable_sort
#include <cctype>       // std::isalpha
#include <cstdio>       // std::FILE
#include <functional>   // std::function
#include <istream>      // std::istream
#include <map>          // std::map
#include <set>          // std::set
#include <memory>       // std::shared_ptr
#include <ostream>      // std::ostream
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <caffe2/serialize/file_adapter.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/versions.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <ATen/core/ivalue.h>
#include <c10/macros/Export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <xport/config.hpp>
#include <xport/ops/op_sets.hpp>
#include <xport/serde/mapped_file.hpp>
#include <xport/serde/program_json.hpp>

// LibTorch's unpickler (torch/csrc/jit/serialization/pickle.h, same in 1.13 and 2.x), declared
// here: its header pulls in the whole JIT IR, against the narrow-headers rule.
namespace torch::jit {
TORCH_API c10::IValue pickle_load(const std::vector<char>& data);
TORCH_API std::vector<char> pickle_save(const c10::IValue& ivalue);
#if XPORT_TORCH_VERSION_AT_LEAST(2, 3)
TORCH_API c10::IValue pickle_load_obj(std::string_view data);  // (custom objects: LibTorch 2.3 and newer)
#endif
}  // namespace torch::jit


XPORT_BEGIN_NAMESPACE

struct save_options {
  /// The model's name inside the archive (`models/<name>.json`); torch.export.save uses "model".
  std::string model_name = "model";
  /// Write the example inputs kept on the program into `data/sample_inputs/<name>.pt` as torch
  /// does, `(args, kwargs)` nested as the program's inputs; otherwise that record is empty (as
  /// torch writes it for a program without example inputs).
  bool example_inputs = false;
};

struct load_options {
  std::string model_name = "model";
  /// Read example inputs when the archive has them (parsed by LibTorch's unpickler: only for
  /// files you trust).
  bool example_inputs = false;
  /// Check the rebuilt program with verify() (on by default; a failure is a load_error).
  bool verify = true;
  /// Map the file instead of reading it (`load(path, ...)` only): parameters, buffers and
  /// constants become read-only views of the file's pages (is_mapped() is true for them), so
  /// loading copies no weights and every process that maps one file shares them. The pages are
  /// read-only: a write to a mapped tensor kills the process with SIGSEGV (it never reaches the
  /// file or another process; check is_mapped() first). State the program writes (mutated buffers, BatchNorm's running statistics
  /// in a training-mode program) and records not 64-byte aligned in the file are read into
  /// memory as without mmap. For inference: load without it to train the weights.
  bool mmap = false;
  /// Where the program's tensors go (torch's `map_location`): unset, each tensor goes to the
  /// device it was saved on, as torch.export.load puts it; set, every tensor goes here and the
  /// graph is retargeted (exported_program::to), so a CUDA archive loads on a CPU-only machine.
  std::optional<c10::Device> device;
};

namespace detail {

/// `v` in torch.save's format (a zip of data.pkl and data/<i>), as torch::pickle_save writes it but
/// without the JIT's type tags on dicts and lists (`torch.jit._pickle.restore_type_tag`), which
/// torch.load(weights_only=True), what torch's .pt2 loader tries first, refuses. Dicts and lists
/// come back untyped in C++; tensors as they were.
inline std::vector<char> pickle_bytes(const c10::IValue& v) {
  std::vector<char> pkl;
  torch::jit::Pickler pickler([&](const char* b, std::size_t n) { pkl.insert(pkl.end(), b, b + n); }, nullptr, nullptr,
                              nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(v);
  pickler.stop();
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* d, std::size_t n) {
    out.insert(out.end(), static_cast<const char*>(d), static_cast<const char*>(d) + n);
    return n;
  });
  const auto& tensors = pickler.tensorData();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto data = torch::jit::getWriteableTensorData(tensors[i]);
    w.writeRecord("data/" + std::to_string(i), data.data(), data.sizeInBytes());
  }
  w.writeRecord("data.pkl", pkl.data(), pkl.size());
  w.writeEndOfFile();
  return out;
}

/// The example inputs as torch.save'd `(args, kwargs)`, nested as `in_spec` says (constants
/// included); without a spec, the tensors as positional arguments.
inline c10::IValue example_inputs_ivalue(const std::vector<at::Tensor>& tensors, const std::optional<treespec>& in_spec) {
  c10::impl::GenericDict kwargs(c10::StringType::get(), c10::AnyType::get());
  if (!in_spec) {
    std::vector<c10::IValue> args;
    for (const auto& t : tensors) args.emplace_back(t.cpu());
    return c10::ivalue::Tuple::create({c10::ivalue::Tuple::create(std::move(args)), kwargs});
  }
  std::size_t next = 0;
  const auto build = [&](const auto& self, const treespec& s) -> c10::IValue {
    using K = treespec::kind;
    switch (s.type) {
      case K::leaf:
        if (next >= tensors.size()) throw error("xport.save.example_inputs", "the example inputs are fewer than the program's tensor inputs");
        return tensors[next++].cpu();
      case K::constant: return to_ivalue(s.value, c10::AnyType::get(), [](const value&) { return c10::IValue(); });
      case K::none: return c10::IValue();
      case K::node:  // C++ cannot make the Python type: its children, as a tuple
      case K::tuple: {
        std::vector<c10::IValue> es;
        for (const auto& c : s.children) es.push_back(self(self, c));
        return c10::ivalue::Tuple::create(std::move(es));
      }
      case K::list: {
        c10::impl::GenericList l(c10::AnyType::get());
        for (const auto& c : s.children) l.push_back(self(self, c));
        return l;
      }
      case K::dict: {
        c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
        for (std::size_t i = 0; i < s.children.size(); ++i) d.insert(s.keys[i], self(self, s.children[i]));
        return d;
      }
    }
    return c10::IValue();
  };
  const std::size_t n = in_spec->children.size(), k = std::min(in_spec->num_kwargs, n);
  std::vector<c10::IValue> args;
  for (std::size_t i = 0; i < n; ++i) {
    auto v = build(build, in_spec->children[i]);
    if (i < n - k) args.push_back(std::move(v));
    else kwargs.insert(serde::argument_name(*in_spec, i), std::move(v));
  }
  return c10::ivalue::Tuple::create({c10::ivalue::Tuple::create(std::move(args)), kwargs});
}

/// The tensors of a call `(args, kwargs)` (as torch.save'd example inputs hold it), in the order
/// of the program's inputs, `in_spec` (without one: the tensors of args, in order); what does
/// not fit the spec is a load_error naming `record`.
inline std::vector<at::Tensor> inputs_of_call(const c10::IValue& v, const std::optional<treespec>& in_spec,
                                              const std::string& record) {
  const auto fail = [&](const std::string& what) -> void { throw load_error("xport.load.sample_inputs", record + ": " + what); };
  if (!v.isTuple() || v.toTupleRef().elements().size() != 2 || !v.toTupleRef().elements()[1].isGenericDict())
    fail("expected a tuple (args, kwargs)");
  const auto& args = v.toTupleRef().elements()[0];
  const auto kwargs = v.toTupleRef().elements()[1].toGenericDict();
  std::vector<at::Tensor> out;
  if (!in_spec) {
    const auto visit = [&](const auto& self, const c10::IValue& x, int depth) -> void {
      if (depth > 32) fail("nested too deeply");
      if (x.isTensor()) out.push_back(x.toTensor());
      else if (x.isTuple())
        for (const auto& e : x.toTupleRef().elements()) self(self, e, depth + 1);
      else if (x.isList())
        for (const auto& e : x.toListRef()) self(self, e, depth + 1);
    };
    visit(visit, args, 0);
    return out;
  }
  // the spec's depth is bounded by the JSON nesting limit
  const auto take = [&](const auto& self, const treespec& s, const c10::IValue& x) -> void {
    using K = treespec::kind;
    switch (s.type) {
      case K::leaf:
        if (!x.isTensor()) fail("expected a tensor where the program takes one, got " + x.tagKind());
        out.push_back(x.toTensor());
        return;
      case K::constant:
      case K::none: return;
      case K::node:  // written by xport as a tuple of its children (a Python object does not unpickle here)
      case K::tuple:
      case K::list: {
        const auto elems = x.isTuple() ? x.toTupleRef().elements().vec() : x.isList() ? x.toListRef().vec() : std::vector<c10::IValue>{};
        if ((!x.isTuple() && !x.isList()) || elems.size() != s.children.size())
          fail("expected a " + (s.type == K::node ? s.short_type_name() + " (as a tuple)" : s.short_type_name()) + " of " +
               std::to_string(s.children.size()));
        for (std::size_t i = 0; i < elems.size(); ++i) self(self, s.children[i], elems[i]);
        return;
      }
      case K::dict: {
        if (!x.isGenericDict()) fail("expected a dict, got " + x.tagKind());
        const auto d = x.toGenericDict();
        for (std::size_t i = 0; i < s.children.size(); ++i) {
          const auto it = d.find(s.keys[i]);
          if (it == d.end()) fail("the dict has no key '" + s.keys[i] + "'");
          self(self, s.children[i], it->value());
        }
        return;
      }
    }
  };
  const std::size_t n = in_spec->children.size(), k = std::min(in_spec->num_kwargs, n);
  if (!args.isTuple() || args.toTupleRef().elements().size() != n - k)
    fail("expected " + std::to_string(n - k) + " positional argument(s)");
  for (std::size_t i = 0; i < n; ++i) {
    if (i < n - k) {
      take(take, in_spec->children[i], args.toTupleRef().elements()[i]);
      continue;
    }
    const auto key = serde::argument_name(*in_spec, i);
    const auto it = kwargs.find(key);
    if (it == kwargs.end()) fail("kwargs have no '" + key + "'");
    take(take, in_spec->children[i], it->value());
  }
  return out;
}

/// Example inputs from `torch.save((args, kwargs))` bytes (see inputs_of_call).
inline std::vector<at::Tensor> unpickle_inputs(const std::string& bytes, const std::string& record,
                                               const std::optional<treespec>& in_spec) {
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    // e.g. a dataclass input: C++ cannot rebuild a Python object
    throw load_error("xport.load.sample_inputs", record + ": " + first_line(e.what_without_backtrace()) +
                                                     " (load without load_options::example_inputs to skip them)");
  } catch (const std::exception& e) {
    throw load_error("xport.load.sample_inputs", record + ": " + first_line(e.what()));
  }
  return inputs_of_call(v, in_spec, record);
}

}  // namespace detail

namespace detail::serde {

// ---- weights ---------------------------------------------------------------------------------

/// Bytes a strided tensor spans in its storage (from element 0), or nullopt on overflow.
inline std::optional<std::uint64_t> span_bytes(const tensor_meta& m) {
  const std::uint64_t item = c10::elementSize(m.dtype);
  std::uint64_t last = static_cast<std::uint64_t>(m.storage_offset.hint());
  for (std::size_t i = 0; i < m.sizes.size(); ++i) {
    const auto n = static_cast<std::uint64_t>(m.sizes[i].hint());
    if (n == 0) return 0;
    std::uint64_t step = 0;
    if (__builtin_mul_overflow(n - 1, static_cast<std::uint64_t>(m.strides[i].hint()), &step) ||
        __builtin_add_overflow(last, step, &last))
      return std::nullopt;
  }
  std::uint64_t bytes = 0;
  if (__builtin_add_overflow(last, std::uint64_t{1}, &last) || __builtin_mul_overflow(last, item, &bytes)) return std::nullopt;
  return bytes;
}

/// The bytes of `storage` in host memory: the storage itself on the CPU, else one copy of the
/// whole storage (not of a view of it: the record must hold every element its views reach).
/// `copy` forces the copy on the CPU too (the path device storages take, tested without one).
inline at::Tensor host_bytes(const c10::Storage& storage, c10::Device device, bool copy = false) {
  const auto n = static_cast<std::int64_t>(storage.nbytes());
  at::Tensor bytes = at::empty({0}, at::TensorOptions().dtype(c10::kByte).device(device));
  bytes.set_(storage, 0, {n}, {1});
  return device.is_cpu() && !copy ? bytes : bytes.to(c10::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

/// Whether `t` holds a Python type C++ cannot make (Note [Pytree node types]): a node, or a dict
/// or list of a type of its own.
inline bool has_node_type(const treespec& t) {
  if (!t.type_name.empty()) return true;
  for (const auto& c : t.children)
    if (has_node_type(c)) return true;
  return false;
}

/// Set (per thread) by tests to send CPU storages through host_bytes' copy, the path a device's
/// storages take: the suite covers it on machines without one.
inline bool& force_host_copy() {
  thread_local bool on = false;
  return on;
}

/// Writes each storage once, whatever its device: tensors are keyed by their own storage (never
/// by a temporary host copy, whose address the next copy may reuse), so views of one storage,
/// tied weights among them, share one record, as torch writes them and reads them back.
struct payload_writer {
  caffe2::serialize::PyTorchStreamWriter& w;
  std::string dir, prefix;
  std::map<const c10::StorageImpl*, std::string> written;  ///< the tensor's own storage -> record
  std::size_t next = 0;
  bool copy_to_host = false;  ///< copy CPU storages too (tests of the device path)

  json add(const std::string& fqn, const at::Tensor& t, bool is_param) {
    if (t.layout() != c10::kStrided)
      throw error("xport.save.layout", "tensor '" + fqn + "' is not strided; only strided tensors can be saved");
    if (!t.has_storage())
      throw error("xport.save.storage", "tensor '" + fqn + "' on " + t.device().str() +
                                            " has no storage to write; move it to a device with memory first");
    const auto& storage = t.storage();
    auto it = written.find(storage.unsafeGetStorageImpl());
    if (it == written.end()) {
      const std::string name = prefix + std::to_string(next++);
      const at::Tensor bytes = host_bytes(storage, t.device(), copy_to_host);
      w.writeRecord(dir + name, bytes.data_ptr(), storage.nbytes());
      it = written.emplace(storage.unsafeGetStorageImpl(), name).first;
    }
    auto meta = tensor_meta::of(t);  // offset and strides into the storage, on the tensor's device
    meta.requires_grad = t.requires_grad();
    return {{"path_name", it->second}, {"is_param", is_param}, {"use_pickle", false}, {"tensor_meta", tensor_meta_json(meta)}};
  }
};

/// Writes each custom object once (`data/constants/custom_obj_<i>`), in its class's pickle form
/// (torch::class_'s def_pickle: torch._C._pickle_save, what torch.export.save writes).
struct object_writer {
  caffe2::serialize::PyTorchStreamWriter& w;
  std::map<const void*, std::string> written;  ///< the object -> its record
  std::size_t next = 0;

  json add(const std::string& fqn, const c10::IValue& obj) {
    auto it = written.find(obj.internalToPointer());
    if (it == written.end()) {
      std::vector<char> bytes;
      try {
        bytes = torch::jit::pickle_save(obj);
      } catch (const c10::Error& e) {
        throw error("xport.save.custom_obj", "custom object '" + fqn + "' (" + obj.type()->str() +
                                                 ") cannot be pickled: " + first_line(e.what_without_backtrace()) +
                                                 " (give its class __getstate__ / __setstate__: torch::class_<T>::def_pickle)");
      }
      const std::string name = "custom_obj_" + std::to_string(next++);
      w.writeRecord("data/constants/" + name, bytes.data(), bytes.size());
      it = written.emplace(obj.internalToPointer(), name).first;
    }
    return {{"path_name", it->second}, {"is_param", false}, {"use_pickle", true}, {"tensor_meta", nullptr}};
  }
};

/// Custom object `rec` (`data/constants/custom_obj_<i>`) as torch._C._pickle_load_obj reads it:
/// its class must be registered in this process.
inline c10::IValue read_custom_obj(const zip_index& zip, const std::string& rec, const at_path& entry) {
#if XPORT_TORCH_VERSION_AT_LEAST(2, 3)
  const auto bytes = zip.read(rec);
  try {
    return torch::jit::pickle_load_obj(bytes);
  } catch (const c10::Error& e) {
    entry.fail("cannot read the custom object in record '" + rec + "': " + first_line(e.what_without_backtrace()) +
               " (its class must be registered with torch::class_ in this process: link or dlopen the library that "
               "defines it before loading)");
  }
#else
  (void)zip;
  entry.fail("record '" + rec + "' holds a custom object, which xport reads with LibTorch 2.3 or newer");
#endif
}

/// Where read_payloads puts a record's bytes: fresh memory, or a view of the mapped file for
/// records aligned for it unless an fqn in `copy` (state the program writes) uses it.
struct payload_source {
  std::shared_ptr<const mapped_file> map;  ///< null: read every record into memory
  std::set<std::string> copy;
  std::optional<c10::Device> device;  ///< load_options::device: every tensor there, not where recorded

  [[nodiscard]] bool maps(const zip_record& r) const { return map && r.data_offset % 64 == 0; }
};

/// The fqns of the parameters and buffers the program of `g` and `sig` writes: a mutation output,
/// or (in the training IR) an in-place op on the tensor or on a view of it. Never mapped.
inline std::set<std::string> written_state(const graph& g, const graph_signature& sig) {
  std::set<std::string> out;
  for (const auto& spec : sig.output_specs)
    if ((spec.kind == output_kind::buffer_mutation || spec.kind == output_kind::parameter_mutation) && spec.target)
      out.insert(*spec.target);
  std::map<const void*, std::string> state_of;  // value -> the state tensor it aliases
  const auto phs = g.placeholders();
  for (std::size_t i = 0; i < phs.size() && i < sig.input_specs.size(); ++i) {
    const auto& spec = sig.input_specs[i];
    if ((spec.kind == input_kind::parameter || spec.kind == input_kind::buffer) && spec.target)
      state_of[phs[i].output(0).impl()] = *spec.target;
  }
  for (auto n : g.nodes()) {
    if (!n.is_call()) continue;
    const auto args = n.args();
    // batch_norm(input, weight, bias, running_mean, running_var, training, ...) writes the
    // statistics in training without saying so in its schema
    if (is_batch_norm_op(n.op().name) && args.size() > 5 && args[5].is_bool() && args[5].as_bool())
      for (std::size_t i : {3, 4})
        args[i].for_each_value([&](const value& v) {
          if (const auto it = state_of.find(v.impl()); it != state_of.end()) out.insert(it->second);
        });
    if (!(n.op().is_mutable || n.op().is_view)) continue;
    const auto& params = n.op().schema().arguments();
    for (std::size_t i = 0; i < args.size() && i < params.size(); ++i) {
      const auto* alias = params[i].alias_info();
      if (!alias) continue;
      args[i].for_each_value([&](const value& v) {
        const auto it = state_of.find(v.impl());
        if (it == state_of.end()) return;
        const std::string fqn = it->second;
        if (alias->isWrite()) out.insert(fqn);
        for (const auto& r : n.outputs()) state_of[r.impl()] = fqn;  // a view or the written tensor
      });
    }
  }
  return out;
}

/// The bytes of record `rec` as a flat byte tensor: a view of the mapping or a fresh copy.
inline at::Tensor record_bytes(const zip_index& zip, const zip_record& r, const std::string& rec, bool mapped,
                               const payload_source& source) {
  if (mapped)
    return at::empty({0}, at::TensorOptions().dtype(c10::kByte))
        .set_(mapped_storage(source.map, r.data_offset, r.size), 0, {static_cast<std::int64_t>(r.size)}, {1});
  at::Tensor bytes = at::empty({static_cast<std::int64_t>(r.size)}, at::TensorOptions().dtype(c10::kByte));
  zip.read_exact(r.data_offset, bytes.data_ptr(), static_cast<std::size_t>(r.size), rec);
  return bytes;
}

/// A record's bytes on `device` (where its tensor was recorded, or load_options::device); a
/// device this process cannot use is a load_error that says how to load elsewhere.
inline at::Tensor to_device(const at::Tensor& bytes, c10::Device device, const at_path& entry) {
  try {
    return bytes.to(device);
  } catch (const c10::Error& e) {
    throw load_error("xport.load.device", entry.record + ": " + entry.path + ".tensor_meta.device: the tensor was saved on " +
                                              device.str() + ", which this process cannot use (" +
                                              first_line(e.what_without_backtrace()) +
                                              "); load it elsewhere with load_options::device (torch's map_location), "
                                              "e.g. load_options{.device = at::kCPU}");
  }
}

/// What the programs of one archive share as they load (serde/package.hpp): the storages read so
/// far, so that a record two programs name is one storage after the load as it was before the
/// save, and, when mapping, the records any of them writes (read into memory, never mapped).
struct shared_payloads {
  std::map<std::string, at::Tensor> storages;  ///< "<record>@<device>" -> flat bytes
  std::set<std::string> written;               ///< records some program writes
};

/// The records under `dir` that the entries of `config` for the fqns in `fqns` name.
inline std::set<std::string> records_of(const json& config, const std::string& dir, const std::set<std::string>& fqns) {
  std::set<std::string> out;
  for (auto it = config.begin(); it != config.end(); ++it)
    if (fqns.count(it.key()) && it.value().is_object() && it.value().contains("path_name") && it.value()["path_name"].is_string())
      out.insert(dir + it.value()["path_name"].get<std::string>());
  return out;
}

/// Reads `{"config": {fqn: PayloadMeta}}` and the records it names into `out`; with `shared`, the
/// storages read for the archive's other programs are reused.
inline void read_payloads(const zip_index& zip, const std::string& dir, const std::string& config_name,
                          const payload_source& source, tensor_dict& out, shared_payloads* shared = nullptr,
                          std::map<std::string, c10::IValue>* objects = nullptr) {
  const std::string record = dir + config_name;
  if (!zip.find(record)) return;
  const auto doc = parse(zip.read(record), record);
  const at_path root{doc, "", record};
  const auto& config = root["config"].object();
  shared_payloads own;
  auto& storages = (shared ? *shared : own).storages;
  // records of state the program (or, in a package, any program) writes: read, not mapped
  std::set<std::string> copied = source.map ? records_of(config, dir, source.copy) : std::set<std::string>{};
  if (shared) copied.insert(shared->written.begin(), shared->written.end());
  for (auto it = config.begin(); it != config.end(); ++it) {
    const at_path entry{it.value(), "config." + it.key(), record};
    const std::string fqn = it.key();
    const auto path = entry["path_name"].str();
    if (entry["use_pickle"].boolean()) {
      if (!objects || path.rfind("custom_obj_", 0) != 0)
        entry.fail("pickled payloads other than custom objects are not read by xport (pickled tensors, tensor subclasses, opaque Python objects)");
      if (!zip.find(dir + path)) entry["path_name"].fail("names record '" + dir + path + "', which is missing from the archive");
      (*objects)[fqn] = read_custom_obj(zip, dir + path, entry);
      continue;
    }
    const auto meta_j = entry.get("tensor_meta");
    if (!meta_j) entry.fail("missing tensor_meta");
    const auto meta = tensor_meta_of(*meta_j);
    if (meta.layout != c10::kStrided) entry.fail("only strided tensors are supported");
    if (meta.strides.size() != meta.sizes.size()) entry.fail("needs one stride per size");
    const std::string rec = dir + path;
    const auto* r = zip.find(rec);
    if (!r) entry["path_name"].fail("names record '" + rec + "', which is missing from the archive");
    const auto need = span_bytes(meta);
    if (!need) entry.fail("sizes and strides overflow");
    if (*need > r->size)
      entry.fail(std::string(c10::toString(meta.dtype)) + " tensor of " + meta.annotation() + " needs " +
                 std::to_string(*need) + " bytes but record '" + rec + "' holds " + std::to_string(r->size));
    if (meta.requires_grad && !c10::isFloatingType(meta.dtype) && !c10::isComplexType(meta.dtype))
      entry["tensor_meta"]["requires_grad"].fail(std::string("a ") + c10::toString(meta.dtype) +
                                                 " tensor cannot require grad (only floating-point and complex tensors can)");
    // Every LibTorch call on the way (allocation, set_, requires_grad_) is checked above; one
    // that still refuses the entry is reported at it, never as a raw c10::Error.
    at::Tensor t;
    try {
      const c10::Device device = source.device.value_or(meta.device);
      auto st = storages.find(rec + "@" + device.str());
      if (st == storages.end()) {  // each record read once, and moved to each device once
        auto host = storages.find(rec + "@cpu");
        if (host == storages.end())
          host = storages.emplace(rec + "@cpu", record_bytes(zip, *r, rec, source.maps(*r) && !copied.count(rec), source)).first;
        st = device.is_cpu() ? host : storages.emplace(rec + "@" + device.str(), to_device(host->second, device, entry)).first;
      }
      t = at::empty({0}, at::TensorOptions().dtype(meta.dtype).device(device));
      t.set_(st->second.storage(), meta.storage_offset.hint(), meta.size_hints(), meta.stride_hints());
      if (meta.requires_grad) t.requires_grad_(true);
    } catch (const c10::Error& e) {
      entry.fail("LibTorch cannot make this " + std::string(c10::toString(meta.dtype)) + " tensor of " +
                 meta.annotation() + " from record '" + rec + "': " + first_line(e.what_without_backtrace()));
    }
    (void)entry["is_param"].boolean();  // required by the schema; the signature says what is a parameter
    out.set(fqn, std::move(t));
  }
}

}  // namespace detail::serde

// ---- the API ---------------------------------------------------------------------------------

namespace detail::serde {

/// Writes the records of program `p` under model name `name` (`models/<name>.json`, its weights
/// and constants configs, `data/sample_inputs/<name>.pt`), its storages through `weights` and
/// `constants`: one writer for every program of an archive writes a storage they share once.
/// `doc` is the program's JSON, made before anything is written (errors leave no file).
inline void write_model(caffe2::serialize::PyTorchStreamWriter& w, const exported_program& p, const std::string& doc,
                        const std::string& name, payload_writer& weights, payload_writer& constants, object_writer& objects,
                        bool example_inputs) {
  std::unordered_set<std::string> params;
  for (const auto& f : p.signature().parameters()) params.insert(f);
  json wconfig = json::object();
  for (const auto& [fqn, t] : p.state_dict()) wconfig[fqn] = weights.add(fqn, t, params.count(fqn) > 0);
  const std::string wtext = json{{"config", std::move(wconfig)}}.dump();
  w.writeRecord("data/weights/" + name + "_weights_config.json", wtext.data(), wtext.size());
  json cconfig = json::object();
  for (const auto& [fqn, t] : p.constants()) cconfig[fqn] = constants.add(fqn, t, false);
  for (const auto& [fqn, obj] : p.custom_objs()) cconfig[fqn] = objects.add(fqn, obj);
  const std::string ctext = json{{"config", std::move(cconfig)}}.dump();
  w.writeRecord("data/constants/" + name + "_constants_config.json", ctext.data(), ctext.size());
  w.writeRecord("models/" + name + ".json", doc.data(), doc.size());
  // always there: torch's loader reads it unconditionally (empty means no example inputs)
  // (torch checks them against the in_spec on load: with a Python type in it, which C++ cannot
  // pickle, the record stays empty)
  std::vector<char> inputs;
  if (example_inputs && p.example_inputs() && !(p.in_spec() && has_node_type(*p.in_spec())))
    inputs = detail::pickle_bytes(detail::example_inputs_ivalue(*p.example_inputs(), p.in_spec()));
  w.writeRecord("data/sample_inputs/" + name + ".pt", inputs.data(), inputs.size());
}

/// Writes the records every archive starts with.
inline void write_archive_header(caffe2::serialize::PyTorchStreamWriter& w) {
  w.writeRecord("archive_format", archive_format.data(), archive_format.size());
  w.writeRecord("archive_version", archive_version.data(), archive_version.size());
}

}  // namespace detail::serde

/// Writes `p` as a .pt2 archive through `writer(bytes, n)` (returns bytes written).
inline void save(const exported_program& p, const std::function<std::size_t(const void*, std::size_t)>& writer,
                 const save_options& options = {}) {
  namespace s = detail::serde;
  c10::NoGradGuard no_grad;
  const std::string doc = s::program_json(p).dump();  // before anything is written: errors leave no file
  caffe2::serialize::PyTorchStreamWriter w(writer);
  s::write_archive_header(w);
  s::payload_writer weights{w, "data/weights/", "weight_", {}, 0, s::force_host_copy()};
  s::payload_writer constants{w, "data/constants/", "tensor_", {}, 0, s::force_host_copy()};
  s::object_writer objects{w, {}, 0};
  s::write_model(w, p, doc, options.model_name, weights, constants, objects, options.example_inputs);
  w.writeEndOfFile();
}

namespace detail::serde {
using byte_writer = std::function<std::size_t(const void*, std::size_t)>;

/// Calls `write(writer)` with a writer into `path`: the bytes go next to it and are renamed over
/// it at the end, so a failed save leaves an existing file as it was.
inline void write_file(const std::string& path, const std::function<void(const byte_writer&)>& write) {
  const std::string tmp = path + ".xport-partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw error("xport.save.open", "cannot open '" + tmp + "' for writing");
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  try {
    // (the zip writer passes a null pointer for empty writes, which fwrite may not take)
    write([&](const void* data, std::size_t n) { return n == 0 ? std::size_t{0} : std::fwrite(data, 1, n, f); });
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw error("xport.save.write", "writing '" + path + "' failed");
  }
}
}  // namespace detail::serde

/// Writes `p` to `path` as a .pt2 archive.
inline void save(const exported_program& p, const std::string& path, const save_options& options = {}) {
  detail::serde::write_file(path, [&](const detail::serde::byte_writer& w) { save(p, w, options); });
}

/// Writes `p` to a stream.
inline void save(const exported_program& p, std::ostream& out, const save_options& options = {}) {
  save(p, [&](const void* data, std::size_t n) {
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    return out ? n : std::size_t{0};
  }, options);
}

/// The archive as bytes.
inline std::string save_to_string(const exported_program& p, const save_options& options = {}) {
  std::string out;
  save(p, [&](const void* data, std::size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  }, options);
  return out;
}

/// Reads a program from an archive behind `in`; throws load_error naming the record and the
/// problem for any file that is not a valid archive of a program this LibTorch can run.
namespace detail::serde {
inline exported_program load_archive(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in,
                                     std::shared_ptr<const mapped_file> map, const load_options& options,
                                     std::string& stage, shared_payloads* shared = nullptr);

/// load_archive with every exception that leaves it a load_error: the readers check what they
/// read, and anything LibTorch still refuses (building the graph, its tensors, the sample inputs)
/// is reported with the part of the archive being read.
inline exported_program load_checked(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in,
                                     std::shared_ptr<const mapped_file> map, const load_options& options,
                                     shared_payloads* shared = nullptr) {
  std::string stage = "the archive";
  try {
    return load_archive(std::move(in), std::move(map), options, stage, shared);
  } catch (const load_error&) {
    throw;
  } catch (const error& e) {
    throw load_error("xport.load.refused", stage + ": " + e.what());
  } catch (const c10::Error& e) {
    throw load_error("xport.load.refused", stage + ": LibTorch refused it: " + detail::first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw load_error("xport.load.refused", stage + ": " + detail::first_line(e.what()));
  }
}
}  // namespace detail::serde

inline exported_program load(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in, const load_options& options = {}) {
  if (options.mmap)
    throw load_error("xport.load.mmap", "load_options::mmap maps a file: call load(path, options) with the file's "
                                        "path (a reader or a stream is read into memory)");
  return detail::serde::load_checked(std::move(in), nullptr, options);
}

namespace detail::serde {

/// LibTorch's reader of the archive behind `in`, which checks the archive as a whole (and CRCs of what it reads).
inline std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_stream_reader(
    const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& in) {
  try {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(in);
  } catch (const c10::Error& e) {
    throw load_error("xport.load.bad_zip", std::string("not a valid archive: ") + e.what_without_backtrace());
  }
}

/// The bytes of record `name`, which the index must list.
inline std::string record_text(const zip_index& zip, caffe2::serialize::PyTorchStreamReader& reader,
                               const std::string& name) {
  (void)zip.at(name);
  try {
    auto [ptr, size] = reader.getRecord(name);
    return std::string(static_cast<const char*>(ptr.get()), size);
  } catch (const c10::Error& e) {
    throw load_error("xport.load.bad_record", "record '" + name + "': " + e.what_without_backtrace());
  }
}

/// Fails unless the archive's archive_format and archive_version records are the ones xport reads.
inline void check_archive_version(const zip_index& zip, caffe2::serialize::PyTorchStreamReader& reader) {
  const auto format = record_text(zip, reader, "archive_format");
  if (format != archive_format)
    throw load_error("xport.load.format", "record 'archive_format' says '" + format.substr(0, 64) + "', not 'pt2'");
  const auto version = record_text(zip, reader, "archive_version");
  if (version != archive_version)
    throw load_error("xport.load.version", "archive version '" + version.substr(0, 64) +
                                               "' is not the PT2 archive version this xport reads (0)");
}

/// Fails unless the archive has the record `model`, listing the models it has.
inline void check_model_record(const zip_index& zip, const std::string& model) {
  if (zip.find(model)) return;
  std::string models;
  for (const auto& [name, r] : zip.records())
    if (name.rfind("models/", 0) == 0) models += (models.empty() ? "" : ", ") + name;
  throw load_error("xport.load.missing_record", "record '" + model + "' is missing" +
                                                    (models.empty() ? std::string(" (the archive has no models/)") : " (the archive has: " + models + ")"));
}

/// Fails unless every lifted input of `sig` has its tensor in `state` or `constants`.
inline void check_lifted_tensors(const graph_signature& sig, const tensor_dict& state, const tensor_dict& constants,
                                 const std::map<std::string, c10::IValue>& objects, const load_options& options) {
  for (const auto& spec : sig.input_specs) {
    if (spec.kind == input_kind::user_input || spec.kind == input_kind::token) continue;
    if (spec.kind == input_kind::custom_obj) {
      const auto it = spec.target ? objects.find(*spec.target) : objects.end();
      if (it == objects.end())
        throw load_error("xport.load.missing_tensor", "data/constants/" + options.model_name + "_constants_config.json: no custom object for '" +
                                                          spec.target.value_or("") + "' (input '" + spec.arg.name + "')");
      if (it->second.type()->str() != spec.arg.class_fqn)
        throw load_error("xport.load.custom_obj", "custom object '" + *spec.target + "' is a " + it->second.type()->str() +
                                                      ", but input '" + spec.arg.name + "' takes a " + spec.arg.class_fqn);
      continue;
    }
    const bool in_state = spec.kind == input_kind::parameter || (spec.kind == input_kind::buffer && spec.persistent.value_or(true));
    if (!spec.target) continue;
    if (!(in_state ? state : constants).contains(*spec.target))
      throw load_error("xport.load.missing_tensor", std::string(in_state ? "data/weights/" : "data/constants/") +
                                                        options.model_name + (in_state ? "_weights_config.json" : "_constants_config.json") +
                                                        ": no tensor for " + std::string(to_string(spec.kind)) + " '" +
                                                        *spec.target + "' (input '" + spec.arg.name + "')");
  }
}

/// Sets the example inputs of `p` from the archive's sample inputs record, when it has a non-empty one.
inline void read_sample_inputs(const zip_index& zip, caffe2::serialize::PyTorchStreamReader& reader,
                               const load_options& options, std::string& stage, exported_program& p) {
  const std::string rec = "data/sample_inputs/" + options.model_name + ".pt";
  stage = "record '" + rec + "'";
  if (const auto* r = zip.find(rec); r && r->size > 0) {
    auto inputs = detail::unpickle_inputs(record_text(zip, reader, rec), rec, p.in_spec());
    std::size_t want = 0;
    for (const auto& s : p.signature().input_specs)
      want += s.kind == input_kind::user_input && s.arg.type != argument_spec::kind::constant;
    if (inputs.size() != want)
      throw load_error("xport.load.sample_inputs", rec + ": holds " + std::to_string(inputs.size()) +
                                                       " tensor(s), the program takes " + std::to_string(want));
    p.set_example_inputs(std::move(inputs));
  }
}

}  // namespace detail::serde

inline exported_program detail::serde::load_archive(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in,
                                                    std::shared_ptr<const mapped_file> map,
                                                    const load_options& options, std::string& stage,
                                                    shared_payloads* shared) {
  namespace s = detail::serde;
  const detail::zip_index zip(*in);
  const auto reader = s::open_stream_reader(in);
  s::check_archive_version(zip, *reader);
  const std::string model = "models/" + options.model_name + ".json";
  s::check_model_record(zip, model);
  stage = "record '" + model + "'";
  const auto doc = s::parse(s::record_text(zip, *reader, model), model);
  auto parts = s::program_of(doc, model);
  tensor_dict state, constants;
  auto copy = map ? s::written_state(parts.g, parts.sig) : std::set<std::string>{};
  const s::payload_source source{std::move(map), std::move(copy), options.device};
  stage = "data/weights/" + options.model_name + "_weights_config.json";
  s::read_payloads(zip, "data/weights/", options.model_name + "_weights_config.json", source, state, shared);
  stage = "data/constants/" + options.model_name + "_constants_config.json";
  std::map<std::string, c10::IValue> objects;
  s::read_payloads(zip, "data/constants/", options.model_name + "_constants_config.json", source, constants, shared, &objects);
  stage = "record '" + model + "'";
  s::check_lifted_tensors(parts.sig, state, constants, objects, options);
  exported_program p(std::move(parts.g), std::move(parts.sig), std::move(state), std::move(constants),
                     std::move(parts.ranges), parts.dialect);
  p.custom_objs_mut() = std::move(objects);
  p.set_call_spec(std::move(parts.in_spec), std::move(parts.out_spec));
  p.set_module_types(std::move(parts.module_types));
  for (auto& [fqn, sig] : parts.module_signatures) p.set_module_call_signature(fqn, std::move(sig));
  if (options.example_inputs) s::read_sample_inputs(zip, *reader, options, stage, p);
  if (options.device) p.to(*options.device);  // the graph's devices (the tensors are there already)
  stage = "record '" + model + "'";
  if (options.verify) {
    try {
      verify(p);
    } catch (const verify_error& e) {
      throw load_error("xport.load.invalid_program", model + ": the program does not verify: " + e.what());
    }
  }
  return p;
}

namespace detail::serde {
/// A .pt2 file opened for reading: mapped (`map` set) or read through LibTorch's file adapter.
struct opened_file {
  std::shared_ptr<caffe2::serialize::ReadAdapterInterface> in;
  std::shared_ptr<const mapped_file> map;
};

inline opened_file open_file(const std::string& path, bool mmap) {
  if (mmap) {
    auto map = std::make_shared<const mapped_file>(path);
    auto in = std::make_shared<caffe2::serialize::MemoryReadAdapter>(map->data(), static_cast<off_t>(map->size()));
    return {std::move(in), std::move(map)};
  }
  try {
    return {std::make_shared<caffe2::serialize::FileAdapter>(path), nullptr};
  } catch (const c10::Error&) {
    throw load_error("xport.load.open", "cannot open '" + path + "' for reading");
  }
}
}  // namespace detail::serde

/// Reads a program from a .pt2 file (maps it with `options.mmap`).
inline exported_program load(const std::string& path, const load_options& options = {}) {
  auto file = detail::serde::open_file(path, options.mmap);
  return detail::serde::load_checked(std::move(file.in), std::move(file.map), options);
}

/// Reads a program from bytes in memory (copied into the program's tensors; `data` may go).
inline exported_program load_from_memory(const void* data, std::size_t size, const load_options& options = {}) {
  return load(std::make_shared<caffe2::serialize::MemoryReadAdapter>(data, static_cast<off_t>(size)), options);
}

/// Reads a program from a stream (read whole).
inline exported_program load(std::istream& in, const load_options& options = {}) {
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return load_from_memory(bytes.data(), bytes.size(), options);
}

XPORT_END_NAMESPACE
