"""Fused layers on the generated RTL (``systolix.hir_passes.fuse_pools``, ``fuse_preactivations``):
a max pool with zero pads, conv tails saving a subsampled copy and a 2x2-pooled one and a conv tail saving its raw
sum before a batch norm and ReLU compute what the emulator does, in the clocks the rtl timing
model predicts; the pool fusions take fewer clocks than the layers they replace."""

from __future__ import annotations

import numpy as np
import pytest

import systolix
from systolix.perf.rtl_timing import simulate_rtl
from tests.e2e.test_fusion import exported
from tests.rtl.test_programs import run_rtl


def test_fused_layers_on_the_rtl_give_the_emulators_outputs_in_the_predicted_clocks():
    onnx_model = exported(size=16)
    model = systolix.compile(onnx_model, "pynqz1", host=False, fuse_preactivations=True)
    feeds = {"x": np.random.default_rng(3).normal(0, 1, (1, 3, 16, 16)).astype(np.float32)}
    emulated, rtl = run_rtl(model, feeds)
    for name in "yz":
        assert np.array_equal(emulated.raw_outputs[name], rtl.raw_outputs[name])
    (cycles,) = rtl.result.cycles
    assert cycles == simulate_rtl(model.program, model.arch).cycles
    pools = systolix.compile(onnx_model, "pynqz1", host=False, fuse_preactivations=False)
    plain = systolix.compile(onnx_model, "pynqz1", host=False, fuse_pools=False, fuse_preactivations=False)
    assert simulate_rtl(pools.program, pools.arch).cycles < simulate_rtl(plain.program, plain.arch).cycles


@pytest.mark.parametrize("kind", ["scaled_slope", "scaled_clip", "slope"])
def test_a_merged_gain_undo_and_activation_on_the_rtl_give_the_emulators_outputs_in_the_predicted_clocks(kind):
    """``merge_post_ops``' tails (the slope, or the clip's bounds, at the amplified sum in the
    register, then the scale written back: ``postops.ScaledSlope``, ``ScaledClip``; LeakyReLU's 0.1
    as two factors, ``Slope.factors``, merged or after an add): the same raw outputs on the RTL as
    on the emulator, in the clocks the rtl timing model predicts."""
    from tests.onnx_builders import ir_of
    from tests.unit.test_merge_post_ops import conv_add_leaky, conv_clip, conv_leaky

    onnx_model = {"scaled_slope": lambda: conv_leaky(cin=8, cout=12, h=6, w=6, k=1),
                  "scaled_clip": lambda: conv_clip(cin=8, cout=12, size=6),
                  "slope": lambda: conv_add_leaky(c=8, h=6, w=6)}[kind]()
    (layer,) = ir_of(onnx_model, "pynqz1", until="merge post-ops").layers
    assert layer.post_ops[-1].kind == kind
    assert (getattr(layer.post_ops[-1], "factors", None) is not None) == (kind != "scaled_clip")
    model = systolix.compile(onnx_model, "pynqz1", host=False)
    feeds = {"x": np.random.default_rng(5).normal(0, 1, (1, 8, 6, 6)).astype(np.float32)}
    emulated, rtl = run_rtl(model, feeds)
    assert np.array_equal(emulated.raw_outputs["y"], rtl.raw_outputs["y"])
    assert rtl.result.cycles == [simulate_rtl(model.program, model.arch).cycles]



def test_a_pixel_major_output_saved_in_pixel_runs_on_the_rtl_gives_the_emulators_outputs_in_fewer_clocks(monkeypatch):
    """``Emitter.save_tile``: a model output's tile shared by a batch's images (4 groups of 8
    lanes, the whole 8x8 map), its groups interleaved in staging and saved in one run an image:
    the RTL's raw outputs are the emulator's, in the clocks the rtl timing model predicts, fewer
    than group by group (a DRAM request a vector)."""
    from systolix.codegen.emitter import Emitter
    from tests.e2e.test_output_saves import head

    onnx_model = head(32, 8)
    model = systolix.compile(onnx_model, "pynqz1", host=False, batch=2, tune="rtl")  # timed on the RTL: priced for it
    x = np.random.default_rng(9).normal(0, 1, (2, 1, 16, 8, 8)).astype(np.float32)
    rtl = model.run_detailed({"x": x}, batch=True, engine="rtl")
    emulated = model.run_detailed({"x": x}, batch=True)
    assert np.array_equal(emulated.raw_outputs["y"], rtl.raw_outputs["y"])
    (cycles,) = rtl.result.cycles
    assert cycles == simulate_rtl(model.program, model.arch).cycles
    monkeypatch.setattr(Emitter, "pixel_runs", False)
    grouped = systolix.compile(onnx_model, "pynqz1", host=False, batch=2, tune="rtl")
    assert np.array_equal(grouped.run_detailed({"x": x}, batch=True).raw_outputs["y"], emulated.raw_outputs["y"])
    assert cycles < simulate_rtl(grouped.program, grouped.arch).cycles


def test_merged_reduction_parts_on_the_rtl_give_the_emulators_outputs_in_the_predicted_clocks():
    """``merge_reduction_parts``: a part's blocks into the second tile and a SIMD multiply that
    accumulates into the tile (``postops.AddPart``) give on the RTL the emulator's raw outputs,
    in the clocks the rtl timing model predicts, fewer than the parts as layers take."""
    from tests.unit.test_merge_reduction_parts import _long_map

    onnx_model = _long_map()
    model = systolix.compile(onnx_model, "ultra96v2", host=False)
    assert any(p.kind == "add_part" for layer in model.summary.segments[0].hir.layers for p in getattr(layer, "post_ops", []))
    feeds = {"x": np.random.default_rng(7).normal(0, 1, (1, 16, 6, 6)).astype(np.float32)}
    emulated, rtl = run_rtl(model, feeds)
    assert np.array_equal(emulated.raw_outputs["y"], rtl.raw_outputs["y"])
    assert rtl.result.cycles == [simulate_rtl(model.program, model.arch).cycles]
    apart = systolix.compile(onnx_model, "ultra96v2", host=False, merge_parts=False)
    assert simulate_rtl(model.program, model.arch).cycles < simulate_rtl(apart.program, apart.arch).cycles  # 30,324 < 35,741
