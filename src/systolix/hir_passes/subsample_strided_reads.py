"""Compute or store only the pixels that strided 1x1 convs read.

A 1x1 conv of stride s reads one pixel in s x s of its input. Two rewrites use that:

- A layer that computes that input pixel by pixel (a 1x1 conv of stride 1 without padding,
  whose post-ops read no other tensor: a pre-activation batch norm and its ReLU, which ResNet v2
  puts before the strided conv opening a stage) for that conv alone computes just those pixels:
  it takes the stride, and the conv becomes a 1x1 of stride 1. Its output pixel depends on its
  input pixel alone, so the values are the same.
- A tensor that only strided 1x1 convs of the same stride read (two or more: once the first
  rewrite has taken the stride into the pre-activation, ResNet v2's block sum before a strided
  stage is read so by its pre-activation and by the projection shortcut) is saved subsampled
  too, from its producer's tail (``postops.Save`` with a stride), and its readers read that copy
  at stride 1. The projection shortcut then has the geometry of the block's last conv, and
  ``merge_residual_convs`` (the next pass) sums both in one layer.

Runs before the passes that size ranges, exponents and gains (they see the layers as they will
be computed) and before ``fuse_preactivations``, which leaves a strided pre-activation alone.
"""

from __future__ import annotations

import dataclasses

from systolix.hir_passes.uses import reader_counts
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import Save


def _pointwise(layer) -> bool:
    return (isinstance(layer, ConvLayer) and layer.kernel == (1, 1) and layer.stride == (1, 1) and layer.dilation == (1, 1)
            and not any(layer.pads) and layer.phases == 1
            and all(p.tensor is None and p.written is None for p in layer.post_ops))


def _strided_1x1(layer) -> bool:
    return (isinstance(layer, ConvLayer) and len(layer.inputs) == 1 and layer.kernel == (1, 1) and layer.stride != (1, 1)
            and layer.dilation == (1, 1) and not any(layer.pads) and layer.phases == 1
            and all(p.tensor is not layer.inputs[0].act for p in layer.post_ops))


def _subsampled(x: Activation, stride: tuple[int, int], name: str) -> Activation:
    return Activation(name, x.C, -(-x.H // stride[0]), -(-x.W // stride[1]), x.N, order=x.order)


def _reading(conv: ConvLayer, sub: Activation) -> ConvLayer:
    inp = conv.inputs[0]
    return dataclasses.replace(conv, inputs=[ConvInput(sub, weights=inp.weights, diagonal=inp.diagonal)], stride=(1, 1))


def subsample_strided_reads(hir: HirProgram, ctx=None) -> HirProgram:
    if not getattr(ctx, "subsample_strided_reads", True):
        return hir
    outputs = {id(a.root()[0]) for a in hir.outputs.values()}
    layers = list(hir.layers)

    def producers() -> dict[int, int]:
        return {id(layer.output): k for k, layer in enumerate(layers)}

    # A pointwise layer read by one strided 1x1 conv alone computes only what it reads.
    readers, producer = reader_counts(hir), producers()
    for k, conv in enumerate(layers):
        if not _strided_1x1(conv):
            continue
        x = conv.inputs[0].act
        j = producer.get(id(x))
        if j is None or not _pointwise(layers[j]) or x.parent is not None or id(x) in outputs or readers.get(id(x), 0) != 1:
            continue
        sub = _subsampled(x, conv.stride, x.name)
        if (sub.H, sub.W) != (conv.output.H, conv.output.W):
            continue
        layers[j] = dataclasses.replace(layers[j], output=sub, stride=conv.stride, macs=layers[j].macs * sub.P // x.P)
        layers[k] = _reading(conv, sub)
    # A tensor only strided 1x1 convs read, all of the same stride: saved subsampled beside it.
    hir = dataclasses.replace(hir, layers=layers)
    readers, producer = reader_counts(hir), producers()
    strided: dict[int, list[int]] = {}
    for k, layer in enumerate(layers):
        if _strided_1x1(layer):
            strided.setdefault(id(layer.inputs[0].act), []).append(k)
    for key, ks in strided.items():
        j = producer.get(key)
        if j is None or len(ks) < 2 or readers.get(key, 0) != len(ks) or key in outputs:
            continue
        x, stride = layers[j].output, layers[ks[0]].stride
        if x.parent is not None or not isinstance(layers[j], ConvLayer) or any(layers[k].stride != stride for k in ks):
            continue
        sub = _subsampled(x, stride, f"{x.name}_strided")
        if any((sub.H, sub.W) != (layers[k].output.H, layers[k].output.W) for k in ks):
            continue
        source = layers[j]
        layers[j] = dataclasses.replace(source, post_ops=source.post_ops + [Save(sub, stride=stride, node=layers[ks[0]].name)])
        for k in ks:
            layers[k] = _reading(layers[k], sub)
    return dataclasses.replace(hir, layers=layers)
