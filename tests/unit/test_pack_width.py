"""Narrow tensors two pixels a vector (``systolix.hir_passes.pack_width``).

A bottleneck network with 8-channel maps on the 16-lane ``ultra96v2``: a row-window stem (entry
with output phases), 1x1 and 3x3 convs inside the packed region, 1x1 exits with output phases
(one with a residual add of a plain tensor), a 3x3 entry from a 32-channel tensor and a
stride-2 3x3 exit. The pass's HIR is checked against the rearrangement written out by hand and
against onnxruntime in float; the compile against the unpacked compile's raw outputs (the same
rounded products: the same integers) and onnxruntime within the error model's bound, in fewer
accumulator clocks.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from systolix.compiler import compile_model
from systolix.hir_passes.pack_width import pack_width, unpack
from systolix.ir import same
from systolix.ir.evaluate import evaluate, run_reference
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import Relu, Scale
from systolix.perf.rtl_timing import simulate_rtl
from tests.error_model import output_bounds
from tests.onnx_builders import ir_of, make_model


def bottleneck(h=6, w=8, c=8, wide=32, seed=0):
    rng = np.random.default_rng(seed)
    inits, nodes = {}, []

    def conv(name, x, cin, cout, k, stride=1, relu=True):
        inits[f"{name}_w"] = rng.normal(0, 0.8 / np.sqrt(cin * k * k), (cout, cin, k, k)).astype(np.float32)
        inits[f"{name}_b"] = rng.normal(0, 0.1, cout).astype(np.float32)
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"], name=name, kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return f"{name}_c"
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"], name=f"{name}_relu"))
        return f"{name}_r"

    stem = conv("stem", "x", 3, c, 3)
    a = conv("a", stem, c, c, 1)
    b = conv("b", a, c, c, 3)
    expand = conv("c", b, c, wide, 1, relu=False)
    short = conv("short", stem, c, wide, 1, relu=False)
    nodes.append(helper.make_node("Add", [expand, short], ["y"], name="add"))
    d = conv("d", "y", wide, c, 3)
    conv("e", d, c, 16, 3, stride=2, relu=False)
    model = make_model(nodes, [("x", [1, 3, h, w])], [("y", None), ("e_c", None)], inits)
    return model, {"x": rng.normal(0, 1, (1, 3, h, w)).astype(np.float32)}


def packed_by_hand(w: np.ndarray, role: str, p: int = 2) -> np.ndarray:
    """The packed weights written tap by tap from the definition (pads of ``k // 2``)."""
    co, ci, kh, kw = w.shape
    pad = kw // 2
    if role == "inside":  # output lane block i, tap t reads pixel 2j + i + t - pad
        out = np.zeros((p * co, p * ci, kh, 3 if kw == 3 else 1), np.float32)
        for i in range(p):
            for t in range(kw):
                x = i + t - pad
                d, ii = x // p, x % p
                out[i * co:(i + 1) * co, ii * ci:(ii + 1) * ci, :, d + (1 if kw == 3 else 0)] = w[:, :, :, t]
        return out
    if role == "entry":  # output pixel 2j + i reads input pixels 4j + 2i .. (kernel width kw + 1, stride 2)
        out = np.zeros((p * co, ci, kh, kw + 1), np.float32)
        for i in range(p):
            out[i * co:(i + 1) * co, :, :, i:i + kw] = w
        return out
    raise ValueError(role)


def test_the_pass_gives_the_hir_expected_by_hand():
    """Entry (1x1 from 8 channels), inside (1x3, pads 1), exit (1x1 to 8 channels) on 8 lanes:
    the two 4-channel tensors become 8x2x2, the weights written out tap by tap."""
    rng = np.random.default_rng(0)
    w1, w2, w3 = (rng.normal(size=s).astype(np.float32) for s in ((4, 8, 1, 1), (4, 4, 1, 3), (8, 4, 1, 1)))
    b1, b2, b3, s2 = (rng.normal(size=n).astype(np.float32) for n in (4, 4, 8, 4))

    def hir(t1, t2, layers, widths):
        return HirProgram("t", 8, layers, {"x": x}, {"y": y}, {"x": (1, 8, 2, 4)}, {"y": (1, 8, 2, 4)}, widths=widths)

    x, y = Activation("x", 8, 2, 4, 8, order="pixel"), Activation("y", 8, 2, 4, 8, order="pixel")
    t1, t2 = Activation("t1", 4, 2, 4, 8), Activation("t2", 4, 2, 4, 8)
    before = hir(t1, t2, [
        ConvLayer("entry", [ConvInput(x, weights=w1)], t1, b1, (1, 1), post_ops=[Relu()]),
        ConvLayer("inside", [ConvInput(t1, weights=w2)], t2, b2, (1, 3), pads=(0, 1, 0, 1), post_ops=[Scale(values=s2), Relu()]),
        ConvLayer("exit", [ConvInput(t2, weights=w3)], y, b3, (1, 1))], {})
    p1, p2 = Activation("t1", 8, 2, 2, 8), Activation("t2", 8, 2, 2, 8)
    e1 = np.zeros((8, 8, 1, 2), np.float32)  # output lane block i: pixel 2j + i, kernel column i
    e1[:4, :, :, 0], e1[4:, :, :, 1] = w1[..., 0], w1[..., 0]
    e2 = np.zeros((8, 8, 1, 3), np.float32)  # packed taps j-1, j, j+1
    e2[:4, 4:, :, 0] = w2[..., 0]  # pixel 2j's left neighbour: lane block 1 of packed pixel j-1
    e2[:4, :4, :, 1], e2[:4, 4:, :, 1] = w2[..., 1], w2[..., 2]
    e2[4:, :4, :, 1], e2[4:, 4:, :, 1] = w2[..., 0], w2[..., 1]
    e2[4:, :4, :, 2] = w2[..., 2]  # pixel 2j + 1's right neighbour: lane block 0 of packed pixel j+1
    e3 = np.zeros((8, 8, 1, 2), np.float32)  # phase i reads lane block i
    e3[:, :4, :, 0], e3[:, 4:, :, 1] = w3[..., 0], w3[..., 0]
    expected = hir(p1, p2, [
        ConvLayer("entry", [ConvInput(x, weights=e1)], p1, np.tile(b1, 2), (1, 2), stride=(1, 2), post_ops=[Relu()]),
        ConvLayer("inside", [ConvInput(p1, weights=e2)], p2, np.tile(b2, 2), (1, 3), pads=(0, 1, 0, 1),
                  post_ops=[Scale(values=np.tile(s2, 2)), Relu()]),
        ConvLayer("exit", [ConvInput(p2, weights=e3)], y, b3, (1, 1), phases=2)], {"t1": 2, "t2": 2})
    assert same(pack_width(before), expected)
    assert same(pack_width(before, type("Off", (), {"pack_width": False})()), before)


def test_the_pass_rewrites_each_layer_as_defined():
    model, feeds = bottleneck()
    # The two expanding 1x1s kept apart (``merge_residual_convs`` would make them one layer).
    before = ir_of(model, "ultra96v2", until="pack inputs", estimate_gains=False, merge_residual_convs=False)
    after = pack_width(before)
    assert sorted(after.widths) == ["a_r", "b_r", "d_r", "stem_r"] and set(after.widths.values()) == {2}
    old = {layer.name: layer for layer in before.layers}
    new = {layer.name: layer for layer in after.layers}
    assert (new["a"].output.C, new["a"].output.H, new["a"].output.W) == (16, 6, 4)
    # Inside: a 1x1 is block-diagonal, a 3x3 pad 1 reads packed taps j-1, j, j+1.
    for name in ("a", "b"):
        np.testing.assert_array_equal(new[name].inputs[0].weights, packed_by_hand(old[name].inputs[0].weights, "inside"))
        np.testing.assert_array_equal(new[name].bias, np.tile(old[name].bias, 2))
    assert (new["b"].kernel, new["b"].pads, new["b"].stride) == ((3, 3), (1, 1, 1, 1), (1, 1))
    # Entry from the 32-channel sum: kernel width 3 + 1, stride 2.
    np.testing.assert_array_equal(new["d"].inputs[0].weights, packed_by_hand(old["d"].inputs[0].weights, "entry"))
    assert (new["d"].kernel, new["d"].stride, new["d"].pads) == ((3, 4), (1, 2), (1, 1, 1, 1))
    # The row-window stem (2 phases on 16 lanes) keeps 1: phase i writes lane block i.
    assert old["stem"].phases == 2 and new["stem"].phases == 1
    w = old["stem"].inputs[0].weights
    np.testing.assert_array_equal(new["stem"].inputs[0].weights, np.concatenate([w[..., 0:1], w[..., 1:2]]))
    # Exits: the expanding 1x1s take 2 output phases, phase i reading lane block i; the stride-2
    # 3x3 becomes a stride-1 conv over the packed grid of packed taps j-1 (lane block 1) and j.
    for name in ("c", "short"):
        w, got = old[name].inputs[0].weights, new[name].inputs[0].weights
        assert new[name].phases == 2 and got.shape == (32, 16, 1, 2) and new[name].output is old[name].output
        np.testing.assert_array_equal(got[:, :8, :, 0], w[..., 0])
        np.testing.assert_array_equal(got[:, 8:, :, 1], w[..., 0])
        assert not got[:, 8:, :, 0].any() and not got[:, :8, :, 1].any()
    w, got = old["e"].inputs[0].weights, new["e"].inputs[0].weights
    assert (new["e"].kernel, new["e"].stride, new["e"].pads) == ((3, 2), (2, 1), (1, 1, 1, 0))
    np.testing.assert_array_equal(got[:, 8:, :, 0], w[..., 0])
    np.testing.assert_array_equal(got[:, :8, :, 1], w[..., 1])
    np.testing.assert_array_equal(got[:, 8:, :, 1], w[..., 2])
    assert not got[:, :8, :, 0].any()
    text = after.text()
    assert "output packed 2 pixels a vector: 8x6x8" in text and "2 output phases" in text
    # In float the packed HIR computes onnxruntime's outputs.
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_reference(after, feeds)
    for name, want in zip(("y", "e_c"), expected):
        np.testing.assert_allclose(got[name], want, atol=1e-4)
    # An intermediate tensor, read back and unpacked, is the unpacked HIR's.
    plain, packed = evaluate(before, feeds), evaluate(after, feeds)
    for layer, old_layer in zip(after.layers, before.layers):
        if layer.output.name in after.widths:
            np.testing.assert_allclose(unpack(packed.read(layer.output), 2), plain.read(old_layer.output), atol=1e-9)


def test_a_region_whose_exit_does_not_fit_stays_plain():
    """A stride-1 3x3 exit (output phases take 1x1 kernels only) keeps its input plain, and with
    it the conv before (an entry of nothing)."""
    rng = np.random.default_rng(1)
    inits = {"w1": rng.normal(0, 0.3, (8, 16, 1, 1)).astype(np.float32), "w2": rng.normal(0, 0.3, (16, 8, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["t"], name="narrow", kernel_shape=[1, 1]),
             helper.make_node("Conv", ["t", "w2"], ["y"], name="wide", kernel_shape=[3, 3], pads=[1] * 4)]
    model = make_model(nodes, [("x", [1, 16, 4, 6])], [("y", None)], inits)
    hir = ir_of(model, "ultra96v2", until="pack width")
    assert not hir.widths and all(layer.phases == 1 for layer in hir.layers)


@pytest.mark.needs_emulator
@pytest.mark.needs_onnxruntime
def test_packed_compile_gives_the_plain_compiles_raw_outputs_in_fewer_clocks():
    model, feeds = bottleneck()
    packed = compile_model(model, "ultra96v2", host=False)
    plain = compile_model(model, "ultra96v2", host=False, pack_width=False)
    run, base = packed.run_detailed(feeds), plain.run_detailed(feeds)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    bounds = output_bounds(model, feeds)
    assert run.result.saturation_total == base.result.saturation_total == 0
    for name, want in zip(("y", "e_c"), expected):
        np.testing.assert_array_equal(run.raw_outputs[name], base.raw_outputs[name])
        err = float(np.max(np.abs(run.outputs[name] - want)))
        assert err <= bounds[name], f"{name}: max error {err:.4f} > bound {bounds[name]:.4f}"
    assert simulate_rtl(packed.program, packed.arch).cycles < simulate_rtl(plain.program, plain.arch).cycles


@pytest.mark.needs_emulator
def test_without_narrow_tensors_the_program_is_the_same():
    """8 channels on the 8-lane pynqz1 fill a vector: nothing to pack, the same files."""
    model, _ = bottleneck()
    packed = compile_model(model, "pynqz1", host=False)
    plain = compile_model(model, "pynqz1", host=False, pack_width=False)
    assert packed.artifacts == plain.artifacts


@pytest.mark.needs_emulator
def test_a_batch_program_packs_too():
    """Batch 2: each image's raw outputs are the packed batch-1 program's."""
    model, feeds = bottleneck()
    one = compile_model(model, "ultra96v2", host=False)
    two = compile_model(model, "ultra96v2", host=False, batch=2)
    assert two.summary.segments[0].hir.widths
    other = {"x": -feeds["x"]}
    got = two.run_detailed({"x": np.concatenate([feeds["x"], other["x"]])[:, None]}).raw_outputs
    for name in ("y", "e_c"):
        np.testing.assert_array_equal(got[name][0], one.run_detailed(feeds).raw_outputs[name][0])
        np.testing.assert_array_equal(got[name][1], one.run_detailed(other).raw_outputs[name][0])


def test_the_cli_option_turns_it_off(tmp_path):
    from typer.testing import CliRunner

    from systolix.cli import app

    model, _ = bottleneck()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    for flag, out in (([], "on"), (["--no-pack-width"], "off")):
        result = CliRunner().invoke(app, ["compile", str(path), "--arch", "ultra96v2", "--no-host", "-o", str(tmp_path / out), "-q", *flag])
        assert result.exit_code == 0, result.output
    on, off = ((tmp_path / d / "m_16x16.tprog").read_bytes() for d in ("on", "off"))
    assert off == compile_model(model, "ultra96v2", host=False, pack_width=False, name="m_16x16").artifacts["m_16x16.tprog"]
    assert on != off
