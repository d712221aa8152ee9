"""The hardware's small modules in Amaranth's own simulator, each against an independent reference.

Arithmetic against NumPy (IEEE float32) and the emulator (fixed point: the emulator is the
definition of the hardware); the systolic array and the SIMD ALU against the emulator running
the same LoadWeights/MatMul/SIMD instructions; the instruction stream against the byte stream it
carries; the sampler against its specification (``systolix.perf.samples``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

amaranth = pytest.importorskip("amaranth")

from amaranth.hdl import Module, Signal  # noqa: E402
from amaranth.sim import Simulator  # noqa: E402

from systolix.arch import Architecture  # noqa: E402
from systolix.emulator import Emulator  # noqa: E402
from systolix.errors import ArchitectureError  # noqa: E402
from systolix.isa import SIMD, LoadWeights, MatMul, SimdOp, encode_program, InstructionLayout  # noqa: E402
from systolix.numerics import DataType  # noqa: E402
from systolix.rtl import RtlConfig  # noqa: E402
from systolix.rtl import float32  # noqa: E402
from systolix.rtl.alu import simd_alu  # noqa: E402
from systolix.rtl.arith import Arith  # noqa: E402
from systolix.rtl.array import SystolicArray, output_delay  # noqa: E402
from systolix.rtl.sampler import Sampler  # noqa: E402
from systolix.rtl.stream import InstructionStream  # noqa: E402

SPECIALS = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x3F800000, 0xBF800000, 0x7F7FFFFF, 0x00800000, 0x00000001,
            0x807FFFFF, 0x7FC00000, 0x34000000, 0x4B800000]


def _is_nan(bits: int) -> bool:
    return (bits >> 23) & 0xFF == 0xFF and bits & 0x7FFFFF != 0


def _run_comb(m: Module, inputs: dict, outputs: dict, rows: list[tuple]) -> list[tuple]:
    """Drive ``rows`` of input values through combinational logic; the outputs of each row."""
    results = []

    async def bench(ctx):
        for row in rows:
            for sig, value in zip(inputs.values(), row):
                ctx.set(sig, value)
            results.append(tuple(ctx.get(s) for s in outputs.values()))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return results


float_bits = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from(SPECIALS),
                       st.integers(0, 2**23 - 1).map(lambda f: f | (1 << 31)),  # negative subnormals
                       st.builds(lambda e, f, s: s << 31 | e << 23 | f, st.integers(100, 150), st.integers(0, 2**23 - 1),
                                 st.integers(0, 1)))


@given(pairs=st.lists(st.tuples(float_bits, float_bits), min_size=1, max_size=300))
@settings(max_examples=12, deadline=None)
def test_float32_add_multiply_compare_match_numpy(pairs):
    m = Module()
    a, b = Signal(32), Signal(32)
    total, product = float32.f32_add(m, a, b), float32.f32_mul(m, a, b)
    less, less_eq = Signal(), Signal()
    m.d.comb += [less.eq(float32.f32_less(a, b)), less_eq.eq(float32.f32_less(a, b, or_equal=True))]
    # Near-cancellation: b = -a with the low bits changed.
    pairs = pairs + [(x, (x ^ 0x80000000) ^ (y & 0xFF)) for x, y in pairs[:50]]
    got = _run_comb(m, {"a": a, "b": b}, {"s": total, "p": product, "lt": less, "le": less_eq}, pairs)
    x = np.array([p[0] for p in pairs], dtype=np.uint32).view(np.float32)
    y = np.array([p[1] for p in pairs], dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        want_s, want_p = (x + y).view(np.uint32), (x * y).view(np.uint32)
    for i, (s, p, lt, le) in enumerate(got):
        for name, g, w in (("add", s, int(want_s[i])), ("mul", p, int(want_p[i]))):
            assert g == w or (_is_nan(g) and _is_nan(w)), f"{name} {pairs[i][0]:#x} {pairs[i][1]:#x}: {g:#x} != {w:#x}"
        assert bool(lt) == bool(x[i] < y[i]) and bool(le) == bool(x[i] <= y[i]), f"compare {x[i]} {y[i]}"


def _arch(dtype: str, n: int = 4, registers: int = 2) -> Architecture:
    return Architecture.from_tarch({
        "data_type": dtype, "array_size": n, "dram0_depth": 64, "dram1_depth": 64, "local_depth": 64,
        "accumulator_depth": 32, "simd_registers_depth": registers, "stride0_depth": 4, "stride1_depth": 4,
    })


def _random_raw(rng, dtype: DataType, shape) -> np.ndarray:
    if dtype is DataType.FLOAT32:
        v = (rng.standard_normal(shape) * rng.choice([0.5, 4, 300], size=shape)).astype(np.float32)
        v[rng.random(shape) < 0.15] = 0
        return v
    v = rng.integers(dtype.min_int, dtype.max_int + 1, size=shape, dtype=np.int64)
    small = rng.integers(-(dtype.one * 4), dtype.one * 4 + 1, size=shape)
    v = np.where(rng.random(shape) < 0.5, small, v)
    v[rng.random(shape) < 0.15] = 0
    return v


def _to_bits(raw: np.ndarray, dtype: DataType) -> list[int]:
    if dtype is DataType.FLOAT32:
        return [int(b) for b in np.asarray(raw, dtype=np.float32).view(np.uint32).ravel()]
    return [int(v) & ((1 << dtype.width) - 1) for v in np.asarray(raw).ravel()]


def _from_bits(bits: int, dtype: DataType):
    if dtype is DataType.FLOAT32:
        return np.array([bits], dtype=np.uint32).view(np.float32)[0]
    return bits - (1 << dtype.width) if bits >> (dtype.width - 1) else bits


@pytest.mark.parametrize("dtype", [d.name for d in DataType])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=3, deadline=None)
def test_simd_alu_matches_the_emulator_on_every_op(dtype, seed):
    """Every op with input, register and both operand orders, against the emulator's SIMD."""
    arch = _arch(dtype, n=4, registers=2)
    dt = arch.data_type
    rng = np.random.default_rng(seed)
    m = Module()
    arith = Arith.of(dt)
    op, inp, left, right = Signal(4), Signal(dt.width), Signal(dt.width), Signal(dt.width)
    out = simd_alu(m, arith, op, inp, left, right, "alu")
    rows, expected = [], []
    layout = InstructionLayout.of(arch)
    for sop in SimdOp:
        acc = _random_raw(rng, dt, (2, 4))
        regs = _random_raw(rng, dt, (2, 4))
        emulator = Emulator(arch)
        emulator.write("acc", 0, acc)
        emulator.registers[0] = regs
        # Input from acc[0]; left register 1, right register 2; the result written to acc[1].
        emulator.run(encode_program([SIMD(sop, 1, 2, 0, write_address=1, read_address=0, read=True, write=True)], layout))
        result = emulator.read("acc", 1, 1)[0, 0]
        for k in range(4):
            rows.append((int(sop), *_to_bits(np.array([acc[0, k], regs[0, k], regs[1, k]]), dt)))
            expected.append(result[k])
    got = _run_comb(m, {"op": op, "inp": inp, "left": left, "right": right}, {"out": out}, rows)
    for row, (g,), want in zip(rows, got, expected):
        value = _from_bits(g, dt)
        same = value == want or (dt is DataType.FLOAT32 and np.isnan(value) and np.isnan(want))
        assert same, f"{SimdOp(row[0]).name} on {row[1:]}: RTL {value}, emulator {want}"


@pytest.mark.parametrize("dtype,n", [("FP16BP8", 3), ("FP8BP4", 2), ("FP18BP10", 2), ("FP32BP16", 2), ("FLOAT32", 2)])
def test_systolic_array_matches_the_emulator_matmul(dtype, n):
    """Weights shifted in as LoadWeights does; vectors streamed back to back; each result after
    2N-1 clocks equals the emulator's MatMul (bias row first, every product rounded, saturating)."""
    arch = _arch(dtype, n=n)
    dt = arch.data_type
    cfg = RtlConfig(arch)
    rng = np.random.default_rng(n)
    weights = _random_raw(rng, dt, (n + 1, n))
    inputs = _random_raw(rng, dt, (7, n))
    emulator = Emulator(arch)
    emulator.write("local", 0, np.concatenate([weights, inputs]))
    layout = InstructionLayout.of(arch)
    emulator.run(encode_program([LoadWeights(0, n), MatMul(n + 1, 0, len(inputs) - 1)], layout))
    want = emulator.read("acc", 0, len(inputs))[0]

    array = SystolicArray(cfg)
    w = dt.width
    pack = lambda vec: sum(b << (k * w) for k, b in enumerate(_to_bits(vec, dt)))  # noqa: E731
    got = []

    async def bench(ctx):
        for r in range(n, -1, -1):  # the last row first: the lowest address ends in the bias row
            ctx.set(array.shift, 1)
            ctx.set(array.shift_data, pack(weights[r]))
            await ctx.tick()
        ctx.set(array.shift, 0)
        for t in range(len(inputs) + output_delay(n)):
            ctx.set(array.x, pack(inputs[t]) if t < len(inputs) else 0)
            if t >= output_delay(n):
                y = ctx.get(array.y)
                got.append([_from_bits((y >> (k * w)) & ((1 << w) - 1), dt) for k in range(n)])
            await ctx.tick()

    sim = Simulator(array)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    np.testing.assert_array_equal(np.array(got, dtype=want.dtype), want)


@given(word_bytes=st.sampled_from([2, 4, 8, 16]), instruction_bytes=st.integers(2, 11),
       stalls=st.lists(st.booleans(), min_size=60, max_size=60), seed=st.integers(0, 1000))
@settings(max_examples=20, deadline=None)
def test_instruction_stream_joins_words_into_instructions(word_bytes, instruction_bytes, stalls, seed):
    rng = np.random.default_rng(seed)
    count = 9
    data = rng.integers(0, 256, size=count * instruction_bytes, dtype=np.uint8).tobytes()
    data += bytes(-len(data) % word_bytes)
    words = [int.from_bytes(data[i : i + word_bytes], "little") for i in range(0, len(data), word_bytes)]
    stream = InstructionStream(8 * word_bytes, 8 * instruction_bytes)
    seen = []

    async def bench(ctx):
        sent = 0
        for cycle in range(400):
            ctx.set(stream.word_valid, sent < len(words))
            ctx.set(stream.word, words[sent] if sent < len(words) else 0)
            ready = not stalls[cycle % len(stalls)]
            ctx.set(stream.instruction_ready, ready)
            if ctx.get(stream.instruction_valid) and ready:
                seen.append(ctx.get(stream.instruction))
            if sent < len(words) and ctx.get(stream.word_ready):
                sent += 1
            await ctx.tick()

    sim = Simulator(stream)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    want = [int.from_bytes(data[i : i + instruction_bytes], "little")
            for i in range(0, len(data) - instruction_bytes + 1, instruction_bytes)]
    assert seen == want


def test_sampler_takes_a_sample_every_interval_and_closes_blocks():
    sampler = Sampler(block_size=3)
    samples = []

    async def bench(ctx):
        ctx.set(sampler.interval, 5)
        ctx.set(sampler.tready, 1)
        for cycle in range(40):
            ctx.set(sampler.program_counter, cycle)
            ctx.set(sampler.valid["array"], cycle % 2)
            ctx.set(sampler.ready["dram0"], 1)
            if ctx.get(sampler.tvalid):
                samples.append((ctx.get(sampler.tdata), ctx.get(sampler.tlast)))
            await ctx.tick()

    sim = Simulator(sampler)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    pcs = [word & 0xFFFFFFFF for word, _ in samples]
    assert np.all(np.diff(pcs) == 5)  # one sample every 5 clocks
    assert all((word >> 32) & 1 == pc % 2 for (word, _), pc in zip(samples, pcs))  # array valid: bit 32
    assert all((word >> 41) & 1 for word, _ in samples)  # DRAM0 ready: bit 41
    assert [last for _, last in samples][:6] == [0, 0, 1, 0, 0, 1]


@pytest.mark.parametrize("change,words", [
    ({"number_of_threads": 2}, "number_of_threads"),
    ({"array_size": 200}, "array_size"),
    ({"local_depth": 1}, "local_depth"),
    ({"dram0_depth": 2**32}, "dram0_depth"),
])
def test_architectures_the_generator_cannot_build_name_the_parameter(change, words):
    values = _arch("FP16BP8").to_tarch() | change
    with pytest.raises(ArchitectureError, match=words):
        RtlConfig(Architecture.from_tarch(values))


def test_a_bus_that_does_not_divide_a_vector_is_refused():
    with pytest.raises(ArchitectureError, match="AXI"):
        RtlConfig(_arch("FP16BP8", n=12), axi_data_bits=128)  # 24-byte vectors
    assert RtlConfig(_arch("FP16BP8", n=12)).axi_data_bits == 64
