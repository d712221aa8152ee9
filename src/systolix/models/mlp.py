"""A small multi-layer perceptron: Gemm + Relu layers of odd widths."""

from __future__ import annotations

import onnx

from systolix.models._common import finish
from systolix.models._graph import DEFAULT_OPSET, GraphBuilder


def mlp(opset: int = DEFAULT_OPSET, seed: int = 1, sizes: tuple[int, ...] = (37, 61, 29, 10),
        unit_scale: bool = True) -> onnx.ModelProto:
    """Gemm(transB=1)-Relu layers ``sizes[0] -> ... -> sizes[-1]`` (37 -> 61 -> 29 -> 10 by default)."""
    b = GraphBuilder("mlp", opset, seed)
    x = b.input("x", [1, sizes[0]], layout="NC")
    for i, width in enumerate(sizes[1:-1]):
        x = b.relu(b.gemm(x, width, name=f"dense_{i}"), name=f"relu_{i}")
    head = f"dense_{len(sizes) - 2}"
    b.output(b.gemm(x, sizes[-1], gain=1.0, name=head), "logits")
    return finish(b, f"MLP {' -> '.join(map(str, sizes))} with Relu, random He weights", kind="classifier",
                  head=head, unit_scale=unit_scale)
