"""Latency-model commands: ``estimate``, ``profile``, ``bench``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from systolix.cli import app
from systolix.cli.common import console, err_console, require_file
from systolix.errors import SystolixError


def _load(model: Path, arch: str | None):
    """A ``.tmodel`` and its program; an ONNX model needs the compiler."""
    from systolix.perf import load_program

    require_file(model, "model")
    if model.suffix == ".onnx":
        raise SystolixError(
            f"{model}: estimating an ONNX model needs the compiler (systolix.compiler), which this build does "
            "not have yet; compile it first and give the .tmodel"
        )
    if model.suffix != ".tmodel":
        raise SystolixError(f"{model}: expected a .tmodel (or .onnx) file")
    if arch is not None:
        raise SystolixError("--arch applies to ONNX models; a .tmodel runs on the architecture in its manifest")
    return load_program(model)


def _estimate(model: Path, board_name: str, arch: str | None):
    from systolix.arch import get_board
    from systolix.perf import estimate

    board = get_board(board_name)
    tmodel, program = _load(model, arch)
    with err_console.status(f"simulating {len(program):,} instructions on {board.name}"):
        est = estimate(program, board, model=tmodel)
    return tmodel, program, est


def print_estimate(est, title: str) -> None:
    """The estimate as rich tables."""
    from systolix.perf.simulator import UNIT_LABELS, UNITS

    n = est.board.architecture.array_size
    t = Table(title=title, show_header=False)
    t.add_column(justify="left")
    t.add_column(justify="right")
    t.add_row("board", f"{est.board.name}: {n}x{n} at {est.board.clock_mhz:g} MHz")
    t.add_row("instructions", f"{est.instructions:,}")
    t.add_row("cycles", f"{est.cycles:,.0f}")
    t.add_row("latency", f"{est.latency_ms:.3f} ms (accelerator {est.accelerator_ms:.3f} + host I/O {est.host_ms:.3f})")
    t.add_row("frames per second", f"{est.fps:.1f}")
    t.add_row("MAC efficiency", f"{est.mac_efficiency:.1%}  ({est.macs_source})")
    t.add_row("bound by", est.bound)
    console.print(t)
    u = Table(title="Unit busy share")
    for col in ("unit", "busy clocks", "share"):
        u.add_column(col, justify="left" if col == "unit" else "right")
    for unit in UNITS:
        u.add_row(UNIT_LABELS[unit], f"{est.unit_busy[unit]:,.0f}", f"{est.unit_shares[unit]:.1%}")
    console.print(u)
    if est.layers is None:
        console.print("no layer map in this .tmodel (Tensil's own compiles have none): no per-layer table")
        return
    lt = Table(title="Per layer")
    for col in ("layer", "ops", "instr.", "MACs", "ms", "MAC eff.", "DRAM KiB"):
        lt.add_column(col, justify="left" if col in ("layer", "ops") else "right")
    for l in est.layers:
        ms = l.cycles / (est.board.clock_mhz * 1e3)
        eff = f"{l.macs / (n * n * l.cycles):.1%}" if l.cycles else "-"
        lt.add_row(l.name, " ".join(l.ops), f"{l.instructions:,}", f"{l.macs:,}", f"{ms:.4f}", eff, f"{l.dram_bytes / 1024:,.1f}")
    console.print(lt)


@app.command()
def estimate(
    model: Path = typer.Argument(..., help="A .tmodel (or an .onnx model, compiled for the board first)."),
    board: str = typer.Option(..., "--board", "-b", help="Board: arty-a7-35, pynq-z1, ultra96-v2, zcu104, zcu104-512."),
    arch: str = typer.Option(None, "--arch", "-a", help="Architecture for an ONNX model (default: the board's)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Predict a model's latency, frame rate and unit shares on a board."""
    _, _, est = _estimate(model, board, arch)
    if as_json:
        print(json.dumps(est.to_json()))
    else:
        print_estimate(est, f"{model.name} on {est.board.name}")


@app.command()
def profile(
    model: Path = typer.Argument(..., help="A .tmodel."),
    board: str = typer.Option(..., "--board", "-b", help="Board name."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for trace.json, report.html (and samples.bin)."),
    sample_interval: int = typer.Option(0, "--sample-interval", min=0, max=0xFFFF,
                                        help="Clocks between performance samples, as if the driver sent "
                                             "Configure(sample_interval) first; 0 keeps the program's own."),
    merge_gap: float = typer.Option(64.0, "--merge-gap", min=0, help="Merge alike slices at most this many clocks apart."),
) -> None:
    """Write a Chrome trace (Perfetto) and an HTML report with plots."""
    import numpy as np

    from systolix.arch import get_board
    from systolix.isa.instructions import ConfigRegister, Configure
    from systolix.perf import estimate as run_estimate
    from systolix.perf.profile import write_report, write_trace
    from systolix.perf.samples import sample_times, sample_words, write_samples

    tmodel, program = _load(model, None)
    if output.exists() and not output.is_dir():
        raise SystolixError(f"{output}: exists and is not a directory")
    layer_map = (tmodel.systolix or {}).get("layers") or None
    if layer_map:
        from systolix.perf.estimate import layer_entries_from_map

        layer_map = layer_entries_from_map(layer_map, len(program), f"{model}: systolix.layers")
    if sample_interval:
        program = _prepend(program, Configure(int(ConfigRegister.SAMPLE_INTERVAL), sample_interval))
        if layer_map:
            # The layer map counts from the program's first instruction: shift it past the
            # Configure, which joins the first layer.
            layer_map = [{**l, "first": l["first"] + 1 if i else 0, "end": l["end"] + 1}
                         for i, l in enumerate(layer_map)]
    b = get_board(board)
    with err_console.status(f"simulating {len(program):,} instructions on {b.name}"):
        est = run_estimate(program, b, layer_map=layer_map, model=tmodel)
    output.mkdir(parents=True, exist_ok=True)
    with err_console.status("writing the trace and the report"):
        events = write_trace(output / "trace.json", est, program, merge_gap)
        times = sample_times(program, est.timeline)
        words = sample_words(program, est.timeline, times)
        interval = float(np.diff(times[:2])[0]) if times.size > 1 else float(sample_interval)
        if words.size:
            write_samples(output / "samples.bin", words)
        write_report(output / "report.html", est, program, tmodel.name, words if words.size else None, interval)
    console.print(f"{output / 'trace.json'}: {events:,} trace events (open in https://ui.perfetto.dev)")
    console.print(f"{output / 'report.html'}: report ({est.latency_ms:.3f} ms, {est.fps:.1f} fps, bound by {est.bound})")
    if words.size:
        console.print(f"{output / 'samples.bin'}: {words.size:,} performance samples (64-bit, little-endian)")


def _prepend(program, instr):
    """The program with one instruction in front (what the driver sends before it)."""
    from systolix.isa import decode_program, encode

    layout = program.layout
    head = encode(instr, layout)
    first = decode_program(head, layout, "configure")
    import numpy as np

    cols = {}
    for name in ("opcode", "flags", "op0", "op1", "op2", "addr0", "stride0", "addr1", "stride1", "size"):
        cols[name] = np.concatenate([getattr(first, name), getattr(program, name)])
    return type(program)(layout=layout, **cols)


@app.command()
def bench(
    as_json: bool = typer.Option(False, "--json", help="Print the tables as one JSON object."),
) -> None:
    """Benchmark tables: Tensil's real ZCU104 programs, predicted against measured."""
    from systolix.perf.bench import provenance, tensil_programs_table

    with err_console.status("simulating Tensil's six measured ZCU104 runs"):
        rows = tensil_programs_table()
    meta = provenance()
    if as_json:
        print(json.dumps({**meta, "models": None, "tensil_programs": rows}))
        return
    err_console.print("table 1 (the seed's benchmark models) needs the compiler, not in this build yet")
    t = Table(title=f"Tensil's ResNet-20 programs on a ZCU104 at 100 MHz, model against measurement "
                    f"({meta['date']}, commit {meta['commit']})")
    for col in ("program", "bus", "predicted ms", "predicted fps", "measured fps", "error", "bound"):
        t.add_column(col, justify="left" if col in ("program", "bound") else "right", no_wrap=True)
    for r in rows:
        t.add_row(r["program"].removeprefix("Tensil ") + (" (fit)" if r["fitted_on"] else ""), f"{r['bus_bits']}",
                  f"{r['latency_ms']:.2f}", f"{r['fps']:.1f}", f"{r['measured_fps']:.2f}", f"{r['error']:+.1%}", r["bound"])
    console.print(t)
