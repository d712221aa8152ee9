"""``compile_model``: an ONNX model and an architecture to a runnable, saveable compiled model.

The model goes through the passes of ``systolix.compiler.passes`` (``PASSES``), run by the
driver (``systolix.compiler.driver``): host placement, partition into segments, each accelerator
segment lowered to HIR, optimised, planned, emitted and encoded. A model with no host part is a
single plain Tensil ``.tmodel``/``.tprog``/``.tdata``; otherwise the top-level ``.tmodel`` lists
the segments under ``systolix.segments`` (``docs/tmodel-extension.md``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import onnx

from systolix.arch import Architecture, Board, get_architecture
from systolix.arch.presets import BOARDS
from systolix.artifacts import ProgramRef, TModel
from systolix.backend import Artifacts
from systolix.compiler.batch import free_batch
from systolix.compiler.calibration import calibration_samples
from systolix.compiler.context import TUNES, CompileContext
from systolix.compiler.driver import run_passes
from systolix.compiler.errors import UnsupportedOpError
from systolix.compiler.output_offsets import measure_output_offsets
from systolix.compiler.program import Program, Segment
from systolix.errors import SystolixError
from systolix.frontend import FrontendError, graph_from_model, import_onnx
from systolix.ir import Graph
from systolix.planning.errors import STRATEGIES, PoolWindowsDoNotFit
from systolix.runtime.model import Model
from systolix.runtime.partitioned import PartitionedModel


@dataclass
class CompileSummary:
    """What the compile summary prints."""

    model: str
    arch: Architecture
    strategy: str
    segments: list[Segment]
    placement: dict[str, str]
    seconds: float
    consts_vectors: int = 0
    """constants of every accelerator program together"""
    consts_peak: int = 0
    """the largest one program's constants (what DRAM1 must hold at a time)"""
    dram0_vectors: int = 0
    local_peak: int = 0
    acc_peak: int = 0
    instructions: int = 0
    macs: int = 0
    layers: list = field(default_factory=list)
    placement_ops: dict[str, tuple[str, str]] = field(default_factory=dict)
    """node name -> (op type, where it runs)"""
    host_reasons: dict[str, str] = field(default_factory=dict)
    """node name -> why the accelerator does not run it (host nodes only)"""
    calibration_samples: int = 0
    gains: dict[str, Any] = field(default_factory=dict)
    """conv layer name -> per output channel exponent of its amplified weights (calibrated compiles)"""
    conv_layers: int = 0
    """conv layers, and the parts merged into them (``postops.AddPart``: each has its own gains)"""
    rounded: list[str] = field(default_factory=list)
    """conv layers whose weights calibration rounded (GPTQ), by name"""
    split_layers: dict[str, int] = field(default_factory=dict)
    """nodes too large for DRAM1, split by output channels: node name -> slices"""
    batch: int = 1
    """images each program runs (``--batch``); ``macs`` counts all of them"""
    unfused_pools: str | None = None
    """why max pools were not fused into the convs before them (``fuse_pools`` asked for but a
    tile too small for a pool window), or None"""
    output_offsets: dict[str, Any] = field(default_factory=dict)
    """calibrated compiles: per model output, each channel's mean error on the samples (real
    scale) that ``systolix.hir_passes.correct_output_offsets`` took out of its bias"""
    tune: str = "tensil"
    """the TCU the plans were priced for (``compile_model``'s ``tune``)"""
    batch_parts: str | None = None
    """batch programs with parts merged or not: which was kept, with each program's clocks under
    the latency model (None: nothing to choose)"""

    @property
    def host_nodes(self) -> list[str]:
        return [n for n, where in self.placement.items() if where == "host"]

    @property
    def constant_cuts(self) -> int:
        """Places where the model was cut because the constants exceed DRAM1: accelerator
        programs that follow another accelerator program."""
        kinds = [s.kind for s in self.segments]
        return sum(1 for a, b in zip(kinds, kinds[1:]) if a == b == "accelerator")


class CompiledMixin:
    """What a freshly compiled model adds to a loaded one: its files and its compile summary."""

    artifacts: dict[str, bytes]
    summary: CompileSummary
    tmodel_name: str
    merged_into: set[str] | None = None
    """a batch program compiled with its parts merged (``compile_model``'s choice): the layers
    they were merged into; None otherwise"""

    def save(self, directory: str | Path) -> Path:
        """Write the compiled files into ``directory`` (each atomically, the ``.tmodel`` last)."""
        a = Artifacts(self.tmodel_name[: -len(".tmodel")], dict(self.artifacts))
        return a.save(directory)


class CompiledModel(CompiledMixin, Model):
    """A compiled model running wholly on the accelerator (``systolix.runtime.Model``) plus ``save``."""


class CompiledPartitionedModel(CompiledMixin, PartitionedModel):
    """A compiled model with host segments (``PartitionedModel``) plus ``save``."""


def _partitioned_manifest(name: str, arch: Architecture, graph: Graph, segments: list[Segment], placement: dict) -> bytes:
    entries = []
    for seg in segments:
        entry: dict[str, Any] = {"kind": seg.kind, "inputs": seg.inputs, "outputs": seg.outputs,
                                 "nodes": [graph.nodes[i].name for i in seg.nodes]}
        if seg.kind == "host":
            entry["onnx"] = f"{seg.name}.onnx"
        else:
            entry["tmodel"] = f"{seg.name}.tmodel"
        entries.append(entry)

    def io(names):
        return [{"name": n, "shape": list(graph.tensor(n).shape), "layout": None} for n in names]

    manifest = TModel(
        name=name,
        prog=ProgramRef(file_name=f"{name}.tprog", size=0),
        consts=[],
        inputs=[],
        outputs=[],
        arch=arch,
        systolix={"version": 1, "inputs": io(graph.inputs), "outputs": io(graph.outputs), "layers": [],
                  "segments": entries, "placement": placement},
    )
    return json.dumps(manifest.to_json_dict(), separators=(",", ":")).encode()


def _safe_name(text: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
    return keep.strip("._") or "model"


def _summary(source: str, arch: Architecture, strategy: str, program: Program, placement: dict, samples) -> CompileSummary:
    graph = program.graph
    summary = CompileSummary(source, arch, strategy, program.segments, placement, seconds=0.0)
    summary.placement_ops = {n.name: (n.op_type, placement.get(n.name, "accelerator")) for n in graph.nodes}
    summary.host_reasons = {graph.nodes[i].name: reason for i, reason in graph.host.items()}
    for seg in program.segments:
        if seg.kind != "accelerator":
            continue
        lir, hir = seg.lir, seg.hir
        summary.consts_vectors += int(lir.consts.shape[0])
        summary.consts_peak = max(summary.consts_peak, int(lir.consts.shape[0]))
        summary.dram0_vectors = max(summary.dram0_vectors, lir.dram0_vectors)
        summary.local_peak = max(summary.local_peak, lir.local_peak)
        summary.acc_peak = max(summary.acc_peak, lir.acc_peak)
        summary.instructions += len(lir.instructions)
        summary.macs += sum(r.macs for r in lir.layers)
        summary.layers.extend(lir.layers)
        summary.gains.update(hir.gains)
        summary.rounded.extend(hir.rounded)
        # A part merged into its layer (``postops.AddPart``) keeps its own gains: it counts.
        summary.conv_layers += sum(1 + sum(1 for p in layer.post_ops if p.kind == "add_part")
                                   for layer in hir.layers if layer.kind == "conv")
    summary.calibration_samples = len(samples) if samples else 0
    return summary


def compile_model(model_or_path: Any, arch: Architecture | str, *, strategy: str = "local-isolated", host: bool = True,
                  listing: bool = False, name: str | None = None,
                  progress: Callable[[str, int, int], None] | None = None,
                  calibration: Any = None, split: bool = True, dump_ir: str | Path | None = None,
                  pack_inputs: bool = True, pack_width: bool = True, estimate_gains: bool = True,
                  pipeline: bool = True, schedule: bool = True, batch: int | None = None, tune: str = "tensil",
                  fuse_pools: bool = True, fuse_preactivations: bool | None = None, merge_residual_convs: bool = True,
                  merge_parts: bool = True,
                  subsample_strided_reads: bool = True, split_maps: bool = True,
                  correct_offsets: bool = True, output_offsets: dict | None = None) -> CompiledModel | CompiledPartitionedModel:
    """Compile an ONNX model (path, bytes or ``onnx.ModelProto``) for ``arch`` (preset name,
    ``.tarch`` path or ``Architecture``).

    ``strategy``: one of ``STRATEGIES``; ``host=False`` makes an op the accelerator cannot run an
    error instead of a host segment; ``listing`` adds the assembly listing (``.tasm``).
    ``calibration``: sample inputs (a dict of arrays, stacked samples allowed, a list of dicts,
    or an ``.npz`` path); with them each layer's weights are amplified as far as the samples'
    accumulator ranges allow (``systolix.hir_passes.amplify_weights``), for smaller rounding errors.
    ``split``: constants larger than DRAM1 cut the model into several accelerator programs run
    one after another (``False``: an error instead). ``progress(what, done, total)``: ``what``
    is ``"calibrating SEGMENT"`` (float runs on the samples) or ``"scheduling SEGMENT"`` (layers).
    ``dump_ir``: a directory to write every IR after every pass into, as text (and check each).
    ``pack_inputs``: let the driver pack a few-channel input for the conv that reads it
    (``systolix.hir_passes.pack_inputs``; ``False``: every input in the plain layout).
    ``pack_width``: store tensors of at most N/2 channels two pixels a vector, every layer around
    them rewritten on the packed grid (``systolix.hir_passes.pack_width``; ``False``: one pixel a vector).
    ``estimate_gains``: without calibration data, amplify each output channel's weights by gains
    sized from ranges estimated from the model itself (``systolix.hir_passes.estimate_ranges``);
    on by default, ``False`` for the plain weights (one binary point, no gains).
    ``pipeline``: let conv layers double-buffer across the two lock halves of local memory when
    the planner's cost model prefers it (``False``: the plain single-buffered plans).
    ``tune``: the TCU the plans are priced for, one of ``TUNES``: ``"tensil"`` (Tensil's, the
    default: its decoder runs DRAM moves and the array's work one after another, so plans are
    single-buffered where that lets a tile hold more) or ``"rtl"`` (the one ``systolix rtl``
    generates, which overlaps them: double-buffered plans pay there). The program runs on both.
    ``schedule``: let consecutive conv tiles alternate between two accumulator buffers where
    they fit, and interleave each tile's post-ops and save with the next tile's weight loads
    (``systolix.codegen.schedule``; ``False``: tiles one after another, as emitted).
    ``fuse_pools``: fold a constant zero Pad into the max pool reading it (the pads count as
    zeros) and save a 1x1 max pool of stride s (a subsampling) of a conv's output from that
    conv's tail (``systolix.hir_passes.fuse_pools``; ``False``: layers of their own).
    ``fuse_preactivations``: compute a per-channel affine layer (a pre-activation batch norm and
    ReLU) in the tail of the conv computing its input, saving the raw output beside it when
    something else reads it (``systolix.hir_passes.fuse_preactivations``); ``None`` (the
    default): where activations live in DRAM (strategies local-isolated and local-consts), whose
    round trip it saves; with local-vars the layer's input is often on chip and the tail's SIMD
    work costs more than the layer (README, Latency).
    ``merge_residual_convs``: compute two convs of the same geometry whose outputs a residual add
    sums (a projection shortcut and the block's last conv) as one layer whose MatMuls accumulate
    both (``systolix.hir_passes.merge_residual_convs``; ``False``: the second adds the first's
    saved output).
    ``merge_parts``: sum each part of a long reduction (``split_maps``) beside its layer's tile,
    its weight blocks through the array into a second tile and its product added by a SIMD
    multiply, instead of in a layer of its own whose partial map goes through DRAM
    (``systolix.hir_passes.merge_reduction_parts``; the same outputs, bit for bit). A batch
    program with such parts is compiled with them as layers, all merged, and merged only into the
    layers the estimate times faster merged, and the one the latency model of the architecture's
    board times fastest is kept (``summary.batch_parts`` says which, with each one's clocks;
    ``choice_board``).
    ``subsample_strided_reads``: compute a pointwise layer whose output only strided 1x1 convs read
    (a pre-activation batch norm and ReLU, a block's last 1x1 conv and residual add) at the pixels
    they read, or save such a tensor subsampled from its producer's tail
    (``systolix.hir_passes.subsample_strided_reads``).
    ``split_maps``: sum a long reduction over a map in parts, each with its own gains, where the
    parts' saves and adds cost at most ``MAP_PART_COST`` of the array's time on it
    (``systolix.hir_passes.split_long_reductions``; ``False``: every map's reduction whole, a few
    percent faster and less accurate; one-pixel heads are split either way).
    ``correct_offsets``: with ``calibration``, run the samples through the compiled program and
    compile again with each output's mean error on them taken out of its layer's bias
    (``systolix.hir_passes.correct_output_offsets``; ``False``: one compile, as before).
    ``output_offsets``: take these out instead (another compile's ``summary.output_offsets``, say
    of the same model with more outputs: ``systolix accuracy``'s per-layer compile), in one run.
    ``batch``: images one program runs (1 to ``systolix.compiler.batch.MAX_BATCH``), each weight
    tile streaming all of them; default 1, or the batch the model's inputs fix (a model exported
    with batch 4 compiles as a batch-4 program). The outputs are bit for bit the batch-1 program's.
    Returns a model with ``.run(inputs)``, ``.save(directory)`` and ``.summary``.
    """
    started = time.perf_counter()
    if not isinstance(arch, Architecture):
        arch = get_architecture(arch)
    if strategy not in STRATEGIES:
        raise SystolixError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")
    if tune not in TUNES:
        raise SystolixError(f"unknown tune {tune!r} (expected one of {', '.join(TUNES)})")
    model_or_path, batch, original = free_batch(model_or_path, batch)
    if original is None:
        onnx_model, source, shapes = import_onnx(model_or_path)
    else:
        try:
            onnx_model, _, shapes = import_onnx(model_or_path)
        except FrontendError as e:
            raise FrontendError(f"{original}: the inputs fix batch {batch}, and the model does not run with a batch of 1 "
                                f"({str(e).split(': ', 1)[-1]}); export it with a free batch axis or batch 1, then compile "
                                f"with --batch {batch}") from None
        source = original
        model_or_path = original
    graph = graph_from_model(onnx_model, source, shapes)
    if name is None:
        stem = Path(source).stem if not isinstance(model_or_path, (onnx.ModelProto, bytes, bytearray)) else (graph.name or "model")
        name = f"{_safe_name(stem)}_{_safe_name(str(arch.array_size))}x{arch.array_size}"
    samples = None if calibration is None else calibration_samples(calibration, graph)
    correcting = samples is not None and correct_offsets and output_offsets is None and arch.data_type.is_fixed
    memo: dict | None = {} if correcting else None

    def context(fuse_pools: bool, output_offsets: dict | None = None) -> CompileContext:
        return CompileContext(arch, strategy, samples, host, split, listing, name, progress=progress, onnx_model=onnx_model,
                              pack_inputs=pack_inputs, pack_width=pack_width, estimate_gains=estimate_gains, pipeline=pipeline,
                              schedule=schedule, tune=tune, batch=batch, fuse_pools=fuse_pools,
                              fuse_preactivations=fuse_preactivations, merge_residual_convs=merge_residual_convs,
                              merge_parts=merge_parts, subsample_strided_reads=subsample_strided_reads, split_maps=split_maps,
                              output_offsets=output_offsets, memo=memo)

    ctx = context(fuse_pools, output_offsets)
    unfused_pools = None
    try:
        program = run_passes(graph, ctx, dump_dir=None if correcting else dump_ir, check=dump_ir is not None)
    except PoolWindowsDoNotFit as e:
        # A fused pool needs whole windows in a tile; where a layer's tile holds fewer rows (a
        # case fuse_pools' band estimate missed) the pools stay layers of their own, as before fusion.
        unfused_pools = e.reason
        ctx = context(False, output_offsets)
        program = run_passes(graph, ctx, dump_dir=None if correcting else dump_ir, check=dump_ir is not None)
    obj = _compiled(name, arch, strategy, source, program, samples, ctx, unfused_pools, batch, started)
    obj.summary.output_offsets = dict(output_offsets or {})
    if correcting:
        if progress:
            progress("correcting output offsets", 0, 1)
        offsets = measure_output_offsets(obj, onnx_model, graph, samples)
        if offsets or dump_ir is not None:
            # The same passes again (the memoised ones' IRs taken as they were), the offsets taken out.
            ctx = context(ctx.fuse_pools, offsets)
            program = run_passes(graph, ctx, dump_dir=dump_ir, check=dump_ir is not None)
            obj = _compiled(name, arch, strategy, source, program, samples, ctx, unfused_pools, batch, started)
            obj.summary.output_offsets = offsets
        if progress:
            progress("correcting output offsets", 1, 1)
    if batch > 1 and ctx.merged_parts:
        # Parts merged into their layers change which plans share weight tiles across images
        # (``merge_reduction_parts``' note): programs with them merged too, and per layer the
        # faster kept.
        offsets, fuse, ctx_offsets = obj.summary.output_offsets, ctx.fuse_pools, ctx.output_offsets

        def merging(merge_only: set[str]) -> CompileContext:
            c = context(fuse, ctx_offsets)
            c.merge_batch_parts, c.merge_only = True, merge_only
            return c

        def variant(merge_only: set[str]):
            c = merging(merge_only)
            if progress:
                c.progress = lambda what, done, total: progress(f"{what}, parts merged", done, total)
            compiled = _compiled(name, arch, strategy, source, run_passes(graph, c), samples, c, unfused_pools, batch, started)
            compiled.summary.output_offsets = offsets
            compiled.merged_into = set(c.merged_parts)
            return compiled

        # Only the fastest program so far is kept (a batch of a large model's LIR takes gigabytes).
        candidates, taking, board = [obj], dict(ctx.merged_parts), choice_board(arch, tune)
        del obj, program
        obj = _choose_batch_parts(candidates, taking, variant, board)
        if dump_ir is not None and obj.merged_into:
            # The IRs dumped are the first program's: the kept one's passes again, dumped and checked.
            run_passes(graph, merging(obj.merged_into), dump_dir=dump_ir, check=True)
        obj.summary.seconds = time.perf_counter() - started
    return obj


def _timed(compiled, board: Board) -> tuple[float, dict[str, float]]:
    """The program's clocks under ``board``'s latency model, and the clocks each layer adds to
    them (``LayerEstimate.cycles``) by the estimate's layer name (in a model cut by its constants,
    ``segment/layer``); the estimate itself (its timeline: large for a batch of a large model) is
    dropped."""
    est = program_estimate(compiled, board)
    clocks: dict[str, float] = {}
    for layer in est.layers or []:
        clocks[layer.name] = clocks.get(layer.name, 0.0) + layer.cycles
    return est.cycles, clocks


def _merging(variant, layers: set[str]):
    """``(variant(layers), None)``, leaving out each layer whose merged tile splits a fused pool's
    windows (``PoolWindowsDoNotFit``); ``(None, why)`` if no layer is left or another does not fit."""
    while layers:
        try:
            return variant(layers), None
        except PoolWindowsDoNotFit as e:
            if e.layer not in layers:
                return None, e.reason
            layers = layers - {e.layer}
        except SystolixError as e:
            return None, str(e)
    return None, "every layer's merged tile splits a fused pool's windows"


def _choose_batch_parts(candidates: list, taking: dict[str, list[str]], variant, board: Board):
    """The batch program ``candidates`` holds (its parts as layers; it could merge ``taking``:
    layer -> its parts), the program with every part merged (``variant(layers)`` merges into
    ``layers``; its ``merged_into`` says where it did), or one merging only into the layers that
    the latency model on ``board`` times faster merged than with their parts as layers: whichever
    runs in the fewest clocks. Only the fastest so far is held (``candidates``, popped);
    ``summary.batch_parts`` says which, with the clocks."""

    def label(compiled) -> str:
        n = len(compiled.merged_into)
        return "parts merged" if n == len(taking) else f"parts merged into {n} of {len(taking)} layers"

    def layer_clocks(table: dict[str, float], layer: str) -> float | None:
        hits = [v for k, v in table.items() if k == layer or k.endswith("/" + layer)]
        return sum(hits) if hits else None

    best, best_label = candidates.pop(), "parts as layers"
    merged, why = _merging(variant, set(taking))
    if merged is None:
        best.summary.batch_parts = f"parts as layers (merged: {why})"
        return best
    (apart_clocks, by_apart), (merged_clocks, by_merged) = _timed(best, board), _timed(merged, board)
    clocks = {best_label: apart_clocks, label(merged): merged_clocks}
    took = merged.merged_into
    if merged_clocks < apart_clocks:
        best, best_label = merged, label(merged)
    del merged
    faster = set()
    for layer in took:
        m, a = layer_clocks(by_merged, layer), layer_clocks(by_apart, layer)
        a_parts = [layer_clocks(by_apart, p) for p in taking[layer]]
        if m is not None and a is not None and None not in a_parts and m < a + sum(a_parts):
            faster.add(layer)
    if faster and faster != took:
        mixed, _ = _merging(variant, faster)
        if mixed is not None:
            clocks[label(mixed)] = _timed(mixed, board)[0]
            if clocks[label(mixed)] < clocks[best_label]:
                best, best_label = mixed, label(mixed)
    others = ", ".join(f"{k} {v:,.0f}" for k, v in clocks.items() if k != best_label)
    best.summary.batch_parts = f"{best_label}: {clocks[best_label]:,.0f} clocks against {others} ({board.name} latency model)"
    return best


def choice_board(arch: Architecture, tune: str = "tensil") -> Board:
    """The board whose latency model chooses between two programs for ``arch``: the preset board
    of that architecture (``ultra96v2``: the Ultra96-V2), else the architecture at 100 MHz with
    128-bit DRAM ports; with ``tune="rtl"``, the ``rtl`` board (``systolix rtl``'s TCU) with ``arch``."""
    if tune == "rtl":
        return BOARDS["rtl"].with_architecture(arch)
    for board in BOARDS.values():
        if board.timing == "tensil" and board.architecture == arch:
            return board
    return Board(name=f"{arch.array_size}x{arch.array_size} at 100 MHz", architecture=arch, clock_mhz=100.0,
                 dram_bus_bits=128, dram_peak_gbps=1.6)


def program_estimate(compiled, board: Board):
    """The latency model's estimate of one run of ``compiled`` on ``board`` (every program of a
    model cut by its constants, in a row; host segments untimed)."""
    from systolix.perf.estimate import estimate, estimate_partitioned

    if isinstance(compiled, CompiledModel):
        return estimate(compiled.program, board, model=compiled.manifest)  # in memory, its layer map included
    with tempfile.TemporaryDirectory(prefix="systolix-choice-") as tmp:
        return estimate_partitioned(compiled.save(tmp), board, time_host=False)[0]


def program_clocks(compiled, board: Board) -> float:
    """Accelerator clocks of one run of ``compiled`` under ``board``'s latency model."""
    return program_estimate(compiled, board).cycles


def _compiled(name: str, arch: Architecture, strategy: str, source: str, program: Program, samples, ctx,
              unfused_pools: str | None, batch: int, started: float) -> CompiledModel | CompiledPartitionedModel:
    """The compiled model of the passes' ``program``: its files, manifest and summary."""
    graph = program.graph  # (a layer too large for DRAM1 is split into several nodes)
    segments = program.segments
    placement = {}
    for seg in segments:
        for i in seg.nodes:
            placement[graph.nodes[i].name] = seg.kind
    files: dict[str, bytes] = {}
    for seg in segments:
        if seg.kind == "host":
            files[f"{seg.name}.onnx"] = seg.onnx_bytes
        else:
            files.update(seg.ir.files)
    partitioned = len(segments) > 1 or segments[0].kind == "host"
    if partitioned:
        files[f"{name}.tprog"] = b""
        files[f"{name}.tmodel"] = _partitioned_manifest(name, arch, graph, segments, placement)
    # Reorder so that the top-level manifest comes last when saving.
    top = f"{name}.tmodel"
    files = {k: v for k, v in files.items() if k != top} | {top: files[top]}
    summary = _summary(source, arch, strategy, program, placement, samples)
    summary.split_layers = dict(ctx.split_layers)
    summary.tune = ctx.tune
    summary.unfused_pools = unfused_pools
    summary.batch = batch
    summary.seconds = time.perf_counter() - started
    tmp = Path(tempfile.mkdtemp(prefix="systolix-compile-"))
    try:
        Artifacts(name, files).save(tmp)
        manifest = TModel.load(tmp / top)
        # The runtime classes read every file in their constructor: the directory can go after.
        if partitioned:
            obj = CompiledPartitionedModel(manifest, tmp, top)
        else:
            obj = CompiledModel(manifest, tmp, top)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    obj.artifacts = files
    obj.summary = summary
    obj.tmodel_name = top
    return obj


__all__ = ["STRATEGIES", "CompileContext", "CompileSummary", "CompiledModel", "CompiledPartitionedModel", "UnsupportedOpError",
           "choice_board", "compile_model", "program_clocks"]
