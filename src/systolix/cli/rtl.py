"""``systolix rtl``: the hardware, as Verilog, and its FPGA resources."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from systolix.cli import app
from systolix.cli.common import console, err_console, resolve_arch
from systolix.errors import SystolixError



def board_for(arch_name: str, family: str) -> str | None:
    """The board whose FPGA a preset is checked against (None: no budget known)."""
    from systolix.rtl.synth import BUDGETS

    by_preset = {"pynqz1": "pynq-z1", "artya7100t": "arty-a7-100t", "cmoda7": "cmod-a7-35t", "ultra96v2": "ultra96-v2",
                 "zcu104": "zcu104", "zcu104_uram": "zcu104", "arty-a7-35": "arty-a7-35", "pynq-z1": "pynq-z1",
                 "ultra96-v2": "ultra96-v2"}
    if family == "ecp5":
        return "ecp5-85k"
    board = by_preset.get(arch_name)
    if board is not None and BUDGETS[board].family != family:
        return None
    return board


def split_top(verilog: str, top: str) -> tuple[str, str]:
    """The top module's text, and every other module's (what a block design instantiates, and
    what it is made of)."""
    import re

    modules = re.split(r"(?m)^(?=(?:\(\*.*\*\)\s*)*module )", verilog)
    header = modules[0] if not modules[0].lstrip().startswith(("module", "(*")) else ""
    body = modules[1:] if header else modules
    tops = [m for m in body if re.match(rf"(?:\(\*.*\*\)\s*)*module {re.escape(top)}\b", m)]
    rest = [m for m in body if m not in tops]
    if len(tops) != 1:
        raise SystolixError(f"the generated Verilog has {len(tops)} modules named {top}")
    return header + tops[0], header + "".join(rest)


@app.command()
def rtl(
    arch: str = typer.Option(..., "--arch", "-a", help="Architecture: a preset, a board or a .tarch file."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for tcu_<arch>.v, the top level and design.json."),
    synth: str = typer.Option(None, "--synth", help="Also synthesise with Yosys: xilinx7, ultrascale or ecp5 "
                              "(writes resources.json; ecp5 also places and routes for fmax)."),
    board: str = typer.Option(None, "--board", help="Check the resources against this board's FPGA "
                              "(default: the preset's own board): arty-a7-35, pynq-z1, ultra96-v2, zcu104, ecp5-85k."),
    bus_bits: int = typer.Option(0, "--bus-bits", help="Width of the DRAM AXI ports and instruction stream "
                                 "(default: 128, or the largest power of two dividing a vector)."),
    uram: bool = typer.Option(None, "--uram/--no-uram", help="UltraScale+: put large memories in UltraRAM "
                              "(default: when the board has it)."),
) -> None:
    """Generate the Tensor Compute Unit's Verilog for an architecture, optionally synthesise it."""
    from systolix.artifacts.atomic import write_text_atomic
    from systolix.rtl import RtlConfig
    from systolix.rtl.cosim.build import verilog_path
    from systolix.rtl.synth import BUDGETS, FAMILIES, synthesize

    if synth is not None and synth not in FAMILIES:
        raise SystolixError(f"--synth {synth!r}: one of {', '.join(FAMILIES)}")
    if board is not None and board not in BUDGETS:
        raise SystolixError(f"--board {board!r}: one of {', '.join(BUDGETS)}")
    if output.exists() and not output.is_dir():
        raise SystolixError(f"{output}: exists and is not a folder")
    target = resolve_arch(arch)
    name = Path(arch).stem if arch.endswith(".tarch") else arch
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    cfg = RtlConfig(target, name=name, axi_data_bits=bus_bits)
    with err_console.status(f"generating the Verilog of {name}") as status:
        source = verilog_path(cfg, lambda what: status.update(what))
    output.mkdir(parents=True, exist_ok=True)
    top, inner = split_top(source.read_text(), f"top_{name}")
    write_text_atomic(output / f"tcu_{name}.v", inner)
    write_text_atomic(output / f"top_{name}.v", top)
    write_text_atomic(output / "design.json", json.dumps(cfg.describe(), indent=2) + "\n")
    console.print(f"wrote {output / f'top_{name}.v'} (module top_{name}, Tensil's ports), {output / f'tcu_{name}.v'} "
                  f"({inner.count(chr(10)):,} lines: the modules inside it) and {output / 'design.json'}")
    if synth is None:
        return

    chosen = board or board_for(arch, synth)
    budget = BUDGETS.get(chosen) if chosen else None
    if budget is not None and budget.family != synth:
        raise SystolixError(f"board {chosen} has a {budget.family} FPGA ({budget.part}), not {synth}")
    if uram is None:
        uram = budget is not None and budget.uram > 0
    with err_console.status(f"synthesising {name} for {synth}") as status:
        result = synthesize(cfg, synth, lambda what: status.update(what), uram=uram)
    data = result.to_json()
    data.update(architecture=name, board=chosen, part=budget.part if budget else None)
    fits = None
    if budget is not None:
        over = result.overflows(budget)
        fits = not over
        data["budget"] = {k: getattr(budget, k) for k in ("lut", "ff", "dsp", "bram36", "uram")}
        data["fits"] = fits
    write_text_atomic(output / "resources.json", json.dumps(data, indent=2) + "\n")

    table = Table(title=f"{name} on {synth}" + (f" ({chosen}: {budget.part})" if budget else ""))
    for col in ("resource", "used", "available", "share"):
        table.add_column(col, justify="right" if col != "resource" else "left")
    for key in ("lut", "ff", "dsp", "bram36", "uram"):
        used = getattr(result, key)
        avail = getattr(budget, key) if budget else None
        share = f"{used / avail:.0%}" if avail else "-"
        table.add_row(key, f"{used:,g}", f"{avail:,}" if avail is not None else "-", share)
    console.print(table)
    if result.fmax_mhz is not None:
        console.print(f"fmax after place and route on an ECP5 85k: {result.fmax_mhz:.1f} MHz")
    console.print(f"wrote {output / 'resources.json'}")
    if fits is False:
        raise SystolixError(f"{name} does not fit the {budget.part} of {chosen}: {'; '.join(result.overflows(budget))}")
