"""The Tensor Compute Unit as a Python object: memories, weights, registers, a run method.

Memories hold raw values (int64 for fixed point, float32 for FLOAT32) with a leading batch
axis: ``emu.acc[b, vector, lane]``. Local memory and the accumulators start empty and grow
(zero-filled) to the highest address the program uses; DRAM0 and DRAM1 hold only the spans of
vectors that the program and the driver address (``SpanMemory``), so a 2^32-vector DRAM costs
what its model uses. Before anything is allocated the total is checked against
``systolix.limits.memory_limit()``: past it the run is a ``MemoryLimitError`` stating the limit
and what the run would need. The architecture's depths stay the bounds every access is checked
against.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from systolix.arch import Architecture
from systolix.emulator import kernels
from systolix.emulator.bounds import DEPTH_FIELDS, MEMORIES, analyse
from systolix.errors import SystolixError
from systolix.isa import (
    CONFIG_REGISTER_NAMES,
    OPCODE_NAMES,
    ConfigRegister,
    DecodedProgram,
    InstructionLayout,
    Opcode,
    decode_program,
)
from systolix.numerics import DataType


class EmulatorError(SystolixError):
    """A program cannot run: an address past a memory, an unimplemented instruction."""


def lut_message(source: str, index: int) -> str:
    """Why a program with a LoadLUT at ``index`` cannot run."""
    return f"{source}: instruction #{index} (LoadLUT) is not implemented by any Tensil hardware; the program cannot run"


class SpanMemory:
    """A DRAM that stores only the address spans in use, each contiguous in ``data``.

    ``spans`` are sorted, disjoint half-open ranges ``[start, end)`` of vector addresses; span
    ``k`` lives at ``data[:, offsets[k] : offsets[k] + end - start]``. Addresses outside every
    span read as zero. Indexing by address (``mem[b, address]``, a slice or a list of addresses)
    returns a copy, as a dense memory would read.
    """

    def __init__(self, batch: int, n: int, dtype, depth: int):
        self.depth = int(depth)
        self.spans = np.zeros((0, 2), dtype=np.int64)
        self.offsets = np.zeros(0, dtype=np.int64)
        self.data = np.zeros((batch, 0, n), dtype=dtype)

    @property
    def vectors(self) -> int:
        """Vectors stored (the sum of the spans' lengths)."""
        return int(self.data.shape[1])

    @property
    def shape(self) -> tuple[int, int, int]:
        """The shape of the dense memory up to the highest stored address."""
        end = int(self.spans[-1, 1]) if len(self.spans) else 0
        return (self.data.shape[0], end, self.data.shape[2])

    @property
    def dtype(self):
        return self.data.dtype

    def merged(self, spans: np.ndarray) -> np.ndarray:
        """The spans this memory would hold with ``spans`` ([k, 2]) added."""
        from systolix.emulator.bounds import merge_spans

        return merge_spans(np.concatenate([self.spans, np.asarray(spans, dtype=np.int64).reshape(-1, 2)]))

    def remap(self, spans: np.ndarray) -> None:
        """Hold ``spans`` (a superset of the current ones, as ``merged`` returns), keeping the data."""
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        if np.array_equal(spans, self.spans):
            return
        lengths = spans[:, 1] - spans[:, 0]
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        data = np.zeros((self.data.shape[0], int(lengths.sum()), self.data.shape[2]), dtype=self.data.dtype)
        for (start, end), offset in zip(self.spans, self.offsets):
            target = self._translate(np.array([start]), spans, offsets)[0]
            data[:, target : target + end - start] = self.data[:, offset : offset + end - start]
        self.spans, self.offsets, self.data = spans, offsets, data

    @staticmethod
    def _translate(addresses: np.ndarray, spans: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        addresses = np.asarray(addresses, dtype=np.int64)
        if not len(spans):
            return np.full(addresses.shape, -1, dtype=np.int64)
        k = np.searchsorted(spans[:, 0], addresses, side="right") - 1
        kk = np.maximum(k, 0)
        inside = (k >= 0) & (addresses < spans[kk, 1]) & (addresses >= spans[kk, 0])
        return np.where(inside, offsets[kk] + addresses - spans[kk, 0], -1)

    def translate(self, addresses) -> np.ndarray:
        """Where each address is stored in ``data`` (-1 where no span holds it)."""
        return self._translate(addresses, self.spans, self.offsets)

    def gather(self, addresses: np.ndarray) -> np.ndarray:
        """``[batch, len(addresses), N]`` raw vectors; unstored addresses read as zero."""
        index = self.translate(addresses)
        out = np.zeros((self.data.shape[0], len(index), self.data.shape[2]), dtype=self.data.dtype)
        stored = index >= 0
        out[:, stored] = self.data[:, index[stored]]
        return out

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        batch = key[0] if key else slice(None)
        where = key[1] if len(key) > 1 else slice(None)
        rest = key[2:]
        single = isinstance(where, (int, np.integer))
        if isinstance(where, slice):
            addresses = np.arange(*where.indices(self.shape[1]))
        else:
            addresses = np.atleast_1d(np.asarray(where, dtype=np.int64))
        out = self.gather(addresses)
        if single:
            out = out[:, 0]
            return out[(batch,) + rest]
        return out[(batch, slice(None)) + rest]


# Reset values of the configuration registers (Tensil's TCU).
CONFIG_DEFAULTS = {ConfigRegister.TIMEOUT: 0x64, ConfigRegister.TRACEPOINT: 0xFFFFFFFF}
# Fixed-point types up to this width take the int32 MatMul (exact up to 16 bits).
NARROW_MATMUL_MAX_WIDTH = 16
# Instructions run between progress reports.
PROGRESS_CHUNK = 4096


@dataclass
class RunResult:
    """What one ``Emulator.run`` did."""

    instructions: int
    """Instructions executed."""
    counts: dict[str, int]
    """Instructions executed by opcode name."""
    saturations: dict[str, int]
    """Saturation events by kind (``array``, ``accumulate``, ``alu``, ``simd_accumulate``), whole batch."""
    saturations_per_item: np.ndarray
    """``[batch, kinds]`` saturation events, columns in the order of ``kernels.SAT_KINDS``."""
    registers: dict[str, int]
    """Configuration registers after the run, by name."""
    seconds: float
    tracepoint_hits: list[int] = field(default_factory=list)
    """Instruction indices at which the tracepoint fired (the state before that instruction)."""
    stretch_saturations: np.ndarray | None = None
    """With ``run(stretch_ends=...)``: saturation events in each stretch of instructions, whole
    batch, every kind (stretch ``k`` ends before ``stretch_ends[k]``)."""

    @property
    def saturation_total(self) -> int:
        return int(sum(self.saturations.values()))


class Emulator:
    """A bit-exact Tensor Compute Unit for ``arch``, running ``batch`` inputs side by side.

    ``dram0_depth``/``dram1_depth`` preallocate that many vectors of DRAM (spans are added on
    demand anyway, up to the architecture's depth). ``memory_limit``: most bytes the memories
    may take (default ``systolix.limits.memory_limit()``). ``threads`` splits the batch across that many
    threads (default 1: on this project's 2-vCPU machine a second thread gained at most ~1.3x
    when idle and lost when other work was running; ``benchmarks/bench_emulator.py`` shows both).
    """

    def __init__(
        self,
        arch: Architecture,
        batch: int = 1,
        dram0_depth: int | None = None,
        dram1_depth: int | None = None,
        threads: int | None = None,
        memory_limit: int | None = None,
    ):
        if batch < 1:
            raise EmulatorError(f"batch must be at least 1, got {batch}")
        from systolix.limits import memory_limit as default_limit

        self.arch = arch
        self.batch = int(batch)
        self.threads = max(1, int(threads or 1))
        self.memory_limit = int(memory_limit) if memory_limit is not None else default_limit()
        """Most bytes the memories may take together (``systolix.limits``)."""
        self._limit_given = memory_limit is not None
        self.data_type: DataType = arch.data_type
        self.layout = InstructionLayout.of(arch)
        n = arch.array_size
        self._storage = self.data_type.storage_dtype
        self._check_footprint({"local": 0, "acc": 0, "dram0": 0, "dram1": 0})
        self.local = np.zeros((self.batch, 0, n), dtype=self._storage)
        self.acc = np.zeros((self.batch, 0, n), dtype=self._storage)
        self.dram0 = SpanMemory(self.batch, n, self._storage, arch.dram0_depth)
        self.dram1 = SpanMemory(self.batch, n, self._storage, arch.dram1_depth)
        self._analysed: tuple[DecodedProgram, object] | None = None
        self.weights = np.zeros((self.batch, n + 1, n), dtype=self._storage)
        """The array's weights, ``[batch, N + 1, N]``; row 0 is the bias row."""
        self.registers = np.zeros((self.batch, arch.simd_registers_depth, n), dtype=self._storage)
        """SIMD registers, ``[batch, register - 1, lane]``."""
        self.config = np.zeros(16, dtype=np.int64)
        for reg, value in CONFIG_DEFAULTS.items():
            self.config[int(reg)] = value
        self.saturation = np.zeros((self.batch, len(kernels.SAT_KINDS)), dtype=np.int64)
        """Saturation events since construction, ``[batch, kind]``."""
        self.tandem = None
        """The Tandem unit's state (``systolix.emulator.tandem.TandemUnit``) on an architecture with
        the unit. Its instructions run in ``tandem_fast``'s numba kernel on this state (the reference
        TCU runs them in the unit's NumPy definition)."""
        if arch.tandem is not None:
            from systolix.emulator.tandem import TandemUnit

            self.tandem = TandemUnit(arch, self.batch)
        if dram0_depth or dram1_depth:
            self.reserve(spans={m: np.array([[0, int(d)]]) for m, d in (("dram0", dram0_depth), ("dram1", dram1_depth)) if d})

    # --- memories ----------------------------------------------------------------
    def depth(self, memory: str) -> int:
        """The architectural depth of ``memory`` (``local``, ``acc``, ``dram0``, ``dram1``)."""
        return int(getattr(self.arch, DEPTH_FIELDS[self._check_name(memory)]))

    @staticmethod
    def _check_name(memory: str) -> str:
        if memory not in MEMORIES:
            raise EmulatorError(f"unknown memory {memory!r} (expected one of {', '.join(MEMORIES)})")
        return memory

    def _vectors(self, memory: str) -> int:
        m = getattr(self, memory)
        return m.vectors if isinstance(m, SpanMemory) else int(m.shape[1])

    def _check_footprint(self, vectors: dict[str, int], source: str = "emulator") -> None:
        """Refuse, before allocating, memories of ``vectors`` per batch item past the memory limit."""
        n = self.arch.array_size
        item = np.dtype(self._storage).itemsize
        vectors = {"weights": n + 1, "registers": self.arch.simd_registers_depth, **vectors}
        if self.arch.tandem is not None:
            vectors["tandem interim"] = self.arch.tandem.interim_depth
        total = self.batch * sum(vectors.values()) * n * item
        if total <= self.memory_limit:
            return
        from systolix.limits import MemoryLimitError, format_bytes, limit_source

        parts = " + ".join(f"{name} {count:,}" for name, count in vectors.items() if count)
        where = "given to the emulator" if self._limit_given else limit_source()
        hint = "; run fewer inputs at a time" if self.batch > 1 else ""
        raise MemoryLimitError(
            f"{source}: the emulator would need {format_bytes(total)} for this run ({self.batch:,} input"
            f"{'s' if self.batch > 1 else ''} x ({parts} vectors) x {n} values x {item} bytes), more than the "
            f"memory limit of {format_bytes(self.memory_limit)} ({where}){hint}")

    def reserve(self, needed: dict[str, int] | None = None, spans: dict[str, np.ndarray] | None = None,
                source: str = "emulator") -> None:
        """Make room, zero-filled, for ``needed`` vectors of local memory and accumulators and for
        ``spans`` (``[k, 2]`` half-open address ranges) of DRAM0 and DRAM1, after checking the
        total against the memory limit (``MemoryLimitError``) and the depths (``EmulatorError``)."""
        needed = dict(needed or {})
        spans = dict(spans or {})
        plan: dict[str, object] = {}
        sizes: dict[str, int] = {}
        for memory in MEMORIES:
            limit = self.depth(memory)
            current = getattr(self, memory)
            if memory in ("dram0", "dram1"):
                add = np.asarray(spans.get(memory, np.zeros((0, 2))), dtype=np.int64).reshape(-1, 2)
                if len(add) and (add.min() < 0 or add[:, 1].max() > limit):
                    raise EmulatorError(f"{memory}: vectors up to {int(add[:, 1].max()) - 1} do not fit its depth of {limit}")
                merged = current.merged(add) if len(add) else current.spans
                plan[memory] = merged
                sizes[memory] = int((merged[:, 1] - merged[:, 0]).sum())
            else:
                want = int(needed.get(memory, 0))
                if want > limit:
                    raise EmulatorError(f"{memory}: {want} vectors do not fit its depth of {limit}")
                have = int(current.shape[1])
                plan[memory] = max(want, have)
                sizes[memory] = max(want, have)
        self._check_footprint(sizes, source)
        n = self.arch.array_size
        for memory in MEMORIES:
            current = getattr(self, memory)
            if isinstance(current, SpanMemory):
                current.remap(plan[memory])
            elif plan[memory] > current.shape[1]:
                grown = np.zeros((self.batch, plan[memory], n), dtype=self._storage)
                grown[:, : current.shape[1]] = current
                setattr(self, memory, grown)

    def reserve_program(self, program, source: str = "program", spans: dict[str, np.ndarray] | None = None):
        """Check ``program``'s addresses (``bounds.analyse``) and ``reserve`` what it and ``spans``
        (the driver's own DRAM spans) need; returns the analysis."""
        prog = self._decode(program, source)
        if self._analysed is not None and self._analysed[0] is prog:
            summary = self._analysed[1]
        else:
            summary = analyse(prog, self.arch, source)
            self._analysed = (prog, summary)
        extra = dict(spans or {})
        dram = {m: np.concatenate([summary.spans[m], np.asarray(extra.get(m, np.zeros((0, 2))), np.int64).reshape(-1, 2)])
                for m in ("dram0", "dram1")}
        needed = {m: max(summary.needed[m], int(np.asarray(extra.get(m, np.zeros((0, 2)))).reshape(-1, 2)[:, 1].max(initial=0)))
                  for m in ("local", "acc")}
        self.reserve(needed, dram, source)
        return summary

    def write(self, memory: str, address: int, vectors: np.ndarray) -> None:
        """Store raw vectors at ``address``: ``[n, N]`` (every batch item) or ``[batch, n, N]``."""
        self._check_name(memory)
        v = np.asarray(vectors)
        n = self.arch.array_size
        if v.ndim == 2:
            v = np.broadcast_to(v, (self.batch,) + v.shape)
        if v.ndim != 3 or v.shape[0] != self.batch or v.shape[2] != n:
            raise EmulatorError(
                f"{memory}: vectors to write must be [n, {n}] or [{self.batch}, n, {n}], got {list(np.shape(vectors))}"
            )
        address = int(address)
        end = address + v.shape[1]
        if address < 0 or end > self.depth(memory):
            raise EmulatorError(
                f"{memory}: writing vectors {address}..{end - 1} goes past its depth of {self.depth(memory)}"
            )
        target = getattr(self, memory)
        if isinstance(target, SpanMemory):
            self.reserve(spans={memory: np.array([[address, end]])})
            index = target.translate(np.array([address]))[0]
            target.data[:, index : index + v.shape[1]] = v
        else:
            self.reserve(needed={memory: end})
            getattr(self, memory)[:, address:end] = v

    def read(self, memory: str, address: int, count: int) -> np.ndarray:
        """Raw vectors ``[batch, count, N]`` from ``address`` (never-written vectors read as zero)."""
        self._check_name(memory)
        address, count = int(address), int(count)
        end = address + count
        if address < 0 or count < 0 or end > self.depth(memory):
            raise EmulatorError(
                f"{memory}: reading vectors {address}..{end - 1} goes past its depth of {self.depth(memory)}"
            )
        source = getattr(self, memory)
        if isinstance(source, SpanMemory):
            self._check_footprint({"read": count}, f"{memory}: reading {count:,} vectors")
            return source.gather(np.arange(address, end, dtype=np.int64))
        out = np.zeros((self.batch, count, self.arch.array_size), dtype=self._storage)
        have = max(0, min(end, source.shape[1]) - address)
        out[:, :have] = source[:, address : address + have]
        return out

    # --- registers ---------------------------------------------------------------
    @property
    def program_counter(self) -> int:
        return int(self.config[int(ConfigRegister.PROGRAM_COUNTER)])

    def register_values(self) -> dict[str, int]:
        """The configuration registers by name (DRAM offsets as configured, in 64 KiB blocks)."""
        return {name: int(self.config[int(reg)]) for reg, name in CONFIG_REGISTER_NAMES.items()}

    # --- running -----------------------------------------------------------------
    def _decode(self, program, source: str) -> DecodedProgram:
        if isinstance(program, DecodedProgram):
            if program.layout != self.layout:
                raise EmulatorError(f"{source}: decoded for another instruction layout than this architecture's")
            return program
        if isinstance(program, (bytes, bytearray, memoryview)):
            return decode_program(bytes(program), self.layout, source)
        raise EmulatorError(f"{source}: expected a DecodedProgram or bytes, got {type(program).__name__}")

    @staticmethod
    def _configure_columns(program: DecodedProgram) -> tuple[np.ndarray, np.ndarray]:
        reg = np.zeros(len(program), dtype=np.int64)
        value = np.zeros(len(program), dtype=np.int64)
        for i in np.flatnonzero(program.opcode == Opcode.CONFIGURE):
            instr = program.instruction(int(i))
            reg[i] = instr.register
            value[i] = instr.value & kernels.PC_MASK  # the registers are at most 32 bits wide
        return reg, value

    def run(
        self,
        program,
        *,
        source: str = "program",
        tracepoint: int | None = None,
        on_trace: Callable[["Emulator", int], None] | None = None,
        trace_file: str | Path | None = None,
        trace_ranges: list[tuple[str, int, int]] | None = None,
        progress: Callable[[int, int], None] | None = None,
        stretch_ends: Sequence[int] | None = None,
    ) -> RunResult:
        """Execute ``program`` (a ``DecodedProgram`` or ``.tprog`` bytes) on the whole batch.

        The program counter starts at 0. ``tracepoint`` sets the tracepoint register first;
        whenever the program counter equals it (before any instruction, or after one), the
        state is handed to ``on_trace(emulator, instruction_index)`` and/or dumped to
        ``trace_file`` (``.npz``; ``trace_ranges`` limits it to ``(memory, first, count)``
        ranges). ``progress(done, total)`` is called every few thousand instructions.
        ``stretch_ends`` (increasing instruction indices, the last at most the program's length):
        count saturation events per stretch of instructions (``RunResult.stretch_saturations``;
        a layer map's ``end`` fields say which layer each saturation came from).

        Raises ``EmulatorError`` naming the instruction, its text and the address when an
        instruction reaches outside a memory (the instructions before it have run), and on
        LoadLUT, which no hardware implements; ``MemoryLimitError`` (before anything is
        allocated) when the memories the program addresses, times the batch, exceed
        ``memory_limit``.
        """
        started = time.perf_counter()
        prog = self._decode(program, source)
        summary = self.reserve_program(prog, source)
        stop = summary.violation.index if summary.violation else len(prog)
        # DRAM addresses as stored: each DataMove's DRAM side moved to where its span lives.
        addr1 = prog.addr1
        dram_moves = (prog.opcode == Opcode.DATAMOVE) & (prog.flags <= 3)
        if dram_moves[:stop].any():
            addr1 = prog.addr1.copy()
            for memory, flows in (("dram0", (0, 1)), ("dram1", (2, 3))):
                sel = np.flatnonzero(dram_moves[:stop] & np.isin(prog.flags[:stop], flows))
                if sel.size:
                    stored = getattr(self, memory).translate(prog.addr1[sel].astype(np.int64))
                    if (stored < 0).any():  # pragma: no cover - reserve_program mapped every span
                        raise AssertionError(f"{memory}: an address the analysis found is not stored")
                    addr1[sel] = stored.astype(addr1.dtype)

        if tracepoint is not None:
            self.config[int(ConfigRegister.TRACEPOINT)] = int(tracepoint) & kernels.PC_MASK
        self.config[int(ConfigRegister.PROGRAM_COUNTER)] = 0
        hits: list[int] = []
        tracing = on_trace is not None or trace_file is not None

        def fire(index: int) -> None:
            hits.append(index)
            if trace_file is not None:
                from systolix.emulator.trace import dump_state, numbered_path

                dump_state(self, numbered_path(Path(trace_file), len(hits)), index, trace_ranges)
            if on_trace is not None:
                on_trace(self, index)

        dt = self.data_type
        if dt is DataType.FLOAT32:
            lo, hi, one = np.float32(-np.inf), np.float32(np.inf), np.float32(1.0)
        else:
            lo, hi, one = np.int64(dt.min_int), np.int64(dt.max_int), np.int64(dt.one)
        shift = np.int64(dt.binary_point)
        reg_bits = np.int64(self.layout.simd_operand_bits)
        narrow = dt.is_fixed and dt.width <= NARROW_MATMUL_MAX_WIDTH
        cfg_reg, cfg_value = self._configure_columns(prog)
        op0, op1, op2 = (prog.op0.astype(np.int64), prog.op1.astype(np.int64), prog.op2.astype(np.int64))
        sat_before = self.saturation.copy()

        if tracing and self.program_counter == self.config[int(ConfigRegister.TRACEPOINT)]:
            fire(0)
        # Batch items never interact: split the batch across threads (the kernel releases the
        # GIL), each with its own copy of the configuration registers, which only the program
        # (the same for all) changes.
        parts = [p for p in np.array_split(np.arange(self.batch), min(self.threads, self.batch)) if p.size]
        slices = [slice(int(p[0]), int(p[-1]) + 1) for p in parts]
        configs = [self.config.copy() for _ in slices]
        counts = [np.zeros(16, dtype=np.int64) for _ in slices]

        def execute(k: int, first: int, end: int):
            s = slices[k]
            return kernels.execute(
                prog.opcode, prog.flags, prog.addr0, prog.stride0, addr1, prog.stride1, prog.size,
                op0, op1, op2, cfg_reg, cfg_value,
                first, end,
                self.local[s], self.acc[s], self.dram0.data[s], self.dram1.data[s], self.weights[s], self.registers[s],
                configs[k], self.saturation[s], counts[k],
                lo, hi, shift, one, reg_bits, tracing, narrow,
            )

        # Tandem instructions run between stretches of the kernel, in their own numba kernel
        # (``tandem_fast``): a whole stretch of them per call (one loop with its body when tracing).
        is_tandem = (prog.opcode[:stop] >= Opcode.TCONFIG) & (prog.opcode[:stop] <= Opcode.TSYNC)
        tandem_rows = np.flatnonzero(is_tandem) if self.tandem is not None else np.zeros(0, np.int64)
        pc = int(ConfigRegister.PROGRAM_COUNTER)

        ends = np.asarray(stretch_ends if stretch_ends is not None else [], np.int64)
        if ends.size and (np.any(np.diff(ends) <= 0) or ends[0] <= 0 or ends[-1] > len(prog)):
            raise ValueError(f"stretch_ends must increase within 1..{len(prog)}")
        per_stretch = np.zeros(ends.size, np.int64)
        counted = int(self.saturation.sum())

        def count_stretch(start: int) -> None:
            """The events since the last call, to the stretch holding instruction ``start``."""
            nonlocal counted
            if ends.size:
                now = int(self.saturation.sum())
                k = int(np.searchsorted(ends, start, side="right"))
                if k < ends.size:
                    per_stretch[k] += now - counted
                counted = now

        pool = ThreadPoolExecutor(len(slices)) if len(slices) > 1 else None
        try:
            i = 0
            while i < stop:
                k = int(np.searchsorted(tandem_rows, i))
                next_tandem = int(tandem_rows[k]) if k < tandem_rows.size else stop
                if next_tandem == i:
                    sat = self.tandem.saturations.copy()
                    i0 = i
                    j = self.tandem.run_stretch(prog, i, stop, {"acc": self.acc, "local": self.local}, whole=not tracing)
                    self.saturation[:, kernels.SAT_KINDS.index("alu")] += self.tandem.saturations - sat
                    np.add.at(counts[0], prog.opcode[i:j].astype(np.int64), 1)
                    # The program counter counts instructions accepted: a loop's body once. A
                    # tracepoint the loop's body passes fires after the loop.
                    before = int(self.config[pc])
                    self.config[pc] = (before + (j - i)) & kernels.PC_MASK
                    for c in configs:
                        c[:] = self.config
                    i = j
                    count_stretch(i0)
                    if tracing and before < self.config[int(ConfigRegister.TRACEPOINT)] <= before + (j - i0):
                        fire(i)
                    if progress is not None:
                        progress(i, len(prog))
                    continue
                chunk_end = min(stop, i + PROGRESS_CHUNK) if progress is not None else stop
                chunk_end = min(chunk_end, next_tandem)
                if ends.size:  # a chunk never crosses a stretch's end
                    k = int(np.searchsorted(ends, i, side="right"))
                    if k < ends.size:
                        chunk_end = min(chunk_end, int(ends[k]))
                start = i
                if pool is None:
                    outcomes = [execute(0, i, chunk_end)]
                else:
                    outcomes = list(pool.map(lambda k, a=i, b=chunk_end: execute(k, a, b), range(len(slices))))
                if len(set(outcomes)) != 1:  # the program, not the data, decides where a run stops
                    raise AssertionError(f"batch parts stopped at different places: {outcomes}")
                i, status = outcomes[0]
                self.config[:] = configs[0]
                count_stretch(start)
                if status == kernels.STATUS_LOADLUT:
                    raise EmulatorError(lut_message(source, i))
                if status == kernels.STATUS_TRACEPOINT:
                    fire(i)
                if progress is not None:
                    progress(i, len(prog))
        finally:
            if pool is not None:
                pool.shutdown()
            executed = counts[0]
        if summary.violation is not None:
            raise EmulatorError(summary.violation.message)

        sat = self.saturation - sat_before
        return RunResult(
            instructions=int(executed.sum()),
            counts={OPCODE_NAMES[op]: int(executed[int(op)]) for op in Opcode if executed[int(op)]},
            saturations={k: int(sat[:, j].sum()) for j, k in enumerate(kernels.SAT_KINDS)},
            saturations_per_item=sat,
            registers=self.register_values(),
            seconds=time.perf_counter() - started,
            tracepoint_hits=hits,
            stretch_saturations=per_stretch if ends.size else None,
        )
