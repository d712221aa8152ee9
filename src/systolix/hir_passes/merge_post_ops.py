"""Merge post-ops: a conv layer's gain undo followed by its LeakyReLU (``Scale`` then ``Slope``)
becomes one ``ScaledSlope``, and followed by its ReLU6 or Clip one ``ScaledClip``: 5 accumulator
clocks a vector instead of 6.

Tensil's SIMD unit has one register, and a SIMD op that reads and writes the accumulators takes
two clocks. Apart, the multiply reads and writes every vector (2) and the slope loads its
constant, multiplies into the register and writes the larger back (1 + 1 + 2). Merged, the slope
runs on the amplified sum in the register and only the last op, the scale times the register,
writes (``postops.ScaledSlope``). It needs every scale positive (a gain's undo always is) and every
slope in ``[0, 1]`` (a larger one takes ``min``, not ``max``). Layers bound by their accumulators
(YOLOv4-tiny's stem and its 1x1 convs) gain the most.

A clip merges only where it computes bit for bit what the two ops apart do: its bounds move to
the amplified sum as the grid points ``low``, ``high`` whose scaled products round exactly to the
clip's bounds (``clip_bounds``). The scaled product rounds monotonically, so a sum above ``high``
gives ``hi`` either way and one between the two gives its own product, inside the bounds. Where
no grid point rounds to a bound exactly (a scale above 1 steps over it) the two stay apart.

A slope off the data type's grid is taken as two multiplies (``slope_factors``): LeakyReLU's 0.1
rounds to 26/256 in FP16BP8, 1.6% too steep on every negative value, an error as large as the
output's own rounding at YOLOv4-tiny's layers (its plain outputs, 8 random normal inputs: 14.2
LSB RMS, 12.3 with every slope set to 26/256 in the model itself); 226/256 times 29/256 is
0.006% off, for one accumulator clock a vector more (``Slope.factors``): YOLOv4-tiny 0.8 to
1.7% more clocks, the untuned UNet and audio net 1.6 to 3.4% (README, Latency).

Runs last of the HIR passes: every pass before it sees the two ops as they were made (the gains'
passes look for a ``Scale``, ``tensor_exponents`` and ``estimate_ranges`` for a ``Slope``). A
layer's scaling ops (an average pool's ``1/count``) are left alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.ir.hir import ConvLayer, HirProgram
from systolix.ir.postops import Clip, Scale, ScaledClip, ScaledSlope, Slope
from systolix.numerics import DataType
from systolix.numerics.fixed import to_fixed


def _mergeable(first, second) -> bool:
    return (isinstance(first, Scale) and isinstance(second, Slope)
            and bool(np.all(np.asarray(first.values) > 0))
            and bool(np.all((np.asarray(second.values) >= 0) & (np.asarray(second.values) <= 1))))


def _raw(values, dtype: DataType) -> np.ndarray:
    """Floats as the constant image stores them (``to_fixed``: float32, rounded half up, saturated)."""
    return np.asarray(to_fixed(np.atleast_1d(np.asarray(values, np.float64)), dtype), np.int64)


def _scaled(u: np.ndarray, x: np.ndarray, dtype: DataType) -> np.ndarray:
    """The SIMD multiply of raw values: ``u x / one`` rounded half to even, saturated."""
    q, r = np.divmod(u * x, dtype.one)
    half = dtype.one // 2
    q = q + (r > half) + ((r == half) & (q % 2 == 1))
    return np.clip(q, dtype.min_int, dtype.max_int)


def clip_bounds(scale, lo: float, hi: float, dtype: DataType) -> tuple[np.ndarray, np.ndarray] | None:
    """Per channel, the raw ``(low, high)`` on the amplified sum's grid with
    ``scaled(u, clip(x, low, high)) == clip(scaled(u, x), lo, hi)`` for every raw ``x``; None
    where some channel has none."""
    u = _raw(scale, dtype)
    lo_r, hi_r = int(_raw(lo, dtype)[0]), int(_raw(hi, dtype)[0])
    if np.any(u <= 0) or lo_r > hi_r:
        return None
    lowest, highest = np.full(u.shape, dtype.min_int), np.full(u.shape, dtype.max_int)

    def first_at_least(target: int) -> np.ndarray:
        """The least raw x whose product reaches ``target`` (``highest + 1``: none does)."""
        a, b = lowest.copy(), highest + 1
        while np.any(a < b):
            m = (a + b) // 2
            reach = _scaled(u, m, dtype) >= target
            b = np.where(reach & (a < b), m, b)
            a = np.where(~reach & (a < b), m + 1, a)
        return a

    high = first_at_least(hi_r)
    none_high = high > highest
    high = np.where(none_high, highest, high)
    if np.any(~none_high & (_scaled(u, high, dtype) != hi_r)):
        return None
    low = first_at_least(lo_r + 1) - 1  # the greatest x whose product stays at or below lo
    none_low = low < lowest
    low = np.where(none_low, lowest, low)
    if np.any(~none_low & (_scaled(u, low, dtype) != lo_r)):
        return None
    return low, high


# A slope whose rounding errs by more than this many of the type's steps is taken as two factors.
SLOPE_STEPS = 1 / 16


def slope_factors(values, dtype: DataType | None) -> tuple[np.ndarray, np.ndarray] | None:
    """Per channel, two factors on ``dtype``'s grid whose product is nearest each slope (the first
    in ``[1/2, 1]``, so the vector times it keeps its bits), or None where one rounded slope is as
    good: slopes all on the grid (or within ``SLOPE_STEPS`` of it), a float type, a slope outside
    ``(0, 1)`` (those take one multiply and ``min`` or ``max`` as before)."""
    if dtype is None or not dtype.is_fixed:
        return None
    v = np.atleast_1d(np.asarray(values, np.float64))
    one = int(dtype.one)
    if not np.all((v > 0) & (v < 1)) or np.all(np.abs(_raw(v, dtype) - v * one) <= SLOPE_STEPS):
        return None
    a = np.arange(one // 2, one + 1, dtype=np.int64)
    first, second = np.empty(v.shape), np.empty(v.shape)
    for s in np.unique(v):
        target = s * one * one
        b = np.clip(np.floor(target / a + 0.5), 1, one).astype(np.int64)
        err = np.abs(a * b - target)
        k = int(np.flatnonzero(err == err.min())[-1])  # of the best, the first factor nearest 1
        first[v == s], second[v == s] = a[k] / one, b[k] / one
    return first.astype(np.float32), second.astype(np.float32)


def _with_factors(op, dtype: DataType | None):
    """A ``Slope`` or ``ScaledSlope`` with its slope as two factors where that is nearer."""
    if isinstance(op, (Slope, ScaledSlope)) and op.factors is None:
        factors = slope_factors(op.values if isinstance(op, Slope) else op.slope, dtype)
        if factors is not None:
            return dataclasses.replace(op, factors=factors)
    return op


def merged(post_ops: list, start: int = 0, dtype: DataType | None = None) -> list:
    """``post_ops`` with each ``Scale`` directly followed by a mergeable ``Slope`` (at or after
    index ``start``) as one ``ScaledSlope``, and (given the fixed-point ``dtype``) by a ``Clip``
    it can take bit for bit as one ``ScaledClip``; a slope off the grid as two factors
    (``slope_factors``, given ``dtype``)."""
    out = list(post_ops[:start])
    k = start
    while k < len(post_ops):
        first, second = post_ops[k], post_ops[k + 1] if k + 1 < len(post_ops) else None
        if _mergeable(first, second):
            out.append(ScaledSlope(scale=first.values, slope=second.values, node=second.node or first.node))
            k += 2
            continue
        if isinstance(first, Scale) and isinstance(second, Clip) and dtype is not None and dtype.is_fixed:
            bounds = clip_bounds(first.values, second.lo, second.hi, dtype)
            if bounds is not None:
                low, high = (b.astype(np.float64) / dtype.one for b in bounds)
                out.append(ScaledClip(scale=first.values, lo=second.lo, hi=second.hi, low=low, high=high,
                                      node=second.node or first.node))
                k += 2
                continue
        out.append(first)
        k += 1
    return [_with_factors(op, dtype) for op in out]


def merge_post_ops(hir: HirProgram, ctx=None) -> HirProgram:
    dtype = ctx.arch.data_type if ctx is not None and getattr(ctx, "arch", None) is not None else None
    layers = []
    for layer in hir.layers:
        if isinstance(layer, ConvLayer):
            post_ops = merged(layer.post_ops, layer.scaling_ops, dtype)
            if any(a is not b for a, b in zip(post_ops, layer.post_ops)) or len(post_ops) != len(layer.post_ops):
                layer = dataclasses.replace(layer, post_ops=post_ops)
        layers.append(layer)
    return dataclasses.replace(hir, layers=layers)
