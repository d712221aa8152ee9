"""``systolix run``: run a compiled model on the bit-exact emulator."""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

import numpy as np
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from systolix.cli import app
from systolix.cli.common import console, err_console, require_file
from systolix.errors import SystolixError

# Outputs with at most this many values per batch item get an argmax column.
CLASS_VECTOR_LIMIT = 4096
ARGMAX_SHOWN = 16


def _read_inputs(path: Path, model, batch: bool):
    """``(inputs, raw_vectors)``: what to pass to the model and whether it is raw vectors (CSV)."""
    require_file(path, "input file")
    specs = getattr(model, "inputs", None)
    # A partitioned model (accelerator and host segments) only knows its tensors' names and shapes.
    names = [s.name for s in specs] if specs is not None else list(getattr(model, "input_shapes", {}))
    suffix = path.suffix.lower()
    if suffix == ".csv" and specs is None:
        raise SystolixError(f"{path}: a model partitioned between accelerator and host takes .npy/.npz tensors, not CSV vectors")
    if suffix == ".csv":
        from systolix.artifacts import read_vectors_csv

        if len(names) != 1:
            raise SystolixError(f"{path}: a CSV holds one input, the model has {len(names)} ({', '.join(names)}); use .npz")
        spec = model.inputs[0]
        if spec.size == 0:
            raise SystolixError(f"{path}: input {spec.name!r} takes 0 vectors in the model; a CSV of vectors cannot feed it")
        vectors = read_vectors_csv(path, model.arch.array_size)
        rows = vectors.shape[0]
        if batch:
            if rows % spec.size:
                raise SystolixError(
                    f"{path}: {rows} vectors is not a whole number of inputs of {spec.size} vectors ({spec.name!r})"
                )
            return {spec.name: vectors.reshape(rows // spec.size, spec.size, -1)}, True
        if rows != spec.size:
            hint = " (several inputs back to back? add --batch)" if rows % spec.size == 0 else ""
            raise SystolixError(f"{path}: {rows} vectors, but input {spec.name!r} takes {spec.size}{hint}")
        return {spec.name: vectors}, True
    if suffix not in (".npy", ".npz"):
        raise SystolixError(f"{path}: unknown input format {path.suffix!r} (expected .npy, .npz or .csv)")
    from systolix.artifacts.arrays import read_arrays

    loaded = read_arrays(path)
    if isinstance(loaded, np.ndarray):
        if len(names) != 1:
            raise SystolixError(f"{path}: one array, but the model has {len(names)} inputs ({', '.join(names)}); use .npz")
        return {names[0]: loaded}, False
    if not loaded:
        raise SystolixError(f"{path}: an .npz with no arrays; the model's inputs are: {', '.join(names)}")
    return loaded, False


def _check_output_path(path: Path, n_outputs: int) -> None:
    """Refuse a bad --output before spending time on the run."""
    from systolix.cli.common import check_output_file

    check_output_file(path, ".npy or .npz file")
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".npz"):
        raise SystolixError(f"{path}: unknown output format {path.suffix!r} (expected .npy or .npz)")
    if suffix == ".npy" and n_outputs != 1:
        raise SystolixError(f"{path}: the model has {n_outputs} outputs; write them to a .npz")


def _write_outputs(path: Path, outputs: dict[str, np.ndarray]) -> None:
    from systolix.artifacts import write_bytes_atomic

    _check_output_path(path, len(outputs))
    buffer = io.BytesIO()
    if path.suffix.lower() == ".npy":
        np.save(buffer, next(iter(outputs.values())))
    else:
        np.savez(buffer, **outputs)
    try:
        write_bytes_atomic(path, buffer.getvalue())
    except OSError as e:
        raise SystolixError(f"{path}: cannot write outputs: {e.strerror}") from None


@contextlib.contextmanager
def _naming(path: Path):
    """An input the model refuses (``RuntimeInputError``): the message starts with the input file."""
    from systolix.runtime import RuntimeInputError

    try:
        yield
    except RuntimeInputError as e:
        raise RuntimeInputError(f"{path}: {e}") from None


def _argmax_text(value: np.ndarray, batched: bool, classes: int | None, padded_note: bool) -> str:
    items = value if batched else value[None]
    per_item = items.reshape(items.shape[0], -1)
    if per_item.shape[1] == 0 or per_item.shape[1] > CLASS_VECTOR_LIMIT:
        return "-"
    if classes is not None:
        per_item = per_item[:, :classes]
    picks = per_item.argmax(axis=1).tolist()
    text = ", ".join(map(str, picks[:ARGMAX_SHOWN])) + (", ..." if len(picks) > ARGMAX_SHOWN else "")
    if padded_note and classes is None:
        text += " (over all values, padding included: see --classes)"
    return text


def _engine_options(engine: str, dram_latency: int | None, dram_beat_cycles: int | None) -> dict:
    if engine == "emulator":
        return {}
    from dataclasses import replace

    from systolix.rtl.cosim import DramModel

    dram = DramModel()
    if dram_latency is not None:
        dram = replace(dram, latency=dram_latency, write_latency=dram_latency)
    if dram_beat_cycles is not None:
        dram = replace(dram, beat_cycles=dram_beat_cycles)
    return {"engine": "rtl", "rtl": {"dram": dram}}


def _argmax_list(value: np.ndarray, batched: bool, classes: int | None):
    items = value if batched else value[None]
    per_item = items.reshape(items.shape[0], -1)
    if per_item.shape[1] == 0 or per_item.shape[1] > CLASS_VECTOR_LIMIT:
        return None
    picks = (per_item[:, :classes] if classes else per_item).argmax(axis=1).tolist()
    return picks if batched else picks[0]


def _print_json(engine: str, outputs: dict, batched: bool, classes: int | None, cycles, seconds: float) -> None:
    import json

    doc = {
        "engine": engine,
        "outputs": {name: {"shape": list(np.shape(v)), "argmax": _argmax_list(np.asarray(v), batched, classes)}
                    for name, v in outputs.items()},
        "cycles": cycles,
        "seconds": round(seconds, 3),
    }
    console.print_json(json.dumps(doc)) if console.is_terminal else print(json.dumps(doc))


@app.command()
def run(
    model: Path = typer.Argument(..., help="A .tmodel manifest."),
    input: Path = typer.Option(..., "--input", "-i", help="Inputs: .npy (one input), .npz (one array per input name) or a Tensil .csv of vectors."),  # noqa: A002
    output: Path = typer.Option(None, "--output", "-o", help="Write the outputs here: .npy (one output) or .npz."),
    batch: bool = typer.Option(False, "--batch", "-b", help="The input holds a batch: a leading axis (.npy/.npz) or several inputs back to back (.csv)."),
    classes: int = typer.Option(None, "--classes", min=1, help="Argmax over the first K values only (Tensil pads class vectors to the array size)."),
    trace_at: int = typer.Option(None, "--trace-at", min=0, help="Dump the emulator's state when the program counter reaches PC (before instruction #PC)."),
    trace_file: Path = typer.Option(None, "--trace-file", help="Where --trace-at writes (.npz); default MODEL.tracePC.npz in the current folder."),
    trace_range: list[str] = typer.Option(None, "--trace-range", help="Dump only MEMORY[:FIRST[:COUNT]] (local, acc, dram0, dram1); repeatable."),
    allow_nonfinite: bool = typer.Option(False, "--allow-nonfinite", help="Run NaN and infinite input values as Tensil's driver converts them (NaN to 0, infinities saturate) instead of refusing them."),
    engine: str = typer.Option("emulator", "--engine", help="emulator (bit-exact, fast) or rtl (the generated hardware under Verilator, with clock counts)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object: outputs (shapes, argmax), cycles (RTL; null on the emulator), seconds."),
    threads: int = typer.Option(None, "--threads", min=1, help="Batch items run in parallel (emulator threads, RTL processes)."),
    dram_latency: int = typer.Option(None, "--dram-latency", min=0, help="RTL engine: clocks from an AXI read request to its first beat, and from a write's last beat to its response (default 32)."),
    dram_beat_cycles: int = typer.Option(None, "--dram-beat-cycles", min=1, help="RTL engine: clocks per data beat on a DRAM port (default 1: the port's full width every clock)."),
) -> None:
    """Run a compiled model on the bit-exact emulator (or the RTL) and summarise its outputs."""
    import systolix
    from systolix.emulator.trace import parse_range

    require_file(model, "model manifest")
    if engine not in ("emulator", "rtl"):
        raise SystolixError(f"--engine {engine!r}: emulator or rtl")
    if (trace_file is not None or trace_range) and trace_at is None:
        raise SystolixError("--trace-file and --trace-range need --trace-at PC")
    if engine == "rtl" and trace_at is not None:
        raise SystolixError("--trace-at is an emulator feature; the RTL engine has no tracing (use --engine emulator)")
    if (dram_latency is not None or dram_beat_cycles is not None) and engine != "rtl":
        raise SystolixError("--dram-latency and --dram-beat-cycles apply to the RTL engine (--engine rtl)")
    engine_options = _engine_options(engine, dram_latency, dram_beat_cycles)
    ranges = [parse_range(r) for r in trace_range or []]
    if trace_file is not None:
        from systolix.cli.common import check_output_file

        check_output_file(trace_file, "tracepoint dump (.npz)")
    loaded = systolix.load(model)
    if output:
        outputs_known = getattr(loaded, "outputs", None)
        count = len(outputs_known) if outputs_known is not None else len(getattr(loaded, "output_names", []))
        _check_output_path(output, count)
    inputs, raw_vectors = _read_inputs(input, loaded, batch)
    if not hasattr(loaded, "run_detailed"):  # a partitioned model: its own driver does the work
        if trace_at is not None:
            raise SystolixError(f"{model}: --trace-at works on a single accelerator program, this model is partitioned")
        started = time.perf_counter()
        with _naming(input):
            outputs = loaded.run(inputs, batch=True if batch else None, allow_nonfinite=allow_nonfinite,
                                 threads=threads, **engine_options)
        seconds = time.perf_counter() - started
        if output:
            _write_outputs(output, outputs)
        first = next(iter(inputs.values()))
        batched = np.ndim(first) == len(loaded.input_shapes[next(iter(inputs))]) + 1
        count = int(np.shape(first)[0]) if batched else 1
        if json_output:
            _print_json(engine, outputs, batched, classes, None, seconds)
            return
        table = Table(title=f"{loaded.name}: {count} input{'s' if count > 1 else ''} (accelerator and host segments)")
        for col in ("output", "shape", "argmax"):
            table.add_column(col)
        for name, value in outputs.items():
            table.add_row(name, str(list(np.shape(value))), _argmax_text(np.asarray(value), batched, classes, False))
        console.print(table)
        console.print(f"{count} input(s) in {seconds:.2f} s ({count / seconds:.1f} inputs/s)")
        if output:
            console.print(f"wrote {', '.join(outputs)} to {output}")
        return

    options = {}
    if trace_at is not None:
        options["tracepoint"] = trace_at
        options["trace_file"] = trace_file or Path(f"{model.stem}.trace{trace_at}.npz")
        options["trace_ranges"] = ranges or None

    started = time.perf_counter()
    total = len(loaded.program)
    runner = loaded.run_vectors if raw_vectors else loaded.run_detailed
    if engine == "rtl":
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("inputs"),
                      TimeElapsedColumn(), console=err_console, transient=True,
                      disable=not err_console.is_terminal) as bar, _naming(input):
            task = bar.add_task("building the RTL model", total=None)
            engine_options["rtl"]["progress"] = lambda what: bar.update(task, description=what)
            result = runner(inputs, batch=True if batch else None, allow_nonfinite=allow_nonfinite, threads=threads,
                            progress=lambda done, count: bar.update(task, description="co-simulating", completed=done,
                                                                    total=count), **engine_options)
    else:
        with Progress(
            TextColumn("emulating"), BarColumn(), MofNCompleteColumn(), TextColumn("instructions"), TimeElapsedColumn(),
            console=err_console, transient=True, disable=not err_console.is_terminal,  # a bar only on a terminal
        ) as bar, _naming(input):
            task = bar.add_task("run", total=total)
            result = runner(inputs, batch=True if batch else None, allow_nonfinite=allow_nonfinite, threads=threads,
                            progress=lambda done, _total: bar.update(task, completed=done), **options)
    seconds = time.perf_counter() - started

    if output:
        _write_outputs(output, result.outputs)
    if json_output:
        cycles = getattr(result.result, "cycles", None)
        if cycles is not None and not result.batched:
            cycles = cycles[0]
        _print_json(engine, result.outputs, result.batched, classes, cycles, seconds)
        return

    specs = {s.name: s for s in loaded.outputs}
    table = Table(title=f"{loaded.name}: {result.batch} input{'s' if result.batch > 1 else ''}")
    table.add_column("output")
    table.add_column("shape")
    table.add_column("argmax")
    for name, value in result.outputs.items():
        padded = raw_vectors or specs[name].vectors_only
        table.add_row(name, str(list(value.shape)), _argmax_text(value, result.batched, classes, padded))
    console.print(table)
    r = result.result
    kinds = ", ".join(f"{k} {v:,}" for k, v in r.saturations.items() if v)
    console.print(f"saturation events: {r.saturation_total:,}" + (f" ({kinds})" if kinds else ""))
    if result.input_saturations:
        console.print(f"input values saturated on conversion to {loaded.arch.data_type.name}: {result.input_saturations:,}")
    cycles = getattr(r, "cycles", None)
    if cycles is not None:
        spread = f"{min(cycles):,}" if min(cycles) == max(cycles) else f"{min(cycles):,} to {max(cycles):,}"
        console.print(f"RTL: {spread} clocks per input")
    console.print(f"{r.instructions:,} instructions for {result.batch} input(s) in {seconds:.2f} s "
                  f"({result.batch / seconds:.1f} inputs/s)")
    if trace_at is not None:
        if r.tracepoint_hits:
            first = Path(options["trace_file"])
            extra = f" (and {len(r.tracepoint_hits) - 1} more beside it)" if len(r.tracepoint_hits) > 1 else ""
            console.print(f"tracepoint {trace_at}: state before instruction #{r.tracepoint_hits[0]} written to {first}{extra}")
        else:
            console.print(f"[yellow]tracepoint {trace_at} never reached (the program has {total:,} instructions)[/]")
    if output:
        console.print(f"wrote {', '.join(result.outputs)} to {output}")
