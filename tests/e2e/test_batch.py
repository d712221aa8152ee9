"""Batch programs (``systolix compile --batch B``): one program runs B images, each weight tile
streaming all of them. Every image's raw output must be the batch-1 program's for the same
input, bit for bit, and within the error model's bound of onnxruntime; a model exported with a
fixed batch compiles as that batch; bad batches are one ``error:`` line and exit 2."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper

import systolix
from systolix.errors import SystolixError
from systolix.frontend import FrontendError
from systolix.ir.lir import LoadWeights, MatMul
from systolix.onnxrt import session
from systolix.cli import main
from tests.error_model import output_bounds
from tests.onnx_builders import make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def mixed_model(batch: int = 1) -> onnx.ModelProto:
    """Every kind of layer a batch program runs: a packed stride-2 stem, a depthwise conv, a
    residual add, a squeeze-excite gate (a broadcast operand), max pools, a Gemm; two outputs."""
    rng = np.random.default_rng(7)
    p = {
        "w1": rng.normal(0, 0.4, (8, 3, 3, 3)).astype(np.float32), "b1": rng.normal(0, 0.1, 8).astype(np.float32),
        "wd": rng.normal(0, 0.4, (8, 1, 3, 3)).astype(np.float32),
        "w2": rng.normal(0, 0.3, (16, 8, 1, 1)).astype(np.float32),
        "wg": rng.normal(0, 0.1, (144, 10)).astype(np.float32), "bg": rng.normal(0, 0.1, 10).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="stem", strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "wd"], ["dw"], name="depthwise", group=8, pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Add", ["dw", "r1"], ["a"], name="residual"),
        helper.make_node("MaxPool", ["a"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["a"], ["gap"], name="gap"),
        helper.make_node("Relu", ["gap"], ["gate"], name="gate"),
        helper.make_node("Mul", ["a", "gate"], ["se"], name="excite"),
        helper.make_node("Conv", ["se", "w2"], ["c2"], name="project", kernel_shape=[1, 1]),
        helper.make_node("MaxPool", ["c2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="fc"),
    ]
    return make_model(nodes, [("x", [batch, 3, 12, 12])], [("y", [batch, 10]), ("pool", [batch, 8, 3, 3])], p)


def inputs(n: int) -> np.ndarray:
    return np.random.default_rng(3).uniform(-1, 1, (n, 1, 3, 12, 12)).astype(np.float32)


def _raw(model, x):
    return model.run_detailed({"x": x}, batch=True).raw_outputs


@pytest.mark.parametrize("arch, strategy", [("pynqz1", "local-isolated"), ("ultra96v2", "local-vars")])
def test_a_batch_program_gives_each_image_the_batch_1_programs_outputs(arch, strategy):
    onnx_model = mixed_model()
    one = systolix.compile(onnx_model, arch, strategy=strategy)
    three = systolix.compile(onnx_model, arch, strategy=strategy, batch=3)
    assert not three.summary.host_nodes and three.summary.batch == 3
    x = inputs(4)  # one run of three images and one of one image (padded)
    raw1, raw3 = _raw(one, x), _raw(three, x)
    for name in raw1:
        assert raw3[name].shape == raw1[name].shape == (4,) + raw1[name].shape[1:]
        assert np.array_equal(raw1[name], raw3[name]), name
    # ... and both within the error model's bound of onnxruntime, image by image.
    ours = three.run({"x": x}, batch=True)
    sess = session(onnx_model)
    for k in range(len(x)):
        feeds = {"x": x[k]}
        expected = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        for name, bound in output_bounds(onnx_model, feeds).items():
            assert np.abs(ours[name][k] - expected[name]).max() <= bound, (k, name)
    # The program's files say so: three images back to back in every span.
    ext = three.manifest.extension
    assert ext.batch == 3 and one.manifest.extension.batch == 1
    for batch_span, one_span in zip(three.manifest.inputs + three.manifest.outputs, one.manifest.inputs + one.manifest.outputs):
        assert batch_span.size == 3 * one_span.size


def test_weight_tiles_are_shared_by_the_images_of_a_batch():
    """The Gemm's weights (and the small late convs') stream every image per LoadWeights: the
    batch-4 program loads fewer weight tiles than four batch-1 runs and multiplies 4 times the
    vectors."""
    onnx_model = mixed_model()
    lirs = {}
    for b in (1, 4):
        compiled = systolix.compile(onnx_model, "pynqz1", batch=b)
        lirs[b] = [ins for seg in compiled.summary.segments for ins in seg.lir.instructions]
    loads = {b: sum(1 for i in lirs[b] if isinstance(i, LoadWeights)) for b in lirs}
    vectors = {b: sum(i.count for i in lirs[b] if isinstance(i, MatMul)) for b in lirs}
    assert vectors[4] == 4 * vectors[1]
    assert loads[4] < 4 * loads[1]


def test_a_model_exported_with_batch_2_compiles_as_a_batch_2_program(tmp_path):
    fixed = mixed_model(batch=2)
    compiled = systolix.compile(fixed, "pynqz1")
    assert compiled.manifest.extension.batch == 2
    x = inputs(2)
    plain = systolix.compile(mixed_model(), "pynqz1")
    for name, raw in _raw(compiled, x).items():
        assert np.array_equal(raw, _raw(plain, x)[name]), name
    # onnxruntime on the batch-2 model itself, both images at once.
    expected = session(fixed).run(["y"], {"x": x[:, 0]})[0]
    bound = max(output_bounds(mixed_model(), {"x": x[k]})["y"] for k in range(2))
    assert np.abs(compiled.run({"x": x}, batch=True)["y"][:, 0] - expected).max() <= bound
    with pytest.raises(FrontendError, match="batch 2 but --batch is 3"):
        systolix.compile(fixed, "pynqz1", batch=3)


def test_a_fixed_batch_the_model_cannot_drop_is_a_clear_error():
    """A Reshape to a constant [2, 144] only runs at batch 2: the compile says what to do."""
    model = mixed_model(batch=2)
    shape = onnx.numpy_helper.from_array(np.array([2, 144], np.int64), "shape")
    nodes = list(model.graph.node)
    flatten = next(k for k, n in enumerate(nodes) if n.op_type == "Flatten")
    nodes[flatten] = helper.make_node("Reshape", ["p2", "shape"], ["f"], name="reshape")
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.append(shape)
    with pytest.raises(FrontendError, match="does not run with a batch of 1.*--batch 2"):
        systolix.compile(model, "pynqz1")


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.0, True])
def test_a_bad_batch_is_an_error(bad):
    with pytest.raises(SystolixError, match="batch"):
        systolix.compile(mixed_model(), "pynqz1", batch=bad)


def _cli(capsys, *args) -> tuple[int, str, str]:
    """``systolix ARGS`` in this process: exit status, stdout, stderr."""
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return exited.value.code, out.out, out.err


def test_cli_compile_run_and_estimate_a_batch_program(tmp_path, capsys):
    onnx_path = tmp_path / "mixed.onnx"
    onnx.save(mixed_model(), onnx_path)
    for bad in ("0", "x", "2000"):
        code, _, err = _cli(capsys, "compile", onnx_path, "--arch", "pynqz1", "-o", tmp_path / "bad", "--batch", bad)
        assert code == 2 and err.count("error:") == 1 and err.startswith("error:") and "--batch" in err, err
        assert len(err.strip().splitlines()) == 1
        assert not (tmp_path / "bad").exists()
    out = tmp_path / "b2"
    code, _, err = _cli(capsys, "compile", onnx_path, "--arch", "pynqz1", "-o", out, "--batch", "2", "-q")
    assert code == 0, err
    tmodel = json.loads((out / "mixed_8x8.tmodel").read_text())
    assert tmodel["systolix"]["batch"] == 2
    x = inputs(3)
    np.save(tmp_path / "x.npy", x)
    code, _, err = _cli(capsys, "run", out / "mixed_8x8.tmodel", "--input", tmp_path / "x.npy", "--batch", "-o", tmp_path / "y.npz")
    assert code == 0, err
    plain = systolix.compile(mixed_model(), "pynqz1")
    y = np.load(tmp_path / "y.npz")
    assert np.array_equal(y["y"], plain.run({"x": x}, batch=True)["y"])
    code, stdout, err = _cli(capsys, "estimate", out / "mixed_8x8.tmodel", "--board", "pynq-z1", "--json")
    assert code == 0, err
    e2 = json.loads(stdout)
    assert e2["batch"] == 2 and e2["fps"] == pytest.approx(2e3 / e2["latency_ms"])


def test_a_batch_program_cut_by_its_constants_gives_the_whole_programs_outputs():
    """Constants past DRAM1 cut the model into programs run in a row, each running the batch:
    the tensors crossing the cuts hold the images one after another too."""
    from systolix.arch import get_architecture

    rng = np.random.default_rng(1)
    weights = {f"w{k}": rng.normal(0, 0.3, (16, 16 if k else 3, 3, 3)).astype(np.float32) for k in range(3)}
    nodes, prev = [], "x"
    for k in range(3):
        nodes += [helper.make_node("Conv", [prev, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], name=f"conv{k}"),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}")]
        prev = f"r{k}"
    model = make_model(nodes, [("x", [1, 3, 6, 6])], [(prev, None)], weights)
    # Plain weights: a program after a cut estimates its gains from inputs of its own, so only
    # without estimated gains are the cut programs' sums the whole program's.
    whole = systolix.compile(model, "pynqz1", estimate_gains=False)
    small = get_architecture("pynqz1").model_copy(update={"dram1_depth": 400})  # each conv's 289 vectors alone
    cut = systolix.compile(model, small, batch=2, estimate_gains=False)
    assert cut.summary.constant_cuts == 2 and cut.summary.batch == 2
    x = rng.uniform(-1, 1, (3, 1, 3, 6, 6)).astype(np.float32)
    assert np.array_equal(whole.run({"x": x}, batch=True)[prev], cut.run({"x": x}, batch=True)[prev])


def test_a_pipelined_layer_runs_its_one_image_plan_image_after_image(tmp_path):
    """A conv whose one-image plan double-buffers across the lock halves (the layer of
    tests/unit/test_planning.py, tuned for the rtl TCU) keeps that plan in a batch program,
    image after image: each image's raw outputs are the batch-1 program's, and two images take
    about twice one image's clocks under the timing model (2.01x; the unpipelined first fit they
    shared before, 2.47x)."""
    from systolix.arch import ARCHITECTURES, get_board
    from systolix.perf.estimate import estimate
    from tests.onnx_builders import ir_of

    rng = np.random.default_rng(8)
    w = rng.normal(0, 0.1, size=(24, 16, 3, 3)).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                   [("x", [1, 16, 32, 32])], [("y", None)], {"w": w})
    arch = ARCHITECTURES["pynqz1"].model_copy(update={"accumulator_depth": 256})
    (plan,) = ir_of(m, arch, until="tile layers", batch=2, tune="rtl").layers
    assert "pipelined" in plan.loop_order
    one, two = systolix.compile(m, arch, tune="rtl"), systolix.compile(m, arch, batch=2, tune="rtl")
    x = np.random.default_rng(4).uniform(-1, 1, (2, 1, 16, 32, 32)).astype(np.float32)
    raw1 = one.run_detailed({"x": x}, batch=True).raw_outputs["y"]
    raw2 = two.run_detailed({"x": x}, batch=True).raw_outputs["y"]
    assert np.array_equal(raw1, raw2)
    board = get_board("pynq-z1")
    cycles = {b: estimate(c.save(tmp_path / str(b)), board.with_architecture(arch)).cycles for b, c in ((1, one), (2, two))}
    assert cycles[2] <= 2.05 * cycles[1], cycles



def test_no_layer_of_a_batch_program_is_slower_than_its_images_one_after_another(tmp_path):
    """Each conv of a batch-4 program either shares weight tiles between images or runs its
    one-image plan (tile, double-buffering and second accumulator buffer chosen by cost) image
    after image, whichever the tiling's cost model scores lower; so no layer of ResNet-20 v2 on
    the 8x8 arty-a7-35 takes more than four times its batch-1 clocks under the timing model (5%
    slack for the cost model's misses), and the program takes fewer than four batch-1 runs.
    Before, a conv that could not share kept the first tile that fit, single-buffered: the batch
    program ran at 0.93 times the batch-1 frame rate, its stage-3 convs up to 1.48 times four
    batch-1 runs. Each image's raw outputs are the batch-1 program's. (Both programs here keep a
    long reduction's parts as layers, so that layers compare one to one; by default a batch
    program merges them into the layers where the latency model times that faster,
    ``merge_reduction_parts``: that program is no slower.)"""
    from systolix.arch import get_board
    from systolix.models import build_cached
    from systolix.perf.estimate import estimate

    model = build_cached("resnet20v2")
    board = get_board("arty-a7-35")
    one = systolix.compile(model, board.architecture, merge_parts=False)
    four = systolix.compile(model, board.architecture, batch=4, merge_parts=False)
    chosen = systolix.compile(model, board.architecture, batch=4)
    runs = {b: estimate(c.save(tmp_path / str(b)), board) for b, c in ((1, one), (4, four), ("chosen", chosen))}
    assert runs["chosen"].cycles <= runs[4].cycles, chosen.summary.batch_parts
    layers = {b: {layer.name: layer.cycles for layer in runs[b].layers} for b in (1, 4)}
    slower = {name: round(cycles / (4 * layers[1][name]), 3) for name, cycles in layers[4].items()
              if cycles > 4 * 1.05 * layers[1][name]}
    assert not slower, slower
    assert runs[4].cycles < 4 * runs[1].cycles
    (spec,) = one.inputs
    name = spec.name
    x = np.random.default_rng(5).uniform(-1, 1, (4,) + tuple(spec.shape)).astype(np.float32)
    raw1, raw4, raw_chosen = (c.run_detailed({name: x}, batch=True).raw_outputs for c in (one, four, chosen))
    for out in raw1:
        assert np.array_equal(raw1[out], raw4[out]), out
        assert np.array_equal(raw1[out], raw_chosen[out]), out


def late_stage_conv(cout: int = 256, size: int = 8) -> onnx.ModelProto:
    """A 3x3 conv and ReLU over a small map with many output groups (four images' tiles of all
    its groups do not fit the accumulators together), between two 1x1 convs (its input and
    output planar in DRAM, as inside a network)."""
    rng = np.random.default_rng(4)
    p = {"w1": rng.normal(0, 0.2, (64, 16, 1, 1)).astype(np.float32),
         "w": rng.normal(0, 0.05, (cout, 64, 3, 3)).astype(np.float32),
         "w2": rng.normal(0, 0.05, (16, cout, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="expand", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="project", kernel_shape=[1, 1])]
    return make_model(nodes, [("x", [1, 16, size, size])], [("y", None)], p)


def test_four_images_share_each_weight_tile_in_fewer_groups_where_the_one_image_tile_leaves_no_room():
    """ultra96v2: one image's tile is the whole 8x8 map of all 16 output groups (1,024 of the
    4,096 accumulators); four of them do not fit beside the SIMD constants, so before, only two
    images shared each weight tile (2 + 2). Four images share it now, in tiles of fewer groups
    (each weight block is still loaded once a stage): a batch-1 run's weight loads, the same rows, each
    image's raw outputs the batch-1 program's, and fewer clocks under the timing model."""
    from systolix.arch import get_board
    from systolix.perf.estimate import estimate
    from tests.onnx_builders import ir_of

    model = late_stage_conv()
    # (Its 576-long reductions are summed in two parts of 32 channels, each a conv of its own.)
    one_plan = next(p for p in ir_of(model, "ultra96v2", until="tile layers").layers if p.layer.startswith("conv"))
    plan = next(p for p in ir_of(model, "ultra96v2", until="tile layers", batch=4).layers if p.layer.startswith("conv"))
    assert one_plan.detail.rows == plan.detail.rows == 8
    assert plan.detail.images == 4
    assert max(g1 - g0 for g0, g1 in plan.partitions) < max(g1 - g0 for g0, g1 in one_plan.partitions) == 16
    one, four = systolix.compile(model, "ultra96v2"), systolix.compile(model, "ultra96v2", batch=4)
    x = np.random.default_rng(6).uniform(-1, 1, (4, 1, 16, 8, 8)).astype(np.float32)
    assert np.array_equal(_raw(one, x)["y"], _raw(four, x)["y"])
    lir = {b: [i for seg in c.summary.segments for i in seg.lir.instructions] for b, c in ((1, one), (4, four))}
    loads = {b: sum(1 for i in lir[b] if isinstance(i, LoadWeights)) for b in lir}
    assert loads[4] == loads[1]  # every block once for the four images (2 + 2 before: 3,395 against 1,155)
    # 0.82 of four batch-1 runs; two images a tile (the rule before) took 0.95.
    board = get_board("ultra96-v2")
    assert estimate(four.program, board).cycles < 0.9 * 4 * estimate(one.program, board).cycles
