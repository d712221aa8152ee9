"""The benchmark tables of ``systolix bench``, one function per table.

Table 1 (``models_table``) compiles the three models of Tensil's published benchmark table
(random weights, from ``systolix.models``) for its three boards and puts our predicted latency
next to the published figures. Table 2 (``zcu104_table``) puts
Tensil's real ZCU104 ResNet-20 programs, our own compile of ResNet-20 v2 for the same
architectures and strategies, and the frame rates measured on the board side by side, all
under the same fitted latency model. ``tensil_programs_table`` is the prediction table alone.
"""

from __future__ import annotations

import datetime as _dt
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from systolix.arch import get_board
from systolix.errors import SystolixError
from systolix.perf.fitting import prediction_table
from systolix.perf.estimate import Estimate, estimate, estimate_partitioned

# Tensil's published benchmark table: its latency
# (ms) and frame rate per board. They come from Tensil's serial latency model, not from
# hardware (``../shared/notes/tensil-formats.md``). The table's headings are lost; the three
# tables are, in order, ResNet-20 v2 (CIFAR), YOLOv4-tiny (labelled "ImageNet") and
# ResNet-50 v2 (ImageNet): ResNet-50 is the heaviest (3.5 GMAC against 0.74 for YOLOv4-tiny
# at 192), so it is the slowest table.
PUBLISHED_FIGURES: dict[str, dict[str, tuple[float, float]]] = {
    "resnet20v2": {"arty-a7-35": (21, 48), "pynq-z1": (14, 71), "ultra96-v2": (4, 250)},
    "yolov4_tiny": {"arty-a7-35": (175, 5.7), "pynq-z1": (112, 8.9), "ultra96-v2": (36, 28)},
    "resnet50v2": {"arty-a7-35": (1969, 0.5), "pynq-z1": (833, 1.2), "ultra96-v2": (260, 3.8)},
}
BENCH_MODELS = ("resnet20v2", "resnet50v2", "yolov4_tiny")
BENCH_BOARDS = ("arty-a7-35", "pynq-z1", "ultra96-v2")
MODEL_TITLES = {"resnet20v2": "ResNet-20 v2", "resnet50v2": "ResNet-50 v2", "yolov4_tiny": "YOLOv4-tiny"}
MODELS_CAPTION = ("ResNet-20 v2: CIFAR-10, 32x32x3; ResNet-50 v2: ImageNet, 224x224x3; YOLOv4-tiny: 192x192x3 up to "
                  "its two heads. Random weights; compiled with strategy local-isolated; published = Tensil's published "
                  "figures (Tensil's serial model); compute bound = useful MACs / N^2 / clock. Batch 4: one program "
                  "running four frames (systolix compile --batch 4), fps = 4 / its latency, host I/O included.")
#: The batch of the throughput column of table 1.
THROUGHPUT_BATCH = 4

# Table 2's configurations: (architecture, strategy, board, Tensil's program directory or
# None, measured label in expected.json or None). Tensil's ``baseline/`` is its default
# strategy on the zcu104 architecture; the ``ultra_ram*`` programs are its four strategies on
# zcu104_uram. Our compiler has the same four strategies, so every architecture gets all four.
ZCU104_CONFIGS: tuple[tuple[str, str, str, str | None], ...] = (
    ("zcu104", "local-isolated", "zcu104", "baseline"),
    ("zcu104", "local-isolated", "zcu104-512", "baseline"),
    ("zcu104", "local-vars", "zcu104", None),
    ("zcu104", "local-consts", "zcu104", None),
    ("zcu104", "local-vars-and-consts", "zcu104", None),
    ("zcu104_uram", "local-isolated", "zcu104", "ultra_ram"),
    ("zcu104_uram", "local-vars", "zcu104", "ultra_ram_local_vars"),
    ("zcu104_uram", "local-consts", "zcu104", "ultra_ram_local_consts"),
    ("zcu104_uram", "local-vars-and-consts", "zcu104", "ultra_ram_local_vars_and_consts"),
)

# progress(description, done, total) while a compile runs (done/total count the layers; 0, 0 at its start).
Progress = Callable[[str, int, int], None]


def provenance() -> dict[str, str]:
    """Date (UTC) and short commit the tables were produced at ("unknown" outside a checkout;
    "+dirty" when tracked files differ from that commit, so the tables are not its own)."""
    commit = "unknown"
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5, cwd=here)
        if out.returncode == 0 and out.stdout.strip():
            commit = out.stdout.strip()
            # Read-only check of tracked files against HEAD (exit 1: they differ).
            diff = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], capture_output=True, timeout=10, cwd=here)
            if diff.returncode == 1:
                commit += "+dirty"
    except (OSError, subprocess.SubprocessError):
        pass
    return {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit}


def tensil_programs_table(resnet20_dir: Path | None = None) -> list[dict[str, Any]]:
    """Tensil's five ResNet-20 programs (and the 512-bit run): predicted against measured."""
    rows = []
    for r in prediction_table(resnet20_dir):
        e = r.estimate
        rows.append({
            "program": f"Tensil {r.point.directory}/",
            "directory": r.point.directory,
            "board": e.board.name,
            "bus_bits": e.board.dram_bus_bits,
            "instructions": e.instructions,
            "latency_ms": e.latency_ms,
            "accelerator_ms": e.accelerator_ms,
            "host_ms": e.host_ms,
            "fps": e.fps,
            "measured_fps": r.point.measured_fps,
            "error": r.error,
            "mac_efficiency": e.mac_efficiency,
            "bound": e.bound,
            "fitted_on": r.fitted_on,
        })
    return rows


@dataclass
class CompiledEstimate:
    """One compile of a model for an architecture, estimated on a board (or why it failed)."""

    estimate: Estimate | None
    compile_seconds: float
    error: str | None = None
    programs: int = 1  # accelerator programs run in a row (more than one: constants past DRAM1)


def compile_and_estimate(model, arch, board_name: str, strategy: str = "local-isolated",
                         progress: Progress | None = None, label: str = "", batch: int = 1) -> CompiledEstimate:
    """Compile ``model`` (ONNX) for ``arch`` and estimate one frame on ``board_name`` (``batch``:
    one run of a program that takes that many frames).

    A model the compiler refuses (does not fit the memories, an op it cannot run) gives
    ``error`` with the compiler's message instead of raising; so does a model the compiler
    splits between accelerator and host, whose host part the latency model cannot time. A model
    cut into several accelerator programs (constants past DRAM1) is timed as all of them in a
    row, the host copying each boundary tensor (counted as host I/O).
    """
    from systolix.compiler import compile_model

    board = get_board(board_name)
    started = time.perf_counter()
    cb = None if progress is None else (lambda _seg, done, total: progress(label, done, total))
    if progress is not None:
        progress(label, 0, 0)  # a new job starts, even if it fails before its first layer
    try:
        compiled = compile_model(model, arch, strategy=strategy, progress=cb, name="bench", batch=batch, tune=board.timing)
    except SystolixError as e:
        return CompiledEstimate(None, time.perf_counter() - started, str(e))
    seconds = time.perf_counter() - started
    host = compiled.summary.host_nodes
    if host:
        return CompiledEstimate(None, seconds, f"{len(host)} node(s) run on the host ({', '.join(host[:3])}): "
                                "the latency model times the accelerator only")
    with tempfile.TemporaryDirectory(prefix="systolix-bench-") as tmp:
        path = compiled.save(tmp)
        # Constants past DRAM1 cut the model into programs run in a row: time them all.
        est = estimate_partitioned(path, board)[0] if compiled.summary.constant_cuts else estimate(path, board)
    return CompiledEstimate(est, seconds, programs=compiled.summary.constant_cuts + 1)


def compute_bound_ms(macs: int, array_size: int, clock_mhz: float) -> float:
    """The array's floor: every clock a full N x N of useful MACs."""
    return macs / (array_size * array_size * clock_mhz * 1e3)


def _estimate_fields(e: Estimate) -> dict[str, Any]:
    return {
        "instructions": e.instructions,
        "cycles": round(e.cycles, 1),
        "latency_ms": e.latency_ms,
        "accelerator_ms": e.accelerator_ms,
        "host_ms": e.host_ms,
        "fps": e.fps,
        "batch": e.batch,
        "macs": e.macs,
        "mac_efficiency": e.mac_efficiency,
        "bound": e.bound,
    }


def models_table(models: tuple[str, ...] = BENCH_MODELS, boards: tuple[str, ...] = BENCH_BOARDS,
                 progress: Progress | None = None, throughput_batch: int = THROUGHPUT_BATCH) -> list[dict[str, Any]]:
    """Table 1: each benchmark model compiled for each board, against Tensil's published figures;
    latency at batch 1 and throughput of a batch-``throughput_batch`` program (0: not compiled)."""
    from systolix.models import build_cached

    rows = []
    for name in models:
        onnx_model = build_cached(name)
        for board_name in boards:
            board = get_board(board_name)
            n = board.architecture.array_size
            published_ms, published_fps = PUBLISHED_FIGURES.get(name, {}).get(board_name, (None, None))
            r = compile_and_estimate(onnx_model, board.architecture, board_name, progress=progress,
                                     label=f"{name} on {board_name}")
            row: dict[str, Any] = {
                "model": name, "title": MODEL_TITLES.get(name, name), "board": board_name, "array_size": n,
                "clock_mhz": board.clock_mhz, "published_latency_ms": published_ms, "published_fps": published_fps, "variant": None,
                "compile_seconds": round(r.compile_seconds, 2), "error": r.error, "programs": r.programs,
            }
            if r.estimate is not None:
                e = r.estimate
                bound_ms = compute_bound_ms(e.macs, n, board.clock_mhz)
                row.update(_estimate_fields(e))
                row["compute_bound_ms"] = bound_ms
                row["share_of_bound"] = bound_ms / e.latency_ms
            if throughput_batch > 1 and r.estimate is not None:
                row["batched"] = _batched(onnx_model, board, name, throughput_batch, progress)
            rows.append(row)
            if r.error and "vectors of DRAM" in r.error:
                rows.append(_with_larger_dram(onnx_model, name, board_name, progress))
    return rows


def _batched(onnx_model, board, name: str, batch: int, progress: Progress | None) -> dict[str, Any]:
    """The throughput of one program running ``batch`` frames (or why it does not compile)."""
    r = compile_and_estimate(onnx_model, board.architecture, board.name, progress=progress,
                             label=f"{name} on {board.name}, batch {batch}", batch=batch)
    out: dict[str, Any] = {"batch": batch, "compile_seconds": round(r.compile_seconds, 2), "error": r.error,
                           "programs": r.programs}
    if r.estimate is not None:
        out.update(_estimate_fields(r.estimate))
    return out


# When a model's constants or activations overflow a preset's DRAM depths (ResNet-50's 25.6 M
# weights on the 8x8 and 12x12 presets' 1 M vectors), the bench also compiles it with both
# depths raised to this many vectors: 4 M vectors of 8 or 12 16-bit scalars are 64 or 96 MB a
# region, which the Arty A7-35's 256 MB and the Pynq Z1's 512 MB of DDR3 hold. Only the
# address fields grow; the array and its memories on chip stay as they are.
LARGER_DRAM_DEPTH = 4 * 1024 * 1024


def _with_larger_dram(onnx_model, name: str, board_name: str, progress: Progress | None) -> dict[str, Any]:
    board = get_board(board_name)
    arch = board.architecture.model_copy(update={"dram0_depth": LARGER_DRAM_DEPTH, "dram1_depth": LARGER_DRAM_DEPTH})
    board = board.with_architecture(arch)
    n = arch.array_size
    published_ms, published_fps = PUBLISHED_FIGURES.get(name, {}).get(board_name, (None, None))
    r = compile_and_estimate(onnx_model, arch, board_name, progress=progress,
                             label=f"{name} on {board_name} (larger DRAM)")
    row: dict[str, Any] = {
        "model": name, "title": MODEL_TITLES.get(name, name), "board": board_name, "array_size": n,
        "clock_mhz": board.clock_mhz, "published_latency_ms": published_ms, "published_fps": published_fps,
        "variant": f"DRAM0 and DRAM1 depths raised to {LARGER_DRAM_DEPTH:,} vectors",
        "compile_seconds": round(r.compile_seconds, 2), "error": r.error, "programs": r.programs,
    }
    if r.estimate is not None:
        e = r.estimate
        row.update(_estimate_fields(e))
        row["compute_bound_ms"] = compute_bound_ms(e.macs, n, board.clock_mhz)
        row["share_of_bound"] = row["compute_bound_ms"] / e.latency_ms
    return row


def zcu104_table(resnet20_dir: Path | None = None, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Table 2: Tensil's ZCU104 ResNet-20 programs and our compile of ResNet-20 v2 for the same
    architecture and strategy, under the same fitted latency model, with the measured frame rate."""
    from systolix.arch import get_architecture
    from systolix.models import build_cached

    tensil = {(r["directory"], r["board"]): r for r in tensil_programs_table(resnet20_dir)}
    onnx_model = build_cached("resnet20v2")
    rows = []
    for arch_name, strategy, board_name, directory in ZCU104_CONFIGS:
        t = tensil.get((directory, board_name)) if directory else None
        r = compile_and_estimate(onnx_model, get_architecture(arch_name), board_name, strategy, progress,
                                 f"resnet20v2 {arch_name} {strategy} on {board_name}")
        ours: dict[str, Any] = {"compile_seconds": round(r.compile_seconds, 2), "error": r.error}
        if r.estimate is not None:
            ours.update(_estimate_fields(r.estimate))
        rows.append({
            "architecture": arch_name, "strategy": strategy, "board": board_name,
            "bus_bits": get_board(board_name).dram_bus_bits,
            "measured_fps": t["measured_fps"] if t else None,
            "tensil": None if t is None else {k: t[k] for k in (
                "program", "instructions", "latency_ms", "fps", "error", "mac_efficiency", "bound", "fitted_on")},
            "systolix": ours,
        })
    return rows
