"""FPGA resources of the generated TCU for every preset on its board (the README's table).

    .venv/bin/python scripts/rtl_resources.py [--markdown] [--only NAME ...]

Each row is one ``systolix rtl --arch ARCH --synth FAMILY`` (Yosys out of context, cached under
``$SYSTOLIX_CACHE``): a large array takes Yosys's WebAssembly build an hour or more the first time.
UltraScale+ designs with UltraRAM on their board put large memories in it (``-uram``), as the
``zcu104_uram`` preset's name says Tensil's design does; ECP5 rows also give nextpnr's fmax.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from systolix.arch import ARCHITECTURES, BOARDS
from systolix.rtl import RtlConfig
from systolix.rtl.synth import BUDGETS, synthesize

# (label, architecture, family, board whose FPGA it is checked against, UltraRAM)
ROWS = [
    ("cmoda7", ARCHITECTURES["cmoda7"], "xilinx7", "cmod-a7-35t", False),
    ("arty-a7-35 (board preset)", BOARDS["arty-a7-35"].architecture, "xilinx7", "arty-a7-35", False),
    ("artya7100t", ARCHITECTURES["artya7100t"], "xilinx7", "arty-a7-100t", False),
    ("pynqz1", ARCHITECTURES["pynqz1"], "xilinx7", "pynq-z1", False),
    ("pynq-z1 (board preset, 12x12)", BOARDS["pynq-z1"].architecture, "xilinx7", "pynq-z1", False),
    ("ultra96v2", ARCHITECTURES["ultra96v2"], "ultrascale", "ultra96-v2", False),
    ("zcu104", ARCHITECTURES["zcu104"], "ultrascale", "zcu104", True),
    ("zcu104_uram", ARCHITECTURES["zcu104_uram"], "ultrascale", "zcu104", True),
    ("cmoda7", ARCHITECTURES["cmoda7"], "ecp5", "ecp5-85k", False),
    ("pynqz1", ARCHITECTURES["pynqz1"], "ecp5", "ecp5-85k", False),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--only", nargs="*", help="labels to run (default: all)")
    args = parser.parse_args()
    console = Console(width=160)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    title = f"Resources on each preset's board (Yosys, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d} UTC, commit {commit})"
    table = Table(title=title)
    columns = ("architecture", "array", "family", "board (part)", "LUT", "FF", "DSP", "BRAM36", "URAM", "fmax MHz", "fits",
               "synthesis s")
    for col in columns:
        table.add_column(col, justify="left" if col in ("architecture", "family", "board (part)", "fits") else "right")
    for label, arch, family, board, uram in ROWS:
        if args.only and label not in args.only:
            continue
        name = label.split(" ")[0].replace("-", "_")
        started = time.perf_counter()
        result = synthesize(RtlConfig(arch, name=name), family, console.log, uram=uram)
        budget = BUDGETS[board]
        over = result.overflows(budget)

        def cell(key: str) -> str:
            used, have = getattr(result, key), getattr(budget, key)
            return f"{used:,g} ({used / have:.0%})" if have else f"{used:,g}"

        n = arch.array_size
        table.add_row(label, f"{n}x{n}", family, f"{board} ({budget.part})", cell("lut"), cell("ff"), cell("dsp"),
                      cell("bram36"), cell("uram"), f"{result.fmax_mhz:.0f}" if result.fmax_mhz else "-",
                      "yes" if not over else "no: " + "; ".join(over), f"{result.seconds:,.0f}")
        console.log(f"{label} {family}: {time.perf_counter() - started:.0f} s")
    if args.markdown:
        print(f"\n**{title}**\n")
        print("| " + " | ".join(columns) + " |")
        print("|" + "|".join(" --- " if c.justify == "left" else " ---: " for c in table.columns) + "|")
        for i in range(table.row_count):
            print("| " + " | ".join(str(c._cells[i]) for c in table.columns) + " |")
    else:
        console.print(table)


if __name__ == "__main__":
    main()
