"""Several programs in one archive, torch's side (ctest `package_*`; tests/test_package.cpp).

    python packages.py write <dir>    torch's package_pt2 writes torch_<version>.pt2 (+ .io.pt)
    python packages.py read <dir>     torch's load_pt2 reads what xport wrote

write: a codec module with three entry points over one state (forward counts its calls in a
buffer, encode reads it, decode), each exported with torch.export, packaged with package_pt2
with extra files and an ExecuTorch record; the io file holds, for each call, what the program
loaded from the package gives (each on a fresh load: torch's loader shares no state between
programs).

write also scripts a module with control flow on data (torch_<version>.gated.ts.pt: a branch
and a while loop on tensors' contents) with what TS2EPConverter makes of it, and scripts the
codec (torch.jit.script, encode and decode @torch.jit.export) into
torch_<version>.ts.pt with an extra file, and records the state torch's own converter
(TS2EPConverter) lifts from it, for xport's converter (from_torchscript) to match; scripts
torchvision's resnet18 and mobilenet_v3_small where torchvision imports (tv_<name>_<version>.ts.pt),
and traces modules that read a size (torch_<version>.traced.pt, torch_<version>.row_mean.traced.pt)
and transformers' BERT where transformers imports (hf_bert_<version>.traced.pt; xport's conversion
of it, xport_from_ts_hf_bert_<version>.pt2, runs in torch equal to the traced module).

read: xport_codec.pt2 (xport's package of its C++ twin of the codec), xport_modes.pt2 (a
method exported in train and in eval mode, `forward.train` / `forward.eval`) and every
xport_resaved_<version>.pt2 (torch's packages loaded and saved again by xport): load_pt2 reads
each, every program gives xport's outputs bit for bit (and torch's own, for the re-saves), the
extra files are there, the records xport does not read are kept, and a storage the programs of
xport's package share is one record. Run by torch 2.13 and by the 2.14.1 venv where it exists.
Exits non-zero with one line per failure.
"""
import os
import sys
import zipfile

import torch
from torch import nn
from torch.export.pt2_archive._package import load_pt2, package_pt2

VERSION = torch.__version__.split("+")[0]
failures = []


class Codec(nn.Module):
    """The Python twin of tests/test_package.cpp's Codec."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 4)
        self.decoder = nn.Linear(4, 8)
        self.register_buffer("scale", torch.full((8,), 0.5))
        self.register_buffer("calls", torch.zeros(1, dtype=torch.int64))

    @torch.jit.export
    def encode(self, x):
        return torch.relu(self.encoder(x)) + self.calls

    @torch.jit.export
    def decode(self, z):
        return self.decoder(z) * self.scale

    def forward(self, x):
        self.calls.add_(1)
        return self.decode(torch.relu(self.encoder(x)))


def export_method(module, method, args):
    """torch.export of one method: the module's forward is that method while it exports."""
    module.forward = getattr(module, method)
    try:
        return torch.export.export(module, args)
    finally:
        del module.forward


def fresh_call(path, method, args):
    contents = load_pt2(path)
    out = contents.exported_programs[method].module()(*args)
    out = list(out.values()) if isinstance(out, dict) else out
    return [t.detach().clone() for t in (out if isinstance(out, (list, tuple)) else [out])]


def write(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(11)
    codec = Codec().eval()
    x, z = torch.randn(2, 8), torch.randn(3, 4)
    programs = {m: export_method(codec, m, (a,)) for m, a in (("forward", x), ("encode", x), ("decode", z))}
    extra = {"config.json": '{"in": 8, "hidden": 4}', "tokenizer/vocab.txt": "a\nb\n"}
    executorch = {"model.pte": b"pte bytes"}
    path = os.path.join(out, f"torch_{VERSION}.pt2")
    package_pt2(path, exported_programs=programs, extra_files=extra, executorch_files=executorch)
    calls = [{"method": m, "args": (a,), "kwargs": {}, "outputs": fresh_call(path, m, (a,))}
             for m, a in (("forward", x), ("encode", x), ("encode", 2 * x), ("decode", z))]
    write_torchscript(out, x)
    write_gated(out, x)
    write_torchscript_models(out)
    torch.save({"methods": sorted(programs), "extra_files": extra,
                "executorch_files": {k: v.decode() for k, v in executorch.items()}, "calls": calls},
               os.path.join(out, f"torch_{VERSION}.io.pt"))


def write_torchscript(out, x):
    """The codec scripted, with the state TS2EPConverter lifts from it and the file's extra files."""
    from torch._export.converter import TS2EPConverter

    torch.manual_seed(12)
    scripted = torch.jit.script(Codec().eval())
    path = os.path.join(out, f"torch_{VERSION}.ts.pt")
    extra = {"config.json": '{"scripted": true}'}
    torch.jit.save(scripted, path, _extra_files=extra)
    ep = TS2EPConverter(torch.jit.load(path), (x,)).convert()
    # (targets only: on a module torch.jit.load read back, the converter lifts its parameters as
    # buffers, where on the scripted module in memory it lifts them as parameters, as xport does)
    state = sorted(s.target for s in ep.graph_signature.input_specs if s.target is not None)
    torch.save({"state": state, "extra_files": extra}, os.path.join(out, f"torch_{VERSION}.ts.io.pt"))


class Gated(nn.Module):
    """Control flow on data, as C++ users' TorchScript holds it: a branch on a tensor's contents
    (torch.cond once converted) that reads a submodule, and a while loop on one (torch.while_loop)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        if bool(x.sum() > 0):
            y = self.proj(x) * 2.0
        else:
            y = torch.relu(self.proj(-x))
        return y

    @torch.jit.export
    def spin(self, x):
        while bool(x.sum() < 100):
            x = x * 2
        return x


def write_gated(out, x):
    """torch_<version>.gated.ts.pt, and what TS2EPConverter makes of its forward: the state it
    lifts and the higher-order ops it calls (torch_<version>.gated.io.pt)."""
    from torch._export.converter import TS2EPConverter

    torch.manual_seed(14)
    path = os.path.join(out, f"torch_{VERSION}.gated.ts.pt")
    torch.jit.save(torch.jit.script(Gated().eval()), path)
    ep = TS2EPConverter(torch.jit.load(path), (x,)).convert()
    state = sorted(s.target for s in ep.graph_signature.input_specs if s.target is not None)
    ops = sorted({f"torch.ops.higher_order.{n.target.name()}" for n in ep.graph.nodes
                  if n.op == "call_function" and isinstance(n.target, torch._ops.HigherOrderOperator)})
    torch.save({"state": state, "higher_order": ops}, os.path.join(out, f"torch_{VERSION}.gated.io.pt"))


class Flatten(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1) * 2


class RowMean(nn.Module):
    """A size used as a tensor once traced: x.sum(0) / x.size(0) divides by a 0-dim tensor."""

    def forward(self, x):
        return x.sum(0) / x.size(0)


def traced_bert(out):
    """transformers' BERT (random weights, two layers), traced as its docs say (torchscript=True)."""
    try:
        from transformers import BertConfig, BertModel
    except ImportError:
        return
    torch.manual_seed(15)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, torchscript=True)
    ids = torch.randint(0, 100, (2, 7))
    traced = torch.jit.trace(BertModel(config).eval(), (ids,), strict=False)
    torch.jit.save(traced, os.path.join(out, f"hf_bert_{VERSION}.traced.pt"))


def write_torchscript_models(out):
    """What C++ users hold: real models torch.jit.script saved (torchvision's, where this torch
    has it: the 2.14.1 venv), and a file torch.jit.trace saved (sizes as tensors)."""
    torch.jit.save(torch.jit.trace(Flatten(), (torch.randn(2, 3, 4),)), os.path.join(out, f"torch_{VERSION}.traced.pt"))
    torch.jit.save(torch.jit.trace(RowMean(), (torch.randn(2, 3),)), os.path.join(out, f"torch_{VERSION}.row_mean.traced.pt"))
    traced_bert(out)
    try:
        import torchvision
    except ImportError:
        return
    for name in ("resnet18", "mobilenet_v3_small"):
        torch.manual_seed(13)
        model = getattr(torchvision.models, name)(weights=None).eval()
        torch.jit.save(torch.jit.script(model), os.path.join(out, f"tv_{name}_{VERSION}.ts.pt"))


def check_converted(out, f):
    """xport_from_ts_<version>.pt2: every program, loaded by load_pt2, gives what the TorchScript
    module it came from gives (each on a fresh load of both)."""
    tag = f[len("xport_from_ts_"):-len(".pt2")]
    if tag.startswith("tv_"):  # a torchvision model's forward (one program, "model"), at another batch
        ts, calls = os.path.join(out, f"{tag}.ts.pt"), (("model", "forward", torch.randn(3, 3, 64, 64)),)
    elif tag.startswith("hf_bert_"):  # transformers' BERT, traced: last_hidden_state, pooler_output; other batches and lengths
        ts, calls = os.path.join(out, f"{tag}.traced.pt"), (("model", "forward", torch.randint(0, 100, (3, 7))),
                                                               ("model", "forward", torch.randint(0, 100, (1, 30))))
    elif tag.startswith("gated_"):  # both sides of the branch, 0 and several loop iterations
        x = torch.randn(3, 8)
        ts = os.path.join(out, f"torch_{tag[len('gated_'):]}.gated.ts.pt")
        calls = (("forward", "forward", x.abs()), ("forward", "forward", -x.abs()),
                 ("spin", "spin", torch.rand(5, 8) * 0.1), ("spin", "spin", torch.rand(2, 8) * 50))
    else:
        ts = os.path.join(out, f"torch_{tag}.ts.pt")
        calls = tuple((m, m, a) for m, a in (("forward", torch.randn(3, 8)), ("encode", torch.randn(3, 8)),
                                              ("decode", torch.randn(5, 4))))
    for program, method, arg in calls:
        want = getattr(torch.jit.load(ts), method)(arg)
        want = list(want.values()) if isinstance(want, dict) else list(want) if isinstance(want, tuple) else [want]
        got = fresh_call(os.path.join(out, f), program, (arg,))
        same = torch.equal if not tag.startswith("hf_bert_") else lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        if len(got) != len(want) or not all(same(a, b) for a, b in zip(got, want)):
            failures.append(f"{f}: {method} does not give the TorchScript module's output")
    if tag.startswith("tv_"):  # the module tree came along: torch's unflatten nests the calls as the modules were
        unflat = torch.export.unflatten(load_pt2(os.path.join(out, f)).exported_programs["model"])
        script = torch.jit.load(ts)
        owners = {n for n, m in script.named_children() if any(True for _ in m.parameters())}
        if not owners <= {n for n, _ in unflat.named_children()}:
            failures.append(f"{f}: unflatten() has submodules {sorted(n for n, _ in unflat.named_children())}, "
                            f"the TorchScript module {sorted(owners)}")
        arg = calls[0][2]
        if not torch.allclose(unflat(arg), script(arg), rtol=1e-5, atol=1e-6):
            failures.append(f"{f}: unflatten() does not give the TorchScript module's output")


def check(path, io, executorch=()):
    name = os.path.basename(path)
    try:
        contents = load_pt2(path)
    except Exception as e:  # noqa: BLE001  (any refusal is a failure to report)
        failures.append(f"{name}: load_pt2 failed: {type(e).__name__}: {e}")
        return
    want = sorted(c["method"] for c in io["calls"])
    if sorted(contents.exported_programs) != sorted(set(want)):
        failures.append(f"{name}: programs {sorted(contents.exported_programs)}, expected {sorted(set(want))}")
        return
    for call in io["calls"]:
        got = fresh_call(path, call["method"], call["args"])
        if len(got) != len(call["outputs"]) or not all(torch.equal(a, b) for a, b in zip(got, call["outputs"])):
            failures.append(f"{name}: {call['method']} does not give the expected outputs")
    for k, v in io["extra_files"].items():
        if contents.extra_files.get(k) != v:
            failures.append(f"{name}: extra file {k!r} is {contents.extra_files.get(k)!r}, expected {v!r}")
    with zipfile.ZipFile(path) as zf:
        names = [n.split("/", 1)[1] for n in zf.namelist()]
    for record in executorch:
        if record not in names:
            failures.append(f"{name}: record {record!r} was not kept")
    return names


def read(out):
    seen = 0
    xport_codec = os.path.join(out, "xport_codec.pt2")
    io = torch.load(os.path.join(out, "xport_codec.io.pt"))
    names = check(xport_codec, io, executorch=["data/executorch/model.pte"])
    if names is not None:
        seen += 1
        weights = [n for n in names if n.startswith("data/weights/weight_")]
        if len(weights) != 6:  # two Linears and two buffers, held by three programs
            failures.append(f"xport_codec.pt2: {len(weights)} weight records, expected 6 (one per storage)")
    modes = os.path.join(out, "xport_modes.pt2")  # forward.train / forward.eval over one state
    if check(modes, torch.load(os.path.join(out, "xport_modes.io.pt"))) is not None:
        seen += 1
    for f in sorted(os.listdir(out)):
        if f.startswith("xport_resaved_") and f.endswith(".pt2"):
            tag = f[len("xport_resaved_"):-len(".pt2")]
            io = torch.load(os.path.join(out, f"torch_{tag}.io.pt"))
            ex = ["data/executorch/" + k for k in io["executorch_files"]]
            if check(os.path.join(out, f), io, executorch=ex) is not None:
                seen += 1
        if f.startswith("xport_from_ts_") and f.endswith(".pt2"):
            check_converted(out, f)
            seen += 1
    if seen < 4:
        failures.append(f"only {seen} package(s) checked in {out}: expected xport_codec.pt2, xport_modes.pt2, a re-save "
                        "and a conversion")
    print(f"torch {VERSION}: {seen} xport package(s) read")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "read"):
        sys.exit(__doc__)
    (write if sys.argv[1] == "write" else read)(sys.argv[2])
    for f in failures:
        print(f"FAIL {f}")
    sys.exit(1 if failures else 0)
