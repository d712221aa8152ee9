"""Mish, ``x tanh(softplus(x))`` (YOLOv4's activation), as one SIMD post-op sequence on the layer
computing ``x``: the ONNX ``Mish`` op (opset 18) and ``Mul(x, Tanh(Softplus(x)))`` as torch
exports it before opset 18 (``gates.py``).

``tanh(softplus(x)) = sigmoid(z)`` with ``z = x + softplus(x - log 2)`` (both are
``w / (w + 2)`` with ``w = e^x (e^x + 2)``), so Mish is SiLU's structure (``silu.py``) with the
Sigmoid's lines read at ``z``: ``u (2 + g) / 4 + (x - u)``, ``u = min(x, 5)`` (above 5 Mish is
``x`` to 0.12 LSB), ``g`` the clamp of the Sigmoid's lines on ``z``, the softplus by four lines
(``softplus.py``; its error reaches the output damped by the sigmoid's slope). Far below zero
``g`` is -2 exactly and the product 0. Approximating ``tanh`` of a softplus instead would
multiply the tanh's error (an LSB of a value near 1) by ``x``.

Largest error over every FP16BP8 input 2.49 LSB, at ``x = -6.5``, where the Sigmoid's lines reach
-2 while ``sigmoid(z)`` is 0.0015 (``tests/unit/test_mish.py``; SiLU's 2.49 at ``x = 6.5`` is the
same line's error); 58 SIMD instructions a vector, in four tiles (``x - u``, the lines' minimum,
``u``, ``x - log 2`` then ``z``). ``evaluate`` is the exact function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.isa import SimdOp
from systolix.lowering.ops.sigmoid import SigmoidOp
from systolix.lowering.ops.silu import emit_gated_tail
from systolix.lowering.ops.softplus import emit_softplus, line_constants
from systolix.lowering.registry import OpHandler, handles

MAX_ERROR_LSB = 2.5
"""The largest error over every FP16BP8 input, in LSB (README's table)."""

# scripts/activation_lines.py softplus --tol 4.0: coarser than Softplus's own, the same Mish error.
SOFTPLUS_LINES = ((128, -177), (80, -162), (33, -101), (5, -28))
U = 5.0


@dataclass(eq=False)
class MishOp(SigmoidOp):
    """``x tanh(log(1 + exp(x)))``."""

    kind: ClassVar[str] = "mish"
    tile_copies: ClassVar[int] = 4

    def evaluate(self, acc, read):
        return acc * np.tanh(np.logaddexp(0.0, acc))

    def tail_constants(self):
        return [0.25, 2.0, U, -177 / 256] + line_constants(SOFTPLUS_LINES)

    def emit_head(self, t, slot, v) -> int:
        e = t.e
        s = t.acc_scratch + (v - t.acc)
        u = s + t.n_vec
        z = u + t.n_vec
        five = t.acc_const + slot + 3 + 2 * len(self.LINES)
        e.simd(SimdOp.MOVE, 0, 0, 1, read=five)
        e.simd(SimdOp.MIN, 0, 1, 1, read=v, write=u)  # r = u = min(x, 5), kept
        e.simd(SimdOp.SUBTRACT, 0, 1, 0, read=v, write=v)  # x - u
        e.simd(SimdOp.ADD, 0, 1, 0, read=five + 1, write=z)  # u - log 2
        emit_softplus(e, five + 2, len(SOFTPLUS_LINES), z, s)  # r = softplus(u - log 2)
        e.simd(SimdOp.ADD, 0, 1, 0, read=u, write=z)  # z = u + softplus(u - log 2)
        return z

    def emit_tail(self, t, slot, v, s, x) -> None:
        # the lines read z (= x here), u sits one tile before it
        emit_gated_tail(t, t.acc_const + slot + 1 + 2 * len(self.LINES), v, s, u=x - t.n_vec)

    def text(self) -> str:
        return f"mish ({len(self.LINES) + 1} + {len(SOFTPLUS_LINES)} lines)"


@handles("Mish")
class Mish(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        lw.post_op_layer(node, lw.act_of(node, 0), MishOp(node=node.name))
