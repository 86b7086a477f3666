/* tests/c_api/c_api_test.c: the C API from C (ctest `c_api_c`): compiled as C11, linked to
 * libxport_c only. Runs the MLP torch exported (tests/python/c_api.py write: <dir>/mlp.pt2) on
 * torch's input (input.bin, f32 4x8) with the interpreter and the engine, row-major and as a
 * column-major view, against torch's result (expected.bin, f32 4x3); then each kind of error.
 *
 *   c_api_test <dir>
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ATen/dlpack.h> /* DLPack's own header, as LibTorch ships it */
#include <xport/c/xport.h>

static int failures = 0;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      ++failures;                                         \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);     \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, " (last error: %s)\n", xport_last_error_message()); \
    }                                                     \
  } while (0)

static int read_floats(const char* dir, const char* name, float* out, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  const size_t got = fread(out, sizeof(float), n, f);
  fclose(f);
  return got == n;
}

/* A borrowed float32 CPU tensor over `data` (the caller keeps it alive; no deleter). */
static DLManagedTensor tensor_of(float* data, int64_t* shape, int64_t* strides) {
  DLManagedTensor t;
  memset(&t, 0, sizeof t);
  t.dl_tensor.data = data;
  t.dl_tensor.device.device_type = kDLCPU;
  t.dl_tensor.ndim = 2;
  t.dl_tensor.dtype.code = kDLFloat;
  t.dl_tensor.dtype.bits = 32;
  t.dl_tensor.dtype.lanes = 1;
  t.dl_tensor.shape = shape;
  t.dl_tensor.strides = strides;
  return t;
}

/* Whether output 0 of a run equals torch's 4x3 result (as a strided DLPack tensor). */
static int equals_expected(const DLManagedTensor* out, const float* expected) {
  const DLTensor* t = &out->dl_tensor;
  if (t->ndim != 2 || t->shape[0] != 4 || t->shape[1] != 3 || t->dtype.code != kDLFloat || t->dtype.bits != 32) return 0;
  const float* data = (const float*)((const char*)t->data + t->byte_offset);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      const int64_t at = t->strides ? i * t->strides[0] + j * t->strides[1] : i * 3 + j;
      if (fabsf(data[at] - expected[i * 3 + j]) > 1e-5f) return 0;
    }
  return 1;
}

static void free_outputs(DLManagedTensor** outs, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (outs[i] && outs[i]->deleter) outs[i]->deleter(outs[i]);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: c_api_test <dir>\n");
    return 2;
  }
  const char* dir = argv[1];
  float input[32], expected[12], column_major[32];
  if (!read_floats(dir, "input.bin", input, 32) || !read_floats(dir, "expected.bin", expected, 12)) {
    fprintf(stderr, "cannot read %s/input.bin and expected.bin: run c_api_python_writes first\n", dir);
    return 2;
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) column_major[j * 4 + i] = input[i * 8 + j];

  char path[4096];
  snprintf(path, sizeof path, "%s/mlp.pt2", dir);
  xport_program* p = NULL;
  CHECK(xport_program_load(path, &p) == XPORT_OK, "load %s", path);
  if (!p) return 1;
  CHECK(strcmp(xport_version(), "") != 0, "version");
  CHECK(xport_program_num_inputs(p) == 1 && strcmp(xport_program_input_name(p, 0), "x") == 0, "input names");
  CHECK(xport_program_num_outputs(p) == 2 && xport_program_output_name(p, 2) == NULL, "output names");
  char* text = NULL;
  CHECK(xport_program_print(p, &text) == XPORT_OK && strncmp(text, "ExportedProgram:", 16) == 0, "print");
  xport_string_free(text);

  xport_engine* e = NULL;
  CHECK(xport_engine_create(p, 1, &e) == XPORT_OK, "engine");
  int64_t shape[2] = {4, 8}, rows[2] = {8, 1}, cols[2] = {1, 4};
  DLManagedTensor row_major = tensor_of(input, shape, rows), col_major = tensor_of(column_major, shape, cols);
  DLManagedTensor* layouts[2] = {&row_major, &col_major};
  for (int k = 0; k < 2; ++k) {
    DLManagedTensor* in[1] = {layouts[k]};
    DLManagedTensor* out[2] = {NULL, NULL};
    CHECK(xport_program_run(p, in, 1, out, 2) == XPORT_OK && equals_expected(out[0], expected), "interpreter, layout %d", k);
    free_outputs(out, 2);
    DLManagedTensor* out2[2] = {NULL, NULL};
    CHECK(xport_engine_run(e, in, 1, out2, 2) == XPORT_OK && equals_expected(out2[0], expected), "engine, layout %d", k);
    free_outputs(out2, 2);
  }

  /* errors: a status, this thread's id and message */
  int64_t wrong[2] = {4, 5}, wrong_strides[2] = {5, 1};
  DLManagedTensor narrow = tensor_of(input, wrong, wrong_strides);
  DLManagedTensor* bad_in[1] = {&narrow};
  DLManagedTensor* out[2] = {NULL, NULL};
  CHECK(xport_program_run(p, bad_in, 1, out, 2) == XPORT_ERROR_GUARD && strncmp(xport_last_error_id(), "xport.guard.", 12) == 0,
        "a wrong shape is a guard error");
  CHECK(out[0] == NULL, "no output after an error");
  DLManagedTensor* in[1] = {&row_major};
  CHECK(xport_program_run(p, in, 1, out, 1) == XPORT_ERROR_ARGUMENT && strcmp(xport_last_error_id(), "xport.c.argument") == 0,
        "a wrong output count");
  CHECK(xport_program_run(p, NULL, 1, out, 2) == XPORT_ERROR_ARGUMENT, "NULL inputs");
  xport_program* missing = NULL;
  CHECK(xport_program_load("/nonexistent/model.pt2", &missing) == XPORT_ERROR_LOAD && missing == NULL &&
            strcmp(xport_last_error_id(), "xport.load.open") == 0 &&
            strncmp(xport_last_error_message(), "[xport.load.open] ", 18) == 0,
        "a missing file");
  xport_engine_free(e);
  xport_program_free(p);
  xport_program_free(NULL);
  if (failures) return 1;
  printf("the C API from C: the interpreter and the engine equal torch's result in both layouts; errors typed\n");
  return 0;
}
