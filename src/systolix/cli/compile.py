"""``systolix compile``: an ONNX model to Tensil-compatible files, with a compile summary."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from systolix.cli import app
from systolix.cli.common import console, err_console, resolve_arch


def summary_tables(summary) -> list[Table]:
    """Tensil-style compile summary: memories, totals, layers, node placement."""
    arch = summary.arch
    N = arch.array_size
    vb = arch.vector_bytes
    tuned = "the rtl TCU" if summary.tune == "rtl" else "Tensil's TCU"
    mem = Table(title=f"Compiled {summary.model} for {N}x{N} {arch.data_type.name} ({summary.strategy}, tuned for {tuned})",
                show_lines=False)
    mem.add_column("memory")
    mem.add_column("used (vectors)", justify="right")
    mem.add_column("depth (vectors)", justify="right")
    mem.add_column("used (bytes)", justify="right")
    consts_local = summary.strategy in ("local-consts", "local-vars-and-consts")
    consts_memory, consts_depth = ("local memory", arch.local_depth) if consts_local else ("DRAM1", arch.dram1_depth)
    consts_where = "local (consts)" if consts_local else "DRAM1 (consts)"
    if summary.constant_cuts:
        consts_where += ", largest program"
    rows = [
        ("DRAM0 (vars)", summary.dram0_vectors, arch.dram0_depth, summary.dram0_vectors * vb),
        (consts_where, summary.consts_peak, consts_depth, summary.consts_peak * vb),
        ("local (peak per layer)", summary.local_peak, arch.local_depth, summary.local_peak * vb),
        ("accumulators (peak)", summary.acc_peak, arch.accumulator_depth, summary.acc_peak * N * 4),
    ]
    for name, used, depth, nbytes in rows:
        mem.add_row(name, f"{used:,}", f"{depth:,}", f"{nbytes:,}")

    totals = Table(title="Totals", show_header=False)
    totals.add_column("")
    totals.add_column("", justify="right")
    acc_segments = sum(1 for s in summary.segments if s.kind == "accelerator")
    host_segments = sum(1 for s in summary.segments if s.kind == "host")
    totals.add_row("layers", f"{len(summary.layers):,}")
    totals.add_row("stages", f"{sum(r.stages for r in summary.layers):,}")
    totals.add_row("partitions", f"{sum(r.partitions for r in summary.layers):,}")
    totals.add_row("instructions", f"{summary.instructions:,}")
    totals.add_row("useful MACs", f"{summary.macs:,} ({summary.macs / 1e6:.2f} M)" + (f" for {summary.batch} images" if summary.batch > 1 else ""))
    if summary.batch > 1:
        totals.add_row("batch", f"{summary.batch} images a run, one after another in each input and output span")
    totals.add_row("segments", f"{acc_segments} accelerator, {host_segments} host")
    if summary.constant_cuts:
        totals.add_row("constants", f"{summary.consts_vectors:,} vectors, more than {consts_memory}'s {consts_depth:,}: "
                                    f"{summary.constant_cuts + 1} programs in a row, each with its own constants")
    if summary.unfused_pools:
        totals.add_row("max pools", f"layers of their own, not fused into their convs' tails: {summary.unfused_pools}")
    if summary.batch_parts:
        totals.add_row("batch parts", summary.batch_parts)
    if summary.split_layers:
        totals.add_row("split layers", ", ".join(f"{name} into {k} slices of output channels" for name, k in summary.split_layers.items()))
    exps = [round(float(k), 2) for g in summary.gains.values() for k in g]  # estimated gains need not be whole
    span = f", gains 2^{min(exps):g} to 2^{max(exps):g}" if exps else ""
    if summary.calibration_samples:
        totals.add_row("amplified weights", f"{len(summary.gains)} of {summary.conv_layers} conv layers{span} "
                                            f"(calibrated on {summary.calibration_samples} samples)")
        totals.add_row("rounded weights", f"{len(summary.rounded)} of {summary.conv_layers} conv layers rounded to fit the "
                                          "samples (GPTQ), the rest to nearest")
        if summary.output_offsets:
            lsb = summary.arch.data_type.resolution
            rms = {k: float(np.sqrt(np.mean(np.square(v)))) / lsb for k, v in summary.output_offsets.items()}
            totals.add_row("output offsets", ", ".join(f"{k}: {v:.2f} LSB RMS" for k, v in rms.items())
                           + " (each channel's mean error on the samples, taken out of its bias; --no-correct-offsets: kept)")
    elif summary.gains:
        totals.add_row("amplified weights", f"{len(summary.gains)} of {summary.conv_layers} conv layers{span} "
                                            "(estimated from the model itself; --no-estimate-gains: none)")
    else:
        totals.add_row("amplified weights", "none (no calibration data: --calibrate; gains estimated from the model unless --no-estimate-gains)")
    totals.add_row("compile time", f"{summary.seconds:.2f} s")

    layers = Table(title="Layers")
    columns = ["#", "layer", "ops", "instructions", "stages", "partitions", "MACs"] + (["gain"] if summary.calibration_samples or summary.gains else [])
    for col in columns:
        layers.add_column(col, justify="left" if col in ("layer", "ops") else "right")
    for k, r in enumerate(summary.layers):
        row = [str(k), r.name, "+".join(r.ops), f"{r.end - r.first:,}", str(r.stages), str(r.partitions), f"{r.macs:,}"]
        if summary.calibration_samples:
            g = summary.gains.get(r.name)
            row.append("" if g is None else (f"2^{int(g.min())}" if g.min() == g.max() else f"2^{int(g.min())}..2^{int(g.max())}"))
        layers.add_row(*row)

    where = Table(title="Where the nodes run")
    where.add_column("op")
    where.add_column("accelerator", justify="right")
    where.add_column("host", justify="right")
    where.add_column("host nodes")
    by_op: dict[str, list] = {}
    for node, (op, place) in summary.placement_ops.items():
        entry = by_op.setdefault(op, [0, []])
        if place == "host":
            entry[1].append(node)
        else:
            entry[0] += 1
    for op, (on_acc, host) in sorted(by_op.items()):
        shown = ", ".join(host[:4]) + (f", ... ({len(host)} in all)" if len(host) > 4 else "")
        where.add_row(op, str(on_acc), f"[bold yellow]{len(host)}[/]" if host else "0", shown)
    tables = [mem, totals, layers, where]
    if summary.host_reasons:
        # Why each host node is not on the accelerator, in the support table's words (its limits).
        why = Table(title="Why on the host")
        for col in ("node", "op", "reason"):
            why.add_column(col)
        for node, reason in summary.host_reasons.items():
            why.add_row(node, summary.placement_ops.get(node, ("?",))[0], reason)
        tables.append(why)
    return tables


@app.command("compile")
def compile_command(
    model: Path = typer.Argument(..., help="The ONNX model (.onnx)."),
    arch: str = typer.Option(..., "--arch", "-a", help="Architecture: a preset name (pynqz1, ultra96v2, zcu104, ...) or a .tarch file."),
    output: Path = typer.Option(Path("."), "--output", "-o", help="Directory for the .tmodel, .tprog and .tdata files."),
    strategy: str = typer.Option("local-isolated", "--strategy", "-s",
                                 help="Memory strategy: local-isolated, local-vars, local-consts, local-vars-and-consts."),
    no_host: bool = typer.Option(False, "--no-host", help="Fail on ops the accelerator cannot run instead of running them on the host."),
    asm: bool = typer.Option(False, "--asm", help="Also write the assembly listing (.tasm)."),
    name: str = typer.Option(None, "--name", help="Base name of the output files (default: MODEL_NxN)."),
    calibrate: Path = typer.Option(None, "--calibrate", "-c",
                                   help="Sample inputs (.npz, arrays named as the model's inputs, samples stacked on a leading "
                                        "axis; a hundred or more, like the data the model will see): amplify each layer's "
                                        "weights as far as their accumulator ranges allow."),
    no_split: bool = typer.Option(False, "--no-split",
                                  help="Fail when the constants exceed DRAM1 instead of cutting the model into programs run in a row "
                                       "(and a layer too large for DRAM1 by output channels)."),
    estimate_gains: bool = typer.Option(True, "--estimate-gains/--no-estimate-gains",
                                        help="Without calibration data, amplify each layer's weights by gains sized from ranges "
                                             "estimated from the model itself (its batch-norm statistics and float runs on "
                                             "synthetic inputs); on by default, --no-estimate-gains for plain weights."),
    no_pack_input: bool = typer.Option(False, "--no-pack-input",
                                       help="Keep every input in the plain layout (by default a few-channel input read by one "
                                            "conv is packed for it: space-to-depth, im2col or row windows, docs/tmodel-extension.md)."),
    no_pack_width: bool = typer.Option(False, "--no-pack-width",
                                       help="Keep every tensor one pixel a vector (by default tensors of at most half a vector's "
                                            "channels are stored two pixels a vector and the layers around them rewritten so)."),
    no_schedule: bool = typer.Option(False, "--no-schedule",
                                     help="Emit conv tiles one after another (by default consecutive tiles alternate between "
                                          "two accumulator buffers where they fit, and each tile's post-ops and save are "
                                          "interleaved with the next tile's weight loads)."),
    no_pipeline: bool = typer.Option(False, "--no-pipeline",
                                     help="Plan every conv single-buffered (by default, with --tune rtl, a conv may be "
                                          "pipelined over the two halves of local memory, a DRAM move into one overlapping "
                                          "the array's work on the other)."),
    tune: str = typer.Option("tensil", "--tune",
                             help="The TCU to price plans for: tensil (Tensil's bitstreams: its decoder runs DRAM moves and "
                                  "the array's work one after another, so convs are single-buffered where that lets a tile "
                                  "hold more) or rtl (the TCU `systolix rtl` generates, which overlaps them: convs may "
                                  "double-buffer). The program runs on both; only its speed differs."),
    no_fuse_pools: bool = typer.Option(False, "--no-fuse-pools",
                                       help="Keep a zero Pad before a max pool, and a 1x1 strided max pool of a conv's output, as "
                                            "layers of their own (by default the pool takes the pads as zeros, and the conv's tail "
                                            "saves the subsampled copy)."),
    fuse_preact: Optional[bool] = typer.Option(None, "--fuse-preact/--no-fuse-preact",  # noqa: UP045 (typer reads it)
                                     help="Compute each per-channel batch norm (+ReLU) that reads a conv's output in that conv's "
                                          "tail, from the accumulators, saving the raw output beside it when something else reads "
                                          "it (pre-activation ResNets). Default: with the strategies that keep activations in "
                                          "DRAM (local-isolated, local-consts), whose round trip it saves."),
    no_merge_residual_convs: bool = typer.Option(False, "--no-merge-residual-convs",
                                                 help="Keep two convs whose outputs a residual add sums as two layers (by "
                                                      "default, when they share their geometry, one layer accumulates both)."),
    no_merge_parts: bool = typer.Option(False, "--no-merge-parts",
                                        help="Compute each part of a long reduction summed in parts as a layer of its own "
                                             "whose partial map goes through DRAM (by default beside its layer's tile; a batch "
                                             "program both ways, the faster under the latency model kept; the "
                                             "outputs are the same)."),
    no_subsample_strided_reads: bool = typer.Option(False, "--no-subsample-strided-reads",
                                                    help="Compute and store every pixel of a tensor that only strided 1x1 "
                                                         "convs read (by default only the pixels they read)."),
    no_split_maps: bool = typer.Option(False, "--no-split-maps",
                                       help="Sum every conv's reduction over a map whole (by default a long one is summed "
                                            "in parts with gains of their own, for less rounding error at a few percent of "
                                            "its time)."),
    no_correct_offsets: bool = typer.Option(False, "--no-correct-offsets",
                                            help="With --calibrate, compile once (by default the samples run through the "
                                                 "compiled program and it is compiled again with each output channel's mean "
                                                 "error on them taken out of its bias)."),
    batch: int = typer.Option(None, "--batch", "-b", min=1, max=1024,
                              help="Images one program runs (1 to 1024): each weight tile loaded into the array streams every "
                                   "image (default 1, or the batch the model's inputs fix). The inputs and outputs hold the "
                                   "images one after another (docs/tmodel-extension.md)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the path of the written .tmodel."),
    dump_ir: Path = typer.Option(None, "--dump-ir",
                                 help="Write the graph, HIR, plan and LIR after every pass into this directory, as text "
                                      "(one folder per accelerator program)."),
) -> None:
    """Compile an ONNX model for a Tensil-compatible accelerator and print a compile summary."""
    from systolix.compiler import compile_model
    from systolix.errors import SystolixError
    from systolix.frontend import FrontendError

    from systolix.cli.common import check_output_dir, require_file

    if not model.exists():
        raise FrontendError(f"{model}: no such ONNX file")
    require_file(model, "ONNX file")
    check_output_dir(output, "compiled files")
    if calibrate is not None:
        require_file(calibrate, "calibration file (.npz)")
    if dump_ir is not None:
        check_output_dir(dump_ir, "IR dumps (--dump-ir)")
    architecture = resolve_arch(arch)
    progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                        TimeElapsedColumn(), console=err_console, transient=True,
                        disable=quiet or not err_console.is_terminal)
    with progress:
        task = progress.add_task(f"compiling {model.name}", total=None)

        def on_step(what: str, done: int, total: int) -> None:
            unit = "float runs" if what.startswith("calibrating") else "steps" if what.startswith("correcting") else "layers"
            progress.update(task, description=f"{what} ({unit})", completed=done, total=total)

        compiled = compile_model(model, architecture, strategy=strategy, host=not no_host, listing=asm, name=name, progress=on_step,
                                 calibration=calibrate, split=not no_split, dump_ir=dump_ir,
                                 pack_inputs=not no_pack_input, pack_width=not no_pack_width, estimate_gains=estimate_gains, schedule=not no_schedule,
                                 batch=batch, fuse_pools=not no_fuse_pools, pipeline=not no_pipeline, tune=tune,
                                 fuse_preactivations=fuse_preact, merge_residual_convs=not no_merge_residual_convs,
                                 merge_parts=not no_merge_parts,
                                 subsample_strided_reads=not no_subsample_strided_reads, split_maps=not no_split_maps,
                                 correct_offsets=not no_correct_offsets)
    path = compiled.save(output)
    if quiet:
        console.print(str(path))
        return
    for table in summary_tables(compiled.summary):
        console.print(table)
    written = sorted(output / f for f in compiled.artifacts)
    console.print("wrote " + ", ".join(str(p) for p in written))
    if dump_ir is not None:
        console.print(f"wrote the IR after every pass into {dump_ir}/")
