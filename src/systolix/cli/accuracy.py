"""``systolix accuracy``: where a compiled model's error enters, layer by layer."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from systolix.cli import app
from systolix.cli.common import console, err_console, resolve_arch


def _tables(report) -> list[Table]:
    from systolix.accuracy.report import ENTERS

    kind = (f"calibrated on {report.calibration_samples} samples" if report.calibration_samples
            else "plain, estimated gains" if report.estimated_gains else "plain, no gains")
    outputs = Table(title=f"{report.model} on {report.arch} ({kind}), {report.inputs} inputs: outputs' error (LSB)")
    for col in ["output", "ours RMS", "ours offset", "ours max", "limit RMS", "limit offset", "limit max", "ours / limit",
                "same class: ours", "same class: limit"]:
        outputs.add_column(col, justify="left" if col == "output" else "right",
                           overflow="fold" if col == "output" else "ellipsis")
    for o in report.outputs:
        ratio = o.ours.rms / o.limit.rms if o.limit.rms else None
        outputs.add_row(o.name, f"{o.ours.rms:.2f}", f"{o.ours.offset:.2f}", f"{o.ours.max:.1f}", f"{o.limit.rms:.2f}",
                        f"{o.limit.offset:.2f}", f"{o.limit.max:.1f}",
                        f"x{ratio:.2f}" if ratio else "-",
                        "-" if o.agreement is None else f"{o.agreement:.1%}",
                        "-" if o.limit_agreement is None else f"{o.limit_agreement:.1%}")
    tables = [outputs]
    if report.layers:
        alone = "" if report.calibration_samples else ", compiled without gains"
        layers = Table(title=f"Per layer (LSB): accumulated, and the layer alone on float inputs{alone} "
                             f"(bold: alone {ENTERS:g}x the limit or more)")
        longest = max(len(layer.name) for layer in report.layers)
        for col in ["#", "layer", "ops", "RMS", "limit RMS", "offset", "limit offset", "max", "alone RMS", "alone limit",
                    "saturated", "sums saturated"]:
            # a layer's name is never cut: the user looks it up in the model
            layers.add_column(col, justify="left" if col in ("layer", "ops") else "right",
                              min_width=min(longest, 48) if col == "layer" else None,
                              overflow="fold" if col in ("layer", "ops") else "ellipsis")
        for layer in report.layers:
            enters = (layer.added is not None and layer.added_limit is not None and layer.added_limit.rms > 0
                      and layer.added.rms >= ENTERS * layer.added_limit.rms)
            style = "bold" if enters else None
            layers.add_row(str(layer.index), layer.name, "+".join(layer.ops), f"{layer.ours.rms:.2f}",
                           f"{layer.limit.rms:.2f}", f"{layer.ours.offset:.2f}", f"{layer.limit.offset:.2f}",
                           f"{layer.ours.max:.1f}",
                           "-" if layer.added is None else f"{layer.added.rms:.2f}",
                           "-" if layer.added_limit is None else f"{layer.added_limit.rms:.2f}",
                           f"{layer.saturated:,}", "-" if layer.saturated_sums is None else f"{layer.saturated_sums:,}",
                           style=style)
        tables.append(layers)
    return tables


@app.command("accuracy")
def accuracy_command(
    model: Path = typer.Argument(..., help="The ONNX model (.onnx)."),
    arch: str = typer.Option(..., "--arch", "-a", help="Architecture: a preset name or a .tarch file."),
    calibrate: Path = typer.Option(None, "--calibrate", "-c",
                                   help="Calibration samples (.npz, as for 'systolix compile'): measure the calibrated compile."),
    inputs: Path = typer.Option(None, "--inputs", "-i",
                                help="Inputs to measure on (.npz, arrays named as the model's inputs, stacked on a leading "
                                     "axis); default: -n standard normal inputs."),
    count: int = typer.Option(32, "--count", "-n", min=1, max=100000, help="Random inputs to run (without --inputs)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    output: Path = typer.Option(None, "--output", "-o", help="Write report.html and accuracy.json into this folder."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    outputs_only: bool = typer.Option(False, "--outputs-only", help="Only the outputs' errors (one compile, faster)."),
    estimate_gains: bool = typer.Option(True, "--estimate-gains/--no-estimate-gains",
                                        help="Without --calibrate, measure the plain compile with gains estimated from the "
                                             "model itself (the default, as 'systolix compile') or without gains."),
) -> None:
    """Compile MODEL and report, per layer, the error the compile adds against the float model and
    against FP16BP8's limit (every tensor rounded, products exact), the layers that saturate, and
    the outputs' RMS/max error and class agreement."""
    from systolix.accuracy import measure
    from systolix.cli.common import check_output_dir, require_file
    from systolix.frontend import FrontendError

    if not model.exists():
        raise FrontendError(f"{model}: no such ONNX file")
    require_file(model, "ONNX file")
    if calibrate is not None:
        require_file(calibrate, "calibration file (.npz)")
    if inputs is not None:
        require_file(inputs, "inputs file (.npz)")
    if output is not None:
        check_output_dir(output, "accuracy report")
        from systolix.accuracy.report import require_matplotlib
        require_matplotlib()
    architecture = resolve_arch(arch)
    progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=err_console,
                        transient=True, disable=not err_console.is_terminal)
    with progress:
        task = progress.add_task(f"measuring {model.name}", total=None)

        def on_step(what: str, done: int, total: int) -> None:
            progress.update(task, description=what, completed=done, total=total)

        report = measure(model, architecture, inputs=inputs, count=count, seed=seed, calibration=calibrate,
                         per_layer=not outputs_only, progress=on_step, estimate_gains=estimate_gains)
        report.arch = arch
        if output is not None:
            from systolix.accuracy.report import write_report

            progress.update(task, description="writing the report", completed=0, total=None)
            html_path, json_path = write_report(output, report)
    if as_json:
        print(json.dumps(report.to_json()))
    else:
        for table in _tables(report):
            console.print(table)
    if output is not None and not as_json:
        console.print(f"wrote {html_path} and {json_path}")
