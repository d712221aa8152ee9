"""Tracepoint dumps: the emulator's state at one program counter, as an ``.npz`` file."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from systolix.artifacts import write_bytes_atomic
from systolix.errors import SystolixError
from systolix.emulator.bounds import MEMORIES


def parse_range(text: str) -> tuple[str, int, int | None]:
    """``MEMORY[:FIRST[:COUNT]]`` (e.g. ``acc:0:64``) as ``(memory, first, count or None)``."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or parts[0] not in MEMORIES:
        raise SystolixError(
            f"trace range {text!r}: expected MEMORY[:FIRST[:COUNT]] with MEMORY one of {', '.join(MEMORIES)}"
        )
    try:
        first = int(parts[1], 0) if len(parts) > 1 else 0
        count = int(parts[2], 0) if len(parts) > 2 else None
    except ValueError:
        raise SystolixError(f"trace range {text!r}: FIRST and COUNT must be integers") from None
    if first < 0 or (count is not None and count < 1):
        raise SystolixError(f"trace range {text!r}: FIRST must be >= 0 and COUNT >= 1")
    return parts[0], first, count


def numbered_path(path: Path, hit: int) -> Path:
    """The file for the ``hit``-th time the tracepoint fires: ``path`` itself, then ``stem.2.npz``..."""
    if hit <= 1:
        return path
    return path.with_name(f"{path.stem}.{hit}{path.suffix or '.npz'}")


def dump_state(emulator, path: Path, instruction_index: int, ranges=None) -> None:
    """Write the emulator's memories (or ``ranges``), weights, SIMD and config registers.

    Arrays are raw values with the batch axis first; each memory range is stored as
    ``<memory>`` (the whole allocated memory; DRAM from address 0 to the highest address in
    use) or ``<memory>@<first>`` with its vectors.
    """
    arrays: dict[str, np.ndarray] = {
        "instruction_index": np.int64(instruction_index),
        "program_counter": np.int64(emulator.program_counter),
        "config": emulator.config.copy(),
        "weights": emulator.weights.copy(),
        "simd_registers": emulator.registers.copy(),
        "data_type": np.array(emulator.data_type.name),
    }
    if not ranges:
        for memory in MEMORIES:
            stored = getattr(emulator, memory)
            if hasattr(stored, "spans"):  # DRAM: dense from address 0 (within the memory limit)
                arrays[memory] = emulator.read(memory, 0, stored.shape[1])
            else:
                arrays[memory] = stored.copy()
    else:
        for memory, first, count in ranges:
            if count is None:
                count = max(0, getattr(emulator, memory).shape[1] - first)
            if first + count > emulator.depth(memory):
                raise SystolixError(
                    f"trace range {memory}:{first}:{count} goes past {memory}'s depth of {emulator.depth(memory)}"
                )
            arrays[f"{memory}@{first}"] = emulator.read(memory, first, count)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    try:
        write_bytes_atomic(Path(path), buffer.getvalue())
    except OSError as e:
        raise SystolixError(f"{path}: cannot write the tracepoint dump: {e.strerror}") from None
