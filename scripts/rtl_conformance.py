"""Tensil's five ResNet-20 programs on the 32x32 RTL, all ten CIFAR images, against the real boards.

    .venv/bin/python scripts/rtl_conformance.py [--threads 2] [--program NAME ...]

For each program: the ten golden classes, the two outputs real boards printed (images 7 and 9,
bit for bit), the emulator's outputs bit for bit on all ten images, and the RTL's clock count
next to the ``rtl`` timing model's. The slow tests in ``tests/rtl/test_programs.py`` run the
printed images of every program and the ten images of the baseline; this runs everything
(about 50 co-simulations of ~10 s, after two 32x32 models are built).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import systolix
from systolix.artifacts import read_vectors_csv
from systolix.perf.rtl_timing import simulate_rtl

RESNET20 = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "tensil" / "resnet20_zcu104"
PROGRAMS = ["baseline", "ultra_ram", "ultra_ram_local_vars", "ultra_ram_local_consts", "ultra_ram_local_vars_and_consts"]
ONE = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--program", nargs="*", default=PROGRAMS)
    args = parser.parse_args()
    console = Console(width=150)
    expected = json.loads((RESNET20 / "expected.json").read_text())
    images = read_vectors_csv(RESNET20 / "cifar_10x32.csv", 32).reshape(10, 1024, 32)
    table = Table(title="Tensil's ResNet-20 programs on the 32x32 RTL (10 CIFAR images each)")
    for col in ("program", "golden classes", "boards' printed outputs", "= emulator", "RTL clocks", "predicted",
                "co-sim s/image"):
        table.add_column(col, justify="left" if col == "program" else "right")
    failures = 0
    for name in args.program:
        (tmodel,) = sorted((RESNET20 / name).glob("*.tmodel"))
        model = systolix.load(tmodel)
        started = time.perf_counter()
        rtl = model.run_detailed({"x:0": images}, batch=True, engine="rtl", threads=args.threads,
                                 rtl={"progress": console.log})
        wall = time.perf_counter() - started
        emulated = model.run_detailed({"x:0": images}, batch=True)
        raw = rtl.raw_outputs["Identity:0"][:, 0, :10]
        classes = raw.argmax(axis=1).tolist() == expected["golden_classes"]
        boards = all(raw[b["image_index"]].tolist() == (np.array(b["first_10_of_Identity:0"]) * ONE).astype(int).tolist()
                     for b in expected["hardware_outputs"])
        same = np.array_equal(rtl.raw_outputs["Identity:0"], emulated.raw_outputs["Identity:0"])
        cycles = sorted(set(rtl.result.cycles))
        predicted = int(simulate_rtl(model.program, model.arch).cycles)
        failures += not (classes and boards and same and cycles == [predicted])
        per_image = np.mean([r.seconds for r in rtl.extra["emulator"].runs])
        table.add_row(name, "10 of 10" if classes else "NO", "both, bit for bit" if boards else "NO",
                      "yes" if same else "NO", ", ".join(f"{c:,}" for c in cycles), f"{predicted:,}", f"{per_image:.1f}")
        console.log(f"{name}: {wall:.0f} s")
    console.print(table)
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
