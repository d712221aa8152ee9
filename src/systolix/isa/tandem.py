"""The Tandem vector unit's instructions (opcodes 0x6-0xD): values, binary payload, assembly text.

The unit is optional (the ``tandem`` key of a ``.tarch``); ``docs/tandem.md`` is the reference.
A Tandem instruction is the same word as every other instruction of the architecture: the
header byte ``opcode << 4 | func`` on top, and below it one *payload*, the operand bits read as
one little-endian integer across Tensil's operand boundaries (as ``Configure`` does). Fields sit
at fixed places from bit 0, so a program means the same on every architecture with the unit;
every bit above the fields must be zero.

An operand is ``<namespace, iterator index>`` (3 + 5 bits, as GeneSys's Tandem processor):
``acc`` the accumulators (the array's output buffer), ``local`` local memory, ``interim`` the
unit's own buffer of wide values, ``imm`` the immediate buffer (the index is the slot).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Union

from systolix.isa.instructions import Opcode


class Namespace(IntEnum):
    ACC = 0
    LOCAL = 1
    INTERIM = 2
    IMM = 3


NAMESPACE_NAMES = {Namespace.ACC: "acc", Namespace.LOCAL: "local", Namespace.INTERIM: "interim", Namespace.IMM: "imm"}
_NAMESPACE_BY_NAME = {v: k for k, v in NAMESPACE_NAMES.items()}


class TAluOp(IntEnum):
    ADD = 0
    SUB = 1
    MUL = 2
    MAC = 3  # dst + src1 * src2
    DIV = 4
    MAX = 5
    MIN = 6
    SHIFT = 7  # src1 * 2^floor(src2): left for positive amounts, right (rounded) for negative
    NOT = 8
    AND = 9
    OR = 10
    MOVE = 11
    CMOVE = 12  # dst = src1 where src2 is non-zero, else dst unchanged


class TCalcOp(IntEnum):
    ABS = 0
    SIGN = 1
    FLOOR = 2
    NEG = 3


class TCmpOp(IntEnum):
    EQ = 0
    NE = 1
    GT = 2
    GE = 3
    LT = 4
    LE = 5


class TPermuteOp(IntEnum):
    LANE_SUM = 0
    LANE_MAX = 1
    LANE_MIN = 2
    TRANSPOSE = 3  # an N x N tile: N vectors from src, N vectors to dst


class TSyncKind(IntEnum):
    TO_UNIT = 0  # the array hands its results over: the unit waits for every earlier TCU instruction
    TO_ARRAY = 1  # and back: later TCU instructions wait for every earlier unit instruction
    RELEASE = 2  # the unit hands buffer `buf` back once every earlier unit instruction is done
    WAIT = 3  # later TCU instructions wait for the latest earlier RELEASE of buffer `buf`


class TConfigFunc(IntEnum):
    BASE = 0
    STRIDE = 1
    IMM = 2


ALU_NAMES = {TAluOp.ADD: "Add", TAluOp.SUB: "Sub", TAluOp.MUL: "Mul", TAluOp.MAC: "Mac", TAluOp.DIV: "Div",
             TAluOp.MAX: "Max", TAluOp.MIN: "Min", TAluOp.SHIFT: "Shift", TAluOp.NOT: "Not", TAluOp.AND: "And",
             TAluOp.OR: "Or", TAluOp.MOVE: "Move", TAluOp.CMOVE: "CMove"}
UNARY_ALU = {TAluOp.NOT, TAluOp.MOVE}
CALC_NAMES = {TCalcOp.ABS: "Abs", TCalcOp.SIGN: "Sign", TCalcOp.FLOOR: "Floor", TCalcOp.NEG: "Neg"}
CMP_NAMES = {TCmpOp.EQ: "Eq", TCmpOp.NE: "Ne", TCmpOp.GT: "Gt", TCmpOp.GE: "Ge", TCmpOp.LT: "Lt", TCmpOp.LE: "Le"}
PERMUTE_NAMES = {TPermuteOp.LANE_SUM: "LaneSum", TPermuteOp.LANE_MAX: "LaneMax", TPermuteOp.LANE_MIN: "LaneMin",
                 TPermuteOp.TRANSPOSE: "Transpose"}
SYNC_NAMES = {TSyncKind.TO_UNIT: "to_unit", TSyncKind.TO_ARRAY: "to_array", TSyncKind.RELEASE: "release",
              TSyncKind.WAIT: "wait"}
BUFFERED_SYNCS = {TSyncKind.RELEASE, TSyncKind.WAIT}

# Field widths (docs/tandem.md, "Encoding").
OPERAND_BITS = 8
NS_BITS = 3
INDEX_BITS = 5
ITER_VALUE_BITS = 25  # a base (unsigned) or a stride (two's complement): addresses up to 2^24
LEVEL_BITS = 3
IMM_VALUE_BITS = 32
LOOP_COUNT_BITS = 16
LOOP_BODY_BITS = 8
CAST_FIELD_BITS = 6
SYNC_BUF_BITS = 2  # buffer tokens of TSync release/wait
MAX_LOOP_LEVELS = 1 << LEVEL_BITS


@dataclass(frozen=True)
class TOperand:
    """``<namespace, iterator index>``; for ``imm`` the index is the immediate slot."""

    ns: Namespace
    index: int

    def __str__(self) -> str:
        return f"{NAMESPACE_NAMES[Namespace(self.ns)]}.{self.index}"


ZERO_OPERAND = TOperand(Namespace.ACC, 0)


@dataclass(frozen=True)
class TIterBase:
    """Set the base address of iterator ``index`` of namespace ``ns``."""

    ns: Namespace
    index: int
    value: int
    opcode: ClassVar[Opcode] = Opcode.TCONFIG
    func: ClassVar[int] = TConfigFunc.BASE


@dataclass(frozen=True)
class TIterStride:
    """Set the stride iterator ``index`` of namespace ``ns`` advances by at loop ``level``."""

    ns: Namespace
    index: int
    level: int
    value: int
    opcode: ClassVar[Opcode] = Opcode.TCONFIG
    func: ClassVar[int] = TConfigFunc.STRIDE


@dataclass(frozen=True)
class TImm:
    """Write a raw value of the wide type into immediate slot ``slot``."""

    slot: int
    value: int
    opcode: ClassVar[Opcode] = Opcode.TCONFIG
    func: ClassVar[int] = TConfigFunc.IMM


@dataclass(frozen=True)
class TLoop:
    """Repeat the next ``body`` instructions ``iterations`` times, counting with loop ``level``."""

    level: int
    iterations: int
    body: int
    opcode: ClassVar[Opcode] = Opcode.TLOOP
    func: ClassVar[int] = 0


@dataclass(frozen=True)
class TAlu:
    """``dst = op(src1, src2)`` on one vector, every lane."""

    op: TAluOp
    dst: TOperand
    src1: TOperand
    src2: TOperand = ZERO_OPERAND
    opcode: ClassVar[Opcode] = Opcode.TALU

    @property
    def func(self) -> int:
        return int(self.op)


@dataclass(frozen=True)
class TCalc:
    """``dst = op(src)``: absolute value, sign, floor, negation."""

    op: TCalcOp
    dst: TOperand
    src: TOperand
    opcode: ClassVar[Opcode] = Opcode.TCALC

    @property
    def func(self) -> int:
        return int(self.op)


@dataclass(frozen=True)
class TCmp:
    """``dst = ONE if src1 op src2 else 0``."""

    op: TCmpOp
    dst: TOperand
    src1: TOperand
    src2: TOperand
    opcode: ClassVar[Opcode] = Opcode.TCMP

    @property
    def func(self) -> int:
        return int(self.op)


@dataclass(frozen=True)
class TPermute:
    """Cross-lane work: a reduction broadcast to every lane, or an N x N transpose."""

    op: TPermuteOp
    dst: TOperand
    src: TOperand
    opcode: ClassVar[Opcode] = Opcode.TPERMUTE

    @property
    def func(self) -> int:
        return int(self.op)


@dataclass(frozen=True)
class TCast:
    """Round (half to even) and saturate to fixed point of ``width`` bits, ``frac`` of them fractional."""

    dst: TOperand
    src: TOperand
    width: int
    frac: int
    opcode: ClassVar[Opcode] = Opcode.TCAST
    func: ClassVar[int] = 0


@dataclass(frozen=True)
class TSync:
    """Hand the accumulators from the array to the unit (``to_unit``) or back (``to_array``, or
    per buffer: ``release`` in the unit's stream, ``wait`` in the TCU's)."""

    kind: TSyncKind
    buf: int = 0
    opcode: ClassVar[Opcode] = Opcode.TSYNC

    @property
    def func(self) -> int:
        return int(self.kind)


TandemInstruction = Union[TIterBase, TIterStride, TImm, TLoop, TAlu, TCalc, TCmp, TPermute, TCast, TSync]
TANDEM_TYPES = (TIterBase, TIterStride, TImm, TLoop, TAlu, TCalc, TCmp, TPermute, TCast, TSync)
TANDEM_OPCODES = tuple(range(int(Opcode.TCONFIG), int(Opcode.TSYNC) + 1))
TANDEM_RESERVED_OPCODE = 0xE
# Instructions that compute on vectors (they may sit in a loop body).
BODY_TYPES = (TLoop, TAlu, TCalc, TCmp, TPermute, TCast)


def is_tandem(opcode: int) -> bool:
    return int(Opcode.TCONFIG) <= int(opcode) <= int(Opcode.TSYNC)


# --- payload -----------------------------------------------------------------------------
def _field(name: str, value, bits: int, signed: bool = False, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"field {name!r} must be an integer, got {value!r}")
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (low, (1 << bits) - 1 + low)
    if not lo <= value <= hi:
        raise ValueError(f"field {name!r} = {value} does not fit {bits} bits ({lo}..{hi})")
    return (value - low) & ((1 << bits) - 1)


def _operand(name: str, op: TOperand, writes: bool = False) -> int:
    if not isinstance(op, TOperand):
        raise ValueError(f"field {name!r} must be an operand like acc.0, got {op!r}")
    try:
        ns = Namespace(op.ns)
    except ValueError:
        raise ValueError(f"field {name!r}: namespace {op.ns!r} is not one of {', '.join(NAMESPACE_NAMES.values())}") from None
    if writes and ns is Namespace.IMM:
        raise ValueError(f"field {name!r}: the immediate buffer is read-only (TImm writes it)")
    return int(ns) << INDEX_BITS | _field(f"{name} index", op.index, INDEX_BITS)


def payload(instr: TandemInstruction) -> tuple[int, int, int]:
    """``(opcode, func, payload)`` of a Tandem instruction; ``ValueError`` says which field is bad."""
    if isinstance(instr, TIterBase) or isinstance(instr, TIterStride):
        ns = Namespace(instr.ns) if instr.ns in set(Namespace) else None
        if ns is None or ns is Namespace.IMM:
            raise ValueError(f"field 'ns' = {instr.ns!r}: iterators belong to acc, local or interim")
        level = _field("level", instr.level, LEVEL_BITS) if isinstance(instr, TIterStride) else 0
        value = _field("value", instr.value, ITER_VALUE_BITS, signed=isinstance(instr, TIterStride))
        body = value | level << 25 | _field("index", instr.index, INDEX_BITS) << 28 | int(ns) << 33
        return int(Opcode.TCONFIG), instr.func, body
    if isinstance(instr, TImm):
        value = _field("value", instr.value, IMM_VALUE_BITS, signed=True)
        return int(Opcode.TCONFIG), instr.func, value | _field("slot", instr.slot, INDEX_BITS) << 32
    if isinstance(instr, TLoop):
        body = (_field("iterations", instr.iterations, LOOP_COUNT_BITS, low=1)
                | _field("body", instr.body, LOOP_BODY_BITS, low=1) << 16 | _field("level", instr.level, LEVEL_BITS) << 24)
        return int(Opcode.TLOOP), 0, body
    if isinstance(instr, TAlu):
        op = TAluOp(instr.op)
        if op in UNARY_ALU and instr.src2 != ZERO_OPERAND:
            raise ValueError(f"{ALU_NAMES[op]} takes one source (src2 must be {ZERO_OPERAND})")
        return (int(Opcode.TALU), int(op), _operand("dst", instr.dst, True) | _operand("src1", instr.src1) << 8
                | _operand("src2", instr.src2) << 16)
    if isinstance(instr, TCmp):
        op = TCmpOp(instr.op)
        return (int(Opcode.TCMP), int(op), _operand("dst", instr.dst, True) | _operand("src1", instr.src1) << 8
                | _operand("src2", instr.src2) << 16)
    if isinstance(instr, (TCalc, TPermute)):
        op = TCalcOp(instr.op) if isinstance(instr, TCalc) else TPermuteOp(instr.op)
        return int(instr.opcode), int(op), _operand("dst", instr.dst, True) | _operand("src", instr.src) << 8
    if isinstance(instr, TCast):
        return (int(Opcode.TCAST), 0, _operand("dst", instr.dst, True) | _operand("src", instr.src) << 8
                | _field("width", instr.width, CAST_FIELD_BITS, low=1) << 16 | _field("frac", instr.frac, CAST_FIELD_BITS) << 22)
    if isinstance(instr, TSync):
        kind = TSyncKind(instr.kind)
        if kind not in BUFFERED_SYNCS and instr.buf != 0:
            raise ValueError(f"TSync {SYNC_NAMES[kind]} names no buffer (buf must be 0)")
        return int(Opcode.TSYNC), int(kind), _field("buf", instr.buf, SYNC_BUF_BITS)
    raise ValueError(f"not a Tandem instruction: {instr!r}")


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) else value


def _op(bits: int) -> TOperand:
    ns = bits >> INDEX_BITS
    if ns not in set(Namespace):
        raise ValueError(f"undefined namespace {ns}")
    return TOperand(Namespace(ns), bits & ((1 << INDEX_BITS) - 1))


def from_payload(opcode: int, func: int, body: int) -> TandemInstruction:
    """The instruction a Tandem word holds; ``ValueError`` for an undefined function, namespace
    or bits set outside the fields (so that every decoded word encodes to the same bytes)."""
    def used(bits: int) -> None:
        if body >> bits:
            raise ValueError(f"bits set above its fields (bit {body.bit_length() - 1}; its fields end at bit {bits - 1})")

    def func_of(enum, names):
        if func not in set(enum):
            raise ValueError(f"undefined function {func} (defined: {', '.join(f'{int(k)} {v}' for k, v in names.items())})")
        return enum(func)

    if opcode == Opcode.TCONFIG:
        kind = func_of(TConfigFunc, {TConfigFunc.BASE: "base", TConfigFunc.STRIDE: "stride", TConfigFunc.IMM: "imm"})
        if kind is TConfigFunc.IMM:
            used(37)
            return TImm(body >> 32 & 31, _signed(body & 0xFFFFFFFF, 32))
        used(36)
        ns = body >> 33
        if ns not in set(Namespace) or ns == Namespace.IMM:
            raise ValueError(f"iterators of namespace {ns} do not exist (acc, local or interim)")
        index, level, value = body >> 28 & 31, body >> 25 & 7, body & ((1 << ITER_VALUE_BITS) - 1)
        if kind is TConfigFunc.BASE:
            if level:
                raise ValueError("a base has no loop level (bits 25-27 must be zero)")
            return TIterBase(Namespace(ns), index, value)
        return TIterStride(Namespace(ns), index, level, _signed(value, ITER_VALUE_BITS))
    if opcode == Opcode.TLOOP:
        if func:
            raise ValueError(f"undefined function {func} (TLoop has only 0)")
        used(27)
        return TLoop(body >> 24 & 7, (body & 0xFFFF) + 1, (body >> 16 & 0xFF) + 1)
    if opcode in (Opcode.TALU, Opcode.TCMP):
        used(24)
        dst, s1, s2 = _op(body & 0xFF), _op(body >> 8 & 0xFF), _op(body >> 16 & 0xFF)
        if dst.ns == Namespace.IMM:
            raise ValueError("writes the immediate buffer, which is read-only")
        if opcode == Opcode.TALU:
            op = func_of(TAluOp, ALU_NAMES)
            if op in UNARY_ALU and s2 != ZERO_OPERAND:
                raise ValueError(f"{ALU_NAMES[op]} with a second source (bits 16-23 must be zero)")
            return TAlu(op, dst, s1, s2)
        return TCmp(func_of(TCmpOp, CMP_NAMES), dst, s1, s2)
    if opcode in (Opcode.TCALC, Opcode.TPERMUTE, Opcode.TCAST):
        used(28 if opcode == Opcode.TCAST else 16)
        dst, src = _op(body & 0xFF), _op(body >> 8 & 0xFF)
        if dst.ns == Namespace.IMM:
            raise ValueError("writes the immediate buffer, which is read-only")
        if opcode == Opcode.TCALC:
            return TCalc(func_of(TCalcOp, CALC_NAMES), dst, src)
        if opcode == Opcode.TPERMUTE:
            return TPermute(func_of(TPermuteOp, PERMUTE_NAMES), dst, src)
        if func:
            raise ValueError(f"undefined function {func} (TCast has only 0)")
        return TCast(dst, src, (body >> 16 & 63) + 1, body >> 22 & 63)
    if opcode == Opcode.TSYNC:
        kind = func_of(TSyncKind, SYNC_NAMES)
        used(SYNC_BUF_BITS if kind in BUFFERED_SYNCS else 0)
        return TSync(kind, body)
    raise ValueError(f"opcode 0x{opcode:X} is not a Tandem instruction")


# --- assembly text -------------------------------------------------------------------------
def format_tandem(instr: TandemInstruction, line) -> str:
    """One Tandem instruction as text; ``line(mnemonic, rest)`` pads the mnemonic."""
    if isinstance(instr, TIterBase):
        return line("TIter", f"base {TOperand(instr.ns, instr.index)} = {instr.value}")
    if isinstance(instr, TIterStride):
        return line("TIter", f"stride {TOperand(instr.ns, instr.index)} level={instr.level} = {instr.value}")
    if isinstance(instr, TImm):
        return line("TImm", f"imm.{instr.slot} = {instr.value}")
    if isinstance(instr, TLoop):
        return line("TLoop", f"level={instr.level} iterations={instr.iterations} body={instr.body}")
    if isinstance(instr, TAlu):
        op = TAluOp(instr.op)
        srcs = f"{instr.src1}" if op in UNARY_ALU else f"{instr.src1}, {instr.src2}"
        return line("TAlu", f"{ALU_NAMES[op]} {instr.dst} <- {srcs}")
    if isinstance(instr, TCmp):
        return line("TCmp", f"{CMP_NAMES[TCmpOp(instr.op)]} {instr.dst} <- {instr.src1}, {instr.src2}")
    if isinstance(instr, TCalc):
        return line("TCalc", f"{CALC_NAMES[TCalcOp(instr.op)]} {instr.dst} <- {instr.src}")
    if isinstance(instr, TPermute):
        return line("TPermute", f"{PERMUTE_NAMES[TPermuteOp(instr.op)]} {instr.dst} <- {instr.src}")
    if isinstance(instr, TCast):
        return line("TCast", f"{instr.dst} <- {instr.src} width={instr.width} frac={instr.frac}")
    if isinstance(instr, TSync):
        kind = TSyncKind(instr.kind)
        return line("TSync", SYNC_NAMES[kind] + (f" buf={instr.buf}" if kind in BUFFERED_SYNCS else ""))
    raise ValueError(f"not a Tandem instruction: {instr!r}")


MNEMONICS = {"titer", "timm", "tloop", "talu", "tcmp", "tcalc", "tpermute", "tcast", "tsync"}
_NUM = r"[-+]?(?:0[xX][0-9a-fA-F]+|\d+)"
_OPERAND = r"([a-zA-Z]+)\.(\d+)"


def _parse_operand(ns: str, index: str, where: str) -> TOperand:
    key = ns.lower()
    if key not in _NAMESPACE_BY_NAME:
        raise ValueError(f"unknown namespace {ns!r} (expected one of {', '.join(NAMESPACE_NAMES.values())})")
    return TOperand(_NAMESPACE_BY_NAME[key], int(index))


def _by_name(names: dict, text: str, what: str):
    for k, v in names.items():
        if v.lower() == text.lower():
            return k
    raise ValueError(f"unknown {what} {text!r} (expected one of {', '.join(names.values())})")


def parse_tandem(key: str, body: str) -> TandemInstruction:
    """Parse the operands of Tandem mnemonic ``key`` (lower case); ``ValueError`` says what is wrong."""
    body = " ".join(body.split())
    if key == "titer":
        m = re.fullmatch(rf"(base|stride) {_OPERAND}(?: level=(\d+))? ?= ?({_NUM})", body, re.I)
        if not m:
            raise ValueError("expected 'TIter base NS.K = VALUE' or 'TIter stride NS.K level=L = VALUE'")
        op = _parse_operand(m.group(2), m.group(3), key)
        if m.group(1).lower() == "base":
            if m.group(4) is not None:
                raise ValueError("a base has no level")
            return TIterBase(op.ns, op.index, int(m.group(5), 0))
        if m.group(4) is None:
            raise ValueError("a stride needs level=L")
        return TIterStride(op.ns, op.index, int(m.group(4)), int(m.group(5), 0))
    if key == "timm":
        m = re.fullmatch(rf"imm\.(\d+) ?= ?({_NUM})", body, re.I)
        if not m:
            raise ValueError("expected 'TImm imm.K = VALUE' (a raw value of the wide type)")
        return TImm(int(m.group(1)), int(m.group(2), 0))
    if key == "tloop":
        m = re.fullmatch(r"level=(\d+) iterations=(\d+) body=(\d+)", body, re.I)
        if not m:
            raise ValueError("expected 'TLoop level=L iterations=N body=B'")
        return TLoop(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if key == "tsync":
        name, _, rest = body.partition(" ")
        kind = _by_name(SYNC_NAMES, name, "sync kind")
        m = re.fullmatch(r"buf=(\d+)", rest.strip(), re.I)
        if kind in BUFFERED_SYNCS and not m:
            raise ValueError(f"expected 'TSync {SYNC_NAMES[kind]} buf=K'")
        if kind not in BUFFERED_SYNCS and rest.strip():
            raise ValueError(f"TSync {SYNC_NAMES[kind]} takes no operands")
        return TSync(kind, int(m.group(1)) if m else 0)
    if key == "tcast":
        m = re.fullmatch(rf"{_OPERAND} <- {_OPERAND} width=(\d+) frac=(\d+)", body, re.I)
        if not m:
            raise ValueError("expected 'TCast DST <- SRC width=W frac=F'")
        return TCast(_parse_operand(m.group(1), m.group(2), key), _parse_operand(m.group(3), m.group(4), key),
                     int(m.group(5)), int(m.group(6)))
    m = re.fullmatch(rf"(\w+) {_OPERAND} <- {_OPERAND}(?:, ?{_OPERAND})?", body, re.I)
    if not m:
        raise ValueError(f"expected '{key.capitalize()} Op DST <- SRC1[, SRC2]' with operands like acc.0")
    dst = _parse_operand(m.group(2), m.group(3), key)
    s1 = _parse_operand(m.group(4), m.group(5), key)
    s2 = _parse_operand(m.group(6), m.group(7), key) if m.group(6) else None
    if key == "talu":
        op = _by_name(ALU_NAMES, m.group(1), "ALU operation")
        if (op in UNARY_ALU) != (s2 is None):
            raise ValueError(f"{ALU_NAMES[op]} takes {'one source' if op in UNARY_ALU else 'two sources'}")
        return TAlu(op, dst, s1, s2 or ZERO_OPERAND)
    if key == "tcmp":
        if s2 is None:
            raise ValueError("a comparison takes two sources")
        return TCmp(_by_name(CMP_NAMES, m.group(1), "comparison"), dst, s1, s2)
    if s2 is not None:
        raise ValueError(f"{key.capitalize()} takes one source")
    if key == "tcalc":
        return TCalc(_by_name(CALC_NAMES, m.group(1), "calculus operation"), dst, s1)
    return TPermute(_by_name(PERMUTE_NAMES, m.group(1), "permute operation"), dst, s1)
