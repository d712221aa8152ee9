"""Emulator speed on Tensil's ZCU104 ResNet-20 program over the ten CIFAR images, bit-exact.

    .venv/bin/python benchmarks/bench_emulator.py            # numba emulator + plain NumPy for comparison
    .venv/bin/python benchmarks/bench_emulator.py --no-numpy # numba emulator only

Every timed run is checked against ``expected.json``: the ten golden classes and the two boards'
printed outputs, as raw FP16BP8 integers. The plain-NumPy path is the emulator's specification,
``systolix.emulator.reference`` (one Python step per instruction, NumPy inside each).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

PROJECT = Path(__file__).resolve().parents[1]
RESNET20 = PROJECT.parent / "shared" / "conformance" / "tensil" / "resnet20_zcu104"
MODEL = RESNET20 / "baseline" / "resnet20v2_cifar_onnx_zcu104.tmodel"
CSV = RESNET20 / "cifar_10x32.csv"
console = Console()


def bit_exact(raw_logits: np.ndarray, expected: dict) -> bool:
    """``raw_logits`` [10, 10] raw integers against the golden classes and both boards."""
    if raw_logits.argmax(axis=1).tolist() != expected["golden_classes"]:
        return False
    for board in expected["hardware_outputs"]:
        printed = np.rint(np.array(board["first_10_of_Identity:0"]) * 256).astype(np.int64)
        if raw_logits[board["image_index"]].tolist() != printed.tolist():
            return False
    return True


def main(
    repeats: int = typer.Option(3, help="Timed batched passes (after one warm-up)."),
    numpy_path: bool = typer.Option(True, "--numpy/--no-numpy", help="Also time the NumPy specification, systolix.emulator.reference (about 20 s)."),
) -> None:
    import systolix
    from systolix.artifacts import read_vectors_csv

    expected = json.loads((RESNET20 / "expected.json").read_text())
    images = read_vectors_csv(CSV, 32).reshape(10, 1024, 32)
    model = systolix.load(MODEL)
    rows = []

    started = time.perf_counter()
    first = model.run_detailed({"x:0": images})
    warm = time.perf_counter() - started
    rows.append(("numba, batch of 10, first run (loads compiled code)", warm, 10,
                 bit_exact(first.raw_outputs["Identity:0"][:, 0, :10], expected)))

    cpus = os.cpu_count() or 1
    for threads in sorted({cpus, 1}, reverse=True):
        times, exact = [], True
        for _ in range(repeats):
            started = time.perf_counter()
            run = model.run_detailed({"x:0": images}, threads=threads)
            times.append(time.perf_counter() - started)
            exact &= bit_exact(run.raw_outputs["Identity:0"][:, 0, :10], expected)
        label = f"{threads} thread{'s' if threads > 1 else ''}"
        rows.append((f"numba, batch of 10, {label} (median of {repeats})", statistics.median(times), 10, exact))

    started = time.perf_counter()
    singles = [model.run_detailed({"x:0": image}, threads=1).raw_outputs["Identity:0"][0, :, :10] for image in images]
    rows.append(("numba, one image at a time", time.perf_counter() - started, 10, bit_exact(np.stack(singles)[:, 0], expected)))

    if numpy_path:
        from systolix.emulator.reference import ReferenceTCU

        m = model.manifest
        started = time.perf_counter()
        tcu = ReferenceTCU(m.arch, 10, dram0_vectors=8192, dram1_vectors=m.consts[0].size)
        tcu.dram1[:, : m.consts[0].size] = model.constants[0][1]
        tcu.dram0[:, :1024] = tcu.to_fixed(images)
        tcu.run(model.program)
        seconds = time.perf_counter() - started
        out = m.outputs[0]
        rows.append(("NumPy specification (systolix.emulator.reference), batch of 10", seconds, 10, bit_exact(tcu.dram0[:, out.base, :10], expected)))

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    table = Table(title=f"Emulator: Tensil ResNet-20 (ZCU104 baseline, {len(model.program):,} instructions), "
                        f"10 CIFAR images; {cpus} CPUs, load average {load:.1f} at the end")
    for col in ("path", "seconds", "images/s", "bit-exact"):
        table.add_column(col, justify="left" if col == "path" else "right")
    for name, seconds, count, ok in rows:
        table.add_row(name, f"{seconds:.3f}", f"{count / seconds:.1f}", "yes" if ok else "[red]NO[/]")
    console.print(table)
    if not all(ok for *_, ok in rows):
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
