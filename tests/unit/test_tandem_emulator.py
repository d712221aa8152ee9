"""The Tandem unit's semantics, checked against NumPy: reductions, transposes, loops and
iterators, the ALU's rounding and saturation, and the kernels part 3 will build on (a Newton
reciprocal, exp by range reduction and a polynomial)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolix.arch import ARCHITECTURES
from systolix.emulator import Emulator, EmulatorError
from systolix.emulator.reference import ReferenceTCU
from systolix.errors import DecodingError
from systolix.isa import SIMD, InstructionLayout, SimdOp, decode_program, encode_program
from systolix.isa.assembly import assemble

ARCH = ARCHITECTURES["ultra96v2_tandem"]  # FP16BP8, 16 lanes; wide type FP32BP16
N = ARCH.array_size
LAYOUT = InstructionLayout.of(ARCH)
ONE = 1 << 8  # FP16BP8
WONE = 1 << 16  # the wide type's 1.0
LO, HI = -(1 << 15), (1 << 15) - 1
WLO, WHI = -(1 << 31), (1 << 31) - 1


def run(listing: str, acc: np.ndarray | None = None, local: np.ndarray | None = None, batch: int = 1):
    """Run ``listing`` on the emulator and on the reference TCU (they must agree bit for bit);
    the emulator after the run."""
    program = decode_program(assemble(listing, LAYOUT), LAYOUT)
    emu = Emulator(ARCH, batch=batch)
    ref = ReferenceTCU(ARCH, batch, 1, 1)
    for name, data in (("acc", acc), ("local", local)):
        if data is not None:
            data = np.broadcast_to(data, (batch,) + np.shape(data)[-2:]) if np.ndim(data) == 2 else data
            emu.write(name, 0, data)
            getattr(ref, name)[:, : data.shape[1]] = data
    emu.run(program)
    ref.run(program)
    assert np.array_equal(emu.read("acc", 0, 512), ref.acc[:, :512])
    assert np.array_equal(emu.read("local", 0, 512), ref.local[:, :512])
    assert np.array_equal(emu.tandem.interim, ref.tandem.interim)
    return emu


def iterators(ns: str, k: int, base: int, *strides: tuple[int, int]) -> str:
    lines = [f"TIter base {ns}.{k} = {base}"] + [f"TIter stride {ns}.{k} level={lv} = {s}" for lv, s in strides]
    return "\n".join(lines) + "\n"


def test_a_loop_sums_each_vector_across_its_lanes_and_subtracts_the_sum():
    rng = np.random.default_rng(1)
    x = rng.integers(-3000, 3000, size=(2, 24, N))
    listing = (iterators("acc", 0, 0, (0, 1)) + iterators("acc", 1, 100, (0, 1)) + iterators("interim", 0, 0, (0, 1))
               + "TLoop level=0 iterations=24 body=2\nTPermute LaneSum interim.0 <- acc.0\nTAlu Sub acc.1 <- acc.0, interim.0\n")
    emu = run(listing, acc=x, batch=2)
    sums = x.sum(axis=2, keepdims=True)
    assert np.array_equal(emu.tandem.interim[:, :24], np.broadcast_to(sums << 8, x.shape))  # exact in the wide type
    assert np.array_equal(emu.read("acc", 100, 24), np.clip(x - sums, LO, HI))


def test_a_running_max_over_vectors_in_two_nested_loops_then_across_lanes():
    rng = np.random.default_rng(2)
    x = rng.integers(LO, HI + 1, size=(1, 64, N))  # 4 rows of 16 vectors
    listing = (
        iterators("acc", 0, 0, (0, 1), (1, 16)) + iterators("interim", 0, 0, (1, 1)) + iterators("acc", 1, 200, (1, 1))
        + "TImm imm.0 = -2147483648\n"
        + "TLoop level=1 iterations=4 body=4\n"
        + "TAlu Move interim.0 <- imm.0\n"
        + "TLoop level=0 iterations=16 body=1\n"
        + "TAlu Max interim.0 <- interim.0, acc.0\n"
        + "TPermute LaneMax acc.1 <- interim.0\n"
    )
    emu = run(listing, acc=x)
    rows = x.reshape(1, 4, 16 * N).max(axis=2)
    assert np.array_equal(emu.read("acc", 200, 4), np.repeat(rows[:, :, None], N, axis=2))


def test_transpose_of_tiles_with_a_strided_loop_between_local_and_accumulators():
    rng = np.random.default_rng(3)
    x = rng.integers(LO, HI + 1, size=(1, 3 * N, N))
    listing = (iterators("local", 0, 0, (0, N)) + iterators("acc", 0, 300, (0, N))
               + f"TLoop level=0 iterations=3 body=1\nTPermute Transpose acc.0 <- local.0\n")
    emu = run(listing, local=x)
    got = emu.read("acc", 300, 3 * N).reshape(3, N, N)
    assert np.array_equal(got, x[0].reshape(3, N, N).transpose(0, 2, 1))


def test_negative_strides_walk_backwards():
    x = np.arange(8 * N).reshape(1, 8, N)
    emu = run(iterators("acc", 0, 7, (2, -1)) + iterators("acc", 1, 50, (2, 1))
              + "TLoop level=2 iterations=8 body=1\nTAlu Move acc.1 <- acc.0\n", acc=x)
    assert np.array_equal(emu.read("acc", 50, 8), x[:, ::-1])


def _rne(num: int, den: int) -> int:
    """``num / den`` rounded half to even (Python integers)."""
    return round(Fraction(num, den))


def _sat(v: int, lo: int = WLO, hi: int = WHI) -> int:
    return min(max(v, lo), hi)


def _narrow(v: int) -> int:
    return _sat(_rne(v, 1 << 8), LO, HI)


ALU_MODEL = {
    "Add": lambda a, b, d: _sat(a + b), "Sub": lambda a, b, d: _sat(a - b),
    "Mul": lambda a, b, d: _sat(_rne(a * b, WONE)), "Mac": lambda a, b, d: _sat(d + _rne(a * b, WONE)),
    "Div": lambda a, b, d: (_sat(_rne(a * WONE, b)) if b else (WHI if a > 0 else WLO if a < 0 else 0)),
    "Max": lambda a, b, d: max(a, b), "Min": lambda a, b, d: min(a, b),
    "Shift": lambda a, b, d: (_sat(a * 2 ** (b // WONE)) if b >= 0 else _rne(a, 2 ** -(b // WONE))),
    "And": lambda a, b, d: WONE if a and b else 0, "Or": lambda a, b, d: WONE if a or b else 0,
    "CMove": lambda a, b, d: a if b else d,
}
CMP_MODEL = {"Eq": int.__eq__, "Ne": int.__ne__, "Gt": int.__gt__, "Ge": int.__ge__, "Lt": int.__lt__, "Le": int.__le__}


@given(op=st.sampled_from(sorted(ALU_MODEL) + sorted(CMP_MODEL)),
       a=st.lists(st.integers(WLO, WHI), min_size=N, max_size=N),
       b=st.lists(st.one_of(st.integers(WLO, WHI), st.integers(-40, 40).map(lambda k: k * WONE), st.just(0)), min_size=N, max_size=N),
       d=st.lists(st.integers(WLO, WHI), min_size=N, max_size=N))
@settings(max_examples=25, deadline=None)
def test_the_alu_and_comparisons_on_wide_values_match_exact_integer_arithmetic(op, a, b, d):
    # Operands in the interim buffer (wide values), each lane set by a conditional move of an
    # immediate under a one-hot mask from local memory; the result written to the interim
    # buffer (exact) and to the accumulators (rounded and saturated to FP16BP8).
    mask = np.eye(N, dtype=np.int64)[None] * ONE  # local vector `lane` is non-zero at that lane only
    lines = [iterators("interim", k, k).strip() for k in range(4)] + [iterators("acc", 0, 0).strip()]
    for vals, k in ((a, 0), (b, 1), (d, 2)):
        for lane, v in enumerate(vals):
            lines += [f"TIter base local.0 = {lane}", f"TImm imm.0 = {v}", f"TAlu CMove interim.{k} <- imm.0, local.0"]
    kind = "TCmp" if op in CMP_MODEL else "TAlu"
    lines += [f"TAlu Move interim.3 <- interim.2", f"{kind} {op} interim.3 <- interim.0, interim.1",
              f"TAlu Move acc.0 <- interim.2", f"{kind} {op} acc.0 <- interim.0, interim.1"]
    emu = run("\n".join(lines), local=mask)
    if op in CMP_MODEL:
        want = [WONE if CMP_MODEL[op](x, y) else 0 for x, y in zip(a, b)]
    else:
        want = [ALU_MODEL[op](x, y, z) for x, y, z in zip(a, b, d)]
    assert emu.tandem.interim[0, 3].tolist() == want
    if op == "Mac":  # the accumulator's own value (narrow, widened) is what Mac adds to
        want = [ALU_MODEL[op](x, y, (_narrow(z) << 8)) for x, y, z in zip(a, b, d)]
    if op == "CMove":
        want = [x if y else _narrow(z) << 8 for x, y, z in zip(a, b, d)]
    assert emu.read("acc", 0, 1)[0, 0].tolist() == [_narrow(v) for v in want]


@pytest.mark.parametrize("simd, tandem", [
    (SimdOp.ADD, "TAlu Add"), (SimdOp.SUBTRACT, "TAlu Sub"), (SimdOp.MULTIPLY, "TAlu Mul"), (SimdOp.MAX, "TAlu Max"),
    (SimdOp.MIN, "TAlu Min"), (SimdOp.AND, "TAlu And"), (SimdOp.OR, "TAlu Or"),
    (SimdOp.GREATER_THAN, "TCmp Gt"), (SimdOp.GREATER_THAN_EQUAL, "TCmp Ge"),
])
def test_where_the_tcu_simd_alu_has_the_same_operation_the_accumulators_get_the_same_values(simd, tandem):
    rng = np.random.default_rng(int(simd))
    x = np.concatenate([rng.integers(LO, HI + 1, size=(1, 6, N)), np.full((1, 1, N), LO), np.full((1, 1, N), HI)], axis=1)
    y = np.concatenate([rng.integers(LO, HI + 1, size=(1, 6, N)), np.full((1, 1, N), LO), np.full((1, 1, N), LO)], axis=1)
    acc = np.concatenate([x, y], axis=1)  # x at 0..7, y at 8..15
    emu = run(iterators("acc", 0, 0, (0, 1)) + iterators("acc", 1, 8, (0, 1)) + iterators("acc", 2, 32, (0, 1))
              + f"TLoop level=0 iterations=8 body=1\n{tandem} acc.2 <- acc.0, acc.1\n", acc=acc)
    # The TCU: y into register 1, then op(x, reg1) written out, one vector at a time.
    ref = ReferenceTCU(ARCHITECTURES["ultra96v2"], 1, 1, 1)
    ref.acc[:, :16] = acc
    for v in range(8):
        ref.simd(SIMD(SimdOp.MOVE, 0, 0, 1, read_address=8 + v, read=True))
        ref.simd(SIMD(simd, 0, 1, 0, write_address=32 + v, read_address=v, read=True, write=True))
    assert np.array_equal(emu.read("acc", 32, 8), ref.acc[:, 32:40])


def test_abs_sign_floor_neg_and_casts():
    x = np.array([[[-32768, -300, -256, -1, 0, 1, 255, 256, 257, 32767, -129, 129, 383, -383, 640, -640]]])
    emu = run(iterators("acc", 0, 0) + "\n".join(f"TIter base interim.{k} = {k}" for k in range(6)) + "\n"
              + "TCalc Abs interim.0 <- acc.0\nTCalc Sign interim.1 <- acc.0\nTCalc Floor interim.2 <- acc.0\n"
              + "TCalc Neg interim.3 <- acc.0\nTCast interim.4 <- acc.0 width=8 frac=4\nTCast interim.5 <- acc.0 width=16 frac=0\n", acc=x)
    v = [int(t) << 8 for t in x[0, 0]]  # wide values
    assert emu.tandem.interim[0, 0].tolist() == [abs(t) for t in v]
    assert emu.tandem.interim[0, 1].tolist() == [WONE * int(np.sign(t)) for t in v]
    assert emu.tandem.interim[0, 2].tolist() == [(t // WONE) * WONE for t in v]
    assert emu.tandem.interim[0, 3].tolist() == [-t for t in v]
    assert emu.tandem.interim[0, 4].tolist() == [_sat(_rne(t, 1 << 12), -128, 127) << 12 for t in v]  # FP8BP4
    assert emu.tandem.interim[0, 5].tolist() == [_rne(t, WONE) << 16 for t in v]  # to integers


def test_newton_reciprocal_is_within_two_wide_steps_of_one_over_x():
    # y <- y (2 - x y), from y0 = 1/128 (converges for 0 < x < 256): 12 steps in a hardware loop.
    values = np.linspace(1.0, 120.0, 8 * N)
    xs = np.round(values * ONE).astype(np.int64).reshape(1, 8, N)
    listing = (iterators("acc", 0, 0, (1, 1)) + iterators("interim", 0, 0, (1, 1)) + iterators("interim", 1, 8, (1, 1))
               + iterators("acc", 1, 64, (1, 1))
               + f"TImm imm.0 = {WONE // 128}\nTImm imm.1 = {2 * WONE}\n"
               + "TLoop level=1 iterations=8 body=6\n"
               + "TAlu Move interim.0 <- imm.0\n"
               + "TLoop level=0 iterations=12 body=3\n"
               + "TAlu Mul interim.1 <- acc.0, interim.0\n"  # x y
               + "TAlu Sub interim.1 <- imm.1, interim.1\n"  # 2 - x y
               + "TAlu Mul interim.0 <- interim.0, interim.1\n"  # y (2 - x y)
               + "TAlu Move acc.1 <- interim.0\n")
    emu = run(listing, acc=xs)
    exact = 1.0 / (xs[0] / ONE)
    wide = emu.tandem.interim[0, :8] / WONE
    assert np.abs(wide - exact).max() <= 2 / WONE
    narrow = emu.read("acc", 64, 8)[0] / ONE
    assert np.abs(narrow - exact).max() <= 0.5 / ONE + 2 / WONE


def test_exp_by_range_reduction_and_a_polynomial_for_softmax_inputs():
    # exp(x) = 2^k 2^f, t = x log2(e), k = floor(t), f = t - k in [0, 1); 2^f by a degree-4
    # polynomial (least squares on [0, 1]) in Horner form, then a shift by k (the Shift op).
    xs = np.arange(-16 * ONE, 1).astype(np.int64)  # every FP16BP8 value in [-16, 0]
    lanes = np.concatenate([xs, np.zeros((-len(xs)) % N, np.int64)]).reshape(1, -1, N)
    count = lanes.shape[1]
    f = np.linspace(0, 1, 1000)
    coeffs = np.polyfit(f, 2.0 ** f, 4)  # highest power first
    horner = "".join(f"TAlu Mul interim.2 <- interim.2, interim.0\nTAlu Add interim.2 <- interim.2, imm.{k}\n" for k in range(1, 5))
    body = ("TAlu Mul interim.0 <- acc.0, imm.5\n"  # t = x log2(e)
            "TCalc Floor interim.1 <- interim.0\n"  # k
            "TAlu Sub interim.0 <- interim.0, interim.1\n"  # f
            "TAlu Move interim.2 <- imm.0\n" + horner  # p(f), Horner
            + "TAlu Shift acc.1 <- interim.2, interim.1\n")  # p(f) 2^k, rounded and narrowed
    listing = (iterators("acc", 0, 0, (0, 1)) + iterators("acc", 1, 400, (0, 1))
               + "".join(f"TIter base interim.{k} = {k}\n" for k in range(3))
               + "".join(f"TImm imm.{k} = {round(float(c) * WONE)}\n" for k, c in enumerate(coeffs))
               + f"TImm imm.5 = {round(np.log2(np.e) * WONE)}\n"
               + f"TLoop level=0 iterations={count} body={body.count(chr(10))}\n" + body)
    emu = run(listing, acc=lanes)
    got = emu.read("acc", 400, count)[0].ravel()[: len(xs)] / ONE
    err = np.abs(got - np.exp(xs / ONE))
    assert err.max() <= 0.5 / ONE + 2e-4  # the output's own rounding plus the polynomial's error


def test_addresses_outside_a_namespace_stop_the_run_at_that_instruction_with_its_text():
    listing = iterators("acc", 0, 4000, (0, 1)) + "TLoop level=0 iterations=200 body=1\nTAlu Move interim.0 <- acc.0\n"
    program = decode_program(assemble(listing, LAYOUT), LAYOUT)
    with pytest.raises(EmulatorError, match=r"instruction #3 \(TAlu Move interim.0 <- acc.0\) reads acc address 4199, "
                                            r"past accumulator_depth 4096 \(vectors 4000..4199 over its loops\)"):
        Emulator(ARCH).run(program, source="p")


@pytest.mark.parametrize("listing, fragment", [
    ("TLoop level=0 iterations=2 body=1\nTImm imm.0 = 1\n", "in its body; a loop body holds only"),
    ("TLoop level=0 iterations=2 body=2\nTLoop level=0 iterations=2 body=1\nTAlu Move acc.0 <- acc.1\n",
     "reuses loop level 0"),
    ("TLoop level=0 iterations=2 body=3\nTAlu Move acc.0 <- acc.1\n", "body past the end of the program"),
    ("TLoop level=1 iterations=2 body=2\nTLoop level=0 iterations=2 body=2\nTAlu Move acc.0 <- acc.1\nTAlu Move acc.0 <- acc.1\n",
     "ends after the body of the loop around it"),
    ("TIter base interim.0 = 1024\nTAlu Move interim.0 <- acc.1\n", "past tandem.interim_depth 1024"),
    ("TIter stride acc.0 level=0 = -1\nTLoop level=0 iterations=2 body=1\nTAlu Move acc.0 <- acc.1\n", "below 0"),
    ("TImm imm.0 = 0\nTCast acc.0 <- acc.1 width=33 frac=8\n", "casts to 33 bits"),
    ("TSync release buf=1\nTSync wait buf=2\n", "waits for buffer 2, which no earlier TSync release hands back"),
    ("MatMul local[0, stride=1] -> acc[0, stride=2] size=3\nTIter base acc.0 = 6\nTAlu Move interim.0 <- acc.0\n",
     r"#2 \(TAlu Move interim.0 <- acc.0\) and #0 \(MatMul .*\) both use acc vector 6 with a write, and no TSync to_unit"),
    ("TAlu Move acc.0 <- interim.0\nTSync release buf=0\nTSync to_unit\nDataMove acc[0, stride=1] -> local[0, stride=1] size=0\n",
     "#3 .* and #0 .* both use acc vector 0 with a write, and no TSync to_array"),
])
def test_malformed_loops_and_operands_are_refused_before_they_run(listing, fragment):
    program = decode_program(assemble(listing, LAYOUT), LAYOUT)
    with pytest.raises(EmulatorError, match=fragment):
        Emulator(ARCH).run(program)


def test_synchronised_handovers_run():
    listing = ("MatMul local[0, stride=1] -> acc[0, stride=1] size=3 zeroes\nTSync to_unit\nTImm imm.0 = 65536\n"
               "TAlu Add acc.0 <- acc.0, imm.0\nTSync release buf=2\nTSync wait buf=2\n"
               "DataMove acc[0, stride=1] -> local[8, stride=1] size=0\n")
    emu = run(listing)
    assert (emu.read("local", 8, 1) == ONE).all()  # zero weights, so the MatMul gave 0; the unit added 1


def test_an_architecture_without_the_unit_refuses_a_tandem_program():
    raw = encode_program(decode_program(assemble("NoOp\nTSync to_unit\n", LAYOUT), LAYOUT), LAYOUT)
    stock = ARCHITECTURES["ultra96v2"]
    with pytest.raises(DecodingError, match=r"p.tprog: instruction #1 .*unknown opcode 0xD: TSync to_unit is a Tandem instruction, but the "
                                            "architecture has no Tandem unit"):
        Emulator(stock).run(raw, source="p.tprog")
    with pytest.raises(EmulatorError, match="another instruction layout"):
        Emulator(stock).run(decode_program(raw, LAYOUT))


def test_a_tracepoint_inside_a_loop_body_fires_after_the_loop_with_the_loop_done():
    listing = "TIter stride acc.0 level=0 = 1\nTLoop level=0 iterations=4 body=2\nTCalc Neg acc.0 <- acc.0\nTCalc Neg acc.0 <- acc.0\nNoOp\n"
    program = decode_program(assemble(listing, LAYOUT), LAYOUT)
    emu = Emulator(ARCH)
    emu.write("acc", 0, np.arange(4 * N).reshape(4, N))
    seen = []
    result = emu.run(program, tracepoint=3, on_trace=lambda e, i: seen.append((i, e.read("acc", 0, 4).copy())))
    assert [i for i, _ in seen] == [4] and result.tracepoint_hits == [4]
    assert np.array_equal(seen[0][1][0], np.arange(4 * N).reshape(4, N))  # negated twice, every vector
    assert result.counts == {"TConfig": 1, "TLoop": 1, "TCalc": 2, "NoOp": 1}
