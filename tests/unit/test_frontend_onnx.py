"""The frontend: loading, opset checks, shapes from onnxruntime, constant folding into the IR."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.frontend import FrontendError, to_graph
from tests.conftest import SPEECH
from tests.onnx_builders import conv_bn_relu, make_model


def test_not_an_onnx_file(tmp_path):
    p = tmp_path / "notes.onnx"
    p.write_text("this is not a protobuf, just some text\n" * 20)
    with pytest.raises(FrontendError, match="notes.onnx: not a valid ONNX"):
        to_graph(p)


def test_truncated_file(tmp_path):
    m, _ = conv_bn_relu()
    data = m.SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(FrontendError, match="cut.onnx: not a valid ONNX"):
        to_graph(p)


def test_empty_and_missing_file(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(FrontendError, match="empty file"):
        to_graph(tmp_path / "empty.onnx")
    with pytest.raises(FrontendError, match="no such ONNX file"):
        to_graph(tmp_path / "absent.onnx")


@pytest.mark.parametrize("opset", [6, 22])
def test_unsupported_opset(opset):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 4])], [("y", [1, 4])], opset=opset)
    with pytest.raises(FrontendError, match=f"opset {opset} is not supported"):
        to_graph(m)


@pytest.mark.parametrize("opset", [7, 9, 13, 21])
def test_supported_opsets(opset):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 4])], [("y", [1, 4])], opset=opset)
    g = to_graph(m)
    assert [n.op_type for n in g.nodes] == ["Relu"] and g.opset == opset


def test_dynamic_batch_becomes_one_but_other_dynamic_dims_are_errors():
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["N", 3])], [("y", None)])
    assert to_graph(m).tensor("x").shape == (1, 3)
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, "L"])], [("y", None)])
    with pytest.raises(FrontendError, match="dynamic dimension 'L' at axis 1"):
        to_graph(m)


def test_constant_subgraph_is_folded_by_onnx_tools():
    # Flatten written the way exporters do: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", 7, [], [0])),
        helper.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Constant", [], ["minus1"], value=helper.make_tensor("minus1", 7, [1], [-1])),
        helper.make_node("Concat", ["batch1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    m = make_model(nodes, [("x", [1, 3, 4, 5])], [("y", None)], {"axes": np.array([0], np.int64)})
    g = to_graph(m)
    assert [n.op_type for n in g.nodes] == ["Relu", "Reshape"]
    np.testing.assert_array_equal(g.const("target"), [1, -1])
    assert g.tensor("y").shape == (1, 60)


def test_shapes_come_from_onnxruntime():
    # onnx's shape inference says 31x31 for this Resize; onnxruntime (the reference) makes 32x32.
    g = to_graph(SPEECH / "speech_commands.onnx")
    assert g.tensor("Resize__11:0").shape == (1, 1, 32, 32)
    assert g.outputs == ["dense_1"] and g.inputs == ["input_1"]


def test_output_names_kept_exactly():
    m = make_model([helper.make_node("Relu", ["in put:0"], ["out/put:0"])], [("in put:0", [1, 4])], [("out/put:0", None)])
    g = to_graph(m)
    assert g.inputs == ["in put:0"] and g.outputs == ["out/put:0"]
