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
