"""The emulator's instructions, one at a time, against references written here with Python ints.

Every reference follows ``../shared/notes/tensil-formats.md`` directly: products rounded half to
even, adds exact then saturated, MatMul bias row first and rows in order.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolix.arch import Architecture
from systolix.emulator import Emulator, EmulatorError
from systolix.errors import DecodingError
from systolix.isa import (
    SIMD,
    ConfigRegister,
    Configure,
    DataFlow,
    DataMove,
    InstructionLayout,
    LoadLUT,
    LoadWeights,
    MatMul,
    NoOp,
    SimdOp,
    encode_program,
)
from systolix.numerics import DataType

pytestmark = pytest.mark.needs_emulator

FIXED = [DataType.FP8BP4, DataType.FP16BP8, DataType.FP18BP10, DataType.FP32BP16]


def small_arch(dtype: DataType = DataType.FP16BP8, n: int = 4, registers: int = 2, **depths) -> Architecture:
    d = {
        "data_type": dtype.name, "array_size": n, "dram0_depth": 64, "dram1_depth": 64, "local_depth": 64,
        "accumulator_depth": 32, "simd_registers_depth": registers, "stride0_depth": 8, "stride1_depth": 8,
    }
    d.update(depths)
    return Architecture.from_tarch(d)


def run_program(arch, instrs, batch=1, **memories):
    """Encode ``instrs``, preload ``memories`` ({name: (address, raw vectors)}), run."""
    emu = Emulator(arch, batch=batch)
    for name, (address, vectors) in memories.items():
        emu.write(name, address, np.asarray(vectors))
    result = emu.run(encode_program(instrs, InstructionLayout.of(arch)))
    return emu, result


# --- Python-int references -------------------------------------------------------
def rne(p: int, bp: int) -> int:
    q, r = divmod(p, 1 << bp)  # floor division: r >= 0
    half = 1 << (bp - 1)
    return q + 1 if (r > half or (r == half and q % 2 == 1)) else q


def sat(v: int, dt: DataType) -> int:
    return max(dt.min_int, min(dt.max_int, v))


def ref_matmul_row(x: list[int], w: list[list[int]], dt: DataType) -> tuple[list[int], int]:
    """``[1, x] . w`` (w has N+1 rows), sequentially saturating; also counts clamps."""
    n = len(w[0])
    out, clamps = [], 0
    for j in range(n):
        s = 0
        for k, xk in enumerate([dt.one] + list(x)):
            t = s + rne(xk * w[k][j], dt.binary_point)
            s = sat(t, dt)
            clamps += s != t
        out.append(s)
    return out, clamps


def rand_raw(rng, dt, shape, scale=1.0):
    lo, hi = int(dt.min_int * scale), int(dt.max_int * scale)
    return rng.integers(lo, hi + 1, size=shape, dtype=np.int64)


# --- MatMul and LoadWeights ------------------------------------------------------
@pytest.mark.parametrize("dt", FIXED)
def test_matmul_matches_sequential_reference(dt):
    rng = np.random.default_rng(1)
    arch = small_arch(dt)
    n = arch.array_size
    weights = rand_raw(rng, dt, (n + 1, n), 0.5)  # row 0 (the bias) at the lowest address
    x = rand_raw(rng, dt, (6, n), 0.5)
    x[2, 1] = 0  # zeros are skipped by the fast loop: still exact
    emu, res = run_program(
        arch,
        [LoadWeights(10, n), MatMul(0, 3, 5)],
        local=(0, np.vstack([x, np.zeros((4, n), np.int64), weights])),
    )
    got = emu.acc[0, 3:9]
    want, clamps = zip(*(ref_matmul_row(list(row), weights.tolist(), dt) for row in x.tolist()))
    assert got.tolist() == [list(r) for r in want]
    assert res.saturations["array"] == sum(clamps)
    assert res.counts == {"LoadWeights": 1, "MatMul": 1}


def test_partial_sum_saturating_mid_row_is_sequential():
    """bias + big - big: the first add saturates, so the result is not the plain sum."""
    dt = DataType.FP16BP8
    arch = small_arch(dt, n=2)
    one = dt.one
    weights = np.array([[dt.max_int - 10, 0], [100 * one // one, 0], [-100, 0]], dtype=np.int64)
    x = np.array([[one, one]], dtype=np.int64)  # products are 100 and -100 exactly
    emu, res = run_program(arch, [LoadWeights(1, 2), MatMul(0, 0, 0)], local=(0, np.vstack([x, weights])))
    assert emu.acc[0, 0, 0] == dt.max_int - 100  # plain sum would give max_int - 10
    assert res.saturations["array"] == 1
    # The same numbers without the overflow: order does not matter, nothing saturates.
    weights[0, 0] = 5
    emu, res = run_program(arch, [LoadWeights(1, 2), MatMul(0, 0, 0)], local=(0, np.vstack([x, weights])))
    assert emu.acc[0, 0, 0] == 5 and res.saturation_total == 0


def test_products_round_half_to_even():
    dt = DataType.FP16BP8
    arch = small_arch(dt, n=2)
    # 1/256 * k/2 for odd and even quotients: x*w = 128 -> 0.5 lsb -> 0; 384 -> 1.5 -> 2; -128 -> -0.5 -> 0;
    # -384 -> -1.5 -> -2; 129 -> 0.504 -> 1.
    cases = [(1, 128, 0), (3, 128, 2), (-1, 128, 0), (-3, 128, -2), (1, 129, 1), (5, 128, 2)]
    for x0, w, want in cases:
        weights = np.array([[0, 0], [w, 0], [0, 0]], dtype=np.int64)
        emu, _ = run_program(arch, [LoadWeights(1, 2), MatMul(0, 0, 0)], local=(0, np.vstack([[[x0, 0]], weights])))
        assert emu.acc[0, 0, 0] == want == rne(x0 * w, 8), (x0, w)


def test_zeroes_matmul_gives_the_bias_and_accumulate_adds_saturating():
    dt = DataType.FP16BP8
    arch = small_arch(dt, n=2)
    weights = np.array([[7, dt.max_int - 1], [1, 1], [1, 1]], dtype=np.int64)
    start = np.array([[1, 5], [2, 6]], dtype=np.int64)
    emu = Emulator(arch)
    emu.write("local", 0, weights)
    emu.write("acc", 4, start)
    prog = [LoadWeights(0, 2), MatMul(0, 4, 1, zeroes=True, accumulate=True), MatMul(0, 8, 0, zeroes=True)]
    res = emu.run(encode_program(prog, InstructionLayout.of(arch)))
    assert emu.acc[0, 4:6].tolist() == [[8, dt.max_int], [9, dt.max_int]]
    assert emu.acc[0, 8].tolist() == [7, dt.max_int - 1]
    assert res.saturations["accumulate"] == 2


def test_load_weights_reverse_order_and_partial_shift():
    """Lowest address ends in row 0; a short load shifts the old rows down."""
    arch = small_arch(n=2)
    rows = np.arange(1, 13, dtype=np.int64).reshape(6, 2) * 256  # six distinct vectors
    emu = Emulator(arch)
    emu.write("local", 0, rows)
    emu.run(encode_program([LoadWeights(0, 2)], InstructionLayout.of(arch)))
    assert emu.weights[0].tolist() == rows[0:3].tolist()
    emu.run(encode_program([LoadWeights(4, 0)], InstructionLayout.of(arch)))  # one vector
    assert emu.weights[0].tolist() == [rows[4].tolist(), rows[0].tolist(), rows[1].tolist()]
    emu.run(encode_program([LoadWeights(0, 0, zeroes=True)], InstructionLayout.of(arch)))
    assert emu.weights[0].tolist() == [[0, 0], rows[4].tolist(), rows[0].tolist()]
    # Strided: addresses 1, 3, 5 -> rows 0, 1, 2.
    emu.run(encode_program([LoadWeights(1, 2, local_stride=2)], InstructionLayout.of(arch)))
    assert emu.weights[0].tolist() == rows[[1, 3, 5]].tolist()
    # Longer than the array: only the lowest N+1 addresses stay.
    emu.run(encode_program([LoadWeights(0, 4)], InstructionLayout.of(arch)))
    assert emu.weights[0].tolist() == rows[0:3].tolist()


def test_strided_matmul_addresses():
    arch = small_arch(n=2)
    emu = Emulator(arch)
    emu.write("local", 0, np.array([[256, 0], [0, 0], [512, 0], [0, 0], [768, 0]]))
    emu.write("local", 10, np.array([[0, 0], [256, 0], [0, 256]]))  # identity weights, no bias
    emu.run(encode_program([LoadWeights(10, 2), MatMul(0, 0, 2, local_stride=2, acc_stride=4)], InstructionLayout.of(arch)))
    assert emu.acc[0, [0, 4, 8], 0].tolist() == [256, 512, 768]
    assert not emu.acc[0, [1, 2, 3, 5, 6, 7]].any()


# --- DataMove --------------------------------------------------------------------
def test_datamove_every_flow_kind():
    dt = DataType.FP16BP8
    arch = small_arch(dt, n=2)
    a = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int64)
    emu = Emulator(arch)
    emu.write("dram0", 0, a)
    emu.write("dram1", 5, a * 10)
    emu.write("acc", 20, np.array([[dt.max_int, 0]]))
    prog = [
        DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 2),  # local 0..2 = a
        DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 30, 2, stride=2),  # dram0 30, 32, 34
        DataMove(DataFlow.DRAM1_TO_LOCAL, 8, 5, 2, local_stride=4),  # local 8, 12, 16
        DataMove(DataFlow.LOCAL_TO_DRAM1, 8, 40, 0),  # dram1 40
        DataMove(DataFlow.LOCAL_TO_ACC, 0, 10, 2),  # acc 10..12 = a
        DataMove(DataFlow.LOCAL_TO_ACC_ACCUMULATE, 0, 10, 2),  # acc 10..12 = 2a
        DataMove(DataFlow.LOCAL_TO_ACC_ACCUMULATE, 2, 20, 0),  # saturates lane 0
        DataMove(DataFlow.ACC_TO_LOCAL, 20, 10, 2),  # local 20..22 = 2a
    ]
    res = emu.run(encode_program(prog, InstructionLayout.of(arch)))
    assert emu.dram0[0, [30, 32, 34]].tolist() == a.tolist()
    assert emu.local[0, [8, 12, 16]].tolist() == (a * 10).tolist()
    assert emu.dram1[0, 40].tolist() == [10, 20]
    assert emu.acc[0, 10:13].tolist() == (2 * a).tolist()
    assert emu.acc[0, 20].tolist() == [dt.max_int, 6]
    assert emu.local[0, 20:23].tolist() == (2 * a).tolist()
    assert res.saturations["accumulate"] == 1
    assert res.counts == {"DataMove": 8}


# --- SIMD ------------------------------------------------------------------------
def alu_reference(op: SimdOp, inp: int, left: int, right: int, dt: DataType) -> int:
    one = dt.one
    return {
        SimdOp.NOOP: inp,
        SimdOp.ZERO: 0,
        SimdOp.MOVE: left,
        SimdOp.NOT: one if left == 0 else 0,
        SimdOp.AND: one if (left != 0 and right != 0) else 0,
        SimdOp.OR: one if (left != 0 or right != 0) else 0,
        SimdOp.INCREMENT: sat(left + one, dt),
        SimdOp.DECREMENT: sat(left - one, dt),
        SimdOp.ADD: sat(left + right, dt),
        SimdOp.SUBTRACT: sat(left - right, dt),
        SimdOp.MULTIPLY: sat(rne(left * right, dt.binary_point), dt),
        SimdOp.ABS: sat(abs(left), dt),
        SimdOp.GREATER_THAN: one if left > right else 0,
        SimdOp.GREATER_THAN_EQUAL: one if left >= right else 0,
        SimdOp.MIN: min(left, right),
        SimdOp.MAX: max(left, right),
    }[op]


@pytest.mark.parametrize("op", list(SimdOp))
@pytest.mark.parametrize("dt", [DataType.FP8BP4, DataType.FP16BP8, DataType.FP32BP16])
def test_simd_ops_against_reference(op, dt):
    rng = np.random.default_rng(int(op) + 100 * dt.width)
    arch = small_arch(dt, n=8, registers=2)
    inp = rand_raw(rng, dt, (1, 8))
    reg = rand_raw(rng, dt, (1, 8))
    inp[0, :3] = [0, dt.max_int, dt.min_int]
    reg[0, :3] = [0, dt.max_int, dt.min_int]
    inp[0, 3] = reg[0, 3]  # equal operands for the comparisons
    emu = Emulator(arch)
    emu.write("acc", 1, inp)
    emu.write("acc", 2, reg)
    prog = [
        SIMD(SimdOp.MOVE, left=0, dest=2, read_address=2, read=True),  # reg2 = acc[2]
        SIMD(op, left=0, right=2, dest=0, read_address=1, write_address=5, read=True, write=True),
        SIMD(op, left=2, right=0, dest=1, read_address=1, write_address=6, read=True, write=True),
    ]
    res = emu.run(encode_program(prog, InstructionLayout.of(arch)))
    a, r = inp[0].tolist(), reg[0].tolist()
    want_lr = [alu_reference(op, i, i, g, dt) for i, g in zip(a, r)]
    want_rl = [alu_reference(op, i, g, i, dt) for i, g in zip(a, r)]
    assert emu.acc[0, 5].tolist() == want_lr
    assert emu.acc[0, 6].tolist() == want_rl
    # The result also lands in register 1 (not for NoOp, which never touches the registers).
    assert emu.registers[0, 0].tolist() == (want_rl if op != SimdOp.NOOP else [0] * 8)
    clamps = sum(1 for i, g in zip(a, r) for left, right in ((i, g), (g, i))
                 if op in (SimdOp.INCREMENT, SimdOp.DECREMENT, SimdOp.ADD, SimdOp.SUBTRACT, SimdOp.MULTIPLY, SimdOp.ABS)
                 and alu_reference(op, 0, left, right, dt) in (dt.max_int, dt.min_int)
                 and _unsaturated(op, left, right, dt) != alu_reference(op, 0, left, right, dt))
    assert res.saturations["alu"] == clamps


def _unsaturated(op, left, right, dt):
    return {
        SimdOp.INCREMENT: left + dt.one, SimdOp.DECREMENT: left - dt.one, SimdOp.ADD: left + right,
        SimdOp.SUBTRACT: left - right, SimdOp.MULTIPLY: rne(left * right, dt.binary_point), SimdOp.ABS: abs(left),
    }[op]


def test_simd_flags_read_write_accumulate():
    dt = DataType.FP16BP8
    arch = small_arch(dt, n=2, registers=1)
    emu = Emulator(arch)
    emu.write("acc", 0, np.array([[100, -5], [dt.max_int, 1]]))
    prog = [
        SIMD(SimdOp.ZERO, dest=1),  # reg1 = 0, no read, no write
        SIMD(SimdOp.MAX, left=0, right=1, read_address=0, write_address=3, read=True, write=True),  # ReLU
        SIMD(SimdOp.MOVE, left=0, read_address=0, write_address=1, read=True, write=True, accumulate=True),
        SIMD(SimdOp.MOVE, left=0, write_address=4, write=True),  # no read: the input is zero
        SIMD(SimdOp.ADD, left=0, right=1, read_address=0, write_address=5, read=True),  # no write
    ]
    res = emu.run(encode_program(prog, InstructionLayout.of(arch)))
    assert emu.acc[0, 3].tolist() == [100, 0]
    assert emu.acc[0, 1].tolist() == [dt.max_int, -4]  # max_int + 100 saturates
    assert emu.acc[0, 4].tolist() == [0, 0]
    assert not emu.read("acc", 5, 1).any()
    assert res.saturations["simd_accumulate"] == 1
    assert res.counts == {"SIMD": 5}


def test_float32_architecture():
    arch = small_arch(DataType.FLOAT32, n=2, registers=1)
    emu = Emulator(arch)
    emu.write("local", 0, np.array([[1.5, -2.0], [0.5, 0.0], [0.25, 1.0], [2.0, 3.0]], dtype=np.float32))
    prog = [LoadWeights(1, 2), MatMul(0, 0, 0),
            SIMD(SimdOp.MULTIPLY, left=0, right=0, read_address=0, write_address=1, read=True, write=True)]
    emu.run(encode_program(prog, InstructionLayout.of(arch)))
    # [1, 1.5, -2] . [[0.5, 0], [0.25, 1], [2, 3]] = [0.5 + 0.375 - 4, 0 + 1.5 - 6]
    assert emu.acc.dtype == np.float32
    assert emu.acc[0, 0].tolist() == [-3.125, -4.5]
    assert emu.acc[0, 1].tolist() == [(-3.125) ** 2, 20.25]


# --- batches -----------------------------------------------------------------------
@given(seed=st.integers(0, 2**32 - 1), batch=st.integers(1, 4))
@settings(max_examples=15, deadline=None)
def test_batch_is_independent_runs(seed, batch):
    rng = np.random.default_rng(seed)
    dt = DataType.FP16BP8
    arch = small_arch(dt, n=4, registers=1)
    data = rand_raw(rng, dt, (batch, 12, 4), 0.3)
    prog = encode_program([
        DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 11),
        LoadWeights(6, 4),
        MatMul(0, 0, 5),
        SIMD(SimdOp.ZERO, dest=1),
        SIMD(SimdOp.MAX, left=0, right=1, read_address=2, write_address=2, read=True, write=True),
        DataMove(DataFlow.ACC_TO_LOCAL, 20, 0, 5),
        DataMove(DataFlow.LOCAL_TO_DRAM0, 20, 40, 5),
    ], InstructionLayout.of(arch))
    together = Emulator(arch, batch=batch)
    together.write("dram0", 0, data)
    res = together.run(prog)
    for b in range(batch):
        alone = Emulator(arch)
        alone.write("dram0", 0, data[b])
        single = alone.run(prog)
        assert np.array_equal(together.dram0[b, 40:46], alone.dram0[0, 40:46])
        assert np.array_equal(res.saturations_per_item[b], single.saturations_per_item[0])


# --- Configure, program counter, tracepoint --------------------------------------------
def test_configure_registers_and_program_counter():
    arch = small_arch()
    prog = [
        Configure(int(ConfigRegister.DRAM0_OFFSET), 0x12),
        Configure(int(ConfigRegister.DRAM1_OFFSET), 0x34),
        Configure(int(ConfigRegister.TIMEOUT), 500),
        Configure(int(ConfigRegister.SAMPLE_INTERVAL), 7),
        Configure(int(ConfigRegister.DRAM0_CACHE), 3),
        Configure(int(ConfigRegister.PROGRAM_COUNTER), 100),
        NoOp(),
        NoOp(),
    ]
    emu, res = run_program(arch, prog)
    regs = res.registers
    assert regs["dram0_offset"] == 0x12 and regs["dram1_offset"] == 0x34 and regs["dram0_cache"] == 3
    assert regs["timeout"] == 500 and regs["sample_interval"] == 7 and regs["tracepoint"] == 0xFFFFFFFF
    assert regs["program_counter"] == 102  # set to 100, then two instructions
    assert res.counts == {"Configure": 6, "NoOp": 2}


def test_tracepoint_fires_before_the_instruction(tmp_path):
    arch = small_arch(n=2)
    prog = encode_program([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 0), DataMove(DataFlow.LOCAL_TO_ACC, 0, 3, 0),
                           DataMove(DataFlow.LOCAL_TO_ACC, 0, 4, 0)], InstructionLayout.of(arch))
    seen = []
    emu = Emulator(arch)
    emu.write("dram0", 0, np.array([[5, 6]]))
    res = emu.run(prog, tracepoint=2, on_trace=lambda e, i: seen.append((i, e.acc[0, 3].tolist(), e.acc[0, 4].tolist())),
                  trace_file=tmp_path / "t.npz", trace_ranges=[("acc", 3, 2)])
    assert seen == [(2, [5, 6], [0, 0])]
    assert res.tracepoint_hits == [2]
    dump = np.load(tmp_path / "t.npz")
    assert dump["acc@3"].tolist() == [[[5, 6], [0, 0]]]
    assert int(dump["instruction_index"]) == 2 and int(dump["program_counter"]) == 2
    # A program that moves its own program counter back hits the tracepoint again.
    prog2 = encode_program([NoOp(), Configure(int(ConfigRegister.PROGRAM_COUNTER), 0), NoOp(), NoOp()], InstructionLayout.of(arch))
    res2 = Emulator(arch).run(prog2, tracepoint=1, trace_file=tmp_path / "u.npz")
    assert res2.tracepoint_hits == [1, 3]
    assert (tmp_path / "u.npz").exists() and (tmp_path / "u.2.npz").exists()
    with np.load(tmp_path / "u.2.npz") as whole:  # without ranges: every memory, weights, registers
        assert {"local", "acc", "dram0", "dram1", "weights", "simd_registers", "config"} <= set(whole.files)
        assert int(whole["instruction_index"]) == 3 and int(whole["program_counter"]) == 1
    # Tracepoint 0 is the state before anything runs.
    assert Emulator(arch).run(prog2, tracepoint=0, on_trace=lambda e, i: None).tracepoint_hits == [0, 2]


# --- errors --------------------------------------------------------------------------
def test_address_past_local_depth_names_instruction_and_address():
    arch = small_arch(n=2, local_depth=16)
    emu = Emulator(arch)
    emu.write("dram0", 0, np.array([[1, 2]]))
    prog = [DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 0), NoOp(), MatMul(12, 0, 3, local_stride=2)]
    with pytest.raises(EmulatorError) as e:
        emu.run(encode_program(prog, InstructionLayout.of(arch)), source="p.tprog")
    msg = str(e.value)
    assert "p.tprog: instruction #2" in msg and "MatMul" in msg
    assert "local address 16" in msg and "local_depth 16" in msg
    assert emu.local[0, 0].tolist() == [1, 2]  # the instructions before it ran


@pytest.mark.parametrize("instr, fragment", [
    (DataMove(DataFlow.LOCAL_TO_ACC, 0, 30, 3), "acc address 32"),
    (DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 63, 1), "dram0 address 64"),
    (DataMove(DataFlow.LOCAL_TO_DRAM1, 60, 0, 7), "local address 64"),
    (SIMD(SimdOp.MOVE, read_address=40, read=True), "reads acc address 40"),
    (SIMD(SimdOp.MOVE, write_address=33, write=True), "writes acc address 33"),
    (LoadWeights(62, 3), "local address 64"),
])
def test_every_memory_is_bounds_checked(instr, fragment):
    arch = small_arch(n=2, registers=1)
    layout = InstructionLayout.of(arch)
    with pytest.raises(EmulatorError, match="instruction #1") as e:
        Emulator(arch).run(encode_program([NoOp(), instr], layout))
    assert fragment in str(e.value)


def test_missing_simd_register():
    arch = small_arch(n=2, registers=2)  # 2 bits per operand: register 3 does not exist
    with pytest.raises(EmulatorError, match="instruction #0.*SIMD register"):
        Emulator(arch).run(encode_program([SIMD(SimdOp.MOVE, left=3, dest=1)], InstructionLayout.of(arch)))


def test_loadlut_is_refused():
    arch = small_arch(n=2)
    with pytest.raises(EmulatorError, match="instruction #1 .*LoadLUT.*not implemented"):
        Emulator(arch).run(encode_program([NoOp(), LoadLUT(0, 0)], InstructionLayout.of(arch)))


def test_reserved_datamove_kind_fails_at_decode():
    arch = small_arch(n=2)
    layout = InstructionLayout.of(arch)
    data = bytearray(encode_program([NoOp(), DataMove(DataFlow.LOCAL_TO_ACC, 0, 0, 0)], layout))
    data[2 * layout.instruction_bytes - 1] = 0x2E  # DataMove with kind 14
    with pytest.raises(DecodingError, match="instruction #1 .*reserved DataMove kind 14"):
        Emulator(arch).run(bytes(data))


def test_memories_grow_only_to_what_is_used():
    arch = small_arch(n=2, dram0_depth=2**32, dram1_depth=2**32)
    emu = Emulator(arch, batch=3)
    emu.run(encode_program([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 1000, 0)], InstructionLayout.of(arch)))
    assert 1001 <= emu.dram0.shape[1] <= 2048 and emu.dram1.shape[1] == 0
    with pytest.raises(EmulatorError, match="past its depth"):
        emu.write("local", 63, np.zeros((2, 2)))


def test_threads_split_the_batch_without_changing_anything():
    rng = np.random.default_rng(7)
    dt = DataType.FP16BP8
    arch = small_arch(dt, n=4, registers=1)
    data = rand_raw(rng, dt, (5, 12, 4), 0.5)
    prog = encode_program([
        DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 11), LoadWeights(6, 4), MatMul(0, 0, 5, accumulate=True),
        Configure(int(ConfigRegister.PROGRAM_COUNTER), 0), NoOp(),
        SIMD(SimdOp.MULTIPLY, left=0, right=0, read_address=1, write_address=9, read=True, write=True),
    ], InstructionLayout.of(arch))
    start_acc = rand_raw(rng, dt, (5, 6, 4))
    runs = []
    for threads in (1, 2, 3, 8):
        emu = Emulator(arch, batch=5, threads=threads)
        emu.write("dram0", 0, data)
        emu.write("acc", 0, start_acc)
        seen = []
        res = emu.run(prog, tracepoint=1, on_trace=lambda e, i: seen.append((i, e.acc.copy())))
        runs.append((emu.acc.copy(), res, seen))
    first_acc, first_res, first_seen = runs[0]
    assert first_res.saturation_total > 0 and [i for i, _ in first_seen] == [1, 5]
    for acc, res, seen in runs[1:]:
        assert np.array_equal(acc, first_acc)
        assert np.array_equal(res.saturations_per_item, first_res.saturations_per_item)
        assert res.counts == first_res.counts and res.registers == first_res.registers
        assert [i for i, _ in seen] == [1, 5] and all(np.array_equal(a, b) for (_, a), (_, b) in zip(seen, first_seen))
