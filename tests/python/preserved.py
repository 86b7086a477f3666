"""Module trees for torch's unflatten, shared by pt2_fixtures.py (which exports them) and
check_xport_archives.py (which unflattens what xport saved again): a stack whose layers' call
boundaries torch.export preserves (preserve_module_call_signature; a layer is swapped for an
eager one), and a block whose submodules are called more than once (`b.relu@1` in torch's
nn_module_stack). tests/test_interop.cpp reads the archives."""
import torch
from torch import nn

PRESERVED = ("layers.0", "layers.1")


class Layer(nn.Module):
    """A pre-norm MLP block with a gate input and two results; its last op is a Linear over a
    [batch, seq, features] input (linear in the training IR; view, addmm, view once lowered)."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x, gate):
        h = self.fc2(torch.relu(self.fc1(self.norm(x))))
        return x + h * gate, h


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        gate = torch.sigmoid(x.mean(-1, keepdim=True))
        for layer in self.layers:
            x, h = layer(x, gate)
            gate = gate * h.mean(-1, keepdim=True).tanh()
        return self.head(x), gate


def args():
    torch.manual_seed(0)
    return (torch.randn(2, 5, 8),)


def eager_layer(state, fqn):
    """A Layer holding `fqn`'s tensors of a program's state dict."""
    layer = Layer()
    layer.load_state_dict({k[len(fqn) + 1:]: v for k, v in state.items() if k.startswith(fqn + ".")})
    return layer


class Twice(nn.Module):
    """relu called twice in one call of the block; the block called twice."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Linear(4, 4)
        self.c2 = nn.Linear(4, 4)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.c2(self.relu(self.c1(x))) + x)


class Repeated(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = Twice()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        y = self.b(x)
        return self.head(self.b(y * 2))
