"""The HIR passes that shape layers: batch-norm folding, post-op fusion, dead-layer
elimination. Each test builds the IR before and the IR expected after, and compares them
structurally (``systolix.ir.same``)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from systolix.hir_passes.eliminate_dead_layers import eliminate_dead_layers
from systolix.hir_passes.fold_batch_norms import fold_batch_norms
from systolix.hir_passes.fuse_post_ops import fuse_post_ops
from systolix.ir import same
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram, MaxPoolLayer
from systolix.ir.postops import AddTensor, Clip, Relu
from tests.onnx_builders import conv_bn_relu, ir_of, make_model

N = 8
RNG = np.random.default_rng(0)
W = RNG.normal(size=(4, 3, 3, 3)).astype(np.float32)
B = RNG.normal(size=4).astype(np.float32)
SCALE = RNG.uniform(0.5, 2, 4).astype(np.float32)
SHIFT = RNG.normal(size=4).astype(np.float32)


def acts():
    x = Activation("x", 3, 5, 5, N, order="pixel")
    return x, Activation("c", 4, 5, 5, N), Activation("n", 4, 5, 5, N), Activation("y", 4, 5, 5, N, order="pixel")


def conv(x, out, post=(), name="conv", weights=W, bias=B, open=True):
    return ConvLayer(name, [ConvInput(x, weights=weights)], out, bias, (3, 3), pads=(1, 1, 1, 1), post_ops=list(post),
                     ops=["Conv"], nodes=[name], macs=1, open=open)


def affine(x, out):
    return ConvLayer("bn", [ConvInput(x, diagonal=SCALE.reshape(4, 1, 1))], out, SHIFT, (1, 1), ops=["BatchNormalization"],
                     nodes=["bn"], foldable=True)


def post_op(x, out, op, name="relu"):
    return ConvLayer(name, [ConvInput(x, diagonal=np.ones((x.C, 1, 1), np.float32))], out, np.zeros(x.C, np.float32), (1, 1),
                     post_ops=[op], ops=[name.capitalize()], nodes=[name])


def program(layers, x, y, extra_outputs=()):
    outputs = {"y": y} | {a.name: a for a in extra_outputs}
    return HirProgram("m", N, layers, {"x": x}, outputs, {"x": (1, 3, 5, 5)},
                      {name: (1, a.C, a.H, a.W) for name, a in outputs.items()})


def test_a_batch_norm_folds_into_the_weights_and_bias_before_it():
    x, c, _, y = acts()
    before = program([conv(x, c), affine(c, y)], x, y)
    folded = ConvLayer("conv", [ConvInput(x, weights=W * SCALE[:, None, None, None])], y, B * SCALE + SHIFT, (3, 3),
                       pads=(1, 1, 1, 1), ops=["Conv", "BatchNormalization"], nodes=["conv", "bn"], macs=1)
    assert same(fold_batch_norms(before), program([folded], x, y))
    assert len(before.layers) == 2  # passes build a new IR


def test_a_batch_norm_stays_a_layer_when_folding_would_change_the_function():
    x, c, n, y = acts()
    # After a ReLU (s would pass through it), after a closed layer, and after a tensor read twice.
    for layers, outputs in (
        ([conv(x, c, [Relu()]), affine(c, y)], ()),
        ([conv(x, c, open=False), affine(c, y)], ()),
        ([conv(x, c), affine(c, y)], (c,)),
    ):
        before = program(layers, x, y, outputs)
        assert same(fold_batch_norms(before), before)


def test_post_ops_join_the_layer_before_in_order():
    x, c, n, y = acts()
    before = program([conv(x, c), post_op(c, n, Relu(node="relu")), post_op(n, y, Clip(0.0, 6.0, node="clip"), "clip")], x, y)
    fused = ConvLayer("conv", [ConvInput(x, weights=W)], y, B, (3, 3), pads=(1, 1, 1, 1),
                      post_ops=[Relu(node="relu"), Clip(0.0, 6.0, node="clip")], ops=["Conv", "Relu", "Clip"],
                      nodes=["conv", "relu", "clip"], macs=1)
    assert same(fuse_post_ops(before), program([fused], x, y))


def test_an_add_joins_whichever_operand_is_computed_last():
    x, c, n, y = acts()
    d = Activation("d", 4, 5, 5, N)
    # y = c + d: c's layer runs before d's, so the add joins d's layer (reading c, complete by then).
    before = program([conv(x, c, name="first"), conv(x, d, name="second"), post_op(c, y, AddTensor(d, node="add"), "add")], x, y)
    after = program([conv(x, c, name="first"),
                     ConvLayer("second", [ConvInput(x, weights=W)], y, B, (3, 3), pads=(1, 1, 1, 1), post_ops=[AddTensor(c, node="add")],
                               ops=["Conv", "Add"], nodes=["second", "add"], macs=1)], x, y)
    assert same(fuse_post_ops(before), after)


def test_no_fusion_into_a_model_output_or_a_layer_that_is_closed():
    x, c, _, y = acts()
    for layers, outputs in (([conv(x, c), post_op(c, y, Relu())], (c,)), ([conv(x, c, open=False), post_op(c, y, Relu())], ())):
        before = program(layers, x, y, outputs)
        assert same(fuse_post_ops(before), before)


def test_dead_layers_go_and_live_ones_stay():
    x, c, n, y = acts()
    pool = MaxPoolLayer("unused", c, n, (2, 2), (1, 1))
    before = program([conv(x, c), pool, post_op(c, y, Relu())], x, y)
    assert same(eliminate_dead_layers(before), program([conv(x, c), post_op(c, y, Relu())], x, y))


def test_conv_bn_relu_become_one_layer_with_folded_weights():
    m, p = conv_bn_relu()
    hir = ir_of(m)
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
    hir = ir_of(m)
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
    hir = ir_of(make_model(nodes, [("x", [1, 8, 3, 3])], [("y", None)], {"w1": w1, "w2": w2}))
    assert [layer.ops for layer in hir.layers] == [["Conv"], ["Conv", "Add"]]
    add = hir.layers[1].post_ops[0]
    assert add.kind == "add" and add.tensor is hir.layers[0].output
