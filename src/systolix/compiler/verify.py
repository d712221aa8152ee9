"""Checks the driver may run between passes: each IR obeys the rules the next stage relies on.

HIR: a layer reads only tensors the program has by then (its inputs, or what earlier layers
wrote) and never writes a program input. Plan: every layer's buffers fit local memory and the
accumulators. LIR: every address lies inside its memory. A failure is a compiler bug
(``VerificationError``), never a user error.
"""

from __future__ import annotations

from systolix.ir.hir import HirProgram
from systolix.ir.lir import RAW_MASK, TAG_SHIFT, LirProgram, LoadWeights, MatMul, Memory, Move, Simd
from systolix.ir.plan import Plan


class VerificationError(AssertionError):
    """An IR broke a rule of its stage."""


def verify_hir(hir: HirProgram) -> None:
    written = list(hir.inputs.values())
    inputs = {id(a) for a in hir.inputs.values()}
    for k, layer in enumerate(hir.layers):
        for act in layer.reads():
            if not any(act.overlaps(w) for w in written):
                raise VerificationError(f"layer {k} {layer.name!r} reads {act.name!r} before any layer writes it")
        for act in layer.writes():
            if id(act.root()[0]) in inputs:
                raise VerificationError(f"layer {k} {layer.name!r} writes the program input {act.name!r}")
        written.extend(layer.writes())
    for name, act in hir.outputs.items():
        if not any(act.overlaps(w) for w in written):
            raise VerificationError(f"output {name!r} is never written")


def verify_plan(plan: Plan, arch) -> None:
    for lp in plan.layers:
        if lp.local_peak > arch.local_depth or lp.acc_peak > arch.accumulator_depth:
            raise VerificationError(f"layer {lp.layer!r} uses {lp.local_peak} vectors of local memory and {lp.acc_peak} of "
                                    f"accumulators; the architecture has {arch.local_depth} and {arch.accumulator_depth}")


def verify_lir(lir: LirProgram, arch) -> None:
    depth = {Memory.LOCAL: arch.local_depth, Memory.ACCUMULATORS: arch.accumulator_depth, Memory.DRAM0: arch.dram0_depth,
             Memory.DRAM1: max(1, lir.consts.shape[0]), Memory.VARS: arch.dram0_depth, Memory.CONSTS: max(1, lir.consts.shape[0]),
             Memory.ZEROES: 1 << TAG_SHIFT}

    def check(k: int, addr: int | None, count: int, stride: int) -> None:
        if addr is None:
            return
        memory = Memory(addr >> TAG_SHIFT)
        last = (addr & RAW_MASK) + (count - 1) * stride
        if last >= depth[memory]:
            raise VerificationError(f"instruction {k} ({lir.instructions[k].text()}) reaches {memory.name} vector {last}; "
                                    f"it has {depth[memory]}")

    for k, ins in enumerate(lir.instructions):
        kind = type(ins)
        if kind is MatMul:
            check(k, ins.local, ins.count, ins.local_stride)
            check(k, ins.acc, ins.count, ins.acc_stride)
        elif kind is Move:
            check(k, ins.source, ins.count, ins.source_stride)
            check(k, ins.target, ins.count, ins.target_stride)
        elif kind is LoadWeights:
            check(k, ins.local, ins.count, ins.stride)
        elif kind is Simd:
            check(k, ins.read, 1, 1)
            check(k, ins.write, 1, 1)


def verify(ir, ctx) -> None:
    """Whichever checks apply to ``ir``."""
    if isinstance(ir, HirProgram):
        verify_hir(ir)
    elif isinstance(ir, Plan) and ir.layers:
        verify_plan(ir, ctx.arch)
    elif isinstance(ir, LirProgram):
        verify_lir(ir, ctx.arch)
