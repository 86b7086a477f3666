"""The `xport` command-line tool end to end, against torch (ctest `cli_tool`).

    python3 cli.py <xport executable> <dir>

torch exports and saves small programs (a dynamic batch, sample inputs kept), scripts a module
for `convert`, and checks what each command prints or writes: `print` is torch's print(ep),
`info` counts torch's operators, `run` gives torch's sums on the same inputs (file, sample,
interpreter and engine), `decompose` / `optimize` / `convert` write archives torch loads and runs
equal to torch, `diff` finds the changes made, and mistakes exit 2 (an xport error, its id) or
129 (the command line, its usage), as docs/cli.md says.
"""
import collections
import os
import re
import subprocess
import sys

import torch

XPORT = sys.argv[1]
DIR = sys.argv[2]
failures = []


def xport(*args, code=0):
    r = subprocess.run([XPORT, *args], capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != code:
        failures.append(f"xport {' '.join(args)}: exit {r.returncode}, wanted {code}\n{r.stdout}{r.stderr}")
    return r


def check(cond, what):
    if not cond:
        failures.append(what)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 8)
        self.out = torch.nn.Linear(8, 3)
        self.register_buffer("scale", torch.full((3,), 0.5))

    def forward(self, x):
        return self.out(torch.relu(self.fc(x))) * self.scale, x.sum(1)


class Scripted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.fc(x))

    @torch.jit.export
    def encode(self, x):
        return self.fc(x) * 2


def path(name):
    return os.path.join(DIR, name)


def sums(t):
    d = t.detach().double()
    return d.sum().item(), d.abs().sum().item()


def printed_sums(text, name):
    m = re.search(re.escape(name) + r": \w+\[[\d, ]*\] sum=(\S+) abs_sum=(\S+)", text)
    return (float(m.group(1)), float(m.group(2))) if m else None


def close(a, b):
    return a is not None and b is not None and all(abs(x - y) <= 1e-5 * max(1.0, abs(y)) for x, y in zip(a, b))


def main():
    os.makedirs(DIR, exist_ok=True)
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(5, 4)
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(net, (x,), dynamic_shapes={"x": {0: batch}})
    torch.export.save(ep, path("net.pt2"))
    xs = torch.randn(7, 4)
    torch.save((xs,), path("inputs.pt"))
    want = net(xs)

    # help, version and the command line's mistakes (git's exit status 129)
    check("xport 0." in xport("--version").stdout, "--version")
    top = xport("--help").stdout
    for c in ["print", "info", "verify", "run", "bench", "dot", "decompose", "optimize", "diff", "convert"]:
        check(re.search(r"^   " + c + r"\b", top, re.M), f"--help lists {c}")
    check("usage: xport run" in xport("help", "run").stdout, "help run")
    xport(code=129)
    check("'frobnicate' is not an xport command" in xport("frobnicate", code=129).stderr, "unknown command")
    r = xport("run", "--bogus", path("net.pt2"), code=129)
    check("error: unknown option '--bogus'" in r.stderr and "usage: xport run" in r.stderr, "unknown option: " + r.stderr)
    check("too few arguments" in xport("diff", path("net.pt2"), code=129).stderr, "too few arguments")

    # bash completion from the command table
    script = xport("--completion", "bash").stdout
    for words, cword, completed in [("xport con", 1, "convert"), ("xport run --eng", 2, "--engine")]:
        r = subprocess.run(["bash", "-c", 'source /dev/stdin; COMP_WORDS=(' + words + '); COMP_CWORD=' + str(cword) +
                            '; _xport; echo "${COMPREPLY[@]}"'], input=script, capture_output=True, text=True)
        check(r.stdout.strip() == completed, f"completion of '{words}': {r.stdout!r} {r.stderr}")

    # print: torch's own print(ep)
    check(xport("print", path("net.pt2")).stdout == str(ep), "print differs from torch's print(ep)")

    # info: the signature, the state, the ranges, and torch's operator counts
    info = xport("info", path("net.pt2")).stdout
    counts = collections.Counter(str(n.target).replace("aten.", "torch.ops.aten.", 1) for n in ep.graph.nodes
                                 if n.op == "call_function")
    for target, k in counts.items():
        check(re.search(r"^\s+" + str(k) + r"  " + re.escape(target) + "$", info, re.M), f"info: {k} x {target}\n{info}")
    check(re.search(r"p_fc_weight\s+PARAMETER\s+f32\[8, 4\]\s+fc.weight", info), "info: a parameter line\n" + info)
    check(re.search(r"x\s+USER_INPUT\s+f32\[s\d+, 4\]", info), "info: the input line\n" + info)
    check(re.search(r"float32 on cpu\s+5 tensors\s+70 values", info), "info: the state by dtype\n" + info)
    check(re.search(r"s\d+: \[1, 64\]  \(batch\)", info) or re.search(r"s\d+: \[1, 64\]", info), "info: range\n" + info)

    # verify, and a broken archive: exit 2 with the error's id
    check("program 'model' ok" in xport("verify", path("net.pt2")).stdout, "verify")
    with open(path("net.pt2"), "rb") as f:
        data = f.read()
    with open(path("broken.pt2"), "wb") as f:
        f.write(data[: len(data) // 2])
    r = xport("verify", path("broken.pt2"), code=2)
    check(r.stderr.startswith("error: [xport.load."), "broken archive: " + r.stderr)

    # run: torch's sums on the same inputs, by file, sample inputs, the engine; random ones
    for args in [("--inputs", path("inputs.pt")), ("--inputs", path("inputs.pt"), "--engine")]:
        out = xport("run", *args, path("net.pt2")).stdout
        check(close(printed_sums(out, "mul"), sums(want[0])) and close(printed_sums(out, "sum_1"), sums(want[1])),
              f"run {args}: {out} vs torch {sums(want[0])} {sums(want[1])}")
    # --outputs: the tensors themselves, as torch.save writes them (torch.load reads them with weights_only)
    xport("run", "--inputs", path("inputs.pt"), "--outputs", path("outputs.pt"), path("net.pt2"))
    got = torch.load(path("outputs.pt"), weights_only=True)
    check(isinstance(got, tuple) and len(got) == 2 and all(torch.allclose(g, w, atol=1e-6) for g, w in zip(got, want)),
          f"run --outputs: {got} vs {want}")
    out = xport("run", "--inputs", "sample", path("net.pt2")).stdout
    check(close(printed_sums(out, "mul"), sums(net(x)[0])), "run --inputs sample: " + out)
    check("mul: f32[5, 3] sum=" in xport("run", path("net.pt2")).stdout, "run with random inputs")
    r = xport("run", "--inputs", path("missing.pt"), path("net.pt2"), code=2)
    check("[xport.cli.inputs] cannot open inputs file" in r.stderr, r.stderr)
    r = xport("run", "--inputs", path("inputs.pt"), "--device", "cuda", path("net.pt2"), code=0 if torch.cuda.is_available() else 2)
    check(torch.cuda.is_available() or "[xport.cli.device]" in r.stderr, "--device cuda without CUDA: " + r.stderr)

    # bench: both runners, median / min / max
    out = xport("bench", "--iters", "3", "--warmup", "1", "--threads", "1", path("net.pt2")).stdout
    check(re.search(r"interpreter, 1 threads\s+[\d.]+\s+[\d.]+\s+[\d.]+  \(3 calls\)", out) and "engine, 1 threads" in out,
          "bench: " + out)

    # dot
    xport("dot", "-o", path("net.dot"), path("net.pt2"))
    with open(path("net.dot")) as f:
        check(f.read().startswith("digraph"), "dot")

    # decompose and optimize: archives torch loads and runs equal to torch
    xport("decompose", path("net.pt2"), path("net_aten.pt2"))
    dec = torch.export.load(path("net_aten.pt2"))
    check(torch.allclose(dec.module()(xs)[0], want[0], atol=1e-6), "decompose: torch runs it equal")
    # torch's run_decompositions() makes the same calls (its node names can differ: with a dynamic batch
    # torch numbers a node after the size arithmetic it traced and dropped, `mul_6` for xport's `mul`)
    calls = lambda text: re.findall(r"= (torch\.ops\.[\w.]+)\(", text)
    check(calls(str(dec)) == calls(str(ep.run_decompositions())) and len(calls(str(dec))) > 3,
          "decompose: the calls of torch's run_decompositions()")
    xport("optimize", "--passes", "dce,cse", path("net.pt2"), path("net_opt.pt2"))
    check(torch.allclose(torch.export.load(path("net_opt.pt2")).module()(xs)[0], want[0], atol=1e-6), "optimize")
    r = xport("optimize", "--passes", "nope", path("net.pt2"), path("never.pt2"), code=2)
    check("[xport.passes.unknown] no pass named 'nope'" in r.stderr and not os.path.exists(path("never.pt2")), r.stderr)

    # diff: the same archive, then one with a weight changed and another operator
    check(xport("diff", path("net.pt2"), path("net.pt2")).stdout == "", "diff of an archive with itself")
    changed = Net().eval()
    changed.load_state_dict(net.state_dict())
    with torch.no_grad():
        changed.fc.weight[0, 0] += 1.0
    changed.forward = lambda x: (changed.out(torch.sigmoid(changed.fc(x))) * changed.scale, x.sum(1))
    torch.export.save(torch.export.export(changed, (x,), dynamic_shapes={"x": {0: batch}}), path("net2.pt2"))
    out = xport("diff", path("net.pt2"), path("net2.pt2"), code=1).stdout
    check("~ fc.weight: values differ (max abs difference 1)" in out, "diff: the weight\n" + out)
    check(re.search(r"^-.*torch\.ops\.aten\.relu\.default", out, re.M) and
          re.search(r"^\+.*torch\.ops\.aten\.sigmoid\.default", out, re.M), "diff: the graph\n" + out)
    check("fc.bias" not in out, "diff: an unchanged tensor listed\n" + out)

    # convert: a TorchScript file, one method (a program torch.export.load reads) and two (a package)
    scripted = torch.jit.script(Scripted())
    scripted.save(path("scripted.pt"))
    r = xport("print", path("scripted.pt"), code=2)
    check("[xport.cli.torchscript]" in r.stderr and "xport convert" in r.stderr, r.stderr)
    check("[xport.cli.torchscript]" in xport("verify", path("scripted.pt"), code=2).stderr, "verify of a TorchScript file")
    out = xport("convert", "--shape", "2,4", "--dynamic", "x.0=batch:1:64", path("scripted.pt"), path("scripted.pt2")).stdout
    check("program 'forward':" in out and "(translated)" in out, "convert says which route ran: " + out)
    conv = torch.export.load(path("scripted.pt2"))
    check(torch.allclose(conv.module()(xs), scripted(xs), atol=1e-6), "convert: torch runs it equal, at batch 7")
    xport("convert", "--method", "forward", "--method", "encode", "--shape", "2,4", "--dynamic", "x.0=batch",
          path("scripted.pt"), path("both.pt2"))
    info = xport("info", path("both.pt2")).stdout
    check("2 programs" in info and "program 'encode'" in info and "program 'forward'" in info, "package info\n" + info)
    out = xport("run", "--model", "encode", "--inputs", path("inputs.pt"), path("both.pt2")).stdout
    check(close(printed_sums(out, "mul"), sums(scripted.encode(xs))), "run --model encode: " + out)
    r = xport("run", "--outputs", path("o.pt"), path("both.pt2"), code=129)
    check("name one (--model NAME)" in r.stderr, "--outputs on a package: " + r.stderr)
    r = xport("run", "--model", "nope", path("both.pt2"), code=2)
    check("nope" in r.stderr and "encode" in r.stderr, "an unknown program names the package's: " + r.stderr)
    r = xport("convert", path("scripted.pt"), path("x.pt2"), code=129)
    check("give the example inputs" in r.stderr, r.stderr)

    if failures:
        print("\n\n".join(failures))
        sys.exit(1)
    print("the xport tool: every command as docs/cli.md says")


if __name__ == "__main__":
    main()
