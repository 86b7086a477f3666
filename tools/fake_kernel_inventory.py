#!/usr/bin/env python3
"""The ATen operators whose fake (meta) kernel lives only in torch's Python, for one torch version.

torch.export runs every operator on fake tensors. In a Python process, an operator without a C++
Meta kernel in LibTorch gets one from torch's Python: `torch/_meta_registrations.py` registers
its meta functions (and decompositions used as meta) into the dispatcher's Meta key, and
FakeTensorMode implements some operators itself (`torch/_subclasses/fake_impls.py`: data-dependent
ones, factories). A C++ program linked against LibTorch alone has none of these: xport needs a
shape rule, a C++ port, a composite LibTorch can run on meta tensors, or its data-dependent
machinery for each one it meets.

    python3 tools/fake_kernel_inventory.py OUT.json     # write the inventory
    python3 tools/fake_kernel_inventory.py --check OUT.json   # fail unless OUT.json is current

Each entry: the operator (`aten::name.overload`), where torch's Python gives its fake kernel
(`meta`: a Python Meta registration, `fake`: FakeTensorMode's own), and whether LibTorch has a
composite kernel for it (CompositeExplicitAutograd: it may run on meta tensors in C++).
tests/test_export.cpp reads it and says, for the running LibTorch, how xport covers each one.
"""
import json
import re
import sys

import torch
import torch._meta_registrations  # noqa: F401  (registers the Python meta kernels)
from torch._subclasses import fake_impls

KERNEL = re.compile(r"^(\w+)(?:\[alias\])?: registered at (\S+)")


def kernels(name):
    """dispatch key -> where its kernel was registered (a .cpp file, or a .py one)."""
    try:
        dump = torch._C._dispatch_dump(name)
    except RuntimeError:
        return None
    out = {}
    for line in dump.splitlines():
        m = KERNEL.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def from_python(where):
    return where is not None and where.split(":")[0].endswith(".py")


def fake_impl(op):
    if op in fake_impls.op_implementations_dict:
        return True
    return any(check(op) for check, _ in fake_impls.op_implementations_checks)


def inventory():
    rows = []
    aten = torch.ops.aten
    for packet_name in sorted(dir(aten)):
        packet = getattr(aten, packet_name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in sorted(packet.overloads()):
            op = getattr(packet, overload)
            name = op._schema.name + ("" if overload == "default" else "." + overload)
            k = kernels(name)
            if k is None or "CompositeImplicitAutograd" in k:
                continue  # decomposes before any kernel runs
            meta = k.get("Meta")
            if meta is not None and not from_python(meta):
                continue  # LibTorch's own C++ Meta kernel
            sources = (["meta"] if from_python(meta) else []) + (["fake"] if fake_impl(op) else [])
            if not sources:
                continue
            composite = any(key in k for key in ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"))
            rows.append({"op": name, "python": sources, "composite": composite})
    return {"torch": torch.__version__.split("+")[0], "ops": rows}


def main():
    args = sys.argv[1:]
    check = args[:1] == ["--check"]
    if check:
        args = args[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    data = inventory()
    # one operator a line: diffs stay readable
    text = ('{"torch": ' + json.dumps(data["torch"]) + ', "ops": [\n' +
            ",\n".join(json.dumps(r, sort_keys=True) for r in data["ops"]) + "\n]}\n")
    if check:
        with open(args[0]) as f:
            old = json.load(f)
        if old.get("torch") != data["torch"]:
            print(f"{args[0]} is of torch {old.get('torch')}, this is {data['torch']}: not compared")
            return
        if old != data:
            have, now = {r["op"] for r in old["ops"]}, {r["op"] for r in data["ops"]}
            sys.exit(f"{args[0]} is not current: {len(now - have)} operators new ({sorted(now - have)[:5]}...), "
                     f"{len(have - now)} gone; write it again: python3 tools/fake_kernel_inventory.py {args[0]}")
        print(f"{args[0]}: current ({len(data['ops'])} operators)")
        return
    with open(args[0], "w") as f:
        f.write(text)
    print(f"wrote {args[0]}: {len(data['ops'])} operators of torch {data['torch']}")


if __name__ == "__main__":
    main()
