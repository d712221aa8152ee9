"""Performance samples, as the TCU's sampler would write them (the ``sample_interval`` register).

When a Configure instruction sets the sample-interval register (0xB) to L > 0, the
hardware writes a 64-bit word every L clocks: bits 0-31 the program counter (instructions
dispatched so far), then a valid and a ready bit for each decoder bus: array (32, 33),
accumulators (34, 35), local dataflow (36, 37), DRAM1 (38, 39), DRAM0 (40, 41), local
memory port B (42, 43), port A (44, 45), instruction (46, 47). An interval of 0 stops
sampling. Files hold the words back to back, little-endian.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from systolix.artifacts import write_bytes_atomic
from systolix.errors import ArtifactError
from systolix.isa.codec import DecodedProgram
from systolix.isa.instructions import ConfigRegister, Opcode
from systolix.perf.simulator import Timeline

# Bus name -> (valid bit, unit whose work drives it). Ready is valid bit + 1.
SAMPLE_BUSES = {
    "array": (32, "array"),
    "acc": (34, "acc"),
    "dataflow": (36, "port_a"),
    "dram1": (38, "dram1"),
    "dram0": (40, "dram0"),
    "mem_port_b": (42, "port_b"),
    "mem_port_a": (44, "port_a"),
}
INSTRUCTION_VALID_BIT = 46


def sample_times(program: DecodedProgram, timeline: Timeline) -> np.ndarray:
    """The clocks at which samples are taken, from the program's Configure instructions."""
    cfg = np.flatnonzero(program.opcode == Opcode.CONFIGURE)
    times: list[np.ndarray] = []
    interval, since = 0, 0.0
    for i in list(cfg) + [None]:
        t = timeline.cycles if i is None else float(timeline.issue[i])
        if interval > 0 and t > since:
            times.append(np.arange(since, t, interval))
        if i is None:
            break
        instr = program.instruction(int(i))
        if instr.register == ConfigRegister.SAMPLE_INTERVAL:
            interval, since = int(instr.value) & 0xFFFF, t
    return np.concatenate(times) if times else np.zeros(0)


def unit_intervals(program: DecodedProgram, timeline: Timeline) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each unit: the instructions that use it and when each occupies it (start, end)."""
    op, f = program.opcode, program.flags
    n = (program.size + 1).astype(np.float64)
    mm = op == 1
    lw = op == 3
    dm = op == 2
    acc_move = dm & (f >= 12)
    simd = op == 4
    s, e, d = timeline.start, timeline.end, timeline.done
    acc_start = np.where(mm, d - n, s)
    acc_end = np.where(mm, d, e)
    masks = {
        "decoder": np.ones(len(program), dtype=bool),
        "array": mm | lw,
        "acc": mm | acc_move | simd,
        "port_a": (mm & ((f & 2) == 0)) | (lw & ((f & 1) == 0)) | acc_move,
        "port_b": dm & (f <= 3),
        "dram0": dm & (f <= 1),
        "dram1": dm & ((f == 2) | (f == 3)),
    }
    tandem = (op >= 6) & (op <= 12)  # the Tandem unit's work (TSync is ordering only)
    if tandem.any():
        masks["tandem"] = tandem
    out = {}
    for unit, mask in masks.items():
        idx = np.flatnonzero(mask)
        if unit == "decoder":
            out[unit] = (idx, timeline.issue[idx], timeline.issue[idx] + timeline.params.issue_cycles)
        elif unit == "acc":
            out[unit] = (idx, acc_start[idx], acc_end[idx])
        else:
            out[unit] = (idx, s[idx], e[idx])
    return out


def _bus_bits(times: np.ndarray, issue: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if start.size == 0:
        return np.zeros(times.size, dtype=bool), np.ones(times.size, dtype=bool)
    # Per unit, work starts in order; the last started item and the next one tell all.
    k = np.searchsorted(start, times, side="right") - 1
    started = k >= 0
    running = started & (end[np.clip(k, 0, None)] > times)
    nxt = np.clip(k + 1, 0, start.size - 1)
    pending = (k + 1 < start.size) & (issue[nxt] <= times)
    return running | pending, running | ~pending


def sample_words(program: DecodedProgram, timeline: Timeline, times: np.ndarray | None = None) -> np.ndarray:
    """The 64-bit sample words at the given clocks (default: where Configure asks for them)."""
    times = sample_times(program, timeline) if times is None else np.asarray(times, dtype=np.float64)
    words = np.zeros(times.size, dtype=np.uint64)
    if times.size == 0:
        return words
    pc = np.searchsorted(timeline.issue, times, side="right").astype(np.uint64)
    words |= pc & np.uint64(0xFFFFFFFF)
    intervals = unit_intervals(program, timeline)
    for bit, unit in SAMPLE_BUSES.values():
        idx, s, e = intervals[unit]
        order = np.argsort(s, kind="stable")
        valid, ready = _bus_bits(times, timeline.issue[idx][order], s[order], e[order])
        words |= valid.astype(np.uint64) << np.uint64(bit)
        words |= ready.astype(np.uint64) << np.uint64(bit + 1)
    remaining = pc < len(program)
    dispatched = np.zeros(times.size, dtype=bool)
    j = np.searchsorted(timeline.issue, times, side="left")
    ok = j < len(program)
    dispatched[ok] = timeline.issue[j[ok]] < times[ok] + 1
    words |= remaining.astype(np.uint64) << np.uint64(INSTRUCTION_VALID_BIT)
    words |= dispatched.astype(np.uint64) << np.uint64(INSTRUCTION_VALID_BIT + 1)
    return words


def write_samples(path: str | Path, words: np.ndarray) -> None:
    """Write sample words, little-endian, atomically."""
    write_bytes_atomic(Path(path), np.asarray(words, dtype="<u8").tobytes())


def read_samples(path: str | Path) -> np.ndarray:
    """Read a sample file back."""
    data = Path(path).read_bytes()
    if len(data) % 8:
        raise ArtifactError(f"{path}: {len(data)} bytes is not a whole number of 64-bit samples")
    return np.frombuffer(data, dtype="<u8").copy()


def decode_samples(words: np.ndarray) -> dict[str, np.ndarray]:
    """Program counter and each bus's valid/ready bits as arrays."""
    out = {"program_counter": (words & np.uint64(0xFFFFFFFF)).astype(np.int64)}
    buses = {name: bit for name, (bit, _) in SAMPLE_BUSES.items()}
    buses["instruction"] = INSTRUCTION_VALID_BIT
    for name, bit in buses.items():
        out[f"{name}_valid"] = ((words >> np.uint64(bit)) & np.uint64(1)).astype(bool)
        out[f"{name}_ready"] = ((words >> np.uint64(bit + 1)) & np.uint64(1)).astype(bool)
    return out
