"""Fuzz: broken ``.tmodel`` manifests (Tensil's keys, the ``systolix`` key, partitioned segments,
file names that try to leave the model's folder).

Every generated manifest is invalid by construction (a value of the wrong type or out of range,
a required key deleted, a span past its memory, a shape its span cannot hold, a file name outside
the folder...), so each case must end in exactly one ``error:`` line and exit status 2 from
``run`` and ``estimate`` (the same checks), and in a ``SystolixError`` from the Python API.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import systolix
from systolix.errors import SystolixError
from tests.fuzz.conftest import FUZZ, SECRET_MARKER, count, each_kind, partitioned_manifest, tiny_manifest
from tests.fuzz.harness import assert_clean_error, cli

DELETE = object()

# Values no field of a given kind accepts.
NOT_INT = st.sampled_from(["1", 1.5, None, True, [1], {"a": 1}, "zero", 1e300])
NOT_STR = st.sampled_from([1, None, True, ["m.tprog"], {"f": "m.tprog"}, 2.5])
NOT_LIST = st.sampled_from([1, "x", None, True, {"a": 1}])
NOT_DICT = st.sampled_from([1, "x", None, True, [1, 2]])
NEGATIVE = st.integers(-(2**70), -1)
HUGE = st.integers(2**34 + 1, 2**80)
BAD_NAMES = st.sampled_from(["", "/etc/passwd", "../m.tprog", "a/../../m.tprog", "..", ".", "x\x00y", "a" * 300,
                             "b/" * 600, "/", "sub/../../outside/secret.tprog", "\\..\\m.tprog"])


def _tiny_mutations():
    """(path into the manifest, strategy of values that make it invalid)."""
    ext = ["systolix"]
    return [
        (["name"], NOT_STR), ([], st.just("delete:name")),
        (["prog"], NOT_DICT), (["prog", "file_name"], st.one_of(NOT_STR, BAD_NAMES)),
        (["prog", "size"], st.one_of(NOT_INT, NEGATIVE, HUGE, st.integers(0, 55), st.integers(57, 10**6))),
        (["prog", "file_name"], st.just(DELETE)), (["prog", "size"], st.just(DELETE)),
        (["consts"], NOT_LIST), (["consts", 0], NOT_DICT),
        (["consts", 0, "file_name"], st.one_of(NOT_STR, BAD_NAMES, st.just(DELETE))),
        (["consts", 0, "base"], st.one_of(NOT_INT, NEGATIVE, HUGE, st.integers(2**20 - 4, 2**32), st.just(DELETE))),
        (["consts", 0, "size"], st.one_of(NOT_INT, NEGATIVE, HUGE, st.integers(6, 2**32), st.just(DELETE))),
        (["inputs"], NOT_LIST), (["inputs", 0], NOT_DICT), (["inputs", 0, "name"], st.one_of(NOT_STR, st.just(DELETE))),
        (["inputs", 0, "base"], st.one_of(NOT_INT, NEGATIVE, HUGE, st.integers(2**20, 2**32), st.just(DELETE))),
        (["inputs", 0, "size"], st.one_of(NOT_INT, NEGATIVE, HUGE, st.integers(0, 0), st.integers(2, 2**32))),
        (["outputs", 0, "base"], st.one_of(NOT_INT, NEGATIVE, st.integers(2**20, 2**32))),
        (["outputs", 0, "size"], st.one_of(NOT_INT, NEGATIVE, st.integers(2, 2**32))),
        (["outputs"], NOT_LIST),
        (["arch"], NOT_DICT),
        (["arch", "array_size"], st.one_of(NOT_INT, st.integers(-5, 1), st.integers(257, 2**40))),
        (["arch", "data_type"], st.one_of(NOT_STR, st.sampled_from(["FP7", "fp16bp8", "", "FLOAT64"]))),
        (["arch", "local_depth"], st.one_of(NOT_INT, st.integers(-3, 0), st.integers(2**24 + 1, 2**40))),
        (["arch", "dram0_depth"], st.one_of(NOT_INT, st.integers(-3, 0), st.integers(2**32 + 1, 2**64))),
        (["arch", "stride0_depth"], st.one_of(NOT_INT, st.integers(257, 10**6))),
        (["arch", "simd_registers_depth"], st.integers(17, 10**6)),
        (["arch", "local_depth"], st.just(DELETE)), (["arch", "bogus_key"], st.integers()),
        (["load_consts_to_local"], st.one_of(NOT_INT.filter(lambda v: not isinstance(v, bool)), st.just("true"))),
        (ext, st.sampled_from([1, "x", [1], True])),
        (ext + ["version"], st.one_of(st.integers(2, 10), st.just("1"), st.just(None))),
        (ext + ["inputs"], NOT_LIST),
        (ext + ["inputs", 0], NOT_DICT),
        (ext + ["inputs", 0, "shape"], st.one_of(
            st.just(["a"]), st.just([1.5, 3]), st.just([[1], 3]), st.just("1,3"),
            st.lists(st.integers(-(2**40), 0), min_size=1, max_size=4),
            st.lists(st.integers(2**31 + 1, 2**70), min_size=1, max_size=3),
            st.lists(st.integers(1, 3), min_size=17, max_size=20),
            st.sampled_from([[2, 3], [1, 5], [3, 1, 3], [1, 3, 7], [2**31, 2**31], [7, 1]]))),
        (ext + ["inputs", 0, "layout"], st.one_of(NOT_DICT.filter(lambda v: v is not None), st.just({"perm": [0, 1]}))),
        (ext + ["inputs", 0, "layout", "perm"], st.one_of(
            NOT_LIST, st.sampled_from([[0, 0], [1], [0, 1, 2], ["a", 0], [2, 0], [-1, 0], [0.5, 1]]))),
        (ext + ["inputs", 0, "layout", "padded_channels"], st.one_of(
            NOT_INT, st.integers(-10, 0), st.sampled_from([1, 2, 3, 5, 6, 7, 8, 12]), st.integers(2**31 + 1, 2**60))),
        (ext + ["outputs", 0, "shape"], st.sampled_from([[1, 5], [3, 2], [0, 2], ["x"], [1, 2, 3, 4]])),
        (ext + ["layers"], st.one_of(NOT_LIST.filter(lambda v: v is not None), st.just([{"name": "l"}]),
                                     st.just([{"first": 3, "end": 1}]), st.just([{"first": 0, "end": 99}]),
                                     st.just([{"first": -1, "end": 2}]), st.just([{"first": "0", "end": 2}]),
                                     st.just([{"first": 0, "end": 2, "macs": -5}]), st.just([5]))),
        (ext + ["segments"], st.sampled_from([[], "all", 3, [None], [{"kind": "host"}], [{"kind": "gpu"}],
                                              [{"kind": "accelerator", "tmodel": "m.tmodel", "inputs": ["x"]}],
                                              [{"kind": "accelerator", "tmodel": "m.tmodel", "inputs": ["z"], "outputs": ["y"]}],
                                              [{"kind": "host", "onnx": "m.tprog", "inputs": ["x"], "outputs": ["y"]}]])),
        (ext + ["placement"], st.sampled_from([3, "x", {"a": "gpu"}, {"a": 1}, [1]])),
        (ext + ["strategy"], st.sampled_from([3, ["local-isolated"], {"s": 1}])),
    ]


def _set(data, path, value):
    if path == [] and isinstance(value, str) and value.startswith("delete:"):
        del data[value.split(":", 1)[1]]
        return
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


TINY = _tiny_mutations()


def _check_api(path: Path, inputs) -> None:
    with pytest.raises(SystolixError) as info:
        systolix.load(path).run(inputs)
    assert str(info.value).strip() and "\n" not in str(info.value)


def test_broken_tiny_manifests(ws):
    """~180 manifests with one field made invalid: run, estimate and the API all refuse them."""
    x = np.load(ws.root / "x.npy")
    seen = []

    @settings(max_examples=180, **FUZZ)
    @given(choice=st.integers(0, len(TINY) - 1), data=st.data())
    def case(choice, data):
        path, values = TINY[choice]
        value = data.draw(values)
        folder = ws.copy(ws.tiny)
        manifest = tiny_manifest(folder)
        d = json.loads(manifest.read_text())
        _set(d, path, value)
        manifest.write_text(json.dumps(d))
        out = folder.parent / "y.npy"
        line = assert_clean_error(cli("run", manifest, "-i", ws.root / "x.npy", "-o", out), absent_outputs=[out],
                                  outside=ws.outside, secret_markers=(SECRET_MARKER,))
        assert len(line) < 600
        assert_clean_error(cli("estimate", manifest, "--board", "pynq-z1"), outside=ws.outside)
        _check_api(manifest, {"x": x})
        seen.append(choice)

    case()
    count("manifest: one field of a .tmodel made invalid (run, estimate, API)", len(seen))
    assert len(seen) >= 150 and len(set(seen)) == len(TINY)


SEGMENT_MUTATIONS = [
    ("kind", st.sampled_from(["gpu", "", None, 1, "Host", ["host"]])),
    ("inputs", st.one_of(NOT_LIST, st.just(["nope"]), st.just([1]), st.just([["x"]]))),
    ("outputs", st.one_of(NOT_LIST, st.just([]), st.just(["nope"]), st.just([None]))),
    ("nodes", st.one_of(NOT_LIST.filter(lambda v: v is not None), st.just([1]))),
    ("file", st.one_of(NOT_STR, BAD_NAMES, st.sampled_from(["missing.onnx", "missing.tmodel", "sub"]))),
    ("swap", st.just(None)),
    ("delete", st.sampled_from(["kind", "inputs", "outputs", "file"])),
    ("wrongfile", st.sampled_from(["top", "tprog", "tdata", "other-kind"])),
]


def test_broken_segments_of_a_partitioned_model(ws):
    """~110 partitioned manifests with one segment entry broken: every one refused, no file outside read."""
    seen = []

    @settings(max_examples=110, **FUZZ)
    @given(which=st.integers(0, 1), choice=st.integers(0, len(SEGMENT_MUTATIONS) - 1), data=st.data())
    def case(which, choice, data):
        field, values = SEGMENT_MUTATIONS[choice]
        value = data.draw(values)
        folder = ws.copy(ws.partitioned)
        (folder / "sub").mkdir()
        manifest = partitioned_manifest(folder)
        d = json.loads(manifest.read_text())
        seg = d["systolix"]["segments"][which]
        file_key = "tmodel" if seg["kind"] == "accelerator" else "onnx"
        if field == "file":
            seg[file_key] = value
        elif field == "swap":
            seg["kind"] = "host" if seg["kind"] == "accelerator" else "accelerator"
        elif field == "delete":
            del seg[file_key if value == "file" else value]
        elif field == "wrongfile":
            files = {"top": manifest.name, "tprog": next(folder.glob("*.seg0.tprog")).name,
                     "tdata": next(folder.glob("*.tdata")).name,
                     "other-kind": next(folder.glob("*.onnx" if file_key == "tmodel" else "*.seg0.tmodel")).name}
            seg[file_key] = files[value]
        else:
            seg[field] = value
        manifest.write_text(json.dumps(d))
        out = folder.parent / "y.npz"
        assert_clean_error(cli("run", manifest, "-i", ws.root / "part_in.npz", "-o", out), absent_outputs=[out],
                           outside=ws.outside, secret_markers=(SECRET_MARKER,))
        with np.load(ws.root / "part_in.npz") as f:
            _check_api(manifest, dict(f))
        seen.append((which, choice))

    case()
    count("manifest: one segment of a partitioned .tmodel made invalid (run, API)", len(seen))
    assert len(seen) >= 100 and len({c for _, c in seen}) == len(SEGMENT_MUTATIONS)


# --- file names that try to leave the folder ----------------------------------------------
ESCAPES = ["absolute", "dotdot", "symlink", "symlink-dir", "fifo", "directory", "device", "long"]
FIELDS = ["prog", "consts", "host-onnx", "segment-tmodel"]


def _escape_name(kind: str, folder: Path, ws, suffix: str) -> str:
    secret = ws.outside / f"secret{suffix}"
    if kind == "absolute":
        return str(secret)
    if kind == "dotdot":
        return os.path.relpath(secret, folder)
    if kind == "symlink":
        os.symlink(secret, folder / f"link{suffix}")
        return f"link{suffix}"
    if kind == "symlink-dir":
        os.symlink(ws.outside, folder / "linkdir")
        return f"linkdir/secret{suffix}"
    if kind == "fifo":
        os.mkfifo(folder / f"fifo{suffix}")
        return f"fifo{suffix}"
    if kind == "directory":
        (folder / f"dir{suffix}").mkdir()
        return f"dir{suffix}"
    if kind == "device":
        os.symlink("/dev/zero", folder / f"zero{suffix}")
        return f"zero{suffix}"
    return "x" * 5000 + suffix


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("kind", ESCAPES)
def test_file_names_stay_in_the_model_folder(ws, field, kind):
    """Absolute names, '..', symbolic links out, FIFOs, directories, devices, 5,000-character names:
    refused by run, estimate and info without opening anything outside or saying anything about it."""
    if field in ("prog", "consts"):
        folder = ws.copy(ws.tiny)
        manifest = tiny_manifest(folder)
        d = json.loads(manifest.read_text())
        if field == "prog":
            d["prog"]["file_name"] = _escape_name(kind, folder, ws, ".tprog")
        else:
            d["consts"][0]["file_name"] = _escape_name(kind, folder, ws, ".tdata")
        inputs = ws.root / "x.npy"
    else:
        folder = ws.copy(ws.partitioned)
        manifest = partitioned_manifest(folder)
        d = json.loads(manifest.read_text())
        for seg in d["systolix"]["segments"]:
            if field == "host-onnx" and seg["kind"] == "host":
                seg["onnx"] = _escape_name(kind, folder, ws, ".onnx")
            if field == "segment-tmodel" and seg["kind"] == "accelerator":
                seg["tmodel"] = _escape_name(kind, folder, ws, ".tmodel")
        inputs = ws.root / "part_in.npz"
    manifest.write_text(json.dumps(d))
    markers = (SECRET_MARKER, *ws.secret_sizes)
    commands = [("run", manifest, "-i", inputs), ("estimate", manifest, "--board", "pynq-z1")]
    if field == "prog":
        commands.append(("info", manifest))
    for args in commands:
        line = assert_clean_error(cli(*args, seconds=10), outside=ws.outside, secret_markers=markers)
        assert str(ws.outside) not in line or kind == "absolute"
        assert "x" * 100 not in line  # a long name is shown cut
    with pytest.raises(SystolixError):
        systolix.load(manifest)
    count("confinement: a file name leaving the folder or not a regular file (run, estimate, info, API)")


# --- manifests that are not JSON objects at all -------------------------------------------------
JSON_BREAKS = ["truncate", "latin1", "nest", "nan", "bigint", "not-object", "bom-junk", "empty"]


def test_manifests_that_are_not_valid_json(ws):
    """~60 .tmodel files that are truncated, not UTF-8, nested 100,000 deep, hold NaN or a
    10,000-digit number, or are not an object: one error line each (run and info)."""
    seen = []
    base_text = tiny_manifest(ws.tiny).read_text()

    @settings(max_examples=60, **FUZZ)
    @given(kind=st.sampled_from(JSON_BREAKS), k=st.integers(0, 10**6))
    @each_kind(JSON_BREAKS, k=0)
    def case(kind, k):
        folder = ws.copy(ws.tiny)
        manifest = tiny_manifest(folder)
        if kind == "truncate":
            data = base_text[: k % (len(base_text) - 1)].encode()
        elif kind == "latin1":
            pos = k % len(base_text)
            data = base_text[:pos].encode() + b"\xe9\xff" + base_text[pos:].encode()
        elif kind == "nest":
            depth = 10_000 + k % 200_000
            data = b"[" * depth + b"]" * depth
        elif kind == "nan":
            data = re.sub(r'"size":\s*', '"size": NaN, "x": ', base_text, count=1).encode()
        elif kind == "bigint":
            data = re.sub(r'"base":\s*0', '"base": ' + "9" * (5000 + k % 5000), base_text, count=1).encode()
        elif kind == "not-object":
            data = json.dumps([json.loads(base_text)] if k % 2 else "m.tmodel").encode()
        elif kind == "bom-junk":
            data = b"\xef\xbb\xbf\x00" + base_text.encode()
        else:
            data = b""
        assert data != base_text.encode()
        manifest.write_bytes(data)
        for args in (("run", manifest, "-i", ws.root / "x.npy"), ("info", manifest)):
            assert_clean_error(cli(*args), "m.tmodel")
        with pytest.raises(SystolixError, match="m.tmodel"):
            systolix.load(manifest)
        seen.append(kind)

    case()
    count("manifest: not a valid UTF-8 JSON object (run, info, API)", len(seen))
    assert len(set(seen)) == 8
