"""Take max pools where the data already is, saving a layer's round trip through DRAM.

* A constant zero ``Pad`` read only by a ``MaxPool`` (ResNet-50's ``pool1_pad`` and
  ``pool1_pool``): the pool takes the pads, counted as zeros (``MaxPoolLayer.zero_pads``: a
  window over the border starts its max from zero), and reads the unpadded tensor; the Pad's
  copy of the whole map (a load, a pass through the array and a save of every vector) is gone.
  (``fold_pads_into_pools``)
* A 1x1 max pool of stride ``s`` (a subsampling: ResNet v2's shortcut ``MaxPooling2D(1, s)``)
  of a conv layer's output: the conv's tail saves every ``s``-th pixel of its tile a second
  time into the pool's output (``postops.Save`` with a stride) after its post-ops, instead of a
  layer loading the whole map back to keep a quarter of it (``fuse_strided_pools``).
* A ``k x k`` max pool of stride ``k`` of a map that convs write, whole or as slices of channel
  groups (YOLOv4-tiny's route: two convs concatenated, then a 2x2/2 pool): each conv's tail
  saves the max of each window of its slice into the same groups of the pool's output, in place
  after its own save (``postops.Save.pool``; its tiles then hold whole windows).

All three compute the same values as the layers they replace (a max of the same values; a copy).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.hir_passes.uses import reader_counts
from systolix.ir.hir import Activation, ConvLayer, HirProgram, MaxPoolLayer
from systolix.ir.postops import Save


def _zero_pad(layer) -> bool:
    """A constant zero Pad as the lowering makes it: a closed 1x1 copy (weight one) with pads."""
    return (isinstance(layer, ConvLayer) and layer.ops == ["Pad"] and len(layer.inputs) == 1 and layer.inputs[0].is_identity()
            and layer.kernel == (1, 1) and layer.stride == (1, 1) and layer.dilation == (1, 1) and not layer.post_ops
            and not np.any(layer.bias) and layer.phases == 1 and min(layer.pads) >= 0)


def fold_pads_into_pools(hir: HirProgram, ctx=None) -> HirProgram:
    """The first fusion. Runs before the passes that size exponents and gains: the Pad's copy may
    sit at another exponent than its input (its weight a power of two), which the pool cannot
    apply; taken in first, the pool's output shares its input's exponent as any pool's does."""
    if not getattr(ctx, "fuse_pools", True):
        return hir
    readers = reader_counts(hir)
    outputs = {id(a.root()[0]) for a in hir.outputs.values()}
    layers: list = []
    for layer in hir.layers:
        pad = layers[-1] if layers else None
        if (isinstance(layer, MaxPoolLayer) and _zero_pad(pad) and layer.input is pad.output and pad.output.parent is None
                and not any(layer.pads) and not layer.zero_pads and readers.get(id(pad.output), 0) == 1
                and id(pad.output) not in outputs and pad.inputs[0].act.order == pad.output.order):
            layers[-1] = dataclasses.replace(layer, input=pad.inputs[0].act, pads=pad.pads, zero_pads=True,
                                             ops=pad.ops + layer.ops, nodes=pad.nodes + layer.nodes)
            continue
        layers.append(layer)
    return dataclasses.replace(hir, layers=layers)


def fuse_strided_pools(hir: HirProgram, ctx=None) -> HirProgram:
    """The second fusion. Runs after the passes that size exponents (a max pool's output shares
    its input's exponent: checked) and gains, before planning."""
    if not getattr(ctx, "fuse_pools", True):
        return hir
    arch = getattr(ctx, "arch", None)
    acc_depth, local_depth = (arch.accumulator_depth, arch.local_depth) if arch is not None else (0, 0)
    layers: list = []
    for layer in hir.layers:
        saves = _pooled_saves(hir, layers, layer, acc_depth, local_depth) if isinstance(layer, MaxPoolLayer) else None
        if saves is None:
            layers.append(layer)
            continue
        for k, save in saves:
            source = layers[k]
            layers[k] = dataclasses.replace(source, post_ops=source.post_ops + [save], ops=source.ops + layer.ops,
                                            nodes=source.nodes + layer.nodes)
    return dataclasses.replace(hir, layers=layers)


def _band(conv: ConvLayer, rows: int) -> int:
    """Vectors of local memory a tile of ``rows`` output rows of ``conv`` needs: its input
    band (every input's channel groups) and its staging."""
    (sh, _), (dh, _) = conv.stride, conv.dilation
    n_in = min(conv.inputs[0].act.H, (rows - 1) * sh + (conv.kernel[0] - 1) * dh + 1)
    return n_in * conv.inputs[0].act.W * sum(i.act.G for i in conv.inputs) + rows * conv.output.W


def _pooled_saves(hir: HirProgram, layers: list, pool: MaxPoolLayer, acc_depth: int, local_depth: int):
    """``[(index in layers, Save)]`` that compute ``pool`` in the tails of the conv layers
    writing its input, or None. A 1x1 pool of stride s: a subsampled copy of one conv's output.
    A k x k pool of stride k (YOLOv4-tiny's 2x2/2 after a concatenation): each conv writing a
    slice of channel groups of the input saves the max of each window of its slice into the same
    groups of the output."""
    x, out = pool.input, pool.output
    if x.parent is not None or out.parent is not None or any(pool.pads) or pool.dilation != (1, 1) or pool.zero_pads:
        return None
    if x.order != "planar" or hir.exponents.get(out.name, 0) != hir.exponents.get(x.name, 0):
        return None
    writers = [(k, layer) for k, layer in enumerate(layers) if any(a.overlaps(x) for a in layer.writes())]
    if not writers or not all(isinstance(w, ConvLayer) and w.output.root()[0] is x and not any(a.overlaps(x) for a in w.writes()[1:])
                              for _, w in writers):
        return None
    spans = sorted((w.output.root()[1], w.output.root()[1] + w.output.G) for _, w in writers)
    if spans[0][0] != 0 or spans[-1][1] != x.G or any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
        return None  # not every channel group of the input comes from these convs, once
    s = pool.stride
    if pool.kernel == (1, 1) and s != (1, 1):
        if len(writers) != 1 or writers[0][1].output is not x or out.H != -(-x.H // s[0]) or out.W != -(-x.W // s[1]):
            return None
        return [(writers[0][0], Save(out, stride=s, node=pool.name))]
    k = pool.kernel[0]
    if not (pool.kernel == (k, k) == s and k > 1 and out.H == x.H // k and out.W == x.W // k):
        return None
    # The tile must hold k rows of a channel group (with the tail's second buffer: a quarter of
    # the accumulators, a margin for the SIMD constants).
    if acc_depth and k * x.W * 4 > acc_depth:
        return None
    if local_depth and any(_band(w, k) * 2 > local_depth for _, w in writers):
        return None  # k output rows' input band would crowd local memory: the tile could not hold a window
    saves = []
    for index, writer in writers:
        _, g0 = writer.output.root()
        target = out if writer.output is x else Activation(f"{writer.output.name}_pooled", writer.output.C, out.H, out.W, out.N,
                                                           parent=(out, g0))
        saves.append((index, Save(target, pool=k, node=pool.name)))
    return saves
