"""``correct_output_offsets``: a calibrated compile's outputs err by their samples' mean error
less. The pass test builds the HIR before and the HIR expected after; the emulator tests compile
test models calibrated with and without the correction and compare with onnxruntime's float
model on inputs the calibration never saw."""

from __future__ import annotations

import numpy as np

import systolix.models as M
from systolix.accuracy.measure import random_inputs, run_onnx
from systolix.arch import get_architecture
from systolix.compiler import compile_model
from systolix.compiler.context import CompileContext
from systolix.compiler.output_offsets import measure_output_offsets
from systolix.frontend import graph_from_model, import_onnx
from systolix.hir_passes.correct_output_offsets import correct_output_offsets
from systolix.ir import same
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import AddConstant, Relu, Scale

ARCH = get_architecture("ultra96v2")  # FP16BP8
LSB = 2.0 ** -8


def _program(bias, post_ops, exponent: int = 0) -> HirProgram:
    x = Activation("x", 2, 1, 1, 16)
    y = Activation("y", 2, 1, 1, 16)
    w = np.full((2, 2, 1, 1), 0.5, np.float32)
    layer = ConvLayer("fc", [ConvInput(x, weights=w)], y, np.asarray(bias, np.float32), (1, 1), post_ops=post_ops)
    return HirProgram("m", 16, [layer], {"x": x}, {"y": y}, {"x": (1, 2)}, {"y": (1, 2)},
                      exponents={"y": exponent} if exponent else {})


def test_the_offset_leaves_the_bias_at_the_accumulators_scale():
    # The gain's undo multiplies by 1/8 and a constant is added after it: an offset of +0.5 and
    # -1.25 LSB at the output is -4 and +10 LSB of the bias (the constant stays); stored at
    # exponent 1 (values x 2), twice that.
    offsets = {"y": np.array([0.5, -1.25]) * LSB}
    undo = Scale(np.array([0.125, 0.125], np.float32))
    add = AddConstant(np.zeros((2, 1, 1), np.float32))
    before = _program([1.0, -2.0], [undo, add])
    after = correct_output_offsets(before, CompileContext(ARCH, output_offsets=offsets))
    assert same(after, _program(np.array([1.0, -2.0]) + np.array([-4.0, 10.0]) * LSB, [undo, add]))
    before = _program([1.0, -2.0], [undo, add], exponent=1)
    after = correct_output_offsets(before, CompileContext(ARCH, output_offsets=offsets))
    assert same(after, _program(np.array([1.0, -2.0]) + np.array([-8.0, 20.0]) * LSB, [undo, add], exponent=1))


def test_an_output_through_a_relu_or_without_offsets_keeps_its_bias():
    before = _program([1.0, -2.0], [Scale(np.array([0.125, 0.125], np.float32)), Relu()])
    offsets = {"y": np.array([0.5, -1.25]) * LSB}
    assert same(correct_output_offsets(before, CompileContext(ARCH, output_offsets=offsets)), before)
    plain = _program([1.0, -2.0], [])
    assert correct_output_offsets(plain, CompileContext(ARCH)) is plain
    # An offset of another length than the output's channels is not this output's.
    wrong = {"y": np.array([0.5, -1.25, 2.0]) * LSB}
    assert same(correct_output_offsets(plain, CompileContext(ARCH, output_offsets=wrong)), plain)


def _setup(name: str, count: int):
    model = M.build_cached(name)
    onnx_model, source, shapes = import_onnx(model)
    graph = graph_from_model(onnx_model, source, shapes)
    return model, onnx_model, source, graph, random_inputs(graph, count, 5), random_inputs(graph, count, 6)


def _stacked(items):
    return {key: np.stack([item[key] for item in items]) for key in items[0]}


def test_the_corrected_program_shifts_each_output_channel_by_its_offset():
    # The MLP test model, 32 samples: run on the samples, the corrected program's outputs differ
    # from the uncorrected one's by minus the offset measured on them, channel by channel (on
    # average over the samples: the bias moves in steps of 1/G LSB and the undo rounds), and the
    # compile reports the offsets it took out.
    model, onnx_model, _, graph, samples, _ = _setup("mlp", 32)
    (out,) = graph.outputs
    kept = compile_model(model, ARCH, calibration=samples, correct_offsets=False)
    fixed = compile_model(model, ARCH, calibration=samples)
    offset = measure_output_offsets(kept, onnx_model, graph, samples)[out].reshape(-1) / LSB
    assert np.sqrt(np.mean(offset ** 2)) > 0.1  # there is something to correct
    feeds = _stacked(samples)
    shift = (fixed.run(feeds, batch=True)[out] - kept.run(feeds, batch=True)[out]).reshape(32, -1).mean(axis=0) / LSB
    assert np.max(np.abs(shift + offset)) <= 0.5
    np.testing.assert_allclose(fixed.summary.output_offsets[out].reshape(-1) / LSB, offset, rtol=1e-6)
    assert not kept.summary.output_offsets


def test_on_inputs_the_calibration_never_saw_the_offset_is_gone():
    # The MobileNetV2 stack, calibrated on 32 samples, 32 other inputs against onnxruntime: the
    # logits' error common to every input (each channel's mean) was 1.03 LSB RMS, 0.23 corrected;
    # the whole error 3.07 -> 2.89.
    model, onnx_model, source, graph, samples, inputs = _setup("mobilenetv2_block", 32)
    (out,) = graph.outputs
    want = run_onnx(onnx_model, inputs, [out], source)[out].reshape(32, -1)
    errors = {}
    for correct in (False, True):
        compiled = compile_model(model, ARCH, calibration=samples, correct_offsets=correct)
        errors[correct] = (compiled.run(_stacked(inputs), batch=True)[out].reshape(32, -1) - want) / LSB
    offset = {k: np.sqrt(np.mean(e.mean(axis=0) ** 2)) for k, e in errors.items()}
    rms = {k: np.sqrt(np.mean(e ** 2)) for k, e in errors.items()}
    assert offset[True] < 0.5 * offset[False] and rms[True] < rms[False]


def test_the_second_run_takes_the_first_runs_rounding_and_changes_only_the_offsets(monkeypatch):
    # With offsets of zero, the second run (the calibration's float runs and the rounded weights
    # taken from the first, CompileContext.memo) writes the files one run writes.
    import systolix.compiler as compiler

    model, _, _, graph, samples, _ = _setup("mlp", 16)
    (out,) = graph.outputs
    once = compile_model(model, ARCH, calibration=samples, correct_offsets=False)
    calls = []
    zeros = {out: np.zeros(graph.tensor(out).shape[1])}
    monkeypatch.setattr(compiler, "measure_output_offsets", lambda *args: calls.append(1) or zeros)
    twice = compile_model(model, ARCH, calibration=samples)
    assert calls == [1] and twice.artifacts == once.artifacts and twice.summary.output_offsets is zeros


def test_a_plain_compile_takes_no_offsets():
    model, _, _, _, _, _ = _setup("mlp", 2)
    compiled = compile_model(model, ARCH)
    assert not compiled.summary.output_offsets
    assert compiled.artifacts == compile_model(model, ARCH, correct_offsets=False).artifacts
