"""Tensor exponents: per-tensor binary points for the saved activations.

FP16BP8 stores every value on the grid ``2^-8``, so a tensor whose values stay near 0.1 (a deep
layer's output, a batch norm + ReLU of small range) keeps five significant bits. Given the ranges
the compile already has (``HirProgram.ranges``: measured on calibration samples by
``measure_ranges``, or estimated from the model by ``estimate_ranges``), this pass stores such a
tensor at an exponent ``e``: the stored value is ``real * 2^e``, ``e`` at most what keeps the
tensor's range ``HEADROOM`` times below saturation (and ``MAX_EXPONENT``, at least 0).

Filling the range is not always better: a consumer's sums keep their range (which sets its gain),
so its weights become ``2^e`` smaller and lose ``e`` bits. Within the range ``e`` is the one that
minimises an estimate of the error the tensor adds to its consumers' sums (``_consumer_cost``: its
own rounding, ``2^-2e``, against their weights' rounding, which grows as ``2^2e`` once their gain
cannot make it up, and their products'), taken only where the estimate at least halves
(``REQUIRED_GAIN``): small tensors, or tensors read by depthwise layers of few products.

Its producer computes at that exponent: a conv layer's weights on input ``i`` are multiplied by
``2^(e_out - e_i)`` and its bias and the constants of its accumulator operations that add to or
bound the value (clip thresholds, added constants) by ``2^e_out``; every other operation it
applies is positively homogeneous (ReLU, slopes, multiplies) and commutes with the scale. Where a
layer applies an operation that does not (a SIMD approximation of sigmoid, softmax...), its output
stays at exponent 0. Every consumer compensates the same way (a conv layer reading the tensor has
its weights multiplied by ``2^-e``), and the ranges of the layers are scaled with them, so that
``amplify_weights`` (which runs next) sizes its gains, and undoes them, at the new exponents: a
layer's gain undo brings its sum back to its output's exponent, not to 0.

Exponents are per root tensor (a Concat's parts share their tensor's), and equal across what must
agree: the input and output of data movement and max pooling, and a residual add's operands and
result. Not the parts of a one-pixel layer, nor a calibrated compile's map's (``split_long_reductions``,
``maps_apart``): their partial results share an
exponent of their own, as fine as the whole sum allows (``LayerRange.whole``, the range of the sum
of every part: the parts' ranges added are far wider), and the last part computes its sum at it,
adds the others, then multiplies by ``2^(e_out - e_sum)`` (exact; one rounding, the output's) before
its other operations (``SUM_NODE``). A part's rounding then costs ``2^(-2 e_sum)`` of one at the
output's exponent: ResNet-20 v2's calibrated head, 2 parts of 128 channels, sums at ``2^2``.
The program's inputs and outputs stay at exponent 0 (Tensil's driver and the runtime are
unchanged), as do the operands of multiplications of two tensors. A tensor's range is bounded
from its producer's accumulator ranges through its operations (interval arithmetic: a residual
add's bound is the sum of its operands'), so no sum that stays within the ranges saturates.
Without ranges (a plain compile without estimated gains) the pass does nothing.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from systolix.hir_passes.amplify_weights import planned_sums
from systolix.hir_passes.gain_payoff import part_adds, summed_tensor
from systolix.hir_passes.measure_ranges import LayerRange
from systolix.ir.hir import Activation, ConvLayer, HirProgram, MaxPoolLayer, PixelMixLayer, RemapLayer, ShuffleLayer
from systolix.ir.postops import PART_NODE, AddBroadcast, AddConstant, AddTensor, Clip, MulBroadcast, MulTensor, Relu, Save, Scale, ScalePixels, Slope
from systolix.numerics import DataType

# A tensor's range (measured: of the samples' peaks with amplify_weights' headrooms; estimated:
# margins included) is kept this much below saturation.
HEADROOM = 1.0
# Largest exponent given to a tensor: a consumer's weights are multiplied by 2^-e and lose as
# many bits unless its own gain (at most 2^bp) or output exponent makes them up.
MAX_EXPONENT = 8
# A tensor's peak over its RMS (to estimate the weights' rounding error of its consumers where
# the samples' Gram matrix does not give the mean square).
PEAK_TO_RMS = 8.0
# GPTQ rounding (``round_weights``) leaves this fraction of the weights' rounding error.
GPTQ_FACTOR = 0.25
# An exponent is taken only where it is estimated to cut the error its tensor adds at least
# this much: the estimate is rough (a ReLU's zeros round exactly; GPTQ helps some layers more
# than others), and on ResNet-20 v2 exponents estimated to save 15 to 45% (of unit-scale
# tensors) cost 10% of its logits' accuracy (1.60 -> 1.77 LSB RMS, 32 inputs).
REQUIRED_GAIN = 0.5

# The node of the multiply that brings a split reduction's sum of parts to its output's exponent.
SUM_NODE = "sum of parts to the output's exponent"

# Accumulator operations that commute with a positive scale (constants aside, scaled below).
_HOMOGENEOUS = (Relu, Scale, ScalePixels, Slope, Clip, AddConstant, AddTensor, AddBroadcast, MulTensor, MulBroadcast, Save)
_HOMOGENEOUS_KINDS = {"slope_map"}


class _Groups:
    """Union-find over root tensors (by id): tensors that must share an exponent."""

    def __init__(self):
        self.parent: dict[int, int] = {}

    def find(self, a: int) -> int:
        self.parent.setdefault(a, a)
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


def _root(act: Activation) -> int:
    return id(act.root()[0])


def sum_root(layer: ConvLayer, maps: bool = False) -> int:
    """The root tensor (id) whose exponent ``layer``'s sums are computed at."""
    return _root(summed_tensor(layer, maps))


def maps_apart(hir: HirProgram) -> bool:
    """Whether a map's parts are summed at an exponent of their own, like a one-pixel layer's:
    where the ranges are measured on samples (a calibrated compile). The multiply to the output's
    exponent costs one SIMD operation per output vector (calibrated, on ``ultra96v2``,
    ``benchmarks/bench_accuracy.py``: ResNet-20 v2's error 1.39 -> 1.32 times the limit's,
    YOLOv4-tiny's 1.76 -> 1.72, ResNet-50 v2's 1.30 -> 1.26, the untuned VGG's 1.20 -> 1.25, with
    the parts then priced at one image). The estimate's bound of a whole sum follows its synthetic inputs and the batch norms'
    statistics, and a sum at the finer exponent it allows went past its range: ResNet-50 v2's
    plain error 1.86 -> 2.48 times the limit's."""
    return any(not r.estimated for r in hir.ranges.values())


def _homogeneous(op) -> bool:
    return isinstance(op, _HOMOGENEOUS) or op.kind in _HOMOGENEOUS_KINDS


def _sum_bound(seen: LayerRange, layer: ConvLayer) -> float:
    """The largest |sum| of a layer's accumulators to plan for (amplify_weights' margins)."""
    return float(np.max(planned_sums(seen, layer), initial=0.0))


def tensor_bounds(hir: HirProgram) -> tuple[dict[int, float], dict[int, float]]:
    """``(tensor, accumulator)``: per root tensor (id) the largest |value| it may hold, and per
    conv layer (index) the largest |value| its accumulators may hold, through its operations; a
    tensor whose bound is unknown is absent."""
    tensors: dict[int, float] = {}
    accumulators: dict[int, float] = {}
    maps = maps_apart(hir)

    def bound(act) -> float | None:
        return tensors.get(_root(act))

    def put(act, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            tensors.pop(_root(act), None)  # unknown from here on: pinned by the caller
            return
        key = _root(act)
        tensors[key] = max(tensors.get(key, 0.0), value)

    for index, layer in enumerate(hir.layers):
        if isinstance(layer, ConvLayer):
            seen = hir.ranges.get(index)
            if seen is None:
                put(layer.output, None)
                continue
            acc = largest = _sum_bound(seen, layer)
            # A split reduction's sum of parts: bounded by the whole sum's range where known (the
            # parts' own ranges add up to far more than their sum reaches).
            summed = [k for k, op in enumerate(layer.post_ops) if op.node == PART_NODE] if part_adds(layer, maps) else []
            whole = None if not summed or seen.whole is None else _sum_bound(seen.whole, layer)
            for k, op in enumerate(layer.post_ops):
                if k < layer.scaling_ops:
                    continue  # counted in the accumulator ranges
                if isinstance(op, (Relu, Slope)) or op.kind == "slope_map":
                    slopes = getattr(op, "values", None)
                    acc *= max(1.0, float(np.max(np.abs(slopes), initial=0.0))) if slopes is not None else 1.0
                elif isinstance(op, Clip):
                    acc = min(acc, max(abs(op.lo), abs(op.hi)))
                elif isinstance(op, (Scale, ScalePixels)):
                    acc *= float(np.max(np.abs(op.values), initial=0.0))
                elif isinstance(op, AddConstant):
                    acc += float(np.max(np.abs(op.values), initial=0.0))
                elif isinstance(op, (AddTensor, AddBroadcast)):
                    b = bound(op.operand)
                    acc = acc + b if b is not None else math.inf
                elif isinstance(op, (MulTensor, MulBroadcast)):
                    b = bound(op.operand)
                    acc = acc * b if b is not None else math.inf
                elif not isinstance(op, Save):  # a copy of the tile leaves it as it is
                    acc = math.inf  # unknown: the output stays at exponent 0
                if whole is not None and k in summed:
                    acc = min(acc, whole)  # a sum of some of the parts: about as wide as all
                largest = max(largest, acc)
                if op.written is not None:
                    put(op.written, acc)
            if math.isfinite(largest):
                accumulators[index] = largest  # else unknown (an op not bounded above): absent
            put(layer.output, acc)
        elif isinstance(layer, PixelMixLayer):
            b = bound(layer.input)
            sums = np.zeros(layer.output.P)
            np.add.at(sums, layer.out_pixel, np.abs(layer.coefficient))
            put(layer.output, None if b is None else b * float(np.max(sums, initial=0.0)))
        elif isinstance(layer, (MaxPoolLayer, RemapLayer, ShuffleLayer)):
            put(layer.output, bound(layer.input))
        else:  # another kind (a product of two computed tensors): unknown, so pinned at 0
            put(layer.output, None)
    return tensors, accumulators


def choose_exponents(hir: HirProgram, dtype: DataType) -> dict[int, int]:
    """Per root tensor (id) its exponent (only those above 0): as large as its range allows,
    then lowered wherever a producer's weights times ``2^(e_out - e_in)`` would pass half the
    type's range (an input at a lower exponent than the output), until none does."""
    tensors, accumulators = tensor_bounds(hir)
    maps = maps_apart(hir)
    limits: dict[int, float] = {}
    while True:
        exponents = _exponents(hir, dtype, tensors, accumulators, limits)
        changed = False
        for layer in hir.layers:
            if not isinstance(layer, ConvLayer):
                continue
            out = sum_root(layer, maps)  # the scale its weights compute at
            e_out = exponents.get(out, 0)
            stored = _root(layer.output)
            if exponents.get(stored, 0) > e_out:
                # Parts summed at a coarser exponent than the output's: the output no finer (the
                # multiply between them then only shrinks).
                limits[stored] = min(limits.get(stored, math.inf), e_out)
                changed = True
            for inp in layer.inputs:
                wmax = float(np.max(np.abs(inp.coefficients), initial=0.0))
                if wmax <= 0:
                    continue
                limit = exponents.get(_root(inp.act), 0) + math.floor(math.log2(dtype.max_value / 2 / wmax))
                if e_out > max(limit, 0):  # 0 is as low as an exponent goes: a limit below it is met by 0
                    limits[out] = min(limits.get(out, math.inf), limit)
                    changed = True
        if not changed:
            return exponents


def _exponents(hir: HirProgram, dtype: DataType, tensors: dict[int, float], accumulators: dict[int, float],
               limits: dict[int, float]) -> dict[int, int]:
    groups = _Groups()
    pinned: set[int] = set()
    caps: dict[int, float] = dict(limits)  # root -> the largest exponent its own range allows
    maps = maps_apart(hir)

    def cap(key: int, value: float) -> None:
        caps[key] = min(caps.get(key, math.inf), value)

    def exponent_for(value: float) -> float:
        if not math.isfinite(value):
            return 0
        if value <= 0:
            return MAX_EXPONENT
        return math.floor(math.log2(dtype.max_value / (value * HEADROOM)))

    for act in list(hir.inputs.values()) + list(hir.outputs.values()):
        pinned.add(_root(act))
    for index, layer in enumerate(hir.layers):
        out = _root(layer.output)
        if out not in tensors:
            pinned.add(out)
        else:
            cap(out, exponent_for(tensors[out]))
        if isinstance(layer, ConvLayer):
            # A split reduction's parts are summed at an exponent of their own (the parts'
            # tensors' group), as fine as the whole sum's range allows, then scaled to the output's.
            parts = {id(op) for op in part_adds(layer, maps)}
            summed = sum_root(layer, maps)
            if index in accumulators:
                cap(out, exponent_for(accumulators[index]))
                cap(summed, exponent_for(accumulators[index]))
            else:
                # Sums of unknown range (an op the bounds do not follow, e.g. a LayerNorm on the
                # Tandem unit): its weights cannot be rescaled safely, so its inputs stay at 0 too.
                pinned.update((out, summed))
                pinned.update(_root(inp.act) for inp in layer.inputs)
            for op in layer.post_ops:
                if not _homogeneous(op):
                    pinned.add(out)
                if id(op) in parts:
                    groups.union(_root(op.operand), summed)
                elif isinstance(op, (AddTensor, AddBroadcast)):
                    groups.union(_root(op.operand), out)
                elif op.tensor is not None:
                    pinned.add(_root(op.tensor))  # a product's operand: its exponent would add
                if op.written is not None:  # a copy of the tile (a subsampled one): the output's exponent
                    groups.union(_root(op.written), out)
        elif isinstance(layer, (MaxPoolLayer, RemapLayer, ShuffleLayer, PixelMixLayer)):
            # Data movement, max pooling and pixel mixes: the output holds the input's values (or
            # constant combinations of them) at the input's exponent.
            for act in layer.reads():
                groups.union(_root(act), out)
        else:
            # A product of two computed tensors (attention): its exponent would be the operands'
            # sum, which its lowering does not know; everything it touches stays at 0.
            pinned.add(out)
            pinned.update(_root(act) for act in layer.reads())
    caps_by_group: dict[int, float] = {}
    for key in set(groups.parent) | set(caps) | pinned:
        g = groups.find(key)
        value = 0 if key in pinned else caps.get(key, MAX_EXPONENT)
        caps_by_group[g] = min(caps_by_group.get(g, MAX_EXPONENT), value)
    top = {g: int(max(0, min(MAX_EXPONENT, c))) for g, c in caps_by_group.items()}
    costs: dict[int, np.ndarray] = {}
    for index, layer in enumerate(hir.layers):
        if not isinstance(layer, ConvLayer):
            continue
        for i, inp in enumerate(layer.inputs):
            g = groups.find(_root(inp.act))
            if top.get(g, 0) == 0:
                continue
            e_out_top = top.get(groups.find(sum_root(layer, maps)), 0)
            cost = _consumer_cost(hir, index, i, tensors, accumulators, e_out_top, dtype, top[g])
            costs[g] = costs.get(g, 0.0) + cost
        for op in layer.post_ops:
            if isinstance(op, (AddTensor, AddBroadcast)):  # the operand's rounding passes straight on
                g = groups.find(_root(op.operand))
                if top.get(g, 0):
                    costs[g] = costs.get(g, 0.0) + 2.0 ** (-2.0 * np.arange(top[g] + 1))
    result = {}
    for key in set(groups.parent) | set(caps):
        g = groups.find(key)
        if top.get(g, 0) and g in costs:
            e = int(np.argmin(costs[g]))
            if costs[g][e] > REQUIRED_GAIN * costs[g][0]:
                e = 0  # too little to gain for what the estimate may have wrong
        else:
            e = top.get(g, 0)
        if e:
            result[key] = e
    return result


def _consumer_cost(hir: HirProgram, index: int, i: int, tensors: dict[int, float], accumulators: dict[int, float],
                   e_out: int, dtype: DataType, top: int) -> np.ndarray:
    """The error variance (in LSB^2 of the input's own real scale) that conv layer ``index``
    adds to its sums through its input ``i`` stored at exponent ``e = 0..top``: the stored
    values' rounding (``2^-2e``) against the weights' rounding, which grows as ``2^2e`` once the
    layer's sums cannot take the weights' gain back (its accumulator range), and the products'.
    All relative to one LSB of the input times the weights' norm."""
    layer = hir.layers[index]
    inp = layer.inputs[i]
    w = inp.coefficients.reshape(inp.coefficients.shape[0], -1).astype(np.float64)
    norm = float(np.mean(np.sum(w * w, axis=1)))
    wmax = float(np.max(np.abs(w), initial=0.0))
    e = np.arange(top + 1, dtype=np.float64)
    storage = 2.0 ** (-2 * e)
    if norm <= 0 or wmax <= 0 or index not in accumulators or accumulators[index] <= 0:
        return storage
    taps = w.shape[1]
    bound = tensors.get(_root(inp.act), 0.0)
    mean_square = (bound / PEAK_TO_RMS) ** 2
    seen = hir.ranges.get(index)
    if seen is not None and seen.gram is not None and seen.gram.ndim == 2:
        # The samples' own mean square of this input (its rows of the Gram matrix).
        start = sum(p.act.C * layer.kernel[0] * layer.kernel[1] for p in layer.inputs[:i])
        diag = np.diagonal(seen.gram)[start:start + taps]
        mean_square = float(np.mean(diag)) / max(float(seen.gram[-1, -1]), 1.0)  # its last entry: the count
    # The layer's sums, scaled by 2^E: as far as its range allows, its gain's cap (2^bp over its
    # output's exponent) and its largest weight (half the type's range) allow.
    E = np.minimum(math.log2(dtype.max_value / accumulators[index]), e_out + dtype.binary_point)
    E = np.minimum(E, e + math.log2(dtype.max_value / 2 / wmax))
    factor = GPTQ_FACTOR if seen is not None and seen.gram is not None else 1.0
    weights = factor * taps * mean_square * 2.0 ** (2 * (e - E)) / norm
    products = taps * 2.0 ** (-2 * E) / norm
    return storage + weights + products


def _scaled_range(seen: LayerRange, layer: ConvLayer, e_out: int, e_in: list[int]) -> LayerRange:
    """``seen`` for the layer's sums at exponent ``e_out`` and its inputs at ``e_in``."""
    s = 2.0 ** e_out
    gram = seen.gram
    if gram is not None:
        if gram.ndim == 2:  # dense: each input's im2col rows, then the bias row
            rows = [np.full(inp.act.C * layer.kernel[0] * layer.kernel[1], 2.0 ** e) for inp, e in zip(layer.inputs, e_in)]
            v = np.concatenate(rows + [np.ones(1)])
            gram = gram * v[:, None] * v[None, :]
        else:  # per channel: [C, taps + 1, taps + 1]
            v = np.concatenate([np.full(gram.shape[-1] - 1, 2.0 ** e_in[0]), np.ones(1)])
            gram = gram * v[:, None] * v[None, :]
    return dataclasses.replace(seen, peak=seen.peak * s, bound=seen.bound * s, gram=gram,
                               largest=None if seen.largest is None else seen.largest * s,
                               tail=None if seen.tail is None else seen.tail * s,
                               whole=None if seen.whole is None else _scaled_range(seen.whole, layer, e_out, e_in))


def _scale_op(op, s: float, dtype: DataType):
    if isinstance(op, Clip):
        # A threshold past the type's range clips where the accumulators saturate anyway.
        top = dtype.max_value
        return dataclasses.replace(op, lo=float(np.clip(op.lo * s, -top, top)), hi=float(np.clip(op.hi * s, -top, top)))
    if isinstance(op, AddConstant):
        return dataclasses.replace(op, values=(np.asarray(op.values, np.float64) * s).astype(np.float32))
    return op


def _scaled_ops(layer: ConvLayer, e_sum: int, e_out: int, dtype: DataType) -> list:
    """``layer``'s post-ops for sums at exponent ``e_sum`` and an output at ``e_out``: where they
    differ (the last part of a split reduction), the parts are summed at ``e_sum`` and a multiply
    by ``2^(e_out - e_sum)`` (exact, one rounding) follows the last of them."""
    ops = layer.post_ops
    if e_sum == e_out:
        return [_scale_op(op, 2.0 ** e_out, dtype) for op in ops]
    assert any(op.node == PART_NODE for op in ops), f"{layer.name}: sums at 2^{e_sum}, output at 2^{e_out}, and no parts"
    last = max(k for k, op in enumerate(ops) if op.node == PART_NODE)
    scale = Scale(np.full(layer.output.C, 2.0 ** (e_out - e_sum), np.float32), node=SUM_NODE)
    return ([_scale_op(op, 2.0 ** e_sum, dtype) for op in ops[:last + 1]] + [scale]
            + [_scale_op(op, 2.0 ** e_out, dtype) for op in ops[last + 1:]])


def tensor_exponents(hir: HirProgram, ctx) -> HirProgram:
    """The pass: exponents from ``HirProgram.ranges`` (none: unchanged), applied to the weights,
    biases and constants of every conv layer that writes or reads a tensor stored at one."""
    dtype = ctx.arch.data_type
    if not hir.ranges or not dtype.is_fixed:
        return hir
    exponents = choose_exponents(hir, dtype)
    if not exponents:
        return hir
    maps = maps_apart(hir)
    layers = []
    ranges = dict(hir.ranges)
    for index, layer in enumerate(hir.layers):
        if not isinstance(layer, ConvLayer):
            layers.append(layer)
            continue
        e_out = exponents.get(_root(layer.output), 0)
        e_sum = exponents.get(sum_root(layer, maps), 0)  # the scale its sums are computed at
        e_in = [exponents.get(_root(inp.act), 0) for inp in layer.inputs]
        if not e_out and not e_sum and not any(e_in):
            layers.append(layer)
            continue
        inputs = [dataclasses.replace(inp, weights=None if inp.weights is None else (inp.weights * 2.0 ** (e_sum - e)).astype(np.float32),
                                      diagonal=None if inp.diagonal is None else (inp.diagonal * 2.0 ** (e_sum - e)).astype(np.float32))
                  for inp, e in zip(layer.inputs, e_in)]
        s = 2.0 ** e_sum
        statistics = None
        if layer.statistics is not None:
            statistics = (layer.statistics[0] * s, layer.statistics[1] * s)
        layers.append(dataclasses.replace(layer, inputs=inputs, bias=(layer.bias * s).astype(np.float32),
                                          post_ops=_scaled_ops(layer, e_sum, e_out, dtype), statistics=statistics))
        if index in ranges:
            ranges[index] = _scaled_range(ranges[index], layer, e_sum, e_in)
    names = {}
    for layer in hir.layers:
        root = layer.output.root()[0]
        if id(root) in exponents:
            names[root.name] = exponents[id(root)]
    return dataclasses.replace(hir, layers=layers, ranges=ranges, exponents={**hir.exponents, **names})
