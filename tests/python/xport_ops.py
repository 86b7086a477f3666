"""The suite's operator library `xport_ops` in Python: the schemas and computations that
tests/custom_ops.hpp registers in C++ (TORCH_LIBRARY), registered with torch.library, with fake
(Meta) kernels; and GatedBlock, the Python twin of that header's model. Importing it registers
the operators (once): torch.export programs that use them then export, save, load and run here,
and xport's programs that use them load here.
"""
import math

import torch
from torch import nn

_lib = torch.library.Library("xport_ops", "DEF")
_lib.define("rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor")
_lib.define("fused_bias_gelu(Tensor x, Tensor bias) -> Tensor")
_lib.define("top_k_gate(Tensor logits, int k=2) -> (Tensor weights, Tensor indices)")
_lib.define("kv_write_(Tensor(a!) cache, Tensor pos, Tensor update) -> ()")
_lib.define("scale_add_(Tensor(a!) buf, Tensor x, float s) -> ()")
_lib.define("accumulate(Tensor x, Tensor(a!) total) -> Tensor")
_lib.define("log_stat(Tensor x, str tag) -> Tensor")


def _rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _fused_bias_gelu(x, bias):
    return torch.nn.functional.gelu(x + bias, approximate="tanh")


def _top_k_gate(logits, k=2):
    values, indices = torch.topk(logits, k, -1)
    return torch.softmax(values, -1), indices


def _kv_write_(cache, pos, update):
    cache.index_copy_(-2, pos, update)


def _scale_add_(buf, x, s):
    buf.mul_(s).add_(x)


def _accumulate(x, total):
    total.add_(x)
    return x * 2


def _log_stat(x, tag):
    return x.sum().reshape(1)


for _name, _fn in (("rms_norm", _rms_norm), ("fused_bias_gelu", _fused_bias_gelu), ("top_k_gate", _top_k_gate),
                   ("kv_write_", _kv_write_), ("scale_add_", _scale_add_), ("accumulate", _accumulate),
                   ("log_stat", _log_stat)):
    _lib.impl(_name, _fn, "CPU")


@torch.library.register_fake("xport_ops::accumulate")
def _(x, total):
    return torch.empty_like(x)


@torch.library.register_fake("xport_ops::log_stat")
def _(x, tag):
    return x.new_empty(1)


# log_stat has an effect: torch.export orders its calls with tokens (with_effects)
from torch._higher_order_ops.effects import _EffectType, _register_effectful_op  # noqa: E402

_register_effectful_op(torch.ops.xport_ops.log_stat.default, _EffectType.ORDERED)


@torch.library.register_fake("xport_ops::rms_norm")
def _(x, weight, eps=1e-6):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("xport_ops::fused_bias_gelu")
def _(x, bias):
    return x.new_empty(torch.broadcast_shapes(x.shape, bias.shape))


@torch.library.register_fake("xport_ops::top_k_gate")
def _(logits, k=2):
    shape = (*logits.shape[:-1], k)
    return logits.new_empty(shape), logits.new_empty(shape, dtype=torch.long)


ops = torch.ops.xport_ops


class CacheWriter(nn.Module):
    """tests/custom_ops.hpp's CacheWriter: buffers written by the in-place custom ops."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 6, 4))
        self.register_buffer("running", torch.zeros(2, 4))
        self.register_buffer("total", torch.zeros(2, 4))

    def forward(self, x, pos):
        ops.kv_write_(self.cache, pos, x)
        ops.scale_add_(self.running, x.sum(0), 0.5)
        ops.scale_add_(self.running[1:2], x[0][:1], 2.0)
        y = ops.accumulate(x.sum(1), self.total)
        return y + self.cache.sum(1)


class Logged(nn.Module):
    """Two calls of log_stat, the op with an effect: with_effects and a token once lowered."""

    def forward(self, x):
        a = ops.log_stat(x, "first")
        y = x * 2
        b = ops.log_stat(y, "second")
        return y + a + b


class Expert(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d)
        self.up_bias = nn.Parameter(torch.randn(hidden) * 0.1)

    def forward(self, x):
        return self.down(ops.fused_bias_gelu(self.up(x), self.up_bias))


class GatedBlock(nn.Module):
    """x [batch, seq, d] -> x + causal attention(rms_norm(x)), then + a dense top-2 mixture of experts."""

    def __init__(self, d=32, heads=4, experts=4, hidden=64):
        super().__init__()
        self.d, self.heads = d, heads
        self.norm1 = nn.Parameter(torch.ones(d) + torch.randn(d) * 0.1)
        self.norm2 = nn.Parameter(torch.ones(d) + torch.randn(d) * 0.1)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(Expert(d, hidden) for _ in range(experts))

    def forward(self, x):
        b, t = x.shape[0], x.shape[1]
        dh = self.d // self.heads
        h = ops.rms_norm(x, self.norm1)
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), -1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, self.d))
        h = ops.rms_norm(x, self.norm2)
        weights, chosen = ops.top_k_gate(self.router(h), 2)
        mixed = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            mixed = mixed + (weights * (chosen == e)).sum(-1, keepdim=True) * expert(h)
        return x + mixed
