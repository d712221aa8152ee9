"""``systolix.accuracy.measure`` against figures computed independently, on a two-layer model.

The model is ``y = W2 relu(W1 x + b1) + b2`` (two Gemm layers), so everything the report states
can be recomputed with NumPy: the float model, the format limit (each computed tensor rounded to
FP16BP8, products exact), the compiled program's tensors (through ``systolix.compile`` of the
model and of each layer alone, run by the public API), and the statistics over them.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import systolix
from systolix.accuracy import measure
from systolix.numerics import DataType

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

LSB = DataType.FP16BP8.resolution
RANGE = (DataType.FP16BP8.min_int * LSB, DataType.FP16BP8.max_value)
RNG = np.random.default_rng(7)
W1 = (RNG.standard_normal((12, 20)) * 0.4).astype(np.float32)
B1 = (RNG.standard_normal(20) * 0.1).astype(np.float32)
W2 = (RNG.standard_normal((20, 6)) * 0.3).astype(np.float32)
B2 = (RNG.standard_normal(6) * 0.1).astype(np.float32)


def gemm(x: str, w: str, b: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Gemm", [x, w, b], [out], name=out)


def model(w1=W1, w2=W2, first_only: bool = False, second_only: bool = False) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (B1, "b1"), (w2, "w2"), (B2, "b2")]]
    if second_only:
        nodes = [gemm("hidden", "w2", "b2", "y")]
        inputs = [helper.make_tensor_value_info("hidden", onnx.TensorProto.FLOAT, [1, 20])]
        inits = inits[2:]
    else:
        nodes = [gemm("x", "w1", "b1", "pre"), helper.make_node("Relu", ["pre"], ["hidden"], name="relu")]
        if not first_only:
            nodes.append(gemm("hidden", "w2", "b2", "y"))
        inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 12])]
    out = ("hidden", 20) if first_only else ("y", 6)
    graph = helper.make_graph(nodes, "two_gemms", inputs,
                              [helper.make_tensor_value_info(out[0], onnx.TensorProto.FLOAT, [1, out[1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def rounded(v: np.ndarray) -> np.ndarray:
    """FP16BP8's grid, half up, saturated (as the driver converts floats)."""
    return np.clip(np.floor(v / LSB + 0.5) * LSB, *RANGE)


def rms_max(got, want) -> tuple[float, float]:
    err = (np.asarray(got, np.float64) - want) / LSB
    return float(np.sqrt(np.mean(err ** 2))), float(np.max(np.abs(err)))


def offset(got, want) -> float:
    """A dense layer's outputs ``[inputs, 1, D]``: each value's mean error over the inputs, RMS."""
    err = ((np.asarray(got, np.float64) - want) / LSB).reshape(len(want), -1)
    return float(np.sqrt(np.mean(err.mean(axis=0) ** 2)))


@pytest.fixture(scope="module")
def xs() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((10, 1, 12)).astype(np.float32)


@pytest.fixture(scope="module")
def report(xs):
    return measure(model(), "ultra96v2", inputs={"x": xs})


def test_outputs_and_layers_match_numpy(report, xs):
    x = xs.astype(np.float64)
    hidden = np.maximum(x @ W1 + B1, 0)
    y = hidden @ W2 + B2
    # The limit: the input and each computed tensor rounded, products exact.
    hidden_limit = rounded(np.maximum(rounded(rounded(x) @ W1 + B1), 0))
    y_limit = rounded(hidden_limit @ W2 + B2)
    # Ours: the model compiled as a user compiles it, and its first layer compiled alone (its
    # output is the tensor the report reads in the middle).
    ours_y = systolix.compile(model(), "ultra96v2").run({"x": xs}, batch=True)["y"]
    ours_hidden = systolix.compile(model(first_only=True), "ultra96v2").run({"x": xs}, batch=True)["hidden"]

    assert report.inputs == 10 and report.calibration_samples == 0
    (out,) = report.outputs
    assert out.name == "y" and out.classes == 6
    assert (out.ours.rms, out.ours.max) == pytest.approx(rms_max(ours_y, y), abs=2e-3)
    assert (out.limit.rms, out.limit.max) == pytest.approx(rms_max(y_limit, y), abs=2e-3)
    assert out.agreement == pytest.approx(np.mean(ours_y.reshape(10, -1).argmax(1) == y.reshape(10, -1).argmax(1)))
    assert out.limit_agreement == pytest.approx(np.mean(y_limit.reshape(10, -1).argmax(1) == y.reshape(10, -1).argmax(1)))
    assert report.rms == pytest.approx(out.ours.rms) and report.limit_rms == pytest.approx(out.limit.rms)
    assert out.ours.offset == pytest.approx(offset(ours_y, y), abs=2e-3)
    assert out.limit.offset == pytest.approx(offset(y_limit, y), abs=2e-3)

    first, second = report.layers
    assert first.tensor == "hidden" and first.ops == ["Gemm", "Relu"] and second.tensor == "y"
    assert (first.ours.rms, first.ours.max) == pytest.approx(rms_max(ours_hidden, hidden), abs=2e-3)
    assert (first.limit.rms, first.limit.max) == pytest.approx(rms_max(hidden_limit, hidden), abs=2e-3)
    assert (second.ours.rms, second.ours.max) == pytest.approx(rms_max(ours_y, y), abs=2e-3)
    # The first layer reads the model's input. Alone it is compiled without gains (estimated from
    # the layer alone, its ranges would start from synthetic inputs, not the model before it), so
    # it errs as the no-gain compile of it does; the limit's rounding is the same as in the model.
    plain_hidden = systolix.compile(model(first_only=True), "ultra96v2", estimate_gains=False).run(
        {"x": xs}, batch=True)["hidden"]
    assert (first.added.rms, first.added.max) == pytest.approx(rms_max(plain_hidden, hidden), abs=2e-3)
    assert first.added_limit.rms == pytest.approx(first.limit.rms)
    # The second layer alone: compiled by itself and run on the float hidden values.
    alone = systolix.compile(model(second_only=True), "ultra96v2", estimate_gains=False).run(
        {"hidden": hidden.astype(np.float32)}, batch=True)["y"]
    assert (second.added.rms, second.added.max) == pytest.approx(rms_max(alone, y), abs=2e-3)
    alone_limit = rounded(rounded(hidden) @ W2 + B2)
    assert second.added_limit.rms == pytest.approx(rms_max(alone_limit, y)[0], abs=2e-3)
    assert report.identical_outputs is True
    assert first.saturated == second.saturated == 0


def test_a_map_s_offset_is_its_channels_mean_error_over_inputs_and_pixels():
    # [inputs, 1, C, H, W]: channel c errs by offsets[c] everywhere plus a +-1 pattern whose mean
    # over the inputs and pixels is zero; the offset is the RMS of offsets, whatever the pattern's size.
    from systolix.accuracy.measure import Errors, channel_offset

    offsets = np.array([0.5, -0.25, 0.0, 1.0])
    pattern = np.where(np.indices((6, 1, 4, 3, 4)).sum(axis=0) % 2 == 0, 1.0, -1.0) * 3.0
    err = pattern + offsets[None, None, :, None, None]
    assert channel_offset(err) == pytest.approx(float(np.sqrt(np.mean(offsets ** 2))))
    ref = np.zeros(err.shape)
    errors = Errors.of(err * LSB, ref, LSB)
    assert errors.offset == pytest.approx(channel_offset(err)) and errors.rms > errors.offset


def test_saturated_values_are_counted():
    # Weights 60x larger: some hidden values pass FP16BP8's range (+-128) and must saturate.
    xs = np.random.default_rng(1).standard_normal((6, 1, 12)).astype(np.float32)
    big = measure(model(w1=W1 * 60), "ultra96v2", inputs={"x": xs})
    hidden = np.maximum(xs.astype(np.float64) @ (W1 * 60) + B1, 0)
    beyond = int(np.count_nonzero(hidden > RANGE[1]))
    assert beyond > 0
    first = big.layers[0]
    assert first.float_beyond == beyond
    assert first.saturated >= beyond
    assert big.saturated_inputs > 0 and big.saturation_events > 0


def test_saturation_inside_a_layer_is_counted_where_its_output_shows_none():
    # Values near 40 (a conv's bias) averaged over 8x8 pixels without gains: the pool's sums hold
    # several times the mean, past FP16BP8's 128, while its output (a mean near 40) is well inside.
    # The report puts every event in the pool, whose saved values show no saturation.
    c = 4
    inits = [numpy_helper.from_array((np.eye(c, dtype=np.float32) * 0.5)[:, :, None, None], "w"),
             numpy_helper.from_array(np.full(c, 40.0, np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("GlobalAveragePool", ["conv"], ["y"], name="pool")]
    graph = helper.make_graph(nodes, "pool_of_large_values", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, c, 1, 1])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    xs = np.random.default_rng(2).standard_normal((3, 1, c, 8, 8)).astype(np.float32)
    r = measure(m, "ultra96v2", inputs={"x": xs}, estimate_gains=False, isolate=False)
    by_name = {layer.name: layer for layer in r.layers}
    assert r.saturation_events > 0
    assert by_name["conv"].saturated_sums == 0 and by_name["conv"].saturated == 0
    assert by_name["pool"].saturated == 0 and by_name["pool"].saturated_sums == r.saturation_events
    assert r.to_json()["layers"][-1]["saturated_sums"] == r.saturation_events


def test_report_json_and_html_are_written(report, tmp_path):
    import json

    from systolix.accuracy.report import write_report

    html_path, json_path = write_report(tmp_path / "rep", report)
    doc = json.loads(json_path.read_text())
    assert doc["rms_lsb"] == pytest.approx(report.rms)
    assert [layer["tensor"] for layer in doc["layers"]] == ["hidden", "y"]
    page = html_path.read_text()
    assert page.count("data:image/png;base64,") == 2 + 2  # overview, outputs, one per layer
    assert "<td>pre</td>" in page and "<td>hidden</td>" in page and "Where error enters" in page


def test_a_layer_reading_the_compile_s_own_tensors_is_measured_alone_from_the_model_s():
    # A plain compile averages the 7x7 map in two layers (``separate_averages``): the second reads
    # "pool/rows", which the ONNX model does not name. Alone, the pool is the ONNX node on the
    # float values of what the first layer read: its own error, as the pool compiled by itself.
    w = (RNG.standard_normal((4, 4, 1, 1)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    graph = helper.make_graph(nodes, "conv_pool", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 7, 7])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 1, 1])],
                              [numpy_helper.from_array(w, "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    xs = np.random.default_rng(2).standard_normal((6, 1, 4, 7, 7)).astype(np.float32)
    compiled = systolix.compile(m, "ultra96v2")
    assert [layer.name for layer in compiled.summary.segments[0].hir.layers][-2:] == ["pool/rows", "pool"]
    report = measure(m, "ultra96v2", inputs={"x": xs})
    pool = next(layer for layer in report.layers if layer.tensor == "y")
    assert pool.added_note == "" and pool.added is not None
    r = np.maximum(np.einsum("oi,nihw->nohw", w[:, :, 0, 0], xs[:, 0].astype(np.float64)), 0)
    alone = systolix.compile(helper.make_model(helper.make_graph(
        [nodes[2]], "pool", [helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [1, 4, 7, 7])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 1, 1])]), opset_imports=[helper.make_opsetid("", 13)]),
        "ultra96v2", estimate_gains=False).run({"r": r[:, None].astype(np.float32)}, batch=True)["y"]
    assert (pool.added.rms, pool.added.max) == pytest.approx(rms_max(alone, r.mean(axis=(2, 3), keepdims=True)[:, None]), abs=2e-3)
