"""with_rounded_tensors: the float model with every computed tensor on the fixed-point grid,
checked against the same computation written in NumPy."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from systolix.models.rounded import rounded_feeds, with_rounded_tensors
from systolix.numerics.datatypes import DataType

pytestmark = pytest.mark.needs_onnxruntime

LSB = 2.0 ** -8


def _grid(x: np.ndarray) -> np.ndarray:
    """FP16BP8 as the driver converts: half up, saturated at [-128, 128 - 2^-8]."""
    return np.clip(np.floor(x / LSB + 0.5) * LSB, -128.0, 128.0 - LSB)


def _model(opset: int) -> tuple[onnx.ModelProto, np.ndarray]:
    """x[1,6] -> MatMul w -> Relu -> + 3x -> Reshape to [2,3] (a shape computed from Shape(x)) -> y,
    and z = 100 * x, which saturates."""
    w = np.random.default_rng(0).normal(0, 1.0, (6, 6)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Mul", ["x", "three"], ["x3"]),
        helper.make_node("Add", ["r", "x3"], ["s"]),
        # int64 shape arithmetic, [1, 6] * [2, 1] / [1, 2] = [2, 3]: left as it is
        helper.make_node("Shape", ["x"], ["shape_x"]),
        helper.make_node("Mul", ["shape_x", "two_one"], ["shape_m"]),
        helper.make_node("Div", ["shape_m", "one_two"], ["shape_y"]),
        helper.make_node("Reshape", ["s", "shape_y"], ["y"]),
        helper.make_node("Mul", ["x", "hundred"], ["z"]),
    ]
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(3.0, np.float32), "three"),
             numpy_helper.from_array(np.array(100.0, np.float32), "hundred"),
             numpy_helper.from_array(np.array([2, 1], np.int64), "two_one"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "one_two")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 6])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [1, 6])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model, w


@pytest.mark.parametrize("opset", [9, 21])
def test_every_computed_tensor_is_rounded_and_saturated(opset):
    model, w = _model(opset)
    rounded = with_rounded_tensors(model, DataType.FP16BP8)
    onnx.checker.check_model(rounded)
    raw = (np.random.default_rng(1).normal(0, 1.0, (1, 6)) + 1 / 512).astype(np.float32)
    x = rounded_feeds({"x": raw})["x"]  # the driver's conversion of the input
    np.testing.assert_array_equal(x, _grid(raw))
    session = ort.InferenceSession(rounded.SerializeToString(), providers=["CPUExecutionProvider"])
    y, z = session.run(["y", "z"], {"x": x})
    # NumPy, rounding after each op; the product sums are exact (float64 here, float32 there)
    h = _grid(x.astype(np.float64) @ w)
    expected_y = _grid(_grid(np.maximum(h, 0)) + _grid(3 * x)).reshape(2, 3)
    np.testing.assert_allclose(y, expected_y, atol=1e-6)
    assert np.all(np.abs(y / LSB - np.round(y / LSB)) < 1e-3), "outputs on the 2^-8 grid"
    np.testing.assert_array_equal(z, _grid(100 * x))
    assert z.max() == 128 - LSB or z.min() == -128, "100x the input saturates"
    # The float model differs: the rounding is real
    plain_y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]
    assert not np.array_equal(plain_y, y)


def test_the_original_model_is_left_unchanged():
    model, _ = _model(13)
    before = model.SerializeToString()
    with_rounded_tensors(model)
    assert model.SerializeToString() == before


def test_float_types_are_refused():
    model, _ = _model(13)
    with pytest.raises(ValueError, match="FLOAT32 is not a fixed-point type"):
        with_rounded_tensors(model, DataType.FLOAT32)


def test_a_tensor_only_batch_norms_read_is_not_rounded():
    """Conv -> BatchNormalization: a compiler folds the batch norm into the conv, so only the
    batch norm's output is stored and rounded."""
    w = np.full((1, 1, 1, 1), 1 / 1024, np.float32)  # x / 1024: far below one LSB
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"], epsilon=0.0)]
    inits = [numpy_helper.from_array(w, "w")] + [
        numpy_helper.from_array(np.array([v], np.float32), n)
        for n, v in [("scale", 512.0), ("bias", 0.0), ("mean", 0.0), ("var", 1.0)]]
    graph = helper.make_graph(nodes, "conv_bn", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 1, 1])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1, 1, 1])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(with_rounded_tensors(model).SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.full((1, 1, 1, 1), 0.75, np.float32)
    # folded: 0.75 * 512 / 1024 = 0.375 exactly; rounding the conv's 0.75/1024 first would give 0
    assert float(session.run(None, {"x": x})[0].reshape(())) == 0.375
