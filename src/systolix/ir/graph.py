"""A small graph IR: what the frontend hands to the scheduler.

Tensors have static shapes (batch fixed to 1); constants carry their values. Nodes are kept in
a topological order and refer to tensors by name, exactly as the ONNX model spells them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Tensor:
    """A named tensor: its static shape, element type and, for a constant, its value."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    value: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.value is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass
class Node:
    """One operation: ONNX op type, attributes (Python values), input and output tensor names."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def describe(self) -> str:
        return f"node {self.name!r} ({self.op_type})"


@dataclass
class Graph:
    """A model after the frontend: constants folded, shapes known, nodes in topological order."""

    name: str
    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    opset: int

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def const(self, name: str) -> np.ndarray | None:
        """The value of a constant tensor, or None if ``name`` is computed at run time (or empty)."""
        t = self.tensors.get(name)
        return None if t is None else t.value

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def copy(self) -> "Graph":
        return Graph(
            self.name,
            dict(self.tensors),
            [Node(n.name, n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs)) for n in self.nodes],
            list(self.inputs),
            list(self.outputs),
            self.opset,
        )
