"""What every IR shares: structural equality and the pieces of its text form.

Two IR values are equal when they have the same shape of data: the same layer kinds with the
same fields, arrays with the same values, memory objects with the same names, sizes and
parents. Identity does not count (a pass may rebuild a layer that computes the same thing), so
tests compare the IR a pass returns with the IR they expect, built by hand.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

import numpy as np


def same(a: Any, b: Any) -> bool:
    """Structural equality of IR values (dataclasses, arrays, lists, dicts, numbers)."""
    return _same(a, b, {})


def _same(a: Any, b: Any, seen: dict[tuple[int, int], bool]) -> bool:
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, Enum) or isinstance(b, Enum):
        return type(a) is type(b) and a == b
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        if type(a) is not type(b):
            return False
        key = (id(a), id(b))
        if key in seen:  # shared memory objects: compared once, and cycles end
            return seen[key]
        seen[key] = True
        result = all(_same(getattr(a, f.name), getattr(b, f.name), seen) for f in dataclasses.fields(a) if f.compare)
        seen[key] = result
        return result
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and type(a) is type(b) and len(a) == len(b) and all(
            _same(x, y, seen) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and len(a) == len(b) and all(
            _same(ka, kb, seen) and _same(a[ka], b[kb], seen) for ka, kb in zip(a, b))
    if hasattr(a, "__slots__") and type(a) is type(b) and hasattr(a, "fields"):
        return _same(a.fields(), b.fields(), seen)
    return type(a) is type(b) and a == b


class Structural:
    """Mixin for a whole IR value (a graph, an HIR program, a plan, a LIR program): ``==`` is
    ``same``. Their parts (activations, layers) keep identity equality, which the passes rely on
    (``x in layer.reads()`` asks for that very tensor); compare parts with ``same``."""

    def __eq__(self, other: object) -> bool:
        return same(self, other)

    __hash__ = object.__hash__  # identity: passes key dictionaries by the objects themselves


def describe_array(values: Any) -> str:
    """A short text for an array of numbers: its shape, and its values when few, else its range."""
    a = np.asarray(values)
    if a.size == 0:
        return f"[] {'x'.join(map(str, a.shape))}"
    if a.size <= 8:
        flat = ", ".join(_number(v) for v in a.reshape(-1))
        return f"[{flat}]" if a.ndim <= 1 else f"{'x'.join(map(str, a.shape))} [{flat}]"
    finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (float("nan"), float("nan"))
    distinct = np.unique(a)
    if distinct.size == 1:
        return f"{'x'.join(map(str, a.shape))} all {_number(distinct[0])}"
    return f"{'x'.join(map(str, a.shape))} in [{_number(lo)}, {_number(hi)}]"


def _number(v: Any) -> str:
    v = float(v)
    return f"{int(v)}" if v == int(v) and abs(v) < 1e9 else f"{v:.6g}"
