"""Softmax over the channels of a tile of one pixel, on the Tandem vector unit (docs/tandem.md).

The tile holds the ``G`` channel groups of one pixel at accumulator addresses ``acc..acc+G``
(one vector each); the unit works on it in place, in its wide type, between a ``TSync to_unit``
(the array's results are in) and a ``TSync to_array`` (the TCU saves them after):

1. ``x`` into ``interim`` (exact); padding lanes of the last group (channels past ``C``) are
   masked to -128 so that they are never the max.
2. running max over the groups (``TAlu Max`` in a loop), then across lanes (``TPermute LaneMax``).
3. ``exp(x - max)`` by range reduction: ``t = (x - max) log2 e``, ``k = floor(t)``,
   ``f = t - k``, ``2^f`` by a polynomial in Horner form, shifted by ``k`` (``TAlu Shift``);
   padding lanes multiplied by 0.
4. the sum over groups and lanes (``Add`` loop, ``LaneSum``), in [1, C].
5. ``1/sum`` by Newton steps ``y <- y (2 - s y)`` from ``y0 = 1/(G N)`` (below ``1/s``, so it
   converges monotonically), in a hardware loop.
6. ``e * (1/sum)`` written back to the accumulators: one rounding to the data type.
"""

from __future__ import annotations

import math

import numpy as np

from systolix.isa.tandem import (
    Namespace, TAlu, TAluOp, TCalc, TCalcOp, TImm, TIterBase, TIterStride, TLoop, TOperand, TPermute, TPermuteOp, TSync,
    TSyncKind)

POLY_DEGREE = 4
POLY_COEFFS = np.polyfit(np.linspace(0.0, 1.0, 2001), 2.0 ** np.linspace(0.0, 1.0, 2001), POLY_DEGREE)
"""``2^f`` on [0, 1), least squares, highest power first."""
_f = np.linspace(0.0, 1.0, 100001)
POLY_REL_ERROR = float(np.max(np.abs(np.polyval(POLY_COEFFS, _f) / 2.0 ** _f - 1.0)))
"""The polynomial's largest relative error on [0, 1] (about 4e-5)."""


def newton_steps(groups: int, N: int) -> int:
    """Newton steps for ``1/s`` with ``s`` in [1, G N] from ``y0 = 1/(G N)``: the relative error
    ``e = 1 - s y`` squares each step from ``e0 <= 1 - 1/(G N)``; enough steps for ``e < 2^-20``,
    and two more for the wide type's roundings."""
    e0 = 1.0 - 1.0 / (groups * N)
    if e0 <= 0:
        return 2
    return max(1, math.ceil(math.log2(20 * math.log(2) / -math.log(e0)))) + 2


def _op(ns: Namespace, k: int) -> TOperand:
    return TOperand(ns, k)


ACC, INTERIM, IMM = Namespace.ACC, Namespace.INTERIM, Namespace.IMM


def softmax_program(acc: int, groups: int, channels: int, N: int, frac_bits: int, mask: int | None, pixels: int = 1,
                    scale: float = 1.0, out_shift: int = 0) -> list:
    """Tandem instructions for softmax over ``channels`` channels of each of ``pixels`` pixels,
    group by group from raw accumulator address ``acc`` (group ``g`` of pixel ``p`` at
    ``acc + g pixels + p``); ``mask``: raw accumulator address of two vectors (1.0 on the last
    group's real lanes, 0 on padding; 0 on real lanes, -128 on padding), or None when
    ``channels`` fills every group. ``frac_bits``: the data type's (the wide type has twice).
    The pixels are a hardware loop (level 1) around the whole computation. ``scale`` (positive):
    the softmax of ``scale x`` (attention's ``1/sqrt(Dh)``), folded into the ``log2 e`` factor.
    ``out_shift``: the probabilities times ``2^out_shift`` (more fraction bits for a consumer that
    divides them out; immediate slot 9)."""
    G = groups
    one = 1 << (2 * frac_bits)  # the wide type's 1.0
    wide = lambda v: int(round(v * one))  # noqa: E731
    # interim: G vectors of x then e, then scalars (broadcast in every lane): max, t, k, p, sum, y, tmp
    MAXV, T, K, P, SUM, Y, TMP = range(G, G + 7)
    out: list = [TSync(TSyncKind.TO_UNIT)]
    # Iterators. acc.0 / interim.0 walk the groups (loop level 0); the others stay put.
    out += [TIterBase(ACC, 0, acc), TIterStride(ACC, 0, 0, pixels), TIterStride(ACC, 0, 1, 1), TIterBase(INTERIM, 0, 0),
            TIterStride(INTERIM, 0, 0, 1)]
    fixed = {1: MAXV, 2: T, 3: K, 4: P, 5: SUM, 6: Y, 7: TMP, 8: G - 1, 9: 0}  # 8: the last group, 9: the first
    for k, addr in fixed.items():
        out.append(TIterBase(INTERIM, k, addr))
    xs, mx, t, kk, p, s, y, tmp, last = (_op(INTERIM, k) for k in (0, 1, 2, 3, 4, 5, 6, 7, 8))
    a = _op(ACC, 0)
    # Immediates: 0 log2(e), 1 two, 2 zero, 3 y0, 4.. the polynomial's coefficients.
    coeffs = [wide(c) for c in POLY_COEFFS]
    out += [TImm(0, wide(scale * math.log2(math.e))), TImm(1, 2 * one), TImm(2, 0), TImm(3, max(1, round(one / (G * N))))]
    out += [TImm(4 + k, c) for k, c in enumerate(coeffs)]
    if out_shift:
        out.append(TImm(4 + len(coeffs), out_shift * one))
    log2e, two, zero, y0 = (_op(IMM, k) for k in range(4))
    if mask is not None:
        out += [TIterBase(ACC, 1, mask), TIterBase(ACC, 2, mask + 1)]
    config = len(out)
    # 1. x into interim, padding masked.
    out += [TLoop(0, G, 1), TAlu(TAluOp.MOVE, xs, a)]
    if mask is not None:
        out += [TAlu(TAluOp.MUL, last, last, _op(ACC, 1)), TAlu(TAluOp.ADD, last, last, _op(ACC, 2))]
    # 2. The max over groups and lanes.
    out += [TAlu(TAluOp.MOVE, mx, _op(INTERIM, 9))]
    out += [TLoop(0, G, 1), TAlu(TAluOp.MAX, mx, mx, xs), TPermute(TPermuteOp.LANE_MAX, mx, mx)]
    # 3. e = exp(x - max), in place of x.
    body = [TAlu(TAluOp.SUB, t, xs, mx), TAlu(TAluOp.MUL, t, t, log2e), TCalc(TCalcOp.FLOOR, kk, t),
            TAlu(TAluOp.SUB, t, t, kk), TAlu(TAluOp.MOVE, p, _op(IMM, 4))]
    for k in range(1, len(coeffs)):
        body += [TAlu(TAluOp.MUL, p, p, t), TAlu(TAluOp.ADD, p, p, _op(IMM, 4 + k))]
    body += [TAlu(TAluOp.SHIFT, xs, p, kk)]
    out += [TLoop(0, G, len(body))] + body
    if mask is not None:
        out += [TAlu(TAluOp.MUL, last, last, _op(ACC, 1))]
    # 4. The sum.
    out += [TAlu(TAluOp.MOVE, s, zero), TLoop(0, G, 1), TAlu(TAluOp.ADD, s, s, xs), TPermute(TPermuteOp.LANE_SUM, s, s)]
    # 5. 1 / sum by Newton.
    out += [TAlu(TAluOp.MOVE, y, y0), TLoop(0, newton_steps(G, N), 3), TAlu(TAluOp.MUL, tmp, s, y),
            TAlu(TAluOp.SUB, tmp, two, tmp), TAlu(TAluOp.MUL, y, y, tmp)]
    if out_shift:
        out.append(TAlu(TAluOp.SHIFT, y, y, _op(IMM, 4 + len(coeffs))))
    # 6. The probabilities, rounded once into the accumulators.
    out += [TLoop(0, G, 1), TAlu(TAluOp.MUL, a, xs, y)]
    if pixels > 1:  # the same for every pixel: acc.0 steps by 1 at level 1, the rest is scratch
        out.insert(config, TLoop(1, pixels, len(out) - config))
    return out + [TSync(TSyncKind.TO_ARRAY)]


def interim_vectors(groups: int) -> int:
    """``interim`` vectors the program uses."""
    return groups + 7
