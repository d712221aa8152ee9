"""IEEE 754 binary32 multiply and add as combinational Amaranth logic.

Round to nearest even, subnormals kept (no flush to zero), overflow to infinity: the results
NumPy's float32 arithmetic gives on x86, bit for bit, for every non-NaN result. A NaN result is
the quiet NaN ``0x7FC00000`` (x86 keeps an operand's payload; the emulator's tests compare NaNs
as NaN). Three guard bits (guard, round, sticky) carry what alignment and normalisation shift out.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned

QUIET_NAN = 0x7FC00000
ONE = 0x3F800000


def _leading_zeros(m: Module, value, width: int, name: str) -> Signal:
    """Leading zeros of ``value[0:width]`` (``width`` when it is zero), as a priority chain."""
    count = Signal(range(width + 1), name=name)
    expr = Const(width, range(width + 1))
    for bit in range(width):  # the highest set bit wins: it is applied last
        expr = Mux(value[bit], width - 1 - bit, expr)
    m.d.comb += count.eq(expr)
    return count


def _fields(value):
    return value[31], value[23:31], value[0:23]


def _specials(value):
    sign, exp, frac = _fields(value)
    is_max = exp == 0xFF
    return is_max & (frac != 0), is_max & (frac == 0), (exp == 0) & (frac == 0)


def _round_and_pack(m: Module, name: str, sign, exp, norm):
    """Pack ``norm`` (27 bits: a 24-bit mantissa whose bit 26 is the hidden bit when normal, then
    guard, round and sticky) at biased exponent ``exp`` (>= 1), rounding to nearest even."""
    mant = norm[3:27]
    up = norm[2] & (norm[1] | norm[0] | mant[0])
    rounded = Signal(25, name=f"{name}_rounded")
    m.d.comb += rounded.eq(mant + up)
    carry = rounded[24]
    mant_out = Mux(carry, rounded[1:25], rounded[0:24])
    exp_out = Signal(signed(12), name=f"{name}_exp_out")
    m.d.comb += exp_out.eq(exp + carry)
    result = Signal(32, name=f"{name}_packed")
    with m.If(exp_out >= 0xFF):
        m.d.comb += result.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Else():
        # A subnormal has no hidden bit: its exponent field is 0 (rounding up may make it normal).
        m.d.comb += result.eq(Cat(mant_out[0:23], Mux(mant_out[23], exp_out[0:8], 0), sign))
    return result


def f32_add(m: Module, a, b, name: str = "fadd") -> Signal:
    """``a + b`` on binary32 bit patterns."""
    a_nan, a_inf, _ = _specials(a)
    b_nan, b_inf, _ = _specials(b)
    swap = b[0:31] > a[0:31]
    x = Signal(32, name=f"{name}_x")
    y = Signal(32, name=f"{name}_y")
    m.d.comb += [x.eq(Mux(swap, b, a)), y.eq(Mux(swap, a, b))]  # |x| >= |y|
    sx, ex, fx = _fields(x)
    sy, ey, fy = _fields(y)
    ex_eff = Mux(ex == 0, 1, ex)
    ey_eff = Mux(ey == 0, 1, ey)
    shift = Signal(range(28), name=f"{name}_align")
    distance = ex_eff - ey_eff
    m.d.comb += shift.eq(Mux(distance > 27, 27, distance))
    big = Cat(Const(0, 3), fx, ex != 0)  # 27 bits
    small_full = Cat(Const(0, 3), fy, ey != 0)
    lost_mask = ((Const(1, 28) << shift) - 1)[0:27]
    small = Signal(27, name=f"{name}_small")
    m.d.comb += small.eq((small_full >> shift) | ((small_full & lost_mask) != 0))
    subtract = sx ^ sy
    total = Signal(28, name=f"{name}_sum")
    m.d.comb += total.eq(Mux(subtract, big - small, big + small))

    norm = Signal(27, name=f"{name}_norm")
    exp = Signal(signed(12), name=f"{name}_exp")
    lz = _leading_zeros(m, total, 27, f"{name}_lz")
    left = Signal(range(28), name=f"{name}_left")
    m.d.comb += left.eq(Mux(lz < ex_eff - 1, lz, ex_eff - 1))
    with m.If(total[27]):  # the sum carried: one place right, keeping the sticky bit
        m.d.comb += [norm.eq(Cat(total[1] | total[0], total[2:28])), exp.eq(ex_eff + 1)]
    with m.Else():
        m.d.comb += [norm.eq((total << left)[0:27]), exp.eq(ex_eff - left)]
    packed = _round_and_pack(m, name, sx, exp, norm)

    result = Signal(32, name=name)
    with m.If(a_nan | b_nan | (a_inf & b_inf & (a[31] != b[31]))):
        m.d.comb += result.eq(QUIET_NAN)
    with m.Elif(a_inf | b_inf):
        m.d.comb += result.eq(x)
    with m.Elif(total == 0):  # exact cancellation is +0; (-0) + (-0) stays -0
        m.d.comb += result.eq(Cat(Const(0, 31), ~subtract & sx))
    with m.Else():
        m.d.comb += result.eq(packed)
    return result


def f32_mul(m: Module, a, b, name: str = "fmul") -> Signal:
    """``a * b`` on binary32 bit patterns."""
    a_nan, a_inf, a_zero = _specials(a)
    b_nan, b_inf, b_zero = _specials(b)
    sign = a[31] ^ b[31]
    ea, eb = a[23:31], b[23:31]
    ma = Cat(a[0:23], ea != 0)
    mb = Cat(b[0:23], eb != 0)
    product = Signal(48, name=f"{name}_product")
    m.d.comb += product.eq(ma * mb)
    lz = _leading_zeros(m, product, 48, f"{name}_lz")
    normalised = Signal(48, name=f"{name}_normalised")
    m.d.comb += normalised.eq((product << lz)[0:48])  # leading one at bit 47
    # Biased exponent of that leading one: ea + eb - 127 for bit 46, one more for bit 47.
    exp = Signal(signed(12), name=f"{name}_exp")
    m.d.comb += exp.eq(Mux(ea == 0, 1, ea) + Mux(eb == 0, 1, eb) - 126 - lz)
    # Below the smallest normal exponent the mantissa shifts right into the subnormal range.
    right = Signal(range(64), name=f"{name}_right")
    m.d.comb += right.eq(Mux(exp >= 1, 0, Mux(1 - exp > 63, 63, 1 - exp)))
    wide = Cat(Const(0, 16), normalised)  # 64 bits: room for the sticky bits
    lost_mask = (Const(1, 65) << right) - 1
    shifted = Signal(64, name=f"{name}_shifted")
    m.d.comb += shifted.eq((wide >> right) | ((wide & lost_mask[0:64]) != 0))
    # 24 mantissa bits, guard, round, and every bit below as sticky.
    norm = Cat(shifted[0:38] != 0, shifted[38], shifted[39], shifted[40:64])
    packed = _round_and_pack(m, name, sign, Mux(exp >= 1, exp, 1), norm)

    result = Signal(32, name=name)
    with m.If(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)):
        m.d.comb += result.eq(QUIET_NAN)
    with m.Elif(a_inf | b_inf):
        m.d.comb += result.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Elif(a_zero | b_zero):
        m.d.comb += result.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += result.eq(packed)
    return result


def f32_less(a, b, or_equal: bool = False):
    """``a < b`` (``a <= b`` with ``or_equal``): false when either is NaN; -0 equals +0."""
    a_nan = (a[23:31] == 0xFF) & (a[0:23] != 0)
    b_nan = (b[23:31] == 0xFF) & (b[0:23] != 0)
    both_zero = (a[0:31] == 0) & (b[0:31] == 0)
    # Sign-magnitude to two's complement keys: a negative's key is minus its magnitude.
    key_a = Mux(a[31], -a[0:31], a[0:31])
    key_b = Mux(b[31], -b[0:31], b[0:31])
    if or_equal:
        return ~a_nan & ~b_nan & (both_zero | (key_a <= key_b))
    return ~a_nan & ~b_nan & ~both_zero & (key_a < key_b)


def f32_is_zero(a):
    return a[0:31] == 0
