"""Schedule: interleave each output tile's post-ops and save with the next tile's array work.

A conv emits, per output channel group (``ConvTiling.by_group``), its weight loads and MatMuls,
then the group's *tail*: the SIMD post-ops, the accumulators -> local move and the save to DRAM.
Issued in that order, the array idles during the tail and the accumulators idle while each
weight block loads and the array drains (``3N`` clocks a block under the fitted model, ``2N - 3``
on our RTL's single compute lane). The groups of a partition use different accumulators, and
consecutive partitions alternate two buffers where they fit (``ConvTiling.acc_tiles``); so this
pass holds a group's tail back and lets its SIMD ops out a chunk at a time just before each
``LoadWeights`` of the next group, where the accumulators (the RTL: its compute lane) would
otherwise wait. Tuned for the rtl TCU, the move and the save go out when the next group's own
tail starts; tuned for Tensil's (``CompileContext.tune``), they go out in the chunks too, after
the SIMD ops: its decoder holds each of them until its last vector has passed local memory
wherever it stands, and before a weight load that time overlaps the array's drain.

Only instructions that commute are reordered: an instruction of the next tile moves ahead of the
held-back tail only if it neither reads what the tail writes nor writes what the tail reads or
writes (address ranges per memory, strides taken as their whole span), and it is not a SIMD op
(the register state) or an instruction this pass does not know; anything else first lets the
whole tail out, in order. The tail's own instructions keep their order, so the program computes
exactly what the unscheduled one does. Layers are scheduled one at a time (a tail never crosses
into the next layer).
"""

from __future__ import annotations

import dataclasses

from systolix.ir.lir import TAG_SHIFT, LirProgram, LoadWeights, MatMul, Memory, Move, Simd

_ZEROES, _LOCAL, _ACC = int(Memory.ZEROES), int(Memory.LOCAL), int(Memory.ACCUMULATORS)
_DRAM = (int(Memory.DRAM0), int(Memory.DRAM1), int(Memory.VARS), int(Memory.CONSTS))

CHUNK_CLOCKS = 2
"""Accumulator clocks of tail let out before each weight load, in units of the array size N:
about the drain of the array before the load (``2N - 1`` clocks), which both timing models leave
to the accumulators."""


def _span(addr: int, count: int, stride: int) -> tuple[int, int]:
    return addr, addr + (count - 1) * stride + 1


def footprint(ins) -> list[tuple[int, int, int, bool]] | None:
    """``(memory tag, first, end, writes)`` of every range ``ins`` touches (a strided range by its
    span; the tag is part of the addresses), or None for an instruction not known here."""
    kind = type(ins)
    if kind is MatMul:
        out = [] if ins.local >> TAG_SHIFT == _ZEROES else [(_LOCAL, *_span(ins.local, ins.count, ins.local_stride), False)]
        lo, hi = _span(ins.acc, ins.count, ins.acc_stride)
        out.append((_ACC, lo, hi, True))
        return out
    if kind is LoadWeights:
        if ins.local >> TAG_SHIFT == _ZEROES:
            return []
        return [(_LOCAL, *_span(ins.local, ins.count, ins.stride), False)]
    if kind is Move:
        src = _span(ins.source, ins.count, ins.source_stride)
        dst = _span(ins.target, ins.count, ins.target_stride)
        out = [(ins.source >> TAG_SHIFT, *src, False), (ins.target >> TAG_SHIFT, *dst, True)]
        return out  # (an accumulating move reads its target too: a write conflicts with everything)
    if kind is Simd:
        out = []
        if ins.read is not None:
            out.append((_ACC, ins.read, ins.read + 1, False))
        if ins.write is not None:
            out.append((_ACC, ins.write, ins.write + 1, True))
        return out
    return None


def _held(ins) -> bool:
    """A tail instruction: a SIMD op, a move to or from the accumulators, a save to DRAM."""
    kind = type(ins)
    if kind is Simd:
        return True
    if kind is Move:
        s, t = ins.source >> TAG_SHIFT, ins.target >> TAG_SHIFT
        return s == _ACC or t == _ACC or (s == _LOCAL and t in _DRAM)
    return False


def _cost(ins) -> int:
    """Accumulator clocks of a tail instruction (a save to DRAM: none, it runs on a DRAM port)."""
    if type(ins) is Simd:
        return 2 if ins.read is not None and ins.write is not None else 1
    if (ins.source >> TAG_SHIFT) == _ACC or (ins.target >> TAG_SHIFT) == _ACC:
        return ins.count
    return 0


class _Tail:
    """The held-back tail: its instructions in order and (worked out once, when the next
    instructions are checked against it) the ranges they read and write."""

    def __init__(self):
        self.items: list = []
        self.at = 0
        self.ranges: tuple | None = None  # reads, writes and their hulls
        # What the ranges are made of, gathered as instructions join: a SIMD op's vectors, and
        # the other instructions (moves).
        self.simd_reads: set[int] = set()
        self.simd_writes: set[int] = set()
        self.others: list = []

    def add(self, ins) -> None:
        self.items.append(ins)
        self.ranges = None
        if type(ins) is Simd:
            if ins.read is not None:
                self.simd_reads.add(ins.read)
            if ins.write is not None:
                self.simd_writes.add(ins.write)
        else:
            self.others.append(ins)

    def _ranges(self) -> tuple[list, list]:
        """``(reads, writes)``: ``(memory tag, first, end)`` ranges, a SIMD op's vectors merged
        into runs (a tail alternates between its vectors and a constant's)."""
        reads, writes = [], []
        for ins in self.others:
            for mem, lo, hi, w in footprint(ins):
                (writes if w else reads).append((mem, lo, hi))
        for addrs, out in ((self.simd_reads, reads), (self.simd_writes, writes)):
            if addrs:
                ordered = sorted(addrs)
                first = last = ordered[0]
                for a in ordered[1:]:
                    if a != last + 1:
                        out.append((_ACC, first, last + 1))
                        first = a
                    last = a
                out.append((_ACC, first, last + 1))
        return reads, writes

    def conflicts(self, fp) -> bool:
        if self.ranges is None:
            reads, writes = self._ranges()
            self.ranges = (reads, writes, _hulls(reads), _hulls(writes))
        reads, writes, read_hulls, write_hulls = self.ranges
        for mem, lo, hi, w in fp:
            # Most instructions of the next tile miss the tail's hull in their memory: checked
            # first, the ranges only when they may overlap.
            hull = write_hulls.get(mem)
            if hull is not None and lo < hull[1] and hull[0] < hi:
                for m, a, b in writes:
                    if m == mem and lo < b and a < hi:
                        return True
            hull = read_hulls.get(mem) if w else None
            if hull is not None and lo < hull[1] and hull[0] < hi:
                for m, a, b in reads:
                    if m == mem and lo < b and a < hi:
                        return True
        return False

    def __bool__(self) -> bool:
        return self.at < len(self.items)

    def release(self, out: list, budget: float, moves: bool = False) -> None:
        """Let out the next SIMD ops worth ``budget`` accumulator clocks. Unless ``moves``, the
        accumulators -> local move and the saves behind it wait for ``flush``, the next tail: let
        out early on our RTL, the move would hold its staging area's lock half while the next
        weight chunks stream into that half (its decoder then stops until the compute lane has
        caught up), and a save right behind it would wait for it."""
        items = self.items
        spent = 0
        while self.at < len(items) and spent < budget:
            ins = items[self.at]
            if not moves and type(ins) is Move and (ins.source >> TAG_SHIFT) == _ACC:
                break
            spent += _cost(ins)
            out.append(ins)
            self.at += 1

    def flush(self, out: list) -> None:
        out.extend(self.items[self.at:])
        self.at = len(self.items)


def _hulls(ranges: list) -> dict[int, tuple[int, int]]:
    """Per memory tag, ``(first, end)`` covering every range in ``ranges`` of that memory."""
    hulls: dict[int, tuple[int, int]] = {}
    for m, a, b in ranges:
        lo, hi = hulls.get(m, (a, b))
        hulls[m] = (min(lo, a), max(hi, b))
    return hulls


def schedule_instructions(instructions: list, n: int, moves: bool = False) -> list:
    """The instructions of one layer with each tail interleaved into the next tile's stream
    (``n``: the array size; ``moves``: the tail's moves and saves too, ``_Tail.release``)."""
    out: list = []
    tail = _Tail()
    in_tail = False  # the last instructions seen were the current tail's
    budget = CHUNK_CLOCKS * n
    for ins in instructions:
        if _held(ins):
            if not in_tail:
                tail.flush(out)  # a new tail: the last one must be out before it starts
                tail = _Tail()
                in_tail = True
            tail.add(ins)
            continue
        kind = type(ins)
        if kind is LoadWeights or kind is MatMul:
            in_tail = False
        if not tail:
            out.append(ins)
            continue
        fp = footprint(ins)
        if fp is None or tail.conflicts(fp):
            tail.flush(out)
        elif kind is LoadWeights:
            tail.release(out, budget, moves)
        out.append(ins)
    tail.flush(out)
    return out


def schedule(lir: LirProgram, ctx) -> LirProgram:
    """The pass: ``schedule_instructions`` layer by layer, keeping the layer map's ranges right
    (``ctx.schedule`` False: the program as it is)."""
    if not getattr(ctx, "schedule", True):
        return lir
    out: list = []
    records = []
    n = ctx.arch.array_size
    moves = getattr(ctx, "tune", "tensil") == "tensil"
    for rec in lir.layers:
        done = schedule_instructions(lir.instructions[rec.first:rec.end], n, moves)
        records.append(dataclasses.replace(rec, first=len(out), end=len(out) + len(done)))
        out.extend(done)
    return dataclasses.replace(lir, instructions=out, layers=records)
