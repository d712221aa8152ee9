"""``x * gate(x)`` written as two nodes, a gate and a Mul by the gate's own input: SiLU is
``Mul(x, Sigmoid(x))`` (how ONNX exports it), HardSwish ``Mul(x, HardSigmoid(x))`` with alpha 1/6
and beta 1/2 (how exports before opset 14 write it). The Mul becomes one post-op on ``x`` and
the gate, when nothing else reads it, no layer at all: its layer's reading of ``x`` would keep
the post-op from joining the layer computing ``x``."""

from __future__ import annotations

from systolix.lowering.ops.hardswish import HardSwishOp
from systolix.lowering.ops.silu import SiluOp


def _product_op(gate):
    """The post-op ``x * gate(x)`` is, or None."""
    if gate.op_type == "Sigmoid":
        return SiluOp
    if gate.op_type == "HardSigmoid":
        alpha, beta = float(gate.attr("alpha", 0.2)), float(gate.attr("beta", 0.5))
        if abs(alpha - 1 / 6) < 1e-6 and beta == 0.5:
            return HardSwishOp
    return None


def gated_input(node, lw):
    """For ``Mul(a, b)``: ``(index of x, post-op class)`` when the other operand is a gate of
    ``x``, else None."""
    if node.op_type != "Mul" or len(node.inputs) != 2 or any(lw.g.const(i) is not None for i in node.inputs):
        return None
    producers = lw.g.producers()
    for i in (0, 1):
        gate = producers.get(node.inputs[1 - i])
        if gate is not None and gate.inputs and gate.inputs[0] == node.inputs[i]:
            op = _product_op(gate)
            if op is not None:
                return i, op
    return None


def feeds_only_gates(node, lw) -> bool:
    """Every reader of this gate's output is a Mul by its input, and it is no output."""
    out = node.outputs[0]
    readers = lw.g.consumers().get(out, [])
    return bool(readers) and out not in lw.g.outputs and all(gated_input(r, lw) is not None for r in readers)
