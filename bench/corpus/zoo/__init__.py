"""The zoo: ordinary code shapes written as small models (real torch code, tiny tensors).

Each shape registers in `SHAPES` (name -> `Shape`: what it exercises, how to build it). The traces
under tests/fixtures/corpus/ name these files' functions by definition line: editing a file here
makes its traces stale (the truth files keep each source file's digest; the tests compare).
"""

from bench.corpus.zoo import branches, casts, indexing, layers, loops, models, operators, scopes  # noqa: F401
from bench.corpus.zoo.registry import SHAPES, Shape, shape

__all__ = ["SHAPES", "Shape", "shape"]
