"""The C API (<xport/c/xport.h>, libxport_c) from C and from Python's ctypes (ctest `c_api_*`).

    python3 c_api.py write <dir>          torch exports an MLP: <dir>/mlp.pt2, input.bin (f32 4x8),
                                          expected.bin (torch's f32 4x3 result on it)
    python3 c_api.py ctypes <dir> <lib>   loads the library with ctypes and runs the archive on NumPy
                                          arrays passed as DLPack, against torch

In between, tests/c_api/c_api_test.c (a C program) runs the same archive on input.bin. `ctypes`
passes NumPy arrays through their own DLPack capsules (borrowed: the library never calls their
deleter), contiguous, transposed and sliced, and receives the outputs as capsules NumPy takes
over (np.from_dlpack); it checks the results against torch's, the interpreter against the engine,
the engine from several threads at once, and each error's status, id and message.
"""
import ctypes
import os
import sys
import threading

import numpy as np
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x))), x.mean(0)


def model():
    torch.manual_seed(0)
    return MLP().eval()


def write(root):
    os.makedirs(root, exist_ok=True)
    m = model()
    batch = torch.export.Dim("batch", min=1, max=256)
    x = torch.randn(4, 8)
    ep = torch.export.export(m, (x,), dynamic_shapes={"x": {0: batch}})
    torch.export.save(ep, os.path.join(root, "mlp.pt2"))
    x.numpy().astype(np.float32).tofile(os.path.join(root, "input.bin"))
    with torch.no_grad():
        m(x)[0].numpy().astype(np.float32).tofile(os.path.join(root, "expected.bin"))


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

# Python's capsule functions, each typed as used here (a capsule object, or its address in a destructor)
CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
capsule_get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, CAPSULE_DESTRUCTOR)(
    ("PyCapsule_New", ctypes.pythonapi))
capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
capsule_ptr = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))


@CAPSULE_DESTRUCTOR
def _free_unconsumed(capsule):  # a capsule no consumer took: its tensor is freed here
    if capsule_is_valid(capsule, b"dltensor"):
        t = ctypes.cast(capsule_ptr(capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor))
        t.contents.deleter(t)


class Output:
    """An output of the library as NumPy takes it: np.from_dlpack(Output(ptr))."""

    def __init__(self, ptr):
        self.ptr = ptr

    def __dlpack__(self, **kwargs):
        return capsule_new(self.ptr, b"dltensor", _free_unconsumed)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


class Library:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        P = ctypes.c_void_p
        for name, res, args in [
            ("xport_version", ctypes.c_char_p, []),
            ("xport_last_error_id", ctypes.c_char_p, []),
            ("xport_last_error_message", ctypes.c_char_p, []),
            ("xport_program_load", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(P)]),
            ("xport_program_load_from_memory", ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(P)]),
            ("xport_program_free", None, [P]),
            ("xport_program_num_inputs", ctypes.c_size_t, [P]),
            ("xport_program_num_outputs", ctypes.c_size_t, [P]),
            ("xport_program_input_name", ctypes.c_char_p, [P, ctypes.c_size_t]),
            ("xport_program_output_name", ctypes.c_char_p, [P, ctypes.c_size_t]),
            ("xport_program_run", ctypes.c_int, [P, ctypes.POINTER(P), ctypes.c_size_t, ctypes.POINTER(P), ctypes.c_size_t]),
            ("xport_engine_create", ctypes.c_int, [P, ctypes.c_size_t, ctypes.POINTER(P)]),
            ("xport_engine_free", None, [P]),
            ("xport_engine_run", ctypes.c_int, [P, ctypes.POINTER(P), ctypes.c_size_t, ctypes.POINTER(P), ctypes.c_size_t]),
        ]:
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        self.lib = lib

    def error(self):
        return self.lib.xport_last_error_id().decode(), self.lib.xport_last_error_message().decode()

    def run(self, fn, handle, arrays, n_out):
        capsules = [a.__dlpack__() for a in arrays]  # kept alive through the call: the inputs are borrowed
        ins = (ctypes.c_void_p * len(arrays))(*[capsule_get(c, b"dltensor") for c in capsules])
        outs = (ctypes.c_void_p * n_out)()
        status = fn(handle, ins, len(arrays), outs, n_out)
        if status != 0:
            return status, None
        return 0, [np.from_dlpack(Output(outs[i])) for i in range(n_out)]


def ctypes_check(root, lib_path):
    lib = Library(lib_path)
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    m = model()
    prog = ctypes.c_void_p()
    check(lib.lib.xport_program_load(os.path.join(root, "mlp.pt2").encode(), ctypes.byref(prog)) == 0, "load")
    check(lib.lib.xport_program_num_inputs(prog) == 1 and lib.lib.xport_program_input_name(prog, 0) == b"x", "inputs")
    check(lib.lib.xport_program_num_outputs(prog) == 2 and lib.lib.xport_program_input_name(prog, 5) is None, "outputs")
    engine = ctypes.c_void_p()
    check(lib.lib.xport_engine_create(prog, 1, ctypes.byref(engine)) == 0, "engine")

    rng = np.random.default_rng(0)
    base = rng.standard_normal((16, 8), dtype=np.float32)
    layouts = {"contiguous": base[:6], "transposed": np.ascontiguousarray(base[:8].T).T[:, :8],
               "column-major": np.asfortranarray(base[:5]), "sliced rows": base[::2]}
    for name, x in layouts.items():
        with torch.no_grad():
            want = [t.numpy() for t in m(torch.from_numpy(np.ascontiguousarray(x)))]
        before = x.copy()
        for runner, handle in [("interpreter", prog), ("engine", engine)]:
            fn = lib.lib.xport_program_run if runner == "interpreter" else lib.lib.xport_engine_run
            status, got = lib.run(fn, handle, [x], 2)
            check(status == 0, f"{runner} on {name}: {status} {lib.error()}")
            if got:
                check(all(np.allclose(g, w, atol=1e-5) for g, w in zip(got, want)), f"{runner} on {name}: differs from torch")
                check(got[0].shape == (x.shape[0], 3) and got[1].shape == (8,), f"{runner} on {name}: shapes")
        check(np.array_equal(x, before), f"{name}: the input was changed")

    # the engine from several threads at once (ctypes releases the GIL during the call)
    x = base[:7]
    with torch.no_grad():
        want = m(torch.from_numpy(x))[0].numpy()
    results = [None] * 8

    def worker(k):
        for _ in range(20):
            status, got = lib.run(lib.lib.xport_engine_run, engine, [x], 2)
            results[k] = status == 0 and np.allclose(got[0], want, atol=1e-5)
            if not results[k]:
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(all(results), f"the engine from 8 threads: {results}")

    # errors: a status, an id and a message; nothing crosses as an exception
    status, _ = lib.run(lib.lib.xport_program_run, prog, [base[:, :5].copy()], 2)
    eid, msg = lib.error()
    check(status == 2 and eid.startswith("xport.guard.") and msg.startswith("[" + eid + "]"), f"guard: {status} {eid} {msg}")
    status, _ = lib.run(lib.lib.xport_program_run, prog, [x], 1)
    check(status == 4 and lib.error()[0] == "xport.c.argument" and "has 2 outputs, 1 asked for" in lib.error()[1],
          f"argument: {status} {lib.error()}")
    bad = ctypes.c_void_p()
    status = lib.lib.xport_program_load(os.path.join(root, "missing.pt2").encode(), ctypes.byref(bad))
    check(status == 1 and lib.error()[0] == "xport.load.open", f"load: {status} {lib.error()}")
    data = open(os.path.join(root, "mlp.pt2"), "rb").read()
    status = lib.lib.xport_program_load_from_memory(data[: len(data) // 2], len(data) // 2, ctypes.byref(bad))
    check(status == 1 and lib.error()[0].startswith("xport.load."), f"load from memory: {status} {lib.error()}")
    status = lib.lib.xport_program_load_from_memory(data, len(data), ctypes.byref(bad))
    check(status == 0, f"load from memory: {lib.error()}")
    lib.lib.xport_program_free(bad)
    lib.lib.xport_engine_free(engine)
    lib.lib.xport_program_free(prog)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"the C API from ctypes ({lib.lib.xport_version().decode()}): NumPy arrays in {len(layouts)} layouts through "
          "DLPack equal torch's results, the engine from 8 threads, every error typed")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        ctypes_check(sys.argv[2], sys.argv[3])
