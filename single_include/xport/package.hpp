// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
#pragma once

#include <xport/xport.hpp>
// xport/package.hpp: several programs in one .pt2 archive, an opt-in entry beside the umbrella
// header, in the layout torch's package_pt2 / load_pt2 write and read (serde/package.hpp):
//
//   auto fwd = xport::export_program(net, std::tuple{x});
//   auto enc = xport::export_method(net, [](CodecImpl& m, const at::Tensor& x) { return m.encode(x); },
//                                   std::tuple{x});
//   xport::save({{"forward", fwd}, {"encode", enc}}, "codec.pt2");   // one storage per weight
//   auto pkg = xport::load_package("codec.pt2");                      // pkg.at("encode"), ...
//   xport::list_models("codec.pt2");                                  // {"encode", "forward"}
//
//   auto pkg = xport::export_methods(net, xport::method("forward", std::tuple{x}),  // several at once,
//                                    xport::method("encode", encode_fn, std::tuple{x}));  // one state

#include <string>       // std::string
#include <tuple>        // std::tuple
#include <type_traits>  // std::decay_t
#include <utility>      // std::forward
#include <vector>       // std::vector

// #include <xport/xport.hpp>
// #include <xport/serde/package.hpp>
// xport/serde/package.hpp: several programs in one .pt2 archive, by name, in the layout torch's
// `package_pt2` writes and `load_pt2` reads (torch.export.pt2_archive):
//
//   models/<name>.json, data/weights/<name>_weights_config.json,
//   data/constants/<name>_constants_config.json, data/sample_inputs/<name>.pt   one set per program
//   data/weights/weight_<i>, data/constants/tensor_<i>    one record per storage, written once
//                                                          for every program that holds it
//   extra/<file>                                           the package's extra files
//   anything else (data/aotinductor/, executorch/, ...)    kept byte for byte, written again on a re-save
//
// Methods of one model share their parameters (export each entry point of one torch::nn module):
// a storage two programs hold is one record in the archive and one storage again after
// load_package, so a buffer one program writes is what the other reads, as between a TorchScript
// module's methods. torch 2.13's load_pt2 reads such an archive too (it gives each program its
// own copy).

#include <functional>   // std::reference_wrapper
#include <map>          // std::map
#include <memory>       // std::shared_ptr
#include <optional>     // std::optional
#include <string>       // std::string
#include <utility>      // std::pair
#include <vector>       // std::vector

// #include <xport/config.hpp>
// #include <xport/serde/pt2.hpp>

XPORT_BEGIN_NAMESPACE

/// Programs by name, to save into one archive; references, so nothing is copied:
/// `xport::save({{"forward", fwd}, {"encode", enc}}, "model.pt2")`.
using program_refs = std::map<std::string, std::reference_wrapper<const exported_program>>;

class package_module;  // serde/package_module.hpp (include <xport/train.hpp>)

/// What one archive holds: its programs by model name, its extra files, and the records xport
/// does not read (AOTInductor's and ExecuTorch's), kept so a re-save writes them again.
struct package {
  package() = default;  // (not an aggregate: a braced list of programs is a program_refs)

  std::map<std::string, exported_program> programs;
  /// `extra/<name>` records (torch's `extra_files`; torch reads them back as UTF-8 text).
  std::map<std::string, std::string> extra_files;
  /// Every other record but the archive's own (`archive_format`, `.data/...`), by name.
  std::map<std::string, std::string> other_records;

  /// The program named `name`; an error that lists the package's programs otherwise.
  [[nodiscard]] const exported_program& at(const std::string& name) const;
  [[nodiscard]] exported_program& at(const std::string& name) {
    return const_cast<exported_program&>(static_cast<const package&>(*this).at(name));
  }
  /// The programs' names, in order.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, p] : programs) out.push_back(name);
    return out;
  }
  /// The programs as one torch::nn::Module, its methods by name, one state that torch::optim
  /// trains (serde/package_module.hpp; include <xport/train.hpp>).
  template <class Module = package_module>
  [[nodiscard]] std::shared_ptr<Module> module() const {
    return std::make_shared<Module>(*this);
  }
};

struct package_save_options {
  /// Write each program's example inputs into `data/sample_inputs/<name>.pt` (see save_options).
  bool example_inputs = false;
};

namespace detail::serde {

/// A program's name read as a method and a mode: `forward.train` is method `forward` exported in
/// train mode, `forward.eval` in eval mode; any other name is a method of its own, either mode.
inline std::pair<std::string, std::optional<bool>> method_of(const std::string& name) {
  for (const bool training : {true, false}) {
    const std::string suffix = training ? ".train" : ".eval";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return {name.substr(0, name.size() - suffix.size()), training};
  }
  return {name, std::nullopt};
}

/// Fails unless `name` can be a file name in the archive (a model name, an extra file's name).
inline void check_record_name(const std::string& name, const std::string& what, bool allow_slash) {
  const auto bad = [&](const std::string& why) {
    throw error("xport.save.name", what + " '" + name + "' " + why);
  };
  if (name.empty()) bad("is empty: name it");
  if (name.size() > 200) bad("is longer than 200 characters");
  if (!allow_slash && (name.find('/') != std::string::npos || name.find('\\') != std::string::npos))
    bad("has a '/' or '\\\\': it names a file in the archive's models/ folder (torch reads models/<name>.json); "
        "use a name such as 'forward' or 'encode'");
  if (name.front() == '/' || name.front() == '.' || name.find("..") != std::string::npos ||
      name.find('\0') != std::string::npos)
    bad("must not start with '/' or '.' nor hold '..' or a NUL: it becomes a file name in the archive");
}

/// Whether xport writes `name` itself when it saves a package (so a kept record may not take it).
inline bool written_by_package(const std::string& name) {
  for (const char* prefix : {"models/", "data/weights/", "data/constants/", "data/sample_inputs/", "extra/", ".data/"})
    if (name.rfind(prefix, 0) == 0) return true;
  return name == "archive_format" || name == "archive_version" || name == "byteorder" || name == "version";
}

/// Writes the programs, the extra files and the kept records through `writer`; every name is
/// checked and every program turned into JSON before a byte is written.
inline void write_package(const program_refs& programs, const std::map<std::string, std::string>& extra_files,
                          const std::map<std::string, std::string>& other_records, const byte_writer& writer,
                          bool example_inputs) {
  if (programs.empty() && extra_files.empty() && other_records.empty())
    throw error("xport.save.empty_package", "the package has no programs, extra files or records: nothing to save");
  std::map<std::string, std::string> docs;
  c10::NoGradGuard no_grad;
  for (const auto& [name, p] : programs) {
    check_record_name(name, "model name", false);
    docs[name] = program_json(p.get()).dump();
  }
  for (const auto& [name, bytes] : extra_files) check_record_name(name, "extra file", true);
  for (const auto& [name, bytes] : other_records) {
    check_record_name(name, "record", true);
    if (written_by_package(name))
      throw error("xport.save.name", "record '" + name + "' is one the package writes itself (a program's, an extra "
                                     "file's or the archive's): keep only records xport does not read");
  }
  caffe2::serialize::PyTorchStreamWriter w(writer);
  write_archive_header(w);
  payload_writer weights{w, "data/weights/", "weight_", {}, 0, force_host_copy()};
  payload_writer constants{w, "data/constants/", "tensor_", {}, 0, force_host_copy()};
  object_writer objects{w, {}, 0};
  for (const auto& [name, p] : programs) write_model(w, p.get(), docs[name], name, weights, constants, objects, example_inputs);
  for (const auto& [name, bytes] : extra_files) w.writeRecord("extra/" + name, bytes.data(), bytes.size());
  for (const auto& [name, bytes] : other_records) w.writeRecord(name, bytes.data(), bytes.size());
  w.writeEndOfFile();
}

/// The model names of the archive's `models/<name>.json` records, in order.
inline std::vector<std::string> model_names(const zip_index& zip) {
  std::vector<std::string> out;
  const std::string prefix = "models/", suffix = ".json";
  for (const auto& [name, r] : zip.records())
    if (name.size() > prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
  return out;
}

/// The records the programs of `zip` write (to be read into memory, not mapped): for each model,
/// its written state's records.
inline std::set<std::string> written_records(const zip_index& zip, const std::vector<std::string>& models) {
  std::set<std::string> out;
  for (const auto& name : models) {
    const std::string model = "models/" + name + ".json";
    const auto parts = program_of(parse(zip.read(model), model), model);
    const auto fqns = written_state(parts.g, parts.sig);
    for (const auto& [dir, config] : {std::pair<std::string, std::string>{"data/weights/", name + "_weights_config.json"},
                                      {"data/constants/", name + "_constants_config.json"}}) {
      if (!zip.find(dir + config)) continue;
      const auto doc = parse(zip.read(dir + config), dir + config);
      if (!doc.is_object() || !doc.contains("config") || !doc["config"].is_object()) continue;  // read_payloads says why
      const auto records = records_of(doc["config"], dir, fqns);
      out.insert(records.begin(), records.end());
    }
  }
  return out;
}

/// Reads every program, extra file and kept record of the archive behind `file`.
inline package load_package(const opened_file& file, const load_options& options) {
  const zip_index zip(*file.in);
  const auto reader = open_stream_reader(file.in);
  check_archive_version(zip, *reader);
  const auto models = model_names(zip);
  shared_payloads shared;
  if (file.map) {
    try {
      shared.written = written_records(zip, models);
    } catch (const std::exception&) {  // the program's own load below reports it, typed, with its stage
    }
  }
  package out;
  for (const auto& name : models) {
    auto opts = options;
    opts.model_name = name;
    out.programs.emplace(name, load_checked(file.in, file.map, opts, &shared));
  }
  for (const auto& [name, r] : zip.records()) {
    if (name.rfind("extra/", 0) == 0 && name.size() > 6) out.extra_files[name.substr(6)] = record_text(zip, *reader, name);
    else if (!written_by_package(name)) out.other_records[name] = record_text(zip, *reader, name);
  }
  return out;
}

}  // namespace detail::serde

inline const exported_program& package::at(const std::string& name) const {
  const auto it = programs.find(name);
  if (it == programs.end())
    throw error("xport.package.name", "the package has no program '" + name + "'; it has " +
                                          detail::quoted_list(names()));
  return it->second;
}

/// Writes several programs into one archive through `writer(bytes, n)`, in torch's package_pt2
/// layout: `models/<name>.json` each, a storage they share written once.
inline void save(const program_refs& programs, const detail::serde::byte_writer& writer,
                 const package_save_options& options = {}) {
  detail::serde::write_package(programs, {}, {}, writer, options.example_inputs);
}

/// Writes several programs into one archive at `path` (a failed save leaves an existing file as it was).
inline void save(const program_refs& programs, const std::string& path, const package_save_options& options = {}) {
  detail::serde::write_file(path, [&](const detail::serde::byte_writer& w) { save(programs, w, options); });
}

/// Writes a package (its programs, extra files and kept records) to `path`.
inline void save(const package& pkg, const std::string& path, const package_save_options& options = {}) {
  program_refs refs;
  for (const auto& [name, p] : pkg.programs) refs.emplace(name, std::cref(p));
  detail::serde::write_file(path, [&](const detail::serde::byte_writer& w) {
    detail::serde::write_package(refs, pkg.extra_files, pkg.other_records, w, options.example_inputs);
  });
}

/// Reads every program of a .pt2 archive by name, with its extra files and the records xport does
/// not read (an archive torch.export.save wrote holds one program, "model"). `options` apply to
/// each program (`model_name` is not used); with `mmap`, the state any program writes is read
/// into memory, the rest mapped.
inline package load_package(const std::string& path, const load_options& options = {}) {
  return detail::serde::load_package(detail::serde::open_file(path, options.mmap), options);
}

/// load_package from bytes in memory (copied into the programs' tensors; `data` may go).
inline package load_package_from_memory(const void* data, std::size_t size, const load_options& options = {}) {
  if (options.mmap)
    throw load_error("xport.load.mmap", "load_options::mmap maps a file: call load_package(path, options) with the "
                                        "file's path");
  auto in = std::make_shared<caffe2::serialize::MemoryReadAdapter>(data, static_cast<off_t>(size));
  return detail::serde::load_package({std::move(in), nullptr}, options);
}

/// The names of the programs in a .pt2 archive (`models/<name>.json`), in order, without loading them.
inline std::vector<std::string> list_models(const std::string& path) {
  const auto file = detail::serde::open_file(path, false);
  const detail::zip_index zip(*file.in);
  detail::serde::check_archive_version(zip, *detail::serde::open_stream_reader(file.in));
  return detail::serde::model_names(zip);
}

XPORT_END_NAMESPACE

XPORT_BEGIN_NAMESPACE

namespace detail {
/// A torch::nn module seen through one of its methods: export_program lifts the module's
/// parameters and buffers under their names and calls `fn(module, args...)` for forward.
template <class M, class Fn>
struct method_view {
  M& m;
  Fn& fn;
  [[nodiscard]] auto& impl() const { return module_impl(m); }
  auto named_parameters(bool recurse) const { return impl().named_parameters(recurse); }
  auto named_buffers(bool recurse) const { return impl().named_buffers(recurse); }
  auto named_modules(const std::string& prefix, bool include_self) const { return impl().named_modules(prefix, include_self); }
  [[nodiscard]] std::string name() const { return impl().name(); }
  template <class... A>
  decltype(auto) forward(A&&... a) const {
    return fn(impl(), std::forward<A>(a)...);
  }
};
}  // namespace detail

/// Exports one method of a torch::nn module (any entry point, `fn(module, args...)`), its
/// parameters and buffers lifted under their names as for forward: the programs of one module's
/// methods hold the same tensors, so a package (save(program_refs, path)) writes them once and
/// load_package gives them back shared, as a TorchScript module's methods share them.
template <class Policy = non_strict, class M, class Fn, class... Args>
exported_program export_method(M& module, Fn&& fn, const std::tuple<Args...>& args, const export_options& opts = {}) {
  static_assert(detail::module_like<M>, "xport::export_method: the first argument is a torch::nn module");
  static_assert(std::is_same_v<Policy, non_strict>,
                "xport::export_method: torch::nn modules run on at::Tensor; export them with the non_strict policy");
  detail::method_view<M, std::remove_reference_t<Fn>> view{module, fn};
  return export_program<Policy>(view, args, opts);
}

/// One entry point for export_methods: its name in the package, `fn(module, args...)`, example
/// arguments and options (dynamic shapes...). Made by xport::method.
template <class Fn, class... Args>
struct method_entry {
  std::string name;
  Fn fn;
  std::tuple<Args...> args;
  export_options opts;
};

namespace detail {
/// The module's forward, as a method: `fn(module, args...)`.
struct call_forward {
  template <class Impl, class... A>
  decltype(auto) operator()(Impl& m, A&&... a) const {
    return m.forward(std::forward<A>(a)...);
  }
};

/// The training flag of every module of `impl`'s tree, to put back after an export in one mode.
template <class Impl>
class mode_restorer {
 public:
  explicit mode_restorer(Impl& impl) : impl_(impl) {
    for (const auto& m : impl.modules(/*include_self=*/true)) modes_.push_back(m->is_training());
  }
  mode_restorer(const mode_restorer&) = delete;
  mode_restorer& operator=(const mode_restorer&) = delete;
  ~mode_restorer() {
    std::size_t i = 0;
    for (const auto& m : impl_.modules(/*include_self=*/true))
      if (i < modes_.size()) m->train(modes_[i++]);  // in pre-order: a submodule set after its parent
  }

 private:
  Impl& impl_;
  std::vector<bool> modes_;
};

}  // namespace detail

/// An entry point `fn(module, args...)` named `name`, for export_methods.
template <class Fn, class... Args>
method_entry<std::decay_t<Fn>, Args...> method(std::string name, Fn&& fn, std::tuple<Args...> args,
                                               export_options opts = {}) {
  return {std::move(name), std::forward<Fn>(fn), std::move(args), std::move(opts)};
}

/// The module's forward named `name`, for export_methods.
template <class... Args>
method_entry<detail::call_forward, Args...> method(std::string name, std::tuple<Args...> args, export_options opts = {}) {
  return {std::move(name), detail::call_forward{}, std::move(args), std::move(opts)};
}

/// Exports several entry points of one torch::nn module into a package, against one state: the
/// programs hold the module's tensors, so saving the package writes each once and its module
/// (`pkg.module()`, <xport/train.hpp>) is one set of parameters, as a TorchScript module's methods.
///
///     auto pkg = xport::export_methods(net, xport::method("forward.train", std::tuple{x}),
///                                      xport::method("forward.eval", std::tuple{x}),
///                                      xport::method("encode", encode_fn, std::tuple{x}, dynamic));
///
/// An entry named `<method>.train` or `<method>.eval` is exported with the module in that mode
/// (every submodule's mode is put back after), so a pair gives a module that train()/eval() switch.
/// The names are checked (unique, usable as archive names) before anything is exported.
template <class Policy = non_strict, class M, class... Entries>
package export_methods(M& module, const Entries&... entries) {
  static_assert(sizeof...(Entries) > 0, "xport::export_methods: name at least one method (xport::method(...))");
  std::vector<std::string> names;
  (names.push_back(entries.name), ...);
  for (std::size_t i = 0; i < names.size(); ++i) {
    detail::serde::check_record_name(names[i], "method name", false);
    for (std::size_t j = 0; j < i; ++j)
      if (names[j] == names[i])
        throw error("xport.save.name", "export_methods: method name '" + names[i] + "' is given twice: each entry of "
                                       "the package needs its own name");
  }
  package out;
  const auto one = [&](const auto& e) {
    auto& impl = detail::module_impl(module);
    detail::mode_restorer<std::remove_reference_t<decltype(impl)>> restore(impl);
    if (const auto mode = detail::serde::method_of(e.name).second) impl.train(*mode);
    auto fn = e.fn;
    out.programs.emplace(e.name, export_method<Policy>(module, fn, e.args, e.opts));
  };
  (one(entries), ...);
  return out;
}

XPORT_END_NAMESPACE
