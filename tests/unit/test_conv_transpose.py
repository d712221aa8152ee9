"""ConvTranspose on the accelerator, as the DPU runs it: one stride-1 convolution of the input
per output phase, interleaved by a remap. Compiled with no host fallback, run on the emulator and
compared with onnxruntime within the FP16BP8 bound of ``tests/error_model.py``."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from systolix.compiler import compile_model
from systolix.ir.evaluate import run_reference
from systolix.lowering.ops.conv_transpose import phase_taps
from tests.error_model import output_bounds
from tests.onnx_builders import ir_of, make_model

CASES = {
    "k2_s2": (3, 5, (2, 2), {"strides": [2, 2]}),
    "k4_s2_p1": (3, 5, (4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "k3_s2_p1_output_padding": (3, 5, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    "k3_strides_3x2_asymmetric_pads": (3, 5, (3, 3), {"strides": [3, 2], "pads": [0, 1, 2, 0], "output_padding": [2, 1]}),
    "k3_s2_dilations_2x3": (3, 5, (3, 3), {"strides": [2, 2], "dilations": [2, 3]}),
    "k3x2_same_upper": (3, 5, (3, 2), {"strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    "k3x2_same_lower": (3, 5, (3, 2), {"strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    "k3_s1": (3, 5, (3, 3), {"pads": [1, 1, 1, 1]}),
    "k3_s2_output_shape": (3, 5, (3, 3), {"strides": [2, 2], "output_shape": [10, 9]}),
    "k1_s3": (3, 5, (1, 1), {"strides": [3, 3]}),
    "groups_2": (4, 6, (3, 3), {"strides": [2, 2], "group": 2}),
    "depthwise": (5, 5, (3, 3), {"strides": [2, 2], "group": 5}),
    "k4_s2_p1_17_to_19": (17, 19, (4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
}


def conv_transpose(cin, cout, kernel, attrs, h=4, w=5, seed=0):
    rng = np.random.default_rng(seed)
    wt = rng.normal(0, 0.3, (cin, cout // attrs.get("group", 1)) + tuple(kernel)).astype(np.float32)
    b = rng.normal(0, 0.1, cout).astype(np.float32)
    m = make_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up", **attrs)], [("x", [1, cin, h, w])],
                   [("y", None)], {"w": wt, "b": b})
    return m, {"x": rng.normal(0, 1, (1, cin, h, w)).astype(np.float32)}


def reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_phase_taps_split_the_kernel_among_the_phases():
    # 4x4 stride 2 pad 1 (a U-Net's up-sampling): even output rows use taps 1 and 3, odd ones 0 and 2.
    assert phase_taps(0, 1, 4, 2, 1) == ([3, 1], 1, 1)
    assert phase_taps(1, 1, 4, 2, 1) == ([2, 0], 0, 1)
    # A phase no tap reaches (kernel 1, stride 3) is a zero tap: the bias alone.
    assert phase_taps(1, 0, 1, 3, 1) == ([None], 0, 1)
    # Dilation 2, stride 2: taps 0, 1, 2 all land on phase 0, one input pixel apart.
    assert phase_taps(0, 0, 3, 2, 2) == ([2, 1, 0], 2, 1)


@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("case", list(CASES))
def test_lowered_conv_transpose_is_exact_in_float(case):
    """The phase convolutions and the interleave, evaluated in float, are onnxruntime's result."""
    model, feeds = conv_transpose(*CASES[case])
    hir = ir_of(model)
    kinds = [layer.kind for layer in hir.layers]
    strides = CASES[case][3].get("strides", [1, 1])
    assert kinds == ["conv"] * (strides[0] * strides[1]) + ["remap"]
    got = run_reference(hir, feeds)["y"]
    np.testing.assert_allclose(got, reference(model, feeds)["y"], atol=1e-4)


@pytest.mark.needs_emulator
@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("arch", ["pynqz1", "ultra96v2"])
@pytest.mark.parametrize("case", list(CASES))
def test_conv_transpose_on_the_emulator(case, arch):
    model, feeds = conv_transpose(*CASES[case])
    compiled = compile_model(model, arch, host=False)
    expected = reference(model, feeds)["y"]
    got = compiled.run(feeds)["y"]
    assert got.shape == expected.shape
    err, bound = float(np.max(np.abs(got - expected))), output_bounds(model, feeds)["y"]
    assert err <= bound, f"max error {err:.4f} > bound {bound:.4f}"


def unet_decoder(seed=0):
    """Encoder conv, pool, bottleneck conv; a 2x2 stride-2 up-sampling joined to the skip, a
    conv, a 4x4 stride-2 pad-1 up-sampling with BatchNormalization and Relu, a 1x1 head."""
    rng = np.random.default_rng(seed)

    def w(*shape, fan):
        return rng.normal(0, 1.0 / np.sqrt(fan), shape).astype(np.float32)

    inits = {"w1": w(8, 3, 3, 3, fan=27), "b1": w(8, fan=8), "w2": w(16, 8, 3, 3, fan=72), "b2": w(16, fan=16),
             "u1": w(16, 8, 2, 2, fan=16), "ub1": w(8, fan=8), "w3": w(8, 16, 3, 3, fan=144), "b3": w(8, fan=8),
             "u2": w(8, 6, 4, 4, fan=32), "scale": rng.uniform(0.5, 1.5, 6).astype(np.float32),
             "beta": w(6, fan=6), "mean": w(6, fan=6), "var": rng.uniform(0.5, 2.0, 6).astype(np.float32),
             "head": w(2, 6, 1, 1, fan=6)}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["e1"], name="enc", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["e1"], ["skip"], name="enc_relu"),
        helper.make_node("MaxPool", ["skip"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2", "b2"], ["m1"], name="mid", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["m1"], ["m"], name="mid_relu"),
        helper.make_node("ConvTranspose", ["m", "u1", "ub1"], ["up1"], name="up2x2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["up1", "skip"], ["cat"], name="cat", axis=1),
        helper.make_node("Conv", ["cat", "w3", "b3"], ["d1"], name="dec", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d1"], ["d"], name="dec_relu"),
        helper.make_node("ConvTranspose", ["d", "u2"], ["up2"], name="up4x4", kernel_shape=[4, 4], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["up2", "scale", "beta", "mean", "var"], ["n"], name="bn", epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["r"], name="up_relu"),
        helper.make_node("Conv", ["r", "head"], ["y"], name="head", kernel_shape=[1, 1]),
    ]
    return make_model(nodes, [("x", [1, 3, 10, 12])], [("y", None)], inits), {
        "x": rng.normal(0, 1, (1, 3, 10, 12)).astype(np.float32)}


@pytest.mark.needs_emulator
@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("arch", ["pynqz1", "ultra96v2", "zcu104"])
def test_unet_decoder_runs_wholly_on_the_accelerator(arch):
    model, feeds = unet_decoder()
    compiled = compile_model(model, arch, host=False)
    assert not compiled.summary.host_nodes
    expected = reference(model, feeds)["y"]
    got = compiled.run(feeds)["y"]
    err, bound = float(np.max(np.abs(got - expected))), output_bounds(model, feeds)["y"]
    print(f"{arch}: largest error {err / 2 ** -8:.2f} LSB, {err / bound:.0%} of its bound")
    assert err <= bound, f"max error {err:.4f} > bound {bound:.4f}"


@pytest.mark.needs_emulator
@pytest.mark.needs_onnxruntime
def test_a_wide_interleave_takes_output_channel_groups_a_few_at_a_time():
    """One row of all four phases' 3 channel groups (1,200 vectors) exceeds a 1,024-vector local
    memory: the interleave loads, for a few output groups at a time, only their phases' groups."""
    from systolix.arch import get_architecture

    arch = get_architecture("pynqz1").model_copy(update={"local_depth": 1024})
    model, feeds = conv_transpose(3, 17, (4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, h=3, w=100)
    plan = ir_of(model, arch, until="tile layers")
    interleave = next(p for p in plan.layers if p.layer == "up/interleave")
    assert interleave.partitions == [(0, 2), (2, 3)]
    compiled = compile_model(model, arch, host=False)
    expected = reference(model, feeds)["y"]
    err, bound = float(np.max(np.abs(compiled.run(feeds)["y"] - expected))), output_bounds(model, feeds)["y"]
    assert err <= bound, f"max error {err:.4f} > bound {bound:.4f}"


def test_batch_norm_and_relu_after_it_join_the_phases():
    """The interleave only moves pixels: the batch norm folds into every phase's weights and the
    ReLU joins every phase's post-ops, so no layer is left between the interleave and the head."""
    model, _ = unet_decoder()
    hir = ir_of(model)
    up = [layer for layer in hir.layers if layer.name.startswith("up4x4/")]
    assert [layer.kind for layer in up] == ["conv"] * 4 + ["remap"]
    assert all(layer.ops == ["ConvTranspose", "BatchNormalization", "Relu"] for layer in up)
    assert all([p.kind for p in layer.post_ops] == ["relu"] for layer in up[:4])
    assert hir.layers[hir.layers.index(up[-1]) + 1].name == "head"
