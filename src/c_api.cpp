// The C API (<xport/c/xport.h>, target xport::xport_c) over the compiled mode: handles around
// compiled::program and compiled::engine, tensors in and out as DLPack, every exception caught
// at the boundary and kept as this thread's last error.
#include <xport/c/xport.h>

#include <cstring>    // std::memcpy
#include <exception>  // std::exception
#include <memory>     // std::unique_ptr
#include <new>        // std::bad_alloc
#include <string>     // std::string
#include <vector>     // std::vector

#include <ATen/DLConvertor.h>

#include <xport/compiled.hpp>
#include <xport/version.hpp>

struct xport_program {
  xport::compiled::program p;
  std::vector<std::string> inputs, outputs;
  explicit xport_program(xport::compiled::program q) : p(std::move(q)), inputs(p.input_names()), outputs(p.output_names()) {}
};

struct xport_engine {
  xport::compiled::engine e;
  std::size_t outputs;
};

namespace {

struct last_error {
  std::string id, message;
};
last_error& current_error() {
  thread_local last_error e;
  return e;
}

xport_status fail(xport_status status, std::string id, std::string message) {
  auto& e = current_error();
  e.message = message.rfind('[', 0) == 0 ? std::move(message) : "[" + id + "] " + message;  // (as xport's what())
  e.id = std::move(id);
  return status;
}

/// Runs `body`, turning any exception into a status and this thread's last error.
template <class F>
xport_status guarded(F&& body) {
  try {
    body();
    return XPORT_OK;
  } catch (const xport::guard_error& e) {
    return fail(XPORT_ERROR_GUARD, e.id(), e.what());
  } catch (const xport::load_error& e) {
    return fail(XPORT_ERROR_LOAD, e.id(), e.what());
  } catch (const xport::run_error& e) {
    return fail(XPORT_ERROR_RUN, e.id(), e.what());
  } catch (const xport::error& e) {
    return fail(XPORT_ERROR_OTHER, e.id(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(XPORT_ERROR_OTHER, "xport.c.memory", "out of memory");
  } catch (const std::exception& e) {
    std::string what = e.what();
    return fail(XPORT_ERROR_OTHER, "xport.c.libtorch", what.substr(0, what.find("\nException raised from")));
  } catch (...) {
    return fail(XPORT_ERROR_OTHER, "xport.c.unknown", "an unknown exception");
  }
}

xport_status argument_error(const std::string& message) {
  return fail(XPORT_ERROR_ARGUMENT, "xport.c.argument", message);
}

/// A tensor over a borrowed DLPack tensor's memory: a copy of its descriptor whose deleter frees
/// only the copy, so the caller's deleter is never called.
at::Tensor borrow(const DLManagedTensor* src) {
  auto* view = new DLManagedTensor(*src);
  view->manager_ctx = nullptr;
  view->deleter = [](DLManagedTensor* self) { delete self; };
  return at::fromDLPack(view);
}

/// Checks the arguments of a run, converts the inputs, runs `run` and hands the outputs over as
/// DLPack tensors (an output sharing memory with an input is copied: inputs stay borrowed).
template <class Run>
xport_status run_dlpack(const char* who, std::size_t expected_outputs, DLManagedTensor* const* inputs, std::size_t num_inputs,
                        DLManagedTensor** outputs, std::size_t num_outputs, Run&& run) {
  if (!outputs) return argument_error(std::string(who) + ": outputs is NULL");
  if (num_outputs != expected_outputs)
    return argument_error(std::string(who) + ": the program has " + std::to_string(expected_outputs) + " outputs, " +
                          std::to_string(num_outputs) + " asked for");
  if (num_inputs > 0 && !inputs) return argument_error(std::string(who) + ": inputs is NULL");
  for (std::size_t i = 0; i < num_inputs; ++i)
    if (!inputs[i]) return argument_error(std::string(who) + ": input " + std::to_string(i) + " is NULL");
  return guarded([&] {
    std::vector<at::Tensor> in;
    for (std::size_t i = 0; i < num_inputs; ++i) in.push_back(borrow(inputs[i]));
    auto out = run(in);
    std::vector<DLManagedTensor*> made;
    try {
      for (auto& t : out) {
        for (const auto& x : in)
          if (t.is_alias_of(x)) {
            t = t.clone();
            break;
          }
        made.push_back(at::toDLPack(t));
      }
    } catch (...) {
      for (auto* m : made) m->deleter(m);
      throw;
    }
    for (std::size_t i = 0; i < made.size(); ++i) outputs[i] = made[i];
  });
}

}  // namespace

extern "C" {

const char* xport_version(void) { return XPORT_VERSION_STRING; }
const char* xport_last_error_id(void) { return current_error().id.c_str(); }
const char* xport_last_error_message(void) { return current_error().message.c_str(); }

xport_status xport_program_load(const char* path, xport_program** out) {
  if (!path || !out) return argument_error("xport_program_load: path and out must not be NULL");
  return guarded([&] { *out = new xport_program(xport::compiled::program::load(path)); });
}

xport_status xport_program_load_from_memory(const void* data, size_t size, xport_program** out) {
  if (!data || !out) return argument_error("xport_program_load_from_memory: data and out must not be NULL");
  return guarded([&] { *out = new xport_program(xport::compiled::program::load_from_memory(data, size)); });
}

void xport_program_free(xport_program* program) { delete program; }

size_t xport_program_num_inputs(const xport_program* program) { return program ? program->inputs.size() : 0; }
size_t xport_program_num_outputs(const xport_program* program) { return program ? program->outputs.size() : 0; }
const char* xport_program_input_name(const xport_program* program, size_t i) {
  return program && i < program->inputs.size() ? program->inputs[i].c_str() : nullptr;
}
const char* xport_program_output_name(const xport_program* program, size_t i) {
  return program && i < program->outputs.size() ? program->outputs[i].c_str() : nullptr;
}

xport_status xport_program_print(const xport_program* program, char** text) {
  if (!program || !text) return argument_error("xport_program_print: program and text must not be NULL");
  return guarded([&] {
    const auto s = program->p.str();
    auto* buffer = new char[s.size() + 1];
    std::memcpy(buffer, s.c_str(), s.size() + 1);
    *text = buffer;
  });
}

void xport_string_free(char* text) { delete[] text; }

xport_status xport_program_run(const xport_program* program, DLManagedTensor* const* inputs, size_t num_inputs,
                               DLManagedTensor** outputs, size_t num_outputs) {
  if (!program) return argument_error("xport_program_run: program is NULL");
  return run_dlpack("xport_program_run", program->outputs.size(), inputs, num_inputs, outputs, num_outputs,
                    [&](const std::vector<at::Tensor>& in) { return program->p.run(in); });
}

xport_status xport_engine_create(const xport_program* program, size_t threads, xport_engine** out) {
  if (!program || !out) return argument_error("xport_engine_create: program and out must not be NULL");
  return guarded([&] {
    xport::engine_options options;
    options.threads = threads == 0 ? 1 : threads;
    *out = new xport_engine{xport::compiled::engine(program->p, options), program->outputs.size()};
  });
}

void xport_engine_free(xport_engine* engine) { delete engine; }

xport_status xport_engine_run(const xport_engine* engine, DLManagedTensor* const* inputs, size_t num_inputs,
                              DLManagedTensor** outputs, size_t num_outputs) {
  if (!engine) return argument_error("xport_engine_run: engine is NULL");
  return run_dlpack("xport_engine_run", engine->outputs, inputs, num_inputs, outputs, num_outputs,
                    [&](const std::vector<at::Tensor>& in) { return engine->e.run(in); });
}

}  // extern "C"
