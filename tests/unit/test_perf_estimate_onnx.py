"""``systolix estimate MODEL.onnx``: compile for the board (or ``--arch``) first, then estimate."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from systolix.arch import get_architecture, get_board
from systolix.cli import app
from systolix.errors import SystolixError
from systolix.models import build, save

pytestmark = pytest.mark.needs_onnxruntime

runner = CliRunner()
JSON_KEYS = {"cycles", "latency_ms", "fps", "mac_efficiency", "units", "bound", "layers"}

# A conv layer written out here, so that its MAC count is known independently of the compiler.
H = W = 8
C_IN, C_OUT, K = 24, 24, 3  # 3x3 weight tiles on an 8x8 array, 2x2 on a 12x12 one
CONV_MACS = H * W * C_OUT * C_IN * K * K  # 'same' padding: one output pixel per input pixel


def _conv_relu(tmp_path):
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((C_OUT, C_IN, K, K)) * 0.1).astype(np.float32), "w")
    bias = numpy_helper.from_array((rng.standard_normal(C_OUT) * 0.1).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[K, K]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C_OUT, H, W])],
        [weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 8  # what onnxruntime reads (the onnx package writes a newer one)
    onnx.checker.check_model(model)
    path = tmp_path / "conv_relu.onnx"
    onnx.save(model, path)
    return path


def _estimate_json(*args):
    result = runner.invoke(app, ["estimate", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_onnx_is_compiled_for_the_board_and_estimated(tmp_path):
    data = _estimate_json(_conv_relu(tmp_path), "--board", "pynq-z1")
    assert JSON_KEYS <= set(data)
    n = get_board("pynq-z1").architecture.array_size
    assert data["array_size"] == n == 12
    assert data["clock_mhz"] == 150.0
    # The layer map comes from our compile and carries the useful MACs of the conv.
    assert data["layers"] and data["macs"] == CONV_MACS
    assert data["macs_source"] == "layer map"
    assert any("Conv" in layer["ops"] for layer in data["layers"])
    # The array cannot beat N^2 MACs a clock, and the layers tile the frame.
    assert data["cycles"] >= CONV_MACS / n**2
    assert 0 < data["mac_efficiency"] <= 1
    assert sum(l["cycles"] for l in data["layers"]) == pytest.approx(data["cycles"], abs=1.5)
    assert data["fps"] == pytest.approx(1e3 / data["latency_ms"])
    assert data["latency_ms"] == pytest.approx(data["accelerator_ms"] + data["host_ms"])
    assert data["accelerator_ms"] == pytest.approx(data["cycles"] / (150.0 * 1e3), rel=1e-4)
    assert data["bound"] in {"array", "memory traffic", "instruction issue", "accumulators/SIMD"}
    for unit in data["units"].values():
        assert 0 <= unit["share"] <= 1.0 + 1e-9


def test_arch_overrides_the_boards_architecture(tmp_path):
    path = _conv_relu(tmp_path)
    data = _estimate_json(path, "--board", "pynq-z1", "--arch", "pynqz1")  # Tensil's 8x8 preset
    assert data["array_size"] == get_architecture("pynqz1").array_size == 8
    assert data["clock_mhz"] == 150.0  # the board still gives the clock
    wide = _estimate_json(path, "--board", "pynq-z1")
    # The same MACs on a 12x12 array take fewer array clocks than on an 8x8 one.
    assert wide["units"]["array"]["busy_cycles"] < data["units"]["array"]["busy_cycles"]


def test_estimate_onnx_prints_tables_with_the_layer_map(tmp_path):
    result = runner.invoke(app, ["estimate", str(_conv_relu(tmp_path)), "--board", "ultra96-v2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("frames per second", "MAC efficiency", "Unit busy share", "Per layer", "conv"):
        assert text in result.stdout


def test_a_partitioned_model_sums_its_accelerator_segments_and_names_the_host_ones(tmp_path):
    path = save(build("host/softsign"), tmp_path / "softsign.onnx")
    data = _estimate_json(path, "--board", "ultra96-v2")
    kinds = [s["kind"] for s in data["segments"]]
    assert kinds == ["accelerator", "host", "accelerator"]
    accel = [s["estimate"] for s in data["segments"] if s["kind"] == "accelerator"]
    assert data["cycles"] == pytest.approx(sum(e["cycles"] for e in accel), abs=0.2)
    assert data["macs"] == sum(e["macs"] for e in accel) > 0
    host = next(s for s in data["segments"] if s["kind"] == "host")
    assert host["estimate"] is None and "onnxruntime on the machine" in host["note"]
    # The host segment is timed (onnxruntime on this machine) and counted in the latency.
    assert host["host_ms"] > 0 and data["host_segments_ms"] == pytest.approx(host["host_ms"])
    assert data["latency_ms"] == pytest.approx(data["accelerator_ms"] + data["host_ms"] + data["host_segments_ms"])
    untimed = _estimate_json(path, "--board", "ultra96-v2", "--no-time-host")
    untimed_host = next(s for s in untimed["segments"] if s["kind"] == "host")
    assert untimed["host_segments_ms"] == 0 and "not timed" in untimed_host["note"]


def _error(*args) -> str:
    """The SystolixError message (the CLI's main prints it as one line and exits 2)."""
    result = runner.invoke(app, ["estimate", *map(str, args)])
    assert result.exit_code != 0
    assert isinstance(result.exception, SystolixError), result.exception
    return str(result.exception)


def test_bad_onnx_bad_arch_and_bad_strategy_are_user_errors(tmp_path):
    bad = tmp_path / "m.onnx"
    bad.write_bytes(b"not a model")
    assert "m.onnx" in _error(bad, "--board", "zcu104")
    good = _conv_relu(tmp_path)
    assert "no-such-arch" in _error(good, "--board", "zcu104", "--arch", "no-such-arch")
    assert "fastest" in _error(good, "--board", "zcu104", "--strategy", "fastest")
    tmodel = tmp_path / "m.tmodel"
    tmodel.write_text("{}")
    assert "--arch" in _error(tmodel, "--board", "zcu104", "--arch", "pynqz1")


def test_profile_refuses_a_partitioned_model_and_names_its_segments(tmp_path):
    from systolix.compiler import compile_model

    top = compile_model(build("host/softsign"), "ultra96v2", name="sig").save(tmp_path / "sig")
    result = runner.invoke(app, ["profile", str(top), "--board", "ultra96-v2", "-o", str(tmp_path / "out")])
    assert isinstance(result.exception, SystolixError)
    assert "partitioned" in str(result.exception) and "segments" in str(result.exception)
    assert not (tmp_path / "out").exists()  # nothing half-written
