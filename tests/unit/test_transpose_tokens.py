"""Token tensors with their token and channel axes swapped (MLP-Mixer's token mixing) laid out by
the Tandem unit's permute engine for a MatMul with a constant (``ultra96v2_tandem``).

The layout is exact (a permutation), so: a Transpose then a MatMul by the identity gives the
input transposed bit for bit (NumPy); the mixer graph is within a bound derived from the
accelerator's own first product ``a'`` (the same model ending at it, measured): ``t' = a'^T`` exactly,
``b = t' W2`` rounds each of its ``K`` products and its weights to within half an LSB
(``|db| <= (sum |t'| + K + 1) / 2`` LSB, the last half for a gain's shift back), the last Transpose exact.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from systolix.arch import get_architecture
from systolix.cli import main
from systolix.compiler import compile_model
from systolix.errors import SystolixError

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

TANDEM = "ultra96v2_tandem"
HALF_LSB = 2.0 ** -9


def model(nodes, inits, x_shape, y_shape, outputs=("y",)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def mixer(T: int, D: int, seed: int = 0, outputs=("y",)) -> tuple[onnx.ModelProto, np.ndarray]:
    """x [1, T, D] -> MatMul W1 -> Transpose -> MatMul W2 (token mixing) -> Transpose -> y; and W2."""
    rng = np.random.default_rng(seed)
    w1, w2 = rng.normal(0, 1 / np.sqrt(D), (D, D)), rng.normal(0, 1 / np.sqrt(T), (T, T))
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"], name="channels"),
             helper.make_node("Transpose", ["a"], ["t"], name="to_tokens", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "W2"], ["b"], name="tokens"),
             helper.make_node("Transpose", ["b"], ["y"], name="back", perm=[0, 2, 1])]
    return model(nodes, {"W1": w1, "W2": w2}, (1, T, D), (1, T, D), outputs), w2.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("T, D", [(32, 64), (20, 64), (32, 40), (20, 24)])
def test_token_mixing_matches_onnxruntime(T, D):
    m, w2 = mixer(T, D, seed=T + D)
    compiled = compile_model(m, TANDEM, host=False)
    assert any(r.ops == ["Transpose"] for r in compiled.summary.layers)  # the permute engine's layer
    first = compile_model(onnx.utils.Extractor(m).extract_model(["x"], ["a"]), TANDEM, host=False)
    x = np.random.default_rng(T).normal(0, 1, (1, T, D)).astype(np.float32)
    y = np.asarray(compiled.run({"x": x})["y"], np.float64)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    t = np.asarray(first.run({"x": x})["a"], np.float64)[0].T  # [D, T]: a' transposed
    b = t @ w2
    bound = np.abs(b.T - ref[0]) + HALF_LSB * (np.abs(t).sum(axis=1) + T + 1)[None, :]
    assert np.all(np.abs(y[0] - ref[0]) <= bound), float(np.max(np.abs(y[0] - ref[0]) - bound))


@pytest.mark.parametrize("shape", [(1, 20, 24), (1, 16, 48), (40, 17)])
def test_transpose_then_identity_is_exact(shape):
    """The graph input (pixel-major in DRAM0; [M, K] by a Reshape) transposed then multiplied by the identity: the input
    transposed bit for bit, padding of both axes included (20 and 24, 17 and 40 tokens/channels)."""
    perm = [0, 2, 1] if len(shape) == 3 else [1, 0]
    M = shape[-2]
    nodes = [helper.make_node("Transpose", ["x2"], ["t"], name="swap", perm=perm), helper.make_node("MatMul", ["t", "I"], ["y"], name="eye")]
    inits = {"I": np.eye(M), "shape": np.zeros(len(shape))}
    m = model([helper.make_node("Reshape", ["x", "shape"], ["x2"], name="as_2d")] + nodes, inits, (1,) + shape[-2:], None)
    m.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array(shape, np.int64), "shape"))
    compiled = compile_model(m, TANDEM, host=False)
    assert [r.ops for r in compiled.summary.layers] == [["Transpose"], ["MatMul"]]
    x = (np.random.default_rng(1).integers(-600, 600, (1,) + shape[-2:]) / 256).astype(np.float32)
    y = np.asarray(compiled.run({"x": x})["y"])
    assert np.array_equal(y, np.transpose(x.reshape(shape), perm))


def test_bands_when_local_memory_is_small():
    """A local memory of 400 vectors: 80 tokens of 64 channels (5 blocks of 4 tiles, 128 vectors a
    block with the transposed tiles) in several stages."""
    arch = get_architecture(TANDEM).model_copy(update={"local_depth": 400})
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="swap", perm=[0, 2, 1]), helper.make_node("MatMul", ["t", "I"], ["y"], name="eye")]
    m = model(nodes, {"I": np.eye(80)}, (1, 80, 64), None)
    compiled = compile_model(m, arch, host=False, strategy="local-isolated")
    stages = [r.stages for r in compiled.summary.layers if r.ops == ["Transpose"]]
    assert stages and stages[0] > 1
    x = (np.random.default_rng(2).integers(-600, 600, (1, 80, 64)) / 256).astype(np.float32)
    assert np.array_equal(np.asarray(compiled.run({"x": x})["y"]), np.transpose(x, (0, 2, 1)))


def test_without_the_unit_the_product_stays_on_the_host_with_the_reason():
    m, _ = mixer(32, 64)
    compiled = compile_model(m, "ultra96v2")
    assert "tokens" in compiled.summary.host_nodes
    assert "permute engine" in compiled.summary.host_reasons["tokens"]
    with pytest.raises(SystolixError, match="permute engine"):
        compile_model(m, "ultra96v2", host=False)


def test_emulator_and_estimate_count_the_transposed_tiles(tmp_path, capsys):
    """[1, 32, 64] transposed: one TPermute in a two-level loop (its body counted once by the
    emulator), 8 tiles at 2N = 32 unit clocks each, six iterator settings and the loops' clocks
    (the outer loop once, the inner once per channel group)."""
    m, _ = mixer(32, 64)
    compiled = compile_model(m, TANDEM, host=False)
    result = compiled.run_detailed({"x": np.zeros((1, 32, 64), np.float32)}).result
    assert result.instructions == compiled.summary.instructions
    assert {k: result.counts[k] for k in ("TConfig", "TLoop", "TPermute", "TSync")} == {"TConfig": 6, "TLoop": 2, "TPermute": 1, "TSync": 2}
    tmodel = compiled.save(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["estimate", str(tmodel), "--board", "ultra96-v2", "--json"])
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    tandem = json.loads(out.out)["units"]["tandem"]
    assert tandem["busy_cycles"] == 8 * 32 + 6 + 1 + 4


def test_feature_map_read_as_tokens_is_exact():
    """A feature map [1, C, H, W] reshaped to [1, C, HW] (channels become the rows) times the identity."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="flat"), helper.make_node("MatMul", ["r", "I"], ["y"], name="eye")]
    m = model(nodes, {"I": np.eye(36), "shape": np.zeros(3)}, (1, 20, 6, 6), None)
    m.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array([1, 20, 36], np.int64), "shape"))
    compiled = compile_model(m, TANDEM, host=False)
    assert [r.ops for r in compiled.summary.layers] == [["Reshape"], ["MatMul"]]
    x = (np.random.default_rng(3).integers(-600, 600, (1, 20, 6, 6)) / 256).astype(np.float32)
    assert np.array_equal(np.asarray(compiled.run({"x": x})["y"]), x.reshape(1, 20, 36))
