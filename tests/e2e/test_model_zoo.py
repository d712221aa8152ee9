"""The big models (ResNet-20 v2, ResNet-50 v2, YOLOv4-tiny, MobileNetV2 stack), the trained digits
CNN, the real speech model and the model-building scripts, checked against independent figures:
layer tables written out here, Keras' published parameter count, real data, onnxruntime."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import systolix.models as zoo
from tests.conftest import PROJECT, SPEECH

pytestmark = pytest.mark.needs_onnxruntime


def _session(model):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _max_activation(model, feeds) -> float:
    extended = onnx.ModelProto()
    extended.CopyFrom(model)
    declared = {o.name for o in extended.graph.output}
    names = [o for n in model.graph.node for o in n.output if o]
    for name in names:
        if name not in declared:
            extended.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return max(float(np.abs(v).max()) for v in _session(extended).run(names, feeds))


def _conv_table_macs(layers) -> tuple[int, int]:
    """(MACs, weights) of conv layers given as (H_out, W_out, k, C_in, C_out)."""
    macs = sum(h * w * k * k * ci * co for h, w, k, ci, co in layers)
    weights = sum(k * k * ci * co for _, _, k, ci, co in layers)
    return macs, weights


# ------------------------------------------------------------------------------------- ResNet-20 v2
def _resnet20v2_convs():
    """Keras' cifar10 resnet_v2(depth=20), written out: stem, then per stage two bottleneck units."""
    layers = [(32, 32, 3, 3, 16)]
    cin = 16
    for size, (f_in, f_out) in zip((32, 16, 8), ((16, 64), (64, 128), (128, 256)), strict=True):
        for unit in range(2):
            layers += [(size, size, 1, cin, f_in), (size, size, 3, f_in, f_in), (size, size, 1, f_in, f_out)]
            if unit == 0:
                layers.append((size, size, 1, cin, f_out))      # projection shortcut
            cin = f_out
    return layers


@pytest.fixture(scope="module")
def resnet20():
    return zoo.build("resnet20v2")


def test_resnet20v2_size_matches_the_keras_architecture(resnet20):
    macs, weights = _conv_table_macs(_resnet20v2_convs())
    stats = zoo.model_stats(resnet20)
    assert stats.macs_by_op["Conv"] == macs == 66_240_512
    assert stats.macs == macs + 256 * 10
    conv_biases = sum(co for *_, co in _resnet20v2_convs())
    # BN (4 values per channel): the stem's, then in each unit one before each conv (on the unit's
    # input, then twice on f_in channels) except the very first unit's input, and a final one
    bn_channels = 16 + 256
    cin = 16
    for f_in, f_out in ((16, 64), (64, 128), (128, 256)):
        for unit in range(2):
            bn_channels += (0 if (f_in, unit) == (16, 0) else cin) + 2 * f_in
            cin = f_out
    assert bn_channels == 1744
    # dense 256 x 10 + 10
    assert stats.parameters == weights + conv_biases + 4 * bn_channels + 2570
    assert stats.inputs == {"x:0": (1, 3, 32, 32)} and stats.outputs == {"Identity:0": (1, 10)}


def test_resnet20v2_activations_classes_and_determinism(resnet20):
    samples = zoo.example_input_set(resnet20, 30, seed=21)
    assert max(_max_activation(resnet20, f) for f in samples[:4]) < 64
    sess = _session(resnet20)
    classes = [int(np.argmax(sess.run(None, f)[0])) for f in samples]
    assert len(set(classes)) >= 5, classes
    assert zoo.build("resnet20v2").SerializeToString() == resnet20.SerializeToString()


def test_resnet20v2_nhwc_variant_is_the_same_network(resnet20):
    nhwc = zoo.build("resnet20v2", input_layout="NHWC")
    x = zoo.example_inputs(resnet20, seed=4)["x:0"]
    want = _session(resnet20).run(None, {"x:0": x})[0]
    got = _session(nhwc).run(None, {"x:0": x.transpose(0, 2, 3, 1)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_resnet20v2_matches_tensils_constant_footprint():
    """Tensil's own compile of its ResNet-20 v2 for a 32x32 array holds 18803 vectors of constants.
    Our network's conv and dense weights, laid out as Tensil does (a bias vector, then one row per
    padded input channel for each kernel position), take 18760: the same layers, plus a few dozen
    vectors of batch-norm constants in Tensil's file."""
    import json
    import math

    from onnx import numpy_helper

    from tests.conftest import RESNET20

    model = zoo.build("resnet20v2", unit_scale=False)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    n = 32
    vectors = 0
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            w = inits[node.input[1]]
            co, ci = w.shape[:2]
            k = w.shape[2] * w.shape[3] if w.ndim == 4 else 1
            vectors += math.ceil(co / n) + k * math.ceil(ci / n) * n * math.ceil(co / n)
    tensil = json.loads((RESNET20 / "baseline" / "resnet20v2_cifar_onnx_zcu104.tmodel").read_text())
    assert vectors == 18760
    assert 0 <= tensil["consts"][0]["size"] - vectors <= 2 * 256 // n * 8


# ------------------------------------------------------------------------------------- ResNet-50 v2
@pytest.mark.slow(seconds=26)
def test_resnet50v2_matches_keras_and_is_sane():
    model = zoo.build("resnet50v2")
    stats = zoo.model_stats(model)
    # keras.applications.ResNet50V2().count_params() == 25,613,800 (weights, biases, BN statistics)
    assert stats.parameters == 25_613_800
    layers = [(112, 112, 7, 3, 64)]
    size, cin = 56, 64
    for filters, blocks, stride in ((64, 3, 2), (128, 4, 2), (256, 6, 2), (512, 3, 1)):
        for i in range(1, blocks + 1):
            s = stride if i == blocks else 1
            out = size // s
            if i == 1:
                layers.append((size, size, 1, cin, 4 * filters))
            layers += [(size, size, 1, cin, filters), (out, out, 3, filters, filters),
                       (out, out, 1, filters, 4 * filters)]
            size, cin = out, 4 * filters
    assert stats.macs == _conv_table_macs(layers)[0] + 2048 * 1000
    assert stats.outputs == {"predictions": (1, 1000)}
    samples = zoo.example_input_set(model, 6, seed=50)
    assert _max_activation(model, samples[0]) < 64
    sess = _session(model)
    classes = {int(np.argmax(sess.run(None, f)[0])) for f in samples}
    assert len(classes) >= 3
    assert zoo.build("resnet50v2").SerializeToString() == model.SerializeToString()


# ------------------------------------------------------------------------------------- YOLOv4-tiny
def test_yolov4_tiny_structure_size_and_range():
    model = zoo.build("yolov4_tiny")
    stats = zoo.model_stats(model)
    assert stats.outputs == {"model/conv2d_17/BiasAdd:0": (1, 255, 6, 6),
                             "model/conv2d_20/BiasAdd:0": (1, 255, 12, 12)}
    # yolov4-tiny.cfg at 192x192: (H_out, W_out, k, C_in, C_out); BN on all but the two heads
    bn_layers = [(96, 96, 3, 3, 32), (48, 48, 3, 32, 64)]
    size = 48
    for f in (64, 128, 256):
        bn_layers += [(size, size, 3, f, f), (size, size, 3, f // 2, f // 2),
                      (size, size, 3, f // 2, f // 2), (size, size, 1, f, f)]
        size //= 2
    bn_layers += [(6, 6, 3, 512, 512), (6, 6, 1, 512, 256), (6, 6, 3, 256, 512), (6, 6, 1, 256, 128),
                  (12, 12, 3, 384, 256)]
    heads = [(6, 6, 1, 512, 255), (12, 12, 1, 256, 255)]
    macs, weights = _conv_table_macs(bn_layers + heads)
    assert stats.macs == macs
    assert stats.parameters == weights + 4 * sum(co for *_, co in bn_layers) + 2 * 255
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["Conv"] == 21 and ops["LeakyRelu"] == 19 and ops["Split"] == 3 and ops["MaxPool"] == 3
    assert ops["Resize"] == 1 and ops["Concat"] == 7
    for node in model.graph.node:
        if node.op_type == "Split":      # the first half of every route split is left unused
            used = {t for n in model.graph.node for t in n.input}
            assert node.output[0] not in used and node.output[1] in used
    assert _max_activation(model, zoo.example_inputs(model, seed=1)) < 64


def test_mobilenetv2_block_structure():
    model = zoo.build("mobilenetv2_block")
    ops = Counter(n.op_type for n in model.graph.node)
    depthwise = [n for n in model.graph.node if n.op_type == "Conv"
                 and any(a.name == "group" and a.i > 1 for a in n.attribute)]
    assert len(depthwise) == 5
    strides = [helper.get_attribute_value(next(a for a in n.attribute if a.name == "strides"))[0] for n in depthwise]
    assert strides == [1, 2, 1, 2, 1]
    assert ops["Add"] == 2                        # residuals where stride 1 and channels match
    for n in model.graph.node:
        if n.op_type == "Clip":
            from onnx import numpy_helper
            inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
            assert float(inits[n.input[1]]) == 0.0 and float(inits[n.input[2]]) == 6.0
    assert _max_activation(model, zoo.example_inputs(model, seed=2)) < 64


# ------------------------------------------------------------------------------------- digits
def test_digits_cnn_accuracy_on_heldout_data():
    result = zoo.build_digits_cnn()
    sess = _session(result.model)
    predicted = np.array([np.argmax(sess.run(None, {"digits": x[None]})[0]) for x in result.heldout_x])
    accuracy = float((predicted == result.heldout_y).mean())
    assert len(result.heldout_y) == 360
    assert accuracy >= 0.95
    assert accuracy == pytest.approx(result.heldout_accuracy, abs=1 / 360)
    np.testing.assert_array_equal(result.heldout_y, zoo.digits_split().heldout_y)
    # FP16BP8-friendly: weights well inside +-128 and activations too
    from onnx import numpy_helper
    assert max(float(np.abs(numpy_helper.to_array(t)).max()) for t in result.model.graph.initializer) < 16
    assert _max_activation(result.model, {"digits": result.heldout_x[:1]}) < 64


@pytest.mark.slow(seconds=10)
def test_digits_training_is_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLIX_CACHE", str(tmp_path))
    first = zoo.build_digits_cnn(cache=True)          # trains and fills the cache
    assert len(list(tmp_path.glob("digits_cnn-*.npz"))) == 1
    second = zoo.build_digits_cnn(cache=False)        # trains again from scratch
    assert first.model.SerializeToString() == second.model.SerializeToString()
    third = zoo.build_digits_cnn(cache=True)          # from the cache
    assert third.model.SerializeToString() == first.model.SerializeToString()


# ------------------------------------------------------------------------------------- speech
def test_real_speech_model_runs_on_the_shared_input():
    model = onnx.load(str(SPEECH / "speech_commands.onnx"))
    vectors = np.loadtxt(SPEECH / "speech_commands_input_1x8.csv", delimiter=",", dtype=np.float32)
    assert vectors.shape == (124 * 129, 8) and not vectors[:, 1:].any()
    x = vectors[:, 0].reshape(1, 1, 124, 129)
    logits = _session(model).run(None, {"input_1": x})[0]
    assert logits.shape == (1, 12)
    assert int(np.argmax(logits)) == 3                  # what Tensil's program picks as well
    assert zoo.model_stats(model).macs == 27_863_680


# ------------------------------------------------------------------------------------- scripts
def _script(*args, env=None):
    return subprocess.run([sys.executable, str(PROJECT / "scripts" / args[0]), *args[1:]], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=600)


def test_build_models_script_writes_named_models(tmp_path):
    done = _script("build_models.py", "-o", str(tmp_path), "mlp", "ops/pad_edge", "--opset", "11")
    assert done.returncode == 0, done.stderr
    for name in ("mlp", "ops/pad_edge"):
        model = onnx.load(str(tmp_path / f"{name}.onnx"))
        assert model.opset_import[0].version == 11
        assert model.SerializeToString() == zoo.build(name, opset=11).SerializeToString()
    assert "4,316" in done.stdout                       # the MLP's MACs in the table


def test_build_models_script_rejects_unknown_names_without_writing(tmp_path):
    done = _script("build_models.py", "-o", str(tmp_path / "out"), "mlp", "resnet21")
    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown model 'resnet21'")
    assert not (tmp_path / "out").exists()


def test_train_digits_script(tmp_path):
    done = _script("train_digits_cnn.py", "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "digits_heldout.npz") as f:
        x, y = f["x"], f["y"]
    sess = _session(onnx.load(str(tmp_path / "digits_cnn.onnx")))
    accuracy = float(np.mean([np.argmax(sess.run(None, {"digits": xi[None]})[0]) == yi for xi, yi in zip(x, y)]))
    assert accuracy >= 0.95
    assert f"{accuracy:.4f}" in done.stdout
