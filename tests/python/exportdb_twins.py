"""Python twins of the ExportDB gallery (examples/exportdb/*.cpp): for each case, the programs its
golden output (<case>.expected) prints, in the same order, built with torch.export from the
same computation. print_diff.py compares each "ExportedProgram:" block of the golden file with
the matching twin. Cases that only report an error have no twin (their messages are xport's).
"""
import torch
from torch import nn

Dim = torch.export.Dim


def export(f, args, names=("x",), dynamic_shapes=None, strict=False):
    """torch.export.export of `f` as a module whose forward takes `names` (the names xport gives
    the C++ callable's inputs), or of `f` itself when it is a module."""
    m = f if isinstance(f, nn.Module) else _named(f, names)
    return torch.export.export(m, args, dynamic_shapes=dynamic_shapes, strict=strict)


def _named(f, names):
    code = f"def forward(self, {', '.join(names)}):\n    return self.f({', '.join(names)})\n"
    scope = {}
    exec(code, scope)
    m = type("Module", (nn.Module,), {"forward": scope["forward"]})()
    m.f = f
    return m


def static_if():
    def f(x):
        if x.dim() == 3:
            return x + torch.ones(1, 1, 1)
        return x
    return [export(f, (torch.randn(3, 2, 2),))]


def static_for_loop():
    return [export(lambda x: [x + i for i in range(3)], (torch.randn(3, 2),))]


def nested_function():
    scale = 2.0
    helper = lambda t: t * scale + 1
    def f(x, y):
        b = helper(y)  # g++ evaluates the C++ `helper(x) - helper(y)` right to left
        return helper(x) - b
    return [export(f, (torch.randn(3, 2), torch.randn(2)), ("x", "y"))]


def dictionary():
    def f(x, y):
        out = {}
        out["sum"] = x + y
        out["product"] = x * y
        return dict(sorted(out.items()))  # std::map orders its keys
    return [export(f, (torch.randn(3, 2), torch.randn(3, 2)), ("x", "y"))]


def list_input():
    return [export(lambda xs: torch.stack(xs).sum(0), ([torch.randn(2), torch.randn(2), torch.randn(2)],), ("xs",))]


def optional_input():
    def f(x, y):
        return x + y if y is not None else x * 2
    return [export(f, (torch.randn(2, 3), None), ("x", "y"))]


def scalar_input():
    return [export(lambda x, k, a: x.pow(k) * a, (torch.randn(4), 3, 0.5), ("x", "k", "a"))]


def scalar_output():
    return [export(lambda x: (x.relu(), x.size(1) + 1), (torch.randn(3, 2),))]


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(2))

    def forward(self, x):
        self.count.add_(1)
        return x + self.count


def buffer_mutation():
    ep = torch.export.export(Counter(), (torch.randn(3, 2),))
    return [ep, ep.run_decompositions()]


def user_input_mutation():
    def f(x):
        x.mul_(2)
        return x.cos()
    ep = export(f, (torch.randn(3, 2),))
    return [ep, ep.run_decompositions()]


class Specialized(nn.Module):
    mode = "square"
    offset = 4

    def forward(self, x):
        if self.mode == "square":
            return x * x + self.offset
        return x + self.offset


def specialized_attribute():
    return [torch.export.export(Specialized(), (torch.randn(3, 2),))]


def constant_tensor():
    table = torch.arange(6, dtype=torch.float32).view(3, 2)
    return [export(lambda x: x + table, (torch.randn(3, 2),))]


def decompositions():
    import cpp_nn
    torch.manual_seed(0)
    class Sequential(nn.Sequential):
        def forward(self, x):  # xport names a module's input x
            for layer in self:
                x = layer(x)
            return x
    m = Sequential(nn.Conv2d(1, 3, 1), cpp_nn.BatchNorm2d(3))
    m.train()
    ep = torch.export.export(m, (torch.randn(1, 1, 3, 3),))
    return [ep, ep.run_decompositions({}), ep.run_decompositions()]


def dynamic_shape_view():
    def f(x):
        n = x.size(0)
        return x.view(n, 2, -1).permute(0, 2, 1)
    return [export(f, (torch.randn(10, 2, 3),), dynamic_shapes={"x": {0: Dim("batch", min=1, max=1024)}})]


def dynamic_shape_slicing():
    return [export(lambda x: x[: x.size(0) - 2, 1::2], (torch.randn(3, 2),), dynamic_shapes={"x": {0: Dim("n", min=3)}})]


def dynamic_shape_constructor():
    return [export(lambda x: torch.zeros(x.size(0) * 2), (torch.randn(3, 2),), dynamic_shapes={"x": {0: Dim("n")}})]


def strict_template():
    def scores(q, k):
        return torch.softmax(torch.matmul(q, k.transpose(0, 1)) / 4.0, -1)
    args = (torch.randn(4, 16), torch.randn(4, 16))
    return [export(scores, args, ("q", "k")), export(scores, args, ("q", "k"), strict=True)]


def cond_closed_over_variable():
    def f(pred, x):
        return torch.cond(pred, lambda val: x * 2, lambda val: x - 2, (x + 1,))
    return [export(f, (torch.tensor(True), torch.randn(3, 2)), ("pred", "x"))]


def cond_operands():
    def f(x, y):
        return torch.cond(x.sum() > 0, lambda a, b: a + b, lambda a, b: a - b, (x, y))
    return [export(f, (torch.randn(3, 2), torch.randn(2)), ("x", "y"),
                   dynamic_shapes={"x": {0: Dim("dim0_x")}, "y": None})]


def cond_predicate():
    def f(x):
        pred = x.dim() > 2 and x.shape[2] > 10
        return torch.cond(pred, lambda a: a.cos(), lambda a: a.sin(), (x,))
    return [export(f, (torch.randn(6, 4, 3),))]


def cond_branch_nested_function():
    def true_fn(a):
        def inner(b):
            return a + b
        return inner(a)

    def false_fn(a):
        def inner(b):
            return a - b
        return inner(a)
    return [export(lambda x: torch.cond(x.sum() > 0, true_fn, false_fn, (x,)), (torch.randn(3),))]


class _Branches(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.full((3,), 2.0))

    def bar(self, x):
        return x.sin() * self.scale

    def forward(self, x):
        return torch.cond(x.mean() > 0, lambda a: a.cos(), self.bar, (x,))


def cond_branch_class_method():
    return [export(_Branches(), (torch.randn(3),))]


def dynamic_shape_map():
    return [export(lambda xs, y: torch._higher_order_ops.map(lambda x, b: x + b, xs, y),
                   (torch.randn(3, 2), torch.randn(2)), ("xs", "y"))]


def while_loop():
    return [export(lambda it, x: torch.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, h.cos()), (it, x)),
                   (torch.zeros((), dtype=torch.int64), torch.randn(3)), ("it", "x"))]


def scan():
    def step(c, x):
        s = c + x
        return s, s.clone()

    return [export(lambda init, xs: torch._higher_order_ops.scan(step, init, xs), (torch.zeros(1), torch.randn(5, 1)),
                   ("init", "xs"))]


def constrain_as_size_example():
    def f(x):
        a = x.item()
        torch._check(a >= 0)
        torch._check(a <= 5)
        return torch.zeros((a, 5))
    return [export(f, (torch.tensor(4),))]


def constrain_as_value_example():
    def f(x, y):
        a = x.item()
        torch._check(a >= 0)
        torch._check(a <= 5)
        if a < 6:
            return y.sin()
        return y.cos()
    return [export(f, (torch.tensor(4), torch.randn(5, 5)), ("x", "y"))]


def nonzero_rows():
    return [export(lambda x: torch.nonzero(x > 0).sum(0), (torch.randn(4, 3),))]


CASES = {f.__name__: f for f in (static_if, static_for_loop, nested_function, dictionary, list_input, optional_input,
                                 scalar_input, scalar_output, buffer_mutation, user_input_mutation,
                                 specialized_attribute, constant_tensor, decompositions, dynamic_shape_view,
                                 dynamic_shape_slicing, dynamic_shape_constructor, strict_template,
                                 cond_closed_over_variable, cond_operands, cond_predicate, cond_branch_nested_function,
                                 cond_branch_class_method, dynamic_shape_map, while_loop, scan,
                                 constrain_as_size_example, constrain_as_value_example, nonzero_rows)}

# cases whose programs print with source lines on the C++ side (strict): compared without them
STRICT = {"strict_template"}
