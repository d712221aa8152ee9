"""``systolix run`` on the tiny hand-made model of ``test_emulator_runtime`` (NumPy reference)."""

from __future__ import annotations

import pytest

import numpy as np

from systolix.artifacts import write_vectors_csv
from tests.cli_helpers import assert_user_error, run_cli
from tests.unit.test_emulator_runtime import N, X, build_model, reference

pytestmark = pytest.mark.needs_emulator


def test_npz_in_npz_out(tmp_path):
    model = build_model(tmp_path)
    np.savez(tmp_path / "in.npz", x=X)
    proc = run_cli("run", model, "-i", tmp_path / "in.npz", "-o", tmp_path / "out.npz", check=True)
    with np.load(tmp_path / "out.npz") as out:
        assert np.array_equal(out["y"], reference(X))
    assert "[1, 2]" in proc.stdout and "saturation events: 0" in proc.stdout
    assert "argmax" in proc.stdout and str(int(reference(X).argmax())) in proc.stdout


def test_npy_batch(tmp_path):
    model = build_model(tmp_path)
    xs = np.stack([X, -X, 2 * X])
    np.save(tmp_path / "in.npy", xs)
    run_cli("run", model, "-i", tmp_path / "in.npy", "--batch", "-o", tmp_path / "out.npy", check=True)
    out = np.load(tmp_path / "out.npy")
    assert out.shape == (3, 1, 2)
    for b in range(3):
        assert np.array_equal(out[b], reference(xs[b]))


def test_csv_vectors_for_a_shaped_model(tmp_path):
    model = build_model(tmp_path)
    vectors = np.zeros((2, N), dtype=np.float32)
    vectors[0, :3] = X[0]
    vectors[1, :3] = -X[0]
    write_vectors_csv(tmp_path / "in.csv", vectors)
    run_cli("run", model, "-i", tmp_path / "in.csv", "--batch", "-o", tmp_path / "out.npy", check=True)
    out = np.load(tmp_path / "out.npy")  # raw vectors: [batch, 1 vector, N lanes]
    assert out.shape == (2, 1, N)
    assert np.array_equal(out[0, 0, :2], reference(X)[0]) and np.array_equal(out[1, 0, :2], reference(-X)[0])


def test_user_errors(tmp_path):
    model = build_model(tmp_path)
    np.savez(tmp_path / "bad.npz", z=X)
    assert_user_error(run_cli("run", model, "-i", tmp_path / "bad.npz"), "unknown input 'z'")
    np.save(tmp_path / "x.npy", X)
    assert_user_error(run_cli("run", model, "-i", tmp_path / "x.npy", "--trace-file", tmp_path / "t.npz"), "--trace-at")
    assert_user_error(run_cli("run", model, "-i", tmp_path / "x.npy", "--trace-at", "1", "--trace-range", "vram:0"),
                      "trace range 'vram:0'")
    assert_user_error(run_cli("run", model, "-i", tmp_path / "missing.npy"), "missing.npy")
    (tmp_path / "x.bin").write_bytes(b"\x00" * 8)
    assert_user_error(run_cli("run", model, "-i", tmp_path / "x.bin"), "x.bin")
    assert_user_error(run_cli("run", model, "-i", tmp_path / "x.npy", "-o", tmp_path), "is a directory")
