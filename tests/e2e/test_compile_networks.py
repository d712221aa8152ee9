"""Whole networks compiled for three array sizes against onnxruntime: outputs within the derived
FP16BP8 bound, classifiers picking the same class, the digits CNN's accuracy, the speech model
against Tensil's own compile of it."""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest

import systolix.models as M
from systolix.arch import Architecture
from systolix.artifacts import read_vectors_csv
from systolix.compiler import compile_model
from systolix.runtime import load
from tests.conftest import SPEECH
from tests.error_model import output_bounds

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

ARCHS = ["pynqz1", "ultra96v2", "zcu104"]
# Plain compiles (no calibration data; gains estimated from the model itself, the default) of
# these random-weight classifiers agree with onnxruntime on 98% (MobileNet on ultra96v2) to 100%
# (MLP) of the 100 inputs (without gains: 95%, 98% for ResNet-20, 99% for the MLP);
# every disagreement is a near-tie (top-2 margin under TIE_MARGIN, 26 LSB of FP16BP8). Below
# this something other than rounding is wrong.
RAW_AGREEMENT = 0.93
TIE_MARGIN = 0.1
# Calibrated compiles amplify the weights (systolix.hir_passes.amplify_weights) on samples that are
# never test inputs (seeds 1000 on; the test inputs are seeds 0 to 999) and round them to fit the
# samples (GPTQ). Their errors are 4-5x smaller than plain compiles' and they agree on 98%
# (ResNet-20 on zcu104: two misses, top-2 margins of 1.0 and 0.4 LSB, ties at the output's own
# resolution) to 100% of the first 100 inputs; the 99% is held on all 1,000 (slow test
# below; 99.2 to 99.7% measured).
CALIBRATION_SAMPLES = 128
CALIBRATED_TIE = TIE_MARGIN / 2
CALIBRATED_AGREEMENT = 0.98
AGREEMENT_INPUTS = 1000
REQUIRED_AGREEMENT = 0.99
# On 1,000 inputs one ResNet-20 input, far darker than any calibration sample, saturates (its
# logits reach 4.8x the samples' largest); a calibrated compile assumes inputs like its samples.
SATURATING_SHARE = 0.002


@functools.lru_cache(maxsize=None)
def built(name: str):
    return M.build(name)


@functools.lru_cache(maxsize=None)
def session_of(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(built(name).SerializeToString(), providers=["CPUExecutionProvider"])


def onnxruntime_outputs(name: str, feeds):
    """Outputs of the model ``built(name)`` (one session per model, reused for every input)."""
    sess = session_of(name)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def batch_of(model, count: int, seed: int = 0):
    """``count`` example inputs stacked on a batch axis (the runtime runs them in one pass)."""
    items = [M.example_inputs(model, seed=seed + k) for k in range(count)]
    return {name: np.stack([it[name] for it in items]) for name in items[0]}, items


def calibration_of(model, samples: int = CALIBRATION_SAMPLES):
    return [M.example_inputs(model, seed=1000 + k) for k in range(samples)]


@functools.lru_cache(maxsize=None)
def calibrated_compile(name: str, arch: str, samples: int = CALIBRATION_SAMPLES):
    """``name`` compiled for ``arch`` with ``samples`` calibration samples (shared by the tests)."""
    model = built(name)
    return compile_model(model, arch, calibration=calibration_of(model, samples))


@functools.lru_cache(maxsize=None)
def many_inputs(name: str):
    """AGREEMENT_INPUTS example inputs stacked on a batch axis, with onnxruntime's output and
    the derived bound for each (the same on every array)."""
    model = built(name)
    batch, items = batch_of(model, AGREEMENT_INPUTS)
    return batch, references(name, model, items)


def references(name, model, items):
    """onnxruntime's output and the derived error bound, per input."""
    out = session_of(name).get_outputs()[0].name
    return [(onnxruntime_outputs(name, feeds)[out].reshape(-1), output_bounds(model, feeds)[out]) for feeds in items]


def agreement(compiled, batch, refs, tie: float):
    """Share of inputs with the same class; agreement on the inputs whose top-2 margin is at
    least ``tie`` (and how many those are); mean and largest error (as a share of its bound)."""
    got = next(iter(compiled.run(batch).values()))
    agree = decided = same = 0
    errors, worst = [], 0.0
    for k, (ref, bound) in enumerate(refs):
        ours = got[k].reshape(-1)
        err = float(np.max(np.abs(ours - ref)))
        assert err <= bound, f"input {k}: max error {err:.4f} > bound {bound:.4f}"
        errors.append(err)
        worst = max(worst, err / bound)
        same += int(np.argmax(ours) == np.argmax(ref))
        top2 = np.sort(ref)[-2:]
        if top2[1] - top2[0] >= tie:
            decided += 1
            agree += int(np.argmax(ours) == np.argmax(ref))
    return same / len(refs), agree, decided, float(np.mean(errors)), worst


@pytest.mark.slow(seconds={"resnet20v2-pynqz1": 60, "resnet20v2-zcu104": 25, "mobilenetv2_block-pynqz1": 20,
                           "resnet20v2-ultra96v2": 16, "mobilenetv2_block-ultra96v2": 15, "mobilenetv2_block-zcu104": 12,
                           "mlp-pynqz1": 2, "mlp-ultra96v2": 2, "mlp-zcu104": 2})
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["mlp", "mobilenetv2_block", "resnet20v2"])
def test_classifier_matches_onnxruntime(name, arch, capsys):
    model = built(name)
    batch, items = batch_of(model, 100)
    refs = references(name, model, items)
    plain = compile_model(model, arch)
    assert not plain.summary.host_nodes
    raw, agree, decided, plain_err, plain_worst = agreement(plain, batch, refs, TIE_MARGIN)
    calibrated = calibrated_compile(name, arch)
    assert calibrated.summary.gains
    cal_raw, cal_agree, cal_decided, cal_err, cal_worst = agreement(calibrated, batch, refs, CALIBRATED_TIE)
    with capsys.disabled():
        print(f"\n{name} on {arch}: same class on {cal_raw:.0%} of {len(items)} inputs calibrated "
              f"({cal_agree} of {cal_decided} with a top-2 margin over {CALIBRATED_TIE}), {raw:.0%} plain "
              f"({agree} of {decided} over {TIE_MARGIN}); mean max error {cal_err:.4f} calibrated, {plain_err:.4f} plain; "
              f"largest {cal_worst:.1%} / {plain_worst:.1%} of the bound")
    assert decided >= 0.5 * len(items), f"only {decided} of {len(items)} inputs have a clear top class"
    assert agree >= 0.99 * decided, f"plain: same class on {agree} of {decided} clear-cut inputs"
    assert raw >= RAW_AGREEMENT, f"plain: same class on {raw:.1%} of all inputs"
    # Not below the plain compile by more than one input of the 100: the calibrated misses are
    # ties at the output's own resolution (above), and one such tie may go either way.
    assert cal_raw >= max(raw - 0.01, CALIBRATED_AGREEMENT), f"calibrated: same class on {cal_raw:.1%} of all inputs (plain {raw:.1%})"
    # Without gains calibration halved the error; against estimated gains it is 1.4-1.8x smaller
    # on the MLP and the MobileNet (ultra96v2: 0.0067 against 0.0091, 0.0196 against 0.0280, mean
    # max error). ResNet-20 v2's plain compile, with its head in parts and balanced taps, has
    # caught up (0.0083 to 0.0096 against the calibrated 0.0111 on the three arrays): there the
    # calibrated one is held to within 1.5x of it.
    if name == "resnet20v2":
        assert cal_err < 1.5 * plain_err, f"calibrated error {cal_err:.4f} vs plain {plain_err:.4f}"
    else:
        assert cal_err * 1.2 < plain_err, f"calibration should lower the error: {cal_err:.4f} vs {plain_err:.4f}"


@pytest.mark.slow(seconds={"resnet20v2-pynqz1": 150, "mobilenetv2_block-pynqz1": 120, "resnet20v2-zcu104": 85,
                           "mobilenetv2_block-zcu104": 80, "resnet20v2-ultra96v2": 75, "mobilenetv2_block-ultra96v2": 60,
                           "mlp-pynqz1": 5, "mlp-ultra96v2": 5, "mlp-zcu104": 5})
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["mlp", "mobilenetv2_block", "resnet20v2"])
def test_calibrated_classifier_picks_the_same_class_on_99_percent_of_1000_inputs(name, arch, capsys):
    batch, refs = many_inputs(name)
    run = calibrated_compile(name, arch).run_detailed(batch, threads=2)
    got = next(iter(run.outputs.values())).reshape(len(refs), -1)
    saturated = run.result.saturations_per_item.sum(axis=1) > 0
    misses, over = [], []
    for k, (ref, bound) in enumerate(refs):
        if np.max(np.abs(got[k] - ref)) > bound and not saturated[k]:
            over.append(k)
        if np.argmax(got[k]) != np.argmax(ref):
            top2 = np.sort(ref)[-2:]
            misses.append(float(top2[1] - top2[0]))
    same = 1 - len(misses) / len(refs)
    with capsys.disabled():
        print(f"\n{name} on {arch}, calibrated: same class on {same:.1%} of {len(refs):,} inputs; misses' top-2 "
              f"margins (LSB) {', '.join(f'{m * 256:.1f}' for m in sorted(misses))}; {int(saturated.sum())} saturated")
    assert not over, f"inputs {over[:10]} are outside the bound and did not saturate"
    assert saturated.mean() <= SATURATING_SHARE, f"{int(saturated.sum())} of {len(refs)} inputs saturated"
    assert same >= REQUIRED_AGREEMENT, f"same class on {same:.2%} of {len(refs)} inputs"
    assert max(misses, default=0.0) < CALIBRATED_TIE, f"a miss with a top-2 margin of {max(misses):.4f}"


# ResNet-50 v2 takes about 1 s an input on ultra96v2 (two cores) and 0.8 s a calibration sample: 100
# inputs and 32 samples here (the 128 of the smaller classifiers would add 75 s). The emulator holds
# a copy of its 1.5 M constant vectors per batch item, so the inputs run in chunks. On 1,000 inputs
# it picks onnxruntime's class on 99.4%: its six misses are ties within 3.3 LSB, and none of the 4
# inputs that saturate loses its class (scripts/agreement.py --model resnet50v2 --arch ultra96v2
# --samples 32; the first 100 do not saturate). Its 2,048-long head is summed in parts
# (systolix.hir_passes.split_long_reductions): whole, it was 98.4%.
RESNET50_INPUTS = 100
RESNET50_SAMPLES = 32
RESNET50_CHUNK = 16


@pytest.mark.slow(seconds=300, heavy=True)
def test_calibrated_resnet50v2_picks_the_same_class_on_99_percent_of_100_inputs(capsys):
    name, arch = "resnet50v2", "ultra96v2"
    model = built(name)
    compiled = calibrated_compile(name, arch, RESNET50_SAMPLES)
    items = [M.example_inputs(model, seed=k) for k in range(RESNET50_INPUTS)]
    got, saturated = [], 0
    for first in range(0, len(items), RESNET50_CHUNK):
        part = items[first:first + RESNET50_CHUNK]
        outputs, per_item = compiled.run_counting({k: np.stack([it[k] for it in part]) for k in part[0]}, threads=2)
        got.append(next(iter(outputs.values())).reshape(len(part), -1))
        saturated += int(np.count_nonzero(per_item))
    got = np.concatenate(got)
    out = session_of(name).get_outputs()[0].name
    refs = np.array([onnxruntime_outputs(name, feeds)[out].reshape(-1) for feeds in items])
    misses = [float(np.diff(np.sort(ref)[-2:])[0]) for ref, ours in zip(refs, got) if np.argmax(ours) != np.argmax(ref)]
    same = 1 - len(misses) / len(items)
    with capsys.disabled():
        print(f"\n{name} on {arch}, calibrated: same class on {same:.1%} of {len(items)} inputs; misses' top-2 "
              f"margins (LSB) {', '.join(f'{m * 256:.1f}' for m in sorted(misses))}; {saturated} saturated")
    assert saturated == 0
    assert same >= REQUIRED_AGREEMENT, f"same class on {same:.2%} of {len(items)} inputs"
    assert max(misses, default=0.0) < CALIBRATED_TIE, f"a miss with a top-2 margin of {max(misses):.4f}"


@pytest.mark.slow(seconds={"pynqz1": 17, "ultra96v2": 7, "zcu104": 5})
@pytest.mark.parametrize("arch", ARCHS)
def test_yolov4_tiny_within_bound(arch):
    model = built("yolov4_tiny")
    compiled = compile_model(model, arch)
    assert not compiled.summary.host_nodes
    feeds = M.example_inputs(model, seed=1)
    ref = onnxruntime_outputs("yolov4_tiny", feeds)
    bounds = output_bounds(model, feeds)
    got = compiled.run(feeds)
    for out in ref:
        err = float(np.max(np.abs(got[out] - ref[out])))
        assert err <= bounds[out], f"{out}: {err:.4f} > {bounds[out]:.4f}"


@pytest.mark.parametrize("arch", ARCHS)
def test_digits_cnn_accuracy_within_one_point(arch, capsys):
    digits = M.build_digits_cnn()
    x = np.asarray(digits.heldout_x, np.float32)
    y = np.asarray(digits.heldout_y)
    sess = ort.InferenceSession(digits.model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = x.reshape((len(x),) + tuple(sess.get_inputs()[0].shape))
    ref = np.concatenate([sess.run(None, {name: x[i]})[0] for i in range(len(x))]).reshape(len(x), -1)
    compiled = compile_model(digits.model, arch)
    got = next(iter(compiled.run({name: x}, batch=True).values())).reshape(len(x), -1)
    acc_ref = float(np.mean(ref.argmax(1) == y))
    acc_ours = float(np.mean(got.argmax(1) == y))
    with capsys.disabled():
        print(f"\ndigits CNN on {arch}: accuracy {acc_ours:.2%} (onnxruntime {acc_ref:.2%}), "
              f"same class on {int(np.sum(got.argmax(1) == ref.argmax(1)))} of {len(x)}")
    assert len(x) >= 300 and acc_ref > 0.9
    assert abs(acc_ours - acc_ref) <= 0.01, f"accuracy {acc_ours:.4f} vs onnxruntime {acc_ref:.4f}"


def test_speech_model_error_not_larger_than_tensils(capsys):
    arch = Architecture.load(SPEECH / "speech_robot.tarch")
    compiled = compile_model(SPEECH / "speech_commands.onnx", arch)
    vectors = read_vectors_csv(SPEECH / "speech_commands_input_1x8.csv", 8)
    spectrogram = vectors[:, 0].reshape(1, 1, 124, 129)
    sess = ort.InferenceSession(str(SPEECH / "speech_commands.onnx"), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"input_1": spectrogram})[0].reshape(-1)
    ours = compiled.run({"input_1": spectrogram})["dense_1"].reshape(-1)
    tensil_model = load(SPEECH / "speech_commands_onnx_speech_robot.tmodel")
    tensil = next(iter(tensil_model.run({"input_1": vectors}).values())).reshape(-1)[:12]
    ours_err = float(np.max(np.abs(ours - ref)))
    tensil_err = float(np.max(np.abs(tensil - ref)))
    with capsys.disabled():
        print(f"\nspeech model max |error| vs onnxruntime: systolix {ours_err:.4f}, Tensil's compile {tensil_err:.4f}")
    assert ours_err <= tensil_err
    assert np.argmax(ours) == np.argmax(ref)


@pytest.mark.slow(seconds=140, heavy=True)
def test_resnet50v2_within_bound_on_every_array_size():
    model = built("resnet50v2")
    feeds = M.example_inputs(model, seed=1)
    ref = onnxruntime_outputs("resnet50v2", feeds)
    bounds = output_bounds(model, feeds)
    # 25.5 M weights are 2.97 M vectors of 8: more than the pynqz1 preset's 1 M-vector DRAM1. The
    # model is cut into programs run in a row, each with constants that fit (its own DRAM1 buffer).
    for arch in ("pynqz1", "ultra96v2", "zcu104"):
        compiled = compile_model(model, arch)
        if arch == "pynqz1":
            assert compiled.summary.constant_cuts >= 2
            assert all(seg.lir.consts.shape[0] <= 1 << 20 for seg in compiled.summary.segments)
        else:
            assert compiled.summary.constant_cuts == 0
        got = compiled.run(feeds)
        for out in ref:
            err = float(np.max(np.abs(got[out] - ref[out])))
            assert err <= bounds[out], f"{arch}: {out} max error {err:.4f} > bound {bounds[out]:.4f}"
            assert np.argmax(got[out]) == np.argmax(ref[out])
