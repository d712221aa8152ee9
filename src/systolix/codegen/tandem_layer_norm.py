"""LayerNormalization over the channels of each pixel (token), on the Tandem vector unit (docs/tandem.md).

The tile holds the ``G`` channel groups of each pixel (group ``g`` of pixel ``p`` at accumulator
address ``acc + g pixels + p``); the unit works on it in place, in its wide type, between a
``TSync to_unit`` and a ``TSync to_array``, one pixel at a time in a level-1 hardware loop:

1. ``x`` into ``interim``; the last group's padding lanes (channels past ``D``) multiplied by 0.
2. the mean: ``Mac`` of ``x 2^-s`` over the groups (``2^s >= D``: exact, and no saturation for
   any D), ``LaneSum``, then one ``Div`` by ``D 2^-s`` (one rounding).
3. ``xc = x - mean`` in place (padding lanes zeroed again).
4. a first variance, only for its scale: ``Mac`` of ``xc (xc 2^-s)``, ``LaneSum`` (at most the
   largest variance, 2^(2(w-1-bp))), ``Div`` by ``D 2^-s``, ``+ eps``.
5. ``k = floor(log4 v)`` counted by comparisons with the powers of 4 the wide type holds (a loop
   over a table of them in ``interim``).
6. the variance again on ``xc 2^-k`` (a ``Shift``, in place), now of unit scale: ``m = sum (xc
   2^-k)^2 / D + eps 4^-k`` in about [1, 4), each square rounded at full scale (the first pass's
   terms, ``2^-s`` smaller, lose a part in 10^4 of the variance).
7. ``r = 1/sqrt(m)``: ``m`` reduced again to [1, 4) the same way (``k2``, 0 unless the first
   variance was far off or eps dominates), a quadratic fit, then Newton steps
   ``r <- r (3/2 - (m/2) r^2)`` in a hardware loop; ``xc / sqrt(var + eps) = (xc 2^-k) r 2^-k2``.
8. per group ``u = ((xc 2^-k) r) 2^-k2`` (a ``Shift``), then ``u gamma + beta`` with gamma and beta each held as two
   data-type vectors (``hi + lo 2^-bp``: the wide type's precision), written back to the
   accumulators: the one rounding to the data type.
"""

from __future__ import annotations

import math

import numpy as np

from systolix.isa.tandem import (
    Namespace, TAlu, TAluOp, TCalc, TCalcOp, TCmp, TCmpOp, TImm, TIterBase, TIterStride, TLoop, TOperand, TPermute,
    TPermuteOp, TSync, TSyncKind)

ACC, INTERIM, IMM = Namespace.ACC, Namespace.INTERIM, Namespace.IMM

RSQRT_COEFFS = np.polyfit(np.linspace(1.0, 4.0, 3001), 1.0 / np.sqrt(np.linspace(1.0, 4.0, 3001)), 2)
"""``1/sqrt(m)`` on [1, 4), least squares, highest power first: Newton's starting point."""
_m = np.linspace(1.0, 4.0, 30001)
RSQRT_START_ERROR = float(np.max(np.abs(np.polyval(RSQRT_COEFFS, _m) * np.sqrt(_m) - 1.0)))
"""The starting point's largest relative error (about 3%)."""


def rsqrt_newton_steps(start_error: float = RSQRT_START_ERROR, bits: int = 20) -> int:
    """Newton steps for ``1/sqrt``: the relative error ``e`` becomes ``3/2 e^2`` (and the first
    overshoot is below), until under ``2^-bits``; one more for the wide type's roundings."""
    e, steps = start_error, 0
    while e > 2.0 ** -bits:
        e, steps = 1.5 * e * e + 2.0 ** -30, steps + 1
    return steps + 1


def range_exponents(width: int, frac_bits: int) -> tuple[int, int]:
    """``(lowest, highest)`` ``k = floor(log4 v)`` over the wide type's positive values (2w bits, 2bp fractional)."""
    lowest = -frac_bits  # the smallest step, 2^-2bp = 4^-bp
    highest = (2 * width - 2 - 2 * frac_bits) // 2  # below 2^(2w - 1 - 2bp)
    return lowest, highest


def layer_norm_program(acc: int, groups: int, channels: int, N: int, width: int, frac_bits: int, consts: int,
                       masked: bool, eps: float, pixels: int = 1) -> list:
    """Tandem instructions for LayerNormalization over ``channels`` channels of each of ``pixels``
    pixels from raw accumulator address ``acc``. ``consts``: raw accumulator address of
    ``4 G`` data-type vectors, gamma's high and low parts, beta's high and low parts (group by
    group; ``value = hi + lo 2^-bp``), then, when ``masked``, one vector 1.0 on the last group's
    real lanes and 0 on its padding."""
    G, bp = groups, frac_bits
    one = 1 << (2 * bp)  # the wide type's 1.0
    wide = lambda v: int(round(v * one))  # noqa: E731
    lowest, highest = range_exponents(width, bp)
    thresholds = highest - lowest  # 4^j for j = lowest + 1 .. highest
    # interim: G vectors x (then xc, then u), then scalars, then the table of thresholds
    MEAN, VAR, TMP, CNT, M, H, Y, NEGK, W, THR = range(G, G + 10)
    out: list = [TSync(TSyncKind.TO_UNIT)]
    # Iterators: acc.0 / interim.0 walk the groups (level 0) and acc.0 the pixels (level 1);
    # acc.1..4 the constants by group; interim.10/11 the table (level 0).
    out += [TIterBase(ACC, 0, acc), TIterStride(ACC, 0, 0, pixels), TIterStride(ACC, 0, 1, 1),
            TIterBase(INTERIM, 0, 0), TIterStride(INTERIM, 0, 0, 1)]
    for k in range(4):
        out += [TIterBase(ACC, 1 + k, consts + k * G), TIterStride(ACC, 1 + k, 0, 1)]
    if masked:
        out += [TIterBase(ACC, 5, consts + 4 * G)]
    fixed = {1: MEAN, 2: VAR, 3: TMP, 4: CNT, 5: M, 6: H, 7: Y, 8: NEGK, 9: W, 12: G - 1}
    for k, addr in fixed.items():
        out.append(TIterBase(INTERIM, k, addr))
    out += [TIterBase(INTERIM, 10, THR), TIterStride(INTERIM, 10, 0, 1), TIterBase(INTERIM, 11, THR + 1),
            TIterStride(INTERIM, 11, 0, 1)]
    xs, mean, var, tmp, cnt, m, h, y, negk, w, thr, thr_next, last = (TOperand(INTERIM, k) for k in range(13))
    a, g_hi, g_lo, b_hi, b_lo, mask = (TOperand(ACC, k) for k in range(6))
    s = max(0, math.ceil(math.log2(channels)))
    # The second pass sums squares of at most about 2 sqrt(m) (m < 4.5): scaled by 2^-s2 only when D is large.
    top = 2.0 ** (2 * width - 1 - 2 * bp)
    s2 = max(0, math.ceil(math.log2(channels * 4.5 / top)))
    # eps 4^-k: eps 2^e (precise) shifted by -2k - e.
    e = min(2 * bp, max(0, math.floor(math.log2(top / 2 / eps)))) if eps > 0 else 0
    # Immediates: 0 zero, 1 2^-s, 2 eps, 3 lowest k, 4 -2, 5 1/2, 6 3/2, 7 2^-bp, 8 four, 9 first threshold,
    # 10 D 2^-s, 11 2^-s2, 12 D 2^-s2, 13 eps 2^e, 14 -e, 15.. the fit.
    imms = [0, wide(2.0 ** -s), max(1, wide(eps)) if eps > 0 else 0, lowest * one, -2 * one, one // 2,
            3 * one // 2, one >> bp, 4 * one, one >> (-2 * (lowest + 1)) if lowest + 1 < 0 else one << (2 * (lowest + 1))]
    imms += [wide(channels * 2.0 ** -s), wide(2.0 ** -s2), wide(channels * 2.0 ** -s2), wide(eps * 2.0 ** e), -e * one]
    imms += [wide(c) for c in RSQRT_COEFFS]
    out += [TImm(k, v) for k, v in enumerate(imms)]
    zero, scale, epsilon, k0, minus_two, half, three_halves, lsb, four, thr0 = (TOperand(IMM, k) for k in range(10))
    d_scaled, scale2, d_scaled2, eps_big, minus_e = (TOperand(IMM, k) for k in range(10, 15))
    fit = [TOperand(IMM, 15 + k) for k in range(len(RSQRT_COEFFS))]
    # The table of thresholds 4^j (exact: powers of two), once for the program.
    out += [TAlu(TAluOp.MOVE, thr, thr0)]
    if thresholds > 1:
        out += [TLoop(0, thresholds - 1, 1), TAlu(TAluOp.MUL, thr_next, thr, four)]
    config = len(out)
    # 1. x into interim, padding zeroed.
    out += [TLoop(0, G, 1), TAlu(TAluOp.MOVE, xs, a)]
    if masked:
        out += [TAlu(TAluOp.MUL, last, last, mask)]
    # 2. The mean.
    out += [TAlu(TAluOp.MOVE, mean, zero), TLoop(0, G, 1), TAlu(TAluOp.MAC, mean, xs, scale),
            TPermute(TPermuteOp.LANE_SUM, mean, mean), TAlu(TAluOp.DIV, mean, mean, d_scaled)]
    # 3. Centred.
    out += [TLoop(0, G, 1), TAlu(TAluOp.SUB, xs, xs, mean)]
    if masked:
        out += [TAlu(TAluOp.MUL, last, last, mask)]
    # 4. A first variance, plus epsilon, for its scale only (its terms' roundings are large against them).
    out += [TAlu(TAluOp.MOVE, var, zero), TLoop(0, G, 2), TAlu(TAluOp.MUL, tmp, xs, scale), TAlu(TAluOp.MAC, var, xs, tmp),
            TPermute(TPermuteOp.LANE_SUM, var, var), TAlu(TAluOp.DIV, var, var, d_scaled), TAlu(TAluOp.ADD, var, var, epsilon)]
    # 5. k = floor(log4 var) by counting thresholds.
    out += [TAlu(TAluOp.MOVE, cnt, k0), TLoop(0, thresholds, 2), TCmp(TCmpOp.GE, tmp, var, thr), TAlu(TAluOp.ADD, cnt, cnt, tmp),
            TAlu(TAluOp.MUL, tmp, cnt, minus_two), TCalc(TCalcOp.NEG, negk, cnt)]
    # 6. The variance again on xc 2^-k (in place): m = var 4^-k + eps 4^-k, in about [1, 4), its squares at full scale.
    square = [TAlu(TAluOp.MUL, w, xs, scale2), TAlu(TAluOp.MAC, m, xs, w)] if s2 else [TAlu(TAluOp.MAC, m, xs, xs)]
    out += [TAlu(TAluOp.MOVE, m, zero), TLoop(0, G, 1 + len(square)), TAlu(TAluOp.SHIFT, xs, xs, negk), *square,
            TPermute(TPermuteOp.LANE_SUM, m, m), TAlu(TAluOp.DIV, m, m, d_scaled2), TAlu(TAluOp.ADD, tmp, tmp, minus_e),
            TAlu(TAluOp.SHIFT, w, eps_big, tmp), TAlu(TAluOp.ADD, m, m, w)]
    # 7. r = 1/sqrt(m): m is near [1, 4) but not surely (the first variance is coarse, eps may
    # dominate it): reduced again, k2 = floor(log4 m), then a fit and Newton on m 4^-k2.
    out += [TAlu(TAluOp.MOVE, cnt, k0), TLoop(0, thresholds, 2), TCmp(TCmpOp.GE, tmp, m, thr), TAlu(TAluOp.ADD, cnt, cnt, tmp),
            TAlu(TAluOp.MUL, tmp, cnt, minus_two), TAlu(TAluOp.SHIFT, m, m, tmp), TCalc(TCalcOp.NEG, negk, cnt),
            TAlu(TAluOp.MUL, h, m, half), TAlu(TAluOp.MOVE, y, fit[0])]
    for c in fit[1:]:
        out += [TAlu(TAluOp.MUL, y, y, m), TAlu(TAluOp.ADD, y, y, c)]
    out += [TLoop(0, rsqrt_newton_steps(), 4), TAlu(TAluOp.MUL, tmp, y, y), TAlu(TAluOp.MUL, tmp, tmp, h),
            TAlu(TAluOp.SUB, tmp, three_halves, tmp), TAlu(TAluOp.MUL, y, y, tmp)]
    # 8. Normalised, scaled and shifted: u = ((xc 2^-k) r) 2^-k2; u g_hi + (u g_lo + b_lo) 2^-bp + b_hi.
    out += [TLoop(0, G, 7), TAlu(TAluOp.MUL, xs, xs, y), TAlu(TAluOp.SHIFT, xs, xs, negk), TAlu(TAluOp.MUL, w, xs, g_lo),
            TAlu(TAluOp.ADD, w, w, b_lo), TAlu(TAluOp.MUL, xs, xs, g_hi), TAlu(TAluOp.MAC, xs, w, lsb),
            TAlu(TAluOp.ADD, a, xs, b_hi)]
    if pixels > 1:
        out.insert(config, TLoop(1, pixels, len(out) - config))
    return out + [TSync(TSyncKind.TO_ARRAY)]


def interim_vectors(groups: int, width: int, frac_bits: int) -> int:
    """``interim`` vectors the program uses."""
    lowest, highest = range_exponents(width, frac_bits)
    return groups + 10 + highest - lowest


def split_constant(values: np.ndarray, frac_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``values`` as ``hi + lo 2^-bp``, both on the data type's grid (float)."""
    step = 2.0 ** -frac_bits
    hi = np.round(np.asarray(values, np.float64) / step) * step
    lo = np.round((values - hi) / step / step) * step
    return hi, lo
