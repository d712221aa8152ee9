"""Merge a reduction's parts back into its layer: each part is summed beside the layer's tile
(``postops.AddPart``) instead of in a layer of its own.

``split_long_reductions`` sums a long reduction in parts, each with its own gain, so that each
rounds less. As layers, every part but the last saves its partial map (its gain undone) and the
last loads each back and adds it: per output vector and part, a SIMD multiply that reads and
writes, an accumulators -> local move, a DRAM save and load, and an accumulating move back. At
batch 4 on the ultra96-v2 that was 13% of YOLOv4-tiny's time (``systolix estimate``, with and
without map parts: 16.86M against 14.94M clocks). Merged, a part's blocks stream through the
array into the tile's second copy and one SIMD multiply a vector, accumulating, adds the
product into the tile: no map goes through DRAM.

The sums are the same, in the same order: the layer's own part first, its gain undone, then each
part's rounded product added exactly where its ``AddTensor`` was. So the outputs are bit for bit
those of the parts as layers.

A part merges when it is a dense conv of its layer's geometry whose only post-op is its gain's
undo (``Scale``) and whose output only that ``AddTensor`` reads. Runs last of the HIR passes: the
gains' passes, ``tensor_exponents`` and ``estimate_ranges`` see the parts as layers.

A 1x1 conv merges no more parts than leave its whole input (every part's channels, every row)
within local memory: it streams that band through each weight block, and a band that does not fit
holds fewer rows, in more stages, each streaming the weights again (ResNet-50 v2's 1x1 convs over
1,024 channels at 14x14 on the 8x8 arty-a7-35 took up to 1.34x the fitted clocks merged, the model
1.063x on our RTL; with the limit, 1.000x fitted and 1.010x on our RTL). A 3x3 conv's band is not
limited so: its merged bands cost less than they stream (ResNet-50 v2's 56x56 convs on the same
board, 0.92x). For any kernel, one output row of the merged layer must fit a lock half
(``_row_need``).

In a batch program only with ``ctx.merge_batch_parts``: there images share each weight tile
(each image with a second tile of its own for its parts' products), and the merged layer's bigger
band and weights change which plans share: YOLOv4-tiny at batch 4, fitted model, 0.970x the clocks
on the ultra96-v2 but 1.031x on the pynq-z1. So ``compile_model`` compiles a batch program with
parts as layers, all merged, and merged only where the estimate's per-layer clocks say it pays
(``ctx.merge_only``), and keeps the one the latency model times fastest.
"""

from __future__ import annotations

import dataclasses

from systolix.hir_passes.uses import reader_counts
from systolix.ir.hir import ConvLayer, HirProgram
from systolix.ir.postops import PART_NODE, AddPart, AddTensor, Scale


# The share of the accumulators the merged parts' SIMD constants may take, as a divisor.
SIMD_SHARE = 8


def _row_need(layer: ConvLayer, inputs) -> int:
    """Local memory for one output row of the layer reading ``inputs`` (its input rows, a staging
    row, a weight block): parts made because a layer was too wide for local memory
    (``split_wide_inputs``) stay apart, and a merged layer keeps half of local memory for a
    row's stage (a lock half)."""
    rows = (layer.kernel[0] - 1) * layer.dilation[0] + 1
    return rows * sum(i.act.G * i.act.W for i in inputs) + layer.output.W + layer.output.N + 1


def _band(inputs) -> int:
    """Vectors of every input's every row (a 1x1 conv's whole band: the module's note)."""
    return sum(i.act.G * i.act.H * i.act.W for i in inputs)


def _mergeable(part, layer: ConvLayer, readers: dict[int, int], outputs: set[int]) -> bool:
    return (isinstance(part, ConvLayer) and part.output.parent is None and id(part.output) not in outputs
            and readers.get(id(part.output), 0) == 1
            and len(part.post_ops) == 1 and type(part.post_ops[0]) is Scale and not part.scaling_ops
            and part.phases == 1 and layer.phases == 1
            and (part.kernel, part.stride, part.dilation, part.pads) == (layer.kernel, layer.stride, layer.dilation, layer.pads)
            and all(i.weights is not None for i in part.inputs)
            and all((i.act.H, i.act.W) == (layer.inputs[0].act.H, layer.inputs[0].act.W) for i in part.inputs)
            and (part.output.C, part.output.H, part.output.W) == (layer.output.C, layer.output.H, layer.output.W))


def merge_reduction_parts(hir: HirProgram, ctx) -> HirProgram:
    """The pass: every mergeable part into the layer that adds it (``ctx.merge_parts`` False, or
    a batch program without ``ctx.merge_batch_parts``: none, see the module's note)."""
    if not getattr(ctx, "merge_parts", True):
        return hir
    # A batch program without ``merge_batch_parts`` only counts what it would merge.
    count_only = (getattr(ctx, "batch", None) or 1) > 1 and not getattr(ctx, "merge_batch_parts", False)
    readers = reader_counts(hir)
    outputs = {id(a) for a in hir.outputs.values()}
    producer = {id(layer.output): layer for layer in hir.layers}
    only = getattr(ctx, "merge_only", None)
    record = getattr(ctx, "merged_parts", None)
    merged: set[int] = set()
    layers = []
    for layer in hir.layers:
        if not isinstance(layer, ConvLayer) or layer.phases != 1 or not any(
                isinstance(p, AddTensor) and p.node == PART_NODE for p in layer.post_ops) or (
                only is not None and layer.name not in only):
            layers.append(layer)
            continue
        inputs = list(layer.inputs)
        post_ops = []
        macs = layer.macs
        # Each part's gain undo takes a vector of SIMD constants a channel group beside the
        # accumulators: no more parts than leave the tiles most of them (YOLOv4-tiny's 512-channel
        # conv in 16 parts on the 8x8 arty-a7-35 would take 960 of its 2,048).
        room = ctx.arch.accumulator_depth // SIMD_SHARE if ctx is not None else None
        for p in layer.post_ops:
            part = producer.get(id(p.operand)) if isinstance(p, AddTensor) and p.node == PART_NODE and p.stride == (1, 1) else None
            if part is not None and room is not None:
                room -= layer.output.G
                if (room < 0 or (layer.kernel == (1, 1) and _band(inputs + part.inputs) > ctx.arch.local_depth)
                        or _row_need(layer, inputs + part.inputs) > ctx.arch.local_depth // 2):
                    part = None
            if part is None or id(part) in merged or not _mergeable(part, layer, readers, outputs):
                post_ops.append(p)
                continue
            first = len(inputs)
            inputs.extend(part.inputs)
            post_ops.append(AddPart(inputs=tuple(range(first, len(inputs))), sources=list(part.inputs), bias=part.bias,
                                    values=part.post_ops[0].values, part=part.name,
                                    geometry=(layer.kernel, layer.stride, layer.dilation, layer.pads), node=PART_NODE))
            macs += part.macs
            merged.add(id(part))
        if len(inputs) == len(layer.inputs):
            layers.append(layer)
            continue
        if record is not None:
            record[layer.name] = [p.part for p in post_ops if isinstance(p, AddPart)]
        layers.append(dataclasses.replace(layer, inputs=inputs, post_ops=post_ops, macs=macs))
    if not merged or count_only:
        return hir
    return dataclasses.replace(hir, layers=[layer for layer in layers if id(layer) not in merged])
