"""An average pool's weight and first multiply, back on the grid after passes scaled them."""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.ir.hir import ConvLayer
from systolix.ir.postops import Scale
from systolix.numerics.grid import grid_pair


def paired_scales(layer: ConvLayer, dtype) -> ConvLayer:
    """An average pool (one input of equal taps per channel, a first scaling multiply per channel)
    with each channel's weight and first multiply re-chosen together on ``dtype``'s grid
    (``grid_pair``), once gains and exponents (``amplify_weights``) have set the weight's size:
    rounded alone, the multiply keeps 9 significant bits, and a weight scaled by a negative gain
    may leave the grid."""
    if (not layer.scaling_ops or not isinstance(layer.post_ops[0], Scale) or len(layer.inputs) != 1
            or layer.inputs[0].diagonal is None):
        return layer
    d = layer.inputs[0].diagonal
    C = d.shape[0]
    taps = d.reshape(C, -1).astype(np.float64)
    if not np.all(taps == taps[:, :1]):
        return layer
    first = np.broadcast_to(np.asarray(layer.post_ops[0].values, np.float64).reshape(-1), (C,))
    one, largest = float(dtype.one), float(dtype.max_int)
    keys = list(zip(taps[:, 0].tolist(), first.tolist()))
    pairs = {key: grid_pair(*key, one, largest) for key in set(keys)}
    weights, multipliers = (np.array(column) for column in zip(*(pairs[key] for key in keys)))
    diagonal = np.broadcast_to(weights.reshape((C,) + (1,) * (d.ndim - 1)), d.shape).astype(np.float32)
    post = [dataclasses.replace(layer.post_ops[0], values=multipliers.astype(np.float32)), *layer.post_ops[1:]]
    return dataclasses.replace(layer, inputs=[dataclasses.replace(layer.inputs[0], diagonal=diagonal)], post_ops=post)
