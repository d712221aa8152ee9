"""Tensil's five ResNet-20 programs on the ten CIFAR images against the real boards.

Reference: ``expected.json`` (golden classes and the outputs two real boards printed). Outputs
are compared as raw fixed-point integers: the printed floats are multiples of 1/256, so
``value * 256`` is the board's exact FP16BP8 value.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import systolix
from systolix.artifacts import read_vectors_csv
from systolix.emulator import Emulator, EmulatorError
from systolix.errors import DecodingError
from systolix.isa import InstructionLayout
from tests.cli_helpers import assert_user_error, run_cli
from tests.conftest import RESNET20

pytestmark = pytest.mark.needs_emulator

PROGRAMS = ["baseline", "ultra_ram", "ultra_ram_local_vars", "ultra_ram_local_consts", "ultra_ram_local_vars_and_consts"]
EXPECTED = json.loads((RESNET20 / "expected.json").read_text())
CSV = RESNET20 / "cifar_10x32.csv"
ONE = 256  # FP16BP8


def manifest(program: str):
    (path,) = sorted((RESNET20 / program).glob("*.tmodel"))
    return path


def check_against_boards(raw_logits: np.ndarray) -> None:
    """``raw_logits`` [10 images, 10 classes] raw FP16BP8 integers."""
    assert raw_logits.argmax(axis=1).tolist() == EXPECTED["golden_classes"]
    assert len(EXPECTED["hardware_outputs"]) == 2
    for board in EXPECTED["hardware_outputs"]:
        printed = np.array(board["first_10_of_Identity:0"], dtype=np.float64) * ONE
        assert np.array_equal(printed, np.round(printed)), "board values are not FP16BP8 numbers"
        assert raw_logits[board["image_index"]].tolist() == printed.astype(np.int64).tolist(), board["board"]


@pytest.fixture(scope="module")
def images():
    return read_vectors_csv(CSV, 32).reshape(10, 1024, 32)


@pytest.mark.parametrize("program", PROGRAMS)
def test_load_run_matches_boards_bit_for_bit(program, images):
    model = systolix.load(manifest(program))
    logits = model.run({"x:0": images})["Identity:0"]  # floats, raw vectors with the batch axis
    assert logits.shape == (10, 1, 32) and logits.dtype == np.float32
    fixed = logits.astype(np.float64) * ONE
    assert np.array_equal(fixed, np.round(fixed))
    check_against_boards(fixed[:, 0, :10].astype(np.int64))
    assert not logits[:, 0, 10:].any()  # Tensil pads the 10 logits to 32 lanes with zeros
    # The detailed run gives the raw integers themselves and the run's statistics.
    run = model.run_detailed({"x:0": images})
    raw = run.raw_outputs["Identity:0"]
    assert raw.dtype == np.int64 and np.array_equal(raw, fixed.astype(np.int64))
    assert run.result.instructions == len(model.program)
    assert run.result.saturation_total == 0 and run.input_saturations == 0


def test_one_image_at_a_time_equals_the_batch(images):
    model = systolix.load(manifest("baseline"))
    batch = model.run({"x:0": images[[7, 9]]})["Identity:0"]
    for k, image in zip((0, 1), (7, 9)):
        single = model.run({"x:0": images[image]})["Identity:0"]
        assert single.shape == (1, 32)
        assert np.array_equal(single, batch[k])


@pytest.mark.parametrize("program", PROGRAMS)
def test_cli_run_matches_boards_bit_for_bit(program, tmp_path):
    out = tmp_path / "out.npz"
    proc = run_cli("run", manifest(program), "--input", CSV, "--batch", "--classes", "10", "--output", out, check=True)
    with np.load(out) as saved:
        logits = saved["Identity:0"]
    assert logits.shape == (10, 1, 32)
    check_against_boards((logits[:, 0, :10].astype(np.float64) * ONE).astype(np.int64))
    assert ", ".join(map(str, EXPECTED["golden_classes"])) in proc.stdout
    assert "saturation events: 0" in proc.stdout


def test_cli_npy_input_and_output(tmp_path, images):
    one = tmp_path / "image9.npy"
    np.save(one, images[9])
    out = tmp_path / "logits.npy"
    run_cli("run", manifest("ultra_ram_local_vars"), "-i", one, "-o", out, "--classes", "10", check=True)
    board = next(b for b in EXPECTED["hardware_outputs"] if b["image_index"] == 9)
    assert (np.load(out)[0, :10] * ONE).astype(np.int64).tolist() == [round(v * ONE) for v in board["first_10_of_Identity:0"]]


def test_cli_trace_at_dumps_the_state(tmp_path, images):
    np.save(tmp_path / "x.npy", images[0])
    trace = tmp_path / "t.npz"
    proc = run_cli("run", manifest("baseline"), "-i", tmp_path / "x.npy", "--trace-at", "2", "--trace-file", trace,
                   "--trace-range", "local:289:1024", check=True)
    assert "state before instruction #2" in proc.stdout
    with np.load(trace) as dump:
        local = dump["local@289"]
        assert int(dump["program_counter"]) == 2
    # Instruction #1 of the baseline program moves the 1024 input vectors to local memory 289.
    from systolix.numerics import DataType, to_fixed

    assert np.array_equal(local[0], to_fixed(images[0], DataType.FP16BP8))


def test_cli_errors_are_one_line(tmp_path):
    assert_user_error(run_cli("run", manifest("baseline"), "-i", CSV), "10240 vectors", "--batch")
    assert_user_error(run_cli("run", manifest("baseline"), "-i", CSV, "--batch", "-o", tmp_path / "o.txt"), "o.txt", ".npy or .npz")
    assert not (tmp_path / "o.txt").exists()
    assert_user_error(run_cli("run", tmp_path / "none.tmodel", "-i", CSV), "none.tmodel")


def test_short_tdata_fails_clearly(tmp_path):
    src = manifest("baseline")
    for f in src.parent.iterdir():
        data = f.read_bytes()
        (tmp_path / f.name).write_bytes(data[: len(data) // 2] if f.suffix == ".tdata" else data)
    assert_user_error(run_cli("run", tmp_path / src.name, "-i", CSV, "--batch"), "consts[0] says 18803 vectors")


def test_program_past_local_depth_fails_with_the_instruction_index():
    """The real program with one input move pushed to the end of local memory stops right there."""
    from dataclasses import replace

    from systolix.isa import encode

    model = systolix.load(manifest("baseline"))
    layout = InstructionLayout.of(model.arch)
    data = bytearray((manifest("baseline").parent / model.manifest.prog.file_name).read_bytes())
    index = 1  # DataMove dram0[0] -> local[289] size=1023: 1024 vectors
    moved = replace(model.program.instruction(index), local_address=16000)
    data[index * layout.instruction_bytes : (index + 1) * layout.instruction_bytes] = encode(moved, layout)
    emulator = Emulator(model.arch)
    emulator.write("dram1", 0, model.constants[0][1])
    with pytest.raises(EmulatorError) as e:
        emulator.run(bytes(data), source="resnet.tprog")
    msg = str(e.value)
    assert "resnet.tprog: instruction #1 (DataMove" in msg
    assert "writes local address 16384, past local_depth 16384 (vectors 16000..17023" in msg
    assert emulator.local[0, :289].any()  # instruction #0 ran before the stop


def test_reserved_datamove_kind_fails_at_decode():
    model = systolix.load(manifest("baseline"))
    layout = InstructionLayout.of(model.arch)
    data = bytearray((manifest("baseline").parent / model.manifest.prog.file_name).read_bytes())
    first_move = int(np.flatnonzero(model.program.opcode == 2)[0])
    data[(first_move + 1) * layout.instruction_bytes - 1] = 0x2E
    with pytest.raises(DecodingError, match=f"instruction #{first_move} .*reserved DataMove kind 14"):
        Emulator(model.arch).run(bytes(data))
