"""Real programs on the generated RTL, through the same driver as the emulator.

Tensil's compiled speech model (8x8) and our compiles of the digits CNN and ResNet-20 v2 for
``pynqz1`` must give outputs identical to the emulator's, bit for bit, through
``engine="rtl"`` and ``systolix run --engine rtl``; the ``rtl`` board of the timing model must
predict the RTL's clock count exactly. The full-size 32x32 runs of Tensil's five ResNet-20
programs against the two real boards' printed outputs are slow (a minute or two per image).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import systolix
from systolix.artifacts import read_vectors_csv
from systolix.perf.rtl_timing import simulate_rtl
from tests.cli_helpers import run_cli
from tests.conftest import RESNET20, SPEECH
from tests.e2e.test_tensil_conformance import EXPECTED, ONE, PROGRAMS, check_against_boards, manifest


def run_rtl(model, inputs, **options):
    """The emulator's and the RTL's detailed runs of the same inputs."""
    runner = model.run_vectors if model.inputs[0].vectors_only else model.run_detailed
    emulated = runner(inputs, **options)
    cosimulated = runner(inputs, engine="rtl", **options)
    return emulated, cosimulated


def conv_relu(cin: int, cout: int, h: int, w: int):
    """A 3x3 conv (pads 1) and ReLU with random weights, and the generator that made them (seed 3)."""
    from onnx import helper

    from tests.onnx_builders import make_model

    rng = np.random.default_rng(3)
    inits = {"w": rng.normal(0, 0.2, (cout, cin, 3, 3)).astype(np.float32), "b": rng.normal(0, 0.1, cout).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return make_model(nodes, [("x", [1, cin, h, w])], [("y", None)], inits), rng


@pytest.mark.slow(seconds=26)
def test_tensils_speech_program_runs_bit_exact_and_clock_exact():
    model = systolix.load(SPEECH / "speech_commands_onnx_speech_robot.tmodel")
    vectors = read_vectors_csv(SPEECH / "speech_commands_input_1x8.csv", 8)
    emulated, rtl = run_rtl(model, {"input_1": vectors})
    for name in emulated.raw_outputs:
        assert np.array_equal(emulated.raw_outputs[name], rtl.raw_outputs[name]), name
    (cycles,) = rtl.result.cycles
    assert cycles == simulate_rtl(model.program, model.arch).cycles
    # The estimate command gives the same count on the rtl board.
    proc = run_cli("estimate", SPEECH / "speech_commands_onnx_speech_robot.tmodel", "--board", "rtl", "--json",
                   check=True)
    assert json.loads(proc.stdout)["cycles"] == cycles


@pytest.fixture(scope="module")
def pynqz1_models(tmp_path_factory):
    from systolix.models import build, example_inputs

    compiled = {}
    for name in ("digits_cnn", "resnet20v2"):
        folder = tmp_path_factory.mktemp(name)
        onnx_model = build(name)
        path = systolix.compile(onnx_model, "pynqz1").save(folder)
        inputs = {k: np.stack([example_inputs(onnx_model, seed)[k] for seed in (0, 1)]) for k in
                  example_inputs(onnx_model, 0)}
        compiled[name] = (path, inputs)
    return compiled


@pytest.mark.parametrize("name", ["digits_cnn", "resnet20v2"])
def test_our_compiles_for_pynqz1_give_the_emulators_outputs(pynqz1_models, name):
    path, inputs = pynqz1_models[name]
    model = systolix.load(path)
    emulated, rtl = run_rtl(model, inputs, batch=True, threads=2)
    for output in emulated.raw_outputs:
        assert np.array_equal(emulated.raw_outputs[output], rtl.raw_outputs[output]), output
        assert np.array_equal(emulated.outputs[output], rtl.outputs[output])
    predicted = simulate_rtl(model.program, model.arch).cycles
    assert rtl.result.cycles == [predicted, predicted]  # the same program takes the same time on every input


def test_cli_run_with_the_rtl_engine_prints_outputs_cycles_and_seconds(pynqz1_models, tmp_path):
    path, inputs = pynqz1_models["digits_cnn"]
    x = tmp_path / "x.npy"
    np.save(x, next(iter(inputs.values())))
    emulated = json.loads(run_cli("run", path, "--input", x, "--batch", "--json", check=True).stdout)
    rtl = json.loads(run_cli("run", path, "--input", x, "--batch", "--json", "--engine", "rtl", check=True).stdout)
    assert emulated["cycles"] is None and emulated["engine"] == "emulator"
    assert rtl["engine"] == "rtl" and rtl["outputs"] == emulated["outputs"]
    model = systolix.load(path)
    assert rtl["cycles"] == [simulate_rtl(model.program, model.arch).cycles] * 2
    assert rtl["seconds"] > 0


@pytest.fixture(scope="module")
def cifar():
    return read_vectors_csv(RESNET20 / "cifar_10x32.csv", 32).reshape(10, 1024, 32)


# The board images each program runs on the RTL: both printed ones, except on ultra_ram/ (its
# strided weight loads make it the slowest to simulate, about 200 s an image), which runs one;
# baseline/ runs all ten in the test after this one.
BOARD_IMAGES = [board["image_index"] for board in EXPECTED["hardware_outputs"]]
RTL_IMAGES = {"ultra_ram": BOARD_IMAGES[1:]}


# In the suite ultra_ram/ (one image) also builds the zcu104_uram model the others then find
# built: about 200 s beside the other worker's tests, 71 s alone.
@pytest.mark.slow(seconds={"ultra_ram": 190, "ultra_ram_local_consts": 12, "ultra_ram_local_vars": 7,
                           "ultra_ram_local_vars_and_consts": 7})
@pytest.mark.parametrize("program", [p for p in PROGRAMS if p != "baseline"])
def test_tensils_resnet20_programs_on_the_32x32_rtl_print_what_the_boards_printed(program, cifar):
    """The real boards' printed images on every program, bit for bit, and the clock count the
    timing model predicts."""
    model = systolix.load(manifest(program))
    images = RTL_IMAGES.get(program, BOARD_IMAGES)
    run = model.run_detailed({"x:0": cifar[images]}, batch=True, engine="rtl", threads=2)
    raw = run.raw_outputs["Identity:0"][:, 0, :10]
    boards = {board["image_index"]: board for board in EXPECTED["hardware_outputs"]}
    for k, image in enumerate(images):
        printed = np.array(boards[image]["first_10_of_Identity:0"]) * ONE
        assert raw[k].tolist() == printed.astype(np.int64).tolist(), boards[image]["board"]
    assert run.result.cycles == [simulate_rtl(model.program, model.arch).cycles] * len(images)


@pytest.mark.slow(seconds=140)
def test_tensils_baseline_resnet20_on_the_32x32_rtl_gives_all_ten_golden_classes(cifar):
    """All ten images on baseline/: the golden classes, both boards' printed outputs bit for bit,
    and every image in the clocks the timing model predicts."""
    model = systolix.load(manifest("baseline"))
    run = model.run_detailed({"x:0": cifar}, batch=True, engine="rtl", threads=2)
    check_against_boards(run.raw_outputs["Identity:0"][:, 0, :10])
    assert run.result.cycles == [simulate_rtl(model.program, model.arch).cycles] * len(cifar)


def test_a_packed_stem_on_the_rtl_gives_the_emulators_outputs():
    """A space-to-depth packed 6x6 stride-2 stem (``systolix.hir_passes.pack_inputs``): the driver
    packs the input the same way for both engines, and the RTL computes what the emulator does."""
    from tests.unit.test_pack_inputs import stem

    onnx_model, feeds = stem(6, 2, 2, cout=8, h=9, w=8)
    model = systolix.compile(onnx_model, "pynqz1", host=False)
    assert model.inputs[0].pack["kind"] == "space_to_depth"
    emulated, rtl = run_rtl(model, feeds)
    assert np.array_equal(emulated.raw_outputs["y"], rtl.raw_outputs["y"])
    assert rtl.result.cycles == [simulate_rtl(model.program, model.arch).cycles]
    # The gain shows in the RTL's clocks: fewer than the plain layout's program takes (the rtl
    # timing model is exact against the RTL, checked above and in the tests before).
    plain = systolix.compile(onnx_model, "pynqz1", host=False, pack_inputs=False)
    assert rtl.result.cycles[0] < simulate_rtl(plain.program, plain.arch).cycles


def test_a_row_window_stem_on_the_rtl_gives_the_emulators_outputs():
    """A row-window packed 3x3 stride-1 stem on 32 lanes (8 output pixels a vector, the stem's
    MatMuls writing every 8th accumulator): the RTL computes what the emulator does, in the
    clocks the rtl timing model predicts. (On so small an image the 24 weight blocks cost the
    accelerator more clocks than the MatMuls they save; the host's writes, 8 times fewer, are
    what the packing buys.)"""
    from tests.unit.test_pack_inputs import stem

    onnx_model, feeds = stem(3, 1, 1, cout=16, h=4, w=16)
    model = systolix.compile(onnx_model, "zcu104", host=False)
    assert model.inputs[0].pack["kind"] == "row_window"
    emulated, rtl = run_rtl(model, feeds)
    assert np.array_equal(emulated.raw_outputs["y"], rtl.raw_outputs["y"])
    assert rtl.result.cycles == [simulate_rtl(model.program, model.arch).cycles]


def test_the_bias_loaded_with_a_block_saves_rtl_clocks_bit_exactly(monkeypatch):
    """The bias rides in the bias row of the centre tap's block (``systolix.codegen.conv``) instead
    of a pass of zeros through a bias-only block: the same sums, so the same raw outputs, and the
    RTL takes fewer clocks (a weight load and one compute slot a vector less per output group)."""
    from systolix.codegen import conv
    from tests.unit.test_pack_inputs import stem

    onnx_model, feeds = stem(3, 1, 1, cout=12, h=6, w=7)
    model = systolix.compile(onnx_model, "pynqz1", host=False, pack_inputs=False)
    monkeypatch.setattr(conv, "BIAS_IN_BLOCK", False)
    before = systolix.compile(onnx_model, "pynqz1", host=False, pack_inputs=False)
    emulated, rtl = run_rtl(model, feeds)
    assert np.array_equal(emulated.raw_outputs["y"], rtl.raw_outputs["y"])
    assert np.array_equal(emulated.raw_outputs["y"], before.run_detailed(feeds).raw_outputs["y"])
    (cycles,) = rtl.result.cycles
    assert cycles == simulate_rtl(model.program, model.arch).cycles
    clocks_before = simulate_rtl(before.program, before.arch).cycles
    assert cycles < clocks_before
    # Saved per output group: the MatMul of zeros over the tile (6 x 7 pixels, a compute slot
    # each) and the bias-only weight load (N + 1 slots).
    N = model.arch.array_size
    assert clocks_before - cycles >= -(-12 // N) * (6 * 7 + N + 1)


@pytest.mark.parametrize("shape", [(8, 16, 48, 48), (128, 64, 4, 4)], ids=["bands", "weight-chunks"])
def test_a_pipelined_conv_on_the_rtl_gives_the_emulators_outputs_in_fewer_clocks(shape):
    """Double-buffered conv plans (``systolix.planning.tiling``): the next stage's band (``bands``:
    stages in alternate lock halves) or the next weight chunk (``weight-chunks``: 128 input
    channels' blocks streamed) loads while the array works on the other half. The RTL computes
    what the emulator does, in the clocks the rtl timing model predicts, fewer than the plain
    plan's (both tuned for the rtl TCU; tuned for Tensil's, plans are single-buffered)."""
    cin, cout, h, w = shape
    onnx_model, rng = conv_relu(cin, cout, h, w)
    model = systolix.compile(onnx_model, "pynqz1", host=False, tune="rtl")
    emulated, rtl = run_rtl(model, {"x": rng.normal(0, 1, (1, cin, h, w)).astype(np.float32)})
    assert np.array_equal(emulated.raw_outputs["y"], rtl.raw_outputs["y"])
    assert rtl.result.cycles == [simulate_rtl(model.program, model.arch).cycles]
    plain = systolix.compile(onnx_model, "pynqz1", host=False, tune="rtl", pipeline=False)
    assert rtl.result.cycles[0] < 0.9 * simulate_rtl(plain.program, plain.arch).cycles


def test_narrow_tensors_two_pixels_a_vector_on_the_rtl_give_the_emulators_outputs_in_fewer_clocks():
    """4-channel maps on the 8-lane pynqz1 stored two pixels a vector (``systolix.hir_passes.
    pack_width``): entries, 1x1 and 3x3 convs on the packed grid, exits with output phases and a
    stride-2 exit. The RTL computes what the emulator does (the plain compile's raw outputs), in
    the clocks the rtl timing model predicts, fewer than the plain compile's."""
    from tests.unit.test_pack_width import bottleneck

    onnx_model, feeds = bottleneck(h=4, w=8, c=4, wide=16)
    model = systolix.compile(onnx_model, "pynqz1", host=False)
    plain = systolix.compile(onnx_model, "pynqz1", host=False, pack_width=False)
    assert model.summary.segments[0].hir.widths
    emulated, rtl = run_rtl(model, feeds)
    base = plain.run_detailed(feeds)
    for name in ("y", "e_c"):
        assert np.array_equal(emulated.raw_outputs[name], rtl.raw_outputs[name]), name
        assert np.array_equal(base.raw_outputs[name], rtl.raw_outputs[name]), name
    assert rtl.result.cycles == [simulate_rtl(model.program, model.arch).cycles]
    assert rtl.result.cycles[0] < simulate_rtl(plain.program, plain.arch).cycles
