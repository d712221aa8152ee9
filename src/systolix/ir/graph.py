"""A small graph IR: what the frontend hands to the compiler.

Tensors have static shapes (batch fixed to 1); constants carry their values. Nodes are kept in
a topological order and refer to tensors by name, exactly as the ONNX model spells them.
``host`` is filled by host placement (``systolix.compiler.placement``): the nodes (by index)
the accelerator cannot run, each with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from systolix.ir.structure import Structural, describe_array


@dataclass(eq=False)
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


@dataclass(eq=False)
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


@dataclass(eq=False)
class Graph(Structural):
    """A model after the frontend: constants folded, shapes known, nodes in topological order."""

    name: str
    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    opset: int
    host: dict[int, str] = field(default_factory=dict)
    """Nodes (by index) that run on the host, each with the reason the accelerator does not."""

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
            dict(self.host),
        )

    def text(self) -> str:
        def shape(name: str) -> str:
            t = self.tensors.get(name)
            return f"{name}{list(t.shape)}" if t is not None else name

        lines = [f"graph {self.name}: opset {self.opset}, {len(self.nodes)} nodes"]
        lines += [f"  input {shape(n)}" for n in self.inputs]
        lines += [f"  output {shape(n)}" for n in self.outputs]
        for index, n in enumerate(self.nodes):
            args = []
            for i in n.inputs:
                t = self.tensors.get(i)
                args.append(f"{i} = {describe_array(t.value)}" if t is not None and t.is_const else shape(i) if i else "-")
            attrs = ", ".join(f"{k}={v}" for k, v in n.attrs.items() if not isinstance(v, (bytes, np.ndarray)))
            where = f"   [host: {self.host[index]}]" if index in self.host else ""
            lines.append(f"  {n.name}: {n.op_type}({', '.join(args)}" + (f"; {attrs}" if attrs else "") + f") -> "
                         + ", ".join(shape(o) for o in n.outputs if o) + where)
        return "\n".join(lines) + "\n"
