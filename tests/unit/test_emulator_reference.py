"""Random programs: the numba emulator against its specification, ``systolix.emulator.reference``.

Hypothesis draws short programs of every instruction kind (valid addresses, every flag, every
SIMD op and register) and memories of values from tiny to full range, so partial sums saturate in the
middle of rows (the sequential path) and products land exactly on half an lsb (the rounding). After the run every memory, the weights and the
SIMD registers must agree exactly.
"""

from __future__ import annotations

import pytest

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolix.arch import Architecture
from systolix.emulator import Emulator
from systolix.emulator.reference import ReferenceTCU
from systolix.isa import (
    SIMD,
    Configure,
    DataFlow,
    DataMove,
    InstructionLayout,
    LoadWeights,
    MatMul,
    NoOp,
    SimdOp,
    decode_program,
    encode_program,
)

pytestmark = pytest.mark.needs_emulator

N, LOCAL, ACC, DRAM = 4, 32, 16, 32
DEPTHS = {"local": LOCAL, "acc": ACC, "dram0": DRAM, "dram1": DRAM}


def arch_for(dtype: str) -> Architecture:
    return Architecture.from_tarch({
        "data_type": dtype, "array_size": N, "dram0_depth": DRAM, "dram1_depth": DRAM, "local_depth": LOCAL,
        "accumulator_depth": ACC, "simd_registers_depth": 2, "stride0_depth": 4, "stride1_depth": 4,
    })


@st.composite
def span(draw, depth: int):
    """(address, stride, count) that stays inside ``depth``."""
    stride = draw(st.sampled_from([1, 2, 4, 8]))
    count = draw(st.integers(1, max(1, min(6, (depth - 1) // stride + 1))))
    address = draw(st.integers(0, depth - 1 - (count - 1) * stride))
    return address, stride, count


@st.composite
def two_spans(draw, near_depth: int, far_depth: int):
    """Two spans of the same length (one instruction moves ``count`` vectors on both sides)."""
    count = draw(st.integers(1, 6))
    spans = []
    for depth in (near_depth, far_depth):
        strides = [s for s in (1, 2, 4, 8) if (count - 1) * s < depth]
        stride = draw(st.sampled_from(strides))
        spans.append((draw(st.integers(0, depth - 1 - (count - 1) * stride)), stride))
    return spans[0], spans[1], count


@st.composite
def instruction(draw):
    kind = draw(st.sampled_from(["matmul", "matmul", "loadweights", "datamove", "simd", "simd", "noop", "configure"]))
    if kind == "matmul":
        (la, ls), (aa, as_), count = draw(two_spans(LOCAL, ACC))
        return MatMul(la, aa, count - 1, ls, as_, accumulate=draw(st.booleans()), zeroes=draw(st.booleans()))
    if kind == "loadweights":
        la, ls, count = draw(span(LOCAL))
        return LoadWeights(la, count - 1, ls, zeroes=draw(st.booleans()))
    if kind == "datamove":
        flow = draw(st.sampled_from(list(DataFlow)))
        far = {"dram0": DRAM, "dram1": DRAM, "acc": ACC}[flow.far_memory]
        (la, ls), (fa, fs), count = draw(two_spans(LOCAL, far))
        return DataMove(flow, la, fa, count - 1, ls, fs)
    if kind == "simd":
        return SIMD(
            draw(st.sampled_from(list(SimdOp))), draw(st.integers(0, 2)), draw(st.integers(0, 2)), draw(st.integers(0, 2)),
            write_address=draw(st.integers(0, ACC - 1)), read_address=draw(st.integers(0, ACC - 1)),
            read=draw(st.booleans()), write=draw(st.booleans()), accumulate=draw(st.booleans()),
        )
    if kind == "configure":
        return Configure(draw(st.sampled_from([0, 4, 8, 11])), draw(st.integers(0, 1000)))
    return NoOp()


@given(
    dtype=st.sampled_from(["FP16BP8", "FP16BP8", "FP8BP4", "FP18BP10"]),
    program=st.lists(instruction(), min_size=1, max_size=24),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([0.02, 0.06, 0.1, 0.3, 1.0]),
    batch=st.integers(1, 3),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_programs_agree_with_the_reference(dtype, program, seed, scale, batch):
    arch = arch_for(dtype)
    dt = arch.data_type
    rng = np.random.default_rng(seed)
    layout = InstructionLayout.of(arch)
    data = encode_program(program, layout)

    emulator = Emulator(arch, batch=batch, threads=2)  # batches of 2-3 split across threads
    reference = ReferenceTCU(arch, batch, dram0_vectors=DRAM, dram1_vectors=DRAM)
    lo, hi = int(dt.min_int * scale), int(dt.max_int * scale)
    for name, depth in DEPTHS.items():
        values = rng.integers(lo, hi + 1, size=(batch, depth, N), dtype=np.int64)
        # Multiples of 8 times multiples of 16 make products with exactly half an lsb left over
        # (FP16BP8), where rounding half to even and half up differ.
        values *= rng.choice([1, 8, 16], size=(batch, depth, 1))
        values = np.clip(values, dt.min_int, dt.max_int)
        values[rng.random(values.shape) < 0.2] = 0
        emulator.write(name, 0, values)
        getattr(reference, name)[:] = values
    result = emulator.run(data)
    reference.run(decode_program(data, layout))

    for name, depth in DEPTHS.items():
        assert np.array_equal(emulator.read(name, 0, depth), getattr(reference, name)), name
    assert np.array_equal(emulator.weights, reference.weights)
    assert np.array_equal(emulator.registers, reference.regs)
    assert result.saturation_total == reference.saturations
