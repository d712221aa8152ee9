"""Random programs on the generated RTL and on the emulator: every memory, bit for bit.

Hypothesis draws programs of every instruction kind (all DataMove kinds, MatMul with and without
accumulate and zeroes, LoadWeights, SIMD with every op, register and flag, NoOp, Configure)
over memories of values from tiny to full range, so partial sums saturate in the middle of a
row and products land on exactly half an LSB. Each program runs on the emulator (the definition
of the hardware) and on the Verilated RTL; afterwards DRAM0, DRAM1, local memory, the
accumulators, the array's weights, the SIMD registers and the configuration registers must agree
exactly, and the RTL's clock count must be the one the ``rtl`` timing model predicts.

Arrays of 2x2, 4x4 and 8x8 in FP16BP8 and every other data type on a small array keep the seven
models' builds to about a minute each on two cores (cached afterwards).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolix.arch import Architecture
from systolix.emulator import Emulator
from systolix.isa import (
    SIMD, Configure, DataFlow, DataMove, InstructionLayout, LoadWeights, MatMul, NoOp, SimdOp, decode_program,
    encode_program,
)
from systolix.numerics import DataType
from systolix.perf.rtl_timing import simulate_rtl
from systolix.rtl import RtlConfig
from systolix.rtl.cosim import RtlMachine

LOCAL, ACC, DRAM = 64, 32, 128
# (array size, data type, local-memory lock regions)
DESIGNS = [(2, "FP16BP8", 2), (4, "FP16BP8", 2), (8, "FP16BP8", 2), (2, "FP8BP4", 2), (4, "FP18BP10", 2),
           (2, "FP32BP16", 2), (2, "FLOAT32", 2), (4, "FP16BP8", 8)]


def arch_for(n: int, dtype: str) -> Architecture:
    return Architecture.from_tarch({
        "data_type": dtype, "array_size": n, "dram0_depth": DRAM, "dram1_depth": DRAM, "local_depth": LOCAL,
        "accumulator_depth": ACC, "simd_registers_depth": 2, "stride0_depth": 4, "stride1_depth": 4,
    })


@st.composite
def two_spans(draw, near_depth: int, far_depth: int):
    """Two spans of the same length inside their memories (one instruction's two sides)."""
    count = draw(st.integers(1, 8))
    spans = []
    for depth in (near_depth, far_depth):
        stride = draw(st.sampled_from([s for s in (1, 2, 4, 8) if (count - 1) * s < depth]))
        spans.append((draw(st.integers(0, depth - 1 - (count - 1) * stride)), stride))
    return spans[0], spans[1], count


@st.composite
def instruction(draw):
    kind = draw(st.sampled_from(["matmul", "matmul", "loadweights", "datamove", "datamove", "simd", "simd", "noop",
                                 "configure"]))
    if kind == "matmul":
        (la, ls), (aa, as_), count = draw(two_spans(LOCAL, ACC))
        return MatMul(la, aa, count - 1, ls, as_, accumulate=draw(st.booleans()), zeroes=draw(st.booleans()))
    if kind == "loadweights":
        (la, ls), _, count = draw(two_spans(LOCAL, LOCAL))
        return LoadWeights(la, count - 1, ls, zeroes=draw(st.booleans()))
    if kind == "datamove":
        flow = draw(st.sampled_from(list(DataFlow)))
        far = {"dram0": DRAM, "dram1": DRAM, "acc": ACC}[flow.far_memory]
        (la, ls), (fa, fs), count = draw(two_spans(LOCAL, far))
        return DataMove(flow, la, fa, count - 1, ls, fs)
    if kind == "simd":
        return SIMD(draw(st.sampled_from(list(SimdOp))), draw(st.integers(0, 2)), draw(st.integers(0, 2)),
                    draw(st.integers(0, 2)), write_address=draw(st.integers(0, ACC - 1)),
                    read_address=draw(st.integers(0, ACC - 1)), read=draw(st.booleans()), write=draw(st.booleans()),
                    accumulate=draw(st.booleans()))
    if kind == "configure":  # cache bits, timeout, tracepoint, program counter, sample interval
        return Configure(draw(st.sampled_from([1, 5, 8, 9, 10, 11])), draw(st.integers(0, 5000)))
    return NoOp()


def random_values(rng, dtype: DataType, shape, scale: float) -> np.ndarray:
    if dtype is DataType.FLOAT32:
        v = (rng.standard_normal(shape) * scale * 8).astype(np.float32)
        v[rng.random(shape) < 0.2] = 0
        return v
    lo, hi = int(dtype.min_int * scale), int(dtype.max_int * scale)
    v = rng.integers(lo, hi + 1, size=shape, dtype=np.int64)
    # Multiples of 8 times multiples of 16: products with exactly half an LSB left over.
    v *= rng.choice([1, 8, 16], size=shape[:-1] + (1,))
    v = np.clip(v, dtype.min_int, dtype.max_int)
    v[rng.random(shape) < 0.2] = 0
    return v


def same(a, b, dtype: DataType) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if dtype is DataType.FLOAT32:  # NaN payloads differ between x86 and the RTL's quiet NaN
        return a.shape == b.shape and bool(np.all((a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))))
    return np.array_equal(a, b)


def run_both(arch: Architecture, cfg: RtlConfig, program: list, dram0: np.ndarray, dram1: np.ndarray):
    layout = InstructionLayout.of(arch)
    data = encode_program(program, layout)
    emulator = Emulator(arch)
    emulator.write("dram0", 0, dram0)
    emulator.write("dram1", 0, dram1)
    emulator.run(data)
    rtl = RtlMachine(arch, config=cfg, dump_state=True)
    rtl.write("dram0", 0, dram0)
    rtl.write("dram1", 0, dram1)
    rtl.run(data)
    return emulator, rtl, decode_program(data, layout)


def assert_same_state(emulator: Emulator, rtl: RtlMachine) -> None:
    arch = emulator.arch
    dt, n = arch.data_type, arch.array_size
    state = rtl.runs[0].state
    for memory in ("dram0", "dram1"):
        assert same(emulator.read(memory, 0, DRAM)[0], rtl.read(memory, 0, DRAM)[0], dt), memory
    assert same(emulator.read("local", 0, LOCAL)[0], state["local"], dt), "local memory"
    assert same(emulator.read("acc", 0, ACC)[0], state["acc"], dt), "accumulators"
    weights = np.array([[state[f"bias_{j}"] for j in range(n)]] + [[state[f"w_{k}_{j}"] for j in range(n)] for k in range(n)])
    assert same(emulator.weights[0], weights, dt), "weights"
    registers = np.array([[state[f"reg{r + 1}_{k}"] for k in range(n)] for r in range(arch.simd_registers_depth)])
    assert same(emulator.registers[0], registers, dt), "SIMD registers"
    regs = emulator.register_values()
    assert state["program_counter"] - rtl.runs[0].padding_noops == regs["program_counter"]
    # Registers narrower than the 32-bit Configure value keep its low bits (as in Tensil's RTL).
    for name, key, bits in (("timeout", "timeout_limit", 16), ("tracepoint", "tracepoint_register", 32),
                            ("sample_interval", "sample_interval", 16), ("dram0_cache", "dram0_cache", 4),
                            ("dram1_cache", "dram1_cache", 4)):
        assert state[key] == regs[name] & ((1 << bits) - 1), name


@pytest.fixture(scope="module", params=DESIGNS, ids=[f"{n}x{n}-{d}-{k}locks" for n, d, k in DESIGNS])
def design(request):
    n, dtype, locks = request.param
    arch = arch_for(n, dtype)
    cfg = RtlConfig(arch, name=f"diff{n}{dtype.lower()}" + ("" if locks == 2 else f"l{locks}"), local_locks=locks)
    from systolix.rtl.cosim import build

    build(cfg)
    return arch, cfg


@given(body=st.lists(instruction(), min_size=1, max_size=30), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([0.02, 0.1, 0.3, 1.0]))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_random_programs_agree_bit_for_bit_and_clock_for_clock(design, body, seed, scale):
    arch, cfg = design
    rng = np.random.default_rng(seed)
    dt = arch.data_type
    # Fill local memory from both DRAMs and the accumulators from local memory first.
    prologue = [DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, LOCAL // 2 - 1),
                DataMove(DataFlow.DRAM1_TO_LOCAL, LOCAL // 2, 0, LOCAL // 2 - 1),
                DataMove(DataFlow.LOCAL_TO_ACC, 0, 0, ACC - 1)]
    dram0 = random_values(rng, dt, (DRAM, arch.array_size), scale)
    dram1 = random_values(rng, dt, (DRAM, arch.array_size), scale)
    emulator, rtl, program = run_both(arch, cfg, prologue + body, dram0, dram1)
    assert_same_state(emulator, rtl)
    assert simulate_rtl(program, arch, cfg).cycles == rtl.runs[0].cycles


# Sequences where the lanes and the pipeline must wait for each other (each compared as above).
HAZARDS = {
    "load_weights_right_after_matmul": [
        LoadWeights(0, 8, 1), MatMul(10, 0, 5, 1, 1), LoadWeights(20, 8, 1), MatMul(10, 8, 5, 1, 1, accumulate=True)],
    "acc_to_local_then_matmul_reads_it": [
        LoadWeights(0, 8, 1), MatMul(40, 0, 3), DataMove(DataFlow.ACC_TO_LOCAL, 12, 0, 3), MatMul(12, 4, 3),
        MatMul(12, 4, 3, accumulate=True)],
    "dram_load_then_matmul_in_the_same_half": [
        DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 16, 9), LoadWeights(0, 8, 1), MatMul(2, 0, 7),
        DataMove(DataFlow.DRAM1_TO_LOCAL, 2, 0, 7), MatMul(2, 8, 7)],
    "save_while_the_array_works_on_the_other_half": [
        LoadWeights(0, 8, 1), MatMul(40, 0, 15), DataMove(DataFlow.ACC_TO_LOCAL, 40, 0, 15),
        DataMove(DataFlow.LOCAL_TO_DRAM0, 40, 100, 15), LoadWeights(8, 8, 1), MatMul(2, 16, 15),
        DataMove(DataFlow.DRAM0_TO_LOCAL, 20, 100, 7)],
    "simd_read_accumulate_two_slots_back_to_back": [
        SIMD(SimdOp.ADD, 0, 1, 0, write_address=5, read_address=5, read=True, write=True, accumulate=True),
        SIMD(SimdOp.MAX, 0, 0, 1, write_address=6, read_address=5, read=True, write=True, accumulate=True),
        SIMD(SimdOp.MULTIPLY, 0, 1, 2, write_address=5, read_address=6, read=True, write=True),
        SIMD(SimdOp.SUBTRACT, 2, 1, 0, write_address=7, read_address=5, read=False, write=True, accumulate=True)],
    "local_to_acc_accumulate_after_matmul": [
        LoadWeights(0, 8, 1), MatMul(10, 0, 7), DataMove(DataFlow.LOCAL_TO_ACC_ACCUMULATE, 20, 0, 7),
        DataMove(DataFlow.ACC_TO_LOCAL, 20, 0, 7), DataMove(DataFlow.LOCAL_TO_ACC, 20, 8, 7, 1, 2)],
    "strided_dram_moves_both_ways": [
        DataMove(DataFlow.DRAM1_TO_LOCAL, 3, 1, 9, 2, 8), DataMove(DataFlow.LOCAL_TO_DRAM1, 3, 50, 9, 2, 4),
        DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 7, 30, 1, 1), DataMove(DataFlow.DRAM0_TO_LOCAL, 33, 7, 30)],
}


@pytest.mark.parametrize("name", list(HAZARDS))
def test_hazard_sequences_agree(design, name):
    arch, cfg = design
    rng = np.random.default_rng(len(name))
    dt = arch.data_type
    prologue = [DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, LOCAL - 1), DataMove(DataFlow.LOCAL_TO_ACC, 0, 0, ACC - 1)]
    dram0 = random_values(rng, dt, (DRAM, arch.array_size), 0.3)
    dram1 = random_values(rng, dt, (DRAM, arch.array_size), 0.3)
    emulator, rtl, program = run_both(arch, cfg, prologue + HAZARDS[name], dram0, dram1)
    assert_same_state(emulator, rtl)
    assert simulate_rtl(program, arch, cfg).cycles == rtl.runs[0].cycles


def test_dram_offset_registers_move_the_dram_window():
    """Configure's DRAM offsets (in 64 KiB blocks) move where the ports read and write: a driver
    that puts its buffer 64 KiB up and says so gets the same results as one that does not."""
    arch = arch_for(2, "FP16BP8")
    cfg = RtlConfig(arch, name="diff2fp16bp8")
    layout = InstructionLayout.of(arch)
    rng = np.random.default_rng(5)
    values = random_values(rng, arch.data_type, (16, 2), 0.5)
    moves = [DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 15), DataMove(DataFlow.LOCAL_TO_DRAM1, 0, 3, 15)]
    plain = RtlMachine(arch, config=cfg)
    plain.write("dram0", 0, values)
    plain.run(encode_program(moves, layout))
    block = 65536 // arch.vector_bytes  # vectors in one 64 KiB block
    shifted = RtlMachine(arch, config=cfg)
    shifted.write("dram0", block, values)
    shifted.run(encode_program([Configure(0, 1), Configure(4, 1)] + moves, layout))
    np.testing.assert_array_equal(plain.read("dram1", 3, 16), shifted.read("dram1", block + 3, 16))
    np.testing.assert_array_equal(plain.read("dram1", 3, 16)[0], values)


def test_performance_samples_stream_out_every_interval():
    """Configure's sample interval turns the sampler on: a 64-bit word every interval clocks with
    the program counter in bits 0-31 and busy flags above (layout of systolix.perf.samples)."""
    arch = arch_for(2, "FP16BP8")
    cfg = RtlConfig(arch, name="diff2fp16bp8")
    interval = 7
    program = [Configure(11, interval)] + [LoadWeights(0, 2), MatMul(4, 0, 20), DataMove(DataFlow.ACC_TO_LOCAL, 30, 0, 20),
                                           DataMove(DataFlow.LOCAL_TO_DRAM0, 30, 40, 20)] * 3
    machine = RtlMachine(arch, config=cfg, samples=True)
    machine.write("dram0", 0, np.zeros((DRAM, 2), dtype=np.int64))
    machine.run(encode_program(program, InstructionLayout.of(arch)))
    (run,) = machine.runs
    words = np.frombuffer(run.samples, dtype="<u8")
    assert abs(len(words) - run.cycles / interval) <= 2
    pcs = (words & 0xFFFFFFFF).astype(np.int64)
    assert np.all(np.diff(pcs) >= 0) and pcs[-1] <= len(program) + run.padding_noops
    array_valid = (words >> 32) & 1
    dram0_valid = (words >> 40) & 1
    assert array_valid.any() and dram0_valid.any()  # both were busy at some sample
