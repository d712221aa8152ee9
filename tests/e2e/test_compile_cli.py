"""``systolix compile`` as a user runs it: the summary, the files, bad input, determinism."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import systolix
import systolix.models as M
from systolix.arch import ARCHITECTURES
from systolix.compiler.passes import PASSES, SEGMENT
from systolix.isa import InstructionLayout
from systolix.isa.assembly import assemble
from tests.cli_helpers import assert_user_error, run_cli
from tests.conftest import SPEECH
from tests.onnx_builders import conv_bn_relu, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def save(model, path):
    path.write_bytes(model.SerializeToString())
    return path


def test_compile_prints_summary_and_writes_tensil_files(tmp_path):
    model = save(M.build("cnn/tiny"), tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    proc = run_cli("compile", model, "--arch", "ultra96v2", "-o", out, "--asm", check=True)
    for fragment in ("DRAM0 (vars)", "DRAM1 (consts)", "accumulators", "instructions", "useful MACs", "stages",
                     "partitions", "Where the nodes run", "Conv"):
        assert fragment in proc.stdout, fragment
    names = sorted(p.name for p in out.iterdir())
    assert names == ["tiny_16x16.tasm", "tiny_16x16.tdata", "tiny_16x16.tmodel", "tiny_16x16.tprog"]
    manifest = json.loads((out / "tiny_16x16.tmodel").read_text())
    assert manifest["prog"] == {"file_name": "tiny_16x16.tprog", "size": (out / "tiny_16x16.tprog").stat().st_size}
    assert manifest["systolix"]["segments"] is None
    layers = manifest["systolix"]["layers"]
    assert layers[0]["first"] == 0 and all(a["end"] == b["first"] for a, b in zip(layers, layers[1:]))
    assert layers[-1]["end"] * InstructionLayout.of(ARCHITECTURES["ultra96v2"]).instruction_bytes == manifest["prog"]["size"]
    # The listing assembles back to the very same program.
    listing = (out / "tiny_16x16.tasm").read_text()
    assert assemble(listing, InstructionLayout.of(ARCHITECTURES["ultra96v2"])) == (out / "tiny_16x16.tprog").read_bytes()
    # systolix.load runs the saved model in the ONNX model's own shapes.
    m = M.build("cnn/tiny")
    feeds = M.example_inputs(m, seed=3)
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    got = next(iter(systolix.load(out / "tiny_16x16.tmodel").run(feeds).values()))
    assert got.shape == ref.shape and np.max(np.abs(got - ref)) < 0.1


def test_same_model_and_options_give_identical_files(tmp_path):
    model = save(M.build("cnn/odd_mixed"), tmp_path / "m.onnx")
    for d in ("a", "b"):
        run_cli("compile", model, "--arch", "pynqz1", "-o", tmp_path / d, "-q", check=True)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_host_fallback_and_no_host(tmp_path):
    model = save(M.build("host/softmax"), tmp_path / "soft.onnx")
    proc = run_cli("compile", model, "--arch", "pynqz1", "-o", tmp_path / "h", check=True)
    assert "Softmax" in proc.stdout and "host" in proc.stdout
    # The summary says why each host node is not on the accelerator.
    why = proc.stdout[proc.stdout.index("Why on the host"):]
    assert "Softmax" in why and "no implementation of this op" in " ".join(why.split())
    manifest = json.loads((tmp_path / "h" / "soft_8x8.tmodel").read_text())
    kinds = [s["kind"] for s in manifest["systolix"]["segments"]]
    assert "host" in kinds and "accelerator" in kinds
    out = tmp_path / "nohost"
    assert_user_error(run_cli("compile", model, "--arch", "pynqz1", "-o", out, "--no-host"),
                      "(op Softmax) cannot run on the accelerator", "--no-host")
    assert not out.exists() or not any(out.iterdir())


def test_dump_ir_writes_every_ir_after_every_pass(tmp_path):
    model = save(M.build("host/softmax"), tmp_path / "soft.onnx")
    dump = tmp_path / "ir"
    proc = run_cli("compile", model, "--arch", "pynqz1", "-o", tmp_path / "out", "--dump-ir", dump, check=True)
    assert f"{dump}" in proc.stdout
    # The placed graph says why the host runs the Softmax; each accelerator program has a folder
    # with its HIR after every HIR pass, its plan and its LIR.
    placed = (dump / "01-place-on-host.graph.txt").read_text()
    assert "[host: the accelerator has no implementation of this op]" in placed
    (program,) = [d for d in dump.iterdir() if d.is_dir() and d.name.endswith(".seg0")]
    names = sorted(f.name for f in program.iterdir())
    # One file per segment pass, numbered by its place in the pass list (which grows).
    numbered = {p.name: f"{i + 1:02d}-{p.name.replace(' ', '-')}" for i, p in enumerate(PASSES)}
    expected = [numbered[p.name] for p in PASSES if p.scope == SEGMENT]
    assert [n.rsplit(".", 2)[0] for n in names] == expected
    assert names[0] == "03-lower.hir.txt" and "06-fuse-post-ops.hir.txt" in names
    assert {n.split(".")[-2] for n in names} == {"hir", "plan", "lir", "files"}
    lir = (program / f"{numbered['roll up']}.lir.txt").read_text()
    assert "dram0[" in lir and "vars[" not in lir  # bound: physical memories only
    assert "vars[" in (program / f"{numbered['emit']}.lir.txt").read_text()
    # A file where the directory should be is one error line.
    assert_user_error(run_cli("compile", model, "--arch", "pynqz1", "-o", tmp_path / "out2", "--dump-ir", model),
                      "soft.onnx", "not a directory")


def test_partitioned_model_runs_from_disk(tmp_path):
    m = M.build("host/squeeze_excite")
    path = systolix.compile(m, "ultra96v2").save(tmp_path)
    loaded = systolix.load(path)
    feeds = M.example_inputs(m, seed=4)
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    got = loaded.run(feeds)
    assert list(got) == [o.name for o in m.graph.output]
    for r, g in zip(ref, got.values()):
        assert g.shape == r.shape and np.max(np.abs(g - r)) < 0.1
    batch = {k: np.stack([v, v]) for k, v in feeds.items()}
    twice = loaded.run(batch)
    for r, g in zip(ref, twice.values()):
        assert g.shape == (2,) + r.shape


def test_speech_model_runs_wholly_on_the_accelerator(tmp_path):
    proc = run_cli("compile", SPEECH / "speech_commands.onnx", "--arch", SPEECH / "speech_robot.tarch", "-o", tmp_path, check=True)
    assert "Resize" in proc.stdout
    manifest = json.loads((tmp_path / "speech_commands_8x8.tmodel").read_text())
    assert manifest["systolix"]["segments"] is None and manifest["inputs"][0]["size"] == 124 * 129
    model = systolix.load(tmp_path / "speech_commands_8x8.tmodel")
    x = np.random.default_rng(0).normal(0, 1, (1, 1, 124, 129)).astype(np.float32)
    ref = ort.InferenceSession(str(SPEECH / "speech_commands.onnx")).run(None, {"input_1": x})[0]
    got = model.run({"input_1": x})["dense_1"]
    assert got.shape == ref.shape and np.argmax(got) == np.argmax(ref)


def test_not_an_onnx_file(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_text("hello\n" * 50)
    out = tmp_path / "out"
    assert_user_error(run_cli("compile", p, "--arch", "pynqz1", "-o", out), "junk.onnx", "not a valid ONNX")
    assert not out.exists()


def test_truncated_onnx_file(tmp_path):
    data = M.build("cnn/tiny").SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "out"
    assert_user_error(run_cli("compile", p, "--arch", "pynqz1", "-o", out), "cut.onnx", "not a valid ONNX")
    assert not out.exists()


def small_dram1(tmp_path, name: str, depth: int):
    """The pynqz1 preset with ``depth`` vectors of DRAM1, as a .tarch file; the model ``name`` saved
    beside it; and the output directory to use."""
    tarch = tmp_path / "small.tarch"
    ARCHITECTURES["pynqz1"].model_copy(update={"dram1_depth": depth}).save(tarch)
    return tarch, save(M.build(name), tmp_path / f"{name.replace('/', '_')}.onnx"), tmp_path / "out"


def test_weights_that_do_not_fit_dram1(tmp_path):
    # One layer is never cut: a conv whose weights alone exceed DRAM1 is an error naming it.
    tarch, model, out = small_dram1(tmp_path, "ops/conv3x3_17to33", 64)
    assert_user_error(run_cli("compile", model, "--arch", tarch, "-o", out), "layer", "constants need", "DRAM1",
                      "has 64")
    assert not out.exists()


def test_constants_past_dram1_cut_the_model_or_fail_with_no_split(tmp_path):
    # ResNet-20 v2 on 8x8 has 71,630 vectors of constants without estimated gains (their SIMD
    # constants add some; 72,470 before its pre-activation batch norms joined their producers'
    # tails as SIMD constants instead of diagonal weight blocks); its largest layer 18,448. Cut
    # into programs, 71,774: the next program reads the block sum crossing a cut whole, so its
    # strided shortcut stays a layer of its own (``subsample_strided_reads``, ``merge_residual_convs``).
    tarch, model, out = small_dram1(tmp_path, "resnet20v2", 32768)
    assert_user_error(run_cli("compile", model, "--arch", tarch, "-o", out, "--no-split", "--no-estimate-gains"),
                      "constants need 71630 vectors of DRAM1", "has 32768", "--no-split")
    assert not out.exists()
    proc = run_cli("compile", model, "--arch", tarch, "-o", out, "--no-estimate-gains", check=True)
    assert "DRAM1 (consts), largest program" in proc.stdout
    assert "71,774 vectors, more than DRAM1's 32,768: 3 programs in a row" in " ".join(proc.stdout.split())
    top = json.loads((out / "resnet20v2_8x8.tmodel").read_text())
    kinds = [seg["kind"] for seg in top["systolix"]["segments"]]
    assert kinds == ["accelerator"] * 3
    for seg in top["systolix"]["segments"]:
        manifest = json.loads((out / seg["tmodel"]).read_text())
        assert sum(c["size"] for c in manifest["consts"]) <= 32768


def test_conv_with_computed_weights(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w_in"], ["y"], name="dyn", kernel_shape=[1, 1])]
    m = make_model(nodes, [("x", [1, 3, 4, 4]), ("w_in", [5, 3, 1, 1])], [("y", None)])
    p = save(m, tmp_path / "dyn.onnx")
    out = tmp_path / "out"
    assert_user_error(run_cli("compile", p, "--arch", "pynqz1", "-o", out, "--no-host"), "'dyn'", "weights", "not a constant")
    assert not out.exists()
    # With the host allowed it runs there and still matches onnxruntime.
    compiled = systolix.compile(m, "pynqz1")
    assert "dyn" in compiled.summary.host_nodes
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(size=(1, 3, 4, 4)).astype(np.float32), "w_in": rng.normal(size=(5, 3, 1, 1)).astype(np.float32)}
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)["y"], ref, atol=1e-5)


def test_unknown_strategy_and_architecture(tmp_path):
    model = save(conv_bn_relu()[0], tmp_path / "m.onnx")
    assert_user_error(run_cli("compile", model, "--arch", "pynqz1", "--strategy", "fastest"), "unknown strategy 'fastest'")
    assert_user_error(run_cli("compile", model, "--arch", "nosuchboard"), "unknown architecture 'nosuchboard'")


@pytest.mark.parametrize("strategy", ["local-vars", "local-consts", "local-vars-and-consts"])
@pytest.mark.parametrize("name", ["cnn/tiny", "resnet20v2", "ops/concat_aligned_8"])
def test_strategies_give_the_same_outputs(tmp_path, strategy, name):
    m = M.build(name)
    feeds = M.example_inputs(m, seed=2)
    arch = "zcu104_uram"
    a = systolix.compile(m, arch)
    b = systolix.compile(m, arch, strategy=strategy)
    path = b.save(tmp_path)
    manifest = json.loads(path.read_text())
    assert manifest["load_consts_to_local"] is (strategy != "local-vars")
    assert manifest["systolix"]["strategy"] == strategy
    got_a, got_b = a.run(feeds), systolix.load(path).run(feeds)
    for k in got_a:
        np.testing.assert_array_equal(got_a[k], got_b[k])  # the same arithmetic, another memory plan
    if strategy != "local-consts":
        # Activations between layers stay on chip: fewer DRAM0 moves.
        moves = lambda model: sum(1 for i in range(len(model.program)) if model.program.opcode[i] == 2 and model.program.flags[i] in (0, 1))  # noqa: E731
        assert moves(b) < moves(a)


def test_constants_too_big_for_local_memory(tmp_path):
    model = save(M.build("yolov4_tiny"), tmp_path / "y.onnx")
    assert_user_error(run_cli("compile", model, "--arch", "pynqz1", "--strategy", "local-consts", "-o", tmp_path / "o"),
                      "local-consts", "constants need", "local memory")


TIGHT = {
    "cnn/odd_mixed": {"local_depth": 600, "accumulator_depth": 96},
    "resnet20v2": {"local_depth": 600, "accumulator_depth": 96},
    "ops/resize_linear_downscale": {"local_depth": 64, "accumulator_depth": 12},
    "ops/reshape_channels_to_rows": {"local_depth": 48, "accumulator_depth": 12},
}


@pytest.mark.parametrize("name", list(TIGHT))
def test_small_memories_tile_without_changing_a_bit(name):
    """Stages, partitions and streamed weights change the schedule, never the arithmetic."""
    m = M.build(name)
    feeds = M.example_inputs(m, seed=5)
    roomy = systolix.compile(m, "pynqz1")
    tight_arch = ARCHITECTURES["pynqz1"].model_copy(update=TIGHT[name])
    tight = systolix.compile(m, tight_arch)
    stages = lambda c: sum(r.stages * 1000 + r.partitions for r in c.summary.layers)  # noqa: E731
    assert stages(tight) > stages(roomy)
    a, b = roomy.run(feeds), tight.run(feeds)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_compile_with_calibration_data_amplifies_weights_and_is_closer(tmp_path):
    m = M.build("cnn/tiny")
    model = save(m, tmp_path / "tiny.onnx")
    name = m.graph.input[0].name
    samples = np.stack([M.example_inputs(m, seed=100 + k)[name] for k in range(8)])
    np.savez(tmp_path / "cal.npz", **{name: samples})
    proc = run_cli("compile", model, "--arch", "pynqz1", "-o", tmp_path / "cal", "--calibrate", tmp_path / "cal.npz", check=True)
    assert "amplified weights" in proc.stdout and "calibrated on 8 samples" in proc.stdout
    assert "gain" in proc.stdout
    plain = run_cli("compile", model, "--arch", "pynqz1", "-o", tmp_path / "plain", "--no-estimate-gains", check=True)
    assert "none (no calibration data" in plain.stdout
    default = run_cli("compile", model, "--arch", "pynqz1", "-o", tmp_path / "default", check=True)
    assert "estimated from the model itself" in default.stdout
    feeds = M.example_inputs(m, seed=3)
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    err = {}
    for kind in ("cal", "plain"):
        got = next(iter(systolix.load(tmp_path / kind / "tiny_8x8.tmodel").run(feeds).values()))
        err[kind] = float(np.max(np.abs(got - ref)))
    assert err["cal"] < err["plain"], err


def test_bad_calibration_data_is_a_clear_error_with_no_files(tmp_path):
    model = save(M.build("cnn/tiny"), tmp_path / "tiny.onnx")
    np.savez(tmp_path / "wrong.npz", nonsense=np.zeros(3))
    out = tmp_path / "out"
    proc = run_cli("compile", model, "--arch", "pynqz1", "-o", out, "--calibrate", tmp_path / "wrong.npz")
    assert_user_error(proc, "wrong.npz", "no values for the model's input")
    assert not out.exists() or not any(out.iterdir())
    (tmp_path / "junk.npz").write_text("junk")
    proc = run_cli("compile", model, "--arch", "pynqz1", "-o", out, "--calibrate", tmp_path / "junk.npz")
    assert_user_error(proc, "junk.npz", "not a NumPy .npz file")


def test_tune_and_no_pipeline_choose_single_or_double_buffered_plans_with_the_same_outputs(tmp_path):
    # Tensil's decoder runs local-memory instructions one after another (docs/latency-model.md,
    # the decoder rule), so tuned for its TCU (the default) the plans are single-buffered; tuned
    # for the rtl TCU, which overlaps them, a conv of cnn/tiny double-buffers, unless --no-pipeline.
    onnx_model = M.build("cnn/tiny")
    model = save(onnx_model, tmp_path / "tiny.onnx")
    feeds = M.example_inputs(onnx_model, seed=1)
    plan, outputs = {}, {}
    variants = {"tensil": (), "rtl": ("--tune", "rtl"), "rtl, no pipeline": ("--tune", "rtl", "--no-pipeline")}
    for k, (label, flags) in enumerate(variants.items()):
        out, dump = tmp_path / f"out{k}", tmp_path / f"ir{k}"
        run_cli("compile", model, "--arch", "ultra96v2", "-o", out, "--dump-ir", dump, "-q", *flags, check=True)
        plan[label] = "".join(p.read_text() for p in dump.rglob("*tile-layers*"))
        outputs[label] = systolix.load(out / "tiny_16x16.tmodel").run(feeds)
    assert "pipelined over the two lock halves" in plan["rtl"]
    assert "pipelined" not in plan["tensil"] and "pipelined" not in plan["rtl, no pipeline"]
    for label in ("tensil", "rtl, no pipeline"):
        for name, value in outputs["rtl"].items():
            assert np.array_equal(value, outputs[label][name]), (label, name)


def test_the_compile_summary_names_the_tune_and_a_wrong_one_is_refused(tmp_path):
    model = save(M.build("cnn/tiny"), tmp_path / "tiny.onnx")
    proc = run_cli("compile", model, "--arch", "ultra96v2", "-o", tmp_path / "out", "--tune", "rtl", check=True)
    assert "tuned for the rtl TCU" in " ".join(proc.stdout.split())
    proc = run_cli("compile", model, "--arch", "ultra96v2", "-o", tmp_path / "bad", "--tune", "gemmini")
    assert_user_error(proc, "unknown tune 'gemmini'", "tensil, rtl")
    assert not (tmp_path / "bad").exists()
