"""Sigmoid as SIMD post-ops: ``1/2 + V/4`` with ``V = 2 tanh(x/2)`` approximated by the clamp of
eight lines, ``x`` itself and seven more (``lines.py``). Fitting ``V`` rather than the sigmoid puts two more bits under the
lines (their error is quartered) for one rounding at the end.

Largest error over every FP16BP8 input 0.996 LSB (``tests/unit/test_sigmoid.py``), 33 SIMD
instructions a vector. ``evaluate`` is the exact function: the error bound carries the
approximation's error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.isa import SimdOp
from systolix.lowering.ops.lines import ClampedLines
from systolix.lowering.registry import OpHandler, handles

MAX_ERROR_LSB = 1.0
"""The largest error over every FP16BP8 input, in LSB (README's table)."""


@dataclass(eq=False)
class SigmoidOp(ClampedLines):
    """``1 / (1 + exp(-x))``."""

    kind: ClassVar[str] = "sigmoid"
    # scripts/activation_lines.py sigmoid --tol 2.0 (V's LSB: a quarter of the output's).
    LINES: ClassVar = ((224, 14), (178, 60), (129, 133), (84, 224), (46, 324), (21, 409), (5, 479))
    TOP: ClassVar[int] = 512

    def evaluate(self, acc, read):
        # 1 / (1 + exp(-x)) as tanh: exp(-x) overflows (a warning) below x = -709.
        return 0.5 * (1.0 + np.tanh(0.5 * acc))

    def tail_constants(self):
        return [0.25, 0.5]

    def emit_tail(self, t, slot, v, s, x) -> None:
        quarter = t.acc_const + slot + 1 + 2 * len(self.LINES)
        t.e.simd(SimdOp.MAX, 0, 1, 1, read=s)  # r = clamp(x, -V, V)
        t.e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=quarter)
        t.e.simd(SimdOp.ADD, 0, 1, 0, read=quarter + 1, write=v)

    def text(self) -> str:
        return f"sigmoid ({len(self.LINES) + 1} lines)"


@handles("Sigmoid")
class Sigmoid(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        from systolix.lowering.ops.gates import feeds_only_gates  # it imports this module

        from systolix.lowering.ops.tandem_functions import TandemFunction  # noqa: PLC0415 (the unit's, when the arch has it)

        if feeds_only_gates(node, lw):
            return
        op = SigmoidOp(node=node.name) if lw.tandem is None else TandemFunction(node=node.name, function="sigmoid")
        lw.post_op_layer(node, lw.act_of(node, 0), op)
