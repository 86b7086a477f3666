"""What torch.export writes, and does not, of the higher-order operators xport does not read, checked
against the torch that runs (pt2_fixtures.py calls check(); `python3 torch_limits.py` alone too,
under any torch): each line is a reason, in docs/save-load.md, why xport needs no reader for it. If a
check fails, torch started writing the operator: xport should read it (ops/higher_order.hpp).

  - flex_attention (torch.nn.attention.flex_attention) and 2.14's switch: torch.export.save
    refuses them (SerializeError: a tuple of subgraphs and graph lists has no form in the schema);
  - invoke_subgraph (torch.compiler.nested_compile_region) and tag_activation_checkpoint
    (torch.utils.checkpoint): torch.export inlines them, non-strict; strict export of a checkpoint
    fails in torch;
  - associative_scan: on the CPU it runs as torch.vmap, which torch writes as Python functions of
    torch._functorch.predispatch (the fixture unsupported_vmap: xport refuses them by name).
"""
import importlib.util
import io

import torch
from torch import nn


def _saves(ep):
    try:
        torch.export.save(ep, io.BytesIO())
        return True
    except Exception as e:  # torch._export.serde.serialize.SerializeError
        if type(e).__name__ != "SerializeError":
            raise
        return False


def _targets(ep):
    return {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}


class _Flex(nn.Module):
    def forward(self, q, k, v):
        from torch.nn.attention.flex_attention import flex_attention
        return flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: s + (i - j))


class _Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        @torch.compiler.nested_compile_region
        def block(x, w):
            return torch.relu(x @ w) + 1
        return block(block(x, self.w), self.w)


class _Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(lambda y: torch.relu(self.lin(y)), x, use_reentrant=False)


class _Switch(nn.Module):
    def forward(self, i, x):
        from torch._higher_order_ops.switch import switch
        return switch(i, (lambda x: x + 1, lambda x: x * 2), (x,))


def check():
    q = torch.randn(1, 2, 8, 4)
    flex = torch.export.export(_Flex(), (q, q.clone(), q.clone()))
    assert "flex_attention" in str(flex.graph), "flex_attention is no longer a higher-order call"
    assert not _saves(flex), f"torch {torch.__version__} saves flex_attention now: xport should read it"
    for module in (_Nested(), _Checkpointed()):
        ep = torch.export.export(module, (torch.randn(3, 4),))
        hops = [t for t in _targets(ep) if "higher_order" in t]
        assert not hops, f"torch {torch.__version__} writes {hops} for {type(module).__name__}: xport should read it"
    if importlib.util.find_spec("torch._higher_order_ops.switch") is None:  # (torch 2.14 and newer)
        return
    sw = torch.export.export(_Switch(), (torch.tensor(1), torch.randn(3)))
    assert not _saves(sw), f"torch {torch.__version__} saves switch now: xport should read it"


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    check()
    print("torch", torch.__version__, ": flex_attention and switch are not saved; invoke_subgraph and checkpoints are inlined")
