"""A batch program on the generated RTL: the digits CNN compiled for ``pynqz1`` with
``--batch 2`` runs two images in one co-simulation, bit for bit the emulator's outputs (and so
the batch-1 program's), in exactly the clocks the ``rtl`` timing model predicts."""

from __future__ import annotations

import numpy as np

import systolix
from systolix.models import build, example_inputs
from systolix.perf.rtl_timing import simulate_rtl


def test_a_batch_2_program_on_the_rtl_gives_the_emulators_outputs():
    onnx_model = build("digits_cnn")
    two = systolix.compile(onnx_model, "pynqz1", batch=2)
    one = systolix.compile(onnx_model, "pynqz1")
    name = next(iter(example_inputs(onnx_model, 0)))
    x = np.stack([example_inputs(onnx_model, seed)[name] for seed in (0, 1)])
    emulated = two.run_detailed({name: x}, batch=True)
    rtl = two.run_detailed({name: x}, batch=True, engine="rtl")
    single = one.run_detailed({name: x}, batch=True)
    for output in emulated.raw_outputs:
        assert np.array_equal(emulated.raw_outputs[output], rtl.raw_outputs[output]), output
        assert np.array_equal(single.raw_outputs[output], rtl.raw_outputs[output]), output
    (cycles,) = rtl.result.cycles  # both images in one run of the program
    assert cycles == simulate_rtl(two.program, two.arch).cycles
    assert cycles < 2 * simulate_rtl(one.program, one.arch).cycles
