"""Which memory ranges a program touches, worked out before it runs.

A Tensil program's addresses do not depend on the data, so every access can be checked at
once with NumPy: the emulator sizes its memories to what the program uses, runs up to the first
bad instruction and then stops with an error that names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolix.arch import Architecture
from systolix.isa import DecodedProgram, Opcode

MEMORIES = ("local", "acc", "dram0", "dram1")
DEPTH_FIELDS = {"local": "local_depth", "acc": "accumulator_depth", "dram0": "dram0_depth", "dram1": "dram1_depth"}
_MEMORY_ID = {name: k for k, name in enumerate(MEMORIES)}
_NONE = -1


@dataclass(frozen=True)
class Violation:
    """The first access outside a memory (or to a SIMD register that does not exist)."""

    index: int
    message: str


@dataclass(frozen=True)
class AccessSummary:
    """Vectors each memory needs (highest address + 1), the DRAM spans the program addresses
    and the first bad instruction, if any."""

    needed: dict[str, int]
    violation: Violation | None
    spans: dict[str, np.ndarray] = field(default_factory=dict)
    """``{"dram0": [[start, end), ...], "dram1": ...}``: the address ranges the instructions
    before the first bad one touch, merged (``merge_spans``), as int64 arrays ``[k, 2]``."""
    tandem: object = None
    """The Tandem unit's ``TandemSummary`` (``systolix.emulator.tandem``) when the program has
    Tandem instructions."""


#: Spans at most this many vectors apart are merged into one (fewer, larger pieces of DRAM).
SPAN_GAP = 64


def merge_spans(spans: np.ndarray, gap: int = SPAN_GAP) -> np.ndarray:
    """``[k, 2]`` half-open ranges, sorted and merged where they overlap or lie within ``gap``."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    spans = spans[spans[:, 1] > spans[:, 0]]
    if not len(spans):
        return np.zeros((0, 2), dtype=np.int64)
    order = np.argsort(spans[:, 0], kind="stable")
    starts, ends = spans[order, 0], spans[order, 1]
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > reach[:-1] + gap
    firsts = np.flatnonzero(new)
    return np.stack([starts[firsts], np.maximum.reduceat(ends, firsts)], axis=1)


def _describe(program: DecodedProgram, i: int) -> str:
    instr = program.instruction(i)
    try:
        from systolix.isa.assembly import format_instruction

        return " ".join(format_instruction(instr).split())
    except ImportError:  # the assembly printer is optional for the emulator
        return repr(instr)


def _slots(program: DecodedProgram) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]]:
    """Each instruction's (up to two) accesses: memory id, first address, stride, count, verb."""
    n = len(program)
    op = program.opcode
    f = program.flags.astype(np.int64)
    count = program.size + 1
    s0 = np.int64(1) << program.stride0
    s1 = np.int64(1) << program.stride1
    ones = np.ones(n, dtype=np.int64)

    is_mm = op == Opcode.MATMUL
    is_dm = op == Opcode.DATAMOVE
    is_lw = op == Opcode.LOADWEIGHTS
    is_simd = op == Opcode.SIMD

    # Slot A: the local-memory side (MatMul and LoadWeights without zeroes, every DataMove),
    # or the SIMD read.
    mem_a = np.full(n, _NONE, dtype=np.int64)
    mem_a[(is_mm & ((f & 2) == 0)) | is_dm | (is_lw & ((f & 1) == 0))] = _MEMORY_ID["local"]
    simd_read = is_simd & ((f & 1) != 0)
    mem_a[simd_read] = _MEMORY_ID["acc"]
    first_a = np.where(is_simd, program.op1.astype(np.int64), program.addr0)
    stride_a = np.where(is_simd, ones, s0)
    count_a = np.where(is_simd, ones, count)

    # Slot B: the far side (MatMul's accumulators, DataMove's DRAM or accumulators) or the
    # SIMD write.
    mem_b = np.full(n, _NONE, dtype=np.int64)
    mem_b[is_mm] = _MEMORY_ID["acc"]
    far = np.full(16, _NONE, dtype=np.int64)
    far[[0, 1]] = _MEMORY_ID["dram0"]
    far[[2, 3]] = _MEMORY_ID["dram1"]
    far[[12, 13, 15]] = _MEMORY_ID["acc"]
    mem_b[is_dm] = far[f[is_dm]]
    mem_b[is_simd & ((f & 2) != 0)] = _MEMORY_ID["acc"]
    first_b = np.where(is_simd, program.op0.astype(np.int64), program.addr1)
    stride_b = np.where(is_simd, ones, s1)
    count_b = np.where(is_simd, ones, count)
    return [(mem_a, first_a, stride_a, count_a, "reads"), (mem_b, first_b, stride_b, count_b, "writes")]


def analyse(program: DecodedProgram, arch: Architecture, source: str = "program") -> AccessSummary:
    """Check every address of ``program`` against ``arch``'s depths (vectorised)."""
    n = len(program)
    depth = np.array([getattr(arch, DEPTH_FIELDS[m]) for m in MEMORIES], dtype=np.int64)
    bad_at = n
    bad_msg = ""
    tandem = None
    if n and ((program.opcode >= Opcode.TCONFIG) & (program.opcode <= Opcode.TSYNC)).any():
        from systolix.emulator.tandem import analyse_tandem

        tandem = analyse_tandem(program, arch, source, describe=lambda i: _describe(program, i))
        if tandem.violation is not None:
            bad_at = tandem.violation[0]
    needed = np.zeros(len(MEMORIES), dtype=np.int64)
    slots = _slots(program)
    last_by_slot = []
    for mem, first, stride, count, _ in slots:
        last = first + (count - 1) * stride
        last_by_slot.append(last)
        used = mem != _NONE
        out = used & (last >= depth[np.maximum(mem, 0)])
        hits = np.flatnonzero(out)
        if hits.size and hits[0] < bad_at:
            bad_at = int(hits[0])

    # SIMD register operands must name an existing register.
    if n:
        r = program.layout.simd_operand_bits
        mask = (1 << r) - 1
        sub = program.op2.astype(np.int64)
        regs = np.stack([(sub >> (2 * r)) & mask, (sub >> r) & mask, sub & mask])
        bad_reg = (program.opcode == Opcode.SIMD) & (regs.max(axis=0) > arch.simd_registers_depth)
        hits = np.flatnonzero(bad_reg)
        if hits.size and hits[0] < bad_at:
            bad_at = int(hits[0])

    # Memory needs over the instructions that will run (those before the first bad one).
    for (mem, _, _, _, _), last in zip(slots, last_by_slot):
        for k in range(len(MEMORIES)):
            sel = mem[:bad_at] == k
            if sel.any():
                needed[k] = max(needed[k], int(last[:bad_at][sel].max()) + 1)
    if tandem is not None:
        for name, count in tandem.needed.items():
            needed[_MEMORY_ID[name]] = max(needed[_MEMORY_ID[name]], count)

    spans = {}
    for name in ("dram0", "dram1"):
        mem, first, _, _, _ = slots[1]
        sel = mem[:bad_at] == _MEMORY_ID[name]
        spans[name] = merge_spans(np.stack([first[:bad_at][sel], last_by_slot[1][:bad_at][sel] + 1], axis=1))

    violation = None
    if tandem is not None and tandem.violation is not None and tandem.violation[0] == bad_at:
        violation = Violation(bad_at, tandem.violation[1])
    elif bad_at < n:
        i = bad_at
        text = _describe(program, i)
        for (mem, first, stride, count, verb), last in zip(slots, last_by_slot):
            m = int(mem[i])
            if m != _NONE and last[i] >= depth[m]:
                name = MEMORIES[m]
                d = int(depth[m])
                a, s = int(first[i]), int(stride[i])
                # The first address of the access that falls outside the memory.
                address = a if a >= d else a + -(-(d - a) // s) * s
                if program.opcode[i] == Opcode.DATAMOVE:
                    # Data flows into local memory for kinds 0, 2 and 12; out of it otherwise.
                    into_local = int(program.flags[i]) in (0, 2, 12)
                    verb = "writes" if (verb == "reads") == into_local else "reads"
                bad_msg = (
                    f"{source}: instruction #{i} ({text}) {verb} {name} address {address}, "
                    f"past {DEPTH_FIELDS[name]} {d} (vectors {a}..{int(last[i])}, stride {s})"
                )
                break
        else:
            bad_msg = (
                f"{source}: instruction #{i} ({text}) uses a SIMD register the architecture does not have "
                f"(simd_registers_depth {arch.simd_registers_depth})"
            )
        violation = Violation(i, bad_msg)
    return AccessSummary({m: int(needed[k]) for k, m in enumerate(MEMORIES)}, violation, spans, tandem)
