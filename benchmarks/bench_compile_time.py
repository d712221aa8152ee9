"""Compile-time benchmark: ResNet-20 v2 and ResNet-50 v2 (and more) for ultra96v2.

    .venv/bin/python benchmarks/bench_compile_time.py [--arch ultra96v2] [--repeat 3] [MODEL ...]

Targets (issue 4): ResNet-20 v2 under 5 s and ResNet-50 v2 under 60 s on the project machine.
Building the model (random calibrated weights) is not counted; compiling is everything from the
ONNX model in memory to the files' bytes, as ``systolix.compile`` does it (by default with gains
estimated from the model itself). The last columns compile without them (``estimate_gains=False``),
in the same loop, and give the default's cost over that in CPU time (issue 20: at most ~1.3x;
CPU time, as wall time on a shared machine varies more than the difference).

    .venv/bin/python benchmarks/bench_compile_time.py --repeat 3 resnet20v2 yolov4_tiny
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

import systolix.models as M
from systolix.compiler import compile_model

TARGETS = {"resnet20v2": 5.0, "resnet50v2": 60.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet20v2", "resnet50v2"])
    parser.add_argument("--arch", default="ultra96v2")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    console = Console(width=max(120, Console().width))
    table = Table(title=f"Compile time on {args.arch} (best and median of {args.repeat})")
    for col in ("model", "best (s)", "median (s)", "target (s)", "layers", "instructions", "consts (vectors)", "MACs (M)",
                "no gains: best (s)", "CPU s: default / no gains"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name in args.models:
        model = M.build(name)
        times, plain_times, cpu, plain_cpu = [], [], [], []
        compiled = None
        for _ in range(args.repeat):
            started, cpu_started = time.perf_counter(), time.process_time()
            compiled = compile_model(model, args.arch)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
            started, cpu_started = time.perf_counter(), time.process_time()
            compile_model(model, args.arch, estimate_gains=False)
            plain_times.append(time.perf_counter() - started)
            plain_cpu.append(time.process_time() - cpu_started)
        s = compiled.summary
        target = TARGETS.get(name)
        best = min(times)
        verdict = "" if target is None else (" [green]ok[/]" if best < target else " [red]over[/]")
        table.add_row(name, f"{best:.2f}{verdict}", f"{statistics.median(times):.2f}", f"{target:.0f}" if target else "-",
                      str(len(s.layers)), f"{s.instructions:,}", f"{s.consts_vectors:,}", f"{s.macs / 1e6:.1f}",
                      f"{min(plain_times):.2f}", f"{min(cpu):.2f} / {min(plain_cpu):.2f} = x{min(cpu) / min(plain_cpu):.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
