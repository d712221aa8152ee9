"""Element-wise functions on the Tandem vector unit (docs/tandem.md): Sigmoid, Tanh, GeLU (erf and
tanh forms), Sqrt, and the division of two tensors, on a tile of accumulators in place.

Each is one loop over the tile's vectors (level 1), every lane computed in the unit's wide type
(FP32BP16 for FP16BP8) and rounded once into the accumulators:

- ``exp(-a)`` for ``a >= 0`` by range reduction (as Softmax's, ``tandem_softmax``): ``t = -a log2 e``,
  ``k = floor(t)``, ``2^(t - k)`` by the degree-4 polynomial, a ``Shift`` by ``k`` (0 far below).
- Sigmoid: ``e = exp(-|x|)``, ``s = 1 / (1 + e)`` by one ``Div`` (correctly rounded), ``e s``
  (``= 1 - s``) where ``x < 0``.
- Tanh: ``e = exp(-2|x|)``, ``(1 - e) / (1 + e)`` by one ``Div``, negated where ``x < 0``.
- GeLU, erf form: ``x Phi(x)``; ``erfc(z)`` for ``z = |x| / sqrt 2`` by Abramowitz and Stegun 7.1.26
  (``t = 1 / (1 + p z)`` by a ``Div``, a degree-5 polynomial in ``t`` times ``exp(-z^2)``;
  error under 1.5e-7), ``Phi = 1 - erfc / 2`` (``erfc / 2`` where ``x < 0``).
- GeLU, tanh form: ``x sigmoid(2 sqrt(2/pi) (u + 0.044715 u^3))``, ``u`` the input clamped to
  [-16, 16] (the sigmoid is 0 or 1 to 1e-50 beyond).
- Sqrt: ``x r`` with ``r = 1/sqrt(x)`` by LayerNorm's range reduction and Newton steps, lane by
  lane (``tandem_layer_norm``); negative inputs give 0.
- the quotient of two tiles: one ``Div`` a vector (``a 2^2bp / b`` rounded; by zero the largest
  value of ``a``'s sign).
"""

from __future__ import annotations

import math

from systolix.codegen.tandem_layer_norm import RSQRT_COEFFS, range_exponents, rsqrt_newton_steps
from systolix.codegen.tandem_softmax import POLY_COEFFS
from systolix.isa.tandem import (
    Namespace, TAlu, TAluOp, TCalc, TCalcOp, TCmp, TCmpOp, TImm, TIterBase, TIterStride, TLoop, TOperand, TPermute, TPermuteOp,
    TSync, TSyncKind)

ACC, INTERIM, IMM = Namespace.ACC, Namespace.INTERIM, Namespace.IMM

# Abramowitz and Stegun 7.1.26: erfc(z) = t (a1 + t (a2 + ...)) exp(-z^2), t = 1 / (1 + p z), z >= 0.
ERFC_P = 0.3275911
ERFC_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
ERFC_ERROR = 1.5e-7
"""The approximation's largest error on erf (A&S 7.1.26)."""

FUNCTIONS = ("sigmoid", "tanh", "gelu", "gelu_tanh", "sqrt")


class _Builder:
    """Interim scalars and immediates by name, and the loop body."""

    def __init__(self, frac_bits: int):
        self.one = 1 << (2 * frac_bits)
        self.imms: dict[float, int] = {}
        self.regs: dict[str, int] = {}
        self.body: list = []

    def wide(self, v: float) -> int:
        return int(round(v * self.one))

    def imm(self, v: float) -> TOperand:
        raw = self.wide(v)
        if raw not in self.imms:
            self.imms[raw] = len(self.imms)
        return TOperand(IMM, self.imms[raw])

    def reg(self, name: str) -> TOperand:
        """Interim iterator ``k`` (k >= 1) sits at interim address ``k``: one vector a name."""
        if name not in self.regs:
            self.regs[name] = len(self.regs) + 1
        return TOperand(INTERIM, self.regs[name])

    def alu(self, op, dst, a, b=None):
        self.body.append(TAlu(op, dst, a) if b is None else TAlu(op, dst, a, b))

    def exp_neg(self, dst: TOperand, t: TOperand) -> None:
        """``dst = 2^t`` for ``t <= 0`` held in ``t`` (already times log2 e); clobbers ``t``."""
        k, p = self.reg("k"), self.reg("p")
        self.body.append(TCalc(TCalcOp.FLOOR, k, t))
        self.alu(TAluOp.SUB, t, t, k)
        self.alu(TAluOp.MOVE, p, self.imm(float(POLY_COEFFS[0])))
        for c in POLY_COEFFS[1:]:
            self.alu(TAluOp.MUL, p, p, t)
            self.alu(TAluOp.ADD, p, p, self.imm(float(c)))
        self.alu(TAluOp.SHIFT, dst, p, k)

    def sigmoid(self, out: TOperand, v: TOperand) -> None:
        """``out = sigmoid(v)``."""
        a, e, s, neg, flag = (self.reg(n) for n in ("a", "e", "s", "neg", "flag"))
        self.body.append(TCalc(TCalcOp.ABS, a, v))
        self.alu(TAluOp.MUL, a, a, self.imm(-math.log2(math.e)))
        self.exp_neg(e, a)
        self.alu(TAluOp.ADD, s, e, self.imm(1.0))
        self.alu(TAluOp.DIV, s, self.imm(1.0), s)
        self.alu(TAluOp.MUL, neg, e, s)
        self.body.append(TCmp(TCmpOp.LT, flag, v, self.imm(0.0)))
        self.alu(TAluOp.CMOVE, s, neg, flag)
        self.alu(TAluOp.MOVE, out, s)

    def tanh(self, out: TOperand, x: TOperand) -> None:
        a, e, num, q, neg, flag = (self.reg(n) for n in ("a", "e", "num", "q", "neg", "flag"))
        self.body.append(TCalc(TCalcOp.ABS, a, x))
        self.alu(TAluOp.MUL, a, a, self.imm(-2 * math.log2(math.e)))
        self.exp_neg(e, a)
        self.alu(TAluOp.SUB, num, self.imm(1.0), e)
        self.alu(TAluOp.ADD, q, e, self.imm(1.0))
        self.alu(TAluOp.DIV, q, num, q)
        self.body.append(TCalc(TCalcOp.NEG, neg, q))
        self.body.append(TCmp(TCmpOp.LT, flag, x, self.imm(0.0)))
        self.alu(TAluOp.CMOVE, q, neg, flag)
        self.alu(TAluOp.MOVE, out, q)

    def gelu(self, out: TOperand, x: TOperand) -> None:
        z, t, q, z2, ez, h, phi, flag = (self.reg(n) for n in ("z", "t", "q", "z2", "ez", "h", "phi", "flag"))
        self.body.append(TCalc(TCalcOp.ABS, z, x))
        self.alu(TAluOp.MUL, z, z, self.imm(math.sqrt(0.5)))
        self.alu(TAluOp.MUL, t, z, self.imm(ERFC_P))
        self.alu(TAluOp.ADD, t, t, self.imm(1.0))
        self.alu(TAluOp.DIV, t, self.imm(1.0), t)
        self.alu(TAluOp.MOVE, q, self.imm(ERFC_A[-1]))
        for c in ERFC_A[-2::-1]:
            self.alu(TAluOp.MUL, q, q, t)
            self.alu(TAluOp.ADD, q, q, self.imm(c))
        self.alu(TAluOp.MUL, q, q, t)
        self.alu(TAluOp.MUL, z2, z, z)
        self.alu(TAluOp.MUL, z2, z2, self.imm(-math.log2(math.e)))
        self.exp_neg(ez, z2)
        self.alu(TAluOp.MUL, h, q, ez)  # erfc(z)
        self.alu(TAluOp.MUL, h, h, self.imm(0.5))  # Phi(-|x|)
        self.alu(TAluOp.SUB, phi, self.imm(1.0), h)
        self.body.append(TCmp(TCmpOp.LT, flag, x, self.imm(0.0)))
        self.alu(TAluOp.CMOVE, phi, h, flag)
        self.alu(TAluOp.MUL, out, x, phi)

    def gelu_tanh(self, out: TOperand, x: TOperand) -> None:
        u, v, s = self.reg("u"), self.reg("v"), self.reg("sig")
        self.alu(TAluOp.MIN, u, x, self.imm(16.0))
        self.alu(TAluOp.MAX, u, u, self.imm(-16.0))
        self.alu(TAluOp.MUL, v, u, u)
        self.alu(TAluOp.MUL, v, v, self.imm(0.044715))
        self.alu(TAluOp.ADD, v, v, self.imm(1.0))
        self.alu(TAluOp.MUL, v, v, u)
        self.alu(TAluOp.MUL, v, v, self.imm(2 * math.sqrt(2 / math.pi)))
        self.sigmoid(s, v)
        self.alu(TAluOp.MUL, out, x, s)


def _sqrt(b: _Builder, out: TOperand, x: TOperand, width: int, frac_bits: int) -> None:
    """``out = sqrt(max(x, 0))``: ``x r``, ``r = 1/sqrt(x)`` by counting the powers of 4 below
    ``x`` (a table in interim walked by iterator 31 at level 0), Newton on the reduced value."""
    lowest, highest = range_exponents(width, frac_bits)
    v, cnt, tmp, m, h, y, negk = (b.reg(n) for n in ("v", "cnt", "tmp", "m", "h", "y", "negk"))
    thr = TOperand(INTERIM, 31)
    b.alu(TAluOp.MAX, v, x, b.imm(0.0))
    b.alu(TAluOp.MOVE, cnt, b.imm(float(lowest)))
    b.body += [TLoop(0, highest - lowest, 2), TCmp(TCmpOp.GE, tmp, v, thr)]
    b.alu(TAluOp.ADD, cnt, cnt, tmp)
    b.alu(TAluOp.MUL, tmp, cnt, b.imm(-2.0))
    b.alu(TAluOp.SHIFT, m, v, tmp)
    b.body.append(TCalc(TCalcOp.NEG, negk, cnt))
    b.alu(TAluOp.MUL, h, m, b.imm(0.5))
    b.alu(TAluOp.MOVE, y, b.imm(float(RSQRT_COEFFS[0])))
    for c in RSQRT_COEFFS[1:]:
        b.alu(TAluOp.MUL, y, y, m)
        b.alu(TAluOp.ADD, y, y, b.imm(float(c)))
    b.body += [TLoop(0, rsqrt_newton_steps(), 4), TAlu(TAluOp.MUL, tmp, y, y), TAlu(TAluOp.MUL, tmp, tmp, h),
               TAlu(TAluOp.SUB, tmp, b.imm(1.5), tmp), TAlu(TAluOp.MUL, y, y, tmp)]
    b.alu(TAluOp.MUL, y, y, v)  # sqrt(m 4^k) = m r(m) 4^k 2^-k = (v r(m)) 2^-k
    b.alu(TAluOp.SHIFT, out, y, negk)


def elementwise_program(function: str, acc: int, vectors: int, width: int, frac_bits: int) -> list:
    """Tandem instructions applying ``function`` (one of ``FUNCTIONS``) to ``vectors`` vectors
    from raw accumulator address ``acc``, in place."""
    b = _Builder(frac_bits)
    x = TOperand(ACC, 0)
    setup: list = []
    if function == "sqrt":
        lowest, highest = range_exponents(width, frac_bits)
        table = 32  # the table of 4^j, j = lowest + 1 .. highest, after the scalars
        first = TOperand(INTERIM, 30)
        setup += [TIterBase(INTERIM, 30, table), TIterStride(INTERIM, 30, 0, 1), TIterBase(INTERIM, 31, table),
                  TIterStride(INTERIM, 31, 0, 1)]
        _sqrt(b, x, x, width, frac_bits)
        four, start = b.imm(4.0), b.imm(4.0 ** (lowest + 1))
        nxt = TOperand(INTERIM, 29)
        setup += [TIterBase(INTERIM, 29, table + 1), TIterStride(INTERIM, 29, 0, 1), TAlu(TAluOp.MOVE, first, start)]
        if highest - lowest > 1:
            setup += [TLoop(0, highest - lowest - 1, 1), TAlu(TAluOp.MUL, nxt, first, four)]
    else:
        getattr(b, function)(x, x)
    out: list = [TSync(TSyncKind.TO_UNIT), TIterBase(ACC, 0, acc), TIterStride(ACC, 0, 1, 1)]
    out += [TIterBase(INTERIM, k, k) for k in b.regs.values()]
    out += [TImm(slot, raw) for raw, slot in b.imms.items()]
    out += setup
    out += [TLoop(1, vectors, len(b.body))] + b.body
    return out + [TSync(TSyncKind.TO_ARRAY)]


def divide_program(acc: int, operand: int, vectors: int) -> list:
    """``acc[v] = acc[v] / operand[v]`` for ``vectors`` vectors: one ``Div`` each, rounded once
    to the wide type, then to the data type."""
    return [TSync(TSyncKind.TO_UNIT), TIterBase(ACC, 0, acc), TIterStride(ACC, 0, 0, 1), TIterBase(ACC, 1, operand),
            TIterStride(ACC, 1, 0, 1), TLoop(0, vectors, 1), TAlu(TAluOp.DIV, TOperand(ACC, 0), TOperand(ACC, 0), TOperand(ACC, 1)),
            TSync(TSyncKind.TO_ARRAY)]


def reciprocal_program(acc: int, numerators: int, groups: int, per_group: int, numerator_stride: int) -> list:
    """``acc[v] = c / acc[v]`` over ``groups`` channel groups of ``per_group`` vectors, ``c`` the
    vector at ``numerators`` (``+ numerator_stride`` a group): one ``Div`` a vector."""
    a, c = TOperand(ACC, 0), TOperand(ACC, 1)
    return [TSync(TSyncKind.TO_UNIT), TIterBase(ACC, 0, acc), TIterStride(ACC, 0, 0, 1), TIterStride(ACC, 0, 1, per_group),
            TIterBase(ACC, 1, numerators), TIterStride(ACC, 1, 1, numerator_stride), TLoop(1, groups, 2),
            TLoop(0, per_group, 1), TAlu(TAluOp.DIV, a, c, a), TSync(TSyncKind.TO_ARRAY)]


def channel_max_program(acc: int, groups: int, pixels: int, mask: int | None) -> list:
    """For each of ``pixels`` pixels (group ``g`` at ``acc + g pixels + p``), the max over its
    ``groups`` vectors and their lanes into every lane of its group 0; ``mask``: raw accumulator
    address of a 1/0 mask and a 0/-128 penalty for the last group's padding lanes (as Softmax's), or None."""
    xs, mx, last = TOperand(INTERIM, 0), TOperand(INTERIM, 1), TOperand(INTERIM, 2)
    a, first = TOperand(ACC, 0), TOperand(ACC, 3)
    out = [TSync(TSyncKind.TO_UNIT), TIterBase(ACC, 0, acc), TIterStride(ACC, 0, 0, pixels), TIterStride(ACC, 0, 1, 1),
           TIterBase(ACC, 3, acc), TIterStride(ACC, 3, 1, 1), TIterBase(INTERIM, 0, 3), TIterStride(INTERIM, 0, 0, 1),
           TIterBase(INTERIM, 1, 0), TIterBase(INTERIM, 2, 3 + groups - 1), TIterBase(INTERIM, 3, 3)]
    if mask is not None:
        out += [TIterBase(ACC, 1, mask), TIterBase(ACC, 2, mask + 1)]
    body = [TLoop(0, groups, 1), TAlu(TAluOp.MOVE, xs, a)]
    if mask is not None:
        body += [TAlu(TAluOp.MUL, last, last, TOperand(ACC, 1)), TAlu(TAluOp.ADD, last, last, TOperand(ACC, 2))]
    body += [TAlu(TAluOp.MOVE, mx, TOperand(INTERIM, 3)), TLoop(0, groups, 1), TAlu(TAluOp.MAX, mx, mx, xs),
             TPermute(TPermuteOp.LANE_MAX, mx, mx), TAlu(TAluOp.MOVE, first, mx)]
    return out + [TLoop(1, pixels, len(body))] + body + [TSync(TSyncKind.TO_ARRAY)]


def interim_vectors(function: str, width: int, frac_bits: int) -> int:
    lowest, highest = range_exponents(width, frac_bits)
    return 32 + (highest - lowest) if function == "sqrt" else 32
