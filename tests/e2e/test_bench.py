"""``systolix bench --json``: both tables, the expected rows, and numbers that can be physically true.

The checks compare with references computed here: Tensil's published benchmark figures, the
compute floor from each model's MACs counted by ``systolix.models.model_stats``
(not from the compiler), and the frame rates measured on a real ZCU104.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from systolix.arch import get_board
from systolix.cli import app
from systolix.models import build_cached, model_stats
from tests.conftest import RESNET20

pytestmark = pytest.mark.needs_onnxruntime

runner = CliRunner()
BOARDS = ("arty-a7-35", "pynq-z1", "ultra96-v2")
# Tensil's published benchmark table: (latency ms, fps) per board, in BOARDS order.
PUBLISHED = {
    "resnet20v2": ((21, 48), (14, 71), (4, 250)),
    "yolov4_tiny": ((175, 5.7), (112, 8.9), (36, 28)),
    "resnet50v2": ((1969, 0.5), (833, 1.2), (260, 3.8)),
}


def _bench(*args) -> dict:
    result = runner.invoke(app, ["bench", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _check_model_rows(rows: list[dict], name: str) -> None:
    mine = [r for r in rows if r["model"] == name and not r["variant"]]
    assert [r["board"] for r in mine] == list(BOARDS)
    macs = model_stats(build_cached(name)).macs
    for r, (published_ms, published_fps) in zip(mine, PUBLISHED[name]):
        board = get_board(r["board"])
        assert (r["published_latency_ms"], r["published_fps"]) == (published_ms, published_fps)
        assert (r["array_size"], r["clock_mhz"]) == (board.architecture.array_size, board.clock_mhz)
        assert not r["error"], r["error"]
        # Useful MACs: the compiler's layer map agrees with an independent count of the ONNX graph.
        assert r["macs"] == macs
        floor_ms = macs / (board.architecture.array_size ** 2 * board.clock_mhz * 1e3)
        assert r["compute_bound_ms"] == pytest.approx(floor_ms)
        assert r["latency_ms"] > r["compute_bound_ms"]
        assert 0 < r["share_of_bound"] <= 1.0
        assert r["share_of_bound"] == pytest.approx(r["compute_bound_ms"] / r["latency_ms"])
        assert r["fps"] == pytest.approx(1e3 / r["latency_ms"])
        assert r["bound"] in {"array", "memory traffic", "instruction issue", "accumulators/SIMD"}
        # Plausible: within a factor of 10 of the published (serial-model) figure either way.
        assert published_ms / 10 < r["latency_ms"] < published_ms * 10


@pytest.fixture(scope="module")
def resnet20_bench() -> dict:
    return _bench("--model", "resnet20v2", "--no-batch")


def test_bench_has_both_tables_with_date_and_commit(resnet20_bench):
    data = resnet20_bench
    assert {"date", "commit", "models", "zcu104"} <= set(data)
    assert data["date"].endswith("UTC") and data["commit"]


def test_resnet20_rows_on_the_three_published_boards(resnet20_bench):
    _check_model_rows(resnet20_bench["models"], "resnet20v2")


def test_resnet20_throughput_at_batch_4():
    """One program running four frames (one board: the column costs a second compile a row):
    each frame's output is the batch-1 program's (tested in tests/e2e/test_batch.py), so four
    frames take at most four times as long as one and at least four frames' compute floor."""
    from systolix.perf.bench import models_table

    (r,) = models_table(("resnet20v2",), ("ultra96-v2",), throughput_batch=4)
    macs = model_stats(build_cached("resnet20v2")).macs
    b = r["batched"]
    assert b["batch"] == 4 and not b["error"], b["error"]
    assert b["macs"] == 4 * macs
    n, mhz = r["array_size"], r["clock_mhz"]
    assert b["latency_ms"] > 4 * macs / (n * n * mhz * 1e3)
    assert b["fps"] == pytest.approx(4e3 / b["latency_ms"])
    assert b["host_ms"] == pytest.approx(4 * r["host_ms"])
    assert b["latency_ms"] <= 4 * r["latency_ms"] * 1.0001  # no layer slower per image


def test_zcu104_table_puts_tensil_programs_next_to_our_compiles(resnet20_bench):
    rows = resnet20_bench["zcu104"]
    measured = json.loads((RESNET20 / "expected.json").read_text())["measured_on_zcu104_at_100MHz_fps"]
    configs = {(r["architecture"], r["strategy"], r["bus_bits"]) for r in rows}
    strategies = ("local-isolated", "local-vars", "local-consts", "local-vars-and-consts")
    assert {("zcu104_uram", s, 128) for s in strategies} | {("zcu104", "local-isolated", 512)} <= configs
    with_tensil = [r for r in rows if r["tensil"] is not None]
    assert len(with_tensil) == 6
    assert sorted(r["measured_fps"] for r in with_tensil) == sorted(measured.values())
    for r in with_tensil:
        # The calibration target: every Tensil program within 20% of the real board.
        assert abs(r["tensil"]["fps"] / r["measured_fps"] - 1) <= 0.20
    for r in rows:
        ours = r["systolix"]
        if ours["error"]:
            # Only the on-chip strategies may not fit the smaller zcu104 local memory.
            assert r["architecture"] == "zcu104" and r["strategy"] in ("local-consts", "local-vars-and-consts")
            assert "local memory" in ours["error"]
            continue
        n = 32
        assert ours["cycles"] >= ours["macs"] / n**2
        assert 0 < ours["mac_efficiency"] <= 1
        # Same network, same architecture: our frame rate and Tensil's within a factor of 3.
        if r["tensil"] is not None:
            assert 1 / 3 < ours["fps"] / r["tensil"]["fps"] < 3


def test_yolov4_tiny_rows():
    _check_model_rows(_bench("--model", "yolov4_tiny", "--no-zcu104", "--no-batch")["models"], "yolov4_tiny")


@pytest.mark.slow(seconds=220, heavy=True)
def test_resnet50_rows_cut_the_model_on_the_small_boards():
    rows = _bench("--model", "resnet50v2", "--no-zcu104", "--no-batch")["models"]
    _check_model_rows(rows, "resnet50v2")
    # 25.6 M weights do not fit 1 M vectors of DRAM1 on the 8x8 and 12x12 architectures: the
    # model runs as programs in a row there, timed together, every MAC counted once.
    assert [r["board"] for r in rows if r["programs"] > 1] == ["arty-a7-35", "pynq-z1"]
    assert not any(r["variant"] or r["error"] for r in rows)
