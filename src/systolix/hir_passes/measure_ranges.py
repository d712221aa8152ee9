"""Measure ranges: run the HIR in float on the calibration samples and keep, per conv layer and
output channel, the largest partial or final sum its accumulators reach, how far such sums may go
on other inputs (an extreme-value law fitted to the samples' own peaks, ``extreme_peak``), and
the Gram matrices of its inputs that ``round_weights`` needs, in ``HirProgram.ranges``.

A calibrated compile only (``ctx.samples``): without samples nothing is measured, and the passes
that read the ranges (``amplify_weights``, ``round_weights``) leave every layer as it is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from systolix.hir_passes.round_weights import GRAM_BUDGET, GramSums, accumulate_gram, gram_size, shrunk
from systolix.ir.evaluate import evaluate
from systolix.ir.hir import ConvLayer, HirProgram
from systolix.numerics import DataType

# The headrooms of ``amplify_weights`` are set for the peak of this many samples. Given more, a channel's peak is
# the value that many samples typically reach (the (n/32)-th largest of the samples' own peaks),
# not the largest of all: the largest of n samples grows with n, and the same headroom on top of
# it made more data cost accuracy (MobileNet's logits: 2.7 LSB RMS from 32 samples, 3.3 from 128,
# the gains lower on 15 of its 18 layers). More samples then give a steadier estimate instead,
# and every sample's own sums still stay in range (``LayerRange.largest``).
REFERENCE_SAMPLES = 32
# The inputs a calibrated compile plans its ranges for: per channel, the largest sum expected over
# this many inputs (``tail``), extrapolated from the samples' own peaks. The moments' Gumbel law
# under-estimates a heavier tail (image-like inputs, whose brightness scales every value of an
# image), so this is set by saturation, on ResNet-20 v2 and the MobileNetV2 stack: calibrated on
# 128 image-like samples, of 1,000 other image-like inputs (``scripts/agreement.py``, ultra96v2)
# 10^6 saturated 10 of ResNet-20 v2's, 10^10 3 (1 with the fixed headrooms), all tails used; with
# the one-pixel layers on the fixed headrooms (below), 10^10 1. On random normal inputs (64
# samples, 64 test inputs) none saturated from 10^6 on, and the error against the limit's grew
# with it (ResNet-20 v2 x1.26 at 10^6 to x1.43 at 10^10, the MobileNetV2 stack x1.17 to x1.29).
TAIL_INPUTS = 10**10
# Fewer samples than this and their peaks say too little of the tail: ``amplify_weights``' fixed
# headrooms instead. Calibrated on 32 image-like samples, ResNet-50 v2 saturated 1 of 100 other
# image-like inputs on the emulator; on 64, none (``tests/e2e/test_compile_networks.py``).
TAIL_SAMPLES = 64


@dataclass
class LayerRange:
    """What calibration saw of one conv layer."""

    peak: np.ndarray  # per output channel, the largest |partial or final sum| (of
    # REFERENCE_SAMPLES samples; see measure)
    bound: np.ndarray  # per output channel, sum_i |w_i| * max|input| + |bias|: no input under the
    # samples' largest value can take a sum past it
    observations: int  # values behind each channel's peak (samples x output pixels)
    gram: np.ndarray | None = None  # its inputs' sum of x x^T, their correlations shrunk by how
    # much they vary from sample to sample (``round_weights.shrunk``)
    largest: np.ndarray | None = None  # per output channel, the largest over every sample (the
    # peak when there are no more than REFERENCE_SAMPLES)
    estimated: bool = False  # from the model itself, not samples (``estimate_ranges``): ``peak``
    # is the range to keep below saturation, margins included
    input_mean_square: list[np.ndarray] | None = None  # estimated ranges: per input, per channel,
    # the mean square of its values (real scale, before any exponent) that ``gain_payoff`` weighs
    input_mean: list[np.ndarray] | None = None  # estimated ranges: per input, per channel, the mean
    # of its values (real scale) that ``correct_biases`` takes the weights' rounding against
    post_slope: np.ndarray | None = None  # estimated ranges: per output channel, the mean squared
    # slope of the post-ops after the sum (how much of the sums' error reaches the output)
    tail: np.ndarray | None = None  # measured ranges of at least TAIL_SAMPLES samples, outputs of
    # more than one pixel: per output channel, the largest |sum| expected over TAIL_INPUTS inputs
    # (``extreme_peak``); NaN where every sample's peak was the same, or some sample's was 0
    whole: "LayerRange | None" = None  # the last part of a split reduction: the range of the
    # whole sum, its other parts added (``tensor_exponents`` sums the parts at the exponent it allows)


def extreme_peak(per_sample: np.ndarray, inputs: int | None = None) -> np.ndarray:
    """Per channel of ``[samples, C]`` per-sample peaks, the largest expected over ``inputs``
    inputs: the mode of the maximum of ``inputs`` draws from a Gumbel distribution (the limit law
    of a maximum of many values) fitted to the samples' peaks by their moments, ``mu + beta ln
    inputs`` with ``beta = s sqrt(6) / pi`` and ``mu = mean - 0.5772 beta``. A channel whose peak
    is steady from sample to sample (a large map's) gets little headroom; one whose peak jumps (a
    logit) gets much."""
    inputs = TAIL_INPUTS if inputs is None else inputs
    peaks = np.asarray(per_sample, np.float64)
    beta = peaks.std(axis=0, ddof=1) * math.sqrt(6.0) / math.pi
    return peaks.mean(axis=0) + beta * (math.log(inputs) - np.euler_gamma)


def measure(hir: HirProgram, samples: Sequence[dict[str, np.ndarray]], dtype: DataType | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[int, LayerRange]:
    """Per conv layer (index into ``hir.layers``) its ``LayerRange`` over ``samples`` (dicts of
    ONNX-shaped inputs), from the IR run in float. Given the ``dtype`` the weights will be
    stored in, also the Gram matrices ``round_weights`` needs, of every layer it would change.
    ``progress(done, total)`` is called after each float run (a second of ResNet-50's each)."""
    peaks: dict[int, list[np.ndarray]] = {}
    wholes: dict[int, list[np.ndarray]] = {}  # a split reduction's last part: its whole sum's peaks
    inputs: dict[int, list[float]] = {}
    # The Gram matrices of a large model do not all fit in memory at once: as many layers as
    # GRAM_BUDGET holds ride along with the range-finding runs, the rest take more runs.
    sizes = {i: gram_size(layer, len(samples)) for i, layer in enumerate(hir.layers)
             if dtype is not None and dtype.is_fixed and isinstance(layer, ConvLayer) and not exact(layer, dtype)}
    groups: list[list[int]] = []
    used = GRAM_BUDGET
    for i, size in sizes.items():
        if not size:
            continue
        if used + size > GRAM_BUDGET:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += size
    grams: dict[int, GramSums] = {}

    def add_grams(ev, group: list[int]) -> None:
        for i in group:
            grams[i] = accumulate_gram(hir.layers[i], ev, grams.get(i))

    runs = len(samples) * max(1, len(groups))
    done = 0

    def evaluated(feeds):
        nonlocal done
        ev = evaluate(hir, feeds)
        done += 1
        if progress is not None:
            progress(done, runs)
        return ev

    for feeds in samples:
        ev = evaluated(feeds)
        for index, peak in ev.sum_max.items():
            wholes.setdefault(index, []).append(peak)
        for index, peak in ev.accumulator_max.items():
            peaks.setdefault(index, []).append(peak)
            values = [np.asarray(ev.read(inp.act), np.float64).reshape(inp.act.C, -1) for inp in hir.layers[index].inputs]
            seen = [float(np.max(np.abs(v), initial=0.0)) for v in values]
            inputs[index] = seen if index not in inputs else [max(a, b) for a, b in zip(inputs[index], seen)]
        if groups:
            add_grams(ev, groups[0])
    for group in groups[1:]:
        for feeds in samples:
            add_grams(evaluated(feeds), group)
    ranges = {}
    rank = max(1, len(samples) // REFERENCE_SAMPLES)  # 1: the largest
    used = min(len(samples), REFERENCE_SAMPLES)
    # The mean of a row reaches as far as the row's largest value: a separated global average's
    # second pass is bounded as the whole average is, by the largest value of the map (not by the
    # samples' row means, whose tail is as heavy as the global mean's).
    row_means = {id(hir.layers[i].output.root()[0]): inputs[i][0] for i in inputs if average_of_rows(hir.layers[i])}
    for index, per_sample in peaks.items():
        stacked = np.stack(per_sample)
        peak = -np.partition(-stacked, rank - 1, axis=0)[rank - 1]
        layer = hir.layers[index]
        bound = np.abs(np.asarray(layer.bias, np.float64))
        for inp, xmax in zip(layer.inputs, inputs[index]):
            xmax = max(xmax, row_means.get(id(inp.act.root()[0]), 0.0))
            w = inp.coefficients
            bound = bound + np.sum(np.abs(w.reshape(w.shape[0], -1)), axis=1) * xmax
        tail = _tail(stacked, layer, len(samples))
        whole = None
        if index in wholes:
            summed = np.stack(wholes[index])
            # (No bound from the weights: the other parts' inputs are not this layer's.)
            whole = LayerRange(-np.partition(-summed, rank - 1, axis=0)[rank - 1], np.full_like(bound, np.inf),
                               used * layer.output.P, largest=summed.max(axis=0), tail=_tail(summed, layer, len(samples)))
        gram = shrunk(grams[index]) if index in grams else None
        ranges[index] = LayerRange(peak, bound, used * layer.output.P, gram, stacked.max(axis=0),
                                   tail=tail, whole=whole)
    return ranges


def _tail(stacked: np.ndarray, layer: ConvLayer, samples: int) -> np.ndarray | None:
    """Per channel of ``[samples, C]`` per-sample peaks, ``extreme_peak`` where its law holds
    (NaN elsewhere); None with fewer than ``TAIL_SAMPLES`` samples.

    The law is that of maxima of many values: not for a layer of one value a channel per sample
    (a classifier's logits, a global pool), whose image-like inputs' tail is heavier (ResNet-20
    v2's logits went 2.4x past their tail for 10^6 inputs within 1,000 inputs): None there too,
    nor for the rows of a separated global average (``average_of_rows``), each the mean of a
    whole row and as heavy-tailed as the global mean.
    No tail (NaN) where the law does not hold: a channel whose peak never moved from sample to
    sample (a constant such as the bias, added first, larger than every sum), or one silent on
    some sample: an on-off channel few inputs excite, zero on most and spiking on a few
    (ResNet-50 v2's global pool had channels whose peak was 0 on most of 64 samples and 0.06 at
    most, and a test input took one to 0.69, 9x its tail for 10^6 inputs). Sums over many
    channels (near normal, never exactly 0) follow it."""
    if samples < TAIL_SAMPLES or layer.output.P <= 1 or average_of_rows(layer):
        return None
    lawful = (stacked.std(axis=0) > 0) & np.all(stacked > 0, axis=0)
    return np.where(lawful, extreme_peak(stacked), np.nan)


def whole_line_average(layer: ConvLayer) -> bool:
    """An average pool (per-channel taps, its own scaling) whose window spans its input's whole
    width or height: each value it gives is the mean of a whole row or column of an image
    (``separate_averages``' first pass of a global average), ruled by the image's brightness as
    the global mean is. Not a depthwise conv, whose taps are weights."""
    return (bool(layer.scaling_ops) and bool(layer.inputs) and all(inp.weights is None for inp in layer.inputs)
            and any(layer.kernel[axis] > 1 and layer.kernel[axis] == (inp.act.H, inp.act.W)[axis]
                    for inp in layer.inputs for axis in (0, 1)))


def average_of_rows(layer: ConvLayer) -> bool:
    """A ``whole_line_average`` of more than one value a channel: the first pass of a separated
    global average (the second gives one pixel)."""
    return layer.output.P > 1 and whole_line_average(layer)


def exact(layer: ConvLayer, dtype: DataType) -> bool:
    """Integer weights and a representable bias (copies, tensor adds, padding): every product and
    sum is exact already, so a gain would add SIMD work and change nothing."""
    for inp in layer.inputs:
        if not np.array_equal(inp.coefficients, np.round(inp.coefficients)):
            return False
    scaled = np.asarray(layer.bias, np.float64) * 2.0 ** dtype.binary_point
    return bool(np.array_equal(scaled, np.round(scaled)))




def measure_ranges(hir: HirProgram, ctx) -> HirProgram:
    """The pass: ``HirProgram.ranges`` from the float runs on ``ctx.samples`` (none: unchanged)."""
    if not ctx.samples:
        return hir
    ranges = measure(hir, ctx.samples, ctx.arch.data_type, ctx.reporter("calibrating"))
    return dataclasses.replace(hir, ranges=ranges)
