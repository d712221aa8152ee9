"""``systolix accuracy`` as a user runs it, and the untuned models (``systolix.models.untuned``)."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

import systolix.models as M
from tests.cli_helpers import assert_user_error, run_cli

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("acc") / "mlp.onnx"
    path.write_bytes(M.build("mlp").SerializeToString())
    return path


@pytest.fixture(scope="module")
def report_dir(mlp_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("acc_report") / "rep"
    samples = mlp_path.parent / "samples.npz"
    np.savez(samples, x=np.random.default_rng(3).standard_normal((16, 1, 37)).astype(np.float32))
    proc = run_cli("accuracy", mlp_path, "--arch", "pynqz1", "-n", "8", "--calibrate", samples, "-o", out, "--json",
                   check=True)
    return out, json.loads(proc.stdout)


def test_json_holds_outputs_layers_and_limit(report_dir):
    out, doc = report_dir
    for key in ("model", "arch", "inputs", "calibration_samples", "rms_lsb", "limit_rms_lsb", "ratio", "outputs",
                "layers", "saturated_inputs", "identical_outputs"):
        assert key in doc, key
    assert doc["inputs"] == 8 and doc["calibration_samples"] == 16 and doc["arch"] == "pynqz1"
    (output,) = doc["outputs"]
    assert output["name"] == "logits" and output["classes"] == 10
    assert 0 <= output["agreement"] <= 1 and 0 <= output["limit_agreement"] <= 1
    # The MLP's three dense layers, each with accumulated and alone figures.
    assert [layer["ops"] for layer in doc["layers"]] == [["Gemm", "Relu"], ["Gemm", "Relu"], ["Gemm"]]
    for layer in doc["layers"]:
        assert layer["ours"]["rms"] > 0 and layer["limit"]["rms"] > 0 and layer["added"]["rms"] > 0
        assert layer["ours"]["max"] >= layer["ours"]["rms"]
    assert doc["layers"][-1]["ours"] == output["ours"]
    assert json.loads((out / "accuracy.json").read_text())["rms_lsb"] == doc["rms_lsb"]


@pytest.mark.chromium
def test_report_renders_in_headless_chromium(report_dir, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    out, _ = report_dir
    shot = tmp_path / "report.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", f"--screenshot={shot}", "--window-size=1280,2400",
         (out / "report.html").as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    import matplotlib.image

    img = matplotlib.image.imread(shot)
    assert img.shape[0] == 2400 and img.shape[1] == 1280
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50  # the plots, not a blank page


def cli(capsys, *args) -> tuple[int, str, str]:
    """The CLI in this process (faster than a subprocess): exit status, stdout, stderr."""
    from systolix.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["accuracy", *map(str, args)])
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_tables_name_every_layer(mlp_path, capsys):
    code, out, _ = cli(capsys, mlp_path, "--arch", "ultra96v2", "-n", "4")
    assert code == 0
    for fragment in ("outputs' error", "limit", "dense_0", "dense_1", "dense_2", "same"):
        assert fragment in out, fragment


def test_bad_input_is_one_error_line(mlp_path, tmp_path, capsys):
    def refused(*args_and_fragment):
        *args, fragment = args_and_fragment
        code, out, err = cli(capsys, *args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
        assert fragment in lines[0] and "Traceback" not in err and not out, (fragment, err)

    refused(tmp_path / "none.onnx", "--arch", "ultra96v2", "none.onnx")
    refused(mlp_path, "--arch", "nosuch", "nosuch")
    wrong_name = tmp_path / "wrong_name.npz"
    np.savez(wrong_name, y=np.zeros((2, 1, 37), np.float32))
    refused(mlp_path, "--arch", "ultra96v2", "--inputs", wrong_name, "'x'")
    wrong_shape = tmp_path / "wrong_shape.npz"
    np.savez(wrong_shape, x=np.zeros((2, 1, 36), np.float32))
    refused(mlp_path, "--arch", "ultra96v2", "--inputs", wrong_shape, "shape")
    refused(mlp_path, "--arch", "ultra96v2", "--calibrate", tmp_path / "no.npz", "no.npz")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    refused(mlp_path, "--arch", "ultra96v2", "-o", blocker / "rep", "file")
    refused(mlp_path, "--arch", "ultra96v2", "-n", "0", "-n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "wrong_name.npz", "wrong_shape.npz"]
    # In a real process too: onnxruntime's or the framework's own output would show there.
    assert_user_error(run_cli("accuracy", mlp_path, "--arch", "ultra96v2", "--inputs", wrong_shape), "shape")


def test_untuned_models_build_and_run_in_onnxruntime():
    pytest.importorskip("torch")
    from systolix.models.untuned import UNTUNED, build_untuned
    from systolix.onnxrt import session

    assert len(UNTUNED) >= 5
    for name, spec in UNTUNED.items():
        model = build_untuned(name)
        ops = {node.op_type for node in model.graph.node}
        if name == "untuned/torch_encoder":  # torch's attention export (tests/e2e/test_transformers.py)
            assert {"LayerNormalization", "Softmax", "MatMul", "Erf"} <= ops, ops
        else:
            assert ops <= {"Conv", "ConvTranspose", "Relu", "Clip", "LeakyRelu", "MaxPool", "AveragePool",
                           "GlobalAveragePool", "Add", "Concat", "Gemm", "Flatten", "BatchNormalization", "Constant"}, ops
        x = np.random.default_rng(0).standard_normal(spec.input_shape).astype(np.float32)
        (y,) = session(model, source=name).run(None, {"input": x})
        assert np.all(np.isfinite(y)) and y.shape[0] == 1
        # batch norms fitted to random normal inputs keep the outputs at a sensible scale
        assert 0.01 < float(np.std(y)) < 10, (name, float(np.std(y)))
