"""Merge two convs whose outputs a residual add sums into one layer that computes the sum.

A projection shortcut (ResNet v2's first unit of a stage, ResNet-50 v2's first block of every
stack) adds two convs of the same geometry: ``conv_c(y) + conv_s(x)``. Lowered as written, the
first conv saves its output, and the second loads it back into its accumulators (one move a
vector) after its own MatMuls: a save, a load and, with a gain, an undo multiply more per
output vector than one layer whose MatMuls accumulate both convs into the same tile. A conv
layer already sums several inputs (``ConvLayer.inputs``: every input shares the geometry), so
the merged layer is the second conv with the first one's inputs and bias added; the sum is the
same in float and rounds once less on the accelerator (the first conv's output is no longer
stored). Runs before the passes that size ranges and gains, so they see the merged sum.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.hir_passes.uses import Uses
from systolix.ir.hir import ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import AddTensor


def _same_geometry(a: ConvLayer, b: ConvLayer) -> bool:
    return (a.kernel == b.kernel and a.stride == b.stride and a.dilation == b.dilation and a.pads == b.pads
            and a.phases == b.phases and (a.output.C, a.output.H, a.output.W) == (b.output.C, b.output.H, b.output.W))


def _pure_sum(layer: ConvLayer) -> bool:
    """Its output is its sum: no post-op, no statistics of a folded batch norm."""
    return not layer.post_ops and not layer.scaling_ops and not layer.foldable and layer.statistics is None


def _joined_inputs(first: list[ConvInput], second: list[ConvInput]) -> list[ConvInput]:
    """Both layers' inputs; an activation both read once, its weights added."""
    inputs = list(first)
    for inp in second:
        same = next((k for k, other in enumerate(inputs) if other.act is inp.act), None)
        if same is None:
            inputs.append(inp)
        elif inputs[same].diagonal is not None and inp.diagonal is not None:
            inputs[same] = ConvInput(inp.act, diagonal=inputs[same].diagonal + inp.diagonal)
        else:
            inputs[same] = ConvInput(inp.act, weights=inputs[same].dense() + inp.dense())
    return inputs


def merge_residual_convs(hir: HirProgram, ctx=None) -> HirProgram:
    if not getattr(ctx, "merge_residual_convs", True):
        return hir
    uses = Uses(hir)
    layers: list = []
    for layer in hir.layers:
        add = layer.post_ops[0] if isinstance(layer, ConvLayer) and layer.post_ops else None
        # The conv computing the add's operand, whole, read by this add alone (``Uses.joinable``).
        first = uses.joinable(add.operand) if isinstance(add, AddTensor) and add.stride == (1, 1) else None
        if (first is None or not layer.open or layer.scaling_ops or layer.foldable or layer.statistics is not None
                or not _pure_sum(first) or not _same_geometry(first, layer)):
            layers.append(layer)
            uses.produced(layer)
            continue
        merged = dataclasses.replace(
            layer, inputs=_joined_inputs(first.inputs, layer.inputs), bias=np.asarray(first.bias + layer.bias, np.float32),
            post_ops=layer.post_ops[1:], ops=first.ops + layer.ops, nodes=first.nodes + layer.nodes,
            macs=first.macs + layer.macs)
        layers.remove(first)
        layers.append(merged)
        uses.produced(merged)
    return dataclasses.replace(hir, layers=layers)
