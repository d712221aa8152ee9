"""The fusion passes that keep data where it is (``fold_pads_into_pools``, ``fuse_strided_pools``,
``fuse_preactivations``, ``subsample_strided_reads``, ``merge_residual_convs``): each test builds
the HIR before and the HIR expected after and compares them structurally (``systolix.ir.same``)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from systolix.hir_passes.fuse_pools import fold_pads_into_pools, fuse_strided_pools
from systolix.hir_passes.fuse_preactivations import fuse_preactivations
from systolix.hir_passes.merge_residual_convs import merge_residual_convs
from systolix.hir_passes.subsample_strided_reads import subsample_strided_reads
from systolix.ir import same
from systolix.ir.hir import Activation, ConvInput, ConvLayer, MaxPoolLayer
from systolix.ir.postops import AddChannels, AddTensor, Relu, Save, Scale
from tests.unit.test_hir_passes import B, RNG, SCALE, SHIFT, W, N, program

ON = SimpleNamespace(fuse_pools=True, fuse_preactivations=True)


def conv_add(x, r, out):
    """A 3x3 conv of ``x`` plus ``r`` (a residual block's last conv and its add)."""
    return ConvLayer("conv", [ConvInput(x, weights=W)], out, B, (3, 3), pads=(1, 1, 1, 1), post_ops=[AddTensor(r)],
                     ops=["Conv", "Add"], nodes=["conv", "add"], macs=1)


def bn_relu(x, out):
    return ConvLayer("bn", [ConvInput(x, diagonal=SCALE.reshape(4, 1, 1))], out, SHIFT, (1, 1), post_ops=[Relu()],
                     ops=["BatchNormalization", "Relu"], nodes=["bn", "relu"], foldable=True)


def test_a_preactivation_batch_norm_moves_into_the_tail_saving_the_raw_sum_first():
    x, r = Activation("x", 3, 5, 5, N, order="pixel"), Activation("r", 4, 5, 5, N)
    s, p, y = Activation("s", 4, 5, 5, N), Activation("p", 4, 5, 5, N), Activation("y", 4, 5, 5, N, order="pixel")
    head = ConvLayer("head", [ConvInput(x, weights=W)], r, B, (3, 3), pads=(1, 1, 1, 1), ops=["Conv"], nodes=["head"], macs=1)
    shortcut = ConvLayer("next", [ConvInput(p, diagonal=SCALE.reshape(4, 1, 1))], y, B, (1, 1), post_ops=[AddTensor(s)],
                         ops=["Conv", "Add"], nodes=["next"], macs=1)
    # ``s`` is read by the batch norm and by the next block's add: the tail saves it raw.
    before = program([head, conv_add(r, r, s), bn_relu(s, p), shortcut], Activation("x", 3, 5, 5, N, order="pixel"), y)
    before.inputs["x"] = x
    fused = ConvLayer("conv", [ConvInput(r, weights=W)], p, B, (3, 3), pads=(1, 1, 1, 1),
                      post_ops=[AddTensor(r), Save(s, node="bn"), Scale(SCALE, node="bn"), AddChannels(SHIFT, node="bn"), Relu()],
                      ops=["Conv", "Add", "BatchNormalization", "Relu"], nodes=["conv", "add", "bn", "relu"], macs=1)
    after = fuse_preactivations(before, ON)
    assert same(after, program([head, fused, shortcut], x, y))
    assert [a.name for a in after.layers[1].writes()] == ["p", "s"]
    assert same(fuse_preactivations(before, SimpleNamespace(fuse_preactivations=False)), before)
    assert same(fuse_preactivations(before, SimpleNamespace(strategy="local-vars")), before)  # the default there: off


def test_a_batch_norm_of_a_sum_nothing_else_reads_needs_no_second_save():
    x, r = Activation("x", 3, 5, 5, N, order="pixel"), Activation("r", 4, 5, 5, N)
    s, y = Activation("s", 4, 5, 5, N), Activation("y", 4, 5, 5, N, order="pixel")
    head = ConvLayer("head", [ConvInput(x, weights=W)], r, B, (3, 3), pads=(1, 1, 1, 1), ops=["Conv"], nodes=["head"], macs=1)
    before = program([head, conv_add(r, r, s), bn_relu(s, y)], x, y)
    fused = ConvLayer("conv", [ConvInput(r, weights=W)], y, B, (3, 3), pads=(1, 1, 1, 1),
                      post_ops=[AddTensor(r), Scale(SCALE, node="bn"), AddChannels(SHIFT, node="bn"), Relu()],
                      ops=["Conv", "Add", "BatchNormalization", "Relu"], nodes=["conv", "add", "bn", "relu"], macs=1)
    assert same(fuse_preactivations(before, ON), program([head, fused], x, y))


def test_a_zero_pad_folds_into_the_max_pool_reading_it():
    x, c = Activation("x", 3, 5, 5, N, order="pixel"), Activation("c", 4, 5, 5, N)
    padded, y = Activation("padded", 4, 7, 7, N), Activation("y", 4, 3, 3, N, order="pixel")
    head = ConvLayer("head", [ConvInput(x, weights=W)], c, B, (3, 3), pads=(1, 1, 1, 1), ops=["Conv"], nodes=["head"], macs=1)
    pad = ConvLayer("pad", [ConvInput(c, diagonal=np.ones((4, 1, 1), np.float32))], padded, np.zeros(4, np.float32), (1, 1),
                    pads=(1, 1, 1, 1), ops=["Pad"], nodes=["pad"], open=False)
    pool = MaxPoolLayer("pool", padded, y, (3, 3), (2, 2), ops=["MaxPool"], nodes=["pool"])
    before = program([head, pad, pool], x, y)
    taken = MaxPoolLayer("pool", c, y, (3, 3), (2, 2), pads=(1, 1, 1, 1), ops=["Pad", "MaxPool"], nodes=["pad", "pool"],
                         zero_pads=True)
    assert same(fold_pads_into_pools(before, ON), program([head, taken], x, y))
    # A pad read elsewhere too (here: a model output) stays.
    kept = program([head, pad, pool], x, y, extra_outputs=(padded,))
    assert same(fold_pads_into_pools(kept, ON), kept)


def test_a_strided_one_by_one_pool_is_a_subsampled_save_in_the_tail():
    x, r = Activation("x", 3, 5, 5, N, order="pixel"), Activation("r", 4, 5, 5, N)
    s, q, y = Activation("s", 4, 5, 5, N), Activation("q", 4, 3, 3, N), Activation("y", 4, 3, 3, N, order="pixel")
    head = ConvLayer("head", [ConvInput(x, weights=W)], r, B, (3, 3), pads=(1, 1, 1, 1), ops=["Conv"], nodes=["head"], macs=1)
    pool = MaxPoolLayer("pool", s, q, (1, 1), (2, 2), ops=["MaxPool"], nodes=["pool"])
    tail = ConvLayer("tail", [ConvInput(s, weights=W[:, :3].repeat(2, 1)[:, :4])], y, B, (3, 3), stride=(2, 2), pads=(1, 1, 1, 1),
                     post_ops=[AddTensor(q)], ops=["Conv", "Add"], nodes=["tail"], macs=1)
    before = program([head, conv_add(r, r, s), pool, tail], x, y)
    fused = ConvLayer("conv", [ConvInput(r, weights=W)], s, B, (3, 3), pads=(1, 1, 1, 1),
                      post_ops=[AddTensor(r), Save(q, stride=(2, 2), node="pool")], ops=["Conv", "Add", "MaxPool"], nodes=["conv", "add", "pool"],
                      macs=1)
    after = fuse_strided_pools(before, ON)
    assert same(after, program([head, fused, tail], x, y))
    assert [a.name for a in after.layers[1].writes()] == ["s", "q"]
    assert same(fuse_strided_pools(before, SimpleNamespace(fuse_pools=False)), before)


def test_a_pool_of_a_concatenation_is_a_pooled_save_in_each_producers_tail():
    x = Activation("x", 3, 6, 6, N, order="pixel")
    cat, y = Activation("cat", 16, 6, 6, N), Activation("y", 16, 3, 3, N, order="pixel")
    a, b = Activation("a", 8, 6, 6, N, parent=(cat, 0)), Activation("b", 8, 6, 6, N, parent=(cat, 1))
    weights = {"ca": RNG.normal(size=(8, 3, 3, 3)).astype(np.float32), "cb": RNG.normal(size=(8, 8, 3, 3)).astype(np.float32)}

    def conv(name, inp, out):
        return ConvLayer(name, [ConvInput(inp, weights=weights[name])], out, np.zeros(8, np.float32), (3, 3), pads=(1, 1, 1, 1),
                         post_ops=[Relu()], ops=["Conv", "Relu"], nodes=[name], macs=1)

    pool = MaxPoolLayer("pool", cat, y, (2, 2), (2, 2), ops=["MaxPool"], nodes=["pool"])
    before = program([conv("ca", x, a), conv("cb", a, b), pool], x, y)
    after = fuse_strided_pools(before, ON)
    ya, yb = Activation("a_pooled", 8, 3, 3, N, parent=(y, 0)), Activation("b_pooled", 8, 3, 3, N, parent=(y, 1))
    expected = [dataclasses.replace(conv(name, inp, out), post_ops=[Relu(), Save(target, pool=2, node="pool")],
                                    ops=["Conv", "Relu", "MaxPool"], nodes=[name, "pool"])
                for name, inp, out, target in (("ca", x, a, ya), ("cb", a, b, yb))]
    assert same(after, program(expected, x, y))
    assert "save a copy to b_pooled 8x3x3 in y[group 1] (max of each 2x2 window, after the save)" in after.text()
    # A 3x3/2 pool (overlapping windows) stays a layer, and so does a pool of a map another layer also writes.
    for kept in (program([conv("ca", x, a), conv("cb", a, b), dataclasses.replace(pool, kernel=(3, 3))], x, y),
                 program([conv("ca", x, a), pool], x, y)):
        assert same(fuse_strided_pools(kept, ON), kept)


def test_a_projection_shortcut_and_the_conv_it_is_added_to_become_one_layer():
    x, r = Activation("x", 3, 5, 5, N, order="pixel"), Activation("r", 4, 5, 5, N)
    c, y = Activation("c", 4, 5, 5, N), Activation("y", 4, 5, 5, N, order="pixel")
    wc, ws = RNG.normal(size=(4, 4, 1, 1)).astype(np.float32), RNG.normal(size=(4, 3, 1, 1)).astype(np.float32)
    head = ConvLayer("head", [ConvInput(x, weights=W)], r, B, (3, 3), pads=(1, 1, 1, 1), post_ops=[Relu()], ops=["Conv", "Relu"],
                     nodes=["head"], macs=1)
    last = ConvLayer("last", [ConvInput(r, weights=wc)], c, B, (1, 1), ops=["Conv"], nodes=["last"], macs=2)
    shortcut = ConvLayer("shortcut", [ConvInput(x, weights=ws)], y, SHIFT, (1, 1), post_ops=[AddTensor(c), Relu()],
                         ops=["Conv", "Add", "Relu"], nodes=["shortcut", "add", "relu"], macs=3)
    before = program([head, last, shortcut], x, y)
    merged = ConvLayer("shortcut", [ConvInput(r, weights=wc), ConvInput(x, weights=ws)], y, np.asarray(B + SHIFT, np.float32), (1, 1),
                       post_ops=[Relu()], ops=["Conv", "Conv", "Add", "Relu"], nodes=["last", "shortcut", "add", "relu"], macs=5)
    assert same(merge_residual_convs(before, None), program([head, merged], x, y))
    assert same(merge_residual_convs(before, SimpleNamespace(merge_residual_convs=False)), before)
    # The same input read by both: one input, the weights added.
    both = dataclasses.replace(shortcut, inputs=[ConvInput(r, weights=wc * 2)])
    one = ConvLayer("shortcut", [ConvInput(r, weights=wc * 3)], y, np.asarray(B + SHIFT, np.float32), (1, 1), post_ops=[Relu()],
                    ops=["Conv", "Conv", "Add", "Relu"], nodes=["last", "shortcut", "add", "relu"], macs=5)
    assert same(merge_residual_convs(program([head, last, both], x, y), None), program([head, one], x, y))
    # Kept: another geometry (a stride), a sum with post-ops of its own, a sum read elsewhere too.
    for kept in (program([head, dataclasses.replace(last, kernel=(3, 3), pads=(1, 1, 1, 1), inputs=[ConvInput(r, weights=W[:, :1].repeat(4, 1))]),
                          shortcut], x, y),
                 program([head, dataclasses.replace(last, post_ops=[Relu()]), shortcut], x, y),
                 program([head, last, shortcut], x, y, extra_outputs=(c,))):
        assert same(merge_residual_convs(kept, None), kept)


def test_a_pointwise_layer_read_only_by_a_strided_one_by_one_conv_computes_only_the_pixels_it_reads():
    x, s = Activation("x", 3, 5, 5, N, order="pixel"), Activation("s", 4, 5, 5, N)
    p, y = Activation("p", 4, 5, 5, N), Activation("y", 4, 3, 3, N, order="pixel")
    w1 = RNG.normal(size=(4, 4, 1, 1)).astype(np.float32)
    head = ConvLayer("head", [ConvInput(x, weights=W)], s, B, (3, 3), pads=(1, 1, 1, 1), ops=["Conv"], nodes=["head"], macs=1)
    down = ConvLayer("down", [ConvInput(p, weights=w1)], y, B, (1, 1), stride=(2, 2), post_ops=[Relu()], ops=["Conv", "Relu"],
                     nodes=["down"], macs=1)
    before = program([head, bn_relu(s, p), down], x, y)
    q = Activation("p", 4, 3, 3, N)
    expected = program([head, dataclasses.replace(bn_relu(s, q), stride=(2, 2)),
                        dataclasses.replace(down, inputs=[ConvInput(q, weights=w1)], stride=(1, 1))], x, y)
    after = subsample_strided_reads(before, None)
    assert same(after, expected)
    assert after.layers[1].output is after.layers[2].inputs[0].act
    assert same(subsample_strided_reads(before, SimpleNamespace(subsample_strided_reads=False)), before)
    # Kept: the pointwise output read by another layer too, and a strided conv with pads.
    for kept in (program([head, bn_relu(s, p), down], x, y, extra_outputs=(p,)),
                 program([head, bn_relu(s, p), dataclasses.replace(down, pads=(0, 0, 1, 1))], x, y)):
        assert same(subsample_strided_reads(kept, None), kept)


def test_a_block_sum_only_strided_one_by_one_convs_read_is_computed_at_their_pixels():
    # ResNet v2's last block before a strided stage: a 1x1 conv and its residual add (pointwise),
    # read by the next stage's pre-activation (which takes the stride first) and its shortcut.
    x, r = Activation("x", 3, 5, 5, N, order="pixel"), Activation("r", 4, 5, 5, N)
    s, p = Activation("s", 4, 5, 5, N), Activation("p", 4, 5, 5, N)
    t, y = Activation("t", 4, 3, 3, N), Activation("y", 4, 3, 3, N, order="pixel")
    w0, w1, w2 = (RNG.normal(size=(4, 4, 1, 1)).astype(np.float32) for _ in range(3))
    head = ConvLayer("head", [ConvInput(x, weights=W)], r, B, (3, 3), pads=(1, 1, 1, 1), ops=["Conv"], nodes=["head"], macs=1)
    last = ConvLayer("last", [ConvInput(r, weights=w0)], s, B, (1, 1), post_ops=[AddTensor(r)], ops=["Conv", "Add"],
                     nodes=["last", "add"], macs=25)
    down = ConvLayer("down", [ConvInput(p, weights=w1)], t, B, (1, 1), stride=(2, 2), post_ops=[Relu()], ops=["Conv", "Relu"],
                     nodes=["down"], macs=1)
    shortcut = ConvLayer("shortcut", [ConvInput(s, weights=w2)], y, B, (1, 1), stride=(2, 2), post_ops=[AddTensor(t)],
                         ops=["Conv", "Add"], nodes=["shortcut", "add"], macs=1)
    before = program([head, last, bn_relu(s, p), down, shortcut], x, y)
    s3, p3 = Activation("s", 4, 3, 3, N), Activation("p", 4, 3, 3, N)
    expected = program([
        head,
        dataclasses.replace(last, output=s3, stride=(2, 2), post_ops=[AddTensor(r, stride=(2, 2))]),
        dataclasses.replace(bn_relu(s3, p3), stride=(1, 1)),
        dataclasses.replace(down, inputs=[ConvInput(p3, weights=w1)], stride=(1, 1)),
        dataclasses.replace(shortcut, inputs=[ConvInput(s3, weights=w2)], stride=(1, 1))], x, y)
    after = subsample_strided_reads(before, None)
    assert same(after, expected)
    assert "add r (every 2th row's every 2th pixel)" in after.text()


def test_a_tensor_only_strided_one_by_one_convs_read_is_saved_subsampled_from_its_producers_tail():
    # ResNet v2's block sum before a strided stage: its pre-activation (which takes the stride,
    # as above) and the projection shortcut read it at stride 2; the sum's layer saves that copy.
    x, s = Activation("x", 3, 5, 5, N, order="pixel"), Activation("s", 4, 5, 5, N)
    p, t, y = Activation("p", 4, 5, 5, N), Activation("t", 4, 3, 3, N), Activation("y", 4, 3, 3, N, order="pixel")
    w1, w2 = RNG.normal(size=(4, 4, 1, 1)).astype(np.float32), RNG.normal(size=(4, 4, 1, 1)).astype(np.float32)
    head = ConvLayer("head", [ConvInput(x, weights=W)], s, B, (3, 3), pads=(1, 1, 1, 1), post_ops=[AddTensor(x)], ops=["Conv"],
                     nodes=["head"], macs=1)
    down = ConvLayer("down", [ConvInput(p, weights=w1)], t, B, (1, 1), stride=(2, 2), post_ops=[Relu()], ops=["Conv", "Relu"],
                     nodes=["down"], macs=1)
    shortcut = ConvLayer("shortcut", [ConvInput(s, weights=w2)], y, B, (1, 1), stride=(2, 2), post_ops=[AddTensor(t)],
                         ops=["Conv", "Add"], nodes=["shortcut", "add"], macs=1)
    before = program([head, bn_relu(s, p), down, shortcut], x, y)
    q, copy = Activation("p", 4, 3, 3, N), Activation("s_strided", 4, 3, 3, N)
    expected = program([
        dataclasses.replace(head, post_ops=[AddTensor(x), Save(copy, stride=(2, 2), node="bn")]),
        dataclasses.replace(bn_relu(copy, q), stride=(1, 1)),
        dataclasses.replace(down, inputs=[ConvInput(q, weights=w1)], stride=(1, 1)),
        dataclasses.replace(shortcut, inputs=[ConvInput(copy, weights=w2)], stride=(1, 1))], x, y)
    after = subsample_strided_reads(before, None)
    assert same(after, expected)
    assert after.layers[0].post_ops[-1].target is after.layers[1].inputs[0].act is after.layers[3].inputs[0].act
    # One strided reader alone (nothing to share a copy with) keeps reading the tensor itself.
    alone = program([head, dataclasses.replace(shortcut, inputs=[ConvInput(s, weights=w2)], post_ops=[])], x, y)
    assert same(subsample_strided_reads(alone, None), alone)
