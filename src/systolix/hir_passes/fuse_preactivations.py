"""Fuse a per-channel affine layer (a pre-activation batch norm and its ReLU) into the tail of
the conv layer computing its input, as SIMD post-ops on the accumulators.

Pre-activation ResNets (v2) end each block with a sum that the next block reads twice: raw by
its residual add, and through a batch norm and ReLU by its convs. ``fold_batch_norms`` cannot
fold that batch norm (the sum is read elsewhere, and the layer already adds), so it stays a
layer of its own that loads the sum back from DRAM, streams it through a diagonal weight block
and saves it again. Here the producer's tail does it while the sum is still in the
accumulators: it saves the raw tile (``postops.Save``, the layer's second output) when anything
else reads the sum, then multiplies each vector by the scale, adds the shift (one SIMD
instruction each, the scale's vector per channel group in the register) and goes on with the
affine layer's own post-ops (the ReLU) before its usual save.

The arithmetic is the affine layer's: the array computes ``sat(bias + rne(x w))`` for a
diagonal block, the tail ``sat(rne(x w) + bias)`` from the same rounded values, so the outputs
are bit for bit the unfused program's. Runs after the passes that size gains and exponents
(they see the layers as the model has them) and before planning.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.hir_passes.uses import reader_counts
from systolix.ir.hir import ConvLayer, HirProgram
from systolix.ir.postops import AddChannels, ConstantSink, Save, Scale


def _affine(layer) -> bool:
    """A 1x1 per-channel layer ``x * d + b`` then post-ops that read no other tensor."""
    if not isinstance(layer, ConvLayer) or len(layer.inputs) != 1 or layer.inputs[0].diagonal is None:
        return False
    return (layer.kernel == (1, 1) and layer.stride == (1, 1) and layer.dilation == (1, 1) and layer.pads == (0, 0, 0, 0)
            and layer.phases == 1 and not layer.scaling_ops and layer.inputs[0].diagonal.shape[1:] == (1, 1)
            and all(p.tensor is None and p.written is None for p in layer.post_ops))


LOCAL_VARS = ("local-vars", "local-vars-and-consts")


def _fits_accumulators(layer: ConvLayer, arch) -> bool:
    """Whether the accumulators still hold the layer's SIMD constants (the fused scale and shift
    add a vector per channel group each) beside two rows of one output group, as tiling needs."""
    if arch is None:
        return True
    sink = ConstantSink(arch.array_size, layer.output.G, lambda v: np.asarray(v), lambda v: 0)
    for op in layer.post_ops:
        op.constants(sink)
    return len(sink.vectors) + 2 * layer.output.W <= arch.accumulator_depth


def fuse_preactivations(hir: HirProgram, ctx=None) -> HirProgram:
    wanted = getattr(ctx, "fuse_preactivations", None)
    if wanted is None:
        # What it saves is the affine layer's DRAM round trip; with the activations in local
        # memory that layer is cheap (4 accumulator clocks a vector) and the tail's SIMD work (7)
        # costs more (ResNet-20 v2 on zcu104_uram: 260,771 clocks against 242,291).
        wanted = ctx is not None and getattr(ctx, "strategy", "local-isolated") not in LOCAL_VARS
    if not wanted:
        return hir
    readers = reader_counts(hir)
    outputs = {id(a.root()[0]) for a in hir.outputs.values()}
    layers: list = []
    producer: dict[int, int] = {}  # id(activation) -> index in ``layers`` of the conv layer whose whole output it is
    for layer in hir.layers:
        x = layer.inputs[0].act if _affine(layer) else None
        k = producer.get(id(x)) if x is not None else None
        if k is not None and x.parent is None and layer.output.parent is None:
            target = layers[k]
            d = layer.inputs[0].diagonal[:, 0, 0]
            ops = [Save(x, node=layer.nodes[0] if layer.nodes else "")] if readers.get(id(x), 0) > 1 or id(x) in outputs else []
            if np.any(d != 1.0):
                ops.append(Scale(d.astype(np.float32), node=layer.name))
            if np.any(layer.bias != 0.0):
                ops.append(AddChannels(np.asarray(layer.bias, np.float32), node=layer.name))
            fused = dataclasses.replace(target, post_ops=target.post_ops + ops + list(layer.post_ops), output=layer.output,
                                        ops=target.ops + layer.ops, nodes=target.nodes + layer.nodes, macs=target.macs + layer.macs)
            if not _fits_accumulators(fused, getattr(ctx, "arch", None)):
                layers.append(layer)  # small accumulators: the layer stays on its own
                if layer.output.parent is None:
                    producer[id(layer.output)] = len(layers) - 1
                continue
            layers[k] = fused
            del producer[id(x)]
            producer[id(layer.output)] = k
            continue
        layers.append(layer)
        if isinstance(layer, ConvLayer) and layer.output.parent is None:
            producer[id(layer.output)] = len(layers) - 1
    return dataclasses.replace(hir, layers=layers)
