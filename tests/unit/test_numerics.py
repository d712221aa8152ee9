"""Fixed-point numbers against exact references written with Python integers and fractions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolix.artifacts import pack_scalars, unpack_scalars
from systolix.numerics import ConversionStats, DataType, from_fixed, mac, matvec, rne_shift, to_fixed

FIXED = [DataType.FP8BP4, DataType.FP16BP8, DataType.FP18BP10, DataType.FP32BP16]


def ref_round(f: float, dt: DataType) -> float | int:
    """Round half up of the float32 value times 2^bp, exactly, before saturation."""
    f32 = float(np.float32(f))
    if math.isnan(f32):
        return 0
    if math.isinf(f32):
        return f32
    return math.floor(Fraction(f32) * dt.one + Fraction(1, 2))


def ref_to_fixed(f: float, dt: DataType) -> int:
    r = ref_round(f, dt)
    return dt.max_int if r > dt.max_int else dt.min_int if r < dt.min_int else int(r)


def ref_rne(numerator: int, shift: int) -> int:
    q = Fraction(numerator, 1 << shift)
    fl = math.floor(q)
    rem = q - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
        return fl + 1
    return fl


def ref_sat(v: int, dt: DataType) -> int:
    return max(dt.min_int, min(dt.max_int, v))


@pytest.mark.parametrize("dt", FIXED)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=50))
@settings(max_examples=60, deadline=None)
def test_to_fixed_rounds_half_up_and_saturates(dt, values):
    stats = ConversionStats()
    got = to_fixed(values, dt, stats)
    want = [ref_to_fixed(v, dt) for v in values]
    assert got.tolist() == want
    assert stats.overflows == sum(1 for v in values if ref_round(v, dt) > dt.max_int)
    assert stats.underflows == sum(1 for v in values if ref_round(v, dt) < dt.min_int)


def test_to_fixed_half_cases():
    dt = DataType.FP16BP8
    # 0.5/256 rounds up to 1 LSB, -0.5/256 rounds up to 0 (half up, as Java's Math.round).
    assert to_fixed([0.5 / 256, -0.5 / 256, 1.5 / 256, -1.5 / 256], dt).tolist() == [1, 0, 2, -1]
    assert to_fixed([1000.0, -1000.0], dt).tolist() == [32767, -32768]


@given(st.integers(-(1 << 62), (1 << 62)), st.integers(0, 20))
def test_rne_shift_matches_fractions(value, shift):
    assert int(rne_shift(np.array([value]), shift)[0]) == ref_rne(value, shift)


@pytest.mark.parametrize("dt", FIXED)
@given(data=st.data())
@settings(max_examples=80, deadline=None)
def test_mac_matches_exact_reference(dt, data):
    ints = st.integers(dt.min_int, dt.max_int)
    x, y, z = data.draw(ints), data.draw(ints), data.draw(ints)
    want = ref_sat(z + ref_rne(x * y, dt.binary_point), dt)
    assert int(mac(np.array([x]), np.array([y]), np.array([z]), dt)[0]) == want


@pytest.mark.parametrize("dt", [DataType.FP8BP4, DataType.FP16BP8])
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_matvec_is_sequential_saturating_mac(dt, data):
    k = data.draw(st.integers(1, 6))
    n = data.draw(st.integers(1, 4))
    # Wide values make partial sums saturate in the middle of a row, the case that needs
    # the sequential order.
    ints = st.integers(dt.min_int, dt.max_int)
    x = data.draw(st.lists(ints, min_size=k, max_size=k))
    w = [data.draw(st.lists(ints, min_size=n, max_size=n)) for _ in range(k)]
    b = data.draw(st.lists(ints, min_size=n, max_size=n))
    want = []
    for j in range(n):
        acc = b[j]
        for i in range(k):
            acc = ref_sat(acc + ref_rne(x[i] * w[i][j], dt.binary_point), dt)
        want.append(acc)
    got = matvec(np.array([x]), np.array(w), np.array(b), dt)
    assert got[0].tolist() == want


def test_matvec_mid_row_saturation_differs_from_plain_sum():
    dt = DataType.FP16BP8
    # 100 + 100 saturates at 127.99, then -100 brings it to 27.99; a plain sum gives 100.
    one = dt.one
    x = np.array([[one, one, one]])
    w = np.array([[100 * one], [100 * one], [-100 * one]])
    got = matvec(x, w, np.array([0]), dt)
    assert int(got[0, 0]) == dt.max_int - 100 * one


@pytest.mark.parametrize("dt", list(DataType))
def test_tdata_pack_unpack_round_trip(dt):
    rng = np.random.default_rng(0)
    if dt is DataType.FLOAT32:
        raw = rng.standard_normal(64).astype(np.float32)
    else:
        raw = rng.integers(dt.min_int, dt.max_int + 1, 64)
        raw[:2] = [dt.min_int, dt.max_int]
    data = pack_scalars(raw, dt)
    assert len(data) == 64 * dt.size_bytes
    assert np.array_equal(unpack_scalars(data, dt), raw)


def test_tdata_byte_order():
    assert pack_scalars(np.array([-2]), DataType.FP16BP8) == b"\xfe\xff"
    assert pack_scalars(np.array([-1]), DataType.FP18BP10) == b"\xff\xff\x03\x00"
    assert pack_scalars(np.array([1.0], np.float32), DataType.FLOAT32) == b"\x3f\x80\x00\x00"  # big-endian


def test_from_fixed():
    assert from_fixed(np.array([256, -384]), DataType.FP16BP8).tolist() == [1.0, -1.5]
