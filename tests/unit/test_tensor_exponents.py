"""Per-tensor exponents (``systolix.hir_passes.tensor_exponents``): the IR before and the IR
expected after, what must share an exponent or stay at 0, that the float function is unchanged,
and on the emulator that a model with small activations loses less to rounding with them
(against onnxruntime, within the error bound)."""

from __future__ import annotations

import numpy as np
import pytest

import systolix.hir_passes.tensor_exponents as te
from systolix.arch import get_architecture
from systolix.compiler.context import CompileContext
from systolix.hir_passes.measure_ranges import LayerRange
from systolix.hir_passes.tensor_exponents import tensor_exponents
from systolix.ir import same
from systolix.ir.evaluate import evaluate, run_reference
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram, MaxPoolLayer
from systolix.ir.postops import AddTensor, Clip, Relu

ARCH = get_architecture("ultra96v2")  # 16x16, FP16BP8
CTX = CompileContext(ARCH)


def _chain(seed: int = 0):
    """x -> conv1 (1x1, clip 0..0.25: values under 0.15) -> a -> conv2 (3x3) -> y, with ranges
    as calibration would give them."""
    rng = np.random.default_rng(seed)
    x = Activation("x", 16, 4, 4, 16, order="pixel")
    a = Activation("a", 16, 4, 4, 16)
    y = Activation("y", 8, 4, 4, 16, order="pixel")
    w1 = rng.normal(0, 0.004, (16, 16, 1, 1)).astype(np.float32)
    b1 = rng.normal(0, 0.01, 16).astype(np.float32)
    w2 = rng.normal(0, 0.3, (8, 16, 3, 3)).astype(np.float32)
    b2 = rng.normal(0, 0.01, 8).astype(np.float32)
    conv1 = ConvLayer("conv1", [ConvInput(x, weights=w1)], a, b1, (1, 1), post_ops=[Clip(lo=0.0, hi=0.25, node="clip")])
    conv2 = ConvLayer("conv2", [ConvInput(a, weights=w2)], y, b2, (3, 3), pads=(1, 1, 1, 1))
    ranges = {0: LayerRange(np.full(16, 0.06), np.full(16, 1.0), 5000), 1: LayerRange(np.full(8, 0.3), np.full(8, 9.0), 5000)}
    hir = HirProgram("m", 16, [conv1, conv2], {"x": x}, {"y": y}, {"x": (1, 16, 4, 4)}, {"y": (1, 8, 4, 4)}, ranges=ranges)
    return hir, (w1, b1, w2, b2)


def test_a_small_tensor_is_stored_at_an_exponent_its_producer_applies_and_its_consumer_undoes():
    before, (w1, b1, w2, b2) = _chain()
    after = tensor_exponents(before, CTX)
    # a's range: its peak 0.06 with amplify_weights' channel headroom 2.5 (0.15), room for 2^9
    # (at most 2^8); conv2's sums of 0.3 (x 2.5) leave its weights room for 2^7.4, so that
    # past 2^6 their rounding (2^(2e - 14.8) relative) outweighs a's (2^-2e): e = 6.
    e = 6
    x, y = before.inputs["x"], before.outputs["y"]
    a = before.layers[0].output
    conv1 = ConvLayer("conv1", [ConvInput(x, weights=(w1 * 2.0 ** e).astype(np.float32))], a, (b1 * 2.0 ** e).astype(np.float32),
                      (1, 1), post_ops=[Clip(lo=0.0, hi=0.25 * 2 ** e, node="clip")])
    conv2 = ConvLayer("conv2", [ConvInput(a, weights=(w2 * 2.0 ** -e).astype(np.float32))], y, b2, (3, 3), pads=(1, 1, 1, 1))
    expected = HirProgram("m", 16, [conv1, conv2], {"x": x}, {"y": y}, {"x": (1, 16, 4, 4)}, {"y": (1, 8, 4, 4)},
                          exponents={"a": e})
    assert same(after, expected), after.text()
    assert "output stored at exponent 6" in after.text()
    # The ranges follow: conv1's sums are 2^6 larger, conv2's unchanged (amplify_weights next).
    assert np.allclose(after.ranges[0].peak, 0.06 * 2 ** e) and np.allclose(after.ranges[1].peak, 0.3)
    # The same function, a stored 2^6 larger and still in range.
    feeds = {"x": np.random.default_rng(1).normal(size=(1, 16, 4, 4)).astype(np.float32)}
    assert np.allclose(run_reference(after, feeds)["y"], run_reference(before, feeds)["y"], atol=1e-9)
    stored, real = evaluate(after, feeds).read(a), evaluate(before, feeds).read(a)
    assert np.allclose(stored, real * 2 ** e) and np.max(stored) < ARCH.data_type.max_value


def test_without_ranges_or_with_exponent_zero_nothing_changes():
    before, _ = _chain()
    plain = HirProgram("m", 16, before.layers, before.inputs, before.outputs, before.input_shapes, before.output_shapes)
    assert tensor_exponents(plain, CTX) is plain
    # A range that fills the type: no room for an exponent.
    full = HirProgram("m", 16, before.layers, before.inputs, before.outputs, before.input_shapes, before.output_shapes,
                      ranges={0: LayerRange(np.full(16, 60.0), np.full(16, 99.0), 5000), 1: before.ranges[1]})
    assert tensor_exponents(full, CTX) is full


def test_pools_and_residual_adds_share_an_exponent_and_the_outputs_stay_at_zero():
    """a -> maxpool -> p; conv3 adds p to its sum (a residual): a, p and conv3's output r share
    one exponent; conv4 reads r and writes the program's output y (exponent 0)."""
    rng = np.random.default_rng(2)
    x = Activation("x", 16, 4, 4, 16, order="pixel")
    a, p, r = Activation("a", 16, 4, 4, 16), Activation("p", 16, 2, 2, 16), Activation("r", 16, 2, 2, 16)
    y = Activation("y", 4, 2, 2, 16, order="pixel")
    w = lambda *shape: rng.normal(0, 0.01, shape).astype(np.float32)  # noqa: E731
    layers = [
        ConvLayer("conv1", [ConvInput(x, weights=w(16, 16, 1, 1))], a, np.zeros(16, np.float32), (1, 1), post_ops=[Relu()]),
        MaxPoolLayer("pool", a, p, (2, 2), (2, 2)),
        ConvLayer("conv3", [ConvInput(p, weights=w(16, 16, 1, 1))], r, np.zeros(16, np.float32), (1, 1),
                  post_ops=[AddTensor(p), Relu()]),
        ConvLayer("conv4", [ConvInput(r, weights=w(4, 16, 1, 1) * 30)], y, np.zeros(4, np.float32), (1, 1)),
    ]
    ranges = {0: LayerRange(np.full(16, 0.02), np.ones(16), 5000), 2: LayerRange(np.full(16, 0.01), np.ones(16), 5000),
              3: LayerRange(np.full(4, 0.3), np.ones(4), 5000)}
    before = HirProgram("m", 16, layers, {"x": x}, {"y": y}, {"x": (1, 16, 4, 4)}, {"y": (1, 4, 2, 2)}, ranges=ranges)
    after = tensor_exponents(before, CTX)
    e = after.exponents["a"]
    assert e > 0 and after.exponents == {"a": e, "p": e, "r": e}
    conv1, _, conv3, conv4 = after.layers
    assert np.array_equal(conv1.inputs[0].weights, (layers[0].inputs[0].weights * 2.0 ** e).astype(np.float32))
    assert np.array_equal(conv3.inputs[0].weights, layers[2].inputs[0].weights)  # in and out at e
    assert np.array_equal(conv4.inputs[0].weights, (layers[3].inputs[0].weights * 2.0 ** -e).astype(np.float32))
    # The residual sum's range is the sum of its operands' (0.05 + 0.025): it fits.
    assert 0.075 * 2 ** e <= ARCH.data_type.max_value
    feeds = {"x": rng.normal(size=(1, 16, 4, 4)).astype(np.float32)}
    assert np.allclose(run_reference(after, feeds)["y"], run_reference(before, feeds)["y"], atol=1e-9)


def _small_activations_model(seed: int = 0):
    """Conv -> BatchNormalization of small scale -> Relu, twice, then a 1x1 conv of larger
    weights: the hidden tensors stay under about 0.2 (a few LSB of FP16BP8's grid at 0)."""
    from onnx import helper

    from tests.onnx_builders import make_model

    rng = np.random.default_rng(seed)
    inits, nodes, x = {}, [], "x"
    for k, (cin, cout) in enumerate([(8, 16), (16, 16)]):
        inits[f"w{k}"] = rng.normal(0, 1 / np.sqrt(9 * cin), (cout, cin, 3, 3)).astype(np.float32)
        inits[f"g{k}"] = rng.uniform(0.02, 0.05, cout).astype(np.float32)
        inits[f"b{k}"] = rng.normal(0, 0.01, cout).astype(np.float32)
        inits[f"m{k}"] = rng.normal(0, 0.1, cout).astype(np.float32)
        inits[f"v{k}"] = rng.uniform(0.8, 1.2, cout).astype(np.float32)
        nodes += [helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                  helper.make_node("BatchNormalization", [f"c{k}", f"g{k}", f"b{k}", f"m{k}", f"v{k}"], [f"n{k}"]),
                  helper.make_node("Relu", [f"n{k}"], [f"r{k}"])]
        x = f"r{k}"
    inits["wh"] = rng.normal(0, 1.0, (8, 16, 1, 1)).astype(np.float32)
    nodes.append(helper.make_node("Conv", [x, "wh"], ["y"], kernel_shape=[1, 1]))
    return make_model(nodes, [("x", [1, 8, 8, 8])], [("y", None)], inits)


@pytest.mark.needs_emulator
@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("how", ["calibrated", "estimated gains"])
def test_small_activations_lose_less_with_exponents_on_the_emulator(how, monkeypatch, capsys):
    import onnxruntime as ort

    from systolix.compiler import compile_model
    from tests.error_model import output_bounds

    model = _small_activations_model()
    rng = np.random.default_rng(5)
    test = {"x": rng.normal(size=(8, 1, 8, 8, 8)).astype(np.float32)}
    options = {"calibration": {"x": rng.normal(size=(16, 1, 8, 8, 8)).astype(np.float32)}} if how == "calibrated" else {
        "estimate_gains": True}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = np.stack([session.run(None, {"x": x})[0] for x in test["x"]])
    errors = {}
    for label, top in (("with", te.MAX_EXPONENT), ("without", 0)):
        monkeypatch.setattr(te, "MAX_EXPONENT", top)
        compiled = compile_model(model, ARCH, **options)
        got = compiled.run(test, batch=True)["y"]
        errors[label] = got - ref
    rms = {k: float(np.sqrt(np.mean(v ** 2))) * 256 for k, v in errors.items()}
    with capsys.disabled():
        print(f"\n{how}: RMS error {rms['without']:.2f} LSB without exponents, {rms['with']:.2f} with")
    assert rms["with"] < 0.75 * rms["without"], rms
    for i, x in enumerate(test["x"]):
        bound = output_bounds(model, {"x": x})["y"]
        assert np.max(np.abs(errors["with"][i])) <= bound
