"""``x * gate(x)`` written as two nodes, a gate and a Mul by the gate's own input: SiLU is
``Mul(x, Sigmoid(x))`` (how ONNX exports it), HardSwish ``Mul(x, HardSigmoid(x))`` with alpha 1/6
and beta 1/2 (how exports before opset 14 write it). The Mul becomes one post-op on ``x`` and
the gate, when nothing else reads it, no layer at all: its layer's reading of ``x`` would keep
the post-op from joining the layer computing ``x``. Mish is ``Mul(x, Tanh(Softplus(x)))`` (torch's
export before opset 18): the gate is the Tanh, and the Softplus, when only that Tanh reads it, has
no layer either."""

from __future__ import annotations

from systolix.lowering.ops.hardswish import HardSwishOp
from systolix.lowering.ops.mish import MishOp
from systolix.lowering.ops.silu import SiluOp


def _only_reader(name, lw):
    """The one node reading ``name`` when it is no output, or None."""
    readers = lw.g.consumers().get(name, [])
    return readers[0] if len(readers) == 1 and name not in lw.g.outputs else None


def _product_op(gate, lw):
    """``(x, the post-op x * gate(x) is)``, or None."""
    if gate.op_type == "Sigmoid":
        return gate.inputs[0], SiluOp
    if gate.op_type == "HardSigmoid":
        alpha, beta = float(gate.attr("alpha", 0.2)), float(gate.attr("beta", 0.5))
        if abs(alpha - 1 / 6) < 1e-6 and beta == 0.5:
            return gate.inputs[0], HardSwishOp
    if gate.op_type == "Tanh":
        softplus = lw.g.producers().get(gate.inputs[0])
        if softplus is not None and softplus.op_type == "Softplus" and _only_reader(gate.inputs[0], lw) is gate:
            return softplus.inputs[0], MishOp
    return None


def gated_input(node, lw):
    """For ``Mul(a, b)``: ``(index of x, post-op class)`` when the other operand is a gate of
    ``x``, else None."""
    if node.op_type != "Mul" or len(node.inputs) != 2 or any(lw.g.const(i) is not None for i in node.inputs):
        return None
    producers = lw.g.producers()
    for i in (0, 1):
        gate = producers.get(node.inputs[1 - i])
        product = _product_op(gate, lw) if gate is not None and gate.inputs else None
        if product is not None and product[0] == node.inputs[i]:
            return i, product[1]
    return None


def feeds_only_gates(node, lw) -> bool:
    """Every reader of this gate's output is a Mul by its input, and it is no output."""
    out = node.outputs[0]
    readers = lw.g.consumers().get(out, [])
    return bool(readers) and out not in lw.g.outputs and all(gated_input(r, lw) is not None for r in readers)


def inside_mish(node, lw) -> bool:
    """A Softplus whose one reader is the Tanh of Mishes that are all fused (no layer of its own)."""
    tanh = _only_reader(node.outputs[0], lw)
    return tanh is not None and tanh.op_type == "Tanh" and feeds_only_gates(tanh, lw)
