"""Softplus, ``log(1 + exp(x))``, as SIMD post-ops: ``max(x, 0) + h(|x|)`` with
``h(t) = log(1 + exp(-t))``, convex and falling from ``log 2`` to 0 (under half an LSB past
``t = 6.3``). ``-h`` is concave, so the smallest of a few lines, clamped at 0, follows it from
above: ``m = min(0, min_i(a_i |x| + b_i))`` with FP16BP8 slopes and intercepts fitted over every
grid input by ``scripts/activation_lines.py softplus`` (the first line is the tangent at zero;
every slope is at least 1/256, so that far from zero the lines pass 0 and ``m`` is 0 exactly).
Then ``softplus(x) = max(x - m, -m)``, with no compare on the sign.

Largest error over every FP16BP8 input 0.994 LSB (the lines' own: nothing after them rounds;
``tests/unit/test_softplus.py``), ``4 K + 3`` = 43 SIMD instructions a vector for K = 10 lines,
in two tiles (the lines' minimum, then ``x - m``). ``evaluate`` is the exact function: the error
bound carries the approximation's error. Mish (``mish.py``) reuses the sequence with 4 lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.ir.postops import PostOp
from systolix.isa import SimdOp
from systolix.lowering.registry import OpHandler, handles

MAX_ERROR_LSB = 1.0
"""The largest error over every FP16BP8 input, in LSB (README's table)."""

# scripts/activation_lines.py softplus --tol 1.0: (slope, intercept) in LSB of -h on |x|.
LINES = ((128, -177), (117, -177), (97, -170), (81, -160), (64, -144), (48, -124), (31, -95), (17, -63), (8, -36),
         (2, -12))


def line_constants(lines) -> list[float]:
    return [v / 256 for line in lines for v in line]


def emit_softplus(e, lines: int, k: int, w: int, s: int, write: int | None = None) -> None:
    """``softplus(w)`` into the register (and to ``write``): ``k`` lines whose slopes and
    intercepts start at accumulator ``lines``; ``s`` is a scratch vector (it ends holding ``w - m``)."""
    for i in range(k):
        e.simd(SimdOp.ABS, 0, 0, 1, read=w)  # r = |w|
        e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=lines + 2 * i)
        if i == 0:
            e.simd(SimdOp.ADD, 0, 1, 1 if k == 1 else 0, read=lines + 1, write=None if k == 1 else s)
            continue
        e.simd(SimdOp.ADD, 0, 1, 1, read=lines + 2 * i + 1)
        last = i == k - 1
        e.simd(SimdOp.MIN, 0, 1, 1 if last else 0, read=s, write=None if last else s)
    e.simd(SimdOp.MIN, 0, 1, 1)  # r = m = min(0, lines): no read, the input is zero
    e.simd(SimdOp.SUBTRACT, 0, 1, 0, read=w, write=s)  # w - m
    e.simd(SimdOp.SUBTRACT, 0, 1, 1)  # r = -m
    e.simd(SimdOp.MAX, 0, 1, 1, read=s, write=write)  # r = max(w - m, -m) = max(w, 0) - m


@dataclass(eq=False)
class SoftplusOp(PostOp):
    """``log(1 + exp(x))``."""

    kind: ClassVar[str] = "softplus"
    tile_copies: ClassVar[int] = 2

    def evaluate(self, acc, read):
        return np.logaddexp(0.0, acc)

    def constants(self, c):
        return c.simd([c.q(np.full(c.N, v)) for v in line_constants(LINES)])

    def emit(self, t, slot) -> None:
        for v in t.vectors():
            emit_softplus(t.e, t.acc_const + slot, len(LINES), v, t.acc_scratch + (v - t.acc), write=v)

    def text(self) -> str:
        return f"softplus ({len(LINES)} lines)"


@handles("Softplus")
class Softplus(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        from systolix.lowering.ops.gates import inside_mish  # it imports this module

        if inside_mish(node, lw):
            return
        lw.post_op_layer(node, lw.act_of(node, 0), SoftplusOp(node=node.name))
