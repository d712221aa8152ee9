"""Softmax over the channel axis (a classifier's ``[1, C]`` or ``[1, C, 1, 1]``, every pixel of
``[1, C, H, W]``, the rows of ``[M, K]`` and ``[1, M, K]``) on the Tandem vector unit, as a post-op of the layer computing its input: the unit takes the
tile from the accumulators, computes it in its wide type and hands it back for the save
(``systolix.codegen.tandem_softmax``). Without the unit, or for any other softmax, the host
runs it.

Axis semantics: opsets before 13 take the tensor as 2-D at ``axis`` (the softmax runs over
``dims[axis:]`` together), opset 13 over ``axis`` alone; either way it is accepted only when it
runs over the channel axis alone (any other axis it spans has size 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.codegen.tandem_softmax import interim_vectors, softmax_program
from systolix.ir.lir import raw_of
from systolix.ir.postops import PostOp
from systolix.lowering.registry import NO_IMPLEMENTATION, OpHandler, handles


@dataclass(eq=False)
class SoftmaxOp(PostOp):
    """``exp(x - max) / sum exp(x - max)`` over the channels of each pixel."""

    channels: int = 0
    kind: ClassVar[str] = "softmax"
    all_groups: ClassVar[bool] = True

    def evaluate(self, acc, read):
        z = acc - acc.max(axis=0, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=0, keepdims=True)

    def constants(self, c):
        if self.channels % c.N == 0:
            return None
        # The last group's mask and penalty; -128 saturates to the type's smallest value (FP8BP4: -8),
        # still at most every real value, so the padding lanes are never above the max.
        lanes = np.arange(c.N) < self.channels % c.N
        return c.simd([c.q(np.where(lanes, 1.0, 0.0)), c.q(np.where(lanes, 0.0, -128.0))])

    def emit(self, t, slot) -> None:
        if t.go0 != 0 or t.go1 * t.N < self.channels:
            raise AssertionError(f"softmax on the Tandem unit needs every channel group in the tile: {t}")
        mask = None if slot is None else raw_of(t.acc_const) + slot
        t.e.out.extend(softmax_program(raw_of(t.acc), t.go1, self.channels, t.N, t.e.arch.data_type.binary_point, mask,
                                       t.per_group))

    def text(self) -> str:
        return f"softmax over {self.channels} channels (Tandem unit)"


# The ONNX axis that canonical_chw lays across the lanes (the channels), by rank.
CHANNEL_AXIS = {1: 0, 2: 1, 3: 2, 4: 1}


def over_channels(shape: tuple[int, ...], axis: int, opset: int) -> bool:
    """The softmax runs over the channel axis alone (any other axis it spans has size 1)."""
    axis = axis + len(shape) if axis < 0 else axis
    reduced = range(axis, len(shape)) if opset < 13 else [axis]
    channel = CHANNEL_AXIS.get(len(shape))
    return channel in reduced and all(shape[d] == 1 for d in reduced if d != channel)


@handles("Softmax")
class Softmax(OpHandler):
    def check(self, node, lw):
        if lw.tandem is None:
            return NO_IMPLEMENTATION
        reason = lw.activation_reason(node, 0)
        if reason:
            return reason
        x = lw.input_activation(node, 0)
        shape = lw.ref(node, 0).shape
        opset = lw.g.opset
        axis = int(node.attr("axis", 1 if opset < 13 else -1))
        if not -len(shape) <= axis < len(shape):
            return f"axis {axis} is outside the input's rank {len(shape)}"
        if not over_channels(shape, axis, opset):
            return (f"the Tandem unit runs Softmax over the channel axis (the last of [M, K] and [1, M, K], the second "
                    f"of NCHW); this one is {list(shape)} over axis {axis}" + (" and after it (opsets before 13)" if opset < 13 else ""))
        wide_max = 2 ** (2 * lw.data_type.width - 1 - 2 * lw.data_type.binary_point)
        if x.C >= wide_max:
            return f"the sum of {x.C} exponentials may reach {x.C}, past the Tandem unit's wide type (below {wide_max})"
        if interim_vectors(x.G) > lw.tandem.interim_depth:
            return (f"{x.C} channels need {interim_vectors(x.G)} vectors of the Tandem unit's interim buffer; "
                    f"it has {lw.tandem.interim_depth}")
        return None

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        lw.post_op_layer(node, x, SoftmaxOp(node=node.name, channels=x.C))

