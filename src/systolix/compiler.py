"""``compile_model``: an ONNX model and an architecture to a runnable, saveable compiled model.

The model is split into segments in execution order: runs of nodes the accelerator can run
(each compiled by ``systolix.scheduler.pipeline.compile_graph`` into a Tensil program) and runs
it cannot (host subgraphs, run by onnxruntime), the way Xilinx's compiler partitions a graph
into DPU and CPU subgraphs. A model with no host part is a single plain Tensil
``.tmodel``/``.tprog``/``.tdata``; otherwise the top-level ``.tmodel`` lists the segments under
``systolix.segments`` (``docs/tmodel-extension.md``).
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

from systolix.arch import Architecture, get_architecture
from systolix.artifacts import ProgramRef, TModel
from systolix.calibration import calibration_samples, tensor_values
from systolix.backend import Artifacts
from systolix.errors import SystolixError
from systolix.frontend import graph_from_model, import_onnx
from systolix.ir import Graph
from systolix.runtime.model import Model
from systolix.runtime.partitioned import PartitionedModel
from systolix.scheduler.codegen import STRATEGIES, ConstantsDoNotFit, SchedulingError
from systolix.scheduler.lowering import Unsupported
from systolix.scheduler.pipeline import SegmentResult, compile_graph


class UnsupportedOpError(SystolixError):
    """With host fallback off, a node the accelerator cannot run."""


@dataclass
class Segment:
    """A run of nodes (indices into the graph) on the accelerator or on the host."""

    kind: str
    nodes: list[int]
    inputs: list[str]
    outputs: list[str]
    name: str = ""
    result: SegmentResult | None = None
    onnx_bytes: bytes | None = None


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
    calibration_samples: int = 0
    gains: dict[str, Any] = field(default_factory=dict)
    """conv layer name -> per output channel exponent of its amplified weights (calibrated compiles)"""
    conv_layers: int = 0
    rounded: list[str] = field(default_factory=list)
    """conv layers whose weights calibration rounded (GPTQ), by name"""

    @property
    def host_nodes(self) -> list[str]:
        return [n for n, where in self.placement.items() if where == "host"]

    @property
    def constant_cuts(self) -> int:
        """Places where the model was cut because the constants exceed DRAM1: accelerator
        programs that follow another accelerator program."""
        kinds = [s.kind for s in self.segments]
        return sum(1 for a, b in zip(kinds, kinds[1:]) if a == b == "accelerator")


def _split(graph: Graph, host: set[int], cuts: frozenset[int] | set[int] = frozenset()) -> list[Segment]:
    """Consecutive nodes with the same placement, with each segment's boundary tensors; a node
    in ``cuts`` starts a new segment (an accelerator program whose constants fit DRAM1)."""
    runs: list[Segment] = []
    for i, _ in enumerate(graph.nodes):
        kind = "host" if i in host else "accelerator"
        if runs and runs[-1].kind == kind and i not in cuts:
            runs[-1].nodes.append(i)
        else:
            runs.append(Segment(kind, [i], [], []))
    later_use: dict[str, int] = {}
    for k, seg in enumerate(runs):
        for i in seg.nodes:
            for t in graph.nodes[i].inputs:
                if t:
                    later_use[t] = max(later_use.get(t, -1), k)
    outputs = set(graph.outputs)
    for k, seg in enumerate(runs):
        produced: list[str] = []
        for i in seg.nodes:
            n = graph.nodes[i]
            for t in n.inputs:
                if t and t not in produced and t not in seg.inputs and graph.const(t) is None:
                    seg.inputs.append(t)
            produced.extend(o for o in n.outputs if o)
        seg.outputs = [t for t in produced if t in outputs or later_use.get(t, -1) > k]
    return runs


def _subgraph(graph: Graph, seg: Segment, name: str) -> Graph:
    return Graph(name, graph.tensors, [graph.nodes[i] for i in seg.nodes], list(seg.inputs), list(seg.outputs), graph.opset)


def _host_onnx(model: onnx.ModelProto, graph: Graph, seg: Segment) -> bytes:
    """A standalone ONNX model of a host segment (batch 1), runnable by onnxruntime."""
    nodes = [model.graph.node[i] for i in seg.nodes]
    used = {t for n in nodes for t in n.input if t}
    inits = [t for t in model.graph.initializer if t.name in used]
    init_names = {t.name for t in inits}

    def info(name: str) -> onnx.ValueInfoProto:
        t = graph.tensor(name)
        elem = onnx.helper.np_dtype_to_tensor_dtype(__import__("numpy").dtype(t.dtype))
        return onnx.helper.make_tensor_value_info(name, elem, list(t.shape))

    inputs = [info(t) for t in seg.inputs if t not in init_names]
    outputs = [info(t) for t in seg.outputs]
    g = onnx.helper.make_graph(nodes, seg.name, inputs, outputs, inits)
    m = onnx.helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return m.SerializeToString()


def _constant_cuts(graph: Graph, seg: Segment, error: ConstantsDoNotFit) -> list[int]:
    """Nodes (graph indices) at which to start new programs so that each one's constants fit:
    greedily, layer by layer in program order, from each layer's share in ``error``."""
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    first = seg.nodes[0]
    cuts, used = [], 0
    for layer, nodes, vectors in error.layers:
        if vectors > error.depth:
            raise SchedulingError(f"{error.context}layer {layer!r} (node {', '.join(nodes) or '?'}): its constants need {vectors} vectors "
                                  f"of {error.where} but the architecture has {error.depth}; one layer is never split "
                                  "across programs") from None
        at = min((position[n] for n in nodes if n in position), default=None)
        if used + vectors > error.depth and at is not None and at > first:
            cuts.append(at)
            used = 0
        used += vectors
    return cuts


def compile_segments(model: onnx.ModelProto, graph: Graph, arch: Architecture, name: str, strategy: str,
                     host: bool, listing: bool, progress: Callable[[str, int, int], None] | None,
                     samples: list[dict] | None = None, split: bool = True) -> list[Segment]:
    """Partition and compile; nodes the accelerator rejects move to the host until all compile.

    An accelerator segment whose constants exceed DRAM1 is cut, with ``split``, into programs
    whose constants fit, run one after another (each keeps its own constants in its own DRAM
    buffer; the driver points the DRAM1 offset register at it, seed section 3.3).
    ``samples`` (calibration inputs of the whole model) become each accelerator segment's own
    inputs, computed by onnxruntime where a segment starts inside the model.
    """
    on_host: set[int] = set()
    cuts: set[int] = set()
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    # A segment's calibration inputs, by its input names: a retry after moving a node to the
    # host re-splits the graph, and most segments come back with the same inputs.
    segment_samples: dict[tuple[str, ...], list[dict]] = {}
    # Compiled accelerator segments by name, nodes and outputs: a retry recompiles only what changed.
    compiled: dict[tuple, SegmentResult] = {}
    while True:
        segments = _split(graph, on_host, cuts)
        multi = len(segments) > 1 or segments[0].kind == "host"
        try:
            for k, seg in enumerate(segments):
                seg.name = f"{name}.seg{k}" if multi else name
                if seg.kind == "host":
                    seg.onnx_bytes = _host_onnx(model, graph, seg)
                    continue
                key = (seg.name, tuple(seg.nodes), tuple(seg.outputs))
                if key in compiled:
                    seg.result = compiled[key]
                    continue
                cb = None if progress is None else (lambda step, done, total, seg=seg: progress(f"{step} {seg.name}", done, total))
                seg_samples = None
                if samples:
                    inputs = tuple(seg.inputs)
                    if inputs not in segment_samples:
                        inner = [t for t in seg.inputs if t not in samples[0]]
                        segment_samples[inputs] = tensor_values(model, graph, samples, seg.inputs) if inner else samples
                    seg_samples = segment_samples[inputs]
                seg.result = compile_graph(_subgraph(graph, seg, seg.name), arch, seg.name, strategy, listing, cb,
                                           calibration=seg_samples)
                compiled[key] = seg.result
        except ConstantsDoNotFit as e:
            # ``seg`` is the segment that overflowed: cut it and compile again.
            more = _constant_cuts(graph, seg, e) if split else []
            if not more or cuts.issuperset(more):
                if split:
                    raise
                raise SchedulingError(f"{e}; splitting the model into programs is off (--no-split)") from None
            cuts.update(more)
            continue
        except Unsupported as u:
            if not host:
                raise UnsupportedOpError(f"{u}; host fallback is off (--no-host)") from None
            i = index.get(id(u.node))
            if i is None or i in on_host:  # pragma: no cover - a lowering bug, not a user error
                raise
            on_host.add(i)
            continue
        return segments


class CompiledMixin:
    """What a freshly compiled model adds to a loaded one: its files and its compile summary."""

    artifacts: dict[str, bytes]
    summary: CompileSummary
    tmodel_name: str

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


def compile_model(model_or_path: Any, arch: Architecture | str, *, strategy: str = "local-isolated", host: bool = True,
                  listing: bool = False, name: str | None = None,
                  progress: Callable[[str, int, int], None] | None = None,
                  calibration: Any = None, split: bool = True) -> CompiledModel | CompiledPartitionedModel:
    """Compile an ONNX model (path, bytes or ``onnx.ModelProto``) for ``arch`` (preset name,
    ``.tarch`` path or ``Architecture``).

    ``strategy``: one of ``STRATEGIES``; ``host=False`` makes an op the accelerator cannot run an
    error instead of a host segment; ``listing`` adds the assembly listing (``.tasm``).
    ``calibration``: sample inputs (a dict of arrays, stacked samples allowed, a list of dicts,
    or an ``.npz`` path); with them each layer's weights are amplified as far as the samples'
    accumulator ranges allow (``systolix.scheduler.precision``), for smaller rounding errors.
    ``split``: constants larger than DRAM1 cut the model into several accelerator programs run
    one after another (``False``: an error instead). ``progress(what, done, total)``: ``what``
    is ``"calibrating SEGMENT"`` (float runs on the samples) or ``"scheduling SEGMENT"`` (layers).
    Returns a model with ``.run(inputs)``, ``.save(directory)`` and ``.summary``.
    """
    started = time.perf_counter()
    if not isinstance(arch, Architecture):
        arch = get_architecture(arch)
    if strategy not in STRATEGIES:
        raise SystolixError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")
    onnx_model, source, shapes = import_onnx(model_or_path)
    graph = graph_from_model(onnx_model, source, shapes)
    if name is None:
        stem = Path(source).stem if not isinstance(model_or_path, (onnx.ModelProto, bytes, bytearray)) else (graph.name or "model")
        name = f"{_safe_name(stem)}_{_safe_name(str(arch.array_size))}x{arch.array_size}"
    samples = None if calibration is None else calibration_samples(calibration, graph)
    segments = compile_segments(onnx_model, graph, arch, name, strategy, host, listing, progress, samples, split)
    placement = {}
    for seg in segments:
        for i in seg.nodes:
            placement[graph.nodes[i].name] = seg.kind
    files: dict[str, bytes] = {}
    for seg in segments:
        if seg.kind == "host":
            files[f"{seg.name}.onnx"] = seg.onnx_bytes
        else:
            files.update(seg.result.artifacts.files)
    partitioned = len(segments) > 1 or segments[0].kind == "host"
    if partitioned:
        files[f"{name}.tprog"] = b""
        files[f"{name}.tmodel"] = _partitioned_manifest(name, arch, graph, segments, placement)
    # Reorder so that the top-level manifest comes last when saving.
    top = f"{name}.tmodel"
    files = {k: v for k, v in files.items() if k != top} | {top: files[top]}
    summary = CompileSummary(source, arch, strategy, segments, placement, seconds=0.0)
    summary.placement_ops = {n.name: (n.op_type, placement.get(n.name, "accelerator")) for n in graph.nodes}
    for seg in segments:
        if seg.result is None:
            continue
        lir = seg.result.lir
        summary.consts_vectors += int(lir.consts.shape[0])
        summary.consts_peak = max(summary.consts_peak, int(lir.consts.shape[0]))
        summary.dram0_vectors = max(summary.dram0_vectors, lir.dram0_vectors)
        summary.local_peak = max(summary.local_peak, lir.local_peak)
        summary.acc_peak = max(summary.acc_peak, lir.acc_peak)
        summary.instructions += len(lir.instructions)
        summary.macs += sum(r.macs for r in lir.layers)
        summary.layers.extend(lir.layers)
        summary.gains.update(seg.result.hir.gains)
        summary.rounded.extend(seg.result.hir.rounded)
        summary.conv_layers += sum(1 for layer in seg.result.hir.layers if layer.kind == "conv")
    summary.calibration_samples = len(samples) if samples else 0
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


__all__ = ["CompileSummary", "CompiledModel", "CompiledPartitionedModel", "UnsupportedOpError", "compile_model"]
