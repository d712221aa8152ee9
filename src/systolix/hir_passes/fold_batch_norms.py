"""Fold per-channel affine layers (batch norms, Add/Sub/Mul/Div by a per-channel or scalar
constant) into the weights and bias of the layer computing their input.

``y = (sum w x + b) * s + t`` is ``sum (w s) x + (b s + t)``: exact in float, before any
rounding, and one layer less. Refuses (leaves the affine layer as it is, a 1x1 per-channel
layer of its own) when the layer before has accumulator operations already (``s`` would have to
pass through a ReLU or an add), is closed (a Concat, Split, Pad or pool), or when its output is
read elsewhere, is a model output or a slice of a concatenation.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.hir_passes.uses import Uses
from systolix.ir.hir import ConvLayer, HirProgram


def fold_batch_norms(hir: HirProgram, ctx=None) -> HirProgram:
    uses = Uses(hir)
    layers: list = []
    for layer in hir.layers:
        if isinstance(layer, ConvLayer) and layer.foldable:
            target = uses.joinable(layer.inputs[0].act)
            if target is not None and not target.post_ops:
                scale = layer.inputs[0].diagonal[:, 0, 0]
                folded = dataclasses.replace(
                    target, inputs=[inp.scaled(scale) for inp in target.inputs], bias=target.bias * scale + layer.bias,
                    output=layer.output, ops=target.ops + layer.ops, nodes=target.nodes + layer.nodes,
                    statistics=_statistics(target, layer, scale))
                layers[next(k for k, other in enumerate(layers) if other is target)] = folded
                uses.produced(folded)
                continue
        layers.append(layer)
        uses.produced(layer)
    return dataclasses.replace(hir, layers=layers)


def _statistics(target: ConvLayer, affine: ConvLayer, scale):
    """The folded layer's sum statistics (``ConvLayer.statistics``): the batch norm's own, or
    the target's carried through a constant affine map."""
    if affine.statistics is not None or target.statistics is None:
        return affine.statistics
    mean, std = target.statistics
    return (mean * scale + affine.bias).astype(np.float32), (std * np.abs(scale)).astype(np.float32)
