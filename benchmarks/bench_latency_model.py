"""Latency model benchmark: simulator speed (instructions per second) and the prediction table.

Run: .venv/bin/python benchmarks/bench_latency_model.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from systolix.arch import get_board  # noqa: E402
from systolix.isa.codec import DecodedProgram  # noqa: E402
from systolix.perf import load_program, simulate  # noqa: E402
from systolix.perf.fitting import prediction_table, default_resnet20_dir, fit  # noqa: E402

FIELDS = ("opcode", "flags", "op0", "op1", "op2", "addr0", "stride0", "addr1", "stride1", "size")


def tiled(program: DecodedProgram, times: int) -> DecodedProgram:
    """The program repeated back to back (a long program with realistic instruction mix)."""
    return DecodedProgram(layout=program.layout, **{f: np.tile(getattr(program, f), times) for f in FIELDS})


def speed_table(console: Console) -> None:
    root = default_resnet20_dir()
    t = Table(title="Simulator speed (after numba compilation)")
    for col in ("program", "instructions", "seconds", "instructions / s"):
        t.add_column(col, justify="left" if col == "program" else "right")
    model, program = load_program(next((root / "baseline").glob("*.tmodel")))
    board = get_board("zcu104").with_architecture(model.arch)
    simulate(program, board)  # compile
    for label, prog in (("ResNet-20 baseline", program), ("ResNet-20 baseline x 20 (1.0 M)", tiled(program, 20)),
                        ("ResNet-20 baseline x 100 (5.0 M)", tiled(program, 100))):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            simulate(prog, board)
            best = min(best, time.perf_counter() - t0)
        t.add_row(label, f"{len(prog):,}", f"{best:.3f}", f"{len(prog) / best:,.0f}")
    # A real whole network: our compile of ResNet-50 v2 for the Ultra96-V2 (16x16), simulated and
    # estimated whole (the estimate adds the per-layer table from the layer map).
    import tempfile

    from systolix.compiler import compile_model
    from systolix.models import build_cached
    from systolix.perf import estimate

    u96 = get_board("ultra96-v2")
    with console.status("compiling ResNet-50 v2 for the Ultra96-V2 (about 20 s)"):
        compiled = compile_model(build_cached("resnet50v2"), u96.architecture, name="resnet50v2")
    with tempfile.TemporaryDirectory() as tmp:
        path = compiled.save(tmp)
        model, r50 = load_program(path)
        board = u96.with_architecture(model.arch)
        for label, run in (("ResNet-50 v2, our compile, 16x16: simulate", lambda: simulate(r50, board)),
                           ("ResNet-50 v2, our compile, 16x16: estimate with layers", lambda: estimate(path, u96))):
            run()
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - t0)
            t.add_row(label, f"{len(r50):,}", f"{best:.3f}", f"{len(r50) / best:,.0f}")
    console.print(t)


def predictions(console: Console) -> None:
    params = fit()
    console.print(f"fit: dram_request_ns = {params['dram_request_ns']}, host_ns_per_scalar = {params['host_ns_per_scalar']}")
    t = Table(title="The fitted latency model on Tensil's ResNet-20 programs, real ZCU104 at 100 MHz")
    for col in ("program", "bus", "predicted fps", "measured fps", "error", "bound"):
        t.add_column(col, justify="left" if col in ("program", "bound") else "right", no_wrap=True)
    for r in prediction_table():
        t.add_row(r.point.directory + "/" + (" (fit)" if r.fitted_on else ""), str(r.estimate.board.dram_bus_bits),
                  f"{r.predicted_fps:.1f}", f"{r.point.measured_fps:.2f}", f"{r.error:+.1%}", r.estimate.bound)
    console.print(t)


if __name__ == "__main__":
    console = Console(width=120)
    speed_table(console)
    predictions(console)
