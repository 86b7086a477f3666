"""Python twins of xport's C++ test programs: the models of tests/models.hpp and the ExportDB
gallery of examples/exportdb, with the same structure, FQNs and ATen calls (cpp_nn.py supplies
modules that call what LibTorch's C++ frontend calls). torch.export.export of a twin is the
oracle for xport's export of the C++ original (print_diff.py), and the twins are the programs
the Python-written .pt2 fixtures hold.

CASES maps a case name to a function returning (module, args, kwargs, dynamic_shapes); the
C++ side names its cases the same way (tests/test_twins.cpp).
"""
import torch
from torch import nn

import cpp_nn

Dim = torch.export.Dim


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(cpp_nn.Linear(16, 32), nn.ReLU(), cpp_nn.Linear(32, 32), nn.ReLU(),
                                    cpp_nn.Linear(32, 4))

    def forward(self, x):
        return self.layers(x)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = cpp_nn.Linear(16 * 4 * 4, 120)
        self.fc2 = cpp_nn.Linear(120, 84)
        self.fc3 = cpp_nn.Linear(84, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = self.drop(torch.relu(self.fc1(x)))
        x = torch.relu(self.fc2(x))
        return torch.log_softmax(self.fc3(x), 1)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(16, 32, 4, 1, 0, bias=False), cpp_nn.BatchNorm2d(32), nn.ReLU(True),
            nn.ConvTranspose2d(32, 16, 4, 2, 1, bias=False), cpp_nn.BatchNorm2d(16), nn.ReLU(True),
            nn.ConvTranspose2d(16, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, x):  # xport names a module's single input x
        return self.net(x)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
            nn.Conv2d(16, 32, 4, 2, 1, bias=False), cpp_nn.BatchNorm2d(32), nn.LeakyReLU(0.2),
            nn.Conv2d(32, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.net(x).flatten(1)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = cpp_nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = cpp_nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), cpp_nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = self.downsample(x) if self.downsample is not None else x
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = cpp_nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64, 1), BasicBlock(64, 64, 1))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128, 1))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256, 1))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512, 1))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = cpp_nn.Linear(512, 1000)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = cpp_nn.TransformerEncoderLayer(32, 4, 64, 0.1, torch.nn.functional.gelu)

    def forward(self, x):
        return self.layer(x)


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.head = cpp_nn.Linear(16, 2)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out), h


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 16, num_layers=1, batch_first=True)
        self.head = cpp_nn.Linear(16, 2)

    def forward(self, x):
        out, h = self.gru(x)
        return self.head(out.select(1, -1))


class EmbeddingClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.fc = cpp_nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(self.emb(x).mean(1))


class RenormedEmbedding(nn.Module):
    """nn.Embedding with max_norm: a no-grad update of the weight in forward."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 4, max_norm=1.0)

    def forward(self, x):
        return self.emb(x)


class NoneOutput(nn.Module):
    """A None among the outputs (C++: an undefined tensor)."""

    def forward(self, x):
        return x + 1, None


def _model(cls, *shape, train=False, dtype=torch.float32, dynamic=None):
    """A case: the model (seeded as the C++ test seeds it), an example input, no kwargs, specs."""
    def make():
        torch.manual_seed(0)
        m = cls()
        m.train(train)
        x = torch.randint(100, shape) if dtype == torch.int64 else torch.randn(*shape)
        return m, (x,), {}, dynamic
    make.spec = (cls, *shape)
    make.dtype = dtype
    return make


class CondGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = cpp_nn.Linear(16, 1)
        self.expert_a = cpp_nn.Linear(16, 16)
        self.expert_b = cpp_nn.Linear(16, 16)
        self.head = cpp_nn.Linear(16, 4)

    def forward(self, x):
        score = self.gate(x).mean()
        h = torch.cond(score > 0, lambda x: torch.relu(self.expert_a(x)), lambda x: torch.tanh(self.expert_b(x)) * 2,
                       (x,))
        return self.head(h)


MODELS = {
    "mlp": _model(MLP, 5, 16),
    "lenet": _model(LeNet, 2, 1, 28, 28),
    "generator": _model(Generator, 2, 16, 1, 1),
    "discriminator": _model(Discriminator, 2, 3, 16, 16),
    "resnet18": _model(ResNet18, 1, 3, 64, 64),
    "encoder": _model(Encoder, 5, 2, 32),
    "lstm": _model(LSTMNet, 2, 5, 8),
    "gru": _model(GRUNet, 2, 5, 8),
    "embedding": _model(EmbeddingClassifier, 4, 7, dtype=torch.int64),
    "cond_gate": _model(CondGate, 5, 16),
}

# the train-mode variants of models whose modules behave differently in training (BatchNorm
# statistics, dropout, the RNN's train flag)
TRAINED = ["lenet", "generator", "discriminator", "resnet18", "encoder", "lstm", "gru"]

# dynamic variants: the dims xport's tests make dynamic (tests/test_twins.cpp gives the same
# specs); ResNet-18's example batch is 2 (torch specializes an example size of 1)
_batch = Dim("batch", min=1, max=1024)
DYNAMIC = {
    "mlp": ((5, 16), {"x": {0: _batch}}),
    "lenet": ((2, 1, 28, 28), {"x": {0: _batch}}),
    "resnet18": ((2, 3, 64, 64), {"x": {0: Dim("batch", min=1, max=256)}}),
    "encoder": ((5, 2, 32), {"x": {0: Dim("seq", min=1, max=64), 1: Dim("batch", min=1, max=64)}}),
    "lstm": ((2, 5, 8), {"x": {0: Dim("batch", min=1, max=64)}}),
    "gru": ((2, 5, 8), {"x": {0: Dim("batch", min=1, max=64)}}),
    "embedding": ((4, 7), {"x": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=64)}}),
    "cond_gate": ((5, 16), {"x": {0: _batch}}),
}

CASES = dict(MODELS)
for _name in TRAINED:
    CASES[_name + ".train"] = _model(*MODELS[_name].spec, train=True, dtype=MODELS[_name].dtype)
for _name, (_shape, _spec) in DYNAMIC.items():
    CASES[_name + ".dynamic"] = _model(MODELS[_name].spec[0], *_shape, dtype=MODELS[_name].dtype, dynamic=_spec)
CASES["embedding_max_norm"] = _model(RenormedEmbedding, 4, 7, dtype=torch.int64)
CASES["none_output"] = _model(NoneOutput, 2, 3)
