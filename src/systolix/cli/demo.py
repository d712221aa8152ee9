"""``systolix demo``: the main job on a built-in example."""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer

from systolix.cli import app
from systolix.cli.common import console


def _example_program():
    """A small program of our own: load a weight block, multiply 4 vectors, ReLU, store."""
    from systolix.isa import SIMD, DataFlow, DataMove, LoadWeights, MatMul, NoOp, SimdOp

    return [
        DataMove(DataFlow.DRAM1_TO_LOCAL, local_address=0, address=0, size=8),  # bias + 8 weight rows
        DataMove(DataFlow.DRAM0_TO_LOCAL, local_address=9, address=0, size=3),  # 4 input vectors
        LoadWeights(local_address=0, size=8),
        MatMul(local_address=9, acc_address=0, size=3),
        SIMD(SimdOp.ZERO, dest=1),  # reg1 = 0, the other operand of ReLU's max
        *[SIMD(SimdOp.MAX, left=0, right=1, dest=0, read_address=i, write_address=i, read=True, write=True) for i in range(4)],
        NoOp(),
        DataMove(DataFlow.ACC_TO_LOCAL, local_address=13, address=0, size=3),
        DataMove(DataFlow.LOCAL_TO_DRAM0, local_address=13, address=4, size=3),
    ]


@app.command()
def demo(
    workdir: Path = typer.Option(None, "--workdir", help="Keep the files here instead of a temporary folder."),
) -> None:
    """Run the main job on a built-in example and print what it does."""
    from systolix.artifacts import write_bytes_atomic, write_text_atomic
    from systolix.cli.foundation import archs
    from systolix.isa import InstructionLayout, decode_program, encode_program
    from systolix.isa.assembly import assemble, format_program

    archs()
    with tempfile.TemporaryDirectory() as tmp:
        out = workdir or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        from systolix.arch import ARCHITECTURES

        layout = InstructionLayout.of(ARCHITECTURES["pynqz1"])
        program = _example_program()
        listing = format_program(program, "example: one 8x8 weight block, 4 vectors, ReLU, store")
        write_text_atomic(out / "example.s", listing)
        data = assemble(listing, layout, "example.s")
        assert data == encode_program(program, layout)
        write_bytes_atomic(out / "example.tprog", data)
        console.rule("example program for pynqz1 (assembled, then disassembled)")
        console.print(f"{len(program)} instructions, {len(data)} bytes ({layout.instruction_bytes} bytes each)")
        console.print(format_program(decode_program(data, layout, "example.tprog")), end="", markup=False)
