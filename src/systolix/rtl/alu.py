"""One lane of the SIMD ALU: Tensil's sixteen operations on a raw scalar.

As the emulator defines them (``emulator/kernels.py``; "true" is non-zero, ``ONE`` the type's 1.0):
NoOp passes the input, Zero gives 0, Move the left operand, Not/And/Or give ONE or 0 by truth,
Increment/Decrement add or subtract ONE, Add/Subtract/Multiply saturate (fixed point), Abs is
|left| (saturating), GreaterThan/GreaterThanEqual give ONE or 0, Min/Max. One adder serves
Add, Subtract, Increment and Decrement, one multiplier Multiply.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal

from systolix.isa import SimdOp
from systolix.rtl.arith import Arith, FixedArith


def simd_alu(m: Module, arith: Arith, op, inp, left, right, name: str) -> Signal:
    w = arith.width
    one = arith.one()
    zero = 0
    is_sub = (op == SimdOp.SUBTRACT) | (op == SimdOp.DECREMENT)
    is_step = (op == SimdOp.INCREMENT) | (op == SimdOp.DECREMENT)
    addend = Signal(w, name=f"{name}_addend")
    m.d.comb += addend.eq(Mux(is_step, one, right))
    if isinstance(arith, FixedArith):
        # Subtract in a wider sum, so that minus the most negative value is not wrapped.
        wide = Mux(is_sub, left.as_signed() - addend.as_signed(), left.as_signed() + addend.as_signed())
        total = arith.saturate(wide)
    else:
        total = Mux(is_sub, arith.subtract(m, left, addend, f"{name}_sub"), arith.add(m, left, addend, f"{name}_add"))
    product = arith.multiply(m, left, right, f"{name}_mul")
    less = arith.less(left, right)
    greater = arith.less(right, left)
    left_true = ~arith.is_zero(left)
    right_true = ~arith.is_zero(right)

    result = Signal(w, name=name)
    with m.Switch(op):
        with m.Case(SimdOp.NOOP):
            m.d.comb += result.eq(inp)
        with m.Case(SimdOp.ZERO):
            m.d.comb += result.eq(zero)
        with m.Case(SimdOp.MOVE):
            m.d.comb += result.eq(left)
        with m.Case(SimdOp.NOT):
            m.d.comb += result.eq(Mux(left_true, zero, one))
        with m.Case(SimdOp.AND):
            m.d.comb += result.eq(Mux(left_true & right_true, one, zero))
        with m.Case(SimdOp.OR):
            m.d.comb += result.eq(Mux(left_true | right_true, one, zero))
        with m.Case(SimdOp.INCREMENT, SimdOp.DECREMENT, SimdOp.ADD, SimdOp.SUBTRACT):
            m.d.comb += result.eq(total)
        with m.Case(SimdOp.MULTIPLY):
            m.d.comb += result.eq(product)
        with m.Case(SimdOp.ABS):
            m.d.comb += result.eq(arith.absolute(left))
        with m.Case(SimdOp.GREATER_THAN):
            m.d.comb += result.eq(Mux(greater, one, zero))
        with m.Case(SimdOp.GREATER_THAN_EQUAL):
            m.d.comb += result.eq(Mux(arith.less_equal(right, left), one, zero))
        with m.Case(SimdOp.MIN):
            m.d.comb += result.eq(Mux(less, left, right))
        with m.Case(SimdOp.MAX):
            m.d.comb += result.eq(Mux(greater, left, right))
    return result
