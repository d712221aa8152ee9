"""Old opsets (7 to 11) and what older exporters write: unused optional outputs (Dropout's mask,
BatchNormalization's training statistics), Upsample, LRN, attributes where newer opsets take
inputs (Clip, Pad, Squeeze, Unsqueeze), DepthToSpace and SpaceToDepth; and the variety of
exporters up to opset 21: PRelu's slope in every broadcast form, torch's shape arithmetic,
InstanceNormalization, MaxPool's indices and Split outputs nothing reads. Each model is compiled,
run on the emulator and compared with onnxruntime within the FP16BP8 bound of
``tests/error_model.py``."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from systolix.compiler import compile_model
from tests.error_model import output_bounds
from tests.onnx_builders import make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

X = [("x", [1, 3, 6, 5])]
BN = {"s": np.array([1.2, 0.8, 1.0], np.float32), "b": np.array([0.1, -0.2, 0.3], np.float32),
      "m": np.array([0.05, 0.0, -0.1], np.float32), "v": np.array([1.5, 0.7, 1.0], np.float32)}


def conv_then(nodes, opset, inits=(), cout=8):
    """A 3x3 conv (so that the op under test has an accelerator layer before it), then ``nodes``."""
    w = np.random.default_rng(3).normal(0, 0.3, (cout, 3, 3, 3)).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    return make_model([conv] + nodes, X, [("y", None)], {"w": w, **dict(inits)}, opset=opset)


def check(model, reference_model=None, host=False):
    x = np.random.default_rng(0).normal(0, 1, (1, 3, 6, 5)).astype(np.float32)
    reference_model = reference_model or model
    sess = ort.InferenceSession(reference_model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(["y"], {"x": x})[0]
    compiled = compile_model(model, "pynqz1", host=host)
    got = compiled.run({"x": x})["y"]
    assert got.shape == expected.shape
    bound = output_bounds(reference_model, {"x": x})["y"]
    err = float(np.max(np.abs(got - expected)))
    assert err <= bound, f"max error {err:.4f} > bound {bound:.4f}"
    return compiled


@pytest.mark.parametrize("opset", [7, 9, 10, 11])
def test_dropout_with_its_mask_output_unused(opset):
    """The mask has no static shape at opset 9 (it used to stop the compile) and is never read."""
    check(conv_then([helper.make_node("Dropout", ["c"], ["y", "mask"], name="drop")], opset))


def batch_norm(outs, opset, **attrs):
    node = helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], outs, name="bn", epsilon=1e-3, **attrs)
    return conv_then([node], opset, {k: np.resize(v, 8) for k, v in BN.items()})


@pytest.mark.parametrize("opset", [14, 15])
def test_batch_norm_statistics_outputs_unused_outside_training_mode(opset):
    """onnxruntime refuses them (its reference is the model without them); we drop them."""
    compiled = check(batch_norm(["y", "mean", "var"], opset), batch_norm(["y"], opset))
    assert not compiled.summary.host_nodes


@pytest.mark.parametrize("opset", [7, 9])
def test_batch_norm_in_training_mode_runs_on_the_host(opset):
    """Before opset 14 the statistics outputs put it in training mode: onnxruntime normalises by
    the batch's own statistics, and so does the host; the unused outputs need no shape."""
    compiled = check(batch_norm(["y", "mean", "var", "saved_mean", "saved_var"], opset), host=True)
    assert compiled.summary.host_nodes == ["bn"]


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("opset", [7, 8, 9])
def test_upsample_runs_as_a_resize(opset, mode):
    scales = [1.0, 1.0, 2.0, 3.0]
    if opset < 9:
        node, inits = helper.make_node("Upsample", ["c"], ["y"], name="up", mode=mode, scales=scales), {}
    else:
        node, inits = helper.make_node("Upsample", ["c", "scales"], ["y"], name="up", mode=mode), {"scales": np.array(scales, np.float32)}
    check(conv_then([node], opset, inits), host=False)


@pytest.mark.parametrize("opset", [7, 13])
def test_lrn_runs_on_the_host(opset):
    compiled = check(conv_then([helper.make_node("LRN", ["c"], ["y"], name="lrn", size=3, alpha=1e-3, beta=0.75)], opset),
                     host=True)
    assert compiled.summary.host_nodes == ["lrn"]


@pytest.mark.parametrize("opset", [7, 10])
def test_clip_pad_squeeze_unsqueeze_as_attributes(opset):
    nodes = [helper.make_node("Clip", ["c"], ["clip"], name="clip", min=-0.5, max=1.0),
             helper.make_node("Pad", ["clip"], ["pad"], name="pad", pads=[0, 0, 1, 2, 0, 0, 2, 1], mode="constant", value=0.25),
             helper.make_node("Unsqueeze", ["pad"], ["u"], name="unsqueeze", axes=[0]),
             helper.make_node("Squeeze", ["u"], ["y"], name="squeeze", axes=[0])]
    check(conv_then(nodes, opset))


def test_clip_pad_squeeze_unsqueeze_as_inputs():
    nodes = [helper.make_node("Clip", ["c", "lo", "hi"], ["clip"], name="clip"),
             helper.make_node("Pad", ["clip", "pads", "value"], ["pad"], name="pad", mode="constant"),
             helper.make_node("Unsqueeze", ["pad", "axes"], ["u"], name="unsqueeze"),
             helper.make_node("Squeeze", ["u", "axes"], ["y"], name="squeeze")]
    inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(1.0, np.float32), "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1]),
             "value": np.array(0.25, np.float32), "axes": np.array([0])}
    check(conv_then(nodes, 13, inits))


@pytest.mark.parametrize("opset,mode", [(7, None), (13, "DCR"), (13, "CRD")])
def test_depth_to_space_on_the_accelerator(opset, mode):
    attrs = {"blocksize": 2} | ({"mode": mode} if mode else {})
    check(conv_then([helper.make_node("DepthToSpace", ["c"], ["y"], name="d2s", **attrs)], opset))


@pytest.mark.parametrize("opset", [7, 13])
def test_space_to_depth_on_the_accelerator(opset):
    x = np.random.default_rng(0).normal(0, 1, (1, 3, 6, 4)).astype(np.float32)
    w = np.random.default_rng(3).normal(0, 0.3, (5, 3, 3, 3)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                        helper.make_node("SpaceToDepth", ["c"], ["y"], name="s2d", blocksize=2)],
                       [("x", [1, 3, 6, 4])], [("y", None)], {"w": w}, opset=opset)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = compile_model(model, "pynqz1", host=False).run({"x": x})["y"]
    assert got.shape == expected.shape
    assert float(np.max(np.abs(got - expected))) <= output_bounds(model, {"x": x})["y"]


# --- exporter variety: PRelu's broadcast forms, shape arithmetic, InstanceNormalization, unused outputs


def prelu(slope, opset, cout=8):
    return conv_then([helper.make_node("PRelu", ["c", "s"], ["y"], name="prelu")], opset, {"s": np.asarray(slope, np.float32)}, cout)


@pytest.mark.parametrize("opset", [7, 16, 21])
@pytest.mark.parametrize("shape", [(), (1,), (8, 1, 1), (1, 8, 1, 1), (1, 1, 1)], ids=str)
def test_prelu_slope_in_every_per_channel_form(shape, opset):
    """A scalar, a [1], torch's [C, 1, 1], a [1, C, 1, 1] and a [1, 1, 1]: one slope per channel."""
    slope = np.random.default_rng(5).uniform(0.05, 0.5, shape)
    compiled = check(prelu(slope, opset))
    assert compiled.summary.placement_ops["prelu"] == ("PRelu", "accelerator")


@pytest.mark.parametrize("shape", [(8, 6, 5), (1, 8, 6, 5), (5,), (6, 1)], ids=str)
def test_prelu_slope_varying_over_pixels(shape):
    """Keras' PReLU (a slope per element) and slopes along W or H: the slopes beside the tile."""
    compiled = check(prelu(np.random.default_rng(5).uniform(0.05, 0.95, shape), 9))
    assert compiled.summary.placement_ops["prelu"] == ("PRelu", "accelerator")


@pytest.mark.parametrize("strategy,memories", [("local-isolated", {"local_depth": 600, "accumulator_depth": 96}),
                                               ("local-consts", {})])
def test_prelu_slope_per_element_in_row_tiles_and_local_constants(strategy, memories):
    """Slopes above 1 (a min), the map read a few rows at a time, or from local memory."""
    from systolix.arch import get_architecture

    rng = np.random.default_rng(2)
    w, s = rng.normal(0, 0.3, (12, 3, 3, 3)).astype(np.float32), rng.uniform(1.0, 2.5, (12, 12, 10)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                        helper.make_node("PRelu", ["c", "s"], ["y"], name="prelu")], [("x", [1, 3, 12, 10])], [("y", None)],
                       {"w": w, "s": s})
    x = rng.normal(0, 1, (1, 3, 12, 10)).astype(np.float32)
    compiled = compile_model(model, get_architecture("pynqz1").model_copy(update=memories), strategy=strategy, host=False)
    if memories:
        assert compiled.summary.layers[0].stages > 1
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert float(np.max(np.abs(compiled.run({"x": x})["y"] - expected))) <= output_bounds(model, {"x": x})["y"]


def test_prelu_slopes_above_and_below_one():
    """A group of 8 channels takes one SIMD max (slopes up to 1) or min (above 1): the two kinds
    in different groups run on the accelerator, in one group on the host."""
    by_group = np.array([0.1] * 8 + [1.5] * 8).reshape(16, 1, 1)
    assert check(prelu(by_group, 9, cout=16)).summary.host_nodes == []
    mixed = np.array([0.1] * 4 + [1.5] * 12).reshape(16, 1, 1)
    compiled = check(prelu(mixed, 9, cout=16), host=True)
    assert "one group of 8 channels (channels 0 to 7)" in compiled.summary.host_reasons["prelu"]
    per_element = np.full((16, 6, 5), 0.2)
    per_element[9, 2, 3] = 1.5
    compiled = check(prelu(per_element, 9, cout=16), host=True)
    assert "one group of 8 channels (channels 8 to 15)" in compiled.summary.host_reasons["prelu"]


@pytest.mark.parametrize("opset", [9, 11, 13, 21])
def test_torch_view_by_its_own_size_folds(opset):
    """``x.view(x.size(0), -1)`` as torch exports it: Shape, Gather, Unsqueeze (axes an attribute
    before opset 13, an input after), Concat with -1, Reshape; all folded to a constant shape."""
    const = lambda name, values: helper.make_node("Constant", [], [name], value=helper.make_tensor(name, 7, np.shape(values), np.ravel(values)))
    nodes = [helper.make_node("Shape", ["c"], ["shape"]), const("zero", 0), helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0)]
    if opset < 13:
        nodes.append(helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]))
    else:
        nodes += [const("axes", [0]), helper.make_node("Unsqueeze", ["n", "axes"], ["n1"])]
    nodes += [const("rest", [-1]), helper.make_node("Concat", ["n1", "rest"], ["size"], axis=0),
              helper.make_node("Reshape", ["c", "size"], ["f"], name="view"), helper.make_node("MatMul", ["f", "wf"], ["y"], name="fc")]
    compiled = check(conv_then(nodes, opset, {"wf": np.random.default_rng(6).normal(0, 0.1, (240, 7)).astype(np.float32)}))
    assert set(compiled.summary.placement_ops) == {"conv", "view", "fc"}


IN_PARAMS = {"sc": np.array([1.2, 0.6, 1.0, 0.9, 1.4, 0.7, 1.1, 0.8], np.float32), "bb": np.linspace(-0.3, 0.4, 8).astype(np.float32)}


def instance_norm(x, out):
    return helper.make_node("InstanceNormalization", [x, "sc", "bb"], [out], name="inorm", epsilon=1e-5)


@pytest.mark.parametrize("opset", [7, 21])
def test_instance_norm_of_a_computed_map_runs_on_the_host(opset):
    compiled = check(conv_then([instance_norm("c", "y")], opset, IN_PARAMS), host=True)
    assert compiled.summary.host_nodes == ["inorm"]
    assert "mean and variance of its own map, computed at run time" in compiled.summary.host_reasons["inorm"]


@pytest.mark.parametrize("opset", [7, 13])
def test_instance_norm_folds_when_its_statistics_are_known(opset):
    """A constant input folds as any constant subgraph; a one-pixel map (after a global pool) has
    x - mean(x) = 0, so the output is B whatever x is."""
    k = np.random.default_rng(7).normal(0, 1, (1, 8, 6, 5)).astype(np.float32)
    of_constant = [instance_norm("k", "kn"), helper.make_node("Add", ["c", "kn"], ["y"], name="add")]
    of_pixel = [helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"), instance_norm("p", "pn"),
                helper.make_node("Add", ["c", "pn"], ["y"], name="add")]
    for nodes, inits in ((of_constant, {"k": k}), (of_pixel, {})):
        compiled = check(conv_then(nodes, opset, IN_PARAMS | inits))
        assert "inorm" not in compiled.summary.placement_ops and not compiled.summary.host_nodes


@pytest.mark.parametrize("opset", [8, 12])
def test_maxpool_indices_unused(opset):
    node = helper.make_node("MaxPool", ["c"], ["y", "indices"], name="pool", kernel_shape=[2, 2], strides=[2, 2])
    assert check(conv_then([node], opset)).summary.placement_ops["pool"] == ("MaxPool", "accelerator")


@pytest.mark.parametrize("opset", [9, 13])
def test_split_with_an_output_nothing_reads(opset):
    if opset < 13:
        node, inits = helper.make_node("Split", ["c"], ["y", "unused"], name="split", axis=1, split=[4, 4]), {}
    else:
        node, inits = helper.make_node("Split", ["c", "sizes"], ["y", "unused"], name="split", axis=1), {"sizes": np.array([4, 4])}
    assert check(conv_then([node], opset, inits)).summary.placement_ops["split"] == ("Split", "accelerator")
