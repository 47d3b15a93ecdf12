"""Without stacks, a method called on a typed receiver runs that type's method.

transformers' attention calls ``past_key_values.update(...)`` where ``past_key_values: Cache | None``
is a parameter; ``Cache.update`` calls ``self.layers[layer_idx].update(...)`` where ``self.layers``
holds what the ``layers: list[CacheLayerMixin]`` parameter of ``__init__`` held, and
``CacheLayerMixin.update`` is abstract: ``DynamicLayer.update`` (a subclass's) runs ``torch.cat``.
A call named ``update`` says nothing by its name alone (many classes define one), so the KV cache's
``torch.cat`` fit no attention function and went to whatever other code casts or concatenates
around a projection. Now the annotation, the attribute's elements and the abstract method's
overrides say what runs. The package below has that shape and nothing of transformers' names."""

from __future__ import annotations

import ast

import pytest

from tests.join.package_source import assert_ranked_first, line_of, origins_of
from tracer.api import explain_trace
from tracer.join.bindings import CALLED, ELEMENTS, Binding, annotated_parameters
from tracer.join.program import receiver_path

STORE = """
from abc import ABC, abstractmethod

import torch


class SlotBase(ABC):
    @abstractmethod
    def put(self, keys: torch.Tensor) -> torch.Tensor: ...


class GrowingSlot(SlotBase):
    def __init__(self) -> None:
        self.keys = None

    def put(self, keys: torch.Tensor) -> torch.Tensor:
        if self.keys is None:
            self.keys = keys
        else:
            self.keys = torch.cat([self.keys, keys], dim=-2)
        return self.keys


class FixedSlot(SlotBase):
    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys

    def put(self, keys: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Store:
    def __init__(self, slots: list[SlotBase] | None = None) -> None:
        self.slots = slots if slots is not None else []

    def put(self, keys: torch.Tensor, index: int) -> torch.Tensor:
        return self.slots[index].put(keys)
"""

MODEL = """
import torch
from torch import nn

from .store import Store


class Mixer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.key = nn.Linear(width, width, bias=False)
        self.out = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor, store: Store | None = None, index: int = 0) -> torch.Tensor:
        keys = self.key(x).unsqueeze(0)
        if store is not None:
            keys = store.put(keys, index)
        scores = torch.softmax(x @ keys[0].T, dim=-1)
        return self.out(scores @ keys[0])
"""

# other code that concatenates after a projection and before a softmax: what took the cat before
ROTARY = """
import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.key = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = self.key(x).unsqueeze(0)
        keys = torch.cat([keys[..., 1:], keys[..., :1]], dim=-1)
        return torch.softmax(keys[0], dim=-1)
"""


def test_annotations_bind_instances_and_elements() -> None:
    tree = ast.parse(
        "def f(a: Store | None, b: 'Slot', c: list[SlotBase] | None, d: torch.Tensor, e: int): ..."
    )
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    found = annotated_parameters(function.args)
    assert found == {
        "a": (Binding(CALLED, "Store"),),
        "b": (Binding(CALLED, "Slot"),),
        "c" + ELEMENTS: (Binding(CALLED, "SlotBase"),),
    }  # torch's and builtin types bind nothing


@pytest.mark.parametrize(
    ("text", "path"),
    [("cache.update", "cache"), ("self.cache.update", "self.cache"), ("self.layers[i].update", "self.layers[]"),
     ("items[0].put", "items[]"), ("torch.cat", ""), ("f(x).update", "")],
)  # fmt: skip
def test_receiver_paths(text: str, path: str) -> None:
    call = ast.parse(text, mode="eval").body
    assert isinstance(call, ast.Attribute)
    assert receiver_path(call.value) == path


@pytest.fixture(scope="module")
def cat_origins(write_package, tmp_path_factory, profile_without_stacks, import_from_package) -> list:
    import torch

    package = write_package("storepkg", {"store": STORE, "model": MODEL, "rotary": ROTARY})
    store_module = import_from_package(package, "storepkg.store")
    mixer = import_from_package(package, "storepkg.model").Mixer(16)
    x = torch.randn(4, 16)

    def step() -> None:
        store = store_module.Store([store_module.GrowingSlot() for _ in range(2)])
        for _ in range(3):  # decode steps: the second and third put concatenate
            mixer(x, store, 1)

    trace = profile_without_stacks(step, tmp_path_factory.mktemp("typed") / "store.json")
    analysis = explain_trace(trace, source=[package])
    return origins_of(analysis, "aten::cat")


def test_the_cache_cat_answers_in_the_subclass_method(cat_origins: list) -> None:
    assert_ranked_first(cat_origins, "storepkg/store.py", line_of(STORE, "torch.cat([self.keys, keys]"))


def test_the_kv_cache_corpus_trace_answers_in_its_update(nostack_scores) -> None:
    """The zoo's ``kv_cache_update`` (a cache object passed to the attention, its method
    concatenating): rank 1 was 38% on torch 2.14's trace and 71% on 2.13's."""
    assert nostack_scores("zoo/torch2.14/kv_cache_update").rank1 >= 0.9
    assert nostack_scores("zoo/torch2.13/kv_cache_update").rank1 >= 0.8
