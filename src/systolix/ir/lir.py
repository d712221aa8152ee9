"""LIR: the program as instructions on addresses tagged with the memory they name.

An address is an integer whose high bits hold a ``Memory`` tag and whose low bits the vector's
index in that memory (Tensil's ``MemoryAddress`` packs its tag the same way): adding an offset
keeps the tag, and two addresses of different memories never look adjacent. The emitters
address activations as ``VARS`` and the constant image as ``CONSTS``; ``bind_memories`` (the
backend) then says where those live for the program's strategy: ``VARS`` in ``DRAM0``,
``CONSTS`` in ``DRAM1`` or, with local-consts, in ``LOCAL`` from address 0. A ``Move``'s data
flow (DRAM0 to local memory, local memory to the accumulators...) follows from the memories of
its two ends, as in Tensil's LIR.

Counts are counts here (``count`` vectors), not Tensil's encoded ``size = count - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from systolix.ir.structure import Structural
from systolix.isa import SIMD_OP_NAMES, SimdOp


class Memory(IntEnum):
    """Which memory an address names."""

    ZEROES = 0        # no memory: the array reads zeros (MatMul, LoadWeights)
    LOCAL = 1         # on-chip local memory
    ACCUMULATORS = 2  # the accumulators
    VARS = 3          # an activation's span in DRAM0, as the emitters name it
    CONSTS = 4        # the constant image, as the emitters name it
    DRAM0 = 5
    DRAM1 = 6


TAG_SHIFT = 48
RAW_MASK = (1 << TAG_SHIFT) - 1
MEMORY_NAMES = {Memory.ZEROES: "zeroes", Memory.LOCAL: "local", Memory.ACCUMULATORS: "acc", Memory.VARS: "vars",
                Memory.CONSTS: "consts", Memory.DRAM0: "dram0", Memory.DRAM1: "dram1"}


def address(memory: Memory, raw: int) -> int:
    """The tagged address of vector ``raw`` of ``memory``."""
    return (int(memory) << TAG_SHIFT) + raw


def memory_of(addr: int) -> Memory:
    return Memory(addr >> TAG_SHIFT)


def raw_of(addr: int) -> int:
    return addr & RAW_MASK


# Address 0 of each memory: ``LOCAL + 12`` is local vector 12.
ZEROES = address(Memory.ZEROES, 0)
LOCAL = address(Memory.LOCAL, 0)
ACCUMULATORS = address(Memory.ACCUMULATORS, 0)
VARS = address(Memory.VARS, 0)
CONSTS = address(Memory.CONSTS, 0)
DRAM0 = address(Memory.DRAM0, 0)
DRAM1 = address(Memory.DRAM1, 0)


def format_address(addr: int) -> str:
    memory = memory_of(addr)
    return "zeroes" if memory is Memory.ZEROES else f"{MEMORY_NAMES[memory]}[{raw_of(addr)}]"


def _at(addr: int, stride: int) -> str:
    return format_address(addr) + (f" step {stride}" if stride != 1 else "")


class Instruction:
    """Base of the LIR instructions: slotted values with structural equality."""

    __slots__ = ()

    def fields(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash((type(self).__name__,) + self.fields())

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={format_address(v) if n in self._addresses and v is not None else v!r}"
                         for n, v in zip(self.__slots__, self.fields()))
        return f"{type(self).__name__}({args})"

    _addresses: tuple[str, ...] = ()


class MatMul(Instruction):
    """Stream ``count`` local vectors (or zeros) through the array into the accumulators."""

    __slots__ = ("local", "acc", "count", "local_stride", "acc_stride", "accumulate")
    _addresses = ("local", "acc")

    def __init__(self, local: int, acc: int, count: int, local_stride: int = 1, acc_stride: int = 1, accumulate: bool = False):
        self.local, self.acc, self.count = local, acc, count
        self.local_stride, self.acc_stride, self.accumulate = local_stride, acc_stride, accumulate

    def text(self) -> str:
        return (f"matmul {self.count:>4} {_at(self.local, self.local_stride)} -> {_at(self.acc, self.acc_stride)}"
                + (" accumulate" if self.accumulate else ""))


class Move(Instruction):
    """Copy ``count`` vectors from ``source`` to ``target`` (one side is local memory, or, for
    constants kept in local memory, the other side the accumulators); ``accumulate`` adds into
    the accumulators instead of overwriting."""

    __slots__ = ("source", "target", "count", "source_stride", "target_stride", "accumulate")
    _addresses = ("source", "target")

    def __init__(self, source: int, target: int, count: int, source_stride: int = 1, target_stride: int = 1,
                 accumulate: bool = False):
        self.source, self.target, self.count = source, target, count
        self.source_stride, self.target_stride, self.accumulate = source_stride, target_stride, accumulate

    def text(self) -> str:
        return (f"move   {self.count:>4} {_at(self.source, self.source_stride)} -> {_at(self.target, self.target_stride)}"
                + (" accumulate" if self.accumulate else ""))


class LoadWeights(Instruction):
    """Shift ``count`` local vectors (or zeros) into the array's weights, last address first."""

    __slots__ = ("local", "count", "stride")
    _addresses = ("local",)

    def __init__(self, local: int, count: int, stride: int = 1):
        self.local, self.count, self.stride = local, count, stride

    def text(self) -> str:
        return f"weights {self.count:>4} {_at(self.local, self.stride)}"


class Simd(Instruction):
    """One vector operation of the accumulators' ALUs: ``op(left, right)`` where operand 0 is
    the vector read at ``read`` and 1.. are registers; the result goes to register ``dest``
    (0: none) and to ``write`` (added to it with ``accumulate``)."""

    __slots__ = ("op", "left", "right", "dest", "read", "write", "accumulate")
    _addresses = ("read", "write")

    def __init__(self, op: SimdOp, left: int = 0, right: int = 0, dest: int = 0, read: int | None = None,
                 write: int | None = None, accumulate: bool = False):
        self.op, self.left, self.right, self.dest = op, left, right, dest
        self.read, self.write, self.accumulate = read, write, accumulate

    def text(self) -> str:
        def operand(k: int) -> str:
            return (format_address(self.read) if self.read is not None else "0") if k == 0 else f"r{k}"

        out = [f"r{self.dest}"] if self.dest else []
        if self.write is not None:
            out.append(format_address(self.write) + (" (accumulate)" if self.accumulate else ""))
        return f"simd        {SIMD_OP_NAMES[SimdOp(self.op)].lower()}({operand(self.left)}, {operand(self.right)})" + (
            f" -> {', '.join(out)}" if out else "")


def _tandem_text(ins) -> str:
    """A Tandem unit instruction (``systolix.isa.tandem``, passed through LIR as it is) as assembly."""
    from systolix.isa.assembly import format_instruction

    return "tandem " + format_instruction(ins)


@dataclass(eq=False)
class LayerRecord:
    """One entry of the layer map (its instructions ``[first, end)``) and what the compile
    summary reports of it."""

    name: str
    ops: list[str]
    first: int
    end: int
    macs: int
    stages: int = 0
    partitions: int = 0
    local_peak: int = 0
    acc_peak: int = 0


@dataclass(eq=False)
class TensorPlacement:
    """A model input or output as the ``.tmodel`` describes it: its DRAM0 span and layout."""

    name: str
    shape: tuple[int, ...]
    base: int
    vectors: int
    padded_channels: int
    perm: list[int]
    pack: dict | None = None  # an input the driver packs first (``HirProgram.packs``)


@dataclass(eq=False)
class LirProgram(Structural):
    """Instructions, the constant image and where the model's tensors are."""

    name: str
    instructions: list[Instruction]
    consts: np.ndarray  # raw vectors [n, N]
    layers: list[LayerRecord]
    inputs: list[TensorPlacement]
    outputs: list[TensorPlacement]
    dram0_vectors: int
    local_peak: int
    acc_peak: int
    load_consts_to_local: bool
    strategy: str
    bound: bool = False  # addresses name physical memories (``bind_memories`` ran)
    notes: list[str] = field(default_factory=list)
    batch: int = 1  # images the program runs; each input and output span holds them one after another

    def text(self) -> str:
        lines = [f"lir {self.name}: {len(self.instructions)} instructions, {self.consts.shape[0]} constant vectors, "
                 f"strategy {self.strategy}" + (", memories bound" if self.bound else "")
                 + (f", batch of {self.batch}" if self.batch > 1 else "")]
        for io, spans in (("input", self.inputs), ("output", self.outputs)):
            for t in spans:
                lines.append(f"  {io} {t.name} {list(t.shape)}: dram0[{t.base}] x{t.vectors} "
                             f"(perm {t.perm}, {t.padded_channels} channels padded)")
        starts = {r.first: r for r in self.layers}
        for k, ins in enumerate(self.instructions):
            if k in starts:
                r = starts[k]
                lines.append(f"# layer {r.name} ({'+'.join(r.ops)}): instructions {r.first}..{r.end - 1}")
            lines.append(f"{k:7d}  {ins.text() if isinstance(ins, Instruction) else _tandem_text(ins)}")
        return "\n".join(lines) + "\n"
