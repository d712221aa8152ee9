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


def test_a_conv_that_shares_no_tile_runs_its_one_image_plan_image_after_image_on_the_rtl():
    """A conv whose one-image tile fills the accumulators shares no weight tile between images:
    the batch-2 program runs the batch-1 plan image after image (here single-buffered,
    ``pipeline=False``, with the schedule pass's second accumulator buffer: 3 of the 4 output
    groups a tile; before 6e6aeff the first fit, 4 groups and one buffer), its weights and SIMD
    constants loaded once. On the Verilated RTL: the emulator's outputs and the batch-1
    program's, in exactly the clocks the ``rtl`` model predicts, and no more than two batch-1 runs."""
    from onnx import helper

    from tests.onnx_builders import ir_of, make_model

    rng = np.random.default_rng(2)
    w = rng.normal(0, 0.15, (32, 8, 3, 3)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                        helper.make_node("Relu", ["c"], ["y"])], [("x", [1, 8, 16, 16])], [("y", None)], {"w": w})
    (plan,) = ir_of(model, "pynqz1", until="tile layers", batch=2, pipeline=False).layers
    assert plan.detail.images == 1 and not plan.detail.contexts and plan.detail.acc_tiles == 2
    one = systolix.compile(model, "pynqz1", pipeline=False)
    two = systolix.compile(model, "pynqz1", batch=2, pipeline=False)
    x = rng.uniform(-1, 1, (2, 1, 8, 16, 16)).astype(np.float32)
    rtl = two.run_detailed({"x": x}, batch=True, engine="rtl")
    assert np.array_equal(rtl.raw_outputs["y"], two.run_detailed({"x": x}, batch=True).raw_outputs["y"])
    assert np.array_equal(rtl.raw_outputs["y"], one.run_detailed({"x": x}, batch=True).raw_outputs["y"])
    (cycles,) = rtl.result.cycles
    assert cycles == simulate_rtl(two.program, two.arch).cycles
    assert cycles <= 2 * simulate_rtl(one.program, one.arch).cycles


def test_four_images_sharing_tiles_of_fewer_groups_on_the_rtl_give_the_emulators_outputs():
    """``systolix.planning.tiling.conv``: where four images' tiles of all output groups do not fit,
    the batch program shares each weight tile among all four in tiles of fewer groups (here 4 of
    the 8 a batch-1 tile holds). On the Verilated RTL: the emulator's raw outputs and the batch-1
    program's, in the clocks the ``rtl`` model predicts, and fewer than four batch-1 runs."""
    from tests.e2e.test_batch import late_stage_conv
    from tests.onnx_builders import ir_of

    model = late_stage_conv(cout=64, size=8)
    plans = [p for p in ir_of(model, "pynqz1", until="tile layers", batch=4).layers if p.layer.startswith("conv")]
    assert plans and all(p.detail.images == 4 and p.partitions == [(0, 4), (4, 8)] for p in plans)
    one, four = systolix.compile(model, "pynqz1"), systolix.compile(model, "pynqz1", batch=4)
    x = np.random.default_rng(8).uniform(-1, 1, (4, 1, 16, 8, 8)).astype(np.float32)
    rtl = four.run_detailed({"x": x}, batch=True, engine="rtl")
    assert np.array_equal(rtl.raw_outputs["y"], four.run_detailed({"x": x}, batch=True).raw_outputs["y"])
    assert np.array_equal(rtl.raw_outputs["y"], one.run_detailed({"x": x}, batch=True).raw_outputs["y"])
    (cycles,) = rtl.result.cycles
    assert cycles == simulate_rtl(four.program, four.arch).cycles
    assert cycles < 4 * simulate_rtl(one.program, one.arch).cycles


def test_images_sharing_a_tile_with_merged_parts_on_the_rtl_give_the_batch_1_outputs():
    """``merge_reduction_parts`` in a batch program: a 3x3 conv over 256 channels at 6x6, summed in
    parts merged into the layer, its two images sharing each weight tile, each image's parts'
    products in a second tile of its own. On the Verilated RTL: the emulator's raw outputs and the
    batch-1 program's, in the clocks the ``rtl`` model predicts, fewer than with the parts as
    layers."""
    from tests.onnx_builders import ir_of
    from tests.unit.test_merge_reduction_parts import _long_map

    model = _long_map()
    (plan,) = [p for p in ir_of(model, "pynqz1", until="tile layers", batch=2, merge_batch_parts=True).layers
               if p.layer.startswith("Conv_2")]
    assert plan.detail.images == 2
    one, two = systolix.compile(model, "pynqz1"), systolix.compile(model, "pynqz1", batch=2)
    apart = systolix.compile(model, "pynqz1", batch=2, merge_parts=False)
    assert two.summary.batch_parts.startswith("parts merged")
    x = np.random.default_rng(9).normal(size=(2, 1, 16, 6, 6)).astype(np.float32)
    rtl = two.run_detailed({"x": x}, batch=True, engine="rtl")
    assert np.array_equal(rtl.raw_outputs["y"], two.run_detailed({"x": x}, batch=True).raw_outputs["y"])
    assert np.array_equal(rtl.raw_outputs["y"], one.run_detailed({"x": x}, batch=True).raw_outputs["y"])
    (cycles,) = rtl.result.cycles
    assert cycles == simulate_rtl(two.program, two.arch).cycles
    assert cycles < simulate_rtl(apart.program, apart.arch).cycles
