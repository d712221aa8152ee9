"""Element-wise functions and reductions for transformers (issue 21 part 3): Sigmoid, Tanh, GeLU,
Sqrt and Div of two tensors on the Tandem unit, Pow(x, 2), ReduceMean/ReduceSum/ReduceMax over
the layout's axes; against NumPy / onnxruntime on inputs on the FP16BP8 grid.

Bounds (the output's rounding, ``2^-9``, plus the unit's arithmetic in FP32BP16, ``2^-16`` a step):
``exp`` carries the polynomial's relative error ``POLY_REL_ERROR``; the sigmoid moves by at most a
quarter of ``e``'s error (``|ds/de| = s^2 <= 1``, ``e <= 1``), tanh by twice it; GeLU is ``x Phi``
with ``Phi`` within half the erfc fit's error plus ``exp``'s; Sqrt's ``1/sqrt`` is LayerNorm's
(``2^-13`` relative); eight wide steps for the roundings between.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from systolix.codegen.tandem_elementwise import ERFC_ERROR
from systolix.codegen.tandem_softmax import POLY_REL_ERROR
from systolix.compiler import compile_model
from systolix.lowering import NO_IMPLEMENTATION
from systolix.lowering.ops import gelu, sigmoid, tanh
from systolix.lowering.ops.tandem_functions import EXACT
from systolix.runtime.model import SaturationWarning

pytestmark = [pytest.mark.needs_emulator]

TANDEM = "ultra96v2_tandem"
LSB = 1 / 256
HALF_LSB = LSB / 2
STEPS = 8 * 2.0 ** -16


def single_op(op: str, shape, inits=(), extra_inputs=(), opset=20, **attrs) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits]
    inputs = ["x", *extra_inputs] + [i.name for i in inits]
    nodes = [helper.make_node(op, inputs, ["y"], name="f", **attrs)]
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, shape) for n in ("x", *extra_inputs)],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def uses_the_unit(compiled) -> bool:
    """Whether any of the compiled programs holds a Tandem instruction (opcodes 0x6-0xD)."""
    from systolix.arch import ARCHITECTURES
    from systolix.isa import InstructionLayout, decode_program

    layout = InstructionLayout.of(ARCHITECTURES[TANDEM])
    return any(((p := decode_program(data, layout)).opcode >= 6).any() and (p.opcode <= 13).any()
               for name, data in compiled.artifacts.items() if name.endswith(".tprog"))


def grid_inputs() -> np.ndarray:
    """Every FP16BP8 value in [-8, 8), and every 61st raw value over the whole range."""
    raw = np.concatenate([np.arange(-8 * 256, 8 * 256), np.arange(-32768, 32768, 61)])
    raw = np.concatenate([raw, np.zeros((-len(raw)) % 16, raw.dtype)])
    return raw / 256.0


BOUNDS = {
    "sigmoid": lambda x: HALF_LSB + POLY_REL_ERROR / 4 + STEPS,
    "tanh": lambda x: HALF_LSB + 2 * POLY_REL_ERROR + STEPS,
    "gelu": lambda x: HALF_LSB + STEPS + np.abs(x) * (ERFC_ERROR / 2 + POLY_REL_ERROR + STEPS),
    "gelu_tanh": lambda x: HALF_LSB + STEPS + np.abs(x) * (POLY_REL_ERROR / 4 + STEPS),
    "sqrt": lambda x: HALF_LSB + np.sqrt(np.maximum(x, 0)) * 2.0 ** -13 + STEPS,
}
STOCK_LSB = {"sigmoid": sigmoid.MAX_ERROR_LSB, "tanh": tanh.MAX_ERROR_LSB, "gelu": gelu.MAX_ERROR_LSB, "gelu_tanh": gelu.MAX_ERROR_LSB}


@pytest.mark.parametrize("op, function, attrs", [("Sigmoid", "sigmoid", {}), ("Tanh", "tanh", {}), ("Gelu", "gelu", {}),
                                                 ("Gelu", "gelu_tanh", {"approximate": "tanh"}), ("Sqrt", "sqrt", {})])
def test_functions_on_the_unit_over_the_fp16bp8_grid_within_the_derived_bound(op, function, attrs):
    x = grid_inputs()
    compiled = compile_model(single_op(op, [1, len(x) // 16, 16], **attrs), TANDEM, host=False)
    assert uses_the_unit(compiled)
    y = np.asarray(compiled.run({"x": x.reshape(1, -1, 16).astype(np.float32)})["y"], np.float64).reshape(-1)
    exact = EXACT[function](x)
    err = np.abs(y - exact)
    assert np.all(err <= BOUNDS[function](x)), (x[np.argmax(err)], err.max() / LSB)
    if function in STOCK_LSB:  # better than the stock TCU's SIMD line fits
        assert err.max() / LSB < 0.55 < STOCK_LSB[function]


@pytest.mark.parametrize("tanh_form", [False, True])
def test_torchs_gelu_exports_run_on_the_unit_in_the_form_they_state(tanh_form):
    """``x * 0.5 * (1 + Erf(x / sqrt 2))`` and ``0.5 x (1 + Tanh(sqrt(2/pi) (x + 0.044715 Pow(x, 3))))`` node by node."""
    c = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float32), name)  # noqa: E731
    if tanh_form:
        inits = [c("three", 3.0), c("k", 0.044715), c("s", np.sqrt(2 / np.pi)), c("one", 1.0), c("half", 0.5)]
        nodes = [helper.make_node("Pow", ["x", "three"], ["p"]), helper.make_node("Mul", ["p", "k"], ["pk"]),
                 helper.make_node("Add", ["x", "pk"], ["in"]), helper.make_node("Mul", ["in", "s"], ["ins"]),
                 helper.make_node("Tanh", ["ins"], ["t"]), helper.make_node("Add", ["t", "one"], ["t1"]),
                 helper.make_node("Mul", ["x", "t1"], ["xt"]), helper.make_node("Mul", ["xt", "half"], ["y"], name="f")]
    else:
        inits = [c("r2", np.sqrt(2.0)), c("one", 1.0), c("half", 0.5)]
        nodes = [helper.make_node("Div", ["x", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["x", "e1"], ["xe"]),
                 helper.make_node("Mul", ["xe", "half"], ["y"], name="f")]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 256, 16])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = compile_model(model, TANDEM, host=False)
    assert uses_the_unit(compiled)
    x = np.arange(-8 * 256, 8 * 256) / 256.0
    y = np.asarray(compiled.run({"x": x.reshape(1, -1, 16).astype(np.float32)})["y"], np.float64).reshape(-1)
    function = "gelu_tanh" if tanh_form else "gelu"
    assert np.all(np.abs(y - EXACT[function](x)) <= BOUNDS[function](x))


def test_without_the_unit_the_stock_sequences_stay():
    for op in ("Sigmoid", "Tanh", "Gelu"):
        compiled = compile_model(single_op(op, [1, 4, 16]), "ultra96v2", host=False)
        assert not uses_the_unit(compiled)
    compiled = compile_model(single_op("Sqrt", [1, 4, 16]), "ultra96v2")
    assert compiled.summary.host_reasons == {"f": NO_IMPLEMENTATION}


@pytest.mark.needs_onnxruntime
def test_division_of_two_computed_tensors_on_the_unit():
    rng = np.random.default_rng(4)
    x = np.round(rng.uniform(-20, 20, (1, 6, 24)) * 256) / 256
    d = np.round(rng.uniform(0.25, 4, (1, 6, 24)) * 256) * np.sign(rng.normal(size=(1, 6, 24))) / 256
    d[0, 0, :3] = 0.0  # by zero: the largest value of x's sign (0 for 0 / 0)
    x[0, 0, 2] = 0.0
    model = single_op("Div", [1, 6, 24], extra_inputs=["d"])
    compiled = compile_model(model, TANDEM, host=False)
    with pytest.warns(SaturationWarning):  # the divisions by zero saturate
        y = np.asarray(compiled.run({"x": x.astype(np.float32), "d": d.astype(np.float32)})["y"], np.float64)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32), "d": d.astype(np.float32)})[0]
    finite = d != 0
    # One correctly rounded division in the wide type, then the rounding to FP16BP8 (saturating).
    assert np.all(np.abs(y - np.clip(ref, -128, 128 - LSB))[finite] <= HALF_LSB + 2.0 ** -17)
    assert y[0, 0, 0] == (128 - LSB if x[0, 0, 0] > 0 else -128) and y[0, 0, 2] == 0.0
    assert compile_model(model, "ultra96v2").summary.host_nodes == ["f"]


@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("numerator", ["reciprocal", "scalar", "per_channel"])
def test_a_constant_divided_by_a_tensor_on_the_unit(numerator):
    """``Reciprocal(x)`` and ``Div(c, x)`` (a scalar, or one value per channel of a 40-channel
    map: three groups, the last partly padding): one correctly rounded Div a vector."""
    rng = np.random.default_rng(7)
    shape = [1, 40, 3, 5]
    x = np.round(rng.uniform(0.3, 9, shape) * np.sign(rng.normal(size=shape)) * 256) / 256
    if numerator == "reciprocal":
        model = single_op("Reciprocal", shape)
    else:
        c = np.float32(2.5) if numerator == "scalar" else rng.uniform(-3, 3, (1, 40, 1, 1)).astype(np.float32)
        g = helper.make_graph([helper.make_node("Div", ["c", "x"], ["y"], name="f")], "f",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [numpy_helper.from_array(c, "c")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
    compiled = compile_model(model, TANDEM, host=False)
    y = np.asarray(compiled.run({"x": x.astype(np.float32)})["y"], np.float64)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x.astype(np.float32)})[0]
    # the numerator on FP16BP8's grid (half an LSB), divided by |x| >= 0.3; the Div's and the output's roundings
    assert np.all(np.abs(y - ref) <= HALF_LSB / np.abs(x) * (numerator == "per_channel") + HALF_LSB + 2.0 ** -17)
    assert compile_model(model, "ultra96v2").summary.host_nodes == ["f"]


def test_pow_two_is_a_square_on_every_architecture_and_pow_half_a_sqrt_on_the_unit():
    x = (np.arange(-11 * 256, 11 * 256, 7) / 256.0)
    x = np.concatenate([x, np.zeros((-len(x)) % 16)]).reshape(1, -1, 16)
    for arch in ("ultra96v2", TANDEM):
        compiled = compile_model(single_op("Pow", list(x.shape), inits=[("p", 2.0)]), arch, host=False)
        y = np.asarray(compiled.run({"x": x.astype(np.float32)})["y"], np.float64)
        assert np.abs(y - x * x).max() <= HALF_LSB
    compiled = compile_model(single_op("Pow", list(x.shape), inits=[("p", 0.5)]), TANDEM, host=False)
    y = np.asarray(compiled.run({"x": np.abs(x).astype(np.float32)})["y"], np.float64)
    assert np.all(np.abs(y - np.sqrt(np.abs(x))) <= BOUNDS["sqrt"](np.abs(x)))
    reasons = compile_model(single_op("Pow", list(x.shape), inits=[("p", 3.0)]), TANDEM).summary.host_reasons
    assert "Pow with exponent 3.0" in reasons["f"]


def reduction(op: str, shape, axes, keepdims: int) -> onnx.ModelProto:
    """Axes as an attribute (opset 17) for ViT's case, [1, 64, 16] over [1]; else as an input (opset 18)."""
    opset = 17 if shape == [1, 64, 16] else 18
    if opset < 18:
        return single_op(op, shape, opset=opset, axes=axes, keepdims=keepdims)
    return single_op(op, shape, inits=[("axes", np.array(axes))], opset=opset, keepdims=keepdims)


def _axes_input(model: onnx.ModelProto) -> onnx.ModelProto:
    for init in model.graph.initializer:
        if init.name == "axes":
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.int64), "axes"))
    return model


@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("op, shape, axes, keepdims", [
    ("ReduceMean", [1, 64, 16], [1], 0),  # ViT's token_mean
    ("ReduceMean", [1, 12, 40], [-1], 1), ("ReduceMean", [1, 12, 40], [1, 2], 0), ("ReduceSum", [1, 12, 40], [1], 0),
    ("ReduceMax", [1, 12, 40], [1], 1), ("ReduceMax", [1, 5, 6, 7], [2], 0), ("ReduceMean", [1, 5, 6, 7], [3], 1),
    ("ReduceSum", [1, 5, 6, 7], [1], 1), ("ReduceMean", [6, 20], [0], 0),
])
def test_reductions_over_the_layouts_axes_match_onnxruntime(op, shape, axes, keepdims):
    """Every input on the grid. A mean or sum adds products ``x 2^-s`` rounded to an LSB (``2^s``:
    4 to 8x below the count ``n``), scales back by ``2^s / n`` (``2^s`` for a sum) in two SIMD
    multiplies, each rounding half an LSB, with multipliers on a grid of ``2^-9`` relative: at most
    ``n/2 LSB 2^s/n + 1 LSB + |y| 2^-8``. A max is exact."""
    model = _axes_input(reduction(op, shape, axes, keepdims))
    compiled = compile_model(model, "ultra96v2", host=False)
    x = np.round(np.random.default_rng(len(shape)).normal(0, 2, shape) * 256).astype(np.float32) / 256
    y = np.asarray(compiled.run({"x": x})["y"], np.float64)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == ref.shape
    n = int(np.prod([shape[a] for a in axes]))
    s = max(0, int(np.floor(np.log2(n))) - 2)
    scale = 2.0 ** s / (n if op == "ReduceMean" else 1)
    bound = 0 if op == "ReduceMax" else n * HALF_LSB * scale + LSB + np.abs(ref) * 2.0 ** -8
    assert np.all(np.abs(y - ref) <= bound)


@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("shape, axes, keepdims", [([1, 12, 40], [2], 0), ([1, 20, 3, 4], [1], 1), ([1, 12, 40], [1, 2], 0),
                                                   ([5, 32], [1], 0)])
def test_a_max_over_the_channels_on_the_unit_is_exact(shape, axes, keepdims):
    """All values negative, so that a padding lane (40 channels: 8 of the third group's 16) not
    masked off would win."""
    model = _axes_input(reduction("ReduceMax", shape, axes, keepdims))
    compiled = compile_model(model, TANDEM, host=False)
    assert uses_the_unit(compiled)
    x = (np.round(np.random.default_rng(1).normal(-50, 3, shape) * 256) / 256).astype(np.float32)
    y = np.asarray(compiled.run({"x": x})["y"])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == ref.shape and np.array_equal(y, ref)


def test_reductions_the_layout_does_not_give_stay_on_the_host_with_the_reason():
    compiled = compile_model(_axes_input(reduction("ReduceMax", [1, 12, 40], [2], 0)), "ultra96v2")
    assert "a max over the channel axis" in compiled.summary.host_reasons["f"]
    with_unit = compile_model(_axes_input(reduction("ReduceMean", [2, 3, 4], [0], 0)), TANDEM)  # rank 3, batch 2
    assert "cannot be laid out on the accelerator" in with_unit.summary.host_reasons["f"]


def test_vit_tiny_runs_its_layer_norms_and_token_mean_on_the_unit():
    from systolix.models import build

    compiled = compile_model(build("vit_tiny"), TANDEM)
    ops = {n.op_type for n in build("vit_tiny").graph.node if n.name in compiled.summary.host_nodes}
    assert not ops & {"LayerNormalization", "ReduceMean", "Erf", "Div"}
