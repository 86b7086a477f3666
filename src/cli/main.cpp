// src/cli/main.cpp: `xport`, the command-line tool over xport's library: look inside a .pt2
// archive (print, info, dot, diff), check it (verify), run and time it (run, bench), rewrite it
// (decompose, optimize) and convert TorchScript files (convert). docs/cli.md is its manual.
//
// Exit status: 0 done, 1 `diff` found differences, 2 an xport error (its id printed first), 129 a
// mistake in the command line (the command's usage printed), as git does.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <xport/engine.hpp>
#include <xport/package.hpp>
#include <xport/torchscript.hpp>
#include <xport/version.hpp>
#include <xport/xport.hpp>

#include "args.hpp"
#include "diff.hpp"
#include "inputs.hpp"

namespace xport_cli {

using xport::exported_program;

// ---- loading and saving -----------------------------------------------------------------------

/// Whether `path` is a TorchScript file (torch.jit.save: its records hold code/ and constants.pkl).
inline bool is_torchscript(const std::string& path) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    return reader.hasRecord("constants.pkl") && !reader.hasRecord("archive_format");
  } catch (const std::exception&) {
    return false;
  }
}

/// The programs of FILE (one, `model`, for what torch.export.save wrote; several in a package),
/// only `--model NAME` when given.
inline xport::package load_archive(const std::string& path, const parsed_args& a, bool sample_inputs = false,
                                   bool verify = true) {
  if (is_torchscript(path))
    throw xport::load_error("xport.cli.torchscript", "'" + path + "' is a TorchScript file (torch.jit.save), not a "
                                                     "torch.export archive: convert it first (xport convert " + path +
                                                     " OUT.pt2 --shape ...)");
  xport::load_options lo;
  lo.example_inputs = sample_inputs;
  lo.verify = verify;
  if (a.has("--device")) lo.device = c10::Device(a.get("--device"));
  auto pkg = xport::load_package(path, lo);
  if (a.has("--model")) {
    const auto name = a.get("--model");
    auto p = std::move(pkg.at(name));  // (an error listing the package's programs when missing)
    pkg.programs.clear();
    pkg.programs.emplace(name, std::move(p));
  }
  return pkg;
}

/// Checks `--device` names a device this machine has, before anything loads onto it.
inline void check_device(const parsed_args& a) {
  if (!a.has("--device")) return;
  const auto text = a.get("--device");
  c10::Device d(c10::kCPU);
  try {
    d = c10::Device(text);
  } catch (const std::exception&) {
    throw usage_error("--device takes cpu, cuda or cuda:N, not '" + text + "'");
  }
  if (d.is_cuda() && !at::hasCUDA())
    throw xport::error("xport.cli.device", "--device " + text + ": this LibTorch or machine has no CUDA device; run on "
                                           "the CPU (leave --device out)");
}

// ---- describing a program ---------------------------------------------------------------------

inline std::string type_of(const xport::value& v) {
  const auto& t = v.type();
  if (t.kind == xport::value_kind::tensor) return t.tensor.annotation();
  if (t.kind == xport::value_kind::sym_int) return "Sym(" + t.scalar.str() + ")";
  if (t.kind == xport::value_kind::object) return t.class_fqn;
  return "";
}

inline std::string bytes_text(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  for (; n >= 1024 && u < 4; ++u) n /= 1024;
  std::ostringstream s;
  s << std::setprecision(u == 0 ? 0 : 1) << std::fixed << n << ' ' << units[u];
  return s.str();
}

/// Counts the calls of each operator in `g` and its subgraphs.
inline void count_ops(const xport::graph& g, std::map<std::string, std::size_t>& out) {
  for (const auto& n : g.nodes()) {
    if (!n.is_call()) continue;
    ++out[n.target()];
    xport::for_each_subgraph(n, [&](const xport::subgraph& s) { count_ops(s.body, out); });
  }
}

/// One row of a table: the cells padded to their widths, the last as it is, no trailing blanks.
inline std::string table_row(const std::vector<std::string>& cells, const std::vector<int>& widths) {
  std::ostringstream s;
  for (std::size_t i = 0; i < cells.size(); ++i)
    s << (i ? " " : "    ") << std::left << std::setw(i < widths.size() ? widths[i] : 0) << cells[i];
  auto row = s.str();
  row.erase(row.find_last_not_of(' ') + 1);
  return row + '\n';
}

inline void print_signature(std::ostream& os, const exported_program& p) {
  const auto phs = p.graph().placeholders();
  os << "  inputs:\n";
  for (std::size_t i = 0; i < p.signature().input_specs.size(); ++i) {
    const auto& s = p.signature().input_specs[i];
    os << table_row({s.arg.name, std::string(xport::to_string(s.kind)), i < phs.size() ? type_of(phs[i].output(0)) : "",
                     s.target.value_or("")}, {28, 16, 18});
  }
  os << "  outputs:\n";
  const auto out = p.graph().output_node();
  for (std::size_t i = 0; i < p.signature().output_specs.size(); ++i) {
    const auto& s = p.signature().output_specs[i];
    const auto v = out && i < out.num_inputs() ? out.input(i) : xport::value();
    os << table_row({s.arg.name, std::string(xport::to_string(s.kind)), v ? type_of(v) : "", s.target.value_or("")},
                    {28, 16, 18});
  }
}

/// The state's tensors by dtype and device: how many, how many values, how many bytes.
inline void print_state(std::ostream& os, const exported_program& p) {
  struct row {
    std::size_t tensors = 0;
    std::int64_t values = 0;
    double bytes = 0;
  };
  std::map<std::string, row> rows;
  row total;
  for (const auto* dict : {&p.state_dict(), &p.constants()})
    for (const auto& [name, t] : *dict) {
      auto& r = rows[xport::python_repr(t.scalar_type()).substr(6) + " on " + t.device().str()];
      for (auto* x : {&r, &total}) {
        ++x->tensors;
        x->values += t.numel();
        x->bytes += static_cast<double>(t.numel()) * static_cast<double>(t.element_size());
      }
    }
  os << "  state: " << p.state_dict().size() << " tensors in the state dict, " << p.constants().size() << " constants, "
     << total.values << " values, " << bytes_text(total.bytes) << '\n';
  for (const auto& [key, r] : rows)
    os << "    " << std::left << std::setw(22) << key << std::right << std::setw(6) << r.tensors << " tensors "
       << std::setw(14) << r.values << " values " << std::setw(12) << bytes_text(r.bytes) << '\n';
  for (const auto& [fqn, obj] : p.custom_objs()) os << "    custom object " << fqn << ": " << obj.type()->str() << '\n';
}

inline void print_info(std::ostream& os, const std::string& name, const exported_program& p) {
  os << "program '" << name << "' (" << (p.dialect() == xport::ir_dialect::training ? "training IR" : "ATen IR") << ")\n";
  print_signature(os, p);
  print_state(os, p);
  if (!p.range_constraints().empty()) {
    os << "  range constraints:\n";
    for (const auto& r : p.range_constraints())
      os << "    " << r.symbol.str() << ": [" << r.min << ", " << (r.max ? std::to_string(*r.max) : "int_oo") << "]"
         << (r.name.empty() ? "" : "  (" + r.name + ")") << '\n';
  }
  std::map<std::string, std::size_t> ops;
  count_ops(p.graph(), ops);
  std::size_t calls = 0;
  for (const auto& [op, k] : ops) calls += k;
  std::vector<std::pair<std::string, std::size_t>> sorted(ops.begin(), ops.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  os << "  graph: " << p.graph().size() << " nodes, " << calls << " calls of " << ops.size() << " operators\n";
  for (const auto& [op, k] : sorted) os << "    " << std::right << std::setw(6) << k << "  " << op << '\n';
}

// ---- commands ---------------------------------------------------------------------------------

int cmd_print(const parsed_args& a) {
  const auto pkg = load_archive(a.operands[0], a);
  for (const auto& [name, p] : pkg.programs) {
    if (pkg.programs.size() > 1) std::cout << "# program '" << name << "'\n";
    std::cout << xport::to_string(p);
  }
  return 0;
}

int cmd_info(const parsed_args& a) {
  const auto& path = a.operands[0];
  const auto pkg = load_archive(path, a);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  std::cout << path << ": " << pkg.programs.size() << (pkg.programs.size() == 1 ? " program" : " programs") << ", "
            << bytes_text(static_cast<double>(f.tellg())) << '\n';
  for (const auto& [name, text] : pkg.extra_files) std::cout << "extra file " << name << ": " << text.size() << " bytes\n";
  for (const auto& [name, p] : pkg.programs) {
    std::cout << '\n';
    print_info(std::cout, name, p);
  }
  return 0;
}

int cmd_verify(const parsed_args& a) {
  const auto& path = a.operands[0];
  const auto pkg = load_archive(path, a, false, /*verify=*/false);  // verified below, each program named
  for (const auto& [name, p] : pkg.programs) {
    xport::verify(p);
    std::cout << path << ": program '" << name << "' ok (" << p.graph().size() << " nodes)\n";
  }
  return 0;
}

/// `name: f32[2, 3] sum=... abs=...`: what a run gave, comparable across machines and with torch.
inline std::string tensor_summary(const std::string& name, const at::Tensor& t) {
  std::ostringstream s;
  s << name << ": " << shape_text(t);
  if (!t.device().is_cpu()) s << " on " << t.device();
  const auto x = t.detach().cpu();
  if (x.numel() > 0 && (x.is_floating_point() || x.is_complex())) {
    const auto d = x.is_complex() ? at::abs(x).to(at::kDouble) : x.to(at::kDouble);
    s << std::setprecision(9) << " sum=" << d.sum().item<double>() << " abs_sum=" << d.abs().sum().item<double>();
  } else if (x.numel() > 0) {
    s << " sum=" << x.to(at::kLong).sum().item<std::int64_t>();
  }
  return s.str();
}

int cmd_run(const parsed_args& a) {
  check_device(a);
  const auto how = a.get("--inputs", "random");
  auto pkg = load_archive(a.operands[0], a, how == "sample");
  if (a.has("--outputs") && pkg.programs.size() > 1)
    throw usage_error("--outputs writes one program's outputs: the archive holds several, name one (--model NAME)");
  const auto device = a.has("--device") ? c10::Device(a.get("--device")) : c10::Device(c10::kCPU);
  for (const auto& [name, p] : pkg.programs) {
    if (pkg.programs.size() > 1) std::cout << "program '" << name << "'\n";
    const auto inputs = program_inputs(p, how, device);
    const auto outputs = a.has("--engine") ? xport::engine(p).run(inputs) : xport::run(p, inputs);
    const auto names = p.signature().user_outputs();
    for (std::size_t i = 0; i < outputs.size(); ++i)
      std::cout << tensor_summary(i < names.size() ? names[i] : "output " + std::to_string(i), outputs[i]) << '\n';
    if (a.has("--outputs")) {  // as torch.save((out0, out1, ...), FILE) writes them, on the CPU
      std::vector<c10::IValue> items;
      for (const auto& t : outputs) items.emplace_back(t.detach().cpu());
      const auto bytes = xport::detail::pickle_bytes(c10::ivalue::Tuple::create(std::move(items)));
      std::ofstream out(a.get("--outputs"), std::ios::binary);
      if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())))
        throw xport::error("xport.cli.outputs", "cannot write '" + a.get("--outputs") + "'");
    }
  }
  return 0;
}

/// Milliseconds per call of `fn`: `iters` calls after `warmup` (0 iterations: as many as 2 s
/// take, 5 to 1000), a progress line on the terminal when it takes a while.
inline std::vector<double> time_calls(const std::function<void()>& fn, long long iters, long long warmup,
                                      const std::string& what) {
  using clock = std::chrono::steady_clock;
  for (long long i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  const auto start = clock::now();
  const bool tty = isatty(2) != 0;
  auto last_report = start;
  for (long long i = 0; iters > 0 ? i < iters : (i < 5 || (i < 1000 && clock::now() - start < std::chrono::seconds(2))); ++i) {
    const auto t0 = clock::now();
    fn();
    const auto t1 = clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    if (tty && t1 - last_report > std::chrono::milliseconds(500)) {
      std::cerr << "\r  " << what << ": " << ms.size() << (iters > 0 ? "/" + std::to_string(iters) : std::string()) << " runs"
                << std::flush;
      last_report = t1;
    }
  }
  if (tty && last_report != start) std::cerr << "\r\033[K" << std::flush;
  std::sort(ms.begin(), ms.end());
  return ms;
}

int cmd_bench(const parsed_args& a) {
  check_device(a);
  const auto how = a.get("--inputs", "random");
  const auto pkg = load_archive(a.operands[0], a, how == "sample");
  const auto device = a.has("--device") ? c10::Device(a.get("--device")) : c10::Device(c10::kCPU);
  std::vector<int> threads;
  for (const auto& t : a.all("--threads")) {
    const parsed_args one{{}, {{"--threads", {t}}}, {}};
    threads.push_back(static_cast<int>(std::max(1LL, one.number("--threads", 1))));
  }
  if (threads.empty()) threads = {at::get_num_threads()};
  const auto iters = a.number("--iters", 0), warmup = a.number("--warmup", 3);
  for (const auto& [name, p] : pkg.programs) {
    const auto inputs = program_inputs(p, how, device);
    std::cout << "program '" << name << "': median, min and max of the calls, in milliseconds\n";
    const xport::engine e(p);
    for (const int n : threads) {
      at::set_num_threads(n);
      for (const bool engine : {false, true}) {
        const auto what = std::string(engine ? "engine" : "interpreter") + ", " + std::to_string(n) + " threads";
        const auto ms = time_calls([&] { engine ? (void)e.run(inputs) : (void)xport::run(p, inputs); }, iters, warmup, what);
        std::cout << "  " << std::left << std::setw(26) << what << std::right << std::fixed << std::setprecision(3)
                  << std::setw(10) << ms[ms.size() / 2] << std::setw(10) << ms.front() << std::setw(10) << ms.back() << "  ("
                  << ms.size() << " calls)\n";
        std::cout.unsetf(std::ios::fixed);
      }
    }
  }
  return 0;
}

int cmd_dot(const parsed_args& a) {
  const auto pkg = load_archive(a.operands[0], a);
  if (pkg.programs.size() > 1) throw usage_error("the archive holds several programs: name one (--model NAME)");
  const auto text = xport::to_dot(pkg.programs.begin()->second.graph());
  if (a.has("--svg")) {
    if (std::system("command -v dot >/dev/null 2>&1") != 0)
      throw xport::error("xport.cli.dot", "--svg needs Graphviz's dot, which is not installed (apt install graphviz); or "
                                          "write the DOT text with -o FILE.dot");
    const auto out = a.get("--svg");
    FILE* pipe = popen(("dot -Tsvg -o '" + out + "'").c_str(), "w");
    const bool ok = pipe && std::fwrite(text.data(), 1, text.size(), pipe) == text.size();
    if (!pipe || pclose(pipe) != 0 || !ok) throw xport::error("xport.cli.dot", "Graphviz's dot failed writing '" + out + "'");
  } else if (a.has("-o")) {
    std::ofstream(a.get("-o")) << text;
  } else {
    std::cout << text;
  }
  return 0;
}

inline void save_archive(const xport::package& pkg, const std::string& path) {
  xport::save(pkg, path);
  std::cout << "wrote " << path << " (" << pkg.programs.size() << (pkg.programs.size() == 1 ? " program" : " programs")
            << ")\n";
}

int cmd_decompose(const parsed_args& a) {
  auto pkg = load_archive(a.operands[0], a);
  for (auto& [name, p] : pkg.programs) {
    const auto before = p.graph().size();
    p = xport::run_decompositions(p);
    std::cout << "program '" << name << "': " << before << " nodes -> " << p.graph().size() << " in the ATen IR\n";
  }
  save_archive(pkg, a.operands[1]);
  return 0;
}

int cmd_optimize(const parsed_args& a) {
  const auto pm = xport::passes::pass_manager::parse(a.get("--passes", "dce,cse,fold"));
  auto pkg = load_archive(a.operands[0], a);
  for (auto& [name, p] : pkg.programs) {
    const auto before = p.graph().size();
    const auto r = pm.run(p);
    if (!r.ok()) throw xport::error("xport.cli.pass", "program '" + name + "': " + r.error);
    std::cout << "program '" << name << "': " << pm.str() << ": " << before << " nodes -> " << p.graph().size() << '\n';
  }
  save_archive(pkg, a.operands[1]);
  return 0;
}

int cmd_diff(const parsed_args& a) {
  const auto& pa = a.operands[0];
  const auto& pb = a.operands[1];
  const auto x = load_archive(pa, a), y = load_archive(pb, a);
  bool differ = false;
  for (const auto& [name, p] : x.programs)
    if (!y.programs.count(name)) std::cout << "program '" << name << "' only in " << pa << '\n', differ = true;
  for (const auto& [name, p] : y.programs)
    if (!x.programs.count(name)) std::cout << "program '" << name << "' only in " << pb << '\n', differ = true;
  for (const auto& [name, p] : x.programs) {
    const auto it = y.programs.find(name);
    if (it == y.programs.end()) continue;
    const auto state = state_diff(p, it->second);
    const auto text = unified(line_diff(split_lines(xport::to_string(p)), split_lines(xport::to_string(it->second))));
    if (state.empty() && text.empty()) continue;
    differ = true;
    std::cout << "program '" << name << "'\n";
    if (!state.empty()) std::cout << "state:\n" << state;
    if (!text.empty()) std::cout << "--- " << pa << "\n+++ " << pb << '\n' << text;
  }
  return differ ? 1 : 0;
}

/// `--dynamic x.0=batch:1:64` (name and range optional): the dims that vary, by argument and
/// index; one name is one Dim across arguments.
inline std::map<std::string, std::map<std::int64_t, xport::Dim>> dynamic_dims(const parsed_args& a) {
  std::map<std::string, xport::Dim> dims;
  std::map<std::string, std::map<std::int64_t, xport::Dim>> by_arg;
  for (const auto& text : a.all("--dynamic")) {
    const auto dot = text.find('.');
    const auto eq = text.find('=');
    const auto index = dot == std::string::npos ? "" : text.substr(dot + 1, eq == std::string::npos ? std::string::npos : eq - dot - 1);
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos)
      throw usage_error("--dynamic takes ARG.DIM[=NAME[:MIN:MAX]] (x.0=batch:1:64), not '" + text + "'");
    const auto arg = text.substr(0, dot);
    std::string name = arg + "_" + index, range;
    if (eq != std::string::npos) {
      name = text.substr(eq + 1);
      if (const auto colon = name.find(':'); colon != std::string::npos) {
        range = name.substr(colon + 1);
        name.resize(colon);
      }
    }
    if (!dims.count(name)) {
      std::int64_t lo = 0, hi = 0;
      char sep = 0;
      std::istringstream r(range);
      if (!range.empty() && !(r >> lo >> sep >> hi && sep == ':' && r.eof()))
        throw usage_error("--dynamic " + text + ": the range is MIN:MAX (1:64)");
      dims.emplace(name, range.empty() ? xport::Dim(name) : xport::Dim(name, lo, hi));
    }
    by_arg[arg].emplace(std::stoll(index), dims.at(name));
  }
  return by_arg;
}

/// The dynamic dims as export takes them, in the order of `method`'s arguments.
inline xport::dynamic_shapes method_dynamic_shapes(const std::string& path, const std::string& method,
                                                   const std::vector<at::Tensor>& inputs,
                                                   const std::map<std::string, std::map<std::int64_t, xport::Dim>>& by_arg) {
  if (by_arg.empty()) return {};
  auto m = torch::jit::load(path, c10::Device(c10::kCPU));
  const auto found = m.find_method(method);
  if (!found) return {};  // (from_torchscript names the methods the module has)
  std::vector<std::string> names;
  for (const auto& arg : found->function().getSchema().arguments()) names.push_back(arg.name());
  names.erase(names.begin());  // self
  for (const auto& [arg, d] : by_arg)
    if (std::find(names.begin(), names.end(), arg) == names.end())
      throw usage_error("--dynamic " + arg + ".*: method '" + method + "' has no argument '" + arg + "'");
  std::vector<xport::shape_spec> items;
  for (std::size_t i = 0; i < names.size() && i < inputs.size(); ++i) {
    const auto it = by_arg.find(names[i]);
    if (it == by_arg.end()) {
      items.emplace_back();
      continue;
    }
    std::vector<xport::dim_spec> sizes;
    for (std::int64_t k = 0; k < inputs[i].dim(); ++k) {
      const auto d = it->second.find(k);
      sizes.push_back(d == it->second.end() ? xport::dim_spec(xport::Dim::static_) : xport::dim_spec(d->second));
    }
    for (const auto& [k, d] : it->second)
      if (k >= inputs[i].dim())
        throw usage_error("--dynamic " + names[i] + "." + std::to_string(k) + ": the example has " +
                          std::to_string(inputs[i].dim()) + " dims");
    items.push_back(xport::shape_spec::sizes(std::move(sizes)));
  }
  return xport::dynamic_shapes::positional(std::move(items));
}

int cmd_convert(const parsed_args& a) {
  std::vector<at::Tensor> inputs;
  if (a.has("--inputs")) inputs = tensors_from_file(a.get("--inputs"));
  for (const auto& s : a.all("--shape")) inputs.push_back(tensor_from_shape(s));
  if (inputs.empty()) throw usage_error("give the example inputs: --shape [DTYPE:]D0,D1,... per argument, or --inputs FILE.pt");
  const auto route = a.get("--route", "translate");
  if (route != "translate" && route != "capture") throw usage_error("--route is translate or capture, not '" + route + "'");
  auto methods = a.all("--method");
  if (methods.empty()) methods = {"forward"};
  const auto dims = dynamic_dims(a);
  const auto& path = a.operands[0];
  if (!is_torchscript(path))
    throw xport::load_error("xport.cli.torchscript", "'" + path + "' is not a TorchScript file (torch.jit.save writes one)");
  std::map<std::string, xport::torchscript_method> specs;
  for (const auto& m : methods)
    specs[m] = {inputs, method_dynamic_shapes(path, m, inputs, dims),
                route == "capture" ? xport::torchscript_route::capture : xport::torchscript_route::translate};
  auto pkg = xport::from_torchscript(path, specs);
  for (const auto& [name, p] : pkg.programs)
    std::cout << "program '" << name << "': " << p.graph().size() << " nodes (" << route << "d)\n";
  if (pkg.programs.size() == 1) {  // one method: a program torch.export.load reads as it is
    auto p = std::move(pkg.programs.begin()->second);
    pkg.programs.clear();
    pkg.programs.emplace("model", std::move(p));
  }
  save_archive(pkg, a.operands[1]);
  return 0;
}

// ---- the command table and main ---------------------------------------------------------------

struct command {
  command_spec spec;
  int (*run)(const parsed_args&);
};

inline const std::vector<command>& commands() {
  static const std::vector<command> table{
      {{"print", "xport print [--model NAME] FILE", "print a program as torch's print(ep) does",
        "    --model NAME     only this program of a package\n", {"--model"}, {}, 1, 1}, cmd_print},
      {{"info", "xport info [--model NAME] FILE",
        "show the signature, the state by dtype and device, the range constraints and the operators called",
        "    --model NAME     only this program of a package\n", {"--model"}, {}, 1, 1}, cmd_info},
      {{"verify", "xport verify [--model NAME] FILE", "check every program of an archive (xport::verify)",
        "    --model NAME     only this program of a package\n", {"--model"}, {}, 1, 1}, cmd_verify},
      {{"run", "xport run [--inputs sample|random|FILE.pt] [--outputs FILE.pt] [--device DEV] [--engine] [--model NAME] FILE",
        "run a program and print its outputs' dtypes, shapes and sums",
        "    --inputs HOW     random (the default: the signature's types, the exported sizes, seeded),\n"
        "                     sample (the archive's sample inputs) or FILE.pt (torch.save of a tuple)\n"
        "    --outputs FILE   also write the outputs as torch.save((out0, ...), FILE) does\n"
        "    --device DEV     load and run on cpu, cuda or cuda:N\n"
        "    --engine         run with xport::engine instead of the interpreter\n"
        "    --model NAME     only this program of a package\n",
        {"--inputs", "--outputs", "--device", "--model"}, {"--engine"}, 1, 1}, cmd_run},
      {{"bench", "xport bench [--inputs HOW] [--threads N]... [--iters N] [--warmup N] [--device DEV] [--model NAME] FILE",
        "time the interpreter and the engine on a program",
        "    --inputs HOW     as for run (random by default)\n"
        "    --threads N      intra-op threads (at::set_num_threads); repeat to compare\n"
        "    --iters N        calls to time (default: as many as 2 seconds take, 5 to 1000)\n"
        "    --warmup N       calls before timing (default 3)\n",
        {"--inputs", "--threads", "--iters", "--warmup", "--device", "--model"}, {}, 1, 1}, cmd_bench},
      {{"dot", "xport dot [-o FILE.dot | --svg FILE.svg] [--model NAME] FILE", "draw the graph in Graphviz's DOT",
        "    -o FILE          write the DOT text to FILE (default: standard output)\n"
        "    --svg FILE       render it with Graphviz's dot into an SVG file\n",
        {"-o", "--svg", "--model"}, {}, 1, 1}, cmd_dot},
      {{"decompose", "xport decompose [--model NAME] IN OUT", "lower to the ATen IR (torch's run_decompositions()) and save",
        "", {"--model"}, {}, 2, 2}, cmd_decompose},
      {{"optimize", "xport optimize [--passes LIST] [--model NAME] IN OUT", "run passes over the programs and save",
        "    --passes LIST    comma-separated passes, in order (default dce,cse,fold)\n", {"--passes", "--model"}, {}, 2, 2},
       cmd_optimize},
      {{"diff", "xport diff [--model NAME] A B", "show how two archives differ: programs, state, signature and graph",
        "    exit status 0 when they are the same, 1 when they differ\n", {"--model"}, {}, 2, 2}, cmd_diff},
      {{"convert", "xport convert [--method NAME]... (--shape SPEC... | --inputs FILE.pt) [--dynamic ARG.DIM[=NAME[:MIN:MAX]]]... "
                   "[--route translate|capture] IN.pt OUT.pt2",
        "convert a TorchScript file into a torch.export archive (one method) or package (several)",
        "    --method NAME    a method to convert (default forward); repeat for several\n"
        "    --shape SPEC     an example input per argument, [DTYPE:]D0,D1,... (float32:1,3,224,224)\n"
        "    --inputs FILE    example inputs torch.save wrote (a tuple of tensors)\n"
        "    --dynamic SPEC   a dim that varies: x.0=batch:1:64 (name and range optional)\n"
        "    --route R        translate (the default; branches on data become torch.cond) or capture\n",
        {"--method", "--shape", "--inputs", "--dynamic", "--route"}, {}, 2, 2}, cmd_convert},
  };
  return table;
}

inline std::string general_help() {
  std::ostringstream s;
  s << "usage: xport [--version] [--help] [--completion bash] <command> [<args>]\n\nxport " XPORT_VERSION_STRING
       ": torch.export archives (.pt2) from the command line\n\n";
  for (const auto& c : commands()) s << "   " << std::left << std::setw(11) << c.spec.name << c.spec.summary << '\n';
  s << "\nSee 'xport help <command>' (or 'xport <command> --help') for a command's options.\n";
  return s.str();
}

inline std::string command_help(const command_spec& c) {
  return "usage: " + c.usage + "\n\n    " + c.summary + "\n" + (c.options.empty() ? "" : "\n" + c.options);
}

/// A bash completion script made from the command table: `source <(xport --completion bash)`.
inline std::string bash_completion() {
  std::ostringstream s;
  s << "_xport() {\n  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}\n"
       "  if [[ $COMP_CWORD -eq 1 ]]; then COMPREPLY=($(compgen -W \"";
  for (const auto& c : commands()) s << c.spec.name << ' ';
  s << "help --help --version\" -- \"$cur\")); return; fi\n  case $cmd in\n";
  for (const auto& c : commands()) {
    s << "    " << c.spec.name << ") local opts=\"";
    for (const auto& o : c.spec.valued) s << o << ' ';
    for (const auto& o : c.spec.flags) s << o << ' ';
    s << "--help\";;\n";
  }
  s << "    *) local opts=\"\";;\n  esac\n"
       "  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\")); else COMPREPLY=($(compgen -f -- \"$cur\")); fi\n"
       "}\ncomplete -o filenames -F _xport xport\n";
  return s.str();
}

int main_impl(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || (args[0] == "help" && args.size() == 1)) {
    std::cout << general_help();
    return args.empty() ? 129 : 0;
  }
  if (args[0] == "--completion") {
    if (args.size() != 2 || args[1] != "bash") {
      std::cerr << "error: --completion takes bash\n";
      return 129;
    }
    std::cout << bash_completion();
    return 0;
  }
  if (args[0] == "--version") {
    std::cout << "xport " XPORT_VERSION_STRING << '\n';
    return 0;
  }
  const auto& name = args[0] == "help" ? args[1] : args[0];
  const auto it = std::find_if(commands().begin(), commands().end(), [&](const command& c) { return c.spec.name == name; });
  if (it == commands().end()) {
    std::cerr << "xport: '" << name << "' is not an xport command. See 'xport --help'.\n";
    return 129;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "help" || std::find(rest.begin(), rest.end(), "--help") != rest.end() ||
      std::find(rest.begin(), rest.end(), "-h") != rest.end()) {
    std::cout << command_help(it->spec);
    return 0;
  }
  try {
    return it->run(parse_args(it->spec, rest));
  } catch (const usage_error& e) {
    std::cerr << "error: " << e.what() << "\n\n" << command_help(it->spec);
    return 129;
  }
}

}  // namespace xport_cli

int main(int argc, char** argv) {
  try {
    return xport_cli::main_impl(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const xport::error& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "fatal: " << e.what() << '\n';
    return 1;
  }
}
