"""The piecewise-linear core Sigmoid and Tanh share, as SIMD post-ops: ``clamp(x, -V, V)`` with
``V = min(top, min_i(a_i |x| + b_i))``.

Both are odd about their centre and concave on ``t = |x|``, so the smallest of a few lines
follows them from above; slopes and intercepts are FP16BP8 values, chosen over every grid input
by ``scripts/activation_lines.py``, each line one rounding (its product). The steepest line,
slope one through zero, is ``x`` itself: ``min(x, V)`` is the approximation for ``x >= 0`` and
``x`` (below ``-V``) for ``x < 0``, where ``max(., -V)`` gives its mirror image, so the sign needs
no compare. Per vector, K lines: ``4 K - 1`` instructions for the lines, 3 for the clamp; the
second tile holds the running minimum, then ``-V``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.ir.postops import PostOp
from systolix.isa import SimdOp


@dataclass(eq=False)
class ClampedLines(PostOp):
    """Base of the line-approximated activations: ``LINES`` (slope, intercept) in LSB after the
    line through zero with slope one, ``TOP`` in LSB. ``emit_tail`` maps the clamp to the output."""

    tile_copies: ClassVar[int] = 2
    LINES: ClassVar[tuple[tuple[int, int], ...]] = ()
    TOP: ClassVar[int] = 256

    def tail_constants(self) -> list[float]:
        return []

    def constants(self, c):
        values = [self.TOP / 256] + [v / 256 for line in self.LINES for v in line] + self.tail_constants()
        return c.simd([c.q(np.full(c.N, v)) for v in values])

    def emit_head(self, t, slot, v: int) -> int:
        """Instructions before the lines; returns where they read ``x``."""
        return v

    def emit_tail(self, t, slot, v: int, s: int, x: int) -> None:
        t.e.simd(SimdOp.MAX, 0, 1, 0, read=s, write=v)  # the clamp itself

    def emit(self, t, slot) -> None:
        e = t.e
        top = t.acc_const + slot
        k = len(self.LINES)
        for v in t.vectors():
            s = t.acc_scratch + (v - t.acc)
            x = self.emit_head(t, slot, v)
            for i in range(k):
                e.simd(SimdOp.ABS, 0, 0, 1, read=x)  # r = |x|
                e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=top + 1 + 2 * i)
                if i == 0:
                    e.simd(SimdOp.ADD, 0, 1, 0, read=top + 2, write=s)
                    continue
                e.simd(SimdOp.ADD, 0, 1, 1, read=top + 2 + 2 * i)
                last = i == k - 1
                e.simd(SimdOp.MIN, 0, 1, 1 if last else 0, read=s, write=None if last else s)
            e.simd(SimdOp.MIN, 0, 1, 1, read=top)  # r = V
            e.simd(SimdOp.SUBTRACT, 0, 1, 0, write=s)  # -V: no read, the input is zero
            e.simd(SimdOp.MIN, 0, 1, 1, read=x)  # r = min(x, V)
            self.emit_tail(t, slot, v, s, x)
