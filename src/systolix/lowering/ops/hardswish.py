"""HardSwish, ``x * clip(x/6 + 1/2, 0, 1)`` (MobileNetV3), as SIMD post-ops on the accumulators.

1/6 is not on FP16BP8's grid (43/256 is 0.8% off, 6 LSB at x = 3), so the sequence keeps the
division for last and makes it two multiplies whose product is within 1e-5 of 1/6
(86/256 * 127/256). With ``u = min(x, 3)``:

    hardswish(x) = u * max(u + 3, 0) / 6 + (x - u)

``x - u`` is ``x - 3`` above 3 and zero below, and ``u * max(u + 3, 0)`` stays within
[-2.25, 18], so nothing saturates. Eight SIMD instructions a vector, three roundings: at most
0.5 / 6 + 0.5 * 127/256 + 0.5 LSB plus 18 * 1e-5 from the constant, under 0.9 LSB
(``tests/unit/test_hardswish.py`` measures every FP16BP8 input through the emulator).
``evaluate`` is the exact function: the bound carries the approximation error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.ir.postops import PostOp
from systolix.isa import SimdOp
from systolix.lowering.registry import OpHandler, handles

# 1/6 as a product of two grid values (86 * 127 / 65536 = 0.1666565).
SIXTH = (86 / 256, 127 / 256)
MAX_ERROR_LSB = 0.75
"""The largest error over every FP16BP8 input, in LSB (measured: README)."""


@dataclass(eq=False)
class HardSwishOp(PostOp):
    """``x * clip(x / 6 + 1 / 2, 0, 1)``; needs a second tile for ``min(x, 3)``."""

    kind: ClassVar[str] = "hard_swish"
    tile_copies: ClassVar[int] = 2

    def evaluate(self, acc, read):
        return acc * np.clip(acc / 6.0 + 0.5, 0.0, 1.0)

    def constants(self, c):
        return c.simd([c.q(np.full(c.N, v)) for v in (3.0, *SIXTH)])

    def emit(self, t, slot) -> None:
        e = t.e
        three, k1, k2 = (t.acc_const + slot + i for i in range(3))
        for v in t.vectors():
            u = t.acc_scratch + (v - t.acc)
            e.simd(SimdOp.MOVE, 0, 0, 1, read=three)  # r = 3
            e.simd(SimdOp.MIN, 0, 1, 1, read=v, write=u)  # r = u = min(x, 3), kept
            e.simd(SimdOp.SUBTRACT, 0, 1, 0, read=v, write=v)  # x - u
            e.simd(SimdOp.ADD, 0, 1, 1, read=three)  # r = u + 3
            e.simd(SimdOp.MAX, 0, 1, 1)  # r = max(u + 3, 0): no read, the input is zero
            e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=u)  # r = u * max(u + 3, 0)
            e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=k1)
            e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=k2, write=v, accumulate=True)  # x - u + r / 6

    def text(self) -> str:
        return "hard swish x * clip(x / 6 + 1/2, 0, 1)"


@handles("HardSwish")
class HardSwish(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        lw.post_op_layer(node, lw.act_of(node, 0), HardSwishOp(node=node.name))
