"""Wide inputs in parts: a conv whose input band for one output row cannot fit local memory
becomes one layer per block of input channels, summed exactly at the end.

A conv layer keeps in local memory, for the output rows it computes, every input row they read
across all input channels. A dilated conv reads far apart rows: DeepLabV3's ASPP convolves 2,048
channels at 28x28 with 3x3 kernels dilated 12, 24 and 36, so one output row reads 25 to 28 input
rows, 128 channel groups each: 89,600 vectors where ``ultra96v2`` has 20,480. Split by input
channels, each part's band fits. Every part but the last saves its partial sum (rounded once to
the data type, the one extra rounding); the last adds them in the accumulators with exact
``add`` operations before its bias and the layer's own post-ops (batch norm, activation,
residual), which therefore see the whole sum.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.hir_passes.gain_payoff import PART_NODE
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import AddTensor

# A part's band for one output row may take at most this share of local memory: the rest holds
# its output rows, weights and what other strategies keep there (local variables, constants).
BAND_SHARE = 0.5


def wide_input_parts(layer, N: int, local_depth: int) -> list[tuple[int, int]] | None:
    """The ``(first, end)`` input channels of each part of ``layer``, or None to leave it whole:
    a conv with one dense input and no scaling of its own whose band of input rows for one output row,
    over all its channel groups, cannot fit local memory; each part's band takes at most
    ``BAND_SHARE`` of it."""
    if not isinstance(layer, ConvLayer) or len(layer.inputs) != 1 or layer.scaling_ops:
        return None
    (inp,) = layer.inputs
    if inp.weights is None:
        return None
    rows = min(inp.act.H, (layer.kernel[0] - 1) * layer.dilation[0] + 1)
    per_group = rows * inp.act.W  # vectors of one channel group's band
    # Whole, one output row of one channel group needs the band, its output row and one block
    # of weights: a layer that fits so stays whole (the tiler makes the best of it).
    if per_group * inp.act.G + layer.output.W + 1 + N <= local_depth:
        return None
    budget = int(local_depth * BAND_SHARE)
    groups = budget // per_group
    if groups < 1:
        return None  # not even one channel group fits: the tiler says so, naming the layer
    count = -(-inp.act.G // groups)  # as few parts as fit, of about equal size
    per_part = -(-inp.act.G // count) * N
    C = inp.act.C
    return [(c0, min(C, c0 + per_part)) for c0 in range(0, C, per_part)]


def split_wide_inputs(hir: HirProgram, ctx) -> HirProgram:
    """The pass: every layer ``wide_input_parts`` splits becomes its parts, in order, the last
    one writing the layer's output."""
    layers = []
    for layer in hir.layers:
        parts = wide_input_parts(layer, hir.N, ctx.arch.local_depth)
        layers.extend([layer] if parts is None else _parts(layer, parts, hir.N))
    return dataclasses.replace(hir, layers=layers)


def _parts(layer: ConvLayer, parts: list[tuple[int, int]], N: int) -> list[ConvLayer]:
    (inp,) = layer.inputs
    out = layer.output
    C = inp.act.C
    result: list[ConvLayer] = []
    partials: list[Activation] = []
    macs_left = int(layer.macs)
    for j, (c0, c1) in enumerate(parts):
        last = j == len(parts) - 1
        # c0 is a multiple of N: the part reads whole vectors of the input, where they are.
        piece = Activation(f"{inp.act.name}[{c0}:{c1}]", c1 - c0, inp.act.H, inp.act.W, N, parent=(inp.act, c0 // N))
        macs = macs_left if last else int(layer.macs) * (c1 - c0) // C
        macs_left -= macs
        if last:
            target, bias = out, layer.bias
            post = [AddTensor(p, node=PART_NODE) for p in partials] + list(layer.post_ops)
        else:
            target, bias = Activation(f"{out.name} part {j + 1}", out.C, out.H, out.W, N), np.zeros_like(layer.bias)
            partials.append(target)
            post = []
        result.append(dataclasses.replace(
            layer, name=f"{layer.name} [{c0}:{c1}]", inputs=[ConvInput(piece, weights=inp.weights[:, c0:c1])],
            output=target, bias=bias, post_ops=post,
            ops=list(layer.ops), nodes=list(layer.nodes), macs=macs))
    return result
