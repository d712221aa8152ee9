"""``estimate``: frame latency, frame rate, unit shares and per-layer times of a program on a board."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from systolix.arch import Board
from systolix.artifacts import TModel
from systolix.errors import ArtifactError, SystolixError
from systolix.isa import InstructionLayout, decode_program
from systolix.isa.codec import DecodedProgram
from systolix.perf.simulator import ALL_UNIT_LABELS, TANDEM_UNIT, U_TAN, UNIT_LABELS, UNITS, Timeline, simulate

# What bounds a run: the unit categories compared by busy time.
BOUND_CATEGORIES = {
    "array": ("array",),
    "memory traffic": ("dram0", "dram1", "port_b"),
    "instruction issue": ("decoder",),
    "accumulators/SIMD": ("acc",),
    "Tandem unit": (TANDEM_UNIT,),  # only on an architecture with the unit
}
# What bounds a layer: one of UNITS, or the array's time spent on weights rather than MatMuls
# (or nothing: a layer without instructions).
LAYER_BOUND_LABELS = {**UNIT_LABELS, "weights": "weight loading / array drain", "none": "-"}
# Ties go to the first: the array over port A and the accumulators (every MatMul counts on all
# three), a DRAM port over port B (every DRAM move counts on both; port B leads only when both
# DRAM ports queue on it).
BOUND_ORDER = ("array", "acc", "dram0", "dram1", "port_b", "port_a", "decoder")


@dataclass
class LayerEstimate:
    """One layer of the layer map (or one inferred stage) under the model."""

    name: str
    ops: list[str]
    first: int
    end: int
    macs: int
    cycles: float  # time this layer adds to the frame (from the previous layer's end to its own)
    unit_cycles: dict[str, float]
    dram_bytes: int
    weight_cycles: float = 0.0  # array clocks on LoadWeights, plus the drains before them
    drain_cycles: float = 0.0  # array clocks waiting for MatMul inputs to leave before a LoadWeights

    @property
    def instructions(self) -> int:
        return self.end - self.first

    @property
    def bound(self) -> str:
        """The unit busiest over the layer's own instructions (work counts in the layer that
        issues it, even where it overlaps the next); the array's drains count as array time,
        named ``weights`` when weights, not MatMuls, take most of it."""
        if self.end == self.first:
            return "none"
        busy = {**self.unit_cycles, "array": self.unit_cycles["array"] + self.drain_cycles}
        unit = max(BOUND_ORDER, key=busy.__getitem__)
        return "weights" if unit == "array" and 2 * self.weight_cycles > busy["array"] else unit

    def compute_cycles(self, n: int) -> float:
        """Clocks at 100% MAC efficiency: useful MACs / N^2."""
        return self.macs / (n * n)

    def to_json(self, clock_mhz: float, n: int) -> dict[str, Any]:
        return {
            "name": self.name, "ops": self.ops, "first": self.first, "end": self.end, "macs": self.macs,
            "cycles": round(self.cycles, 1), "latency_ms": self.cycles / (clock_mhz * 1e3),
            "mac_efficiency": self.macs / (n * n * self.cycles) if self.cycles > 0 else 0.0,
            "dram_bytes": self.dram_bytes, "units": {u: round(c, 1) for u, c in self.unit_cycles.items()},
            "bound": self.bound, "bound_label": LAYER_BOUND_LABELS[self.bound],
            "compute_bound_cycles": self.compute_cycles(n),
            "x_compute_bound": self.cycles / self.compute_cycles(n) if self.macs else None,
        }


@dataclass
class Estimate:
    """The latency model's answer for one program on one board."""

    board: Board
    instructions: int
    cycles: float  # accelerator clocks for one run of the program
    io_scalars: int  # input and output scalars the host writes and reads per frame
    macs: int
    macs_source: str  # "layer map" or "array" (MatMul vectors x N^2, includes zero padding)
    unit_busy: dict[str, float]
    layers: list[LayerEstimate] | None
    timeline: Timeline = field(repr=False)
    host_segments_ms: float = 0.0
    """A partitioned model's host segments (``time_host_segment``); 0 for a plain program."""
    batch: int = 1
    """Images one run of the program takes (``systolix compile --batch``): ``latency_ms`` is
    for all of them, ``fps`` counts each."""

    @property
    def accelerator_ms(self) -> float:
        return self.cycles / (self.board.clock_mhz * 1e3)

    @property
    def host_ms(self) -> float:
        return self.io_scalars * self.board.host_ns_per_scalar * 1e-6

    @property
    def latency_ms(self) -> float:
        return self.accelerator_ms + self.host_ms + self.host_segments_ms

    @property
    def fps(self) -> float:
        return self.batch * 1e3 / self.latency_ms if self.latency_ms > 0 else float("inf")

    @property
    def mac_efficiency(self) -> float:
        n = self.board.architecture.array_size
        return self.macs / (n * n * self.cycles) if self.cycles > 0 else 0.0

    @property
    def unit_shares(self) -> dict[str, float]:
        return {u: (b / self.cycles if self.cycles else 0.0) for u, b in self.unit_busy.items()}

    @property
    def bound(self) -> str:
        """The category whose busiest unit is busy longest: what the run waits on."""
        best, best_busy = "", -1.0
        for name, units in BOUND_CATEGORIES.items():
            busy = max(self.unit_busy.get(u, 0.0) for u in units)
            if busy > best_busy:
                best, best_busy = name, busy
        return best

    def to_json(self) -> dict[str, Any]:
        """The estimate as plain data (the ``--json`` output)."""
        n = self.board.architecture.array_size
        return {
            "board": self.board.name,
            "array_size": n,
            "clock_mhz": self.board.clock_mhz,
            "instructions": self.instructions,
            "batch": self.batch,
            "cycles": round(self.cycles, 1),
            "accelerator_ms": self.accelerator_ms,
            "host_ms": self.host_ms,
            "host_segments_ms": self.host_segments_ms,
            "latency_ms": self.latency_ms,
            "fps": self.fps,
            "macs": self.macs,
            "macs_source": self.macs_source,
            "mac_efficiency": self.mac_efficiency,
            "units": {
                u: {"label": ALL_UNIT_LABELS[u], "busy_cycles": round(self.unit_busy[u], 1), "share": self.unit_shares[u]}
                for u in self.unit_busy
            },
            "bound": self.bound,
            "layers": None if self.layers is None else [l.to_json(self.board.clock_mhz, n) for l in self.layers],
        }


def load_program(tmodel_path: str | Path) -> tuple[TModel, DecodedProgram]:
    """A ``.tmodel`` and its decoded program, after the checks ``systolix run`` makes.

    The manifest's files must be regular files inside its folder, its constants, inputs and
    outputs must lie inside the architecture's memories, and every address the program uses
    must too (``systolix.emulator.bounds``): a program that ``run`` would stop at instruction
    #i is refused here with the same message. Raises ``ArtifactError``, ``DecodingError`` and
    ``EmulatorError``.
    """
    from systolix.artifacts.files import read_member
    from systolix.emulator import EmulatorError, analyse
    from systolix.emulator.machine import lut_message
    from systolix.isa import Opcode

    path = Path(tmodel_path)
    if path.suffix != ".tmodel":
        raise ArtifactError(f"{path}: expected a .tmodel manifest")
    model = TModel.load(path)
    model.check_spans(str(path))
    name = model.prog.file_name
    data = read_member(path.parent, name, "prog.file_name", str(path), "program", count=model.prog.size + 1)
    if len(data) != model.prog.size:
        raise ArtifactError(f"{path}: prog.size says {model.prog.size} bytes but {name} has "
                            f"{'more' if len(data) > model.prog.size else len(data)}")
    prog_path = path.parent / name
    program = decode_program(data, InstructionLayout.of(model.arch), str(prog_path))
    from systolix.runtime.model import check_layer_map, tensor_specs

    tensor_specs(model, str(path))
    check_layer_map(model, len(program), str(path))
    violation = analyse(program, model.arch, str(prog_path)).violation
    lut = np.flatnonzero(program.opcode[: violation.index if violation else len(program)] == Opcode.LOADLUT)
    if lut.size:  # what run stops at first, estimate refuses with the same message
        raise EmulatorError(lut_message(str(prog_path), int(lut[0])))
    if violation is not None:
        raise EmulatorError(violation.message)
    return model, program


def unit_work(program: DecodedProgram, timeline: Timeline) -> np.ndarray:
    """Clocks each instruction keeps each unit busy: shape (instructions, units)."""
    op = program.opcode
    f = program.flags
    n = (program.size + 1).astype(np.float64)
    lw_n = (program.addr1 + 1).astype(np.float64)
    work = np.zeros((len(program), len(timeline.busy)))
    col = {u: i for i, u in enumerate(UNITS)}
    work[:, col["decoder"]] = timeline.params.issue_cycles
    mm = op == 1
    mm_reads = mm & ((f & 2) == 0)
    work[mm, col["array"]] = n[mm]
    work[mm, col["acc"]] = n[mm]
    work[mm_reads, col["port_a"]] = n[mm_reads]
    lw = op == 3
    lw_reads = lw & ((f & 1) == 0)
    work[lw, col["array"]] = lw_n[lw]
    work[lw_reads, col["port_a"]] = lw_n[lw_reads]
    dm = op == 2
    acc_move = dm & (f >= 12)
    work[acc_move, col["acc"]] = n[acc_move]
    work[acc_move, col["port_a"]] = n[acc_move]
    xfer = timeline.end - timeline.start
    for flows, unit in (((0, 1), "dram0"), ((2, 3), "dram1")):
        sel = dm & np.isin(f, flows)
        work[sel, col[unit]] = xfer[sel]
        work[sel, col["port_b"]] = xfer[sel]
    simd = op == 4
    work[simd, col["acc"]] = np.where((f[simd] & 3) == 3, 2.0, 1.0)
    if work.shape[1] > U_TAN:
        tandem = (op >= 6) & (op <= 12)
        work[tandem, U_TAN] = xfer[tandem]
    return work


def unit_busy(timeline: Timeline, arch) -> dict[str, float]:
    """Clocks each unit was busy: the TCU's, and the Tandem unit's on an architecture with it."""
    busy = {u: float(timeline.busy[i]) for i, u in enumerate(UNITS)}
    if arch.tandem is not None:
        busy[TANDEM_UNIT] = float(timeline.busy[U_TAN])
    return busy


def dram_bytes_per_instruction(program: DecodedProgram, vector_bytes: int) -> np.ndarray:
    dm = (program.opcode == 2) & (program.flags <= 3)
    return np.where(dm, (program.size + 1) * vector_bytes, 0).astype(np.int64)


def array_macs(program: DecodedProgram, n: int) -> int:
    """MACs the array performs: every MatMul vector (zero-padded channels included) x N^2."""
    mm = (program.opcode == 1) & ((program.flags & 2) == 0)
    return int((program.size[mm] + 1).sum()) * n * n


def layer_entries_from_map(layer_map: list[dict], n_instr: int, source: str) -> list[dict]:
    entries = []
    for i, layer in enumerate(layer_map):
        where = f"{source}[{i}]"
        if not isinstance(layer, dict):
            raise ArtifactError(f"{where}: expected an object")
        try:
            first, end = int(layer["first"]), int(layer["end"])
            name = str(layer.get("name", f"layer {i}"))
            macs = int(layer.get("macs", 0))
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"{where}: missing or bad field {e}") from None
        if not 0 <= first <= end <= n_instr:
            raise ArtifactError(f"{where} ({name!r}): instruction range [{first}, {end}) is outside the program's {n_instr} instructions")
        entries.append({"name": name, "ops": list(layer.get("ops", [])), "first": first, "end": end, "macs": macs})
    return entries


def infer_stages(program: DecodedProgram) -> list[dict]:
    """Stages of a program without a layer map (Tensil's own compiles).

    Tensil's scheduler ends every stage by moving results out of the accumulators
    (DataMove acc->local) and no two stages share weights or accumulators,
    so a stage starts at the first instruction after a run of such moves (and of the
    DRAM saves that follow them) that touches anything else.
    """
    op = program.opcode
    f = program.flags
    is_save = (op == 2) & ((f == 12) | (f == 1) | (f == 3))
    starts = [0]
    in_save = False
    for i in range(len(program)):
        if is_save[i]:
            in_save = True
        elif in_save and op[i] != 0:
            starts.append(i)
            in_save = False
    bounds = starts + [len(program)]
    return [
        {"name": f"stage {k + 1}", "ops": ["(inferred)"], "first": a, "end": b, "macs": 0}
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])) if b > a
    ]


def layer_estimates(program: DecodedProgram, timeline: Timeline, entries: list[dict], vector_bytes: int,
                    n: int, macs_from_array: bool = False) -> list[LayerEstimate]:
    """Per-layer time, unit busy clocks and DRAM bytes for the given instruction ranges."""
    work = unit_work(program, timeline)
    dram = dram_bytes_per_instruction(program, vector_bytes)
    mm_vectors = np.where((program.opcode == 1) & ((program.flags & 2) == 0), program.size + 1, 0)
    # A LoadWeights right after a MatMul (in array order) waits for the array to drain.
    op = program.opcode
    on_array = np.flatnonzero((op == 1) | (op == 3))
    drain = np.zeros(len(program))
    drain[on_array[1:][(op[on_array[1:]] == 3) & (op[on_array[:-1]] == 1)]] = timeline.params.fill_cycles - 1
    weights = np.where(op == 3, program.addr1.astype(np.float64) + 1, 0.0) + drain
    out = []
    prev_end = 0.0
    for e in entries:
        a, b = e["first"], e["end"]
        layer_end = float(timeline.done[a:b].max()) if b > a else prev_end
        layer_end = max(layer_end, prev_end)
        macs = int(mm_vectors[a:b].sum()) * n * n if macs_from_array else e["macs"]
        out.append(LayerEstimate(
            name=e["name"], ops=e["ops"], first=a, end=b, macs=macs, cycles=layer_end - prev_end,
            unit_cycles={u: float(work[a:b, j].sum()) for j, u in enumerate(UNITS)},
            dram_bytes=int(dram[a:b].sum()), weight_cycles=float(weights[a:b].sum()),
            drain_cycles=float(drain[a:b].sum()),
        ))
        prev_end = layer_end
    return out


def estimate(
    program: DecodedProgram | TModel | str | Path,
    board: Board,
    layer_map: list[dict] | None = None,
    model: TModel | None = None,
) -> Estimate:
    """Estimate one frame of ``program`` on ``board``.

    ``program`` is a decoded program or a ``.tmodel`` path. With a manifest (``model``), its
    architecture replaces the board's, its inputs and outputs give the host's per-frame I/O,
    and its ``systolix.layers`` (if any) the layer map.

    A ``.tmodel`` path is read by ``load_program``, which makes ``run``'s checks: it raises
    ``ArtifactError``, ``DecodingError`` and ``EmulatorError`` (an address past a memory,
    LoadLUT) with the message ``run`` would print. A layer map outside the program is an
    ``ArtifactError``.
    """
    if isinstance(program, (str, Path)):
        model, program = load_program(program)
    elif isinstance(program, TModel):
        raise SystolixError("estimate: pass a .tmodel path (its program is read from beside it)")
    if model is not None:
        board = board.with_architecture(model.arch)
        if layer_map is None and model.systolix and model.systolix.get("layers"):
            layer_map = model.systolix["layers"]
    arch = board.architecture
    if program.layout != InstructionLayout.of(arch):
        raise SystolixError(f"the program was decoded for another architecture than the board's {board.name!r}")
    timeline = simulate(program, board)
    n = arch.array_size
    io_scalars = 0
    if model is not None:
        io_scalars = (sum(t.size for t in model.inputs) + sum(t.size for t in model.outputs)) * n
    layers = None
    if layer_map:
        entries = layer_entries_from_map(layer_map, len(program), "systolix.layers")
        layers = layer_estimates(program, timeline, entries, arch.vector_bytes, n)
        macs, source = sum(l.macs for l in layers), "layer map"
    else:
        macs, source = array_macs(program, n), "array (MatMul vectors x N^2, includes zero padding)"
    return Estimate(
        board=board, instructions=len(program), cycles=timeline.cycles, io_scalars=io_scalars, macs=macs,
        macs_source=source, unit_busy=unit_busy(timeline, arch),
        layers=layers, timeline=timeline, batch=model.extension.batch if model is not None and model.systolix else 1,
    )


def segment_manifests(tmodel_path: str | Path) -> list[dict] | None:
    """For a model partitioned between accelerator and host (``systolix.segments``), its
    segments in order (``kind``, ``nodes``, and ``tmodel`` or ``onnx``); None for a plain model.

    Raises ``ArtifactError`` for a malformed manifest or a segment file (``.tmodel`` or ``.onnx``)
    outside the folder, missing or not a regular file."""
    from systolix.artifacts.files import member_size

    path = Path(tmodel_path)
    model = TModel.load(path)
    ext = model.extension
    if ext is None or not ext.segments:
        return None
    for i, seg in enumerate(ext.segments):  # what run would refuse, estimate refuses (host files are not read)
        field = "tmodel" if seg.kind == "accelerator" else "onnx"
        member_size(path.parent, getattr(seg, field), f"systolix.segments[{i}].{field}", str(path))
    return [seg.model_dump() for seg in ext.segments]


HOST_TIMING_NOTE = ("timed with onnxruntime on the machine running the estimate (one thread, median of "
                    "repeated runs on random inputs), not on the board's CPU")


def time_host_segment(onnx_path: str | Path, repeats: int = 30, budget_s: float = 0.5) -> float:
    """Milliseconds one frame of a host segment takes: onnxruntime with one intra-op thread on
    this machine, on random normal inputs of the segment's shapes (integer inputs zero), the
    median of up to ``repeats`` runs (at most about ``budget_s`` seconds) after two warm-up runs.

    The model of the host is this machine's core, not the board's ARM cores (no figure for
    onnxruntime on a Cortex-A53 is at hand to scale by): the host segments' time is stated
    separately so that it can be replaced."""
    import time

    from systolix.artifacts.files import read_member
    from systolix.onnxrt import session

    path = Path(onnx_path)
    sess = session(read_member(path.parent, path.name, "host segment", str(path), "host subgraph"),
                   source=str(path), error=ArtifactError, threads=1, what="this host segment")
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
        if inp.type == "tensor(float)":
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
        elif inp.type == "tensor(double)":
            feeds[inp.name] = rng.standard_normal(shape)
        else:
            feeds[inp.name] = np.zeros(shape, dtype=np.int64 if "int64" in inp.type else np.int32)
    for _ in range(2):
        sess.run(None, feeds)
    times = []
    started = time.perf_counter()
    while len(times) < repeats and (time.perf_counter() - started < budget_s or len(times) < 3):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def estimate_partitioned(tmodel_path: str | Path, board: Board, time_host: bool = True) -> tuple[Estimate, list[dict]]:
    """One frame of a partitioned model: its segments run one after the other.

    Returns the combined estimate (cycles, busy clocks, I/O and MACs summed; layers
    concatenated, named ``segment/layer``; ``host_segments_ms`` the host segments' sum) and one
    entry per segment (``kind``, ``name``, for accelerator segments its own ``estimate``, for
    host segments ``host_ms``). Host segments run on the CPU under onnxruntime: with
    ``time_host`` each is timed by ``time_host_segment`` (this machine's core; the entries' note
    says so), without it they count 0 ms and the note says they are not timed.
    """
    path = Path(tmodel_path)
    segments = segment_manifests(path)
    if segments is None:
        raise ArtifactError(f"{path}: not a partitioned model (no systolix.segments)")
    parts: list[dict] = []
    estimates: list[Estimate] = []
    for seg in segments:
        if seg["kind"] == "host":
            ms = time_host_segment(path.parent / seg["onnx"]) if time_host else 0.0
            parts.append({"kind": "host", "name": seg.get("onnx", ""), "nodes": seg.get("nodes", []),
                          "estimate": None, "host_ms": ms,
                          "note": HOST_TIMING_NOTE if time_host else "runs on the host CPU (onnxruntime): not timed"})
            continue
        sub = path.parent / seg["tmodel"]
        if TModel.load(sub).partitioned:
            raise ArtifactError(f"{path}: segment {seg['tmodel']!r} is itself partitioned; an accelerator segment is one program")
        e = estimate(sub, board)
        estimates.append(e)
        parts.append({"kind": "accelerator", "name": seg["tmodel"], "nodes": seg.get("nodes", []), "estimate": e})
    if not estimates:
        raise SystolixError(f"{path}: every segment runs on the host; there is nothing for the accelerator to time")
    first = estimates[0]
    layers: list[LayerEstimate] | None = []
    for part, e in ((p, p["estimate"]) for p in parts if p["estimate"] is not None):
        if e.layers is None:
            layers = None
            break
        stem = part["name"].removesuffix(".tmodel")
        layers.extend(LayerEstimate(f"{stem}/{l.name}", l.ops, l.first, l.end, l.macs, l.cycles, l.unit_cycles,
                                    l.dram_bytes, l.weight_cycles, l.drain_cycles) for l in e.layers)
    combined = Estimate(
        board=first.board, instructions=sum(e.instructions for e in estimates),
        cycles=sum(e.cycles for e in estimates), io_scalars=sum(e.io_scalars for e in estimates),
        macs=sum(e.macs for e in estimates), macs_source=first.macs_source,
        unit_busy={u: sum(e.unit_busy[u] for e in estimates) for u in first.unit_busy},
        layers=layers, timeline=first.timeline, batch=first.batch,
        host_segments_ms=sum(p.get("host_ms", 0.0) for p in parts),
    )
    return combined, parts
