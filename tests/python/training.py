"""A model exported in Python, trained in C++, returned to Python (ctest `training_*`).

    python3 training.py write <dir>   torch.export writes the twins, in train mode -> <dir>/py/
    python3 training.py read <dir>    checks what xport trained                    <- <dir>/cpp/

`write` also saves torch's joint graph (`_export_forward_backward`) of the MLP with its loss
beside the forward program (xport runs torch's and its own). It exports the Python twins (twins.py) of a real model each: an MLP, ResNet-18 with
BatchNorm in train mode, a Transformer encoder layer with dropout, a two-layer LSTM. In between,
the C++ suite `training_oracle` (tests/test_training.cpp) loads each archive, makes
`p.module()`, trains it with torch::optim for STEPS steps on the batches `batch()` defines
(dropout seeded per step), saves the trained program to <dir>/cpp/<name>.pt2 and its losses to
<dir>/cpp/<name>.losses.json. `read` trains the eager twin from the same weights in Python, with
the same optimizer, batches and seeds, and requires: xport's losses equal eager's, and
torch.export.load of xport's trained archive has eager's trained parameters and buffers and runs
to eager's outputs (all within 1e-4, relative to scale above 1).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import twins  # noqa: E402

STEPS = 100
TOL = 1e-4

# name: (twin, example input shape, loss, optimizer, learning rate, classes)
CASES = {
    "mlp": (twins.MLP, (8, 16), "mse", "sgd", 0.05, 0),
    "resnet18": (twins.ResNet18, (4, 3, 32, 32), "cross_entropy", "sgd", 0.01, 1000),
    "encoder": (twins.Encoder, (6, 3, 32), "mse", "sgd", 0.01, 0),  # Adam would magnify the
    # last-bit noise of the key bias's gradient (exactly zero: softmax ignores a shift) into 1e-3 steps
    "lstm": (twins.LSTMNet, (3, 5, 8), "mse", "adam", 1e-3, 0),
}


class WithLoss(torch.nn.Module):
    """A model and its loss in one program, what a joint graph differentiates."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, target):
        return torch.nn.functional.mse_loss(self.model(x), target)


def batch(shape, out_shape, classes, step):
    """Step `step`'s input and target, from formulas both languages compute alike (no RNG)."""
    n = 1
    for d in shape:
        n *= d
    x = (torch.arange(n, dtype=torch.float32) * 0.37 + step).sin().reshape(shape)
    if classes:
        t = (torch.arange(out_shape[0], dtype=torch.int64) * 7 + step) % classes
    else:
        m = 1
        for d in out_shape:
            m *= d
        t = (torch.arange(m, dtype=torch.float32) * 0.11 + step).cos().reshape(out_shape)
    return x, t


def first(y):
    return y[0] if isinstance(y, tuple) else y


def loss_of(kind, y, t):
    if kind == "mse":
        return torch.nn.functional.mse_loss(y, t)
    return torch.nn.functional.cross_entropy(y, t)


def optimizer(kind, params, lr):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)


def write(root):
    out = os.path.join(root, "py")
    os.makedirs(out, exist_ok=True)
    index = {"steps": STEPS, "cases": {}}
    for name, (cls, shape, loss, opt, lr, classes) in CASES.items():
        torch.manual_seed(0)
        model = cls().train()
        x = torch.randn(*shape)
        with torch.no_grad():
            out_shape = list(first(model(x)).shape)
        torch.manual_seed(0)
        model = cls().train()
        ep = torch.export.export(model, (x,))
        torch.export.save(ep, os.path.join(out, name + ".pt2"))
        index["cases"][name] = {"input": list(shape), "output": out_shape, "loss": loss, "optimizer": opt,
                                "lr": lr, "classes": classes}
    # the joint graph: torch's _export_forward_backward of the MLP with its loss, and the forward
    # program it came from (xport makes its own joint graph of that and runs torch's)
    torch.manual_seed(0)
    net = WithLoss(twins.MLP())
    x, t = batch((8, 16), (8, 4), 0, 0)
    ep = torch.export.export(net, (x, t))
    torch.export.save(ep, os.path.join(out, "mlp_loss.pt2"))
    from torch.export.experimental import _export_forward_backward
    torch.export.save(_export_forward_backward(ep, 0), os.path.join(out, "mlp_joint.pt2"))
    index["joint"] = {"forward": "mlp_loss.pt2", "joint": "mlp_joint.pt2", "input": [8, 16], "output": [8, 4]}
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    print(f"training.py: wrote {len(CASES)} archives to {out}")


def close(a, b):
    scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
    return a.shape == b.shape and (a.double() - b.double()).abs().max().item() <= TOL * scale if b.numel() else True


def run_joint(ep, user):
    """A joint program's outputs (loss, gradients) on `user`: through its graph, since torch's
    unlifted module of a joint program fails (its out_spec holds the loss alone)."""
    user = iter(user)
    args = [ep.state_dict[s.target] if s.kind == torch.export.graph_signature.InputKind.PARAMETER else next(user)
            for s in ep.graph_signature.input_specs]
    with torch.no_grad():
        return ep.graph_module(*args)


def read(root):
    torch.set_num_threads(1)
    with open(os.path.join(root, "py", "index.json")) as f:
        index = json.load(f)
    failures = []
    for name, case in index["cases"].items():
        cls = CASES[name][0]
        start = torch.export.load(os.path.join(root, "py", name + ".pt2"))
        model = cls().train()
        model.load_state_dict(start.state_dict, strict=True)
        opt = optimizer(case["optimizer"], model.parameters(), case["lr"])
        losses = []
        for s in range(index["steps"]):
            x, t = batch(case["input"], case["output"], case["classes"], s)
            opt.zero_grad()
            torch.manual_seed(1000 + s)
            loss = loss_of(case["loss"], first(model(x)), t)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        with open(os.path.join(root, "cpp", name + ".losses.json")) as f:
            xport_losses = json.load(f)
        bad = [s for s, (a, b) in enumerate(zip(xport_losses, losses)) if abs(a - b) > TOL * max(1.0, abs(b))]
        if len(xport_losses) != len(losses) or bad:
            failures.append(f"{name}: xport's losses differ from eager's from step {bad[0] if bad else '?'}")
            continue
        trained = torch.export.load(os.path.join(root, "cpp", name + ".pt2"))
        eager_state = dict(model.state_dict())
        for fqn, t in trained.state_dict.items():
            if fqn not in eager_state or not close(t.detach(), eager_state[fqn].detach()):
                failures.append(f"{name}: torch.export.load of xport's trained archive: {fqn} is not eager's")
        x, _ = batch(case["input"], case["output"], case["classes"], index["steps"])
        torch.manual_seed(7)
        got = first(trained.module()(x))
        torch.manual_seed(7)
        want = first(model(x))
        if not close(got.detach(), want.detach()):
            failures.append(f"{name}: the trained archive's module runs to other outputs than eager's")
        print(f"training.py: {name}: {len(losses)} steps, loss {losses[0]:.5f} -> {losses[-1]:.5f}, equal to xport's; "
              f"torch.export.load runs the trained archive")
    # xport's joint graph of torch's forward program, run by torch: torch's own joint graph's results
    joint = index["joint"]
    x, t = batch(joint["input"], joint["output"], 0, 0)
    mine = torch.export.load(os.path.join(root, "cpp", "mlp_joint.pt2"))
    theirs = torch.export.load(os.path.join(root, "py", joint["joint"]))
    got, want = run_joint(mine, [x, t]), run_joint(theirs, [x, t])
    if len(got) != len(want) or not all(close(a.detach(), b.detach()) for a, b in zip(got, want)):
        failures.append("mlp_joint: torch runs xport's joint graph to other results than its own joint graph's")
    print(f"training.py: mlp_joint: torch runs xport's joint graph: loss {got[0].item():.6f} and {len(got) - 1} "
          f"gradients, as its own ({want[0].item():.6f})")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2])
