"""HardSigmoid, ``max(0, min(1, alpha * x + beta))``, as SIMD post-ops on the accumulators: a
multiply by alpha, an add of beta, a max with zero and a min with one, each one instruction a
vector. Like every element-wise op it joins the layer computing its input (``fuse_post_ops``).
alpha is stored to the data type's step (FP16BP8: 0.2 becomes 51/256, 0.4% less) and the product
rounded once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.ir.postops import PostOp
from systolix.isa import SimdOp
from systolix.lowering.registry import OpHandler, handles


@dataclass(eq=False)
class HardSigmoidOp(PostOp):
    """``clip(alpha * x + beta, 0, 1)``."""

    alpha: float = 0.2
    beta: float = 0.5
    kind: ClassVar[str] = "hard_sigmoid"

    def evaluate(self, acc, read):
        return np.clip(self.alpha * acc + self.beta, 0.0, 1.0)

    def constants(self, c):
        return c.simd([c.q(np.full(c.N, v)) for v in (self.alpha, self.beta, 1.0)])

    def emit(self, t, slot) -> None:
        e = t.e
        for step, op in ((0, SimdOp.MULTIPLY), (1, SimdOp.ADD), (None, SimdOp.MAX), (2, SimdOp.MIN)):
            if step is None:
                e.simd(SimdOp.ZERO, dest=1)
            else:
                e.simd(SimdOp.MOVE, 0, 0, 1, read=t.acc_const + slot + step)
            for v in t.vectors():
                e.simd(op, 0, 1, 0, read=v, write=v)

    def text(self) -> str:
        return f"hard sigmoid clip({self.alpha:g} x + {self.beta:g}, 0, 1)"


@handles("HardSigmoid")
class HardSigmoid(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        from systolix.lowering.ops.gates import feeds_only_gates  # it imports this module

        if feeds_only_gates(node, lw):
            return
        op = HardSigmoidOp(float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)), node=node.name)
        lw.post_op_layer(node, lw.act_of(node, 0), op)
