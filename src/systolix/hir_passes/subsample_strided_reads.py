"""Compute or store only the pixels that strided 1x1 convs read.

A 1x1 conv of stride s reads one pixel in s x s of its input. Two rewrites use that:

- A pointwise layer (a 1x1 conv of stride 1 without padding, whose post-ops work pixel by
  pixel) whose output only strided 1x1 convs of one stride read computes just those pixels: it
  takes the stride (its residual adds read their operand on the same grid: ``AddTensor.stride``)
  and the readers become 1x1 convs of stride 1. Layers are taken consumers first, so a chain
  subsamples as far as it goes: ResNet v2's pre-activation (batch norm and ReLU) before the
  strided conv opening a stage takes the stride, then the block sum it and the projection
  shortcut read (the previous block's last 1x1 conv and its residual add) computes a quarter of
  its pixels. A pointwise output pixel depends on its input pixels alone: the values are the same.
- A tensor that a layer computing more than pixel by pixel (a 3x3 conv) writes and only strided
  1x1 convs of one stride read, two or more, is saved subsampled too, from the layer's tail
  (``postops.Save`` with a stride), and read there at stride 1 (``systolix.codegen`` then skips
  the whole map's save, which nothing reads).

A projection shortcut that reads the subsampled tensor has the geometry of the block's last
conv, and ``merge_residual_convs`` (the next pass) sums both in one layer. Runs before the
passes that size ranges, exponents and gains (they see the layers as they will be computed) and
before ``fuse_preactivations``, which leaves a strided pre-activation alone.
"""

from __future__ import annotations

import dataclasses

from systolix.hir_passes.uses import reader_counts
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import AddTensor, Save


def _pointwise(layer) -> bool:
    """Each output pixel from the same pixel of its inputs: 1x1, stride 1, no pads or phases;
    post-ops per pixel (a residual add takes the stride too, a per-channel operand needs none)
    and no copy of the tile saved midway."""
    return (isinstance(layer, ConvLayer) and layer.kernel == (1, 1) and layer.stride == (1, 1) and layer.dilation == (1, 1)
            and not any(layer.pads) and layer.phases == 1 and not layer.scaling_ops
            and all(p.written is None and (p.tensor is None or p.broadcast or (isinstance(p, AddTensor) and p.stride == (1, 1)))
                    for p in layer.post_ops))


def _strided_1x1(layer) -> bool:
    return (isinstance(layer, ConvLayer) and len(layer.inputs) == 1 and layer.kernel == (1, 1) and layer.stride != (1, 1)
            and layer.dilation == (1, 1) and not any(layer.pads) and layer.phases == 1
            and all(p.tensor is not layer.inputs[0].act for p in layer.post_ops))


def _strided_readers(layers: list, x: Activation) -> list[int] | None:
    """The layers reading ``x``, if each reads it once, whole, as a strided 1x1 conv's input,
    all with the same stride; else None."""
    found = []
    for k, layer in enumerate(layers):
        reads = [a for a in layer.reads() if a is x or a.root()[0] is x]
        if not reads:
            continue
        if len(reads) != 1 or not _strided_1x1(layer) or layer.inputs[0].act is not x:
            return None
        found.append(k)
    if not found or any(layers[k].stride != layers[found[0]].stride for k in found):
        return None
    return found


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
    # A pointwise layer whose output only strided 1x1 convs read computes only what they read
    # (consumers first: a pre-activation that took the stride reads its input strided in turn).
    for j in reversed(range(len(layers))):
        source = layers[j]
        x = source.output
        if not _pointwise(source) or x.parent is not None or id(x) in outputs:
            continue
        readers = _strided_readers(layers, x)
        if readers is None:
            continue
        stride = layers[readers[0]].stride
        sub = _subsampled(x, stride, x.name)
        if any((sub.H, sub.W) != (layers[k].output.H, layers[k].output.W) for k in readers):
            continue
        post = [dataclasses.replace(p, stride=stride) if isinstance(p, AddTensor) else p for p in source.post_ops]
        # ``macs`` stay the model's: the layer map counts the ONNX graph's work (what the compute
        # bound and MAC efficiency are of), and the pixels skipped are part of it.
        layers[j] = dataclasses.replace(source, output=sub, stride=stride, post_ops=post)
        for k in readers:
            layers[k] = _reading(layers[k], sub)
    # A tensor only strided 1x1 convs read, all of the same stride: saved subsampled beside it.
    hir = dataclasses.replace(hir, layers=layers)
    readers, producer = reader_counts(hir), {id(layer.output): k for k, layer in enumerate(layers)}
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
