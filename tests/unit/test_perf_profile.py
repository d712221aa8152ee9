"""Profiles: the Chrome trace loads as trace-event JSON; the HTML report renders in Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

from systolix.cli import app
from systolix.perf.simulator import UNIT_LABELS
from tests.conftest import RESNET20

MODEL = next((RESNET20 / "ultra_ram").glob("*.tmodel"))


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    result = CliRunner().invoke(app, ["profile", str(MODEL), "--board", "zcu104", "-o", str(out), "--sample-interval", "1000"])
    assert result.exit_code == 0, result.output
    return out


def test_trace_is_chrome_trace_event_json(profile_dir):
    doc = json.loads((profile_dir / "trace.json").read_text())
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == set(UNIT_LABELS.values())
    for e in slices:
        assert {"name", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["dur"] >= 0 and e["ts"] >= 0
    # Merging runs keeps the file small: far fewer slices than the program's 50,121 instructions.
    assert len(slices) < 50_121 / 4
    assert sum(e["args"]["instructions"] for e in slices if e["tid"] == 1) == 50_122  # decoder: every one
    assert any("MatMul" in e["name"] and e["name"].startswith("stage") and e["args"]["MatMul"] > 0 for e in slices)


def test_samples_file_is_written(profile_dir):
    data = (profile_dir / "samples.bin").read_bytes()
    assert len(data) % 8 == 0 and len(data) > 0


@pytest.mark.chromium
def test_report_renders_in_headless_chromium(profile_dir, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    shot = tmp_path / "report.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", f"--screenshot={shot}", "--window-size=1280,2400",
         (profile_dir / "report.html").as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    import matplotlib.image

    img = matplotlib.image.imread(shot)
    assert img.shape[0] == 2400 and img.shape[1] == 1280
    # Not blank: the plots put many distinct colours on the page.
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50


def test_profile_of_an_own_compile_names_slices_by_layer_even_with_sampling(tmp_path):
    from tests.unit.test_perf_estimate import COUNT, _write_model

    path, _ = _write_model(tmp_path, [
        {"name": "conv", "ops": ["Conv"], "first": 0, "end": 3, "macs": 64 * 144},
        {"name": "relu", "ops": ["Relu"], "first": 3, "end": COUNT, "macs": 0},
    ])
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["profile", str(path), "--board", "pynq-z1", "-o", str(out), "--sample-interval", "7"])
    assert result.exit_code == 0, result.output
    slices = [e for e in json.loads((out / "trace.json").read_text())["traceEvents"] if e["ph"] == "X"]
    array = [e for e in slices if e["tid"] == 1 + 5]  # the systolic array's track
    # The prepended Configure shifts the program by one; the layer map follows it.
    assert array and all(e["name"].split(" ")[0] == "conv" for e in array)
    assert sum(e["args"].get("MatMul", 0) + e["args"].get("LoadWeights", 0) for e in array) == 2
    assert all(not e["name"].startswith("(no layer)") for e in slices)
    report = (out / "report.html").read_text()
    assert "relu" in report and "<th>x compute bound</th>" in report
