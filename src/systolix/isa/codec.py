"""Encode instructions to bytes and decode programs back, exactly as Tensil lays them out.

A program decodes into columns (``DecodedProgram``): one NumPy array per field, which is what
the emulator and the latency model iterate over. Single instructions convert to and from the
dataclasses in ``systolix.isa.instructions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from systolix.errors import DecodingError, EncodingError
from systolix.isa.instructions import (
    OPCODE_NAMES,
    SIMD,
    Configure,
    DataFlow,
    DataMove,
    Instruction,
    LoadLUT,
    LoadWeights,
    MatMul,
    NoOp,
    Opcode,
    SimdOp,
)
from systolix.isa import tandem
from systolix.isa.layout import InstructionLayout

VALID_OPCODES = np.array([int(o) for o in Opcode if not tandem.is_tandem(o)], dtype=np.uint8)
NO_TANDEM_UNIT = ("a Tandem instruction, but the architecture has no Tandem unit (add a 'tandem' key to its "
                  ".tarch, or use a preset with the unit such as ultra96v2_tandem)")
VALID_FLOWS = np.array([int(f) for f in DataFlow], dtype=np.uint8)
# Flag bits each opcode defines; any other set bit is an invalid instruction.
FLAG_MASKS = {
    Opcode.NOOP: 0x0,
    Opcode.MATMUL: 0x3,  # accumulate, zeroes
    Opcode.DATAMOVE: 0xF,  # the data-flow kind
    Opcode.LOADWEIGHTS: 0x1,  # zeroes
    Opcode.SIMD: 0x7,  # read, write, accumulate
    Opcode.LOADLUT: 0x0,
    Opcode.CONFIGURE: 0x0,
    **{Opcode(o): 0xF for o in tandem.TANDEM_OPCODES},  # each function is checked by tandem.from_payload
}


def _name(instr_or_opcode) -> str:
    op = instr_or_opcode if isinstance(instr_or_opcode, Opcode) else instr_or_opcode.opcode
    return OPCODE_NAMES[op]


def _stride_log2(instr, field: str, stride: int, bits: int) -> int:
    if stride < 1 or stride & (stride - 1):
        raise EncodingError(f"{_name(instr)}: field {field!r} = {stride} is not a power of two")
    log2 = stride.bit_length() - 1
    if log2 >= (1 << bits):
        raise EncodingError(
            f"{_name(instr)}: field {field!r} = {stride} is too large (at most {1 << ((1 << bits) - 1)})"
        )
    return log2


def _check(instr, field: str, value: int, bits: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise EncodingError(f"{_name(instr)}: field {field!r} must be an integer, got {value!r}")
    value = int(value)
    if value < 0 or value >= (1 << bits):
        raise EncodingError(
            f"{_name(instr)}: field {field!r} = {value} does not fit {bits} bits (0..{(1 << bits) - 1})"
        )
    return value


def _split_payload(whole: int, L: InstructionLayout) -> tuple[int, int, int]:
    """One integer across the three operands, operand 0 lowest (as Configure and Tandem use them)."""
    b0, b1 = L.operand0_bits, L.operand1_bits
    return whole & ((1 << b0) - 1), (whole >> b0) & ((1 << b1) - 1), whole >> (b0 + b1)


def encode_fields(instr: Instruction, layout: InstructionLayout) -> tuple[int, int, int, int, int]:
    """``(opcode, flags, operand0, operand1, operand2)`` of one instruction, range-checked."""
    L = layout
    if isinstance(instr, tandem.TANDEM_TYPES):
        name = OPCODE_NAMES[instr.opcode]
        if not L.tandem:
            raise EncodingError(f"{name}: {NO_TANDEM_UNIT}")
        try:
            opcode, func, body = tandem.payload(instr)
        except ValueError as e:
            raise EncodingError(f"{name}: {e}") from None
        if body >> L.operands_bits:  # pragma: no cover - the architecture guarantees TANDEM_PAYLOAD_BITS
            raise EncodingError(f"{name}: needs {body.bit_length()} operand bits, the architecture has {L.operands_bits}")
        return (opcode, func, *_split_payload(body, L))
    if isinstance(instr, NoOp):
        return (0, 0, 0, 0, 0)
    if isinstance(instr, MatMul):
        a0 = _check(instr, "local_address", instr.local_address, L.operand0_address_bits)
        s0 = _stride_log2(instr, "local_stride", instr.local_stride, L.stride0_bits)
        a1 = _check(instr, "acc_address", instr.acc_address, L.operand1_address_bits)
        s1 = _stride_log2(instr, "acc_stride", instr.acc_stride, L.stride1_bits)
        size = _check(instr, "size", instr.size, L.operand2_bits_used)
        flags = int(bool(instr.accumulate)) | int(bool(instr.zeroes)) << 1
        return (int(Opcode.MATMUL), flags, s0 << L.operand0_address_bits | a0, s1 << L.operand1_address_bits | a1, size)
    if isinstance(instr, DataMove):
        try:
            flow = DataFlow(instr.flow)
        except ValueError:
            raise EncodingError(f"DataMove: field 'flow' = {instr.flow!r} is not a data-flow kind") from None
        a0 = _check(instr, "local_address", instr.local_address, L.operand0_address_bits)
        s0 = _stride_log2(instr, "local_stride", instr.local_stride, L.stride0_bits)
        a1 = _check(instr, "address", instr.address, L.operand1_address_bits)
        s1 = _stride_log2(instr, "stride", instr.stride, L.stride1_bits)
        size = _check(instr, "size", instr.size, L.operand2_bits_used)
        return (int(Opcode.DATAMOVE), int(flow), s0 << L.operand0_address_bits | a0, s1 << L.operand1_address_bits | a1, size)
    if isinstance(instr, LoadWeights):
        a0 = _check(instr, "local_address", instr.local_address, L.operand0_address_bits)
        s0 = _stride_log2(instr, "local_stride", instr.local_stride, L.stride0_bits)
        size = _check(instr, "size", instr.size, L.operand1_address_bits)
        return (int(Opcode.LOADWEIGHTS), int(bool(instr.zeroes)), s0 << L.operand0_address_bits | a0, size, 0)
    if isinstance(instr, SIMD):
        try:
            op = SimdOp(instr.op)
        except ValueError:
            raise EncodingError(f"SIMD: field 'op' = {instr.op!r} is not a SIMD operation (0..15)") from None
        r = L.simd_operand_bits
        left = _check(instr, "left", instr.left, r)
        right = _check(instr, "right", instr.right, r)
        dest = _check(instr, "dest", instr.dest, r)
        w = _check(instr, "write_address", instr.write_address, L.operand0_address_bits)
        rd = _check(instr, "read_address", instr.read_address, L.operand1_address_bits)
        sub = int(op) << (3 * r) | left << (2 * r) | right << r | dest
        flags = int(bool(instr.read)) | int(bool(instr.write)) << 1 | int(bool(instr.accumulate)) << 2
        return (int(Opcode.SIMD), flags, w, rd, sub)
    if isinstance(instr, LoadLUT):
        a0 = _check(instr, "local_address", instr.local_address, L.operand0_address_bits)
        s0 = _stride_log2(instr, "local_stride", instr.local_stride, L.stride0_bits)
        table = _check(instr, "table", instr.table, L.operand1_address_bits)
        return (int(Opcode.LOADLUT), 0, s0 << L.operand0_address_bits | a0, table, 0)
    if isinstance(instr, Configure):
        reg = _check(instr, "register", instr.register, 4)
        value = _check(instr, "value", instr.value, min(32, L.operands_bits - 4))
        # Tensil's drivers pack the register into the low 4 bits of all operands and the
        # value above it, across operand boundaries.
        whole = value << 4 | reg
        b0, b1 = L.operand0_bits, L.operand1_bits
        return (
            int(Opcode.CONFIGURE),
            0,
            whole & ((1 << b0) - 1),
            (whole >> b0) & ((1 << b1) - 1),
            whole >> (b0 + b1),
        )
    raise EncodingError(f"not an instruction: {instr!r}")


def encode(instr: Instruction, layout: InstructionLayout) -> bytes:
    """One instruction as little-endian bytes."""
    opcode, flags, op0, op1, op2 = encode_fields(instr, layout)
    whole = op0 | op1 << layout.operand0_bits | op2 << (layout.operand0_bits + layout.operand1_bits)
    whole |= (opcode << 4 | flags) << layout.operands_bits
    return whole.to_bytes(layout.instruction_bytes, "little")


def encode_program(instructions, layout: InstructionLayout) -> bytes:
    """A whole program; an error names the instruction index."""
    out = bytearray()
    for i, instr in enumerate(instructions):
        try:
            out += encode(instr, layout)
        except EncodingError as e:
            raise EncodingError(f"instruction #{i}: {e}") from None
    return bytes(out)


@dataclass
class DecodedProgram:
    """A program as columns of fields, one row per instruction.

    ``addr0``/``stride0`` are operand 0's address and log2 stride, ``addr1``/``stride1``
    operand 1's; ``op2`` is operand 2. For LoadWeights the size is in ``addr1``; ``size``
    holds every instruction's size wherever it is encoded (0 where there is none).
    """

    layout: InstructionLayout
    opcode: np.ndarray
    flags: np.ndarray
    op0: np.ndarray
    op1: np.ndarray
    op2: np.ndarray
    addr0: np.ndarray
    stride0: np.ndarray
    addr1: np.ndarray
    stride1: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return int(self.opcode.shape[0])

    def instruction(self, i: int) -> Instruction:
        """Instruction ``i`` as a dataclass."""
        op = Opcode(int(self.opcode[i]))
        f = int(self.flags[i])
        a0, s0, a1, s1, o2 = (int(self.addr0[i]), 1 << int(self.stride0[i]), int(self.addr1[i]), 1 << int(self.stride1[i]), int(self.op2[i]))
        L = self.layout
        if op is Opcode.NOOP:
            return NoOp()
        if op is Opcode.MATMUL:
            return MatMul(a0, a1, o2, s0, s1, accumulate=bool(f & 1), zeroes=bool(f & 2))
        if op is Opcode.DATAMOVE:
            return DataMove(DataFlow(f), a0, a1, o2, s0, s1)
        if op is Opcode.LOADWEIGHTS:
            return LoadWeights(a0, a1, s0, zeroes=bool(f & 1))
        if op is Opcode.SIMD:
            r = L.simd_operand_bits
            mask = (1 << r) - 1
            return SIMD(
                SimdOp((o2 >> 3 * r) & 0xF), (o2 >> 2 * r) & mask, (o2 >> r) & mask, o2 & mask,
                write_address=int(self.op0[i]), read_address=int(self.op1[i]),
                read=bool(f & 1), write=bool(f & 2), accumulate=bool(f & 4),
            )
        if op is Opcode.LOADLUT:
            return LoadLUT(a0, a1, s0)
        whole = self.payload(i)
        if tandem.is_tandem(op):
            return tandem.from_payload(int(op), f, whole)
        return Configure(whole & 0xF, whole >> 4)

    def payload(self, i: int) -> int:
        """Instruction ``i``'s operands as one integer, operand 0 lowest."""
        L = self.layout
        return int(self.op0[i]) | int(self.op1[i]) << L.operand0_bits | int(self.op2[i]) << (L.operand0_bits + L.operand1_bits)

    def __iter__(self) -> Iterator[Instruction]:
        for i in range(len(self)):
            yield self.instruction(i)

    def to_bytes(self) -> bytes:
        """The program as ``.tprog`` bytes again (what ``decode_program`` read)."""
        L = self.layout
        whole = self.op0.astype(object) | self.op1.astype(object) << L.operand0_bits \
            | self.op2.astype(object) << (L.operand0_bits + L.operand1_bits) \
            | (self.opcode.astype(object) << 4 | self.flags.astype(object)) << L.operands_bits
        return b"".join(int(w).to_bytes(L.instruction_bytes, "little") for w in whole)

    def opcode_counts(self) -> dict[str, int]:
        counts = np.bincount(self.opcode, minlength=16)
        return {OPCODE_NAMES[o]: int(counts[o]) for o in Opcode if counts[o]}

    def datamove_counts(self) -> dict[DataFlow, int]:
        flows = self.flags[self.opcode == Opcode.DATAMOVE]
        counts = np.bincount(flows, minlength=16)
        return {f: int(counts[f]) for f in DataFlow if counts[f]}


def _le_uint(columns: np.ndarray) -> np.ndarray:
    out = np.zeros(columns.shape[0], dtype=np.uint64)
    for i in range(columns.shape[1]):
        out |= columns[:, i].astype(np.uint64) << np.uint64(8 * i)
    return out


def _tandem_word(i: int, opcode, flags, op0, op1, op2, layout: InstructionLayout) -> tuple[object, str]:
    """Word ``i`` as a Tandem instruction, or ``None`` and why it is not one."""
    b0, b1 = layout.operand0_bits, layout.operand1_bits
    whole = int(op0[i]) | int(op1[i]) << b0 | int(op2[i]) << (b0 + b1)
    try:
        return tandem.from_payload(int(opcode[i]), int(flags[i]), whole), ""
    except ValueError as e:
        return None, str(e)


def _no_tandem_unit(i: int, opcode, flags, op0, op1, op2, layout: InstructionLayout) -> str:
    """Why a Tandem opcode does not decode on an architecture without the unit, with its text."""
    from systolix.isa.assembly import format_instruction

    instr, _ = _tandem_word(i, opcode, flags, op0, op1, op2, layout)
    op = int(opcode[i])
    if instr is None:
        return f"unknown opcode 0x{op:X}: a Tandem opcode, but the architecture has no Tandem unit"
    return f"unknown opcode 0x{op:X}: {' '.join(format_instruction(instr).split())} is {NO_TANDEM_UNIT}"


def decode_program(data: bytes, layout: InstructionLayout, source: str = "program") -> DecodedProgram:
    """Decode a ``.tprog``. Raises ``DecodingError`` (not a whole number of instructions, an
    undefined opcode, DataMove kind or flag) naming ``source``, the instruction index and its
    byte offset."""
    n_bytes = layout.instruction_bytes
    if len(data) % n_bytes:
        raise DecodingError(
            f"{source}: {len(data)} bytes is not a whole number of {n_bytes}-byte instructions "
            f"({len(data) // n_bytes} instructions and {len(data) % n_bytes} bytes left over: truncated, "
            f"or built for another architecture)"
        )
    raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, n_bytes)
    b0, b1, b2 = layout.operand_bytes
    op0 = _le_uint(raw[:, :b0])
    op1 = _le_uint(raw[:, b0 : b0 + b1])
    op2 = _le_uint(raw[:, b0 + b1 : b0 + b1 + b2])
    header = raw[:, -1]
    opcode = (header >> 4).astype(np.uint8)
    flags = (header & 0xF).astype(np.uint8)

    def fail(mask: np.ndarray, why) -> None:
        bad = np.flatnonzero(mask)
        if bad.size:
            i = int(bad[0])
            more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
            raise DecodingError(f"{source}: instruction #{i} at byte offset {i * n_bytes}: {why(i)}{more}")

    is_tandem = (opcode >= int(Opcode.TCONFIG)) & (opcode <= int(Opcode.TSYNC))

    def unknown(i: int) -> str:
        if is_tandem[i]:  # only without the unit
            return _no_tandem_unit(i, opcode, flags, op0, op1, op2, layout)
        reserved = " (reserved for the Tandem unit)" if int(opcode[i]) == tandem.TANDEM_RESERVED_OPCODE else ""
        return f"unknown opcode 0x{int(opcode[i]):X}{reserved}"

    fail(~np.isin(opcode, VALID_OPCODES) & ~(is_tandem & layout.tandem), unknown)
    for i in np.flatnonzero(is_tandem):  # with the unit: every Tandem word must decode
        instr, why = _tandem_word(int(i), opcode, flags, op0, op1, op2, layout)
        if instr is None:
            mask = np.zeros(len(opcode), dtype=bool)
            mask[i] = True
            fail(mask, lambda _: f"{OPCODE_NAMES[Opcode(int(opcode[i]))]}: {why}")
    is_dm = opcode == Opcode.DATAMOVE
    fail(is_dm & (flags == 14), lambda i: "reserved DataMove kind 14")
    fail(is_dm & ~np.isin(flags, VALID_FLOWS), lambda i: f"undefined DataMove kind {int(flags[i])}")
    mask_of = np.zeros(16, dtype=np.uint8)
    for op, m in FLAG_MASKS.items():
        mask_of[int(op)] = m
    fail((flags & ~mask_of[opcode]) != 0, lambda i: f"{OPCODE_NAMES[Opcode(int(opcode[i]))]} with undefined flags 0x{int(flags[i]):X}")

    A0, A1 = layout.operand0_address_bits, layout.operand1_address_bits
    S0, S1 = layout.stride0_bits, layout.stride1_bits
    addr0 = op0 & np.uint64((1 << A0) - 1)
    stride0 = (op0 >> np.uint64(A0)).astype(np.int64)
    addr1 = op1 & np.uint64((1 << A1) - 1)
    stride1 = (op1 >> np.uint64(A1)).astype(np.int64)

    # Bits outside every defined field must be zero, so that decoding then encoding gives
    # the same bytes back.
    is_addr = np.isin(opcode, [Opcode.MATMUL, Opcode.DATAMOVE])
    is_lw = opcode == Opcode.LOADWEIGHTS
    is_lut = opcode == Opcode.LOADLUT
    is_simd = opcode == Opcode.SIMD
    is_noop = opcode == Opcode.NOOP
    size_bits = layout.operand2_bits_used
    simd_bits = layout.simd_op_bits + 3 * layout.simd_operand_bits
    fail((is_addr | is_lw | is_lut) & (stride0 >= (1 << S0)), lambda i: "operand 0 has bits set above its stride field")
    fail(is_addr & (stride1 >= (1 << S1)), lambda i: "operand 1 has bits set above its stride field")
    fail(is_addr & (op2 >= np.uint64(1 << size_bits)), lambda i: "operand 2 has bits set above its size field")
    fail((is_lw | is_lut) & ((stride1 != 0) | (op2 != 0)), lambda i: "bits set outside the local address and size fields")
    fail(is_simd & ((stride0 != 0) | (stride1 != 0)), lambda i: "SIMD address operand has bits set above its address field")
    fail(is_simd & (op2 >= np.uint64(1 << simd_bits)), lambda i: "SIMD sub-instruction has bits set above its fields")
    fail(is_noop & ((op0 != 0) | (op1 != 0) | (op2 != 0)), lambda i: "NoOp with non-zero operands")

    size = np.where(is_lw, addr1, np.where(is_addr, op2, np.uint64(0)))
    return DecodedProgram(
        layout=layout,
        opcode=opcode,
        flags=flags,
        op0=op0,
        op1=op1,
        op2=op2,
        addr0=addr0.astype(np.int64),
        stride0=stride0,
        addr1=addr1.astype(np.int64),
        stride1=stride1,
        size=size.astype(np.int64),
    )
