/* xport/c/xport.h: xport's C API, a stable ABI for C and for languages that bind C (C#, Rust,
 * Go, Fortran, Python's ctypes): load a torch.export archive (.pt2), run it with the
 * interpreter or the engine, tensors passed as DLPack (DLManagedTensor, the cross-framework
 * standard: NumPy, PyTorch, JAX, CuPy and DLPack's own C header speak it). Link the library
 * xport::xport_c (libxport_c.so); this header needs no C++ and no LibTorch header.
 *
 *   xport_program* p = NULL;
 *   if (xport_program_load("model.pt2", &p) != XPORT_OK)
 *     fprintf(stderr, "%s\n", xport_last_error_message());  // "[xport.load.open] cannot open ..."
 *   DLManagedTensor* out[1];
 *   xport_program_run(p, inputs, 1, out, 1);  // out[0] is yours: out[0]->deleter(out[0])
 *   xport_program_free(p);
 *
 * Conventions. Every function that can fail returns an xport_status (XPORT_OK, 0, on success)
 * and sets this thread's last error (id and message, valid until the thread's next failing
 * call); no C++ exception ever crosses this boundary. Inputs are borrowed: xport reads them
 * during the call and never calls their deleter, and no output shares memory with an input.
 * Outputs are new DLManagedTensors the caller owns. Handles may be used from several threads at
 * once (a program's and an engine's runs are thread-safe). docs/c-api.md has the details. */
#ifndef XPORT_C_XPORT_H
#define XPORT_C_XPORT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DLPack's tensor (dlpack/dlpack.h defines it; only pointers to it pass here). */
typedef struct DLManagedTensor DLManagedTensor;

#if defined(_WIN32)
#define XPORT_C_API __declspec(dllexport)
#else
#define XPORT_C_API __attribute__((visibility("default")))
#endif

/* What a call gave: XPORT_OK, or the kind of failure (the id says which exactly). */
typedef enum xport_status {
  XPORT_OK = 0,
  XPORT_ERROR_LOAD = 1,     /* the archive could not be read (xport.load.*, xport.serde.*) */
  XPORT_ERROR_GUARD = 2,    /* an input the program's guards refuse (a shape, dtype or device) */
  XPORT_ERROR_RUN = 3,      /* the program failed while running */
  XPORT_ERROR_ARGUMENT = 4, /* a null pointer, a wrong count, an index out of range */
  XPORT_ERROR_OTHER = 5     /* any other xport error, or a failure of LibTorch itself */
} xport_status;

typedef struct xport_program xport_program; /* a loaded program with its interpreter */
typedef struct xport_engine xport_engine;   /* xport's engine over a program (planned, faster) */

/* "0.1.0" */
XPORT_C_API const char* xport_version(void);

/* The last failure on this thread: its stable id ("xport.guard.shape") and its message, which
 * starts with the id in brackets as xport's C++ errors do; "" when none. Valid until the
 * thread's next failing call. */
XPORT_C_API const char* xport_last_error_id(void);
XPORT_C_API const char* xport_last_error_message(void);

/* Loads a .pt2 archive (torch.export.save's or xport's) from a path, or from `size` bytes. */
XPORT_C_API xport_status xport_program_load(const char* path, xport_program** out);
XPORT_C_API xport_status xport_program_load_from_memory(const void* data, size_t size, xport_program** out);
/* Frees a program (NULL is ignored). Engines made from it keep what they need. */
XPORT_C_API void xport_program_free(xport_program* program);

/* How many user inputs and outputs the program has, and their names ("x"; NULL when `i` is out
 * of range). The names live as long as the program. */
XPORT_C_API size_t xport_program_num_inputs(const xport_program* program);
XPORT_C_API size_t xport_program_num_outputs(const xport_program* program);
XPORT_C_API const char* xport_program_input_name(const xport_program* program, size_t i);
XPORT_C_API const char* xport_program_output_name(const xport_program* program, size_t i);

/* The program as torch.export prints it (print(ep)); free it with xport_string_free. */
XPORT_C_API xport_status xport_program_print(const xport_program* program, char** text);
XPORT_C_API void xport_string_free(char* text);

/* Runs the program (the interpreter) on `num_inputs` borrowed tensors; writes `num_outputs`
 * new tensors to `outputs`, which must be exactly the program's output count. */
XPORT_C_API xport_status xport_program_run(const xport_program* program, DLManagedTensor* const* inputs,
                                           size_t num_inputs, DLManagedTensor** outputs, size_t num_outputs);

/* xport's engine over a program (threads: inter-op threads for independent branches, 1 for
 * none); runs as xport_program_run does, faster. */
XPORT_C_API xport_status xport_engine_create(const xport_program* program, size_t threads, xport_engine** out);
XPORT_C_API void xport_engine_free(xport_engine* engine);
XPORT_C_API xport_status xport_engine_run(const xport_engine* engine, DLManagedTensor* const* inputs, size_t num_inputs,
                                          DLManagedTensor** outputs, size_t num_outputs);

#ifdef __cplusplus
}
#endif

#endif /* XPORT_C_XPORT_H */
