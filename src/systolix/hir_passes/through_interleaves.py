"""Move per-channel element-wise layers after a transposed convolution's interleave into its
phase convolutions: the interleave only moves pixels, so ``f(interleave(phases))`` is
``interleave(f(phases))`` for an ``f`` that acts on each value by its channel alone.

A batch norm (a foldable per-channel affine layer) folds into every phase's weights and bias,
as ``fold_batch_norms`` folds it into one conv; a ReLU, clip, slope, hard sigmoid or scale
joins every phase's post-ops, as ``fuse_post_ops`` joins one conv's. One layer and one pass over
the output less for each. Refuses (leaves the layer where it is) when the interleave's output is
read elsewhere, is a model output or a slice of a concatenation, or when an affine layer finds
post-ops already on the phases.
"""

from __future__ import annotations

import copy
import dataclasses

from systolix.hir_passes.uses import reader_counts
from systolix.ir.hir import ConvLayer, HirProgram, RemapLayer

POINTWISE = {"relu", "clip", "slope", "hard_sigmoid", "hard_swish", "sigmoid", "silu", "gelu", "tanh", "mul"}


def _movable(layer) -> str | None:
    """``"fold"``, ``"fuse"`` or None: how ``layer`` can move before an interleave."""
    if not isinstance(layer, ConvLayer):
        return None
    if layer.foldable and not layer.post_ops:
        return "fold"
    if layer.is_post_op_layer() and all(p.kind in POINTWISE and p.tensor is None for p in layer.post_ops):
        return "fuse"
    return None


def through_interleaves(hir: HirProgram, ctx=None) -> HirProgram:
    layers = list(hir.layers)
    outputs = {id(a) for a in hir.outputs.values()}
    moved = True
    while moved:
        moved = False
        readers = reader_counts(dataclasses.replace(hir, layers=layers))
        for k, remap in enumerate(layers):
            if not isinstance(remap, RemapLayer) or remap.group_offset is None:
                continue
            out = remap.output
            if id(out) in outputs or out.parent is not None or readers.get(id(out), 0) != 1:
                continue
            after = next((j for j in range(k + 1, len(layers)) if out in layers[j].reads()), None)
            how = _movable(layers[after]) if after is not None else None
            root = remap.input.root()[0]
            phases = [j for j in range(k) if isinstance(layers[j], ConvLayer) and layers[j].output.root()[0] is root]
            if how is None or (how == "fold" and any(layers[j].post_ops for j in phases)):
                continue
            f = layers[after]
            for j in phases:
                p = layers[j]
                if how == "fold":
                    scale = f.inputs[0].diagonal[:, 0, 0]
                    layers[j] = dataclasses.replace(p, inputs=[i.scaled(scale) for i in p.inputs], bias=p.bias * scale + f.bias,
                                                    ops=p.ops + f.ops, nodes=p.nodes + f.nodes, statistics=f.statistics)
                else:
                    layers[j] = dataclasses.replace(p, post_ops=p.post_ops + [copy.copy(op) for op in f.post_ops],
                                                    ops=p.ops + f.ops, nodes=p.nodes + f.nodes)
            layers[k] = dataclasses.replace(remap, output=f.output, ops=remap.ops + f.ops, nodes=remap.nodes + f.nodes)
            del layers[after]
            moved = True
            break
    return dataclasses.replace(hir, layers=layers)
