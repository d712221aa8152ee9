"""Tensil's speech-commands program on its input: class 3, and the emulator against its
specification, the plain-NumPy ``systolix.emulator.reference`` (which shares nothing with the
emulator but the instruction decoder and the file readers, which the ResNet-20 conformance tests
check against real hardware)."""

from __future__ import annotations

import numpy as np
import pytest

from systolix.artifacts import TModel, read_tdata, read_vectors_csv
from systolix.emulator.reference import ReferenceTCU
from systolix.isa import InstructionLayout, decode_program
from tests.conftest import SPEECH

pytestmark = pytest.mark.needs_emulator

MODEL = SPEECH / "speech_commands_onnx_speech_robot.tmodel"
INPUT = SPEECH / "speech_commands_input_1x8.csv"


@pytest.fixture(scope="module")
def speech():
    manifest = TModel.load(MODEL)
    arch = manifest.arch
    program = decode_program((SPEECH / manifest.prog.file_name).read_bytes(), InstructionLayout.of(arch), "speech")
    consts = read_tdata(SPEECH / manifest.consts[0].file_name, arch.data_type, arch.array_size)
    vectors = read_vectors_csv(INPUT, arch.array_size)
    return manifest, program, consts, vectors


@pytest.fixture(scope="module")
def reference_run(speech):
    manifest, program, consts, vectors = speech
    (out,) = manifest.outputs
    (inp,) = manifest.inputs
    tcu = ReferenceTCU(manifest.arch, 1, dram0_vectors=max(inp.base + inp.size, out.base + out.size) + 4096,
                   dram1_vectors=consts.shape[0])
    tcu.dram1[0, : manifest.consts[0].size] = consts[: manifest.consts[0].size]
    tcu.dram0[0, inp.base : inp.base + inp.size] = tcu.to_fixed(vectors)
    tcu.run(program)
    return tcu


def test_speech_program_predicts_class_3_and_matches_the_numpy_interpreter(speech, reference_run):
    import systolix

    manifest, program, _, vectors = speech
    run = systolix.load(MODEL).run_detailed({"input_1": vectors})
    raw = run.raw_outputs["dense_1"][0]  # [2 vectors, 8 lanes] = 12 classes and 4 padding lanes
    logits = raw.reshape(-1)[:12]
    assert int(logits.argmax()) == 3

    (out,) = manifest.outputs
    expected = reference_run.dram0[0, out.base : out.base + out.size]
    assert raw.tolist() == expected.tolist()
    assert np.array_equal(run.outputs["dense_1"] * 256, expected.astype(np.float32))
    # The whole on-chip state agrees too, not only the 16 output values.
    emulator = run.extra["emulator"]
    for name in ("local", "acc"):
        ours = getattr(emulator, name)[0]
        theirs = getattr(reference_run, name)[0]
        assert np.array_equal(ours, theirs[: ours.shape[0]]), name
        assert not theirs[ours.shape[0]:].any(), name
    assert np.array_equal(emulator.weights[0], reference_run.weights[0])
    assert run.result.saturation_total == reference_run.saturations
