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

Both compute the same values as the layers they replace (a max of the same values; a copy).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.hir_passes.uses import reader_counts
from systolix.ir.hir import ConvLayer, HirProgram, MaxPoolLayer
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
    layers: list = []
    producer: dict[int, int] = {}  # id(activation) -> index in ``layers`` of the conv layer whose whole output it is
    for layer in hir.layers:
        k = producer.get(id(layer.input)) if isinstance(layer, MaxPoolLayer) else None
        s = layer.stride if k is not None else None
        if (k is not None and layer.kernel == (1, 1) and not any(layer.pads) and s != (1, 1) and layer.output.parent is None
                and layer.output.H == -(-layer.input.H // s[0]) and layer.output.W == -(-layer.input.W // s[1])
                and layer.output.order == layer.input.order == "planar"
                and hir.exponents.get(layer.output.name, 0) == hir.exponents.get(layer.input.name, 0)):
            # The subsampled copy after everything the producer's tail does to its output.
            source = layers[k]
            save = Save(layer.output, stride=s, node=layer.name)
            layers[k] = dataclasses.replace(source, post_ops=source.post_ops + [save], ops=source.ops + layer.ops,
                                            nodes=source.nodes + layer.nodes)
            continue
        layers.append(layer)
        if isinstance(layer, ConvLayer) and layer.output.parent is None:
            producer[id(layer.output)] = len(layers) - 1
    return dataclasses.replace(hir, layers=layers)
