"""Tanh as SIMD post-ops: the clamp of ten lines (``lines.py``), ``x`` itself the steepest.

Largest error over every FP16BP8 input 0.992 LSB (``tests/unit/test_tanh.py``), 39 SIMD
instructions a vector. Fitting ``2 sigmoid(2x) - 1`` instead would double the sigmoid's error.
``evaluate`` is the exact function: the error bound carries the approximation's error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.lowering.ops.lines import ClampedLines
from systolix.lowering.registry import OpHandler, handles

MAX_ERROR_LSB = 1.0
"""The largest error over every FP16BP8 input, in LSB (README's table)."""


@dataclass(eq=False)
class TanhOp(ClampedLines):
    """``tanh(x)``."""

    kind: ClassVar[str] = "tanh"
    # scripts/activation_lines.py tanh --tol 1.0
    LINES: ClassVar = ((231, 5), (194, 21), (155, 46), (115, 80), (85, 111), (53, 152), (30, 188), (12, 223), (4, 243))
    TOP: ClassVar[int] = 256

    def evaluate(self, acc, read):
        return np.tanh(acc)

    def text(self) -> str:
        return f"tanh ({len(self.LINES) + 1} lines)"


@handles("Tanh")
class Tanh(OpHandler):
    def check(self, node, lw):
        from systolix.lowering.ops.gates import feeds_only_gates  # Mish's Tanh
        from systolix.lowering.ops.gelu import inside_erf_gelu  # GeLU's tanh form

        if inside_erf_gelu(node, lw):
            return None
        if feeds_only_gates(node, lw):  # its Softplus has no layer: the Mul reads Softplus's input
            return lw.activation_reason(lw.g.producers()[node.inputs[0]], 0)
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        from systolix.lowering.ops.gates import feeds_only_gates  # Mish's Tanh
        from systolix.lowering.ops.gelu import inside_erf_gelu

        from systolix.lowering.ops.tandem_functions import TandemFunction  # noqa: PLC0415 (the unit's, when the arch has it)

        if inside_erf_gelu(node, lw) or feeds_only_gates(node, lw):
            return
        op = TanhOp(node=node.name) if lw.tandem is None else TandemFunction(node=node.name, function="tanh")
        lw.post_op_layer(node, lw.act_of(node, 0), op)
