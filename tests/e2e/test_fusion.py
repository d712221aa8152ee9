"""Fusions that keep a layer's data where it is (``systolix.hir_passes.fuse_pools``,
``fuse_preactivations``) on a narrow ResNet-50 v2 written as a torch module: its stem (conv,
zero Pad, 3x3/2 max pool), a pre-activation block (batch norm + ReLU of the block input, which
the identity shortcut reads raw) and a downsampling block whose shortcut is a 1x1 max pool of
stride 2, as Keras' ResNet50V2 has them; beside it YOLOv4-tiny's route (two convs concatenated,
then a 2x2/2 max pool).

The fused programs' raw outputs are bit for bit the unfused ones' (the same rounded values in
the same order), within the error model's bound of onnxruntime, and the pass's HIR is the
expected one."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import systolix
from tests.error_model import output_bounds
from tests.onnx_builders import ir_of

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


class PreactNet(nn.Module):
    def __init__(self, c=16, pad=True):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, 2, 1)
        # Keras pads with zeros before the pool; torch's own pool pads with minus infinity.
        self.pad, self.pool = (nn.ZeroPad2d(1), nn.MaxPool2d(3, 2)) if pad else (nn.Identity(), nn.MaxPool2d(3, 2, 1))
        self.bn1, self.a1, self.b1 = nn.BatchNorm2d(c), nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.Conv2d(c, c, 1)
        self.bn2, self.a2, self.b2 = nn.BatchNorm2d(c), nn.Conv2d(c, c, 3, 2, 1, bias=False), nn.Conv2d(c, c, 1)
        self.shortcut = nn.MaxPool2d(1, 2)
        self.post = nn.BatchNorm2d(c)
        # YOLOv4-tiny's route: two convs concatenated, then a 2x2/2 max pool.
        self.ca, self.cb = nn.Conv2d(c, c, 3, 1, 1), nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        x = self.pool(self.pad(self.stem(x)))
        x = x + self.b1(torch.relu(self.a1(torch.relu(self.bn1(x)))))
        p = torch.relu(self.bn2(x))
        a = torch.relu(self.ca(p))
        z = nn.functional.max_pool2d(torch.cat([a, torch.relu(self.cb(a))], 1), 2)
        x = self.shortcut(x) + self.b2(torch.relu(self.a2(p)))
        return torch.relu(self.post(x)), z


def _exported(module: nn.Module, size: int, outputs: list[str], trained_scales: bool) -> onnx.ModelProto:
    """``module`` with its batch norms fitted to random inputs (``trained_scales``: scales and
    shifts drawn as a trained network's, not the identity), exported by torch."""
    module.train()
    for bn in module.modules():
        if isinstance(bn, nn.BatchNorm2d):
            bn.momentum = None
            if trained_scales:
                with torch.no_grad():
                    bn.weight.uniform_(0.5, 1.5)
                    bn.bias.uniform_(-0.5, 0.5)
    with torch.no_grad():
        for _ in range(3):
            module(torch.randn(8, 3, size, size))
    module.eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, torch.randn(1, 3, size, size), buf, input_names=["x"], output_names=outputs, opset_version=17, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def exported(pad=True, size=24) -> onnx.ModelProto:
    torch.manual_seed(0)
    return _exported(PreactNet(pad=pad), size, ["y", "z"], trained_scales=True)


@pytest.fixture(scope="module")
def model():
    return exported()


def test_pool_passes_take_the_pad_and_the_strided_shortcut(model):
    kinds = lambda hir: [(layer.kind, "+".join(layer.ops)) for layer in hir.layers]  # noqa: E731
    before = ir_of(model, "ultra96v2", until="fuse post-ops")
    after = ir_of(model, "ultra96v2", until="fold pads into pools")
    assert kinds(before)[1:3] == [("conv", "Pad"), ("maxpool", "MaxPool")]
    assert kinds(after) == kinds(before)[:1] + [("maxpool", "Pad+MaxPool")] + kinds(before)[3:]
    pool = after.layers[1]
    assert pool.zero_pads and pool.pads == (1, 1, 1, 1) and "pads 1/1/1/1 (zeros)" in after.text()
    assert pool.input is after.layers[0].output and pool.output.H == 6  # reads the stem's map unpadded
    # The conv computing the first block's sum also saves its subsampled copy, after its add.
    before = ir_of(model, "ultra96v2", until="pack inputs")
    after = ir_of(model, "ultra96v2", until="fuse strided pools")
    assert kinds(before).count(("maxpool", "MaxPool")) == 2 and len(after.layers) == len(before.layers) - 2
    assert ("maxpool", "MaxPool") not in kinds(after)
    (producer,) = [layer for layer in after.layers if layer.ops[-2:] == ["Add", "MaxPool"]]
    assert producer.ops == ["Conv", "Add", "MaxPool"] and [p.kind for p in producer.post_ops] == ["mul", "add", "save"]
    assert producer.post_ops[-1].stride == (2, 2) and [a.H for a in producer.writes()] == [6, 3]
    assert "save a copy to /shortcut/MaxPool_output_0 16x3x3 (every 2th row's every 2th pixel)" in after.text()
    off = ir_of(model, "ultra96v2", until="fuse strided pools", fuse_pools=False)
    assert kinds(off)[1:3] == [("conv", "Pad"), ("maxpool", "MaxPool")] and len(off.layers) == len(before.layers) + 1
    # The 2x2/2 pool of the concatenation: each conv saves the max of its own channel groups' windows.
    pooled = [layer for layer in after.layers if getattr(layer, "post_ops", None) and getattr(layer.post_ops[-1], "pool", 1) == 2]
    assert len(pooled) == 2 and [p.post_ops[-1].target.parent[1] for p in pooled] == [0, 1]
    assert all(p.post_ops[-1].target.parent[0] is after.outputs["z"] for p in pooled)


def test_preactivation_pass_moves_batch_norms_into_the_producers_tails(model):
    before = ir_of(model, "ultra96v2", until="fuse strided pools", fuse_pools=False)
    after = ir_of(model, "ultra96v2", until="fuse preactivations", fuse_pools=False, fuse_preactivations=True)
    assert len(ir_of(model, "ultra96v2", until="fuse preactivations", fuse_pools=False, strategy="local-vars").layers) == len(before.layers)
    bns = [layer for layer in before.layers if layer.ops == ["BatchNormalization", "Relu"]]
    assert len(bns) == 3  # bn1 (after the stem's pool), bn2 and post (each after a conv's residual add)
    assert len(after.layers) == len(before.layers) - 2
    tails = [[p.kind for p in layer.post_ops] for layer in after.layers if "BatchNormalization" in layer.ops and "Add" in layer.ops]
    # The raw sum saved (the shortcut reads it too), then the scale, the shift, the batch norm
    # layer's own post-ops (its gain undone, the ReLU); the last sum only feeds its batch norm.
    assert tails == [["mul", "add", "save", "mul", "add_channels", "mul", "relu"], ["mul", "add", "mul", "add_channels", "mul", "relu"]]
    fused = after.layers[5]
    assert [a.name for a in fused.writes()] == [bns[1].output.name, "/Add_output_0"]
    assert fused.post_ops[3].values.tolist() == bns[1].inputs[0].diagonal[:, 0, 0].tolist()
    assert fused.post_ops[4].values.tolist() == bns[1].bias.tolist()


@pytest.mark.parametrize("strategy", ["local-isolated", "local-vars-and-consts"])
def test_fused_programs_are_bit_exact_with_the_unfused_ones(strategy):
    # Without the zero Pad (whose copy the exponents treat as a tensor of its own) the fused
    # program computes the same rounded values as the unfused one, in the same order.
    model = exported(pad=False)
    x = np.random.default_rng(1).standard_normal((1, 3, 24, 24)).astype(np.float32)
    plain = systolix.compile(model, "ultra96v2", strategy=strategy, fuse_pools=False, fuse_preactivations=False)
    fused = systolix.compile(model, "ultra96v2", strategy=strategy, fuse_preactivations=True)
    assert len(fused.manifest.extension.layers) == len(plain.manifest.extension.layers) - 4
    run_fused, run_plain = fused.run_detailed({"x": x}), plain.run_detailed({"x": x})
    refs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    bounds = output_bounds(model, {"x": x})
    for name, ref in zip("yz", refs):
        assert np.array_equal(run_fused.raw_outputs[name], run_plain.raw_outputs[name])
        assert float(np.max(np.abs(run_fused.outputs[name] - ref))) <= bounds[name]
    if strategy == "local-isolated":  # a batch program's images each as the batch-1 program computes it
        batched = systolix.compile(model, "ultra96v2", strategy=strategy, fuse_preactivations=True, batch=2)
        xs = np.stack([x, -x])
        raw, alone = batched.run_detailed({"x": xs}, batch=True).raw_outputs, fused.run_detailed({"x": -x}).raw_outputs
        for name in "yz":
            assert np.array_equal(raw[name][0], run_fused.raw_outputs[name][0])
            assert np.array_equal(raw[name][1], alone[name][0])


def test_fused_programs_are_within_the_bound(model):
    x = np.random.default_rng(2).standard_normal((1, 3, 24, 24)).astype(np.float32)
    fused = systolix.compile(model, "ultra96v2")  # both fusions by default with local-isolated
    plain = systolix.compile(model, "ultra96v2", fuse_pools=False, fuse_preactivations=False)
    assert len(fused.manifest.extension.layers) == len(plain.manifest.extension.layers) - 5
    refs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours, bounds = fused.run({"x": x}), output_bounds(model, {"x": x})
    for name, ref in zip("yz", refs):
        assert float(np.max(np.abs(ours[name] - ref))) <= bounds[name]


def _conv_relu_pool(channels: int, width: int, rng) -> "onnx.ModelProto":
    from onnx import helper

    from tests.onnx_builders import make_model

    w = rng.normal(0, 0.9 / np.sqrt(9 * channels), (8, channels, 3, 3)).astype(np.float32)
    return make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                       helper.make_node("Relu", ["c"], ["r"]),
                       helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                      [("x", [1, channels, 4, width])], [("y", None)], {"w": w})


def _within_bound(model, got, xs):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for k in range(len(xs)):
        ref = session.run(None, {"x": xs[k]})[0]
        assert float(np.max(np.abs(got.outputs["y"][k] - ref))) <= output_bounds(model, {"x": xs[k]})["y"]


def test_a_fused_pool_keeps_its_one_image_plan_in_a_batch_program():
    # A conv whose tile holds two output rows of one image (the 2x2 pool is fused at batch 1) but
    # only one row of four images: the batch-4 program does not share the conv's weight tiles
    # between images (that would split the pool's windows) but runs the one-image plan image
    # after image, the pool still fused (YOLOv4-tiny's routes at batch 4 on the 8x8 and 12x12
    # arrays; they were layers of their own before). Each image's raw outputs are the batch-1
    # program's, within the bound of onnxruntime's values.
    rng = np.random.default_rng(0)
    model = _conv_relu_pool(8, 256, rng)
    one = systolix.compile(model, "pynqz1")
    four = systolix.compile(model, "pynqz1", batch=4)
    for compiled in (one, four):
        assert [layer.name for layer in compiled.summary.segments[0].hir.layers] == ["Conv_0"]
        assert compiled.summary.unfused_pools is None
    xs = rng.standard_normal((4, 1, 8, 4, 256)).astype(np.float32)
    got = four.run_detailed({"x": xs}, batch=True)
    assert np.array_equal(got.raw_outputs["y"], one.run_detailed({"x": xs}, batch=True).raw_outputs["y"])
    _within_bound(model, got, xs)


def test_a_pool_whose_windows_do_not_fit_a_tile_stays_a_layer(monkeypatch):
    # 256 input channels 64 pixels wide: the 3 input rows of one output row fill most of the
    # pynqz1's 8,192 vectors of local memory (32 groups x 64 pixels a row), so a tile cannot hold
    # the two rows of a 2x2 window, even for one image. ``fuse_pools`` leaves such a pool alone
    # (its band estimate); with that check defeated, the tiling finds out (``PoolWindowsDoNotFit``)
    # and the compile keeps the pool a layer of its own, says so, and computes what the unfused
    # program does, within the bound of onnxruntime's values.
    from systolix.hir_passes import fuse_pools

    rng = np.random.default_rng(0)
    model = _conv_relu_pool(256, 64, rng)
    assert systolix.compile(model, "pynqz1").summary.segments[0].hir.layers[-1].name == "MaxPool_2"
    monkeypatch.setattr(fuse_pools, "_band", lambda conv, rows: 0)
    compiled = systolix.compile(model, "pynqz1")
    assert [layer.name for layer in compiled.summary.segments[0].hir.layers] == ["Conv_0", "MaxPool_2"]
    assert "layer 'Conv_0' saves a 2x2 max pool from its tail but only 1 output rows fit a tile" == compiled.summary.unfused_pools
    unfused = systolix.compile(model, "pynqz1", fuse_pools=False)
    xs = rng.standard_normal((2, 1, 256, 4, 64)).astype(np.float32)
    got = compiled.run_detailed({"x": xs}, batch=True)
    assert np.array_equal(got.raw_outputs["y"], unfused.run_detailed({"x": xs}, batch=True).raw_outputs["y"])
    _within_bound(model, got, xs)


def test_cli_options_turn_each_fusion_off_or_on(model, tmp_path):
    from typer.testing import CliRunner

    from systolix.artifacts import TModel
    from systolix.cli import app

    onnx.save(model, tmp_path / "m.onnx")
    layers = {}
    for name, options in (("default", []), ("plain", ["--no-fuse-pools", "--no-fuse-preact"]), ("pools", ["--no-fuse-preact"]),
                          ("vars", ["-s", "local-vars"]), ("vars_all", ["-s", "local-vars", "--fuse-preact"])):
        result = CliRunner().invoke(app, ["compile", str(tmp_path / "m.onnx"), "--arch", "ultra96v2", "-o", str(tmp_path / name), "-q",
                                          *options])
        assert result.exit_code == 0, result.output
        manifest = TModel.load(tmp_path / name / "m_16x16.tmodel")
        layers[name] = [("+".join(layer.ops) if layer.ops else layer.name) for layer in manifest.extension.layers]
    assert len(layers["plain"]) == len(layers["pools"]) + 3 == len(layers["default"]) + 5
    assert layers["vars"] == layers["pools"] and layers["vars_all"] == layers["default"]


class ProjectionNet(nn.Module):
    """ResNet v2's first unit of a stage, as Keras' CIFAR example builds it: a block of 1x1 convs
    whose sum with a 1x1 projection of its input is read only by the next block's pre-activation
    and strided shortcut (``subsample_strided_reads`` computes the pre-activation, the sum and the
    1x1 conv before it at the 8x8 pixels read), and that next block, whose strided shortcut and
    last conv then share their geometry (``merge_residual_convs`` makes them one layer)."""

    def __init__(self, c=8):
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, c, 3, 1, 1), nn.BatchNorm2d(c)
        self.a, self.bn1, self.b = nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.Conv2d(c, 2 * c, 1)
        self.shortcut = nn.Conv2d(c, 2 * c, 1)
        self.bn2, self.down, self.bn3, self.c = nn.BatchNorm2d(2 * c), nn.Conv2d(2 * c, 2 * c, 1, 2), nn.BatchNorm2d(2 * c), nn.Conv2d(2 * c, 2 * c, 1)
        self.shortcut2 = nn.Conv2d(2 * c, 2 * c, 1, 2)

    def forward(self, x):
        x = torch.relu(self.bn0(self.stem(x)))
        x = self.shortcut(x) + self.b(torch.relu(self.bn1(self.a(x))))
        y = torch.relu(self.bn3(self.down(torch.relu(self.bn2(x)))))
        return self.shortcut2(x) + self.c(y)


def exported_projection(size=16) -> onnx.ModelProto:
    torch.manual_seed(3)
    return _exported(ProjectionNet(), size, ["y"], trained_scales=False)


def test_merged_shortcuts_and_subsampled_preactivations_within_the_bound():
    model = exported_projection()
    vars_ = "local-vars-and-consts"
    sub = ir_of(model, "ultra96v2", until="subsample strided reads")
    (pre,) = [layer for layer in sub.layers if layer.ops == ["BatchNormalization", "Relu"]]
    (down,) = [layer for layer in sub.layers if layer.inputs[0].act is pre.output]
    (source,) = [layer for layer in sub.layers if layer.output is pre.inputs[0].act]
    # The pre-activation takes the stride, then the block sum it and the strided shortcut read
    # (its 1x1 conv and residual add, the add reading its operand on the 8x8 grid), then the 1x1
    # conv before it; the layers after read 8x8 maps at stride 1.
    (first,) = [layer for layer in sub.layers if layer.output is source.inputs[0].act]
    assert source.output.H == 8 and source.post_ops[0].stride == (2, 2) and source.stride == (1, 1)
    assert first.stride == (2, 2) and first.output.H == 8 and pre.stride == down.stride == (1, 1) and pre.output.H == 8
    merged = ir_of(model, "ultra96v2", until="merge residual convs")
    # The strided stage's shortcut and last conv; the first block's stays apart (its last conv
    # now computes 8x8, its shortcut 16x16, read at stride 2 by the add).
    assert sum(len(layer.inputs) == 2 and layer.ops[:3] == ["Conv", "Conv", "Add"] for layer in merged.layers) == 1
    assert len(merged.layers) == len(sub.layers) - 1
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    bound = output_bounds(model, {"x": x})["y"]
    raws = {}
    # Without gains (whose estimates see the subsampled pixels only) subsampling computes the
    # same rounded values at the pixels read.
    for strategy, options in (("local-isolated", {}), (vars_, {}),
                              (vars_, {"merge_residual_convs": False, "estimate_gains": False}),
                              (vars_, {"merge_residual_convs": False, "estimate_gains": False, "subsample_strided_reads": False})):
        compiled = systolix.compile(model, "ultra96v2", strategy=strategy, **options)
        run = compiled.run_detailed({"x": x})
        assert float(np.max(np.abs(run.outputs["y"] - ref))) <= bound, (strategy, options)
        raws[(strategy, len(options))] = run.raw_outputs["y"]
    assert np.array_equal(raws[(vars_, 2)], raws[(vars_, 3)])
    assert np.array_equal(raws[("local-isolated", 0)], raws[(vars_, 0)])
