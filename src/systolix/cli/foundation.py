"""Foundation commands: ``archs``, ``disasm``, ``asm``, ``info``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from systolix.cli import app
from systolix.cli.common import console, require_file, resolve_arch
from systolix.errors import SystolixError


def _depth(n: int) -> str:
    """A depth in vectors, exact but short: 2,097,152 -> 2Mi, 20,480 -> 20Ki."""
    for unit, size in (("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n:,}"


@app.command()
def archs() -> None:
    """List the built-in architectures and boards."""
    from systolix.arch import ARCHITECTURE_NOTES, ARCHITECTURES, BOARDS
    from systolix.isa import InstructionLayout

    t = Table(title="Architectures (Tensil's .tarch presets, and ours with the Tandem unit; depths in vectors, Ki = 1024)")
    for col in ("name", "type", "array", "local", "acc", "DRAM0", "DRAM1", "instr.", "Tandem"):
        t.add_column(col, justify="left" if col in ("name", "type") else "right", no_wrap=True)
    for name, a in ARCHITECTURES.items():
        t.add_row(name, a.data_type.name, f"{a.array_size}x{a.array_size}", _depth(a.local_depth),
                  _depth(a.accumulator_depth), _depth(a.dram0_depth), _depth(a.dram1_depth),
                  f"{InstructionLayout.of(a).instruction_bytes} B", "yes" if a.tandem is not None else "-")
    console.print(t)
    for name, note in ARCHITECTURE_NOTES.items():
        console.print(f"  [bold]{name}[/]: {note}")
    console.print()
    b = Table(title="Boards (an architecture with a clock and a DRAM interface)")
    for col in ("name", "array", "MHz", "bus bits", "peak GB/s", "local", "acc"):
        b.add_column(col, justify="left" if col == "name" else "right", no_wrap=True)
    for name, board in BOARDS.items():
        a = board.architecture
        b.add_row(name, f"{a.array_size}x{a.array_size}", f"{board.clock_mhz:g}", str(board.dram_bus_bits),
                  f"{board.dram_peak_gbps:g}", _depth(a.local_depth), _depth(a.accumulator_depth))
    console.print(b)
    for name, board in BOARDS.items():
        console.print(f"  [bold]{name}[/]: {board.description}")


def _read_program(path: Path, arch):
    from systolix.artifacts.files import read_bytes
    from systolix.isa import InstructionLayout, decode_program

    require_file(path, "program file")
    return decode_program(read_bytes(path, "program file"), InstructionLayout.of(arch), str(path))


@app.command()
def disasm(
    program: Path = typer.Argument(..., help="A .tprog file."),
    arch: str = typer.Option(..., "--arch", "-a", help="Architecture: a preset name or a .tarch path."),
    output: Path = typer.Option(None, "--output", "-o", help="Write the listing here instead of stdout."),
) -> None:
    """Print a program as assembly text, one instruction a line."""
    from systolix.artifacts import write_text_atomic
    from systolix.isa.assembly import format_program

    architecture = resolve_arch(arch)
    prog = _read_program(program, architecture)
    header = (
        f"{program.name}: {len(prog)} instructions of {prog.layout.instruction_bytes} bytes\n"
        f"arch: {architecture.data_type.name} {architecture.array_size}x{architecture.array_size}, "
        f"local {architecture.local_depth}, acc {architecture.accumulator_depth}, "
        f"dram0 {architecture.dram0_depth}, dram1 {architecture.dram1_depth}\n"
        "size = vectors - 1, as encoded"
    )
    text = format_program(prog, header)
    if output:
        write_text_atomic(output, text)
        console.print(f"wrote {len(prog)} instructions to {output}")
    else:
        import sys

        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:  # `systolix disasm ... | head` is fine
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@app.command()
def asm(
    listing: Path = typer.Argument(..., help="An assembly listing (as `systolix disasm` prints)."),
    arch: str = typer.Option(..., "--arch", "-a", help="Architecture: a preset name or a .tarch path."),
    output: Path = typer.Option(..., "--output", "-o", help="The .tprog to write."),
) -> None:
    """Assemble a listing into a .tprog."""
    from systolix.artifacts import write_bytes_atomic
    from systolix.isa import InstructionLayout
    from systolix.isa.assembly import assemble

    from systolix.artifacts.files import read_text
    from systolix.cli.common import check_output_file

    check_output_file(output, "program (.tprog)")
    architecture = resolve_arch(arch)
    require_file(listing, "listing")
    text = read_text(listing, "assembly listing")
    layout = InstructionLayout.of(architecture)
    data = assemble(text, layout, str(listing))
    write_bytes_atomic(output, data)
    console.print(f"wrote {len(data) // layout.instruction_bytes} instructions ({len(data)} bytes) to {output}")


@app.command()
def info(model: Path = typer.Argument(..., help="A .tmodel manifest.")) -> None:
    """Print a model's manifest, program size and instruction mix."""
    from systolix.artifacts import TModel
    from systolix.isa import OPCODE_NAMES, InstructionLayout, Opcode, decode_program
    from systolix.isa.assembly import FLOW_ENDS

    from systolix.artifacts.files import read_member

    require_file(model, "model manifest")
    m = TModel.load(model)
    a = m.arch
    layout = InstructionLayout.of(a)
    data = read_member(model.parent, m.prog.file_name, "prog.file_name", str(model), "program", count=m.prog.size)
    prog = decode_program(data, layout, str(model.parent / m.prog.file_name))

    t = Table(title=f"{model.name}", show_header=False)
    t.add_column("key")
    t.add_column("value")
    t.add_row("name", m.name)
    t.add_row("architecture", f"{a.data_type.name}, array {a.array_size}x{a.array_size}, local {a.local_depth:,}, "
              f"accumulators {a.accumulator_depth:,}, DRAM0 {a.dram0_depth:,}, DRAM1 {a.dram1_depth:,}, "
              f"SIMD registers {a.simd_registers_depth}, strides {a.stride0_depth}/{a.stride1_depth}")
    t.add_row("program", f"{m.prog.file_name}: {m.prog.size:,} bytes, {len(prog):,} instructions of {layout.instruction_bytes} bytes")
    where = "local memory" if m.load_consts_to_local else "DRAM1"
    for c in m.consts:
        t.add_row("constants", f"{c.file_name}: {c.size:,} vectors at {where} {c.base}")
    packs = {e.name: e.pack for e in (m.extension.inputs if m.extension else []) if e.pack is not None}
    for s in m.inputs:
        pack = packs.get(s.name)
        how = f" ({pack.kind.replace('_', '-')} {pack.window[0]}x{pack.window[1]} packed)" if pack else ""
        t.add_row("input", f"{s.name}: {s.size:,} vectors at DRAM0 {s.base}{how}")
    for s in m.outputs:
        t.add_row("output", f"{s.name}: {s.size:,} vectors at DRAM0 {s.base}")
    t.add_row("load_consts_to_local", str(m.load_consts_to_local).lower())
    ext = m.extension
    if ext is not None:
        layers = ext.layers or []
        t.add_row("systolix", f"layer map of {len(layers)} layers" if layers else "extension present")
        if ext.segments:
            t.add_row("segments", ", ".join(f"{s.kind} {s.tmodel or s.onnx}" for s in ext.segments))
    console.print(t)

    mix = Table(title="Instruction mix")
    mix.add_column("instruction")
    mix.add_column("count", justify="right")
    mix.add_column("share", justify="right")
    total = max(len(prog), 1)
    for name, count in prog.opcode_counts().items():
        mix.add_row(name, f"{count:,}", f"{100 * count / total:.1f}%")
        if name == OPCODE_NAMES[Opcode.DATAMOVE]:
            for flow, n in prog.datamove_counts().items():
                src, dst = FLOW_ENDS[flow]
                label = f"  {src} -> {dst}" + (" (accumulate)" if flow == 15 else "")
                mix.add_row(label, f"{n:,}", f"{100 * n / total:.1f}%")
    mix.add_row("total", f"{len(prog):,}", "100.0%", style="bold")
    console.print(mix)
