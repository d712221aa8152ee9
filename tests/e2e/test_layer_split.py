"""A layer whose constants alone exceed DRAM1 (VGG-19's first fully connected layer on the
Ultra96-V2) is split by output channels into slices in programs run one after another; the
slices' results gather into the layer's output tensor. Small models on an architecture with a
small DRAM1 stand in for the real size: every value is the one the same model compiled for a
DRAM1 large enough computes, and within the error bound of onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from rich.console import Console

from systolix.arch import get_architecture
from systolix.cli.compile import summary_tables
from systolix.compiler import compile_model
from systolix.planning.errors import SchedulingError
from tests.error_model import output_bounds
from tests.onnx_builders import conv_bn_relu, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def classifier(op: str = "Gemm", seed: int = 0):
    """Flatten, a fully connected layer 64 -> 200 (as VGG's, ``transB``; or a MatMul), ReLU and
    a second one 200 -> 10."""
    rng = np.random.default_rng(seed)
    p = {"w1": rng.normal(0, 0.15, (200, 64)).astype(np.float32), "b1": rng.normal(0, 0.1, 200).astype(np.float32),
         "w2": rng.normal(0, 0.1, (200, 10)).astype(np.float32)}
    if op == "Gemm":
        fc1 = helper.make_node("Gemm", ["f", "w1", "b1"], ["g"], name="fc1", transB=1)
    elif op == "Gemm alpha beta":
        # B not transposed, C a row: both sliced along the outputs; alpha and beta kept.
        p["w1"], p["b1"] = np.ascontiguousarray(p["w1"].T), p["b1"].reshape(1, 200)
        fc1 = helper.make_node("Gemm", ["f", "w1", "b1"], ["g"], name="fc1", alpha=0.5, beta=2.0)
    else:
        p["w1"] = np.ascontiguousarray(p["w1"].T)
        fc1 = helper.make_node("MatMul", ["f", "w1"], ["g"], name="fc1")
        del p["b1"]
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1), fc1, helper.make_node("Relu", ["g"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2"], ["y"], name="fc2")]
    return make_model(nodes, [("x", [1, 4, 4, 4])], [("y", None)], p)


def small_dram1(depth: int):
    return get_architecture("pynqz1").model_copy(update={"dram1_depth": depth})


def check_against_whole_and_onnxruntime(model, split, seed=1):
    whole = compile_model(model, "pynqz1", estimate_gains=False)
    assert whole.summary.constant_cuts == 0 and not whole.summary.split_layers
    rng = np.random.default_rng(seed)
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    items = [{name: rng.normal(0, 1, shape).astype(np.float32)} for _ in range(2)]
    batch = {name: np.stack([it[name] for it in items])}
    ours = next(iter(split.run(batch).values()))
    np.testing.assert_array_equal(ours, next(iter(whole.run(batch).values())))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for k, item in enumerate(items):
        ref = sess.run(None, item)[0]
        assert float(np.max(np.abs(ours[k] - ref))) <= next(iter(output_bounds(model, item).values()))


@pytest.mark.parametrize("op", ["Gemm", "Gemm alpha beta", "MatMul"])
def test_a_fully_connected_layer_past_dram1_is_split_by_output_channels(op):
    # fc1 reads the 4x4x4 input in place: 25 groups of 8 outputs, 129 vectors each (3,225 in all).
    model = classifier(op)
    depth = 700
    # The vector counts above are the plain layout's (a packed input halves fc1's: below).
    split = compile_model(model, small_dram1(depth), pack_inputs=False, estimate_gains=False)
    assert list(split.summary.split_layers) == ["fc1"] and split.summary.split_layers["fc1"] >= 3
    segments = split.summary.segments
    assert all(s.kind == "accelerator" and s.lir.consts.shape[0] <= depth for s in segments)
    # Each slice holds whole groups of 8 output channels; the Concat gathers them into fc1's output.
    slices = [n for n in split.summary.placement_ops if n.startswith("fc1/channels_")]
    bounds = sorted(tuple(int(c) for c in n.rsplit("_", 2)[1:]) for n in slices)
    assert bounds[0][0] == 0 and bounds[-1][1] == 200 and all(a[1] == b[0] and a[1] % 8 == 0 for a, b in zip(bounds, bounds[1:]))
    assert split.summary.placement_ops["fc1/concat"] == ("Concat", "accelerator")
    assert len(segments) >= split.summary.split_layers["fc1"]
    check_against_whole_and_onnxruntime(model, split)
    # The compile summary says so.
    console = Console(width=200, record=True)
    for table in summary_tables(split.summary):
        console.print(table)
    assert f"fc1 into {split.summary.split_layers['fc1']} slices of output channels" in console.export_text()


def test_a_convolution_past_dram1_is_split_with_its_batch_norm():
    # conv 8 -> 40 (3x3): 5 groups of 73 vectors; the batch norm is sliced with it and folds into
    # every slice's weights as it folds into the whole layer's.
    model, _ = conv_bn_relu(cin=8, cout=40, h=6, w=5)
    split = compile_model(model, small_dram1(200), estimate_gains=False)
    assert split.summary.split_layers == {"conv": 3}
    assert [n for n, (op, _) in split.summary.placement_ops.items() if op == "BatchNormalization"] == [
        "bn/channels_0_16", "bn/channels_16_32", "bn/channels_32_40"]
    assert all(s.lir.consts.shape[0] <= 200 for s in split.summary.segments)
    check_against_whole_and_onnxruntime(model, split)


def test_no_split_keeps_the_error():
    with pytest.raises(SchedulingError, match=r"constants need \d+ vectors of DRAM1 but the architecture has 700 "
                                              r"\(the largest share: layer 'fc1', 3225\); splitting .* off \(--no-split\)"):
        compile_model(classifier(), small_dram1(700), split=False, pack_inputs=False, estimate_gains=False)


def test_a_layer_whose_one_group_of_outputs_does_not_fit_is_an_error_naming_it():
    with pytest.raises(SchedulingError, match=r"layer 'fc1' \(node fc1, relu\): its constants need 3225 vectors of DRAM1 but the "
                                              r"architecture has 128; even one group of 8 output channels needs more"):
        compile_model(classifier(), small_dram1(128), pack_inputs=False, estimate_gains=False)


def test_a_split_layer_reading_a_packed_input_computes_the_same_function():
    # Packed, fc1's input takes half the vectors, so fc1 is split by the packed sizes; its slices
    # then share the input, which is no longer packed (packing is for an input one layer reads),
    # so they are split again. More programs than needed, but the same function.
    model = classifier("Gemm")
    split = compile_model(model, small_dram1(700), estimate_gains=False)
    assert split.summary.split_layers["fc1"] >= 3
    assert all(s.lir.consts.shape[0] <= 700 for s in split.summary.segments)
    check_against_whole_and_onnxruntime(model, split)
