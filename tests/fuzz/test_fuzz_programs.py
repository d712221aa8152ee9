"""Fuzz: broken programs (``.tprog``), constants (``.tdata``) and architectures (``.tarch``), and
models that need more memory than the limit allows.

A program that reaches outside a memory stops ``run`` at the first bad instruction; ``estimate``
and ``profile`` refuse it with the very same message (and ``profile`` writes nothing).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import systolix
from systolix.arch import Architecture, get_architecture
from systolix.errors import ArchitectureError, SystolixError
from systolix.isa import SIMD, DataFlow, DataMove, InstructionLayout, LoadWeights, MatMul, SimdOp, decode_program, encode
from systolix.isa.instructions import LoadLUT
from systolix.limits import MemoryLimitError
from tests.fuzz.conftest import FUZZ, count, each_kind, tiny_manifest
from tests.fuzz.harness import assert_clean_error, cli
from tests.unit.test_emulator_runtime import ARCH

LAYOUT = InstructionLayout.of(ARCH)  # 4x4, local 64, accumulators 32, DRAM 2^20, 7-byte instructions
LOCAL, ACC, DRAM = ARCH.local_depth, ARCH.accumulator_depth, ARCH.dram0_depth


OUT_OF_BOUNDS = ["dram0->local", "local->dram0", "dram1->local", "dram0-far", "matmul-acc", "matmul-local",
                 "acc->local", "local->acc", "loadweights", "simd-read", "simd-write", "loadlut"]


@st.composite
def out_of_bounds_instruction(draw, kind):
    """An encodable instruction of ``kind`` that reaches past local memory, the accumulators or
    DRAM (or a LoadLUT, which no hardware implements)."""
    size = draw(st.integers(1, 100))
    stride = draw(st.sampled_from([1, 2, 4]))
    near = lambda depth: draw(st.integers(max(0, depth - size * stride), depth - 1))  # noqa: E731
    return _make(kind, draw, size, stride, near)


def _make(kind, draw, size, stride, near):
    if kind == "dram0->local":
        return DataMove(DataFlow.DRAM0_TO_LOCAL, near(LOCAL), 0, size, local_stride=stride)
    if kind == "local->dram0":
        return DataMove(DataFlow.LOCAL_TO_DRAM0, near(LOCAL), 8, size, local_stride=stride)
    if kind == "dram1->local":
        return DataMove(DataFlow.DRAM1_TO_LOCAL, 0, near(DRAM), size, stride=stride)
    if kind == "dram0-far":
        return DataMove(DataFlow.LOCAL_TO_DRAM0, 0, near(DRAM), size, stride=stride)
    if kind == "matmul-acc":
        return MatMul(0, near(ACC), size, acc_stride=stride)
    if kind == "matmul-local":
        return MatMul(near(LOCAL), 0, size, local_stride=stride)
    if kind == "acc->local":
        return DataMove(DataFlow.ACC_TO_LOCAL, 0, near(ACC), size, stride=stride)
    if kind == "local->acc":
        return DataMove(DataFlow.LOCAL_TO_ACC, near(LOCAL), 0, size, local_stride=stride)
    if kind == "loadweights":
        return LoadWeights(near(LOCAL), size, local_stride=stride)
    if kind == "simd-read":
        return SIMD(SimdOp.MOVE, read_address=draw(st.integers(ACC, 63)), read=True)
    if kind == "simd-write":
        return SIMD(SimdOp.ZERO, write_address=draw(st.integers(ACC, 63)), write=True)
    return LoadLUT(0, 0)


@pytest.mark.parametrize("kind", OUT_OF_BOUNDS)
def test_programs_that_reach_outside_memory(ws, kind):
    """7 programs per kind (84) with one instruction past a memory: run, estimate and profile give
    the same one line, naming the instruction."""
    seen = []

    @settings(max_examples=7, **FUZZ)
    @given(bad=out_of_bounds_instruction(kind), at=st.integers(0, 8))
    def case(bad, at):
        folder = ws.copy(ws.tiny)
        manifest = tiny_manifest(folder)
        prog = (folder / "m.tprog").read_bytes()
        b = LAYOUT.instruction_bytes
        data = prog[: at * b] + encode(bad, LAYOUT) + prog[at * b:]
        (folder / "m.tprog").write_bytes(data)
        d = json.loads(manifest.read_text())
        d["prog"]["size"] = len(data)
        manifest.write_text(json.dumps(d))
        out = folder.parent / "prof"
        run_line = assert_clean_error(cli("run", manifest, "-i", ws.root / "x.npy"), f"instruction #{at}")
        est_line = assert_clean_error(cli("estimate", manifest, "--board", "pynq-z1"))
        prof_line = assert_clean_error(cli("profile", manifest, "--board", "pynq-z1", "-o", out), absent_outputs=[out])
        assert run_line == est_line == prof_line
        with pytest.raises(SystolixError, match=f"instruction #{at}"):
            systolix.load(manifest).run({"x": np.ones((1, 3), np.float32)})
        seen.append(at)

    case()
    count("programs: an instruction past a memory, or LoadLUT (run = estimate = profile, API)", len(seen))
    assert len(seen) == 7


PROGRAM_BREAKS = ["truncate", "opcode", "dm-flow", "flags", "extra-bytes"]


def test_program_bytes_that_do_not_decode(ws):
    """~60 .tprog files that are truncated, hold an undefined opcode, DataMove kind or flag:
    run, estimate, info and disasm all refuse them (the manifest's size updated to match)."""
    seen = []
    tarch = ws.root / "tiny.tarch"
    ARCH.save(tarch)

    @settings(max_examples=60, **FUZZ)
    @given(kind=st.sampled_from(PROGRAM_BREAKS), at=st.integers(0, 7), k=st.integers(0, 1000))
    @each_kind(PROGRAM_BREAKS, at=0, k=0)
    def case(kind, at, k):
        folder = ws.copy(ws.tiny)
        manifest = tiny_manifest(folder)
        prog = bytearray((folder / "m.tprog").read_bytes())
        b = LAYOUT.instruction_bytes
        header = at * b + b - 1
        if kind == "truncate":
            prog = prog[: at * b + 1 + k % (b - 1)]
        elif kind == "opcode":
            prog[header] = ((6 + k % 9) << 4) | (prog[header] & 0xF)
        elif kind == "dm-flow":
            prog[header] = (2 << 4) | [4, 5, 6, 7, 8, 9, 10, 11, 14][k % 9]
        elif kind == "flags":
            prog[header] = (1 << 4) | (4 + k % 12)  # MatMul defines flag bits 0 and 1 only
        else:
            prog += bytes([0xFF]) * (1 + k % (b - 1))
        (folder / "m.tprog").write_bytes(bytes(prog))
        d = json.loads(manifest.read_text())
        d["prog"]["size"] = len(prog)
        manifest.write_text(json.dumps(d))
        for args in (("run", manifest, "-i", ws.root / "x.npy"), ("estimate", manifest, "--board", "pynq-z1"),
                     ("info", manifest), ("disasm", folder / "m.tprog", "--arch", tarch)):
            assert_clean_error(cli(*args), "m.tprog")
        with pytest.raises(SystolixError, match="m.tprog"):
            decode_program(bytes(prog), LAYOUT, str(folder / "m.tprog"))
        seen.append(kind)

    case()
    count("programs: .tprog bytes that do not decode (run, estimate, info, disasm, API)", len(seen))
    assert len(set(seen)) == len(PROGRAM_BREAKS)


def test_short_constants(ws):
    """.tdata files shorter than the manifest says (every length from 0 to one byte short)."""
    need = 5 * ARCH.vector_bytes
    for n in range(need):
        folder = ws.copy(ws.tiny)
        data = (folder / "m.tdata").read_bytes()
        (folder / "m.tdata").write_bytes(data[:n])
        manifest = tiny_manifest(folder)
        assert_clean_error(cli("run", manifest, "-i", ws.root / "x.npy"), "consts[0]")
        assert_clean_error(cli("estimate", manifest, "--board", "pynq-z1"), "consts[0]")
        with pytest.raises(SystolixError, match=r"consts\[0\]"):
            systolix.load(manifest)
        count("constants: a .tdata shorter than its manifest says (run, estimate, API)")


TARCH_BREAKS = [
    ("array_size", [1, 0, -4, 257, 2**40, "16", 16.0, None, True]),
    ("data_type", ["FP7", "", 16, None, "float32"]),
    ("local_depth", [0, -1, 2**24 + 1, 2**64, "big", 1.5]),
    ("accumulator_depth", [0, 2**24 + 1, [4096]]),
    ("dram0_depth", [0, 2**32 + 1, 2**100, "2M"]),
    ("dram1_depth", [0, -2**31, {"d": 1}]),
    ("simd_registers_depth", [17, -1, "1"]),
    ("stride0_depth", [0, 257, 2.0]),
    ("stride1_depth", [0, 10**9]),
    ("number_of_threads", [0, 3, "1"]),
    ("thread_queue_depth", [0, -8]),
    ("unknown_key", [1]),
    ("delete", ["array_size", "data_type", "local_depth", "stride1_depth"]),
    ("text", ["latin1", "nested", "truncated", "list", "nan", "empty"]),
]


def test_broken_architecture_files(ws):
    """~90 .tarch files with a bad value, a missing or unknown key, or that are not JSON objects:
    disasm, asm and compile refuse them (ArchitectureError from the API)."""
    seen = []
    good = ARCH.to_tarch()

    @settings(max_examples=90, **FUZZ)
    @given(field=st.integers(0, len(TARCH_BREAKS) - 1), data=st.data())
    def case(field, data):
        key, values = TARCH_BREAKS[field]
        value = data.draw(st.sampled_from(values))
        folder = ws.case_dir()
        tarch = folder / "bad.tarch"
        d = dict(good)
        if key == "delete":
            del d[value]
            tarch.write_text(json.dumps(d))
        elif key == "text":
            text = json.dumps(d)
            tarch.write_bytes({"latin1": text.encode()[:-2] + b"\xff}", "nested": b"{" * 50000,
                               "truncated": text.encode()[:-1], "list": b"[1, 2]",
                               "nan": text.replace('"array_size": 4', '"array_size": NaN').encode(),
                               "empty": b""}[value])
        else:
            d[key] = value
            tarch.write_text(json.dumps(d))
        out = folder / "p.tprog"
        listing = folder / "p.s"
        listing.write_text("NoOp\n")
        for args in (("disasm", ws.tiny / "m.tprog", "--arch", tarch), ("asm", listing, "--arch", tarch, "-o", out),
                     ("compile", ws.onnx, "--arch", tarch, "-o", folder / "c")):
            assert_clean_error(cli(*args), "bad.tarch", absent_outputs=[out, folder / "c"])
        with pytest.raises(ArchitectureError, match="bad.tarch"):
            get_architecture(tarch)
        seen.append(key)

    case()
    count("architectures: a broken .tarch (disasm, asm, compile, API)", len(seen))
    assert len(set(seen)) >= len(TARCH_BREAKS) - 1


# --- memory ------------------------------------------------------------------------------
def _program_model(folder, arch: Architecture, prog, inputs, outputs):
    layout = InstructionLayout.of(arch)
    data = b"".join(encode(i, layout) for i in prog)
    (folder / "p.tprog").write_bytes(data)
    manifest = {"name": "p", "prog": {"file_name": "p.tprog", "size": len(data)}, "consts": [],
                "inputs": inputs, "outputs": outputs, "arch": arch.to_tarch()}
    (folder / "p.tmodel").write_text(json.dumps(manifest))
    return folder / "p.tmodel"


@pytest.mark.parametrize("n, local, address", [(256, 2**24, 2**24 - 1), (128, 2**24, 2**23), (64, 2**23, 2**23 - 1),
                                               (256, 2**20, 2**20 - 1)])
def test_a_run_past_the_memory_limit_is_refused_before_allocating(ws, monkeypatch, n, local, address):
    """Local memory the program addresses x the batch past SYSTOLIX_MEMORY_LIMIT: refused, stating
    the limit and the need, before anything is allocated (the case would otherwise take 2-32 GiB)."""
    monkeypatch.setenv("SYSTOLIX_MEMORY_LIMIT", "256M")
    arch = Architecture(**{**ARCH.to_tarch(), "data_type": ARCH.data_type, "array_size": n, "local_depth": local})
    folder = ws.case_dir()
    model = _program_model(folder, arch, [DataMove(DataFlow.DRAM0_TO_LOCAL, address, 0, 0),
                                          DataMove(DataFlow.LOCAL_TO_DRAM0, address, 1, 0)],
                           [{"name": "x", "base": 0, "size": 1}], [{"name": "y", "base": 1, "size": 1}])
    np.save(folder / "x.npy", np.ones((1, n), np.float32))
    line = assert_clean_error(cli("run", model, "-i", folder / "x.npy"), "would need", "GiB", "memory limit of 256.0 MiB",
                              "SYSTOLIX_MEMORY_LIMIT", f"local {address + 1:,}")
    assert "local" in line
    with pytest.raises(MemoryLimitError):
        systolix.load(model).run(np.ones((1, n), np.float32))
    count("memory: a run needing more than the memory limit (run, API)")


@pytest.mark.parametrize("batch", [2000, 20000])
def test_a_batch_past_the_memory_limit_is_refused(ws, monkeypatch, batch):
    """The input file fits the limit but the emulator's memories for the batch would not."""
    monkeypatch.setenv("SYSTOLIX_MEMORY_LIMIT", str(60 * batch))
    folder = ws.case_dir()
    np.save(folder / "xs.npy", np.ones((batch, 1, 3), np.float32))
    line = assert_clean_error(cli("run", tiny_manifest(ws.tiny), "-i", folder / "xs.npy"), "would need",
                              f"{batch:,} inputs", "run fewer inputs at a time")
    assert "memory limit" in line
    count("memory: a batch needing more than the memory limit (run)")


@settings(max_examples=30, **FUZZ)
@given(text=st.one_of(st.text(alphabet="abcdefghijklmnopqrsuvwxyz!@#-_ ", min_size=1, max_size=10).filter(str.strip),
                      st.sampled_from(["0", "-5", "0G", "1.5.2M", "8X", "G", "M8", "lots", "1e9", "12 34"])))
def test_bad_memory_limit_settings(ws, text):
    """SYSTOLIX_MEMORY_LIMIT must be a size: anything else is one error line naming the variable."""
    old = os.environ.get("SYSTOLIX_MEMORY_LIMIT")
    os.environ["SYSTOLIX_MEMORY_LIMIT"] = text
    try:
        assert_clean_error(cli("run", tiny_manifest(ws.tiny), "-i", ws.root / "x.npy"), "SYSTOLIX_MEMORY_LIMIT")
    finally:
        if old is None:
            del os.environ["SYSTOLIX_MEMORY_LIMIT"]
        else:
            os.environ["SYSTOLIX_MEMORY_LIMIT"] = old
    count("memory: a malformed SYSTOLIX_MEMORY_LIMIT (run)")


@pytest.mark.parametrize("copies", [700, 5000])
def test_constants_past_the_memory_limit_are_refused_before_reading(ws, monkeypatch, copies):
    """A manifest listing the same constants file many times: refused from the manifest's sizes
    before any constants are read."""
    monkeypatch.setenv("SYSTOLIX_MEMORY_LIMIT", "100K")
    folder = ws.copy(ws.tiny)
    manifest = tiny_manifest(folder)
    d = json.loads(manifest.read_text())
    d["consts"] = d["consts"] * copies
    manifest.write_text(json.dumps(d))
    assert_clean_error(cli("run", manifest, "-i", ws.root / "x.npy"), "constants would need", "memory limit")
    with pytest.raises(MemoryLimitError):
        systolix.load(manifest)
    count("memory: constants past the memory limit (run, API)")
