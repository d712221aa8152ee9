"""Fuzz: command-line mistakes (bad option values, missing arguments, unknown commands and
options, outputs that cannot be written): one ``error:`` line and exit status 2, never the CLI
framework's box, and nothing written."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import FUZZ, count, partitioned_manifest, tiny_manifest
from tests.fuzz.harness import assert_clean_error, cli

# (command line template, option, values it refuses); {m} is the tiny model, {x} its input,
# {o} an output path, {onnx} an ONNX model.
OPTION_VALUES = [
    ("run {m} -i {x}", "--classes", ["0", "-3", "abc", "1.5", "", "1e3"]),
    ("run {m} -i {x}", "--trace-at", ["-1", "x", "0x10", "2.5"]),
    ("run {m} -i {x} --trace-at 1", "--trace-range", ["vram", "local:-1", "acc:0:0", "dram0:a", "local:1:2:3", ":"]),
    ("run {m} -i {x}", "-o", ["{o}.txt", "{o}.csv", "{dir}", "{file}/y.npy"]),
    ("run {m} -i {x} --trace-at 1", "--trace-file", ["{file}/t.npz", "{dir}"]),
    ("estimate {m}", "--board", ["", "zcu105", "ultra96v2x", "PYNQ-Z1"]),
    ("estimate {onnx} --board pynq-z1", "--arch", ["nosuch", "{file}"]),
    ("estimate {onnx} --board pynq-z1", "--strategy", ["fast", "", "LOCAL-VARS"]),
    ("profile {m} --board pynq-z1 -o {o}", "--sample-interval", ["-1", "65536", "x"]),
    ("profile {m} --board pynq-z1 -o {o}", "--merge-gap", ["-1", "nan?", "x"]),
    ("profile {m} --board pynq-z1", "-o", ["{file}", "{file}/sub"]),
    ("compile {onnx} -o {o}", "--arch", ["", "zcu", "{file}", "{dir}"]),
    ("compile {onnx} --arch pynqz1 -o {o}", "--strategy", ["isolated", "local", "1"]),
    ("compile {onnx} --arch pynqz1", "-o", ["{file}", "{file}/sub"]),
    ("disasm {prog}", "--arch", ["nosuch", "{file}", "{dir}"]),
    ("disasm {prog} --arch pynqz1", "-o", ["{dir}", "{file}/p.s"]),
    ("bench --no-models", "--model", ["resnet20"]),
    ("bench --no-models --no-zcu104", "--markdown", [None]),
]

MISSING = [
    "run", "run {m}", "run -i {x}", "estimate", "estimate {m}", "profile {m} --board pynq-z1", "compile",
    "compile {onnx}", "disasm {prog}", "asm {prog} --arch pynqz1", "asm", "info", "disasm", "frobnicate",
    "run {m} -i {x} --bogus", "compile {onnx} --arch", "run {m} -i", "estimate {m} --board", "info {m} {m}",
    "--version-please", "archs extra", "run {m} -i {x} --classes", "demo --arch", "bench --model",
]


def _args(template: str, ws, folder) -> list[str]:
    (folder / "file").write_text("a file")
    (folder / "dir").mkdir(exist_ok=True)
    values = {"m": tiny_manifest(ws.tiny), "x": ws.root / "x.npy", "o": folder / "out", "onnx": ws.onnx,
              "prog": ws.tiny / "m.tprog", "file": folder / "file", "dir": folder / "dir",
              "p": partitioned_manifest(ws.partitioned)}
    return [part.format(**values) for part in template.split()]


def test_bad_option_values(ws):
    """~70 commands each with one option value the command refuses."""
    seen = []
    flat = [(t, o, v) for t, o, vs in OPTION_VALUES for v in vs]

    @settings(max_examples=len(flat), **FUZZ)
    @given(index=st.sampled_from(range(len(flat))))
    def case(index):
        template, option, value = flat[index]
        folder = ws.case_dir()
        args = _args(template, ws, folder) + [option] + ([] if value is None else [value.format(
            o=folder / "out", dir=folder / "dir", file=folder / "file")])
        line = assert_clean_error(cli(*args), absent_outputs=[folder / "out", folder / "out.txt"])
        assert "╭" not in line and "Usage:" not in line
        assert (folder / "file").read_text() == "a file"
        seen.append(index)

    case()
    count("cli: a bad option value", len(seen))
    assert len(set(seen)) >= len(flat) * 0.9


@pytest.mark.parametrize("template", MISSING)
def test_missing_arguments_and_unknown_commands(ws, template, tmp_path):
    """Missing arguments, unknown commands and options, extra arguments: one error line, exit 2."""
    line = assert_clean_error(cli(*_args(template, ws, tmp_path)))
    assert "--help" in line or "error: " in line
    count("cli: a missing argument, an unknown command or option")
