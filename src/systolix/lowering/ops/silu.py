"""SiLU (Swish), ``x * sigmoid(x)``, as ONNX writes it (a Sigmoid and a Mul by the Sigmoid's own
input; YOLOv5's Conv-BN-SiLU): one SIMD post-op sequence on the layer computing ``x``.

With ``sigmoid(x) = (2 + g) / 4``, ``g`` the clamp of lines of ``sigmoid.py`` (unrounded, two bits
finer than the sigmoid), ``x * sigmoid(x)`` is ``u (2 + g) / 4 + (x - u)`` with ``u = min(x, 16)``:
``u (2 + g)`` stays under 64 (``4 x`` would saturate past 32) and above 16 SiLU is ``x`` to 1e-5.
Largest error over every FP16BP8 input 2.49 LSB, about ``x / 4`` times the lines' error at
``x = 6.5`` (``tests/unit/test_silu.py``); 37 SIMD instructions a vector, in three tiles
(``x - u``, ``u``, the lines' minimum). ``evaluate`` is the exact function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.isa import SimdOp
from systolix.lowering.ops.sigmoid import SigmoidOp

MAX_ERROR_LSB = 2.5
"""The largest error over every FP16BP8 input, in LSB (README's table)."""


@dataclass(eq=False)
class SiluOp(SigmoidOp):
    """``x / (1 + exp(-x))``."""

    kind: ClassVar[str] = "silu"
    tile_copies: ClassVar[int] = 3

    def evaluate(self, acc, read):
        return acc * 0.5 * (1.0 + np.tanh(0.5 * acc))  # x sigmoid(x), without exp's overflow

    def tail_constants(self):
        return [0.25, 2.0, 16.0]

    def emit_head(self, t, slot, v) -> int:
        u = t.acc_scratch + t.n_vec + (v - t.acc)
        sixteen = t.acc_const + slot + 3 + 2 * len(self.LINES)
        t.e.simd(SimdOp.MOVE, 0, 0, 1, read=sixteen)
        t.e.simd(SimdOp.MIN, 0, 1, 1, read=v, write=u)  # r = u = min(x, 16), kept
        t.e.simd(SimdOp.SUBTRACT, 0, 1, 0, read=v, write=v)  # x - u
        return u

    def emit_tail(self, t, slot, v, s, x) -> None:
        emit_gated_tail(t, t.acc_const + slot + 1 + 2 * len(self.LINES), v, s, u=x)

    def text(self) -> str:
        return f"silu ({len(self.LINES) + 1} lines)"



def emit_gated_tail(t, quarter: int, v: int, s: int, u: int) -> None:
    """``x - u + u (2 + g) / 4`` into ``v`` (which holds ``x - u``): ``g = clamp(., -V, V)`` with
    ``-V`` in the register and ``V`` at ``s``; ``quarter`` holds 1/4 and ``quarter + 1`` holds 2.
    SiLU's and GeLU's sequences end alike."""
    e = t.e
    e.simd(SimdOp.MAX, 0, 1, 1, read=s)  # r = g = clamp(., -V, V)
    e.simd(SimdOp.ADD, 0, 1, 1, read=quarter + 1)  # 2 + g
    e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=u)  # u (2 + g)
    e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=quarter, write=v, accumulate=True)  # x - u + u (2 + g) / 4
