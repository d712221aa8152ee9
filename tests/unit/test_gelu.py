"""GeLU on the accelerator: one SIMD post-op sequence, every FP16BP8 input through the emulator
within the error the README states, and a Conv + GeLU against onnxruntime within the error
model's bound."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from systolix.compiler import compile_model
from systolix.lowering.ops.gelu import MAX_ERROR_LSB, erf
from tests.exhaustive import conv_3x3, error_against_onnxruntime, every_input, largest_error_lsb
from tests.onnx_builders import ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

LSB = 2.0 ** -8


def gelu_nodes(x: str, y: str, form: str):
    if form in ("none", "tanh"):
        return [helper.make_node("Gelu", [x], [y], name="gelu", approximate=form)]
    if form.startswith("tanh_"):  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch writes it
        c = {k: helper.make_node("Constant", [], [k], value=helper.make_tensor(k + "v", 1, [], [v]))
             for k, v in (("three", 3.0), ("kappa", 0.044715), ("beta", np.sqrt(2 / np.pi)), ("one", 1.0), ("half", 0.5))}
        cube = ([helper.make_node("Pow", [x, "three"], ["x3"], name="pow")] if form == "tanh_pow" else
                [helper.make_node("Mul", [x, x], ["x2"], name="sq"), helper.make_node("Mul", [x, "x2"], ["x3"], name="cube")])
        return [*c.values(), *cube, helper.make_node("Mul", ["kappa", "x3"], ["k"], name="kappa"),
                helper.make_node("Add", [x, "k"], ["s"], name="inner"), helper.make_node("Mul", ["s", "beta"], ["sb"], name="beta"),
                helper.make_node("Tanh", ["sb"], ["t"], name="tanh"), helper.make_node("Add", ["t", "one"], ["a"], name="add"),
                helper.make_node("Mul", [x, "half"], ["h"], name="half"), helper.make_node("Mul", ["h", "a"], [y], name="mul")]
    half = helper.make_tensor("half", 1, [], [0.5])
    one = helper.make_tensor("one", 1, [], [1.0])
    scale = helper.make_node("Constant", [], ["k"], value=helper.make_tensor("kv", 1, [], [np.sqrt(2.0) if form != "erf_mul" else np.sqrt(0.5)]))
    consts = [scale, helper.make_node("Constant", [], ["one"], value=one), helper.make_node("Constant", [], ["half"], value=half)]
    head = [helper.make_node("Mul" if form == "erf_mul" else "Div", [x, "k"], ["d"], name="div"),
            helper.make_node("Erf", ["d"], ["e"], name="erf"), helper.make_node("Add", ["one", "e"] if form == "erf_mul" else ["e", "one"], ["a"], name="add")]
    if form == "erf_half_first":  # Mul(Mul(x, 0.5), 1 + erf)
        return consts + head + [helper.make_node("Mul", ["half", x], ["h"], name="half"), helper.make_node("Mul", ["a", "h"], [y], name="mul")]
    return consts + head + [helper.make_node("Mul", [x, "a"] if form == "erf" else ["a", x], ["m"], name="mul"),
                            helper.make_node("Mul", ["m", "half"], [y], name="half")]


def test_gelu_on_every_input_within_the_stated_error():
    x, y = every_input("Gelu", opset=20, nodes=gelu_nodes("x", "y", "none"))
    err = largest_error_lsb(y, 0.5 * x * (1 + erf(x / np.sqrt(2))))
    print(f"largest error {err:.3f} LSB over 65,536 inputs")
    assert err <= MAX_ERROR_LSB


@pytest.mark.parametrize("form", ["none", "tanh", "erf", "erf_mul", "erf_half_first", "tanh_pow", "tanh_mul"])
def test_conv_gelu_is_one_layer_within_the_bound(form):
    rng = np.random.default_rng(5)
    p = {"w": rng.normal(0, 0.3, (17, 5, 3, 3)).astype(np.float32), "b": rng.normal(0, 0.5, 17).astype(np.float32)}
    m = make_model([conv_3x3(),
                    *gelu_nodes("c", "y", form)], [("x", [1, 5, 7, 6])], [("y", None)], p, opset=20)
    (layer,) = ir_of(m, "ultra96v2").layers
    assert [p.kind for p in layer.post_ops] == ["gelu"]
    if form.startswith(("erf", "tanh_")):
        assert not [n for n in m.graph.node if n.op_type == "Gelu"]
    err, bound = error_against_onnxruntime(m, rng)
    assert err <= bound


def test_an_erf_outside_a_gelu_runs_on_the_host():
    m = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Erf", ["r"], ["y"], name="erf")],
                   [("x", [1, 5, 4, 4])], [("y", None)])
    x = np.random.default_rng(6).normal(0, 1, (1, 5, 4, 4)).astype(np.float32)
    ours = compile_model(m, "ultra96v2").run({"x": x})["y"]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.max(np.abs(ours - ref)) <= 2 * LSB


def test_an_erf_gelu_whose_inside_is_read_elsewhere_is_not_fused():
    m = make_model([*gelu_nodes("x", "y", "erf"), helper.make_node("Relu", ["e"], ["z"], name="relu")],
                   [("x", [1, 5, 4, 4])], [("y", None), ("z", None)])
    x = np.random.default_rng(7).normal(0, 1, (1, 5, 4, 4)).astype(np.float32)
    ours = compile_model(m, "ultra96v2").run({"x": x})
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, r in zip(("y", "z"), ref):
        assert np.max(np.abs(ours[name] - r)) <= 4 * LSB
