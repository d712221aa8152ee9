"""The fuzz suite's shared artifacts, its hypothesis settings and its case count.

Every case starts from one of a few valid models built once per session (a hand-made
``relu(x @ W + b)`` program with the ``systolix`` key, a compiled model with a host segment, an
ONNX model), copies the files it needs into a fresh folder, breaks one thing, and checks what
the CLI (and the Python API) say. Beside the model folders lies ``outside/``: valid-looking
files (a program, constants, an ONNX model) of a recognisable size that no case may open.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from tests.conftest import FUZZ_CASES

#: Hypothesis settings for every fuzz test: the same examples on every run (CI is reproducible),
#: no example database, no per-example deadline (each case has its own time limit instead).
FUZZ = dict(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture],
)
settings.register_profile("systolix-fuzz", **FUZZ)


def each_kind(kinds, **others):
    """Run a fuzz case once on every kind (hypothesis's explicit examples, with ``others`` fixed)
    before the drawn ones, so that a test's "every kind was tried" does not hang on its draws."""
    from hypothesis import example

    def decorate(case):
        for kind in kinds:
            case = example(kind=kind, **others)(case)
        return case

    return decorate

#: Size of the secret program outside the model folders: no message may ever show it.
SECRET_PROGRAM_VECTORS = 811
SECRET_MARKER = "SECRET-CONTENTS-7f3a"


def count(test: str, n: int = 1) -> None:
    FUZZ_CASES[test] += n


@dataclass
class Workspace:
    """Where a session's cases live: valid models to copy from and the folder none may touch."""

    root: Path
    tiny: Path        # folder with m.tmodel, m.tprog, m.tdata (systolix key with shapes)
    partitioned: Path  # folder with a compiled model that has a host segment
    onnx: Path        # a valid ONNX model (conv, batch norm, relu)
    outside: Path     # files no case may open
    secret_sizes: tuple[str, ...]

    def case_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="case-", dir=self.root))

    def copy(self, which: Path, into: Path | None = None) -> Path:
        """A fresh copy of a model folder; returns the folder (its manifest keeps its name)."""
        target = (into or self.case_dir()) / "model"
        shutil.copytree(which, target, symlinks=True)
        return target


def tiny_manifest(folder: Path) -> Path:
    return folder / "m.tmodel"


def partitioned_manifest(folder: Path) -> Path:
    return next(p for p in folder.glob("*.tmodel") if ".seg" not in p.name)


@pytest.fixture(scope="session")
def ws(tmp_path_factory) -> Workspace:
    import onnx

    import systolix
    import systolix.models as M
    from tests.onnx_builders import conv_bn_relu
    from tests.unit.test_emulator_runtime import ARCH, build_model

    root = tmp_path_factory.mktemp("fuzz")
    tiny = root / "base-tiny"
    tiny.mkdir()
    build_model(tiny)
    np.save(root / "x.npy", np.array([[1.0, 2.0, 0.5]], np.float32))

    part = root / "base-partitioned"
    model = M.build("host/softmax")
    systolix.compile(model, "pynqz1").save(part)
    np.savez(root / "part_in.npz", **M.example_inputs(model, seed=1))

    onnx_path = root / "model.onnx"
    onnx.save(conv_bn_relu()[0], onnx_path)

    outside = root / "outside"
    outside.mkdir()
    from systolix.isa import InstructionLayout, NoOp, encode_program

    # Valid files of distinctive sizes (5,677, 40,009, 61,403 bytes and the ONNX model padded past
    # 33,000): a message that revealed one would show its size.
    secret_program = encode_program([NoOp()] * SECRET_PROGRAM_VECTORS, InstructionLayout.of(ARCH))
    (outside / "secret.tprog").write_bytes(secret_program)
    (outside / "secret.tdata").write_bytes((SECRET_MARKER.encode() * 2000)[:40009])
    secret_onnx = onnx.load(next(part.glob("*.onnx")))
    secret_onnx.doc_string = SECRET_MARKER * 1650
    onnx.save(secret_onnx, outside / "secret.onnx")
    (outside / "secret.tmodel").write_text(json.dumps({"name": SECRET_MARKER}).ljust(61403))
    sizes = {str(p.stat().st_size) for p in outside.iterdir()}
    assert all(int(s) > 5000 for s in sizes)
    sizes |= {f"{int(s):,}" for s in sizes}
    return Workspace(root, tiny, part, onnx_path, outside, tuple(sorted(sizes)))
