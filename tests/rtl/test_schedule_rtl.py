"""The schedule pass (``systolix.codegen.schedule``) on the generated RTL: a conv whose output
groups' post-ops and saves are interleaved with the next group's weight loads computes what the
emulator does, in the clocks the rtl timing model predicts, fewer than the unscheduled program."""

from __future__ import annotations

import numpy as np

import systolix
from systolix.perf.rtl_timing import simulate_rtl
from tests.rtl.test_programs import conv_relu, run_rtl


def test_a_scheduled_conv_on_the_rtl_gives_the_emulators_outputs_in_fewer_clocks():
    cin, cout, h, w = 16, 32, 16, 16  # 4 output groups of 8 lanes, a 3x3 kernel: 18 weight blocks a group
    onnx_model, rng = conv_relu(cin, cout, h, w)
    model = systolix.compile(onnx_model, "pynqz1", host=False)
    plain = systolix.compile(onnx_model, "pynqz1", host=False, schedule=False)
    feeds = {"x": rng.normal(0, 1, (1, cin, h, w)).astype(np.float32)}
    emulated, rtl = run_rtl(model, feeds)
    assert np.array_equal(emulated.raw_outputs["y"], rtl.raw_outputs["y"])
    assert np.array_equal(emulated.raw_outputs["y"], plain.run_detailed(feeds).raw_outputs["y"])
    (cycles,) = rtl.result.cycles
    assert cycles == simulate_rtl(model.program, model.arch).cycles
    assert cycles < 0.98 * simulate_rtl(plain.program, plain.arch).cycles
