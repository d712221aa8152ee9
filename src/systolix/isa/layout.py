"""The instruction layout: how many bits each operand takes, derived from an architecture.

Byte-compatible with Tensil's ``InstructionLayout``: operands are rounded up to whole bytes
and laid out operand 0 lowest, then operand 1, operand 2 and the header byte on top.
"""

from __future__ import annotations

from dataclasses import dataclass

from systolix.arch.architecture import Architecture


# Operand bits every Tandem instruction needs (its widest format, TConfig's immediate, uses 37;
# docs/tandem.md). Every Tensil preset has at least 56.
TANDEM_PAYLOAD_BITS = 40


def log2ceil(n: int) -> int:
    """Bits needed to address ``n`` items (``log2ceil(1) == 0``)."""
    if n < 1:
        raise ValueError("log2ceil needs a positive number")
    return (n - 1).bit_length()


def round_bits_to_bytes(bits: int) -> int:
    return (bits + 7) // 8 * 8


@dataclass(frozen=True)
class InstructionLayout:
    """Bit widths of every instruction field for one architecture."""

    local_bits: int
    accumulator_bits: int
    dram0_bits: int
    dram1_bits: int
    stride0_bits: int
    stride1_bits: int
    simd_op_bits: int
    simd_operand_bits: int
    operand0_address_bits: int
    operand1_address_bits: int
    operand2_bits_used: int
    operand0_bits: int
    operand1_bits: int
    operand2_bits: int
    tandem: bool = False
    """The architecture has the Tandem unit: opcodes 0x6-0xD decode (``systolix.isa.tandem``)."""

    @classmethod
    def of(cls, arch: Architecture) -> "InstructionLayout":
        local = log2ceil(arch.local_depth)
        acc = log2ceil(arch.accumulator_depth)
        d0 = log2ceil(arch.dram0_depth)
        d1 = log2ceil(arch.dram1_depth)
        s0 = log2ceil(arch.stride0_depth)
        s1 = log2ceil(arch.stride1_depth)
        simd_operand = log2ceil(arch.simd_registers_depth + 1)
        simd_op = 4
        op0_addr = max(local, acc)  # MatMul/DataMove/LoadWeights local address; SIMD write address
        op1_addr = max(local, d0, d1, acc)  # LoadWeights size; DataMove DRAM/acc; MatMul/SIMD acc
        op2_used = max(min(local, acc), min(local, d0), min(local, d1), simd_op + 3 * simd_operand)
        return cls(
            local_bits=local,
            accumulator_bits=acc,
            dram0_bits=d0,
            dram1_bits=d1,
            stride0_bits=s0,
            stride1_bits=s1,
            simd_op_bits=simd_op,
            simd_operand_bits=simd_operand,
            operand0_address_bits=op0_addr,
            operand1_address_bits=op1_addr,
            operand2_bits_used=op2_used,
            operand0_bits=round_bits_to_bytes(op0_addr + s0),
            operand1_bits=round_bits_to_bytes(op1_addr + s1),
            operand2_bits=round_bits_to_bytes(op2_used),
            tandem=arch.tandem is not None,
        )

    @property
    def operands_bits(self) -> int:
        return self.operand0_bits + self.operand1_bits + self.operand2_bits

    @property
    def instruction_bytes(self) -> int:
        """Bytes per instruction in a ``.tprog``."""
        return (8 + self.operands_bits) // 8

    @property
    def operand_bytes(self) -> tuple[int, int, int]:
        return (self.operand0_bits // 8, self.operand1_bits // 8, self.operand2_bits // 8)

    @property
    def size_bits(self) -> int:
        """Bits available for a size field (operand 2, or operand 1 for LoadWeights)."""
        return self.operand2_bits_used

    def describe(self) -> str:
        """A short human description of the bit layout, as Tensil prints it."""
        o2 = 8 + self.operand2_bits
        o1 = o2 + self.operand1_bits
        end = o1 + self.operand0_bits
        return (
            f"{self.instruction_bytes} bytes: header [opcode 4 | flags 4], "
            f"operand2 {self.operand2_bits} bits, "
            f"operand1 {self.operand1_bits} bits (stride {self.stride1_bits}, address {self.operand1_address_bits}), "
            f"operand0 {self.operand0_bits} bits (stride {self.stride0_bits}, address {self.operand0_address_bits}); "
            f"{end} bits in all"
        )
