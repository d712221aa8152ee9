"""The Tensor Compute Unit's instructions as Python values.

Field conventions follow Tensil: ``size`` is the encoded size, *one less* than the number of
vectors moved; strides are the real stride (a power of two), encoded as its log2.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Union


class Opcode(IntEnum):
    NOOP = 0x0
    MATMUL = 0x1
    DATAMOVE = 0x2
    LOADWEIGHTS = 0x3
    SIMD = 0x4
    LOADLUT = 0x5
    # The Tandem vector unit (systolix.isa.tandem; only on an architecture with the unit).
    TCONFIG = 0x6
    TLOOP = 0x7
    TALU = 0x8
    TCALC = 0x9
    TCMP = 0xA
    TPERMUTE = 0xB
    TCAST = 0xC
    TSYNC = 0xD
    CONFIGURE = 0xF


OPCODE_NAMES = {
    Opcode.NOOP: "NoOp",
    Opcode.MATMUL: "MatMul",
    Opcode.DATAMOVE: "DataMove",
    Opcode.LOADWEIGHTS: "LoadWeights",
    Opcode.SIMD: "SIMD",
    Opcode.LOADLUT: "LoadLUT",
    Opcode.TCONFIG: "TConfig",
    Opcode.TLOOP: "TLoop",
    Opcode.TALU: "TAlu",
    Opcode.TCALC: "TCalc",
    Opcode.TCMP: "TCmp",
    Opcode.TPERMUTE: "TPermute",
    Opcode.TCAST: "TCast",
    Opcode.TSYNC: "TSync",
    Opcode.CONFIGURE: "Configure",
}


class DataFlow(IntEnum):
    """DataMove's flags: where the data goes. 14 is reserved; 4-11 are undefined."""

    DRAM0_TO_LOCAL = 0
    LOCAL_TO_DRAM0 = 1
    DRAM1_TO_LOCAL = 2
    LOCAL_TO_DRAM1 = 3
    ACC_TO_LOCAL = 12
    LOCAL_TO_ACC = 13
    LOCAL_TO_ACC_ACCUMULATE = 15

    @property
    def far_memory(self) -> str:
        """The memory on the other side of local memory: ``dram0``, ``dram1`` or ``acc``."""
        return {0: "dram0", 1: "dram0", 2: "dram1", 3: "dram1"}.get(int(self), "acc")

    @property
    def to_local(self) -> bool:
        return self in (DataFlow.DRAM0_TO_LOCAL, DataFlow.DRAM1_TO_LOCAL, DataFlow.ACC_TO_LOCAL)


class SimdOp(IntEnum):
    NOOP = 0x0
    ZERO = 0x1
    MOVE = 0x2
    NOT = 0x3
    AND = 0x4
    OR = 0x5
    INCREMENT = 0x6
    DECREMENT = 0x7
    ADD = 0x8
    SUBTRACT = 0x9
    MULTIPLY = 0xA
    ABS = 0xB
    GREATER_THAN = 0xC
    GREATER_THAN_EQUAL = 0xD
    MIN = 0xE
    MAX = 0xF


SIMD_OP_NAMES = {
    SimdOp.NOOP: "NoOp",
    SimdOp.ZERO: "Zero",
    SimdOp.MOVE: "Move",
    SimdOp.NOT: "Not",
    SimdOp.AND: "And",
    SimdOp.OR: "Or",
    SimdOp.INCREMENT: "Increment",
    SimdOp.DECREMENT: "Decrement",
    SimdOp.ADD: "Add",
    SimdOp.SUBTRACT: "Subtract",
    SimdOp.MULTIPLY: "Multiply",
    SimdOp.ABS: "Abs",
    SimdOp.GREATER_THAN: "GreaterThan",
    SimdOp.GREATER_THAN_EQUAL: "GreaterThanEqual",
    SimdOp.MIN: "Min",
    SimdOp.MAX: "Max",
}


class ConfigRegister(IntEnum):
    """Configuration registers of Tensil's TCU (``Configure`` sets them)."""

    DRAM0_OFFSET = 0x0
    DRAM0_CACHE = 0x1
    DRAM1_OFFSET = 0x4
    DRAM1_CACHE = 0x5
    TIMEOUT = 0x8
    TRACEPOINT = 0x9
    PROGRAM_COUNTER = 0xA
    SAMPLE_INTERVAL = 0xB


CONFIG_REGISTER_NAMES = {
    ConfigRegister.DRAM0_OFFSET: "dram0_offset",
    ConfigRegister.DRAM0_CACHE: "dram0_cache",
    ConfigRegister.DRAM1_OFFSET: "dram1_offset",
    ConfigRegister.DRAM1_CACHE: "dram1_cache",
    ConfigRegister.TIMEOUT: "timeout",
    ConfigRegister.TRACEPOINT: "tracepoint",
    ConfigRegister.PROGRAM_COUNTER: "program_counter",
    ConfigRegister.SAMPLE_INTERVAL: "sample_interval",
}


@dataclass(frozen=True)
class NoOp:
    """Do nothing."""

    opcode: ClassVar[Opcode] = Opcode.NOOP


@dataclass(frozen=True)
class MatMul:
    """Stream ``size + 1`` local vectors through the array into the accumulators."""

    local_address: int
    acc_address: int
    size: int
    local_stride: int = 1
    acc_stride: int = 1
    accumulate: bool = False
    zeroes: bool = False
    opcode: ClassVar[Opcode] = Opcode.MATMUL

    @property
    def count(self) -> int:
        return self.size + 1


@dataclass(frozen=True)
class DataMove:
    """Copy ``size + 1`` vectors between local memory and DRAM0, DRAM1 or the accumulators."""

    flow: DataFlow
    local_address: int
    address: int
    size: int
    local_stride: int = 1
    stride: int = 1
    opcode: ClassVar[Opcode] = Opcode.DATAMOVE

    @property
    def count(self) -> int:
        return self.size + 1


@dataclass(frozen=True)
class LoadWeights:
    """Shift ``size + 1`` local vectors (or zeros) into the array's weights, last address first."""

    local_address: int
    size: int
    local_stride: int = 1
    zeroes: bool = False
    opcode: ClassVar[Opcode] = Opcode.LOADWEIGHTS

    @property
    def count(self) -> int:
        return self.size + 1


@dataclass(frozen=True)
class SIMD:
    """One vector operation on the accumulators."""

    op: SimdOp
    left: int = 0
    right: int = 0
    dest: int = 0
    write_address: int = 0
    read_address: int = 0
    read: bool = False
    write: bool = False
    accumulate: bool = False
    opcode: ClassVar[Opcode] = Opcode.SIMD


@dataclass(frozen=True)
class LoadLUT:
    """Load a lookup table (documented by Tensil, implemented by no hardware)."""

    local_address: int
    table: int
    local_stride: int = 1
    opcode: ClassVar[Opcode] = Opcode.LOADLUT


@dataclass(frozen=True)
class Configure:
    """Set a configuration register."""

    register: int
    value: int
    opcode: ClassVar[Opcode] = Opcode.CONFIGURE


Instruction = Union[NoOp, MatMul, DataMove, LoadWeights, SIMD, LoadLUT, Configure]
