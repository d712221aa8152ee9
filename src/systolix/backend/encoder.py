"""Encode bound LIR into Tensil's instruction bytes, vectorised.

Fields are gathered into NumPy columns once and packed little-endian operand by operand; a
``Move``'s data flow comes from the memories of its two ends. If a field does not fit, the
program is converted to ``systolix.isa`` instructions and ``encode_program`` re-encodes it to
raise its precise error.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from systolix.ir.lir import RAW_MASK, TAG_SHIFT, LoadWeights, MatMul, Memory, Move, Simd
from systolix.isa import SIMD, DataFlow, DataMove, InstructionLayout, encode_program
from systolix.isa import LoadWeights as IsaLoadWeights
from systolix.isa import MatMul as IsaMatMul

_Z, _L, _A, _D0, _D1 = (int(m) for m in (Memory.ZEROES, Memory.LOCAL, Memory.ACCUMULATORS, Memory.DRAM0, Memory.DRAM1))
# (source memory, target memory, accumulate) -> (flow, local side is the source)
FLOWS = {
    (_D0, _L, False): (DataFlow.DRAM0_TO_LOCAL, False),
    (_L, _D0, False): (DataFlow.LOCAL_TO_DRAM0, True),
    (_D1, _L, False): (DataFlow.DRAM1_TO_LOCAL, False),
    (_L, _D1, False): (DataFlow.LOCAL_TO_DRAM1, True),
    (_A, _L, False): (DataFlow.ACC_TO_LOCAL, False),
    (_L, _A, False): (DataFlow.LOCAL_TO_ACC, True),
    (_L, _A, True): (DataFlow.LOCAL_TO_ACC_ACCUMULATE, True),
}


def _move_fields(ins: Move) -> tuple[int, int, int, int, int]:
    """``(flow, local, local stride, far, far stride)`` of a bound Move."""
    key = (ins.source >> TAG_SHIFT, ins.target >> TAG_SHIFT, ins.accumulate)
    if key not in FLOWS:
        raise ValueError(f"no data flow moves from {Memory(key[0]).name} to {Memory(key[1]).name}"
                         + (" accumulating" if key[2] else "") + f": {ins!r}")
    flow, local_is_source = FLOWS[key]
    if local_is_source:
        return int(flow), ins.source & RAW_MASK, ins.source_stride, ins.target & RAW_MASK, ins.target_stride
    return int(flow), ins.target & RAW_MASK, ins.target_stride, ins.source & RAW_MASK, ins.source_stride


def to_isa(ins):
    """One bound LIR instruction as a ``systolix.isa`` instruction (listings, precise errors)."""
    from systolix.isa.tandem import TANDEM_TYPES

    if isinstance(ins, TANDEM_TYPES):  # the Tandem unit's instructions pass through as they are
        return ins
    kind = type(ins)
    if kind is MatMul:
        return IsaMatMul(ins.local & RAW_MASK, ins.acc & RAW_MASK, ins.count - 1, ins.local_stride, ins.acc_stride, ins.accumulate,
                         (ins.local >> TAG_SHIFT) == _Z)
    if kind is Move:
        flow, local, ls, far, fs = _move_fields(ins)
        return DataMove(DataFlow(flow), local, far, ins.count - 1, ls, fs)
    if kind is LoadWeights:
        return IsaLoadWeights(ins.local & RAW_MASK, ins.count - 1, ins.stride, (ins.local >> TAG_SHIFT) == _Z)
    if kind is Simd:
        return SIMD(ins.op, ins.left, ins.right, ins.dest, write_address=0 if ins.write is None else ins.write & RAW_MASK,
                    read_address=0 if ins.read is None else ins.read & RAW_MASK, read=ins.read is not None,
                    write=ins.write is not None, accumulate=ins.accumulate)
    raise TypeError(f"not a LIR instruction: {ins!r}")


def _log2(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64)
    out = np.zeros_like(v)
    nz = v > 0
    out[nz] = np.log2(v[nz]).astype(np.int64)
    return out


_FIELDS = {
    MatMul: ("local", "acc", "count", "local_stride", "acc_stride", "accumulate"),
    Move: ("source", "target", "count", "source_stride", "target_stride", "accumulate"),
    LoadWeights: ("local", "count", "stride"),
    Simd: ("op", "left", "right", "dest", "accumulate"),
}
_OPCODE = {MatMul: 1, Move: 2, LoadWeights: 3, Simd: 4}
# FLOW_TABLE[source tag, target tag, accumulate]: the data flow code, -1 where none moves so.
_FLOW_TABLE = np.full((8, 8, 2), -1, np.int64)
_LOCAL_IS_SOURCE = np.zeros((8, 8, 2), bool)
for (_s, _t, _acc), (_flow, _local_src) in FLOWS.items():
    _FLOW_TABLE[_s, _t, int(_acc)] = int(_flow)
    _LOCAL_IS_SOURCE[_s, _t, int(_acc)] = _local_src


def _optional(values) -> tuple[np.ndarray, np.ndarray]:
    """A column of addresses or None: ``(present, raw address or 0)``."""
    raw = np.array([-1 if v is None else v for v in values], np.int64)
    present = raw >= 0
    return present, np.where(present, raw & RAW_MASK, 0)


def _put(cols: np.ndarray, at: np.ndarray, *values) -> None:
    """Fields 1.. (flags, operands) of the instructions at ``at``."""
    for row, value in enumerate(values, start=1):
        cols[row, at] = value


def encode_lir(instructions: list, layout: InstructionLayout) -> bytes:
    """Encode a bound LIR program."""
    n = len(instructions)
    if n == 0:
        return b""
    r = layout.simd_operand_bits
    # The fields come out a kind at a time (attrgetter over the kind's instructions, in C), then
    # are worked out as columns: a Python loop over every instruction took 9 s of ResNet-50 v2's
    # compile for the 8x8 arrays.
    opcodes = np.array([_OPCODE.get(t, 0) for t in map(type, instructions)], np.int64)
    if not opcodes.all():
        from systolix.isa.tandem import TANDEM_TYPES

        bad = next(ins for ins in instructions if type(ins) not in _OPCODE)
        if isinstance(bad, TANDEM_TYPES):  # a program using the Tandem unit: encoded one at a time
            return encode_program([to_isa(i) for i in instructions], layout)
        raise TypeError(f"not a LIR instruction: {bad!r}")
    cols = np.zeros((7, n), np.int64)
    cols[0] = opcodes
    for kind, code in _OPCODE.items():
        at = np.flatnonzero(opcodes == code)
        if not len(at):
            continue
        items = [instructions[i] for i in at.tolist()]
        f = [np.fromiter(map(attrgetter(name), items), np.int64, len(items)) for name in _FIELDS[kind]]
        if kind is MatMul:
            local, acc, count, local_stride, acc_stride, accumulate = f
            zeroes = (local >> TAG_SHIFT) == _Z
            _put(cols, at, accumulate | zeroes << 1, local & RAW_MASK, local_stride, acc & RAW_MASK, acc_stride, count - 1)
        elif kind is Move:
            source, target, count, source_stride, target_stride, accumulate = f
            key = (source >> TAG_SHIFT, target >> TAG_SHIFT, accumulate)
            flow = _FLOW_TABLE[key]
            if (flow < 0).any():
                _move_fields(items[int(np.argmax(flow < 0))])  # raises, naming the flow
            local_src = _LOCAL_IS_SOURCE[key]
            _put(cols, at, flow, np.where(local_src, source, target) & RAW_MASK, np.where(local_src, source_stride, target_stride),
                 np.where(local_src, target, source) & RAW_MASK, np.where(local_src, target_stride, source_stride), count - 1)
        elif kind is Simd:
            op, left, right, dest, accumulate = f
            read, read_at = _optional([ins.read for ins in items])
            write, write_at = _optional([ins.write for ins in items])
            sub = op << (3 * r) | left << (2 * r) | right << r | dest
            _put(cols, at, read | write << 1 | accumulate << 2, write_at, 0, read_at, 0, sub)
        else:
            local, count, stride = f
            _put(cols, at, (local >> TAG_SHIFT) == _Z, local & RAW_MASK, stride, count - 1, 0, 0)
    op, flags, a0, s0, a1, s1, o2 = cols
    strided = (op == 1) | (op == 2) | (op == 3)
    s0_log = np.where(strided, _log2(s0), 0)
    s1_log = np.where((op == 1) | (op == 2), _log2(s1), 0)
    bad = (
        (a0 < 0) | (a0 >= 1 << layout.operand0_address_bits)
        | (a1 < 0) | (a1 >= 1 << layout.operand1_address_bits)
        | (o2 < 0) | (o2 >= 1 << layout.operand2_bits_used)
        | (strided & ((s0 < 1) | (s0 & (s0 - 1) != 0) | (s0_log >= 1 << layout.stride0_bits)))
        | (((op == 1) | (op == 2)) & ((s1 < 1) | (s1 & (s1 - 1) != 0) | (s1_log >= 1 << layout.stride1_bits)))
    )
    if bad.any():
        return encode_program([to_isa(ins) for ins in instructions], layout)  # raises with the instruction's index
    operand0 = (s0_log << layout.operand0_address_bits) | a0
    operand1 = np.where(op == 3, a1, (s1_log << layout.operand1_address_bits) | a1)
    operand2 = np.where(op == 3, 0, o2)
    header = (op << 4) | flags
    b0, b1, b2 = layout.operand_bytes
    width = layout.instruction_bytes
    out = np.zeros((n, width), dtype=np.uint8)
    pos = 0
    for value, nbytes in ((operand0, b0), (operand1, b1), (operand2, b2), (header, 1)):
        for k in range(nbytes):
            out[:, pos + k] = (value >> (8 * k)) & 0xFF
        pos += nbytes
    return out.tobytes()
