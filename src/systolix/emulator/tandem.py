"""The Tandem vector unit in plain NumPy: the bit-exact definition of its instructions.

``docs/tandem.md`` is the prose; this file is the definition, one method per instruction,
vectorised only over the batch and the lanes. The reference TCU (``reference.py``) and the
emulator (``machine.py``) both run Tandem instructions here (the numba kernels stay the TCU's).

Numbers. The architecture's data type has ``w`` bits, ``bp`` fractional. The unit computes in
its *wide type*: ``2w`` bits with ``2bp`` fractional (FP32BP16 for FP16BP8), so every product
of two data-type values is exact in it. A read from ``acc`` or ``local`` widens exactly
(``raw << bp``); ``interim`` holds wide values; an immediate is a wide raw value broadcast to
every lane. Every result saturates to the wide range; a write to ``acc`` or ``local`` rounds
half to even to ``bp`` bits and saturates to the data type. Where an operation is also a SIMD
ALU operation of the TCU (add, sub, mul, max, min, not/and/or, abs, comparisons, move), the
value written to the accumulators is exactly the SIMD ALU's.

Addresses. Operand ``<ns, k>`` addresses ``base[ns][k] + sum_l stride[ns][k][l] * i_l``: ``i_l``
the index of the running loop of level ``l`` (0 when no loop of that level runs). Addresses
do not depend on data, so ``analyse_tandem`` checks every one before the program runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolix.isa.instructions import Opcode
from systolix.isa.tandem import (
    BODY_TYPES,
    Namespace,
    TAlu,
    TAluOp,
    TCalc,
    TCalcOp,
    TCast,
    TCmp,
    TCmpOp,
    TImm,
    TIterBase,
    TIterStride,
    TLoop,
    TOperand,
    TPermute,
    TPermuteOp,
    TSync,
)

# The TCU memory each namespace maps onto, and the architecture field bounding it.
MEMORY_OF = {Namespace.ACC: "acc", Namespace.LOCAL: "local"}
DEPTH_OF = {Namespace.ACC: "accumulator_depth", Namespace.LOCAL: "local_depth"}
ITERATOR_NAMESPACES = (Namespace.ACC, Namespace.LOCAL, Namespace.INTERIM)
BODY_OPCODES = np.array([int(Opcode.TLOOP), int(Opcode.TALU), int(Opcode.TCALC), int(Opcode.TCMP),
                         int(Opcode.TPERMUTE), int(Opcode.TCAST)], dtype=np.uint8)


def wide_type(arch) -> tuple[int, int]:
    """``(bits, fractional bits)`` of the unit's wide type."""
    return 2 * arch.data_type.width, 2 * arch.data_type.binary_point


def rne_shift(v: np.ndarray, s: int) -> np.ndarray:
    """``v / 2^s`` rounded half to even (``s >= 0``)."""
    if s <= 0:
        return v
    q, r = np.divmod(v, np.int64(1) << s)
    half = np.int64(1) << (s - 1)
    return q + ((r > half) | ((r == half) & (q % 2 == 1)))


class TandemUnit:
    """The unit's state for ``batch`` inputs: iterator tables, immediates, the interim buffer
    and the loop indices. ``step`` runs one instruction (a whole loop for ``TLoop``) on the
    TCU memories it is given."""

    def __init__(self, arch, batch: int):
        cfg = arch.tandem
        if cfg is None:
            raise ValueError("the architecture has no Tandem unit")
        self.n = arch.array_size
        self.bp = arch.data_type.binary_point
        self.lo, self.hi = arch.data_type.min_int, arch.data_type.max_int
        self.wbits, self.wbp = wide_type(arch)
        self.wlo, self.whi = -(1 << (self.wbits - 1)), (1 << (self.wbits - 1)) - 1
        self.one = np.int64(1) << self.wbp
        self.base = np.zeros((3, cfg.iterators), np.int64)
        self.stride = np.zeros((3, cfg.iterators, cfg.loop_levels), np.int64)
        self.imm = np.zeros(cfg.immediates, np.int64)
        self.interim = np.zeros((batch, cfg.interim_depth, self.n), np.int64)
        self.index = np.zeros(cfg.loop_levels, np.int64)
        self.saturations = np.zeros(batch, np.int64)
        """Results saturated, per batch item (wide results, and narrowing writes to acc/local)."""
        self._decoded: tuple[object, dict] | None = None
        self._table: tuple[object, np.ndarray | None] = (None, None)  # run_stretch's decoded program

    # --- numbers -------------------------------------------------------------------------
    def sat(self, v: np.ndarray, lo: int | None = None, hi: int | None = None) -> np.ndarray:
        lo = self.wlo if lo is None else lo
        hi = self.whi if hi is None else hi
        clipped = np.minimum(np.maximum(v, lo), hi)
        changed = clipped != v
        if changed.any():
            self.saturations += changed.reshape(v.shape[0], -1).sum(axis=1)
        return clipped

    # --- operands ------------------------------------------------------------------------
    def address(self, op: TOperand) -> int:
        ns = int(op.ns)
        return int(self.base[ns, op.index] + self.stride[ns, op.index] @ self.index)

    def read(self, op: TOperand, mems: dict, offset: int = 0) -> np.ndarray:
        """``[batch, lanes]`` wide values."""
        ns = Namespace(op.ns)
        if ns is Namespace.IMM:
            return np.full((self.interim.shape[0], self.n), self.imm[op.index], np.int64)
        a = self.address(op) + offset
        if ns is Namespace.INTERIM:
            return self.interim[:, a].copy()
        return mems[MEMORY_OF[ns]][:, a].astype(np.int64) << self.bp

    def write(self, op: TOperand, value: np.ndarray, mems: dict, offset: int = 0) -> None:
        ns = Namespace(op.ns)
        a = self.address(op) + offset
        if ns is Namespace.INTERIM:
            self.interim[:, a] = value
        else:
            mems[MEMORY_OF[ns]][:, a] = self.sat(rne_shift(value, self.bp), self.lo, self.hi)

    # --- running -------------------------------------------------------------------------
    def _instruction(self, program, i: int):
        if self._decoded is None or self._decoded[0] is not program:
            self._decoded = (program, {})
        cache = self._decoded[1]
        if i not in cache:
            cache[i] = program.instruction(i)
        return cache[i]

    def step(self, program, i: int, mems: dict) -> int:
        """Run instruction ``i`` of ``program`` (a loop with its body); the next index."""
        ins = self._instruction(program, i)
        if isinstance(ins, TLoop):
            for k in range(ins.iterations):
                self.index[ins.level] = k
                j = i + 1
                while j < i + 1 + ins.body:
                    j = self.step(program, j, mems)
            self.index[ins.level] = 0
            return i + 1 + ins.body
        getattr(self, type(ins).__name__.lower())(ins, mems)
        return i + 1

    def run_stretch(self, program, i: int, stop: int, mems: dict, whole: bool = True) -> int:
        """Run the Tandem instructions from ``i`` with ``tandem_fast`` (numba): the whole stretch
        up to the next TCU instruction (or ``stop``), or only instruction ``i`` (a loop with its
        body) when ``whole`` is false; the next index. The same results as ``step`` bit for bit;
        ``step`` runs instead when the wide type is too wide for the fast path's int64."""
        from systolix.emulator import tandem_fast as fast

        if self.wbits > fast.FAST_MAX_WIDE_BITS or mems["acc"].dtype != np.int64 or mems["local"].dtype != np.int64:
            return self.step(program, i, mems)
        if self._table[0] is not program:
            self._table = (program, fast.decode_table(program))
        table = self._table[1]
        if whole:
            end = fast.stretch_end(table, i, stop)
        else:
            end = i + 1 + int(table[i, 9]) if table[i, 0] == fast.K_LOOP else i + 1
        return fast.run_tandem(table, i, end, self.base, self.stride, self.imm, self.index, self.interim,
                               mems["acc"], mems["local"], self.saturations, np.int64(self.bp), np.int64(self.wbits),
                               np.int64(self.wbp), np.int64(self.lo), np.int64(self.hi))

    def titerbase(self, ins: TIterBase, mems: dict) -> None:
        self.base[int(ins.ns), ins.index] = ins.value

    def titerstride(self, ins: TIterStride, mems: dict) -> None:
        self.stride[int(ins.ns), ins.index, ins.level] = ins.value

    def timm(self, ins: TImm, mems: dict) -> None:
        self.imm[ins.slot] = ins.value  # analyse_tandem refuses values outside the wide type

    def tsync(self, ins: TSync, mems: dict) -> None:
        """Ordering only: the emulator runs the program in order (the timing model overlaps)."""

    def talu(self, ins: TAlu, mems: dict) -> None:
        op = TAluOp(int(ins.op))
        a = self.read(ins.src1, mems)
        b = self.read(ins.src2, mems)
        one = self.one
        if op is TAluOp.ADD:
            out = self.sat(a + b)
        elif op is TAluOp.SUB:
            out = self.sat(a - b)
        elif op is TAluOp.MUL:
            out = self.sat(rne_shift(a * b, self.wbp))
        elif op is TAluOp.MAC:
            out = self.sat(self.read(ins.dst, mems) + rne_shift(a * b, self.wbp))
        elif op is TAluOp.DIV:
            out = self.divide(a, b)
        elif op is TAluOp.MAX:
            out = np.maximum(a, b)
        elif op is TAluOp.MIN:
            out = np.minimum(a, b)
        elif op is TAluOp.SHIFT:
            out = self.shift(a, b >> self.wbp)
        elif op is TAluOp.NOT:
            out = np.where(a == 0, one, 0)
        elif op is TAluOp.AND:
            out = np.where((a != 0) & (b != 0), one, 0)
        elif op is TAluOp.OR:
            out = np.where((a != 0) | (b != 0), one, 0)
        elif op is TAluOp.MOVE:
            out = a
        else:  # CMOVE
            out = np.where(b != 0, a, self.read(ins.dst, mems))
        self.write(ins.dst, out.astype(np.int64), mems)

    def divide(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a / b`` rounded half to even to the wide type's step; by zero: the largest value of
        ``a``'s sign (0 for 0 / 0)."""
        num = np.abs(a) << self.wbp
        den = np.abs(b)
        safe = np.where(den == 0, 1, den)
        q, r = np.divmod(num, safe)
        q = q + ((2 * r > safe) | ((2 * r == safe) & (q % 2 == 1)))
        q = np.where(np.sign(a) * np.sign(b) < 0, -q, q)
        q = np.where(den == 0, np.where(a > 0, self.whi, np.where(a < 0, self.wlo, 0)), q)
        return self.sat(q)

    def shift(self, a: np.ndarray, k: np.ndarray) -> np.ndarray:
        """``a * 2^k`` per lane: left shifts saturate, right shifts round half to even."""
        k = np.clip(k, -self.wbits, self.wbits - 1)  # beyond these the result no longer changes
        left = self.sat(np.where(k > 0, a << np.maximum(k, 0), a))
        out = left.copy()
        for s in np.unique(k[k < 0]):
            sel = k == s
            out[sel] = rne_shift(a[sel], int(-s))
        return out

    def tcalc(self, ins: TCalc, mems: dict) -> None:
        op = TCalcOp(int(ins.op))
        a = self.read(ins.src, mems)
        if op is TCalcOp.ABS:
            out = self.sat(np.abs(a))
        elif op is TCalcOp.SIGN:
            out = np.sign(a) * self.one
        elif op is TCalcOp.FLOOR:
            out = a & ~(self.one - 1)  # clears the fraction bits: floor in two's complement
        else:
            out = self.sat(-a)
        self.write(ins.dst, out, mems)

    def tcmp(self, ins: TCmp, mems: dict) -> None:
        a = self.read(ins.src1, mems)
        b = self.read(ins.src2, mems)
        test = {TCmpOp.EQ: np.equal, TCmpOp.NE: np.not_equal, TCmpOp.GT: np.greater, TCmpOp.GE: np.greater_equal,
                TCmpOp.LT: np.less, TCmpOp.LE: np.less_equal}[TCmpOp(int(ins.op))]
        self.write(ins.dst, np.where(test(a, b), self.one, 0), mems)

    def tpermute(self, ins: TPermute, mems: dict) -> None:
        op = TPermuteOp(int(ins.op))
        if op is TPermuteOp.TRANSPOSE:
            tile = np.stack([self.read(ins.src, mems, k) for k in range(self.n)], axis=1)  # [batch, vector, lane]
            for k in range(self.n):
                self.write(ins.dst, tile[:, :, k], mems, k)
            return
        a = self.read(ins.src, mems)
        if op is TPermuteOp.LANE_SUM:
            r = self.sat(a.sum(axis=1))
        elif op is TPermuteOp.LANE_MAX:
            r = a.max(axis=1)
        else:
            r = a.min(axis=1)
        self.write(ins.dst, np.repeat(r[:, None], self.n, axis=1), mems)

    def tcast(self, ins: TCast, mems: dict) -> None:
        a = self.read(ins.src, mems)
        drop = self.wbp - ins.frac
        q = self.sat(rne_shift(a, drop), -(1 << (ins.width - 1)), (1 << (ins.width - 1)) - 1)
        self.write(ins.dst, q << drop, mems)


# --- static checks ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TandemSummary:
    """What ``analyse_tandem`` found: times each instruction runs, vectors of ``acc`` and
    ``local`` needed, and the first bad instruction if any: ``(index, message)``, the index
    where a run stops, which is the outermost loop around the bad instruction (a loop runs
    whole or not at all); the message names the bad instruction itself."""

    executions: np.ndarray
    needed: dict[str, int]
    violation: tuple[int, str] | None


def analyse_tandem(program, arch, source: str = "program", describe=None) -> TandemSummary:
    """Check every Tandem instruction of ``program`` against ``arch`` before it runs: the unit
    exists; iterator, level and slot numbers exist; loop bodies hold only compute instructions,
    end inside the program and inside the loops around them, and use each level once; no
    configuration or sync inside a loop; immediates fit the wide type; casts fit it; every
    address every loop iteration reaches lies inside its namespace."""
    n_instr = len(program)
    executions = np.zeros(n_instr, dtype=np.int64)
    needed = {"acc": 0, "local": 0}
    rows = np.flatnonzero((program.opcode >= int(Opcode.TCONFIG)) & (program.opcode <= int(Opcode.TSYNC)))
    describe = describe or (lambda i: repr(program.instruction(i)))
    cfg = arch.tandem

    loops: list[tuple[int, int, int, int]] = []  # (level, iterations, end index, start) of the loops around

    def bad(i: int, why: str) -> TandemSummary:
        stop = loops[0][3] if loops else i
        return TandemSummary(executions, needed, (stop, f"{source}: instruction #{i} ({describe(i)}) {why}"))

    if not rows.size:
        return TandemSummary(executions, needed, None)
    if cfg is None:
        return bad(int(rows[0]), "is a Tandem instruction, but the architecture has no Tandem unit")
    wbits, wbp = wide_type(arch)
    depth = {Namespace.ACC: arch.accumulator_depth, Namespace.LOCAL: arch.local_depth, Namespace.INTERIM: cfg.interim_depth}
    base = np.zeros((3, cfg.iterators), np.int64)
    stride = np.zeros((3, cfg.iterators, cfg.loop_levels), np.int64)
    released: set[int] = set()
    accesses: dict[int, list] = {}  # each unit compute instruction's (memory, lowest, highest, writes)
    stops: dict[int, int] = {}  # where a run stops for a bad instruction (the outermost loop around it)
    for i in rows:
        i = int(i)
        while loops and loops[-1][2] <= i:
            loops.pop()
        ins = program.instruction(i)
        if loops and not isinstance(ins, BODY_TYPES):  # pragma: no cover - TLoop checks its body first
            return bad(i, "cannot sit in a loop body")
        if isinstance(ins, (TIterBase, TIterStride)):
            if ins.index >= cfg.iterators:
                return bad(i, f"sets iterator {ins.index}, past the unit's {cfg.iterators} (tandem.iterators)")
            if isinstance(ins, TIterStride):
                if ins.level >= cfg.loop_levels:
                    return bad(i, f"sets a stride of loop level {ins.level}; the unit has {cfg.loop_levels} (tandem.loop_levels)")
                stride[int(ins.ns), ins.index, ins.level] = ins.value
            else:
                base[int(ins.ns), ins.index] = ins.value
            continue
        if isinstance(ins, TImm):
            if ins.slot >= cfg.immediates:
                return bad(i, f"writes immediate slot {ins.slot}, past the unit's {cfg.immediates} (tandem.immediates)")
            if not -(1 << (wbits - 1)) <= ins.value < (1 << (wbits - 1)):
                return bad(i, f"writes {ins.value}, outside the wide type's range (a {wbits}-bit raw value)")
            continue
        if isinstance(ins, TSync):
            if ins.kind == 2:
                released.add(ins.buf)
            elif ins.kind == 3 and ins.buf not in released:
                return bad(i, f"waits for buffer {ins.buf}, which no earlier TSync release hands back (a deadlock)")
            continue
        active = [(lv, it) for lv, it, _, _ in loops]
        if isinstance(ins, TLoop):
            end = i + 1 + ins.body
            if ins.level >= cfg.loop_levels:
                return bad(i, f"uses loop level {ins.level}; the unit has {cfg.loop_levels} (tandem.loop_levels)")
            if any(lv == ins.level for lv, _ in active):
                return bad(i, f"reuses loop level {ins.level} inside a loop of the same level")
            if end > n_instr:
                return bad(i, f"has a body past the end of the program ({n_instr} instructions)")
            if loops and end > loops[-1][2]:
                return bad(i, "has a body that ends after the body of the loop around it")
            body_ok = np.isin(program.opcode[i + 1 : end], BODY_OPCODES)
            if not body_ok.all():
                j = i + 1 + int(np.flatnonzero(~body_ok)[0])
                return bad(i, f"has instruction #{j} ({describe(j)}) in its body; a loop body holds only TLoop, TAlu, "
                              "TCalc, TCmp, TPermute and TCast")
            loops.append((ins.level, ins.iterations, end, i))
            continue
        executions[i] = int(np.prod([it for _, it in active], dtype=np.int64)) if active else 1
        accesses[i] = []
        stops[i] = loops[0][3] if loops else i
        if isinstance(ins, TCast) and (ins.width > wbits or ins.frac > wbp):
            return bad(i, f"casts to {ins.width} bits with {ins.frac} fractional; the wide type has {wbits} and {wbp}")
        operands = [("writes", ins.dst)] + [("reads", getattr(ins, f)) for f in ("src", "src1", "src2") if hasattr(ins, f)]
        if isinstance(ins, TAlu) and TAluOp(int(ins.op)) in (TAluOp.MAC, TAluOp.CMOVE):
            operands.append(("reads", ins.dst))
        if isinstance(ins, TAlu) and TAluOp(int(ins.op)) in (TAluOp.NOT, TAluOp.MOVE):
            operands = [o for o in operands if o[1] is not ins.src2]
        extra = arch.array_size - 1 if isinstance(ins, TPermute) and ins.op == TPermuteOp.TRANSPOSE else 0
        for verb, op in operands:
            ns = Namespace(op.ns)
            if ns is Namespace.IMM:
                if op.index >= cfg.immediates:
                    return bad(i, f"reads immediate slot {op.index}, past the unit's {cfg.immediates} (tandem.immediates)")
                continue
            if op.index >= cfg.iterators:
                return bad(i, f"uses iterator {op.index}, past the unit's {cfg.iterators} (tandem.iterators)")
            b = int(base[int(ns), op.index])
            lo = b + sum(min(0, int(stride[int(ns), op.index, lv]) * (it - 1)) for lv, it in active)
            hi = b + sum(max(0, int(stride[int(ns), op.index, lv]) * (it - 1)) for lv, it in active) + extra
            name = {Namespace.ACC: "acc", Namespace.LOCAL: "local", Namespace.INTERIM: "interim"}[ns]
            limit = {Namespace.ACC: "accumulator_depth", Namespace.LOCAL: "local_depth",
                     Namespace.INTERIM: "tandem.interim_depth"}[ns]
            if lo < 0:
                return bad(i, f"{verb} {name} address {lo}, below 0 (vectors {lo}..{hi} over its loops)")
            if hi >= depth[ns]:
                return bad(i, f"{verb} {name} address {hi}, past {limit} {depth[ns]} (vectors {lo}..{hi} over its loops)")
            if ns in MEMORY_OF:
                needed[MEMORY_OF[ns]] = max(needed[MEMORY_OF[ns]], hi + 1)
                accesses[i].append((MEMORY_OF[ns], lo, hi, verb == "writes"))
    race = find_race(program, accesses, stops, source, describe)
    return TandemSummary(executions, needed, race)


def find_race(program, accesses: dict, stops: dict, source: str, describe) -> tuple[int, str] | None:
    """The first access to an accumulator or local-memory vector that the unit and the TCU may
    make in either order, with a write among them (the TSyncs between them do not order them):
    the emulator runs a program in order, which the hardware reproduces only without races.

    The unit may run ahead of a TCU instruction before it unless a ``TSync to_unit`` lies
    between them; a TCU instruction may run ahead of a unit instruction before it unless a
    ``TSync to_array``, or a ``TSync wait buf=k`` on a ``release buf=k`` after the unit
    instruction, lies between them. A unit operand counts as every vector between the lowest
    and highest address its loops reach; a TCU access as exactly the vectors it moves."""
    from systolix.emulator.bounds import _slots

    n = len(program)
    slots = _slots(program)
    op, flags = program.opcode, program.flags
    local_id, acc_id = 0, 1  # bounds.MEMORIES order
    names = {local_id: "local", acc_id: "acc"}
    size = {"local": 1, "acc": 1}
    for mem, first, stride, count, _ in slots:
        for m in (local_id, acc_id):
            sel = mem == m
            if sel.any():
                size[names[m]] = max(size[names[m]], int((first[sel] + (count[sel] - 1) * stride[sel]).max()) + 1)
    for acc in accesses.values():
        for m, _, hi, _ in acc:
            size[m] = max(size[m], hi + 1)
    # The instruction that last wrote / read each vector, on each side (-1: none).
    tcu_w = {m: np.full(k, -1, np.int64) for m, k in size.items()}
    tcu_r = {m: np.full(k, -1, np.int64) for m, k in size.items()}
    unit_w = {m: np.full(k, -1, np.int64) for m, k in size.items()}
    unit_r = {m: np.full(k, -1, np.int64) for m, k in size.items()}
    last_to_unit = -1  # the latest TSync to_unit
    horizon = -1  # every unit instruction before this index is known to be done
    released: dict[int, int] = {}
    into_local = np.isin(flags, (0, 2, 12))

    def race(i: int, m: str, vectors: np.ndarray, other: int, why: str) -> tuple[int, str]:
        return (stops.get(i, i), f"{source}: instruction #{i} ({describe(i)}) and #{other} ({describe(other)}) both use "
                                 f"{m} vector {int(vectors[0])} with a write, and {why} (a race)")

    for i in range(n):
        o = int(op[i])
        if o == int(Opcode.TSYNC):
            kind, buf = int(flags[i]), program.payload(i) & 3
            if kind == 0:
                last_to_unit = i
            elif kind == 1:
                horizon = i
            elif kind == 2:
                released[buf] = i
            else:
                horizon = max(horizon, released.get(buf, -1))
            continue
        if i in accesses:
            for m, lo, hi, writes in accesses[i]:
                seg = slice(lo, hi + 1)
                for table in (tcu_w, tcu_r) if writes else (tcu_w,):
                    hit = np.flatnonzero(table[m][seg] > last_to_unit)
                    if hit.size:
                        other = int(table[m][seg][hit[0]])
                        return race(i, m, lo + hit, other, "no TSync to_unit between them orders the unit after the TCU")
                (unit_w if writes else unit_r)[m][seg] = i
            continue
        if Opcode.TCONFIG <= o <= Opcode.TSYNC:
            continue
        for k, (mem, first, stride, count, _) in enumerate(slots):
            mid = int(mem[i])
            if mid not in names:
                continue
            m = names[mid]
            # Slot 0 is local memory (or a SIMD read), slot 1 the far side (or a SIMD write); a
            # DataMove into local memory writes slot 0 and reads slot 1.
            writes = (k == 1) != bool(o == Opcode.DATAMOVE and into_local[i])
            addresses = int(first[i]) + int(stride[i]) * np.arange(int(count[i]))
            for table in (unit_w, unit_r) if writes else (unit_w,):
                hit = np.flatnonzero(table[m][addresses] > horizon)
                if hit.size:
                    other = int(table[m][addresses[hit[0]]])
                    return race(i, m, addresses[hit], other,
                                "no TSync to_array (or wait on a release after the unit's) orders the TCU after the unit")
            (tcu_w if writes else tcu_r)[m][addresses] = i
    return None

