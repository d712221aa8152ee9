"""The Tandem unit in the emulator: its numba kernel against its NumPy definition.

    .venv/bin/python benchmarks/bench_tandem_emulator.py

A loop of 1,000 iterations over four instructions (a multiply, an add, a lane sum, a move back to
the accumulators: 4,000 instructions executed) on 1 and 16 inputs, run by ``TandemUnit.step``
(the definition: one Python call per instruction and iteration) and by ``run_stretch`` (the
emulator's path, ``systolix.emulator.tandem_fast``); the results are checked equal.
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from systolix.arch import ARCHITECTURES
from systolix.emulator.tandem import TandemUnit
from systolix.isa import InstructionLayout, decode_program
from systolix.isa.assembly import assemble

ARCH = ARCHITECTURES["ultra96v2_tandem"]
LISTING = """TIter base acc.0 = 0
TIter stride acc.0 level=0 = 1
TIter base interim.0 = 0
TIter stride interim.0 level=0 = 1
TLoop level=0 iterations=1000 body=4
TAlu Mul interim.0 <- acc.0, acc.0
TAlu Add interim.0 <- interim.0, acc.0
TPermute LaneSum interim.0 <- interim.0
TAlu Move acc.0 <- interim.0
"""
EXECUTED = 4000


def main() -> None:
    layout = InstructionLayout.of(ARCH)
    program = decode_program(assemble(LISTING, layout), layout)
    table = Table(title=f"Tandem unit: {EXECUTED:,} instructions executed")
    for col in ("inputs", "definition (NumPy) us/instr.", "emulator (numba) us/instr.", "speed-up", "bit-exact"):
        table.add_column(col, justify="right")
    for batch in (1, 16):
        rng = np.random.default_rng(0)
        mems = {"acc": rng.integers(-300, 300, (batch, 1024, ARCH.array_size)).astype(np.int64),
                "local": np.zeros((batch, 16, ARCH.array_size), np.int64)}
        ref_mems = {k: v.copy() for k, v in mems.items()}
        ref = TandemUnit(ARCH, batch)
        started = time.perf_counter()
        i = 0
        while i < len(program):
            i = ref.step(program, i, ref_mems)
        t_ref = time.perf_counter() - started
        TandemUnit(ARCH, batch).run_stretch(program, 0, len(program), {k: v.copy() for k, v in mems.items()})  # compile
        fast_mems = {k: v.copy() for k, v in mems.items()}
        fast = TandemUnit(ARCH, batch)
        started = time.perf_counter()
        fast.run_stretch(program, 0, len(program), fast_mems)
        t_fast = time.perf_counter() - started
        same = all(np.array_equal(ref_mems[k], fast_mems[k]) for k in mems) and np.array_equal(ref.interim, fast.interim)
        table.add_row(str(batch), f"{t_ref / EXECUTED * 1e6:.1f}", f"{t_fast / EXECUTED * 1e6:.2f}", f"x{t_ref / t_fast:.0f}",
                      "yes" if same else "NO")
    Console().print(table)


if __name__ == "__main__":
    main()
