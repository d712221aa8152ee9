"""Emit: the plan to LIR, one emitter per layer kind (``conv``, ``movement``), each reading its
layer's ``LayerPlan`` and constants; ``roll_up`` merges runs of instructions afterwards."""

from __future__ import annotations

from systolix.codegen.conv import emit_conv
from systolix.codegen.emitter import Emitter
from systolix.codegen.movement import emit_maxpool, emit_pixelmix, emit_remap, emit_shuffle
from systolix.codegen.matmul_tensors import emit_matmul_tensors
from systolix.ir.hir import TensorMatMulLayer
from systolix.codegen.transpose_tokens import emit_transpose_tokens
from systolix.ir.hir import TokenTransposeLayer
from systolix.ir.hir import ConvLayer, MaxPoolLayer, PixelMixLayer, RemapLayer, ShuffleLayer
from systolix.ir.layout import canonical_chw
from systolix.ir.lir import LayerRecord, LirProgram, TensorPlacement
from systolix.ir.plan import Plan

EMITTERS = {ConvLayer: emit_conv, MaxPoolLayer: emit_maxpool, PixelMixLayer: emit_pixelmix, ShuffleLayer: emit_shuffle,
            RemapLayer: emit_remap}
EMITTERS[TensorMatMulLayer] = emit_matmul_tensors
EMITTERS[TokenTransposeLayer] = emit_transpose_tokens


def _placements(plan: Plan, acts: dict, shapes: dict) -> list[TensorPlacement]:
    out = []
    for name, act in acts.items():
        perm = plan.hir.perms.get(name)
        if perm is None:
            perm = canonical_chw(tuple(shapes[name]))[3]
        out.append(TensorPlacement(name, tuple(int(s) for s in shapes[name]), plan.memory.place(act).base,
                                   act.vectors * plan.memory.batch,
                                   act.G * act.N, list(perm), plan.hir.packs.get(name)))
    return out


def emit(plan: Plan, ctx) -> LirProgram:
    """The pass: every layer's instructions, in order, with the layer map."""
    e = Emitter(ctx.arch)
    hir = plan.hir
    # Everything any layer reads, and the program's outputs: a conv's output that none of them
    # overlaps (a concat's slice only a fused pool reads, as YOLOv4-tiny's ``leaky_re_lu_5``) is
    # not saved.
    needed = [a for layer in hir.layers for a in layer.reads()] + list(hir.outputs.values())
    records = []
    progress = ctx.reporter("scheduling")
    for k, (layer, lp, c) in enumerate(zip(hir.layers, plan.layers, plan.constants.layers)):
        start = len(e.out)
        if isinstance(layer, ConvLayer):
            # A conv whose output nothing reads but through the copies its tail saves (strided:
            # ``subsample_strided_reads``; pooled: ``fuse_strided_pools``, ``fuse_pools``) saves
            # those alone.
            keep = any(a.overlaps(layer.output) for a in needed)
            emit_conv(layer, lp, c.data, plan.memory, e, keep_output=keep)  # every image of a batch program
        else:
            # Layers without weights to share run image after image.
            for image in range(plan.memory.batch):
                EMITTERS[type(layer)](layer, lp, c.data, plan.memory.for_image(image), e)
        records.append(LayerRecord(layer.name, list(layer.ops), start, len(e.out), int(layer.macs) * plan.memory.batch, len(lp.stages),
                                   len(lp.stages) * len(lp.partitions), lp.local_peak, lp.acc_peak))
        if progress is not None:
            progress(k + 1, len(hir.layers))
    return LirProgram(
        hir.name, e.out, plan.constants.vectors, records, _placements(plan, hir.inputs, hir.input_shapes),
        _placements(plan, hir.outputs, hir.output_shapes), plan.memory.dram0_vectors,
        max((r.local_peak for r in records), default=0), max((r.acc_peak for r in records), default=0),
        plan.memory.consts_local, plan.strategy, batch=plan.memory.batch)
