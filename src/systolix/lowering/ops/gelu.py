"""GeLU, ``x Phi(x) = x (1 + erf(x / sqrt 2)) / 2``, as one SIMD post-op sequence on the layer
computing ``x``: the ONNX ``Gelu`` op (opset 20; ``approximate`` 'none' or 'tanh', which differ by
under 1e-3, a quarter of an LSB).

SiLU's structure (``silu.py``) with ``Phi(x) = (2 + g) / 4``, ``g`` the clamp of lines
approximating ``2 erf(x / sqrt 2)``. That rises faster than ``x`` (slope 1.596 at zero), so the
lines read ``y = (409/256) u`` (one rounding; ``2 erf`` is fitted on ``y``'s grid, where its slope
is under one and ``y`` is the steepest line), ``u = min(x, 8)`` (above 8 GeLU is ``x`` to 1e-14).
``u (2 + g) / 4 + (x - u)``; the lines' slopes are at least 1/256 so that they reach 2 and
``u (2 + g)`` is zero far below zero. Largest error over every FP16BP8 input 1.28 LSB, at
``x = 2.53`` (``tests/unit/test_gelu.py``); 46 SIMD instructions a vector, in four tiles
(``x - u``, ``u``, ``y``, the lines' minimum). ``evaluate`` is the exact function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import math

import numpy as np

from systolix.isa import SimdOp
from systolix.lowering.ops.lines import ClampedLines
from systolix.lowering.registry import OpHandler, handles

_erf = np.vectorize(math.erf, otypes=[np.float64])

MAX_ERROR_LSB = 1.3
"""The largest error over every FP16BP8 input, in LSB (README's table)."""


@dataclass(eq=False)
class GeluOp(ClampedLines):
    """``x Phi(x)``."""

    kind: ClassVar[str] = "gelu"
    tile_copies: ClassVar[int] = 4
    # scripts/activation_lines.py gelu --tol 1.5 (on y = 409/256 x; V's LSB: a quarter of Phi's).
    LINES: ClassVar = ((234, 9), (202, 38), (166, 84), (127, 150), (91, 225), (58, 308), (31, 389), (10, 465), (1, 506))
    TOP: ClassVar[int] = 512

    def evaluate(self, acc, read):
        return 0.5 * acc * (1.0 + _erf(acc / np.sqrt(2.0)))

    def tail_constants(self):
        return [0.25, 2.0, 8.0, 409 / 256]

    def emit_head(self, t, slot, v) -> int:
        u = t.acc_scratch + t.n_vec + (v - t.acc)
        y = u + t.n_vec
        eight = t.acc_const + slot + 3 + 2 * len(self.LINES)
        t.e.simd(SimdOp.MOVE, 0, 0, 1, read=eight)
        t.e.simd(SimdOp.MIN, 0, 1, 1, read=v, write=u)  # r = u = min(x, 8), kept
        t.e.simd(SimdOp.SUBTRACT, 0, 1, 0, read=v, write=v)  # x - u
        t.e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=eight + 1, write=y)  # y = 409/256 u
        return y

    def emit_tail(self, t, slot, v, s, x) -> None:
        quarter = t.acc_const + slot + 1 + 2 * len(self.LINES)
        u = x - t.n_vec
        e = t.e
        e.simd(SimdOp.MAX, 0, 1, 1, read=s)  # r = g = clamp(y, -V, V)
        e.simd(SimdOp.ADD, 0, 1, 1, read=quarter + 1)  # 2 + g
        e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=u)  # u (2 + g)
        e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=quarter, write=v, accumulate=True)  # x - u + u (2 + g) / 4

    def text(self) -> str:
        return f"gelu ({len(self.LINES) + 1} lines)"


@handles("Gelu")
class Gelu(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        lw.post_op_layer(node, lw.act_of(node, 0), GeluOp(node=node.name))
