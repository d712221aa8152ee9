"""Roll up: consecutive instructions into strided multi-vector ones.

Two MatMuls (or two Moves between the same memories) merge when the second continues the first
on both operands with the same power-of-two strides and the merged count still fits: the merged
instruction does the same work in the same order, one instruction instead of two. Runs on bound
addresses (after ``bind_memories``), so that what merges is what the hardware sees as adjacent.
"""

from __future__ import annotations

import dataclasses

from systolix.codegen.emitter import Emitter
from systolix.ir.lir import TAG_SHIFT, LirProgram, Memory, MatMul, Move

_LOCAL_TAG = int(Memory.LOCAL)


def _continue(addr: int, stride: int, count: int, next_addr: int, next_stride: int, next_count: int, max_stride: int):
    """The common stride if ``next`` continues ``(addr, stride, count)``, else None."""
    if count == 1:
        s = next_addr - addr
        if s <= 0 or s & (s - 1) or s > max_stride:
            return None
    else:
        s = stride
        if next_addr != addr + count * s:
            return None
    if next_count > 1 and next_stride != s:
        return None
    return s


def roll_up_instructions(instructions: list, max_count: int, max_stride0: int, max_stride1: int) -> list:
    """Merge runs of MatMul/Move instructions; other instructions are kept as they are."""
    out: list = []
    for ins in instructions:
        if out:
            prev = out[-1]
            kind = type(ins)
            if kind is MatMul and type(prev) is MatMul:
                if prev.accumulate == ins.accumulate and (prev.local >> TAG_SHIFT) == (ins.local >> TAG_SHIFT):
                    n1, n2 = prev.count, ins.count
                    if n1 + n2 <= max_count:
                        s0 = _continue(prev.local, prev.local_stride, n1, ins.local, ins.local_stride, n2, max_stride0)
                        s1 = _continue(prev.acc, prev.acc_stride, n1, ins.acc, ins.acc_stride, n2, max_stride1)
                        if s0 is not None and s1 is not None:
                            out[-1] = MatMul(prev.local, prev.acc, n1 + n2, s0, s1, prev.accumulate)
                            continue
            elif kind is Move and type(prev) is Move:
                if (prev.accumulate == ins.accumulate and (prev.source >> TAG_SHIFT) == (ins.source >> TAG_SHIFT)
                        and (prev.target >> TAG_SHIFT) == (ins.target >> TAG_SHIFT)):
                    n1, n2 = prev.count, ins.count
                    if n1 + n2 <= max_count:
                        to_local = (ins.target >> TAG_SHIFT) == _LOCAL_TAG
                        ms, mt = (max_stride1, max_stride0) if to_local else (max_stride0, max_stride1)
                        s0 = _continue(prev.source, prev.source_stride, n1, ins.source, ins.source_stride, n2, ms)
                        s1 = _continue(prev.target, prev.target_stride, n1, ins.target, ins.target_stride, n2, mt)
                        if s0 is not None and s1 is not None:
                            out[-1] = Move(prev.source, prev.target, n1 + n2, s0, s1, prev.accumulate)
                            continue
        out.append(ins)
    return out


def roll_up(lir: LirProgram, ctx) -> LirProgram:
    """The pass: ``roll_up_instructions`` layer by layer, keeping the layer map's ranges right."""
    e = Emitter(ctx.arch)
    out: list = []
    records = []
    for rec in lir.layers:
        merged = roll_up_instructions(lir.instructions[rec.first:rec.end], e.max_count, e.max_stride0, e.max_stride1)
        records.append(dataclasses.replace(rec, first=len(out), end=len(out) + len(merged)))
        out.extend(merged)
    return dataclasses.replace(lir, instructions=out, layers=records)
