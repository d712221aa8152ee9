"""The Tensor Compute Unit as a Python object: memories, weights, registers, a run method.

Memories hold raw values (int64 for fixed point, float32 for FLOAT32) with a leading batch
axis: ``emu.dram0[b, vector, lane]``. They start empty and grow (zero-filled) to what the
program and the driver use; the architecture's depths stay the bounds every access is checked
against, so a 2M-vector DRAM never has to be allocated.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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

    @property
    def saturation_total(self) -> int:
        return int(sum(self.saturations.values()))


class Emulator:
    """A bit-exact Tensor Compute Unit for ``arch``, running ``batch`` inputs side by side.

    ``dram0_depth``/``dram1_depth`` preallocate that many vectors of DRAM (they grow on demand
    anyway, up to the architecture's depth). ``threads`` splits the batch across that many
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
    ):
        if batch < 1:
            raise EmulatorError(f"batch must be at least 1, got {batch}")
        self.arch = arch
        self.batch = int(batch)
        self.threads = max(1, int(threads or 1))
        self.data_type: DataType = arch.data_type
        self.layout = InstructionLayout.of(arch)
        n = arch.array_size
        self._storage = self.data_type.storage_dtype
        self.local = np.zeros((self.batch, 0, n), dtype=self._storage)
        self.acc = np.zeros((self.batch, 0, n), dtype=self._storage)
        self.dram0 = np.zeros((self.batch, 0, n), dtype=self._storage)
        self.dram1 = np.zeros((self.batch, 0, n), dtype=self._storage)
        self.weights = np.zeros((self.batch, n + 1, n), dtype=self._storage)
        """The array's weights, ``[batch, N + 1, N]``; row 0 is the bias row."""
        self.registers = np.zeros((self.batch, arch.simd_registers_depth, n), dtype=self._storage)
        """SIMD registers, ``[batch, register - 1, lane]``."""
        self.config = np.zeros(16, dtype=np.int64)
        for reg, value in CONFIG_DEFAULTS.items():
            self.config[int(reg)] = value
        self.saturation = np.zeros((self.batch, len(kernels.SAT_KINDS)), dtype=np.int64)
        """Saturation events since construction, ``[batch, kind]``."""
        if dram0_depth:
            self._ensure("dram0", int(dram0_depth))
        if dram1_depth:
            self._ensure("dram1", int(dram1_depth))

    # --- memories ----------------------------------------------------------------
    def depth(self, memory: str) -> int:
        """The architectural depth of ``memory`` (``local``, ``acc``, ``dram0``, ``dram1``)."""
        return int(getattr(self.arch, DEPTH_FIELDS[self._check_name(memory)]))

    @staticmethod
    def _check_name(memory: str) -> str:
        if memory not in MEMORIES:
            raise EmulatorError(f"unknown memory {memory!r} (expected one of {', '.join(MEMORIES)})")
        return memory

    def _ensure(self, memory: str, vectors: int) -> None:
        """Grow ``memory`` to at least ``vectors`` vectors (zero-filled)."""
        current = getattr(self, memory)
        if vectors <= current.shape[1]:
            return
        limit = self.depth(memory)
        if vectors > limit:
            raise EmulatorError(f"{memory}: {vectors} vectors do not fit its depth of {limit}")
        # At least double an existing memory so that repeated small writes do not copy over and
        # over; a first allocation is exact (DRAM1's constants, the program's own needs).
        new_depth = min(limit, max(vectors, 2 * current.shape[1]))
        grown = np.zeros((self.batch, new_depth, self.arch.array_size), dtype=self._storage)
        grown[:, : current.shape[1]] = current
        setattr(self, memory, grown)

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
        end = int(address) + v.shape[1]
        if address < 0 or end > self.depth(memory):
            raise EmulatorError(
                f"{memory}: writing vectors {address}..{end - 1} goes past its depth of {self.depth(memory)}"
            )
        self._ensure(memory, end)
        getattr(self, memory)[:, address:end] = v

    def read(self, memory: str, address: int, count: int) -> np.ndarray:
        """Raw vectors ``[batch, count, N]`` from ``address`` (never-written vectors read as zero)."""
        self._check_name(memory)
        end = int(address) + int(count)
        if address < 0 or count < 0 or end > self.depth(memory):
            raise EmulatorError(
                f"{memory}: reading vectors {address}..{end - 1} goes past its depth of {self.depth(memory)}"
            )
        self._ensure(memory, end)
        return getattr(self, memory)[:, address:end].copy()

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
    ) -> RunResult:
        """Execute ``program`` (a ``DecodedProgram`` or ``.tprog`` bytes) on the whole batch.

        The program counter starts at 0. ``tracepoint`` sets the tracepoint register first;
        whenever the program counter equals it (before any instruction, or after one), the
        state is handed to ``on_trace(emulator, instruction_index)`` and/or dumped to
        ``trace_file`` (``.npz``; ``trace_ranges`` limits it to ``(memory, first, count)``
        ranges). ``progress(done, total)`` is called every few thousand instructions.

        Raises ``EmulatorError`` naming the instruction, its text and the address when an
        instruction reaches outside a memory (the instructions before it have run), and on
        LoadLUT, which no hardware implements.
        """
        started = time.perf_counter()
        prog = self._decode(program, source)
        summary = analyse(prog, self.arch, source)
        for memory, needed in summary.needed.items():
            self._ensure(memory, needed)
        stop = summary.violation.index if summary.violation else len(prog)

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
                prog.opcode, prog.flags, prog.addr0, prog.stride0, prog.addr1, prog.stride1, prog.size,
                op0, op1, op2, cfg_reg, cfg_value,
                first, end,
                self.local[s], self.acc[s], self.dram0[s], self.dram1[s], self.weights[s], self.registers[s],
                configs[k], self.saturation[s], counts[k],
                lo, hi, shift, one, reg_bits, tracing, narrow,
            )

        pool = ThreadPoolExecutor(len(slices)) if len(slices) > 1 else None
        try:
            i = 0
            while i < stop:
                chunk_end = min(stop, i + PROGRESS_CHUNK) if progress is not None else stop
                if pool is None:
                    outcomes = [execute(0, i, chunk_end)]
                else:
                    outcomes = list(pool.map(lambda k, a=i, b=chunk_end: execute(k, a, b), range(len(slices))))
                if len(set(outcomes)) != 1:  # the program, not the data, decides where a run stops
                    raise AssertionError(f"batch parts stopped at different places: {outcomes}")
                i, status = outcomes[0]
                self.config[:] = configs[0]
                if status == kernels.STATUS_LOADLUT:
                    raise EmulatorError(
                        f"{source}: instruction #{i} (LoadLUT) is not implemented by any Tensil hardware; "
                        "the program cannot run"
                    )
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
        )
