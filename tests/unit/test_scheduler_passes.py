"""Scheduler passes: IR before, the IR expected after (lowering, roll-up, memory planning)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.arch import ARCHITECTURES
from systolix.frontend import to_graph
from systolix.isa import DataFlow, DataMove, LoadWeights, MatMul
from systolix.scheduler import ConvLayer, MaxPoolLayer, SchedulingError, lower, roll_up, schedule
from tests.onnx_builders import conv_bn_relu, make_model

N = 8


def test_conv_bn_relu_fuse_into_one_layer_with_folded_weights():
    m, p = conv_bn_relu()
    hir = lower(to_graph(m), N)
    assert len(hir.layers) == 1
    layer = hir.layers[0]
    assert isinstance(layer, ConvLayer) and layer.ops == ["Conv", "BatchNormalization", "Relu"]
    s = p["scale"] / np.sqrt(p["var"] + 1e-3)
    np.testing.assert_allclose(layer.inputs[0].dense(), p["w"] * s[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(layer.bias, (p["b"] - p["mean"]) * s + p["beta"], rtol=1e-5, atol=1e-6)
    assert [q.kind for q in layer.post_ops] == ["relu"]
    assert layer.pads == (1, 1, 1, 1) and layer.output.name == "y"


def test_no_fusion_across_a_model_output():
    m, _ = conv_bn_relu(graph_output_conv=True)
    hir = lower(to_graph(m), N)
    assert [layer.ops for layer in hir.layers] == [["Conv"], ["BatchNormalization", "Relu"]]
    assert set(hir.outputs) == {"y", "c"}


def test_residual_add_joins_the_later_layer():
    rng = np.random.default_rng(1)
    w1, w2 = rng.normal(size=(8, 8, 1, 1)).astype(np.float32), rng.normal(size=(8, 8, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", kernel_shape=[1, 1]),
        helper.make_node("Conv", ["x", "w2"], ["b"], name="c2", kernel_shape=[1, 1]),
        helper.make_node("Add", ["a", "b"], ["y"], name="add"),
    ]
    hir = lower(to_graph(make_model(nodes, [("x", [1, 8, 3, 3])], [("y", None)], {"w1": w1, "w2": w2})), N)
    assert [layer.ops for layer in hir.layers] == [["Conv"], ["Conv", "Add"]]
    add = hir.layers[1].post_ops[0]
    assert add.kind == "add" and add.tensor is hir.layers[0].output


def test_aligned_concat_is_a_relabelling_and_unaligned_a_selection_matmul():
    rng = np.random.default_rng(2)
    for cin_a, expect_layers in ((16, 2), (5, 3)):
        wa = rng.normal(size=(cin_a, 3, 1, 1)).astype(np.float32)
        wb = rng.normal(size=(8, 3, 1, 1)).astype(np.float32)
        nodes = [
            helper.make_node("Conv", ["x", "wa"], ["a"], kernel_shape=[1, 1]),
            helper.make_node("Conv", ["x", "wb"], ["b"], kernel_shape=[1, 1]),
            helper.make_node("Concat", ["a", "b"], ["y"], axis=1),
        ]
        hir = lower(to_graph(make_model(nodes, [("x", [1, 3, 4, 4])], [("y", None)], {"wa": wa, "wb": wb})), N)
        assert len(hir.layers) == expect_layers
        if expect_layers == 2:
            out = hir.outputs["y"]
            assert hir.layers[0].output.parent == (out, 0) and hir.layers[1].output.parent == (out, cin_a // N)
        else:
            sel = hir.layers[2]
            assert sel.ops == ["Concat"]
            w = sel.inputs[1].dense()[:, :, 0, 0]
            np.testing.assert_array_equal(w, np.eye(cin_a + 8, 8, -cin_a))


def test_flatten_then_gemm_permutes_the_weight_rows():
    rng = np.random.default_rng(3)
    b = rng.normal(size=(3 * 2 * 4, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Flatten", ["t"], ["f"]),
        helper.make_node("MatMul", ["f", "b"], ["y"]),
    ]
    hir = lower(to_graph(make_model(nodes, [("x", [1, 3, 2, 4])], [("y", None)], {"b": b})), N)
    gemm = hir.layers[-1]
    assert gemm.kernel == (2, 4)
    dense = gemm.inputs[0].dense()  # [out, c, h, w]
    for c in range(3):
        for h in range(2):
            for w in range(4):
                np.testing.assert_array_equal(dense[:, c, h, w], b[(h * 4 + w) * 3 + c])


def test_maxpool_and_remap_layers():
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Pad", ["p", "pads"], ["y"], mode="reflect"),
    ]
    pads = np.array([0, 0, 1, 2, 0, 0, 1, 2], np.int64)
    hir = lower(to_graph(make_model(nodes, [("x", [1, 3, 6, 8])], [("y", None)], {"pads": pads})), N)
    assert isinstance(hir.layers[0], MaxPoolLayer)
    src = hir.layers[1].source
    assert src.shape == (5, 8, 2)
    np.testing.assert_array_equal(src[:, 0, 0], [1, 0, 1, 2, 1])       # reflect rows of a 3-row map
    np.testing.assert_array_equal(src[0, :, 1], [2, 1, 0, 1, 2, 3, 2, 1])  # reflect columns of 4


def test_roll_up_merges_continuing_runs_only():
    before = [
        MatMul(10, 0, 0), MatMul(11, 1, 0), MatMul(12, 2, 1),            # 1 + 1 + 2 consecutive vectors
        MatMul(20, 8, 0, accumulate=False),                               # other flags: kept apart
        DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 100, 3), DataMove(DataFlow.LOCAL_TO_DRAM0, 4, 104, 3),
        DataMove(DataFlow.LOCAL_TO_DRAM0, 8, 200, 0), DataMove(DataFlow.LOCAL_TO_DRAM0, 10, 203, 0),  # stride 3: no
        LoadWeights(0, 7), LoadWeights(0, 0, zeroes=True),
        MatMul(0, 0, 0), MatMul(2, 1, 0), MatMul(4, 2, 0),                # local stride 2 discovered
    ]
    after = roll_up(before, max_count=1 << 13, max_stride0=128, max_stride1=128)
    assert after == [
        MatMul(10, 0, 3),
        MatMul(20, 8, 0, accumulate=False),
        DataMove(DataFlow.LOCAL_TO_DRAM0, 0, 100, 7),
        DataMove(DataFlow.LOCAL_TO_DRAM0, 8, 200, 0), DataMove(DataFlow.LOCAL_TO_DRAM0, 10, 203, 0),
        LoadWeights(0, 7), LoadWeights(0, 0, zeroes=True),
        MatMul(0, 0, 2, local_stride=2),
    ]
    assert roll_up([MatMul(0, 0, 3), MatMul(4, 4, 3)], max_count=6, max_stride0=128, max_stride1=128) == [MatMul(0, 0, 3), MatMul(4, 4, 3)]


def test_weights_in_dram1_are_the_rounded_weights_block_by_block():
    rng = np.random.default_rng(4)
    w = rng.normal(0, 0.5, (10, 3, 1, 1)).astype(np.float32)
    b = rng.normal(0, 0.5, 10).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1])], [("x", [1, 3, 2, 2])], [("y", None)], {"w": w, "b": b})
    lir = schedule(lower(to_graph(m), N), ARCHITECTURES["pynqz1"])
    q = lambda a: np.clip(np.floor(np.asarray(a, np.float64) * 256 + 0.5), -32768, 32767)  # noqa: E731
    # Output group 0: bias vector then 8 rows (input lanes) of output lanes 0..7; group 1 likewise.
    expect = []
    for go in range(2):
        lanes = slice(go * 8, go * 8 + 8)
        bias = np.zeros(8)
        bias[: len(b[lanes])] = q(b[lanes])
        rows = np.zeros((8, 8))
        rows[:3, : len(b[lanes])] = q(w[lanes, :, 0, 0]).T
        expect += [bias[None], rows]
    np.testing.assert_array_equal(lir.consts, np.concatenate(expect))


def test_pooling_taps_share_one_weight_block_loaded_once():
    # Before: a 4x4 GlobalAveragePool is a diagonal conv with 16 taps, all the same block
    # (2^-shift on the diagonal). After scheduling: the block is stored once in DRAM1 and loaded
    # into the array once; the 16 MatMuls reuse it (the array keeps its weights until the next
    # LoadWeights).
    m = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", [1, 8, 4, 4])], [("y", None)], {})
    hir = lower(to_graph(m), N)
    layer = hir.layers[0]
    assert isinstance(layer, ConvLayer) and layer.kernel == (4, 4)
    lir = schedule(hir, ARCHITECTURES["pynqz1"])
    shift = 2  # floor(log2(16)) - 2: the running sum stays in range
    # zero bias, one block, then the two SIMD multipliers (x 4/16 * 2^2, then x 2^-2)
    assert lir.consts.shape[0] == 1 + N + 2
    np.testing.assert_array_equal(lir.consts[0], np.zeros(N))
    np.testing.assert_array_equal(lir.consts[1:1 + N], np.diag(np.full(N, 256 >> shift)))
    np.testing.assert_array_equal(lir.consts[1 + N:], [np.full(N, 256), np.full(N, 64)])
    loads = [i for i in lir.instructions if isinstance(i, LoadWeights) and not i.zeroes]
    assert len(loads) == 2  # the bias row and the one block
    matmuls = [i for i in lir.instructions if isinstance(i, MatMul) and not i.zeroes]
    assert len(matmuls) == 16 and all(i.accumulate for i in matmuls)


def test_activations_share_dram0_once_dead():
    rng = np.random.default_rng(5)
    inits = {f"w{i}": rng.normal(size=(8, 8, 1, 1)).astype(np.float32) for i in range(4)}
    nodes = [helper.make_node("Conv", [f"t{i}", f"w{i}"], [f"t{i + 1}"], kernel_shape=[1, 1]) for i in range(4)]
    m = make_model(nodes, [("t0", [1, 8, 16, 16])], [("t4", None)], inits)
    hir = lower(to_graph(m), N)
    lir = schedule(hir, ARCHITECTURES["pynqz1"])
    # Five 256-vector tensors; at most three are alive at once (input, one in flight, output kept).
    assert lir.dram0_vectors <= 3 * 256
    bases = [layer.output.base for layer in hir.layers]
    assert len(set(bases)) < len(bases)


def test_a_layer_too_big_for_local_memory_names_itself():
    arch = ARCHITECTURES["pynqz1"].model_copy(update={"local_depth": 64, "accumulator_depth": 64})
    rng = np.random.default_rng(6)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="wide", kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                   [("x", [1, 16, 8, 40])], [("y", None)], {"w": rng.normal(size=(8, 16, 3, 3)).astype(np.float32)})
    with pytest.raises(SchedulingError, match="layer 'wide' needs .* vectors of local memory for one output row"):
        schedule(lower(to_graph(m), N), arch)


def test_constants_that_do_not_fit_dram1():
    arch = ARCHITECTURES["pynqz1"].model_copy(update={"dram1_depth": 16})
    m, _ = conv_bn_relu()
    with pytest.raises(SchedulingError, match=r"constants need \d+ vectors of DRAM1 but the architecture has 16"):
        schedule(lower(to_graph(m), N), arch)


def test_a_global_pool_too_large_for_one_pass_averages_rows_then_columns():
    """2,688 values would need weights of 2^-9, below FP16BP8's step: two passes of 2^-3."""
    from systolix.numerics import DataType
    from systolix.scheduler import Unsupported

    gap = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], [("x", [1, 3, 48, 56])], [("y", None)])
    hir = lower(to_graph(gap), 8)
    rows, cols = hir.layers
    assert (rows.name, rows.kernel, rows.output.H, rows.output.W) == ("gap/rows", (1, 56), 48, 1)
    assert (cols.name, cols.kernel, cols.inputs[0].act.name) == ("gap", (48, 1), "gap/rows")
    assert np.all(rows.inputs[0].diagonal == 2 ** -3) and np.all(cols.inputs[0].diagonal == 2 ** -3)
    # 56 and 48 values: x 64/56 then x 2^-3, x 64/48 then x 2^-3 (the first multiply keeps 9 bits).
    assert [float(p.values.flat[0]) for p in rows.post_ops] == [np.float32(64 / 56), 0.125]
    assert [float(p.values.flat[0]) for p in cols.post_ops] == [np.float32(64 / 48), 0.125]
    assert len(lower(to_graph(gap), 8, DataType.FLOAT32).layers) == 1  # float: one pass
    # 4,096 values along one axis: no split keeps the weights in range; an error names the node.
    wide = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="wide")], [("x", [1, 3, 1, 4096])], [("y", None)])
    with pytest.raises(Unsupported, match="wide.*1x4096 values: FP16BP8 averages at most 2047 along each axis"):
        lower(to_graph(wide), 8)
