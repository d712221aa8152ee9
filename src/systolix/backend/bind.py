"""Bind memories: say where the emitters' ``VARS`` and ``CONSTS`` live, for the strategy.

Activations (``VARS``) are in DRAM0. The constant image (``CONSTS``) is in DRAM1, or with
local-consts in local memory from address 0 (the driver puts the ``.tdata`` there). Afterwards
every address names a memory of the hardware, and each ``Move``'s data flow follows from its
two ends.
"""

from __future__ import annotations

import dataclasses

from systolix.ir.lir import CONSTS, DRAM0, DRAM1, LOCAL, TAG_SHIFT, VARS, LirProgram, LoadWeights, MatMul, Memory, Move, Simd

_VARS, _CONSTS = int(Memory.VARS), int(Memory.CONSTS)


def bind_memories(lir: LirProgram, ctx=None) -> LirProgram:
    consts_to = (LOCAL if lir.load_consts_to_local else DRAM1) - CONSTS
    vars_to = DRAM0 - VARS

    def bind(addr: int) -> int:
        tag = addr >> TAG_SHIFT
        if tag == _VARS:
            return addr + vars_to
        if tag == _CONSTS:
            return addr + consts_to
        return addr

    out = []
    for ins in lir.instructions:
        kind = type(ins)
        if kind is Move:
            ins = Move(bind(ins.source), bind(ins.target), ins.count, ins.source_stride, ins.target_stride, ins.accumulate)
        elif kind is LoadWeights:
            ins = LoadWeights(bind(ins.local), ins.count, ins.stride)
        elif kind is MatMul and (ins.local >> TAG_SHIFT) == _CONSTS:
            ins = MatMul(bind(ins.local), ins.acc, ins.count, ins.local_stride, ins.acc_stride, ins.accumulate)
        elif kind is Simd:
            pass
        out.append(ins)
    return dataclasses.replace(lir, instructions=out, bound=True)
