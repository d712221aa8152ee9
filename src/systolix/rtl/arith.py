"""Scalar arithmetic of each data type, as Amaranth logic: the one place the RTL's numbers live.

Fixed point (``../shared/notes/tensil-formats.md``): every product is ``rne(x * y / 2^bp)``, every
add is exact and then saturated to the type's range. FLOAT32 is IEEE binary32 (``float32.py``),
which never saturates. The processing elements and the SIMD ALUs both build on these methods, so
that they cannot disagree with each other, and the tests hold both to the emulator.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed

from systolix.numerics import DataType
from systolix.rtl import float32


class Arith:
    """Operations on raw scalars (bit patterns of ``width`` bits) of one data type."""

    def __init__(self, data_type: DataType):
        self.data_type = data_type
        self.width = data_type.width

    @staticmethod
    def of(data_type: DataType) -> "Arith":
        return FloatArith(data_type) if data_type is DataType.FLOAT32 else FixedArith(data_type)

    # Every method takes raw ``width``-bit values and returns a raw ``width``-bit value.
    def one(self) -> Const:  # pragma: no cover - abstract
        raise NotImplementedError

    def mac(self, m: Module, acc, x, w, name: str):
        """``acc + x * w`` as the array computes it; an input of zero adds nothing at all (the
        emulator skips it, which keeps a float -0.0 partial sum and never makes 0 * inf)."""
        total = self.add(m, acc, self.multiply(m, x, w, f"{name}_p"), f"{name}_s")
        return Mux(self.is_zero(x), acc, total)


class FixedArith(Arith):
    def __init__(self, data_type: DataType):
        super().__init__(data_type)
        self.bp = data_type.binary_point
        self.lo = data_type.min_int
        self.hi = data_type.max_int

    def one(self):
        return Const(self.data_type.one, self.width)

    def saturate(self, value):
        """A wide signed value clamped to the type's range, as ``width`` raw bits."""
        return Mux(value > self.hi, Const(self.hi, signed(self.width)),
                   Mux(value < self.lo, Const(self.lo, signed(self.width)), value))[0 : self.width]

    def product(self, m: Module, a, b, name: str):
        """The rounded product, not yet saturated (``2 * width + 1 - bp`` bits, signed)."""
        p = Signal(signed(2 * self.width), name=name)
        m.d.comb += p.eq(a.as_signed() * b.as_signed())
        # Round half to even with one add: carry out of the low bits when the remainder is above
        # half, or exactly half with an odd quotient.
        return (p + ((1 << (self.bp - 1)) - 1) + p[self.bp]) >> self.bp

    def multiply(self, m: Module, a, b, name: str):
        return self.saturate(self.product(m, a, b, name))

    def add(self, m: Module, a, b, name: str):
        return self.saturate(a.as_signed() + b.as_signed())

    def mac(self, m: Module, acc, x, w, name: str):
        # The product joins the sum unsaturated: only the sum is clamped (a product past the
        # range can still land inside it).
        total = self.saturate(acc.as_signed() + self.product(m, x, w, f"{name}_p"))
        return Mux(x == 0, acc, total)

    def subtract(self, m: Module, a, b, name: str):
        return self.saturate(a.as_signed() - b.as_signed())

    def absolute(self, a):
        return self.saturate(Mux(a.as_signed() < 0, -a.as_signed(), a.as_signed()))

    def less(self, a, b):
        return a.as_signed() < b.as_signed()

    def less_equal(self, a, b):
        return a.as_signed() <= b.as_signed()

    def is_zero(self, a):
        return a == 0


class FloatArith(Arith):
    def one(self):
        return Const(float32.ONE, 32)

    def multiply(self, m: Module, a, b, name: str):
        return float32.f32_mul(m, a, b, name)

    def add(self, m: Module, a, b, name: str):
        return float32.f32_add(m, a, b, name)

    def subtract(self, m: Module, a, b, name: str):
        negated = Signal(32, name=f"{name}_neg")
        m.d.comb += negated.eq(b ^ (1 << 31))
        return float32.f32_add(m, a, negated, name)

    def absolute(self, a):
        return a & 0x7FFFFFFF

    def less(self, a, b):
        return float32.f32_less(a, b)

    def less_equal(self, a, b):
        return float32.f32_less(a, b, or_equal=True)

    def is_zero(self, a):
        return float32.f32_is_zero(a)
