"""Merge post-ops: a conv layer's gain undo followed by its LeakyReLU (``Scale`` then ``Slope``)
becomes one ``ScaledSlope``, 5 accumulator clocks a vector instead of 6.

Tensil's SIMD unit has one register, and a SIMD op that reads and writes the accumulators takes
two clocks. Apart, the multiply reads and writes every vector (2) and the slope loads its
constant, multiplies into the register and writes the larger back (1 + 1 + 2). Merged, the slope
runs on the amplified sum in the register and only the last op, the scale times the register,
writes (``postops.ScaledSlope``). It needs every scale positive (a gain's undo always is) and every
slope in ``[0, 1]`` (a larger one takes ``min``, not ``max``). Layers bound by their accumulators
(YOLOv4-tiny's stem and its 1x1 convs) gain the most.

Runs last of the HIR passes: every pass before it sees the two ops as they were made (the gains'
passes look for a ``Scale``, ``tensor_exponents`` and ``estimate_ranges`` for a ``Slope``). A
layer's scaling ops (an average pool's ``1/count``) are left alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.ir.hir import ConvLayer, HirProgram
from systolix.ir.postops import Scale, ScaledSlope, Slope


def _mergeable(first, second) -> bool:
    return (isinstance(first, Scale) and isinstance(second, Slope)
            and bool(np.all(np.asarray(first.values) > 0))
            and bool(np.all((np.asarray(second.values) >= 0) & (np.asarray(second.values) <= 1))))


def merged(post_ops: list, start: int = 0) -> list:
    """``post_ops`` with each ``Scale`` directly followed by a mergeable ``Slope`` (at or after
    index ``start``) as one ``ScaledSlope``."""
    out = list(post_ops[:start])
    k = start
    while k < len(post_ops):
        if k + 1 < len(post_ops) and _mergeable(post_ops[k], post_ops[k + 1]):
            scale, slope = post_ops[k], post_ops[k + 1]
            out.append(ScaledSlope(scale=scale.values, slope=slope.values, node=slope.node or scale.node))
            k += 2
        else:
            out.append(post_ops[k])
            k += 1
    return out


def merge_post_ops(hir: HirProgram, ctx=None) -> HirProgram:
    layers = []
    for layer in hir.layers:
        if isinstance(layer, ConvLayer):
            post_ops = merged(layer.post_ops, layer.scaling_ops)
            if len(post_ops) != len(layer.post_ops):
                layer = dataclasses.replace(layer, post_ops=post_ops)
        layers.append(layer)
    return dataclasses.replace(hir, layers=layers)
