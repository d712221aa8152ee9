"""Per-tensor exponents (``systolix.hir_passes.tensor_exponents``): the IR before and the IR
expected after, what must share an exponent or stay at 0, that the float function is unchanged,
and on the emulator that a model with small activations loses less to rounding with them
(against onnxruntime, within the error bound)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import systolix.hir_passes.tensor_exponents as te
from systolix.arch import get_architecture
from systolix.compiler.context import CompileContext
from systolix.hir_passes.measure_ranges import LayerRange, measure
from systolix.hir_passes.split_long_reductions import split_long_reductions
from systolix.hir_passes.tensor_exponents import tensor_exponents
from systolix.ir import same
from systolix.ir.evaluate import evaluate, run_reference
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram, MaxPoolLayer
from systolix.ir.postops import PART_NODE, AddConstant, AddTensor, Clip, Relu, Scale

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


def _parts(seed: int = 3):
    """A dense layer over 384 channels in three parts of 128 (``split_long_reductions``): the first two
    save partial sums, the last adds them, the bias and a ReLU; ranges as calibration would give
    them, with the whole sum's (``LayerRange.whole``) on the last part."""
    rng = np.random.default_rng(seed)
    x, y = Activation("x", 384, 1, 1, 16, order="pixel"), Activation("y", 4, 1, 1, 16, order="pixel")
    whole = ConvLayer("head", [ConvInput(x, weights=rng.normal(0, 0.02, (4, 384, 1, 1)).astype(np.float32))], y,
                      rng.normal(0, 0.5, 4).astype(np.float32), (1, 1), post_ops=[Relu(node="r")])
    one = HirProgram("m", 16, [whole], {"x": x}, {"y": y}, {"x": (1, 384)}, {"y": (1, 4)})
    split = split_long_reductions(one, CompileContext(ARCH, samples=[{}]))
    part = LayerRange(np.full(4, 1.0), np.full(4, 9.0), 5000)
    ranges = {0: part, 1: part, 2: dataclasses.replace(part, whole=LayerRange(np.full(4, 1.5), np.full(4, 9.0), 5000))}
    return dataclasses.replace(split, ranges=ranges)


def test_a_reductions_parts_are_summed_at_the_exponent_the_whole_sum_allows():
    before = _parts()
    after = tensor_exponents(before, CTX)
    # Parts' sums of 1 (x 2.5 headroom, measured ranges) and the whole sum's 1.5 (3.75): the
    # partial tensors, read only by the last part's adds, take 2^5 (3.75 x 32 = 120 < 128); the
    # output is the program's, at 0. The last part computes at 2^5 too and a multiply by 2^-5
    # follows its adds, before the ReLU.
    e = 5
    first, second, last = before.layers
    partials = [first.output, second.output]
    scaled = lambda layer: [ConvInput(inp.act, weights=inp.weights * 2.0 ** e) for inp in layer.inputs]  # noqa: E731
    expected_layers = [
        dataclasses.replace(first, inputs=scaled(first), bias=first.bias * 2.0 ** e),
        dataclasses.replace(second, inputs=scaled(second), bias=second.bias * 2.0 ** e),
        dataclasses.replace(last, inputs=scaled(last), bias=last.bias * 2.0 ** e, post_ops=[
            AddTensor(partials[0], node=PART_NODE), AddTensor(partials[1], node=PART_NODE),
            AddConstant(last.post_ops[2].values * 2.0 ** e, node=PART_NODE),
            Scale(np.full(4, 2.0 ** -e, np.float32), node=te.SUM_NODE), Relu(node="r")]),
    ]
    expected = dataclasses.replace(before, layers=expected_layers, ranges={}, exponents={p.name: e for p in partials})
    assert same(dataclasses.replace(after, ranges={}), expected), after.text()
    assert after.ranges[2].whole.peak[0] == 1.5 * 2 ** e  # the ranges follow the sums
    # The same function; every partial and sum in range.
    feeds = {"x": np.random.default_rng(1).normal(size=(1, 384)).astype(np.float32)}
    assert np.allclose(run_reference(after, feeds)["y"], run_reference(before, feeds)["y"], atol=1e-9)
    ev = evaluate(after, feeds)
    assert all(np.max(np.abs(ev.read(p))) < ARCH.data_type.max_value for p in partials)
    assert np.max(ev.sum_max[2]) < ARCH.data_type.max_value


def test_without_the_whole_sums_range_the_parts_sum_at_their_added_ranges():
    """No ``LayerRange.whole`` (a plain estimate of a wide-input split): the sum of parts is
    bounded by its operands' ranges added (interval arithmetic): 2.5 x 3 and the bias, over 8: 2^3."""
    before = _parts()
    before.ranges[2] = dataclasses.replace(before.ranges[2], whole=None)
    after = tensor_exponents(before, CTX)
    assert 8 < 7.5 + np.max(np.abs(before.layers[2].post_ops[2].values)) < 16
    assert after.exponents == {before.layers[0].output.name: 3, before.layers[1].output.name: 3}
    assert after.layers[2].post_ops[3].values[0] == 2.0 ** -3


def test_calibration_measures_the_whole_sum_where_the_parts_are_summed():
    """``measure_ranges.measure``: the last part's ``whole`` is the largest |value| its
    accumulators hold from its own sum to the last add (its own part, then the others and the
    bias added one by one: NumPy's), its ``largest`` its own part's."""
    split = dataclasses.replace(_parts(), ranges={})
    rng = np.random.default_rng(4)
    samples = [{"x": rng.normal(size=(1, 384)).astype(np.float32)} for _ in range(8)]
    ranges = measure(split, samples)
    bias = split.layers[2].post_ops[2].values.reshape(-1).astype(np.float64)

    def stages(x):
        part = [layer.inputs[0].weights[:, :, 0, 0].astype(np.float64) @ x[128 * j:128 * (j + 1)].astype(np.float64)
                for j, layer in enumerate(split.layers)]
        own = part[2]
        return own, [own, own + part[0], own + part[0] + part[1], own + part[0] + part[1] + bias]

    # Its own: the largest running sum as the array adds each vector of 16 input channels.
    w_last = split.layers[2].inputs[0].weights[:, :, 0, 0].astype(np.float64)
    own = np.stack([np.abs(np.cumsum(np.stack([w_last[:, c:c + 16] @ s["x"][0, 256 + c:272 + c].astype(np.float64)
                                                for c in range(0, 128, 16)]), axis=0)).max(axis=0) for s in samples]).max(axis=0)
    summed = np.stack([np.abs(np.stack(stages(s["x"][0])[1])).max(axis=0) for s in samples]).max(axis=0)
    assert ranges[0].whole is None and ranges[1].whole is None
    np.testing.assert_allclose(ranges[2].whole.largest, summed, rtol=1e-6)
    np.testing.assert_allclose(ranges[2].largest, own, rtol=1e-6)
    assert np.all(summed > own * 1.01)  # what the other parts added


def _map_parts(estimated: bool):
    """A 3x3 conv over 256 channels of a 6x6 map in parts (``split_long_reductions``), ranges as
    calibration (``estimated=False``) or the plain estimate would give them: each part's sums
    reach 1, the whole sum 1.5 (on the last part)."""
    rng = np.random.default_rng(5)
    x, y = Activation("x", 256, 6, 6, 16), Activation("y", 16, 6, 6, 16)
    whole = ConvLayer("conv", [ConvInput(x, weights=rng.normal(0, 0.02, (16, 256, 3, 3)).astype(np.float32))], y,
                      rng.normal(0, 0.1, 16).astype(np.float32), (3, 3), pads=(1, 1, 1, 1), post_ops=[Relu(node="r")])
    z = Activation("z", 4, 6, 6, 16)  # a consumer, so that the map is not a program output (pinned at 0)
    after = ConvLayer("next", [ConvInput(y, weights=np.ones((4, 16, 1, 1), np.float32))], z, np.zeros(4, np.float32), (1, 1))
    one = HirProgram("m", 16, [whole, after], {"x": x}, {"z": z}, {"x": (36, 256)}, {"z": (36, 4)})
    split = split_long_reductions(one, CompileContext(ARCH, samples=[{}]))
    count = len(split.layers) - 1
    assert count > 2
    part = LayerRange(np.full(16, 1.0), np.full(16, 9.0), 5000, estimated=estimated)
    ranges = {i: part for i in range(count)}
    ranges[count - 1] = dataclasses.replace(part, whole=LayerRange(np.full(16, 1.5), np.full(16, 9.0), 5000, estimated=estimated))
    ranges[count] = LayerRange(np.full(4, 20.0), np.full(4, 99.0), 5000, estimated=estimated)
    return dataclasses.replace(split, ranges=ranges), count


@pytest.mark.parametrize("estimated", [False, True])
def test_a_maps_parts_are_summed_apart_only_where_their_ranges_were_measured(estimated):
    """``maps_apart``: calibrated, a map's partial sums take an exponent of their own and the last
    part multiplies its sum to the output's after adding them (one SIMD operation per output
    vector); from the estimate the parts are summed at the output's exponent, as before."""
    before, count = _map_parts(estimated)
    assert te.maps_apart(before) is not estimated
    after = tensor_exponents(before, CTX)
    last = after.layers[count - 1]
    partials = [layer.output for layer in before.layers[:count - 1]]
    exponents = {after.exponents.get(p.name, 0) for p in partials}
    sums = [op for op in last.post_ops if op.node == te.SUM_NODE]
    if estimated:
        assert not sums and exponents == {after.exponents.get("y", 0)}
    else:
        (e,) = exponents
        assert e > after.exponents.get("y", 0) and len(sums) == 1
        assert sums[0].values[0] == 2.0 ** (after.exponents.get("y", 0) - e)
    # The same function either way.
    feeds = {"x": np.random.default_rng(1).normal(size=(36, 256)).astype(np.float32)}
    np.testing.assert_allclose(run_reference(after, feeds)["z"], run_reference(before, feeds)["z"], rtol=1e-5, atol=1e-6)
