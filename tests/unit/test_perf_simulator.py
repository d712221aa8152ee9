"""The timing simulator on small hand-written programs whose cycle counts follow from the rules."""

from __future__ import annotations

import numpy as np
import pytest

from systolix.arch import Architecture, Board
from systolix.isa import InstructionLayout, decode_program, encode_program
from systolix.isa.instructions import SIMD, DataFlow, DataMove, LoadWeights, MatMul, NoOp, SimdOp
from systolix.numerics import DataType
from systolix.perf.simulator import UNITS, simulate

N = 4
ARCH = Architecture(
    data_type=DataType.FP16BP8, array_size=N, dram0_depth=4096, dram1_depth=4096, local_depth=1024,
    accumulator_depth=256, simd_registers_depth=1, stride0_depth=8, stride1_depth=8,
)
# 8-byte vectors over a 16-bit bus at the board clock: 4 clocks a vector; no latency, no
# request cost, no host: every number below is countable by hand.
BOARD = Board(
    name="test", architecture=ARCH, clock_mhz=100.0, dram_bus_bits=16, dram_peak_gbps=0.2,
    dram_efficiency=1.0, dram_latency_ns=0.0, dram_request_ns=0.0, host_ns_per_scalar=0.0,
)
FILL = 2 * N


def run(instructions, board=BOARD):
    layout = InstructionLayout.of(ARCH)
    program = decode_program(encode_program(instructions, layout), layout)
    return simulate(program, board)


def test_single_matmul_streams_then_fills():
    tl = run([MatMul(0, 0, 9)])
    assert (tl.start[0], tl.end[0], tl.done[0]) == (0, 10, 10 + FILL)
    assert tl.cycles == 10 + FILL


def test_back_to_back_matmuls_stream_without_refill():
    tl = run([MatMul(0, 0, 9), MatMul(10, 10, 9)])
    assert tl.start[1] == 10
    assert tl.cycles == 20 + FILL


def test_loadweights_waits_for_the_array_to_drain():
    tl = run([MatMul(0, 0, 9), LoadWeights(100, N)])
    # SystolicArray.scala: loading waits arrayPropagationDelay = 2N - 1 after the last input.
    assert tl.start[1] == 10 + 2 * N - 1
    assert tl.end[1] == tl.start[1] + N + 1


def test_matmul_follows_loadweights_immediately():
    tl = run([LoadWeights(100, N), MatMul(0, 0, 9)])
    assert tl.start[1] == N + 1


def test_simd_waits_for_matmul_results_and_read_write_takes_two_clocks():
    tl = run([MatMul(0, 5, 0), SIMD(SimdOp.MAX, write_address=5, read_address=5, read=True, write=True)])
    assert tl.start[1] == 1 + FILL
    assert tl.end[1] - tl.start[1] == 2


def test_simd_busy_counts_one_or_two_clocks():
    tl = run([SIMD(SimdOp.ZERO, write_address=1, write=True)] * 3
             + [SIMD(SimdOp.MOVE, write_address=2, read_address=3, read=True, write=True)] * 2)
    assert tl.busy[UNITS.index("acc")] == 3 * 1 + 2 * 2


def test_dram_move_cost_is_bytes_over_bus():
    tl = run([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 9)])
    assert tl.end[0] - tl.start[0] == pytest.approx(10 * 4)


def test_request_cost_is_per_burst_or_per_vector_when_strided():
    board = BOARD.with_parameters(dram_request_ns=30.0)  # 3 clocks at 100 MHz
    contiguous = run([DataMove(DataFlow.DRAM1_TO_LOCAL, 0, 0, 9)], board)
    strided = run([DataMove(DataFlow.DRAM1_TO_LOCAL, 0, 0, 9, stride=2)], board)
    # 16-bit bus: bursts of at most 256 beats x 2 bytes = 512 bytes = 64 vectors: one request.
    assert contiguous.end[0] - contiguous.start[0] == pytest.approx(40 + 3)
    assert strided.end[0] - strided.start[0] == pytest.approx(40 + 10 * 3)


def test_read_after_write_chains_vector_by_vector():
    # The load writes local vector k at 4(k+1); a MatMul reading vector k at s + k must not
    # get ahead: s >= max_k 4(k+1) - k = 3n + 1 for n = 4.
    dependent = run([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3), MatMul(0, 0, 3)])
    independent = run([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3), MatMul(512, 0, 3)])
    assert dependent.start[1] == 13
    assert independent.start[1] == 1  # issued the clock after the load, nothing to wait for


def test_write_after_read_does_not_overtake_the_reader():
    # The save reads local vector k during [4k, 4k + 4). A move from the accumulators writes
    # vector k during [s + 1 + k, s + 2 + k) (one clock through the output register), which
    # must begin after that read ended: s >= max_k 3k + 3 = 12.
    tl = run([DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 100, 3), DataMove(DataFlow.ACC_TO_LOCAL, 0, 0, 3)])
    assert tl.start[1] == pytest.approx(12)
    # A faster reader is no obstacle: the MatMul has read vector k by k + 1, the load writes
    # it at s + 4(k + 1), so the load starts as soon as it is issued.
    tl = run([MatMul(0, 0, 99), DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3)])
    assert tl.start[1] == 1


def test_write_after_write_keeps_the_order():
    # Two loads into the same local vectors share port B anyway; through different paths,
    # a move from the accumulators may not finish writing before the DRAM load has.
    tl = run([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3), DataMove(DataFlow.ACC_TO_LOCAL, 0, 0, 3)])
    # The load has written vector k by 4(k + 1); the move writes it from s + 1 + k on:
    # s >= max_k 3k + 3 = 12.
    assert tl.start[1] == pytest.approx(12)


def test_port_drains_writes_before_reading():
    tl = run([DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 0, 3), DataMove(DataFlow.DRAM0_TO_LOCAL, 100, 50, 3)],
             BOARD.with_parameters(dram_latency_ns=100.0))
    assert tl.start[1] == pytest.approx(tl.done[0])
    assert tl.done[0] == pytest.approx(16 + 10)


def test_noops_cost_one_issue_clock_each():
    tl = run([NoOp()] * 7)
    assert tl.cycles == 7
    assert tl.busy[UNITS.index("decoder")] == 7


def test_independent_units_overlap():
    # A weight load on DRAM1 and a MatMul on other data overlap: the total is the longer one.
    tl = run([DataMove(DataFlow.DRAM1_TO_LOCAL, 512, 0, 9), MatMul(0, 0, 29)])
    assert tl.cycles == pytest.approx(max(40, 1 + 30 + FILL))


def test_unknown_addresses_beyond_depth_do_not_crash():
    tl = run([SIMD(SimdOp.ZERO, write_address=255, write=True), MatMul(1000, 250, 5)])
    assert np.isfinite(tl.cycles)
