"""Custom classes (torchbind) both ways with torch (ctest `torchbind_*`).

    python3 torchbind.py write <dir> <lib>   torch exports and saves programs holding one -> <dir>/py/
    python3 torchbind.py read <dir> <lib>    torch loads and runs what xport saved        <- <dir>/cpp/

<lib> is tests/torchbind/xport_test_classes.cpp built against the wheel: the class
xport_classes::RunningMean (update() changes it) and the operator xport_classes::scale_by_count taking
it. `write` exports a module holding one (its methods called as call_torchbind, the operator
taking it), non-strict, in the training IR (`stats.pt2`) and lowered by run_decompositions
(`stats_decomposed.pt2`: every call on the object in with_effects, ordered by a token), and
records what torch.export.load's program gives on two calls in a row (the second sees the first's
update) on the input `x()`. In between, the C++ suite `oracle_torchbind` (tests/test_serde.cpp)
loads both, runs them twice (equal, bit for bit), saves them to <dir>/cpp/ with their objects as
they stand, and records what its own load of that archive gives on one call; it also checks that
converts the module scripted (`stats_scripted.pt`, as TS2EPConverter does: `converted.pt2`), and
exports C++ code calling the object (`exported.pt2`, xport::call_method with the method's fake). `read` requires
torch.export.load of xport's archives to give what xport's own load of them gives.
"""
import json
import os
import sys

import torch


def x():
    return (torch.arange(15, dtype=torch.float32) * 0.37).sin().reshape(5, 3)


def register(lib):
    torch.ops.load_library(lib)

    @torch._library.register_fake_class("xport_classes::RunningMean")
    class FakeRunningMean:  # what export traces with: the object's state, fake
        def __init__(self, sum, count):
            self.sum = sum
            self.count = count

        @classmethod
        def __obj_unflatten__(cls, flat):
            return cls(**dict(flat))

        def update(self, x):
            return x - self.sum

        def normalize(self, x):
            return x - self.sum

        def mix(self, x, y):
            return x + y - self.sum

    @torch.library.register_fake("xport_classes::scale_by_count")
    def _(stats, x):
        return torch.empty_like(x)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stats = torch.classes.xport_classes.RunningMean(torch.zeros(3))
        self.proj = torch.nn.Linear(3, 3)

    def forward(self, x):
        centered = self.stats.update(x)
        y = self.proj(self.stats.normalize(x))
        return self.stats.mix(y, centered) + torch.ops.xport_classes.scale_by_count(self.stats, x)


class Outer(torch.nn.Module):
    """Model as a submodule: scripted, its object is attribute 'block.stats'."""

    def __init__(self):
        super().__init__()
        self.block = Model()

    def forward(self, x):
        return self.block(x).relu()


class Seen(torch.nn.Module):
    """Calls a method that returns an int: the conversion refuses it, naming the line."""

    def __init__(self):
        super().__init__()
        self.stats = torch.classes.xport_classes.RunningMean(torch.zeros(3))

    def forward(self, x):
        return x * self.stats.seen()


class MethodsOnly(torch.nn.Module):
    """Calls only the object's methods: loading it before the class is registered reaches the object."""

    def __init__(self):
        super().__init__()
        self.stats = torch.classes.xport_classes.RunningMean(torch.zeros(3))

    def forward(self, x):
        return self.stats.update(x)


def write(root, lib):
    register(lib)
    out = os.path.join(root, "py")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    ep = torch.export.export(Model(), (x(),), strict=False)
    programs = {"stats": ep, "stats_decomposed": ep.run_decompositions()}
    expected = {}
    for name, p in programs.items():
        torch.export.save(p, os.path.join(out, name + ".pt2"))
        m = torch.export.load(os.path.join(out, name + ".pt2")).module()
        expected[name] = [m(x()).tolist(), m(x()).tolist()]
        with open(os.path.join(out, name + ".txt"), "w") as f:
            f.write(str(p))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)
    torch.export.save(torch.export.export(MethodsOnly(), (x(),), strict=False), os.path.join(out, "methods_only.pt2"))
    # the module scripted inside another, for from_torchscript, and what torch's converter
    # (TS2EPConverter) makes of it: xport's conversion names state and object as it does
    scripted = torch.jit.script(Outer())
    scripted.save(os.path.join(out, "stats_scripted.pt"))
    from torch._export.converter import TS2EPConverter
    with open(os.path.join(out, "stats_scripted_converter.txt"), "w") as f:
        f.write(str(TS2EPConverter(scripted, (x(),)).convert()))
    torch.jit.script(Seen()).save(os.path.join(out, "seen_scripted.pt"))


def read(root, lib):
    register(lib)
    with open(os.path.join(root, "cpp", "expected.json")) as f:
        expected = json.load(f)
    assert sorted(expected) == ["converted", "exported", "stats", "stats_decomposed"], expected.keys()
    for name, want in expected.items():
        ep = torch.export.load(os.path.join(root, "cpp", name + ".pt2"))
        kinds = [s.kind.name for s in ep.graph_signature.input_specs]
        assert "CUSTOM_OBJ" in kinds, kinds
        got = ep.module()(x())
        if not torch.equal(got, torch.tensor(want)):
            raise SystemExit(f"{name}: torch's run of xport's archive differs: {got} vs {want}")
        print(f"{name}: torch.export.load of xport's archive runs equal to xport ({kinds})")


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2], sys.argv[3])
