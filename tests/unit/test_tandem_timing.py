"""The Tandem unit in the timing model: its own unit and queue, overlapping the array, ordered
by TSync; its clocks per instruction; ``estimate`` and ``run`` on programs that use it, and
their refusal on an architecture without it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from systolix.arch import ARCHITECTURES, get_board
from systolix.artifacts import ProgramRef, TensorSpan, TModel
from systolix.cli import main
from systolix.emulator import EmulatorError
from systolix.isa import InstructionLayout, decode_program
from systolix.isa.assembly import assemble
from systolix.perf import simulate
from systolix.perf.simulator import U_ARR, U_TAN

ARCH = ARCHITECTURES["ultra96v2_tandem"]
LAYOUT = InstructionLayout.of(ARCH)
BOARD = get_board("ultra96-v2").with_architecture(ARCH)
TILE = 256  # vectors per accumulator tile


def program(text: str):
    return decode_program(assemble(text, LAYOUT), LAYOUT)


def unit_work(tile: int) -> str:
    """Four ALU instructions on every vector of the tile at ``acc[tile * TILE]``."""
    return (f"TIter base acc.0 = {tile * TILE}\nTLoop level=0 iterations={TILE} body=4\n"
            "TAlu Mul acc.0 <- acc.0, acc.0\nTAlu Add acc.0 <- acc.0, imm.0\nTAlu Max acc.0 <- acc.0, imm.1\nTAlu Min acc.0 <- acc.0, imm.2\n")


def matmul(tile: int) -> str:
    return f"MatMul local[0, stride=1] -> acc[{tile * TILE}, stride=1] size={TILE - 1}\n"


HEAD = "TIter stride acc.0 level=0 = 1\n"


def test_the_unit_overlaps_the_array_when_the_program_is_software_pipelined():
    tiles = 4
    # Serial: each tile computed, handed over, worked on and handed back before the next.
    serial = HEAD + "".join(matmul(t % 2) + "TSync to_unit\n" + unit_work(t % 2) + "TSync to_array\n" for t in range(tiles))
    # Pipelined over two accumulator tiles: the array computes tile t+1 while the unit works on
    # tile t; the unit releases each tile when done, and the array waits for that release
    # before it overwrites the tile.
    piped = HEAD + matmul(0)
    for t in range(tiles):
        piped += "TSync to_unit\n" + unit_work(t % 2) + f"TSync release buf={t % 2}\n"
        if t + 1 < tiles:
            piped += (f"TSync wait buf={(t + 1) % 2}\n" if t >= 1 else "") + matmul((t + 1) % 2)
    piped += "TSync to_array\n"
    a, b = simulate(program(serial), BOARD), simulate(program(piped), BOARD)
    unit, array = a.busy[U_TAN], a.busy[U_ARR]
    assert unit == b.busy[U_TAN] == tiles * 4 * TILE + 2 * tiles + 1  # 1 clock a vector; TIter and TLoop 1 each
    assert array == tiles * TILE
    assert a.cycles >= unit + array  # nothing overlaps
    # Pipelined, only the first tile's MatMul (and its 2N-clock drain through the array) is not
    # hidden behind the unit's work.
    assert unit + TILE <= b.cycles <= unit + TILE + 2 * ARCH.array_size + 4


def test_to_unit_makes_the_unit_wait_for_the_array_and_to_array_the_array_for_the_unit():
    body = HEAD + matmul(0) + "{sync}" + "TIter base acc.0 = 0\nTLoop level=0 iterations=4 body=1\nTAlu Move acc.0 <- acc.1\n"
    with pytest.raises(EmulatorError, match=r"instruction #4 \(TAlu Move acc.0 <- acc.1\) and #1 \(MatMul .*\) both use "
                                            r"acc vector 0 with a write, and no TSync to_unit between them"):
        simulate(program(body.format(sync="")), BOARD)  # without the sync the unit could read before the array wrote
    synced = simulate(program(body.format(sync="TSync to_unit\n")), BOARD)
    assert synced.start[-1] >= synced.done[1]  # with it, after the MatMul's results are in the accumulators
    other = simulate(program(body.format(sync="").replace("acc[0, stride=1]", "acc[512, stride=1]")), BOARD)
    assert other.start[-1] < other.done[1]  # on other vectors the unit need not wait, and does not
    back = program(HEAD + unit_work(0) + "TSync to_array\n" + matmul(1))
    t = simulate(back, BOARD)
    assert t.start[-1] >= t.end[-4]  # the MatMul starts after the unit's last instruction ends
    ahead = program(HEAD + unit_work(0) + matmul(1))  # the MatMul writes tile 1, the unit works on tile 0
    assert simulate(ahead, BOARD).start[-1] < t.end[-4]
    with pytest.raises(EmulatorError, match="no TSync to_array .* orders the TCU after the unit"):
        simulate(program(HEAD + unit_work(0) + matmul(0)), BOARD)


@pytest.mark.parametrize("line, clocks", [
    ("TAlu Add acc.0 <- acc.0, imm.0", 1), ("TCmp Gt acc.0 <- acc.0, imm.0", 1), ("TPermute LaneSum acc.0 <- acc.0", 1),
    ("TAlu Div acc.0 <- acc.0, imm.0", 32), ("TPermute Transpose acc.0 <- acc.0", 32),
])
def test_clocks_per_instruction_times_the_loop_iterations(line, clocks):
    t = simulate(program(f"TIter stride acc.0 level=2 = 16\nTLoop level=2 iterations=3 body=2\nTLoop level=1 iterations=5 body=1\n{line}\n"), BOARD)
    assert t.end[-1] - t.start[-1] == 15 * clocks
    # and one clock for each configuration and loop instruction, the inner loop's each time the outer replays it
    assert t.busy[U_TAN] == 15 * clocks + 1 + 1 + 3


def _model(tmp_path, arch, name: str = "m") -> str:
    listing = ("DataMove dram0[0, stride=1] -> local[0, stride=1] size=15\nDataMove local[0, stride=1] -> acc[0, stride=1] size=15\n"
               "TSync to_unit\nTIter stride acc.0 level=0 = 1\nTLoop level=0 iterations=16 body=1\nTAlu Mul acc.0 <- acc.0, acc.0\n"
               "TSync to_array\nDataMove acc[0, stride=1] -> local[100, stride=1] size=15\n"
               "DataMove local[100, stride=1] -> dram0[16, stride=1] size=15\n")
    raw = assemble(listing, LAYOUT)
    (tmp_path / f"{name}.tprog").write_bytes(raw)
    TModel(name=name, prog=ProgramRef(file_name=f"{name}.tprog", size=len(raw)), consts=[],
           inputs=[TensorSpan(name="x", base=0, size=16)], outputs=[TensorSpan(name="y", base=16, size=16)],
           arch=arch, systolix=None).save(tmp_path / f"{name}.tmodel")
    return str(tmp_path / f"{name}.tmodel")


def cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_estimate_and_run_a_model_that_uses_the_unit(tmp_path, capsys):
    import systolix

    path = _model(tmp_path, ARCH)
    code, out, err = cli(capsys, "estimate", path, "--board", "ultra96-v2", "--json")
    assert code == 0, err
    units = json.loads(out)["units"]
    assert units["tandem"]["busy_cycles"] == 16 + 2 and units["tandem"]["label"] == "Tandem vector unit"
    x = np.linspace(-3, 3, 256).astype(np.float32).reshape(16, 16)
    y = systolix.load(path).run({"x": x})["y"]
    q = np.floor(x * 256 + 0.5) / 256  # the input as FP16BP8
    assert np.abs(y - q * q).max() <= 0.5 / 256  # the square, rounded once


def test_run_and_estimate_refuse_a_tandem_program_on_an_architecture_without_the_unit(tmp_path, capsys):
    path = _model(tmp_path, ARCHITECTURES["ultra96v2"].model_copy(update={"tandem": None}))
    data = json.loads(open(path).read())
    data["arch"] = ARCHITECTURES["ultra96v2"].to_tarch()
    open(path, "w").write(json.dumps(data))
    np.save(tmp_path / "x.npy", np.zeros((16, 16), np.float32))
    for args in (("estimate", path, "--board", "ultra96-v2"), ("run", path, "--input", tmp_path / "x.npy", "-o", tmp_path / "y.npy")):
        code, _, err = cli(capsys, *args)
        assert code == 2 and len(err.splitlines()) == 1, err
        assert "instruction #2 at byte offset 18: unknown opcode 0xD: TSync to_unit is a Tandem instruction, but the architecture has no Tandem unit" in err
    assert not (tmp_path / "y.npy").exists()
    code, _, err = cli(capsys, "estimate", _model(tmp_path, ARCH, "n"), "--board", "rtl")
    assert code == 2 and "the generated RTL has no Tandem unit" in err
    with pytest.raises(EmulatorError, match="no Tandem unit"):
        simulate(program("TSync to_unit\n"), get_board("ultra96-v2").with_architecture(ARCHITECTURES["ultra96v2"]))


def test_the_profile_trace_has_a_track_for_the_unit(tmp_path):
    from systolix.perf import estimate
    from systolix.perf.estimate import load_program
    from systolix.perf.profile import trace_events

    path = _model(tmp_path, ARCH)
    _, prog = load_program(path)
    events = trace_events(estimate(path, BOARD), prog)
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    tid = next(t for t, name in tracks.items() if name == "Tandem vector unit")
    slices = [e for e in events if e.get("tid") == tid and e["ph"] == "X"]
    assert sum(e["args"]["instructions"] for e in slices) == 3  # TIter, TLoop, TAlu (TSync does no work)
    assert any("TAlu" in e["name"] for e in slices)
