"""Running programs on the co-simulated RTL with the emulator's interface."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from systolix.arch import Architecture
from systolix.emulator.machine import RunResult
from systolix.isa import OPCODE_NAMES, DataFlow, DataMove, DecodedProgram, InstructionLayout, Opcode, decode_program, encode_program
from systolix.numerics import DataType
from systolix.rtl.config import RtlConfig
from systolix.rtl.cosim.build import CosimError, build, state_items

# --- DRAM model ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class DramModel:
    """The simulated DRAM behind each AXI port (``harness.cpp``), in accelerator clocks."""

    latency: int = 32
    write_latency: int = 32
    beat_cycles: int = 1
    gap: int = 0

    def arguments(self) -> list[str]:
        return ["--latency", str(self.latency), "--write-latency", str(self.write_latency),
                "--beat-cycles", str(self.beat_cycles), "--gap", str(self.gap)]


# --- running ---------------------------------------------------------------------------------------

def pack_vectors(raw: np.ndarray, dtype: DataType) -> bytes:
    """Raw vectors to the bytes the RTL's DRAM ports read (FLOAT32 little-endian, unlike .tdata)."""
    from systolix.artifacts.tdata import pack_scalars

    if dtype is DataType.FLOAT32:
        return np.asarray(raw, dtype=np.float32).astype("<f4").tobytes()
    return pack_scalars(raw, dtype)


def unpack_vectors(data: bytes, dtype: DataType, n: int) -> np.ndarray:
    from systolix.artifacts.tdata import unpack_scalars

    if dtype is DataType.FLOAT32:
        return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(-1, n)
    return unpack_scalars(data, dtype).reshape(-1, n)


def unpack_lanes(data: bytes, count: int, bits: int, lanes: int, dtype: DataType) -> np.ndarray:
    """``count`` values of ``lanes`` x (``bits``/``lanes``)-bit scalars, as the emulator holds them."""
    nbytes = (bits + 7) // 8
    w = bits // lanes
    raw = np.frombuffer(data, dtype=np.uint8).reshape(count, nbytes)
    # Each value as a little-endian integer, split into lanes of w bits.
    words = np.zeros((count, lanes), dtype=np.uint64)
    big = [int.from_bytes(raw[i].tobytes(), "little") for i in range(count)]
    mask = (1 << w) - 1
    for i, v in enumerate(big):
        if v:
            words[i] = [(v >> (k * w)) & mask for k in range(lanes)]
    if dtype is DataType.FLOAT32:
        return words.astype(np.uint32).view(np.float32)
    signed = words.astype(np.int64)
    return np.where(signed >= 1 << (w - 1), signed - (1 << w), signed)


@dataclass
class RtlRun:
    """What one program run on the RTL did (one batch item)."""

    cycles: int
    preamble_cycles: int
    program_counter: int
    seconds: float
    error: bool
    bytes_moved: dict[str, int]
    state: dict[str, np.ndarray] | None = None
    samples: bytes | None = None
    tracepoint_cycles: list[int] = field(default_factory=list)
    padding_noops: int = 0
    """NoOps appended to fill the last stream word (counted by the program counter)."""


class RtlMachine:
    """The generated TCU under co-simulation, with the emulator's ``write``/``read``/``run``.

    Memories written before ``run`` become the DRAM images (local memory, for constants that
    live there, is filled by a preamble of DataMoves from DRAM1, as Tensil's driver does); after
    ``run`` ``read`` returns what the RTL left in DRAM, and ``runs`` holds each item's cycles.
    """

    def __init__(self, arch: Architecture, batch: int = 1, threads: int | None = None, dram: DramModel | None = None,
                 config: RtlConfig | None = None, dump_state: bool = False, samples: bool = False,
                 max_cycles: int = 2_000_000_000, progress: Callable[[str], None] | None = None):
        self.arch = arch
        self.cfg = config or RtlConfig(arch)
        if self.cfg.arch != arch:
            raise CosimError("the RTL configuration was made for another architecture")
        self.batch = int(batch)
        self.threads = max(1, int(threads or 1))
        self.dram_model = dram or DramModel()
        self.dump_state = dump_state
        self.want_samples = samples
        self.max_cycles = max_cycles
        self.binary = build(self.cfg, progress)
        self._writes: dict[str, list[tuple[int, np.ndarray]]] = {"dram0": [], "dram1": [], "local": []}
        self._dram_out: list[dict[str, bytes]] = []
        self.runs: list[RtlRun] = []

    def write(self, memory: str, address: int, vectors: np.ndarray) -> None:
        if memory not in self._writes:
            raise CosimError(f"the RTL engine takes data for dram0, dram1 or local memory, not {memory!r}")
        v = np.asarray(vectors)
        if v.ndim == 2:
            v = np.broadcast_to(v, (self.batch,) + v.shape)
        self._writes[memory].append((int(address), v))

    def _image(self, memory: str, item: int) -> bytearray:
        vb = self.arch.vector_bytes
        image = bytearray()
        for address, v in self._writes[memory]:
            data = pack_vectors(v[item], self.arch.data_type)
            end = address * vb + len(data)
            if len(image) < end:
                image.extend(bytes(end - len(image)))
            image[address * vb : end] = data
        return image

    def _preamble(self) -> bytes:
        """DataMoves that copy the local-memory constants from DRAM1, where ``_image`` puts them."""
        limit = 1 << self.cfg.layout.size_bits
        moves = []
        for address, v in self._writes["local"]:
            for start in range(0, v.shape[1], limit):
                count = min(limit, v.shape[1] - start)
                moves.append(DataMove(DataFlow.DRAM1_TO_LOCAL, address + start, address + start, count - 1))
        return encode_program(moves, self.cfg.layout)

    def run(self, program, *, source: str = "program", progress: Callable[[int, int], None] | None = None,
            **options) -> "RtlRunResult":
        if options:
            raise CosimError(f"{', '.join(sorted(options))}: the emulator's tracing options do not apply to the RTL engine")
        started = time.perf_counter()
        layout = InstructionLayout.of(self.arch)
        if isinstance(program, DecodedProgram):
            decoded = program
            data = program.to_bytes()
        else:
            data = bytes(program)
            decoded = decode_program(data, layout, source)
        from systolix.emulator.bounds import analyse

        summary = analyse(decoded, self.arch, source)
        if summary.violation is not None:
            raise CosimError(summary.violation.message)
        if np.any(decoded.opcode == Opcode.LOADLUT):
            raise CosimError(f"{source}: LoadLUT is not implemented by any Tensil hardware; the program cannot run")
        data, padding = _pad_to_words(data, layout.instruction_bytes, self.cfg.axi_data_bytes)
        preamble, _ = _pad_to_words(self._preamble(), layout.instruction_bytes, self.cfg.axi_data_bytes)
        done = [0]

        def one(item: int) -> tuple[RtlRun, dict[str, bytes]]:
            with tempfile.TemporaryDirectory(prefix="systolix-cosim-") as tmp:
                tmp = Path(tmp)
                (tmp / "prog").write_bytes(data)
                args = [str(self.binary), "--program", str(tmp / "prog"), "--max-cycles", str(self.max_cycles)]
                dram1 = self._image("dram1", item)
                for address, v in self._writes["local"]:  # staged in DRAM1 for the preamble
                    blob = pack_vectors(v[item], self.arch.data_type)
                    at = address * self.arch.vector_bytes
                    if len(dram1) < at + len(blob):
                        dram1.extend(bytes(at + len(blob) - len(dram1)))
                    dram1[at : at + len(blob)] = blob
                for name, image in (("dram0", self._image("dram0", item)), ("dram1", dram1)):
                    (tmp / name).write_bytes(image)
                    args += [f"--{name}", str(tmp / name), f"--{name}-out", str(tmp / f"{name}.out")]
                if preamble:
                    (tmp / "preamble").write_bytes(preamble)
                    args += ["--preamble", str(tmp / "preamble")]
                if self.dump_state:
                    args += ["--state-out", str(tmp / "state")]
                if self.want_samples:
                    args += ["--samples-out", str(tmp / "samples")]
                args += self.dram_model.arguments()
                result = subprocess.run(args, capture_output=True, text=True)
                try:
                    report = json.loads(result.stdout.strip().splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    raise CosimError(f"{source}: the co-simulation failed (exit {result.returncode}): "
                                     f"{result.stderr.strip()[-500:]}") from None
                if not report["finished"]:
                    raise CosimError(f"{source}: the RTL did not finish within {self.max_cycles:,} clocks "
                                     f"(program counter {report['program_counter']} of {len(decoded)})")
                outs = {name: (tmp / f"{name}.out").read_bytes() for name in ("dram0", "dram1")}
                run = RtlRun(
                    cycles=report["cycles"], preamble_cycles=report["preamble_cycles"],
                    program_counter=report["program_counter"], seconds=report["seconds"], error=bool(report["error"]),
                    bytes_moved={k: report[k] for k in report if k.endswith(("_read", "_written"))},
                    tracepoint_cycles=report["tracepoint_cycles"], padding_noops=padding,
                )
                if self.dump_state:
                    run.state = self._parse_state((tmp / "state").read_bytes())
                if self.want_samples:
                    run.samples = (tmp / "samples").read_bytes()
            done[0] += 1
            if progress is not None:
                progress(done[0], self.batch)
            return run, outs

        if self.threads > 1 and self.batch > 1:
            with ThreadPoolExecutor(min(self.threads, self.batch)) as pool:
                results = list(pool.map(one, range(self.batch)))
        else:
            results = [one(b) for b in range(self.batch)]
        self.runs = [r for r, _ in results]
        self._dram_out = [o for _, o in results]
        counts = np.bincount(decoded.opcode, minlength=16)
        return RtlRunResult(
            instructions=len(decoded),
            counts={OPCODE_NAMES[op]: int(counts[int(op)]) for op in Opcode if counts[int(op)]},
            saturations={},
            saturations_per_item=np.zeros((self.batch, 4), dtype=np.int64),
            registers={},
            seconds=time.perf_counter() - started,
            cycles=[r.cycles for r in self.runs],
        )

    def _parse_state(self, data: bytes) -> dict[str, np.ndarray]:
        state: dict[str, np.ndarray] = {}
        at = 0
        n = self.arch.array_size
        for item in state_items(self.cfg):
            chunk = data[at : at + item.nbytes]
            at += item.nbytes
            if item.name in ("local", "acc"):
                state[item.name] = unpack_lanes(chunk, item.count, item.bits, n, self.arch.data_type)
            elif item.bits == self.cfg.scalar_bits and not item.name.startswith(("dram", "timeout", "tracepoint", "program", "sample")):
                state[item.name] = unpack_lanes(chunk, 1, item.bits, 1, self.arch.data_type)[0, 0]
            else:
                state[item.name] = int.from_bytes(chunk, "little")
        return state

    def read(self, memory: str, address: int, count: int) -> np.ndarray:
        if memory not in ("dram0", "dram1"):
            raise CosimError(f"after a run the RTL engine returns DRAM contents, not {memory!r}")
        if not self._dram_out:
            raise CosimError("nothing has run yet")
        vb = self.arch.vector_bytes
        out = []
        for images in self._dram_out:
            image = images[memory]
            blob = image[address * vb : (address + count) * vb]
            blob = blob + bytes(count * vb - len(blob))
            out.append(unpack_vectors(blob, self.arch.data_type, self.arch.array_size))
        return np.stack(out)


@dataclass
class RtlRunResult(RunResult):
    """An emulator ``RunResult`` (the RTL counts no saturations), plus the RTL's clocks per batch item."""

    cycles: list[int] = field(default_factory=list)


def _pad_to_words(data: bytes, instruction_bytes: int, word_bytes: int) -> tuple[bytes, int]:
    """``data`` and NoOps after it up to a whole number of stream words, and how many NoOps.

    The instruction stream has no byte enables, so the host pads a program with NoOps (as
    Tensil's driver does); the program counter counts them too. A multiple of the word length
    is always reachable: the program is a whole number of instructions.
    """
    padding = 0
    while (len(data) + padding * instruction_bytes) % word_bytes:
        padding += 1
    return data + bytes(padding * instruction_bytes), padding
