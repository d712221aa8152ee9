"""Softmax on the Tandem vector unit (``ultra96v2_tandem``): the classifier's last op runs on the
accelerator, compared with onnxruntime; without the unit it stays on the host.

Error bound on each probability, against onnxruntime's float softmax of the float logits ``z``:
the accelerator's logits ``z'`` (the same as the model computes before its Softmax) differ by ``dz = max |z' - z|`` (measured: the same model with
the Softmax removed, on the same architecture), and softmax moves by at most ``dz / 2`` in the
max norm (its Jacobian ``diag(p) - p p^T`` has row sums of absolute values ``2 p_i (1 - p_i) <=
1/2``); the unit's arithmetic adds twice the exp polynomial's relative error (numerator and sum)
plus a few steps of its wide type (the roundings of ``t``, the shift, Newton's ``1/sum``: 8 steps
of ``2^-16``, generous); the output's rounding to FP16BP8 adds half an LSB (``2^-9``). Against
NumPy's softmax of ``z'`` itself only the last two terms remain: that checks the unit alone.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from systolix.cli import main
from systolix.codegen.tandem_softmax import POLY_REL_ERROR
from systolix.compiler import compile_model
from systolix.lowering import NO_IMPLEMENTATION
from systolix.models.ops import build_case

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

TANDEM = "ultra96v2_tandem"
UNIT_ERROR = 2 * POLY_REL_ERROR + 8 * 2.0 ** -16
HALF_LSB = 0.5 / 256


def gemm_softmax(classes: int, opset: int, four_d: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x [1, 24] -> Gemm -> (Reshape to [1, C, 1, 1]) -> Softmax over the classes."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.4, (classes, 24)).astype(np.float32)
    b = rng.normal(0, 0.5, classes).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["z"], name="gemm", transB=1)]
    z, out_shape, axis = "z", [1, classes], (1 if opset < 13 else -1)
    if four_d:
        inits.append(numpy_helper.from_array(np.array([1, classes, 1, 1], np.int64), "shape4"))
        nodes.append(helper.make_node("Reshape", ["z", "shape4"], ["z4"], name="to4d"))
        z, out_shape, axis = "z4", [1, classes, 1, 1], 1
    nodes.append(helper.make_node("Softmax", [z], ["p"], name="softmax", axis=axis))
    g = helper.make_graph(nodes, "gemm_softmax", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 24])],
                          [helper.make_tensor_value_info("p", onnx.TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def without_softmax(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model ending at the Softmax's input (the logits)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    (sm,) = [n for n in m.graph.node if n.op_type == "Softmax"]
    m.graph.node.remove(sm)
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info(sm.input[0], onnx.TensorProto.FLOAT, None))
    return m


def ort_run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def check_against_onnxruntime(model: onnx.ModelProto, xs: list[np.ndarray]) -> float:
    """Compile for the unit with no host, run; every probability within the bound. Returns the max error."""
    compiled = compile_model(model, TANDEM, host=False)
    logits = compile_model(without_softmax(model), TANDEM, host=False)
    name = model.graph.input[0].name
    worst = 0.0
    for x in xs:
        p = np.asarray(compiled.run({name: x})[model.graph.output[0].name])
        ref = ort_run(model, x)
        axis = -1 if ref.ndim != 4 else 1  # the channels, where the probabilities sum to 1
        dz = float(np.abs(np.asarray(next(iter(logits.run({name: x}).values()))).reshape(-1)
                          - ort_run(without_softmax(model), x).reshape(-1)).max())
        err = float(np.abs(p.reshape(-1) - ref.reshape(-1)).max())
        assert err <= HALF_LSB + dz / 2 + UNIT_ERROR, (err, dz)
        # The unit alone: against NumPy's softmax of the accelerator's own logits.
        z = np.asarray(next(iter(logits.run({name: x}).values())), np.float64).reshape(ref.shape)
        e = np.exp(z - z.max(axis=axis, keepdims=True))
        exact = e / e.sum(axis=axis, keepdims=True)
        assert np.abs(p.reshape(ref.shape) - exact).max() <= HALF_LSB + UNIT_ERROR
        worst = max(worst, err)
    return worst


@pytest.mark.parametrize("classes, opset, four_d", [(10, 13, False), (37, 11, False), (37, 13, True), (16, 7, False)])
def test_gemm_softmax_on_the_unit_matches_onnxruntime(classes, opset, four_d):
    model = gemm_softmax(classes, opset, four_d)
    rng = np.random.default_rng(classes)
    xs = [rng.normal(0, s, (1, 24)).astype(np.float32) for s in (0.5, 2.0, 6.0)]  # flat to peaked distributions
    check_against_onnxruntime(model, xs)


def test_classifier_ending_in_softmax_runs_wholly_on_the_accelerator():
    model = build_case("host/softmax")  # Conv-Relu-GlobalAveragePool-Flatten-Gemm-Softmax
    compiled = compile_model(model, TANDEM, host=False)
    assert compiled.summary.host_nodes == []
    rng = np.random.default_rng(3)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    check_against_onnxruntime(model, [rng.normal(0, 1, shape).astype(np.float32) for _ in range(2)])


def test_without_the_unit_softmax_stays_on_the_host():
    model = build_case("host/softmax")
    compiled = compile_model(model, "ultra96v2")
    assert compiled.summary.host_nodes == ["softmax"]
    assert compiled.summary.host_reasons == {"softmax": NO_IMPLEMENTATION}


def test_softmax_not_over_the_channels_goes_to_the_host_with_the_reason():
    # Opset 13 over axis -1 of [1, C, 1, 1] is over a dimension of size 1 (every output 1).
    model = gemm_softmax(10, 13, four_d=True)
    for node in model.graph.node:
        if node.op_type == "Softmax":
            node.attribute[0].i = -1
    compiled = compile_model(model, TANDEM)
    assert compiled.summary.host_nodes == ["softmax"]
    assert "runs Softmax over the channel axis" in compiled.summary.host_reasons["softmax"]
    x = np.ones((1, 24), np.float32)
    np.testing.assert_allclose(np.asarray(compiled.run({"x": x})["p"]).reshape(-1), ort_run(model, x).reshape(-1), atol=0)


def test_estimate_shows_the_unit_busy(tmp_path, capsys):
    compiled = compile_model(gemm_softmax(37, 13), TANDEM, host=False)
    tmodel = compiled.save(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["estimate", str(tmodel), "--board", "ultra96-v2", "--json"])
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    tandem = json.loads(out.out)["units"]["tandem"]
    assert tandem["busy_cycles"] > 3 * 14  # at least the exp loop over the 3 groups


def per_pixel_model(kind: str, opset: int = 13) -> tuple[onnx.ModelProto, list[int]]:
    """Softmax over the channels of every pixel: a Conv's ``[1, 20, 3, 4]`` map (axis 1), or the
    rows of a MatMul's ``[1, 6, 37]`` tokens (the last axis)."""
    rng = np.random.default_rng(5)
    if kind == "map":
        w = rng.normal(0, 0.4, (20, 5, 3, 3)).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "w"], ["z"], name="conv", pads=[1, 1, 1, 1]),
                 helper.make_node("Softmax", ["z"], ["p"], name="softmax", axis=1)]
        shape = [1, 5, 3, 4]
    else:
        w = rng.normal(0, 0.4, (24, 37)).astype(np.float32)
        nodes = [helper.make_node("MatMul", ["x", "w"], ["z"], name="matmul"),
                 helper.make_node("Softmax", ["z"], ["p"], name="softmax", axis=-1)]
        shape = [1, 6, 24]
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("p", onnx.TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m, shape


@pytest.mark.parametrize("kind", ["map", "tokens"])
def test_softmax_over_the_channels_of_every_pixel(kind):
    model, shape = per_pixel_model(kind)
    rng = np.random.default_rng(8)
    check_against_onnxruntime(model, [rng.normal(0, 2, shape).astype(np.float32)])


def test_softmax_over_channels_and_pixels_together_goes_to_the_host():
    # Before opset 13, axis 1 of a [1, C, H, W] map takes C x H x W as one softmax.
    model, _ = per_pixel_model("map", opset=11)
    compiled = compile_model(model, TANDEM)
    assert compiled.summary.host_nodes == ["softmax"]


def test_logits_also_an_output_keep_their_layer_and_the_softmax_has_its_own():
    # The logits are read twice, so post-op fusion leaves the Softmax a layer of its own (a 1x1
    # copy, then the unit); the Gemm's tail then saves the logits and goes on to the softmax
    # (``systolix.hir_passes.fuse_preactivations``, activations in DRAM): one layer, both outputs right.
    model = gemm_softmax(37, 13)
    model.graph.output.append(helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [1, 37]))
    compiled = compile_model(model, TANDEM, host=False)
    assert len(compiled.summary.layers) == 1
    x = np.random.default_rng(2).normal(0, 2, (1, 24)).astype(np.float32)
    out = compiled.run({"x": x})
    z = np.asarray(out["z"], np.float64).reshape(-1)
    exact = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    assert np.abs(np.asarray(out["p"]).reshape(-1) - exact).max() <= HALF_LSB + UNIT_ERROR
