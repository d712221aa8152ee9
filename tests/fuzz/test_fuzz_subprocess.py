"""Fuzz, for real: bad input through the installed ``systolix`` script in its own process.

In-process runs see only what Python writes; here stderr is the process's own, so onnxruntime's
C++ log lines, the CLI framework's usage boxes, NumPy's warnings or a hang on a FIFO would show.
Each case: exit status 2, stderr exactly one line starting with ``error:``, stdout empty, within
its time limit.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.fuzz.conftest import count, partitioned_manifest, tiny_manifest
from tests.fuzz.harness import assert_clean_error, subprocess_cli
from tests.fuzz.test_fuzz_onnx import _broken_onnx
from tests.onnx_builders import make_model


def _tiny_with(ws, change) -> str:
    folder = ws.copy(ws.tiny)
    manifest = tiny_manifest(folder)
    d = json.loads(manifest.read_text())
    change(d, folder)
    manifest.write_text(json.dumps(d))
    return manifest


def _partitioned_host(ws, data: bytes):
    folder = ws.copy(ws.partitioned)
    onnx_file = next(folder.glob("*.onnx"))
    onnx_file.write_bytes(data)
    return partitioned_manifest(folder)


def _case(name, ws, tmp):  # noqa: C901 - one branch per case, each a few lines
    x = ws.root / "x.npy"
    m = tiny_manifest(ws.tiny)
    if name == "bad-option-value":
        return ["run", m, "-i", x, "--classes", "0"], {}
    if name == "missing-argument":
        return ["run", m], {}
    if name == "unknown-command":
        return ["frobnicate", m], {}
    if name == "unknown-option":
        return ["estimate", m, "--board", "pynq-z1", "--fast"], {}
    if name.startswith("onnx-"):
        kind = name[len("onnx-"):]
        path = tmp / "m.onnx"
        path.write_bytes(_broken_onnx(kind, 3, ws, tmp))
        return ["compile", path, "--arch", "pynqz1", "-o", tmp / "out"], {}
    if name == "estimate-onnx-refused":
        path = tmp / "m.onnx"
        path.write_bytes(_broken_onnx("bad-shape", 1, ws, tmp))
        return ["estimate", path, "--board", "pynq-z1"], {}
    if name == "host-segment-garbage":
        return ["run", _partitioned_host(ws, b"\x08\x07garbage"), "-i", ws.root / "part_in.npz"], {}
    if name == "host-segment-wrong-model":
        other = make_model([helper.make_node("Relu", ["q"], ["probabilities"], name="r")], [("q", [1, 10])],
                           [("probabilities", [1, 10])])
        return ["run", _partitioned_host(ws, other.SerializeToString()), "-i", ws.root / "part_in.npz"], {}
    if name == "host-segment-invalid-graph":
        bad = make_model([helper.make_node("Softmax", ["dense"], ["probabilities"], name="s", axis=7)],
                         [("dense", [1, 10])], [("probabilities", [1, 10])])
        return ["run", _partitioned_host(ws, bad.SerializeToString()), "-i", ws.root / "part_in.npz"], {}
    if name == "fifo-manifest":
        os.mkfifo(tmp / "f.tmodel")
        return ["info", tmp / "f.tmodel"], {}
    if name == "fifo-program":
        def fifo_prog(d, folder):
            os.mkfifo(folder / "p.fifo")
            d["prog"]["file_name"] = "p.fifo"
        return ["run", _tiny_with(ws, fifo_prog), "-i", x], {}
    if name == "not-utf8-manifest":
        (tmp / "m.tmodel").write_bytes(b"\xff\xfe{}")
        return ["run", tmp / "m.tmodel", "-i", x], {}
    if name == "nested-manifest":
        (tmp / "m.tmodel").write_bytes(b"[" * 200000)
        return ["estimate", tmp / "m.tmodel", "--board", "pynq-z1"], {}
    if name == "absolute-program":
        return ["run", _tiny_with(ws, lambda d, f: d["prog"].update(file_name=str(ws.outside / "secret.tprog"))), "-i", x], {}
    if name == "symlink-host-segment":
        folder = ws.copy(ws.partitioned)
        target = next(folder.glob("*.onnx"))
        target.unlink()
        os.symlink(ws.outside / "secret.onnx", target)
        return ["run", partitioned_manifest(folder), "-i", ws.root / "part_in.npz"], {}
    if name == "empty-npy":
        (tmp / "e.npy").write_bytes(b"")
        return ["run", m, "-i", tmp / "e.npy"], {}
    if name == "object-npz":
        np.savez(tmp / "o.npz", x=np.array([1, None], dtype=object))
        return ["run", m, "-i", tmp / "o.npz"], {}
    if name == "nan-input":
        np.save(tmp / "n.npy", np.array([[np.nan, 1, 2]], np.float32))
        return ["run", m, "-i", tmp / "n.npy", "-o", tmp / "out.npy"], {}
    if name == "complex-input":
        np.save(tmp / "c.npy", np.ones((1, 3), np.complex64))
        return ["run", m, "-i", tmp / "c.npy"], {}
    if name == "csv-not-utf8":
        (tmp / "x.csv").write_bytes(b"1,2,\xff,0\n")
        return ["run", m, "-i", tmp / "x.csv"], {}
    if name in ("estimate-out-of-bounds", "profile-out-of-bounds"):
        from systolix.isa import DataFlow, DataMove, InstructionLayout, encode
        from tests.unit.test_emulator_runtime import ARCH

        def oob(d, folder):
            data = (folder / "m.tprog").read_bytes() + encode(DataMove(DataFlow.DRAM0_TO_LOCAL, 60, 0, 9),
                                                              InstructionLayout.of(ARCH))
            (folder / "m.tprog").write_bytes(data)
            d["prog"]["size"] = len(data)
        path = _tiny_with(ws, oob)
        if name.startswith("profile"):
            return ["profile", path, "--board", "pynq-z1", "-o", tmp / "prof"], {}
        return ["estimate", path, "--board", "pynq-z1"], {}
    if name == "profile-output-under-file":
        (tmp / "file").write_text("x")
        return ["profile", m, "--board", "pynq-z1", "-o", tmp / "file" / "sub"], {}
    if name == "compile-output-is-file":
        (tmp / "file").write_text("x")
        return ["compile", ws.onnx, "--arch", "pynqz1", "-o", tmp / "file"], {}
    if name == "calibrate-npy":
        np.save(tmp / "cal.npy", np.zeros((2, 1, 5, 7, 6), np.float32))
        return ["compile", ws.onnx, "--arch", "pynqz1", "-o", tmp / "out", "--calibrate", tmp / "cal.npy"], {}
    if name == "memory-limit":
        np.save(tmp / "xs.npy", np.ones((5000, 1, 3), np.float32))
        return ["run", m, "-i", tmp / "xs.npy"], {"SYSTOLIX_MEMORY_LIMIT": str(100 * 5000)}
    if name == "truncated-program":
        (tmp / "t.tprog").write_bytes((ws.tiny / "m.tprog").read_bytes()[:10])
        ws_arch = tmp / "a.tarch"
        from tests.unit.test_emulator_runtime import ARCH

        ARCH.save(ws_arch)
        return ["disasm", tmp / "t.tprog", "--arch", ws_arch], {}
    if name == "bad-listing":
        (tmp / "p.s").write_text("MatMul local[0] -> acc[4096000] size=0\n")
        return ["asm", tmp / "p.s", "--arch", "pynqz1", "-o", tmp / "p.tprog"], {}
    raise AssertionError(name)


CASES = ["bad-option-value", "missing-argument", "unknown-command", "unknown-option", "onnx-bad-shape",
         "onnx-custom-domain", "onnx-opset-99", "onnx-garbage", "onnx-constant-nan", "onnx-no-nodes",
         "onnx-external-dotdot", "onnx-folded-nan", "onnx-dynamic", "estimate-onnx-refused", "host-segment-garbage",
         "host-segment-wrong-model", "host-segment-invalid-graph", "fifo-manifest", "fifo-program",
         "not-utf8-manifest", "nested-manifest", "absolute-program", "symlink-host-segment", "empty-npy",
         "object-npz", "nan-input", "complex-input", "csv-not-utf8", "estimate-out-of-bounds",
         "profile-out-of-bounds", "profile-output-under-file", "compile-output-is-file", "calibrate-npy",
         "memory-limit", "truncated-program", "bad-listing"]


@pytest.mark.parametrize("name", CASES)
def test_a_real_process_prints_one_error_line(ws, tmp_path, name):
    args, env = _case(name, ws, tmp_path)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        result = subprocess_cli(*args, seconds=60)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert_clean_error(result, absent_outputs=[tmp_path / "out", tmp_path / "out.npy", tmp_path / "prof",
                                               tmp_path / "p.tprog"],
                       secret_markers=(*ws.secret_sizes,))
    count("subprocess: the installed script on bad input (stderr exactly one line)")


def test_help_and_no_arguments_are_not_errors(ws):
    """The counterpart: `systolix` alone and `--help` print the help and exit 0."""
    for args in ([], ["--help"], ["run", "--help"]):
        result = subprocess_cli(*args)
        assert result.code == 0 and "Usage" in result.stdout and result.stderr == "", str(result)
