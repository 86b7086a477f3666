"""Programs torch.export wrote, for xport to load (ctest `oracle_python_writes`).

    python3 pt2_fixtures.py <dir>

Exports and torch.export.save's, into <dir>:
  - every case of twins.CASES (the Python twins of xport's C++ test programs), and the real
    models of twins.MODELS again in train mode and through run_decompositions();
  - programs for what the .pt2 format carries: dynamic dims (Dim, 2*batch, size arithmetic with
    floordiv and sym_max), buffer and user-input mutation, lifted constants, dict / list / int /
    float / str inputs, kwargs, an unused input, a -inf mask, nested outputs;
  - a model calling custom operators (xport_ops.py's GatedBlock, its ops registered in Python with
    the schemas tests/custom_ops.hpp registers in C++), with dynamic batch and sequence;
  - programs with torch.cond (loaded, run on both branches, printed as torch prints them) and
    torch.while_loop (run for zero, one and many iterations) and torch.map;
  - programs with data-dependent sizes (nonzero, boolean-mask indexing, item() bounded by
    torch._check, a gated mixture of experts routing with nonzero): unbacked symbols and their
    _assert_scalar nodes;
  - quantized programs, as PT2E writes them (quantized_fixtures.py); out_dtype calls; complex
    scalars;
  - programs with content xport does not read (torch.vmap's Python steps, a custom object, a
    tensor subclass weight), whose load_errors tests/test_interop.cpp checks, and what torch does
    not write (torch_limits.py).
Each <name>.pt2 comes with <name>.io.pt (torch.save'd; the layout is in tests/test_interop.cpp):
the call, the outputs torch.export.load(<name>.pt2).module() gives for it (one thread, autograd
on, seeded), the buffers and inputs after it, and calls at other sizes for dynamic programs.
<dir>/index.json lists them, with what xport must read back (forward_arg_names, kwargs, inputs).
"""
import collections
import copy
import json
import os
import sys
import warnings
import zipfile

import torch
import torch.utils._pytree as pytree
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preserved  # noqa: E402  (a stack whose layers' call signatures torch preserves)
import pytree_types  # noqa: E402  (dataclasses, namedtuples and ModelOutput-like types, registered)
import twins  # noqa: E402  (owned by the twins' author: imported, never edited here)
import quantized_fixtures  # noqa: E402  (PT2E programs: torchao's quantizer)
import torch_limits  # noqa: E402  (the higher-order operators torch does not write)
import xport_ops  # noqa: E402  (registers the suite's custom operators, as tests/custom_ops.hpp does in C++)

Dim = torch.export.Dim
SEED = 5


def tensors(tree):
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def scans(ep):
    """Whether `ep` calls torch.scan: torch runs a scan with autograd on as a partitioned forward
    graph whose sums round differently in the last bit from the graph the program holds, so such
    a program runs under no_grad (as xport's does with autograd on: the same kernels)."""
    return any(n.target is torch.ops.higher_order.scan for n in ep.graph.nodes)


def call(path, args, kwargs):
    """What torch.export.load(path).module() gives for (args, kwargs), from the saved state."""
    args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
    ep = torch.export.load(path)
    module = ep.module()
    torch.manual_seed(SEED)
    with torch.set_grad_enabled(not scans(ep)):
        out = module(*args, **kwargs)
    # None outputs stay (pytree leaves, as the checkers count them); other leaves are tensors
    leaves = [t for t in pytree.tree_leaves(out) if t is None or isinstance(t, torch.Tensor)]
    return [None if t is None else t.detach().clone() for t in leaves], module, (args, kwargs)


def module_call_graph_json(path):
    """The module_call_graph torch.export.save wrote into the archive at `path`, as JSON."""
    with zipfile.ZipFile(path) as z:
        record = next(n for n in z.namelist() if n.endswith("/models/model.json"))
        return json.loads(z.read(record))["graph_module"]["module_call_graph"]


def unflatten_oracle(out):
    """What torch's unflatten gives of preserved_calls.pt2, for xport::unflatten (tests/test_interop.cpp):
    preserved_calls.unflatten.pt holds its modules, the local state names of layers.0, layers.0 called on
    its own, and the stack's outputs with layers.0 swapped for an eager layer holding layers.1's weights,
    whose program torch exports to preserved_layer.pt2 (C++ swaps that program in). Not in the index."""
    ep = torch.export.load(os.path.join(out, "preserved_calls.pt2"))
    unflat = torch.export.unflatten(ep)
    layer0 = unflat.get_submodule("layers.0")
    torch.manual_seed(1)
    x, gate = torch.randn(2, 5, 8), torch.rand(2, 5, 1)
    oracle = {"modules": [name for name, _ in unflat.named_modules()],
              "layer_state": sorted(name for name, _ in layer0.named_parameters()),
              "layer_args": [x, gate], "layer_outputs": [t.detach() for t in layer0(x, gate)]}
    swap = preserved.eager_layer(ep.state_dict, "layers.1").eval()
    torch.export.save(torch.export.export(swap, (x, gate)), os.path.join(out, "preserved_layer.pt2"))
    unflat.set_submodule("layers.0", swap)
    oracle["args"] = list(preserved.args())
    oracle["swapped_outputs"] = [t.detach() for t in pytree.tree_leaves(unflat(*oracle["args"]))]
    torch.save(oracle, os.path.join(out, "preserved_calls.unflatten.pt"))


class Writer:
    def __init__(self, out):
        self.out = out
        self.index = []
        os.makedirs(out, exist_ok=True)

    def add(self, name, ep, args, kwargs=None, extra=(), runs=True, printed=False, lowered=False):
        kwargs = kwargs or {}
        path = os.path.join(self.out, name + ".pt2")
        torch.export.save(ep, path)
        entry = {"name": name, "runs": runs}
        if any(e.signature is not None for e in ep.module_call_graph[1:]):  # preserved submodule calls
            entry["module_call_graph"] = module_call_graph_json(path)
        try:  # the module paths of torch's unflatten (xport::unflatten's tree, checked in tests/test_interop.cpp)
            entry["unflattened"] = [n for n, _ in torch.export.unflatten(torch.export.load(path)).named_modules()]
        except Exception:  # noqa: BLE001 (what torch cannot unflatten: no paths to compare)
            pass
        if pytree_types.has_python_types(args):  # Python objects in the example inputs: C++ cannot unpickle them
            entry["python_inputs"] = True
        if runs:
            outputs, module, after = call(path, args, kwargs)
            buffers = {k: v.detach().clone() for k, v in module.named_buffers() if v.dtype not in V3_DTYPES}
            io = {
                "args": pytree_types.plain(args), "kwargs": dict(kwargs), "outputs": outputs, "seed": SEED,
                "after": {"state": buffers, "inputs": [t.detach().clone() for t in tensors(after)]},
                "extra": [],
            }
            for a, kw in extra:
                io["extra"].append({"args": tuple(a), "kwargs": dict(kw), "outputs": call(path, a, kw)[0]})
            if lowered:  # torch's own lowering, run on the same call: what xport's must give
                # ("values": the same values, not the same program: a custom op writing a view,
                # whose base xport's lowering writes through instead of recording the view)
                low = os.path.join(self.out, name + ".lowered.pt2")
                lowered_ep = torch.export.load(path).run_decompositions()
                entry["printed_lowered"] = str(lowered_ep)  # in memory: a load would name the unused outputs
                entry["lowered_values_only"] = lowered == "values"
                torch.export.save(lowered_ep, low)
                if "module_call_graph" in entry:  # the boundaries as torch's lowering renames them
                    entry["lowered_module_call_graph"] = module_call_graph_json(low)
                outputs, module, after = call(low, args, kwargs)
                io["lowered"] = {"outputs": outputs,
                                 "after": {"state": {k: v.detach().clone() for k, v in module.named_buffers()},
                                           "inputs": [t.detach().clone() for t in tensors(after)]}}
                os.remove(low)
            torch.save(io, os.path.join(self.out, name + ".io.pt"))
            sig = ep.module_call_graph[0].signature
            entry.update(forward_arg_names=list(sig.forward_arg_names or []),
                         num_kwargs=sig.in_spec.child(1).num_children,
                         num_inputs=len(ep.graph_signature.input_specs))
        if printed:  # what print(ep) writes for the program torch loads back: xport's must match
            entry["printed"] = str(torch.export.load(path))
        self.index.append(entry)
        print(name, flush=True)

    def export(self, name, module, args, kwargs=None, dynamic_shapes=None, extra=(), decompose=False, printed=False,
               lowered=False, preserve=()):
        ep = torch.export.export(module, tuple(args), kwargs or {}, dynamic_shapes=dynamic_shapes,
                                 preserve_module_call_signature=tuple(preserve))
        if decompose:
            ep = ep.run_decompositions()
        self.add(name, ep, args, kwargs, extra, printed=printed, lowered=lowered)

    def close(self):
        with open(os.path.join(self.out, "index.json"), "w") as f:
            json.dump(self.index, f, indent=1)


# ---- programs for what the format carries -------------------------------------------------------

class SizeArithmetic(nn.Module):
    def forward(self, x, y):
        n = x.shape[0]
        z = x.view(n, -1, 2).sum(1)
        w = torch.cat([y[:n], y[n:]], 0)
        return z, w * 2, x.new_zeros(n // 2 + 1), x.new_ones(torch.sym_max(n, 3))


class OutDtype(nn.Module):
    """torch.ops.higher_order.out_dtype: an int8 matmul into int32, a float16 linear and
    convolution computed in float32 and cast back, a multiplication by a Python number."""

    def forward(self, a, b, x, w, img, k):
        from torch._higher_order_ops.out_dtype import out_dtype
        ops = torch.ops.aten
        i = out_dtype(ops.mm.default, torch.int32, a, b)
        h = out_dtype(ops.linear.default, torch.float16, x, w)
        c = out_dtype(ops.convolution.default, torch.float16, img, k, None, [1, 1], [1, 0], [1, 1], False, [0, 0], 1)
        m = out_dtype(ops.mul.Scalar, torch.float32, x, 0.3)
        return i + 1, h, c, m


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x):
        self.count.add_(x.sum(0))
        return self.fc(x) + self.count


class Bump(nn.Module):
    def forward(self, x, y):
        x.add_(y)
        return x * 2


class Lifted(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.arange(6.0).reshape(2, 3)  # a plain tensor attribute: a lifted constant
        self.register_buffer("scratch", torch.ones(3), persistent=False)

    def forward(self, x):
        return x @ self.table + self.scratch


class Structured(nn.Module):
    def forward(self, d, xs, n: int):
        y = d["a"] * n + d["b"] - xs[0] * xs[1]
        return {"sum": y.sum(), "y": y}, [y.abs(), y.exp()], y.mean()


class CausalMask(nn.Module):
    def forward(self, q):
        n = q.shape[1]
        scores = q @ q.transpose(1, 2)
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), -1)


class Scalars(nn.Module):
    def forward(self, x, k: int, f: float, tag: str, unused):
        return x * k + f if tag == "add" else x


class Keywords(nn.Module):
    def forward(self, x, *, scale, bias=None):
        return x * scale + (0 if bias is None else bias)


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(3, 3), nn.Tanh())

    def forward(self, x):
        return self.inner(x) + 1


# ---- torch.cond ---------------------------------------------------------------------------------

class Cond(nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


class CondLinear(nn.Module):
    """A branch that closes over the module's parameters (torch lifts them as operands), two
    operands, a result used after the cond."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, y):
        def true_fn(x, y):
            return (self.lin(x).cos() + y,)

        def false_fn(x, y):
            return (x.sin() - y,)

        return torch.cond(x.amax() > 0, true_fn, false_fn, (x, y))[0] * 2


class CondDynamic(nn.Module):
    """A cond on a dynamic batch: the branches' sizes are symbolic, one reads its batch size."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: (self.lin(x).cos(),), lambda x: (x.sin() * x.shape[0],), (x,))[0] + 1


# ---- torch.while_loop ---------------------------------------------------------------------------

class WhileLoop(nn.Module):
    def forward(self, it, x):
        return torch.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x.cos()), (it, x))


class WhileLoopRefine(nn.Module):
    """A recurrent refinement run as many steps as the input `steps` asks: the body closes over
    the module's parameters and an input (torch lifts them to additional_inputs)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, steps):
        def cond_fn(i, h):
            return i < steps

        def body_fn(i, h):
            return i + 1, torch.tanh(self.lin(h)) + x

        return torch.while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), torch.zeros_like(x)))[1] * 2


# ---- torch.map -----------------------------------------------------------------------------------

class MapRows(nn.Module):
    def forward(self, xs, y):
        return torch._higher_order_ops.map(lambda x, y: x.sin() + y, xs, y)


class MapLinear(nn.Module):
    """A row-wise block over the batch: the body closes over the module's parameters (torch
    appends them to pos_args) and returns two results, each stacked."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, xs, y):
        return torch._higher_order_ops.map(lambda row, y: (torch.relu(self.lin(row)) + y, row.sum()), xs, y)


class ScanSum(nn.Module):
    def forward(self, init, xs):
        return torch._higher_order_ops.scan(lambda c, x: (c + x, (c * x).clone()), init, xs)


class ScanRNN(nn.Module):
    """An Elman RNN over a [time, batch, features] sequence (tests/models.hpp ScanRNN in C++): the
    carry is the hidden state, each step's y its projection; the combine function closes over the
    module's parameters (torch lifts them to additional_inputs)."""

    def __init__(self):
        super().__init__()
        self.inp, self.rec, self.out = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, h0, xs):
        def step(h, x):
            nxt = torch.tanh(self.inp(x) + self.rec(h))
            return nxt, self.out(nxt)

        return torch._higher_order_ops.scan(step, h0, xs)


class ScanReverse(nn.Module):
    """torch.scan over dim 1 from the end, with a tuple carry and two ys."""

    def forward(self, s0, m0, xs):
        def step(c, x):
            s, m = c[0] + x, torch.maximum(c[1], x)
            return (s, m), (s * 2, x.sum())

        return torch._higher_order_ops.scan(step, (s0, m0), xs, dim=1, reverse=True)


# ---- data-dependent sizes: unbacked symbols (u0) and the _assert_scalar nodes that bound them -------


class MaskedSum(nn.Module):
    """Boolean-mask indexing: a size only the data knows (unbacked u0, with _assert_scalar nodes)."""

    def forward(self, x):
        return x[x > 0].sum() * 2


class Nonzero(nn.Module):
    """nonzero and a boolean mask, the data-dependent tensors returned as they are."""

    def forward(self, x):
        idx = torch.nonzero(x > 0)
        return idx.sum(0), x[x > 0] * 2


class ItemSlice(nn.Module):
    """item() read as an unbacked SymInt, bounded by torch._check, then used as a size."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= x.shape[0])
        return x[:k] + 1


class Unique(nn.Module):
    """torch.unique with inverse and counts: _unique2, its values and counts of u0 rows."""

    def forward(self, x):
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        return values * 2, inverse, counts


class ItemScale(nn.Module):
    """item() with no facts: u0 in VR[-int_oo, int_oo] (its range's ends written as null)."""

    def forward(self, x, n):
        return x * n.item()


class MoE(nn.Module):
    """A gated mixture of experts routing each token to its best expert with nonzero (top-1)."""

    def __init__(self, d=8, experts=3, hidden=16):
        super().__init__()
        self.gate = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))
                                     for _ in range(experts))

    def forward(self, x):
        probs = torch.softmax(self.gate(x), -1)
        weight, choice = probs.max(-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            idx = torch.nonzero(choice == i).squeeze(-1)
            out = out.index_add(0, idx, expert(x[idx]) * weight[idx].unsqueeze(-1))
        return out


# ---- content xport does not read ------------------------------------------------------------------


class Complex(nn.Module):
    """Python complex numbers as arguments (`as_complex`)."""

    def forward(self, x):
        return x * (1 + 2j) - 2j, x.add(-1.5 + 0.25j), torch.full((2,), 1e16 - 0.5j)


class SizeFloat(nn.Module):
    """A SymFloat: a dynamic size divided (`_operator.truediv`)."""

    def forward(self, x):
        return x * (x.shape[0] / 2)


class SizeBool(nn.Module):
    """A SymBool passed to an operator: a comparison of two dynamic sizes."""

    def forward(self, x, y):
        return x.new_ones(1) * (x.shape[0] > y.shape[0])


class SizeBoolLogic(nn.Module):
    """SymBools combined: `&` and `|` of comparisons (_operator.and_ / or_) and torch.sym_not."""

    def forward(self, x, y):
        s, t = x.shape[0], y.shape[0]
        return x * ((s > t) & (t > 3)), x * ((s > t) | (t > 3)), x * torch.sym_not(s > t)


class SizeScalars(nn.Module):
    """SymFloats and SymBools of every operation torch records on sizes: IntTrueDiv, ToFloat,
    FloatTrueDiv, FloatPow, sums, products, negation; Eq, Ne, <= of size expressions."""

    def forward(self, x, y):
        s, t = x.shape[0], y.shape[0]
        a = x * (s / 2 * 3)
        b = x * (s / t)
        c = x * (s / 2 + 1.5)
        d = x * (1.0 / s)
        e = x * (-(s / 4))
        f = x * (s * 0.1 - 2.0)
        g = x * (torch.sym_float(s) / t)
        h = x * (s / 2) ** 2
        i = y.new_ones(1) * (s == t)
        j = y.new_ones(1) * (s != 2 * t)
        k = y.new_ones(1) * (s <= t + 1)
        m = x * (torch.sym_float(x.shape[1]) ** 0.5)
        return a, b, c, d, e, f, g, h, i, j, k, m


class SizeRelation(nn.Module):
    """An assertion relating two symbols: `u0 <= s77` (torch._check of an item() against a size)."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k <= x.shape[0])
        torch._check(k >= 1)
        return x[:k] * 2


class SizeRelationSum(nn.Module):
    """An assertion relating a sum of data-dependent values to a size: `u0 + u1 + 2 <= s77`."""

    def forward(self, x, n):
        k = n[0].item()
        j = n[1].item() + 1
        torch._check(k + j <= x.shape[0] - 1)
        torch._check(k >= 1)
        torch._check(j >= 1)
        return x[:k] * 2, x[:j].sum(0)


class Batched(nn.Module):
    """torch.vmap, which torch writes as Python functions of torch._functorch.predispatch."""

    def forward(self, x, w):
        return torch.vmap(lambda r: r @ w)(x)


from torch._library.opaque_object import OpaqueBase, register_opaque_type  # noqa: E402


class Scale(OpaqueBase):  # an opaque (custom) object, lifted as a CUSTOM_OBJ input
    def __init__(self, k):
        self.k = k


register_opaque_type(Scale, typ="reference")


@torch.library.custom_op("xport_fixtures::scaled", mutates_args=())
def scaled(x: torch.Tensor, s: Scale) -> torch.Tensor:
    return x * s.k


@scaled.register_fake
def _(x, s):
    return torch.empty_like(x)


class UsesObject(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = Scale(3.0)

    def forward(self, x):
        return scaled(x, self.s)


def custom_object_program():
    return torch.export.export(UsesObject(), (torch.randn(3),))


def subclass_weight_program():
    from torch.testing._internal.two_tensor import TwoTensor

    class SubclassWeight(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(TwoTensor(torch.randn(3), torch.randn(3)))

        def forward(self, x):
            return x + self.w

    return torch.export.export(SubclassWeight(), (torch.randn(3),))


class NoGradBlock(nn.Module):
    """A `with torch.no_grad():` block (Llama's rotary embedding had one): wrap_with_set_grad_enabled."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            y = self.l(x) * 2
        return x + y, self.l(x).relu()


class AutocastBlock(nn.Module):
    """A `with torch.autocast(...)` block: wrap_with_autocast (bfloat16 on the CPU)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ self.w
        return y.float() + 1


class ThroughTo(nn.Module):
    """Buffers written through what returns them (transformers' static cache counts its tokens
    through `.to(...)`): `to` that converts nothing (to.device, to.dtype_layout, to.dtype),
    `contiguous()` of a contiguous buffer, a `reshape` that views; and one `to` that converts,
    whose write never reaches its buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros((), dtype=torch.int64))
        self.register_buffer("seen", torch.zeros((), dtype=torch.int64))
        self.register_buffer("m", torch.zeros(2, 3))
        self.register_buffer("k", torch.zeros(4, dtype=torch.int32))
        self.register_buffer("c", torch.zeros(6))

    def forward(self, x):
        t = self.n.to(device="cpu", dtype=torch.int64)
        t.add_(1)
        self.seen.to(x.device).add_(2)
        self.m.to(torch.float32).add_(x[:2, :3])
        self.m.contiguous().mul_(2)
        u = self.k.to(torch.int64)
        u.add_(5)
        self.c.view(2, 3).reshape(3, 2).add_(1)
        return x + t, u


class LowPrecision(nn.Module):
    """Pointwise, normalization, reduction and attention ops in float16 or bfloat16, whose
    lowerings compute in float32 where torch's do (opmath upcasts: Llama's MLP calls silu)."""

    def __init__(self):
        super().__init__()
        self.ln, self.rms, self.lin = nn.LayerNorm(16), nn.RMSNorm(16), nn.Linear(16, 16)
        self.gn, self.bn = nn.GroupNorm(4, 8), nn.BatchNorm2d(8)

    def forward(self, x, img):
        F = nn.functional
        q = x.view(2, 4, 16)
        return (F.silu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.softplus(x), F.mish(x), F.hardswish(x),
                F.hardsigmoid(x), F.elu(x), F.leaky_relu(x, 0.1), x.sigmoid() * x.tanh(), torch.softmax(x, -1),
                torch.log_softmax(x, -1), self.ln(x), self.rms(x), self.lin(x), x.mean(-1), x.var(-1), x.sum(-1),
                torch.logsumexp(x, -1), 1 - x, x.masked_fill(x > 0, 0.5), torch.addcmul(x, x, x, value=0.5),
                torch.lerp(x, x.flip(0), 0.25), x.rsqrt().nan_to_num(), x.clamp_min(-0.5), x.cumsum(0),
                self.gn(img), self.bn(img), F.interpolate(img, scale_factor=2.0, mode="nearest"),
                F.interpolate(img, scale_factor=2.0, mode="bilinear"), F.avg_pool2d(img, 2),
                F.scaled_dot_product_attention(q, q, q, is_causal=True))


# every dtype torch.export's schema numbers (torch/_export/serde/schema.py ScalarType)
SCHEMA_DTYPES = [torch.uint8, torch.int8, torch.uint16, torch.int16, torch.int32, torch.int64, torch.float16,
                 torch.float32, torch.float64, torch.complex32, torch.complex64, torch.complex128, torch.bool,
                 torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
                 torch.float8_e8m0fnu, torch.uint32, torch.uint64]


# dtypes torch.save writes with _rebuild_tensor_v3, which LibTorch's unpickler does not read: the
# io files carry them as their bytes (uint8)
V3_DTYPES = {torch.uint16, torch.uint32, torch.uint64, torch.complex32, torch.float8_e4m3fn, torch.float8_e5m2,
             torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.float8_e8m0fnu}


class Dtypes(nn.Module):
    """A buffer of every dtype the schema numbers, and a conversion of the input to each
    (`as_scalar_type` arguments, tensor metadata and weights of all 21); those the io files cannot
    carry are returned as their bytes (`view(torch.uint8)`)."""

    def __init__(self):
        super().__init__()
        for i, d in enumerate(SCHEMA_DTYPES):
            self.register_buffer(f"b{i}", (torch.arange(6).reshape(2, 3) % 3).to(d))

    def forward(self, x):
        def readable(t):
            return t.view(torch.uint8) if t.dtype in V3_DTYPES else t
        return tuple(readable(x.to(d)) for d in SCHEMA_DTYPES) + tuple(readable(getattr(self, f"b{i}").clone())
                                                                       for i in range(len(SCHEMA_DTYPES)))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # as xport runs them: one summation order
    w = Writer(sys.argv[1])

    for name, make in twins.CASES.items():
        module, args, kwargs, dynamic = make()
        w.export(name, module, args, kwargs, dynamic)
    for name, make in twins.MODELS.items():
        module, args, kwargs, dynamic = make()
        w.export(name + "_core_aten", module, args, kwargs, dynamic, decompose=True)
        module, args, kwargs, dynamic = make()
        module.train(True)
        w.export(name + "_train", module, args, kwargs, dynamic)

    torch.manual_seed(0)
    batch = Dim("batch", min=4, max=64)
    w.export("size_arithmetic", SizeArithmetic(), (torch.randn(8, 4), torch.randn(16, 4)),
             dynamic_shapes={"x": {0: batch}, "y": {0: 2 * batch}},
             extra=[((torch.randn(6, 4), torch.randn(12, 4)), {}), ((torch.randn(33, 4), torch.randn(66, 4)), {})])
    w.export("size_arithmetic_core_aten", SizeArithmetic(), (torch.randn(8, 4), torch.randn(16, 4)),
             dynamic_shapes={"x": {0: batch}, "y": {0: 2 * batch}}, decompose=True,
             extra=[((torch.randn(10, 4), torch.randn(20, 4)), {})])
    mlp = twins.MODELS["mlp"]()[0]
    w.export("dim_batch", mlp, (torch.randn(5, 16),), dynamic_shapes={"x": {0: Dim("batch", max=1024)}},
             extra=[((torch.randn(1, 16),), {}), ((torch.randn(300, 16),), {})])
    w.export("buffer_mutation", Counter(), (torch.randn(3, 4),))
    w.export("buffer_mutation_core_aten", Counter(), (torch.randn(3, 4),), decompose=True)
    w.export("input_mutation", Bump(), (torch.randn(4), torch.randn(4)))
    w.export("input_mutation_core_aten", Bump(), (torch.randn(4), torch.randn(4)), decompose=True)
    # xport's own lowering of a program torch wrote, run against torch's (buffers after included)
    w.export("through_to", ThroughTo(), (torch.randn(3, 4),), lowered=True)
    w.export("input_mutation_lowered", Bump(), (torch.randn(4), torch.randn(4)), lowered=True)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        torch.manual_seed(0)
        module = LowPrecision().eval().to(dtype)
        w.export("low_precision_" + str(dtype).split(".")[1], module,
                 (torch.randn(8, 16, dtype=dtype), torch.randn(2, 8, 6, 6, dtype=dtype)), lowered=True)
    w.export("dtypes", Dtypes(), (torch.arange(6.0).reshape(2, 3),))
    w.export("lifted_constant", Lifted(), (torch.randn(4, 2),))
    w.export("structured", Structured(), ({"a": torch.randn(3), "b": torch.randn(3)}, [torch.randn(3), torch.randn(3)], 2))
    w.export("causal_mask", CausalMask(), (torch.randn(2, 5, 4),))
    w.export("causal_mask_core_aten", CausalMask(), (torch.randn(2, 5, 4),), decompose=True)
    w.export("scalars", Scalars(), (torch.randn(3), 3, 0.25, "add", torch.randn(2)))
    w.export("keywords", Keywords(), (torch.randn(3),), {"scale": torch.randn(3), "bias": torch.randn(3)})
    w.export("nested_modules", Nested(), (torch.randn(2, 3),))
    # submodule call boundaries kept (module_call_graph signatures), also through run_decompositions
    w.export("preserved_calls", preserved.Stack().eval(), preserved.args(), preserve=preserved.PRESERVED, lowered=True)
    w.export("preserved_calls_core_aten", preserved.Stack().eval(), preserved.args(), preserve=preserved.PRESERVED,
             decompose=True)
    w.export("repeated_calls", preserved.Repeated(), (torch.randn(3, 4),))  # nn_module_stack keys `b.relu@1`
    unflatten_oracle(w.out)
    # regions under a mode: wrap_with_set_grad_enabled and wrap_with_autocast (inlined by run_decompositions)
    torch.manual_seed(0)
    # (autocast's `.float()` gives an _assert_tensor_metadata call whose dtype torch wrote by
    # keyword, `dtype = torch.bfloat16`: xport keeps which arguments were passed by keyword)
    for name, module in (("no_grad", NoGradBlock()), ("autocast", AutocastBlock())):
        w.export(name, module, (torch.randn(2, 4),), printed=True, lowered=True)  # lowered: autocast's casts
        w.export(name + "_core_aten", module, (torch.randn(2, 4),), decompose=True, printed=True)
    # pytree node types C++ does not have: kept by name and context, written back unchanged
    w.export("pytree_dataclass", pytree_types.Attend(), (pytree_types.AttnIn(torch.randn(2, 5), torch.ones(2, 5)),))
    w.export("pytree_containers", pytree_types.Containers(),
             (torch.randn(3), collections.OrderedDict(scale=torch.randn(3), shift=torch.randn(3))))

    torch.manual_seed(0)
    block = xport_ops.GatedBlock().eval()
    w.export("custom_ops_block", block, (torch.randn(2, 6, 32),),
             dynamic_shapes={"x": {0: Dim("batch", max=16), 1: Dim("seq", min=2, max=64)}},
             extra=[((torch.randn(5, 9, 32),), {}), ((torch.randn(1, 64, 32),), {})])
    w.export("custom_ops_block_core_aten", block, (torch.randn(3, 5, 32),), decompose=True)
    block.train(True)
    w.export("custom_ops_block_train", block, (torch.randn(2, 4, 32),))
    # custom ops that write to their arguments (auto_functionalized_v2 once lowered) and one with
    # an effect (with_effects and a TOKEN input and output once lowered)
    x, pos = torch.randn(2, 2, 4), torch.tensor([1, 4])
    w.export("custom_mutation", xport_ops.CacheWriter(), (x, pos), lowered="values")
    w.export("custom_mutation_core_aten", xport_ops.CacheWriter(), (x, pos), decompose=True, printed=True)
    w.export("effects", xport_ops.Logged(), (torch.randn(3),))
    w.export("effects_core_aten", xport_ops.Logged(), (torch.randn(3),), decompose=True, printed=True)
    # out_dtype: an operator computed in a wider type, its result cast to the one it names
    torch.manual_seed(0)
    a, b = torch.randint(-100, 100, (5, 16), dtype=torch.int8), torch.randint(-100, 100, (16, 3), dtype=torch.int8)
    x, wt = torch.randn(4, 8, dtype=torch.float16), torch.randn(6, 8, dtype=torch.float16)
    img, k = torch.randn(2, 3, 6, 6, dtype=torch.float16), torch.randn(4, 3, 3, 3, dtype=torch.float16)
    out_dtype_args = (a, b, x, wt, img, k)
    # (xport runs an input in its example's layout, Note [Inputs in the exported layout]: a
    # transposed float16 weight would give torch's result for a contiguous one, a GEMM of
    # another summation order than Python's call of the transposed one)
    layouts = [((a.t().contiguous().t(), b[:, :], torch.randn(4, 16, dtype=torch.float16)[:, ::2] * 4, -wt,
                 img.contiguous(memory_format=torch.channels_last), -k), {})]
    w.export("out_dtype", OutDtype(), out_dtype_args, extra=layouts, printed=True, lowered=True)
    w.export("out_dtype_core_aten", OutDtype(), out_dtype_args, extra=layouts, decompose=True, printed=True)
    # quantized programs (PT2E): torch's quantized_decomposed operators, which <xport/quantized.hpp> defines in C++
    quantized_fixtures.write(w)

    x = torch.randn(3)
    w.export("cond", Cond(), (x,), extra=[((x.abs() + 0.1,), {}), ((-x.abs() - 0.1,), {})], printed=True)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    w.export("cond_linear", CondLinear(), (x, y), extra=[((x.abs(), y), {}), ((-x.abs(), y), {})], printed=True)
    w.export("cond_dynamic", CondDynamic(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("n", max=64)}},
             extra=[((torch.randn(7, 3).abs(),), {}), ((-torch.randn(9, 3).abs(),), {})], printed=True)
    w.export("cond_linear_core_aten", CondLinear(), (x, y), extra=[((-x.abs(), y), {})], decompose=True, printed=True)
    x = torch.randn(3)
    w.export("while_loop", WhileLoop(), (torch.tensor(0), x), extra=[((torch.tensor(5), x), {}), ((torch.tensor(-4), x), {})],
             printed=True)
    torch.manual_seed(0)
    refine, x = WhileLoopRefine().eval(), torch.randn(2, 4)
    w.export("while_loop_refine", refine, (x, torch.tensor(3)), extra=[((x, torch.tensor(0)), {}), ((-x, torch.tensor(7)), {})])
    w.export("while_loop_refine_core_aten", refine, (x, torch.tensor(3)), extra=[((x.t().contiguous().t(), torch.tensor(5)), {})],
             decompose=True)
    w.export("map", MapRows(), (torch.randn(2, 3), torch.randn(3)), printed=True)
    torch.manual_seed(0)
    xs, y = torch.randn(4, 3), torch.randn(3)
    w.export("map_linear", MapLinear().eval(), (xs, y), extra=[((xs.t().contiguous().t(), -y), {})])
    w.export("map_linear_dynamic", MapLinear().eval(), (xs, y), dynamic_shapes={"xs": {0: Dim("rows", max=64)}, "y": None},
             extra=[((torch.randn(9, 3), y), {}), ((torch.randn(1, 3)[:, :], y), {})])
    w.export("map_linear_core_aten", MapLinear().eval(), (xs, y), decompose=True)
    w.export("scan", ScanSum(), (torch.randn(3), torch.randn(4, 3)), printed=True)
    torch.manual_seed(0)
    rnn, h0, seq = ScanRNN().eval(), torch.randn(2, 4), torch.randn(5, 2, 3)
    w.export("scan_rnn", rnn, (h0, seq), extra=[((-h0, seq.transpose(0, 1).contiguous().transpose(0, 1)), {})], printed=True)
    w.export("scan_rnn_dynamic", rnn, (h0, seq), dynamic_shapes={"h0": None, "xs": {0: Dim("time", max=64)}},
             extra=[((h0, torch.randn(9, 2, 3)), {}), ((h0, torch.randn(1, 2, 3)), {})])
    w.export("scan_rnn_core_aten", rnn, (h0, seq), extra=[((h0, seq[:, :, :]), {})], decompose=True)
    w.export("scan_reverse", ScanReverse(), (torch.zeros(3), torch.full((3,), -1e9), torch.randn(3, 6)), printed=True,
             extra=[((torch.ones(3), torch.zeros(3), torch.randn(3, 6).t().contiguous().t()), {})])
    x = torch.randn(5, 3)
    w.export("masked_sum", MaskedSum(), (x,), extra=[((-x.abs(),), {}), ((x.abs() + 0.5,), {})], printed=True)
    w.export("nonzero", Nonzero(), (torch.randn(6, 3),), extra=[((-torch.ones(6, 3),), {}), ((torch.randn(3, 6).t(),), {})],
             printed=True)
    x = torch.randn(8, 3)
    w.export("item_slice", ItemSlice(), (x, torch.tensor(3)), extra=[((x, torch.tensor(1)), {}), ((x.t().contiguous().t(), torch.tensor(8)), {})],
             printed=True)
    x = torch.randn(3)
    w.export("item_scale", ItemScale(), (x, torch.tensor(2)), extra=[((x, torch.tensor(-7)), {}), ((x, torch.tensor(0)), {})],
             printed=True)
    w.export("unique", Unique(), (torch.tensor([3, 1, 3, 2, 1, 1]),),
             extra=[((torch.tensor([5, 5, 5, 5, 5, 5]),), {}), ((torch.arange(12)[::2],), {})])
    torch.manual_seed(0)
    moe, x = MoE().eval(), torch.randn(10, 8)
    w.export("moe_nonzero", moe, (x,), extra=[((torch.randn(10, 8),), {}), ((torch.randn(20, 8)[::2],), {})])
    w.export("moe_nonzero_dynamic", moe, (x,), dynamic_shapes={"x": {0: Dim("tokens", max=256)}},
             extra=[((torch.randn(1, 8),), {}), ((torch.randn(37, 8),), {}), ((torch.randn(8, 40)[:, ::5],), {})])
    w.export("moe_nonzero_core_aten", moe, (x,), extra=[((torch.randn(10, 8),), {})], decompose=True)
    z = torch.randn(3, dtype=torch.cfloat)
    w.export("complex_scalar", Complex(), (z,), extra=[((torch.randn(6, dtype=torch.cfloat)[::2],), {})], printed=True,
             lowered=True)
    w.export("unsupported_vmap", Batched(), (torch.randn(3, 4), torch.randn(4, 2)))
    w.export("sym_float", SizeFloat(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("n", min=2, max=64)}},
             extra=[((torch.randn(9, 3),), {}), ((torch.randn(3, 10)[:, ::2].t(),), {})], printed=True, lowered="values")
    w.export("sym_bool", SizeBool(), (torch.randn(4), torch.randn(3)),
             dynamic_shapes={"x": {0: Dim("a", max=64)}, "y": {0: Dim("b", max=64)}},
             extra=[((torch.randn(2), torch.randn(7)), {}), ((torch.randn(5), torch.randn(5)), {})], printed=True,
             lowered="values")
    w.export("sym_bool_logic", SizeBoolLogic(), (torch.randn(5), torch.randn(4)),
             dynamic_shapes={"x": {0: Dim("a", min=2, max=64)}, "y": {0: Dim("b", min=2, max=64)}},
             extra=[((torch.randn(2), torch.randn(3)), {}), ((torch.randn(9), torch.randn(2)), {}),
                    ((torch.randn(3), torch.randn(7)), {})], printed=True, lowered="values")
    w.export("sym_scalars", SizeScalars(), (torch.randn(4, 3), torch.randn(2)),
             dynamic_shapes={"x": {0: Dim("n", min=2, max=64), 1: Dim("m", max=64)}, "y": {0: Dim("k", min=2, max=64)}},
             extra=[((torch.randn(10, 5), torch.randn(5)), {}), ((torch.randn(7, 2), torch.randn(3)), {}),
                    ((torch.randn(6, 8).t(), torch.randn(6)), {})], lowered="values")
    x = torch.randn(6, 2)
    w.export("size_relation", SizeRelation(), (x, torch.tensor(3)), dynamic_shapes={"x": {0: Dim("n", max=64)}, "n": None},
             extra=[((torch.randn(20, 2), torch.tensor(20)), {}), ((torch.randn(2, 9)[:, ::3].t(), torch.tensor(1)), {})],
             printed=True, lowered="values")
    w.export("size_relation_sum", SizeRelationSum(), (torch.randn(9, 2), torch.tensor([3, 2])),
             dynamic_shapes={"x": {0: Dim("n", max=64)}, "n": None},
             extra=[((torch.randn(30, 2), torch.tensor([20, 5])), {}), ((torch.randn(2, 4).t(), torch.tensor([1, 0])), {})],
             lowered="values")
    torch_limits.check()  # what torch writes of the higher-order operators xport does not read
    w.add("unsupported_custom_obj", custom_object_program(), (), runs=False)
    w.add("unsupported_pickled_weight", subclass_weight_program(), (), runs=False)
    w.close()
    print(f"{len(w.index)} programs written by torch {torch.__version__} to {sys.argv[1]}")


if __name__ == "__main__":
    main()
