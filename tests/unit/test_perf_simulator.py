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


def test_accumulator_move_waits_for_the_matmul_results():
    # The decoder lets go of the MatMul after its last input (clock 4); the move from the
    # accumulators then waits for the results, which arrive FILL clocks after their inputs.
    tl = run([MatMul(0, 0, 3), DataMove(DataFlow.ACC_TO_LOCAL, 100, 0, 3)])
    assert tl.issue[1] == 4
    assert tl.start[1] == tl.done[0] == 4 + FILL


def test_decoder_holds_a_dram_load_until_its_last_vector_is_written():
    # Tensil's Decoder.scala enqueues a local-port request through a SizeAndStrideHandler that
    # takes it only with its last vector, and local memory takes a write only with its data:
    # the next instruction is issued once the load's last vector arrived, dependent or not.
    board = BOARD.with_parameters(dram_latency_ns=100.0)  # 10 clocks
    dependent = run([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3), MatMul(0, 0, 3)], board)
    independent = run([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3), MatMul(512, 0, 3)], board)
    assert dependent.start[1] == independent.start[1] == 16 + 10


def test_decoder_holds_a_save_until_its_last_vector_left_local_memory():
    # The save reads local vector k during [4k, 4k + 4); the move from the accumulators into
    # the same vectors is issued after its last read, so it has nothing left to overtake.
    tl = run([DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 100, 3), DataMove(DataFlow.ACC_TO_LOCAL, 0, 0, 3)])
    assert tl.issue[1] == tl.start[1] == pytest.approx(16)
    tl = run([MatMul(0, 0, 99), DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3)])
    assert tl.issue[1] == tl.start[1] == 100


def test_write_after_write_keeps_the_order():
    # A move from the accumulators into the vectors a DRAM load writes starts after the load.
    tl = run([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3), DataMove(DataFlow.ACC_TO_LOCAL, 0, 0, 3)])
    assert tl.start[1] == pytest.approx(16)


def test_port_drains_writes_before_reading():
    tl = run([DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 0, 3), DataMove(DataFlow.DRAM0_TO_LOCAL, 100, 50, 3)],
             BOARD.with_parameters(dram_latency_ns=100.0))
    assert tl.start[1] == pytest.approx(tl.done[0])
    assert tl.done[0] == pytest.approx(16 + 10)


def test_noops_cost_one_issue_clock_each():
    tl = run([NoOp()] * 7)
    assert tl.cycles == 7
    assert tl.busy[UNITS.index("decoder")] == 7


def test_local_port_instructions_run_one_after_another():
    # A weight load on DRAM1 and a MatMul on other data: Tensil's decoder holds the load until
    # its last vector is in local memory, so they do not overlap.
    tl = run([DataMove(DataFlow.DRAM1_TO_LOCAL, 512, 0, 9), MatMul(0, 0, 29)])
    assert tl.cycles == pytest.approx(40 + 30 + FILL)
    # A SIMD on other accumulators waits in the decoder until the MatMul's last input.
    tl = run([MatMul(0, 0, 9), SIMD(SimdOp.ZERO, write_address=100, write=True)])
    assert tl.issue[1] == 10


def test_queued_accumulator_work_overlaps_a_later_dram_load():
    # Eight read-write SIMDs (16 accumulator clocks) queue without a local port, so the decoder
    # issues the load at clock 8 and the two overlap: 8 + 40 clocks, not 16 + 40.
    simd = SIMD(SimdOp.MOVE, write_address=1, read_address=2, read=True, write=True)
    tl = run([simd] * 8 + [DataMove(DataFlow.DRAM1_TO_LOCAL, 512, 0, 9)])
    assert tl.issue[8] == 8
    assert tl.cycles == pytest.approx(8 + 40)


def test_unknown_addresses_beyond_depth_do_not_crash():
    tl = run([SIMD(SimdOp.ZERO, write_address=255, write=True), MatMul(1000, 250, 5)])
    assert np.isfinite(tl.cycles)
