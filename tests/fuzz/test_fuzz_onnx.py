"""Fuzz: bad ONNX models and calibration data for ``systolix compile`` (and ``estimate MODEL.onnx``),
through the CLI and ``systolix.compile``; nothing is written when a compile fails."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import systolix
from systolix.errors import SystolixError
from tests.fuzz.conftest import FUZZ, count
from tests.fuzz.harness import assert_clean_error, cli
from tests.onnx_builders import make_model

INITIALIZERS = ["w", "b", "scale", "beta", "mean", "var"]


def test_nonfinite_weights_name_the_initializer(ws):
    """~50 models with one NaN or infinity somewhere in one initializer: compile and estimate name
    the initializer; the API raises FrontendError; no output folder is left."""
    base = onnx.load(ws.onnx)
    seen = []

    @settings(max_examples=50, **FUZZ)
    @given(name=st.sampled_from(INITIALIZERS), where=st.integers(0, 10**6),
           value=st.sampled_from([np.nan, np.inf, -np.inf]), dtype=st.sampled_from([np.float32, np.float64]))
    def case(name, where, value, dtype):
        m = onnx.ModelProto()
        m.CopyFrom(base)
        for t in m.graph.initializer:
            if t.name == name:
                a = numpy_helper.to_array(t).astype(dtype)
                a.reshape(-1)[where % a.size] = value
                t.CopyFrom(numpy_helper.from_array(a.astype(np.float32), name))
        folder = ws.case_dir()
        path = folder / "m.onnx"
        onnx.save(m, path)
        out = folder / "out"
        line = assert_clean_error(cli("compile", path, "--arch", "pynqz1", "-o", out), f"initializer {name!r}",
                                  absent_outputs=[out])
        assert ("NaN" in line) == bool(np.isnan(value))
        assert_clean_error(cli("estimate", path, "--board", "pynq-z1"), f"initializer {name!r}")
        with pytest.raises(SystolixError, match=f"initializer {name!r}"):
            systolix.compile(path, "pynqz1")
        seen.append(name)

    case()
    count("onnx: NaN or infinite weights (compile, estimate, API)", len(seen))
    assert set(seen) == set(INITIALIZERS)


ONNX_BREAKS = ["garbage", "truncate", "empty", "no-nodes", "all-constant", "constant-nan", "external-abs",
               "external-dotdot", "no-opset", "opset-99", "dynamic", "custom-domain", "bad-shape", "folded-nan",
               "no-outputs", "fifo", "directory"]


def _broken_onnx(kind: str, k: int, ws, folder) -> bytes | None:
    good = ws.onnx.read_bytes()
    if kind == "garbage":
        rng = np.random.default_rng(k)
        return b"\xff\xfe" + rng.integers(0, 256, 1 + k % 500, dtype=np.uint8).tobytes()
    if kind == "truncate":
        return good[: 1 + k % (len(good) - 2)]
    if kind == "empty":
        return b""
    if kind in ("fifo", "directory"):
        return None
    x = ("x", [1, 3, 4, 4])
    if kind == "no-nodes":
        return make_model([], [x], [x]).SerializeToString()
    if kind == "all-constant":
        nodes = [helper.make_node("Add", ["c", "c"], ["y"], name="add")]
        return make_model(nodes, [], [("y", [2])], {"c": np.ones(2, np.float32)}).SerializeToString()
    if kind == "constant-nan":
        value = numpy_helper.from_array(np.array([1.0, [np.nan, np.inf][k % 2]], np.float32), "v")
        nodes = [helper.make_node("Constant", [], ["c"], name="const", value=value),
                 helper.make_node("Mul", ["x", "c"], ["y"], name="mul")]
        return make_model(nodes, [("x", [1, 2])], [("y", None)]).SerializeToString()
    if kind == "folded-nan":
        nodes = [helper.make_node("Div", ["zero", "zero"], ["q"], name="div"),
                 helper.make_node("Add", ["x", "q"], ["y"], name="add")]
        return make_model(nodes, [("x", [1, 2])], [("y", None)], {"zero": np.zeros(2, np.float32)}).SerializeToString()
    if kind.startswith("external"):
        m = onnx.load(ws.onnx)
        t = next(t for t in m.graph.initializer if t.name == "w")
        location = str(ws.outside / "secret.tdata") if kind == "external-abs" else os.path.relpath(ws.outside / "secret.tdata", folder)
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value=location)
        return m.SerializeToString()
    if kind == "no-opset":
        m = onnx.load(ws.onnx)
        del m.opset_import[:]
        return m.SerializeToString()
    if kind == "opset-99":
        m = onnx.load(ws.onnx)
        m.opset_import[0].version = 99 + k % 100
        return m.SerializeToString()
    if kind == "dynamic":
        m = onnx.load(ws.onnx)
        m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
        return m.SerializeToString()
    if kind == "custom-domain":
        nodes = [helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")]
        m = make_model(nodes, [("x", [1, 2])], [("y", [1, 2])])
        m.opset_import.append(helper.make_opsetid("com.example", 1))
        return m.SerializeToString()
    if kind == "bad-shape":  # a conv whose weights do not match its input's channels: onnxruntime refuses
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[3, 3])]
        return make_model(nodes, [x], [("y", None)], {"w": np.zeros((2, 5 + k % 4, 3, 3), np.float32)}).SerializeToString()
    m = onnx.load(ws.onnx)  # no-outputs
    del m.graph.output[:]
    return m.SerializeToString()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the API call folding 0/0
def test_broken_onnx_models(ws):
    """~80 ONNX files broken in 17 ways (garbage, truncated, no nodes, NaN constants, external data
    pointing outside, unsupported opsets, dynamic shapes, models onnxruntime refuses...): one error
    line from compile, no output, no file opened outside; a SystolixError from the API."""
    seen = []

    @settings(max_examples=80, **FUZZ)
    @given(kind=st.sampled_from(ONNX_BREAKS), k=st.integers(0, 10**6))
    def case(kind, k):
        folder = ws.case_dir()
        path = folder / "m.onnx"
        data = _broken_onnx(kind, k, ws, folder)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        else:
            path.write_bytes(data)
        out = folder / "out"
        assert_clean_error(cli("compile", path, "--arch", "pynqz1", "-o", out, seconds=20), absent_outputs=[out],
                           outside=ws.outside)
        with pytest.raises(SystolixError):
            systolix.compile(path, "pynqz1")
        seen.append(kind)

    case()
    count("onnx: a broken or unsupported ONNX file (compile, API)", len(seen))
    assert len(set(seen)) >= len(ONNX_BREAKS) - 2


CALIBRATION_BREAKS = ["npy", "junk", "complex", "object", "nan", "inf", "missing-input", "extra-input", "wrong-shape",
                      "empty-npz", "zero-samples", "strings", "fifo", "big-header"]


def test_broken_calibration_files(ws):
    """~50 --calibrate files that are not usable samples: one error line, nothing written."""
    seen = []

    @settings(max_examples=50, **FUZZ)
    @given(kind=st.sampled_from(CALIBRATION_BREAKS), k=st.integers(0, 1000))
    def case(kind, k):
        folder = ws.case_dir()
        path = folder / ("cal.npy" if kind == "npy" else "cal.npz")
        samples = np.random.default_rng(k).normal(size=(2 + k % 3, 1, 5, 7, 6)).astype(np.float32)
        if kind == "npy":
            np.save(path, samples)
        elif kind == "junk":
            path.write_bytes(b"PK\x03\x04" + bytes(k % 50))
        elif kind == "complex":
            np.savez(path, x=samples.astype(np.complex64))
        elif kind == "object":
            np.savez(path, x=np.array([samples, None], dtype=object))
        elif kind in ("nan", "inf"):
            samples.reshape(-1)[k % samples.size] = np.nan if kind == "nan" else -np.inf
            np.savez(path, x=samples)
        elif kind == "missing-input":
            np.savez(path, y=samples)
        elif kind == "extra-input":
            np.savez(path, x=samples, z=samples)
        elif kind == "wrong-shape":
            np.savez(path, x=samples[..., :5])
        elif kind == "empty-npz":
            np.savez(path)
        elif kind == "zero-samples":
            np.savez(path, x=samples[:0])
        elif kind == "strings":
            np.savez(path, x=np.array(["a", "b"]))
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            import io
            import zipfile

            from tests.fuzz.test_fuzz_inputs import _with_header

            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as z:
                z.writestr("x.npy", _with_header("<f4", f"({2**40 + k}, 1, 5, 7, 6)"))
            path.write_bytes(buffer.getvalue())
        out = folder / "out"
        assert_clean_error(cli("compile", ws.onnx, "--arch", "pynqz1", "-o", out, "--calibrate", path, seconds=20),
                           "cal.np", absent_outputs=[out])
        if kind != "fifo":
            with pytest.raises(SystolixError):
                systolix.compile(ws.onnx, "pynqz1", calibration=path)
        seen.append(kind)

    case()
    count("onnx: unusable --calibrate samples (compile, API)", len(seen))
    assert len(set(seen)) >= len(CALIBRATION_BREAKS) - 1


@pytest.mark.parametrize("where", ["existing-file", "under-a-file", "strategy", "arch", "name-of-dir"])
def test_compile_outputs_and_options(ws, where):
    """-o naming a file or a folder under a file, an unknown strategy or architecture: one error
    line before any work, nothing written."""
    folder = ws.case_dir()
    (folder / "file").write_text("keep me")
    args = ["compile", ws.onnx, "--arch", "pynqz1", "-o", folder / "out"]
    if where == "existing-file":
        args[-1] = folder / "file"
    elif where == "under-a-file":
        args[-1] = folder / "file" / "out"
    elif where == "strategy":
        args += ["--strategy", "fastest"]
    elif where == "arch":
        args[3] = "no-such-arch"
    else:
        args[1] = folder
    assert_clean_error(cli(*args), absent_outputs=[folder / "out"])
    assert (folder / "file").read_text() == "keep me"
    count("onnx: compile's -o, --strategy, --arch or model path refused (compile)")
