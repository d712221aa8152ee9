"""Saves of a pixel-major output (a model's outputs are laid out pixel-major, as Tensil's driver
reads them): a tile whose groups are saved together is interleaved in staging and leaves for
DRAM0 in runs of pixels (``Emitter.save_tile``), not group by group, where every vector of a
strided move is a DRAM request of its own. The tiles a batch program's images share are saved
so (a late small head like YOLOv4-tiny's 255-channel 6x6 one); each image's raw outputs stay the
batch-1 program's and within the error model's bound of onnxruntime, in fewer clocks."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import systolix
from systolix.arch import get_board
from systolix.codegen.emitter import Emitter
from systolix.ir.lir import Memory, Move, memory_of
from systolix.perf.estimate import estimate
from tests.error_model import output_bounds
from tests.onnx_builders import ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def head(cout: int, size: int, cin: int = 16, seed: int = 0):
    """A 3x3 conv and LeakyReLU, then a 1x1 conv of ``cout`` channels: the model's output."""
    rng = np.random.default_rng(seed)
    p = {"w1": rng.normal(0, 0.15, (32, cin, 3, 3)).astype(np.float32),
         "w2": rng.normal(0, 0.15, (cout, 32, 1, 1)).astype(np.float32),
         "b2": rng.normal(0, 0.1, cout).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("LeakyRelu", ["c1"], ["r1"], name="leaky", alpha=0.1),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="head", kernel_shape=[1, 1])]
    return make_model(nodes, [("x", [1, cin, size, size])], [("y", None)], p)


def dram_saves(compiled) -> list[Move]:
    lir = [i for seg in compiled.summary.segments for i in seg.lir.instructions]
    return [i for i in lir if isinstance(i, Move) and memory_of(i.target) == Memory.DRAM0 and memory_of(i.source) == Memory.LOCAL]


def test_a_shared_tile_of_a_pixel_major_output_leaves_in_one_run_an_image(monkeypatch):
    model = head(255, 6)
    (plan,) = [p for p in ir_of(model, "ultra96v2", until="tile layers", batch=4).layers if p.layer == "head"]
    assert plan.detail.images == 4 and plan.partitions == [(0, 16)]  # every group of the 6x6 map in one tile
    one, four = systolix.compile(model, "ultra96v2", host=False), systolix.compile(model, "ultra96v2", host=False, batch=4)
    x = np.random.default_rng(1).normal(0, 1, (4, 1, 16, 6, 6)).astype(np.float32)
    raw = four.run_detailed({"x": x}, batch=True).raw_outputs["y"]
    assert np.array_equal(raw, one.run_detailed({"x": x}, batch=True).raw_outputs["y"])
    got = four.run({"x": x}, batch=True)["y"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for k in range(4):
        ref = sess.run(None, {"x": x[k]})[0]
        assert float(np.max(np.abs(got[k] - ref))) <= output_bounds(model, {"x": x[k]})["y"]
    # Each image's 16 groups x 36 pixels: one contiguous move, where group by group the same
    # vectors were 16 moves of a request a vector.
    runs = [m for m in dram_saves(four) if m.count == 16 * 36]
    assert len(runs) == 4 and all(m.target_stride == 1 for m in runs)
    monkeypatch.setattr(Emitter, "pixel_runs", False)
    grouped = systolix.compile(model, "ultra96v2", host=False, batch=4)
    assert np.array_equal(grouped.run_detailed({"x": x}, batch=True).raw_outputs["y"], raw)
    assert sum(m.count for m in dram_saves(grouped) if m.target_stride == 16) == 4 * 16 * 36
    board = get_board("ultra96-v2")
    assert estimate(four.program, board).cycles < 0.9 * estimate(grouped.program, board).cycles


def _pooled_concat(output_b: bool):
    """Two 3x3 convs and ReLUs concatenated, then a 2x2 max pool and a 1x1 conv (a YOLOv4-tiny
    block); ``a`` is also read by another conv, ``b`` only through the pool (unless ``output_b``:
    then it is a model output too)."""
    rng = np.random.default_rng(0)
    inits = {k: rng.normal(0, 0.2, s).astype(np.float32) for k, s in
             (("wa", (16, 16, 3, 3)), ("wb", (16, 16, 3, 3)), ("wc", (8, 32, 1, 1)), ("wd", (8, 16, 1, 1)))}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["ha"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["ha"], ["a"]),
             helper.make_node("Conv", ["x", "wb"], ["hb"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["hb"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "wc"], ["y"]), helper.make_node("Conv", ["a", "wd"], ["z"])]
    outputs = [("y", None), ("z", None)] + ([("b", None)] if output_b else [])
    return make_model(nodes, [("x", [1, 16, 8, 8])], outputs, inits)


def test_a_concat_slice_only_its_pooled_copy_reads_is_not_saved():
    """``b``'s conv saves its pooled copy into the pool's output (``fuse_pools``); its own tile,
    a slice of the concat nothing reads whole, is no longer saved (``codegen.emit``): it writes
    the 16 vectors of its 4x4 pooled copy to DRAM, not the 64 of its 8x8 tile too (``a``'s conv,
    read by another conv, writes both); the same outputs as where ``b`` is a model output too,
    in fewer clocks."""
    lean, full = (systolix.compile(_pooled_concat(o), "ultra96v2") for o in (False, True))

    def written(compiled) -> dict[str, int]:
        seg = compiled.summary.segments[0]
        return {r.name: sum(i.count for i in seg.lir.instructions[r.first:r.end]
                            if type(i) is Move and memory_of(i.target) == Memory.DRAM0) for r in seg.lir.layers}

    assert written(lean)["Conv_0"] == 80 and written(lean)["Conv_2"] == 16
    x = np.random.default_rng(1).normal(size=(1, 16, 8, 8)).astype(np.float32)
    got_lean, got_full = lean.run({"x": x}), full.run({"x": x})
    for name in "yz":
        assert np.array_equal(got_lean[name], got_full[name])
    board = get_board("ultra96-v2")
    assert estimate(lean.program, board).cycles < estimate(full.program, board).cycles
