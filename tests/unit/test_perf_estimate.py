"""``estimate``: the JSON contract, the layer map, the host term, and the CLI's errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from systolix.arch import get_board
from systolix.artifacts import ProgramRef, TensorSpan, TModel
from systolix.cli import app
from systolix.errors import ArtifactError
from systolix.isa import InstructionLayout, encode_program
from systolix.isa.instructions import SIMD, DataFlow, DataMove, LoadWeights, MatMul, SimdOp
from systolix.perf import estimate
from tests.conftest import RESNET20

ARCH = get_board("pynq-z1").architecture  # 12x12
N = ARCH.array_size
JSON_KEYS = {"cycles", "latency_ms", "fps", "mac_efficiency", "units", "bound", "layers"}


PROGRAM = (
    [DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 63), LoadWeights(1000, N), MatMul(0, 0, 63)]
    + [SIMD(SimdOp.MAX, write_address=a, read_address=a, read=True, write=True) for a in range(64)]
    + [DataMove(DataFlow.ACC_TO_LOCAL, 200, 0, 63), DataMove(DataFlow.LOCAL_TO_DRAM0, 200, 64, 63)]
)
COUNT = len(PROGRAM)


def _write_model(tmp_path, layers=None, program=PROGRAM):
    layout = InstructionLayout.of(ARCH)
    (tmp_path / "m.tprog").write_bytes(encode_program(program, layout))
    model = TModel(
        name="m", prog=ProgramRef(file_name="m.tprog", size=len(program) * layout.instruction_bytes), consts=[],
        inputs=[TensorSpan(name="x", base=0, size=64)], outputs=[TensorSpan(name="y", base=64, size=64)], arch=ARCH,
        systolix=None if layers is None else {"version": 1, "layers": layers},
    )
    path = tmp_path / "m.tmodel"
    model.save(path)
    return path, len(program)


def test_json_has_the_contract_keys_and_consistent_numbers(tmp_path):
    path, _ = _write_model(tmp_path, [
        {"name": "conv", "ops": ["Conv"], "first": 0, "end": 3, "macs": 64 * N * N},
        {"name": "relu+save", "ops": ["Relu"], "first": 3, "end": COUNT, "macs": 0},
    ])
    est = estimate(path, get_board("pynq-z1"))
    data = json.loads(json.dumps(est.to_json()))
    assert JSON_KEYS <= set(data)
    assert data["fps"] == pytest.approx(1e3 / data["latency_ms"])
    assert data["mac_efficiency"] == pytest.approx(64 * N * N / (N * N * data["cycles"]), rel=1e-3)
    assert data["bound"] in {"array", "memory traffic", "instruction issue", "accumulators/SIMD"}
    assert {u for u in data["units"]} == {"decoder", "dram0", "dram1", "port_a", "port_b", "array", "acc"}
    # The layers' times add up to the frame's accelerator time.
    assert sum(l["cycles"] for l in data["layers"]) == pytest.approx(data["cycles"], abs=1.5)
    # Host I/O: 128 vectors of 12 scalars at the board's cost per scalar.
    board = get_board("pynq-z1")
    assert est.host_ms == pytest.approx(128 * N * board.host_ns_per_scalar * 1e-6)


def test_each_layer_names_what_bounds_it_and_its_compute_bound(tmp_path):
    # One set of weights under a 1,024-vector MatMul; a dense layer of one-vector MatMuls, each
    # after its own LoadWeights (which waits for the array to drain); pure data movement on DRAM0.
    moves = [DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 255), DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 256, 255)]
    conv = [LoadWeights(4000, N), MatMul(0, 0, 1023)]
    dense = [x for k in range(16) for x in (LoadWeights(4000 + 16 * k, N), MatMul(k, k, 0))]
    program = conv + dense + moves
    macs = 1024 * N * N - 7  # not a multiple of N^2: the compute bound is a fraction of a clock
    path, _ = _write_model(tmp_path, [
        {"name": "conv", "ops": ["Conv"], "first": 0, "end": 2, "macs": macs},
        {"name": "dense", "ops": ["Gemm"], "first": 2, "end": 34, "macs": 16 * N * N},
        {"name": "copy", "ops": ["Identity"], "first": 34, "end": 36, "macs": 0},
        {"name": "flatten", "ops": ["Flatten"], "first": 36, "end": 36, "macs": 0},
    ], program)
    est = estimate(path, get_board("pynq-z1"))
    assert [l.bound for l in est.layers] == ["array", "weights", "dram0", "none"]
    layers = json.loads(json.dumps(est.to_json()))["layers"]
    old = {"name", "ops", "first", "end", "macs", "cycles", "latency_ms", "mac_efficiency", "dram_bytes", "units"}
    assert all(old | {"bound", "bound_label", "compute_bound_cycles", "x_compute_bound"} == set(l) for l in layers)
    assert [l["bound_label"] for l in layers] == ["systolic array", "weight loading / array drain", "DRAM0 port", "-"]
    assert layers[0]["compute_bound_cycles"] == macs / N**2
    assert layers[0]["x_compute_bound"] == pytest.approx(layers[0]["cycles"] / (macs / N**2), rel=1e-3)
    assert 1 < layers[0]["x_compute_bound"] < 1.1  # the MatMul streams: weights and fill add 3N + 1 clocks
    assert layers[2]["compute_bound_cycles"] == 0 and layers[2]["x_compute_bound"] is None
    # The dense layer: 16 x (N + 1) LoadWeights clocks, each after a drain of 2N - 1 (the first
    # after the conv's MatMul), and 16 MatMul clocks: the array is never idle, so they are its time.
    fc = est.layers[1]
    assert fc.drain_cycles == 16 * (2 * N - 1) and fc.weight_cycles == 16 * (N + 1) + fc.drain_cycles
    assert fc.cycles == fc.weight_cycles + 16
    # In a subprocess: the CLI's console takes its width when it is made, from COLUMNS.
    table = subprocess.run([sys.executable, "-m", "systolix", "estimate", str(path), "--board", "pynq-z1"],
                           capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"}, check=True).stdout
    assert "bound by" in table and "x compute bound" in table and "weight loading / array drain" in table


def test_without_a_layer_map_the_layers_are_null_and_macs_come_from_the_array(tmp_path):
    path, _ = _write_model(tmp_path)
    data = estimate(path, get_board("pynq-z1")).to_json()
    assert data["layers"] is None
    assert data["macs"] == 64 * N * N
    assert data["macs_source"].startswith("array")


def test_a_layer_range_outside_the_program_is_named(tmp_path):
    path, _ = _write_model(tmp_path, [{"name": "conv", "ops": ["Conv"], "first": 0, "end": COUNT + 5, "macs": 1}])
    with pytest.raises(ArtifactError, match=r"layers\[0\].*'conv'.*outside"):
        estimate(path, get_board("pynq-z1"))


def test_the_manifest_architecture_wins_over_the_board(tmp_path):
    path, _ = _write_model(tmp_path)
    est = estimate(path, get_board("zcu104"))  # a 32x32 board, a 12x12 program
    assert est.board.architecture.array_size == N
    assert est.board.clock_mhz == 100.0


runner = CliRunner()


def test_cli_estimate_json_on_a_tensil_program():
    model = next((RESNET20 / "baseline").glob("*.tmodel"))
    result = runner.invoke(app, ["estimate", str(model), "--board", "zcu104", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert JSON_KEYS <= set(data)
    assert data["layers"] is None
    assert 100 < data["fps"] < 200


def test_cli_estimate_errors_are_one_line(tmp_path):
    result = runner.invoke(app, ["estimate", str(tmp_path / "nope.tmodel"), "--board", "zcu104"])
    assert result.exit_code != 0
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"")
    result = runner.invoke(app, ["estimate", str(onnx), "--board", "zcu104"])
    assert result.exit_code != 0 and "m.onnx" in str(result.exception or result.output)
    path, _ = _write_model(tmp_path)
    result = runner.invoke(app, ["estimate", str(path), "--board", "no-such-board"])
    assert result.exit_code != 0 and "unknown board" in str(result.exception or result.output)


def test_cli_bench_json_has_the_tensil_rows():
    result = runner.invoke(app, ["bench", "--json", "--no-models"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"date", "commit", "models", "zcu104"} <= set(data) and data["models"] is None
    rows = [r["tensil"] for r in data["zcu104"] if r["tensil"] is not None]
    assert len(rows) == 6 and sum(r["fitted_on"] for r in rows) == 2
    for r, row in zip(rows, (r for r in data["zcu104"] if r["tensil"] is not None)):
        assert r["error"] == pytest.approx(r["fps"] / row["measured_fps"] - 1)


def test_cli_profile_refuses_a_file_as_output_directory(tmp_path):
    path, _ = _write_model(tmp_path)
    (tmp_path / "out").write_text("")
    result = runner.invoke(app, ["profile", str(path), "--board", "pynq-z1", "-o", str(tmp_path / "out")])
    assert result.exit_code != 0 and "not a directory" in str(result.exception or result.output)


def test_inferred_stages_tile_a_tensil_program_and_unit_work_matches_the_kernel():
    import numpy as np

    from systolix.perf import infer_stages, load_program, simulate
    from systolix.perf.estimate import unit_work

    model, program = load_program(next((RESNET20 / "baseline").glob("*.tmodel")))
    stages = infer_stages(program)
    assert stages[0]["first"] == 0 and stages[-1]["end"] == len(program)
    assert all(a["end"] == b["first"] for a, b in zip(stages, stages[1:]))
    assert len(stages) > 10
    # Every stage but the last ends with its results leaving the accumulators.
    for s in stages[:-1]:
        assert program.opcode[s["end"] - 1] == 2 and program.flags[s["end"] - 1] in (1, 3, 12)
    tl = simulate(program, get_board("zcu104").with_architecture(model.arch))
    assert np.allclose(unit_work(program, tl).sum(axis=0), tl.busy)
