"""``merge_reduction_parts``: a reduction's parts summed beside their layer's tile
(``postops.AddPart``) instead of in layers of their own. The pass test builds the HIR before and
the HIR expected after; the emulator tests compile a long map reduction with and without the
merge: the same raw outputs, bit for bit (batch 1 and batch 4), in fewer clocks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

from systolix.arch import get_architecture, get_board
from systolix.compiler import compile_model
from systolix.compiler.context import CompileContext
from systolix.hir_passes.merge_reduction_parts import merge_reduction_parts
from systolix.ir import same
from systolix.ir.evaluate import run_reference
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import PART_NODE, AddPart, AddTensor, Relu, Scale
from systolix.perf.estimate import estimate
from tests.onnx_builders import ir_of, make_model
from tests.unit.test_reduction_pass import _error_against_onnxruntime, layers

ARCH = get_architecture("ultra96v2")
BOARD = get_board("ultra96-v2")
CTX = CompileContext(ARCH, merge_parts=True)


def _parts(extra_output: bool = False, part_post=None, kernel: int = 3, side: int = 6):
    """A 3x3 conv over 64 channels at 6x6 in 4 parts of 16, each part's gain undone by its own
    ``Scale``, the last adding the others' partial maps before its ReLU (``split_long_reductions``'
    form), and the one layer ``merge_reduction_parts`` makes of them."""
    rng = np.random.default_rng(0)
    x, y = Activation("x", 64, side, side, 16), Activation("y", 16, side, side, 16)
    partials = [Activation(f"y part {j}", 16, side, side, 16) for j in (1, 2, 3)]
    views = [Activation(f"x[{16 * j}:{16 * (j + 1)}]", 16, side, side, 16, parent=(x, j)) for j in range(4)]
    inputs = [ConvInput(v, weights=rng.normal(0, 0.2, (16, 16, kernel, kernel)).astype(np.float32)) for v in views]
    gains = [rng.uniform(0.1, 0.3, 16).astype(np.float32) for _ in range(4)]
    biases = [rng.normal(0, 0.05, 16).astype(np.float32) for _ in range(4)]
    pads = (1, 1, 1, 1) if kernel == 3 else (0, 0, 0, 0)
    geometry = dict(pads=pads, ops=["Conv", "Relu"], nodes=["conv", "relu"], macs=16 * 16 * kernel * kernel * side * side)
    parts = [ConvLayer(f"conv [{16 * j}:{16 * (j + 1)}]", [inputs[j]], partials[j], biases[j], (kernel, kernel),
                       post_ops=[Scale(gains[j])] + ([Relu()] if part_post == j else []), **geometry) for j in range(3)]
    last = ConvLayer("conv [48:64]", [inputs[3]], y, biases[3], (kernel, kernel),
                     post_ops=[Scale(gains[3])] + [AddTensor(p, node=PART_NODE) for p in partials] + [Relu(node="relu")],
                     **geometry)
    outputs = {"y": y} | ({"p": partials[1]} if extra_output else {})
    before = HirProgram("m", 16, parts + [last], {"x": x}, outputs, {"x": (1, 64, side, side)},
                        {k: (1, 16, side, side) for k in outputs})
    adds = [AddPart(inputs=(1 + j,), sources=[inputs[j]], bias=biases[j], values=gains[j], part=parts[j].name,
                    geometry=((kernel, kernel), (1, 1), (1, 1), pads), node=PART_NODE) for j in range(3)]
    merged = ConvLayer("conv [48:64]", [inputs[3]] + inputs[:3], y, biases[3], (kernel, kernel),
                       post_ops=[Scale(gains[3])] + adds + [Relu(node="relu")], **(geometry | {"macs": 4 * geometry["macs"]}))
    after = HirProgram("m", 16, [merged], {"x": x}, outputs, {"x": (1, 64, side, side)}, {k: (1, 16, side, side) for k in outputs})
    return before, after


def test_the_parts_become_one_layer_summing_each_beside_its_tile():
    before, expected = _parts()
    after = merge_reduction_parts(before, CTX)
    assert same(after, expected), after.text()
    assert after.layers[0].part_inputs() == {1, 2, 3}
    # The same function in float: each part's sum, its gain undone, added where its map was.
    xs = {"x": np.random.default_rng(1).normal(size=(1, 64, 6, 6)).astype(np.float32)}
    np.testing.assert_allclose(run_reference(after, xs)["y"], run_reference(before, xs)["y"], rtol=1e-6, atol=1e-6)


def test_a_part_read_elsewhere_or_with_more_post_ops_stays_a_layer():
    before, _ = _parts(extra_output=True)  # part 2's map is also a program output
    after = merge_reduction_parts(before, CTX)
    assert len(after.layers) == 2 and [p.kind for p in after.layers[-1].post_ops] == ["mul", "add_part", "add", "add_part", "relu"]
    before, _ = _parts(part_post=0)  # part 1 has a ReLU of its own
    after = merge_reduction_parts(before, CTX)
    assert [p.kind for p in after.layers[-1].post_ops] == ["mul", "add", "add_part", "add_part", "relu"]
    # A 1x1 conv streams its whole input through each weight block: merged, a band of every part's
    # channels would not fit local memory (20,480 vectors) past the third 80x80 map.
    before, _ = _parts(kernel=1, side=80)
    after = merge_reduction_parts(before, CTX)
    assert [p.kind for p in after.layers[-1].post_ops] == ["mul", "add_part", "add_part", "add", "relu"]
    before, _ = _parts()
    assert same(merge_reduction_parts(before, CompileContext(ARCH, merge_parts=False)), before)
    # A batch program merges only when asked (``compile_model`` tries both); either way it names
    # the parts it merges, or would.
    counting = CompileContext(ARCH, batch=4)
    assert same(merge_reduction_parts(before, counting), before)
    assert counting.merged_parts == {"conv [48:64]": ["conv [0:16]", "conv [16:32]", "conv [32:48]"]}
    _, expected = _parts()
    assert same(merge_reduction_parts(before, CompileContext(ARCH, batch=4, merge_batch_parts=True)), expected)


def _long_map(cout: int = 32, side: int = 6):
    """A 1x1 conv to 256 channels and ReLU, then a 3x3 conv over them and ReLU, plain: the 3x3
    conv sums 2,304 products an output, in parts (``split_long_reductions``)."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.normal(0, np.sqrt(2 / 16), (256, 16, 1, 1)).astype(np.float32),
             "b1": rng.normal(0, 0.1, 256).astype(np.float32),
             "w": rng.normal(0, np.sqrt(2 / 2304), (cout, 256, 3, 3)).astype(np.float32),
             "b": rng.normal(0, 0.1, cout).astype(np.float32)}
    return make_model([helper.make_node("Conv", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                       helper.make_node("Conv", ["r", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                       helper.make_node("Relu", ["c"], ["y"])], [("x", [1, 16, side, side])], [("y", None)], inits)


@pytest.mark.parametrize("side", [6, 40])
def test_merged_parts_give_the_same_outputs_bit_for_bit_in_fewer_clocks(side):
    """At 6x6 the map is one stage; at 40x40 the band of 256 channels takes several, each
    undoing the layer's gain before its parts (a first version undid it in the first stage only:
    the untuned audio net's outputs differed by up to 952 LSB)."""
    m = _long_map(side=side)
    merged, apart = compile_model(m, ARCH), compile_model(m, ARCH, merge_parts=False)
    # 6 parts of 48 channels at 6x6 (the weight loads are much of the array's time there), 4 of 64 at 40x40.
    count = 1 + (6 if side == 6 else 4)
    assert len(layers(apart)) == count and len(layers(merged)) == 2, (layers(apart), layers(merged))
    # The summary counts the merged parts among the conv layers (it said "5 of 2 amplified").
    assert merged.summary.conv_layers == apart.summary.conv_layers == count
    inputs = np.random.default_rng(2).normal(size=(8 if side == 6 else 2, 1, 16, side, side)).astype(np.float32)
    a, b = (c.run_detailed({"x": inputs}, batch=True).raw_outputs["y"] for c in (merged, apart))
    assert np.array_equal(a, b)
    # Within the error model's bound of onnxruntime (the same outputs as the parts as layers).
    rms_error = _error_against_onnxruntime(m, inputs)
    assert rms_error(merged) == rms_error(apart)
    fitted = {name: estimate(c.program, BOARD).cycles for name, c in (("merged", merged), ("apart", apart))}
    print(f"\n{side}x{side} long map, ultra96-v2 fitted clocks: {fitted['apart']:,.0f} parts as layers, {fitted['merged']:,.0f} merged")
    assert fitted["merged"] < 0.95 * fitted["apart"], fitted


@pytest.mark.parametrize("batch", [2, 4])
def test_a_batch_program_shares_the_merged_layers_tiles_and_gives_each_image_the_batch_1_outputs(batch):
    """A batch program is compiled with its parts merged and as layers, and the faster under the
    latency model kept (``merge_reduction_parts``' note): at 6x6 the merged layer's images share
    each weight tile, each image's parts in a second tile of its own. Each image's raw outputs are
    the batch-1 program's, bit for bit."""
    from systolix.compiler import choice_board, program_clocks

    m = _long_map()
    one, many = compile_model(m, ARCH), compile_model(m, ARCH, batch=batch)
    apart = compile_model(m, ARCH, batch=batch, merge_parts=False)
    assert len(layers(one)) == 2 and len(layers(many)) == 2 and len(layers(apart)) == 7
    plan = next(p for p in ir_of(m, ARCH, until="tile layers", batch=batch, merge_batch_parts=True).layers
                if p.layer.startswith("Conv_2"))
    tile, second = plan.accumulators[:2]
    assert plan.detail.images == batch and (tile.name, second.name) == ("tile", "second tile")
    assert second.size == tile.size and second.base == tile.end  # a second tile for every image
    assert choice_board(ARCH) == BOARD
    merged_clocks, apart_clocks = program_clocks(many, BOARD), program_clocks(apart, BOARD)
    assert merged_clocks < apart_clocks
    assert many.summary.batch_parts == (f"parts merged: {merged_clocks:,.0f} clocks against parts as layers "
                                        f"{apart_clocks:,.0f} (ultra96-v2 latency model)")
    xs = np.random.default_rng(3).normal(size=(batch, 1, 16, 6, 6)).astype(np.float32)
    raw1, raw_many = (c.run_detailed({"x": xs}, batch=True).raw_outputs["y"] for c in (one, many))
    assert np.array_equal(raw1, raw_many)


def test_a_part_without_blocks_in_a_group_adds_its_own_bias_not_the_layers():
    # Part 1's weights all zero: it has no block in the output group, and its sum there is its
    # bias alone. Its bias vector is stored all the same and the part reads it; before, it read
    # the layer's own bias (stored first), so that an own bias was added once more per such part
    # (ResNet-50 v2's head, merged, with its outputs' offsets taken out of its bias: 12x the
    # shift; a one-pixel layer's own bias had been zero until then).
    from systolix.planning.constants import ImageBuilder, conv_constants

    _, after = _parts(kernel=1, side=1)
    merged = after.layers[0]
    inputs = list(merged.inputs)
    inputs[2] = dataclasses.replace(inputs[2], weights=np.zeros_like(inputs[2].weights))
    layer = dataclasses.replace(merged, inputs=inputs)
    b = ImageBuilder(16, ARCH.data_type)
    consts = conv_constants(layer, b)
    image = b.image()
    parts = [p for p in layer.post_ops if p.kind == "add_part"]
    assert 2 not in {blk[0] for blk in consts.blocks[0]}  # the zero part has no block
    for k, part in enumerate(parts):
        np.testing.assert_array_equal(image[consts.part_bias[0][k]], b.q(part.bias))
    assert not np.array_equal(b.q(parts[1].bias), b.q(layer.bias))  # the test tells them apart


def test_a_batch_programs_dumped_irs_are_those_of_the_program_kept(tmp_path):
    """``--dump-ir`` does not change the choice: the kept batch program merges its parts, and the
    last HIR dumped is the merged one (one layer summing them), not the first compile's."""
    m = _long_map()
    steps = []
    many = compile_model(m, ARCH, batch=2, dump_ir=tmp_path, progress=lambda what, done, total: steps.append(what))
    assert many.summary.batch_parts.startswith("parts merged") and many.merged_into == {"Conv_2 [240:256]"}
    # The progress says which compile it is: the first, then the merged one.
    merged_steps = [s for s in steps if s.endswith(", parts merged")]
    assert merged_steps and len(merged_steps) < len(steps) and steps.index(merged_steps[0]) > 0
    (dumped,) = sorted(tmp_path.glob("*/*-merge-reduction-parts*"))
    assert "add part" in dumped.read_text()
