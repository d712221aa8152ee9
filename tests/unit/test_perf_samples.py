"""Performance samples (the sample_interval register): when they are taken and what their bits say."""

from __future__ import annotations

import numpy as np

from systolix.isa import InstructionLayout, decode_program, encode_program
from systolix.isa.instructions import ConfigRegister, Configure, DataFlow, DataMove, MatMul, NoOp
from systolix.perf.samples import decode_samples, read_samples, sample_times, sample_words, write_samples
from systolix.perf.simulator import simulate
from tests.unit.test_perf_simulator import ARCH, BOARD


def _run(instructions):
    layout = InstructionLayout.of(ARCH)
    program = decode_program(encode_program(instructions, layout), layout)
    return program, simulate(program, BOARD)


def test_no_samples_without_a_sample_interval():
    program, tl = _run([MatMul(0, 0, 99)])
    assert sample_times(program, tl).size == 0
    assert sample_words(program, tl).size == 0


def test_samples_every_interval_from_the_configure_and_bits_follow_the_units():
    program, tl = _run([Configure(int(ConfigRegister.SAMPLE_INTERVAL), 10), MatMul(0, 0, 99),
                        DataMove(DataFlow.DRAM0_TO_LOCAL, 500, 0, 9)])
    times = sample_times(program, tl)
    assert times[0] == 0 and np.all(np.diff(times) == 10)
    assert times[-1] < tl.cycles <= times[-1] + 10
    d = decode_samples(sample_words(program, tl, times))
    assert np.all(np.diff(d["program_counter"]) >= 0)
    assert d["program_counter"][-1] == len(program)
    # The MatMul streams during [1, 101): the array bus is valid and ready inside, idle after.
    inside = (times >= 1) & (times < 101)
    assert d["array_valid"][inside].all() and d["array_ready"][inside].all()
    assert not d["array_valid"][times >= 101 + 2 * ARCH.array_size].any()
    # The DRAM0 load (40 clocks) is issued once the decoder lets go of the MatMul, after its
    # last input (Tensil's decoder holds a local-port instruction until its last vector).
    dram = (times >= 101) & (times < 141)
    assert d["dram0_valid"][dram].all()
    assert not d["dram0_valid"][times < 101].any()
    assert not d["dram1_valid"].any()


def test_a_zero_interval_stops_sampling_and_files_round_trip(tmp_path):
    program, tl = _run([Configure(int(ConfigRegister.SAMPLE_INTERVAL), 5), NoOp(), NoOp(),
                        Configure(int(ConfigRegister.SAMPLE_INTERVAL), 0), MatMul(0, 0, 99)])
    words = sample_words(program, tl)
    assert words.size == 1  # clocks 0..3 before sampling stops at the second Configure
    write_samples(tmp_path / "s.bin", words)
    assert (tmp_path / "s.bin").stat().st_size == 8
    assert np.array_equal(read_samples(tmp_path / "s.bin"), words)
