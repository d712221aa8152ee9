"""The lowering: each node becomes layers of its own (the IR expected, built by hand), and the
support table says why the accelerator refuses a node."""

from __future__ import annotations

import numpy as np
from onnx import helper

from systolix.arch import get_architecture
from systolix.ir import same
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram, MaxPoolLayer
from systolix.ir.postops import Relu
from systolix.lowering import NO_IMPLEMENTATION
from systolix.numerics import DataType
from tests.onnx_builders import conv_bn_relu, ir_of, make_model

N = 8


def test_each_node_becomes_its_own_layer():
    m, p = conv_bn_relu()
    x = Activation("x", 5, 7, 6, N, order="pixel")
    c, n = Activation("c", 17, 7, 6, N), Activation("n", 17, 7, 6, N)
    y = Activation("y", 17, 7, 6, N, order="pixel")
    s = (p["scale"].astype(np.float64) / np.sqrt(p["var"].astype(np.float64) + 1e-3))
    t = p["beta"].astype(np.float64) - p["mean"].astype(np.float64) * s
    # The batch norm's output over the data its statistics describe: mean beta, spread
    # scale * sqrt(var / (var + eps)) (estimate_ranges sizes gains from them).
    spread = (p["scale"] * np.sqrt(p["var"].astype(np.float64) / (p["var"] + 1e-3))).astype(np.float32)
    expected = HirProgram("test", N, [
        ConvLayer("conv", [ConvInput(x, weights=p["w"])], c, p["b"], (3, 3), pads=(1, 1, 1, 1), ops=["Conv"], nodes=["conv"],
                  macs=17 * 7 * 6 * 5 * 9),
        ConvLayer("bn", [ConvInput(c, diagonal=s.astype(np.float32).reshape(17, 1, 1))], n, t.astype(np.float32), (1, 1),
                  ops=["BatchNormalization"], nodes=["bn"], foldable=True, statistics=(p["beta"], spread)),
        ConvLayer("relu", [ConvInput(n, diagonal=np.ones((17, 1, 1), np.float32))], y, np.zeros(17, np.float32), (1, 1),
                  post_ops=[Relu(node="relu")], ops=["Relu"], nodes=["relu"]),
    ], {"x": x}, {"y": y}, {"x": (1, 5, 7, 6)}, {"y": (1, 17, 7, 6)})
    got = ir_of(m, until="lower")
    got.name = "test"
    assert same(got, expected), got.text()


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
        hir = ir_of(make_model(nodes, [("x", [1, 3, 4, 4])], [("y", None)], {"wa": wa, "wb": wb}))
        assert len(hir.layers) == expect_layers
        if expect_layers == 2:
            out = hir.outputs["y"]
            assert hir.layers[0].output.parent == (out, 0) and hir.layers[1].output.parent == (out, cin_a // N)
        else:
            sel = hir.layers[2]
            assert sel.ops == ["Concat"] and not sel.open
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
    hir = ir_of(make_model(nodes, [("x", [1, 3, 2, 4])], [("y", None)], {"b": b}))
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
    hir = ir_of(make_model(nodes, [("x", [1, 3, 6, 8])], [("y", None)], {"pads": pads}))
    assert isinstance(hir.layers[0], MaxPoolLayer)
    src = hir.layers[1].source
    assert src.shape == (5, 8, 2)
    np.testing.assert_array_equal(src[:, 0, 0], [1, 0, 1, 2, 1])       # reflect rows of a 3-row map
    np.testing.assert_array_equal(src[0, :, 1], [2, 1, 0, 1, 2, 3, 2, 1])  # reflect columns of 4


def test_a_global_pool_too_large_for_one_pass_averages_rows_then_columns():
    """2,688 values would need weights of 2^-9, below FP16BP8's step: two passes of 2^-3."""
    gap = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], [("x", [1, 3, 48, 56])], [("y", None)])
    hir = ir_of(gap)
    rows, cols = hir.layers
    assert (rows.name, rows.kernel, rows.output.H, rows.output.W) == ("gap/rows", (1, 56), 48, 1)
    assert (cols.name, cols.kernel, cols.inputs[0].act.name) == ("gap", (48, 1), "gap/rows")
    assert np.all(rows.inputs[0].diagonal == 2 ** -3) and np.all(cols.inputs[0].diagonal == 2 ** -3)
    # 56 and 48 values: x 64/56 then x 2^-3, x 64/48 then x 2^-3 (the first multiply keeps 9 bits).
    assert [float(p.values.flat[0]) for p in rows.post_ops] == [np.float32(64 / 56), 0.125]
    assert [float(p.values.flat[0]) for p in cols.post_ops] == [np.float32(64 / 48), 0.125]
    floating = get_architecture("pynqz1").model_copy(update={"data_type": DataType.FLOAT32})
    assert len(ir_of(gap, floating).layers) == 1  # float: one pass
    # 4,096 values along one axis: no split keeps the weights in range; the node goes to the host.
    wide = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="wide")], [("x", [1, 3, 1, 4096])], [("y", None)])
    assert ir_of(wide, until="place on host").host == {0: "an average over 1x4096 values: FP16BP8 averages at most 2047 along each axis"}


def test_the_support_table_gives_each_refused_node_its_reason():
    rng = np.random.default_rng(7)
    w = rng.normal(size=(4, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),                        # runs
        helper.make_node("Gemm", ["r", "w"], ["g"], name="gemm_t", transA=1),          # transA
        helper.make_node("Softmax", ["g"], ["s"], name="softmax", axis=1),             # no implementation
        helper.make_node("MatMul", ["s", "s2"], ["y"], name="both_computed"),         # runs: s2's rows are weight rows
        helper.make_node("Relu", ["x"], ["s2"], name="relu2"),
    ]
    # Reorder so every node's inputs come first: relu2 before the MatMul.
    nodes = nodes[:3] + [nodes[4], nodes[3]]
    m = make_model(nodes, [("x", [4, 4])], [("y", None)], {"w": w})
    graph = ir_of(m, until="place on host")
    assert {graph.nodes[i].name: reason for i, reason in graph.host.items()} == {
        "gemm_t": "transA=1: the accelerator multiplies a computed A by a constant B; export the Gemm with transA=0",
        "softmax": NO_IMPLEMENTATION,
    }


LAID = " (it holds tensors of batch 1: NCHW, [1, M, K], [M, K] or vectors)"


def test_reasons_name_what_to_change():
    """A host node's reason says what in the model stops it, in words a user can act on; an
    option that changes nothing the accelerator computes (MaxPool's storage_order without its
    Indices) stops nothing."""
    nodes = [helper.make_node("Dropout", ["x"], ["d", "mask"], name="drop"),
             helper.make_node("Cast", ["mask"], ["m"], name="cast", to=1),
             helper.make_node("Add", ["d", "m"], ["a"], name="add"),
             helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[2, 2], storage_order=1),
             helper.make_node("Clip", ["p", "lo"], ["y"], name="clip"),
             helper.make_node("ReduceMin", ["p"], ["lo"], name="min", keepdims=0)]
    nodes = nodes[:4] + [nodes[5], nodes[4]]
    m = make_model(nodes, [("x", [1, 3, 6, 6])], [("y", None)], opset=11)
    graph = ir_of(m, until="place on host")
    assert {graph.nodes[i].name: reason for i, reason in graph.host.items()} == {
        "drop": "its mask output is read by another node; the accelerator runs Dropout only as the identity of inference",
        "cast": NO_IMPLEMENTATION,
        "min": NO_IMPLEMENTATION,
        "clip": "its min/max are computed tensors; the accelerator needs them as constants when compiling",
    }


def test_a_view_the_host_needs_in_a_shape_dram0_cannot_hold_goes_to_the_host_too():
    # relu -> reshape to rank 5 -> softmax (host) -> reshape back -> relu: the first reshape's
    # output must leave the accelerator, but no layout holds a rank-5 tensor, so the reshape goes
    # to the host with it; the second reshape's input comes back from the host in that shape.
    shape5 = np.array([1, 2, 4, 4, 4], np.int64)
    shape4 = np.array([1, 8, 4, 4], np.int64)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "s5"], ["r5"], name="to5"),
             helper.make_node("Softmax", ["r5"], ["s"], name="softmax", axis=-1),
             helper.make_node("Reshape", ["s", "s4"], ["b"], name="to4"),
             helper.make_node("Relu", ["b"], ["y"], name="relu2")]
    m = make_model(nodes, [("x", [1, 8, 4, 4])], [("y", None)], {"s5": shape5, "s4": shape4})
    graph = ir_of(m, until="place on host")
    assert {graph.nodes[i].name: reason for i, reason in graph.host.items()} == {
        "to5": "input shape [1, 2, 4, 4, 4] cannot be laid out on the accelerator" + LAID,
        "softmax": NO_IMPLEMENTATION,
        "to4": "input 's' of shape [1, 2, 4, 4, 4] cannot be laid out on the accelerator" + LAID,
    }
    program = ir_of(m, until="partition")
    assert [(s.kind, [graph.nodes[i].name for i in s.nodes]) for s in program.segments] == [
        ("accelerator", ["relu"]), ("host", ["to5", "softmax", "to4"]), ("accelerator", ["relu2"])]
