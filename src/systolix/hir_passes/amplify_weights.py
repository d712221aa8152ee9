"""Calibrated weight amplification: more of the fixed-point format's bits for the weights, as
far as the accumulators have room.

FP16BP8 has one binary point for every value, so the small weights of a deep layer use few of
its bits: a 3x3 conv over 256 channels with batch norm folded in has weights of about 0.02 (five
LSB), and rounding them and each product costs about 2% of the layer's output. Xilinx's DPU
gives every tensor its own fixed-point position for this reason. A Tensil array has one binary
point, but a layer can amplify output channel ``c``'s weights and bias by ``2^k_c``: the
accumulators then hold the sum ``2^k_c`` times larger, every weight and product keeps ``k_c``
more significant bits, and one SIMD multiply by ``2^-k_c`` (a power of two, exact to represent
for ``k <= bp``; one rounding) brings the sum back first among the layer's accumulator
operations (an estimated gain: ``m / 2^bp``, below). The saved tensor keeps its scale, so nothing
downstream changes.

How large ``k_c`` can be depends on the sums the accumulators reach, which only data tells:
``measure_ranges`` runs the IR in float (``systolix.ir.evaluate``) on sample inputs and keeps,
per layer and output channel, the largest partial or final sum (of 32 samples: see
``REFERENCE_SAMPLES``); other inputs reach further, so from at least 64 samples it also fits
an extreme-value law to each channel's per-sample peaks and extrapolates the largest sum over
10^10 inputs (``LayerRange.tail``), and ``amplify_weights`` picks the largest ``k_c`` that
keeps that below saturation (with fewer samples: fixed headrooms over the peak).
Without calibration data ``estimate_ranges`` estimates the ranges from the model itself (its
batch-norm statistics and weights), margins included, and a layer keeps its estimated gain only
where it removes enough of the layer's output error for its multiply (``gain_payoff``). An
estimated gain need not be a power of two: the undo multiplies by ``m / 2^bp`` (``m`` whole, so
exact) and the weights by ``2^bp / m``, the largest such factor within the range. Rounding down
to a power of two gave up 1.44x of the factor on average (2x in variance of the products'
rounding); ResNet-20 v2's plain error on 1,000 image-like inputs fell from 3.25 to 2.62 LSB RMS,
the MobileNetV2 stack's from 4.86 to 3.75, with 2 of the 1,000 inputs saturating, before and after
(``scripts/agreement.py --only-plain``). Layers of one value a channel per image keep powers of
two (``channel_gains``).

An average pool sums its window with weights ``2^-shift`` and scales the sum to the mean with its
own multiplies (``ConvLayer.scaling_ops``), so its accumulators hold 4 to 8x the mean: a mean past
16 would saturate. Its weights are powers of two, so a negative ``k_c`` is exact too: the pool's
gain may go below zero when the samples' sums (times the pool's own multipliers) need the room,
and it is undone after those multipliers, where the value is back to the mean's scale.

Scaling every stored tensor to fill its range (per-tensor binary points) was tried and measured
worse: a consumer's sums keep their range, so an input stored ``2^e`` larger leaves its weights
``2^e`` smaller, and the accumulator's few bits of headroom are better spent on the weights, whose
rounding dominates (``K * E[x^2]`` LSB^2 per sum against one LSB^2 for storing the result). So
``tensor_exponents`` (which runs before this pass; a gain then undoes to the output's exponent)
stores a tensor at an exponent only where an estimate of both says the tensor's own rounding
dominates: small tensors.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from systolix.hir_passes.gain_payoff import ErrorVariances, pays
from systolix.hir_passes.measure_ranges import LayerRange, average_of_rows, exact
from systolix.hir_passes.pool_scales import paired_scales
from systolix.ir.hir import ConvLayer, HirProgram
from systolix.ir.postops import Scale
from systolix.numerics import DataType

# With fewer than ``measure_ranges.TAIL_SAMPLES`` samples (no extreme-value tail), fixed
# headrooms: other inputs reach further than the calibration samples did. Sums stay 2.5x below the limit
# of their channel's calibrated peak and 1.5x below their layer's (and k is rounded down): a few
# samples say little about one channel's tail (on ResNet-20, one logit reached 2.4x its own peak
# over 32 samples, 2.0x its layer's). Measured on ResNet-20, the MobileNetV2 stack and the MLP,
# 300 inputs each: no sum saturated, and these settings had the smallest errors of those tried
# that did not saturate.
LAYER_HEADROOM = 1.5
# A channel's own peak counts only down to this fraction of its layer's largest: a few samples
# say little about one channel's tail (measured: 16 samples under-estimate a channel's peak over
# 100 other inputs by up to 6x, its layer's by much less).
CHANNEL_HEADROOM = 2.5
# Fewer values than this behind a channel's peak, and the peak is a poor guide to the tail.
FEW_OBSERVATIONS = 1024
GAIN_NODE = "calibrated gain"
# Estimated ranges (``estimate_ranges``, plain compiles) carry their margins; a channel's range
# counts only down to this fraction of its layer's largest.
ESTIMATED_LAYER_FLOOR = 0.0


def planned_sums(seen: LayerRange, layer: ConvLayer) -> np.ndarray:
    """Per output channel, the largest |sum| to keep below saturation: an estimated range as it
    is (its margins included); a measured one's extreme-value tail (``LayerRange.tail``), or with
    too few samples for it (or where it is NaN) the fixed headrooms; never below any sample's
    own sums."""
    if seen.estimated:
        expected = np.maximum(seen.peak, float(np.max(seen.peak, initial=0.0)) * ESTIMATED_LAYER_FLOOR)
    else:
        expected = np.maximum(seen.peak * CHANNEL_HEADROOM, float(np.max(seen.peak, initial=0.0)) * LAYER_HEADROOM)
        if seen.observations < FEW_OBSERVATIONS and all(inp.weights is None for inp in layer.inputs):
            # A global pool: one value per sample and channel, with a heavy tail (on ResNet-20 one
            # channel went 3.4x past the largest of all channels over 16 samples): assume 4x more,
            # as far as the bound from its few taps and its input's range allows.
            expected = np.maximum(expected, np.minimum(4 * expected, seen.bound))
        if seen.tail is not None:
            # The tail where the law holds (``measure_ranges``: not NaN), the fixed headrooms elsewhere.
            expected = np.where(np.isnan(seen.tail), expected, seen.tail)
    if seen.largest is not None:
        expected = np.maximum(expected, seen.largest)  # no calibration sample saturates
    return expected


def channel_gains(layer: ConvLayer, seen: LayerRange, dtype: DataType) -> np.ndarray:
    """``k_c`` per output channel (the factor ``2^k_c``): as large as the calibrated sums and the
    amplified weights allow, at most the binary point (``2^-bp`` is the type's smallest step);
    ``log2(2^bp / m)`` (``undoable_gain``) for ranges with their margins (estimated, or a
    measured tail), else whole."""
    top = dtype.binary_point
    expected = planned_sums(seen, layer)
    wmax = np.abs(np.asarray(layer.bias, np.float64))
    for inp in layer.inputs:
        w = inp.coefficients
        wmax = np.maximum(wmax, np.max(np.abs(w.reshape(w.shape[0], -1)), axis=1, initial=0.0))
    largest = np.full(layer.output.C, 2.0 ** top)  # the largest factor each channel's sums allow
    for c in range(layer.output.C):
        for bound, room in ((float(expected[c]), dtype.max_value), (float(wmax[c]), dtype.max_value / 2)):
            if bound > 0:
                largest[c] = min(largest[c], room / bound)
    if not layer.scaling_ops and (seen.tail is not None or seen.estimated) and layer.output.H * layer.output.W > 1:
        # Estimated ranges and measured tails carry their margins: any factor up to them, not
        # only powers of two. Not where each image gives one value a channel (a classifier's
        # logits): their tail is the heaviest, and on ResNet-20 v2 one image-like input then
        # saturated by 708 LSB (estimated); with tails there too (powers of two), the MLP's error
        # grew from x1.22 to x1.38 the limit's.
        gains = np.array([undoable_gain(float(g), top) for g in largest])
    else:
        # The fixed calibrated headrooms were set with gains rounded down to powers of two, which adds 1 to
        # 2x more room: any factor up to them saturated more (ResNet-20 v2, 1,000 inputs: 6
        # against 1), and with headrooms widened to keep the same saturation, the error was the
        # same as with powers of two (1.59 against 1.62 LSB RMS).
        gains = np.clip(np.floor(np.log2(np.maximum(largest, 2.0 ** -top))), 0, top).astype(np.int64)
    # An estimated range carries its margins already; a measured one gets LAYER_HEADROOM.
    reach = seen.peak if seen.estimated else None if seen.largest is None else seen.largest * LAYER_HEADROOM
    if reach is not None and not seen.estimated and average_of_rows(layer):
        # The rows of a separated global average: the headroom of its global pool (``planned_sums``).
        # A row's mean is nearer its largest value than the global mean is: calibrated on 32
        # image-like samples, ResNet-50 v2's 7-value rows took one of 100 other inputs to 1.05x
        # their range at 1.5x the samples' largest.
        reach = expected
    if layer.scaling_ops and reach is not None:
        # An average pool whose sums come near saturating it (a mean of about 16 and more)
        # gets a negative gain, as far as keeps its sums below the limit: below 0 every step
        # costs the sum a bit of precision, so the wider headroom of the positive gains is not
        # taken. Its weights stay exact (at least 2^-bp) and the undo 2^-k representable.
        smallest = min(float(np.min(np.abs(inp.coefficients))) for inp in layer.inputs)
        lowest = max(math.ceil(math.log2(2.0 ** -top / smallest)), -math.floor(math.log2(dtype.max_value)))
        for c in np.flatnonzero(reach > dtype.max_value):
            gains[c] = max(lowest, math.floor(math.log2(dtype.max_value / float(reach[c]))))
    return gains


def undoable_gain(largest: float, top: int) -> float:
    """``k`` of the largest factor ``2^k <= largest`` whose undo ``2^-k = m / 2^top`` (``m`` a
    whole number from 1 to ``2^top``) is exact in the fixed-point type: 0 when ``largest < 1``."""
    if largest < 1.0:
        return 0.0
    m = min(2 ** top, max(1, math.ceil(2.0 ** top / largest - 1e-9)))
    return math.log2(2.0 ** top / m)


def _no_mean_squares(layer: ConvLayer) -> list[np.ndarray]:
    return [np.zeros(inp.act.C) for inp in layer.inputs]


def _paying(layer: ConvLayer, seen: LayerRange, gains: np.ndarray, errors: ErrorVariances) -> np.ndarray:
    """``gains``, or none where they do not pay (``gain_payoff``); the layer's output error
    carried on either way. Negative gains and an average pool's keep its sums in range: kept."""
    mean_squares = seen.input_mean_square or _no_mean_squares(layer)
    inherited = errors.inherited(layer)
    own = errors.own(layer, mean_squares, gains)
    if (seen.estimated and seen.input_mean_square is not None and not layer.scaling_ops and np.any(gains)
            and np.all(gains >= 0)):
        plain = errors.own(layer, mean_squares, np.zeros_like(gains))
        if not pays(inherited, plain, own):
            gains, own = np.zeros_like(gains), plain
    errors.conv(layer, inherited + own, seen.post_slope)
    return gains


def _powers_of_two_in_range(values: np.ndarray, dtype: DataType) -> bool:
    """Every value is ``2^e`` with ``2^e`` exact in ``dtype`` (``-bp <= e``, at most its largest)."""
    exponents = np.log2(values)
    return bool(np.all(exponents == np.round(exponents)) and np.all(exponents >= -dtype.binary_point)
                and np.all(values <= dtype.max_value))


def amplify_weights(hir: HirProgram, ctx) -> HirProgram:
    """The pass: each conv layer with measured ranges (``HirProgram.ranges``) gets its
    per-channel gains (weights and bias times ``2^k``, then a multiply by ``2^-k`` first among
    its accumulator operations, or right after an average pool's own scaling)."""
    dtype = ctx.arch.data_type
    peaks: dict[int, LayerRange] = hir.ranges
    layers = []
    gains_by_layer: dict[str, np.ndarray] = {}
    # Estimated gains are weighed against what they buy (``gain_payoff``), layer by layer in order.
    errors = ErrorVariances(hir, dtype) if any(r.estimated for r in peaks.values()) else None
    for index, layer in enumerate(hir.layers):
        # An average pool's exact weights (1 for a window of under 8 values) may still sum past
        # the type's range: it may need a negative gain.
        if (not isinstance(layer, ConvLayer) or index not in peaks
                or (exact(layer, dtype) and not layer.scaling_ops)):
            if errors is not None:
                if isinstance(layer, ConvLayer):
                    errors.conv(layer, errors.inherited(layer) + errors.own(layer, _no_mean_squares(layer), 0), None)
                else:
                    errors.other(layer)
            layers.append(layer)
            continue
        gains = channel_gains(layer, peaks[index], dtype)
        if errors is not None:
            gains = _paying(layer, peaks[index], gains, errors)
        if not np.any(gains):
            layers.append(layer)
            continue
        # The undo is m / 2^bp with m whole (``undoable_gain``), so exact; the weights take its inverse.
        m = np.round(2.0 ** (dtype.binary_point - gains))
        factor = (2.0 ** dtype.binary_point / m).astype(np.float32)
        undo = (m / 2.0 ** dtype.binary_point).astype(np.float32)
        inputs = [inp.scaled(factor) for inp in layer.inputs]
        post = list(layer.post_ops)
        last = post[layer.scaling_ops - 1] if layer.scaling_ops else None
        merged = None if not isinstance(last, Scale) else last.values.astype(np.float64) / factor
        if merged is not None and _powers_of_two_in_range(merged, dtype):
            # The pool's last multiply is by 2^-m: one multiply by 2^-(m+k) rounds once.
            post[layer.scaling_ops - 1] = dataclasses.replace(last, values=merged.astype(np.float32))
        else:
            post.insert(layer.scaling_ops, Scale(undo, node=GAIN_NODE))
        layers.append(dataclasses.replace(layer, inputs=inputs, bias=(layer.bias * factor).astype(np.float32),
                                          post_ops=post))
        gains_by_layer[layer.name] = gains
    # Gains and exponents scale an average pool's weights by powers of two: back on the grid.
    if dtype.is_fixed:
        layers = [paired_scales(layer, dtype) if isinstance(layer, ConvLayer) and layer.scaling_ops else layer
                  for layer in layers]
    return dataclasses.replace(hir, layers=layers, gains={**hir.gains, **gains_by_layer})
