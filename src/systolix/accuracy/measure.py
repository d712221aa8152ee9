"""Where a compiled model's error enters: per layer and at the outputs, against the float model
and against the format's limit.

Three runs of the same inputs are compared, each in float32 on onnxruntime or the emulator:

* **float**: onnxruntime on the ONNX model (the reference);
* **limit**: onnxruntime on ``systolix.models.rounded.with_rounded_tensors(model)``: inputs and
  every computed tensor rounded to the accelerator's type, products exact. No program in that
  type can be expected to do better;
* **ours**: the compiled program on the bit-exact emulator.

Per layer (each accelerator layer of the compile whose output is an ONNX tensor) the report gives
the error of that tensor in ``ours`` and in ``limit`` against ``float`` (what has accumulated up to
there), and the error **the layer adds**: the layer compiled alone (the ONNX nodes from its inputs
to its output, calibrated on the float values of its inputs when the model is) and run on the float
model's values of its inputs, against the float output; next to the same for the limit (the
inputs and the output rounded). That isolates the layer's own rounding (weights, products,
accumulators, saturation) from what it inherits, without assuming how errors propagate.

To read intermediate tensors from the compiled program, the model is compiled a second time with
those tensors as extra graph outputs (the compiler saves each layer's output to DRAM anyway);
``identical_outputs`` says whether that compile's outputs equal the plain compile's bit for bit, so
a difference would show. The outputs' figures always come from the compile as the user gets it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx

from systolix.accuracy.tensors import layer_subgraph, with_outputs
from systolix.errors import SystolixError

# Inputs are run this many at a time (the emulator keeps a copy of the constants per batch item).
CHUNK = 16
# Error values kept per layer for the report's histograms.
KEPT_ERRORS = 4000

Progress = Callable[[str, int, int], None]


class AccuracyError(SystolixError):
    """A model or inputs the accuracy report cannot measure."""


@dataclass
class Errors:
    """Errors of one tensor against the float model, in LSB, over every value of every input."""

    rms: float
    max: float
    offset: float = 0.0
    """The part of the error that is the same on every input: the RMS over channels of each
    channel's mean error (over the inputs and, for a map ``[1, C, ...]``, its pixels; for a
    tensor of two axes, each value is a channel). A rounded constant times a channel's mean
    (a weight's, a batch norm's scale) errs so; no later pool or input averages it away. Its
    noise floor is about ``rms / sqrt(inputs x pixels)``."""

    @classmethod
    def of(cls, got: np.ndarray, ref: np.ndarray, lsb: float) -> "Errors":
        err = (np.asarray(got, np.float64) - np.asarray(ref, np.float64)) / lsb
        if err.size == 0:
            return cls(0.0, 0.0)
        return cls(float(np.sqrt(np.mean(err ** 2))), float(np.max(np.abs(err))), channel_offset(err))


def channel_offset(err: np.ndarray) -> float:
    """``Errors.offset`` of errors stacked ``[inputs, *tensor shape]``."""
    if err.ndim >= 4:  # [inputs, 1, C, pixels...]: a channel's mean over inputs and pixels
        means = np.moveaxis(err, 2, 0).reshape(err.shape[2], -1).mean(axis=1)
    else:
        means = err.mean(axis=0)
    return float(np.sqrt(np.mean(means ** 2)))


@dataclass
class LayerAccuracy:
    index: int
    name: str
    ops: list[str]
    tensor: str
    shape: list[int]
    ours: Errors
    """accumulated error of our compile at this tensor"""
    limit: Errors
    """accumulated error of the format limit at this tensor"""
    added: Errors | None
    """error of this layer compiled alone, run on the float inputs (None: not a closed subgraph)"""
    added_limit: Errors | None
    """the same for the limit: the layer's inputs and output rounded"""
    saturated: int
    """values of our output at the type's range ends (over all inputs)"""
    saturated_sums: int | None
    """saturation events in the layer's instructions in the compile's program (its sums, products
    and SIMD results, an average pool's sums before its scaling included), over all inputs; None
    where the program's layer map does not say (a model partitioned with the host)"""
    float_beyond: int
    """values of the float output beyond the type's range (those must saturate)"""
    values: int
    added_note: str = ""
    sample: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """a sample of the errors (LSB): ``ours``, ``limit``, ``added``, ``added_limit``, and the
    float values they belong to (``float``), for the report's plots"""

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("sample")
        return d


@dataclass
class OutputAccuracy:
    name: str
    shape: list[int]
    ours: Errors
    limit: Errors
    classes: int | None
    """number of classes for a classifier-shaped output (one axis), else None"""
    agreement: float | None
    """share of inputs where our compile picks the float model's class"""
    limit_agreement: float | None
    sample: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("sample")
        return d


@dataclass
class AccuracyReport:
    model: str
    arch: str
    data_type: str
    lsb: float
    inputs: int
    calibration_samples: int
    outputs: list[OutputAccuracy]
    layers: list[LayerAccuracy]
    saturated_inputs: int
    """inputs on which the emulator counted a saturation"""
    saturation_events: int
    identical_outputs: bool | None
    """whether the compile with intermediate outputs gave the same outputs (None: not measured)"""
    host_nodes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    estimated_gains: bool = False
    """a plain compile with gains estimated from the model itself (``compile(estimate_gains=True)``)"""

    @property
    def rms(self) -> float:
        """The outputs' RMS error in LSB (over every output value)."""
        return _pooled([o.ours for o in self.outputs], [int(np.prod(o.shape)) for o in self.outputs])

    @property
    def limit_rms(self) -> float:
        return _pooled([o.limit for o in self.outputs], [int(np.prod(o.shape)) for o in self.outputs])

    def to_json(self) -> dict:
        return {
            "model": self.model, "arch": self.arch, "data_type": self.data_type, "lsb": self.lsb,
            "inputs": self.inputs, "calibration_samples": self.calibration_samples,
            "estimated_gains": self.estimated_gains, "rms_lsb": self.rms, "limit_rms_lsb": self.limit_rms,
            "ratio": self.rms / self.limit_rms if self.limit_rms else None,
            "outputs": [o.to_json() for o in self.outputs],
            "layers": [layer.to_json() for layer in self.layers],
            "saturated_inputs": self.saturated_inputs, "saturation_events": self.saturation_events,
            "identical_outputs": self.identical_outputs, "host_nodes": self.host_nodes,
            "seconds": round(self.seconds, 2),
        }


def _pooled(errors: list[Errors], sizes: list[int]) -> float:
    total = sum(sizes)
    return float(np.sqrt(sum(e.rms ** 2 * n for e, n in zip(errors, sizes)) / total)) if total else 0.0


def _sample(values: np.ndarray, rng: np.random.Generator, picks: np.ndarray | None = None) -> np.ndarray:
    flat = np.asarray(values, np.float32).reshape(-1)
    return flat if picks is None else flat[picks]


def _picks(size: int, rng: np.random.Generator) -> np.ndarray | None:
    return None if size <= KEPT_ERRORS else np.sort(rng.choice(size, KEPT_ERRORS, replace=False))


def random_inputs(graph, count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` inputs of the model's shapes, standard normal values (seeded)."""
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(graph.tensor(name).shape).astype(np.float32) for name in graph.inputs}
            for _ in range(count)]


def layer_map(compiled) -> list[dict] | None:
    """The layer map of a program the accelerator runs whole, one image a run (its ``.tmodel``'s
    ``systolix.layers``: each layer's name and instruction range); None otherwise."""
    from systolix.runtime import Model

    manifest = getattr(compiled, "manifest", None)
    if not isinstance(compiled, Model) or manifest is None or getattr(compiled, "program_batch", 1) != 1:
        return None
    return (manifest.systolix or {}).get("layers") or None


def run_compiled(compiled, items: list[dict], progress: Progress | None = None, what: str = "emulator",
                 stretches: list[dict] | None = None) -> tuple[dict[str, np.ndarray], np.ndarray, int, np.ndarray | None]:
    """Every output of ``compiled`` on every item (stacked on a leading axis), saturation events
    per item and in all, and with ``stretches`` (``layer_map``) the events in each layer's
    instructions over all items."""
    from systolix.runtime import SaturationWarning

    outputs: dict[str, list[np.ndarray]] = {}
    per_item, events = [], 0
    per_layer = np.zeros(len(stretches), np.int64) if stretches else None
    ends = _increasing([int(layer["end"]) for layer in stretches]) if stretches else None
    for first in range(0, len(items), CHUNK):
        part = items[first:first + CHUNK]
        feeds = {key: np.stack([it[key] for it in part]) for key in part[0]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SaturationWarning)
            if stretches:
                detail = compiled.run_detailed(feeds, batch=True, threads=2, stretch_ends=ends)
                values, counts = detail.outputs, detail.result.saturations_per_item.sum(axis=1)
                per_layer += _per_layer(stretches, detail.result.stretch_saturations)
            else:  # run_counting: a model partitioned between accelerator and host has it too
                values, counts = compiled.run_counting(feeds, batch=True, threads=2)
        for name, value in values.items():
            outputs.setdefault(name, []).append(np.asarray(value))
        per_item.append(np.asarray(counts, np.int64))
        events += int(np.sum(counts))
        if progress:
            progress(what, min(first + CHUNK, len(items)), len(items))
    return {k: np.concatenate(v) for k, v in outputs.items()}, np.concatenate(per_item), events, per_layer


def _increasing(ends: list[int]) -> list[int]:
    """The distinct, non-zero stretch ends (an empty layer ends where the one before it does)."""
    return sorted({e for e in ends if e > 0})


def _per_layer(stretches: list[dict], per_stretch: np.ndarray) -> np.ndarray:
    """Each layer's events from those of the stretches ``_increasing`` made of the map's ends
    (the map's ranges are contiguous: a layer's stretch ends at its ``end``; an empty one has none)."""
    index = {e: k for k, e in enumerate(_increasing([int(layer["end"]) for layer in stretches]))}
    return np.array([per_stretch[index[int(layer["end"])]] if int(layer["end"]) > int(layer["first"]) else 0
                     for layer in stretches], np.int64)


def _base_name(name: str) -> str:
    """A layer's name without what the compiler added to it: a part's channel range
    (``conv [0:64]``), a pass of a pool (``pool/rows``)."""
    return re.sub(r"/rows$", "", re.sub(r"( \[\d+:\d+\])+$", "", name))


def _sums_saturated(layers: list, stretches: list[dict], per_layer: np.ndarray) -> list[int]:
    """Events per reported layer: every map entry whose name is the layer's, or a part or pass of
    it (base names equal)."""
    by_base: dict[str, int] = {}
    for entry, n in zip(stretches, per_layer):
        base = _base_name(str(entry.get("name", "")))
        by_base[base] = by_base.get(base, 0) + int(n)
    return [by_base.get(_base_name(layer.name), 0) for layer in layers]


def run_onnx(model: onnx.ModelProto, items: list[dict], names: list[str], source: str) -> dict[str, np.ndarray]:
    """onnxruntime's values of ``names`` on every item, stacked."""
    from systolix.onnxrt import session

    s = session(model, source=source, error=AccuracyError)
    values: dict[str, list] = {n: [] for n in names}
    for item in items:
        for name, value in zip(names, s.run(names, item)):
            values[name].append(value)
    return {n: np.stack(v) for n, v in values.items()}


def _classes(shape) -> int | None:
    dims = [d for d in shape if d != 1]
    return dims[0] if len(dims) == 1 and dims[0] >= 2 else None


def _agreement(got: np.ndarray, ref: np.ndarray) -> float:
    n = got.shape[0]
    return float(np.mean(np.argmax(got.reshape(n, -1), axis=1) == np.argmax(ref.reshape(n, -1), axis=1)))


def _accelerator_layers(compiled) -> list:
    layers = []
    for seg in compiled.summary.segments:
        if seg.kind == "accelerator" and getattr(seg, "hir", None) is not None:
            layers.extend(seg.hir.layers)
    return layers


def measure(model: Any, arch: Any, *, inputs: Any = None, count: int = 32, seed: int = 0,
            calibration: Any = None, per_layer: bool = True, isolate: bool = True,
            progress: Progress | None = None, estimate_gains: bool = True) -> AccuracyReport:
    """Measure the compile of ``model`` (path, bytes or ``onnx.ModelProto``) for ``arch``.

    ``inputs``: what ``compile(calibration=...)`` accepts (a dict of stacked arrays, a list of
    dicts, an ``.npz`` path); default ``count`` standard normal inputs (``seed``).
    ``calibration``: samples for a calibrated compile (as ``compile`` takes them), else plain:
    with gains estimated from the model itself unless ``estimate_gains=False`` (a layer compiled
    alone is then compiled without gains: the estimate needs the model before it).
    ``per_layer=False`` measures only the outputs (one compile, no instrumented run);
    ``isolate=False`` skips the per-layer compiles alone (``added`` stays None).
    ``progress(stage, done, total)`` reports each stage.
    """
    import time

    from systolix.arch import Architecture, get_architecture
    from systolix.compiler import compile_model
    from systolix.compiler.calibration import calibration_samples
    from systolix.frontend import graph_from_model, import_onnx
    from systolix.models.rounded import rounded_feeds, with_rounded_tensors

    started = time.perf_counter()
    arch_label = str(arch) if not isinstance(arch, Architecture) else "custom"
    arch = arch if isinstance(arch, Architecture) else get_architecture(arch)
    dtype = arch.data_type
    if not dtype.is_fixed:
        raise AccuracyError(f"architecture {arch_label} computes in {dtype.name}: the accuracy report "
                            "measures fixed-point rounding; choose a fixed-point architecture")
    lsb = dtype.resolution
    onnx_model, source, shapes = import_onnx(model)
    graph = graph_from_model(onnx_model, source, shapes)
    if inputs is None:
        if count < 1:
            raise AccuracyError(f"the number of inputs must be at least 1, not {count}")
        items = random_inputs(graph, count, seed)
    else:
        items = calibration_samples(inputs, graph)
    samples = None if calibration is None else calibration_samples(calibration, graph)

    def step(what: str, done: int, total: int) -> None:
        if progress:
            progress(what, done, total)

    step("compiling", 0, 1)
    estimate_gains = estimate_gains and samples is None
    compiled = compile_model(model, arch, calibration=samples, estimate_gains=estimate_gains)
    step("compiling", 1, 1)
    # Per layer of the compile's own program: the instrumented compile's may differ.
    stretches = layer_map(compiled) if per_layer else None
    ours_out, saturated_items, events, per_layer_events = run_compiled(compiled, items, progress, "running on the emulator",
                                                                       stretches)

    output_names = list(graph.outputs)
    layers = [layer for layer in _accelerator_layers(compiled)
              if layer.output.name in shapes and layer.output.name not in graph.inputs
              and shapes[layer.output.name][1] == "float32"] if per_layer else []
    seen: set[str] = set()
    layers = [layer for layer in layers if not (layer.output.name in seen or seen.add(layer.output.name))]
    tensors = [layer.output.name for layer in layers]
    producers = {layer.output.name: layer for layer in _accelerator_layers(compiled)}
    read_names = sorted({r for layer in layers for r in (onnx_reads(layer, producers, shapes) or [])
                         if r not in graph.inputs})

    step("onnxruntime float", 0, 2)
    float_names = list(dict.fromkeys(output_names + tensors + read_names))
    ref = run_onnx(with_outputs(onnx_model, float_names, shapes), items, float_names, source)
    step("onnxruntime float", 1, 2)
    limit_names = list(dict.fromkeys(output_names + tensors))
    limit = run_onnx(with_rounded_tensors(with_outputs(onnx_model, limit_names, shapes), dtype),
                     [rounded_feeds(item, dtype) for item in items], limit_names, f"{source} (rounded)")
    step("onnxruntime float", 2, 2)

    rng = np.random.default_rng(0)
    outputs = []
    for name in output_names:
        got, want, lim = ours_out[name], ref[name], limit[name]
        picks = _picks(want.size, rng)
        classes = _classes(want.shape[1:])
        outputs.append(OutputAccuracy(
            name, list(want.shape[1:]), Errors.of(got, want, lsb), Errors.of(lim, want, lsb), classes,
            _agreement(got, want) if classes else None, _agreement(lim, want) if classes else None,
            sample={"ours": _sample((got - want) / lsb, rng, picks), "limit": _sample((lim - want) / lsb, rng, picks),
                    "float": _sample(want, rng, picks)}))

    identical = None
    layer_reports: list[LayerAccuracy] = []
    if layers:
        step("compiling with intermediate outputs", 0, 1)
        # The offsets the compile took out of its outputs, and no others (an intermediate tensor is
        # an output here only to be read).
        instrumented = compile_model(with_outputs(onnx_model, tensors, shapes), arch, calibration=samples,
                                     name=getattr(compiled, "name", None), estimate_gains=estimate_gains,
                                     output_offsets=compiled.summary.output_offsets if samples is not None else None)
        step("compiling with intermediate outputs", 1, 1)
        inner, _, _, _ = run_compiled(instrumented, items, progress, "running with intermediate outputs")
        sums_saturated = _sums_saturated(layers, stretches, per_layer_events) if stretches else [None] * len(layers)
        identical = all(np.array_equal(inner[n], ours_out[n]) for n in output_names)
        calibration_reads = None
        if samples is not None and isolate and read_names:
            calibration_reads = run_onnx(with_outputs(onnx_model, read_names, shapes), samples, read_names, source)
        high, low = dtype.max_value, dtype.min_int * lsb
        for k, layer in enumerate(layers):
            name = layer.output.name
            got, want, lim = inner[name], ref[name], limit[name]
            picks = _picks(want.size, rng)
            sample = {"ours": _sample((got - want) / lsb, rng, picks), "limit": _sample((lim - want) / lsb, rng, picks),
                      "float": _sample(want, rng, picks)}
            added = added_limit = None
            note = ""
            if isolate:
                added, added_limit, note, extra = _isolated(layer, onnx_model, shapes, graph, arch, items, ref,
                                                            samples, calibration_reads, source, producers)
                sample.update({key: _sample(v, rng, picks) for key, v in extra.items()})
            layer_reports.append(LayerAccuracy(
                k, layer.name, list(layer.ops), name, list(want.shape[1:]), Errors.of(got, want, lsb),
                Errors.of(lim, want, lsb), added, added_limit,
                int(np.count_nonzero((got >= high) | (got <= low))), sums_saturated[k],
                int(np.count_nonzero((want > high) | (want < low))), int(want.size), note, sample))
            step("layers alone", k + 1, len(layers))

    return AccuracyReport(
        model=source, arch=arch_label, data_type=dtype.name, lsb=lsb,
        inputs=len(items), calibration_samples=len(samples) if samples else 0, outputs=outputs,
        layers=layer_reports, saturated_inputs=int(np.count_nonzero(saturated_items)), saturation_events=events,
        identical_outputs=identical, host_nodes=compiled.summary.host_nodes,
        seconds=time.perf_counter() - started, estimated_gains=estimate_gains)


def onnx_reads(layer, producers: dict, shapes) -> list[str] | None:
    """The ONNX tensors ``layer`` computes from: its reads, and for a tensor of the compile's own
    (a global average's rows, a split head's parts) the reads of the layer writing it, back to
    tensors the model names. None if some read leads to none."""
    reads, pending, seen = [], [a.root()[0].name for a in layer.reads()], set()
    while pending:
        tensor = pending.pop(0)
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor in shapes:
            reads.append(tensor)
        elif tensor in producers and producers[tensor] is not layer:
            pending.extend(a.root()[0].name for a in producers[tensor].reads())
        else:
            return None
    return reads


def _isolated(layer, onnx_model, shapes, graph, arch, items, ref, samples, calibration_reads, source, producers):
    """The layer compiled alone and run on the float values of its inputs: ``(ours, limit, note,
    error samples)``; ``(None, None, why, {})`` when that is not possible."""
    from systolix.compiler import compile_model
    from systolix.models.rounded import rounded_feeds, with_rounded_tensors

    dtype = arch.data_type
    lsb = dtype.resolution
    name = layer.output.name
    reads = onnx_reads(layer, producers, shapes)
    if reads is None:
        return None, None, "reads a tensor the ONNX model does not name", {}
    sub = layer_subgraph(onnx_model, reads, name, shapes)
    if sub is None:
        return None, None, "not a closed ONNX subgraph of its inputs", {}

    feeds_all = [{r: (ref[r][k] if r in ref else items[k][r]) for r in reads} for k in range(len(items))]
    sub_samples = None
    if samples is not None:
        sub_samples = [{r: (calibration_reads[r][k] if calibration_reads and r in calibration_reads else samples[k][r])
                        for r in reads} for k in range(len(samples))]
    try:
        # Without samples, alone and without gains: estimated from the layer alone, its ranges
        # would start from synthetic N(0, 1) inputs, not from the model before it.
        compiled = compile_model(sub, arch, calibration=sub_samples, name="layer", estimate_gains=False)
        got, _, _, _ = run_compiled(compiled, feeds_all)
    except SystolixError as e:
        return None, None, f"does not compile alone: {str(e)[:120]}", {}
    got = got[name]
    limit = run_onnx(with_rounded_tensors(sub, dtype), [rounded_feeds(f, dtype) for f in feeds_all], [name],
                     f"{source} ({layer.name} alone, rounded)")[name]
    want = ref[name]
    return (Errors.of(got, want, lsb), Errors.of(limit, want, lsb), "",
            {"added": (got - want) / lsb, "added_limit": (limit - want) / lsb})
