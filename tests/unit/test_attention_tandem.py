"""Attention on the accelerator (``ultra96v2_tandem``): ``Q x K^T`` (K's tiles transposed by the
Tandem unit's permute engine), the scale and Softmax on the unit, ``P x V`` (V's vectors as
weight rows), the context back to ``[1, T, D]`` and the out-projection, against onnxruntime.

Error bound, derived stage by stage from the accelerator's own projections ``Q', K', V'``
(the same model ending at them, measured) and the fixed-point arithmetic (``LSB = 2^-8``, every
product on the array rounded to within half an LSB, adds exact):

* scores ``S = Q' K'^T``: ``Dh`` products, ``dS = Dh / 2`` LSB;
* ``z = scale S`` with the scale folded into the unit's ``log2 e`` immediate (rounded to
  ``2^-17``): ``dz = scale dS + 2^-17 / log2(e) range(S)`` (softmax ignores a common shift);
* softmax: its Jacobian ``diag(p) - p p^T`` maps ``dz`` (max norm) to at most ``2 dz`` in the
  L1 norm of a row; the unit adds twice the exp polynomial's relative error (``sum p = 1``) and
  8 wide steps plus the output's rounding per probability (``test_softmax_tandem``), saved times
  ``2^k`` (``PROB_SHIFT``): half an LSB over ``2^k``;
* context ``C = P' V' / 2^k``: ``|dC| <= ||dP||_1 max |V'| + (T / 2) / 2^k`` LSB (``T`` rounded
  products) + half an LSB (the division's rounding).

So ``|C_acc - C_ort| <= |attention(Q', K', V') - C_ort| + dC``: the first term is measured
(NumPy on the accelerator's projections against onnxruntime), the second derived. The
out-projection adds ``D / 2`` LSB (products) + ``sum |C'| / 2`` LSB (its weights' rounding) +
half an LSB (bias), against ``C' Wo + bo`` of the accelerator's own context ``C'``.
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
from systolix.codegen.tandem_softmax import POLY_REL_ERROR
from systolix.compiler import compile_model
from systolix.lowering.ops.attention import PROB_SHIFT
from systolix.models import build

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

TANDEM = "ultra96v2_tandem"
LSB = 2.0 ** -8
HALF_LSB = LSB / 2


def attention_graph(T: int, D: int, H: int, seed: int = 0, prefix: str = "attn") -> onnx.ModelProto:
    """x [1, T, D] -> one attention block as systolix.models.transformers writes it (node outputs
    named after their nodes)."""
    rng = np.random.default_rng(seed)
    dh = D // H
    inits, nodes = [], []

    def const(name, v, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(v, dtype), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x, name):
        y = node("MatMul", [x, const(f"{name}_W", rng.normal(0, np.sqrt(1 / D), (D, D)))], f"{name}_matmul")
        return node("Add", [y, const(f"{name}_B", rng.normal(0, 0.02, D))], f"{name}_add")

    heads = const(f"{prefix}_heads_shape", [1, T, H, dh], np.int64)
    q, k, v = (node("Reshape", [linear("x", f"{prefix}_{p}"), heads], f"{prefix}_{p}_reshape") for p in "qkv")
    q = node("Transpose", [q], f"{prefix}_q_transpose", perm=[0, 2, 1, 3])
    k = node("Transpose", [k], f"{prefix}_k_transpose", perm=[0, 2, 3, 1])
    v = node("Transpose", [v], f"{prefix}_v_transpose", perm=[0, 2, 1, 3])
    s = node("MatMul", [q, k], f"{prefix}_scores")
    s = node("Div", [s, const(f"{prefix}_sqrt_dh", np.sqrt(dh))], f"{prefix}_scale")
    p = node("Softmax", [s], f"{prefix}_softmax", axis=-1)
    o = node("MatMul", [p, v], f"{prefix}_context")
    o = node("Transpose", [o], f"{prefix}_context_transpose", perm=[0, 2, 1, 3])
    o = node("Reshape", [o, const(f"{prefix}_tokens_shape", [1, T, D], np.int64)], f"{prefix}_context_reshape")
    out = linear(o, f"{prefix}_out")
    g = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, T, D])],
                          [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [1, T, D])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def extract(model: onnx.ModelProto, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    return onnx.utils.Extractor(onnx.shape_inference.infer_shapes(model)).extract_model(inputs, outputs)


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def softmax_attention(q, k, v, H):
    """Float attention of [T, D] projections: the context [T, D] and the scores [H, T, T]."""
    T, D = q.shape
    dh = D // H
    ctx, scores = np.zeros((T, D)), []
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        s = q[:, sl] @ k[:, sl].T
        z = s / np.sqrt(dh)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        ctx[:, sl] = (e / e.sum(axis=1, keepdims=True)) @ v[:, sl]
        scores.append(s)
    return ctx, np.stack(scores)


def context_bound(scores: np.ndarray, v: np.ndarray, H: int) -> np.ndarray:
    """The derived bound on the kernels' own error in the context, per [T, D] element."""
    _, T, _ = scores.shape
    D = v.shape[1]
    dh = D // H
    scale = 1 / np.sqrt(dh)
    dS = dh * HALF_LSB
    spread = scores.max(axis=2) - scores.min(axis=2) + 2 * dS  # [H, T]
    dz = scale * dS + 2.0 ** -17 / np.log2(np.e) * spread
    dp_l1 = 2 * dz + 2 * POLY_REL_ERROR + T * (8 * 2.0 ** -16 + HALF_LSB / 2 ** PROB_SHIFT)  # [H, T]
    out = np.zeros((T, D))
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        out[:, sl] = dp_l1[h][:, None] * np.abs(v[:, sl]).max(axis=0)[None, :] + T * HALF_LSB / 2 ** PROB_SHIFT + HALF_LSB
    return out


def check_block(model: onnx.ModelProto, x_name: str, prefix: str, H: int, xs: list[np.ndarray], tmp_path=None,
                arch=TANDEM) -> None:
    """The block from ``x_name`` to ``{prefix}_out_add`` on the accelerator, within the bound."""
    proj = [f"{prefix}_{p}_add" for p in "qkv"]
    ctx_name, out_name = f"{prefix}_context_reshape", f"{prefix}_out_add"
    block = extract(model, [x_name], [out_name])
    # dump_ir: every IR written and verified (compiler/verify.py) after every pass.
    full = compile_model(block, arch, host=False, dump_ir=tmp_path)
    assert full.summary.host_nodes == []
    projections = compile_model(extract(model, [x_name], proj), arch, host=False)
    context = compile_model(extract(model, [x_name], [ctx_name]), arch, host=False)
    w = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == f"{prefix}_out_W")).astype(np.float64)
    b = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == f"{prefix}_out_B")).astype(np.float64)
    ort_ctx = extract(model, [x_name], [ctx_name, out_name])
    for x in xs:
        T, D = x.shape[1:]
        c_ort, out_ort = (r.reshape(T, D) for r in ort_run(ort_ctx, {x_name: x}))
        pr = projections.run({x_name: x})
        q, k, v = (np.asarray(pr[n], np.float64).reshape(T, D) for n in proj)
        c_np, scores = softmax_attention(q, k, v, H)
        c_acc = np.asarray(context.run({x_name: x})[ctx_name], np.float64).reshape(T, D)
        bound = np.abs(c_np - c_ort) + context_bound(scores, v, H)
        assert np.all(np.abs(c_acc - c_ort) <= bound), float(np.max(np.abs(c_acc - c_ort) - bound))
        out_acc = np.asarray(full.run({x_name: x})[out_name], np.float64).reshape(T, D)
        out_np = c_acc @ w + b
        out_bound = np.abs(out_np - out_ort) + D * HALF_LSB + HALF_LSB * np.abs(c_acc).sum(axis=1, keepdims=True) + HALF_LSB
        assert np.all(np.abs(out_acc - out_ort) <= out_bound), float(np.max(np.abs(out_acc - out_ort) - out_bound))


@pytest.mark.parametrize("T, D, H", [(20, 32, 2), (24, 64, 2)])  # keys padding the last group; heads of two vectors
def test_attention_block_on_the_accelerator_matches_onnxruntime(T, D, H, tmp_path):
    model = attention_graph(T, D, H, seed=T)
    rng = np.random.default_rng(T + 1)
    check_block(model, "x", "attn", H, [rng.normal(0, 1, (1, T, D)).astype(np.float32)], tmp_path)


def test_query_tokens_in_bands_when_the_accumulators_are_small():
    # 64 accumulators: the scores' tile (3 key groups x 40 tokens) is cut into bands of 18 tokens.
    arch = get_architecture(TANDEM).model_copy(update={"accumulator_depth": 64})
    model = attention_graph(40, 32, 2, seed=3)
    assert [l.stages for l in compile_model(model, arch, host=False).summary.layers if l.name == "attn_scores"] == [3]
    rng = np.random.default_rng(5)
    check_block(model, "x", "attn", 2, [rng.normal(0, 1, (1, 40, 32)).astype(np.float32)], arch=arch)


def test_bert_tiny_attention_block_matches_onnxruntime():
    model = build("bert_tiny")
    rng = np.random.default_rng(4)
    # The block reads the embedding LayerNorm's output: unit scale per token.
    check_block(model, "embedding_ln", "block0_attn", 4, [rng.normal(0, 1, (1, 32, 64)).astype(np.float32)])


def test_vit_tiny_attention_leaves_the_host_table():
    compiled = compile_model(build("vit_tiny"), TANDEM)
    ops = {n.op_type for n in build("vit_tiny").graph.node if n.name in compiled.summary.host_nodes}
    assert not ops & {"MatMul", "Softmax", "Div", "Transpose", "Reshape"}, compiled.summary.host_reasons


def test_head_size_not_a_multiple_of_the_lanes_goes_to_the_host_with_the_reason():
    compiled = compile_model(attention_graph(16, 24, 2), TANDEM)  # Dh = 12 on 16 lanes
    assert "attn_scores" in compiled.summary.host_nodes
    assert "multiple of the array's 16 lanes" in compiled.summary.host_reasons["attn_scores"]
    x = np.random.default_rng(0).normal(0, 1, (1, 16, 24)).astype(np.float32)
    ref = ort_run(attention_graph(16, 24, 2), {"x": x})[0]
    assert np.abs(np.asarray(compiled.run({"x": x})["attn_out_add"]) - ref).max() < 0.1


def test_without_the_unit_the_scores_stay_on_the_host():
    compiled = compile_model(attention_graph(16, 16, 1), "ultra96v2")
    assert {"attn_scores", "attn_softmax"} <= set(compiled.summary.host_nodes)
    assert "permute engine" in compiled.summary.host_reasons["attn_scores"]


def test_estimate_counts_the_transposes_and_softmax(tmp_path, capsys):
    compiled = compile_model(attention_graph(16, 16, 1), TANDEM, host=False)
    tmodel = compiled.save(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["estimate", str(tmodel), "--board", "ultra96-v2", "--json"])
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    tandem = json.loads(out.out)["units"]["tandem"]
    # One 16x16 tile transposed (2N = 32 clocks) and the softmax's exp loop over 16 tokens (14 a token).
    assert tandem["busy_cycles"] >= 32 + 16 * 14


@pytest.mark.parametrize("arch", ["ultra96v2", TANDEM])
def test_product_of_two_computed_token_tensors_needs_no_unit(arch):
    """``[1, M, K] x [1, K, O]``, both computed: the right operand's pixels are the weight rows
    (K = 20: a partial block), no Tandem instruction; within the products' roundings of NumPy's
    product of the accelerator's own operands (K products, half an LSB each)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu_a"), helper.make_node("Relu", ["y"], ["b"], name="relu_b"),
             helper.make_node("MatMul", ["a", "b"], ["z"], name="product")]
    g = helper.make_graph(nodes, "product", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 6, 20]),
                                             helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 20, 24])],
                          [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [1, 6, 24])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    compiled = compile_model(m, arch, host=False)
    rng = np.random.default_rng(9)
    x, y = rng.normal(0, 1, (1, 6, 20)).astype(np.float32), rng.normal(0, 1, (1, 20, 24)).astype(np.float32)
    # Relu of FP16BP8 inputs: the operands as the accelerator holds them (inputs rounded half up).
    a, b = (np.maximum(np.floor(v.astype(np.float64) * 256 + 0.5) / 256, 0) for v in (x, y))
    z = np.asarray(compiled.run({"x": x, "y": y})["z"], np.float64)
    assert np.abs(z - a @ b).max() <= 20 * HALF_LSB
    ref = ort_run(m, {"x": x, "y": y})[0]
    assert np.all(np.abs(z - ref) <= np.abs(a @ b - ref) + 20 * HALF_LSB)


def test_every_strategy_computes_the_same():
    """The mask from the constants in local memory (local-consts) or DRAM1, the operands from DRAM0
    either way: bit for bit the same outputs."""
    model = attention_graph(20, 32, 2, seed=20)
    x = np.random.default_rng(1).normal(0, 1, (1, 20, 32)).astype(np.float32)
    outs = [np.asarray(compile_model(model, TANDEM, host=False, strategy=s).run({"x": x})["attn_out_add"])
            for s in ("local-isolated", "local-vars-and-consts")]
    np.testing.assert_array_equal(outs[0], outs[1])


def test_probabilities_read_elsewhere_are_saved_unscaled():
    """The Softmax's output also a model output: saved as probabilities (no 2^k for the context),
    each within half an LSB + half the scores' error (``dz / 2``: the Jacobian's max-norm bound) +
    the unit's arithmetic of NumPy's softmax on the accelerator's own projections."""
    model = attention_graph(16, 32, 2, seed=6)
    model.graph.output.append(helper.make_tensor_value_info("attn_softmax", onnx.TensorProto.FLOAT, [1, 2, 16, 16]))
    compiled = compile_model(model, TANDEM, host=False)
    projections = compile_model(extract(model, ["x"], [f"attn_{p}_add" for p in "qkv"]), TANDEM, host=False)
    x = np.random.default_rng(6).normal(0, 1, (1, 16, 32)).astype(np.float32)
    p_acc = np.asarray(compiled.run({"x": x})["attn_softmax"], np.float64).reshape(2, 16, 16)
    pr = projections.run({"x": x})
    q, k, v = (np.asarray(pr[f"attn_{p}_add"], np.float64).reshape(16, 32) for p in "qkv")
    _, scores = softmax_attention(q, k, v, 2)
    z = scores / 4
    p_np = np.exp(z - z.max(axis=2, keepdims=True))
    p_np /= p_np.sum(axis=2, keepdims=True)
    dz = 16 * HALF_LSB / 4 + 2.0 ** -17 / np.log2(np.e) * (np.ptp(scores, axis=2, keepdims=True) + 16 * LSB)
    assert np.all(np.abs(p_acc - p_np) <= HALF_LSB + dz / 2 + 2 * POLY_REL_ERROR + 8 * 2.0 ** -16)
