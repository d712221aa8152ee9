"""Fuzz: bad input files for ``systolix run`` (``.npy``, ``.npz``, Tensil ``.csv``) and bad values
(NaN, infinities, complex, objects, wrong shapes, a batch of 0), through the CLI and the API."""

from __future__ import annotations

import io
import os
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import systolix
from systolix.artifacts import read_vectors_csv
from systolix.artifacts.arrays import read_arrays
from systolix.errors import ArtifactError, SystolixError
from systolix.runtime import RuntimeInputError, SaturationWarning
from tests.fuzz.conftest import FUZZ, count, each_kind, partitioned_manifest, tiny_manifest
from tests.fuzz.harness import assert_clean_error, cli

X = np.array([[1.0, 2.0, 0.5]], np.float32)


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _with_header(dtype: str, shape: str, fortran: str = "False", data: bytes = b"\x00" * 24) -> bytes:
    header = f"{{'descr': '{dtype}', 'fortran_order': {fortran}, 'shape': {shape}, }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


NPY_BREAKS = ["truncate", "garbage", "huge-shape", "object", "complex", "strings", "struct", "datetime", "version",
              "header-length", "bad-header", "empty", "zip-truncate", "zip-member-object", "zip-not-npy",
              "zip-member-truncated", "zip-huge", "zip-empty", "npz-unknown-input", "wrong-shape", "batch-0",
              "batch-0-flag", "npz-two-inputs-one-missing", "ragged-object", "void", "fortran-huge"]


def _broken_array_file(kind: str, k: int) -> tuple[bytes, str]:
    """Bytes of an input file the tiny model (input x [1, 3]) must refuse, and its suffix."""
    good = _npy_bytes(X)
    if kind == "truncate":
        return good[: k % (len(good) - 1)], ".npy"
    if kind == "garbage":
        rng = np.random.default_rng(k)
        return b"GARBAGE" + rng.integers(0, 256, k % 300, dtype=np.uint8).tobytes(), ".npy"
    if kind == "huge-shape":
        return _with_header("<f4", f"({10**(6 + k % 12)}, {1 + k % 7})"), ".npy"
    if kind == "object":
        return _npy_bytes(np.array([1, "a", None], dtype=object)), ".npy"
    if kind == "complex":
        return _npy_bytes((X + 1j * (k % 3 + 1)).astype(np.complex64 if k % 2 else np.complex128)), ".npy"
    if kind == "strings":
        return _npy_bytes(np.array([["1", "2", "0.5"]])), ".npy"
    if kind == "struct":
        return _npy_bytes(np.zeros((1, 3), dtype=[("a", "<f4"), ("b", "<i4")])), ".npy"
    if kind == "datetime":
        return _npy_bytes(np.zeros((1, 3), dtype="datetime64[s]")), ".npy"
    if kind == "void":
        return _npy_bytes(np.zeros((1, 3), dtype="V4")), ".npy"
    if kind == "version":
        return good[:6] + bytes([9 + k % 200, 0]) + good[8:], ".npy"
    if kind == "header-length":
        return good[:8] + (60000 + k % 5000).to_bytes(2, "little") + good[10:], ".npy"
    if kind == "bad-header":
        return _with_header("<f4", "(1, 3") [:-1] + b"\n", ".npy"
    if kind == "fortran-huge":
        return _with_header("<f8", f"(3, {2**40 + k})", "True"), ".npy"
    if kind == "empty":
        return b"", ".npy" if k % 2 else ".npz"
    if kind == "ragged-object":
        return _npy_bytes(np.array([[1.0], [1.0, 2.0]], dtype=object)), ".npy"
    if kind == "wrong-shape":
        shapes = [(3,), (1, 4), (3, 1), (2, 1, 4), (1, 1, 1, 3), (), (1, 2)]
        return _npy_bytes(np.ones(shapes[k % len(shapes)], np.float32)), ".npy"
    if kind in ("batch-0", "batch-0-flag"):
        return _npy_bytes(np.zeros((0, 1, 3), np.float32)), ".npy"
    buffer = io.BytesIO()
    if kind == "zip-truncate":
        np.savez(buffer, x=X)
        data = buffer.getvalue()
        return data[: 2 + k % (len(data) - 3)], ".npz"
    with zipfile.ZipFile(buffer, "w") as z:
        if kind == "zip-member-object":
            z.writestr("x.npy", _npy_bytes(np.array([{"a": 1}], dtype=object)))
        elif kind == "zip-not-npy":
            z.writestr("x.txt", "1,2,0.5")
        elif kind == "zip-member-truncated":
            z.writestr("x.npy", good[: len(good) - 1 - k % 10])
        elif kind == "zip-huge":
            z.writestr("x.npy", _with_header("<f8", f"({2**45 + k},)"))
        elif kind == "npz-unknown-input":
            z.writestr("z.npy", good)
        elif kind == "npz-two-inputs-one-missing":
            z.writestr("y.npy", good)
        # zip-empty: no members
    return buffer.getvalue(), ".npz"


def test_broken_array_files(ws):
    """~150 .npy/.npz files, broken in 26 ways: one error line from run (no output written) and an
    ArtifactError or RuntimeInputError from the API (read_arrays, then Model.run)."""
    seen = []
    model = tiny_manifest(ws.tiny)

    @settings(max_examples=150, **FUZZ)
    @given(kind=st.sampled_from(NPY_BREAKS), k=st.integers(0, 2**20))
    @each_kind(NPY_BREAKS, k=0)
    def case(kind, k):
        data, suffix = _broken_array_file(kind, k)
        folder = ws.case_dir()
        path = folder / f"input{suffix}"
        path.write_bytes(data)
        out = folder / "out.npy"
        args = ["run", model, "-i", path, "-o", out] + (["--batch"] if kind == "batch-0-flag" else [])
        line = assert_clean_error(cli(*args), absent_outputs=[out])
        assert len(line) < 400, line
        with pytest.raises(SystolixError):
            loaded = read_arrays(path)
            systolix.load(model).run(loaded if isinstance(loaded, np.ndarray) else loaded)
        seen.append(kind)

    case()
    count("inputs: a broken .npy/.npz file (run, API)", len(seen))
    assert len(set(seen)) == len(NPY_BREAKS)


def test_nonfinite_values_are_refused_unless_allowed(ws):
    """~60 inputs with NaN or infinities somewhere (float16/32/64, batched or not): refused naming
    the input and the first bad index; with --allow-nonfinite the same file runs (NaN counts as 0)."""
    model = tiny_manifest(ws.tiny)
    seen = []

    @settings(max_examples=60, **FUZZ)
    @given(dtype=st.sampled_from(["float16", "float32", "float64"]), batch=st.integers(0, 4),
           where=st.integers(0, 10**6), value=st.sampled_from([np.nan, np.inf, -np.inf]), csv=st.booleans())
    def case(dtype, batch, where, value, csv):
        folder = ws.case_dir()
        shape = (1, 3) if batch == 0 else (batch, 1, 3)
        array = np.ones(shape, dtype)
        flat = array.reshape(-1)
        flat[where % flat.size] = value
        if csv:
            path = folder / "x.csv"
            vectors = np.zeros((flat.size // 3, 4))
            vectors[:, :3] = flat.reshape(-1, 3)
            path.write_text("\n".join(",".join(repr(float(v)) for v in row) for row in vectors) + "\n")
        else:
            path = folder / "x.npy"
            np.save(path, array)
        args = ["run", model, "-i", path] + (["--batch"] if batch else [])
        line = assert_clean_error(cli(*args), "input 'x'", "NaN" if np.isnan(value) else "infinite", "--allow-nonfinite")
        assert "index" in line
        allowed = cli(*args, "--allow-nonfinite")
        assert allowed.code == 0, str(allowed)
        if not csv:
            with pytest.raises(RuntimeInputError, match="'x'"):
                systolix.load(model).run({"x": array})
            with warnings.catch_warnings():  # infinities saturate (and say so): not this test's subject
                warnings.simplefilter("ignore", SaturationWarning)
                out = systolix.load(model).run({"x": array}, allow_nonfinite=True)["y"]
            assert np.all(np.isfinite(out))
        seen.append((dtype, csv))

    case()
    count("inputs: NaN or infinite values (run, API)", len(seen))
    assert {c for _, c in seen} == {True, False}


CSV_BREAKS = ["latin1", "ragged", "word", "wide", "narrow", "empty", "blank-lines", "semicolons", "hex", "quotes",
              "partitioned", "fifo", "directory"]


def test_broken_csv_files(ws):
    """~60 Tensil CSV vector files broken in 13 ways: one error line from run, ArtifactError from
    read_vectors_csv for the malformed ones."""
    model = tiny_manifest(ws.tiny)
    seen = []

    @settings(max_examples=60, **FUZZ)
    @given(kind=st.sampled_from(CSV_BREAKS), k=st.integers(0, 1000))
    @each_kind(CSV_BREAKS, k=0)
    def case(kind, k):
        folder = ws.case_dir()
        path = folder / "x.csv"
        target = model
        row = "1.0,2.0,0.5,0.0"
        if kind == "latin1":
            path.write_bytes(row.encode() + b"\n\xe9\xff," * (1 + k % 3))
        elif kind == "ragged":
            path.write_text(row + "\n" + ",".join(["1"] * (1 + k % 3)) + "\n")
        elif kind == "word":
            path.write_text(row.replace("2.0", ["two", "nan?", "1..2", "--1"][k % 4]) + "\n")
        elif kind == "wide":
            path.write_text(",".join(["1"] * (5 + k % 20)) + "\n")
        elif kind == "narrow":
            path.write_text(",".join(["1"] * (1 + k % 3)) + "\n")
        elif kind == "empty":
            path.write_text("")
        elif kind == "blank-lines":
            path.write_text("\n \n\t\n" * (1 + k % 4))
        elif kind == "semicolons":
            path.write_text(row.replace(",", ";") + "\n")
        elif kind == "hex":
            path.write_text(row.replace("1.0", "0x1p3") + "\n")
        elif kind == "quotes":
            path.write_text('"1.0","2.0","0.5","0.0"\n')
        elif kind == "partitioned":
            path.write_text(row + "\n")
            target = partitioned_manifest(ws.partitioned)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
        assert_clean_error(cli("run", target, "-i", path, seconds=10))
        if kind != "partitioned":
            with pytest.raises(ArtifactError):
                read_vectors_csv(path, 4)
        seen.append(kind)

    case()
    count("inputs: a broken Tensil .csv file (run, API)", len(seen))
    assert len(set(seen)) == len(CSV_BREAKS)


@pytest.mark.parametrize("value", [
    [[1, 2]], [[1.0, 2.0, 3.0, 4.0]], "abc", [["1", "2", "3"]], [[1 + 2j, 0, 0]], [[None, 1, 2]], {"a": 1},
    [[[1.0, 2.0, 0.5]], [[1.0, 2.0]]], np.zeros((0, 1, 3)), np.zeros((1, 3), dtype=object), [[1e39, 0, 0]],
])
def test_python_api_refuses_values_that_are_not_real_numbers(ws, value):
    """Model.run and PartitionedModel.run: RuntimeInputError for what is not an array of real numbers
    of the right shape (a float64 1e39 becomes infinite in float32: refused too)."""
    for manifest, name in ((tiny_manifest(ws.tiny), "x"), (partitioned_manifest(ws.partitioned), "x")):
        with pytest.raises(RuntimeInputError):
            systolix.load(manifest).run({name: value})
    count("inputs: Python values that are not arrays of real numbers (API)")
