"""Vectorised program encoding: the same bytes as ``systolix.isa.encode_program``, much faster.

Fields are gathered into NumPy columns once and packed little-endian operand by operand. If a
field does not fit, ``encode_program`` re-encodes the program to raise its precise error.
"""

from __future__ import annotations

import numpy as np

from systolix.isa import SIMD, DataMove, InstructionLayout, LoadWeights, MatMul, NoOp, encode_program


def _log2(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64)
    out = np.zeros_like(v)
    nz = v > 0
    out[nz] = np.log2(v[nz]).astype(np.int64)
    return out


def encode_fast(instructions: list, layout: InstructionLayout) -> bytes:
    """Encode a program of MatMul/DataMove/LoadWeights/SIMD/NoOp instructions."""
    n = len(instructions)
    if n == 0:
        return b""
    cols = np.zeros((n, 8), dtype=np.int64)  # opcode, flags, a0, s0, a1, s1, op2, stride ok
    r = layout.simd_operand_bits
    rows = []
    for ins in instructions:
        t = type(ins)
        if t is MatMul:
            rows.append((1, int(ins.accumulate) | int(ins.zeroes) << 1, ins.local_address, ins.local_stride, ins.acc_address, ins.acc_stride, ins.size))
        elif t is DataMove:
            rows.append((2, int(ins.flow), ins.local_address, ins.local_stride, ins.address, ins.stride, ins.size))
        elif t is SIMD:
            sub = int(ins.op) << (3 * r) | ins.left << (2 * r) | ins.right << r | ins.dest
            flags = int(ins.read) | int(ins.write) << 1 | int(ins.accumulate) << 2
            rows.append((4, flags, ins.write_address, 0, ins.read_address, 0, sub))
        elif t is LoadWeights:
            rows.append((3, int(ins.zeroes), ins.local_address, ins.local_stride, ins.size, 0, 0))
        elif t is NoOp:
            rows.append((0, 0, 0, 0, 0, 0, 0))
        else:  # Configure, LoadLUT: rare, the reference encoder handles them
            return encode_program(instructions, layout)
    cols = np.array(rows, dtype=np.int64)
    op, flags, a0, s0, a1, s1, o2 = cols.T
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
        return encode_program(instructions, layout)  # raises with the instruction's index
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
