"""Latency-model commands: ``estimate``, ``profile``, ``bench``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from systolix.cli import app
from systolix.cli.common import console, err_console, require_file, resolve_arch
from systolix.errors import SystolixError

# One input's error says little: EfficientNet-B0's first image-like input gives logits of at most
# 0.3 (limit 0.58 LSB, ours x17.7), the next three up to 4.7 (over the four: limit 11.1, ours x2.7).
ZOO_ERROR_INPUTS = 4


def _load(model: Path):
    """A plain ``.tmodel`` and its program (``profile``: one program, one timeline)."""
    from systolix.perf import load_program
    from systolix.perf.estimate import segment_manifests

    require_file(model, "model")
    if model.suffix != ".tmodel":
        raise SystolixError(f"{model}: expected a .tmodel file")
    if segment_manifests(model) is not None:
        raise SystolixError(f"{model}: a model partitioned between accelerator and host; profile one of its "
                            "accelerator segments' .tmodel files (listed under systolix.segments)")
    return load_program(model)


def _compile_onnx(model: Path, board, arch: str | None, strategy: str, directory: Path, batch: int | None = None) -> Path:
    """Compile an ONNX model for ``arch`` (default: the board's) into ``directory``, with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from systolix.compiler import compile_model

    target = resolve_arch(arch) if arch is not None else board.architecture
    with Progress(TextColumn("compiling {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task(f"{model.name} for {target.array_size}x{target.array_size}", total=None)

        def progress(_segment: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        compiled = compile_model(model, target, strategy=strategy, progress=progress, batch=batch, tune=board.timing)
    return compiled.save(directory)


def _estimate(model: Path, board_name: str, arch: str | None, strategy: str, time_host: bool = True,
              batch: int | None = None):
    """The estimate of a .tmodel (or an .onnx compiled first) and, for a partitioned model, its segments."""
    import tempfile

    from systolix.arch import get_board
    from systolix.perf import estimate
    from systolix.perf.estimate import estimate_partitioned, segment_manifests

    board = get_board(board_name)
    require_file(model, "model")
    with tempfile.TemporaryDirectory(prefix="systolix-estimate-") as tmp:
        if model.suffix == ".onnx":
            path = _compile_onnx(model, board, arch, strategy, Path(tmp), batch)
        elif model.suffix == ".tmodel":
            if arch is not None:
                raise SystolixError("--arch applies to ONNX models; a .tmodel runs on the architecture in its manifest")
            if batch is not None:
                raise SystolixError("--batch applies to ONNX models; a .tmodel's program runs the batch it was compiled for")
            path = model
        else:
            raise SystolixError(f"{model}: expected a .tmodel or an .onnx file")
        with err_console.status(f"simulating {path.name} on {board.name}"):
            if segment_manifests(path) is not None:
                return estimate_partitioned(path, board, time_host=time_host)
            return estimate(path, board), None


def print_estimate(est, title: str) -> None:
    """The estimate as rich tables."""
    from systolix.perf.estimate import LAYER_BOUND_LABELS
    from systolix.perf.simulator import ALL_UNIT_LABELS as UNIT_LABELS

    n = est.board.architecture.array_size
    t = Table(title=title, show_header=False)
    t.add_column(justify="left")
    t.add_column(justify="right")
    t.add_row("board", f"{est.board.name}: {n}x{n} at {est.board.clock_mhz:g} MHz")
    t.add_row("instructions", f"{est.instructions:,}")
    t.add_row("cycles", f"{est.cycles:,.0f}")
    host_segments = f" + host segments {est.host_segments_ms:.3f}" if est.host_segments_ms else ""
    t.add_row("latency", f"{est.latency_ms:.3f} ms (accelerator {est.accelerator_ms:.3f} + host I/O {est.host_ms:.3f}"
                         f"{host_segments})")
    if est.batch > 1:
        t.add_row("batch", f"{est.batch} frames a run (the latency is the run's)")
    t.add_row("frames per second", f"{est.fps:.1f}")
    t.add_row("MAC efficiency", f"{est.mac_efficiency:.1%}  ({est.macs_source})")
    t.add_row("bound by", est.bound)
    console.print(t)
    u = Table(title="Unit busy share")
    for col in ("unit", "busy clocks", "share"):
        u.add_column(col, justify="left" if col == "unit" else "right")
    for unit in est.unit_busy:
        u.add_row(UNIT_LABELS[unit], f"{est.unit_busy[unit]:,.0f}", f"{est.unit_shares[unit]:.1%}")
    console.print(u)
    if est.layers is None:
        console.print("no layer map in this .tmodel (Tensil's own compiles have none): no per-layer table")
        return
    lt = Table(title="Per layer")
    for col in ("layer", "ops", "instr.", "MACs", "ms", "MAC eff.", "DRAM KiB", "bound by", "x compute bound"):
        lt.add_column(col, justify="left" if col in ("layer", "ops", "bound by") else "right")
    for l in est.layers:
        ms = l.cycles / (est.board.clock_mhz * 1e3)
        eff = f"{l.macs / (n * n * l.cycles):.1%}" if l.cycles else "-"
        lt.add_row(l.name, " ".join(l.ops), f"{l.instructions:,}", f"{l.macs:,}", f"{ms:.4f}", eff, f"{l.dram_bytes / 1024:,.1f}",
                   LAYER_BOUND_LABELS[l.bound], f"x{l.cycles / l.compute_cycles(n):,.1f}" if l.macs else "-")
    console.print(lt)


@app.command()
def estimate(
    model: Path = typer.Argument(..., help="A .tmodel (or an .onnx model, compiled for the board first)."),
    board: str = typer.Option(..., "--board", "-b", help="Board: arty-a7-35, pynq-z1, ultra96-v2, zcu104, zcu104-512."),
    arch: str = typer.Option(None, "--arch", "-a", help="Architecture for an ONNX model (preset or .tarch; default: the board's)."),
    strategy: str = typer.Option("local-isolated", "--strategy", "-s",
                                 help="Compiler strategy for an ONNX model: local-isolated, local-vars, local-consts, "
                                      "local-vars-and-consts."),
    batch: int = typer.Option(None, "--batch", min=1, max=1024,
                              help="For an ONNX model: compile one program running this many frames (systolix compile "
                                   "--batch); the latency is the run's, the frame rate counts every frame."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    time_host: bool = typer.Option(True, "--time-host/--no-time-host",
                                   help="Time a partitioned model's host segments with onnxruntime on this machine "
                                        "(one thread); without it they count 0 ms."),
) -> None:
    """Predict a model's latency, frame rate and unit shares on a board."""
    est, segments = _estimate(model, board, arch, strategy, time_host, batch)
    if as_json:
        data = est.to_json()
        if segments is not None:
            data["segments"] = [{"kind": s["kind"], "name": s["name"], "nodes": s["nodes"],
                                 "estimate": None if s["estimate"] is None else s["estimate"].to_json(),
                                 **({"host_ms": s["host_ms"]} if "host_ms" in s else {}),
                                 **({"note": s["note"]} if "note" in s else {})} for s in segments]
        print(json.dumps(data))
        return
    print_estimate(est, f"{model.name} on {est.board.name}")
    if segments is not None:
        host = [s for s in segments if s["kind"] == "host"]
        nodes = ", ".join(n for s in host for n in s["nodes"])
        if time_host:
            console.print(f"{len(segments)} segments, {len(host)} on the host ({nodes}): {est.host_segments_ms:.3f} ms, "
                          "timed with onnxruntime on this machine (one thread, median of repeated runs), not on the "
                          "board's CPU; the other figures are the accelerator segments' sum")
        else:
            console.print(f"{len(segments)} segments, {len(host)} on the host: the figures above are the accelerator "
                          f"segments' sum; the host segments ({nodes}) run under onnxruntime and are not timed")


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
    from systolix.perf.profile import require_matplotlib, write_report, write_trace
    from systolix.perf.samples import sample_times, sample_words, write_samples

    from systolix.cli.common import check_output_dir

    check_output_dir(output, "trace and report")
    require_matplotlib()  # before anything is written
    tmodel, program = _load(model)
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


def _ms(v) -> str:
    return "-" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.3g}" if v < 10 else f"{v:.1f}")


def _fps(v) -> str:
    return "-" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.3g}")


@app.command()
def bench(
    as_json: bool = typer.Option(False, "--json", help="Print both tables as one JSON object."),
    models: list[str] = typer.Option(None, "--model", "-m",
                                     help="Only this benchmark model in table 1 (repeatable): resnet20v2, resnet50v2, "
                                          "yolov4_tiny."),
    boards: list[str] = typer.Option(None, "--board", "-b",
                                     help="Only this board in table 1 (repeatable): arty-a7-35, pynq-z1, ultra96-v2."),
    no_models: bool = typer.Option(False, "--no-models", help="Skip table 1 (the long part: compiling ResNet-50)."),
    no_zcu104: bool = typer.Option(False, "--no-zcu104", help="Skip table 2 (Tensil's ZCU104 programs and ours)."),
    no_batch: bool = typer.Option(False, "--no-batch", help="Skip table 1's batch-4 columns (a second compile of every row)."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the tables as Markdown (for the README)."),
    zoo: bool = typer.Option(False, "--zoo", help="Instead: the zoo table (real architectures from torchvision and "
                                                  "torch modules, random weights) on ultra96-v2; needs torch."),
    zoo_models: list[str] = typer.Option(None, "--zoo-model", help="Only this zoo model (repeatable; with --zoo)."),
    size: int = typer.Option(None, "--size", min=16, max=1024,
                             help="Input size of the zoo models (default: each one's published size; with --zoo)."),
    error_inputs: int = typer.Option(ZOO_ERROR_INPUTS, "--error-inputs", min=0, max=100,
                                     help="Image-like inputs run on the emulator against onnxruntime per zoo model (0: none)."),
) -> None:
    """Benchmark tables: the models and boards of Tensil's published benchmarks, and Tensil's ZCU104 programs against ours."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if zoo:
        _bench_zoo(zoo_models, size, error_inputs, as_json, markdown)
        return

    from systolix.arch import get_board
    from systolix.models import MODELS
    from systolix.perf.bench import (BENCH_BOARDS, BENCH_MODELS, MODELS_CAPTION, THROUGHPUT_BATCH, ZCU104_CONFIGS,
                                     models_table, provenance, zcu104_table)

    for m in models or ():
        if m not in MODELS:
            raise SystolixError(f"--model {m}: unknown model (benchmark models: {', '.join(BENCH_MODELS)})")
    for b in boards or ():
        get_board(b)  # a clear error for an unknown board
    chosen_models = tuple(models) if models else BENCH_MODELS
    chosen_boards = tuple(boards) if boards else BENCH_BOARDS
    meta = provenance()
    if no_models and no_zcu104:
        raise SystolixError("--no-models and --no-zcu104 together leave no table to print")
    jobs = ((0 if no_models else len(chosen_models) * len(chosen_boards) * (1 if no_batch else 2))
            + (0 if no_zcu104 else len(ZCU104_CONFIGS)))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        overall = bar.add_task("compiling and simulating", total=jobs)
        layers = bar.add_task("", total=None)
        seen: set[str] = set()

        def progress(label: str, done: int, total: int) -> None:
            if label not in seen:  # a new compile: one job further
                if seen:
                    bar.advance(overall)
                seen.add(label)
                if len(seen) > jobs:  # a larger-DRAM retry: one job more than planned
                    bar.update(overall, total=len(seen))
            bar.update(layers, description=f"  {label}: layer", completed=done, total=total or None)

        rows1 = None if no_models else models_table(chosen_models, chosen_boards, progress,
                                                    throughput_batch=0 if no_batch else THROUGHPUT_BATCH)
        rows2 = None if no_zcu104 else zcu104_table(progress=progress)
        bar.update(overall, completed=jobs)
    if as_json:
        print(json.dumps({**meta, "models": rows1, "zcu104": rows2}))
        return
    stamp = f"{meta['date']}, commit {meta['commit']}"
    if rows1 is not None:
        _show(f"Benchmark models (random weights), our compile under the fitted latency model ({stamp})",
              _models_cells(rows1), markdown, MODELS_CAPTION)
    if rows2 is not None:
        _show(f"ResNet-20 v2 on a ZCU104 at 100 MHz: Tensil's programs and our compile under the same fitted "
              f"latency model ({stamp})", _zcu104_cells(rows2), markdown)


def _bench_zoo(names: list[str] | None, size: int | None, error_inputs: int, as_json: bool, markdown: bool) -> None:
    """``systolix bench --zoo``: one row per zoo model, with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from systolix.models.torchvision_zoo import ZOO
    from systolix.perf.bench import provenance
    from systolix.perf.zoo import ZOO_BOARD, zoo_row

    for name in names or ():
        if name not in ZOO:
            raise SystolixError(f"--zoo-model {name}: unknown zoo model (the zoo: {', '.join(ZOO)})")
    chosen = list(names) if names else list(ZOO)
    meta = provenance()
    rows = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        overall = bar.add_task("zoo models", total=len(chosen))
        step = bar.add_task("", total=None)

        def progress(label: str, done: int, total: int) -> None:
            bar.update(step, description=f"  {label}", completed=done, total=total or None)

        for name in chosen:
            rows.append(zoo_row(name, size, error_inputs=error_inputs, progress=progress))
            bar.advance(overall)
    if as_json:
        print(json.dumps({**meta, "zoo": rows}))
        return
    sizes = "published input sizes" if size is None else f"input {size}x{size} (or the architecture's smallest)"
    _show(f"Zoo: real architectures (random weights) compiled for ultra96v2, timed on {ZOO_BOARD} "
          f"({sizes}; {meta['date']}, commit {meta['commit']})", _zoo_cells(rows), markdown, ZOO_CAPTION)


ZOO_CAPTION = ("MACs: useful multiply-accumulates (Conv, ConvTranspose, Gemm, MatMul); on accelerator: their share in "
               "nodes the accelerator runs; latency: the latency model of systolix estimate (accelerator programs only); "
               "error: RMS over the outputs of the emulator against onnxruntime, in LSB of FP16BP8, over image-like inputs "
               "(--error-inputs, default 4), next to the limit: the same model in onnxruntime with every computed tensor "
               "rounded to FP16BP8 (weights exact); agrees: the share of inputs whose top class (of pixels whose class, "
               "for segmenters) is onnxruntime's, ours and the limit's.")


def _zoo_cells(rows) -> tuple[list[str], list[list[str]], list[str]]:
    """The zoo table as header, string rows and footnotes (compile errors, host nodes and why)."""
    header = ["model", "input", "compiles", "GMACs", "on accelerator", "host ops", "ms", "fps", "error LSB", "limit LSB",
              "agrees (limit)", "compile s"]
    cells, notes = [], []
    for r in rows:
        head = [r["title"], f"{r['size']}x{r['size']}"]
        if not r["compiles"]:
            notes.append(r["error"])
            cells.append(head + [f"no [{len(notes)}]", f"{r['macs'] / 1e9:.3f}"] + ["-"] * 7 + [f"{r['compile_seconds']:.1f}"])
            continue
        host = "none"
        if r["host"]:
            by_op: dict[str, list[str]] = {}
            for h in r["host"]:
                by_op.setdefault(h["op"], []).append(f"{h['node']}: {h['reason']}")
            notes.extend(f"{op} on the host ({len(why)}): " + "; ".join(why[:3]) + (" ..." if len(why) > 3 else "")
                         for op, why in by_op.items())
            host = ", ".join(f"{op} x{len(why)}" for op, why in by_op.items()) + f" [{len(notes)}]"
        programs = f" ({r['programs']} programs)" if r.get("programs", 1) > 1 else ""
        ms = _ms(r["latency_ms"]) + ("" if r["host_timed"] else " + host")
        err = [f"{r['rms_lsb']:.1f}", f"{r['limit_rms_lsb']:.1f}"] if "rms_lsb" in r else ["-", "-"]
        err.append(f"{r['agreement']:.0%} ({r['limit_agreement']:.0%})" if "agreement" in r else "-")
        cells.append(head + ["yes" + programs, f"{r['macs'] / 1e9:.3f}", f"{r['accelerator_share']:.1%}", host, ms,
                             _fps(r["fps"]) if r["host_timed"] else "-"] + err + [f"{r['compile_seconds']:.1f}"])
    return header, cells, notes


def _models_cells(rows) -> tuple[list[str], list[list[str]], list[str]]:
    """Table 1 as header, string rows and footnotes (why a row did not compile)."""
    header = ["model", "board", "array", "MHz", "our ms", "our fps", "published ms", "published fps", "compute bound ms",
              "share of bound", "bound by", "batch 4 ms", "batch 4 fps", "batch 4 / batch 1"]
    cells, notes = [], []
    for r in rows:
        board = r["board"]
        if r.get("variant"):
            notes.append(r["variant"])
            board += f" [{len(notes)}]"
        if r.get("programs", 1) > 1:
            notes.append(f"constants past DRAM1: {r['programs']} programs in a row, each with its own DRAM1 buffer")
            board += f" [{len(notes)}]"
        head = [r["title"], board, f"{r['array_size']}x{r['array_size']}", f"{r['clock_mhz']:g}"]
        published = [_ms(r["published_latency_ms"]), _fps(r["published_fps"])]
        if r["error"]:
            notes.append(r["error"])
            cells.append(head + ["-", "-"] + published + ["-", "-", f"not compiled [{len(notes)}]", "-", "-", "-"])
        else:
            cells.append(head + [_ms(r["latency_ms"]), _fps(r["fps"])] + published
                         + [_ms(r["compute_bound_ms"]), f"{r['share_of_bound']:.1%}", r["bound"]] + _batched_cells(r, notes))
    return header, cells, notes


def _batched_cells(r, notes: list[str]) -> list[str]:
    """The batch-4 columns of a table-1 row: the program's latency (all its frames), frames per
    second, and the gain over batch 1; or a note saying why there is no figure."""
    b = r.get("batched")
    if b is None:
        return ["-", "-", "-"]
    if b["error"]:
        notes.append(f"batch {b['batch']}: {b['error']}")
        return [f"not compiled [{len(notes)}]", "-", "-"]
    mark = ""
    if b.get("programs", 1) > 1:
        notes.append(f"batch {b['batch']}: constants past DRAM1: {b['programs']} programs in a row, each running the "
                     f"{b['batch']} frames")
        mark = f" [{len(notes)}]"
    return [_ms(b["latency_ms"]) + mark, _fps(b["fps"]), f"{b['fps'] / r['fps']:.2f}x"]


def _zcu104_cells(rows) -> tuple[list[str], list[list[str]], list[str]]:
    """Table 2 as header, string rows and footnotes."""
    header = ["architecture", "strategy", "bus bits", "measured fps", "Tensil's program fps", "error",
              "our compile fps", "ours / Tensil's", "our bound"]
    cells, notes = [], []
    for r in rows:
        tensil, ours = r["tensil"], r["systolix"]
        tcols = ["-", "-"] if tensil is None else [
            f"{tensil['fps']:.1f}" + (" (fit)" if tensil["fitted_on"] else ""), f"{tensil['error']:+.1%}"]
        if ours["error"]:
            notes.append(ours["error"])
            ocols = ["-", "-", f"not compiled [{len(notes)}]"]
        else:
            ratio = "-" if tensil is None else f"{ours['fps'] / tensil['fps']:.2f}x"
            ocols = [f"{ours['fps']:.1f}", ratio, ours["bound"]]
        measured = "-" if r["measured_fps"] is None else f"{r['measured_fps']:.2f}"
        cells.append([r["architecture"], r["strategy"], f"{r['bus_bits']}", measured] + tcols + ocols)
    return header, cells, notes


LEFT_COLUMNS = {"model", "board", "bound by", "architecture", "strategy", "our bound", "compiles", "host ops"}


def _show(title: str, table: tuple[list[str], list[list[str]], list[str]], markdown: bool, caption: str = "") -> None:
    header, cells, notes = table
    if markdown:
        print(f"**{title}**\n")
        if caption:
            print(f"{caption}\n")
        print("| " + " | ".join(header) + " |")
        print("| " + " | ".join("---" if h in LEFT_COLUMNS else "---:" for h in header) + " |")
        for row in cells:
            print("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
        print()
        for i, note in enumerate(notes, 1):
            print(f"[{i}] {note}  ")
        print()
        return
    t = Table(title=title, caption=caption or None)
    for h in header:
        t.add_column(h, justify="left" if h in LEFT_COLUMNS else "right", no_wrap=h in ("model", "board", "array"))
    for row in cells:
        t.add_row(*row)
    console.print(t)
    for i, note in enumerate(notes, 1):
        console.print(f"[{i}] {note}", highlight=False)
