"""Estimate ranges: without calibration samples, the sums each conv layer's accumulators reach,
estimated from the model itself, in ``HirProgram.ranges`` for ``amplify_weights``.

A plain compile has no data, but the model says much about its own values: a batch norm's
statistics give each channel's mean and spread before the activation (``ConvLayer.statistics``,
kept when it folds), and the weights carry the spread of their inputs forward, correlations
between channels and pixels included. The pass runs the model in float (``systolix.ir.evaluate``,
so every layer kind, padding and post-op counts as it computes), layer by layer, on ``RUNS``
synthetic inputs (side by side: ``systolix.ir.evaluate.Runs``): ``N(0, 1)`` per element (``INPUT_STD``: normalised inputs), with a part shared
by the pixels of each channel (``PIXEL_CORRELATION``, as an image's brightness is), so that an
average pool's mean varies as much as an image's would. Where a layer has batch-norm statistics,
its synthetic sums are moved and scaled per channel to them before its post-ops run, so the
estimate follows the model's own statistics wherever it states them (an input distribution
unlike the synthetic one is corrected at the first batch norm; the inputs of a program after a
host op are taken as the model's are), except where a later batch norm's statistics are
narrower than what its inputs give through the weights: there the synthetic range is kept. A
channel's range is its mean plus ``SIGMAS`` standard deviations (the statistics', or the
synthetic sums'), times as much further as its partial sums went (an average pool's, before its
scaling): what ``amplify_weights`` keeps below saturation. An average pool's range is at least its
input's (``_average_bound``): every value it averages may sit at its channel's range, so it never
saturates while they stay within it.

Measured against the largest sums of 16 real inputs (``scripts/agreement.py``'s models), a
channel's real peak reaches up to 12 standard deviations on the project's image-like inputs (heavy
tails: per-image brightness, ReLU chains): at ``SIGMAS = 12`` a few of 32 inputs saturated
(ResNet-20 v2, the MobileNetV2 stack), at 16 none, at 8 up to 14 of 32.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np

from systolix.hir_passes.measure_ranges import LayerRange
from systolix.ir.evaluate import Runs, run_layer_runs
from systolix.ir.hir import ConvLayer, HirProgram, MaxPoolLayer
from systolix.ir.postops import AddTensor, Clip, Relu, Scale, Slope

# The spread assumed of each element of the model's inputs (mean 0): normalised inputs.
INPUT_STD = 1.0
# A channel's range: its mean plus this many standard deviations.
SIGMAS = 16.0
# Synthetic inputs run through the model: at least RUNS, and a small model as many more as
# ``ESTIMATE_MACS`` multiply-accumulates allow, up to ``MAX_RUNS`` (``synthetic_runs``). A
# one-pixel layer's spread comes from one value a run: with 8 runs an MLP's gains were a draw of
# the seed (a factor of 2 to 4 between seeds). Plain compiles, ``ultra96v2``,
# ``benchmarks/bench_accuracy.py``'s 64 random normal inputs, the outputs' RMS over the format
# limit's, mean (worst) over estimate seeds 0 to 5 (``SEED``), 8 runs against this budget: the
# untuned MLP (20K MACs, 64 runs) x1.75 (1.82) -> x1.67 (1.75), the untuned DenseNet-like net
# (7.3M MACs, 17 runs) x1.55 (2.51) -> x1.48 (2.20), the test MLP x1.76 (2.47) -> x1.72 (1.85);
# the separable net and the encoder (64 runs) the same within 0.01 (worst 1.13 -> 1.10, 0.94 ->
# 0.87). Larger models keep 8: the MobileNetV2 stack (19M MACs) at 17 runs went x1.78 -> x2.08,
# its head's one-pixel ranges wider and their gains smaller (2^1 for 2^2), which these inputs,
# narrower than the image-like ones its batch norms were fitted to, did not need.
RUNS = 8
MAX_RUNS = 64
ESTIMATE_MACS = 8 * 16_000_000
# Neighbouring values of a tensor are correlated (an image's brightness, a feature's extent):
# an average pool's mean varies far more than that of independent values. Synthetic inputs
# have this correlation between any two pixels of a channel.
PIXEL_CORRELATION = 0.5
SEED = 0
# Post-op kinds whose result is never larger than their input (``|f(x)| <= |x|``: x times a
# gate between 0 and 1, or tanh), and those whose result lies in [0, 1]: a tensor they end keeps
# its producer's range as a bound (``_keep_bound``). The SIMD approximations err by a few LSB.
SHRINKING = frozenset({"silu", "hard_swish", "gelu", "mish", "tanh"})
UNIT_RANGE = frozenset({"sigmoid", "hard_sigmoid"})
# The step (times a channel's spread) by which the post-ops' slope is measured.
STEP = 1e-3


def _synthetic_inputs(hir: HirProgram, rng: np.random.Generator, runs: Runs) -> None:
    """``runs.count`` synthetic inputs: each channel of each model input a part shared by its
    pixels and a part of their own (correlation ``PIXEL_CORRELATION`` between any two pixels),
    ``N(0, 1)``."""
    shared, own = math.sqrt(PIXEL_CORRELATION), math.sqrt(1 - PIXEL_CORRELATION)
    values: dict[str, list[np.ndarray]] = {name: [] for name in hir.inputs}
    for _ in range(runs.count):
        for name, act in hir.inputs.items():
            z = shared * rng.standard_normal((act.C, 1, 1)) + own * rng.standard_normal((act.C, act.H, act.W))
            values[name].append(INPUT_STD * z)
    for name, act in hir.inputs.items():
        runs.write(act, np.stack(values[name]))


def synthetic_runs(hir: HirProgram) -> int:
    """How many synthetic inputs the estimate runs ``hir`` on: ``ESTIMATE_MACS`` over its
    multiply-accumulates, within ``RUNS`` to ``MAX_RUNS``."""
    macs = sum(getattr(layer, "macs", 0) for layer in hir.layers)
    return int(min(MAX_RUNS, max(RUNS, ESTIMATE_MACS // max(macs, 1))))


def _channel_moments(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per channel of ``[R, C, H, W]`` values, their mean and standard deviation."""
    per_channel = values.transpose(1, 0, 2, 3).reshape(values.shape[1], -1).astype(np.float64)
    return per_channel.mean(axis=1), per_channel.std(axis=1)


def _mean_square(values: np.ndarray) -> np.ndarray:
    """Per channel of ``[R, C, H, W]`` values, their mean square."""
    return np.mean(np.square(values, dtype=np.float64), axis=(0, 2, 3))


def _mean(runs: Runs, act, inputs: set[int]) -> np.ndarray:
    """Per channel of ``act``, its mean over the runs; a model input's is the assumed one (0): a
    few runs' shared parts would make it up."""
    if id(act.root()[0]) in inputs:
        return np.zeros(act.C)
    return np.mean(runs.read(act), axis=(0, 2, 3), dtype=np.float64)


def estimate(hir: HirProgram, seed: int = SEED) -> dict[int, LayerRange]:
    """Per conv layer (index into ``hir.layers``) its estimated ``LayerRange``."""
    run = RangeEstimate(hir, seed)
    ranges = {index: run.step(index, layer) for index, layer in enumerate(hir.layers)}
    return {index: r for index, r in ranges.items() if r is not None}


class RangeEstimate:
    """The estimate, one layer at a time in program order: ``step`` runs a layer on the synthetic
    inputs and keeps its values for the layers after it; ``peek`` gives a conv layer's range and
    keeps nothing, so a pass can size a rewrite of the layer from its range and step through the
    layers that replace it instead (``split_long_reductions``), one estimate for both."""

    def __init__(self, hir: HirProgram, seed: int = SEED):
        self.inputs = {id(act.root()[0]) for act in hir.inputs.values()}
        self.runs = Runs(synthetic_runs(hir))
        _synthetic_inputs(hir, np.random.default_rng(seed), self.runs)
        self.normalised: set[int] = set()  # root tensors downstream of a batch norm's statistics
        # Per root tensor (by name), each channel's range (``SIGMAS`` wide) where a conv layer
        # whose post-ops can only shrink values wrote it, or a max pool of such values (NaN
        # elsewhere): what an average of it can reach (``_average_bound``). By root, so that a
        # pool reading a Concat finds the range of each part its producers wrote.
        self.bounds = ChannelBounds()

    def step(self, index: int, layer) -> LayerRange | None:
        """Run ``layer`` (at ``index`` in its program) and keep its output: a conv layer's range."""
        return self._run(index, layer, keep=True)

    def peek(self, index: int, layer: ConvLayer) -> LayerRange:
        """The range of conv ``layer`` were it run at ``index``; its values are not kept (nor, for a
        layer without scaling post-ops, anything else: an average pool's own multiplies would
        write the copies they save)."""
        assert not layer.scaling_ops, f"{layer.name}: peek takes only layers without scaling post-ops"
        return self._run(index, layer, keep=False)

    def _keep_bound(self, out, reach: np.ndarray, post) -> None:
        """Keep ``reach`` (per channel) as the range of ``out`` if its post-ops only shrink
        values (ReLU, LeakyReLU, clips, SiLU and its kin: ``SHRINKING``), the tighter for a
        clip's ends or a sigmoid's 1, or add another tensor (a residual add: its operand's range
        added, interval arithmetic; NaN where unknown)."""
        bound = reach
        for p in post:
            if isinstance(p, Clip):
                bound = np.minimum(bound, max(abs(p.lo), abs(p.hi)))
            elif isinstance(p, AddTensor):
                bound = bound + self.bounds.read(p.operand)
            elif p.kind in UNIT_RANGE:
                bound = np.minimum(bound, 1.0)
            elif not (isinstance(p, Relu) or p.kind in SHRINKING
                      or (isinstance(p, Slope) and np.all(np.abs(p.values) <= 1))):
                return
        self.bounds.write(out, bound)

    def _run(self, index: int, layer, keep: bool) -> LayerRange | None:
        runs, out = self.runs, layer.output
        upstream = any(id(act.root()[0]) in self.normalised for act in layer.reads())
        if keep and writes_normalised(layer, self.normalised):
            self.normalised.add(id(out.root()[0]))
        if not isinstance(layer, ConvLayer):
            if keep:
                runs.write(out, run_layer_runs(runs, layer, index))
                if isinstance(layer, MaxPoolLayer):  # the largest of values within a bound (or zero pads)
                    self.bounds.write(out, self.bounds.read(layer.input))
            return None
        # The sums, through an average pool's own scaling, before the other post-ops.
        core = dataclasses.replace(layer, post_ops=layer.post_ops[:layer.scaling_ops])
        sums = run_layer_runs(runs, core, index)
        partial = runs.accumulator_max[index]
        mean, std = _channel_moments(sums)
        final = np.abs(sums).max(axis=(0, 2, 3), initial=0.0).astype(np.float64)
        if layer.statistics is not None:
            # The model's own statistics: the synthetic sums moved and scaled to them.
            target_mean = np.asarray(layer.statistics[0], np.float64)
            target_std = np.asarray(layer.statistics[1], np.float64)
            ratio = np.where(std > 0, target_std / np.where(std > 0, std, 1.0), 1.0)
            shift = target_mean - mean * ratio
            moved = sums * ratio[:, None, None].astype(sums.dtype) + shift[:, None, None].astype(sums.dtype)
            # The first batch norm on a path corrects the synthetic inputs to the model's own
            # distribution. Past it, the synthetic values follow the model's statistics, and a
            # later batch norm whose statistics give a channel a narrower range than its inputs
            # do through the weights contradicts them (statistics not fitted to these weights,
            # as in random-weight benchmark models: ResNet-50 v2's last batch norm and average
            # pool saturated, about 100 LSB RMS at the logits): per channel, the wider is kept.
            trusted = (np.abs(target_mean) + SIGMAS * target_std >= np.abs(mean) + SIGMAS * std) | (not upstream)
            sums = np.where(trusted[:, None, None], moved, sums)
            mean, std = np.where(trusted, target_mean, mean), np.where(trusted, target_std, std)
        # Partial sums (an average pool's, before its scaling) may go further than the final
        # ones: as much further as they did on the synthetic inputs.
        further = np.where(final > 0, partial / np.where(final > 0, final, 1.0), 1.0)
        reach = np.abs(mean) + SIGMAS * std
        bound = _average_bound(layer, self.bounds)
        if bound is not None:
            reach = np.fmax(reach, bound)  # (NaN: the channel's input range is not known)
        peak = reach * np.maximum(further, 1.0)
        post = layer.post_ops[layer.scaling_ops:]
        if keep:
            self._keep_bound(out, reach, post)
        slope = np.ones(out.C)
        if post:
            copies: dict[int, list] = {}  # a post-op's copy of the tile (``postops.Save``), per run
            values = np.stack([_post(sums[r], post, runs.run(r), copies) for r in range(runs.count)])
            if keep:
                for k, runs_copies in copies.items():
                    runs.write(post[k].written, np.stack(runs_copies))
            # How much of an error in the sums reaches the output (a ReLU passes the positive
            # values' only): the mean squared slope of the post-ops, by a small step per channel.
            step = (STEP * np.maximum(std, 1e-6))[:, None, None]
            stepped = np.stack([_post(sums[r].astype(np.float64) + step, post, runs.run(r)) for r in range(runs.count)])
            slope = _mean_square((stepped - values) / step[None])
            sums = values
        seen = LayerRange(peak, peak, runs.count * out.P, estimated=True,
                          input_mean_square=[_mean_square(runs.read(inp.act)) for inp in layer.inputs],
                          input_mean=[_mean(runs, inp.act, self.inputs) for inp in layer.inputs],
                          post_slope=slope)
        if keep:
            runs.write(out, sums)
        return seen


def writes_normalised(layer, normalised: set[int]) -> bool:
    """Whether ``layer``'s output follows batch-norm statistics: the layer has its own
    (``ConvLayer.statistics``) or reads a tensor of ``normalised`` (root tensors, by ``id``)."""
    return (any(id(act.root()[0]) in normalised for act in layer.reads())
            or (isinstance(layer, ConvLayer) and layer.statistics is not None))


def normalised_tensors(hir: HirProgram) -> set[int]:
    """The root tensors (by ``id``) of ``hir`` whose values the estimate takes from batch-norm
    statistics: written by a layer with statistics, or downstream of one."""
    out: set[int] = set()
    for layer in hir.layers:
        if writes_normalised(layer, out):
            out.add(id(layer.output.root()[0]))
    return out


class ChannelBounds:
    """Per-channel ranges of tensors, kept per root tensor (``Activation.root``): a tensor that
    is a channel slice of another (a Concat's part) writes and reads its own channels there."""

    def __init__(self):
        self._roots: dict[str, np.ndarray] = {}

    @staticmethod
    def _where(act) -> tuple[object, int] | None:
        root, g0 = act.root()
        if (root.H, root.W) != (act.H, act.W):  # a Reshape's relabelling: channels are not the root's
            return None
        return root, g0 * act.N

    def write(self, act, bound: np.ndarray) -> None:
        where = self._where(act)
        if where is None:
            return
        root, c0 = where
        kept = self._roots.setdefault(root.name, np.full(root.G * root.N, np.nan))
        kept[c0:c0 + act.C] = bound

    def read(self, act) -> np.ndarray:
        """Each channel's range, NaN where none is known."""
        where = self._where(act)
        if where is None or where[0].name not in self._roots:
            return np.full(act.C, np.nan)
        root, c0 = where
        return self._roots[root.name][c0:c0 + act.C]


def _average_bound(layer: ConvLayer, bounds: ChannelBounds) -> np.ndarray | None:
    """Per channel, the largest value a pool (per-channel taps, no bias) can reach from its
    inputs' ranges: its taps' summed magnitude times its scaling times the input's range (an
    average is at most the largest value it averages); NaN where an input's range is not known.
    The synthetic runs' own spread of an average is narrower, and says nothing of inputs whose
    channel means leave the model's batch-norm statistics: ResNet-50 v2's global average pool
    saturated in 188 of 2048 channels on random normal inputs (its batch norms fitted to
    image-like ones), 34 LSB RMS. Inception v3's 3x3 average pools read a max pool's output and
    Concats: their bounds known only by the convs' own names, its synthetic runs left channels
    that stay below zero before their ReLU at a range of 0, the largest gain, and on image-like
    inputs 2 to 32 channels of a pool saturated (sums up to 8 times the range)."""
    if (not layer.scaling_ops or np.any(layer.bias)
            or not all(isinstance(p, Scale) for p in layer.post_ops[:layer.scaling_ops])):
        return None
    total = np.zeros(layer.output.C)
    for inp in layer.inputs:
        if inp.diagonal is None or inp.act.C != layer.output.C:
            return None
        total += np.abs(inp.diagonal).reshape(layer.output.C, -1).sum(axis=1) * bounds.read(inp.act)
    for p in layer.post_ops[:layer.scaling_ops]:
        total = total * np.abs(np.broadcast_to(np.asarray(p.values, np.float64).reshape(-1), (layer.output.C,)))
    return total


def _post(acc: np.ndarray, post_ops, ev, copies: dict[int, list] | None = None) -> np.ndarray:
    for k, p in enumerate(post_ops):
        acc = p.evaluate(acc, ev.read)
        if copies is not None and p.written is not None:
            copies.setdefault(k, []).append(p.saved(acc))
    return acc


def estimate_ranges(hir: HirProgram, ctx) -> HirProgram:
    """The pass, in plain compiles of a fixed-point architecture asked for estimated gains
    (``ctx.estimate_gains``; with ``ctx.samples`` ``measure_ranges`` measures instead):
    ``HirProgram.ranges`` from ``estimate``."""
    if ctx.samples or not ctx.estimate_gains or not ctx.arch.data_type.is_fixed:
        return hir
    if hir.ranges:
        # Estimated already, as ``split_long_reductions`` sized its parts (one estimate, not two:
        # ResNet-50 v2's takes 8 to 11 s).
        return hir
    # Its products are small (blocks of N channels), and BLAS threads spinning on a loaded
    # machine made the estimate 6x slower (2 cores shared by several jobs): one thread.
    with one_blas_thread():
        return dataclasses.replace(hir, ranges=estimate(hir))


def one_blas_thread():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - installed with scikit-learn; not a hard dependency
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")
