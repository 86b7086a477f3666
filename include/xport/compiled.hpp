// xport/compiled.hpp: xport's runtime behind a light header, for TUs that load, run and save
// exported programs (an inference server's): the compiled mode. Link the library target
// xport::xport_compiled, which compiles the header-only library once (src/compiled.cpp); a TU
// that includes only this header parses LibTorch's Tensor and xport's errors, not xport (see
// tools/compile_time.py). Export, passes and the graph API stay in the header-only
// <xport/xport.hpp> (templates over the user's callables and policies); `program::get()` hands
// the full exported_program to a TU that includes it.
//
//   #include <xport/compiled.hpp>
//   auto p = xport::compiled::program::load("model.pt2");  // torch.export.save wrote it
//   xport::compiled::engine e(p);                          // thread-safe, planned
//   std::vector<at::Tensor> out = e.run({x});
#pragma once

#include <cstddef>  // std::size_t
#include <memory>   // std::shared_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include <ATen/core/Tensor.h>

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/fwd.hpp>
#include <xport/run/engine_options.hpp>

XPORT_BEGIN_NAMESPACE
class engine;

namespace compiled {

/// An exported program, loaded or handed over, with its interpreter made once. Copies share
/// the program (it is never changed through this handle); run() is safe from many threads.
class program {
 public:
  /// A .pt2 archive (torch.export.save's, or xport::save's); throws load_error.
  static program load(const std::string& path);
  static program load_from_memory(const void* data, std::size_t size);
  /// A program of the header-only API (include <xport/xport.hpp> to make one), moved in: pass
  /// `std::move(p)`, or `p.clone()` to keep yours.
  explicit program(exported_program&& p);

  /// Runs it through LibTorch's dispatcher (the interpreter): its inputs checked against its
  /// guards (guard_error), its user outputs returned.
  [[nodiscard]] std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  void save(const std::string& path) const;
  [[nodiscard]] std::string save_to_string() const;

  /// torch.export's text of it (`print(ep)`).
  [[nodiscard]] std::string str() const;
  /// Names of its user inputs and outputs, in order.
  [[nodiscard]] std::vector<std::string> input_names() const;
  [[nodiscard]] std::vector<std::string> output_names() const;

  /// The program itself: include <xport/xport.hpp> to use it.
  [[nodiscard]] const exported_program& get() const;

 private:
  struct state;
  explicit program(std::shared_ptr<const state> s);
  std::shared_ptr<const state> s_;
};

/// xport's engine (<xport/engine.hpp>) over a program: planned memory, in-place reuse, resolved
/// dispatch; results are inference tensors. run() is safe from many threads.
class engine {
 public:
  explicit engine(const program& p, const engine_options& options = {});
  [[nodiscard]] std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

 private:
  std::shared_ptr<const xport::engine> e_;
  program p_;  // (keeps the program alive beside its engine)
};

}  // namespace compiled
XPORT_END_NAMESPACE
