"""Pytree node types of the suite's programs, registered as a Python user registers them.

tests/test_export.cpp registers C++ aggregates under the same names with XPORT_DATACLASS, so an
archive xport writes with them unflattens here into these classes, and programs torch writes
with them are what xport reads (dataclasses, a namedtuple, OrderedDict and defaultdict, and a
type registered the way Hugging Face registers its ModelOutputs: a list of keys as context).

Programs whose inputs hold such types keep plain ones in their io files (a tuple of a node's
children, a dict for an OrderedDict): C++ cannot unpickle Python classes. RETYPE rebuilds the
typed call for ep.module().
"""
import collections
import dataclasses
from typing import NamedTuple, Optional

import torch
import torch.utils._pytree as pytree


@dataclasses.dataclass
class AttnIn:
    x: torch.Tensor
    mask: torch.Tensor


@dataclasses.dataclass
class AttnOut:
    hidden: torch.Tensor
    weights: Optional[torch.Tensor] = None
    extras: Optional[list] = None


class Point(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


class LMOutput(collections.OrderedDict):
    """A ModelOutput-like type: an ordered dict of the fields that hold a value."""


def _lm_flatten(o):
    return list(o.values()), list(o.keys())


def _lm_unflatten(values, keys):
    return LMOutput(zip(keys, values))


torch.export.register_dataclass(AttnIn, serialized_type_name="xport_tests.AttnIn")
torch.export.register_dataclass(AttnOut, serialized_type_name="xport_tests.AttnOut")
pytree._register_namedtuple(Point, serialized_type_name="xport_tests.Point")
pytree.register_pytree_node(LMOutput, _lm_flatten, _lm_unflatten, serialized_type_name="xport_tests.LMOutput",
                            flatten_with_keys_fn=lambda o: ([(pytree.MappingKey(k), v) for k, v in o.items()], list(o.keys())))


class Attend(torch.nn.Module):
    """tests/test_export.cpp's `attend`."""

    def forward(self, x: AttnIn):
        h = (x.x * x.mask).softmax(-1)
        return AttnOut(h, None, [h.sum(-1), x.x - 1])


class Containers(torch.nn.Module):
    def forward(self, x, d):
        y = x * d["scale"] + d["shift"]
        dd = collections.defaultdict(list)
        dd["sum"] = y.sum(0)
        return Point(x, y), dd, collections.OrderedDict([("z", y - 1), ("a", y + 1)]), LMOutput(logits=y.relu(), hidden=(x, y))


# name -> the typed call from the plain one an io file holds
RETYPE = {
    "pytree_dataclass": lambda args, kwargs: ((AttnIn(*args[0]),), kwargs),
    "pytree_containers": lambda args, kwargs: ((args[0], collections.OrderedDict(args[1])), kwargs),
    "cpp_dataclass": lambda args, kwargs: ((AttnIn(*args[0]),), kwargs),
}


def plain(args):
    """The call with dataclasses as tuples of their fields and OrderedDicts as dicts (what C++ reads)."""
    def one(a):
        if dataclasses.is_dataclass(a):
            return tuple(getattr(a, f.name) for f in dataclasses.fields(a) if getattr(a, f.name) is not None)
        if isinstance(a, collections.OrderedDict):
            return dict(a)
        return a
    return tuple(one(a) for a in args)


def has_python_types(args):
    """Whether the call holds a dataclass or an OrderedDict (which C++'s unpickler cannot rebuild)."""
    return any(dataclasses.is_dataclass(a) or isinstance(a, collections.OrderedDict) for a in args)
